/*
 * comm/nccl_ops.c: the NCCL backend's operations (see nccl.h): the
 * agreement on the host (comm/agree.h's records over the communicator's
 * two CPU communicators), enqueueing an operation or a group on a rank's
 * stream (NCCL's types and calls, gather, scatter and alltoall as sends
 * and receives before 2.28.3, the record and futures of what was
 * issued), the entry points and groups.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm/agree.h"
#include "comm/nccl.h"

#define OP_NS (60ll * 1000000000) /* an operation's default deadline */

/* ---- agreement on the host ----------------------------------------- */

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
	if (cgr__nccl_failed(c) != 0 || rk->nc == NULL) {
		pthread_mutex_unlock(&rk->lock);
		return cgr__nccl_rank_failed(c, r);
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
		cgr__nccl_fail(
		    c, cgr__nccl_map_err(e), "rank %d: enqueueing: %s (%s)", r,
		    cgr__nccl_res_text(c->rt, e).s, cgr__nccl_msg(c, r, e));
	else if (e == ncclInProgress)
		cgr__nccl_settle(c, r, cgr__deadline(OP_NS), "enqueueing");
	ret = cgr__nccl_failed(c);
	/* Only now does the stream hold NCCL's work (R3). */
	if (ret == 0 && ev != NULL)
		ret = cgr_event_record(ev, s);
	pthread_mutex_unlock(&rk->lock);
	if (ret != 0 && cgr__nccl_failed(c) != 0)
		return cgr__nccl_rank_failed(c, r);
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
		cgr__nccl_nev_put(p);
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
			cgr__nccl_polled_by(g[i].fut, p, cgr__nccl_nev_poll);
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
		cgr__nccl_fail(c, ret, "rank %d: CUDA device %d failed (%s)", r,
			       c->rk[r].dev, cgr_err_name(ret));
	ret = cgr__nccl_failed(c) ? cgr__nccl_rank_failed(c, r)
				  : agree(c, r, g, n);
	if (ret != 0 && cgr__nccl_failed(c) == 0)
		/* The ranks' sequences no longer line up. */
		cgr__nccl_fail(c, ret, "rank %d: the agreement failed: %s", r,
			       cgr_comm_errmsg(c->sd, r));
	if (ret != 0)
		ret = cgr__nccl_rank_failed(c, r);
	for (size_t i = 0; i < n && ret == 0; i++)
		any |= g[i].res == 0;
	if (any && (p = nev_new(c, r, g, n)) == NULL)
		ret = -ENOMEM;
	if (any && ret == 0)
		ret = enqueue(c, r, g, n, s, p->ev);
	if (ret != 0 && any && cgr__nccl_failed(c) == 0)
		/* The peers enqueued theirs: they would wait forever. */
		cgr__nccl_fail(c, ret, "rank %d could not enqueue (%s)", r,
			       cgr_err_name(ret));
	ret = settle_futures(g, n, p, ret);
	if (p != NULL && (out != NULL || inline_) &&
	    cgr__dfuture_create(c->base.ctx, NULL, &all) == 0) {
		p->first = ret;
		cgr__nccl_polled_by(all, p, cgr__nccl_nev_poll_all);
	}
	if (p != NULL)
		cgr__nccl_nev_put(p);
	if (inline_)
		return all != NULL ? wait_inline(all) : ret;
	if (all != NULL)
		*out = cgr__dfuture_pub(all);
	else
		return cgr__nccl_done_future(c, ret, out);
	return 0;
}

/* ---- the interface ------------------------------------------------- */

/* A future for an operation joining rank r's group (completed or
 * attached at its end).  One stream per group (cgr__group_mixed). */
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
		op->d.poison_msg = CGR__GROUP_MIXED_MSG;
		rk->gmixed = true;
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

int cgr__nccl_op(cgr_comm *cc, int r, const struct cgr__coll_desc *d,
		 cgr_stream *s, cgr_future **out)
{
	struct ncomm *c = cgr__nccl_of(cc);
	struct gop one;

	if (c->rk[r].dev < 0)
		return -EINVAL; /* across hosts: that rank is elsewhere */
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

int cgr__nccl_group_start(cgr_comm *cc, int r)
{
	if (cgr__nccl_of(cc)->rk[r].dev < 0)
		return -EINVAL;
	cgr__nccl_of(cc)->rk[r].gdepth++;
	return 0;
}

int cgr__nccl_group_end(cgr_comm *cc, int r, cgr_future **out)
{
	struct ncomm *c = cgr__nccl_of(cc);
	struct nrank *rk = &c->rk[r];
	int ret;

	if (rk->gdepth == 0 || rk->dev < 0)
		return -EINVAL;
	if (--rk->gdepth > 0)
		return 0;
	for (size_t i = 0; rk->gmixed && i < rk->gn; i++)
		cgr__group_mixed(&rk->g[i].d, rk->g[i].msg,
				 sizeof(rk->g[i].msg));
	ret = issue(c, r, rk->g, rk->gn, rk->gs, out);
	rk->gn = 0;
	rk->gs = NULL;
	rk->gs_set = false;
	rk->gmixed = false;
	return ret;
}
