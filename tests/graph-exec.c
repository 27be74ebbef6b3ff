/*
 * tests/graph-exec.c: compiled graphs computing real values: a 4-stage
 * pipeline and a diamond over 1e4 executions (checked one by one), every
 * wait mode, gets in any order up to the in-flight limit, error values
 * that reach only their own execution, get timeouts, multi-output tasks,
 * constants, the whole-input node, tensors, zero-copy and copied outputs,
 * and no task call for an execution the driver did not submit.
 *
 * tests/graph-exec-proc is the same program with T_PROCESS_WORKERS: W[1]
 * and W[3] are process workers (this program again, cgr_worker_main),
 * W[0] and W[2] threads, so every graph mixes both; the task functions
 * are exported by name, and a task of a process worker gets its affine
 * coefficients as a constant input instead of a pointer arg.  What needs
 * memory shared with the driver (the admission counters, on a device
 * edge) runs on threads only.
 *
 * tests/graph-exec-eager is the same program with T_EAGER: every graph
 * runs eagerly (cgr_graph_execute_eager, through tests/t_eager.h) and
 * must give the same values.  Left out there: the get timeout (an eager
 * run finishes before cgr_execute returns) and the driver-thread
 * allocation count (the harness copies each result).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include <cgr.h>
#ifndef CGR_SANITIZE
#include <jemalloc/jemalloc.h>
#endif

#include "t_eager.h"
#include "t_workers.h"
#include "tap.h"

/* in: u64; out: u64 * mul + add (mul, add from the task's arg). */
struct affine {
	uint64_t mul, add;
};

static int affine_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		     size_t nin, cgr_value *out, size_t nout)
{
	const struct affine *a = cgr_task_arg(tc);
	uint64_t x, *o;

	(void)st, (void)nout;
	if (a == NULL && nin == 2 && in[1].u.bytes.len == sizeof(*a))
		a = in[1].u.bytes.data; /* a process worker's: a constant */
	if (in[0].kind != CGR_VALUE_BYTES || in[0].u.bytes.len != 8) {
		cgr_task_set_error(tc, CGR_EBADVALUE, "want 8 bytes, got %zu",
				   in[0].u.bytes.len);
		return -1;
	}
	memcpy(&x, in[0].u.bytes.data, 8);
	o = cgr_task_output_buffer(tc, 0, 8); /* zero copy */
	*o = x * a->mul + a->add;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

/* Sum of all u64 inputs, returned from a thread-local (copied). */
static int sum_fn(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		  cgr_value *out, size_t nout)
{
	static __thread uint64_t s;
	(void)tc, (void)st, (void)nout;
	s = 0;
	for (size_t i = 0; i < nin; i++) {
		uint64_t x;
		memcpy(&x, in[i].u.bytes.data, 8);
		s += x;
	}
	out[0] = cgr_value_bytes(&s, 8);
	return 0;
}

/* Fails on executions whose input is divisible by 7. */
static int picky_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	uint64_t x;
	memcpy(&x, in[0].u.bytes.data, 8);
	if (x % 7 == 0) {
		cgr_task_set_error(tc, -EDOM, "%llu is divisible by 7",
				   (unsigned long long)x);
		return -1;
	}
	return sum_fn(tc, st, in, nin, out, nout);
}

/* Two outputs: quotient and remainder by 10. */
static int divmod_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		     size_t nin, cgr_value *out, size_t nout)
{
	static __thread uint64_t q, r;
	uint64_t x;
	(void)tc, (void)st, (void)nin, (void)nout;
	memcpy(&x, in[0].u.bytes.data, 8);
	q = x / 10, r = x % 10;
	out[0] = cgr_value_bytes(&q, 8);
	out[1] = cgr_value_bytes(&r, 8);
	return 0;
}

static _Atomic int gate; /* slow_fn waits until the test opens it */

static int slow_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	while (!atomic_load(&gate))
		;
	return sum_fn(tc, st, in, nin, out, nout);
}

