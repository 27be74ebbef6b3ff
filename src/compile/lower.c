/*
 * compile/lower.c: from the validated graph to programs.  One value port
 * per argument, constant and task output, each with one buffer slot per
 * execution in flight; one channel per (port, reading worker) pair and per
 * port the driver reads; one program of READ / COMPUTE / COLL / WRITE
 * operations per worker, in the global order restricted to that worker,
 * so that all members meet at each collective in the same order.
 *
 * Why that cannot deadlock: rings hold max_inflight messages, and the
 * driver admits at most max_inflight executions, so a WRITE never waits.
 * Every program follows one global order, so the earliest unfinished
 * (execution, position) operation anywhere has all of its inputs.
 * verify.c checks it anyway, before and after overlap.
 *
 * The programs built here are the compiler's working state: what its
 * passes (verify, overlap, prune) read and rewrite.  What runs is built
 * from the plan they become (plan.c), which also allocates the runtime
 * state (scratch, jobs, trace buffers, buckets) these leave out.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"

/* ---- placement: host or device, CPU or NCCL ---------------------- */

/* Why collective t cannot run on NCCL (NULL: it can): its members must
 * own CUDA devices, each its own (device 0 of two hosts is two GPUs:
 * members on several hosts are coll_spans' to refuse). */
static const char *nccl_refusal(const struct cgr__task *t, char *buf,
				size_t len)
{
#ifndef HAVE_NCCL
	(void)t;
	snprintf(buf, len, "this build has no NCCL backend");
	return buf;
#else
	for (size_t i = 0; i < t->nmembers; i++) {
		if (t->members[i]->device < 0) {
			snprintf(buf, len, "member %s owns no CUDA device",
				 t->members[i]->name);
			return buf;
		}
		for (size_t j = 0; j < i; j++)
			if (t->members[j]->device == t->members[i]->device &&
			    t->members[j]->host == t->members[i]->host) {
				snprintf(buf, len,
					 "members %s and %s share CUDA device "
					 "%d (NCCL needs one GPU per rank)",
					 t->members[j]->name,
					 t->members[i]->name,
					 t->members[i]->device);
				return buf;
			}
	}
	return NULL;
#endif
}

/*
 * Whether collective t runs on NCCL, from where its inputs live and what
 * it asks for (cp.backend, or its communicator's).  Device inputs need
 * NCCL; NCCL needs device inputs; mixing the two is refused.
 */
static int coll_placement(struct cgr__cc *cc, const struct cgr__task *t,
			  bool *nccl)
{
	int want = t->cp.comm != NULL ? t->cp.comm->backend : t->cp.backend;
	size_t ndev = 0;
	char why[160];
	const char *no;

	for (size_t i = 0; i < t->nin; i++)
		ndev += cc->node_dev[t->in[i]->id] >= 0;
	if (ndev != 0 && ndev != t->nin)
		return cgr__graph_fail(cc->g, -EINVAL,
				       "%s %s mixes device and host tensors "
				       "among its inputs",
				       cgr__coll_name(t->coll), t->name);
	if (ndev == 0 && want != CGR_BACKEND_NCCL) {
		*nccl = false;
		return 0;
	}
	if (ndev == 0)
		return cgr__graph_fail(cc->g, -EINVAL,
				       "%s %s asks for NCCL but its inputs are "
				       "host tensors (a host tensor cannot "
				       "travel over NCCL: give the producer "
				       "CGR_TASK_DEVICE)",
				       cgr__coll_name(t->coll), t->name);
	if (want == CGR_BACKEND_CPU)
		return cgr__graph_fail(cc->g, -EINVAL,
				       "%s %s: its inputs are device tensors, "
				       "which the CPU communicator cannot move",
				       cgr__coll_name(t->coll), t->name);
	if ((no = nccl_refusal(t, why, sizeof(why))) != NULL)
		return cgr__graph_fail(cc->g, -EINVAL,
				       "%s %s: its inputs are device tensors, "
				       "which need NCCL, but %s",
				       cgr__coll_name(t->coll), t->name, no);
	*nccl = true;
	return 0;
}

/* Whether collective t has members on several hosts (worker->host).  Its
 * members then each read every input they need over channels and
 * compute their own outputs (run/coll.c), or, on a caller's communicator
 * that spans hosts (rank i is member i), agree and move the data through
 * it: a CPU one, or for device tensors an NCCL one (the records cross
 * over its agreement's CPU communicators, the data through NCCL).
 * Device edges cannot. */
