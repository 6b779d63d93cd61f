/*
 * ckpt.c - checkpoint files (format in ckpt.h).
 */
#include "trainer/ckpt.h"
#include "json.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_MAGIC "DTCKPT01"
#define CKPT_ALIGN 64

static uint64_t fnv1a(const void *p, size_t n, uint64_t h)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ULL;
	return h;
}

static void put_u64_hex(json_t *o, const char *key, uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)v);
	json_object_set_new(o, key, json_string(buf));
}

static int get_u64_hex(const json_t *o, const char *key, uint64_t *v)
{
	const char *s = json_get_str(o, key, NULL);
	char *end;

	if (!s)
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 16);
	return errno || *end || !*s ? -1 : 0;
}

int ckpt_resolve(const char *path, struct strbuf *out, struct strbuf *err)
{
	struct stat st;
	struct strbuf latest = STRBUF_INIT;

	strbuf_reset(out);
	if (stat(path, &st)) {
		strbuf_addf(err, "cannot resume from '%s': %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		strbuf_addstr(out, path);
		return 1;
	}
	strbuf_addf(&latest, "%s/latest", path);
	if (strbuf_read_file(out, latest.buf, 4096) < 0) {
		strbuf_release(&latest);
		if (errno == ENOENT)
			return 0;
		strbuf_addf(err, "cannot read '%s/latest': %s", path, strerror(errno));
		return -1;
	}
	strbuf_trim(out);
	strbuf_reset(&latest);
	strbuf_addf(&latest, "%s/%s", path, out->buf);
	strbuf_reset(out);
	strbuf_addbuf(out, &latest);
	strbuf_release(&latest);
	return 1;
}

/* Delete step-*.ckpt files older than the `keep` newest (names sort by step). */
static void prune(const char *dir, int keep)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t nr = 0, alloc = 0;

	if (!d)
		return;
	while ((e = readdir(d)))
		if (starts_with(e->d_name, "step-") && ends_with(e->d_name, ".ckpt")) {
			ALLOC_GROW(names, nr + 1, alloc);
			names[nr++] = xstrdup(e->d_name);
		}
	closedir(d);
	for (size_t i = 0; i < nr; i++)
		for (size_t j = i + 1; j < nr; j++)
			if (strcmp(names[i], names[j]) > 0) {
				char *t = names[i];

				names[i] = names[j];
				names[j] = t;
			}
	for (size_t i = 0; i < nr; i++) {
		if (i + keep < nr) {
			struct strbuf p = STRBUF_INIT;

			strbuf_addf(&p, "%s/%s", dir, names[i]);
			unlink(p.buf);
			strbuf_release(&p);
		}
		free(names[i]);
	}
	free(names);
}

