/*
 * device/device.c: the backend-independent half of the device layer:
 * the device table and sticky errors, the public stream and event calls
 * (argument checks, then the backend's ops), and futures.
 *
 * The device table lives in the context (ctx->devices, under ctx->lock):
 * it maps an index to the context's device, so contexts never see each
 * other's devices.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"

static const struct cgr__device_ops *cgr__backend(int index)
{
	if (index == CGR_DEVICE_SIM)
		return &cgr__sim_ops;
#ifdef HAVE_CUDA
	if (index >= 0)
		return &cgr__cuda_ops;
#endif
	return NULL;
}

/* A reference unless the count already reached 0 (the device is dying and
 * its last holder is about to unlink it). */
static bool cgr__device_tryref(struct cgr__device *dev)
{
	uint32_t n = atomic_load_explicit(&dev->refs, memory_order_relaxed);

	while (n != 0)
		if (atomic_compare_exchange_weak_explicit(
			&dev->refs, &n, n + 1, memory_order_relaxed,
			memory_order_relaxed))
			return true;
	return false;
}

int cgr__device_get(cgr_ctx *ctx, int index, struct cgr__device **out)
{
	const struct cgr__device_ops *ops;
	struct cgr__device *dev;
	int ret = 0;

	if (ctx == NULL || out == NULL)
		return -EINVAL;
	ops = cgr__backend(index);
	if (ops == NULL && index >= 0) {
		/* cgr.h: the log says why there is no such device. */
		cgr__info(&ctx->log,
			  "cuda device %d: this build has no cuda backend "
			  "(configured without the CUDA toolkit)",
			  index);
		return -ENODEV;
	}
	if (ops == NULL)
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	for (dev = ctx->devices; dev != NULL; dev = dev->next)
		if (dev->ctx == ctx && dev->index == index &&
		    cgr__device_tryref(dev))
			goto found;
	dev = cgr__alloc(&ctx->arena, sizeof(*dev), CGR__CACHELINE);
	if (dev == NULL) {
		ret = -ENOMEM;
		goto found;
	}
	dev->ops = ops;
	dev->ctx = ctx;
	dev->arena = &ctx->arena;
	dev->log = &ctx->log;
	dev->index = index;
	atomic_init(&dev->err, 0);
	atomic_init(&dev->refs, 1);
	pthread_mutex_init(&dev->lock, NULL);
	dev->streams = NULL;
	if (ops->device_init != NULL && (ret = ops->device_init(dev)) < 0) {
		pthread_mutex_destroy(&dev->lock);
		cgr__free(dev->arena, dev, sizeof(*dev), CGR__CACHELINE);
		goto found;
	}
	cgr__ctx_ref(ctx);
	dev->next = ctx->devices;
	ctx->devices = dev;
found:
	pthread_mutex_unlock(&ctx->lock);
	if (ret == 0)
		*out = dev;
	return ret;
}

