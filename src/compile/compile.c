/*
 * compile/compile.c: from a validated graph to running programs.
 *
 * Validation: inputs set, workers alive and free, outputs declared, no
 * cycle (named), every task reaches an output (named), every argument used
 * (named).  Lowering: a topological order of the tasks that prefers bind
 * order; one value port per argument, constant and task output, each with
 * one buffer slot per in-flight execution; one SPSC ring per (port,
 * consuming worker) pair and per port the driver reads; one program of
 * READ / COMPUTE / WRITE operations per worker, in the global order
 * restricted to that worker.
 *
 * Why that cannot deadlock: rings hold max_inflight messages, and the
 * driver admits at most max_inflight executions, so a WRITE never waits.
 * Every program follows one global order, so the earliest unfinished
 * (execution, position) operation anywhere has all of its inputs.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "graph/internal.h"

#define CGR__DEF_INFLIGHT 8u
#define CGR__MAX_INFLIGHT 4096u
#define CGR__DEF_VALUE_BYTES (64u * 1024)
#define CGR__MIN_VALUE_BYTES 256u /* room for error messages */
#define CGR__DEF_TIMEOUT_NS (10ll * 1000000000)
#define CGR__DEF_SPIN_NS (50ll * 1000)

void *cgr__c_alloc(struct cgr_compiled *c, size_t size, size_t align)
{
	struct cgr__arena *a = &c->ctx->arena;
	void *p;

	if (c->nallocs == c->allocs_cap) {
		size_t ncap = c->allocs_cap ? c->allocs_cap * 2 : 64;
		void **na = cgr__alloc(a, ncap * sizeof(void *), 16);
		size_t *ns = cgr__alloc(a, ncap * sizeof(size_t), 16);
		if (na == NULL || ns == NULL) {
			cgr__free(a, na, ncap * sizeof(void *), 16);
			cgr__free(a, ns, ncap * sizeof(size_t), 16);
			return NULL;
		}
		if (c->nallocs) {
			memcpy(na, c->allocs, c->nallocs * sizeof(void *));
			memcpy(ns, c->alloc_sizes, c->nallocs * sizeof(size_t));
		}
		cgr__free(a, c->allocs, c->allocs_cap * sizeof(void *), 16);
		cgr__free(a, c->alloc_sizes, c->allocs_cap * sizeof(size_t),
			  16);
		c->allocs = na;
		c->alloc_sizes = ns;
		c->allocs_cap = ncap;
	}
	p = cgr__alloc(a, size, 64);
	if (p == NULL)
		return NULL;
	(void)align; /* every block is 64-byte aligned */
	c->allocs[c->nallocs] = p;
	c->alloc_sizes[c->nallocs] = size;
	c->nallocs++;
	return p;
}

char *cgr__c_strdup(struct cgr_compiled *c, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = cgr__c_alloc(c, n, 16);
	if (d != NULL)
		memcpy(d, s, n);
	return d;
}

static void cgr__compiled_free(struct cgr_compiled *c)
{
	struct cgr__arena *a = &c->ctx->arena;
	cgr_ctx *ctx = c->ctx;

	for (size_t i = 0; i < c->nprogs; i++) {
		struct cgr__prog *p = &c->progs[i];
		for (int s = 0; s < CGR__NSTREAMS_ALL; s++)
			cgr_stream_destroy(p->streams[s]);
		for (size_t t = 0; t < p->ntcs; t++)
			for (uint32_t q = 0; p->tcs[t].ev != NULL &&
					     q < c->nslots; q++)
				cgr_event_destroy(p->tcs[t].ev[q]);
	}
	for (size_t i = 0; i < c->ncomms; i++)
		cgr_comm_destroy(c->comms[i]);
	for (size_t i = 0; i < c->nallocs; i++)
		cgr__free(a, c->allocs[i], c->alloc_sizes[i], 64);
	cgr__free(a, c->allocs, c->allocs_cap * sizeof(void *), 16);
	cgr__free(a, c->alloc_sizes, c->allocs_cap * sizeof(size_t), 16);
	cgr__free(a, c, sizeof(*c), 64);
	cgr__ctx_put(ctx);
}

void cgr__compiled_unref(struct cgr_compiled *c)
{
	/* Acq_rel: the last owner sees every other owner's writes. */
	if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
		cgr__compiled_free(c);
}

/* ---- validation --------------------------------------------------- */

static int cgr__check_worker(cgr_graph *g, struct cgr__task *t,
			     cgr_worker *w)
{
	if (w->destroyed || w->abandoned)
		return cgr__graph_fail(g, CGR_EWORKERGONE,
				       "%s %s is bound to worker %s, which was "
				       "%s",
				       cgr__coll_name(t->coll), t->name,
				       w->name,
				       w->abandoned ? "abandoned" :
						      "destroyed");
	if (w->busy_with != NULL && !w->busy_with->torn_down)
		return cgr__graph_fail(g, -EBUSY,
				       "%s %s: worker %s already serves "
				       "another compiled graph",
				       cgr__coll_name(t->coll), t->name,
				       w->name);
	return 0;
}

static int cgr__check_tasks(cgr_graph *g)
{
	int ret;

	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		for (size_t i = 0; i < t->nin; i++)
			if (t->in[i] == NULL)
				return cgr__graph_fail(g, -EINVAL,
						       "input %zu of task %s "
						       "is not set",
						       i, t->name);
		if (!t->coll) {
			ret = cgr__check_worker(g, t, t->w);
			if (ret < 0)
				return ret;
			continue;
		}
		for (size_t i = 0; i < t->nmembers; i++) {
			ret = cgr__check_worker(g, t, t->members[i]);
			if (ret < 0)
				return ret;
		}
	}
	return 0;
}

static struct cgr__task *cgr__leftover_producer(struct cgr__task *t)
{
	for (size_t i = 0; i < t->nin; i++)
		if (t->in[i]->kind == CGR__NODE_TASK && !t->in[i]->task->mark)
			return t->in[i]->task;
	return t; /* unreachable: Kahn left t only for such a producer */
}

/*
 * Kahn's algorithm, always taking the ready task bound first.  On a cycle,
 * walks back from a task left over (each has a left-over producer) until a
 * task repeats, and names that loop.
 */
static int cgr__topo(cgr_graph *g, struct cgr__task **order)
{
	struct cgr__task *t;
	unsigned n = 0;

	for (t = g->tasks; t != NULL; t = t->next) {
		t->indeg = 0;
		t->mark = 0;
		for (size_t i = 0; i < t->nin; i++)
			if (t->in[i]->kind == CGR__NODE_TASK)
				t->indeg++;
	}
	while (n < g->ntasks) {
		struct cgr__task *best = NULL;
		for (t = g->tasks; t != NULL; t = t->next)
			if (!t->mark && t->indeg == 0) {
				best = t; /* list is in bind order */
				break;
			}
		if (best == NULL)
			break;
		best->mark = 1;
		best->topo = n;
		order[n++] = best;
		for (t = g->tasks; t != NULL; t = t->next)
			for (size_t i = 0; i < t->nin; i++)
				if (t->in[i]->kind == CGR__NODE_TASK &&
				    t->in[i]->task == best)
					t->indeg--;
	}
	if (n == g->ntasks)
		return 0;

	/* Cycle: every left-over task has a left-over producer.  Walk to
	 * the first such producer until a task repeats: that task is on a
	 * loop, which the same walk traces again. */
	struct cgr__task *path[64], *start;
	char buf[400];
	size_t np = 0, len = 0;

	for (t = g->tasks; t != NULL && t->mark; t = t->next)
		;
	for (struct cgr__task *u = g->tasks; u != NULL; u = u->next)
		u->indeg = 0; /* reused as "visited" */
	while (t->indeg == 0) {
		t->indeg = 1;
		t = cgr__leftover_producer(t);
	}
	start = t;
	do {
		if (np < CGR__ARRAY_SIZE(path))
			path[np++] = t;
		t = cgr__leftover_producer(t);
	} while (t != start);
	/* path runs consumer -> producer; print it in data-flow order. */
	buf[0] = 0;
	for (size_t i = np; i-- > 0 && len < sizeof(buf);)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s -> ",
					path[i]->name);
	if (len < sizeof(buf))
		snprintf(buf + len, sizeof(buf) - len, "%s",
			 path[np - 1]->name);
	return cgr__graph_fail(g, CGR_ECYCLE, "cycle: %s", buf);
}

static int cgr__check_reach(cgr_graph *g, struct cgr__task **order)
{
	char buf[300];
	size_t len = 0, bad = 0;

	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next)
		t->live = false;
	for (size_t i = 0; i < g->noutputs; i++)
		g->outputs[i]->task->live = true;
	/* Reverse topological sweep: a producer is live if a consumer is. */
	for (unsigned k = g->ntasks; k-- > 0;) {
		struct cgr__task *t = order[k];
		if (!t->live)
			continue;
		for (size_t i = 0; i < t->nin; i++)
			if (t->in[i]->kind == CGR__NODE_TASK)
				t->in[i]->task->live = true;
	}
	buf[0] = 0;
	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		if (t->live)
			continue;
		if (bad++ < 8 && len < sizeof(buf))
			len += (size_t)snprintf(buf + len, sizeof(buf) - len,
					     "%s%s", bad > 1 ? ", " : "",
					     t->name);
	}
	if (bad)
		return cgr__graph_fail(g, CGR_EUNREACHABLE,
				       "%zu task(s) with no path to a graph "
				       "output: %s",
				       bad, buf);
	return 0;
}

