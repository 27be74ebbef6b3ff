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
 * Two operations allocate a small record each (freed by their host
 * function): a copy between plain host buffers and a wait for another
 * backend's event; the rest allocate nothing.
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
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "device/cudart_abi.h"
#include "device/device.h"
#include "reactor/reactor.h"

#ifndef CGR_CUDA_LIBDIR
#define CGR_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

/* The runtime functions cgr uses, resolved from libcudart: one table per
 * context (cgr__ctx_state), since each context may name its own library
 * (cgr_ctx_params.cudart_path). */
struct cgr__cudart {
	int ndev;	/* devices, or -ENODEV */
	int version;	/* cudaRuntimeGetVersion's, or 0 */
	char why[256];	/* why there is none */
	char path[192];	/* the library loaded */
#define CGR__FIELD(field, name, ret, args) ret(*field) args;
	CGR__CUDART_CALLS(CGR__FIELD)
#undef CGR__FIELD
};

/* Resolves the table from handle h: 0, or -ENODEV with rt->why set. */
static int rt_resolve(struct cgr__cudart *rt, void *h)
{
#define CGR__SYM(field, name)                                              \
	do {                                                               \
		*(void **)&rt->field = dlsym(h, name);                     \
		if (rt->field == NULL) {                                   \
			snprintf(rt->why, sizeof(rt->why),                 \
				 "libcudart lacks %s", name);              \
			return -ENODEV;                                    \
		}                                                          \
	} while (0)
#define CGR__RESOLVE(field, name, ret, args) CGR__SYM(field, #name);
	CGR__CUDART_CALLS(CGR__RESOLVE)
#undef CGR__RESOLVE
#undef CGR__SYM
	return 0;
}

/* The path of the library behind handle h, into buf. */
static void rt_path(void *h, const char *asked, char *buf, size_t len)
{
	struct link_map *lm = NULL;

	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL &&
	    lm->l_name != NULL && *lm->l_name)
		asked = lm->l_name;
	snprintf(buf, len, "%s", asked);
}

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
	const char *asked = ctx->cudart_path;
	void *h = NULL;
	int n = 0, v = 0;
	cudaError_t e;

	if (rt == NULL)
		return -ENOMEM;
	memset(rt, 0, sizeof(*rt));
	*out = rt;
	rt->ndev = -ENODEV;
	if (asked != NULL)
		h = dlopen(asked, RTLD_NOW | RTLD_LOCAL);
	for (size_t i = 0; h == NULL && ctx->cudart_path == NULL &&
			   i < sizeof(names) / sizeof(*names);
	     i++)
		h = dlopen(asked = names[i], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(rt->why, sizeof(rt->why),
			 "the CUDA runtime (%s) could not be loaded",
			 ctx->cudart_path != NULL ?
				 ctx->cudart_path :
				 "libcudart.so.13 or libcudart.so.12");
		return 0;
	}
	rt_path(h, asked, rt->path, sizeof(rt->path));
	if (rt_resolve(rt, h) < 0)
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
	rt->ndev = n;
	return 0;
}

static void rt_fini(cgr_ctx *ctx, void *p)
{
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
	int ret = cgr__ctx_state(dev->ctx, CGR__CTX_CUDART, rt_make, rt_fini,
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

/* A host function waiting for a future (cgr_future_stream_wait). */
static bool cgr__cuda_fut_ready(void *arg)
{
	int res;
	return cgr__dfuture_test(arg, &res) != 0;
}

static void CUDART_CB cgr__cuda_waitf(void *arg)
{
	struct cgr__dfuture *f = arg;

	if (f->poll != NULL)
		cgr__dfuture_poll_wait(f, NULL);
	else
		cgr__reactor_wait(NULL, f->s != NULL ? &f->s->pbell : &f->bell,
				  cgr__cuda_fut_ready, f, NULL,
				  CGR_WAIT_ADAPTIVE, 20000, CGR_FOREVER);
	cgr__dfuture_put(f);
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

/* A host function waiting for another backend's event (a copy of the
 * operation: host functions take one pointer). */
struct cgr__cu_waite {
	struct cgr__sop op;
	struct cgr__arena *arena;
};

static void CUDART_CB cgr__cuda_waite(void *arg)
{
	struct cgr__cu_waite *w = arg;

	cgr__waite_run(NULL, &w->op);
	cgr__free(w->arena, w, sizeof(*w), 16);
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
		e = rt->launch_host(cs, cgr__cuda_waitf, op->u.waitf.f);
		return cgr__cu_ret(s->dev, e, "cudaLaunchHostFunc");
	case CGR__SOP_WAITE: {
		struct cgr__cu_waite *w =
			cgr__alloc(s->dev->arena, sizeof(*w), 16);
		if (w == NULL)
			return -ENOMEM;
		w->op = *op;
		w->arena = s->dev->arena;
		e = rt->launch_host(cs, cgr__cuda_waite, w);
		if (e != cudaSuccess)
			cgr__free(w->arena, w, sizeof(*w), 16);
		return cgr__cu_ret(s->dev, e, "cudaLaunchHostFunc");
	}
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

int cgr__cuda_malloc(struct cgr__device *dev, size_t size, void **out)
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

void cgr__cuda_free(struct cgr__device *dev, void *p)
{
	const struct cgr__cudart *rt = cgr__rt_of(dev);

	if (p == NULL || dev->ops != &cgr__cuda_ops)
		return;
	rt->set_device(dev->index);
	rt->free(p);
}

int cgr__cuda_memcpy(struct cgr__device *dev, void *dst, const void *src,
		     size_t n)
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
};
