/*
 * remote/bridge.c: a graph's channels between hosts, the link thread's
 * share of them (remote.h).
 *
 * Each host runs the whole compiled graph's layout (its own ports, slots
 * and rings) and only its own workers' programs.  A channel whose writer
 * is here and reader on another host has the link as its reader here:
 * its doorbell is the link's (compile/prog.h: cgr__reader_bell), and the
 * link takes each announcement off the ring and sends it with the value:
 * the slot's header in the message's header, the data from the slot
 * itself (UCX copies small data at once; large data goes by rendezvous,
 * read by the other side straight out of the slot, which stays the
 * writer's until the execution is released: the driver releases an
 * execution only once its outputs are in, and they depend on every read
 * of its values).  A channel whose reader is here and writer elsewhere
 * has the link as its writer here: a value that arrives is written into
 * this host's slot of that execution (its header, then the data, fetched
 * straight into the slot when it came by rendezvous) and announced on the
 * ring, in execution order per channel (a rendezvous that ends late holds
 * the ones after it back).  A value read by several workers of one host
 * crosses to it once (find_leads).  Admissions go from the driver's host
 * to those whose programs wait for them (gated ones).
 *
 * Threads: whoever holds the UCX worker (the link thread, or a thread
 * moving the link while it writes or waits: link.c), under job->lock;
 * bridge_add and bridge_remove from the driver's or the serving thread,
 * under it too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/remote.h"

/* A value being fetched into a slot (rendezvous). */
struct fetch {
	struct cgr_job *j;
	struct cgr__bgraph *bg;
	unsigned chan;
	uint64_t seq;
	size_t src_off; /* where the sender's slot had its data */
};

struct cgr__bgraph {
	struct cgr__bgraph *next;
	cgr_compiled *c;
	uint64_t gid;
	uint32_t *dst;	   /* per channel: reader's rank, sent from here */
	uint32_t *src;	   /* per channel: writer's rank, taken in here */
	/* Per channel between hosts: the first of its port's channels
	 * between the same two ranks (its lead: itself or one before), and
	 * the next one that has the same lead (NO_FOLLOWER: none). */
	unsigned *lead, *follower;
	uint64_t *next_in; /* per channel taken in: next to announce */
	uint8_t *done;	   /* per channel and slot: in, not announced */
	struct fetch *fetches; /* per channel and slot */
	unsigned *outs;	       /* the channels sent from here */
	size_t nouts;
	uint32_t *ranks; /* the other ranks it uses */
	size_t nranks;
	uint32_t *rank_of; /* worker index -> rank */
	uint32_t nidx;
	uint64_t admitted_sent;
	bool admit_out; /* the driver's host: a gated program elsewhere */
	uint32_t pending; /* fetches in flight */
	bool gone;
};

/* The value's header travels in the message's header. */
struct data_hdr {
	struct cgr__lhdr h;
	unsigned char slot[CGR__SLOT_HDR];
};
_Static_assert(sizeof(struct data_hdr) <= CGR__UCX_HDR_MAX,
	       "a value's header fits a message header");

static uint32_t rank_of_worker(const struct cgr__bgraph *bg,
			       const cgr_worker *w)
{
	return w->index < bg->nidx ? bg->rank_of[w->index] : CGR__RANK_NONE;
}

static void bgraph_free(struct cgr__bgraph *bg)
{
	free(bg->dst);
	free(bg->src);
	free(bg->lead);
	free(bg->follower);
	free(bg->next_in);
	free(bg->done);
	free(bg->fetches);
	free(bg->outs);
	free(bg->ranks);
	free(bg->rank_of);
	free(bg);
}

