/*
 * graph/blob.c: a graph's description for its worker processes.
 *
 * The driver packs the graph it compiles (nodes in creation order, tasks
 * in bind order, outputs, the compile parameters, every worker's identity
 * and the task functions of workers whose programs run elsewhere (not
 * shared, graph/worker.h: process workers) by exported name) into the
 * graph's shared segment; each worker process unpacks it into a graph of
 * its own context, identical node for node and task for task, and
 * compiles that.  The blob comes from another process: every count,
 * index and length is checked before it is used.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan/chan.h"
#include "comm/comm.h"
#include "graph/graph.h"

#define BLOB_MAGIC 0x47524743u /* "CGRG" */
#define BLOB_VERSION 1
#define NO_NODE 0xffffffffu

struct blob_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t pad;
	uint32_t nnodes, ntasks, noutputs, nworkers;
	uint64_t params_size;
	cgr_compile_params params;
};

struct blob_node {
	int32_t kind, index, transport, overlap;
	uint32_t edge_flags, pad;
	uint64_t clen; /* CONST: bytes of its slot that follow */
	uint64_t edge_comm; /* cgr_comm_id of its device edge's, or 0 */
};

/* Followed by name_len, fn_len and arg_len bytes, nin input ids and
 * nmembers worker indices (each 8-aligned). */
struct blob_task {
	uint32_t worker, flags; /* a plain task's */
	uint64_t max_out;
	uint32_t nin, nout;
	uint32_t name_len, fn_len, arg_len, nmembers;
	/* A collective (coll: its kind, 0 for a plain task): its params. */
	int32_t coll, op, root, static_shape, overlap, backend;
	uint64_t ntensors;
	uint64_t comm; /* cgr_comm_id of the caller's communicator, or 0 */
};

struct blob_worker {
	int32_t pad, device; /* pad: zero (a worker's kind crosses no more) */
	char name[64];
};

/* A growing buffer. */
struct wbuf {
	struct cgr__arena *a;
	unsigned char *p;
	size_t len, cap;
	int err;
};

/* n bytes of d (NULL: zeros), unpadded. */
static void put_raw(struct wbuf *b, const void *d, size_t n)
{
	if (b->err)
		return;
	if (b->len + n + 8 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		unsigned char *np;
		while (cap < b->len + n + 8)
			cap *= 2;
		np = cgr__alloc(b->a, cap, 64);
		if (np == NULL) {
			b->err = -ENOMEM;
			return;
		}
		if (b->len)
			memcpy(np, b->p, b->len);
		cgr__free(b->a, b->p, b->cap, 64);
		b->p = np;
		b->cap = cap;
	}
	if (d != NULL)
		memcpy(b->p + b->len, d, n);
	else
		memset(b->p + b->len, 0, n);
	b->len += n;
}

/* n bytes of d, then zeros to the next multiple of 8 (what get reads). */
static void put(struct wbuf *b, const void *d, size_t n)
{
	put_raw(b, d, n);
	put_raw(b, NULL, CGR__ALIGN_UP(b->len, 8) - b->len);
}

/* The ids of nodes ns (NO_NODE for NULL), as one array. */
static void put_ids(struct wbuf *b, cgr_node *const *ns, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t id = ns[i] != NULL ? ns[i]->id : NO_NODE;
		put_raw(b, &id, sizeof(id));
	}
	put(b, NULL, 0);
}

/* The exported name of task function fn, or NULL. */
static const char *export_of(const cgr_ctx *ctx, cgr_task_fn fn)
{
	for (const cgr_export *e = ctx->exports; e != NULL && e->name; e++)
		if (e->task == fn)
			return e->name;
	return NULL;
}

/* A plain task of a worker whose programs run elsewhere must cross: its
 * function by name, no pointer arg.  *fn: its exported name ("" on other
 * workers). */
static int task_crosses(cgr_graph *g, const struct cgr__task *t,
			const char **fn)
{
	*fn = "";
	if (t->coll || t->w->ops->shared)
		return 0;
	*fn = export_of(g->ctx, t->fn);
	if (*fn == NULL)
		return cgr__graph_fail(g, -EINVAL,
				       "task %s on %s worker %s: its "
				       "function is not in "
				       "cgr_ctx_params.exports",
				       t->name, t->w->ops->name, t->w->name);
	if (t->arg != NULL)
		return cgr__graph_fail(g, -EINVAL,
				       "task %s on %s worker %s: a "
				       "pointer arg cannot cross processes "
				       "(give its bytes as arg_data)",
				       t->name, t->w->ops->name, t->w->name);
	return 0;
}

