/*
 * device/future.c: futures of device operations (struct cgr__dfuture) and
 * the public cgr_future_* calls.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"

/* ---- futures ------------------------------------------------------- */

int cgr__dfuture_create(cgr_ctx *ctx, cgr_stream *s,
			struct cgr__dfuture **out)
{
	struct cgr__dfuture *df;

	df = cgr__alloc(&ctx->arena, sizeof(*df), CGR__CACHELINE);
	if (df == NULL)
		return -ENOMEM;
	cgr__future_init(&df->f);
	df->gen = cgr__future_arm(&df->f);
	df->magic = CGR__DFUTURE_MAGIC;
	atomic_init(&df->refs, 2);
	cgr__bell_init(&df->bell);
	df->s = s;
	if (s != NULL)
		cgr__stream_ref(s);
	cgr__ctx_ref(ctx);
	df->ctx = ctx;
	df->arena = &ctx->arena;
	df->poll = NULL;
	df->poll_fini = NULL;
	df->poll_arg = NULL;
	df->ev = NULL;
	atomic_init(&df->wbell, NULL);
	atomic_flag_clear(&df->claimed);
	*out = df;
	return 0;
}

void cgr__dfuture_poll_by(struct cgr__dfuture *df,
			  int (*poll)(void *arg, int *result),
			  void (*poll_fini)(void *arg), void *arg)
{
	df->poll = poll;
	df->poll_fini = poll_fini;
	df->poll_arg = arg;
}

