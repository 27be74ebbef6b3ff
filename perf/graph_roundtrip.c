/*
 * perf/graph_roundtrip.c: execute + get of small compiled graphs, next to
 * the physical floor (a one-cache-line ping-pong) and cgr's ring round trip,
 * measured window by window in one run.
 *
 * Cases: a 1-worker echo graph and a 2-worker chain, each in busy-poll and
 * adaptive wait modes, on thread workers and on process workers (this
 * program started again as workers: cgr_worker_main first in main); the
 * process cases also report their ratio to the same thread case of the
 * same window; and the echo and the chain run eagerly
 * (cgr_graph_execute_eager, not compiled), with their ratio to the
 * compiled adaptive case ("x twin").  Each window measures the floor and the ring, then
 * compiles each case on its workers, runs it, and tears it down (a busy
 * graph left compiled would spin and skew the others).  Reports per-window
 * p50 and p99, medians over windows, and ratios to the ring and the floor
 * of the same window.  Ray Compiled Graphs' published echo round trip, for
 * scale: 86.7 us.
 */
#include "perf.h"
#include "perf_echo.h"

#include <pthread.h>

#include <cgr.h>

#include "ring/ring.h"

#define MSG 64

struct pp {
	_Atomic uint64_t line __attribute__((aligned(64)));
	char pad[56];
	struct cgr__ring a2b_p, a2b_c, b2a_p, b2a_c;
	long iters;
	int mode; /* 0 floor, 1 ring */
	_Atomic int go;
	int cpu;
};

static void *pong(void *arg)
{
	struct pp *p = arg;
	char m[MSG];

	perf_pin(p->cpu);
	while (!atomic_load(&p->go))
		perf_relax();
	if (p->mode == 0) {
		for (long i = 0; i < p->iters; i++) {
			uint64_t want = 2 * (uint64_t)i + 1;
			while (atomic_load_explicit(&p->line,
						    memory_order_acquire) != want)
				perf_relax();
			atomic_store_explicit(&p->line, want + 1,
					      memory_order_release);
		}
	} else {
		for (long i = 0; i < p->iters; i++) {
			while (cgr__ring_dequeue(&p->a2b_c, m) != 0)
				perf_relax();
			while (cgr__ring_enqueue(&p->b2a_p, m, MSG) != 0)
				perf_relax();
		}
	}
	return NULL;
}

/* Round trips of the floor (mode 0) or the ring (mode 1): fills lat[]. */
static void pingpong(int mode, long n, double *lat, double tick)
{
	static struct pp p;
	size_t sz = cgr__ring_memsize(64, MSG);
	unsigned char *ra = aligned_alloc(64, sz), *rb = aligned_alloc(64, sz);
	pthread_t t;
	char m[MSG] = { 1 };

	memset(&p, 0, sizeof(p));
	cgr__ring_init(ra, sz, 64, MSG, 0);
	cgr__ring_init(rb, sz, 64, MSG, 0);
	cgr__ring_attach(&p.a2b_p, ra, sz, CGR__RING_PRODUCER);
	cgr__ring_attach(&p.a2b_c, ra, sz, CGR__RING_CONSUMER);
	cgr__ring_attach(&p.b2a_p, rb, sz, CGR__RING_PRODUCER);
	cgr__ring_attach(&p.b2a_c, rb, sz, CGR__RING_CONSUMER);
	p.iters = n;
	p.mode = mode;
	p.cpu = 1;
	pthread_create(&t, NULL, pong, &p);
	atomic_store(&p.go, 1);
	for (long i = 0; i < n; i++) {
		uint64_t t0 = perf_ticks();
		if (mode == 0) {
			atomic_store_explicit(&p.line, 2 * (uint64_t)i + 1,
					      memory_order_release);
			while (atomic_load_explicit(&p.line,
						    memory_order_acquire) !=
			       2 * (uint64_t)i + 2)
				perf_relax();
		} else {
			while (cgr__ring_enqueue(&p.a2b_p, m, MSG) != 0)
				perf_relax();
			while (cgr__ring_dequeue(&p.b2a_c, m) != 0)
				perf_relax();
		}
		lat[i] = (double)(perf_ticks() - t0) * tick;
	}
	pthread_join(t, NULL);
	free(ra);
	free(rb);
}

