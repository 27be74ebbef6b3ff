/*
 * proc/proc.c: process workers, the driver's side (cgr__proc_ops, see
 * graph/worker.h).
 *
 * cgr_worker_create of a CGR_WORKER_PROCESS starts this program again
 * (/proc/self/exe, the same arguments, CGR_WORKER=<address> in its
 * environment) and meets it on an abstract Unix address (shm/boot.c); the
 * connection then carries control messages (struct cgr__pmsg, one per
 * SOCK_SEQPACKET message): the worker's identity and init by exported
 * name, then per graph compile (with the graph's segment), run,
 * teardown, and finally stop.  The worker side is proc/agent.c.
 *
 * Death: a monitor thread per context polls every worker process's pidfd
 * (no timer: the kernel wakes it when the process exits).  A process that
 * dies without being told to stop fails every graph that uses it: in the
 * graph's shared state, who died and how, then stop, then every doorbell
 * rung, so the driver and every surviving worker (thread or process) see
 * it at once.  The driver may find out first: a message it cannot send
 * (EPIPE: the process ended, its socket closed) or a reply that never
 * comes (the connection hung up) is checked against the pidfd and
 * reported as the monitor would (peer_lost), so that every call that
 * talks to a dead worker returns CGR_EPEERDEAD saying how it died.
 * Teardown keeps to its deadline: each worker process is given a little
 * less, and one that has not left by the deadline (stuck in a task,
 * stopped) is killed then.  The driver reaps its children when it
 * destroys them.
 *
 * Its programs run in its process (not shared): a graph with process
 * workers lives in a shared segment whose description the worker
 * processes compile (prepare), run (start) and leave (stop, wait); a
 * graph's tasks on them cross by exported name, and what cannot cross
 * (device tasks, NCCL, the caller's communicators; eager steps) is
 * refused (check_task).  The monitor is the context's state of process
 * workers (cgr__ctx_state), stopped by cgr_ctx_destroy (ctx_release).
 *
 * Threads: the driver thread, except the monitor (under procs->lock).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/proc.h"
#include "shm/boot.h"

extern char **environ;

/* This file's ops table (at its end); the registry (drive/worker.c) names
 * it for CGR_WORKER_PROCESS. */
extern const struct cgr__worker_ops cgr__proc_ops;

#define BOOT_TIMEOUT_NS (10 * 1000000000ll)

/* A process worker's process (driver): its cgr_worker's impl. */
struct cgr__proc {
	struct cgr__procs *ps; /* its context's death monitor */
	/* Its exported init/fini (the name; "" none), arg_data's copy, and
	 * where it joins if something else starts it (join_addr). */
	char *init_name;
	void *arg_data;
	size_t arg_len;
	char *join_addr;
	int64_t join_timeout_ns;
	int pid;
	int pidfd, sock;
	_Atomic uint32_t dead; /* it ended (seen by the monitor or a reply) */
	bool stopping;	       /* told to stop: no failure to report */
	bool killed;	       /* by us (proc_kill): dead by now or soon */
	bool external;	       /* started by something else: not reaped */
	char why[160];	       /* how it ended */
};

static inline struct cgr__proc *proc_of(const cgr_worker *w)
{
	return w->impl;
}

/* A graph the monitor fails when one of its worker processes dies. */
struct cgr__pgraph {
	struct cgr__procs *ps; /* the monitor it is listed with */
	cgr_compiled *c;
	struct cgr__gctl *ctl;
	uint32_t nbells; /* the driver's count, not the shared one */
	cgr_worker **ws; /* its process workers */
	size_t nws;
	uint64_t gid; /* its id among the context's graphs */
	struct cgr__pgraph *next;
};

/* What this kind keeps of compiled graph c (its kind state under
 * cgr__proc_ops), or NULL. */
static struct cgr__pgraph *pgraph_of(const cgr_compiled *c)
{
	return cgr__c_kind_state(c, &cgr__proc_ops);
}

/* The context's state of process workers (cgr__ctx_state under
 * procs_key): made with the first one, its monitor stopped by
 * cgr_ctx_destroy (procs_stop), freed with the context. */
struct cgr__procs {
	pthread_t thread;
	int evfd;
	pthread_mutex_t lock;
	bool quit;
	bool stopped; /* the monitor was joined */
	cgr_worker **ws; /* live process workers */
	size_t nws, cap;
	struct cgr__pgraph *graphs;
	uint64_t next_gid;
};

/* ---- messages ------------------------------------------------------- */

void cgr__pmsg_init(struct cgr__pmsg *m, int type, uint64_t gid)
{
	memset(m, 0, sizeof(*m));
	m->magic = CGR__PMSG_MAGIC;
	m->version = CGR__PMSG_VERSION;
	m->type = (uint16_t)type;
	m->gid = gid;
}

