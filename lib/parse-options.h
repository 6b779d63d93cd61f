/*
 * parse-options.h - one declarative option parser for every program.
 *
 * Describe the options as an array ending in OPT_END(), then call
 * parse_options().  -h/--help is built in (usage on stdout, exit 0); a bad
 * option prints the error and the usage on stderr and exits DT_EXIT_USAGE.
 * Non-option arguments are moved to the front of argv and counted in the
 * return value; "--" ends option parsing (it is dropped unless
 * PARSE_OPT_KEEP_DASHDASH).
 *
 *	int json = 0; const char *nodes = NULL;
 *	struct option opts[] = {
 *		OPT_BOOL(0, "json", &json, "print JSON"),
 *		OPT_STRING('n', "nodes", &nodes, "spec", "only these nodes"),
 *		OPT_END(),
 *	};
 *	argc = parse_options(argc, argv, opts, usage, 0);
 */
#ifndef DT_PARSE_OPTIONS_H
#define DT_PARSE_OPTIONS_H

#include <stdio.h>

enum parse_opt_type {
	OPTION_END,
	OPTION_GROUP,
	OPTION_BOOL,
	OPTION_COUNT,
	OPTION_STRING,
	OPTION_INT,
	OPTION_DOUBLE,
	OPTION_STRVEC,
	OPTION_CALLBACK,
};

struct option;
/* A callback gets the option and its argument (NULL for flags); return 0 or
 * error(...) to reject the value. */
typedef int parse_opt_cb(const struct option *opt, const char *arg);

#define PARSE_OPT_NOARG 1      /* callback takes no argument */
#define PARSE_OPT_ALIAS 2      /* a second short letter of the option before it with this
				* long name (-N of -n/--num-nodes): listed in --help, not
				* completed twice, never matched by its long name */

struct option {
	enum parse_opt_type type;
	int short_name;
	const char *long_name;
	void *value;
	const char *argh;
	const char *help;
	int flags;
	parse_opt_cb *callback;
};

#define OPT_END() { OPTION_END, 0, NULL, NULL, NULL, NULL, 0, NULL }
#define OPT_GROUP(h) { OPTION_GROUP, 0, NULL, NULL, NULL, (h), 0, NULL }
#define OPT_BOOL(s, l, v, h) { OPTION_BOOL, (s), (l), (v), NULL, (h), 0, NULL }
#define OPT_COUNT(s, l, v, h) { OPTION_COUNT, (s), (l), (v), NULL, (h), 0, NULL }
#define OPT_STRING(s, l, v, a, h) { OPTION_STRING, (s), (l), (v), (a), (h), 0, NULL }
#define OPT_INT(s, l, v, h) { OPTION_INT, (s), (l), (v), "n", (h), 0, NULL }
/* -N as Slurm's spelling of -n/--num-nodes: the same value, another letter */
#define OPT_INT_ALIAS(s, l, v, h) { OPTION_INT, (s), (l), (v), "n", (h), PARSE_OPT_ALIAS, NULL }
#define OPT_DOUBLE(s, l, v, h) { OPTION_DOUBLE, (s), (l), (v), "x", (h), 0, NULL }
#define OPT_STRVEC(s, l, v, a, h) { OPTION_STRVEC, (s), (l), (v), (a), (h), 0, NULL }
#define OPT_CALLBACK(s, l, v, a, h, cb) { OPTION_CALLBACK, (s), (l), (v), (a), (h), 0, (cb) }
#define OPT_CALLBACK_NOARG(s, l, v, h, cb) \
	{ OPTION_CALLBACK, (s), (l), (v), NULL, (h), PARSE_OPT_NOARG, (cb) }

#define PARSE_OPT_STOP_AT_NON_OPTION 1
#define PARSE_OPT_KEEP_DASHDASH 2

int parse_options(int argc, const char **argv, const struct option *opts,
		  const char *const *usagestr, int flags);
/*
 * Options every later parse_options() call of this program accepts after the
 * caller's own, listed in every --help (dtctl: -c/--cluster, so that it means
 * the same in every command), and a function called once, after the first
 * parse_options() call has parsed its arguments (dtctl: the command table's
 * setup, see cli/cluster.h).  NULL for none.
 */
void parse_options_common(const struct option *common, void (*after)(void));
/* Print usage (to stderr when err, else stdout). */
void usage_with_options(const char *const *usagestr, const struct option *opts, int err);

/*
 * What -h/--help (usage_with_options() to stdout) prints, so that the man
 * pages and the shell completion come from the same option tables as --help:
 * HELP_TEXT the usage (the default); HELP_MAN a man page in roff, titled
 * `name` (e.g. "dtctl-run") with `summary` as its NAME line; HELP_WORDS the
 * words a shell may complete: the subcommands the usage lines name
 * (`dtctl agents (start | stop)`, `dtctl sweep list`), then every option.
 */
enum help_format { HELP_TEXT, HELP_MAN, HELP_WORDS };
void parse_options_help_format(enum help_format format, const char *name, const char *summary);
/* roff text for a man page: backslashes and hyphens escaped, no line starting with '.' */
void roff_escape(FILE *out, const char *s);

#endif
