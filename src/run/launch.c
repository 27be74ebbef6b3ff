/*
 * run/launch.c: collectives on NCCL.  NCCL needs every
 * device to see the operations of all its communicators in one order, so
 * a worker's NCCL collectives form one queue (the schedule's NCCL stream,
 * CGR__S_NCCL, in the global order): the thread issues a job and goes
 * on; the worker's reactor, whenever it waits (its poll hook) and between
 * operations, advances the queue's head: describes its input, posts the
 * description on the board, collects everybody's, judges, enqueues
 * the NCCL operation on its CUDA stream, then polls the slot's event.
 * When the head is done its fused WRITE runs and done is published (D1),
 * and the next job starts: one job at a time, as on a stream, which is
 * what the compiler's schedule model (verify.c, prune.c) assumes.  With
 * overlap off the thread issues and then waits for the job's done.
 * Static shapes post their description anyway and collect everybody's
 * once the data moved (the late verdict, coll.c) before completing.
 *
 * A failure (the communicator, the device) turns the job's outputs into
 * error values; the job still completes, so no reader waits forever.
 *
 * On an NCCL communicator across hosts (far) there is no board: the head
 * job posts its records' exchange on the program's far stream (an
 * allgather over the communicator's CPU communicator across the hosts,
 * run by that stream's executor, so the thread and the reactor never
 * wait for other hosts), judges once it is done, every execution (static
 * shapes compare with the first agreement), then enqueues as above.
 */
#include <errno.h>
#include <time.h>

#include "run/run.h"

enum { L_NEW, L_POSTED, L_RUNNING, L_VERDICT };

/* The queue's head job finished: its fused WRITE, done. */
static void complete(struct cgr__prog *p, struct cgr__ljob *j)
{
	struct cgr__coll_rt *cr = j->cr;
	struct cgr_compiled *c = p->c;
	const struct cgr__op *fw = cr->fused_write;

	cgr__c_release(c);
	for (size_t k = 0; fw != NULL && k < fw->nchans; k++)
		cgr__chan_write(&c->chans[fw->chans[k]], j->seq, &c->ctl->stop,
				CGR_FOREVER);
	if (fw != NULL && p->xpoll != NULL)
		p->xpoll(p->xpoll_arg);
	if (cr->async && p->strace[CGR__S_NCCL] != NULL)
		cgr__strace_record(p, CGR__S_NCCL, cr, NULL, j->seq, j->t0);
	/* D1: publishes the outputs; pairs with D2. */
	atomic_store_explicit(&cr->done, j->seq + 1, memory_order_release);
	cgr__bell_ring(cgr__wbell(cr->c, cr->w));
	p->lq_head++;
}

