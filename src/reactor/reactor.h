/*
 * reactor/reactor.h: the one place a cgr thread waits.
 *
 * A reactor belongs to one thread (a worker's).  To wait for a condition it
 * spins for a while (adaptive mode), then registers on a doorbell, re-checks
 * and parks: on io_uring with a FUTEX_WAIT request (plus a linked timeout
 * for the deadline), or, where io_uring_setup is refused, on the futex
 * system call.  Timers fire from the same loop.  A NULL reactor parks with
 * the futex system call: that is how driver threads wait.
 */
#ifndef CGR_REACTOR_H
#define CGR_REACTOR_H

#include <stdbool.h>
#include <stdint.h>

#include <liburing.h>

#include "base/base.h"
#include "base/futex.h"

#define CGR_REACTOR_MAX_TIMERS 32
#define CGR_REACTOR_MAX_WATCHES 16

typedef void (*cgr__timer_fn)(void *arg);

/* A watched process (its pidfd): fn(arg) once it has exited. */
struct cgr__watch {
	int fd;
	bool armed; /* io_uring: its POLL_ADD is outstanding */
	bool fired; /* seen gone, fn not called yet */
	cgr__timer_fn fn; /* NULL: slot free */
	void *arg;
	uint64_t id;
};

struct cgr__timer {
	int64_t deadline; /* 0: slot free */
	cgr__timer_fn fn;
	void *arg;
	uint64_t id;
};

struct cgr_reactor {
	struct io_uring ring;
	bool uring;	/* false: futex fallback */
	int uring_err;	/* why io_uring was not used (negative errno) */
	uint64_t next_timer_id;
	struct cgr__timer timers[CGR_REACTOR_MAX_TIMERS];
	struct cgr__watch watches[CGR_REACTOR_MAX_WATCHES];
	unsigned nwatches;
	uint64_t next_watch_id;
	int64_t watch_at; /* a spin looks at the watches from then on */
	/* Device work the reactor polls while it waits (NULL: none): poll
	 * advances it (a worker's NCCL collectives, exec/launch.c) and says
	 * whether some is still pending; then a park is bounded (2 us,
	 * doubling to 200 us), since a device cannot ring a doorbell. */
	bool (*poll)(void *arg);
	void *poll_arg;
	/* Statistics, owner thread only. */
	uint64_t parks;
	uint64_t spins;
};

enum cgr__reactor_flags {
	CGR__REACTOR_NO_URING = 1u << 0,
};

/* On the owner thread.  Never fails: io_uring refusal, or a kernel whose
 * io_uring lacks FUTEX_WAIT (before 6.7: -EOPNOTSUPP), selects the futex
 * fallback (r->uring false, r->uring_err says why). */
void cgr__reactor_init(struct cgr_reactor *r, unsigned flags);
void cgr__reactor_fini(struct cgr_reactor *r);

/*
 * Parks on bell b (after cgr__bell_prepare returned seq) until the bell
 * rings or the absolute deadline.  The caller cancels its registration
 * afterwards.  Returns 0 or -ETIMEDOUT (or another negative errno).
 */
int cgr__reactor_park(struct cgr_reactor *r, struct cgr_bell *b,
		      uint32_t seq, int64_t deadline);

typedef bool (*cgr__ready_fn)(void *arg);

/*
 * Waits until ready(arg) is true, *cancel becomes non-zero, or the absolute
 * deadline passes.  mode is enum cgr_wait_mode; spin_ns bounds the spin of
 * the adaptive mode.  Producers must ring b after making ready() true.
 * Returns 0 (ready), -ECANCELED or -ETIMEDOUT.  r may be NULL.
 */
int cgr__reactor_wait(struct cgr_reactor *r, struct cgr_bell *b,
		      cgr__ready_fn ready, void *arg,
		      const _Atomic uint32_t *cancel, int mode,
		      int64_t spin_ns, int64_t deadline);

/* Timers: fire once from cgr__reactor_run_timers at or after deadline.
 * Not used by the library yet (its waits carry their own deadline): they
 * are for per-worker deadlines driven from the reactor's loop, such as a
 * process worker's watch of its peers; tests/reactor.c covers them.
 * Returns 0 and an id, or -ENOSPC. */
int cgr__reactor_timer_add(struct cgr_reactor *r, int64_t deadline,
			   cgr__timer_fn fn, void *arg, uint64_t *id);
/* Returns 0, or -ENOENT if it already fired or never existed. */
int cgr__reactor_timer_cancel(struct cgr_reactor *r, uint64_t id);
/* Fires every timer due at now, earliest deadline first (timers its
 * callbacks add wait for the next call); returns how many fired. */
int cgr__reactor_run_timers(struct cgr_reactor *r, int64_t now);
/* Earliest pending deadline, or CGR_FOREVER. */
int64_t cgr__reactor_next_deadline(const struct cgr_reactor *r);

/*
 * Peer-death watch: fn(arg) runs on the owner thread once the process
 * behind pidfd (pidfd_open; the caller keeps it open until the watch is
 * cancelled or has fired) has exited, from the reactor's loop: a park
 * returns for it (on io_uring a POLL_ADD on the pidfd wakes the park at
 * once; the futex fallback parks in slices of at most 10 ms while a
 * watch is set), every park ends by running the due watches, and a
 * spinning wait looks at them every millisecond.  A watch
 * fires once and frees its slot.  Not used by the library yet: it is the
 * process workers' watch of their peers (and the driver's of its
 * workers); tests/reactor.c covers it.  Owner thread only.  Returns 0 and
 * an id, -EINVAL (fd < 0 or fn NULL) or -ENOSPC.
 */
int cgr__reactor_watch_add(struct cgr_reactor *r, int pidfd,
			   cgr__timer_fn fn, void *arg, uint64_t *id);
/* Returns 0, or -ENOENT if it already fired or never existed. */
int cgr__reactor_watch_cancel(struct cgr_reactor *r, uint64_t id);
/* Fires every watch whose process has exited (never blocks); returns how
 * many fired. */
int cgr__reactor_run_watches(struct cgr_reactor *r);

#endif
