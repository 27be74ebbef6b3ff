/*
 * perf/hosts.c: a graph across hosts against raw UCX on the same pair,
 * one rank of a job a PMIx launcher started (perf/hosts.sh runs it on
 * three network namespaces, next to Open MPI's ping-pong).  Rank 0
 * drives; rank 1 serves the job and, on a thread of its own, answers raw
 * UCX active messages from rank 0 on a second UCX worker (the same
 * transports, the same pair of hosts); rank 2 serves (idle).
 *
 * Interleaved, windows times, each a window of each:
 *  - latency: a 64-byte value to a task on rank 1 and back through a
 *    compiled graph (cgr_execute + cgr_ref_get), against a 64-byte raw
 *    UCX active-message ping-pong (both sides poll, the floor of what a
 *    message costs between these hosts);
 *  - bandwidth: a 1 MiB and a 64 MiB value to a task on rank 1 that
 *    answers 8 bytes, against raw UCX sending as much (rendezvous) and
 *    getting 8 bytes back.
 * And once: the bootstrap, from main to the first execution's result
 * (join through PMIx, the context, a worker on rank 1, the compile).
 * The link's and the graphs' wait mode: PERF_MODE=adaptive (default),
 * busy or block (every thread parks between messages); PERF_LINK the
 * link's alone, PERF_SPIN_US the graphs' adaptive spin; PERF_LAT_ONLY
 * set: no bandwidth windows.  Medians of windows; the table, one JSON
 * line per result, and per latency window both p50s and how the
 * driver's and rank 1's echo thread's waits went.
 */
#include "perf.h"

#include <poll.h>
#include <pthread.h>

#include <cgr.h>

#include "net/net.h"
#include "reactor/reactor.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)
#define BIG (64 * MiB)
#define WMAX 64

static int64_t rt_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* ---- tasks on rank 1 -------------------------------------------------- */

/* How a thread's waits went (its adaptive-wait record,
 * reactor/reactor.h): spun and found what it waited for, parked at once
 * under CPU pressure or for misses, parked after a spin.  The echo task
 * answers its thread's in its first bytes: rank 1's side, per window. */
struct waits {
	uint64_t paid, pressure, miss, parks;
};
static struct waits echo_last; /* the driver's copy of the last answer */

static int echo(cgr_task_ctx *tc, void *state, const cgr_value *in,
		size_t nin, cgr_value *out, size_t nout)
{
	size_t n = in[0].u.bytes.len;
	void *o = cgr_task_output_buffer(tc, 0, n);

	(void)state, (void)nin, (void)nout;
	memcpy(o, in[0].u.bytes.data, n);
	if (n >= sizeof(struct waits)) { /* how rank 1's thread waited */
		const struct cgr__spin_stat *s = cgr__spin_stat();
		struct waits w = { s->paid, s->parked_pressure,
				   s->parked_miss, s->parks };
		memcpy(o, &w, sizeof(w));
	}
	out[0] = cgr_value_bytes(o, n);
	return 0;
}

