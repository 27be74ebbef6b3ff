/*
 * tests/graph-stream.c: stream tasks (CGR_TASK_STREAM).
 *
 * A stream task's function only enqueues its work on the worker's compute
 * stream; the work runs later, on the stream's thread.  Every consumer
 * must join it: the next stream task by stream order, a communication
 * stream (a device edge's send, a collective) by a device-side wait, the
 * worker thread (a host task, a ring to another worker or to the driver)
 * by its reactor.  The work here lags on purpose (it sleeps before it
 * writes), so a consumer that does not join reads the previous
 * execution's data or garbage.  Overlap off and on, and the errors and
 * the teardown of stream tasks.
 */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cgr.h>
#ifdef CGR_FAKE_CUDART
#include <cuda_runtime_api.h>
#endif

#include "t_workers.h"
#include "tap.h"

#define NE 4    /* elements per tensor */
#define NSLOT 16 /* work records per task: more than max_inflight */

static int64_t g_shape[1] = { NE };

/* One execution's work of a stream task, run on the compute stream:
 * out[e] = (in[e] or x) * mul + add + e, after a lag. */
struct work {
	_Atomic long *started;
	const int64_t *in; /* NE elements, or NULL: x */
	int64_t x;
	int64_t *out;
	int64_t mul, add;
	long lag_ns;
};

struct stask {
	int64_t mul, add;
	long lag_ns;
	bool own_buffer; /* output in memory of its own, copied by cgr */
	_Atomic long started; /* work items begun */
	struct work w[NSLOT];
	int64_t buf[NSLOT][NE];
};

static void work_run(void *arg)
{
	struct work *w = arg;
	struct timespec ts = { 0, w->lag_ns };

	atomic_fetch_add(w->started, 1);
	if (w->lag_ns > 0)
		nanosleep(&ts, NULL);
	for (int e = 0; e < NE; e++)
		w->out[e] = (w->in != NULL ? w->in[e] : w->x) * w->mul +
			    w->add + e;
}

static int stream_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		     size_t nin, cgr_value *out, size_t nout)
{
	struct stask *sk = cgr_task_arg(tc);
	uint64_t seq = cgr_task_seq(tc);
	struct work *w = &sk->w[seq % NSLOT];
	cgr_stream *s = cgr_task_stream(tc);
	(void)st, (void)nin, (void)nout;

	if (s == NULL)
		return -EINVAL;
	w->in = in[0].kind == CGR_VALUE_TENSOR ? in[0].u.tensor.data : NULL;
	w->x = in[0].kind == CGR_VALUE_BYTES ?
		       *(const int64_t *)in[0].u.bytes.data :
		       0;
	w->out = sk->own_buffer ? sk->buf[seq % NSLOT] :
				  cgr_task_output_buffer(tc, 0, NE * 8);
	w->started = &sk->started;
	w->mul = sk->mul;
	w->add = sk->add;
	w->lag_ns = sk->lag_ns;
	if (cgr_stream_launch_host(s, work_run, w) != 0)
		return -EIO;
	out[0] = cgr_value_tensor(w->out, kDLInt, 64, 1, g_shape);
	return 0;
}

/* A host task: out = in * mul + add + e (x for bytes), read at once. */
struct htask {
	int64_t mul, add;
	_Atomic int saw_stream; /* cgr_task_stream gave non-NULL */
};

static int host_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	struct htask *h = cgr_task_arg(tc);
	int64_t *o = cgr_task_output_buffer(tc, 0, NE * 8);
	(void)st, (void)nin, (void)nout;

	if (cgr_task_stream(tc) != NULL)
		h->saw_stream = 1;
	for (int e = 0; e < NE; e++) {
		int64_t v = in[0].kind == CGR_VALUE_TENSOR ?
				    ((const int64_t *)in[0].u.tensor.data)[e] :
				    *(const int64_t *)in[0].u.bytes.data;
		o[e] = v * h->mul + h->add + e;
	}
	out[0] = cgr_value_tensor(o, kDLInt, 64, 1, g_shape);
	return 0;
}