static int coll_spans(struct cgr__cc *cc, const struct cgr__task *t,
		      bool *spans)
{
	const cgr_worker *a = t->members[0], *b = NULL;
	const cgr_comm *user = t->cp.comm;
	const char *no = NULL;
	char why[256];

	for (size_t i = 1; i < t->nmembers && b == NULL; i++)
		if (t->members[i]->host != a->host)
			b = t->members[i];
	*spans = b != NULL;
	if (b == NULL)
		return 0;
	if (user != NULL && user->hosts == NULL)
		no = "a communicator of the caller's does not span hosts";
	/* Rank i's operations come from member i's worker only (else two
	 * threads could issue one rank's at once). */
	for (size_t i = 0; no == NULL && user != NULL && i < t->nmembers; i++)
		if (user->hosts[i] != t->members[i]->host) {
			snprintf(why, sizeof(why),
				 "its communicator's rank %zu is on rank %u, "
				 "member %s on rank %u",
				 i, user->hosts[i], t->members[i]->name,
				 t->members[i]->host);
			no = why;
		} else if (user->members != NULL &&
			   user->members[i] != NULL &&
			   user->members[i] != t->members[i]) {
			snprintf(why, sizeof(why),
				 "its communicator's rank %zu is worker %s, "
				 "member %zu is %s",
				 i, user->members[i]->name, i,
				 t->members[i]->name);
			no = why;
		}
	if (no == NULL && t->edge && user == NULL)
		no = "device edges do not cross hosts but on an NCCL "
		     "communicator across them (host tensors cannot)";
	else if (no == NULL && cc->nccl[t->id] && user == NULL)
		no = "its inputs are device tensors: give it an NCCL "
		     "communicator across the hosts (cgr_comm_create, "
		     "cgr_coll_params.comm)";
	if (no == NULL)
		return 0;
	return cgr__graph_fail(cc->g, -ENOTSUP,
			       "%s %s has members on several hosts (%s on "
			       "rank %u, %s on rank %u): %s",
			       cgr__coll_name(t->coll), t->name, a->name,
			       a->host, b->name, b->host, no);
}

/* Where every node's data lives (node_dev), which collectives run on
 * NCCL (nccl) and which span hosts (spans), in the global order: a
 * collective's outputs live where its inputs do. */
int cgr__lower_devices(struct cgr__cc *cc)
{
	cgr_graph *g = cc->g;
	struct cgr_compiled *c = cc->c;
	int ret;

	cc->node_dev = cgr__c_alloc(c, (g->nnodes + 1) * sizeof(int));
	cc->nccl = cgr__c_alloc(c, cc->ntasks + 1);
	cc->spans = cgr__c_alloc(c, cc->ntasks + 1);
	if (cc->node_dev == NULL || cc->nccl == NULL || cc->spans == NULL)
		return -ENOMEM;
	for (cgr_node *n = g->nodes; n != NULL; n = n->next)
		cc->node_dev[n->id] = CGR_DEVICE_NONE;
	for (size_t k = 0; k < cc->ntasks; k++) {
		struct cgr__task *t = cc->order[k];
		bool dev = false;
		if (t->coll) {
			ret = coll_placement(cc, t, &cc->nccl[t->id]);
			if (ret == 0)
				ret = coll_spans(cc, t, &cc->spans[t->id]);
			if (ret < 0)
				return ret;
			dev = cc->nccl[t->id];
		} else {
			dev = (t->flags & CGR_TASK_DEVICE) != 0;
		}
		for (size_t o = 0; dev && o < t->nout; o++)
			cc->node_dev[t->out[o]->id] =
				cgr__out_worker(t, o)->device;
	}
	return 0;
}

/* ---- ports and channels --------------------------------------------- */

/*
 * Where the ports go.  Their slots lie in two regions of rows, a row per
 * buffer: the ports of nslots buffers side by side in one, the graph
 * outputs' ports (nbufs buffers) in the other, so that the slots one
 * execution uses lie together (a few pages for thousands of tasks, not a
 * page each).  Their big areas lie in one reservation (chan.h).
 * Constants keep a slot of their own (every process running the graph
 * keeps them for itself).  Laid out in two passes over the same ports:
 * measure (the rows' and the reservation's sizes), then place.
 */
struct lay {
	struct cgr_compiled *c;
	bool place;
	bool over;	       /* the big areas' sum overflows */
	size_t row[2];	       /* bytes of a row: [output] */
	size_t at[2];	       /* placing: the next port's offset in it */
	unsigned char *mem[2]; /* the regions */
	size_t big_total;
	unsigned char *big; /* placing: the next big area */
};

/* Port p (placing; else measured): want data bytes, a constant's single
 * slot if !shared, the spare buffers and the slot map if output. */
static int lay_port(struct lay *L, struct cgr__port *p, size_t want,
		    uint32_t nslots, const char *name, bool shared,
		    bool output)
{
	struct cgr_compiled *c = L->c;
	uint32_t nbufs = output ? c->nbufs : nslots;
	size_t sb = cgr__port_slot_bytes(want, !shared);
	size_t bsize = cgr__port_bigsize(want, nbufs, !shared);
	unsigned char *mem, *big = bsize != 0 ? L->big : NULL;

	if (!L->place) {
		if (shared)
			L->row[output] += sb;
		L->over |= __builtin_add_overflow(L->big_total, bsize,
						  &L->big_total);
		return 0;
	}
	L->big += bsize;
	if (!shared) {
		mem = cgr__c_alloc(c, sb);
		if (mem == NULL)
			return -ENOMEM;
		cgr__port_init(p, mem, sb, NULL, want, nslots, nbufs, name);
	} else {
		mem = L->mem[output] + L->at[output];
		L->at[output] += sb;
		if (cgr__c_attached(c))
			cgr__port_attach(p, mem, L->row[output], big, want,
					 nslots, nbufs, name);
		else
			cgr__port_init(p, mem, L->row[output], big, want,
				       nslots, nbufs, name);
	}
	if (output)
		p->map = c->omap;
	p->dev = CGR_DEVICE_NONE;
	return 0;
}

