/*
 * compile/verify.c: proof that the programs cannot get stuck.
 *
 * The programs run abstractly for two executions.  Each worker is up to
 * five agents: its thread, which runs the program, and its streams (the
 * collective, send, recv and compute streams), which run the jobs the
 * thread enqueued on them, in order:
 *
 *   READ      takes a message its channel holds (the driver puts each
 *             execution's arguments in once it is admitted: at most
 *             max_inflight executions whose outputs have not all arrived)
 *   WRITE     adds one to each of its channels; so does the fused WRITE
 *             at the end of a stream job
 *   COMPUTE   a plain task: nothing to wait for; a stream task enqueues a
 *             job on the compute stream, and without overlap the thread
 *             waits for it
 *   COLL      on the thread, or a job at the head of its stream: waits
 *             until every member reached the same collective of the same
 *             execution, then all of them pass it together
 *   WAIT      the thread waits until the job of that collective (or stream
 *             task) of this execution (prev: of the previous one) ran
 *   SWAIT     a job on the collective's stream that waits until the
 *             stream task's job ran
 *
 * and issuing a job for execution e waits until the job of the same
 * operation for e - nslots ran (its slot is reused).  Every condition,
 * once true, stays true until its agent moves, so running every agent as
 * far as it can, round after round, reaches the same end as any other
 * order: the programs are safe iff that run finishes.  If it does not,
 * "waits for" is followed from a stuck agent until one repeats, and that
 * cycle is named.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "compile/compile.h"

#define EXECS 2
#define NAG (CGR__NSTREAMS_ALL + 1) /* agents per program */
#define THREAD CGR__NSTREAMS_ALL    /* the thread's agent index */
#define NONE SIZE_MAX

/* Per program. */
struct vp {
	size_t pc;		     /* thread: next op, over EXECS runs */
	size_t pos[CGR__NSTREAMS_ALL]; /* per stream: jobs run */
	size_t njobs[CGR__NSTREAMS_ALL]; /* per stream: jobs per execution */
	long *sclass;		     /* per op: the stream it enqueues on */
	size_t *jidx;		     /* per op: its job's index in one run */
	size_t jbase[CGR__NSTREAMS_ALL]; /* per stream: its jobs in jop */
	size_t *jop;		     /* per (stream, job): the op */
};

struct vm {
	const struct cgr_compiled *c;
	struct vp *p;
	size_t *have;	/* per channel: messages held */
	size_t *writes; /* per channel: messages ever written */
	size_t admitted; /* executions whose arguments are in */
	size_t ntask;	/* task ids: 0 .. ntask */
	size_t *coll_at; /* per (task id, program): its COLL op, or NONE */
	bool *drv_writes; /* per channel: the driver writes it, to a worker */
	struct cgr__arena *arena;
	size_t size;
	unsigned char *mem;
};

static const struct cgr__op *op_at(const struct vm *v, size_t p, size_t k)
{
	return &v->c->progs[p].ops[k];
}

/* The stream op k enqueues a job on, or -1 (runs on the thread only). */
static int op_stream(const struct cgr__op *op)
{
	if (op->kind == CGR__OP_COLL && op->coll->async)
		return op->coll->sclass;
	if (op->kind == CGR__OP_SWAIT)
		return op->coll->sclass;
	if (op->kind == CGR__OP_COMPUTE && op->tc->stream)
		return CGR__S_COMP;
	return -1;
}

/* The op index of stream task tc's COMPUTE in program p. */
static size_t task_op(const struct vm *v, size_t p,
		      const struct cgr_task_ctx *tc)
{
	const struct cgr__prog *pr = &v->c->progs[p];
	for (size_t k = 0; k < pr->nops; k++)
		if (pr->ops[k].kind == CGR__OP_COMPUTE && pr->ops[k].tc == tc)
			return k;
	return NONE;
}

/* The op index of collective cr's COLL in program p. */
static size_t coll_op(const struct vm *v, size_t p,
		      const struct cgr__coll_rt *cr)
{
	return v->coll_at[cr->task_id * v->c->nprogs + p];
}