static int64_t f_of(int64_t v, int64_t mul, int64_t add, int e)
{
	return v * mul + add + e;
}

/* Whether outs[k] holds want[e] = f(e); diag on the first mismatch. */
static long check(const cgr_value *o, const int64_t *want, const char *what,
		  long it)
{
	if (o->kind != CGR_VALUE_TENSOR) {
		t_diag("execution %ld: %s is not a tensor: %s", it, what,
		       o->kind == CGR_VALUE_ERROR ? o->u.error.msg : "?");
		return 1;
	}
	for (int e = 0; e < NE; e++)
		if (((const int64_t *)o->u.tensor.data)[e] != want[e]) {
			t_diag("execution %ld: %s[%d] = %lld, want %lld", it,
			       what, e,
			       (long long)((const int64_t *)
						   o->u.tensor.data)[e],
			       (long long)want[e]);
			return 1;
		}
	return 0;
}

/*
 * W[0]: k1 (stream, x*3+1, lags), k2 (stream, reads k1 while it may be in
 * flight: k1*2+5, in a buffer of its own that cgr copies), h (host, reads
 * k2).  W[1]: b (host, x*7).  k2 goes to W[1]'s t1 over a device edge
 * (the send stream joins k2), allreduce(k1, b) (the collective stream
 * joins k1), k2 also to the driver (its WRITE in k2's stream job).
 */
static void test_pipeline(cgr_ctx *ctx, cgr_worker **W, int overlap,
			  bool trace)
{
	/* k1 lags 0.3 ms, k2 0.1 ms */
	static struct stask k1a = { .mul = 3, .add = 1, .lag_ns = 300000 },
			    k2a = { .mul = 2, .add = 5, .lag_ns = 100000,
				    .own_buffer = true };
	static struct htask ha = { 1, 100, 0 }, ba = { 7, 0, 0 },
			    t1a = { 1, 7, 0 };
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *k1, *k2, *h, *b, *t1, *r[2], *outs[5];
	cgr_task_desc ds = CGR_TASK_DESC_INIT, dh = CGR_TASK_DESC_INIT;
	cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	long iters = t_scale(200), bad = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	ds.fn = stream_fn;
	ds.flags = CGR_TASK_STREAM;
	dh.fn = host_fn;
	ds.name = "k1", ds.arg = &k1a;
	cgr_graph_task(g, W[0], &ds, &x, 1, &k1, 1);
	ds.name = "k2", ds.arg = &k2a;
	cgr_graph_task(g, W[0], &ds, &k1, 1, &k2, 1);
	dh.name = "h", dh.arg = &ha;
	cgr_graph_task(g, W[0], &dh, &k2, 1, &h, 1);
	dh.name = "b", dh.arg = &ba;
	cgr_graph_task(g, W[1], &dh, &x, 1, &b, 1);
	dh.name = "t1", dh.arg = &t1a;
	cgr_graph_task(g, W[1], &dh, &k2, 1, &t1, 1);
	t_is(cgr_node_set_transport(k2, CGR_TRANSPORT_DEVICE, 0), 0,
	     "k2 over a device edge");
	cgr_node *ain[2] = { k1, b };
	cp.kind = CGR_COLL_ALLREDUCE;
	cgr_graph_collective(g, &cp, W, 2, ain, 2, r, 2);
	outs[0] = h, outs[1] = t1, outs[2] = r[0], outs[3] = r[1];
	outs[4] = k2;
	cgr_graph_output(g, outs, 5);
	pp.overlap = overlap;
	pp.max_inflight = 4;
	pp.trace_events = trace ? 256 : 0;
	int ret = cgr_graph_compile(g, &pp, &c);
	t_is(ret, 0, "compile (overlap %d): %s", overlap, cgr_graph_errmsg(g));
	if (ret != 0) {
		cgr_graph_destroy(g);
		return;
	}
	/* Keep max_inflight executions in flight: the thread runs ahead of
	 * the lagging stream. */
	cgr_ref refs[4];
	int64_t xs[4];
	long next = 0, got = 0;
	while (got < iters) {
		while (next < iters && next - got < 4) {
			xs[next % 4] = next * 11 + 2;
			cgr_value a = cgr_value_bytes(&xs[next % 4], 8);
			if (cgr_execute(c, &a, 1, &refs[next % 4]) != 0) {
				bad++;
				break;
			}
			next++;
		}
		cgr_value o[5];
		int64_t xv = got * 11 + 2, k1v[NE], k2v[NE], want[NE];
		if (cgr_ref_get(c, refs[got % 4], -1, o, 5) != 0) {
			bad++;
			break;
		}
		for (int e = 0; e < NE; e++) {
			k1v[e] = f_of(xv, 3, 1, e);
			k2v[e] = f_of(k1v[e], 2, 5, e);
		}
		for (int e = 0; e < NE; e++)
			want[e] = f_of(k2v[e], 1, 100, e);
		bad += check(&o[0], want, "h", got);
		for (int e = 0; e < NE; e++)
			want[e] = f_of(k2v[e], 1, 7, e);
		bad += check(&o[1], want, "t1", got);
		for (int e = 0; e < NE; e++)
			want[e] = k1v[e] + f_of(xv, 7, 0, e);
		bad += check(&o[2], want, "allreduce on W[0]", got);
		bad += check(&o[3], want, "allreduce on W[1]", got);
		bad += check(&o[4], k2v, "k2", got);
		cgr_ref_release(c, refs[got % 4]);
		got++;
	}
	t_is(bad, 0,
	     "overlap %d: %ld executions of lagging stream tasks, 4 in "
	     "flight: every consumer saw the finished work",
	     overlap, iters);
	t_is(cgr_compiled_teardown(c, 2000000000), 0, "teardown");
	if (trace) {
		char path[] = "/tmp/cgr-stream-trace-XXXXXX";
		int fd = mkstemp(path);
		static char buf[1 << 20];
		ssize_t n = 0;
		t_is(cgr_compiled_write_trace(c, path), 0, "trace written");
		if (fd >= 0) {
			n = read(fd, buf, sizeof(buf) - 1);
			close(fd);
		}
		buf[n > 0 ? n : 0] = 0;
		unlink(path);
		t_ok(strstr(buf, "compute stream") != NULL &&
			     strstr(buf, "run k1") != NULL &&
			     strstr(buf, "run k2") != NULL,
		     "the trace has a compute stream track with the stream "
		     "tasks' work");
	}
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
}

