/*
 * ring/ring.h: single-producer single-consumer ring of fixed-size messages.
 *
 * The shared part (header + slots) lives in caller memory: size it with
 * cgr__ring_memsize, initialise it once with cgr__ring_init, then each side
 * attaches its own local handle with cgr__ring_attach.  The shared part holds
 * offsets and indices only, never pointers, so two processes may map it at
 * different addresses.  Each slot carries its own sequence number, so a
 * message of up to CGR__RING_INLINE_MAX bytes costs one cache-line transfer.
 *
 * What the library uses: chan/ uses memsize, init, attach, enqueue, peek
 * and consume (a channel's reader waits on its own doorbell, not the
 * ring's), for thread and process workers alike (a process worker's rings
 * live in its graph's shared segment).  Count, the bulk and burst calls,
 * dequeue, wait and notify (parking on the ring's own bells) and init_at
 * are not used by the library today; tests/ring-*.c and
 * perf/ring_pingpong.c cover them.
 *
 * Threads: one producer handle and one consumer handle per ring; each handle
 * is used by one thread at a time.  No call blocks except cgr__ring_wait, and
 * only cgr__ring_wait and cgr__ring_notify (when the other side sleeps) make a
 * system call.
 *
 * Protocol: the slot of position q holds seq == q + 1 once the message of
 * position q is in it (and q - count + 1, a lap behind, before).  The
 * consumer finds messages by that sequence alone and never reads the
 * producer's index; it frees slots by publishing its position cons_pos and
 * never writes a slot, so each message line moves producer to consumer and
 * nothing else moves.  The producer keeps a cached copy of cons_pos and
 * reads the shared one only when the cache says the ring is full, about
 * once a lap.  (A Vyukov-style free marker in the slot, written by the
 * consumer, measured ~10% slower round trips: one more line transfer.)
 */
#ifndef CGR_RING_H
#define CGR_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/futex.h"

#define CGR__RING_MAGIC 0x63677252u /* "cgrR" */
#define CGR__RING_VERSION 1u
#define CGR__RING_MAX_COUNT (1u << 24)
#define CGR__RING_MAX_ESIZE 4096u
/* Largest message whose slot (payload + sequence) fits one cache line. */
#define CGR__RING_INLINE_MAX 56u

enum cgr__ring_role {
	CGR__RING_PRODUCER = 1,
	CGR__RING_CONSUMER = 2,
};

/* Bytes in front of the payload in each slot: the slot's sequence. */
#define CGR__RING_SLOT_HDR 8u

/*
 * The shared header, at the start of the ring's memory, followed by the
 * slots at slots_off.  Offsets and indices only, never pointers.  Each line
 * has one writer: line 0 is written once by cgr__ring_init, line 1 by the
 * producer, line 2 by the consumer; the bells have a line each so a sleeper
 * registering never disturbs the lines the hot path touches.
 */
struct cgr__ring_shared {
	/* line 0: geometry, read-only after init */
	uint32_t magic;	    /* CGR__RING_MAGIC, stored last by init */
	uint32_t version;   /* CGR__RING_VERSION */
	uint32_t count;	    /* slots, a power of two */
	uint32_t esize;	    /* message bytes */
	uint32_t slot_size; /* bytes per slot, a multiple of 64 */
	uint32_t flags;	    /* 0 */
	uint64_t memsize;   /* cgr__ring_memsize(count, esize) */
	uint64_t slots_off; /* offset of slot 0 from this header */
	uint32_t check;	    /* hash of the fields above (but magic) */
	/* line 1: the producer's next position (for attach and count only) */
	_Atomic uint64_t prod_pos __attribute__((aligned(64)));
	/* line 2: the consumer's next position: slots below cons_pos + count
	 * are free for the producer */
	_Atomic uint64_t cons_pos __attribute__((aligned(64)));
	/* line 3: the consumer parks here when empty */
	struct cgr__bell cons_bell __attribute__((aligned(64)));
	/* line 4: the producer parks here when full */
	struct cgr__bell prod_bell __attribute__((aligned(64)));
};

/* Local handle of one side.  Plain struct so it can be embedded. */
struct cgr__ring {
	struct cgr__ring_shared *sh; /* shared header (this mapping) */
	unsigned char *slots;	    /* first slot (this mapping) */
	uint64_t pos;		    /* next position this side uses */
	uint64_t peer;		    /* producer: cons_pos as last read */
	uint32_t mask;		    /* count - 1 */
	uint32_t esize;		    /* message bytes */
	uint32_t slot_size;	    /* bytes per slot, multiple of 64 */
	int role;
};

