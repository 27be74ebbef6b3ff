/*
 * tests/reactor.c: the reactor (reactor/reactor.h): idle cost, deadlines,
 * timers, wake-ups, busy waiting, the peer-death watch, and what adaptive
 * waiting learns.
 *
 * Built five times, one way io_uring may be refused each
 * (tests/t_seccomp.h installs a seccomp filter, as a container's profile
 * would):
 *   tests/reactor             io_uring where the kernel allows it;
 *   tests/reactor-fallback    io_uring_setup refused (T_FORCE_FALLBACK):
 *                             every reactor falls back at its setup;
 *   tests/reactor-noregister  io_uring_register refused (T_DENY_REGISTER):
 *                             rings are set up, the opcode probe fails;
 *   tests/reactor-noenter     io_uring_enter refused (T_DENY_ENTER): the
 *                             main reactor first parks on io_uring and arms
 *                             a watch; then the filter comes, and the
 *                             watch's cancel fails; every later reactor
 *                             (the context's workers included) sets a
 *                             ring up and fails at its first park;
 *   tests/reactor-badop       the reactors this test makes carry
 *                             CGR__REACTOR_TEST_BADOP (T_BADOP): their
 *                             FUTEX_WAIT requests complete with -EINVAL,
 *                             as on a kernel without the opcode.
 * Wherever io_uring fails, each check below must still pass on the futex
 * fallback, the reactor must say so exactly once through its log (and a
 * context once through its log hook), and an idle reactor must stay under
 * 1% of a core: a refused ring asked again at every park would spin.
 *
 *  1. idle: a context with two idle workers, and a bare reactor thread in
 *     an adaptive wait with a 2 s deadline, each use under 1% of a core;
 *     the bare wait returns -ETIMEDOUT at or after its deadline.
 *  2. deadlines: park and wait (each wait mode) with 1, 5 and 20 ms
 *     deadlines return -ETIMEDOUT at or after the deadline and less than
 *     50 ms after it; timers fire at or after their deadlines, in deadline
 *     order; cancel works once.
 *  3. wake-up: a second thread sets a flag and rings; the waiter, in a
 *     random mode with a random spin (0 included), always returns 0 (a
 *     lost wake-up hangs the program until the hard limit); a cancel word
 *     gives -ECANCELED.
 *  4. busy: six CGR_WAIT_BUSY threads on two cores pass a token around a
 *     ring of flags and complete every pass.
 *  5. peer-death watch (a reactor of its own): a reactor parked on a bell
 *     nobody rings wakes within 100 ms of a kill -9 of a watched child
 *     (pidfd); a cancelled watch never fires; a process already gone
 *     fires at once; 16 fit.
 *  6. adaptive waits: a waiter whose spins never pay parks at once, and
 *     spins again once answers come quickly; a thread whose spins lose
 *     the CPU (two busy threads pinned on its core) parks at once, and
 *     spins again once the busy threads are gone.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reactor/reactor.h"
#include "t_seccomp.h"
#include "tap.h"

#if defined(T_FORCE_FALLBACK)
#define T_MODE "fallback (io_uring_setup refused)"
#define T_DENY_NR __NR_io_uring_setup
#define T_STEP "io_uring_setup"
#elif defined(T_DENY_REGISTER)
#define T_MODE "io_uring_register refused"
#define T_DENY_NR __NR_io_uring_register
#define T_STEP "io_uring_register"
#elif defined(T_DENY_ENTER)
#define T_MODE "io_uring_enter refused"
#define T_STEP "io_uring_enter"
#elif defined(T_BADOP)
#define T_MODE "FUTEX_WAIT requests fail"
#define T_STEP "FUTEX_WAIT"
#else
#define T_MODE "io_uring"
#endif
/* Reactors fall back: at their setup (T_AT_INIT), or at a later step. */
#if defined(T_FORCE_FALLBACK) || defined(T_DENY_REGISTER)
#define T_FALLS_BACK 1
#define T_AT_INIT 1
#elif defined(T_DENY_ENTER) || defined(T_BADOP)
#define T_FALLS_BACK 1
#define T_AT_INIT 0
#else
#define T_FALLS_BACK 0
#define T_AT_INIT 0
#endif
/* The reactors this test makes, and the error they end with. */
#ifdef T_BADOP
#define T_FLAGS CGR__REACTOR_TEST_BADOP
#define T_ERR (-EINVAL)
#else
#define T_FLAGS 0
#define T_ERR (-EPERM)
#endif

#define MS 1000000LL
/* How late a deadline may fire: generous, VMs are noisy. */
#define T_LATE_NS (50 * MS)
/* How long the idle checks last, and the share of a core an idle thread
 * may use meanwhile. */
#define T_IDLE_NS (2000 * MS)
#define T_IDLE_MAX 0.01
/* A cap on the wake-up rounds, for a loaded machine. */
#define T_ROUNDS_NS (4000 * MS)

/* Whether a plain reactor parks on io_uring here (the kernel's answer,
 * asked before any filter). */
static bool t_kernel_uring;

static const char *t_mode_name(int mode)
{
	return mode == CGR_WAIT_BUSY	? "busy"
	       : mode == CGR_WAIT_BLOCK ? "block"
					: "adaptive";
}

static bool t_never(void *arg)
{
	(void)arg;
	return false;
}

/* Parks on a bell nobody rings until the deadline: -ETIMEDOUT, or what
 * else the park said. */
static int t_park_until(struct cgr__reactor *r, struct cgr__bell *b,
			int64_t deadline)
{
	int ret;

	do {
		uint32_t seq = cgr__bell_prepare(b);
		ret = cgr__reactor_park(r, b, seq, deadline);
		cgr__bell_cancel(b);
	} while (ret == 0 && cgr__now_ns() < deadline);
	return ret;
}

/* ---- logs -------------------------------------------------------------- */

struct t_log {
	pthread_mutex_t mu;
	int lines, uring_lines;
	char first[256];
};

static void t_log_hook(void *arg, int level, const char *msg)
{
	struct t_log *l = arg;

	(void)level;
	pthread_mutex_lock(&l->mu);
	l->lines++;
	if (strstr(msg, "io_uring") != NULL && l->uring_lines++ == 0)
		snprintf(l->first, sizeof(l->first), "%s", msg);
	pthread_mutex_unlock(&l->mu);
}

static int t_log_uring_lines(struct t_log *l)
{
	int n;

	pthread_mutex_lock(&l->mu);
	n = l->uring_lines;
	pthread_mutex_unlock(&l->mu);
	return n;
}

/* A reactor this test makes, with T_FLAGS, saying its fallback into log. */
struct t_reactor {
	struct cgr__reactor r;
	struct t_log log;
	struct cgr__logger lg;
};

static void t_reactor_init(struct t_reactor *tr)
{
	pthread_mutex_init(&tr->log.mu, NULL);
	tr->log.lines = tr->log.uring_lines = 0;
	tr->lg = (struct cgr__logger){t_log_hook, &tr->log, CGR_LOG_DEBUG};
	cgr__reactor_init(&tr->r, T_FLAGS);
	cgr__reactor_set_log(&tr->r, &tr->lg, NULL);
}

/* Checks what a freshly initialised reactor chose. */
static int t_reactor_bad(const struct cgr__reactor *r)
{
#if T_AT_INIT
	return r->uring || r->uring_err != -EPERM;
#elif T_FALLS_BACK
	return !r->uring; /* the ring is set up; a later step fails */
#else
	(void)r;
	return 0;
#endif
}

/* Says what a reactor that has parked uses, and checks it: on a fallback
 * variant, the futex, for the variant's reason, said exactly once. */
