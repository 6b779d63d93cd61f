/*
 * config.h - typed configuration for cluster.yaml, job.yaml and sweep.yaml.
 *
 * The loader (config-yaml.c on libyaml, with one schema file each:
 * config-cluster.c, config-job.c, config-sweep.c) fills these structs,
 * applies defaults, expands ${VAR} from the environment and host ranges
 * (hostrange.h), and rejects anything it does not know.  On error a loader returns -1, leaves
 * the struct released, and appends ONE message to `err` of the form
 *
 *     path:line:col: key 'ssh.fanout': expected a positive integer, found 'lots'
 *
 * (unknown keys add "; did you mean 'xyz'?").  Callers print it and exit
 * DT_EXIT_USAGE; nothing may be started or written when loading fails.
 *
 * Ownership: every char * and array inside is owned by the struct and freed
 * by the matching *_release().  Durations are milliseconds.
 *
 * Syntax (docs/config.md): ${VAR} and ${VAR:-default} are expanded in values
 * (an unset VAR without default is an error), "$${" is a literal "${";
 * YAML anchors and aliases are refused; durations need a unit ("90s").
 */
#ifndef DT_CONFIG_H
#define DT_CONFIG_H

#include <stddef.h>
#include <jansson.h>
#include "strbuf.h"
#include "strvec.h"

#define CONFIG_MAX_BYTES (1024 * 1024)   /* larger files are refused */

/* An ordered string map (env:, labels:, trainer args). */
struct kv {
	char *key;
	char *value;
};

struct kvlist {
	struct kv *items;
	size_t nr, alloc;
};

void kvlist_set(struct kvlist *l, const char *key, const char *value);
const char *kvlist_get(const struct kvlist *l, const char *key);
void kvlist_release(struct kvlist *l);

/* Where something was written, for messages about it after loading. */
struct config_pos {
	int line, col;   /* 1-based; 0 when not from a file */
};

/* ---------------------------------------------------------------- cluster */

enum host_key_policy { HOST_KEY_TOFU, HOST_KEY_STRICT };
enum install_mode { INSTALL_LOCAL, INSTALL_SHARED };
/* backend: where ranks run (scheduler/backend.h); docs/slurm-backend.md */
enum cluster_backend { BACKEND_AGENTS, BACKEND_SLURM };

/* One extra sbatch option of `slurm:` (backend: slurm). */
struct slurm_option {
	char *name;            /* a long option name: "constraint" */
	char *value;           /* its value, or NULL for a flag (`exclusive: true`) */
	struct config_pos pos; /* the value in cluster.yaml, for sbatch's refusals */
};

#define GPUS_AUTO (-1)

struct cluster_node {
	char *name;            /* unique; defaults to host (after range expansion) */
	char *host;            /* address or hostname; "local" = this machine, direct exec */
	char *user;            /* defaults to cluster user, then $USER */
	int port;              /* defaults to ssh.port */
	int gpus;              /* GPUS_AUTO or a fixed count (tests fake GPUs with it) */
	int slots;             /* CPU slots for procs_per_node jobs; default: nproc of node (0 = unknown) */
	struct kvlist labels;
	struct config_pos pos; /* the nodes: entry it came from */
};

/*
 * fairshare: in cluster.yaml (docs/fairshare.md): the shares and quotas of
 * users and projects (accounts), and the weights of the multifactor priority
 * (scheduler/fairshare.h).  A limit of 0 is "none".
 */
struct fs_limits {
	int max_gpus;               /* GPUs in use at once */
	int max_slots;              /* CPU slots in use at once (procs_per_node jobs) */
	int max_pending;            /* jobs queued at once */
	long long max_time_ms;      /* a job's timeout: at most this (and one is required) */
};

struct fs_entity {
	char *name;
	double share;               /* 1 by default (users); a project's default is the
				     * sum of its users' shares */
	int has_share;
	char *project;              /* users: their default project (NULL: their own name) */
	struct fs_limits lim;
	int guaranteed_gpus;        /* projects: GPUs guaranteed to it, lent while it is idle */
	struct config_pos pos;
};

/* fairshare.classes.NAME: a class of jobs (like a Slurm QOS), named by a job's class: */
struct fs_class {
	char *name;
	int preemptible;            /* its running jobs may be preempted (requeued) */
	int rank;                   /* priority: among classes (higher first) */
	int signal;                 /* sent first to a preempted job (SIGUSR1) */
	long long grace_ms;         /* then this long before it is stopped (60s) */
	struct config_pos pos;
};