int cgr__pmsg_recv(int sock, struct cgr__pmsg *m, int *fd, int64_t deadline)
{
	size_t n = 0, nf = 0;
	int fds[1] = { -1 };
	int ret = cgr__shm_recv(sock, m, sizeof(*m), &n, fds, fd ? 1 : 0, &nf,
				deadline);

	if ((ret == 0 || ret == -EMFILE) &&
	    (n != sizeof(*m) || m->magic != CGR__PMSG_MAGIC ||
	     m->version != CGR__PMSG_VERSION))
		ret = -EPROTO;
	if (ret < 0 && nf > 0)
		close(fds[0]);
	/* -EMFILE: a whole message whose descriptor was lost (the limit). */
	if (ret == 0 || ret == -EMFILE) {
		m->text[sizeof(m->text) - 1] = 0;
		m->name[sizeof(m->name) - 1] = 0;
		m->fn[sizeof(m->fn) - 1] = 0;
		if (fd != NULL)
			*fd = nf > 0 ? fds[0] : -1;
	}
	return ret;
}

/* ---- the monitor ---------------------------------------------------- */

/* How process w ended (it has), without reaping it. */
static void describe_death(cgr_worker *w)
{
	struct cgr__proc *pr = proc_of(w);
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	if (waitid((idtype_t)P_PIDFD, (id_t)pr->pidfd, &si,
		   WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
		snprintf(pr->why, sizeof(pr->why),
			 "worker %s (pid %d) died", w->name, (int)pr->pid);
	else if (si.si_code == CLD_EXITED)
		snprintf(pr->why, sizeof(pr->why),
			 "worker %s (pid %d) died: exited with status %d",
			 w->name, (int)pr->pid, si.si_status);
	else
		snprintf(pr->why, sizeof(pr->why),
			 "worker %s (pid %d) died: killed by signal %d (%s)",
			 w->name, (int)pr->pid, si.si_status,
			 strsignal(si.si_status));
}

/* Fails graph g: w died.  Under procs->lock. */
static void fail_graph(struct cgr__pgraph *g, cgr_worker *w)
{
	if (!cgr__graph_dead(g->c, w->index, proc_of(w)->why))
		return; /* somebody died first */
	/* Every doorbell, by the driver's count. */
	for (uint32_t i = 0; i < g->nbells; i++)
		cgr__bell_ring_force(&g->ctl->bells[i].b);
}

/* Process w ended.  Under procs->lock (every writer of dead holds it). */
static void saw_death(struct cgr__procs *ps, cgr_worker *w)
{
	struct cgr__proc *pr = proc_of(w);

	if (atomic_load_explicit(&pr->dead, memory_order_relaxed))
		return;
	if (!pr->why[0])
		describe_death(w);
	/* D1: how, then dead; pairs with the acquire of every reader of
	 * why (proc_dead, peer_lost's callers). */
	atomic_store_explicit(&pr->dead, 1, memory_order_release);
	if (pr->stopping)
		return; /* told to go */
	cgr__err(&w->ctx->log, "%s", pr->why);
	for (struct cgr__pgraph *g = ps->graphs; g != NULL; g = g->next)
		for (size_t i = 0; i < g->nws; i++)
			if (g->ws[i] == w)
				fail_graph(g, w);
}

static void *monitor(void *arg)
{
	struct cgr__procs *ps = arg;
	struct pollfd fds[CGR__PROC_MAX + 1];
	cgr_worker *who[CGR__PROC_MAX + 1];

	pthread_setname_np(pthread_self(), "cgr:monitor");
	for (;;) {
		nfds_t n = 1;
		uint64_t v;
		pthread_mutex_lock(&ps->lock);
		if (ps->quit) {
			pthread_mutex_unlock(&ps->lock);
			break;
		}
		fds[0] = (struct pollfd){ ps->evfd, POLLIN, 0 };
		for (size_t i = 0; i < ps->nws && n <= CGR__PROC_MAX; i++) {
			if (atomic_load(&proc_of(ps->ws[i])->dead))
				continue;
			who[n] = ps->ws[i];
			fds[n++] = (struct pollfd){ proc_of(ps->ws[i])->pidfd,
						    POLLIN, 0 };
		}
		pthread_mutex_unlock(&ps->lock);
		if (poll(fds, n, -1) < 0)
			continue; /* EINTR */
		if (fds[0].revents && read(ps->evfd, &v, sizeof(v)) < 0)
			v = 0;
		pthread_mutex_lock(&ps->lock);
		/* who[] may be stale: only workers still listed count. */
		for (nfds_t i = 1; i < n; i++)
			for (size_t k = 0; fds[i].revents && k < ps->nws; k++)
				if (ps->ws[k] == who[i])
					saw_death(ps, who[i]);
		pthread_mutex_unlock(&ps->lock);
	}
	return NULL;
}

static void poke(struct cgr__procs *ps)
{
	uint64_t one = 1;

	if (write(ps->evfd, &one, sizeof(one)) < 0)
		(void)0; /* the counter is full: it is awake anyway */
}

static const char procs_key = 0;

/* The monitor joined (once). */
static void procs_stop(struct cgr__procs *ps)
{
	if (ps->stopped)
		return;
	pthread_mutex_lock(&ps->lock);
	ps->quit = true;
	pthread_mutex_unlock(&ps->lock);
	poke(ps);
	pthread_join(ps->thread, NULL);
	close(ps->evfd);
	ps->stopped = true;
}

/* The state's end, with the context. */
static void procs_fini(cgr_ctx *ctx, void *p)
{
	struct cgr__procs *ps = p;

	procs_stop(ps);
	pthread_mutex_destroy(&ps->lock);
	cgr__free(&ctx->arena, ps->ws, ps->cap * sizeof(*ps->ws), 16);
	cgr__free(&ctx->arena, ps, sizeof(*ps), 64);
}

/* The state and its monitor, made with the context's first process
 * worker. */
static int procs_make(cgr_ctx *ctx, void **out)
{
	struct cgr__procs *ps = cgr__alloc(&ctx->arena, sizeof(*ps), 64);
	int ret;

	if (ps == NULL)
		return -ENOMEM;
	memset(ps, 0, sizeof(*ps));
	ps->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ps->evfd < 0) {
		ret = -errno;
		cgr__free(&ctx->arena, ps, sizeof(*ps), 64);
		return ret;
	}
	pthread_mutex_init(&ps->lock, NULL);
	ret = -pthread_create(&ps->thread, NULL, monitor, ps);
	if (ret < 0) {
		close(ps->evfd);
		pthread_mutex_destroy(&ps->lock);
		cgr__free(&ctx->arena, ps, sizeof(*ps), 64);
		return ret;
	}
	*out = ps;
	return 0;
}

static int procs_none(cgr_ctx *ctx, void **out)
{
	(void)ctx, (void)out;
	return -ENOENT;
}

/* ctx's state (made if make), or NULL (a negative errno: why). */
static int procs_get(cgr_ctx *ctx, bool make, struct cgr__procs **out)
{
	int (*mk)(cgr_ctx *, void **) = make ? procs_make : procs_none;
	void *p = NULL;
	int ret = cgr__ctx_state(ctx, &procs_key, mk, procs_fini, &p);

	*out = p;
	return ret;
}

/* cgr_ctx_destroy, once every worker was stopped: the monitor ends. */
static void proc_ctx_release(cgr_ctx *ctx)
{
	struct cgr__procs *ps;

	if (procs_get(ctx, false, &ps) == 0)
		procs_stop(ps);
}

/* Lists w with the monitor (or takes it off: add false). */
static int procs_list(cgr_worker *w, bool add)
{
	struct cgr__procs *ps = proc_of(w)->ps;
	int ret = 0;

	pthread_mutex_lock(&ps->lock);
	if (add && ps->nws == CGR__PROC_MAX) {
		ret = -EMFILE;
	} else if (add && ps->nws == ps->cap) {
		size_t cap = ps->cap ? 2 * ps->cap : 8;
		cgr_worker **nw =
			cgr__alloc(&w->ctx->arena, cap * sizeof(*nw), 16);
		if (nw == NULL) {
			ret = -ENOMEM;
		} else {
			if (ps->nws)
				memcpy(nw, ps->ws, ps->nws * sizeof(*nw));
			cgr__free(&w->ctx->arena, ps->ws,
				  ps->cap * sizeof(*nw), 16);
			ps->ws = nw;
			ps->cap = cap;
		}
	}
	if (ret == 0 && add) {
		ps->ws[ps->nws++] = w;
	} else if (ret == 0) {
		for (size_t i = 0; i < ps->nws; i++)
			if (ps->ws[i] == w) {
				ps->ws[i] = ps->ws[--ps->nws];
				break;
			}
	}
	pthread_mutex_unlock(&ps->lock);
	poke(ps);
	return ret;
}

/* ---- starting and stopping a worker process ------------------------- */

/* The whole of /proc/self/cmdline, NUL-terminated, in *out (malloc'd):
 * its length, or a negative errno.  On the heap: a driver thread may
 * have a small stack. */
static ssize_t read_cmdline(char **out)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap), *more;
	ssize_t r;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

	if (fd < 0 || buf == NULL) {
		r = fd < 0 ? -errno : -ENOMEM;
		if (fd >= 0)
			close(fd);
		free(buf);
		return r;
	}
	for (;;) {
		if (n + 1 >= cap) {
			if ((more = realloc(buf, cap * 2)) == NULL) {
				r = -ENOMEM;
				break;
			}
			buf = more;
			cap *= 2;
		}
		r = read(fd, buf + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			r = r < 0 ? -errno : 0;
			break;
		}
		n += (size_t)r;
	}
	close(fd);
	if (r < 0) {
		free(buf);
		return r;
	}
	if (n == 0 || buf[n - 1] != 0)
		buf[n++] = 0;
	*out = buf;
	return (ssize_t)n;
}

