/*
 * notify-spec.c - the rules of a `notify:` list and the redaction of webhook
 * URLs (notify-spec.h).  The YAML loader (config-notify.c) and dtsched
 * (jobspec.c) both call these, so a list is judged the same way wherever it
 * comes from.
 */
#include "notify-spec.h"
#include "json.h"
#include "usage.h"

#include <ctype.h>
#include <regex.h>
#include <string.h>

const char *const notify_on_names[NR_NOTIFY_ON + 1] = {
	"fail", "done", "preempt", "stall", "hang", "drain", "best", "start", "retry", NULL,
};
const char *const notify_keys[] = {
	"webhook", "format", "ca_file", "email", "exec", "on", "match", "timeout", NULL,
};
const char *const notify_formats[] = { "generic", "slack", "discord", NULL };

static int has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 1;
	return 0;
}

/* https://host[:port][/...], no spaces, control bytes or quotes */
static const char *url_invalid(const char *u)
{
	static const char *why = "an https:// URL (certificates are always verified; give "
				 "'ca_file' for a private CA)";
	const char *host = u + 8;
	size_t hl;

	if (strncmp(u, "https://", 8) || strlen(u) > 2048 || has_control(u) ||
	    strpbrk(u, " \"'\\<>`"))
		return why;
	hl = strcspn(host, "/?#");
	if (!hl || memchr(host, '@', hl))   /* no host, or user:password@ (put it in the path) */
		return "an https:// URL with a host and no user:password@";
	return NULL;
}

static const char *email_invalid(const char *e)
{
	const char *at = strchr(e, '@');

	if (!*e || e[0] == '-' || strlen(e) > 254 || !at || at == e || !at[1] ||
	    strchr(at + 1, '@'))
		return "an email address such as me@lab.example";
	for (const char *p = e; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr(".!#$%&'*+/=?^_`{|}~-@", *p))
			return "an email address (letters, digits, . _ + - and one @)";
	return NULL;
}

static const char *abs_path_invalid(const char *p, const char *what)
{
	if (p[0] != '/' || has_control(p) || strlen(p) > 4096)
		return what;
	return NULL;
}

const char *notify_value_invalid(const char *key, const json_t *v)
{
	if (!strcmp(key, "webhook"))
		return json_is_string(v) ? url_invalid(json_string_value(v)) : "an https:// URL";
	if (!strcmp(key, "format")) {
		for (size_t i = 0; json_is_string(v) && notify_formats[i]; i++)
			if (!strcmp(json_string_value(v), notify_formats[i]))
				return NULL;
		return "one of generic, slack, discord";
	}
	if (!strcmp(key, "ca_file"))
		return json_is_string(v) ? abs_path_invalid(json_string_value(v),
			"an absolute path to a PEM file of CA certificates") :
			"an absolute path to a PEM file of CA certificates";
	if (!strcmp(key, "email"))
		return json_is_string(v) ? email_invalid(json_string_value(v)) : "an email address";
	if (!strcmp(key, "exec")) {
		size_t i;
		json_t *a;

		if (!json_is_array(v) || !json_array_size(v) || json_array_size(v) > 64)
			return "a command: an absolute path, or a list [/path/cmd, arg, ...]";
		json_array_foreach(v, i, a)
			if (!json_is_string(a) || strlen(json_string_value(a)) > 4096 ||
			    (!i && abs_path_invalid(json_string_value(a), "x")))
				return "a command: an absolute path, or a list [/path/cmd, arg, ...]";
		return NULL;
	}
	if (!strcmp(key, "on")) {
		size_t i;
		json_t *a;
		static const char *why = "a list of events: fail, done, preempt, stall, hang, "
					 "drain, best, start, retry";

		if (!json_is_array(v) || !json_array_size(v))
			return why;
		json_array_foreach(v, i, a) {
			size_t k = 0;

			while (json_is_string(a) && notify_on_names[k] &&
			       strcmp(notify_on_names[k], json_string_value(a)))
				k++;
			if (!json_is_string(a) || !notify_on_names[k])
				return why;
		}
		return NULL;
	}
	if (!strcmp(key, "match")) {
		regex_t re;

		if (!json_is_string(v) || !*json_string_value(v) ||
		    strlen(json_string_value(v)) > NOTIFY_MATCH_MAX)
			return "a POSIX extended regular expression of 1 to 1024 bytes";
		/* back-references make matching exponential: dtsched runs it on every line */
		for (const char *p = json_string_value(v); *p; p++)
			if (p[0] == '\\' && p[1] >= '1' && p[1] <= '9')
				return "a regular expression without back-references (\\1 ... \\9)";
			else if (p[0] == '\\' && p[1])
				p++;
		if (regcomp(&re, json_string_value(v), REG_EXTENDED | REG_NOSUB))
			return "a valid POSIX extended regular expression ('NaN|CUDA error')";
		regfree(&re);
		return NULL;
	}
	if (!strcmp(key, "timeout_ms"))
		return json_is_integer(v) && json_integer_value(v) > 0 &&
		       json_integer_value(v) <= NOTIFY_MAX_TIMEOUT_MS ? NULL :
		       "a duration from 1ms to 10m";
	return "a known key (webhook, format, ca_file, email, exec, on, match, timeout)";
}

