/*
 * remote/link.c: the job (cgr_job_*) and its link thread (remote.h).
 *
 * Joining: PMIx gives the rank, the job's size and each rank's host; each
 * rank opens a UCX worker over host transports and publishes its address
 * (and the driver the job's epoch) and host name; after the fence each
 * keeps every rank's address, and makes an endpoint to one only when it
 * first sends it something (cgr__job_ep): a rank talks only to the peers
 * its graphs need, and every serving rank to its driver (heartbeats both
 * ways: a serving rank learns that its driver is lost, workers there or
 * not).  Without a PMIx launcher the job is
 * this process alone.
 *
 * The link thread then owns the UCX worker: each round it progresses it
 * (handlers run: control messages to the inbox, values into slots),
 * posts queued control messages, pumps the graphs' outgoing channels
 * (bridge.c), and every tick sends heartbeats to peers it sent nothing to
 * for heartbeat_ns and declares lost those it heard nothing from for
 * deadline_ns.  Idle, it spins (adaptive mode) then arms the UCX worker
 * and parks on its reactor: its doorbell (rung by whoever queues for it,
 * and by the writers of channels to other hosts), the worker's event fd,
 * the next tick.
 *
 * Threads: the link thread; any thread queues and awaits under j->lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/random.h>
#include <unistd.h>

#include "remote/remote.h"

struct cgr__omsg {
	struct cgr__omsg *next;
	uint32_t to;
	size_t len;
	/* Sent from the caller's memory (cgr__job_sendz): data, dlen bytes
	 * after buf's len; done(arg, status) once UCX is done with it. */
	const void *data;
	size_t dlen;
	cgr__ucx_done_fn done;
	void *arg;
	unsigned char buf[]; /* struct cgr__rmsg, then its payload */
};

/* ---- messages --------------------------------------------------------- */

void cgr__lhdr_init(const struct cgr_job *j, struct cgr__lhdr *h, int type,
		    uint32_t to)
{
	memset(h, 0, sizeof(*h));
	h->magic = CGR__LINK_MAGIC;
	h->version = CGR__LINK_VERSION;
	h->type = (uint16_t)type;
	h->from = j->rank;
	h->epoch = j->epoch;
	h->ack = j->peers[to].nrecv;
}

/* The link thread: an endpoint to `to` (remote.h). */
int cgr__job_ep(struct cgr_job *j, uint32_t to)
{
	struct cgr__rpeer *pe = &j->peers[to];
	char why[200] = "";
	int ret;

	if (pe->connected)
		return 0;
	ret = cgr__ucx_connect(j->ucx, to, pe->addr, pe->addr_len, why,
			       sizeof(why));
	if (ret < 0) {
		/* The caller declares it lost (it may hold j->lock). */
		cgr__err(&j->log, "no endpoint to rank %u: %s", to, why);
		return ret;
	}
	pe->connected = true;
	return 0;
}

/* Link thread: m went to peer `to` (or failed: lost). */
static void sent_to(struct cgr_job *j, uint32_t to, int ret)
{
	struct cgr__rpeer *pe = &j->peers[to];

	if (ret < 0) {
		char why[200];
		snprintf(why, sizeof(why), "sending to it failed: %s",
			 cgr_strerror(ret));
		cgr__job_lose(j, to, why);
		return;
	}
	pe->sent = cgr__now_ns();
	pe->nsent++;
	if (!pe->engaged) {
		pe->engaged = true;
		pe->heard = pe->sent;
	}
}

static void free_done(void *arg, int status)
{
	(void)status;
	free(arg);
}

/* A message sent from its sender's memory is out (or failed). */
static void sendz_done(void *arg, int status)
{
	struct cgr__omsg *o = arg;

	o->done(o->arg, status);
	free(o);
}

/* Posts o: the message's header and buf, then its data: from buf
 * (copied there), or straight from the sender's memory, buf then riding
 * in the AM header (lhdr.chan: its bytes). */
static int post_out(struct cgr_job *j, struct cgr__omsg *o)
{
	unsigned char hb[CGR__UCX_HDR_MAX];
	struct cgr__lhdr h;
	int ret;

	cgr__lhdr_init(j, &h, CGR__LM_CTRL, o->to);
	if ((ret = cgr__job_ep(j, o->to)) != 0)
		return ret;
	if (o->done == NULL)
		return cgr__ucx_post(j->ucx, o->to, &h, sizeof(h), o->buf,
				     o->len, free_done, o);
	h.chan = (uint32_t)o->len;
	memcpy(hb, &h, sizeof(h));
	memcpy(hb + sizeof(h), o->buf, o->len);
	return cgr__ucx_post(j->ucx, o->to, hb, sizeof(h) + o->len, o->data,
			     o->dlen, sendz_done, o);
}

/* o leaves without UCX (sent at once, failed, or its peer is lost). */
static void out_end(struct cgr__omsg *o, int status)
{
	if (o->done != NULL)
		o->done(o->arg, status);
	free(o);
}

/* Link thread: posts what was queued. */
static bool flush_out(struct cgr_job *j)
{
	struct cgr__omsg *o;
	bool did = false;

	for (;;) {
		uint32_t to;
		int ret;
		pthread_mutex_lock(&j->lock);
		if ((o = j->out_head) != NULL) {
			j->out_head = o->next;
			if (j->out_head == NULL)
				j->out_tail = &j->out_head;
			atomic_fetch_sub_explicit(&j->nout, 1,
						  memory_order_relaxed);
		}
		pthread_mutex_unlock(&j->lock);
		if (o == NULL)
			return did;
		did = true;
		if (atomic_load_explicit(&j->peers[o->to].lost,
					 memory_order_acquire)) {
			out_end(o, -ECONNRESET);
			continue;
		}
		to = o->to;
		ret = post_out(j, o);
		if (ret != 1) /* sent (or failed): UCX is done with it */
			out_end(o, ret < 0 ? ret : 0);
		sent_to(j, to, ret < 0 ? ret : 0);
		atomic_fetch_add_explicit(&j->st_ctrl, 1,
					  memory_order_relaxed);
	}
}