/* Doubles every element of a float tensor. */
static int dbl_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	const DLTensor *t = &in[0].u.tensor;
	size_t n = cgr_tensor_nbytes(t) / 4;
	static __thread float own[4096];
	float *o = cgr_task_output_buffer(tc, 0, n * 4);
	(void)st, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_TENSOR || t->dtype.code != kDLFloat ||
	    n > 4096)
		return CGR_EBADVALUE;
	if (o == NULL)
		o = own; /* does not fit cgr's buffer: cgr copies (or not) */
	for (size_t i = 0; i < n; i++)
		o[i] = ((const float *)t->data)[i] * 2.0f;
	out[0].kind = CGR_VALUE_TENSOR;
	out[0].u.tensor = *t;
	out[0].u.tensor.data = o;
	return 0;
}

/* Bytes this thread ever allocated (jemalloc); 0 in sanitizer builds. */
static uint64_t thread_allocated(void)
{
#ifdef CGR_SANITIZE
	return 0;
#else
	uint64_t v = 0;
	size_t sz = sizeof(v);
	mallctl("thread.allocated", &v, &sz, NULL, 0);
	return v;
#endif
}

static uint64_t u64(const cgr_value *v)
{
	uint64_t x = 0;
	if (v->kind == CGR_VALUE_BYTES && v->u.bytes.len == 8)
		memcpy(&x, v->u.bytes.data, 8);
	return x;
}

static cgr_ctx *ctx;
static cgr_worker *W[4];
static bool is_proc[4];

/* A task; on a process worker an affine task's arg becomes a constant
 * second input. */
static cgr_node *add_task(cgr_graph *g, cgr_worker *w, const char *name,
			  cgr_task_fn fn, void *arg, cgr_node **in, size_t nin)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_node *n = NULL, *ins[2];
	d.name = name, d.fn = fn, d.arg = arg;
	for (int i = 0; i < 4; i++)
		if (W[i] == w && is_proc[i] && fn == affine_fn && nin == 1) {
			cgr_value k = cgr_value_bytes(arg, sizeof(struct affine));
			ins[0] = in[0];
			cgr_graph_const(g, &k, &ins[1]);
			in = ins, nin = 2, d.arg = NULL;
		}
	cgr_graph_task(g, w, &d, in, nin, &n, 1);
	return n;
}

/* 4-stage pipeline over 4 workers: ((x*3+1)*5+2)*7+3)*11+4 */
static void test_pipeline(int mode, long n)
{
	static struct affine st[4] = { { 3, 1 }, { 5, 2 }, { 7, 3 }, { 11, 4 } };
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *prev;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	long bad = 0;
	cgr_ref refs[8];

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	prev = x;
	for (int i = 0; i < 4; i++) {
		char name[16];
		snprintf(name, sizeof(name), "stage%d", i);
		prev = add_task(g, W[i], name, affine_fn, &st[i], &prev, 1);
	}
	cgr_graph_output(g, &prev, 1);
	pp.wait_mode = mode;
	pp.max_inflight = 8;
	t_is(cgr_graph_compile(g, &pp, &c), 0, "pipeline compiles (mode %d)",
	     mode);
	cgr_graph_destroy(g);
	/* Keep the pipeline full: 4 in flight, get the oldest. */
	long sent = 0, got = 0;
	while (got < n) {
		while (sent < n && sent - got < 4) {
			uint64_t v = (uint64_t)sent * 2654435761u;
			cgr_value a = cgr_value_bytes(&v, 8);
			if (cgr_execute(c, &a, 1, &refs[sent % 8]) != 0)
				bad++;
			sent++;
		}
		cgr_value o;
		uint64_t v = (uint64_t)got * 2654435761u, want = v;
		for (int i = 0; i < 4; i++)
			want = want * st[i].mul + st[i].add;
		if (cgr_ref_get(c, refs[got % 8], -1, &o, 1) != 0 ||
		    u64(&o) != want)
			bad++;
		cgr_ref_release(c, refs[got % 8]);
		got++;
	}
	t_is(bad, 0, "pipeline: %ld executions correct (mode %d)", n, mode);
	cgr_compiled_destroy(c);
}

