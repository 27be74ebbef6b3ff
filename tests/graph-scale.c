/*
 * tests/graph-scale.c: graphs of 10,000 nodes and more, compiled (the
 * validation, the order, the deadlock proof and the plan included) and
 * executed with every result checked: a chain on one worker, a chain
 * whose every edge crosses between two workers, a fan-out/fan-in over
 * four workers, 2,000 tensor-parallel layers (a task per worker and an
 * allreduce) with overlap off and on (the overlap rewrite and its
 * pruning at that size), a chain over a thread and a process worker; a
 * cycle and
 * an unreachable task among 10,000 named.  Then memory that follows the
 * values: values on both sides of what a slot holds inline (the same
 * slot switching between its inline room and its big area execution by
 * execution, error values after big values, lists), built in place and
 * read in place (zero copy) also past the inline room, and (builds
 * without sanitizers) the resident memory of a 1,000-task chain staying
 * under 32 MiB with default parameters and under the same with
 * max_value_bytes 16 MiB: a limit, not an allocation.
 *
 * This program is also its own worker processes (cgr_worker_main first).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include <cgr.h>

#include "tap.h"

#define SEC 1000000000ll

/* ---- tasks ---- */

static uint64_t u64_of(const cgr_value *v)
{
	uint64_t x = 0;

	if (v->kind == CGR_VALUE_BYTES && v->u.bytes.len == 8)
		memcpy(&x, v->u.bytes.data, 8);
	return x;
}

static int put_u64(cgr_task_ctx *tc, cgr_value *out, uint64_t x)
{
	uint64_t *o = cgr_task_output_buffer(tc, 0, 8);

	if (o == NULL)
		return -ENOSPC;
	*o = x;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

/* in[0] + the u64 of its arg_data. */
static int t_addk(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		  cgr_value *out, size_t nout)
{
	uint64_t k;

	(void)st, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_BYTES || in[0].u.bytes.len != 8) {
		cgr_task_set_error(tc, CGR_EBADVALUE, "want 8 bytes");
		return -1;
	}
	memcpy(&k, cgr_task_arg(tc), 8);
	return put_u64(tc, out, u64_of(&in[0]) + k);
}

static int t_sum(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		 cgr_value *out, size_t nout)
{
	uint64_t s = 0;

	(void)st, (void)nout;
	for (size_t i = 0; i < nin; i++)
		s += u64_of(&in[i]);
	return put_u64(tc, out, s);
}

/*
 * in: u64 x.  out: bytes of length len(x) = sizes[x % NSIZES], byte i
 * (x + i) & 0xff, built in place (cgr_task_output_buffer), or, for x % 7
 * == 3, an error value (the slot that held a big value holds an error).
 * The address it built at goes to where[x % 8] (one producer thread).
 */
