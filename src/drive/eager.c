/*
 * drive/eager.c: eager (non-compiled) execution of a graph (cgr.h,
 * cgr_graph_execute_eager).
 *
 * The first eager run compiles the graph for itself (overlap off, one
 * execution in flight) without starting any program and without marking
 * the graph compiled (a run after a change to the graph compiles it
 * again): that gives every task its context, every node its
 * buffer and every collective its communicator, exactly as compiled
 * execution has them.  Each run then stores the arguments, and the driver
 * walks the tasks in the compiler's global order: a task's operation is
 * handed to its worker (its kind's step_post: a thread worker's mailbox,
 * thread/thread.c), a collective's to every member at once, and the
 * driver waits for each before the next, so no deadlock proof is needed
 * and values move through the same buffers (no rings).  Hooks run on the
 * driver's thread between steps; every node's value stays readable until
 * the next run.
 *
 * Threads: the driver thread; each step on its worker's thread.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "drive/drive.h"

struct eager {
	cgr_compiled *c;
	unsigned version; /* the graph's, when c was built */
	bool broken; /* a step did not finish in time: no more runs */
};

static void eager_free(cgr_graph *g)
{
	struct eager *e = g->eager;

	if (e == NULL)
		return;
	cgr__compiled_unref(e->c);
	cgr__free(&g->ctx->arena, e, sizeof(*e), 64);
	g->eager = NULL;
	g->eager_free = NULL;
}

/* Whether w still runs the step of an eager run (one that returned
 * CGR_ESTUCK): a step posted now would overwrite it. */
static bool step_running(cgr_worker *w)
{
	int r;

	return w->step_prog != NULL &&
	       cgr__future_test(&w->step_done, w->step_gen, &r) == 0;
}

/* What eager execution cannot run (each kind's check_task; a kind whose
 * workers take no steps), and workers that are busy, gone or dead: 0, or
 * the error (g's errmsg). */
static int eager_check(cgr_graph *g)
{
	const char *why;
	int ret;

	for (const struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		for (size_t i = 0; i < cgr__task_nworkers(t); i++) {
			cgr_worker *w = cgr__task_worker(t, i);
			if (w->ops->check_task != NULL &&
			    (ret = w->ops->check_task(g, t, w, true)) < 0)
				return ret;
			if (w->ops->step_post == NULL)
				return cgr__graph_fail(
					g, -ENOTSUP,
					"%s: eager execution cannot run on "
					"%s worker %s",
					t->name, w->ops->name, w->name);
			if (step_running(w))
				return cgr__graph_fail(
					g, -EBUSY,
					"%s: worker %s still runs a task of an "
					"eager run that passed its deadline",
					t->name, w->name);
			if (w->busy_with != NULL && !cgr__torn_down(w->busy_with))
				return cgr__graph_fail(
					g, -EBUSY,
					"%s: worker %s serves a compiled graph",
					t->name, w->name);
			if (w->destroyed)
				return cgr__graph_fail(
					g, CGR_EWORKERGONE,
					"%s: worker %s was destroyed", t->name,
					w->name);
			/* It died (a thread that ended in a task). */
			if (cgr__worker_dead(w, &why))
				return cgr__graph_fail(g, CGR_EPEERDEAD,
						       "%s: %s", t->name, why);
		}
	}
	return 0;
}

static int eager_get(cgr_graph *g, struct eager **out)
{
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	struct eager *e = g->eager;
	int ret;

	if (e != NULL && e->version != g->version && !e->broken)
		eager_free(g); /* the graph changed: built again */
	e = g->eager;
	if (e == NULL) {
		e = cgr__alloc(&g->ctx->arena, sizeof(*e), 64);
		if (e == NULL)
			return -ENOMEM;
		pp.overlap = 0;
		pp.max_inflight = 1;
		ret = cgr__graph_build(g, &pp, -1, &e->c);
		if (ret == 0)
			for (size_t i = 0; i < e->c->nused_comms; i++)
				if (e->c->used_comms[i]->backend ==
				    CGR_BACKEND_NCCL)
					ret = cgr__graph_fail(
						g, -ENOTSUP,
						"eager execution does not run "
						"NCCL collectives");
		if (ret < 0) {
			/* A failed build freed its graph itself. */
			if (ret == -ENOTSUP)
				cgr__compiled_unref(e->c);
			cgr__free(&g->ctx->arena, e, sizeof(*e), 64);
			return ret;
		}
		e->version = g->version;
		e->broken = false;
		g->eager = e;
		g->eager_free = eager_free;
	}
	*out = e;
	return 0;
}

