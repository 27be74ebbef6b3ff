/*
 * tests/gpu-nccl.c: the NCCL backend, CUDA events and device failures on
 * a real GPU (scripts/gpu-check.sh runs it there).  Without a CUDA
 * device or libnccl every check skips, saying why.
 *
 *  1. Correctness on one rank (CUDA device 0): every collective and a
 *     send/recv pair to itself, every dtype NCCL has (int16 and uint16
 *     must be refused), every reduction, counts 1, 1000 and 65537, in
 *     place where NCCL defines it; one rank's result is its input, bit
 *     for bit.  With n >= 2 GPUs, an n-rank allreduce too.
 *  2. Two ranks on the one GPU: NCCL refuses them ("Duplicate GPU"); the
 *     report says so.
 *  3. Latency, interleaved, medians: a cgr allreduce on a CUDA stream and
 *     a future wait against raw ncclAllReduce + cudaStreamSynchronize, at
 *     8 B and 16 MiB; a 4-byte copy's completion seen through a cgr event
 *     against cudaStreamSynchronize; the floor is a 4-byte copy and
 *     cudaStreamSynchronize.  The raw baseline's communicator is made as
 *     cgr makes its own (like with like): nonblocking (config.blocking =
 *     0, ncclCommInitRankConfig inside a group, ncclCommGetAsyncError
 *     polled until it leaves ncclInProgress, within RAW_NS, else the
 *     check fails saying so), each of its allreduces settled the same way
 *     before the stream is synchronized, its result checked bit for bit
 *     once, and it is finalized (settled) before it is destroyed.
 *  4. Overlap: a memset kernel over 512 MiB, a 64 MiB device-to-host copy
 *     and a 16 MiB allreduce on one stream, then on three.
 *  5. Failure (in a fresh process, this program run again with
 *     --role=...: the error is for good, and a child forked from a
 *     process that used CUDA may not use it): a kernel that
 *     writes to address 8 (PTX loaded through the driver API) makes the
 *     stream's device fail: synchronize and event queries report
 *     CGR_EDEVICE, so does the NCCL communicator's next operation (its
 *     buffers allocated before the fault: a dead device allocates
 *     nothing, and a NULL buffer would be -EINVAL); then a
 *     graph whose stream task launches that kernel yields a CGR_EDEVICE
 *     error value and the graph takes no more executions.
 *  6. A device task's list output: its bytes item stays on the host, its
 *     two tensor items (one from host memory, one from device memory)
 *     land in the output's device slot, read back with cudaMemcpy.
 *
 * Results are also printed as JSON lines ("# json {...}").
 *
 * Built with CGR_FAKE_NCCL (tests/gpu-nccl-fake), it runs here against
 * the models of libcudart and libnccl (tests/fake_cudart.c,
 * tests/fake_nccl.c) on one model GPU, the fault being the model's
 * failure hook instead of a kernel: that proves the program's own logic
 * (so that it runs the first time on a GPU), and its numbers mean
 * nothing.  There the baseline's communicator stays ncclInProgress for
 * a few polls (the model's default), and the model must have seen
 * nothing NCCL forbids (a call on a communicator still in progress,
 * destroy without a finalize).
 *
 * Each child has CHILD_NS to finish; one that does not is killed
 * (SIGKILL) and its check fails, and a child dies with this process
 * (PR_SET_PDEATHSIG), so that the GPU check never hangs on one.
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "tap.h"
#include "comm/comm.h"
#include "comm/reduce.h"
#include "device/device.h"

/* The few runtime and NCCL calls the baselines need, with the headers'
 * prototypes (resolved with dlsym: nothing links against either). */
#define T_FN(name) static __typeof__(name) *
T_FN(cudaMalloc) rt_malloc;
T_FN(cudaFree) rt_free;
T_FN(cudaMemcpy) rt_memcpy;
T_FN(cudaMemcpyAsync) rt_memcpy_async;
T_FN(cudaMemsetAsync) rt_memset_async;
T_FN(cudaMallocHost) rt_malloc_host;
T_FN(cudaFreeHost) rt_free_host;
T_FN(cudaStreamSynchronize) rt_stream_sync;
T_FN(ncclGetUniqueId) nc_unique_id;
T_FN(ncclCommInitRankConfig) nc_init_config;
T_FN(ncclCommGetAsyncError) nc_async;
T_FN(ncclGroupStart) nc_group_start;
T_FN(ncclGroupEnd) nc_group_end;
T_FN(ncclAllReduce) nc_allreduce;
T_FN(ncclCommFinalize) nc_finalize;
T_FN(ncclCommDestroy) nc_destroy;
T_FN(ncclCommAbort) nc_abort;
T_FN(ncclGetErrorString) nc_error_string;
T_FN(ncclGetLastError) nc_last_error;
#undef T_FN

/* Unified addressing tells the direction. */
#define DEFAULT cudaMemcpyDefault
/* The raw baseline's init, and each of its operations, must settle
 * within this (cgr's own: 30 s, 60 s). */
#define RAW_NS 30000000000ll

static cgr_ctx *ctx;
static char g_log[1024]; /* the last warning or error */
static char g_why[1024]; /* the last message of any level (skip reasons) */

static void log_keep(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= CGR_LOG_WARN)
		snprintf(g_log, sizeof(g_log), "%s", msg);
	snprintf(g_why, sizeof(g_why), "%s", msg);
	/* Which libraries cgr loaded, and their versions. */
	if (strncmp(msg, "cuda: runtime ", 14) == 0 ||
	    (strncmp(msg, "nccl: ", 6) == 0 && strstr(msg, ", version ")))
		t_diag("lib: %s", msg);
}

