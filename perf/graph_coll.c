/*
 * perf/graph_coll.c: a graph's allreduce between two workers, thread
 * workers against process workers, interleaved window by window in one
 * run.  (perf/collective_bw measures the communicator API itself, whose
 * ranks are threads of one process by construction; across processes the
 * CPU communicator runs inside graphs, so this is where the two are
 * compared.)
 *
 * The graph: the argument, then one task per worker that describes a
 * float tensor of S bytes in its output buffer (written on the first
 * executions of each slot only, so the loop times the collective, not a
 * fill), an allreduce (sum) of the two, both results to the driver.  Each
 * window compiles the graph on the thread workers and on the process
 * workers in turn (the order turning with the window), checks one result
 * element by element, then times execute + get + release.  Reports the
 * median over windows of each window's median, the process/thread ratio
 * of the same window (median over windows), and the floor (a one-cache-
 * line ping-pong between the two CPUs) next to it.
 *
 * This program is also its own worker processes (cgr_worker_main first).
 */
#include "perf.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <cgr.h>

#define NSIZE 5
static const size_t sizes[NSIZE] = { 8, 4096, 65536, 1 << 20, 16 << 20 };

/* out: S bytes of floats = rank + 1 (arg: its rank and S). */
struct fill {
	int rank;
	size_t bytes;
};

static int fill(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	const struct fill *f = cgr_task_arg(tc);
	size_t n = f->bytes / 4;
	static __thread int64_t shape[1];
	float *o = cgr_task_output_buffer(tc, 0, f->bytes);

	(void)st, (void)in, (void)nin, (void)nout;
	if (o == NULL)
		return -ENOMEM;
	if (cgr_task_seq(tc) < 16) /* every slot once, then as it is */
		for (size_t i = 0; i < n; i++)
			o[i] = (float)(f->rank + 1);
	shape[0] = (int64_t)n;
	out[0] = cgr_value_tensor(o, kDLFloat, 32, 1, shape);
	return 0;
}

static const cgr_export exports[] = { { "fill", fill, NULL, NULL },
				      { NULL, NULL, NULL, NULL } };

static cgr_compiled *build(cgr_ctx *ctx, cgr_worker **w, size_t bytes)
{
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *x, *ins[2], *outs[2];

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int r = 0; r < 2; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		struct fill f = { r, bytes };
		d.name = "fill", d.fn = fill;
		d.arg_data = &f, d.arg_len = sizeof(f);
		d.max_out_bytes = bytes;
		cgr_graph_task(g, w[r], &d, &x, 1, &ins[r], 1);
	}
	cgr_graph_allreduce(g, ins, 2, CGR_SUM, NULL, outs);
	cgr_graph_output(g, outs, 2);
	pp.max_inflight = 2;
	pp.max_value_bytes = bytes > 64 ? bytes : 64; /* the allreduce's too */
	if (cgr_graph_compile(g, &pp, &c) != 0)
		fprintf(stderr, "graph_coll: %s\n", cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return c;
}

/* n timed executions of c into lat[] (ns); -1 if a result is wrong. */
static int run(cgr_compiled *c, size_t bytes, long n, double *lat,
	       double tick)
{
	uint64_t v = 1;
	cgr_value a = cgr_value_bytes(&v, 8), o[2];

	for (long i = -20; i < n; i++) {
		cgr_ref r;
		uint64_t t0 = perf_ticks();
		if (cgr_execute(c, &a, 1, &r) != 0 ||
		    cgr_ref_get(c, r, -1, o, 2) != 0)
			return -1;
		if (i == -1) { /* warm: check every element once */
			for (int k = 0; k < 2; k++) {
				const float *d = o[k].u.tensor.data;
				if (o[k].kind != CGR_VALUE_TENSOR)
					return -1;
				for (size_t e = 0; e < bytes / 4; e++)
					if (d[e] != 3.0f)
						return -1;
			}
		}
		cgr_ref_release(c, r);
		if (i >= 0)
			lat[i] = (double)(perf_ticks() - t0) * tick;
	}
	return 0;
}

static _Atomic uint64_t line __attribute__((aligned(64)));

static void *pong(void *arg)
{
	long n = *(long *)arg;

	perf_pin(1);
	for (long i = 0; i < n; i++) {
		uint64_t want = 2 * (uint64_t)i + 1;
		while (atomic_load_explicit(&line, memory_order_acquire) != want)
			perf_relax();
		atomic_store_explicit(&line, want + 1, memory_order_release);
	}
	return NULL;
}

