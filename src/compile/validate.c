/*
 * compile/validate.c: the first pass: compile parameters, then the graph:
 * every input set, every task on a live worker that serves no other graph,
 * no cycle (named), every task reaching an output (named), every argument
 * used (named).  It also fixes the global order every program follows: a
 * topological order of the tasks that prefers bind order.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "compile/compile.h"

#define CGR__DEF_INFLIGHT 8u
#define CGR__MAX_INFLIGHT 4096u
#define CGR__DEF_VALUE_BYTES (64u * 1024)
#define CGR__DEF_TIMEOUT_NS (10ll * 1000000000)
#define CGR__DEF_SPIN_NS (50ll * 1000)
#define CGR__DEF_INLINE_NS (20ll * 1000)

#define CGR__BAD(why_)                   \
	do {                             \
		if (why != NULL)         \
			*why = (why_);   \
		return -EINVAL;          \
	} while (0)

int cgr__compile_params(cgr_compile_params *p, const cgr_compile_params *in,
			const char **why)
{
	if (in != NULL && in->size < sizeof(size_t))
		CGR__BAD("size smaller than a size_t");
	CGR__PARAMS_COPY(*p, in,
			 ((cgr_compile_params)CGR_COMPILE_PARAMS_INIT));
	if (p->max_inflight == 0)
		p->max_inflight = CGR__DEF_INFLIGHT;
	if (p->max_inflight > CGR__MAX_INFLIGHT)
		CGR__BAD("max_inflight over 4096");
	if (p->max_value_bytes == 0)
		p->max_value_bytes = CGR__DEF_VALUE_BYTES;
	if (p->max_value_bytes > CGR__MAX_VALUE_BYTES)
		CGR__BAD("max_value_bytes over 2^40");
	if (p->max_value_bytes < CGR__MIN_VALUE_BYTES)
		p->max_value_bytes = CGR__MIN_VALUE_BYTES;
	if (p->submit_timeout_ns < 0)
		p->submit_timeout_ns = CGR__DEF_TIMEOUT_NS;
	if (p->get_timeout_ns < 0)
		p->get_timeout_ns = CGR__DEF_TIMEOUT_NS;
	if (p->spin_ns < 0)
		p->spin_ns = CGR__DEF_SPIN_NS;
	if (p->inline_ns == -1)
		p->inline_ns = CGR__DEF_INLINE_NS;
	if (p->inline_ns < 0 || p->inline_ns > 1000000000)
		CGR__BAD("inline_ns not -1 or 0 to 1 s");
	if (p->trace_events > (1u << 24))
		CGR__BAD("trace_events over 2^24");
	if (p->overlap < 0 || p->overlap > 1)
		CGR__BAD("overlap not 0 or 1");
	if (p->sim_comm_ns < 0 || p->sim_comm_ns > 10ll * 1000000000)
		CGR__BAD("sim_comm_ns not 0 to 10 s");
	if (p->wait_mode != CGR_WAIT_ADAPTIVE && p->wait_mode != CGR_WAIT_BUSY &&
	    p->wait_mode != CGR_WAIT_BLOCK)
		CGR__BAD("an unknown wait_mode");
	return 0;
}
#undef CGR__BAD

/* ---- tasks and workers --------------------------------------------- */

static int check_worker(cgr_graph *g, struct cgr__task *t, cgr_worker *w)
{
	if (w->destroyed || w->abandoned)
		return cgr__graph_fail(g, CGR_EWORKERGONE,
				       "%s %s is bound to worker %s, which was "
				       "%s",
				       cgr__coll_name(t->coll), t->name,
				       w->name,
				       w->abandoned ? "abandoned" :
						      "destroyed");
	if (w->busy_with != NULL && !cgr__torn_down(w->busy_with))
		return cgr__graph_fail(g, -EBUSY,
				       "%s %s: worker %s already serves "
				       "another compiled graph",
				       cgr__coll_name(t->coll), t->name,
				       w->name);
	return 0;
}

int cgr__validate_tasks(cgr_graph *g)
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
			ret = check_worker(g, t, t->w);
			if (ret < 0)
				return ret;
			if ((t->flags & CGR_TASK_DEVICE) && t->w->device < 0)
				return cgr__graph_fail(
					g, -EINVAL,
					"task %s has device outputs "
					"(CGR_TASK_DEVICE) but worker %s owns "
					"no CUDA device",
					t->name, t->w->name);
			continue;
		}
		for (size_t i = 0; i < t->nmembers; i++) {
			ret = check_worker(g, t, t->members[i]);
			if (ret < 0)
				return ret;
		}
	}
	return 0;
}

/* ---- the order ----------------------------------------------------- */

/* Per task id, while validating. */
struct vt {
	unsigned indeg;
	bool placed;  /* in the order */
	bool visited; /* cycle search */
	bool live;    /* reaches an output */
};

static struct cgr__task *leftover_producer(const struct vt *v,
					   struct cgr__task *t)
{
	for (size_t i = 0; i < t->nin; i++)
		if (t->in[i]->kind == CGR__NODE_TASK &&
		    !v[t->in[i]->task->id].placed)
			return t->in[i]->task;
	return t; /* unreachable: Kahn left t only for such a producer */
}

