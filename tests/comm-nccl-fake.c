/*
 * tests/comm-nccl-fake.c: how the NCCL backend fails, against the models
 * of libnccl and libcudart (tests/fake_nccl.c, tests/fake_cudart.c; it
 * checks cgr's logic, not NCCL): creation refused with a reason (no such
 * library, too old, a member without a CUDA device, two ranks on one
 * device), ranks that disagree (count, dtype, op, root, kind) or pass
 * invalid arguments or a stream of another device fail on every rank
 * with nothing enqueued and the communicator keeps working; an
 * asynchronous error, a deadline or cgr_comm_abort fails every pending
 * and later operation, with the rank and NCCL's message, without a hang
 * and without ncclCommDestroy; so do an asynchronous error and an abort
 * while every rank is inside a collective that will never complete, and
 * a rank's failed device (CGR_EDEVICE, under a pending operation or
 * before one); creation polls a nonblocking init through several
 * ncclInProgress answers; two communicators over the same devices keep
 * one order per device.  The model counts what NCCL forbids: it must see
 * none.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include <nccl.h>

#include "tap.h"
#include "comm/comm.h"

#define N 3

static cgr_ctx *ctx;
static long (*misuse)(void);
static void (*inject)(int);
static void (*inprogress)(int);
static long (*inprog_polls)(void);
static int (*order)(char *, size_t);
static void (*init_polls)(int);
static void (*hold)(int);
static int (*fail_inflight)(int);
static long (*waiting)(void);
static long (*aborts)(void);
static void (*cuda_fail)(int);
static ncclResult_t (*nc_unique_id)(ncclUniqueId *);
static ncclResult_t (*nc_init)(ncclComm_t *, int, ncclUniqueId, int,
			       ncclConfig_t *);
static ncclResult_t (*nc_async)(ncclComm_t, ncclResult_t *);
static ncclResult_t (*nc_finalize)(ncclComm_t);
static ncclResult_t (*nc_destroy)(ncclComm_t);
static char g_log[4096];
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;

/* Ranks log from their own threads; the main thread reads g_log only
 * after joining them. */
static void log_keep(void *arg, int level, const char *msg)
{
	size_t n;

	(void)arg, (void)level;
	pthread_mutex_lock(&g_log_mu);
	n = strlen(g_log);
	if (n + strlen(msg) + 2 < sizeof(g_log))
		snprintf(g_log + n, sizeof(g_log) - n, "%s; ", msg);
	pthread_mutex_unlock(&g_log_mu);
}

static cgr_ctx *new_ctx(const char *nccl)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *c;

	cp.cudart_path = CGR_FAKE_CUDART;
	cp.nccl_path = nccl;
	cp.log_fn = log_keep;
	cp.log_level = CGR_LOG_INFO;
	return cgr_ctx_create(&cp, &c) == 0 ? c : NULL;
}

/* ---- ranks as threads --------------------------------------------- */

struct rank {
	int r;
	int (*fn)(int r, void *arg);
	void *arg;
	int ret;
	pthread_t th;
};

static void *rank_main(void *p)
{
	struct rank *k = p;
	k->ret = k->fn(k->r, k->arg);
	return NULL;
}

static void run(int (*fn)(int, void *), void *arg, int *ret)
{
	struct rank k[N];

	for (int r = 0; r < N; r++) {
		k[r] = (struct rank){ r, fn, arg, 0, 0 };
		pthread_create(&k[r].th, NULL, rank_main, &k[r]);
	}
	for (int r = 0; r < N; r++) {
		pthread_join(k[r].th, NULL);
		ret[r] = k[r].ret;
	}
}

static bool all_eq(const int *ret, int want)
{
	for (int r = 0; r < N; r++)
		if (ret[r] != want)
			return false;
	return true;
}

static cgr_comm *comm;

static bool all_msg(const char *a, const char *b)
{
	for (int r = 0; r < N; r++) {
		const char *m = cgr_comm_errmsg(comm, r);
		if (strstr(m, a) == NULL || (b != NULL && strstr(m, b) == NULL))
			return false;
	}
	return true;
}

