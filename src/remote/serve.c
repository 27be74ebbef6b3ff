/*
 * remote/serve.c: a rank that serves the driver (cgr_job_serve).
 *
 * The rank becomes a small cgr host, as a worker process does
 * (proc/agent.c): a context of its own whose thread workers are the
 * driver's workers of this rank (each at the driver's worker index), and
 * a stand-in for every other worker of the driver's context
 * (cgr__far_stand_in_ops: on another host, so what its channels carry
 * goes through the link).  It then serves the driver's control messages:
 * a worker to create (its init and fini by exported name) or stop, a
 * graph to compile (made again from the description, laid out here, its
 * channels to and from other hosts handed to the link: bridge.c), to run,
 * to tear down or drop, and at last the driver's leaving (END).  A driver
 * that is lost ends it too: every graph is torn down, every worker
 * stopped, and the call returns CGR_EHOSTLOST.
 *
 * Threads: the thread that called cgr_job_serve; the workers' threads run
 * the programs; the link thread carries the messages.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"
#include "remote/remote.h"

const struct cgr__worker_ops cgr__far_stand_in_ops = {
	.name = "stand-in on another host",
	.shared = false,
	.other_host = true,
};

struct sgraph {
	struct sgraph *next;
	uint64_t gid;
	cgr_graph *g;
	cgr_compiled *c;
	bool started;
};

struct server {
	struct cgr_job *j;
	const cgr_export *ex;
	cgr_ctx *ctx;
	/* By the driver's worker index: this rank's workers (and their
	 * arg_data), and stand-ins for the others. */
	cgr_worker **local;
	void **args;
	cgr_worker **stand;
	unsigned nidx;
	struct sgraph *graphs;
	/* While a graph is made again: the rank of each worker index. */
	const uint32_t *ranks;
	uint32_t nranks;
};

static int reply(struct server *s, uint32_t type, uint64_t gid, int code,
		 const char *text)
{
	struct cgr__rmsg m;

	memset(&m, 0, sizeof(m));
	m.type = type;
	m.gid = gid;
	m.code = code;
	snprintf(m.text, sizeof(m.text), "%s", text != NULL ? text : "");
	return cgr__job_send(s->j, s->j->driver, &m, NULL, 0);
}

/* Room for worker index i in the tables: 0 or -ENOMEM. */
static int grow(struct server *s, unsigned i)
{
	unsigned n = i + 1;
	cgr_worker **l, **st;
	void **a;

	if (i < s->nidx)
		return 0;
	l = realloc(s->local, n * sizeof(*l));
	if (l != NULL)
		s->local = l;
	st = realloc(s->stand, n * sizeof(*st));
	if (st != NULL)
		s->stand = st;
	a = realloc(s->args, n * sizeof(*a));
	if (a != NULL)
		s->args = a;
	if (l == NULL || st == NULL || a == NULL)
		return -ENOMEM;
	for (unsigned k = s->nidx; k < n; k++)
		s->local[k] = s->stand[k] = NULL, s->args[k] = NULL;
	s->nidx = n;
	return 0;
}

/* The context of this rank's workers, made at the first SPEC: the
 * driver's log level and flags, and the GPU libraries its context loads
 * (text: the CUDA runtime's file, NUL, NCCL's, NUL; "": by soname). */
static int ctx_make(struct server *s, const struct cgr__rmsg *m)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	char libs[sizeof(m->text) + 1];
	size_t a;
	int ret;

	if (s->ctx != NULL)
		return 0;
	cp.log_fn = s->j->log.fn;
	cp.log_arg = s->j->log.arg;
	cp.log_level = m->log_level;
	cp.flags = m->flags;
	cp.exports = s->ex;
	memcpy(libs, m->text, sizeof(m->text));
	libs[sizeof(m->text)] = 0;
	a = strlen(libs);
	cp.cudart_path = libs[0] ? libs : NULL;
	cp.nccl_path = a < sizeof(m->text) && libs[a + 1] ? libs + a + 1 : NULL;
	if ((ret = cgr_ctx_create(&cp, &s->ctx)) < 0)
		return ret;
	s->ctx->job = s->j;
	s->ctx->link_bell = &s->j->quiet;
	s->ctx->driver_far = true;
	s->ctx->host = s->j->rank;
	s->ctx->comm_ids = (uint64_t)s->j->rank << 40;
	return 0;
}

