/*
 * perf/nccl_path: what cgr's NCCL path costs the CPU per operation,
 * measured against the model of libnccl (tests/fake_nccl.c over
 * tests/fake_cudart.c), with the model's own work subtracted.
 *
 * One rank on model GPU 0, an 8-byte float allreduce on a CUDA stream:
 *  - issue: cgr_allreduce with a future (host agreement, group, enqueue,
 *    settle, completion event) against the raw calls the model needs for
 *    the same (ncclAllReduce, cudaEventRecord);
 *  - observe: once the operation ran, cgr_future_test and release against
 *    cudaEventQuery.
 * Both run interleaved in each window (the model's streams are drained
 * between operations, outside the timed part); medians over windows.
 * cgr's added cost = cgr - raw.  The floor printed beside it: a
 * one-cache-line ping-pong between two threads.
 *
 * The model's numbers say nothing about NCCL or a GPU: this is cgr's own
 * bookkeeping only (scripts/gpu-check.sh measures the real thing).
 */
#include "perf/perf.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

#include <cgr.h>

static int (*nc_init_all)(void **, int, const int *);
static int (*nc_allreduce)(const void *, void *, size_t, int, int, void *,
			   void *);
static int (*rt_event_create)(void **, unsigned);
static int (*rt_event_record)(void *, void *);
static int (*rt_event_query)(void *);
static int (*rt_stream_create)(void **, unsigned, int);
static int (*rt_stream_sync)(void *);
static int (*rt_malloc)(void **, size_t);

static int load(void)
{
	void *rt = dlopen(CGR_FAKE_CUDART, RTLD_NOW);
	void *nc = dlopen(CGR_FAKE_NCCL, RTLD_NOW);
	void (*inprogress)(int);

	if (rt == NULL || nc == NULL)
		return -1;
	*(void **)&nc_init_all = dlsym(nc, "ncclCommInitAll");
	*(void **)&nc_allreduce = dlsym(nc, "ncclAllReduce");
	*(void **)&inprogress = dlsym(nc, "fake_nccl_inprogress");
	*(void **)&rt_event_create = dlsym(rt, "cudaEventCreateWithFlags");
	*(void **)&rt_event_record = dlsym(rt, "cudaEventRecord");
	*(void **)&rt_event_query = dlsym(rt, "cudaEventQuery");
	*(void **)&rt_stream_create = dlsym(rt, "cudaStreamCreateWithPriority");
	*(void **)&rt_stream_sync = dlsym(rt, "cudaStreamSynchronize");
	*(void **)&rt_malloc = dlsym(rt, "cudaMalloc");
	if (!nc_init_all || !nc_allreduce || !inprogress || !rt_event_create ||
	    !rt_event_record || !rt_event_query || !rt_stream_create ||
	    !rt_stream_sync || !rt_malloc)
		return -1;
	inprogress(0); /* group ends settle at once, as NCCL's usually do */
	return 0;
}

/* ---- the floor: one cache line between two threads ---- */

static _Atomic uint64_t line __attribute__((aligned(64)));

static void *pong(void *arg)
{
	long n = *(long *)arg;
	for (long i = 0; i < n; i++) {
		while (atomic_load_explicit(&line, memory_order_acquire) !=
		       (uint64_t)(2 * i + 1))
			perf_relax();
		atomic_store_explicit(&line, (uint64_t)(2 * i + 2),
				      memory_order_release);
	}
	return NULL;
}

static double floor_ns(long n)
{
	pthread_t t;
	int64_t t0;

	atomic_store(&line, 0);
	pthread_create(&t, NULL, pong, &n);
	t0 = perf_now_ns();
	for (long i = 0; i < n; i++) {
		atomic_store_explicit(&line, (uint64_t)(2 * i + 1),
				      memory_order_release);
		while (atomic_load_explicit(&line, memory_order_acquire) !=
		       (uint64_t)(2 * i + 2))
			perf_relax();
	}
	pthread_join(t, NULL);
	return (double)(perf_now_ns() - t0) / (double)n;
}

/* ---- one window ---- */

struct side {
	double issue, observe; /* ns per operation, this window */
};

static void window(cgr_comm *c, cgr_stream *s, void *raw, void *rs,
		   void *rev, float *buf, long n, struct side *cg,
		   struct side *rw)
{
	int64_t ci = 0, co = 0, ri = 0, ro = 0, t0, t1;

