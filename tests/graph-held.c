/*
 * tests/graph-held.c: max_inflight counts unreleased executions, it is no
 * window.  A caller keeps 1 .. max_inflight - 1 results for the whole run
 * (and swaps which ones now and then) while thousands of executions pass
 * by: every one of them is right, and every held result still reads as it
 * did when it was got.  With max_inflight results held, cgr_execute says
 * CGR_ECAPACITY until one is released.  Over host edges, a device edge
 * (the CPU communicator), an allreduce, overlap off and on.
 *
 * And the driver's calls at their edges: made from a task of their own
 * graph they refuse (-EDEADLK); a cgr_ref_get blocked in another thread
 * (CGR_FOREVER) returns CGR_ECLOSED as soon as teardown begins, or the
 * value when it arrived.
 *
 * tests/graph-held-proc is the same program with T_PROCESS_WORKERS: W[1]
 * and W[3] are processes.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include <cgr.h>

#include "t_workers.h"
#include "tap.h"

#define N_ELEM 4

static cgr_ctx *ctx;
static cgr_worker *W[4];
static bool is_proc[4];

/* a[i] = x * 3 + i, an int64 tensor of N_ELEM from a u64 argument. */
static int scale_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t shape[1] = { N_ELEM };
	int64_t x, *o = cgr_task_output_buffer(tc, 0, N_ELEM * 8);
	(void)st, (void)nin, (void)nout;
	memcpy(&x, in[0].u.bytes.data, 8);
	for (int i = 0; i < N_ELEM; i++)
		o[i] = x * 3 + i;
	out[0] = cgr_value_tensor(o, kDLInt, 64, 1, shape);
	return 0;
}

/* out = in * mul + add, elementwise (mul and add in the task's name:
 * "plus1" multiplies by 1 and adds 1, "twice" by 2 and adds 0). */
static int lin(cgr_task_ctx *tc, const cgr_value *in, cgr_value *out,
	       int64_t mul, int64_t add)
{
	static __thread int64_t shape[1] = { N_ELEM };
	const int64_t *a = in[0].u.tensor.data;
	int64_t *o = cgr_task_output_buffer(tc, 0, N_ELEM * 8);
	for (int i = 0; i < N_ELEM; i++)
		o[i] = a[i] * mul + add;
	out[0] = cgr_value_tensor(o, kDLInt, 64, 1, shape);
	return 0;
}

static int plus1_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	(void)st, (void)nin, (void)nout;
	return lin(tc, in, out, 1, 1);
}

static int twice_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	(void)st, (void)nin, (void)nout;
	return lin(tc, in, out, 2, 0);
}

static int minus7_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		     size_t nin, cgr_value *out, size_t nout)
{
	(void)st, (void)nin, (void)nout;
	return lin(tc, in, out, 1, -7);
}

/* What every output must hold for argument x: the allreduce of
 * (3x + i + 1) and 2 (3x + i) is 9x + 3i + 1; the second output is that
 * minus 7. */
static int64_t want(int64_t x, int o, int i)
{
	return 9 * x + 3 * i + 1 - (o == 1 ? 7 : 0);
}

static bool right(const cgr_value *outs, int64_t x)
{
	for (int o = 0; o < 2; o++) {
		const DLTensor *t = &outs[o].u.tensor;
		if (outs[o].kind != CGR_VALUE_TENSOR || t->ndim != 1 ||
		    t->shape[0] != N_ELEM)
			return false;
		for (int i = 0; i < N_ELEM; i++)
			if (((const int64_t *)t->data)[i] != want(x, o, i))
				return false;
	}
	return true;
}

static int64_t arg_of(uint64_t seq)
{
	return (int64_t)(seq * 2654435761u % 1000003);
}

/* x -> scale (W0) -> plus1 (W1), twice (W2) -> allreduce over W1, W2 ->
 * out0 (W1's), minus7 (W3) of W2's -> out1. */
