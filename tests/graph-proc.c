/*
 * tests/graph-proc.c: process workers (cgr.h, "Process workers").
 *
 * This program is also its own worker processes (cgr_worker_main first
 * thing in main).  Graphs over process workers, mixed with thread
 * workers, carry real values both ways (every value checked); a task's
 * failure reaches the outputs; init runs in the worker's process with its
 * arg bytes and fails cgr_worker_create with its code; what cannot cross
 * is refused with a reason.  Then the failures: kill -9 of a worker in
 * the middle of an execution and while its ring is full (every execution
 * in flight becomes a CGR_EPEERDEAD error value naming it, the context
 * stays usable without it); a worker stuck in a task past the teardown
 * deadline (killed, CGR_ESTUCK), and one stopped (SIGSTOP: killed at the
 * deadline, the call returns on time; stopped before a compile: killed
 * after 10 s without an answer, CGR_ESTUCK); a worker killed just before the
 * driver sends it something (a compile, a destroy: CGR_EPEERDEAD saying
 * it died, never a bare -EPIPE); a task that ends its worker's thread
 * (pthread_exit) or process (exit): a death, reported as one; the driver
 * killed (its workers exit).
 * Each ends with nothing left: descriptors, threads, child processes.
 * A corrupted graph description is refused, never trusted.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <spawn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cgr.h>

#include "proc/proc.h"
#include "graph/graph.h"
#include "shm/boot.h"
#include "shm/shm.h"
#include "tap.h"

#define SEC 1000000000ll

/* ---- what the workers run ------------------------------------------ */

/* A stream task's work for one execution. */
struct swork {
	int64_t x, add, *out;
};

struct wstate {
	int64_t add; /* from arg_data: "add[ fd]" */
	int note_fd; /* t_sleep writes a byte here as it starts, or -1 */
	int pid;
	struct swork w[16]; /* t_stream's, by execution % 16 */
};

static int w_init(void *arg, void **state)
{
	struct wstate *s;

	if (arg != NULL && strcmp(arg, "fail") == 0)
		return -EIO;
	if (arg != NULL && strcmp(arg, "exit") == 0)
		pthread_exit(NULL);
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->note_fd = -1;
	if (arg != NULL)
		sscanf(arg, "%" SCNd64 " %d", &s->add, &s->note_fd);
	s->pid = (int)getpid();
	*state = s;
	return 0;
}

static void w_fini(void *arg, void *state)
{
	/* A fini that takes its time (flushing, say): 200 ms. */
	struct timespec slow = { 0, 200000000 };

	if (arg != NULL && strcmp(arg, "slowfini") == 0)
		nanosleep(&slow, NULL);
	free(state);
}

/* out = in + state->add; the output says which process ran it. */
static int t_add(cgr_task_ctx *tc, void *state, const cgr_value *in,
		 size_t nin, cgr_value *out, size_t nout)
{
	const struct wstate *s = state;
	int64_t *o = cgr_task_output_buffer(tc, 0, 2 * sizeof(int64_t));

	(void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_BYTES || in[0].u.bytes.len < 8)
		return -EINVAL;
	memcpy(&o[0], in[0].u.bytes.data, 8);
	o[0] += s != NULL ? s->add : 0;
	o[1] = (int64_t)getpid();
	out[0] = cgr_value_bytes(o, 2 * sizeof(int64_t));
	return 0;
}

/* t_add as an int64 tensor of 2 (for collectives). */
static int t_tadd(cgr_task_ctx *tc, void *state, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	static int64_t shape[1] = { 2 };
	int ret = t_add(tc, state, in, nin, out, nout);

	if (ret == 0)
		out[0] = cgr_value_tensor((void *)out[0].u.bytes.data, kDLInt,
					  64, 1, shape);
	return ret;
}

/* Fails every execution whose value is a multiple of 3. */
static int t_fail3(cgr_task_ctx *tc, void *state, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	int64_t v;

	memcpy(&v, in[0].u.bytes.data, 8);
	if (v % 3 == 0) {
		cgr_task_set_error(tc, CGR_ETASK, "no multiples of 3 (%lld)",
				   (long long)v);
		return -1;
	}
	return t_add(tc, state, in, nin, out, nout);
}

/* Sleeps as many milliseconds as its input says, then passes it on. */
static int t_sleep(cgr_task_ctx *tc, void *state, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	int64_t ms;
	struct timespec ts;

	memcpy(&ms, in[0].u.bytes.data, 8);
	if (state != NULL && ((struct wstate *)state)->note_fd >= 0 &&
	    write(((struct wstate *)state)->note_fd, "!", 1) != 1)
		return -EIO;
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000;
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	return t_add(tc, state, in, nin, out, nout);
}

static void swork_run(void *arg)
{
	struct swork *w = arg;
	w->out[0] = w->x + w->add;
	w->out[1] = (int64_t)getpid();
}

/* A stream task: the work (out = in + add, and the pid) runs on the
 * worker's compute stream, in the worker's process. */
static int t_stream(cgr_task_ctx *tc, void *state, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	struct wstate *s = state;
	struct swork *w = &s->w[cgr_task_seq(tc) % 16];
	cgr_stream *st = cgr_task_stream(tc);

	(void)nin, (void)nout;
	if (st == NULL)
		return -EINVAL;
	memcpy(&w->x, in[0].u.bytes.data, 8);
	w->add = s->add;
	w->out = cgr_task_output_buffer(tc, 0, 16);
	if (cgr_stream_launch_host(st, swork_run, w) != 0)
		return -EIO;
	out[0] = cgr_value_bytes(w->out, 16);
	return 0;
}

/* A list of two items from u64 v: the bytes "item v" and an int64
 * tensor {v, v + 1, v + 2}. */
static int t_list(cgr_task_ctx *tc, void *state, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	static __thread char text[32];
	static __thread int64_t t[3], shape[1] = { 3 };
	static __thread cgr_value items[2];
	int64_t v;

	(void)tc, (void)state, (void)nin, (void)nout;
	memcpy(&v, in[0].u.bytes.data, 8);
	snprintf(text, sizeof(text), "item %lld", (long long)v);
	for (int i = 0; i < 3; i++)
		t[i] = v + i;
	items[0] = cgr_value_bytes(text, strlen(text) + 1);
	items[1] = cgr_value_tensor(t, kDLInt, 64, 1, shape);
	out[0] = cgr_value_list(items, 2);
	return 0;
}

/* A list's check: its bytes item must read "item v" and its tensor
 * {v, v+1, v+2}; out: v (or an error value naming what is wrong). */
static int t_unlist(cgr_task_ctx *tc, void *state, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t v;
	const cgr_value *l = &in[0];
	char want[32];

	(void)state, (void)nin, (void)nout;
	if (l->kind != CGR_VALUE_LIST || l->u.list.n != 2 ||
	    l->u.list.items[1].kind != CGR_VALUE_TENSOR ||
	    l->u.list.items[1].u.tensor.ndim != 1 ||
	    l->u.list.items[1].u.tensor.shape[0] != 3) {
		cgr_task_set_error(tc, CGR_EBADVALUE, "not the list");
		return -1;
	}
	memcpy(&v, l->u.list.items[1].u.tensor.data, 8);
	snprintf(want, sizeof(want), "item %lld", (long long)v);
	if (strcmp(l->u.list.items[0].u.bytes.data, want) != 0 ||
	    ((const int64_t *)l->u.list.items[1].u.tensor.data)[2] != v + 2) {
		cgr_task_set_error(tc, CGR_EBADVALUE, "the list's items");
		return -1;
	}
	out[0] = cgr_value_bytes(&v, 8);
	return 0;
}

/* Not in the exports. */
static int t_unexported(cgr_task_ctx *tc, void *state, const cgr_value *in,
			size_t nin, cgr_value *out, size_t nout)
{
	return t_add(tc, state, in, nin, out, nout);
}

/* Ends the worker's thread (pthread_exit) on an input of -1, or its
 * process (exit(7)) on -2; t_add otherwise. */
static int t_bye(cgr_task_ctx *tc, void *state, const cgr_value *in,
		 size_t nin, cgr_value *out, size_t nout)
{
	int64_t v;

	memcpy(&v, in[0].u.bytes.data, 8);
	if (v == -1)
		pthread_exit(NULL);
	if (v == -2)
		exit(7);
	return t_add(tc, state, in, nin, out, nout);
}

static const cgr_export exports[] = {
	{ "bye", t_bye, NULL, NULL },
	{ "add", t_add, NULL, NULL },
	{ "tadd", t_tadd, NULL, NULL },
	{ "fail3", t_fail3, NULL, NULL },
	{ "sleep", t_sleep, NULL, NULL },
	{ "stream", t_stream, NULL, NULL },
	{ "list", t_list, NULL, NULL },
	{ "unlist", t_unlist, NULL, NULL },
	{ "wstate", NULL, w_init, w_fini },
	{ NULL, NULL, NULL, NULL },
};

/* ---- helpers --------------------------------------------------------- */

