/*
 * comm/cpu.c: the CPU backend: ranks are threads of one process and move
 * data through shared memory, reading and writing each other's buffers
 * directly (no staging copies).
 *
 * Issue and execution.  A rank's calls become records (a call, or a whole
 * group) in a ring of CGR__NREC per rank.  A record runs on the stream it
 * was issued on (a CGR__SOP_CALL on the stream's executor) or on the
 * calling thread (s == NULL).  Records of one rank execute strictly in
 * issue order, whatever stream they are on: a record waits until the
 * rank's previous one finished (`done`).  That keeps each rank's sequence
 * of collectives, which is what matches operations across ranks.
 *
 * Collectives.  The k-th collective of every rank is collective #k.  A
 * rank writes its descriptor into pub[rank].d[k % 2] and publishes stage
 * 4k+1; once every rank reached 4k+1 each rank reads all descriptors and
 * reaches the same verdict on its own (poison, then mismatch): the
 * descriptors are agreement records and the verdict is comm/agree.h's, the
 * one every path uses.  An operation agreed already (the graph's
 * collective nodes agree on their board first and say so in d->agreed)
 * is not compared again: its records still travel, since the data move
 * needs the peers' buffers and that barrier anyway, but only a poison
 * that arose since (a device failure) can fail it.  Data then moves, and stage
 * 4k+2 says "done with everybody's buffers"; a rank returns only when nobody
 * will touch its buffers again.  Two descriptor slots suffice: a rank writes
 * d[(k+1) % 2] only after everybody posted #k, hence after everybody read the
 * descriptors of #k-1.
 *
 * Tiny operations (what a rank stages fits CGR__FAST bytes) take the
 * latency path first: each rank writes a compact descriptor and its data
 * into its own latency line (c->fast, double-buffered by k % 2) and posts
 * seq = k; it reads every peer's line of #k, and if all agree it computes
 * its result from the lines: one cache-line transfer per peer, no barrier,
 * no stage.  The line's head is the agreement's compact key
 * (struct cgr__agree_key): agreed operations compare its flags only.  Any
 * difference (or a poisoned or larger operation on some rank) sends every rank
 * down the full path below, which reports it in detail (see cgr__coll).
 *
 * Small operations (what a rank contributes fits CGR__EAGER bytes) are
 * eager: each rank copies its contribution into its own staging slot of
 * the communicator (pub[rank].eager[k % 2]) before it posts #k, and after
 * the one barrier every rank computes its result from the slots.  User
 * buffers are never shared, so there is no second barrier: latency is one
 * arrival.  Slot k % 2 is rewritten by #k+2, which starts after everybody
 * posted #k+1, hence after everybody finished reading #k's slots.
 *
 * Large operations (n ranks, element counts split into n cache-line
 * aligned chunks): allreduce: rank r reduces chunk r from every rank's
 * send buffer into its own recv buffer, then pushes that chunk into every
 * peer's recv buffer: each byte is read once and written once per rank,
 * two barriers in all.  reducescatter: rank r reduces block r.  reduce:
 * as allreduce, chunks pushed to the root only.  allgather and gather:
 * each rank pushes its block.  broadcast and scatter: each rank pulls.
 * alltoall: rank r pulls block r of every send buffer.
 *
 * In place.  A reduction's destination may alias only the first source
 * (reduce.h), so the rank whose recv may alias a send buffer lists that
 * send buffer first.  Pushes into a peer's recv chunk r happen after rank
 * r read chunk r everywhere, and nobody else reads chunk r.
 *
 * Point to point.  Sender s to receiver d has a ring of CGR__P2P_SLOTS
 * message slots; `sent` and `taken` count messages.  The sender fills a
 * slot (its buffer's address) and bumps `sent`; the receiver copies
 * straight from the sender's buffer, writes a status and bumps `taken`;
 * the sender completes when its message was taken.  A group runs its
 * collectives in call order, then drives all its sends and receives in one
 * progress loop, so a group's sends and receives never block each other.
 *
 * Waiting.  Every wait spins briefly, then parks on the communicator's
 * bell (rung by every stage change, message and record completion), with
 * the abort flag as cancel word.  Waits on a stream executor wake at least
 * every CGR__STOP_POLL_NS to notice that the stream is being destroyed.
 *
 * Across processes.  A communicator whose ranks live in several
 * processes (a graph with process workers) keeps what the ranks share (the
 * abort flag, the movers count, the bell, the descriptors, latency lines
 * and message slots) in memory the caller hands in, inside a segment that
 * every process maps at its own address (xbase): every buffer a rank
 * publishes is published as an offset in that segment and read back at
 * the reader's mapping (cgr__xout, cgr__xin), so ranks copy straight from
 * and into each other's buffers as threads do.  The rest (records,
 * indices, error messages) is each process's own.  In one process xbase
 * is 0 and the translation is the identity.
 *
 * Abort.  Sets the flag and wakes everybody: every wait ends with
 * -ECANCELED, every later operation fails at once.  A timed-out wait, or
 * a stream destroyed under a pending operation, aborts the communicator:
 * the ranks' sequences no longer line up.  Before returning from an
 * aborted operation a rank waits until no rank is still copying (`movers`),
 * so no buffer is touched after its owner got its error back.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "comm/agree.h"
#include "comm/comm.h"
#include "comm/reduce.h"
#include "reactor/reactor.h"

#define CGR__NREC 64	       /* records in flight per rank */
#define CGR__P2P_SLOTS 8       /* messages in flight per (sender, receiver) */
#define CGR__EAGER 4096	       /* staged (one-barrier) path up to this */
#define CGR__FAST 256	       /* latency path: staged bytes up to this */
#define CGR__PUSH_BLOCK 32768  /* allreduce: reduce, then push, per block */
#define CGR__COMM_SPIN_NS 30000
#define CGR__MSG 128
#define CGR__IDX_WORDS(n) ((2 + CGR__P2P_SLOTS) * (n)) /* sidx ridx sfree */

