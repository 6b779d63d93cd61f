/*
 * parse-options.c - the declarative option parser (see parse-options.h).
 */
#include "parse-options.h"
#include "strbuf.h"
#include "strvec.h"
#include "usage.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int takes_arg(const struct option *o)
{
	if (!o)   /* an unknown option ends in usage first; the analyzers cannot see dt_exit */
		return 0;
	switch (o->type) {
	case OPTION_STRING:
	case OPTION_INT:
	case OPTION_DOUBLE:
	case OPTION_STRVEC:
		return 1;
	case OPTION_CALLBACK:
		return !(o->flags & PARSE_OPT_NOARG);
	default:
		return 0;
	}
}

static void opt_name(struct strbuf *sb, const struct option *o, int is_short)
{
	if (is_short)
		strbuf_addf(sb, "-%c", o->short_name);
	else
		strbuf_addf(sb, "--%s", o->long_name);
}

static int set_value(const struct option *o, const char *arg, int unset, int is_short)
{
	struct strbuf name = STRBUF_INIT;
	char *end;
	int ret = 0;

	opt_name(&name, o, is_short);
	switch (o->type) {
	case OPTION_BOOL:
		*(int *)o->value = !unset;
		break;
	case OPTION_COUNT:
		*(int *)o->value = unset ? 0 : *(int *)o->value + 1;
		break;
	case OPTION_STRING:
		*(const char **)o->value = unset ? NULL : arg;
		break;
	case OPTION_STRVEC:
		if (unset)
			strvec_clear(o->value);
		else
			strvec_push(o->value, arg);
		break;
	case OPTION_INT: {
		long v;

		errno = 0;
		v = strtol(arg, &end, 10);
		if (!*arg || *end || errno || v < INT_MIN || v > INT_MAX)
			ret = error("option '%s' expects an integer, got '%s'", name.buf, arg);
		else
			*(int *)o->value = (int)v;
		break;
	}
	case OPTION_DOUBLE: {
		double v;

		errno = 0;
		v = strtod(arg, &end);
		if (!*arg || *end || errno || !isfinite(v))
			ret = error("option '%s' expects a number, got '%s'", name.buf, arg);
		else
			*(double *)o->value = v;
		break;
	}
	case OPTION_CALLBACK:
		ret = o->callback(o, unset ? NULL : arg);
		break;
	default:
		break;
	}
	strbuf_release(&name);
	return ret;
}

/* see parse_options_common() */
static const struct option *common_opts;
static void (*common_after)(void);

void parse_options_common(const struct option *common, void (*after)(void))
{
	common_opts = common;
	common_after = after;
}

static void print_opts(FILE *out, const struct option *opts)
{
	for (; opts->type != OPTION_END; opts++) {
		struct strbuf left = STRBUF_INIT;

		if (opts->type == OPTION_GROUP) {
			fprintf(out, "\n%s\n", opts->help);
			continue;
		}
		strbuf_addstr(&left, "    ");
		if (opts->short_name)
			strbuf_addf(&left, "-%c%s", opts->short_name, opts->long_name ? ", " : "");
		if (opts->long_name)
			strbuf_addf(&left, "--%s", opts->long_name);
		if (takes_arg(opts))
			strbuf_addf(&left, " <%s>", opts->argh ? opts->argh : "value");
		if (left.len >= 30)
			fprintf(out, "%s\n%30s%s\n", left.buf, "", opts->help);
		else
			fprintf(out, "%-30s%s\n", left.buf, opts->help);
		strbuf_release(&left);
	}
}

static enum help_format help_format;
static const char *help_name, *help_summary;

void parse_options_help_format(enum help_format format, const char *name, const char *summary)
{
	help_format = format;
	help_name = name;
	help_summary = summary;
}

void roff_escape(FILE *out, const char *s)
{
	if (*s == '.' || *s == '\'')
		fputs("\\&", out);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\e", out);
		else if (*s == '-')
			fputs("\\-", out);
		else
			fputc(*s, out);
		if (*s == '\n' && (s[1] == '.' || s[1] == '\''))
			fputs("\\&", out);
	}
}

static void man_opts(FILE *out, const struct option *opts)
{
	for (; opts->type != OPTION_END; opts++) {
		if (opts->type == OPTION_GROUP) {
			fputs(".SS ", out);
			roff_escape(out, opts->help);
			fputc('\n', out);
			continue;
		}
		fputs(".TP\n", out);
		if (opts->short_name)
			fprintf(out, "\\fB\\-%c\\fR%s", opts->short_name, opts->long_name ? ", " : "");
		if (opts->long_name) {
			fputs("\\fB\\-\\-", out);
			roff_escape(out, opts->long_name);
			fputs("\\fR", out);
		}
		if (takes_arg(opts)) {
			fputs(" \\fI", out);
			roff_escape(out, opts->argh ? opts->argh : "value");
			fputs("\\fR", out);
		}
		fputc('\n', out);
		roff_escape(out, opts->help);
		fputc('\n', out);
	}
}

