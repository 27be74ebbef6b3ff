/*
 * thread/thread.c: thread workers (cgr__thread_ops, see graph/worker.h).
 *
 * A worker is a thread with its own reactor that runs the user's init, then
 * waits on its mailbox for a program (a compiled graph's share of work), an
 * eager step, or the order to stop.  The driver never joins a thread
 * without a deadline: a worker that does not answer in time is abandoned,
 * keeping the context alive (a reference) until it exits by itself; so is
 * one stuck in a task past a teardown's deadline.  A thread that ends
 * inside a task (pthread_exit) is seen as it ends (thread_lost): its graph
 * stops with CGR_EPEERDEAD and what it held is released.
 *
 * Its programs run in this address space (shared): a graph starts them by
 * posting each to its worker's mailbox, and its teardown waits for each to
 * leave.  The worker thread of a worker process is one of these too; its
 * context says so (struct cgr__worker_host), and the process ends where
 * its thread does.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "run/run.h"

/* This file's ops table (at its end); the registry (drive/worker.c) names
 * it for CGR_WORKER_THREAD. */
extern const struct cgr__worker_ops cgr__thread_ops;

/* The key of struct cgr__worker_host (graph/worker.h). */
const char cgr__worker_host_key = 0;

/* A lookup that makes nothing: the host's state, if it said so. */
static int no_host(cgr_ctx *ctx, void **p)
{
	(void)ctx, (void)p;
	return -ENOENT;
}

/* ---- worker threads ----------------------------------------------- */

static bool cgr__cmd_ready(void *arg)
{
	cgr_worker *w = arg;
	return atomic_load_explicit(&w->cmd, memory_order_acquire) !=
	       CGR__WCMD_IDLE;
}

/* An eager step ends: its hold on its compiled graph is the driver's to
 * drop, unless the driver stopped waiting for it (drive/eager.c,
 * step_wait).  Before step_done completes. */
static void step_ended(cgr_worker *w, struct cgr_compiled *c)
{
	if (atomic_exchange_explicit(&w->step_hold, CGR__STEP_ENDED,
				     memory_order_acq_rel) == CGR__STEP_LEFT)
		cgr__compiled_unref(c);
}

/* An eager step (drive/eager.c): one operation, then idle again. */
static void worker_step(cgr_worker *w, struct cgr__reactor *r)
{
	uint32_t step = CGR__WCMD_STEP, gen = w->step_gen;
	struct cgr_compiled *c = w->step_prog->c;
	int ret = cgr__worker_step(w, w->step_prog, w->step_op, w->step_seq,
				   r);

	atomic_compare_exchange_strong(&w->cmd, &step, CGR__WCMD_IDLE);
	step_ended(w, c);
	/* E1: the step's writes; pairs with the driver's future wait. */
	cgr__future_complete(&w->step_done, gen, ret);
}

__thread const struct cgr_compiled *cgr__running_graph
	__attribute__((tls_model("initial-exec")));

/* ---- a thread that ends inside a task -------------------------------- */

/*
 * A task (or init, or fini) may end its worker's thread without
 * returning: pthread_exit (or a cancellation).  The thread's frames are
 * gone then, but not what it holds on the heap: the thread-specific value
 * of lost_key (the worker, while its thread runs cgr's code) has a
 * destructor, thread_lost, which glibc runs on that thread as it ends,
 * and which finishes what the frames would have done.
 */
static pthread_key_t lost_key;
static pthread_once_t lost_once = PTHREAD_ONCE_INIT;
static int lost_key_err;

static void thread_lost(void *arg);

static void lost_key_make(void)
{
	lost_key_err = pthread_key_create(&lost_key, thread_lost);
}

/* How w's thread ended, in w->lost_msg. */
static void lost_describe(cgr_worker *w)
{
	const char *t = atomic_load(&w->current_task);
	char where[120];

	if (atomic_load_explicit(&w->lost, memory_order_relaxed))
		return; /* then fini ended it too: the first reason stays */
	if (w->phase == CGR__WPH_INIT || w->phase == CGR__WPH_FINI)
		snprintf(where, sizeof(where), "inside its %s",
			 w->phase == CGR__WPH_INIT ? "init" : "fini");
	else if (t != NULL)
		snprintf(where, sizeof(where), "inside task %s (execution %llu)",
			 t, (unsigned long long)atomic_load(&w->current_seq));
	else
		snprintf(where, sizeof(where), "%s",
			 w->phase == CGR__WPH_RUN ? "while running a graph" :
						     "while idle");
	/* In a worker process (which ends then: its host's lost) the
	 * message goes to the driver, where the pid says which process. */
	if (w->impl != NULL)
		snprintf(w->lost_msg, sizeof(w->lost_msg),
			 "worker %s (pid %d) died: its thread exited %s",
			 w->name, (int)getpid(), where);
	else
		snprintf(w->lost_msg, sizeof(w->lost_msg),
			 "worker %s died: its thread exited %s", w->name,
			 where);
}

