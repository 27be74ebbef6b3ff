/*
 * thread/thread.c: worker threads.
 *
 * A worker is a thread with its own reactor that runs the user's init, then
 * waits on its mailbox for a program (a compiled graph's share of work) or
 * for the order to stop.  The driver never joins a thread without a
 * deadline: a worker that does not answer in time is abandoned, keeping the
 * context alive (a reference) until it exits by itself.  A thread that
 * ends inside a task (pthread_exit) is seen as it ends (thread_lost): its
 * graph stops with CGR_EPEERDEAD and what it held is released.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proc/proc.h"

static void worker_free(cgr_ctx *ctx, cgr_worker *w);

/* The context's hook: workers live as long as the context (an abandoned
 * thread uses its struct until it exits). */
static void release_workers(cgr_ctx *ctx)
{
	cgr_worker *w, *next;

	for (w = ctx->workers; w != NULL; w = next) {
		next = w->next;
		worker_free(ctx, w);
	}
}

static int worker_device(const struct cgr_worker *w)
{
	return w->device;
}

/* ---- worker threads ----------------------------------------------- */

static bool cgr__cmd_ready(void *arg)
{
	cgr_worker *w = arg;
	return atomic_load_explicit(&w->cmd, memory_order_acquire) !=
	       CGR__WCMD_IDLE;
}

