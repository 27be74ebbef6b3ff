/*
 * run/run.h: running one worker's share of a compiled graph, whoever
 * hosts the worker: its program loop (worker.c), a member's share of a
 * collective (coll.c), the stream jobs of overlap (stream.c), the NCCL
 * queue (launch.c), device failures (failure.c); and the test builds'
 * fault injection (fault.c).  Also what the driver (drive/) and the
 * worker hosts (thread/, proc/) call of each other.
 */
#ifndef CGR_RUN_H
#define CGR_RUN_H

#include "compile/prog.h"

/* Starts compiled graph c's programs on the workers of this process and
 * lists it with ctx (drive/graph_compile.c). */
void cgr__compiled_start(cgr_ctx *ctx, cgr_compiled *c);

/* The compiled graph whose program (or eager step) the calling thread
 * runs, NULL on any other thread (thread/thread.c): the driver's calls
 * refuse to be made from a task of their own graph. */
extern __thread const struct cgr_compiled *cgr__running_graph
	__attribute__((tls_model("initial-exec")));

/* Runs program p on worker w's thread (reactor r) until the graph stops
 * or a stream refuses work; then leaves it (W1: p->left completes). */
void cgr__worker_run(cgr_worker *w, struct cgr__prog *p,
		     struct cgr__reactor *r);

/* Worker p->w leaves program p (run's end; a thread ending inside a task
 * calls it too): held jobs to their streams, streams synchronized, the
 * NCCL queue dropped, then W1 (p->left) and its reference on the graph
 * dropped. */
void cgr__prog_leave(struct cgr__prog *p, struct cgr__reactor *r);

/* Eager (drive/eager.c): runs operation op of program p once, for execution
 * seq, on w's thread (its reactor r): a COMPUTE or a COLL. */
int cgr__worker_step(cgr_worker *w, struct cgr__prog *p, const void *op,
		     uint64_t seq, struct cgr__reactor *r);

/* Runs plain task tc of execution seq: loads its inputs, calls it (or
 * forwards an error value among the inputs), stores its outputs. */
void cgr__task_run(struct cgr_task_ctx *tc, uint64_t seq);

/* Runs member cr's share of a CPU communicator's collective for
 * execution seq, on its worker's thread (r: its reactor) or a stream's
 * executor (r NULL).  Returns 0, or -ECANCELED when teardown cut its
 * agreement short (its outputs are error values). */
int cgr__coll_run(struct cgr__coll_rt *cr, uint64_t seq,
		  struct cgr__reactor *r);

/* The phases of a collective (coll.c), for the NCCL queue: describe
 * this member's inputs, whether this execution agrees (static shapes
 * agree once), the data's move after the agreement (on NCCL: enqueued,
 * then marked by the slot's event), a test of the slot's device
 * operation (1 done: its outputs hold error values if it failed), and
 * the late verdict of static shapes on NCCL over every member's records
 * of the execution (all: n). */
void cgr__coll_describe(struct cgr__coll_rt *cr, uint64_t seq);
bool cgr__coll_needs_agree(const struct cgr__coll_rt *cr);
void cgr__coll_move(struct cgr__coll_rt *cr, uint64_t seq, bool agreed);
void cgr__coll_device_mark(struct cgr__coll_rt *cr, uint64_t seq);
int cgr__coll_device_test(struct cgr__coll_rt *cr, uint64_t seq);
void cgr__coll_late_verdict(struct cgr__coll_rt *cr, uint64_t seq,
			    const struct cgr__agree *all);
/* NCCL on a communicator across hosts (far): every execution's records
 * cross first, posted on stream s (*xf their exchange's future: 0, or the
 * post failed and the outputs hold error values); once it is done, the
 * verdict (false: the outputs hold error values, nothing to move). */
int cgr__coll_far_post(struct cgr__coll_rt *cr, uint64_t seq, cgr_stream *s,
		       cgr_future **xf);
bool cgr__coll_far_verdict(struct cgr__coll_rt *cr, uint64_t seq,
			   cgr_future *xf);

/* NCCL collectives (launch.c): the worker's queue.  issue (the thread,
 * at the COLL) describes and queues; progress (the reactor's poll hook,
 * and between operations) advances it and says whether jobs are
 * pending; drain drops what is left when the worker leaves. */
int cgr__launch_issue(struct cgr__coll_rt *cr, uint64_t seq,
		      struct cgr__reactor *r);
bool cgr__launch_progress(void *arg);
void cgr__launch_drain(struct cgr__prog *p);

/* Overlap (stream.c): issues collective cr of execution seq to its
 * communication stream; runs stream task tc (its function now, its work
 * and its fused WRITE on the compute stream; waits for it unless async);
 * waits on w's reactor until *done (a stream job's count) reaches want.
 * Each returns 0 or negative when the graph stops or a stream refuses. */
