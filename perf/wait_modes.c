/*
 * perf/wait_modes.c: the three wait modes (busy, adaptive, block) side by
 * side, with the cores free and with more runnable threads than cores.
 *
 * Graphs: a 1-worker echo and a 2-worker chain of thread workers (worker
 * 0 on CPU 1, worker 1 and the driver on CPU 0, as in graph_roundtrip),
 * compiled in each wait mode.  Two phases: "free" (nothing else runs),
 * then "oversub": H busy threads (--hogs H, default 2), pinned in turn to
 * CPUs 0 and 1, started by this program at the start of the phase and
 * stopped at its end, never waiting: an inference server's own threads.
 * In each phase, window after window, every case runs (the graphs
 * alternate, the modes go through all six orders: a busy case leaves
 * its threads owing CPU time to the scheduler, and the case after it
 * pays), 20 ms apart, for at most -n round trips or a time budget per
 * case (300 ms; --quick 100 ms), after a warm-up (a tenth of the round
 * trips, at least 20 ms) in which adaptive waits learn.  The floor, a
 * one-cache-line ping-pong between CPUs 0 and 1, is measured -w times
 * before.
 *
 * Reported: per case the median over windows of the mean round trip
 * (execute + get + release: what an execution costs, tail included; p50
 * and p99 alongside), and the medians of per-window ratios adaptive /
 * block and adaptive / busy.  Targets: adaptive at most 1.5x block when
 * oversubscribed, at most 1.1x busy with free cores.
 */
#include "perf.h"
#include "perf_echo.h"

#include <pthread.h>
#include <stdbool.h>

#include <cgr.h>

#include "reactor/reactor.h"

#define MSG 64
#define MAXW 64

/* ---- busy threads ---- */

static _Atomic int g_hog_stop;

static void *hog(void *arg)
{
	volatile uint64_t n = 0;

	perf_pin((int)(intptr_t)arg);
	while (!atomic_load_explicit(&g_hog_stop, memory_order_relaxed))
		n++;
	return NULL;
}

static void hogs_start(pthread_t *th, int n)
{
	atomic_store(&g_hog_stop, 0);
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, hog, (void *)(intptr_t)(i % 2));
}

