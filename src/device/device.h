/*
 * device/device.h: streams, events and futures with CUDA's semantics (the
 * objects behind cgr.h's "device layer" section), and the seam a backend
 * plugs into.
 *
 * A device is one (context, index) pair: CGR_DEVICE_SIM, or a CUDA index
 * (the cuda backend, cuda.c, built when the CUDA toolkit is present).  It
 * carries a sticky error: once failed (cgr__device_fail), every operation
 * enqueued or pending on its streams fails with that error, and every wait
 * on it returns it.
 *
 * Backends implement struct cgr__device_ops.  The sim backend (sim.c) runs
 * each stream on an executor thread of its own: operations execute in
 * order, a stream's position is the number of operations executed, and an
 * event is a (stream, position) pair captured at record time.
 *
 * Futures handed out by this layer and by comm/ (struct cgr__dfuture) wrap
 * the generation-tagged struct cgr_future of future/: the public
 * cgr_future handle is the address of the wrapped future, so
 * `typedef struct cgr_future cgr_future` names both.  A future is bound to
 * the stream whose execution completes it (waiters park on that stream's
 * position bell and see its device's sticky error) or unbound (completed
 * by whoever made it; waiters park on the future word).
 *
 * Threads: one thread enqueues on a stream at a time (as cgr.h says); the
 * executor thread is the only consumer.  Futures, events and
 * cgr__device_fail may be used from any thread.
 */
#ifndef CGR_DEVICE_H
#define CGR_DEVICE_H

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/base.h"
#include "base/futex.h"
#include "ctx/ctx.h"
#include "future/future.h"

/* ---- stream operations --------------------------------------------- */

enum cgr__sop_kind {
	CGR__SOP_HOST = 1,  /* fn(arg) */
	CGR__SOP_COPY = 2,  /* memcpy(dst, src, n) */
	CGR__SOP_WAIT = 3,  /* until stream s passed position pos */
	CGR__SOP_WAITF = 4, /* until future f completed */
	CGR__SOP_CALL = 5,  /* internal work that reports a result */
	CGR__SOP_WAITE = 6, /* until an event of another backend passed */
};

/*
 * An internal operation run by the executor.  err is 0 normally; the
 * device's sticky error once it failed; -ECANCELED when the stream is
 * being destroyed and its remaining work is dropped.  With err != 0 the
 * function must not touch the device's memory but must still release what
 * arg owns (comm/ posts a poisoned descriptor so that peers fail too).
 * It returns its result (0 or negative); the executor ignores it.
 */
typedef int (*cgr__call_fn)(void *arg, cgr_stream *s, int err);

struct cgr__sop {
	uint32_t kind; /* enum cgr__sop_kind */
	union {
		struct {
			void (*fn)(void *arg);
			void *arg;
		} host;
		struct {
			void *dst;
			const void *src;
			size_t n;
		} copy;
		struct {
			cgr_stream *s; /* a reference moves into the op */
			uint64_t pos;
		} wait;
		struct {
			struct cgr__dfuture *f; /* a reference moves in */
		} waitf;
		struct {
			cgr__call_fn fn;
			void *arg;
		} call;
		struct { /* a record of another backend's event */
			const struct cgr__device_ops *ops;
			void *snap; /* a reference moves into the op */
			uint64_t pos;
		} waite;
	} u;
};

/* ---- the backend seam ---------------------------------------------- */

struct cgr__device;
struct cgr__dfuture;

/*
 * What a backend implements.  Every entry returns 0 or a negative code;
 * the common layer (stream.c, event.c, future.c) has already validated
 * arguments and checked the sticky error where cgr.h says so.
 */