static const cgr_export *export_named(const cgr_export *ex, const char *n)
{
	for (; ex != NULL && ex->name != NULL; ex++)
		if (strcmp(ex->name, n) == 0 &&
		    (ex->init != NULL || ex->fini != NULL))
			return ex;
	return NULL;
}

/* SPEC: the worker, its init run; READY says how it went. */
static void spec(struct server *s, const struct cgr__cmsg *cm)
{
	const struct cgr__rmsg *m = &cm->m;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	const cgr_export *e = NULL;
	char text[200] = "";
	cgr_worker *w = NULL;
	void *arg = NULL;
	int ret = ctx_make(s, m);

	if (ret == 0)
		ret = grow(s, m->index);
	if (ret == 0 && s->local[m->index] != NULL)
		ret = -EEXIST, snprintf(text, sizeof(text),
					"worker index %u is taken", m->index);
	if (ret == 0 && m->fn[0] && (e = export_named(s->ex, m->fn)) == NULL)
		ret = -ENOENT, snprintf(text, sizeof(text),
					"its init/fini '%s' is not exported "
					"by this program",
					m->fn);
	if (ret == 0 && m->payload > 0 &&
	    (arg = malloc((size_t)m->payload)) == NULL)
		ret = -ENOMEM;
	if (ret == 0) {
		if (m->payload > 0)
			memcpy(arg, cm->payload, (size_t)m->payload);
		wp.name = m->name;
		wp.cpu = m->cpu;
		wp.device = m->device;
		wp.init = e != NULL ? e->init : NULL;
		wp.fini = e != NULL ? e->fini : NULL;
		wp.arg = arg;
		ret = cgr_worker_create(s->ctx, &wp, &w);
		if (ret == CGR_EPEERDEAD)
			snprintf(text, sizeof(text),
				 "its thread exited inside its init");
	}
	if (ret == 0) {
		/* The driver's index: the graphs' doorbells and ranks go by
		 * it. */
		w->index = m->index;
		if (s->ctx->nworkers <= m->index)
			s->ctx->nworkers = m->index + 1;
		s->local[m->index] = w;
		s->args[m->index] = arg;
	} else {
		free(arg);
	}
	reply(s, CGR__RM_READY, m->gid, ret, text);
}

/* STOP: worker index m->index's fini, by the timeout; BYE. */
static void stop(struct server *s, const struct cgr__rmsg *m)
{
	int ret = -ENOENT;

	if (m->index < s->nidx && s->local[m->index] != NULL) {
		ret = cgr_worker_destroy(s->local[m->index], m->timeout_ns);
		s->local[m->index] = NULL;
	}
	reply(s, CGR__RM_BYE, m->gid, ret, "");
}

static int stand_in(void *arg, unsigned index, int device, const char *name,
		    cgr_worker **out)
{
	struct server *s = arg;
	cgr_worker *w;

	if (grow(s, index) < 0)
		return -ENOMEM;
	if (s->local[index] != NULL) {
		*out = s->local[index];
		return 0;
	}
	if ((w = s->stand[index]) == NULL) {
		w = cgr__alloc(&s->ctx->arena, sizeof(*w), 64);
		if (w == NULL)
			return -ENOMEM;
		memset(w, 0, sizeof(*w));
		w->ctx = s->ctx;
		w->index = index;
		w->ops = &cgr__far_stand_in_ops;
		s->stand[index] = w;
	}
	cgr__strfree(&s->ctx->arena, w->name);
	w->name = cgr__strdup(&s->ctx->arena, name);
	w->device = device;
	w->host = index < s->nranks ? s->ranks[index] : s->j->driver;
	if (s->ctx->nworkers <= index)
		s->ctx->nworkers = index + 1;
	*out = w;
	return w->name != NULL ? 0 : -ENOMEM;
}

