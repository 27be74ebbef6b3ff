/*
 * comm/cpu_algo.c: the CPU backend's operations (see cpu.h): each
 * collective's agreement (comm/agree.h's verdict over the ranks'
 * descriptors) and its data movement (eager through staging slots, or
 * direct between the ranks' buffers), the latency path, and point to
 * point messages.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "comm/cpu.h"
#include "comm/reduce.h"

/* ---- collectives --------------------------------------------------- */

/* Every rank runs this on the same descriptors and reaches the same
 * verdict (comm/agree.h): 0, the poison of the lowest poisoned rank, or
 * CGR_EMISMATCH; with every rank's descriptor agreed already, only the
 * poison. */
static int cgr__agree(struct cgr__wctx *w, uint64_t k)
{
	struct cgr__cpu *c = w->c;
	char m[256];
	int ret;

	ret = cgr__agree_ops(&c->pub[0].d[k & 1].a, sizeof(*c->pub), c->base.n,
			     k, m, sizeof(m));
	if (ret)
		return cgr__cpu_fail(w, ret, "%s", m);
	return 0;
}

/* Chunk r of count elements among n ranks: cache-line aligned bounds. */
static void cgr__chunk(size_t count, size_t es, int n, int r, size_t *off,
		       size_t *len)
{
	size_t per = (count + (size_t)n - 1) / (size_t)n;
	size_t align = es < CGR__CACHELINE ? CGR__CACHELINE / es : 1;
	size_t lo, hi;

	per = (per + align - 1) / align * align;
	lo = per * (size_t)r;
	hi = lo + per;
	if (lo > count)
		lo = count;
	if (hi > count)
		hi = count;
	*off = lo;
	*len = hi - lo;
}

static inline void cgr__copy(void *dst, const void *src, size_t n)
{
	if (n != 0 && dst != src)
		memcpy(dst, src, n);
}

/*
 * Whether collective kind of count elements (es bytes each) among n ranks
 * is eager, and what this rank stages then (*src, *len; len 0: nothing).
 * Every rank decides alike from the agreed values.
 */
static bool cgr__eager(const struct cgr__coll_desc *d, int n, int rank,
		       const void **src, size_t *len)
{
	size_t es = cgr_dtype_size(d->dtype), b = d->count * es;
	size_t nb = b * (size_t)n;

	*src = d->send;
	*len = b;
	switch (d->kind) {
	case CGR_COLL_ALLREDUCE:
	case CGR_COLL_REDUCE:
	case CGR_COLL_ALLGATHER:
	case CGR_COLL_GATHER:
		return b <= CGR__EAGER;
	case CGR_COLL_BROADCAST:
		if (rank != d->root)
			*len = 0;
		return b <= CGR__EAGER;
	case CGR_COLL_SCATTER:
		*len = rank == d->root ? nb : 0;
		return nb <= CGR__EAGER;
	case CGR_COLL_REDUCESCATTER:
	case CGR_COLL_ALLTOALL:
		*len = nb;
		return nb <= CGR__EAGER;
	default:
		return false;
	}
}

/*
 * The result of a staged collective (agreed: every rank's fields are these)
 * from e[j], what rank j staged.  No barrier: only our recv is written.
 * Our own block is copied from `own` (our send buffer), not from the
 * staging: in place that copy is skipped, so a buffer that already holds
 * the result (a broadcast root's, in place) is not written while others
 * may read it.  Reductions read only the staging, in rank order, so that
 * every rank computes the same bits.
 */
