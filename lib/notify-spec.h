/*
 * notify-spec.h - the rules of a `notify:` list (docs/notifications.md), the
 * one set that the YAML loader (config-notify.c: cluster.yaml, job.yaml,
 * sweep.yaml, with file:line:col) and dtsched (jobspec.c, a submitted job's
 * JSON) both apply, and the redaction of what a target holds secret.
 *
 * A target in its JSON form (what job_config_to_json() sends and dtsched
 * keeps), exactly one of webhook, email, exec:
 *
 *   {"webhook": "https://hooks.example/T/x", "format": "generic|slack|discord",
 *    "ca_file": "/etc/ssl/my-ca.pem", "on": ["fail", "done"],
 *    "match": "NaN|CUDA error", "timeout_ms": 10000}
 *   {"email": "me@lab", "on": ["fail"]}
 *   {"exec": ["/path/cmd", "arg"], "on": ["done"]}
 *
 * Nothing here allocates but the redaction.
 */
#ifndef DT_NOTIFY_SPEC_H
#define DT_NOTIFY_SPEC_H

#include <jansson.h>
#include "strbuf.h"

#define NOTIFY_MAX_TARGETS 16
#define NOTIFY_MAX_TIMEOUT_MS (10 * 60 * 1000LL)
#define NOTIFY_DEFAULT_TIMEOUT_MS (10 * 1000LL)
#define NOTIFY_MATCH_MAX 1024

/* the names `on:` takes, in bit order (NOTIFY_ON_FAIL = 1 << 0 ...) */
enum notify_on {
	NOTIFY_ON_FAIL, NOTIFY_ON_DONE, NOTIFY_ON_PREEMPT, NOTIFY_ON_STALL, NOTIFY_ON_HANG,
	NOTIFY_ON_DRAIN, NOTIFY_ON_BEST, NOTIFY_ON_START, NOTIFY_ON_RETRY,
	NR_NOTIFY_ON
};
extern const char *const notify_on_names[NR_NOTIFY_ON + 1];   /* NULL-terminated */
extern const char *const notify_keys[];                        /* NULL-terminated */
extern const char *const notify_formats[];                     /* NULL-terminated */

/*
 * Is v a valid value of target key `key`?  NULL when it is, else what it
 * must be ("an https:// URL ..."), for a message naming where it was
 * written.  Unknown keys are the caller's (walk_map's "did you mean").
 */
const char *notify_value_invalid(const char *key, const json_t *v);
/* The checks across one target's keys (exactly one of webhook, email, exec;
 * format and ca_file only with webhook; on: or match:); NULL or why. */
const char *notify_target_invalid(const json_t *t);
/*
 * A whole list from JSON (dtsched's side): 0, or -1 with one message
 * "notify[2].webhook: expected ..., found ..." in err.  NULL is an empty list.
 */
int notify_list_check(const json_t *list, struct strbuf *err);
/* on: as bits (1 << NOTIFY_ON_*) */
unsigned notify_on_bits(const json_t *t);

/*
 * A URL as it may be shown: scheme://host[:port]/ and "***" for anything
 * after it (Slack and Discord put the secret in the path, others in the
 * query or user info), so "https://hooks.slack.com/services/T0/B0/XYZ"
 * shows as "https://hooks.slack.com/" followed by three stars.  Appended to out.
 */
void notify_redact_url(struct strbuf *out, const char *url);
/* A copy of a notify list with every webhook URL redacted (NULL: NULL). */
json_t *notify_list_redacted(const json_t *list);
/* s with every occurrence of each webhook URL of list replaced by its
 * redacted form (for errors and log lines that may quote one). */
void notify_redact_text(struct strbuf *s, const json_t *list);

#endif
