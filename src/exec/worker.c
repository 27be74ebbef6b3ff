/*
 * exec/worker.c: the worker side of a compiled graph.  The worker thread
 * runs its program once per execution, in sequence order: READ waits for a
 * ring message (spinning, then parking on the worker's doorbell), COMPUTE
 * calls the task with values that point into the producers' buffer slots,
 * WRITE announces the outputs on every ring that carries them.  Teardown
 * sets the graph's stop word and rings the doorbell; the worker notices at
 * its next wait or between executions and leaves the program.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "graph/internal.h"

/* Records one operation, while room is left (never wraps: a reader may be
 * looking at the records already published). */
static void cgr__trace_record(struct cgr__prog *p, const struct cgr__op *op,
			      uint64_t seq, int64_t t0)
{
	uint32_t n = atomic_load_explicit(&p->trace_n, memory_order_relaxed);

	if (n >= p->trace_cap)
		return;
	p->trace[n].t0 = t0;
	p->trace[n].t1 = cgr__now_ns();
	p->trace[n].seq = seq;
	p->trace[n].op = op;
	/* T1: publishes the record; pairs with the exporter's acquire. */
	atomic_store_explicit(&p->trace_n, n + 1, memory_order_release);
}

/* A stream job's record (a collective's or a stream task's), on stream
 * s's executor. */
static void cgr__strace_record(struct cgr__prog *p, int s,
			       const struct cgr__coll_rt *cr,
			       const struct cgr_task_ctx *tc, uint64_t seq,
			       int64_t t0)
{
	uint32_t n =
		atomic_load_explicit(&p->strace_n[s], memory_order_relaxed);

	if (n >= p->trace_cap)
		return;
	p->strace[s][n] = (struct cgr__trace_ev){ t0, cgr__now_ns(), seq, NULL,
						  cr, tc };
	/* T1: publishes the record; pairs with the exporter's acquire. */
	atomic_store_explicit(&p->strace_n[s], n + 1, memory_order_release);
}

static bool cgr__ring_ready(void *arg)
{
	return cgr_ring_peek(arg) != NULL;
}

static void cgr__task_fail(struct cgr_task_ctx *tc, int ret)
{
	struct cgr_compiled *c = tc->c;
	char msg[512];
	int code = tc->err_code;

	if (code == 0)
		code = ret < 0 ? ret : CGR_ETASK;
	snprintf(msg, sizeof(msg), "task %s (worker %s, execution %llu): %s",
		 tc->name, tc->w->name, (unsigned long long)tc->seq,
		 tc->errmsg[0] ? tc->errmsg : cgr_strerror(code));
	for (size_t o = 0; o < tc->nout; o++) {
		struct cgr__port *p = &c->ports[tc->out_ports[o]];
		cgr__value_store_error(cgr__port_slot(p, tc->seq), p->cap, code,
				       msg);
	}
}

