/*
 * graph/graph.c: the graph builder: input, constant and task nodes, late
 * binding of task inputs (which is how cycles can be expressed, and then
 * rejected by compile), outputs, names and error messages.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chan/chan.h"
#include "graph/graph.h"

int cgr__graph_fail(cgr_graph *g, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(g->errmsg, sizeof(g->errmsg), fmt, ap);
	va_end(ap);
	cgr__info(&g->ctx->log, "graph: %s", g->errmsg);
	return err;
}

const char *cgr_graph_errmsg(const cgr_graph *g)
{
	return g != NULL ? g->errmsg : "";
}

int cgr_graph_create(cgr_ctx *ctx, cgr_graph **out)
{
	cgr_graph *g;

	if (ctx == NULL || out == NULL || ctx->destroyed)
		return -EINVAL;
	g = cgr__alloc(&ctx->arena, sizeof(*g), 64);
	if (g == NULL)
		return -ENOMEM;
	g->ctx = ctx;
	pthread_mutex_lock(&ctx->graph_lock);
	g->live_next = ctx->graphs;
	if (ctx->graphs != NULL)
		ctx->graphs->live_prev = &g->live_next;
	g->live_prev = &ctx->graphs;
	ctx->graphs = g;
	pthread_mutex_unlock(&ctx->graph_lock);
	g->nodes_tail = &g->nodes;
	g->tasks_tail = &g->tasks;
	*out = g;
	return 0;
}

static void cgr__task_free(cgr_graph *g, struct cgr__task *t)
{
	struct cgr__arena *a = &g->ctx->arena;

	cgr__strfree(a, t->name);
	cgr__free(a, t->arg_data, t->arg_len, 64);
	cgr__free(a, t->in, t->nin * sizeof(*t->in), 16);
	cgr__free(a, t->out, t->nout * sizeof(*t->out), 16);
	cgr__free(a, t->members, t->nmembers * sizeof(*t->members), 16);
	cgr__free(a, t, sizeof(*t), 16);
}

void cgr_graph_destroy(cgr_graph *g)
{
	struct cgr__arena *a;
	struct cgr_node *n, *nn;
	struct cgr__task *t, *tn;

	if (g == NULL)
		return;
	pthread_mutex_lock(&g->ctx->graph_lock);
	*g->live_prev = g->live_next;
	if (g->live_next != NULL)
		g->live_next->live_prev = g->live_prev;
	pthread_mutex_unlock(&g->ctx->graph_lock);
	if (g->eager_free != NULL)
		g->eager_free(g);
	a = &g->ctx->arena;
	for (n = g->nodes; n != NULL; n = nn) {
		nn = n->next;
		cgr__free(a, n->cdata, n->cdata_len, 64);
		cgr__free(a, n, sizeof(*n), 16);
	}
	for (t = g->tasks; t != NULL; t = tn) {
		tn = t->next;
		cgr__task_free(g, t);
	}
	cgr__free(a, g->outputs, g->noutputs * sizeof(*g->outputs), 16);
	cgr__free(a, g, sizeof(*g), 64);
}

static cgr_node *cgr__node_new(cgr_graph *g, int kind)
{
	cgr_node *n = cgr__alloc(&g->ctx->arena, sizeof(*n), 16);

	if (n == NULL)
		return NULL;
	n->kind = kind;
	n->g = g;
	n->id = g->nnodes++;
	g->version++;
	*g->nodes_tail = n;
	g->nodes_tail = &n->next;
	return n;
}

int cgr_graph_input(cgr_graph *g, int index, cgr_node **out)
{
	cgr_node *n;

	if (g == NULL || out == NULL || index < CGR_INPUT_ALL ||
	    index > 65535)
		return -EINVAL;
	if (g->compiled)
		return cgr__graph_fail(g, CGR_ECOMPILED,
				       "graph already compiled");
	n = cgr__node_new(g, CGR__NODE_INPUT);
	if (n == NULL)
		return -ENOMEM;
	n->index = index;
	if (index == CGR_INPUT_ALL)
		snprintf(n->name, sizeof(n->name), "input[*]");
	else
		snprintf(n->name, sizeof(n->name), "input[%d]", index);
	*out = n;
	return 0;
}

int cgr_graph_const(cgr_graph *g, const cgr_value *v, cgr_node **out)
{
	cgr_node *n;
	size_t bytes;
	int ret;

	if (g == NULL || v == NULL || out == NULL)
		return -EINVAL;
	if (g->compiled)
		return cgr__graph_fail(g, CGR_ECOMPILED,
				       "graph already compiled");
	ret = cgr__value_check(v, CGR__MAX_VALUE_BYTES, &bytes);
	if (ret == CGR_ETOOBIG)
		return cgr__graph_fail(g, CGR_ETOOBIG,
				       "a constant of more than %zu bytes",
				       CGR__MAX_VALUE_BYTES);
	if (ret < 0 || cgr__value_on_device(v))
		return -EINVAL; /* a constant is host data, copied now */
	n = cgr__node_new(g, CGR__NODE_CONST);
	if (n == NULL)
		return -ENOMEM;
	snprintf(n->name, sizeof(n->name), "const#%u", n->id);
	/* Keep the value as a ready-made slot: header + data. */
	n->cdata_len = CGR__SLOT_HDR + bytes;
	n->cdata = cgr__alloc(&g->ctx->arena, n->cdata_len, 64);
	if (n->cdata == NULL)
		return -ENOMEM; /* the node stays, inert; freed with g */
	memset(n->cdata, 0, CGR__SLOT_HDR); /* no big area */
	cgr__value_store(n->cdata, bytes, v);
	*out = n;
	return 0;
}

