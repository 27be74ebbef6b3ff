/*
 * tests/device-stream.c: streams, events and futures with CUDA's
 * semantics: in-order execution, cross-stream dependencies through events
 * (checked with real data), synchronize with deadlines, never-recorded and
 * re-recorded events, device-side waits that never block the host, the
 * sticky device error, destroy with queued or stuck work, and idle
 * executors that use no CPU.  The backend-neutral ones run again on CUDA
 * device 0 (the cuda backend) where there is one, with waits for the host
 * that never block a CUDA host function; against the model of the CUDA
 * runtime also the -ENOTSUP path without stream memory operations, a
 * device failing under a pending wait, and fork.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#ifdef CGR_FAKE_CUDART
#include <cuda_runtime_api.h>
#endif

#include "tap.h"
#include "device/device.h"

static cgr_ctx *ctx;
/* The device the backend-neutral tests run on: the sim device, then CUDA
 * device 0 where there is one. */
static int g_dev = CGR_DEVICE_SIM;
static char g_log[512]; /* the last message of the context's log */

static void log_keep(void *arg, int level, const char *msg)
{
	(void)arg, (void)level;
	snprintf(g_log, sizeof(g_log), "%s", msg);
}

static _Atomic int g_lines, g_multi;

/* Counts messages, and those that are not one line. */
static void log_lines(void *arg, int level, const char *msg)
{
	(void)arg, (void)level;
	atomic_fetch_add(&g_lines, 1);
	for (const char *p = msg; *p; p++)
		if ((unsigned char)*p < 0x20) {
			atomic_fetch_add(&g_multi, 1);
			break;
		}
}

/* ---- helpers ------------------------------------------------------- */

struct gate {
	_Atomic int open;
	_Atomic int entered;
};

static void gate_fn(void *arg)
{
	struct gate *g = arg;
	atomic_store(&g->entered, 1);
	while (!atomic_load(&g->open))
		usleep(200);
}

static void inc_fn(void *arg)
{
	atomic_fetch_add((_Atomic int *)arg, 1);
}

struct seqlog {
	int n;
	int v[4096];
};

struct seqarg {
	struct seqlog *log;
	int value;
};

static void seq_fn(void *arg)
{
	struct seqarg *a = arg;
	a->log->v[a->log->n++] = a->value;
}

static int64_t ms_since(int64_t t0)
{
	return (cgr__now_ns() - t0) / 1000000;
}

static int wait_flag(_Atomic int *f, int want, int64_t ms)
{
	int64_t t0 = cgr__now_ns();
	while (atomic_load(f) != want) {
		if (ms_since(t0) > ms)
			return 0;
		usleep(100);
	}
	return 1;
}

/* A CALL op that completes a future with a given result. */
struct complete_arg {
	struct cgr__dfuture *f;
	int result;
	_Atomic int ran_err;
};

static int complete_fn(void *arg, cgr_stream *s, int err)
{
	struct complete_arg *a = arg;
	(void)s;
	atomic_store(&a->ran_err, err ? err : 1);
	cgr__dfuture_complete(a->f, err ? err : a->result);
	return 0;
}

static cgr_future *future_on(cgr_stream *s, struct complete_arg *a, int res)
{
	struct cgr__sop op = { .kind = CGR__SOP_CALL };

	if (cgr__dfuture_create(ctx, s, &a->f) != 0)
		return NULL;
	a->result = res;
	atomic_store(&a->ran_err, 0);
	op.u.call.fn = complete_fn;
	op.u.call.arg = a;
	cgr__dfuture_ref(a->f); /* keep the handle valid for the caller */
	if (cgr__stream_enqueue(s, &op) != 0)
		return NULL;
	return cgr__dfuture_pub(a->f);
}

/* ---- tests --------------------------------------------------------- */

static void test_order(void)
{
	static struct seqlog log;
	static struct seqarg args[4096];
	static unsigned char src[4096], dst[4096];
	cgr_stream *s;
	int n = (int)t_scale(4000), ok = 1;

	t_is(cgr_stream_create(ctx, g_dev, 0, &s), 0, "create");
	for (int i = 0; i < 4096; i++)
		src[i] = (unsigned char)(i * 7);
	log.n = 0;
	for (int i = 0; i < n; i++) {
		args[i].log = &log;
		args[i].value = i;
		if (cgr_stream_launch_host(s, seq_fn, &args[i]) != 0)
			ok = 0;
		if (i % 97 == 0 &&
		    cgr_stream_memcpy_async(s, dst + (i % 4000), src + (i % 4000),
					    96) != 0)
			ok = 0;
	}
	t_ok(ok, "%d host functions and copies enqueued (queue wraps)", n);
	t_is(cgr_stream_synchronize(s, 5000000000), 0, "synchronize");
	for (int i = 0; i < n && ok; i++)
		if (log.v[i] != i)
			ok = 0;
	t_ok(ok && log.n == n, "they ran in enqueue order");
	ok = 1;
	for (int i = 0; i < n; i += 97)
		if (memcmp(dst + (i % 4000), src + (i % 4000), 96) != 0)
			ok = 0;
	t_ok(ok, "copies landed");
	cgr_stream_destroy(s);
}

/* Two streams hand a buffer back and forth through events: A fills it
 * with round r's pattern, B waits for A's event and copies it out, A waits
 * for B's event before overwriting.  Any missing dependency shows up as a
 * torn copy. */
#define PP 4096
struct pp {
	unsigned char buf[PP], out[64][PP];
	int round;
};

static void pp_fill(void *arg)
{
	struct pp *p = arg;
	memset(p->buf, p->round & 0xff, PP / 2);
	usleep(50); /* widen the window for a missing dependency */
	memset(p->buf + PP / 2, p->round & 0xff, PP / 2);
	p->round++;
}