static void usage_man(FILE *out, const char *const *usagestr, const struct option *opts)
{
	const char *name = help_name ? help_name : "dtctl";
	struct strbuf upper = STRBUF_INIT;

	for (const char *p = name; *p; p++)
		strbuf_addch(&upper, (char)toupper((unsigned char)*p));
	fprintf(out, ".TH %s 1 \"\" \"dtctl %s\" \"dtctl manual\"\n.SH NAME\n", upper.buf, DT_VERSION);
	roff_escape(out, name);
	fputs(" \\- ", out);
	roff_escape(out, help_summary ? help_summary : "");
	fputs("\n.SH SYNOPSIS\n.nf\n", out);
	for (; *usagestr && **usagestr; usagestr++) {
		roff_escape(out, *usagestr);
		fputc('\n', out);
	}
	fputs(".fi\n", out);
	if (*usagestr) {
		/* laid out as in --help: examples and lists keep their lines */
		fputs(".SH DESCRIPTION\n.nf\n", out);
		for (usagestr++; *usagestr; usagestr++) {
			roff_escape(out, *usagestr);
			fputc('\n', out);
		}
		fputs(".fi\n", out);
	}
	fputs(".SH OPTIONS\n", out);
	man_opts(out, opts);
	if (common_opts)
		man_opts(out, common_opts);
	fputs(".TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\nshow this help\n", out);
	if (strcmp(name, "dtctl"))
		fputs(".SH SEE ALSO\n.BR dtctl (1)\n", out);
	strbuf_release(&upper);
}

/* `dtctl agents (start | stop)`, `dtctl sweep list`: the word after the command's name */
static void usage_subcommands(FILE *out, const char *const *usagestr)
{
	for (; *usagestr && **usagestr; usagestr++) {
		const char *p = *usagestr;
		size_t n;

		for (int skip = 0; skip < 2; skip++) {   /* "dtctl", the command */
			p += strcspn(p, " ");
			p += strspn(p, " ");
		}
		if (*p == '(') {
			for (p++; *p && *p != ')'; p += strspn(p, " |")) {
				n = strcspn(p, " |)");
				fprintf(out, "%.*s\n", (int)n, p);
				p += n;
			}
			continue;
		}
		n = strspn(p, "abcdefghijklmnopqrstuvwxyz-");
		if (n && (!p[n] || p[n] == ' '))
			fprintf(out, "%.*s\n", (int)n, p);
	}
}

static void words_opts(FILE *out, const struct option *opts)
{
	for (; opts->type != OPTION_END; opts++) {
		if (opts->long_name && !(opts->flags & PARSE_OPT_ALIAS))
			fprintf(out, "--%s\n", opts->long_name);
		if (opts->short_name)
			fprintf(out, "-%c\n", opts->short_name);
	}
}

void usage_with_options(const char *const *usagestr, const struct option *opts, int err)
{
	FILE *out = err ? stderr : stdout;
	int text = 0;   /* past the first empty line: a description, indented */

	if (!err && help_format == HELP_MAN) {
		usage_man(out, usagestr, opts);
		return;
	}
	if (!err && help_format == HELP_WORDS) {
		usage_subcommands(out, usagestr);
		words_opts(out, opts);
		if (common_opts)
			words_opts(out, common_opts);
		fputs("--help\n-h\n", out);
		return;
	}
	fprintf(out, "usage: %s\n", usagestr[0]);
	for (usagestr++; *usagestr; usagestr++) {
		if (!**usagestr)
			text = 1;
		fprintf(out, "%s%s\n", !**usagestr ? "" : text ? "    " : "   or: ", *usagestr);
	}
	fputc('\n', out);
	print_opts(out, opts);
	if (common_opts)
		print_opts(out, common_opts);
	fprintf(out, "    %-26s%s\n", "-h, --help", "show this help");
}

static noreturn void NORETURN_usage_error(const char *const *usagestr, const struct option *opts)
{
	usage_with_options(usagestr, opts, 1);
	dt_exit(DT_EXIT_USAGE);
}

/* 1 for true/yes/on/1, 0 for false/no/off/0 (any case), -1 for anything else */
static int bool_word(const char *w)
{
	static const char *const yes[] = { "true", "yes", "on", "1" }, *const no[] = { "false", "no", "off", "0" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(*yes); i++) {
		if (!strcasecmp(w, yes[i]))
			return 1;
		if (!strcasecmp(w, no[i]))
			return 0;
	}
	return -1;
}

