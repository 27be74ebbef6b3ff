/*
 * graph/internal.h: the objects behind cgr.h's opaque handles: context,
 * worker, graph and nodes, and the compiled graph with its ports, rings and
 * per-worker programs.  Shared by graph/ (building, validation), compile/
 * (lowering to programs) and exec/ (worker loop, execute/get, teardown).
 *
 * Threads: ctx, graph and the driver side of a compiled graph belong to the
 * driver thread.  A worker's thread owns its reactor and runs its program;
 * what it shares with the driver is marked _Atomic or is written before the
 * program is published (release on cmd) and read-only afterwards.
 */
#ifndef CGR_GRAPH_INTERNAL_H
#define CGR_GRAPH_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/alloc.h"
#include "base/base.h"
#include "base/futex.h"
#include "comm/kinds.h"
#include "ctx/ctx.h"
#include "future/future.h"
#include "reactor/reactor.h"
#include "ring/ring.h"

/* ---- context and workers ------------------------------------------ */

enum cgr__wcmd {
	CGR__WCMD_IDLE = 0,
	CGR__WCMD_RUN = 1,
	CGR__WCMD_STOP = 2,
};

struct cgr_worker {
	cgr_ctx *ctx;
	char *name;
	int cpu;
	int device; /* cgr_worker_params.device */
	cgr_worker_init_fn init;
	cgr_worker_fini_fn fini;
	void *arg;
	void *state;
	pthread_t thread;
	unsigned index;

	/* Mailbox: the driver publishes prog, then cmd (release), then rings
	 * bell.  The worker parks on bell while idle or waiting for input. */
	_Atomic uint32_t cmd;
	struct cgr__prog *_Atomic prog;
	struct cgr_bell bell cgr__aligned;

	/* Completed once init ran (result: init's code); exited when the
	 * thread is about to return. */
	struct cgr_future life;
	uint32_t life_gen;
	struct cgr_future exited;
	uint32_t exit_gen;

	/* What the thread is doing, for teardown's report. */
	const char *_Atomic current_task;
	_Atomic uint64_t current_seq;

	struct cgr_compiled *busy_with; /* driver: live graph using us */
	bool destroyed;			/* driver */
	bool abandoned;			/* driver: left stuck in a task */
	struct cgr_worker *next;
};

/* ---- graphs -------------------------------------------------------- */

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
	cgr_value cval;		/* CONST: the copy */
	void *cdata;		/* CONST: owned data */
	size_t cdata_len;
	char name[64];
	int transport;	     /* enum cgr_transport */
	unsigned edge_flags; /* enum cgr_edge_flags */
	bool edge_lowered;   /* compile made its broadcast already */
	int overlap;	     /* enum cgr_overlap_mode, for its device edge */
	cgr_graph *g;
	struct cgr_node *next; /* graph's list */
};

struct cgr__task {
	unsigned id; /* bind order */
	/* Collectives: coll is the kind (enum cgr_coll_kind), 0 for a plain
	 * task; members[rank] run it together, w is NULL. */
	int coll;
	cgr_coll_params cp;
	cgr_worker **members;
	size_t nmembers;
	struct cgr__coll_board *board; /* compile scratch */
	bool edge; /* a device-transport edge: the root keeps no output */
	char *name;
	cgr_task_fn fn;
	void *arg;
	size_t max_out_bytes;
	unsigned flags; /* enum cgr_task_flags */
	cgr_worker *w;
	size_t nin, nout;
	cgr_node **in;	 /* nin sources (NULL: not set yet) */
	cgr_node **out;	 /* nout port nodes */
	struct cgr__task *next;
	/* compile scratch */
	unsigned indeg, topo;
	int mark;
	bool live;
};

struct cgr_graph {
	cgr_ctx *ctx;
	struct cgr_node *nodes, **nodes_tail;
	struct cgr__task *tasks, **tasks_tail;
	unsigned nnodes, ntasks;
	cgr_node **outputs;
	size_t noutputs;
	bool compiled;
	char errmsg[512];
};