static cgr_ctx *new_ctx(void)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx = NULL;

	cp.exports = exports;
	cp.log_level = -1; /* the failures below are meant */
	if (getenv("T_VERBOSE") != NULL)
		cp.log_level = CGR_LOG_INFO;
	cgr_ctx_create(&cp, &ctx);
	return ctx;
}

static int new_proc(cgr_ctx *ctx, const char *name, const char *arg,
		    cgr_worker **w)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;

	wp.kind = CGR_WORKER_PROCESS;
	wp.name = name;
	wp.init = w_init;
	wp.fini = w_fini;
	wp.arg_data = arg;
	wp.arg_len = arg != NULL ? strlen(arg) + 1 : 0;
	return cgr_worker_create(ctx, &wp, w);
}

/* A pipe whose write end the worker processes inherit (not close-on-
 * exec): t_sleep notes there that it started.  *arg: the worker's
 * arg_data, "add fd". */
static int note_pipe(int fds[2], char *arg, size_t len, int add)
{
	if (pipe(fds) != 0)
		return -1;
	snprintf(arg, len, "%d %d", add, fds[1]);
	return 0;
}

/* Waits for t_sleep's note (a blocking read: the task has started). */
static bool note_wait(int fd)
{
	char ch;
	return read(fd, &ch, 1) == 1;
}

static cgr_node *task(cgr_graph *g, cgr_worker *w, cgr_task_fn fn,
		      const char *name, cgr_node *in)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_node *out = NULL;

	d.fn = fn;
	d.name = name;
	d.max_out_bytes = fn == t_list ? 1024 : 64;
	cgr_graph_task(g, w, &d, &in, 1, &out, 1);
	return out;
}

/* Whether no child process is left (none to reap, none running). */
static bool no_children(void)
{
	return waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD;
}

struct leaks {
	int fds, threads;
};

static struct leaks leaks_now(void)
{
	struct leaks l = { t_count_dir("/proc/self/fd"),
			   t_count_threads() };
	return l;
}

/* Entries of /dev/shm whose name holds "cgr" (cgr's segments are
 * memfds: there must never be one). */
static int shm_files(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
		n += strstr(e->d_name, "cgr") != NULL;
	closedir(d);
	return n;
}

static void leaks_check(struct leaks before, const char *what)
{
	struct leaks now = leaks_now();

	now.threads = t_threads_back(before.threads);

	t_is(shm_files(), 0, "%s: nothing of cgr's in /dev/shm", what);
	t_is(now.fds, before.fds, "%s: descriptors back to start", what);
	t_is(now.threads, before.threads, "%s: threads back to start", what);
	t_ok(no_children(), "%s: no child process left", what);
}

static int run1(cgr_compiled *c, int64_t v, int64_t *out, int64_t *pid)
{
	cgr_value a = cgr_value_bytes(&v, 8), o;
	cgr_ref r;
	int ret = cgr_execute(c, &a, 1, &r);

	if (ret == 0)
		ret = cgr_ref_get(c, r, 10 * SEC, &o, 1);
	if (ret == 0 && o.kind == CGR_VALUE_ERROR)
		ret = o.code;
	else if (ret == 0 && o.kind == CGR_VALUE_BYTES &&
		 o.u.bytes.len == 16) {
		memcpy(out, o.u.bytes.data, 8);
		memcpy(pid, (const char *)o.u.bytes.data + 8, 8);
	}
	cgr_ref_release(c, r);
	return ret;
}

/* ---- graphs ---------------------------------------------------------- */

/* driver -> p0 (+10) -> thread t (+0) -> p1 (+100) -> driver, and a
 * second output straight from p0: every value, and who ran it. */
static void check_mixed(void)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p0 = NULL, *p1 = NULL, *t = NULL;
	cgr_graph *g = NULL;
	cgr_compiled *c = NULL;
	cgr_node *in, *a, *b, *d, *outs[2];
	int bad = 0, n = (int)t_scale(2000);

	t_is(new_proc(ctx, "p0", "10", &p0), 0, "process worker p0 starts");
	t_is(new_proc(ctx, "p1", "100", &p1), 0, "process worker p1 starts");
	t_is(cgr_worker_create(ctx, NULL, &t), 0, "thread worker starts");
	t_ok(cgr_worker_pid(p0) > 0 && cgr_worker_pid(p0) != getpid() &&
		     cgr_worker_pid(p1) != cgr_worker_pid(p0) &&
		     cgr_worker_pid(t) == 0,
	     "each process worker has a process of its own");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_add, "a", in);
	b = task(g, t, t_add, "b", a);
	d = task(g, p1, t_add, "d", b);
	outs[0] = d;
	outs[1] = a;
	cgr_graph_output(g, outs, 2);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "mixed graph compiles: %s",
	     cgr_graph_errmsg(g));
	for (int i = 0; c != NULL && i < n; i++) {
		int64_t v = i * 7 - 3, r0, r1, pid0, pid1;
		cgr_value arg = cgr_value_bytes(&v, 8), o[2];
		cgr_ref ref;
		int e1 = -1, e2 = -1;
		memset(o, 0, sizeof(o));
		if ((e1 = cgr_execute(c, &arg, 1, &ref)) != 0 ||
		    (e2 = cgr_ref_get(c, ref, 10 * SEC, o, 2)) != 0 ||
		    o[0].kind != CGR_VALUE_BYTES || o[1].kind != CGR_VALUE_BYTES) {
			t_diag("execution %d (%d %d): kinds %d %d: %s", i, e1, e2,
			       o[0].kind,
			       o[1].kind,
			       o[0].kind == CGR_VALUE_ERROR ? o[0].u.error.msg :
			       o[1].kind == CGR_VALUE_ERROR ? o[1].u.error.msg :
							      "");
			bad++;
			break;
		}
		memcpy(&r0, o[0].u.bytes.data, 8);
		memcpy(&pid0, (const char *)o[0].u.bytes.data + 8, 8);
		memcpy(&r1, o[1].u.bytes.data, 8);
		memcpy(&pid1, (const char *)o[1].u.bytes.data + 8, 8);
		bad += r0 != v + 110 || r1 != v + 10 ||
		       pid0 != cgr_worker_pid(p1) || pid1 != cgr_worker_pid(p0);
		cgr_ref_release(c, ref);
	}
	t_is(c != NULL ? bad : -1, 0,
	     "%d executions through 2 processes and a thread: every "
		     "value right, each task in its worker's process",
	     n);
	/* Deadline 0 on an idle graph: the workers get the time to leave
	 * (none killed, none abandoned) and serve the next graph. */
	t_is(cgr_compiled_teardown(c, 0), 0, "teardown with deadline 0");
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	c = NULL;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	d = task(g, p1, t_add, "d", task(g, t, t_add, "b",
					task(g, p0, t_add, "a", in)));
	cgr_graph_output(g, &d, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0,
	     "the same workers compile the next graph: %s",
	     cgr_graph_errmsg(g));
	{
		int64_t r = 0, pid = 0;
		int ret = c != NULL ? run1(c, 5, &r, &pid) : -1;
		t_ok(ret == 0 && r == 115 && pid == cgr_worker_pid(p1),
		     "...and run it: %d, %lld", ret, (long long)r);
	}
	t_is(cgr_compiled_teardown(c, 0), 0, "its teardown, deadline 0");
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	t_is(cgr_worker_destroy(p0, 5 * SEC), 0, "p0 stops (fini ran)");
	t_is(cgr_worker_pid(p0), 0, "p0's process reaped");
	cgr_ctx_destroy(ctx);
	leaks_check(before, "mixed graph");
}

/* A stream task on a process worker, overlap off and on: its work runs
 * on a compute stream in the worker's process, its outputs reach the
 * driver, 8 executions in flight. */
static void check_stream(int overlap)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_worker *p0 = NULL, *t = NULL;
	cgr_graph *g = NULL;
	cgr_compiled *c = NULL;
	cgr_node *in, *a, *b;
	cgr_ref refs[8];
	int bad = 0, n = (int)t_scale(800);

	new_proc(ctx, "p0", "5", &p0);
	cgr_worker_create(ctx, NULL, &t);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	d.fn = t_stream, d.name = "on-stream", d.flags = CGR_TASK_STREAM;
	d.max_out_bytes = 64;
	cgr_graph_task(g, p0, &d, &in, 1, &a, 1);
	b = task(g, t, t_add, "after", a);
	cgr_graph_output(g, &b, 1);
	cp.max_inflight = 8;
	cp.overlap = overlap;
	t_is(cgr_graph_compile(g, &cp, &c), 0, "stream task, overlap %s: %s",
	     overlap ? "on" : "off", cgr_graph_errmsg(g));
	for (int i = 0; c != NULL && i < n; i += 8) {
		for (int k = 0; k < 8; k++) {
			int64_t v = i + k;
			cgr_value arg = cgr_value_bytes(&v, 8);
			bad += cgr_execute(c, &arg, 1, &refs[k]) != 0;
		}
		for (int k = 0; k < 8; k++) {
			cgr_value o;
			int64_t r = 0, pid = 0;
			if (cgr_ref_get(c, refs[k], 10 * SEC, &o, 1) != 0 ||
			    o.kind != CGR_VALUE_BYTES) {
				bad++;
				continue;
			}
			memcpy(&r, o.u.bytes.data, 8);
			memcpy(&pid, (const char *)o.u.bytes.data + 8, 8);
			/* "after" on the thread replaces the pid */
			bad += r != i + k + 5 || pid != getpid();
			cgr_ref_release(c, refs[k]);
		}
	}
	t_is(c != NULL ? bad : -1, 0,
	     "overlap %s: %d executions of a stream task in a worker "
	     "process, every value right",
	     overlap ? "on" : "off", n);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	cgr_ctx_destroy(ctx);
	leaks_check(before, "stream task");
}