static void test_events_data(void)
{
	static struct pp p;
	cgr_stream *a, *b;
	cgr_event *ea, *eb;
	int rounds = (int)t_scale(64), ok = 1;

	cgr_stream_create(ctx, g_dev, 0, &a);
	cgr_stream_create(ctx, g_dev, -1, &b);
	cgr_event_create(ctx, &ea);
	cgr_event_create(ctx, &eb);
	p.round = 0;
	for (int r = 0; r < rounds; r++) {
		if (r > 0)
			cgr_stream_wait_event(a, eb);
		cgr_stream_launch_host(a, pp_fill, &p);
		cgr_event_record(ea, a);
		cgr_stream_wait_event(b, ea);
		cgr_stream_memcpy_async(b, p.out[r % 64], p.buf, PP);
		cgr_event_record(eb, b);
	}
	t_is(cgr_stream_synchronize(b, 10000000000), 0, "B synchronized");
	t_is(cgr_stream_synchronize(a, 10000000000), 0, "A synchronized");
	for (int r = rounds > 64 ? rounds - 64 : 0; r < rounds; r++)
		for (int i = 0; i < PP; i++)
			if (p.out[r % 64][i] != (unsigned char)r) {
				ok = 0;
				break;
			}
	t_ok(ok, "%d rounds A->B->A through events: every copy whole", rounds);
	t_is(cgr_event_query(ea), 1, "A's event complete");
	cgr_event_destroy(ea);
	cgr_event_destroy(eb);
	cgr_stream_destroy(a);
	cgr_stream_destroy(b);
}

static void test_sync_and_nowait(void)
{
	struct gate g = { 0, 0 };
	_Atomic int after = 0;
	cgr_stream *a, *b;
	cgr_event *e;
	int64_t t0;

	cgr_stream_create(ctx, g_dev, 0, &a);
	cgr_stream_create(ctx, g_dev, 0, &b);
	cgr_event_create(ctx, &e);
	cgr_stream_launch_host(a, gate_fn, &g);
	cgr_event_record(e, a);
	t_is(cgr_stream_synchronize(a, 20000000), -ETIMEDOUT,
	     "synchronize times out while work is blocked");
	t_is(cgr_stream_synchronize(a, 0), -ETIMEDOUT, "timeout 0 polls");
	t_is(cgr_event_query(e), 0, "event behind blocked work: not done");
	t0 = cgr__now_ns();
	t_is(cgr_stream_wait_event(b, e), 0, "stream_wait_event");
	cgr_stream_launch_host(b, inc_fn, (void *)&after);
	t_ok(ms_since(t0) < 100, "stream_wait_event did not block the host");
	usleep(30000);
	t_is(atomic_load(&after), 0, "B's later work waits for A's event");
	atomic_store(&g.open, 1);
	t_is(cgr_stream_synchronize(b, 5000000000), 0, "B synchronized");
	t_is(atomic_load(&after), 1, "...and ran once A passed the event");
	t_is(cgr_event_query(e), 1, "event complete");
	t_is(cgr_stream_synchronize(a, 5000000000), 0, "A synchronized");
	cgr_event_destroy(e);
	cgr_stream_destroy(a);
	cgr_stream_destroy(b);
}

static void test_never_recorded(void)
{
	_Atomic int ran = 0;
	cgr_stream *s;
	cgr_event *e;

	cgr_stream_create(ctx, g_dev, 0, &s);
	cgr_event_create(ctx, &e);
	t_is(cgr_event_query(e), 0, "never-recorded event: not complete");
	usleep(20000);
	t_is(cgr_event_query(e), 0, "...and never completes");
	t_is(cgr_stream_wait_event(s, e), 0,
	     "waiting for it is a no-op (cudaStreamWaitEvent semantics)");
	cgr_stream_launch_host(s, inc_fn, (void *)&ran);
	t_is(cgr_stream_synchronize(s, 2000000000), 0,
	     "the stream is not blocked by it");
	t_is(atomic_load(&ran), 1, "later work ran");
	t_is(cgr_event_query(e), 0, "still not complete");
	cgr_event_destroy(e);
	cgr_stream_destroy(s);
}

/* B waits for e's record on blocked A; e is then re-recorded on idle C and
 * completes at once; B must keep waiting for the record it captured. */
static void test_rerecord(void)
{
	struct gate g = { 0, 0 };
	_Atomic int bran = 0;
	cgr_stream *a, *b, *c;
	cgr_event *e;

	cgr_stream_create(ctx, g_dev, 0, &a);
	cgr_stream_create(ctx, g_dev, 0, &b);
	cgr_stream_create(ctx, g_dev, 0, &c);
	cgr_event_create(ctx, &e);
	cgr_stream_launch_host(a, gate_fn, &g);
	cgr_event_record(e, a);
	cgr_stream_wait_event(b, e);
	cgr_stream_launch_host(b, inc_fn, (void *)&bran);
	cgr_event_record(e, c);
	cgr_stream_synchronize(c, 1000000000);
	t_is(cgr_event_query(e), 1, "query reports the newest record");
	usleep(30000);
	t_is(atomic_load(&bran), 0,
	     "a waiter of the older record does not see the newer one");
	atomic_store(&g.open, 1);
	t_ok(wait_flag(&bran, 1, 5000), "it proceeds once A passes");
	/* Re-record on A after more work: query follows the new position. */
	atomic_store(&g.open, 0);
	cgr_stream_launch_host(a, gate_fn, &g);
	cgr_event_record(e, a);
	t_is(cgr_event_query(e), 0, "re-recorded behind new work: pending");
	atomic_store(&g.open, 1);
	cgr_stream_synchronize(a, 5000000000);
	t_is(cgr_event_query(e), 1, "complete once passed");
	cgr_event_destroy(e);
	cgr_stream_destroy(a);
	cgr_stream_destroy(b);
	cgr_stream_destroy(c);
}