/* d's arg_data, copied into task. */
static int task_arg_copy(struct cgr__arena *a, struct cgr__task *task,
			 const cgr_task_desc *d)
{
	if (d->arg_len == 0)
		return 0;
	task->arg_data = cgr__alloc(a, d->arg_len, 64);
	if (task->arg_data == NULL)
		return -ENOMEM;
	memcpy(task->arg_data, d->arg_data, d->arg_len);
	task->arg_len = d->arg_len;
	return 0;
}

/* What is wrong with task descriptor d, or NULL. */
static const char *desc_bad(const cgr_task_desc *d)
{
	if (d->fn == NULL)
		return "no function";
	if ((d->flags & ~(unsigned)(CGR_TASK_STREAM | CGR_TASK_DEVICE)) != 0)
		return "unknown flags";
	if (d->arg_len > (1u << 20))
		return "arg_len over 1 MiB";
	if (d->arg_len > 0 && (d->arg_data == NULL || d->arg != NULL))
		return "arg_data NULL, or arg given too";
	if (d->max_out_bytes > CGR__MAX_VALUE_BYTES)
		return "max_out_bytes over 1 TiB";
	return NULL;
}

int cgr_graph_task(cgr_graph *g, cgr_worker *w, const cgr_task_desc *t,
		   cgr_node *const *in, size_t nin, cgr_node **out,
		   size_t nout)
{
	struct cgr__arena *a;
	struct cgr__task *task;
	cgr_task_desc d;
	const char *bad;

	if (g == NULL || w == NULL || t == NULL || t->size < sizeof(size_t) ||
	    (nin > 0 && in == NULL) || out == NULL || nout == 0 ||
	    nin > 4096 || nout > 4096 || w->ctx != g->ctx)
		return -EINVAL;
	CGR__PARAMS_COPY(d, t, ((cgr_task_desc)CGR_TASK_DESC_INIT));
	if ((bad = desc_bad(&d)) != NULL)
		return cgr__graph_fail(g, -EINVAL, "task %s: %s",
				       d.name ? d.name : "?", bad);
	if (g->compiled)
		return cgr__graph_fail(g, CGR_ECOMPILED,
				       "graph already compiled");
	for (size_t i = 0; i < nin; i++)
		if (in[i] != NULL && in[i]->g != g)
			return cgr__graph_fail(g, -EINVAL,
					       "input %zu of task %s is a node "
					       "of another graph",
					       i, d.name ? d.name : "?");
	a = &g->ctx->arena;
	task = cgr__alloc(a, sizeof(*task), 16);
	if (task == NULL)
		return -ENOMEM;
	task->id = g->ntasks;
	if (d.name != NULL)
		task->name = cgr__strdup(a, d.name);
	else {
		char buf[32];
		snprintf(buf, sizeof(buf), "task%u", g->ntasks);
		task->name = cgr__strdup(a, buf);
	}
	task->in = cgr__alloc(a, (nin ? nin : 1) * sizeof(*task->in), 16);
	task->out = cgr__alloc(a, nout * sizeof(*task->out), 16);
	task->nin = nin;
	task->nout = nout;
	if (task->name == NULL || task->in == NULL || task->out == NULL) {
		cgr__task_free(g, task);
		return -ENOMEM;
	}
	if (nin == 0) /* keep the size cgr__task_free will pass */
		cgr__free(a, task->in, sizeof(*task->in), 16),
			task->in = NULL;
	task->fn = d.fn;
	task->arg = d.arg;
	if (task_arg_copy(a, task, &d) < 0) {
		cgr__task_free(g, task);
		return -ENOMEM;
	}
	task->max_out_bytes = d.max_out_bytes;
	task->flags = d.flags;
	task->w = w;
	for (size_t i = 0; i < nin; i++)
		task->in[i] = in[i];
	for (size_t i = 0; i < nout; i++) {
		cgr_node *n = cgr__node_new(g, CGR__NODE_TASK);
		if (n == NULL)
			return -ENOMEM; /* the task stays, partly built */
		n->task = task;
		n->port = i;
		if (nout == 1)
			snprintf(n->name, sizeof(n->name), "%s", task->name);
		else
			snprintf(n->name, sizeof(n->name), "%s#%zu",
				 task->name, i);
		task->out[i] = n;
	}
	*g->tasks_tail = task;
	g->tasks_tail = &task->next;
	g->ntasks++;
	for (size_t i = 0; i < nout; i++)
		out[i] = task->out[i];
	return 0;
}

