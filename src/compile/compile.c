/*
 * compile/compile.c: the compiler's pipeline (compile.h lists the passes)
 * and the compiled graph's memory: cgr_graph_compile validates, lowers,
 * verifies, overlaps, prunes, verifies again, writes the plan and builds
 * the programs from it, and creates what the programs use, then hands
 * each worker its program.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "compile/compile.h"

/* Keeps p (size bytes) on list l: 0 or -ENOMEM. */
static int alist_add(struct cgr__arena *a, struct cgr__alist *l, void *p,
		     size_t size)
{
	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 64;
		void **na = cgr__alloc(a, ncap * sizeof(void *), 16);
		size_t *ns = cgr__alloc(a, ncap * sizeof(size_t), 16);
		if (na == NULL || ns == NULL) {
			cgr__free(a, na, ncap * sizeof(void *), 16);
			cgr__free(a, ns, ncap * sizeof(size_t), 16);
			return -ENOMEM;
		}
		if (l->n) {
			memcpy(na, l->p, l->n * sizeof(void *));
			memcpy(ns, l->sizes, l->n * sizeof(size_t));
		}
		cgr__free(a, l->p, l->cap * sizeof(void *), 16);
		cgr__free(a, l->sizes, l->cap * sizeof(size_t), 16);
		l->p = na;
		l->sizes = ns;
		l->cap = ncap;
	}
	l->p[l->n] = p;
	l->sizes[l->n++] = size;
	return 0;
}

/* Frees everything on l, and l's own arrays. */
static void alist_free(struct cgr__arena *a, struct cgr__alist *l)
{
	for (size_t i = 0; i < l->n; i++)
		cgr__free(a, l->p[i], l->sizes[i], 64);
	cgr__free(a, l->p, l->cap * sizeof(void *), 16);
	cgr__free(a, l->sizes, l->cap * sizeof(size_t), 16);
	memset(l, 0, sizeof(*l));
}

void *cgr__c_alloc(struct cgr_compiled *c, size_t size)
{
	struct cgr__arena *a = &c->ctx->arena;
	void *p = cgr__alloc(a, size, 64);

	if (p != NULL &&
	    alist_add(a, c->scratch ? &c->scratch_allocs : &c->allocs, p,
		      size) < 0) {
		cgr__free(a, p, size, 64);
		return NULL;
	}
	return p;
}

void cgr__c_scratch(struct cgr_compiled *c, bool on)
{
	c->scratch = on;
}

int cgr__c_dalloc(struct cgr_compiled *c, int dev, size_t size, void **out)
{
	struct cgr__device *d;
	int ret;

	if (c->ndallocs == c->dallocs_cap) {
		size_t ncap = c->dallocs_cap ? 2 * c->dallocs_cap : 16;
		void **na = cgr__c_alloc(c, ncap * sizeof(void *));
		struct cgr__device **nd =
			cgr__c_alloc(c, ncap * sizeof(*nd));
		if (na == NULL || nd == NULL)
			return -ENOMEM;
		if (c->ndallocs) {
			memcpy(na, c->dallocs, c->ndallocs * sizeof(void *));
			memcpy(nd, c->ddevs, c->ndallocs * sizeof(*nd));
		}
		c->dallocs = na;
		c->ddevs = nd;
		c->dallocs_cap = ncap;
	}
	ret = cgr__device_get(c->ctx, dev, &d);
	if (ret < 0)
		return ret;
	ret = cgr__device_malloc(d, size ? size : 1, out);
	if (ret < 0) {
		cgr__device_put(d);
		return ret;
	}
	c->dallocs[c->ndallocs] = *out;
	c->ddevs[c->ndallocs++] = d;
	return 0;
}

void *cgr__c_reserve(struct cgr_compiled *c, size_t size)
{
	void *p;

	if (c->seg != NULL)
		return cgr__c_salloc(c, size); /* the segment is sparse */
	if (c->big_map != NULL || size == 0)
		return NULL; /* one reservation per graph */
	p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	c->big_map = p;
	c->big_len = size;
	return p;
}