/* The number of arguments, and a check that each is used. */
static int cgr__check_args(cgr_graph *g, size_t *nargs)
{
	bool all = false;
	int max = -1;
	unsigned char used[65536 / 8];

	memset(used, 0, sizeof(used));
	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next)
		for (size_t i = 0; i < t->nin; i++) {
			cgr_node *n = t->in[i];
			if (n->kind != CGR__NODE_INPUT)
				continue;
			if (n->index == CGR_INPUT_ALL) {
				all = true;
				continue;
			}
			used[n->index / 8] |= (unsigned char)(1u << (n->index % 8));
		}
	for (cgr_node *n = g->nodes; n != NULL; n = n->next)
		if (n->kind == CGR__NODE_INPUT && n->index > max)
			max = n->index;
	*nargs = max >= 0 ? (size_t)max + 1 : (all ? 1 : 0);
	if (all)
		return 0;
	for (size_t i = 0; i < *nargs; i++)
		if (!(used[i / 8] & (1u << (i % 8))))
			return cgr__graph_fail(g, CGR_EUNUSEDARG,
					       "argument %zu (input[%zu]) is "
					       "not used by any task",
					       i, i);
	return 0;
}

/* ---- lowering ------------------------------------------------------ */

static int cgr__params(cgr_compile_params *p, const cgr_compile_params *in)
{
	if (in != NULL && in->size < sizeof(size_t))
		return -EINVAL;
	CGR__PARAMS_COPY(*p, in,
			 ((cgr_compile_params)CGR_COMPILE_PARAMS_INIT));
	if (p->max_inflight == 0)
		p->max_inflight = CGR__DEF_INFLIGHT;
	if (p->max_inflight > CGR__MAX_INFLIGHT)
		return -EINVAL;
	if (p->max_value_bytes == 0)
		p->max_value_bytes = CGR__DEF_VALUE_BYTES;
	if (p->max_value_bytes > ((size_t)1 << 40))
		return -EINVAL;
	if (p->max_value_bytes < CGR__MIN_VALUE_BYTES)
		p->max_value_bytes = CGR__MIN_VALUE_BYTES;
	if (p->submit_timeout_ns < 0)
		p->submit_timeout_ns = CGR__DEF_TIMEOUT_NS;
	if (p->get_timeout_ns < 0)
		p->get_timeout_ns = CGR__DEF_TIMEOUT_NS;
	if (p->spin_ns < 0)
		p->spin_ns = CGR__DEF_SPIN_NS;
	if (p->trace_events > (1u << 24) || p->overlap < 0 || p->overlap > 1 ||
	    p->sim_comm_ns < 0 || p->sim_comm_ns > 10ll * 1000000000)
		return -EINVAL;
	if (p->wait_mode != CGR_WAIT_ADAPTIVE && p->wait_mode != CGR_WAIT_BUSY &&
	    p->wait_mode != CGR_WAIT_BLOCK)
		return -EINVAL;
	return 0;
}

struct cgr__lower {
	bool plan_only; /* no communicators: the programs are only checked */
	cgr_graph *g;
	struct cgr_compiled *c;
	struct cgr__task **order;
	unsigned *node_port; /* node id -> port (inputs: arg port) */
	/* channel table under construction: (port, consumer) */
	unsigned *ch_port;
	cgr_worker **ch_w; /* NULL: the driver */
	size_t nch, chcap;
};

static size_t cgr__cap_round(size_t cap)
{
	return CGR__ALIGN_UP(cap < CGR__MIN_VALUE_BYTES ? CGR__MIN_VALUE_BYTES :
							  cap,
			     64);
}

static int cgr__port_init(struct cgr_compiled *c, struct cgr__port *p,
			  size_t cap, uint32_t nslots, const char *name)
{
	cap = cgr__cap_round(cap);
	p->cap = cap;
	p->slot_bytes = CGR__SLOT_HDR + cap;
	p->nslots = nslots;
	p->mask = nslots - 1;
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->mem = cgr__c_alloc(c, p->slot_bytes * nslots, 64);
	if (p->mem == NULL)
		return -ENOMEM;
	/* Touch every page now: a first touch in an execution would be a
	 * page fault, an allocation by the kernel on the hot path. */
	memset(p->mem, 0, p->slot_bytes * nslots);
	return 0;
}

/* Finds or adds the channel (port -> consumer).  Returns its index. */
static int cgr__chan_get(struct cgr__lower *L, unsigned port, cgr_worker *w)
{
	for (size_t i = 0; i < L->nch; i++)
		if (L->ch_port[i] == port && L->ch_w[i] == w)
			return (int)i;
	if (L->nch == L->chcap)
		return -ENOSPC;
	L->ch_port[L->nch] = port;
	L->ch_w[L->nch] = w;
	return (int)L->nch++;
}

/* The worker producing port (NULL: the driver; constants never travel). */
static cgr_worker *cgr__port_owner(struct cgr__lower *L, cgr_node *n)
{
	(void)L;
	return n->kind == CGR__NODE_TASK ? cgr__out_worker(n->task, n->port) :
					   NULL;
}

/* Expanded input count of t: CGR_INPUT_ALL stands for every argument. */
static size_t cgr__nin_expanded(struct cgr_compiled *c, struct cgr__task *t)
{
	size_t n = 0;
	for (size_t i = 0; i < t->nin; i++)
		n += (t->in[i]->kind == CGR__NODE_INPUT &&
		      t->in[i]->index == CGR_INPUT_ALL) ?
			     c->nargs :
			     1;
	return n;
}

