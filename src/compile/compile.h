/*
 * compile/compile.h: the compiler's passes and what they share.  One
 * compilation (struct cgr__cc) runs, in compile.c:
 *
 *   validate  params, tasks bound to live free workers, device edges
 *             lowered to broadcasts (edges.c), a topological order, every
 *             task reaching an output, every argument used (validate.c)
 *   lower     where each value lives (host, or a CUDA device) and which
 *             collectives run on NCCL; ports, channels, the driver's
 *             side, one program per worker in the global order (lower.c)
 *   verify    the programs cannot deadlock (verify.c)
 *   overlap   collectives onto communication streams, stream tasks left
 *             running, WAITs where values are used (overlap.c)
 *   prune     the WAITs other orderings imply dropped (prune.c)
 *   verify    again, on the final programs: streams included
 *   plan      the programs encoded as the plan (plan.h), checked, and
 *             the programs that run built from it (plan.c)
 *   create    communicators, events, streams (create.c; skipped when only
 *             planning)
 *
 * Also the compiled graph's memory (compile.c) and its shared segment
 * (shared.c), which only the compiler allocates from.
 *
 * Threads: the driver thread.
 */
#ifndef CGR_COMPILE_H
#define CGR_COMPILE_H

#include "compile/plan.h"
#include "compile/prog.h"

/* ---- the compiled graph's memory (compile.c, shared.c) ------------- */

/* Memory owned by c (64-byte aligned, zeroed), freed with it; NULL when
 * out of memory. */
void *cgr__c_alloc(struct cgr_compiled *c, size_t size);
/* Whether c's shared memory was laid out by another process (a worker
 * process compiling over the driver's segment): set up already, to be
 * checked, not written. */
static inline bool cgr__c_attached(const struct cgr_compiled *c)
{
	return c->seg != NULL && c->seg->attach;
}

/* Scratch mode on: what cgr__c_alloc hands out until it is turned off
 * is the compiler's working state (the programs its passes rewrite),
 * freed once the plan is loaded (salloc'd memory with a segment is never
 * scratch). */
void cgr__c_scratch(struct cgr_compiled *c, bool on);
/* Memory every process running c shares (its segment, when it has
 * process workers; else as cgr__c_alloc); NULL when out of it. */
void *cgr__c_salloc(struct cgr_compiled *c, size_t size);
/* Address space for the ports' big areas (once per graph), shared as
 * cgr__c_salloc but never touched: its pages are allocated where a value
 * first uses them.  NULL when the system refuses the reservation. */
void *cgr__c_reserve(struct cgr_compiled *c, size_t size);
/* A trace buffer of cap records, shared with every process running c. */
static inline struct cgr__tbuf *cgr__tbuf_new(struct cgr_compiled *c,
					      uint32_t cap)
{
	struct cgr__tbuf *t =
	    cgr__c_salloc(c, sizeof(*t) + (size_t)cap * sizeof(t->ev[0]));

	if (t != NULL && !cgr__c_attached(c))
		atomic_init(&t->n, 0);
	return t;
}

/* Device memory on CUDA device dev, owned by c: 0, -ENODEV (no cuda
 * backend), -ENOMEM or the device's error. */
int cgr__c_dalloc(struct cgr_compiled *c, int dev, size_t size, void **out);
char *cgr__c_strdup(struct cgr_compiled *c, const char *s);

/* compile/shared.c: the driver makes the segment (create), and once the
 * compile is done cuts, heads and seals it with the graph's description
 * blob inside (seal); a worker process maps the driver's (attach, from
 * fd: -EPROTO and why if it is no graph segment), finds the blob in it
 * and, after compiling, checks that its layout matched (check). */
int cgr__seg_create(struct cgr_compiled *c);
int cgr__seg_seal(struct cgr_compiled *c, const void *blob, size_t blen);
int cgr__seg_attach(struct cgr_compiled *c, int fd, char *why, size_t len);
const void *cgr__seg_blob(const struct cgr_compiled *c, size_t *len);
int cgr__seg_check(const struct cgr_compiled *c, char *why, size_t len);
void cgr__seg_free(struct cgr_compiled *c);

#define CGR__NO_CHAN UINT32_MAX

