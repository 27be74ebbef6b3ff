/*
 * future/future.h: completion objects.
 *
 * A future is one 32-bit state word holding a generation and a state, plus
 * the result.  Whoever arms it gets the generation; completing, testing and
 * waiting name that generation, so a pooled future that was released and
 * re-armed is never mistaken for the old one (no ABA).  The state word is
 * also the futex a waiter parks on, with a doorbell counting sleepers so
 * that completion makes a system call only when somebody sleeps.
 */
#ifndef CGR_FUTURE_H
#define CGR_FUTURE_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/base.h"
#include "base/futex.h"
#include "reactor/reactor.h"

enum cgr__future_state {
	CGR__FUTURE_FREE = 0,
	CGR__FUTURE_PENDING = 1,
	CGR__FUTURE_DONE = 2,
	/* A completer claimed the generation and is writing the result:
	 * pending to everybody else.  Only one completer gets here, so the
	 * result has a single writer per generation. */
	CGR__FUTURE_COMPLETING = 3,
};

struct cgr_future {
	struct cgr__bell bell; /* bell.seq is not used as the state */
	_Atomic uint32_t word; /* generation << 2 | state */
	/* Written by the one completer between COMPLETING and DONE; atomic
	 * (relaxed) because a tester of an old generation may read it while
	 * a newer generation's completer writes it (it then re-checks the
	 * word and answers -ESTALE). */
	_Atomic int32_t result;
};

static inline uint32_t cgr__future_gen(uint32_t word)
{
	return word >> 2;
}

void cgr__future_init(struct cgr_future *f);

/* Arms a free (or done) future: returns the new generation. */
uint32_t cgr__future_arm(struct cgr_future *f);

/*
 * Completes generation gen with result (0 or negative).  Returns 0, or
 * -ESTALE if the future is not pending at gen (completed twice, or
 * released and re-armed).
 */
int cgr__future_complete(struct cgr_future *f, uint32_t gen, int result);

/*
 * Never blocks.  Returns 1 and *result when done, 0 while pending, -ESTALE
 * if gen is not the future's current generation.
 */
int cgr__future_test(const struct cgr_future *f, uint32_t gen, int *result);

/*
 * Waits until done or the absolute deadline.  Returns the result (0 or
 * negative), -ETIMEDOUT, or -ESTALE.  r may be NULL (driver threads).
 */
int cgr__future_wait(struct cgr_future *f, uint32_t gen, int64_t deadline,
		     struct cgr__reactor *r, int mode, int64_t spin_ns);

/* Ends generation gen: the future is free to arm again, and waiters still
 * parked on gen wake up with -ESTALE.  -ESTALE if gen is not current. */
int cgr__future_release(struct cgr_future *f, uint32_t gen);

#endif
