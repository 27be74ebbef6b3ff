/*
 * drive/graph_compile.c: cgr_graph_compile: what a graph's workers cannot
 * run is refused (each kind says, graph/worker.h), the compiler builds the
 * programs (compile/), each kind of worker the graph uses prepares it (the
 * worker processes compile their share), and starts its programs.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "drive/drive.h"

/* What g's workers cannot run (each kind's check_task), and workers that
 * died (a process, or a thread that ended in a task): 0, or the error
 * (g's errmsg says which). */
static int check_workers(cgr_graph *g)
{
	const char *why;
	int ret;

	for (const struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		for (size_t i = 0; i < cgr__task_nworkers(t); i++) {
			cgr_worker *w = cgr__task_worker(t, i);
			if (cgr__worker_dead(w, &why))
				return cgr__graph_fail(g, CGR_EPEERDEAD,
						       "%s: %s", t->name, why);
			if (w->ops->check_task != NULL &&
			    (ret = w->ops->check_task(g, t, w, false)) < 0)
				return ret;
		}
	}
	return 0;
}

void cgr__compiled_start(cgr_ctx *ctx, cgr_compiled *c)
{
	const struct cgr__worker_ops *k[CGR__KINDS_MAX];
	size_t n = cgr__compiled_kinds(c, k);

	/* Each kind starts the programs of its workers (a thread worker of
	 * this process holds a reference on c while it runs its program). */
	for (size_t i = 0; i < n; i++)
		if (k[i]->graph_start != NULL)
			k[i]->graph_start(c);
	c->next = ctx->compiled;
	ctx->compiled = c;
}

/* Each kind of c's workers prepares it: 0, or the first failure (g's
 * errmsg says why), the kinds that prepared it before then dropping it. */
static int prepare(cgr_compiled *c, cgr_graph *g)
{
	const struct cgr__worker_ops *k[CGR__KINDS_MAX];
	size_t n = cgr__compiled_kinds(c, k);
	int ret;

	for (size_t i = 0; i < n; i++) {
		if (k[i]->graph_prepare == NULL)
			continue;
		ret = k[i]->graph_prepare(c, g);
		if (ret == 0)
			continue;
		while (i-- > 0)
			if (k[i]->graph_drop != NULL)
				k[i]->graph_drop(c);
		return ret;
	}
	return 0;
}

int cgr_graph_compile(cgr_graph *g, const cgr_compile_params *prm,
		      cgr_compiled **out)
{
	cgr_compiled *c;
	int ret;

	if (g == NULL || out == NULL)
		return -EINVAL;
	if ((ret = check_workers(g)) < 0)
		return ret;
	ret = cgr__graph_build(g, prm, -1, &c);
	if (ret < 0)
		return ret;
	if ((ret = prepare(c, g)) < 0) {
		cgr__compiled_unref(c);
		return ret;
	}
	g->compiled = true;
	cgr__compiled_start(g->ctx, c);
	*out = c;
	return 0;
}