int cgr__job_send(struct cgr_job *j, uint32_t to, const struct cgr__rmsg *m,
		  const void *payload, size_t len)
{
	struct iovec v = { (void *)(uintptr_t)payload, len };

	return cgr__job_sendv(j, to, m, &v, 1);
}

/* m and v (copied), then data (dlen bytes, not copied: see
 * cgr__job_sendz) to `to`'s queue. */
static int queue_out(struct cgr_job *j, uint32_t to, const struct cgr__rmsg *m,
		     const struct iovec *v, int nv, const void *data,
		     size_t dlen, cgr__ucx_done_fn done, void *arg)
{
	struct cgr__omsg *o;
	size_t len = 0, at = sizeof(*m);

	for (int i = 0; i < nv; i++)
		len += v[i].iov_len;
	if (to >= j->size || to == j->rank ||
	    len + dlen > CGR__RMSG_MAX_PAYLOAD)
		return -EINVAL;
	if (cgr__job_lost(j, to, NULL))
		return CGR_EHOSTLOST;
	o = malloc(sizeof(*o) + sizeof(*m) + len);
	if (o == NULL)
		return -ENOMEM;
	o->next = NULL;
	o->to = to;
	o->len = sizeof(*m) + len;
	o->data = data;
	o->dlen = dlen;
	o->done = done;
	o->arg = arg;
	memcpy(o->buf, m, sizeof(*m));
	((struct cgr__rmsg *)(void *)o->buf)->payload = len + dlen;
	for (int i = 0; i < nv; i++) {
		if (v[i].iov_len)
			memcpy(o->buf + at, v[i].iov_base, v[i].iov_len);
		at += v[i].iov_len;
	}
	pthread_mutex_lock(&j->lock);
	*j->out_tail = o;
	j->out_tail = &o->next;
	atomic_fetch_add_explicit(&j->nout, 1, memory_order_relaxed);
	pthread_mutex_unlock(&j->lock);
	cgr__job_kick(j);
	return 0;
}

int cgr__job_sendv(struct cgr_job *j, uint32_t to, const struct cgr__rmsg *m,
		   const struct iovec *v, int nv)
{
	return queue_out(j, to, m, v, nv, NULL, 0, NULL, NULL);
}

size_t cgr__job_sendz_room(const struct cgr_job *j)
{
	size_t max = cgr__ucx_max_hdr(j->ucx), h = sizeof(struct cgr__lhdr) +
						   sizeof(struct cgr__rmsg);

	return max > h ? max - h : 0;
}

int cgr__job_sendz(struct cgr_job *j, uint32_t to, const struct cgr__rmsg *m,
		   const struct iovec *v, int nv, const void *data, size_t len,
		   cgr__ucx_done_fn done, void *arg)
{
	size_t pre = 0;

	for (int i = 0; i < nv; i++)
		pre += v[i].iov_len;
	if (done == NULL || pre > cgr__job_sendz_room(j))
		return -EINVAL;
	return queue_out(j, to, m, v, nv, data, len, done, arg);
}

/* A control message that is in (link thread): to the inbox. */
static void inbox_put(struct cgr_job *j, struct cgr__cmsg *cm)
{
	if (cm->m.type == CGR__RM_COMM_OP || cm->m.type == CGR__RM_COMM_ABORT) {
		cgr__rcomm_in(j, cm); /* not for cgr__job_await */
		return;
	}
	cm->next = NULL;
	pthread_mutex_lock(&j->lock);
	*j->in_tail = cm;
	j->in_tail = &cm->next;
	pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
}

/* Whether the payload the message announces is the one that came. */
static bool ctrl_ok(const struct cgr__cmsg *cm)
{
	return cm->m.payload == cm->len - sizeof(cm->m);
}

static void ctrl_fetched(void *arg, int status)
{
	struct cgr__cmsg *cm = arg;
	struct cgr_job *j = (struct cgr_job *)(void *)cm->next;
	struct cgr__claim *cl = cm->claim;
	void *dst = (void *)(uintptr_t)cm->ext;

	cm->claim = NULL;
	cm->ext = NULL;
	if (status < 0 || !ctrl_ok(cm)) {
		free(cm);
	} else {
		if (cl != NULL)
			cgr__rcomm_claim_lend(j, cl, cm, dst);
		inbox_put(j, cm);
	}
	/* (After: its operation waits for this before it lets go.) */
	if (cl != NULL)
		cgr__rcomm_claim_done(j, cl);
}