struct cgr__device_ops {
	const char *name;
	/* May be NULL.  Checks that device dev->index exists (-ENODEV, with
	 * the reason logged, if not) before it is first used. */
	int (*device_init)(struct cgr__device *dev);
	/* Starts the backend half of s (s->dev and s->priority are set). */
	int (*stream_init)(cgr_stream *s);
	/* Lets queued work run until deadline, then drops what is left
	 * (-ECANCELED), stops and releases the backend half.  Never waits
	 * much past the deadline: a stuck executor is abandoned. */
	void (*stream_fini)(cgr_stream *s, int64_t deadline);
	/* Frees what stream_init allocated once the last reference is gone. */
	void (*stream_free)(cgr_stream *s);
	/* Enqueues one operation; blocks while the stream's queue is full. */
	int (*enqueue)(cgr_stream *s, const struct cgr__sop *op);
	/* Waits until everything enqueued so far ran, or deadline. */
	int (*synchronize)(cgr_stream *s, int64_t deadline);
	/* Events: record a position, query it, make a stream wait for it. */
	int (*event_record)(cgr_event *e, cgr_stream *s);
	int (*event_query)(cgr_event *e);
	int (*stream_wait_event)(cgr_stream *s, cgr_event *e);
	/* May be NULL: frees what event_record attached to e. */
	void (*event_free)(cgr_event *e);
	/* For a stream of another backend waiting for e: its current record
	 * as (*snap, *pos) with a reference (0), or nothing to wait for (1:
	 * never recorded).  snap_query: 1 passed, 0 not yet, negative: the
	 * device's error.  snap_put gives the reference back. */
	int (*event_snap)(cgr_event *e, void **snap, uint64_t *pos);
	int (*snap_query)(void *snap, uint64_t pos);
	void (*snap_put)(void *snap);
	/* May be NULL.  Told, for every device of the context (under the
	 * context's lock: it must not block), that device `failed` failed,
	 * after its waiters were woken: a backend that waits on a thread of
	 * its own for other devices' futures looks again. */
	void (*device_failed)(struct cgr__device *dev,
			      struct cgr__device *failed);
	/* May be NULL (the device has no memory of its own): memory of
	 * device dev (mem_alloc, mem_free) and a synchronous copy between
	 * any two memories (mem_copy). */
	int (*mem_alloc)(struct cgr__device *dev, size_t size, void **out);
	void (*mem_free)(struct cgr__device *dev, void *p);
	int (*mem_copy)(struct cgr__device *dev, void *dst, const void *src,
			size_t n);
};

extern const struct cgr__device_ops cgr__sim_ops;
#ifdef HAVE_CUDA
extern const struct cgr__device_ops cgr__cuda_ops;
#endif

/* ---- devices ------------------------------------------------------- */

struct cgr__device {
	const struct cgr__device_ops *ops;
	cgr_ctx *ctx; /* referenced while the device lives */
	struct cgr__arena *arena;
	const struct cgr__logger *log;
	int index; /* CGR_DEVICE_SIM or a CUDA index */
	const void *rt; /* the backend's per-context state (cuda: runtime) */
	_Atomic int32_t err; /* sticky: 0 or the first failure's code */
	_Atomic uint32_t refs; /* streams, events bound to it; 0: dying */
	pthread_mutex_t lock; /* streams list (create/destroy/fail only) */
	cgr_stream *streams;
	struct cgr__device *next; /* ctx->devices (device.c) */
};

/*
 * The device `index` of ctx, created on first use, with a reference.
 * Returns 0, -EINVAL (CGR_DEVICE_NONE or unknown), -ENODEV (a CUDA index:
 * the cuda backend is not built), -ENOMEM.
 */
int cgr__device_get(cgr_ctx *ctx, int index, struct cgr__device **out);
void cgr__device_put(struct cgr__device *dev);

/*
 * Fails the device for good with err (negative; CGR_EDEVICE if 0): every
 * pending and later operation on its streams fails with err, waiters wake.
 * The first failure wins; later calls only log.  Any thread.
 */
void cgr__device_fail(struct cgr__device *dev, int err, const char *why);

/* 0 or the sticky error.  Acquire: the failer's writes are visible. */
static inline int cgr__device_error(const struct cgr__device *dev)
{
	return atomic_load_explicit(&dev->err, memory_order_acquire);
}

/* ---- streams ------------------------------------------------------- */

#define CGR__SIM_QUEUE 1024 /* operations queued per sim stream */

struct cgr_stream {
	struct cgr__device *dev;
	int priority;
	_Atomic uint32_t refs; /* user, executor thread, events, futures */
	cgr_stream *next;      /* dev->streams (under dev->lock) */
	cgr_stream *prev;

	/* sim backend: an SPSC queue from the enqueuing thread to the
	 * executor.  enq counts operations published, done counts operations
	 * executed: a position.  Slot i % CGR__SIM_QUEUE is free again once
	 * done > i. */
	_Atomic uint64_t enq cgr__aligned;
	_Atomic uint64_t done cgr__aligned;
	/* The first position dropped by destroy (UINT64_MAX: none): the
	 * executor's, written before done passes it. */
	_Atomic uint64_t dropped;
	/* The executor parks on bell while the queue is empty; enqueue rings
	 * it.  Everyone else waiting for this stream's progress parks on
	 * pbell, which the executor rings after each operation. */
	struct cgr__bell bell cgr__aligned;
	struct cgr__bell pbell cgr__aligned;
	_Atomic uint32_t stop;	 /* destroy: drop remaining work */
	_Atomic uint32_t exited; /* the executor returned */
	/* Whoever runs operations holds run (1): the executor, or the
	 * enqueuing thread draining the queue itself (cgr__stream_drain).
	 * While hold is set, enqueue does not ring the executor: the
	 * enqueuer drains soon, and anybody who waits for the stream rings
	 * it first (cgr__stream_kick). */
	_Atomic uint32_t run cgr__aligned;
	_Atomic uint32_t hold;
	pthread_t thread;
	struct cgr__sop *q; /* CGR__SIM_QUEUE slots */

