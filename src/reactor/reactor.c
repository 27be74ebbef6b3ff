/*
 * reactor/reactor.c: spin-then-park waiting on doorbells, io_uring futex
 * waits with the futex system call as fallback, and a small timer table.
 *
 * Debian's liburing 2.3 has no futex helpers, so the FUTEX_WAIT request is
 * filled by hand (opcode 51 since Linux 6.7).  Waking is always the futex
 * system call, which io_uring futex waiters observe like any other waiter.
 *
 * io_uring is given up at its first failure, whatever the step
 * (uring_give_up): a container may allow io_uring_setup and refuse
 * io_uring_enter, and a park that kept asking a refused ring would return
 * at once, every time, and spin.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <stdio.h>
#include <fcntl.h>
#include <unistd.h>

#include "reactor/reactor.h"

#ifndef IORING_OP_FUTEX_WAIT
#define IORING_OP_FUTEX_WAIT 51
#endif
#define CGR__FUTEX2_SIZE_U32 0x02u
#define CGR__UD_FUTEX 1u
#define CGR__UD_TIMEOUT 2u
#define CGR__UD_CANCEL 3u	       /* an async cancel's own completion */
#define CGR__UD_WATCH (1ull << 62) /* | a watch's id: its POLL_ADD */
/* The futex fallback's longest park while a watch is set. */
#define CGR__WATCH_SLICE_NS 10000000
/* An opcode no kernel knows (CGR__REACTOR_TEST_BADOP). */
#define CGR__BAD_OPCODE 0xffu
/* cgr__uring_park: io_uring was given up, park on the futex instead. */
#define CGR__GAVE_UP 1

/* liburing maps and unmaps a ring with raw system calls, which
 * ThreadSanitizer does not see: a ring one thread unmapped may come back
 * at the same address for another thread's ring, whose writes would look
 * like a race with the first thread's.  In TSan builds every set-up is
 * ordered after every earlier tear-down. */
#if defined(__SANITIZE_THREAD__)
static char cgr__ring_recycle;
#define ring_unmapped() __tsan_release(&cgr__ring_recycle)
#define ring_mapped() __tsan_acquire(&cgr__ring_recycle)
#else
#define ring_unmapped() ((void)0)
#define ring_mapped() ((void)0)
#endif

/* 0 if the ring supports IORING_OP_FUTEX_WAIT, else -EOPNOTSUPP, or the
 * error of io_uring_register (a seccomp profile may refuse it).  The
 * probe lives on the stack: liburing's io_uring_get_probe_ring mallocs. */
static int cgr__uring_probe_futex(struct io_uring *ring)
{
	union {
		struct io_uring_probe p;
		char buf[sizeof(struct io_uring_probe) +
			 256 * sizeof(struct io_uring_probe_op)];
	} u;
	int ret;

	memset(&u, 0, sizeof(u));
	ret = io_uring_register_probe(ring, &u.p, 256);
	if (ret < 0)
		return ret;
	if (u.p.last_op < IORING_OP_FUTEX_WAIT ||
	    !(u.p.ops[IORING_OP_FUTEX_WAIT].flags & IO_URING_OP_SUPPORTED))
		return -EOPNOTSUPP;
	return 0;
}

/* Says, once per *r->log_once, that reactors park on futexes. */
static void say_fallback(struct cgr__reactor *r)
{
	atomic_bool *once = r->log_once != NULL ? r->log_once : &r->logged;

	if (r->log == NULL || atomic_exchange(once, true))
		return;
	if (r->uring_off) { /* the caller's choice, not a failure */
		cgr__info(r->log, "io_uring turned off (CGR_CTX_NO_IO_URING): "
				  "reactors park with futex system calls");
		return;
	}
	cgr__warn(r->log,
		  "io_uring unavailable (%s: %s): reactors park with futex "
		  "system calls",
		  r->uring_where != NULL ? r->uring_where : "io_uring",
		  cgr_strerror(r->uring_err));
}

void cgr__reactor_set_log(struct cgr__reactor *r, const struct cgr__logger *lg,
			  atomic_bool *once)
{
	r->log = lg;
	r->log_once = once;
	if (!r->uring)
		say_fallback(r);
}

/* Gives io_uring up for good, after err at step where: the ring is closed
 * (which cancels whatever it still holds), no watch is armed on it any
 * more, and every park from now on is a futex wait. */
