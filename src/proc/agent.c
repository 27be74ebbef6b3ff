/*
 * proc/agent.c: a worker process (cgr_worker_main).
 *
 * The process joins its context's rendezvous (the address in
 * CGR_WORKER), learns who it is, and becomes a small cgr host: a context
 * of its own with one thread worker (its reactor and init, by exported
 * name) at the driver's worker index, and a stand-in for every other
 * worker of the driver's context (stand_in_ops: its programs run
 * elsewhere).  Its main thread then serves the driver's control
 * messages: a graph to compile (rebuilt from the description in the
 * graph's segment, compiled over that segment, so its program shares the
 * driver's ports, rings and doorbells), to run, to tear down; and at
 * last stop (fini, then exit).  The driver hanging up, which it does by
 * dying, ends the process at once; so does the worker's thread ending
 * inside a task (pthread_exit), once its graph was stopped with the
 * reason (agent_lost: the context's struct cgr__worker_host).
 *
 * Threads: the main thread; the worker's thread runs the programs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "compile/compile.h"
#include "proc/proc.h"
#include "shm/boot.h"

struct agraph {
	uint64_t gid;
	cgr_graph *g;
	cgr_compiled *c;
	bool started; /* its program was posted */
	struct agraph *next;
};

struct agent {
	int sock;
	cgr_ctx *ctx;
	cgr_worker *self;
	unsigned index; /* self's in the driver's context */
	char name[64];
	cgr_worker **stand; /* by index: stand-ins (NULL: none yet) */
	unsigned nstand;
	struct agraph *graphs;
	void *arg;
	size_t arg_len;
};

static void log_stderr(void *arg, int level, const char *msg)
{
	const struct agent *a = arg;
	(void)level;
	fprintf(stderr, "cgr worker %s (pid %d): %s\n", a->name, (int)getpid(),
		msg);
}

static const cgr_export *export_named(const cgr_export *ex, const char *n)
{
	for (; ex != NULL && ex->name != NULL; ex++)
		if (strcmp(ex->name, n) == 0 &&
		    (ex->init != NULL || ex->fini != NULL))
			return ex;
	return NULL;
}

static int reply(struct agent *a, int type, uint64_t gid, int code,
		 const char *text)
{
	struct cgr__pmsg m;

	cgr__pmsg_init(&m, type, gid);
	m.code = code;
	snprintf(m.text, sizeof(m.text), "%s", text != NULL ? text : "");
	return cgr__shm_send(a->sock, &m, sizeof(m), NULL, 0);
}

/* The worker's thread ended inside a task (pthread_exit): its graph
 * was stopped with the reason in the graph's shared state, where the
 * driver reads it; this process serves no more (the driver sees it end). */
static void agent_lost(cgr_worker *w)
{
	(void)w;
	/* The system call itself: a sanitizer's _exit would wait for this
	 * thread, which is ending. */
	syscall(SYS_exit_group, 1);
}

/* This context hosts a worker of the driver's (thread/thread.c reads
 * it). */
static struct cgr__worker_host agent_host = { agent_lost };

static int host_make(cgr_ctx *ctx, void **out)
{
	(void)ctx;
	*out = &agent_host;
	return 0;
}

/* A stand-in for a worker of the driver's context whose programs run
 * elsewhere (in the driver, or in another worker process): it only names
 * it in the graph made again here; nothing here starts, stops or
 * watches it. */
static const struct cgr__worker_ops stand_in_ops = {
	.name = "stand-in",
	.shared = false,
};