/* Where each channel's writer and reader are (ranks; NONE: unused). */
static void chan_ends(const struct cgr__bgraph *bg, uint32_t drv,
		      uint32_t *wr, uint32_t *rd)
{
	const cgr_compiled *c = bg->c;

	for (size_t i = 0; i < c->nchans; i++)
		wr[i] = rd[i] = CGR__RANK_NONE;
	for (size_t a = 0; a < c->nargs; a++)
		for (size_t k = 0; k < c->arg_nchans[a]; k++)
			wr[c->arg_chans[a][k]] = drv;
	for (size_t k = 0; k < c->ndrv_chans; k++)
		rd[c->drv_chans[k]] = drv;
	for (size_t i = 0; i < c->nprogs; i++) {
		const struct cgr__prog *p = &c->progs[i];
		uint32_t r = rank_of_worker(bg, p->w);
		for (size_t o = 0; o < p->nops; o++) {
			const struct cgr__op *op = &p->ops[o];
			if (op->kind == CGR__OP_READ && op->chan < c->nchans)
				rd[op->chan] = r;
			if (op->kind == CGR__OP_WRITE)
				for (size_t k = 0; k < op->nchans; k++)
					if (op->chans[k] < c->nchans)
						wr[op->chans[k]] = r;
		}
	}
}

static void add_rank(struct cgr__bgraph *bg, uint32_t me, uint32_t r)
{
	if (r == me || r == CGR__RANK_NONE)
		return;
	for (size_t i = 0; i < bg->nranks; i++)
		if (bg->ranks[i] == r)
			return;
	bg->ranks[bg->nranks++] = r;
}

#define NO_FOLLOWER UINT32_MAX

/* A value crosses once per pair of hosts: of the channels of one port
 * between the same two ranks, only the lead's carries it; the others
 * (followers: readers on the same host) are consumed where it is written
 * and announced where it arrives, as it arrives (the slot is the port's,
 * one per host).  Both ends find the same leads: the layout is the same
 * on every host.  Followers are chained from their lead in channel
 * order. */
static void find_leads(struct cgr__bgraph *bg, const uint32_t *wr,
		       const uint32_t *rd, const bool *crosses)
{
	const cgr_compiled *c = bg->c;

	for (size_t i = 0; i < c->nchans; i++) {
		bg->lead[i] = (unsigned)i;
		bg->follower[i] = NO_FOLLOWER;
		/* A slice is the reader's own. */
		if (!crosses[i] || c->chan_slice[i] != 0)
			continue;
		for (size_t k = 0; k < i; k++) {
			if (!crosses[k] || c->chan_slice[k] != 0 ||
			    bg->lead[k] != k ||
			    c->chans[k].port != c->chans[i].port ||
			    wr[k] != wr[i] || rd[k] != rd[i])
				continue;
			unsigned *at = &bg->follower[k];
			while (*at != NO_FOLLOWER)
				at = &bg->follower[*at];
			*at = (unsigned)i;
			bg->lead[i] = (unsigned)k;
			break;
		}
	}
}

/* Fills bg's maps; -ENOMEM. */
static int bgraph_map(struct cgr_job *j, struct cgr__bgraph *bg)
{
	const cgr_compiled *c = bg->c;
	size_t n = c->nchans + 1, ns = n * c->nslots;
	uint32_t *wr = calloc(n, sizeof(*wr)), *rd = calloc(n, sizeof(*rd));
	bool *crosses = calloc(n, sizeof(*crosses));
	int ret = -ENOMEM;

	bg->dst = calloc(n, sizeof(*bg->dst));
	bg->src = calloc(n, sizeof(*bg->src));
	bg->lead = calloc(n, sizeof(*bg->lead));
	bg->follower = calloc(n, sizeof(*bg->follower));
	bg->next_in = calloc(n, sizeof(*bg->next_in));
	bg->done = calloc(ns, 1);
	bg->fetches = calloc(ns, sizeof(*bg->fetches));
	bg->outs = calloc(n, sizeof(*bg->outs));
	bg->ranks = calloc(j->size, sizeof(*bg->ranks));
	if (wr == NULL || rd == NULL || crosses == NULL || bg->dst == NULL ||
	    bg->src == NULL || bg->lead == NULL || bg->follower == NULL ||
	    bg->next_in == NULL || bg->done == NULL || bg->fetches == NULL ||
	    bg->outs == NULL || bg->ranks == NULL)
		goto out;
	chan_ends(bg, j->driver, wr, rd);
	for (size_t i = 0; i < c->nchans; i++) {
		bool w_here = wr[i] == j->rank, r_here = rd[i] == j->rank;
		bg->dst[i] = bg->src[i] = CGR__RANK_NONE;
		if (w_here && !r_here && rd[i] != CGR__RANK_NONE) {
			bg->dst[i] = rd[i];
			bg->outs[bg->nouts++] = (unsigned)i;
			crosses[i] = true;
		}
		if (r_here && !w_here && wr[i] != CGR__RANK_NONE) {
			bg->src[i] = wr[i];
			crosses[i] = true;
		}
		add_rank(bg, j->rank, wr[i]);
		add_rank(bg, j->rank, rd[i]);
	}
	for (size_t i = 0; i < c->nprogs; i++) {
		uint32_t r = rank_of_worker(bg, c->progs[i].w);
		add_rank(bg, j->rank, r);
		if (j->rank == j->driver && r != j->rank && c->progs[i].gate)
			bg->admit_out = true;
	}
	find_leads(bg, wr, rd, crosses);
	ret = 0;
out:
	free(wr);
	free(rd);
	free(crosses);
	return ret;
}