/* The end of w's thread after fini, whichever way: the reactor, then L2
 * (`exited`), the last touch of w. */
static void thread_end(cgr_worker *w, struct cgr__reactor *r)
{
	cgr_ctx *ctx = w->ctx;

	w->phase = CGR__WPH_NONE;
	if (r != NULL) {
		cgr__reactor_fini(r);
		cgr__free(&ctx->arena, r, sizeof(*r), 64);
	}
	/* L2: pairs with cgr_worker_destroy's wait. */
	cgr__future_complete(&w->exited, w->exit_gen, 0);
	cgr__ctx_put(ctx);
}

/* lost_key's destructor: w's thread is ending inside a task, init or
 * fini.  Its graph stops (every execution in flight a CGR_EPEERDEAD
 * error value saying so), it leaves its program, fini runs, and the
 * worker is dead to the driver (w->lost): compiling with it and
 * destroying it return CGR_EPEERDEAD. */
static void thread_lost(void *arg)
{
	cgr_worker *w = arg;
	cgr_ctx *ctx = w->ctx;
	const struct cgr__worker_host *host = w->impl;
	int phase = w->phase;

	lost_describe(w);
	/* L3: the message; pairs with the driver's acquire of lost. */
	atomic_store_explicit(&w->lost, 1, memory_order_release);
	cgr__err(&ctx->log, "%s; it can no longer be used", w->lost_msg);
	if (phase == CGR__WPH_INIT) {
		/* L1: cgr_worker_create fails with it (and joins). */
		cgr__future_complete(&w->life, w->life_gen, CGR_EPEERDEAD);
		if (w->reactor != NULL) {
			cgr__reactor_fini(w->reactor);
			cgr__free(&ctx->arena, w->reactor, sizeof(*w->reactor),
				  64);
		}
		cgr__ctx_put(ctx);
		return;
	}
	if (phase == CGR__WPH_RUN)
		cgr__graph_dead(w->running->c, w->index, w->lost_msg);
	if (phase != CGR__WPH_FINI && host != NULL)
		host->lost(w); /* a worker process ends here */
	if (phase == CGR__WPH_RUN) {
		cgr__prog_leave(w->running, w->reactor);
	} else if (phase == CGR__WPH_STEP) {
		uint32_t step = CGR__WCMD_STEP;
		atomic_compare_exchange_strong(&w->cmd, &step, CGR__WCMD_IDLE);
		step_ended(w, w->step_prog->c);
		/* E1: the eager driver sees the step fail. */
		cgr__future_complete(&w->step_done, w->step_gen,
				     CGR_EPEERDEAD);
	}
	cgr__running_graph = NULL; /* it left (or never ran) a graph */
	if (phase != CGR__WPH_FINI && w->fini != NULL) {
		/* Watched again: a fini that ends the thread too comes
		 * back here (phase FINI), and the end still comes. */
		w->phase = CGR__WPH_FINI;
		pthread_setspecific(lost_key, w);
		w->fini(w->arg, w->state);
		pthread_setspecific(lost_key, NULL);
	}
	thread_end(w, w->reactor);
}

/* ---- the thread ------------------------------------------------------ */

/* The reactor of w's thread, then w's init: init's code. */
static int thread_init(cgr_worker *w)
{
	cgr_ctx *ctx = w->ctx;
	struct cgr__reactor *r;

	if (w->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(w->cpu, &set);
		if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set))
			cgr__warn(&ctx->log, "worker %s: cannot pin to CPU %d",
				  w->name, w->cpu);
	}
	r = cgr__alloc(&ctx->arena, sizeof(*r), 64);
	if (r == NULL)
		return -ENOMEM;
	cgr__reactor_init(r, (ctx->flags & CGR_CTX_NO_IO_URING) ?
				     CGR__REACTOR_NO_URING :
				     0);
	w->reactor = r;
	/* Said once per context: at once if io_uring is refused here, or
	 * when a later step fails (io_uring_enter, a request). */
	cgr__reactor_set_log(r, &ctx->log, &ctx->uring_fallback_logged);
	return w->init != NULL ? w->init(w->arg, &w->state) : 0;
}