static void cgr__move_staged(int kind, int n, int r, int root, size_t count,
			     cgr_dtype dt, cgr_redop op, const void *own,
			     void *recv, const unsigned char *const *e)
{
	const unsigned char *mine = own;
	const void *srcs[CGR_MAX_RANKS];
	size_t b = count * cgr_dtype_size(dt);
	char *rb = recv;

	switch (kind) {
	case CGR_COLL_ALLREDUCE:
	case CGR_COLL_REDUCESCATTER:
		for (int j = 0; j < n; j++)
			srcs[j] = e[j] + (kind == CGR_COLL_ALLREDUCE ?
						  0 :
						  (size_t)r * b);
		cgr__reduce(rb, srcs, n, count, dt, op, n);
		break;
	case CGR_COLL_REDUCE:
		if (r != root)
			break;
		for (int j = 0; j < n; j++)
			srcs[j] = e[j];
		cgr__reduce(rb, srcs, n, count, dt, op, n);
		break;
	case CGR_COLL_GATHER:
		if (r != root)
			break;
		/* fall through */
	case CGR_COLL_ALLGATHER:
		for (int j = 0; j < n; j++)
			cgr__copy(rb + (size_t)j * b, j == r ? mine : e[j],
				  b);
		break;
	case CGR_COLL_BROADCAST:
		cgr__copy(rb, r == root ? mine : e[root], b);
		break;
	case CGR_COLL_SCATTER:
		cgr__copy(rb, (r == root ? mine : e[root]) + (size_t)r * b, b);
		break;
	case CGR_COLL_ALLTOALL:
		for (int j = 0; j < n; j++)
			cgr__copy(rb + (size_t)j * b,
				  (j == r ? mine : e[j]) + (size_t)r * b, b);
		break;
	default:
		break;
	}
}

/* An eager collective #k: results from the staging slots; no barrier. */
static void cgr__move_eager(struct cgr__wctx *w, uint64_t k)
{
	struct cgr__cpu *c = w->c;
	const struct cgr__cdesc *me = &c->pub[w->rank].d[k & 1];
	const unsigned char *e[CGR_MAX_RANKS];
	int n = c->base.n;

	for (int j = 0; j < n; j++)
		e[j] = c->pub[j].eager[k & 1];
	cgr__move_staged(me->a.coll, n, w->rank, me->a.root, me->a.count,
			 (cgr_dtype)me->a.dtype, (cgr_redop)me->a.op,
			 cgr__xin(c, me->send), cgr__xin(c, me->recv), e);
}

/* Rank r's share of the data of collective #k (agreed; me is its
 * descriptor).  Returns whom it must then wait for: -1 all, -2 nobody. */
static int move_data(struct cgr__cpu *c, const struct cgr__cdesc *me,
		     uint64_t k, int r)
{
	const void *srcs[CGR_MAX_RANKS];
	int n = c->base.n, root = me->a.root, ns = 0;
	size_t es = cgr_dtype_size(me->a.dtype), cnt = me->a.count,
	       b = cnt * es;
	size_t off, len;

#define S(j) ((const char *)cgr__xin(c, c->pub[(j)].d[k & 1].send))
#define R(j) ((char *)cgr__xin(c, c->pub[(j)].d[k & 1].recv))
	switch (me->a.coll) {
	case CGR_COLL_ALLREDUCE:
		/* Block by block, so that each reduced block is pushed to
		 * the peers while it is still in cache. */
		cgr__chunk(cnt, es, n, r, &off, &len);
		for (size_t o = off, m; o < off + len; o += m) {
			m = off + len - o;
			if (m > CGR__PUSH_BLOCK / es)
				m = CGR__PUSH_BLOCK / es;
			ns = 0;
			srcs[ns++] = S(r) + o * es;
			for (int j = 0; j < n; j++)
				if (j != r)
					srcs[ns++] = S(j) + o * es;
			cgr__reduce(R(r) + o * es, srcs, ns, m, me->a.dtype,
				    me->a.op, n);
			for (int j = 0; j < n; j++)
				if (j != r)
					cgr__copy(R(j) + o * es, R(r) + o * es,
						  m * es);
		}
		return -1;
	case CGR_COLL_REDUCESCATTER:
		srcs[ns++] = S(r) + (size_t)r * b;
		for (int j = 0; j < n; j++)
			if (j != r)
				srcs[ns++] = S(j) + (size_t)r * b;
		cgr__reduce(R(r), srcs, ns, cnt, me->a.dtype, me->a.op, n);
		return -1;
	case CGR_COLL_REDUCE:
		cgr__chunk(cnt, es, n, r, &off, &len);
		if (len == 0)
			return -1;
		srcs[ns++] = S(root) + off * es;
		for (int j = 0; j < n; j++)
			if (j != root)
				srcs[ns++] = S(j) + off * es;
		cgr__reduce(R(root) + off * es, srcs, ns, len, me->a.dtype,
			    me->a.op, n);
		return -1;
	case CGR_COLL_ALLGATHER:
		for (int j = 0; j < n; j++)
			cgr__copy(R(j) + (size_t)r * b, S(r), b);
		return -1;
	case CGR_COLL_BROADCAST:
		cgr__copy(R(r), S(root), b);
		return r == root ? -1 : -2;
	case CGR_COLL_GATHER:
		cgr__copy(R(root) + (size_t)r * b, S(r), b);
		return r == root ? -1 : -2;
	case CGR_COLL_SCATTER:
		cgr__copy(R(r), S(root) + (size_t)r * b, b);
		return r == root ? -1 : -2;
	case CGR_COLL_ALLTOALL:
		for (int j = 0; j < n; j++)
			cgr__copy(R(r) + (size_t)j * b, S(j) + (size_t)r * b,
				  b);
		return -1;
	default:
		return -1;
	}
#undef S
#undef R
}