static int vm_init(struct vm *v, const struct cgr_compiled *c)
{
	size_t np = c->nprogs, nops = 0, size;
	unsigned char *m;

	memset(v, 0, sizeof(*v));
	v->c = c;
	for (size_t p = 0; p < np; p++) {
		nops += c->progs[p].nops;
		for (size_t k = 0; k < c->progs[p].nops; k++)
			if (c->progs[p].ops[k].kind == CGR__OP_COLL &&
			    c->progs[p].ops[k].coll->task_id >= v->ntask)
				v->ntask = c->progs[p].ops[k].coll->task_id + 1;
	}
	size = np * sizeof(struct vp) + 2 * c->nchans * sizeof(size_t) +
	       v->ntask * np * sizeof(size_t) + c->nchans +
	       nops * (sizeof(long) + 2 * sizeof(size_t)) + 64;
	m = cgr__alloc(&c->ctx->arena, size, 16);
	if (m == NULL)
		return -ENOMEM;
	v->arena = &c->ctx->arena;
	v->mem = m;
	v->size = size;
	v->p = (struct vp *)m;
	v->have = (size_t *)(v->p + np);
	v->writes = v->have + c->nchans;
	v->coll_at = v->writes + c->nchans;
	m = (unsigned char *)(v->coll_at + v->ntask * np);
	for (size_t p = 0; p < np; p++) {
		size_t n = c->progs[p].nops;
		v->p[p].jidx = (size_t *)m;
		v->p[p].jop = v->p[p].jidx + n;
		v->p[p].sclass = (long *)(v->p[p].jop + n);
		m = (unsigned char *)(v->p[p].sclass + n);
	}
	v->drv_writes = (bool *)m;
	return 0;
}

/* The fused WRITE of the job op k runs, or NULL. */
static const struct cgr__op *fused_of(const struct cgr__op *op)
{
	if (op->kind == CGR__OP_COLL && op->coll->async)
		return op->coll->fused_write;
	if (op->kind == CGR__OP_COMPUTE && op->tc->stream)
		return op->tc->fused_write;
	return NULL;
}

static void no_driver(struct vm *v, const struct cgr__op *w)
{
	for (size_t j = 0; w != NULL && j < w->nchans; j++)
		v->drv_writes[w->chans[j]] = false;
}

/* Each program's stream jobs in enqueue order, who writes each channel,
 * and where each collective sits in each program. */
static void vm_index(struct vm *v)
{
	const struct cgr_compiled *c = v->c;

	for (size_t i = 0; i < v->ntask * c->nprogs; i++)
		v->coll_at[i] = NONE;
	for (size_t ch = 0; ch < c->nchans; ch++)
		v->drv_writes[ch] = true;
	/* What the driver reads it does not hand to a worker. */
	for (size_t k = 0; k < c->ndrv_chans; k++)
		v->drv_writes[c->drv_chans[k]] = false;
	for (size_t p = 0; p < c->nprogs; p++) {
		struct vp *vp = &v->p[p];
		size_t base[CGR__NSTREAMS_ALL], n = 0;
		for (size_t k = 0; k < c->progs[p].nops; k++)
			if ((vp->sclass[k] = op_stream(op_at(v, p, k))) >= 0)
				vp->njobs[vp->sclass[k]]++;
		for (int s = 0; s < CGR__NSTREAMS_ALL; s++) {
			base[s] = n;
			n += vp->njobs[s];
			vp->njobs[s] = 0; /* counted again below */
		}
		for (size_t k = 0; k < c->progs[p].nops; k++) {
			const struct cgr__op *op = op_at(v, p, k);
			int s = vp->sclass[k];
			if (s >= 0) {
				vp->jidx[k] = vp->njobs[s]++;
				vp->jop[base[s] + vp->jidx[k]] = k;
			}
			if (op->kind == CGR__OP_COLL)
				v->coll_at[op->coll->task_id * c->nprogs + p] =
					k;
			if (op->kind == CGR__OP_WRITE)
				no_driver(v, op);
			no_driver(v, fused_of(op));
		}
		for (int s = 0; s < CGR__NSTREAMS_ALL; s++)
			vp->jbase[s] = base[s];
	}
}

/* Stream s of program p: the op of its job j (over executions) and the
 * execution. */
static size_t job_op(const struct vm *v, size_t p, int s, size_t j,
		     size_t *ex)
{
	const struct vp *vp = &v->p[p];
	*ex = j / vp->njobs[s];
	return vp->jop[vp->jbase[s] + j % vp->njobs[s]];
}

/* Whether the job of op k (on its stream) of execution ex has run. */
static bool job_ran(const struct vm *v, size_t p, size_t k, size_t ex)
{
	const struct vp *vp = &v->p[p];
	int s = vp->sclass[k];
	return vp->pos[s] > ex * vp->njobs[s] + vp->jidx[k];
}

/* Whether op k of program p of execution ex is done: its job ran, or
 * (an op of the thread alone) the thread passed it. */