/* Occurrences of s in file path. */
static int count_in_file(const char *path, const char *s)
{
	FILE *f = fopen(path, "r");
	static char buf[1 << 20];
	size_t n;
	int k = 0;

	if (f == NULL)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	for (char *p = buf; (p = strstr(p, s)) != NULL; p += strlen(s))
		k++;
	return k;
}

/* The trace shows a process worker's operations and its compute stream's
 * jobs (recorded in that process, read by the driver). */
static void check_trace(void)
{
	cgr_ctx *ctx = new_ctx();
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_worker *p0 = NULL, *t = NULL;
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *in, *a, *b, *s;
	char path[64];
	int bad = 0, n = 20;

	new_proc(ctx, "p0", "1", &p0);
	cgr_worker_create(ctx, NULL, &t);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_add, "alpha", in);
	d.fn = t_stream, d.name = "gamma", d.flags = CGR_TASK_STREAM;
	d.max_out_bytes = 64;
	cgr_graph_task(g, p0, &d, &a, 1, &s, 1);
	b = task(g, t, t_add, "beta", s);
	cgr_graph_output(g, &b, 1);
	cp.trace_events = 256;
	cp.overlap = 1;
	t_is(cgr_graph_compile(g, &cp, &c), 0, "traced graph compiles: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	for (int i = 0; c != NULL && i < n; i++) {
		int64_t r, pid;
		bad += run1(c, i, &r, &pid) != 0 || r != i + 2;
	}
	t_is(bad, 0, "%d executions", n);
	snprintf(path, sizeof(path), "/tmp/cgr-graph-proc-%d.json",
		 (int)getpid());
	t_is(cgr_compiled_teardown(c, 5 * SEC), 0, "teardown");
	t_is(cgr_compiled_write_trace(c, path), 0, "trace written");
	t_is(count_in_file(path, "\"name\":\"compute alpha\""), n,
	     "p0's %d calls of alpha, from its process", n);
	t_is(count_in_file(path, "\"name\":\"run gamma\""), n,
	     "its compute stream's %d jobs of gamma", n);
	t_is(count_in_file(path, "\"name\":\"compute beta\""), n,
	     "and the thread's beta");
	t_ok(count_in_file(path, "worker p0") >= 2,
	     "on p0's tracks (its thread, its compute stream)");
	unlink(path);
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
}

/* Lists cross processes: from a worker process to a thread and to the
 * driver, from a thread to a worker process, and a constant list to a
 * worker process (each reader relocates the list's tables to its own
 * mapping). */
static void check_lists(void)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p0 = NULL, *p1 = NULL, *t = NULL;
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *in, *a, *b, *d, *e, *k, *f, *outs[4];
	int bad = 0, n = (int)t_scale(1000);
	int64_t seven = 7, kt[3] = { 7, 8, 9 }, kshape[1] = { 3 };
	cgr_value kitems[2] = { cgr_value_bytes("item 7", 7),
				cgr_value_tensor(kt, kDLInt, 64, 1, kshape) };
	cgr_value klist = cgr_value_list(kitems, 2);

	new_proc(ctx, "p0", "0", &p0);
	new_proc(ctx, "p1", "0", &p1);
	cgr_worker_create(ctx, NULL, &t);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_list, "plist", in);	 /* process -> */
	b = task(g, t, t_unlist, "tunlist", a);	 /* -> thread */
	d = task(g, t, t_list, "tlist", in);	 /* thread -> */
	e = task(g, p1, t_unlist, "punlist", d); /* -> process */
	outs[0] = b, outs[1] = e, outs[2] = a;	 /* and -> driver */
	cgr_graph_const(g, &klist, &k);
	outs[3] = f = task(g, p1, t_unlist, "cunlist", k); /* const -> */
	cgr_graph_output(g, outs, 4);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "list graph compiles: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	for (int i = 0; c != NULL && i < n; i++) {
		int64_t v = 1000 + i, r0 = 0, r1 = 0;
		cgr_value arg = cgr_value_bytes(&v, 8), o[4];
		cgr_ref r;
		if (cgr_execute(c, &arg, 1, &r) != 0 ||
		    cgr_ref_get(c, r, 10 * SEC, o, 4) != 0) {
			bad++;
			break;
		}
		if (o[0].kind == CGR_VALUE_BYTES && o[1].kind == CGR_VALUE_BYTES)
			memcpy(&r0, o[0].u.bytes.data, 8),
				memcpy(&r1, o[1].u.bytes.data, 8);
		else if (bad++ == 0)
			t_diag("execution %d: %s", i,
			       o[0].kind == CGR_VALUE_ERROR ? o[0].u.error.msg :
			       o[1].kind == CGR_VALUE_ERROR ? o[1].u.error.msg :
							      "?");
		bad += r0 != v || r1 != v;
		if (o[3].kind != CGR_VALUE_BYTES || o[3].u.bytes.len != 8 ||
		    memcmp(o[3].u.bytes.data, &seven, 8) != 0) {
			if (bad++ == 0)
				t_diag("execution %d: the constant list: %s",
				       i,
				       o[3].kind == CGR_VALUE_ERROR ?
					       o[3].u.error.msg :
					       "not its value");
		}
		bad += o[2].kind != CGR_VALUE_LIST || o[2].u.list.n != 2 ||
		       strncmp(o[2].u.list.items[0].u.bytes.data, "item ", 5) ||
		       ((const int64_t *)o[2].u.list.items[1].u.tensor.data)[1] !=
			       v + 1;
		cgr_ref_release(c, r);
	}
	t_is(c != NULL ? bad : -1, 0,
	     "%d executions of lists from a process to a thread and to the "
	     "driver, from a thread to a process, and a constant list to a "
	     "process: every item right",
	     n);
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
}

/* Error values from a process worker's task, several in flight. */
static void check_errors(void)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_worker *p0 = NULL;
	cgr_graph *g = NULL;
	cgr_compiled *c = NULL;
	cgr_node *in, *a, *b;
	cgr_ref refs[4];
	int bad = 0, n = (int)t_scale(300);

	new_proc(ctx, "p0", "1", &p0);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_fail3, "fail3", in);
	b = task(g, p0, t_add, "after", a);
	cgr_graph_output(g, &b, 1);
	cp.max_inflight = 4;
	t_is(cgr_graph_compile(g, &cp, &c), 0, "compiles");
	for (int i = 0; c != NULL && i < n; i += 4) {
		for (int k = 0; k < 4; k++) {
			int64_t v = i + k;
			cgr_value arg = cgr_value_bytes(&v, 8);
			bad += cgr_execute(c, &arg, 1, &refs[k]) != 0;
		}
		for (int k = 0; k < 4; k++) {
			cgr_value o;
			int64_t v = i + k, r = 0;
			char want[64];
			if (cgr_ref_get(c, refs[k], 10 * SEC, &o, 1) != 0) {
				bad++;
				continue;
			}
			snprintf(want, sizeof(want), "no multiples of 3 (%lld)",
				 (long long)v);
			if (v % 3 == 0)
				bad += o.kind != CGR_VALUE_ERROR ||
				       o.code != CGR_ETASK ||
				       strstr(o.u.error.msg, want) == NULL;
			else if (o.kind == CGR_VALUE_BYTES)
				memcpy(&r, o.u.bytes.data, 8),
					bad += r != v + 2;
			else
				bad++;
			cgr_ref_release(c, refs[k]);
		}
	}
	t_is(c != NULL ? bad : -1, 0,
	     "error values of a process worker's task reach the "
		     "output with their message; the rest compute");
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	cgr_ctx_destroy(ctx);
	leaks_check(before, "error values");
}