static void uring_give_up(struct cgr__reactor *r, int err, const char *where)
{
	if (!r->uring)
		return;
	ring_unmapped();
	io_uring_queue_exit(&r->ring);
	r->uring = false;
	r->uring_err = err < 0 ? err : -EIO;
	r->uring_where = where;
	for (size_t i = 0; i < CGR__REACTOR_MAX_WATCHES; i++)
		r->watches[i].armed = false;
	say_fallback(r);
}

void cgr__reactor_init(struct cgr__reactor *r, unsigned flags)
{
	struct io_uring_params p;
	int ret;

	memset(r, 0, sizeof(*r));
	atomic_init(&r->logged, false);
	r->next_timer_id = 1;
	r->next_watch_id = 1;
	if (flags & CGR__REACTOR_NO_URING) {
		r->uring_err = -EPERM;
		r->uring_where = "turned off";
		r->uring_off = true;
		return;
	}
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	/* A park's futex wait and timeout, a POLL_ADD per watch, cancels. */
	ret = io_uring_queue_init_params(32, &r->ring, &p);
	if (ret == -EINVAL) {
		memset(&p, 0, sizeof(p));
		ret = io_uring_queue_init_params(32, &r->ring, &p);
	}
	if (ret < 0) {
		r->uring_err = ret;
		r->uring_where = "io_uring_setup";
		return;
	}
	ring_mapped();
	r->uring = true;
	if (flags & CGR__REACTOR_TEST_BADOP) {
		r->test_badop = true;
		return;
	}
	/* Kernels before 6.7 set up rings but fail every FUTEX_WAIT request
	 * with -EINVAL.  Ask the ring which opcodes it knows (a failed
	 * request would give the ring up too, one park later). */
	ret = cgr__uring_probe_futex(&r->ring);
	if (ret < 0)
		uring_give_up(r, ret,
			      ret == -EOPNOTSUPP ? "no IORING_OP_FUTEX_WAIT" :
						   "io_uring_register");
}

void cgr__reactor_fini(struct cgr__reactor *r)
{
	if (r->uring) {
		ring_unmapped();
		io_uring_queue_exit(&r->ring);
	}
	r->uring = false;
}

/* Makes room for n submission entries (what is queued is submitted
 * first); false once io_uring was given up. */
static bool uring_room(struct cgr__reactor *r, unsigned n)
{
	int ret;

	if (io_uring_sq_space_left(&r->ring) >= n)
		return true;
	ret = io_uring_submit(&r->ring);
	if (ret < 0) {
		uring_give_up(r, ret, "io_uring_enter (submit)");
		return false;
	}
	if (io_uring_sq_space_left(&r->ring) < n) {
		uring_give_up(r, -EBUSY, "io_uring submission queue");
		return false;
	}
	return true;
}

static void cgr__prep_futex_wait(struct cgr__reactor *r,
				 struct io_uring_sqe *sqe,
				 _Atomic uint32_t *addr, uint32_t val)
{
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = r->test_badop ? CGR__BAD_OPCODE : IORING_OP_FUTEX_WAIT;
	sqe->fd = (int)CGR__FUTEX2_SIZE_U32; /* shared futex: may be in shm */
	sqe->addr = (uint64_t)(uintptr_t)addr;
	sqe->off = val;			  /* addr2: the expected value */
	sqe->addr3 = 0xffffffffu;	  /* FUTEX_BITSET_MATCH_ANY */
	sqe->user_data = CGR__UD_FUTEX;
}

static struct cgr__watch *watch_of(struct cgr__reactor *r, uint64_t id)
{
	for (size_t i = 0; i < CGR__REACTOR_MAX_WATCHES; i++)
		if (r->watches[i].fn != NULL && r->watches[i].id == id)
			return &r->watches[i];
	return NULL;
}

/* A POLL_ADD on every watched pidfd that has none outstanding (a park
 * then wakes when the process exits). */
static void arm_watches(struct cgr__reactor *r)
{
	for (size_t i = 0; r->nwatches > 0 && i < CGR__REACTOR_MAX_WATCHES;
	     i++) {
		struct cgr__watch *w = &r->watches[i];
		struct io_uring_sqe *sqe;
		if (w->fn == NULL || w->armed || w->fired)
			continue;
		if (!uring_room(r, 1))
			return;
		sqe = io_uring_get_sqe(&r->ring);
		io_uring_prep_poll_add(sqe, w->fd, POLLIN);
		sqe->user_data = CGR__UD_WATCH | w->id;
		w->armed = true;
	}
}