/* An eager step (drive/eager.c): one operation, then idle again. */
static void worker_step(cgr_worker *w, struct cgr__reactor *r)
{
	uint32_t step = CGR__WCMD_STEP;
	int ret = cgr__worker_step(w, w->step_prog, w->step_op, w->step_seq,
				   r);

	atomic_compare_exchange_strong(&w->cmd, &step, CGR__WCMD_IDLE);
	/* E1: the step's writes; pairs with the driver's future wait. */
	cgr__future_complete(&w->step_done, w->step_gen, ret);
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
	/* In a worker process (which ends then: worker_lost) the message
	 * goes to the driver, where the pid says which process. */
	if (w->ctx->worker_lost != NULL)
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
	if (phase != CGR__WPH_FINI && ctx->worker_lost != NULL)
		ctx->worker_lost(ctx, w); /* a worker process ends here */
	if (phase == CGR__WPH_RUN) {
		cgr__prog_leave(w->running, w->reactor);
	} else if (phase == CGR__WPH_STEP) {
		uint32_t step = CGR__WCMD_STEP;
		atomic_compare_exchange_strong(&w->cmd, &step, CGR__WCMD_IDLE);
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

/* A process worker's exports: its init/fini by name, its arg bytes. */
static int proc_params(cgr_ctx *ctx, cgr_worker *w,
		       const cgr_worker_params *p)
{
	const cgr_export *e = ctx->exports;

	if (p->arg != NULL || p->arg_len > CGR__PMSG_MAX_ARG ||
	    (p->arg_len > 0 && p->arg_data == NULL) ||
	    (p->device != CGR_DEVICE_NONE && p->device != CGR_DEVICE_SIM)) {
		cgr__err(&ctx->log,
			 "worker %s: a process worker takes arg_data (at most "
			 "%u bytes), not arg, and no CUDA device (yet)",
			 w->name, CGR__PMSG_MAX_ARG);
		return -EINVAL;
	}
	while (e != NULL && e->name != NULL &&
	       (p->init != NULL || p->fini != NULL) &&
	       (e->init != p->init || e->fini != p->fini))
		e++;
	if (p->init == NULL && p->fini == NULL)
		e = NULL;
	else if (e == NULL || e->name == NULL) {
		cgr__err(&ctx->log,
			 "worker %s: its init/fini are not in "
			 "cgr_ctx_params.exports (a process worker finds them "
			 "by name)",
			 w->name);
		return -EINVAL;
	}
	if (p->join_addr != NULL &&
	    (p->join_addr[0] == 0 || strlen(p->join_addr) >= 64 ||
	     p->join_timeout_ns < 0)) {
		cgr__err(&ctx->log, "worker %s: join_addr must be a name of 1 "
				    "to 63 bytes",
			 w->name);
		return -EINVAL;
	}
	if (p->join_addr != NULL &&
	    (w->join_addr = cgr__strdup(&ctx->arena, p->join_addr)) == NULL)
		return -ENOMEM;
	w->join_timeout_ns = p->join_timeout_ns > 0 ? p->join_timeout_ns :
						      30 * 1000000000ll;
	w->init_name = cgr__strdup(&ctx->arena, e != NULL ? e->name : "");
	w->arg_len = p->arg_len;
	if (p->arg_len > 0 &&
	    (w->arg_data = cgr__alloc(&ctx->arena, p->arg_len, 16)) != NULL)
		memcpy(w->arg_data, p->arg_data, p->arg_len);
	return w->init_name == NULL || (p->arg_len && w->arg_data == NULL) ?
		       -ENOMEM :
		       0;
}

/* Starts w's thread and waits for its init. */
static int thread_start(cgr_ctx *ctx, cgr_worker *w)
{
	int ret;

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

static void worker_free(cgr_ctx *ctx, cgr_worker *w)
{
	cgr__proc_free(w);
	cgr__strfree(&ctx->arena, w->init_name);
	cgr__strfree(&ctx->arena, w->join_addr);
	cgr__free(&ctx->arena, w->arg_data, w->arg_len, 16);
	cgr__strfree(&ctx->arena, w->name);
	cgr__free(&ctx->arena, w, sizeof(*w), 64);
}

static cgr_worker *worker_new(cgr_ctx *ctx, const cgr_worker_params *prm)
{
	cgr_worker *w = cgr__alloc(&ctx->arena, sizeof(*w), 64);
	char buf[32];

	if (w == NULL)
		return NULL;
	snprintf(buf, sizeof(buf), "worker%u", ctx->nworkers);
	w->name = cgr__strdup(&ctx->arena, prm->name ? prm->name : buf);
	if (w->name == NULL) {
		cgr__free(&ctx->arena, w, sizeof(*w), 64);
		return NULL;
	}
	w->ctx = ctx;
	w->kind = prm->kind;
	w->remote = prm->kind == CGR_WORKER_PROCESS;
	w->cpu = prm->cpu;
	w->device = prm->device;
	w->init = prm->init;
	w->fini = prm->fini;
	w->arg = prm->arg;
	w->index = ctx->nworkers;
	atomic_init(&w->cmd, CGR__WCMD_IDLE);
	atomic_init(&w->prog, NULL);
	atomic_init(&w->current_task, NULL);
	atomic_init(&w->current_seq, 0);
	atomic_init(&w->lost, 0);
	cgr__bell_init(&w->bell);
	cgr__future_init(&w->life);
	w->life_gen = cgr__future_arm(&w->life);
	cgr__future_init(&w->exited);
	w->exit_gen = cgr__future_arm(&w->exited);
	cgr__future_init(&w->step_done);
	return w;
}

int cgr_worker_create(cgr_ctx *ctx, const cgr_worker_params *p,
		      cgr_worker **out)
{
	cgr_worker_params prm;
	cgr_worker *w;
	int ret;

	if (ctx == NULL || out == NULL || ctx->destroyed ||
	    (p != NULL && p->size < sizeof(size_t)))
		return -EINVAL;
	CGR__PARAMS_COPY(prm, p, ((cgr_worker_params)CGR_WORKER_PARAMS_INIT));
	if ((prm.kind != CGR_WORKER_THREAD && prm.kind != CGR_WORKER_PROCESS) ||
	    prm.cpu < -1 ||
	    (prm.device < 0 && prm.device != CGR_DEVICE_NONE &&
	     prm.device != CGR_DEVICE_SIM))
		return -EINVAL;
	if (prm.device >= 0) {
		/* The device must exist (-ENODEV; the log says why). */
		cgr_stream *probe;
		ret = cgr_stream_create(ctx, prm.device, 0, &probe);
		if (ret < 0)
			return ret;
		cgr_stream_destroy(probe);
	}
	if ((w = worker_new(ctx, &prm)) == NULL)
		return -ENOMEM;
	if (w->remote) {
		ret = proc_params(ctx, w, &prm);
		if (ret == 0)
			ret = cgr__proc_start(w, prm.cpu);
	} else {
		ret = thread_start(ctx, w);
	}
	if (ret != 0) {
		worker_free(ctx, w);
		return ret;
	}
	w->next = ctx->workers;
	ctx->workers = w;
	ctx->release_workers = release_workers;
	ctx->worker_device = worker_device;
	ctx->nworkers++;
	*out = w;
	return 0;
}

int cgr_worker_destroy(cgr_worker *w, int64_t timeout_ns)
{
	int64_t deadline;
	int ret;

	if (w == NULL)
		return -EINVAL;
	if (w->destroyed)
		return 0;
	if (w->abandoned) {
		/* Already told to stop and detached: it exits by itself. */
		w->destroyed = true;
		return 0;
	}
	if (w->busy_with != NULL && !cgr__torn_down(w->busy_with))
		return -EBUSY;
	w->destroyed = true;
	if (timeout_ns < 0)
		timeout_ns = 1000000000;
	deadline = cgr__deadline(timeout_ns);
	if (w->kind == CGR_WORKER_PROCESS)
		return cgr__proc_stop(w, deadline);
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

const char *cgr_worker_name(const cgr_worker *w)
{
	return w != NULL ? w->name : NULL;
}

int cgr_worker_pid(const cgr_worker *w)
{
	return w != NULL && w->proc != NULL ? w->proc->pid : 0;
}
