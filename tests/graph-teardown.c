/*
 * tests/graph-teardown.c: teardown never hangs and leaves nothing behind:
 * with executions in flight, with a task stuck past the deadline (reported,
 * the worker abandoned, and cleaned up when the task returns), called
 * twice; worker init/fini run on the worker's own thread; file
 * descriptors, threads and memory return to their start after 100
 * create/compile/destroy cycles.  A task (or init, or fini) that ends its
 * worker's thread (pthread_exit) is a dead worker: its executions are
 * CGR_EPEERDEAD error values at once, never a hang, the log says so,
 * and everything it held is freed (no leak under ASan).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/syscall.h>

#include <cgr.h>
#ifndef CGR_SANITIZE
#include <jemalloc/jemalloc.h>
#endif

#include "tap.h"


static _Atomic int release_stuck, stuck_entered, fini_calls, init_calls;
static _Atomic int tid_mismatch;
static char logbuf[4096];
static _Atomic int loglines;

static void logger(void *arg, int level, const char *msg)
{
	(void)arg, (void)level;
	if (atomic_fetch_add(&loglines, 1) == 0)
		snprintf(logbuf, sizeof(logbuf), "%s", msg);
}

struct wstate {
	pid_t tid;
};

static int w_init(void *arg, void **state)
{
	struct wstate *s = malloc(sizeof(*s));
	(void)arg;
	s->tid = (pid_t)syscall(SYS_gettid);
	*state = s;
	atomic_fetch_add(&init_calls, 1);
	return 0;
}

static void w_fini(void *arg, void *state)
{
	struct wstate *s = state;
	(void)arg;
	if (s->tid != (pid_t)syscall(SYS_gettid))
		atomic_fetch_add(&tid_mismatch, 1);
	free(s);
	atomic_fetch_add(&fini_calls, 1);
}

static int w_init_fail(void *arg, void **state)
{
	(void)arg, (void)state;
	return -ENOTSUP;
}

static int echo(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	struct wstate *s = st;
	(void)tc, (void)nin, (void)nout;
	if (s != NULL && s->tid != (pid_t)syscall(SYS_gettid))
		atomic_fetch_add(&tid_mismatch, 1);
	out[0] = in[0];
	return 0;
}

static int stuck(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		 cgr_value *out, size_t nout)
{
	atomic_store(&stuck_entered, 1);
	while (!atomic_load(&release_stuck))
		;
	return echo(tc, st, in, nin, out, nout);
}

/* Ends its worker's thread on the input "x"; echo otherwise. */
/* Closed (0): bye holds its exit until the driver has submitted every
 * execution the check counts on (at most 10 s, so nothing hangs). */
static _Atomic int bye_gate = 1;

static int bye(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
	       cgr_value *out, size_t nout)
{
	if (in[0].u.bytes.len == 1 &&
	    ((const char *)in[0].u.bytes.data)[0] == 'x') {
		int64_t end = t_now_ns() + 10 * 1000000000ll;
		while (!atomic_load(&bye_gate) && t_now_ns() < end)
			sched_yield();
		pthread_exit(NULL);
	}
	return echo(tc, st, in, nin, out, nout);
}

static int w_init_exit(void *arg, void **state)
{
	(void)arg, (void)state;
	pthread_exit(NULL);
}

static void w_fini_exit(void *arg, void *state)
{
	w_fini(arg, state);
	pthread_exit(NULL);
}

static cgr_worker *mkworker(cgr_ctx *ctx, const char *name)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w = NULL;
	wp.name = name;
	wp.init = w_init;
	wp.fini = w_fini;
	cgr_worker_create(ctx, &wp, &w);
	return w;
}

