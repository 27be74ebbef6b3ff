/*
 * compile/prog.h: what a compiled graph is at run time (struct
 * cgr_compiled behind cgr.h's handle): its ports and channels, one
 * program per worker (a fixed list of operations run once per execution),
 * the runtime state of each task and collective in those programs, and
 * the driver's side.  Every runner builds its programs from the compiled
 * plan (plan.h: position independent, what crosses to worker processes)
 * with compile/plan.c; run/ runs them; trace/ draws them.  What only the
 * compiler uses (its memory helpers, the segment's making) is in
 * compile.h.
 *
 * Threads: the driver side belongs to the driver thread.  A program
 * belongs to its worker's thread and, for the jobs it issues, to the
 * executors of its streams; what they share is marked _Atomic or is
 * written before the program is published (cgr__worker_post) and
 * read-only afterwards.
 */
#ifndef CGR_COMPILE_PROG_H
#define CGR_COMPILE_PROG_H

#include <stdatomic.h>
#include <stdbool.h>

#include "chan/board.h"
#include "chan/chan.h"
#include "comm/comm.h"
#include "graph/graph.h"
#include "shm/shm.h"

enum cgr__op_kind {
	CGR__OP_READ = 1,
	CGR__OP_COMPUTE = 2,
	CGR__OP_WRITE = 3,
	CGR__OP_COLL = 4,
	CGR__OP_WAIT = 5, /* overlap: until a collective (or stream task) of
			     this execution is done on its stream */
	CGR__OP_SWAIT = 6, /* overlap: the stream of the collective that
			      follows waits for a stream task (device side) */
	CGR__OP_RUN = 7, /* overlap: where overlap off runs a CPU collective:
			    a job held for the thread (short) runs here */
};

/* Overlap: a worker's streams. */
enum cgr__stream_class {
	CGR__S_COLL, /* collectives */
	CGR__S_SEND, /* device edges this worker is the root of */
	CGR__S_RECV, /* device edges this worker reads */
	/* Collectives and edges on NCCL, in the global order (NCCL needs one
	 * order per device): the worker's reactor agrees and enqueues them
	 * on CUDA streams (run/launch.c); cstream says which. */
	CGR__S_NCCL,
	CGR__NSTREAMS,
	/* Not a communication stream: stream tasks' work (CGR_TASK_STREAM). */
	CGR__S_COMP = CGR__NSTREAMS,
	CGR__NSTREAMS_ALL
};

#define CGR__NO_PORT 0xffffffffu
/* An error value as it crosses hosts in a collective on a communicator
 * across hosts: a slot's header and the inline data it always fits. */
#define CGR__FAR_ERR (CGR__SLOT_HDR + CGR__INLINE_BYTES)
/* There, an input of at most this many bytes travels with its member's
 * records: one exchange moves it (run/coll.c, far_small). */
#define CGR__FAR_SMALL 1024u

/*
 * Where a stream task's work on a sim stream runs (cgr_compile_params.
 * inline_ns): its last run's duration, written by whoever ran it; under
 * inline_ns the thread runs the next one itself.  The first runs on the thread too; one that
 * took longer there goes to its stream and is tried on the thread again
 * after gap executions (16, doubling to 4096), so a slow run once does
 * not keep a short job on its stream for good (run/stream.c).
 */
struct cgr__adapt {
	_Atomic int64_t last_ns;
	uint64_t probe_at; /* thread only */
	uint32_t gap;	   /* thread only */
};

struct cgr__task_job {
	struct cgr_task_ctx *tc;
	uint64_t seq;
	int64_t t0; /* when the stream reached the task's work (trace, and
		       a sim stream's last_ns) */
	/* Who completes the job: the stream (after the work), or the thread
	 * once the device failed (run/failure.c); set by the first. */
	atomic_flag claimed;
};

/* A plain task's share of a program (struct cgr_task_ctx behind cgr.h's
 * cgr_task_ctx: what a task function is handed). */
