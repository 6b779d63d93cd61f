/*
 * slurm.c - the pure parts of dtsched's Slurm backend (slurm.h): the sbatch
 * argv and batch script of an attempt, squeue's and sinfo's lines, Slurm's
 * states, the partition's capacity and sbatch's refusals.  Nothing here runs
 * a command; backend-slurm.c does, with argv only (lib/run-command.h).
 */
#include "slurm.h"
#include "units.h"
#include "usage.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

long long slurm_time_minutes(long long timeout_ms)
{
	/* the agents start before the ranks and stop after them: a minute more */
	return (timeout_ms + 59999) / 60000 + 1;
}

/* "--name=value" (value NULL: "--name"), one argv word whatever value holds */
static void push_opt(struct strvec *argv, const char *name, const char *value)
{
	if (value)
		strvec_pushf(argv, "--%s=%s", name, value);
	else
		strvec_pushf(argv, "--%s", name);
}

void slurm_sbatch_argv(const struct cluster_config *cc, const struct slurm_request *r,
		       struct strvec *argv)
{
	struct strbuf v = STRBUF_INIT;

	strvec_push(argv, "sbatch");
	strvec_push(argv, "--parsable");
	strbuf_addf(&v, "%d", r->nodes);
	push_opt(argv, "nodes", v.buf);
	push_opt(argv, "ntasks-per-node", "1");
	/*
	 * Whole nodes: the agents of two allocations on one node would share its
	 * name in dtsched's node table (dtagent --slurm is named after the node).
	 * Packing several jobs onto a node is an allocation's job (pack:).
	 */
	push_opt(argv, "exclusive", NULL);
	strbuf_reset(&v);
	if (r->gpus_per_node > 0) {
		strbuf_addf(&v, "gpu:%d", r->gpus_per_node);
		push_opt(argv, "gres", v.buf);
	} else {
		strbuf_addf(&v, "%d", r->cpus_per_node > 0 ? r->cpus_per_node : 1);
		push_opt(argv, "cpus-per-task", v.buf);
	}
	if (r->timeout_ms > 0) {
		strbuf_reset(&v);
		strbuf_addf(&v, "%lld", slurm_time_minutes(r->timeout_ms));
		push_opt(argv, "time", v.buf);
	}
	push_opt(argv, "job-name", r->name);
	strbuf_reset(&v);
	strbuf_addf(&v, "dtctl %s attempt %d", r->job_id, r->attempt);
	if (r->head)   /* whose: a restarted dtsched finds its own (slurm_comment_parse) */
		strbuf_addf(&v, " head %s", r->head);
	push_opt(argv, "comment", v.buf);
	/* preemption and node failure requeue the job: its next attempt resumes */
	push_opt(argv, "requeue", NULL);
	/* a warning before the time limit, passed on to the ranks (slurm.h) */
	if (!r->no_warning && cc->slurm.warn_s > 0) {
		strbuf_reset(&v);
		strbuf_addf(&v, "B:%s@%d", cc->slurm.warn_signal == SIGUSR2 ? "USR2" : "USR1",
			    cc->slurm.warn_s);
		push_opt(argv, "signal", v.buf);
	}
	if (r->output_dir) {
		strbuf_reset(&v);
		for (const char *p = r->output_dir; *p; p++) {
			if (*p == '%')   /* a file name pattern: "%%" is '%' */
				strbuf_addch(&v, '%');
			strbuf_addch(&v, *p);
		}
		strbuf_addf(&v, "/%s.%d-%%j.out", r->job_id, r->attempt);
		push_opt(argv, "output", v.buf);
	}
	if (r->include)           /* host ranges: Slurm reads the same syntax */
		push_opt(argv, "nodelist", r->include);
	if (r->exclude)
		push_opt(argv, "exclude", r->exclude);
	if (cc->slurm.partition)
		push_opt(argv, "partition", cc->slurm.partition);
	if (cc->slurm.account)
		push_opt(argv, "account", cc->slurm.account);
	if (cc->slurm.qos)
		push_opt(argv, "qos", cc->slurm.qos);
	for (size_t i = 0; i < cc->slurm.nr_options; i++)
		push_opt(argv, cc->slurm.options[i].name, cc->slurm.options[i].value);
	strvec_push(argv, r->script);
	strbuf_release(&v);
}

const char *slurm_script(void)
{
	return "#!/bin/sh\n"
	       "# One attempt of a dtctl job under Slurm, submitted by dtsched\n"
	       "# (docs/slurm-backend.md).  The same text for every job: it quotes\n"
	       "# nothing, every value comes from the environment sbatch passed on.\n"
	       "# One dtagent per allocated node, as one step (dtctl slurm-agents,\n"
	       "# docs/slurm.md), joins dtsched; the ranks are its tasks, inside\n"
	       "# that step.  The cluster secret is in DTCTL_AGENT_SECRET.\n"
	       "exec \"$" SLURM_ENV_DTCTL "\" slurm-agents --head \"$" SLURM_ENV_HEAD "\"\n";
}