/* Moves the data of collective #k (agreed), then the final barrier. */
static int cgr__move(struct cgr__wctx *w, uint64_t k)
{
	struct cgr__cpu *c = w->c;
	const struct cgr__cdesc *me = &c->pub[w->rank].d[k & 1];
	const char *name = cgr__coll_kind_name(me->a.coll);
	uint64_t done = 4 * k + 2;
	int wait_for;

	if (me->a.count == 0)
		return 0;
	if (!cgr__move_begin(c))
		return cgr__cpu_fail(w, cgr__cpu_bail(w, -ECANCELED),
				     "%s #%llu: aborted", name,
				     (unsigned long long)k);
	wait_for = move_data(c, me, k, w->rank);
	cgr__move_end(c);
	cgr__publish(c, w->rank, done);
	if (c->base.n > 1 && wait_for != -2)
		return cgr__cpu_stage_wait(w, done, wait_for, name, k);
	return 0;
}

/* ---- the latency path ---------------------------------------------- */

struct cgr__fastw {
	struct cgr__cpu *c;
	uint64_t k;
};

static inline struct cgr__fast *cgr__fast_of(struct cgr__cpu *c, int r,
					     uint64_t k)
{
	return &c->fast[(size_t)r * 2 + (k & 1)];
}

static bool cgr__fast_ready(void *arg)
{
	struct cgr__fastw *fw = arg;

	/* F1: acquire: pairs with F0; the peer's line is complete.  A line
	 * holds #k or #k-2: it takes #k+2 only after we posted #k+1. */
	for (int j = 0; j < fw->c->base.n; j++)
		if (atomic_load_explicit(&cgr__fast_of(fw->c, j, fw->k)->seq,
					 memory_order_acquire) != fw->k)
			return false;
	return true;
}

/* "ranks 1, 3" that have not posted their latency line of #k. */
static void cgr__fast_missing(struct cgr__cpu *c, uint64_t k, char *buf,
			      size_t len)
{
	size_t o = 0;
	int cnt = 0;

	buf[0] = '\0';
	for (int j = 0; j < c->base.n && o + 16 < len; j++)
		if (atomic_load_explicit(&cgr__fast_of(c, j, k)->seq,
					 memory_order_relaxed) != k)
			o += (size_t)snprintf(buf + o, len - o, "%s%d",
					      cnt++ ? ", " : "", j);
	if (cnt == 0)
		snprintf(buf, len, "none");
}

