/*
 * device/event.c: the public event calls (cgr_event_*, and
 * cgr_stream_wait_event, which waits for one): argument checks, then the
 * backend's ops; an event of another backend is waited for by snapshot.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"

/* ---- events -------------------------------------------------------- */

int cgr_event_create(cgr_ctx *ctx, cgr_event **out)
{
	cgr_event *e;

	if (ctx == NULL || out == NULL)
		return -EINVAL;
	e = cgr__alloc(&ctx->arena, sizeof(*e), CGR__CACHELINE);
	if (e == NULL)
		return -ENOMEM;
	cgr__ctx_ref(ctx);
	e->ctx = ctx;
	e->arena = &ctx->arena;
	atomic_flag_clear(&e->lock);
	e->ops = NULL;
	e->s = NULL;
	e->pos = 0;
	e->gen = 0;
	*out = e;
	return 0;
}

void cgr_event_destroy(cgr_event *e)
{
	cgr_ctx *ctx;

	if (e == NULL)
		return;
	if (e->ops != NULL && e->ops->event_free != NULL)
		e->ops->event_free(e);
	if (e->s != NULL)
		cgr__stream_put(e->s);
	ctx = e->ctx;
	cgr__free(e->arena, e, sizeof(*e), CGR__CACHELINE);
	cgr__ctx_put(ctx);
}

int cgr_event_record(cgr_event *e, cgr_stream *s)
{
	int err;

	if (e == NULL || s == NULL)
		return -EINVAL;
	err = cgr__device_error(s->dev);
	if (err)
		return err;
	cgr__event_lock(e);
	if (e->ops == NULL)
		e->ops = s->dev->ops;
	else if (e->ops != s->dev->ops)
		err = -EINVAL;
	cgr__event_unlock(e);
	if (err)
		return err;
	return s->dev->ops->event_record(e, s);
}

int cgr_event_query(cgr_event *e)
{
	const struct cgr__device_ops *ops;
	int ret;

	if (e == NULL)
		return -EINVAL;
	cgr__event_lock(e);
	ops = e->ops;
	cgr__event_unlock(e);
	/* Never recorded: never complete. */
	ret = ops == NULL ? 0 : ops->event_query(e);
	/* Pending: a stream task polling for its own stream's work hands
	 * the stream it holds to the executor (as a wait does), else the
	 * work would wait for the task's return. */
	if (ret == 0)
		cgr__stream_hand_over();
	return ret;
}

int cgr_stream_wait_event(cgr_stream *s, cgr_event *e)
{
	const struct cgr__device_ops *ops;
	int err;

	if (s == NULL || e == NULL)
		return -EINVAL;
	err = cgr__device_error(s->dev);
	if (err)
		return err;
	cgr__event_lock(e);
	ops = e->ops;
	cgr__event_unlock(e);
	if (ops != NULL && ops != s->dev->ops) {
		/* An event of another backend: s polls a snapshot of its
		 * current record. */
		struct cgr__sop op = { .kind = CGR__SOP_WAITE };
		int ret = ops->event_snap(e, &op.u.waite.snap,
					  &op.u.waite.pos);
		if (ret != 0)
			return ret < 0 ? ret : 0;
		op.u.waite.ops = ops;
		ret = s->dev->ops->enqueue(s, &op);
		if (ret < 0)
			ops->snap_put(op.u.waite.snap);
		return ret;
	}
	return s->dev->ops->stream_wait_event(s, e);
}