int ckpt_save(const char *dir, const struct ckpt_state *st, const float *params,
	      const float *const *state, int keep, struct strbuf *path_out, struct strbuf *err)
{
	json_t *h = json_object(), *rng = json_array();
	struct strbuf hdr = STRBUF_INIT, file = STRBUF_INIT, name = STRBUF_INIT;
	size_t bytes = st->nr_params * sizeof(float);
	uint64_t sum = 0xcbf29ce484222325ULL;
	uint32_t hlen;
	int ret = -1;

	if (mkdir(dir, 0777) && errno != EEXIST) {
		strbuf_addf(err, "cannot create checkpoint directory '%s': %s", dir, strerror(errno));
		goto out;
	}
	sum = fnv1a(params, bytes, sum);
	for (int i = 0; i < st->nr_state; i++)
		sum = fnv1a(state[i], bytes, sum);
	json_object_set_new(h, "format", json_integer(1));
	json_object_set_new(h, "arch", json_string(st->arch));
	json_object_set_new(h, "nr_params", json_integer((json_int_t)st->nr_params));
	json_object_set_new(h, "optimizer", json_string(st->optimizer));
	json_object_set_new(h, "nr_state", json_integer(st->nr_state));
	json_object_set_new(h, "step", json_integer(st->step));
	json_object_set_new(h, "epoch", json_integer(st->epoch));
	json_object_set_new(h, "batch_in_epoch", json_integer(st->batch_in_epoch));
	json_object_set_new(h, "seed", json_integer(st->seed));
	json_object_set_new(h, "world", json_integer(st->world));
	for (int i = 0; i < 4; i++) {
		char buf[24];

		snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)st->rng.s[i]);
		json_array_append_new(rng, json_string(buf));
	}
	json_object_set_new(h, "rng", rng);
	json_object_set_new(h, "loss_scale", json_real(st->loss_scale));
	json_object_set_new(h, "good_steps", json_integer(st->good_steps));
	put_u64_hex(h, "fnv1a64", sum);
	json_append(&hdr, h);
	while ((8 + 4 + hdr.len) % CKPT_ALIGN)
		strbuf_addch(&hdr, ' ');
	hlen = (uint32_t)hdr.len;
	strbuf_grow(&file, 12 + hdr.len + bytes * (1 + st->nr_state));
	strbuf_add(&file, CKPT_MAGIC, 8);
	{
		unsigned char le[4] = { hlen & 0xff, (hlen >> 8) & 0xff, (hlen >> 16) & 0xff, hlen >> 24 };

		strbuf_add(&file, le, 4);
	}
	strbuf_addbuf(&file, &hdr);
	strbuf_add(&file, params, bytes);
	for (int i = 0; i < st->nr_state; i++)
		strbuf_add(&file, state[i], bytes);
	strbuf_addf(&name, "%s/step-%09lld.ckpt", dir, st->step);
	if (write_file_atomic(name.buf, file.buf, file.len, 0644)) {
		strbuf_addf(err, "cannot write checkpoint '%s': %s", name.buf, strerror(errno));
		goto out;
	}
	strbuf_reset(&hdr);
	strbuf_addf(&hdr, "step-%09lld.ckpt\n", st->step);
	strbuf_reset(&file);
	strbuf_addf(&file, "%s/latest", dir);
	if (write_file_atomic(file.buf, hdr.buf, hdr.len, 0644)) {
		strbuf_addf(err, "cannot write '%s': %s", file.buf, strerror(errno));
		goto out;
	}
	prune(dir, keep);
	if (path_out) {
		strbuf_reset(path_out);
		strbuf_addbuf(path_out, &name);
	}
	ret = 0;
out:
	json_decref(h);
	strbuf_release(&hdr);
	strbuf_release(&file);
	strbuf_release(&name);
	return ret;
}