int cgr_node_set_input(cgr_node *n, size_t i, cgr_node *src)
{
	if (n == NULL || src == NULL || n->kind != CGR__NODE_TASK ||
	    src->g != n->g || i >= n->task->nin)
		return -EINVAL;
	if (n->g->compiled)
		return cgr__graph_fail(n->g, CGR_ECOMPILED,
				       "graph already compiled");
	n->task->in[i] = src;
	n->g->version++;
	return 0;
}

int cgr_graph_output(cgr_graph *g, cgr_node *const *outs, size_t n)
{
	if (g == NULL || outs == NULL || n == 0 || n > 4096)
		return -EINVAL;
	if (g->compiled)
		return cgr__graph_fail(g, CGR_ECOMPILED,
				       "graph already compiled");
	if (g->outputs != NULL)
		return cgr__graph_fail(g, -EALREADY,
				       "graph outputs already declared");
	for (size_t i = 0; i < n; i++) {
		if (outs[i] == NULL || outs[i]->g != g)
			return cgr__graph_fail(g, -EINVAL,
					       "output %zu is not a node of "
					       "this graph",
					       i);
		if (outs[i]->kind != CGR__NODE_TASK)
			return cgr__graph_fail(
				g, -EINVAL,
				"output %zu (%s) is not a task output: route "
				"inputs and constants through a task",
				i, outs[i]->name);
	}
	g->outputs = cgr__alloc(&g->ctx->arena, n * sizeof(*g->outputs), 16);
	if (g->outputs == NULL)
		return -ENOMEM;
	memcpy(g->outputs, outs, n * sizeof(*outs));
	g->noutputs = n;
	g->version++;
	return 0;
}

const char *cgr_node_name(const cgr_node *n)
{
	return n != NULL ? n->name : "";
}

/* ---- collective nodes --------------------------------------------- */

const char *cgr__coll_name(int kind)
{
	return kind == 0 ? "task" : cgr__coll_kind_name(kind);
}

/* The parameters of a collective (cp, names defaulted) against its kind:
 * tensors per member, root, op, overlap mode.  0 or a failure. */
static int coll_check_params(cgr_graph *g, cgr_coll_params *cp, size_t n)
{
	const char *name = cp->name;

	if (cp->ntensors == 0)
		cp->ntensors = 1;
	if (cp->overlap < CGR_OVERLAP_DEFAULT || cp->overlap > CGR_OVERLAP_OFF)
		return cgr__graph_fail(g, -EINVAL, "unknown overlap mode %d",
				       cp->overlap);
	if (cp->backend != CGR_BACKEND_AUTO && cp->backend != CGR_BACKEND_CPU &&
	    cp->backend != CGR_BACKEND_NCCL)
		return cgr__graph_fail(g, -EINVAL, "%s: unknown backend %d",
				       name, cp->backend);
	if (cp->ntensors > 1 && cp->kind != CGR_COLL_ALLREDUCE &&
	    cp->kind != CGR_COLL_ALLGATHER && cp->kind != CGR_COLL_BROADCAST)
		return cgr__graph_fail(g, -EINVAL,
				       "%s: only allreduce, allgather and "
				       "broadcast take several tensors per "
				       "member",
				       name);
	if (cp->max_out_bytes > CGR__MAX_VALUE_BYTES)
		return cgr__graph_fail(g, -EINVAL,
				       "%s: max_out_bytes %zu is over %zu",
				       name, cp->max_out_bytes,
				       CGR__MAX_VALUE_BYTES);
	if (cp->ntensors > 64 || (cp->ntensors > 1 && cp->static_shape))
		return cgr__graph_fail(g, -EINVAL,
				       "%s: at most 64 tensors per member, and "
				       "not with static shapes",
				       name);
	if (cgr__coll_rooted(cp->kind) &&
	    (cp->root < 0 || (size_t)cp->root >= n))
		return cgr__graph_fail(g, -EINVAL, "%s: root %d out of range",
				       name, cp->root);
	if (cgr__coll_reduces(cp->kind) &&
	    ((int)cp->op < 0 || cp->op >= CGR_REDOP_COUNT))
		return cgr__graph_fail(g, -EINVAL, "%s: unknown reduction %d",
				       name, (int)cp->op);
	if (cp->comm != NULL && cgr_comm_size(cp->comm) != (int)n)
		return cgr__graph_fail(g, -EINVAL,
				       "%s: communicator has %d ranks, not %zu",
				       name, cgr_comm_size(cp->comm), n);
	return 0;
}