static cgr_compiled *chain(cgr_ctx *ctx, cgr_worker **w, int n,
			   cgr_task_fn last)
{
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *prev;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &prev);
	for (int i = 0; i < n; i++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = i == n - 1 && last == stuck ? "stuck" : "echo";
		d.fn = i == n - 1 ? last : echo;
		cgr_graph_task(g, w[i], &d, &prev, 1, &prev, 1);
	}
	cgr_graph_output(g, &prev, 1);
	if (cgr_graph_compile(g, NULL, &c) != 0)
		c = NULL;
	cgr_graph_destroy(g);
	return c;
}

static void test_inflight(void)
{
	cgr_ctx *ctx;
	cgr_worker *w[3];
	cgr_compiled *c;
	cgr_ref r;
	cgr_value v = cgr_value_bytes("abc", 3), o;
	int ok = 1;

	cgr_ctx_create(NULL, &ctx);
	w[0] = mkworker(ctx, "a"), w[1] = mkworker(ctx, "b"),
	w[2] = mkworker(ctx, "c");
	c = chain(ctx, w, 3, echo);
	t_ok(c != NULL, "3-stage chain compiled");
	for (int i = 0; i < 8; i++)
		ok &= cgr_execute(c, &v, 1, &r) == 0;
	t_ok(ok, "8 executions in flight");
	int64_t t0 = (int64_t)clock();
	t_is(cgr_compiled_teardown(c, -1), 0, "teardown with 8 in flight");
	(void)t0;
	t_is(cgr_compiled_teardown(c, -1), 0, "second teardown is a no-op");
	t_is(cgr_execute(c, &v, 1, &r), CGR_ECLOSED, "execute after teardown");
	t_is(cgr_ref_get(c, r, 0, &o, 1), CGR_ECLOSED, "get after teardown");
	cgr_compiled_destroy(c);
	/* Workers are free for another graph. */
	c = chain(ctx, w, 3, echo);
	t_ok(c != NULL, "workers reused by a new graph");
	t_is(cgr_execute(c, &v, 1, &r), 0, "execute");
	t_is(cgr_ref_get(c, r, -1, &o, 1), 0, "get");
	t_ok(o.u.bytes.len == 3 && memcmp(o.u.bytes.data, "abc", 3) == 0,
	     "value");
	cgr_ref_release(c, r);
	/* Deadline 0 on an idle graph: its workers get the time to leave
	 * (none abandoned) and serve the next graph. */
	t_is(cgr_compiled_teardown(c, 0), 0, "idle graph: teardown(0) is 0");
	cgr_compiled_destroy(c);
	c = chain(ctx, w, 3, echo);
	t_ok(c != NULL, "its workers serve the next graph");
	t_is(c != NULL ? cgr_execute(c, &v, 1, &r) : -1, 0, "execute");
	t_is(c != NULL ? cgr_ref_get(c, r, -1, &o, 1) : -1, 0, "get");
	t_ok(o.u.bytes.len == 3 && memcmp(o.u.bytes.data, "abc", 3) == 0,
	     "value");
	/* Two graphs left too: one built, one run eagerly (its own compiled
	 * state goes with it). */
	{
		cgr_graph *g[2];
		cgr_node *x, *y;
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		/* (An eager run needs an idle worker: c has the others.) */
		cgr_worker *idle = mkworker(ctx, "d");
		d.name = "echo";
		d.fn = echo;
		for (int i = 0; i < 2; i++) {
			cgr_graph_create(ctx, &g[i]);
			cgr_graph_input(g[i], 0, &x);
			cgr_graph_task(g[i], i ? idle : w[0], &d, &x, 1, &y, 1);
			cgr_graph_output(g[i], &y, 1);
		}
		t_is(cgr_graph_execute_eager(g[1], &v, 1, &o, 1, NULL), 0,
		     "a graph run eagerly, left for cgr_ctx_destroy");
	}
	/* ctx_destroy cleans up the live compiled graph, the graphs left
	 * (sanitizer builds: no leak) and the workers. */
	cgr_ctx_destroy(ctx);
	cgr_ctx_destroy(NULL);
	t_is(atomic_load(&fini_calls), atomic_load(&init_calls),
	     "every worker ran fini (%d)", atomic_load(&fini_calls));
	t_is(atomic_load(&tid_mismatch), 0,
	     "init, tasks and fini ran on the worker's own thread");
}