/*
 * Writes this rank's latency line of #k and posts it.  Returns whether
 * the rank may take the latency path (it staged everything there); a
 * rank that may not (poisoned, too large) posts CGR__FAST_SLOW, so that
 * every peer takes the full path with it.
 */
static bool cgr__fast_post(struct cgr__cpu *c, int r, uint64_t k,
			   const struct cgr__coll_desc *d)
{
	struct cgr__fast *f = cgr__fast_of(c, r, k);
	size_t len;
	const void *src;
	bool ok;

	/* What the rank staging most stages decides, so that ranks that
	 * agree decide alike: scatter's root stages n blocks, broadcast's
	 * one, the others nothing. */
	ok = d->poison == 0 && cgr__eager(d, c->base.n, r, &src, &len) &&
	     d->count * cgr_dtype_size(d->dtype) *
			     (d->kind == CGR_COLL_SCATTER ?
				      (size_t)c->base.n :
				      1) <=
		     CGR__FAST &&
	     len <= CGR__FAST;
	cgr__agree_key_of(&f->key, d, ok ? 0 : CGR__FAST_SLOW);
	if (ok && len)
		memcpy(f->data, src, len);
	/* F0: release: the line; pairs with F1.  The caller rings the bell
	 * (see cgr__cpu_coll). */
	atomic_store_explicit(&f->seq, k, memory_order_release);
	return ok;
}

/*
 * Whether every rank's line of #k says what ours says (hence agreement,
 * or, for operations agreed already, nobody poisoned), with nobody on the
 * full path.  The same on every rank (cgr__agree_key_eq).
 */
static bool cgr__fast_agree(struct cgr__cpu *c, int r, uint64_t k)
{
	const struct cgr__fast *me = cgr__fast_of(c, r, k);

	for (int j = 0; j < c->base.n; j++) {
		const struct cgr__fast *f = cgr__fast_of(c, j, k);

		if (!cgr__agree_key_eq(&me->key, &f->key))
			return false;
	}
	return true;
}

/* The result of #k from the latency lines (agreed). */
static void cgr__fast_move(struct cgr__cpu *c, int r, uint64_t k,
			   const struct cgr__coll_desc *d)
{
	const unsigned char *e[CGR_MAX_RANKS];
	int n = c->base.n;

	for (int j = 0; j < n; j++)
		e[j] = cgr__fast_of(c, j, k)->data;
	cgr__move_staged(d->kind, n, r, d->root, d->count, d->dtype, d->op,
			 d->send, d->recv, e);
}

/* d, or (in *dx) d poisoned if the peers (other processes) could not
 * reach its buffers. */
static const struct cgr__coll_desc *
cgr__reachable(const struct cgr__cpu *c, const struct cgr__coll_desc *d,
	       struct cgr__coll_desc *dx)
{
	if (d->poison || (cgr__xok(c, d->send, 1) && cgr__xok(c, d->recv, 1)))
		return d;
	*dx = *d;
	dx->poison = -EFAULT;
	dx->poison_msg = "a buffer outside the communicator's shared segment";
	return dx;
}

/*
 * Collective #k of this rank.  Every rank first posts its latency line.
 * If every rank may take the latency path and the lines agree, each rank
 * computes its result from the lines: one cache-line transfer per peer for
 * small payloads, no barrier, no system call while the peers are prompt.
 * Otherwise every rank takes the full path below (the descriptors, stage
 * 4k+1, cgr__agree's detailed verdict, eager or direct moves).  A rank
 * that knows it takes the full path does not wait for the lines.
 *
 * The bell is rung late: the ring's fence would wait for our line to
 * leave the store buffer, a cache-line round trip, before we could even
 * look at the peers' lines.  Rung after our result is computed, that wait
 * overlaps with reading the peers' lines; when they are not there yet it
 * is rung before we wait (a parked peer may wait for us), and the full
 * path rings in cgr__publish.  Either way within a bounded time of the
 * post, which is all a parked waiter needs.
 *
 * Reuse of the line of #k (at k % 2) by #k+2 is safe on both paths: a
 * rank finishes #k+1 only after every rank posted #k+1 (line or stage),
 * hence finished #k.
 */