/* ---- one step -------------------------------------------------------- */

/* Operation op of p for execution seq, handed to its worker.  The step
 * holds the eager compiled graph until it ends: a graph destroyed after a
 * step ran past its deadline (CGR_ESTUCK) frees nothing that step still
 * uses.  Its end drops that hold here (step_wait), so memory is exact
 * when the run returns; only one the driver stopped waiting for is
 * dropped by its worker (thread/thread.c, step_ended). */
static void step_post(struct cgr__prog *p, const struct cgr__op *op,
		      uint64_t seq)
{
	atomic_fetch_add_explicit(&p->c->refs, 1, memory_order_relaxed);
	atomic_store_explicit(&p->w->step_hold, CGR__STEP_HELD,
			      memory_order_relaxed);
	p->w->ops->step_post(p, op, seq);
}

static int step_wait(struct cgr__prog *p, int64_t deadline)
{
	int ret = p->w->ops->step_wait(p, deadline);

	/* Ended (step_done completed after STEP_ENDED), or it ended
	 * between the timeout and this exchange: the driver's to drop. */
	if (ret != -ETIMEDOUT ||
	    atomic_exchange_explicit(&p->w->step_hold, CGR__STEP_LEFT,
				     memory_order_acq_rel) ==
		    CGR__STEP_ENDED)
		cgr__compiled_unref(p->c);
	return ret;
}

/* Value v of port pi's slot seq (for hooks and node values). */
static void port_value(cgr_compiled *c, unsigned pi, uint64_t seq,
		       cgr_value *v)
{
	cgr__value_load(cgr__port_slot(&c->ports[pi], seq), v);
}

/* " (inputs: ...)": the shapes of tc's inputs of execution seq. */
static void inputs_shapes(cgr_compiled *c, const struct cgr_task_ctx *tc,
			  uint64_t seq, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, " (inputs:");

	for (size_t i = 0; i < tc->nin && n < len; i++) {
		cgr_value v;
		port_value(c, tc->in_ports[i], seq, &v);
		if (v.kind == CGR_VALUE_TENSOR) {
			n += (size_t)snprintf(buf + n, len - n, " [");
			for (int d = 0; d < v.u.tensor.ndim && n < len; d++)
				n += (size_t)snprintf(buf + n, len - n, "%s%lld",
						      d ? "," : "",
						      (long long)v.u.tensor.shape[d]);
			if (n < len)
				n += (size_t)snprintf(
					buf + n, len - n, "] dtype %u/%u",
					v.u.tensor.dtype.code,
					v.u.tensor.dtype.bits);
		} else if (v.kind == CGR_VALUE_BYTES) {
			n += (size_t)snprintf(buf + n, len - n, " %zu byte%s",
					      v.u.bytes.len,
					      v.u.bytes.len == 1 ? "" : "s");
		} else {
			n += (size_t)snprintf(buf + n, len - n, " %s",
					      v.kind == CGR_VALUE_LIST ? "a list" :
					      v.kind == CGR_VALUE_ERROR ?
									   "an error" :
									   "none");
		}
	}
	if (n < len)
		snprintf(buf + n, len - n, ")");
}

/* A task whose own failure made its outputs error values: each message
 * gets its inputs' shapes. */