/* This program's arguments (/proc/self/cmdline), as an argv in one
 * allocation of *size bytes: 0, or a negative errno. */
static int self_argv(struct cgr__arena *a, char ***out, size_t *size)
{
	char *buf = NULL, **argv;
	size_t nargs = 0, off;
	ssize_t n = read_cmdline(&buf);

	if (n < 0)
		return (int)n;
	for (ssize_t i = 0; i < n; i++)
		nargs += buf[i] == 0;
	off = (nargs + 1) * sizeof(char *);
	*size = off + (size_t)n;
	argv = cgr__alloc(a, *size, 16);
	if (argv == NULL) {
		free(buf);
		return -ENOMEM;
	}
	memcpy((char *)argv + off, buf, (size_t)n);
	free(buf);
	for (size_t i = 0, k = 0; k < nargs; k++) {
		argv[k] = (char *)argv + off + i;
		i += strlen(argv[k]) + 1;
	}
	argv[nargs] = NULL;
	*out = argv;
	return 0;
}

/* The environment with CGR_WORKER=addr (every other CGR_WORKER gone). */
static char **worker_env(struct cgr__arena *a, const char *addr, char *var,
			 size_t vlen, size_t *size)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n] != NULL)
		n++;
	*size = (n + 2) * sizeof(char *);
	env = cgr__alloc(a, *size, 16);
	if (env == NULL)
		return NULL;
	snprintf(var, vlen, "%s=%s", CGR__WORKER_ENV, addr);
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], CGR__WORKER_ENV "=",
			    sizeof(CGR__WORKER_ENV)) != 0)
			env[k++] = environ[i];
	env[k++] = var;
	env[k] = NULL;
	return env;
}