/* A completion that is not the park's own: a watch's POLL_ADD (its
 * process exited, or it was cancelled), or a cancel's.  Returns whether
 * a watch fired. */
static bool other_cqe(struct cgr__reactor *r, uint64_t ud, int res)
{
	struct cgr__watch *w;

	if (!(ud & CGR__UD_WATCH))
		return false;
	w = watch_of(r, ud & ~CGR__UD_WATCH);
	if (w == NULL)
		return false; /* cancelled, or fired through poll(2) */
	w->armed = false;
	if (res != -ECANCELED)
		w->fired = true; /* exited (or the pidfd is bad: say so) */
	return w->fired;
}

/* Cancels the request with user_data ud (its completion comes later). */
static void cancel_sqe(struct cgr__reactor *r, uint64_t ud)
{
	struct io_uring_sqe *sqe;
	int ret;

	if (!uring_room(r, 1))
		return;
	sqe = io_uring_get_sqe(&r->ring);
	io_uring_prep_cancel64(sqe, ud, 0);
	sqe->user_data = CGR__UD_CANCEL;
	ret = io_uring_submit(&r->ring);
	if (ret < 0)
		uring_give_up(r, ret, "io_uring_enter (cancel)");
}

/* Whether a completion's result is one its request may give: anything
 * else (-EINVAL, -EOPNOTSUPP: an opcode or flag the kernel does not
 * know) gives io_uring up. */
static bool cqe_expected(uint64_t ud, int res)
{
	if (res >= 0 || res == -ECANCELED)
		return true;
	if (ud == CGR__UD_FUTEX) /* the value changed; a signal */
		return res == -EAGAIN || res == -EINTR || res == -ETIME;
	if (ud == CGR__UD_TIMEOUT) /* fired (and how its cancel went) */
		return res == -ETIME || res == -ENOENT || res == -EALREADY;
	if (ud == CGR__UD_CANCEL)
		return res == -ENOENT || res == -EALREADY;
	return true; /* a watch's POLL_ADD: an error says the pidfd is bad */
}

/* The futex wait's result: 0 woken, or -ETIMEDOUT. */
static int futex_res(int res)
{
	/* -EAGAIN: the value changed; -ECANCELED: the linked timeout fired
	 * (or a watch cancelled it: the caller re-checks the clock). */
	if (res == -ECANCELED || res == -ETIME)
		return -ETIMEDOUT;
	return 0;
}

/* Parks on io_uring: 0 (woken, or re-check) or -ETIMEDOUT; CGR__GAVE_UP
 * after a failure gave io_uring up (the caller parks on the futex). */
static int cgr__uring_park(struct cgr__reactor *r, _Atomic uint32_t *addr,
			   uint32_t val, int64_t deadline)
{
	struct __kernel_timespec ts;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	unsigned want = 1, got = 0;
	bool cancelled = false;
	int res = 0, ret;

	arm_watches(r);
	/* Room for the wait and its timeout: a link must not be split. */
	if (!r->uring || !uring_room(r, 2))
		return CGR__GAVE_UP;
	sqe = io_uring_get_sqe(&r->ring);
	cgr__prep_futex_wait(r, sqe, addr, val);
	if (deadline != CGR_FOREVER) {
		sqe->flags |= IOSQE_IO_LINK;
		sqe = io_uring_get_sqe(&r->ring);
		ts.tv_sec = deadline / 1000000000;
		ts.tv_nsec = deadline % 1000000000;
		io_uring_prep_link_timeout(sqe, &ts, IORING_TIMEOUT_ABS);
		sqe->user_data = CGR__UD_TIMEOUT;
		want = 2;
	}
	/* -EINTR: nothing was submitted (a submit is not interrupted). */
	do
		ret = io_uring_submit_and_wait(&r->ring, 1);
	while (ret == -EINTR);
	if (ret < 0) {
		uring_give_up(r, ret, "io_uring_enter (park)");
		return CGR__GAVE_UP;
	}
	/* Reap the futex wait and its linked timeout; a watch that fires
	 * meanwhile cancels the wait. */
	while (got < want) {
		uint64_t ud;
		int cres;

		ret = io_uring_wait_cqe(&r->ring, &cqe);
		if (ret == -EINTR)
			continue;
		if (ret < 0) {
			uring_give_up(r, ret, "io_uring_enter (wait)");
			return CGR__GAVE_UP;
		}
		ud = cqe->user_data;
		cres = cqe->res;
		io_uring_cqe_seen(&r->ring, cqe);
		if (!cqe_expected(ud, cres)) {
			uring_give_up(r, cres,
				      ud == CGR__UD_FUTEX ? "FUTEX_WAIT request"
				      : ud == CGR__UD_TIMEOUT ?
							    "LINK_TIMEOUT request"
							    : "ASYNC_CANCEL request");
			return CGR__GAVE_UP;
		}
		if (ud == CGR__UD_FUTEX)
			res = futex_res(cres);
		if (ud == CGR__UD_FUTEX || ud == CGR__UD_TIMEOUT)
			got++;
		else if (other_cqe(r, ud, cres) && !cancelled) {
			cancelled = true;
			cancel_sqe(r, CGR__UD_FUTEX);
			if (!r->uring)
				return CGR__GAVE_UP;
		}
	}
	if (res == -ETIMEDOUT && cgr__now_ns() < deadline)
		res = 0; /* cancelled early for another reason: re-check */
	return res;
}