static int cgr__lower(struct cgr__lower *L)
{
	cgr_graph *g = L->g;
	struct cgr_compiled *c = L->c;
	struct cgr__port *ports;
	size_t nports = c->nargs, maxch;
	unsigned pi;
	int ret;

	/* Ports: arguments first, then constants and task outputs. */
	for (cgr_node *n = g->nodes; n != NULL; n = n->next)
		if (n->kind != CGR__NODE_INPUT)
			nports++;
	ports = cgr__c_alloc(c, (nports ? nports : 1) * sizeof(*ports), 64);
	L->node_port = cgr__c_alloc(c, (g->nnodes + 1) * sizeof(unsigned), 64);
	if (ports == NULL || L->node_port == NULL)
		return -ENOMEM;
	c->ports = ports;
	c->nports = nports;
	c->arg_port = cgr__c_alloc(c, (c->nargs + 1) * sizeof(unsigned), 64);
	if (c->arg_port == NULL)
		return -ENOMEM;
	for (pi = 0; pi < c->nargs; pi++) {
		char name[32];
		snprintf(name, sizeof(name), "input[%u]", pi);
		ret = cgr__port_init(c, &ports[pi], c->p.max_value_bytes,
				     c->nslots, name);
		if (ret < 0)
			return ret;
		c->arg_port[pi] = pi;
	}
	for (cgr_node *n = g->nodes; n != NULL; n = n->next) {
		if (n->kind == CGR__NODE_INPUT) {
			L->node_port[n->id] =
				n->index == CGR_INPUT_ALL ? 0 : (unsigned)n->index;
			continue;
		}
		if (n->kind == CGR__NODE_CONST) {
			struct cgr__slot_hdr *h = n->cdata;
			ret = cgr__port_init(c, &ports[pi],
					     n->cdata_len - CGR__SLOT_HDR, 1,
					     n->name);
			if (ret < 0)
				return ret;
			memcpy(ports[pi].mem, n->cdata,
			       CGR__SLOT_HDR + (size_t)h->len);
		} else {
			size_t cap = n->task->max_out_bytes ?
					     n->task->max_out_bytes :
					     c->p.max_value_bytes;
			ret = cgr__port_init(c, &ports[pi], cap, c->nslots,
					     n->name);
			if (ret < 0)
				return ret;
		}
		L->node_port[n->id] = pi++;
	}

	/* Channels: at most one per (port, consumer). */
	maxch = g->noutputs;
	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next)
		maxch += cgr__nin_expanded(c, t);
	L->chcap = maxch + 1;
	L->ch_port = cgr__c_alloc(c, L->chcap * sizeof(unsigned), 64);
	L->ch_w = cgr__c_alloc(c, L->chcap * sizeof(cgr_worker *), 64);
	if (L->ch_port == NULL || L->ch_w == NULL)
		return -ENOMEM;
	for (unsigned k = 0; k < g->ntasks; k++) {
		struct cgr__task *t = L->order[k];
		for (size_t i = 0; i < t->nin; i++) {
			cgr_node *n = t->in[i];
			cgr_worker *cw = cgr__in_worker(t, i);
			if (n->kind == CGR__NODE_CONST ||
			    cgr__port_owner(L, n) == cw)
				continue;
			if (n->kind == CGR__NODE_INPUT &&
			    n->index == CGR_INPUT_ALL) {
				for (unsigned a = 0; a < c->nargs; a++)
					cgr__chan_get(L, a, cw);
			} else {
				cgr__chan_get(L, L->node_port[n->id], cw);
			}
		}
	}
	for (size_t i = 0; i < g->noutputs; i++)
		cgr__chan_get(L, L->node_port[g->outputs[i]->id], NULL);

	/* Rings. */
	uint32_t rcount = c->nslots < 2 ? 2 : c->nslots;
	size_t rsize = cgr_ring_memsize(rcount, sizeof(struct cgr__msg));
	c->nchans = L->nch;
	c->chans = cgr__c_alloc(c, (L->nch + 1) * sizeof(*c->chans), 64);
	if (c->chans == NULL || rsize == 0)
		return -ENOMEM;
	for (size_t i = 0; i < L->nch; i++) {
		struct cgr__chan *ch = &c->chans[i];
		ch->mem = cgr__c_alloc(c, rsize, 64);
		if (ch->mem == NULL)
			return -ENOMEM;
		ch->memsize = rsize;
		ret = cgr_ring_init(ch->mem, rsize, rcount,
				    sizeof(struct cgr__msg), 0);
		if (ret == 0)
			ret = cgr_ring_attach(&ch->prod, ch->mem, rsize,
					      CGR_RING_PRODUCER);
		if (ret == 0)
			ret = cgr_ring_attach(&ch->cons, ch->mem, rsize,
					      CGR_RING_CONSUMER);
		if (ret < 0)
			return ret;
		ch->port = L->ch_port[i];
		ch->consumer_bell =
			L->ch_w[i] != NULL ? &L->ch_w[i]->bell : &c->drv_bell;
	}

	/* Driver side: argument fan-out and output channels. */
	c->arg_chans = cgr__c_alloc(c, (c->nargs + 1) * sizeof(unsigned *), 64);
	c->arg_nchans = cgr__c_alloc(c, (c->nargs + 1) * sizeof(size_t), 64);
	if (c->arg_chans == NULL || c->arg_nchans == NULL)
		return -ENOMEM;
	for (unsigned a = 0; a < c->nargs; a++) {
		size_t k = 0;
		c->arg_chans[a] = cgr__c_alloc(c, (L->nch + 1) * sizeof(unsigned),
					       64);
		if (c->arg_chans[a] == NULL)
			return -ENOMEM;
		for (size_t i = 0; i < L->nch; i++)
			if (L->ch_port[i] == a && L->ch_w[i] != NULL)
				c->arg_chans[a][k++] = (unsigned)i;
		c->arg_nchans[a] = k;
	}
	c->nout = g->noutputs;
	c->out_port = cgr__c_alloc(c, c->nout * sizeof(unsigned), 64);
	c->out_chan = cgr__c_alloc(c, c->nout * sizeof(unsigned), 64);
	c->drv_chans = cgr__c_alloc(c, c->nout * sizeof(unsigned), 64);
	c->drv_mult = cgr__c_alloc(c, c->nout * sizeof(uint32_t), 64);
	if (c->out_port == NULL || c->out_chan == NULL ||
	    c->drv_chans == NULL || c->drv_mult == NULL)
		return -ENOMEM;
	for (size_t o = 0; o < c->nout; o++) {
		unsigned port = L->node_port[g->outputs[o]->id];
		int ch = cgr__chan_get(L, port, NULL);
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

/* Adds a READ for (port -> w) unless this program already reads it. */
static int cgr__add_read(struct cgr__lower *L, struct cgr__prog *p,
			 bool *read, unsigned port, cgr_worker *w)
{
	int ch = cgr__chan_get(L, port, w);

	if (ch < 0)
		return ch;
	if (read[ch])
		return 0;
	read[ch] = true;
	p->ops[p->nops].kind = CGR__OP_READ;
	p->ops[p->nops].chan = (unsigned)ch;
	p->nops++;
	return 0;
}

/* Adds a WRITE to every ring fed by an output of t that w produces. */
static int cgr__add_write(struct cgr_compiled *c, struct cgr__prog *p,
			  struct cgr__lower *L, struct cgr__task *t,
			  cgr_worker *w)
{
	size_t nw = 0;
	struct cgr__op *op;

	for (int pass = 0; pass < 2; pass++) {
		for (size_t ch = 0; ch < c->nchans; ch++)
			for (size_t o = 0; o < t->nout; o++) {
				if (cgr__out_worker(t, o) != w ||
				    c->chans[ch].port !=
					    L->node_port[t->out[o]->id])
					continue;
				if (pass == 0)
					nw++;
				else
					op->chans[op->nchans++] = (unsigned)ch;
			}
		if (pass == 0) {
			if (nw == 0)
				return 0;
			op = &p->ops[p->nops++];
			op->kind = CGR__OP_WRITE;
			op->chans = cgr__c_alloc(c, nw * sizeof(unsigned), 64);
			if (op->chans == NULL)
				return -ENOMEM;
		}
	}
	return 0;
}

/* The communicator for collective t: the user's, or one per member set. */
static int cgr__coll_comm(struct cgr_compiled *c, struct cgr__task *t,
			  cgr_comm **out)
{
	cgr_comm *comm = t->cp.comm;
	int ret;

	if (comm == NULL) {
		for (size_t i = 0; i < c->ncomms && comm == NULL; i++) {
			/* One per member set and use: collectives, or device
			 * edges from one root (the overlap pass puts each on
			 * one stream per member). */
			struct cgr__task *u = c->comm_owner[i];
			if (u->nmembers == t->nmembers &&
			    memcmp(u->members, t->members,
				   t->nmembers * sizeof(*t->members)) == 0 &&
			    u->edge == t->edge &&
			    (!t->edge || u->cp.root == t->cp.root))
				comm = c->comms[i];
		}
		if (comm == NULL) {
			ret = cgr_comm_create(c->ctx, t->members, t->nmembers,
					      CGR_BACKEND_CPU, &comm);
			if (ret < 0)
				return ret;
			c->comm_owner[c->ncomms] = t;
			c->comms[c->ncomms++] = comm;
		}
	}
	for (size_t i = 0; i < c->nused_comms; i++)
		if (c->used_comms[i] == comm) {
			*out = comm;
			return 0;
		}
	c->used_comms[c->nused_comms++] = comm;
	*out = comm;
	return 0;
}

/* Builds the program of worker w: its share of every task, in the global
 * order, so that all members meet at each collective in the same order. */
static int cgr__lower_prog(struct cgr__lower *L, struct cgr__prog *p,
			   cgr_worker *w)
{
	struct cgr_compiled *c = L->c;
	size_t ntasks = 0, k = 0;
	bool *read;
	int ret;

	for (unsigned i = 0; i < L->g->ntasks; i++)
		if (cgr__task_rank(L->order[i], w) >= 0)
			ntasks++;
	/* Upper bound on operations: every channel read once, plus one
	 * COMPUTE or COLL and one WRITE per task. */
	p->ops = cgr__c_alloc(c, (c->nchans + 2 * ntasks + 1) * sizeof(*p->ops),
			      64);
	p->tcs = cgr__c_alloc(c, (ntasks + 1) * sizeof(*p->tcs), 64);
	read = cgr__c_alloc(c, c->nchans + 1, 64);
	if (p->ops == NULL || p->tcs == NULL || read == NULL)
		return -ENOMEM;
	p->c = c;
	p->w = w;
	for (unsigned i = 0; i < L->g->ntasks; i++) {
		struct cgr__task *t = L->order[i];
		int rank = cgr__task_rank(t, w);

		if (rank < 0)
			continue;
		if (t->coll) {
			struct cgr__coll_rt *cr;
			for (size_t a = 0; a < t->nin; a++) {
				cgr_node *n = t->in[a];
				if (cgr__in_worker(t, a) != w ||
				    n->kind == CGR__NODE_CONST ||
				    cgr__port_owner(L, n) == w)
					continue;
				ret = cgr__add_read(L, p, read,
						    L->node_port[n->id], w);
				if (ret < 0)
					return ret;
			}
			cr = cgr__c_alloc(c, sizeof(*cr), 64);
			if (cr == NULL)
				return -ENOMEM;
			cr->c = c;
			cr->task = t;
			cr->w = w;
			cr->rank = rank;
			cr->n = (int)t->nmembers;
			cr->name = cgr__c_strdup(c, t->name);
			cr->kind = t->coll;
			cr->op = t->cp.op;
			cr->root = t->cp.root;
			cr->static_shape = t->cp.static_shape != 0;
			/* Agreeing on shapes every execution joins everybody;
			 * so does the backend's own protocol if it says so. */
			cr->joins_all = !cr->static_shape ||
					cgr__backend_joins_all(
						t->cp.comm != NULL ?
							t->cp.comm->backend :
							CGR_BACKEND_CPU);
			cr->overlap = t->cp.overlap;
			cr->board = t->board;
			cr->cap = cgr__cap_round(t->max_out_bytes ?
							 t->max_out_bytes :
							 c->p.max_value_bytes);
			if (cr->name == NULL)
				return -ENOMEM;
			cr->k = t->cp.ntensors;
			cr->edge = t->edge;
			cr->root_port = t->edge ? L->node_port[t->in[0]->id] :
						  CGR__NO_PORT;
			cr->in_ports = cgr__c_alloc(c, cr->k * sizeof(unsigned),
						    64);
			cr->out_ports = cgr__c_alloc(c, cr->k * sizeof(unsigned),
						     64);
			if (cr->in_ports == NULL || cr->out_ports == NULL)
				return -ENOMEM;
			for (size_t j = 0; j < cr->k; j++)
				cr->in_ports[j] = cr->out_ports[j] =
					CGR__NO_PORT;
			for (size_t a = 0; a < t->nin; a++)
				if (cgr__in_worker(t, a) == w)
					cr->in_ports[a % cr->k] =
						L->node_port[t->in[a]->id];
			for (size_t o = 0; o < t->nout; o++)
				if (cgr__out_worker(t, o) == w &&
				    !(t->edge &&
				      (int)(o / cr->k) == t->cp.root))
					cr->out_ports[o % cr->k] =
						L->node_port[t->out[o]->id];
			if (!L->plan_only) {
				ret = cgr__coll_comm(c, t, &cr->comm);
				if (ret < 0)
					return ret;
			}
			ret = cgr__coll_rt_init(cr);
			if (ret < 0)
				return ret;
			p->ops[p->nops].kind = CGR__OP_COLL;
			p->ops[p->nops].coll = cr;
			p->nops++;
			ret = cgr__add_write(c, p, L, t, w);
			if (ret < 0)
				return ret;
			continue;
		}

		struct cgr_task_ctx *tc = &p->tcs[k++];
		size_t nin = cgr__nin_expanded(c, t), j = 0;
		p->ntcs = k; /* so that a failure below frees its events */
		tc->c = c;
		tc->task = t;
		tc->w = w;
		tc->name = cgr__c_strdup(c, t->name);
		tc->in_ports = cgr__c_alloc(c, (nin + 1) * sizeof(unsigned), 64);
		tc->out_ports = cgr__c_alloc(c, t->nout * sizeof(unsigned), 64);
		tc->inv = cgr__c_alloc(c, (nin + 1) * sizeof(cgr_value), 64);
		tc->outv = cgr__c_alloc(c, t->nout * sizeof(cgr_value), 64);
		if (tc->name == NULL || tc->in_ports == NULL ||
		    tc->out_ports == NULL || tc->inv == NULL || tc->outv == NULL)
			return -ENOMEM;
		tc->nin = nin;
		tc->nout = t->nout;
		tc->fn = t->fn;
		tc->arg = t->arg;
		tc->prog = p;
		tc->stream = (t->flags & CGR_TASK_STREAM) != 0;
		tc->async = tc->stream && c->p.overlap;
		atomic_init(&tc->done, 0);
		if (tc->stream) {
			tc->jobs = cgr__c_alloc(
				c, c->nslots * sizeof(*tc->jobs), 64);
			tc->ev = cgr__c_alloc(c, c->nslots * sizeof(*tc->ev),
					      64);
			if (tc->jobs == NULL || tc->ev == NULL)
				return -ENOMEM;
			for (uint32_t q = 0; q < c->nslots; q++) {
				tc->jobs[q].tc = tc;
				if (!L->plan_only &&
				    (ret = cgr_event_create(c->ctx,
							    &tc->ev[q])) < 0)
					return ret;
			}
		}
		/* READs for inputs that arrive over a ring, first use only. */
		for (size_t a = 0; a < t->nin; a++) {
			cgr_node *n = t->in[a];
			unsigned first = L->node_port[n->id], cnt = 1;
			if (n->kind == CGR__NODE_INPUT &&
			    n->index == CGR_INPUT_ALL) {
				first = 0;
				cnt = (unsigned)c->nargs;
			}
			for (unsigned q = first; q < first + cnt; q++) {
				tc->in_ports[j++] = q;
				if (n->kind == CGR__NODE_CONST ||
				    cgr__port_owner(L, n) == w)
					continue;
				ret = cgr__add_read(L, p, read, q, w);
				if (ret < 0)
					return ret;
			}
		}
		for (size_t o = 0; o < t->nout; o++)
			tc->out_ports[o] = L->node_port[t->out[o]->id];
		p->ops[p->nops].kind = CGR__OP_COMPUTE;
		p->ops[p->nops].tc = tc;
		p->nops++;
		ret = cgr__add_write(c, p, L, t, w);
		if (ret < 0)
			return ret;
	}
	p->ntcs = k;
	if (c->p.trace_events > 0) {
		p->trace_cap = c->p.trace_events;
		p->trace = cgr__c_alloc(c, (size_t)p->trace_cap *
						   sizeof(*p->trace),
					64);
		if (p->trace == NULL)
			return -ENOMEM;
	}
	atomic_init(&p->trace_n, 0);
	cgr__future_init(&p->left);
	p->left_gen = cgr__future_arm(&p->left);
	atomic_init(&p->done_seq, 0);
	return 0;
}

/* ---- overlap pass -------------------------------------------------- */

static bool cgr__has_port(const unsigned *ports, size_t n, unsigned port)
{
	for (size_t i = 0; i < n; i++)
		if (ports[i] == port)
			return true;
	return false;
}

/* Whether op (on this worker) produces port. */
static bool cgr__op_makes(const struct cgr_compiled *c, const struct cgr__op *op,
			  unsigned port)
{
	switch (op->kind) {
	case CGR__OP_READ:
		return c->chans[op->chan].port == port;
	case CGR__OP_COMPUTE:
		return cgr__has_port(op->tc->out_ports, op->tc->nout, port);
	case CGR__OP_COLL:
		return cgr__has_port(op->coll->out_ports, op->coll->k, port);
	default:
		return false;
	}
}

/* Whether op reads port (COLL inputs excluded: the stream orders them). */
static bool cgr__op_uses(const struct cgr_compiled *c, const struct cgr__op *op,
			 unsigned port)
{
	if (op->kind == CGR__OP_COMPUTE)
		return cgr__has_port(op->tc->in_ports, op->tc->nin, port);
	if (op->kind == CGR__OP_WRITE)
		for (size_t j = 0; j < op->nchans; j++)
			if (c->chans[op->chans[j]].port == port)
				return true;
	return false;
}

/* Makes *op a WAIT for collective cr or (tc set) stream task tc; or,
 * kind CGR__OP_SWAIT, the wait of cr's stream for tc. */
static void cgr__put_wait(struct cgr__op *op, int kind,
			  struct cgr__coll_rt *cr, struct cgr_task_ctx *tc,
			  bool order)
{
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	op->coll = cr;
	op->tc = tc;
	op->order = order;
}

/* The latest asynchronous stream task among out[0..m) whose outputs op
 * reads (a COLL: its inputs), or NULL. */
static struct cgr_task_ctx *cgr__task_used(const struct cgr_compiled *c,
					   const struct cgr__op *out, size_t m,
					   const struct cgr__op *op)
{
	struct cgr_task_ctx *last = NULL;

	for (size_t j = 0; j < m; j++) {
		struct cgr_task_ctx *tc = out[j].tc;
		if (out[j].kind != CGR__OP_COMPUTE || !tc->async)
			continue;
		for (size_t o = 0; o < tc->nout; o++) {
			unsigned port = tc->out_ports[o];
			if (op->kind == CGR__OP_COLL ?
				    cgr__has_port(op->coll->in_ports,
						  op->coll->k, port) :
				    cgr__op_uses(c, op, port)) {
				last = tc;
				break;
			}
		}
	}
	return last;
}

/* The last COLL of stream class s among out[0..m), or NULL. */
static struct cgr__coll_rt *cgr__last_of(const struct cgr__op *out, size_t m,
					 int s)
{
	struct cgr__coll_rt *last = NULL;
	for (size_t j = 0; j < m; j++)
		if (out[j].kind == CGR__OP_COLL && out[j].coll->async &&
		    out[j].coll->sclass == s)
			last = out[j].coll;
	return last;
}

/*
 * Rewrites program p for overlap.  Each collective goes to one of the
 * worker's communication streams: a device edge's broadcast to the send
 * stream at its root and to the recv stream at its readers, any other
 * collective to the collective stream.  A communicator is only ever used by
 * one stream (or the thread) per member, in the global order, so overlap
 * never reorders communication ops among themselves.  Each collective is
 * issued as early as its local inputs allow, but never before an earlier
 * one of its stream nor before a collective the thread runs; the WRITE of
 * its outputs is fused into its job; a WAIT goes right before the first
 * operation that consumes its outputs (one WAIT for the latest collective
 * of a stream an operation needs covers the earlier ones of that stream).
 *
 * Stream tasks (CGR_TASK_STREAM) stay in program order; their WRITE is
 * fused into their stream job.  Their outputs are joined where first
 * used: by stream order on the compute stream, by a device-side SWAIT
 * right before an asynchronous collective (on that collective's stream),
 * by a WAIT on the thread otherwise; the latest task covers the earlier.
 */
static int cgr__overlap_prog(struct cgr_compiled *c, struct cgr__prog *p)
{
	size_t n = p->nops, m = 0, last_coll[CGR__NSTREAMS] = { 0 };
	/* Per stream: COLLs placed, and how many are known done (waited). */
	uint32_t placed[CGR__NSTREAMS] = { 0 }, done[CGR__NSTREAMS] = { 0 };
	/* Stream tasks placed; known done on the thread, on each stream. */
	uint32_t tplaced = 0, tdone = 0, tsdone[CGR__NSTREAMS] = { 0 };
	struct cgr__op *out = cgr__c_alloc(
		c, ((CGR__NSTREAMS + 3) * (n + 1)) * sizeof(*out), 64);

	if (out == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct cgr__op *op = &p->ops[i];
		struct cgr_task_ctx *tneed = NULL;
		if (op->kind != CGR__OP_COMPUTE || !op->tc->async)
			tneed = cgr__task_used(c, out, m, op);
		if (tneed != NULL && (op->kind != CGR__OP_COLL ||
				      !op->coll->async)) {
			if (tneed->tidx >= tdone)
				cgr__put_wait(&out[m++], CGR__OP_WAIT, NULL,
					      tneed, false);
			if (tdone < tneed->tidx + 1)
				tdone = tneed->tidx + 1;
			tneed = NULL;
		}
		if (op->kind == CGR__OP_COLL && !op->coll->async) {
			/* Runs on this thread: every collective issued before
			 * it must be done first, so that the order stays; the
			 * last one of each stream stands for its stream. */
			for (int s = 0; s < CGR__NSTREAMS; s++) {
				if (done[s] < placed[s]) {
					struct cgr__coll_rt *last =
						cgr__last_of(out, m, s);
					cgr__put_wait(&out[m++], CGR__OP_WAIT,
						      last, NULL, true);
				}
				done[s] = placed[s];
			}
			out[m++] = *op;
			for (int s = 0; s < CGR__NSTREAMS; s++)
				last_coll[s] = m;
			continue;
		}
		if (op->kind == CGR__OP_COLL) {
			struct cgr__coll_rt *cr = op->coll;
			int sc = cr->sclass;
			size_t at = last_coll[sc], w;
			for (size_t j = 0; j < m; j++)
				for (size_t q = 0; q < cr->k; q++)
					if (cr->in_ports[q] != CGR__NO_PORT &&
					    cgr__op_makes(c, &out[j],
							  cr->in_ports[q]) &&
					    j + 1 > at)
						at = j + 1;
			/* Its stream joins the stream task first. */
			w = tneed != NULL && tneed->tidx >= tsdone[sc];
			memmove(&out[at + 1 + w], &out[at],
				(m - at) * sizeof(*out));
			if (w) {
				cgr__put_wait(&out[at], CGR__OP_SWAIT, cr,
					      tneed, false);
				tsdone[sc] = tneed->tidx + 1;
			}
			cr->swait = tneed;
			out[at + w] = *op;
			m += 1 + w;
			for (int s = 0; s < CGR__NSTREAMS; s++)
				if (last_coll[s] > at)
					last_coll[s] += 1 + w;
			last_coll[sc] = at + 1 + w;
			cr->sidx = placed[sc]++;
			if (i + 1 < n && p->ops[i + 1].kind == CGR__OP_WRITE) {
				cr->fused_write = &p->ops[i + 1];
				i++;
			}
			cr->prog = p;
			cr->jobs = cgr__c_alloc(c, c->nslots * sizeof(*cr->jobs),
						64);
			if (cr->jobs == NULL)
				return -ENOMEM;
			for (uint32_t q = 0; q < c->nslots; q++)
				cr->jobs[q].cr = cr;
			continue;
		}
		/* Per stream, wait for the last issued collective whose
		 * output op reads, unless a WAIT already covers it. */
		struct cgr__coll_rt *need[CGR__NSTREAMS] = { NULL };
		for (size_t j = 0; j < m; j++) {
			struct cgr__coll_rt *cr = out[j].coll;
			if (out[j].kind != CGR__OP_COLL || !cr->async ||
			    cr->sidx < done[cr->sclass])
				continue;
			for (size_t q = 0; q < cr->k; q++)
				if (cr->out_ports[q] != CGR__NO_PORT &&
				    cgr__op_uses(c, op, cr->out_ports[q])) {
					if (need[cr->sclass] == NULL ||
					    need[cr->sclass]->sidx < cr->sidx)
						need[cr->sclass] = cr;
					break;
				}
		}
		for (int s = 0; s < CGR__NSTREAMS; s++)
			if (need[s] != NULL) {
				cgr__put_wait(&out[m++], CGR__OP_WAIT, need[s],
					      NULL, false);
				done[s] = need[s]->sidx + 1;
			}
		out[m++] = *op;
		if (op->kind == CGR__OP_COMPUTE && op->tc->async) {
			op->tc->tidx = tplaced++;
			if (i + 1 < n && p->ops[i + 1].kind == CGR__OP_WRITE) {
				op->tc->fused_write = &p->ops[i + 1];
				i++;
			}
		}
	}
	/* Across executions: the thread may start the next execution's
	 * first synchronous collective while a stream still runs this one's
	 * later collectives, which may share a communicator with it.  For
	 * each stream with no collective before it in the same execution
	 * (whose WAIT would order them), it waits for the stream's last one
	 * of the previous execution. */
	for (size_t i = 0; i < m; i++) {
		if (out[i].kind != CGR__OP_COLL || out[i].coll->async)
			continue;
		for (int s = 0; s < CGR__NSTREAMS; s++) {
			struct cgr__coll_rt *last = NULL;
			bool before = false;
			for (size_t j = 0; j < m; j++)
				if (out[j].kind == CGR__OP_COLL &&
				    out[j].coll->async &&
				    out[j].coll->sclass == s) {
					before |= j < i;
					last = out[j].coll;
				}
			if (before || last == NULL)
				continue;
			memmove(&out[i + 1], &out[i], (m - i) * sizeof(*out));
			m++;
			cgr__put_wait(&out[i], CGR__OP_WAIT, last, NULL, true);
			out[i++].prev = true;
		}
		break;
	}
	p->ops = out;
	p->nops = m;
	return 0;
}

/*
 * Drops the WAITs that other orderings already imply.  Knowledge is a
 * vector clock over queues, each a worker's stream or its thread (for the
 * collectives it runs itself): K[q] = how many of queue q's collectives
 * are known finished.  It flows with ring messages (a WRITE sends the
 * writer's knowledge; a fused WRITE its job's), into a stream job from the
 * thread that issued it and from the job before it, and out of a finished
 * job into a WAIT.  A finished collective also proves that some members
 * had started it, so it carries their start-of-job knowledge, in which
 * their earlier collectives of that queue are finished: all members when
 * they agree on shapes every execution (every member posts its description
 * and waits for all the others', exec/coll.c) or the backend joins
 * everybody (cgr__backend_joins_all); otherwise those whose data its output
 * needs (all; for broadcast and scatter the root; reduce and gather
 * outputs exist only at the root).  One execution is modelled.  A WAIT for
 * collective i of queue q is redundant when K[q] > i before it, counting
 * the other WAITs kept right beside it (before the same operation).  Knowledge
 * starts empty and only grows, so every sweep is sound and a cut-off only
 * leaves extra WAITs; dropping a redundant WAIT removes no knowledge, so
 * the other verdicts stay valid.  A worker's compute stream is a queue
 * too: its stream tasks in order, each knowing what the thread knew at its
 * issue; their fused WRITEs send what the task knows when done, a WAIT or
 * a communication stream's SWAIT before a job takes it.
 */
#define CGR__PRUNE_SWEEPS 64
/* Queues per worker: communication streams, compute stream, thread. */
#define CGR__KQ_THREAD CGR__NSTREAMS_ALL
#define CGR__NQ (CGR__NSTREAMS_ALL + 1)

struct cgr__kn {
	size_t nq;			 /* queues: programs x CGR__NQ */
	size_t *ncoll, *base;		 /* per queue */
	/* per (queue, item): the collective (NULL on a compute stream) */
	struct cgr__coll_rt **coll;
	/* The members of one collective: a chain through (queue,
	 * collective) indices from head[task id]; SIZE_MAX ends it. */
	size_t *next, *head;
	uint32_t *issue, *start, *after; /* per (queue, collective): nq */
	uint32_t *msg;			 /* per channel: nq */
	uint32_t *d;			 /* nq: the running knowledge */
	uint32_t *tmp;			 /* nq: scratch */
	bool changed;
};

/* The compute stream's queue of program p. */
static size_t cgr__kn_comp_q(size_t p)
{
	return p * CGR__NQ + CGR__S_COMP;
}

/* The queue of collective cr of program p. */
static size_t cgr__kn_q(size_t p, const struct cgr__coll_rt *cr)
{
	return p * CGR__NQ + (cr->async ? (size_t)cr->sclass : CGR__KQ_THREAD);
}

static uint32_t *cgr__kn_at(const struct cgr__kn *k, uint32_t *arr, size_t q,
			    size_t j)
{
	return arr + (k->base[q] + j) * k->nq;
}

static void cgr__kn_join(const struct cgr__kn *k, uint32_t *dst,
			 const uint32_t *src)
{
	for (size_t q = 0; q < k->nq; q++)
		if (src[q] > dst[q])
			dst[q] = src[q];
}

/* Joins the running knowledge into a stored vector, noting growth. */
static void cgr__kn_put(struct cgr__kn *k, uint32_t *dst)
{
	for (size_t q = 0; q < k->nq; q++)
		if (k->d[q] > dst[q]) {
			dst[q] = k->d[q];
			k->changed = true;
		}
}

/* The running knowledge after collective j of queue q finished. */
static void cgr__kn_finish(struct cgr__kn *k, size_t q, size_t j)
{
	const struct cgr__coll_rt *cr = k->coll[k->base[q] + j];
	/* Else only what the data needs is proven. */
	bool rooted = !cr->joins_all && cgr__coll_in_at_root(cr->kind);
	bool at_root = !cr->joins_all && cgr__coll_out_at_root(cr->kind);

	if ((!rooted || cr->rank != cr->root) &&
	    (!at_root || cr->rank == cr->root))
		for (size_t x = k->head[cr->task->id]; x != SIZE_MAX;
		     x = k->next[x])
			if (!rooted || k->coll[x]->rank == k->coll[x]->root)
				cgr__kn_join(k, k->d, k->start + x * k->nq);
	if (k->d[q] < j + 1)
		k->d[q] = (uint32_t)j + 1;
	cgr__kn_put(k, cgr__kn_at(k, k->after, q, j));
}

/* The queue and item a WAIT (or SWAIT) w of program p waits for. */
static size_t cgr__kn_wq(size_t p, const struct cgr__op *w, size_t *j)
{
	if (w->tc != NULL) {
		*j = w->tc->tidx;
		return cgr__kn_comp_q(p);
	}
	*j = w->coll->sidx;
	return cgr__kn_q(p, w->coll);
}

/* What WAIT w of program p proves: its item's after-knowledge. */
static const uint32_t *cgr__kn_waited(const struct cgr__kn *k, size_t p,
				      const struct cgr__op *w)
{
	size_t j, q = cgr__kn_wq(p, w, &j);
	return cgr__kn_at(k, k->after, q, j);
}

/* Joins into dst what the other members of collective cr (of program p)
 * knew as they started it.  When members agree on shapes first
 * (exec/coll.c), no data moves before every member posted: a wait that
 * only guards cr's input is redundant if any of them knew it done. */
static void cgr__kn_others(const struct cgr__kn *k, uint32_t *dst, size_t p,
			   const struct cgr__coll_rt *cr)
{
	size_t q = cgr__kn_q(p, cr);

	for (size_t x = k->head[cr->task->id];
	     !cr->static_shape && x != SIZE_MAX; x = k->next[x])
		if (x != k->base[q] + cr->sidx)
			cgr__kn_join(k, dst, k->start + x * k->nq);
}

/* Program p's worker thread; red[i]: whether its op i is a redundant
 * WAIT (red may be NULL). */
static void cgr__kn_thread(struct cgr__kn *k, const struct cgr_compiled *c,
			   size_t p, bool *red)
{
	const struct cgr__prog *pr = &c->progs[p];

	memset(k->d, 0, k->nq * sizeof(*k->d));
	for (size_t i = 0; i < pr->nops; i++) {
		const struct cgr__op *op = &pr->ops[i];
		size_t q, j;
		switch (op->kind) {
		case CGR__OP_READ:
			cgr__kn_join(k, k->d, k->msg + op->chan * k->nq);
			break;
		case CGR__OP_WRITE:
			for (size_t w = 0; w < op->nchans; w++)
				cgr__kn_put(k, k->msg + op->chans[w] * k->nq);
			break;
		case CGR__OP_COMPUTE:
			if (op->tc->async)
				cgr__kn_put(k, cgr__kn_at(k, k->issue,
							  cgr__kn_comp_q(p),
							  op->tc->tidx));
			break;
		case CGR__OP_COLL:
			q = cgr__kn_q(p, op->coll);
			j = op->coll->sidx;
			if (op->coll->async) {
				cgr__kn_put(k, cgr__kn_at(k, k->issue, q, j));
			} else {
				cgr__kn_put(k, cgr__kn_at(k, k->start, q, j));
				cgr__kn_finish(k, q, j);
			}
			break;
		case CGR__OP_WAIT: {
			/* A run of WAITs before one operation: their order
			 * does not matter, so each is judged against what the
			 * others still kept will have proven. */
			size_t e = i;
			while (e < pr->nops && pr->ops[e].kind == CGR__OP_WAIT)
				e++;
			/* A stream task's WAIT right before a collective on
			 * the thread guards that collective's input. */
			const struct cgr__coll_rt *next =
				e < pr->nops && pr->ops[e].kind == CGR__OP_COLL &&
						!pr->ops[e].coll->async ?
					pr->ops[e].coll :
					NULL;
			for (size_t x = i; x < e && red != NULL; x++) {
				const struct cgr__op *wx = &pr->ops[x];
				size_t jx, qx = cgr__kn_wq(p, wx, &jx);
				if (wx->prev)
					continue;
				memcpy(k->tmp, k->d, k->nq * sizeof(*k->d));
				for (size_t y = i; y < e; y++) {
					const struct cgr__op *wy = &pr->ops[y];
					if (y != x && !wy->prev && !red[y])
						cgr__kn_join(k, k->tmp,
							     cgr__kn_waited(k, p,
									    wy));
				}
				if (wx->tc != NULL && next != NULL)
					cgr__kn_others(k, k->tmp, p, next);
				red[x] = k->tmp[qx] > jx;
			}
			/* prev: another execution: kept, no news */
			for (const struct cgr__op *wy = op; wy < pr->ops + e;
			     wy++)
				if (!wy->prev)
					cgr__kn_join(k, k->d,
						     cgr__kn_waited(k, p, wy));
			i = e - 1;
			break;
		}
		default:
			break;
		}
	}
}

/* What queue q knows before its job j: its issue, the job before. */
static void cgr__kn_before(struct cgr__kn *k, size_t q, size_t j)
{
	memcpy(k->d, cgr__kn_at(k, k->issue, q, j), k->nq * sizeof(*k->d));
	if (j > 0)
		cgr__kn_join(k, k->d, cgr__kn_at(k, k->after, q, j - 1));
}

/* Compute stream queue q: its stream tasks in order. */
static void cgr__kn_comp(struct cgr__kn *k, const struct cgr_compiled *c,
			 size_t q)
{
	const struct cgr__prog *pr = &c->progs[q / CGR__NQ];

	for (size_t i = 0, j = 0; i < pr->nops; i++) {
		const struct cgr_task_ctx *tc = pr->ops[i].tc;
		if (pr->ops[i].kind != CGR__OP_COMPUTE || !tc->async)
			continue;
		cgr__kn_before(k, q, j);
		k->d[q] = (uint32_t)j + 1;
		cgr__kn_put(k, cgr__kn_at(k, k->after, q, j));
		for (size_t w = 0; tc->fused_write != NULL &&
				   w < tc->fused_write->nchans;
		     w++)
			cgr__kn_put(k, k->msg + tc->fused_write->chans[w] *
						       k->nq);
		j++;
	}
}

/* Communication stream queue q of program p: its jobs in order, each
 * after its SWAIT (if any). */
static void cgr__kn_stream(struct cgr__kn *k, size_t p, size_t q)
{
	for (size_t j = 0; j < k->ncoll[q]; j++) {
		const struct cgr__coll_rt *cr = k->coll[k->base[q] + j];
		const struct cgr__op *fw = cr->fused_write;
		cgr__kn_before(k, q, j);
		if (cr->swait != NULL)
			cgr__kn_join(k, k->d,
				     cgr__kn_at(k, k->after,
						cgr__kn_comp_q(p),
						cr->swait->tidx));
		cgr__kn_put(k, cgr__kn_at(k, k->start, q, j));
		cgr__kn_finish(k, q, j);
		for (size_t w = 0; fw != NULL && w < fw->nchans; w++)
			cgr__kn_put(k, k->msg + fw->chans[w] * k->nq);
	}
}

static int cgr__prune_waits(struct cgr_compiled *c, size_t ntasks)
{
	struct cgr__arena *a = &c->ctx->arena;
	struct cgr__kn k = { .nq = c->nprogs * CGR__NQ };
	size_t total = 0, maxops = 0, size, nv;
	unsigned char *mem;
	bool *red;

	for (size_t p = 0; p < c->nprogs; p++) {
		for (size_t i = 0; i < c->progs[p].nops; i++)
			total += c->progs[p].ops[i].kind == CGR__OP_COLL ||
				 (c->progs[p].ops[i].kind == CGR__OP_COMPUTE &&
				  c->progs[p].ops[i].tc->async);
		if (c->progs[p].nops > maxops)
			maxops = c->progs[p].nops;
	}
	nv = total * k.nq;
	size = (2 * k.nq + total + ntasks) * sizeof(size_t) +
	       total * sizeof(void *) +
	       (3 * nv + c->nchans * k.nq + 2 * k.nq) * sizeof(uint32_t) +
	       maxops;
	mem = cgr__alloc(a, size, 16);
	if (mem == NULL)
		return -ENOMEM;
	k.ncoll = (size_t *)mem;
	k.base = k.ncoll + k.nq;
	k.next = k.base + k.nq;
	k.head = k.next + total;
	k.coll = (struct cgr__coll_rt **)(k.head + ntasks);
	k.issue = (uint32_t *)(k.coll + total);
	k.start = k.issue + nv;
	k.after = k.start + nv;
	k.msg = k.after + nv;
	k.d = k.msg + c->nchans * k.nq;
	k.tmp = k.d + k.nq;
	red = (bool *)(k.tmp + k.nq);
	/* Queues in order: a stream's collectives in program order are in
	 * its order (the overlap pass keeps it), the thread's likewise, and
	 * the stream tasks (tidx). */
	for (size_t t = 0; t < ntasks; t++)
		k.head[t] = SIZE_MAX;
	for (size_t q = 0, n = 0; q < k.nq; q++) {
		const struct cgr__prog *pr = &c->progs[q / CGR__NQ];
		k.base[q] = n;
		for (size_t i = 0; i < pr->nops; i++) {
			struct cgr__coll_rt *cr = pr->ops[i].coll;
			if (q % CGR__NQ == CGR__S_COMP) {
				if (pr->ops[i].kind == CGR__OP_COMPUTE &&
				    pr->ops[i].tc->async) {
					k.next[n] = SIZE_MAX;
					k.coll[n++] = NULL;
				}
				continue;
			}
			if (pr->ops[i].kind != CGR__OP_COLL ||
			    cgr__kn_q(q / CGR__NQ, cr) != q)
				continue;
			cr->sidx = (uint32_t)(n - k.base[q]);
			k.next[n] = k.head[cr->task->id];
			k.head[cr->task->id] = n;
			k.coll[n++] = cr;
		}
		k.ncoll[q] = n - k.base[q];
	}
	k.changed = true;
	for (int sw = 0; sw < CGR__PRUNE_SWEEPS && k.changed; sw++) {
		k.changed = false;
		for (size_t p = 0; p < c->nprogs; p++)
			cgr__kn_thread(&k, c, p, NULL);
		for (size_t q = 0; q < k.nq; q++)
			if (q % CGR__NQ == CGR__S_COMP)
				cgr__kn_comp(&k, c, q);
			else if (q % CGR__NQ != CGR__KQ_THREAD)
				cgr__kn_stream(&k, q / CGR__NQ, q);
	}
	for (size_t p = 0; p < c->nprogs; p++) {
		struct cgr__prog *pr = &c->progs[p];
		size_t m = 0;
		memset(red, 0, maxops);
		cgr__kn_thread(&k, c, p, red);
		/* An SWAIT is redundant when its stream already knows the
		 * stream task finished (the COLL after it is its job); or,
		 * when the members agree on shapes first (exec/coll.c: no
		 * data moves before every member posted), when another
		 * member knew it as it started. */
		for (size_t i = 0; i + 1 < pr->nops; i++) {
			const struct cgr__coll_rt *cr = pr->ops[i + 1].coll;
			size_t q;
			if (pr->ops[i].kind != CGR__OP_SWAIT)
				continue;
			q = cgr__kn_q(p, cr);
			cgr__kn_before(&k, q, cr->sidx);
			cgr__kn_others(&k, k.d, p, cr);
			red[i] = k.d[cgr__kn_comp_q(p)] >
				 pr->ops[i].tc->tidx;
		}
		for (size_t i = 0; i < pr->nops; i++)
			if ((pr->ops[i].kind != CGR__OP_WAIT &&
			     pr->ops[i].kind != CGR__OP_SWAIT) ||
			    !red[i])
				pr->ops[m++] = pr->ops[i];
		pr->nops = m;
	}
	cgr__free(a, mem, size, 16);
	return 0;
}

/* ---- schedule verification ---------------------------------------- */

/*
 * Runs the programs abstractly for two executions: READ takes a message
 * its ring holds, WRITE adds one, COLL waits until every member reached
 * the same collective of the same execution.  The driver has put both
 * executions' arguments in and always drains.  If the programs get stuck,
 * follows "waits for" from a stuck worker until one repeats and names that
 * cycle.  Returns 0 or CGR_EDEADLOCK with msg filled.
 */
#define CGR__VERIFY_EXECS 2

static size_t cgr__chan_writer(const struct cgr_compiled *c, unsigned ch)
{
	for (size_t i = 0; i < c->nprogs; i++) {
		const struct cgr__prog *p = &c->progs[i];
		for (size_t k = 0; k < p->nops; k++)
			if (p->ops[k].kind == CGR__OP_WRITE)
				for (size_t j = 0; j < p->ops[k].nchans; j++)
					if (p->ops[k].chans[j] == ch)
						return i;
	}
	return SIZE_MAX; /* the driver */
}

int cgr__verify(struct cgr_compiled *c, char *msg, size_t len)
{
	struct cgr__arena *a = &c->ctx->arena;
	size_t np = c->nprogs, total, done = 0;
	size_t *pc = cgr__alloc(a, (np + 1) * sizeof(size_t), 16);
	uint64_t *have = cgr__alloc(a, (c->nchans + 1) * sizeof(uint64_t), 16);
	int ret = 0;

	if (pc == NULL || have == NULL) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t ch = 0; ch < c->nchans; ch++)
		if (cgr__chan_writer(c, ch) == SIZE_MAX)
			have[ch] = CGR__VERIFY_EXECS;
	total = 0;
	for (size_t i = 0; i < np; i++)
		total += c->progs[i].nops * CGR__VERIFY_EXECS;
	for (;;) {
		bool progress = false;
		for (size_t i = 0; i < np; i++) {
			struct cgr__prog *p = &c->progs[i];
			while (pc[i] < p->nops * CGR__VERIFY_EXECS) {
				struct cgr__op *op = &p->ops[pc[i] % p->nops];
				size_t ex = pc[i] / p->nops, at = 0;
				if (op->kind == CGR__OP_READ) {
					if (have[op->chan] == 0)
						break;
					have[op->chan]--;
				} else if (op->kind == CGR__OP_WRITE) {
					for (size_t j = 0; j < op->nchans; j++)
						have[op->chans[j]]++;
				} else if (op->kind == CGR__OP_COLL) {
					/* Everybody at this collective? */
					for (size_t q = 0; q < np; q++) {
						struct cgr__prog *o =
							&c->progs[q];
						struct cgr__op *oo;
						if (pc[q] >= o->nops *
								     CGR__VERIFY_EXECS)
							continue;
						oo = &o->ops[pc[q] % o->nops];
						if (oo->kind == CGR__OP_COLL &&
						    oo->coll->board ==
							    op->coll->board &&
						    pc[q] / o->nops == ex)
							at++;
					}
					if (at < (size_t)op->coll->n)
						break;
					for (size_t q = 0; q < np; q++) {
						struct cgr__prog *o =
							&c->progs[q];
						struct cgr__op *oo;
						if (q == i ||
						    pc[q] >= o->nops *
								     CGR__VERIFY_EXECS)
							continue;
						oo = &o->ops[pc[q] % o->nops];
						if (oo->kind == CGR__OP_COLL &&
						    oo->coll->board ==
							    op->coll->board &&
						    pc[q] / o->nops == ex) {
							pc[q]++;
							done++;
						}
					}
				}
				pc[i]++;
				done++;
				progress = true;
			}
		}
		if (done >= total)
			goto out;
		if (!progress)
			break;
	}

	/* Stuck: walk "waits for" edges from a stuck program. */
	size_t cur = 0, steps = 0, off = 0;
	int *seen = cgr__alloc(a, (np + 1) * sizeof(int), 16);
	if (seen == NULL) {
		ret = -ENOMEM;
		goto out;
	}
	while (pc[cur] >= c->progs[cur].nops * CGR__VERIFY_EXECS)
		cur++;
	for (size_t i = 0; i < np; i++)
		seen[i] = -1;
	struct {
		size_t who, next;
		const char *why;
		const char *what;
	} path[64];
	size_t npath = 0;
	while (seen[cur] < 0 && npath < 64) {
		struct cgr__prog *p = &c->progs[cur];
		struct cgr__op *op = &p->ops[pc[cur] % p->nops];
		size_t next = cur;
		seen[cur] = (int)npath;
		path[npath].who = cur;
		if (op->kind == CGR__OP_READ) {
			next = cgr__chan_writer(c, op->chan);
			path[npath].why = "a value of";
			path[npath].what = c->ports[c->chans[op->chan].port].name;
		} else {
			for (size_t q = 0; q < np; q++) {
				struct cgr__op *oo;
				if (pc[q] >= c->progs[q].nops *
						     CGR__VERIFY_EXECS)
					continue;
				oo = &c->progs[q].ops[pc[q] %
						       c->progs[q].nops];
				if (cgr__coll_member(op->coll, c->progs[q].w) &&
				    !(oo->kind == CGR__OP_COLL &&
				      oo->coll->board == op->coll->board)) {
					next = q;
					break;
				}
			}
			path[npath].why = cgr__coll_name(op->coll->kind);
			path[npath].what = op->coll->name;
		}
		path[npath].next = next;
		npath++;
		if (next == SIZE_MAX || next == cur)
			break;
		cur = next;
		steps++;
	}
	off = (size_t)snprintf(msg, len, "schedule would deadlock: ");
	size_t from = seen[cur] >= 0 ? (size_t)seen[cur] : 0;
	for (size_t k = from; k < npath && off < len; k++)
		off += (size_t)snprintf(
			msg + off, len - off, "%s%s waits for %s (%s %s)",
			k > from ? ", " : "", c->progs[path[k].who].w->name,
			path[k].next == SIZE_MAX ? "the driver" :
						   c->progs[path[k].next].w->name,
			path[k].why, path[k].what);
	cgr__free(a, seen, (np + 1) * sizeof(int), 16);
	ret = CGR_EDEADLOCK;
out:
	cgr__free(a, pc, (np + 1) * sizeof(size_t), 16);
	cgr__free(a, have, (c->nchans + 1) * sizeof(uint64_t), 16);
	return ret;
}

