/*
 * fabric.c - dttrain --fabric: pairwise latency/bandwidth and all-reduce
 * between the ranks (one per node), every transfer with a deadline
 * (fabric.h).
 */
#include "trainer/fabric.h"
#include "json.h"
#include "log.h"
#include "trainer/check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int fabric_rounds(int n)
{
	return n < 2 ? 0 : n % 2 ? n : n - 1;
}

int fabric_partner(int me, int n, int r)
{
	int m = n % 2 ? n + 1 : n, p;

	if (n < 2 || me < 0 || me >= n || r < 0 || r >= m - 1)
		return -1;
	if (me == m - 1) {
		p = (int)(((long long)r * (m / 2)) % (m - 1));
	} else {
		p = ((r - me) % (m - 1) + (m - 1)) % (m - 1);
		if (p == me)
			p = m - 1;
	}
	return p >= n ? -1 : p;
}

#ifndef DT_HAVE_MPI
int fabric_run(const struct train_config *cfg, struct comm *c, struct strbuf *err)
{
	(void)cfg;
	(void)c;
	strbuf_addstr(err, "--fabric needs MPI: this dttrain was built without it");
	return 2;
}
#else

#define TAG_LAT 1801
#define TAG_BW 1802
#define TAG_ACK 1803
#define TAG_ROW 1804
#define TAG_END 1805
#define LAT_ITERS 20
#define LAT_BYTES 8

/* a rank's row: per peer, what it measured; sent to rank 0 as doubles */
enum { ROW_LAT, ROW_BW, ROW_FAIL, ROW_FIELDS };