int cgr__graph_fail(cgr_graph *g, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

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

const char *cgr__coll_name(int kind);
/* Turns device-transport edges into broadcasts (graph/graph.c). */
int cgr__graph_lower_edges(cgr_graph *g);

/* ---- compiled graphs ----------------------------------------------- */

/* Header of one buffer slot; the data follows at CGR__SLOT_HDR. */
struct cgr__slot_hdr {
	uint32_t kind; /* enum cgr_value_kind */
	int32_t code;
	uint64_t len; /* data bytes */
	int32_t ndim;
	uint8_t dt_code, dt_bits;
	uint16_t dt_lanes;
	int32_t dev_type, dev_id;
	int64_t shape[CGR_MAX_NDIM];
};
#define CGR__SLOT_HDR 128
_Static_assert(sizeof(struct cgr__slot_hdr) <= CGR__SLOT_HDR,
	       "slot header must fit its reserved space");

/* A value-producing port and its nslots buffer slots. */
struct cgr__port {
	unsigned char *mem;
	size_t slot_bytes; /* header + capacity */
	size_t cap;	   /* data capacity per slot */
	uint32_t nslots;   /* 1 for constants */
	uint32_t mask;
	char name[64];
};

static inline struct cgr__slot_hdr *cgr__port_slot(const struct cgr__port *p,
						  uint64_t seq)
{
	return (struct cgr__slot_hdr *)(p->mem +
					(size_t)(seq & p->mask) * p->slot_bytes);
}

static inline void *cgr__slot_data(struct cgr__slot_hdr *h)
{
	return (unsigned char *)h + CGR__SLOT_HDR;
}

/* One ring from a port's producer to one consumer (worker or driver). */
struct cgr__chan {
	void *mem;
	size_t memsize;
	struct cgr_ring prod, cons;
	struct cgr_bell *consumer_bell; /* worker's bell or the driver's */
	unsigned port;
};

/* Ring messages: the execution's sequence number. */
struct cgr__msg {
	uint64_t seq;
};

enum cgr__op_kind {
	CGR__OP_READ = 1,
	CGR__OP_COMPUTE = 2,
	CGR__OP_WRITE = 3,
	CGR__OP_COLL = 4,
	CGR__OP_WAIT = 5, /* overlap: until a collective (or stream task) of
			     this execution is done on its stream */
	CGR__OP_SWAIT = 6, /* overlap: the stream of the collective that
			      follows waits for a stream task (device side) */
};

struct cgr__task_job {
	struct cgr_task_ctx *tc;
	uint64_t seq;
	int64_t t0; /* trace: when the stream reached the task's work */
};

struct cgr_task_ctx {
	struct cgr_compiled *c;
	struct cgr__task *task; /* compile time only: the graph may be gone */
	cgr_worker *w;
	uint64_t seq;
	unsigned *in_ports; /* nin_expanded */
	size_t nin;
	unsigned *out_ports; /* nout */
	size_t nout;
	cgr_value *inv, *outv; /* scratch, sized at compile */
	int err_code;
	char errmsg[256];
	char *name;
	void *arg;
	cgr_task_fn fn;
	/* CGR_TASK_STREAM: the work runs on the compute stream s; then the
	 * stream runs jobs[slot] (the fused WRITE of the outputs, done
	 * published as execution + 1), and ev[slot] is recorded after it. */
	bool stream;
	bool async;    /* overlap: the thread does not wait for the stream */
	uint32_t tidx; /* overlap: its place among the stream tasks */
	cgr_stream *s;
	struct cgr__task_job *jobs;
	cgr_event **ev;
	const struct cgr__op *fused_write;
	struct cgr__prog *prog;
	_Atomic uint64_t done;
};

/* One member's share of a collective: see exec/coll.c. */
/* A member's description of its input for one execution (exec/coll.c). */
struct cgr__agree;
#define CGR__AGREE_SIZE 256

/* Overlap: a worker's communication streams. */
enum cgr__stream_class {
	CGR__S_COLL, /* collectives */
	CGR__S_SEND, /* device edges this worker is the root of */
	CGR__S_RECV, /* device edges this worker reads */
	CGR__NSTREAMS,
	/* Not a communication stream: stream tasks' work (CGR_TASK_STREAM). */
	CGR__S_COMP = CGR__NSTREAMS,
	CGR__NSTREAMS_ALL
};

struct cgr__coll_rt {
	struct cgr_compiled *c;
	struct cgr__task *task; /* compile time only: the graph may be gone */
	int kind;		/* enum cgr_coll_kind */
	cgr_redop op;
	int root;
	bool static_shape;
	cgr_worker *w;
	int rank, n;
	cgr_comm *comm;
	size_t k;	   /* tensors per member (buckets) */
	bool edge;	   /* a device-transport edge's broadcast */
	bool async;	   /* overlap: runs on the communication stream */
	bool joins_all;	   /* finishing proves every member started it */
	int sclass;	   /* overlap: its stream (enum cgr__stream_class) */
	uint32_t sidx;	   /* overlap: its place in its stream's order (or,
			      on the thread, among the thread's) */
	int overlap;	   /* enum cgr_overlap_mode of the node */
	/* overlap: the stream task its stream joins first (an SWAIT, kept
	 * or found redundant), or NULL */
	struct cgr_task_ctx *swait;
	unsigned root_port; /* edge: the producer's port (lists' host part) */
	unsigned *in_ports;  /* k; CGR__NO_PORT: none on this member */
	unsigned *out_ports; /* k; CGR__NO_PORT: none on this member */
	struct cgr__agree *mine; /* k records */
	void *verdicts;		 /* k, buckets only */
	unsigned char *bucket_in, *bucket_out; /* buckets only */
	struct cgr__coll_board *board; /* shared by the members */
	struct cgr__agree *cached;     /* n * k: the last agreement */
	bool have_cached;
	size_t cap; /* data capacity of the outputs, the same on every member */
	char *name;
	/* Overlap: the job runs on the worker's communication stream, then
	 * performs fused_write (the WRITE of its outputs) and publishes done
	 * (execution + 1). */
	struct cgr__coll_job *jobs; /* one per slot */
	const struct cgr__op *fused_write;
	_Atomic uint64_t done;
	struct cgr__prog *prog;
};

struct cgr__coll_job {
	struct cgr__coll_rt *cr;
	uint64_t seq;
};
#define CGR__NO_PORT 0xffffffffu

struct cgr__op {
	int kind;
	bool order; /* WAIT: keeps collective order (not a data hazard) */
	bool prev;  /* WAIT: for the previous execution's run of coll */
	/* COLL; WAIT: the collective waited for (NULL: tc is); SWAIT: the
	 * collective whose stream waits */
	struct cgr__coll_rt *coll;
	unsigned chan;		/* READ */
	/* COMPUTE; WAIT, SWAIT: the stream task waited for (or NULL) */
	struct cgr_task_ctx *tc;
	unsigned *chans;	/* WRITE: rings fed by this task's outputs */
	size_t nchans;
};

struct cgr__prog {
	struct cgr_compiled *c;
	cgr_worker *w;
	struct cgr__op *ops;
	size_t nops;
	struct cgr_task_ctx *tcs;
	size_t ntcs;
	struct cgr_future left; /* completed when the worker leaves */
	uint32_t left_gen;
	_Atomic uint64_t done_seq; /* executions completed (for reports) */
	/* Trace: the first trace_cap operations, written by the worker only;
	 * trace_n is published with release after each record. */
	struct cgr__trace_ev *trace;
	uint32_t trace_cap;
	_Atomic uint32_t trace_n;
	/* Overlap: communication; and the compute stream of stream tasks. */
	cgr_stream *streams[CGR__NSTREAMS_ALL];
	/* Trace of each stream's jobs (trace_cap each), written by that
	 * stream's executor only; published like trace_n. */
	struct cgr__trace_ev *strace[CGR__NSTREAMS_ALL];
	_Atomic uint32_t strace_n[CGR__NSTREAMS_ALL];
};

struct cgr__trace_ev {
	int64_t t0, t1; /* CLOCK_MONOTONIC ns */
	uint64_t seq;
	const struct cgr__op *op;	  /* a worker's operation, or NULL */
	const struct cgr__coll_rt *coll; /* a stream's job (op NULL) */
	const struct cgr_task_ctx *tc;	  /* a compute stream's job */
};

struct cgr_compiled {
	cgr_ctx *ctx;
	_Atomic uint32_t refs; /* driver + each worker running a program */
	cgr_compile_params p;
	uint32_t nslots;

	struct cgr__port *ports;
	size_t nports;
	struct cgr__chan *chans;
	size_t nchans;
	struct cgr__prog *progs;
	size_t nprogs;

	/* Driver side. */
	size_t nargs;
	unsigned *arg_port;   /* nargs */
	unsigned **arg_chans; /* per arg: rings to consumers */
	size_t *arg_nchans;
	size_t nout;
	unsigned *out_port; /* per output */
	unsigned *drv_chans; /* distinct rings into the driver */
	size_t ndrv_chans;
	unsigned *out_chan; /* per output: index into drv_chans */
	uint32_t *drv_mult; /* per driver ring: outputs it serves */
	struct cgr_bell drv_bell cgr__aligned;

	uint64_t next_seq; /* next execution */
	uint64_t oldest;   /* oldest not released */
	uint32_t *arrived; /* per slot: outputs arrived */
	uint8_t *released; /* per slot */

	_Atomic uint32_t stop;
	int64_t t_start; /* compile time: trace timestamps start here */
	/* Tests only: the communication streams sleep a pseudo-random time
	 * up to a quarter of this before each collective, and (one member's
	 * stream per execution) this long after it with the outputs garbled,
	 * to expose missing waits.  Atomic: a job
	 * with no local input may start before the first execution. */
	_Atomic int64_t debug_coll_delay_ns;
	bool torn_down;
	int teardown_result;
	struct cgr_compiled *next; /* ctx's list */

	/* Communicators created for collectives, freed with the graph. */
	cgr_comm **comms;
	struct cgr__task **comm_owner; /* the collective each was made for */
	size_t ncomms;
	/* Every communicator the graph uses: teardown aborts them. */
	cgr_comm **used_comms;
	size_t nused_comms;

	/* Memory this graph allocated, freed in one place. */
	void **allocs;
	size_t *alloc_sizes;
	size_t nallocs, allocs_cap;
};

/* compile/ */
void *cgr__c_alloc(struct cgr_compiled *c, size_t size, size_t align);
char *cgr__c_strdup(struct cgr_compiled *c, const char *s);
void cgr__compiled_unref(struct cgr_compiled *c);

/* exec/ */
/* Runs member cr's share of a collective for execution seq. */
void cgr__coll_run(struct cgr__coll_rt *cr, uint64_t seq,
		   struct cgr_reactor *r);
bool cgr__coll_member(const struct cgr__coll_rt *cr, const cgr_worker *w);
/* Checks that the programs of c cannot deadlock (compile/compile.c). */
int cgr__verify(struct cgr_compiled *c, char *msg, size_t len);
/* Validates and lowers g without starting anything or creating
 * communicators, for schedule tests; free with cgr__plan_free. */
int cgr__graph_plan(cgr_graph *g, const cgr_compile_params *p,
		    cgr_compiled **out);
void cgr__plan_free(cgr_compiled *c);
/* Bytes of shared agreement state for a collective of n members. */
size_t cgr__coll_board_size(size_t n, size_t k, uint32_t nslots);
void cgr__coll_board_init(struct cgr__coll_board *b, size_t n, size_t k,
			  uint32_t nslots, cgr_worker *const *members);
/* Allocates cr's scratch (cr->k, n, cap set); 0 or -ENOMEM. */
int cgr__coll_rt_init(struct cgr__coll_rt *cr);
void cgr__worker_run(cgr_worker *w, struct cgr__prog *p,
		     struct cgr_reactor *r);
/* Stores v into slot h of capacity cap; returns 0 or an error value is
 * written instead and the error code returned. */
int cgr__value_store(struct cgr__slot_hdr *h, size_t cap, const cgr_value *v);
/* The same with the data copied by stream s, in order (NULL: now); a
 * list is refused (CGR_EBADVALUE, stored as an error value). */
int cgr__value_store_on(struct cgr__slot_hdr *h, size_t cap,
			const cgr_value *v, cgr_stream *s);
void cgr__value_load(struct cgr__slot_hdr *h, cgr_value *v);
void cgr__value_store_error(struct cgr__slot_hdr *h, size_t cap, int code,
			    const char *msg);
void cgr__list_store(struct cgr__slot_hdr *h, const cgr_value *v,
		     bool copy_tensors);
/* Checks a value the caller hands in; 0 or CGR_ETOOBIG/CGR_EBADVALUE. */
int cgr__value_check(const cgr_value *v, size_t cap, size_t *bytes);

#endif
