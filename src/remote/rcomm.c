/*
 * remote/rcomm.c: communicators whose members are on several hosts.
 *
 * The driver makes one (cgr_comm_create with members on other hosts:
 * ctx->comm_far); each host with members gets a share of it under the
 * same id (COMM_NEW, answered by COMM_MADE), where tasks on its workers
 * find it (cgr_task_comm) and call the public operations with their
 * rank.  A share runs the operations of its host's ranks only.
 *
 * An operation is one exchange: each rank sends every other rank one
 * message (CGR__RM_COMM_OP: its agreement record, then the part of its
 * input that rank needs, none if poisoned), over the link to another
 * host, straight into the box within the process, and takes the n - 1
 * messages addressed to it.  Every rank then holds every record: the
 * verdict (comm/agree.c) is the same everywhere, and only if it agrees
 * does the data land in the caller's buffers.  Reductions fold the
 * ranks' inputs in rank order (rank 0 op rank 1 op ...) on every rank:
 * the result is bit-identical on every member whatever the host layout.
 * A send and its receive: the sender's record and data go first, the
 * receiver answers with its own record once it copied the data (or
 * refused it); both reach the same verdict from the same two records.
 *
 * A message's key (struct cgr__rmsg): gid the communicator, index the
 * sending rank, flags the receiving rank, cpu the lane (LANE_*),
 * timeout_ns the sequence (collectives per rank; sends and receives per
 * ordered pair).
 *
 * Failures: a host of the communicator lost fails it (CGR_EHOSTLOST,
 * sticky, the message names the host); an abort or an operation past its
 * deadline, or one whose graph was torn down while it waited (a
 * collective node's: cgr__coll_desc.stop), fails it with -ECANCELED on
 * every host (COMM_ABORT), the operation that timed out with -ETIMEDOUT.
 * Groups run their collectives in call order, then post every send
 * before any receive waits; an operation on a stream runs on the
 * stream's executor, in its rank's call order (turn_wait).
 *
 * Threads: each rank's operations run on the calling thread; the box,
 * every share's failure and the list of shares are under j->lock.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/agree.h"
#include "comm/comm.h"
#include "comm/reduce.h"
#include "remote/remote.h"

enum {
	LANE_COLL = 0,
	LANE_SEND = 1,
	LANE_RECV = 2,
	LANE_GATHER = 3,
	LANE_HOSTS = 4,	  /* hier: a host's fold, chunk by chunk */
	LANE_CHAIN = 5,	  /* a chained broadcast's chunks, host to host */
	LANE_LOCAL = 6,	  /* its data to the other ranks of a host */
	LANE_HGATHER = 7, /* hier: the reduced blocks, chunk by chunk */
	LANE_LATE1 = 8	  /* a late alltoall's or scatter's block, to its rank */
};

/* A broadcast of at least this many bytes over three hosts or more runs
 * as a chain (after the records' exchange): the root's host sends it to
 * the next host in chunks of CHAIN_CHUNK bytes (or more: at most 65535
 * chunks), whose rank forwards each chunk to the next host as soon as it
 * has it, and so on: every host receives it once and sends it once at
 * most, the hops overlapping, instead of the root's host sending it to
 * every host (or scatter and allgather: 2 (n - 1) / n inputs from each). */
#define CHAIN_BYTES ((size_t)128 << 10)
#define CHAIN_CHUNK_MIN ((size_t)64 << 10)
#define CHAIN_CHUNK_MAX ((size_t)1 << 20)

/* An allreduce of at least this many bytes (and one element per rank)
 * runs as a reduce-scatter and an allgather: each rank reduces one block
 * (the data each host sends: 2 (n - 1) / n inputs instead of n - 1); a
 * broadcast as a scatter and an allgather (the root sends 2 (n - 1) / n
 * inputs, not n - 1). */
#define SPLIT_BYTES ((size_t)16 << 10)

/* A hierarchical allreduce (struct op: hier) moves its blocks in chunks
 * of an eighth of a block, HIER_CHUNK_MIN to HIER_CHUNK_MAX bytes (whole
 * elements, at most 65535 chunks a block): a leader sends chunk k of
 * another leader's block as soon as it has folded its host's inputs
 * there; it folds chunk k of its own block from every leader's as soon as
 * they are in, and sends the result to every host at once; every rank
 * copies each chunk of the result as it comes.  The host's fold (shared
 * memory), the leaders' exchange (the network) and the copies out to the
 * host's ranks overlap chunk by chunk, not block by block. */
#define HIER_CHUNK_MIN ((size_t)256 << 10)
#define HIER_CHUNK_MAX ((size_t)1 << 20)

/* An allgather, alltoall, gather or scatter whose blocks (a rank's input,
 * or one block of it) are at least this many bytes sends its data only
 * once every record is in (late): a second exchange, whose data lands
 * straight in the receiving rank's buffer (claims) instead of in a
 * message first and then copied; and a mismatch is known before any of
 * it moves. */
#define LATE_BYTES ((size_t)128 << 10)

#define REC sizeof(struct cgr__agree)

/* The data after a record is as aligned as malloc's memory. */
_Static_assert((offsetof(struct cgr__cmsg, payload) +
		sizeof(struct cgr__agree)) % 16 == 0,
	       "a message's data is aligned");

struct cgr__rcomm {
	struct cgr_comm head;
	struct cgr_job *j;
	struct cgr__rcomm *next; /* j->rcomms */
	uint32_t *host;		 /* by rank: the job rank it runs on */
	uint64_t *seq;		 /* by rank: its collectives so far */
	uint64_t *sent, *rcvd;	 /* by rank * n + peer: its sends, receives */
	char (*msg)[256];	 /* by rank: cgr_comm_errmsg */
	struct rgroup *groups;	 /* by rank: its group in the making */
	uint64_t *issued, *ran;	 /* by rank: its operations' turns */
	bool driver;		 /* this process made it (COMM_FREE) */
	/* By rank: its messages whose data UCX reads straight from the
	 * rank's buffers (put), in flight (under j->lock). */
	struct zout *zout;
	/* Under j->lock: its failure (0: none) and why; operations in
	 * progress (destroy waits for them). */
	int failed, busy;
	char why[240];
};

struct zout {
	struct cgr__rcomm *rc;
	unsigned n;
	/* Its messages within the process whose data the ranks that take
	 * them read in its buffers (put: borrowed). */
	unsigned loc;
};

/* The stream whose executor runs this thread's operation now, if any
 * (its waits watch for the stream's destruction). */
static _Thread_local cgr_stream *on_stream;

static struct cgr__rcomm *rc_of(cgr_comm *c)
{
	return (struct cgr__rcomm *)(void *)c;
}

static bool here(const struct cgr__rcomm *rc, int r)
{
	return rc->host[r] == rc->j->rank;
}

static const char *host_name(const struct cgr_job *j, uint32_t rank)
{
	return rank < j->size && j->peers[rank].host[0] ? j->peers[rank].host
							: "?";
}

static int fail_rank(struct cgr__rcomm *rc, int r, int code, const char *fmt,
		     ...) __attribute__((format(printf, 4, 5)));
static int fail_rank(struct cgr__rcomm *rc, int r, int code, const char *fmt,
		     ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rc->msg[r], sizeof(rc->msg[r]), fmt, ap);
	va_end(ap);
	return code;
}

/* Under j->lock: the communicator fails (the first failure stays). */
static bool fail_locked(struct cgr__rcomm *rc, int code, const char *why)
{
	if (rc->failed != 0)
		return false;
	rc->failed = code;
	snprintf(rc->why, sizeof(rc->why), "%s", why);
	pthread_cond_broadcast(&rc->j->cond);
	return true;
}

/* Whether host[i] is the first rank of its host among host[0..n), and
 * not this one's. */
static bool first_far(const struct cgr_job *j, const uint32_t *host,
		      size_t i)
{
	size_t q = 0;

	while (q < i && host[q] != host[i])
		q++;
	return q == i && host[i] != j->rank;
}

/* Each other host of rc once: fn(rc, host). */
static void each_host(struct cgr__rcomm *rc,
		      void (*fn)(struct cgr__rcomm *, uint32_t, int), int arg)
{
	for (int r = 0; r < rc->head.n; r++)
		if (first_far(rc->j, rc->host, (size_t)r))
			fn(rc, rc->host[r], arg);
}

static void send_plain(struct cgr__rcomm *rc, uint32_t to, int type)
{
	struct cgr__rmsg m;

	memset(&m, 0, sizeof(m));
	m.type = (uint32_t)type;
	m.gid = rc->head.id;
	m.code = -ECANCELED;
	(void)cgr__job_send(rc->j, to, &m, NULL, 0);
}

/* rc fails here, then on every other host of it (-ECANCELED; text: what
 * the others' reason says happened here, "" for an abort). */
static void rc_abort_why(struct cgr__rcomm *rc, const char *text)
{
	struct cgr__rmsg m;
	bool first;

	pthread_mutex_lock(&rc->j->lock);
	first = fail_locked(rc, -ECANCELED,
			    text[0] != '\0' ? text : "communicator aborted");
	pthread_mutex_unlock(&rc->j->lock);
	if (!first)
		return;
	memset(&m, 0, sizeof(m));
	m.type = CGR__RM_COMM_ABORT;
	m.gid = rc->head.id;
	m.code = -ECANCELED;
	snprintf(m.text, sizeof(m.text), "%s", text);
	for (int r = 0; r < rc->head.n; r++)
		if (first_far(rc->j, rc->host, (size_t)r))
			(void)cgr__job_send(rc->j, rc->host[r], &m, NULL, 0);
}

static int rc_abort(cgr_comm *c)
{
	rc_abort_why(rc_of(c), "");
	return 0;
}

/* ---- messages ----------------------------------------------------------- */

/* Data of at least this many bytes to another host leaves straight from
 * the rank's buffer (cgr__job_sendz), its operation waiting until UCX is
 * done with it (zout_wait); less is copied (cheaper than the wait). */
#define ZC_BYTES ((size_t)64 << 10)

/* A message of a rank sent from its buffer is out (the link's thread). */
static void zout_done(void *arg, int status)
{
	struct zout *z = arg;
	struct cgr_job *j = z->rc->j;

	(void)status; /* a failed send: its peer is lost (check_lost) */
	pthread_mutex_lock(&j->lock);
	if (--z->n == 0)
		pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
}

/* Until *n (under j->lock: UCX's transfers in flight) is 0, calling
 * each(arg) (may be NULL) under j->lock before every look.  No deadline:
 * a transfer ends, in error too, once its peer is lost (the link closes
 * the endpoint by force). */
static void drain(struct cgr_job *j, const unsigned *n,
		  void (*each)(void *), void *arg)
{
	int64_t spin_end = cgr__now_ns() + j->spin_ns;
	bool parked = false;

	pthread_mutex_lock(&j->lock);
	while (*n != 0 && (each == NULL || (each(arg), *n != 0))) {
		if (cgr__now_ns() < spin_end &&
		    j->wait_mode != CGR_WAIT_BLOCK) {
			pthread_mutex_unlock(&j->lock);
			if (!cgr__job_poll(j))
				sched_yield();
			pthread_mutex_lock(&j->lock);
		} else if (!parked) {
			parked = true;
			pthread_mutex_unlock(&j->lock);
			cgr__job_park(j);
			pthread_mutex_lock(&j->lock);
		} else {
			pthread_cond_wait(&j->cond, &j->lock);
		}
	}
	pthread_mutex_unlock(&j->lock);
}

/* The box's message cm goes (under j->lock): one of its sender's
 * borrowed ones fewer. */
static void box_drop(struct cgr_job *j, struct cgr__cmsg **pp)
{
	struct cgr__cmsg *cm = *pp;

	*pp = cm->next;
	if (cm->ext_n != NULL && --*cm->ext_n == 0)
		pthread_cond_broadcast(&j->cond);
	free(cm);
}

struct withdraw {
	struct cgr__rcomm *rc;
	int me;
};

/* Under j->lock: once the communicator failed, rank me's messages in the
 * box whose data is still in its buffers and that nobody holds now go:
 * whoever did not take them yet fails without them. */
static void withdraw(void *arg)
{
	struct withdraw *wd = arg;
	struct cgr__rcomm *rc = wd->rc;
	unsigned *n = &rc->zout[wd->me].loc;

	if (rc->failed == 0)
		return;
	for (struct cgr__cmsg **pp = &rc->j->box; *pp != NULL;)
		if ((*pp)->ext_n == n && (*pp)->users == 0)
			box_drop(rc->j, pp);
		else
			pp = &(*pp)->next;
}

/* Until UCX is done with rank me's buffers: before its operation writes
 * where it sent from, and before the operation ends. */
static void zout_wait(struct cgr__rcomm *rc, int me)
{
	drain(rc->j, &rc->zout[me].n, NULL, NULL);
}

/* Until the ranks of this host that took rank me's borrowed messages
 * let them go, at the end of its operation (each rank lets go of what it
 * took before it waits here: none waits for another).  A rank that will
 * not take them any more failed the communicator (its wait ended: past
 * its deadline, aborted, its peer lost): then they go. */
static void loc_wait(struct cgr__rcomm *rc, int me)
{
	struct withdraw wd = { rc, me };

	drain(rc->j, &rc->zout[me].loc, withdraw, &wd);
}

/* ---- claims: data straight into the caller's buffer ------------------- */