/* Parse magic + header from the start of buf; *data_off is where arrays begin. */
static int parse_header(const char *path, const struct strbuf *buf, struct ckpt_state *st,
			uint64_t *sum, size_t *data_off, struct strbuf *err)
{
	const unsigned char *p = (const unsigned char *)buf->buf;
	struct strbuf jerr = STRBUF_INIT;
	json_t *h, *rng;
	uint32_t hlen;
	long long v;

	memset(st, 0, sizeof(*st));
	if (buf->len < 12 || memcmp(p, CKPT_MAGIC, 8)) {
		strbuf_addf(err, "'%s' is not a dttrain checkpoint", path);
		return -1;
	}
	hlen = (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
	if (12 + (size_t)hlen > buf->len) {
		strbuf_addf(err, "'%s': truncated checkpoint header", path);
		return -1;
	}
	h = json_parse(buf->buf + 12, hlen, &jerr);
	if (!h) {
		strbuf_addf(err, "'%s': bad checkpoint header: %s", path, jerr.buf);
		strbuf_release(&jerr);
		return -1;
	}
	snprintf(st->arch, sizeof(st->arch), "%s", json_get_str(h, "arch", ""));
	snprintf(st->optimizer, sizeof(st->optimizer), "%s", json_get_str(h, "optimizer", ""));
	v = json_get_int(h, "nr_params", -1);
	st->nr_params = v > 0 ? (size_t)v : 0;
	st->nr_state = (int)json_get_int(h, "nr_state", -1);
	st->step = json_get_int(h, "step", -1);
	st->epoch = (int)json_get_int(h, "epoch", -1);
	st->batch_in_epoch = (int)json_get_int(h, "batch_in_epoch", -1);
	st->seed = json_get_int(h, "seed", 0);
	st->world = (int)json_get_int(h, "world", 0);
	st->loss_scale = json_get_real(h, "loss_scale", 1.0);
	st->good_steps = json_get_int(h, "good_steps", 0);
	rng = json_object_get(h, "rng");
	if (!st->nr_params || st->nr_state < 0 || st->nr_state > 2 || st->step < 0 ||
	    st->epoch < 0 || st->batch_in_epoch < 0 || get_u64_hex(h, "fnv1a64", sum) ||
	    !json_is_array(rng) || json_array_size(rng) != 4) {
		json_decref(h);
		strbuf_addf(err, "'%s': checkpoint header misses fields", path);
		return -1;
	}
	for (int i = 0; i < 4; i++) {
		const char *s = json_string_value(json_array_get(rng, i));

		st->rng.s[i] = s ? strtoull(s, NULL, 16) : 0;
	}
	json_decref(h);
	*data_off = 12 + hlen;
	return 0;
}

int ckpt_read_header(const char *path, struct ckpt_state *st, struct strbuf *err)
{
	struct strbuf buf = STRBUF_INIT;
	FILE *fp = fopen(path, "rb");
	char head[12];
	uint64_t sum;
	size_t off, hlen;
	int ret;

	if (!fp) {
		strbuf_addf(err, "cannot open checkpoint '%s': %s", path, strerror(errno));
		return -1;
	}
	if (fread(head, 1, 12, fp) != 12) {
		fclose(fp);
		strbuf_addf(err, "'%s' is not a dttrain checkpoint", path);
		return -1;
	}
	hlen = (unsigned char)head[8] | (size_t)(unsigned char)head[9] << 8 |
	       (size_t)(unsigned char)head[10] << 16 | (size_t)(unsigned char)head[11] << 24;
	strbuf_add(&buf, head, 12);
	if (hlen < (1 << 20)) {
		strbuf_grow(&buf, hlen);
		strbuf_setlen(&buf, 12 + fread(buf.buf + 12, 1, hlen, fp));
	}
	fclose(fp);
	ret = parse_header(path, &buf, st, &sum, &off, err);
	strbuf_release(&buf);
	return ret;
}

int ckpt_load(const char *path, const struct ckpt_state *want, struct ckpt_state *st,
	      float *params, float *const *state, struct strbuf *err)
{
	struct strbuf buf = STRBUF_INIT;
	uint64_t sum, got = 0xcbf29ce484222325ULL;
	size_t off, bytes;
	int ret = -1;

	if (strbuf_read_file(&buf, path, 0) < 0) {
		strbuf_addf(err, "cannot read checkpoint '%s': %s", path, strerror(errno));
		return -1;
	}
	if (parse_header(path, &buf, st, &sum, &off, err))
		goto out;
	if (strcmp(st->arch, want->arch) || st->nr_params != want->nr_params) {
		strbuf_addf(err, "checkpoint '%s' is for '%s' (%zu parameters), this run trains '%s' (%zu)",
			    path, st->arch, st->nr_params, want->arch, want->nr_params);
		goto out;
	}
	if (strcmp(st->optimizer, want->optimizer) || st->nr_state != want->nr_state) {
		strbuf_addf(err, "checkpoint '%s' was written by optimizer '%s', this run uses '%s'",
			    path, st->optimizer, want->optimizer);
		goto out;
	}
	bytes = st->nr_params * sizeof(float);
	if (buf.len != off + bytes * (1 + (size_t)st->nr_state)) {
		strbuf_addf(err, "'%s': checkpoint is %zu bytes, expected %zu (truncated?)", path,
			    buf.len, off + bytes * (1 + (size_t)st->nr_state));
		goto out;
	}
	got = fnv1a(buf.buf + off, bytes * (1 + (size_t)st->nr_state), got);
	if (got != sum) {
		strbuf_addf(err, "'%s': checksum mismatch, the checkpoint is corrupt", path);
		goto out;
	}
	memcpy(params, buf.buf + off, bytes);
	for (int i = 0; i < st->nr_state; i++)
		memcpy(state[i], buf.buf + off + bytes * (1 + (size_t)i), bytes);
	ret = 0;
out:
	strbuf_release(&buf);
	return ret;
}