/* COMPILE: the graph made again from its description, compiled here, its
 * channels to other hosts handed to the link. */
static int compile(struct server *s, const struct cgr__cmsg *cm, char *why,
		   size_t wlen)
{
	const struct cgr__rmsg *m = &cm->m;
	struct cgr__unpack_cb cb = { stand_in, s };
	size_t rlen = (size_t)m->nranks * sizeof(uint32_t), blen;
	uint32_t *ranks = NULL;
	cgr_compile_params p;
	struct sgraph *sg;
	int ret;

	if (s->ctx == NULL || m->payload < rlen) {
		snprintf(why, wlen, "a graph without its workers");
		return -EPROTO;
	}
	blen = (size_t)m->payload - rlen;
	if ((sg = calloc(1, sizeof(*sg))) == NULL ||
	    (ranks = malloc(rlen + 1)) == NULL) {
		free(sg);
		return -ENOMEM;
	}
	memcpy(ranks, cm->payload + blen, rlen);
	sg->gid = m->gid;
	s->ranks = ranks;
	s->nranks = m->nranks;
	ret = cgr__graph_unpack(s->ctx, cm->payload, blen, &cb, &sg->g, &p,
				why, wlen);
	s->ranks = NULL;
	s->nranks = 0;
	if (ret == 0 && (ret = cgr__graph_build(sg->g, &p, -1, &sg->c)) < 0)
		snprintf(why, wlen, "%s", cgr_graph_errmsg(sg->g));
	if (ret == 0 &&
	    (ret = cgr__bridge_add(s->j, sg->c, sg->gid, ranks, m->nranks)) <
		    0)
		cgr__compiled_unref(sg->c);
	free(ranks);
	if (ret < 0) {
		cgr_graph_destroy(sg->g);
		free(sg);
		return ret;
	}
	sg->next = s->graphs;
	s->graphs = sg;
	return 0;
}

static struct sgraph **graph_of(struct server *s, uint64_t gid)
{
	struct sgraph **pp;

	for (pp = &s->graphs; *pp != NULL && (*pp)->gid != gid;
	     pp = &(*pp)->next)
		;
	return pp;
}

/* Tears graph *pp down (timeout) and forgets it: teardown's result. */
/* The workers of c that its teardown abandoned, for the driver's log:
 * "worker W (in task T), ...". */
static void stuck_text(const cgr_compiled *c, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < c->nprogs && at < len; i++) {
		const cgr_worker *w = c->progs[i].w;
		const char *t = atomic_load(&w->current_task);
		int n;
		if (!w->abandoned)
			continue;
		n = snprintf(buf + at, len - at, "%sworker %s (in task %s)",
			     at > 0 ? ", " : "", w->name,
			     t != NULL ? t : "(none)");
		at += n > 0 ? (size_t)n : 0;
	}
}

/* Tears down and drops graph *pp; text (NULL: none): the workers it
 * abandoned, if any. */
static int graph_end(struct server *s, struct sgraph **pp, int64_t timeout,
		     char *text, size_t len)
{
	struct sgraph *sg = *pp;
	int ret = 0;

	*pp = sg->next;
	if (sg->started)
		ret = cgr_compiled_teardown(sg->c, timeout);
	if (ret == CGR_ESTUCK && text != NULL)
		stuck_text(sg->c, text, len);
	/* Nothing more arrives into its slots. */
	cgr__bridge_remove(s->j, sg->c);
	if (sg->started)
		cgr_compiled_destroy(sg->c);
	else
		cgr__compiled_unref(sg->c);
	cgr_graph_destroy(sg->g);
	free(sg);
	return ret;
}

