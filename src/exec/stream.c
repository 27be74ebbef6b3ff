/*
 * exec/stream.c: overlap's stream jobs.  A collective issued to its
 * communication stream runs there as a job: the collective, then its
 * fused WRITE (the announcements of its outputs), then done = execution
 * + 1, which its worker's WAITs watch.  A stream task's function runs on
 * the worker thread and enqueues its work on the compute stream; a job
 * after that work makes the fused WRITE and publishes done the same way,
 * and the task's event for the slot is recorded after it (SWAITs of the
 * communication streams wait for that event).
 */
#include <errno.h>

#include "exec/exec.h"

struct done_wait {
	_Atomic uint64_t *done; /* a collective's or a stream task's */
	uint64_t want;
};

static bool done_reached(void *arg)
{
	struct done_wait *dw = arg;
	/* D2: pairs with D1 and D3: the outputs are in their slots. */
	return atomic_load_explicit(dw->done, memory_order_acquire) >=
	       dw->want;
}

int cgr__wait_done(struct cgr_compiled *c, cgr_worker *w,
		   struct cgr_reactor *r, _Atomic uint64_t *done,
		   uint64_t want)
{
	struct done_wait dw = { done, want };

	return cgr__reactor_wait(r, cgr__wbell(c, w), done_reached, &dw,
				 &c->ctl->stop, c->p.wait_mode, c->p.spin_ns,
				 CGR_FOREVER);
}

/* A WRITE fused into a stream job, on the stream's executor. */
static void fused_write(struct cgr_compiled *c, const struct cgr__op *fw,
			uint64_t seq)
{
	cgr__c_release(c);
	for (size_t k = 0; fw != NULL && k < fw->nchans; k++)
		cgr__chan_write(&c->chans[fw->chans[k]], seq, &c->ctl->stop,
				CGR_FOREVER);
}

/* Runs on the stream's executor: the collective, its fused WRITE, done. */
static void coll_job_run(void *arg)
{
	struct cgr__coll_job *job = arg;
	struct cgr__coll_rt *cr = job->cr;
	struct cgr_compiled *c = cr->c;
	struct cgr__prog *p = cr->prog;
	uint64_t seq = job->seq;
	int64_t t0 = p->strace[cr->sclass] != NULL ? cgr__now_ns() : 0;

	cgr__fault_coll_before(cr, seq);
	cgr__coll_run(cr, seq, NULL);
	cgr__fault_coll_after(cr, seq);
	fused_write(c, cr->fused_write, seq);
	if (p->strace[cr->sclass] != NULL)
		cgr__strace_record(p, cr->sclass, cr, NULL, seq, t0);
	/* D1: publishes the outputs; pairs with D2. */
	atomic_store_explicit(&cr->done, seq + 1, memory_order_release);
	cgr__bell_ring(cgr__wbell(cr->c, cr->w));
}

int cgr__coll_issue(struct cgr__coll_rt *cr, uint64_t seq,
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
				      coll_job_run, job);
}

/* The outputs of stream task tc for execution seq are in (error values,
 * once its device failed): its fused WRITE, then done. */
void cgr__task_job_finish(struct cgr_task_ctx *tc, uint64_t seq)
{
	fused_write(tc->c, tc->fused_write, seq);
	/* D3: publishes the outputs; pairs with D2. */
	atomic_store_explicit(&tc->done, seq + 1, memory_order_release);
	cgr__bell_ring(cgr__wbell(tc->c, tc->w));
}

/* Trace only: the stream reached the task's work. */
static void task_job_start(void *arg)
{
	struct cgr__task_job *job = arg;
	job->t0 = cgr__now_ns();
}

/* After the task's work on the compute stream: its fused WRITE, done. */
static void task_job_run(void *arg)
{
	struct cgr__task_job *job = arg;
	struct cgr_task_ctx *tc = job->tc;
	struct cgr__prog *p = tc->prog;

	/* The thread took it over: the device failed (failure.c). */
	if (atomic_flag_test_and_set(&job->claimed))
		return;
	cgr__fault_task_after(tc, job->seq);
	if (p->strace[CGR__S_COMP] != NULL)
		cgr__strace_record(p, CGR__S_COMP, NULL, tc, job->seq, job->t0);
	cgr__task_job_finish(tc, job->seq);
}

int cgr__task_issue(struct cgr_task_ctx *tc, uint64_t seq,
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
	atomic_flag_clear(&job->claimed);
	if (tc->prog->strace[CGR__S_COMP] != NULL &&
	    (ret = cgr_stream_launch_host(tc->s, task_job_start, job)) < 0)
		return ret;
	cgr__task_run(tc, seq);
	ret = cgr_stream_launch_host(tc->s, task_job_run, job);
	if (ret == 0)
		tc->issued = seq + 1;
	if (ret == 0)
		ret = cgr_event_record(tc->ev[slot], tc->s);
	if (ret < 0 || tc->async)
		return ret;
	return cgr__wait_done(c, tc->w, r, &tc->done, seq + 1);
}
