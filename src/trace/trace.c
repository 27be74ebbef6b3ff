/*
 * trace/trace.c: pictures of a graph and of what it did.
 *
 * cgr_compiled_write_trace turns the per-worker trace buffers (filled by
 * run/worker.c, preallocated at compile) into Chrome trace JSON, one track
 * per worker and one per communication or compute stream, which Perfetto
 * and chrome://tracing open.  The DOT writers draw the graph (one cluster
 * per worker) and the compiled schedule (each worker's program in order,
 * rings and collectives between them).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "compile/prog.h"

static const char *cgr__op_kind_name(int kind)
{
	switch (kind) {
	case CGR__OP_READ:
		return "read";
	case CGR__OP_COMPUTE:
		return "compute";
	case CGR__OP_WRITE:
		return "write";
	case CGR__OP_COLL:
		return "collective";
	case CGR__OP_WAIT:
		return "wait";
	case CGR__OP_SWAIT:
		return "stream wait";
	case CGR__OP_RUN:
		return "run";
	default:
		return "?";
	}
}

/* The name shown for an operation: its task, collective or value. */
static const char *cgr__op_label(const struct cgr_compiled *c,
				 const struct cgr__op *op)
{
	switch (op->kind) {
	case CGR__OP_READ:
		return c->ports[c->chans[op->chan].port].name;
	case CGR__OP_COMPUTE:
		return op->tc->name;
	case CGR__OP_COLL:
	case CGR__OP_RUN:
		return op->coll->name;
	case CGR__OP_WAIT:
	case CGR__OP_SWAIT:
		return op->tc != NULL ? op->tc->name : op->coll->name;
	case CGR__OP_WRITE:
		return op->nchans ? c->ports[c->chans[op->chans[0]].port].name :
				    "";
	default:
		return "";
	}
}

/* Writes s as a JSON / DOT string body (quotes and backslashes escaped). */
static void cgr__put_escaped(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if ((unsigned char)*s >= 0x20)
			fputc(*s, f);
	}
}

/* 0, or why the file could not be written whole (-ENOSPC, ...): a
 * flush retries what is buffered and leaves its errno. */
static int cgr__close(FILE *f)
{
	int bad, err;

	errno = 0;
	bad = fflush(f) != 0 || ferror(f);
	err = errno;
	if (fclose(f) != 0 && !bad)
		bad = 1, err = errno;
	if (!bad)
		return 0;
	return err != 0 ? -err : -EIO;
}

/* One track's name: "worker <name><suffix>" (first: no comma before). */
static void cgr__trace_track(FILE *f, size_t tid, bool first,
			     const char *worker, const char *suffix)
{
	fprintf(f,
		"%s{\"ph\":\"M\",\"pid\":1,\"tid\":%zu,\"name\":"
		"\"thread_name\",\"args\":{\"name\":\"worker ",
		first ? "" : ",\n", tid);
	cgr__put_escaped(f, worker);
	fprintf(f, "%s\"}}", suffix);
}

/* One record on track tid: "<verb> <what>" in category cat. */
static void cgr__trace_op(FILE *f, const cgr_compiled *c, size_t tid,
			  const struct cgr__trace_ev *e, const char *cat,
			  const char *verb, const char *what)
{
	fprintf(f,
		",\n{\"ph\":\"X\",\"pid\":1,\"tid\":%zu,\"ts\":%.3f,"
		"\"dur\":%.3f,\"cat\":\"%s\",\"name\":\"",
		tid, (double)(e->t0 - c->t_start) / 1e3,
		(double)(e->t1 - e->t0) / 1e3, cat);
	cgr__put_escaped(f, verb);
	fputc(' ', f);
	cgr__put_escaped(f, what);
	fprintf(f, "\",\"args\":{\"execution\":%llu}}",
		(unsigned long long)e->seq);
}

/* The records in t (NULL: none): a count a worker process may have
 * written, so bounded by the capacity. */
static uint32_t trace_count(const struct cgr__prog *p,
			    const struct cgr__tbuf *t)
{
	uint32_t n;

	if (t == NULL)
		return 0;
	/* T2: pairs with T1 in the worker: records below n are whole. */
	n = atomic_load_explicit(&((struct cgr__tbuf *)t)->n,
				 memory_order_acquire);
	return n < p->trace_cap ? n : p->trace_cap;
}

/* Operation i of p, or NULL if there is none such (the index comes from
 * a record, maybe another process's). */
static const struct cgr__op *trace_op(const struct cgr__prog *p, int32_t i)
{
	return i >= 0 && (size_t)i < p->nops ? &p->ops[i] : NULL;
}