int cgr__bridge_add(struct cgr_job *j, cgr_compiled *c, uint64_t gid,
		    const uint32_t *rank, uint32_t nranks)
{
	struct cgr__bgraph *bg = calloc(1, sizeof(*bg));
	int ret;

	if (bg == NULL)
		return -ENOMEM;
	bg->c = c;
	bg->gid = gid;
	bg->nidx = nranks;
	bg->rank_of = calloc(nranks + 1, sizeof(*bg->rank_of));
	if (bg->rank_of == NULL) {
		bgraph_free(bg);
		return -ENOMEM;
	}
	memcpy(bg->rank_of, rank, nranks * sizeof(*rank));
	if ((ret = bgraph_map(j, bg)) < 0) {
		bgraph_free(bg);
		return ret;
	}
	/* Its programs here move the link while they write and wait (set
	 * before they start: compile/prog.h). */
	for (size_t i = 0; i < c->nprogs; i++)
		if (rank_of_worker(bg, c->progs[i].w) == j->rank) {
			c->progs[i].xpoll = cgr__job_xpoll;
			c->progs[i].xpoll_arg = j;
		}
	pthread_mutex_lock(&j->lock);
	bg->next = j->graphs;
	j->graphs = bg;
	pthread_mutex_unlock(&j->lock);
	cgr__job_kick(j);
	return 0;
}

static struct cgr__bgraph **find(struct cgr_job *j, const cgr_compiled *c,
				 uint64_t gid)
{
	struct cgr__bgraph **pp;

	for (pp = &j->graphs; *pp != NULL; pp = &(*pp)->next)
		if ((c != NULL && (*pp)->c == c) ||
		    (c == NULL && (*pp)->gid == gid && !(*pp)->gone))
			break;
	return pp;
}

void cgr__bridge_remove(struct cgr_job *j, cgr_compiled *c)
{
	struct cgr__bgraph **pp, *bg;

	pthread_mutex_lock(&j->lock);
	if ((bg = *(pp = find(j, c, 0))) != NULL) {
		bg->gone = true;
		/* Fetches into its slots end first (a lost peer's end in
		 * error as its endpoint closes). */
		while (bg->pending > 0) {
			cgr__job_kick(j);
			pthread_cond_wait(&j->cond, &j->lock);
		}
		*find(j, c, 0) = bg->next;
#ifdef CGR_FAULT_INJECTION
		if (j->debug_late && j->rank != j->driver) {
			j->stale_gid = bg->gid | (1ull << 62);
			j->debug_late = false; /* once per rank */
		}
#endif
	}
	pthread_mutex_unlock(&j->lock);
	if (bg != NULL)
		bgraph_free(bg);
}

size_t cgr__bridge_ranks(struct cgr_job *j, cgr_compiled *c, uint32_t *out,
			 size_t nout)
{
	struct cgr__bgraph *bg;
	size_t n = 0;

	pthread_mutex_lock(&j->lock);
	if ((bg = *find(j, c, 0)) != NULL)
		for (; n < bg->nranks && n < nout; n++)
			out[n] = bg->ranks[n];
	pthread_mutex_unlock(&j->lock);
	return n;
}

/* ---- out --------------------------------------------------------------- */

/* What of the value in slot h channel ch carries: the bytes from *off,
 * their number returned (a tensor whose data splits evenly: its reader's
 * block only, compile/prog.h, chan_slice; else the whole value).  The
 * same on both ends: the header travels. */
