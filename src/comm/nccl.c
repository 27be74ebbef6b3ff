/*
 * comm/nccl.c: the NCCL backend.  A cgr communicator of n ranks over CUDA
 * devices: rank r on its member worker's CUDA device (without members, on
 * CUDA device r), one NCCL communicator per rank, all made in this process
 * from one unique id (ncclCommInitRankConfig for every rank inside one
 * group), nonblocking (config.blocking = 0).
 *
 * Loading.  libnccl is loaded when a context first makes an NCCL
 * communicator (dlopen of cgr_ctx_params.nccl_path, or of libnccl.so.2),
 * and the version the loaded library reports (ncclGetVersion) must be at
 * least 2.18; gather, scatter and alltoall are NCCL's own from 2.28.3 and
 * grouped sends and receives before.  Nothing links against NCCL.
 *
 * Operations.  Each is enqueued on a CUDA stream of the rank's device (s;
 * NULL: the rank's own stream, and the call waits) by the calling thread,
 * the rank's one thread at a time.  A call that returns ncclInProgress is
 * followed by ncclCommGetAsyncError until it leaves that state, and only
 * then is the completion event recorded on the stream (recorded earlier it
 * could pass before NCCL's kernel is enqueued).  The future is polled: it
 * is done when its event is, and fails when the communicator does
 * (cgr__dfuture_poll_by; a worker's reactor polls those of its graph).
 *
 * Agreement.  NCCL hangs on ranks that disagree, so before an operation
 * is enqueued the ranks agree on the host: over two CPU communicators of
 * the same ranks (comm/cpu_*.c), every rank's record reaches every rank
 * of a collective, or the peer of a send or receive, and each reaches the
 * same verdict (poison first, then kind, count, dtype, op, root): the
 * agreement's (comm/agree.h), as every path's; a disagreement fails the operation on every rank and
 * enqueues nothing.  Descriptors marked agreed (the graph's collective
 * nodes agree on their own board, run/coll.c) skip this.  int16 and
 * uint16 move as bytes; NCCL cannot reduce them (-EINVAL on every rank).
 *
 * Failure.  A communicator fails as a whole: an error returned by NCCL,
 * an asynchronous error (ncclCommGetAsyncError, polled while operations
 * are pending, also while ranks are inside a collective that will never
 * complete), a rank's failed device (the sticky error of its stream,
 * seen when an operation is issued there or by a pending operation's
 * event: CGR_EDEVICE), an operation past its deadline (-ETIMEDOUT),
 * cgr_comm_abort (-ECANCELED).  Every
 * pending and later operation of every rank then fails with that code and
 * a message naming the rank and NCCL's text, and a thread of its own
 * aborts every rank's NCCL communicator (ncclCommAbort; no call on a
 * rank's communicator runs meanwhile: each rank's calls hold its lock).
 * A result code nccl.h does not have (a newer library's) is CGR_EDEVICE,
 * its number and ncclGetErrorString's text in the message.
 * Destroy finalizes every rank (all at once, nonblocking) and destroys
 * them, unless the communicator failed: then only the aborts run.
 * ncclCommDestroy is never used on an error path.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <nccl.h>

#include "comm/agree.h"
#include "comm/comm.h"
#include "comm/nccl_abi.h"
#include "device/lib.h"

#ifndef CGR_NCCL_LIBDIR
#define CGR_NCCL_LIBDIR "/usr/local/cuda/lib64"
#endif

#define MIN_VERSION CGR__NCCL_MIN_VERSION
#define NATIVE_GSA CGR__NCCL_NATIVE_GSA
#define INIT_NS (30ll * 1000000000)
#define OP_NS (60ll * 1000000000) /* an operation's default deadline */
#define FINI_NS (10ll * 1000000000)

/* ---- the library -------------------------------------------------- */

struct cgr__ncclrt {
	int version; /* ncclGetVersion's; 0: not loaded (why says why) */
	char why[256];
#define FIELD(field, name, ret, args) ret(*field) args;
	CGR__NCCL_CALLS(FIELD)
	/* NULL before 2.28.3: grouped sends and receives instead */
	CGR__NCCL_GSA_CALLS(FIELD)
#undef FIELD
};

/* The table's symbols (device/lib.h resolves them): those every NCCL
 * cgr takes has, and those of 2.28.3 on (optional). */