/* A control message arrives (link thread). */
static void ctrl_in(struct cgr_job *j, const struct cgr__lhdr *h,
		    const struct cgr__ucx_msg *m)
{
	/* pre: the message's first bytes, in the AM header (sendz). */
	size_t pre = h->chan, len = pre + m->len;
	const unsigned char *hm = (const unsigned char *)m->hdr + sizeof(*h);
	struct cgr__claim *cl = NULL;
	unsigned char *dst = NULL;
	struct cgr__cmsg *cm;

	if ((pre != 0 && (pre < sizeof(struct cgr__rmsg) ||
			  m->hlen != sizeof(*h) + pre)) ||
	    len < sizeof(struct cgr__rmsg) ||
	    len > sizeof(struct cgr__rmsg) + CGR__RMSG_MAX_PAYLOAD) {
		cm = NULL;
	} else {
		/* A communicator's data may go straight where its
		 * operation wants it (then the message keeps the rest). */
		if (pre > sizeof(struct cgr__rmsg) && m->len != 0) {
			struct cgr__rmsg rm;
			memcpy(&rm, hm, sizeof(rm));
			if (rm.type == CGR__RM_COMM_OP)
				dst = cgr__rcomm_claim(j, &rm, m->len, &cl);
		}
		cm = malloc(sizeof(*cm) + (dst != NULL ? pre : len) -
			    sizeof(cm->m));
	}
	if (cm == NULL) {
		if (m->rndv != NULL)
			cgr__ucx_drop_data(j->ucx, m->rndv);
		if (cl != NULL)
			cgr__rcomm_claim_done(j, cl);
		atomic_fetch_add_explicit(&j->st_late, 1,
					  memory_order_relaxed);
		return;
	}
	cm->from = h->from;
	cm->len = len;
	cm->claimed = dst != NULL;
	cm->claim = cl;
	cm->ext = dst; /* (until it is in: where it goes, if claimed) */
	cm->ext_n = NULL;
	cm->users = 0;
	memcpy(&cm->m, hm, pre);
	if (dst == NULL)
		dst = (unsigned char *)&cm->m + pre;
	/* Until it is in, next carries the job (ctrl_fetched). */
	cm->next = (void *)j;
	if (m->rndv == NULL) {
		if (m->len != 0)
			memcpy(dst, m->data, m->len);
		ctrl_fetched(cm, 0);
		return;
	}
	switch (cgr__ucx_fetch(j->ucx, m->rndv, dst, m->len, ctrl_fetched,
			       cm)) {
	case 0:
		ctrl_fetched(cm, 0);
		break;
	case 1:
		break;
	default:
		ctrl_fetched(cm, -ENOMEM);
	}
}


/* Every message's handler (link thread, from progress). */
static void on_msg(void *arg, const struct cgr__ucx_msg *m)
{
	struct cgr_job *j = arg;
	struct cgr__lhdr h;
	struct cgr__rpeer *pe;

	if (m->hlen < sizeof(h)) {
		if (m->rndv != NULL)
			cgr__ucx_drop_data(j->ucx, m->rndv);
		atomic_fetch_add_explicit(&j->st_late, 1,
					  memory_order_relaxed);
		return;
	}
	memcpy(&h, m->hdr, sizeof(h));
	if (h.magic != CGR__LINK_MAGIC || h.version != CGR__LINK_VERSION ||
	    h.epoch != j->epoch || h.from >= j->size || h.from == j->rank) {
		if (m->rndv != NULL)
			cgr__ucx_drop_data(j->ucx, m->rndv);
		atomic_fetch_add_explicit(&j->st_late, 1,
					  memory_order_relaxed);
		return;
	}
	pe = &j->peers[h.from];
	pe->heard = cgr__now_ns();
	pe->nrecv++;
	pe->acked = h.ack;
	if (!pe->engaged) {
		pe->engaged = true;
		pe->sent = pe->heard;
	}
	switch (h.type) {
	case CGR__LM_HEARTBEAT:
		break;
	case CGR__LM_CTRL:
		ctrl_in(j, &h, m);
		break;
	default:
		cgr__bridge_in(j, &h, m);
	}
}

/* ---- losses ------------------------------------------------------------ */

bool cgr__job_lost(struct cgr_job *j, uint32_t rank, const char **why)
{
	if (rank >= j->size)
		return true;
	/* L1: pairs with cgr__job_lose's release. */
	if (!atomic_load_explicit(&j->peers[rank].lost, memory_order_acquire))
		return false;
	if (why != NULL)
		*why = j->peers[rank].why;
	return true;
}

void cgr__job_lose(struct cgr_job *j, uint32_t rank, const char *why)
{
	struct cgr__rpeer *pe;

	if (rank >= j->size || rank == j->rank)
		return;
	pe = &j->peers[rank];
	pthread_mutex_lock(&j->lock);
	if (!atomic_load_explicit(&pe->lost, memory_order_relaxed)) {
		snprintf(pe->why, sizeof(pe->why), "host %s (rank %u) lost: %s",
			 pe->host[0] ? pe->host : "?", rank, why);
		/* L1: why, then lost. */
		atomic_store_explicit(&pe->lost, 1, memory_order_release);
		atomic_fetch_add_explicit(&j->st_lost, 1,
					  memory_order_relaxed);
		cgr__log(&j->log,
			 atomic_load(&j->ending) ? CGR_LOG_INFO : CGR_LOG_ERROR,
			 "%s", pe->why);
		cgr__bridge_lost(j, rank, pe->why);
		pthread_cond_broadcast(&j->cond);
	}
	pthread_mutex_unlock(&j->lock);
	cgr__job_kick(j);
}

/* UCX saw a peer's endpoint fail (link thread, from progress). */
static void on_lost(void *arg, uint32_t peer, const char *why)
{
	char buf[200];

	snprintf(buf, sizeof(buf), "its process ended or its endpoint "
				   "failed (UCX: %s)",
		 why);
	cgr__job_lose(arg, peer, buf);
}

/* Link thread: heartbeats and deadlines. */
static void tick(struct cgr_job *j, int64_t now)
{
	for (uint32_t i = 0; i < j->size; i++) {
		struct cgr__rpeer *pe = &j->peers[i];
		struct cgr__lhdr h;
		if (i == j->rank || !pe->engaged ||
		    atomic_load_explicit(&pe->lost, memory_order_relaxed))
			continue;
		if (now - pe->heard > j->deadline_ns) {
			char why[160];
			snprintf(why, sizeof(why),
				 "nothing heard from it for %.1f s (the "
				 "deadline is %.1f s)",
				 (double)(now - pe->heard) / 1e9,
				 (double)j->deadline_ns / 1e9);
			cgr__job_lose(j, i, why);
			continue;
		}
		if (now - pe->sent < j->heartbeat_ns)
			continue;
		cgr__lhdr_init(j, &h, CGR__LM_HEARTBEAT, i);
		sent_to(j, i,
			cgr__job_ep(j, i) < 0 ||
					cgr__ucx_post(j->ucx, i, &h, sizeof(h),
						      NULL, 0, NULL, NULL) < 0 ?
				-ECONNRESET :
				0);
		atomic_fetch_add_explicit(&j->st_heartbeats, 1,
					  memory_order_relaxed);
	}
}