	void *cu; /* cuda backend: the cudaStream_t */
};

static inline void cgr__stream_ref(cgr_stream *s)
{
	atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}
void cgr__stream_put(cgr_stream *s);

/* Creates a stream on dev (takes its own device reference). */
int cgr__stream_create_on(struct cgr__device *dev, int priority,
			  cgr_stream **out);

/*
 * Enqueues an internal operation (comm/ uses CGR__SOP_CALL).  Unlike the
 * public calls it accepts work on a failed device: the operation then runs
 * with err set, so that its owner can fail it properly.  0, -EINVAL, or
 * -ECANCELED if the stream is being destroyed.
 */
int cgr__stream_enqueue(cgr_stream *s, const struct cgr__sop *op);

/*
 * Running a sim stream's queue on the thread that enqueues (the worker's
 * reactor, run/): a handoff to a parked executor costs a kernel wakeup
 * (tens of us on a VM), more than short operations take.  Only the one
 * enqueuing thread calls these, and only on sim streams
 * (cgr__stream_is_sim).
 *
 * cgr__stream_hold: from now until cgr__stream_drain, enqueue does not
 * ring the executor.  cgr__stream_drain: runs, on this thread and in
 * order, the queued operations that can start without waiting (a WAIT
 * for a position not reached stops it), unless the executor is running
 * them already; whatever is left goes to the executor.  Returns 1 if
 * everything enqueued has run, 0 if the executor has the rest.
 * cgr__stream_idle: everything enqueued has run (acquire: its effects
 * are visible); false for other backends.
 */
static inline bool cgr__stream_is_sim(const cgr_stream *s)
{
	return s->dev->ops == &cgr__sim_ops;
}
void cgr__stream_hold(cgr_stream *s);
int cgr__stream_drain(cgr_stream *s);
bool cgr__stream_idle(cgr_stream *s);
/* Whoever is about to wait for s's progress: if its enqueuer holds it,
 * hand the queue to the executor now (never a lost wakeup). */
void cgr__stream_kick(cgr_stream *s);
/* This thread is about to block (a future, a stream, a communicator's
 * call on the thread): the stream it holds, if any, goes to its executor
 * first, since what it waits for may wait for that stream's work (a
 * rank's operations run in call order across its streams and thread). */
void cgr__stream_hand_over(void);

/* Polls a foreign event's record (CGR__SOP_WAITE) until it passed, its
 * device failed, or waiter (may be NULL) fails or stops; then gives the
 * snapshot back.  Backs off from 1 us to 100 us between polls. */
void cgr__waite_run(cgr_stream *waiter, const struct cgr__sop *op);

/* Non-zero when the executor of s should give up a long wait: the stream
 * is being destroyed (-ECANCELED).  For CGR__SOP_CALL functions that wait
 * on other threads: poll it at least every CGR__STOP_POLL_NS. */
static inline int cgr__stream_stopping(const cgr_stream *s)
{
	return atomic_load_explicit(&s->stop, memory_order_acquire) ?
		       -ECANCELED :
		       0;
}
#define CGR__STOP_POLL_NS 20000000 /* 20 ms */

/* ---- events -------------------------------------------------------- */

struct cgr_event {
	cgr_ctx *ctx; /* referenced */
	struct cgr__arena *arena;
	/* The backend of the first record (static: no lifetime); a record
	 * on another backend's stream is refused. */
	const struct cgr__device_ops *ops;
	/* Guards (s, pos, gen) for a few instructions: a reader takes its
	 * own reference on s under it, so a concurrent re-record cannot free
	 * the stream under the reader. */
	atomic_flag lock;
	cgr_stream *s; /* last record's stream (referenced), NULL: never */
	uint64_t pos;  /* s's position to pass */
	uint32_t gen;  /* records so far */
	void *cu;      /* cuda backend: its current record (cuda.c) */
};

static inline void cgr__event_lock(cgr_event *e)
{
	unsigned i = 0;

	/* Acquire: pairs with the release in cgr__event_unlock. */
	while (atomic_flag_test_and_set_explicit(&e->lock,
						 memory_order_acquire))
		if ((++i & 63) == 0)
			sched_yield();
		else
			cgr__cpu_relax();
}

static inline void cgr__event_unlock(cgr_event *e)
{
	atomic_flag_clear_explicit(&e->lock, memory_order_release);
}