static void cgr__task_run(struct cgr_task_ctx *tc, uint64_t seq)
{
	struct cgr_compiled *c = tc->c;
	cgr_worker *w = tc->w;
	struct cgr__slot_hdr *err = NULL;
	int ret;

	tc->seq = seq;
	for (size_t i = 0; i < tc->nin; i++) {
		struct cgr__slot_hdr *h =
			cgr__port_slot(&c->ports[tc->in_ports[i]], seq);
		cgr__value_load(h, &tc->inv[i]);
		if (h->kind == CGR_VALUE_ERROR && err == NULL)
			err = h;
	}
	if (err != NULL) {
		/* An error value skips the task and reaches every output. */
		for (size_t o = 0; o < tc->nout; o++) {
			struct cgr__port *p = &c->ports[tc->out_ports[o]];
			cgr__value_store_error(cgr__port_slot(p, seq), p->cap,
					       err->code,
					       (const char *)cgr__slot_data(err));
		}
		return;
	}
	for (size_t o = 0; o < tc->nout; o++)
		memset(&tc->outv[o], 0, sizeof(tc->outv[o]));
	tc->err_code = 0;
	tc->errmsg[0] = 0;
	atomic_store_explicit(&w->current_task, tc->name, memory_order_relaxed);
	atomic_store_explicit(&w->current_seq, seq, memory_order_relaxed);
	ret = tc->fn(tc, w->state, tc->inv, tc->nin, tc->outv, tc->nout);
	atomic_store_explicit(&w->current_task, NULL, memory_order_relaxed);
	if (ret != 0) {
		cgr__task_fail(tc, ret);
		return;
	}
	for (size_t o = 0; o < tc->nout; o++) {
		struct cgr__port *p = &c->ports[tc->out_ports[o]];
		struct cgr__slot_hdr *h = cgr__port_slot(p, seq);
		if (tc->outv[o].kind == CGR_VALUE_ERROR) {
			cgr__value_store_error(h, p->cap, tc->outv[o].code,
					       tc->outv[o].u.error.msg ?
						       tc->outv[o].u.error.msg :
						       "");
			continue;
		}
		ret = cgr__value_store_on(h, p->cap, &tc->outv[o],
					  tc->stream ? tc->s : NULL);
		if (ret < 0) {
			char msg[400];
			snprintf(msg, sizeof(msg),
				 "task %s (worker %s, execution %llu) output "
				 "%zu: %s",
				 tc->name, w->name, (unsigned long long)seq, o,
				 (const char *)cgr__slot_data(h));
			cgr__value_store_error(h, p->cap, ret, msg);
		}
	}
}

/* ---- overlap: collectives on the communication stream ------------- */

struct cgr__done_wait {
	_Atomic uint64_t *done; /* a collective's or a stream task's */
	uint64_t want;
};

static bool cgr__done_reached(void *arg)
{
	struct cgr__done_wait *dw = arg;
	/* D2: pairs with D1 and D3: the outputs are in their slots. */
	return atomic_load_explicit(dw->done, memory_order_acquire) >=
	       dw->want;
}

/* Waits on w's reactor until *done (a stream job's count) reaches want:
 * 0, or negative when the graph stops. */
static int cgr__wait_done(struct cgr_compiled *c, cgr_worker *w,
			  struct cgr_reactor *r, _Atomic uint64_t *done,
			  uint64_t want)
{
	struct cgr__done_wait dw = { done, want };

	return cgr__reactor_wait(r, &w->bell, cgr__done_reached, &dw, &c->stop,
				 c->p.wait_mode, c->p.spin_ns, CGR_FOREVER);
}

/* Tests only: a hash of (execution, member's collective) that spreads
 * the delays, differently on every member. */
static uint64_t cgr__debug_mix(uint64_t seq, const void *cr)
{
	uint64_t h = (seq + 1) * 0x9E3779B97F4A7C15ull +
		     (uint64_t)(uintptr_t)cr;
	h ^= h >> 31;
	h *= 0xD6E8FEB86659FD93ull;
	return h ^ (h >> 29);
}

/*
 * Tests only (debug_coll_delay_ns): in some executions this member's
 * collectives on one of its streams finish late (rank = execution mod n,
 * stream class = execution / n mod CGR__NSTREAMS_ALL; the compute
 * stream's turn is cgr__task_debug_late's).  Their outputs' data
 * is garbled, the delay passes, then it is restored, all before done is
 * published: a reader that skipped its WAIT sees garbage even when the
 * other members finished at once and told it so.  The turn goes round so
 * that each (member, stream) is the late one in a fixed share.
 */
static void cgr__debug_garble(struct cgr_compiled *c, const unsigned *ports,
			      size_t n, uint64_t seq, int64_t ns)
{
	struct timespec ts = { ns / 1000000000, ns % 1000000000 };

	for (int pass = 0; pass < 2; pass++) {
		for (size_t j = 0; j < n; j++) {
			struct cgr__slot_hdr *h;
			unsigned char *d;
			if (ports[j] == CGR__NO_PORT)
				continue;
			h = cgr__port_slot(&c->ports[ports[j]], seq);
			if (h->kind != CGR_VALUE_TENSOR &&
			    h->kind != CGR_VALUE_BYTES)
				continue;
			d = cgr__slot_data(h);
			for (uint64_t b = 0; b < h->len; b++)
				d[b] ^= 0x5a;
		}
		if (pass == 0)
			nanosleep(&ts, NULL);
	}
}

