/*
 * reactor/reactor.h: the one place a cgr thread waits.
 *
 * A reactor belongs to one thread (a worker's).  To wait for a condition it
 * spins for a while (adaptive mode), then registers on a doorbell, re-checks
 * and parks: on io_uring with a FUTEX_WAIT request (plus a linked timeout
 * for the deadline), or, where io_uring is refused, on the futex system
 * call.  Timers fire from the same loop.  A NULL reactor parks with the
 * futex system call: that is how driver threads wait.
 *
 * io_uring may be refused at any step, not only at io_uring_setup: a
 * container's seccomp profile may allow the setup and refuse
 * io_uring_enter or io_uring_register, and a kernel may set a ring up and
 * fail the FUTEX_WAIT request.  Any failure of io_uring (setup, register,
 * enter at a park, a submit or a cancel, a FUTEX_WAIT, timeout or cancel
 * completing with an unexpected error) gives the ring up for good: the
 * reactor closes it, parks on futexes from then on (r->uring false,
 * r->uring_err and r->uring_where say why) and says so once through its
 * log (cgr__reactor_set_log).  Nothing retries: a refused call costs one
 * failed system call, never a spinning park.
 */
#ifndef CGR_REACTOR_H
#define CGR_REACTOR_H

#include <stdbool.h>
#include <stdint.h>

#include <liburing.h>

#include "base/base.h"
#include "base/futex.h"

#define CGR__REACTOR_MAX_TIMERS 32
#define CGR__REACTOR_MAX_WATCHES 16

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

/* What a wait learns about spinning on its thread (cgr__reactor_wait,
 * CGR_WAIT_ADAPTIVE only).  Kept per thread, not per reactor: the driver's
 * waits have none. */
#define CGR__SPIN_SLOTS 8
#define CGR__STEAL_NS 100000	  /* a longer gap in a spin: CPU lost */
#define CGR__PROBE_MIN_NS 1000000 /* pressure: the first probe, then x2 */
#define CGR__PROBE_MAX_NS 1000000000 /* ... doubling, 32x a loss, to this */
#define CGR__MISS_PARK 8 /* misses from which a waiter parks at once */
#define CGR__MISS_MAX 12
#define CGR__MISS_PROBE 16 /* a waiter parking at once spins every 16th */
struct cgr__spin_stat {
	/* CPU pressure: a spin lost the thread's CPU (a gap of more than
	 * CGR__STEAL_NS between two looks at the clock) while it waited on
	 * this system's run queue (run_delay).  Until probe_at, adaptive
	 * waits park at once; from then on they spin.  probe_gap is 1 ms
	 * after a calm spell; a loss while the pressure lasts (or within a
	 * second and four gaps of the last, stolen_at) doubles it and makes
	 * it at least 32 times the CPU time lost, up to 1 s.  The pressure
	 * ends when a spin yields and keeps its CPU, or four gaps after
	 * probe_at pass without a loss. */
	bool pressure;
	int64_t probe_at, probe_gap, stolen_at;
	/* The thread's run-queue wait in all at the last loss (-1: unknown;
	 * 0: not read yet, also taken as unknown). */
	int64_t run_delay;
	/* Per waiter (a hash of the bell and the condition): spins that
	 * ended in a park, less those that paid; from CGR__MISS_PARK on,
	 * the waiter parks at once but every 16th wait probes, and any wait
	 * that ends within its spin budget (spinning or parked) counts as
	 * a success. */
	uint8_t miss[CGR__SPIN_SLOTS];
	uint8_t skipped[CGR__SPIN_SLOTS];
	/* Statistics: waits that spun (paid: were ready in the spin, without
	 * pressure), parked at once under pressure or for misses, probed;
	 * spins that lost the CPU. */
	uint64_t spun, paid, parked_pressure, parked_miss, probes, steals;
	uint64_t stolen; /* losses with no run-queue wait: the hypervisor's */
	uint64_t lost_ns; /* CPU time the losses took */
	uint64_t parks; /* waits of any mode that parked */
};

/* The calling thread's record (never NULL). */
struct cgr__spin_stat *cgr__spin_stat(void);
/* The pressure rules on record st (exposed for tests/reactor): a spin
 * lost its CPU for lost_ns, seen at now, when the thread's run-queue
 * wait in all was run_delay (-1: unknown); an adaptive wait starts at now
 * (its spin budget: spin_ns or 0). */
void cgr__spin_lost(struct cgr__spin_stat *st, int64_t now, int64_t lost_ns,
		    int64_t run_delay);
/* The calling thread's run-queue wait in all (ns), or -1: one small file
 * read, made only when a spin lost its CPU. */
int64_t cgr__run_delay(void);
int64_t cgr__spin_budget(struct cgr__spin_stat *st, unsigned slot,
			 int64_t now, int64_t spin_ns);