static void test_futures(void)
{
	struct gate g = { 0, 0 };
	struct complete_arg ca, cb;
	_Atomic int bran = 0;
	cgr_stream *a, *b;
	cgr_future *fa, *fb;

	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &a);
	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &b);
	cgr_stream_launch_host(a, gate_fn, &g);
	fa = future_on(a, &ca, 0);
	fb = future_on(b, &cb, -EIO);
	t_ok(fa != NULL && fb != NULL, "futures on streams");
	t_is(cgr_future_test(fa), 0, "pending behind blocked work");
	t_is(cgr_future_wait(fa, 10000000), -ETIMEDOUT, "wait times out");
	t_is(cgr_future_stream_wait(fa, b), 0, "future_stream_wait");
	cgr_stream_launch_host(b, inc_fn, (void *)&bran);
	t_is(cgr_future_wait(fb, 2000000000), -EIO,
	     "a failed operation's future reports its error");
	usleep(20000);
	t_is(atomic_load(&bran), 0, "B waits for A's future on the device");
	atomic_store(&g.open, 1);
	t_is(cgr_future_wait(fa, 2000000000), 0, "A's future completes");
	t_is(cgr_future_test(fa), 1, "test: 1 once done");
	t_is(cgr_future_test(fb), -EIO, "test: the error once failed");
	t_ok(wait_flag(&bran, 1, 5000), "B proceeds");
	t_is(cgr_future_stream_wait(fa, b), 0,
	     "waiting for a complete future is a no-op");
	cgr_future_release(fa);
	cgr_future_release(fb);
	cgr__dfuture_put(ca.f);
	cgr__dfuture_put(cb.f);
	cgr_stream_destroy(a);
	cgr_stream_destroy(b);
}

static void test_sticky(void)
{
	struct gate g = { 0, 0 };
	struct complete_arg ca, cb;
	_Atomic int ran = 0;
	cgr_ctx *c2, *saved;
	cgr_stream *a, *b;
	cgr_event *e;
	cgr_future *fa, *fb;
	int64_t t0;

	cgr_ctx_create(NULL, &c2);
	cgr_stream_create(c2, CGR_DEVICE_SIM, 0, &a);
	cgr_stream_create(c2, CGR_DEVICE_SIM, 0, &b);
	cgr_event_create(c2, &e);
	saved = ctx;
	ctx = c2;
	cgr_stream_launch_host(a, gate_fn, &g);
	fa = future_on(a, &ca, 0);
	cgr_stream_launch_host(a, inc_fn, (void *)&ran);
	cgr_event_record(e, a);
	cgr_stream_wait_event(b, e);
	fb = future_on(b, &cb, 0);
	ctx = saved;
	wait_flag(&g.entered, 1, 2000);
	t0 = cgr__now_ns();
	cgr__device_fail(a->dev, CGR_EDEVICE, "test: injected failure");
	t_is(cgr_future_wait(fa, 2000000000), CGR_EDEVICE,
	     "pending future fails with CGR_EDEVICE");
	t_is(cgr_future_wait(fb, 2000000000), CGR_EDEVICE,
	     "...on every stream of the device");
	t_ok(ms_since(t0) < 500, "promptly (%lld ms)", (long long)ms_since(t0));
	t_is(cgr_stream_synchronize(b, 2000000000), CGR_EDEVICE,
	     "synchronize returns the sticky error");
	t_is(cgr_event_query(e), CGR_EDEVICE, "event query too");
	t_is(cgr_stream_launch_host(b, inc_fn, (void *)&ran), CGR_EDEVICE,
	     "new work is refused");
	atomic_store(&g.open, 1);
	usleep(20000);
	t_is(atomic_load(&ran), 0, "queued work behind the failure never ran");
	t_ok(atomic_load(&cb.ran_err) == CGR_EDEVICE ||
		     atomic_load(&cb.ran_err) == 0,
	     "internal work is told the device error");
	cgr__device_fail(a->dev, -EIO, "second failure");
	t_is(cgr_stream_synchronize(a, 2000000000), CGR_EDEVICE,
	     "the first failure sticks");
	cgr_future_release(fa);
	cgr_future_release(fb);
	cgr__dfuture_put(ca.f);
	cgr__dfuture_put(cb.f);
	cgr_event_destroy(e);
	cgr_stream_destroy(a);
	cgr_stream_destroy(b);
	cgr_ctx_destroy(c2);
}

