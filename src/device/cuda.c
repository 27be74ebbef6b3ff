/*
 * device/cuda.c: the cuda backend.  A cgr stream on CUDA device i is a
 * CUDA stream (non-blocking, its priority clamped to the device's range);
 * events are CUDA events created with timing disabled, on the device of
 * their first record.  Host functions are cudaLaunchHostFunc, copies
 * cudaMemcpyAsync (cudaMemcpyDefault: host or device memory; a copy
 * between two plain host buffers is a host function, which CUDA orders on
 * the stream like any other operation).
 *
 * Host functions never block: CUDA runs them on an internal thread and may
 * run those of every stream of a device one at a time, so one that waited
 * for another stream's progress or for a future could wait for ever.  A
 * stream that must wait for something only the host sees (a pending future,
 * cgr_future_stream_wait; an event of another backend, cgr_stream_wait_event)
 * waits on the device instead: it takes a gate, a 32-bit word in mapped
 * pinned host memory (cudaHostAlloc), closed (0) and enqueues
 * cuStreamWaitValue32(word >= 1), then a host function that only marks
 * the gate free again (one atomic store).  The context's gate waker, a
 * thread of cgr's started at the first such wait and joined when the
 * context goes, opens the gate (stores 1) once the future completed, the
 * event's record passed, or a device involved failed; completing a future
 * rings its bell, and it polls (1 us to 100 us apart) only while it holds
 * polled futures or foreign events.  A device without stream memory
 * operations (or a runtime without the driver entry point) cannot wait so:
 * such a wait returns -ENOTSUP, and the context's log says why, once per
 * device.  A wait for a future already complete needs no gate.
 *
 * The CUDA runtime is loaded when a context first uses a CUDA device
 * (dlopen of cgr_ctx_params.cudart_path, else by soname, newest first:
 * libcudart.so.13, then libcudart.so.12, from the loader's path and then
 * the build's toolkit; never the unversioned libcudart.so, a development
 * link that may name another major version), so libcgr.a links and runs
 * without CUDA: a CUDA index then reports -ENODEV and the context's log
 * says why.  The runtime must report (cudaRuntimeGetVersion) a 12.x or
 * 13.x version: the calls cgr makes keep one ABI across both, except
 * cudaPointerAttributes, which 13.0 made larger (device/cudart_abi.h).
 *
 * Not supported on CUDA streams: internal CALL work (the CPU communicator:
 * its operations block on their peers, and CUDA may run the host functions
 * of different streams one at a time, so two ranks on one device could
 * wait for each other forever); such an operation fails with -ENOTSUP on
 * every rank.  Work left on a stream at destroy is not dropped (CUDA cannot
 * cancel it): it finishes after cgr_stream_destroy returns.
 *
 * Two operations allocate a small record each: a copy between plain host
 * buffers (freed by its host function) and a gated wait (freed by the
 * waker); the rest allocate nothing.
 *
 * Errors: a CUDA error that leaves the context unusable (illegal address,
 * launch failure, ECC, ...) fails the device for good (sticky, as in
 * CUDA): every later call and pending wait returns CGR_EDEVICE.  Which
 * errors are sticky is read from the doc comments of driver_types.h
 * ("leaves the process in an inconsistent state", "must be terminated and
 * relaunched"), checked against the header by tests/cuda-conformance.  A
 * bad argument is -EINVAL, out of memory -ENOMEM, anything else -EIO
 * (logged).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "device/cudart_abi.h"
#include "device/device.h"
#include "device/lib.h"
#include "reactor/reactor.h"

#ifndef CGR_CUDA_LIBDIR
#define CGR_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

/*
 * Gates (see the comment at the top): one page of mapped pinned memory
 * holds CGR__GATES gate words and their state; pages are added as needed
 * and freed with the context.  A gate is busy from its take (under
 * gate_lock) until its stream passed the wait: the host function behind
 * the wait stores 0 into busy[i] and touches nothing else, so a page whose
 * gates are still busy when the context goes is left allocated, never
 * freed under a late host function.
 */
#define CGR__GATE_PAGE 4096
#define CGR__GATES 448

struct cgr__cu_gates {
	_Atomic uint32_t word[CGR__GATES]; /* the device waits for >= 1 */
	_Atomic uint8_t busy[CGR__GATES];
	int16_t dev[CGR__GATES]; /* the device of its stream */
	CUdeviceptr dptr;	 /* the device address of word[0] */
	struct cgr__cu_gates *next;
	unsigned cursor; /* where the next take starts looking */
};
_Static_assert(sizeof(struct cgr__cu_gates) <= CGR__GATE_PAGE,
	       "gates outgrew their page");

/* A pending gate: what the waker tests, and the references it holds. */
struct cgr__cu_wait {
	struct cgr__cu_wait *next;
	_Atomic uint32_t *word;
	cgr_stream *s; /* the waiting stream (referenced) */
	struct cgr__sop op; /* WAITF or WAITE, its reference moved in */
	bool polled;	    /* nobody rings for it: poll */
	struct cgr__arena *arena;
};

