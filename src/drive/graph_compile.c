/*
 * drive/graph_compile.c: cgr_graph_compile: what a graph's workers cannot
 * run is refused (each kind says, graph/worker.h), the compiler builds the
 * programs (compile/), each kind of worker the graph uses prepares it (the
 * worker processes compile their share), and starts its programs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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

/*
 * Across hosts, an allreduce node of AUTO backend without a communicator
 * whose output capacity is at least CGR__AUTO_COMM_BYTES runs on one made
 * now over its members (a communicator across hosts: reduce-scatter and
 * allgather, a leader per host) instead of over values (every member
 * reading every input: n - 1 whole inputs into each host).  Made before
 * the graph's description is packed, which names it to the other hosts;
 * freed with the compiled graph.  Small values in such a node pay the
 * communicator's exchange (about 150 us more here), hence the bound.
 */
#define CGR__AUTO_COMM_BYTES ((size_t)1 << 20)

/* Whether collective t gets a communicator of its own (see above). */
static bool auto_comm_wanted(const struct cgr__task *t, size_t def_cap)
{
	size_t cap = t->max_out_bytes ? t->max_out_bytes : def_cap;
	bool spans = false;

	if (t->coll != CGR_COLL_ALLREDUCE || t->cp.comm != NULL ||
	    t->cp.backend != CGR_BACKEND_AUTO || cap < CGR__AUTO_COMM_BYTES)
		return false;
	for (size_t i = 1; i < t->nmembers; i++)
		spans |= t->members[i]->host != t->members[0]->host;
	for (size_t i = 0; spans && i < t->nin; i++) {
		const cgr_node *n = t->in[i];
		if (n->kind == CGR__NODE_TASK && !n->task->coll &&
		    (n->task->flags & CGR_TASK_DEVICE))
			return false; /* device tensors: NCCL's, not ours */
	}
	return spans;
}

/* The communicators auto_comm_wanted asks for, each set as its node's
 * (made[i] for the i-th; *nmade of them): 0, or the failure (g's errmsg
 * says which); either way auto_comms_end gives back those made. */
static int auto_comms(cgr_graph *g, const cgr_compile_params *prm,
		      cgr_comm **made, size_t *nmade)
{
	cgr_compile_params pp;
	int ret;

	*nmade = 0;
	if (cgr__compile_params(&pp, prm) < 0)
		return 0; /* the compile says what is wrong with them */
	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		if (!auto_comm_wanted(t, pp.max_value_bytes))
			continue;
		ret = cgr_comm_create(g->ctx, t->members, t->nmembers,
				      CGR_BACKEND_CPU, &made[*nmade]);
		if (ret < 0)
			return cgr__graph_fail(g, ret,
					       "%s %s: its communicator across "
					       "hosts could not be made (%s)",
					       cgr__coll_name(t->coll), t->name,
					       cgr_strerror(ret));
		t->cp.comm = made[(*nmade)++];
	}
	return 0;
}

/* Gives back what auto_comms did: the nodes' communicators unset, and
 * destroyed unless c (compiled) keeps them. */
static void auto_comms_end(cgr_graph *g, cgr_comm **made, size_t nmade,
			   cgr_compiled *c)
{
	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next)
		for (size_t i = 0; i < nmade; i++)
			if (t->cp.comm == made[i])
				t->cp.comm = NULL;
	for (size_t i = 0; i < nmade; i++)
		if (c != NULL)
			c->comms[c->ncomms++] = made[i];
		else
			cgr_comm_destroy(made[i]);
}

int cgr_graph_compile(cgr_graph *g, const cgr_compile_params *prm,
		      cgr_compiled **out)
{
	cgr_compiled *c;
	cgr_comm **made;
	size_t nmade = 0;
	int ret;

	if (g == NULL || out == NULL)
		return -EINVAL;
	if ((ret = check_workers(g)) < 0)
		return ret;
	if ((made = calloc(g->ntasks + 1, sizeof(*made))) == NULL)
		return -ENOMEM;
	ret = auto_comms(g, prm, made, &nmade);
	if (ret == 0)
		ret = cgr__graph_build(g, prm, -1, &c);
	auto_comms_end(g, made, nmade, ret == 0 ? c : NULL);
	free(made);
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