static size_t carried(const cgr_compiled *c, unsigned ch,
		      const struct cgr__slot_hdr *h, size_t *off)
{
	uint32_t s = c->chan_slice[ch];
	size_t len = (size_t)h->len, n = CGR__SLICE_N(s);

	*off = 0;
	if (s == 0 || h->kind != CGR_VALUE_TENSOR || len % n != 0)
		return len;
	*off = CGR__SLICE_R(s) * (len / n);
	return len / n;
}

static void send_value(struct cgr_job *j, struct cgr__bgraph *bg, unsigned ch,
		       uint64_t seq)
{
	const struct cgr__port *p = &bg->c->ports[bg->c->chans[ch].port];
	struct cgr__slot_hdr *h = cgr__port_slot(p, seq);
	struct data_hdr dh;
	uint32_t to = bg->dst[ch];
	size_t off = 0, len = h->len <= p->cap ? carried(bg->c, ch, h, &off) : 0;
	int ret;

	cgr__lhdr_init(j, &dh.h, CGR__LM_DATA, to);
	dh.h.gid = bg->gid;
	dh.h.chan = ch;
	dh.h.seq = seq;
	memcpy(dh.slot, h, sizeof(dh.slot));
	ret = cgr__job_ep(j, to);
	if (ret == 0)
		ret = cgr__ucx_post(j->ucx, to, &dh, sizeof(dh),
				    (unsigned char *)cgr__slot_data(h) + off,
				    len, NULL, NULL);
	if (ret < 0 && !cgr__job_lost(j, to, NULL)) {
		char why[160];
		snprintf(why, sizeof(why), "sending a value failed: %s",
			 cgr_strerror(ret));
		/* Under j->lock: cgr__job_lose takes it. */
		pthread_mutex_unlock(&j->lock);
		cgr__job_lose(j, to, why);
		pthread_mutex_lock(&j->lock);
		return;
	}
	j->peers[to].sent = cgr__now_ns();
	j->peers[to].nsent++;
	if (!j->peers[to].engaged) {
		j->peers[to].engaged = true;
		j->peers[to].heard = j->peers[to].sent;
	}
	atomic_fetch_add_explicit(&j->st_data_sent, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&j->st_bytes_sent, len, memory_order_relaxed);
}

static void send_admit(struct cgr_job *j, struct cgr__bgraph *bg, uint64_t a)
{
	for (size_t i = 0; i < bg->nranks; i++) {
		struct cgr__lhdr h;
		uint32_t to = bg->ranks[i];
		if (cgr__job_lost(j, to, NULL))
			continue;
		cgr__lhdr_init(j, &h, CGR__LM_ADMIT, to);
		h.gid = bg->gid;
		h.seq = a;
		if (cgr__job_ep(j, to) == 0 &&
		    cgr__ucx_post(j->ucx, to, &h, sizeof(h), NULL, 0, NULL,
				  NULL) >= 0)
			j->peers[to].sent = cgr__now_ns();
	}
	bg->admitted_sent = a;
}

static uint64_t admitted(const struct cgr__bgraph *bg)
{
	/* A1: pairs with cgr_execute's release. */
	return atomic_load_explicit(&bg->c->ctl->admitted,
				    memory_order_acquire);
}

bool cgr__bridge_pump(struct cgr_job *j)
{
	bool did = false;

#ifdef CGR_FAULT_INJECTION
	if (j->stale_gid != 0) {
		/* Tests: a message of a graph that is not (remote.h). */
		struct cgr__lhdr h;
		cgr__lhdr_init(j, &h, CGR__LM_ADMIT, j->driver);
		h.gid = j->stale_gid;
		h.seq = 1;
		if (cgr__job_ep(j, j->driver) == 0)
			(void)cgr__ucx_post(j->ucx, j->driver, &h, sizeof(h),
					    NULL, 0, NULL, NULL);
		j->stale_gid = 0;
	}
#endif
	for (struct cgr__bgraph *bg = j->graphs; bg != NULL; bg = bg->next) {
		if (bg->gone)
			continue;
		for (size_t i = 0; i < bg->nouts; i++) {
			unsigned ch = bg->outs[i];
			struct cgr__chan *c = &bg->c->chans[ch];
			const struct cgr__msg *m;
			while ((m = cgr__chan_peek(c)) != NULL) {
				uint64_t seq = m->seq;
				cgr__c_acquire(bg->c);
				/* A follower's value went with its lead's. */
				if (bg->lead[ch] == ch)
					send_value(j, bg, ch, seq);
				cgr__chan_consume(c);
				did = true;
			}
		}
		if (bg->admit_out && admitted(bg) > bg->admitted_sent) {
			send_admit(j, bg, admitted(bg));
			did = true;
		}
	}
	return did;
}

