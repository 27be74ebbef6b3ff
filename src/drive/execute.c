/*
 * drive/execute.c: the driver's side of a compiled graph: execute (copy the
 * arguments into their slots, announce them), get (drain the output rings,
 * hand out values that point into the output slots), release (free the
 * execution's slots), teardown and destroy.
 *
 * Execution seq uses slot seq % nslots of every port.  The driver admits
 * an execution while fewer than max_inflight are unreleased, and nslots >=
 * max_inflight.  So when execution seq reuses a slot, execution seq -
 * nslots has all its outputs in: else the nslots - 1 executions after it
 * would have none in either (each output's writer runs executions in
 * order, and its channel is FIFO), none released (release waits for the
 * outputs), and nslots would be unreleased.  Every task of an execution
 * whose outputs are in has finished with its slots (every task has a path
 * to an output, and an output arrives only after its producers ran).
 *
 * The caller may keep the results of an execution as long as it likes: if
 * seq - nslots is unreleased when seq needs its slot, the driver holds
 * its output buffers aside (c->held) and gives the slot spare ones from
 * c->free_bufs through the output ports' slot map (chan.h), before it
 * admits seq.  At most max_inflight - 1 executions are held that way, so
 * max_inflight spares per output port always suffice.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "drive/drive.h"
#include "remote/remote.h"

static inline uint32_t cgr__slot(const struct cgr_compiled *c, uint64_t seq)
{
	return (uint32_t)(seq & (c->nslots - 1));
}

/* A worker died (a worker process, or a thread that ended in a task: its
 * graphs stop): its index + 1, or 0. */
static inline uint32_t cgr__dead(const cgr_compiled *c)
{
	/* P1: pairs with cgr__graph_dead's release (run/failure.c). */
	return atomic_load_explicit(&c->ctl->dead, memory_order_acquire);
}

static void cgr__drain(cgr_compiled *c);

/* Execution prev (unreleased) gives its slot to prev + nslots: its
 * outputs' buffers are held aside, the slot gets spare ones.  0, or why
 * not (its outputs are not all in: only when a worker process died). */
static int cgr__hold(cgr_compiled *c, uint64_t prev)
{
	uint32_t slot = cgr__slot(c, prev);

	cgr__drain(c);
	if (c->arrived[slot] < c->nout)
		return cgr__dead(c) ? c->ctl->dead_code : CGR_ECAPACITY;
	if (c->omap != NULL && c->nfree == 0)
		return CGR_ECAPACITY; /* cannot be: max_inflight spares */
	c->held[c->nheld].seq = prev;
	c->held[c->nheld].buf = 0;
	if (c->omap != NULL) {
		c->held[c->nheld].buf = c->omap[slot];
		c->omap[slot] = c->free_bufs[--c->nfree];
	}
	c->nheld++;
	return 0;
}