static cgr_compiled *build(int overlap, bool device, uint32_t max_inflight)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_node *x, *a, *b[2], *r[2], *outs[2];
	cgr_worker *mem[2] = { W[1], W[2] };
	cgr_graph *g;
	cgr_compiled *c = NULL;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "scale", d.fn = scale_fn;
	cgr_graph_task(g, W[0], &d, &x, 1, &a, 1);
	if (device)
		cgr_node_set_transport(a, CGR_TRANSPORT_DEVICE, 0);
	d.name = "plus1", d.fn = plus1_fn;
	cgr_graph_task(g, W[1], &d, &a, 1, &b[0], 1);
	d.name = "twice", d.fn = twice_fn;
	cgr_graph_task(g, W[2], &d, &a, 1, &b[1], 1);
	(void)mem;
	cgr_graph_allreduce(g, b, 2, CGR_SUM, NULL, r);
	d.name = "minus7", d.fn = minus7_fn;
	outs[0] = r[0];
	cgr_graph_task(g, W[3], &d, &r[1], 1, &outs[1], 1);
	cgr_graph_output(g, outs, 2);
	pp.overlap = overlap;
	pp.max_inflight = max_inflight;
	if (cgr_graph_compile(g, &pp, &c) != 0)
		printf("# compile: %s\n", cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return c;
}

/* One held result: its execution, its argument, the values got. */
struct held {
	cgr_ref ref;
	int64_t x;
	bool got; /* v and copy are set */
	cgr_value v[2];
	int64_t copy[2][N_ELEM];
};

static bool held_intact(const struct held *h)
{
	for (int o = 0; h->got && o < 2; o++)
		if (memcmp(h->v[o].u.tensor.data, h->copy[o],
			   sizeof(h->copy[o])) != 0)
			return false;
	return right(h->v, h->x);
}

static int get_into(cgr_compiled *c, struct held *h)
{
	int ret = cgr_ref_get(c, h->ref, 10 * 1000000000LL, h->v, 2);
	h->got = ret == 0 && right(h->v, h->x);
	for (int o = 0; h->got && o < 2; o++)
		memcpy(h->copy[o], h->v[o].u.tensor.data, sizeof(h->copy[o]));
	return h->got ? 0 : -1;
}

/*
 * Holds `nheld` results (the first half got at once, the rest got only at
 * the end) of a graph with max_inflight m while n executions pass, up to
 * m - nheld of them in flight at a time; every 37th execution's result is
 * kept in place of a random held one, which is checked and released.
 */