/* An allreduce of 8 int32 on every rank, inline: the sum checked. */
static int works(int r, void *arg)
{
	int32_t in[8], out[8];
	int ret;

	(void)arg;
	for (int i = 0; i < 8; i++)
		in[i] = r + i;
	ret = cgr_allreduce(comm, r, in, out, 8, CGR_INT32, CGR_SUM, NULL,
			    NULL);
	for (int i = 0; ret == 0 && i < 8; i++)
		if (out[i] != 3 * i + 3)
			return -EBADMSG;
	return ret;
}

static void check_works(const char *after)
{
	int ret[N];

	run(works, NULL, ret);
	t_ok(all_eq(ret, 0), "an allreduce works after %s", after);
}

/* ---- creation ------------------------------------------------------ */

static void test_create(void)
{
	cgr_ctx *c;
	cgr_comm *x;

	c = new_ctx("/nonexistent/libnccl.so.2");
	g_log[0] = 0;
	t_is(cgr_comm_create(c, NULL, 2, CGR_BACKEND_NCCL, &x), -ENODEV,
	     "a library that does not load: -ENODEV");
	t_ok(strstr(g_log, "could not be loaded") != NULL, "...the log says: %s",
	     g_log);
	cgr_ctx_destroy(c);

	setenv("FAKE_NCCL_VERSION", "21000", 1);
	c = new_ctx(CGR_FAKE_NCCL);
	g_log[0] = 0;
	t_is(cgr_comm_create(c, NULL, 2, CGR_BACKEND_NCCL, &x), -ENODEV,
	     "NCCL 2.10: -ENODEV");
	t_ok(strstr(g_log, "version 21000") != NULL, "...the log says: %s",
	     g_log);
	cgr_ctx_destroy(c);
	unsetenv("FAKE_NCCL_VERSION");

	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w[2];
	c = new_ctx(CGR_FAKE_NCCL);
	wp.device = 1;
	cgr_worker_create(c, &wp, &w[0]);
	wp.device = CGR_DEVICE_NONE;
	cgr_worker_create(c, &wp, &w[1]);
	g_log[0] = 0;
	t_is(cgr_comm_create(c, w, 2, CGR_BACKEND_NCCL, &x), -EINVAL,
	     "a member without a CUDA device: -EINVAL");
	t_ok(strstr(g_log, "rank 1") != NULL, "...the log names it: %s",
	     g_log);
	cgr_worker_destroy(w[1], -1);
	wp.device = 1;
	cgr_worker_create(c, &wp, &w[1]);
	g_log[0] = 0;
	t_is(cgr_comm_create(c, w, 2, CGR_BACKEND_NCCL, &x), -EINVAL,
	     "two ranks on one CUDA device: -EINVAL");
	t_ok(strstr(g_log, "Duplicate GPU") != NULL,
	     "...the log says what NCCL said: %s", g_log);
	cgr_ctx_destroy(c);
}

/* ---- disagreement and bad arguments ------------------------------- */

enum { MM_COUNT, MM_DTYPE, MM_ROOT, MM_OP, MM_KIND, MM_NULL, MM_STREAM };

static cgr_stream *sim_s, *dev_s[N];

static int mismatch(int r, void *arg)
{
	int what = *(int *)arg, root = 1;
	int32_t in[128] = { 0 }, out[128];
	size_t count = 100;
	cgr_dtype dt = CGR_INT32;
	cgr_redop op = CGR_SUM;
	cgr_stream *s = dev_s[r];
	cgr_future *f = NULL;
	int ret;

	if (r == 2) {
		switch (what) {
		case MM_COUNT:
			count = 99;
			break;
		case MM_DTYPE:
			dt = CGR_FLOAT32;
			break;
		case MM_ROOT:
			root = 0;
			break;
		case MM_OP:
			op = CGR_MAX;
			break;
		case MM_KIND:
			return cgr_broadcast(comm, r, in, out, count, dt, 0,
					     NULL, NULL);
		case MM_STREAM:
			s = r == 2 ? sim_s : s;
			break;
		default:
			break;
		}
	}
	if (what == MM_ROOT)
		return cgr_reduce(comm, r, in, out, count, dt, op, root, NULL,
				  NULL);
	if (what == MM_NULL)
		return cgr_allreduce(comm, r, in, r == 1 ? NULL : out, count,
				     dt, op, NULL, NULL);
	ret = cgr_allreduce(comm, r, in, out, count, dt, op, s, &f);
	if (ret == 0)
		ret = cgr_future_wait(f, 10000000000);
	cgr_future_release(f);
	return ret;
}

