/*
 * device/stream.c: the public stream calls (cgr_stream_*: argument checks,
 * then the backend's ops) and the waits a stream's executor makes for a
 * polled future or another backend's event.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"

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
	cgr__stream_hand_over();
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