/* ---- shared state -------------------------------------------------- */

/* A rank's descriptor for one collective, as its peers read it: its
 * agreement record (comm/agree.h) and its buffers (published). */
struct cgr__cdesc {
	struct cgr__agree a;
	const void *send;
	void *recv;
};

struct cgr__rpub {
	_Atomic uint64_t stage; /* 4k+1 posted #k, 4k+2 done with #k */
	struct cgr__cdesc d[2];
	/* Staged contributions of eager collectives #k, at k % 2. */
	unsigned char eager[2][CGR__EAGER] cgr__aligned;
} cgr__aligned;

/*
 * A rank's latency line for collective #k, at k % 2: the compact
 * descriptor, then (unless CGR__FAST_SLOW) what the rank stages, all
 * written before `seq` = k (release).  For a small payload the
 * whole line is one cache line: one transfer per peer.
 */
#define CGR__FAST_SLOW CGR__AGREE_PATH /* this rank takes the full path */
#define CGR__FAST_HEAD 24
#define CGR__FAST_SIZE                                                         \
	((CGR__FAST_HEAD + CGR__FAST + CGR__CACHELINE - 1) / CGR__CACHELINE *  \
	 CGR__CACHELINE)

struct cgr__fast {
	_Atomic uint64_t seq;
	/* The agreement's key (comm/agree.h): equal keys mean agreement. */
	struct cgr__agree_key key;
	unsigned char data[CGR__FAST_SIZE - CGR__FAST_HEAD];
} cgr__aligned;

_Static_assert(offsetof(struct cgr__fast, data) == CGR__FAST_HEAD,
	       "latency line head");
_Static_assert(sizeof(struct cgr__fast) == CGR__FAST_SIZE,
	       "latency line size");

struct cgr__slot {
	/* Written by the sender before `sent` (release). */
	const void *buf; /* published (cgr__xout) */
	size_t count;
	int32_t dtype;
	int32_t poison;
	char msg[CGR__MSG]; /* the sender's poison message */
	/* Written by the receiver before `taken` (release). */
	int32_t status;
	int32_t rdtype;
	size_t rcount;
};

struct cgr__pair {
	_Atomic uint64_t sent cgr__aligned;
	_Atomic uint64_t taken;
	struct cgr__slot slot[CGR__P2P_SLOTS];
};

/* ---- per rank ------------------------------------------------------ */

struct cgr__item {
	struct cgr__coll_desc d; /* d.poison_msg points to msg */
	char msg[CGR__MSG];
	struct cgr__dfuture *fut; /* may be NULL */
	int result;
	/* p2p progress: message index on its pair, phase 0 (not posted /
	 * not received), 1 (posted, not taken), 2 (done). */
	uint64_t idx;
	int phase;
};

struct cgr__cpu;

struct cgr__rec {
	struct cgr__cpu *c;
	int rank;
	uint64_t k;
	struct cgr__item *items; /* &one, or arr (a group) */
	size_t nitems;
	struct cgr__item one;
	struct cgr__dfuture **gfuts; /* group_end futures */
	size_t ngfuts;
	/* Arrays this slot keeps for groups, grown when too small: once warm
	 * a group allocates nothing. */
	struct cgr__item *arr;
	size_t arrcap;
	struct cgr__dfuture **gfarr;
	size_t gfarrcap;
	int64_t deadline;
};

struct cgr__rank {
	/* Issuing side: the rank's thread. */
	uint64_t issued;
	int gdepth;
	struct cgr__item *gitems;
	size_t gn, gcap;
	struct cgr__dfuture **gfuts;
	size_t gfn, gfcap;
	cgr_stream *gstream;
	bool gstream_set;
	/* Executing side: one record at a time, in issue order. */
	_Atomic uint64_t done cgr__aligned;
	uint64_t coll_seq;
	uint64_t *sidx, *ridx; /* per peer: messages sent / received */
	/* Per peer and slot: the message that may use the slot next.  A
	 * send reuses a slot only after it read the status of the slot's
	 * previous message (the receiver writes the status into the slot). */
	uint64_t *sfree;
	char errmsg[256];
	struct cgr__rec recs[CGR__NREC];
};

/* What every rank's process shares, followed (each line aligned) by
 * pub[n], fast[2n] and pairs[n * n]. */
#define CGR__CSHM_MAGIC 0x43475243u /* "CGRC" */
#define CGR__CSHM_VERSION 1

struct cgr__cshm {
	uint32_t magic, version, n, pad; /* checked by who attaches */
	_Atomic uint32_t aborted;
	_Atomic int32_t movers; /* ranks copying between buffers now */
	struct cgr__bell bell cgr__aligned;
} cgr__aligned;

struct cgr__cpu {
	struct cgr_comm base;
	struct cgr__cshm *sh;
	bool own_sh;	   /* allocated here (not in a caller's segment) */
	uintptr_t xbase;   /* where this process maps the segment; 0: none */
	size_t xsize;	   /* and its bytes */
	struct cgr__rpub *pub;	 /* n */
	struct cgr__fast *fast;	 /* 2n: [rank * 2 + k % 2] */
	struct cgr__pair *pairs; /* n * n: [sender * n + receiver] */
	struct cgr__rank *ranks; /* n */
};

static inline struct cgr__cpu *cgr__cpu_of(cgr_comm *c)
{
	return (struct cgr__cpu *)c;
}

/* A buffer of this process as the peers see it, and back. */
static inline const void *cgr__xout(const struct cgr__cpu *c, const void *p)
{
	return p != NULL ? (const void *)((uintptr_t)p - c->xbase) : NULL;
}

static inline void *cgr__xin(const struct cgr__cpu *c, const void *p)
{
	return p != NULL ? (void *)((uintptr_t)p + c->xbase) : NULL;
}