/* Diamond: x -> (a on W1, b on W2) -> sum on W3, plus x*1 on W0. */
static void test_diamond(long n)
{
	static struct affine sa = { 2, 0 }, sb = { 3, 1 }, sc = { 1, 0 };
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *a, *b, *e, *s, *outs[2];
	long bad = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	a = add_task(g, W[1], "left", affine_fn, &sa, &x, 1);
	b = add_task(g, W[2], "right", affine_fn, &sb, &x, 1);
	e = add_task(g, W[0], "id", affine_fn, &sc, &x, 1);
	cgr_node *ab[3] = { a, b, e };
	s = add_task(g, W[3], "join", sum_fn, NULL, ab, 3);
	outs[0] = s, outs[1] = a;
	cgr_graph_output(g, outs, 2);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "diamond compiles");
	cgr_graph_destroy(g);
	size_t blocks0, blocks1;
	uint64_t thr0 = thread_allocated(), thr1;
#ifndef CGR_SANITIZE
	void *volatile probe = malloc(1000);
	t_ok(thread_allocated() >= thr0 + 1000,
	     "the allocation counter sees a malloc");
	free(probe);
	thr0 = thread_allocated();
#endif
	cgr_ctx_memory(ctx, NULL, &blocks0);
	for (long i = 0; i < n; i++) {
		uint64_t v = (uint64_t)i * 7919 + 13;
		cgr_value arg = cgr_value_bytes(&v, 8), o[2];
		cgr_ref r;
		if (cgr_execute(c, &arg, 1, &r) != 0 ||
		    cgr_ref_get(c, r, -1, o, 2) != 0) {
			bad++;
			continue;
		}
		if (u64(&o[0]) != v * 2 + v * 3 + 1 + v || u64(&o[1]) != v * 2)
			bad++;
		cgr_ref_release(c, r);
	}
	thr1 = thread_allocated();
	cgr_ctx_memory(ctx, NULL, &blocks1);
	t_is(bad, 0, "diamond: %ld executions correct", n);
	t_is(blocks1, blocks0, "no cgr allocation while executing");
#ifndef T_EAGER /* the eager harness copies each result */
	t_is(thr1, thr0, "the driver thread allocated nothing (%llu bytes)",
	     (unsigned long long)(thr1 - thr0));
#else
	(void)thr1;
#endif
	cgr_compiled_destroy(c);
}

/* Gets in reverse order at the in-flight limit; error values. */
static void test_order_and_errors(void)
{
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *p, *q;
	static struct affine inc = { 1, 1 };
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_ref refs[6];
	int bad = 0, errs = 0, msgok = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	p = add_task(g, W[0], "picky", picky_fn, NULL, &x, 1);
	q = add_task(g, W[1], "after", affine_fn, &inc, &p, 1);
	cgr_graph_output(g, &q, 1);
	pp.max_inflight = 6;
	t_is(cgr_graph_compile(g, &pp, &c), 0, "compile picky graph");
	cgr_graph_destroy(g);
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 6; i++) {
			uint64_t v = (uint64_t)(round * 6 + i);
			cgr_value a = cgr_value_bytes(&v, 8);
			if (cgr_execute(c, &a, 1, &refs[i]) != 0)
				bad++;
		}
		for (int i = 5; i >= 0; i--) {
			uint64_t v = (uint64_t)(round * 6 + i);
			cgr_value o;
			if (cgr_ref_get(c, refs[i], -1, &o, 1) != 0) {
				bad++;
				continue;
			}
			if (v % 7 == 0) {
				errs += o.kind == CGR_VALUE_ERROR &&
					o.code == -EDOM;
				msgok += o.kind == CGR_VALUE_ERROR &&
					 strstr(o.u.error.msg, "divisible") &&
					 strstr(o.u.error.msg, "picky");
			} else if (o.kind != CGR_VALUE_BYTES ||
				   u64(&o) != v + 1) {
				bad++;
			}
			cgr_ref_release(c, refs[i]);
		}
	}
	t_is(bad, 0, "120 executions, got in reverse order, all correct");
	t_is(errs, 18, "18 failing executions gave error values downstream");
	t_is(msgok, 18, "error messages name the task and its reason");
	cgr_compiled_destroy(c);
}

