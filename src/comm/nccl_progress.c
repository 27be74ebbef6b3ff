/*
 * comm/nccl_progress.c: the NCCL backend's progress (see nccl.h): NCCL's
 * results as cgr's codes and messages, the failure of the communicator
 * as a whole (the first failure wins; a thread of its own aborts every
 * rank), waiting until a rank's NCCL communicator settles, and the
 * completion of enqueued operations: their records (events, kept in each
 * rank's pool), the polls of their futures.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "comm/nccl.h"

/* ---- the communicator's failure ------------------------------------ */

const char *cgr__nccl_msg(const struct ncomm *c, int r, ncclResult_t e)
{
	const char *last = c->rt->last_error(c->rk[r].nc);
	return last != NULL && *last ? last : c->rt->error_string(e);
}

/*
 * The result codes of nccl.h (2.28), by name; NULL for any other.  A
 * newer NCCL may return codes the header cgr was built against does not
 * have (2.29 added a timeout result, 8): those are treated as unknown,
 * never as an index into anything.  tests/cuda-conformance compares this
 * table with the header both ways.
 */
const char *cgr__nccl_result_name(int e)
{
	switch (e) {
	case 0: return "ncclSuccess";
	case 1: return "ncclUnhandledCudaError";
	case 2: return "ncclSystemError";
	case 3: return "ncclInternalError";
	case 4: return "ncclInvalidArgument";
	case 5: return "ncclInvalidUsage";
	case 6: return "ncclRemoteError";
	case 7: return "ncclInProgress";
	default: return NULL;
	}
}

/* NCCL's result as cgr's code: a known one by its meaning, any other
 * (a newer library's) CGR_EDEVICE. */
int cgr__nccl_map_result(int e)
{
	switch (e) {
	case ncclSuccess:
		return 0;
	case ncclInvalidArgument:
	case ncclInvalidUsage:
		return -EINVAL;
	case ncclUnhandledCudaError:
		return CGR_EDEVICE;
	case ncclRemoteError:
		return -EPIPE;
	case ncclSystemError:
	case ncclInternalError:
		return -EIO;
	case ncclInProgress:
		return -EAGAIN;
	default:
		return CGR_EDEVICE;
	}
}

struct restxt cgr__nccl_res_text(const struct cgr__ncclrt *rt, ncclResult_t e)
{
	struct restxt t;
	const char *name = cgr__nccl_result_name((int)e);
	const char *text = rt->error_string(e);

	snprintf(t.s, sizeof(t.s), "%s %d, %s",
		 name != NULL ? name : "unknown NCCL result", (int)e,
		 text != NULL ? text : "no text");
	return t;
}

/* Aborts every rank's NCCL communicator (a thread of its own). */
static void *abort_main(void *arg)
{
	struct ncomm *c = arg;

	for (int r = 0; r < c->base.n; r++) {
		pthread_mutex_lock(&c->rk[r].lock);
		if (c->rk[r].nc != NULL)
			c->rt->abort(c->rk[r].nc);
		c->rk[r].nc = NULL;
		pthread_mutex_unlock(&c->rk[r].lock);
	}
	atomic_store_explicit(&c->aborter_done, true, memory_order_release);
	return NULL;
}

/*
 * The communicator fails for good with code (the first failure wins):
 * every pending and later operation fails with it, and the aborter
 * starts.  Any thread; never waits for NCCL.  Logged at level (an abort
 * asked for is no error of the communicator's).
 */
static void comm_failv(struct ncomm *c, int code, int level, const char *fmt,
		       va_list ap)
{
	pthread_mutex_lock(&c->fail_lock);
	if (atomic_load_explicit(&c->failed, memory_order_relaxed) == 0) {
		vsnprintf(c->why, sizeof(c->why), fmt, ap);
		/* F0: release: why; pairs with cgr__nccl_failed's acquire. */
		atomic_store_explicit(&c->failed, code < 0 ? code : -EIO,
				      memory_order_release);
		cgr__log(c->base.log, level, "nccl communicator %s: %s",
			 level == CGR_LOG_ERROR ? "failed" : "stopped", c->why);
		/* The CPU communicators of the agreement: a rank waiting
		 * there for a peer that will not come returns. */
		cgr_comm_abort(c->sd);
		cgr_comm_abort(c->rd);
		c->aborter_started =
			pthread_create(&c->aborter, NULL, abort_main, c) == 0;
		if (!c->aborter_started)
			abort_main(c);
	}
	pthread_mutex_unlock(&c->fail_lock);
}