struct fairshare_config {
	long long half_life_ms;     /* 7d: usage decays by half in this time */
	long long max_age_ms;       /* 7d: the age factor is 1 from this age on */
	double w_fairshare, w_age, w_size;   /* 10000, 1000, 100 */
	struct fs_entity *users, *projects;
	size_t nr_users, nr_projects;
	struct fs_limits user_default;     /* fairshare.user_limits: every user's, unless
					    * the user's own entry says otherwise */
	struct fs_class *classes;
	size_t nr_classes;
	int preempt_over_share;     /* under-share work may preempt over-share work */
	long long preempt_min_run_ms;   /* 10m: ... that has run this long at least */
};

/* a user's or project's name: letters, digits, '.', '-', '_' (at most 64) */
int fairshare_name_ok(const char *s);
const struct fs_entity *fairshare_user(const struct fairshare_config *f, const char *name);
const struct fs_entity *fairshare_project(const struct fairshare_config *f, const char *name);
const struct fs_class *fairshare_class(const struct fairshare_config *f, const char *name);

struct cluster_config {
	char *path;            /* file it was loaded from */
	char *name;            /* cluster: */
	char *user;            /* user: (default $USER) */
	char *shared_dir;      /* shared_dir: (required, absolute) */
	struct {
		int port;                       /* 22 */
		int fanout;                     /* 32 */
		long long connect_timeout_ms;   /* 10s */
		long long command_timeout_ms;   /* 10m, for one remote command */
		enum host_key_policy host_key_policy;  /* tofu */
		char *identity;                 /* existing private key, or NULL = generate */
	} ssh;
	struct cluster_node *nodes;
	size_t nr_nodes;
	struct {
		char *template;                 /* path, relative paths against the file's dir,
						 * or "builtin:NAME" (cluster_setup_template()) */
		struct config_pos template_pos;
		long long timeout_ms;           /* 10m */
		struct kvlist env;
		struct kvlist vars;             /* user variables for the template */
	} setup;
	enum install_mode install;          /* local: ~/.dtctl/bin on each node */
	int job_files_world;                /* job_files: world (0644/0755), else group (0640/0750) */
	struct {
		int port;                       /* 7070 */
		long long heartbeat_ms;         /* 2s */
		long long dead_after_ms;        /* 10s */
		char *fake_health;              /* test only: dtagent --fake-health, or NULL */
	} agent;
	struct {
		char *address;                  /* how agents reach dtsched; NULL = auto */
		int port;                       /* 7071 */
		char *dashboard_address;        /* where the dashboard listens: NULL = 127.0.0.1 */
		int dashboard_port;             /* 0: a free port */
		char *socket;                   /* users' local socket to dtsched; NULL = the
						 * default (cluster_head_socket()) */
	} head;
	int team;                           /* mode: team (docs/team.md); else single-user */
	char *admin_group;                  /* Unix group on the head whose members are admins */
	struct {
		char *interface;                /* NCCL_SOCKET_IFNAME / btl_tcp_if_include, or NULL */
	} network;
	struct {
		int orted_ssh;                  /* orted_launch: ssh (default agent: agent/rsh.h) */
	} mpi;
	struct {
		int max_failures;               /* 3: drain a node after this many job failures
						 * on it (0: never) ... */
		long long failure_window_ms;    /* ... within 1h (docs/agents.md, "Node health") */
		double fabric_fraction;         /* 0.5: a fabric figure below this x its baseline
						 * or the peers' median fails (scheduler/fabric.h) */
	} health;
	json_t *notify;                     /* notify: every job's targets besides its own
					     * (notify-spec.h), or NULL */
	struct fairshare_config fairshare;
	enum cluster_backend backend;       /* backend: agents (default) or slurm */
	struct {
		/* partition:, account:, qos: (top level; NULL: Slurm's default) and
		 * where each was written, for sbatch's refusals */
		char *partition, *account, *qos;
		struct config_pos partition_pos, account_pos, qos_pos;
		struct slurm_option *options;   /* slurm: {name: value}, in file order */
		size_t nr_options;
		/* Slurm's warning before the time limit (--signal=B:<sig>@<warn_s>):
		 * slurm: {signal: USR1 or USR2, warn_s: seconds, 0: none}; USR1, 120 */
		int warn_signal;                /* SIGUSR1 or SIGUSR2 */
		int warn_s;
	} slurm;
};

