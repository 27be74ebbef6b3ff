/*
 * run/stream.c: overlap's stream jobs.  A collective issued to its
 * communication stream runs there as a job: the collective, then its
 * fused WRITE (the announcements of its outputs), then done = execution
 * + 1, which its worker's WAITs watch.  A stream task's function runs on
 * the worker thread and enqueues its work on the compute stream; a job
 * after that work makes the fused WRITE and publishes done the same way,
 * and the task's event for the slot is recorded after it (SWAITs of the
 * communication streams wait for that event).
 */
#include <errno.h>

#include "run/run.h"

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
		   struct cgr__reactor *r, _Atomic uint64_t *done,
		   uint64_t want)
{
	struct done_wait dw = { done, want };

	return cgr__reactor_wait(r, cgr__wbell(c, w), done_reached, &dw,
				 &c->ctl->stop, c->p.wait_mode, c->p.spin_ns,
				 CGR_FOREVER);
}

/* A WRITE fused into a stream job of program p, on the stream's
 * executor (values to readers on other hosts sent at once). */
static void fused_write(struct cgr_compiled *c, const struct cgr__prog *p,
			const struct cgr__op *fw, uint64_t seq)
{
	cgr__c_release(c);
	for (size_t k = 0; fw != NULL && k < fw->nchans; k++)
		cgr__chan_write(&c->chans[fw->chans[k]], seq, &c->ctl->stop,
				CGR_FOREVER);
	if (fw != NULL && p != NULL && p->xpoll != NULL)
		p->xpoll(p->xpoll_arg);
}

/* Whether the thread runs the job of execution seq (struct
 * cgr__adapt). */
static bool adapt_here(const struct cgr_compiled *c, struct cgr__adapt *ad,
		       uint64_t seq)
{
	if (c->p.inline_ns == 0 || cgr__fault_on(c))
		return false;
	return atomic_load_explicit(&ad->last_ns, memory_order_relaxed) <
		       c->p.inline_ns ||
	       seq >= ad->probe_at;
}

/* After the thread ran the job of execution seq: too long, and it goes
 * to its stream for a while. */
static void adapt_after(const struct cgr_compiled *c, struct cgr__adapt *ad,
			uint64_t seq)
{
	if (atomic_load_explicit(&ad->last_ns, memory_order_relaxed) <
	    c->p.inline_ns) {
		ad->gap = 0;
		return;
	}
	ad->gap = ad->gap == 0 ? 16 : ad->gap < 4096 ? 2 * ad->gap : 4096;
	ad->probe_at = seq + ad->gap;
}

/* What a CPU copy costs per byte, in picoseconds (4 GB/s: the CPU
 * communicator moves a buffer at about 10 GB/s here, less when cold). */
#define CPU_PS_PER_BYTE 250

/* Whether the thread runs collective cr's next job: its work (the bytes
 * it moved last, its modelled time) costs less than inline_ns.  Every
 * member decides alike from the same agreed bytes.  Its duration would
 * not do: it includes the wait for its peers, which overlap off waits
 * as well, and which is long exactly while the peers' jobs sit on
 * streams. */
static bool coll_here(const struct cgr__coll_rt *cr)
{
	const struct cgr_compiled *c = cr->c;
	size_t b = atomic_load_explicit(&cr->moved, memory_order_relaxed);

	if (c->p.inline_ns == 0 || cgr__fault_on(c) ||
	    b > (size_t)c->p.inline_ns * 1000 / CPU_PS_PER_BYTE)
		return false;
	return c->p.sim_comm_ns + (int64_t)b * CPU_PS_PER_BYTE / 1000 <
	       c->p.inline_ns;
}

/* The collective, its fused WRITE, done: on the stream's executor, or
 * on the thread at its RUN. */
static void coll_job_run(void *arg)
{
	struct cgr__coll_job *job = arg;
	struct cgr__coll_rt *cr = job->cr;
	struct cgr_compiled *c = cr->c;
	struct cgr__prog *p = cr->prog;
	uint64_t seq = job->seq;
	int64_t t0 = cgr__now_ns();

	cgr__fault_coll_before(cr, seq);
	cgr__coll_run(cr, seq, NULL);
	cgr__fault_coll_after(cr, seq);
	fused_write(c, p, cr->fused_write, seq);
	if (p->strace[cr->sclass] != NULL)
		cgr__strace_record(p, cr->sclass, cr, NULL, seq, t0);
	/* D1: publishes the outputs; pairs with D2. */
	atomic_store_explicit(&cr->done, seq + 1, memory_order_release);
	cgr__bell_ring(cgr__wbell(cr->c, cr->w));
}

int cgr__held_flush(struct cgr__prog *p, int s)
{
	int ret = 0;

	while (p->hhead[s] < p->htail[s] && ret == 0)
		ret = cgr_stream_launch_host(p->streams[s], coll_job_run,
					     p->held[s][p->hhead[s]++]);
	p->hhead[s] = p->htail[s] = 0;
	return ret;
}