/* Members distinct workers of g's context; inputs nodes of g. */
static int coll_check_nodes(cgr_graph *g, const char *name,
			    cgr_worker *const *members, size_t n,
			    cgr_node *const *in, size_t nin)
{
	for (size_t i = 0; i < n; i++) {
		if (members[i] == NULL || members[i]->ctx != g->ctx)
			return cgr__graph_fail(g, -EINVAL,
					       "%s: member %zu is not a worker "
					       "of this context",
					       name, i);
		for (size_t j = 0; j < i; j++)
			if (members[j] == members[i])
				return cgr__graph_fail(
					g, -EINVAL,
					"%s: ranks %zu and %zu are both worker "
					"%s; members must be distinct",
					name, j, i, members[i]->name);
	}
	for (size_t i = 0; i < nin; i++) {
		if (in[i] == NULL || in[i]->g != g)
			return cgr__graph_fail(g, -EINVAL,
					       "%s: input %zu is not a node of "
					       "this graph",
					       name, i);
		if (in[i]->kind == CGR__NODE_INPUT &&
		    in[i]->index == CGR_INPUT_ALL)
			return cgr__graph_fail(g, -EINVAL,
					       "%s: input[*] cannot feed a "
					       "collective",
					       name);
	}
	return 0;
}

/* The collective's task and its output nodes (checked already). */
int cgr__coll_add(cgr_graph *g, cgr_coll_params *cp,
		  cgr_worker *const *members, size_t n, cgr_node *const *in,
		  size_t nin, cgr_node **out, size_t nout)
{
	struct cgr__arena *a = &g->ctx->arena;
	struct cgr__task *task = cgr__alloc(a, sizeof(*task), 16);

	if (task == NULL)
		return -ENOMEM;
	task->id = g->ntasks;
	task->coll = cp->kind;
	task->name = cgr__strdup(a, cp->name);
	cp->name = NULL; /* the copy lives in task->name */
	task->cp = *cp;
	task->max_out_bytes = cp->max_out_bytes;
	task->nin = nin;
	task->nout = nout;
	task->nmembers = n;
	task->in = cgr__alloc(a, nin * sizeof(*task->in), 16);
	task->out = cgr__alloc(a, nout * sizeof(*task->out), 16);
	task->members = cgr__alloc(a, n * sizeof(*task->members), 16);
	if (task->name == NULL || task->in == NULL || task->out == NULL ||
	    task->members == NULL) {
		cgr__task_free(g, task);
		return -ENOMEM;
	}
	memcpy(task->in, in, nin * sizeof(*in));
	memcpy(task->members, members, n * sizeof(*members));
	*g->tasks_tail = task;
	g->tasks_tail = &task->next;
	g->ntasks++;
	for (size_t i = 0; i < nout; i++) {
		cgr_node *nd = cgr__node_new(g, CGR__NODE_TASK);
		if (nd == NULL)
			return -ENOMEM;
		nd->task = task;
		nd->port = i;
		if (cp->ntensors > 1)
			snprintf(nd->name, sizeof(nd->name), "%s#%zu.%zu",
				 task->name, i / cp->ntensors,
				 i % cp->ntensors);
		else
			snprintf(nd->name, sizeof(nd->name), "%s#%zu",
				 task->name, nout == 1 ? (size_t)cp->root : i);
		task->out[i] = nd;
	}
	for (size_t i = 0; i < nout; i++)
		out[i] = task->out[i];
	return 0;
}