#ifdef CGR_FAKE_NCCL
#define RAW_CUDART CGR_FAKE_CUDART
#define RAW_NCCL CGR_FAKE_NCCL
#else
#define RAW_CUDART NULL
#define RAW_NCCL "libnccl.so.2"
#endif

static void ctx_params(cgr_ctx_params *cp)
{
	cp->log_fn = log_keep;
	/* Why a device or NCCL is absent is logged at INFO. */
	cp->log_level = CGR_LOG_INFO;
#ifdef CGR_FAKE_NCCL
	cp->cudart_path = CGR_FAKE_CUDART;
	cp->nccl_path = CGR_FAKE_NCCL;
#endif
}

static void *sym(void *h, const char *name)
{
	void *f = h != NULL ? dlsym(h, name) : NULL;
	if (f == NULL) {
		t_diag("missing %s", name);
		snprintf(g_why, sizeof(g_why), "%s not found", name);
	}
	return f;
}

/* libcudart (the one cgr loaded) and libnccl for the baselines. */
static int load_raw(void)
{
	/* The runtime cgr loaded (by soname, newest first), as cgr does. */
	static const char *const rts[] = { "libcudart.so.13",
					   "libcudart.so.12" };
	void *rt = RAW_CUDART ? dlopen(RAW_CUDART, RTLD_NOW) : NULL, *nc;

	for (size_t i = 0; rt == NULL && i < 2; i++)
		rt = dlopen(rts[i], RTLD_NOW | RTLD_NOLOAD);
	for (size_t i = 0; rt == NULL && i < 2; i++)
		rt = dlopen(rts[i], RTLD_NOW);
	nc = dlopen(RAW_NCCL, RTLD_NOW);
#define SYM(h, var, name) *(void **)&var = sym(h, #name)
	SYM(nc, nc_unique_id, ncclGetUniqueId);
	SYM(nc, nc_init_config, ncclCommInitRankConfig);
	SYM(nc, nc_async, ncclCommGetAsyncError);
	SYM(nc, nc_group_start, ncclGroupStart);
	SYM(nc, nc_group_end, ncclGroupEnd);
	SYM(nc, nc_finalize, ncclCommFinalize);
	SYM(nc, nc_abort, ncclCommAbort);
	SYM(nc, nc_error_string, ncclGetErrorString);
	SYM(nc, nc_last_error, ncclGetLastError);
#undef SYM
	*(void **)&rt_malloc = sym(rt, "cudaMalloc");
	*(void **)&rt_free = sym(rt, "cudaFree");
	*(void **)&rt_memcpy = sym(rt, "cudaMemcpy");
	*(void **)&rt_memcpy_async = sym(rt, "cudaMemcpyAsync");
	*(void **)&rt_memset_async = sym(rt, "cudaMemsetAsync");
	*(void **)&rt_malloc_host = sym(rt, "cudaMallocHost");
	*(void **)&rt_free_host = sym(rt, "cudaFreeHost");
	*(void **)&rt_stream_sync = sym(rt, "cudaStreamSynchronize");
	*(void **)&nc_allreduce = sym(nc, "ncclAllReduce");
	*(void **)&nc_destroy = sym(nc, "ncclCommDestroy");
	if (!rt_malloc || !rt_free || !rt_memcpy || !rt_memcpy_async ||
	    !rt_memset_async || !rt_malloc_host || !rt_free_host ||
	    !rt_stream_sync)
		return -1;
	return nc_unique_id && nc_init_config && nc_async && nc_group_start &&
			       nc_group_end && nc_allreduce && nc_finalize &&
			       nc_destroy && nc_abort && nc_error_string &&
			       nc_last_error ?
		       0 :
		       -1;
}

static void *dmalloc(size_t n)
{
	void *p = NULL;
	return rt_malloc(&p, n ? n : 1) == 0 ? p : NULL;
}

/* ---- 1. correctness ------------------------------------------------ */

/* Element i of dtype dt: small integers, exact in every dtype. */
static void fill(void *buf, cgr_dtype dt, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int v = (int)(i % 61) - 30;
		switch (dt) {
		case CGR_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
		case CGR_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(v + 30); break;
		case CGR_INT32: ((int32_t *)buf)[i] = v; break;
		case CGR_UINT32: ((uint32_t *)buf)[i] = (uint32_t)(v + 30); break;
		case CGR_INT64: ((int64_t *)buf)[i] = v; break;
		case CGR_UINT64: ((uint64_t *)buf)[i] = (uint64_t)(v + 30); break;
		case CGR_FLOAT16:
			((uint16_t *)buf)[i] = cgr__float_to_half((float)v);
			break;
		case CGR_BFLOAT16:
			((uint16_t *)buf)[i] = cgr__float_to_bf16((float)v);
			break;
		case CGR_FLOAT32: ((float *)buf)[i] = (float)v; break;
		case CGR_FLOAT64: ((double *)buf)[i] = v; break;
		default: ((uint8_t *)buf)[i * cgr_dtype_size(dt)] = 0; break;
		}
	}
}

enum { K_AR, K_AG, K_RS, K_RED, K_BC, K_GA, K_SC, K_A2A, K_P2P, K_N };
static const char *const knames[K_N] = { "allreduce", "allgather",
					 "reducescatter", "reduce",
					 "broadcast", "gather", "scatter",
					 "alltoall", "send/recv" };