/* Link thread: endpoints of lost peers closed by force (once). */
static void close_lost(struct cgr_job *j, bool *closed)
{
	for (uint32_t i = 0; i < j->size; i++)
		if (!closed[i] && i != j->rank && j->peers[i].connected &&
		    cgr__job_lost(j, i, NULL)) {
			closed[i] = true;
			cgr__ucx_peer_close(j->ucx, i, j->peers[i].why);
		}
}

/* ---- the link thread --------------------------------------------------- */

static void efd_watch_fired(void *arg)
{
	struct cgr_job *j = arg;

	j->efd_fired = true;
	j->watching = false;
}

/*
 * Who moves the link.  The UCX worker is used by one thread at a time:
 * whoever holds j->busy.  A thread that writes a value for another host
 * (a worker's WRITE, the driver's cgr_execute), or waits for one (a
 * worker's READ, the driver's cgr_ref_get), does a round of the link's
 * work itself when it can take the worker (cgr__job_poll): no hand-off to
 * the link thread on the hot path, and no wake-up of it: a channel to
 * another host rings a doorbell nobody sleeps on (j->quiet).  A round
 * that cannot take the worker is left to its holder, which looks again
 * after giving it back (B2): one of the two sees the other's work.  While
 * such threads spin and poll (j->hot: one did within HOT_NS), the link
 * thread naps on its doorbell and a timer (HOT_NS) only, so that a
 * message that arrives does not wake it too (on a machine with few cores
 * a wake-up takes a core from a spinning thread); else it sleeps on the
 * UCX worker's event fd (armed), its doorbell (control messages, the end)
 * and its next tick.  A polling thread that parks (its wait's park phase:
 * cgr__reactor_phase) clears j->hot and rings the link thread, which
 * then watches the event fd: a parked host still hears at once.
 */
#define HOT_NS 1000000

/* The UCX worker, if nobody has it. */
static bool take(struct cgr_job *j)
{
	uint32_t none = 0;

	/* B1: pairs with give's release: what the last holder did to the
	 * UCX worker is seen.  (A seq_cst RMW: B2's fence on this side.) */
	return atomic_load_explicit(&j->busy, memory_order_relaxed) == 0 &&
	       atomic_compare_exchange_strong(&j->busy, &none, 1);
}

static void give(struct cgr_job *j)
{
	/* B1. */
	atomic_store_explicit(&j->busy, 0, memory_order_release);
}

/* Whether there is work for a round: queued control messages, values
 * or admissions to send. */
static bool pending(struct cgr_job *j)
{
	return atomic_load_explicit(&j->nout, memory_order_relaxed) != 0 ||
	       cgr__bridge_ready(j);
}

/* One round of the link's work, holding the UCX worker: progress, the
 * queued control messages, the graphs' outgoing channels. */
static bool round_(struct cgr_job *j)
{
	bool did = cgr__ucx_progress(j->ucx) > 0;

	if (atomic_load_explicit(&j->nout, memory_order_relaxed) != 0)
		did |= flush_out(j);
	pthread_mutex_lock(&j->lock);
	did |= cgr__bridge_pump(j);
	pthread_mutex_unlock(&j->lock);
	return did;
}

/* Gives the worker back; true if work came meanwhile (take it again). */
static bool give_check(struct cgr_job *j)
{
	give(j);
	/* B2: the release of busy, then a look at the queues; pairs with
	 * the writer's queue, then its take (a seq_cst RMW). */
	atomic_thread_fence(memory_order_seq_cst);
	return pending(j);
}

/*
 * A thread that parks (a worker's reactor on io_uring) watches the UCX
 * worker's event fd itself, so that a message for it wakes it and not
 * the link thread first (one wake-up per hop instead of two).  One such
 * thread at a time (j->efd_token, held for its park); the link thread
 * sleeps meanwhile, at most HOT_NS at a time (a thread that leaves its
 * park may not poll again soon: then the link thread watches again).
 */
static _Thread_local struct {
	struct cgr__reactor *r;
	bool watching; /* a watch of the event fd is in r, until it fires */
	bool holding;  /* this thread holds j->efd_token for its park */
	uint64_t id;
} efd_tls;

static void tls_fired(void *arg)
{
	(void)arg;
	efd_tls.watching = false;
}

static void token_release(struct cgr_job *j)
{
	efd_tls.holding = false;
	/* E1: after this thread's last use of the UCX worker (busy). */
	atomic_store_explicit(&j->efd_token, 0, memory_order_release);
}

/* The park ended: likely polling again soon (else the link thread
 * watches within HOT_NS). */
static void unparked(void *arg)
{
	struct cgr_job *j = arg;

	atomic_store_explicit(&j->hot, cgr__now_ns(), memory_order_relaxed);
	token_release(j);
}

/* Parking: watch the event fd (1), or leave it to the link thread (0;
 * -1: at once, it has transfers to drive). */