static bool op_done(const struct vm *v, size_t p, size_t k, size_t ex)
{
	if (v->p[p].sclass[k] < 0)
		return v->p[p].pc > ex * v->c->progs[p].nops + k;
	return job_ran(v, p, k, ex);
}

/* Whether issuing op k of execution ex must first wait for its job of
 * execution ex - nslots (collectives and stream tasks reuse a job slot
 * per execution in flight). */
static bool slot_busy(const struct vm *v, size_t p, size_t k, size_t ex)
{
	const struct cgr__op *op = &v->c->progs[p].ops[k];

	if (op->kind != CGR__OP_COLL && op->kind != CGR__OP_COMPUTE)
		return false;
	return v->p[p].sclass[k] >= 0 && ex >= v->c->nslots &&
	       !job_ran(v, p, k, ex - v->c->nslots);
}

/* Whether the thread of p has issued the job of op k of execution ex. */
static bool job_issued(const struct vm *v, size_t p, size_t k, size_t ex)
{
	return v->p[p].pc > ex * v->c->progs[p].nops + k;
}

/* Adds one message to each channel of WRITE w (NULL: none). */
static void do_write(struct vm *v, const struct cgr__op *w)
{
	for (size_t j = 0; w != NULL && j < w->nchans; j++) {
		v->have[w->chans[j]]++;
		v->writes[w->chans[j]]++;
	}
}

/* Where member q takes part in collective `task` of execution ex: its
 * agent (THREAD or a stream), and whether it is there now. */
static bool member_at(const struct vm *v, size_t q, unsigned task, size_t ex,
		      int *agent)
{
	const struct vp *vq = &v->p[q];
	size_t k = v->coll_at[task * v->c->nprogs + q], nops, jex;
	const struct cgr__op *op;

	if (k == NONE)
		return false; /* not a member */
	nops = v->c->progs[q].nops;
	op = op_at(v, q, k);
	if (!op->coll->async) {
		*agent = THREAD;
		return vq->pc < EXECS * nops && vq->pc == ex * nops + k;
	}
	*agent = op->coll->sclass;
	if (vq->pos[*agent] >= EXECS * vq->njobs[*agent])
		return false;
	return job_op(v, q, *agent, vq->pos[*agent], &jex) == k &&
	       jex == ex && job_issued(v, q, k, ex);
}

/* Collective `task` of execution ex, if every member is at it: all of
 * them pass it (and run their fused WRITEs).  Returns whether it ran. */
static bool try_coll(struct vm *v, unsigned task, size_t ex)
{
	const struct cgr_compiled *c = v->c;
	int agent;

	for (size_t q = 0; q < c->nprogs; q++)
		if (v->coll_at[task * c->nprogs + q] != NONE &&
		    !member_at(v, q, task, ex, &agent))
			return false;
	for (size_t q = 0; q < c->nprogs; q++) {
		size_t k = v->coll_at[task * c->nprogs + q];
		if (k == NONE)
			continue;
		member_at(v, q, task, ex, &agent);
		if (agent == THREAD) {
			v->p[q].pc++;
		} else {
			v->p[q].pos[agent]++;
			do_write(v, fused_of(op_at(v, q, k)));
		}
	}
	return true;
}

/* The op a WAIT or SWAIT w (of program p) waits for, and its execution
 * (ex: the WAIT's; NONE: nothing to wait for). */
static size_t wait_target(const struct vm *v, size_t p,
			  const struct cgr__op *w, size_t *ex)
{
	if (w->prev) {
		if (*ex == 0) {
			*ex = NONE;
			return NONE;
		}
		(*ex)--;
	}
	return w->tc != NULL ? task_op(v, p, w->tc) : coll_op(v, p, w->coll);
}

/* Whether the thread of p may take its next op (which is not a COLL
 * it runs itself), and takes it. */
static bool step_thread(struct vm *v, size_t p)
{
	const struct cgr_compiled *c = v->c;
	struct vp *vp = &v->p[p];
	size_t nops = c->progs[p].nops, k = vp->pc % nops, ex = vp->pc / nops;
	const struct cgr__op *op = op_at(v, p, k);
	size_t t, tex = ex;

	if (slot_busy(v, p, k, ex))
		return false;
	switch (op->kind) {
	case CGR__OP_READ:
		if (v->have[op->chan] == 0)
			return false;
		v->have[op->chan]--;
		break;
	case CGR__OP_WRITE:
		do_write(v, op);
		break;
	case CGR__OP_COMPUTE:
		/* Without overlap the thread waits for its stream task:
		 * the compute stream's earlier jobs never wait, so it runs
		 * as the thread passes. */
		if (op->tc->stream && !op->tc->async) {
			vp->pos[CGR__S_COMP]++;
			do_write(v, op->tc->fused_write);
		}
		break;
	case CGR__OP_COLL:
		if (!op->coll->async)
			return try_coll(v, op->coll->task_id, ex);
		break;
	case CGR__OP_WAIT:
		t = wait_target(v, p, op, &tex);
		if (tex != NONE && t != NONE && !op_done(v, p, t, tex))
			return false;
		break;
	default:
		break;
	}
	vp->pc++;
	return true;
}

