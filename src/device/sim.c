/*
 * device/sim.c: the simulated device.  Each stream is an executor thread
 * that runs its queue in order; a stream's position is the number of
 * operations it executed; an event is a (stream, position) pair.
 *
 * Waking: the enqueuer rings the stream's bell after publishing, and the
 * executor parks on it when the queue is empty (spin 20 us, then sleep:
 * an idle stream costs no CPU).  The executor rings the stream's position
 * bell (pbell) after each operation; synchronize, future waits, other
 * executors waiting for this stream's position and an enqueuer waiting for
 * queue space park there.  A device failure rings every bell of the
 * device.  Executor waits also re-check every CGR__STOP_POLL_NS, so a
 * stream being destroyed leaves any wait, even one parked on another
 * device's bell.
 *
 * Draining: the enqueuing thread may run the queue itself
 * (cgr__stream_drain): whoever runs operations first takes the stream's
 * run word, so the executor and the drainer never run two operations at
 * once and the order stays.  A drainer runs only operations that can
 * start at once; the executor, rung for the rest, waits where it must.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "device/device.h"
#include "reactor/reactor.h"

#define CGR__SIM_SPIN_NS 20000
#define CGR__SIM_MASK (CGR__SIM_QUEUE - 1)
_Static_assert((CGR__SIM_QUEUE & CGR__SIM_MASK) == 0,
	       "the sim queue is a power of two");

/* Waits (spin, then park on b) until ready(arg), re-checking every
 * CGR__STOP_POLL_NS whether the executor of s must stop.  0, or the
 * stop/device error that ended the wait. */
static int cgr__sim_exec_wait(cgr_stream *s, struct cgr__bell *b,
			      cgr__ready_fn ready, void *arg)
{
	for (;;) {
		int err = cgr__device_error(s->dev);
		if (err)
			return err;
		err = cgr__stream_stopping(s);
		if (err)
			return err;
		if (cgr__reactor_wait(NULL, b, ready, arg, NULL,
				      CGR_WAIT_ADAPTIVE, CGR__SIM_SPIN_NS,
				      cgr__deadline(CGR__STOP_POLL_NS)) == 0)
			return 0;
	}
}

struct cgr__sim_posw {
	cgr_stream *waiter; /* its device error and stop end the wait */
	cgr_stream *t;
	uint64_t pos;
};

static bool cgr__sim_pos_ready(void *arg)
{
	struct cgr__sim_posw *w = arg;

	/* P1: acquire: pairs with the executor's release of done (X1):
	 * the target's work up to pos is visible to us. */
	return atomic_load_explicit(&w->t->done, memory_order_acquire) >=
		       w->pos ||
	       cgr__device_error(w->waiter->dev) != 0 ||
	       atomic_load_explicit(&w->waiter->stop, memory_order_relaxed);
}

struct cgr__sim_futw {
	cgr_stream *waiter;
	struct cgr__dfuture *f;
};

static bool cgr__sim_fut_ready(void *arg)
{
	struct cgr__sim_futw *w = arg;
	int res;

	return cgr__dfuture_test(w->f, &res) != 0 ||
	       cgr__device_error(w->waiter->dev) != 0 ||
	       atomic_load_explicit(&w->waiter->stop, memory_order_relaxed);
}

/* Whether op can start without waiting (a drainer runs only those). */
static bool cgr__sim_op_ready(cgr_stream *s, const struct cgr__sop *op)
{
	int res;

	if (cgr__device_error(s->dev) != 0 || cgr__stream_stopping(s) != 0)
		return true;
	switch (op->kind) {
	case CGR__SOP_WAIT: {
		struct cgr__sim_posw w = { s, op->u.wait.s, op->u.wait.pos };
		return cgr__sim_pos_ready(&w);
	}
	case CGR__SOP_WAITF:
		return cgr__dfuture_test(op->u.waitf.f, &res) != 0;
	case CGR__SOP_WAITE:
		return op->u.waite.ops->snap_query(op->u.waite.snap,
						   op->u.waite.pos) != 0;
	default:
		return true;
	}
}

/* Runs op, or drops it (its code: -ECANCELED after stop, or the device's
 * sticky error): 0 if it ran. */