/* The futex system call's park, in slices while a watch is set (no pidfd
 * wakes a futex). */
static int futex_park(struct cgr__reactor *r, struct cgr__bell *b, uint32_t seq,
		      int64_t t)
{
	int64_t until = t;
	int ret;

	if (r != NULL && r->nwatches > 0) {
		int64_t s = cgr__now_ns() + CGR__WATCH_SLICE_NS;
		if (s < until)
			until = s;
	}
	ret = cgr__futex_wait(&b->seq, seq, until);
	if (ret == -ETIMEDOUT && until < t)
		ret = 0; /* the slice, not t */
	return ret;
}

int cgr__reactor_park(struct cgr__reactor *r, struct cgr__bell *b, uint32_t seq,
		      int64_t deadline)
{
	int64_t t = deadline;
	int ret;

	if (r != NULL) {
		int64_t nt = cgr__reactor_next_deadline(r);
		if (nt < t)
			t = nt;
		r->parks++;
	}
	if (t != CGR_FOREVER && cgr__now_ns() >= t) {
		ret = -ETIMEDOUT;
	} else {
		ret = CGR__GAVE_UP;
		if (r != NULL && r->uring)
			ret = cgr__uring_park(r, &b->seq, seq, t);
		if (ret == CGR__GAVE_UP)
			ret = futex_park(r, b, seq, t);
	}
	if (r != NULL)
		cgr__reactor_run_timers(r, cgr__now_ns());
	if (r != NULL && r->nwatches > 0)
		cgr__reactor_run_watches(r);
	if (ret == -ETIMEDOUT && t < deadline)
		ret = 0; /* a timer's deadline, not the caller's */
	if (ret == -EINTR)
		ret = 0;
	return ret;
}

/* ---- adaptive spinning -------------------------------------------- */

/* The thread's record.  Touched only by adaptive waits that were not
 * ready at once; never allocated (a thread's TLS block holds it). */
static _Thread_local struct cgr__spin_stat cgr__spin_tls;

struct cgr__spin_stat *cgr__spin_stat(void)
{
	return &cgr__spin_tls;
}

/* The waiter's slot: a hash of its bell and its condition. */
static unsigned spin_slot(const struct cgr__bell *b, cgr__ready_fn ready)
{
	uint64_t h = (uint64_t)(uintptr_t)b ^
		     ((uint64_t)(uintptr_t)ready << 17);

	h *= 0x9e3779b97f4a7c15ull;
	return (unsigned)(h >> 61) & (CGR__SPIN_SLOTS - 1);
}

/* Whether st's pressure still holds at now: until four gaps after the
 * probe, a loss continues it. */
static bool spin_pressed(const struct cgr__spin_stat *st, int64_t now)
{
	return st->pressure && now - st->probe_at <= 4 * st->probe_gap;
}

/* An adaptive wait's spin: spin_ns, or 0 (park at once) under CPU
 * pressure or for a waiter whose spins keep missing; a probe spins in
 * full now and then to see whether that still holds. */