static int park_watch(struct cgr_job *j)
{
	struct cgr__reactor *r = cgr__reactor_parking();
	int efd = cgr__ucx_efd(j->ucx);
	uint32_t none = 0;
	int ret = 0;

	if (r == NULL || !r->uring || efd < 0)
		return 0;
	if (!efd_tls.holding) {
		if (atomic_load_explicit(&j->efd_token, memory_order_relaxed) !=
			    0 ||
		    !atomic_compare_exchange_strong(&j->efd_token, &none, 1))
			return 0;
		efd_tls.holding = true;
	}
	if (efd_tls.r != r) {
		efd_tls.r = r;
		efd_tls.watching = false;
	}
	if (!take(j))
		goto out; /* its holder is at work: let the link thread be */
	if (cgr__ucx_inflight(j->ucx) != 0) {
		/* Transfers in flight (a rendezvous): each step is an event;
		 * the link thread, which spins between them, drives them. */
		give(j);
		ret = -1;
		goto out;
	}
	if (cgr__ucx_arm(j->ucx) != 0 ||
	    (!efd_tls.watching &&
	     cgr__reactor_watch_add(r, efd, tls_fired, NULL, &efd_tls.id) !=
		     0)) {
		give(j);
		goto out;
	}
	efd_tls.watching = true;
	if (give_check(j))
		goto out; /* work came: poll again first */
	cgr__reactor_on_unpark(unparked, j);
	return 1;
out:
	cgr__reactor_on_unpark(NULL, NULL);
	token_release(j);
	return ret;
}

bool cgr__job_poll(struct cgr_job *j)
{
	bool did = false;
	int phase;

	if (j == NULL || j->ucx == NULL)
		return false;
	phase = cgr__reactor_phase();
	if (phase == CGR__PHASE_SPIN)
		atomic_store_explicit(&j->hot, cgr__now_ns(),
				      memory_order_relaxed);
	/* B2: what this thread queued, before it looks at busy. */
	atomic_thread_fence(memory_order_seq_cst);
	do {
		if (!take(j))
			break; /* the holder looks after giving it back */
		did |= round_(j);
	} while (give_check(j));
	if (phase == CGR__PHASE_PARK && !did) {
		int w = park_watch(j);
		bool was_hot =
			w <= 0 &&
			atomic_load_explicit(&j->hot, memory_order_relaxed) !=
				0 &&
			atomic_exchange_explicit(&j->hot, 0,
						 memory_order_relaxed) != 0;
		if (w < 0 || was_hot) {
			/* The link thread watches the event fd now. */
			atomic_store_explicit(&j->handed, 1,
					      memory_order_relaxed);
			cgr__bell_ring_force(&j->bell);
		}
	}
	return did;
}

void cgr__job_park(struct cgr_job *j)
{
	atomic_store_explicit(&j->hot, 0, memory_order_relaxed);
	atomic_store_explicit(&j->handed, 1, memory_order_relaxed);
	cgr__bell_ring_force(&j->bell);
}

bool cgr__job_xpoll(void *job)
{
	return cgr__job_poll(job);
}

static bool link_ready(void *arg)
{
	struct cgr_job *j = arg;

	return j->efd_fired ||
	       atomic_load_explicit(&j->handed, memory_order_relaxed) ||
	       atomic_load_explicit(&j->quit, memory_order_acquire) ||
	       atomic_load_explicit(&j->nout, memory_order_relaxed) != 0;
}

/* Idle, holding the UCX worker: sleeps until the next tick at most.
 * Hot (threads poll the link themselves): on a timer, HOT_NS at most.
 * Else armed on the event fd (false if events are pending: go on). */
static bool link_park(struct cgr_job *j, struct cgr__reactor *r,
		      int64_t until)
{
	int64_t now = cgr__now_ns();
	int efd = cgr__ucx_efd(j->ucx);
	int64_t h = atomic_load_explicit(&j->hot, memory_order_relaxed);
	bool hot = h != 0 && now - h < HOT_NS;
	/* A parked thread watches the event fd (park_watch): as if hot. */
	bool held = atomic_load_explicit(&j->efd_token, memory_order_acquire);

	if (held && !hot) {
		hot = true;
		h = now;
	}
	if (hot && j->watching &&
	    cgr__reactor_watch_cancel(r, j->watch_id) == 0)
		j->watching = false;

	if (!hot && efd >= 0 && cgr__ucx_arm(j->ucx) == -EAGAIN) {
		give(j);
		return false;
	}
	if (give_check(j))
		return false;
	j->efd_fired = false;
	if (hot || efd < 0) {
		if (until > (efd < 0 ? now : h) + HOT_NS)
			until = (efd < 0 ? now : h) + HOT_NS;
	} else if (!j->watching &&
		   cgr__reactor_watch_add(r, efd, efd_watch_fired, j,
					  &j->watch_id) ==
			   0) {
		j->watching = true;
	}
	(void)cgr__reactor_wait(r, &j->bell, link_ready, j, NULL,
				CGR_WAIT_BLOCK, 0, until);
	return true;
}

/* Link thread, at its start: a serving rank watches its driver, workers
 * here or not: a heartbeat at the first tick (the driver, hearing it,
 * watches this rank too), the deadline from now. */
static void watch_driver(struct cgr_job *j)
{
	struct cgr__rpeer *pe = &j->peers[j->driver];

	if (j->rank == j->driver)
		return;
	pe->engaged = true;
	pe->heard = cgr__now_ns();
	pe->sent = pe->heard - j->heartbeat_ns;
}