static int pack_task(cgr_graph *g, struct wbuf *b, const struct cgr__task *t)
{
	struct blob_task bt = { 0 };
	const char *fn;
	int ret = task_crosses(g, t, &fn);

	if (ret < 0)
		return ret;
	bt.worker = t->coll ? 0 : t->w->index;
	bt.flags = t->flags;
	bt.max_out = t->max_out_bytes;
	bt.nin = (uint32_t)t->nin;
	bt.nout = (uint32_t)t->nout;
	bt.name_len = (uint32_t)strlen(t->name);
	bt.fn_len = (uint32_t)strlen(fn);
	bt.arg_len = (uint32_t)t->arg_len;
	bt.nmembers = t->coll ? (uint32_t)t->nmembers : 0;
	bt.coll = t->coll;
	bt.op = t->cp.op;
	bt.root = t->cp.root;
	bt.static_shape = t->cp.static_shape;
	bt.overlap = t->cp.overlap;
	bt.backend = t->cp.backend;
	bt.ntensors = t->cp.ntensors;
	bt.comm = cgr_comm_id(t->cp.comm);
	put(b, &bt, sizeof(bt));
	put(b, t->name, bt.name_len);
	put(b, fn, bt.fn_len);
	put(b, t->arg_data, bt.arg_len);
	put_ids(b, t->in, t->nin);
	for (size_t i = 0; i < bt.nmembers; i++) {
		uint32_t wi = t->members[i]->index;
		put_raw(b, &wi, sizeof(wi));
	}
	put(b, NULL, 0);
	return 0;
}

static void pack_workers(cgr_graph *g, struct wbuf *b)
{
	unsigned n = g->ctx->nworkers;
	struct blob_worker bw;

	for (unsigned i = 0; i < n; i++) {
		const cgr_worker *w;
		for (w = g->ctx->workers; w != NULL && w->index != i;
		     w = w->next)
			;
		memset(&bw, 0, sizeof(bw));
		bw.device = w != NULL ? w->device : CGR_DEVICE_NONE;
		snprintf(bw.name, sizeof(bw.name), "%s",
			 w != NULL ? w->name : "?");
		put(b, &bw, sizeof(bw));
	}
}

int cgr__graph_pack(cgr_graph *g, const cgr_compile_params *p, void **out,
		    size_t *len, size_t *cap)
{
	struct wbuf b = { &g->ctx->arena, NULL, 0, 0, 0 };
	struct blob_hdr h = { 0 };
	int ret = 0;

	h.magic = BLOB_MAGIC;
	h.version = BLOB_VERSION;
	h.nnodes = g->nnodes;
	h.ntasks = g->ntasks;
	h.noutputs = (uint32_t)g->noutputs;
	h.nworkers = g->ctx->nworkers;
	h.params_size = sizeof(*p);
	h.params = *p;
	put(&b, &h, sizeof(h));
	for (const cgr_node *n = g->nodes; n != NULL; n = n->next) {
		struct blob_node bn = { 0 };
		bn.kind = n->kind;
		bn.index = n->index;
		bn.transport = n->transport;
		bn.overlap = n->overlap;
		bn.edge_flags = n->edge_flags;
		bn.edge_comm = cgr_comm_id(n->edge_comm);
		bn.clen = n->kind == CGR__NODE_CONST ? n->cdata_len : 0;
		put(&b, &bn, sizeof(bn));
		if (bn.clen)
			put(&b, n->cdata, bn.clen);
	}
	for (const struct cgr__task *t = g->tasks; t != NULL && ret == 0;
	     t = t->next)
		ret = pack_task(g, &b, t);
	put_ids(&b, g->outputs, g->noutputs);
	pack_workers(g, &b);
	if (ret == 0 && b.err)
		ret = cgr__graph_fail(g, b.err, "out of memory");
	if (ret < 0) {
		cgr__free(b.a, b.p, b.cap, 64);
		return ret;
	}
	*out = b.p;
	*len = b.len;
	*cap = b.cap; /* what cgr__free takes back */
	return 0;
}

/* ---- unpacking ------------------------------------------------------ */

struct rbuf {
	const unsigned char *p;
	size_t len, off;
	char *why;
	size_t wlen;
	int err;
};