static void cgr__coll_debug_late(struct cgr__coll_rt *cr, uint64_t seq,
				 int64_t ns)
{
	if (seq % (uint64_t)cr->n == (uint64_t)cr->rank &&
	    seq / (uint64_t)cr->n % CGR__NSTREAMS_ALL == (uint64_t)cr->sclass)
		cgr__debug_garble(cr->c, cr->out_ports, cr->k, seq, ns);
}

/* A WRITE fused into a stream job, on the stream's executor. */
static void cgr__fused_write(struct cgr_compiled *c, const struct cgr__op *fw,
			     uint64_t seq)
{
	struct cgr__msg m = { seq };

	for (size_t k = 0; fw != NULL && k < fw->nchans; k++) {
		struct cgr__chan *ch = &c->chans[fw->chans[k]];
		/* Rings hold max_inflight messages: never full. */
		while (cgr_ring_enqueue(&ch->prod, &m, sizeof(m)) == -EAGAIN &&
		       !atomic_load(&c->stop))
			cgr__cpu_relax();
		cgr__bell_ring(ch->consumer_bell);
	}
}

/* Runs on the stream's executor: the collective, its fused WRITE, done. */
static void cgr__coll_job_run(void *arg)
{
	struct cgr__coll_job *job = arg;
	struct cgr__coll_rt *cr = job->cr;
	struct cgr_compiled *c = cr->c;
	uint64_t seq = job->seq;
	int64_t delay = atomic_load_explicit(&c->debug_coll_delay_ns,
					     memory_order_relaxed);
	struct cgr__prog *p = cr->prog;
	int64_t t0 = p->strace[cr->sclass] != NULL ? cgr__now_ns() : 0;

	if (delay > 0) {
		/* A quarter of the late delay at most: a consumer's other
		 * inputs come well inside the late member's window. */
		uint64_t ns =
			cgr__debug_mix(seq, cr) % (uint64_t)(delay / 4 + 1);
		struct timespec ts = { (time_t)(ns / 1000000000),
				       (long)(ns % 1000000000) };
		nanosleep(&ts, NULL);
	}
	cgr__coll_run(cr, seq, NULL);
	if (delay > 0)
		cgr__coll_debug_late(cr, seq, delay);
	cgr__fused_write(c, cr->fused_write, seq);
	if (p->strace[cr->sclass] != NULL)
		cgr__strace_record(p, cr->sclass, cr, NULL, seq, t0);
	/* D1: publishes the outputs; pairs with D2. */
	atomic_store_explicit(&cr->done, seq + 1, memory_order_release);
	cgr__bell_ring(&cr->w->bell);
}

/* Issues collective cr of execution seq to the communication stream. */
static int cgr__coll_issue(struct cgr__coll_rt *cr, uint64_t seq,
			   struct cgr_reactor *r)
{
	struct cgr_compiled *c = cr->c;
	struct cgr__coll_job *job = &cr->jobs[seq & (c->nslots - 1)];

	/* The slot's job from nslots executions ago must have run. */
	if (seq >= c->nslots) {
		int ret = cgr__wait_done(c, cr->w, r, &cr->done,
					 seq + 1 - c->nslots);
		if (ret < 0)
			return ret;
	}
	job->seq = seq;
	return cgr_stream_launch_host(cr->prog->streams[cr->sclass],
				      cgr__coll_job_run, job);
}

/* ---- stream tasks: work on the compute stream ---------------------- */

/* Trace only: the stream reached the task's work. */
static void cgr__task_job_start(void *arg)
{
	struct cgr__task_job *job = arg;
	job->t0 = cgr__now_ns();
}

/*
 * Tests only (debug_coll_delay_ns): the compute stream's turn in the
 * rotation of cgr__coll_debug_late (worker = execution mod workers, stream
 * class CGR__S_COMP): that worker's stream tasks finish late, their
 * outputs' data garbled for four times the delay (a consumer may read
 * them only after a chain of collectives and other workers' stream tasks),
 * then restored, before done is published.  One late stream per execution
 * keeps the others on time, so a consumer that skipped its wait reads
 * inside the window.
 */
