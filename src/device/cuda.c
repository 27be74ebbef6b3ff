/*
 * device/cuda.c: the cuda backend.  A cgr stream on CUDA device i is a
 * CUDA stream (non-blocking, its priority clamped to the device's range);
 * events are CUDA events created with timing disabled, on the device of
 * their first record.  Host functions are cudaLaunchHostFunc, copies
 * cudaMemcpyAsync (cudaMemcpyDefault: host or device memory; a copy
 * between two plain host buffers is a host function, which CUDA orders on
 * the stream like any other operation), a wait for a
 * future a host function that blocks until it completes (a future is
 * completed by a CPU thread, never by CUDA work, so this is allowed).
 *
 * The CUDA runtime is loaded when a CUDA device is first used (dlopen of
 * libcudart, or of the library the environment variable CGR_CUDART names),
 * so libcgr.a links and runs without CUDA: a CUDA index then reports
 * -ENODEV and the context's log says why.
 *
 * Not supported on CUDA streams: internal CALL work (the CPU communicator:
 * its operations block on their peers, and CUDA may run the host functions
 * of different streams one at a time, so two ranks on one device could
 * wait for each other forever); such an operation fails with -ENOTSUP on
 * every rank.  Work left on a stream at destroy is not dropped (CUDA cannot
 * cancel it): it finishes after cgr_stream_destroy returns.
 *
 * Errors: a CUDA error that leaves the context unusable (illegal address,
 * launch failure, ECC, ...) fails the device for good (sticky, as in
 * CUDA): every later call and pending wait returns CGR_EDEVICE.  A bad
 * argument is -EINVAL, out of memory -ENOMEM, anything else -EIO (logged).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "device/device.h"
#include "reactor/reactor.h"

#ifndef CGR_CUDA_LIBDIR
#define CGR_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

/* The runtime functions cgr uses, resolved from libcudart. */
static struct {
	cudaError_t (*get_device_count)(int *);
	cudaError_t (*set_device)(int);
	cudaError_t (*priority_range)(int *, int *);
	cudaError_t (*stream_create)(cudaStream_t *, unsigned, int);
	cudaError_t (*stream_destroy)(cudaStream_t);
	cudaError_t (*stream_query)(cudaStream_t);
	cudaError_t (*launch_host)(cudaStream_t, cudaHostFn_t, void *);
	cudaError_t (*memcpy_async)(void *, const void *, size_t,
				    enum cudaMemcpyKind, cudaStream_t);
	cudaError_t (*event_create)(cudaEvent_t *, unsigned);
	cudaError_t (*event_destroy)(cudaEvent_t);
	cudaError_t (*event_record)(cudaEvent_t, cudaStream_t);
	cudaError_t (*event_query)(cudaEvent_t);
	cudaError_t (*stream_wait_event)(cudaStream_t, cudaEvent_t, unsigned);
	cudaError_t (*pointer_attributes)(struct cudaPointerAttributes *,
					  const void *);
	const char *(*error_name)(cudaError_t);
	const char *(*error_string)(cudaError_t);
} cgr__rt;

static pthread_once_t cgr__rt_once = PTHREAD_ONCE_INIT;
static int cgr__rt_ndev;      /* devices, or -ENODEV */
static char cgr__rt_why[256]; /* why there is none */