/*
 * The gate waker.  Plain malloc, not the context's arena: the last
 * reference of a context may be dropped on the waker's own thread (it
 * holds streams and futures), and the thread then outlives the context
 * by a few instructions.  refs: the context's runtime state and the
 * thread.
 */
struct cgr__cu_waker {
	struct cgr__bell bell; /* rung by completions, failures, new gates */
	pthread_mutex_t lock; /* inbox */
	struct cgr__cu_wait *inbox;
	_Atomic uint32_t stop;
	_Atomic uint32_t refs;
	pthread_t thread;
};

/* Per device, in the runtime state. */
#define CGR__CU_NOMEMOPS 1u  /* no stream memory operations (logged) */
#define CGR__CU_DEAD 2u	     /* CUDA reported a sticky error */

/* The runtime functions cgr uses, resolved from libcudart: one table per
 * context (cgr__ctx_state), since each context may name its own library
 * (cgr_ctx_params.cudart_path), with the context's gates and waker. */
struct cgr__cudart {
	int ndev;	/* devices, or -ENODEV */
	int version;	/* cudaRuntimeGetVersion's, or 0 */
	char why[256];	/* why there is none */
	char path[192];	/* the library loaded */
#define CGR__FIELD(field, name, ret, args) ret(*field) args;
	CGR__CUDART_CALLS(CGR__FIELD)
	CGR__CUDART_OPTIONAL(CGR__FIELD)
	CGR__CU_DRIVER_CALLS(CGR__FIELD)
#undef CGR__FIELD
	_Atomic uint32_t *devflags; /* ndev entries: CGR__CU_* */
	pthread_mutex_t gate_lock;  /* gates, waker start, driver calls */
	int drv;		    /* driver calls: 0 not looked up, 1, -1 */
	char drv_why[256];	    /* why there are none */
	struct cgr__cu_gates *gates;
	struct cgr__cu_waker *_Atomic waker;
};