static const struct option *find_long_in(const struct option *opts, const char *name, size_t n,
					 int *unset)
{
	const struct option *o;

	*unset = 0;
	for (o = opts; o->type != OPTION_END; o++)
		if (o->long_name && strlen(o->long_name) == n && !strncmp(o->long_name, name, n) &&
		    !(o->flags & PARSE_OPT_ALIAS))
			return o;
	if (n > 3 && !strncmp(name, "no-", 3)) {
		for (o = opts; o->type != OPTION_END; o++)
			if (o->long_name && strlen(o->long_name) == n - 3 &&
			    !strncmp(o->long_name, name + 3, n - 3) && !takes_arg(o)) {
				*unset = 1;
				return o;
			}
	}
	return NULL;
}

static const struct option *find_long(const struct option *opts, const char *name, size_t n,
				      int *unset)
{
	const struct option *o = find_long_in(opts, name, n, unset);

	return o || !common_opts ? o : find_long_in(common_opts, name, n, unset);
}

static const struct option *find_short(const struct option *opts, int c)
{
	for (const struct option *o = opts; o->type != OPTION_END; o++)
		if (o->short_name == c)
			return o;
	return NULL;
}

int parse_options(int argc, const char **argv, const struct option *opts,
		  const char *const *usagestr, int flags)
{
	int out = 0, i;

	for (i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--")) {
			if (flags & PARSE_OPT_KEEP_DASHDASH)
				argv[out++] = a;
			for (i++; i < argc; i++)
				argv[out++] = argv[i];
			break;
		}
		if (a[0] != '-' || !a[1]) {
			if (flags & PARSE_OPT_STOP_AT_NON_OPTION) {
				for (; i < argc; i++)
					argv[out++] = argv[i];
				break;
			}
			argv[out++] = a;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage_with_options(usagestr, opts, 0);
			dt_exit(DT_EXIT_OK);   /* through the exit hook, as every exit of the parser */
		}
		if (a[1] == '-') {
			const char *name = a + 2, *eq = strchr(name, '=');
			size_t n = eq ? (size_t)(eq - name) : strlen(name);
			int unset;
			const struct option *o = find_long(opts, name, n, &unset);
			const char *arg = NULL;

			if (!o) {
				error("unknown option '%.*s'", (int)(n + 2), a);
				NORETURN_usage_error(usagestr, opts);
			}
			if (takes_arg(o)) {
				if (eq)
					arg = eq + 1;
				else if (i + 1 < argc)
					arg = argv[++i];
				else {
					error("option '--%s' requires a value", o->long_name);
					NORETURN_usage_error(usagestr, opts);
				}
			} else if (eq && o->type == OPTION_BOOL) {
				/* --flag=true|false: what job.yaml's trainer: map and sweep
				 * parameters give (YAML booleans; W&B writes True/False) */
				int v = bool_word(eq + 1);

				if (v < 0) {
					error("option '--%s' is a switch: give it alone, or =true / =false "
					      "(got '%s')", o->long_name, eq + 1);
					NORETURN_usage_error(usagestr, opts);
				}
				unset = unset ? v : !v;
			} else if (eq) {
				error("option '--%s' takes no value", o->long_name);
				NORETURN_usage_error(usagestr, opts);
			}
			if (set_value(o, arg, unset, 0))
				dt_exit(DT_EXIT_USAGE);
			continue;
		}
		/* short options, possibly bundled: -vvv, -n2, -n 2 */
		for (const char *p = a + 1; *p; p++) {
			const struct option *o = find_short(opts, *p);

			if (!o && common_opts)
				o = find_short(common_opts, *p);
			if (!o) {
				error("unknown switch '%c'", *p);
				NORETURN_usage_error(usagestr, opts);
			}
			if (takes_arg(o)) {
				const char *arg;

				if (p[1])
					arg = p + 1;
				else if (i + 1 < argc)
					arg = argv[++i];
				else {
					error("switch '%c' requires a value", *p);
					NORETURN_usage_error(usagestr, opts);
				}
				if (set_value(o, arg, 0, 1))
					dt_exit(DT_EXIT_USAGE);
				break;
			}
			if (set_value(o, NULL, 0, 1))
				dt_exit(DT_EXIT_USAGE);
		}
	}
	argv[out] = NULL;
	if (common_after) {
		void (*after)(void) = common_after;

		common_after = NULL;   /* once: subcommands may parse again */
		after();
	}
	return out;
}
