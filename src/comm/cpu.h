/*
 * comm/cpu.h: the CPU backend, private to comm/cpu_*.c.  Ranks are threads
 * of one process (or processes sharing a segment) and move data through
 * shared memory, reading and writing each other's buffers directly (no
 * staging copies).  It lives in three files: cpu_setup.c (create,
 * destroy, abort and the layout of the shared state), cpu_algo.c (the
 * agreement and data movement of each collective, the latency path,
 * point to point) and cpu_progress.c (waiting, the records of each rank
 * and their execution in order, the entry points and groups).  This
 * header holds what they share: the shared state, each rank's state, and
 * the few calls between them.
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
 * down the full path below, which reports it in detail (see cgr__cpu_coll).
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
#ifndef CGR_COMM_CPU_H
#define CGR_COMM_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/agree.h"
#include "comm/comm.h"
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
	bool gmixed; /* a call on another stream: the whole group fails */
	/* Executing side: one record at a time, in issue order. */
	_Atomic uint64_t done cgr__aligned;
	/* Records whose executor let go of the communicator (after done
	 * and the bell, its last touch): what destroy waits for. */
	_Atomic uint64_t left;
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

/* Whether the communicator was aborted (see cgr__cpu_abort). */
static inline bool cgr__aborted(struct cgr__cpu *c)
{
	return atomic_load_explicit(&c->sh->aborted, memory_order_acquire) != 0;
}

/* A send or a receive (not a collective). */
static inline bool cgr__is_p2p(int kind)
{
	return kind == CGR__COLL_SEND || kind == CGR__COLL_RECV;
}

/* ---- waiting (cpu_progress.c) ------------------------------------- */

/* One rank's wait context for one record. */
struct cgr__wctx {
	struct cgr__cpu *c;
	int rank;
	cgr_stream *s;	  /* executor's stream, or NULL (inline) */
	int64_t deadline; /* CGR_FOREVER: none */
	bool stopped;	  /* the stream is being destroyed */
	bool failed;	  /* errmsg already written for this record */
};

/* Records rank w->rank's message for this record (the first failure
 * only) and returns code. */
int cgr__cpu_fail(struct cgr__wctx *w, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Waits until ready(arg).  0, -ECANCELED (abort, or the stream is being
 * destroyed: w->stopped), -ETIMEDOUT (w->deadline). */
int cgr__cpu_wait(struct cgr__wctx *w, cgr__ready_fn ready, void *arg,
		  bool abortable);

/* An operation ends early with ret: aborts where the sequences no longer
 * line up, waits until nobody copies; returns the code to report. */
int cgr__cpu_bail(struct cgr__wctx *w, int ret);

/* Waits for stage target of every rank (only < 0) or of rank `only`. */
int cgr__cpu_stage_wait(struct cgr__wctx *w, uint64_t target, int only,
			const char *kind, uint64_t k);

/* Publishes rank r's stage and wakes the waiters. */
static inline void cgr__publish(struct cgr__cpu *c, int r, uint64_t stage)
{
	/* P0: release: our descriptor (stage 4k+1) or our writes into the
	 * peers' buffers and our last reads of theirs (4k+2) happen before;
	 * pairs with the acquire in cgr__stage_ready. */
	atomic_store_explicit(&c->pub[r].stage, stage, memory_order_release);
	cgr__bell_ring(&c->sh->bell);
}

/* A rank starts (false: may not, aborted) and ends copying between the
 * ranks' buffers: cgr__cpu_bail waits until nobody does. */
static inline bool cgr__move_begin(struct cgr__cpu *c)
{
	/* M0: seq_cst increment, then re-check the abort flag (pairs with
	 * A0): an aborted rank that read movers == 0 in cgr__cpu_bail is sure
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

/* ---- the operations (cpu_algo.c) ----------------------------------- */

/* Collective *d of this rank (the next one of its sequence): agreement,
 * then the data; its result. */
int cgr__cpu_coll(struct cgr__wctx *w, const struct cgr__coll_desc *d);

/* The sends and receives among items[0..nitems), driven together; each
 * item's result in it->result. */
void cgr__cpu_p2p(struct cgr__wctx *w, struct cgr__item *items,
		  size_t nitems);

/* ---- entry points ---------------------------------------------------- */

/* cpu_setup.c */
int cgr__cpu_abort(cgr_comm *cc);
/* cpu_progress.c: the ops of struct cgr__comm_ops */
int cgr__cpu_op(cgr_comm *cc, int r, const struct cgr__coll_desc *d,
		cgr_stream *s, cgr_future **out);
int cgr__cpu_group_start(cgr_comm *cc, int r);
int cgr__cpu_group_end(cgr_comm *cc, int r, cgr_future **out);

#endif