char *cgr__c_strdup(struct cgr_compiled *c, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = cgr__c_alloc(c, n);
	if (d != NULL)
		memcpy(d, s, n);
	return d;
}

/* The device side: NCCL jobs' events and streams, device memory. */
static void free_device(struct cgr_compiled *c)
{
	for (size_t i = 0; i < c->nprogs; i++) {
		struct cgr__prog *p = &c->progs[i];
		for (size_t k = 0; k < p->nops; k++) {
			struct cgr__coll_rt *cr = p->ops[k].coll;
			if (p->ops[k].kind != CGR__OP_COLL || !cr->nccl)
				continue;
			for (uint32_t q = 0; q < c->nslots; q++) {
				cgr_future_release(cr->jobs[q].f);
				cgr_event_destroy(cr->jobs[q].ev);
			}
		}
		for (int s = 0; s < CGR__S_NCCL; s++)
			cgr_stream_destroy(p->nstreams[s]);
		cgr_stream_destroy(p->far_s);
	}
	for (size_t i = 0; i < c->ndallocs; i++) {
		cgr__device_free(c->ddevs[i], c->dallocs[i]);
		cgr__device_put(c->ddevs[i]);
	}
}

static void compiled_free(struct cgr_compiled *c)
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
	free_device(c);
	if (c->big_map != NULL)
		munmap(c->big_map, c->big_len);
	alist_free(a, &c->scratch_allocs);
	alist_free(a, &c->allocs);
	cgr__seg_free(c);
	cgr__free(a, c, sizeof(*c), 64);
	cgr__ctx_put(ctx);
}

void cgr__compiled_unref(struct cgr_compiled *c)
{
	/* Acq_rel: the last owner sees every other owner's writes. */
	if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
		compiled_free(c);
}

/* The shared state of c's runners, for nworkers worker indices. */
static struct cgr__gctl *ctl_new(struct cgr_compiled *c, unsigned nworkers)
{
	struct cgr__gctl *ctl = cgr__c_salloc(
		c, sizeof(*ctl) + nworkers * sizeof(ctl->bells[0]));

	if (ctl == NULL)
		return NULL;
	if (cgr__c_attached(c)) /* a worker process: the driver's, checked */
		return ctl->nbells == nworkers ? ctl : NULL;
	atomic_init(&ctl->stop, 0);
	atomic_init(&ctl->gone, 0);
	atomic_init(&ctl->admitted, 0);
	atomic_init(&ctl->drain_deadline, 0);
	atomic_init(&ctl->dead_claim, 0);
	atomic_init(&ctl->dead, 0);
	cgr__bell_init(&ctl->drv.b);
	ctl->nbells = nworkers;
	for (unsigned i = 0; i < nworkers; i++)
		cgr__bell_init(&ctl->bells[i].b);
	return ctl;
}

/* Whether a task of g runs elsewhere (a worker not shared: of another
 * process). */
static bool graph_remote(const cgr_graph *g)
{
	for (const struct cgr__task *t = g->tasks; t != NULL; t = t->next)
		for (size_t i = 0; i < cgr__task_nworkers(t); i++)
			if (!cgr__task_worker(t, i)->ops->shared)
				return true;
	return false;
}

/* A compiled graph with nothing in it yet, holding a context reference;
 * its shared state in a segment if the graph has process workers (the
 * driver's new one, or a worker process's view of the driver's: seg_fd
 * >= 0). */