void slurm_pack_size(const struct slurm_capacity *c, int gpu, int job_nodes, int per_node,
		     int slots, int alloc_nodes, int alloc_per, int *nodes, int *per)
{
	int most = gpu ? c->max_gpus : c->max_cpus, total;

	if (per_node < 1)
		per_node = 1;
	if (slots < 1)
		slots = 1;
	if (alloc_nodes > 0) {
		*nodes = alloc_nodes;
		*per = alloc_per > 0 ? alloc_per : most;
	} else if (job_nodes > 1 || most < per_node) {
		/* jobs of several nodes (or more than a node holds): theirs, side by side */
		*nodes = slots * (job_nodes > 0 ? job_nodes : 1);
		*per = per_node;
	} else {
		/* whole jobs per node, as few nodes as hold them all */
		total = slots * per_node;
		*per = total < most ? total : most - most % per_node;
		*nodes = (total + *per - 1) / *per;
	}
}

/* ---------------------------------------------------------------- states */

static const struct { const char *name; enum slurm_phase phase; } phases[] = {
	{ "PENDING", SLURM_WAITING }, { "CONFIGURING", SLURM_WAITING },
	{ "REQUEUED", SLURM_WAITING }, { "REQUEUE_HOLD", SLURM_WAITING },
	{ "REQUEUE_FED", SLURM_WAITING }, { "SUSPENDED", SLURM_WAITING },
	{ "RESV_DEL_HOLD", SLURM_WAITING }, { "RESIZING", SLURM_RUNNING },
	{ "RUNNING", SLURM_RUNNING }, { "COMPLETING", SLURM_ENDING },
	{ "SIGNALING", SLURM_ENDING }, { "STAGE_OUT", SLURM_ENDING },
	{ "STOPPED", SLURM_ENDING }, { "COMPLETED", SLURM_DONE },
	{ "CANCELLED", SLURM_CANCELLED }, { "REVOKED", SLURM_CANCELLED },
	{ "TIMEOUT", SLURM_TIMEOUT }, { "DEADLINE", SLURM_TIMEOUT },
	{ "NODE_FAIL", SLURM_NODE_FAIL }, { "BOOT_FAIL", SLURM_NODE_FAIL },
	{ "PREEMPTED", SLURM_PREEMPTED }, { "FAILED", SLURM_FAILED },
	{ "OUT_OF_MEMORY", SLURM_FAILED }, { "SPECIAL_EXIT", SLURM_FAILED },
};

enum slurm_phase slurm_phase_of(const char *state)
{
	size_t n;

	if (!state)
		return SLURM_FAILED;
	n = strcspn(state, " +");   /* "CANCELLED by 1000", "RUNNING+" */

	for (size_t i = 0; i < ARRAY_SIZE(phases); i++)
		if (strlen(phases[i].name) == n && !strncmp(state, phases[i].name, n))
			return phases[i].phase;
	return SLURM_FAILED;
}

int slurm_phase_final(enum slurm_phase p)
{
	return p >= SLURM_DONE;
}

/* ---------------------------------------------------------------- output */

/* The '|'-separated fields of line into f (at most max, the last keeping any
 * further '|': a free-text field goes last); their number. */
static int split_fields(char *line, char **f, int max)
{
	int n = 0;

	for (char *p = line; n < max; ) {
		char *bar = strchr(p, '|');

		f[n++] = p;
		if (!bar || n == max)
			break;
		*bar = '\0';
		p = bar + 1;
	}
	for (int i = 0; i < n; i++) {   /* squeue pads some fields */
		size_t len = strlen(f[i]);

		while (*f[i] == ' ')
			f[i]++, len--;
		while (len && f[i][len - 1] == ' ')
			f[i][--len] = '\0';
	}
	return n;
}

static int all_digits(const char *s)
{
	return *s && strspn(s, "0123456789") == strlen(s);
}

long long slurm_time_parse(const char *s)
{
	long long v[4] = { 0 }, days = 0;
	int n = 0;
	const char *p = s;
	char *end;

	if (!s)
		return -1;
	if (!strcmp(s, "UNLIMITED"))
		return SLURM_UNLIMITED;
	if (strchr(s, '-')) {           /* days-hours:minutes:seconds */
		if (!(*p >= '0' && *p <= '9'))
			return -1;
		days = strtoll(p, &end, 10);
		if (*end != '-' || days > 100000)
			return -1;
		p = end + 1;
	}
	for (;;) {
		if (!(*p >= '0' && *p <= '9') || n == 3)
			return -1;
		v[n++] = strtoll(p, &end, 10);
		if (v[n - 1] > 1000000)
			return -1;
		if (!*end)
			break;
		if (*end != ':')
			return -1;
		p = end + 1;
	}
	if (n == 1 && !days)
		return -1;                /* a bare number is no TimeLeft squeue prints */
	if (days && n != 3)
		return -1;
	/* [[hours:]minutes:]seconds */
	return days * 86400 + (n == 3 ? v[0] * 3600 + v[1] * 60 + v[2] :
			       n == 2 ? v[0] * 60 + v[1] : v[0]);
}