/* One operation of kind k on rank 0 of c, on s, waited for. */
static int run_one(cgr_comm *c, int k, const void *in, void *out, size_t n,
		   cgr_dtype dt, cgr_redop op, cgr_stream *s)
{
	cgr_future *f = NULL;
	int ret;

	switch (k) {
	case K_AR: ret = cgr_allreduce(c, 0, in, out, n, dt, op, s, &f); break;
	case K_AG: ret = cgr_allgather(c, 0, in, out, n, dt, s, &f); break;
	case K_RS:
		ret = cgr_reducescatter(c, 0, in, out, n, dt, op, s, &f);
		break;
	case K_RED:
		ret = cgr_reduce(c, 0, in, out, n, dt, op, 0, s, &f);
		break;
	case K_BC: ret = cgr_broadcast(c, 0, in, out, n, dt, 0, s, &f); break;
	case K_GA: ret = cgr_gather(c, 0, in, out, n, dt, 0, s, &f); break;
	case K_SC: ret = cgr_scatter(c, 0, in, out, n, dt, 0, s, &f); break;
	case K_A2A: ret = cgr_alltoall(c, 0, in, out, n, dt, s, &f); break;
	default:
		ret = cgr_group_start(c, 0);
		if (ret == 0)
			ret = cgr_send(c, 0, in, n, dt, 0, s, NULL);
		if (ret == 0)
			ret = cgr_recv(c, 0, out, n, dt, 0, s, NULL);
		if (ret == 0)
			ret = cgr_group_end(c, 0, &f);
		break;
	}
	if (ret == 0 && f != NULL)
		ret = cgr_future_wait(f, 10000000000ll);
	cgr_future_release(f);
	return ret;
}

static bool reducing(int k)
{
	return k == K_AR || k == K_RS || k == K_RED;
}

/* Every (kind, dtype, op, count, in place) on one rank; returns the
 * failures, the first described in why. */
static long correctness(cgr_comm *c, cgr_stream *s, char *why, size_t len)
{
	static const size_t counts[] = { 1, 1000, 65537 };
	const size_t cap = 65537 * 8;
	unsigned char *h_in = malloc(cap), *h_out = malloc(cap);
	void *d_in = dmalloc(cap), *d_out = dmalloc(cap);
	long bad = 0, cases = 0;

	for (int k = 0; k < K_N; k++)
		for (int dt = 0; dt < CGR_DTYPE_COUNT; dt++)
			for (int op = 0; op < (reducing(k) ? CGR_REDOP_COUNT : 1);
			     op++)
				for (size_t ci = 0; ci < 3; ci++)
					for (int ip = 0; ip < 2; ip++) {
		size_t n = counts[ci], b = n * cgr_dtype_size((cgr_dtype)dt);
		bool inplace_ok = k == K_AR || k == K_RED || k == K_BC ||
				  k == K_AG || k == K_RS || k == K_GA ||
				  k == K_SC;
		if (ip && !inplace_ok)
			continue;
		fill(h_in, (cgr_dtype)dt, n);
		memset(h_out, 0xa5, b);
		rt_memcpy(d_in, h_in, b, DEFAULT);
		rt_memcpy(d_out, h_out, b, DEFAULT);
		int ret = run_one(c, k, d_in, ip ? d_in : d_out, n,
				  (cgr_dtype)dt, (cgr_redop)op, s);
		bool no16 = dt == CGR_INT16 || dt == CGR_UINT16;
		cases++;
		if (no16 && reducing(k)) {
			if (ret != -EINVAL && bad++ == 0)
				snprintf(why, len, "%s of int16: %s, not EINVAL",
					 knames[k], cgr_strerror(ret));
			continue;
		}
		if (no16)
			continue; /* moved as bytes: nothing to compare */
		rt_memcpy(h_out, ip ? d_in : d_out, b, DEFAULT);
		if (ret != 0 || memcmp(h_out, h_in, b) != 0) {
			if (bad++ == 0)
				snprintf(why, len,
					 "%s dtype %d op %d count %zu%s: %s",
					 knames[k], dt, op, n,
					 ip ? " in place" : "",
					 ret ? cgr_strerror(ret) : "wrong data");
		}
	}
	t_diag("json {\"check\":\"nccl_correctness\",\"ranks\":1,\"cases\":%ld,"
	       "\"failed\":%ld}", cases, bad);
	rt_free(d_in);
	rt_free(d_out);
	free(h_in);
	free(h_out);
	return bad;
}

/* ---- 3. latency ---------------------------------------------------- */

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int64_t median(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp64);
	return v[n / 2];
}

#ifdef CGR_FAKE_NCCL
/* The model's counters (tests/fake_nccl.c). */
static long fake_count(const char *name)
{
	void *h = dlopen(CGR_FAKE_NCCL, RTLD_NOW | RTLD_NOLOAD);
	long (*fn)(void) = NULL;

	*(void **)&fn = h != NULL ? dlsym(h, name) : NULL;
	return fn != NULL ? fn() : -1;
}

static long fake_polls(void)
{
	return fake_count("fake_nccl_inprogress_polls");
}
#endif

/*
 * Waits until raw communicator nc leaves ncclInProgress (polling
 * ncclCommGetAsyncError, as cgr does), for at most RAW_NS: 0, or -1 with
 * why (what, and NCCL's result or the timeout).
 */
static int raw_settle(ncclComm_t nc, const char *what, char *why, size_t len)
{
	int64_t deadline = cgr__now_ns() + RAW_NS;
	ncclResult_t st = ncclInProgress, e;

	for (;;) {
		if ((e = nc_async(nc, &st)) != ncclSuccess)
			st = e;
		if (st != ncclInProgress)
			break;
		if (cgr__now_ns() >= deadline) {
			snprintf(why, len, "%s: still ncclInProgress after "
				 "%lld s", what, RAW_NS / 1000000000);
			return -1;
		}
		sched_yield();
	}
	if (st != ncclSuccess) {
		snprintf(why, len, "%s: %s (%s)", what, nc_error_string(st),
			 nc_last_error(nc));
		return -1;
	}
	return 0;
}

