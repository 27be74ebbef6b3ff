/*
 * graph/worker.h: the worker (struct cgr_worker behind cgr.h's handle) and
 * the one interface to where it lives (struct cgr__worker_ops).
 *
 * Where a worker lives is its ops table, chosen once, by cgr_worker_create
 * from the registry of kinds (drive/worker.c): a thread of this process
 * (thread/thread.c: cgr__thread_ops) or a process of its own (proc/proc.c:
 * cgr__proc_ops); in a worker process, every worker of the driver's
 * context but its own is a stand-in that only names it (proc/agent.c).
 * The rest of cgr asks the table, never which kind a worker is
 * (tests/kinds.sh checks it): the graph builder and the compiler whether
 * its programs run in this address space (shared), the driver what it
 * cannot run, whether it died, and how a compiled graph is prepared,
 * started, stopped and waited for on the workers of each kind the graph
 * uses.  Another place for workers (another host, say) is one more table
 * in its own folder, and one line of the registry.
 *
 * Mailbox (thread workers): the driver publishes a program (prog), then
 * the command (cmd, release), then rings bell; the worker parks on bell
 * while idle or waiting for input, and every producer of something it
 * waits for rings it.  thread/thread.c runs its thread and lifecycle;
 * run/worker.c its program.
 *
 * Threads: fields marked driver belong to the driver thread; the rest is
 * written before the worker starts, or is _Atomic.
 */
#ifndef CGR_GRAPH_WORKER_H
#define CGR_GRAPH_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/base.h"
#include "base/futex.h"
#include "ctx/ctx.h"
#include "future/future.h"

struct cgr__prog;
struct cgr__reactor;
struct cgr__task;
struct cgr__worker_ops;

enum cgr__wcmd {
	CGR__WCMD_IDLE = 0,
	CGR__WCMD_RUN = 1,
	CGR__WCMD_STOP = 2,
	CGR__WCMD_STEP = 3, /* eager: run one operation (step_*) */
};

/* Where a worker thread is (cgr_worker.phase). */
enum cgr__wphase {
	CGR__WPH_NONE = 0,
	CGR__WPH_INIT = 1, /* in init */
	CGR__WPH_IDLE = 2, /* waiting for a command */
	CGR__WPH_RUN = 3,  /* running program `running` */
	CGR__WPH_STEP = 4, /* an eager step */
	CGR__WPH_FINI = 5, /* in fini */
};

enum { CGR__STEP_HELD = 1, CGR__STEP_ENDED = 2, CGR__STEP_LEFT = 3 };

struct cgr_worker {
	cgr_ctx *ctx;
	char *name;
	int cpu;
	int device; /* cgr_worker_params.device */
	/* The job rank whose process runs it (its context's own for a
	 * worker of this host; 0 without a job): a collective whose members
	 * have different ones spans hosts (compile/lower.c). */
	uint32_t host;
	cgr_worker_init_fn init;
	cgr_worker_fini_fn fini;
	void *arg;
	void *state;
	unsigned index;
	/* Where it lives (never NULL), and that kind's own state of it
	 * (opaque but to ops: a process worker's process, say). */
	const struct cgr__worker_ops *ops;
	void *impl;

	/* A thread worker's thread and mailbox (thread/thread.c; also the
	 * thread worker of a worker process). */
	pthread_t thread;
	_Atomic uint32_t cmd;
	struct cgr__prog *_Atomic prog;
	struct cgr__bell bell cgr__aligned;

	/* Completed once init ran (result: init's code); exited when the
	 * thread is about to return. */
	struct cgr_future life;
	uint32_t life_gen;
	struct cgr_future exited;
	uint32_t exit_gen;

	/* Eager execution (drive/eager.c): the operation of program step_prog
	 * to run once for execution step_seq; step_done completes with its
	 * result. */
	struct cgr__prog *step_prog;
	const void *step_op;
	uint64_t step_seq;
	struct cgr_future step_done;
	uint32_t step_gen;
	/* Who drops the step's reference to its compiled graph
	 * (drive/eager.c): STEP_HELD at the post, STEP_ENDED once the
	 * worker is done with it (set before step_done completes), or
	 * STEP_LEFT when the driver stopped waiting (a timeout): the worker
	 * drops it then, else the driver. */
	_Atomic uint32_t step_hold;

	/* What its thread is doing (run/worker.c), for teardown's report. */
	const char *_Atomic current_task;
	_Atomic uint64_t current_seq;

	/* A thread that ends without returning (a task calling pthread_exit,
	 * thread/thread.c): where it was (phase, program, reactor; its own
	 * thread only), and, once it ended, lost (release) after lost_msg. */
	int phase; /* enum cgr__wphase */
	struct cgr__prog *running;
	struct cgr__reactor *reactor;
	_Atomic uint32_t lost;
	char lost_msg[200];