static void test_destroy(void)
{
	struct gate g = { 0, 0 }, g2 = { 0, 0 };
	_Atomic int n = 0;
	cgr_stream *s, *a;
	cgr_event *e;
	int64_t t0;
	int k = (int)t_scale(500);

	cgr_event *done, *lost;
	cgr_stream *b;
	_Atomic int after = 0;

	cgr_event_create(ctx, &done);
	cgr_event_create(ctx, &lost);
	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &s);
	for (int i = 0; i < k; i++)
		cgr_stream_launch_host(s, inc_fn, (void *)&n);
	cgr_event_record(done, s);
	cgr_stream_destroy(s);
	t_is(atomic_load(&n), k, "destroy runs queued work first");
	t_is(cgr_event_query(done), 1, "an event after work that ran: 1");

	/* A stream blocked on an event that will not complete within the
	 * second destroy waits: its remaining work is dropped. */
	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &a);
	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &s);
	cgr_event_create(ctx, &e);
	cgr_stream_launch_host(a, gate_fn, &g);
	cgr_event_record(e, a);
	cgr_stream_wait_event(s, e);
	atomic_store(&n, 0);
	cgr_stream_launch_host(s, inc_fn, (void *)&n);
	/* b waits for an event recorded after the work that is dropped. */
	cgr_event_record(lost, s);
	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &b);
	cgr_stream_wait_event(b, lost);
	cgr_stream_launch_host(b, inc_fn, (void *)&after);
	t0 = cgr__now_ns();
	cgr_stream_destroy(s);
	t_ok(ms_since(t0) >= 900 && ms_since(t0) < 1500,
	     "destroy of a blocked stream gives up after ~1 s (%lld ms)",
	     (long long)ms_since(t0));
	t_is(atomic_load(&n), 0, "its remaining work was dropped");
	t_is(cgr_event_query(lost), -ECANCELED,
	     "an event recorded after dropped work: -ECANCELED");
	t_is(cgr_stream_synchronize(b, 5000000000LL), 0,
	     "a stream waiting for it goes on");
	t_is(atomic_load(&after), 1, "...and runs its work");
	cgr_stream_destroy(b);
	cgr_event_destroy(done);
	cgr_event_destroy(lost);
	atomic_store(&g.open, 1);
	cgr_event_destroy(e);
	cgr_stream_destroy(a);

	/* A collective on s whose peer never comes, cut short by the
	 * destroy: an event recorded after it reports -ECANCELED too. */
	{
		cgr_comm *cm = NULL;
		cgr_future *f = NULL;
		int32_t x = 1, y = 0;
		cgr_event *ev;
		cgr_event_create(ctx, &ev);
		cgr_comm_create(ctx, NULL, 2, CGR_BACKEND_CPU, &cm);
		cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &s);
		t_is(cgr_allreduce(cm, 0, &x, &y, 1, CGR_INT32, CGR_SUM, s, &f),
		     0, "a collective on s (its peer never comes)");
		cgr_event_record(ev, s);
		cgr_stream_destroy(s);
		t_is(cgr_future_wait(f, 0), -ECANCELED,
		     "destroy cuts it short: -ECANCELED");
		t_is(cgr_event_query(ev), -ECANCELED,
		     "an event recorded right after it: -ECANCELED");
		cgr_future_release(f);
		cgr_event_destroy(ev);
		cgr_comm_destroy(cm);
	}

	/* Stuck in a host function: the executor is abandoned and frees the
	 * stream itself when the function returns. */
	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &s);
	cgr_stream_launch_host(s, gate_fn, &g2);
	cgr_stream_launch_host(s, inc_fn, (void *)&n);
	t0 = cgr__now_ns();
	cgr_stream_destroy(s);
	t_ok(ms_since(t0) < 1500, "destroy of a stuck stream returns (%lld ms)",
	     (long long)ms_since(t0));
	atomic_store(&g2.open, 1);
	usleep(50000);
	t_is(atomic_load(&n), 0, "work behind the stuck function was dropped");
}

static double cpu_ms(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3 +
	       ru.ru_stime.tv_sec * 1e3 + ru.ru_stime.tv_usec / 1e3;
}

static void test_idle_cpu(void)
{
	cgr_stream *s[4];
	_Atomic int n = 0;
	double c0, c1;

	for (int i = 0; i < 4; i++) {
		cgr_stream_create(ctx, CGR_DEVICE_SIM, i - 2, &s[i]);
		cgr_stream_launch_host(s[i], inc_fn, (void *)&n);
		cgr_stream_synchronize(s[i], 2000000000);
	}
	usleep(10000);
	c0 = cpu_ms();
	usleep(300000);
	c1 = cpu_ms();
	t_ok(c1 - c0 < 15, "4 idle streams used %.2f ms of CPU in 300 ms",
	     c1 - c0);
	for (int i = 0; i < 4; i++)
		cgr_stream_destroy(s[i]);
}

/* a waits for e, recorded on b behind a closed gate; then (if c, a stream
 * of b's backend) e is re-recorded on idle c: a must keep waiting for the
 * record it saw. */
static void cross_wait(cgr_stream *a, cgr_stream *b, cgr_stream *c,
		       const char *what)
{
	struct gate g = { 0, 0 };
	_Atomic int ran = 0;
	cgr_event *e;

	cgr_event_create(ctx, &e);
	cgr_stream_launch_host(b, gate_fn, &g);
	cgr_event_record(e, b);
	t_is(cgr_stream_wait_event(a, e), 0, "%s: stream_wait_event", what);
	cgr_stream_launch_host(a, inc_fn, (void *)&ran);
	if (c != NULL) {
		cgr_event_record(e, c);
		cgr_stream_synchronize(c, 2000000000);
		t_is(cgr_event_query(e), 1, "%s: re-recorded on an idle stream",
		     what);
	}
	usleep(20000);
	t_is(atomic_load(&ran), 0, "%s: later work holds", what);
	atomic_store(&g.open, 1);
	t_is(cgr_stream_synchronize(a, 5000000000), 0, "%s: then runs", what);
	t_is(atomic_load(&ran), 1, "%s: once", what);
	cgr_stream_synchronize(b, 5000000000);
	cgr_event_destroy(e);
}

/* CUDA only: events and futures across backends (a CUDA stream waits in
 * a host function, a sim stream polls the CUDA event); internal CALL work
 * is refused. */
static int pass_on(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	(void)tc, (void)st, (void)nin, (void)nout;
	out[0] = in[0];
	return 0;
}

/* The log hook gets one line per message, whatever the names it quotes
 * hold (a worker and a task named with a newline, a compile that fails
 * and logs both). */
