/*
 * remote/remote.c: workers on other hosts, the driver's side
 * (cgr__remote_ops, see graph/worker.h).
 *
 * A worker of cgr_worker_params.rank another rank of the context's job
 * is a thread of the process that serves that rank (serve.c): creating
 * it sends that rank the worker's identity (its init and fini by
 * exported name, arg_data's bytes) and waits for its init's result;
 * destroying it asks for its fini, by the deadline.  A graph with such
 * workers gets an id; each rank that runs some of its programs is sent
 * the graph's description (the one process workers compile) and the
 * rank of every worker index, compiles it there, and from then on the
 * links of the two hosts carry the values of its channels between them
 * (bridge.c).  Start, teardown and drop are messages too; a rank that is
 * lost fails every graph that uses it (the link, bridge.c) and is never
 * waited for.
 *
 * Threads: the driver thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"
#include "device/lib.h"
#include "remote/remote.h"

/* This file's table (at its end); the registry names it. */
extern const struct cgr__worker_ops cgr__remote_ops;

#define ARG_MAX (64u << 10)

/* A remote worker (its cgr_worker's impl). */
struct rworker {
	struct cgr_job *job;
	uint32_t rank;
	char fn[64]; /* its init/fini's export ("": none) */
};

static struct rworker *rw_of(const cgr_worker *w)
{
	return w->impl;
}

/* What a graph keeps of its remote ranks (kind state). */
struct rgraph {
	uint64_t gid;
	uint32_t ranks[CGR_MAX_RANKS];
	size_t nranks;
	size_t compiled; /* the first that compiled it */
};

static struct rgraph *rg_of(const cgr_compiled *c)
{
	return cgr__c_kind_state(c, &cgr__remote_ops);
}

static void msg_init(struct cgr__rmsg *m, uint32_t type, uint64_t gid)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->gid = gid;
}

/* The export holding init and fini (NULL: neither); -EINVAL if they are
 * not exported. */
static int export_of(cgr_ctx *ctx, const cgr_worker_params *p,
		     const cgr_export **out)
{
	const cgr_export *e = ctx->exports;

	*out = NULL;
	if (p->init == NULL && p->fini == NULL)
		return 0;
	for (; e != NULL && e->name != NULL; e++)
		if (e->init == p->init && e->fini == p->fini) {
			*out = e;
			return 0;
		}
	return -EINVAL;
}

/* The GPU libraries the serving rank loads: the files this context was
 * given (cgr_ctx_params.cudart_path, nccl_path; each "" if none: by
 * soname there), one after the other, each ending in NUL, into text (a
 * SPEC's; NULL: only checked); -ENAMETOOLONG if they do not fit. */
static int libs_put(cgr_ctx *ctx, char *text)
{
	const char *rt = cgr__lib_asked(ctx, CGR__LIB_CUDART);
	const char *nc = cgr__lib_asked(ctx, CGR__LIB_NCCL);
	size_t a = rt != NULL ? strlen(rt) : 0, b = nc != NULL ? strlen(nc) : 0;

	if (a + b + 2 > sizeof(((struct cgr__rmsg *)0)->text))
		return -ENAMETOOLONG;
	if (text != NULL) {
		memcpy(text, rt != NULL ? rt : "", a + 1);
		memcpy(text + a + 1, nc != NULL ? nc : "", b + 1);
	}
	return 0;
}

static int remote_check(cgr_worker *w, const cgr_worker_params *p,
			const cgr_export **e)
{
	const char *bad = NULL;

	if (p->arg != NULL)
		bad = "takes arg_data (copied there), not arg";
	else if (p->arg_len > ARG_MAX || (p->arg_len && p->arg_data == NULL))
		bad = "takes at most 64 KiB of arg_data";
	else if (p->device >= 0 && libs_put(w->ctx, NULL) < 0)
		bad = "loads the context's cudart_path and nccl_path there: "
		      "at most 398 bytes together";
	else if (p->join_addr != NULL)
		bad = "is started by the job's launcher, not joined";
	else if (export_of(w->ctx, p, e) < 0)
		bad = "finds its init and fini by name: they are not in "
		      "cgr_ctx_params.exports";
	if (bad == NULL)
		return 0;
	cgr__err(&w->ctx->log, "worker %s on rank %d: a worker on another "
			       "host %s",
		 w->name, p->rank, bad);
	return -EINVAL;
}

