/*
 * run/worker.c: the worker side of a compiled graph.  The worker thread
 * runs its program once per execution, in sequence order: READ waits for a
 * channel's announcement (spinning, then parking on the worker's
 * doorbell), COMPUTE calls the task with values that point into the
 * producers' buffer slots, COLL runs the worker's share of a collective
 * (or issues it to a stream, stream.c), WAIT and SWAIT join the streams,
 * WRITE announces the outputs on every channel that carries them.
 * Teardown sets the graph's stop word and rings the doorbell; the worker
 * notices at its next wait or between executions and leaves the program.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "run/run.h"

/* Records one operation, while room is left (never wraps: a reader may be
 * looking at the records already published). */
void cgr__trace_record(struct cgr__prog *p, const struct cgr__op *op,
		       uint64_t seq, int64_t t0)
{
	struct cgr__tbuf *t = p->trace;
	uint32_t n = atomic_load_explicit(&t->n, memory_order_relaxed);

	if (n >= p->trace_cap)
		return;
	t->ev[n] = (struct cgr__trace_ev){ t0, cgr__now_ns(), seq,
					   (int32_t)(op - p->ops), -1 };
	/* T1: publishes the record; pairs with the exporter's acquire. */
	atomic_store_explicit(&t->n, n + 1, memory_order_release);
}

/* A stream job's record (a collective's or a stream task's), on stream
 * s's executor. */
void cgr__strace_record(struct cgr__prog *p, int s,
			const struct cgr__coll_rt *cr,
			const struct cgr_task_ctx *tc, uint64_t seq,
			int64_t t0)
{
	struct cgr__tbuf *t = p->strace[s];
	uint32_t n = atomic_load_explicit(&t->n, memory_order_relaxed);

	if (n >= p->trace_cap)
		return;
	t->ev[n] = (struct cgr__trace_ev){
		t0, cgr__now_ns(), seq, cr != NULL ? cr->opi : -1,
		tc != NULL ? (int32_t)(tc - p->tcs) : -1
	};
	/* T1: publishes the record; pairs with the exporter's acquire. */
	atomic_store_explicit(&t->n, n + 1, memory_order_release);
}

/* ---- tasks ---------------------------------------------------------- */

/* Every output of tc's execution becomes an error value arising here
 * (code, text). */
static void task_outputs_error(struct cgr_task_ctx *tc, uint64_t seq,
			       int code, const char *text)
{
	struct cgr_compiled *c = tc->c;
	const struct cgr__origin o = { "task", tc->name, tc->w->name, seq };

	for (size_t i = 0; i < tc->nout; i++) {
		struct cgr__port *p = &c->ports[tc->out_ports[i]];
		cgr__error_store(cgr__port_slot(p, seq), p->cap, code, &o, text);
	}
}

static void task_fail(struct cgr_task_ctx *tc, int ret)
{
	int code = tc->err_code;

	if (code == 0)
		code = ret < 0 ? ret : CGR_ETASK;
	task_outputs_error(tc, tc->seq, code,
			   tc->err_set && tc->errmsg[0] ? tc->errmsg :
							  cgr_strerror(code));
}

/* Stores the outputs the task function filled in (a stream task's data
 * copied by its stream, after its work). */
static void task_store(struct cgr_task_ctx *tc, uint64_t seq)
{
	struct cgr_compiled *c = tc->c;

	for (size_t o = 0; o < tc->nout; o++) {
		struct cgr__port *p = &c->ports[tc->out_ports[o]];
		struct cgr__slot_hdr *h = cgr__port_slot(p, seq);
		const cgr_value *v = &tc->outv[o];
		const struct cgr__origin org = { "task", tc->name, tc->w->name,
						 seq };
		char msg[400];
		int ret;
		if (v->kind == CGR_VALUE_ERROR) {
			/* An error value it outputs arises here. */
			cgr__error_store(h, p->cap, v->code, &org,
					 v->u.error.msg ? v->u.error.msg : "");
			continue;
		}
		ret = cgr__value_store_port(p, seq, v,
					    tc->stream ? tc->s : NULL);
		if (ret == 0)
			continue;
		/* The slot holds an error value of no origin: its text. */
		snprintf(msg, sizeof(msg), "output %zu: %s", o,
			 (const char *)cgr__slot_data(h));
		cgr__error_store(h, p->cap, ret, &org, msg);
	}
}

/*
 * Asks for the slot the next task of this program writes first, for
 * writing: in a long program the slots of an execution are far apart
 * from the last one that used them (max_inflight executions ago), and a
 * write to a line not in the cache waits for memory.  The next task's
 * context and ports lie next to this one's.
 */