static void test_log_one_line(void)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compiled *c = NULL;
	cgr_worker *w = NULL;
	cgr_graph *g = NULL;
	cgr_node *x, *y;
	cgr_ctx *lc = NULL;

	cp.log_fn = log_lines;
	cp.log_level = CGR_LOG_DEBUG;
	cgr_ctx_create(&cp, &lc);
	wp.name = "bad\nworker";
	cgr_worker_create(lc, &wp, &w);
	cgr_graph_create(lc, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "t\r\nask\x1b[0m";
	d.fn = pass_on;
	d.flags = CGR_TASK_DEVICE; /* on a worker without a device */
	cgr_graph_task(g, w, &d, &x, 1, &y, 1);
	cgr_graph_output(g, &y, 1);
	t_ok(cgr_graph_compile(g, NULL, &c) != 0, "a device task there fails "
						 "to compile");
	cgr_graph_destroy(g);
	cgr_ctx_destroy(lc);
	t_ok(atomic_load(&g_lines) > 0 && atomic_load(&g_multi) == 0,
	     "every log message is one line without control characters (%d "
	     "of %d were not)",
	     atomic_load(&g_multi), atomic_load(&g_lines));
}

/* The CPU communicator's operations are refused on a CUDA stream
 * (-ENOTSUP from the call, no future): CUDA may run host functions one at
 * a time, and they block on their peers. */
static void test_cuda_cpu_comm(void)
{
	cgr_comm *cm = NULL;
	cgr_future *f = NULL;
	cgr_stream *cu;
	int32_t x = 1, y = 0;

	cgr_stream_create(ctx, g_dev, 0, &cu);
	cgr_comm_create(ctx, NULL, 1, CGR_BACKEND_CPU, &cm);
	t_is(cgr_allreduce(cm, 0, &x, &y, 1, CGR_INT32, CGR_SUM, cu, &f),
	     -ENOTSUP, "a CPU communicator's operation on a CUDA stream: "
	     "-ENOTSUP");
	t_ok(f == NULL && y == 0, "...no future, nothing moved");
	t_ok(strstr(cgr_comm_errmsg(cm, 0), "CUDA stream") != NULL,
	     "...saying why: %s", cgr_comm_errmsg(cm, 0));
	t_is(cgr_allreduce(cm, 0, &x, &y, 1, CGR_INT32, CGR_SUM, NULL, NULL),
	     0, "the communicator stays usable");
	cgr_comm_destroy(cm);
	cgr_stream_destroy(cu);
}

static void test_cuda_only(void)
{
	struct gate g = { 0, 0 };
	struct complete_arg ca, cc;
	_Atomic int ran = 0;
	cgr_stream *sim, *cu;

	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &sim);
	cgr_stream_create(ctx, 0, 0, &cu);
	cross_wait(cu, sim, NULL, "a CUDA stream waits for a sim event");
	cross_wait(sim, cu, NULL, "a sim stream waits for a CUDA event");
	cgr_stream *cu2, *sim2;
	cgr_stream_create(ctx, 0, 0, &cu2);
	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &sim2);
	cross_wait(sim, cu, cu2, "re-recorded CUDA event, sim waiter");
	cross_wait(cu, sim, sim2, "re-recorded sim event, CUDA waiter");
	cgr_stream_destroy(cu2);
	cgr_stream_destroy(sim2);
	cgr_stream_launch_host(sim, gate_fn, &g);
	cgr_future *f = future_on(sim, &ca, 0);
	t_is(cgr_future_stream_wait(f, cu), 0, "a CUDA stream waits for a "
					       "sim stream's future");
	cgr_stream_launch_host(cu, inc_fn, (void *)&ran);
	usleep(20000);
	t_is(atomic_load(&ran), 0, "...on the device: later work holds");
	atomic_store(&g.open, 1);
	t_is(cgr_stream_synchronize(cu, 5000000000), 0, "then it runs");
	t_is(atomic_load(&ran), 1, "once");
	t_ok(future_on(cu, &cc, 0) == NULL,
	     "internal CALL work on a CUDA stream is refused");
	/* Nobody holds the refused one's three references but us. */
	for (int i = 0; i < 3; i++)
		cgr__dfuture_put(cc.f);
	cgr_future_release(f);
	cgr__dfuture_put(ca.f);
	cgr_stream_destroy(cu);
	cgr_stream_destroy(sim);
}

/* ---- CUDA: waits for the host never block a host function ---------- */

/* CUDA may run the host functions of every stream of a device on one
 * thread (the fake does): stream A waits for a pending future, event or
 * polled future X; stream B's host function must still run, and only then
 * does the test make X pass.  A wait that blocked inside a host function
 * would starve B (bounded here: the check fails after 5 s, then X passes
 * anyway so nothing hangs). */
enum { T_PLAIN, T_POLLED, T_EVENT };

static int poll_flag(void *arg, int *result)
{
	*result = 0;
	return atomic_load((_Atomic int *)arg) != 0;
}

static void cuda_no_block(int kind, const char *what)
{
	struct gate g = { 0, 0 };
	_Atomic int aran = 0, bran = 0, polled = 0;
	struct cgr__dfuture *df = NULL;
	cgr_stream *a, *b, *sim = NULL;
	cgr_event *e = NULL;
	int ret;

	cgr_stream_create(ctx, 0, 0, &a);
	cgr_stream_create(ctx, 0, 0, &b);
	if (kind == T_EVENT) {
		cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &sim);
		cgr_event_create(ctx, &e);
		cgr_stream_launch_host(sim, gate_fn, &g);
		cgr_event_record(e, sim);
		ret = cgr_stream_wait_event(a, e);
	} else {
		cgr__dfuture_create(ctx, NULL, &df);
		if (kind == T_POLLED)
			cgr__dfuture_poll_by(df, poll_flag, NULL,
					     (void *)&polled);
		ret = cgr_future_stream_wait(cgr__dfuture_pub(df), a);
	}
	if (ret == -ENOTSUP) {
		t_skipf("%s: no stream memory operations on CUDA device 0",
		       what);
		goto out;
	}
	t_is(ret, 0, "%s: the CUDA stream waits", what);
	cgr_stream_launch_host(a, inc_fn, (void *)&aran);
	cgr_stream_launch_host(b, inc_fn, (void *)&bran);
	t_ok(wait_flag(&bran, 1, 5000),
	     "%s: another stream's host function runs meanwhile", what);
	t_is(atomic_load(&aran), 0, "%s: the waiting stream holds", what);
