/*
 * device/device.c: the backend-independent half of the device layer: the
 * device table and sticky errors, and device memory.  The public stream,
 * event and future calls are in stream.c, event.c and future.c.
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