int cgr_execute(cgr_compiled *c, const cgr_value *args, size_t nargs,
		cgr_ref *out)
{
	uint64_t seq;
	uint32_t slot;
	int ret;

	if (c == NULL || out == NULL || (nargs > 0 && args == NULL))
		return -EINVAL;
	if (cgr__torn_down(c))
		return CGR_ECLOSED;
	if (cgr__running_graph == c)
		return -EDEADLK;
	/* G1: a worker's device failed (run/failure.c; the log says). */
	if (atomic_load_explicit(&c->ctl->gone, memory_order_acquire) != 0)
		return CGR_EWORKERGONE;
	if (cgr__dead(c))
		return c->ctl->dead_code;
	if (nargs != c->nargs)
		return CGR_ENARGS;
	if (c->unreleased >= c->p.max_inflight)
		return CGR_ECAPACITY;
	for (size_t a = 0; a < nargs; a++) {
		ret = cgr__arg_check(&args[a], c->ports[c->arg_port[a]].cap,
				     c->seg == NULL);
		if (ret < 0)
			return ret;
	}
	seq = c->next_seq;
	slot = cgr__slot(c, seq);
	if (seq >= c->nslots && !c->released[slot] &&
	    (ret = cgr__hold(c, seq - c->nslots)) < 0)
		return ret;
	for (size_t a = 0; a < nargs; a++) {
		struct cgr__port *p = &c->ports[c->arg_port[a]];
		cgr__arg_store(cgr__port_slot(p, seq), p->cap, &args[a]);
	}
	c->arrived[slot] = 0;
	c->released[slot] = 0;
	c->next_seq = seq + 1;
	c->unreleased++;
	cgr__c_release(c);
	/* Rings hold max_inflight messages: a write never waits while the
	 * driver bounds executions; bounded by submit_timeout_ns anyway. */
	for (size_t a = 0; a < nargs; a++)
		for (size_t k = 0; k < c->arg_nchans[a]; k++) {
			ret = cgr__chan_write(&c->chans[c->arg_chans[a][k]],
					      seq, &c->ctl->stop,
					      c->p.submit_timeout_ns);
			if (ret < 0)
				return ret;
		}
	/* A1: admits seq; pairs with the gated programs' acquire. */
	atomic_store_explicit(&c->ctl->admitted, seq + 1, memory_order_release);
	for (size_t i = 0; c->ngated > 0 && i < c->nprogs; i++)
		if (c->progs[i].gate)
			cgr__bell_ring(c->progs[i].bell);
	/* Arguments and admissions for other hosts leave now (remote/). */
	if (c->ctx->job != NULL)
		cgr__job_poll(c->ctx->job);
	*out = seq;
	return 0;
}

/* Takes every message waiting on the driver's rings. */
static void cgr__drain(cgr_compiled *c)
{
	for (size_t j = 0; j < c->ndrv_chans; j++) {
		struct cgr__chan *ch = &c->chans[c->drv_chans[j]];
		const struct cgr__msg *m;
		while ((m = cgr__chan_peek(ch)) != NULL) {
			c->arrived[cgr__slot(c, m->seq)] += c->drv_mult[j];
			cgr__chan_consume(ch);
			cgr__c_acquire(c);
		}
	}
}

struct cgr__get_wait {
	cgr_compiled *c;
	uint32_t slot;
};

static bool cgr__arrived(void *arg)
{
	struct cgr__get_wait *gw = arg;
	/* Outputs from other hosts: this thread moves the link while it
	 * waits (remote/: no hand-off on the way in). */
	if (gw->c->ctx->job != NULL)
		cgr__job_poll(gw->c->ctx->job);
	cgr__drain(gw->c);
	return gw->c->arrived[gw->slot] >= gw->c->nout || cgr__dead(gw->c) ||
	       cgr__torn_down(gw->c);
}

/*
 * Where ref's results are: 1 in its slot (the driver's window of the last
 * nslots executions), 0 held aside (c->held[*k]), -1 ref is not a live
 * execution.
 */
static int cgr__ref_find(const cgr_compiled *c, cgr_ref ref, uint32_t *k)
{
	if (ref >= c->next_seq)
		return -1;
	if (c->next_seq - ref <= c->nslots)
		return c->released[cgr__slot(c, ref)] ? -1 : 1;
	for (uint32_t i = 0; i < c->nheld; i++)
		if (c->held[i].seq == ref) {
			*k = i;
			return 0;
		}
	return -1;
}

/* Waits for the outputs of ref (in its slot): 0 once all are in, or a
 * worker process died, or teardown began; -ETIMEDOUT. */
static int cgr__wait_ref(cgr_compiled *c, cgr_ref ref, int64_t timeout_ns)
{
	struct cgr__get_wait gw = { c, cgr__slot(c, ref) };

	if (timeout_ns < 0)
		timeout_ns = c->p.get_timeout_ns;
	if (cgr__arrived(&gw))
		return 0;
	if (timeout_ns == 0)
		return -ETIMEDOUT;
	return cgr__reactor_wait(NULL, cgr__drv_bell(c), cgr__arrived, &gw,
				 NULL, c->p.wait_mode, c->p.spin_ns,
				 cgr__deadline(timeout_ns));
}