/* The context and the worker of SPEC m; READY says how init went. */
static int become(struct agent *a, const struct cgr__pmsg *m,
		  const cgr_export *ex)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	const cgr_export *e = NULL;
	char text[200] = "";
	void *host;
	int ret;

	snprintf(a->name, sizeof(a->name), "%s", m->name);
	a->index = m->index;
	cp.log_fn = log_stderr;
	cp.log_arg = a;
	cp.log_level = m->log_level;
	cp.flags = m->flags;
	cp.exports = ex;
	ret = cgr_ctx_create(&cp, &a->ctx);
	if (ret == 0)
		ret = cgr__ctx_state(a->ctx, &cgr__worker_host_key, host_make,
				     NULL, &host);
	if (ret == 0 && m->fn[0] && (e = export_named(ex, m->fn)) == NULL) {
		snprintf(text, sizeof(text),
			 "its init/fini '%s' is not exported by this program",
			 m->fn);
		cgr__err(&a->ctx->log, "%s: exiting", text);
		ret = -ENOENT;
	}
	if (ret == 0) {
		wp.name = m->name;
		wp.cpu = m->cpu;
		wp.device = m->device;
		wp.init = e != NULL ? e->init : NULL;
		wp.fini = e != NULL ? e->fini : NULL;
		wp.arg = a->arg;
		ret = cgr_worker_create(a->ctx, &wp, &a->self);
		if (ret == CGR_EPEERDEAD)
			snprintf(text, sizeof(text),
				 "its thread exited inside its init");
	}
	if (ret == 0) {
		/* The driver's index: the graph's doorbells go by it. */
		a->self->index = a->index;
		if (a->ctx->nworkers <= a->index)
			a->ctx->nworkers = a->index + 1;
		prctl(PR_SET_NAME, a->name, 0, 0, 0);
	}
	reply(a, CGR__PMSG_READY, 0, ret, text);
	return ret;
}

/* ---- graphs --------------------------------------------------------- */

static int stand_in(void *arg, unsigned index, int device, const char *name,
		    cgr_worker **out)
{
	struct agent *a = arg;
	cgr_worker *w;

	if (index == a->index) {
		*out = a->self;
		return 0;
	}
	if (index >= a->nstand) {
		unsigned n = index + 1;
		cgr_worker **ns = cgr__alloc(&a->ctx->arena, n * sizeof(*ns),
					     16);
		if (ns == NULL)
			return -ENOMEM;
		memset(ns, 0, n * sizeof(*ns));
		if (a->nstand)
			memcpy(ns, a->stand, a->nstand * sizeof(*ns));
		cgr__free(&a->ctx->arena, a->stand, a->nstand * sizeof(*ns),
			  16);
		a->stand = ns;
		a->nstand = n;
	}
	if ((w = a->stand[index]) == NULL) {
		w = cgr__alloc(&a->ctx->arena, sizeof(*w), 64);
		if (w == NULL)
			return -ENOMEM;
		memset(w, 0, sizeof(*w));
		w->ctx = a->ctx;
		w->index = index;
		w->ops = &stand_in_ops;
		a->stand[index] = w;
	}
	/* The driver's name and device of this graph's time. */
	cgr__strfree(&a->ctx->arena, w->name);
	w->name = cgr__strdup(&a->ctx->arena, name);
	w->device = device;
	if (a->ctx->nworkers <= index)
		a->ctx->nworkers = index + 1;
	*out = w;
	return w->name != NULL ? 0 : -ENOMEM;
}

/* Graph gid from the segment behind fd, compiled over it. */
static int compile_one(struct agent *a, uint64_t gid, int fd, char *why,
		       size_t len)
{
	struct cgr__unpack_cb cb = { stand_in, a };
	cgr_compile_params p;
	struct agraph *ag;
	struct cgr__shm view;
	const struct cgr__shm_hdr *h;
	int ret;

	ret = cgr__shm_attach(fd, CGR__SHM_GRAPH, NULL, &view, why, len);
	if (ret < 0)
		return ret;
	h = view.addr;
	ag = cgr__alloc(&a->ctx->arena, sizeof(*ag), 64);
	if (ag == NULL) {
		cgr__shm_close(&view);
		return -ENOMEM;
	}
	memset(ag, 0, sizeof(*ag));
	ag->gid = gid;
	if (h->geom[1] > view.size || h->geom[2] > view.size - h->geom[1])
		ret = -EPROTO, snprintf(why, len, "the graph's description "
						  "lies outside its segment");
	else
		ret = cgr__graph_unpack(a->ctx,
					(const unsigned char *)view.addr +
						h->geom[1],
					h->geom[2], &cb, &ag->g, &p, why, len);
	cgr__shm_close(&view);
	if (ret == 0) {
		ret = cgr__graph_build(ag->g, &p, fd, &ag->c);
		if (ret < 0)
			snprintf(why, len, "%s", cgr_graph_errmsg(ag->g));
	}
	if (ret < 0) {
		cgr_graph_destroy(ag->g);
		cgr__free(&a->ctx->arena, ag, sizeof(*ag), 64);
		return ret;
	}
	ag->next = a->graphs;
	a->graphs = ag;
	return 0;
}