int slurm_time_covers(long long sid, long long left_ms, long long timeout_ms, struct strbuf *why)
{
	if (!timeout_ms || left_ms == SLURM_UNLIMITED) {
		strbuf_addf(why, "Slurm job %lld, which still runs%s", sid,
			    timeout_ms ? " without time limit" : "");
		return 1;
	}
	if (left_ms < 0) {
		strbuf_addf(why, "squeue did not say what is left of Slurm job %lld's time limit",
			    sid);
		return 0;
	}
	strbuf_addf(why, "Slurm job %lld has ", sid);
	format_duration(why, left_ms / 1000 * 1000);
	strbuf_addstr(why, " left of its time limit");
	if (left_ms >= timeout_ms + SLURM_REUSE_MARGIN_MS) {
		strbuf_addstr(why, ", which covers the job's timeout ");
		format_duration(why, timeout_ms);
		return 1;
	}
	strbuf_addstr(why, ", less than the job's timeout ");
	format_duration(why, timeout_ms);
	if (left_ms >= timeout_ms)
		strbuf_addf(why, " and %ds to spare", SLURM_REUSE_MARGIN_MS / 1000);
	return 0;
}

int slurm_squeue_parse(const char *out, json_t *jobs)
{
	char *buf = xstrdup(out ? out : ""), *save = NULL;
	int n = 0;

	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[6];
		long long left;
		json_t *o;

		if (split_fields(line, f, 6) != 6 || !all_digits(f[0]) || !*f[1] ||
		    !all_digits(f[2]))
			continue;
		o = json_pack("{s:s,s:i,s:s,s:s}", "state", f[1], "restarts", atoi(f[2]), "nodes",
			      f[3], "reason", f[5]);
		left = slurm_time_parse(f[4]);
		if (left != -1)
			json_object_set_new(o, "left_s", json_integer(left));
		json_object_set_new(jobs, f[0], o);
		n++;
	}
	free(buf);
	return n;
}

int slurm_mine_parse(const char *out, json_t *jobs)
{
	char *buf = xstrdup(out ? out : ""), *save = NULL;
	int n = 0;

	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[7];

		if (split_fields(line, f, 7) != 7 || !all_digits(f[0]) || !*f[1] ||
		    !all_digits(f[2]))
			continue;
		json_object_set_new(jobs, f[0], json_pack("{s:s,s:i,s:s,s:s,s:s,s:s}", "state",
			f[1], "restarts", atoi(f[2]), "nodes", f[3], "reason", f[4], "command", f[5],
			"comment", f[6]));
		n++;
	}
	free(buf);
	return n;
}

int slurm_comment_parse(const char *comment, const char *head, char *job, size_t len,
			int *attempt)
{
	const char *p = comment, *id;
	size_t idlen;
	char *end;
	long n;

	if (!p || !head || !*head || !skip_prefix(p, "dtctl ", &p))
		return -1;
	id = p;
	idlen = strcspn(p, " ");
	if (!idlen || idlen >= len || !skip_prefix(p + idlen, " attempt ", &p) ||
	    !(*p >= '0' && *p <= '9'))
		return -1;
	n = strtol(p, &end, 10);
	if (n < 0 || n > 1000000 || !skip_prefix(end, " head ", &p) || strcmp(p, head))
		return -1;
	memcpy(job, id, idlen);
	job[idlen] = '\0';
	*attempt = (int)n;
	return 0;
}

/* The GPUs of a node's gres: "gpu:4", "gpu:a100:4(S:0-1)", "gpu:2,mps:100" */
static int gres_gpus(const char *g)
{
	int total = 0;

	while (g && *g) {
		const char *end = strchr(g, ',');
		size_t len = end ? (size_t)(end - g) : strlen(g);

		if (len > 4 && !strncmp(g, "gpu:", 4)) {
			const char *c = memchr(g, '(', len);
			const char *last = c ? c : g + len;
			const char *colon = last;

			while (colon > g && colon[-1] != ':')
				colon--;
			total += atoi(colon);
		}
		g = end ? end + 1 : NULL;
	}
	return total;
}

