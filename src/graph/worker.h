/*
 * graph/worker.h: the worker (struct cgr_worker behind cgr.h's handle): a
 * thread with its own reactor that runs one compiled graph's program at a
 * time.  The graph builder and the compiler read its identity and state;
 * thread/thread.c runs its thread and lifecycle; run/worker.c its program.
 *
 * Mailbox: the driver publishes a program (prog), then the command (cmd,
 * release), then rings bell; the worker parks on bell while idle or
 * waiting for input, and every producer of something it waits for rings
 * it.
 *
 * A process worker (proc/proc.c) has no thread here: its program runs in
 * its own process, which the driver reaches over a socket (proc).
 *
 * Threads: fields marked driver belong to the driver thread; the rest is
 * written before the thread starts, or is _Atomic.
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
struct cgr__proc;
struct cgr__reactor;

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
	int kind; /* enum cgr_worker_kind */
	/* Its programs run in another process: in the driver, a process
	 * worker (proc: its process, proc/proc.c); in a worker process,
	 * every worker but its own (a stand-in that only names it). */
	bool remote;
	struct cgr__proc *proc;
	/* A process worker's exported init/fini (its name; "" none) and
	 * arg_data copy. */
	char *init_name;
	void *arg_data;
	size_t arg_len;
	char *join_addr; /* started by something else: where it joins */
	int64_t join_timeout_ns;

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

	/* What the thread is doing, for teardown's report. */
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

	struct cgr_compiled *busy_with; /* driver: live graph using us */
	bool destroyed;			/* driver */
	bool abandoned;			/* driver: left stuck in a task */
	struct cgr_worker *next;	/* ctx->workers */
};

/* Driver: hands program p to idle worker w and wakes it. */
static inline void cgr__worker_post(struct cgr_worker *w, struct cgr__prog *p)
{
	atomic_store_explicit(&w->prog, p, memory_order_relaxed);
	/* P1: publishes the program; pairs with the worker's acquire of
	 * cmd. */
	atomic_store_explicit(&w->cmd, CGR__WCMD_RUN, memory_order_release);
	cgr__bell_ring_force(&w->bell);
}

#endif