static int cgr__sim_run(cgr_stream *s, struct cgr__sop *op)
{
	int err = cgr__device_error(s->dev);

	if (err == 0)
		err = cgr__stream_stopping(s);
	switch (op->kind) {
	case CGR__SOP_HOST:
		if (err == 0)
			op->u.host.fn(op->u.host.arg);
		break;
	case CGR__SOP_COPY:
		if (err == 0 && op->u.copy.n != 0)
			memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.n);
		break;
	case CGR__SOP_WAIT:
		if (err == 0) {
			struct cgr__sim_posw w = { s, op->u.wait.s,
						   op->u.wait.pos };
			cgr__stream_kick(op->u.wait.s);
			/* A wait cut short by the stop counts as dropped. */
			err = cgr__sim_exec_wait(s, &op->u.wait.s->pbell,
						 cgr__sim_pos_ready, &w);
		}
		cgr__stream_put(op->u.wait.s);
		break;
	case CGR__SOP_WAITF:
		if (err == 0) {
			struct cgr__sim_futw w = { s, op->u.waitf.f };
			struct cgr__dfuture *f = op->u.waitf.f;
			if (f->poll != NULL)
				cgr__dfuture_poll_wait(f, s);
			else
				err = cgr__sim_exec_wait(
					s,
					f->s != NULL ? &f->s->pbell : &f->bell,
					cgr__sim_fut_ready, &w);
		}
		cgr__dfuture_put(op->u.waitf.f);
		break;
	case CGR__SOP_CALL: {
		/* Internal work the destroy cut short (a collective whose
		 * peers never came) counts as dropped too. */
		int r = op->u.call.fn(op->u.call.arg, s, err);
		if (err == 0 && r == -ECANCELED && cgr__stream_stopping(s))
			err = r;
		break;
	}
	case CGR__SOP_WAITE:
		if (err == 0)
			cgr__waite_run(s, op);
		else
			op->u.waite.ops->snap_put(op->u.waite.snap);
		break;
	default:
		break;
	}
	return err;
}

/* Work for the executor: queued and not held by the enqueuer, or the
 * stop. */
static bool cgr__sim_has_work(void *arg)
{
	cgr_stream *s = arg;

	return (atomic_load_explicit(&s->enq, memory_order_acquire) !=
			atomic_load_explicit(&s->done, memory_order_acquire) &&
		!atomic_load_explicit(&s->hold, memory_order_acquire)) ||
	       atomic_load_explicit(&s->stop, memory_order_acquire);
}

/* R1: acquire: pairs with the release of run (R2): the previous runner's
 * operations and its done are visible. */
static bool cgr__sim_claim(cgr_stream *s)
{
	uint32_t z = 0;

	return atomic_compare_exchange_strong_explicit(
		&s->run, &z, 1, memory_order_acquire, memory_order_relaxed);
}

static void cgr__sim_unclaim(cgr_stream *s)
{
	/* R2: release: pairs with R1. */
	atomic_store_explicit(&s->run, 0, memory_order_release);
	/* An executor waiting for the drainer to let go parks on pbell. */
	cgr__bell_ring(&s->pbell);
}

static bool cgr__sim_unclaimed(void *arg)
{
	cgr_stream *s = arg;

	return atomic_load_explicit(&s->run, memory_order_relaxed) == 0 ||
	       !cgr__sim_has_work(s);
}

/* Runs the operation at position d (the caller holds run) and publishes
 * it. */
static void cgr__sim_step(cgr_stream *s, uint64_t d)
{
	struct cgr__sop op = s->q[d & CGR__SIM_MASK];

	/* The first operation dropped by a destroy: events past it report
	 * -ECANCELED. */
	if (cgr__sim_run(s, &op) == -ECANCELED &&
	    atomic_load_explicit(&s->dropped, memory_order_relaxed) ==
		    UINT64_MAX)
		atomic_store_explicit(&s->dropped, d, memory_order_relaxed);
	/* X1: release: the operation's effects (and the slot being free) are
	 * visible to whoever reads this position: P1, the enqueuer's space
	 * check Q0, synchronize S1, the next runner. */
	atomic_store_explicit(&s->done, d + 1, memory_order_release);
	cgr__bell_ring(&s->pbell);
}