static const size_t sizes[] = { 0, 1, 8, 511, 512, 513, 4096, 65536, 200000 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
static const void *_Atomic where[8];

static int t_sized(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	uint64_t x = u64_of(&in[0]);
	size_t len = sizes[x % NSIZES];
	unsigned char *d;

	(void)st, (void)nin, (void)nout;
	if (x % 7 == 3) {
		cgr_task_set_error(tc, CGR_ETASK, "error after %zu bytes", len);
		return -1;
	}
	d = cgr_task_output_buffer(tc, 0, len);
	if (d == NULL)
		return -ENOSPC;
	for (size_t i = 0; i < len; i++)
		d[i] = (unsigned char)(x + i);
	atomic_store(&where[x % 8], d);
	out[0] = cgr_value_bytes(d, len);
	return 0;
}

/* in: the sized bytes of x (and x).  out: u64: 1 if they are right and
 * were read where they were built (zero copy), else 0. */
static int t_check(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	uint64_t x = u64_of(&in[1]), ok;
	const unsigned char *d = in[0].u.bytes.data;
	size_t len = sizes[x % NSIZES];

	(void)st, (void)nin, (void)nout;
	const void *at = atomic_load(&where[x % 8]);

	/* A process worker's producer writes where[] in its own process. */
	ok = in[0].kind == CGR_VALUE_BYTES && in[0].u.bytes.len == len &&
	     (len == 0 || at == NULL || d == at);
	for (size_t i = 0; ok && i < len; i++)
		ok = d[i] == (unsigned char)(x + i);
	return put_u64(tc, out, ok);
}

/* in: u64 x.  out: a list of (bytes: x, 8 bytes; tensor: n = 64 + x % 200
 * int32 (x + i)), its layout over 512 bytes when n passes ~100. */
static int t_list(cgr_task_ctx *tc, void *st, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	static _Thread_local int32_t buf[300];
	static _Thread_local int64_t shape[1];
	static _Thread_local uint64_t xs;
	static _Thread_local cgr_value items[2];
	uint64_t x = u64_of(&in[0]);

	(void)tc, (void)st, (void)nin, (void)nout;
	xs = x;
	shape[0] = 64 + (int64_t)(x % 200);
	for (int64_t i = 0; i < shape[0]; i++)
		buf[i] = (int32_t)(x + (uint64_t)i);
	items[0] = cgr_value_bytes(&xs, 8);
	items[1] = cgr_value_tensor(buf, kDLInt, 32, 1, shape);
	out[0] = cgr_value_list(items, 2);
	return 0;
}

/* A tensor-parallel layer's share: in (bytes, or a one-element uint64
 * tensor) + the u64 of its arg_data, as a one-element uint64 tensor. */
static int t_tp(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	static const int64_t one[1] = { 1 };
	uint64_t k, x = 0, *o = cgr_task_output_buffer(tc, 0, 8);

	(void)st, (void)nin, (void)nout;
	if (in[0].kind == CGR_VALUE_TENSOR)
		memcpy(&x, in[0].u.tensor.data, 8);
	else
		x = u64_of(&in[0]);
	memcpy(&k, cgr_task_arg(tc), 8);
	if (o == NULL)
		return -ENOSPC;
	*o = x + k;
	out[0] = cgr_value_tensor(o, kDLUInt, 64, 1, (int64_t *)one);
	return 0;
}

static const cgr_export exports[] = { { "addk", t_addk, NULL, NULL },
				      { "sum", t_sum, NULL, NULL },
				      { "sized", t_sized, NULL, NULL },
				      { "check", t_check, NULL, NULL },
				      { "tp", t_tp, NULL, NULL },
				      { NULL, NULL, NULL, NULL } };

/* ---- helpers ---- */

static cgr_ctx *new_ctx(void)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx = NULL;

	cp.exports = exports;
	if (cgr_ctx_create(&cp, &ctx) != 0) {
		printf("Bail out! no context\n");
		exit(1);
	}
	return ctx;
}

static cgr_worker *new_worker(cgr_ctx *ctx, int kind)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w = NULL;

	wp.kind = kind;
	if (cgr_worker_create(ctx, &wp, &w) != 0) {
		printf("Bail out! no worker\n");
		exit(1);
	}
	return w;
}

static cgr_node *task_k(cgr_graph *g, cgr_worker *w, cgr_task_fn fn,
			const char *name, uint64_t k, cgr_node *const *in,
			size_t nin)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_node *o = NULL;

	d.name = name;
	d.fn = fn;
	d.arg_data = &k;
	d.arg_len = 8;
	if (cgr_graph_task(g, w, &d, in, nin, &o, 1) != 0)
		return NULL;
	return o;
}

/* n executions of c (one u64 argument, one u64 output): how many gave
 * want(x) for x = 1000 * i + 7. */
static int run_u64(cgr_compiled *c, int n, uint64_t (*want)(uint64_t, size_t),
		   size_t size)
{
	int good = 0;

	for (int i = 0; c != NULL && i < n; i++) {
		uint64_t x = 1000 * (uint64_t)i + 7;
		cgr_value a = cgr_value_bytes(&x, 8), o;
		cgr_ref r;
		if (cgr_execute(c, &a, 1, &r) != 0 ||
		    cgr_ref_get(c, r, 30 * SEC, &o, 1) != 0)
			break;
		good += o.kind == CGR_VALUE_BYTES && u64_of(&o) == want(x, size);
		cgr_ref_release(c, r);
	}
	return good;
}

static uint64_t chain_want(uint64_t x, size_t n)
{
	return x + n;
}