struct fab {
	struct comm *c;
	int me, n, full, bytes, iters, timeout_ms;
	unsigned char *buf;
	double *row;              /* n * ROW_FIELDS: lat us, bw MB/s (me -> peer), failed */
	int failed;               /* some transfer of this rank did not finish */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Wait for req until deadline (monotonic seconds); 0 done, -1 not in time. */
static int wait_until(MPI_Request *req, double deadline)
{
	for (;;) {
		int done = 0;
		struct timespec nap = { 0, 20000 };

		mpiCheck(MPI_Test(req, &done, MPI_STATUS_IGNORE));
		if (done)
			return 0;
		if (now_s() >= deadline)
			return -1;
		nanosleep(&nap, NULL);
	}
}

static int xfer(struct fab *f, int send, void *buf, int len, int peer, int tag, double deadline)
{
	MPI_Request req;

	if (send)
		mpiCheck(MPI_Isend(buf, len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req));
	else
		mpiCheck(MPI_Irecv(buf, len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req));
	/* a request that did not finish is left behind: the rank ends with
	 * MPI_Abort (fabric.h), never waits for it */
	if (wait_until(&req, deadline) < 0) {
		f->failed = 1; // NOLINT(clang-analyzer-optin.mpi.MPI-Checker): abandoned, see above
		return -1;
	}
	/* done: MPI_Test left MPI_REQUEST_NULL, which this returns from at once */
	mpiCheck(MPI_Wait(&req, MPI_STATUS_IGNORE));
	return 0;
}

/* The tests of one pair, me and peer, by deadline; fills my row's entry. */
static void pair_test(struct fab *f, int peer, double deadline)
{
	double *e = &f->row[peer * ROW_FIELDS], best = -1;
	int first = f->me < peer;
	unsigned char small[LAT_BYTES] = { 0 }, ack = 1;

	for (int i = 0; i < LAT_ITERS; i++) {
		double t0 = now_s();

		if (xfer(f, first, small, LAT_BYTES, peer, TAG_LAT, deadline) ||
		    xfer(f, !first, small, LAT_BYTES, peer, TAG_LAT, deadline))
			goto fail;
		if (best < 0 || now_s() - t0 < best)
			best = now_s() - t0;
	}
	e[ROW_LAT] = best / 2 * 1e6;
	if (!f->full)
		return;
	/* the lower rank sends first, then the other way */
	for (int dir = 0; dir < 2; dir++) {
		int sender = dir == 0 ? first : !first;

		best = -1;
		for (int i = 0; i < f->iters; i++) {
			double t0 = now_s();

			if (xfer(f, sender, f->buf, f->bytes, peer, TAG_BW, deadline) ||
			    xfer(f, !sender, &ack, 1, peer, TAG_ACK, deadline))
				goto fail;
			if (best < 0 || now_s() - t0 < best)
				best = now_s() - t0;
		}
		if (sender)
			e[ROW_BW] = best > 0 ? f->bytes / best / 1e6 : 0;
	}
	return;
fail:
	e[ROW_FAIL] = 1;
}

/* Round r's Ibarrier, waited for until its deadline: the rounds stay in step
 * while they finish in time, and a late one cannot delay the next beyond its
 * own deadline. */
static double round_end(struct fab *f, double deadline)
{
	MPI_Request req;

	mpiCheck(MPI_Ibarrier(MPI_COMM_WORLD, &req));
	if (wait_until(&req, deadline) < 0)
		f->failed = 1;
	return now_s();
}

/* Best time of iters all-reduces, or -1 when one did not finish in time. */
static double allreduce_test(struct fab *f)
{
	size_t nf = (size_t)f->bytes / sizeof(float);
	float *in = xcalloc(nf ? nf : 1, sizeof(float)), *out = xcalloc(nf ? nf : 1, sizeof(float));
	double best = -1;

	for (int i = 0; i < f->iters && nf; i++) {
		MPI_Request req;
		double t0 = now_s();

		mpiCheck(MPI_Iallreduce(in, out, (int)nf, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req));
		if (wait_until(&req, t0 + f->timeout_ms / 1000.0) < 0) {
			f->failed = 1; // NOLINT(clang-analyzer-optin.mpi.MPI-Checker): abandoned
			/* in and out may still be written: leaked on purpose (MPI_Abort follows) */
			return -1;
		}
		mpiCheck(MPI_Wait(&req, MPI_STATUS_IGNORE));   /* completed: a no-op */
		if (best < 0 || now_s() - t0 < best)
			best = now_s() - t0;
	}
	free(in);
	free(out);
	return best;
}

static json_t *number_or_null(double v)
{
	return v >= 0 ? json_real(v) : json_null();
}

/* Rank 0: the document from every row (rows[k] NULL: rank k never reported). */
static json_t *fabric_doc(const struct fab *f, double *const *rows, const char *hosts,
			  double ar_s, double elapsed)
{
	json_t *doc = json_object(), *nodes = json_array(), *links = json_array(), *ar;
	size_t nf = (size_t)f->bytes / sizeof(float);

	for (int k = 0; k < f->n; k++)
		json_array_append_new(nodes, json_pack("{s:i,s:s,s:b}", "rank", k, "host",
						       hosts + k * 64, "reported", rows[k] != NULL));
	for (int a = 0; a < f->n; a++)
		for (int b = a + 1; b < f->n; b++) {
			const double *ea = rows[a] ? &rows[a][b * ROW_FIELDS] : NULL;
			const double *eb = rows[b] ? &rows[b][a * ROW_FIELDS] : NULL;
			int ok = ea && eb && !ea[ROW_FAIL] && !eb[ROW_FAIL];
			json_t *l = json_pack("{s:i,s:i,s:b}", "a", a, "b", b, "ok", ok);

			/* measured before a bandwidth transfer that did not finish */
			json_object_set_new(l, "lat_us", number_or_null(ea ? ea[ROW_LAT] : -1));
			if (f->full) {
				json_object_set_new(l, "bw_ab_MBps", number_or_null(ok ? ea[ROW_BW] : -1));
				json_object_set_new(l, "bw_ba_MBps", number_or_null(ok ? eb[ROW_BW] : -1));
			}
			if (!ok)
				json_object_set_new(l, "error", json_string(
					!ea || !eb ? "a rank never reported" :
					"a transfer did not finish within --fabric-timeout"));
			json_array_append_new(links, l);
		}
	json_object_set_new(doc, "fabric", json_string(f->full ? "full" : "quick"));
	json_object_set_new(doc, "world", json_integer(f->n));
	json_object_set_new(doc, "bytes", json_integer(f->bytes));
	json_object_set_new(doc, "iters", json_integer(f->iters));
	json_object_set_new(doc, "timeout_ms", json_integer(f->timeout_ms));
	json_object_set_new(doc, "elapsed_ms", json_real(elapsed * 1000));
	json_object_set_new(doc, "nodes", nodes);
	json_object_set_new(doc, "links", links);
	if (f->full && f->n > 1) {
		ar = json_pack("{s:b}", "ok", ar_s >= 0);
		json_object_set_new(ar, "time_us", number_or_null(ar_s >= 0 ? ar_s * 1e6 : -1));
		json_object_set_new(ar, "busbw_MBps", number_or_null(
			ar_s > 0 && f->n > 1 ? (double)(nf * sizeof(float)) / ar_s / 1e6 *
			2.0 * (f->n - 1) / f->n : -1));
		json_object_set_new(doc, "allreduce", ar);
	}
	return doc;
}

/* Write text to path through path.tmp and a rename; 0 or -1 with err. */
static int write_whole(const char *path, const char *text, struct strbuf *err)
{
	struct strbuf tmp = STRBUF_INIT;
	FILE *fp;
	int ret = 0;

	strbuf_addf(&tmp, "%s.tmp", path);
	fp = fopen(tmp.buf, "w");
	if (!fp || fputs(text, fp) == EOF || fclose(fp) == EOF || rename(tmp.buf, path) < 0) {
		strbuf_addf(err, "cannot write %s: %s", path, strerror(errno));
		ret = -1;
	}
	strbuf_release(&tmp);
	return ret;
}

int fabric_run(const struct train_config *cfg, struct comm *c, struct strbuf *err)
{
	struct fab f;
	char *hosts;
	double t0 = now_s(), start, deadline, ar_s = -1, budget;
	int rounds, code = 0;
	const char *out = cfg->fabric_out, *job_dir = getenv("DT_JOB_DIR");
	struct strbuf outbuf = STRBUF_INIT;

	if (c->world > 1 && !c->have_mpi) {
		strbuf_addstr(err, "--fabric with several ranks needs mpirun (one rank per node)");
		return 2;
	}
	memset(&f, 0, sizeof(f));
	f.c = c;
	f.me = c->rank;
	f.n = c->world;
	f.full = !strcmp(cfg->fabric, "full");
	f.bytes = cfg->fabric_bytes;
	f.iters = cfg->fabric_iters;
	f.timeout_ms = cfg->fabric_timeout_ms;
	f.buf = xcalloc((size_t)f.bytes, 1);
	f.row = xcalloc((size_t)f.n * ROW_FIELDS, sizeof(double));
	for (int k = 0; k < f.n; k++)
		f.row[k * ROW_FIELDS + ROW_LAT] = f.row[k * ROW_FIELDS + ROW_BW] = -1;
	/* under dtsched: where dtsched reads it (scheduler/fabric-head.c) */
	if (!out && job_dir && *job_dir) {
		strbuf_addf(&outbuf, "%s/fabric.json", job_dir);
		out = outbuf.buf;
	}
	hosts = xcalloc((size_t)f.n, 64);
	memcpy(hosts + f.me * 64, c->host, strnlen(c->host, 63));
	budget = f.timeout_ms / 1000.0;
	if (f.n > 1) {
		mpiCheck(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hosts, 64, MPI_CHAR,
				       MPI_COMM_WORLD));
		mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
	}
	rounds = fabric_rounds(f.n);
	start = now_s();
	for (int r = 0; r < rounds; r++) {
		int peer = fabric_partner(f.me, f.n, r);

		deadline = start + budget;
		if (peer >= 0)
			pair_test(&f, peer, deadline);
		start = round_end(&f, deadline);
	}
	if (f.full && f.n > 1)
		ar_s = allreduce_test(&f);