/* Every output of execution ref an error value: the worker process that
 * died. */
static void cgr__dead_values(cgr_compiled *c, cgr_ref ref, cgr_value *outs,
			     size_t nouts)
{
	const char *who = "";

	snprintf(c->dead_msg, sizeof(c->dead_msg), "%.*s",
		 (int)sizeof(c->ctl->dead_msg) - 1, c->ctl->dead_msg);
	for (size_t i = 0; i < c->nprogs; i++)
		if (c->progs[i].w->index + 1 == cgr__dead(c))
			who = c->progs[i].w->name;
	for (size_t o = 0; o < nouts; o++) {
		memset(&outs[o], 0, sizeof(outs[o]));
		outs[o].kind = CGR_VALUE_ERROR;
		outs[o].code = c->ctl->dead_code;
		outs[o].u.error.msg = c->dead_msg;
		outs[o].u.error.task = "";
		outs[o].u.error.worker = who;
		outs[o].u.error.execution = ref;
	}
}

int cgr_ref_get(cgr_compiled *c, cgr_ref ref, int64_t timeout_ns,
		cgr_value *outs, size_t nouts)
{
	uint32_t k, buf;
	int where, ret;

	if (c == NULL || (nouts > 0 && outs == NULL))
		return -EINVAL;
	if (cgr__torn_down(c))
		return CGR_ECLOSED;
	if (cgr__running_graph == c)
		return -EDEADLK;
	if (nouts != c->nout)
		return CGR_ENARGS;
	where = cgr__ref_find(c, ref, &k);
	if (where < 0)
		return CGR_EUNKNOWNREF;
	if (where == 0) {
		buf = c->held[k].buf; /* its outputs were all in */
	} else {
		uint32_t slot = cgr__slot(c, ref);
		ret = cgr__wait_ref(c, ref, timeout_ns);
		if (ret < 0)
			return ret;
		if (c->arrived[slot] < c->nout) {
			if (!cgr__dead(c))
				return CGR_ECLOSED; /* teardown began */
			/* A worker process died: what did not come never
			 * will. */
			cgr__dead_values(c, ref, outs, nouts);
			return 0;
		}
		buf = c->omap != NULL ? c->omap[slot] : slot;
	}
	for (size_t o = 0; o < nouts; o++) {
		const struct cgr__port *p = &c->ports[c->out_port[o]];
		struct cgr__slot_hdr *h = p->map != NULL ?
						  cgr__port_bufhdr(p, buf) :
						  cgr__port_slot(p, ref);
		if (cgr__unlikely(c->seg != NULL) &&
		    cgr__port_slot_check(p, h) < 0) {
			/* Written by a worker process, and not right. */
			memset(&outs[o], 0, sizeof(outs[o]));
			outs[o].kind = CGR_VALUE_ERROR;
			outs[o].code = CGR_ECORRUPT;
			outs[o].u.error.msg = "the output's slot holds no "
					      "valid value (from a worker "
					      "process)";
			outs[o].u.error.task = outs[o].u.error.worker = "";
			outs[o].u.error.execution = ref;
			continue;
		}
		cgr__value_load_view(h, p->cap, &outs[o],
				     c->out_views != NULL ?
					     &c->out_views[buf * c->nout + o] :
					     NULL);
	}
	return 0;
}

int cgr_ref_release(cgr_compiled *c, cgr_ref ref)
{
	uint32_t k;
	int where, ret;

	if (c == NULL)
		return -EINVAL;
	if (cgr__torn_down(c))
		return 0; /* everything was released by teardown */
	if (cgr__running_graph == c)
		return -EDEADLK;
	where = cgr__ref_find(c, ref, &k);
	if (where < 0)
		return CGR_EUNKNOWNREF;
	if (where == 0) {
		if (c->omap != NULL)
			c->free_bufs[c->nfree++] = c->held[k].buf;
		c->held[k] = c->held[--c->nheld];
	} else {
		/* Its buffers may still be in use until its outputs are
		 * in. */
		ret = cgr__wait_ref(c, ref, -1);
		if (ret < 0)
			return ret;
		if (cgr__torn_down(c))
			return 0;
		c->released[cgr__slot(c, ref)] = 1;
	}
	c->unreleased--;
	return 0;
}

