/*
 * device/ctxref.c: what the device and comm layers need from a context:
 * its arena, its logger and references that keep it alive.
 *
 * This is the one file below graph/ that includes graph/internal.h (for
 * struct cgr_ctx); everything else in device/ and comm/ goes through these
 * four calls, so moving them into graph/ctx.c later changes no caller.
 */
#include "device/device.h"
#include "graph/internal.h"

struct cgr__arena *cgr__ctx_arena(cgr_ctx *ctx)
{
	return &ctx->arena;
}

const struct cgr__logger *cgr__ctx_logger(cgr_ctx *ctx)
{
	return &ctx->log;
}

void cgr__ctx_ref(cgr_ctx *ctx)
{
	/* Relaxed: the caller already holds a reference (or the driver's). */
	atomic_fetch_add_explicit(&ctx->refs, 1, memory_order_relaxed);
}

void cgr__ctx_put(cgr_ctx *ctx)
{
	cgr__ctx_unref(ctx);
}
