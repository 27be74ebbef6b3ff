/*
 * base/alloc.c: per-context jemalloc arena (see alloc.h).
 */
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <stdio.h>

#include <jemalloc/jemalloc.h>

#include "base/alloc.h"
#include "base/base.h"

int cgr__arena_init(struct cgr__arena *a)
{
	atomic_init(&a->live_bytes, 0);
	atomic_init(&a->live_blocks, 0);
#ifdef CGR_SANITIZE
	a->index = 0;
	a->flags = 0;
	return 0;
#else
	unsigned idx;
	size_t sz = sizeof(idx);
	if (mallctl("arenas.create", &idx, &sz, NULL, 0) != 0)
		return -ENOMEM;
	a->index = idx;
	/* No thread cache: blocks go straight back to this arena, so the
	 * arena can be destroyed with the context. */
	a->flags = (int)(MALLOCX_ARENA(idx) | MALLOCX_TCACHE_NONE);
	return 0;
#endif
}

void cgr__arena_fini(struct cgr__arena *a)
{
#ifndef CGR_SANITIZE
	char name[64];
	snprintf(name, sizeof(name), "arena.%u.destroy", a->index);
	mallctl(name, NULL, NULL, NULL, 0);
#else
	(void)a;
#endif
}

void *cgr__alloc(struct cgr__arena *a, size_t size, size_t align)
{
	void *p;

	if (size == 0)
		size = 1;
	if (align < 16)
		align = 16;
	if (size > SIZE_MAX - align)
		return NULL; /* rounded up below, it would wrap */
#ifdef CGR_SANITIZE
	if (posix_memalign(&p, align, CGR__ALIGN_UP(size, align)) != 0)
		return NULL;
	memset(p, 0, size);
#else
	p = mallocx(size, a->flags | MALLOCX_ALIGN(align) | MALLOCX_ZERO);
	if (p == NULL)
		return NULL;
#endif
	atomic_fetch_add_explicit(&a->live_bytes, size, memory_order_relaxed);
	atomic_fetch_add_explicit(&a->live_blocks, 1, memory_order_relaxed);
	return p;
}

void cgr__free(struct cgr__arena *a, void *p, size_t size, size_t align)
{
	if (p == NULL)
		return;
	if (size == 0)
		size = 1;
	if (align < 16)
		align = 16;
	atomic_fetch_sub_explicit(&a->live_bytes, size, memory_order_relaxed);
	atomic_fetch_sub_explicit(&a->live_blocks, 1, memory_order_relaxed);
#ifdef CGR_SANITIZE
	free(p);
#else
	sdallocx(p, size, a->flags | MALLOCX_ALIGN(align));
#endif
}

char *cgr__strdup(struct cgr__arena *a, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = cgr__alloc(a, n, 16);
	if (d != NULL)
		memcpy(d, s, n);
	return d;
}

void cgr__strfree(struct cgr__arena *a, char *s)
{
	if (s != NULL)
		cgr__free(a, s, strlen(s) + 1, 16);
}