	/* every row to rank 0, each by its deadline */
	deadline = now_s() + budget;
	if (f.me == 0) {
		double **rows = xcalloc((size_t)f.n, sizeof(*rows));
		json_t *doc;
		char *text;
		int any_fail = f.failed;

		rows[0] = f.row;
		for (int k = 1; k < f.n; k++) {
			rows[k] = xcalloc((size_t)f.n * ROW_FIELDS, sizeof(double));
			if (xfer(&f, 0, rows[k], (int)(f.n * ROW_FIELDS * sizeof(double)), k, TAG_ROW,
				 deadline)) {
				rows[k] = NULL;   /* may still be written: leaked, MPI_Abort follows */
				any_fail = 1;
			}
		}
		for (int k = 0; k < f.n && !any_fail; k++)
			for (int p = 0; p < f.n && rows[k]; p++)
				any_fail |= rows[k][p * ROW_FIELDS + ROW_FAIL] != 0;
		doc = fabric_doc(&f, rows, hosts, ar_s, now_s() - t0);
		json_object_set_new(doc, "ok", json_boolean(!any_fail));
		text = json_dumps(doc, JSON_COMPACT);
		printf("%s\n", text);
		fflush(stdout);
		if (out && write_whole(out, text, err) < 0) {
			error("%s", err->buf);
			strbuf_reset(err);
		}
		free(text);
		json_decref(doc);
		for (int k = 1; k < f.n; k++)
			free(rows[k]);
		free(rows);
		code = any_fail;
		/* tell the others whether they may finish (nothing left in flight) */
		for (int k = 1; k < f.n && !any_fail; k++) {
			unsigned char fin = 0;

			if (xfer(&f, 1, &fin, 1, k, TAG_END, now_s() + budget))
				any_fail = 1;
		}
		if (any_fail && f.n > 1)
			comm_abort(c, 1);
	} else {
		unsigned char fin = 1;

		f.row[f.me * ROW_FIELDS + ROW_FAIL] = f.failed;
		if (xfer(&f, 1, f.row, (int)(f.n * ROW_FIELDS * sizeof(double)), 0, TAG_ROW,
			 deadline) ||
		    xfer(&f, 0, &fin, 1, 0, TAG_END, now_s() + 3 * budget) || f.failed)
			comm_abort(c, 1);   /* rank 0 aborts too, once it has written */
	}
	strbuf_release(&outbuf);
	free(hosts);
	free(f.buf);
	free(f.row);
	return code;
}
#endif