static struct agraph **graph_of(struct agent *a, uint64_t gid)
{
	struct agraph **pp;

	for (pp = &a->graphs; *pp != NULL && (*pp)->gid != gid;
	     pp = &(*pp)->next)
		;
	return pp;
}

/* Tears graph *pp down (timeout), drops it: teardown's result. */
static int graph_end(struct agent *a, struct agraph **pp, int64_t timeout)
{
	struct agraph *ag = *pp;
	int ret;

	*pp = ag->next;
	if (!ag->started) {
		/* Dropped before it ran: nothing to stop. */
		cgr__compiled_unref(ag->c);
		ret = 0;
	} else {
		ret = cgr_compiled_teardown(ag->c, timeout);
		cgr_compiled_destroy(ag->c);
	}
	cgr_graph_destroy(ag->g);
	cgr__free(&a->ctx->arena, ag, sizeof(*ag), 64);
	return ret;
}

/* ---- the control loop ---------------------------------------------- */

/* What is left of a STOP's time until end (0 stays 0: abandon). */
static int64_t left_ns(const struct cgr__pmsg *m, int64_t end)
{
	int64_t left = end - cgr__now_ns();

	return m->timeout_ns <= 0 ? m->timeout_ns : left > 0 ? left : 1;
}

/* One message; 1 once the agent is to exit (its status in *status). */
static int serve(struct agent *a, const struct cgr__pmsg *m, int fd,
		 int *status)
{
	struct agraph **pp = graph_of(a, m->gid);
	char why[400] = "";
	int ret;

	switch (m->type) {
	case CGR__PMSG_COMPILE:
		if (fd == -EMFILE) { /* lost to our limit (agent_loop) */
			ret = -EMFILE;
			snprintf(why, sizeof(why),
				 "cannot receive the graph's shared segment: "
				 "%s",
				 cgr_strerror(ret));
		} else {
			ret = fd < 0 ? -EPROTO :
				       compile_one(a, m->gid, fd, why,
						   sizeof(why));
		}
		reply(a, CGR__PMSG_COMPILED, m->gid, ret, why);
		return 0;
	case CGR__PMSG_RUN:
		if (*pp != NULL && !(*pp)->started) {
			(*pp)->started = true;
			cgr__compiled_start(a->ctx, (*pp)->c);
		}
		return 0;
	case CGR__PMSG_TEARDOWN:
	case CGR__PMSG_DROP:
		ret = *pp != NULL ? graph_end(a, pp, m->timeout_ns) : 0;
		if (m->type == CGR__PMSG_TEARDOWN)
			reply(a, CGR__PMSG_LEFT, m->gid, ret, "");
		return 0;
	case CGR__PMSG_STOP: {
		/* One deadline for all: fini gets what the graphs left. */
		int64_t end = cgr__now_ns() + m->timeout_ns;
		while (a->graphs != NULL)
			graph_end(a, &a->graphs, left_ns(m, end));
		ret = cgr_worker_destroy(a->self, left_ns(m, end));
		reply(a, CGR__PMSG_BYE, 0, ret, "");
		*status = ret == 0 ? 0 : 1;
		return 1;
	}
	default:
		fprintf(stderr,
			"cgr worker %s: a control message of type %u: "
			"exiting\n",
			a->name, m->type);
		*status = 1;
		return 1;
	}
}

