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

/* Workers of g that died (dead: a process, or a thread that ended in a
 * task), or what they cannot run (else: each kind's check_task): 0, or
 * the error (g's errmsg says which). */
static int check_workers(cgr_graph *g, bool dead)
{
	const char *why;
	int ret;

	for (const struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		for (size_t i = 0; i < cgr__task_nworkers(t); i++) {
			cgr_worker *w = cgr__task_worker(t, i);
			if (dead && cgr__worker_dead(w, &why))
				return cgr__graph_fail(g, CGR_EPEERDEAD,
						       "%s: %s", t->name, why);
			if (!dead && w->ops->check_task != NULL &&
			    (ret = w->ops->check_task(g, t, w, false)) < 0)
				return ret;
		}
	}
	return 0;
}

/* cgr__compiled_start with ctx->graph_lock held. */
static void start_held(cgr_ctx *ctx, cgr_compiled *c)
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

void cgr__compiled_start(cgr_ctx *ctx, cgr_compiled *c)
{
	pthread_mutex_lock(&ctx->graph_lock);
	start_held(ctx, c);
	pthread_mutex_unlock(&ctx->graph_lock);
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
 * Device tensors take NCCL instead (shared_nccl, below).
 */
#define CGR__AUTO_COMM_BYTES ((size_t)1 << 20)

/* Whether node n's data is on a device: a device task's output, or a
 * collective's over such outputs (its first input's: a collective that
 * mixes the two is refused at compile).  Linear in the chain's depth. */
static bool on_device(const cgr_node *n)
{
	while (n != NULL && n->kind == CGR__NODE_TASK && n->task->coll &&
	       n->task->nin > 0)
		n = n->task->in[0];
	return n != NULL && n->kind == CGR__NODE_TASK && !n->task->coll &&
	       (n->task->flags & CGR_TASK_DEVICE) != 0;
}

/* Which communicator collective t gets made for it (see above and
 * below): CGR_BACKEND_CPU, CGR_BACKEND_NCCL, or -1 (none). */
static int auto_comm_wanted(const struct cgr__task *t, size_t def_cap)
{
	size_t cap = t->max_out_bytes ? t->max_out_bytes : def_cap;
	bool spans = false, dev = t->nin > 0;

	if (!t->coll || t->cp.comm != NULL)
		return -1;
	for (size_t i = 1; i < t->nmembers; i++)
		spans |= t->members[i]->host != t->members[0]->host;
	for (size_t i = 0; spans && i < t->nin; i++)
		dev &= on_device(t->in[i]);
	if (!spans)
		return -1;
	/* Device tensors: an NCCL communicator across the hosts. */
	if (dev)
		return t->cp.backend == CGR_BACKEND_CPU ? -1 : CGR_BACKEND_NCCL;
	if (t->coll != CGR_COLL_ALLREDUCE ||
	    t->cp.backend != CGR_BACKEND_AUTO || cap < CGR__AUTO_COMM_BYTES)
		return -1;
	return CGR_BACKEND_CPU;
}

/*
 * A collective over device tensors with members on several hosts and no
 * communicator (backend AUTO or NCCL) runs on an NCCL communicator
 * across the hosts made now over its members in their order, shared by
 * every such node of the same members; freed with the compiled graph.
 */
static cgr_comm *shared_nccl(cgr_comm **made, size_t nmade,
			     cgr_worker *const *m, size_t n)
{
	for (size_t i = 0; i < nmade; i++) {
		const cgr_comm *c = made[i];
		if (c->backend != CGR_BACKEND_NCCL || (size_t)c->n != n ||
		    c->members == NULL ||
		    memcmp(c->members, m, n * sizeof(*m)) != 0)
			continue;
		return made[i];
	}
	return NULL;
}

/* The NCCL communicator across hosts over m[0..n) (shared_nccl's, or a
 * new one in made): 0, or the failure (g's errmsg names what for). */
static int nccl_over(cgr_graph *g, cgr_worker *const *m, size_t n,
		     cgr_comm **made, size_t *nmade, const char *what,
		     cgr_comm **out)
{
	int ret;

	if ((*out = shared_nccl(made, *nmade, m, n)) != NULL)
		return 0;
	ret = cgr_comm_create(g->ctx, m, n, CGR_BACKEND_NCCL, &made[*nmade]);
	if (ret < 0)
		return cgr__graph_fail(g, ret,
				       "%s: its NCCL communicator across "
				       "hosts could not be made (%s)",
				       what, cgr_strerror(ret));
	*out = made[(*nmade)++];
	return 0;
}

/*
 * A device-transport edge whose producer (a device task) and readers are
 * on several hosts runs on an NCCL communicator across them (its
 * broadcast, compile/edges.c: the producer, then the readers in
 * first-use order), made now and named in the graph's description.
 */
static int edge_comms(cgr_graph *g, cgr_comm **made, size_t *nmade)
{
	for (cgr_node *n = g->nodes; n != NULL; n = n->next) {
		cgr_worker *m[CGR_MAX_RANKS], *p;
		bool spans = false;
		size_t nm;
		int ret;
		if (n->kind != CGR__NODE_TASK ||
		    n->transport != CGR_TRANSPORT_DEVICE || n->edge_lowered ||
		    (n->edge_flags & CGR_EDGE_CPU) || !on_device(n))
			continue;
		p = cgr__out_worker(n->task, n->port);
		nm = cgr__edge_readers(g, n, p, m, CGR_MAX_RANKS);
		for (size_t i = 1; i < nm; i++)
			spans |= m[i]->host != p->host;
		if (spans && (ret = nccl_over(g, m, nm, made, nmade, n->name,
					      &n->edge_comm)) < 0)
			return ret;
	}
	return 0;
}

/* The communicators auto_comm_wanted asks for, each set as its node's
 * (made[i] for the i-th; *nmade of them): 0, or the failure (g's errmsg
 * says which); either way auto_comms_end gives back those made. */
static int auto_comms(cgr_graph *g, const cgr_compile_params *prm,
		      cgr_comm **made, size_t *nmade)
{
	cgr_compile_params pp;
	int be, ret;

	*nmade = 0;
	if (cgr__compile_params(&pp, prm, NULL) < 0)
		return 0; /* the compile says what is wrong with them */
	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		if ((be = auto_comm_wanted(t, pp.max_value_bytes)) < 0)
			continue;
		if (be == CGR_BACKEND_NCCL) {
			if ((ret = nccl_over(g, t->members, t->nmembers, made,
					     nmade, t->name, &t->cp.comm)) < 0)
				return ret;
			continue;
		}
		ret = cgr_comm_create(g->ctx, t->members, t->nmembers, be,
				      &made[*nmade]);
		if (ret < 0)
			return cgr__graph_fail(g, ret,
					       "%s %s: its communicator across "
					       "hosts could not be made (%s)",
					       cgr__coll_name(t->coll), t->name,
					       cgr_strerror(ret));
		t->cp.comm = made[(*nmade)++];
	}
	return edge_comms(g, made, nmade);
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
	for (cgr_node *n = g->nodes; n != NULL; n = n->next)
		n->edge_comm = NULL;
	for (size_t i = 0; i < nmade; i++)
		if (c != NULL)
			c->comms[c->ncomms++] = made[i];
		else
			cgr_comm_destroy(made[i]);
}

static int compile_locked(cgr_graph *g, const cgr_compile_params *prm,
			  cgr_compiled **out)
{
	cgr_compiled *c;
	cgr_comm **made;
	size_t nmade = 0;
	int ret;

	if ((ret = check_workers(g, true)) < 0)
		return ret;
	if ((made = calloc((size_t)g->ntasks + g->nnodes + 1,
			   sizeof(*made))) == NULL)
		return -ENOMEM;
	/* (Before the kinds' checks: a collective on a communicator reads
	 * only its members' own inputs.) */
	ret = auto_comms(g, prm, made, &nmade);
	if (ret == 0)
		ret = check_workers(g, false);
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
	start_held(g->ctx, c);
	*out = c;
	return 0;
}

/* One compile at a time per context: the driver's, or a task's driving
 * another graph (it claims workers and joins the list of live graphs). */
int cgr_graph_compile(cgr_graph *g, const cgr_compile_params *prm,
		      cgr_compiled **out)
{
	int ret;

	if (g == NULL || out == NULL)
		return -EINVAL;
	pthread_mutex_lock(&g->ctx->graph_lock);
	ret = compile_locked(g, prm, out);
	pthread_mutex_unlock(&g->ctx->graph_lock);
	return ret;
}
