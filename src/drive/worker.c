/*
 * drive/worker.c: cgr_worker_create, cgr_worker_destroy, cgr_worker_name and
 * cgr_worker_pid, and the registry of kinds: the one place that maps
 * cgr_worker_params.kind to where a worker lives (its ops table,
 * graph/worker.h; thread/ and proc/ implement them).  Nothing else outside
 * those two folders names a kind (tests/kinds.sh).  A new kind is one
 * line here.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "drive/drive.h"

/* Each kind's table, in its own folder; only this file names them. */
extern const struct cgr__worker_ops cgr__thread_ops; /* thread/thread.c */
extern const struct cgr__worker_ops cgr__proc_ops;   /* proc/proc.c */
extern const struct cgr__worker_ops cgr__remote_ops; /* remote/remote.c */

/* The registry: cgr_worker_params.kind -> where the worker lives. */
static const struct cgr__worker_ops *const kinds[] = {
	[CGR_WORKER_THREAD] = &cgr__thread_ops,
	[CGR_WORKER_PROCESS] = &cgr__proc_ops,
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

/* Where a worker of params p lives: a thread worker on another rank of
 * the context's job is remote (NULL: p makes no sense). */
static const struct cgr__worker_ops *kind_of(const cgr_ctx *ctx,
					     const cgr_worker_params *p)
{
	int me = ctx->job != NULL ? cgr_job_rank(ctx->job) : 0;
	int size = ctx->job != NULL ? cgr_job_size(ctx->job) : 1;

	if (p->kind < 0 || (size_t)p->kind >= NKINDS || p->rank < -1 ||
	    p->rank >= size)
		return NULL;
	if (p->rank == -1 || p->rank == me)
		return kinds[p->kind];
	return p->kind == CGR_WORKER_THREAD ? &cgr__remote_ops : NULL;
}

static void worker_free(cgr_ctx *ctx, cgr_worker *w)
{
	if (w->ops->free != NULL)
		w->ops->free(w);
	cgr__strfree(&ctx->arena, w->name);
	cgr__free(&ctx->arena, w, sizeof(*w), 64);
}

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

static int worker_unfit(cgr_ctx *ctx, const struct cgr_worker *w,
			bool shared, const char **why)
{
	if (w->ctx != ctx || w->destroyed) {
		*why = w->ctx != ctx ? "another context's worker" :
				       "a destroyed worker";
		return -EINVAL;
	}
	/* A caller's communicator lives in this process: a task in
	 * another could never reach it (cgr_task_comm). */
	if (!shared && w->ops == &cgr__proc_ops) {
		*why = "a process worker (a communicator of the caller's is "
		       "for thread workers)";
		return -ENOTSUP;
	}
	return 0;
}

/* A worker's identity, where it lives (ops), not started yet. */
static cgr_worker *worker_new(cgr_ctx *ctx, const cgr_worker_params *prm,
			      const struct cgr__worker_ops *ops)
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
	w->ops = ops;
	w->cpu = prm->cpu;
	w->device = prm->device;
	w->host = ctx->host;
	w->init = prm->init;
	w->fini = prm->fini;
	w->arg = prm->arg;
	w->index = ctx->nworkers;
	atomic_init(&w->current_task, NULL);
	atomic_init(&w->current_seq, 0);
	return w;
}

int cgr_worker_create(cgr_ctx *ctx, const cgr_worker_params *p,
		      cgr_worker **out)
{
	const struct cgr__worker_ops *ops;
	cgr_worker_params prm;
	cgr_worker *w;
	int ret;

	if (ctx == NULL || out == NULL || ctx->destroyed ||
	    (p != NULL && p->size < sizeof(size_t)))
		return -EINVAL;
	CGR__PARAMS_COPY(prm, p, ((cgr_worker_params)CGR_WORKER_PARAMS_INIT));
	if ((ops = kind_of(ctx, &prm)) == NULL || prm.cpu < -1 ||
	    (prm.device < 0 && prm.device != CGR_DEVICE_NONE &&
	     prm.device != CGR_DEVICE_SIM) ||
	    (prm.arg_len > 0 && prm.arg_data == NULL) ||
	    prm.arg_len > ((size_t)64 << 10))
		return -EINVAL; /* (arg_data: for any kind, used or not) */
	if (prm.device >= 0 && !ops->other_host) {
		/* The device must exist (-ENODEV; the log says why). */
		cgr_stream *probe;
		ret = cgr_stream_create(ctx, prm.device, 0, &probe);
		if (ret < 0)
			return ret;
		cgr_stream_destroy(probe);
	}
	if ((w = worker_new(ctx, &prm, ops)) == NULL)
		return -ENOMEM;
	ret = w->ops->create(w, &prm);
	if (ret != 0) {
		worker_free(ctx, w);
		return ret;
	}
	w->next = ctx->workers;
	ctx->workers = w;
	ctx->release_workers = release_workers;
	ctx->worker_device = worker_device;
	ctx->worker_unfit = worker_unfit;
	ctx->nworkers++;
	*out = w;
	return 0;
}

int cgr_worker_destroy(cgr_worker *w, int64_t timeout_ns)
{
	if (w == NULL)
		return -EINVAL;
	if (w->destroyed)
		return 0;
	if (w->abandoned) {
		/* Already told to stop and left behind (stuck in a task):
		 * it exits by itself, fini run, when the task returns; 0 if
		 * that happens by the deadline. */
		int ret;
		w->destroyed = true;
		if (timeout_ns < 0)
			timeout_ns = 1000000000;
		ret = cgr__future_wait(&w->exited, w->exit_gen,
				       cgr__deadline(timeout_ns), NULL,
				       CGR_WAIT_BLOCK, 0);
		if (ret == -ETIMEDOUT)
			return CGR_ESTUCK;
		return atomic_load_explicit(&w->lost, memory_order_acquire) ?
			       CGR_EPEERDEAD :
			       0;
	}
	if (w->busy_with != NULL && !cgr__torn_down(w->busy_with))
		return -EBUSY;
	w->destroyed = true;
	if (timeout_ns < 0)
		timeout_ns = 1000000000;
	return w->ops->destroy(w, cgr__deadline(timeout_ns));
}

const char *cgr_worker_name(const cgr_worker *w)
{
	return w != NULL ? w->name : NULL;
}

int cgr_worker_pid(const cgr_worker *w)
{
	return w != NULL && w->ops->pid != NULL ? w->ops->pid(w) : 0;
}

void cgr__worker_kinds_release(cgr_ctx *ctx)
{
	for (size_t k = 0; k < NKINDS; k++)
		if (kinds[k] != NULL && kinds[k]->ctx_release != NULL)
			kinds[k]->ctx_release(ctx);
}

size_t cgr__compiled_kinds(const cgr_compiled *c,
			   const struct cgr__worker_ops **out)
{
	size_t n = 0, k;

	for (size_t i = 0; i < c->nprogs; i++) {
		const struct cgr__worker_ops *ops = c->progs[i].w->ops;
		for (k = 0; k < n && out[k] != ops; k++)
			;
		if (k == n && n < CGR__KINDS_MAX)
			out[n++] = ops;
	}
	return n;
}