static void test_held(int overlap, bool device, uint32_t m, uint32_t nheld,
		      long n)
{
	cgr_compiled *c = build(overlap, device, m);
	struct held h[64];
	cgr_ref fl[64];
	int64_t flx[64];
	long bad = 0, badheld = 0, swaps = 0, cap = 0;
	uint32_t nfl = 0, head = 0;

	t_ok(c != NULL, "overlap %d%s, max_inflight %u, %u held: compiles",
	     overlap, device ? ", device edge" : "", m, nheld);
	if (c == NULL)
		return;
	for (uint32_t k = 0; k < nheld; k++) {
		h[k].x = arg_of(1000000 + k);
		h[k].got = false;
		cgr_value a = cgr_value_bytes(&h[k].x, 8);
		if (cgr_execute(c, &a, 1, &h[k].ref) != 0)
			bad++;
		if (k % 2 == 0 && (get_into(c, &h[k]) != 0 ||
				   !right(h[k].v, h[k].x)))
			badheld++;
	}
	for (long s = 0; s < n;) {
		int ret;
		int64_t x = arg_of((uint64_t)s);
		cgr_value a = cgr_value_bytes(&x, 8), o[2];
		if (nfl < m - nheld) {
			ret = cgr_execute(c, &a, 1, &fl[(head + nfl) % 64]);
			if (ret != 0) {
				bad++;
				break;
			}
			flx[(head + nfl) % 64] = x;
			nfl++;
			s++;
			continue;
		}
		/* Full: one more is refused, never blocks. */
		if (cgr_execute(c, &a, 1, &(cgr_ref){ 0 }) != CGR_ECAPACITY)
			bad++;
		cap++;
		ret = cgr_ref_get(c, fl[head], 10 * 1000000000LL, o, 2);
		if (ret != 0 || !right(o, flx[head]))
			bad++;
		if (s % 37 == 0 && nheld > 0) {
			/* Keep this one, let a held one go. */
			uint32_t k = (uint32_t)(t_rand() % nheld);
			if (cgr_ref_get(c, h[k].ref, 0, h[k].v, 2) != 0 ||
			    !held_intact(&h[k]))
				badheld++;
			if (cgr_ref_release(c, h[k].ref) != 0)
				badheld++;
			h[k].ref = fl[head];
			h[k].x = flx[head];
			if (get_into(c, &h[k]) != 0)
				badheld++;
			swaps++;
		} else if (cgr_ref_release(c, fl[head]) != 0) {
			bad++;
		}
		head = (head + 1) % 64;
		nfl--;
	}
	while (nfl > 0) {
		cgr_value o[2];
		if (cgr_ref_get(c, fl[head], 10 * 1000000000LL, o, 2) != 0 ||
		    !right(o, flx[head]) || cgr_ref_release(c, fl[head]) != 0)
			bad++;
		head = (head + 1) % 64;
		nfl--;
	}
	t_is(bad, 0, "overlap %d%s, max_inflight %u, %u held: %ld "
		     "executions right, one more refused each time (%ld)",
	     overlap, device ? ", device edge" : "", m, nheld, n, cap);
	/* The held ones, got now (the rest) or again: as they were. */
	for (uint32_t k = 0; k < nheld; k++) {
		struct held again = h[k];
		if (!h[k].got) {
			if (get_into(c, &h[k]) != 0 || !right(h[k].v, h[k].x))
				badheld++;
		} else if (cgr_ref_get(c, h[k].ref, 0, again.v, 2) != 0 ||
			   !held_intact(&again) ||
			   again.v[0].u.tensor.data !=
				   h[k].v[0].u.tensor.data) {
			badheld++;
		}
	}
	t_is(badheld, 0, "overlap %d%s: %u held results intact (%ld swapped)",
	     overlap, device ? ", device edge" : "", nheld, swaps);
	/* max_inflight held: refused until one is released. */
	if (nheld == m - 1) {
		struct held last;
		int64_t x = 5;
		cgr_value a = cgr_value_bytes(&x, 8), o[2];
		cgr_ref r;
		last.x = x;
		t_is(cgr_execute(c, &a, 1, &last.ref), 0,
		     "the max_inflight-th held execution starts");
		t_is(cgr_execute(c, &a, 1, &r), CGR_ECAPACITY,
		     "with max_inflight results held: CGR_ECAPACITY");
		t_ok(get_into(c, &last) == 0, "the last one right");
		t_is(cgr_ref_release(c, last.ref), 0, "one released");
		t_is(cgr_execute(c, &a, 1, &r), 0, "then one more starts");
		t_ok(cgr_ref_get(c, r, -1, o, 2) == 0 && right(o, x) &&
			     cgr_ref_release(c, r) == 0,
		     "and is right");
	}
	long rel = 0;
	for (uint32_t k = 0; k < nheld; k++)
		rel += cgr_ref_release(c, h[k].ref) != 0;
	t_is(rel, 0, "the held ones released");
	t_is(cgr_ref_release(c, nheld > 0 ? h[0].ref : 0), CGR_EUNKNOWNREF,
	     "a released ref is unknown");
	cgr_compiled_destroy(c);
}

/* ---- calls from a task of the same graph ---------------------------- */

static cgr_compiled *_Atomic self_graph;
static _Atomic int self_rc[6];

static int self_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	cgr_compiled *c = atomic_load(&self_graph);
	cgr_value o, a = in[0];
	cgr_ref r;
	(void)st, (void)nin, (void)nout;
	if (c != NULL) {
		atomic_store(&self_rc[0], cgr_execute(c, &a, 1, &r));
		atomic_store(&self_rc[1], cgr_ref_get(c, 0, 0, &o, 1));
		atomic_store(&self_rc[2], cgr_ref_release(c, 0));
		atomic_store(&self_rc[3], cgr_compiled_teardown(c, 0));
		cgr_compiled_destroy(c); /* refused: logged, nothing freed */
		cgr_ctx_destroy(ctx);	 /* the same */
		atomic_store(&self_rc[4], 1);
		atomic_store(&self_rc[5],
			     cgr_worker_destroy(cgr_task_worker(tc), 0));
	}
	out[0] = in[0];
	return 0;
}