static int compiled_new(cgr_graph *g, const cgr_compile_params *prm,
			bool plan_only, int seg_fd, struct cgr_compiled **out)
{
	struct cgr_compiled *c = cgr__alloc(&g->ctx->arena, sizeof(*c), 64);
	char why[sizeof(g->errmsg)] = "";
	const char *bad = "";
	int ret = 0;

	if (c == NULL)
		return -ENOMEM;
	c->ctx = g->ctx;
	cgr__ctx_ref(g->ctx);
	atomic_init(&c->refs, 1);
	c->t_start = cgr__now_ns();
	*out = c;
	if (seg_fd >= 0)
		ret = cgr__seg_attach(c, seg_fd, why, sizeof(why));
	else if (!plan_only && graph_remote(g))
		ret = cgr__seg_create(c);
#ifdef CGR_FAULT_INJECTION
	if (seg_fd >= 0 && getenv("CGR_TEST_CORRUPT_SLOTS") != NULL)
		c->debug_corrupt = atoi(getenv("CGR_TEST_CORRUPT_SLOTS"));
#endif
	if (ret < 0)
		return cgr__graph_fail(g, ret,
				       "the graph's shared segment: %s",
				       why[0] ? why : cgr_strerror(ret));
	c->ctl = ctl_new(c, g->ctx->nworkers);
	if (c->ctl == NULL && cgr__c_attached(c))
		return cgr__graph_fail(g, -EPROTO,
				       "the graph's shared run state is not "
				       "one for %u workers",
				       g->ctx->nworkers);
	if (c->ctl == NULL)
		return -ENOMEM;
	ret = cgr__compile_params(&c->p, prm, &bad);
	if (ret < 0)
		return cgr__graph_fail(g, ret, "invalid compile parameters: %s",
				       bad);
	c->nslots = 1;
	while (c->nslots < c->p.max_inflight)
		c->nslots <<= 1;
	return 0;
}

/* The compilation's tables, once the graph's tasks are final. */
static int cc_init(struct cgr__cc *cc)
{
	cgr_graph *g = cc->g;
	struct cgr_compiled *c = cc->c;
	size_t n = g->ntasks + 1;

	cc->ntasks = g->ntasks;
	cc->by_id = cgr__c_alloc(c, n * sizeof(*cc->by_id));
	cc->order = cgr__c_alloc(c, n * sizeof(*cc->order));
	cc->boards = cgr__c_alloc(c, n * sizeof(*cc->boards));
	cc->ws = cgr__c_alloc(c, (g->ctx->nworkers + 1) * sizeof(*cc->ws));
	c->arrived = cgr__c_alloc(c, c->nslots * sizeof(uint32_t));
	c->released = cgr__c_alloc(c, c->nslots);
	if (cc->by_id == NULL || cc->order == NULL || cc->boards == NULL ||
	    cc->ws == NULL || c->arrived == NULL || c->released == NULL)
		return -ENOMEM;
	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next)
		cc->by_id[t->id] = t;
	return 0;
}

/* verify, for the programs as they are now; `stage` names them. */
static int verify(struct cgr__cc *cc, const char *stage)
{
	cgr_graph *g = cc->g;
	int ret = cgr__verify(cc->c, g->errmsg, sizeof(g->errmsg));

	if (ret == CGR_EDEADLOCK && stage != NULL) {
		/* The plain programs were safe: a bug of the rewrite. */
		char msg[sizeof(g->errmsg)];
		memcpy(msg, g->errmsg, sizeof(msg));
		snprintf(g->errmsg, sizeof(g->errmsg), "%s: %.*s", stage,
			 (int)(sizeof(g->errmsg) - strlen(stage) - 3), msg);
		cgr__err(&g->ctx->log, "graph: %s", g->errmsg);
	} else if (ret == CGR_EDEADLOCK) {
		cgr__info(&g->ctx->log, "graph: %s", g->errmsg);
	}
	return ret;
}

/* The first byte where plans a and b (n bytes each) differ, past their
 * checksums (which differ whenever anything else does). */
static size_t first_diff(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;
	size_t i = offsetof(struct cgr__plan_hdr, checksum) + 8;

	while (i < n && x[i] == y[i])
		i++;
	return i;
}

/*
 * The plan: the working programs encoded once, into the shared segment
 * when the graph has one, and the programs that run built from it.  A
 * worker process compiling over the driver's segment takes the driver's
 * plan there instead, checked first, and refuses it unless its own
 * compile came out the same bytes (the layout it laid out is the one the
 * plan refers to).
 */
