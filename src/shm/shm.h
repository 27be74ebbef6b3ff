/*
 * shm/shm.h: shared memory segments backed by a memfd.
 *
 * A segment is an anonymous file (memfd) of a page-rounded size, mapped
 * MAP_SHARED.  Another process reaches it through the fd (inherited across
 * fork, or passed over a Unix socket) and maps it with cgr__shm_map,
 * usually at a different address: what lives inside must hold offsets,
 * never pointers (see ring/ring.h).  The segment owns its fd and mapping;
 * the memory goes away when the last fd and mapping are gone, so nothing is
 * left behind when a process dies.
 *
 * Who uses it: nothing in the library yet; it is the ground the process
 * workers stand on (rings, payload slots and the CPU communicator's buffers
 * in shared memory handed to a worker process).  tests/ring-stress.c and
 * perf/ring_pingpong.c run rings between processes over it today.
 *
 * Threads: a segment is a plain struct; create/map/close it from one thread.
 */
#ifndef CGR_SHM_H
#define CGR_SHM_H

#include <stddef.h>

struct cgr__shm {
	void *addr;  /* this process's mapping */
	size_t size; /* mapped bytes, a multiple of the page size */
	int fd;	     /* owned by the segment */
};

/*
 * Creates a segment of at least size bytes, zero-filled; name only labels
 * it in /proc/<pid>/fd (NULL: "cgr").  The fd is close-on-exec but survives
 * fork.  Returns 0, -EINVAL (size 0), or the negative errno of
 * memfd_create, ftruncate or mmap.  *out is set only on success.
 */
int cgr__shm_create(const char *name, size_t size, struct cgr__shm *out);

/*
 * Maps the segment behind fd (which the caller keeps: the segment holds a
 * duplicate).  size 0 maps the whole file; otherwise size must not exceed
 * the file's size (-EINVAL).  The mapping lands wherever the kernel puts
 * it, in general not where other mappings of the same fd are.  Returns 0
 * or a negative errno; *out is set only on success.
 */
int cgr__shm_map(int fd, size_t size, struct cgr__shm *out);

/* Unmaps the segment but keeps its fd open (to map it again, or to hand it
 * on).  Idempotent. */
void cgr__shm_unmap(struct cgr__shm *s);

/* Unmaps the segment and closes its fd.  Idempotent; NULL is a no-op. */
void cgr__shm_close(struct cgr__shm *s);

#endif