static void test_self(void)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *y;
	uint64_t v = 42;
	cgr_value a = cgr_value_bytes(&v, 8), o;
	cgr_ref r;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "self", d.fn = self_fn;
	cgr_graph_task(g, W[0], &d, &x, 1, &y, 1);
	cgr_graph_output(g, &y, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "self graph compiles");
	cgr_graph_destroy(g);
	atomic_store(&self_graph, c);
	t_is(cgr_execute(c, &a, 1, &r), 0, "execute");
	t_ok(cgr_ref_get(c, r, -1, &o, 1) == 0 && o.kind == CGR_VALUE_BYTES &&
		     memcmp(o.u.bytes.data, &v, 8) == 0,
	     "its value, after the task called the driver's calls");
	t_is(atomic_load(&self_rc[0]), -EDEADLK,
	     "cgr_execute from a task of its graph: -EDEADLK");
	t_is(atomic_load(&self_rc[1]), -EDEADLK, "cgr_ref_get: -EDEADLK");
	t_is(atomic_load(&self_rc[2]), -EDEADLK, "cgr_ref_release: -EDEADLK");
	t_is(atomic_load(&self_rc[3]), -EDEADLK,
	     "cgr_compiled_teardown: -EDEADLK");
	t_is(atomic_load(&self_rc[4]), 1,
	     "cgr_compiled_destroy and cgr_ctx_destroy returned");
	t_is(atomic_load(&self_rc[5]), -EBUSY,
	     "cgr_worker_destroy of its own worker: -EBUSY");
	atomic_store(&self_graph, NULL);
	t_is(cgr_ref_release(c, r), 0, "released");
	/* The graph still runs. */
	t_ok(cgr_execute(c, &a, 1, &r) == 0 &&
		     cgr_ref_get(c, r, -1, &o, 1) == 0 &&
		     memcmp(o.u.bytes.data, &v, 8) == 0 &&
		     cgr_ref_release(c, r) == 0,
	     "the graph runs on");
	cgr_compiled_destroy(c);
}

/* An eager run of its own graph from a task. */
static cgr_graph *_Atomic eager_graph;
static _Atomic int eager_rc = 1;

static int eager_self_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
			 size_t nin, cgr_value *out, size_t nout)
{
	cgr_value o;
	(void)tc, (void)st, (void)nin, (void)nout;
	atomic_store(&eager_rc, cgr_graph_execute_eager(atomic_load(
					&eager_graph), in, 1, &o, 1, NULL));
	out[0] = in[0];
	return 0;
}

static void test_eager_self(void)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_graph *g;
	cgr_node *x, *y;
	uint64_t v = 9;
	cgr_value a = cgr_value_bytes(&v, 8), o;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "eager_self", d.fn = eager_self_fn;
	cgr_graph_task(g, W[0], &d, &x, 1, &y, 1);
	cgr_graph_output(g, &y, 1);
	atomic_store(&eager_graph, g);
	t_ok(cgr_graph_execute_eager(g, &a, 1, &o, 1, NULL) == 0 &&
		     o.kind == CGR_VALUE_BYTES &&
		     memcmp(o.u.bytes.data, &v, 8) == 0,
	     "an eager run whose task ran it again: its value");
	t_is(atomic_load(&eager_rc), -EDEADLK,
	     "cgr_graph_execute_eager from its own task: -EDEADLK");
	cgr_graph_destroy(g);
}

/* ---- teardown while another thread waits ---------------------------- */

static _Atomic int gate_open;

static int gated_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	(void)tc, (void)st, (void)nin, (void)nout;
	while (!atomic_load(&gate_open))
		sched_yield();
	out[0] = in[0];
	return 0;
}