void cgr__device_put(struct cgr__device *dev)
{
	struct cgr__device **pp;
	cgr_ctx *ctx;

	/* Acq_rel: the last holder sees every other holder's writes. */
	if (atomic_fetch_sub_explicit(&dev->refs, 1, memory_order_acq_rel) != 1)
		return;
	ctx = dev->ctx;
	pthread_mutex_lock(&ctx->lock);
	for (pp = &ctx->devices; *pp != NULL; pp = &(*pp)->next)
		if (*pp == dev) {
			*pp = dev->next;
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	pthread_mutex_destroy(&dev->lock);
	cgr__free(dev->arena, dev, sizeof(*dev), CGR__CACHELINE);
	cgr__ctx_put(ctx);
}

void cgr__device_fail(struct cgr__device *dev, int err, const char *why)
{
	int32_t zero = 0;

	if (err >= 0)
		err = CGR_EDEVICE;
	/* F0: release: whoever reads the error (acquire, in
	 * cgr__device_error) sees what the failer did before. */
	if (!atomic_compare_exchange_strong_explicit(&dev->err, &zero, err,
						     memory_order_seq_cst,
						     memory_order_relaxed)) {
		cgr__info(dev->log, "device %d: already failed; also: %s",
			  dev->index, why != NULL ? why : "(no reason)");
		return;
	}
	cgr__err(dev->log, "device %d failed (%s): %s", dev->index,
		 cgr_err_name(err), why != NULL ? why : "(no reason)");
	/* Every waiter parked on the device's streams wakes and sees it. */
	pthread_mutex_lock(&dev->lock);
	for (cgr_stream *s = dev->streams; s != NULL; s = s->next) {
		cgr__bell_ring_force(&s->bell);
		cgr__bell_ring_force(&s->pbell);
	}
	pthread_mutex_unlock(&dev->lock);
	/* ...and every backend that waits for this device's futures on a
	 * thread of its own (the cuda gate waker). */
	pthread_mutex_lock(&dev->ctx->lock);
	for (struct cgr__device *d = dev->ctx->devices; d != NULL; d = d->next)
		if (d->ops->device_failed != NULL)
			d->ops->device_failed(d, dev);
	pthread_mutex_unlock(&dev->ctx->lock);
}

/* ---- streams ------------------------------------------------------- */

int cgr__stream_create_on(struct cgr__device *dev, int priority,
			  cgr_stream **out)
{
	cgr_stream *s;
	int ret;

	if (dev == NULL || out == NULL)
		return -EINVAL;
	s = cgr__alloc(dev->arena, sizeof(*s), CGR__CACHELINE);
	if (s == NULL)
		return -ENOMEM;
	atomic_fetch_add_explicit(&dev->refs, 1, memory_order_relaxed);
	s->dev = dev;
	s->priority = priority;
	atomic_init(&s->refs, 1);
	ret = dev->ops->stream_init(s);
	if (ret < 0) {
		cgr__free(dev->arena, s, sizeof(*s), CGR__CACHELINE);
		cgr__device_put(dev);
		return ret;
	}
	pthread_mutex_lock(&dev->lock);
	s->prev = NULL;
	s->next = dev->streams;
	if (dev->streams != NULL)
		dev->streams->prev = s;
	dev->streams = s;
	pthread_mutex_unlock(&dev->lock);
	*out = s;
	return 0;
}

void cgr__stream_put(cgr_stream *s)
{
	struct cgr__device *dev = s->dev;

	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
		return;
	pthread_mutex_lock(&dev->lock);
	if (s->prev != NULL)
		s->prev->next = s->next;
	else
		dev->streams = s->next;
	if (s->next != NULL)
		s->next->prev = s->prev;
	pthread_mutex_unlock(&dev->lock);
	dev->ops->stream_free(s);
	cgr__free(dev->arena, s, sizeof(*s), CGR__CACHELINE);
	cgr__device_put(dev);
}

int cgr__stream_enqueue(cgr_stream *s, const struct cgr__sop *op)
{
	if (s == NULL || op == NULL)
		return -EINVAL;
	return s->dev->ops->enqueue(s, op);
}

int cgr_stream_create(cgr_ctx *ctx, int device, int priority,
		      cgr_stream **out)
{
	struct cgr__device *dev;
	int ret;

	if (ctx == NULL || out == NULL)
		return -EINVAL;
	ret = cgr__device_get(ctx, device, &dev);
	if (ret < 0)
		return ret;
	ret = cgr__stream_create_on(dev, priority, out);
	cgr__device_put(dev);
	return ret;
}

void cgr_stream_destroy(cgr_stream *s)
{
	if (s == NULL)
		return;
	s->dev->ops->stream_fini(s, cgr__deadline(1000000000));
	cgr__stream_put(s);
}

int cgr_stream_synchronize(cgr_stream *s, int64_t timeout_ns)
{
	if (s == NULL)
		return -EINVAL;
	if (timeout_ns < 0)
		timeout_ns = CGR_FOREVER;
	return s->dev->ops->synchronize(s, cgr__deadline(timeout_ns));
}

int cgr_stream_launch_host(cgr_stream *s, void (*fn)(void *arg), void *arg)
{
	struct cgr__sop op = { .kind = CGR__SOP_HOST };
	int err;

	if (s == NULL || fn == NULL)
		return -EINVAL;
	err = cgr__device_error(s->dev);
	if (err)
		return err;
	op.u.host.fn = fn;
	op.u.host.arg = arg;
	return s->dev->ops->enqueue(s, &op);
}

int cgr_stream_memcpy_async(cgr_stream *s, void *dst, const void *src,
			    size_t n)
{
	struct cgr__sop op = { .kind = CGR__SOP_COPY };
	int err;

	if (s == NULL || (n != 0 && (dst == NULL || src == NULL)))
		return -EINVAL;
	err = cgr__device_error(s->dev);
	if (err)
		return err;
	op.u.copy.dst = dst;
	op.u.copy.src = src;
	op.u.copy.n = n;
	return s->dev->ops->enqueue(s, &op);
}

/* One nap of a poll (1 us doubling to 100 us in *nap); false when the
 * waiter (may be NULL) has failed or stops: give up. */
static bool poll_nap(cgr_stream *waiter, long *nap)
{
	struct timespec ts = { 0, *nap };

	if (waiter != NULL && (cgr__device_error(waiter->dev) != 0 ||
			       cgr__stream_stopping(waiter) != 0))
		return false;
	nanosleep(&ts, NULL);
	if (*nap < 100000)
		*nap *= 2;
	return true;
}

void cgr__dfuture_poll_wait(struct cgr__dfuture *df, cgr_stream *waiter)
{
	long nap = 1000;
	int res;

	while (!cgr__dfuture_test(df, &res) && poll_nap(waiter, &nap))
		;
}

void cgr__waite_run(cgr_stream *waiter, const struct cgr__sop *op)
{
	const struct cgr__device_ops *ops = op->u.waite.ops;
	long nap = 1000;

	while (ops->snap_query(op->u.waite.snap, op->u.waite.pos) == 0 &&
	       poll_nap(waiter, &nap))
		;
	ops->snap_put(op->u.waite.snap);
}

/* ---- events -------------------------------------------------------- */

int cgr_event_create(cgr_ctx *ctx, cgr_event **out)
{
	cgr_event *e;

	if (ctx == NULL || out == NULL)
		return -EINVAL;
	e = cgr__alloc(&ctx->arena, sizeof(*e), CGR__CACHELINE);
	if (e == NULL)
		return -ENOMEM;
	cgr__ctx_ref(ctx);
	e->ctx = ctx;
	e->arena = &ctx->arena;
	atomic_flag_clear(&e->lock);
	e->ops = NULL;
	e->s = NULL;
	e->pos = 0;
	e->gen = 0;
	*out = e;
	return 0;
}

void cgr_event_destroy(cgr_event *e)
{
	cgr_ctx *ctx;

	if (e == NULL)
		return;
	if (e->ops != NULL && e->ops->event_free != NULL)
		e->ops->event_free(e);
	if (e->s != NULL)
		cgr__stream_put(e->s);
	ctx = e->ctx;
	cgr__free(e->arena, e, sizeof(*e), CGR__CACHELINE);
	cgr__ctx_put(ctx);
}

int cgr_event_record(cgr_event *e, cgr_stream *s)
{
	int err;

	if (e == NULL || s == NULL)
		return -EINVAL;
	err = cgr__device_error(s->dev);
	if (err)
		return err;
	cgr__event_lock(e);
	if (e->ops == NULL)
		e->ops = s->dev->ops;
	else if (e->ops != s->dev->ops)
		err = -EINVAL;
	cgr__event_unlock(e);
	if (err)
		return err;
	return s->dev->ops->event_record(e, s);
}

int cgr_event_query(cgr_event *e)
{
	const struct cgr__device_ops *ops;

	if (e == NULL)
		return -EINVAL;
	cgr__event_lock(e);
	ops = e->ops;
	cgr__event_unlock(e);
	/* Never recorded: never complete. */
	return ops == NULL ? 0 : ops->event_query(e);
}

int cgr_stream_wait_event(cgr_stream *s, cgr_event *e)
{
	const struct cgr__device_ops *ops;
	int err;

	if (s == NULL || e == NULL)
		return -EINVAL;
	err = cgr__device_error(s->dev);
	if (err)
		return err;
	cgr__event_lock(e);
	ops = e->ops;
	cgr__event_unlock(e);
	if (ops != NULL && ops != s->dev->ops) {
		/* An event of another backend: s polls a snapshot of its
		 * current record. */
		struct cgr__sop op = { .kind = CGR__SOP_WAITE };
		int ret = ops->event_snap(e, &op.u.waite.snap,
					  &op.u.waite.pos);
		if (ret != 0)
			return ret < 0 ? ret : 0;
		op.u.waite.ops = ops;
		ret = s->dev->ops->enqueue(s, &op);
		if (ret < 0)
			ops->snap_put(op.u.waite.snap);
		return ret;
	}
	return s->dev->ops->stream_wait_event(s, e);
}

/* ---- futures ------------------------------------------------------- */

int cgr__dfuture_create(cgr_ctx *ctx, cgr_stream *s,
			struct cgr__dfuture **out)
{
	struct cgr__dfuture *df;

	df = cgr__alloc(&ctx->arena, sizeof(*df), CGR__CACHELINE);
	if (df == NULL)
		return -ENOMEM;
	cgr__future_init(&df->f);
	df->gen = cgr__future_arm(&df->f);
	df->magic = CGR__DFUTURE_MAGIC;
	atomic_init(&df->refs, 2);
	cgr__bell_init(&df->bell);
	df->s = s;
	if (s != NULL)
		cgr__stream_ref(s);
	cgr__ctx_ref(ctx);
	df->ctx = ctx;
	df->arena = &ctx->arena;
	df->poll = NULL;
	df->poll_fini = NULL;
	df->poll_arg = NULL;
	df->ev = NULL;
	atomic_init(&df->wbell, NULL);
	atomic_flag_clear(&df->claimed);
	*out = df;
	return 0;
}

void cgr__dfuture_poll_by(struct cgr__dfuture *df,
			  int (*poll)(void *arg, int *result),
			  void (*poll_fini)(void *arg), void *arg)
{
	df->poll = poll;
	df->poll_fini = poll_fini;
	df->poll_arg = arg;
}

void cgr__dfuture_put(struct cgr__dfuture *df)
{
	cgr_ctx *ctx;

	if (atomic_fetch_sub_explicit(&df->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (df->s != NULL)
		cgr__stream_put(df->s);
	if (df->poll_fini != NULL)
		df->poll_fini(df->poll_arg);
	ctx = df->ctx;
	df->magic = 0;
	cgr__free(df->arena, df, sizeof(*df), CGR__CACHELINE);
	cgr__ctx_put(ctx);
}

void cgr__dfuture_complete(struct cgr__dfuture *df, int result)
{
	if (result > 0)
		result = 0;
	/* The future's C2 (release) publishes the completer's writes. */
	cgr__future_complete(&df->f, df->gen, result);
	/* Waiters park on the bound stream's position bell, or on the
	 * future's own bell (the ring's fence pairs with their prepare). */
	if (df->s != NULL)
		cgr__bell_ring(&df->s->pbell);
	else
		cgr__bell_ring(&df->bell);
	/* A device waiting through a backend's thread (cuda.c, B1): the
	 * ring above fenced C2 before this load. */
	struct cgr__bell *wb =
	    atomic_load_explicit(&df->wbell, memory_order_relaxed);
	if (wb != NULL)
		cgr__bell_ring(wb);
	cgr__dfuture_put(df);
}

int cgr__dfuture_test(struct cgr__dfuture *df, int *result)
{
	int res = 0, t;

	t = cgr__future_test(&df->f, df->gen, &res);
	if (t == 1) {
		*result = res;
		return 1;
	}
	if (df->poll != NULL && df->poll(df->poll_arg, &res) == 1) {
		/* The first to see it done completes it (the completer's
		 * reference goes with that); everybody has the result. */
		if (!atomic_flag_test_and_set(&df->claimed))
			cgr__dfuture_complete(df, res);
		*result = res;
		return 1;
	}
	if (df->s != NULL) {
		int err = cgr__device_error(df->s->dev);
		if (err) {
			*result = err;
			return 1;
		}
	}
	return 0;
}

struct cgr__dfuture *cgr__dfuture_of(cgr_future *f)
{
	struct cgr__dfuture *df = (struct cgr__dfuture *)f;

	if (f == NULL || df->magic != CGR__DFUTURE_MAGIC)
		return NULL;
	return df;
}

int cgr_future_test(cgr_future *f)
{
	struct cgr__dfuture *df = cgr__dfuture_of(f);
	int res;

	if (df == NULL)
		return -EINVAL;
	if (!cgr__dfuture_test(df, &res))
		return 0;
	return res == 0 ? 1 : res;
}

static bool cgr__dfuture_ready(void *arg)
{
	int res;
	return cgr__dfuture_test(arg, &res) != 0;
}

/* Waits for df, bound to a stream: its completer rings the stream's
 * position bell, a device failure every bell of the device. */
static int cgr__bound_future_wait(struct cgr__dfuture *df, int64_t deadline)
{
	int res;

	cgr__stream_kick(df->s);
	cgr__reactor_wait(NULL, &df->s->pbell, cgr__dfuture_ready, df, NULL,
			  CGR_WAIT_ADAPTIVE, 20000, deadline);
	if (cgr__dfuture_test(df, &res))
		return res;
	return -ETIMEDOUT;
}

/* Waits for a polled future: polls, spinning for 20 us, then sleeping
 * from 1 us to 100 us between polls. */
/* Nobody rings for a polled future (a device completes it): spin, then
 * yield the core while polling (a nap costs tens of us of timer slack,
 * more than most device operations take), then nap. */
static int polled_future_wait(struct cgr__dfuture *df, int64_t deadline)
{
	int64_t t0 = cgr__now_ns();
	int64_t spin_end = t0 + 20000, yield_end = t0 + 2000000;
	long nap = 1000;
	int res;

	while (!cgr__dfuture_test(df, &res)) {
		int64_t now = cgr__now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		if (now < spin_end) {
			cgr__cpu_relax();
			continue;
		}
		if (now < yield_end) {
			sched_yield();
			continue;
		}
		struct timespec ts = { 0, nap };
		nanosleep(&ts, NULL);
		if (nap < 100000)
			nap *= 2;
	}
	return res;
}

int cgr_future_wait(cgr_future *f, int64_t timeout_ns)
{
	struct cgr__dfuture *df = cgr__dfuture_of(f);
	int64_t deadline;
	int res;

	if (df == NULL)
		return -EINVAL;
	if (timeout_ns < 0)
		timeout_ns = 10000000000; /* the 10 s default of cgr.h */
	deadline = cgr__deadline(timeout_ns);
	if (df->poll != NULL)
		return polled_future_wait(df, deadline);
	if (df->s != NULL)
		return cgr__bound_future_wait(df, deadline);
	cgr__reactor_wait(NULL, &df->bell, cgr__dfuture_ready, df, NULL,
			  CGR_WAIT_ADAPTIVE, 20000, deadline);
	if (cgr__dfuture_test(df, &res))
		return res;
	return -ETIMEDOUT;
}

int cgr_future_stream_wait(cgr_future *f, cgr_stream *s)
{
	struct cgr__dfuture *df = cgr__dfuture_of(f);
	struct cgr__sop op = { .kind = CGR__SOP_WAITF };
	int err, res, ret;

	if (df == NULL || s == NULL)
		return -EINVAL;
	err = cgr__device_error(s->dev);
	if (err)
		return err;
	if (cgr__future_test(&df->f, df->gen, &res) == 1)
		return 0; /* already complete: nothing to wait for */
	if (df->ev != NULL)
		return cgr_stream_wait_event(s, df->ev);
	cgr__dfuture_ref(df);
	op.u.waitf.f = df;
	ret = s->dev->ops->enqueue(s, &op);
	if (ret < 0)
		cgr__dfuture_put(df);
	return ret;
}

void cgr_future_release(cgr_future *f)
{
	struct cgr__dfuture *df = cgr__dfuture_of(f);

	if (df == NULL)
		return;
	/* A polled future nobody saw done: its completer is whoever polls,
	 * and the holder who stops caring takes the completer's reference
	 * along (a stream still waiting on it polls to the end). */
	if (df->poll != NULL && !atomic_flag_test_and_set(&df->claimed))
		cgr__dfuture_put(df);
	cgr__dfuture_put(df);
}

/* ---- device memory ----------------------------------------------------- */

int cgr__device_malloc(struct cgr__device *dev, size_t size, void **out)
{
	if (dev->ops->mem_alloc == NULL)
		return -ENODEV;
	return dev->ops->mem_alloc(dev, size, out);
}

void cgr__device_free(struct cgr__device *dev, void *p)
{
	if (p != NULL && dev->ops->mem_free != NULL)
		dev->ops->mem_free(dev, p);
}

int cgr__device_memcpy(struct cgr__device *dev, void *dst, const void *src,
		       size_t n)
{
	if (dev->ops->mem_copy == NULL)
		return -ENODEV;
	return dev->ops->mem_copy(dev, dst, src, n);
}
