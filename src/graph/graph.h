/*
 * graph/graph.h: the graph as the user builds it (struct cgr_graph and
 * struct cgr_node behind cgr.h's handles): input, constant and task-output
 * nodes, and the tasks and collectives that produce them.  The builder
 * (graph.c) only records and checks what it is given; the compiler
 * (compile/) reads it, and the driver may destroy it once compiled.
 *
 * Threads: the driver thread only.
 */
#ifndef CGR_GRAPH_H
#define CGR_GRAPH_H

#include <stdbool.h>

#include "comm/kinds.h"
#include "ctx/ctx.h"
#include "graph/worker.h"

enum cgr__node_kind {
	CGR__NODE_INPUT = 1,
	CGR__NODE_CONST = 2,
	CGR__NODE_TASK = 3, /* one output port of a task */
};

struct cgr__task;

struct cgr_node {
	int kind;
	int index;		/* INPUT: argument or CGR_INPUT_ALL */
	unsigned id;		/* creation order in the graph */
	struct cgr__task *task; /* TASK */
	size_t port;		/* TASK: output index */
	void *cdata;		/* CONST: the value, as a ready slot */
	size_t cdata_len;
	char name[64];
	int transport;	     /* enum cgr_transport */
	unsigned edge_flags; /* enum cgr_edge_flags */
	bool edge_lowered;   /* compile made its broadcast already */
	int overlap;	     /* enum cgr_overlap_mode, for its device edge */
	/* Its device edge's NCCL communicator across hosts (its producer
	 * and readers on several hosts: made by the compile), or NULL. */
	cgr_comm *edge_comm;
	cgr_graph *g;
	struct cgr_node *next; /* graph's list */
};

struct cgr__task {
	unsigned id; /* bind order: 0, 1, ... in the graph's list */
	/* Collectives: coll is the kind (enum cgr_coll_kind), 0 for a plain
	 * task; members[rank] run it together, w is NULL. */
	int coll;
	cgr_coll_params cp;
	cgr_worker **members;
	size_t nmembers;
	bool edge; /* a device-transport edge: the root keeps no output */
	char *name;
	cgr_task_fn fn;
	void *arg;
	void *arg_data; /* cgr_task_desc.arg_data, copied (arg NULL) */
	size_t arg_len;
	size_t max_out_bytes;
	unsigned flags; /* enum cgr_task_flags */
	cgr_worker *w;
	size_t nin, nout;
	cgr_node **in;	 /* nin sources (NULL: not set yet) */
	cgr_node **out;	 /* nout port nodes */
	struct cgr__task *next;
};

struct cgr_graph {
	cgr_ctx *ctx;
	/* On ctx->graphs (cgr_ctx_destroy destroys what is left). */
	cgr_graph *live_next, **live_prev;
	struct cgr_node *nodes, **nodes_tail;
	struct cgr__task *tasks, **tasks_tail;
	unsigned nnodes, ntasks;
	cgr_node **outputs;
	size_t noutputs;
	bool compiled;
	/* Bumped by every change (a node, an input, the outputs, an edge's
	 * settings): eager runs rebuild their program (drive/eager.c). */
	unsigned version;
	char errmsg[512];
	/* Eager execution (drive/eager.c): its state, freed with the graph
	 * by eager_free. */
	void *eager;
	void (*eager_free)(cgr_graph *g);
	/* Tests only (tests/plan.c): after the driver wrote this graph's
	 * compiled plan (img, len bytes: in the shared segment when the
	 * graph has one), the compile builds its programs from the image
	 * plan_hook returns instead (a copy elsewhere, or a corrupted one:
	 * it is checked first).  NULL: none. */
	const void *(*plan_hook)(void *arg, void *img, size_t len);
	void *plan_hook_arg;
};

/* Records the message of a failed call (cgr_graph_errmsg) and logs it at
 * CGR_LOG_INFO; returns err. */
int cgr__graph_fail(cgr_graph *g, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Adds a collective as checked (cgr_graph_collective's last step; the
 * rebuild of a worker process's graph uses it directly, its inputs set
 * after: in may hold NULLs).  cp->name is taken. */
int cgr__coll_add(cgr_graph *g, cgr_coll_params *cp,
		  cgr_worker *const *members, size_t n, cgr_node *const *in,
		  size_t nin, cgr_node **out, size_t nout);

/* graph/blob.c: the description of g a worker process compiles again
 * (*out: *len bytes in arena memory of *cap bytes), taken before the
 * compiler adds to it.  Fails (g's errmsg) when a task of a process
 * worker has no exported function or has an arg. */
int cgr__graph_pack(cgr_graph *g, const cgr_compile_params *p, void **out,
		    size_t *len, size_t *cap);
/* A worker process's side: the graph of blob (len bytes, untrusted: every
 * index checked; -EPROTO with why) made again in ctx, each worker index
 * mapped to a worker of ctx by cb (its own, or a stand-in). */
struct cgr__unpack_cb {
	int (*worker)(void *arg, unsigned index, int device, const char *name,
		      cgr_worker **out);
	void *arg;
};
int cgr__graph_unpack(cgr_ctx *ctx, const void *blob, size_t len,
		      const struct cgr__unpack_cb *cb, cgr_graph **out,
		      cgr_compile_params *params, char *why, size_t wlen);

/* "task" for a plain task, else the collective kind's name. */
const char *cgr__coll_name(int kind);

/* The worker that consumes input i / produces output o of task t. */
static inline cgr_worker *cgr__in_worker(const struct cgr__task *t, size_t i)
{
	if (!t->coll)
		return t->w;
	if (cgr__coll_in_at_root(t->coll))
		return t->members[t->cp.root];
	return t->members[i / t->cp.ntensors];
}

static inline cgr_worker *cgr__out_worker(const struct cgr__task *t, size_t o)
{
	if (!t->coll)
		return t->w;
	if (cgr__coll_out_at_root(t->coll))
		return t->members[t->cp.root];
	return t->members[o / t->cp.ntensors];
}

/* The workers that run t: its members, or its one worker (i < n). */
static inline size_t cgr__task_nworkers(const struct cgr__task *t)
{
	return t->coll ? t->nmembers : 1;
}

static inline cgr_worker *cgr__task_worker(const struct cgr__task *t,
					   size_t i)
{
	return t->coll ? t->members[i] : t->w;
}

/* The rank of w in t (0 for a plain task on w), or -1. */
static inline int cgr__task_rank(const struct cgr__task *t,
				 const cgr_worker *w)
{
	if (!t->coll)
		return t->w == w ? 0 : -1;
	for (size_t i = 0; i < t->nmembers; i++)
		if (t->members[i] == w)
			return (int)i;
	return -1;
}

#endif