/* The capacity the port of task output n asks for. */
static size_t out_want(const struct cgr_compiled *c, const cgr_node *n)
{
	return n->task->max_out_bytes ? n->task->max_out_bytes :
					c->p.max_value_bytes;
}

/* ", of N bytes reserved" for a graph's shared segment (an address space
 * limit makes it smaller), else "". */
static const char *seg_room(const struct cgr_compiled *c, char *buf,
			    size_t len)
{
	if (c->seg == NULL || c->seg->attach)
		return "";
	snprintf(buf, len, ", of %zu bytes reserved", c->seg->reserve);
	return buf;
}

/* After measuring: the regions, and the big areas reserved at once (a
 * sum that overflows, or that the system will not reserve, fails the
 * compile, saying how much it asked for).  Rows hold at most
 * CGR__SLOT_HDR + CGR__INLINE_BYTES per port: no overflow. */
static int lay_alloc(struct cgr__cc *cc, struct lay *L)
{
	struct cgr_compiled *c = cc->c;
	uint32_t rows[2] = { c->nslots, c->nbufs };
	char room[48];

	for (int k = 0; k < 2; k++)
		if (L->row[k] != 0 &&
		    (L->mem[k] = cgr__c_salloc(c, L->row[k] * rows[k])) ==
			    NULL)
			return cgr__c_attached(c) ?
				       cgr__graph_fail(cc->g, -EPROTO,
						       "the ports' slots lie "
						       "outside the driver's "
						       "segment") :
				       cgr__graph_fail(
					       cc->g, -ENOMEM,
					       "cannot allocate the ports' "
					       "slots (%zu bytes)%s%s",
					       (size_t)(L->row[k] * rows[k]),
					       c->seg != NULL ?
						       " in the graph's "
						       "shared segment" :
						       "",
					       seg_room(c, room,
							sizeof(room)));
	if (L->over)
		return cgr__graph_fail(cc->g, -ENOMEM,
				       "the outputs' buffers take more "
				       "address space than there is");
	if (L->big_total != 0 &&
	    (L->big = cgr__c_reserve(c, L->big_total)) == NULL)
		return cgr__graph_fail(
			cc->g, -ENOMEM,
			"cannot reserve %zu bytes of address space for the "
			"values' buffers (%zu ports, max_value_bytes %zu, "
			"%u slots)%s%s",
			L->big_total, c->nports, c->p.max_value_bytes,
			c->nslots,
			c->seg != NULL ? " in the graph's shared segment" : "",
			seg_room(c, room, sizeof(room)));
	L->place = true;
	return 0;
}

/* The slot map of the graph's output ports (the identity to start with;
 * the driver's, in shared memory) and which ports are outputs: out_node
 * by node id, out_arg by argument. */
static int output_map(struct cgr__cc *cc, bool *out_node, bool *out_arg)
{
	cgr_graph *g = cc->g;
	struct cgr_compiled *c = cc->c;
	uint32_t nspare = c->p.max_inflight;

	c->nbufs = c->nslots;
	c->held = cgr__c_alloc(c, nspare * sizeof(*c->held));
	if (c->held == NULL)
		return -ENOMEM;
	if (g->noutputs == 0)
		return 0;
	c->omap = cgr__c_salloc(c, c->nslots * sizeof(uint32_t));
	c->free_bufs = cgr__c_alloc(c, nspare * sizeof(uint32_t));
	if (c->omap == NULL || c->free_bufs == NULL)
		return -ENOMEM;
	c->nbufs = c->nslots + nspare;
	if (!cgr__c_attached(c))
		for (uint32_t i = 0; i < c->nslots; i++)
			c->omap[i] = i;
	for (uint32_t k = 0; k < nspare; k++)
		c->free_bufs[k] = c->nbufs - 1 - k;
	c->nfree = nspare;
	for (size_t i = 0; i < g->noutputs; i++) {
		const cgr_node *n = g->outputs[i];
		if (n->kind != CGR__NODE_INPUT)
			out_node[n->id] = true;
		else
			out_arg[n->index == CGR_INPUT_ALL ? 0 : n->index] =
				true;
	}
	return 0;
}

/* Finds or adds the channel (port -> reader w; NULL: the driver): a
 * walk of the port's channels, one per reader.  Returns its index. */
static int chan_get(struct cgr__cc *cc, unsigned port, cgr_worker *w)
{
	unsigned *at = &cc->ch_head[port];

	for (; *at != CGR__NO_CHAN; at = &cc->ch_next[*at])
		if (cc->ch_w[*at] == w)
			return (int)*at;
	if (cc->nch == cc->chcap)
		return -ENOSPC;
	cc->ch_port[cc->nch] = port;
	cc->ch_w[cc->nch] = w;
	cc->ch_next[cc->nch] = CGR__NO_CHAN;
	*at = (unsigned)cc->nch;
	return (int)cc->nch++;
}

/* Channel (port -> w), used for `use` (CGR__SLICE_WHOLE or a slice): a
 * channel used for two different things carries the whole value. */
