/*
 * future/future.c: generation-tagged completion objects (see future.h).
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
	f->result = 0;
}

uint32_t cgr__future_arm(struct cgr_future *f)
{
	uint32_t w = atomic_load_explicit(&f->word, memory_order_relaxed);
	uint32_t gen = (cgr__future_gen(w) + 1) & 0x3fffffffu;

	f->result = 0;
	/* Release: a waiter that sees the new generation also sees the
	 * cleared result (pairs with the acquire in cgr__future_test). */
	atomic_store_explicit(&f->word, CGR__FWORD(gen, CGR__FUTURE_PENDING),
			      memory_order_release);
	return gen;
}

int cgr__future_complete(struct cgr_future *f, uint32_t gen, int result)
{
	uint32_t want = CGR__FWORD(gen, CGR__FUTURE_PENDING);

	if (atomic_load_explicit(&f->word, memory_order_relaxed) != want)
		return -ESTALE;
	f->result = result;
	/* C1: the CAS publishes result; pairs with the acquire loads in
	 * cgr__future_test (T1). */
	if (!atomic_compare_exchange_strong_explicit(
		    &f->word, &want, CGR__FWORD(gen, CGR__FUTURE_DONE),
		    memory_order_acq_rel, memory_order_relaxed))
		return -ESTALE;
	/* Wake waiters parked on the state word itself. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&f->bell.sleepers, memory_order_relaxed))
		cgr__futex_wake(&f->word, INT_MAX);
	return 0;
}

int cgr__future_test(const struct cgr_future *f, uint32_t gen, int *result)
{
	/* T1: pairs with C1. */
	uint32_t w = atomic_load_explicit(&f->word, memory_order_acquire);

	if (cgr__future_gen(w) != gen || (w & 3u) == CGR__FUTURE_FREE)
		return -ESTALE;
	if ((w & 3u) != CGR__FUTURE_DONE)
		return 0;
	if (result != NULL)
		*result = f->result;
	return 1;
}

int cgr__future_wait(struct cgr_future *f, uint32_t gen, int64_t deadline,
		     struct cgr_reactor *r, int mode, int64_t spin_ns)
{
	int64_t spin_end = cgr__now_ns() + (mode == CGR_WAIT_BLOCK ? 0 : spin_ns);
	int res = 0, t;
	unsigned i = 0;

	(void)r;
	for (;;) {
		t = cgr__future_test(f, gen, &res);
		if (t != 0)
			return t < 0 ? t : res;
		cgr__cpu_relax();
		if ((++i & 63) != 0)
			continue;
		int64_t now = cgr__now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		if (mode == CGR_WAIT_BUSY || now < spin_end) {
			if ((i & 1023) == 0)
				sched_yield();
			continue;
		}
		/* Park on the state word: it changes exactly when the future
		 * completes or is re-armed. */
		atomic_fetch_add_explicit(&f->bell.sleepers, 1,
					  memory_order_seq_cst);
		uint32_t w = atomic_load_explicit(&f->word,
						  memory_order_seq_cst);
		if (w == CGR__FWORD(gen, CGR__FUTURE_PENDING))
			cgr__futex_wait(&f->word, w, deadline);
		atomic_fetch_sub_explicit(&f->bell.sleepers, 1,
					  memory_order_relaxed);
	}
}

int cgr__future_release(struct cgr_future *f, uint32_t gen)
{
	uint32_t w = atomic_load_explicit(&f->word, memory_order_relaxed);

	if (cgr__future_gen(w) != gen || (w & 3u) == CGR__FUTURE_FREE)
		return -ESTALE;
	atomic_store_explicit(&f->word, CGR__FWORD(gen, CGR__FUTURE_FREE),
			      memory_order_release);
	return 0;
}
