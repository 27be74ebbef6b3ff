/*
 * reactor/reactor.c: spin-then-park waiting on doorbells, io_uring futex
 * waits with the futex system call as fallback, and a small timer table.
 *
 * Debian's liburing 2.3 has no futex helpers, so the FUTEX_WAIT request is
 * filled by hand (opcode 51 since Linux 6.7).  Waking is always the futex
 * system call, which io_uring futex waiters observe like any other waiter.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>

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

/* 0 if the ring supports IORING_OP_FUTEX_WAIT, else -EOPNOTSUPP.  The
 * probe lives on the stack: liburing's io_uring_get_probe_ring mallocs. */
static int cgr__uring_probe_futex(struct io_uring *ring)
{
	union {
		struct io_uring_probe p;
		char buf[sizeof(struct io_uring_probe) +
			 256 * sizeof(struct io_uring_probe_op)];
	} u;

	memset(&u, 0, sizeof(u));
	if (io_uring_register_probe(ring, &u.p, 256) < 0)
		return -EOPNOTSUPP;
	if (u.p.last_op < IORING_OP_FUTEX_WAIT ||
	    !(u.p.ops[IORING_OP_FUTEX_WAIT].flags & IO_URING_OP_SUPPORTED))
		return -EOPNOTSUPP;
	return 0;
}

void cgr__reactor_init(struct cgr_reactor *r, unsigned flags)
{
	struct io_uring_params p;
	int ret;

	memset(r, 0, sizeof(*r));
	r->next_timer_id = 1;
	r->next_watch_id = 1;
	if (flags & CGR__REACTOR_NO_URING) {
		r->uring_err = -EPERM;
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
		return;
	}
	/* Kernels before 6.7 set up rings but fail every FUTEX_WAIT request
	 * with -EINVAL: each park would return at once and an idle worker
	 * would spin.  Ask the ring which opcodes it knows. */
	ret = cgr__uring_probe_futex(&r->ring);
	if (ret < 0) {
		io_uring_queue_exit(&r->ring);
		r->uring_err = ret;
		return;
	}
	r->uring = true;
}

void cgr__reactor_fini(struct cgr_reactor *r)
{
	if (r->uring)
		io_uring_queue_exit(&r->ring);
	r->uring = false;
}

static void cgr__prep_futex_wait(struct io_uring_sqe *sqe,
				 _Atomic uint32_t *addr, uint32_t val)
{
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = IORING_OP_FUTEX_WAIT;
	sqe->fd = (int)CGR__FUTEX2_SIZE_U32; /* shared futex: may be in shm */
	sqe->addr = (uint64_t)(uintptr_t)addr;
	sqe->off = val;			  /* addr2: the expected value */
	sqe->addr3 = 0xffffffffu;	  /* FUTEX_BITSET_MATCH_ANY */
	sqe->user_data = CGR__UD_FUTEX;
}

static struct cgr__watch *watch_of(struct cgr_reactor *r, uint64_t id)
{
	for (size_t i = 0; i < CGR_REACTOR_MAX_WATCHES; i++)
		if (r->watches[i].fn != NULL && r->watches[i].id == id)
			return &r->watches[i];
	return NULL;
}

/* A POLL_ADD on every watched pidfd that has none outstanding (a park
 * then wakes when the process exits). */
static void arm_watches(struct cgr_reactor *r)
{
	for (size_t i = 0; r->nwatches > 0 && i < CGR_REACTOR_MAX_WATCHES;
	     i++) {
		struct cgr__watch *w = &r->watches[i];
		struct io_uring_sqe *sqe;
		if (w->fn == NULL || w->armed || w->fired ||
		    (sqe = io_uring_get_sqe(&r->ring)) == NULL)
			continue;
		io_uring_prep_poll_add(sqe, w->fd, POLLIN);
		sqe->user_data = CGR__UD_WATCH | w->id;
		w->armed = true;
	}
}

/* A completion that is not the park's own: a watch's POLL_ADD (its
 * process exited, or it was cancelled), or a cancel's.  Returns whether
 * a watch fired. */