static void t_reactor_report(const char *who, const struct cgr__reactor *r,
			     struct t_log *log)
{
	int lines = log != NULL ? t_log_uring_lines(log) : -1;

	if (r->uring)
		t_diag("%s: parks on io_uring", who);
	else
		t_diag("%s: futex fallback (%s: %s)", who,
		       r->uring_where ? r->uring_where : "?",
		       cgr_strerror(r->uring_err));
	if (lines > 0)
		t_diag("%s: log: %s", who, log->first);
#if T_FALLS_BACK
	t_ok(!r->uring, "%s: parks on futexes", who);
	t_is(r->uring_err, T_ERR, "%s: uring_err is %s", who,
	     cgr_err_name(T_ERR));
	t_ok(r->uring_where != NULL && strstr(r->uring_where, T_STEP) != NULL,
	     "%s: the failed step is %s (%s)", who, T_STEP,
	     r->uring_where ? r->uring_where : "none");
	if (log != NULL)
		t_is(lines, 1, "%s: said so exactly once", who);
#else
	if (log != NULL)
		t_is(lines, r->uring ? 0 : 1,
		     "%s: mentions io_uring only if it fell back, once", who);
#endif
}

/* ---- CPU time of one thread ----------------------------------------- */

/* The CPU clock of thread tid of this process, as glibc's
 * pthread_getcpuclockid builds it (CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED);
 * /proc's clock ticks where that clock is refused. */
static int64_t t_tid_cpu_ns(pid_t tid)
{
	clockid_t c = (clockid_t)((~(unsigned)tid << 3) | 6u);
	struct timespec ts;
	char path[64];
	unsigned long ut, st;
	FILE *f;
	int n;

	if (clock_gettime(c, &ts) == 0)
		return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	/* Fields 14 and 15 (utime, stime) follow "(comm)", which may hold
	 * spaces: skip to the last ')'. */
	char buf[1024], *p;
	n = (int)fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n > 0 ? n : 0] = 0;
	p = strrchr(buf, ')');
	if (p == NULL ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
		   &ut, &st) != 2)
		return -1;
	return (int64_t)(ut + st) * (1000000000 / sysconf(_SC_CLK_TCK));
}

/* Finds the threads named prefix* in this process; returns how many. */
static int t_find_threads(const char *prefix, pid_t *tids, int max)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL && n < max) {
		char comm[32];

		if (e->d_name[0] != '.' &&
		    t_thread_comm(e->d_name, comm, sizeof(comm)) &&
		    strncmp(comm, prefix, strlen(prefix)) == 0)
			tids[n++] = (pid_t)atoi(e->d_name);
	}
	closedir(d);
	return n;
}

static int64_t t_rusage_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
	       ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/* ---- 1. idle --------------------------------------------------------- */

struct t_bare {
	bool bad;
	struct cgr__reactor end_state; /* uring, uring_err, uring_where */
	struct t_log log;
	int ret;
	int64_t deadline, end, cpu_ns;
};

/* A reactor on a thread of its own, waiting for nothing for 2 s. */
static void *t_bare_main(void *arg)
{
	struct t_bare *b = arg;
	struct t_reactor tr;
	struct cgr__bell bell;
	struct timespec c0, c1;

	t_reactor_init(&tr);
	b->bad = t_reactor_bad(&tr.r);
	cgr__bell_init(&bell);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	b->deadline = cgr__now_ns() + T_IDLE_NS;
	b->ret = cgr__reactor_wait(&tr.r, &bell, t_never, NULL, NULL,
				   CGR_WAIT_ADAPTIVE, 50000, b->deadline);
	b->end = cgr__now_ns();
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	b->cpu_ns =
	    (c1.tv_sec - c0.tv_sec) * 1000000000LL + c1.tv_nsec - c0.tv_nsec;
	b->end_state.uring = tr.r.uring;
	b->end_state.uring_err = tr.r.uring_err;
	b->end_state.uring_where = tr.r.uring_where;
	pthread_mutex_lock(&tr.log.mu);
	b->log.lines = tr.log.lines;
	b->log.uring_lines = tr.log.uring_lines;
	memcpy(b->log.first, tr.log.first, sizeof(b->log.first));
	pthread_mutex_unlock(&tr.log.mu);
	cgr__reactor_fini(&tr.r);
	return NULL;
}

static void t_idle(void)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	struct t_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct t_bare bare = {0};
	cgr_worker *w[2] = {NULL, NULL};
	cgr_ctx *ctx = NULL;
	pthread_t th;
	pid_t tids[4];
	int64_t cpu0[4], cpu1[4], ru0, ru1, t0, t1;
	int n, ret;

	cp.log_fn = t_log_hook;
	cp.log_arg = &log;
	ret = cgr_ctx_create(&cp, &ctx);
	t_is(ret, 0, "idle: cgr_ctx_create");
	if (ret != 0)
		return;
	for (int i = 0; i < 2; i++) {
		char name[16];
		snprintf(name, sizeof(name), "idle%d", i);
		wp.name = name;
		ret = cgr_worker_create(ctx, &wp, &w[i]);
		t_is(ret, 0, "idle: cgr_worker_create %s", name);
	}
	n = t_find_threads("cgr:idle", tids, 4);
	t_is(n, 2, "idle: found both worker threads");

	ru0 = t_rusage_ns();
	t0 = cgr__now_ns();
	for (int i = 0; i < n; i++)
		cpu0[i] = t_tid_cpu_ns(tids[i]);
	ret = pthread_create(&th, NULL, t_bare_main, &bare);
	if (ret != 0) {
		t_ok(0, "idle: start the bare reactor thread: %s",
		     strerror(ret));
		cgr_ctx_destroy(ctx);
		return;
	}
	/* Joining is the main thread's idle time: the bare wait lasts 2 s. */
	pthread_join(th, NULL);
	t1 = cgr__now_ns();
	for (int i = 0; i < n; i++)
		cpu1[i] = t_tid_cpu_ns(tids[i]);
	ru1 = t_rusage_ns();

	for (int i = 0; i < n; i++) {
		int64_t used = cpu1[i] - cpu0[i];
		t_diag("idle worker %d: %.3f ms CPU in %.0f ms (%.3f%%)", i,
		       used / 1e6, (t1 - t0) / 1e6, 100.0 * used / (t1 - t0));
		/* cpu0 > 0: the clock reads the thread (it ran its init). */
		t_ok(cpu0[i] > 0 && used < T_IDLE_MAX * (t1 - t0),
		     "idle: worker %d uses < 1%% of a core", i);
	}
	t_diag("idle process: %.3f ms CPU in %.0f ms (%d workers, a bare "
	       "reactor, the main thread and any sanitizer helper)",
	       (ru1 - ru0) / 1e6, (t1 - t0) / 1e6, n);
	t_ok(!bare.bad, "idle: bare reactor's setup took the expected path");
	t_reactor_report("bare idle reactor", &bare.end_state, &bare.log);
	t_is(bare.ret, -ETIMEDOUT, "idle: bare adaptive wait times out");
	t_ok(bare.end >= bare.deadline,
	     "idle: bare wait returns at or after its deadline (%+.3f ms)",
	     (bare.end - bare.deadline) / 1e6);
	t_diag("idle bare reactor: %.3f ms CPU in %.0f ms (%.3f%%)",
	       bare.cpu_ns / 1e6, T_IDLE_NS / 1e6,
	       100.0 * bare.cpu_ns / T_IDLE_NS);
	t_ok(bare.cpu_ns < T_IDLE_MAX * T_IDLE_NS,
	     "idle: bare reactor uses < 1%% of a core");

	/* The context's workers: plain reactors (T_FLAGS is this test's). */
	pthread_mutex_lock(&log.mu);
	if (log.uring_lines > 0)
		t_diag("context log: %s", log.first);