static int remote_create(cgr_worker *w, const cgr_worker_params *p)
{
	struct cgr_job *j = w->ctx->job;
	const cgr_export *e = NULL;
	struct rworker *rw;
	struct cgr__rmsg m;
	struct cgr__cmsg *r;
	int ret = remote_check(w, p, &e);

	if (ret < 0)
		return ret;
	if ((rw = calloc(1, sizeof(*rw))) == NULL)
		return -ENOMEM;
	rw->job = j;
	rw->rank = (uint32_t)p->rank;
	w->host = rw->rank;
	snprintf(rw->fn, sizeof(rw->fn), "%s", e != NULL ? e->name : "");
	w->impl = rw;
	msg_init(&m, CGR__RM_SPEC, w->index + 1);
	m.index = w->index;
	m.cpu = p->cpu;
	m.device = p->device;
	m.log_level = w->ctx->log.level;
	m.flags = w->ctx->flags;
	snprintf(m.name, sizeof(m.name), "%s", w->name);
	snprintf(m.fn, sizeof(m.fn), "%s", rw->fn);
	(void)libs_put(w->ctx, m.text);
	ret = cgr__job_send(j, rw->rank, &m, p->arg_data, p->arg_len);
	if (ret == 0)
		ret = cgr__job_await(j, rw->rank, CGR__RM_READY, w->index + 1,
				     CGR_FOREVER, &r);
	if (ret == 0) {
		ret = r->m.code;
		if (ret != 0)
			cgr__err(&w->ctx->log,
				 "worker %s on rank %u (host %s): %s%s%s",
				 w->name, rw->rank, j->peers[rw->rank].host,
				 cgr_strerror(ret), r->m.text[0] ? ": " : "",
				 r->m.text);
		free(r);
	} else if (ret == CGR_EHOSTLOST) {
		cgr__err(&w->ctx->log, "worker %s: %s", w->name,
			 j->peers[rw->rank].why);
	}
	return ret;
}

static int remote_destroy(cgr_worker *w, int64_t deadline)
{
	struct rworker *rw = rw_of(w);
	struct cgr__rmsg m;
	struct cgr__cmsg *r;
	int ret;

	msg_init(&m, CGR__RM_STOP, w->index + 1);
	m.index = w->index;
	m.timeout_ns = deadline - cgr__now_ns();
	ret = cgr__job_send(rw->job, rw->rank, &m, NULL, 0);
	if (ret == 0)
		ret = cgr__job_await(rw->job, rw->rank, CGR__RM_BYE,
				     w->index + 1, deadline, &r);
	if (ret == 0) {
		ret = r->m.code;
		free(r);
	} else if (ret == -ETIMEDOUT) {
		cgr__err(&w->ctx->log,
			 "worker %s on rank %u did not stop by the deadline",
			 w->name, rw->rank);
		ret = CGR_ESTUCK;
	}
	return ret;
}

static void remote_free(cgr_worker *w)
{
	free(w->impl);
	w->impl = NULL;
}

static bool remote_dead(const cgr_worker *w, const char **why)
{
	return cgr__job_lost(rw_of(w)->job, rw_of(w)->rank, why);
}

/* The host (job rank) whose device memory holds node n's data, or -1:
 * the outputs of a device task (CGR_TASK_DEVICE), and of a collective
 * over such outputs (NCCL: each output on its member's host; members on
 * several hosts only on an NCCL communicator across them, else the
 * compile refuses it, compile/lower.c).  (Device edges become
 * collectives only at compile, after these checks.) */
static int dev_host(const cgr_node *n)
{
	const struct cgr__task *t;

	if (n == NULL || n->kind != CGR__NODE_TASK)
		return -1;
	t = n->task;
	if (!t->coll)
		return (t->flags & CGR_TASK_DEVICE) ? (int)t->w->host : -1;
	/* Its first input not on a device edge decides (the compile
	 * refuses a mix): linear in the chain's depth, not exponential. */
	for (size_t i = 0; i < t->nin; i++)
		if (t->in[i] != NULL &&
		    t->in[i]->transport != CGR_TRANSPORT_DEVICE)
			return dev_host(t->in[i]) >= 0 ?
				       (int)cgr__out_worker(t, n->port)->host :
				       -1;
	return -1;
}