void cgr__nccl_fail(struct ncomm *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	comm_failv(c, code, CGR_LOG_ERROR, fmt, ap);
	va_end(ap);
}

void cgr__nccl_stop(struct ncomm *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	comm_failv(c, code, CGR_LOG_INFO, fmt, ap);
	va_end(ap);
}

/* The failure of the whole communicator, as rank r's result. */
int cgr__nccl_rank_failed(struct ncomm *c, int r)
{
	int code = cgr__nccl_failed(c);

	snprintf(c->rk[r].errmsg, sizeof(c->rk[r].errmsg), "%s", c->why);
	return code;
}

int cgr__nccl_far_lost(struct ncomm *c)
{
	int64_t now, next;
	char why[200];
	int code;

	if (c->far.lost == NULL)
		return cgr__nccl_failed(c);
	now = cgr__now_ns();
	next = atomic_load_explicit(&c->far_next, memory_order_relaxed);
	if (now < next || !atomic_compare_exchange_strong_explicit(
				  &c->far_next, &next, now + 1000000,
				  memory_order_relaxed, memory_order_relaxed))
		return cgr__nccl_failed(c);
	if ((code = c->far.lost(c->far.arg, why, sizeof(why))) != 0)
		cgr__nccl_fail(c, code, "%s", why);
	return cgr__nccl_failed(c);
}

/*
 * Waits (polling, under the rank's lock) until rank r's communicator is
 * no longer ncclInProgress: 0, or the communicator failed (its code).
 * A failure of the communicator from elsewhere (cgr_comm_abort, another
 * rank's asynchronous error, a deadline) ends the wait at once: the
 * aborter needs this rank's lock, and NCCL will never settle a
 * communicator whose peers stopped.
 */
int cgr__nccl_settle(struct ncomm *c, int r, int64_t deadline, const char *what)
{
	struct nrank *rk = &c->rk[r];
	ncclResult_t st = ncclInProgress;
	int64_t t0 = cgr__now_ns(), now;
	long nap = 1000;

	/* An enqueue settles within microseconds: poll, then yield the
	 * core while polling, and only then nap (a nap costs tens of us). */
	while (st == ncclInProgress) {
		if (cgr__nccl_failed(c) != 0 || cgr__nccl_far_lost(c) != 0)
			return cgr__nccl_rank_failed(c, r);
		if (c->rt->async_error(rk->nc, &st) != ncclSuccess)
			st = ncclInternalError;
		if (st != ncclInProgress)
			break;
		now = cgr__now_ns();
		if (now >= deadline) {
			cgr__nccl_fail(c, -ETIMEDOUT, "%s on rank %d: still "
				       "in progress at its deadline", what, r);
			return cgr__nccl_failed(c);
		}
		if (now - t0 < 20000) {
			cgr__cpu_relax();
		} else if (now - t0 < 2000000) {
			sched_yield();
		} else {
			struct timespec ts = { 0, nap };
			nanosleep(&ts, NULL);
			if (nap < 100000)
				nap *= 2;
		}
	}
	if (st != ncclSuccess) {
		/* Across hosts, NCCL's error may be what another host's
		 * failure brought about (its abort): the cause first. */
		char why[200];
		int code = c->far.lost != NULL ?
				   c->far.lost(c->far.arg, why, sizeof(why)) : 0;
		if (code != 0)
			cgr__nccl_fail(c, code, "%s", why);
		cgr__nccl_fail(
		    c, cgr__nccl_map_err(st), "%s on rank %d: %s (%s)", what, r,
		    cgr__nccl_res_text(c->rt, st).s, cgr__nccl_msg(c, r, st));
		return cgr__nccl_failed(c);
	}
	return 0;
}