/* init by name in the worker process, its code; what cannot cross. */
static void check_refusals(void)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w = NULL, *p0 = NULL;
	cgr_graph *g = NULL;
	cgr_compiled *c = NULL;
	cgr_node *in, *a;
	int x = 0;

	t_is(new_proc(ctx, "bad", "fail", &w), -EIO,
	     "init failing in the worker process fails cgr_worker_create "
	     "with its code");
	t_ok(no_children(), "and its process is gone");
	wp.kind = CGR_WORKER_PROCESS;
	wp.init = w_init; /* not this pair */
	t_is(cgr_worker_create(ctx, &wp, &w), -EINVAL,
	     "an init/fini pair not exported: -EINVAL");
	wp.init = NULL;
	wp.arg = &x;
	t_is(cgr_worker_create(ctx, &wp, &w), -EINVAL,
	     "a pointer arg for a process worker: -EINVAL");
	new_proc(ctx, "p0", "0", &p0);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_unexported, "unexported", in);
	cgr_graph_output(g, &a, 1);
	t_is(cgr_graph_compile(g, NULL, &c), -EINVAL,
	     "a task function not exported is refused at compile");
	t_ok(strstr(cgr_graph_errmsg(g), "exports") != NULL, "saying so: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	{
		/* A communicator of the caller's lives in this process: a
		 * process worker's task could never reach it. */
		cgr_worker *t = NULL, *m[2];
		cgr_comm *comm = NULL;
		cgr_worker_create(ctx, NULL, &t);
		m[0] = t, m[1] = p0;
		t_is(cgr_comm_create(ctx, m, 2, CGR_BACKEND_CPU, &comm),
		     -ENOTSUP, "a communicator with a process worker member: "
		     "-ENOTSUP");
	}
	cgr_ctx_destroy(ctx);
	leaks_check(before, "refusals");
}

/* ---- collectives ------------------------------------------------------ */

/* Each member's input: its value + add; an allreduce (sum) of 3 members
 * on two processes and a thread; every member's output to the driver.
 * sleepy: p1's input task sleeps its input's milliseconds first. */
static cgr_compiled *coll_graph(cgr_ctx *ctx, cgr_worker **m, bool sleepy,
				int overlap)
{
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *in, *ins[3], *outs[3];

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	for (int r = 0; r < 3; r++)
		ins[r] = task(g, m[r], sleepy && r == 2 ? t_sleep : t_tadd,
			      "contribute", in);
	cgr_graph_allreduce(g, ins, 3, CGR_SUM, NULL, outs);
	cgr_graph_output(g, outs, 3);
	cp.overlap = overlap;
	cp.max_inflight = 4;
	t_is(cgr_graph_compile(g, &cp, &c), 0, "allreduce over 2 processes "
					       "and a thread compiles: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return c;
}

static void check_coll(int overlap)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_worker *m[3] = { NULL, NULL, NULL };
	cgr_compiled *c;
	int bad = 0, n = (int)t_scale(1000);

	new_proc(ctx, "p0", "1", &m[0]);
	cgr_worker_create(ctx, NULL, &m[1]);
	new_proc(ctx, "p1", "100", &m[2]);
	c = coll_graph(ctx, m, false, overlap);
	for (int i = 0; c != NULL && i < n; i++) {
		int64_t v = i * 3, r;
		cgr_value a = cgr_value_bytes(&v, 8), o[3];
		cgr_ref ref;
		if (cgr_execute(c, &a, 1, &ref) != 0 ||
		    cgr_ref_get(c, ref, 10 * SEC, o, 3) != 0) {
			bad++;
			break;
		}
		for (int k = 0; k < 3; k++) {
			/* the sum of (v + add, pid) over the members */
			if (o[k].kind != CGR_VALUE_TENSOR ||
			    cgr_tensor_nbytes(&o[k].u.tensor) != 16) {
				bad++;
				continue;
			}
			memcpy(&r, o[k].u.tensor.data, 8);
			bad += r != 3 * v + 101;
		}
		cgr_ref_release(c, ref);
	}
	t_is(c != NULL ? bad : -1, 0,
	     "overlap %s: %d allreduces across two worker processes and a "
	     "thread, every member's result right",
	     overlap ? "on" : "off", n);
	t_is(cgr_compiled_teardown(c, 5 * SEC), 0, "teardown");
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
	leaks_check(before, "collective");
}

/* kill -9 of p1 while the other members wait for it inside the
 * allreduce: they fail instead of hanging, the executions are
 * CGR_EPEERDEAD error values, teardown finds nobody stuck. */
static void check_coll_kill(void)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_worker *m[3] = { NULL, NULL, NULL };
	cgr_compiled *c;
	int64_t v = 300;
	cgr_value a = cgr_value_bytes(&v, 8), o[3];
	cgr_ref ref;
	int note[2];
	char warg[64];

	new_proc(ctx, "p0", "1", &m[0]);
	cgr_worker_create(ctx, NULL, &m[1]);
	note_pipe(note, warg, sizeof(warg), 100);
	new_proc(ctx, "p1", warg, &m[2]);
	close(note[1]);
	c = coll_graph(ctx, m, true, 0);
	t_is(cgr_execute(c, &a, 1, &ref), 0, "execute");
	t_ok(note_wait(note[0]), "p1 is in its input task, the others in "
				 "the allreduce");
	kill(cgr_worker_pid(m[2]), SIGKILL);
	t_is(cgr_ref_get(c, ref, 10 * SEC, o, 3), 0, "get");
	t_ok(o[0].kind == CGR_VALUE_ERROR && o[0].code == CGR_EPEERDEAD &&
		     o[1].code == CGR_EPEERDEAD && o[2].code == CGR_EPEERDEAD &&
		     strstr(o[0].u.error.msg, "p1") != NULL,
	     "every member's output: CGR_EPEERDEAD naming p1");
	cgr_ref_release(c, ref);
	t_is(cgr_compiled_teardown(c, 2 * SEC), 0,
	     "the survivors left the collective: nobody stuck");
	cgr_compiled_destroy(c);
	cgr_worker_destroy(m[2], SEC);
	cgr_ctx_destroy(ctx);
	close(note[0]);
	leaks_check(before, "kill -9 mid-collective");
}

/* ---- failures -------------------------------------------------------- */

/* kill -9 of p0 while executions are in flight: with full ring (p0
 * sleeps in its task and the driver fills max_inflight) or one at a
 * time mid-task.  The executions become CGR_EPEERDEAD error values naming
 * p0 and the signal; the context goes on without it. */
static void check_kill(int inflight, const char *what)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_worker *p0 = NULL, *t = NULL;
	cgr_graph *g = NULL;
	cgr_compiled *c = NULL;
	cgr_node *in, *a, *b;
	cgr_ref refs[16];
	int64_t v = 200, t0, dt, r = 0, pid = 0;
	cgr_value arg = cgr_value_bytes(&v, 8), o;
	int bad = 0, sent = 0, note[2];
	char warg[64];

	note_pipe(note, warg, sizeof(warg), 1);
	new_proc(ctx, "p0", warg, &p0);
	close(note[1]);
	cgr_worker_create(ctx, NULL, &t);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, t, t_add, "first", in);
	b = task(g, p0, t_sleep, "sleepy", a);
	cgr_graph_output(g, &b, 1);
	cp.max_inflight = (uint32_t)inflight;
	t_is(cgr_graph_compile(g, &cp, &c), 0, "%s: compiles", what);
	while (sent < inflight && cgr_execute(c, &arg, 1, &refs[sent]) == 0)
		sent++;
	t_is(sent, inflight, "%s: %d executions in flight", what, inflight);
	t_ok(note_wait(note[0]), "%s: p0 is inside its task", what);
	t0 = t_now_ns();
	kill(cgr_worker_pid(p0), SIGKILL);
	for (int i = 0; i < sent; i++) {
		if (cgr_ref_get(c, refs[i], 10 * SEC, &o, 1) != 0)
			bad++;
		else
			bad += o.kind != CGR_VALUE_ERROR ||
			       o.code != CGR_EPEERDEAD ||
			       strstr(o.u.error.msg, "p0") == NULL ||
			       strstr(o.u.error.msg, "signal 9") == NULL;
		if (i == 0) {
			dt = t_now_ns() - t0;
			t_diag("%s: death seen by the driver after %.1f ms", what,
			       dt / 1e6);
			t_ok(dt < 2 * SEC, "%s: seen at once (%.1f ms)", what,
			     dt / 1e6);
			if (o.kind == CGR_VALUE_ERROR)
				t_diag("the error value: %s", o.u.error.msg);
		}
		cgr_ref_release(c, refs[i]);
	}
	t_is(bad, 0, "%s: every execution in flight is a CGR_EPEERDEAD "
		     "error value naming the worker and its signal",
	     what);
	t_is(cgr_execute(c, &arg, 1, &refs[0]), CGR_EPEERDEAD,
	     "%s: the graph takes no more executions", what);
	t_is(cgr_compiled_teardown(c, 2 * SEC), 0, "%s: teardown", what);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	/* The context without p0. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_add, "again", in);
	cgr_graph_output(g, &a, 1);
	t_is(cgr_graph_compile(g, NULL, &c), CGR_EPEERDEAD,
	     "%s: a graph on the dead worker is refused: %s", what,
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, t, t_add, "thread", in);
	cgr_graph_output(g, &a, 1);
	cgr_graph_compile(g, NULL, &c);
	t_ok(c != NULL && run1(c, 5, &r, &pid) == 0 && r == 5,
	     "%s: the context runs graphs without it", what);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	t_is(cgr_worker_destroy(p0, SEC), CGR_EPEERDEAD,
	     "%s: destroying the dead worker says it died", what);
	cgr_ctx_destroy(ctx);
	close(note[0]);
	leaks_check(before, what);
}

/* p0 stuck in a task past the teardown deadline: killed. */
static void check_stuck(void)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p0 = NULL;
	cgr_graph *g = NULL;
	cgr_compiled *c = NULL;
	cgr_node *in, *a;
	int64_t v = 60000, t0;
	cgr_value arg = cgr_value_bytes(&v, 8);
	cgr_ref ref;
	int note[2];
	char warg[64];

	note_pipe(note, warg, sizeof(warg), 0);
	new_proc(ctx, "p0", warg, &p0);
	close(note[1]);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_sleep, "forever", in);
	cgr_graph_output(g, &a, 1);
	cgr_graph_compile(g, NULL, &c);
	t_is(cgr_execute(c, &arg, 1, &ref), 0, "a minute-long task starts");
	t_ok(note_wait(note[0]), "p0 is inside it");
	t0 = t_now_ns();
	t_is(cgr_compiled_teardown(c, 300000000), CGR_ESTUCK,
	     "teardown past its deadline: CGR_ESTUCK");
	t_ok(t_now_ns() - t0 < 350000000,
	     "within the 300 ms deadline, plus the kill (%.1f ms)",
	     (t_now_ns() - t0) / 1e6);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	t_is(cgr_worker_destroy(p0, SEC), CGR_EPEERDEAD,
	     "the stuck worker was killed");
	cgr_ctx_destroy(ctx);
	close(note[0]);
	leaks_check(before, "stuck worker");
}