int cgr__coll_issue(struct cgr__coll_rt *cr, uint64_t seq,
		    struct cgr__reactor *r)
{
	struct cgr_compiled *c = cr->c;
	struct cgr__prog *p = cr->prog;
	struct cgr__coll_job *job = &cr->jobs[seq & (c->nslots - 1)];
	int s = cr->sclass, ret;

	/* The slot's job from nslots executions ago must have run. */
	if (seq >= c->nslots) {
		ret = cgr__wait_done(c, cr->w, r, &cr->done,
				     seq + 1 - c->nslots);
		if (ret < 0)
			return ret;
	}
	job->seq = seq;
	/* Short, and its stream has nothing before it (held jobs aside):
	 * held for the thread, which runs it at its RUN. */
	if (p->htail[s] < p->hcap[s] && coll_here(cr) &&
	    (p->htail[s] > 0 || cgr__stream_idle(cr->s))) {
		p->held[s][p->htail[s]++] = job;
		return 0;
	}
	ret = cgr__held_flush(p, s);
	if (ret < 0)
		return ret;
	return cgr_stream_launch_host(cr->s, coll_job_run, job);
}

/* Runs the held job at the head of stream class s on the thread. */
static struct cgr__coll_job *held_pop_run(struct cgr__prog *p, int s)
{
	struct cgr__coll_job *job = p->held[s][p->hhead[s]];
	struct cgr__coll_rt *cr = job->cr;

	if (++p->hhead[s] == p->htail[s])
		p->hhead[s] = p->htail[s] = 0;
	/* As the stream would: a failed device runs no host function. */
	if (cgr__device_error(cr->s->dev) == 0) {
		coll_job_run(job);
		cr->inline_runs++;
	}
	return job;
}

void cgr__held_run(struct cgr__coll_rt *cr, uint64_t seq)
{
	struct cgr__prog *p = cr->prog;
	int s = cr->sclass;
	bool held = false;

	for (uint32_t k = p->hhead[s]; k < p->htail[s]; k++)
		held |= p->held[s][k]->cr == cr && p->held[s][k]->seq == seq;
	while (held && p->hhead[s] < p->htail[s]) {
		struct cgr__coll_job *job = held_pop_run(p, s);
		if (job->cr == cr && job->seq == seq)
			break;
	}
}

/* The outputs of stream task tc for execution seq are in (error values,
 * once its device failed): its fused WRITE, then done. */
void cgr__task_job_finish(struct cgr_task_ctx *tc, uint64_t seq)
{
	fused_write(tc->c, tc->prog, tc->fused_write, seq);
	/* D3: publishes the outputs; pairs with D2. */
	atomic_store_explicit(&tc->done, seq + 1, memory_order_release);
	cgr__bell_ring(cgr__wbell(tc->c, tc->w));
}

/* The stream reached the task's work (trace, and its duration). */
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
	if (job->t0 != 0)
		atomic_store_explicit(&tc->ad.last_ns, cgr__now_ns() - job->t0,
				      memory_order_relaxed);
	cgr__fault_task_after(tc, job->seq);
	if (p->strace[CGR__S_COMP] != NULL)
		cgr__strace_record(p, CGR__S_COMP, NULL, tc, job->seq, job->t0);
	cgr__task_job_finish(tc, job->seq);
}

/* Enqueues the task's work (its function) between its markers. */
static int task_enqueue(struct cgr_task_ctx *tc, struct cgr__task_job *job,
			uint64_t seq, bool sim)
{
	int ret;

	job->t0 = 0;
	if ((tc->prog->strace[CGR__S_COMP] != NULL || sim) &&
	    (ret = cgr_stream_launch_host(tc->s, task_job_start, job)) < 0)
		return ret;
	cgr__task_run(tc, seq);
	return cgr_stream_launch_host(tc->s, task_job_run, job);
}

int cgr__task_issue(struct cgr_task_ctx *tc, uint64_t seq,
		    struct cgr__reactor *r)
{
	struct cgr_compiled *c = tc->c;
	uint32_t slot = (uint32_t)(seq & (c->nslots - 1));
	struct cgr__task_job *job = &tc->jobs[slot];
	bool sim = cgr__stream_is_sim(tc->s);
	bool here = sim && adapt_here(c, &tc->ad, seq);
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
	/* Short work: the thread runs it once the function has enqueued it,
	 * where overlap off waits for it. */
	if (here)
		cgr__stream_hold(tc->s);
	ret = task_enqueue(tc, job, seq, sim);
	if (ret == 0)
		tc->issued = seq + 1;
	if (ret == 0)
		ret = cgr_event_record(tc->ev[slot], tc->s);
	if (here && cgr__stream_drain(tc->s) == 1) {
		adapt_after(c, &tc->ad, seq);
		tc->inline_runs++;
	}
	if (ret < 0 || tc->async)
		return ret;
	return cgr__wait_done(c, tc->w, r, &tc->done, seq + 1);
}