static void test_stuck(void)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx;
	cgr_worker *w[2];
	cgr_compiled *c;
	cgr_ref r;
	cgr_value v = cgr_value_bytes("z", 1);
	int before = atomic_load(&fini_calls);
	int thr0 = t_count_threads(), thr = 0;
	struct timespec a, b;

	cp.log_fn = logger;
	cgr_ctx_create(&cp, &ctx);
	w[0] = mkworker(ctx, "front"), w[1] = mkworker(ctx, "sticky");
	c = chain(ctx, w, 2, stuck);
	t_ok(c != NULL, "graph with a task that gets stuck");
	cgr_execute(c, &v, 1, &r);
	while (!atomic_load(&stuck_entered))
		;
	clock_gettime(CLOCK_MONOTONIC, &a);
	int ret = cgr_compiled_teardown(c, 100 * 1000000);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
	t_is(ret, CGR_ESTUCK, "teardown reports the stuck worker");
	t_ok(ms >= 99 && ms < 2000, "after the 100 ms deadline (%.1f ms)", ms);
	t_ok(strstr(logbuf, "sticky") && strstr(logbuf, "stuck"),
	     "log names the worker and task: %s", logbuf);
	t_is(cgr_compiled_teardown(c, -1), 0, "second teardown is a no-op");
	cgr_compiled_destroy(c);
	cgr_compiled *c2 = chain(ctx, w, 2, echo);
	t_ok(c2 == NULL, "the abandoned worker cannot be used again");
	t_is(cgr_worker_destroy(w[1], 20 * 1000000), CGR_ESTUCK,
	     "destroying the abandoned worker still in its task: CGR_ESTUCK "
	     "by the 20 ms deadline");
	t_is(cgr_worker_destroy(w[1], 0), 0, "...a second destroy: a no-op");
	t_is(cgr_worker_destroy(w[0], -1), 0, "the healthy worker stops");
	cgr_ctx_destroy(ctx);
	/* Let the task return: the worker finishes, runs fini, exits. */
	atomic_store(&release_stuck, 1);
	while (atomic_load(&fini_calls) < before + 2)
		;
	t_is(atomic_load(&fini_calls) - before, 2,
	     "the abandoned worker ran fini once its task returned");
	/* Then its (detached) thread exits: a moment later. */
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (;;) {
		thr = t_count_threads();
		clock_gettime(CLOCK_MONOTONIC, &b);
		if (thr <= thr0 || b.tv_sec - a.tv_sec > 10)
			break;
		sched_yield();
	}
	t_is(thr, thr0, "...and its thread exited");
}

static void test_init_fail(void)
{
	cgr_ctx *ctx;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w = NULL;
	cgr_ctx_create(NULL, &ctx);
	wp.init = w_init_fail;
	t_is(cgr_worker_create(ctx, &wp, &w), -ENOTSUP,
	     "worker create returns init's error");
	t_ok(w == NULL, "and leaves *out untouched");
	wp = (cgr_worker_params)CGR_WORKER_PARAMS_INIT;
	wp.kind = 9;
	t_is(cgr_worker_create(ctx, &wp, &w), -EINVAL, "unknown worker kind");
	wp = (cgr_worker_params)CGR_WORKER_PARAMS_INIT;
	wp.arg_len = 8;
	t_is(cgr_worker_create(ctx, &wp, &w), -EINVAL,
	     "a thread worker's arg_len with arg_data NULL");
	{
		static char big[(64 << 10) + 1];
		wp.arg_data = big;
		wp.arg_len = sizeof(big);
		t_is(cgr_worker_create(ctx, &wp, &w), -EINVAL,
		     "a thread worker's arg_data over 64 KiB");
	}
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cp.flags = 0x80;
	cgr_ctx *c2 = NULL;
	t_is(cgr_ctx_create(&cp, &c2), -EINVAL, "unknown context flag");
	cgr_ctx_destroy(ctx);
}

