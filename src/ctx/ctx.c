/*
 * ctx/ctx.c: creating a context, its references, and the per-context
 * state of higher layers (see ctx.h).
 */
#include <errno.h>
#include <string.h>

#include "ctx/ctx.h"

int cgr_ctx_create(const cgr_ctx_params *p, cgr_ctx **out)
{
	cgr_ctx_params prm;
	cgr_ctx *ctx;
	struct cgr__arena arena;
	int ret;

	if (out == NULL || (p != NULL && p->size < sizeof(size_t)))
		return -EINVAL;
	CGR__PARAMS_COPY(prm, p, ((cgr_ctx_params)CGR_CTX_PARAMS_INIT));
	if (prm.flags & ~(unsigned)CGR_CTX_NO_IO_URING)
		return -EINVAL;
	ret = cgr__arena_init(&arena);
	if (ret < 0)
		return ret;
	ctx = cgr__alloc(&arena, sizeof(*ctx), 64);
	if (ctx == NULL) {
		cgr__arena_fini(&arena);
		return -ENOMEM;
	}
	/* The arena moves into the context: counters included. */
	ctx->arena.index = arena.index;
	ctx->arena.flags = arena.flags;
	atomic_init(&ctx->arena.live_bytes,
		    atomic_load(&arena.live_bytes));
	atomic_init(&ctx->arena.live_blocks,
		    atomic_load(&arena.live_blocks));
	if ((prm.cudart_path != NULL &&
	     (ctx->cudart_path = cgr__strdup(&ctx->arena, prm.cudart_path)) ==
		     NULL) ||
	    (prm.nccl_path != NULL &&
	     (ctx->nccl_path = cgr__strdup(&ctx->arena, prm.nccl_path)) ==
		     NULL)) {
		cgr__strfree(&ctx->arena, ctx->cudart_path);
		cgr__free(&ctx->arena, ctx, sizeof(*ctx), 64);
		cgr__arena_fini(&arena);
		return -ENOMEM;
	}
	ctx->log.fn = prm.log_fn;
	ctx->log.arg = prm.log_arg;
	ctx->log.level = prm.log_level;
	ctx->flags = prm.flags;
	ctx->exports = prm.exports;
	atomic_init(&ctx->refs, 1);
	atomic_init(&ctx->uring_fallback_logged, false);
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->ext_lock, NULL);
	*out = ctx;
	return 0;
}

static void ctx_free(cgr_ctx *ctx)
{
	struct cgr__arena arena = { 0 };

	if (ctx->release_workers != NULL)
		ctx->release_workers(ctx);
	for (int i = CGR__CTX_EXT; i-- > 0;)
		if (ctx->ext[i].key != NULL && ctx->ext[i].fini != NULL)
			ctx->ext[i].fini(ctx, ctx->ext[i].p);
	pthread_mutex_destroy(&ctx->lock);
	pthread_mutex_destroy(&ctx->ext_lock);
	cgr__strfree(&ctx->arena, ctx->cudart_path);
	cgr__strfree(&ctx->arena, ctx->nccl_path);
	arena.index = ctx->arena.index;
	arena.flags = ctx->arena.flags;
	cgr__free(&ctx->arena, ctx, sizeof(*ctx), 64);
	cgr__arena_fini(&arena);
}

void cgr__ctx_put(cgr_ctx *ctx)
{
	/* Acq_rel: the last owner sees every other owner's writes. */
	if (atomic_fetch_sub_explicit(&ctx->refs, 1, memory_order_acq_rel) == 1)
		ctx_free(ctx);
}

int cgr__ctx_state(cgr_ctx *ctx, const void *key,
		   int (*make)(cgr_ctx *, void **),
		   void (*fini)(cgr_ctx *, void *), void **out)
{
	struct cgr__ctx_ext *x = NULL;
	int ret = 0;

	if (key == NULL)
		return -EINVAL;
	pthread_mutex_lock(&ctx->ext_lock);
	for (size_t i = 0; i < CGR__CTX_EXT && x == NULL; i++)
		if (ctx->ext[i].key == key || ctx->ext[i].key == NULL)
			x = &ctx->ext[i];
	if (x == NULL) {
		ret = -ENOSPC;
	} else if (x->key == NULL) {
		void *p = NULL;
		ret = make(ctx, &p);
		if (ret == 0) {
			x->p = p;
			x->fini = fini;
			x->key = key;
		}
	}
	if (ret == 0)
		*out = x->p;
	pthread_mutex_unlock(&ctx->ext_lock);
	return ret;
}

int cgr_ctx_memory(const cgr_ctx *ctx, size_t *live_bytes, size_t *live_blocks)
{
	if (ctx == NULL)
		return -EINVAL;
	if (live_bytes != NULL)
		*live_bytes = atomic_load(&ctx->arena.live_bytes);
	if (live_blocks != NULL)
		*live_blocks = atomic_load(&ctx->arena.live_blocks);
	return 0;
}