int64_t cgr__spin_budget(struct cgr__spin_stat *st, unsigned slot,
			 int64_t now, int64_t spin_ns)
{
	if (st->pressure && now < st->probe_at) {
		st->parked_pressure++;
		return 0;
	}
	if (st->pressure && !spin_pressed(st, now))
		st->pressure = false; /* four gaps without a loss */
	if (st->pressure) {
		st->probes++;
	} else if (st->miss[slot] >= CGR__MISS_PARK) {
		if (++st->skipped[slot] < CGR__MISS_PROBE) {
			st->parked_miss++;
			return 0;
		}
		st->skipped[slot] = 0;
		st->probes++;
	}
	st->spun++;
	return spin_ns;
}

/* How long (ns) the calling thread has waited on a run queue in all
 * (/proc/thread-self/schedstat), or -1 if this system does not say. */
int64_t cgr__run_delay(void)
{
	char buf[96];
	long long exec = 0, delay = -1;
	int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	if (sscanf(buf, "%lld %lld", &exec, &delay) != 2 || delay < 0)
		return -1;
	return delay;
}

/*
 * A spin lost the thread's CPU for lost_ns, seen at now: pressure, and a
 * probe after probe_gap.  A loss while the pressure lasts (a probe's, or
 * one soon after a probe ended it: a thread that slept a while may yield
 * and get its CPU back at once, the scheduler owing it time, and still
 * share the core) or within a second and four gaps of the last doubles
 * the gap, up to 1 s, and makes it at least 32 times the loss: a probe
 * that loses the CPU again costs at most a thirty-second of the time.
 * The first loss after a calm spell waits 1 ms: a passing burst of other
 * work costs little.
 *
 * A loss counts only if the thread waited on a run queue meanwhile (rd,
 * its run-queue wait in all, grew by half the loss or more since the last
 * loss): a vCPU the hypervisor took away has no run queue in this system,
 * and parking would give nobody the CPU, so such a loss is counted
 * (stolen) and changes nothing.  Where the system does not say (rd < 0),
 * every loss counts.
 */
void cgr__spin_lost(struct cgr__spin_stat *st, int64_t now, int64_t lost_ns,
		    int64_t rd)
{
	bool queued = rd < 0 || st->run_delay <= 0 ||
		      rd - st->run_delay >= lost_ns / 2;

	st->steals++;
	st->lost_ns += (uint64_t)lost_ns;
	st->run_delay = rd >= 0 ? rd : -1;
	if (!queued) {
		st->stolen++;
		return;
	}
	if (st->pressure ||
	    (st->stolen_at != 0 &&
	     now - st->stolen_at <= 1000000000 + 4 * st->probe_gap)) {
		if (st->probe_gap < CGR__PROBE_MAX_NS)
			st->probe_gap *= 2;
		if (st->probe_gap < 32 * lost_ns)
			st->probe_gap = 32 * lost_ns;
		if (st->probe_gap > CGR__PROBE_MAX_NS)
			st->probe_gap = CGR__PROBE_MAX_NS;
	} else {
		st->probe_gap = CGR__PROBE_MIN_NS;
	}
	st->stolen_at = now;
	st->pressure = true;
	st->probe_at = now + st->probe_gap;
}

/* A spin of budget > 0 ended, ready (paid) or not, its CPU kept.  calm: it
 * yielded and got the CPU back at once, so nothing else wanted it: the
 * pressure is over.  A spin too short to yield says nothing about
 * pressure (the next wait probes again).  Without pressure the waiter
 * learns whether its spins pay. */
static void spin_done(struct cgr__spin_stat *st, unsigned slot, bool paid,
		      bool calm)
{
	if (calm)
		st->pressure = false;
	if (st->pressure)
		return;
	if (paid) {
		st->paid++;
		st->miss[slot] = st->miss[slot] > 4 ? st->miss[slot] - 4 : 0;
	} else if (st->miss[slot] < CGR__MISS_MAX) {
		st->miss[slot]++;
	}
}

static inline bool cgr__cancelled(const _Atomic uint32_t *cancel)
{
	return cancel != NULL &&
	       atomic_load_explicit(cancel, memory_order_acquire) != 0;
}

/* The spin phase: 1 ready, 0 spun out (park now), or -ECANCELED,
 * -ETIMEDOUT.  *lost: the longest gap between two looks at the clock
 * (more than CGR__STEAL_NS: the thread lost its CPU); *looks: how many
 * there were (from two on, a yield came between). */