static size_t heap_bytes(void)
{
#ifdef CGR_SANITIZE
	return 0;
#else
	uint64_t epoch = 1;
	size_t sz = sizeof(epoch), allocated = 0;
	mallctl("epoch", &epoch, &sz, &epoch, sz);
	sz = sizeof(allocated);
	mallctl("stats.allocated", &allocated, &sz, NULL, 0);
	return allocated;
#endif
}

static void cycle_full(void)
{
	cgr_ctx *ctx;
	cgr_worker *w[2];
	cgr_compiled *c;
	cgr_ref r;
	cgr_value v = cgr_value_bytes("q", 1), o;

	cgr_ctx_create(NULL, &ctx);
	w[0] = mkworker(ctx, "x"), w[1] = mkworker(ctx, "y");
	c = chain(ctx, w, 2, echo);
	for (int i = 0; i < 10; i++) {
		cgr_execute(c, &v, 1, &r);
		cgr_ref_get(c, r, -1, &o, 1);
		cgr_ref_release(c, r);
	}
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
}

static void test_cycles(void)
{
	int fds0, thr0, fds1, thr1;
	size_t heap0, heap1, live0, live1, blk0, blk1;
	long n = t_scale(100) < 20 ? 20 : t_scale(100);

	cycle_full(); /* warm up lazily created library state */
	fds0 = t_count_dir("/proc/self/fd");
	thr0 = t_count_threads();
	heap0 = heap_bytes();
	for (long i = 0; i < n; i++)
		cycle_full();
	fds1 = t_count_dir("/proc/self/fd");
	thr1 = t_threads_back(thr0);
	heap1 = heap_bytes();
	t_is(fds1, fds0, "fds back to start after %ld full cycles", n);
	t_is(thr1, thr0, "threads back to start after %ld full cycles", n);
	t_ok(heap1 <= heap0 + 64 * 1024,
	     "heap back to start: %zu -> %zu bytes", heap0, heap1);

	/* One context and its workers, many graphs: exact accounting. */
	cgr_ctx *ctx;
	cgr_worker *w[2];
	cgr_ctx_create(NULL, &ctx);
	w[0] = mkworker(ctx, "p"), w[1] = mkworker(ctx, "q");
	cgr_ctx_memory(ctx, &live0, &blk0);
	for (long i = 0; i < n; i++) {
		cgr_compiled *c = chain(ctx, w, 2, echo);
		cgr_ref r;
		cgr_value v = cgr_value_bytes("q", 1), o;
		cgr_execute(c, &v, 1, &r);
		cgr_ref_get(c, r, -1, &o, 1);
		cgr_compiled_destroy(c);
	}
	cgr_ctx_memory(ctx, &live1, &blk1);
	t_is(live1, live0, "context bytes back to start after %ld graphs", n);
	t_is(blk1, blk0, "context blocks back to start");
	cgr_ctx_destroy(ctx);
}

static char lostlog[8][256];
static _Atomic int nlost;

/* Keeps the lines that say a thread exited. */
static void lost_logger(void *arg, int level, const char *msg)
{
	(void)arg, (void)level;
	if (strstr(msg, "thread exited") != NULL) {
		int i = atomic_fetch_add(&nlost, 1);
		if (i < 8)
			snprintf(lostlog[i], sizeof(lostlog[i]), "%s", msg);
	}
}

static bool says(const char *msg, const char *a, const char *b)
{
	return msg != NULL && strstr(msg, a) != NULL && strstr(msg, b) != NULL;
}

/* A task calls pthread_exit on worker "b" of a -> b, with executions in
 * flight: each is a CGR_EPEERDEAD error value at once. */