static uint64_t fan_want(uint64_t x, size_t n)
{
	return n * x + (uint64_t)n * (n - 1) / 2;
}

/* A chain of n tasks (each adds 1): task i on ws[pick(i)]. */
static cgr_graph *chain(cgr_ctx *ctx, cgr_worker **ws, size_t nw, size_t n,
			bool alternate)
{
	cgr_graph *g = NULL;
	cgr_node *x = NULL;
	char name[24];

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (size_t i = 0; i < n && x != NULL; i++) {
		snprintf(name, sizeof(name), "t%zu", i);
		x = task_k(g, ws[alternate ? i % nw : i * nw / n], t_addk, name,
			   1, &x, 1);
	}
	if (x == NULL || cgr_graph_output(g, &x, 1) != 0) {
		cgr_graph_destroy(g);
		return NULL;
	}
	return g;
}

/* ---- at scale ---- */

static void check_chain(size_t n, int nw, bool alternate, int kind1)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *ws[2];
	cgr_graph *g;
	cgr_compiled *c = NULL;
	int64_t t0;
	int ret, runs = (int)t_scale(20) + 2;

	ws[0] = new_worker(ctx, CGR_WORKER_THREAD);
	ws[1] = nw > 1 ? new_worker(ctx, kind1) : NULL;
	g = chain(ctx, ws, (size_t)nw, n, alternate);
	t0 = t_now_ns();
	ret = g != NULL ? cgr_graph_compile(g, NULL, &c) : -1;
	t_is(ret, 0, "a chain of %zu tasks on %d %s worker(s)%s compiles (%.0f "
		     "ms)%s%s",
	     n, nw, kind1 == CGR_WORKER_PROCESS ? "thread+process" : "thread",
	     alternate ? ", every edge crossing" : "",
	     (double)(t_now_ns() - t0) / 1e6, ret ? ": " : "",
	     ret && g != NULL ? cgr_graph_errmsg(g) : "");
	cgr_graph_destroy(g);
	t_is(run_u64(c, runs, chain_want, n), c != NULL ? runs : 0,
	     "... and each of %d executions gives x + %zu", runs, n);
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
}

/* n leaves (leaf i adds i) round robin over nw workers, each worker's
 * summed by a tree of 64-input fan-ins there, the partial sums by one
 * task on worker 0. */
static void check_fan(size_t n, int nw)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *ws[8];
	cgr_node *x, **grp = calloc(n, sizeof(*grp)), *part[8], *root;
	size_t cnt[8] = { 0 }, per = (n + (size_t)nw - 1) / (size_t)nw;
	size_t nodes = 0;
	cgr_graph *g;
	cgr_compiled *c = NULL;
	char name[32];
	int ret, runs = (int)t_scale(10) + 2;

	for (int j = 0; j < nw; j++)
		ws[j] = new_worker(ctx, CGR_WORKER_THREAD);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (size_t i = 0; i < n; i++) {
		size_t j = i % (size_t)nw;
		snprintf(name, sizeof(name), "leaf%zu", i);
		grp[j * per + cnt[j]++] = task_k(g, ws[j], t_addk, name, i, &x, 1);
		nodes++;
	}
	for (int j = 0; j < nw; j++) {
		cgr_node **v = grp + (size_t)j * per;
		size_t m = cnt[j], level = 0;
		while (m > 1) {
			size_t k = 0;
			for (size_t i = 0; i < m; i += 64, k++) {
				snprintf(name, sizeof(name), "sum%d.%zu.%zu", j,
					 level, k);
				v[k] = task_k(g, ws[j], t_sum, name, 0, v + i,
					      m - i < 64 ? m - i : 64);
				nodes++;
			}
			m = k;
			level++;
		}
		part[j] = v[0];
	}
	root = task_k(g, ws[0], t_sum, "total", 0, part, (size_t)nw);
	nodes++;
	cgr_graph_output(g, &root, 1);
	ret = cgr_graph_compile(g, NULL, &c);
	t_is(ret, 0, "fan-out to %zu leaves over %d workers and back (%zu "
		     "tasks) compiles%s%s",
	     n, nw, nodes, ret ? ": " : "", ret ? cgr_graph_errmsg(g) : "");
	cgr_graph_destroy(g);
	t_is(run_u64(c, runs, fan_want, n), c != NULL ? runs : 0,
	     "... and each of %d executions gives the sum over every leaf",
	     runs);
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
	free(grp);
}