/* The baseline's communicator, one rank on CUDA device 0 (made current
 * by the caller), made as cgr makes its own: nonblocking, inside a
 * group, settled.  0, or -1 with why. */
static int raw_init(ncclComm_t *out, char *why, size_t len)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclComm_t nc = NULL;
	ncclUniqueId id;
	ncclResult_t e, ge;

	cfg.blocking = 0;
	if ((e = nc_unique_id(&id)) != ncclSuccess) {
		snprintf(why, len, "ncclGetUniqueId: %s", nc_error_string(e));
		return -1;
	}
	nc_group_start();
	e = nc_init_config(&nc, 1, id, 0, &cfg);
	ge = nc_group_end();
	if (e == ncclSuccess || e == ncclInProgress)
		e = ge;
	if (e != ncclSuccess && e != ncclInProgress) {
		snprintf(why, len, "ncclCommInitRankConfig: %s (%s)",
			 nc_error_string(e), nc_last_error(nc));
		if (nc != NULL)
			nc_abort(nc);
		return -1;
	}
	if (raw_settle(nc, "nonblocking init", why, len) != 0) {
		nc_abort(nc);
		return -1;
	}
	*out = nc;
	return 0;
}

/* Finalized (settled), then destroyed; aborted if it does not settle. */
static int raw_fini(ncclComm_t nc, char *why, size_t len)
{
	ncclResult_t e = nc_finalize(nc);

	if ((e != ncclSuccess && e != ncclInProgress) ||
	    raw_settle(nc, "finalize", why, len) != 0) {
		if (e != ncclSuccess && e != ncclInProgress)
			snprintf(why, len, "ncclCommFinalize: %s",
				 nc_error_string(e));
		nc_abort(nc);
		return -1;
	}
	nc_destroy(nc);
	return 0;
}

/* One raw float sum allreduce of n on rs, settled as cgr's are: NCCL's
 * result (ncclSuccess once enqueued), or an error with why. */
static ncclResult_t raw_allreduce(ncclComm_t nc, const void *in, void *out,
				  size_t n, cudaStream_t rs, char *why,
				  size_t len)
{
	ncclResult_t e = nc_allreduce(in, out, n, ncclFloat32, ncclSum, nc,
				      rs);

	if (e == ncclInProgress)
		e = raw_settle(nc, "ncclAllReduce", why, len) == 0 ?
			    ncclSuccess :
			    ncclInternalError;
	else if (e != ncclSuccess)
		snprintf(why, len, "ncclAllReduce: %s (%s)",
			 nc_error_string(e), nc_last_error(nc));
	return e;
}

/* The baseline's allreduce, once, on data: its result bit for bit (one
 * rank: its input).  0, or -1 with why. */
static int raw_check(ncclComm_t nc, cudaStream_t rs, void *d_in,
		     void *d_out, size_t n, char *why, size_t len)
{
	float *h = malloc(n * 4), *back = malloc(n * 4);
	int ret = -1;

	for (size_t i = 0; i < n; i++)
		h[i] = (float)(i % 61) - 30;
	memset(back, 0xa5, n * 4);
	if (rt_memcpy(d_in, h, n * 4, DEFAULT) != cudaSuccess ||
	    rt_memcpy(d_out, back, n * 4, DEFAULT) != cudaSuccess)
		snprintf(why, len, "cudaMemcpy failed");
	else if (raw_allreduce(nc, d_in, d_out, n, rs, why, len) != ncclSuccess)
		;
	else if (rt_stream_sync(rs) != cudaSuccess ||
		 rt_memcpy(back, d_out, n * 4, DEFAULT) != cudaSuccess)
		snprintf(why, len, "synchronize or copy back failed");
	else if (memcmp(back, h, n * 4) != 0)
		snprintf(why, len, "wrong data (not settled before the "
			 "stream was synchronized?)");
	else
		ret = 0;
	free(h);
	free(back);
	return ret;
}

/* cgr allreduce + future wait vs raw NCCL (settled) +
 * cudaStreamSynchronize of bytes, interleaved; the floor: a 4-byte copy
 * + synchronize.  The raw communicator is nonblocking, as cgr's. */