static void cgr__rt_load(void)
{
	static const char *const names[] = {
		"libcudart.so", "libcudart.so.13", "libcudart.so.12",
		CGR_CUDA_LIBDIR "/libcudart.so",
	};
	/* CGR_CUDART: the runtime library to load (a path). */
	const char *forced = getenv("CGR_CUDART");
	void *h = NULL;
	int n = 0;
	cudaError_t e;

	if (forced != NULL && forced[0] != 0)
		h = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
	for (size_t i = 0; h == NULL && i < sizeof(names) / sizeof(*names);
	     i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	cgr__rt_ndev = -ENODEV;
	if (h == NULL) {
		snprintf(cgr__rt_why, sizeof(cgr__rt_why),
			 "the CUDA runtime (libcudart) could not be loaded");
		return;
	}
#define CGR__SYM(field, name)                                              \
	do {                                                               \
		*(void **)&cgr__rt.field = dlsym(h, name);                 \
		if (cgr__rt.field == NULL) {                               \
			snprintf(cgr__rt_why, sizeof(cgr__rt_why),         \
				 "libcudart lacks %s", name);              \
			return;                                            \
		}                                                          \
	} while (0)
	CGR__SYM(get_device_count, "cudaGetDeviceCount");
	CGR__SYM(set_device, "cudaSetDevice");
	CGR__SYM(priority_range, "cudaDeviceGetStreamPriorityRange");
	CGR__SYM(stream_create, "cudaStreamCreateWithPriority");
	CGR__SYM(stream_destroy, "cudaStreamDestroy");
	CGR__SYM(stream_query, "cudaStreamQuery");
	CGR__SYM(launch_host, "cudaLaunchHostFunc");
	CGR__SYM(memcpy_async, "cudaMemcpyAsync");
	CGR__SYM(event_create, "cudaEventCreateWithFlags");
	CGR__SYM(event_destroy, "cudaEventDestroy");
	CGR__SYM(event_record, "cudaEventRecord");
	CGR__SYM(event_query, "cudaEventQuery");
	CGR__SYM(stream_wait_event, "cudaStreamWaitEvent");
	CGR__SYM(pointer_attributes, "cudaPointerGetAttributes");
	CGR__SYM(error_name, "cudaGetErrorName");
	CGR__SYM(error_string, "cudaGetErrorString");
#undef CGR__SYM
	e = cgr__rt.get_device_count(&n);
	if (e != cudaSuccess) {
		snprintf(cgr__rt_why, sizeof(cgr__rt_why),
			 "cudaGetDeviceCount: %s (%s)", cgr__rt.error_name(e),
			 cgr__rt.error_string(e));
		return;
	}
	cgr__rt_ndev = n;
	/* The handle stays open for the life of the process. */
}

/* Whether err leaves the CUDA context unusable (CUDA's sticky errors). */
static bool cgr__cu_sticky(cudaError_t err)
{
	switch (err) {
	case cudaErrorIllegalAddress:
	case cudaErrorLaunchFailure:
	case cudaErrorLaunchTimeout:
	case cudaErrorHardwareStackError:
	case cudaErrorIllegalInstruction:
	case cudaErrorMisalignedAddress:
	case cudaErrorInvalidAddressSpace:
	case cudaErrorInvalidPc:
	case cudaErrorECCUncorrectable:
	case cudaErrorAssert:
	case cudaErrorContextIsDestroyed:
	case cudaErrorDevicesUnavailable:
	case cudaErrorUnknown:
		return true;
	default:
		return false;
	}
}

/* Maps a CUDA result of `what` on dev (see the comment at the top). */
static int cgr__cu_ret(struct cgr__device *dev, cudaError_t err,
		       const char *what)
{
	char why[256];

	switch (err) {
	case cudaSuccess:
		return 0;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidResourceHandle:
		return -EINVAL;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	default:
		break;
	}
	snprintf(why, sizeof(why), "%s: %s (%s)", what,
		 cgr__rt.error_name(err), cgr__rt.error_string(err));
	if (cgr__cu_sticky(err)) {
		cgr__device_fail(dev, CGR_EDEVICE, why);
		return CGR_EDEVICE;
	}
	cgr__warn(dev->log, "cuda device %d: %s", dev->index, why);
	return -EIO;
}

static int cgr__cuda_device_init(struct cgr__device *dev)
{
	pthread_once(&cgr__rt_once, cgr__rt_load);
	if (cgr__rt_ndev < 0 || dev->index >= cgr__rt_ndev) {
		if (cgr__rt_ndev < 0)
			cgr__info(dev->log, "cuda device %d: %s", dev->index,
				  cgr__rt_why);
		else
			cgr__info(dev->log,
				  "cuda device %d: only %d CUDA device(s)",
				  dev->index, cgr__rt_ndev);
		return -ENODEV;
	}
	if (cgr__rt.set_device(dev->index) != cudaSuccess) {
		cgr__info(dev->log, "cuda device %d: cudaSetDevice failed",
			  dev->index);
		return -ENODEV;
	}
	return 0;
}

/* Every call that names a stream sets its device first (the runtime's
 * current device is per thread). */
static cudaStream_t cgr__cu_stream(cgr_stream *s)
{
	cgr__rt.set_device(s->dev->index);
	return (cudaStream_t)s->cu;
}

static int cgr__cuda_stream_init(cgr_stream *s)
{
	struct cgr__device *dev = s->dev;
	int least = 0, greatest = 0, prio = s->priority;
	cudaStream_t cs;
	cudaError_t e;

	cgr__bell_init(&s->bell);
	cgr__bell_init(&s->pbell);
	atomic_init(&s->stop, 0);
	e = cgr__rt.set_device(dev->index);
	if (e == cudaSuccess)
		e = cgr__rt.priority_range(&least, &greatest);
	if (e != cudaSuccess)
		return cgr__cu_ret(dev, e, "cudaDeviceGetStreamPriorityRange");
	/* Lower is more urgent in both: clamp into [greatest, least]. */
	prio = prio < greatest ? greatest : prio > least ? least : prio;
	e = cgr__rt.stream_create(&cs, cudaStreamNonBlocking, prio);
	if (e != cudaSuccess)
		return cgr__cu_ret(dev, e, "cudaStreamCreateWithPriority");
	s->cu = cs;
	return 0;
}

/* Polls the stream until its work is done or deadline: 0, -ETIMEDOUT, or
 * the device's error. */
static int cgr__cuda_synchronize(cgr_stream *s, int64_t deadline)
{
	cudaStream_t cs = cgr__cu_stream(s);
	long nap = 1000; /* ns, doubling up to 100 us */

	for (;;) {
		cudaError_t e = cgr__rt.stream_query(cs);
		int err = cgr__device_error(s->dev);
		if (err)
			return err;
		if (e == cudaSuccess)
			return 0;
		if (e != cudaErrorNotReady)
			return cgr__cu_ret(s->dev, e, "cudaStreamQuery");
		if (cgr__now_ns() >= deadline)
			return -ETIMEDOUT;
		struct timespec ts = { 0, nap };
		nanosleep(&ts, NULL);
		if (nap < 100000)
			nap *= 2;
	}
}

static void cgr__cuda_stream_fini(cgr_stream *s, int64_t deadline)
{
	if (cgr__cuda_synchronize(s, deadline) == -ETIMEDOUT)
		cgr__warn(s->dev->log,
			  "cuda stream destroyed with work left: it finishes "
			  "in the background");
	atomic_store_explicit(&s->stop, 1, memory_order_release);
	cgr__bell_ring_force(&s->pbell);
	/* Returns at once; CUDA frees the stream when its work is done. */
	cgr__rt.stream_destroy(cgr__cu_stream(s));
}

static void cgr__cuda_stream_free(cgr_stream *s)
{
	(void)s;
}

/* A host function waiting for a future (cgr_future_stream_wait). */
static bool cgr__cuda_fut_ready(void *arg)
{
	int res;
	return cgr__dfuture_test(arg, &res) != 0;
}

static void CUDART_CB cgr__cuda_waitf(void *arg)
{
	struct cgr__dfuture *f = arg;

	cgr__reactor_wait(NULL, f->s != NULL ? &f->s->pbell : &f->bell,
			  cgr__cuda_fut_ready, f, NULL, CGR_WAIT_ADAPTIVE,
			  20000, CGR_FOREVER);
	cgr__dfuture_put(f);
}

/* Whether p is host memory CUDA does not know (malloc'd, stack). */
static bool cgr__cu_plain_host(const void *p)
{
	struct cudaPointerAttributes a;

	if (cgr__rt.pointer_attributes(&a, p) != cudaSuccess)
		return true; /* older runtimes: unregistered host memory */
	return a.type == cudaMemoryTypeUnregistered;
}

struct cgr__cu_copy {
	void *dst;
	const void *src;
	size_t n;
	struct cgr__arena *arena;
};

static void CUDART_CB cgr__cuda_host_copy(void *arg)
{
	struct cgr__cu_copy *c = arg;

	memmove(c->dst, c->src, c->n);
	cgr__free(c->arena, c, sizeof(*c), 16);
}

static int cgr__cuda_copy(cgr_stream *s, cudaStream_t cs,
			  const struct cgr__sop *op)
{
	struct cgr__cu_copy *c;
	cudaError_t e;

	if (!cgr__cu_plain_host(op->u.copy.dst) ||
	    !cgr__cu_plain_host(op->u.copy.src)) {
		e = cgr__rt.memcpy_async(op->u.copy.dst, op->u.copy.src,
					 op->u.copy.n, cudaMemcpyDefault, cs);
		return cgr__cu_ret(s->dev, e, "cudaMemcpyAsync");
	}
	c = cgr__alloc(s->dev->arena, sizeof(*c), 16);
	if (c == NULL)
		return -ENOMEM;
	c->dst = op->u.copy.dst;
	c->src = op->u.copy.src;
	c->n = op->u.copy.n;
	c->arena = s->dev->arena;
	e = cgr__rt.launch_host(cs, cgr__cuda_host_copy, c);
	if (e != cudaSuccess)
		cgr__free(c->arena, c, sizeof(*c), 16);
	return cgr__cu_ret(s->dev, e, "cudaLaunchHostFunc");
}

static int cgr__cuda_enqueue(cgr_stream *s, const struct cgr__sop *op)
{
	cudaStream_t cs = cgr__cu_stream(s);
	cudaError_t e;

	switch (op->kind) {
	case CGR__SOP_HOST:
		e = cgr__rt.launch_host(cs, op->u.host.fn, op->u.host.arg);
		return cgr__cu_ret(s->dev, e, "cudaLaunchHostFunc");
	case CGR__SOP_COPY:
		if (op->u.copy.n == 0)
			return 0;
		return cgr__cuda_copy(s, cs, op);
	case CGR__SOP_WAITF:
		e = cgr__rt.launch_host(cs, cgr__cuda_waitf, op->u.waitf.f);
		return cgr__cu_ret(s->dev, e, "cudaLaunchHostFunc");
	case CGR__SOP_CALL:
		return -ENOTSUP; /* see the comment at the top */
	default:
		return -EINVAL;
	}
}

static int cgr__cuda_event_record(cgr_event *e, cgr_stream *s)
{
	cudaStream_t cs = cgr__cu_stream(s);
	cgr_stream *old;
	cudaError_t ce = cudaSuccess;
	int ret = 0;

	cgr__event_lock(e);
	if (e->cu == NULL) {
		cudaEvent_t ev;
		ce = cgr__rt.event_create(&ev, cudaEventDisableTiming);
		if (ce == cudaSuccess) {
			e->cu = ev;
			e->cu_dev = s->dev->index;
		}
	} else if (e->cu_dev != s->dev->index) {
		ret = -EINVAL; /* a CUDA event belongs to one device */
	}
	if (ret == 0 && ce == cudaSuccess)
		ce = cgr__rt.event_record((cudaEvent_t)e->cu, cs);
	old = NULL;
	if (ret == 0 && ce == cudaSuccess) {
		cgr__stream_ref(s);
		old = e->s;
		e->s = s; /* for its device's sticky error */
		e->gen++;
	}
	cgr__event_unlock(e);
	if (old != NULL)
		cgr__stream_put(old);
	if (ret < 0)
		return ret;
	return cgr__cu_ret(s->dev, ce, "cudaEventRecord");
}

/* The event's CUDA event and stream (referenced), or NULL. */
static void *cgr__cuda_event_get(cgr_event *e, cgr_stream **s)
{
	void *cu;

	cgr__event_lock(e);
	cu = e->cu;
	*s = e->s;
	if (*s != NULL)
		cgr__stream_ref(*s);
	cgr__event_unlock(e);
	return cu;
}

static int cgr__cuda_event_query(cgr_event *e)
{
	cgr_stream *s;
	void *cu = cgr__cuda_event_get(e, &s);
	int ret;

	if (s == NULL)
		return 0; /* never recorded */
	ret = cgr__device_error(s->dev);
	if (ret == 0) {
		cudaError_t ce = cgr__rt.event_query((cudaEvent_t)cu);
		ret = ce == cudaErrorNotReady ?
			      0 :
		      ce == cudaSuccess ?
			      1 :
			      cgr__cu_ret(s->dev, ce, "cudaEventQuery");
	}
	cgr__stream_put(s);
	return ret;
}

static int cgr__cuda_stream_wait_event(cgr_stream *s, cgr_event *e)
{
	cgr_stream *t;
	void *cu = cgr__cuda_event_get(e, &t);
	cudaError_t ce;

	if (t == NULL)
		return 0; /* never recorded: nothing to wait for */
	/* CUDA captures the event's current record, as cgr.h says. */
	ce = cgr__rt.stream_wait_event(cgr__cu_stream(s), (cudaEvent_t)cu, 0);
	cgr__stream_put(t);
	return cgr__cu_ret(s->dev, ce, "cudaStreamWaitEvent");
}

static void cgr__cuda_event_free(cgr_event *e)
{
	if (e->cu != NULL) {
		cgr__rt.set_device(e->cu_dev);
		cgr__rt.event_destroy((cudaEvent_t)e->cu);
	}
}

static void cgr__cuda_wake_all(struct cgr__device *dev)
{
	cgr_stream *s;

	pthread_mutex_lock(&dev->lock);
	for (s = dev->streams; s != NULL; s = s->next)
		cgr__bell_ring_force(&s->pbell);
	pthread_mutex_unlock(&dev->lock);
}

const struct cgr__device_ops cgr__cuda_ops = {
	.name = "cuda",
	.device_init = cgr__cuda_device_init,
	.stream_init = cgr__cuda_stream_init,
	.stream_fini = cgr__cuda_stream_fini,
	.stream_free = cgr__cuda_stream_free,
	.enqueue = cgr__cuda_enqueue,
	.synchronize = cgr__cuda_synchronize,
	.event_record = cgr__cuda_event_record,
	.event_query = cgr__cuda_event_query,
	.stream_wait_event = cgr__cuda_stream_wait_event,
	.event_free = cgr__cuda_event_free,
	.future_wait = cgr__bound_future_wait,
	.wake_all = cgr__cuda_wake_all,
};