static inline void cgr__task_prefetch(const struct cgr_task_ctx *tc,
				      uint64_t seq)
{
	const struct cgr__prog *p = tc->prog;
	const struct cgr_task_ctx *nt = tc + 1;
	const unsigned char *h;

	if (nt >= p->tcs + p->ntcs || nt->nout == 0)
		return;
	h = (const unsigned char *)cgr__port_slot(
		&tc->c->ports[nt->out_ports[0]], seq);
	__builtin_prefetch(h, 1, 3);
	__builtin_prefetch(h + CGR__SLOT_HDR, 1, 3);
}

void cgr__task_run(struct cgr_task_ctx *tc, uint64_t seq)
{
	struct cgr_compiled *c = tc->c;
	cgr_worker *w = tc->w;
	struct cgr__slot_hdr *err = NULL;
	int ret;

	tc->seq = seq;
	cgr__task_prefetch(tc, seq);
	for (size_t i = 0; i < tc->nin; i++) {
		const struct cgr__port *p = &c->ports[tc->in_ports[i]];
		struct cgr__slot_hdr *h = cgr__port_slot(p, seq);
		if (cgr__unlikely(c->seg != NULL) &&
		    cgr__port_slot_check(p, h) < 0) {
			/* Written by another process, and not right. */
			task_outputs_error(tc, seq, CGR_ECORRUPT,
					   "an input's slot holds no valid "
					   "value (from another process)");
			return;
		}
		cgr__value_load_view(h, p->cap, &tc->inv[i],
				     tc->views != NULL ? &tc->views[i] : NULL);
		if (cgr__unlikely(tc->inv[i].kind == CGR_VALUE_ERROR &&
				  h->kind != CGR_VALUE_ERROR)) {
			task_outputs_error(tc, seq, tc->inv[i].code,
					   tc->inv[i].u.error.msg);
			return;
		}
		if (h->kind == CGR_VALUE_ERROR && err == NULL)
			err = h;
	}
	if (err != NULL) {
		/* An error value skips the task and reaches every output,
		 * its origin kept, the task added to its path. */
		char hop[CGR__ERR_NAME + 8];
		snprintf(hop, sizeof(hop), "task %s", tc->name);
		for (size_t o = 0; o < tc->nout; o++) {
			struct cgr__port *p = &c->ports[tc->out_ports[o]];
			cgr__error_forward(cgr__port_slot(p, seq), p->cap, err,
					   hop);
		}
		return;
	}
	for (size_t o = 0; o < tc->nout; o++)
		memset(&tc->outv[o], 0, sizeof(tc->outv[o]));
	tc->err_code = 0;
	tc->err_set = false; /* errmsg is cold: not touched unless set */
	atomic_store_explicit(&w->current_task, tc->name, memory_order_relaxed);
	atomic_store_explicit(&w->current_seq, seq, memory_order_relaxed);
	ret = tc->fn(tc, w->state, tc->inv, tc->nin, tc->outv, tc->nout);
	atomic_store_explicit(&w->current_task, NULL, memory_order_relaxed);
	if (cgr__comm_nheld != 0)
		cgr__comm_drop_held(); /* what cgr_task_comm took */
	if (ret != 0) {
		/* A stream task's work may still write its output buffers:
		 * the error values go in once it is done, not under it. */
		if (tc->stream)
			(void)cgr_stream_synchronize(tc->s, -1);
		task_fail(tc, ret);
	} else {
		task_store(tc, seq);
	}
	cgr__fault_slot_after(tc, seq);
}

/* ---- the program ---------------------------------------------------- */

/* A COMPUTE; a worker whose device failed ends its device and stream
 * tasks in error values (failure.c). */
static int run_compute(struct cgr__prog *p, struct cgr_task_ctx *tc,
		       uint64_t seq, struct cgr__reactor *r)
{
	int ret;

	if (p->dead && (tc->stream || tc->device)) {
		cgr__task_dead(tc, seq);
		return 0;
	}
	if (!tc->stream) {
		cgr__task_run(tc, seq);
		if (tc->device)
			cgr__prog_check_device(p);
		return 0;
	}
	ret = cgr__task_issue(tc, seq, r);
	if (ret < 0 && ret != -ECANCELED) {
		cgr__prog_device_failed(p, ret, "enqueueing a task");
		cgr__task_dead(tc, seq);
		ret = 0;
	}
	return ret;
}