static void latency(cgr_comm *c, cgr_stream *s, size_t bytes, int iters)
{
	cudaStream_t rs = cgr__cuda_stream_use(s);
	ncclComm_t raw = NULL;
	void *d_in = dmalloc(bytes), *d_out = dmalloc(bytes);
	int64_t *tc = calloc((size_t)iters, 8), *tr = calloc((size_t)iters, 8);
	int64_t *tf = calloc((size_t)iters, 8);
	size_t n = bytes / 4;
	char why[512] = "";
#ifdef CGR_FAKE_NCCL
	long p0 = fake_polls();
#endif
	int bad = raw_init(&raw, why, sizeof(why));

#ifdef CGR_FAKE_NCCL
	/* The model keeps a nonblocking init ncclInProgress for 2 polls. */
	t_ok(bad != 0 || fake_polls() - p0 >= 2,
	     "the model: the baseline's init was polled through "
	     "ncclInProgress (%ld polls)", fake_polls() - p0);
#endif
	if (bad == 0)
		bad = raw_check(raw, rs, d_in, d_out, n, why, sizeof(why));
	t_ok(bad == 0, "raw NCCL baseline at %zu B: a nonblocking "
		       "communicator, settled, its allreduce bit for bit %s",
	     bytes, why);
	for (int i = -10; i < iters && bad == 0; i++) {
		int64_t t0 = cgr__now_ns(), t1, t2, t3;
		run_one(c, K_AR, d_in, d_out, n, CGR_FLOAT32, CGR_SUM, s);
		t1 = cgr__now_ns();
		if (raw_allreduce(raw, d_in, d_out, n, rs, why, sizeof(why)) !=
		    ncclSuccess)
			bad = 1;
		rt_stream_sync(rs);
		t2 = cgr__now_ns();
		rt_memcpy_async(d_out, d_in, 4, DEFAULT, rs);
		rt_stream_sync(rs);
		t3 = cgr__now_ns();
		if (i >= 0)
			tc[i] = t1 - t0, tr[i] = t2 - t1, tf[i] = t3 - t2;
	}
	if (raw != NULL && raw_fini(raw, why, sizeof(why)) != 0)
		bad = 1;
	t_ok(bad == 0, "...its %d allreduces settled, finalized %s", iters,
	     why);
	if (bad != 0) {
		rt_free(d_in);
		rt_free(d_out);
		free(tc);
		free(tr);
		free(tf);
		return;
	}
	int64_t mc = median(tc, iters), mr = median(tr, iters),
		mf = median(tf, iters);
	t_diag("json {\"check\":\"allreduce_latency\",\"bytes\":%zu,"
	       "\"cgr_ns\":%lld,\"raw_nccl_ns\":%lld,\"added_ns\":%lld,"
	       "\"floor_copy_sync_ns\":%lld,\"iters\":%d}",
	       bytes, (long long)mc, (long long)mr, (long long)(mc - mr),
	       (long long)mf, iters);
	t_diag("allreduce %zu B: cgr %lld ns, raw NCCL %lld ns (added %lld "
	       "ns; target 1000), floor %lld ns",
	     bytes, (long long)mc, (long long)mr, (long long)(mc - mr),
	     (long long)mf);
	rt_free(d_in);
	rt_free(d_out);
	free(tc);
	free(tr);
	free(tf);
}

/* A 4-byte copy's completion seen through a cgr event vs the runtime. */
static void event_latency(cgr_stream *s, int iters)
{
	cudaStream_t rs = cgr__cuda_stream_use(s);
	void *a = dmalloc(4), *b = dmalloc(4);
	int64_t *te = calloc((size_t)iters, 8), *tr = calloc((size_t)iters, 8);
	cgr_event *e;

	cgr_event_create(ctx, &e);
	for (int i = -10; i < iters; i++) {
		int64_t t0 = cgr__now_ns(), t1, t2;
		cgr_stream_memcpy_async(s, b, a, 4);
		cgr_event_record(e, s);
		while (cgr_event_query(e) == 0)
			;
		t1 = cgr__now_ns();
		rt_memcpy_async(b, a, 4, DEFAULT, rs);
		rt_stream_sync(rs);
		t2 = cgr__now_ns();
		if (i >= 0)
			te[i] = t1 - t0, tr[i] = t2 - t1;
	}
	int64_t me = median(te, iters), mr = median(tr, iters);
	t_diag("json {\"check\":\"event_latency\",\"cgr_event_ns\":%lld,"
	       "\"cuda_sync_ns\":%lld,\"added_ns\":%lld}",
	       (long long)me, (long long)mr, (long long)(me - mr));
	t_diag("a copy's completion: through a cgr event %lld ns, "
	       "cudaStreamSynchronize %lld ns (added %lld ns; target 2000)",
	     (long long)me, (long long)mr, (long long)(me - mr));
	cgr_event_destroy(e);
	rt_free(a);
	rt_free(b);
	free(te);
	free(tr);
}

/* ---- 4. overlap ---------------------------------------------------- */

static void overlap(cgr_comm *c)
{
	const size_t big = 512u << 20, cp = 64u << 20, ar = 16u << 20;
	cgr_stream *s[3];
	void *d_big = dmalloc(big), *d_cp = dmalloc(cp), *d_ar = dmalloc(ar);
	void *h_cp = NULL;
	int64_t t[2];

	rt_malloc_host(&h_cp, cp);
	for (int i = 0; i < 3; i++)
		cgr_stream_create(ctx, 0, 0, &s[i]);
	for (int on = 0; on < 2; on++) {
		int64_t best = INT64_MAX;
		for (int rep = 0; rep < 5; rep++) {
			cgr_stream *a = s[0], *b = on ? s[1] : s[0],
				   *d = on ? s[2] : s[0];
			cgr_future *f = NULL;
			int64_t t0 = cgr__now_ns();
			rt_memset_async(d_big, rep, big, cgr__cuda_stream_use(a));
			rt_memcpy_async(h_cp, d_cp, cp, DEFAULT,
					cgr__cuda_stream_use(b));
			cgr_allreduce(c, 0, d_ar, d_ar, ar / 4, CGR_FLOAT32,
				      CGR_SUM, d, &f);
			cgr_future_wait(f, -1);
			cgr_future_release(f);
			for (int i = 0; i < 3; i++)
				cgr_stream_synchronize(s[i], -1);
			int64_t dt = cgr__now_ns() - t0;
			best = dt < best ? dt : best;
		}
		t[on] = best;
	}
	t_diag("json {\"check\":\"overlap\",\"one_stream_us\":%lld,"
	       "\"three_streams_us\":%lld}",
	       (long long)t[0] / 1000, (long long)t[1] / 1000);
	t_diag("memset kernel + copy + allreduce: one stream %lld us, three "
	       "streams %lld us",
	     (long long)t[0] / 1000, (long long)t[1] / 1000);
	for (int i = 0; i < 3; i++)
		cgr_stream_destroy(s[i]);
	rt_free(d_big);
	rt_free(d_cp);
	rt_free(d_ar);
	rt_free_host(h_cp);
}