/* A stream task that returns a list, or fails. */
static int bad_stream_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
			 size_t nin, cgr_value *out, size_t nout)
{
	static int64_t v = 1;
	static cgr_value items[1];
	(void)st, (void)nin, (void)nout;

	if (*(const int64_t *)in[0].u.bytes.data % 2 == 0) {
		cgr_task_set_error(tc, CGR_ETASK, "odd inputs only");
		return -1;
	}
	items[0] = cgr_value_bytes(&v, sizeof(v));
	out[0] = cgr_value_list(items, 1);
	return 0;
}

static void test_errors(cgr_ctx *ctx, cgr_worker **W)
{
	static struct htask ha = { 1, 0, 0 };
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *k, *h, *y;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.fn = host_fn;
	d.flags = 1u << 7;
	t_is(cgr_graph_task(g, W[0], &d, &x, 1, &y, 1), -EINVAL,
	     "an unknown task flag is refused");
	d.fn = bad_stream_fn;
	d.name = "k";
	d.flags = CGR_TASK_STREAM;
	cgr_graph_task(g, W[0], &d, &x, 1, &k, 1);
	d.fn = host_fn;
	d.name = "h";
	d.arg = &ha;
	d.flags = 0;
	cgr_graph_task(g, W[1], &d, &k, 1, &h, 1);
	cgr_graph_output(g, &h, 1);
	pp.overlap = 1;
	int cret = cgr_graph_compile(g, &pp, &c);
	t_is(cret, 0, "compile");
	if (cret != 0) {
		cgr_graph_destroy(g);
		return;
	}
	for (int64_t xv = 1; xv <= 2; xv++) {
		cgr_value a = cgr_value_bytes(&xv, 8), o;
		cgr_ref ref;
		int ret = cgr_execute(c, &a, 1, &ref);
		if (ret == 0)
			ret = cgr_ref_get(c, ref, -1, &o, 1);
		t_is(ret, 0, "execution with x = %lld", (long long)xv);
		if (ret != 0)
			continue;
		if (xv == 1)
			t_ok(o.kind == CGR_VALUE_ERROR &&
				     o.code == CGR_EBADVALUE &&
				     strstr(o.u.error.msg, "list") != NULL,
			     "a stream task's list output becomes an error "
			     "value naming it: %s",
			     o.kind == CGR_VALUE_ERROR ? o.u.error.msg : "?");
		else
			t_ok(o.kind == CGR_VALUE_ERROR &&
				     o.code == CGR_ETASK &&
				     strstr(o.u.error.msg, "odd inputs") !=
					     NULL,
			     "a failing stream task's error reaches the "
			     "output: %s",
			     o.kind == CGR_VALUE_ERROR ? o.u.error.msg : "?");
		cgr_ref_release(c, ref);
	}
	t_ok(!ha.saw_stream, "a host task has no stream");
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *bad;
	wp.device = -3;
	t_is(cgr_worker_create(ctx, &wp, &bad), -EINVAL,
	     "a worker on an unknown device kind is refused");
	wp.device = 77;
	t_is(cgr_worker_create(ctx, &wp, &bad), -ENODEV,
	     "a worker on a CUDA device that does not exist: -ENODEV");
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
}