static int spin_phase(struct cgr__reactor *r, cgr__ready_fn ready, void *arg,
		      const _Atomic uint32_t *cancel, int mode,
		      int64_t spin_end, int64_t deadline, int64_t now,
		      int64_t *lost, unsigned *looks)
{
	int64_t last = now;
	unsigned i = 0;

	/* Every 64 polls (a few microseconds) the thread reads the clock
	 * and yields: when spinners outnumber cores, the thread we wait for
	 * may need this core, and a yield with nothing else to run costs
	 * well under a microsecond.  The first 64 polls never yield, so a
	 * prompt answer is seen at spin speed.  The reactor's poll comes
	 * with the yield, or every fourth look if it polls a network
	 * (poll_often). */
	for (;;) {
		if (ready(arg))
			return 1;
		if (cgr__cancelled(cancel))
			return -ECANCELED;
		cgr__cpu_relax();
		if ((++i & 63) != 0) {
			if ((i & 3) == 0 && r != NULL && r->poll_often &&
			    r->poll != NULL)
				r->poll(r->poll_arg);
			continue;
		}
		now = cgr__now_ns();
		if (now - last > *lost)
			*lost = now - last;
		last = now;
		++*looks;
		if (now >= deadline)
			return ready(arg) ? 1 : -ETIMEDOUT;
		if (r != NULL && cgr__reactor_next_deadline(r) <= now)
			cgr__reactor_run_timers(r, now);
		if (r != NULL && r->nwatches > 0 && now >= r->watch_at) {
			/* Busy waits never park: look every millisecond. */
			r->watch_at = now + 1000000;
			cgr__reactor_run_watches(r);
		}
		if (r != NULL && r->poll != NULL)
			r->poll(r->poll_arg);
		if (mode != CGR_WAIT_BUSY && now >= spin_end)
			return 0;
		sched_yield();
	}
}

/* Where this thread's wait is (cgr__reactor_phase), the reactor it parks
 * on, and what to call when the park ends (cgr__reactor_on_unpark). */
static _Thread_local int cgr__tls_phase;
static _Thread_local struct cgr__reactor *cgr__tls_park_r;
static _Thread_local void (*cgr__tls_unpark)(void *);
static _Thread_local void *cgr__tls_unpark_arg;

int cgr__reactor_phase(void)
{
	return cgr__tls_phase;
}

struct cgr__reactor *cgr__reactor_parking(void)
{
	return cgr__tls_phase == CGR__PHASE_PARK ? cgr__tls_park_r : NULL;
}

void cgr__reactor_on_unpark(void (*fn)(void *), void *arg)
{
	cgr__tls_unpark = fn;
	cgr__tls_unpark_arg = arg;
}

/* The park phase: 0 (ready), -ECANCELED, -ETIMEDOUT or an error. */
static int park_phase(struct cgr__reactor *r, struct cgr__bell *b,
		      cgr__ready_fn ready, void *arg,
		      const _Atomic uint32_t *cancel, int64_t deadline)
{
	for (int64_t nap = 2000;;) {
		uint32_t seq = cgr__bell_prepare(b);
		bool pending = r != NULL && r->poll != NULL &&
			       r->poll(r->poll_arg);
		int64_t until = deadline;
		int ret;

		if (ready(arg)) {
			cgr__bell_cancel(b);
			return 0;
		}
		if (cgr__cancelled(cancel)) {
			cgr__bell_cancel(b);
			return -ECANCELED;
		}
		if (pending) {
			int64_t t = cgr__now_ns() + nap;
			if (t < until)
				until = t;
			if (nap < 200000)
				nap *= 2;
		}
		ret = cgr__reactor_park(r, b, seq, until);
		if (ret == -ETIMEDOUT && until < deadline)
			ret = 0; /* our own bound, not the caller's */
		cgr__bell_cancel(b);
		if (ready(arg))
			return 0;
		if (ret == -ETIMEDOUT || cgr__now_ns() >= deadline)
			return -ETIMEDOUT;
		if (ret < 0 && ret != -EAGAIN && ret != -EBUSY)
			return ret;
	}
}