int cgr__cpu_coll(struct cgr__wctx *w, const struct cgr__coll_desc *d0)
{
	struct cgr__cpu *c = w->c;
	struct cgr__coll_desc dx;
	const struct cgr__coll_desc *d;
	struct cgr__rank *rk = &c->ranks[w->rank];
	uint64_t k = ++rk->coll_seq;
	struct cgr__cdesc *me = &c->pub[w->rank].d[k & 1];
	const void *src;
	size_t len;
	bool eager = false;
	int ret;

	d = cgr__reachable(c, d0, &dx);
	if (cgr__fast_post(c, w->rank, k, d)) {
		struct cgr__fastw fw = { c, k };

		if (!cgr__fast_ready(&fw)) {
			cgr__bell_ring(&c->sh->bell);
			ret = cgr__cpu_wait(w, cgr__fast_ready, &fw, true);
			if (ret) {
				char miss[96];

				cgr__fast_missing(c, k, miss, sizeof(miss));
				ret = cgr__cpu_bail(w, ret);
				return cgr__cpu_fail(
				    w, ret,
				    "%s #%llu: %s while waiting for "
				    "rank%s %s",
				    cgr__coll_kind_name(d->kind),
				    (unsigned long long)k,
				    ret == -ETIMEDOUT ? "timed out" : "aborted",
				    strchr(miss, ',') ? "s" : "", miss);
			}
		}
		if (cgr__fast_agree(c, w->rank, k)) {
			cgr__fast_move(c, w->rank, k, d);
			cgr__bell_ring(&c->sh->bell);
			return 0;
		}
	}
	cgr__agree_op(&me->a, d);
	me->send = cgr__xout(c, d->send);
	me->recv = (void *)cgr__xout(c, d->recv);
	if (d->poison == 0 && d->count != 0 &&
	    cgr__eager(d, c->base.n, w->rank, &src, &len)) {
		eager = true;
		cgr__copy(c->pub[w->rank].eager[k & 1], src, len);
	}
	cgr__publish(c, w->rank, 4 * k + 1);
	if (cgr__aborted(c))
		return cgr__cpu_fail(
		    w, cgr__cpu_bail(w, -ECANCELED), "%s #%llu: aborted",
		    cgr__coll_kind_name(d->kind), (unsigned long long)k);
	if (c->base.n > 1) {
		ret = cgr__cpu_stage_wait(w, 4 * k + 1, -1,
					  cgr__coll_kind_name(d->kind), k);
		if (ret)
			return ret;
	}
	ret = cgr__agree(w, k);
	if (ret)
		return ret;
	if (eager) {
		cgr__move_eager(w, k);
		return 0;
	}
	return cgr__move(w, k);
}

/* ---- point to point ------------------------------------------------ */

struct cgr__p2pw {
	struct cgr__cpu *c;
	int rank;
	struct cgr__item *items;
	size_t nitems;
};

static inline uint64_t *cgr__sfree(struct cgr__cpu *c, int r, int peer,
				   uint64_t idx)
{
	return &c->ranks[r].sfree[(size_t)peer * CGR__P2P_SLOTS +
				  idx % CGR__P2P_SLOTS];
}

/* Could item it make progress now? */
static bool cgr__p2p_can(struct cgr__cpu *c, int r, struct cgr__item *it)
{
	int n = c->base.n, peer = it->d.root;

	if (it->phase == 2)
		return false;
	if (it->d.kind == CGR__COLL_SEND) {
		struct cgr__pair *p = &c->pairs[(size_t)r * n + peer];

		/* A free slot implies the receiver took its last message.
		 * Messages are posted in order: `sent` counts them, so
		 * posting idx before idx - 1 would announce a slot that is
		 * not filled yet (a group's progress loop may reach a later
		 * send first). */
		if (it->phase == 0)
			return *cgr__sfree(c, r, peer, it->idx) == it->idx &&
			       atomic_load_explicit(&p->sent,
						    memory_order_relaxed) ==
				       it->idx;
		return atomic_load_explicit(&p->taken, memory_order_acquire) >
		       it->idx;
	}
	/* Taken in order too: `taken` counts messages, so taking idx + 1
	 * first would tell the sender that idx was read, and it could
	 * reuse idx's slot before we copy from it. */
	struct cgr__pair *q = &c->pairs[(size_t)peer * n + r];
	return atomic_load_explicit(&q->sent, memory_order_acquire) >
		       it->idx &&
	       atomic_load_explicit(&q->taken, memory_order_relaxed) == it->idx;
}