/*
 * Names a cycle among the tasks Kahn's algorithm left over: each has a
 * left-over producer, so walking to the first one until a task repeats
 * finds a task on a loop, which the same walk traces again.
 */
static int name_cycle(cgr_graph *g, struct vt *v)
{
	struct cgr__task *t, *path[64], *start;
	char buf[400];
	size_t np = 0, len = 0;

	for (t = g->tasks; t != NULL && v[t->id].placed; t = t->next)
		;
	while (!v[t->id].visited) {
		v[t->id].visited = true;
		t = leftover_producer(v, t);
	}
	start = t;
	do {
		if (np < CGR__ARRAY_SIZE(path))
			path[np++] = t;
		t = leftover_producer(v, t);
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

/* The ready tasks by id, smallest first (a binary heap). */
struct ready {
	unsigned *h;
	size_t n;
};

static void ready_push(struct ready *r, unsigned id)
{
	size_t i = r->n++;

	while (i > 0 && r->h[(i - 1) / 2] > id) {
		r->h[i] = r->h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	r->h[i] = id;
}

static unsigned ready_pop(struct ready *r)
{
	unsigned top = r->h[0], last = r->h[--r->n];
	size_t i = 0, k;

	while ((k = 2 * i + 1) < r->n) {
		if (k + 1 < r->n && r->h[k + 1] < r->h[k])
			k++;
		if (r->h[k] >= last)
			break;
		r->h[i] = r->h[k];
		i = k;
	}
	if (r->n > 0)
		r->h[i] = last;
	return top;
}

/*
 * Kahn's algorithm, always taking the ready task bound first: ids follow
 * bind order, so the smallest ready id (a heap).  Each task's consumers,
 * one entry per input that reads it, sit in one array (first[id] to
 * first[id + 1]): O((tasks + edges) log tasks) in all.
 */
static int topo_order(struct cgr__cc *cc, struct vt *v, unsigned *mem)
{
	cgr_graph *g = cc->g;
	size_t nt = g->ntasks, ne = 0, n = 0;
	unsigned *first = mem, *cons = mem + nt + 1, *fill;
	struct ready r;
	struct cgr__task *t;

	memset(first, 0, (nt + 1) * sizeof(*first));
	for (t = g->tasks; t != NULL; t = t->next)
		for (size_t i = 0; i < t->nin; i++)
			if (t->in[i]->kind == CGR__NODE_TASK) {
				v[t->id].indeg++;
				first[t->in[i]->task->id + 1]++;
				ne++;
			}
	for (size_t i = 0; i < nt; i++)
		first[i + 1] += first[i];
	r.h = cons + ne;
	r.n = 0;
	fill = r.h + nt;
	memcpy(fill, first, nt * sizeof(*fill));
	for (t = g->tasks; t != NULL; t = t->next)
		for (size_t i = 0; i < t->nin; i++)
			if (t->in[i]->kind == CGR__NODE_TASK)
				cons[fill[t->in[i]->task->id]++] = t->id;
	for (t = g->tasks; t != NULL; t = t->next)
		if (v[t->id].indeg == 0)
			ready_push(&r, t->id);
	while (r.n > 0) {
		unsigned id = ready_pop(&r);
		v[id].placed = true;
		cc->order[n++] = cc->by_id[id];
		for (unsigned k = first[id]; k < first[id + 1]; k++)
			if (--v[cons[k]].indeg == 0)
				ready_push(&r, cons[k]);
	}
	return n < nt ? name_cycle(g, v) : 0;
}

/* Words topo_order works in: first, consumers, heap, fill. */
static size_t topo_words(const cgr_graph *g)
{
	size_t ne = 0;

	for (const struct cgr__task *t = g->tasks; t != NULL; t = t->next)
		ne += t->nin;
	return 3 * g->ntasks + 1 + ne;
}

static int check_reach(cgr_graph *g, struct vt *v, struct cgr__task **order)
{
	char buf[300];
	size_t len = 0, bad = 0;

	for (size_t i = 0; i < g->noutputs; i++)
		v[g->outputs[i]->task->id].live = true;
	/* Reverse topological sweep: a producer is live if a consumer is. */
	for (unsigned k = g->ntasks; k-- > 0;) {
		struct cgr__task *t = order[k];
		if (!v[t->id].live)
			continue;
		for (size_t i = 0; i < t->nin; i++)
			if (t->in[i]->kind == CGR__NODE_TASK)
				v[t->in[i]->task->id].live = true;
	}
	buf[0] = 0;
	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		if (v[t->id].live)
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
static int check_args(cgr_graph *g, size_t *nargs)
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

int cgr__validate_graph(struct cgr__cc *cc)
{
	cgr_graph *g = cc->g;
	struct cgr__arena *a = &g->ctx->arena;
	size_t size = (g->ntasks + 1) * sizeof(struct vt);
	size_t wsize = topo_words(g) * sizeof(unsigned);
	struct vt *v = cgr__alloc(a, size, 16);
	unsigned *w = cgr__alloc(a, wsize, 16);
	int ret = -ENOMEM;

	if (v != NULL && w != NULL)
		ret = topo_order(cc, v, w);
	if (ret == 0)
		ret = check_reach(g, v, cc->order);
	if (ret == 0)
		ret = check_args(g, &cc->c->nargs);
	cgr__free(a, w, wsize, 16);
	cgr__free(a, v, size, 16);
	return ret;
}