/* ---- completion ---------------------------------------------------- */

void cgr__nccl_nev_put(void *arg)
{
	struct nev *p = arg;

	struct ncomm *c = p->c;

	if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (p->ev == NULL) {
		cgr__free(p->arena, p, sizeof(*p), 16);
	} else {
		/* Re-recording a pending event is allowed: waits enqueued
		 * before keep the record they saw. */
		pthread_mutex_lock(&c->pool_lock);
		p->next = c->rk[p->rank].pool;
		c->rk[p->rank].pool = p;
		pthread_mutex_unlock(&c->pool_lock);
	}
	cgr__nccl_put(c);
}

/* Polls rank r's asynchronous error (without waiting for its lock: the
 * rank's own calls report theirs). */
static void check_async(struct ncomm *c, int r)
{
	struct nrank *rk = &c->rk[r];
	ncclResult_t st = ncclSuccess;

	if (pthread_mutex_trylock(&rk->lock) != 0)
		return;
	if (rk->nc != NULL && c->rt->async_error(rk->nc, &st) != ncclSuccess)
		st = ncclInternalError;
	if (st != ncclSuccess && st != ncclInProgress)
		cgr__nccl_fail(c, cgr__nccl_map_err(st),
			       "rank %d: asynchronous error: %s (%s)", r,
			       cgr__nccl_res_text(c->rt, st).s,
			       cgr__nccl_msg(c, r, st));
	pthread_mutex_unlock(&rk->lock);
}

/* The futures' poll: done when the event is, failed when the
 * communicator is (an asynchronous error, the deadline, an abort). */
int cgr__nccl_nev_poll(void *arg, int *result)
{
	struct nev *p = arg;
	struct ncomm *c = p->c;
	int q;

	if ((*result = cgr__nccl_failed(c)) != 0)
		return 1;
	q = cgr_event_query(p->ev);
	check_async(c, p->rank);
	if ((*result = cgr__nccl_far_lost(c)) != 0)
		return 1;
	if (q < 0) {
		/* The rank's stream failed (CGR_EDEVICE): its peers would
		 * wait for it in NCCL for ever.  The communicator fails. */
		cgr__nccl_fail(c, q, "rank %d: its stream failed (%s)", p->rank,
			       cgr_err_name(q));
		*result = cgr__nccl_failed(c);
		return 1;
	}
	if (q != 0) {
		*result = 0;
		return 1;
	}
	if (cgr__now_ns() >= p->deadline) {
		cgr__nccl_fail(c, -ETIMEDOUT, "rank %d: an operation passed "
			       "its deadline", p->rank);
		*result = cgr__nccl_failed(c);
		return 1;
	}
	return 0;
}

/* The poll of a group's future: the first error of its operations,
 * once all of them are done. */
int cgr__nccl_nev_poll_all(void *arg, int *result)
{
	struct nev *p = arg;

	if (!cgr__nccl_nev_poll(arg, result))
		return 0;
	if (*result == 0)
		*result = p->first;
	return 1;
}

/* A future already done with result. */
int cgr__nccl_done_future(struct ncomm *c, int result, cgr_future **out)
{
	struct cgr__dfuture *df;

	if (out == NULL)
		return 0;
	if (cgr__dfuture_create(c->base.ctx, NULL, &df) < 0)
		return -ENOMEM;
	cgr__dfuture_complete(df, result);
	*out = cgr__dfuture_pub(df);
	return 0;
}

/* Makes df a future of what p stands for (taking a reference on p):
 * one operation's (poll: cgr__nccl_nev_poll), or the group's
 * (cgr__nccl_nev_poll_all). */
void cgr__nccl_polled_by(struct cgr__dfuture *df, struct nev *p,
			 int (*poll)(void *, int *))
{
	atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
	cgr__dfuture_poll_by(df, poll, cgr__nccl_nev_put, p);
	df->ev = p->ev;
}