#if T_FALLS_BACK && !defined(T_BADOP)
	t_is(log.uring_lines, 1,
	     "idle: the context logged the io_uring fallback exactly once");
	t_ok(strstr(log.first, T_STEP) != NULL,
	     "idle: the context's line names %s", T_STEP);
#else
	t_is(log.uring_lines, t_kernel_uring ? 0 : 1,
	     "idle: the context mentions io_uring only if it fell back, "
	     "once");
#endif
	pthread_mutex_unlock(&log.mu);
	cgr_ctx_destroy(ctx);
}

/* ---- 2. deadlines and timers ---------------------------------------- */

static void t_deadlines(struct cgr__reactor *r, const char *rname)
{
	static const int64_t ds[] = {1 * MS, 5 * MS, 20 * MS};
	static const int modes[] = {CGR_WAIT_ADAPTIVE, CGR_WAIT_BLOCK,
				    CGR_WAIT_BUSY};
	struct cgr__bell b;

	cgr__bell_init(&b);
	for (size_t k = 0; k < CGR__ARRAY_SIZE(ds); k++) {
		int64_t deadline, end;
		int ret;

		/* Park: 0 means "re-check"; nobody rings, so re-park until
		 * it says -ETIMEDOUT. */
		deadline = cgr__now_ns() + ds[k];
		ret = t_park_until(r, &b, deadline);
		end = cgr__now_ns();
		t_ok(ret == -ETIMEDOUT && end >= deadline &&
			 end < deadline + T_LATE_NS,
		     "deadline %s: park %lld ms -> %s at %+.3f ms", rname,
		     (long long)(ds[k] / MS), cgr_err_name(ret),
		     (end - deadline) / 1e6);

		for (size_t m = 0; m < CGR__ARRAY_SIZE(modes); m++) {
			deadline = cgr__now_ns() + ds[k];
			ret = cgr__reactor_wait(r, &b, t_never, NULL, NULL,
						modes[m], 50000, deadline);
			end = cgr__now_ns();
			t_ok(ret == -ETIMEDOUT && end >= deadline &&
				 end < deadline + T_LATE_NS,
			     "deadline %s: %s wait %lld ms -> %s at %+.3f ms",
			     rname, t_mode_name(modes[m]),
			     (long long)(ds[k] / MS), cgr_err_name(ret),
			     (end - deadline) / 1e6);
		}
	}
}

#define T_NTIMERS 5

struct t_timers {
	int64_t deadline[T_NTIMERS + 1];
	int64_t fired_at[T_NTIMERS + 1];
	int order[T_NTIMERS + 1];
	int nfired, nrun;
};

struct t_timer_arg {
	struct t_timers *ts;
	int i;
};

static void t_timer_fn(void *arg)
{
	struct t_timer_arg *a = arg;
	struct t_timers *ts = a->ts;

	ts->fired_at[a->i] = cgr__now_ns();
	ts->order[ts->nfired++] = a->i;
}

static bool t_timers_done(void *arg)
{
	struct t_timers *ts = arg;
	return ts->nfired >= T_NTIMERS;
}

static void t_timers(struct cgr__reactor *r, int mode)
{
	static const int64_t offs[T_NTIMERS] = {7 * MS, 2 * MS, 12 * MS, 4 * MS,
						9 * MS};
	struct t_timers ts = {.nfired = 0};
	struct t_timer_arg args[T_NTIMERS + 1];
	uint64_t ids[T_NTIMERS + 1];
	struct cgr__bell b;
	int64_t now = cgr__now_ns();
	int ret, ok = 1, inorder = 1;

	cgr__bell_init(&b);
	/* Slots in a shuffled order, so slot order is not deadline order. */
	for (int i = 0; i < T_NTIMERS; i++) {
		args[i] = (struct t_timer_arg){&ts, i};
		ts.deadline[i] = now + offs[i];
		ret = cgr__reactor_timer_add(r, ts.deadline[i], t_timer_fn,
					     &args[i], &ids[i]);
		ok &= ret == 0;
	}
	/* One more, cancelled before it is due. */
	args[T_NTIMERS] = (struct t_timer_arg){&ts, T_NTIMERS};
	ret = cgr__reactor_timer_add(r, now + 5 * MS, t_timer_fn,
				     &args[T_NTIMERS], &ids[T_NTIMERS]);
	ok &= ret == 0;
	t_ok(ok, "timers %s: add %d", t_mode_name(mode), T_NTIMERS + 1);
	t_is(cgr__reactor_next_deadline(r), now + 2 * MS,
	     "timers %s: next deadline is the earliest", t_mode_name(mode));
	t_is(cgr__reactor_timer_cancel(r, ids[T_NTIMERS]), 0,
	     "timers %s: cancel a pending timer", t_mode_name(mode));
	t_is(cgr__reactor_timer_cancel(r, ids[T_NTIMERS]), -ENOENT,
	     "timers %s: cancel it again -> -ENOENT", t_mode_name(mode));

	ret = cgr__reactor_wait(r, &b, t_timers_done, &ts, NULL, mode, 50000,
				cgr__now_ns() + 500 * MS);
	t_is(ret, 0, "timers %s: the wait loop fires them all",
	     t_mode_name(mode));
	t_is(ts.nfired, T_NTIMERS,
	     "timers %s: %d fired, the cancelled one "
	     "did not",
	     t_mode_name(mode), T_NTIMERS);
	ok = 1;
	for (int k = 0; k < ts.nfired; k++) {
		int i = ts.order[k];
		if (i == T_NTIMERS || ts.fired_at[i] < ts.deadline[i] ||
		    ts.fired_at[i] >= ts.deadline[i] + T_LATE_NS)
			ok = 0;
		if (k > 0 && ts.deadline[i] < ts.deadline[ts.order[k - 1]])
			inorder = 0;
		t_diag("timer +%lld ms fired at %+.3f ms",
		       (long long)(offs[i] / MS),
		       (ts.fired_at[i] - ts.deadline[i]) / 1e6);
	}
	t_ok(ok,
	     "timers %s: each fired at or after its deadline, less than "
	     "50 ms late",
	     t_mode_name(mode));
	t_ok(inorder, "timers %s: in deadline order", t_mode_name(mode));
	t_is(cgr__reactor_timer_cancel(r, ids[0]), -ENOENT,
	     "timers %s: cancel a fired timer -> -ENOENT", t_mode_name(mode));
	t_ok(cgr__reactor_next_deadline(r) == CGR_FOREVER,
	     "timers %s: none left", t_mode_name(mode));
}

/* Timers already due when run_timers looks fire earliest first, whatever
 * their slots; a full table says -ENOSPC. */