/* A worker process stopped (SIGSTOP) with an execution in flight:
 * teardown(500 ms) kills it at the deadline and returns CGR_ESTUCK by then
 * (a few ms for the kill); the other worker process of the graph left in
 * time and serves the next graph. */
static void check_stopped(void)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p0 = NULL, *p1 = NULL;
	cgr_graph *g = NULL;
	cgr_compiled *c = NULL;
	cgr_node *in, *a, *b;
	int64_t v = 1, r = 0, pid = 0, t0, dt;
	cgr_value arg = cgr_value_bytes(&v, 8);
	cgr_ref ref;

	new_proc(ctx, "p0", "1", &p0);
	new_proc(ctx, "p1", "100", &p1);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_add, "first", in);
	b = task(g, p1, t_add, "second", a);
	cgr_graph_output(g, &b, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "stopped: compiles");
	t_ok(c != NULL && run1(c, 1, &r, &pid) == 0 && r == 102,
	     "stopped: runs (%lld)", (long long)r);
	t_is(kill(cgr_worker_pid(p0), SIGSTOP), 0, "p0 stopped (SIGSTOP)");
	t_is(cgr_execute(c, &arg, 1, &ref), 0, "an execution in flight");
	t0 = t_now_ns();
	t_is(cgr_compiled_teardown(c, 500000000), CGR_ESTUCK,
	     "teardown(500 ms) with p0 stopped: CGR_ESTUCK");
	dt = t_now_ns() - t0;
	t_diag("teardown returned after %.1f ms", dt / 1e6);
	t_ok(dt >= 490000000 && dt < 550000000,
	     "within its 500 ms deadline, plus the kill (%.1f ms)", dt / 1e6);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	/* p1 left in time: alive, and serves another graph. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p1, t_add, "again", in);
	cgr_graph_output(g, &a, 1);
	c = NULL;
	t_is(cgr_graph_compile(g, NULL, &c), 0, "p1 compiles a new graph");
	t_ok(c != NULL && run1(c, 5, &r, &pid) == 0 && r == 105 &&
		     pid == cgr_worker_pid(p1),
	     "p1 runs it (%lld)", (long long)r);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	t0 = t_now_ns();
	t_is(cgr_worker_destroy(p0, 0), CGR_EPEERDEAD,
	     "the stopped worker was killed: destroy says it died, even "
	     "with a timeout of 0");
	t_ok(t_now_ns() - t0 < SEC / 10, "...at once (%.1f ms)",
	     (t_now_ns() - t0) / 1e6);
	t_is(cgr_worker_destroy(p1, SEC), 0, "p1 stops as usual");
	cgr_ctx_destroy(ctx);
	leaks_check(before, "stopped worker");
}

/* A worker process stopped (SIGSTOP) before a compile: the compile is
 * cgr's own work, so it does not wait for ever: after 10 s without its
 * answer the process is killed and the compile fails with CGR_ESTUCK,
 * saying so; the worker is dead then (CGR_EPEERDEAD). */
static void check_stopped_compile(void)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p0 = NULL;
	cgr_graph *g = NULL;
	cgr_compiled *c = NULL;
	cgr_node *in, *a;
	int64_t t0, dt;

	new_proc(ctx, "p0", "1", &p0);
	t_is(kill(cgr_worker_pid(p0), SIGSTOP), 0, "p0 stopped (SIGSTOP)");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_add, "first", in);
	cgr_graph_output(g, &a, 1);
	t0 = t_now_ns();
	t_is(cgr_graph_compile(g, NULL, &c), CGR_ESTUCK,
	     "compile with p0 stopped: CGR_ESTUCK");
	dt = t_now_ns() - t0;
	t_ok(strstr(cgr_graph_errmsg(g), "did not answer") != NULL,
	     "...saying so: %s", cgr_graph_errmsg(g));
	t_ok(dt >= 10 * SEC - SEC / 100 && dt < 12 * SEC,
	     "...after its 10 s (%.1f ms)", dt / 1e6);
	cgr_graph_destroy(g);
	t_is(cgr_worker_destroy(p0, SEC), CGR_EPEERDEAD,
	     "the stopped worker was killed: destroy says it died");
	cgr_ctx_destroy(ctx);
	leaks_check(before, "stopped worker at compile");
}

/* cgr_worker_destroy(w, 400 ms) of a worker process whose fini takes
 * 200 ms: fini gets the whole timeout, not a part of it (0, not killed). */
static void check_slow_fini(void)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p0 = NULL;
	int64_t t0, dt;

	t_is(new_proc(ctx, "p0", "slowfini", &p0), 0, "slow fini: created");
	t0 = t_now_ns();
	t_is(cgr_worker_destroy(p0, 400000000), 0,
	     "destroy(400 ms) waits for a fini of 200 ms: 0");
	dt = t_now_ns() - t0;
	t_ok(dt >= 200000000 && dt < 400000000,
	     "...returning when fini did (%.1f ms)", dt / 1e6);
	cgr_ctx_destroy(ctx);
}

/* A pidfd of the test's own for pid (not reaped by it). */
static int pidfd_of(int pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* p0 killed, and right away (before the driver's monitor can notice, or
 * just after the process ended: `settle`) something sent to it: a
 * compile (CGR_EPEERDEAD, the message says it died and how) or a destroy
 * (CGR_EPEERDEAD).  n times each. */
static void check_dead_send(int n)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	int bad_compile = 0, bad_destroy = 0, msgs = 0;
	char first[256] = "";

	for (int i = 0; i < 2 * n; i++) {
		bool compile = i < n, settle = i % 2;
		cgr_worker *p0 = NULL;
		cgr_graph *g = NULL;
		cgr_compiled *c = NULL;
		cgr_node *in, *a;
		int ret, pfd;
		if (new_proc(ctx, "p0", "0", &p0) != 0) {
			*(compile ? &bad_compile : &bad_destroy) += 1;
			continue;
		}
		pfd = pidfd_of(cgr_worker_pid(p0));
		if (compile) {
			cgr_graph_create(ctx, &g);
			cgr_graph_input(g, 0, &in);
			a = task(g, p0, t_add, "late", in);
			cgr_graph_output(g, &a, 1);
		}
		kill(cgr_worker_pid(p0), SIGKILL);
		if (settle) {
			/* It has ended (its socket closed); the monitor may
			 * or may not have seen it yet. */
			struct pollfd pf = { pfd, POLLIN, 0 };
			poll(&pf, 1, 5000);
		}
		if (compile) {
			const char *m;
			ret = cgr_graph_compile(g, NULL, &c);
			m = cgr_graph_errmsg(g);
			if (ret != CGR_EPEERDEAD || strstr(m, "p0") == NULL ||
			    strstr(m, "died") == NULL ||
			    strstr(m, "signal 9") == NULL) {
				bad_compile++;
				t_diag("compile %d: %s: %s", i, cgr_err_name(ret),
				       m);
			} else if (msgs++ == 0) {
				snprintf(first, sizeof(first), "%s", m);
			}
			if (c != NULL)
				cgr_compiled_destroy(c);
			cgr_graph_destroy(g);
			ret = cgr_worker_destroy(p0, SEC);
			bad_compile += ret != CGR_EPEERDEAD;
		} else {
			ret = cgr_worker_destroy(p0, SEC);
			if (ret != CGR_EPEERDEAD) {
				bad_destroy++;
				t_diag("destroy %d: %s", i, cgr_err_name(ret));
			}
		}
		close(pfd);
	}
	t_is(bad_compile, 0,
	     "compile with a worker killed just before: CGR_EPEERDEAD saying "
	     "it died and how, %d of %d", n - bad_compile, n);
	t_diag("the message: %s", first);
	t_is(bad_destroy, 0,
	     "destroy of a worker killed just before: CGR_EPEERDEAD, %d of %d",
	     n - bad_destroy, n);
	cgr_ctx_destroy(ctx);
	leaks_check(before, "sends to a worker just killed");
}