struct cgr_task_ctx {
	/* What every run of the task touches first: two cache lines (the
	 * ports' lists and the values' scratch follow in one block,
	 * plan.c). */
	struct cgr_compiled *c;
	uint64_t seq;
	unsigned *in_ports; /* nin: CGR_INPUT_ALL expanded */
	size_t nin;
	unsigned *out_ports; /* nout */
	size_t nout;
	cgr_value *inv, *outv; /* scratch, sized at compile */
	cgr_task_fn fn;
	void *arg;
	char *name;
	cgr_worker *w;
	/* With process workers: per input, where a list another process
	 * laid out is relocated (NULL: none). */
	struct cgr__list_view *views;
	int err_code;
	bool err_set; /* errmsg holds cgr_task_set_error's text */
	unsigned task_id; /* the graph's task (compile time: the graph may be
			     gone later) */
	/* CGR_TASK_STREAM: the work runs on the compute stream s; then the
	 * stream runs jobs[slot] (the fused WRITE of the outputs, done
	 * published as execution + 1), and ev[slot] is recorded after it. */
	bool stream;
	bool async;    /* overlap: the thread does not wait for the stream */
	bool device;   /* CGR_TASK_DEVICE: its outputs live on the device */
	uint32_t tidx; /* overlap: its place among the stream tasks */
	cgr_stream *s;
	struct cgr__task_job *jobs;
	cgr_event **ev;
	const struct cgr__op *fused_write;
	struct cgr__prog *prog;
	_Atomic uint64_t done;
	uint64_t issued; /* stream tasks: last job enqueued + 1 (thread) */
	struct cgr__adapt ad; /* its work, on a sim compute stream */
	uint64_t inline_runs; /* executions whose work the thread ran */
	char errmsg[256]; /* cgr_task_set_error's text (a failing run) */
};

/* A member's share of a collective (run/coll.c runs it). */
struct cgr__coll_rt {
	struct cgr_compiled *c;
	unsigned task_id;	/* the graph's task (compile time only) */
	int kind;		/* enum cgr_coll_kind */
	cgr_redop op;
	int root;
	bool static_shape;
	cgr_worker *w;
	int rank, n;
	cgr_comm *comm;
	size_t k;	   /* tensors per member (buckets) */
	bool edge;	   /* a device-transport edge's broadcast */
	bool nccl;	   /* on NCCL: device tensors, CUDA streams */
	cgr_stream *s;	   /* the stream its communication runs on */
	int cstream;	   /* NCCL: which of the worker's CUDA streams */
	bool async;	   /* overlap: runs on the communication stream */
	bool joins_all;	   /* finishing proves every member started it */
	/* Members on several hosts: each reads every member's input and
	 * computes its own outputs; no board, no communicator.  far: on a
	 * caller's communicator that spans hosts instead (spans too): the
	 * members agree and move the data through it (run/coll.c). */
	bool spans, far;
	int sclass;	   /* overlap: its stream (enum cgr__stream_class) */
	uint32_t sidx;	   /* overlap: its place in its stream's order (or,
			      on the thread, among the thread's) */
	int overlap;	   /* enum cgr_overlap_mode of the node */
	int32_t opi;	   /* its COLL's index in the program (trace) */
	uint32_t pidx;	   /* its place among the program's COLLs (plan.c,
			      while encoding) */
	/* overlap: the stream task its stream joins first (an SWAIT, kept
	 * or found redundant), or NULL */
	struct cgr_task_ctx *swait;
	unsigned root_port; /* edge: the producer's port (lists' host part) */
	unsigned *in_ports;  /* k; CGR__NO_PORT: none on this member */
	/* n * k: every member's in_ports (rank-major), where an error value
	 * a member contributed is read (run/coll.c) */
	unsigned *all_in_ports;
	unsigned *out_ports; /* k; CGR__NO_PORT: none on this member */
	struct cgr__agree *mine; /* k records */
	struct cgr__verdict *verdicts; /* k, buckets only */
	unsigned char *bucket_in, *bucket_out; /* buckets and lists only */
	struct cgr__list_view *view; /* lists, process workers: relocation */
	struct cgr__board *board; /* shared by the members */
	struct cgr__agree *cached; /* n * k: the last agreement */
	bool have_cached;
	/* NCCL with static shapes: every member's records of this execution,
	 * collected after the data moved (the late verdict, run/coll.c),
	 * and the device buffer a member whose input changed sends from.
	 * Across hosts (spans): every member's records of this execution
	 * (n * k), read from the inputs' slots here. */
	struct cgr__agree *late;
	void *dscratch;
	/* far: CGR__FAR_ERR bytes, where a member's error value from
	 * another host lands (a slot's header and inline data); what this
	 * member sends in the exchange (its k records, then up to
	 * CGR__FAR_SMALL bytes of its input) and what it gathers (n of
	 * those). */
	void *far_err;
	unsigned char *far_mine, *far_all;
	size_t cap; /* data capacity of the outputs, the same on every member */
	char *name;
	/* Overlap: the job runs on the worker's communication stream, then
	 * performs fused_write (the WRITE of its outputs) and publishes done
	 * (execution + 1). */
	struct cgr__coll_job *jobs; /* one per slot (and on NCCL, always) */
	const struct cgr__op *fused_write;
	_Atomic uint64_t done;
	struct cgr__prog *prog;
	/* CPU, overlap: the bytes its last call moved (before the first:
	 * its capacity); with sim_comm_ns its cost, which decides whether
	 * its job is held for the thread, which runs it at its RUN
	 * (run/stream.c). */
	_Atomic size_t moved;
	uint64_t inline_runs; /* jobs the thread ran (thread only) */
};

