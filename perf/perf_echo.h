/*
 * perf/perf_echo.h: the echo graphs of the round-trip benchmarks: a chain
 * of nw echo tasks, one per worker (nw = 1: the echo).
 */
#ifndef CGR_PERF_ECHO_H
#define CGR_PERF_ECHO_H

#include <cgr.h>

static int perf_echo(cgr_task_ctx *tc, void *st, const cgr_value *in,
		     size_t nin, cgr_value *out, size_t nout)
{
	(void)tc, (void)st, (void)nin, (void)nout;
	out[0] = in[0];
	return 0;
}

/* A chain of nw echo tasks, one per worker, from input 0 to output 0. */
static inline cgr_graph *perf_echo_chain(cgr_ctx *ctx, cgr_worker **w,
					 int nw)
{
	cgr_graph *g;
	cgr_node *x;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < nw; i++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = "echo";
		d.fn = perf_echo;
		cgr_graph_task(g, w[i], &d, &x, 1, &x, 1);
	}
	cgr_graph_output(g, &x, 1);
	return g;
}

#endif