/*
 * Bytes of shared memory for count messages of esize bytes.  0 if count is
 * 0, not a power of two or above CGR__RING_MAX_COUNT, or esize is 0 or above
 * CGR__RING_MAX_ESIZE.  Any thread.
 */
size_t cgr__ring_memsize(uint32_t count, uint32_t esize);

/*
 * Initialises the shared part in mem (64-byte aligned, memsize bytes): the
 * ring is empty, both positions are 0.  flags must be 0.  Returns 0 or
 * -EINVAL (bad count/esize/flags, memory too small or misaligned), and then
 * writes nothing.  Call it before either side attaches, from one thread.
 */
int cgr__ring_init(void *mem, size_t memsize, uint32_t count, uint32_t esize,
		  unsigned flags);

/* As cgr__ring_init, with both indices starting at start (for tests of the
 * index wrap). */
int cgr__ring_init_at(void *mem, size_t memsize, uint32_t count,
		     uint32_t esize, unsigned flags, uint64_t start);

/*
 * Attaches a local handle for role to an initialised ring.  Validates the
 * shared header (magic, version, sizes against memsize and a hash of the
 * geometry, indices in range, every slot's sequence consistent with the
 * indices): CGR_ECORRUPT if anything is off, -EINVAL for a NULL or
 * misaligned argument or a bad role.  Changes nothing in the shared memory,
 * and *r only on success.  The other side may already be running (a
 * producer caught half-way through an enqueue is accepted by a consumer
 * attaching; by a producer attaching it is corrupt, its own side cannot be
 * half done).  Slots do not record whether a message was consumed, so
 * cons_pos is only checked to lie within count below prod_pos.
 * Reads every slot: O(count).  Any thread; at most one handle per role.
 */
int cgr__ring_attach(struct cgr__ring *r, void *mem, size_t memsize, int role);

/*
 * Producer: copies one message of len <= esize bytes (the rest of the slot
 * is zero-filled).  Returns 0, -EAGAIN when full, -EMSGSIZE when too long,
 * -EINVAL on a consumer handle.  Does not wake the consumer: call
 * cgr__ring_notify after a batch.
 */
int cgr__ring_enqueue(struct cgr__ring *r, const void *msg, size_t len);

/* Producer: bulk, all or nothing, of n messages of esize bytes each
 * (contiguous in msgs).  Returns n or 0. */
unsigned cgr__ring_enqueue_bulk(struct cgr__ring *r, const void *msgs,
				unsigned n);
/* Producer: burst, as many of n as fit.  Returns how many. */
unsigned cgr__ring_enqueue_burst(struct cgr__ring *r, const void *msgs,
				 unsigned n);

/* Consumer: copies the oldest message (esize bytes) out.  0, -EAGAIN when
 * empty, -EINVAL on a producer handle. */
int cgr__ring_dequeue(struct cgr__ring *r, void *msg);
/* Consumer: up to n messages into msgs (esize stride).  Returns how many. */
unsigned cgr__ring_dequeue_burst(struct cgr__ring *r, void *msgs, unsigned n);
/* Consumer: bulk, all n messages or none.  Returns n or 0. */
unsigned cgr__ring_dequeue_bulk(struct cgr__ring *r, void *msgs, unsigned n);

/* Consumer: the oldest message in place (esize bytes, 8-byte aligned), or
 * NULL when empty.  It stays in the ring until cgr__ring_consume. */
const void *cgr__ring_peek(struct cgr__ring *r);
/* Consumer: frees the message cgr__ring_peek returned; a no-op when there is
 * none. */
void cgr__ring_consume(struct cgr__ring *r);

/* Whether this side can go on now: a message waits (consumer) or a slot is
 * free (producer).  Never blocks. */
bool cgr__ring_ready(const struct cgr__ring *r);

/* Messages the ring holds now (approximate while the other side runs). */
uint32_t cgr__ring_count(const struct cgr__ring *r);
uint32_t cgr__ring_capacity(const struct cgr__ring *r);

/*
 * Doorbells in the shared header: the consumer parks on the consumer bell
 * when empty, the producer on the producer bell when full.  cgr__ring_notify
 * wakes the other side if it registered as a sleeper (one system call then,
 * none otherwise).
 */
struct cgr__bell *cgr__ring_bell(struct cgr__ring *r, int role);
void cgr__ring_notify(struct cgr__ring *r);

/*
 * Parks this side on its bell until cgr__ring_ready holds, or the absolute
 * CLOCK_MONOTONIC deadline (CGR_FOREVER: none) passes.  Returns 0 (ready),
 * -ETIMEDOUT or -EINTR.  Blocks; the other side must call cgr__ring_notify
 * after it enqueues (or dequeues) for this to wake early.
 */
int cgr__ring_wait(struct cgr__ring *r, int64_t deadline_ns);

#endif