int slurm_sinfo_parse(const char *out, struct slurm_capacity *c)
{
	char *buf = xstrdup(out ? out : ""), *save = NULL;
	int n = 0;

	memset(c, 0, sizeof(*c));
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[4];
		int gpus, cpus, down;

		if (split_fields(line, f, 4) != 4 || !*f[0])
			continue;
		gpus = gres_gpus(f[1]);
		cpus = atoi(f[2]);
		/* sinfo's short states: down, drain(ed), fail, maint, ..., '*' = not responding */
		down = !strncmp(f[3], "down", 4) || !strncmp(f[3], "drain", 5) ||
		       !strncmp(f[3], "fail", 4) || !strncmp(f[3], "inval", 5);
		c->all_nodes++;
		n++;
		if (down)
			continue;
		c->nodes++;
		if (gpus > c->max_gpus)
			c->max_gpus = gpus;
		if (cpus > c->max_cpus)
			c->max_cpus = cpus;
		if (gpus > 0)
			c->nodes_with_gpus++;
	}
	free(buf);
	return n;
}

int slurm_fits(const struct slurm_capacity *c, const char *partition, int nodes, int gpus,
	       int cpus, struct strbuf *why)
{
	const char *p = partition ? partition : "(the default)";

	if (!c->all_nodes) {
		strbuf_addf(why, "Slurm's partition %s has no nodes (sinfo)", p);
		return -1;
	}
	if (gpus > c->max_gpus) {
		strbuf_addf(why, "asks for %d GPU%s per node; the most a node of Slurm's partition "
			    "%s has is %d (sinfo: gres)", gpus, gpus == 1 ? "" : "s", p, c->max_gpus);
		return -1;
	}
	if (gpus > 0 && nodes > c->nodes_with_gpus) {
		strbuf_addf(why, "asks for %d node%s with GPUs; Slurm's partition %s has %d (of %d "
			    "nodes, %d up)", nodes, nodes == 1 ? "" : "s", p, c->nodes_with_gpus,
			    c->all_nodes, c->nodes);
		return -1;
	}
	if (nodes > c->all_nodes) {
		strbuf_addf(why, "asks for %d node%s; Slurm's partition %s has %d", nodes,
			    nodes == 1 ? "" : "s", p, c->all_nodes);
		return -1;
	}
	if (!gpus && cpus > c->max_cpus) {
		strbuf_addf(why, "asks for %d CPU%s per node; the most a node of Slurm's partition "
			    "%s has is %d (sinfo)", cpus, cpus == 1 ? "" : "s", p, c->max_cpus);
		return -1;
	}
	return 0;
}

/* --------------------------------------------------------------- refusals */

static void where(struct strbuf *sb, const struct cluster_config *cc, const struct config_pos *pos,
		  const char *key, const char *value)
{
	strbuf_addf(sb, "%s:%d:%d: key '%s' ('%s')", cc->path ? cc->path : "cluster.yaml",
		    pos->line, pos->col, key, value);
}

void slurm_refusal_source(const struct cluster_config *cc, const char *msg, struct strbuf *sb)
{
	char *low = xstrdup(msg);

	for (char *p = low; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	if (cc->slurm.partition && strstr(low, "partition"))
		where(sb, cc, &cc->slurm.partition_pos, "partition", cc->slurm.partition);
	else if (cc->slurm.account && (strstr(low, "account") || strstr(low, "association")))
		where(sb, cc, &cc->slurm.account_pos, "account", cc->slurm.account);
	else if (cc->slurm.qos && strstr(low, "qos"))
		where(sb, cc, &cc->slurm.qos_pos, "qos", cc->slurm.qos);
	else {
		/* an extra option: Slurm names it ("--constraint", "feature" for -C) */
		static const struct { const char *word, *option; } hints[] = {
			{ "feature", "constraint" }, { "reservation", "reservation" },
			{ "memory", "mem" }, { "licen", "licenses" }, { "dependency", "dependency" },
			{ "begin", "begin" }, { "nodelist", "nodelist" }, { "exclude", "exclude" },
		};
		struct strbuf dashed = STRBUF_INIT;

		for (size_t i = 0; i < cc->slurm.nr_options; i++) {
			const struct slurm_option *o = &cc->slurm.options[i];
			int hit = 0;

			strbuf_reset(&dashed);
			strbuf_addf(&dashed, "--%s", o->name);
			hit = strstr(low, dashed.buf) != NULL;
			for (size_t k = 0; !hit && k < ARRAY_SIZE(hints); k++)
				hit = !strcmp(o->name, hints[k].option) && strstr(low, hints[k].word);
			if (hit) {
				strbuf_addf(sb, "%s:%d:%d: key 'slurm.%s'", cc->path ? cc->path :
					    "cluster.yaml", o->pos.line, o->pos.col, o->name);
				if (o->value)
					strbuf_addf(sb, " ('%s')", o->value);
				break;
			}
		}
		strbuf_release(&dashed);
	}
	free(low);
}