static void test_mismatch(void)
{
	static const struct {
		int what, want;
		const char *name, *a, *b;
	} cases[] = {
		{ MM_COUNT, CGR_EMISMATCH, "count", "rank 0 count 100",
		  "rank 2 count 99" },
		{ MM_DTYPE, CGR_EMISMATCH, "dtype", "rank 0 dtype int32",
		  "rank 2 dtype float32" },
		{ MM_ROOT, CGR_EMISMATCH, "root", "rank 0 root 1",
		  "rank 2 root 0" },
		{ MM_OP, CGR_EMISMATCH, "op", "rank 0 op sum", "rank 2 op max" },
		{ MM_KIND, CGR_EMISMATCH, "kind", "rank 0 allreduce",
		  "rank 2 broadcast" },
		{ MM_NULL, -EINVAL, "a NULL buffer", "rank 1", "NULL buffer" },
		{ MM_STREAM, -EINVAL, "a sim stream", "rank 2",
		  "not a CUDA stream" },
	};
	long ops0 = 0;

	for (size_t i = 0; i < CGR__ARRAY_SIZE(cases); i++) {
		int ret[N];
		run(mismatch, (void *)&cases[i].what, ret);
		t_ok(all_eq(ret, cases[i].want),
		     "%s on one rank: %s on every rank (%s %s %s)",
		     cases[i].name, cgr_err_name(cases[i].want),
		     cgr_err_name(ret[0]), cgr_err_name(ret[1]),
		     cgr_err_name(ret[2]));
		t_ok(all_msg(cases[i].a, cases[i].b),
		     "...every rank's message says \"%s\", \"%s\": %s",
		     cases[i].a, cases[i].b, cgr_comm_errmsg(comm, 0));
		check_works(cases[i].name);
	}
	(void)ops0;
}

/* ---- failures of the whole communicator ---------------------------- */

struct pend {
	int32_t in[64], out[64];
	cgr_future *f;
};

static struct pend pend[N];

/* Each rank enqueues an allreduce on its stream and waits for it. */
static int enqueue_wait(int r, void *arg)
{
	int64_t timeout = *(int64_t *)arg;
	int ret = cgr_allreduce(comm, r, pend[r].in, pend[r].out, 64,
				CGR_INT32, CGR_SUM, dev_s[r], &pend[r].f);

	if (ret == 0)
		ret = cgr_future_wait(pend[r].f, timeout);
	cgr_future_release(pend[r].f);
	return ret;
}

/* An asynchronous error err fails every rank with code, the log naming
 * the rank, NCCL's message and text (what: the text for err). */
static void async_error(int err, int code, const char *what)
{
	int64_t timeout = 10000000000, t0;
	long m0 = misuse();
	int ret[N];

	g_log[0] = 0;
	inject(err);
	t0 = cgr__now_ns();
	run(enqueue_wait, &timeout, ret);
	t_ok(all_eq(ret, code),
	     "an asynchronous NCCL error %d fails every rank's operation: %s",
	     err, cgr_err_name(ret[0]));
	t_ok(cgr__now_ns() - t0 < 2000000000, "...at once (%.0f ms)",
	     (cgr__now_ns() - t0) / 1e6);
	t_ok(strstr(g_log, "rank") && strstr(g_log, "network failure injected") &&
		     strstr(g_log, what),
	     "...the log names the rank, NCCL's message and text: %s", g_log);
	inject(0);
	run(works, NULL, ret);
	t_ok(all_eq(ret, code) && all_msg("network failure injected", NULL),
	     "later operations fail too, with the same message: %s",
	     cgr_comm_errmsg(comm, 1));
	cgr_comm_destroy(comm);
	t_is(misuse() - m0, 0,
	     "destroyed after the failure: aborted, never ncclCommDestroy");
	cgr_comm_create(ctx, NULL, N, CGR_BACKEND_NCCL, &comm);
	check_works("a new communicator");
}