/* A COLL: to its stream (overlap) or the NCCL queue, or run here. */
static int run_coll(cgr_worker *w, struct cgr__coll_rt *cr, uint64_t seq,
		    struct cgr__reactor *r)
{
	int ret = 0;

	if (cr->async && cr->nccl)
		return cgr__launch_issue(cr, seq, r);
	if (cr->async)
		return cgr__coll_issue(cr, seq, r);
	atomic_store_explicit(&w->current_task, cr->name,
			      memory_order_relaxed);
	if (cr->nccl) {
		ret = cgr__launch_issue(cr, seq, r);
		if (ret == 0)
			ret = cgr__wait_done(cr->c, w, r, &cr->done, seq + 1);
	} else {
		ret = cgr__coll_run(cr, seq, r);
	}
	atomic_store_explicit(&w->current_task, NULL, memory_order_relaxed);
	return ret;
}

/* One operation of execution seq.  Returns 0, or negative: the graph
 * stops (-ECANCELED) or a stream refused work. */
static int run_op(cgr_worker *w, struct cgr__prog *p, struct cgr__op *op,
		  uint64_t seq, struct cgr__reactor *r)
{
	struct cgr_compiled *c = p->c;
	uint64_t got;
	int ret = 0;

	switch (op->kind) {
	case CGR__OP_READ: {
		struct cgr__chan *ch = &c->chans[op->chan];
		ret = cgr__chan_read(ch, r, cgr__wbell(c, w), &c->ctl->stop,
				     c->p.wait_mode, c->p.spin_ns, &got);
		cgr__c_acquire(c);
		if (ret == 0 && cgr__unlikely(got != seq))
			cgr__err(&c->ctx->log,
				 "worker %s: channel for %s carried execution "
				 "%llu, expected %llu",
				 w->name, c->ports[ch->port].name,
				 (unsigned long long)got,
				 (unsigned long long)seq);
		break;
	}
	case CGR__OP_COMPUTE:
		return run_compute(p, op->tc, seq, r);
	case CGR__OP_COLL:
		return run_coll(w, op->coll, seq, r);
	case CGR__OP_WAIT:
		if (op->coll != NULL && !op->prev)
			cgr__held_run(op->coll, seq);
		return cgr__wait_done(c, w, r,
				      op->tc != NULL ? &op->tc->done :
						       &op->coll->done,
				      seq + !op->prev);
	case CGR__OP_RUN:
		cgr__held_run(op->coll, seq);
		break;
	case CGR__OP_SWAIT:
		if (p->dead)
			break; /* nothing runs on its streams any more */
		/* The wait goes on the stream behind the jobs held before. */
		if (cgr_event_query(op->tc->ev[seq & (c->nslots - 1)]) != 1)
			ret = cgr__held_flush(p, op->coll->sclass);
		if (ret == 0)
			ret = cgr_stream_wait_event(
				op->coll->s, op->tc->ev[seq & (c->nslots - 1)]);
		if (ret < 0) {
			cgr__prog_device_failed(p, ret, "a stream wait");
			ret = 0;
		}
		break;
	case CGR__OP_WRITE:
		cgr__c_release(c);
		for (size_t k = 0; k < op->nchans && ret == 0; k++)
			ret = cgr__chan_write(&c->chans[op->chans[k]], seq,
					      &c->ctl->stop, CGR_FOREVER);
		if (p->xpoll != NULL) /* to readers on other hosts: now */
			p->xpoll(p->xpoll_arg);
		break;
	default:
		break;
	}
	return ret;
}

int cgr__worker_step(cgr_worker *w, struct cgr__prog *p, const void *op,
		     uint64_t seq, struct cgr__reactor *r)
{
	return run_op(w, p, (struct cgr__op *)op, seq, r);
}