int cgr_compiled_write_trace(const cgr_compiled *c, const char *path)
{
	static const char *const sname[CGR__NSTREAMS_ALL] = {
		" collective stream", " send stream", " recv stream",
		" nccl queue", " compute stream"
	};
	size_t tid = c != NULL ? c->nprogs : 0;
	FILE *f;

	if (c == NULL || path == NULL)
		return -EINVAL;
	if (c->p.trace_events == 0)
		return -ENODATA;
	f = fopen(path, "w");
	if (f == NULL)
		return -errno;
	fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
	for (size_t i = 0; i < c->nprogs; i++)
		cgr__trace_track(f, i, i == 0, c->progs[i].w->name, "");
	for (size_t i = 0; i < c->nprogs; i++) {
		const struct cgr__prog *p = &c->progs[i];
		uint32_t n = trace_count(p, p->trace);
		for (uint32_t k = 0; k < n; k++) {
			const struct cgr__trace_ev *e = &p->trace->ev[k];
			const struct cgr__op *op = trace_op(p, e->op);
			const char *kind;
			if (op == NULL)
				continue; /* not a record of this program */
			kind = cgr__op_kind_name(op->kind);
			cgr__trace_op(f, c, i, e, kind, kind,
				      cgr__op_label(c, op));
		}
	}
	/* One track per communication or compute stream, after the
	 * workers'. */
	for (size_t i = 0; i < c->nprogs; i++)
		for (int s = 0; s < CGR__NSTREAMS_ALL; s++) {
			const struct cgr__prog *p = &c->progs[i];
			if (p->strace[s] == NULL)
				continue;
			uint32_t n = trace_count(p, p->strace[s]);
			cgr__trace_track(f, tid, false, p->w->name, sname[s]);
			for (uint32_t k = 0; k < n; k++) {
				const struct cgr__trace_ev *e =
					&p->strace[s]->ev[k];
				const struct cgr__op *op = trace_op(p, e->op);
				const char *name =
					op != NULL && op->coll != NULL ?
						op->coll->name :
					e->tc >= 0 && (size_t)e->tc < p->ntcs ?
						p->tcs[e->tc].name :
						NULL;
				if (name != NULL)
					cgr__trace_op(f, c, tid, e, "stream",
						      "run", name);
			}
			tid++;
		}
	fprintf(f, "\n]}\n");
	return cgr__close(f);
}

/* ---- DOT ----------------------------------------------------------- */

static const char *cgr__transport_name(const cgr_node *n)
{
	return n->transport == CGR_TRANSPORT_DEVICE ? "device" : "host";
}

int cgr_graph_write_dot(const cgr_graph *g, const char *path)
{
	FILE *f;
	const cgr_worker *w;

	if (g == NULL || path == NULL)
		return -EINVAL;
	f = fopen(path, "w");
	if (f == NULL)
		return -errno;
	fprintf(f, "digraph cgr {\n  rankdir=LR;\n  node [fontsize=10];\n");
	for (const cgr_node *n = g->nodes; n != NULL; n = n->next)
		if (n->kind == CGR__NODE_INPUT || n->kind == CGR__NODE_CONST) {
			fprintf(f, "  n%u [shape=%s,label=\"", n->id,
				n->kind == CGR__NODE_INPUT ? "invhouse" : "note");
			cgr__put_escaped(f, n->name);
			fprintf(f, "\"];\n");
		}
	/* Plain tasks, one cluster per worker. */
	for (w = g->ctx->workers; w != NULL; w = w->next) {
		bool any = false;
		for (const struct cgr__task *t = g->tasks; t != NULL;
		     t = t->next) {
			if (t->coll || t->w != w)
				continue;
			if (!any) {
				fprintf(f, "  subgraph cluster_w%u {\n    label=\"",
					w->index);
				cgr__put_escaped(f, w->name);
				fprintf(f, "\";\n");
				any = true;
			}
			fprintf(f, "    t%u [shape=box,label=\"", t->id);
			cgr__put_escaped(f, t->name);
			fprintf(f, "\"];\n");
		}
		if (any)
			fprintf(f, "  }\n");
	}
	for (const struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		if (!t->coll)
			continue;
		fprintf(f, "  t%u [shape=hexagon,style=filled,fillcolor="
			   "lightblue,label=\"%s\\n",
			t->id, cgr__coll_name(t->coll));
		cgr__put_escaped(f, t->name);
		fprintf(f, "\\n");
		for (size_t r = 0; r < t->nmembers; r++) {
			fprintf(f, "%s", r ? "," : "");
			cgr__put_escaped(f, t->members[r]->name);
		}
		fprintf(f, "\"];\n");
	}
	/* Edges: source node -> consuming task. */
	for (const struct cgr__task *t = g->tasks; t != NULL; t = t->next)
		for (size_t i = 0; i < t->nin; i++) {
			const cgr_node *n = t->in[i];
			if (n == NULL)
				continue;
			if (n->kind == CGR__NODE_TASK)
				fprintf(f, "  t%u -> t%u [label=\"%s\"];\n",
					n->task->id, t->id,
					cgr__transport_name(n));
			else
				fprintf(f, "  n%u -> t%u;\n", n->id, t->id);
		}
	fprintf(f, "  out [shape=house,label=\"outputs\"];\n");
	for (size_t o = 0; o < g->noutputs; o++)
		fprintf(f, "  t%u -> out [label=\"%zu\"];\n",
			g->outputs[o]->task->id, o);
	fprintf(f, "}\n");
	return cgr__close(f);
}