static void chan_use(struct cgr__cc *cc, unsigned port, cgr_worker *w,
		     uint32_t use)
{
	int ch = chan_get(cc, port, w);

	if (ch < 0)
		return; /* ch_use stays 0: whole */
	if (cc->ch_use[ch] == 0)
		cc->ch_use[ch] = use;
	else if (cc->ch_use[ch] != use)
		cc->ch_use[ch] = CGR__SLICE_WHOLE;
}

/* The worker producing node n (NULL: the driver; constants never
 * travel). */
static cgr_worker *node_owner(const cgr_node *n)
{
	return n->kind == CGR__NODE_TASK ? cgr__out_worker(n->task, n->port) :
					   NULL;
}

static bool node_is_all(const cgr_node *n)
{
	return n->kind == CGR__NODE_INPUT && n->index == CGR_INPUT_ALL;
}

/* Expanded input count of t: CGR_INPUT_ALL stands for every argument. */
static size_t nin_expanded(const struct cgr_compiled *c,
			   const struct cgr__task *t)
{
	size_t n = 0;
	for (size_t i = 0; i < t->nin; i++)
		n += node_is_all(t->in[i]) ? c->nargs : 1;
	return n;
}

/* The ports of one pass of L: arguments first, then constants and task
 * outputs. */
static int lay_ports(struct cgr__cc *cc, struct lay *L, const bool *out_node,
		     const bool *out_arg)
{
	cgr_graph *g = cc->g;
	struct cgr_compiled *c = cc->c;
	unsigned pi;
	int ret;

	for (pi = 0; pi < c->nargs; pi++) {
		char name[32];
		snprintf(name, sizeof(name), "input[%u]", pi);
		ret = lay_port(L, &c->ports[pi], c->p.max_value_bytes,
			       c->nslots, name, true, out_arg[pi]);
		if (ret < 0)
			return ret;
		c->arg_port[pi] = pi;
	}
	for (cgr_node *n = g->nodes; n != NULL; n = n->next) {
		if (n->kind == CGR__NODE_INPUT) {
			cc->node_port[n->id] =
				n->index == CGR_INPUT_ALL ? 0 : (unsigned)n->index;
			continue;
		}
		if (n->kind == CGR__NODE_CONST) {
			struct cgr__slot_hdr *h = n->cdata;
			ret = lay_port(L, &c->ports[pi],
				       n->cdata_len - CGR__SLOT_HDR, 1, n->name,
				       false, false);
			/* Stored again (not copied): a list's tables
			 * point into the slot that holds it. */
			if (ret == 0 && L->place) {
				cgr_value v;
				cgr__value_load(h, &v);
				cgr__value_store(
					cgr__port_slot(&c->ports[pi], 0),
					c->ports[pi].cap, &v);
			}
		} else {
			ret = lay_port(L, &c->ports[pi], out_want(c, n),
				       c->nslots, n->name, true,
				       out_node[n->id]);
			/* Its device slots come at create (not when only
			 * planning), on its task's host only: a device
			 * task's outputs stay there (remote/). */
			if (n->task->coll ||
			    n->task->w->host == c->ctx->host)
				c->ports[pi].dev = cc->node_dev[n->id];
		}
		if (ret < 0)
			return ret;
		cc->node_port[n->id] = pi++;
	}
	return 0;
}

static int make_ports(struct cgr__cc *cc)
{
	cgr_graph *g = cc->g;
	struct cgr_compiled *c = cc->c;
	size_t nports = c->nargs;
	struct lay L;
	bool *out_node, *out_arg;
	int ret;

	for (cgr_node *n = g->nodes; n != NULL; n = n->next)
		if (n->kind != CGR__NODE_INPUT)
			nports++;
	c->ports = cgr__c_alloc(c, (nports + 1) * sizeof(*c->ports));
	cc->node_port = cgr__c_alloc(c, (g->nnodes + 1) * sizeof(unsigned));
	c->arg_port = cgr__c_alloc(c, (c->nargs + 1) * sizeof(unsigned));
	out_node = cgr__c_alloc(c, (g->nnodes + 1) * sizeof(bool));
	out_arg = cgr__c_alloc(c, (c->nargs + 1) * sizeof(bool));
	if (c->ports == NULL || cc->node_port == NULL || c->arg_port == NULL ||
	    out_node == NULL || out_arg == NULL)
		return -ENOMEM;
	if ((ret = output_map(cc, out_node, out_arg)) < 0)
		return ret;
	c->nports = nports;
	memset(&L, 0, sizeof(L));
	L.c = c;
	ret = lay_ports(cc, &L, out_node, out_arg);
	if (ret == 0)
		ret = lay_alloc(cc, &L);
	if (ret == 0)
		ret = lay_ports(cc, &L, out_node, out_arg);
	return ret;
}

/* Whether worker w reads input i of collective t over a channel of its
 * own: across hosts every member with an output reads every input (a
 * reduce's or gather's root only: the others have no output). */
static bool spans_reads(const struct cgr__cc *cc, const struct cgr__task *t,
			size_t i, const cgr_worker *w)
{
	const cgr_node *n = t->in[i];

	return t->coll && cc->spans[t->id] && t->cp.comm == NULL &&
	       n->kind != CGR__NODE_CONST &&
	       node_owner(n) != w &&
	       (!cgr__coll_out_at_root(t->coll) ||
		cgr__task_rank(t, w) == t->cp.root);
}

