/*
 * beacon.c - UDP beacons and resyncs: encoding, checking, and the agent's
 * choice between a beacon and an HTTP heartbeat (see beacon.h, protocol.h).
 *
 * The datagrams are one line of printable ASCII fields separated by single
 * spaces, the MAC last.  The reader copies at most DT_BEACON_MAX bytes into a
 * NUL-terminated buffer of its own and checks every field's characters and
 * length before anything is computed, so no input reaches the MAC or the
 * caller unchecked.
 */
#include "beacon.h"
#include "json.h"
#include "sha256.h"
#include "strbuf.h"
#include "usage.h"

#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

const char *dt_beacon_result_str(enum dt_beacon_result r)
{
	switch (r) {
	case DT_BEACON_OK: return "ok";
	case DT_BEACON_TOO_LARGE: return "too_large";
	case DT_BEACON_VERSION: return "version";
	case DT_BEACON_MALFORMED: return "malformed";
	case DT_BEACON_STALE: return "stale";
	case DT_BEACON_BAD_MAC: return "bad_mac";
	}
	return "unknown";
}

/* ------------------------------------------------------------- fields */

static int name_ok(const char *s)
{
	return name_chars_ok(s, 255, "._-");
}

/* agent_started_at: a dt_timestamp() string; letters, digits and "._:+-" */
static int started_ok(const char *s)
{
	return name_chars_ok(s, sizeof(((struct dt_beacon *)0)->started) - 1, "._-:+");
}

static int hex_ok(const char *s, size_t want)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
			return 0;
	return n == want;
}

/* a decimal without sign or leading zero, at most 18 digits; -1 if not */
static long long number(const char *s)
{
	long long v = 0;
	size_t n = strlen(s);

	if (!n || n > 18 || (s[0] == '0' && n > 1))
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s - '0');
	}
	return v;
}

/*
 * Copy the datagram into buf (DT_BEACON_MAX + 1 bytes) and split it into
 * exactly `want` fields at single spaces: printable ASCII only, no empty
 * field.  Returns DT_BEACON_OK, or why not (the version is checked here:
 * field 0 must be `magic`, and `magic` with another digit is VERSION).
 */
static enum dt_beacon_result split(const void *data, size_t len, char *buf, const char *magic,
				   char **field, int want)
{
	int nr = 0;
	size_t mlen = strlen(magic);

	if (len > DT_BEACON_MAX)
		return DT_BEACON_TOO_LARGE;
	memcpy(buf, data, len);
	buf[len] = '\0';
	/* "DTB1": a datagram of the same kind but another version says so */
	if (len > mlen && !memcmp(buf, magic, mlen - 1) && buf[mlen - 1] != magic[mlen - 1] &&
	    buf[mlen - 1] >= '0' && buf[mlen - 1] <= '9')
		return DT_BEACON_VERSION;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)buf[i];

		if (c == ' ') {
			if (!i || buf[i - 1] == '\0' || i + 1 == len)
				return DT_BEACON_MALFORMED;
			buf[i] = '\0';
		} else if (c < 0x21 || c > 0x7e) {
			return DT_BEACON_MALFORMED;
		}
	}
	for (size_t i = 0; i < len && nr <= want; i += strlen(buf + i) + 1)
		if (nr++ < want)
			field[nr - 1] = buf + i;
	if (nr != want || strcmp(field[0], magic))
		return DT_BEACON_MALFORMED;
	return DT_BEACON_OK;
}

/* the MAC (field `last`) over everything before " <mac>" */
static enum dt_beacon_result check_mac(const struct dt_auth_key *key, char **field, int last)
{
	char want[DT_SHA256_HEX];

	if (!hex_ok(field[last], 64))
		return DT_BEACON_MALFORMED;
	/* put the spaces back between the signed fields, then split them again */
	for (int i = 1; i < last; i++)
		*(field[i] - 1) = ' ';
	dt_auth_mac_hex(key, field[0], want);
	for (int i = 1; i < last; i++)
		*(field[i] - 1) = '\0';
	return dt_memcmp_ct(want, field[last], 64) ? DT_BEACON_BAD_MAC : DT_BEACON_OK;
}