/* Commands until STOP. */
static void thread_loop(cgr_worker *w, struct cgr__reactor *r)
{
	for (;;) {
		uint32_t cmd;

		w->phase = CGR__WPH_IDLE;
		cgr__reactor_wait(r, &w->bell, cgr__cmd_ready, w, NULL,
				  CGR_WAIT_BLOCK, 0, CGR_FOREVER);
		cmd = atomic_load_explicit(&w->cmd, memory_order_acquire);
		if (cmd == CGR__WCMD_STOP)
			break;
		if (cmd == CGR__WCMD_RUN) {
			struct cgr__prog *p = atomic_load_explicit(
				&w->prog, memory_order_acquire);
			uint32_t run = CGR__WCMD_RUN;
			/* Back to idle first, so a STOP sent meanwhile
			 * stays. */
			atomic_compare_exchange_strong(&w->cmd, &run,
						       CGR__WCMD_IDLE);
			w->running = p;
			w->phase = CGR__WPH_RUN;
			cgr__running_graph = p->c;
			cgr__worker_run(w, p, r);
			cgr__running_graph = NULL;
			w->running = NULL;
		}
		if (cmd == CGR__WCMD_STEP) {
			w->phase = CGR__WPH_STEP;
			cgr__running_graph = w->step_prog->c;
			worker_step(w, r);
			cgr__running_graph = NULL;
		}
	}
}

static void *cgr__worker_main(void *arg)
{
	cgr_worker *w = arg;
	cgr_ctx *ctx = w->ctx;
	char tname[16];
	int ret;

	snprintf(tname, sizeof(tname), "cgr:%s", w->name);
	pthread_setname_np(pthread_self(), tname);
	w->phase = CGR__WPH_INIT;
	/* Watched from here: ending inside a callback runs thread_lost. */
	pthread_setspecific(lost_key, w);
	ret = thread_init(w);
	/* L1: publishes init's result and state; pairs with the driver's
	 * future wait in cgr_worker_create. */
	cgr__future_complete(&w->life, w->life_gen, ret);
	if (ret != 0) {
		pthread_setspecific(lost_key, NULL);
		if (w->reactor != NULL) {
			cgr__reactor_fini(w->reactor);
			cgr__free(&ctx->arena, w->reactor, sizeof(*w->reactor),
				  64);
		}
		cgr__ctx_put(ctx);
		return NULL;
	}
	thread_loop(w, w->reactor);
	if (w->fini != NULL) {
		w->phase = CGR__WPH_FINI;
		w->fini(w->arg, w->state);
	}
	pthread_setspecific(lost_key, NULL);
	thread_end(w, w->reactor);
	return NULL;
}

/* ---- the worker (ops) ------------------------------------------------ */

/* Starts w's thread and waits for its init. */
static int thread_create(cgr_worker *w, const cgr_worker_params *p)
{
	cgr_ctx *ctx = w->ctx;
	void *host = NULL;
	int ret;

	(void)p;
	/* A worker process's context hosts it (proc/agent.c). */
	if (cgr__ctx_state(ctx, &cgr__worker_host_key, no_host, NULL,
			   &host) == 0)
		w->impl = host;
	atomic_init(&w->cmd, CGR__WCMD_IDLE);
	atomic_init(&w->prog, NULL);
	atomic_init(&w->lost, 0);
	cgr__bell_init(&w->bell);
	cgr__future_init(&w->life);
	w->life_gen = cgr__future_arm(&w->life);
	cgr__future_init(&w->exited);
	w->exit_gen = cgr__future_arm(&w->exited);
	cgr__future_init(&w->step_done);
	pthread_once(&lost_once, lost_key_make);
	if (lost_key_err != 0)
		return -lost_key_err;
	/* The thread holds a context reference until it exits. */
	atomic_fetch_add(&ctx->refs, 1);
	ret = -pthread_create(&w->thread, NULL, cgr__worker_main, w);
	if (ret != 0) {
		atomic_fetch_sub(&ctx->refs, 1);
		return ret == -EAGAIN ? -EAGAIN : ret;
	}
	ret = cgr__future_wait(&w->life, w->life_gen, CGR_FOREVER, NULL,
			       CGR_WAIT_BLOCK, 0);
	if (ret != 0)
		pthread_join(w->thread, NULL);
	return ret;
}

/* STOP, then its thread's end by the deadline (else it is abandoned). */
static int thread_destroy(cgr_worker *w, int64_t deadline)
{
	int ret;

	atomic_store_explicit(&w->cmd, CGR__WCMD_STOP, memory_order_release);
	cgr__bell_ring_force(&w->bell);
	ret = cgr__future_wait(&w->exited, w->exit_gen, deadline, NULL,
			       CGR_WAIT_BLOCK, 0);
	if (ret == -ETIMEDOUT) {
		const char *t = atomic_load(&w->current_task);
		cgr__err(&w->ctx->log,
			 "worker %s did not stop within the deadline (in task "
			 "%s); abandoned",
			 w->name, t != NULL ? t : "(none)");
		w->abandoned = true;
		pthread_detach(w->thread);
		return CGR_ESTUCK;
	}
	pthread_join(w->thread, NULL);
	/* L3: its thread ended inside a task, init or fini. */
	return atomic_load_explicit(&w->lost, memory_order_acquire) ?
		       CGR_EPEERDEAD :
		       0;
}

