/*
 * drive/ctx_destroy.c: cgr_ctx_destroy: the graphs left are destroyed,
 * the context's compiled graphs torn down, its workers stopped (each
 * with a deadline), what each kind of worker keeps of the context
 * released (the process workers' death monitor), and the driver's
 * reference dropped.
 */
#include "drive/drive.h"

/* The first graph, or compiled graph, left (a task may still make or
 * destroy some: graph_lock). */
static cgr_graph *first_graph(cgr_ctx *ctx)
{
	cgr_graph *g;

	pthread_mutex_lock(&ctx->graph_lock);
	g = ctx->graphs;
	pthread_mutex_unlock(&ctx->graph_lock);
	return g;
}

static cgr_compiled *first_compiled(cgr_ctx *ctx)
{
	cgr_compiled *c;

	pthread_mutex_lock(&ctx->graph_lock);
	c = ctx->compiled;
	pthread_mutex_unlock(&ctx->graph_lock);
	return c;
}

void cgr_ctx_destroy(cgr_ctx *ctx)
{
	cgr_worker *w;
	cgr_graph *g;
	cgr_compiled *c;

	if (ctx == NULL || ctx->destroyed)
		return;
	if (cgr__running_graph != NULL && cgr__running_graph->ctx == ctx) {
		/* It would wait for the very task that called it. */
		cgr__err(&ctx->log, "cgr_ctx_destroy called from a task of "
				    "one of its graphs: refused, nothing freed");
		return;
	}
	ctx->destroyed = true;
	/* Graphs first: an eager graph's own compiled graph goes with it. */
	while ((g = first_graph(ctx)) != NULL)
		cgr_graph_destroy(g);
	while ((c = first_compiled(ctx)) != NULL)
		cgr_compiled_destroy(c);
	for (w = ctx->workers; w != NULL; w = w->next)
		cgr_worker_destroy(w, 1000000000);
	cgr__worker_kinds_release(ctx);
	cgr__ctx_put(ctx);
}