static int spawn(cgr_worker *w, const char *addr)
{
	struct cgr__arena *a = &w->ctx->arena;
	size_t asize = 0, esize = 0;
	char var[128];
	char **argv = NULL;
	char **env = worker_env(a, addr, var, sizeof(var), &esize);
	pid_t pid;
	int ret = self_argv(a, &argv, &asize);

	if (ret < 0)
		cgr__err(&w->ctx->log,
			 "worker %s: cannot read this program's arguments "
			 "(/proc/self/cmdline): %s",
			 w->name, cgr_strerror(ret));
	else if (env == NULL)
		ret = -ENOMEM;
	else
		ret = -posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv,
				   env);
	if (argv != NULL)
		cgr__free(a, argv, asize, 16);
	cgr__free(a, env, esize, 16);
	if (ret < 0)
		return ret;
	proc_of(w)->pid = pid;
	proc_of(w)->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (proc_of(w)->pidfd < 0) {
		ret = -errno;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return ret;
	}
	fcntl(proc_of(w)->pidfd, F_SETFD, FD_CLOEXEC);
	return 0;
}

/* Waits for w's process to end by the deadline (then kills it), and
 * reaps it. */
static void reap(cgr_worker *w, int64_t deadline)
{
	struct cgr__proc *pr = proc_of(w);
	siginfo_t si;

	if (pr->pid <= 0)
		return;
	if (cgr__fd_wait_readable(pr->pidfd, deadline) == -ETIMEDOUT) {
		cgr__err(&w->ctx->log,
			 "worker %s (pid %d) did not exit by the deadline: "
			 "killed",
			 w->name, (int)pr->pid);
		syscall(SYS_pidfd_send_signal, pr->pidfd, SIGKILL, NULL, 0);
	}
	memset(&si, 0, sizeof(si));
	while (!pr->external &&
	       waitid((idtype_t)P_PIDFD, (id_t)pr->pidfd, &si, WEXITED) != 0 &&
	       errno == EINTR)
		;
	pr->pid = 0;
}

static void proc_close(cgr_worker *w)
{
	struct cgr__proc *pr = proc_of(w);

	if (pr->sock >= 0)
		close(pr->sock);
	if (pr->pidfd >= 0)
		close(pr->pidfd);
	pr->sock = pr->pidfd = -1;
}

/* How long a control connection that failed may stay ahead of its
 * process's end (the kernel closes the socket, then reports the exit:
 * microseconds apart). */
#define LOST_WAIT_NS (200 * 1000000ll)

/*
 * w's control connection failed (a send refused, or it hung up): its
 * process is ending, or ended before the monitor noticed.  Waits for the
 * end (until the deadline, at most LOST_WAIT_NS), then reports it as the
 * monitor does (how it ended in proc_of(w)->why, its graphs failed, the log
 * unless it was told to stop); one that is still there by then (it hung
 * up and lives on) is of no more use: it is killed.  CGR_EPEERDEAD.
 */
static int peer_lost(cgr_worker *w, int64_t deadline)
{
	struct cgr__procs *ps = proc_of(w)->ps;
	struct cgr__proc *pr = proc_of(w);
	int64_t soon = cgr__deadline(LOST_WAIT_NS);
	bool ended;

	/* D1: pairs with saw_death's release. */
	if (atomic_load_explicit(&pr->dead, memory_order_acquire))
		return CGR_EPEERDEAD;
	ended = cgr__fd_wait_readable(pr->pidfd, deadline < soon ? deadline :
								    soon) == 0;
	pthread_mutex_lock(&ps->lock);
	if (!ended && !atomic_load_explicit(&pr->dead, memory_order_relaxed)) {
		snprintf(pr->why, sizeof(pr->why),
			 "worker %s (pid %d) died: it hung up its control "
			 "connection and was killed",
			 w->name, (int)pr->pid);
		syscall(SYS_pidfd_send_signal, pr->pidfd, SIGKILL, NULL, 0);
	}
	saw_death(ps, w);
	pthread_mutex_unlock(&ps->lock);
	return CGR_EPEERDEAD;
}

/* A control message (and fds) to w: 0, CGR_EPEERDEAD (its connection is
 * gone: it died, peer_lost reported it; lost's deadline) or another
 * negative errno. */