static void cgr__task_debug_late(struct cgr_task_ctx *tc, uint64_t seq,
				 int64_t ns)
{
	struct cgr_compiled *c = tc->c;

	if (seq % c->nprogs == (uint64_t)(tc->prog - c->progs) &&
	    seq / c->nprogs % CGR__NSTREAMS_ALL == CGR__S_COMP)
		cgr__debug_garble(c, tc->out_ports, tc->nout, seq, ns);
}

/* After the task's work on the compute stream: its fused WRITE, done. */
static void cgr__task_job_run(void *arg)
{
	struct cgr__task_job *job = arg;
	struct cgr_task_ctx *tc = job->tc;
	struct cgr_compiled *c = tc->c;
	struct cgr__prog *p = tc->prog;
	int64_t delay = atomic_load_explicit(&c->debug_coll_delay_ns,
					     memory_order_relaxed);

	if (delay > 0 && tc->async)
		cgr__task_debug_late(tc, job->seq, 4 * delay);
	cgr__fused_write(c, tc->fused_write, job->seq);
	if (p->strace[CGR__S_COMP] != NULL)
		cgr__strace_record(p, CGR__S_COMP, NULL, tc, job->seq, job->t0);
	/* D3: publishes the outputs; pairs with D2. */
	atomic_store_explicit(&tc->done, job->seq + 1, memory_order_release);
	cgr__bell_ring(&tc->w->bell);
}

/*
 * Runs stream task tc of execution seq: the function enqueues its work on
 * the compute stream, the outputs' data follows (cgr__value_store_on),
 * then the job and the event.  Without overlap the thread waits for it.
 */
static int cgr__task_issue(struct cgr_task_ctx *tc, uint64_t seq,
			   struct cgr_reactor *r)
{
	struct cgr_compiled *c = tc->c;
	uint32_t slot = (uint32_t)(seq & (c->nslots - 1));
	struct cgr__task_job *job = &tc->jobs[slot];
	int ret;

	/* The slot's job from nslots executions ago must have run. */
	if (seq >= c->nslots) {
		ret = cgr__wait_done(c, tc->w, r, &tc->done,
				     seq + 1 - c->nslots);
		if (ret < 0)
			return ret;
	}
	job->seq = seq;
	if (tc->prog->strace[CGR__S_COMP] != NULL &&
	    (ret = cgr_stream_launch_host(tc->s, cgr__task_job_start, job)) <
		    0)
		return ret;
	cgr__task_run(tc, seq);
	ret = cgr_stream_launch_host(tc->s, cgr__task_job_run, job);
	if (ret == 0)
		ret = cgr_event_record(tc->ev[slot], tc->s);
	if (ret < 0 || tc->async)
		return ret;
	return cgr__wait_done(c, tc->w, r, &tc->done, seq + 1);
}

/* Waits for room in a ring (never expected: rings hold max_inflight). */
static bool cgr__ring_has_room(void *arg)
{
	struct cgr_ring *r = arg;
	return cgr_ring_count(r) < cgr_ring_capacity(r);
}

void cgr__worker_run(cgr_worker *w, struct cgr__prog *p,
		     struct cgr_reactor *r)
{
	struct cgr_compiled *c = p->c;
	const int mode = c->p.wait_mode;
	const int64_t spin = c->p.spin_ns;
	uint64_t seq;
	int ret = 0;