/* Its thread ended inside a task, init or fini. */
static bool thread_dead(const cgr_worker *w, const char **why)
{
	/* L3: pairs with thread_lost's release. */
	if (!atomic_load_explicit(&w->lost, memory_order_acquire))
		return false;
	*why = w->lost_msg;
	return true;
}

/* ---- graphs (ops) ---------------------------------------------------- */

/* Hands program p to idle worker w and wakes it. */
static void worker_post(cgr_worker *w, struct cgr__prog *p)
{
	atomic_store_explicit(&w->prog, p, memory_order_relaxed);
	/* P1: publishes the program; pairs with the worker's acquire of
	 * cmd. */
	atomic_store_explicit(&w->cmd, CGR__WCMD_RUN, memory_order_release);
	cgr__bell_ring_force(&w->bell);
}

/* Each thread worker's program posted; each holds a reference on c while
 * it runs it. */
static void thread_graph_start(cgr_compiled *c)
{
	for (size_t i = 0; i < c->nprogs; i++) {
		cgr_worker *w = c->progs[i].w;
		if (w->ops != &cgr__thread_ops)
			continue;
		atomic_fetch_add(&c->refs, 1);
		w->busy_with = c;
		worker_post(w, &c->progs[i]);
	}
}

/* Every thread worker's program left (W1), by the deadline; a worker
 * stuck in a task then is abandoned. */
static int thread_graph_wait(cgr_compiled *c, int64_t deadline,
			     uint32_t *held)
{
	int result = 0;

	for (size_t i = 0; i < c->nprogs; i++) {
		struct cgr__prog *p = &c->progs[i];
		cgr_worker *w = p->w;
		int ret;
		if (w->ops != &cgr__thread_ops)
			continue;
		ret = cgr__future_wait(&p->left, p->left_gen, deadline, NULL,
				       CGR_WAIT_BLOCK, 0);
		if (ret == -ETIMEDOUT &&
		    atomic_load(&w->current_task) == NULL) {
			/* Not in a task: finishing its streams' work
			 * (cgr__prog_leave).  It leaves by itself and then
			 * takes the next graph posted. */
			cgr__warn(&c->ctx->log,
				  "teardown: worker %s is still finishing its "
				  "streams' work past the deadline; it leaves "
				  "when that ends",
				  w->name);
			w->busy_with = NULL;
			(*held)++;
			continue;
		}
		if (ret == -ETIMEDOUT) {
			const char *t = atomic_load(&w->current_task);
			cgr__err(&c->ctx->log,
				 "teardown: worker %s is stuck in task %s "
				 "(execution %llu) past the deadline; it is "
				 "abandoned and can no longer be used",
				 w->name, t != NULL ? t : "(none)",
				 (unsigned long long)atomic_load(
					 &w->current_seq));
			/* It exits by itself when the task returns: the
			 * program's reference keeps what it touches. */
			w->abandoned = true;
			atomic_store_explicit(&w->cmd, CGR__WCMD_STOP,
					      memory_order_release);
			pthread_detach(w->thread);
			result = CGR_ESTUCK;
			(*held)++;
			continue;
		}
		w->busy_with = NULL;
	}
	return result;
}

/* An eager step (drive/eager.c): operation op of p for execution seq. */
static void thread_step_post(struct cgr__prog *p, const void *op,
			     uint64_t seq)
{
	cgr_worker *w = p->w;

	w->step_prog = p;
	w->step_op = op;
	w->step_seq = seq;
	w->step_gen = cgr__future_arm(&w->step_done);
	/* E0: the step's fields; pairs with the worker's acquire of cmd. */
	atomic_store_explicit(&w->cmd, CGR__WCMD_STEP, memory_order_release);
	cgr__bell_ring_force(&w->bell);
}

static int thread_step_wait(struct cgr__prog *p, int64_t deadline)
{
	cgr_worker *w = p->w;

	return cgr__future_wait(&w->step_done, w->step_gen, deadline, NULL,
				CGR_WAIT_BLOCK, 0);
}

const struct cgr__worker_ops cgr__thread_ops = {
	.name = "thread",
	.shared = true,
	.create = thread_create,
	.destroy = thread_destroy,
	.dead = thread_dead,
	.graph_start = thread_graph_start,
	.graph_wait = thread_graph_wait,
	.step_post = thread_step_post,
	.step_wait = thread_step_wait,
};