int cgr_compiled_teardown(cgr_compiled *c, int64_t timeout_ns)
{
	const struct cgr__worker_ops *k[CGR__KINDS_MAX];
	size_t nk;
	int64_t deadline;
	int result = 0;
	uint32_t nstuck = 0;

	if (c == NULL)
		return -EINVAL;
	if (cgr__running_graph == c)
		return -EDEADLK;
	/* T0: the first call tears down; pairs with cgr__torn_down. */
	if (atomic_exchange_explicit(&c->torn_down, true, memory_order_acq_rel))
		return 0;
	/* A driver call blocked in another thread returns now. */
	cgr__bell_ring_force(cgr__drv_bell(c));
	if (timeout_ns < 0)
		timeout_ns = 1000000000;
	/* Idle workers get the time to leave: a deadline of 0 would have
	 * abandoned (killed, for processes) workers that were not stuck. */
	if (timeout_ns < CGR__LEAVE_MIN_NS)
		timeout_ns = CGR__LEAVE_MIN_NS;
	deadline = cgr__deadline(timeout_ns);
	/* Half the time for NCCL operations to finish (run/launch.c). */
	atomic_store_explicit(&c->ctl->drain_deadline,
			      cgr__deadline(timeout_ns / 2),
			      memory_order_relaxed);
	/* T1: stop, then wake every worker wherever it parks. */
	atomic_store_explicit(&c->ctl->stop, 1, memory_order_release);
	for (size_t i = 0; i < c->nprogs; i++)
		cgr__bell_ring_force(c->progs[i].bell);
	/* T2: then abort the CPU communicators, so that a member waiting
	 * inside a collective for a member that already left returns.  No
	 * thread waits inside NCCL (run/launch.c): a worker leaving with
	 * an NCCL operation still pending aborts that communicator itself,
	 * and the others stay whole (finalized, not aborted, at free).  One
	 * across hosts neither (cgr__comm_stops_itself). */
	for (size_t i = 0; i < c->nused_comms; i++)
		if (c->used_comms[i]->backend != CGR_BACKEND_NCCL &&
		    !cgr__comm_stops_itself(c->used_comms[i]))
			cgr_comm_abort(c->used_comms[i]);
	/* T3: every kind of worker is asked to leave (worker processes are
	 * told), then each waits for its own by the deadline: a thread stuck
	 * in a task is abandoned, a stuck worker process killed. */
	nk = cgr__compiled_kinds(c, k);
	for (size_t i = 0; i < nk; i++)
		if (k[i]->graph_stop != NULL)
			k[i]->graph_stop(c, deadline);
	for (size_t i = 0; i < nk; i++) {
		int ret = k[i]->graph_wait != NULL ?
				  k[i]->graph_wait(c, deadline, &nstuck) :
				  0;
		if (ret != 0)
			result = ret;
	}
	/* Workers drop their reference right after completing `left`: wait
	 * for those drops too, so that memory accounting is exact when
	 * teardown returns. */
	while (atomic_load_explicit(&c->refs, memory_order_acquire) >
		       1 + nstuck &&
	       cgr__now_ns() < deadline)
		sched_yield();
	c->teardown_result = result;
	return result;
}

void cgr_compiled_destroy(cgr_compiled *c)
{
	struct cgr_compiled **pp;

	if (c == NULL)
		return;
	if (cgr__running_graph == c) {
		cgr__err(&c->ctx->log,
			 "cgr_compiled_destroy called from a task of the "
			 "graph it destroys: refused, nothing freed");
		return;
	}
	cgr_compiled_teardown(c, -1);
	pthread_mutex_lock(&c->ctx->graph_lock);
	for (pp = &c->ctx->compiled; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	pthread_mutex_unlock(&c->ctx->graph_lock);
	cgr__compiled_unref(c);
}