static void t_timers_table(struct cgr__reactor *r)
{
	struct t_timers ts = {.nfired = 0};
	struct t_timer_arg args[3];
	uint64_t id;
	int64_t now = cgr__now_ns();
	int ret = 0, n = 0;

	for (int i = 0; i < 3; i++) {
		args[i] = (struct t_timer_arg){&ts, i};
		ts.deadline[i] = now - (i + 1) * MS; /* slot 0 is the latest */
		cgr__reactor_timer_add(r, ts.deadline[i], t_timer_fn, &args[i],
				       NULL);
	}
	t_is(cgr__reactor_run_timers(r, now), 3, "timers: three due at once");
	t_ok(ts.order[0] == 2 && ts.order[1] == 1 && ts.order[2] == 0,
	     "timers: due timers fire earliest first (got %d %d %d)",
	     ts.order[0], ts.order[1], ts.order[2]);

	while ((ret = cgr__reactor_timer_add(r, now + 3600000 * MS, t_timer_fn,
					     &args[0], &id)) == 0)
		n++;
	t_is(n, CGR__REACTOR_MAX_TIMERS, "timers: the table holds %d",
	     CGR__REACTOR_MAX_TIMERS);
	t_is(ret, -ENOSPC, "timers: then -ENOSPC");
	for (uint64_t k = id - (uint64_t)n + 1; k <= id; k++)
		cgr__reactor_timer_cancel(r, k);
	t_ok(cgr__reactor_next_deadline(r) == CGR_FOREVER,
	     "timers: all cancelled");
}

/* ---- 3. wake-ups ----------------------------------------------------- */

enum { T_RING_NONE, T_RING_SPIN, T_RING_SLEEP };

/* The ringer: waits for a command, waits the command's delay, stores val
 * into *word and rings bell. */
struct t_ringer {
	_Atomic uint32_t go; /* command number; UINT32_MAX: stop */
	struct cgr__bell go_bell;
	/* The command, written before go (release) and read after it. */
	_Atomic uint32_t *word;
	uint32_t val;
	int delay;
	int64_t delay_ns;
	struct cgr__bell *bell;
	uint32_t seen;
};

static bool t_ringer_ready(void *arg)
{
	struct t_ringer *rg = arg;
	return atomic_load_explicit(&rg->go, memory_order_acquire) != rg->seen;
}

static void *t_ringer_main(void *arg)
{
	struct t_ringer *rg = arg;

	for (;;) {
		cgr__reactor_wait(NULL, &rg->go_bell, t_ringer_ready, rg, NULL,
				  CGR_WAIT_ADAPTIVE, 20000, CGR_FOREVER);
		rg->seen = atomic_load_explicit(&rg->go, memory_order_acquire);
		if (rg->seen == UINT32_MAX)
			return NULL;
		if (rg->delay == T_RING_SPIN) {
			int64_t end = cgr__now_ns() + rg->delay_ns;
			while (cgr__now_ns() < end)
				cgr__cpu_relax();
		} else if (rg->delay == T_RING_SLEEP) {
			struct timespec ts = {0, (long)rg->delay_ns};
			nanosleep(&ts, NULL);
		}
		/* Publish, then ring (the doorbell's store-buffer pairing). */
		atomic_store_explicit(rg->word, rg->val, memory_order_release);
		cgr__bell_ring(rg->bell);
	}
}

static void t_ringer_send(struct t_ringer *rg, uint32_t n)
{
	atomic_store_explicit(&rg->go, n, memory_order_release);
	cgr__bell_ring(&rg->go_bell);
}

struct t_flag {
	_Atomic uint32_t *word;
	uint32_t want;
};

static bool t_flag_ready(void *arg)
{
	struct t_flag *f = arg;
	return atomic_load_explicit(f->word, memory_order_acquire) == f->want;
}

static void t_pick_wait(int *mode, int64_t *spin)
{
	uint64_t x = t_rand();

	switch (x % 8) {
	case 0:
	case 1:
	case 2:
		*mode = CGR_WAIT_BLOCK;
		break;
	case 7:
		*mode = CGR_WAIT_BUSY;
		break;
	default:
		*mode = CGR_WAIT_ADAPTIVE;
	}
	x >>= 8;
	*spin = (x & 3) == 0 ? 0 : (int64_t)((x >> 2) % 100000);
}

static void t_pick_delay(struct t_ringer *rg)
{
	uint64_t x = t_rand();

	if ((x & 63) == 0) {
		/* Long enough that the waiter has certainly parked (the
		 * assertion does not depend on it). */
		rg->delay = T_RING_SLEEP;
		rg->delay_ns = 200000 + (int64_t)((x >> 6) % 800000);
	} else if ((x & 3) == 0) {
		rg->delay = T_RING_NONE;
	} else {
		rg->delay = T_RING_SPIN;
		rg->delay_ns = (int64_t)((x >> 6) % 60000);
	}
}

static void t_wakeups(struct cgr__reactor *r)
{
	struct t_ringer rg = {.seen = 0};
	_Atomic uint32_t flag, cancel;
	struct cgr__bell b;
	pthread_t th;
	long n = t_scale(10000), bad = 0, cancel_bad = 0;
	uint64_t parks0 = r->parks;
	uint32_t cmd = 0;
	int64_t t0, worst = 0;
	int ret;

	atomic_init(&rg.go, 0);
	cgr__bell_init(&rg.go_bell);
	cgr__bell_init(&b);
	atomic_init(&flag, 0);
	atomic_init(&cancel, 0);
	rg.bell = &b;
	ret = pthread_create(&th, NULL, t_ringer_main, &rg);
	if (ret != 0) {
		t_ok(0, "wake: start the ringer: %s", strerror(ret));
		return;
	}

	/* A parked waiter wakes promptly, long before its deadline. */
	for (int k = 0; k < 2; k++) {
		struct cgr__reactor *rr = k == 0 ? r : NULL;
		struct t_flag f = {&flag, ++cmd};
		int64_t end;

		rg.word = &flag;
		rg.val = cmd;
		rg.delay = T_RING_SLEEP;
		rg.delay_ns = 5 * MS;
		t0 = cgr__now_ns();
		t_ringer_send(&rg, cmd);
		ret = cgr__reactor_wait(rr, &b, t_flag_ready, &f, NULL,
					CGR_WAIT_BLOCK, 0, t0 + 2000 * MS);
		end = cgr__now_ns();
		t_ok(ret == 0 && end - t0 < 1000 * MS,
		     "wake %s: a parked waiter returns 0 after the ring "
		     "(%s, %.3f ms after a 5 ms delay)",
		     k == 0 ? "reactor" : "NULL", cgr_err_name(ret),
		     (end - t0) / 1e6);
	}

	/* Many rounds, random modes, spins and delays: no lost wake-up.  On
	 * a loaded machine the rounds stop after T_ROUNDS_NS. */
	t0 = cgr__now_ns();
	for (long i = 0; i < n; i++) {
		if ((i & 255) == 255 && cgr__now_ns() - t0 > T_ROUNDS_NS) {
			t_diag("wake: time is up after %ld of %ld rounds", i,
			       n);
			n = i;
			break;
		}
		struct t_flag f = {&flag, ++cmd};
		struct cgr__reactor *rr = (t_rand() & 3) == 0 ? NULL : r;
		int mode;
		int64_t spin, s;

		t_pick_wait(&mode, &spin);
		rg.word = &flag;
		rg.val = cmd;
		t_pick_delay(&rg);
		s = cgr__now_ns();
		t_ringer_send(&rg, cmd);
		ret = cgr__reactor_wait(rr, &b, t_flag_ready, &f, NULL, mode,
					spin, CGR_FOREVER);
		s = cgr__now_ns() - s;
		if (rg.delay != T_RING_SLEEP && s > worst)
			worst = s;
		if (ret != 0 || atomic_load(&flag) != cmd) {
			if (bad++ < 5)
				t_diag("round %ld: %s mode %s spin %lld: %s", i,
				       rr ? "reactor" : "NULL",
				       t_mode_name(mode), (long long)spin,
				       cgr_err_name(ret));
		}
	}
	t_is(bad, 0, "wake: %ld rounds, each returned 0 with the flag set", n);
	t_diag("wake: %ld rounds in %.0f ms, %llu parks on the reactor, "
	       "slowest round without a sleep %.3f ms",
	       n, (cgr__now_ns() - t0) / 1e6,
	       (unsigned long long)(r->parks - parks0), worst / 1e6);

	/* The cancel word: set by the other thread, then the ring. */
	for (long i = 0; i < t_scale(200); i++) {
		struct cgr__reactor *rr = (i & 1) ? NULL : r;
		int mode;
		int64_t spin;

		t_pick_wait(&mode, &spin);
		atomic_store(&cancel, 0);
		rg.word = &cancel;
		rg.val = 1;
		t_pick_delay(&rg);
		t_ringer_send(&rg, ++cmd);
		ret = cgr__reactor_wait(rr, &b, t_never, NULL, &cancel, mode,
					spin, CGR_FOREVER);
		if (ret != -ECANCELED && cancel_bad++ < 5)
			t_diag("cancel round %ld: %s", i, cgr_err_name(ret));
	}
	t_is(cancel_bad, 0,
	     "wake: a cancel word set by another thread "
	     "gives -ECANCELED");
	atomic_store(&cancel, 1);
	t_is(cgr__reactor_wait(r, &b, t_never, NULL, &cancel, CGR_WAIT_BLOCK, 0,
			       CGR_FOREVER),
	     -ECANCELED, "wake: a cancel word already set gives -ECANCELED");

	t_ringer_send(&rg, UINT32_MAX);
	pthread_join(th, NULL);
}