static void test_async_error(void)
{
	async_error(ncclRemoteError, -EPIPE, "ncclRemoteError 6");
	/* A code newer than nccl.h (2.29's timeout is 8): CGR_EDEVICE, with
	 * its number and the library's text for it. */
	async_error(8, CGR_EDEVICE, "unknown NCCL result 8, operation timed "
		    "out (fake)");
	async_error(1000, CGR_EDEVICE, "unknown NCCL result 1000");
}

/* Ranks 0 and 1 enqueue; rank 2 never comes: their deadline passes. */
static int lone(int r, void *arg)
{
	struct cgr__coll_desc d = {
		.kind = CGR_COLL_ALLREDUCE, .send = pend[r].in,
		.recv = pend[r].out, .count = 4, .dtype = CGR_INT32,
		.deadline = cgr__now_ns() + 100000000,
	};
	(void)arg;
	if (r == 2)
		return 0;
	return cgr__comm_coll(comm, r, &d, NULL, NULL);
}

static void test_deadline(void)
{
	int64_t t0 = cgr__now_ns();
	int ret[N];

	run(lone, NULL, ret);
	t_ok(ret[0] < 0 && ret[1] < 0,
	     "a rank that never comes: the others fail at their deadline "
	     "(%s, %s, %.0f ms)",
	     cgr_err_name(ret[0]), cgr_err_name(ret[1]),
	     (cgr__now_ns() - t0) / 1e6);
	cgr_comm_destroy(comm);
	cgr_comm_create(ctx, NULL, N, CGR_BACKEND_NCCL, &comm);
	check_works("a new communicator after the deadline");
}

/* Rank 2 aborts while ranks 0 and 1 wait in an operation it never
 * joins. */
static int abort_one(int r, void *arg)
{
	int64_t timeout = 10000000000;

	(void)arg;
	if (r == 2) {
		struct timespec ts = { 0, 50000000 };
		nanosleep(&ts, NULL);
		return cgr_comm_abort(comm);
	}
	return enqueue_wait(r, &timeout);
}

static void test_abort(void)
{
	int ret[N];
	int64_t t0 = cgr__now_ns();

	run(abort_one, NULL, ret);
	t_ok(ret[0] == -ECANCELED && ret[1] == -ECANCELED && ret[2] == 0,
	     "cgr_comm_abort ends the others' waits: %s %s (%.0f ms)",
	     cgr_err_name(ret[0]), cgr_err_name(ret[1]),
	     (cgr__now_ns() - t0) / 1e6);
	cgr_comm_destroy(comm);
	cgr_comm_create(ctx, NULL, N, CGR_BACKEND_NCCL, &comm);
}

/* Aborts comm once the ranks poll a group end that never settles. */
static void *abort_when_stuck(void *arg)
{
	long p0 = *(long *)arg;
	int64_t deadline = cgr__now_ns() + 10000000000;

	while (inprog_polls() < p0 + 1000 && cgr__now_ns() < deadline)
		sched_yield();
	cgr_comm_abort(comm);
	return NULL;
}

/* An enqueue NCCL keeps ncclInProgress (its peers stopped): the settling
 * rank holds its lock, so only settle itself can see the abort; it must,
 * at once, not at the operation's deadline (a minute). */
static void test_abort_settle(void)
{
	int64_t timeout = 10000000000, t0;
	long p0 = inprog_polls();
	pthread_t th;
	int ret[N];

	inprogress(1 << 30);
	pthread_create(&th, NULL, abort_when_stuck, &p0);
	t0 = cgr__now_ns();
	run(enqueue_wait, &timeout, ret);
	pthread_join(th, NULL);
	inprogress(2);
	t_ok(all_eq(ret, -ECANCELED),
	     "an abort while every rank settles a group end fails them: %s",
	     cgr_err_name(ret[0]));
	t_ok(cgr__now_ns() - t0 < 5000000000ll, "...at once (%.0f ms)",
	     (cgr__now_ns() - t0) / 1e6);
	cgr_comm_destroy(comm);
	cgr_comm_create(ctx, NULL, N, CGR_BACKEND_NCCL, &comm);
	check_works("a new communicator");
}