/*
 * A message whose data is in its own place at the sender (cgr__job_sendz:
 * its record in the header, the data by UCX's rendezvous) may be received
 * straight into the caller's buffer, not into the message and then
 * copied: the operation claims where its data goes before any of it can
 * be sent, that is before it sends its own record (every such message is
 * sent only once its sender has every rank's record: the second half of a
 * split operation, a chained broadcast's chunks).  A claim covers the
 * messages of one operation to this host on one lane whose key is in
 * [key, key + nkeys) and which only one rank here takes, or, if it lends
 * (lend), that other ranks here take too: they copy the data from where
 * it landed, and the claiming rank's operation waits for them to let it
 * go (cgr__rcomm_claim_lend), as for a message it lent itself.  where()
 * says where one goes (NULL: not claimed, e.g. a length that is not the
 * expected one: the operation judges it as any other); the first claim
 * listed that takes it has it.  The operation unlists it at its end once
 * the transfers into it are done (drain).
 */
struct cgr__claim {
	struct cgr__claim *next;
	uint64_t gid, key, nkeys;
	uint32_t to;
	int lane;
	void *(*where)(const struct cgr__claim *, uint32_t from, uint64_t k,
		       size_t len);
	const struct op *o;
	int me, peer;
	/* Its messages may be for other ranks of this host too (data they
	 * all take alike: the others read it where it landed,
	 * cgr__rcomm_claim_lend): the count of its rank's lent messages
	 * (zout.loc), else NULL. */
	unsigned *lend;
	unsigned inflight; /* under j->lock */
};

void *cgr__rcomm_claim(struct cgr_job *j, const struct cgr__rmsg *m,
		       size_t len, struct cgr__claim **cl)
{
	void *dst = NULL;
	uint64_t key = (uint64_t)m->timeout_ns;

	*cl = NULL;
	pthread_mutex_lock(&j->lock);
	for (struct cgr__claim *c = j->claims; c != NULL; c = c->next)
		if (c->gid == m->gid && c->to == m->flags &&
		    (m->nranks == 1 || c->lend != NULL) &&
		    c->lane == m->cpu && key - c->key < c->nkeys &&
		    (dst = c->where(c, m->index, key - c->key, len)) != NULL) {
			c->inflight++;
			*cl = c;
			atomic_fetch_add_explicit(&j->st_comm_direct, len,
						  memory_order_relaxed);
			break;
		}
	pthread_mutex_unlock(&j->lock);
	return dst;
}

void cgr__rcomm_claim_lend(struct cgr_job *j, struct cgr__claim *cl,
			   struct cgr__cmsg *cm, void *dst)
{
	if (cm->m.nranks <= 1 || cl->lend == NULL)
		return;
	pthread_mutex_lock(&j->lock);
	/* As a message a rank of this process lends (put): box_drop
	 * counts it off. */
	cm->ext = dst;
	cm->ext_n = cl->lend;
	++*cm->ext_n;
	pthread_mutex_unlock(&j->lock);
}

void cgr__rcomm_claim_done(struct cgr_job *j, struct cgr__claim *cl)
{
	pthread_mutex_lock(&j->lock);
	if (--cl->inflight == 0)
		pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
}

static void claim_list(struct cgr__rcomm *rc, struct cgr__claim *c)
{
	pthread_mutex_lock(&rc->j->lock);
	c->next = rc->j->claims;
	rc->j->claims = c;
	pthread_mutex_unlock(&rc->j->lock);
}