static void hogs_stop(pthread_t *th, int n)
{
	atomic_store(&g_hog_stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

/* ---- floor ---- */

static _Atomic uint64_t g_line __attribute__((aligned(64)));

static void *pong(void *arg)
{
	perf_pin(1);
	for (uint64_t i = 1; i <= (uint64_t)(intptr_t)arg; i++) {
		while (atomic_load_explicit(&g_line, memory_order_acquire) !=
		       2 * i - 1)
			perf_relax();
		atomic_store_explicit(&g_line, 2 * i, memory_order_release);
	}
	return NULL;
}

/* One-line ping-pong round trip between CPUs 0 and 1, p50 in ns. */
static double pingpong_floor(double tick)
{
	enum { N = 20000 };
	static double lat[N];
	pthread_t t;

	atomic_store(&g_line, 0);
	pthread_create(&t, NULL, pong, (void *)(intptr_t)N);
	for (uint64_t i = 1; i <= N; i++) {
		uint64_t t0 = perf_ticks();
		atomic_store_explicit(&g_line, 2 * i - 1, memory_order_release);
		while (atomic_load_explicit(&g_line, memory_order_acquire) !=
		       2 * i)
			perf_relax();
		lat[i - 1] = (double)(perf_ticks() - t0) * tick;
	}
	pthread_join(t, NULL);
	return perf_median(lat, N);
}

/* ---- graphs ---- */

struct result {
	double mean, p50, p99; /* ns */
	long n;
};

/* Compiles a chain of nw echo tasks in mode; warms up, then runs round
 * trips until n or budget_ns. */
static int run_graph(cgr_ctx *ctx, cgr_worker **w, int nw, int mode, long n,
		     int64_t budget_ns, double *lat, double tick,
		     struct result *res)
{
	cgr_graph *g = perf_echo_chain(ctx, w, nw);
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_compiled *c;
	char msg[MSG] = { 7 };
	cgr_value arg = cgr_value_bytes(msg, MSG), out;
	int64_t t0, warm_end;
	long i, k = 0;
	bool measuring = false;
	int ret;

	pp.wait_mode = mode;
	ret = cgr_graph_compile(g, &pp, &c);
	cgr_graph_destroy(g);
	if (ret != 0)
		return ret;
	t0 = perf_now_ns();
	warm_end = t0 + 20000000;
	for (i = 0; ret == 0; i++) {
		cgr_ref r;
		uint64_t s;
		if (!measuring && i >= n / 10 &&
		    (t0 = perf_now_ns()) >= warm_end)
			measuring = true; /* the warm-up is over */
		s = perf_ticks();
		if ((ret = cgr_execute(c, &arg, 1, &r)) != 0 ||
		    (ret = cgr_ref_get(c, r, -1, &out, 1)) != 0)
			break;
		cgr_ref_release(c, r);
		if (!measuring)
			continue;
		lat[k++] = (double)(perf_ticks() - s) * tick;
		if (k >= n || perf_now_ns() - t0 >= budget_ns)
			break;
	}
	res->mean = k > 0 ? (double)(perf_now_ns() - t0) / (double)k : 0;
	res->n = k;
	res->p99 = perf_quantile(lat, (size_t)k, 0.99);
	res->p50 = perf_quantile(lat, (size_t)k, 0.50);
	cgr_compiled_destroy(c);
	return ret;
}

enum { L_FREE, L_OVER, NLOAD };
enum { G_ECHO, G_CHAIN, NGRAPH };
enum { M_BUSY, M_ADAPT, M_BLOCK, NMODE };
static const char *const load_name[NLOAD] = { "free", "oversub" };
static const char *const graph_name[NGRAPH] = { "echo1", "chain2" };
static const int graph_nw[NGRAPH] = { 1, 2 };
static const char *const mode_name[NMODE] = { "busy", "adaptive", "block" };
static const int mode_val[NMODE] = { CGR_WAIT_BUSY, CGR_WAIT_ADAPTIVE,
				     CGR_WAIT_BLOCK };

/* Per window results. */
static struct result g_res[NLOAD][NGRAPH][NMODE][MAXW];
static double g_floor[MAXW];

static double med_of(int l, int gi, int m, int nw, int what)
{
	double v[MAXW];

	for (int w = 0; w < nw; w++)
		v[w] = what == 0   ? g_res[l][gi][m][w].mean
		       : what == 1 ? g_res[l][gi][m][w].p50
				   : g_res[l][gi][m][w].p99;
	return perf_median(v, (size_t)nw);
}

/* Median over windows of mean(m1) / mean(m2). */
static double ratio_of(int l, int gi, int m1, int m2, int nw)
{
	double v[MAXW];

	for (int w = 0; w < nw; w++)
		v[w] = g_res[l][gi][m1][w].mean / g_res[l][gi][m2][w].mean;
	return perf_median(v, (size_t)nw);
}

/* What the adaptive waits of the driver and the two workers learned,
 * per load, where the library keeps a record (a worker's is found by its
 * init, which runs on its thread). */
#ifdef CGR__SPIN_SLOTS
static struct cgr__spin_stat *g_st[3];
static struct cgr__spin_stat g_acc[NLOAD][NMODE][3], g_before[3];

static int worker_init(void *arg, void **state)
{
	g_st[1 + (int)(intptr_t)arg] = cgr__spin_stat();
	*state = NULL;
	return 0;
}

static void spin_mark(void)
{
	for (int t = 0; t < 3; t++)
		g_before[t] = *g_st[t];
}

static void spin_add(int l, int m)
{
	for (int t = 0; t < 3; t++) {
		struct cgr__spin_stat *a = &g_acc[l][m][t], *b = &g_before[t],
				      *n = g_st[t];
		a->spun += n->spun - b->spun;
		a->paid += n->paid - b->paid;
		a->parked_pressure +=
		    n->parked_pressure - b->parked_pressure;
		a->parked_miss += n->parked_miss - b->parked_miss;
		a->probes += n->probes - b->probes;
		a->steals += n->steals - b->steals;
		a->stolen += n->stolen - b->stolen;
		a->lost_ns += n->lost_ns - b->lost_ns;
		a->parks += n->parks - b->parks;
	}
}

static void spin_diag(int quiet)
{
	static const char *const who[3] = { "driver", "worker0", "worker1" };

	if (quiet)
		return;
	printf("what the waits did (all windows; spins and losses: adaptive "
	       "only):\n");
	for (int l = 0; l < NLOAD; l++)
		for (int t = 0; t < 3; t++) {
			const struct cgr__spin_stat *a = &g_acc[l][M_ADAPT][t];
			if (g_acc[l][M_ADAPT][t].spun +
				g_acc[l][M_ADAPT][t].parked_pressure +
				g_acc[l][M_ADAPT][t].parked_miss ==
			    0)
				continue;
			printf("  %-7s %-7s parked: busy %6llu, adaptive %6llu, "
			       "block %6llu; adaptive: %6llu spins (%6llu "
			       "paid), at once %6llu (pressure) %4llu "
			       "(misses); %4llu probes; %3llu losses (%llu "
			       "with no run-queue wait), %.1f ms\n",
			       load_name[l], who[t],
			       (unsigned long long)g_acc[l][M_BUSY][t].parks,
			       (unsigned long long)a->parks,
			       (unsigned long long)g_acc[l][M_BLOCK][t].parks,
			       (unsigned long long)a->spun,
			       (unsigned long long)a->paid,
			       (unsigned long long)a->parked_pressure,
			       (unsigned long long)a->parked_miss,
			       (unsigned long long)a->probes,
			       (unsigned long long)a->steals,
			       (unsigned long long)a->stolen,
			       (double)a->lost_ns / 1e6);
		}
}
#else
#define worker_init NULL
static void spin_mark(void)
{
}
static void spin_add(int l, int m)
{
	(void)l, (void)m;
}
static void spin_diag(int quiet)
{
	(void)quiet;
}
#endif

static int workers(cgr_ctx *ctx, cgr_worker **w)
{
	for (int i = 0; i < 2; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		int ret;
		wp.cpu = 1 - i;
		wp.init = worker_init;
		wp.arg = (void *)(intptr_t)i;
		if ((ret = cgr_worker_create(ctx, &wp, &w[i])) != 0)
			return ret;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct perf_opts o = { 7, 20000, 0, 0 };
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx;
	cgr_worker *w[2];
	pthread_t hth[64];
	int nhogs = 2, nargs = 0;
	const char *only_load = NULL, *only_graph = NULL;
	char *args[64];
	int64_t budget;
	double tick, *lat;
	/* Every order of the three modes; 20 ms with every thread parked
	 * between cases. */
	static const int perm[6][NMODE] = { { 0, 1, 2 }, { 1, 2, 0 },
					    { 2, 0, 1 }, { 0, 2, 1 },
					    { 2, 1, 0 }, { 1, 0, 2 } };
	const struct timespec settle = { 0, 20000000 };

	/* --hogs H, --load L, --graph G are ours; the rest perf.h's. */
	for (int i = 0; i < argc && nargs < 63; i++) {
		if (i > 0 && !strcmp(argv[i], "--hogs") && i + 1 < argc)
			nhogs = atoi(argv[++i]);
		else if (i > 0 && !strcmp(argv[i], "--load") && i + 1 < argc)
			only_load = argv[++i];
		else if (i > 0 && !strcmp(argv[i], "--graph") && i + 1 < argc)
			only_graph = argv[++i];
		else
			args[nargs++] = argv[i];
	}
	args[nargs] = NULL;
	if (perf_parse(nargs, args, &o,
		       "wait modes with free cores and oversubscribed "
		       "(--hogs H busy threads, default 2; --load free|oversub "
		       "and --graph echo1|chain2: only those)"))
		return 2;
	if (nhogs < 1 || nhogs > 64)
		nhogs = 2;
	if (o.windows > MAXW)
		o.windows = MAXW;
	if (!perf_have_cpus(0, 1)) {
		fprintf(stderr, "needs CPUs 0 and 1\n");
		return 1;
	}
	budget = o.quick ? 100000000 : 300000000;
	perf_pin(0);
	tick = perf_tick_ns();
	cgr_ctx_create(&cp, &ctx);
#ifdef CGR__SPIN_SLOTS
	g_st[0] = cgr__spin_stat();
#endif
	if (workers(ctx, w) != 0) {
		fprintf(stderr, "cannot start the workers\n");
		return 1;
	}
	lat = calloc((size_t)o.iters, sizeof(double));
	for (int win = 0; win < o.windows; win++)
		g_floor[win] = pingpong_floor(tick);
	for (int l = 0; l < NLOAD; l++) {
		if (only_load && strcmp(only_load, load_name[l]))
			continue;
		if (l == L_OVER)
			hogs_start(hth, nhogs);
		for (int win = 0; win < o.windows; win++)
			for (int q = 0; q < NGRAPH * NMODE; q++) {
				/* The graphs alternate; the modes go through
				 * all six orders, so that no mode always
				 * follows the same one (a busy case leaves its
				 * threads owing CPU time to the scheduler). */
				int gi = (q / NMODE + win) % NGRAPH;
				int m = perm[win % 6][q % NMODE];
				long n = o.iters;
				int ret;
				if (only_graph &&
				    strcmp(only_graph, graph_name[gi]))
					continue;
				if (graph_nw[gi] == 2)
					n = n / 4 > 0 ? n / 4 : 1;
				spin_mark();
				nanosleep(&settle, NULL);
				ret = run_graph(ctx, w, graph_nw[gi],
						mode_val[m], n, budget, lat,
						tick, &g_res[l][gi][m][win]);
				spin_add(l, m);
				if (ret != 0) {
					fprintf(stderr, "%s %s %s: %s\n",
						load_name[l], graph_name[gi],
						mode_name[m],
						cgr_strerror(ret));
					return 1;
				}
			}
		if (l == L_OVER)
			hogs_stop(hth, nhogs);
	}

	double fl = perf_median(g_floor, (size_t)o.windows);
	if (!o.json) {
		printf("wait_modes: %d windows, up to %ld round trips (chain "
		       "%ld) or %lld ms a case, 64-byte values, driver on CPU "
		       "0; oversub: %d busy threads on CPUs 0-1 (%ld online)\n",
		       o.windows, o.iters, o.iters / 4,
		       (long long)(budget / 1000000), nhogs,
		       sysconf(_SC_NPROCESSORS_ONLN));
		printf("mean round trip (us), medians over windows; p50 in "
		       "brackets\n");
		printf("%-8s %-7s %17s %17s %17s %9s %9s\n", "load", "graph",
		       "busy", "adaptive", "block", "adapt/blk",
		       "adapt/busy");
		for (int l = 0; l < NLOAD; l++)
			for (int gi = 0; gi < NGRAPH; gi++) {
				if (g_res[l][gi][M_BUSY][0].n == 0)
					continue;
				printf("%-8s %-7s", load_name[l],
				       graph_name[gi]);
				for (int m = 0; m < NMODE; m++)
					printf(" %8.2f [%6.2f]",
					       med_of(l, gi, m, o.windows, 0) /
						   1e3,
					       med_of(l, gi, m, o.windows, 1) /
						   1e3);
				printf(" %9.2f %10.2f\n",
				       ratio_of(l, gi, M_ADAPT, M_BLOCK,
						o.windows),
				       ratio_of(l, gi, M_ADAPT, M_BUSY,
						o.windows));
			}
		printf("floor (one-line ping-pong, CPUs 0-1): %.0f ns\n", fl);
		printf("targets: adaptive/block <= 1.5 oversub; adaptive/busy "
		       "<= 1.1 free\n");
		spin_diag(o.json);
	}
	for (int l = 0; l < NLOAD; l++)
		for (int gi = 0; gi < NGRAPH; gi++)
			for (int m = 0; m < NMODE; m++) {
				char cs[64];
				if (g_res[l][gi][m][0].n == 0)
					continue;
				snprintf(cs, sizeof(cs), "%s_%s_%s",
					 graph_name[gi], mode_name[m],
					 load_name[l]);
				perf_json("wait_modes", cs, "cgr", "rtt_mean",
					  med_of(l, gi, m, o.windows, 0), "ns",
					  "\"p50_ns\":%.1f,\"p99_ns\":%.1f,"
					  "\"ratio_to_block\":%.3f,"
					  "\"ratio_to_busy\":%.3f,"
					  "\"hogs\":%d,\"floor_ns\":%.1f",
					  med_of(l, gi, m, o.windows, 1),
					  med_of(l, gi, m, o.windows, 2),
					  ratio_of(l, gi, m, M_BLOCK,
						   o.windows),
					  ratio_of(l, gi, m, M_BUSY, o.windows),
					  l == L_OVER ? nhogs : 0, fl);
			}
	perf_json("wait_modes", "floor", "pingpong", "rtt_p50", fl, "ns",
		  NULL);
	cgr_ctx_destroy(ctx);
	free(lat);
	return 0;
}