int cluster_config_load(struct cluster_config *c, const char *path, struct strbuf *err);
/* Same from memory; `name` is used in messages in place of the path. */
int cluster_config_parse(struct cluster_config *c, const char *buf, size_t len,
			 const char *name, struct strbuf *err);
void cluster_config_release(struct cluster_config *c);
json_t *cluster_config_to_json(const struct cluster_config *c);
/*
 * The file setup.template names, checked readable: a path, or for
 * "builtin:NAME" the template shipped with dtctl (dt_builtin_template()).
 * 0 with the path appended to `path` (nothing without a template); -1 with
 * "cluster.yaml:line:col: ..." and what to do in err.  The loader leaves this
 * to validate and init: a copied cluster.yaml is loaded by every command.
 */
int cluster_setup_template(const struct cluster_config *c, struct strbuf *path,
			   struct strbuf *err);
/*
 * The local socket users reach dtsched on (docs/team.md): head.socket, else
 * in team mode /run/dtctl/<cluster>/dtsched.sock, else <home>/dtsched.sock.
 */
void cluster_head_socket(const struct cluster_config *c, const char *home, struct strbuf *out);
/* Index of the node called `name`, or -1. */
int cluster_find_node(const struct cluster_config *c, const char *name);

/* -------------------------------------------------------------------- job */

enum launcher { LAUNCHER_AGENT, LAUNCHER_MPI };

struct job_config {
	char *path;
	char *name;                 /* default: trainer model or argv[0] basename */
	int nodes;                  /* 1 */
	int gpus_per_node;          /* 0 when procs_per_node is used */
	int procs_per_node;         /* 0 when gpus_per_node is used; default 1 when neither */
	enum launcher launcher;     /* agent, except mpi for the built-in trainer by default */
	int has_trainer;            /* trainer: given (else command:) */
	struct kvlist trainer;      /* dttrain options, e.g. model=mlp, hidden=1024,1024 (lists joined by ',') */
	struct strvec command;      /* argv for command: */
	int shell;                  /* shell: true runs command[0] through /bin/sh -c */
	char *workdir;
	char *container;            /* container: an image file (absolute path) or an image name,
				     * or NULL: the ranks run on the node itself (docs/containers.md) */
	char *container_digest;     /* not in job.yaml: "sha256:<hex>" of the image file, taken by
				     * dtctl at submission (the agents load exactly that), or NULL */
	struct kvlist env;
	long long timeout_ms;       /* 0 = none */
	long long stall_after_ms;   /* 0 = off */
	int retries;                /* 0 */
	int strict_logging;         /* output lines that could not be logged fail the job */
	int share_group;            /* share: group: the owner's group may read env, argv,
				     * logs (docs/team.md); else only its owner and admins */
	int line_buffered;          /* C stdio of the ranks line-buffered (libstdbuf preloaded) */
	char *node_include;         /* include_nodes: host-range spec of allowed nodes, or NULL */
	char *node_exclude;         /* exclude_nodes: */
	struct kvlist labels;       /* required node labels */
	int elastic_min_nodes;      /* elastic.min_nodes: a restart may run on fewer nodes, down
				     * to this many (0: not elastic; docs/run.md) */
	int preflight;              /* before each launch on 2 nodes or more: PREFLIGHT_FABRIC
				     * (true) the fabric test of the chosen nodes (docs/agents.md,
				     * "Fabric test"), PREFLIGHT_CONNECT (not set) the agents'
				     * connectivity check (scheduler/probe.c), PREFLIGHT_NONE (false) */
	int burn_in;                /* not in job.yaml: `dtctl resume --burn-in`'s job, which may
				     * run on its include_nodes node while that is drained */
	json_t *notify;             /* notify: targets in their JSON form (notify-spec.h), or
				     * NULL (docs/notifications.md) */
	char *project;              /* project: the account its usage counts to (NULL: the
				     * user's default project, docs/fairshare.md) */
	int priority;               /* priority: orders only among the user's own jobs (0) */
	char *job_class;            /* class: one of cluster.yaml's fairshare.classes, or NULL */
};

enum { PREFLIGHT_CONNECT = -1, PREFLIGHT_NONE = 0, PREFLIGHT_FABRIC = 1 };