/* The operation ends: no transfer into its buffers goes on. */
static void claim_unlist(struct cgr__rcomm *rc, struct cgr__claim *c)
{
	struct cgr_job *j = rc->j;
	struct cgr__claim **pp;

	drain(j, &c->inflight, NULL, NULL);
	pthread_mutex_lock(&j->lock);
	for (pp = &j->claims; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	pthread_mutex_unlock(&j->lock);
}

/* A message: its record, then its data in nv parts.  to: the receiving
 * rank (sends and receives, late_one's blocks), or the host whose
 * ranks take it (a collective's: refs of them, each takes the same
 * message). */
static int put(struct cgr__rcomm *rc, int me, uint32_t to, int lane,
	       uint64_t seq, uint32_t refs, const struct cgr__agree *a,
	       const struct iovec *v, int nv, bool keep)
{
	struct cgr_job *j = rc->j;
	uint32_t host = lane == LANE_SEND || lane == LANE_RECV ||
					lane == LANE_LATE1 ?
				rc->host[to] :
				to;
	struct iovec all[CGR_MAX_RANKS + 1];
	struct cgr__cmsg *cm;
	struct cgr__rmsg m;
	size_t len = REC, at = REC;
	bool borrow;

	memset(&m, 0, sizeof(m));
	m.type = CGR__RM_COMM_OP;
	m.gid = rc->head.id;
	m.index = (uint32_t)me;
	m.flags = to;
	m.cpu = lane;
	m.timeout_ns = (int64_t)seq;
	m.nranks = refs;
	all[0].iov_base = (void *)(uintptr_t)a;
	all[0].iov_len = REC;
	for (int i = 0; i < nv; i++)
		all[1 + i] = v[i], len += v[i].iov_len;
	if (host != j->rank && nv == 1 && v[0].iov_len >= ZC_BYTES &&
	    REC <= cgr__job_sendz_room(j)) {
		struct zout *z = &rc->zout[me];
		int ret;
		pthread_mutex_lock(&j->lock);
		z->n++;
		pthread_mutex_unlock(&j->lock);
		ret = cgr__job_sendz(j, host, &m, all, 1, v[0].iov_base,
				     v[0].iov_len, zout_done, z);
		if (ret == 0)
			atomic_fetch_add_explicit(&j->st_comm_sent, len,
						  memory_order_relaxed);
		else
			zout_done(z, ret);
		return ret;
	}
	if (host != j->rank) {
		int ret = cgr__job_sendv(j, host, &m, all, nv + 1);
		if (ret == 0)
			atomic_fetch_add_explicit(&j->st_comm_sent, len,
						  memory_order_relaxed);
		return ret;
	}
	/* The same process: straight into the box; large data of a
	 * collective stays where it is (the ranks that take it read it
	 * there; the sender's zout_wait waits until they let it go). */
	borrow = keep && nv == 1 && v[0].iov_len >= ZC_BYTES;
#ifdef CGR_FAULT_INJECTION
	borrow = borrow && !j->debug_copy;
#endif
	if ((cm = malloc(sizeof(*cm) + (borrow ? REC : len))) == NULL)
		return -ENOMEM;
	m.payload = len;
	cm->from = j->rank;
	cm->len = sizeof(m) + len;
	cm->claimed = false;
	cm->claim = NULL;
	cm->ext = borrow ? v[0].iov_base : NULL;
	cm->ext_n = borrow ? &rc->zout[me].loc : NULL;
	cm->users = 0;
	cm->m = m;
	memcpy(cm->payload, a, REC);
	for (int i = 0; i < nv && !borrow; i++) {
		if (v[i].iov_len)
			memcpy(cm->payload + at, v[i].iov_base, v[i].iov_len);
		at += v[i].iov_len;
	}
	pthread_mutex_lock(&j->lock);
	if (borrow)
		rc->zout[me].loc++;
	cm->next = j->box;
	j->box = cm;
	pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
	return 0;
}

/* What one wait collects: from each rank whose got[] is NULL its message
 * to `to` (a rank or this host: see put) on lane, sequence seq.  The
 * messages stay in the box until every rank they are for let them go
 * (let_go). */
struct want {
	uint32_t to;
	int lane, nleft;
	uint64_t seq;
	struct cgr__cmsg **got;
	int64_t deadline;
	const _Atomic uint32_t *stop; /* cgr__coll_desc.stop */
};

/* Under j->lock: the box's messages for w; whether all are in. */
static bool take_in(struct cgr__rcomm *rc, struct want *w)
{
	for (struct cgr__cmsg *cm = rc->j->box; cm != NULL && w->nleft > 0;
	     cm = cm->next) {
		uint32_t from = cm->m.index;
		if (cm->m.gid == rc->head.id && cm->m.flags == w->to &&
		    cm->m.cpu == w->lane &&
		    (uint64_t)cm->m.timeout_ns == w->seq &&
		    from < (uint32_t)rc->head.n && w->got[from] == NULL &&
		    cm->m.payload >= REC && cm->m.nranks > 0) {
			w->got[from] = cm;
			w->nleft--;
			cm->users++;
		}
	}
	return w->nleft == 0;
}

/* Message cm's data (after its record). */
static const unsigned char *data(const struct cgr__cmsg *cm)
{
	return cm->ext != NULL ? cm->ext : cm->payload + REC;
}

/* Whether message cm's data must still be copied to dst: not if it was
 * received there (claimed; lent: the claiming rank's buffer is dst). */
static bool to_copy(const struct cgr__cmsg *cm, const void *dst)
{
	return !cm->claimed || (cm->ext != NULL && cm->ext != dst);
}

/* This rank is done with message cm: the last one frees it. */
static void let_go(struct cgr_job *j, struct cgr__cmsg *cm)
{
	pthread_mutex_lock(&j->lock);
	cm->users--;
	if (--cm->m.nranks == 0) {
		struct cgr__cmsg **pp = &j->box;
		while (*pp != cm)
			pp = &(*pp)->next;
		box_drop(j, pp);
	}
	pthread_mutex_unlock(&j->lock);
}

/* Under j->lock: a lost host of rc fails it. */
static void check_lost(struct cgr__rcomm *rc)
{
	const char *why;

	for (int r = 0; r < rc->head.n && rc->failed == 0; r++)
		if (!here(rc, r) && cgr__job_lost(rc->j, rc->host[r], &why))
			fail_locked(rc, CGR_EHOSTLOST, why);
}

static bool stopped(const struct want *w)
{
	return w->stop != NULL &&
	       atomic_load_explicit(w->stop, memory_order_acquire) != 0;
}

/* Waits for w's messages: 0, the communicator's failure, -ETIMEDOUT, or
 * -ECANCELED (its stream or its graph stops: on_stream, w->stop).
 * Spins moving the link itself for the job's spin time, then sleeps. */
static int await(struct cgr__rcomm *rc, struct want *w)
{
	struct cgr_job *j = rc->j;
	int64_t spin_end = cgr__now_ns() + j->spin_ns;
	bool parked = false;
	int ret = 0;

	pthread_mutex_lock(&j->lock);
	for (;;) {
		int64_t now;
		if (take_in(rc, w))
			break;
		check_lost(rc);
		if ((ret = rc->failed) != 0)
			break;
		now = cgr__now_ns();
		if (w->deadline > 0 && now >= w->deadline) {
			ret = -ETIMEDOUT;
			break;
		}
		if (now < spin_end && j->wait_mode != CGR_WAIT_BLOCK) {
			pthread_mutex_unlock(&j->lock);
			if (!cgr__job_poll(j))
				sched_yield();
			pthread_mutex_lock(&j->lock);
			continue;
		}
		if (!parked) {
			parked = true;
			pthread_mutex_unlock(&j->lock);
			cgr__job_park(j);
			pthread_mutex_lock(&j->lock);
			continue;
		}
		if ((on_stream != NULL && cgr__stream_stopping(on_stream)) ||
		    stopped(w)) {
			ret = -ECANCELED; /* its stream, or its graph, goes */
			break;
		}
		if (w->deadline > 0 || on_stream != NULL || w->stop != NULL) {
			/* (On a stream or for a graph: a look every
			 * CGR__STOP_POLL_NS.) */
			int64_t until = on_stream != NULL || w->stop != NULL ?
						now + CGR__STOP_POLL_NS :
						w->deadline;
			struct timespec ts;
			if (w->deadline > 0 && w->deadline < until)
				until = w->deadline;
			ts.tv_sec = until / 1000000000;
			ts.tv_nsec = until % 1000000000;
			pthread_cond_timedwait(&j->cond, &j->lock, &ts);
		} else {
			pthread_cond_wait(&j->cond, &j->lock);
		}
	}
	pthread_mutex_unlock(&j->lock);
	return ret;
}

/* await, then the wait's own marks (got[q] == w: a rank it wants nothing
 * from) cleared; a failure as op_failed says.  ret: the caller's so far
 * (not 0: no wait). */
static int op_failed(struct cgr__rcomm *rc, int me, int kind, int ret);
static int await_plain(struct cgr__rcomm *rc, int me, int kind,
		       struct want *w, int ret)
{
	if (ret == 0)
		ret = await(rc, w);
	for (int q = 0; q < rc->head.n; q++)
		if (w->got[q] == (struct cgr__cmsg *)w)
			w->got[q] = NULL;
	return ret != 0 ? op_failed(rc, me, kind, ret) : 0;
}

/* await_plain, then until UCX is done with what rank me sent: the next
 * step may write where this one sent from. */
static int await_marked(struct cgr__rcomm *rc, int me, int kind,
			struct want *w, int ret)
{
	ret = await_plain(rc, me, kind, w, ret);
	zout_wait(rc, me);
	return ret;
}

/* ---- operations ----------------------------------------------------------- */

/* One collective of rank me: its descriptor, bytes of count elements,
 * and for an allreduce that is split (SPLIT_BYTES) the bytes of a block
 * (rank q reduces bytes [q * blk, (q + 1) * blk) of the input, the last
 * ones fewer or none). */
struct op {
	const struct cgr__rcomm *rc;
	const struct cgr__coll_desc *d;
	size_t b, blk;
	bool split;
	/* A split allreduce with several ranks on a host runs in three
	 * steps (hier): each host's leader (its lowest rank) folds its
	 * host's inputs, the leaders reduce-scatter and allgather those
	 * among themselves, every other rank takes the blocks from them.
	 * own[q]: rank q's block (leaders in rank order: the hosts' order),
	 * or -1; nown of them.  hchunk: the bytes of its chunks (the last
	 * of a block fewer), nhk: the chunks of the largest block. */
	bool hier;
	int nown;
	int own[CGR_MAX_RANKS];
	size_t hchunk, nhk;
	/* A chained broadcast: its hosts' carriers in chain order (the
	 * root, then each other host's lowest rank), nchain of them, and
	 * its chunks' bytes. */
	bool chain;
	int nchain;
	int carrier[CGR_MAX_RANKS];
	size_t chunk;
	/* An operation whose data goes after the records (LATE_BYTES):
	 * late_run sends it. */
	bool late;
};

/* The leader of host h (its lowest rank). */
static int leader(const struct cgr__rcomm *rc, uint32_t h)
{
	int q = 0;

	while (rc->host[q] != h)
		q++;
	return q;
}

/* A broadcast's chain (struct op): whether it has one. */
static bool chain_plan(struct op *o, const struct cgr__rcomm *rc,
		       const struct cgr__coll_desc *d)
{
	int n = rc->head.n;

	o->nchain = 0;
	if (d->kind != CGR_COLL_BROADCAST || o->b < CHAIN_BYTES ||
	    d->root < 0 || d->root >= n)
		return false;
	o->carrier[o->nchain++] = d->root;
	for (int q = 0; q < n; q++) {
		int c = 0;
		while (c < o->nchain && rc->host[o->carrier[c]] != rc->host[q])
			c++;
		if (c == o->nchain)
			o->carrier[o->nchain++] = q;
	}
	o->chunk = o->b / 8;
	o->chunk = o->chunk < CHAIN_CHUNK_MIN ? CHAIN_CHUNK_MIN :
		   o->chunk > CHAIN_CHUNK_MAX ? CHAIN_CHUNK_MAX :
						o->chunk;
	if (o->chunk < (o->b + 65534) / 65535)
		o->chunk = (o->b + 65534) / 65535;
	return o->nchain >= 3;
}

static void op_plan(struct op *o, const struct cgr__rcomm *rc,
		    const struct cgr__coll_desc *d)
{
	size_t es = cgr_dtype_size(d->dtype), n = (size_t)rc->head.n;

	o->rc = rc;
	o->d = d;
	o->b = d->count * es;
	o->chain = chain_plan(o, rc, d);
	o->split = (d->kind == CGR_COLL_ALLREDUCE ||
		    d->kind == CGR_COLL_BROADCAST) &&
		   o->b >= SPLIT_BYTES && d->count >= n && !o->chain;
	o->nown = 0;
	for (int q = 0; q < (int)n; q++)
		o->own[q] = !o->split ? -1 :
			    d->kind == CGR_COLL_BROADCAST ||
					    leader(rc, rc->host[q]) == q ?
						  o->nown++ :
						  -1;
	o->late = o->b >= LATE_BYTES &&
		  (d->kind == CGR_COLL_ALLGATHER ||
		   d->kind == CGR_COLL_ALLTOALL ||
		   ((d->kind == CGR_COLL_GATHER ||
		     d->kind == CGR_COLL_SCATTER) &&
		    d->root >= 0 && d->root < (int)n));
#ifdef CGR_FAULT_INJECTION
	if (rc->j->debug_copy)
		o->late = false; /* with its records, copied on receipt */
#endif
	o->hier = o->split && d->kind == CGR_COLL_ALLREDUCE &&
		  o->nown < (int)n;
	if (!o->hier)
		for (int q = 0; q < (int)n; q++)
			o->own[q] = o->split ? q : -1;
	if (!o->hier)
		o->nown = o->split ? (int)n : 0;
	o->blk = o->split ? (d->count + (size_t)o->nown - 1) /
				    (size_t)o->nown * es :
			    0;
	o->hchunk = o->nhk = 0;
	if (o->hier) {
		size_t c = o->blk / 8;
		c = c < HIER_CHUNK_MIN ? HIER_CHUNK_MIN :
		    c > HIER_CHUNK_MAX ? HIER_CHUNK_MAX :
					 c;
#ifdef CGR_FAULT_INJECTION
		if (rc->j->debug_hchunk != 0)
			c = rc->j->debug_hchunk;
#endif
		if (c < (o->blk + 65534) / 65535)
			c = (o->blk + 65534) / 65535;
		o->hchunk = (c + es - 1) / es * es;
		o->nhk = (o->blk + o->hchunk - 1) / o->hchunk;
	}
}

/* Rank q's block of a split operation: its offset and its bytes (none if
 * it owns none). */
static size_t blk_of(const struct op *o, int q, size_t *off)
{
	size_t at = o->own[q] < 0 ? o->b : (size_t)o->own[q] * o->blk;

	*off = at < o->b ? at : o->b;
	return o->b - *off < o->blk ? o->b - *off : o->blk;
}

/* What of rank `from`'s input rank `to` needs: its bytes (0: none) and
 * where they start in the input (*off); *block: whether that depends on
 * `to` (else it is the same for every rank that needs any). */
static size_t part(const struct op *o, int from, int to, size_t *off,
		   bool *block)
{
	const struct cgr__coll_desc *d = o->d;
	bool whole = false;

	*off = 0;
	*block = false;
	if (o->late)
		return 0; /* the records first, then late_run */
	switch (d->kind) {
	case CGR_COLL_ALLREDUCE:
		if (o->hier)
			return to != from && o->own[to] >= 0 &&
					       o->rc->host[to] ==
						       o->rc->host[from] ?
				       o->b :
				       0;
		if (o->split) {
			*block = true;
			return blk_of(o, to, off);
		}
		whole = true;
		break;
	case CGR_COLL_ALLGATHER:
		whole = true;
		break;
	case CGR_COLL_REDUCESCATTER:
	case CGR_COLL_ALLTOALL:
		*block = true;
		break;
	case CGR_COLL_REDUCE:
	case CGR_COLL_GATHER:
		whole = to == d->root;
		break;
	case CGR_COLL_BROADCAST:
		if (o->chain)
			return 0; /* the records first, then the chain */
		if (o->split && from == d->root) {
			*block = true;
			return blk_of(o, to, off);
		}
		whole = from == d->root;
		break;
	case CGR_COLL_SCATTER:
		*block = from == d->root;
		break;
	default:
		break;
	}
	if (*block)
		*off = (size_t)to * o->b;
	return whole || *block ? o->b : 0;
}

/*
 * Rank `from`'s message to the ranks of host h (but itself): what of its
 * input they need, once: the whole input if any of them needs it, or each
 * one's block, in rank order.  Its bytes; *at: where rank `to`'s part is
 * in it (to on h).  v (may be NULL; room for CGR_MAX_RANKS): the parts,
 * *nv of them, from from's send buffer.  *refs: the ranks it is for.
 */
static size_t host_msg(const struct cgr__rcomm *rc, const struct op *o,
		       int from, uint32_t h, int to, size_t *at,
		       struct iovec *v, int *nv, uint32_t *refs)
{
	size_t len = 0;
	bool block;

	*at = 0;
	*nv = 0;
	*refs = 0;
	for (int q = 0; q < rc->head.n; q++) {
		size_t l, off;
		if (rc->host[q] != h || q == from)
			continue;
		++*refs;
		l = part(o, from, q, &off, &block);
		if (q == to)
			*at = block ? len : 0;
		if (l == 0 || (!block && len != 0))
			continue;
		if (v != NULL) {
			v[*nv].iov_base =
				(void *)(uintptr_t)((const char *)o->d->send +
						    off);
			v[*nv].iov_len = l;
		}
		++*nv;
		len += l;
	}
	return len;
}

/* The data rank r holds for me: my own input's part, or its message's
 * (a wrong length sets *bad). */
static const void *data_of(const struct cgr__rcomm *rc, const struct op *o,
			   int me, int r, struct cgr__cmsg **got, bool *bad)
{
	size_t at, len;
	uint32_t refs;
	int nv;
	bool block;

	if (r == me) {
		(void)part(o, r, me, &at, &block);
		return (const char *)o->d->send + at;
	}
	len = host_msg(rc, o, r, rc->host[me], me, &at, NULL, &nv, &refs);
	if (got[r]->m.payload != REC + len)
		*bad = true;
	return data(got[r]) + at;
}

/* Folds srcs (n, rank order) into dst, count elements: dst may be one
 * of them (in place) only as srcs[0]. */
static int fold(const struct cgr__coll_desc *d, cgr_redop op, int div, int n,
		int me, void *dst, const void **src, size_t count, size_t bytes)
{
	void *own = NULL;

	if (me != 0 && src[me] == dst) {
		if ((own = malloc(bytes)) == NULL)
			return -ENOMEM;
		memcpy(own, dst, bytes);
		src[me] = own;
	}
	cgr__reduce(dst, src, n, count, d->dtype, op, div);
	free(own);
	return 0;
}

/* Hier, a leader: bytes [at, at + len) of its host's inputs (src by
 * rank) folded in rank order into the same bytes of its receive buffer
 * (averages: summed, divided at the end). */
static int host_fold(struct cgr__rcomm *rc, int me, const struct op *o,
		     const void *const *src, size_t at, size_t len)
{
	const struct cgr__coll_desc *d = o->d;
	const void *hs[CGR_MAX_RANKS];
	char *r = (char *)d->recv + at;
	int m = 0;

	if (len == 0)
		return 0;
	for (int q = 0; q < rc->head.n; q++)
		if (rc->host[q] == rc->host[me])
			hs[m++] = (const char *)src[q] + at;
	if (m == 1) {
		if (hs[0] != r)
			memcpy(r, hs[0], len);
		return 0;
	}
	return fold(d, d->op == CGR_AVG ? CGR_SUM : d->op, 1, m, 0, r, hs,
		    len / cgr_dtype_size(d->dtype), len);
}

/* Rank me's result from every rank's data (the verdict agreed); a split
 * allreduce: its own block only (gathered after); hier, a leader: its
 * host's inputs in hsrc (by rank), which host_blocks folds block by
 * block. */
static int compute(struct cgr__rcomm *rc, int me, const struct op *o,
		   struct cgr__cmsg **got, const void **hsrc)
{
	const struct cgr__coll_desc *d = o->d;
	int n = rc->head.n, k = d->kind;
	size_t b = o->b, at = 0, len = b;
	const void *src[CGR_MAX_RANKS];
	char *r = d->recv;
	bool bad = false;

	if (b == 0 || (cgr__coll_out_at_root(k) && me != d->root))
		return 0;
	if (o->split)
		len = blk_of(o, me, &at);
	if (o->hier && o->own[me] < 0)
		return 0; /* the leader folds this host's inputs */
	if (o->chain || o->late)
		return 0; /* chain_run, late_run move it */
	if (k == CGR_COLL_BROADCAST || k == CGR_COLL_SCATTER) {
		/* (Split: this rank's block of the root's input.) */
		const void *p = data_of(rc, o, me, d->root, got, &bad);
		if (!bad && len != 0 && p != r + at)
			memcpy(r + at, p, len);
	} else {
		for (int q = 0; q < n; q++)
			src[q] = data_of(rc, o, me, q, got, &bad);
	}
	if (bad)
		return fail_rank(rc, me, CGR_ECORRUPT,
				 "%s: a peer's data has the wrong length",
				 cgr__coll_kind_name(k));
	if (o->hier) {
		memcpy(hsrc, src, (size_t)n * sizeof(*src));
		return 0;
	}
	if (cgr__coll_reduces(k))
		return len == 0 ? 0 :
		       fold(d, d->op, n, n, me, r + at, src,
			    len / cgr_dtype_size(d->dtype), len);
	if (k != CGR_COLL_BROADCAST && k != CGR_COLL_SCATTER)
		for (int q = 0; q < n; q++)
			if (src[q] != r + (size_t)q * b)
				memcpy(r + (size_t)q * b, src[q], b);
	return 0;
}

/* Every rank's record of this operation, rank me's own at me. */
static int verdict(struct cgr__rcomm *rc, int me, const struct cgr__agree *a,
		   struct cgr__cmsg **got, uint64_t seq)
{
	int n = rc->head.n, ret;
	struct cgr__agree *all = malloc((size_t)n * REC);

	if (all == NULL)
		return -ENOMEM;
	for (int q = 0; q < n; q++)
		memcpy(&all[q], q == me ? (const void *)a : got[q]->payload,
		       REC);
	ret = cgr__agree_ops(all, REC, n, seq, rc->msg[me],
			     sizeof(rc->msg[me]));
	free(all);
	return ret;
}

/* The communicator's failure, if any, as this operation's. */
static int failed_now(struct cgr__rcomm *rc, int me, int kind)
{
	int ret;

	pthread_mutex_lock(&rc->j->lock);
	check_lost(rc);
	ret = rc->failed;
	if (ret != 0)
		fail_rank(rc, me, ret, "%s: %s", cgr__coll_kind_name(kind),
			  rc->why);
	pthread_mutex_unlock(&rc->j->lock);
	return ret;
}

/* An operation that could not finish its exchange (ret): past its
 * deadline (-ETIMEDOUT), the communicator's failure, its stream's or its
 * graph's end (-ECANCELED), or a message that could not be sent.  All but the
 * communicator's failure abort it everywhere: the ranks' sequences no
 * longer line up. */
static int op_failed(struct cgr__rcomm *rc, int me, int kind, int ret)
{
	const char *k = cgr__coll_kind_name(kind);
	bool abort = ret == -ETIMEDOUT;

	pthread_mutex_lock(&rc->j->lock);
	check_lost(rc);
	if (ret != -ETIMEDOUT && rc->failed != 0)
		fail_rank(rc, me, ret = rc->failed, "%s: %s", k, rc->why);
	else if (ret == -ECANCELED)
		abort = true,
		fail_rank(rc, me, ret, "%s: %s", k,
			  on_stream != NULL ? "its stream was destroyed" :
					      "its graph was torn down");
	else if (ret != -ETIMEDOUT)
		abort = true, fail_rank(rc, me, ret, "%s: a message could not "
						     "be sent (%d)", k, ret);
	else
		fail_rank(rc, me, ret, "%s: past its deadline", k);
	pthread_mutex_unlock(&rc->j->lock);
	if (abort)
		rc_abort(&rc->head);
	return ret;
}

/* Message cm from rank q of rank me's operation (kind, #seq), whose data
 * should be len bytes: 0; its sender's failure (its record's code: it
 * could not `did`); or CGR_ECORRUPT (`what` has another length). */
static int judge(struct cgr__rcomm *rc, int me, int kind, uint64_t seq,
		 int q, const struct cgr__cmsg *cm, size_t len,
		 const char *did, const char *what)
{
	const struct cgr__agree *t = (const void *)cm->payload;
	const char *k = cgr__coll_kind_name(kind);

	if (t->code != 0)
		return fail_rank(rc, me, t->code,
				 "%s #%llu: rank %d could not %s (%d)", k,
				 (unsigned long long)seq, q, did, t->code);
	if (cm->m.payload != REC + len)
		return fail_rank(rc, me, CGR_ECORRUPT,
				 "%s: a peer's %s has the wrong length", k,
				 what);
	return 0;
}

/* Whether data of rank me's input (v, nv parts) is within the bytes its
 * operation may write (its receive buffer, at most n inputs long): an
 * operation in place, whose data must be copied out before it computes
 * (else it could be borrowed: put). */
static bool in_recv(const struct op *o, const struct iovec *v, int nv)
{
	uintptr_t r = (uintptr_t)o->d->recv;
	uintptr_t end = r + o->b * (size_t)o->rc->head.n;

	for (int i = 0; i < nv && r != 0; i++) {
		uintptr_t p = (uintptr_t)v[i].iov_base;
		if (p < end && r < p + v[i].iov_len)
			return true;
	}
	return false;
}

/* Rank me's messages of collective o: one to each host with ranks (but
 * me), carrying what they need of its input once (lane LANE_COLL); or,
 * gathering a split allreduce (LANE_GATHER), its reduced block (gv; none
 * if its record says it failed). */
static int coll_send(struct cgr__rcomm *rc, int me, const struct op *o,
		     int lane, uint64_t seq, const struct cgr__agree *a,
		     const struct iovec *gv)
{
	struct iovec v[CGR_MAX_RANKS];
	int ret = 0;

	for (int r = 0; r < rc->head.n && ret == 0; r++) {
		uint32_t h = rc->host[r], refs = 0;
		size_t at;
		int nv = 0;
		if (leader(rc, h) != r)
			continue; /* h had its message */
		if (lane == LANE_COLL) {
			/* Poisoned: the record alone. */
			(void)host_msg(rc, o, me, h, -1, &at,
				       o->d->poison ? NULL : v, &nv, &refs);
			if (o->d->poison)
				nv = 0;
		} else {
			for (int q = 0; q < rc->head.n; q++)
				refs += rc->host[q] == h && q != me;
			if (a->code == 0)
				v[nv++] = *gv;
		}
		if (refs != 0)
			ret = put(rc, me, h, lane, seq, refs, a, v, nv,
				  lane != LANE_COLL || !in_recv(o, v, nv));
	}
	return ret;
}

/* The second half of a split allreduce or broadcast: every rank's block
 * (reduced, or taken from the root) to every rank.  res: this rank's
 * result so far (its block's). */
static int gather_blocks(struct cgr__rcomm *rc, int me, const struct op *o,
			 uint64_t seq, int res)
{
	int n = rc->head.n, ret = 0;
	struct cgr__cmsg *got[CGR_MAX_RANKS];
	struct want w = { rc->j->rank, LANE_GATHER, 0, seq, got,
			  o->d->deadline, o->d->stop };
	struct cgr__agree a;
	struct iovec v;
	size_t at;

	memset(&a, 0, sizeof(a));
	a.code = res;
	v.iov_len = blk_of(o, me, &at);
	v.iov_base = (char *)o->d->recv + at;
	/* From every other rank with a block. */
	for (int q = 0; q < n; q++) {
		bool from = q != me && o->own[q] >= 0;
		got[q] = from ? NULL : (struct cgr__cmsg *)&w;
		w.nleft += from;
	}
	if (o->own[me] >= 0)
		ret = coll_send(rc, me, o, LANE_GATHER, seq, &a, &v);
	ret = await_marked(rc, me, o->d->kind, &w, ret);
	for (int q = 0; q < n && ret == 0; q++)
		if (got[q] != NULL)
			ret = judge(rc, me, o->d->kind, seq, q, got[q],
				    blk_of(o, q, &at), "make its block",
				    "block");
	for (int q = 0; q < n && ret == 0; q++) {
		size_t len = blk_of(o, q, &at);
		if (got[q] != NULL && to_copy(got[q], (char *)o->d->recv + at))
			memcpy((char *)o->d->recv + at, data(got[q]), len);
	}
	for (int q = 0; q < n; q++)
		if (got[q] != NULL)
			let_go(rc->j, got[q]);
	return res != 0 ? res : ret;
}

/* A late operation of this kind sends each block to its own rank
 * (LANE_LATE1), not one message per host: every block can land in place
 * (claim_plan), whatever the ranks on its host. */
static bool late_one(int kind)
{
	return kind == CGR_COLL_ALLTOALL || kind == CGR_COLL_SCATTER;
}

/* A late operation (LATE_BYTES): the bytes rank `from` sends rank `to`
 * (0: none) and where they go in to's receive buffer (*at). */
static size_t late_part(const struct op *o, int from, int to, size_t *at)
{
	const struct cgr__coll_desc *d = o->d;

	*at = d->kind == CGR_COLL_SCATTER ? 0 : (size_t)from * o->b;
	if (from == to)
		return 0;
	switch (d->kind) {
	case CGR_COLL_ALLGATHER:
	case CGR_COLL_ALLTOALL:
		return o->b;
	case CGR_COLL_GATHER:
		return to == d->root ? o->b : 0;
	case CGR_COLL_SCATTER:
		return from == d->root ? o->b : 0;
	default:
		return 0;
	}
}

/* A late operation's data, once every record is in: each host whose
 * ranks need some of rank me's input gets one message with what they
 * need (as host_msg puts it; e: the operation as if its data went with
 * the records), its record saying whether me can go on (a->code). */
static int late_send(struct cgr__rcomm *rc, int me, const struct op *e,
		     uint64_t seq, const struct cgr__agree *a)
{
	struct iovec v[CGR_MAX_RANKS];
	int n = rc->head.n, ret = 0;

	if (late_one(e->d->kind)) {
		/* Each block to its rank: it can land where it goes
		 * (claim_plan), whatever the ranks on that host. */
		for (int q = 0; q < n && ret == 0; q++) {
			size_t at;
			if (late_part(e, me, q, &at) == 0)
				continue;
			v[0].iov_base = (char *)(uintptr_t)e->d->send +
					(size_t)q * e->b;
			v[0].iov_len = e->b;
			ret = put(rc, me, (uint32_t)q, LANE_LATE1, seq, 1, a,
				  v, a->code != 0 ? 0 : 1, !in_recv(e, v, 1));
		}
		return ret;
	}
	for (int r = 0; r < n && ret == 0; r++) {
		uint32_t h = rc->host[r], refs = 0, all;
		size_t at;
		int nv = 0;
		if (leader(rc, h) != r)
			continue; /* h had its message */
		for (int q = 0; q < n; q++)
			refs += rc->host[q] == h && late_part(e, me, q, &at);
		if (refs == 0)
			continue;
		(void)host_msg(rc, e, me, h, -1, &at, v, &nv, &all);
		if (a->code != 0)
			nv = 0;
		ret = put(rc, me, h, LANE_GATHER, seq, refs, a, v, nv,
			  !in_recv(e, v, nv));
	}
	return ret;
}

/* A late operation's part that rank me keeps: from its input to where it
 * goes in its receive buffer (nothing to do in place; nothing for a
 * gather's or scatter's other ranks than the root). */
static void late_own(const struct op *o, int me)
{
	const struct cgr__coll_desc *d = o->d;
	int k = d->kind;
	size_t from = k == CGR_COLL_ALLTOALL || k == CGR_COLL_SCATTER ?
			      (size_t)me * o->b :
			      0;
	size_t to = k == CGR_COLL_SCATTER ? 0 : (size_t)me * o->b;
	const char *src = (const char *)d->send + from;
	char *dst = (char *)d->recv + to;

	if ((k == CGR_COLL_GATHER || k == CGR_COLL_SCATTER) && me != d->root)
		return;
	if (src != dst)
		memmove(dst, src, o->b);
}

/* A late operation's second exchange (LANE_GATHER): rank me sends what
 * the others need of its input and takes what it needs of theirs (what
 * was claimed is in place already), and puts its own part in place.
 * res: its result so far (sent as its record's code). */
static int late_run(struct cgr__rcomm *rc, int me, const struct op *o,
		    uint64_t seq, int res)
{
	const struct cgr__coll_desc *d = o->d;
	int n = rc->head.n, ret = 0, nv;
	struct cgr__cmsg *got[CGR_MAX_RANKS];
	bool one = late_one(d->kind);
	struct want w = { one ? (uint32_t)me : rc->j->rank,
			  one ? LANE_LATE1 : LANE_GATHER, 0, seq, got,
			  d->deadline, d->stop };
	struct op e = *o;
	struct cgr__agree a;
	size_t at, off = 0, len = o->b;
	uint32_t refs;

	e.late = false;
	memset(&a, 0, sizeof(a));
	a.code = res;
	for (int q = 0; q < n; q++) {
		bool from = late_part(o, q, me, &at) != 0;
		got[q] = from ? NULL : (struct cgr__cmsg *)&w;
		w.nleft += from;
	}
	ret = late_send(rc, me, &e, seq, &a);
	if (res == 0)
		late_own(o, me);
	ret = await_marked(rc, me, d->kind, &w, ret);
	for (int q = 0; q < n && ret == 0; q++) {
		if (got[q] == NULL)
			continue;
		if (!one)
			len = host_msg(rc, &e, q, rc->host[me], me, &off, NULL,
				       &nv, &refs);
		ret = judge(rc, me, d->kind, seq, q, got[q], len,
			    "send its data", "data");
		if (ret == 0 && late_part(o, q, me, &at) != 0 &&
		    to_copy(got[q], (char *)d->recv + at))
			memcpy((char *)d->recv + at, data(got[q]) + off, o->b);
	}
	for (int q = 0; q < n; q++)
		if (got[q] != NULL)
			let_go(rc->j, got[q]);
	return res != 0 ? res : ret;
}

/* The key of chunk k of operation seq's messages on a lane (a chained
 * broadcast's, a hierarchical allreduce's: at most 65536 chunks). */
static uint64_t chunk_key(uint64_t seq, size_t k)
{
	return seq << 16 | (uint64_t)k;
}

/* Hier: chunk k of rank q's block, its bytes (0: past its end) and where
 * it starts in the buffers (*off). */
static size_t hchunk_of(const struct op *o, int q, size_t k, size_t *off)
{
	size_t at, len = blk_of(o, q, &at), c = k * o->hchunk;

	*off = at + (c < len ? c : len);
	return c >= len ? 0 : len - c < o->hchunk ? len - c : o->hchunk;
}

/* Hier: the chunks of rank q's block that go (one at least: an empty
 * block's record goes too). */
static size_t hchunks(const struct op *o, int q)
{
	size_t at, len = blk_of(o, q, &at);

	return len == 0 ? 1 : (len + o->hchunk - 1) / o->hchunk;
}

/* Hier: whether rank me (a leader) folds its host's inputs for chunk k of
 * rank q's block with an injected failure (CGR_TEST_HIER_FAIL: the last
 * host's leader, at its second chunk, or its first if it has one). */
static bool hfail(const struct cgr__rcomm *rc, int me, const struct op *o,
		  int q, size_t k)
{
#ifdef CGR_FAULT_INJECTION
	int last = 0;

	for (int r = 0; r < rc->head.n; r++)
		if (o->own[r] >= 0 && rc->host[r] > rc->host[last])
			last = r;
	return rc->j->debug_hfail != 0 && rc->j->debug_hfail == o->d->count &&
	       me == last && q == me && k == (hchunks(o, q) > 1 ? 1 : 0);
#else
	(void)rc, (void)me, (void)o, (void)q, (void)k;
	return false;
#endif
}

/* Hier, a leader: bytes [at, at + len) of its host's fold (host_fold) for
 * chunk k of rank q's block; res: its result so far (not 0: none). */
static int hfold(struct cgr__rcomm *rc, int me, const struct op *o,
		 const void *const *hsrc, int q, size_t k, int res)
{
	size_t at, len = hchunk_of(o, q, k, &at);

	if (res != 0)
		return res;
	if (hfail(rc, me, o, q, k))
		return fail_rank(rc, me, -ENOMEM, "allreduce: an injected "
						  "failure (CGR_TEST_HIER_FAIL)");
	return host_fold(rc, me, o, hsrc, at, len);
}

/*
 * Hier, a leader, the verdict agreed: its host's inputs (hsrc, by rank)
 * folded chunk by chunk (HIER_CHUNK_MIN), each chunk of another leader's
 * block sent to it as soon as it is folded (chunk k to each other leader
 * in ring order from this one's next, so that they do not all start with
 * the same one, then chunk k + 1); then each chunk of its own block: its
 * host's fold, folded with the other leaders' as soon as they are in
 * (hosts in order; averages divided here), the result sent to every
 * host's ranks at once (LANE_HGATHER: hier_gather takes them).  res: its
 * result so far.  Once it failed, its chunks still go, records of its
 * failure without data: every chunk any rank waits for comes, and the
 * others fail alike.  Only a wait that fails (the communicator's failure)
 * stops it.
 */
static int hier_reduce(struct cgr__rcomm *rc, int me, const struct op *o,
		       uint64_t seq, int res, const void *const *hsrc)
{
	const struct cgr__coll_desc *d = o->d;
	size_t es = cgr_dtype_size(d->dtype), at, len;
	int n = rc->head.n, ret = 0;
	struct cgr__cmsg *got[CGR_MAX_RANKS];
	const void *src[CGR_MAX_RANKS];
	int lead[CGR_MAX_RANKS];
	char *r = d->recv;
	struct cgr__agree a;
	struct iovec v;

	memset(&a, 0, sizeof(a));
	for (int q = 0; q < n; q++)
		if (o->own[q] >= 0)
			lead[o->own[q]] = q;
	for (size_t k = 0; k < o->nhk && ret == 0; k++)
		for (int i = 1; i < o->nown && ret == 0; i++) {
			int q = lead[(o->own[me] + i) % o->nown];
			if (k >= hchunks(o, q))
				continue;
			v.iov_len = hchunk_of(o, q, k, &at);
			v.iov_base = r + at;
			a.code = res = hfold(rc, me, o, hsrc, q, k, res);
			ret = put(rc, me, rc->host[q], LANE_HOSTS,
				  chunk_key(seq, k), 1, &a, &v,
				  res != 0 ? 0 : 1, false);
		}
	if (ret != 0)
		return op_failed(rc, me, d->kind, ret);
	for (size_t k = 0; k < hchunks(o, me) && ret == 0; k++) {
		struct want w = { rc->j->rank, LANE_HOSTS, 0, chunk_key(seq, k),
				  got, d->deadline, d->stop };
		len = hchunk_of(o, me, k, &at);
		res = hfold(rc, me, o, hsrc, me, k, res);
		for (int q = 0; q < n; q++) {
			bool from = q != me && o->own[q] >= 0;
			got[q] = from ? NULL : (struct cgr__cmsg *)&w;
			w.nleft += from;
		}
		ret = await_plain(rc, me, d->kind, &w, 0);
		for (int q = 0; q < n && ret == 0; q++) {
			if (o->own[q] < 0)
				continue;
			src[o->own[q]] = q == me ? (const void *)(r + at)
						 : (const void *)data(got[q]);
			if (q != me && res == 0)
				res = judge(rc, me, d->kind, seq, q, got[q],
					    len, "fold its host's inputs",
					    "block");
		}
		if (ret == 0 && res == 0 && len != 0)
			res = fold(d, d->op, n, o->nown, o->own[me], r + at,
				   src, len / es, len);
		for (int q = 0; q < n; q++)
			if (got[q] != NULL)
				let_go(rc->j, got[q]);
		v.iov_base = r + at;
		v.iov_len = len;
		a.code = res;
		if (ret == 0 && (ret = coll_send(rc, me, o, LANE_HGATHER,
						 chunk_key(seq, k), &a, &v)))
			ret = op_failed(rc, me, d->kind, ret);
	}
	return res != 0 ? res : ret;
}

/* Hier, every rank, after its host's leader's hier_reduce: each chunk of
 * every other leader's block (its own host's leader's too) as it comes,
 * into its place in the receive buffer (where not claimed: a leader's
 * claim lands it in its own, the other ranks copy it from there).  res: its result so far; once failed it
 * still takes every chunk (they go: none is left behind). */
static int hier_gather(struct cgr__rcomm *rc, int me, const struct op *o,
		       uint64_t seq, int res)
{
	const struct cgr__coll_desc *d = o->d;
	int n = rc->head.n, ret = 0;
	struct cgr__cmsg *got[CGR_MAX_RANKS];
	size_t at, len;

	/* A leader: UCX is done with the chunks it sent from where the
	 * others' results go (they come only once its chunks are in). */
	if (o->own[me] >= 0)
		zout_wait(rc, me);
	for (size_t k = 0; k < o->nhk && ret == 0; k++) {
		struct want w = { rc->j->rank, LANE_HGATHER, 0,
				  chunk_key(seq, k), got, d->deadline,
				  d->stop };
		for (int q = 0; q < n; q++) {
			bool from = q != me && o->own[q] >= 0 &&
				    k < hchunks(o, q);
			got[q] = from ? NULL : (struct cgr__cmsg *)&w;
			w.nleft += from;
		}
		ret = await_plain(rc, me, d->kind, &w, 0);
		for (int q = 0; q < n && ret == 0; q++) {
			if (got[q] == NULL)
				continue;
			len = hchunk_of(o, q, k, &at);
			if (res == 0)
				res = judge(rc, me, d->kind, seq, q, got[q],
					    len, "make its block", "block");
			if (res == 0 && len != 0 &&
			    to_copy(got[q], (char *)d->recv + at))
				memcpy((char *)d->recv + at, data(got[q]), len);
		}
		for (int q = 0; q < n; q++)
			if (got[q] != NULL)
				let_go(rc->j, got[q]);
	}
	zout_wait(rc, me);
	return res != 0 ? res : ret;
}

/* Takes rank `from`'s message of operation d on lane, key seq, for this
 * host: its data (len bytes) into dst; 0, its record's failure,
 * CGR_ECORRUPT (a wrong length), or the wait's (the communicator then
 * failed: op_failed). */
static int chain_take(struct cgr__rcomm *rc, int me,
		      const struct cgr__coll_desc *d, int from, int lane,
		      uint64_t seq, void *dst, size_t len)
{
	struct cgr__cmsg *got[CGR_MAX_RANKS];
	struct want w = { rc->j->rank, lane, 1, seq, got, d->deadline,
			  d->stop };
	const struct cgr__agree *t;
	int ret;

	for (int q = 0; q < rc->head.n; q++)
		got[q] = q == from ? NULL : (struct cgr__cmsg *)&w;
	if ((ret = await(rc, &w)) != 0)
		return op_failed(rc, me, d->kind, ret);
	t = (const void *)got[from]->payload;
	if (t->code != 0)
		ret = fail_rank(rc, me, t->code,
				"broadcast: rank %d could not pass it on (%d)",
				from, t->code);
	else if (got[from]->m.payload != REC + len)
		ret = fail_rank(rc, me, CGR_ECORRUPT,
				"broadcast: a peer's chunk has the wrong "
				"length");
	else if (len != 0 && to_copy(got[from], dst))
		memcpy(dst, data(got[from]), len);
	let_go(rc->j, got[from]);
	return ret;
}

/*
 * A chained broadcast (op_plan), rank me, the verdict agreed.  A carrier
 * (o->carrier[c]) takes each chunk from the previous host's (the root has
 * them all), passes it on to the next host's at once, and gives the
 * whole to the other ranks of its host; any other rank takes it from its
 * host's carrier.  A carrier that fails passes its failure on (a record
 * without data) in place of the chunk, and stops: nobody waits for data
 * that will not come.  res: this rank's result so far.
 */
static int chain_run(struct cgr__rcomm *rc, int me, const struct op *o,
		     uint64_t seq, int res)
{
	const struct cgr__coll_desc *d = o->d;
	size_t nk = (o->b + o->chunk - 1) / o->chunk;
	int c = 0, here_c = 0, nlocal = 0, ret = res, next, prev;
	char *r = d->recv;
	struct cgr__agree a;
	struct iovec v;

	while (c < o->nchain && o->carrier[c] != me)
		c++;
	while (rc->host[o->carrier[here_c]] != rc->host[me])
		here_c++;
	for (int q = 0; q < rc->head.n; q++)
		nlocal += rc->host[q] == rc->host[me] &&
			  q != o->carrier[here_c];
	if (c == o->nchain) /* not a carrier */
		return chain_take(rc, me, d, o->carrier[here_c], LANE_LOCAL,
				  seq, r, o->b);
	next = c + 1 < o->nchain ? o->carrier[c + 1] : -1;
	prev = c > 0 ? o->carrier[c - 1] : -1;
	if (prev < 0 && d->send != r)
		memcpy(r, d->send, o->b);
	memset(&a, 0, sizeof(a));
	for (size_t k = 0; k < nk; k++) {
		size_t off = k * o->chunk;
		int pr = 0;
		v.iov_base = r + off;
		v.iov_len = o->b - off < o->chunk ? o->b - off : o->chunk;
		if (prev >= 0 && ret == 0)
			ret = chain_take(rc, me, d, prev, LANE_CHAIN,
					 chunk_key(seq, k), r + off,
					 v.iov_len);
		a.code = ret;
		if (next >= 0)
			pr = put(rc, me, rc->host[next], LANE_CHAIN,
				 chunk_key(seq, k), 1, &a, &v, ret != 0 ? 0 : 1,
				 false);
		if (pr != 0 && ret == 0)
			ret = op_failed(rc, me, d->kind, pr);
		if (ret != 0)
			break;
	}
	a.code = ret;
	v.iov_base = r;
	v.iov_len = o->b;
	if (nlocal > 0) {
		int pr = put(rc, me, rc->host[me], LANE_LOCAL, seq,
			     (uint32_t)nlocal, &a, &v, ret != 0 ? 0 : 1, true);
		if (pr != 0 && ret == 0)
			ret = op_failed(rc, me, d->kind, pr);
	}
	/* The caller may write where the chunks were sent from. */
	zout_wait(rc, me);
	return ret;
}

/* A split operation's second half (gather_blocks): rank from's block
 * into its place in the receive buffer. */
static void *where_block(const struct cgr__claim *c, uint32_t from,
			 uint64_t k, size_t len)
{
	const struct op *o = c->o;
	size_t at;

	(void)k;
	if (from >= (uint32_t)o->rc->head.n || (int)from == c->me ||
	    o->own[from] < 0 || blk_of(o, (int)from, &at) != len)
		return NULL;
	return (char *)o->d->recv + at;
}

/* A chained broadcast's chunk k from the previous carrier (chain_run)
 * into its place in the receive buffer. */
static void *where_chunk(const struct cgr__claim *c, uint32_t from,
			 uint64_t k, size_t len)
{
	const struct op *o = c->o;
	size_t off = (size_t)k * o->chunk;

	if ((int)from != c->peer || off >= o->b ||
	    len != (o->b - off < o->chunk ? o->b - off : o->chunk))
		return NULL;
	return (char *)o->d->recv + off;
}

/* A hierarchical allreduce's chunk k of rank from's reduced block
 * (hier_gather) into its place in the receive buffer. */
static void *where_hchunk(const struct cgr__claim *c, uint32_t from,
			  uint64_t k, size_t len)
{
	const struct op *o = c->o;
	size_t at;

	if (from >= (uint32_t)o->rc->head.n || (int)from == c->me ||
	    o->own[from] < 0 || k >= hchunks(o, (int)from) || len == 0 ||
	    hchunk_of(o, (int)from, k, &at) != len)
		return NULL;
	return (char *)o->d->recv + at;
}

/* A late operation's data from rank from (late_run) into its place in
 * the receive buffer. */
static void *where_late(const struct cgr__claim *c, uint32_t from,
			uint64_t k, size_t len)
{
	const struct op *o = c->o;
	size_t at;

	(void)k;
	if (from >= (uint32_t)o->rc->head.n ||
	    late_part(o, (int)from, c->me, &at) != len || len == 0)
		return NULL;
	return (char *)o->d->recv + at;
}

/* Whether rank me's operation o (sequence seq) takes data straight into
 * its buffer: then *c is its claim, listed. */
static bool claim_plan(struct cgr__rcomm *rc, int me, const struct op *o,
		       uint64_t seq, struct cgr__claim *c)
{
	int k = 0;
	size_t at;

	if (o->b == 0 || o->d->recv == NULL || o->d->poison)
		return false;
#ifdef CGR_FAULT_INJECTION
	if (rc->j->debug_copy)
		return false;
#endif
	memset(c, 0, sizeof(*c));
	c->gid = rc->head.id;
	c->to = rc->j->rank;
	c->o = o;
	c->me = me;
	c->peer = -1;
	if (o->late) {
		for (int q = 0; q < o->rc->head.n && !k; q++)
			k = late_part(o, q, me, &at) != 0;
		if (!k)
			return false; /* nothing comes to it */
		c->lane = LANE_GATHER;
		c->key = seq;
		c->nkeys = 1;
		c->where = where_late;
		c->lend = &rc->zout[me].loc;
		if (late_one(o->d->kind)) {
			/* Its blocks come to it alone (late_send). */
			c->lane = LANE_LATE1;
			c->to = (uint32_t)me;
			c->lend = NULL;
		}
	} else if (o->hier) {
		if (o->own[me] < 0)
			return false; /* its leader claims them */
		c->lane = LANE_HGATHER;
		c->key = chunk_key(seq, 0);
		c->nkeys = o->nhk;
		c->where = where_hchunk;
		c->lend = &rc->zout[me].loc;
	} else if (o->split) {
		c->lane = LANE_GATHER;
		c->key = seq;
		c->nkeys = 1;
		c->where = where_block;
		c->lend = &rc->zout[me].loc;
	} else if (o->chain) {
		while (k < o->nchain && o->carrier[k] != me)
			k++;
		if (k == 0 || k == o->nchain)
			return false; /* the root, or not a carrier */
		c->peer = o->carrier[k - 1];
		c->lane = LANE_CHAIN;
		c->key = chunk_key(seq, 0);
		c->nkeys = (o->b + o->chunk - 1) / o->chunk;
		c->where = where_chunk;
	} else {
		return false;
	}
	claim_list(rc, c);
	return true;
}

static int coll_run(struct cgr__rcomm *rc, int me,
		    const struct cgr__coll_desc *d)
{
	int n = rc->head.n, ret;
	struct cgr__cmsg *got[CGR_MAX_RANKS] = { NULL };
	struct want w = { rc->j->rank, LANE_COLL, n - 1, ++rc->seq[me], got,
			  d->deadline, d->stop };
	const void *hsrc[CGR_MAX_RANKS];
	struct cgr__agree a;
	struct cgr__claim cl;
	struct op o;
	bool agreed = false, claimed;

	op_plan(&o, rc, d);
	cgr__agree_op(&a, d);
	if ((ret = failed_now(rc, me, d->kind)) != 0)
		return ret;
	got[me] = (struct cgr__cmsg *)&w; /* none from itself */
	/* Before its record goes: what is sent only once every record is
	 * in may come straight into its buffer. */
	claimed = claim_plan(rc, me, &o, w.seq, &cl);
	ret = coll_send(rc, me, &o, LANE_COLL, w.seq, &a, NULL);
	ret = await_marked(rc, me, d->kind, &w, ret);
	if (ret == 0 && (ret = verdict(rc, me, &a, got, w.seq)) == 0)
		agreed = true, ret = compute(rc, me, &o, got, hsrc);
	/* Agreed: every rank gathers, also one whose block failed (its
	 * record says so); a leader folds its host's inputs first (they
	 * stay in the box until then). */
	if (agreed && o.hier && o.own[me] >= 0)
		ret = hier_reduce(rc, me, &o, w.seq, ret, hsrc);
	for (int q = 0; q < n; q++)
		if (got[q] != NULL)
			let_go(rc->j, got[q]);
	if (agreed && o.hier)
		ret = hier_gather(rc, me, &o, w.seq, ret);
	else if (agreed && o.split)
		ret = gather_blocks(rc, me, &o, w.seq, ret);
	if (agreed && o.late)
		ret = late_run(rc, me, &o, w.seq, ret);
	if (agreed && o.chain)
		ret = chain_run(rc, me, &o, w.seq, ret);
	if (claimed)
		claim_unlist(rc, &cl);
	/* Every message it took is let go: the ones it lent go too. */
	loc_wait(rc, me);
	return ret;
}

/* A send (me to peer) or a receive (me from peer) in two steps: post
 * (a send's record and data go out; it takes its sequence number) and
 * finish (a receive takes the sender's message, judges, copies and
 * answers; a send takes the answer and judges the same).  Sends of a
 * group are all posted before its receives finish: none waits for
 * another. */
struct p2p {
	const struct cgr__coll_desc *d;
	uint64_t seq;
	struct cgr__agree a;
	int ret; /* posting's */
};

static void p2p_post(struct cgr__rcomm *rc, int me, struct p2p *x)
{
	const struct cgr__coll_desc *d = x->d;
	bool send = d->kind == CGR__COLL_SEND;
	size_t b = d->count * cgr_dtype_size(d->dtype);
	uint64_t *ctr = send ? rc->sent : rc->rcvd;
	struct iovec v = { (void *)(uintptr_t)d->send, b };

	x->seq = ++ctr[(size_t)me * (size_t)rc->head.n + (size_t)d->root];
	cgr__agree_op(&x->a, d);
	if ((x->ret = failed_now(rc, me, d->kind)) == 0 && send)
		x->ret = put(rc, me, (uint32_t)d->root, LANE_SEND, x->seq, 1,
			     &x->a, &v, d->poison ? 0 : 1, false);
}

static int p2p_finish(struct cgr__rcomm *rc, int me, struct p2p *x)
{
	const struct cgr__coll_desc *d = x->d;
	int n = rc->head.n, peer = d->root, ret = x->ret;
	bool send = d->kind == CGR__COLL_SEND;
	size_t b = d->count * cgr_dtype_size(d->dtype);
	struct cgr__cmsg *got[CGR_MAX_RANKS];
	struct want w = { (uint32_t)me, send ? LANE_RECV : LANE_SEND, 1,
			  x->seq, got, d->deadline, d->stop };
	struct cgr__agree *theirs;
	char what[64];

	if (ret != 0 && ret == rc->failed)
		return ret; /* failed_now said why */
	/* Only the peer's message is wanted. */
	for (int q = 0; q < n; q++)
		got[q] = q == peer ? NULL : (struct cgr__cmsg *)&w;
	snprintf(what, sizeof(what), "%s #%llu %s rank %d",
		 send ? "send" : "recv", (unsigned long long)w.seq,
		 send ? "to" : "from", peer);
	if ((ret = await_marked(rc, me, d->kind, &w, ret)) != 0)
		return ret;
	theirs = (struct cgr__agree *)(void *)got[peer]->payload;
	ret = cgr__agree_p2p(&x->a, theirs, me, what, rc->msg[me],
			     sizeof(rc->msg[me]));
	if (!send && ret == 0 && got[peer]->m.payload != REC + b)
		ret = fail_rank(rc, me, CGR_ECORRUPT,
				"%s: the data has the wrong length", what);
	else if (!send && ret == 0 && b != 0)
		memcpy(d->recv, data(got[peer]), b);
	if (!send) {
		/* The answer, once the data is in: this side's record (its
		 * poison, or a corruption it saw). */
		if (ret == CGR_ECORRUPT)
			x->a.code = CGR_ECORRUPT;
		(void)put(rc, me, (uint32_t)peer, LANE_RECV, w.seq, 1, &x->a,
			  NULL, 0, false);
	}
	let_go(rc->j, got[peer]);
	return ret;
}

/* An operation (or group) of this share starts or ends (destroy waits
 * for none to be left). */
static void busy(struct cgr__rcomm *rc, int d)
{
	pthread_mutex_lock(&rc->j->lock);
	rc->busy += d;
	if (rc->busy == 0)
		pthread_cond_broadcast(&rc->j->cond);
	pthread_mutex_unlock(&rc->j->lock);
}

/* A future already complete (the operation ran on the caller's thread),
 * in *out if out is not NULL: ret, or -ENOMEM. */
static int done_future(cgr_comm *c, int ret, cgr_future **out)
{
	struct cgr__dfuture *df;

	if (ret != 0 || out == NULL)
		return ret;
	if (cgr__dfuture_create(c->ctx, NULL, &df) < 0)
		return -ENOMEM;
	cgr__dfuture_complete(df, 0);
	*out = cgr__dfuture_pub(df);
	return 0;
}

/* ---- groups ------------------------------------------------------------- */

/* An operation of a group, held until its outermost end. */
struct gop {
	struct cgr__coll_desc d;
	char msg[128]; /* the poison's message */
	struct cgr__dfuture *fut;
	struct p2p x;
	int res;
};

struct rgroup {
	int depth;
	struct gop *ops;
	size_t n, cap;
	bool stream_set;
	bool mixed; /* a call on another stream: the whole group fails */
	cgr_stream *s;
};

static int group_add(struct cgr__rcomm *rc, int me,
		     const struct cgr__coll_desc *d, cgr_stream *s,
		     cgr_future **out)
{
	struct rgroup *g = &rc->groups[me];
	struct gop *o;
	bool other = g->stream_set && s != g->s;

	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 8;
		struct gop *ops = realloc(g->ops, cap * sizeof(*ops));
		if (ops == NULL)
			return -ENOMEM;
		g->ops = ops;
		g->cap = cap;
	}
	o = &g->ops[g->n];
	memset(o, 0, sizeof(*o));
	o->d = *d;
	if (other && o->d.poison == 0) {
		/* One group, one stream: the peers fail too. */
		o->d.poison = -EINVAL;
		o->d.poison_msg = CGR__GROUP_MIXED_MSG;
		g->mixed = true;
		out = NULL;
	}
	if (o->d.poison_msg != NULL) {
		snprintf(o->msg, sizeof(o->msg), "%s", o->d.poison_msg);
		o->d.poison_msg = o->msg;
	}
	if (!g->stream_set)
		g->stream_set = true, g->s = s;
	if (out != NULL &&
	    cgr__dfuture_create(rc->head.ctx, g->s, &o->fut) < 0)
		return -ENOMEM;
	if (o->fut != NULL)
		*out = cgr__dfuture_pub(o->fut);
	g->n++;
	return other && d->poison == 0 ? -EINVAL : 0;
}