/* layers tensor-parallel layers on 4 workers (worker j adds j to its
 * copy, an allreduce sums the copies), overlap on or off: 5 nodes a
 * layer. */
static void check_tp(size_t layers, int overlap)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *ws[4];
	cgr_node *x, *cur[4], *part[4];
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_graph *g;
	cgr_compiled *c = NULL;
	char name[32];
	int ret = 0, runs = (int)t_scale(4) + 1, good = 0;

	for (int j = 0; j < 4; j++)
		ws[j] = new_worker(ctx, CGR_WORKER_THREAD);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int j = 0; j < 4; j++)
		cur[j] = x;
	for (size_t l = 0; l < layers && ret == 0; l++) {
		for (int j = 0; j < 4; j++) {
			snprintf(name, sizeof(name), "l%zu.w%d", l, j);
			part[j] = task_k(g, ws[j], t_tp, name, (uint64_t)j,
					 &cur[j], 1);
		}
		ret = cgr_graph_allreduce(g, part, 4, CGR_SUM, NULL, cur);
	}
	if (ret == 0)
		ret = cgr_graph_output(g, &cur[0], 1);
	pp.overlap = overlap;
	if (ret == 0)
		ret = cgr_graph_compile(g, &pp, &c);
	t_is(ret, 0, "%zu tensor-parallel layers on 4 workers (%zu nodes), "
		     "overlap %s, compile%s%s",
	     layers, 5 * layers, overlap ? "on" : "off", ret ? ": " : "",
	     ret ? cgr_graph_errmsg(g) : "");
	cgr_graph_destroy(g);
	for (int i = 0; c != NULL && i < runs; i++) {
		uint64_t xv = 11 + (uint64_t)i, want = xv;
		cgr_value a = cgr_value_bytes(&xv, 8), o;
		cgr_ref r;
		for (size_t l = 0; l < layers; l++)
			want = 4 * want + 6;
		if (cgr_execute(c, &a, 1, &r) != 0 ||
		    cgr_ref_get(c, r, 60 * SEC, &o, 1) != 0)
			break;
		good += o.kind == CGR_VALUE_TENSOR &&
			*(const uint64_t *)o.u.tensor.data == want;
		cgr_ref_release(c, r);
	}
	t_is(good, c != NULL ? runs : 0,
	     "... and each of %d executions gives the sum of sums, layer "
	     "after layer",
	     runs);
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
}

/* A cycle closed at the end of a 10,000-task chain, and an unreachable
 * task in the middle of one: each refused, named. */
static void check_errors_at_scale(void)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *w = new_worker(ctx, CGR_WORKER_THREAD);
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *x, *first = NULL, *side = NULL;
	char name[24];
	int ret;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < 10000; i++) {
		cgr_node *in[2] = { x, x };
		snprintf(name, sizeof(name), "t%d", i);
		x = task_k(g, w, t_sum, name, 0, in, i == 0 ? 2 : 1);
		if (i == 0)
			first = x;
	}
	/* t0's second input: the last task (a loop through every task). */
	cgr_node_set_input(first, 1, x);
	cgr_graph_output(g, &x, 1);
	ret = cgr_graph_compile(g, NULL, &c);
	t_ok(ret == CGR_ECYCLE && !strncmp(cgr_graph_errmsg(g), "cycle: t", 8),
	     "a cycle through 10,000 tasks is refused, named (%d: %.60s...)",
	     ret, cgr_graph_errmsg(g));
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < 10000; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		x = task_k(g, w, t_addk, name, 1, &x, 1);
		if (i == 5000)
			side = task_k(g, w, t_addk, "dead-end", 1, &x, 1);
	}
	cgr_graph_output(g, &x, 1);
	c = NULL;
	ret = cgr_graph_compile(g, NULL, &c);
	t_ok(side != NULL && ret == CGR_EUNREACHABLE &&
		     strstr(cgr_graph_errmsg(g), "dead-end") != NULL,
	     "an unreachable task among 10,000 is refused, named (%s)",
	     cgr_graph_errmsg(g));
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	cgr_ctx_destroy(ctx);
}