/* ---- 4. busy --------------------------------------------------------- */

#define T_BUSY_THREADS 6

struct t_busy {
	_Atomic uint32_t flag[T_BUSY_THREADS];
	struct cgr__bell bell[T_BUSY_THREADS];
	long rounds;
	_Atomic int bad_reactor, uring;
};

struct t_busy_arg {
	struct t_busy *bz;
	int k;
};

static bool t_busy_ready(void *arg)
{
	return atomic_load_explicit((_Atomic uint32_t *)arg,
				    memory_order_acquire) != 0;
}

static void *t_busy_main(void *arg)
{
	struct t_busy_arg *a = arg;
	struct t_busy *bz = a->bz;
	int k = a->k, next = (k + 1) % T_BUSY_THREADS;
	struct cgr__reactor r;

	cgr__reactor_init(&r, T_FLAGS);
	if (t_reactor_bad(&r))
		atomic_fetch_add(&bz->bad_reactor, 1);
	if (r.uring)
		atomic_fetch_add(&bz->uring, 1);
	for (long i = 0; i < bz->rounds; i++) {
		cgr__reactor_wait(&r, &bz->bell[k], t_busy_ready, &bz->flag[k],
				  NULL, CGR_WAIT_BUSY, 0, CGR_FOREVER);
		atomic_store_explicit(&bz->flag[k], 0, memory_order_relaxed);
		/* Hand the token on: release pairs with t_busy_ready. */
		atomic_store_explicit(&bz->flag[next], 1, memory_order_release);
		cgr__bell_ring(&bz->bell[next]);
	}
	cgr__reactor_fini(&r);
	return NULL;
}

static void t_busy(void)
{
	struct t_busy bz;
	struct t_busy_arg args[T_BUSY_THREADS];
	pthread_t th[T_BUSY_THREADS];
	int started = 0;
	int64_t t0, t;

	bz.rounds = t_scale(300);
	atomic_init(&bz.bad_reactor, 0);
	atomic_init(&bz.uring, 0);
	for (int k = 0; k < T_BUSY_THREADS; k++) {
		atomic_init(&bz.flag[k], k == 0);
		cgr__bell_init(&bz.bell[k]);
	}
	t0 = cgr__now_ns();
	for (int k = 0; k < T_BUSY_THREADS; k++) {
		args[k] = (struct t_busy_arg){&bz, k};
		if (pthread_create(&th[k], NULL, t_busy_main, &args[k]) != 0)
			break;
		started++;
	}
	if (started < T_BUSY_THREADS) {
		/* The ring cannot turn: let the started ones fail fast. */
		t_ok(0, "busy: start %d threads", T_BUSY_THREADS);
		exit(t_done());
	}
	for (int k = 0; k < T_BUSY_THREADS; k++)
		pthread_join(th[k], NULL);
	t = cgr__now_ns() - t0;
	t_diag("busy: %d threads on %ld CPUs, %ld passes in %.0f ms "
	       "(%.1f us a pass); %d reactors on io_uring",
	       T_BUSY_THREADS, sysconf(_SC_NPROCESSORS_ONLN),
	       bz.rounds * T_BUSY_THREADS, t / 1e6,
	       t / 1e3 / (bz.rounds * T_BUSY_THREADS), atomic_load(&bz.uring));
	t_ok(1, "busy: %d spinning threads completed %ld passes",
	     T_BUSY_THREADS, bz.rounds * T_BUSY_THREADS);
	t_is(atomic_load(&bz.bad_reactor), 0,
	     "busy: every thread's reactor took the expected path");
}

/* ---- 5. peer-death watch ------------------------------------------ */

static void t_gone(void *arg)
{
	atomic_fetch_add((_Atomic int *)arg, 1);
}

static bool t_flag(void *arg)
{
	return atomic_load((_Atomic int *)arg) != 0;
}

/* A child that exits at once, or waits to be killed; its pidfd in *fd
 * (-1: none). */
static pid_t t_child(int *fd, bool exit_now)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (exit_now)
			_exit(0);
		for (;;)
			pause();
	}
	*fd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	return pid;
}

struct t_killer {
	pid_t pid;
	struct cgr__bell *bell;
	_Atomic int64_t at;
};

/* Kills the child once the waiter is parked on the bell (nobody rings). */
static void *t_killer_main(void *arg)
{
	struct t_killer *k = arg;

	while (atomic_load(&k->bell->sleepers) == 0)
		sched_yield();
	atomic_store(&k->at, cgr__now_ns());
	kill(k->pid, SIGKILL);
	return NULL;
}

/* A parked reactor wakes when a watched process is killed (nobody rings
 * its bell), within 100 ms; a cancelled watch never fires; a process
 * already gone fires at once; the table holds 16.  A reactor of its own:
 * where io_uring fails at a park, it fails with the watch armed. */
static void t_watch_on(struct cgr__reactor *r);

static void t_watch(void)
{
	struct t_reactor tr;

	t_reactor_init(&tr);
	t_watch_on(&tr.r);
	t_reactor_report("watch reactor", &tr.r, &tr.log);
	cgr__reactor_fini(&tr.r);
}