/* Teardown while the stream still runs long work of several executions
 * returns, and the workers serve another graph. */
static void test_teardown(cgr_ctx *ctx, cgr_worker **W)
{
	static struct stask ka = { .mul = 1, .lag_ns = 100000000 };
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *k;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	struct timespec t0, t1;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.fn = stream_fn;
	d.arg = &ka;
	d.flags = CGR_TASK_STREAM;
	cgr_graph_task(g, W[0], &d, &x, 1, &k, 1);
	cgr_graph_output(g, &k, 1);
	pp.overlap = 1;
	pp.max_inflight = 4;
	int ret = cgr_graph_compile(g, &pp, &c);
	t_is(ret, 0, "compile");
	if (ret != 0) {
		cgr_graph_destroy(g);
		return;
	}
	int64_t xv = 5;
	for (int i = 0; i < 3; i++) {
		cgr_value a = cgr_value_bytes(&xv, 8);
		cgr_ref ref;
		cgr_execute(c, &a, 1, &ref);
	}
	/* The stream is inside the first work item (the others queued). */
	while (atomic_load(&ka.started) == 0)
		sched_yield();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = cgr_compiled_teardown(c, 2000000000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) +
		   (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	t_is(ret, 0, "teardown with 0.3 s of stream work queued");
	t_ok(s < 2.5, "teardown returned in %.2f s", s);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
}

#ifdef CGR_FAKE_CUDART
static char g_log[1024];

static void log_keep(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level == CGR_LOG_ERROR && strstr(msg, "its device failed") != NULL)
		snprintf(g_log, sizeof(g_log), "%s", msg);
}

/* The CUDA device under a running graph fails (an illegal address): the
 * execution is an error value (CGR_EDEVICE), the log says which worker,
 * the graph takes no more executions, teardown and the context end
 * cleanly. */