/* Everything ends: graphs, workers, the context. */
static void shut(struct server *s, int64_t timeout)
{
	while (s->graphs != NULL)
		graph_end(s, &s->graphs, timeout, NULL, 0);
	/* Shares of communicators the driver did not free (rcomm.c). */
	while (s->ctx != NULL && s->ctx->comms != NULL)
		cgr_comm_destroy(s->ctx->comms);
	for (unsigned i = 0; i < s->nidx; i++) {
		if (s->local[i] != NULL)
			cgr_worker_destroy(s->local[i], timeout);
		if (s->stand[i] != NULL) {
			cgr__strfree(&s->ctx->arena, s->stand[i]->name);
			cgr__free(&s->ctx->arena, s->stand[i],
				  sizeof(*s->stand[i]), 64);
		}
	}
	if (s->ctx != NULL)
		cgr_ctx_destroy(s->ctx);
	for (unsigned i = 0; i < s->nidx; i++)
		free(s->args[i]);
	free(s->local);
	free(s->stand);
	free(s->args);
}

/* One message; 1 once the driver left. */
static int serve_one(struct server *s, const struct cgr__cmsg *cm)
{
	const struct cgr__rmsg *m = &cm->m;
	struct sgraph **pp = graph_of(s, m->gid);
	char why[400] = "";
	int ret;

	switch (m->type) {
	case CGR__RM_SPEC:
		spec(s, cm);
		return 0;
	case CGR__RM_STOP:
		stop(s, m);
		return 0;
	case CGR__RM_COMPILE:
		ret = *pp != NULL ? -EEXIST : compile(s, cm, why, sizeof(why));
		reply(s, CGR__RM_COMPILED, m->gid, ret, why);
		return 0;
	case CGR__RM_COMM_NEW:
		ret = cgr__rcomm_serve_new(s->j, s->ctx, cm, s->local, s->nidx);
		reply(s, CGR__RM_COMM_MADE, m->gid, ret,
		      ret == -ENOENT ? "a member is not a worker of this host"
		      : ret != 0     ? cgr_strerror(ret)
				     : "");
		return 0;
	case CGR__RM_COMM_FREE:
		if (s->ctx != NULL)
			cgr_comm_destroy(cgr__comm_find(s->ctx, m->gid));
		return 0;
	case CGR__RM_RUN:
		if (*pp != NULL && !(*pp)->started) {
			(*pp)->started = true;
			cgr__compiled_start(s->ctx, (*pp)->c);
		}
		return 0;
	case CGR__RM_TEARDOWN:
	case CGR__RM_DROP: {
		char stuck[sizeof(m->text)] = "";
		ret = *pp != NULL ? graph_end(s, pp, m->timeout_ns, stuck,
					      sizeof(stuck)) :
				    0;
		if (m->type == CGR__RM_TEARDOWN)
			reply(s, CGR__RM_LEFT, m->gid, ret, stuck);
		return 0;
	}
	case CGR__RM_END: {
		/* Ending (link.c, end_all): the driver's GONE once every rank
		 * knows, or a deadline. */
		struct cgr__cmsg *gone;
		atomic_store(&s->j->ending, 1);
		s->j->lost_any = m->code != 0; /* the driver lost a rank */
		reply(s, CGR__RM_ENDING, 0, 0, "");
		if (cgr__job_await(s->j, s->j->driver, CGR__RM_GONE, 0,
				   cgr__now_ns() + s->j->deadline_ns,
				   &gone) == 0)
			free(gone);
		return 1;
	}
	case CGR__RM_GONE:
		return 1;
	default:
		cgr__err(&s->j->log, "rank %u: a control message of type %u: "
				     "ignored",
			 s->j->rank, m->type);
		return 0;
	}
}

int cgr_job_serve(cgr_job *j, const cgr_export *exports)
{
	struct server s;
	int ret;

	if (j == NULL || j->rank == j->driver)
		return -EINVAL;
	memset(&s, 0, sizeof(s));
	s.j = j;
	s.ex = exports;
#ifdef CGR_FAULT_INJECTION
	j->debug_late = getenv("CGR_TEST_LATE_MESSAGES") != NULL;
#endif
	for (;;) {
		struct cgr__cmsg *cm;
		ret = cgr__job_await(j, j->driver, 0, 0, CGR_FOREVER, &cm);
		if (ret < 0)
			break; /* the driver was lost */
		ret = serve_one(&s, cm);
		free(cm);
		if (ret)
			break;
	}
	shut(&s, 1000000000);
	return ret < 0 ? CGR_EHOSTLOST : 0;
}