static bool cgr__p2p_ready(void *arg)
{
	struct cgr__p2pw *pw = arg;

	for (size_t i = 0; i < pw->nitems; i++)
		if (cgr__is_p2p(pw->items[i].d.kind) &&
		    cgr__p2p_can(pw->c, pw->rank, &pw->items[i]))
			return true;
	return false;
}

/* The verdict of send or receive it (something is off: a poison, a
 * mismatch) against the other end's descriptor, as the slot tells it:
 * comm/agree.h's, so both ends reach the same code.  Its code. */
static int p2p_judge(struct cgr__wctx *w, const struct cgr__item *it,
		     const struct cgr__coll_desc *other)
{
	struct cgr__agree mine, theirs;
	char what[64], m[256];
	bool snd = it->d.kind == CGR__COLL_SEND;
	int ret;

	cgr__agree_op(&mine, &it->d);
	cgr__agree_op(&theirs, other);
	snprintf(what, sizeof(what), "%s #%llu %s rank %d",
		 snd ? "send" : "recv", (unsigned long long)it->idx + 1,
		 snd ? "to" : "from", it->d.root);
	ret = cgr__agree_p2p(&mine, &theirs, w->rank, what, m, sizeof(m));
	return ret ? cgr__cpu_fail(w, ret, "%s", m) : 0;
}

/* One step of item it, if it can progress.  Returns true if it did. */
/* A send's step: post the message (phase 0 to 1), then, once taken, its
 * result (phase 2). */
static bool p2p_send_step(struct cgr__wctx *w, struct cgr__item *it)
{
	struct cgr__cpu *c = w->c;
	int n = c->base.n, r = w->rank, peer = it->d.root;
	struct cgr__pair *p = &c->pairs[(size_t)r * n + peer];
	struct cgr__slot *sl = &p->slot[it->idx % CGR__P2P_SLOTS];

	if (it->phase == 0) {
		sl->buf = cgr__xout(c, it->d.send);
		sl->count = it->d.count;
		sl->dtype = (int32_t)it->d.dtype;
		sl->poison = it->d.poison;
		snprintf(sl->msg, sizeof(sl->msg), "%s", it->msg);
		/* S0: release: the slot; pairs with the receiver's acquire of
		 * sent (cgr__p2p_can). */
		atomic_store_explicit(&p->sent, it->idx + 1,
				      memory_order_release);
		cgr__bell_ring(&c->sh->bell);
		it->phase = 1;
		return true;
	}
	/* Taken (acquire in cgr__p2p_can): the status is ours, and once
	 * read the slot may take the message CGR__P2P_SLOTS later. */
	it->phase = 2;
	*cgr__sfree(c, r, peer, it->idx) = it->idx + CGR__P2P_SLOTS;
	if (sl->status != 0 || it->d.poison != 0) {
		/* The receiver's status says what it found; with its count
		 * and dtype the verdict's message is the one it wrote. */
		struct cgr__coll_desc rd = {
			.kind = CGR__COLL_RECV, .count = sl->rcount,
			.dtype = (cgr_dtype)sl->rdtype, .root = r,
			.poison = sl->status == CGR_EMISMATCH ? 0 : sl->status,
		};
		it->result = p2p_judge(w, it, &rd);
	}
	return true;
}

/* A receive's one step: check the posted message against ours, copy it
 * out of the sender's buffer, hand back the status. */