/* t's outputs that w makes (on w's device, another host) stay there, read
 * by tasks and collectives of that host only (a device-transport edge is
 * a collective: compile/lower.c), never a graph output. */
static int device_stays(cgr_graph *g, const struct cgr__task *t,
			const cgr_worker *w)
{
	for (const struct cgr__task *u = g->tasks; u != NULL; u = u->next)
		for (size_t i = 0; i < u->nin; i++) {
			const cgr_node *n = u->in[i];
			if (n == NULL || n->kind != CGR__NODE_TASK ||
			    n->task != t || n->transport == CGR_TRANSPORT_DEVICE ||
			    cgr__out_worker(t, n->port) != w)
				continue;
			for (size_t k = 0; k < cgr__task_nworkers(u); k++) {
				const cgr_worker *r = cgr__task_worker(u, k);
				/* (On a communicator a member reads its own
				 * input only.) */
				if (r->host == w->host ||
				    (u->coll && u->cp.comm != NULL &&
				     cgr__in_worker(u, i) != r))
					continue;
				return cgr__graph_fail(
					g, -ENOTSUP,
					"%s: %s, a CUDA tensor of %s %s on "
					"worker %s (rank %u), is read by %s "
					"%s on worker %s (rank %u): a device "
					"tensor crosses hosts over a device "
					"edge only (cgr_node_set_transport: "
					"NCCL), or as host memory a stream "
					"task there copies it to%s",
					u->name, n->name,
					cgr__coll_name(t->coll), t->name,
					w->name, w->host,
					cgr__coll_name(u->coll), u->name,
					r->name, r->host,
					u->coll ? " (a collective's member "
						  "across hosts reads its "
						  "own input only, through "
						  "NCCL)" :
						  "");
			}
		}
	for (size_t i = 0; i < g->noutputs; i++)
		if (g->outputs[i]->kind == CGR__NODE_TASK &&
		    g->outputs[i]->task == t &&
		    cgr__out_worker(t, g->outputs[i]->port) == w)
			return cgr__graph_fail(
				g, -ENOTSUP,
				"output %zu of the graph is %s, a CUDA tensor "
				"of %s %s on worker %s (rank %u): a graph "
				"output on another host than the driver's "
				"cannot be a device tensor (a stream task "
				"there can copy it to host memory)",
				i, g->outputs[i]->name, cgr__coll_name(t->coll),
				t->name, w->name, w->host);
	return 0;
}

static int remote_check_task(cgr_graph *g, const struct cgr__task *t,
			     const cgr_worker *w, bool eager)
{
	if (eager)
		return cgr__graph_fail(g, -ENOTSUP,
				       "%s: eager execution runs on thread "
				       "workers of this process only (%s is "
				       "on rank %u, another host)",
				       t->name, w->name, rw_of(w)->rank);
	/* A CUDA tensor of another host (a device-transport edge is a
	 * collective of its producer and readers: across hosts on an NCCL
	 * communicator, compile/lower.c).  A member of a collective on a
	 * communicator reads its own inputs only (over values: every
	 * member's). */
	for (size_t i = 0; i < t->nin; i++) {
		const cgr_node *n = t->in[i];
		int h = n != NULL && n->transport != CGR_TRANSPORT_DEVICE ?
				dev_host(n) :
				-1;
		if (t->coll && t->cp.comm != NULL && cgr__in_worker(t, i) != w)
			continue;
		if (h >= 0 && (uint32_t)h != w->host)
			return cgr__graph_fail(
				g, -ENOTSUP,
				"%s: its input %s is a CUDA tensor made on "
				"rank %d, and %s is on rank %u: a device "
				"tensor crosses hosts over a device edge only "
				"(cgr_node_set_transport: NCCL)",
				t->name, n->name, h, w->name, w->host);
	}
	/* What t makes on w's device stays on w's host. */
	if ((!t->coll && (t->flags & CGR_TASK_DEVICE)) ||
	    (t->coll && t->nout > 0 && dev_host(t->out[0]) >= 0))
		return device_stays(g, t, w);
	return 0;
}

/* ---- graphs ---------------------------------------------------------- */

static void rg_add_rank(struct rgraph *rg, uint32_t r)
{
	for (size_t i = 0; i < rg->nranks; i++)
		if (rg->ranks[i] == r)
			return;
	if (rg->nranks < CGR_MAX_RANKS)
		rg->ranks[rg->nranks++] = r;
}