	for (long i = 0; i < n; i++) {
		cgr_future *f = NULL;
		t0 = perf_now_ns();
		cgr_allreduce(c, 0, buf, buf, 2, CGR_FLOAT32, CGR_SUM, s, &f);
		t1 = perf_now_ns();
		ci += t1 - t0;
		cgr_stream_synchronize(s, -1);
		t0 = perf_now_ns();
		while (cgr_future_test(f) == 0)
			;
		cgr_future_release(f);
		co += perf_now_ns() - t0;

		t0 = perf_now_ns();
		nc_allreduce(buf, buf, 2, 7 /* ncclFloat32 */, 0, raw, rs);
		rt_event_record(rev, rs);
		t1 = perf_now_ns();
		ri += t1 - t0;
		rt_stream_sync(rs);
		t0 = perf_now_ns();
		while (rt_event_query(rev) != 0)
			;
		ro += perf_now_ns() - t0;
	}
	cg->issue = (double)ci / (double)n;
	cg->observe = (double)co / (double)n;
	rw->issue = (double)ri / (double)n;
	rw->observe = (double)ro / (double)n;
}

int main(int argc, char **argv)
{
	struct perf_opts o = { 7, 20000, 0, 0 };
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx;
	cgr_stream *s;
	cgr_comm *c;
	void *raw = NULL, *rs = NULL, *rev = NULL;
	float *buf = NULL;
	int dev = 0;

	if (perf_parse(argc, argv, &o, "cgr's CPU cost per NCCL operation, "
				       "against the model of libnccl"))
		return 2;
	setenv("FAKE_CUDA_NDEV", "1", 1);
	cp.cudart_path = CGR_FAKE_CUDART;
	cp.nccl_path = CGR_FAKE_NCCL;
	const char *step = "loading the models (build tests/libfakenccl.so)";
	int bad = load() != 0;
	if (!bad && (step = "context", cgr_ctx_create(&cp, &ctx) != 0))
		bad = 1;
	if (!bad && (step = "stream", cgr_stream_create(ctx, 0, 0, &s) != 0))
		bad = 1;
	if (!bad && (step = "communicator",
		     cgr_comm_create(ctx, NULL, 1, CGR_BACKEND_NCCL, &c) != 0))
		bad = 1;
	/* A non-blocking stream, an event without timing, as cgr's. */
	if (!bad && (step = "raw baseline",
		     nc_init_all(&raw, 1, &dev) != 0 ||
			     rt_stream_create(&rs, 1, 0) != 0 ||
			     rt_event_create(&rev, 2) != 0 ||
			     rt_malloc((void **)&buf, 64) != 0))
		bad = 1;
	if (bad) {
		fprintf(stderr, "nccl_path: %s failed\n", step);
		return 1;
	}
	double *v[5];
	for (int k = 0; k < 5; k++)
		v[k] = calloc((size_t)o.windows, sizeof(double));
	for (int w = 0; w < o.windows; w++) {
		struct side cg, rw;
		window(c, s, raw, rs, rev, buf, o.iters, &cg, &rw);
		v[0][w] = cg.issue, v[1][w] = rw.issue;
		v[2][w] = cg.observe, v[3][w] = rw.observe;
		v[4][w] = floor_ns(o.iters);
	}
	double m[5];
	for (int k = 0; k < 5; k++)
		m[k] = perf_median(v[k], (size_t)o.windows);
	if (!o.json) {
		printf("%-10s %12s %12s %12s %12s\n", "ns/op", "cgr", "model",
		       "added", "floor");
		printf("%-10s %12.0f %12.0f %12.0f %12.0f\n", "issue", m[0],
		       m[1], m[0] - m[1], m[4]);
		printf("%-10s %12.0f %12.0f %12.0f %12.0f\n", "observe", m[2],
		       m[3], m[2] - m[3], m[4]);
		printf("(%d windows x %ld operations, medians; the model's "
		       "numbers say nothing about NCCL)\n",
		       o.windows, o.iters);
	}
	perf_json("nccl_path", "allreduce_8B_1rank", "cgr", "issue_ns", m[0],
		  "ns", "\"model_ns\":%.1f,\"added_ns\":%.1f,\"floor_ns\":%.1f",
		  m[1], m[0] - m[1], m[4]);
	perf_json("nccl_path", "allreduce_8B_1rank", "cgr", "observe_ns", m[2],
		  "ns", "\"model_ns\":%.1f,\"added_ns\":%.1f,\"floor_ns\":%.1f",
		  m[3], m[2] - m[3], m[4]);
	cgr_comm_destroy(c);
	cgr_stream_destroy(s);
	cgr_ctx_destroy(ctx);
	return 0;
}