void cgr__dfuture_put(struct cgr__dfuture *df)
{
	cgr_ctx *ctx;

	if (atomic_fetch_sub_explicit(&df->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (df->s != NULL)
		cgr__stream_put(df->s);
	if (df->poll_fini != NULL)
		df->poll_fini(df->poll_arg);
	ctx = df->ctx;
	df->magic = 0;
	cgr__free(df->arena, df, sizeof(*df), CGR__CACHELINE);
	cgr__ctx_put(ctx);
}

void cgr__dfuture_complete(struct cgr__dfuture *df, int result)
{
	if (result > 0)
		result = 0;
	/* The future's C2 (release) publishes the completer's writes. */
	cgr__future_complete(&df->f, df->gen, result);
	/* Waiters park on the bound stream's position bell, or on the
	 * future's own bell (the ring's fence pairs with their prepare). */
	if (df->s != NULL)
		cgr__bell_ring(&df->s->pbell);
	else
		cgr__bell_ring(&df->bell);
	/* A device waiting through a backend's thread (cuda.c, B1): the
	 * ring above fenced C2 before this load. */
	struct cgr__bell *wb =
	    atomic_load_explicit(&df->wbell, memory_order_relaxed);
	if (wb != NULL)
		cgr__bell_ring(wb);
	cgr__dfuture_put(df);
}

int cgr__dfuture_test(struct cgr__dfuture *df, int *result)
{
	int res = 0, t;

	t = cgr__future_test(&df->f, df->gen, &res);
	if (t == 1) {
		*result = res;
		return 1;
	}
	if (df->poll != NULL && df->poll(df->poll_arg, &res) == 1) {
		/* The first to see it done completes it (the completer's
		 * reference goes with that); everybody has the result. */
		if (!atomic_flag_test_and_set(&df->claimed))
			cgr__dfuture_complete(df, res);
		*result = res;
		return 1;
	}
	if (df->s != NULL) {
		int err = cgr__device_error(df->s->dev);
		if (err) {
			*result = err;
			return 1;
		}
	}
	return 0;
}

struct cgr__dfuture *cgr__dfuture_of(cgr_future *f)
{
	struct cgr__dfuture *df = (struct cgr__dfuture *)f;

	if (f == NULL || df->magic != CGR__DFUTURE_MAGIC)
		return NULL;
	return df;
}

int cgr_future_test(cgr_future *f)
{
	struct cgr__dfuture *df = cgr__dfuture_of(f);
	int res;

	if (df == NULL)
		return -EINVAL;
	if (!cgr__dfuture_test(df, &res)) {
		/* Pending: the streams it may wait for are handed over, as a
		 * wait hands them over (cgr_event_query too). */
		cgr__stream_hand_over();
		if (df->s != NULL)
			cgr__stream_kick(df->s);
		return 0;
	}
	return res == 0 ? 1 : res;
}

static bool cgr__dfuture_ready(void *arg)
{
	int res;
	return cgr__dfuture_test(arg, &res) != 0;
}

/* Waits for df, bound to a stream: its completer rings the stream's
 * position bell, a device failure every bell of the device. */
static int cgr__bound_future_wait(struct cgr__dfuture *df, int64_t deadline)
{
	int res;

	cgr__stream_kick(df->s);
	cgr__reactor_wait(NULL, &df->s->pbell, cgr__dfuture_ready, df, NULL,
			  CGR_WAIT_ADAPTIVE, 20000, deadline);
	if (cgr__dfuture_test(df, &res))
		return res;
	return -ETIMEDOUT;
}

/* Waits for a polled future: polls, spinning for 20 us, then sleeping
 * from 1 us to 100 us between polls. */
/* Nobody rings for a polled future (a device completes it): spin, then
 * yield the core while polling (a nap costs tens of us of timer slack,
 * more than most device operations take), then nap. */
static int polled_future_wait(struct cgr__dfuture *df, int64_t deadline)
{
	int64_t t0 = cgr__now_ns();
	int64_t spin_end = t0 + 20000, yield_end = t0 + 2000000;
	long nap = 1000;
	int res;

	while (!cgr__dfuture_test(df, &res)) {
		int64_t now = cgr__now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		if (now < spin_end) {
			cgr__cpu_relax();
			continue;
		}
		if (now < yield_end) {
			sched_yield();
			continue;
		}
		struct timespec ts = { 0, nap };
		nanosleep(&ts, NULL);
		if (nap < 100000)
			nap *= 2;
	}
	return res;
}

int cgr_future_wait(cgr_future *f, int64_t timeout_ns)
{
	struct cgr__dfuture *df = cgr__dfuture_of(f);
	int64_t deadline;
	int res;

	if (df == NULL)
		return -EINVAL;
	if (timeout_ns < 0)
		timeout_ns = 10000000000; /* the 10 s default of cgr.h */
	deadline = cgr__deadline(timeout_ns);
	if (!cgr__dfuture_ready(df))
		cgr__stream_hand_over();
	if (df->poll != NULL)
		return polled_future_wait(df, deadline);
	if (df->s != NULL)
		return cgr__bound_future_wait(df, deadline);
	cgr__reactor_wait(NULL, &df->bell, cgr__dfuture_ready, df, NULL,
			  CGR_WAIT_ADAPTIVE, 20000, deadline);
	if (cgr__dfuture_test(df, &res))
		return res;
	return -ETIMEDOUT;
}

int cgr_future_stream_wait(cgr_future *f, cgr_stream *s)
{
	struct cgr__dfuture *df = cgr__dfuture_of(f);
	struct cgr__sop op = { .kind = CGR__SOP_WAITF };
	int err, res, ret;

	if (df == NULL || s == NULL)
		return -EINVAL;
	err = cgr__device_error(s->dev);
	if (err)
		return err;
	if (cgr__future_test(&df->f, df->gen, &res) == 1)
		return 0; /* already complete: nothing to wait for */
	if (df->ev != NULL)
		return cgr_stream_wait_event(s, df->ev);
	cgr__dfuture_ref(df);
	op.u.waitf.f = df;
	ret = s->dev->ops->enqueue(s, &op);
	if (ret < 0)
		cgr__dfuture_put(df);
	return ret;
}

void cgr_future_release(cgr_future *f)
{
	struct cgr__dfuture *df = cgr__dfuture_of(f);

	if (df == NULL)
		return;
	/* A polled future nobody saw done: its completer is whoever polls,
	 * and the holder who stops caring takes the completer's reference
	 * along (a stream still waiting on it polls to the end). */
	if (df->poll != NULL && !atomic_flag_test_and_set(&df->claimed))
		cgr__dfuture_put(df);
	cgr__dfuture_put(df);
}