static int psend(cgr_worker *w, const void *msg, size_t len, const int *fds,
		 size_t nfds, int64_t deadline)
{
	int ret = cgr__shm_send(proc_of(w)->sock, msg, len, fds, nfds);

	if (ret == -EPIPE || ret == -ECONNRESET || ret == -ENOTCONN)
		ret = peer_lost(w, deadline);
	return ret;
}

/* What a worker process is given to keep to when the driver waits for
 * its answer until `deadline`: a little less (an eighth, at most 10 ms),
 * so that its answer is back in time.  0 for CGR_FOREVER (unused). */
static int64_t worker_timeout(int64_t deadline)
{
	int64_t left = deadline == CGR_FOREVER ? 0 : deadline - cgr__now_ns();

	left -= left / 8 < 10000000 ? left / 8 : 10000000;
	return left > 0 ? left : 0;
}

/* The worker's reply of type `type` to what it was just sent, by the
 * deadline: 0 (*m), CGR_EPEERDEAD (it hung up: peer_lost says how it
 * ended), or -ETIMEDOUT. */
static int await(cgr_worker *w, struct cgr__pmsg *m, int type,
		 int64_t deadline)
{
	int ret = cgr__pmsg_recv(proc_of(w)->sock, m, NULL, deadline);

	if (ret == 0 && m->type != type)
		ret = -EPROTO;
	if (ret == -ECONNRESET)
		return peer_lost(w, deadline);
	if (ret == -EPROTO)
		cgr__err(&w->ctx->log,
			 "worker %s: a malformed control message (wanted "
			 "type %d)",
			 w->name, type);
	return ret;
}

/* The worker's identity and init: sent, and init's answer. */
static int start(cgr_worker *w)
{
	struct cgr__proc *pr = proc_of(w);
	struct cgr__pmsg m;
	int ret;

	cgr__pmsg_init(&m, CGR__PMSG_SPEC, 0);
	m.index = w->index;
	m.cpu = w->cpu;
	m.device = w->device;
	m.flags = w->ctx->flags;
	/* Its own diagnostics go to its stderr: none without a hook. */
	m.log_level = w->ctx->log.fn != NULL ? w->ctx->log.level : -1;
	m.arg_len = (uint32_t)pr->arg_len;
	snprintf(m.name, sizeof(m.name), "%s", w->name);
	snprintf(m.fn, sizeof(m.fn), "%s", pr->init_name);
	ret = psend(w, &m, sizeof(m), NULL, 0, CGR_FOREVER);
	if (ret == 0 && pr->arg_len > 0)
		ret = psend(w, pr->arg_data, pr->arg_len, NULL, 0, CGR_FOREVER);
	if (ret == 0)
		ret = await(w, &m, CGR__PMSG_READY, CGR_FOREVER);
	if (ret == CGR_EPEERDEAD)
		cgr__err(&w->ctx->log, "%s before its init returned", pr->why);
	if (ret == 0 && m.code != 0) {
		if (m.text[0])
			cgr__err(&w->ctx->log, "worker %s: %s", w->name,
				 m.text);
		ret = m.code;
	}
	return ret;
}

/* A process started by something else joins at its join_addr: one of this
 * user's, by the join deadline; its pid from the connection. */
static int join(cgr_worker *w, char *why, size_t len)
{
	struct cgr__proc *pr = proc_of(w);
	struct cgr__boot b;
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	int ret = cgr__boot_listen_at(&b, 1, pr->join_addr);

	if (ret < 0)
		return snprintf(why, len, "cannot listen at %s: %s",
				pr->join_addr, strerror(-ret)),
		       ret;
	ret = cgr__boot_accept(&b, cgr__deadline(pr->join_timeout_ns), why,
			       len);
	if (ret == 0 &&
	    (getsockopt(b.socks[0], SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 ||
	     cr.uid != geteuid())) {
		snprintf(why, len, "a process of another user joined at %s",
			 pr->join_addr);
		ret = -EPERM;
	}
	if (ret == 0) {
		pr->external = true;
		pr->pid = (int)cr.pid;
		pr->pidfd = (int)syscall(SYS_pidfd_open, cr.pid, 0);
		if (pr->pidfd < 0)
			ret = -errno;
		else
			fcntl(pr->pidfd, F_SETFD, FD_CLOEXEC);
	}
	if (ret == 0)
		pr->sock = b.socks[0], b.socks[0] = -1;
	cgr__boot_close(&b);
	return ret;
}

/* This program started again as w's process, met at a fresh address. */
static int start_child(cgr_worker *w, char *why, size_t len)
{
	struct cgr__proc *pr = proc_of(w);
	struct cgr__boot b;
	int ret = cgr__boot_listen(&b, 1);

	if (ret < 0)
		return ret;
	ret = spawn(w, b.addr);
	if (ret == 0)
		ret = cgr__boot_accept_child(&b, pr->pidfd, pr->pid,
					     cgr__deadline(BOOT_TIMEOUT_NS),
					     why, len);
	if (ret == 0)
		pr->sock = b.socks[0], b.socks[0] = -1;
	cgr__boot_close(&b);
	return ret;
}

/* ---- the worker (ops) ----------------------------------------------- */

/* A process worker's exports: its init/fini by name, its arg bytes. */
static int proc_params(cgr_worker *w, const cgr_worker_params *p)
{
	cgr_ctx *ctx = w->ctx;
	struct cgr__proc *pr = proc_of(w);
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
	    (pr->join_addr = cgr__strdup(&ctx->arena, p->join_addr)) == NULL)
		return -ENOMEM;
	pr->join_timeout_ns = p->join_timeout_ns > 0 ? p->join_timeout_ns :
						       30 * 1000000000ll;
	pr->init_name = cgr__strdup(&ctx->arena, e != NULL ? e->name : "");
	pr->arg_len = p->arg_len;
	if (p->arg_len > 0 &&
	    (pr->arg_data = cgr__alloc(&ctx->arena, p->arg_len, 16)) != NULL)
		memcpy(pr->arg_data, p->arg_data, p->arg_len);
	return pr->init_name == NULL || (p->arg_len && pr->arg_data == NULL) ?
		       -ENOMEM :
		       0;
}