/* A task on p0 ends its thread (pthread_exit: how -1) or its process
 * (exit(7): how -2): the execution is a CGR_EPEERDEAD error value saying
 * so, at once; the graph takes no more; the worker is dead to the
 * context. */
static void check_task_exit(int64_t how, const char *what, const char *says)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p0 = NULL, *t = NULL;
	cgr_graph *g = NULL;
	cgr_compiled *c = NULL;
	cgr_node *in, *a, *b;
	int64_t v = how, r = 0, pid = 0, t0;
	cgr_value arg = cgr_value_bytes(&v, 8), o;
	cgr_ref ref;
	int ret;

	new_proc(ctx, "p0", "0", &p0);
	cgr_worker_create(ctx, NULL, &t);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, t, t_add, "first", in);
	b = task(g, p0, t_bye, "bye", a);
	cgr_graph_output(g, &b, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "%s: compiles", what);
	t_ok(run1(c, 3, &r, &pid) == 0 && r == 3, "%s: runs", what);
	t_is(cgr_execute(c, &arg, 1, &ref), 0, "%s: the execution that ends it",
	     what);
	t0 = t_now_ns();
	ret = cgr_ref_get(c, ref, 10 * SEC, &o, 1);
	t_ok(ret == 0 && o.kind == CGR_VALUE_ERROR &&
		     o.code == CGR_EPEERDEAD &&
		     strstr(o.u.error.msg, "p0") != NULL &&
		     strstr(o.u.error.msg, "died") != NULL &&
		     strstr(o.u.error.msg, says) != NULL &&
		     strcmp(o.u.error.worker, "p0") == 0,
	     "%s: a CGR_EPEERDEAD error value: %s", what,
	     ret == 0 && o.kind == CGR_VALUE_ERROR ? o.u.error.msg : "-");
	t_ok(t_now_ns() - t0 < 2 * SEC, "%s: at once (%.1f ms)", what,
	     (t_now_ns() - t0) / 1e6);
	cgr_ref_release(c, ref);
	t_is(cgr_execute(c, &arg, 1, &ref), CGR_EPEERDEAD,
	     "%s: the graph takes no more executions", what);
	t0 = t_now_ns();
	t_is(cgr_compiled_teardown(c, SEC), 0, "%s: teardown", what);
	t_ok(t_now_ns() - t0 < SEC / 2, "%s: ...at once (%.1f ms)", what,
	     (t_now_ns() - t0) / 1e6);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_add, "again", in);
	cgr_graph_output(g, &a, 1);
	c = NULL;
	t_is(cgr_graph_compile(g, NULL, &c), CGR_EPEERDEAD,
	     "%s: a graph on it is refused: %s", what, cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	t_is(cgr_worker_destroy(p0, SEC), CGR_EPEERDEAD,
	     "%s: destroying it says it died", what);
	cgr_ctx_destroy(ctx);
	leaks_check(before, what);
}

/* An init that ends its thread (pthread_exit): the worker is not made
 * (CGR_EPEERDEAD), its process exits, nothing is left. */
static void check_init_exit(void)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p0 = NULL;

	t_is(new_proc(ctx, "p0", "exit", &p0), CGR_EPEERDEAD,
	     "an init that calls pthread_exit: cgr_worker_create fails with "
	     "CGR_EPEERDEAD");
	cgr_ctx_destroy(ctx);
	leaks_check(before, "init calls pthread_exit");
}

/* The driver killed: its worker processes exit.  A child plays the
 * driver; this process is the subreaper that inherits the orphans. */
static void check_driver_death(void)
{
	int pfd[2];
	pid_t drv;
	int wpid = 0, st;
	int64_t t0;

	prctl(PR_SET_CHILD_SUBREAPER, 1);
	t_is(pipe(pfd), 0, "pipe");
	drv = fork();
	if (drv == 0) {
		cgr_ctx *ctx = new_ctx();
		cgr_worker *p0 = NULL;
		close(pfd[0]);
		if (new_proc(ctx, "orphan", "0", &p0) == 0)
			wpid = cgr_worker_pid(p0);
		if (write(pfd[1], &wpid, sizeof(wpid)) != sizeof(wpid))
			_exit(2);
		pause();
		_exit(0);
	}
	close(pfd[1]);
	t_is((int)read(pfd[0], &wpid, sizeof(wpid)), (int)sizeof(wpid),
	     "the driver started a worker");
	close(pfd[0]);
	t_ok(wpid > 0, "worker pid %d", wpid);
	t0 = t_now_ns();
	kill(drv, SIGKILL);
	t_is((int)waitpid(drv, &st, 0), (int)drv, "the driver is dead");
	t_is((int)waitpid(wpid, &st, 0), wpid, "its worker exited");
	t_diag("the worker exited %.1f ms after the driver's kill",
	       (t_now_ns() - t0) / 1e6);
	t_ok(t_now_ns() - t0 < 2 * SEC, "at once (%.1f ms)",
	     (t_now_ns() - t0) / 1e6);
	t_ok(no_children(), "nothing else left");
	prctl(PR_SET_CHILD_SUBREAPER, 0);
}

/* A worker process started by something else (here: this test, as a
 * launcher would) joins at an address; one that never comes times out. */
static void check_join(void)
{
	struct leaks before = leaks_now();
	cgr_ctx *ctx = new_ctx();
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w = NULL;
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *in, *a;
	char addr[64];
	pid_t child;
	int st = -1, bad = 0, n = (int)t_scale(500);

	snprintf(addr, sizeof(addr), "cgr-test-join-%d", (int)getpid());
	child = fork();
	if (child == 0) {
		/* The launcher's side: this program, told where to join. */
		setenv("CGR_WORKER", addr, 1);
		execl("/proc/self/exe", "graph-proc", (char *)NULL);
		_exit(127);
	}
	wp.kind = CGR_WORKER_PROCESS;
	wp.name = "joined";
	wp.init = w_init, wp.fini = w_fini;
	wp.arg_data = "7", wp.arg_len = 2;
	wp.join_addr = addr;
	t_is(cgr_worker_create(ctx, &wp, &w), 0,
	     "a process started elsewhere joins at %s", addr);
	t_is(cgr_worker_pid(w), (int)child, "it is the launcher's process");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, w, t_add, "a", in);
	cgr_graph_output(g, &a, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "a graph on it compiles");
	cgr_graph_destroy(g);
	for (int i = 0; c != NULL && i < n; i++) {
		int64_t r = 0, pid = 0;
		bad += run1(c, i, &r, &pid) != 0 || r != i + 7 || pid != child;
	}
	t_is(c != NULL ? bad : -1, 0, "%d executions on it", n);
	cgr_compiled_destroy(c);
	t_is(cgr_worker_destroy(w, 5 * SEC), 0, "it stops");
	t_is((int)waitpid(child, &st, 0), (int)child, "and exits");
	t_ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "with status 0");
	wp.name = "absent";
	snprintf(addr, sizeof(addr), "cgr-test-nobody-%d", (int)getpid());
	wp.join_timeout_ns = 200000000;
	t_is(cgr_worker_create(ctx, &wp, &w), -ETIMEDOUT,
	     "a worker that never joins: -ETIMEDOUT after its join timeout");
	cgr_ctx_destroy(ctx);
	leaks_check(before, "joined worker");
}

/* ---- untrusted slots -------------------------------------------------- */

/* A worker process that garbles its output slots' headers (test builds:
 * CGR_TEST_CORRUPT_SLOTS, 1 the length, 2 the kind, 3 the tensor rank,
 * 4 the place of its data: in the slot's big area, moved past it):
 * the thread worker reading them and the driver refuse them as
 * CGR_ECORRUPT error values, nothing reads out of bounds (ASan). */
static void check_bad_slots(int mode)
{
#ifdef CGR_FAULT_INJECTION
	cgr_ctx *ctx = new_ctx();
	cgr_worker *p0 = NULL, *t = NULL;
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *in, *a, *b, *outs[2];
	char m[8];
	int bad = 0, n = 50;

	snprintf(m, sizeof(m), "%d", mode);
	setenv("CGR_TEST_CORRUPT_SLOTS", m, 1);
	new_proc(ctx, "liar", "0", &p0);
	unsetenv("CGR_TEST_CORRUPT_SLOTS");
	cgr_worker_create(ctx, NULL, &t);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, p0, t_add, "garbled", in);
	b = task(g, t, t_add, "reader", a);
	outs[0] = b, outs[1] = a;
	cgr_graph_output(g, outs, 2);
	cgr_graph_compile(g, NULL, &c);
	cgr_graph_destroy(g);
	for (int i = 0; c != NULL && i < n; i++) {
		int64_t v = i;
		cgr_value arg = cgr_value_bytes(&v, 8), o[2];
		cgr_ref r;
		if (cgr_execute(c, &arg, 1, &r) != 0 ||
		    cgr_ref_get(c, r, 10 * SEC, o, 2) != 0) {
			bad++;
			break;
		}
		for (int k = 0; k < 2; k++)
			bad += o[k].kind != CGR_VALUE_ERROR ||
			       o[k].code != CGR_ECORRUPT;
		cgr_ref_release(c, r);
	}
	t_is(c != NULL ? bad : -1, 0,
	     "garbled %s from a worker process: CGR_ECORRUPT error values at "
	     "the thread that reads them and at the driver, %d executions",
	     mode == 1 ? "lengths" :
	     mode == 2 ? "kinds" :
	     mode == 3 ? "tensor ranks" :
			 "data places",
	     n);
	cgr_compiled_destroy(c);
	cgr_ctx_destroy(ctx);