out:
	if (kind == T_EVENT)
		atomic_store(&g.open, 1);
	else if (kind == T_POLLED)
		atomic_store(&polled, 1);
	else
		cgr__dfuture_complete(df, 0);
	if (ret == 0)
		t_ok(wait_flag(&aran, 1, 5000), "%s: then it proceeds", what);
	t_is(cgr_stream_synchronize(a, 5000000000), 0, "%s: A done", what);
	t_is(cgr_stream_synchronize(b, 5000000000), 0, "%s: B done", what);
	if (kind == T_EVENT) {
		cgr_stream_synchronize(sim, 5000000000);
		cgr_event_destroy(e);
		cgr_stream_destroy(sim);
	} else {
		cgr_future_release(cgr__dfuture_pub(df));
	}
	cgr_stream_destroy(a);
	cgr_stream_destroy(b);
}

static void test_cuda_no_block(void)
{
	cuda_no_block(T_PLAIN, "pending future");
	cuda_no_block(T_POLLED, "polled future");
	cuda_no_block(T_EVENT, "sim event");
}

#ifdef CGR_FAKE_CUDART
static _Atomic int g_nomemops; /* log lines saying so */

static void log_count(void *arg, int level, const char *msg)
{
	log_keep(arg, level, msg);
	if (strstr(msg, "no stream memory operations") != NULL)
		atomic_fetch_add(&g_nomemops, 1);
}