static const struct cgr__lib_sym rt_syms[] = {
#define REQ(field, name, ret, args)                                            \
	{#name, offsetof(struct cgr__ncclrt, field), false},
	CGR__NCCL_CALLS(REQ)
#undef REQ
};
static const struct cgr__lib_sym rt_gsa_syms[] = {
#define OPT(field, name, ret, args)                                            \
	{#name, offsetof(struct cgr__ncclrt, field), true},
	CGR__NCCL_GSA_CALLS(OPT)
#undef OPT
};

/* The key of this backend's state in a context (cgr__ctx_state). */
static const char cgr__nccl_key;

/*
 * Loads NCCL for ctx (cgr_ctx_params.nccl_path, else libnccl.so.2 from
 * the search path, then the build's NCCL).  A library that cannot be
 * loaded, lacks a call or is too old is kept as such (version 0, why),
 * so the answer is given once per context.  Like libcudart, it stays
 * loaded for the life of the process.
 */
static int rt_make(cgr_ctx *ctx, void **out)
{
	static const char *const names[] = {
		"libnccl.so.2", "libnccl.so", CGR_NCCL_LIBDIR "/libnccl.so.2",
	};
	struct cgr__ncclrt *rt = cgr__alloc(&ctx->arena, sizeof(*rt), 64);
	char path[192];
	void *h;
	int v = 0;

	if (rt == NULL)
		return -ENOMEM;
	*out = rt;
	h = cgr__lib_open(ctx, CGR__LIB_NCCL, "NCCL", names,
			  CGR__ARRAY_SIZE(names), "libnccl.so.2", path,
			  sizeof(path), rt->why, sizeof(rt->why));
	if (h == NULL || cgr__lib_resolve(h, "libnccl", rt, rt_syms,
					  CGR__ARRAY_SIZE(rt_syms), rt->why,
					  sizeof(rt->why)) < 0)
		return 0;
	if (rt->get_version(&v) != ncclSuccess || v < MIN_VERSION) {
		snprintf(rt->why, sizeof(rt->why),
			 "the loaded NCCL is version %d; cgr needs %d or later",
			 v, MIN_VERSION);
		return 0;
	}
	if (v >= NATIVE_GSA) {
		cgr__lib_resolve(h, "libnccl", rt, rt_gsa_syms,
				 CGR__ARRAY_SIZE(rt_gsa_syms), rt->why,
				 sizeof(rt->why));
		if (rt->gather == NULL || rt->scatter == NULL ||
		    rt->alltoall == NULL)
			rt->gather = rt->scatter = NULL, rt->alltoall = NULL;
	}
	rt->version = v;
	cgr__info(&ctx->log, "nccl: %s, version %d", path, v);
	return 0;
}

static void rt_fini(cgr_ctx *ctx, void *p)
{
	cgr__free(&ctx->arena, p, sizeof(struct cgr__ncclrt), 64);
}

/* ---- the communicator ---------------------------------------------- */

/* An operation held until its group ends. */
struct gop {
	struct cgr__coll_desc d;
	char msg[128]; /* d.poison_msg's copy */
	struct cgr__dfuture *fut;
	int res; /* its verdict, then its enqueueing's */
};

struct nrank {
	ncclComm_t nc;
	int dev;
	cgr_stream *own; /* inline operations' stream */
	/* NCCL calls on nc: the rank's thread, pollers, the aborter. */
	pthread_mutex_t lock;
	int gdepth;
	struct gop *g;
	size_t gn, gcap;
	cgr_stream *gs;
	bool gs_set;
	uint64_t nops; /* operations issued (names them in messages) */
	char errmsg[256];
	struct nev *pool; /* records given back (c->pool_lock) */
};

struct ncomm {
	struct cgr_comm base;
	const struct cgr__ncclrt *rt;
	/* Host agreement: collectives' and sends' descriptors on sd, the
	 * receives' answers on rd (two, so that each direction pairs in
	 * order whatever the mix of sends and receives). */
	cgr_comm *sd, *rd;
	/* 0, or the code every pending and later operation fails with. */
	_Atomic int failed;
	char why[256]; /* written before failed (release) */
	pthread_t aborter;
	_Atomic bool aborter_done;
	bool aborter_started;
	pthread_mutex_t fail_lock;
	/* The creator's, and one per enqueued operation's record (struct
	 * nev): futures may outlive cgr_comm_destroy. */
	_Atomic uint32_t refs;
	bool abandoned; /* an abort hung: the aborter keeps the memory */
	/* Records given back keep their CUDA events for the rank's next
	 * operations (creating and destroying an event per operation costs
	 * more than the rest of an enqueue; an event belongs to one device):
	 * each rank's pool, under pool_lock. */
	pthread_mutex_t pool_lock;
	struct nrank rk[];
};

static struct ncomm *ncomm_of(cgr_comm *c)
{
	return (struct ncomm *)c;
}

static const char *nccl_msg(const struct ncomm *c, int r, ncclResult_t e)
{
	const char *last = c->rt->last_error(c->rk[r].nc);
	return last != NULL && *last ? last : c->rt->error_string(e);
}

/*
 * The result codes of nccl.h (2.28), by name; NULL for any other.  A
 * newer NCCL may return codes the header cgr was built against does not
 * have (2.29 added a timeout result, 8): those are treated as unknown,
 * never as an index into anything.  tests/cuda-conformance compares this
 * table with the header both ways.
 */
const char *cgr__nccl_result_name(int e)
{
	switch (e) {
	case 0: return "ncclSuccess";
	case 1: return "ncclUnhandledCudaError";
	case 2: return "ncclSystemError";
	case 3: return "ncclInternalError";
	case 4: return "ncclInvalidArgument";
	case 5: return "ncclInvalidUsage";
	case 6: return "ncclRemoteError";
	case 7: return "ncclInProgress";
	default: return NULL;
	}
}

/* NCCL's result as cgr's code: a known one by its meaning, any other
 * (a newer library's) CGR_EDEVICE. */
int cgr__nccl_map_result(int e)
{
	switch (e) {
	case ncclSuccess:
		return 0;
	case ncclInvalidArgument:
	case ncclInvalidUsage:
		return -EINVAL;
	case ncclUnhandledCudaError:
		return CGR_EDEVICE;
	case ncclRemoteError:
		return -EPIPE;
	case ncclSystemError:
	case ncclInternalError:
		return -EIO;
	case ncclInProgress:
		return -EAGAIN;
	default:
		return CGR_EDEVICE;
	}
}

static int map_err(ncclResult_t e)
{
	return cgr__nccl_map_result((int)e);
}

/* A result for a message: its name (or "result"), number and NCCL's text
 * for it, which a newer library has for codes cgr does not know. */
struct restxt {
	char s[192];
};

static struct restxt res_text(const struct cgr__ncclrt *rt, ncclResult_t e)
{
	struct restxt t;
	const char *name = cgr__nccl_result_name((int)e);
	const char *text = rt->error_string(e);

	snprintf(t.s, sizeof(t.s), "%s %d, %s",
		 name != NULL ? name : "unknown NCCL result", (int)e,
		 text != NULL ? text : "no text");
	return t;
}

/* Aborts every rank's NCCL communicator (a thread of its own). */
static void *abort_main(void *arg)
{
	struct ncomm *c = arg;

	for (int r = 0; r < c->base.n; r++) {
		pthread_mutex_lock(&c->rk[r].lock);
		if (c->rk[r].nc != NULL)
			c->rt->abort(c->rk[r].nc);
		c->rk[r].nc = NULL;
		pthread_mutex_unlock(&c->rk[r].lock);
	}
	atomic_store_explicit(&c->aborter_done, true, memory_order_release);
	return NULL;
}

/*
 * The communicator fails for good with code (the first failure wins):
 * every pending and later operation fails with it, and the aborter
 * starts.  Any thread; never waits for NCCL.  Logged at level (an abort
 * asked for is no error of the communicator's).
 */
static void comm_failv(struct ncomm *c, int code, int level, const char *fmt,
		       va_list ap)
{
	pthread_mutex_lock(&c->fail_lock);
	if (atomic_load_explicit(&c->failed, memory_order_relaxed) == 0) {
		vsnprintf(c->why, sizeof(c->why), fmt, ap);
		/* F0: release: why; pairs with failed_code's acquire. */
		atomic_store_explicit(&c->failed, code < 0 ? code : -EIO,
				      memory_order_release);
		cgr__log(c->base.log, level, "nccl communicator %s: %s",
			 level == CGR_LOG_ERROR ? "failed" : "stopped", c->why);
		/* The CPU communicators of the agreement: a rank waiting
		 * there for a peer that will not come returns. */
		cgr_comm_abort(c->sd);
		cgr_comm_abort(c->rd);
		c->aborter_started =
			pthread_create(&c->aborter, NULL, abort_main, c) == 0;
		if (!c->aborter_started)
			abort_main(c);
	}
	pthread_mutex_unlock(&c->fail_lock);
}

static void comm_fail(struct ncomm *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void comm_fail(struct ncomm *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	comm_failv(c, code, CGR_LOG_ERROR, fmt, ap);
	va_end(ap);
}

static void comm_stop(struct ncomm *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void comm_stop(struct ncomm *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	comm_failv(c, code, CGR_LOG_INFO, fmt, ap);
	va_end(ap);
}

static int failed_code(const struct ncomm *c)
{
	return atomic_load_explicit(&c->failed, memory_order_acquire);
}

/* Rank r's message for its failed operation. */
static int rank_fail(struct ncomm *c, int r, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int rank_fail(struct ncomm *c, int r, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->rk[r].errmsg, sizeof(c->rk[r].errmsg), fmt, ap);
	va_end(ap);
	return code;
}

/* The failure of the whole communicator, as rank r's result. */
static int rank_failed(struct ncomm *c, int r)
{
	int code = failed_code(c);

	snprintf(c->rk[r].errmsg, sizeof(c->rk[r].errmsg), "%s", c->why);
	return code;
}

/*
 * Waits (polling, under the rank's lock) until rank r's communicator is
 * no longer ncclInProgress: 0, or the communicator failed (its code).
 * A failure of the communicator from elsewhere (cgr_comm_abort, another
 * rank's asynchronous error, a deadline) ends the wait at once: the
 * aborter needs this rank's lock, and NCCL will never settle a
 * communicator whose peers stopped.
 */
static int settle(struct ncomm *c, int r, int64_t deadline,
		  const char *what)
{
	struct nrank *rk = &c->rk[r];
	ncclResult_t st = ncclInProgress;
	int64_t t0 = cgr__now_ns(), now;
	long nap = 1000;

	/* An enqueue settles within microseconds: poll, then yield the
	 * core while polling, and only then nap (a nap costs tens of us). */
	while (st == ncclInProgress) {
		if (failed_code(c) != 0)
			return rank_failed(c, r);
		if (c->rt->async_error(rk->nc, &st) != ncclSuccess)
			st = ncclInternalError;
		if (st != ncclInProgress)
			break;
		now = cgr__now_ns();
		if (now >= deadline) {
			comm_fail(c, -ETIMEDOUT, "%s on rank %d: still in "
				  "progress at its deadline", what, r);
			return failed_code(c);
		}
		if (now - t0 < 20000) {
			cgr__cpu_relax();
		} else if (now - t0 < 2000000) {
			sched_yield();
		} else {
			struct timespec ts = { 0, nap };
			nanosleep(&ts, NULL);
			if (nap < 100000)
				nap *= 2;
		}
	}
	if (st != ncclSuccess) {
		comm_fail(c, map_err(st), "%s on rank %d: %s (%s)", what, r,
			  res_text(c->rt, st).s, nccl_msg(c, r, st));
		return failed_code(c);
	}
	return 0;
}

/* ---- creation and destruction -------------------------------------- */

/* The CUDA device of each rank: its member's, or CUDA device r. */
static int rank_devices(cgr_ctx *ctx, cgr_worker *const *members, int n,
			int *dev)
{
	for (int r = 0; r < n; r++) {
		dev[r] = members != NULL && ctx->worker_device != NULL ?
				 ctx->worker_device(members[r]) :
				 r;
		if (dev[r] < 0) {
			cgr__info(&ctx->log, "nccl: rank %d's worker owns no "
				  "CUDA device", r);
			return -EINVAL;
		}
	}
	return 0;
}

/* ncclCommInitRankConfig for every rank in one group, nonblocking, then
 * until each is ready (or the deadline: then all are aborted). */
static int init_ranks(struct ncomm *c)
{
	const struct cgr__ncclrt *rt = c->rt;
	int n = c->base.n, ret = 0;
	int64_t deadline = cgr__deadline(INIT_NS);
	ncclUniqueId id;
	ncclResult_t e;

	if ((e = rt->get_unique_id(&id)) != ncclSuccess) {
		cgr__warn(c->base.log, "nccl: ncclGetUniqueId: %s",
			  res_text(rt, e).s);
		return map_err(e);
	}
	rt->group_start();
	for (int r = 0; r < n && ret == 0; r++) {
		ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
		cfg.blocking = 0;
		cgr__cuda_stream_use(c->rk[r].own);
		e = rt->init_rank_config(&c->rk[r].nc, n, id, r, &cfg);
		if (e != ncclSuccess && e != ncclInProgress) {
			cgr__warn(c->base.log,
				  "nccl: ncclCommInitRankConfig of rank %d: "
				  "%s (%s)",
				  r, res_text(rt, e).s, rt->last_error(NULL));
			ret = map_err(e);
		}
	}
	e = rt->group_end();
	if (ret == 0 && e != ncclSuccess && e != ncclInProgress) {
		cgr__warn(c->base.log, "nccl: initialisation: %s (%s)",
			  res_text(rt, e).s, rt->last_error(NULL));
		ret = map_err(e);
	}
	for (int r = 0; r < n && ret == 0; r++) {
		pthread_mutex_lock(&c->rk[r].lock);
		ret = settle(c, r, deadline, "initialisation");
		pthread_mutex_unlock(&c->rk[r].lock);
	}
	if (ret != 0 && failed_code(c) == 0)
		comm_fail(c, ret, "initialisation failed");
	return ret;
}

/* Frees what create allocated (the NCCL side is gone already). */
static void pool_drain(struct ncomm *c);

static void comm_free(struct ncomm *c)
{
	struct cgr__arena *a = c->base.arena;
	int n = c->base.n;

	for (int r = 0; r < n; r++) {
		cgr_stream_destroy(c->rk[r].own);
		pthread_mutex_destroy(&c->rk[r].lock);
		cgr__free(a, c->rk[r].g, c->rk[r].gcap * sizeof(struct gop), 16);
	}
	/* Made with cgr__cpu_comm_create: no head of their own. */
	if (c->sd != NULL)
		c->sd->ops->destroy(c->sd);
	if (c->rd != NULL)
		c->rd->ops->destroy(c->rd);
	pool_drain(c);
	pthread_mutex_destroy(&c->pool_lock);
	pthread_mutex_destroy(&c->fail_lock);
	cgr__free(a, c, sizeof(*c) + (size_t)n * sizeof(struct nrank), 64);
}

/* Waits for the aborter (bounded: an abort may hang in NCCL; then the
 * communicator's memory is left to it). */
static bool join_aborter(struct ncomm *c)
{
	int64_t deadline = cgr__deadline(FINI_NS);

	if (!c->aborter_started)
		return true;
	while (!atomic_load_explicit(&c->aborter_done, memory_order_acquire)) {
		struct timespec ts = { 0, 1000000 };
		if (cgr__now_ns() >= deadline) {
			cgr__err(c->base.log, "nccl: ncclCommAbort did not "
				 "return in time; abandoned");
			pthread_detach(c->aborter);
			return false;
		}
		nanosleep(&ts, NULL);
	}
	pthread_join(c->aborter, NULL);
	return true;
}

/* Finalizes every rank at once (nonblocking), then destroys them; on any
 * failure or past the deadline the communicator fails and is aborted
 * instead. */
static void finalize_ranks(struct ncomm *c)
{
	int64_t deadline = cgr__deadline(FINI_NS);
	int n = c->base.n;

	for (int r = 0; r < n && failed_code(c) == 0; r++) {
		ncclResult_t e;
		pthread_mutex_lock(&c->rk[r].lock);
		e = c->rt->finalize(c->rk[r].nc);
		pthread_mutex_unlock(&c->rk[r].lock);
		if (e != ncclSuccess && e != ncclInProgress)
			comm_fail(c, map_err(e), "ncclCommFinalize of rank %d: "
				  "%s", r, res_text(c->rt, e).s);
	}
	for (int r = 0; r < n && failed_code(c) == 0; r++) {
		pthread_mutex_lock(&c->rk[r].lock);
		settle(c, r, deadline, "finalize");
		pthread_mutex_unlock(&c->rk[r].lock);
	}
	if (failed_code(c) != 0)
		return; /* aborted instead */
	for (int r = 0; r < n; r++) {
		c->rt->destroy(c->rk[r].nc);
		c->rk[r].nc = NULL;
	}
}

static void comm_put(struct ncomm *c)
{
	if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1 &&
	    !c->abandoned)
		comm_free(c);
}

static void nccl_destroy(cgr_comm *cc)
{
	struct ncomm *c = ncomm_of(cc);

	if (failed_code(c) == 0)
		finalize_ranks(c);
	pthread_mutex_lock(&c->fail_lock);
	if (failed_code(c) == 0) {
		/* Finalized: futures still held fail from here on. */
		snprintf(c->why, sizeof(c->why), "communicator destroyed");
		atomic_store_explicit(&c->failed, -ECANCELED,
				      memory_order_release);
	}
	pthread_mutex_unlock(&c->fail_lock);
	c->abandoned = !join_aborter(c);
	comm_put(c);
}

static int nccl_abort(cgr_comm *cc)
{
	comm_stop(ncomm_of(cc), -ECANCELED, "communicator aborted");
	return 0;
}

/* The rank's last failure; one seen only by polling (no call of the
 * rank failed yet) is the communicator's. */
static const char *nccl_errmsg(const cgr_comm *cc, int rank)
{
	const struct ncomm *c = (const struct ncomm *)cc;

	if (c->rk[rank].errmsg[0] == 0 && failed_code(c) != 0)
		return c->why; /* F0: written before failed */
	return c->rk[rank].errmsg;
}

static const struct cgr__comm_ops nccl_ops;

int cgr__nccl_comm_create(cgr_ctx *ctx, cgr_worker *const *members, int n,
			  cgr_comm **out)
{
	struct ncomm *c;
	void *p;
	int dev[CGR_MAX_RANKS], ret;

	ret = cgr__ctx_state(ctx, &cgr__nccl_key, rt_make, rt_fini, &p);
	if (ret < 0)
		return ret;
	if (((struct cgr__ncclrt *)p)->version == 0) {
		cgr__info(&ctx->log, "nccl: %s",
			  ((struct cgr__ncclrt *)p)->why);
		return -ENODEV;
	}
	if ((ret = rank_devices(ctx, members, n, dev)) < 0)
		return ret;
	c = cgr__alloc(&ctx->arena, sizeof(*c) + (size_t)n * sizeof(struct nrank),
		       64);
	if (c == NULL)
		return -ENOMEM;
	c->base.ops = &nccl_ops;
	c->base.ctx = ctx;
	c->base.arena = &ctx->arena;
	c->base.log = &ctx->log;
	c->base.n = n;
	c->rt = p;
	atomic_init(&c->failed, 0);
	atomic_init(&c->aborter_done, false);
	atomic_init(&c->refs, 1);
	pthread_mutex_init(&c->fail_lock, NULL);
	pthread_mutex_init(&c->pool_lock, NULL);
	for (int r = 0; r < n; r++) {
		c->rk[r].dev = dev[r];
		c->rk[r].pool = NULL;
		pthread_mutex_init(&c->rk[r].lock, NULL);
	}
	ret = cgr__cpu_comm_create(ctx, n, NULL, &c->sd);
	if (ret == 0)
		ret = cgr__cpu_comm_create(ctx, n, NULL, &c->rd);
	for (int r = 0; r < n && ret == 0; r++)
		ret = cgr_stream_create(ctx, dev[r], 0, &c->rk[r].own);
	if (ret == 0)
		ret = init_ranks(c);
	if (ret < 0) {
		join_aborter(c);
		comm_free(c);
		return ret;
	}
	*out = &c->base;
	return 0;
}

/* ---- completion ---------------------------------------------------- */

/* One enqueued operation (or group) of a rank: its event, for the
 * futures of its operations. */
struct nev {
	_Atomic uint32_t refs; /* one per future, and the issuer's */
	struct nev *next;      /* in c->pool */
	struct ncomm *c;
	int rank;
	cgr_event *ev;
	int64_t deadline;
	int first; /* the first error of the group's operations, or 0 */
	struct cgr__arena *arena;
};

static void pool_drain(struct ncomm *c)
{
	for (int r = 0; r < c->base.n; r++)
		while (c->rk[r].pool != NULL) {
			struct nev *p = c->rk[r].pool;
			c->rk[r].pool = p->next;
			cgr_event_destroy(p->ev);
			cgr__free(p->arena, p, sizeof(*p), 16);
		}
}

static void nev_put(void *arg)
{
	struct nev *p = arg;

	struct ncomm *c = p->c;

	if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (p->ev == NULL) {
		cgr__free(p->arena, p, sizeof(*p), 16);
	} else {
		/* Re-recording a pending event is allowed: waits enqueued
		 * before keep the record they saw. */
		pthread_mutex_lock(&c->pool_lock);
		p->next = c->rk[p->rank].pool;
		c->rk[p->rank].pool = p;
		pthread_mutex_unlock(&c->pool_lock);
	}
	comm_put(c);
}

/* Polls rank r's asynchronous error (without waiting for its lock: the
 * rank's own calls report theirs). */
static void check_async(struct ncomm *c, int r)
{
	struct nrank *rk = &c->rk[r];
	ncclResult_t st = ncclSuccess;

	if (pthread_mutex_trylock(&rk->lock) != 0)
		return;
	if (rk->nc != NULL && c->rt->async_error(rk->nc, &st) != ncclSuccess)
		st = ncclInternalError;
	if (st != ncclSuccess && st != ncclInProgress)
		comm_fail(c, map_err(st), "rank %d: asynchronous error: %s (%s)",
			  r, res_text(c->rt, st).s, nccl_msg(c, r, st));
	pthread_mutex_unlock(&rk->lock);
}

/* The futures' poll: done when the event is, failed when the
 * communicator is (an asynchronous error, the deadline, an abort). */
static int nev_poll(void *arg, int *result)
{
	struct nev *p = arg;
	struct ncomm *c = p->c;
	int q;

	if ((*result = failed_code(c)) != 0)
		return 1;
	q = cgr_event_query(p->ev);
	check_async(c, p->rank);
	if ((*result = failed_code(c)) != 0)
		return 1;
	if (q < 0) {
		/* The rank's stream failed (CGR_EDEVICE): its peers would
		 * wait for it in NCCL for ever.  The communicator fails. */
		comm_fail(c, q, "rank %d: its stream failed (%s)", p->rank,
			  cgr_err_name(q));
		*result = failed_code(c);
		return 1;
	}
	if (q != 0) {
		*result = 0;
		return 1;
	}
	if (cgr__now_ns() >= p->deadline) {
		comm_fail(c, -ETIMEDOUT, "rank %d: an operation passed its "
			  "deadline", p->rank);
		*result = failed_code(c);
		return 1;
	}
	return 0;
}

/* The poll of a group's future: the first error of its operations,
 * once all of them are done. */
static int nev_poll_all(void *arg, int *result)
{
	struct nev *p = arg;

	if (!nev_poll(arg, result))
		return 0;
	if (*result == 0)
		*result = p->first;
	return 1;
}

/* A future already done with result. */
static int done_future(struct ncomm *c, int result, cgr_future **out)
{
	struct cgr__dfuture *df;

	if (out == NULL)
		return 0;
	if (cgr__dfuture_create(c->base.ctx, NULL, &df) < 0)
		return -ENOMEM;
	cgr__dfuture_complete(df, result);
	*out = cgr__dfuture_pub(df);
	return 0;
}

/* Makes df a future of what p stands for (taking a reference on p):
 * one operation's (poll: nev_poll), or the group's (nev_poll_all). */
static void polled_by(struct cgr__dfuture *df, struct nev *p,
		      int (*poll)(void *, int *))
{
	atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
	cgr__dfuture_poll_by(df, poll, nev_put, p);
	df->ev = p->ev;
}

/* ---- agreement on the host ----------------------------------------- */

/* The records and verdicts are the agreement's (comm/agree.h), as on
 * every path; only their transport is NCCL's own: CPU communicators. */

/* The verdict of collective #k from every rank's record (all): the same
 * on every rank.  0, a poison, or CGR_EMISMATCH (rank r's message says
 * which field). */
static int judge(struct ncomm *c, int r, uint64_t k,
		 const struct cgr__agree *all)
{
	char m[256];
	int ret;

	ret = cgr__agree_ops(all, sizeof(*all), c->base.n, k, m, sizeof(m));
	return ret ? rank_fail(c, r, ret, "%s", m) : 0;
}

/* A send's or receive's verdict from both ends' records. */
static int judge_p2p(struct ncomm *c, int r, const struct cgr__coll_desc *d,
		     const struct cgr__agree *theirs)
{
	struct cgr__agree mine;
	char what[48], m[256];
	int ret;

	cgr__agree_op(&mine, d);
	snprintf(what, sizeof(what), "%s with rank %d",
		 d->kind == CGR__COLL_SEND ? "send" : "recv", d->root);
	ret = cgr__agree_p2p(&mine, theirs, r, what, m, sizeof(m));
	return ret ? rank_fail(c, r, ret, "%s", m) : 0;
}

/* The sends' and receives' descriptors of g[0..n) with their peers: a
 * send's goes out on sd and its receiver's answer comes back on rd; so
 * each direction pairs in order.  theirs[i] gets op i's peer's. */
static int exchange_p2p(struct ncomm *c, int r, struct gop *g, size_t n,
			struct cgr__agree *mine, struct cgr__agree *theirs)
{
	int ret;

	cgr_group_start(c->sd, r);
	cgr_group_start(c->rd, r);
	for (size_t i = 0; i < n; i++) {
		const struct cgr__coll_desc *d = &g[i].d;
		if ((d->kind != CGR__COLL_SEND && d->kind != CGR__COLL_RECV) ||
		    d->agreed)
			continue;
		cgr__agree_op(&mine[i], d);
		if (d->kind == CGR__COLL_SEND) {
			cgr_send(c->sd, r, &mine[i], sizeof(*mine), CGR_UINT8,
				 d->root, NULL, NULL);
			cgr_recv(c->rd, r, &theirs[i], sizeof(*theirs),
				 CGR_UINT8, d->root, NULL, NULL);
		} else {
			cgr_recv(c->sd, r, &theirs[i], sizeof(*theirs),
				 CGR_UINT8, d->root, NULL, NULL);
			cgr_send(c->rd, r, &mine[i], sizeof(*mine), CGR_UINT8,
				 d->root, NULL, NULL);
		}
	}
	ret = cgr_group_end(c->sd, r, NULL);
	if (cgr_group_end(c->rd, r, NULL) != 0 && ret == 0)
		ret = -ECANCELED;
	return ret;
}

/*
 * Agrees on g[0..n) (those not agreed already) with the peers: each
 * collective over every rank in order, then the sends and receives with
 * their peers.  g[i].res gets op i's verdict.  Returns 0, or negative when
 * the agreement itself failed (the communicator was aborted).
 */
static int agree(struct ncomm *c, int r, struct gop *g, size_t n)
{
	struct nrank *rk = &c->rk[r];
	struct cgr__agree *mine = NULL, *theirs = NULL, *all = NULL;
	size_t size = (2 * n + (size_t)c->base.n) * sizeof(struct cgr__agree);
	bool p2p = false;
	int ret = 0;

	for (size_t i = 0; i < n; i++)
		g[i].res = 0;
	if ((mine = cgr__alloc(c->base.arena, size, 16)) == NULL)
		return -ENOMEM;
	/* The records travel whole: no byte of them unwritten. */
	memset(mine, 0, size);
	theirs = mine + n;
	all = theirs + n;
	for (size_t i = 0; i < n && ret == 0; i++) {
		const struct cgr__coll_desc *d = &g[i].d;
		if (d->kind == CGR__COLL_SEND || d->kind == CGR__COLL_RECV) {
			p2p |= !d->agreed;
			continue;
		}
		rk->nops++;
		if (d->agreed)
			continue;
		cgr__agree_op(&mine[i], d);
		struct cgr__coll_desc ag = {
			.kind = CGR_COLL_ALLGATHER, .send = &mine[i],
			.recv = all, .count = sizeof(*mine),
			.dtype = CGR_UINT8, .deadline = d->deadline,
		};
		ret = cgr__comm_coll(c->sd, r, &ag, NULL, NULL);
		if (ret == 0)
			g[i].res = judge(c, r, rk->nops, all);
	}
	if (ret == 0 && p2p)
		ret = exchange_p2p(c, r, g, n, mine, theirs);
	for (size_t i = 0; i < n && ret == 0; i++)
		if ((g[i].d.kind == CGR__COLL_SEND ||
		     g[i].d.kind == CGR__COLL_RECV) &&
		    !g[i].d.agreed)
			g[i].res = judge_p2p(c, r, &g[i].d, &theirs[i]);
	cgr__free(c->base.arena, mine, size, 16);
	return ret;
}

/* ---- enqueueing ---------------------------------------------------- */

/* NCCL's type for dt; int16 and uint16 move as twice as many bytes (*k
 * = 2) and cannot be reduced (-1). */
static int nccl_type(cgr_dtype dt, bool reduces, size_t *k)
{
	static const int8_t map[CGR_DTYPE_COUNT] = {
		[CGR_INT8] = ncclInt8,	     [CGR_UINT8] = ncclUint8,
		[CGR_INT16] = -2,	     [CGR_UINT16] = -2,
		[CGR_INT32] = ncclInt32,     [CGR_UINT32] = ncclUint32,
		[CGR_INT64] = ncclInt64,     [CGR_UINT64] = ncclUint64,
		[CGR_FLOAT16] = ncclFloat16, [CGR_BFLOAT16] = ncclBfloat16,
		[CGR_FLOAT32] = ncclFloat32, [CGR_FLOAT64] = ncclFloat64,
	};
	int t = map[dt];

	*k = 1;
	if (t != -2)
		return t;
	if (reduces)
		return -1;
	*k = 2;
	return ncclUint8;
}

static const ncclRedOp_t nccl_ops_map[CGR_REDOP_COUNT] = {
	[CGR_SUM] = ncclSum, [CGR_PROD] = ncclProd, [CGR_MIN] = ncclMin,
	[CGR_MAX] = ncclMax, [CGR_AVG] = ncclAvg,
};

/* Gather, scatter and alltoall before 2.28.3: sends and receives, in the
 * group the caller opened. */
static ncclResult_t emulate(const struct ncomm *c, int r,
			    const struct cgr__coll_desc *d, size_t cnt,
			    ncclDataType_t t, size_t b, cudaStream_t cs)
{
	const struct cgr__ncclrt *rt = c->rt;
	ncclComm_t nc = c->rk[r].nc;
	const char *sb = d->send;
	char *rb = d->recv;
	ncclResult_t e = ncclSuccess;

	for (int j = 0; j < c->base.n && e == ncclSuccess; j++) {
		if (d->kind == CGR_COLL_GATHER) {
			if (r == d->root)
				e = rt->recv(rb + (size_t)j * b, cnt, t, j, nc,
					     cs);
			if (e == ncclSuccess && j == d->root)
				e = rt->send(sb, cnt, t, j, nc, cs);
		} else if (d->kind == CGR_COLL_SCATTER) {
			if (r == d->root)
				e = rt->send(sb + (size_t)j * b, cnt, t, j, nc,
					     cs);
			if (e == ncclSuccess && j == d->root)
				e = rt->recv(rb, cnt, t, j, nc, cs);
		} else {
			e = rt->send(sb + (size_t)j * b, cnt, t, j, nc, cs);
			if (e == ncclSuccess)
				e = rt->recv(rb + (size_t)j * b, cnt, t, j, nc,
					     cs);
		}
	}
	return e;
}

/* Rank r's NCCL call for d on cs (inside the group the caller opened):
 * NCCL's result, or *bad set (-EINVAL) when NCCL cannot do it. */
static ncclResult_t nccl_call(const struct ncomm *c, int r,
			      const struct cgr__coll_desc *d, cudaStream_t cs,
			      int *bad)
{
	const struct cgr__ncclrt *rt = c->rt;
	ncclComm_t nc = c->rk[r].nc;
	size_t k, cnt;
	int t = nccl_type(d->dtype, cgr__coll_reduces(d->kind), &k);
	ncclRedOp_t op = cgr__coll_reduces(d->kind) ? nccl_ops_map[d->op] :
						      ncclSum;

	if (t < 0) {
		*bad = -EINVAL;
		return ncclSuccess;
	}
	cnt = d->count * k;
	switch (d->kind) {
	case CGR_COLL_ALLREDUCE:
		return rt->all_reduce(d->send, d->recv, cnt, t, op, nc, cs);
	case CGR_COLL_ALLGATHER:
		return rt->all_gather(d->send, d->recv, cnt, t, nc, cs);
	case CGR_COLL_REDUCESCATTER:
		return rt->reduce_scatter(d->send, d->recv, cnt, t, op, nc, cs);
	case CGR_COLL_REDUCE:
		return rt->reduce(d->send, d->recv, cnt, t, op, d->root, nc, cs);
	case CGR_COLL_BROADCAST:
		return rt->broadcast(d->send, d->recv, cnt, t, d->root, nc, cs);
	case CGR_COLL_GATHER:
		if (rt->gather != NULL)
			return rt->gather(d->send, d->recv, cnt, t, d->root, nc,
					  cs);
		break;
	case CGR_COLL_SCATTER:
		if (rt->scatter != NULL)
			return rt->scatter(d->send, d->recv, cnt, t, d->root,
					   nc, cs);
		break;
	case CGR_COLL_ALLTOALL:
		if (rt->alltoall != NULL)
			return rt->alltoall(d->send, d->recv, cnt, t, nc, cs);
		break;
	case CGR__COLL_SEND:
		return rt->send(d->send, cnt, t, d->root, nc, cs);
	case CGR__COLL_RECV:
		return rt->recv(d->recv, cnt, t, d->root, nc, cs);
	default:
		*bad = -EINVAL;
		return ncclSuccess;
	}
	return emulate(c, r, d, cnt, t,
		       cnt * (k == 2 ? 1 : cgr_dtype_size(d->dtype)), cs);
}

/* Enqueues the agreed operations of g[0..n) (res 0) as one NCCL group
 * on s; then, once the communicator is no longer in progress, records
 * ev.  Returns 0 or the communicator's failure. */
static int enqueue(struct ncomm *c, int r, struct gop *g, size_t n,
		   cgr_stream *s, cgr_event *ev)
{
	struct nrank *rk = &c->rk[r];
	cudaStream_t cs;
	ncclResult_t e = ncclSuccess, ge;
	int ret = 0;

	pthread_mutex_lock(&rk->lock);
	if (failed_code(c) != 0 || rk->nc == NULL) {
		pthread_mutex_unlock(&rk->lock);
		return rank_failed(c, r);
	}
	cs = cgr__cuda_stream_use(s);
	c->rt->group_start();
	for (size_t i = 0; i < n && e == ncclSuccess; i++)
		if (g[i].res == 0)
			e = nccl_call(c, r, &g[i].d, cs, &g[i].res);
	ge = c->rt->group_end();
	if (e == ncclSuccess || e == ncclInProgress)
		e = ge;
	if (e != ncclSuccess && e != ncclInProgress)
		comm_fail(c, map_err(e), "rank %d: enqueueing: %s (%s)", r,
			  res_text(c->rt, e).s, nccl_msg(c, r, e));
	else if (e == ncclInProgress)
		settle(c, r, cgr__deadline(OP_NS), "enqueueing");
	ret = failed_code(c);
	/* Only now does the stream hold NCCL's work (R3). */
	if (ret == 0 && ev != NULL)
		ret = cgr_event_record(ev, s);
	pthread_mutex_unlock(&rk->lock);
	if (ret != 0 && failed_code(c) != 0)
		return rank_failed(c, r);
	return ret;
}

/* Whether s is a CUDA stream of rank r's device. */
static bool stream_ok(const struct ncomm *c, int r, cgr_stream *s)
{
	return s->dev->index == c->rk[r].dev &&
	       cgr__cuda_stream_use(s) != NULL;
}

/* Waits for polled future df (an inline operation): its result. */
static int wait_inline(struct cgr__dfuture *df)
{
	int ret = cgr_future_wait(cgr__dfuture_pub(df), CGR_FOREVER);

	cgr__dfuture_put(df);
	return ret;
}

/* The record of what rank r enqueues now (its event), or NULL.  Its
 * deadline: the earliest of the operations', or OP_NS from now. */
static struct nev *nev_new(struct ncomm *c, int r, const struct gop *g,
			   size_t n)
{
	struct nev *p;

	pthread_mutex_lock(&c->pool_lock);
	if ((p = c->rk[r].pool) != NULL)
		c->rk[r].pool = p->next;
	pthread_mutex_unlock(&c->pool_lock);
	if (p == NULL && (p = cgr__alloc(c->base.arena, sizeof(*p), 16)) != NULL)
		p->ev = NULL;
	if (p == NULL)
		return NULL;
	atomic_init(&p->refs, 1);
	p->c = c;
	p->rank = r;
	p->deadline = cgr__deadline(OP_NS);
	for (size_t i = 0; i < n; i++)
		if (g[i].d.deadline > 0 && g[i].d.deadline < p->deadline)
			p->deadline = g[i].d.deadline;
	p->arena = c->base.arena;
	p->first = 0;
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
	if (p->ev == NULL && cgr_event_create(c->base.ctx, &p->ev) < 0) {
		p->ev = NULL;
		nev_put(p);
		return NULL;
	}
	return p;
}

/* Completes or attaches the futures of g[0..n) (ret: the enqueueing's
 * failure); the first error of them all. */
static int settle_futures(struct gop *g, size_t n, struct nev *p, int ret)
{
	int first = 0;

	for (size_t i = 0; i < n; i++) {
		int v = ret != 0 ? ret : g[i].res;
		if (first == 0 && v != 0)
			first = v;
		if (g[i].fut == NULL)
			continue;
		if (v != 0 || p == NULL)
			cgr__dfuture_complete(g[i].fut, v);
		else
			polled_by(g[i].fut, p, nev_poll);
	}
	return first;
}

/*
 * Rank r issues g[0..n) (one operation, or a group) on stream s (NULL:
 * its own, and waits): agreement, one NCCL group, the event.  Each op's
 * future (g[i].fut, made by the caller, or NULL) completes with its own
 * verdict or with the group's end; *out (may be NULL) gets one that
 * completes when the whole group did, with its first error.  Returns 0
 * (s set; errors go to the futures) or the first error (inline).
 */
static int issue(struct ncomm *c, int r, struct gop *g, size_t n,
		 cgr_stream *s, cgr_future **out)
{
	struct cgr__dfuture *all = NULL;
	struct nev *p = NULL;
	bool inline_ = s == NULL, any = false;
	int ret;

	if (inline_)
		s = c->rk[r].own;
	for (size_t i = 0; i < n; i++)
		if (!stream_ok(c, r, s) && g[i].d.poison == 0) {
			g[i].d.poison = -EINVAL;
			g[i].d.poison_msg = "invalid arguments: not a CUDA "
					    "stream of the rank's device";
		}
	if (s->dev->index == c->rk[r].dev && (ret = cgr__device_error(s->dev)))
		/* The rank's device failed for good: so does the
		 * communicator, before the peers agree with this rank. */
		comm_fail(c, ret, "rank %d: CUDA device %d failed (%s)", r,
			  c->rk[r].dev, cgr_err_name(ret));
	ret = failed_code(c) ? rank_failed(c, r) : agree(c, r, g, n);
	if (ret != 0 && failed_code(c) == 0)
		/* The ranks' sequences no longer line up. */
		comm_fail(c, ret, "rank %d: the agreement failed: %s", r,
			  cgr_comm_errmsg(c->sd, r));
	if (ret != 0)
		ret = rank_failed(c, r);
	for (size_t i = 0; i < n && ret == 0; i++)
		any |= g[i].res == 0;
	if (any && (p = nev_new(c, r, g, n)) == NULL)
		ret = -ENOMEM;
	if (any && ret == 0)
		ret = enqueue(c, r, g, n, s, p->ev);
	if (ret != 0 && any && failed_code(c) == 0)
		/* The peers enqueued theirs: they would wait forever. */
		comm_fail(c, ret, "rank %d could not enqueue (%s)", r,
			  cgr_err_name(ret));
	ret = settle_futures(g, n, p, ret);
	if (p != NULL && (out != NULL || inline_) &&
	    cgr__dfuture_create(c->base.ctx, NULL, &all) == 0) {
		p->first = ret;
		polled_by(all, p, nev_poll_all);
	}
	if (p != NULL)
		nev_put(p);
	if (inline_)
		return all != NULL ? wait_inline(all) : ret;
	if (all != NULL)
		*out = cgr__dfuture_pub(all);
	else
		return done_future(c, ret, out);
	return 0;
}

/* ---- the interface ------------------------------------------------- */

/* A future for an operation joining rank r's group (completed or
 * attached at its end). */
static int group_add(struct ncomm *c, int r, const struct cgr__coll_desc *d,
		     cgr_stream *s, cgr_future **out)
{
	struct nrank *rk = &c->rk[r];
	struct gop *op;
	int ret = 0;

	if (rk->gn == rk->gcap) {
		size_t ncap = rk->gcap ? 2 * rk->gcap : 16;
		struct gop *ng = cgr__alloc(c->base.arena,
					    ncap * sizeof(*ng), 16);
		if (ng == NULL)
			return -ENOMEM;
		if (rk->gn)
			memcpy(ng, rk->g, rk->gn * sizeof(*ng));
		cgr__free(c->base.arena, rk->g, rk->gcap * sizeof(*ng), 16);
		rk->g = ng;
		rk->gcap = ncap;
	}
	op = &rk->g[rk->gn];
	memset(op, 0, sizeof(*op));
	op->d = *d;
	if (!rk->gs_set) {
		rk->gs = s;
		rk->gs_set = true;
	} else if (s != rk->gs && op->d.poison == 0) {
		op->d.poison = -EINVAL;
		op->d.poison_msg = "invalid arguments: operations of one group "
				   "on different streams";
		ret = -EINVAL;
		out = NULL;
	}
	if (op->d.poison_msg != NULL) {
		snprintf(op->msg, sizeof(op->msg), "%s", op->d.poison_msg);
		op->d.poison_msg = op->msg;
	}
	if (out != NULL) {
		int e = cgr__dfuture_create(c->base.ctx, NULL, &op->fut);
		if (e < 0)
			return e;
		*out = cgr__dfuture_pub(op->fut);
	}
	rk->gn++;
	return ret;
}

static int nccl_op(cgr_comm *cc, int r, const struct cgr__coll_desc *d,
		   cgr_stream *s, cgr_future **out)
{
	struct ncomm *c = ncomm_of(cc);
	struct gop one;

	if (c->rk[r].gdepth > 0)
		return group_add(c, r, d, s, out);
	if ((d->kind == CGR__COLL_SEND || d->kind == CGR__COLL_RECV) &&
	    d->root == r)
		return -EINVAL; /* would wait for itself: needs a group */
	memset(&one, 0, sizeof(one));
	one.d = *d;
	if (d->poison_msg != NULL) {
		snprintf(one.msg, sizeof(one.msg), "%s", d->poison_msg);
		one.d.poison_msg = one.msg;
	}
	return issue(c, r, &one, 1, s, out);
}

static int nccl_group_start(cgr_comm *cc, int r)
{
	ncomm_of(cc)->rk[r].gdepth++;
	return 0;
}

static int nccl_group_end(cgr_comm *cc, int r, cgr_future **out)
{
	struct ncomm *c = ncomm_of(cc);
	struct nrank *rk = &c->rk[r];
	int ret;

	if (rk->gdepth == 0)
		return -EINVAL;
	if (--rk->gdepth > 0)
		return 0;
	ret = issue(c, r, rk->g, rk->gn, rk->gs, out);
	rk->gn = 0;
	rk->gs = NULL;
	rk->gs_set = false;
	return ret;
}

static const struct cgr__comm_ops nccl_ops = {
	.name = "nccl",
	.send = nccl_op,
	.recv = nccl_op,
	.allreduce = nccl_op,
	.allgather = nccl_op,
	.reducescatter = nccl_op,
	.reduce = nccl_op,
	.broadcast = nccl_op,
	.gather = nccl_op,
	.scatter = nccl_op,
	.alltoall = nccl_op,
	.group_start = nccl_group_start,
	.group_end = nccl_group_end,
	.abort = nccl_abort,
	.destroy = nccl_destroy,
	.errmsg = nccl_errmsg,
};