/* Takes a value, answers its length (8 bytes). */
static int sink(cgr_task_ctx *tc, void *state, const cgr_value *in,
		size_t nin, cgr_value *out, size_t nout)
{
	uint64_t *o = cgr_task_output_buffer(tc, 0, 8);

	(void)state, (void)nin, (void)nout;
	*o = in[0].u.bytes.len;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

static const cgr_export exports[] = {
	{ "echo", echo, NULL, NULL },
	{ "sink", sink, NULL, NULL },
	{ NULL, NULL, NULL, NULL },
};

/* ---- raw UCX ------------------------------------------------------------ */

struct raw {
	struct cgr__boot boot;
	struct cgr__ucx *u;
	int peer;
	unsigned char *buf;
	bool rest; /* the server parks at once (a window of it ended) */
};

/* Rank 0 and 1 meet on a second UCX worker (a second PMIx key). */
static int raw_open(struct raw *r, int rank)
{
	char why[400] = "";
	const void *a;
	size_t n;
	unsigned char addr[4096];

	r->peer = rank == 0 ? 1 : 0;
	if (cgr__boot_init(&r->boot, why, sizeof(why)) < 0 ||
	    cgr__ucx_open(&r->u, 3, why, sizeof(why)) < 0 ||
	    cgr__ucx_address(r->u, &a, &n) < 0 ||
	    cgr__boot_put(&r->boot, "perf.ucx", a, n, why, sizeof(why)) < 0 ||
	    cgr__boot_fence(&r->boot, 60, why, sizeof(why)) < 0 ||
	    (rank < 2 &&
	     (cgr__boot_get(&r->boot, (uint32_t)r->peer, "perf.ucx", addr,
			    sizeof(addr), &n, why, sizeof(why)) < 0 ||
	      cgr__ucx_connect(r->u, (uint32_t)r->peer, addr, n, why,
			       sizeof(why)) < 0))) {
		fprintf(stderr, "raw UCX: %s\n", why);
		return -1;
	}
	r->buf = malloc(BIG);
	return r->buf != NULL ? 0 : -1;
}

/* The next raw message: polled while they come (2 ms), else parked on
 * the UCX worker's event fd, so that it costs nothing while the graphs
 * run.  After a window's end (raw_rest) it parks at once: its 2 ms of
 * spinning would otherwise take a vCPU from the graph's window that
 * follows, and put the graph's threads under CPU pressure. */
static int raw_next(struct raw *r, uint32_t *from, size_t *len)
{
	int64_t idle = perf_now_ns();
	int efd = cgr__ucx_efd(r->u);

	for (;;) {
		int ret = cgr__ucx_recv(r->u, from, r->buf, BIG, len, 0);
		if (ret != -ETIMEDOUT)
			return ret;
		if ((r->rest || perf_now_ns() - idle > 2000000) && efd >= 0 &&
		    cgr__ucx_arm(r->u) == 0) {
			struct pollfd p = { efd, POLLIN, 0 };
			(void)poll(&p, 1, 100);
			/* Woken: polls again for 2 ms (a rendezvous that
			 * began needs it: parking again at once would leave
			 * it to the poll's timeout). */
			r->rest = false;
			idle = perf_now_ns();
		}
	}
}

/* Rank 1's thread: answers every message (64 B or less: echoed; more:
 * 8 bytes), until one of 1 byte; one of 2 bytes ends a window (no
 * answer: park at once until the next message). */
static void *raw_server(void *arg)
{
	struct raw *r = arg;

	for (;;) {
		uint32_t from;
		size_t len;
		uint64_t ack;
		if (raw_next(r, &from, &len) < 0 || len == 1)
			break;
		r->rest = len == 2;
		if (r->rest)
			continue;
		ack = len;
		if (len <= 64)
			cgr__ucx_send(r->u, from, 1, r->buf, len, 1000000000ll);
		else
			cgr__ucx_send(r->u, from, 1, &ack, 8, 1000000000ll);
	}
	return NULL;
}

/* The end of a raw window: the server parks at once. */
static void raw_rest(struct raw *r)
{
	static const unsigned char two[2];

	(void)cgr__ucx_send(r->u, (uint32_t)r->peer, 0, two, 2, 1000000000ll);
}

/* One round trip of n bytes (the answer: n if <= 64, else 8): ns. */
static int64_t raw_rtt(struct raw *r, size_t n)
{
	int64_t t0 = perf_now_ns();
	uint32_t from;
	size_t len;

	if (cgr__ucx_send(r->u, (uint32_t)r->peer, 0, r->buf, n,
			  10000000000ll) < 0 ||
	    cgr__ucx_recv(r->u, &from, r->buf + BIG / 2, 64, &len,
			  10000000000ll) < 0)
		return -1;
	return perf_now_ns() - t0;
}

/* ---- the graphs ------------------------------------------------------ */

static cgr_compiled *graph(cgr_ctx *ctx, cgr_worker *w, cgr_task_fn fn,
			   size_t maxv, int mode)
{
	cgr_graph *g;
	cgr_node *in, *out;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_compiled *c = NULL;

	d.name = fn == echo ? "echo" : "sink";
	d.fn = fn;
	d.max_out_bytes = maxv < 512 ? 512 : maxv;
	cp.max_inflight = 2;
	cp.max_value_bytes = maxv < 512 ? 512 : maxv;
	cp.wait_mode = mode;
	if (getenv("PERF_SPIN_US") != NULL) /* the adaptive spin */
		cp.spin_ns = atoll(getenv("PERF_SPIN_US")) * 1000;
	cp.get_timeout_ns = 60ll * 1000000000;
	if (cgr_graph_create(ctx, &g) != 0)
		return NULL;
	if (cgr_graph_input(g, 0, &in) || cgr_graph_task(g, w, &d, &in, 1,
							 &out, 1) ||
	    cgr_graph_output(g, &out, 1) || cgr_graph_compile(g, &cp, &c))
		fprintf(stderr, "graph: %s\n", cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return c;
}

/* One execution of a value of n bytes: ns, -1 on failure. */
static int64_t cgr_rtt(cgr_compiled *c, const void *data, size_t n)
{
	cgr_value a = cgr_value_bytes(data, n), o;
	cgr_ref ref;
	int64_t t0 = perf_now_ns();

	if (cgr_execute(c, &a, 1, &ref) != 0 ||
	    cgr_ref_get(c, ref, -1, &o, 1) != 0 || o.kind != CGR_VALUE_BYTES)
		return -1;
	t0 = perf_now_ns() - t0;
	if (n == 64 && o.u.bytes.len == 64)
		memcpy(&echo_last, o.u.bytes.data, sizeof(echo_last));
	cgr_ref_release(c, ref);
	return t0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Median (p = 0.5) or another quantile of n samples (sorted here). */
static double q_us(int64_t *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_i64);
	return (double)v[(size_t)(p * (double)(n - 1))] / 1e3;
}

struct res {
	double p50[WMAX], p99[WMAX];
};

static void report(const char *case_, const char *impl, struct res *r,
		   int w, double floor_us)
{
	double m = perf_median(r->p50, (size_t)w);
	double m99 = perf_median(r->p99, (size_t)w);

	printf("%-10s %-22s p50 %9.1f us  p99 %9.1f us  (floor %.1f us, "
	       "%.2fx)\n",
	       case_, impl, m, m99, floor_us, m / floor_us);
	perf_json("hosts", case_, impl, "rtt_p50", m, "us",
		  "\"p99_us\":%.1f,\"floor_us\":%.1f,\"ratio_to_floor\":%.3f,"
		  "\"windows\":%d",
		  m99, floor_us, m / floor_us, w);
}

static void report_bw(const char *case_, const char *impl, double *v, int w,
		      size_t bytes, double raw_gbs)
{
	double s = perf_median(v, (size_t)w), gbs = (double)bytes / s / 1e3;

	printf("%-10s %-22s %9.1f us  %7.3f GB/s  (raw UCX %.3f GB/s, "
	       "%.2fx)\n",
	       case_, impl, s, gbs, raw_gbs, gbs / raw_gbs);
	perf_json("hosts", case_, impl, "bandwidth", gbs, "GB/s",
		  "\"us\":%.1f,\"raw_gbs\":%.3f,\"ratio_to_raw\":%.3f", s,
		  raw_gbs, gbs / raw_gbs);
}

static struct waits wait_delta(const struct cgr__spin_stat *s0)
{
	const struct cgr__spin_stat *s1 = cgr__spin_stat();

	return (struct waits){ s1->paid - s0->paid,
			       s1->parked_pressure - s0->parked_pressure,
			       s1->parked_miss - s0->parked_miss,
			       s1->parks - s0->parks };
}

/* Per window: the p50 and how the driver waited (a window whose waits
 * parked under CPU pressure pays two wake-ups a round trip: the link
 * thread receives and wakes the driver), then how rank 1's thread that
 * runs the echo waited. */
static void report_waits(const struct res *rr, const struct res *rc,
			 const struct waits *st, const struct waits *est,
			 int w)
{
	printf("  windows, p50 against raw UCX's in the same window (driver's "
	       "waits: spun and found / parked: at once under CPU pressure, "
	       "for misses, in all; then rank 1's echo thread's):");
	for (int k = 0; k < w; k++)
		printf("%s %.1f / %.1f us (%llu / %llu, %llu, %llu; %llu / "
		       "%llu, %llu, %llu)",
		       k ? "," : "", rc->p50[k], rr->p50[k],
		       (unsigned long long)st[k].paid,
		       (unsigned long long)st[k].pressure,
		       (unsigned long long)st[k].miss,
		       (unsigned long long)st[k].parks,
		       (unsigned long long)est[k].paid,
		       (unsigned long long)est[k].pressure,
		       (unsigned long long)est[k].miss,
		       (unsigned long long)est[k].parks);
	printf("\n");
}

static int drive(cgr_ctx *ctx, cgr_job *job, struct raw *raw, int mode,
		 int windows, long iters, int64_t t_main)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w[3]; /* on rank 1: one per graph */
	cgr_compiled *ce, *cs1, *cs64;
	unsigned char *data = calloc(1, BIG);
	int64_t *lat = calloc((size_t)iters, sizeof(*lat)), t;
	struct res rr, rc;
	struct cgr__spin_stat s0;
	struct waits st[WMAX], est[WMAX], e0;
	double bw[4][WMAX];
	const char *mname = mode == CGR_WAIT_BLOCK ? "parked" :
			    mode == CGR_WAIT_BUSY  ? "busy" :
						     "adaptive";

	wp.rank = 1;
	for (int i = 0; i < 3; i++) {
		const char *names[] = { "echo", "sink1", "sink64" };
		wp.name = names[i];
		if (cgr_worker_create(ctx, &wp, &w[i]) != 0)
			return 1;
	}
	if (data == NULL || lat == NULL ||
	    (ce = graph(ctx, w[0], echo, 64, mode)) == NULL)
		return 1;
	t = cgr_rtt(ce, data, 64);
	printf("bootstrap: main to the first execution's result %.1f ms "
	       "(3 hosts: join, context, a worker on rank 1, compile); "
	       "first round trip %.1f us; first_result_ns %lld\n",
	       (double)(rt_ns() - t_main) / 1e6, (double)t / 1e3,
	       (long long)rt_ns());
	perf_json("hosts", "bootstrap", "cgr", "time",
		  (double)(rt_ns() - t_main) / 1e6, "ms", NULL);
	if ((cs1 = graph(ctx, w[1], sink, MiB, mode)) == NULL ||
	    (cs64 = graph(ctx, w[2], sink, BIG, mode)) == NULL)
		return 1;
	printf("transports: %s\n", cgr_job_transports(job));
	for (int k = 0; k < windows; k++) {
		for (long i = 0; i < iters; i++)
			lat[i] = raw_rtt(raw, 64);
		raw_rest(raw);
		rr.p50[k] = q_us(lat, (size_t)iters, 0.5);
		rr.p99[k] = q_us(lat, (size_t)iters, 0.99);
		s0 = *cgr__spin_stat();
		e0 = echo_last;
		for (long i = 0; i < iters; i++)
			lat[i] = cgr_rtt(ce, data, 64);
		st[k] = wait_delta(&s0);
		est[k] = (struct waits){ echo_last.paid - e0.paid,
					 echo_last.pressure - e0.pressure,
					 echo_last.miss - e0.miss,
					 echo_last.parks - e0.parks };
		rc.p50[k] = q_us(lat, (size_t)iters, 0.5);
		rc.p99[k] = q_us(lat, (size_t)iters, 0.99);
		for (int b = 0; b < 2 && getenv("PERF_LAT_ONLY") == NULL;
		     b++) {
			size_t n = b ? BIG : MiB;
			int reps = b ? 3 : 20;
			for (int i = 0; i < reps; i++)
				lat[i] = raw_rtt(raw, n);
			raw_rest(raw);
			bw[2 * b][k] = q_us(lat, (size_t)reps, 0.5);
			for (int i = 0; i < reps; i++)
				lat[i] = cgr_rtt(b ? cs64 : cs1, data, n);
			bw[2 * b + 1][k] = q_us(lat, (size_t)reps, 0.5);
		}
	}
	printf("\nlatency, 64 B there and back, %d windows of %ld (medians "
	       "of windows):\n",
	       windows, iters);
	report("rtt-64B", "raw UCX AM (polling)", &rr, windows,
	       perf_median(rr.p50, (size_t)windows));
	report("rtt-64B", mname, &rc, windows,
	       perf_median(rr.p50, (size_t)windows));
	report_waits(&rr, &rc, st, est, windows);
	printf("\nbandwidth, a value to rank 1, 8 bytes back:\n");
	for (int b = 0; b < 2; b++) {
		size_t n = b ? BIG : MiB;
		double raw_gbs = (double)n / perf_median(bw[2 * b],
							  (size_t)windows) /
				 1e3;
		const char *cs = b ? "bw-64MiB" : "bw-1MiB";
		report_bw(cs, "raw UCX AM", bw[2 * b], windows, n, raw_gbs);
		report_bw(cs, mname, bw[2 * b + 1], windows, n, raw_gbs);
	}
	data[0] = 0;
	cgr__ucx_send(raw->u, (uint32_t)raw->peer, 0, data, 1, 1000000000ll);
	cgr_compiled_destroy(ce);
	cgr_compiled_destroy(cs1);
	cgr_compiled_destroy(cs64);
	free(data);
	free(lat);
	return 0;
}

int main(int argc, char **argv)
{
	struct perf_opts o = { 5, 2000, 0, 0 };
	int64_t t_main = rt_ns();
	cgr_job_params jp = CGR_JOB_PARAMS_INIT;
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	const char *m = getenv("PERF_MODE");
	int mode = m != NULL && !strcmp(m, "block") ? CGR_WAIT_BLOCK :
		   m != NULL && !strcmp(m, "busy")  ? CGR_WAIT_BUSY :
						      CGR_WAIT_ADAPTIVE;
	struct raw raw;
	cgr_job *job;
	cgr_ctx *ctx;
	int ret = 0;

	if (perf_parse(argc, argv, &o, "a graph across hosts against raw "
				       "UCX (run by perf/hosts.sh)"))
		return 2;
	if (o.quick)
		o.windows = 3, o.iters = 500;
	if (o.windows > WMAX)
		o.windows = WMAX;
	setvbuf(stdout, NULL, _IOLBF, 0);
	jp.wait_mode = mode;
	if (getenv("PERF_LINK") != NULL) /* the link's own mode */
		jp.wait_mode = !strcmp(getenv("PERF_LINK"), "block") ?
				       CGR_WAIT_BLOCK :
			       !strcmp(getenv("PERF_LINK"), "busy") ?
				       CGR_WAIT_BUSY :
				       CGR_WAIT_ADAPTIVE;
	if (cgr_job_join(&jp, &job) != 0 || cgr_job_size(job) < 2) {
		printf("perf/hosts: run it under a PMIx launcher "
		       "(perf/hosts.sh)\n");
		return 0;
	}
	memset(&raw, 0, sizeof(raw));
	if (raw_open(&raw, cgr_job_rank(job)) < 0)
		return 1;
	if (cgr_job_rank(job) != 0) {
		pthread_t th;
		bool srv = cgr_job_rank(job) == 1;
		if (srv)
			pthread_create(&th, NULL, raw_server, &raw);
		ret = cgr_job_serve(job, exports);
		if (srv)
			pthread_join(th, NULL);
	} else {
		cp.job = job;
		cp.exports = exports;
		if (cgr_ctx_create(&cp, &ctx) != 0)
			return 1;
		ret = drive(ctx, job, &raw, mode, o.windows, o.iters, t_main);
		cgr_ctx_destroy(ctx);
	}
	cgr__ucx_close(raw.u);
	(void)cgr__boot_fini(&raw.boot, 0, NULL);
	free(raw.buf);
	cgr_job_leave(job);
	return ret;
}
