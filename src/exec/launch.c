/*
 * exec/launch.c: collectives on NCCL with overlap.  NCCL needs every
 * device to see the operations of all its communicators in one order, so
 * a worker's NCCL collectives form one queue (the schedule's NCCL stream,
 * CGR__S_NCCL, in the global order): the thread issues a job (its input
 * described) and goes on; the worker's reactor, whenever it waits (its
 * poll hook) and between operations, advances the queue's head: posts
 * its description on the board, collects everybody's, judges, enqueues
 * the NCCL operation on its CUDA stream, then polls the slot's event.
 * When the head is done its fused WRITE runs and done is published (D1),
 * and the next job starts: one job at a time, as on a stream, which is
 * what the compiler's schedule model (verify.c, prune.c) assumes.
 *
 * A failure (the communicator, the device) turns the job's outputs into
 * error values; the job still completes, so no reader waits forever.
 */
#include <errno.h>

#include "exec/exec.h"

enum { L_NEW, L_POSTED, L_RUNNING };

/* The queue's head job finished: its fused WRITE, done. */
static void complete(struct cgr__prog *p, struct cgr__ljob *j)
{
	struct cgr__coll_rt *cr = j->cr;
	struct cgr_compiled *c = p->c;
	const struct cgr__op *fw = cr->fused_write;

	for (size_t k = 0; fw != NULL && k < fw->nchans; k++)
		cgr__chan_write(&c->chans[fw->chans[k]], j->seq, &c->stop,
				CGR_FOREVER);
	if (p->strace[CGR__S_NCCL] != NULL)
		cgr__strace_record(p, CGR__S_NCCL, cr, NULL, j->seq, j->t0);
	/* D1: publishes the outputs; pairs with D2. */
	atomic_store_explicit(&cr->done, j->seq + 1, memory_order_release);
	cgr__bell_ring(&cr->w->bell);
	p->lq_head++;
}

/* Advances the head job as far as it goes; whether it moved. */
static bool step(struct cgr__prog *p, struct cgr__ljob *j)
{
	struct cgr__coll_rt *cr = j->cr;

	switch (j->state) {
	case L_NEW:
		j->agreed = cgr__coll_needs_agree(cr);
		if (j->agreed &&
		    cgr__board_try_post(cr->board, cr->rank, j->seq,
					cr->mine) != 0)
			return false;
		j->state = L_POSTED;
		return true;
	case L_POSTED:
		if (j->agreed &&
		    cgr__board_try_collect(cr->board, cr->rank, j->seq,
					   cr->cached) != 0)
			return false;
		j->t0 = p->strace[CGR__S_NCCL] != NULL ? cgr__now_ns() : 0;
		cgr__coll_move(cr, j->seq, j->agreed);
		cgr__coll_device_mark(cr, j->seq);
		j->state = L_RUNNING;
		return true;
	default:
		if (cgr__coll_device_test(cr, j->seq) == 0)
			return false;
		complete(p, j);
		return true;
	}
}

bool cgr__launch_progress(void *arg)
{
	struct cgr__prog *p = arg;

	while (p->lq_head != p->lq_tail &&
	       step(p, &p->lq[p->lq_head % p->lq_cap]))
		;
	return p->lq_head != p->lq_tail;
}

int cgr__launch_issue(struct cgr__coll_rt *cr, uint64_t seq,
		      struct cgr_reactor *r)
{
	struct cgr_compiled *c = cr->c;
	struct cgr__prog *p = cr->prog;
	struct cgr__ljob *j;

	/* The slot's job from nslots executions ago must have run (and the
	 * queue has room: it holds nslots jobs per collective). */
	if (seq >= c->nslots) {
		int ret = cgr__wait_done(c, cr->w, r, &cr->done,
					 seq + 1 - c->nslots);
		if (ret < 0)
			return ret;
	}
	cgr__coll_describe(cr, seq);
	j = &p->lq[p->lq_tail++ % p->lq_cap];
	j->cr = cr;
	j->seq = seq;
	j->state = L_NEW;
	cgr__launch_progress(p);
	return 0;
}

void cgr__launch_drain(struct cgr__prog *p)
{
	/* Teardown: the communicators were aborted; what is left fails. */
	while (p->lq_head != p->lq_tail) {
		struct cgr__ljob *j = &p->lq[p->lq_head++ % p->lq_cap];
		struct cgr__coll_job *job =
			&j->cr->jobs[j->seq & (p->c->nslots - 1)];
		cgr_future_release(job->f);
		job->f = NULL;
	}
}

int cgr__reactor_wait_polled(struct cgr_reactor *r, struct cgr_bell *b,
			     cgr__ready_fn ready, void *arg,
			     const _Atomic uint32_t *cancel, int64_t spin_ns)
{
	int ret;

	r->devwait++;
	ret = cgr__reactor_wait(r, b, ready, arg, cancel, CGR_WAIT_ADAPTIVE,
				spin_ns, CGR_FOREVER);
	r->devwait--;
	return ret;
}