#else
	(void)mode;
	t_skip("garbled slots need --enable-fault-injection");
#endif
}

/* ---- untrusted control messages -------------------------------------- */

/* This program started as a worker process that joins a rendezvous this
 * test holds itself (playing a context that talks nonsense): *sock its
 * connection, *pidfd its pidfd. */
static pid_t fake_ctx_worker(int *sock, int *pidfd)
{
	struct cgr__boot b;
	char why[200];
	pid_t pid;

	*sock = *pidfd = -1;
	if (cgr__boot_listen(&b, 1) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		setenv("CGR_WORKER", b.addr, 1);
		execl("/proc/self/exe", "graph-proc", (char *)NULL);
		_exit(127);
	}
	if (cgr__boot_accept(&b, cgr__deadline(10 * SEC), why, sizeof(why)) ==
	    0)
		*sock = b.socks[0], b.socks[0] = -1;
	cgr__boot_close(&b);
	*pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	return pid;
}

/* The worker process's exit status, once it exits (by the deadline:
 * -1 if it does not). */
static int exit_status(pid_t pid, int pidfd, int64_t timeout)
{
	int st;

	if (cgr__fd_wait_readable(pidfd, cgr__deadline(timeout)) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void spec(struct cgr__pmsg *m)
{
	cgr__pmsg_init(m, CGR__PMSG_SPEC, 0);
	snprintf(m->name, sizeof(m->name), "target");
	m->device = CGR_DEVICE_NONE;
	m->cpu = -1;
	m->log_level = -1;
}

/* A worker process given a bad identity, a bad segment and nonsense
 * exits (status 1) or refuses, at once, and trusts none of it. */
static void check_bad_control(void)
{
	struct leaks before = leaks_now();
	struct cgr__pmsg m;
	struct cgr__shm plain;
	int sock, pidfd;
	pid_t pid;

	pid = fake_ctx_worker(&sock, &pidfd);
	spec(&m);
	m.magic ^= 1;
	cgr__shm_send(sock, &m, sizeof(m), NULL, 0);
	t_is(exit_status(pid, pidfd, 5 * SEC), 1,
	     "an identity with a bad magic: the worker exits with 1");
	close(sock), close(pidfd);

	pid = fake_ctx_worker(&sock, &pidfd);
	spec(&m);
	m.arg_len = 1u << 30;
	cgr__shm_send(sock, &m, sizeof(m), NULL, 0);
	t_is(exit_status(pid, pidfd, 5 * SEC), 1,
	     "an identity announcing a 1 GiB arg: exits with 1");
	close(sock), close(pidfd);

	pid = fake_ctx_worker(&sock, &pidfd);
	spec(&m);
	cgr__shm_send(sock, &m, sizeof(m), NULL, 0);
	t_ok(cgr__pmsg_recv(sock, &m, NULL, cgr__deadline(10 * SEC)) == 0 &&
		     m.type == CGR__PMSG_READY && m.code == 0,
	     "a good identity: ready");
	cgr__pmsg_init(&m, CGR__PMSG_COMPILE, 7);
	cgr__shm_send(sock, &m, sizeof(m), NULL, 0);
	t_ok(cgr__pmsg_recv(sock, &m, NULL, cgr__deadline(10 * SEC)) == 0 &&
		     m.type == CGR__PMSG_COMPILED && m.code == -EPROTO,
	     "a compile without a segment: refused (-EPROTO)");
	cgr__shm_create("not-a-graph", 4096, &plain);
	cgr__pmsg_init(&m, CGR__PMSG_COMPILE, 8);
	cgr__shm_send(sock, &m, sizeof(m), &plain.fd, 1);
	cgr__shm_close(&plain);
	t_ok(cgr__pmsg_recv(sock, &m, NULL, cgr__deadline(10 * SEC)) == 0 &&
		     m.type == CGR__PMSG_COMPILED && m.code == -EPROTO &&
		     strstr(m.text, "magic") != NULL,
	     "a compile over memory that is no graph segment: refused: %s",
	     m.text);
	cgr__pmsg_init(&m, 99, 0);
	cgr__shm_send(sock, &m, sizeof(m), NULL, 0);
	t_is(exit_status(pid, pidfd, 5 * SEC), 1,
	     "a message of an unknown type: exits with 1");
	close(sock), close(pidfd);

	pid = fake_ctx_worker(&sock, &pidfd);
	close(sock); /* the context goes away before it says anything */
	t_is(exit_status(pid, pidfd, 15 * SEC), 1,
	     "a context that hangs up first: exits with 1");
	close(pidfd);

	/* CGR_WORKER set but empty, or too long: malformed, exit 1. */
	for (int k = 0; k < 2; k++) {
		char longer[80];
		memset(longer, 'a', sizeof(longer) - 1);
		longer[sizeof(longer) - 1] = 0;
		pid = fork();
		if (pid == 0) {
			int null = open("/dev/null", O_WRONLY);
			dup2(null, 2); /* (it says why there) */
			setenv("CGR_WORKER", k == 0 ? "" : longer, 1);
			execl("/proc/self/exe", "graph-proc", (char *)NULL);
			_exit(127);
		}
		pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		t_is(exit_status(pid, pidfd, 5 * SEC), 1,
		     "CGR_WORKER %s: exits with 1",
		     k == 0 ? "set but empty" : "of 79 bytes");
		close(pidfd);
	}
	leaks_check(before, "bad control messages");
}

/* ---- untrusted descriptions ------------------------------------------ */

static int stand_any(void *arg, unsigned index, int device, const char *name,
		     cgr_worker **out)
{
	cgr_worker **ws = arg;
	(void)device, (void)name;
	*out = ws[index % 2];
	return 0;
}

/* A graph's description, truncated and with bytes flipped: refused or
 * made again, never read out of bounds (ASan). */
static void check_corrupt(void)
{
	static const struct cgr__worker_ops elsewhere = { .name = "elsewhere" };
	const struct cgr__worker_ops *thread;
	cgr_ctx *ctx = new_ctx();
	cgr_worker *ws[2];
	struct cgr__unpack_cb cb = { stand_any, ws };
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT, got;
	cgr_graph *g, *h;
	cgr_node *in, *a, *b;
	void *blob;
	size_t len, cap;
	char why[400];
	int refused = 0, made = 0, n = (int)t_scale(3000);

	cgr_worker_create(ctx, NULL, &ws[0]);
	cgr_worker_create(ctx, NULL, &ws[1]);
	thread = ws[0]->ops;
	/* As if both ran elsewhere: functions by name, stubs here. */
	ws[0]->ops = ws[1]->ops = &elsewhere;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, ws[0], t_add, "a", in);
	b = task(g, ws[1], t_add, "b", a);
	cgr_node *outs[2] = { b, a };
	cgr_graph_output(g, outs, 2);
	t_is(cgr__graph_pack(g, &cp, &blob, &len, &cap), 0, "packs");
	t_is(cgr__graph_unpack(ctx, blob, len, &cb, &h, &got, why, sizeof(why)),
	     0, "the intact description makes the graph again: %s", why);
	t_ok(h->nnodes == g->nnodes && h->ntasks == g->ntasks &&
		     strcmp(h->tasks->next->name, "b") == 0 &&
		     h->tasks->next->in[0] == h->tasks->out[0] &&
		     h->noutputs == 2 && h->outputs[0] == h->tasks->next->out[0] &&
		     h->outputs[1] == h->tasks->out[0],
	     "node for node and task for task");
	cgr_graph_destroy(h);
	for (size_t cut = 0; cut < len; cut++) {
		h = NULL;
		refused += cgr__graph_unpack(ctx, blob, cut, &cb, &h, &got, why,
					     sizeof(why)) == -EPROTO;
		if (h != NULL)
			cgr_graph_destroy(h);
	}
	t_is(refused, (int)len, "every truncation of the %zu bytes is "
				"refused (-EPROTO)",
	     len);
	refused = 0;
	for (int i = 0; i < n; i++) {
		unsigned char *bad = malloc(len);
		memcpy(bad, blob, len);
		for (int k = 0; k < 1 + i % 5; k++)
			bad[t_rand() % len] ^= (unsigned char)(1 + t_rand() % 255);
		h = NULL;
		if (cgr__graph_unpack(ctx, bad, len, &cb, &h, &got, why,
				      sizeof(why)) == 0) {
			made++;
			cgr_graph_destroy(h);
		} else {
			refused++;
		}
		free(bad);
	}
	t_ok(refused > 0 && refused + made == n,
	     "%d descriptions with bytes flipped: %d refused, %d still "
	     "well-formed, none read out of bounds",
	     n, refused, made);
	cgr__free(&ctx->arena, blob, cap, 64);
	cgr_graph_destroy(g);
	ws[0]->ops = ws[1]->ops = thread;
	cgr_ctx_destroy(ctx);
}

/* A process worker made from a driver thread with a small stack (64 KiB;
 * musl's threads have 128 KiB): nothing big on the caller's stack. */
static void *small_stack_body(void *arg)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *w = NULL;
	int64_t r = 0, pid = 0;
	int *ok = arg;

	if (new_proc(ctx, "small", "3", &w) == 0) {
		cgr_graph *g;
		cgr_compiled *c = NULL;
		cgr_node *in, *a;
		cgr_graph_create(ctx, &g);
		cgr_graph_input(g, 0, &in);
		a = task(g, w, t_add, "a", in);
		cgr_graph_output(g, &a, 1);
		if (cgr_graph_compile(g, NULL, &c) == 0)
			*ok = run1(c, 4, &r, &pid) == 0 && r == 7 &&
			      pid == cgr_worker_pid(w);
		cgr_compiled_destroy(c);
		cgr_graph_destroy(g);
	}
	cgr_ctx_destroy(ctx);
	return NULL;
}