static bool p2p_recv_step(struct cgr__wctx *w, struct cgr__item *it)
{
	struct cgr__cpu *c = w->c;
	int n = c->base.n, r = w->rank, peer = it->d.root;
	struct cgr__pair *p = &c->pairs[(size_t)peer * n + r];
	struct cgr__slot *sl = &p->slot[it->idx % CGR__P2P_SLOTS];
	int st = 0;

	if (sl->poison != 0 || it->d.poison != 0 ||
	    sl->dtype != (int32_t)it->d.dtype || sl->count != it->d.count) {
		struct cgr__coll_desc sd = {
			.kind = CGR__COLL_SEND, .count = sl->count,
			.dtype = (cgr_dtype)sl->dtype, .root = r,
			.poison = sl->poison, .poison_msg = sl->msg,
		};
		st = it->result = p2p_judge(w, it, &sd);
	} else if (it->d.count != 0) {
		if (!cgr__move_begin(c))
			return false; /* aborted: the wait reports it */
		cgr__copy(it->d.recv, cgr__xin(c, sl->buf),
			  it->d.count * cgr_dtype_size(it->d.dtype));
		cgr__move_end(c);
	}
	sl->status = st;
	sl->rcount = it->d.count;
	sl->rdtype = (int32_t)it->d.dtype;
	/* T0: release: our copy out of the sender's buffer and the status;
	 * pairs with the sender's acquire of taken. */
	atomic_store_explicit(&p->taken, it->idx + 1, memory_order_release);
	cgr__bell_ring(&c->sh->bell);
	it->phase = 2;
	return true;
}

static bool cgr__p2p_step(struct cgr__wctx *w, struct cgr__item *it)
{
	if (!cgr__p2p_can(w->c, w->rank, it))
		return false;
	return it->d.kind == CGR__COLL_SEND ? p2p_send_step(w, it) :
					      p2p_recv_step(w, it);
}

void cgr__cpu_p2p(struct cgr__wctx *w, struct cgr__item *items, size_t nitems)
{
	struct cgr__cpu *c = w->c;
	struct cgr__rank *rk = &c->ranks[w->rank];
	struct cgr__p2pw pw = { c, w->rank, items, nitems };

	/* Message indices per pair, in call order. */
	for (size_t i = 0; i < nitems; i++) {
		struct cgr__item *it = &items[i];
		if (!cgr__is_p2p(it->d.kind))
			continue;
		it->phase = 0;
		it->idx = it->d.kind == CGR__COLL_SEND ?
				  rk->sidx[it->d.root]++ :
				  rk->ridx[it->d.root]++;
	}
	for (;;) {
		bool progress = false, pending = false;
		int ret = -ECANCELED;

		if (cgr__aborted(c))
			goto fail;
		for (size_t i = 0; i < nitems; i++) {
			struct cgr__item *it = &items[i];
			if (!cgr__is_p2p(it->d.kind) || it->phase == 2)
				continue;
			if (cgr__p2p_step(w, it))
				progress = true;
			if (it->phase != 2)
				pending = true;
		}
		if (!pending)
			return;
		if (progress)
			continue;
		ret = cgr__cpu_wait(w, cgr__p2p_ready, &pw, true);
		if (ret == 0)
			continue;
fail:
		ret = cgr__cpu_bail(w, ret);
		for (size_t i = 0; i < nitems; i++) {
			struct cgr__item *it = &items[i];
			if (!cgr__is_p2p(it->d.kind) || it->phase == 2)
				continue;
			it->phase = 2;
			it->result = cgr__cpu_fail(
				w, ret, "%s #%llu %s rank %d: %s",
				cgr__coll_kind_name(it->d.kind),
				(unsigned long long)it->idx + 1,
				it->d.kind == CGR__COLL_SEND ? "to" : "from",
				it->d.root,
				ret == -ETIMEDOUT ? "timed out" : "aborted");
		}
		return;
	}
}