static void test_device_lost(void (*fail)(int))
{
	static struct stask ka = { .mul = 1 };
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_ctx *c2;
	cgr_worker *w;
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *k;
	int64_t xv = 3;
	cgr_value a = cgr_value_bytes(&xv, 8), o;
	cgr_ref ref;

	cp.log_fn = log_keep;
	cgr_ctx_create(t_workers_params(&cp), &c2);
	wp.device = 0;
	cgr_worker_create(c2, &wp, &w);
	cgr_graph_create(c2, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "k", d.fn = stream_fn, d.arg = &ka;
	d.flags = CGR_TASK_STREAM;
	cgr_graph_task(g, w, &d, &x, 1, &k, 1);
	cgr_graph_output(g, &k, 1);
	pp.overlap = 1;
	pp.get_timeout_ns = 200000000;
	t_is(cgr_graph_compile(g, &pp, &c), 0, "compile on the CUDA worker");
	int ret = cgr_execute(c, &a, 1, &ref);
	if (ret == 0)
		ret = cgr_ref_get(c, ref, -1, &o, 1);
	t_ok(ret == 0 && o.kind == CGR_VALUE_TENSOR &&
		     ((const int64_t *)o.u.tensor.data)[1] == 4,
	     "an execution before the failure is right");
	cgr_ref_release(c, ref);
	fail(cudaErrorIllegalAddress);
	ret = cgr_execute(c, &a, 1, &ref);
	if (ret == 0)
		ret = cgr_ref_get(c, ref, -1, &o, 1);
	t_ok(ret == 0 && o.kind == CGR_VALUE_ERROR && o.code == CGR_EDEVICE &&
		     strstr(o.u.error.msg, "device failed") != NULL,
	     "after it, the execution is a CGR_EDEVICE error value: %s",
	     ret == 0 && o.kind == CGR_VALUE_ERROR ? o.u.error.msg :
						      cgr_strerror(ret));
	if (ret == 0)
		cgr_ref_release(c, ref);
	t_is(cgr_execute(c, &a, 1, &ref), CGR_EWORKERGONE,
	     "then the graph takes no more executions");
	t_is(cgr_compiled_teardown(c, 2000000000), 0, "teardown");
	/* Read after teardown: the worker logged when its device failed. */
	t_ok(strstr(g_log, "CGR_EDEVICE") != NULL &&
		     strstr(g_log, "its device failed") != NULL,
	     "the log says which worker and why: %s", g_log);
	fail(0);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	cgr_ctx_destroy(c2);
}
#endif

/* Stream work held at a gate while the graph is torn down: the worker is
 * not in a task (its task returned), so teardown does not abandon it; it
 * leaves once the work ends and then runs the next graph. */
static _Atomic int gate_open, gate_in;

static void gate_run(void *arg)
{
	atomic_store(&gate_in, 1);
	while (!atomic_load(&gate_open))
		sched_yield();
	/* Its output buffer, written after the graph's destroy: it stays
	 * allocated until the work ended (ASan would see it otherwise). */
	*(volatile int64_t *)arg = 9;
}

static int gate_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	int64_t *o = cgr_task_output_buffer(tc, 0, 8);
	(void)st, (void)in, (void)nin, (void)nout;

	*o = 7;
	if (cgr_stream_launch_host(cgr_task_stream(tc), gate_run, o) != 0)
		return -EIO;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

static _Atomic int slow_ran, slow_issued;

/* 0.8 s of the user's work, then its output buffer written. */
static void slow_work(void *arg)
{
	struct timespec ts = { 0, 800000000 };

	nanosleep(&ts, NULL);
	*(volatile int64_t *)arg = 11;
	atomic_fetch_add(&slow_ran, 1);
}

static int slow_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	int64_t *o = cgr_task_output_buffer(tc, 0, 8);
	(void)st, (void)in, (void)nin, (void)nout;

	*o = 0;
	if (cgr_stream_launch_host(cgr_task_stream(tc), slow_work, o) != 0)
		return -EIO;
	out[0] = cgr_value_bytes(o, 8);
	atomic_fetch_add(&slow_issued, 1);
	return 0;
}

/* 4 s of stream work queued (five executions' 0.8 s each), then a
 * teardown(50 ms) and the graph destroyed: the work is not cut short
 * (every piece runs, past the 2 s a communication stream is given and
 * the 1 s a stream's destroy waits), and the buffers it writes stay
 * allocated until it is done. */