/* A collective across hosts: its members' channels (spans_reads).  An
 * alltoall's, reducescatter's or scatter's member m reads block m of
 * each input (run/coll.c, spans_compute): only that. */
static void spans_chans(struct cgr__cc *cc, const struct cgr__task *t)
{
	bool blocks = t->coll == CGR_COLL_ALLTOALL ||
		      t->coll == CGR_COLL_REDUCESCATTER ||
		      t->coll == CGR_COLL_SCATTER;

	for (size_t m = 0; m < t->nmembers; m++)
		for (size_t i = 0; i < t->nin; i++)
			if (spans_reads(cc, t, i, t->members[m]))
				chan_use(cc, cc->node_port[t->in[i]->id],
					 t->members[m],
					 blocks ? CGR__SLICE(t->nmembers, m) :
						  CGR__SLICE_WHOLE);
}

/* The channel table: at most one per (port, reader), in the order of
 * first use, then the driver's. */
static int make_chan_table(struct cgr__cc *cc)
{
	cgr_graph *g = cc->g;
	struct cgr_compiled *c = cc->c;
	size_t maxch = g->noutputs;

	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next)
		maxch += nin_expanded(c, t) *
			 (t->coll && cc->spans[t->id] ? t->nmembers + 1 : 1);
	cc->chcap = maxch + 1;
	cc->ch_port = cgr__c_alloc(c, cc->chcap * sizeof(unsigned));
	cc->ch_w = cgr__c_alloc(c, cc->chcap * sizeof(cgr_worker *));
	cc->ch_next = cgr__c_alloc(c, cc->chcap * sizeof(unsigned));
	cc->ch_use = cgr__c_alloc(c, cc->chcap * sizeof(uint32_t));
	cc->ch_head = cgr__c_alloc(c, (c->nports + 1) * sizeof(unsigned));
	if (cc->ch_port == NULL || cc->ch_w == NULL || cc->ch_next == NULL ||
	    cc->ch_head == NULL || cc->ch_use == NULL)
		return -ENOMEM;
	memset(cc->ch_use, 0, cc->chcap * sizeof(uint32_t));
	for (size_t i = 0; i < c->nports; i++)
		cc->ch_head[i] = CGR__NO_CHAN;
	for (size_t k = 0; k < cc->ntasks; k++) {
		struct cgr__task *t = cc->order[k];
		for (size_t i = 0; i < t->nin; i++) {
			cgr_node *n = t->in[i];
			cgr_worker *cw = cgr__in_worker(t, i);
			if (n->kind == CGR__NODE_CONST || node_owner(n) == cw)
				continue;
			if (!node_is_all(n)) {
				chan_use(cc, cc->node_port[n->id], cw,
					 CGR__SLICE_WHOLE);
				continue;
			}
			for (unsigned a = 0; a < c->nargs; a++)
				chan_use(cc, a, cw, CGR__SLICE_WHOLE);
		}
		if (t->coll && cc->spans[t->id])
			spans_chans(cc, t);
	}
	for (size_t i = 0; i < g->noutputs; i++)
		chan_use(cc, cc->node_port[g->outputs[i]->id], NULL,
			 CGR__SLICE_WHOLE);
	return 0;
}