/* Polls fn until it reaches want or ns pass: whether it did. */
static bool reaches(long (*fn)(void), long want, int64_t ns)
{
	int64_t deadline = cgr__now_ns() + ns;

	while (fn() < want && cgr__now_ns() < deadline)
		sched_yield();
	return fn() >= want;
}

static long not_waiting(void)
{
	return -waiting();
}

/* ---- nonblocking init ---------------------------------------------- */

/* The model first: a nonblocking init outside a group is ncclInProgress,
 * and stays so for the polls asked; then cgr's creation polls every rank
 * through them. */
static void test_init_polls(void)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclComm_t nc = NULL;
	ncclUniqueId id;
	ncclResult_t e, st = ncclInProgress;
	long p0 = inprog_polls(), m0 = misuse();
	int polls = 0;
	cgr_comm *x = NULL;

	init_polls(5);
	cfg.blocking = 0;
	nc_unique_id(&id);
	e = nc_init(&nc, 1, id, 0, &cfg);
	t_is(e, ncclInProgress, "the model: a nonblocking init returns "
				 "ncclInProgress");
	while (st == ncclInProgress && polls < 100 &&
	       nc_async(nc, &st) == ncclSuccess)
		polls += st == ncclInProgress;
	t_ok(st == ncclSuccess && polls == 5,
	     "...and ncclCommGetAsyncError answers ncclInProgress 5 times "
	     "before ncclSuccess (%d, then %d)", polls, (int)st);
	st = ncclInProgress;
	if (nc_finalize(nc) == ncclInProgress)
		for (int i = 0; i < 100 && st == ncclInProgress; i++)
			nc_async(nc, &st);
	nc_destroy(nc);

	p0 = inprog_polls();
	t_is(cgr_comm_create(ctx, NULL, N, CGR_BACKEND_NCCL, &x), 0,
	     "an init that stays ncclInProgress for 5 polls: created");
	t_ok(inprog_polls() - p0 >= 5 * N,
	     "...after polling every rank through them (%ld polls answered "
	     "ncclInProgress)", inprog_polls() - p0);
	init_polls(2);
	cgr_comm *keep = comm;
	comm = x;
	check_works("an init that stayed in progress");
	comm = keep;
	cgr_comm_destroy(x);
	t_is(misuse() - m0, 0, "...and nothing NCCL forbids (no call on a "
			       "communicator still in progress)");
}

/* ---- failures while ranks are inside a collective ------------------ */

struct inj {
	int err; /* 0: cgr_comm_abort */
	int failed; /* fake_nccl_fail_inflight's count */
	bool inside;
};

/* Once every rank waits inside the held collective: fails it (err), or
 * aborts the communicator. */
static void *inject_inside(void *arg)
{
	struct inj *j = arg;

	j->inside = reaches(waiting, N, 10000000000ll);
	if (j->err != 0)
		j->failed = fail_inflight(j->err);
	else
		cgr_comm_abort(comm);
	return NULL;
}

/* Every rank enqueued an allreduce and waits inside it (the model holds
 * it), when err arrives asynchronously (0: cgr_comm_abort): every future
 * fails with code at once, later operations fail fast, every rank's
 * NCCL communicator was aborted, the ranks left the collective. */
