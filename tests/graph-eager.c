/*
 * tests/graph-eager.c: what eager execution gives beyond the values
 * (tests/graph-exec-eager and tests/graph-coll-eager check those): the
 * hook before and after every task and collective member, in an order
 * that respects the graph, with the right inputs and outputs; every
 * node's value after the run; a failing task's error naming its inputs'
 * shapes; eager runs then a compile (and no eager run after it); what
 * eager execution refuses, saying so; a graph changed between runs (each
 * run sees it as it is); a step past its deadline whose graph is
 * destroyed while it still runs.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <cgr.h>

#include "tap.h"

static int add1(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	int64_t *o = cgr_task_output_buffer(tc, 0, 8), x;

	(void)st, (void)nin, (void)nout;
	memcpy(&x, in[0].u.bytes.data, 8);
	if (x < 0) {
		cgr_task_set_error(tc, -EDOM, "negative");
		return -1;
	}
	*o = x + 1;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

static int vec(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
	       cgr_value *out, size_t nout)
{
	static __thread int64_t shape[1] = { 4 };
	int64_t *o = cgr_task_output_buffer(tc, 0, 32), x;

	(void)st, (void)nin, (void)nout;
	memcpy(&x, in[0].u.bytes.data, 8);
	for (int i = 0; i < 4; i++)
		o[i] = x * 10 + i;
	out[0] = cgr_value_tensor(o, kDLInt, 64, 1, shape);
	return 0;
}

struct seen {
	char log[64][32];
	int n;
	int64_t in_of_b; /* b's input value, seen by the hook */
};

static void hook(void *arg, int after, const char *name, cgr_worker *w,
		 const cgr_value *in, size_t nin, const cgr_value *out,
		 size_t nout)
{
	struct seen *s = arg;
	(void)w, (void)out, (void)nout;
	if (s->n < 64)
		snprintf(s->log[s->n++], 32, "%s %s", after ? "after" : "before",
			 name);
	if (!after && strcmp(name, "b") == 0 && nin == 1 &&
	    in[0].kind == CGR_VALUE_BYTES)
		memcpy(&s->in_of_b, in[0].u.bytes.data, 8);
}

static int pos(const struct seen *s, const char *what)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->log[i], what) == 0)
			return i;
	return -1;
}

/* A task held at a gate: it reads its input only once the gate opens,
 * then says so (done). */
static atomic_int gate, gated_done;

static int gated(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		 cgr_value *out, size_t nout)
{
	int64_t *o = cgr_task_output_buffer(tc, 0, 8), x;

	(void)st, (void)nin, (void)nout;
	while (!atomic_load(&gate))
		sched_yield();
	memcpy(&x, in[0].u.bytes.data, 8); /* after its graph went */
	*o = x;
	out[0] = cgr_value_bytes(o, 8);
	atomic_store(&gated_done, 1);
	return 0;
}