static int rc_group_start(cgr_comm *c, int rank)
{
	struct cgr__rcomm *rc = rc_of(c);

	if (!here(rc, rank))
		return -EINVAL;
	rc->groups[rank].depth++;
	return 0;
}

/* Operations ops[0..n) of rank me as one: collectives in call order,
 * then every send posted, every receive finished, every send finished.
 * Each one's future completes; the first failure. */
static int group_run(struct cgr__rcomm *rc, int me, struct gop *ops,
		     size_t n)
{
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		struct gop *o = &ops[i];
		o->x.d = &o->d;
		/* (The group's array moved since: its own copy.) */
		if (o->d.poison_msg != NULL)
			o->d.poison_msg = o->msg;
		if (o->d.kind != CGR__COLL_SEND && o->d.kind != CGR__COLL_RECV)
			o->res = coll_run(rc, me, &o->d);
	}
	for (size_t i = 0; i < n; i++)
		if (ops[i].d.kind == CGR__COLL_SEND ||
		    ops[i].d.kind == CGR__COLL_RECV)
			p2p_post(rc, me, &ops[i].x);
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < n; i++) {
			struct gop *o = &ops[i];
			if (o->d.kind == (pass ? CGR__COLL_SEND : CGR__COLL_RECV))
				o->res = p2p_finish(rc, me, &o->x);
		}
	zout_wait(rc, me); /* (a send that failed at once waited for none) */
	for (size_t i = 0; i < n; i++) {
		if (ret == 0)
			ret = ops[i].res;
		if (ops[i].fut != NULL)
			cgr__dfuture_complete(ops[i].fut, ops[i].res);
		ops[i].fut = NULL;
	}
	return ret;
}