const char *notify_target_invalid(const json_t *t)
{
	int kinds = !!json_object_get(t, "webhook") + !!json_object_get(t, "email") +
		    !!json_object_get(t, "exec");

	if (kinds != 1)
		return kinds ? "a target is one of 'webhook', 'email' or 'exec', not several" :
			       "a target needs 'webhook', 'email' or 'exec'";
	if (!json_object_get(t, "webhook") &&
	    (json_object_get(t, "format") || json_object_get(t, "ca_file")))
		return "'format' and 'ca_file' go with a 'webhook' target only";
	if (!json_object_get(t, "on") && !json_object_get(t, "match"))
		return "a target needs 'on' (which events) or 'match' (a log pattern), or both";
	return NULL;
}

int notify_list_check(const json_t *list, struct strbuf *err)
{
	size_t i;
	json_t *t;

	if (!list || json_is_null(list))
		return 0;
	if (!json_is_array(list) || json_array_size(list) > NOTIFY_MAX_TARGETS) {
		strbuf_addf(err, "notify: expected a list of at most %d targets", NOTIFY_MAX_TARGETS);
		return -1;
	}
	json_array_foreach(list, i, t) {
		const char *key, *why;
		json_t *v;

		if (!json_is_object(t)) {
			strbuf_addf(err, "notify[%zu]: expected a mapping", i);
			return -1;
		}
		json_object_foreach((json_t *)t, key, v) {
			if ((why = notify_value_invalid(key, v))) {
				strbuf_addf(err, "notify[%zu].%s: expected %s", i, key, why);
				return -1;
			}
		}
		if ((why = notify_target_invalid(t))) {
			strbuf_addf(err, "notify[%zu]: %s", i, why);
			return -1;
		}
	}
	return 0;
}

unsigned notify_on_bits(const json_t *t)
{
	unsigned bits = 0;
	size_t i;
	json_t *a;

	json_array_foreach(json_object_get(t, "on"), i, a)
		for (int k = 0; k < NR_NOTIFY_ON; k++)
			if (json_is_string(a) && !strcmp(json_string_value(a), notify_on_names[k]))
				bits |= 1u << k;
	return bits;
}

void notify_redact_url(struct strbuf *out, const char *url)
{
	const char *host = strstr(url, "://");
	size_t hl;

	if (!host) {
		strbuf_addstr(out, "***");
		return;
	}
	host += 3;
	hl = strcspn(host, "/?#");
	if (memchr(host, '@', hl)) {   /* user info: never shown */
		const char *at = memchr(host, '@', hl);

		hl -= (size_t)(at + 1 - host);
		host = at + 1;
	}
	strbuf_add(out, url, (size_t)(strstr(url, "://") + 3 - url));
	strbuf_add(out, host, hl);
	if (host[hl])
		strbuf_addstr(out, "/***");
}

json_t *notify_list_redacted(const json_t *list)
{
	json_t *copy, *t;
	size_t i;

	if (!list)
		return NULL;
	copy = json_deep_copy(list);
	json_array_foreach(copy, i, t) {
		const char *u = json_get_str(t, "webhook", NULL);

		if (u) {
			struct strbuf sb = STRBUF_INIT;

			notify_redact_url(&sb, u);
			json_object_set_new(t, "webhook", json_string(sb.buf));
			strbuf_release(&sb);
		}
	}
	return copy;
}

void notify_redact_text(struct strbuf *s, const json_t *list)
{
	size_t i;
	json_t *t;

	json_array_foreach(list, i, t) {
		const char *u = json_get_str(t, "webhook", NULL);
		struct strbuf red = STRBUF_INIT, out = STRBUF_INIT;
		const char *p, *q;
		size_t ul;

		if (!u || !*u)
			continue;
		ul = strlen(u);
		notify_redact_url(&red, u);
		for (p = s->buf; (q = strstr(p, u)); p = q + ul) {
			strbuf_add(&out, p, (size_t)(q - p));
			strbuf_addbuf(&out, &red);
		}
		if (p != s->buf) {
			strbuf_addstr(&out, p);
			strbuf_reset(s);
			strbuf_addbuf(s, &out);
		}
		strbuf_release(&red);
		strbuf_release(&out);
	}
}