struct cgr__coll_job {
	struct cgr__coll_rt *cr;
	uint64_t seq;
	/* NCCL: the operation enqueued for this slot (NULL: none pending),
	 * and the event recorded after all of its stream work. */
	cgr_future *f;
	cgr_event *ev;
};

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
	unsigned *chans;	/* WRITE: channels fed by this task's outputs */
	size_t nchans;
};

/* An NCCL collective of a worker's queue (run/launch.c). */
struct cgr__ljob {
	struct cgr__coll_rt *cr;
	uint64_t seq;
	int state;
	bool agreed; /* agrees before the move */
	bool late;   /* NCCL static shapes: checks after the move */
	cgr_future *xf; /* across hosts: the records' exchange (far) */
	int64_t t0;
};

/* A trace record.  Indices, not pointers: a process worker writes its
 * records into the graph's segment, and the driver reads them against
 * its own copy of the same program. */
struct cgr__trace_ev {
	int64_t t0, t1; /* CLOCK_MONOTONIC ns */
	uint64_t seq;
	/* The program's operation (a worker's record, or the collective of
	 * a communication stream's job), or -1; the stream task of a
	 * compute stream's job, or -1. */
	int32_t op, tc;
};

/* A trace buffer: its records' count (published with release after
 * each record), then trace_cap records. */
struct cgr__tbuf {
	_Atomic uint32_t n;
	uint32_t pad[15];
	struct cgr__trace_ev ev[];
};