/* ---- memory that follows the values ---- */

/* Sized values from producer p (a thread, or a process worker when proc:
 * its slots in the graph's shared segment; the zero-copy check then
 * needs no address) to checker q, max_out_bytes 256 KiB: every size on
 * both
 * sides of the inline room, in the same slots execution after
 * execution, and error values between them. */
static void check_sizes(bool proc)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p = new_worker(ctx, proc ? CGR_WORKER_PROCESS :
					       CGR_WORKER_THREAD);
	cgr_worker *q = new_worker(ctx, CGR_WORKER_THREAD);
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *x, *v, *in[2], *outs[2], *ok;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	int n = (int)NSIZES * 7 * 2, good = 0, errs = 0;

	for (int k = 0; k < 8; k++)
		atomic_store(&where[k], NULL);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "sized";
	d.fn = t_sized;
	d.max_out_bytes = 256 * 1024;
	cgr_graph_task(g, p, &d, &x, 1, &v, 1);
	in[0] = v, in[1] = x;
	d = (cgr_task_desc)CGR_TASK_DESC_INIT;
	d.name = "check";
	d.fn = t_check;
	cgr_graph_task(g, q, &d, in, 2, &ok, 1);
	outs[0] = ok, outs[1] = v;
	cgr_graph_output(g, outs, 2);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "sized values: compiled");
	cgr_graph_destroy(g);
	for (int i = 0; c != NULL && i < n; i++) {
		uint64_t xv = (uint64_t)i;
		cgr_value a = cgr_value_bytes(&xv, 8), o[2];
		size_t len = sizes[xv % NSIZES];
		cgr_ref r;
		bool right;
		if (cgr_execute(c, &a, 1, &r) != 0 ||
		    cgr_ref_get(c, r, 10 * SEC, o, 2) != 0)
			break;
		if (xv % 7 == 3) {
			right = o[0].kind == CGR_VALUE_ERROR &&
				o[1].kind == CGR_VALUE_ERROR &&
				strstr(o[1].u.error.msg, "error after") != NULL;
			errs += right;
		} else {
			const unsigned char *b = o[1].u.bytes.data;
			right = u64_of(&o[0]) == 1 &&
				o[1].kind == CGR_VALUE_BYTES &&
				o[1].u.bytes.len == len;
			for (size_t k = 0; right && k < len; k++)
				right = b[k] == (unsigned char)(xv + k);
		}
		good += right;
		cgr_ref_release(c, r);
	}
	t_is(good, n,
	     "%d executions of values of 0 to 200,000 bytes from a %s worker "
	     "(inline and in the big area, in turn in the same slots, %d "
	     "error values among them): each right, read in place%s",
	     n, proc ? "process" : "thread", errs,
	     proc ? "" : " where it was built");
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
}

/* Lists whose layout is under and over the inline room, over a host
 * edge and to the driver. */
static void check_lists(void)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p = new_worker(ctx, CGR_WORKER_THREAD);
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *x, *l;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	int n = 40, good = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "list";
	d.fn = t_list;
	cgr_graph_task(g, p, &d, &x, 1, &l, 1);
	cgr_graph_output(g, &l, 1);
	cgr_graph_compile(g, NULL, &c);
	cgr_graph_destroy(g);
	for (int i = 0; c != NULL && i < n; i++) {
		uint64_t xv = (uint64_t)i * 37;
		cgr_value a = cgr_value_bytes(&xv, 8), o;
		cgr_ref r;
		bool right;
		if (cgr_execute(c, &a, 1, &r) != 0 ||
		    cgr_ref_get(c, r, 10 * SEC, &o, 1) != 0)
			break;
		right = o.kind == CGR_VALUE_LIST && o.u.list.n == 2 &&
			u64_of(&o.u.list.items[0]) == xv &&
			o.u.list.items[1].kind == CGR_VALUE_TENSOR &&
			o.u.list.items[1].u.tensor.shape[0] ==
				64 + (int64_t)(xv % 200);
		for (int64_t k = 0; right && k < 64 + (int64_t)(xv % 200); k++)
			right = ((const int32_t *)o.u.list.items[1]
					 .u.tensor.data)[k] ==
				(int32_t)(xv + (uint64_t)k);
		good += right;
		cgr_ref_release(c, r);
	}
	t_is(good, n, "lists of 64 to 263 int32 (their layout under and over "
		      "what a slot holds inline): each right");
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
}