/* Sends type to c's ranks (the first upto). */
static void send_ranks(cgr_compiled *c, uint32_t type, int64_t timeout,
		       size_t upto)
{
	struct rgraph *rg = rg_of(c);
	struct cgr__rmsg m;

	msg_init(&m, type, rg->gid);
	m.timeout_ns = timeout;
	for (size_t i = 0; i < rg->nranks && i < upto; i++)
		(void)cgr__job_send(c->ctx->job, rg->ranks[i], &m, NULL, 0);
}

static void rg_off(cgr_compiled *c)
{
	struct rgraph *rg = rg_of(c);

	cgr__bridge_remove(c->ctx->job, c);
	cgr__c_set_kind_state(c, &cgr__remote_ops, NULL);
	free(rg);
}

/* The description and the worker index -> rank table, in one payload. */
static void *compile_payload(cgr_compiled *c, uint32_t *ranks, size_t *len)
{
	size_t blen, n = c->ctx->nworkers;
	const void *blob = cgr__seg_blob(c, &blen);
	unsigned char *pl = malloc(blen + n * sizeof(*ranks) + 1);

	if (pl == NULL)
		return NULL;
	memcpy(pl, blob, blen);
	memcpy(pl + blen, ranks, n * sizeof(*ranks));
	*len = blen + n * sizeof(*ranks);
	return pl;
}

/* Where every worker of the context runs (the driver's own: here). */
static uint32_t *rank_table(cgr_ctx *ctx)
{
	uint32_t *t = calloc(ctx->nworkers + 1, sizeof(*t));

	if (t == NULL)
		return NULL;
	for (unsigned i = 0; i < ctx->nworkers; i++)
		t[i] = ctx->job->rank;
	for (cgr_worker *w = ctx->workers; w != NULL; w = w->next)
		if (w->index < ctx->nworkers && w->ops == &cgr__remote_ops)
			t[w->index] = rw_of(w)->rank;
	return t;
}

/* Every rank of c compiles it: 0 or the first failure (g's errmsg). */
static int compile_there(cgr_compiled *c, cgr_graph *g, const void *pl,
			 size_t len)
{
	struct rgraph *rg = rg_of(c);
	struct cgr_job *j = c->ctx->job;
	struct cgr__rmsg m;
	int ret = 0;

	msg_init(&m, CGR__RM_COMPILE, rg->gid);
	m.nranks = c->ctx->nworkers;
	for (size_t i = 0; i < rg->nranks && ret == 0; i++)
		if ((ret = cgr__job_send(j, rg->ranks[i], &m, pl, len)) < 0)
			ret = cgr__graph_fail(g, ret, "rank %u: %s",
					      rg->ranks[i], cgr_strerror(ret));
		else
			rg->compiled = i + 1;
	for (size_t i = 0; i < rg->compiled; i++) {
		struct cgr__cmsg *r;
		const char *why;
		int rr = cgr__job_await(j, rg->ranks[i], CGR__RM_COMPILED,
					rg->gid, CGR_FOREVER, &r);
		if (rr == 0) {
			if (r->m.code != 0 && ret == 0)
				ret = cgr__graph_fail(
					g, r->m.code,
					"rank %u (host %s) could not compile "
					"the graph: %s",
					rg->ranks[i],
					j->peers[rg->ranks[i]].host,
					r->m.text[0] ? r->m.text :
						       cgr_strerror(r->m.code));
			free(r);
		} else if (ret == 0) {
			(void)cgr__job_lost(j, rg->ranks[i], &why);
			ret = cgr__graph_fail(g, rr, "%s", why);
		}
	}
	return ret;
}