static bool other_cqe(struct cgr_reactor *r, const struct io_uring_cqe *cqe)
{
	struct cgr__watch *w;

	if (!(cqe->user_data & CGR__UD_WATCH))
		return false;
	w = watch_of(r, cqe->user_data & ~CGR__UD_WATCH);
	if (w == NULL)
		return false; /* cancelled, or fired through poll(2) */
	w->armed = false;
	if (cqe->res != -ECANCELED)
		w->fired = true; /* exited (or the pidfd is bad: say so) */
	return w->fired;
}

/* Cancels the request with user_data ud (its completion comes later). */
static void cancel_sqe(struct cgr_reactor *r, uint64_t ud)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);

	if (sqe == NULL)
		return;
	io_uring_prep_cancel64(sqe, ud, 0);
	sqe->user_data = CGR__UD_CANCEL;
	io_uring_submit(&r->ring);
}

/* The futex wait's result: 0 woken, -ETIMEDOUT, or an error. */
static int futex_res(int res)
{
	/* -EAGAIN: the value changed; -ECANCELED: the linked timeout fired
	 * (or a watch cancelled it: the caller re-checks the clock). */
	if (res == -ECANCELED || res == -ETIME)
		return -ETIMEDOUT;
	return res < 0 && res != -EAGAIN ? res : 0;
}

static int cgr__uring_park(struct cgr_reactor *r, _Atomic uint32_t *addr,
			   uint32_t val, int64_t deadline)
{
	struct __kernel_timespec ts;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	unsigned want = 1, got = 0;
	bool cancelled = false;
	int res = 0, ret;

	arm_watches(r);
	sqe = io_uring_get_sqe(&r->ring);
	if (sqe == NULL)
		return -EBUSY;
	cgr__prep_futex_wait(sqe, addr, val);
	if (deadline != CGR_FOREVER) {
		sqe->flags |= IOSQE_IO_LINK;
		sqe = io_uring_get_sqe(&r->ring);
		if (sqe == NULL)
			return -EBUSY;
		ts.tv_sec = deadline / 1000000000;
		ts.tv_nsec = deadline % 1000000000;
		io_uring_prep_link_timeout(sqe, &ts, IORING_TIMEOUT_ABS);
		sqe->user_data = CGR__UD_TIMEOUT;
		want = 2;
	}
	ret = io_uring_submit_and_wait(&r->ring, 1);
	if (ret < 0 && ret != -EINTR)
		return ret;
	/* Reap the futex wait and its linked timeout; a watch that fires
	 * meanwhile cancels the wait. */
	while (got < want) {
		ret = io_uring_wait_cqe(&r->ring, &cqe);
		if (ret == -EINTR)
			continue;
		if (ret < 0)
			return ret;
		if (cqe->user_data == CGR__UD_FUTEX)
			res = futex_res(cqe->res);
		if (cqe->user_data == CGR__UD_FUTEX ||
		    cqe->user_data == CGR__UD_TIMEOUT)
			got++;
		else if (other_cqe(r, cqe) && !cancelled) {
			cancelled = true;
			cancel_sqe(r, CGR__UD_FUTEX);
		}
		io_uring_cqe_seen(&r->ring, cqe);
	}
	if (res == -ETIMEDOUT && cgr__now_ns() < deadline)
		res = 0; /* cancelled early for another reason: re-check */
	return res;
}

