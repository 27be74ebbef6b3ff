/*
 * comm/nccl_setup.c: the NCCL backend's life (see nccl.h): loading
 * libnccl (device/lib.h) once per context, creating a communicator
 * (every rank's NCCL communicator in one group, and the two CPU
 * communicators of the agreement), finalizing, aborting and destroying
 * it, its table of operations.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/nccl.h"
#include "device/lib.h"

#ifndef CGR_NCCL_LIBDIR
#define CGR_NCCL_LIBDIR "/usr/local/cuda/lib64"
#endif

#define MIN_VERSION CGR__NCCL_MIN_VERSION
#define NATIVE_GSA CGR__NCCL_NATIVE_GSA
#define INIT_NS (30ll * 1000000000)
#define FINI_NS (10ll * 1000000000)

/* ---- the library -------------------------------------------------- */

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

/* ---- creation and destruction -------------------------------------- */

/* The CUDA device of each rank: its member's, or CUDA device r. */
static int rank_devices(cgr_ctx *ctx, cgr_worker *const *members, int n,
			bool far, int *dev)
{
	for (int r = 0; r < n; r++) {
		if (far && members[r] == NULL) {
			dev[r] = -1; /* elsewhere */
			continue;
		}
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
static int new_id(const struct cgr__ncclrt *rt, const struct cgr__logger *log,
		  ncclUniqueId *id)
{
	ncclResult_t e = rt->get_unique_id(id);

	if (e != ncclSuccess) {
		cgr__warn(log, "nccl: ncclGetUniqueId: %s",
			  cgr__nccl_res_text(rt, e).s);
		return cgr__nccl_map_err(e);
	}
	return 0;
}

/* (Ranks elsewhere, across hosts, are initialised there.) */
static int init_ranks(struct ncomm *c, const ncclUniqueId *idp)
{
	const struct cgr__ncclrt *rt = c->rt;
	int n = c->base.n, ret = 0;
	int64_t deadline = cgr__deadline(INIT_NS);
	ncclUniqueId id;
	ncclResult_t e;

	if (idp != NULL)
		id = *idp;
	else if ((ret = new_id(rt, c->base.log, &id)) != 0)
		return ret;
	rt->group_start();
	for (int r = 0; r < n && ret == 0; r++) {
		ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
		if (c->rk[r].dev < 0)
			continue;
		cfg.blocking = 0;
		cgr__cuda_stream_use(c->rk[r].own);
		e = rt->init_rank_config(&c->rk[r].nc, n, id, r, &cfg);
		if (e != ncclSuccess && e != ncclInProgress) {
			cgr__warn(c->base.log,
				  "nccl: ncclCommInitRankConfig of rank %d: "
				  "%s (%s)",
				  r, cgr__nccl_res_text(rt, e).s,
				  rt->last_error(NULL));
			ret = cgr__nccl_map_err(e);
		}
	}
	e = rt->group_end();
	if (ret == 0 && e != ncclSuccess && e != ncclInProgress) {
		cgr__warn(c->base.log, "nccl: initialisation: %s (%s)",
			  cgr__nccl_res_text(rt, e).s, rt->last_error(NULL));
		ret = cgr__nccl_map_err(e);
	}
	for (int r = 0; r < n && ret == 0; r++) {
		if (c->rk[r].dev < 0)
			continue;
		pthread_mutex_lock(&c->rk[r].lock);
		ret = cgr__nccl_settle(c, r, deadline, "initialisation");
		pthread_mutex_unlock(&c->rk[r].lock);
	}
	if (ret != 0 && cgr__nccl_failed(c) == 0)
		cgr__nccl_fail(c, ret, "initialisation failed");
	return ret;
}

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

/* Frees what create allocated (the NCCL side is gone already). */
static void comm_free(struct ncomm *c)
{
	struct cgr__arena *a = c->base.arena;
	int n = c->base.n;

	for (int r = 0; r < n; r++) {
		cgr_stream_destroy(c->rk[r].own);
		pthread_mutex_destroy(&c->rk[r].lock);
		cgr__free(a, c->rk[r].g, c->rk[r].gcap * sizeof(struct gop), 16);
	}
	/* Made with cgr__cpu_comm_create: no head of their own (across
	 * hosts they are the maker's: far.gone). */
	if (c->far.gone != NULL)
		c->far.gone(c->far.arg);
	if (c->sd != NULL && !c->borrowed)
		c->sd->ops->destroy(c->sd);
	if (c->rd != NULL && !c->borrowed)
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

	for (int r = 0; r < n && cgr__nccl_failed(c) == 0; r++) {
		ncclResult_t e;
		if (c->rk[r].nc == NULL)
			continue; /* elsewhere */
		pthread_mutex_lock(&c->rk[r].lock);
		e = c->rt->finalize(c->rk[r].nc);
		pthread_mutex_unlock(&c->rk[r].lock);
		if (e != ncclSuccess && e != ncclInProgress)
			cgr__nccl_fail(c, cgr__nccl_map_err(e),
				       "ncclCommFinalize of rank %d: %s", r,
				       cgr__nccl_res_text(c->rt, e).s);
	}
	for (int r = 0; r < n && cgr__nccl_failed(c) == 0; r++) {
		if (c->rk[r].nc == NULL)
			continue;
		pthread_mutex_lock(&c->rk[r].lock);
		cgr__nccl_settle(c, r, deadline, "finalize");
		pthread_mutex_unlock(&c->rk[r].lock);
	}
	if (cgr__nccl_failed(c) != 0)
		return; /* aborted instead */
	for (int r = 0; r < n; r++) {
		if (c->rk[r].nc != NULL)
			c->rt->destroy(c->rk[r].nc);
		c->rk[r].nc = NULL;
	}
}

void cgr__nccl_put(struct ncomm *c)
{
	if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1 &&
	    !c->abandoned)
		comm_free(c);
}

static void nccl_destroy(cgr_comm *cc)
{
	struct ncomm *c = cgr__nccl_of(cc);

	if (c->far.going != NULL)
		c->far.going(c->far.arg);
	if (cgr__nccl_failed(c) == 0)
		finalize_ranks(c);
	pthread_mutex_lock(&c->fail_lock);
	if (cgr__nccl_failed(c) == 0) {
		/* Finalized: futures still held fail from here on. */
		snprintf(c->why, sizeof(c->why), "communicator destroyed");
		atomic_store_explicit(&c->failed, -ECANCELED,
				      memory_order_release);
	}
	pthread_mutex_unlock(&c->fail_lock);
	c->abandoned = !join_aborter(c);
	cgr__nccl_put(c);
}

static int nccl_abort(cgr_comm *cc)
{
	cgr__nccl_stop(cgr__nccl_of(cc), -ECANCELED, "communicator aborted");
	return 0;
}

/* The rank's last failure; one seen only by polling (no call of the
 * rank failed yet) is the communicator's. */
static const char *nccl_errmsg(const cgr_comm *cc, int rank)
{
	const struct ncomm *c = (const struct ncomm *)cc;

	if (c->rk[rank].errmsg[0] == 0 && cgr__nccl_failed(c) != 0)
		return c->why; /* F0: written before failed */
	return c->rk[rank].errmsg;
}

static const struct cgr__comm_ops nccl_ops = {
	.name = "nccl",
	.send = cgr__nccl_op,
	.recv = cgr__nccl_op,
	.allreduce = cgr__nccl_op,
	.allgather = cgr__nccl_op,
	.reducescatter = cgr__nccl_op,
	.reduce = cgr__nccl_op,
	.broadcast = cgr__nccl_op,
	.gather = cgr__nccl_op,
	.scatter = cgr__nccl_op,
	.alltoall = cgr__nccl_op,
	.group_start = cgr__nccl_group_start,
	.group_end = cgr__nccl_group_end,
	.abort = nccl_abort,
	.destroy = nccl_destroy,
	.errmsg = nccl_errmsg,
};

/* The context's NCCL (loaded on first use): 0, or -ENODEV (logged). */
static int nccl_rt(cgr_ctx *ctx, const struct cgr__ncclrt **out)
{
	void *p;
	int ret;

	ret = cgr__ctx_state(ctx, &cgr__nccl_key, rt_make, rt_fini, &p);
	if (ret < 0)
		return ret;
	if (((struct cgr__ncclrt *)p)->version == 0) {
		cgr__info(&ctx->log, "nccl: %s",
			  ((struct cgr__ncclrt *)p)->why);
		return -ENODEV;
	}
	*out = p;
	return 0;
}

/* A communicator of n ranks (members: see rank_devices), initialised from
 * id (NULL: a new one); sd and rd the agreement's (NULL: made here, two
 * CPU communicators); far the maker's additions across hosts. */
static int comm_make(cgr_ctx *ctx, cgr_worker *const *members, int n,
		     const ncclUniqueId *id, cgr_comm *sd, cgr_comm *rd,
		     const struct cgr__nccl_far *far, cgr_comm **out)
{
	const struct cgr__ncclrt *rt;
	struct ncomm *c;
	int dev[CGR_MAX_RANKS], ret;

	if ((ret = nccl_rt(ctx, &rt)) < 0)
		return ret;
	if ((ret = rank_devices(ctx, members, n, far != NULL, dev)) < 0)
		return ret;
	c = cgr__alloc(&ctx->arena, sizeof(*c) + (size_t)n * sizeof(struct nrank),
		       64);
	if (c == NULL)
		return -ENOMEM;
	memset(c, 0, sizeof(*c) + (size_t)n * sizeof(struct nrank));
	c->base.ops = &nccl_ops;
	c->base.ctx = ctx;
	c->base.arena = &ctx->arena;
	c->base.log = &ctx->log;
	c->base.n = n;
	c->rt = rt;
	if (far != NULL)
		c->far = *far;
	c->borrowed = far != NULL;
	atomic_init(&c->far_next, 0);
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
	c->sd = sd;
	c->rd = rd;
	ret = 0;
	if (sd == NULL)
		ret = cgr__cpu_comm_create(ctx, n, NULL, &c->sd);
	if (ret == 0 && rd == NULL)
		ret = cgr__cpu_comm_create(ctx, n, NULL, &c->rd);
	for (int r = 0; r < n && ret == 0; r++)
		if (dev[r] >= 0)
			ret = cgr_stream_create(ctx, dev[r], 0, &c->rk[r].own);
	if (ret == 0)
		ret = init_ranks(c, id);
	if (ret < 0) {
		join_aborter(c);
		c->far.gone = NULL; /* failed: far's arg stays the caller's */
		comm_free(c);
		return ret;
	}
	*out = &c->base;
	return 0;
}

int cgr__nccl_comm_create(cgr_ctx *ctx, cgr_worker *const *members, int n,
			  cgr_comm **out)
{
	return comm_make(ctx, members, n, NULL, NULL, NULL, NULL, out);
}

cgr_comm *cgr__nccl_records(cgr_comm *c)
{
	return cgr__nccl_of(c)->sd;
}

int cgr__nccl_far_id(cgr_ctx *ctx, void *id)
{
	const struct cgr__ncclrt *rt;
	ncclUniqueId u;
	int ret;

	_Static_assert(sizeof(u) == CGR__NCCL_ID_BYTES, "NCCL's unique id");
	if ((ret = nccl_rt(ctx, &rt)) < 0 ||
	    (ret = new_id(rt, &ctx->log, &u)) < 0)
		return ret;
	memcpy(id, &u, sizeof(u));
	return 0;
}

int cgr__nccl_far_part(cgr_ctx *ctx, cgr_worker *const *members, int n,
		       const void *id, cgr_comm *sd, cgr_comm *rd,
		       const struct cgr__nccl_far *far, cgr_comm **out)
{
	struct cgr__nccl_far none = { 0 };
	ncclUniqueId u;

	memcpy(&u, id, sizeof(u));
	return comm_make(ctx, members, n, &u, sd, rd, far ? far : &none, out);
}