static void check_small_stack(void)
{
	pthread_attr_t at;
	pthread_t th;
	int ok = 0;
	size_t stack = 64 << 10;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	stack *= 4; /* the sanitizers' frames are larger */
#endif
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, stack);
	t_is(pthread_create(&th, &at, small_stack_body, &ok), 0,
	     "a driver thread with a %zu KiB stack", stack >> 10);
	pthread_join(th, NULL);
	pthread_attr_destroy(&at);
	t_ok(ok, "...starts a process worker and runs a graph on it");
}

/* The lowest descriptor number process pid has free: the next one it
 * gets (below 1024). */
static int lowest_free_fd(pid_t pid)
{
	char path[64];
	struct dirent *de;
	bool used[1024] = { false };
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if ((d = opendir(path)) == NULL)
		return -1;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.' && atoi(de->d_name) < 1024)
			used[atoi(de->d_name)] = true;
	closedir(d);
	while (n < 1024 && used[n])
		n++;
	return n;
}

/* A worker process out of descriptors when the graph's segment comes:
 * the compile fails with -EMFILE and says so, the worker lives on, and
 * with its limit back the same graph compiles. */
static void check_fd_limit(void)
{
	cgr_ctx *ctx = new_ctx();
	cgr_worker *w = NULL;
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *in, *a;
	struct rlimit old, tight;
	int64_t r = 0, pid = 0;
	int ret, n;

	t_is(new_proc(ctx, "fds", "2", &w), 0, "process worker starts");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, w, t_add, "a", in);
	cgr_graph_output(g, &a, 1);
	n = lowest_free_fd(cgr_worker_pid(w));
	prlimit(cgr_worker_pid(w), RLIMIT_NOFILE, NULL, &old);
	tight.rlim_cur = (rlim_t)n;
	tight.rlim_max = old.rlim_max;
	t_ok(n > 0 && prlimit(cgr_worker_pid(w), RLIMIT_NOFILE, &tight,
			      NULL) == 0,
	     "its descriptor limit set to %d, its lowest free one", n);
	ret = cgr_graph_compile(g, NULL, &c);
	t_is(ret, -EMFILE, "compile: -EMFILE (%s)", cgr_err_name(ret));
	if (ret == 0)
		cgr_compiled_destroy(c);
	c = NULL;
	t_ok(strstr(cgr_graph_errmsg(g), "fds") != NULL &&
		     strstr(cgr_graph_errmsg(g), "segment") != NULL,
	     "its reason names the worker and the segment: %s",
	     cgr_graph_errmsg(g));
	prlimit(cgr_worker_pid(w), RLIMIT_NOFILE, &old, NULL);
	cgr_graph_destroy(g);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	a = task(g, w, t_add, "a", in);
	cgr_graph_output(g, &a, 1);
	ret = cgr_graph_compile(g, NULL, &c);
	t_is(ret, 0, "with its limit back the worker compiles: %s",
	     cgr_graph_errmsg(g));
	ret = ret == 0 ? run1(c, 1, &r, &pid) : ret;
	t_ok(ret == 0 && r == 3, "...and runs the graph (%lld)", (long long)r);
	{
		/* A CUDA pointer means nothing in another process. */
		static int64_t shape[1] = { 4 };
		cgr_value v = cgr_value_tensor((void *)(uintptr_t)0x1000,
					       kDLFloat, 32, 1, shape);
		cgr_ref ref;
		v.u.tensor.device.device_type = kDLCUDA;
		t_is(c != NULL ? cgr_execute(c, &v, 1, &ref) : -1,
		     CGR_EBADVALUE,
		     "a CUDA tensor argument to a worker process is refused");
	}
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	t_is(cgr_worker_destroy(w, 5 * SEC), 0, "it stops cleanly");
	cgr_ctx_destroy(ctx);
}

/* Under an address-space limit (RLIMIT_AS of 1 GiB), a graph with process
 * workers still compiles: its shared segment reserves what the limit
 * leaves room for, not 64 GiB.  Run in a copy of this program started
 * with CGR_TEST_AS_LIMIT set (a limit for this process alone). */
static int as_limit_child(void)
{
	struct rlimit rl = { 1ull << 30, 1ull << 30 };
	cgr_ctx *ctx;
	cgr_worker *w = NULL;
	cgr_graph *g;
	cgr_compiled *c = NULL;
	cgr_node *in, *a;
	int64_t r = 0, pid = 0;
	int ret;

	unsetenv("CGR_TEST_AS_LIMIT");
	if (setrlimit(RLIMIT_AS, &rl) != 0)
		return 2;
	ctx = new_ctx();
	ret = new_proc(ctx, "as", "5", &w);
	if (ret == 0) {
		cgr_graph_create(ctx, &g);
		cgr_graph_input(g, 0, &in);
		a = task(g, w, t_add, "a", in);
		cgr_graph_output(g, &a, 1);
		ret = cgr_graph_compile(g, NULL, &c);
		if (ret != 0)
			fprintf(stderr, "compile: %s\n", cgr_graph_errmsg(g));
		if (ret == 0)
			ret = run1(c, 2, &r, &pid) == 0 && r == 7 ? 0 : 3;
		cgr_compiled_destroy(c);
		cgr_graph_destroy(g);
	}
	cgr_ctx_destroy(ctx);
	return ret == 0 ? 0 : 1;
}

static void check_as_limit(char **argv)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	(void)argv;
	t_skip("the sanitizers' shadow memory needs more address space "
		  "than any limit");
#else
	extern char **environ;
	char *env[256];
	size_t n = 0;
	pid_t pid;
	int st = -1;

	for (char **e = environ; *e != NULL && n < 254; e++)
		env[n++] = *e;
	env[n++] = "CGR_TEST_AS_LIMIT=1";
	env[n] = NULL;
	if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env) == 0)
		waitpid(pid, &st, 0);
	t_ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	     "a graph with a process worker under a 1 GiB address-space "
	     "limit compiles and runs (status %d)",
	     st);
#endif
}

int main(int argc, char **argv)
{
	cgr_worker_main(argc, argv, exports);
	if (getenv("CGR_TEST_AS_LIMIT") != NULL)
		return as_limit_child();
	t_init(argc, argv, 300);
	{
		/* Sanitizer runtimes start a thread of their own with the
		 * first one: before any thread count is taken. */
		cgr_ctx *ctx = new_ctx();
		cgr_worker *w;
		cgr_worker_create(ctx, NULL, &w);
		cgr_ctx_destroy(ctx);
	}
	check_driver_death();
	check_small_stack();
	check_fd_limit();
	check_as_limit(argv);
	check_mixed();
	check_errors();
	check_stream(0);
	check_stream(1);
	check_trace();
	check_lists();
	check_refusals();
	check_coll(0);
	check_coll(1);
	check_coll_kill();
	check_kill(1, "kill -9 mid-task");
	check_kill(8, "kill -9 with its ring full");
	check_stuck();
	check_stopped();
	check_stopped_compile();
	check_slow_fini();
	check_dead_send((int)(t_scale(40) < 20 ? 20 : t_scale(40)));
	check_task_exit(-1, "a task calls pthread_exit", "thread exited");
	check_task_exit(-2, "a task calls exit(7)", "exited with status 7");
	check_init_exit();
	check_join();
	check_bad_slots(1);
	check_bad_slots(2);
	check_bad_slots(3);
	check_bad_slots(4);
	check_bad_control();
	check_corrupt();
	return t_done();
}