static void thread_exit_graph(cgr_ctx *ctx, cgr_worker **w)
{
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *prev;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_value ok = cgr_value_bytes("ok", 2), x = cgr_value_bytes("x", 1), o;
	cgr_ref r[4];
	int bad = 0;
	int64_t t0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &prev);
	d.name = "echo", d.fn = echo;
	cgr_graph_task(g, w[0], &d, &prev, 1, &prev, 1);
	d.name = "bye", d.fn = bye;
	cgr_graph_task(g, w[1], &d, &prev, 1, &prev, 1);
	cgr_graph_output(g, &prev, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "thread exit: compiles");
	cgr_graph_destroy(g);
	t_ok(cgr_execute(c, &ok, 1, &r[0]) == 0 &&
		     cgr_ref_get(c, r[0], -1, &o, 1) == 0 &&
		     o.kind == CGR_VALUE_BYTES,
	     "thread exit: runs");
	cgr_ref_release(c, r[0]);
	/* The four executions are all in before bye's thread ends. */
	atomic_store(&bye_gate, 0);
	bad += cgr_execute(c, &x, 1, &r[0]) != 0;
	for (int i = 1; i < 4; i++)
		bad += cgr_execute(c, &ok, 1, &r[i]) != 0;
	atomic_store(&bye_gate, 1);
	t0 = t_now_ns();
	for (int i = 0; i < 4; i++) {
		int ret = cgr_ref_get(c, r[i], 10 * 1000000000ll, &o, 1);
		if (i == 0)
			t_diag("the error value: %s",
			       o.kind == CGR_VALUE_ERROR ? o.u.error.msg : "-");
		bad += ret != 0 || o.kind != CGR_VALUE_ERROR ||
		       o.code != CGR_EPEERDEAD ||
		       !says(o.u.error.msg, "worker b died", "thread exited") ||
		       !says(o.u.error.msg, "task bye", "execution 1") ||
		       strcmp(o.u.error.worker, "b") != 0;
		cgr_ref_release(c, r[i]);
	}
	t_is(bad, 0, "thread exit: every execution in flight is a "
		     "CGR_EPEERDEAD error value naming the worker and task");
	t_ok(t_now_ns() - t0 < 2000000000ll, "thread exit: at once (%.1f ms)",
	     (t_now_ns() - t0) / 1e6);
	t_is(cgr_execute(c, &ok, 1, &r[0]), CGR_EPEERDEAD,
	     "thread exit: the graph takes no more executions");
	t0 = t_now_ns();
	t_is(cgr_compiled_teardown(c, 1000000000), 0, "thread exit: teardown");
	t_ok(t_now_ns() - t0 < 500000000ll, "thread exit: ...at once (%.1f ms)",
	     (t_now_ns() - t0) / 1e6);
	cgr_compiled_destroy(c);
}