static void fail_inside(int err, int code, const char *what)
{
	int64_t timeout = 10000000000ll, t0;
	long m0 = misuse(), a0 = aborts();
	struct inj j = { err, 0, false };
	pthread_t th;
	int ret[N];

	g_log[0] = 0;
	hold(1);
	pthread_create(&th, NULL, inject_inside, &j);
	t0 = cgr__now_ns();
	run(enqueue_wait, &timeout, ret);
	pthread_join(th, NULL);
	t_ok(j.inside && (err == 0 || j.failed == 1),
	     "%s: every rank was inside the collective (failed %d)", what,
	     j.failed);
	t_ok(all_eq(ret, code), "...every pending future fails: %s %s %s",
	     cgr_err_name(ret[0]), cgr_err_name(ret[1]),
	     cgr_err_name(ret[2]));
	t_ok(cgr__now_ns() - t0 < 5000000000ll, "...at once, no hang (%.0f ms)",
	     (cgr__now_ns() - t0) / 1e6);
	t_ok(err == 0 || all_msg("mid-collective", NULL),
	     "...the message has NCCL's: %s", cgr_comm_errmsg(comm, 0));
	t0 = cgr__now_ns();
	run(works, NULL, ret);
	t_ok(all_eq(ret, code) && cgr__now_ns() - t0 < 1000000000ll,
	     "...later operations fail fast with %s (%s, %.0f ms)",
	     cgr_err_name(code), cgr_err_name(ret[1]),
	     (cgr__now_ns() - t0) / 1e6);
	bool aborted = reaches(aborts, a0 + N, 10000000000ll);
	bool left = reaches(not_waiting, 0, 10000000000ll);
	t_ok(aborted && left,
	     "...every rank's NCCL communicator aborted (%ld), none left "
	     "inside (%ld)", aborts() - a0, waiting());
	hold(0);
	cgr_comm_destroy(comm);
	t_is(misuse() - m0, 0, "...nothing NCCL forbids");
	cgr_comm_create(ctx, NULL, N, CGR_BACKEND_NCCL, &comm);
	check_works("a new communicator");
}

static void test_fail_inside(void)
{
	fail_inside(ncclRemoteError, -EPIPE, "ncclRemoteError mid-collective");
	fail_inside(ncclSystemError, -EIO, "ncclSystemError mid-collective");
	fail_inside(0, -ECANCELED, "cgr_comm_abort mid-collective");
}

/* ---- a rank's device fails ------------------------------------------ */

static int on_stream(cgr_comm *c, int r, cgr_stream *s, int32_t *buf)
{
	struct cgr__coll_desc d = {
		.kind = CGR_COLL_ALLREDUCE, .send = buf, .recv = buf + 8,
		.count = 8, .dtype = CGR_INT32, .agreed = true,
	};
	cgr_future *f = NULL;
	int ret = cgr__comm_coll(c, r, &d, s, &f);

	if (ret == 0)
		ret = cgr_future_wait(f, 10000000000ll);
	cgr_future_release(f);
	return ret;
}

/* A context of its own (a failed device stays failed in its context). */
static void dev_setup(cgr_ctx **cx, cgr_comm **c, cgr_stream **s)
{
	*cx = new_ctx(CGR_FAKE_NCCL);
	cgr_comm_create(*cx, NULL, N, CGR_BACKEND_NCCL, c);
	for (int r = 0; r < N; r++)
		cgr_stream_create(*cx, r, 0, &s[r]);
}

static void dev_teardown(cgr_ctx *cx, cgr_comm *c, cgr_stream **s)
{
	cgr_comm_destroy(c);
	for (int r = 0; r < N; r++)
		cgr_stream_destroy(s[r]);
	cgr_ctx_destroy(cx);
}

struct devop {
	int r;
	cgr_comm *c;
	cgr_stream *s;
	int32_t buf[16];
	int ret;
	cgr_future *f;
	pthread_t th;
};

static void *devop_main(void *arg)
{
	struct devop *o = arg;

	o->ret = on_stream(o->c, o->r, o->s, o->buf);
	return NULL;
}