/* Whether peers can reach buffer p of n bytes (in the shared segment, if
 * the ranks are processes). */
static inline bool cgr__xok(const struct cgr__cpu *c, const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;
	return c->xbase == 0 || p == NULL || n == 0 ||
	       (a >= c->xbase && a - c->xbase <= c->xsize &&
		n <= c->xsize - (a - c->xbase));
}

static int cgr__cpu_abort(cgr_comm *cc)
{
	struct cgr__cpu *c = cgr__cpu_of(cc);

	/* A0: seq_cst: pairs with the re-check in cgr__move_begin. */
	if (atomic_exchange_explicit(&c->sh->aborted, 1, memory_order_seq_cst) ==
	    0)
		cgr__info(c->base.log, "communicator aborted");
	cgr__bell_ring_force(&c->sh->bell);
	return 0;
}

static inline bool cgr__aborted(struct cgr__cpu *c)
{
	return atomic_load_explicit(&c->sh->aborted, memory_order_acquire) != 0;
}

/* ---- waiting ------------------------------------------------------- */

struct cgr__wctx {
	struct cgr__cpu *c;
	int rank;
	cgr_stream *s;	  /* executor's stream, or NULL (inline) */
	int64_t deadline; /* CGR_FOREVER: none */
	bool stopped;	  /* the stream is being destroyed */
	bool failed;	  /* errmsg already written for this record */
};