/* Whether stream s of program p may run its next job, and runs it. */
static bool step_stream(struct vm *v, size_t p, int s)
{
	struct vp *vp = &v->p[p];
	size_t k, ex, t;
	const struct cgr__op *op;

	if (vp->pos[s] >= EXECS * vp->njobs[s])
		return false;
	k = job_op(v, p, s, vp->pos[s], &ex);
	if (!job_issued(v, p, k, ex))
		return false;
	op = op_at(v, p, k);
	if (op->kind == CGR__OP_COLL)
		return try_coll(v, op->coll->task_id, ex);
	if (op->kind == CGR__OP_SWAIT) {
		t = task_op(v, p, op->tc);
		if (t != NONE && !op_done(v, p, t, ex))
			return false;
	}
	vp->pos[s]++;
	do_write(v, fused_of(op));
	return true;
}

/* The driver admits execution e once e - max_inflight has all its
 * outputs (each driver channel got e - max_inflight + 1 messages). */
static void admit(struct vm *v)
{
	const struct cgr_compiled *c = v->c;

	while (v->admitted < EXECS) {
		size_t e = v->admitted;
		if (e >= c->p.max_inflight) {
			size_t done = e - c->p.max_inflight + 1;
			for (size_t j = 0; j < c->ndrv_chans; j++)
				if (v->writes[c->drv_chans[j]] < done)
					return;
		}
		for (size_t ch = 0; ch < c->nchans; ch++)
			if (v->drv_writes[ch])
				v->have[ch]++;
		v->admitted++;
	}
}

static bool all_done(const struct vm *v)
{
	for (size_t p = 0; p < v->c->nprogs; p++) {
		const struct vp *vp = &v->p[p];
		if (vp->pc < EXECS * v->c->progs[p].nops)
			return false;
		for (int s = 0; s < CGR__NSTREAMS_ALL; s++)
			if (vp->pos[s] < EXECS * vp->njobs[s])
				return false;
	}
	return true;
}

/* Runs every agent as far as it goes; whether everything finished. */
static bool vm_run(struct vm *v)
{
	bool progress = true;

	while (progress) {
		progress = false;
		admit(v);
		for (size_t p = 0; p < v->c->nprogs; p++) {
			while (v->p[p].pc < EXECS * v->c->progs[p].nops &&
			       step_thread(v, p))
				progress = true;
			for (int s = 0; s < CGR__NSTREAMS_ALL; s++)
				while (step_stream(v, p, s))
					progress = true;
		}
	}
	return all_done(v);
}

/* ---- naming the cycle ----------------------------------------------- */

struct why {
	size_t p;  /* the program waited for (NONE: the driver) */
	int agent; /* its agent */
	const char *verb, *what;
};

static const char *op_name(const struct cgr_compiled *c,
			   const struct cgr__op *op)
{
	if (op->kind == CGR__OP_READ)
		return c->ports[c->chans[op->chan].port].name;
	if (op->tc != NULL)
		return op->tc->name;
	return op->coll != NULL ? op->coll->name : "?";
}

/* The agent that writes channel ch (p NONE: the driver). */
static void writer_of(const struct vm *v, unsigned ch, struct why *w)
{
	const struct cgr_compiled *c = v->c;

	w->p = NONE;
	for (size_t q = 0; q < c->nprogs; q++)
		for (size_t k = 0; k < c->progs[q].nops; k++) {
			const struct cgr__op *op = op_at(v, q, k);
			const struct cgr__op *fw = fused_of(op);
			const struct cgr__op *wr =
				op->kind == CGR__OP_WRITE ? op : fw;
			for (size_t j = 0; wr != NULL && j < wr->nchans; j++)
				if (wr->chans[j] == ch) {
					w->p = q;
					w->agent = wr == op ? THREAD :
							      v->p[q].sclass[k];
					return;
				}
		}
}