/* Starts w's process (or takes the one that joins) and runs its init
 * there. */
static int proc_create(cgr_worker *w, const cgr_worker_params *p)
{
	struct cgr__proc *pr = cgr__alloc(&w->ctx->arena, sizeof(*pr), 64);
	char why[256] = "";
	int ret;

	if (pr == NULL)
		return -ENOMEM;
	memset(pr, 0, sizeof(*pr));
	pr->sock = pr->pidfd = -1;
	w->impl = pr;
	ret = proc_params(w, p);
	if (ret == 0)
		ret = procs_get(w->ctx, true, &pr->ps);
	if (ret < 0)
		return ret;
	ret = pr->join_addr != NULL ? join(w, why, sizeof(why)) :
				      start_child(w, why, sizeof(why));
	if (ret < 0 && why[0])
		cgr__err(&w->ctx->log, "worker %s: %s", w->name, why);
	/* Exited before it joined: it died before its init returned. */
	if (ret == -ECHILD)
		ret = CGR_EPEERDEAD;
	if (ret == 0)
		ret = start(w);
	if (ret == 0)
		ret = procs_list(w, true);
	if (ret < 0) {
		/* Ours is killed and reaped; one started by something else
		 * sees its socket close and exits. */
		pr->stopping = true;
		if (!pr->external && pr->pid > 0 && pr->pidfd >= 0)
			syscall(SYS_pidfd_send_signal, pr->pidfd, SIGKILL,
				NULL, 0);
		if (!pr->external)
			reap(w, CGR_FOREVER);
		proc_close(w);
	}
	return ret;
}

/* Stops it (fini, exit) by the deadline, else kills it; reaps it. */
static int proc_destroy(cgr_worker *w, int64_t deadline)
{
	struct cgr__proc *pr = proc_of(w);
	struct cgr__pmsg m;
	int ret = 0;
	bool killed;

	pthread_mutex_lock(&pr->ps->lock);
	pr->stopping = true;
	killed = pr->killed;
	pthread_mutex_unlock(&pr->ps->lock);
	if (atomic_load(&pr->dead) || killed) {
		/* Killed by a teardown (or a compile) it did not answer:
		 * dead, whatever the timeout; reaped below at once. */
		ret = CGR_EPEERDEAD;
		if (killed)
			cgr__fd_wait_readable(pr->pidfd, CGR_FOREVER);
	} else {
		cgr__pmsg_init(&m, CGR__PMSG_STOP, 0);
		m.timeout_ns = worker_timeout(deadline);
		ret = psend(w, &m, sizeof(m), NULL, 0, deadline);
		if (ret == 0)
			ret = await(w, &m, CGR__PMSG_BYE, deadline);
		/* Dead before it was told to stop (nobody said so yet). */
		if (ret == CGR_EPEERDEAD)
			cgr__err(&w->ctx->log, "%s", pr->why);
		if (ret == 0 && m.code != 0)
			ret = m.code;
		if (ret == -ETIMEDOUT)
			ret = CGR_ESTUCK;
	}
	procs_list(w, false);
	reap(w, ret == 0 ? deadline : cgr__now_ns());
	proc_close(w);
	return ret;
}

static void proc_free(cgr_worker *w)
{
	struct cgr__proc *pr = proc_of(w);
	struct cgr__arena *a = &w->ctx->arena;

	if (pr == NULL)
		return;
	proc_close(w);
	cgr__strfree(a, pr->init_name);
	cgr__strfree(a, pr->join_addr);
	cgr__free(a, pr->arg_data, pr->arg_len, 16);
	cgr__free(a, pr, sizeof(*pr), 64);
	w->impl = NULL;
}

/* Its process ended (the monitor saw it, or a reply that never came). */
static bool proc_dead(const cgr_worker *w, const char **why)
{
	struct cgr__proc *pr = proc_of(w);

	/* D1: pairs with saw_death's release. */
	if (!atomic_load_explicit(&pr->dead, memory_order_acquire))
		return false;
	*why = pr->why;
	return true;
}

static int proc_pid(const cgr_worker *w)
{
	return proc_of(w) != NULL ? proc_of(w)->pid : 0;
}