static int bad(struct rbuf *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int bad(struct rbuf *r, const char *fmt, ...)
{
	va_list ap;

	if (r->err == 0) {
		va_start(ap, fmt);
		vsnprintf(r->why, r->wlen, fmt, ap);
		va_end(ap);
		r->err = -EPROTO;
	}
	return -EPROTO;
}

/* The next n bytes (8-aligned), or NULL (r->err set). */
static const void *get(struct rbuf *r, size_t n, const char *what)
{
	const void *p;

	if (r->err)
		return NULL;
	if (n > r->len - r->off) {
		bad(r, "the graph's description ends inside %s", what);
		return NULL;
	}
	p = r->p + r->off;
	r->off += n;
	r->off = r->off + 7 < r->len ? CGR__ALIGN_UP(r->off, 8) : r->len;
	return p;
}

static int task_stub(cgr_task_ctx *tc, void *state, const cgr_value *in,
		     size_t nin, cgr_value *out, size_t nout)
{
	(void)tc, (void)state, (void)in, (void)nin, (void)out, (void)nout;
	return -ENOSYS; /* another process runs it */
}

static cgr_task_fn fn_named(const cgr_ctx *ctx, const char *name, size_t n)
{
	for (const cgr_export *e = ctx->exports; e != NULL && e->name; e++)
		if (e->task != NULL && strlen(e->name) == n &&
		    memcmp(e->name, name, n) == 0)
			return e->task;
	return NULL;
}

/* The blob, read (every record checked) before anything is built. */
struct unpack {
	cgr_graph *g;
	struct rbuf *r;
	const struct blob_hdr *h;
	const struct blob_node **bn; /* nnodes */
	const void **cdata;	     /* nnodes: a constant's slot */
	const struct blob_task **bt; /* ntasks */
	const char **tname, **tfn;   /* ntasks */
	const void **targ;	     /* ntasks */
	const uint32_t **ins;	     /* ntasks */
	const uint32_t **mem;	     /* ntasks: a collective's members */
	const uint32_t *outs;	     /* noutputs */
	const struct blob_worker *bw; /* nworkers */
	cgr_worker **ws;	      /* nworkers, from the caller */
	cgr_node **nodes;	      /* nnodes, as built */
};

static int read_nodes(struct unpack *u)
{
	struct rbuf *r = u->r;

	for (uint32_t id = 0; id < u->h->nnodes; id++) {
		const struct blob_node *bn = get(r, sizeof(*bn), "a node");
		if (bn == NULL)
			return r->err;
		u->bn[id] = bn;
		if (bn->kind != CGR__NODE_INPUT && bn->kind != CGR__NODE_CONST &&
		    bn->kind != CGR__NODE_TASK)
			return bad(r, "node %u of kind %d", id, bn->kind);
		if (bn->kind != CGR__NODE_CONST)
			continue;
		if (bn->clen < CGR__SLOT_HDR || bn->clen > r->len)
			return bad(r, "constant %u of %llu bytes", id,
				   (unsigned long long)bn->clen);
		u->cdata[id] = get(r, bn->clen, "a constant");
		if (u->cdata[id] == NULL)
			return r->err;
		if (cgr__slot_check(u->cdata[id], bn->clen - CGR__SLOT_HDR,
				    0) < 0)
			return bad(r, "constant %u is malformed", id);
	}
	return 0;
}

static int read_tasks(struct unpack *u)
{
	struct rbuf *r = u->r;

	for (uint32_t ti = 0; ti < u->h->ntasks; ti++) {
		const struct blob_task *bt = get(r, sizeof(*bt), "a task");
		if (bt == NULL)
			return r->err;
		if (bt->worker >= u->h->nworkers || bt->nout == 0 ||
		    bt->nout > 4096 || bt->nin > 4096 || bt->name_len > 255)
			return bad(r,
				   "task %u: worker %u of %u, %u inputs, %u "
				   "outputs, a name of %u bytes",
				   ti, bt->worker, u->h->nworkers, bt->nin,
				   bt->nout, bt->name_len);
		if (bt->nmembers > CGR_MAX_RANKS || bt->arg_len > (1u << 20) ||
		    (bt->coll != 0) != (bt->nmembers != 0))
			return bad(r, "task %u: %u members of a collective of "
				      "kind %d, %u arg bytes",
				   ti, bt->nmembers, bt->coll, bt->arg_len);
		u->bt[ti] = bt;
		u->tname[ti] = get(r, bt->name_len, "a task's name");
		u->tfn[ti] = get(r, bt->fn_len, "a task's function");
		u->targ[ti] = get(r, bt->arg_len, "a task's arg");
		u->ins[ti] = get(r, (size_t)bt->nin * sizeof(uint32_t),
				 "a task's inputs");
		u->mem[ti] = get(r, (size_t)bt->nmembers * sizeof(uint32_t),
				 "a collective's members");
		if (r->err)
			return r->err;
		for (uint32_t i = 0; i < bt->nmembers; i++)
			if (u->mem[ti][i] >= u->h->nworkers)
				return bad(r, "task %u: member %u is worker %u "
					      "of %u",
					   ti, i, u->mem[ti][i], u->h->nworkers);
		for (uint32_t i = 0; i < bt->nin; i++)
			if (u->ins[ti][i] != NO_NODE &&
			    u->ins[ti][i] >= u->h->nnodes)
				return bad(r, "task %u: input %u is node %u of %u",
					   ti, i, u->ins[ti][i], u->h->nnodes);
	}
	u->outs = get(r, (size_t)u->h->noutputs * sizeof(*u->outs),
		      "the outputs");
	u->bw = get(r, (size_t)u->h->nworkers * sizeof(*u->bw),
		    "the workers");
	for (uint32_t i = 0; r->err == 0 && i < u->h->noutputs; i++)
		if (u->outs[i] >= u->h->nnodes)
			return bad(r, "output %u is node %u of %u", i,
				   u->outs[i], u->h->nnodes);
	return r->err;
}

/* Collective ti again (its inputs made already: they come first). */
static int make_coll(struct unpack *u, uint32_t ti, const char *name,
		     cgr_node **first)
{
	const struct blob_task *bt = u->bt[ti];
	cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
	cgr_worker *m[CGR_MAX_RANKS];
	cgr_node **io;
	size_t nb = (bt->nin + bt->nout + 1) * sizeof(*io);
	int ret = 0;

	cp.name = name;
	cp.kind = bt->coll;
	cp.op = (cgr_redop)bt->op;
	cp.root = bt->root;
	cp.static_shape = bt->static_shape;
	cp.max_out_bytes = bt->max_out;
	cp.ntensors = bt->ntensors;
	cp.overlap = bt->overlap;
	cp.backend = bt->backend;
	/* A caller's communicator: this host's share of it (one that spans
	 * hosts has one on every host with members, remote/rcomm.c). */
	if (bt->comm != 0 &&
	    (cp.comm = cgr__comm_find(u->g->ctx, bt->comm)) == NULL)
		return bad(u->r, "collective %s: communicator %llu is not on "
				 "this host",
			   name, (unsigned long long)bt->comm);
	for (uint32_t i = 0; i < bt->nmembers; i++)
		m[i] = u->ws[u->mem[ti][i]];
	io = cgr__alloc(&u->g->ctx->arena, nb, 16);
	if (io == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < bt->nin && ret == 0; i++) {
		uint32_t id = u->ins[ti][i];
		io[i] = id != NO_NODE ? u->nodes[id] : NULL;
		if (io[i] == NULL)
			ret = bad(u->r, "collective %s: input %u (node %u) "
					"comes after it",
				  name, i, id);
	}
	if (ret == 0)
		ret = cgr_graph_collective(u->g, &cp, m, bt->nmembers, io,
					   bt->nin, io + bt->nin, bt->nout);
	*first = ret == 0 ? io[bt->nin] : NULL;
	cgr__free(&u->g->ctx->arena, io, nb, 16);
	if (ret < 0 && u->r->err == 0)
		return bad(u->r, "collective %s: %s", name,
			   cgr_graph_errmsg(u->g));
	return ret;
}

/* Task ti again, on the caller's worker; *first gets its first output. */
static int make_task(struct unpack *u, uint32_t ti, cgr_node **first)
{
	const struct blob_task *bt = u->bt[ti];
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_worker *w = u->ws[bt->worker];
	char name[256];
	cgr_node **outs;
	int ret;

	memcpy(name, u->tname[ti], bt->name_len);
	name[bt->name_len] = 0;
	if (bt->coll)
		return make_coll(u, ti, name, first);
	d.name = name;
	d.arg_data = u->targ[ti];
	d.arg_len = bt->arg_len;
	d.max_out_bytes = bt->max_out;
	d.flags = bt->flags;
	d.fn = !w->ops->shared ? task_stub :
				 fn_named(u->g->ctx, u->tfn[ti], bt->fn_len);
	if (d.fn == NULL)
		return bad(u->r, "task %s: its function '%.*s' is not exported "
				 "by this program",
			   name, (int)bt->fn_len, u->tfn[ti]);
	/* Outputs, then as many inputs (not set yet: NULL). */
	size_t nb = (bt->nout + bt->nin) * sizeof(*outs);
	outs = cgr__alloc(&u->g->ctx->arena, nb, 16);
	if (outs == NULL)
		return -ENOMEM;
	memset(outs, 0, nb);
	ret = cgr_graph_task(u->g, w, &d, outs + bt->nout, bt->nin, outs,
			     bt->nout);
	*first = ret == 0 ? outs[0] : NULL;
	cgr__free(&u->g->ctx->arena, outs, nb, 16);
	if (ret < 0)
		return bad(u->r, "task %s: %s", name, cgr_graph_errmsg(u->g));
	return 0;
}

/* Constant id, from its slot as the sender laid it out (a list's tables
 * point into the sender's copy: relocated into a view, which
 * cgr_graph_const copies). */
static int make_const(struct unpack *u, uint32_t id, cgr_node **n)
{
	struct cgr__slot_hdr *h = (struct cgr__slot_hdr *)u->cdata[id];
	struct cgr__list_view *view = NULL;
	cgr_value v;
	int ret;

	if (h->kind == CGR_VALUE_LIST &&
	    (view = malloc(sizeof(*view))) == NULL)
		return -ENOMEM;
	cgr__value_load_view(h, (size_t)(u->bn[id]->clen - CGR__SLOT_HDR), &v,
			     view);
	ret = v.kind == CGR_VALUE_ERROR && h->kind != CGR_VALUE_ERROR ?
		      bad(u->r, "constant %u: %s", id, v.u.error.msg) :
		      cgr_graph_const(u->g, &v, n);
	free(view);
	return ret;
}

/* The nodes in creation order (a task's output nodes where its first
 * one was made), then every task's inputs and the outputs. */
static int build(struct unpack *u)
{
	uint32_t ti = 0;
	int ret = 0;

	for (uint32_t id = 0; id < u->h->nnodes && ret == 0; id++) {
		const struct blob_node *bn = u->bn[id];
		cgr_node *n = u->nodes[id];
		if (bn->kind == CGR__NODE_INPUT) {
			ret = cgr_graph_input(u->g, bn->index, &n);
		} else if (bn->kind == CGR__NODE_CONST) {
			ret = make_const(u, id, &n);
		} else if (n == NULL) {
			if (ti >= u->h->ntasks)
				return bad(u->r, "more tasks than %u",
					   u->h->ntasks);
			ret = make_task(u, ti++, &n);
			for (cgr_node *m = n; ret == 0 && m != NULL;
			     m = m->next)
				if (m->id < u->h->nnodes)
					u->nodes[m->id] = m;
		}
		if (ret == 0 && (n == NULL || n->id != id ||
				 (n->kind == CGR__NODE_TASK) !=
					 (bn->kind == CGR__NODE_TASK)))
			return bad(u->r, "node %u comes out another node", id);
		if (ret < 0)
			return u->r->err ? u->r->err :
					   bad(u->r, "node %u: %s", id,
					       cgr_graph_errmsg(u->g));
		u->nodes[id] = n;
		n->transport = bn->transport;
		n->edge_flags = bn->edge_flags;
		n->overlap = bn->overlap;
		/* Its device edge's communicator: this host's part. */
		if (bn->edge_comm != 0 &&
		    (n->edge_comm = cgr__comm_find(u->g->ctx,
						   bn->edge_comm)) == NULL)
			return bad(u->r, "node %u: communicator %llu is not "
					 "on this host",
				   id, (unsigned long long)bn->edge_comm);
	}
	if (ti != u->h->ntasks)
		return bad(u->r, "%u tasks of %u", ti, u->h->ntasks);
	ti = 0;
	for (struct cgr__task *t = u->g->tasks; t != NULL; t = t->next, ti++)
		for (size_t i = 0; !t->coll && i < t->nin; i++)
			if (u->ins[ti][i] != NO_NODE)
				t->in[i] = u->nodes[u->ins[ti][i]];
	return 0;
}

static int unpack_outputs(struct unpack *u)
{
	cgr_node **o = cgr__alloc(&u->g->ctx->arena,
				  (u->h->noutputs + 1) * sizeof(*o), 16);
	int ret;

	if (o == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < u->h->noutputs; i++)
		o[i] = u->nodes[u->outs[i]];
	ret = cgr_graph_output(u->g, o, u->h->noutputs);
	cgr__free(&u->g->ctx->arena, o, (u->h->noutputs + 1) * sizeof(*o), 16);
	return ret < 0 ? bad(u->r, "%s", cgr_graph_errmsg(u->g)) : 0;
}

/* The tables of u, in one allocation (freed by the caller). */
static size_t tables_size(const struct blob_hdr *h)
{
	return (size_t)h->nnodes * (2 * sizeof(void *) + sizeof(cgr_node *)) +
	       (size_t)h->ntasks * 6 * sizeof(void *) +
	       (size_t)h->nworkers * sizeof(cgr_worker *) + 64;
}

static void tables_init(struct unpack *u, void *mem)
{
	const struct blob_hdr *h = u->h;
	void **p = mem;

	u->bn = (const struct blob_node **)p, p += h->nnodes;
	u->cdata = (const void **)p, p += h->nnodes;
	u->nodes = (cgr_node **)p, p += h->nnodes;
	u->bt = (const struct blob_task **)p, p += h->ntasks;
	u->tname = (const char **)p, p += h->ntasks;
	u->tfn = (const char **)p, p += h->ntasks;
	u->targ = (const void **)p, p += h->ntasks;
	u->ins = (const uint32_t **)p, p += h->ntasks;
	u->mem = (const uint32_t **)p, p += h->ntasks;
	u->ws = (cgr_worker **)p;
}

static int read_hdr(struct rbuf *r, const struct blob_hdr **out)
{
	const struct blob_hdr *h = get(r, sizeof(*h), "its header");

	if (h == NULL)
		return r->err;
	if (h->magic != BLOB_MAGIC || h->version != BLOB_VERSION)
		return bad(r, "not a graph description of this version "
			      "(magic 0x%08x, version %u)",
			   h->magic, h->version);
	if (h->params_size != sizeof(h->params) || h->nnodes > (1u << 24) ||
	    h->ntasks > h->nnodes || h->noutputs == 0 ||
	    h->noutputs > 4096 || h->nworkers == 0 || h->nworkers > 65536)
		return bad(r, "a graph of %u nodes, %u tasks, %u outputs, "
			      "%u workers (parameters of %llu bytes)",
			   h->nnodes, h->ntasks, h->noutputs, h->nworkers,
			   (unsigned long long)h->params_size);
	*out = h;
	return 0;
}

int cgr__graph_unpack(cgr_ctx *ctx, const void *blob, size_t len,
		      const struct cgr__unpack_cb *cb, cgr_graph **out,
		      cgr_compile_params *params, char *why, size_t wlen)
{
	struct rbuf r = { blob, len, 0, why, wlen, 0 };
	struct unpack u = { 0 };
	size_t tsize = 0;
	void *tables = NULL;
	int ret = read_hdr(&r, &u.h);

	u.r = &r;
	if (ret == 0) {
		tsize = tables_size(u.h);
		tables = cgr__alloc(&ctx->arena, tsize, 64);
		if (tables == NULL)
			return -ENOMEM;
		memset(tables, 0, tsize);
		tables_init(&u, tables);
		ret = read_nodes(&u);
	}
	if (ret == 0)
		ret = read_tasks(&u);
	for (uint32_t i = 0; ret == 0 && i < u.h->nworkers; i++) {
		char name[sizeof(u.bw[i].name)];
		memcpy(name, u.bw[i].name, sizeof(name));
		name[sizeof(name) - 1] = 0;
		ret = cb->worker(cb->arg, i, u.bw[i].device, name, &u.ws[i]);
		if (ret < 0)
			bad(&r, "worker %u (%s) has no stand-in here: %s", i,
			    name, cgr_strerror(ret));
	}
	if (ret == 0 && (ret = cgr_graph_create(ctx, &u.g)) == 0) {
		ret = build(&u);
		if (ret == 0)
			ret = unpack_outputs(&u);
		if (ret < 0)
			cgr_graph_destroy(u.g);
	}
	if (ret == 0) {
		*out = u.g;
		*params = u.h->params;
	}
	cgr__free(&ctx->arena, tables, tsize, 64);
	return ret;
}