/* A member of collective op (execution ex) not at it yet. */
static void absent_member(const struct vm *v, const struct cgr__op *op,
			  size_t ex, struct why *w)
{
	int agent = THREAD;

	w->p = NONE;
	w->verb = cgr__coll_kind_name(op->coll->kind);
	w->what = op->coll->name;
	for (size_t q = 0; q < v->c->nprogs; q++)
		if (v->coll_at[op->coll->task_id * v->c->nprogs + q] != NONE &&
		    !member_at(v, q, op->coll->task_id, ex, &agent)) {
			w->p = q;
			w->agent = agent;
			return;
		}
}

/* What stuck agent a of program p waits for. */
static void waits_for(const struct vm *v, size_t p, int a, struct why *w)
{
	const struct vp *vp = &v->p[p];
	size_t nops = v->c->progs[p].nops, k, ex, t;
	const struct cgr__op *op;

	if (a == THREAD) {
		k = vp->pc % nops;
		ex = vp->pc / nops;
	} else {
		k = job_op(v, p, a, vp->pos[a], &ex);
	}
	op = op_at(v, p, k);
	w->p = p;
	w->what = op_name(v->c, op);
	if (a != THREAD && !job_issued(v, p, k, ex)) {
		w->agent = THREAD;
		w->verb = "issue of";
	} else if (a == THREAD && slot_busy(v, p, k, ex)) {
		w->agent = vp->sclass[k];
		w->verb = "an earlier run of";
	} else if (op->kind == CGR__OP_READ) {
		writer_of(v, op->chan, w);
		w->verb = "a value of";
	} else if (op->kind == CGR__OP_COLL) {
		absent_member(v, op, ex, w);
	} else {
		/* A WAIT (thread) or SWAIT (stream): what it waits for. */
		size_t tex = ex;
		t = wait_target(v, p, op, &tex);
		w->agent = t != NONE && vp->sclass[t] >= 0 ? vp->sclass[t] :
							      THREAD;
		w->verb = "the end of";
	}
}

static int agent_name(char *buf, size_t len, const struct cgr_compiled *c,
		      size_t p, int a)
{
	static const char *const sname[CGR__NSTREAMS_ALL] = {
		"'s collective stream", "'s send stream", "'s recv stream",
		"'s nccl queue", "'s compute stream"
	};

	if (p == NONE)
		return snprintf(buf, len, "the driver");
	return snprintf(buf, len, "%s%s", c->progs[p].w->name,
			a == THREAD ? "" : sname[a]);
}

static bool agent_done(const struct vm *v, size_t p, int a)
{
	if (a == THREAD)
		return v->p[p].pc >= EXECS * v->c->progs[p].nops;
	return v->p[p].pos[a] >= EXECS * v->p[p].njobs[a];
}

/* Follows "waits for" from a stuck agent until one repeats; names the
 * cycle (or the chain, if it ends at the driver or a finished agent). */
static void name_cycle(const struct vm *v, char *msg, size_t len)
{
	struct {
		size_t p;
		int a;
		struct why w;
	} path[64];
	size_t np = 0, from = 0, off, p = 0;
	int a = THREAD;

	for (p = 0; p < v->c->nprogs; p++) {
		for (a = 0; a < NAG && agent_done(v, p, a); a++)
			;
		if (a < NAG)
			break;
	}
	while (np < CGR__ARRAY_SIZE(path) && p != NONE &&
	       !agent_done(v, p, a)) {
		size_t i;
		for (i = 0; i < np && (path[i].p != p || path[i].a != a); i++)
			;
		if (i < np) {
			from = i;
			break;
		}
		path[np].p = p;
		path[np].a = a;
		waits_for(v, p, a, &path[np].w);
		p = path[np].w.p;
		a = path[np].w.agent;
		np++;
	}
	off = (size_t)snprintf(msg, len, "schedule would deadlock: ");
	for (size_t k = from; k < np && off < len; k++) {
		char x[96], y[96];
		agent_name(x, sizeof(x), v->c, path[k].p, path[k].a);
		agent_name(y, sizeof(y), v->c, path[k].w.p, path[k].w.agent);
		off += (size_t)snprintf(msg + off, len - off,
					"%s%s waits for %s (%s %s)",
					k > from ? ", " : "", x, y,
					path[k].w.verb, path[k].w.what);
	}
}

int cgr__verify(struct cgr_compiled *c, char *msg, size_t len)
{
	struct vm v;
	int ret = vm_init(&v, c);

	if (ret < 0)
		return ret;
	vm_index(&v);
	if (!vm_run(&v)) {
		name_cycle(&v, msg, len);
		ret = CGR_EDEADLOCK;
	}
	cgr__free(v.arena, v.mem, v.size, 16);
	return ret;
}