/* out = in[0] - in[1] (int64). */
static int sub2(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	int64_t *o = cgr_task_output_buffer(tc, 0, 8), x, y;

	(void)st, (void)nin, (void)nout;
	memcpy(&x, in[0].u.bytes.data, 8);
	memcpy(&y, in[1].u.bytes.data, 8);
	*o = x - y;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

/* Graphs that change between eager runs: each run sees the graph as it
 * is then. */
static void check_changes(cgr_ctx *ctx, cgr_worker *w)
{
	cgr_graph *g;
	cgr_node *x, *k, *a, *b, *s, *in2[2];
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	int64_t xv = 1, kv = 40, got[2] = { 0, 0 };
	cgr_value arg = cgr_value_bytes(&xv, 8), kval = cgr_value_bytes(&kv, 8);
	cgr_value o;
	int ret[2];

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	cgr_graph_const(g, &kval, &k);
	d.fn = add1, d.name = "a";
	cgr_graph_task(g, w, &d, &x, 1, &a, 1);
	in2[0] = a, in2[1] = k;
	d.fn = sub2, d.name = "s";
	cgr_graph_task(g, w, &d, in2, 2, &s, 1);
	cgr_graph_output(g, &s, 1);
	for (int i = 0; i < 2; i++) {
		/* Then s's inputs swap. */
		if (i == 1)
			cgr_node_set_input(s, 0, k), cgr_node_set_input(s, 1, a);
		ret[i] = cgr_graph_execute_eager(g, &arg, 1, &o, 1, NULL);
		if (ret[i] == 0 && o.kind == CGR_VALUE_BYTES)
			memcpy(&got[i], o.u.bytes.data, 8);
	}
	t_ok(ret[0] == 0 && got[0] == -38 && ret[1] == 0 && got[1] == 38,
	     "eager: s = (x + 1) - k = %lld; its inputs swapped, the next run "
	     "gives k - (x + 1) = %lld",
	     (long long)got[0], (long long)got[1]);
	d.fn = add1, d.name = "b";
	cgr_graph_task(g, w, &d, &a, 1, &b, 1);
	t_is(cgr_graph_execute_eager(g, &arg, 1, &o, 1, NULL), CGR_EUNREACHABLE,
	     "a task added that no output needs: as the compile says: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
}

/* A step past its deadline (CGR_ESTUCK) keeps what it uses: its graph
 * destroyed meanwhile frees nothing under it (sanitizer builds check),
 * its worker takes no other eager step until it ends (-EBUSY), then
 * does. */
static void check_stuck(cgr_ctx *ctx, cgr_worker *w)
{
	cgr_graph *g, *g2;
	cgr_node *x, *a;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_eager_params ep = CGR_EAGER_PARAMS_INIT;
	int64_t xv = 7, got = 0;
	cgr_value arg = cgr_value_bytes(&xv, 8), o;

	for (int i = 0; i < 2; i++) {
		cgr_graph_create(ctx, i ? &g2 : &g);
		cgr_graph_input(i ? g2 : g, 0, &x);
		d.fn = i ? add1 : gated, d.name = i ? "after" : "gated";
		cgr_graph_task(i ? g2 : g, w, &d, &x, 1, &a, 1);
		cgr_graph_output(i ? g2 : g, &a, 1);
	}
	ep.timeout_ns = 20000000;
	t_is(cgr_graph_execute_eager(g, &arg, 1, &o, 1, &ep), CGR_ESTUCK,
	     "a step held past its 20 ms deadline: CGR_ESTUCK");
	t_is(cgr_graph_execute_eager(g2, &arg, 1, &o, 1, NULL), -EBUSY,
	     "another graph's step on that worker meanwhile: -EBUSY: %s",
	     cgr_graph_errmsg(g2));
	cgr_graph_destroy(g); /* the step still runs */
	atomic_store(&gate, 1);
	while (!atomic_load(&gated_done))
		sched_yield();
	/* (It has read its input; its worker lets the step go next.) */
	int ret;
	while ((ret = cgr_graph_execute_eager(g2, &arg, 1, &o, 1, NULL)) ==
	       -EBUSY)
		sched_yield();
	if (ret == 0 && o.kind == CGR_VALUE_BYTES)
		memcpy(&got, o.u.bytes.data, 8);
	t_ok(ret == 0 && got == 8,
	     "once it ended, the other graph runs there: %lld",
	     (long long)got);
	cgr_graph_destroy(g2);
}

int main(int argc, char **argv)
{
	cgr_ctx *ctx;
	cgr_worker *w[2];
	cgr_graph *g;
	cgr_node *x, *a, *b, *v[2], *r[2];
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_eager_params ep = CGR_EAGER_PARAMS_INIT;
	struct seen s = { .n = 0 };
	cgr_compiled *c;
	cgr_value o[3], nv;
	int64_t xv = 5, got;

	t_init(argc, argv, 60);
	cgr_ctx_create(NULL, &ctx);
	cgr_worker_create(ctx, NULL, &w[0]);
	cgr_worker_create(ctx, NULL, &w[1]);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.fn = add1, d.name = "a";
	cgr_graph_task(g, w[0], &d, &x, 1, &a, 1);
	d.name = "b";
	cgr_graph_task(g, w[1], &d, &a, 1, &b, 1);
	d.fn = vec, d.name = "vec0";
	cgr_graph_task(g, w[0], &d, &x, 1, &v[0], 1);
	d.name = "vec1";
	cgr_graph_task(g, w[1], &d, &b, 1, &v[1], 1);
	cgr_graph_allreduce(g, v, 2, CGR_SUM, NULL, r);
	cgr_node *outs[3] = { b, r[0], r[1] };
	cgr_graph_output(g, outs, 3);

	ep.hook = hook, ep.hook_arg = &s;
	cgr_value arg = cgr_value_bytes(&xv, 8);
	t_is(cgr_graph_execute_eager(g, &arg, 1, o, 3, &ep), 0, "eager run: %s",
	     cgr_graph_errmsg(g));
	memcpy(&got, o[0].u.bytes.data, 8);
	t_is(got, 7, "b = x + 2");
	t_ok(o[1].kind == CGR_VALUE_TENSOR &&
		     ((int64_t *)o[1].u.tensor.data)[3] == 50 + 3 + 70 + 3,
	     "the allreduce of vec0 and vec1");
	t_ok(pos(&s, "before a") >= 0 && pos(&s, "after a") > pos(&s, "before a") &&
		     pos(&s, "before b") > pos(&s, "after a") &&
		     pos(&s, "before vec1") > pos(&s, "after b") &&
		     pos(&s, "before allreduce4") > pos(&s, "after vec1"),
	     "the hook before and after each task, in the graph's order (%d calls)",
	     s.n);
	t_is(s.n, 12, "2 calls for each of 4 tasks and 2 collective members");
	t_is(s.in_of_b, 6, "the hook sees b's input");
	t_is(cgr_graph_eager_value(g, a, &nv), 0, "an intermediate value");
	memcpy(&got, nv.u.bytes.data, 8);
	t_is(got, 6, "a = x + 1, read by node after the run");
	t_is(cgr_graph_eager_value(g, v[0], &nv), 0, "another");
	t_ok(nv.kind == CGR_VALUE_TENSOR && nv.u.tensor.shape[0] == 4 &&
		     ((int64_t *)nv.u.tensor.data)[1] == 51,
	     "vec0's tensor");

	xv = -3;
	t_is(cgr_graph_execute_eager(g, &arg, 1, o, 3, NULL), 0,
	     "a failing run");
	t_ok(o[0].kind == CGR_VALUE_ERROR && o[0].code == -EDOM &&
		     strstr(o[0].u.error.msg, "negative") != NULL &&
		     strstr(o[0].u.error.msg, "(inputs: 8 bytes)") != NULL,
	     "the error names its task's inputs: %s",
	     o[0].kind == CGR_VALUE_ERROR ? o[0].u.error.msg : "?");
	for (int i = 0; i < 20; i++) {
		xv = i;
		if (cgr_graph_execute_eager(g, &arg, 1, o, 3, NULL) != 0)
			break;
		memcpy(&got, o[0].u.bytes.data, 8);
		if (got != i + 2)
			break;
		if (i == 19)
			t_ok(1, "20 more eager runs");
	}
	t_is(cgr_graph_compile(g, NULL, &c), 0, "then it compiles");
	t_is(cgr_graph_execute_eager(g, &arg, 1, o, 3, NULL), CGR_ECOMPILED,
	     "and runs eagerly no more: %s", cgr_graph_errmsg(g));
	cgr_ref ref;
	xv = 9;
	t_ok(cgr_execute(c, &arg, 1, &ref) == 0 &&
		     cgr_ref_get(c, ref, -1, o, 3) == 0 &&
		     *(const int64_t *)o[0].u.bytes.data == 11,
	     "compiled, the same value");
	cgr_ref_release(c, ref);
	/* A second graph on the same workers, busy now. */
	cgr_graph *g2;
	cgr_node *y, *z;
	cgr_graph_create(ctx, &g2);
	cgr_graph_input(g2, 0, &y);
	d.fn = add1, d.name = "z";
	cgr_graph_task(g2, w[0], &d, &y, 1, &z, 1);
	cgr_graph_output(g2, &z, 1);
	t_is(cgr_graph_execute_eager(g2, &arg, 1, o, 1, NULL), -EBUSY,
	     "a worker serving a compiled graph: -EBUSY: %s",
	     cgr_graph_errmsg(g2));
	cgr_compiled_destroy(c);
	t_is(cgr_graph_execute_eager(g2, &arg, 1, o, 1, NULL), 0,
	     "once it is destroyed, the other graph runs");
	t_is(cgr_graph_execute_eager(g2, &arg, 2, o, 1, NULL), CGR_ENARGS,
	     "wrong argument count: CGR_ENARGS");
	t_ok(strstr(cgr_graph_errmsg(g2), "2 arguments") != NULL,
	     "... saying so: %s", cgr_graph_errmsg(g2));
	cgr_graph_destroy(g2);
	cgr_graph_destroy(g);
	check_changes(ctx, w[0]);
	check_stuck(ctx, w[1]);
	cgr_ctx_destroy(ctx);
	return t_done();
}