/* The same chain run eagerly (cgr_graph_execute_eager), not compiled. */
static int eager_rt(cgr_ctx *ctx, cgr_worker **w, int nw, long n,
		    double *lat, double tick)
{
	cgr_graph *g = perf_echo_chain(ctx, w, nw);
	char msg[MSG] = { 7 };
	cgr_value arg = cgr_value_bytes(msg, MSG), out;
	int ret = 0;

	for (long i = -n / 10 - 10; i < n && ret == 0; i++) {
		uint64_t t0 = perf_ticks();
		ret = cgr_graph_execute_eager(g, &arg, 1, &out, 1, NULL);
		if (i >= 0)
			lat[i] = (double)(perf_ticks() - t0) * tick;
	}
	cgr_graph_destroy(g);
	return ret;
}

/* Compiles a chain of nw echo tasks, runs n round trips into lat[]. */
static int graph_rt(cgr_ctx *ctx, cgr_worker **w, int nw, int mode, long n,
		    double *lat, double tick)
{
	cgr_graph *g = perf_echo_chain(ctx, w, nw);
	cgr_compiled *c;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	char msg[MSG] = { 7 };
	cgr_value arg = cgr_value_bytes(msg, MSG), out;
	int ret;

	pp.wait_mode = mode;
	ret = cgr_graph_compile(g, &pp, &c);
	cgr_graph_destroy(g);
	if (ret != 0)
		return ret;
	for (long i = -n / 10 - 100; i < n; i++) { /* warm up first */
		cgr_ref r;
		uint64_t t0 = perf_ticks();
		if ((ret = cgr_execute(c, &arg, 1, &r)) != 0 ||
		    (ret = cgr_ref_get(c, r, -1, &out, 1)) != 0)
			break;
		cgr_ref_release(c, r);
		if (i >= 0)
			lat[i] = (double)(perf_ticks() - t0) * tick;
	}
	cgr_compiled_destroy(c);
	return ret;
}

enum { C_FLOOR, C_RING, NCASE = 12 };
/* Graph cases: workers, wait mode, process workers; the thread case a
 * process case compares to. */
static const struct gcase {
	const char *name;
	int nw, mode;
	bool proc;
	int twin;
	bool eager; /* cgr_graph_execute_eager; twin: the compiled case */
} cases[NCASE] = {
	{ "floor", 0, 0, false, 0, false },
	{ "ring", 0, 0, false, 0, false },
	{ "echo1_busy", 1, CGR_WAIT_BUSY, false, 0, false },
	{ "echo1_adaptive", 1, CGR_WAIT_ADAPTIVE, false, 0, false },
	{ "chain2_busy", 2, CGR_WAIT_BUSY, false, 0, false },
	{ "chain2_adaptive", 2, CGR_WAIT_ADAPTIVE, false, 0, false },
	{ "echo1_busy_proc", 1, CGR_WAIT_BUSY, true, 2, false },
	{ "echo1_adapt_proc", 1, CGR_WAIT_ADAPTIVE, true, 3, false },
	{ "chain2_busy_proc", 2, CGR_WAIT_BUSY, true, 4, false },
	{ "chain2_adapt_proc", 2, CGR_WAIT_ADAPTIVE, true, 5, false },
	{ "echo1_eager", 1, 0, false, 3, true },
	{ "chain2_eager", 2, 0, false, 5, true },
};

static const cgr_export exports[] = { { "echo", perf_echo, NULL, NULL },
				      { NULL, NULL, NULL, NULL } };

/* Workers 0 and 1 of kind, the first stage on the other core. */
static int workers(cgr_ctx *ctx, int kind, cgr_worker **w)
{
	for (int i = 0; i < 2; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		int ret;
		wp.cpu = 1 - i;
		wp.kind = kind;
		if ((ret = cgr_worker_create(ctx, &wp, &w[i])) != 0)
			return ret;
	}
	return 0;
}

/* Runs case k into lat[] (n of them). */
static int run_case(cgr_ctx *ctx, cgr_worker **tw, cgr_worker **pw, int k,
		    long *n, double *lat, double tick)
{
	const struct gcase *gc = &cases[k];

	if (k == C_FLOOR || k == C_RING) {
		pingpong(k == C_RING, *n, lat, tick);
		return 0;
	}
	/* Two workers and the driver share two cores, and an eager run
	 * hands each task to its thread: fewer iterations. */
	if (gc->nw == 2 || gc->eager)
		*n = *n / 4 > 0 ? *n / 4 : 1;
	if (gc->eager)
		return eager_rt(ctx, tw, gc->nw, *n, lat, tick);
	return graph_rt(ctx, gc->proc ? pw : tw, gc->nw, gc->mode, *n, lat,
			tick);
}