static int fresh(long long t, long long now_s)
{
	return t >= now_s - DT_AUTH_MAX_SKEW_S && t <= now_s + DT_AUTH_MAX_SKEW_S;
}

/* ------------------------------------------------------------- beacons */

/* buf holds n bytes of fields (snprintf's return, size the buffer): append
 * " MAC" over them; the datagram's length, or -1 when it does not fit. */
static int seal(const struct dt_auth_key *key, char *buf, int n, size_t size)
{
	char mac[DT_SHA256_HEX];

	if (n < 0 || (size_t)n + 65 >= size)
		return -1;
	dt_auth_mac_hex(key, buf, mac);
	buf[n] = ' ';
	memcpy(buf + n + 1, mac, 65);
	return n + 65;
}

int dt_beacon_encode(const struct dt_auth_key *key, const struct dt_beacon *b,
		     char *buf, size_t size)
{
	int n;

	if (!name_ok(b->node) || !started_ok(b->started) || b->seq <= 0 ||
	    b->seq > 999999999999999999LL || b->time < 0 || b->time > 999999999999999999LL ||
	    !hex_ok(b->inventory_hash, 64) || !hex_ok(b->tasks_digest, 16))
		return -1;
	if (size > DT_BEACON_MAX + 1)
		size = DT_BEACON_MAX + 1;
	n = snprintf(buf, size, DT_BEACON_MAGIC " %s %s %lld %lld %s %s", b->node, b->started,
		     b->seq, b->time, b->inventory_hash, b->tasks_digest);
	return seal(key, buf, n, size);
}

enum dt_beacon_result dt_beacon_verify(const struct dt_auth_key *key, const void *data,
				       size_t len, long long now_s, struct dt_beacon *out)
{
	char buf[DT_BEACON_MAX + 1], *f[8];
	enum dt_beacon_result r = split(data, len, buf, DT_BEACON_MAGIC, f, 8);

	if (r != DT_BEACON_OK)
		return r;
	if (!name_ok(f[1]) || !started_ok(f[2]) || number(f[3]) <= 0 || number(f[4]) < 0 ||
	    !hex_ok(f[5], 64) || !hex_ok(f[6], 16))
		return DT_BEACON_MALFORMED;
	if (!fresh(number(f[4]), now_s))
		return DT_BEACON_STALE;
	r = check_mac(key, f, 7);
	if (r != DT_BEACON_OK)
		return r;
	/* lengths were checked above (name_ok, started_ok, hex_ok) */
	memcpy(out->node, f[1], strlen(f[1]) + 1);
	memcpy(out->started, f[2], strlen(f[2]) + 1);
	out->seq = number(f[3]);
	out->time = number(f[4]);
	memcpy(out->inventory_hash, f[5], 65);
	memcpy(out->tasks_digest, f[6], 17);
	return DT_BEACON_OK;
}

/* ------------------------------------------------------------- resyncs */

int dt_resync_encode(const struct dt_auth_key *key, const char *node, long long seq,
		     long long now_s, char *buf, size_t size)
{
	int n;

	if (!name_ok(node) || seq <= 0 || seq > 999999999999999999LL || now_s < 0)
		return -1;
	if (size > DT_BEACON_MAX + 1)
		size = DT_BEACON_MAX + 1;
	n = snprintf(buf, size, DT_RESYNC_MAGIC " %s %lld %lld", node, seq, now_s);
	return seal(key, buf, n, size);
}

enum dt_beacon_result dt_resync_verify(const struct dt_auth_key *key, const void *data,
				       size_t len, long long now_s, char node[256],
				       long long *seq)
{
	char buf[DT_BEACON_MAX + 1], *f[5];
	enum dt_beacon_result r = split(data, len, buf, DT_RESYNC_MAGIC, f, 5);

	if (r != DT_BEACON_OK)
		return r;
	if (!name_ok(f[1]) || number(f[2]) <= 0 || number(f[3]) < 0)
		return DT_BEACON_MALFORMED;
	if (!fresh(number(f[3]), now_s))
		return DT_BEACON_STALE;
	r = check_mac(key, f, 4);
	if (r != DT_BEACON_OK)
		return r;
	*seq = number(f[2]);
	memcpy(node, f[1], strlen(f[1]) + 1);
	return DT_BEACON_OK;
}