static void test_device_failure(void)
{
	cgr_ctx *cx;
	cgr_comm *c;
	cgr_stream *s[N];
	struct devop o[N];
	long m0 = misuse();
	int64_t t0;

	/* Rank 0 waits in a collective its peers have not joined when its
	 * device fails: its future fails, and so does the communicator (on
	 * a GPU its peers would wait for it in NCCL for ever). */
	dev_setup(&cx, &c, s);
	for (int r = 0; r < N; r++)
		o[r] = (struct devop){ .r = r, .c = c, .s = s[r] };
	pthread_create(&o[0].th, NULL, devop_main, &o[0]);
	t_ok(reaches(waiting, 1, 10000000000ll),
	     "rank 0 waits inside a collective");
	cuda_fail(700);
	pthread_join(o[0].th, NULL);
	cuda_fail(0);
	t_is(o[0].ret, CGR_EDEVICE, "its device fails: its future fails "
				    "with CGR_EDEVICE (%s)",
	     cgr_err_name(o[0].ret));
	t0 = cgr__now_ns();
	for (int r = 1; r < N; r++)
		o[r].ret = on_stream(c, r, s[r], o[r].buf);
	t_ok(o[1].ret == CGR_EDEVICE && o[2].ret == CGR_EDEVICE &&
		     cgr__now_ns() - t0 < 1000000000ll,
	     "...the communicator fails: the peers' operations fail fast "
	     "with CGR_EDEVICE (%s %s; %s)", cgr_err_name(o[1].ret),
	     cgr_err_name(o[2].ret), cgr_comm_errmsg(c, 1));
	dev_teardown(cx, c, s);

	/* Device 0 failed before the operation: every rank's fails with
	 * CGR_EDEVICE (not -EINVAL), the message naming the device. */
	dev_setup(&cx, &c, s);
	cuda_fail(700);
	int sync = cgr_stream_synchronize(s[0], 5000000000ll);
	cuda_fail(0);
	for (int r = 0; r < N; r++) {
		o[r] = (struct devop){ .r = r, .c = c, .s = s[r] };
		o[r].ret = 1;
	}
	cgr_comm *keep = comm;
	cgr_stream *keep_s[N];
	memcpy(keep_s, dev_s, sizeof(keep_s));
	comm = c;
	memcpy(dev_s, s, sizeof(keep_s));
	int ret[N];
	int64_t timeout = 10000000000ll;
	run(enqueue_wait, &timeout, ret);
	t_ok(sync == CGR_EDEVICE && all_eq(ret, CGR_EDEVICE),
	     "an operation after its device failed (%s): CGR_EDEVICE on "
	     "every rank (%s %s %s)", cgr_err_name(sync),
	     cgr_err_name(ret[0]), cgr_err_name(ret[1]),
	     cgr_err_name(ret[2]));
	t_ok(all_msg("CUDA device 0 failed", NULL),
	     "...every rank's message names the device: %s",
	     cgr_comm_errmsg(c, 2));
	comm = keep;
	memcpy(dev_s, keep_s, sizeof(keep_s));
	dev_teardown(cx, c, s);
	t_is(misuse() - m0, 0, "...nothing NCCL forbids");
}

/* Two communicators over devices 0..2: every rank uses a then b (with
 * swap, rank 1 b then a).  The operations say they are agreed (as the
 * graph's are), so no host agreement orders them: what the devices see
 * is what was issued. */
static cgr_comm *two[2];
static cgr_stream *two_s[2][N];

static int both(int r, void *arg)
{
	int32_t in[4][4], out[4][4];
	bool swap = arg != NULL && r == 1;
	cgr_future *f[4] = { NULL };
	int ret = 0;

	for (int i = 0; i < 4; i++) {
		int k = (i + swap) % 2;
		struct cgr__coll_desc d = {
			.kind = CGR_COLL_ALLREDUCE, .send = in[i],
			.recv = out[i], .count = 4, .dtype = CGR_INT32,
			.agreed = true,
		};
		memset(in[i], 0, sizeof(in[i]));
		/* A stream per communicator: issued out of order, they
		 * still run in the model (on a GPU they could hang). */
		if (ret == 0)
			ret = cgr__comm_coll(two[k], r, &d, two_s[k][r], &f[i]);
	}
	for (int i = 0; i < 4; i++) {
		if (f[i] != NULL && ret == 0)
			ret = cgr_future_wait(f[i], 5000000000);
		cgr_future_release(f[i]);
	}
	return ret;
}