void cgr__worker_run(cgr_worker *w, struct cgr__prog *p, struct cgr__reactor *r)
{
	struct cgr_compiled *c = p->c;
	uint64_t seq;
	int ret = 0;

	if (p->lq != NULL || p->watch || p->xpoll != NULL) {
		/* NCCL collectives progress, the device is watched while
		 * stream work is out, and values to and from other hosts
		 * move, whenever the reactor waits. */
		r->poll = cgr__prog_poll;
		r->poll_arg = p;
		r->poll_often = p->xpoll != NULL;
	}
	for (seq = 0; ret == 0; seq++) {
		if (atomic_load_explicit(&c->ctl->stop, memory_order_acquire))
			break;
		/* A1: pairs with cgr_execute's release. */
		if (p->gate &&
		    atomic_load_explicit(&c->ctl->admitted,
					 memory_order_acquire) <= seq &&
		    (ret = cgr__wait_done(c, w, r, &c->ctl->admitted,
					  seq + 1)) < 0)
			continue; /* leaves, in execution seq */
		for (size_t i = 0; i < p->nops && ret == 0; i++) {
			int64_t t0 = p->trace != NULL ? cgr__now_ns() : 0;
			ret = run_op(w, p, &p->ops[i], seq, r);
			/* A RUN's job, if it ran, has its stream's record. */
			if (ret == 0 && p->trace != NULL &&
			    p->ops[i].kind != CGR__OP_RUN)
				cgr__trace_record(p, &p->ops[i], seq, t0);
			if (cgr__unlikely(p->lq_head != p->lq_tail))
				cgr__launch_progress(p);
		}
		if (ret == 0)
			atomic_store_explicit(&p->done_seq, seq + 1,
					      memory_order_relaxed);
	}
	if (ret < 0)
		seq--; /* the execution it left in */
	/* Not teardown: an operation failed that should not (a device's
	 * failure does not end up here, failure.c). */
	if (ret < 0 && ret != -ECANCELED &&
	    !atomic_load_explicit(&c->ctl->stop, memory_order_acquire))
		cgr__err(&c->ctx->log,
			 "worker %s left the graph at execution %llu: %s (%s); "
			 "its executions end at the get timeout",
			 w->name, (unsigned long long)seq, cgr_err_name(ret),
			 cgr_strerror(ret));
	cgr__prog_leave(p, r);
}

void cgr__prog_leave(struct cgr__prog *p, struct cgr__reactor *r)
{
	struct cgr_compiled *c = p->c;

	/* Jobs held for the thread go to their streams, which drop them if
	 * the graph stopped.  The communication streams may still run
	 * collectives of this graph: teardown stopped and aborted them, so
	 * this is short. */
	for (int s = 0; s < CGR__NSTREAMS; s++)
		if (p->streams[s] != NULL)
			cgr__held_flush(p, s);
	/* The compute stream's work (stream tasks') is the user's: not cut
	 * short, however long it takes (the worker leaves when it ends;
	 * teardown counts the program as held meanwhile, so what the work
	 * writes stays allocated). */
	for (int s = 0; s < CGR__NSTREAMS_ALL; s++)
		if (p->streams[s] != NULL)
			cgr_stream_synchronize(p->streams[s],
					       s == CGR__S_COMP ? -1 :
								  2000000000);
	r->poll = NULL;
	r->poll_arg = NULL;
	r->poll_often = false;
	cgr__launch_drain(p);
	/* W1: the last touch of the program; pairs with teardown's wait. */
	cgr__future_complete(&p->left, p->left_gen, 0);
	cgr__compiled_unref(c);
}

/* ---- inside a task ------------------------------------------------ */

int cgr_task_comm(cgr_task_ctx *tc, uint64_t id, cgr_comm **out, int *rank)
{
	if (tc == NULL || out == NULL || rank == NULL || tc->w == NULL)
		return -EINVAL;
	return cgr__comm_take(tc->w->ctx, id, tc->w, out, rank);
}


void *cgr_task_output_buffer(cgr_task_ctx *tc, size_t i, size_t bytes)
{
	struct cgr__port *p;

	if (tc == NULL || i >= tc->nout)
		return NULL;
	p = &tc->c->ports[tc->out_ports[i]];
	if (bytes > p->cap)
		return NULL;
	if (p->dmem != NULL) /* a device output's: device memory */
		return cgr__port_data(p, tc->seq);
	return cgr__slot_where(cgr__port_slot(p, tc->seq), bytes);
}

cgr_stream *cgr_task_stream(cgr_task_ctx *tc)
{
	return tc != NULL && tc->stream ? tc->s : NULL;
}

void cgr_task_set_error(cgr_task_ctx *tc, int code, const char *fmt, ...)
{
	va_list ap;

	if (tc == NULL)
		return;
	tc->err_code = code;
	tc->err_set = true;
	va_start(ap, fmt);
	vsnprintf(tc->errmsg, sizeof(tc->errmsg), fmt, ap);
	va_end(ap);
}

void *cgr_task_arg(const cgr_task_ctx *tc)
{
	return tc != NULL ? tc->arg : NULL;
}

uint64_t cgr_task_seq(const cgr_task_ctx *tc)
{
	return tc != NULL ? tc->seq : 0;
}

cgr_worker *cgr_task_worker(const cgr_task_ctx *tc)
{
	return tc != NULL ? tc->w : NULL;
}