/* One compilation. */
struct cgr__cc {
	cgr_graph *g;
	struct cgr_compiled *c;
	bool plan_only;		/* no communicators, events or streams */
	size_t ntasks;		/* tasks after edges were lowered */
	struct cgr__task **by_id; /* task id -> task */
	struct cgr__task **order; /* topological, preferring bind order */
	struct cgr__board **boards; /* per task id: collectives' boards */
	cgr_worker **ws;	/* a program each, in first-use order */
	size_t nw;
	unsigned *node_port;	/* node id -> port (inputs: arg port) */
	int *node_dev;		/* node id -> its data's device (NONE: host) */
	bool *nccl;		/* per task id: a collective on NCCL */
	bool *spans;		/* per task id: a collective across hosts */
	/* The channel table under construction: (port, reader), and each
	 * port's channels in creation order (a list: ch_head by port, then
	 * ch_next; CGR__NO_CHAN ends it). */
	unsigned *ch_port;
	cgr_worker **ch_w;	/* NULL: the driver */
	unsigned *ch_head, *ch_next;
	/* Per channel: what its reader needs of the value (0: nothing
	 * yet, CGR__SLICE_WHOLE, or a slice: cgr_compiled.chan_slice). */
	uint32_t *ch_use;
	size_t nch, chcap;
	uint32_t *wprog; /* worker index -> its program (CGR__NO_CHAN) */
	/* Communicators made for collectives: the collective each was made
	 * for (c->comms[i] for comm_owner[i]). */
	struct cgr__task **comm_owner;
};

/* validate.c */
/* p from in (NULL: defaults), defaults filled in: 0, or -EINVAL with
 * *why (may be NULL) naming the field. */
int cgr__compile_params(cgr_compile_params *p, const cgr_compile_params *in,
			const char **why);
int cgr__validate_tasks(cgr_graph *g);
int cgr__validate_graph(struct cgr__cc *cc);

/* edges.c: each device-transport edge becomes a broadcast (the graph
 * gains the broadcasts; the readers read their copies). */
int cgr__lower_edges(cgr_graph *g);
/* The members of node n's device edge: its producer p (m[0]), then the
 * other workers that read it, in first-use order (at most max): how
 * many. */
size_t cgr__edge_readers(const cgr_graph *g, const cgr_node *n,
			 cgr_worker *p, cgr_worker **m, size_t max);

/* lower.c */
int cgr__lower_devices(struct cgr__cc *cc);
int cgr__lower_ports(struct cgr__cc *cc);
int cgr__lower_progs(struct cgr__cc *cc);

/* overlap.c: 1 if a program was rewritten (prune then), 0, or -ENOMEM. */
int cgr__overlap(struct cgr__cc *cc);

/* prune.c */
int cgr__prune_waits(struct cgr_compiled *c, size_t ntasks);

/* verify.c: runs the programs of c abstractly (threads and streams) for
 * two executions; 0, or CGR_EDEADLOCK with the cycle in msg. */
int cgr__verify(struct cgr_compiled *c, char *msg, size_t len);

/* plan.c: the working programs of c encoded as a plan image (in c's
 * memory; *img, *len); the programs of a checked plan built into c->progs
 * (0, -ENOMEM, or -EPROTO when the plan does not fit this graph: g's
 * errmsg says why). */
int cgr__plan_encode(struct cgr__cc *cc, void **img, size_t *len);
int cgr__plan_load(struct cgr__cc *cc, const struct cgr__plan *pl);


/* create.c */
int cgr__create(struct cgr__cc *cc);

/* For schedule tests: validates and lowers g (and overlaps, prunes and
 * verifies) without starting anything or creating communicators, events
 * or streams; free with cgr__plan_free. */
int cgr__graph_plan(cgr_graph *g, const cgr_compile_params *p,
		    cgr_compiled **out);
void cgr__plan_free(cgr_compiled *c);
/* Compiles g (what cgr_graph_compile does before starting the programs):
 * seg_fd -1 in the driver (a graph with process workers gets its shared
 * segment), or a worker process's fd of the driver's segment (the same
 * graph, rebuilt from the description in it, compiled over it).  Returns
 * 0 or the error (g's errmsg says why). */
int cgr__graph_build(cgr_graph *g, const cgr_compile_params *p, int seg_fd,
		     cgr_compiled **out);

#endif
