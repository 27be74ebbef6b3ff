/*
 * comm/comm.c: the backend-independent half of communicators: creation,
 * the public collective and point-to-point calls (each fills a descriptor
 * and goes through cgr__comm_coll), and argument checks.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"

/* ---- communicators ------------------------------------------------- */

/* Ids are unique in the process, not only in the context: a task that
 * passes another context's id to cgr_task_comm gets -ENOENT, never a
 * communicator of its own context that happens to share the number.
 * Across hosts the context's base (its rank, above bit 40) keeps them
 * apart. */
static _Atomic uint64_t cgr__comm_serial;

uint64_t cgr__comm_new_id(cgr_ctx *ctx)
{
	return ctx->comm_ids +
	       atomic_fetch_add_explicit(&cgr__comm_serial, 1,
					 memory_order_relaxed) +
	       1;
}

int cgr__comm_finish(cgr_ctx *ctx, cgr_comm *c, cgr_worker *const *members,
		     size_t n, int backend, uint64_t id)
{
	c->ctx = ctx;
	c->arena = &ctx->arena;
	c->log = &ctx->log;
	c->n = (int)n;
	c->backend = backend;
	c->members = NULL;
	c->calls = cgr__alloc(c->arena, n * sizeof(*c->calls), 64);
	if (c->calls == NULL) {
		c->ops->destroy(c);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		atomic_init(&c->calls[i].n, 0);
	if (members != NULL) {
		c->members = cgr__alloc(c->arena, n * sizeof(*members), 16);
		if (c->members == NULL) {
			cgr__free(c->arena, c->calls, n * sizeof(*c->calls),
				  64);
			c->ops->destroy(c);
			return -ENOMEM;
		}
		memcpy(c->members, members, n * sizeof(*members));
	}
	cgr__ctx_ref(ctx);
	c->id = id;
	pthread_mutex_lock(&ctx->comm_lock);
	c->next = ctx->comms;
	ctx->comms = c;
	pthread_mutex_unlock(&ctx->comm_lock);
	return 0;
}

cgr_comm *cgr__comm_find(cgr_ctx *ctx, uint64_t id)
{
	cgr_comm *c;

	pthread_mutex_lock(&ctx->comm_lock);
	for (c = ctx->comms; c != NULL && c->id != id; c = c->next)
		;
	pthread_mutex_unlock(&ctx->comm_lock);
	return c;
}

/* What the calling thread's task run holds (cgr__comm_take). */
static _Thread_local cgr_comm *held[CGR__TASK_COMMS];
_Thread_local unsigned cgr__comm_nheld;

static int rank_of(const cgr_comm *c, const cgr_worker *w)
{
	int r = 0;

	while (r < c->n && c->members[r] != w)
		r++;
	return r < c->n ? r : -1;
}

int cgr__comm_take(cgr_ctx *ctx, uint64_t id, const cgr_worker *w,
		   cgr_comm **out, int *rank)
{
	cgr_comm *c;
	int r = -1;

	for (unsigned i = 0; i < cgr__comm_nheld; i++)
		if (held[i]->ctx == ctx && held[i]->id == id &&
		    (r = rank_of(held[i], w)) >= 0) {
			*out = held[i];
			*rank = r;
			return 0;
		}
	if (cgr__comm_nheld == CGR__TASK_COMMS)
		return -ENOSPC;
	pthread_mutex_lock(&ctx->comm_lock);
	for (c = ctx->comms; c != NULL; c = c->next)
		if (c->id == id && c->members != NULL &&
		    (r = rank_of(c, w)) >= 0) {
			c->uses++;
			break;
		}
	pthread_mutex_unlock(&ctx->comm_lock);
	if (c == NULL)
		return -ENOENT;
	held[cgr__comm_nheld++] = c;
	*out = c;
	*rank = r;
	return 0;
}

void cgr__comm_drop_held(void)
{
	while (cgr__comm_nheld > 0) {
		cgr_comm *c = held[--cgr__comm_nheld];
		pthread_mutex_lock(&c->ctx->comm_lock);
		if (--c->uses == 0)
			pthread_cond_broadcast(&c->ctx->comm_cond);
		pthread_mutex_unlock(&c->ctx->comm_lock);
	}
}

/* Under ctx->comm_lock: the calling thread lets c go if it holds it (a
 * task destroying what it took). */
static void unhold(cgr_comm *c)
{
	for (unsigned i = 0; i < cgr__comm_nheld; i++)
		if (held[i] == c) {
			held[i] = held[--cgr__comm_nheld];
			c->uses--;
			return;
		}
}

/* Whether a thread is inside one of c's calls (C1: the acquire pairs
 * with the call's release as it leaves: then it touches c no more). */
static bool calls_in(const cgr_comm *c)
{
	for (int r = 0; c->calls != NULL && r < c->n; r++)
		if (atomic_load_explicit(&c->calls[r].n, memory_order_acquire))
			return true;
	return false;
}

/* Under ctx->comm_lock: tasks that hold c, and threads inside its calls,
 * are given 1 s to return after an abort: whether none is left then. */
static bool comm_unused(cgr_ctx *ctx, cgr_comm *c)
{
	int64_t until = cgr__now_ns() + 1000000000;
	struct timespec ts = { until / 1000000000, until % 1000000000 };

	if (c->uses == 0 && !calls_in(c))
		return true;
	pthread_mutex_unlock(&ctx->comm_lock);
	c->ops->abort(c);
	pthread_mutex_lock(&ctx->comm_lock);
	while (c->uses != 0 && cgr__now_ns() < until)
		pthread_cond_timedwait(&ctx->comm_cond, &ctx->comm_lock, &ts);
	/* A call wakes with -ECANCELED: a look every millisecond. */
	while (calls_in(c) && cgr__now_ns() < until) {
		struct timespec ms = { 0, 1000000 };
		pthread_mutex_unlock(&ctx->comm_lock);
		nanosleep(&ms, NULL);
		pthread_mutex_lock(&ctx->comm_lock);
	}
	return c->uses == 0 && !calls_in(c);
}

static int comm_create(cgr_ctx *ctx, cgr_worker *const *members, size_t n,
		       int backend, const struct cgr__comm_shm *shm,
		       cgr_comm **out)
{
	cgr_comm *c;
	int ret;

	if (ctx == NULL || out == NULL || n == 0 || n > CGR_MAX_RANKS)
		return -EINVAL;
	if (members != NULL)
		for (size_t i = 0; i < n; i++) {
			if (members[i] == NULL)
				return -EINVAL;
			const char *why = NULL;
			int bad = ctx->worker_unfit != NULL ?
					  ctx->worker_unfit(ctx, members[i],
							    shm != NULL, &why) :
					  0;
			if (bad < 0) {
				cgr__err(&ctx->log,
					 "cgr_comm_create: member %zu is %s", i,
					 why);
				return bad;
			}
			for (size_t j = 0; j < i; j++)
				if (members[j] == members[i])
					return -EINVAL;
		}
	/* Members on several hosts (remote/rcomm.c). */
	if (members != NULL && shm == NULL && ctx->comm_far != NULL &&
	    (ret = ctx->comm_far(ctx, members, n, backend, out)) != 1)
		return ret;
	switch (backend) {
	case CGR_BACKEND_AUTO:
	case CGR_BACKEND_CPU:
		ret = cgr__cpu_comm_create(ctx, (int)n, shm, &c);
		backend = CGR_BACKEND_CPU;
		break;
	case CGR_BACKEND_NCCL:
#ifdef HAVE_NCCL
		ret = cgr__nccl_comm_create(ctx, members, (int)n, &c);
		break;
#else
		cgr__info(&ctx->log, "nccl: this build has no NCCL backend");
		return -EOPNOTSUPP;
#endif
	default:
		return -EINVAL;
	}
	if (ret < 0)
		return ret;
	ret = cgr__comm_finish(ctx, c, members, n, backend,
			       cgr__comm_new_id(ctx));
	if (ret == 0)
		*out = c;
	return ret;
}

cgr_comm *cgr__comm_records(cgr_comm *c)
{
#ifdef HAVE_NCCL
	if (c->backend == CGR_BACKEND_NCCL)
		return cgr__nccl_records(c);
#endif
	return c;
}

int cgr_comm_create(cgr_ctx *ctx, cgr_worker *const *members, size_t n,
		    int backend, cgr_comm **out)
{
	return comm_create(ctx, members, n, backend, NULL, out);
}

int cgr__comm_create_shared(cgr_ctx *ctx, cgr_worker *const *members,
			    size_t n, const struct cgr__comm_shm *shm,
			    cgr_comm **out)
{
	if (shm == NULL || shm->mem == NULL)
		return -EINVAL;
	return comm_create(ctx, members, n, CGR_BACKEND_CPU, shm, out);
}

int cgr_comm_abort(cgr_comm *c)
{
	if (c == NULL)
		return -EINVAL;
	return c->ops->abort(c);
}

void cgr_comm_destroy(cgr_comm *c)
{
	cgr_ctx *ctx;
	bool unused;

	if (c == NULL)
		return;
	ctx = c->ctx;
	pthread_mutex_lock(&ctx->comm_lock);
	for (cgr_comm **pp = &ctx->comms; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	unhold(c);
	unused = comm_unused(ctx, c);
	pthread_mutex_unlock(&ctx->comm_lock);
	if (!unused) {
		cgr__err(&ctx->log, "cgr_comm_destroy: a task or a call still "
				    "holds communicator %llu 1 s after its "
				    "abort: it is left to it",
			 (unsigned long long)c->id);
		return;
	}
	if (c->members != NULL)
		cgr__free(c->arena, c->members, (size_t)c->n * sizeof(*c->members),
			  16);
	cgr__free(c->arena, c->calls, (size_t)c->n * sizeof(*c->calls), 64);
	c->ops->destroy(c);
	cgr__ctx_put(ctx);
}

uint64_t cgr_comm_id(const cgr_comm *c)
{
	return c == NULL ? 0 : c->id;
}

int cgr_comm_size(const cgr_comm *c)
{
	return c == NULL ? -EINVAL : c->n;
}

const char *cgr_comm_errmsg(const cgr_comm *c, int rank)
{
	if (c == NULL || rank < 0 || rank >= c->n)
		return "";
	return c->ops->errmsg(c, rank);
}

/* ---- argument checks ----------------------------------------------- */

static bool ranges_overlap(const void *a, size_t la, const void *b, size_t lb)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

	if (la == 0 || lb == 0)
		return false;
	return x < y + lb && y < x + la;
}

/* In place exactly (`in` == `at`), or disjoint. */
static bool cgr__inplace_ok(const void *a, size_t la, const void *b,
			    size_t lb, const void *at)
{
	return a == at || !ranges_overlap(a, la, b, lb);
}

/*
 * Checks what only this rank can see.  Returns 0, or -EINVAL with why
 * filled in: the caller then poisons the operation so that every rank
 * fails, not only this one.  (Long: one case per operation kind, kept
 * together so that the buffer rules read as one table.)
 */
static int cgr__desc_check(const cgr_comm *c, int rank,
			   const struct cgr__coll_desc *d, char *why,
			   size_t len)
{
	size_t es = cgr_dtype_size(d->dtype), n = (size_t)c->n, b, nb;
	const char *s = d->send;
	char *r = d->recv;
	bool root = d->root == rank;

	if (es == 0) {
		snprintf(why, len, "unknown dtype %d", (int)d->dtype);
		return -EINVAL;
	}
	if (cgr__coll_reduces(d->kind) &&
	    ((int)d->op < 0 || d->op >= CGR_REDOP_COUNT)) {
		snprintf(why, len, "unknown reduction op %d", (int)d->op);
		return -EINVAL;
	}
	if (cgr__coll_rooted(d->kind) && (d->root < 0 || d->root >= c->n)) {
		snprintf(why, len, "root %d out of range [0, %d)", d->root,
			 c->n);
		return -EINVAL;
	}
	/* count * es * n overflows (es * n cannot): a multiplication, not
	 * two divisions, on every call. */
	if (__builtin_mul_overflow(d->count, es * n, &b)) {
		snprintf(why, len, "count %zu too large", d->count);
		return -EINVAL;
	}
	if (d->count == 0)
		return 0;
	b = d->count * es;
	nb = b * n;
#define CGR__NEED(cond, ...)                          \
	do {                                          \
		if (!(cond)) {                        \
			snprintf(why, len, __VA_ARGS__); \
			return -EINVAL;               \
		}                                     \
	} while (0)
	switch (d->kind) {
	case CGR_COLL_ALLREDUCE:
		CGR__NEED(s && r, "NULL buffer");
		CGR__NEED(cgr__inplace_ok(s, b, r, b, r),
			  "send and recv overlap but are not in place");
		break;
	case CGR_COLL_ALLGATHER:
		CGR__NEED(s && r, "NULL buffer");
		CGR__NEED(cgr__inplace_ok(s, b, r, nb, r + (size_t)rank * b),
			  "send overlaps recv but is not recv + rank * "
			  "sendcount (in place)");
		break;
	case CGR_COLL_REDUCESCATTER:
		CGR__NEED(s && r, "NULL buffer");
		CGR__NEED(cgr__inplace_ok(r, b, s, nb, s + (size_t)rank * b),
			  "recv overlaps send but is not send + rank * "
			  "recvcount (in place)");
		break;
	case CGR_COLL_REDUCE:
		CGR__NEED(s, "NULL send buffer");
		CGR__NEED(!root || r, "NULL recv buffer on the root");
		CGR__NEED(!root || cgr__inplace_ok(s, b, r, b, r),
			  "send and recv overlap but are not in place");
		break;
	case CGR_COLL_BROADCAST:
		CGR__NEED(r, "NULL recv buffer");
		CGR__NEED(!root || s, "NULL send buffer on the root");
		CGR__NEED(!root || cgr__inplace_ok(s, b, r, b, r),
			  "send and recv overlap but are not in place");
		break;
	case CGR_COLL_GATHER:
		CGR__NEED(s, "NULL send buffer");
		CGR__NEED(!root || r, "NULL recv buffer on the root");
		CGR__NEED(!root || cgr__inplace_ok(s, b, r, nb,
						   r + (size_t)rank * b),
			  "send overlaps recv but is not recv + root * "
			  "sendcount (in place)");
		break;
	case CGR_COLL_SCATTER:
		CGR__NEED(r, "NULL recv buffer");
		CGR__NEED(!root || s, "NULL send buffer on the root");
		CGR__NEED(!root || cgr__inplace_ok(r, b, s, nb,
						   s + (size_t)rank * b),
			  "recv overlaps send but is not send + root * "
			  "recvcount (in place)");
		break;
	case CGR_COLL_ALLTOALL:
		CGR__NEED(s && r, "NULL buffer");
		CGR__NEED(!ranges_overlap(s, nb, r, nb),
			  "send and recv overlap (alltoall is never in place)");
		break;
	case CGR__COLL_SEND:
		CGR__NEED(s, "NULL buffer");
		break;
	case CGR__COLL_RECV:
		CGR__NEED(r, "NULL buffer");
		break;
	default:
		break;
	}
#undef CGR__NEED
	return 0;
}

int cgr__comm_coll(cgr_comm *c, int rank, const struct cgr__coll_desc *d,
		   cgr_stream *s, cgr_future **out)
{
	struct cgr__coll_desc p;
	cgr__comm_op_fn fn = NULL;
	char why[128];
	char msg[160];
	int ret;

	if (c == NULL || d == NULL || rank < 0 || rank >= c->n)
		return -EINVAL;
	switch (d->kind) {
	case CGR_COLL_ALLREDUCE:
		fn = c->ops->allreduce;
		break;
	case CGR_COLL_ALLGATHER:
		fn = c->ops->allgather;
		break;
	case CGR_COLL_REDUCESCATTER:
		fn = c->ops->reducescatter;
		break;
	case CGR_COLL_REDUCE:
		fn = c->ops->reduce;
		break;
	case CGR_COLL_BROADCAST:
		fn = c->ops->broadcast;
		break;
	case CGR_COLL_GATHER:
		fn = c->ops->gather;
		break;
	case CGR_COLL_SCATTER:
		fn = c->ops->scatter;
		break;
	case CGR_COLL_ALLTOALL:
		fn = c->ops->alltoall;
		break;
	case CGR__COLL_SEND:
		fn = c->ops->send;
		break;
	case CGR__COLL_RECV:
		fn = c->ops->recv;
		break;
	default:
		return -EINVAL;
	}
	if ((d->kind == CGR__COLL_SEND || d->kind == CGR__COLL_RECV) &&
	    (d->root < 0 || d->root >= c->n))
		return -EINVAL; /* no peer to tell */
	ret = cgr__desc_check(c, rank, d, why, sizeof(why));
	if (ret == 0)
		return fn(c, rank, d, s, out);
	/* Poison this rank's share so the peers fail too, then report. */
	p = *d;
	snprintf(msg, sizeof(msg), "invalid arguments: %s", why);
	if (p.poison == 0) {
		p.poison = ret;
		p.poison_msg = msg;
	}
	fn(c, rank, &p, s, NULL);
	return ret;
}

void cgr__group_mixed(struct cgr__coll_desc *d, char *msg, size_t cap)
{
	if (d->poison != 0)
		return;
	d->poison = -EINVAL;
	snprintf(msg, cap, "%s", CGR__GROUP_MIXED_MSG);
	d->poison_msg = msg;
}

/* ---- public calls -------------------------------------------------- */

/* A public call of rank's is counted while it runs (c->calls), so that
 * cgr_comm_destroy waits for it; call_out returns ret. */
static void call_in(cgr_comm *c, int rank)
{
	if (c->calls != NULL)
		atomic_fetch_add_explicit(&c->calls[rank].n, 1,
					  memory_order_relaxed);
}

static int call_out(cgr_comm *c, int rank, int ret)
{
	if (c->calls != NULL) /* C1 */
		atomic_fetch_sub_explicit(&c->calls[rank].n, 1,
					  memory_order_release);
	return ret;
}

static int public_coll(cgr_comm *c, int rank, const struct cgr__coll_desc *d,
		       cgr_stream *s, cgr_future **out)
{
	if (c == NULL || rank < 0 || rank >= c->n)
		return -EINVAL;
	if (s == NULL)
		cgr__stream_hand_over(); /* it may wait for the held one */
	call_in(c, rank);
	return call_out(c, rank, cgr__comm_coll(c, rank, d, s, out));
}

#define CGR__DESC(k, sb, rb, n, dt, o, rt)                                 \
	(struct cgr__coll_desc)                                             \
	{                                                                   \
		.kind = (k), .send = (sb), .recv = (rb), .count = (n),      \
		.dtype = (dt), .op = (o), .root = (rt)                      \
	}

int cgr_allreduce(cgr_comm *c, int rank, const void *send, void *recv,
		  size_t count, cgr_dtype dt, cgr_redop op, cgr_stream *s,
		  cgr_future **out)
{
	struct cgr__coll_desc d =
		CGR__DESC(CGR_COLL_ALLREDUCE, send, recv, count, dt, op, 0);
	return public_coll(c, rank, &d, s, out);
}

int cgr_allgather(cgr_comm *c, int rank, const void *send, void *recv,
		  size_t sendcount, cgr_dtype dt, cgr_stream *s,
		  cgr_future **out)
{
	struct cgr__coll_desc d = CGR__DESC(CGR_COLL_ALLGATHER, send, recv,
					    sendcount, dt, CGR_SUM, 0);
	return public_coll(c, rank, &d, s, out);
}

int cgr_reducescatter(cgr_comm *c, int rank, const void *send, void *recv,
		      size_t recvcount, cgr_dtype dt, cgr_redop op,
		      cgr_stream *s, cgr_future **out)
{
	struct cgr__coll_desc d = CGR__DESC(CGR_COLL_REDUCESCATTER, send,
					    recv, recvcount, dt, op, 0);
	return public_coll(c, rank, &d, s, out);
}

int cgr_reduce(cgr_comm *c, int rank, const void *send, void *recv,
	       size_t count, cgr_dtype dt, cgr_redop op, int root,
	       cgr_stream *s, cgr_future **out)
{
	struct cgr__coll_desc d =
		CGR__DESC(CGR_COLL_REDUCE, send, recv, count, dt, op, root);
	return public_coll(c, rank, &d, s, out);
}

int cgr_broadcast(cgr_comm *c, int rank, const void *send, void *recv,
		  size_t count, cgr_dtype dt, int root, cgr_stream *s,
		  cgr_future **out)
{
	struct cgr__coll_desc d = CGR__DESC(CGR_COLL_BROADCAST, send, recv,
					    count, dt, CGR_SUM, root);
	return public_coll(c, rank, &d, s, out);
}

int cgr_gather(cgr_comm *c, int rank, const void *send, void *recv,
	       size_t sendcount, cgr_dtype dt, int root, cgr_stream *s,
	       cgr_future **out)
{
	struct cgr__coll_desc d = CGR__DESC(CGR_COLL_GATHER, send, recv,
					    sendcount, dt, CGR_SUM, root);
	return public_coll(c, rank, &d, s, out);
}

int cgr_scatter(cgr_comm *c, int rank, const void *send, void *recv,
		size_t recvcount, cgr_dtype dt, int root, cgr_stream *s,
		cgr_future **out)
{
	struct cgr__coll_desc d = CGR__DESC(CGR_COLL_SCATTER, send, recv,
					    recvcount, dt, CGR_SUM, root);
	return public_coll(c, rank, &d, s, out);
}

int cgr_alltoall(cgr_comm *c, int rank, const void *send, void *recv,
		 size_t count, cgr_dtype dt, cgr_stream *s, cgr_future **out)
{
	struct cgr__coll_desc d = CGR__DESC(CGR_COLL_ALLTOALL, send, recv,
					    count, dt, CGR_SUM, 0);
	return public_coll(c, rank, &d, s, out);
}

int cgr_send(cgr_comm *c, int rank, const void *buf, size_t count,
	     cgr_dtype dt, int peer, cgr_stream *s, cgr_future **out)
{
	struct cgr__coll_desc d =
		CGR__DESC(CGR__COLL_SEND, buf, NULL, count, dt, CGR_SUM, peer);
	return public_coll(c, rank, &d, s, out);
}

int cgr_recv(cgr_comm *c, int rank, void *buf, size_t count, cgr_dtype dt,
	     int peer, cgr_stream *s, cgr_future **out)
{
	struct cgr__coll_desc d =
		CGR__DESC(CGR__COLL_RECV, NULL, buf, count, dt, CGR_SUM, peer);
	return public_coll(c, rank, &d, s, out);
}

int cgr_group_start(cgr_comm *c, int rank)
{
	if (c == NULL || rank < 0 || rank >= c->n)
		return -EINVAL;
	return c->ops->group_start(c, rank);
}

int cgr_group_end(cgr_comm *c, int rank, cgr_future **out)
{
	if (c == NULL || rank < 0 || rank >= c->n)
		return -EINVAL;
	cgr__stream_hand_over(); /* (as public_coll) */
	call_in(c, rank);
	return call_out(c, rank, c->ops->group_end(c, rank, out));
}