/*
 * Rank me's operations run in call order, on its thread or on streams:
 * each takes a number (issued) and runs once every earlier one ran (ran,
 * under j->lock).  One whose stream is being destroyed aborts the
 * communicator (the earlier ones then end at once) and still waits for
 * its turn.
 */
static void turn_wait(struct cgr__rcomm *rc, int me, uint64_t k)
{
	struct cgr_job *j = rc->j;
	bool aborted = false;

	pthread_mutex_lock(&j->lock);
	while (rc->ran[me] != k) {
		int64_t until = cgr__now_ns() + CGR__STOP_POLL_NS;
		struct timespec ts = { until / 1000000000,
				       until % 1000000000 };
		if (on_stream != NULL && !aborted &&
		    cgr__stream_stopping(on_stream)) {
			aborted = true;
			pthread_mutex_unlock(&j->lock);
			rc_abort(&rc->head);
			pthread_mutex_lock(&j->lock);
			continue;
		}
		pthread_cond_timedwait(&j->cond, &j->lock, &ts);
	}
	pthread_mutex_unlock(&j->lock);
}

static void turn_done(struct cgr__rcomm *rc, int me)
{
	pthread_mutex_lock(&rc->j->lock);
	rc->ran[me]++;
	pthread_cond_broadcast(&rc->j->cond);
	pthread_mutex_unlock(&rc->j->lock);
}

