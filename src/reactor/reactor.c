/*
 * reactor/reactor.c: spin-then-park waiting on doorbells, io_uring futex
 * waits with the futex system call as fallback, and a small timer table.
 *
 * Debian's liburing 2.3 has no futex helpers, so the FUTEX_WAIT request is
 * filled by hand (opcode 51 since Linux 6.7).  Waking is always the futex
 * system call, which io_uring futex waiters observe like any other waiter.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "reactor/reactor.h"

#ifndef IORING_OP_FUTEX_WAIT
#define IORING_OP_FUTEX_WAIT 51
#endif
#define CGR__FUTEX2_SIZE_U32 0x02u
#define CGR__UD_FUTEX 1u
#define CGR__UD_TIMEOUT 2u

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
	if (flags & CGR__REACTOR_NO_URING) {
		r->uring_err = -EPERM;
		return;
	}
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	ret = io_uring_queue_init_params(8, &r->ring, &p);
	if (ret == -EINVAL) {
		memset(&p, 0, sizeof(p));
		ret = io_uring_queue_init_params(8, &r->ring, &p);
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

static int cgr__uring_park(struct cgr_reactor *r, _Atomic uint32_t *addr,
			   uint32_t val, int64_t deadline)
{
	struct __kernel_timespec ts;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	unsigned want = 1, got = 0;
	int res = 0, ret;

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
	ret = io_uring_submit_and_wait(&r->ring, want);
	if (ret < 0 && ret != -EINTR)
		return ret;
	/* Reap both completions: the futex wait and its linked timeout. */
	while (got < want) {
		ret = io_uring_wait_cqe(&r->ring, &cqe);
		if (ret == -EINTR)
			continue;
		if (ret < 0)
			return ret;
		if (cqe->user_data == CGR__UD_FUTEX) {
			/* 0: woken; -EAGAIN: value changed; -ECANCELED: the
			 * linked timeout fired. */
			if (cqe->res == -ECANCELED || cqe->res == -ETIME)
				res = -ETIMEDOUT;
			else if (cqe->res < 0 && cqe->res != -EAGAIN)
				res = cqe->res;
		}
		io_uring_cqe_seen(&r->ring, cqe);
		got++;
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