/* Advances the head job as far as it goes; whether it moved. */
static bool step(struct cgr__prog *p, struct cgr__ljob *j)
{
	struct cgr__coll_rt *cr = j->cr;

	switch (j->state) {
	case L_NEW:
		/* Described now, not at issue: a collective's jobs of later
		 * executions may be queued behind this one, and its
		 * description (cr->mine) is one. */
		cgr__coll_describe(cr, j->seq);
		if (cr->far) {
			/* Across hosts: every execution's records cross
			 * (no board), on the program's far stream. */
			j->agreed = true;
			j->late = false;
			if (cgr__coll_far_post(cr, j->seq, p->far_s,
					       &j->xf) < 0) {
				complete(p, j);
				return true;
			}
			j->state = L_POSTED;
			return true;
		}
		j->agreed = cgr__coll_needs_agree(cr);
		j->late = !j->agreed && cr->late != NULL;
		if ((j->agreed || j->late) &&
		    cgr__board_try_post(cr->board, cr->rank, j->seq,
					cr->mine) != 0)
			return false;
		j->state = L_POSTED;
		return true;
	case L_POSTED:
		if (cr->far) {
			bool go;
			if (cgr_future_test(j->xf) == 0)
				return false;
			go = cgr__coll_far_verdict(cr, j->seq, j->xf);
			cgr_future_release(j->xf);
			j->xf = NULL;
			if (!go) {
				complete(p, j);
				return true;
			}
		} else if (j->agreed &&
			   cgr__board_try_collect(cr->board, cr->rank, j->seq,
						  cr->cached) != 0) {
			return false;
		}
		j->t0 = p->strace[CGR__S_NCCL] != NULL ? cgr__now_ns() : 0;
		cgr__coll_move(cr, j->seq, j->agreed);
		cgr__coll_device_mark(cr, j->seq);
		j->state = L_RUNNING;
		return true;
	case L_RUNNING:
		if (cgr__coll_device_test(cr, j->seq) == 0)
			return false;
		j->state = L_VERDICT;
		return true;
	default:
		if (j->late) {
			if (cgr__board_try_collect(cr->board, cr->rank, j->seq,
						   cr->late) != 0)
				return false;
			cgr__coll_late_verdict(cr, j->seq, cr->late);
		}
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
		      struct cgr__reactor *r)
{
	struct cgr_compiled *c = cr->c;
	struct cgr__prog *p = cr->prog;
	struct cgr__ljob *j;

	/* Nothing new once the graph stops (a worker abandoned in a task
	 * comes back here): its peers are gone. */
	if (atomic_load_explicit(&c->ctl->stop, memory_order_acquire))
		return -ECANCELED;
	/* The slot's job from nslots executions ago must have run (and the
	 * queue has room: it holds nslots jobs per collective). */
	if (seq >= c->nslots) {
		int ret = cgr__wait_done(c, cr->w, r, &cr->done,
					 seq + 1 - c->nslots);
		if (ret < 0)
			return ret;
	}
	j = &p->lq[p->lq_tail++ % p->lq_cap];
	j->cr = cr;
	j->seq = seq;
	j->state = L_NEW;
	cgr__launch_progress(p);
	return 0;
}

/* Whether the job's operation may still run on the device: enqueued
 * (its future) or running (its event, recorded right after). */
static bool on_device(struct cgr__coll_job *job)
{
	if (job->f == NULL)
		return false;
	return cgr_future_test(job->f) == 0 ||
	       (job->ev != NULL && cgr_event_query(job->ev) == 0);
}

/*
 * The worker leaves (teardown, or its device failed).  Its peers may
 * have enqueued the operations its queued jobs meet, so the queue goes
 * on (posting, collecting, enqueueing, completing; the peers' drains do
 * the same) until it is empty or the drain deadline passes: a clean
 * teardown ends with every communicator whole (finalized, not aborted,
 * when freed).  What is left then may wait for a member that will never
 * come (stuck in a task): the communicator of a job enqueued is
 * aborted, which fails every rank's pending operations, and the jobs are
 * dropped.  A job not enqueued by the deadline was enqueued by nobody
 * (an agreement some member never joined, as every member that collects
 * enqueues at once; static shapes enqueue right after posting).
 */
void cgr__launch_drain(struct cgr__prog *p)
{
	int64_t deadline = atomic_load_explicit(&p->c->ctl->drain_deadline,
						memory_order_relaxed);
	long nap = 1000;

	if (deadline == 0)
		deadline = cgr__deadline(1000000000);
	while (cgr__launch_progress(p) && cgr__now_ns() < deadline) {
		struct timespec ts = { 0, nap };
		nanosleep(&ts, NULL);
		if (nap < 200000)
			nap *= 2;
	}
	while (p->lq_head != p->lq_tail) {
		struct cgr__ljob *j = &p->lq[p->lq_head++ % p->lq_cap];
		struct cgr__coll_job *job =
			&j->cr->jobs[j->seq & (p->c->nslots - 1)];
		cgr_future_release(j->xf); /* (its stream goes with c) */
		j->xf = NULL;
		if (on_device(job))
			cgr_comm_abort(j->cr->comm);
		cgr_future_release(job->f);
		job->f = NULL;
	}
}
