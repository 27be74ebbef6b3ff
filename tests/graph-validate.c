/*
 * tests/graph-validate.c: every validation error names what is wrong:
 * cycle, no path to an output, unused argument, destroyed worker, compiled
 * twice, no outputs, unset input, busy worker, wrong argument count,
 * in-flight limit, bad parameters.
 */
#include <errno.h>
#include <string.h>

#include <cgr.h>

#include "tap.h"

static int echo(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	(void)tc, (void)st;
	for (size_t i = 0; i < nout; i++)
		out[i] = nin > 0 ? in[i < nin ? i : 0] : cgr_value_bytes("", 0);
	return 0;
}

static cgr_node *task(cgr_graph *g, cgr_worker *w, const char *name,
		      cgr_node **in, size_t nin)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_node *n = NULL;
	d.name = name;
	d.fn = echo;
	if (cgr_graph_task(g, w, &d, in, nin, &n, 1) != 0)
		return NULL;
	return n;
}

static int has(const char *s, const char *sub)
{
	return strstr(s, sub) != NULL;
}

int main(int argc, char **argv)
{
	cgr_ctx *ctx;
	cgr_worker *w0, *w1, *w2;
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *in, *in1, *a, *b, *cc, *d, *outs[2];
	int ret;

	t_init(argc, argv, 30);
	t_is(cgr_ctx_create(NULL, &ctx), 0, "context");
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	wp.name = "w0";
	cgr_worker_create(ctx, &wp, &w0);
	wp.name = "w1";
	cgr_worker_create(ctx, &wp, &w1);
	wp.name = "w2";
	cgr_worker_create(ctx, &wp, &w2);

	/* Cycle a -> b -> c -> a, built with late-bound inputs. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	cgr_node *hole[2] = { NULL, NULL };
	a = task(g, w0, "alpha", hole, 2);
	cgr_node_set_input(a, 0, in);
	b = task(g, w1, "beta", &a, 1);
	cc = task(g, w2, "gamma", &b, 1);
	t_is(cgr_node_set_input(a, 1, cc), 0, "late-bound input");
	outs[0] = cc;
	cgr_graph_output(g, outs, 1);
	ret = cgr_graph_compile(g, NULL, &c);
	t_is(ret, CGR_ECYCLE, "cycle rejected: %s", cgr_graph_errmsg(g));
	t_ok(has(cgr_graph_errmsg(g), "alpha") &&
		     has(cgr_graph_errmsg(g), "beta") &&
		     has(cgr_graph_errmsg(g), "gamma"),
	     "cycle message names alpha, beta and gamma");
	cgr_graph_destroy(g);

	/* A self-loop. */
	cgr_graph_create(ctx, &g);
	a = task(g, w0, "selfie", hole, 1);
	cgr_node_set_input(a, 0, a);
	cgr_graph_output(g, &a, 1);
	t_is(cgr_graph_compile(g, NULL, &c), CGR_ECYCLE, "self-loop: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);

	/* Unset input. */
	cgr_graph_create(ctx, &g);
	a = task(g, w0, "holey", hole, 1);
	cgr_graph_output(g, &a, 1);
	t_is(cgr_graph_compile(g, NULL, &c), -EINVAL, "unset input: %s",
	     cgr_graph_errmsg(g));
	t_ok(has(cgr_graph_errmsg(g), "holey"), "message names the task");
	cgr_graph_destroy(g);

	/* A task with no path to an output. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, w0, "useful", &in, 1);
	b = task(g, w1, "dangling", &in, 1);
	cgr_graph_output(g, &a, 1);
	t_is(cgr_graph_compile(g, NULL, &c), CGR_EUNREACHABLE,
	     "unreachable: %s", cgr_graph_errmsg(g));
	t_ok(has(cgr_graph_errmsg(g), "dangling") &&
		     !has(cgr_graph_errmsg(g), "useful"),
	     "message names only the dangling task");
	cgr_graph_destroy(g);

	/* Argument 1 unused while 0 and 2 are. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	cgr_graph_input(g, 2, &in1);
	cgr_node *two[2] = { in, in1 };
	a = task(g, w0, "uses02", two, 2);
	cgr_graph_output(g, &a, 1);
	t_is(cgr_graph_compile(g, NULL, &c), CGR_EUNUSEDARG, "unused arg: %s",
	     cgr_graph_errmsg(g));
	t_ok(has(cgr_graph_errmsg(g), "argument 1"), "message names arg 1");
	cgr_graph_destroy(g);

	/* An input node that exists but feeds nothing. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	cgr_graph_input(g, 1, &in1);
	a = task(g, w0, "uses0", &in, 1);
	cgr_graph_output(g, &a, 1);
	t_is(cgr_graph_compile(g, NULL, &c), CGR_EUNUSEDARG,
	     "input node feeding nothing: %s", cgr_graph_errmsg(g));
	cgr_graph_destroy(g);

	/* No outputs. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, w0, "lonely", &in, 1);
	t_is(cgr_graph_compile(g, NULL, &c), CGR_ENOOUTPUT, "no outputs");
	t_is(cgr_graph_output(g, &in, 1), -EINVAL,
	     "an input cannot be a graph output");
	cgr_graph_destroy(g);

	/* Bad compile parameters. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, w0, "p", &in, 1);
	cgr_graph_output(g, &a, 1);
	t_is(cgr_graph_output(g, &a, 1), -EALREADY, "outputs declared once");
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	pp.max_inflight = 100000;
	t_is(cgr_graph_compile(g, &pp, &c), -EINVAL, "max_inflight too big");
	pp = (cgr_compile_params)CGR_COMPILE_PARAMS_INIT;
	pp.wait_mode = 42;
	t_is(cgr_graph_compile(g, &pp, &c), -EINVAL, "unknown wait mode");
	pp = (cgr_compile_params)CGR_COMPILE_PARAMS_INIT;
	pp.sim_comm_ns = -1;
	t_is(cgr_graph_compile(g, &pp, &c), -EINVAL,
	     "negative modelled communication time");
	pp.sim_comm_ns = 11ll * 1000000000;
	t_is(cgr_graph_compile(g, &pp, &c), -EINVAL,
	     "modelled communication time over 10 s");
	t_ok(strstr(cgr_graph_errmsg(g), "sim_comm_ns") != NULL,
	     "...naming the field: %s", cgr_graph_errmsg(g));
	pp = (cgr_compile_params)CGR_COMPILE_PARAMS_INIT;
	pp.overlap = 2;
	t_is(cgr_graph_compile(g, &pp, &c), -EINVAL, "overlap 2: %s",
	     cgr_graph_errmsg(g));

	/* Compile, then: compile twice, busy worker, nargs, capacity. */
	pp = (cgr_compile_params)CGR_COMPILE_PARAMS_INIT;
	pp.max_inflight = 3;
	t_is(cgr_graph_compile(g, &pp, &c), 0, "compiles");
	cgr_compiled *c2 = NULL;
	t_is(cgr_graph_compile(g, &pp, &c2), CGR_ECOMPILED,
	     "compiling twice: %s", cgr_graph_errmsg(g));
	t_is(cgr_graph_input(g, 1, &in1), CGR_ECOMPILED,
	     "no new nodes after compile");
	cgr_graph_destroy(g);
	t_is(cgr_worker_destroy(w0, -1), -EBUSY,
	     "a worker in a live graph is not destroyed");

	cgr_graph *g2;
	cgr_graph_create(ctx, &g2);
	cgr_graph_input(g2, 0, &in);
	a = task(g2, w0, "second", &in, 1);
	cgr_graph_output(g2, &a, 1);
	t_is(cgr_graph_compile(g2, NULL, &c2), -EBUSY,
	     "worker serves one graph at a time: %s", cgr_graph_errmsg(g2));
	t_ok(has(cgr_graph_errmsg(g2), "w0"), "message names the worker");

	cgr_value v = cgr_value_bytes("x", 1), outv[1];
	cgr_ref refs[4], r;
	t_is(cgr_execute(c, NULL, 0, &r), CGR_ENARGS, "too few arguments");
	cgr_value vv[2] = { v, v };
	t_is(cgr_execute(c, vv, 2, &r), CGR_ENARGS, "too many arguments");
	for (int i = 0; i < 3; i++)
		t_is(cgr_execute(c, &v, 1, &refs[i]), 0, "execute %d", i);
	t_is(cgr_execute(c, &v, 1, &refs[3]), CGR_ECAPACITY,
	     "fourth execution over the in-flight limit of 3");
	t_is(cgr_ref_get(c, refs[0], -1, outv, 2), CGR_ENARGS,
	     "get with the wrong output count");
	t_is(cgr_ref_get(c, refs[0], -1, outv, 1), 0, "get 0");
	t_is(cgr_ref_release(c, refs[0]), 0, "release 0");
	t_is(cgr_ref_release(c, refs[0]), CGR_EUNKNOWNREF, "release twice");
	t_is(cgr_ref_get(c, refs[0], -1, outv, 1), CGR_EUNKNOWNREF,
	     "get after release");
	t_is(cgr_ref_get(c, 999, -1, outv, 1), CGR_EUNKNOWNREF,
	     "get of a ref never returned");
	t_is(cgr_execute(c, &v, 1, &refs[3]), 0, "room again after release");
	char big[1024] = { 0 };
	pp = (cgr_compile_params)CGR_COMPILE_PARAMS_INIT;
	cgr_value bigv = cgr_value_bytes(big, sizeof(big));
	(void)bigv;
	cgr_compiled_destroy(c);
	t_is(cgr_graph_compile(g2, NULL, &c2), 0,
	     "the worker is free again after destroy");

	/* Oversized argument: rejected before anything moves. */
	cgr_graph *g3;
	cgr_compiled *c3;
	cgr_graph_create(ctx, &g3);
	cgr_graph_input(g3, 0, &in);
	a = task(g3, w1, "small", &in, 1);
	cgr_graph_output(g3, &a, 1);
	pp.max_value_bytes = 512;
	t_is(cgr_graph_compile(g3, &pp, &c3), 0, "compile with 512 B buffers");
	t_is(cgr_execute(c3, &bigv, 1, &r), CGR_ETOOBIG,
	     "1 KiB argument into a 512 B buffer");
	cgr_value bad = { 0 };
	bad.kind = 77;
	t_is(cgr_execute(c3, &bad, 1, &r), CGR_EBADVALUE, "unknown value kind");
	t_is(cgr_execute(c3, &v, 1, &r), 0, "a fitting argument still runs");
	t_is(cgr_ref_get(c3, r, -1, outv, 1), 0, "and returns");
	t_ok(outv[0].kind == CGR_VALUE_BYTES && outv[0].u.bytes.len == 1 &&
		     memcmp(outv[0].u.bytes.data, "x", 1) == 0,
	     "with the right value");
	cgr_compiled_destroy(c3);
	cgr_graph_destroy(g3);

	/* Destroyed worker. */
	t_is(cgr_worker_destroy(w2, -1), 0, "destroy w2");
	t_is(cgr_worker_destroy(w2, -1), 0, "destroying twice is a no-op");
	cgr_graph_create(ctx, &g3);
	cgr_graph_input(g3, 0, &in);
	a = task(g3, w2, "orphan", &in, 1);
	cgr_graph_output(g3, &a, 1);
	t_is(cgr_graph_compile(g3, NULL, &c3), CGR_EWORKERGONE,
	     "destroyed worker: %s", cgr_graph_errmsg(g3));
	t_ok(has(cgr_graph_errmsg(g3), "orphan") &&
		     has(cgr_graph_errmsg(g3), "w2"),
	     "message names the task and the worker");
	cgr_graph_destroy(g3);

	/* Error names and messages. */
	t_ok(strcmp(cgr_err_name(CGR_ECYCLE), "CGR_ECYCLE") == 0 &&
		     strcmp(cgr_err_name(-ETIMEDOUT), "ETIMEDOUT") == 0 &&
		     /* (EOPNOTSUPP's number; cgr's documents say ENOTSUP) */
		     strcmp(cgr_err_name(-ENOTSUP), "ENOTSUP") == 0 &&
		     strlen(cgr_strerror(CGR_ECAPACITY)) > 5 &&
		     strcmp(cgr_strerror(0), "success") == 0,
	     "cgr_err_name and cgr_strerror");

	cgr_compiled_destroy(c2);
	cgr_graph_destroy(g2);
	cgr_ctx_destroy(ctx);
	(void)d;
	(void)outs[1];
	return t_done();
}