/*
 * Adaptive mode (CGR_WAIT_ADAPTIVE) learns, per thread, when spinning does
 * not pay, with nothing but the clock reads the spin makes anyway:
 *
 *  - CPU pressure: a spin whose thread lost the CPU (more runnable threads
 *    than cores: a yield or a preemption handed it away for longer than
 *    CGR__STEAL_NS) burns the time slice the thread it waits for may
 *    need, waits a slice itself, and leaves the thread owing CPU time to
 *    the scheduler, which then wakes it late.  From then on the thread's
 *    adaptive waits park at once, like CGR_WAIT_BLOCK (after the 64 polls
 *    every wait makes), until a probe: 1 ms later, and while losses go
 *    on (or come soon after a probe ended the pressure), 2, 4 ... up to
 *    1000 ms, and at least 32 times the time lost.  Only a loss spent on
 *    this system's run queue counts (schedstat says so): a vCPU the
 *    hypervisor took for a moment is nothing that parking would help.
 *    From the probe on, waits spin again; the first spin that yields and
 *    gets the CPU back at once, or four gaps without a loss, end the
 *    pressure, a lost one starts the next, longer, pause.
 *  - Misses: a waiter (bell and condition) whose spins keep ending in a
 *    park (CGR__MISS_PARK more misses than successes, a success counting
 *    four) parks at once; every 16th of its waits spins, and any wait of
 *    it that ends within spin_ns, spinning or parked, counts as a success.
 *
 * When spinning pays, nothing of this costs a system call or a store to
 * shared memory: one thread-local record, read before the spin and
 * written after it.
 */
int cgr__reactor_wait(struct cgr__reactor *r, struct cgr__bell *b,
		      cgr__ready_fn ready, void *arg,
		      const _Atomic uint32_t *cancel, int mode, int64_t spin_ns,
		      int64_t deadline)
{
	struct cgr__spin_stat *st = NULL;
	int64_t start, budget = 0, spin_end;
	int64_t lost = 0;
	unsigned slot = 0, looks = 0;
	int ret;

	if (ready(arg))
		return 0;
	start = cgr__now_ns();
	if (mode == CGR_WAIT_ADAPTIVE && spin_ns > 0) {
		st = &cgr__spin_tls;
		slot = spin_slot(b, ready);
		budget = cgr__spin_budget(st, slot, start, spin_ns);
	}
	spin_end = budget < CGR_FOREVER - start ? start + budget : CGR_FOREVER;
	/* The 64 polls every wait makes are no spin (CGR_WAIT_BLOCK, an
	 * adaptive wait that parks at once). */
	cgr__tls_phase = mode == CGR_WAIT_BUSY || spin_end > start ?
				 CGR__PHASE_SPIN :
				 CGR__PHASE_NONE;
	ret = spin_phase(r, ready, arg, cancel, mode, spin_end, deadline,
			 start, &lost, &looks);
	cgr__tls_phase = CGR__PHASE_NONE;
	if (st != NULL && lost > CGR__STEAL_NS)
		cgr__spin_lost(st, cgr__now_ns(), lost, cgr__run_delay());
	else if (st != NULL && budget > 0 && ret >= 0)
		spin_done(st, slot, ret == 1, looks >= 2);
	if (ret != 0)
		return ret == 1 ? 0 : ret;
	if (r != NULL)
		r->spins++;
	cgr__spin_tls.parks++;
	cgr__tls_phase = CGR__PHASE_PARK;
	cgr__tls_park_r = r;
	ret = park_phase(r, b, ready, arg, cancel, deadline);
	cgr__tls_phase = CGR__PHASE_NONE;
	cgr__tls_park_r = NULL;
	if (cgr__tls_unpark != NULL) {
		void (*fn)(void *) = cgr__tls_unpark;
		cgr__tls_unpark = NULL;
		fn(cgr__tls_unpark_arg);
	}
	/* Parked at once, and ready within the spin: spinning would have
	 * paid (under pressure, a quick wake says nothing about spins). */
	if (st != NULL && budget == 0 && ret == 0 && !st->pressure &&
	    cgr__now_ns() - start <= spin_ns && st->miss[slot] > 0)
		st->miss[slot] = st->miss[slot] > 4 ? st->miss[slot] - 4 : 0;
	return ret;
}

int cgr__reactor_timer_add(struct cgr__reactor *r, int64_t deadline,
			   cgr__timer_fn fn, void *arg, uint64_t *id)
{
	for (size_t i = 0; i < CGR__REACTOR_MAX_TIMERS; i++) {
		struct cgr__timer *t = &r->timers[i];
		if (t->deadline != 0)
			continue;
		t->deadline = deadline > 0 ? deadline : 1;
		t->fn = fn;
		t->arg = arg;
		t->id = r->next_timer_id++;
		if (id != NULL)
			*id = t->id;
		return 0;
	}
	return -ENOSPC;
}