int cgr_graph_collective(cgr_graph *g, const cgr_coll_params *p,
			 cgr_worker *const *members, size_t n,
			 cgr_node *const *in, size_t nin, cgr_node **out,
			 size_t nout)
{
	cgr_coll_params cp;
	size_t want_in, want_out;
	char buf[64];
	int ret;

	if (g == NULL || p == NULL || p->size < sizeof(size_t) ||
	    members == NULL || n == 0 || n > CGR_MAX_RANKS || in == NULL ||
	    out == NULL)
		return -EINVAL;
	CGR__PARAMS_COPY(cp, p, ((cgr_coll_params)CGR_COLL_PARAMS_INIT));
	if (!cgr__coll_valid(cp.kind))
		return cgr__graph_fail(g, -EINVAL, "unknown collective kind %d",
				       cp.kind);
	if (g->compiled)
		return cgr__graph_fail(g, CGR_ECOMPILED,
				       "graph already compiled");
	if (cp.name == NULL) {
		snprintf(buf, sizeof(buf), "%s%u", cgr__coll_name(cp.kind),
			 g->ntasks);
		cp.name = buf;
	}
	ret = coll_check_params(g, &cp, n);
	if (ret < 0)
		return ret;
	want_in = cgr__coll_in_at_root(cp.kind) ? cp.ntensors :
						  n * cp.ntensors;
	want_out = cgr__coll_out_at_root(cp.kind) ? 1 : n * cp.ntensors;
	if (nin != want_in || nout != want_out)
		return cgr__graph_fail(g, -EINVAL,
				       "%s %s: takes %zu inputs and %zu outputs "
				       "for %zu members, not %zu and %zu",
				       cgr__coll_name(cp.kind), cp.name,
				       want_in, want_out, n, nin, nout);
	ret = coll_check_nodes(g, cp.name, members, n, in, nin);
	if (ret < 0)
		return ret;
	return cgr__coll_add(g, &cp, members, n, in, nin, out, nout);
}

int cgr_graph_allreduce(cgr_graph *g, cgr_node *const *in, size_t n,
			cgr_redop op, cgr_comm *comm, cgr_node **out)
{
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	cgr_worker *m[CGR_MAX_RANKS];

	if (g == NULL || in == NULL || n == 0 || n > CGR_MAX_RANKS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (in[i] == NULL || in[i]->kind != CGR__NODE_TASK ||
		    in[i]->task->coll)
			return cgr__graph_fail(g, -EINVAL,
					       "allreduce: input %zu must be a "
					       "task output (its worker is the "
					       "member)",
					       i);
		m[i] = in[i]->task->w;
	}
	p.kind = CGR_COLL_ALLREDUCE;
	p.op = op;
	p.comm = comm;
	return cgr_graph_collective(g, &p, m, n, in, n, out, n);
}

/* ---- device-transport edges --------------------------------------- */

int cgr_node_set_overlap(cgr_node *n, int mode)
{
	if (n == NULL)
		return -EINVAL;
	if (mode < CGR_OVERLAP_DEFAULT || mode > CGR_OVERLAP_OFF)
		return cgr__graph_fail(n->g, -EINVAL, "%s: no overlap mode %d",
				       n->name, mode);
	if (n->kind != CGR__NODE_TASK)
		return cgr__graph_fail(n->g, -EINVAL,
				       "%s: only task outputs have an overlap "
				       "mode",
				       n->name);
	n->overlap = mode;
	n->g->version++;
	return 0;
}

int cgr_node_set_transport(cgr_node *n, int transport, unsigned flags)
{
	const unsigned known = CGR_EDGE_STATIC_SHAPE | CGR_EDGE_CPU |
			       CGR_EDGE_NCCL;

	if (n == NULL)
		return -EINVAL;
	if (transport < CGR_TRANSPORT_AUTO || transport > CGR_TRANSPORT_DEVICE)
		return cgr__graph_fail(n->g, -EINVAL, "%s: no transport %d",
				       n->name, transport);
	if ((flags & ~known) || (flags & CGR_EDGE_CPU && flags & CGR_EDGE_NCCL))
		return cgr__graph_fail(n->g, -EINVAL,
				       "%s: edge flags 0x%x: unknown, or both "
				       "CGR_EDGE_CPU and CGR_EDGE_NCCL",
				       n->name, flags);
	if (n->kind != CGR__NODE_TASK)
		return cgr__graph_fail(n->g, -EINVAL,
				       "%s: only task outputs have a transport",
				       n->name);
	if (n->g->compiled)
		return cgr__graph_fail(n->g, CGR_ECOMPILED,
				       "graph already compiled");
	n->transport = transport;
	n->edge_flags = flags;
	n->g->version++;
	return 0;
}