/* The floor: median one-cache-line round trip between CPUs 0 and 1. */
static double floor_ns(long n, double *lat, double tick)
{
	pthread_t t;

	atomic_store(&line, 0);
	pthread_create(&t, NULL, pong, &n);
	for (long i = 0; i < n; i++) {
		uint64_t t0 = perf_ticks(), want = 2 * (uint64_t)i + 2;
		atomic_store_explicit(&line, want - 1, memory_order_release);
		while (atomic_load_explicit(&line, memory_order_acquire) != want)
			perf_relax();
		lat[i] = (double)(perf_ticks() - t0) * tick;
	}
	pthread_join(t, NULL);
	return perf_quantile(lat, (size_t)n, 0.5);
}

static int workers(cgr_ctx *ctx, int kind, cgr_worker **w)
{
	for (int i = 0; i < 2; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		wp.kind = kind;
		wp.cpu = 1 - i;
		if (cgr_worker_create(ctx, &wp, &w[i]) != 0)
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct perf_opts o = { 7, 2000, 0, 0 };
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx;
	cgr_worker *tw[2], *pw[2];
	double tick, *lat, fl[64], med[2][NSIZE][64], ratio[NSIZE][64];

	cgr_worker_main(argc, argv, exports);
	if (perf_parse(argc, argv, &o,
		       "a graph allreduce of 2 workers: threads vs processes"))
		return 2;
	if (!perf_have_cpus(0, 1)) {
		fprintf(stderr, "needs CPUs 0 and 1\n");
		return 1;
	}
	if (o.windows > 64)
		o.windows = 64;
	perf_pin(0);
	tick = perf_tick_ns();
	cp.exports = exports;
	cgr_ctx_create(&cp, &ctx);
	if (workers(ctx, CGR_WORKER_THREAD, tw) || workers(ctx, CGR_WORKER_PROCESS, pw)) {
		fprintf(stderr, "graph_coll: cannot start the workers\n");
		return 1;
	}
	lat = calloc((size_t)o.iters + 1, sizeof(double));
	for (int win = 0; win < o.windows; win++) {
		fl[win] = floor_ns(o.iters, lat, tick);
		for (int s = 0; s < NSIZE; s++) {
			long n = sizes[s] >= (1 << 20) ? o.iters / 10 + 1 :
							 o.iters;
			for (int j = 0; j < 2; j++) {
				int k = (j + win) % 2; /* 0 threads, 1 processes */
				cgr_compiled *c = build(ctx, k ? pw : tw, sizes[s]);
				if (c == NULL || run(c, sizes[s], n, lat, tick) < 0) {
					fprintf(stderr, "graph_coll: %zu bytes on %s "
							"failed\n",
						sizes[s], k ? "processes" : "threads");
					return 1;
				}
				cgr_compiled_destroy(c);
				med[k][s][win] = perf_quantile(lat, (size_t)n, 0.5);
			}
			ratio[s][win] = med[1][s][win] / med[0][s][win];
		}
	}
	double f = perf_median(fl, (size_t)o.windows);
	if (!o.json) {
		printf("graph_coll: allreduce of 2 workers in a graph, %d windows, "
		       "execute+get+release p50\n", o.windows);
		printf("%10s %12s %12s %14s %10s\n", "bytes", "threads us",
		       "processes us", "proc/threads", "floor ns");
	}
	for (int s = 0; s < NSIZE; s++) {
		double t = perf_median(med[0][s], (size_t)o.windows);
		double p = perf_median(med[1][s], (size_t)o.windows);
		double r = perf_median(ratio[s], (size_t)o.windows);
		char cs[32];
		if (!o.json)
			printf("%10zu %12.2f %12.2f %14.2f %10.0f\n", sizes[s],
			       t / 1e3, p / 1e3, r, f);
		snprintf(cs, sizeof(cs), "allreduce_%zu", sizes[s]);
		perf_json("graph_coll", cs, "threads", "exec_p50", t, "ns",
			  "\"floor_ns\":%.1f", f);
		perf_json("graph_coll", cs, "processes", "exec_p50", p, "ns",
			  "\"ratio_to_threads\":%.3f,\"floor_ns\":%.1f", r, f);
	}
	cgr_ctx_destroy(ctx);
	free(lat);
	return 0;
}