bool cgr__bridge_ready(struct cgr_job *j)
{
	bool ready = false;

	pthread_mutex_lock(&j->lock);
	for (struct cgr__bgraph *bg = j->graphs; bg != NULL && !ready;
	     bg = bg->next) {
		if (bg->gone)
			continue;
		for (size_t i = 0; i < bg->nouts && !ready; i++)
			ready = cgr__chan_peek(&bg->c->chans[bg->outs[i]]) !=
				NULL;
		ready |= bg->admit_out && admitted(bg) > bg->admitted_sent;
	}
	pthread_mutex_unlock(&j->lock);
	return ready;
}

/* ---- in ---------------------------------------------------------------- */

/* Execution seq of channel ch is in: announced with every one before it
 * that is in (under j->lock). */
static void arrived_one(struct cgr__bgraph *bg, unsigned ch, uint64_t seq)
{
	cgr_compiled *c = bg->c;
	uint8_t *done = bg->done + (size_t)ch * c->nslots;
	uint32_t mask = c->nslots - 1;

	done[seq & mask] = 1;
	while (done[bg->next_in[ch] & mask]) {
		done[bg->next_in[ch] & mask] = 0;
		cgr__c_release(c);
		(void)cgr__chan_write(&c->chans[ch], bg->next_in[ch],
				      &c->ctl->stop, 0);
		bg->next_in[ch]++;
	}
}

/* The same for lead channel ch and its followers. */
static void arrived(struct cgr__bgraph *bg, unsigned ch, uint64_t seq)
{
	for (; ch != NO_FOLLOWER; ch = bg->follower[ch])
		arrived_one(bg, ch, seq);
}

static void value_fetched(void *arg, int status)
{
	struct fetch *f = arg;
	struct cgr_job *j = f->j;
	struct cgr__bgraph *bg = f->bg;

	pthread_mutex_lock(&j->lock);
	if (!bg->gone) {
		const struct cgr__port *p =
			&bg->c->ports[bg->c->chans[f->chan].port];
		struct cgr__slot_hdr *h = cgr__port_slot(p, f->seq);

		if (status < 0)
			cgr__value_store_error(h, p->cap, CGR_EHOSTLOST,
					       "a value from another host did "
					       "not arrive whole");
		else
			cgr__value_rebase(h, f->src_off);
	}
	if (!bg->gone)
		arrived(bg, f->chan, f->seq);
	bg->pending--;
	pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
}

/* A value of DATA message m for channel ch, execution seq: into its slot
 * here (under j->lock). */