static void *fake_sym(const char *name)
{
	void *h = dlopen(CGR_FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
	void *p = h != NULL ? dlsym(h, name) : NULL;

	if (h != NULL)
		dlclose(h);
	return p;
}

/* Without stream memory operations (the driver's entry point missing, or
 * the call refused): -ENOTSUP at once, said once per device, nothing
 * enqueued or left behind. */
static void test_cuda_nomemops(void)
{
	void (*nomemops)(int) = (void (*)(int))fake_sym("fake_cuda_no_memops");
	long (*hosts)(void) = (long (*)(void))fake_sym("fake_cuda_host_allocs");
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	struct gate g = { 0, 0 };
	static const char *const how[] = { "", "entry point not found",
					   "CUDA_ERROR_NOT_SUPPORTED" };

	if (nomemops == NULL || hosts == NULL) {
		t_skip("the fake runtime's hooks not found");
		return;
	}
	cp.cudart_path = CGR_FAKE_CUDART;
	cp.log_fn = log_count;
	cp.log_level = CGR_LOG_INFO;
	for (int mode = 1; mode <= 2; mode++) {
		struct cgr__dfuture *df;
		_Atomic int ran = 0;
		cgr_stream *a, *sim;
		cgr_event *e;
		cgr_ctx *c2;
		long h0 = hosts();
		int64_t t0;

		nomemops(mode);
		atomic_store(&g_nomemops, 0);
		atomic_store(&g.open, 0);
		cgr_ctx_create(&cp, &c2);
		cgr_stream_create(c2, 0, 0, &a);
		cgr_stream_create(c2, CGR_DEVICE_SIM, 0, &sim);
		cgr_event_create(c2, &e);
		cgr__dfuture_create(c2, NULL, &df);
		t0 = cgr__now_ns();
		t_is(cgr_future_stream_wait(cgr__dfuture_pub(df), a), -ENOTSUP,
		     "%s: waiting for a pending future: -ENOTSUP", how[mode]);
		cgr_stream_launch_host(sim, gate_fn, &g);
		cgr_event_record(e, sim);
		t_is(cgr_stream_wait_event(a, e), -ENOTSUP,
		     "%s: for a sim event too", how[mode]);
		t_is(cgr_future_stream_wait(cgr__dfuture_pub(df), a), -ENOTSUP,
		     "%s: again", how[mode]);
		t_ok(ms_since(t0) < 1000, "%s: at once", how[mode]);
		t_is(atomic_load(&g_nomemops), 1,
		     "%s: said once in the log: %s", how[mode], g_log);
		cgr_stream_launch_host(a, inc_fn, (void *)&ran);
		t_is(cgr_stream_synchronize(a, 2000000000), 0,
		     "%s: the stream is not blocked", how[mode]);
		t_is(atomic_load(&ran), 1, "%s: its work ran", how[mode]);
		cgr__dfuture_complete(df, 0);
		t_is(cgr_future_stream_wait(cgr__dfuture_pub(df), a), 0,
		     "%s: a complete future needs no wait", how[mode]);
		atomic_store(&g.open, 1);
		cgr_stream_synchronize(sim, 2000000000);
		cgr_future_release(cgr__dfuture_pub(df));
		cgr_event_destroy(e);
		cgr_stream_destroy(a);
		cgr_stream_destroy(sim);
		cgr_ctx_destroy(c2);
		t_is(hosts(), h0, "%s: no pinned memory left", how[mode]);
	}
	nomemops(0);
}

/* Device 0 fails (a sticky error of that device only) while a stream of
 * it waits at a gate: the wait ends, the gate's references are dropped
 * and its page freed; device 1 keeps working. */
static void test_cuda_gate_fail(void)
{
	void (*faildev)(int, int) =
		(void (*)(int, int))fake_sym("fake_cuda_fail_device");
	long (*hosts)(void) = (long (*)(void))fake_sym("fake_cuda_host_allocs");
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	_Atomic int aran = 0, bran = 0;
	struct cgr__dfuture *df;
	cgr_stream *a, *b;
	cgr_ctx *c2;
	long h0;
	int64_t t0;

	if (faildev == NULL || hosts == NULL) {
		t_skip("the fake runtime's hooks not found");
		return;
	}
	cp.cudart_path = CGR_FAKE_CUDART;
	h0 = hosts();
	cgr_ctx_create(&cp, &c2);
	t_is(cgr_stream_create(c2, 0, 0, &a), 0, "a stream on device 0");
	t_is(cgr_stream_create(c2, 1, 0, &b), 0, "a stream on device 1");
	cgr__dfuture_create(c2, NULL, &df);
	t_is(cgr_future_stream_wait(cgr__dfuture_pub(df), a), 0,
	     "device 0's stream waits for a pending future");
	cgr_stream_launch_host(a, inc_fn, (void *)&aran);
	t_is(atomic_load(&df->refs), 3, "the gate holds the future");
	faildev(0, 700);
	t0 = cgr__now_ns();
	t_is(cgr_stream_synchronize(a, 2000000000), CGR_EDEVICE,
	     "device 0 fails: its stream reports CGR_EDEVICE");
	t_ok(ms_since(t0) < 1000, "promptly (%lld ms)",
	     (long long)ms_since(t0));
	for (int i = 0; i < 5000 && atomic_load(&df->refs) != 2; i++)
		usleep(1000);
	t_is(atomic_load(&df->refs), 2,
	     "the gate opened and gave the future back");
	t_is(cgr_stream_launch_host(b, inc_fn, (void *)&bran), 0,
	     "device 1 still takes work");
	t_is(cgr_stream_synchronize(b, 2000000000), 0, "...and runs it");
	t_is(atomic_load(&bran), 1, "once");
	t_is(cgr_stream_launch_host(a, inc_fn, (void *)&aran), CGR_EDEVICE,
	     "device 0 stays failed");
	faildev(0, 0);
	t_is(cgr_stream_synchronize(a, 2000000000), CGR_EDEVICE,
	     "...in cgr, even once the model recovers");
	t_is(atomic_load(&aran), 0, "work behind the gate never ran");
	cgr__dfuture_complete(df, 0);
	cgr_future_release(cgr__dfuture_pub(df));
	cgr_stream_destroy(a);
	cgr_stream_destroy(b);
	cgr_ctx_destroy(c2);
	t_is(hosts(), h0, "the gate's page was freed");
}

/* CUDA cannot be used in a child forked after it was initialised; the
 * model says so too, and cgr reports it as an error, not a hang. */
static void test_cuda_fork(void)
{
	_Atomic int ran = 0;
	cgr_stream *s;
	int st = -1;
	pid_t pid;

	cgr_stream_create(ctx, 0, 0, &s);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		int r = cgr_stream_launch_host(s, inc_fn, (void *)&ran);
		_exit(r == -EIO ? 0 : 10 + (r < 0 ? -r : r) % 100);
	}
	for (int i = 0; i < 10000 && pid > 0; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			break;
		if (i == 9999) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
		}
		usleep(1000);
	}
	t_ok(pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	     "a forked child's CUDA call fails (-EIO), no hang (status %d)",
	     st);
	t_is(cgr_stream_launch_host(s, inc_fn, (void *)&ran), 0,
	     "the parent's stream still works");
	t_is(cgr_stream_synchronize(s, 2000000000), 0, "...to the end");
	t_is(atomic_load(&ran), 1, "once");
	cgr_stream_destroy(s);
}
#endif

static void test_args(void)
{
	cgr_stream *s;
	cgr_event *e;

	t_is(cgr_stream_create(ctx, CGR_DEVICE_NONE, 0, &s), -EINVAL,
	     "CGR_DEVICE_NONE refused");
	g_log[0] = 0;
	if (cgr_stream_create(ctx, 0, 0, &s) == 0) {
		cgr_stream_destroy(s);
		t_ok(cgr_stream_create(ctx, 99, 0, &s) == -ENODEV &&
			     strstr(g_log, "cuda device 99") != NULL,
		     "a CUDA index past the last device: -ENODEV, and the "
		     "log says why: %s",
		     g_log);
	} else {
		t_is(cgr_stream_create(ctx, 0, 0, &s), -ENODEV,
		     "a CUDA index with no CUDA device (or no cuda backend): "
		     "-ENODEV");
#ifdef HAVE_CUDA
		t_ok(strstr(g_log, "cuda device 0") != NULL,
		     "the log says why: %s", g_log);
#endif
	}
	t_is(cgr_stream_create(NULL, CGR_DEVICE_SIM, 0, &s), -EINVAL,
	     "NULL ctx");
	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &s);
	cgr_event_create(ctx, &e);
	t_is(cgr_stream_launch_host(s, NULL, NULL), -EINVAL, "NULL fn");
	t_is(cgr_stream_memcpy_async(s, NULL, NULL, 1), -EINVAL, "NULL copy");
	t_is(cgr_stream_memcpy_async(s, NULL, NULL, 0), 0, "empty copy");
	t_is(cgr_future_test(NULL), -EINVAL, "future_test(NULL)");
	cgr_stream_destroy(NULL);
	cgr_event_destroy(e);
	cgr_stream_destroy(s);
}