static void name_shapes(cgr_compiled *c, const struct cgr_task_ctx *tc,
			uint64_t seq)
{
	char shapes[300];

	for (size_t i = 0; i < tc->nin; i++) {
		cgr_value v;
		port_value(c, tc->in_ports[i], seq, &v);
		if (v.kind == CGR_VALUE_ERROR)
			return; /* forwarded, not its own */
	}
	inputs_shapes(c, tc, seq, shapes, sizeof(shapes));
	for (size_t o = 0; o < tc->nout; o++) {
		struct cgr__port *p = &c->ports[tc->out_ports[o]];
		struct cgr__slot_hdr *h = cgr__port_slot(p, seq);
		if (h->kind != CGR_VALUE_ERROR)
			continue;
		cgr__error_append(h, p->cap, shapes);
	}
}

/* ---- hooks ----------------------------------------------------------- */

/* Calls the hook for the share of task t that operation op of program p
 * runs (a plain task, or a member's part of a collective). */
static void call_hook(const cgr_eager_params *ep, cgr_compiled *c,
		      const struct cgr__prog *p, const struct cgr__op *op,
		      uint64_t seq, int after)
{
	cgr_value in[64], out[64];
	const unsigned *ip, *opo;
	size_t nin, nout;
	const char *name;

	if (op->kind == CGR__OP_COMPUTE) {
		ip = op->tc->in_ports, nin = op->tc->nin;
		opo = op->tc->out_ports, nout = op->tc->nout;
		name = op->tc->name;
	} else {
		ip = op->coll->in_ports, nin = op->coll->k;
		opo = op->coll->out_ports, nout = op->coll->k;
		name = op->coll->name;
	}
	nin = nin < 64 ? nin : 64;
	nout = nout < 64 ? nout : 64;
	for (size_t i = 0; i < nin; i++)
		if (ip[i] != CGR__NO_PORT)
			port_value(c, ip[i], seq, &in[i]);
		else
			memset(&in[i], 0, sizeof(in[i]));
	for (size_t i = 0; after && i < nout; i++)
		if (opo[i] != CGR__NO_PORT)
			port_value(c, opo[i], seq, &out[i]);
		else
			memset(&out[i], 0, sizeof(out[i]));
	ep->hook(ep->hook_arg, after, name, p->w, in, nin, after ? out : NULL,
		 after ? nout : 0);
}

/* ---- a run ----------------------------------------------------------- */

/* Task t's operations (its COMPUTE, or every member's COLL), posted to
 * their workers at once, waited for, with the hooks around. */
static int run_task(struct eager *e, const struct cgr__task *t, uint64_t seq,
		    const cgr_eager_params *ep, int64_t deadline)
{
	cgr_compiled *c = e->c;
	struct cgr__prog *ps[CGR_MAX_RANKS];
	const struct cgr__op *ops[CGR_MAX_RANKS];
	size_t n = 0;
	int ret = 0;

	for (size_t i = 0; i < c->nprogs; i++)
		for (size_t k = 0; k < c->progs[i].nops && n < CGR_MAX_RANKS;
		     k++) {
			const struct cgr__op *op = &c->progs[i].ops[k];
			if ((op->kind == CGR__OP_COMPUTE &&
			     op->tc->task_id == t->id) ||
			    (op->kind == CGR__OP_COLL &&
			     op->coll->task_id == t->id)) {
				ps[n] = &c->progs[i];
				ops[n++] = op;
			}
		}
	for (size_t i = 0; ep->hook != NULL && i < n; i++)
		call_hook(ep, c, ps[i], ops[i], seq, 0);
	for (size_t i = 0; i < n; i++)
		step_post(ps[i], ops[i], seq);
	for (size_t i = 0; i < n; i++) {
		int r = step_wait(ps[i], deadline);
		if (r == CGR_EPEERDEAD) {
			/* Its thread ended inside the task (thread/thread.c,
			 * which logged it). */
			e->broken = true;
			ret = r;
		} else if (r == -ETIMEDOUT) {
			e->broken = true;
			cgr__err(&c->ctx->log,
				 "eager: %s did not finish on worker %s by the "
				 "deadline; the graph runs eagerly no more",
				 t->name, ps[i]->w->name);
			ret = CGR_ESTUCK;
		}
	}
	if (ret < 0)
		return ret;
	for (size_t i = 0; i < n; i++)
		if (ops[i]->kind == CGR__OP_COMPUTE)
			name_shapes(c, ops[i]->tc, seq);
	for (size_t i = 0; ep->hook != NULL && i < n; i++)
		call_hook(ep, c, ps[i], ops[i], seq, 1);
	return 0;
}

