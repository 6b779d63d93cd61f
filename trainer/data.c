/*
 * data.c - synthetic, IDX, CSV and text datasets, and the distributed sampler.
 */
#include "trainer/data.h"
#include "trainer/kernels.h"
#include "rng.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DATA_MAX_BYTES ((size_t)4 << 30)

void dataset_release(struct dataset *d)
{
	free(d->x);
	free(d->y);
	free(d->text);
	memset(d, 0, sizeof(*d));
}

static void dataset_alloc(struct dataset *d, int n, int dim, int classes)
{
	d->n = n;
	d->dim = dim;
	d->classes = classes;
	d->x = xcalloc((size_t)(n ? n : 1) * dim, sizeof(float));
	d->y = xcalloc(n ? n : 1, sizeof(int));
}

void dataset_gather(const struct dataset *d, const int *idx, int n, float *x, int *y)
{
	for (int i = 0; d->text && i < n; i++) {
		const unsigned char *w = d->text + idx[i];

		for (int j = 0; j < d->dim; j++)
			x[(size_t)i * d->dim + j] = (float)w[j];
		y[i] = 0;
	}
	for (int i = 0; !d->text && i < n; i++) {
		memcpy(x + (size_t)i * d->dim, d->x + (size_t)idx[i] * d->dim,
		       (size_t)d->dim * sizeof(float));
		y[i] = d->y[idx[i]];
	}
}

/* ------------------------------------------------------------ synthetic */

/*
 * Inputs are standard normal; the label is the argmax of a fixed random
 * two-layer tanh network (the teacher) applied to the input.  Train and
 * validation rows come from separate streams, so changing one size does not
 * change the other set.
 */
static void synth_fill(struct dataset *d, uint64_t seed, uint64_t stream,
		       const float *w1, const float *b1, const float *w2, int hidden)
{
	struct rng r;
	float *h = xmalloc((size_t)(d->n ? d->n : 1) * hidden * sizeof(float));
	float *logits = xmalloc((size_t)(d->n ? d->n : 1) * d->classes * sizeof(float));
	size_t total = (size_t)d->n * d->dim;

	rng_seed(&r, rng_mix(seed, 0x5d47a11ULL, stream));
	for (size_t i = 0; i < total; i++)
		d->x[i] = rng_normal(&r);
	if (d->n) {
		gemm_cpu(0, 1, d->n, hidden, d->dim, 1.0f, d->x, d->dim, w1, d->dim, 0.0f, h, hidden);
		for (size_t i = 0; i < (size_t)d->n * hidden; i++)
			h[i] = tanhf(h[i] + b1[i % hidden]);
		gemm_cpu(0, 1, d->n, d->classes, hidden, 1.0f, h, hidden, w2, hidden, 0.0f,
			 logits, d->classes);
	}
	for (int i = 0; i < d->n; i++) {
		const float *row = logits + (size_t)i * d->classes;
		int best = 0;

		for (int c = 1; c < d->classes; c++)
			if (row[c] > row[best])
				best = c;
		d->y[i] = best;
	}
	free(h);
	free(logits);
}

static int synthetic_load(struct dataset *train, struct dataset *val, const struct data_opts *o,
			  struct strbuf *err)
{
	int dim = o->input_dim, c = o->classes, hid = o->teacher_hidden;
	float *w1, *b1, *w2;
	struct rng r;

	if (dim <= 0 || c < 2 || hid <= 0 || o->train_size <= 0 || o->val_size < 0) {
		strbuf_addf(err, "synthetic data needs input-dim > 0, classes >= 2 and train-size > 0");
		return -1;
	}
	w1 = xmalloc((size_t)hid * dim * sizeof(float));
	b1 = xmalloc((size_t)hid * sizeof(float));
	w2 = xmalloc((size_t)c * hid * sizeof(float));
	rng_seed(&r, rng_mix(o->seed, 0x7eac4e7ULL, 0));
	for (size_t i = 0; i < (size_t)hid * dim; i++)
		w1[i] = rng_normal(&r) / sqrtf((float)dim);
	for (int i = 0; i < hid; i++)
		b1[i] = 0.5f * rng_normal(&r);
	for (size_t i = 0; i < (size_t)c * hid; i++)
		w2[i] = rng_normal(&r) / sqrtf((float)hid);
	dataset_alloc(train, o->train_size, dim, c);
	dataset_alloc(val, o->val_size, dim, c);
	synth_fill(train, o->seed, 1, w1, b1, w2, hid);
	synth_fill(val, o->seed, 2, w1, b1, w2, hid);
	free(w1);
	free(b1);
	free(w2);
	return 0;
}