static void *link_main(void *arg)
{
	struct cgr_job *j = arg;
	struct cgr__reactor r;
	int64_t tick_ns = j->heartbeat_ns / 2, next = 0, idle = 0, quit_by = 0;
	bool *closed = calloc(j->size, sizeof(*closed));

	pthread_setname_np(pthread_self(), "cgr:link");
	cgr__reactor_init(&r, 0);
	cgr__reactor_set_log(&r, &j->log, NULL);
	/* A loss is seen within deadline + tick: 100 ms for 3 s. */
	if (tick_ns > j->deadline_ns / 30)
		tick_ns = j->deadline_ns / 30;
	watch_driver(j);
	for (;;) {
		int64_t now = cgr__now_ns(), h;
		bool did;
		atomic_store_explicit(&j->handed, 0, memory_order_relaxed);
		if (!take(j)) {
			/* Another thread moves the link.  One that spins and
			 * polls: a nap, until it parks (it rings) or HOT_NS.
			 * Else it does one round and gives the worker back:
			 * the CPU to it, then take the worker again. */
			h = atomic_load_explicit(&j->hot, memory_order_relaxed);
			if (atomic_load(&j->quit) && quit_by == 0)
				quit_by = now + 1000000000;
			else if (quit_by != 0 && now > quit_by)
				break;
			if (h != 0 && now - h < HOT_NS)
				(void)cgr__reactor_wait(&r, &j->bell,
							link_ready, j, NULL,
							CGR_WAIT_BLOCK, 0,
							h + HOT_NS);
			else
				sched_yield();
			continue;
		}
		did = round_(j);
		if (closed != NULL)
			close_lost(j, closed);
		if (now >= next) {
			tick(j, now);
			next = now + tick_ns;
		}
		if (atomic_load_explicit(&j->quit, memory_order_acquire)) {
			bool done = atomic_load(&j->nout) == 0 &&
				    cgr__ucx_inflight(j->ucx) == 0;
			give(j);
			/* What was queued goes first, a second at most. */
			if (quit_by == 0)
				quit_by = now + 1000000000;
			if (done || now > quit_by)
				break;
			continue;
		}
		if (did) {
			give(j);
			idle = 0;
			continue;
		}
		/* Nothing to do: spin (its mode) while no other thread
		 * does, else sleep (link_park). */
		h = atomic_load_explicit(&j->hot, memory_order_relaxed);
		if (idle == 0)
			idle = now;
		if ((h == 0 || now - h >= HOT_NS) &&
		    !atomic_load_explicit(&j->efd_token,
					  memory_order_relaxed) &&
		    (j->wait_mode == CGR_WAIT_BUSY ||
		     (j->wait_mode == CGR_WAIT_ADAPTIVE &&
		      now - idle < j->spin_ns))) {
			give(j);
			continue;
		}
		if (link_park(j, &r, next))
			idle = 0;
	}
	cgr__reactor_fini(&r);
	free(closed);
	return NULL;
}

/* ---- joining and leaving ----------------------------------------------- */

static int job_params(const cgr_job_params *p, cgr_job_params *out)
{
	cgr_job_params d;

	/* As every parameter struct: a smaller (older) one is read as far
	 * as it goes, a larger one's tail is ignored. */
	if (p != NULL && p->size < sizeof(size_t))
		return -EINVAL;
	CGR__PARAMS_COPY(d, p, (cgr_job_params)CGR_JOB_PARAMS_INIT);
	if (d.driver < 0 || d.deadline_ns < 0 || d.heartbeat_ns < 0 ||
	    d.fence_timeout_s < 0 || d.spin_ns < 0 ||
	    (d.wait_mode != CGR_WAIT_ADAPTIVE && d.wait_mode != CGR_WAIT_BUSY &&
	     d.wait_mode != CGR_WAIT_BLOCK))
		return -EINVAL;
	if (d.deadline_ns == 0)
		d.deadline_ns = 3000000000ll;
	if (d.heartbeat_ns == 0)
		d.heartbeat_ns = d.deadline_ns / 6;
	/* Room for a late tick on each side and the trip: a peer's
	 * heartbeats must arrive well within the deadline. */
	if (d.heartbeat_ns > d.deadline_ns / 2)
		return -EINVAL;
	if (d.fence_timeout_s == 0)
		d.fence_timeout_s = 60;
	if (d.spin_ns == 0)
		d.spin_ns = 50000;
	*out = d;
	return 0;
}

/* The job's ranks meet: addresses (and the driver's epoch) exchanged,
 * endpoints made, hosts known.  0 or the error (the log says why). */
static int meet(struct cgr_job *j, int fence_s)
{
	char why[400] = "";
	unsigned char buf[4096];
	const void *addr;
	size_t alen, n;
	int ret;

	if ((ret = cgr__ucx_open(&j->ucx, j->size, why, sizeof(why))) < 0)
		goto out;
	cgr__info(&j->log, "rank %u: %s", j->rank,
		  cgr__ucx_transports(j->ucx));
	cgr__ucx_address(j->ucx, &addr, &alen);
	if ((ret = cgr__boot_put(&j->boot, "cgr.ucx", addr, alen, why,
				 sizeof(why))) < 0)
		goto out;
	if ((ret = cgr__boot_put(&j->boot, "cgr.host", j->peers[j->rank].host,
				 strlen(j->peers[j->rank].host) + 1, why,
				 sizeof(why))) < 0)
		goto out;
	if (j->rank == j->driver &&
	    (ret = cgr__boot_put(&j->boot, "cgr.epoch", &j->epoch,
				 sizeof(j->epoch), why, sizeof(why))) < 0)
		goto out;
	if ((ret = cgr__boot_fence(&j->boot, fence_s, why, sizeof(why))) < 0)
		goto out;
	if (j->rank != j->driver &&
	    ((ret = cgr__boot_get(&j->boot, j->driver, "cgr.epoch", &j->epoch,
				  sizeof(j->epoch), &n, why, sizeof(why))) <
		     0 ||
	     n != sizeof(j->epoch))) {
		if (ret == 0)
			ret = -EPROTO, snprintf(why, sizeof(why),
						"the driver's epoch is garbled");
		goto out;
	}
	for (uint32_t i = 0; i < j->size; i++) {
		struct cgr__rpeer *pe = &j->peers[i];
		/* Its own name for itself, else the launcher's. */
		if (i != j->rank &&
		    (cgr__boot_get(&j->boot, i, "cgr.host", pe->host,
				   sizeof(pe->host), &n, why, sizeof(why)) < 0 ||
		     n == 0 || pe->host[n - 1] != 0) &&
		    cgr__boot_host(&j->boot, i, pe->host, sizeof(pe->host),
				   why, sizeof(why)) < 0)
			pe->host[0] = 0;
		if (i == j->rank)
			continue;
		if ((ret = cgr__boot_get(&j->boot, i, "cgr.ucx", buf,
					 sizeof(buf), &n, why, sizeof(why))) <
		    0)
			goto out;
		/* Kept: the endpoint comes with the first message. */
		if ((pe->addr = malloc(n)) == NULL) {
			ret = -ENOMEM;
			goto out;
		}
		memcpy(pe->addr, buf, n);
		pe->addr_len = n;
	}
out:
	if (ret < 0)
		cgr__err(&j->log, "joining the job (rank %u of %u): %s",
			 j->rank, j->size, why);
	return ret;
}