int cgr_graph_execute_eager(cgr_graph *g, const cgr_value *args,
			    size_t nargs, cgr_value *outs, size_t nouts,
			    const cgr_eager_params *p)
{
	cgr_eager_params ep;
	struct eager *e;
	cgr_compiled *c;
	uint64_t seq;
	int ret;

	if (g == NULL || (nargs > 0 && args == NULL) ||
	    (nouts > 0 && outs == NULL) || (p != NULL && p->size < 8))
		return -EINVAL;
	CGR__PARAMS_COPY(ep, p, ((cgr_eager_params)CGR_EAGER_PARAMS_INIT));
	g->errmsg[0] = 0;
	if (g->compiled)
		return cgr__graph_fail(g, CGR_ECOMPILED,
				       "graph is compiled: cgr_execute it");
	/* (Before the workers' check: its own step is running.) */
	if (g->eager != NULL &&
	    cgr__running_graph == ((struct eager *)g->eager)->c)
		return cgr__graph_fail(g, -EDEADLK,
				       "called from a task of this graph's "
				       "eager run");
	if ((ret = eager_check(g)) < 0 || (ret = eager_get(g, &e)) < 0)
		return ret;
	c = e->c;
	if (e->broken)
		return cgr__graph_fail(g, CGR_ESTUCK,
				       "a task of an earlier eager run did "
				       "not finish");
	if (nargs != c->nargs || nouts != c->nout)
		return cgr__graph_fail(g, CGR_ENARGS,
				       "%zu arguments and %zu outputs given; "
				       "the graph has %zu and %zu",
				       nargs, nouts, (size_t)c->nargs,
				       (size_t)c->nout);
	for (size_t a = 0; a < nargs; a++)
		if ((ret = cgr__arg_check(&args[a],
					  c->ports[c->arg_port[a]].cap,
					  c->seg == NULL)) < 0)
			return cgr__graph_fail(g, ret,
					       "argument %zu: %s (its buffer "
					       "holds %zu bytes)",
					       a,
					       ret == CGR_ETOOBIG ?
						       "too big" :
						       "malformed, or a CUDA "
						       "tensor in a list",
					       c->ports[c->arg_port[a]].cap);
	seq = c->next_seq++;
	for (size_t a = 0; a < nargs; a++) {
		struct cgr__port *pt = &c->ports[c->arg_port[a]];
		cgr__arg_store(cgr__port_slot(pt, seq), pt->cap, &args[a]);
	}
	for (size_t i = 0; i < c->norder; i++) {
		int64_t dl = cgr__deadline(ep.timeout_ns > 0 ?
						   ep.timeout_ns :
						   c->p.get_timeout_ns);
		ret = run_task(e, c->order[i], seq, &ep, dl);
		if (ret == CGR_EPEERDEAD)
			return eager_check(g); /* names the dead worker */
		if (ret < 0)
			return ret;
	}
	for (size_t o = 0; o < nouts; o++)
		port_value(c, c->out_port[o], seq, &outs[o]);
	return 0;
}

int cgr_graph_eager_value(cgr_graph *g, const cgr_node *n, cgr_value *out)
{
	struct eager *e;

	if (g == NULL || n == NULL || out == NULL || n->g != g)
		return -EINVAL;
	e = g->eager;
	if (e == NULL || e->c->next_seq == 0 || n->id >= e->c->nnodes)
		return -ENODATA;
	if (n->kind == CGR__NODE_INPUT && n->index == CGR_INPUT_ALL)
		return -EINVAL; /* no one value */
	port_value(e->c, e->c->node_port[n->id], e->c->next_seq - 1, out);
	return 0;
}