static int plan(struct cgr__cc *cc)
{
	struct cgr_compiled *c = cc->c;
	cgr_graph *g = cc->g;
	bool attached = cgr__c_attached(c);
	const char *where = attached ? " in the driver's segment" : "";
	char why[sizeof(g->errmsg) - 64];
	struct cgr__plan pl;
	const void *src;
	void *img, *at;
	size_t len;
	int ret = cgr__plan_encode(cc, &img, &len);

	if (ret < 0)
		return ret;
	at = img;
	if (c->seg != NULL && (at = cgr__c_salloc(c, len)) == NULL)
		return attached ? cgr__graph_fail(g, -EPROTO,
						  "the compiled plan%s lies "
						  "outside it",
						  where)
				: -ENOMEM;
	if (c->seg != NULL && !attached)
		memcpy(at, img, len);
	src = at;
	if (!attached && g->plan_hook != NULL)
		src = g->plan_hook(g->plan_hook_arg, at, len);
	ret = cgr__plan_check(src, len, &pl, why, sizeof(why));
	if (ret < 0)
		return cgr__graph_fail(g, ret, "the compiled plan%s: %s", where,
				       why);
	if (attached && memcmp(src, img, len) != 0)
		return cgr__graph_fail(g, -EPROTO,
				       "the compiled plan%s differs from this "
				       "worker's compile (at byte %zu of %zu): "
				       "not the same build of cgr?",
				       where, first_diff(src, img, len), len);
	c->plan = at;
	c->plan_len = len;
	return cgr__plan_load(cc, &pl);
}

const char *const cgr__pass_names[CGR__NPASSES] = {
	"validate", "edges", "ports",	"programs",
	"verify",   "overlap", "plan", "create",
};

/* Ends pass `pass` of c begun at *t (now the next one's start). */
static void pass_done(struct cgr_compiled *c, enum cgr__pass pass, int64_t *t)
{
	int64_t now = cgr__now_ns();

	c->pass_ns[pass] += now - *t;
	*t = now;
}

/* The pipeline of compile.h, each pass timed.  *out gets the compiled
 * graph even on failure (the caller frees it). */
static int compile(struct cgr__cc *cc)
{
	struct cgr_compiled *c = cc->c;
	int64_t t = cgr__now_ns();
	int ret = cgr__validate_tasks(cc->g);

	if (ret == 0) {
		pass_done(c, CGR__PASS_VALIDATE, &t);
		ret = cgr__lower_edges(cc->g);
		pass_done(c, CGR__PASS_EDGES, &t);
	}
	if (ret == 0)
		ret = cc_init(cc);
	if (ret == 0)
		ret = cgr__validate_graph(cc);
	pass_done(c, CGR__PASS_VALIDATE, &t);
	if (ret == 0)
		ret = cgr__lower_devices(cc);
	if (ret == 0)
		ret = cgr__lower_ports(cc);
	pass_done(c, CGR__PASS_PORTS, &t);
	if (ret == 0)
		ret = cgr__lower_progs(cc);
	pass_done(c, CGR__PASS_PROGRAMS, &t);
	if (ret == 0)
		ret = verify(cc, NULL);
	pass_done(c, CGR__PASS_VERIFY, &t);
	if (ret == 0 && (ret = cgr__overlap(cc)) > 0) {
		ret = cgr__prune_waits(cc->c, cc->ntasks);
		if (ret == 0)
			ret = verify(cc, "after the overlap rewrite");
	}
	pass_done(c, CGR__PASS_OVERLAP, &t);
	/* The plan is written from the working programs and the runtime
	 * built from it: they are scratch no more. */
	cgr__c_scratch(c, false);
	if (ret == 0)
		ret = plan(cc);
	if (ret != 0) {
		/* The working programs (no plan loaded over them) go with
		 * the scratch: nothing may free them again. */
		c->progs = NULL;
		c->nprogs = 0;
	}
	alist_free(&c->ctx->arena, &c->scratch_allocs);
	pass_done(c, CGR__PASS_PLAN, &t);
	if (ret == 0 && !cc->plan_only)
		ret = cgr__create(cc);
	pass_done(c, CGR__PASS_CREATE, &t);
	if (ret == 0) {
		/* For eager execution: compile-time memory of c. */
		cc->c->node_port = cc->node_port;
		cc->c->nnodes = cc->g->nnodes;
		cc->c->order = cc->order;
		cc->c->norder = cc->ntasks;
	}
	if (ret == -ENOMEM && cc->g->errmsg[0] == 0)
		cgr__graph_fail(cc->g, ret, "out of memory compiling the graph");
	else if (ret < 0 && cc->g->errmsg[0] == 0)
		cgr__graph_fail(cc->g, ret,
				"cannot set up the graph's workers (a stream "
				"thread, a device, a communicator): %s",
				cgr_strerror(ret));
	return ret;
}