/* ---- 5. failure ---------------------------------------------------- */

#ifdef CGR_FAKE_NCCL
static void (*fake_fail)(int);

static int load_fault(void)
{
	void *h = dlopen(CGR_FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
	*(void **)&fake_fail = sym(h, "fake_cuda_fail");
	return fake_fail != NULL ? 0 : -1;
}

/* The model fails as a kernel's illegal access would. */
static int launch_fault(cgr_stream *s)
{
	(void)s;
	fake_fail(700 /* cudaErrorIllegalAddress */);
	return 0;
}
#else
#include "t_fault_ptx.h"

static void *fault_fn; /* CUfunction */
static int (*cu_launch)(void *, unsigned, unsigned, unsigned, unsigned,
			unsigned, unsigned, unsigned, void *, void **,
			void **);

/* The kernel that writes to address 8, through the driver API. */
static int load_fault(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	int (*init)(unsigned), (*load)(void **, const void *);
	int (*get)(void **, void *, const char *);
	void *mod = NULL;

	*(void **)&init = sym(h, "cuInit");
	*(void **)&load = sym(h, "cuModuleLoadData");
	*(void **)&get = sym(h, "cuModuleGetFunction");
	*(void **)&cu_launch = sym(h, "cuLaunchKernel");
	if (!init || !load || !get || !cu_launch || init(0) != 0)
		return -1;
	/* The runtime made device 0's primary context current (a stream
	 * was created on it). */
	if (load(&mod, fault_ptx) != 0 || get(&fault_fn, mod, "cgr_fault"))
		return -1;
	return 0;
}

static int launch_fault(cgr_stream *s)
{
	void *p = (void *)8, *args[1] = { &p };
	return cu_launch(fault_fn, 1, 1, 1, 1, 1, 1, 0,
			 cgr__cuda_stream_use(s), args, NULL);
}
#endif

static int fault_task(cgr_task_ctx *tc, void *st, const cgr_value *in,
		      size_t nin, cgr_value *out, size_t nout)
{
	uint64_t x;
	(void)st, (void)nin, (void)nout;
	memcpy(&x, in[0].u.bytes.data, 8);
	if (x == 2 && launch_fault(cgr_task_stream(tc)) != 0)
		return -1;
	out[0] = cgr_value_bytes(cgr_task_output_buffer(tc, 0, 8), 8);
	return 0;
}

/* In the child: exit status = failed checks (printed as it goes). */
static int failure_child(void)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_stream *s;
	cgr_comm *c;
	cgr_event *e;
	int bad = 0, r;

	ctx_params(&cp);
	if (cgr_ctx_create(&cp, &ctx) || cgr_stream_create(ctx, 0, 0, &s) ||
	    cgr_comm_create(ctx, NULL, 1, CGR_BACKEND_NCCL, &c) ||
	    load_raw() != 0 || load_fault() != 0) {
		printf("# json {\"check\":\"failure\",\"error\":\"setup\"}\n");
		return 1;
	}
	cgr_event_create(ctx, &e);
	/* Before the fault: a dead device allocates nothing (and a NULL
	 * buffer would be -EINVAL, not the device's error). */
	void *d = dmalloc(64);
	r = launch_fault(s);
	int rec = cgr_event_record(e, s);
	int sync = cgr_stream_synchronize(s, 5000000000ll);
	int q = cgr_event_query(e);
	int op = d != NULL ? run_one(c, K_AR, d, d, 16, CGR_FLOAT32, CGR_SUM,
				     s) :
			     -ENOMEM;
	/* The record itself may see the failure first (then the event has
	 * no record to query). */
	bad += r != 0 || sync != CGR_EDEVICE || (rec == 0 && q >= 0) ||
	       op != CGR_EDEVICE;
	printf("# json {\"check\":\"device_failure\",\"launch\":%d,"
	       "\"synchronize\":\"%s\",\"event_query\":%d,"
	       "\"nccl_after\":\"%s\",\"log\":\"%s\"}\n",
	       r, cgr_err_name(sync), q, cgr_err_name(op), g_log);
	cgr_event_destroy(e);
	if (d != NULL)
		rt_free(d);
	cgr_comm_destroy(c);
	cgr_stream_destroy(s);
	cgr_ctx_destroy(ctx);
	return bad;
}