int job_config_load(struct job_config *j, const char *path, struct strbuf *err);
int job_config_parse(struct job_config *j, const char *buf, size_t len,
		     const char *name, struct strbuf *err);
void job_config_init(struct job_config *j);    /* the defaults, for flag-built jobs */
void job_config_release(struct job_config *j);
json_t *job_config_to_json(const struct job_config *j);
/* NULL when ref is a usable container: value, else what it must be. */
const char *container_ref_invalid(const char *ref);
/* "sha256:" and 64 lowercase hex digits */
int container_digest_valid(const char *digest);

/* ------------------------------------------------------------------ sweep */

enum sweep_method { SWEEP_GRID, SWEEP_RANDOM, SWEEP_BAYES };
enum sweep_pack { SWEEP_PACK_JOBS, SWEEP_PACK_ALLOCATION, SWEEP_PACK_ARRAY };   /* pack: */
enum sweep_goal { GOAL_MINIMIZE, GOAL_MAXIMIZE };

enum param_kind {
	PARAM_VALUE,        /* value: fixed */
	PARAM_VALUES,       /* values: [..] (categorical) */
	PARAM_UNIFORM,      /* distribution: uniform, min, max */
	PARAM_INT_UNIFORM,
	PARAM_LOG_UNIFORM,  /* log_uniform_values: min > 0 */
	PARAM_Q_UNIFORM,    /* q */
	PARAM_NORMAL,       /* mu, sigma */
	PARAM_NESTED,       /* parameters: {...} */
	PARAM_Q_LOG_UNIFORM,  /* q_log_uniform_values: round(log-uniform / q) * q */
	PARAM_Q_NORMAL,     /* round(normal / q) * q */
	PARAM_LOG_NORMAL,   /* exp(normal(mu, sigma)) */
	PARAM_Q_LOG_NORMAL, /* round(exp(normal) / q) * q */
	PARAM_BETA,         /* beta(a, b) on [0, 1] */
	PARAM_Q_BETA,       /* round(beta / q) * q */
};

/*
 * W&B's other spellings are loaded as one of the kinds above with the same
 * distribution: log_uniform and q_log_uniform (bounds are natural logs) as
 * PARAM_LOG_UNIFORM / PARAM_Q_LOG_UNIFORM with min = e^min, max = e^max;
 * inv_log_uniform_values (exp(-U(-ln max, -ln min)), which is log-uniform on
 * [min, max]) as PARAM_LOG_UNIFORM, and inv_log_uniform (bounds -ln) as
 * PARAM_LOG_UNIFORM on [e^-max, e^-min]; `probabilities:` makes a
 * PARAM_VALUES weighted.  `dist` keeps the name as written, for messages.
 */

struct sweep_param {
	char *name;                 /* dotted for nested children: "opt.lr" */
	enum param_kind kind;
	char *dist;                 /* the distribution as written, NULL when implied */
	/*
	 * PARAM_VALUE (1 item) and PARAM_VALUES: each value as written; a list
	 * or mapping as JSON text ({"env_id": "Env-v0", "max_steps": 1000}).
	 * `typed` holds the same values as JSON with the types a YAML 1.1
	 * reader (PyYAML, W&B) gives them: true, 0.1, "0.10" (quoted), null.
	 */
	struct strvec values, typed;
	struct strvec path;         /* the name's parts: ["opt", "lr"] for a nested opt.lr */
	double *probs;              /* PARAM_VALUES: probabilities: (values.nr), or NULL */
	double min, max, q, mu, sigma, a, b;
	int q_int;                  /* q written as an integer: quantized values are integers */
	struct config_pos pos;
};

