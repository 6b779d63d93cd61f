/*
 * quarantine.c - the failure-window rule that drains a node after repeated
 * job failures on it (quarantine.h says which failures count and why).
 */
#include "quarantine.h"
#include "units.h"

#include <signal.h>

#define QUARANTINE_LISTED 5

int quarantine_counts(int node_fail, int signal)
{
	return node_fail || signal == SIGSEGV || signal == SIGBUS || signal == SIGILL;
}

int quarantine_check(const struct qfailure *v, size_t nr, long long now_us, long long window_ms,
		     int max, struct strbuf *reason)
{
	long long from = now_us - window_ms * 1000, last_nf = 0;
	int count = 0, seen_nf = 0;
	struct strbuf list = STRBUF_INIT;

	for (size_t i = 0; i < nr; i++) {
		if (v[i].at_us < from || v[i].at_us > now_us)
			continue;
		if (v[i].node_fail) {
			if (seen_nf && v[i].at_us - last_nf < QUARANTINE_SAME_EVENT_MS * 1000LL)
				continue;
			seen_nf = 1;
			last_nf = v[i].at_us;
		}
		if (count < QUARANTINE_LISTED)
			strbuf_addf(&list, "%s%s", count ? ", " : "", v[i].what);
		else if (count == QUARANTINE_LISTED)
			strbuf_addstr(&list, ", ...");
		count++;
	}
	if (max > 0 && count >= max) {
		strbuf_reset(reason);
		strbuf_addf(reason, "auto: %d failures in ", count);
		format_duration(reason, window_ms);
		strbuf_addf(reason, " (%s)", list.buf);
	}
	strbuf_release(&list);
	return count;
}