/* A graph whose stream task makes its device fail on execution 2. */
static int graph_failure_child(void)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_worker *w;
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *k;
	cgr_value o;
	cgr_ref ref;
	int res[3] = { 0 }, bad = 0;

	cgr_stream *s;

	ctx_params(&cp);
	wp.device = 0;
	/* The stream makes device 0's primary context current here, where
	 * the kernel is loaded. */
	if (cgr_ctx_create(&cp, &ctx) || cgr_stream_create(ctx, 0, 0, &s) ||
	    cgr_worker_create(ctx, &wp, &w) || load_fault() != 0)
		return 1;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "k", d.fn = fault_task, d.flags = CGR_TASK_STREAM;
	cgr_graph_task(g, w, &d, &x, 1, &k, 1);
	cgr_graph_output(g, &k, 1);
	pp.overlap = 1;
	if (cgr_graph_compile(g, &pp, &c) != 0)
		return 1;
	for (uint64_t i = 1; i <= 3; i++) {
		cgr_value a = cgr_value_bytes(&i, 8);
		int ret = cgr_execute(c, &a, 1, &ref);
		if (ret == 0 && cgr_ref_get(c, ref, 10000000000ll, &o, 1) == 0) {
			res[i - 1] = o.kind == CGR_VALUE_ERROR ? o.code : 1;
			cgr_ref_release(c, ref);
		} else {
			res[i - 1] = ret ? ret : -ETIMEDOUT;
		}
	}
	bad = res[0] != 1 || res[1] != CGR_EDEVICE || res[2] != CGR_EWORKERGONE;
	printf("# json {\"check\":\"graph_device_failure\",\"exec1\":\"%s\","
	       "\"exec2\":\"%s\",\"exec3\":\"%s\"}\n",
	       res[0] == 1 ? "ok" : cgr_err_name(res[0]),
	       cgr_err_name(res[1]), cgr_err_name(res[2]));
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	cgr_stream_destroy(s);
	cgr_ctx_destroy(ctx);
	return bad;
}

/* ---- 6. a device task's list ---------------------------------------- */

static int64_t list_host[16];
static void *list_dev; /* 16 int64 on GPU 0 */

/* [bytes "head", int64 [16] in host memory, int64 [16] on the GPU]. */
static int list_task(cgr_task_ctx *tc, void *st, const cgr_value *in,
		     size_t nin, cgr_value *out, size_t nout)
{
	static int64_t shape = 16;
	static cgr_value items[3];
	(void)tc, (void)st, (void)in, (void)nin, (void)nout;
	items[0] = cgr_value_bytes("head", 5);
	items[1] = cgr_value_tensor(list_host, kDLInt, 64, 1, &shape);
	items[2] = cgr_value_tensor(list_dev, kDLInt, 64, 1, &shape);
	items[2].u.tensor.device.device_type = kDLCUDA;
	out[0] = cgr_value_list(items, 3);
	return 0;
}

/* Whether list o holds execution x's items, its tensors on GPU 0. */
static bool list_right(const cgr_value *o, int64_t x)
{
	const cgr_value *it = o->u.list.items;
	int64_t back[16];

	if (o->kind != CGR_VALUE_LIST || o->u.list.n != 3 ||
	    it[0].kind != CGR_VALUE_BYTES || strcmp(it[0].u.bytes.data, "head"))
		return false;
	for (int k = 1; k <= 2; k++) {
		if (it[k].kind != CGR_VALUE_TENSOR ||
		    it[k].u.tensor.device.device_type != kDLCUDA ||
		    it[k].u.tensor.device.device_id != 0 ||
		    rt_memcpy(back, it[k].u.tensor.data, sizeof(back),
			      DEFAULT) != cudaSuccess)
			return false;
		for (int i = 0; i < 16; i++)
			if (back[i] != x * 100 + i + (k == 2 ? 50 : 0))
				return false;
	}
	return true;
}

/* Bytes stay on the host, both tensors land in the output's device slot
 * (read back with cudaMemcpy). */
static void device_list(int iters)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compiled *c = NULL;
	cgr_worker *w = NULL;
	cgr_node *x, *l;
	cgr_graph *g;
	int64_t dv[16];
	int bad = 0;

	wp.device = 0;
	list_dev = dmalloc(sizeof(dv));
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "list", d.fn = list_task, d.flags = CGR_TASK_DEVICE;
	if (list_dev == NULL || cgr_worker_create(ctx, &wp, &w) != 0 ||
	    cgr_graph_task(g, w, &d, &x, 1, &l, 1) != 0 ||
	    cgr_graph_output(g, &l, 1) != 0 || cgr_graph_compile(g, &pp, &c))
		bad = -1;
	for (int64_t e = 1; bad >= 0 && e <= iters; e++) {
		cgr_value a = cgr_value_bytes(&e, 8), o;
		cgr_ref ref;
		for (int i = 0; i < 16; i++)
			list_host[i] = e * 100 + i, dv[i] = e * 100 + i + 50;
		if (rt_memcpy(list_dev, dv, sizeof(dv), DEFAULT) ||
		    cgr_execute(c, &a, 1, &ref) != 0) {
			bad++;
			continue;
		}
		if (cgr_ref_get(c, ref, 10000000000ll, &o, 1) != 0)
			bad++;
		else
			bad += !list_right(&o, e);
		cgr_ref_release(c, ref);
	}
	t_diag("json {\"check\":\"device_list\",\"executions\":%d,"
	       "\"bad\":%d}",
	       iters, bad);
	t_is(bad, 0, "a device task's list: bytes on the host, tensors from "
		     "host and device memory in its GPU slot (%d executions) %s",
	     iters, cgr_graph_errmsg(g));
	if (c != NULL)
		cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	if (w != NULL)
		cgr_worker_destroy(w, -1);
	if (list_dev != NULL)
		rt_free(list_dev);
}

/* ---- child processes ----------------------------------------------- */

extern char **environ;

#define CHILD_NS 60000000000ll /* each child's time to finish */

static const struct {
	const char *role;
	int (*fn)(void);
} roles[] = {
	{ "failure", failure_child },
	{ "graph-failure", graph_failure_child },
};

/*
 * In the child (main's first act, before any CUDA call): argv is
 * "--role=NAME --parent=PID".  Exit status: the role's failed checks.
 */
static int child_main(const char *role, const char *parent)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* Dies with the parent, even one that died before this line. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 ||
	    getppid() != (pid_t)strtol(parent, NULL, 10))
		return 125;