int cgr__reactor_park(struct cgr_reactor *r, struct cgr_bell *b,
		      uint32_t seq, int64_t deadline)
{
	int64_t t = deadline;
	int ret;

	if (r != NULL) {
		int64_t nt = cgr__reactor_next_deadline(r);
		if (nt < t)
			t = nt;
		/* No pidfd wakes a futex: look at the watches often. */
		if (r->nwatches > 0 && !r->uring &&
		    (nt = cgr__now_ns() + CGR__WATCH_SLICE_NS) < t)
			t = nt;
		r->parks++;
	}
	if (t != CGR_FOREVER && cgr__now_ns() >= t)
		ret = -ETIMEDOUT;
	else if (r != NULL && r->uring)
		ret = cgr__uring_park(r, &b->seq, seq, t);
	else
		ret = cgr__futex_wait(&b->seq, seq, t);
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

static inline bool cgr__cancelled(const _Atomic uint32_t *cancel)
{
	return cancel != NULL &&
	       atomic_load_explicit(cancel, memory_order_acquire) != 0;
}

int cgr__reactor_wait(struct cgr_reactor *r, struct cgr_bell *b,
		      cgr__ready_fn ready, void *arg,
		      const _Atomic uint32_t *cancel, int mode,
		      int64_t spin_ns, int64_t deadline)
{
	int64_t now, spin_end;
	unsigned i = 0;

	if (ready(arg))
		return 0;
	now = cgr__now_ns();
	spin_end = now;
	if (mode != CGR_WAIT_BLOCK && spin_ns > 0)
		spin_end = spin_ns < CGR_FOREVER - now ? now + spin_ns :
							 CGR_FOREVER;
	/* Spin phase.  Every 64 polls (a few microseconds) the thread reads
	 * the clock and yields: when spinners outnumber cores, the thread we
	 * wait for may need this core, and a yield with nothing else to run
	 * costs well under a microsecond.  The first 64 polls never yield,
	 * so a prompt answer is seen at spin speed. */
	for (;;) {
		if (ready(arg))
			return 0;
		if (cgr__cancelled(cancel))
			return -ECANCELED;
		cgr__cpu_relax();
		if ((++i & 63) != 0)
			continue;
		now = cgr__now_ns();
		if (now >= deadline)
			return ready(arg) ? 0 : -ETIMEDOUT;
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
			break;
		sched_yield();
	}
	if (r != NULL)
		r->spins++;
	/* Park phase. */
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

int cgr__reactor_timer_add(struct cgr_reactor *r, int64_t deadline,
			   cgr__timer_fn fn, void *arg, uint64_t *id)
{
	for (size_t i = 0; i < CGR_REACTOR_MAX_TIMERS; i++) {
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

int cgr__reactor_timer_cancel(struct cgr_reactor *r, uint64_t id)
{
	for (size_t i = 0; i < CGR_REACTOR_MAX_TIMERS; i++) {
		if (r->timers[i].deadline != 0 && r->timers[i].id == id) {
			r->timers[i].deadline = 0;
			return 0;
		}
	}
	return -ENOENT;
}

int cgr__reactor_run_timers(struct cgr_reactor *r, int64_t now)
{
	/* Timers added by the callbacks wait for the next call, even when
	 * already due: a timer that re-arms itself cannot loop here. */
	const uint64_t first_new = r->next_timer_id;
	int fired = 0;

	/* Due timers fire in deadline order (then in order of creation),
	 * not in slot order: a late wake-up may find several due at once. */
	for (;;) {
		struct cgr__timer *t = NULL;

		for (size_t i = 0; i < CGR_REACTOR_MAX_TIMERS; i++) {
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

int64_t cgr__reactor_next_deadline(const struct cgr_reactor *r)
{
	int64_t m = CGR_FOREVER;

	for (size_t i = 0; i < CGR_REACTOR_MAX_TIMERS; i++)
		if (r->timers[i].deadline != 0 && r->timers[i].deadline < m)
			m = r->timers[i].deadline;
	return m;
}

/* ---- peer-death watch --------------------------------------------- */

int cgr__reactor_watch_add(struct cgr_reactor *r, int pidfd,
			   cgr__timer_fn fn, void *arg, uint64_t *id)
{
	if (pidfd < 0 || fn == NULL)
		return -EINVAL;
	for (size_t i = 0; i < CGR_REACTOR_MAX_WATCHES; i++) {
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
static void watch_free(struct cgr_reactor *r, struct cgr__watch *w)
{
	if (w->armed && r->uring)
		cancel_sqe(r, CGR__UD_WATCH | w->id);
	w->fn = NULL;
	r->nwatches--;
}

int cgr__reactor_watch_cancel(struct cgr_reactor *r, uint64_t id)
{
	struct cgr__watch *w = watch_of(r, id);

	if (w == NULL)
		return -ENOENT;
	watch_free(r, w);
	return 0;
}

int cgr__reactor_run_watches(struct cgr_reactor *r)
{
	struct pollfd pf[CGR_REACTOR_MAX_WATCHES];
	struct cgr__watch *ws[CGR_REACTOR_MAX_WATCHES];
	uint64_t ids[CGR_REACTOR_MAX_WATCHES];
	int n = 0, fired = 0;

	for (size_t i = 0; i < CGR_REACTOR_MAX_WATCHES; i++) {
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