static void t_watch_on(struct cgr__reactor *r)
{
	struct t_killer k = { 0 };
	struct cgr__bell bell;
	_Atomic int gone = 0, other = 0;
	pthread_t th;
	uint64_t id;
	int fd, fd2, ret, n = 0;

	cgr__bell_init(&bell);
	k.pid = t_child(&fd, false);
	k.bell = &bell;
	if (fd < 0) {
		t_diag("pidfd_open: %s", strerror(errno));
		t_skip("no pidfd_open: the watch not checked");
		if (k.pid > 0)
			kill(k.pid, SIGKILL), waitpid(k.pid, NULL, 0);
		return;
	}
	t_is(cgr__reactor_watch_add(r, fd, t_gone, (void *)&gone, &id), 0,
	     "watch a child");
	pthread_create(&th, NULL, t_killer_main, &k);
	ret = cgr__reactor_wait(r, &bell, t_flag, (void *)&gone, NULL,
				CGR_WAIT_BLOCK, 0, cgr__deadline(5000 * MS));
	int64_t ms = (cgr__now_ns() - atomic_load(&k.at)) / MS;
	pthread_join(th, NULL);
	t_ok(ret == 0 && atomic_load(&gone) == 1 && ms < 100,
	     "%s: a parked reactor saw the kill -9 after %lld ms (ret %d)",
	     T_MODE, (long long)ms, ret);
	t_is(cgr__reactor_watch_cancel(r, id), -ENOENT, "the watch fired once");
	t_is((int)waitpid(k.pid, NULL, 0), (int)k.pid, "child reaped");
	close(fd);

	/* Cancelled: the death passes unseen. */
	k.pid = t_child(&fd, false);
	cgr__reactor_watch_add(r, fd, t_gone, (void *)&other, &id);
	t_is(cgr__reactor_watch_cancel(r, id), 0, "cancel a watch");
	kill(k.pid, SIGKILL);
	waitpid(k.pid, NULL, 0);
	ret = cgr__reactor_wait(r, &bell, t_never, NULL, NULL, CGR_WAIT_BLOCK,
				0, cgr__deadline(30 * MS));
	t_ok(ret == -ETIMEDOUT && atomic_load(&other) == 0 && r->nwatches == 0,
	     "a cancelled watch never fires (%d)", ret);
	close(fd);

	/* Gone before the watch: fires at the first look. */
	k.pid = t_child(&fd, true);
	waitid(P_PID, (id_t)k.pid, NULL, WEXITED | WNOWAIT); /* a zombie */
	cgr__reactor_watch_add(r, fd, t_gone, (void *)&other, NULL);
	t_is(cgr__reactor_run_watches(r), 1, "a process already gone fires");
	t_is(atomic_load(&other), 1, "...its callback once");
	waitpid(k.pid, NULL, 0);

	/* The table. */
	fd2 = dup(fd);
	while (cgr__reactor_watch_add(r, fd2, t_gone, (void *)&other, &id) ==
	       0)
		n++;
	t_is(n, CGR__REACTOR_MAX_WATCHES, "the table holds %d watches", n);
	t_is(cgr__reactor_watch_add(r, -1, t_gone, NULL, NULL), -EINVAL,
	     "a bad fd is refused");
	t_is(cgr__reactor_run_watches(r), n, "and they all fire");
	close(fd2);
	close(fd);
}

#ifdef T_DENY_ENTER
/* io_uring_enter refused part way: the main reactor parks on io_uring and
 * has a watch's POLL_ADD outstanding when the filter comes; the cancel
 * of that watch is the first refused call.  Returns 0, or the filter's
 * error (the rest of the test is then skipped). */
static int t_enter_refused_later(struct t_reactor *tr)
{
	struct cgr__reactor *r = &tr->r;
	struct cgr__bell b;
	uint64_t id;
	int64_t deadline;
	int fd, ret;
	bool armed = false;
	pid_t pid;

	cgr__bell_init(&b);
	if (!r->uring)
		t_diag("later: no io_uring here (%s): only the filter is tested",
		       cgr_strerror(r->uring_err));
	ret = t_park_until(r, &b, cgr__now_ns() + 2 * MS);
	t_ok(ret == -ETIMEDOUT && r->uring == t_kernel_uring,
	     "later: a park before the filter (%s, %s)", cgr_err_name(ret),
	     r->uring ? "io_uring" : "futex");
	pid = t_child(&fd, false);
	if (fd < 0) {
		if (pid > 0)
			kill(pid, SIGKILL), waitpid(pid, NULL, 0);
		t_diag("pidfd_open: %s", strerror(errno));
		fd = -1;
	} else {
		cgr__reactor_watch_add(r, fd, t_gone, NULL, &id);
		t_park_until(r, &b, cgr__now_ns() + 1 * MS); /* arms it */
		for (size_t i = 0; i < CGR__REACTOR_MAX_WATCHES; i++)
			if (r->watches[i].fn != NULL && r->watches[i].id == id)
				armed = r->watches[i].armed;
		t_ok(armed == r->uring,
		     "later: the watch's POLL_ADD is outstanding");
	}

	ret = t_seccomp_deny(__NR_io_uring_enter);
	if (ret < 0) {
		if (fd >= 0)
			kill(pid, SIGKILL), waitpid(pid, NULL, 0), close(fd);
		return ret;
	}
	if (fd >= 0) {
		t_is(cgr__reactor_watch_cancel(r, id), 0,
		     "later: cancel the watch, io_uring_enter refused");
		if (t_kernel_uring)
			t_ok(!r->uring && r->uring_err == -EPERM &&
				 strstr(r->uring_where, "cancel") != NULL,
			     "later: the refused cancel gave io_uring up (%s: "
			     "%s)",
			     r->uring_where ? r->uring_where : "-",
			     cgr_err_name(r->uring_err));
	}
	deadline = cgr__now_ns() + 5 * MS;
	ret = t_park_until(r, &b, deadline);
	t_ok(ret == -ETIMEDOUT && !r->uring &&
		 cgr__now_ns() < deadline + T_LATE_NS,
	     "later: then a park times out on the futex (%s)",
	     cgr_err_name(ret));
	if (t_kernel_uring) {
		t_is(t_log_uring_lines(&tr->log), 1,
		     "later: said once (%s)", tr->log.first);
		t_ok(strstr(r->uring_where, T_STEP) != NULL,
		     "later: the failed step is %s", T_STEP);
	}
	if (fd >= 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		close(fd);
	}
	return 0;
}
#endif

/* ---- 6. adaptive waits ---------------------------------------------- */

struct t_hog {
	_Atomic int stop;
	int cpu;
	pthread_t th;
};