/* What cannot cross to a worker process (yet). */
static int proc_check_task(cgr_graph *g, const struct cgr__task *t,
			   const cgr_worker *w, bool eager)
{
	if (eager)
		return cgr__graph_fail(g, -ENOTSUP,
				       "%s: eager execution runs on thread "
				       "workers only (%s is a process)",
				       t->name, w->name);
	if ((t->flags & CGR_TASK_DEVICE) ||
	    (t->coll &&
	     (t->cp.comm != NULL || t->cp.backend == CGR_BACKEND_NCCL)))
		return cgr__graph_fail(g, -ENOTSUP,
				       "%s %s on process worker %s: device "
				       "tasks, NCCL and communicators of the "
				       "caller's are not supported on process "
				       "workers yet",
				       cgr__coll_name(t->coll), t->name,
				       w->name);
	return 0;
}

/* ---- graphs --------------------------------------------------------- */

/* The distinct process workers of c's programs (at most c->nprogs). */
static size_t graph_procs(const cgr_compiled *c, cgr_worker **out)
{
	size_t n = 0;

	for (size_t i = 0; i < c->nprogs; i++)
		if (c->progs[i].w->ops == &cgr__proc_ops)
			out[n++] = c->progs[i].w;
	return n;
}

static void pgraph_off(cgr_compiled *c)
{
	struct cgr__pgraph *pg = pgraph_of(c), **pp;
	struct cgr__procs *ps;

	if (pg == NULL)
		return;
	ps = pg->ps;
	pthread_mutex_lock(&ps->lock);
	for (pp = &ps->graphs; *pp != NULL; pp = &(*pp)->next)
		if (*pp == pg) {
			*pp = pg->next;
			break;
		}
	pthread_mutex_unlock(&ps->lock);
	cgr__free(&c->ctx->arena, pg->ws, (pg->nws + 1) * sizeof(*pg->ws), 16);
	cgr__free(&c->ctx->arena, pg, sizeof(*pg), 64);
	cgr__c_set_kind_state(c, &cgr__proc_ops, NULL);
}

/* c on the monitor's list, with its process workers (at least one). */
static int pgraph_on(cgr_compiled *c)
{
	struct cgr__pgraph *pg = cgr__alloc(&c->ctx->arena, sizeof(*pg), 64);
	struct cgr__procs *ps;

	if (pg == NULL)
		return -ENOMEM;
	memset(pg, 0, sizeof(*pg));
	pg->ws = cgr__alloc(&c->ctx->arena, (c->nprogs + 1) * sizeof(*pg->ws),
			    16);
	if (pg->ws == NULL) {
		cgr__free(&c->ctx->arena, pg, sizeof(*pg), 64);
		return -ENOMEM;
	}
	pg->nws = graph_procs(c, pg->ws);
	pg->ps = ps = proc_of(pg->ws[0])->ps;
	pg->c = c;
	pg->ctl = c->ctl;
	pg->nbells = c->ctl->nbells; /* made here, by the driver */
	if (cgr__c_set_kind_state(c, &cgr__proc_ops, pg) < 0) {
		cgr__free(&c->ctx->arena, pg->ws,
			  (c->nprogs + 1) * sizeof(*pg->ws), 16);
		cgr__free(&c->ctx->arena, pg, sizeof(*pg), 64);
		return -ENOSPC;
	}
	pthread_mutex_lock(&ps->lock);
	pg->gid = ++ps->next_gid;
	pg->next = ps->graphs;
	ps->graphs = pg;
	pthread_mutex_unlock(&ps->lock);
	return 0;
}

/* Message `type` to the first `upto` live process workers of c (one
 * that turns out dead is reported, peer_lost, by the deadline). */
static void send_all(cgr_compiled *c, int type, int64_t deadline,
		     size_t upto)
{
	struct cgr__pgraph *pg = pgraph_of(c);
	struct cgr__pmsg m;

	cgr__pmsg_init(&m, type, pg->gid);
	m.timeout_ns = worker_timeout(deadline);
	for (size_t i = 0; i < upto && i < pg->nws; i++)
		if (!atomic_load(&proc_of(pg->ws[i])->dead))
			psend(pg->ws[i], &m, sizeof(m), NULL, 0, deadline);
}

/* Kills worker process w, which then died "was killed: <past>". */
static void proc_kill(cgr_worker *w, const char *past)
{
	struct cgr__proc *pr = proc_of(w);

	/* Under the lock: the monitor reads why once it sees the end. */
	pthread_mutex_lock(&pr->ps->lock);
	if (!atomic_load_explicit(&pr->dead, memory_order_relaxed))
		snprintf(pr->why, sizeof(pr->why),
			 "worker %s (pid %d) was killed: %s", w->name, pr->pid,
			 past);
	pr->killed = true;
	pthread_mutex_unlock(&pr->ps->lock);
	syscall(SYS_pidfd_send_signal, pr->pidfd, SIGKILL, NULL, 0);
}

/* g's compile fails on w (code r; text: the worker's reason): g's errmsg
 * says whose and why. */
static int compile_failed(cgr_graph *g, cgr_worker *w, int r,
			  const char *text)
{
	return cgr__graph_fail(g, r,
			       "worker %s could not compile the graph: %s",
			       w->name,
			       r == CGR_EPEERDEAD ? proc_of(w)->why :
			       text[0]		  ? text :
						    cgr_strerror(r));
}