/* ------------------------------------------------------------------ IDX */

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/*
 * Read one IDX file: magic 00 00 <type> <ndims>, ndims big-endian sizes, then
 * the data.  Returns the values as float in *out, with *n the first dimension
 * and *row the product of the others.  Unsigned bytes are scaled to [0, 1]
 * when scale_bytes (images), kept as is otherwise (labels).
 */
static int idx_read(const char *path, float **out, int *n, int *row, int scale_bytes,
		    struct strbuf *err)
{
	struct strbuf sb = STRBUF_INIT;
	const unsigned char *p;
	size_t count = 1, esize, need;
	int type, ndims;

	if (strbuf_read_file(&sb, path, DATA_MAX_BYTES) < 0) {
		strbuf_addf(err, "cannot read '%s': %s", path, strerror(errno));
		goto fail;
	}
	p = (const unsigned char *)sb.buf;
	if (sb.len < 4 || p[0] || p[1]) {
		strbuf_addf(err, "'%s' is not an IDX file (bad magic)", path);
		goto fail;
	}
	type = p[2];
	ndims = p[3];
	esize = type == 0x08 || type == 0x09 ? 1 : type == 0x0B ? 2 :
		type == 0x0C || type == 0x0D ? 4 : type == 0x0E ? 8 : 0;
	if (!esize || ndims < 1 || sb.len < 4 + 4 * (size_t)ndims) {
		strbuf_addf(err, "'%s': unsupported IDX type 0x%02x or %d dimensions", path, type, ndims);
		goto fail;
	}
	for (int i = 0; i < ndims; i++)
		count *= be32(p + 4 + 4 * i);
	need = 4 + 4 * (size_t)ndims + count * esize;
	if (sb.len != need || be32(p + 4) == 0 || be32(p + 4) > INT32_MAX) {
		strbuf_addf(err, "'%s': IDX header says %zu bytes, file has %zu", path, need, sb.len);
		goto fail;
	}
	*n = (int)be32(p + 4);
	*row = (int)(count / (size_t)*n);
	*out = xmalloc(count * sizeof(float));
	p += 4 + 4 * (size_t)ndims;
	for (size_t i = 0; i < count; i++) {
		const unsigned char *e = p + i * esize;
		uint32_t u;
		float f;

		switch (type) {
		case 0x08: (*out)[i] = (float)e[0]; break;
		case 0x09: (*out)[i] = (float)(signed char)e[0]; break;
		case 0x0B: (*out)[i] = (float)(int16_t)(e[0] << 8 | e[1]); break;
		case 0x0C: (*out)[i] = (float)(int32_t)be32(e); break;
		case 0x0D:
			u = be32(e);
			memcpy(&f, &u, sizeof(f));
			(*out)[i] = f;
			break;
		default: {
			uint64_t v = (uint64_t)be32(e) << 32 | be32(e + 4);
			double d;

			memcpy(&d, &v, sizeof(d));
			(*out)[i] = (float)d;
		}
		}
	}
	if (type == 0x08 && scale_bytes)
		for (size_t i = 0; i < count; i++)
			(*out)[i] *= 1.0f / 255.0f;
	strbuf_release(&sb);
	return 0;
fail:
	strbuf_release(&sb);
	return -1;
}

