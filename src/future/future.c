/*
 * future/future.c: generation-tagged completion objects (see future.h).
 *
 * States of one generation: PENDING (armed) -> COMPLETING (one completer
 * claimed it and writes the result) -> DONE; release makes it FREE from
 * PENDING or DONE.  Every transition is on the one state word, so a stale
 * caller naming an old generation fails its compare or its check.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>

#include "future/future.h"

#define CGR__FWORD(gen, st) (((gen) << 2) | (uint32_t)(st))

void cgr__future_init(struct cgr_future *f)
{
	cgr__bell_init(&f->bell);
	atomic_init(&f->word, CGR__FWORD(0u, CGR__FUTURE_FREE));
	atomic_init(&f->result, 0);
}

uint32_t cgr__future_arm(struct cgr_future *f)
{
	uint32_t w = atomic_load_explicit(&f->word, memory_order_relaxed);
	uint32_t gen = (cgr__future_gen(w) + 1) & 0x3fffffffu;

	/* A0: release: whoever sees the new generation (T1) also sees what
	 * the owner wrote before arming. */
	atomic_store_explicit(&f->word, CGR__FWORD(gen, CGR__FUTURE_PENDING),
			      memory_order_release);
	return gen;
}

/* Wakes the waiters parked on the state word, if any.  The fence orders
 * the caller's change of the word before the read of sleepers; it pairs
 * with the registration W1 in cgr__future_wait (store-buffer pattern:
 * either the waiter sees the new word or we see its registration). */
static void cgr__future_wake(struct cgr_future *f)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&f->bell.sleepers, memory_order_relaxed))
		cgr__futex_wake(&f->word, INT_MAX);
}

int cgr__future_complete(struct cgr_future *f, uint32_t gen, int result)
{
	uint32_t want = CGR__FWORD(gen, CGR__FUTURE_PENDING);

	/* C0: claim the generation.  One completer wins, so the result has
	 * one writer: a second (or stale) completer fails here, before it
	 * could touch the result. */
	if (!atomic_compare_exchange_strong_explicit(
		&f->word, &want, CGR__FWORD(gen, CGR__FUTURE_COMPLETING),
		memory_order_relaxed, memory_order_relaxed))
		return -ESTALE;
	/* C1: orders the claim before the result store, for a tester of an
	 * older generation that reads this result and then re-checks the
	 * word (pairs with T2). */
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&f->result, result, memory_order_relaxed);
	/* C2: publishes the result and everything the completer wrote
	 * before; pairs with the acquire load T1 in cgr__future_test. */
	atomic_store_explicit(&f->word, CGR__FWORD(gen, CGR__FUTURE_DONE),
			      memory_order_release);
	cgr__future_wake(f);
	return 0;
}

int cgr__future_test(const struct cgr_future *f, uint32_t gen, int *result)
{
	/* T1: pairs with C2 (and A0). */
	uint32_t w = atomic_load_explicit(&f->word, memory_order_acquire);
	int res;

	if (cgr__future_gen(w) != gen || (w & 3u) == CGR__FUTURE_FREE)
		return -ESTALE;
	if ((w & 3u) != CGR__FUTURE_DONE)
		return 0;
	res = atomic_load_explicit(&f->result, memory_order_relaxed);
	/* T2: if the owner released and re-armed meanwhile and a newer
	 * completer overwrote the result, the word has changed (pairs with
	 * C1): answer -ESTALE rather than another generation's result. */
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&f->word, memory_order_relaxed) != w)
		return -ESTALE;
	if (result != NULL)
		*result = res;
	return 1;
}

int cgr__future_wait(struct cgr_future *f, uint32_t gen, int64_t deadline,
		     struct cgr__reactor *r, int mode, int64_t spin_ns)
{
	int64_t now = cgr__now_ns(), spin_end = now;
	int res = 0, t;
	unsigned i = 0;

	(void)r;
	if (mode != CGR_WAIT_BLOCK && spin_ns > 0)
		spin_end =
		    spin_ns < CGR_FOREVER - now ? now + spin_ns : CGR_FOREVER;
	for (;;) {
		t = cgr__future_test(f, gen, &res);
		if (t != 0)
			return t < 0 ? t : res;
		cgr__cpu_relax();
		if ((++i & 63) != 0)
			continue;
		now = cgr__now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		if (mode == CGR_WAIT_BUSY || now < spin_end) {
			if ((i & 1023) == 0)
				sched_yield();
			continue;
		}
		/* Park on the state word: it changes exactly when the future
		 * completes, is released or is re-armed.  W1: register, then
		 * re-check (pairs with the fence in cgr__future_wake). */
		atomic_fetch_add_explicit(&f->bell.sleepers, 1,
					  memory_order_seq_cst);
		uint32_t w =
		    atomic_load_explicit(&f->word, memory_order_seq_cst);
		if (w == CGR__FWORD(gen, CGR__FUTURE_PENDING) ||
		    w == CGR__FWORD(gen, CGR__FUTURE_COMPLETING))
			cgr__futex_wait(&f->word, w, deadline);
		atomic_fetch_sub_explicit(&f->bell.sleepers, 1,
					  memory_order_relaxed);
	}
}

int cgr__future_release(struct cgr_future *f, uint32_t gen)
{
	uint32_t w = atomic_load_explicit(&f->word, memory_order_relaxed);
	unsigned i = 0;

	for (;;) {
		if (cgr__future_gen(w) != gen || (w & 3u) == CGR__FUTURE_FREE)
			return -ESTALE;
		if ((w & 3u) == CGR__FUTURE_COMPLETING) {
			/* A completer is two stores away from DONE; let it
			 * run if it was preempted there. */
			if ((++i & 63) == 0)
				sched_yield();
			else
				cgr__cpu_relax();
			w = atomic_load_explicit(&f->word,
						 memory_order_relaxed);
			continue;
		}
		/* R0: a compare, not a store: a completer's claim (C0) and
		 * this release cannot both succeed. */
		if (atomic_compare_exchange_weak_explicit(
			&f->word, &w, CGR__FWORD(gen, CGR__FUTURE_FREE),
			memory_order_release, memory_order_relaxed))
			break;
	}
	/* Waiters still parked on gen wake up and answer -ESTALE. */
	cgr__future_wake(f);
	return 0;
}