	/* The live graph using us: set by a compile (graph_lock), cleared
	 * by its teardown, read by any driving thread. */
	struct cgr_compiled *_Atomic busy_with;
	bool destroyed;			/* driver */
	bool abandoned; /* driver: left behind (stuck), exits by itself */
	struct cgr_worker *next; /* ctx->workers */
};

/*
 * Where a worker lives: one const table per kind (each in its own folder),
 * every hook called on the driver thread.  A hook may be NULL where the
 * kind has nothing to do there (the comments say what NULL means).
 */
struct cgr__worker_ops {
	const char *name; /* "thread", "process": for messages */
	/* Its programs run in this address space: their task functions are
	 * called here, and this process makes their streams and NCCL
	 * communicators (compile/create.c).  Else they run elsewhere: a
	 * graph with such a worker keeps its shared state in a segment
	 * (compile/compile.c), its description names their task functions
	 * by export (graph/blob.c), and the compiler here makes only what
	 * the others reach of them. */
	bool shared;
	/* Its programs run on another host (remote/): what its channels
	 * carry there goes through this process's link (the doorbell a
	 * channel to it rings is the link's: compile/prog.h). */
	bool other_host;

	/* ---- the worker ------------------------------------------------ */

	/* Sets up and starts worker w (its identity already set from params
	 * p: ctx, name, index, cpu, device, init, fini, arg) and runs its
	 * init: 0, init's code, or a negative errno (the log says why).  On
	 * failure the caller frees w (free). */
	int (*create)(cgr_worker *w, const cgr_worker_params *p);
	/* Stops it (fini, then its end) by the deadline: 0, CGR_EPEERDEAD
	 * (it had died) or CGR_ESTUCK (not in time: abandoned or killed,
	 * the log says).  Once, and never while a live graph uses it. */
	int (*destroy)(cgr_worker *w, int64_t deadline);
	/* Frees what create kept (w->impl); w itself is the caller's.  With
	 * the context, or when create failed.  NULL: nothing kept. */
	void (*free)(cgr_worker *w);
	/* Whether w died (*why: how, as long as w lives).  NULL: never. */
	bool (*dead)(const cgr_worker *w, const char **why);
	/* Its process id (cgr_worker_pid).  NULL: 0, this process. */
	int (*pid)(const cgr_worker *w);

	/* ---- graphs ---------------------------------------------------- */

	/* What it cannot run: task t on w, compiled (eager false) or run
	 * eagerly (drive/eager.c): 0, or the error (g's errmsg says why).
	 * NULL: anything. */
	int (*check_task)(cgr_graph *g, const struct cgr__task *t,
			  const cgr_worker *w, bool eager);
	/* Compiled graph c on this kind's workers, each hook called once
	 * for each kind among c's programs (drive/: cgr__compiled_kinds).
	 * prepare: once compiled, before any program starts (g the graph):
	 * 0, or the error (g's errmsg; what it began is undone).  drop: a
	 * prepared c is given up (another kind's prepare failed).  start:
	 * its programs run from here.  stop: teardown, once the graph was
	 * told to stop (its stop flag, every doorbell rung): they are asked
	 * to leave by the deadline, not waited for.  wait: until they left,
	 * by the deadline: 0, or CGR_ESTUCK (one did not, the log says; it
	 * is abandoned or killed, and *held counts the references on c it
	 * keeps).  NULL: nothing to do. */
	int (*graph_prepare)(cgr_compiled *c, cgr_graph *g);
	void (*graph_drop)(cgr_compiled *c);
	void (*graph_start)(cgr_compiled *c);
	void (*graph_stop)(cgr_compiled *c, int64_t deadline);
	int (*graph_wait)(cgr_compiled *c, int64_t deadline, uint32_t *held);
	/* Eager execution (drive/eager.c): operation op of program p for
	 * execution seq handed to its worker (post), and its result by the
	 * deadline (wait: 0, CGR_EPEERDEAD if the worker died in it,
	 * -ETIMEDOUT).  NULL: not eagerly (check_task refuses). */
	void (*step_post)(struct cgr__prog *p, const void *op, uint64_t seq);
	int (*step_wait)(struct cgr__prog *p, int64_t deadline);

	/* cgr_ctx_destroy, once every worker was destroyed: what the kind
	 * keeps per context ends (the process workers' death monitor).
	 * Called for every kind of the registry.  NULL: nothing. */
	void (*ctx_release)(cgr_ctx *ctx);
};

/* Whether w died (*why: how). */
static inline bool cgr__worker_dead(const cgr_worker *w, const char **why)
{
	return w->ops->dead != NULL && w->ops->dead(w, why);
}

/*
 * A context whose workers serve another context's graphs (a worker
 * process's: proc/agent.c) keeps this state under &cgr__worker_host_key
 * (cgr__ctx_state; the key is thread/thread.c's).  A worker thread of it
 * that ends inside a task says which process it was in, and calls lost
 * once its graph was stopped (the agent ends the process there).
 */
struct cgr__worker_host {
	void (*lost)(cgr_worker *w);
};
extern const char cgr__worker_host_key;

#endif
