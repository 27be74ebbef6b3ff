/*
 * run/failure.c: a worker whose device failed.
 *
 * A sticky CUDA error, seen by any call on the worker's streams or by the
 * watch the reactor runs while stream work is outstanding, does not make
 * the worker leave the graph (its readers would wait forever).  From then
 * on its device work ends in CGR_EDEVICE error values: the jobs already
 * enqueued on the dead stream, which it will never run, are completed by
 * the thread (their outputs error values, their fused WRITE, done), later
 * stream and device tasks are skipped the same way, and its NCCL
 * communicators are aborted, so that peers waiting in a collective with
 * it fail at once with error values too.  Host tasks go on and forward
 * the error values; every execution in flight completes on every worker;
 * the graph takes no more executions (cgr_execute: CGR_EWORKERGONE).
 *
 * A worker that died (a worker process, proc/proc.c; a worker thread
 * that ended inside a task, thread/thread.c) stops its graph instead
 * (cgr__graph_dead): nothing it was to produce will come.
 *
 * Who completes a stream job is settled by its claimed flag: the stream's
 * job (stream.c) or the thread here, whichever comes first.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>

#include "run/run.h"

/* How often the watch asks the device while stream work is out. */
#define WATCH_NS 20000

static void outputs_error(struct cgr_task_ctx *tc, uint64_t seq,
			  const char *why)
{
	struct cgr_compiled *c = tc->c;
	const struct cgr__origin org = { "task", tc->name, tc->w->name, seq };

	for (size_t o = 0; o < tc->nout; o++) {
		struct cgr__port *p = &c->ports[tc->out_ports[o]];
		cgr__error_store(cgr__port_slot(p, seq), p->cap, CGR_EDEVICE,
				 &org, why);
	}
}

/* Completes stream task tc's jobs of executions before `upto` with error
 * values: those enqueued unless their stream already took them (then it
 * is finishing them: host work only), the others at once. */
static void finish_jobs(struct cgr_task_ctx *tc, const char *why,
			uint64_t upto)
{
	uint64_t seq = atomic_load_explicit(&tc->done, memory_order_acquire);

	for (; seq < upto; seq++) {
		struct cgr__task_job *job = &tc->jobs[seq & (tc->c->nslots - 1)];
		if (seq < tc->issued && atomic_flag_test_and_set(&job->claimed)) {
			/* D2: pairs with the stream's D3. */
			while (atomic_load_explicit(&tc->done,
						    memory_order_acquire) <= seq)
				sched_yield();
			continue;
		}
		outputs_error(tc, seq, why);
		cgr__task_job_finish(tc, seq);
	}
}

void cgr__prog_device_failed(struct cgr__prog *p, int err, const char *what)
{
	struct cgr_compiled *c = p->c;

	if (p->dead)
		return;
	p->dead = CGR_EDEVICE;
	snprintf(p->dead_msg, sizeof(p->dead_msg),
		 "worker %s: its device failed (%s: %s)", p->w->name, what,
		 cgr_strerror(err));
	cgr__err(&c->ctx->log,
		 "%s; its device work ends in CGR_EDEVICE error values and the "
		 "graph takes no more executions",
		 p->dead_msg);
	/* G1: pairs with cgr_execute's acquire. */
	atomic_store_explicit(&c->ctl->gone, (uint32_t)(p - c->progs) + 1,
			      memory_order_release);
	for (size_t k = 0; k < p->nops; k++)
		if (p->ops[k].kind == CGR__OP_COLL && p->ops[k].coll->nccl)
			cgr_comm_abort(p->ops[k].coll->comm);
	for (size_t t = 0; t < p->ntcs; t++)
		if (p->tcs[t].stream)
			finish_jobs(&p->tcs[t], p->dead_msg, p->tcs[t].issued);
}

void cgr__task_dead(struct cgr_task_ctx *tc, uint64_t seq)
{
	const char *why = tc->prog->dead_msg;

	if (tc->stream)
		finish_jobs(tc, why, seq + 1);
	else
		outputs_error(tc, seq, why);
}

bool cgr__graph_dead(struct cgr_compiled *c, unsigned index, const char *msg)
{
	return cgr__graph_lost(c, index, CGR_EPEERDEAD, msg);
}

bool cgr__graph_lost(struct cgr_compiled *c, unsigned index, int code,
		     const char *msg)
{
	struct cgr__gctl *ctl = c->ctl;
	uint32_t none = 0;

	if (!atomic_compare_exchange_strong(&ctl->dead_claim, &none, index + 1))
		return false; /* somebody died first */
	snprintf(ctl->dead_msg, sizeof(ctl->dead_msg), "%s", msg);
	ctl->dead_code = code;
	/* P1: the message, then who; pairs with the driver's acquire. */
	atomic_store_explicit(&ctl->dead, index + 1, memory_order_release);
	atomic_store_explicit(&ctl->stop, 1, memory_order_release);
	cgr__bell_ring_force(&ctl->drv.b);
	for (size_t i = 0; i < c->nprogs; i++)
		cgr__bell_ring_force(c->progs[i].bell);
	/* Collectives in progress fail on every surviving member (a CPU
	 * communicator's abort flag is shared with every process), but for
	 * one across hosts (cgr__comm_stops_itself). */
	for (size_t i = 0; i < c->nused_comms; i++)
		if (!cgr__comm_stops_itself(c->used_comms[i]))
			cgr_comm_abort(c->used_comms[i]);
	return true;
}

/* The device the program's streams live on, if a CUDA one may fail. */
static struct cgr__device *prog_device(const struct cgr__prog *p)
{
	if (p->streams[CGR__S_COMP] != NULL)
		return p->streams[CGR__S_COMP]->dev;
	for (int s = 0; s < CGR__S_NCCL; s++)
		if (p->nstreams[s] != NULL)
			return p->nstreams[s]->dev;
	return NULL;
}

void cgr__prog_check_device(struct cgr__prog *p)
{
	struct cgr__device *dev = prog_device(p);
	int err;

	if (!p->dead && dev != NULL && (err = cgr__device_error(dev)) != 0)
		cgr__prog_device_failed(p, err, "a call on its device");
}

/* The watch: the oldest outstanding job of a stream task, asked at most
 * every WATCH_NS.  Whether stream work is outstanding. */
static bool watch(struct cgr__prog *p)
{
	struct cgr_compiled *c = p->c;
	int64_t now;

	for (size_t t = 0; t < p->ntcs; t++) {
		struct cgr_task_ctx *tc = &p->tcs[t];
		uint64_t done = atomic_load_explicit(&tc->done,
						     memory_order_acquire);
		int q;
		if (!tc->stream || done >= tc->issued)
			continue;
		now = cgr__now_ns();
		if (now - p->dead_check < WATCH_NS)
			return true;
		p->dead_check = now;
		q = cgr_event_query(tc->ev[done & (c->nslots - 1)]);
		if (q < 0)
			cgr__prog_device_failed(p, q, "its compute stream");
		return true;
	}
	return false;
}

bool cgr__prog_poll(void *arg)
{
	struct cgr__prog *p = arg;
	bool pending = p->lq != NULL && cgr__launch_progress(p);

	if (!p->dead && p->watch && watch(p))
		pending = true;
	if (p->xpoll != NULL && p->xpoll(p->xpoll_arg))
		pending = true;
	return pending;
}