static int cgr__compile(cgr_graph *g, const cgr_compile_params *prm,
			bool plan_only, cgr_compiled **out)
{
	struct cgr__lower L;
	struct cgr_compiled *c;
	struct cgr__task **order;
	cgr_worker **ws;
	size_t nw = 0;
	bool overlapped = false;
	int ret;

	if (g == NULL || out == NULL)
		return -EINVAL;
	g->errmsg[0] = 0;
	if (g->compiled)
		return cgr__graph_fail(g, CGR_ECOMPILED,
				       "graph was already compiled");
	if (g->ctx->destroyed)
		return -EINVAL;
	if (g->noutputs == 0)
		return cgr__graph_fail(g, CGR_ENOOUTPUT,
				       "graph has no outputs: call "
				       "cgr_graph_output");
	c = cgr__alloc(&g->ctx->arena, sizeof(*c), 64);
	if (c == NULL)
		return -ENOMEM;
	c->ctx = g->ctx;
	atomic_fetch_add(&g->ctx->refs, 1);
	atomic_init(&c->refs, 1);
	atomic_init(&c->stop, 0);
	c->t_start = cgr__now_ns();
	cgr__bell_init(&c->drv_bell);
	ret = cgr__params(&c->p, prm);
	if (ret < 0) {
		cgr__graph_fail(g, ret, "invalid compile parameters");
		goto fail;
	}
	c->nslots = 1;
	while (c->nslots < c->p.max_inflight)
		c->nslots <<= 1;

	ret = cgr__check_tasks(g);
	if (ret == 0)
		ret = cgr__graph_lower_edges(g);
	if (ret < 0)
		goto fail;
	order = cgr__c_alloc(c, (g->ntasks + 1) * sizeof(*order), 64);
	ws = cgr__c_alloc(c, (g->ctx->nworkers + 1) * sizeof(*ws), 64);
	if (order == NULL || ws == NULL) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = cgr__topo(g, order);
	if (ret == 0)
		ret = cgr__check_reach(g, order);
	if (ret == 0)
		ret = cgr__check_args(g, &c->nargs);
	if (ret < 0)
		goto fail;

	memset(&L, 0, sizeof(L));
	L.plan_only = plan_only;
	L.g = g;
	L.c = c;
	L.order = order;
	ret = cgr__lower(&L);
	if (ret < 0)
		goto fail_mem;
	for (unsigned i = 0; i < g->ntasks; i++) {
		struct cgr__task *t = order[i];
		size_t nm = t->coll ? t->nmembers : 1;
		for (size_t m = 0; m < nm; m++) {
			cgr_worker *w = t->coll ? t->members[m] : t->w;
			size_t j;
			for (j = 0; j < nw; j++)
				if (ws[j] == w)
					break;
			if (j == nw)
				ws[nw++] = w;
		}
		if (t->coll) {
			size_t bs = cgr__coll_board_size(
				t->nmembers, t->cp.ntensors, c->nslots);
			t->board = cgr__c_alloc(c, bs, 64);
			if (t->board == NULL) {
				ret = -ENOMEM;
				goto fail_mem;
			}
			cgr__coll_board_init(t->board, t->nmembers,
					     t->cp.ntensors, c->nslots,
					     t->members);
		}
	}
	c->comms = cgr__c_alloc(c, (g->ntasks + 1) * sizeof(cgr_comm *), 64);
	c->comm_owner = cgr__c_alloc(c, (g->ntasks + 1) * sizeof(void *), 64);
	c->used_comms = cgr__c_alloc(c, (g->ntasks + 1) * sizeof(cgr_comm *),
				     64);
	if (c->comms == NULL || c->comm_owner == NULL || c->used_comms == NULL) {
		ret = -ENOMEM;
		goto fail_mem;
	}
	c->progs = cgr__c_alloc(c, (nw + 1) * sizeof(*c->progs), 64);
	c->arrived = cgr__c_alloc(c, c->nslots * sizeof(uint32_t), 64);
	c->released = cgr__c_alloc(c, c->nslots, 64);
	if (c->progs == NULL || c->arrived == NULL || c->released == NULL) {
		ret = -ENOMEM;
		goto fail_mem;
	}
	c->nprogs = nw;
	for (size_t i = 0; i < nw; i++) {
		ret = cgr__lower_prog(&L, &c->progs[i], ws[i]);
		if (ret < 0)
			goto fail_mem;
	}

	ret = cgr__verify(c, g->errmsg, sizeof(g->errmsg));
	if (ret < 0) {
		cgr__info(&g->ctx->log, "graph: %s", g->errmsg);
		goto fail;
	}
	/* Overlap rewrites the programs verified above: it only issues
	 * collectives earlier, which the stream runs in the same order, and
	 * waits for them where their outputs are used. */
	for (size_t i = 0; i < c->nprogs; i++) {
		struct cgr__prog *p = &c->progs[i];
		bool any = false;
		bool used[CGR__NSTREAMS_ALL] = { false };
		for (size_t k = 0; k < p->ntcs; k++) {
			used[CGR__S_COMP] |= p->tcs[k].stream;
			any |= p->tcs[k].async;
		}
		for (size_t k = 0; k < p->nops; k++) {
			struct cgr__coll_rt *cr = p->ops[k].coll;
			if (p->ops[k].kind != CGR__OP_COLL)
				continue;
			cr->async = cr->overlap == CGR_OVERLAP_ON ||
				    (cr->overlap == CGR_OVERLAP_DEFAULT &&
				     c->p.overlap);
			cr->sclass = !cr->edge		   ? CGR__S_COLL :
				     cr->rank == cr->root ? CGR__S_SEND :
							    CGR__S_RECV;
			any |= cr->async;
			used[cr->sclass] |= cr->async;
		}
		ret = any ? cgr__overlap_prog(c, p) : 0;
		for (int s = 0; s < CGR__NSTREAMS_ALL && ret == 0 && !plan_only;
		     s++) {
			if (!used[s])
				continue;
			int dev = CGR_DEVICE_SIM;
			if (s == CGR__S_COMP && p->w->device >= 0)
				dev = p->w->device; /* the worker's device */
			ret = cgr_stream_create(c->ctx, dev, 0, &p->streams[s]);
			if (ret == 0 && p->trace_cap > 0) {
				p->strace[s] = cgr__c_alloc(
					c, (size_t)p->trace_cap *
						   sizeof(*p->strace[s]),
					64);
				if (p->strace[s] == NULL)
					ret = -ENOMEM;
			}
		}
		if (ret < 0)
			goto fail_mem;
		for (size_t k = 0; k < p->ntcs; k++)
			p->tcs[k].s = p->streams[CGR__S_COMP];
		overlapped |= any;
	}
	if (overlapped && (ret = cgr__prune_waits(c, g->ntasks)) < 0)
		goto fail_mem;
	*out = c;
	return 0;

fail_mem:
	if (ret == -ENOMEM)
		cgr__graph_fail(g, ret, "out of memory compiling the graph");
fail:
	cgr__compiled_unref(c);
	return ret;
}