static void *cgr__sim_main(void *arg)
{
	cgr_stream *s = arg;

	pthread_setname_np(pthread_self(), "cgr:stream");
	for (;;) {
		/* E1: acquire: pairs with the enqueuer's release of enq (Q1):
		 * the slot's contents are visible. */
		bool empty = atomic_load_explicit(&s->enq,
						  memory_order_acquire) ==
			     atomic_load_explicit(&s->done,
						  memory_order_acquire);
		if (empty &&
		    atomic_load_explicit(&s->stop, memory_order_acquire))
			break;
		/* Held work is the enqueuer's to run (or to hand over). */
		if (empty || !cgr__sim_has_work(s)) {
			cgr__reactor_wait(NULL, &s->bell, cgr__sim_has_work, s,
					  NULL, CGR_WAIT_ADAPTIVE,
					  CGR__SIM_SPIN_NS, CGR_FOREVER);
			continue;
		}
		if (!cgr__sim_claim(s)) {
			/* The enqueuer is draining: it lets go soon. */
			cgr__reactor_wait(NULL, &s->pbell, cgr__sim_unclaimed,
					  s, NULL, CGR_WAIT_ADAPTIVE,
					  CGR__SIM_SPIN_NS, CGR_FOREVER);
			continue;
		}
		for (;;) {
			uint64_t d = atomic_load_explicit(
				&s->done, memory_order_relaxed);
			if (atomic_load_explicit(&s->enq,
						 memory_order_acquire) == d)
				break;
			cgr__sim_step(s, d);
		}
		cgr__sim_unclaim(s);
	}
	/* X2: pairs with the destroyer's acquire of exited. */
	atomic_store_explicit(&s->exited, 1, memory_order_release);
	cgr__bell_ring_force(&s->pbell);
	cgr__stream_put(s);
	return NULL;
}

/* The stream this thread holds (cgr__stream_hold until its drain). */
static _Thread_local cgr_stream *held_here;

void cgr__stream_hold(cgr_stream *s)
{
	held_here = s;
	atomic_store_explicit(&s->hold, 1, memory_order_release);
}

void cgr__stream_hand_over(void)
{
	if (held_here != NULL)
		cgr__stream_kick(held_here);
}

bool cgr__stream_idle(cgr_stream *s)
{
	if (!cgr__stream_is_sim(s))
		return false;
	/* S1 as in synchronize: pairs with X1. */
	return atomic_load_explicit(&s->done, memory_order_acquire) ==
	       atomic_load_explicit(&s->enq, memory_order_relaxed);
}

void cgr__stream_kick(cgr_stream *s)
{
	/* K1: seq_cst: the executor's look at hold after its prepare (the
	 * bell's RMW) sees 0, or the ring below wakes it. */
	if (cgr__stream_is_sim(s) &&
	    atomic_exchange_explicit(&s->hold, 0, memory_order_seq_cst))
		cgr__bell_ring_force(&s->bell);
}

int cgr__stream_drain(cgr_stream *s)
{
	/* Claimed before the hold ends: a spinning executor cannot take the
	 * work in between. */
	bool mine = cgr__sim_claim(s), left;

	held_here = NULL;
	while (mine) {
		uint64_t d = atomic_load_explicit(&s->done,
						  memory_order_relaxed);
		/* The enqueuer is this thread: the slots are its own. */
		if (atomic_load_explicit(&s->enq, memory_order_relaxed) == d ||
		    !cgr__sim_op_ready(s, &s->q[d & CGR__SIM_MASK]))
			break;
		cgr__sim_step(s, d);
	}
	/* H1: seq_cst, as K1: the executor sees the hold gone, or the ring
	 * below. */
	atomic_store_explicit(&s->hold, 0, memory_order_seq_cst);
	if (mine)
		cgr__sim_unclaim(s);
	left = !cgr__stream_idle(s);
	if (left)
		cgr__bell_ring(&s->bell);
	return left ? 0 : 1;
}

static int cgr__sim_stream_init(cgr_stream *s)
{
	int ret;

	s->q = cgr__alloc(s->dev->arena, sizeof(*s->q) * CGR__SIM_QUEUE,
			  CGR__CACHELINE);
	if (s->q == NULL)
		return -ENOMEM;
	atomic_init(&s->enq, 0);
	atomic_init(&s->done, 0);
	atomic_init(&s->dropped, UINT64_MAX);
	cgr__bell_init(&s->bell);
	cgr__bell_init(&s->pbell);
	atomic_init(&s->stop, 0);
	atomic_init(&s->exited, 0);
	atomic_init(&s->run, 0);
	atomic_init(&s->hold, 0);
	/* The executor's reference, dropped when it returns. */
	cgr__stream_ref(s);
	ret = -pthread_create(&s->thread, NULL, cgr__sim_main, s);
	if (ret < 0) {
		atomic_fetch_sub(&s->refs, 1);
		cgr__free(s->dev->arena, s->q, sizeof(*s->q) * CGR__SIM_QUEUE,
			  CGR__CACHELINE);
		return ret == -EAGAIN ? -EAGAIN : ret;
	}
	return 0;
}