/* The table's symbols (device/lib.h resolves them). */
static const struct cgr__lib_sym rt_syms[] = {
#define CGR__REQ(field, name, ret, args)                                       \
	{#name, offsetof(struct cgr__cudart, field), false},
#define CGR__OPT(field, name, ret, args)                                       \
	{#name, offsetof(struct cgr__cudart, field), true},
	CGR__CUDART_CALLS(CGR__REQ)
	CGR__CUDART_OPTIONAL(CGR__OPT)
#undef CGR__OPT
#undef CGR__REQ
};

/*
 * Loads the runtime for ctx: the library cgr_ctx_params.cudart_path
 * names, else the newest soname that loads (see the comment at the top).
 * A runtime that cannot be loaded, is of a version cgr does not know or
 * reports no device is kept as such (ndev -ENODEV and why, with the
 * runtime's own message), so the answer is given once per context.  The
 * library stays loaded for the life of the process: unloading libcudart
 * under its own exit handlers is not safe.
 */
static int rt_make(cgr_ctx *ctx, void **out)
{
	static const char *const names[] = {
		"libcudart.so.13", "libcudart.so.12",
		CGR_CUDA_LIBDIR "/libcudart.so.13",
		CGR_CUDA_LIBDIR "/libcudart.so.12",
	};
	struct cgr__cudart *rt = cgr__alloc(&ctx->arena, sizeof(*rt), 64);
	void *h = NULL;
	int n = 0, v = 0;
	cudaError_t e;

	if (rt == NULL)
		return -ENOMEM;
	memset(rt, 0, sizeof(*rt));
	*out = rt;
	rt->ndev = -ENODEV;
	pthread_mutex_init(&rt->gate_lock, NULL);
	atomic_init(&rt->waker, NULL);
	h = cgr__lib_open(ctx, CGR__LIB_CUDART, "the CUDA runtime", names,
			  CGR__ARRAY_SIZE(names),
			  "libcudart.so.13 or libcudart.so.12", rt->path,
			  sizeof(rt->path), rt->why, sizeof(rt->why));
	if (h == NULL || cgr__lib_resolve(h, "libcudart", rt, rt_syms,
					  CGR__ARRAY_SIZE(rt_syms), rt->why,
					  sizeof(rt->why)) < 0)
		return 0;
	e = rt->runtime_version(&v);
	if (e != cudaSuccess || v < CGR__CUDART_MIN || v >= CGR__CUDART_END) {
		snprintf(rt->why, sizeof(rt->why),
			 "%s reports runtime version %d; cgr knows %d.x to "
			 "%d.x", rt->path, v, CGR__CUDART_MIN / 1000,
			 CGR__CUDART_END / 1000 - 1);
		return 0;
	}
	rt->version = v;
	cgr__info(&ctx->log, "cuda: runtime %s, version %d.%d", rt->path,
		  v / 1000, v % 1000 / 10);
	e = rt->get_device_count(&n);
	if (e != cudaSuccess) {
		snprintf(rt->why, sizeof(rt->why),
			 "cudaGetDeviceCount: error %d %s (%s) [%s %d.%d]",
			 (int)e, rt->error_name(e), rt->error_string(e),
			 rt->path, v / 1000, v % 1000 / 10);
		return 0;
	}
	if (n > 0) {
		size_t sz = (size_t)n * sizeof(*rt->devflags);
		rt->devflags = cgr__alloc(&ctx->arena, sz, 16);
		if (rt->devflags == NULL)
			return -ENOMEM;
		for (int i = 0; i < n; i++)
			atomic_init(&rt->devflags[i], 0);
	}
	rt->ndev = n;
	return 0;
}

static void cgr__cu_waker_put(struct cgr__cu_waker *w)
{
	if (atomic_fetch_sub_explicit(&w->refs, 1, memory_order_acq_rel) != 1)
		return;
	pthread_mutex_destroy(&w->lock);
	free(w);
}

static void cgr__cu_gates_fini(cgr_ctx *ctx, struct cgr__cudart *rt);

static void rt_fini(cgr_ctx *ctx, void *p)
{
	struct cgr__cudart *rt = p;
	struct cgr__cu_waker *w = atomic_load(&rt->waker);

	if (w != NULL) {
		/* S0: release: pairs with the waker's S1.  It opens what it
		 * still holds (nothing: every gate holds a stream, so the
		 * context had references) and exits. */
		atomic_store_explicit(&w->stop, 1, memory_order_release);
		cgr__bell_ring_force(&w->bell);
		if (pthread_equal(pthread_self(), w->thread))
			pthread_detach(w->thread); /* its last drop ends here */
		else
			pthread_join(w->thread, NULL);
		cgr__cu_waker_put(w);
	}
	cgr__cu_gates_fini(ctx, rt);
	if (rt->devflags != NULL)
		cgr__free(&ctx->arena, rt->devflags,
			  (size_t)rt->ndev * sizeof(*rt->devflags), 16);
	pthread_mutex_destroy(&rt->gate_lock);
	cgr__free(&ctx->arena, p, sizeof(struct cgr__cudart), 64);
}

static const struct cgr__cudart *cgr__rt_of(const struct cgr__device *dev)
{
	return dev->rt;
}

/*
 * Whether err leaves the CUDA context unusable (CUDA's sticky errors):
 * every code whose doc comment in driver_types.h (CUDA 13.0) says the
 * process is left in an inconsistent state or must be relaunched, and a
 * few more that cgr treats as the end of the device (ECC, a destroyed
 * context, devices unavailable, unknown).  tests/cuda-conformance reads
 * the header and checks this list against it.
 */
bool cgr__cuda_sticky(int err)
{
	switch (err) {
	case 214: /* cudaErrorECCUncorrectable */
	case 226: /* cudaErrorContained */
	case 46:  /* cudaErrorDevicesUnavailable */
	case 700: /* cudaErrorIllegalAddress */
	case 702: /* cudaErrorLaunchTimeout */
	case 709: /* cudaErrorContextIsDestroyed */
	case 710: /* cudaErrorAssert */
	case 714: /* cudaErrorHardwareStackError */
	case 715: /* cudaErrorIllegalInstruction */
	case 716: /* cudaErrorMisalignedAddress */
	case 717: /* cudaErrorInvalidAddressSpace */
	case 718: /* cudaErrorInvalidPc */
	case 719: /* cudaErrorLaunchFailure */
	case 721: /* cudaErrorTensorMemoryLeak */
	case 810: /* cudaErrorMpsClientTerminated */
	case 911: /* cudaErrorExternalDevice */
	case 999: /* cudaErrorUnknown */
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
	snprintf(why, sizeof(why), "%s: error %d %s (%s)", what, (int)err,
		 cgr__rt_of(dev)->error_name(err),
		 cgr__rt_of(dev)->error_string(err));
	if (cgr__cuda_sticky(err)) {
		/* CUDA itself says the device is gone: its host functions
		 * will not run (cgr__cu_gates_fini). */
		struct cgr__cudart *rt = (struct cgr__cudart *)dev->rt;
		if (dev->index < rt->ndev)
			atomic_fetch_or(&rt->devflags[dev->index],
					CGR__CU_DEAD);
		cgr__device_fail(dev, CGR_EDEVICE, why);
		return CGR_EDEVICE;
	}
	cgr__warn(dev->log, "cuda device %d: %s", dev->index, why);
	return -EIO;
}

static int cgr__cuda_device_init(struct cgr__device *dev)
{
	struct cgr__cudart *rt;
	void *p;
	int ret = cgr__ctx_state(dev->ctx, &cgr__cuda_ops, rt_make, rt_fini,
				 &p);

	if (ret < 0)
		return ret;
	dev->rt = rt = p;
	if (rt->ndev < 0 || dev->index >= rt->ndev) {
		if (rt->ndev < 0)
			cgr__info(dev->log, "cuda device %d: %s", dev->index,
				  rt->why);
		else
			cgr__info(dev->log,
				  "cuda device %d: only %d CUDA device(s)",
				  dev->index, rt->ndev);
		return -ENODEV;
	}
	if (rt->set_device(dev->index) != cudaSuccess) {
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
	cgr__rt_of(s->dev)->set_device(s->dev->index);
	return (cudaStream_t)s->cu;
}

static int cgr__cuda_stream_init(cgr_stream *s)
{
	struct cgr__device *dev = s->dev;
	const struct cgr__cudart *rt = cgr__rt_of(dev);
	int least = 0, greatest = 0, prio = s->priority;
	cudaStream_t cs;
	cudaError_t e;

	cgr__bell_init(&s->bell);
	cgr__bell_init(&s->pbell);
	atomic_init(&s->stop, 0);
	e = rt->set_device(dev->index);
	if (e == cudaSuccess)
		e = rt->priority_range(&least, &greatest);
	if (e != cudaSuccess)
		return cgr__cu_ret(dev, e, "cudaDeviceGetStreamPriorityRange");
	/* Lower is more urgent in both: clamp into [greatest, least]. */
	prio = prio < greatest ? greatest : prio > least ? least : prio;
	e = rt->stream_create(&cs, cudaStreamNonBlocking, prio);
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
		cudaError_t e = cgr__rt_of(s->dev)->stream_query(cs);
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
	cgr__rt_of(s->dev)->stream_destroy(cgr__cu_stream(s));
}

static void cgr__cuda_stream_free(cgr_stream *s)
{
	(void)s;
}

/* Whether p is host memory CUDA does not know (malloc'd, stack). */
static bool cgr__cu_plain_host(const struct cgr__cudart *rt, const void *p)
{
	struct cgr__cu_ptr_attr a;

	memset(&a, 0, sizeof(a));
	if (rt->pointer_attributes((struct cudaPointerAttributes *)(void *)&a,
				   p) != cudaSuccess)
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
	const struct cgr__cudart *rt = cgr__rt_of(s->dev);
	struct cgr__cu_copy *c;
	cudaError_t e;

	if (!cgr__cu_plain_host(rt, op->u.copy.dst) ||
	    !cgr__cu_plain_host(rt, op->u.copy.src)) {
		e = rt->memcpy_async(op->u.copy.dst, op->u.copy.src,
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
	e = rt->launch_host(cs, cgr__cuda_host_copy, c);
	if (e != cudaSuccess)
		cgr__free(c->arena, c, sizeof(*c), 16);
	return cgr__cu_ret(s->dev, e, "cudaLaunchHostFunc");
}

/* ---- gated waits (see the comment at the top) ----------------------- */

/* The host function behind a gate's wait: the stream passed it, so the
 * gate is free again.  Only this store (R1: release, pairs with the
 * acquire of the take and of cgr__cu_gates_fini); never blocks. */
static void CUDART_CB cgr__cu_gate_free(void *arg)
{
	atomic_store_explicit((_Atomic uint8_t *)arg, 0, memory_order_release);
}

/*
 * Frees the gate pages at the context's end, unless a gate is still busy
 * on a device CUDA has not declared dead (its host function may still
 * run): then they are left allocated, and the log says so.
 */
static void cgr__cu_gates_fini(cgr_ctx *ctx, struct cgr__cudart *rt)
{
	struct cgr__cu_gates *g, *next;
	int busy = 0, pages = 0;

	for (g = rt->gates; g != NULL; g = g->next, pages++)
		for (int i = 0; i < CGR__GATES; i++)
			if (atomic_load_explicit(&g->busy[i],
						 memory_order_acquire) &&
			    !(g->dev[i] < rt->ndev &&
			      (atomic_load(&rt->devflags[g->dev[i]]) &
			       CGR__CU_DEAD)))
				busy++;
	if (busy > 0) {
		cgr__warn(&ctx->log,
			  "cuda: %d gate(s) still in use by streams at "
			  "teardown: %d pinned page(s) left allocated",
			  busy, pages);
		return;
	}
	for (g = rt->gates; g != NULL; g = next) {
		next = g->next;
		rt->free_host(g);
	}
	rt->gates = NULL;
}

/* Looks up the driver calls once (under gate_lock): 1 or -1 (drv_why). */
static int cgr__cu_drv(struct cgr__cudart *rt)
{
	enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSuccess;
	void *fn = NULL;
	cudaError_t e = cudaSuccess;

	if (rt->drv != 0)
		return rt->drv;
	rt->drv = -1;
	if (rt->entry_point_v != NULL)
		e = rt->entry_point_v("cuStreamWaitValue32", &fn,
				      CGR__CU_DRIVER_VERSION,
				      cudaEnableDefault, &st);
	else if (rt->entry_point != NULL)
		e = rt->entry_point("cuStreamWaitValue32", &fn,
				    cudaEnableDefault, &st);
	else {
		snprintf(rt->drv_why, sizeof(rt->drv_why),
			 "%s has no cudaGetDriverEntryPoint[ByVersion]",
			 rt->path);
		return rt->drv;
	}
	if (e != cudaSuccess || st != cudaDriverEntryPointSuccess ||
	    fn == NULL) {
		snprintf(rt->drv_why, sizeof(rt->drv_why),
			 "cuStreamWaitValue32: %s (error %d %s)",
			 st == cudaDriverEntryPointVersionNotSufficent ?
				 "the driver is too old" :
				 "not found in the driver",
			 (int)e, rt->error_name(e));
		return rt->drv;
	}
	*(void **)&rt->wait_value32 = fn;
	return rt->drv = 1;
}

/* -ENOTSUP, said once per device in the log, with why. */
static int cgr__cu_nomemops(struct cgr__device *dev, const char *why)
{
	struct cgr__cudart *rt = (struct cgr__cudart *)dev->rt;

	if (!(atomic_fetch_or(&rt->devflags[dev->index], CGR__CU_NOMEMOPS) &
	      CGR__CU_NOMEMOPS))
		cgr__warn(dev->log,
			  "cuda device %d: no stream memory operations (%s): "
			  "a CUDA stream cannot wait for a pending future or "
			  "another backend's event; such waits return "
			  "-ENOTSUP",
			  dev->index, why);
	return -ENOTSUP;
}

/* A free gate of a new or existing page (under gate_lock). */
static int cgr__cu_gate_take(struct cgr__cudart *rt, int dev,
			     struct cgr__cu_gates **gout, int *iout)
{
	struct cgr__cu_gates *g;
	void *p, *d;
	cudaError_t e;
	int i = 0;

	for (g = rt->gates; g != NULL; g = g->next)
		for (int k = 0; k < CGR__GATES; k++) {
			i = (int)((g->cursor + (unsigned)k) % CGR__GATES);
			/* Acquire: pairs with R1; the stream is done with
			 * the word. */
			if (!atomic_load_explicit(&g->busy[i],
						  memory_order_acquire))
				goto found;
		}
	e = rt->host_alloc(&p, CGR__GATE_PAGE,
			   cudaHostAllocMapped | cudaHostAllocPortable);
	if (e != cudaSuccess)
		return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
	/* Unified addressing: one device address for every device. */
	if (rt->host_device_ptr(&d, p, 0) != cudaSuccess) {
		rt->free_host(p);
		return -EIO;
	}
	g = p;
	memset(g, 0, sizeof(*g));
	g->dptr = (CUdeviceptr)(uintptr_t)d;
	g->next = rt->gates;
	rt->gates = g;
	i = 0;
found:
	g->cursor = (unsigned)i + 1;
	atomic_store_explicit(&g->busy[i], 1, memory_order_relaxed);
	g->dev[i] = (int16_t)dev;
	*gout = g;
	*iout = i;
	return 0;
}

/* Whether the waker may open x's gate: the awaited thing happened, or a
 * device involved failed (cgr__dfuture_test and snap_query see those). */
static bool cgr__cu_wait_done(struct cgr__cu_wait *x)
{
	int res;

	if (cgr__device_error(x->s->dev) != 0)
		return true;
	if (x->op.kind == CGR__SOP_WAITF)
		return cgr__dfuture_test(x->op.u.waitf.f, &res) != 0;
	return x->op.u.waite.ops->snap_query(x->op.u.waite.snap,
					     x->op.u.waite.pos) != 0;
}

/* Opens x's gate and drops what it held.  The last drop may end the
 * context (rt_fini on this thread): x is freed first, and nothing of the
 * context is touched after. */
static void cgr__cu_wait_open(struct cgr__cu_wait *x)
{
	struct cgr__sop op = x->op;
	cgr_stream *s = x->s;

	/* G1: release: pairs with the device's read of the word (and what
	 * the completer published before, C2, is visible to the work
	 * behind the wait). */
	atomic_store_explicit(x->word, 1, memory_order_release);
	cgr__free(x->arena, x, sizeof(*x), 16);
	if (op.kind == CGR__SOP_WAITF)
		cgr__dfuture_put(op.u.waitf.f);
	else
		op.u.waite.ops->snap_put(op.u.waite.snap);
	cgr__stream_put(s);
}

static void *cgr__cu_waker_main(void *arg)
{
	struct cgr__cu_waker *w = arg;
	struct cgr__cu_wait *pending = NULL, *in, *x, **pp;
	long nap = 1000; /* ns, while polling: doubling up to 100 us */

	for (;;) {
		/* Registered before looking: a ring after this wakes us. */
		uint32_t seq = cgr__bell_prepare(&w->bell);
		/* S1: acquire: pairs with S0 in rt_fini. */
		bool stop = atomic_load_explicit(&w->stop,
						 memory_order_acquire);
		bool polled = false;

		pthread_mutex_lock(&w->lock);
		in = w->inbox;
		w->inbox = NULL;
		pthread_mutex_unlock(&w->lock);
		if (in != NULL)
			nap = 1000;
		for (; in != NULL; in = x) {
			x = in->next;
			in->next = pending;
			pending = in;
		}
		for (pp = &pending; *pp != NULL;) {
			x = *pp;
			if (!stop && !cgr__cu_wait_done(x)) {
				polled |= x->polled;
				pp = &x->next;
				continue;
			}
			*pp = x->next;
			cgr__cu_wait_open(x);
		}
		if (stop) {
			cgr__bell_cancel(&w->bell);
			break;
		}
		if (polled) {
			struct timespec ts = { 0, nap };
			cgr__bell_cancel(&w->bell);
			nanosleep(&ts, NULL);
			if (nap < 100000)
				nap *= 2;
			continue;
		}
		cgr__futex_wait(&w->bell.seq, seq, CGR_FOREVER);
		cgr__bell_cancel(&w->bell);
	}
	cgr__cu_waker_put(w);
	return NULL;
}

/* The context's waker, started on first use (under gate_lock). */
static int cgr__cu_waker_get(struct cgr__cudart *rt,
			     struct cgr__cu_waker **out)
{
	struct cgr__cu_waker *w = atomic_load(&rt->waker);
	int ret;

	if (w == NULL) {
		w = calloc(1, sizeof(*w));
		if (w == NULL)
			return -ENOMEM;
		cgr__bell_init(&w->bell);
		pthread_mutex_init(&w->lock, NULL);
		atomic_init(&w->stop, 0);
		atomic_init(&w->refs, 2);
		ret = pthread_create(&w->thread, NULL, cgr__cu_waker_main, w);
		if (ret != 0) {
			pthread_mutex_destroy(&w->lock);
			free(w);
			return -ret;
		}
		atomic_store(&rt->waker, w);
	}
	*out = w;
	return 0;
}

/* Whether the awaited thing already happened (no gate needed); for a
 * future, first points its bell at the waker w (NULL: not yet). */
static bool cgr__cu_wait_passed(cgr_stream *s, const struct cgr__sop *op,
				struct cgr__cu_waker *w, bool *polled)
{
	struct cgr__dfuture *df = op->u.waitf.f;
	struct cgr__bell *none = NULL;
	int res;

	*polled = true;
	if (op->kind == CGR__SOP_WAITE)
		return op->u.waite.ops->snap_query(op->u.waite.snap,
						   op->u.waite.pos) != 0;
	if (w != NULL && df->poll == NULL && df->ctx == s->dev->ctx) {
		/* A future of this context: its completion rings our bell
		 * (one waker per context; another context's polls).  The
		 * fence orders the store before the test below (B1: pairs
		 * with the fence of the completer's ring, which comes after
		 * its C2). */
		atomic_compare_exchange_strong(&df->wbell, &none, &w->bell);
		atomic_thread_fence(memory_order_seq_cst);
		*polled = atomic_load(&df->wbell) != &w->bell;
	}
	return cgr__dfuture_test(df, &res) != 0;
}

/* Drops the reference a wait op carries (it was not needed). */
static void cgr__cu_op_put(const struct cgr__sop *op)
{
	if (op->kind == CGR__SOP_WAITF)
		cgr__dfuture_put(op->u.waitf.f);
	else
		op->u.waite.ops->snap_put(op->u.waite.snap);
}

/* CGR__SOP_WAITF / WAITE on a CUDA stream: a gate.  On success the op's
 * reference moves into the gate (or is dropped: nothing to wait for); on
 * failure it stays with the caller. */
static int cgr__cuda_gate_wait(cgr_stream *s, cudaStream_t cs,
			       const struct cgr__sop *op)
{
	struct cgr__device *dev = s->dev;
	struct cgr__cudart *rt = (struct cgr__cudart *)dev->rt;
	struct cgr__cu_waker *w = NULL;
	struct cgr__cu_gates *g;
	struct cgr__cu_wait *x;
	bool polled;
	CUresult cr;
	cudaError_t e;
	int i = 0, ret;

	if (cgr__cu_wait_passed(s, op, NULL, &polled)) {
		cgr__cu_op_put(op);
		return 0;
	}
	if (atomic_load(&rt->devflags[dev->index]) & CGR__CU_NOMEMOPS)
		return -ENOTSUP;
	x = cgr__alloc(dev->arena, sizeof(*x), 16);
	if (x == NULL)
		return -ENOMEM;
	pthread_mutex_lock(&rt->gate_lock);
	if (cgr__cu_drv(rt) < 0) {
		pthread_mutex_unlock(&rt->gate_lock);
		cgr__free(dev->arena, x, sizeof(*x), 16);
		return cgr__cu_nomemops(dev, rt->drv_why);
	}
	ret = cgr__cu_waker_get(rt, &w);
	if (ret == 0)
		ret = cgr__cu_gate_take(rt, dev->index, &g, &i);
	pthread_mutex_unlock(&rt->gate_lock);
	if (ret < 0) {
		cgr__free(dev->arena, x, sizeof(*x), 16);
		return ret;
	}
	if (cgr__cu_wait_passed(s, op, w, &polled)) {
		atomic_store_explicit(&g->busy[i], 0, memory_order_release);
		cgr__free(dev->arena, x, sizeof(*x), 16);
		cgr__cu_op_put(op);
		return 0;
	}
	/* Closed before the device can see it (the enqueue orders it). */
	atomic_store_explicit(&g->word[i], 0, memory_order_relaxed);
	cr = rt->wait_value32((CUstream)cs,
			      g->dptr + (CUdeviceptr)i * sizeof(uint32_t), 1,
			      CU_STREAM_WAIT_VALUE_GEQ);
	if (cr == CUDA_SUCCESS) {
		e = rt->launch_host(cs, cgr__cu_gate_free, &g->busy[i]);
		if (e != cudaSuccess) {
			/* The wait is in but nobody frees the gate: open it
			 * and leave it busy for good. */
			atomic_store_explicit(&g->word[i], 1,
					      memory_order_release);
			cgr__free(dev->arena, x, sizeof(*x), 16);
			return cgr__cu_ret(dev, e, "cudaLaunchHostFunc");
		}
	} else {
		atomic_store_explicit(&g->busy[i], 0, memory_order_release);
		cgr__free(dev->arena, x, sizeof(*x), 16);
		if (cr == CUDA_ERROR_NOT_SUPPORTED)
			return cgr__cu_nomemops(
				dev, "cuStreamWaitValue32: CUDA_ERROR_NOT_"
				     "SUPPORTED");
		return cgr__cu_ret(dev, (cudaError_t)cr,
				   "cuStreamWaitValue32");
	}
	x->word = &g->word[i];
	cgr__stream_ref(s);
	x->s = s;
	x->op = *op;
	x->polled = polled;
	x->arena = dev->arena;
	pthread_mutex_lock(&w->lock);
	x->next = w->inbox;
	w->inbox = x;
	pthread_mutex_unlock(&w->lock);
	cgr__bell_ring(&w->bell);
	return 0;
}

/* A device of the context failed: the waker looks again (the failed
 * device's gates open, and futures bound to its streams are done). */
static void cgr__cuda_device_failed(struct cgr__device *dev,
				    struct cgr__device *failed)
{
	const struct cgr__cudart *rt = dev->rt;
	struct cgr__cu_waker *w;

	(void)failed;
	if (rt == NULL)
		return;
	w = atomic_load(&((struct cgr__cudart *)rt)->waker);
	if (w != NULL)
		cgr__bell_ring_force(&w->bell);
}
static int cgr__cuda_enqueue(cgr_stream *s, const struct cgr__sop *op)
{
	const struct cgr__cudart *rt = cgr__rt_of(s->dev);
	cudaStream_t cs = cgr__cu_stream(s);
	cudaError_t e;

	switch (op->kind) {
	case CGR__SOP_HOST:
		e = rt->launch_host(cs, op->u.host.fn, op->u.host.arg);
		return cgr__cu_ret(s->dev, e, "cudaLaunchHostFunc");
	case CGR__SOP_COPY:
		if (op->u.copy.n == 0)
			return 0;
		return cgr__cuda_copy(s, cs, op);
	case CGR__SOP_WAITF:
	case CGR__SOP_WAITE:
		return cgr__cuda_gate_wait(s, cs, op);
	case CGR__SOP_CALL:
		return -ENOTSUP; /* see the comment at the top */
	default:
		return -EINVAL;
	}
}

/*
 * A record of a cgr event: a CUDA event with its device and the stream it
 * was last recorded on (referenced, for its device's sticky error).  The
 * cgr event holds one reference; a stream of another backend waiting for
 * this record holds another, so re-recording while such a wait is pending
 * takes a fresh CUDA event and the waiter keeps polling the record it saw.
 */
struct cgr__cu_rec {
	cudaEvent_t ev;
	int dev;
	const struct cgr__cudart *rt;
	_Atomic uint32_t refs;
	cgr_stream *s;
	struct cgr__arena *arena;
};

static void cgr__cu_rec_put(struct cgr__cu_rec *r)
{
	if (r == NULL ||
	    atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
		return;
	r->rt->set_device(r->dev);
	r->rt->event_destroy(r->ev);
	if (r->s != NULL)
		cgr__stream_put(r->s);
	cgr__free(r->arena, r, sizeof(*r), 16);
}

/* The event's current record with a reference, or NULL. */
static struct cgr__cu_rec *cgr__cu_rec_get(cgr_event *e)
{
	struct cgr__cu_rec *r;

	cgr__event_lock(e);
	r = e->cu;
	if (r != NULL && r->s != NULL)
		atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
	else
		r = NULL; /* made but never recorded: nothing to see */
	cgr__event_unlock(e);
	return r;
}

static int cgr__cuda_event_record(cgr_event *e, cgr_stream *s)
{
	cudaStream_t cs = cgr__cu_stream(s);
	struct cgr__cu_rec *r, *drop = NULL;
	cgr_stream *old = NULL;
	cudaError_t ce = cudaSuccess;
	int ret = 0;

	cgr__event_lock(e);
	r = e->cu;
	if (r != NULL && r->dev != s->dev->index) {
		ret = -EINVAL; /* a CUDA event belongs to one device */
	} else if (r == NULL ||
		   atomic_load_explicit(&r->refs, memory_order_acquire) > 1) {
		/* First record, or a foreign waiter still polls the old
		 * record: a fresh CUDA event. */
		struct cgr__cu_rec *n =
			cgr__alloc(s->dev->arena, sizeof(*n), 16);
		cudaEvent_t ev;
		if (n == NULL)
			ret = -ENOMEM;
		else
			ce = cgr__rt_of(s->dev)->event_create(
				&ev, cudaEventDisableTiming);
		if (n != NULL && ce != cudaSuccess) {
			cgr__free(s->dev->arena, n, sizeof(*n), 16);
		} else if (n != NULL) {
			n->ev = ev;
			n->dev = s->dev->index;
			n->rt = cgr__rt_of(s->dev);
			atomic_init(&n->refs, 1);
			n->s = NULL;
			n->arena = s->dev->arena;
			drop = r;
			e->cu = r = n;
		}
	}
	if (ret == 0 && ce == cudaSuccess)
		ce = r->rt->event_record(r->ev, cs);
	if (ret == 0 && ce == cudaSuccess) {
		cgr__stream_ref(s);
		old = r->s;
		r->s = s;
		e->gen++;
	}
	cgr__event_unlock(e);
	if (old != NULL)
		cgr__stream_put(old);
	cgr__cu_rec_put(drop);
	if (ret < 0)
		return ret;
	return cgr__cu_ret(s->dev, ce, "cudaEventRecord");
}

/* 1 passed, 0 not yet, or the record's device error. */
static int cgr__cu_rec_query(struct cgr__cu_rec *r)
{
	int ret = cgr__device_error(r->s->dev);
	cudaError_t ce;

	if (ret)
		return ret;
	ce = r->rt->event_query(r->ev);
	if (ce == cudaErrorNotReady)
		return 0;
	if (ce == cudaSuccess)
		return 1;
	return cgr__cu_ret(r->s->dev, ce, "cudaEventQuery");
}

static int cgr__cuda_event_query(cgr_event *e)
{
	struct cgr__cu_rec *r = cgr__cu_rec_get(e);
	int ret;

	if (r == NULL)
		return 0; /* never recorded */
	ret = cgr__cu_rec_query(r);
	cgr__cu_rec_put(r);
	return ret;
}

static int cgr__cuda_stream_wait_event(cgr_stream *s, cgr_event *e)
{
	struct cgr__cu_rec *r = cgr__cu_rec_get(e);
	cudaError_t ce;

	if (r == NULL)
		return 0; /* never recorded: nothing to wait for */
	/* CUDA captures the event's current record, as cgr.h says. */
	ce = cgr__rt_of(s->dev)->stream_wait_event(cgr__cu_stream(s),
							 r->ev, 0);
	cgr__cu_rec_put(r);
	return cgr__cu_ret(s->dev, ce, "cudaStreamWaitEvent");
}

static void cgr__cuda_event_free(cgr_event *e)
{
	cgr__cu_rec_put(e->cu);
	e->cu = NULL;
}

/* For a sim stream waiting for a CUDA event: its current record. */
static int cgr__cuda_event_snap(cgr_event *e, void **snap, uint64_t *pos)
{
	struct cgr__cu_rec *r = cgr__cu_rec_get(e);

	*snap = r;
	*pos = 0;
	return r == NULL ? 1 : 0;
}

static int cgr__cuda_snap_query(void *snap, uint64_t pos)
{
	(void)pos;
	return cgr__cu_rec_query(snap);
}

static void cgr__cuda_snap_put(void *snap)
{
	cgr__cu_rec_put(snap);
}

/* ---- for the layers above (device.h) ------------------------------ */

void *cgr__cuda_stream_use(cgr_stream *s)
{
	if (s == NULL || s->dev->ops != &cgr__cuda_ops)
		return NULL;
	return cgr__cu_stream(s);
}

static int cgr__cuda_malloc(struct cgr__device *dev, size_t size,
			    void **out)
{
	const struct cgr__cudart *rt = cgr__rt_of(dev);
	cudaError_t e;

	if (dev->ops != &cgr__cuda_ops)
		return -EINVAL;
	e = rt->set_device(dev->index);
	if (e == cudaSuccess)
		e = rt->malloc(out, size);
	return cgr__cu_ret(dev, e, "cudaMalloc");
}

static void cgr__cuda_free(struct cgr__device *dev, void *p)
{
	const struct cgr__cudart *rt = cgr__rt_of(dev);

	if (p == NULL || dev->ops != &cgr__cuda_ops)
		return;
	rt->set_device(dev->index);
	rt->free(p);
}

static int cgr__cuda_memcpy(struct cgr__device *dev, void *dst,
			    const void *src, size_t n)
{
	const struct cgr__cudart *rt = cgr__rt_of(dev);
	cudaError_t e;

	if (dev->ops != &cgr__cuda_ops)
		return -EINVAL;
	if (n == 0)
		return 0;
	e = rt->set_device(dev->index);
	if (e == cudaSuccess)
		e = rt->memcpy(dst, src, n, cudaMemcpyDefault);
	return cgr__cu_ret(dev, e, "cudaMemcpy");
}

bool cgr__cuda_is_device_ptr(struct cgr__device *dev, const void *p)
{
	return dev->ops == &cgr__cuda_ops && !cgr__cu_plain_host(cgr__rt_of(dev), p);
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
	.event_snap = cgr__cuda_event_snap,
	.snap_query = cgr__cuda_snap_query,
	.snap_put = cgr__cuda_snap_put,
	.device_failed = cgr__cuda_device_failed,
	.mem_alloc = cgr__cuda_malloc,
	.mem_free = cgr__cuda_free,
	.mem_copy = cgr__cuda_memcpy,
};