/* Whether this process is in a job (one at a time: its PMIx keys and
 * its UCX worker's address are the process's). */
static atomic_bool cgr__joined;

/* How long leave waits for PMIx_Finalize once a peer was lost. */
#define FINI_BOUND_NS 250000000

static void unjoined(void)
{
	atomic_store(&cgr__joined, false);
}

static void job_free(struct cgr_job *j)
{
	bool late = false;

	while (j->in_head != NULL) {
		struct cgr__cmsg *cm = j->in_head;
		j->in_head = cm->next;
		free(cm);
	}
	while (j->out_head != NULL) {
		struct cgr__omsg *o = j->out_head;
		j->out_head = o->next;
		out_end(o, -ECONNRESET);
	}
	cgr__rcomm_box_free(j);
	/* Lost peers the link did not close yet: by force, not waited
	 * on. */
	for (uint32_t i = 0; j->ucx != NULL && i < j->size; i++)
		if (i != j->rank && cgr__job_lost(j, i, NULL))
			cgr__ucx_peer_close(j->ucx, i, j->peers[i].why);
	cgr__ucx_close(j->ucx);
	/* After a loss (here, or the driver's: its END says so) the
	 * launcher may be ending the job and never answer PMIx_Finalize
	 * (Open MPI's mpirun without recovery): a bounded wait, then it
	 * goes on alone; this process joins no job again before it
	 * returned (-EBUSY). */
	if (j->booted &&
	    cgr__boot_fini(&j->boot,
			   atomic_load(&j->st_lost) != 0 || j->lost_any ?
				   FINI_BOUND_NS :
				   0,
			   unjoined) != 0)
		late = true;
	pthread_cond_destroy(&j->cond);
	pthread_mutex_destroy(&j->lock);
	for (uint32_t i = 0; j->peers != NULL && i < j->size; i++)
		free(j->peers[i].addr);
	free(j->peers);
	free(j);
	if (!late)
		unjoined();
}

/* The job's lock, condition (on the monotonic clock) and bells. */
static void job_sync_init(struct cgr_job *j)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&j->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&j->cond, &ca);
	pthread_condattr_destroy(&ca);
	cgr__bell_init(&j->bell);
	cgr__bell_init(&j->quiet);
}

int cgr_job_join(const cgr_job_params *p, cgr_job **out)
{
	cgr_job_params d;
	struct cgr_job *j;
	char why[400] = "";
	int ret;

	if (out == NULL || (ret = job_params(p, &d)) < 0)
		return -EINVAL;
	if (atomic_exchange(&cgr__joined, true))
		return -EBUSY;
	if ((j = calloc(1, sizeof(*j))) == NULL) {
		atomic_store(&cgr__joined, false);
		return -ENOMEM;
	}
	j->log = (struct cgr__logger){ d.log_fn, d.log_arg, d.log_level };
	j->deadline_ns = d.deadline_ns;
	j->heartbeat_ns = d.heartbeat_ns;
	j->wait_mode = d.wait_mode;
	j->spin_ns = d.spin_ns;
#ifdef CGR_FAULT_INJECTION
	j->debug_copy = getenv("CGR_TEST_NO_CLAIMS") != NULL;
	if (getenv("CGR_TEST_HIER_CHUNK") != NULL)
		j->debug_hchunk = strtoull(getenv("CGR_TEST_HIER_CHUNK"), NULL,
					   10);
	if (getenv("CGR_TEST_HIER_FAIL") != NULL)
		j->debug_hfail = strtoull(getenv("CGR_TEST_HIER_FAIL"), NULL,
					  10);
#endif
	job_sync_init(j);
	j->in_tail = &j->in_head;
	j->out_tail = &j->out_head;
	j->size = 1;
	ret = cgr__boot_init(&j->boot, why, sizeof(why));
	if (ret == 0) {
		j->booted = true;
		j->rank = j->boot.rank;
		j->size = j->boot.size;
	} else if (ret == -ENOSYS || ret == -ENODEV) {
		/* No launcher (or a build without PMIx): a job of one. */
		cgr__info(&j->log, "a job of one process: %s", why);
		ret = 0;
	} else {
		/* A launcher, and no PMIx to join it through. */
		cgr__err(&j->log, "cannot join the job: %s", why);
	}
	if (ret == 0 && (unsigned)d.driver >= j->size)
		ret = -EINVAL, cgr__err(&j->log,
					"the driver's rank %d is not in the "
					"job (%u ranks)",
					d.driver, j->size);
	j->driver = (uint32_t)d.driver;
	if (ret == 0 &&
	    (j->peers = calloc(j->size, sizeof(*j->peers))) == NULL)
		ret = -ENOMEM;
	if (ret == 0 && gethostname(j->peers[j->rank].host,
				    sizeof(j->peers[j->rank].host) - 1) != 0)
		j->peers[j->rank].host[0] = 0;
	if (ret == 0 && j->size > 1) {
		if (j->rank == j->driver &&
		    getrandom(&j->epoch, sizeof(j->epoch), 0) !=
			    sizeof(j->epoch))
			j->epoch = (uint64_t)cgr__now_ns();
		ret = meet(j, d.fence_timeout_s);
	}
	if (ret == 0 && j->size > 1) {
		cgr__ucx_set_handler(j->ucx, on_msg, on_lost, j);
		if (pthread_create(&j->thread, NULL, link_main, j) != 0)
			ret = -EAGAIN;
		else
			j->started = true;
	}
	if (ret < 0) {
		job_free(j);
		return ret;
	}
	*out = j;
	return 0;
}

