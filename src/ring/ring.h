/*
 * ring/ring.h: single-producer single-consumer ring of fixed-size messages.
 *
 * The shared part (header + slots) lives in caller memory: size it with
 * cgr_ring_memsize, initialise it once with cgr_ring_init, then each side
 * attaches its own local handle with cgr_ring_attach.  The shared part holds
 * offsets and indices only, never pointers, so two processes may map it at
 * different addresses.  Each slot carries its own sequence number, so a
 * message of up to CGR_RING_INLINE_MAX bytes costs one cache-line transfer.
 *
 * Threads: one producer handle and one consumer handle per ring; each handle
 * is used by one thread at a time.
 */
#ifndef CGR_RING_H
#define CGR_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/futex.h"

#define CGR_RING_MAGIC 0x63677252u /* "cgrR" */
#define CGR_RING_VERSION 1u
#define CGR_RING_MAX_COUNT (1u << 24)
#define CGR_RING_MAX_ESIZE 4096u
/* Largest message whose slot (payload + sequence) fits one cache line. */
#define CGR_RING_INLINE_MAX 56u

enum cgr_ring_role {
	CGR_RING_PRODUCER = 1,
	CGR_RING_CONSUMER = 2,
};

/* Local handle of one side.  Plain struct so it can be embedded. */
struct cgr_ring {
	struct cgr_ring_shared *sh; /* shared header (this mapping) */
	unsigned char *slots;	    /* first slot (this mapping) */
	uint64_t pos;		    /* next position this side uses */
	uint32_t mask;		    /* count - 1 */
	uint32_t esize;		    /* message bytes */
	uint32_t slot_size;	    /* bytes per slot, multiple of 64 */
	int role;
};

/*
 * Bytes of shared memory for count messages of esize bytes.  0 if count is
 * 0, not a power of two or above CGR_RING_MAX_COUNT, or esize is 0 or above
 * CGR_RING_MAX_ESIZE.
 */
size_t cgr_ring_memsize(uint32_t count, uint32_t esize);

/*
 * Initialises the shared part in mem (64-byte aligned, memsize bytes).
 * flags must be 0.  Returns 0 or -EINVAL (bad count/esize/flags, memory
 * too small or misaligned).
 */
int cgr_ring_init(void *mem, size_t memsize, uint32_t count, uint32_t esize,
		  unsigned flags);

/* As cgr_ring_init, with both indices starting at start (for tests of the
 * index wrap). */
int cgr_ring_init_at(void *mem, size_t memsize, uint32_t count,
		     uint32_t esize, unsigned flags, uint64_t start);

/*
 * Attaches a local handle for role to an initialised ring.  Validates the
 * shared header (magic, version, sizes against memsize, indices in range):
 * CGR_ECORRUPT if anything is off, -EINVAL for a bad role.  Changes nothing
 * in the shared memory.
 */
int cgr_ring_attach(struct cgr_ring *r, void *mem, size_t memsize, int role);

/*
 * Producer: copies one message of len <= esize bytes (the rest of the slot
 * is zero-filled).  Returns 0, -EAGAIN when full, -EMSGSIZE when too long.
 * Does not wake the consumer: call cgr_ring_notify after a batch.
 */
int cgr_ring_enqueue(struct cgr_ring *r, const void *msg, size_t len);

/* Producer: bulk, all or nothing, of n messages of esize bytes each
 * (contiguous in msgs).  Returns n or 0. */
unsigned cgr_ring_enqueue_bulk(struct cgr_ring *r, const void *msgs,
			       unsigned n);
/* Producer: burst, as many of n as fit.  Returns how many. */
unsigned cgr_ring_enqueue_burst(struct cgr_ring *r, const void *msgs,
				unsigned n);

/* Consumer: copies the oldest message (esize bytes) out.  0 or -EAGAIN. */
int cgr_ring_dequeue(struct cgr_ring *r, void *msg);
/* Consumer: up to n messages into msgs (esize stride).  Returns how many. */
unsigned cgr_ring_dequeue_burst(struct cgr_ring *r, void *msgs, unsigned n);

/* Consumer: the oldest message in place, or NULL when empty.  It stays in
 * the ring until cgr_ring_consume. */
const void *cgr_ring_peek(struct cgr_ring *r);
/* Consumer: frees the message cgr_ring_peek returned. */
void cgr_ring_consume(struct cgr_ring *r);

/* Messages the ring holds now (approximate while the other side runs). */
uint32_t cgr_ring_count(const struct cgr_ring *r);
uint32_t cgr_ring_capacity(const struct cgr_ring *r);

/*
 * Doorbells in the shared header: the consumer parks on the consumer bell
 * when empty, the producer on the producer bell when full.  cgr_ring_notify
 * wakes the other side if it registered as a sleeper (one system call then,
 * none otherwise).
 */
struct cgr_bell *cgr_ring_bell(struct cgr_ring *r, int role);
void cgr_ring_notify(struct cgr_ring *r);

#endif