static int cgr__fail(struct cgr__wctx *w, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int cgr__fail(struct cgr__wctx *w, int code, const char *fmt, ...)
{
	va_list ap;

	if (!w->failed) {
		va_start(ap, fmt);
		vsnprintf(w->c->ranks[w->rank].errmsg,
			  sizeof(w->c->ranks[w->rank].errmsg), fmt, ap);
		va_end(ap);
		w->failed = true;
	}
	return code;
}

/*
 * Waits until ready(arg).  0, -ECANCELED (abort, or the stream is being
 * destroyed: w->stopped), -ETIMEDOUT (w->deadline).
 */
static int cgr__cwait(struct cgr__wctx *w, cgr__ready_fn ready, void *arg,
		      bool abortable)
{
	struct cgr__cpu *c = w->c;

	for (;;) {
		int64_t now, dl = w->deadline;
		int ret;

		if (abortable && cgr__aborted(c))
			return ready(arg) ? 0 : -ECANCELED;
		if (w->s != NULL && cgr__stream_stopping(w->s)) {
			w->stopped = true;
			if (abortable)
				return -ECANCELED;
			/* Not abortable (in-order wait): abort the comm so
			 * that what we wait for fails fast, keep waiting. */
			cgr__cpu_abort(&c->base);
		}
		now = cgr__now_ns();
		if (now >= dl)
			return ready(arg) ? 0 : -ETIMEDOUT;
		if (w->s != NULL && dl - now > CGR__STOP_POLL_NS)
			dl = now + CGR__STOP_POLL_NS;
		ret = cgr__reactor_wait(NULL, &c->sh->bell, ready, arg,
					abortable ? &c->sh->aborted : NULL,
					CGR_WAIT_ADAPTIVE, CGR__COMM_SPIN_NS,
					dl);
		if (ret == 0)
			return 0;
	}
}

static inline void cgr__publish(struct cgr__cpu *c, int r, uint64_t stage)
{
	/* P0: release: our descriptor (stage 4k+1) or our writes into the
	 * peers' buffers and our last reads of theirs (4k+2) happen before;
	 * pairs with the acquire in cgr__stage_ready. */
	atomic_store_explicit(&c->pub[r].stage, stage, memory_order_release);
	cgr__bell_ring(&c->sh->bell);
}

struct cgr__stagew {
	struct cgr__cpu *c;
	uint64_t target;
	int only; /* -1: every rank; else that rank */
};

static bool cgr__stage_ready(void *arg)
{
	struct cgr__stagew *sw = arg;
	struct cgr__cpu *c = sw->c;

	if (sw->only >= 0)
		return atomic_load_explicit(&c->pub[sw->only].stage,
					    memory_order_acquire) >=
		       sw->target;
	for (int j = 0; j < c->base.n; j++)
		if (atomic_load_explicit(&c->pub[j].stage,
					 memory_order_acquire) < sw->target)
			return false;
	return true;
}

/* "ranks 1, 3" that have not reached target. */
static void cgr__missing(struct cgr__cpu *c, uint64_t target, int only,
			 char *buf, size_t len)
{
	size_t o = 0;
	int cnt = 0;

	buf[0] = '\0';
	for (int j = 0; j < c->base.n && o + 16 < len; j++) {
		if (only >= 0 && j != only)
			continue;
		if (atomic_load_explicit(&c->pub[j].stage,
					 memory_order_relaxed) >= target)
			continue;
		o += (size_t)snprintf(buf + o, len - o, "%s%d",
				      cnt++ ? ", " : "", j);
	}
	if (cnt == 0)
		snprintf(buf, len, "none");
}

static inline bool cgr__move_begin(struct cgr__cpu *c)
{
	/* M0: seq_cst increment, then re-check the abort flag (pairs with
	 * A0): an aborted rank that read movers == 0 in cgr__bail is sure
	 * every later mover sees the flag and backs off. */
	atomic_fetch_add_explicit(&c->sh->movers, 1, memory_order_seq_cst);
	if (atomic_load_explicit(&c->sh->aborted, memory_order_seq_cst)) {
		atomic_fetch_sub_explicit(&c->sh->movers, 1, memory_order_release);
		return false;
	}
	return true;
}

static inline void cgr__move_end(struct cgr__cpu *c)
{
	atomic_fetch_sub_explicit(&c->sh->movers, 1, memory_order_release);
}

/*
 * An operation ends early (ret: -ECANCELED or -ETIMEDOUT).  A timeout or
 * a stream being destroyed aborts the communicator (the sequences no
 * longer line up).  Then wait until nobody copies any more, so that our
 * buffers are ours again when we return.
 */
static int cgr__bail(struct cgr__wctx *w, int ret)
{
	struct cgr__cpu *c = w->c;
	unsigned i = 0;

	if (ret == -ETIMEDOUT || w->stopped) {
		if (!cgr__aborted(c))
			cgr__warn(c->base.log,
				  "rank %d: %s: aborting the communicator",
				  w->rank,
				  ret == -ETIMEDOUT ?
					  "operation timed out" :
					  "stream destroyed with an operation "
					  "pending");
		cgr__cpu_abort(&c->base);
		if (ret != -ETIMEDOUT)
			ret = -ECANCELED;
	}
	/* Copies in progress are bounded (no waits inside them). */
	while (atomic_load_explicit(&c->sh->movers, memory_order_acquire) != 0)
		if ((++i & 63) == 0)
			sched_yield();
		else
			cgr__cpu_relax();
	return ret;
}

/* Waits for stage target of every rank (only < 0) or of rank `only`. */
static int cgr__stage_wait(struct cgr__wctx *w, uint64_t target, int only,
			   const char *kind, uint64_t k)
{
	struct cgr__stagew sw = { w->c, target, only };
	char miss[96];
	int ret;

	ret = cgr__cwait(w, cgr__stage_ready, &sw, true);
	if (ret == 0)
		return 0;
	cgr__missing(w->c, target, only, miss, sizeof(miss));
	ret = cgr__bail(w, ret);
	return cgr__fail(w, ret, "%s #%llu: %s while waiting for rank%s %s",
			 kind, (unsigned long long)k,
			 ret == -ETIMEDOUT ? "timed out" : "aborted",
			 strchr(miss, ',') ? "s" : "", miss);
}

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
		return cgr__fail(w, ret, "%s", m);
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
		return cgr__fail(w, cgr__bail(w, -ECANCELED),
				 "%s #%llu: aborted", name,
				 (unsigned long long)k);
	wait_for = move_data(c, me, k, w->rank);
	cgr__move_end(c);
	cgr__publish(c, w->rank, done);
	if (c->base.n > 1 && wait_for != -2)
		return cgr__stage_wait(w, done, wait_for, name, k);
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
	 * (see cgr__coll). */
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
static int cgr__coll(struct cgr__wctx *w, const struct cgr__coll_desc *d0)
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
			ret = cgr__cwait(w, cgr__fast_ready, &fw, true);
			if (ret) {
				char miss[96];

				cgr__fast_missing(c, k, miss, sizeof(miss));
				ret = cgr__bail(w, ret);
				return cgr__fail(
					w, ret,
					"%s #%llu: %s while waiting for "
					"rank%s %s",
					cgr__coll_kind_name(d->kind),
					(unsigned long long)k,
					ret == -ETIMEDOUT ? "timed out" :
							    "aborted",
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
		return cgr__fail(w, cgr__bail(w, -ECANCELED),
				 "%s #%llu: aborted",
				 cgr__coll_kind_name(d->kind),
				 (unsigned long long)k);
	if (c->base.n > 1) {
		ret = cgr__stage_wait(w, 4 * k + 1, -1,
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

static inline bool cgr__is_p2p(int kind)
{
	return kind == CGR__COLL_SEND || kind == CGR__COLL_RECV;
}

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
	if (sl->status == CGR_EMISMATCH)
		it->result = cgr__fail(
			w, CGR_EMISMATCH,
			"send #%llu to rank %d: rank %d sends %zu %s, rank %d "
			"receives %zu %s",
			(unsigned long long)it->idx + 1, peer, r, it->d.count,
			cgr__dtype_name(it->d.dtype), peer, sl->rcount,
			cgr__dtype_name(sl->rdtype));
	else if (it->d.poison)
		it->result = cgr__fail(w, it->d.poison,
				       "send #%llu to rank %d: %s",
				       (unsigned long long)it->idx + 1, peer,
				       it->msg);
	else if (sl->status)
		it->result = cgr__fail(
			w, sl->status,
			"send #%llu to rank %d: rank %d failed before the "
			"operation (%s)",
			(unsigned long long)it->idx + 1, peer, peer,
			cgr_err_name(sl->status));
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
	unsigned long long idx = (unsigned long long)it->idx + 1;
	int st = 0;

	if (sl->poison) {
		st = sl->poison;
		it->result = cgr__fail(w, st,
				       "recv #%llu from rank %d: rank %d "
				       "failed before the operation (%s)%s%s",
				       idx, peer, peer, cgr_err_name(st),
				       sl->msg[0] ? ": " : "", sl->msg);
	} else if (it->d.poison) {
		st = it->d.poison;
		it->result = cgr__fail(w, st, "recv #%llu from rank %d: %s",
				       idx, peer, it->msg);
	} else if (sl->dtype != (int32_t)it->d.dtype ||
		   sl->count != it->d.count) {
		st = CGR_EMISMATCH;
		it->result = cgr__fail(
			w, st,
			"recv #%llu from rank %d: rank %d sends %zu %s, rank %d "
			"receives %zu %s",
			idx, peer, peer, sl->count, cgr__dtype_name(sl->dtype),
			r, it->d.count, cgr__dtype_name(it->d.dtype));
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

static void cgr__p2p(struct cgr__wctx *w, struct cgr__item *items,
		     size_t nitems)
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
		ret = cgr__cwait(w, cgr__p2p_ready, &pw, true);
		if (ret == 0)
			continue;
fail:
		ret = cgr__bail(w, ret);
		for (size_t i = 0; i < nitems; i++) {
			struct cgr__item *it = &items[i];
			if (!cgr__is_p2p(it->d.kind) || it->phase == 2)
				continue;
			it->phase = 2;
			it->result = cgr__fail(
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

/* ---- records ------------------------------------------------------- */

struct cgr__donew {
	struct cgr__rank *rk;
	uint64_t k;
};

static bool cgr__done_ready(void *arg)
{
	struct cgr__donew *dw = arg;

	/* D1: acquire: pairs with D0: the previous record's effects on the
	 * rank's execution state are visible. */
	return atomic_load_explicit(&dw->rk->done, memory_order_acquire) ==
	       dw->k;
}

/* Grows *arr (of *cap elements of size es) to hold n; 0 or -ENOMEM. */
static int cgr__grow(struct cgr__arena *a, void **arr, size_t *cap, size_t n,
		     size_t es, size_t align)
{
	size_t nc = *cap ? *cap : 4;
	void *p;

	if (n <= *cap)
		return 0;
	while (nc < n)
		nc *= 2;
	p = cgr__alloc(a, nc * es, align);
	if (p == NULL)
		return -ENOMEM;
	if (*cap)
		cgr__free(a, *arr, *cap * es, align);
	*arr = p;
	*cap = nc;
	return 0;
}

/*
 * Runs a record: the CGR__SOP_CALL function, or called inline.  err: 0;
 * a device error (the operations are poisoned so peers fail too);
 * -ECANCELED with s set: the stream is being destroyed (abort).
 */
static int cgr__cpu_exec(void *arg, cgr_stream *s, int err)
{
	struct cgr__rec *rec = arg;
	struct cgr__cpu *c = rec->c;
	struct cgr__rank *rk = &c->ranks[rec->rank];
	struct cgr__wctx w = { c, rec->rank, s, rec->deadline, false, false };
	struct cgr__donew dw = { rk, rec->k };
	int res = 0;

	if (!cgr__done_ready(&dw)) {
		/* No deadline here: the order must hold whatever happens
		 * (an abort makes the previous record end fast). */
		struct cgr__wctx wo = w;
		wo.deadline = CGR_FOREVER;
		cgr__cwait(&wo, cgr__done_ready, &dw, false);
	}
	if (s != NULL && err == -ECANCELED) {
		w.stopped = true;
		cgr__bail(&w, -ECANCELED);
	} else if (err != 0) {
		for (size_t i = 0; i < rec->nitems; i++)
			if (rec->items[i].d.poison == 0) {
				rec->items[i].d.poison = err;
				snprintf(rec->items[i].msg, CGR__MSG,
					 "device error: %s",
					 cgr_strerror(err));
			}
	}
	for (size_t i = 0; i < rec->nitems; i++) {
		struct cgr__item *it = &rec->items[i];
		it->result = 0;
		if (cgr__is_p2p(it->d.kind))
			continue;
		if (cgr__aborted(c))
			it->result = cgr__fail(
				&w, -ECANCELED, "%s: communicator aborted",
				cgr__coll_kind_name(it->d.kind));
		else
			it->result = cgr__coll(&w, &it->d);
	}
	for (size_t i = 0; i < rec->nitems; i++)
		if (cgr__is_p2p(rec->items[i].d.kind)) {
			cgr__p2p(&w, rec->items, rec->nitems);
			break;
		}
	for (size_t i = 0; i < rec->nitems; i++) {
		struct cgr__item *it = &rec->items[i];
		if (it->result && res == 0)
			res = it->result;
		if (it->fut != NULL)
			cgr__dfuture_complete(it->fut, it->result);
	}
	for (size_t i = 0; i < rec->ngfuts; i++)
		cgr__dfuture_complete(rec->gfuts[i], res);
	/* D0: release: the record slot is free and this rank's execution
	 * state is handed to its next record; pairs with D1 and with the
	 * issuer's space check. */
	atomic_store_explicit(&rk->done, rec->k + 1, memory_order_release);
	cgr__bell_ring(&c->sh->bell);
	return res;
}

static bool cgr__space_ready(void *arg)
{
	struct cgr__donew *dw = arg;

	return dw->k - atomic_load_explicit(&dw->rk->done,
					    memory_order_acquire) <
	       CGR__NREC;
}

/*
 * Issues a record: nitems items (copied) and the group_end futures gf.
 * Runs it on s or inline; returns the inline result or 0.
 */
static int cgr__issue(struct cgr__cpu *c, int r, struct cgr__item *items,
		      size_t nitems, struct cgr__dfuture **gf, size_t ngf,
		      cgr_stream *s)
{
	struct cgr__rank *rk = &c->ranks[r];
	struct cgr__donew dw = { rk, rk->issued };
	struct cgr__arena *a = c->base.arena;
	struct cgr__rec *rec;
	struct cgr__sop op = { .kind = CGR__SOP_CALL };
	int ret = 0;

	/* D2: acquire (in cgr__space_ready): the slot's last run is over. */
	if (!cgr__space_ready(&dw))
		cgr__reactor_wait(NULL, &c->sh->bell, cgr__space_ready, &dw, NULL,
				  CGR_WAIT_ADAPTIVE, CGR__COMM_SPIN_NS,
				  CGR_FOREVER);
	rec = &rk->recs[rk->issued % CGR__NREC];
	rec->items = &rec->one;
	rec->nitems = nitems;
	if (nitems == 1) {
		rec->one = items[0];
	} else if (nitems > 1) {
		if (cgr__grow(a, (void **)&rec->arr, &rec->arrcap, nitems,
			      sizeof(*rec->arr), CGR__CACHELINE) == 0) {
			memcpy(rec->arr, items, nitems * sizeof(*items));
			rec->items = rec->arr;
		} else {
			/* Out of memory: the group still takes its turn, as
			 * one poisoned operation, so the peers fail too. */
			for (size_t i = 0; i < nitems; i++)
				if (items[i].fut != NULL)
					cgr__dfuture_complete(items[i].fut,
							      -ENOMEM);
			rec->one = items[0];
			rec->one.fut = NULL;
			rec->one.d.poison = -ENOMEM;
			snprintf(rec->one.msg, CGR__MSG, "out of memory");
			rec->nitems = 1;
		}
	}
	rec->gfuts = rec->gfarr;
	rec->ngfuts = 0;
	if (ngf != 0) {
		if (cgr__grow(a, (void **)&rec->gfarr, &rec->gfarrcap, ngf,
			      sizeof(*gf), 16) == 0) {
			memcpy(rec->gfarr, gf, ngf * sizeof(*gf));
			rec->gfuts = rec->gfarr;
			rec->ngfuts = ngf;
		} else {
			for (size_t i = 0; i < ngf; i++)
				cgr__dfuture_complete(gf[i], -ENOMEM);
		}
	}
	rec->c = c;
	rec->rank = r;
	rec->k = rk->issued++;
	rec->deadline = CGR_FOREVER;
	for (size_t i = 0; i < rec->nitems; i++) {
		struct cgr__item *it = &rec->items[i];
		it->d.poison_msg = it->msg;
		if (it->d.deadline > 0 && it->d.deadline < rec->deadline)
			rec->deadline = it->d.deadline;
	}
	if (s != NULL) {
		op.u.call.fn = cgr__cpu_exec;
		op.u.call.arg = rec;
		ret = cgr__stream_enqueue(s, &op);
		if (ret == 0)
			return 0;
	}
	return cgr__cpu_exec(rec, NULL, ret);
}

static void cgr__item_fill(struct cgr__item *it,
			   const struct cgr__coll_desc *d)
{
	it->d = *d;
	snprintf(it->msg, sizeof(it->msg), "%s",
		 d->poison && d->poison_msg ? d->poison_msg : "");
	it->d.poison_msg = it->msg;
	it->fut = NULL;
	it->result = 0;
}

static int cgr__group_grow(struct cgr__cpu *c, struct cgr__rank *rk)
{
	size_t cap = rk->gcap ? rk->gcap * 2 : 8;
	struct cgr__item *p;

	/* The group's items so far are kept: copied over. */
	p = cgr__alloc(c->base.arena, cap * sizeof(*p), CGR__CACHELINE);
	if (p == NULL)
		return -ENOMEM;
	if (rk->gn)
		memcpy(p, rk->gitems, rk->gn * sizeof(*p));
	if (rk->gcap)
		cgr__free(c->base.arena, rk->gitems, rk->gcap * sizeof(*p),
			  CGR__CACHELINE);
	rk->gitems = p;
	rk->gcap = cap;
	return 0;
}

/* A completed future for an operation that ran inline, in *out. */
static int done_future(struct cgr__cpu *c, cgr_future **out)
{
	struct cgr__dfuture *df;

	if (cgr__dfuture_create(c->base.ctx, NULL, &df) < 0)
		return -ENOMEM;
	cgr__dfuture_complete(df, 0);
	*out = cgr__dfuture_pub(df);
	return 0;
}

/* Inside a group: the operation joins rank r's list (issued at the
 * outermost cgr_group_end).  All of a group's operations use one stream;
 * one on another is poisoned, so the group fails everywhere. */
static int group_add(struct cgr__cpu *c, struct cgr__rank *rk,
		     const struct cgr__coll_desc *d, cgr_stream *s,
		     cgr_future **out)
{
	struct cgr__dfuture *df = NULL;
	struct cgr__coll_desc p = *d;
	struct cgr__item *gi;
	int ret;

	if (!rk->gstream_set) {
		rk->gstream = s;
		rk->gstream_set = true;
	} else if (s != rk->gstream && p.poison == 0) {
		p.poison = -EINVAL;
		p.poison_msg = "invalid arguments: operations of one group on "
			       "different streams";
		out = NULL;
	}
	if (rk->gn == rk->gcap && cgr__group_grow(c, rk) < 0)
		return -ENOMEM;
	if (out != NULL) {
		ret = cgr__dfuture_create(c->base.ctx, rk->gstream, &df);
		if (ret < 0)
			return ret;
	}
	gi = &rk->gitems[rk->gn++];
	cgr__item_fill(gi, &p);
	gi->fut = df;
	if (df != NULL)
		*out = cgr__dfuture_pub(df);
	return p.poison != d->poison ? -EINVAL : 0;
}

static int cgr__cpu_op(cgr_comm *cc, int r, const struct cgr__coll_desc *d,
		       cgr_stream *s, cgr_future **out)
{
	struct cgr__cpu *c = cgr__cpu_of(cc);
	struct cgr__rank *rk = &c->ranks[r];
	struct cgr__dfuture *df = NULL;
	struct cgr__item it;
	int ret;

	if (cgr__is_p2p(d->kind) && d->root == r && rk->gdepth == 0)
		return -EINVAL; /* would wait for itself: needs a group */
	if (rk->gdepth > 0)
		return group_add(c, rk, d, s, out);
	if (s == NULL && !cgr__is_p2p(d->kind) &&
	    atomic_load_explicit(&rk->done, memory_order_acquire) ==
		    rk->issued) {
		/* Inline with nothing pending (D1: the acquire pairs with D0
		 * of the last record): run it here, without a record.  Only
		 * this thread issues records, so none starts meanwhile. */
		struct cgr__wctx w = { c, r, NULL,
				       d->deadline > 0 ? d->deadline :
							 CGR_FOREVER,
				       false, false };

		if (cgr__aborted(c))
			ret = cgr__fail(&w, -ECANCELED,
					"%s: communicator aborted",
					cgr__coll_kind_name(d->kind));
		else
			ret = cgr__coll(&w, d);
		if (ret == 0 && out != NULL)
			ret = done_future(c, out);
		return ret;
	}
	cgr__item_fill(&it, d);
	if (s != NULL && out != NULL) {
		ret = cgr__dfuture_create(c->base.ctx, s, &df);
		if (ret < 0)
			return ret;
		it.fut = df;
	}
	ret = cgr__issue(c, r, &it, 1, NULL, 0, s);
	if (s != NULL) {
		if (df != NULL)
			*out = cgr__dfuture_pub(df);
		return 0;
	}
	if (ret == 0 && out != NULL)
		ret = done_future(c, out); /* inline and done */
	return ret;
}

static int cgr__cpu_group_start(cgr_comm *cc, int r)
{
	struct cgr__rank *rk = &cgr__cpu_of(cc)->ranks[r];

	if (rk->gdepth++ == 0) {
		rk->gn = 0;
		rk->gfn = 0;
		rk->gstream = NULL;
		rk->gstream_set = false;
	}
	return 0;
}

/* Room for one more group_end future; 0 or -ENOMEM. */
static int cgr__gfuts_grow(struct cgr__cpu *c, struct cgr__rank *rk)
{
	size_t cap = rk->gfcap ? rk->gfcap * 2 : 4;
	struct cgr__dfuture **p;

	if (rk->gfn < rk->gfcap)
		return 0;
	p = cgr__alloc(c->base.arena, cap * sizeof(*p), 16);
	if (p == NULL)
		return -ENOMEM;
	if (rk->gfn)
		memcpy(p, rk->gfuts, rk->gfn * sizeof(*p));
	if (rk->gfcap)
		cgr__free(c->base.arena, rk->gfuts, rk->gfcap * sizeof(*p), 16);
	rk->gfuts = p;
	rk->gfcap = cap;
	return 0;
}

static int cgr__cpu_group_end(cgr_comm *cc, int r, cgr_future **out)
{
	struct cgr__cpu *c = cgr__cpu_of(cc);
	struct cgr__rank *rk = &c->ranks[r];
	struct cgr__dfuture *df = NULL;
	bool nomem = false;
	cgr_stream *s;
	int ret;

	if (rk->gdepth == 0)
		return -EINVAL;
	/* The outermost end's future is bound to the group's stream; a
	 * nested end's is not (the stream may not be known yet).  Without
	 * memory for it the group still runs (the peers expect it); the
	 * caller gets -ENOMEM and no future. */
	if (out != NULL) {
		if (cgr__dfuture_create(c->base.ctx,
					rk->gdepth == 1 ? rk->gstream : NULL,
					&df) < 0) {
			nomem = true;
		} else if (cgr__gfuts_grow(c, rk) < 0) {
			cgr__dfuture_put(df);
			cgr__dfuture_put(df);
			df = NULL;
			nomem = true;
		} else {
			rk->gfuts[rk->gfn++] = df;
		}
	}
	if (--rk->gdepth > 0) {
		if (df != NULL)
			*out = cgr__dfuture_pub(df);
		return nomem ? -ENOMEM : 0;
	}
	s = rk->gstream;
	ret = cgr__issue(c, r, rk->gitems, rk->gn, rk->gfuts, rk->gfn, s);
	rk->gn = 0;
	rk->gfn = 0;
	if (s != NULL)
		ret = 0;
	if (df != NULL) {
		/* Inline and failed: the caller gets the error instead. */
		if (ret != 0)
			cgr__dfuture_put(df);
		else
			*out = cgr__dfuture_pub(df);
	}
	return ret ? ret : nomem ? -ENOMEM : 0;
}

static const char *cgr__cpu_errmsg(const cgr_comm *cc, int r)
{
	return ((const struct cgr__cpu *)cc)->ranks[r].errmsg;
}

static bool cgr__all_done(void *arg)
{
	struct cgr__cpu *c = arg;

	for (int r = 0; r < c->base.n; r++)
		if (atomic_load_explicit(&c->ranks[r].done,
					 memory_order_acquire) !=
		    c->ranks[r].issued)
			return false;
	return true;
}

static void cgr__cpu_destroy(cgr_comm *cc)
{
	struct cgr__cpu *c = cgr__cpu_of(cc);
	struct cgr__arena *a = c->base.arena;
	size_t n = (size_t)c->base.n;

	if (!cgr__all_done(c)) {
		cgr__warn(c->base.log,
			  "communicator destroyed with operations pending: "
			  "aborting them");
		cgr__cpu_abort(cc);
		if (cgr__reactor_wait(NULL, &c->sh->bell, cgr__all_done, c, NULL,
				      CGR_WAIT_BLOCK, 0,
				      cgr__deadline(1000000000)) != 0) {
			cgr__err(c->base.log,
				 "communicator: pending operations did not "
				 "finish; its memory is leaked");
			return;
		}
	}
	for (size_t r = 0; r < n; r++) {
		struct cgr__rank *rk = &c->ranks[r];
		/* A group never ended: its futures (the callers hold
		 * them) fail. */
		for (size_t i = 0; i < rk->gn; i++)
			if (rk->gitems[i].fut != NULL)
				cgr__dfuture_complete(rk->gitems[i].fut,
						      -ECANCELED);
		if (rk->gcap)
			cgr__free(a, rk->gitems, rk->gcap * sizeof(*rk->gitems),
				  CGR__CACHELINE);
		for (size_t i = 0; i < rk->gfn; i++)
			cgr__dfuture_complete(rk->gfuts[i], -ECANCELED);
		if (rk->gfcap)
			cgr__free(a, rk->gfuts, rk->gfcap * sizeof(*rk->gfuts),
				  16);
		cgr__free(a, rk->sidx, CGR__IDX_WORDS(n) * 8, 16);
		for (size_t i = 0; i < CGR__NREC; i++) {
			struct cgr__rec *rec = &rk->recs[i];
			if (rec->arrcap)
				cgr__free(a, rec->arr,
					  rec->arrcap * sizeof(*rec->arr),
					  CGR__CACHELINE);
			if (rec->gfarrcap)
				cgr__free(a, rec->gfarr,
					  rec->gfarrcap * sizeof(*rec->gfarr),
					  16);
		}
	}
	cgr__free(a, c->ranks, n * sizeof(*c->ranks), CGR__CACHELINE);
	if (c->own_sh)
		cgr__free(a, c->sh, cgr__cpu_shared_size((int)n),
			  CGR__CACHELINE);
	cgr__free(a, c, sizeof(*c), CGR__CACHELINE);
}

static const struct cgr__comm_ops cgr__cpu_ops = {
	.name = "cpu",
	.send = cgr__cpu_op,
	.recv = cgr__cpu_op,
	.allreduce = cgr__cpu_op,
	.allgather = cgr__cpu_op,
	.reducescatter = cgr__cpu_op,
	.reduce = cgr__cpu_op,
	.broadcast = cgr__cpu_op,
	.gather = cgr__cpu_op,
	.scatter = cgr__cpu_op,
	.alltoall = cgr__cpu_op,
	.group_start = cgr__cpu_group_start,
	.group_end = cgr__cpu_group_end,
	.abort = cgr__cpu_abort,
	.destroy = cgr__cpu_destroy,
	.errmsg = cgr__cpu_errmsg,
};

size_t cgr__cpu_shared_size(int n)
{
	size_t nn = (size_t)n;

	return sizeof(struct cgr__cshm) + nn * sizeof(struct cgr__rpub) +
	       2 * nn * sizeof(struct cgr__fast) +
	       nn * nn * sizeof(struct cgr__pair);
}

/* The shared state laid out over c->sh (set up unless attach). */
static void cpu_shared_init(struct cgr__cpu *c, bool attach)
{
	size_t nn = (size_t)c->base.n;
	unsigned char *m = (unsigned char *)c->sh + sizeof(*c->sh);

	c->pub = (struct cgr__rpub *)m;
	m += nn * sizeof(*c->pub);
	c->fast = (struct cgr__fast *)m;
	m += 2 * nn * sizeof(*c->fast);
	c->pairs = (struct cgr__pair *)m;
	if (attach)
		return; /* the process that made it set it up */
	c->sh->magic = CGR__CSHM_MAGIC;
	c->sh->version = CGR__CSHM_VERSION;
	c->sh->n = (uint32_t)nn;
	atomic_init(&c->sh->aborted, 0);
	atomic_init(&c->sh->movers, 0);
	cgr__bell_init(&c->sh->bell);
	for (size_t i = 0; i < 2 * nn; i++)
		atomic_init(&c->fast[i].seq, 0);
	for (size_t r = 0; r < nn; r++)
		atomic_init(&c->pub[r].stage, 0);
	for (size_t i = 0; i < nn * nn; i++) {
		atomic_init(&c->pairs[i].sent, 0);
		atomic_init(&c->pairs[i].taken, 0);
	}
}

int cgr__cpu_comm_create(cgr_ctx *ctx, int n, const struct cgr__comm_shm *shm,
			 cgr_comm **out)
{
	struct cgr__arena *a = &ctx->arena;
	struct cgr__cpu *c;
	size_t nn = (size_t)n;

	c = cgr__alloc(a, sizeof(*c), CGR__CACHELINE);
	if (c == NULL)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	c->base.ops = &cgr__cpu_ops;
	c->base.arena = a;
	c->base.log = &ctx->log;
	c->base.ctx = ctx;
	c->base.n = n;
	if (shm != NULL) {
		c->sh = shm->mem;
		c->xbase = (uintptr_t)shm->seg;
		c->xsize = shm->seg_size;
	} else {
		c->sh = cgr__alloc(a, cgr__cpu_shared_size(n), CGR__CACHELINE);
		c->own_sh = true;
	}
	c->ranks = cgr__alloc(a, nn * sizeof(*c->ranks), CGR__CACHELINE);
	if (c->sh == NULL || c->ranks == NULL)
		goto nomem;
	memset(c->ranks, 0, nn * sizeof(*c->ranks));
	if (shm != NULL && shm->attach &&
	    (c->sh->magic != CGR__CSHM_MAGIC ||
	     c->sh->version != CGR__CSHM_VERSION || c->sh->n != (uint32_t)n)) {
		cgr__err(&ctx->log,
			 "communicator: the shared state of another process is "
			 "not a %d-rank communicator of this version",
			 n);
		cgr__free(a, c->ranks, nn * sizeof(*c->ranks), CGR__CACHELINE);
		cgr__free(a, c, sizeof(*c), CGR__CACHELINE);
		return -EPROTO;
	}
	cpu_shared_init(c, shm != NULL && shm->attach);
	for (size_t r = 0; r < nn; r++) {
		atomic_init(&c->ranks[r].done, 0);
		/* sidx, ridx and sfree share one allocation. */
		c->ranks[r].sidx = cgr__alloc(a, CGR__IDX_WORDS(nn) * 8, 16);
		if (c->ranks[r].sidx == NULL)
			goto nomem;
		c->ranks[r].ridx = c->ranks[r].sidx + nn;
		c->ranks[r].sfree = c->ranks[r].ridx + nn;
		for (size_t i = 0; i < nn * CGR__P2P_SLOTS; i++)
			c->ranks[r].sfree[i] = i % CGR__P2P_SLOTS;
	}
	*out = &c->base;
	return 0;
nomem:
	if (c->ranks != NULL)
		for (size_t r = 0; r < nn; r++)
			cgr__free(a, c->ranks[r].sidx, CGR__IDX_WORDS(nn) * 8,
				  16);
	cgr__free(a, c->ranks, nn * sizeof(*c->ranks), CGR__CACHELINE);
	if (c->own_sh)
		cgr__free(a, c->sh, cgr__cpu_shared_size(n), CGR__CACHELINE);
	cgr__free(a, c, sizeof(*c), CGR__CACHELINE);
	return -ENOMEM;
}