/* Operations of rank me enqueued on a stream: they run there, in turn. */
struct batch {
	struct cgr__rcomm *rc;
	int me;
	uint64_t k;
	struct gop *ops;
	size_t n;
	struct cgr__dfuture *df; /* a group's, or NULL */
};

static int batch_exec(void *arg, cgr_stream *s, int err)
{
	struct batch *b = arg;
	int ret;

	on_stream = s;
	if (err != 0) {
		/* The device failed or the stream goes: poisoned, so that
		 * the peers fail too. */
		for (size_t i = 0; i < b->n; i++)
			if (b->ops[i].d.poison == 0) {
				b->ops[i].d.poison = err;
				snprintf(b->ops[i].msg, sizeof(b->ops[i].msg),
					 "device error: %s", cgr_strerror(err));
				b->ops[i].d.poison_msg = b->ops[i].msg;
			}
	}
	turn_wait(b->rc, b->me, b->k);
	ret = group_run(b->rc, b->me, b->ops, b->n);
	turn_done(b->rc, b->me);
	busy(b->rc, -1);
	if (b->df != NULL)
		cgr__dfuture_complete(b->df, ret);
	on_stream = NULL;
	free(b->ops);
	free(b);
	return ret;
}

/* Runs ops (n; taken: malloc'd, or NULL and one) of rank me: here, its
 * result; or on stream s, enqueued (0), the group's future (gout) made
 * there. */
static int batch_run(struct cgr__rcomm *rc, int me, struct gop *ops,
		     size_t n, cgr_stream *s, cgr_future **gout)
{
	struct cgr__sop op = { .kind = CGR__SOP_CALL };
	struct batch *b;
	int ret;

	busy(rc, 1);
	if (s == NULL) {
		uint64_t k = rc->issued[me]++;
		turn_wait(rc, me, k);
		ret = group_run(rc, me, ops, n);
		turn_done(rc, me);
		busy(rc, -1);
		free(ops);
		return ret;
	}
	if ((b = calloc(1, sizeof(*b))) == NULL ||
	    (gout != NULL && cgr__dfuture_create(rc->head.ctx, s, &b->df) < 0)) {
		busy(rc, -1);
		free(b);
		free(ops);
		return -ENOMEM;
	}
	b->rc = rc, b->me = me, b->k = rc->issued[me]++;
	b->ops = ops, b->n = n;
	if (b->df != NULL)
		*gout = cgr__dfuture_pub(b->df);
	op.u.call.fn = batch_exec;
	op.u.call.arg = b;
	if ((ret = cgr__stream_enqueue(s, &op)) != 0)
		batch_exec(b, s, ret); /* fails every rank alike */
	return 0;
}