int cgr__coll_issue(struct cgr__coll_rt *cr, uint64_t seq,
		    struct cgr__reactor *r);
int cgr__task_issue(struct cgr_task_ctx *tc, uint64_t seq,
		    struct cgr__reactor *r);
int cgr__wait_done(struct cgr_compiled *c, cgr_worker *w,
		   struct cgr__reactor *r, _Atomic uint64_t *done,
		   uint64_t want);
/* Inline runs (stream.c, cgr_compile_params.inline_ns): held_run runs
 * collective cr's job of execution seq on the thread if it was held for
 * it, after the held jobs before it (as its stream would): at its RUN,
 * and before a WAIT for it.  flush hands every held job of stream class
 * s to its stream (an SWAIT, and the worker leaving, need that). */
void cgr__held_run(struct cgr__coll_rt *cr, uint64_t seq);
int cgr__held_flush(struct cgr__prog *p, int s);

/* Stream task tc's outputs of execution seq are in: its fused WRITE,
 * done (its stream's job, or failure.c). */
void cgr__task_job_finish(struct cgr_task_ctx *tc, uint64_t seq);

/* A worker whose device failed (failure.c): device_failed marks program
 * p dead (once; err and what say why), completes its enqueued stream
 * jobs with error values, aborts its NCCL communicators and stops the
 * driver's admissions; task_dead ends a device or stream task of a dead
 * worker in error values; check_device marks p dead if its device's
 * sticky error is set; poll is the reactor's hook (the NCCL queue, and a
 * watch on outstanding stream work): whether work is pending. */
void cgr__prog_device_failed(struct cgr__prog *p, int err, const char *what);
/* Worker `index` of graph c died (its process, or its thread; msg says
 * how): the graph stops, the driver's executions in flight become
 * CGR_EPEERDEAD error values with msg, every runner is woken and c's
 * communicators abort.  Any thread, any process mapping c; the first
 * report wins (whether this one did). */
bool cgr__graph_dead(struct cgr_compiled *c, unsigned index, const char *msg);
/* The same with the code its executions' error values carry
 * (CGR_EHOSTLOST: a host of the job was lost, remote/). */
bool cgr__graph_lost(struct cgr_compiled *c, unsigned index, int code,
		     const char *msg);
void cgr__task_dead(struct cgr_task_ctx *tc, uint64_t seq);
void cgr__prog_check_device(struct cgr__prog *p);
bool cgr__prog_poll(void *arg);

/* Trace records (worker.c): an operation of the thread, a job of stream
 * s.  Each stops once trace_cap records were made. */
void cgr__trace_record(struct cgr__prog *p, const struct cgr__op *op,
		       uint64_t seq, int64_t t0);
void cgr__strace_record(struct cgr__prog *p, int s,
			const struct cgr__coll_rt *cr,
			const struct cgr_task_ctx *tc, uint64_t seq,
			int64_t t0);

/*
 * Fault injection for the tests (--enable-fault-injection; see
 * compile/prog.h, debug_coll_delay_ns): a collective's job sleeps a
 * little before it runs, and in some executions one member's stream
 * finishes late with its outputs garbled in the meantime.  Release builds
 * compile none of it.
 */
#ifdef CGR_FAULT_INJECTION
/* Whether the delays are on (jobs then always go to their streams, so
 * that a missing wait shows). */
static inline bool cgr__fault_on(const struct cgr_compiled *c)
{
	return atomic_load_explicit(&c->debug_coll_delay_ns,
				    memory_order_relaxed) > 0;
}
void cgr__fault_coll_before(struct cgr__coll_rt *cr, uint64_t seq);
void cgr__fault_coll_after(struct cgr__coll_rt *cr, uint64_t seq);
void cgr__fault_task_after(struct cgr_task_ctx *tc, uint64_t seq);
void cgr__fault_slot_after(struct cgr_task_ctx *tc, uint64_t seq);
#else
static inline bool cgr__fault_on(const struct cgr_compiled *c)
{
	(void)c;
	return false;
}
static inline void cgr__fault_coll_before(struct cgr__coll_rt *cr,
					  uint64_t seq)
{
	(void)cr, (void)seq;
}
static inline void cgr__fault_coll_after(struct cgr__coll_rt *cr,
					 uint64_t seq)
{
	(void)cr, (void)seq;
}
static inline void cgr__fault_task_after(struct cgr_task_ctx *tc,
					 uint64_t seq)
{
	(void)tc, (void)seq;
}
static inline void cgr__fault_slot_after(struct cgr_task_ctx *tc,
					 uint64_t seq)
{
	(void)tc, (void)seq;
}
#endif

#endif
