/*
 * jobdir.c - job directories on the shared dir (see jobdir.h).
 */
#include "jobdir.h"
#include "safefile.h"
#include "config.h"
#include "dthome.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void cluster_file_default(struct strbuf *sb, const char *given)
{
	const char *env = getenv("DTCTL_CLUSTER");

	if (given)
		strbuf_addstr(sb, given);
	else if (env && *env)
		strbuf_addstr(sb, env);
	else
		dt_home_path(sb, "cluster.yaml");
}

static int is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int jobdir_resolve(struct strbuf *out, const char *job, const char *cluster_file,
		   const char *shared_dir)
{
	const char *env = getenv("DTCTL_SHARED_DIR");
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	struct cluster_config c;
	int ret = 0;

	if (strchr(job, '/')) {
		if (!is_dir(job))
			return error("no job directory '%s'", job), 1;
		strbuf_addstr(out, job);
		return 0;
	}
	if (!shared_dir && env && *env)
		shared_dir = env;
	if (shared_dir) {
		strbuf_addf(out, "%s/jobs/%s", shared_dir, job);
	} else {
		cluster_file_default(&path, cluster_file);
		if (cluster_config_load(&c, path.buf, &err) < 0) {
			error("%s", err.buf);
			if (!cluster_file)
				fprintf(stderr, "hint: run 'dtctl init -c cluster.yaml' or pass "
					"-c FILE / --shared-dir DIR\n");
			ret = 2;
			goto out;
		}
		strbuf_addf(out, "%s/jobs/%s", c.shared_dir, job);
		cluster_config_release(&c);
	}
	if (!is_dir(out->buf)) {
		error("no job '%s' (looked in '%s')", job, out->buf);
		ret = 1;
	}
out:
	strbuf_release(&path);
	strbuf_release(&err);
	return ret;
}

int jobdir_read_state(const char *jobdir, struct strbuf *sb)
{
	struct strbuf path = STRBUF_INIT;
	ssize_t n;

	strbuf_addf(&path, "%s/state", jobdir);
	strbuf_reset(sb);
	n = sf_read_path(path.buf, sb, 4096, NULL);
	strbuf_release(&path);
	if (n < 0)
		return -1;
	strbuf_trim(sb);
	return 0;
}

int job_state_is_final(const char *state)
{
	static const char *final[] = { "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
				       "NODE_FAIL", "PRUNED" };

	for (size_t i = 0; i < ARRAY_SIZE(final); i++)
		if (!strcmp(state, final[i]))
			return 1;
	return 0;
}