static int agent_loop(struct agent *a)
{
	for (;;) {
		struct cgr__pmsg m;
		int fd = -1, status = 1;
		int ret = cgr__pmsg_recv(a->sock, &m, &fd, CGR_FOREVER);
		if (ret == -EMFILE) {
			/* Its descriptor was lost to our limit: the message
			 * fails (serve), the worker lives on. */
			fd = -EMFILE;
			ret = 0;
		}
		if (ret < 0) {
			/* The driver is gone (or speaks nonsense): exit
			 * now, whatever the worker is doing. */
			if (ret != -ECONNRESET)
				fprintf(stderr,
					"cgr worker %s: control: %s: exiting\n",
					a->name, cgr_strerror(ret));
			return 1;
		}
		ret = serve(a, &m, fd, &status);
		if (fd >= 0)
			close(fd);
		if (ret)
			return status;
	}
}

/* The SPEC message and its arg bytes. */
static int take_spec(struct agent *a, struct cgr__pmsg *m)
{
	int64_t deadline = cgr__deadline(10 * 1000000000ll);
	size_t n = 0, nf = 0;
	int ret = cgr__pmsg_recv(a->sock, m, NULL, deadline);

	if (ret == 0 && (m->type != CGR__PMSG_SPEC ||
			 m->arg_len > CGR__PMSG_MAX_ARG))
		ret = -EPROTO;
	if (ret == 0 && m->arg_len > 0) {
		a->arg = malloc(m->arg_len);
		if (a->arg == NULL)
			return -ENOMEM;
		ret = cgr__shm_recv(a->sock, a->arg, m->arg_len, &n, NULL, 0,
				    &nf, deadline);
		if (ret == 0 && n != m->arg_len)
			ret = -EPROTO;
		a->arg_len = n;
	}
	return ret;
}

static int agent_run(const char *addr, const cgr_export *ex)
{
	struct agent a;
	struct cgr__pmsg m;
	char why[256] = "";
	int nranks, status = 1;

	memset(&a, 0, sizeof(a));
	snprintf(a.name, sizeof(a.name), "?");
	a.sock = cgr__boot_join(addr, 0, cgr__deadline(10 * 1000000000ll),
				&nranks, why, sizeof(why));
	if (a.sock < 0) {
		fprintf(stderr, "cgr worker (pid %d): joining %s: %s\n",
			(int)getpid(), addr, why[0] ? why : "failed");
		return 1;
	}
	if (take_spec(&a, &m) < 0)
		fprintf(stderr, "cgr worker (pid %d): no valid identity from "
				"the context: exiting\n",
			(int)getpid());
	else if (become(&a, &m, ex) == 0)
		status = agent_loop(&a);
	if (a.ctx != NULL && status == 0) {
		for (unsigned i = 0; i < a.nstand; i++)
			if (a.stand[i] != NULL) {
				cgr__strfree(&a.ctx->arena, a.stand[i]->name);
				cgr__free(&a.ctx->arena, a.stand[i],
					  sizeof(*a.stand[i]), 64);
			}
		cgr__free(&a.ctx->arena, a.stand, a.nstand * sizeof(*a.stand),
			  16);
		cgr_ctx_destroy(a.ctx);
	}
	close(a.sock);
	free(a.arg);
	return status;
}

int cgr_worker_main(int argc, char **argv, const cgr_export *exports)
{
	const char *addr = getenv(CGR__WORKER_ENV);
	char buf[CGR__BOOT_ADDR_LEN];

	(void)argc, (void)argv;
	if (addr == NULL)
		return 0;
	if (addr[0] == 0) {
		fprintf(stderr, "cgr worker: %s is set but empty (no address "
				"to join): exiting\n",
			CGR__WORKER_ENV);
		exit(1);
	}
	if (strlen(addr) >= sizeof(buf)) {
		/* Cut short, it could name another context's address. */
		fprintf(stderr,
			"cgr worker: %s is %zu bytes long, at most %zu: "
			"exiting\n",
			CGR__WORKER_ENV, strlen(addr), sizeof(buf) - 1);
		exit(1);
	}
	snprintf(buf, sizeof(buf), "%s", addr);
	/* Not for what this process may start in turn. */
	unsetenv(CGR__WORKER_ENV);
	exit(agent_run(buf, exports));
}

int cgr_worker_join(const char *join_addr, const cgr_export *exports)
{
	if (join_addr == NULL || strlen(join_addr) >= CGR__BOOT_ADDR_LEN)
		return 1;
	return agent_run(join_addr, exports);
}