#ifdef CGR_FAKE_NCCL
	setenv("FAKE_CUDA_NDEV", "1", 1);
#endif
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
		if (strcmp(role, roles[i].role) == 0)
			return roles[i].fn();
	printf("# unknown role %s\n", role);
	return 126;
}

/* Waits for pid until deadline (CLOCK_MONOTONIC ns): 0 with its status
 * in *st, or -ETIMEDOUT.  It sleeps in poll on a pidfd (readable when
 * the child exits), or in naps of 10 ms where there is none. */
static int wait_until(pid_t pid, int64_t deadline, int *st)
{
#ifdef SYS_pidfd_open
	int fd = (int)syscall(SYS_pidfd_open, pid, 0), ret = -ETIMEDOUT;
#else
	int fd = -1, ret = -ETIMEDOUT;
#endif

	for (;;) {
		pid_t w = waitpid(pid, st, WNOHANG);
		int64_t left = deadline - cgr__now_ns();

		if (w == pid) {
			ret = 0;
			break;
		}
		if (w < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		if (left <= 0)
			break;
		if (fd >= 0) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			int ms = (int)(left / 1000000) + 1;
			poll(&p, 1, ms);
		} else {
			struct timespec ts = { 0, 10000000 };
			nanosleep(&ts, NULL);
		}
	}
	if (fd >= 0)
		close(fd);
	return ret;
}

/* Runs role in a fresh process (this program again, with nothing of
 * this process's CUDA or NCCL state), for at most CHILD_NS. */
static void in_child(const char *role, const char *what)
{
	char arole[64], aparent[64];
	char *av[] = { "gpu-nccl", arole, aparent, NULL };
	pid_t pid;
	int st = 0, ret;

	snprintf(arole, sizeof(arole), "--role=%s", role);
	snprintf(aparent, sizeof(aparent), "--parent=%ld", (long)getpid());
	fflush(stdout);
	ret = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, av, environ);
	if (ret != 0) {
		t_ok(0, "%s: posix_spawn: %s", what, strerror(ret));
		return;
	}
	ret = wait_until(pid, cgr__now_ns() + CHILD_NS, &st);
	if (ret == -ETIMEDOUT) {
		kill(pid, SIGKILL);
		/* A process stuck in the driver may take a while to go. */
		if (wait_until(pid, cgr__now_ns() + 5000000000ll, &st) != 0)
			t_diag("child %ld did not exit after SIGKILL",
			       (long)pid);
		t_ok(0, "%s: no result within %lld s, killed", what,
		     CHILD_NS / 1000000000);
		return;
	}
	t_ok(ret == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	     "%s (child %s, status %d)", what,
	     ret != 0 ? strerror(-ret) :
	     WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exited",
	     WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

int main(int argc, char **argv)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w2[2];
	cgr_stream *s;
	cgr_comm *c;
	char why[300] = "";
	int ret;

	if (argc == 3 && strncmp(argv[1], "--role=", 7) == 0 &&
	    strncmp(argv[2], "--parent=", 9) == 0)
		return child_main(argv[1] + 7, argv[2] + 9);
	t_init(argc, argv, 190);
#ifdef CGR_FAKE_NCCL
	setenv("FAKE_CUDA_NDEV", "1", 1);
#endif
	ctx_params(&cp);
	cgr_ctx_create(&cp, &ctx);
	if (cgr_stream_create(ctx, 0, 0, &s) != 0) {
		t_skipf("no CUDA device, the GPU checks not run: %s", g_why);
		cgr_ctx_destroy(ctx);
		return t_done();
	}
	ret = cgr_comm_create(ctx, NULL, 1, CGR_BACKEND_NCCL, &c);
	g_why[0] = 0;
	if (ret != 0 || load_raw() != 0) {
		t_skipf("no NCCL, the NCCL checks not run: %s", g_why);
		cgr_stream_destroy(s);
		cgr_ctx_destroy(ctx);
		return t_done();
	}
	t_is(correctness(c, s, why, sizeof(why)), 0,
	     "every collective, dtype, op, count on one rank, bit for bit %s",
	     why);
	for (int i = 0; i < 2; i++) {
		wp.device = 0;
		cgr_worker_create(ctx, &wp, &w2[i]);
	}
	cgr_comm *two;
	g_log[0] = 0;
	ret = cgr_comm_create(ctx, w2, 2, CGR_BACKEND_NCCL, &two);
	t_diag("json {\"check\":\"two_ranks_one_gpu\",\"result\":\"%s\"}",
	       ret == 0 ? "allowed" : cgr_err_name(ret));
	t_ok(ret == -EINVAL, "two thread workers on the one GPU: NCCL "
			     "refuses them (%s)", g_log);
	if (ret == 0)
		cgr_comm_destroy(two);
	latency(c, s, 8, 2000);
	latency(c, s, 16u << 20, 100);
	event_latency(s, 2000);
	overlap(c);
	device_list(200);
	cgr_comm_destroy(c);
	cgr_stream_destroy(s);
	cgr_ctx_destroy(ctx);
#ifdef CGR_FAKE_NCCL
	t_is(fake_count("fake_nccl_misuse"), 0,
	     "the model saw nothing NCCL forbids (cgr's calls and the "
	     "baseline's)");
#endif
	in_child("failure", "a faulting kernel: CGR_EDEVICE from the stream, "
				"its events, the NCCL communicator");
	in_child("graph-failure",
		 "a faulting kernel in a stream task: a CGR_EDEVICE error "
		 "value, then CGR_EWORKERGONE");
	return t_done();
}