static void cgr__sim_stream_free(cgr_stream *s)
{
	cgr__free(s->dev->arena, s->q, sizeof(*s->q) * CGR__SIM_QUEUE,
		  CGR__CACHELINE);
}

static bool cgr__sim_drained(void *arg)
{
	cgr_stream *s = arg;

	return atomic_load_explicit(&s->done, memory_order_acquire) >=
	       atomic_load_explicit(&s->enq, memory_order_relaxed);
}

static bool cgr__sim_exited(void *arg)
{
	cgr_stream *s = arg;

	return atomic_load_explicit(&s->exited, memory_order_acquire) != 0;
}

static void cgr__sim_stream_fini(cgr_stream *s, int64_t deadline)
{
	int64_t grace;

	atomic_store_explicit(&s->hold, 0, memory_order_relaxed);
	cgr__bell_ring_force(&s->bell);
	cgr__reactor_wait(NULL, &s->pbell, cgr__sim_drained, s, NULL,
			  CGR_WAIT_BLOCK, 0, deadline);
	/* Whatever is left is dropped: the executor completes it with
	 * -ECANCELED without running it, and leaves every wait within
	 * CGR__STOP_POLL_NS. */
	atomic_store_explicit(&s->stop, 1, memory_order_seq_cst);
	cgr__bell_ring_force(&s->bell);
	cgr__bell_ring_force(&s->pbell);
	grace = cgr__now_ns() > deadline ? cgr__now_ns() : deadline;
	grace += 4 * (int64_t)CGR__STOP_POLL_NS;
	if (cgr__reactor_wait(NULL, &s->pbell, cgr__sim_exited, s, NULL,
			      CGR_WAIT_BLOCK, 0, grace) == 0) {
		pthread_join(s->thread, NULL);
		return;
	}
	/* Stuck in a host function: abandon it.  The thread holds its own
	 * reference and frees the stream when it returns. */
	cgr__warn(s->dev->log,
		  "stream destroyed while its executor is stuck in a host "
		  "function: thread abandoned");
	pthread_detach(s->thread);
}

static bool cgr__sim_has_space(void *arg)
{
	cgr_stream *s = arg;

	/* Q0: acquire: pairs with X1: the slot was consumed. */
	return atomic_load_explicit(&s->enq, memory_order_relaxed) -
		       atomic_load_explicit(&s->done, memory_order_acquire) <
		       CGR__SIM_QUEUE ||
	       atomic_load_explicit(&s->stop, memory_order_relaxed);
}

static int cgr__sim_enqueue(cgr_stream *s, const struct cgr__sop *op)
{
	uint64_t e = atomic_load_explicit(&s->enq, memory_order_relaxed);

	if (atomic_load_explicit(&s->stop, memory_order_relaxed))
		return -ECANCELED;
	if (e - atomic_load_explicit(&s->done, memory_order_acquire) >=
	    CGR__SIM_QUEUE) {
		/* Full: block like CUDA's launch queue does. */
		cgr__stream_kick(s);
		cgr__reactor_wait(NULL, &s->pbell, cgr__sim_has_space, s, NULL,
				  CGR_WAIT_ADAPTIVE, CGR__SIM_SPIN_NS,
				  CGR_FOREVER);
		if (atomic_load_explicit(&s->stop, memory_order_relaxed))
			return -ECANCELED;
	}
	s->q[e & CGR__SIM_MASK] = *op;
	/* Q1: release: publishes the slot; pairs with E1. */
	atomic_store_explicit(&s->enq, e + 1, memory_order_release);
	if (!atomic_load_explicit(&s->hold, memory_order_acquire))
		cgr__bell_ring(&s->bell);
	return 0;
}

struct cgr__sim_syncw {
	cgr_stream *s;
	uint64_t target;
};

static bool cgr__sim_sync_ready(void *arg)
{
	struct cgr__sim_syncw *w = arg;

	/* S1: acquire: pairs with X1. */
	return atomic_load_explicit(&w->s->done, memory_order_acquire) >=
		       w->target ||
	       cgr__device_error(w->s->dev) != 0;
}