#ifdef CGR_FAKE_CUDART
/* A CUDA error the context cannot survive fails the device for good:
 * one of each kind driver_types.h documents as sticky, including those
 * CUDA 12.x and 13.0 added (226, 721, 810, 911). */
static void test_cuda_sticky(void)
{
	static const int codes[] = { 700, 719, 226, 721, 810, 911 };
	void (*fail)(int);
	void *h = dlopen(CGR_FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *c2;
	cgr_stream *a;
	cgr_event *e;
	_Atomic int ran = 0;

	*(void **)&fail = h != NULL ? dlsym(h, "fake_cuda_fail") : NULL;
	if (fail == NULL) {
		t_skip("the fake runtime's hook not found");
		return;
	}
	cp.cudart_path = CGR_FAKE_CUDART;
	for (size_t i = 0; i < sizeof(codes) / sizeof(*codes); i++) {
		cgr_ctx_create(&cp, &c2);
		cgr_stream_create(c2, 0, 0, &a);
		cgr_event_create(c2, &e);
		cgr_event_record(e, a);
		fail(codes[i]);
		t_is(cgr_stream_synchronize(a, 2000000000), CGR_EDEVICE,
		     "CUDA error %d fails the device: synchronize", codes[i]);
		fail(0); /* the runtime recovers; the device stays failed */
		t_is(cgr_event_query(e), CGR_EDEVICE, "event query too");
		t_is(cgr_stream_launch_host(a, inc_fn, (void *)&ran),
		     CGR_EDEVICE, "new work is refused");
		t_is(cgr_stream_synchronize(a, 2000000000), CGR_EDEVICE,
		     "the failure sticks");
		cgr_event_destroy(e);
		cgr_stream_destroy(a);
		cgr_ctx_destroy(c2);
	}
	dlclose(h);
}

/* A runtime of a version cgr does not know the ABI of is not used, and
 * the log says which library and version it was. */
static void test_cuda_version(void)
{
	static const char *const bad[] = { "11080", "14000" };
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *c2;
	cgr_stream *a = NULL;

	cp.cudart_path = CGR_FAKE_CUDART;
	cp.log_fn = log_keep;
	cp.log_level = CGR_LOG_INFO;
	for (size_t i = 0; i < 2; i++) {
		setenv("FAKE_CUDART_VERSION", bad[i], 1);
		cgr_ctx_create(&cp, &c2);
		g_log[0] = 0;
		t_is(cgr_stream_create(c2, 0, 0, &a), -ENODEV,
		     "a runtime reporting version %s is refused", bad[i]);
		t_ok(strstr(g_log, bad[i]) != NULL &&
			     strstr(g_log, "libfakecudart") != NULL,
		     "...and the log names it and its version: %s", g_log);
		cgr_ctx_destroy(c2);
	}
	unsetenv("FAKE_CUDART_VERSION");
	setenv("FAKE_CUDART_VERSION", "12080", 1);
	cgr_ctx_create(&cp, &c2);
	t_is(cgr_stream_create(c2, 0, 0, &a), 0,
	     "a 12.8 runtime is used (one ABI for 12.x and 13.x)");
	cgr_stream_destroy(a);
	cgr_ctx_destroy(c2);
	unsetenv("FAKE_CUDART_VERSION");
}
#endif

int main(int argc, char **argv)
{
	size_t b0, b1, n0, n1;

	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_stream *probe;
	char no_cuda[512] = "";

	t_init(argc, argv, 60);
#ifdef CGR_FAKE_CUDART
	/* The cuda backend over a model of the CUDA runtime (no GPU here). */
	cp.cudart_path = CGR_FAKE_CUDART;
	t_diag("CUDA devices 0 and 1 are %s", CGR_FAKE_CUDART);
	setenv("FAKE_CUDA_NDEV", "2", 1); /* before any thread reads it */
#endif
	cp.log_fn = log_keep;
	cp.log_level = CGR_LOG_INFO;
	if (cgr_ctx_create(&cp, &ctx) != 0) {
		printf("Bail out! no context\n");
		return 1;
	}
	/* The context's CUDA runtime state (loaded at first use, kept until
	 * the context goes) is in the baseline. */
	if (cgr_stream_create(ctx, 0, 0, &probe) == 0)
		cgr_stream_destroy(probe);
	else
		snprintf(no_cuda, sizeof(no_cuda), "%s", g_log);
	cgr_ctx_memory(ctx, &b0, &n0);
	test_args();
	test_log_one_line();
	test_order();
	test_events_data();
	test_sync_and_nowait();
	test_never_recorded();
	test_rerecord();
	test_futures();
	test_sticky();
	test_destroy();
	test_idle_cpu();
	/* The same semantics on CUDA device 0, where there is one. */
	if (cgr_stream_create(ctx, 0, 0, &probe) == 0) {
		cgr_stream_destroy(probe);
		g_dev = 0;
		t_diag("CUDA device 0: the stream tests again on it");
		test_order();
		test_events_data();
		test_sync_and_nowait();
		test_never_recorded();
		test_rerecord();
		test_cuda_only();
		test_cuda_cpu_comm();
		test_cuda_no_block();
#ifdef CGR_FAKE_CUDART
		test_cuda_nomemops();
		test_cuda_gate_fail();
		test_cuda_fork();
		test_cuda_sticky();
		test_cuda_version();
#endif
	} else {
		t_skipf("no CUDA device, the stream tests on CUDA not run: %s",
			no_cuda);
	}
	usleep(20000);
	cgr_ctx_memory(ctx, &b1, &n1);
	t_ok(b1 == b0 && n1 == n0,
	     "every stream, event and future freed (%zu -> %zu bytes)", b0,
	     b1);
	cgr_ctx_destroy(ctx);
	return t_done();
}
