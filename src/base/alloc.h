/*
 * base/alloc.h: cgr's allocator.  Each context owns one jemalloc arena;
 * every allocation cgr makes goes through it with mallocx/sdallocx (sized
 * free).  Sanitizer builds use the C library instead so that ASan sees
 * every block.  Live bytes are counted so tests can check for leaks.
 */
#ifndef CGR_BASE_ALLOC_H
#define CGR_BASE_ALLOC_H

#include <stdatomic.h>
#include <stddef.h>

struct cgr__arena {
	unsigned index;		   /* jemalloc arena index */
	int flags;		   /* MALLOCX_ARENA(index) | tcache none */
	atomic_size_t live_bytes;  /* allocated and not yet freed */
	atomic_size_t live_blocks;
};

int cgr__arena_init(struct cgr__arena *a);
void cgr__arena_fini(struct cgr__arena *a);

/* Zeroed, aligned to align (a power of two, at least 16). NULL on failure. */
void *cgr__alloc(struct cgr__arena *a, size_t size, size_t align);
/* size and align must be those given to cgr__alloc. NULL is a no-op. */
void cgr__free(struct cgr__arena *a, void *p, size_t size, size_t align);
char *cgr__strdup(struct cgr__arena *a, const char *s);
void cgr__strfree(struct cgr__arena *a, char *s);

#endif
