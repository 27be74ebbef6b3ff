/*
 * base/futex.h: futex system calls and the doorbell built on them.
 *
 * A doorbell is two 32-bit words that may live in shared memory: a sequence
 * the waker bumps, and a count of sleepers.  The sleeper registers first
 * (prepare), re-checks its condition, then sleeps on the sequence value it
 * read; the waker publishes its data, then (after a full fence) rings only
 * if somebody registered.  That is the store-buffer pattern: one of the two
 * sides always sees the other, so no wake-up is lost, and an awake consumer
 * costs the producer no system call.
 */
#ifndef CGR_BASE_FUTEX_H
#define CGR_BASE_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

/* Shared (not private) futexes: a doorbell may sit in memory mapped by two
 * processes. */
static inline int cgr__futex_wake(_Atomic uint32_t *addr, int n)
{
	long r = syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, n, NULL,
			 NULL, 0);
	return r < 0 ? -errno : (int)r;
}

/*
 * Sleeps while *addr == val, until woken or the absolute CLOCK_MONOTONIC
 * deadline (CGR_FOREVER: none).  Returns 0 (woken or value changed),
 * -ETIMEDOUT or -EINTR.
 */
static inline int cgr__futex_wait(_Atomic uint32_t *addr, uint32_t val,
				  int64_t deadline_ns)
{
	struct timespec ts, *tsp = NULL;
	long r;

	if (deadline_ns != CGR_FOREVER) {
		if (deadline_ns < 0)
			deadline_ns = 0;
		ts.tv_sec = deadline_ns / 1000000000;
		ts.tv_nsec = deadline_ns % 1000000000;
		tsp = &ts;
	}
	/* FUTEX_WAIT_BITSET takes an absolute deadline on CLOCK_MONOTONIC. */
	r = syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_BITSET, val, tsp,
		    NULL, FUTEX_BITSET_MATCH_ANY);
	if (r == 0)
		return 0;
	if (errno == EAGAIN)
		return 0;
	return -errno;
}

struct cgr__bell {
	_Atomic uint32_t seq;
	_Atomic uint32_t sleepers;
};

static inline void cgr__bell_init(struct cgr__bell *b)
{
	atomic_init(&b->seq, 0);
	atomic_init(&b->sleepers, 0);
}

/*
 * Registers a sleeper and returns the sequence to sleep on.  The seq_cst
 * read-modify-write orders the registration before the caller's re-check of
 * its condition (pairs with the fence in cgr__bell_ring).
 */
static inline uint32_t cgr__bell_prepare(struct cgr__bell *b)
{
	atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
	return atomic_load_explicit(&b->seq, memory_order_seq_cst);
}

static inline void cgr__bell_cancel(struct cgr__bell *b)
{
	atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_relaxed);
}

/* Wakes every sleeper, unconditionally (for teardown and rare events). */
static inline void cgr__bell_ring_force(struct cgr__bell *b)
{
	atomic_fetch_add_explicit(&b->seq, 1, memory_order_seq_cst);
	cgr__futex_wake(&b->seq, INT_MAX);
}

/*
 * Called after publishing data.  The fence orders the publication before
 * the read of sleepers (pairs with the RMW in cgr__bell_prepare).
 */
static inline void cgr__bell_ring(struct cgr__bell *b)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&b->sleepers, memory_order_relaxed) != 0)
		cgr__bell_ring_force(b);
}

#endif