int cgr_job_rank(const cgr_job *j)
{
	return j != NULL ? (int)j->rank : -EINVAL;
}

int cgr_job_size(const cgr_job *j)
{
	return j != NULL ? (int)j->size : -EINVAL;
}

int cgr_job_driver(const cgr_job *j)
{
	return j != NULL ? (int)j->driver : -EINVAL;
}

const char *cgr_job_host(const cgr_job *j, int rank)
{
	if (j == NULL || rank < 0 || (unsigned)rank >= j->size)
		return "";
	return j->peers[rank].host;
}

const char *cgr_job_transports(const cgr_job *j)
{
	return j != NULL && j->ucx != NULL ? cgr__ucx_transports(j->ucx) : "";
}

void cgr_job_stats_get(const cgr_job *j, cgr_job_stats *out)
{
	struct cgr_job *m = (struct cgr_job *)j;

	if (out == NULL)
		return;
	memset(out, 0, sizeof(*out));
	if (j == NULL)
		return;
	out->data_sent = atomic_load(&m->st_data_sent);
	out->data_received = atomic_load(&m->st_data_recv);
	out->bytes_sent = atomic_load(&m->st_bytes_sent);
	out->bytes_received = atomic_load(&m->st_bytes_recv);
	out->comm_bytes_sent = atomic_load(&m->st_comm_sent);
	out->comm_bytes_received = atomic_load(&m->st_comm_recv);
	out->comm_bytes_direct = atomic_load(&m->st_comm_direct);
	out->control = atomic_load(&m->st_ctrl);
	out->heartbeats = atomic_load(&m->st_heartbeats);
	out->late = atomic_load(&m->st_late);
	out->lost = atomic_load(&m->st_lost);
}

/* A control message of this type, with code and nothing else, to every
 * other rank. */
static void send_all(struct cgr_job *j, uint32_t type, int32_t code)
{
	struct cgr__rmsg m;

	memset(&m, 0, sizeof(m));
	m.type = type;
	m.code = code;
	for (uint32_t i = 0; i < j->size; i++)
		if (i != j->rank)
			(void)cgr__job_send(j, i, &m, NULL, 0);
}

/* The driver leaves in two steps, so that no rank takes another's exit
 * for a loss: END to every rank, each answers ENDING (from then on a
 * peer's endpoint failing is expected: logged as information), then
 * GONE, and serving ranks return. A rank that does not answer within the
 * deadline is not waited for. */
static void end_all(struct cgr_job *j)
{
	int64_t deadline = cgr__now_ns() + j->deadline_ns;

	/* (Its code: whether the driver lost a rank: see job_free.) */
	send_all(j, CGR__RM_END, atomic_load(&j->st_lost) != 0);
	for (uint32_t i = 0; i < j->size; i++) {
		struct cgr__cmsg *cm;
		int ret = i == j->rank ? 0 :
					 cgr__job_await(j, i, CGR__RM_ENDING,
							0, deadline, &cm);
		if (ret == 0 && i != j->rank)
			free(cm);
		/* Silent that long (stopped, cut off): lost, so that
		 * nothing after waits on it (its endpoint is closed by
		 * force, not gracefully). */
		if (ret == -ETIMEDOUT)
			cgr__job_lose(j, i,
				      "it did not answer the driver's leave "
				      "within the deadline");
	}
	send_all(j, CGR__RM_GONE, 0);
}

void cgr_job_leave(cgr_job *j)
{
	if (j == NULL)
		return;
	atomic_store(&j->ending, 1);
	if (j->rank == j->driver && j->size > 1)
		end_all(j);
	if (j->started) {
		atomic_store_explicit(&j->quit, 1, memory_order_release);
		cgr__bell_ring_force(&j->bell);
		pthread_join(j->thread, NULL);
	}
	job_free(j);
}

/* ---- awaiting control messages ----------------------------------------- */

static bool matches(const struct cgr__cmsg *cm, uint32_t from, uint32_t type,
		    uint64_t gid)
{
	return (from == CGR__RANK_NONE || cm->from == from) &&
	       (type == 0 || cm->m.type == type) &&
	       (gid == 0 || cm->m.gid == gid);
}

int cgr__job_await(struct cgr_job *j, uint32_t from, uint32_t type,
		   uint64_t gid, int64_t deadline, struct cgr__cmsg **out)
{
	int ret = 0;

	pthread_mutex_lock(&j->lock);
	for (;;) {
		struct cgr__cmsg **pp;
		for (pp = &j->in_head; *pp != NULL; pp = &(*pp)->next)
			if (matches(*pp, from, type, gid))
				break;
		if (*pp != NULL) {
			struct cgr__cmsg *cm = *pp;
			*pp = cm->next;
			if (j->in_tail == &cm->next)
				j->in_tail = pp;
			*out = cm;
			break;
		}
		if (from != CGR__RANK_NONE && from < j->size &&
		    atomic_load_explicit(&j->peers[from].lost,
					 memory_order_relaxed)) {
			ret = CGR_EHOSTLOST;
			break;
		}
		if (deadline != CGR_FOREVER && cgr__now_ns() >= deadline) {
			ret = -ETIMEDOUT;
			break;
		}
		if (deadline == CGR_FOREVER) {
			pthread_cond_wait(&j->cond, &j->lock);
		} else {
			/* The condition variable's clock is CLOCK_MONOTONIC
			 * (cgr_job_join). */
			struct timespec ts = { deadline / 1000000000,
					       deadline % 1000000000 };
			pthread_cond_timedwait(&j->cond, &j->lock, &ts);
		}
	}
	pthread_mutex_unlock(&j->lock);
	return ret;
}