static __attribute__((unused)) void test_timeout(void)
{
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *s;
	cgr_ref r;
	cgr_value o;
	uint64_t v = 41;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	s = add_task(g, W[2], "slow", slow_fn, NULL, &x, 1);
	cgr_graph_output(g, &s, 1);
	cgr_graph_compile(g, NULL, &c);
	cgr_graph_destroy(g);
	atomic_store(&gate, 0);
	cgr_value a = cgr_value_bytes(&v, 8);
	t_is(cgr_execute(c, &a, 1, &r), 0, "execute slow task");
	int64_t t0 = (int64_t)time(NULL);
	t_is(cgr_ref_get(c, r, 20 * 1000000, &o, 1), -ETIMEDOUT,
	     "get times out while the task runs");
	t_is(cgr_ref_get(c, r, 0, &o, 1), -ETIMEDOUT, "a zero timeout polls");
	(void)t0;
	atomic_store(&gate, 1);
	t_is(cgr_ref_get(c, r, CGR_FOREVER, &o, 1), 0,
	     "the same ref succeeds later");
	t_is(u64(&o), 41, "with its value");
	cgr_ref_release(c, r);
	cgr_compiled_destroy(c);
}

/* Multi-output task, a constant, the whole input, tensors. */
static void test_shapes(void)
{
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *all, *t, *dm[2], *k, *s, *s2, *outs[4];
	uint64_t kv = 1000;
	cgr_value kval = cgr_value_bytes(&kv, 8);
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	int bad = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, CGR_INPUT_ALL, &all);
	cgr_graph_input(g, 2, &t);
	t_is(cgr_graph_const(g, &kval, &k), 0, "constant node");
	d.name = "divmod", d.fn = divmod_fn;
	cgr_node *in0;
	cgr_graph_input(g, 0, &in0);
	t_is(cgr_graph_task(g, W[1], &d, &in0, 1, dm, 2), 0,
	     "two-output task");
	/* sum(all args except the tensor...) would break: give it args 0, 1
	 * and the constant. */
	cgr_node *in1;
	cgr_graph_input(g, 1, &in1);
	cgr_node *sin[3] = { in0, in1, k };
	s = add_task(g, W[2], "sum3", sum_fn, NULL, sin, 3);
	cgr_node *qr[2] = { dm[0], dm[1] };
	s2 = add_task(g, W[3], "qr", sum_fn, NULL, qr, 2);
	cgr_node *dt = add_task(g, W[0], "double", dbl_fn, NULL, &t, 1);
	/* A task fed the whole input: counts its arguments. */
	(void)all;
	outs[0] = s, outs[1] = s2, outs[2] = dt, outs[3] = dm[1];
	cgr_graph_output(g, outs, 4);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "compile: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	for (int i = 0; i < 200; i++) {
		uint64_t a0 = (uint64_t)i * 37, a1 = (uint64_t)i + 5;
		float f[6];
		int64_t shape[2] = { 2, 3 };
		cgr_value args[3], o[4];
		cgr_ref r;
		for (int j = 0; j < 6; j++)
			f[j] = (float)(i + j) * 0.5f;
		args[0] = cgr_value_bytes(&a0, 8);
		args[1] = cgr_value_bytes(&a1, 8);
		args[2] = cgr_value_tensor(f, kDLFloat, 32, 2,
						shape);
		if (cgr_execute(c, args, 3, &r) != 0 ||
		    cgr_ref_get(c, r, -1, o, 4) != 0) {
			bad++;
			continue;
		}
		if (u64(&o[0]) != a0 + a1 + 1000 ||
		    u64(&o[1]) != a0 / 10 + a0 % 10 || u64(&o[3]) != a0 % 10)
			bad++;
		const DLTensor *ot = &o[2].u.tensor;
		if (o[2].kind != CGR_VALUE_TENSOR || ot->ndim != 2 ||
		    ot->shape[0] != 2 || ot->shape[1] != 3 ||
		    ot->dtype.code != kDLFloat || ot->dtype.bits != 32)
			bad++;
		else
			for (int j = 0; j < 6; j++)
				if (((const float *)ot->data)[j] != f[j] * 2)
					bad++;
		cgr_ref_release(c, r);
	}
	t_is(bad, 0, "multi-output, constant and tensor values correct");
	cgr_compiled_destroy(c);

	/* Whole input spliced into a task's inputs. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, CGR_INPUT_ALL, &all);
	cgr_graph_input(g, 2, &t); /* three arguments */
	cgr_node *wi[2] = { all, t };
	s = add_task(g, W[0], "sumall", sum_fn, NULL, wi, 2);
	cgr_graph_output(g, &s, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "whole input compiles");
	cgr_graph_destroy(g);
	uint64_t a[3] = { 1, 20, 300 };
	cgr_value args[3] = { cgr_value_bytes(&a[0], 8),
			      cgr_value_bytes(&a[1], 8),
			      cgr_value_bytes(&a[2], 8) },
		  o;
	cgr_ref r;