struct waiter {
	bool release; /* cgr_ref_release, not get */
	cgr_compiled *c;
	cgr_ref ref;
	int rc;
	uint64_t value;
	_Atomic int started;
	int64_t t_done;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *waiter_main(void *arg)
{
	struct waiter *wt = arg;
	cgr_value o;
	atomic_store(&wt->started, 1);
	if (wt->release) {
		wt->rc = cgr_ref_release(wt->c, wt->ref);
		wt->t_done = now_ns();
		atomic_store(&gate_open, 1);
		return NULL;
	}
	wt->rc = cgr_ref_get(wt->c, wt->ref, CGR_FOREVER, &o, 1);
	if (wt->rc == 0 && o.kind == CGR_VALUE_BYTES)
		memcpy(&wt->value, o.u.bytes.data, 8);
	wt->t_done = now_ns();
	/* Only now may the task end: a teardown that waited for this get
	 * to time out would wait for ever. */
	atomic_store(&gate_open, 1);
	return NULL;
}

static void test_teardown_wakes(bool arrives, bool release)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *y;
	uint64_t v = 7;
	cgr_value a = cgr_value_bytes(&v, 8);
	struct waiter wt = { 0 };
	pthread_t th;
	int64_t t0;

	atomic_store(&gate_open, arrives);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "gated", d.fn = gated_fn;
	cgr_graph_task(g, W[0], &d, &x, 1, &y, 1);
	cgr_graph_output(g, &y, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "gated graph compiles");
	cgr_graph_destroy(g);
	wt.c = c;
	wt.release = release;
	t_is(cgr_execute(c, &a, 1, &wt.ref), 0, "execute");
	pthread_create(&th, NULL, waiter_main, &wt);
	while (!atomic_load(&wt.started))
		sched_yield();
	t0 = now_ns();
	/* The task (gated) ends once the waiter's get returned. */
	int ret = cgr_compiled_teardown(c, 5000000000LL);
	pthread_join(th, NULL);
	t_is(ret, 0, "teardown returns 0 (the task ended once the get "
		     "returned)");
	if (release)
		t_is(wt.rc, 0, "a release blocked in another thread: 0");
	else if (arrives)
		t_ok(wt.rc == 0 ? wt.value == v : wt.rc == CGR_ECLOSED,
		     "a get blocked in another thread: the value or "
		     "CGR_ECLOSED (%s)",
		     cgr_strerror(wt.rc));
	else
		t_is(wt.rc, CGR_ECLOSED,
		     "a get blocked forever in another thread: CGR_ECLOSED");
	t_ok(wt.t_done - t0 < 1000000000,
	     "it returned %.2f ms after teardown began",
	     (double)(wt.t_done - t0) / 1e6);
	t_is(cgr_ref_get(c, wt.ref, 0, &(cgr_value){ 0 }, 1), CGR_ECLOSED,
	     "a get after teardown: CGR_ECLOSED");
	cgr_compiled_destroy(c);
}

static const cgr_export exports[] = {
	{ "scale", scale_fn, NULL, NULL },   { "plus1", plus1_fn, NULL, NULL },
	{ "twice", twice_fn, NULL, NULL },   { "minus7", minus7_fn, NULL, NULL },
	{ NULL, NULL, NULL, NULL },
};

int main(int argc, char **argv)
{
	long n = t_scale(4000);
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;

	cgr_worker_main(argc, argv, exports);
	t_init(argc, argv, 300);
	cp.exports = exports;
	t_is(cgr_ctx_create(&cp, &ctx), 0, "context");
	for (int i = 0; i < 4; i++) {
#ifdef T_PROCESS_WORKERS
		is_proc[i] = i % 2 == 1;
#endif
		t_is(t_worker_named(ctx, i, is_proc[i], &W[i]), 0,
		     "worker %d (%s)", i, is_proc[i] ? "a process" : "a thread");
	}
	for (int overlap = 0; overlap < 2; overlap++)
		for (int device = 0; device < 2; device++) {
			test_held(overlap, device, 4, 1, n);
			test_held(overlap, device, 4, 3, n);
		}
	test_held(0, false, 8, 5, n);
	test_held(1, true, 2, 1, n);
	test_held(0, false, 1, 0, n / 4);
	test_self();
	test_eager_self();
	test_teardown_wakes(false, false);
	test_teardown_wakes(true, false);
	test_teardown_wakes(false, true);
	cgr_ctx_destroy(ctx);
	return t_done();
}