static int idx_pair(struct dataset *d, const char *images, const char *labels, struct strbuf *err)
{
	float *x = NULL, *y = NULL;
	int n, dim, ln, lrow;

	if (idx_read(images, &x, &n, &dim, 1, err) || idx_read(labels, &y, &ln, &lrow, 0, err))
		goto fail;
	if (ln != n || lrow != 1) {
		strbuf_addf(err, "'%s' has %d labels for %d images in '%s'", labels, ln, n, images);
		goto fail;
	}
	d->n = n;
	d->dim = dim;
	d->x = x;
	d->y = xmalloc((size_t)n * sizeof(int));
	for (int i = 0; i < n; i++) {
		if (y[i] < 0 || y[i] != floorf(y[i]) || y[i] > 65535) {
			strbuf_addf(err, "'%s': label %d is %g, not a class number", labels, i, y[i]);
			free(y);
			return -1;
		}
		d->y[i] = (int)y[i];
	}
	free(y);
	return 0;
fail:
	free(x);
	free(y);
	return -1;
}

static int file_exists(const char *path)
{
	struct stat st;

	return !stat(path, &st);
}

/* ------------------------------------------------------------------ CSV */

/* Parse one line of numbers; returns the count, or -1 when a field is not a number. */
static int csv_parse_line(char *line, float **vals, size_t *alloc)
{
	int nr = 0;
	char *p = line;

	for (;;) {
		char *end;
		double v;

		while (*p == ' ' || *p == '\t')
			p++;
		errno = 0;
		v = strtod(p, &end);
		if (end == p || errno)
			return -1;
		while (*end == ' ' || *end == '\t' || *end == '\r')
			end++;
		ALLOC_GROW(*vals, (size_t)nr + 1, *alloc);
		(*vals)[nr++] = (float)v;
		if (!*end)
			return nr;
		if (*end != ',')
			return -1;
		p = end + 1;
	}
}