static void test_thread_exit(void)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx;
	cgr_worker *w[2], *v = NULL;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_compiled *c;
	cgr_graph *g;
	cgr_node *in, *out;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_value args = cgr_value_bytes("x", 1), o;
	int fds0 = t_count_dir("/proc/self/fd");
	int thr0 = t_count_threads();
	int inits = atomic_load(&init_calls), finis = atomic_load(&fini_calls);

	cp.log_fn = lost_logger;
	cgr_ctx_create(&cp, &ctx);
	w[0] = mkworker(ctx, "a"), w[1] = mkworker(ctx, "b");
	thread_exit_graph(ctx, w);
	t_ok(atomic_load(&nlost) >= 1 &&
		     says(lostlog[0], "worker b died", "thread exited"),
	     "thread exit: the log says so: %s", lostlog[0]);
	/* b is dead to the context; a serves on. */
	c = chain(ctx, w + 1, 1, echo);
	t_ok(c == NULL, "thread exit: a graph on the dead worker is refused");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	d.name = "again", d.fn = echo;
	cgr_graph_task(g, w[1], &d, &in, 1, &out, 1);
	cgr_graph_output(g, &out, 1);
	t_is(cgr_graph_compile(g, NULL, &c), CGR_EPEERDEAD,
	     "thread exit: ...CGR_EPEERDEAD: %s", cgr_graph_errmsg(g));
	t_ok(says(cgr_graph_errmsg(g), "worker b", "thread exited"),
	     "thread exit: ...saying why");
	/* Eager runs refuse it too. */
	t_is(cgr_graph_execute_eager(g, &args, 1, &o, 1, NULL), CGR_EPEERDEAD,
	     "thread exit: eager runs on it are refused");
	cgr_graph_destroy(g);
	c = chain(ctx, w, 1, echo);
	t_ok(c != NULL, "thread exit: the other worker serves a new graph");
	cgr_compiled_destroy(c);
	t_is(cgr_worker_destroy(w[1], 1000000000), CGR_EPEERDEAD,
	     "thread exit: destroying the worker says it died");
	/* An eager run whose task ends the thread. */
	w[1] = mkworker(ctx, "e");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	d.name = "bye", d.fn = bye;
	cgr_graph_task(g, w[1], &d, &in, 1, &out, 1);
	cgr_graph_output(g, &out, 1);
	t_is(cgr_graph_execute_eager(g, &args, 1, &o, 1, NULL), CGR_EPEERDEAD,
	     "thread exit, eager: CGR_EPEERDEAD: %s", cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	t_is(cgr_worker_destroy(w[1], 1000000000), CGR_EPEERDEAD,
	     "thread exit, eager: destroy says it died");
	/* In init: creating the worker fails. */
	wp.name = "i";
	wp.init = w_init_exit;
	t_is(cgr_worker_create(ctx, &wp, &v), CGR_EPEERDEAD,
	     "thread exit in init: cgr_worker_create fails (CGR_EPEERDEAD)");
	/* In fini: destroy says so at once, no CGR_ESTUCK. */
	wp.name = "f";
	wp.init = w_init;
	wp.fini = w_fini_exit;
	v = NULL;
	cgr_worker_create(ctx, &wp, &v);
	t_is(cgr_worker_destroy(v, 1000000000), CGR_EPEERDEAD,
	     "thread exit in fini: destroy returns CGR_EPEERDEAD");
	/* In a task, then in the fini run as the thread ends. */
	wp.name = "b";
	w[1] = NULL;
	cgr_worker_create(ctx, &wp, &w[1]);
	thread_exit_graph(ctx, w);
	t_is(cgr_worker_destroy(w[1], 1000000000), CGR_EPEERDEAD,
	     "thread exit in a task, then in fini: destroy says it died");
	cgr_ctx_destroy(ctx);
	t_is(atomic_load(&fini_calls) - finis, atomic_load(&init_calls) - inits,
	     "thread exit: every worker's fini ran, the dead ones' too");
	t_is(t_count_dir("/proc/self/fd"), fds0, "thread exit: fds back");
	t_is(t_threads_back(thr0), thr0, "thread exit: threads back");
}

/* A task drives graphs of its own on another worker (builds, compiles,
 * runs, destroys them) while the driver does the same on a third:
 * the context's lists of graphs and the workers' claims are shared
 * (TSan and ASan runs: no race, no use after free). */
static cgr_ctx *td_ctx;
static cgr_worker *td_w[3];

/* x through a one-task graph on w: x, or a value no echo gives. */
static uint64_t echo_on(cgr_worker *w, uint64_t x)
{
	cgr_compiled *c = chain(td_ctx, &w, 1, echo);
	cgr_value a = cgr_value_bytes(&x, 8), o;
	cgr_ref r;
	uint64_t y = ~x;

	if (c == NULL)
		return y;
	if (cgr_execute(c, &a, 1, &r) == 0 &&
	    cgr_ref_get(c, r, -1, &o, 1) == 0 && o.kind == CGR_VALUE_BYTES &&
	    o.u.bytes.len == 8)
		memcpy(&y, o.u.bytes.data, 8);
	cgr_ref_release(c, r);
	cgr_compiled_destroy(c);
	return y;
}