/* One worker's program. */
struct cgr__prog {
	struct cgr_compiled *c;
	cgr_worker *w;
	struct cgr__op *ops;
	size_t nops;
	struct cgr_task_ctx *tcs;
	size_t ntcs;
	struct cgr__bell *bell; /* its worker parks here while it runs it */
	struct cgr_future left; /* completed when the worker leaves */
	uint32_t left_gen;
	_Atomic uint64_t done_seq; /* executions completed (for reports) */
	/* The program's leading operations do not imply admission: it
	 * waits for the driver to admit each execution (else a task without
	 * inputs, or an NCCL collective's receiving end, would run
	 * executions nobody asked for; compile/create.c, prog_gated). */
	bool gate;
	/* The worker's device failed (run/failure.c): CGR_EDEVICE and why;
	 * from then on its device work ends in error values.  Thread only. */
	int dead;
	char dead_msg[300];
	bool watch;	    /* it has stream tasks: the reactor watches */
	/* What else its waits and writes move along (remote/: the link to
	 * other hosts): true if it did something.  NULL: nothing.  Set
	 * before the program starts. */
	bool (*xpoll)(void *arg);
	void *xpoll_arg;
	int64_t dead_check; /* when the device was last asked */
	/* Trace: the first trace_cap operations, written by the worker
	 * only (in shared memory with process workers). */
	struct cgr__tbuf *trace;
	uint32_t trace_cap;
	/* Overlap: communication; and the compute stream of stream tasks. */
	cgr_stream *streams[CGR__NSTREAMS_ALL];
	/* NCCL collectives: CUDA streams on the worker's device, one per
	 * kind (collective, send, receive: cstream); with overlap, their
	 * queue: jobs [lq_head, lq_tail) in issue order (run/launch.c). */
	cgr_stream *nstreams[CGR__S_NCCL];
	/* NCCL collectives on a communicator across hosts: where their
	 * records cross (a sim stream's executor: the queue's head job
	 * posts them and goes on, run/launch.c), or NULL. */
	cgr_stream *far_s;
	struct cgr__ljob *lq;
	uint32_t lq_cap, lq_head, lq_tail;
	/* Trace of each stream's jobs (trace_cap each), written by whoever
	 * runs that stream's jobs (one at a time). */
	struct cgr__tbuf *strace[CGR__NSTREAMS_ALL];
	/* Per communication stream: the jobs held for the thread, in stream
	 * order, not yet run: held[s][hhead[s] .. htail[s]) of hcap[s]
	 * (run/stream.c).  While any is held, nothing else is on that
	 * stream. */
	struct cgr__coll_job **held[CGR__NSTREAMS];
	uint32_t hhead[CGR__NSTREAMS], htail[CGR__NSTREAMS];
	uint32_t hcap[CGR__NSTREAMS];
};

/* A doorbell on its own cache line. */
struct cgr__lbell {
	struct cgr__bell b;
} cgr__aligned;

/*
 * The state of a compiled graph that all who run it share: the stop
 * flag, the admissions, failures, and the doorbells every worker parks on
 * while it runs the graph's program (one per worker index of the
 * context) and the driver's.  Graphs with process workers keep it in
 * their shared segment, so nothing here is a pointer.
 */
struct cgr__gctl {
	_Atomic uint32_t stop;
	/* A worker's device failed: its program's index + 1 (the graph takes
	 * no more executions). */
	_Atomic uint32_t gone;
	/* Executions admitted (cgr_execute; release), gated programs wait
	 * for it. */
	_Atomic uint64_t admitted;
	/* Teardown: until when a leaving worker finishes NCCL operations
	 * it enqueued (its peers finish theirs), before aborting. */
	_Atomic int64_t drain_deadline;
	/* A worker died (its process, or its thread: cgr__graph_dead): its
	 * worker index + 1, and how.  Whoever takes dead_claim first writes
	 * dead_msg, then publishes dead. */
	_Atomic uint32_t dead_claim;
	_Atomic uint32_t dead;
	int32_t dead_code; /* the error values' (written with dead_msg) */
	char dead_msg[240];
	struct cgr__lbell drv;
	uint32_t nbells;
	struct cgr__lbell bells[];
};

/* The shared segment of a graph with process workers (compile/shared.c). */
#define CGR__SHM_GRAPH 0x4752 /* its typed header's kind */
struct cgr__gseg {
	struct cgr__shm shm;
	size_t used;  /* bytes handed out, header included */
	size_t cap;   /* driver: the file's size now */
	size_t reserve; /* driver: the address space reserved */
	size_t total; /* worker process: the driver's used */
	bool attach;  /* worker process: the layout is the driver's */
};

/* The compiler's passes, timed (cgr_compiled.pass_ns): validate (the
 * tasks, the order, reach and arguments), edges (device edges become
 * broadcasts), ports (placement, ports, channels, the driver's side),
 * programs, verify (the deadlock proof), overlap (the rewrite, pruning,
 * the proof again), plan (encode, check, load) and create (what runs:
 * streams, communicators, events, device memory). */
enum cgr__pass {
	CGR__PASS_VALIDATE,
	CGR__PASS_EDGES,
	CGR__PASS_PORTS,
	CGR__PASS_PROGRAMS,
	CGR__PASS_VERIFY,
	CGR__PASS_OVERLAP,
	CGR__PASS_PLAN,
	CGR__PASS_CREATE,
	CGR__NPASSES
};
extern const char *const cgr__pass_names[CGR__NPASSES];