struct sweep_config {
	char *path;
	enum sweep_method method;
	char *metric_name;
	enum sweep_goal goal;
	struct sweep_param *params;  /* nested parameters are flattened with dotted names */
	size_t nr_params;
	int early_terminate;         /* hyperband given */
	int et_min_iter;             /* 1 */
	double et_eta;               /* 3; above 1, W&B allows a fraction (1.5) */
	int et_max_iter;             /* 0 = unbounded; with W&B's `s`: the bound that ends
				      * the rungs at W&B's last band */
	int et_s;                    /* W&B's s (bands max_iter / eta^k, k = 1..s), 0 = none */
	int et_bands[64];            /* with s: those bands, increasing: ASHA's rungs */
	int et_nr_bands;
	struct config_pos et_pos;    /* the early_terminate: mapping */
	struct job_config job;       /* job: file (relative to the sweep file) or inline map */
	int max_trials;              /* required for random/bayes; grid: default = grid size */
	int parallel;                /* 0 = every free slot */
	int gpus_per_trial;          /* 0 = job's own */
	unsigned long long seed;     /* 0 when not given */
	int max_failures;            /* 3 */
	int checkpoint;              /* the trials checkpoint: ASHA promotes (asha.h) */
	/*
	 * pack: allocation (backend: slurm, docs/slurm-backend.md): the trials run
	 * in one Slurm allocation that dtsched fills, of allocation: {nodes, gpus}
	 * (GPUs per node), or parallel x the trial's GPUs when 0; pack: jobs (0,
	 * the default) makes each trial its own Slurm job; pack: array submits
	 * a grid or random sweep's trials as one Slurm job array (SWEEP_PACK_*).
	 */
	int pack;
	int alloc_nodes, alloc_gpus;
	struct config_pos pack_pos;  /* the pack: or allocation: key */
	char *name;                  /* name: (NULL when not given; dtctl sweep shows it) */
	/*
	 * W&B's form: `program:` and `command:` (a list with the agent's macros,
	 * default ${env} ${interpreter} ${program} ${args}), expanded for each
	 * trial by the sweep controller (sweep_wandb_argv() in scheduler/sweeps.h).
	 * The job then gives only the trial's shape (nodes, GPUs, env).
	 */
	int wandb;                   /* program: or command: given */
	char *program;               /* NULL when not given */
	struct strvec command;       /* the command: items as written (${envvar:X} expanded) */
	int run_cap;                 /* W&B's run_cap (0 = none); max_trials is the smaller */
	int has_target;              /* metric.target: no new trials once a value reaches it */
	double target;
	struct strvec notes;         /* W&B keys accepted and ignored, one line each */
	/* where the file said it, for sweep_config_check()'s messages (0: not from a file) */
	struct config_pos pos, params_pos, max_trials_pos;
};

/* W&B's name of a kind: "categorical", "log_uniform_values", ...; "parameters" for a group. */
const char *sweep_param_kind_name(enum param_kind k);

int sweep_config_load(struct sweep_config *s, const char *path, struct strbuf *err);
/*
 * The sweep checker: the rules across keys that the loader applies to a file
 * (a metric for bayes and early_terminate, W&B's way: grid and random need
 * none; a grid's discrete values and size; max_trials or run_cap; program),
 * for a struct built another way (dtsched's sweep_config_from_json()), so
 * that what validate accepts dtsched accepts.  Sets the defaults the rules
 * imply (max_trials); idempotent.  0, or -1 with one line in err:
 * "file:line:col: ..." where s has positions, else "sweep: ...".
 */
int sweep_config_check(struct sweep_config *s, struct strbuf *err);
int sweep_config_parse(struct sweep_config *s, const char *buf, size_t len,
		       const char *name, struct strbuf *err);
void sweep_config_release(struct sweep_config *s);
/* Append "file:line:col: ..." lines for what is valid but likely a mistake
 * (hyperband without max_iter); the number of lines appended. */
int sweep_config_warnings(const struct sweep_config *s, struct strbuf *out);
json_t *sweep_config_to_json(const struct sweep_config *s);
/* Number of grid points (product of value counts), or -1 if not a grid space.
 * int_uniform counts max - min + 1 points; the loader allows only value,
 * values and int_uniform in a grid sweep. */
long long sweep_grid_size(const struct sweep_config *s);

/* Which kind a file is, from its top-level keys: "cluster", "job", "sweep". */
const char *config_detect_kind(const char *path, struct strbuf *err);

/*
 * Append s as a YAML scalar that a YAML 1.1 reader (libyaml, PyYAML) reads
 * back as s: plain where that is safe, else double-quoted with JSON escapes
 * (a JSON string is a valid YAML double-quoted scalar).  With numbers_plain a
 * decimal number stays plain, so it reads back as that number (`sweep best`'s
 * parameters, to paste into a job); otherwise it is quoted and stays a string.
 * s must be valid UTF-8 (what the loader gives).
 */
void yaml_append_scalar(struct strbuf *sb, const char *s, int numbers_plain);

#endif