/* Each worker process is handed the graph's segment and compiles its
 * share: 0, or the first failure (g's errmsg says whose and why; every
 * process that compiled is told to drop it). */
static int proc_graph_prepare(cgr_compiled *c, cgr_graph *g)
{
	struct cgr__pmsg m;
	size_t i, sent = 0;
	int64_t deadline;
	int ret;

	if (c->seg == NULL)
		return 0; /* cannot be: the compiler makes one for them */
	if ((ret = pgraph_on(c)) < 0)
		return cgr__graph_fail(g, ret, "out of memory");
	cgr__pmsg_init(&m, CGR__PMSG_COMPILE, pgraph_of(c)->gid);
	for (; ret == 0 && sent < pgraph_of(c)->nws; sent++) {
		cgr_worker *w = pgraph_of(c)->ws[sent];
		int r = psend(w, &m, sizeof(m), &c->seg->shm.fd, 1,
			      CGR_FOREVER);
		if (r < 0) {
			ret = compile_failed(g, w, r, "");
			break; /* w did not get it */
		}
	}
	/* Its compile is ours, not the user's: a process that does not
	 * answer by then (stopped, hung) is killed. */
	deadline = cgr__now_ns() + CGR__PROC_COMPILE_NS;
	for (i = 0; i < sent; i++) {
		cgr_worker *w = pgraph_of(c)->ws[i];
		int r = await(w, &m, CGR__PMSG_COMPILED, deadline);
		const char *text = "";
		if (r == 0 && m.code != 0)
			r = m.code, text = m.text;
		if (r == -ETIMEDOUT) {
			proc_kill(w, "it did not answer a compile in time");
			r = CGR_ESTUCK;
			text = "it did not answer within 10 s (stopped or "
			       "hung?): killed";
		}
		if (r != 0 && ret == 0)
			ret = compile_failed(g, w, r, text);
	}
	if (ret != 0) {
		send_all(c, CGR__PMSG_DROP, CGR_FOREVER, sent);
		pgraph_off(c);
	}
	return ret;
}

/* A prepared graph given up (another kind's prepare failed). */
static void proc_graph_drop(cgr_compiled *c)
{
	if (pgraph_of(c) == NULL)
		return;
	send_all(c, CGR__PMSG_DROP, CGR_FOREVER, SIZE_MAX);
	pgraph_off(c);
}

/* The driver's handles of its worker processes serve c (a worker
 * process's stand-ins do not: nothing there clears them); each starts
 * its program. */
static void proc_graph_start(cgr_compiled *c)
{
	if (pgraph_of(c) == NULL)
		return;
	for (size_t i = 0; i < pgraph_of(c)->nws; i++)
		pgraph_of(c)->ws[i]->busy_with = c;
	send_all(c, CGR__PMSG_RUN, CGR_FOREVER, SIZE_MAX);
}

/* w did not leave graph c in time: it is killed. */
static void kill_stuck(cgr_compiled *c, cgr_worker *w, const char *text)
{
	cgr__err(&c->ctx->log,
		 "teardown: worker %s (pid %d) did not leave the graph by the "
		 "deadline%s%s; killed",
		 w->name, proc_of(w)->pid, text[0] ? ": " : "", text);
	proc_kill(w, "stuck past a teardown deadline");
}

/* Teardown: each worker process is told to leave c, given a little less
 * than the deadline. */
static void proc_graph_stop(cgr_compiled *c, int64_t deadline)
{
	if (pgraph_of(c) != NULL)
		send_all(c, CGR__PMSG_TEARDOWN, deadline, SIZE_MAX);
}

/* Each one's answer by the deadline; one that has not left by then is
 * killed (CGR_ESTUCK); c is taken off the monitor. */
static int proc_graph_wait(cgr_compiled *c, int64_t deadline,
			   uint32_t *held)
{
	struct cgr__pgraph *pg = pgraph_of(c);
	struct cgr__pmsg m;
	int result = 0;

	(void)held; /* a killed process holds nothing of c here */
	if (pg == NULL)
		return 0;
	for (size_t i = 0; i < pg->nws; i++) {
		cgr_worker *w = pg->ws[i];
		int r;
		w->busy_with = NULL;
		if (atomic_load(&proc_of(w)->dead))
			continue;
		/* By the deadline (each worker was given a little less);
		 * one that has not answered then (stuck, stopped) is
		 * killed, so that the call returns on time. */
		r = await(w, &m, CGR__PMSG_LEFT, deadline);
		if (r == -ETIMEDOUT || (r == 0 && m.code == CGR_ESTUCK)) {
			kill_stuck(c, w, r == 0 ? m.text : "");
			result = CGR_ESTUCK;
		}
	}
	pgraph_off(c);
	return result;
}

const struct cgr__worker_ops cgr__proc_ops = {
	.name = "process",
	.shared = false,
	.create = proc_create,
	.destroy = proc_destroy,
	.free = proc_free,
	.dead = proc_dead,
	.pid = proc_pid,
	.check_task = proc_check_task,
	.graph_prepare = proc_graph_prepare,
	.graph_drop = proc_graph_drop,
	.graph_start = proc_graph_start,
	.graph_stop = proc_graph_stop,
	.graph_wait = proc_graph_wait,
	.ctx_release = proc_ctx_release,
};
