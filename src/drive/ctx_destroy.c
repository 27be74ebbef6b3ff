/*
 * drive/ctx_destroy.c: cgr_ctx_destroy: the graphs left are destroyed,
 * the context's compiled graphs torn down, its workers stopped (each
 * with a deadline), what each kind of worker keeps of the context
 * released (the process workers' death monitor), and the driver's
 * reference dropped.
 */
#include "drive/drive.h"

void cgr_ctx_destroy(cgr_ctx *ctx)
{
	cgr_worker *w;

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
	while (ctx->graphs != NULL)
		cgr_graph_destroy(ctx->graphs);
	while (ctx->compiled != NULL)
		cgr_compiled_destroy(ctx->compiled);
	for (w = ctx->workers; w != NULL; w = w->next)
		cgr_worker_destroy(w, 1000000000);
	cgr__worker_kinds_release(ctx);
	cgr__ctx_put(ctx);
}