static int drive_task(cgr_task_ctx *tc, void *st, const cgr_value *in,
		      size_t nin, cgr_value *out, size_t nout)
{
	static __thread uint64_t y;
	uint64_t x;
	(void)st, (void)nin, (void)nout;

	memcpy(&x, in[0].u.bytes.data, 8);
	y = echo_on(td_w[2], x);
	(void)tc;
	out[0] = cgr_value_bytes(&y, 8);
	return 0;
}

static void test_task_drives(void)
{
	cgr_compiled *a;
	int n = (int)t_scale(300), bad = 0;

	cgr_ctx_create(NULL, &td_ctx);
	for (int i = 0; i < 3; i++)
		td_w[i] = mkworker(td_ctx, i == 0 ? "ta" : i == 1 ? "td" : "te");
	a = chain(td_ctx, td_w, 1, drive_task);
	for (int i = 0; a != NULL && i < n; i++) {
		uint64_t v = (uint64_t)i, ra = 0;
		cgr_value arg = cgr_value_bytes(&v, 8), o;
		cgr_ref r;
		if (cgr_execute(a, &arg, 1, &r) != 0) {
			bad++;
			break;
		}
		bad += echo_on(td_w[1], 1000000u + v) != 1000000u + v;
		if (cgr_ref_get(a, r, -1, &o, 1) == 0 &&
		    o.kind == CGR_VALUE_BYTES)
			memcpy(&ra, o.u.bytes.data, 8);
		bad += ra != v;
		cgr_ref_release(a, r);
	}
	t_ok(a != NULL && bad == 0,
	     "%d rounds of a task and the driver each building, compiling, "
	     "running and destroying a graph at once: %d wrong",
	     n, bad);
	cgr_compiled_destroy(a);
	cgr_ctx_destroy(td_ctx);
}

/* CGR_CTX_NO_IO_URING: graphs run, and the context says so once, at
 * CGR_LOG_INFO (the caller's choice is no failure to warn about). */
static _Atomic int nu_info, nu_warn;

static void nu_logger(void *arg, int level, const char *msg)
{
	(void)arg;
	if (strstr(msg, "io_uring") == NULL)
		return;
	if (level == CGR_LOG_INFO && strstr(msg, "turned off") != NULL)
		atomic_fetch_add(&nu_info, 1);
	else
		atomic_fetch_add(&nu_warn, 1);
}

static void test_no_uring(void)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx;
	cgr_worker *w[2];
	cgr_compiled *c;
	cgr_ref r;
	cgr_value v = cgr_value_bytes("nu", 2), o;
	int ok = 1;

	cp.flags = CGR_CTX_NO_IO_URING;
	cp.log_fn = nu_logger;
	cp.log_level = CGR_LOG_DEBUG;
	cgr_ctx_create(&cp, &ctx);
	w[0] = mkworker(ctx, "nu0"), w[1] = mkworker(ctx, "nu1");
	c = chain(ctx, w, 2, echo);
	for (int i = 0; c != NULL && i < 100; i++) {
		ok &= cgr_execute(c, &v, 1, &r) == 0 &&
		      cgr_ref_get(c, r, -1, &o, 1) == 0 &&
		      o.kind == CGR_VALUE_BYTES && o.u.bytes.len == 2 &&
		      memcmp(o.u.bytes.data, "nu", 2) == 0;
		cgr_ref_release(c, r);
	}
	t_ok(c != NULL && ok, "without io_uring: 100 executions, values right");
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
	t_is(atomic_load(&nu_info), 1, "said once, at CGR_LOG_INFO");
	t_is(atomic_load(&nu_warn), 0, "no warning");
}

int main(int argc, char **argv)
{
	t_init(argc, argv, 60);
	test_no_uring();
	test_task_drives();
	test_inflight();
	test_stuck();
	test_init_fail();
	test_thread_exit();
	test_cycles();
	return t_done();
}