#ifndef CGR_SANITIZE
/* The resident set (VmRSS) in KiB. */
static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[128];
	long kb = -1;

	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	if (f != NULL)
		fclose(f);
	return kb;
}

/* A 1,000-task chain of 8-byte values: what compiling and running it
 * adds to the resident set, with max_value_bytes (0: the default). */
static long chain_rss(size_t max_value_bytes, int *good)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *w = new_worker(ctx, CGR_WORKER_THREAD);
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_compiled *c = NULL;
	long before = rss_kib(), after;
	cgr_graph *g = chain(ctx, &w, 1, 1000, false);

	pp.max_value_bytes = max_value_bytes;
	if (g != NULL)
		cgr_graph_compile(g, &pp, &c);
	cgr_graph_destroy(g);
	*good = run_u64(c, 16, chain_want, 1000);
	after = rss_kib();
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
	return after - before;
}
#endif

static void check_rss(void)
{
#if defined(CGR_SANITIZE)
	t_skip("resident memory: not with sanitizers (their shadow memory)");
	t_skip("resident memory: not with sanitizers (their shadow memory)");
#else
	int good;
	long kb = chain_rss(0, &good);

	t_ok(good == 16 && kb < 32 * 1024,
	     "a 1,000-task chain of 8-byte values, default parameters: %ld "
	     "KiB resident (under 32 MiB), 16 executions right",
	     kb);
	kb = chain_rss(16u << 20, &good);
	t_ok(good == 16 && kb < 32 * 1024,
	     "... with max_value_bytes 16 MiB (128 GiB of buffers at most): "
	     "%ld KiB resident, the same bound: a limit, not an allocation",
	     kb);
#endif
}

/* Buffers whose address space the system will not reserve (200 tasks of
 * 1 TiB, 8 slots each: 1.6 PiB): the compile fails with -ENOMEM, saying
 * how much it asked for; a graph of 1 GiB buffers (1.6 TiB reserved)
 * compiles and runs. */
static void check_reserve(void)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *w = new_worker(ctx, CGR_WORKER_THREAD);
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_compiled *c = NULL;
	cgr_graph *g = chain(ctx, &w, 1, 200, false);
	int ret;

	pp.max_value_bytes = (size_t)1 << 40;
	ret = g != NULL ? cgr_graph_compile(g, &pp, &c) : -1;
	t_ok(ret == -ENOMEM &&
		     strstr(cgr_graph_errmsg(g), "cannot reserve") != NULL,
	     "200 outputs of 1 TiB buffers: -ENOMEM (%d), %s", ret,
	     cgr_graph_errmsg(g));
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
#if defined(CGR_SANITIZE)
	t_skip("1.6 TiB of address space: not with sanitizers");
#else
	c = NULL;
	g = chain(ctx, &w, 1, 200, false);
	pp.max_value_bytes = (size_t)1 << 30;
	ret = g != NULL ? cgr_graph_compile(g, &pp, &c) : -1;
	cgr_graph_destroy(g);
	t_ok(ret == 0 && run_u64(c, 4, chain_want, 200) == 4,
	     "200 outputs of 1 GiB buffers (1.6 TiB reserved) compile and run "
	     "(%d)",
	     ret);
	cgr_compiled_destroy(c);
#endif
	cgr_ctx_destroy(ctx);
}

int main(int argc, char **argv)
{
	cgr_worker_main(argc, argv, exports);
	t_init(argc, argv, 240);
	check_chain(10000, 1, false, CGR_WORKER_THREAD);
	check_chain(10000, 2, true, CGR_WORKER_THREAD);
	check_chain(2000, 2, true, CGR_WORKER_PROCESS);
	check_fan(10000, 4);
	check_tp(2000, 0);
	check_tp(2000, 1);
	check_errors_at_scale();
	check_sizes(false);
	check_sizes(true);
	check_lists();
	check_rss();
	check_reserve();
	return t_done();
}
