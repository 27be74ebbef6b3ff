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
 * Who uses it: the process workers.  A graph with process workers lays
 * its rings, payload slots, output map and the CPU communicator's buffers
 * in one typed, sealed segment (compile/shared.c) that the driver hands
 * each worker process over a Unix socket (proc/proc.c), and the worker
 * attaches after checking its header (proc/agent.c).  tests/ring-stress.c
 * and perf/ring_pingpong.c run bare rings between processes over it;
 * tests/shm-segment.c covers the checks.
 *
 * Threads: a segment is a plain struct; create/map/close it from one thread.
 */
#ifndef CGR_SHM_H
#define CGR_SHM_H

#include <stddef.h>
#include <stdint.h>

struct cgr__shm {
	void *addr;  /* this process's mapping */
	size_t size; /* mapped bytes, a multiple of the page size */
	int fd;	     /* owned by the segment */
};

/*
 * Creates a segment of at least size bytes, zero-filled; name only labels
 * it in /proc/<pid>/fd (NULL: "cgr").  The fd is close-on-exec but survives
 * fork.  Every segment is sealed against resizing before it is mapped
 * (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL): whoever holds its fd, a
 * peer too, gets EPERM from ftruncate, so no mapping of it can lose its
 * pages (SIGBUS).  Returns 0, -EINVAL (size 0), or the negative errno of
 * memfd_create, ftruncate, the seals or mmap.  *out is set only on
 * success.
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

/*
 * Typed segments: what two processes share starts with this header, and
 * the file is sealed against resizing (F_SEAL_SHRINK, F_SEAL_GROW, as
 * every segment), so a peer can neither truncate a mapping under the
 * other (SIGBUS) nor make its layout lie about the file.  The attaching side checks everything
 * before it reads anything else: the seals, the file's size against the
 * header, magic, version, kind and the layout's parameters (geometry:
 * ring slots, slot bytes, ranks... by kind), and fails with -EPROTO
 * saying which, leaving nothing open.
 */
#define CGR__SHM_MAGIC 0x53524743u /* "CGRS" */
#define CGR__SHM_VERSION 1
#define CGR__SHM_NGEOM 5

struct cgr__shm_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t kind;	    /* the layout (the caller's enum, not 0) */
	uint32_t hdr_bytes; /* sizeof(struct cgr__shm_hdr) */
	uint32_t pad;
	uint64_t size;	    /* the segment's bytes (page-rounded) */
	uint64_t geom[CGR__SHM_NGEOM];
};

/* Creates a sealed segment of at least size bytes after the header (the
 * layout starts at addr + sizeof(struct cgr__shm_hdr), 64-byte aligned).
 * Returns 0 or a negative errno (-EINVAL: kind 0, size 0). */
int cgr__shm_create_typed(const char *name, size_t size, uint16_t kind,
			  const uint64_t geom[CGR__SHM_NGEOM],
			  struct cgr__shm *out);

/* Maps the typed segment behind fd (the caller keeps fd) if it is one of
 * kind with geometry geom (NULL: any; then read it from the header).
 * Returns 0, -EPROTO (why says what is wrong), or a negative errno. */
int cgr__shm_attach(int fd, uint16_t kind, const uint64_t geom[CGR__SHM_NGEOM],
		    struct cgr__shm *out, char *why, size_t len);

/*
 * Hand-off over a connected Unix socket (SOCK_SEQPACKET: one message per
 * call): a message of len bytes and up to CGR__SHM_MAX_FDS descriptors.
 * The receiver takes at most cap bytes and maxfds descriptors (close-on-
 * exec); a message or descriptor set that does not fit is -EPROTO with
 * every descriptor that came closed, as is one that is not a plain
 * message with rights.  One whose descriptors the kernel could not
 * install (the receiver's descriptor limit: MSG_CTRUNC alone) is
 * -EMFILE, with the message in msg and *len set, no descriptor kept.
 * Waits until the absolute deadline (-ETIMEDOUT);
 * a peer that hung up is -ECONNRESET.  Returns 0 or a negative errno.
 */
#define CGR__SHM_MAX_FDS 16
int cgr__shm_send(int sock, const void *msg, size_t len, const int *fds,
		  size_t nfds);
int cgr__shm_recv(int sock, void *msg, size_t cap, size_t *len, int *fds,
		  size_t maxfds, size_t *nfds, int64_t deadline);
/* Waits until fd is readable (or hung up) or the absolute deadline (one
 * already past still looks once): 0, -ETIMEDOUT or a negative errno. */
int cgr__fd_wait_readable(int fd, int64_t deadline);
/* The same for a, or b (ignored if negative): 0 (a is), 1 (b is). */
int cgr__fd_wait_either(int a, int b, int64_t deadline);

#endif