#ifndef T_EAGER
	t_is(cgr_compiled_nargs(c), 3, "three arguments");
#endif
	t_is(cgr_execute(c, args, 3, &r), 0, "execute");
	t_is(cgr_ref_get(c, r, -1, &o, 1), 0, "get");
	t_is(u64(&o), 1 + 20 + 300 + 300,
	     "whole input gives every argument, then input[2] again");
	cgr_ref_release(c, r);
	cgr_compiled_destroy(c);

	/* An output too large for its buffer becomes an error value. */
	static struct affine one = { 1, 0 };
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in0);
	d = (cgr_task_desc)CGR_TASK_DESC_INIT;
	d.name = "wide", d.fn = dbl_fn, d.max_out_bytes = 256;
	cgr_graph_task(g, W[1], &d, &in0, 1, &dt, 1);
	s = add_task(g, W[2], "next", affine_fn, &one, &dt, 1);
	cgr_graph_output(g, &s, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "compile");
	cgr_graph_destroy(g);
	float big[1000] = { 0 };
	int64_t bs[1] = { 1000 };
	cgr_value bt = { 0 };
	bt.kind = CGR_VALUE_TENSOR;
	bt.u.tensor.data = big;
	bt.u.tensor.device.device_type = kDLCPU;
	bt.u.tensor.ndim = 1;
	bt.u.tensor.shape = bs;
	bt.u.tensor.dtype.code = kDLFloat;
	bt.u.tensor.dtype.bits = 32;
	bt.u.tensor.dtype.lanes = 1;
	cgr_execute(c, &bt, 1, &r);
	t_is(cgr_ref_get(c, r, -1, &o, 1), 0, "get");
	t_ok(o.kind == CGR_VALUE_ERROR && o.code == CGR_ETOOBIG &&
		     strstr(o.u.error.msg, "wide") != NULL,
	     "too-large output is a CGR_ETOOBIG error value naming the task: "
	     "%s",
	     o.kind == CGR_VALUE_ERROR ? o.u.error.msg : "(not an error)");
	cgr_ref_release(c, r);
	cgr_compiled_destroy(c);
	(void)one;
}

/* Counts its calls (arg: an _Atomic long); out: its first input. */
static int count_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	_Atomic long *calls = cgr_task_arg(tc);
	(void)st, (void)nin, (void)nout;
	atomic_fetch_add(calls, 1);
	out[0] = in[0];
	return 0;
}