static int csv_load(struct dataset *d, const char *path, struct strbuf *err)
{
	FILE *fp = fopen(path, "r");
	struct strbuf line = STRBUF_INIT;
	float *vals = NULL, *x = NULL;
	size_t valloc = 0, xalloc = 0, yalloc = 0;
	int *y = NULL, lineno = 0, width = -1, n = 0;

	if (!fp) {
		strbuf_addf(err, "cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	while (strbuf_getline(&line, fp) != EOF) {
		int nr;

		lineno++;
		strbuf_trim(&line);
		if (!line.len)
			continue;
		nr = csv_parse_line(line.buf, &vals, &valloc);
		if (nr < 0) {
			if (n == 0 && width < 0 && lineno == 1)
				continue;   /* header */
			strbuf_addf(err, "%s:%d: expected numbers separated by commas", path, lineno);
			goto fail;
		}
		if (width < 0)
			width = nr;
		if (nr != width || nr < 2) {
			strbuf_addf(err, "%s:%d: %d fields, expected %d (label, then features)",
				    path, lineno, nr, width < 2 ? 2 : width);
			goto fail;
		}
		if (vals[0] < 0 || vals[0] != floorf(vals[0]) || vals[0] > 65535) {
			strbuf_addf(err, "%s:%d: label '%g' is not a class number (0, 1, ...)",
				    path, lineno, vals[0]);
			goto fail;
		}
		ALLOC_GROW(x, (size_t)(n + 1) * (width - 1), xalloc);
		ALLOC_GROW(y, (size_t)n + 1, yalloc);
		memcpy(x + (size_t)n * (width - 1), vals + 1, (size_t)(width - 1) * sizeof(float));
		y[n++] = (int)vals[0];
	}
	if (!n) {
		strbuf_addf(err, "'%s' has no data rows", path);
		goto fail;
	}
	fclose(fp);
	strbuf_release(&line);
	free(vals);
	d->n = n;
	d->dim = width - 1;
	d->x = x;
	d->y = y;
	return 0;
fail:
	fclose(fp);
	strbuf_release(&line);
	free(vals);
	free(x);
	free(y);
	return -1;
}

/* ----------------------------------------------------------------- text */

static int text_load(struct dataset *train, struct dataset *val, const char *path,
		     const struct data_opts *o, struct strbuf *err)
{
	struct strbuf sb = STRBUF_INIT;
	size_t ntrain, nval, win = (size_t)o->context + 1;
	int nwin;

	if (o->context < 1 || o->vocab < 2 || o->vocab > 256) {
		strbuf_addf(err, "text data needs --context >= 1 and --vocab in [2, 256] (got %d, %d)",
			    o->context, o->vocab);
		return -1;
	}
	if (strbuf_read_file(&sb, path, DATA_MAX_BYTES) < 0) {
		strbuf_addf(err, "cannot read '%s': %s", path, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < sb.len; i++)
		if ((unsigned char)sb.buf[i] >= o->vocab) {
			strbuf_addf(err, "'%s': byte 0x%02x at offset %zu is not below --vocab %d",
				    path, (unsigned char)sb.buf[i], i, o->vocab);
			goto fail;
		}
	nval = (size_t)((double)sb.len * o->val_fraction);
	ntrain = sb.len - nval;
	if (ntrain < win + 1 || ntrain - win > INT32_MAX) {
		strbuf_addf(err, "'%s': %zu bytes of training text, need more than --context + 1 = %zu "
			    "(and below 2 GiB)", path, ntrain, win);
		goto fail;
	}
	train->n = (int)(ntrain - win + 1);
	train->dim = (int)win;
	train->classes = o->vocab;
	train->text = xmalloc(ntrain);
	memcpy(train->text, sb.buf, ntrain);
	/* validation: non-overlapping windows (the last byte of one is the first of the next) */
	nwin = nval >= win ? (int)((nval - 1) / (win - 1)) : 0;
	if (nwin > o->val_size)
		nwin = o->val_size;
	dataset_alloc(val, nwin, (int)win, o->vocab);
	for (int i = 0; i < nwin; i++)
		for (size_t j = 0; j < win; j++)
			val->x[(size_t)i * win + j] =
				(float)(unsigned char)sb.buf[ntrain + (size_t)i * (win - 1) + j];
	strbuf_release(&sb);
	return 0;
fail:
	strbuf_release(&sb);
	return -1;
}

/* Hold out a seeded val_fraction of `all` as validation. */
static void split_holdout(struct dataset *all, struct dataset *train, struct dataset *val,
			  double frac, uint64_t seed)
{
	int nval = (int)lround(all->n * frac), *idx = xmalloc((size_t)all->n * sizeof(int));
	struct rng r;

	if (nval >= all->n)
		nval = all->n - 1;
	for (int i = 0; i < all->n; i++)
		idx[i] = i;
	rng_seed(&r, rng_mix(seed, 0x401d07ULL, 0));
	rng_shuffle(&r, idx, (size_t)all->n);
	dataset_alloc(val, nval, all->dim, all->classes);
	dataset_alloc(train, all->n - nval, all->dim, all->classes);
	/* keep the file order inside each part: readable and deterministic */
	{
		char *is_val = xcalloc((size_t)all->n, 1);
		int t = 0, v = 0;

		for (int i = 0; i < nval; i++)
			is_val[idx[i]] = 1;
		for (int i = 0; i < all->n; i++) {
			struct dataset *d = is_val[i] ? val : train;
			int j = is_val[i] ? v++ : t++;

			memcpy(d->x + (size_t)j * all->dim, all->x + (size_t)i * all->dim,
			       (size_t)all->dim * sizeof(float));
			d->y[j] = all->y[i];
		}
		free(is_val);
	}
	free(idx);
	dataset_release(all);
}

static int max_label(const struct dataset *d)
{
	int m = -1;

	for (int i = 0; i < d->n; i++)
		if (d->y[i] > m)
			m = d->y[i];
	return m;
}

int data_load(struct dataset *train, struct dataset *val, const struct data_opts *o,
	      struct strbuf *err)
{
	struct dataset all = { 0 };
	const char *arg;
	int have_val = 0;

	memset(train, 0, sizeof(*train));
	memset(val, 0, sizeof(*val));
	if (!strcmp(o->spec, "synthetic"))
		return synthetic_load(train, val, o, err);
	if (skip_prefix(o->spec, "text:", &arg))
		return text_load(train, val, arg, o, err);
	if (skip_prefix(o->spec, "idx:", &arg)) {
		const char *comma = strchr(arg, ',');
		struct strbuf a = STRBUF_INIT, b = STRBUF_INIT;
		int ret;

		if (comma) {
			strbuf_add(&a, arg, (size_t)(comma - arg));
			strbuf_addstr(&b, comma + 1);
			ret = idx_pair(&all, a.buf, b.buf, err);
		} else {
			strbuf_addf(&a, "%s/train-images-idx3-ubyte", arg);
			strbuf_addf(&b, "%s/train-labels-idx1-ubyte", arg);
			ret = idx_pair(&all, a.buf, b.buf, err);
			strbuf_reset(&a);
			strbuf_reset(&b);
			strbuf_addf(&a, "%s/t10k-images-idx3-ubyte", arg);
			strbuf_addf(&b, "%s/t10k-labels-idx1-ubyte", arg);
			if (!ret && file_exists(a.buf) && file_exists(b.buf)) {
				ret = idx_pair(val, a.buf, b.buf, err);
				have_val = 1;
			}
		}
		strbuf_release(&a);
		strbuf_release(&b);
		if (ret)
			goto fail;
	} else if (skip_prefix(o->spec, "csv:", &arg)) {
		if (csv_load(&all, arg, err))
			goto fail;
	} else {
		strbuf_addf(err, "unknown data source '%s' (synthetic, idx:PATH, csv:PATH or text:PATH)", o->spec);
		return -1;
	}
	if (have_val) {
		if (val->dim != all.dim) {
			strbuf_addf(err, "validation rows have %d features, training rows %d",
				    val->dim, all.dim);
			goto fail;
		}
		*train = all;
	} else if (o->val_fraction > 0 && all.n > 1) {
		split_holdout(&all, train, val, o->val_fraction, o->seed);
	} else {
		*train = all;
		dataset_alloc(val, 0, all.dim, 0);
	}
	train->classes = max_label(train) + 1;
	if (max_label(val) + 1 > train->classes)
		train->classes = max_label(val) + 1;
	if (train->classes < 2)
		train->classes = 2;
	val->classes = train->classes;
	return 0;
fail:
	dataset_release(&all);
	dataset_release(train);
	dataset_release(val);
	return -1;
}

/* -------------------------------------------------------------- sampler */

void split_range(int total, int parts, int i, int *start, int *len)
{
	long long a = (long long)total * i / parts, b = (long long)total * (i + 1) / parts;

	*start = (int)a;
	*len = (int)(b - a);
}

void sampler_init(struct sampler *s, int n, int global_batch, int rank, int world, uint64_t seed)
{
	s->n = n;
	s->global_batch = global_batch;
	s->rank = rank;
	s->world = world;
	s->seed = seed;
	s->epoch = -1;
	s->perm = xmalloc((size_t)(n ? n : 1) * sizeof(int));
}

void sampler_release(struct sampler *s)
{
	free(s->perm);
	s->perm = NULL;
}

void sampler_set_epoch(struct sampler *s, int epoch)
{
	struct rng r;

	if (s->epoch == epoch)
		return;
	for (int i = 0; i < s->n; i++)
		s->perm[i] = i;
	rng_seed(&r, rng_mix(s->seed, 0x5a3b1e4ULL, (uint64_t)epoch));
	rng_shuffle(&r, s->perm, (size_t)s->n);
	s->epoch = epoch;
}

int sampler_batches_per_epoch(const struct sampler *s)
{
	return (s->n + s->global_batch - 1) / s->global_batch;
}

int sampler_slice(const struct sampler *s, int b, int part, int parts, const int **rows, int *count)
{
	int gstart = b * s->global_batch, glen = s->n - gstart, rstart, rlen, pstart, plen;

	if (glen > s->global_batch)
		glen = s->global_batch;
	split_range(glen, s->world, s->rank, &rstart, &rlen);
	split_range(rlen, parts, part, &pstart, &plen);
	*rows = s->perm + gstart + rstart + pstart;
	*count = plen;
	return glen;
}