/* ------------------------------------------------------------- sockets */

int dt_beacon_addr(const char *host, int port, struct sockaddr_in *sa)
{
	struct addrinfo hints, *res = NULL;
	char service[16];

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_DGRAM;
	snprintf(service, sizeof(service), "%d", port);
	memset(sa, 0, sizeof(*sa));
	if (getaddrinfo(host, service, &hints, &res) || !res)
		return -1;
	memcpy(sa, res->ai_addr, sizeof(*sa));
	freeaddrinfo(res);
	return 0;
}

int dt_beacon_send(int fd, const struct sockaddr_in *sa, const struct dt_auth_key *key,
		   const struct dt_beacon *b)
{
	char buf[DT_BEACON_MAX + 1];
	int n = dt_beacon_encode(key, b, buf, sizeof(buf));

	if (n < 0)
		return -1;
	return sendto(fd, buf, (size_t)n, MSG_DONTWAIT, (const struct sockaddr *)sa,
		      sizeof(*sa)) == n ? 0 : -1;
}

int dt_resync_recv(int fd, const struct dt_auth_key *key, long long now_s, char node[256],
		   long long *seq)
{
	char buf[DT_BEACON_MAX + 1];
	ssize_t n;

	while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC)) >= 0)
		if ((size_t)n <= DT_BEACON_MAX &&
		    dt_resync_verify(key, buf, (size_t)n, now_s, node, seq) == DT_BEACON_OK)
			return 1;
	return 0;
}

void dt_tasks_digest(const json_t *tasks, char out[DT_TASKS_DIGEST_HEX])
{
	struct strbuf sb = STRBUF_INIT;
	char hex[DT_SHA256_HEX];

	if (tasks)
		json_append(&sb, tasks);
	else
		strbuf_addstr(&sb, "[]");
	dt_sha256_hex(sb.buf, sb.len, hex);
	memcpy(out, hex, 16);
	out[16] = '\0';
	strbuf_release(&sb);
}

/* -------------------------------------------------------------- policy */

int dt_beacon_policy_due(const struct dt_beacon_policy *p, long long now_ms, long long hb_ms,
			 int changed, const char *digest)
{
	return p->supported && !changed && p->http_ok_ms && now_ms >= p->off_until_ms &&
		now_ms - p->http_ok_ms + hb_ms <= p->dead_after_ms / 2 &&
		digest && !strcmp(digest, p->digest);
}

void dt_beacon_policy_sent(struct dt_beacon_policy *p)
{
	p->sent++;
}

int dt_beacon_policy_http_ok(struct dt_beacon_policy *p, long long now_ms, const json_t *reply,
			     const char *digest)
{
	long long seen = json_get_int(reply, "beacons_seen", 0);
	long long dead = json_get_int(reply, "dead_after_ms", 0);
	int paused = 0;

	if (seen > 0)
		p->unseen = 0;
	else
		p->unseen += p->sent;
	if (p->unseen >= DT_BEACON_UNSEEN_MAX) {
		p->off_until_ms = now_ms + DT_BEACON_RETRY_MS;
		p->unseen = 0;
		paused = 1;
	}
	p->sent = 0;
	p->supported = json_is_true(json_object_get(reply, "beacon"));
	p->http_ok_ms = now_ms;
	if (dead > 0)
		p->dead_after_ms = dead;
	snprintf(p->digest, sizeof(p->digest), "%s", digest ? digest : "");
	return paused;
}

void dt_beacon_policy_resynced(struct dt_beacon_policy *p)
{
	p->sent = p->unseen = 0;   /* it answered a beacon: they do arrive */
}

void dt_beacon_policy_http_failed(struct dt_beacon_policy *p)
{
	p->supported = 0;       /* until a heartbeat is answered again */
	p->sent = 0;
}
