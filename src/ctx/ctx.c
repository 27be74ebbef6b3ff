/*
 * ctx/ctx.c: a new context (the public cgr_ctx_create, which also
 * records what the layers above are to know, is drive/ctx_create.c), its
 * references, and the per-context state of higher layers (see ctx.h).
 */
#include <errno.h>
#include <string.h>

#include "ctx/ctx.h"

int cgr__ctx_new(const cgr_ctx_params *p, cgr_ctx **out)
{
	cgr_ctx_params prm = *p;
	cgr_ctx *ctx;
	struct cgr__arena arena;
	int ret;

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
	atomic_init(&ctx->arena.live_blocks, atomic_load(&arena.live_blocks));
	ctx->log.fn = prm.log_fn;
	ctx->log.arg = prm.log_arg;
	ctx->log.level = prm.log_level;
	ctx->flags = prm.flags;
	ctx->exports = prm.exports;
	atomic_init(&ctx->refs, 1);
	atomic_init(&ctx->uring_fallback_logged, false);
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->ext_lock, NULL);
	pthread_mutex_init(&ctx->comm_lock, NULL);
	pthread_mutex_init(&ctx->graph_lock, NULL);
	{
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&ctx->comm_cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	*out = ctx;
	return 0;
}

static void ctx_free(cgr_ctx *ctx)
{
	struct cgr__arena arena = { 0 };

	if (ctx->release_workers != NULL)
		ctx->release_workers(ctx);
	for (int i = CGR__CTX_EXT; i-- > 0;)
		if (atomic_load(&ctx->ext[i].key) != NULL &&
		    ctx->ext[i].fini != NULL)
			ctx->ext[i].fini(ctx, ctx->ext[i].p);
	pthread_mutex_destroy(&ctx->lock);
	pthread_mutex_destroy(&ctx->ext_lock);
	pthread_mutex_destroy(&ctx->comm_lock);
	pthread_mutex_destroy(&ctx->graph_lock);
	pthread_cond_destroy(&ctx->comm_cond);
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
	for (size_t i = 0; i < CGR__CTX_EXT && x == NULL; i++) {
		/* Relaxed: entries are written under the lock we hold. */
		const void *k = atomic_load_explicit(&ctx->ext[i].key,
						     memory_order_relaxed);
		if (k == key || k == NULL)
			x = &ctx->ext[i];
	}
	if (x == NULL) {
		ret = -ENOSPC;
	} else if (atomic_load_explicit(&x->key, memory_order_relaxed) ==
		   NULL) {
		void *p = NULL;
		ret = make(ctx, &p);
		if (ret == 0) {
			x->p = p;
			x->fini = fini;
			/* X0: publishes p and fini; pairs with X1. */
			atomic_store_explicit(&x->key, key,
					      memory_order_release);
		}
	}
	if (ret == 0)
		*out = x->p;
	pthread_mutex_unlock(&ctx->ext_lock);
	return ret;
}

void *cgr__ctx_state_get(cgr_ctx *ctx, const void *key)
{
	for (size_t i = 0; i < CGR__CTX_EXT; i++) {
		/* X1: acquire: pairs with X0. */
		const void *k = atomic_load_explicit(&ctx->ext[i].key,
						     memory_order_acquire);
		if (k == NULL)
			return NULL; /* entries fill in order */
		if (k == key)
			return ctx->ext[i].p;
	}
	return NULL;
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