#define CGR__SLICE(n, r) (((uint32_t)(n) << 16) | (uint32_t)(r))
#define CGR__SLICE_N(s) ((s) >> 16)
#define CGR__SLICE_R(s) ((s) & 0xffffu)
#define CGR__SLICE_WHOLE 1u

struct cgr_compiled {
	cgr_ctx *ctx;
	_Atomic uint32_t refs; /* driver + each worker running a program */
	cgr_compile_params p;
	uint32_t nslots;

	struct cgr__port *ports;
	size_t nports;
	struct cgr__chan *chans;
	size_t nchans;
	/* Per channel: 0, its reader needs the whole value; else
	 * CGR__SLICE(n, r): a tensor's block r of n is all it reads (a
	 * collective across hosts' member r reading an alltoall's,
	 * reducescatter's or scatter's input, and nothing else over it), so
	 * that only that block crosses hosts (remote/bridge.c). */
	uint32_t *chan_slice;
	struct cgr__prog *progs;
	size_t nprogs;
	/* The compiled plan the programs were built from (compile/plan.h):
	 * in the shared segment when there is one, immutable. */
	const void *plan;
	size_t plan_len;

	/* Driver side. */
	size_t nargs;
	unsigned *arg_port;   /* nargs */
	unsigned **arg_chans; /* per arg: channels to readers */
	size_t *arg_nchans;
	size_t nout;
	unsigned *out_port; /* per output */
	/* With process workers: per output buffer and output, where a list
	 * a worker process laid out is relocated for the caller (NULL:
	 * none). */
	struct cgr__list_view *out_views;
	unsigned *drv_chans; /* distinct channels into the driver */
	size_t ndrv_chans;
	unsigned *out_chan; /* per output: index into drv_chans */
	uint32_t *drv_mult; /* per driver channel: outputs it serves */

	uint64_t next_seq; /* next execution */
	uint32_t unreleased; /* executions not released: max_inflight */
	uint32_t *arrived; /* per slot: outputs arrived */
	uint8_t *released; /* per slot */
	/* Held results (drive/execute.c): the output ports' slot map (shared
	 * memory; chan.h), their buffers per port (nslots + max_inflight
	 * with outputs), the spare buffers, and the executions older than
	 * the slots that hold their outputs' buffers (at most max_inflight
	 * - 1, in no order). */
	uint32_t *omap;
	uint32_t nbufs;
	uint32_t *free_bufs;
	uint32_t nfree;
	struct cgr__held {
		uint64_t seq;
		uint32_t buf;
	} *held;
	uint32_t nheld;

	/* What every thread (and process) running the graph shares. */
	struct cgr__gctl *ctl;
	uint32_t ngated; /* programs with gate set */
	int64_t t_start; /* compile time: trace timestamps start here */
#ifdef CGR_FAULT_INJECTION
	/* Tests only (run/fault.c): the communication streams sleep a
	 * pseudo-random time up to a quarter of this before each collective,
	 * and (one member's stream per execution) this long after it with
	 * the outputs garbled, to expose missing waits.  Atomic: a job with
	 * no local input may start before the first execution. */
	_Atomic int64_t debug_coll_delay_ns;
	/* Tests only: a worker process garbles the header of every output
	 * slot its plain tasks write (1: the length, 2: the kind, 3: the
	 * tensor rank, 4: where its data is), from CGR_TEST_CORRUPT_SLOTS in
	 * its environment:
	 * its readers must refuse, never trust, what they read. */
	int debug_corrupt;
#endif
	/* Set once by teardown; the driver thread's calls (and one blocked
	 * in another thread) read it. */
	_Atomic bool torn_down;
	int teardown_result;
	/* What each compiler pass took (compile.c; perf/scale reports it). */
	int64_t pass_ns[CGR__NPASSES];
	struct cgr_compiled *next; /* ctx's list */

	/* Communicators created for collectives, freed with the graph. */
	cgr_comm **comms;
	size_t ncomms;
	/* Every communicator the graph uses: teardown aborts them. */
	cgr_comm **used_comms;
	size_t nused_comms;

	/* Eager execution (drive/eager.c): each node's port, and the tasks in
	 * the compiler's global order (the graph's, kept while it lives). */
	unsigned *node_port;
	size_t nnodes;
	struct cgr__task **order;
	size_t norder;