int cgr__reactor_timer_cancel(struct cgr__reactor *r, uint64_t id)
{
	for (size_t i = 0; i < CGR__REACTOR_MAX_TIMERS; i++) {
		if (r->timers[i].deadline != 0 && r->timers[i].id == id) {
			r->timers[i].deadline = 0;
			return 0;
		}
	}
	return -ENOENT;
}

int cgr__reactor_run_timers(struct cgr__reactor *r, int64_t now)
{
	/* Timers added by the callbacks wait for the next call, even when
	 * already due: a timer that re-arms itself cannot loop here. */
	const uint64_t first_new = r->next_timer_id;
	int fired = 0;

	/* Due timers fire in deadline order (then in order of creation),
	 * not in slot order: a late wake-up may find several due at once. */
	for (;;) {
		struct cgr__timer *t = NULL;

		for (size_t i = 0; i < CGR__REACTOR_MAX_TIMERS; i++) {
			struct cgr__timer *c = &r->timers[i];
			if (c->deadline == 0 || c->deadline > now ||
			    c->id >= first_new)
				continue;
			if (t == NULL || c->deadline < t->deadline ||
			    (c->deadline == t->deadline && c->id < t->id))
				t = c;
		}
		if (t == NULL)
			return fired;
		t->deadline = 0; /* free before the call: fn may re-arm */
		t->fn(t->arg);
		fired++;
	}
}

int64_t cgr__reactor_next_deadline(const struct cgr__reactor *r)
{
	int64_t m = CGR_FOREVER;

	for (size_t i = 0; i < CGR__REACTOR_MAX_TIMERS; i++)
		if (r->timers[i].deadline != 0 && r->timers[i].deadline < m)
			m = r->timers[i].deadline;
	return m;
}

/* ---- peer-death watch --------------------------------------------- */

int cgr__reactor_watch_add(struct cgr__reactor *r, int pidfd, cgr__timer_fn fn,
			   void *arg, uint64_t *id)
{
	if (pidfd < 0 || fn == NULL)
		return -EINVAL;
	for (size_t i = 0; i < CGR__REACTOR_MAX_WATCHES; i++) {
		struct cgr__watch *w = &r->watches[i];
		if (w->fn != NULL)
			continue;
		*w = (struct cgr__watch){ .fd = pidfd, .fn = fn, .arg = arg,
					  .id = r->next_watch_id++ };
		r->nwatches++;
		if (id != NULL)
			*id = w->id;
		return 0;
	}
	return -ENOSPC;
}

/* Frees w's slot; an outstanding POLL_ADD is cancelled (its completion,
 * found by id no more, is dropped by the next park). */
static void watch_free(struct cgr__reactor *r, struct cgr__watch *w)
{
	if (w->armed && r->uring)
		cancel_sqe(r, CGR__UD_WATCH | w->id);
	w->fn = NULL;
	r->nwatches--;
}

int cgr__reactor_watch_cancel(struct cgr__reactor *r, uint64_t id)
{
	struct cgr__watch *w = watch_of(r, id);

	if (w == NULL)
		return -ENOENT;
	watch_free(r, w);
	return 0;
}

int cgr__reactor_run_watches(struct cgr__reactor *r)
{
	struct pollfd pf[CGR__REACTOR_MAX_WATCHES];
	struct cgr__watch *ws[CGR__REACTOR_MAX_WATCHES];
	uint64_t ids[CGR__REACTOR_MAX_WATCHES];
	int n = 0, fired = 0;

	for (size_t i = 0; i < CGR__REACTOR_MAX_WATCHES; i++) {
		if (r->watches[i].fn == NULL)
			continue;
		ws[n] = &r->watches[i];
		ids[n] = ws[n]->id;
		pf[n] = (struct pollfd){ .fd = ws[n]->fd, .events = POLLIN };
		n++;
	}
	if (n == 0 || (poll(pf, (nfds_t)n, 0) < 0 && errno != EINTR))
		return 0;
	/* Free before the call: fn may add or cancel watches (a slot its
	 * call freed and refilled is another watch: its id tells). */
	for (int k = 0; k < n; k++) {
		cgr__timer_fn fn = ws[k]->fn;
		void *arg = ws[k]->arg;
		if (fn == NULL || ws[k]->id != ids[k] ||
		    (!ws[k]->fired && pf[k].revents == 0))
			continue;
		watch_free(r, ws[k]);
		fn(arg);
		fired++;
	}
	return fired;
}