/*
 * No task runs for an execution nobody asked for: a task fed only a
 * constant (its worker has nothing to read), and the reader of a device
 * edge (its worker only receives), each run exactly once per execution,
 * counted after teardown stopped every worker; overlap off and on.
 */
static __attribute__((unused)) void test_admission(int overlap)
{
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	_Atomic long lonely = 0, recv = 0;
	uint64_t kv = 5;
	cgr_value kval = cgr_value_bytes(&kv, 8);
	cgr_node *k, *x, *src, *outs[2];
	struct affine one = { 1, 0 };
	cgr_compiled *c;
	cgr_graph *g;
	long n = 50, bad = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_const(g, &kval, &k);
	cgr_graph_input(g, 0, &x);
	outs[0] = add_task(g, W[1], "lonely", count_fn, &lonely, &k, 1);
	src = add_task(g, W[0], "src", affine_fn, &one, &x, 1);
	cgr_node_set_transport(src, CGR_TRANSPORT_DEVICE, 0);
	outs[1] = add_task(g, W[2], "recv", count_fn, &recv, &src, 1);
	cgr_graph_output(g, outs, 2);
	pp.overlap = overlap;
	t_is(cgr_graph_compile(g, &pp, &c), 0, "admission graph: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	for (long i = 1; i <= n; i++) {
		uint64_t xv = (uint64_t)i;
		cgr_value a = cgr_value_bytes(&xv, 8), o[2];
		cgr_ref r;
		if (cgr_execute(c, &a, 1, &r) != 0 ||
		    cgr_ref_get(c, r, -1, o, 2) != 0) {
			bad++;
			continue;
		}
		bad += u64(&o[0]) != 5 || u64(&o[1]) != xv;
		cgr_ref_release(c, r);
	}
	t_is(cgr_compiled_teardown(c, 2000000000ll), 0, "teardown");
	t_ok(bad == 0 && atomic_load(&lonely) == n && atomic_load(&recv) == n,
	     "overlap %s: a constant's task and an edge's reader ran once "
	     "per execution asked for (%ld and %ld of %ld calls, %ld wrong)",
	     overlap ? "on" : "off", atomic_load(&lonely), atomic_load(&recv),
	     n, bad);
	cgr_compiled_destroy(c);
}

static const cgr_export exports[] = {
	{ "affine", affine_fn, NULL, NULL }, { "sum", sum_fn, NULL, NULL },
	{ "picky", picky_fn, NULL, NULL },   { "divmod", divmod_fn, NULL, NULL },
	{ "slow", slow_fn, NULL, NULL },     { "dbl", dbl_fn, NULL, NULL },
	{ NULL, NULL, NULL, NULL },
};

int main(int argc, char **argv)
{
	long n = t_scale(10000);
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;

	cgr_worker_main(argc, argv, exports);
	t_init(argc, argv, 120);
	cp.exports = exports;
	t_is(cgr_ctx_create(&cp, &ctx), 0, "context");
	for (int i = 0; i < 4; i++) {
#ifdef T_PROCESS_WORKERS
		is_proc[i] = i % 2 == 1;
#endif
		t_is(t_worker_named(ctx, i, is_proc[i], &W[i]), 0,
		     "worker %d (%s)", i, is_proc[i] ? "a process" : "a thread");
	}
	test_pipeline(CGR_WAIT_ADAPTIVE, n);
	test_pipeline(CGR_WAIT_BLOCK, n / 4);
	test_pipeline(CGR_WAIT_BUSY, n / 4);
	test_diamond(n);
	test_order_and_errors();
#ifndef T_EAGER
	test_timeout(); /* an eager run is over when cgr_execute returns */
#endif
	test_shapes();
#ifndef T_PROCESS_WORKERS
	test_admission(0); /* counters in this process, a device edge */
	test_admission(1);
#endif
	cgr_ctx_destroy(ctx);
	return t_done();
}