int cgr__graph_plan(cgr_graph *g, const cgr_compile_params *p,
		    cgr_compiled **out)
{
	if (g == NULL || out == NULL)
		return -EINVAL;
	if (g->compiled)
		return cgr__graph_fail(g, CGR_ECOMPILED,
				       "graph was already compiled");
	return cgr__compile(g, p, true, out);
}

void cgr__plan_free(cgr_compiled *c)
{
	if (c != NULL)
		cgr__compiled_unref(c);
}

int cgr_graph_compile(cgr_graph *g, const cgr_compile_params *prm,
		      cgr_compiled **out)
{
	cgr_compiled *c;
	int ret;

	if (g == NULL || out == NULL)
		return -EINVAL;
	if (g->compiled)
		return cgr__graph_fail(g, CGR_ECOMPILED,
				       "graph was already compiled");
	ret = cgr__compile(g, prm, false, &c);
	if (ret < 0)
		return ret;
	size_t nw = c->nprogs;
	/* Start: each worker holds a reference while it runs its program. */
	g->compiled = true;
	atomic_fetch_add(&c->refs, (uint32_t)nw);
	for (size_t i = 0; i < nw; i++) {
		cgr_worker *w = c->progs[i].w;
		w->busy_with = c;
		atomic_store_explicit(&w->prog, &c->progs[i],
				      memory_order_relaxed);
		/* P1: publishes the program; pairs with the worker's acquire
		 * of cmd. */
		atomic_store_explicit(&w->cmd, CGR__WCMD_RUN,
				      memory_order_release);
		cgr__bell_ring_force(&w->bell);
	}
	c->next = g->ctx->compiled;
	g->ctx->compiled = c;
	*out = c;
	return 0;

}

size_t cgr_compiled_noutputs(const cgr_compiled *c)
{
	return c != NULL ? c->nout : 0;
}

size_t cgr_compiled_nargs(const cgr_compiled *c)
{
	return c != NULL ? c->nargs : 0;
}