static int make_chans(struct cgr__cc *cc)
{
	struct cgr_compiled *c = cc->c;
	size_t rsize = cgr__chan_memsize(c->nslots);
	int ret;

	c->nchans = cc->nch;
	c->chans = cgr__c_alloc(c, (cc->nch + 1) * sizeof(*c->chans));
	c->chan_slice = cgr__c_alloc(c, (cc->nch + 1) * sizeof(uint32_t));
	if (c->chans == NULL || c->chan_slice == NULL || rsize == 0)
		return -ENOMEM;
	for (size_t i = 0; i < cc->nch; i++) {
		c->chan_slice[i] = cc->ch_use[i] == CGR__SLICE_WHOLE ?
					   0 :
					   cc->ch_use[i];
		void *mem = cgr__c_salloc(c, rsize);
		if (mem == NULL)
			return -ENOMEM;
		ret = cgr__chan_init(
		    &c->chans[i], mem, rsize, c->nslots, cc->ch_port[i],
		    cgr__reader_bell(c, cc->ch_w[i]),
		    cgr__c_attached(c));
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* The driver's side: each argument's fan-out, and the output channels
 * (distinct; drv_mult counts the outputs each carries). */
static int make_driver(struct cgr__cc *cc)
{
	cgr_graph *g = cc->g;
	struct cgr_compiled *c = cc->c;

	c->arg_chans = cgr__c_alloc(c, (c->nargs + 1) * sizeof(unsigned *));
	c->arg_nchans = cgr__c_alloc(c, (c->nargs + 1) * sizeof(size_t));
	if (c->arg_chans == NULL || c->arg_nchans == NULL)
		return -ENOMEM;
	for (unsigned a = 0; a < c->nargs; a++) {
		size_t k = 0;
		unsigned i;
		for (i = cc->ch_head[a]; i != CGR__NO_CHAN; i = cc->ch_next[i])
			k++;
		c->arg_chans[a] = cgr__c_alloc(c, (k + 1) * sizeof(unsigned));
		if (c->arg_chans[a] == NULL)
			return -ENOMEM;
		k = 0;
		for (i = cc->ch_head[a]; i != CGR__NO_CHAN; i = cc->ch_next[i])
			if (cc->ch_w[i] != NULL)
				c->arg_chans[a][k++] = i;
		c->arg_nchans[a] = k;
	}
	c->nout = g->noutputs;
	c->out_port = cgr__c_alloc(c, c->nout * sizeof(unsigned));
	if (c->seg != NULL &&
	    (c->out_views = cgr__c_alloc(c, c->nbufs * c->nout *
						    sizeof(*c->out_views))) ==
		    NULL)
		return -ENOMEM;
	c->out_chan = cgr__c_alloc(c, c->nout * sizeof(unsigned));
	c->drv_chans = cgr__c_alloc(c, c->nout * sizeof(unsigned));
	c->drv_mult = cgr__c_alloc(c, c->nout * sizeof(uint32_t));
	if (c->out_port == NULL || c->out_chan == NULL ||
	    c->drv_chans == NULL || c->drv_mult == NULL)
		return -ENOMEM;
	for (size_t o = 0; o < c->nout; o++) {
		unsigned port = cc->node_port[g->outputs[o]->id];
		int ch = chan_get(cc, port, NULL);
		size_t j;
		c->out_port[o] = port;
		for (j = 0; j < c->ndrv_chans; j++)
			if (c->drv_chans[j] == (unsigned)ch)
				break;
		if (j == c->ndrv_chans)
			c->drv_chans[c->ndrv_chans++] = (unsigned)ch;
		c->drv_mult[j]++;
		c->out_chan[o] = (unsigned)j;
	}
	return 0;
}

int cgr__lower_ports(struct cgr__cc *cc)
{
	int ret = make_ports(cc);

	if (ret == 0)
		ret = make_chan_table(cc);
	if (ret == 0)
		ret = make_chans(cc);
	if (ret == 0)
		ret = make_driver(cc);
	return ret;
}

/* ---- programs ------------------------------------------------------- */

/* One program under construction. */
struct pl {
	struct cgr__cc *cc;
	struct cgr__prog *p;
	cgr_worker *w;
	/* Per channel: its reader's program reads it already (one array
	 * for all programs: a channel has one reader). */
	bool *read;
	unsigned *wch; /* scratch: the channels of one WRITE */
};

/* Adds a READ for (port -> w) unless this program already reads it. */
static int add_read(struct pl *pl, unsigned port)
{
	int ch = chan_get(pl->cc, port, pl->w);
	struct cgr__op *op;

	if (ch < 0)
		return ch;
	if (pl->read[ch])
		return 0;
	pl->read[ch] = true;
	op = &pl->p->ops[pl->p->nops++];
	op->kind = CGR__OP_READ;
	op->chan = (unsigned)ch;
	return 0;
}

/* READs for input a of t, if w reads it over a channel (first use). */
static int add_reads(struct pl *pl, const struct cgr__task *t, size_t a)
{
	const struct cgr_compiled *c = pl->cc->c;
	cgr_node *n = t->in[a];
	unsigned first = pl->cc->node_port[n->id], cnt = 1;
	int ret = 0;

	if (n->kind == CGR__NODE_CONST || node_owner(n) == pl->w ||
	    cgr__in_worker(t, a) != pl->w)
		return 0;
	if (node_is_all(n)) {
		first = 0;
		cnt = (unsigned)c->nargs;
	}
	for (unsigned q = first; q < first + cnt && ret == 0; q++)
		ret = add_read(pl, q);
	return ret;
}

static int cmp_unsigned(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;

	return x < y ? -1 : x > y;
}

/* Adds a WRITE to every channel fed by an output of t that w produces,
 * in channel order: the channels of each such output's port. */
static int add_write(struct pl *pl, const struct cgr__task *t)
{
	struct cgr__cc *cc = pl->cc;
	size_t nw = 0;
	struct cgr__op *op;

	for (size_t o = 0; o < t->nout; o++) {
		if (cgr__out_worker(t, o) != pl->w)
			continue;
		for (unsigned ch = cc->ch_head[cc->node_port[t->out[o]->id]];
		     ch != CGR__NO_CHAN; ch = cc->ch_next[ch])
			pl->wch[nw++] = ch;
	}
	if (nw == 0)
		return 0;
	qsort(pl->wch, nw, sizeof(*pl->wch), cmp_unsigned);
	op = &pl->p->ops[pl->p->nops++];
	op->kind = CGR__OP_WRITE;
	op->chans = cgr__c_alloc(cc->c, nw * sizeof(unsigned));
	if (op->chans == NULL)
		return -ENOMEM;
	memcpy(op->chans, pl->wch, nw * sizeof(unsigned));
	op->nchans = nw;
	return 0;
}

/* The share of collective t (rank `rank`) of this program's worker. */
static int lower_coll(struct pl *pl, struct cgr__task *t, int rank)
{
	struct cgr__cc *cc = pl->cc;
	struct cgr_compiled *c = cc->c;
	struct cgr__coll_rt *cr = cgr__c_alloc(c, sizeof(*cr));
	const cgr_comm *user = t->cp.comm;
	struct cgr__op *op;

	if (cr == NULL || (cr->name = cgr__c_strdup(c, t->name)) == NULL)
		return -ENOMEM;
	cr->c = c;
	cr->prog = pl->p;
	cr->task_id = t->id;
	cr->w = pl->w;
	cr->rank = rank;
	cr->n = (int)t->nmembers;
	cr->kind = t->coll;
	cr->op = t->cp.op;
	cr->root = t->cp.root;
	cr->static_shape = t->cp.static_shape != 0;
	/* Agreeing on shapes every execution joins everybody; so does the
	 * backend's own protocol if it says so. */
	cr->joins_all = !cr->static_shape ||
			cgr__backend_joins_all(
				user != NULL	      ? user->backend :
				cc->nccl[t->id] ? CGR_BACKEND_NCCL :
						  CGR_BACKEND_CPU);
	cr->overlap = t->cp.overlap;
	cr->nccl = cc->nccl[t->id];
	cr->spans = cc->spans[t->id];
	cr->far = cr->spans && user != NULL;
	if (cr->spans) {
		/* Finishing proves only that its inputs were made; it runs
		 * on the thread, after the READs of them. */
		cr->joins_all = false;
		cr->overlap = CGR_OVERLAP_OFF;
	}
	cr->cap = cgr__port_cap(t->max_out_bytes ? t->max_out_bytes :
						   c->p.max_value_bytes);
	cr->k = t->cp.ntensors;
	cr->edge = t->edge;
	cr->cstream = !cr->edge		? CGR__S_COLL :
		      rank == t->cp.root ? CGR__S_SEND :
					   CGR__S_RECV;
	cr->sclass = cr->cstream;
	cr->root_port = t->edge ? cc->node_port[t->in[0]->id] : CGR__NO_PORT;
	cr->in_ports = cgr__c_alloc(c, cr->k * sizeof(unsigned));
	cr->out_ports = cgr__c_alloc(c, cr->k * sizeof(unsigned));
	cr->all_in_ports = cgr__c_alloc(c, (size_t)cr->n * cr->k *
						   sizeof(unsigned));
	if (cr->in_ports == NULL || cr->out_ports == NULL ||
	    cr->all_in_ports == NULL)
		return -ENOMEM;
	for (size_t j = 0; j < cr->k; j++)
		cr->in_ports[j] = cr->out_ports[j] = CGR__NO_PORT;
	for (size_t j = 0; j < (size_t)cr->n * cr->k; j++)
		cr->all_in_ports[j] = CGR__NO_PORT;
	for (size_t a = 0; a < t->nin; a++) {
		int r = cgr__task_rank(t, cgr__in_worker(t, a));
		if (r >= 0)
			cr->all_in_ports[(size_t)r * cr->k + a % cr->k] =
				cc->node_port[t->in[a]->id];
		if (cgr__in_worker(t, a) == pl->w)
			cr->in_ports[a % cr->k] = cc->node_port[t->in[a]->id];
	}
	for (size_t o = 0; o < t->nout; o++)
		if (cgr__out_worker(t, o) == pl->w &&
		    !(t->edge && (int)(o / cr->k) == t->cp.root))
			cr->out_ports[o % cr->k] = cc->node_port[t->out[o]->id];
	op = &pl->p->ops[pl->p->nops++];
	op->kind = CGR__OP_COLL;
	op->coll = cr;
	return 0;
}

/* Plain task t's context (its COMPUTE), on this program's worker. */
static int lower_task(struct pl *pl, struct cgr__task *t)
{
	struct cgr_compiled *c = pl->cc->c;
	struct cgr__prog *p = pl->p;
	struct cgr_task_ctx *tc = &p->tcs[p->ntcs++];
	size_t nin = nin_expanded(c, t), j = 0;
	struct cgr__op *op;

	tc->c = c;
	tc->task_id = t->id;
	tc->w = pl->w;
	tc->name = cgr__c_strdup(c, t->name);
	tc->in_ports = cgr__c_alloc(c, (nin + 1) * sizeof(unsigned));
	tc->out_ports = cgr__c_alloc(c, t->nout * sizeof(unsigned));
	if (tc->name == NULL || tc->in_ports == NULL || tc->out_ports == NULL)
		return -ENOMEM;
	tc->nin = nin;
	tc->nout = t->nout;
	tc->stream = (t->flags & CGR_TASK_STREAM) != 0;
	tc->device = (t->flags & CGR_TASK_DEVICE) != 0;
	tc->async = tc->stream && c->p.overlap;
	for (size_t a = 0; a < t->nin; a++) {
		cgr_node *n = t->in[a];
		if (!node_is_all(n)) {
			tc->in_ports[j++] = pl->cc->node_port[n->id];
			continue;
		}
		for (unsigned q = 0; q < c->nargs; q++)
			tc->in_ports[j++] = q;
	}
	for (size_t o = 0; o < t->nout; o++)
		tc->out_ports[o] = pl->cc->node_port[t->out[o]->id];
	op = &p->ops[p->nops++];
	op->kind = CGR__OP_COMPUTE;
	op->tc = tc;
	return 0;
}

/* Builds the program of worker w: its share of every task, in the global
 * order (ntasks of them, reading nreads channels). */
static int lower_prog(struct pl *pl, size_t ntasks, size_t nreads)
{
	struct cgr__cc *cc = pl->cc;
	struct cgr_compiled *c = cc->c;
	struct cgr__prog *p = pl->p;
	int ret;

	/* Every channel it reads read once, plus one COMPUTE or COLL and
	 * one WRITE per task. */
	p->ops = cgr__c_alloc(c, (nreads + 2 * ntasks + 1) * sizeof(*p->ops));
	p->tcs = cgr__c_alloc(c, (ntasks + 1) * sizeof(*p->tcs));
	if (p->ops == NULL || p->tcs == NULL)
		return -ENOMEM;
	p->c = c;
	p->w = pl->w;
	for (size_t i = 0; i < cc->ntasks; i++) {
		struct cgr__task *t = cc->order[i];
		int rank = cgr__task_rank(t, pl->w);

		if (rank < 0)
			continue;
		ret = 0;
		for (size_t a = 0; a < t->nin && ret == 0; a++)
			ret = add_reads(pl, t, a);
		/* Across hosts: every member's input (spans_chans). */
		for (size_t a = 0; a < t->nin && ret == 0; a++)
			if (spans_reads(cc, t, a, pl->w))
				ret = add_read(pl, cc->node_port[t->in[a]->id]);
		if (ret == 0)
			ret = t->coll ? lower_coll(pl, t, rank) :
					lower_task(pl, t);
		if (ret == 0)
			ret = add_write(pl, t);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* The programs' owners, in first-use order, and each collective's board. */
static int lower_members(struct cgr__cc *cc)
{
	struct cgr_compiled *c = cc->c;
	struct cgr__bell *bells[CGR_MAX_RANKS];

	cc->wprog = cgr__c_alloc(c, (c->ctx->nworkers + 1) * sizeof(uint32_t));
	if (cc->wprog == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < c->ctx->nworkers; i++)
		cc->wprog[i] = CGR__NO_CHAN;
	for (size_t i = 0; i < cc->ntasks; i++) {
		struct cgr__task *t = cc->order[i];
		size_t nm = t->coll ? t->nmembers : 1, bs;
		for (size_t m = 0; m < nm; m++) {
			cgr_worker *w = t->coll ? t->members[m] : t->w;
			if (cc->wprog[w->index] == CGR__NO_CHAN) {
				cc->wprog[w->index] = (uint32_t)cc->nw;
				cc->ws[cc->nw++] = w;
			}
			bells[m] = cgr__wbell(c, w);
		}
		if (!t->coll)
			continue;
		bs = cgr__board_size(t->nmembers, t->cp.ntensors, c->nslots);
		cc->boards[t->id] = cgr__c_salloc(c, bs);
		if (cc->boards[t->id] == NULL)
			return -ENOMEM;
		if (cgr__c_attached(c) &&
		    !cgr__board_is(cc->boards[t->id], t->nmembers,
				   t->cp.ntensors, c->nslots))
			return cgr__graph_fail(cc->g, -EPROTO,
					       "%s: its agreement board in the "
					       "driver's segment has another "
					       "geometry",
					       t->name);
		if (!cgr__c_attached(c))
			cgr__board_init(cc->boards[t->id], t->nmembers,
				t->cp.ntensors, c->nslots, bells);
	}
	return 0;
}

int cgr__lower_progs(struct cgr__cc *cc)
{
	struct cgr_compiled *c = cc->c;
	int ret = lower_members(cc);

	if (ret < 0)
		return ret;
	struct cgr__arena *a = &c->ctx->arena;
	size_t *ntasks, *nreads, maxw = 1, sz;
	bool *read;
	unsigned *wch;

	/* The working programs: what runs is loaded from the plan. */
	cgr__c_scratch(c, true);
	c->progs = cgr__c_alloc(c, (cc->nw + 1) * sizeof(*c->progs));
	ntasks = cgr__c_alloc(c, 2 * (cc->nw + 1) * sizeof(size_t));
	read = cgr__c_alloc(c, cc->nch + 1);
	if (c->progs == NULL || ntasks == NULL || read == NULL)
		return -ENOMEM;
	nreads = ntasks + cc->nw + 1;
	c->nprogs = cc->nw;
	/* What each program holds, and the most channels one WRITE has. */
	for (size_t i = 0; i < cc->ntasks; i++) {
		const struct cgr__task *t = cc->order[i];
		size_t nm = t->coll ? t->nmembers : 1, nw = 0;
		for (size_t m = 0; m < nm; m++)
			ntasks[cc->wprog[(t->coll ? t->members[m] : t->w)
						 ->index]]++;
		for (size_t o = 0; o < t->nout; o++)
			for (unsigned ch = cc->ch_head[cc->node_port
							       [t->out[o]->id]];
			     ch != CGR__NO_CHAN; ch = cc->ch_next[ch])
				nw++;
		maxw = nw > maxw ? nw : maxw;
	}
	for (size_t i = 0; i < cc->nch; i++)
		if (cc->ch_w[i] != NULL)
			nreads[cc->wprog[cc->ch_w[i]->index]]++;
	sz = maxw * sizeof(unsigned);
	wch = cgr__alloc(a, sz, 16);
	if (wch == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < cc->nw && ret == 0; i++) {
		struct pl pl = { cc, &c->progs[i], cc->ws[i], read, wch };
		ret = lower_prog(&pl, ntasks[i], nreads[i]);
	}
	cgr__free(a, wch, sz, 16);
	return ret;
}