int cgr_compiled_write_dot(const cgr_compiled *c, const char *path)
{
	FILE *f;

	if (c == NULL || path == NULL)
		return -EINVAL;
	f = fopen(path, "w");
	if (f == NULL)
		return -errno;
	fprintf(f, "digraph schedule {\n  node [shape=box,fontsize=10];\n"
		   "  driver [shape=house];\n");
	for (size_t i = 0; i < c->nprogs; i++) {
		const struct cgr__prog *p = &c->progs[i];
		fprintf(f, "  subgraph cluster_p%zu {\n    label=\"", i);
		cgr__put_escaped(f, p->w->name);
		fprintf(f, "\";\n");
		for (size_t k = 0; k < p->nops; k++) {
			const struct cgr__op *op = &p->ops[k];
			fprintf(f, "    p%zu_%zu [label=\"%zu: %s ", i, k, k,
				cgr__op_kind_name(op->kind));
			cgr__put_escaped(f, cgr__op_label(c, op));
			fprintf(f, "\"%s];\n",
				op->kind == CGR__OP_COLL ?
					",style=filled,fillcolor=lightblue" :
					"");
			if (k > 0)
				fprintf(f, "    p%zu_%zu -> p%zu_%zu;\n", i,
					k - 1, i, k);
		}
		fprintf(f, "  }\n");
	}
	/* Rings: WRITE -> the READ that takes the message (or the driver). */
	for (size_t ch = 0; ch < c->nchans; ch++) {
		char from[48] = "driver", to[48] = "driver";
		for (size_t i = 0; i < c->nprogs; i++)
			for (size_t k = 0; k < c->progs[i].nops; k++) {
				const struct cgr__op *op = &c->progs[i].ops[k];
				/* A WRITE, or one fused into a stream job. */
				const struct cgr__op *w = op;
				if (op->kind == CGR__OP_COLL)
					w = op->coll->fused_write;
				else if (op->kind == CGR__OP_COMPUTE)
					w = op->tc->fused_write;
				else if (op->kind != CGR__OP_WRITE)
					w = NULL;
				if (op->kind == CGR__OP_READ && op->chan == ch)
					snprintf(to, sizeof(to), "p%zu_%zu", i,
						 k);
				for (size_t j = 0; w != NULL && j < w->nchans;
				     j++)
					if (w->chans[j] == ch)
						snprintf(from, sizeof(from),
							 "p%zu_%zu", i, k);
			}
		fprintf(f, "  %s -> %s [style=dashed,color=gray40];\n", from,
			to);
	}
	/* Collectives: the members' operations meet. */
	for (size_t i = 0; i < c->nprogs; i++)
		for (size_t k = 0; k < c->progs[i].nops; k++) {
			const struct cgr__op *op = &c->progs[i].ops[k];
			if (op->kind != CGR__OP_COLL || op->coll->rank != 0)
				continue;
			for (size_t q = 0; q < c->nprogs; q++)
				for (size_t m = 0; m < c->progs[q].nops; m++) {
					const struct cgr__op *o2 =
						&c->progs[q].ops[m];
					if (q != i && o2->kind == CGR__OP_COLL &&
					    o2->coll->task_id == op->coll->task_id)
						fprintf(f,
							"  p%zu_%zu -> p%zu_%zu "
							"[dir=none,color=blue,"
							"style=bold];\n",
							i, k, q, m);
				}
		}
	fprintf(f, "}\n");
	return cgr__close(f);
}