	/* Workers whose programs run elsewhere: the shared segment (NULL:
	 * none), and the driver's copy of why one died (the error value of
	 * executions it left). */
	struct cgr__gseg *seg;
	char dead_msg[240];
	/* What a kind of worker keeps of this graph (proc/proc.c: the
	 * graph's id and its worker processes), under the address of its
	 * ops table; NULL keys: free.  Driver thread only. */
	struct cgr__kind_state {
		const void *key;
		void *p;
	} kind_state[2];

	/* The ports' big areas (chan.h) when the graph has no segment:
	 * address space reserved (mmap, MAP_NORESERVE), resident only where
	 * a value used it. */
	void *big_map;
	size_t big_len;
	/* Memory this graph allocated, freed in one place; and (while
	 * `scratch` is set: the compiler's working programs) memory freed
	 * once the plan is loaded. */
	struct cgr__alist {
		void **p;
		size_t *sizes;
		size_t n, cap;
	} allocs, scratch_allocs;
	bool scratch;
	/* Device memory (cudaMalloc) and the devices it is on. */
	void **dallocs;
	struct cgr__device **ddevs;
	size_t ndallocs, dallocs_cap;
};

/* The state kind key keeps of c, or NULL. */
static inline void *cgr__c_kind_state(const struct cgr_compiled *c,
				      const void *key)
{
	for (size_t i = 0; i < CGR__ARRAY_SIZE(c->kind_state); i++)
		if (c->kind_state[i].key == key)
			return c->kind_state[i].p;
	return NULL;
}

/* Keeps p as kind key's state of c (NULL: drops it): 0, or -ENOSPC. */
static inline int cgr__c_set_kind_state(struct cgr_compiled *c,
					const void *key, void *p)
{
	struct cgr__kind_state *free_slot = NULL;

	for (size_t i = 0; i < CGR__ARRAY_SIZE(c->kind_state); i++) {
		struct cgr__kind_state *k = &c->kind_state[i];
		if (k->key == key || (k->key == NULL && free_slot == NULL))
			free_slot = k;
		if (k->key == key)
			break;
	}
	if (free_slot == NULL)
		return -ENOSPC;
	free_slot->key = p != NULL ? key : NULL;
	free_slot->p = p;
	return 0;
}

/* Whether c was torn down (a driver call racing teardown sees it). */
static inline bool cgr__torn_down(const struct cgr_compiled *c)
{
	/* T0: pairs with teardown's release. */
	return atomic_load_explicit(&c->torn_down, memory_order_acquire);
}

/* Publication and arrival on c's channels (see base.h): only graphs with
 * process workers, only TSan builds. */
static inline void cgr__c_release(const struct cgr_compiled *c)
{
	if (c->seg != NULL)
		cgr__xproc_release(c->ctl);
}
static inline void cgr__c_acquire(const struct cgr_compiled *c)
{
	if (c->seg != NULL)
		cgr__xproc_acquire(c->ctl);
}

/* The doorbell worker w parks on while it runs c's program, and the
 * driver's. */
static inline struct cgr__bell *cgr__wbell(const struct cgr_compiled *c,
					   const cgr_worker *w)
{
	return &c->ctl->bells[w->index].b;
}
static inline struct cgr__bell *cgr__drv_bell(const struct cgr_compiled *c)
{
	return &c->ctl->drv.b;
}
/* The doorbell a channel to reader w (NULL: the driver) rings, and a
 * gated program's admissions: its own, or, for a reader on another host,
 * this process's link, which carries the message there (remote/). */
static inline struct cgr__bell *cgr__reader_bell(const struct cgr_compiled *c,
						 const cgr_worker *w)
{
	if (w != NULL ? w->ops->other_host : c->ctx->driver_far)
		return c->ctx->link_bell;
	return w != NULL ? cgr__wbell(c, w) : cgr__drv_bell(c);
}
/* Drops a reference (the driver's, or a worker's when it leaves the
 * program); the last one frees c, its streams and communicators. */
void cgr__compiled_unref(struct cgr_compiled *c);

#endif