int main(int argc, char **argv)
{
	struct perf_opts o = { 10, 20000, 0, 0 };
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx;
	cgr_worker *w[2], *pw[2];
	double tick, *lat, *p50[NCASE], *p99[NCASE];

	cgr_worker_main(argc, argv, exports);
	if (perf_parse(argc, argv, &o,
		       "execute+get round trip of compiled graphs vs ring and "
		       "floor"))
		return 2;
	if (!perf_have_cpus(0, 1)) {
		fprintf(stderr, "needs CPUs 0 and 1\n");
		return 1;
	}
	perf_pin(0);
	tick = perf_tick_ns();
	cp.exports = exports;
	cgr_ctx_create(&cp, &ctx);
	if (workers(ctx, CGR_WORKER_THREAD, w) != 0 ||
	    workers(ctx, CGR_WORKER_PROCESS, pw) != 0) {
		fprintf(stderr, "cannot start the workers\n");
		return 1;
	}
	lat = calloc((size_t)o.iters, sizeof(double));
	for (int k = 0; k < NCASE; k++) {
		p50[k] = calloc((size_t)o.windows, sizeof(double));
		p99[k] = calloc((size_t)o.windows, sizeof(double));
	}
	for (int win = 0; win < o.windows; win++) {
		for (int j = 0; j < NCASE; j++) {
			int k = (j + win) % NCASE; /* rotate the order */
			long n = o.iters;
			int ret = run_case(ctx, w, pw, k, &n, lat, tick);
			if (ret != 0) {
				fprintf(stderr, "%s: %s\n", cases[k].name,
					cgr_strerror(ret));
				return 1;
			}
			p99[k][win] = perf_quantile(lat, (size_t)n, 0.99);
			p50[k][win] = perf_quantile(lat, (size_t)n, 0.50);
		}
	}
	double m50[NCASE], m99[NCASE], r_ring[NCASE], r_floor[NCASE];
	double r_thr[NCASE];
	for (int k = 0; k < NCASE; k++) {
		double ratio_r[64], ratio_f[64], ratio_t[64];
		int nw = o.windows < 64 ? o.windows : 64;
		for (int win = 0; win < nw; win++) {
			ratio_r[win] = p50[k][win] / p50[C_RING][win];
			ratio_f[win] = p50[k][win] / p50[C_FLOOR][win];
			ratio_t[win] = p50[k][win] / p50[cases[k].twin][win];
		}
		r_ring[k] = perf_median(ratio_r, (size_t)nw);
		r_floor[k] = perf_median(ratio_f, (size_t)nw);
		r_thr[k] = perf_median(ratio_t, (size_t)nw);
		m50[k] = perf_median(p50[k], (size_t)o.windows);
		m99[k] = perf_median(p99[k], (size_t)o.windows);
	}
	if (!o.json) {
		printf("graph_roundtrip: %d windows x %ld round trips, 64-byte "
		       "values, driver on CPU 0\n",
		       o.windows, o.iters);
		printf("%-18s %9s %9s %11s %11s %11s\n", "case", "p50 ns",
		       "p99 ns", "x ring p50", "x floor p50", "x twin");
		for (int k = 0; k < NCASE; k++) {
			printf("%-18s %9.0f %9.0f %11.2f %11.2f", cases[k].name,
			       m50[k], m99[k], r_ring[k], r_floor[k]);
			if (cases[k].proc || cases[k].eager)
				printf(" %11.2f", r_thr[k]);
			printf("\n");
		}
		printf("(medians over windows; ratios are medians of per-window "
		       "ratios; Ray Compiled Graphs' echo: 86700 ns)\n");
	}
	for (int k = 0; k < NCASE; k++) {
		perf_json("graph_roundtrip", cases[k].name, "cgr", "rtt_p50",
			  m50[k], "ns",
			  "\"ratio_to_ring\":%.3f,\"ratio_to_floor\":%.3f,"
			  "\"ratio_to_threads\":%.3f,\"floor_ns\":%.1f",
			  r_ring[k], r_floor[k],
			  cases[k].proc || cases[k].eager ? r_thr[k] : 1.0,
			  m50[C_FLOOR]);
		perf_json("graph_roundtrip", cases[k].name, "cgr", "rtt_p99",
			  m99[k],
			  "ns", "\"floor_ns\":%.1f", m50[C_FLOOR]);
	}
	cgr_ctx_destroy(ctx);
	return 0;
}