static int cgr__sim_synchronize(cgr_stream *s, int64_t deadline)
{
	struct cgr__sim_syncw w = {
		s, atomic_load_explicit(&s->enq, memory_order_relaxed)
	};
	int ret, err;

	cgr__stream_kick(s);
	ret = cgr__reactor_wait(NULL, &s->pbell, cgr__sim_sync_ready, &w,
				NULL, CGR_WAIT_ADAPTIVE, CGR__SIM_SPIN_NS,
				deadline);
	err = cgr__device_error(s->dev);
	if (err)
		return err;
	return ret;
}

static int cgr__sim_event_record(cgr_event *e, cgr_stream *s)
{
	cgr_stream *old;

	cgr__stream_ref(s);
	cgr__event_lock(e);
	old = e->s;
	e->s = s;
	/* The enqueuing thread records: enq is its own count. */
	e->pos = atomic_load_explicit(&s->enq, memory_order_relaxed);
	e->gen++;
	cgr__event_unlock(e);
	if (old != NULL)
		cgr__stream_put(old);
	return 0;
}

/* The event's current (stream, position) with a reference on the stream,
 * or NULL if never recorded. */
static cgr_stream *cgr__sim_event_get(cgr_event *e, uint64_t *pos)
{
	cgr_stream *s;

	cgr__event_lock(e);
	s = e->s;
	*pos = e->pos;
	if (s != NULL)
		cgr__stream_ref(s);
	cgr__event_unlock(e);
	return s;
}

/* Whether s passed position pos: 1, 0, the device's sticky error, or
 * -ECANCELED if work before pos was dropped (cgr_stream_destroy). */
static int cgr__sim_passed(cgr_stream *s, uint64_t pos)
{
	int err = cgr__device_error(s->dev);

	if (err)
		return err;
	/* P1 as above; dropped is written before done's release (X1). */
	if (atomic_load_explicit(&s->done, memory_order_acquire) < pos)
		return 0;
	return atomic_load_explicit(&s->dropped, memory_order_relaxed) < pos ?
		       -ECANCELED :
		       1;
}

static int cgr__sim_event_query(cgr_event *e)
{
	uint64_t pos;
	cgr_stream *s = cgr__sim_event_get(e, &pos);
	int ret;

	if (s == NULL)
		return 0;
	ret = cgr__sim_passed(s, pos);
	/* Pending: whoever polls for a held stream hands it over, as a wait
	 * does (a stream task polling its own stream, another thread polling
	 * it while the task's function runs). */
	if (ret == 0)
		cgr__stream_kick(s);
	cgr__stream_put(s);
	return ret;
}

static int cgr__sim_stream_wait_event(cgr_stream *s, cgr_event *e)
{
	struct cgr__sop op = { .kind = CGR__SOP_WAIT };
	uint64_t pos;
	cgr_stream *t = cgr__sim_event_get(e, &pos);
	int ret;

	/* Never recorded: nothing to wait for (as cudaStreamWaitEvent). On
	 * the same stream, or already passed: order holds by itself. */
	if (t == NULL)
		return 0;
	if (t == s ||
	    atomic_load_explicit(&t->done, memory_order_acquire) >= pos) {
		cgr__stream_put(t);
		return 0;
	}
	op.u.wait.s = t;
	op.u.wait.pos = pos;
	ret = cgr__sim_enqueue(s, &op);
	if (ret < 0)
		cgr__stream_put(t);
	return ret;
}

/* For a stream of another backend waiting for a sim event. */
static int cgr__sim_event_snap(cgr_event *e, void **snap, uint64_t *pos)
{
	cgr_stream *s = cgr__sim_event_get(e, pos);

	*snap = s;
	return s == NULL ? 1 : 0;
}

static int cgr__sim_snap_query(void *snap, uint64_t pos)
{
	return cgr__sim_passed(snap, pos);
}

static void cgr__sim_snap_put(void *snap)
{
	cgr__stream_put(snap);
}

const struct cgr__device_ops cgr__sim_ops = {
	.name = "sim",
	.stream_init = cgr__sim_stream_init,
	.stream_fini = cgr__sim_stream_fini,
	.stream_free = cgr__sim_stream_free,
	.enqueue = cgr__sim_enqueue,
	.synchronize = cgr__sim_synchronize,
	.event_record = cgr__sim_event_record,
	.event_query = cgr__sim_event_query,
	.stream_wait_event = cgr__sim_stream_wait_event,
	.event_snap = cgr__sim_event_snap,
	.snap_query = cgr__sim_snap_query,
	.snap_put = cgr__sim_snap_put,
};