static int rc_group_end(cgr_comm *c, int rank, cgr_future **out)
{
	struct cgr__rcomm *rc = rc_of(c);
	struct rgroup *g;
	struct gop *ops;
	cgr_stream *s;
	size_t n;
	int ret;

	if (out != NULL)
		*out = NULL;
	if (!here(rc, rank) || rc->groups[rank].depth == 0)
		return -EINVAL;
	g = &rc->groups[rank];
	if (--g->depth > 0)
		return 0;
	/* The group's operations go with it: the rank's next group is
	 * new. */
	ops = g->ops, n = g->n;
	s = g->stream_set ? g->s : NULL;
	for (size_t i = 0; g->mixed && i < n; i++)
		cgr__group_mixed(&ops[i].d, ops[i].msg, sizeof(ops[i].msg));
	g->ops = NULL, g->n = g->cap = 0;
	g->stream_set = false;
	g->mixed = false;
	g->s = NULL;
	if (s != NULL)
		return batch_run(rc, rank, ops, n, s, out);
	ret = batch_run(rc, rank, ops, n, NULL, NULL);
	return done_future(c, ret, out);
}

static int rc_op(cgr_comm *c, int me, const struct cgr__coll_desc *d,
		 cgr_stream *s, cgr_future **out)
{
	struct cgr__rcomm *rc = rc_of(c);
	struct gop *o;
	int ret;

	if (out != NULL)
		*out = NULL;
	if (!here(rc, me))
		return -EINVAL; /* that rank's share is on another host */
	if (rc->groups[me].depth > 0)
		return group_add(rc, me, d, s, out);
	if ((d->kind == CGR__COLL_SEND || d->kind == CGR__COLL_RECV) &&
	    d->root == me)
		return -EINVAL; /* would wait for itself: needs a group */
	if ((o = calloc(1, sizeof(*o))) == NULL)
		return -ENOMEM;
	o->d = *d;
	if (d->poison_msg != NULL) {
		snprintf(o->msg, sizeof(o->msg), "%s", d->poison_msg);
		o->d.poison_msg = o->msg;
	}
	if (s != NULL) {
		if (out != NULL &&
		    cgr__dfuture_create(c->ctx, s, &o->fut) < 0) {
			free(o);
			return -ENOMEM;
		}
		if (o->fut != NULL)
			*out = cgr__dfuture_pub(o->fut);
		return batch_run(rc, me, o, 1, s, NULL);
	}
	ret = batch_run(rc, me, o, 1, NULL, NULL);
	return done_future(c, ret, out);
}

static const char *rc_errmsg(const cgr_comm *c, int rank)
{
	return ((const struct cgr__rcomm *)(const void *)c)->msg[rank];
}

/* ---- lifecycle -------------------------------------------------------------- */

static void rc_free(struct cgr__rcomm *rc)
{
	for (int r = 0; rc->groups != NULL && r < rc->head.n; r++) {
		for (size_t i = 0; i < rc->groups[r].n; i++)
			if (rc->groups[r].ops[i].fut != NULL)
				cgr__dfuture_complete(rc->groups[r].ops[i].fut,
						      -ECANCELED);
		free(rc->groups[r].ops);
	}
	free(rc->groups);
	free(rc->issued);
	free(rc->ran);
	free(rc->host);
	free(rc->seq);
	free(rc->sent);
	free(rc->rcvd);
	free(rc->msg);
	free(rc->zout);
	free(rc);
}

/* Under j->lock: operations still in progress are aborted and waited
 * for, a second at most: whether none is left. */
static bool idle_locked(struct cgr__rcomm *rc)
{
	struct cgr_job *j = rc->j;
	int64_t until = cgr__now_ns() + 1000000000;
	struct timespec ts = { until / 1000000000, until % 1000000000 };

	if (rc->busy == 0)
		return true;
	pthread_mutex_unlock(&j->lock);
	rc_abort(&rc->head);
	pthread_mutex_lock(&j->lock);
	while (rc->busy != 0 && cgr__now_ns() < until)
		pthread_cond_timedwait(&j->cond, &j->lock, &ts);
	return rc->busy == 0;
}

static void rc_destroy(cgr_comm *c)
{
	struct cgr__rcomm *rc = rc_of(c);
	struct cgr_job *j = rc->j;
	bool idle;

	if (rc->driver)
		each_host(rc, send_plain, CGR__RM_COMM_FREE);
	pthread_mutex_lock(&j->lock);
	idle = idle_locked(rc);
	for (struct cgr__rcomm **pp = &j->rcomms; *pp != NULL;
	     pp = &(*pp)->next)
		if (*pp == rc) {
			*pp = rc->next;
			break;
		}
	/* (Not idle: its messages stay with it.) */
	for (struct cgr__cmsg **pp = &j->box; idle && *pp != NULL;) {
		if ((*pp)->m.gid == c->id)
			box_drop(j, pp);
		else
			pp = &(*pp)->next;
	}
	pthread_mutex_unlock(&j->lock);
	if (idle)
		rc_free(rc);
	else
		cgr__err(&j->log, "communicator %llu: an operation still "
				  "runs 1 s after its abort: its memory is "
				  "left to it",
			 (unsigned long long)c->id);
}

static const struct cgr__comm_ops rc_ops = {
	.name = "cpu across hosts",
	.send = rc_op,
	.recv = rc_op,
	.allreduce = rc_op,
	.allgather = rc_op,
	.reducescatter = rc_op,
	.reduce = rc_op,
	.broadcast = rc_op,
	.gather = rc_op,
	.scatter = rc_op,
	.alltoall = rc_op,
	.group_start = rc_group_start,
	.group_end = rc_group_end,
	.abort = rc_abort,
	.destroy = rc_destroy,
	.errmsg = rc_errmsg,
};

/* A share of n ranks on hosts host[] (copied), listed under id. */
static int rc_make(cgr_ctx *ctx, struct cgr_job *j, cgr_worker *const *members,
		   const uint32_t *host, size_t n, uint64_t id,
		   struct cgr__rcomm **out)
{
	struct cgr__rcomm *rc = calloc(1, sizeof(*rc));
	int ret;

	if (rc == NULL ||
	    (rc->host = malloc(n * sizeof(*rc->host))) == NULL ||
	    (rc->seq = calloc(n, sizeof(*rc->seq))) == NULL ||
	    (rc->sent = calloc(n * n, sizeof(*rc->sent))) == NULL ||
	    (rc->rcvd = calloc(n * n, sizeof(*rc->rcvd))) == NULL ||
	    (rc->msg = calloc(n, sizeof(*rc->msg))) == NULL ||
	    (rc->groups = calloc(n, sizeof(*rc->groups))) == NULL ||
	    (rc->issued = calloc(n, sizeof(*rc->issued))) == NULL ||
	    (rc->ran = calloc(n, sizeof(*rc->ran))) == NULL ||
	    (rc->zout = calloc(n, sizeof(*rc->zout))) == NULL) {
		if (rc != NULL)
			rc_free(rc);
		return -ENOMEM;
	}
	memcpy(rc->host, host, n * sizeof(*host));
	for (size_t r = 0; r < n; r++)
		rc->zout[r].rc = rc;
	rc->j = j;
	rc->head.ops = &rc_ops;
	rc->head.hosts = rc->host;
	if ((ret = cgr__comm_finish(ctx, &rc->head, members, n,
				    CGR_BACKEND_CPU, id)) < 0)
		return ret; /* rc_destroy freed it (not listed yet) */
	pthread_mutex_lock(&j->lock);
	rc->next = j->rcomms;
	j->rcomms = rc;
	if (id > j->rcomm_seen)
		j->rcomm_seen = id;
	pthread_mutex_unlock(&j->lock);
	*out = rc;
	return 0;
}

/* Members' hosts, or why they cannot share a communicator across hosts:
 * 0, 1 (all on this host), -ENOTSUP. */
static int hosts_of(cgr_ctx *ctx, cgr_worker *const *members, size_t n,
		    int backend, uint32_t *host)
{
	struct cgr_job *j = ctx->job;
	bool far = false;

	for (size_t i = 0; i < n; i++) {
		host[i] = members[i]->host;
		far |= host[i] != j->rank;
	}
	if (!far)
		return 1;
	for (size_t i = 0; i < n; i++)
		if (!members[i]->ops->shared && !members[i]->ops->other_host) {
			cgr__err(&ctx->log, "cgr_comm_create: worker %s is a "
					    "%s worker: a communicator across "
					    "hosts has thread workers only",
				 members[i]->name, members[i]->ops->name);
			return -ENOTSUP;
		}
#ifndef HAVE_NCCL
	if (backend == CGR_BACKEND_NCCL) {
		cgr__info(&ctx->log, "nccl: this build has no NCCL backend");
		return -EOPNOTSUPP;
	}
#else
	for (size_t i = 0; backend == CGR_BACKEND_NCCL && i < n; i++)
		if (ctx->worker_device == NULL ||
		    ctx->worker_device(members[i]) < 0) {
			cgr__err(&ctx->log, "cgr_comm_create: NCCL: worker %s "
					    "(rank %zu) owns no CUDA device",
				 members[i]->name, i);
			return -EINVAL;
		}
#endif
	return 0;
}

/* Sends m (and payload) to every host with ranks but this one: 0, or the
 * first failure (no more sent then). */
static int each_member_host(struct cgr_job *j, const uint32_t *host,
			    size_t n, const struct cgr__rmsg *m,
			    const void *payload, size_t len)
{
	int ret = 0;

	for (size_t i = 0; i < n && ret == 0; i++)
		if (first_far(j, host, i))
			ret = cgr__job_send(j, host[i], m, payload, len);
	return ret;
}

/* Which of two failures (0: none) a create reports: the first, but the
 * cause before what it brought about on the other hosts: -ECANCELED (the
 * abort of the agreement's communicators) and -EPIPE (NCCL's remote
 * error: a peer rank aborted). */
static int cause(int ret, int e)
{
	bool after = ret == -ECANCELED || ret == -EPIPE;

	return ret == 0 || (after && e != 0 && e != -ECANCELED && e != -EPIPE) ?
		       e :
		       ret;
}

/* Every such host's COMM_MADE for communicator gid (each failure logged):
 * 0, or the first failure (cause). */
static int await_made(cgr_ctx *ctx, const uint32_t *host, size_t n,
		      uint64_t gid)
{
	struct cgr_job *j = ctx->job;
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		struct cgr__cmsg *r;
		int e;
		if (!first_far(j, host, i))
			continue;
		e = cgr__job_await(j, host[i], CGR__RM_COMM_MADE, gid,
				   CGR_FOREVER, &r);
		if (e == 0) {
			e = r->m.code;
			if (e < 0)
				cgr__err(&ctx->log, "cgr_comm_create: host %s "
						    "(rank %u): %s",
					 host_name(j, host[i]), host[i],
					 r->m.text);
			free(r);
		}
		ret = cause(ret, e);
	}
	return ret;
}

/* ---- NCCL across hosts ------------------------------------------------- */

#ifdef HAVE_NCCL
/*
 * An NCCL communicator whose ranks are on several hosts: the driver makes
 * a unique id (ncclGetUniqueId, its NCCL) and the two CPU communicators
 * across hosts its agreement runs over (records before every launch, as
 * on one host), then sends every host with ranks COMM_NEW with both ids
 * and the NCCL id; each host initialises its ranks from it (one group) and
 * answers COMM_MADE once every rank of every host joined.  Each host's
 * part is the NCCL backend's communicator (comm/nccl_*.c) with the other
 * hosts' ranks elsewhere, listed under the same id for cgr_task_comm.
 * The driver's destroy sends COMM_FREE first, so every host finalizes its
 * ranks at once, then frees the two CPU communicators (their own
 * COMM_FREE, after it on the same link).  A lost host of it fails every
 * part that polls NCCL meanwhile (CGR_EHOSTLOST).
 */
struct nfar {
	struct cgr_job *j;
	cgr_comm *sd, *rd; /* the driver's own; elsewhere its shares */
	uint32_t *host;	   /* per rank */
	size_t n;
	uint64_t id;
	bool driver;
};

static int nfar_lost(void *arg, char *why, size_t len)
{
	struct nfar *nf = arg;
	struct cgr_job *j = nf->j;
	const char *w = "";
	int code = 0;

	for (size_t r = 0; r < nf->n; r++)
		if (nf->host[r] != j->rank &&
		    cgr__job_lost(j, nf->host[r], &w)) {
			/* (w names the host.) */
			snprintf(why, len, "%s", w != NULL ? w : "a host lost");
			return CGR_EHOSTLOST;
		}
	/* The agreement's communicators: aborted by a host whose ranks
	 * failed to initialise (nfar_part), or failed since. */
	pthread_mutex_lock(&j->lock);
	for (int k = 0; k < 2 && code == 0; k++) {
		struct cgr__rcomm *rc = rc_of(k == 0 ? nf->sd : nf->rd);
		if ((code = rc->failed) != 0)
			snprintf(why, len, "its agreement: %s", rc->why);
	}
	pthread_mutex_unlock(&j->lock);
	return code;
}

static void nfar_going(void *arg)
{
	struct nfar *nf = arg;
	struct cgr__rmsg m;

	if (!nf->driver)
		return;
	memset(&m, 0, sizeof(m));
	m.type = CGR__RM_COMM_FREE;
	m.gid = nf->id;
	(void)each_member_host(nf->j, nf->host, nf->n, &m, NULL, 0);
}