static void take_value(struct cgr_job *j, struct cgr__bgraph *bg,
		       unsigned ch, uint64_t seq, const void *slot,
		       const struct cgr__ucx_msg *m)
{
	cgr_compiled *c = bg->c;
	const struct cgr__port *p = &c->ports[c->chans[ch].port];
	struct cgr__slot_hdr *h = cgr__port_slot(p, seq);
	int64_t big_off = h->big_off;
	size_t off = 0, len, src_off;
	struct fetch *f;
	unsigned char *d;

	memcpy(h, slot, CGR__SLOT_HDR);
	/* The sender's layout, for a list's tables (cgr__value_rebase). */
	src_off = h->big ? (size_t)h->big_off : CGR__SLOT_HDR;
	/* The layout's, not the sender's. */
	h->big_off = big_off;
	h->big = 0;
	len = h->len <= p->cap ? carried(c, ch, h, &off) : 0;
	if (h->len > p->cap || len != m->len) {
		if (m->rndv != NULL)
			cgr__ucx_drop_data(j->ucx, m->rndv);
		cgr__value_store_error(h, p->cap, CGR_ECORRUPT,
				       "a value from another host whose "
				       "length does not match its header");
		arrived(bg, ch, seq);
		return;
	}
	/* A slice: the rest of the slot is not this value's (its reader
	 * reads only the slice). */
	d = (unsigned char *)cgr__slot_place(h, (size_t)h->len) + off;
	if (m->rndv == NULL) {
		memcpy(d, m->data, m->len);
		cgr__value_rebase(h, src_off);
		arrived(bg, ch, seq);
		return;
	}
	f = &bg->fetches[(size_t)ch * c->nslots + (seq & (c->nslots - 1))];
	*f = (struct fetch){ j, bg, ch, seq, src_off };
	bg->pending++;
	switch (cgr__ucx_fetch(j->ucx, m->rndv, d, m->len, value_fetched, f)) {
	case 1:
		return; /* value_fetched, later */
	case 0:
		bg->pending--;
		cgr__value_rebase(h, src_off);
		arrived(bg, ch, seq);
		return;
	default:
		bg->pending--;
		cgr__value_store_error(h, p->cap, -ENOMEM,
				       "no memory to receive a value from "
				       "another host");
		arrived(bg, ch, seq);
	}
}

/* Admissions up to a: the gated programs here may go on. */
static void take_admit(struct cgr_job *j, struct cgr__bgraph *bg, uint64_t a)
{
	cgr_compiled *c = bg->c;

	if (a <= admitted(bg))
		return;
	/* A1: as cgr_execute's release, for the programs here. */
	atomic_store_explicit(&c->ctl->admitted, a, memory_order_release);
	for (size_t i = 0; i < c->nprogs; i++)
		if (c->progs[i].gate &&
		    rank_of_worker(bg, c->progs[i].w) == j->rank)
			cgr__bell_ring(c->progs[i].bell);
}

void cgr__bridge_in(struct cgr_job *j, const struct cgr__lhdr *h,
		    const struct cgr__ucx_msg *m)
{
	struct cgr__bgraph *bg;
	bool ok = false;

	pthread_mutex_lock(&j->lock);
	bg = *find(j, NULL, h->gid);
	if (bg != NULL && h->type == CGR__LM_ADMIT) {
		take_admit(j, bg, h->seq);
		ok = true;
	} else if (bg != NULL && h->type == CGR__LM_DATA &&
		   m->hlen == sizeof(struct data_hdr) &&
		   h->chan < bg->c->nchans && bg->src[h->chan] == h->from &&
		   bg->lead[h->chan] == h->chan &&
		   h->seq >= bg->next_in[h->chan] &&
		   h->seq - bg->next_in[h->chan] < bg->c->nslots) {
		take_value(j, bg, h->chan, h->seq,
			   (const unsigned char *)m->hdr +
				   offsetof(struct data_hdr, slot),
			   m);
		atomic_fetch_add_explicit(&j->st_data_recv, 1,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&j->st_bytes_recv, m->len,
					  memory_order_relaxed);
		ok = true;
	}
	pthread_mutex_unlock(&j->lock);
	if (!ok) {
		/* A graph that is gone (a late message of an old one), or
		 * a message that makes no sense here. */
		if (m->rndv != NULL)
			cgr__ucx_drop_data(j->ucx, m->rndv);
		atomic_fetch_add_explicit(&j->st_late, 1,
					  memory_order_relaxed);
	}
}

/* ---- losses ------------------------------------------------------------ */

void cgr__bridge_lost(struct cgr_job *j, uint32_t rank, const char *why)
{
	for (struct cgr__bgraph *bg = j->graphs; bg != NULL; bg = bg->next) {
		cgr_compiled *c = bg->c;
		unsigned index = 0;
		bool uses = false;
		for (size_t i = 0; i < bg->nranks; i++)
			uses |= bg->ranks[i] == rank;
		if (!uses || bg->gone)
			continue;
		for (uint32_t i = 0; i < bg->nidx; i++)
			if (bg->rank_of[i] == rank) {
				index = i;
				break;
			}
		/* Stops it, rings every doorbell of its programs (a
		 * no-op if it had failed already). */
		(void)cgr__graph_lost(c, index, CGR_EHOSTLOST, why);
	}
}