static void test_order(void)
{
	char msg[256] = "";
	int ret[N];

	cgr_comm_create(ctx, NULL, N, CGR_BACKEND_NCCL, &two[0]);
	cgr_comm_create(ctx, NULL, N, CGR_BACKEND_NCCL, &two[1]);
	for (int k = 0; k < 2; k++)
		for (int r = 0; r < N; r++)
			cgr_stream_create(ctx, r, 0, &two_s[k][r]);
	run(both, NULL, ret);
	t_ok(all_eq(ret, 0) && order(msg, sizeof(msg)) == 0,
	     "two communicators used in one order: one order on every "
	     "device %s",
	     msg);
	/* On a GPU this would hang; the model runs it and tells. */
	run(both, (void *)1, ret);
	t_ok(order(msg, sizeof(msg)) != 0,
	     "used in another order on one rank: the model sees it (%s)",
	     msg);
	t_ok(all_eq(ret, 0), "...and (in the model) ran");
	cgr_comm_destroy(two[0]);
	cgr_comm_destroy(two[1]);
	for (int k = 0; k < 2; k++)
		for (int r = 0; r < N; r++)
			cgr_stream_destroy(two_s[k][r]);
}

int main(int argc, char **argv)
{
	void *h;

	t_init(argc, argv, 120);
	setenv("FAKE_CUDA_NDEV", "4", 1);
	ctx = new_ctx(CGR_FAKE_NCCL);
	h = dlopen(CGR_FAKE_NCCL, RTLD_NOW);
	*(void **)&misuse = dlsym(h, "fake_nccl_misuse");
	*(void **)&inject = dlsym(h, "fake_nccl_fail");
	*(void **)&inprogress = dlsym(h, "fake_nccl_inprogress");
	*(void **)&inprog_polls = dlsym(h, "fake_nccl_inprogress_polls");
	*(void **)&order = dlsym(h, "fake_nccl_order");
	*(void **)&init_polls = dlsym(h, "fake_nccl_init_polls");
	*(void **)&hold = dlsym(h, "fake_nccl_hold");
	*(void **)&fail_inflight = dlsym(h, "fake_nccl_fail_inflight");
	*(void **)&waiting = dlsym(h, "fake_nccl_waiting");
	*(void **)&aborts = dlsym(h, "fake_nccl_aborts");
	*(void **)&nc_unique_id = dlsym(h, "ncclGetUniqueId");
	*(void **)&nc_init = dlsym(h, "ncclCommInitRankConfig");
	*(void **)&nc_async = dlsym(h, "ncclCommGetAsyncError");
	*(void **)&nc_finalize = dlsym(h, "ncclCommFinalize");
	*(void **)&nc_destroy = dlsym(h, "ncclCommDestroy");
	*(void **)&cuda_fail = dlsym(dlopen(CGR_FAKE_CUDART, RTLD_NOW),
				     "fake_cuda_fail");
	if (ctx == NULL || misuse == NULL || inject == NULL || order == NULL ||
	    inprog_polls == NULL || init_polls == NULL || hold == NULL ||
	    fail_inflight == NULL || waiting == NULL || aborts == NULL ||
	    nc_unique_id == NULL || nc_init == NULL || nc_async == NULL ||
	    nc_finalize == NULL || nc_destroy == NULL || cuda_fail == NULL) {
		printf("Bail out! no context or no model hooks\n");
		return 1;
	}
	test_create();
	t_is(cgr_comm_create(ctx, NULL, N, CGR_BACKEND_NCCL, &comm), 0,
	     "a communicator of %d ranks on CUDA devices 0..%d", N, N - 1);
	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &sim_s);
	for (int r = 0; r < N; r++)
		cgr_stream_create(ctx, r, 0, &dev_s[r]);
	check_works("creation");
	test_mismatch();
	test_async_error();
	test_deadline();
	test_abort();
	test_abort_settle();
	test_init_polls();
	test_fail_inside();
	test_order();
	test_device_failure();
	cgr_comm_destroy(comm);
	for (int r = 0; r < N; r++)
		cgr_stream_destroy(dev_s[r]);
	cgr_stream_destroy(sim_s);
	t_is(misuse(), 0, "the model saw nothing NCCL forbids");
	cgr_ctx_destroy(ctx);
	return t_done();
}