/* A thread that never waits, pinned on one CPU. */
static void *t_hog_main(void *arg)
{
	struct t_hog *h = arg;
	cpu_set_t set;
	volatile uint64_t n = 0;

	CPU_ZERO(&set);
	CPU_SET(h->cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	while (!atomic_load_explicit(&h->stop, memory_order_relaxed))
		n++;
	return NULL;
}

/* One round: the ringer answers after its delay; the waiter waits. */
static int t_adapt_round(struct cgr__reactor *r, struct t_ringer *rg,
			 struct cgr__bell *b, _Atomic uint32_t *flag,
			 uint32_t *cmd, int delay, int64_t delay_ns,
			 int64_t spin)
{
	struct t_flag f = {flag, ++*cmd};

	rg->word = flag;
	rg->val = *cmd;
	rg->delay = delay;
	rg->delay_ns = delay_ns;
	t_ringer_send(rg, *cmd);
	return cgr__reactor_wait(r, b, t_flag_ready, &f, NULL,
				 CGR_WAIT_ADAPTIVE, spin, CGR_FOREVER);
}

/* Quick rounds until the thread spins again and its spins pay, or 3 s;
 * whether it did. */
static bool t_adapt_recover(struct cgr__reactor *r, struct t_ringer *rg,
			    struct cgr__bell *b, _Atomic uint32_t *flag,
			    uint32_t *cmd, uint64_t *rounds)
{
	struct cgr__spin_stat *st = cgr__spin_stat();
	uint64_t paid0 = st->paid;
	int64_t end = cgr__now_ns() + 3000 * MS;

	for (*rounds = 0; cgr__now_ns() < end; ++*rounds) {
		t_adapt_round(r, rg, b, flag, cmd, T_RING_NONE, 0, 50000);
		if (!st->pressure && st->paid - paid0 >= 20)
			return true;
	}
	return false;
}

/* The pressure rules, on a record of the test's own, with made-up times
 * and run-queue waits: a loss parks for 1 ms; losses that go on double
 * the gap (at least 32x the loss) up to 1 s; four calm gaps end the
 * pressure, and after a calm spell a loss starts again at 1 ms; a loss
 * with no run-queue wait (the hypervisor's) changes nothing. */
static void t_adapt_rules(void)
{
	struct cgr__spin_stat st;
	int64_t t = 5000 * MS, gap, rd = 0;

	memset(&st, 0, sizeof(st));
	cgr__spin_lost(&st, t, 200000, rd += 200000);
	t_ok(st.pressure && st.probe_gap == CGR__PROBE_MIN_NS &&
		     cgr__spin_budget(&st, 0, t + 1, 50000) == 0,
	     "adaptive rules: a lost spin: park at once, first probe in 1 ms");
	t_ok(cgr__spin_budget(&st, 0, st.probe_at, 50000) == 50000,
	     "adaptive rules: the probe spins");
	t = st.probe_at + 10000;
	cgr__spin_lost(&st, t, 3 * MS, rd += 3 * MS);
	t_ok(st.pressure && st.probe_gap == 96 * MS &&
		     st.probe_at == t + 96 * MS,
	     "adaptive rules: the probe lost 3 ms: the gap is 32x that "
	     "(%lld ns)",
	     (long long)st.probe_gap);
	gap = st.probe_gap;
	st.pressure = false; /* a probe that seemed calm, then */
	t = st.probe_at + 5 * MS;
	cgr__spin_lost(&st, t, 150000, rd += 150000);
	t_ok(st.pressure && st.probe_gap == 2 * gap,
	     "adaptive rules: a loss soon after the probe doubles the gap");
	for (int k = 0; k < 20; k++) {
		t = st.probe_at;
		cgr__spin_lost(&st, t, 150000, rd += 150000);
	}
	t_ok(st.probe_gap == CGR__PROBE_MAX_NS,
	     "adaptive rules: losses going on: the gap stops at 1 s");
	t = st.probe_at + 4 * st.probe_gap + 1;
	t_ok(cgr__spin_budget(&st, 0, t, 50000) == 50000 && !st.pressure,
	     "adaptive rules: four gaps without a loss end the pressure");
	t += 1000 * MS + 4 * st.probe_gap;
	cgr__spin_lost(&st, t, 150000, rd += 150000);
	t_ok(st.pressure && st.probe_gap == CGR__PROBE_MIN_NS,
	     "adaptive rules: after a calm spell a loss parks 1 ms again");
	/* Losses with no run-queue wait: a vCPU the hypervisor took. */
	t = st.probe_at + 4 * st.probe_gap + 1;
	cgr__spin_budget(&st, 0, t, 50000);
	for (int k = 0; k < 5; k++) {
		t += 2 * MS;
		cgr__spin_lost(&st, t, 500000, rd + 1000);
	}
	t_ok(!st.pressure && st.stolen == 5 && st.probe_gap == CGR__PROBE_MIN_NS &&
		     cgr__spin_budget(&st, 0, t + 1, 50000) == 50000,
	     "adaptive rules: losses with no run-queue wait are the "
	     "hypervisor's: no pressure (%llu stolen)",
	     (unsigned long long)st.stolen);
	cgr__spin_lost(&st, t + 1, 500000, -1);
	t_ok(st.pressure,
	     "adaptive rules: where the system does not say, a loss counts");
}

/* On a thread of its own: what adaptive waits learn is the thread's. */
static void *t_adaptive_main(void *arg)
{
	struct t_reactor tr;
	struct cgr__reactor *r = &tr.r;
	struct cgr__spin_stat *st = cgr__spin_stat();
	struct t_ringer rg = {.seen = 0};
	struct t_hog hogs[2];
	_Atomic uint32_t flag;
	struct cgr__bell b;
	cpu_set_t mask, one;
	pthread_t th;
	uint32_t cmd = 0;
	uint64_t pe0, steals0, rounds;
	int cpus[2], ncpu = 0, ret;
	bool ok;

	(void)arg;
	t_reactor_init(&tr);

	atomic_init(&rg.go, 0);
	cgr__bell_init(&rg.go_bell);
	cgr__bell_init(&b);
	atomic_init(&flag, 0);
	rg.bell = &b;
	ret = pthread_create(&th, NULL, t_ringer_main, &rg);
	if (ret != 0) {
		t_ok(0, "adaptive: start the ringer: %s", strerror(ret));
		cgr__reactor_fini(r);
		return NULL;
	}

	/* Misses: nobody answers within 1 ms. */
	pe0 = (st->parked_pressure + st->parked_miss);
	for (int k = 0; k < 60; k++) {
		struct t_flag never = {&flag, UINT32_MAX};
		cgr__reactor_wait(r, &b, t_flag_ready, &never, NULL,
				  CGR_WAIT_ADAPTIVE, 50000,
				  cgr__now_ns() + 1 * MS);
	}
	t_ok((st->parked_pressure + st->parked_miss) - pe0 >= 30,
	     "adaptive: a waiter whose spins never pay parks at once (%llu "
	     "of 60 waits)",
	     (unsigned long long)((st->parked_pressure + st->parked_miss) - pe0));

	/* The same waiter (bell and condition), answered at once. */
	steals0 = st->steals;
	ok = t_adapt_recover(r, &rg, &b, &flag, &cmd, &rounds);
	t_diag("adaptive: spins pay again after %llu quick rounds (%s); "
	       "%llu spins lost their CPU meanwhile",
	       (unsigned long long)rounds, ok ? "yes" : "no",
	       (unsigned long long)(st->steals - steals0));
	/* Only spins that keep losing the CPU (a loaded machine) excuse. */
	if (!ok && st->steals > steals0)
		t_skip("adaptive: the machine is loaded: spins lose the CPU");
	else
		t_ok(ok, "adaptive: answered at once, the waiter spins again "
			 "and its spins pay");

	/* CPU pressure: two busy threads on this thread's core. */
	if (sched_getaffinity(0, sizeof(mask), &mask) == 0)
		for (int c = 0; c < CPU_SETSIZE && ncpu < 2; c++)
			if (CPU_ISSET(c, &mask))
				cpus[ncpu++] = c;
	if (ncpu < 2) {
		t_skip("adaptive: pressure needs two CPUs");
		goto out;
	}
	if (st->pressure) {
		t_skip("adaptive: the machine is loaded: already under "
		       "pressure");
		goto out;
	}
	CPU_ZERO(&one);
	CPU_SET(cpus[0], &one);
	sched_setaffinity(0, sizeof(one), &one);
	CPU_ZERO(&one);
	CPU_SET(cpus[1], &one);
	pthread_setaffinity_np(th, sizeof(one), &one);
	for (int k = 0; k < 2; k++) {
		atomic_init(&hogs[k].stop, 0);
		hogs[k].cpu = cpus[0];
		pthread_create(&hogs[k].th, NULL, t_hog_main, &hogs[k]);
	}
	/* Answers after 5 ms, spins of up to 20 ms: a spin shares its core
	 * with the busy threads long enough to lose it (how soon depends on
	 * the scheduler: a thread that slept may run a while first). */
	steals0 = st->steals;
	for (rounds = 0; rounds < 30 && st->steals == steals0; rounds++)
		t_adapt_round(r, &rg, &b, &flag, &cmd, T_RING_SLEEP, 5 * MS,
			      20 * MS);
	t_ok(st->pressure && st->steals > steals0,
	     "adaptive: a spin that loses the CPU to busy threads on its "
	     "core is seen, and is pressure (after %llu rounds)",
	     (unsigned long long)rounds);
	/* Then waits park at once (until a probe, 1 ms on). The answer
	 * comes 2 ms after the ask, so that there is a wait (an answer at
	 * once may be there before a thread that shares its core with the
	 * busy ones looks); up to 20 rounds, until one parked. */
	pe0 = (st->parked_pressure + st->parked_miss);
	for (rounds = 0;
	     rounds < 20 && st->parked_pressure + st->parked_miss == pe0;
	     rounds++)
		t_adapt_round(r, &rg, &b, &flag, &cmd, T_RING_SLEEP, 2 * MS,
			      20 * MS);
	for (int k = 0; k < 2; k++) {
		atomic_store(&hogs[k].stop, 1);
		pthread_join(hogs[k].th, NULL);
	}
	sched_setaffinity(0, sizeof(mask), &mask);
	t_ok((st->parked_pressure + st->parked_miss) - pe0 >= 1,
	     "adaptive: then the thread's waits park at once (%llu in %llu "
	     "rounds)",
	     (unsigned long long)((st->parked_pressure + st->parked_miss) - pe0),
	     (unsigned long long)rounds);

	/* The busy threads gone: spins again. */
	steals0 = st->steals;
	ok = t_adapt_recover(r, &rg, &b, &flag, &cmd, &rounds);
	t_diag("adaptive: pressure over after %llu quick rounds (%s); %llu "
	       "spins lost their CPU meanwhile",
	       (unsigned long long)rounds, ok ? "yes" : "no",
	       (unsigned long long)(st->steals - steals0));
	if (!ok && st->steals > steals0)
		t_skip("adaptive: the machine is loaded: pressure is real");
	else
		t_ok(ok, "adaptive: the busy threads gone, the thread spins "
			 "again and its spins pay");
out:
	t_diag("adaptive: this thread: %llu spins, %llu paid, %llu parked at "
	       "once (pressure), %llu (misses), %llu probes, %llu spins lost "
	       "the CPU",
	       (unsigned long long)st->spun, (unsigned long long)st->paid,
	       (unsigned long long)st->parked_pressure,
	       (unsigned long long)st->parked_miss,
	       (unsigned long long)st->probes, (unsigned long long)st->steals);
	t_ringer_send(&rg, UINT32_MAX);
	pthread_join(th, NULL);
	cgr__reactor_fini(r);
	return NULL;
}

static void t_adaptive(void)
{
	pthread_t th;
	int ret = pthread_create(&th, NULL, t_adaptive_main, NULL);

	if (ret != 0) {
		t_ok(0, "adaptive: start its thread: %s", strerror(ret));
		return;
	}
	pthread_join(th, NULL);
}

/* What a wait tells the functions it calls (remote/link.c relies on
 * it): the phase, the reactor it parks on, and the unpark call, once. */
struct t_phase {
	struct cgr__reactor *r;
	unsigned seen; /* 1 << phase, from ready */
	unsigned parking_ok, parking_bad, unparks, in_wait_unparks;
	bool in_wait;
};

static void t_unparked(void *arg)
{
	struct t_phase *ph = arg;

	ph->unparks++;
	ph->in_wait_unparks += ph->in_wait;
}

static bool t_phase_ready(void *arg)
{
	struct t_phase *ph = arg;

	ph->seen |= 1u << cgr__reactor_phase();
	return false;
}

static bool t_phase_poll(void *arg)
{
	struct t_phase *ph = arg;

	if (cgr__reactor_phase() == CGR__PHASE_PARK) {
		if (cgr__reactor_parking() == ph->r)
			ph->parking_ok++;
		else
			ph->parking_bad++;
		cgr__reactor_on_unpark(t_unparked, ph);
	} else if (cgr__reactor_parking() != NULL) {
		ph->parking_bad++;
	}
	return false;
}

static void t_phases(struct cgr__reactor *r)
{
	struct cgr__bell b;

	cgr__bell_init(&b);
	for (int m = 0; m < 2; m++) {
		struct t_phase ph = { .r = r };
		bool block = m == 0, shape;
		int ret;
		r->poll = t_phase_poll;
		r->poll_arg = &ph;
		ph.in_wait = true;
		ret = cgr__reactor_wait(r, &b, t_phase_ready, &ph, NULL,
					block ? CGR_WAIT_BLOCK : CGR_WAIT_BUSY,
					200000, cgr__now_ns() + 3000000);
		ph.in_wait = false;
		r->poll = NULL;
		r->poll_arg = NULL;
		/* Block: no spin (its first polls are none), a park, the
		 * unpark call once.  Busy: a spin, never a park. */
		shape = (ph.seen & (1u << CGR__PHASE_NONE)) &&
			!(ph.seen & (1u << CGR__PHASE_SPIN)) == block &&
			!(ph.seen & (1u << CGR__PHASE_PARK)) == !block &&
			(block ? ph.parking_ok > 0 && ph.unparks == 1 &&
					 ph.in_wait_unparks == 1 :
				 ph.parking_ok == 0 && ph.unparks == 0);
		t_ok(ret == -ETIMEDOUT && shape && ph.parking_bad == 0 &&
			     cgr__reactor_phase() == CGR__PHASE_NONE &&
			     cgr__reactor_parking() == NULL,
		     "phases (%s): what ready and the poll see (%#x), the "
		     "reactor in the park (%u, %u wrong), the unpark call "
		     "once as the park ends (%u)",
		     block ? "block: then park" : "busy: spin, no park",
		     ph.seen, ph.parking_ok, ph.parking_bad, ph.unparks);
	}
}

int main(int argc, char **argv)
{
	struct t_reactor tr;
	struct cgr__reactor *r = &tr.r;
	int ret;

	/* The kernel's answer, before any filter (no thread is made). */
	cgr__reactor_init(r, 0);
	t_kernel_uring = r->uring;
	cgr__reactor_fini(r);
#if T_FALLS_BACK && !defined(T_FORCE_FALLBACK)
	/* Refused part way needs a ring that works to begin with. */
	if (!t_kernel_uring) {
		printf("1..0 # SKIP no io_uring FUTEX_WAIT here (%s: %s)\n",
		       r->uring_where, strerror(-r->uring_err));
		return 0;
	}
#endif
#ifdef T_DENY_NR
	/* Before any thread: the filter must cover every one. */
	ret = t_seccomp_deny(T_DENY_NR);
	if (ret < 0) {
		printf("1..0 # SKIP cannot refuse %s with seccomp: %s\n",
		       T_STEP, strerror(-ret));
		return 0;
	}
#endif
	t_init(argc, argv, 90);
	t_diag("mode: %s", T_MODE);

	t_reactor_init(&tr);
	t_ok(!t_reactor_bad(r), "main reactor: its setup took the expected "
				"path");
#ifdef T_DENY_ENTER
	ret = t_enter_refused_later(&tr);
	if (ret < 0) {
		t_skip("cannot refuse io_uring_enter with seccomp");
		t_diag("seccomp: %s", strerror(-ret));
		cgr__reactor_fini(r);
		return t_done();
	}
#endif
	(void)ret;

	t_idle();
	t_deadlines(r, "reactor");
	t_reactor_report("main reactor", r, &tr.log);
	t_deadlines(NULL, "NULL");
	t_timers(r, CGR_WAIT_BLOCK);
	t_timers(r, CGR_WAIT_ADAPTIVE);
	t_timers(r, CGR_WAIT_BUSY);
	t_timers_table(r);
	t_wakeups(r);
	t_busy();
	t_watch();
	t_phases(r);
	t_adapt_rules();
	t_adaptive();
	t_reactor_report("main reactor at the end", r, &tr.log);

	cgr__reactor_fini(r);
	return t_done();
}