/* The description of a graph with process workers, as the caller built
 * it (before the compiler adds edges' collectives): what each worker
 * process builds again. */
struct blob {
	void *p;
	size_t len, cap;
};

/* The driver's segment, once compiled: the graph's description inside
 * for the worker processes, sealed.  A worker process checks that its
 * layout came out the driver's. */
static int seg_finish(struct cgr__cc *cc, int seg_fd, const struct blob *bl)
{
	cgr_graph *g = cc->g;
	struct cgr_compiled *c = cc->c;
	char why[sizeof(g->errmsg)];
	int ret;

	if (seg_fd >= 0) {
		ret = cgr__seg_check(c, why, sizeof(why));
		return ret < 0 ? cgr__graph_fail(g, ret, "%s", why) : 0;
	}
	ret = cgr__seg_seal(c, bl->p, bl->len);
	if (ret < 0)
		return cgr__graph_fail(g, ret,
				       "the graph's shared segment: %s",
				       cgr_strerror(ret));
	return 0;
}

static int compile_graph(cgr_graph *g, const cgr_compile_params *prm,
			 bool plan_only, int seg_fd, cgr_compiled **out)
{
	struct blob bl = { NULL, 0, 0 };
	struct cgr__cc cc;
	int ret = 0;

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
	memset(&cc, 0, sizeof(cc));
	cc.g = g;
	cc.plan_only = plan_only;
	/* The description the other processes compile: made by the driver
	 * (a serving rank, remote/, compiles one it was sent). */
	if (!plan_only && seg_fd < 0 && !g->ctx->driver_far &&
	    graph_remote(g)) {
		cgr_compile_params pp;
		const char *why = "";
		ret = cgr__compile_params(&pp, prm, &why);
		if (ret < 0)
			return cgr__graph_fail(g, ret,
					       "invalid compile parameters: %s",
					       why);
		ret = cgr__graph_pack(g, &pp, &bl.p, &bl.len, &bl.cap);
	}
	if (ret == 0)
		ret = compiled_new(g, prm, plan_only, seg_fd, &cc.c);
	if (ret == 0)
		ret = compile(&cc);
	if (ret == 0 && cc.c->seg != NULL)
		ret = seg_finish(&cc, seg_fd, &bl);
	cgr__free(&g->ctx->arena, bl.p, bl.cap, 64);
	if (ret < 0) {
		if (cc.c != NULL)
			cgr__compiled_unref(cc.c);
		return ret;
	}
	*out = cc.c;
	return 0;
}

int cgr__graph_plan(cgr_graph *g, const cgr_compile_params *p,
		    cgr_compiled **out)
{
	return compile_graph(g, p, true, -1, out);
}

void cgr__plan_free(cgr_compiled *c)
{
	if (c != NULL)
		cgr__compiled_unref(c);
}

int cgr__graph_build(cgr_graph *g, const cgr_compile_params *p, int seg_fd,
		     cgr_compiled **out)
{
	return compile_graph(g, p, false, seg_fd, out);
}

size_t cgr_compiled_noutputs(const cgr_compiled *c)
{
	return c != NULL ? c->nout : 0;
}

size_t cgr_compiled_nargs(const cgr_compiled *c)
{
	return c != NULL ? c->nargs : 0;
}
