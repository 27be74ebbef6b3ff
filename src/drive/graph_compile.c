/*
 * drive/graph_compile.c: cgr_graph_compile: what a graph's workers cannot
 * run is refused, the compiler builds the programs (compile/), the worker
 * processes compile their share, and every program is started.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "compile/compile.h"
#include "proc/proc.h"

/* What a graph with process workers cannot hold yet, and workers that
 * died (a process, or a thread that ended in a task): 0, or the error
 * (g's errmsg says which). */
static int check_procs(cgr_graph *g)
{
	const char *why;

	for (const struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		for (size_t i = 0; i < cgr__task_nworkers(t); i++) {
			cgr_worker *w = cgr__task_worker(t, i);
			if (cgr__proc_dead(w, &why))
				return cgr__graph_fail(g, CGR_EPEERDEAD,
						       "%s: %s", t->name, why);
			if (!w->remote)
				continue;
			if ((t->flags & CGR_TASK_DEVICE) ||
			    (t->coll && (t->cp.comm != NULL ||
					 t->cp.backend == CGR_BACKEND_NCCL)))
				return cgr__graph_fail(
					g, -ENOTSUP,
					"%s %s on process worker %s: device "
					"tasks, NCCL and communicators of "
					"the caller's are not supported on "
					"process workers yet",
					cgr__coll_name(t->coll), t->name,
					w->name);
		}
	}
	return 0;
}

void cgr__compiled_start(cgr_ctx *ctx, cgr_compiled *c)
{
	/* Each worker of this process holds a reference while it runs its
	 * program. */
	for (size_t i = 0; i < c->nprogs; i++) {
		if (c->progs[i].w->remote)
			continue;
		atomic_fetch_add(&c->refs, 1);
		c->progs[i].w->busy_with = c;
		cgr__worker_post(c->progs[i].w, &c->progs[i]);
	}
	c->next = ctx->compiled;
	ctx->compiled = c;
}

int cgr_graph_compile(cgr_graph *g, const cgr_compile_params *prm,
		      cgr_compiled **out)
{
	cgr_compiled *c;
	int ret;

	if (g == NULL || out == NULL)
		return -EINVAL;
	if ((ret = check_procs(g)) < 0)
		return ret;
	ret = cgr__graph_build(g, prm, -1, &c);
	if (ret < 0)
		return ret;
	if (c->seg != NULL && (ret = cgr__pgraph_compile(c, g)) < 0) {
		cgr__compiled_unref(c);
		return ret;
	}
	g->compiled = true;
	cgr__compiled_start(g->ctx, c);
	/* The driver's handles of its worker processes serve c too (a
	 * worker process's stand-ins do not: nothing there clears them). */
	for (size_t i = 0; i < c->nprogs; i++)
		if (c->progs[i].w->remote)
			c->progs[i].w->busy_with = c;
	if (c->seg != NULL)
		cgr__pgraph_run(c);
	*out = c;
	return 0;
}