	for (seq = 0;; seq++) {
		if (atomic_load_explicit(&c->stop, memory_order_acquire))
			break;
		for (size_t i = 0; i < p->nops; i++) {
			struct cgr__op *op = &p->ops[i];
			int64_t t0 = p->trace != NULL ? cgr__now_ns() : 0;
			switch (op->kind) {
			case CGR__OP_READ: {
				struct cgr__chan *ch = &c->chans[op->chan];
				const struct cgr__msg *m =
					cgr_ring_peek(&ch->cons);
				if (m == NULL) {
					ret = cgr__reactor_wait(
						r, &w->bell, cgr__ring_ready,
						&ch->cons, &c->stop, mode, spin,
						CGR_FOREVER);
					if (ret < 0)
						goto leave;
					m = cgr_ring_peek(&ch->cons);
				}
				if (cgr__unlikely(m->seq != seq))
					cgr__err(&c->ctx->log,
						 "worker %s: ring for %s "
						 "carried execution %llu, "
						 "expected %llu",
						 w->name,
						 c->ports[ch->port].name,
						 (unsigned long long)m->seq,
						 (unsigned long long)seq);
				cgr_ring_consume(&ch->cons);
				break;
			}
			case CGR__OP_COMPUTE:
				if (op->tc->stream) {
					ret = cgr__task_issue(op->tc, seq, r);
					if (ret < 0)
						goto leave;
					break;
				}
				cgr__task_run(op->tc, seq);
				break;
			case CGR__OP_COLL:
				if (op->coll->async) {
					ret = cgr__coll_issue(op->coll, seq, r);
					if (ret < 0)
						goto leave;
					break;
				}
				atomic_store_explicit(&w->current_task,
						      op->coll->name,
						      memory_order_relaxed);
				cgr__coll_run(op->coll, seq, r);
				atomic_store_explicit(&w->current_task, NULL,
						      memory_order_relaxed);
				break;
			case CGR__OP_WAIT:
				ret = cgr__wait_done(c, w, r,
						     op->tc != NULL ?
							     &op->tc->done :
							     &op->coll->done,
						     seq + !op->prev);
				if (ret < 0)
					goto leave;
				break;
			case CGR__OP_SWAIT:
				ret = cgr_stream_wait_event(
					p->streams[op->coll->sclass],
					op->tc->ev[seq & (c->nslots - 1)]);
				if (ret < 0)
					goto leave;
				break;
			case CGR__OP_WRITE: {
				struct cgr__msg m = { seq };
				for (size_t k = 0; k < op->nchans; k++) {
					struct cgr__chan *ch =
						&c->chans[op->chans[k]];
					while (cgr_ring_enqueue(&ch->prod, &m,
								sizeof(m)) ==
					       -EAGAIN) {
						ret = cgr__reactor_wait(
							r, &w->bell,
							cgr__ring_has_room,
							&ch->prod, &c->stop,
							CGR_WAIT_BUSY, 0,
							CGR_FOREVER);
						if (ret < 0)
							goto leave;
					}
					cgr__bell_ring(ch->consumer_bell);
				}
				break;
			}
			default:
				break;
			}
			if (p->trace != NULL)
				cgr__trace_record(p, op, seq, t0);
		}
		atomic_store_explicit(&p->done_seq, seq + 1,
				      memory_order_relaxed);
	}
leave:
	/* Not teardown: a stream refused work (its device failed). */
	if (ret < 0 && ret != -ECANCELED &&
	    !atomic_load_explicit(&c->stop, memory_order_acquire))
		cgr__err(&c->ctx->log,
			 "worker %s left the graph at execution %llu: %s (%s); "
			 "its executions end at the get timeout",
			 w->name, (unsigned long long)seq, cgr_err_name(ret),
			 cgr_strerror(ret));
	/* The communication streams may still run collectives of this
	 * graph: teardown stopped and aborted them, so this is short. */
	for (int s = 0; s < CGR__NSTREAMS_ALL; s++)
		if (p->streams[s] != NULL)
			cgr_stream_synchronize(p->streams[s], 2000000000);
	/* W1: the last touch of the program; pairs with teardown's wait. */
	cgr__future_complete(&p->left, p->left_gen, 0);
	cgr__compiled_unref(c);
}

/* ---- inside a task ------------------------------------------------ */

void *cgr_task_output_buffer(cgr_task_ctx *tc, size_t i, size_t bytes)
{
	struct cgr__port *p;

	if (tc == NULL || i >= tc->nout)
		return NULL;
	p = &tc->c->ports[tc->out_ports[i]];
	if (bytes > p->cap)
		return NULL;
	return cgr__slot_data(cgr__port_slot(p, tc->seq));
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