struct cgr__reactor {
	struct io_uring ring;
	bool uring;	/* false: futex fallback */
	int uring_err;	/* why io_uring was not used (negative errno) */
	const char *uring_where; /* the step that failed (a string literal) */
	bool uring_off;		 /* CGR__REACTOR_NO_URING: the caller's choice */
	bool test_badop;	 /* CGR__REACTOR_TEST_BADOP */
	/* Where the fallback is said, once per *log_once (cgr__reactor_set_log). */
	const struct cgr__logger *log;
	atomic_bool *log_once;
	atomic_bool logged; /* log_once when the caller gives none */
	uint64_t next_timer_id;
	struct cgr__timer timers[CGR__REACTOR_MAX_TIMERS];
	struct cgr__watch watches[CGR__REACTOR_MAX_WATCHES];
	unsigned nwatches;
	uint64_t next_watch_id;
	int64_t watch_at; /* a spin looks at the watches from then on */
	/* Device work the reactor polls while it waits (NULL: none): poll
	 * advances it (a worker's NCCL collectives, run/launch.c) and says
	 * whether some is still pending; then a park is bounded (2 us,
	 * doubling to 200 us), since a device cannot ring a doorbell. */
	bool (*poll)(void *arg);
	void *poll_arg;
	/* A spin calls poll every fourth look, not only with its yield
	 * every 64 (a worker whose values cross hosts: the network is
	 * polled as a raw UCX loop would poll it, so that a message is seen
	 * within a microsecond; the README's "Across hosts" A/B: the echo's
	 * p50 at 1.20x raw UCX's against 1.38x, medians of 17 runs). */
	bool poll_often;
	/* Statistics, owner thread only. */
	uint64_t parks;
	uint64_t spins;
};

enum cgr__reactor_flags {
	CGR__REACTOR_NO_URING = 1u << 0,
	/* Tests only: no opcode probe, and the park's FUTEX_WAIT request
	 * carries an opcode no kernel knows, so that its completion fails
	 * (-EINVAL) like that of a kernel without the opcode. */
	CGR__REACTOR_TEST_BADOP = 1u << 1,
};

/* On the owner thread.  Never fails: io_uring refusal, or a kernel whose
 * io_uring lacks FUTEX_WAIT (before 6.7: -EOPNOTSUPP), selects the futex
 * fallback (r->uring false, r->uring_err says why). */
void cgr__reactor_init(struct cgr__reactor *r, unsigned flags);
void cgr__reactor_fini(struct cgr__reactor *r);

/*
 * Where the reactor says that it parks on futexes: one warning through lg
 * (NULL: none), unless *once (a context's flag, shared by its reactors;
 * NULL: the reactor's own) is already set.  Says it now if the reactor
 * already fell back; otherwise at the failure, from the owner thread.
 */
void cgr__reactor_set_log(struct cgr__reactor *r, const struct cgr__logger *lg,
			  atomic_bool *once);

/*
 * Parks on bell b (after cgr__bell_prepare returned seq) until the bell
 * rings or the absolute deadline.  The caller cancels its registration
 * afterwards.  Returns 0 or -ETIMEDOUT (or another negative errno).
 */
int cgr__reactor_park(struct cgr__reactor *r, struct cgr__bell *b, uint32_t seq,
		      int64_t deadline);

typedef bool (*cgr__ready_fn)(void *arg);

/*
 * Waits until ready(arg) is true, *cancel becomes non-zero, or the absolute
 * deadline passes.  mode is enum cgr_wait_mode; spin_ns bounds the spin of
 * the adaptive mode, which learns when not to spin (struct
 * cgr__spin_stat).  Producers must ring b after making ready() true.
 * Returns 0 (ready), -ECANCELED or -ETIMEDOUT.  r may be NULL.
 */
/* Where the calling thread's cgr__reactor_wait is: its ready function and
 * the reactor's poll are called while it spins (CGR__PHASE_SPIN: a spin
 * with a budget, not the few polls every wait makes first) and before
 * each park.  A
 * poll that stands in for another thread while this one spins hands back
 * when it parks (remote/link.c). */
enum { CGR__PHASE_NONE, CGR__PHASE_SPIN, CGR__PHASE_PARK };
int cgr__reactor_phase(void);
/* In the park phase: the reactor the thread parks on (NULL: none, or
 * not parking).  A poll may add a watch to it for the park. */
struct cgr__reactor *cgr__reactor_parking(void);
/* fn(arg) once, when the calling thread's current park phase ends. */
void cgr__reactor_on_unpark(void (*fn)(void *), void *arg);
int cgr__reactor_wait(struct cgr__reactor *r, struct cgr__bell *b,
		      cgr__ready_fn ready, void *arg,
		      const _Atomic uint32_t *cancel, int mode, int64_t spin_ns,
		      int64_t deadline);

/* Timers: fire once from cgr__reactor_run_timers at or after deadline.
 * Not used by the library yet (its waits carry their own deadline): they
 * are for per-worker deadlines driven from the reactor's loop, such as a
 * process worker's watch of its peers; tests/reactor.c covers them.
 * Returns 0 and an id, or -ENOSPC. */
int cgr__reactor_timer_add(struct cgr__reactor *r, int64_t deadline,
			   cgr__timer_fn fn, void *arg, uint64_t *id);
/* Returns 0, or -ENOENT if it already fired or never existed. */
int cgr__reactor_timer_cancel(struct cgr__reactor *r, uint64_t id);
/* Fires every timer due at now, earliest deadline first (timers its
 * callbacks add wait for the next call); returns how many fired. */
int cgr__reactor_run_timers(struct cgr__reactor *r, int64_t now);
/* Earliest pending deadline, or CGR_FOREVER. */
int64_t cgr__reactor_next_deadline(const struct cgr__reactor *r);

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
int cgr__reactor_watch_add(struct cgr__reactor *r, int pidfd, cgr__timer_fn fn,
			   void *arg, uint64_t *id);
/* Returns 0, or -ENOENT if it already fired or never existed. */
int cgr__reactor_watch_cancel(struct cgr__reactor *r, uint64_t id);
/* Fires every watch whose process has exited (never blocks); returns how
 * many fired. */
int cgr__reactor_run_watches(struct cgr__reactor *r);

#endif