static void test_teardown_long_work(cgr_ctx *ctx, cgr_worker **W)
{
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compiled *c = NULL;
	cgr_graph *g;
	cgr_node *x, *k;
	int64_t xv = 1, end;
	cgr_value a = cgr_value_bytes(&xv, 8);
	cgr_ref ref;

	atomic_store(&slow_ran, 0);
	atomic_store(&slow_issued, 0);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "slow";
	d.fn = slow_fn;
	d.flags = CGR_TASK_STREAM;
	cgr_graph_task(g, W[1], &d, &x, 1, &k, 1);
	cgr_graph_output(g, &k, 1);
	cp.overlap = 1;
	cp.inline_ns = 0; /* every piece on the stream */
	t_is(cgr_graph_compile(g, &cp, &c), 0, "slow stream task compiles");
	cgr_graph_destroy(g);
	if (c == NULL)
		return;
	for (int i = 0; i < 5; i++)
		cgr_execute(c, &a, 1, &ref);
	/* Every task returned (its work queued on the stream). */
	end = t_now_ns() + 20 * 1000000000LL;
	while (atomic_load(&slow_issued) < 5 && t_now_ns() < end)
		sched_yield();
	t_is(cgr_compiled_teardown(c, 50000000), 0,
	     "teardown(50 ms) with 4 s of stream work queued: 0");
	cgr_compiled_destroy(c);
	end = t_now_ns() + 20 * 1000000000LL;
	while (atomic_load(&slow_ran) < 5 && t_now_ns() < end)
		sched_yield();
	t_is(atomic_load(&slow_ran), 5,
	     "all of it ran, writing its buffers, after the destroy");
}

/* Fills 64 bytes of its output buffer with 'X' (the stream's work). */
static void scribble(void *arg)
{
	memset(arg, 'X', 64);
}

/* Enqueues work that writes its output buffer, then fails. */
static int fail_after_work(cgr_task_ctx *tc, void *st, const cgr_value *in,
			   size_t nin, cgr_value *out, size_t nout)
{
	void *o = cgr_task_output_buffer(tc, 0, 64);
	(void)st, (void)in, (void)nin, (void)out, (void)nout;

	if (cgr_stream_launch_host(cgr_task_stream(tc), scribble, o) != 0)
		return -EIO;
	cgr_task_set_error(tc, -1234, "boom %llu",
			   (unsigned long long)cgr_task_seq(tc));
	return 1;
}

/* A stream task that fails after its work was enqueued: that work still
 * runs, and the error value is stored once it did, whole (overlap off and
 * on). */
static void test_fail_after_work(cgr_ctx *ctx, cgr_worker **W)
{
	for (int ov = 0; ov <= 1; ov++) {
		cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		cgr_compiled *c = NULL;
		cgr_graph *g;
		cgr_node *x, *k;
		int64_t xv = 5;
		cgr_value a = cgr_value_bytes(&xv, 8), o;
		int bad = 0;
		cgr_graph_create(ctx, &g);
		cgr_graph_input(g, 0, &x);
		d.name = "S";
		d.fn = fail_after_work;
		d.flags = CGR_TASK_STREAM;
		cgr_graph_task(g, W[0], &d, &x, 1, &k, 1);
		cgr_graph_output(g, &k, 1);
		cp.overlap = ov;
		cgr_graph_compile(g, &cp, &c);
		cgr_graph_destroy(g);
		for (int i = 0; c != NULL && i < 20; i++) {
			cgr_ref ref;
			char want[64];
			int ret = cgr_execute(c, &a, 1, &ref);
			if (ret == 0)
				ret = cgr_ref_get(c, ref, 10000000000LL, &o, 1);
			snprintf(want, sizeof(want),
				 "task S on worker %s, execution %d: boom %d",
				 cgr_worker_name(W[0]), i, i);
			if (ret != 0 || o.kind != CGR_VALUE_ERROR ||
			    o.code != -1234 || strcmp(o.u.error.task, "S") ||
			    strncmp(o.u.error.msg, want, strlen(want))) {
				if (bad++ == 0)
					t_diag("execution %d: %s", i,
					       ret == 0 && o.kind ==
							       CGR_VALUE_ERROR ?
						       o.u.error.msg :
						       "?");
			}
			if (ret == 0)
				cgr_ref_release(c, ref);
		}
		t_ok(c != NULL && bad == 0,
		     "overlap %s: a stream task failing after its work was "
		     "enqueued: 20 error values whole (%d not)",
		     ov ? "on" : "off", bad);
		cgr_compiled_destroy(c);
	}
}