static int remote_graph_prepare(cgr_compiled *c, cgr_graph *g)
{
	struct cgr_job *j = c->ctx->job;
	struct rgraph *rg;
	uint32_t *ranks;
	void *pl = NULL;
	size_t len = 0;
	int ret;

	for (size_t i = 0; i < c->nprogs; i++) {
		const cgr_worker *w = c->progs[i].w;
		if (!w->ops->shared && !w->ops->other_host)
			return cgr__graph_fail(g, -ENOTSUP,
					       "worker %s is a %s worker: a "
					       "graph with workers on other "
					       "hosts has thread workers here "
					       "only (for now)",
					       w->name, w->ops->name);
	}
	if (c->seg == NULL || (rg = calloc(1, sizeof(*rg))) == NULL)
		return cgr__graph_fail(g, -ENOMEM, "out of memory");
	for (size_t i = 0; i < c->nprogs; i++)
		if (c->progs[i].w->ops == &cgr__remote_ops)
			rg_add_rank(rg, rw_of(c->progs[i].w)->rank);
	pthread_mutex_lock(&j->lock);
	rg->gid = ++j->next_gid;
	pthread_mutex_unlock(&j->lock);
	if ((ranks = rank_table(c->ctx)) == NULL ||
	    (pl = compile_payload(c, ranks, &len)) == NULL ||
	    cgr__c_set_kind_state(c, &cgr__remote_ops, rg) < 0) {
		free(ranks);
		free(pl);
		free(rg);
		return cgr__graph_fail(g, -ENOMEM, "out of memory");
	}
	ret = cgr__bridge_add(j, c, rg->gid, ranks, c->ctx->nworkers);
	if (ret == 0)
		ret = compile_there(c, g, pl, len);
	else
		ret = cgr__graph_fail(g, ret, "out of memory");
	free(pl);
	free(ranks);
	if (ret != 0) {
		send_ranks(c, CGR__RM_DROP, 0, rg->compiled);
		rg_off(c);
	}
	return ret;
}

static void remote_graph_drop(cgr_compiled *c)
{
	if (rg_of(c) == NULL)
		return;
	send_ranks(c, CGR__RM_DROP, 0, SIZE_MAX);
	rg_off(c);
}

static void remote_graph_start(cgr_compiled *c)
{
	if (rg_of(c) == NULL)
		return;
	for (size_t i = 0; i < c->nprogs; i++)
		if (c->progs[i].w->ops == &cgr__remote_ops)
			c->progs[i].w->busy_with = c;
	send_ranks(c, CGR__RM_RUN, 0, SIZE_MAX);
}

static void remote_graph_stop(cgr_compiled *c, int64_t deadline)
{
	int64_t left = deadline - cgr__now_ns();

	/* Its answer must be back by the deadline: it stops a little
	 * before (an eighth, at most 10 ms: far more than a round trip). */
	if (rg_of(c) != NULL)
		send_ranks(c, CGR__RM_TEARDOWN,
			   left - (left / 8 < 10000000 ? left / 8 : 10000000),
			   SIZE_MAX);
}

static int remote_graph_wait(cgr_compiled *c, int64_t deadline,
			     uint32_t *held)
{
	struct rgraph *rg = rg_of(c);
	struct cgr_job *j = c->ctx->job;
	int result = 0;

	(void)held; /* another host holds nothing of c here */
	if (rg == NULL)
		return 0;
	for (size_t i = 0; i < c->nprogs; i++)
		if (c->progs[i].w->ops == &cgr__remote_ops)
			c->progs[i].w->busy_with = NULL;
	for (size_t i = 0; i < rg->nranks; i++) {
		struct cgr__cmsg *r;
		int ret = cgr__job_await(j, rg->ranks[i], CGR__RM_LEFT,
					 rg->gid, deadline, &r);
		if (ret == 0) {
			if (r->m.code == CGR_ESTUCK) {
				cgr__err(&c->ctx->log,
					 "teardown: on rank %u (host %s): %s, "
					 "stuck past the deadline, abandoned "
					 "there: it can no longer be used",
					 rg->ranks[i],
					 j->peers[rg->ranks[i]].host,
					 r->m.text[0] ? r->m.text :
							"a worker");
				result = CGR_ESTUCK;
			}
			free(r);
		} else if (ret == -ETIMEDOUT) {
			cgr__err(&c->ctx->log,
				 "teardown: rank %u (host %s) did not leave "
				 "the graph by the deadline",
				 rg->ranks[i], j->peers[rg->ranks[i]].host);
			result = CGR_ESTUCK;
		}
	}
	rg_off(c);
	return result;
}

const struct cgr__worker_ops cgr__remote_ops = {
	.name = "remote",
	.shared = false,
	.other_host = true,
	.create = remote_create,
	.destroy = remote_destroy,
	.free = remote_free,
	.dead = remote_dead,
	.check_task = remote_check_task,
	.graph_prepare = remote_graph_prepare,
	.graph_drop = remote_graph_drop,
	.graph_start = remote_graph_start,
	.graph_stop = remote_graph_stop,
	.graph_wait = remote_graph_wait,
};
