/*
 * perf/tp_mlp.c: time per execution of the tensor-parallel MLP graph
 * (examples/tp_mlp.h: 4 workers, partial MLP each, allreduce) against the
 * sum of its parts measured alone in the same run, window by window: the
 * same graph without the allreduce (compute plus the graph's own cost),
 * and the allreduce of the partials ([8 x 64] float32 over 4 ranks) on
 * the CPU communicator by itself.  The floor (a one-cache-line ping-pong)
 * is printed beside them.
 */
#include "perf.h"

#include <pthread.h>
#include <stdio.h>

#include "../examples/tp_mlp.h"

static int64_t run_graph(cgr_compiled *c, long n, double *lat)
{
	static float xin[BATCH * DIN];
	int64_t shape[2];

	for (long it = -n / 10 - 20; it < n; it++) {
		cgr_value arg = { 0 }, res[TP];
		cgr_ref ref;
		arg.kind = CGR_VALUE_TENSOR;
		mlp_input(xin, (int)it, &arg.u.tensor, shape);
		int64_t t0 = perf_now_ns();
		if (cgr_execute(c, &arg, 1, &ref) != 0 ||
		    cgr_ref_get(c, ref, -1, res, TP) != 0)
			return -1;
		if (it >= 0)
			lat[it] = (double)(perf_now_ns() - t0);
		cgr_ref_release(c, ref);
	}
	return 0;
}

struct ar_rank {
	cgr_comm *comm;
	int rank;
	long n;
	double *lat;
	struct perf_barrier *bar;
};

static void *ar_thread(void *arg)
{
	struct ar_rank *a = arg;
	static __thread float send[BATCH * DOUT], recv[BATCH * DOUT];

	for (long it = -a->n / 10 - 20; it < a->n; it++) {
		perf_barrier_wait(a->bar, TP);
		int64_t t0 = perf_now_ns();
		cgr_allreduce(a->comm, a->rank, send, recv, BATCH * DOUT,
			      CGR_FLOAT32, CGR_SUM, NULL, NULL);
		if (a->rank == 0 && it >= 0)
			a->lat[it] = (double)(perf_now_ns() - t0);
	}
	return NULL;
}

static void run_allreduce(cgr_ctx *ctx, long n, double *lat)
{
	static struct perf_barrier bar;
	struct ar_rank r[TP];
	pthread_t t[TP];
	cgr_comm *comm;

	cgr_comm_create(ctx, NULL, TP, CGR_BACKEND_CPU, &comm);
	for (int i = 0; i < TP; i++) {
		r[i] = (struct ar_rank){ comm, i, n, lat, &bar };
		pthread_create(&t[i], NULL, ar_thread, &r[i]);
	}
	for (int i = 0; i < TP; i++)
		pthread_join(t[i], NULL);
	cgr_comm_destroy(comm);
}

struct pp {
	_Atomic uint64_t line __attribute__((aligned(64)));
	long n;
};

static void *pong(void *arg)
{
	struct pp *p = arg;
	perf_pin(1);
	for (long i = 0; i < p->n; i++) {
		while (atomic_load(&p->line) != 2 * (uint64_t)i + 1)
			perf_relax();
		atomic_store(&p->line, 2 * (uint64_t)i + 2);
	}
	return NULL;
}

static double floor_ns(long n)
{
	static struct pp p;
	pthread_t t;
	double *lat = calloc((size_t)n, sizeof(double)), m;

	atomic_store(&p.line, 0);
	p.n = n;
	pthread_create(&t, NULL, pong, &p);
	for (long i = 0; i < n; i++) {
		int64_t t0 = perf_now_ns();
		atomic_store(&p.line, 2 * (uint64_t)i + 1);
		while (atomic_load(&p.line) != 2 * (uint64_t)i + 2)
			perf_relax();
		lat[i] = (double)(perf_now_ns() - t0);
	}
	pthread_join(t, NULL);
	m = perf_median(lat, (size_t)n);
	free(lat);
	return m;
}

enum { C_GRAPH, C_COMPUTE, C_ALLREDUCE, NC };
static const char *const names[NC] = { "graph", "graph_no_allreduce",
				       "allreduce_alone" };

int main(int argc, char **argv)
{
	struct perf_opts o = { 7, 2000, 0, 0 };
	cgr_ctx *ctx;
	cgr_worker *w[TP];
	double *lat, *p50[NC], fl[64], ratio[64];

	if (perf_parse(argc, argv, &o,
		       "tensor-parallel MLP graph vs its parts measured alone"))
		return 2;
	perf_pin(0);
	mlp_weights();
	cgr_ctx_create(NULL, &ctx);
	if (mlp_workers(ctx, w) != 0)
		return 1;
	lat = calloc((size_t)o.iters, sizeof(double));
	for (int k = 0; k < NC; k++)
		p50[k] = calloc((size_t)o.windows, sizeof(double));
	int nw = o.windows < 64 ? o.windows : 64;
	for (int win = 0; win < nw; win++) {
		fl[win] = floor_ns(20000);
		for (int j = 0; j < NC; j++) {
			int k = (j + win) % NC;
			cgr_compiled *c;
			if (k == C_ALLREDUCE) {
				run_allreduce(ctx, o.iters, lat);
			} else {
				if (mlp_compile(ctx, w, k == C_GRAPH, NULL, NULL, &c) != 0 ||
				    run_graph(c, o.iters, lat) != 0)
					return 1;
				cgr_compiled_destroy(c);
			}
			p50[k][win] = perf_median(lat, (size_t)o.iters);
		}
		ratio[win] = p50[C_GRAPH][win] /
			     (p50[C_COMPUTE][win] + p50[C_ALLREDUCE][win]);
	}
	double m[NC], r = perf_median(ratio, (size_t)nw),
		      f = perf_median(fl, (size_t)nw);
	for (int k = 0; k < NC; k++)
		m[k] = perf_median(p50[k], (size_t)nw);
	if (!o.json) {
		printf("tp_mlp: [%d x %d] -> %d -> %d over %d workers, %d "
		       "windows x %ld executions (floor %.0f ns)\n",
		       BATCH, DIN, DHID, DOUT, TP, nw, o.iters, f);
		for (int k = 0; k < NC; k++)
			printf("  %-20s p50 %10.1f us\n", names[k], m[k] / 1e3);
		printf("  graph / (graph_no_allreduce + allreduce_alone) = "
		       "%.2f (median of per-window ratios)\n",
		       r);
	}
	for (int k = 0; k < NC; k++)
		perf_json("tp_mlp", names[k], "cgr", "time_p50", m[k] / 1e3,
			  "us", "\"floor_ns\":%.1f", f);
	perf_json("tp_mlp", "graph_vs_parts", "cgr", "ratio", r, "x",
		  "\"floor_ns\":%.1f", f);
	cgr_ctx_destroy(ctx);
	return 0;
}