static void test_teardown_late(cgr_ctx *ctx, cgr_worker **W)
{
	static struct htask h = { .mul = 3, .add = 1 };
	cgr_graph *g;
	cgr_compiled *c = NULL, *c2 = NULL;
	cgr_node *x, *k;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_value a, o;
	cgr_ref ref;
	int64_t xv = 5;
	int ret;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.fn = gate_fn;
	d.flags = CGR_TASK_STREAM;
	cgr_graph_task(g, W[0], &d, &x, 1, &k, 1);
	cgr_graph_output(g, &k, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "gated stream task compiles");
	cgr_graph_destroy(g);
	a = cgr_value_bytes(&xv, 8);
	cgr_execute(c, &a, 1, &ref);
	while (!atomic_load(&gate_in))
		sched_yield();
	ret = cgr_compiled_teardown(c, 50000000);
	t_is(ret, 0, "teardown while the stream's work is held: 0 (%s)",
	     cgr_err_name(ret));
	cgr_compiled_destroy(c);
	/* The same worker, before its stream work ended. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d = (cgr_task_desc)CGR_TASK_DESC_INIT;
	d.fn = host_fn;
	d.arg = &h;
	cgr_graph_task(g, W[0], &d, &x, 1, &k, 1);
	cgr_graph_output(g, &k, 1);
	ret = cgr_graph_compile(g, NULL, &c2);
	t_is(ret, 0, "its worker compiles the next graph: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	if (ret != 0) {
		atomic_store(&gate_open, 1);
		return;
	}
	t_is(cgr_execute(c2, &a, 1, &ref), 0, "execute it");
	atomic_store(&gate_open, 1);
	ret = cgr_ref_get(c2, ref, 10000000000LL, &o, 1);
	t_ok(ret == 0 && o.kind == CGR_VALUE_TENSOR &&
		     ((const int64_t *)o.u.tensor.data)[0] == 16,
	     "it runs once the held work ended: %d", ret);
	cgr_ref_release(c2, ref);
	cgr_compiled_destroy(c2);
}

int main(int argc, char **argv)
{
	cgr_ctx *ctx;
	cgr_worker *W[2];

	t_init(argc, argv, 120);
#ifdef CGR_FAKE_CUDART
	/* Workers on CUDA device 0 of a model of the CUDA runtime: their
	 * compute streams are CUDA streams, the communication streams sim
	 * streams that wait for CUDA events. */
	void *h = dlopen(CGR_FAKE_CUDART, RTLD_NOW);
	long (*calls)(void) = NULL;
	if (h != NULL)
		*(void **)&calls = dlsym(h, "fake_cuda_calls");
	long calls0 = calls != NULL ? calls() : 0;
#endif
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx_create(t_workers_params(&cp), &ctx);
	if (t_workers(ctx, W, 2) != 0)
		return 1;
	test_pipeline(ctx, W, 1, true);
#ifdef CGR_FAKE_CUDART
	t_ok(calls != NULL && calls() > calls0 + 100,
	     "the stream tasks ran on the (fake) CUDA device: %ld runtime "
	     "calls",
	     calls != NULL ? calls() - calls0 : 0);
#endif
	test_pipeline(ctx, W, 0, false);
	test_errors(ctx, W);
	test_teardown(ctx, W);
	test_teardown_late(ctx, W);
	test_fail_after_work(ctx, W);
	test_teardown_long_work(ctx, W);
	/* The workers are free again after all of that. */
	test_pipeline(ctx, W, 1, false);
	cgr_ctx_destroy(ctx);
#ifdef CGR_FAKE_CUDART
	void (*fail)(int) = NULL;
	if (h != NULL)
		*(void **)&fail = dlsym(h, "fake_cuda_fail");
	if (fail != NULL)
		test_device_lost(fail);
	if (h != NULL)
		dlclose(h);
#endif
	return t_done();
}