static void nfar_gone(void *arg)
{
	struct nfar *nf = arg;

	if (nf->driver) {
		cgr_comm_destroy(nf->sd);
		cgr_comm_destroy(nf->rd);
	}
	free(nf->host);
	free(nf);
}

static struct nfar *nfar_new(struct cgr_job *j, const uint32_t *host,
			     size_t n, uint64_t id)
{
	struct nfar *nf = calloc(1, sizeof(*nf));

	if (nf != NULL && (nf->host = malloc(n * sizeof(*host))) == NULL) {
		free(nf);
		nf = NULL;
	}
	if (nf != NULL) {
		memcpy(nf->host, host, n * sizeof(*host));
		nf->j = j;
		nf->n = n;
		nf->id = id;
	}
	return nf;
}

/* COMM_NEW's payload for an NCCL communicator: the hosts and indices,
 * then this.  The id also goes through PMIx (id_key): the copy here is
 * for launchers whose PMIx server cannot fetch what the driver published
 * after the fence. */
struct nfar_msg {
	uint64_t sd, rd;
	unsigned char id[CGR__NCCL_ID_BYTES];
};

/* Where communicator gid's NCCL id is published (cgr__boot_publish). */
static void id_key(char *k, size_t cap, uint64_t gid)
{
	snprintf(k, cap, "cgr.nccl.%llu", (unsigned long long)gid);
}

/* A host's NCCL id of communicator gid: through PMIx from the driver, or
 * (logged) the copy in its COMM_NEW (fm).  0, or -EPROTO where the two
 * differ. */
static int id_through_pmix(struct cgr_job *j, uint64_t gid,
			   struct nfar_msg *fm)
{
	unsigned char id[CGR__NCCL_ID_BYTES];
	char key[CGR__BOOT_KEY_MAX], why[240] = "";
	int64_t t0 = cgr__now_ns();
	size_t len = 0;
	int ret;

	id_key(key, sizeof(key), gid);
	ret = cgr__boot_get_late(&j->boot, j->driver, key, id, sizeof(id),
				 &len, 5, why, sizeof(why));
	if (ret == 0 && len != sizeof(id))
		ret = -EMSGSIZE;
	if (ret != 0) {
		cgr__info(&j->log, "communicator %llu: its NCCL id not "
				   "through PMIx (%s: %s): the control "
				   "link's copy",
			  (unsigned long long)gid, cgr_strerror(ret), why);
		return 0;
	}
	if (memcmp(id, fm->id, sizeof(id)) != 0) {
		cgr__err(&j->log, "communicator %llu: its NCCL id through "
				  "PMIx is not the driver's",
			 (unsigned long long)gid);
		return -EPROTO;
	}
	cgr__info(&j->log, "communicator %llu: its NCCL id through PMIx "
			   "(%.1f ms)",
		  (unsigned long long)gid,
		  (double)(cgr__now_ns() - t0) / 1e6);
	return 0;
}

/* This host's part (members: NULL elsewhere), listed under nf->id; nf is
 * the part's from here on (freed with it, or here on failure, the
 * driver's sd and rd with it). */
static int nfar_part(cgr_ctx *ctx, cgr_worker *const *members,
		     cgr_worker *const *all, struct nfar *nf, const void *id,
		     cgr_comm **out)
{
	struct cgr__nccl_far far = { nf, nfar_going, nfar_gone, nfar_lost };
	cgr_comm *c;
	int ret;

	ret = cgr__nccl_far_part(ctx, members, (int)nf->n, id, nf->sd, nf->rd,
				 &far, &c);
	if (ret < 0) {
		/* The other hosts' ranks would wait for these in NCCL's
		 * initialisation (up to its deadline): they look at the
		 * agreement's communicators meanwhile (nfar_lost). */
		rc_abort_why(rc_of(nf->sd), "NCCL initialisation failed");
		nfar_gone(nf);
		return ret;
	}
	c->hosts = nf->host;
	if ((ret = cgr__comm_finish(ctx, c, all, nf->n, CGR_BACKEND_NCCL,
				    nf->id)) < 0)
		return ret; /* c destroyed, nf with it */
	*out = c;
	return 0;
}

static int nccl_far_create(cgr_ctx *ctx, cgr_worker *const *members,
			   size_t n, const uint32_t *pl, cgr_comm **out)
{
	struct cgr_job *j = ctx->job;
	size_t len = 2 * n * sizeof(*pl) + sizeof(struct nfar_msg);
	unsigned char *pay = malloc(len);
	cgr_worker **mine = calloc(n, sizeof(*mine));
	struct nfar_msg fm;
	struct nfar *nf = NULL;
	cgr_comm *sd = NULL, *rd = NULL, *c = NULL;
	struct cgr__rmsg m;
	int ret = pay != NULL && mine != NULL ? 0 : -ENOMEM, e;

	if (ret == 0)
		ret = cgr__nccl_far_id(ctx, fm.id);
	if (ret == 0)
		ret = cgr__rcomm_create(ctx, members, n, CGR_BACKEND_CPU, &sd);
	if (ret == 0)
		ret = cgr__rcomm_create(ctx, members, n, CGR_BACKEND_CPU, &rd);
	if (ret == 0 &&
	    (nf = nfar_new(j, pl, n, cgr__comm_new_id(ctx))) == NULL)
		ret = -ENOMEM;
	if (ret != 0) {
		cgr_comm_destroy(sd);
		cgr_comm_destroy(rd);
		free(pay);
		free(mine);
		return ret;
	}
	nf->sd = sd, nf->rd = rd, nf->driver = true;
	fm.sd = cgr_comm_id(sd);
	fm.rd = cgr_comm_id(rd);
	{
		/* Before COMM_NEW: the hosts read it once that is in. */
		char key[CGR__BOOT_KEY_MAX], why[240] = "";
		id_key(key, sizeof(key), nf->id);
		if (cgr__boot_publish(&j->boot, key, fm.id, sizeof(fm.id),
				      why, sizeof(why)) < 0)
			cgr__info(&ctx->log, "cgr_comm_create: the NCCL id "
					     "not published through PMIx "
					     "(%s): the hosts take "
					     "COMM_NEW's copy",
				  why);
	}
	memcpy(pay, pl, 2 * n * sizeof(*pl));
	memcpy(pay + 2 * n * sizeof(*pl), &fm, sizeof(fm));
	memset(&m, 0, sizeof(m));
	m.type = CGR__RM_COMM_NEW;
	m.gid = nf->id;
	m.nranks = (uint32_t)n;
	for (size_t i = 0; i < n; i++)
		mine[i] = pl[i] == j->rank ? members[i] : NULL;
	/* Every host initialises its ranks meanwhile (NCCL's init waits
	 * for all of them). */
	ret = each_member_host(j, pl, n, &m, pay, len);
	if (ret != 0) {
		/* (Hosts it reached give up on their own: NCCL's init.) */
		nfar_gone(nf);
	} else {
		ret = nfar_part(ctx, mine, members, nf, fm.id, &c);
		e = await_made(ctx, pl, n, m.gid);
		ret = cause(ret, e);
	}
	free(pay);
	free(mine);
	if (ret != 0) {
		cgr_comm_destroy(c);
		return ret;
	}
	*out = c;
	return 0;
}

/* A host's part of the driver's NCCL communicator (COMM_NEW cm). */
static int nccl_far_serve(struct cgr_job *j, cgr_ctx *ctx,
			  const struct cgr__cmsg *cm, cgr_worker *const *members)
{
	size_t n = cm->m.nranks;
	const uint32_t *host = (const uint32_t *)(const void *)cm->payload;
	struct nfar_msg fm;
	struct nfar *nf;
	cgr_comm *c;

	memcpy(&fm, cm->payload + 2 * n * sizeof(*host), sizeof(fm));
	if (id_through_pmix(j, cm->m.gid, &fm) != 0)
		return -EPROTO;
	if ((nf = nfar_new(j, host, n, cm->m.gid)) == NULL)
		return -ENOMEM;
	nf->sd = cgr__comm_find(ctx, fm.sd);
	nf->rd = cgr__comm_find(ctx, fm.rd);
	if (nf->sd == NULL || nf->rd == NULL) {
		nfar_gone(nf);
		return -EPROTO;
	}
	return nfar_part(ctx, members, members, nf, fm.id, &c);
}
#endif

int cgr__rcomm_create(cgr_ctx *ctx, cgr_worker *const *members, size_t n,
		      int backend, cgr_comm **out)
{
	struct cgr_job *j = ctx->job;
	uint32_t *pl = j != NULL ? malloc(2 * n * sizeof(*pl)) : NULL;
	struct cgr__rcomm *rc = NULL;
	struct cgr__rmsg m;
	int ret;

	if (j == NULL)
		return 1;
	if (pl == NULL)
		return -ENOMEM;
	ret = hosts_of(ctx, members, n, backend, pl);
	for (size_t i = 0; i < n; i++)
		pl[n + i] = members[i]->index;
#ifdef HAVE_NCCL
	if (ret == 0 && backend == CGR_BACKEND_NCCL) {
		ret = nccl_far_create(ctx, members, n, pl, out);
		free(pl);
		return ret;
	}
#endif
	if (ret == 0)
		ret = rc_make(ctx, j, members, pl, n, cgr__comm_new_id(ctx),
			      &rc);
	if (ret != 0) {
		free(pl);
		return ret;
	}
	rc->driver = true;
	memset(&m, 0, sizeof(m));
	m.type = CGR__RM_COMM_NEW;
	m.gid = rc->head.id;
	m.nranks = (uint32_t)n;
	/* Every host with members makes its share; then each says how. */
	ret = each_member_host(j, pl, n, &m, pl, 2 * n * sizeof(*pl));
	if (ret == 0)
		ret = await_made(ctx, pl, n, m.gid);
	free(pl);
	if (ret != 0) {
		cgr_comm_destroy(&rc->head);
		return ret;
	}
	*out = &rc->head;
	return 0;
}

/* ---- a serving host's side, and the link's ------------------------------- */

int cgr__rcomm_serve_new(struct cgr_job *j, cgr_ctx *ctx,
			 const struct cgr__cmsg *cm, cgr_worker *const *local,
			 unsigned nlocal)
{
	size_t n = cm->m.nranks;
	const uint32_t *host = (const uint32_t *)(const void *)cm->payload;
	const uint32_t *index = host + n;
	struct cgr__rcomm *rc;
	cgr_worker **members;
	int ret = 0;

	bool nccl = false;

	if (ctx == NULL || n == 0 || n > CGR_MAX_RANKS || cm->m.gid == 0)
		return -EPROTO;
#ifdef HAVE_NCCL
	nccl = cm->m.payload ==
	       2 * n * sizeof(uint32_t) + sizeof(struct nfar_msg);
#endif
	if (cm->m.payload != 2 * n * sizeof(uint32_t) && !nccl)
		return -EPROTO;
	if (cgr__comm_find(ctx, cm->m.gid) != NULL)
		return -EEXIST;
	if ((members = calloc(n, sizeof(*members))) == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n && ret == 0; i++) {
		if (host[i] >= j->size)
			ret = -EPROTO;
		else if (host[i] != j->rank)
			continue;
		else if (index[i] >= nlocal || local[index[i]] == NULL)
			ret = -ENOENT; /* not a worker of this host */
		else
			members[i] = local[index[i]];
	}
#ifdef HAVE_NCCL
	if (ret == 0 && nccl)
		ret = nccl_far_serve(j, ctx, cm, members);
	else
#endif
	if (ret == 0)
		ret = rc_make(ctx, j, members, host, n, cm->m.gid, &rc);
	free(members);
	return ret;
}

static struct cgr__rcomm *listed(struct cgr_job *j, uint64_t id)
{
	struct cgr__rcomm *rc;

	for (rc = j->rcomms; rc != NULL && rc->head.id != id; rc = rc->next)
		;
	return rc;
}

void cgr__rcomm_in(struct cgr_job *j, struct cgr__cmsg *cm)
{
	struct cgr__rcomm *rc;
	char why[240];

	if (cm->m.type == CGR__RM_COMM_OP)
		atomic_fetch_add_explicit(&j->st_comm_recv, cm->m.payload,
					  memory_order_relaxed);
	pthread_mutex_lock(&j->lock);
	rc = listed(j, cm->m.gid);
	if (cm->m.type == CGR__RM_COMM_ABORT) {
		if (rc != NULL) {
			cm->m.text[sizeof(cm->m.text) - 1] = '\0';
			snprintf(why, sizeof(why), "%.120s on host %.64s (rank %u)",
				 cm->m.text[0] != '\0' ? cm->m.text :
							  "communicator aborted",
				 host_name(j, cm->from), cm->from);
			fail_locked(rc, -ECANCELED, why);
		}
		free(cm);
	} else if (rc == NULL && cm->m.gid <= j->rcomm_seen) {
		/* Of a communicator this host freed: late (one lent, of
		 * a share an operation still holds: counted off, as
		 * box_drop does). */
		atomic_fetch_add_explicit(&j->st_late, 1,
					  memory_order_relaxed);
		if (cm->ext_n != NULL && --*cm->ext_n == 0)
			pthread_cond_broadcast(&j->cond);
		free(cm);
	} else {
		/* (Of one this host does not have yet: kept.) */
		cm->next = j->box;
		j->box = cm;
		pthread_cond_broadcast(&j->cond);
	}
	pthread_mutex_unlock(&j->lock);
}

void cgr__rcomm_box_free(struct cgr_job *j)
{
	while (j->box != NULL) {
		struct cgr__cmsg *cm = j->box;
		j->box = cm->next;
		free(cm);
	}
}