/* ---- futures ------------------------------------------------------- */

#define CGR__DFUTURE_MAGIC 0x64667574u

struct cgr__dfuture {
	struct cgr_future f; /* first: &f is the public handle */
	uint32_t gen;	     /* the one generation this future lives */
	uint32_t magic;
	_Atomic uint32_t refs; /* holder + completer + stream waits */
	struct cgr__bell bell; /* unbound futures: rung at completion */
	cgr_stream *s;	       /* bound stream (referenced) or NULL */
	cgr_ctx *ctx;	       /* referenced */
	struct cgr__arena *arena;
	/* A polled future (cgr__dfuture_poll_by): nobody completes it on
	 * its own; whoever tests or waits asks poll, and the first who
	 * sees it done completes it (claimed). */
	int (*poll)(void *arg, int *result);
	void (*poll_fini)(void *arg);
	void *poll_arg;
	atomic_flag claimed;
	/* NULL, or the event the operation completes with: a stream waits
	 * for the future by waiting for it (set by the completion source,
	 * which owns it). */
	cgr_event *ev;
	/* NULL, or the bell of a backend's thread waiting for it on behalf
	 * of a device (the cuda gate waker, of df's context): completion
	 * rings it too.  Set once. */
	struct cgr__bell *_Atomic wbell;
};

/*
 * A pending future with two references: the holder's (given back with
 * cgr_future_release or cgr__dfuture_put) and the completer's (given back
 * by cgr__dfuture_complete).  s (may be NULL) binds it: waits then see the
 * sticky error of s's device.  Returns 0 or -ENOMEM.
 */
int cgr__dfuture_create(cgr_ctx *ctx, cgr_stream *s,
			struct cgr__dfuture **out);
/* Completes with result (0 or negative; first completion wins), wakes its
 * waiters and drops the completer's reference. */
void cgr__dfuture_complete(struct cgr__dfuture *df, int result);
void cgr__dfuture_put(struct cgr__dfuture *df);
static inline void cgr__dfuture_ref(struct cgr__dfuture *df)
{
	atomic_fetch_add_explicit(&df->refs, 1, memory_order_relaxed);
}
/*
 * Makes df (just created, unbound) a polled future: poll(arg, &result)
 * returns 1 once the operation is done (result: 0 or its error), 0 while
 * pending, and must never block; tests and waits call it (a wait backs
 * off from 1 us to 100 us between polls), and the first caller that sees
 * it done completes df, dropping the completer's reference.  poll_fini
 * (may be NULL) frees arg when df is freed.  The completion source of a
 * device operation whose end only a query can see (a CUDA event).
 */
void cgr__dfuture_poll_by(struct cgr__dfuture *df,
			  int (*poll)(void *arg, int *result),
			  void (*poll_fini)(void *arg), void *arg);
/* 1 done (*result set), 0 pending.  Never blocks. */
int cgr__dfuture_test(struct cgr__dfuture *df, int *result);
/* A stream executor (waiter) waiting for polled future df: polls it, 1 us
 * to 100 us apart, until it is done or the waiter's device fails or the
 * waiter is being destroyed. */
void cgr__dfuture_poll_wait(struct cgr__dfuture *df, cgr_stream *waiter);
static inline cgr_future *cgr__dfuture_pub(struct cgr__dfuture *df)
{
	return &df->f;
}
/* The wrapper of a public handle, or NULL if f is not one of ours. */
struct cgr__dfuture *cgr__dfuture_of(cgr_future *f);

/* ---- device memory, for the layers above ----------------------------- */

/* Memory of device dev (cudaMalloc and cudaFree on a CUDA device) and a
 * synchronous copy between any two memories (cudaMemcpyDefault): 0,
 * -ENODEV (a device without memory of its own, or a build without its
 * backend), -ENOMEM, or the device's error.  Only device/ calls a GPU
 * runtime; the layers above go through these. */
int cgr__device_malloc(struct cgr__device *dev, size_t size, void **out);
void cgr__device_free(struct cgr__device *dev, void *p);
int cgr__device_memcpy(struct cgr__device *dev, void *dst, const void *src,
		       size_t n);

/* ---- the cuda backend, for the layers above ------------------------- */

#ifdef HAVE_CUDA
/* Makes s's CUDA device current on this thread and returns its
 * cudaStream_t; NULL if s is not a CUDA stream. */
void *cgr__cuda_stream_use(cgr_stream *s);
/* Whether CUDA knows p as device (or managed, or registered) memory. */
bool cgr__cuda_is_device_ptr(struct cgr__device *dev, const void *p);
/* Whether CUDA error err is sticky (the context is unusable for good). */
bool cgr__cuda_sticky(int err);
#endif

#endif
