/*
 * compile/overlap.c: the overlap rewrite (cgr_compile_params.overlap, and
 * per node cgr_coll_params.overlap / cgr_node_set_overlap).
 *
 * Each collective goes to one of its worker's communication streams: a
 * device edge's broadcast to the send stream at its root and to the recv
 * stream at its readers, any other collective to the collective stream.
 * A communicator is only ever used by one stream (or the thread) per
 * member, in the global order, so overlap never reorders communication
 * ops among themselves.  Each collective is issued as early as its local
 * inputs allow, but never before an earlier one of its stream nor before
 * a collective the thread runs; the WRITE of its outputs is fused into its
 * job; a WAIT goes right before the first operation that consumes its
 * outputs (one WAIT for the latest collective of a stream an operation
 * needs covers the earlier ones of that stream).
 *
 * Stream tasks (CGR_TASK_STREAM) stay in program order; their WRITE is
 * fused into their stream job.  Their outputs are joined where first
 * used: by stream order on the compute stream, by a device-side SWAIT
 * right before an asynchronous collective (on that collective's stream),
 * by a WAIT on the thread otherwise; the latest task covers the earlier.
 *
 * Where overlap off would run a CPU collective (after the operations
 * before it in program order, its WRITE included), a RUN: a job short
 * enough to cost less than a handoff to its stream's thread is held for
 * the thread there (cgr_compile_params.inline_ns, run/stream.c).  Run
 * there it waits for no more than overlap off would, so it deadlocks
 * no program that overlap off runs.
 *
 * prune.c then drops the WAITs other orderings already imply, and
 * verify.c checks the result.
 */
#include <errno.h>
#include <string.h>

#include "compile/compile.h"

/* The ports op (on this worker) produces: *n of them at the result
 * (NO_PORT entries skipped by the caller); none for other kinds. */
static const unsigned *op_made(const struct cgr_compiled *c,
			       const struct cgr__op *op, size_t *n)
{
	switch (op->kind) {
	case CGR__OP_READ:
		*n = 1;
		return &c->chans[op->chan].port;
	case CGR__OP_COMPUTE:
		*n = op->tc->nout;
		return op->tc->out_ports;
	case CGR__OP_COLL:
		*n = op->coll->k;
		return op->coll->out_ports;
	default:
		*n = 0;
		return NULL;
	}
}

/* Makes *op a WAIT for collective cr or (tc set) stream task tc; or,
 * kind CGR__OP_SWAIT, the wait of cr's stream for tc. */
static void put_wait(struct cgr__op *op, int kind, struct cgr__coll_rt *cr,
		     struct cgr_task_ctx *tc, bool order)
{
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	op->coll = cr;
	op->tc = tc;
	op->order = order;
}

/*
 * One program being rewritten: out[0..m) so far.  What the placement
 * asks of the operations placed so far it finds by port, not by a scan
 * (which made the pass quadratic in a program's length): mk[port] is
 * where in out the operation that makes port sits (kept right when
 * operations move), atask[port] the asynchronous stream task that made
 * it, lastc[s] the last asynchronous collective of stream class s.
 */
struct ov {
	struct cgr_compiled *c;
	struct cgr__prog *p;
	struct cgr__op *out;
	size_t m;
	size_t *mk;			/* per port; SIZE_MAX: none */
	struct cgr_task_ctx **atask;	/* per port; NULL: none */
	struct cgr__coll_rt *lastc[CGR__NSTREAMS];
	/* Per stream: where its last COLL is in out (+1); COLLs placed, and
	 * how many of them are known done (waited for). */
	size_t last_coll[CGR__NSTREAMS];
	uint32_t placed[CGR__NSTREAMS], done[CGR__NSTREAMS];
	/* Stream tasks placed; known done on the thread, on each stream. */
	uint32_t tplaced, tdone, tsdone[CGR__NSTREAMS];
};

/* Notes what out[j] makes (it sits at j now). */
static void note_made(struct ov *o, size_t j)
{
	const struct cgr__op *op = &o->out[j];
	size_t n;
	const unsigned *ports = op_made(o->c, op, &n);

	for (size_t q = 0; q < n; q++) {
		if (ports[q] == CGR__NO_PORT)
			continue;
		o->mk[ports[q]] = j;
		if (op->kind == CGR__OP_COMPUTE && op->tc->async)
			o->atask[ports[q]] = op->tc;
	}
}

/* Moves out[at..m) d places on (room made for d operations at at). */
static void shift(struct ov *o, size_t at, size_t d)
{
	memmove(&o->out[at + d], &o->out[at], (o->m - at) * sizeof(*o->out));
	for (size_t j = at + d; j < o->m + d; j++)
		note_made(o, j);
}

/* The input ports of op: each reported by calling f(o, port, arg). */
static void op_inputs(struct ov *o, const struct cgr__op *op,
		      void (*f)(struct ov *, unsigned, void *), void *arg)
{
	if (op->kind == CGR__OP_COMPUTE)
		for (size_t i = 0; i < op->tc->nin; i++)
			f(o, op->tc->in_ports[i], arg);
	else if (op->kind == CGR__OP_WRITE)
		for (size_t j = 0; j < op->nchans; j++)
			f(o, o->c->chans[op->chans[j]].port, arg);
	else if (op->kind == CGR__OP_COLL) {
		/* Across hosts a member with outputs reads every member's
		 * input. */
		const struct cgr__coll_rt *cr = op->coll;
		bool all = cr->spans && !cr->far &&
			   (!cgr__coll_out_at_root(cr->kind) ||
			    cr->rank == cr->root);
		const unsigned *in = all ? cr->all_in_ports : cr->in_ports;
		size_t nin = all ? (size_t)cr->n * cr->k : cr->k;
		for (size_t q = 0; q < nin; q++)
			if (in[q] != CGR__NO_PORT)
				f(o, in[q], arg);
	}
}

static void latest_task(struct ov *o, unsigned port, void *arg)
{
	struct cgr_task_ctx **last = arg, *tc = o->atask[port];

	if (tc != NULL && (*last == NULL || (*last)->tidx < tc->tidx))
		*last = tc;
}

/* The latest asynchronous stream task placed whose outputs op reads (a
 * COLL: its inputs), or NULL.  Those tasks sit in out in tidx order. */
static struct cgr_task_ctx *task_used(struct ov *o, const struct cgr__op *op)
{
	struct cgr_task_ctx *last = NULL;

	op_inputs(o, op, latest_task, &last);
	return last;
}

/* The last asynchronous COLL of stream class s placed, or NULL (a
 * stream's collectives sit in out in the order they were placed). */
static struct cgr__coll_rt *last_of(const struct ov *o, int s)
{
	return o->lastc[s];
}

/* Whether op + 1 (of n) is a WRITE that can be fused into op's job. */
static const struct cgr__op *next_write(const struct cgr__prog *p, size_t i)
{
	return i + 1 < p->nops && p->ops[i + 1].kind == CGR__OP_WRITE ?
		       &p->ops[i + 1] :
		       NULL;
}

/* A collective the thread runs: every collective issued before it must be
 * done first, so that the order stays; the last one of each stream stands
 * for its stream. */
static void place_sync_coll(struct ov *o, const struct cgr__op *op)
{
	for (int s = 0; s < CGR__NSTREAMS; s++) {
		if (o->done[s] < o->placed[s])
			put_wait(&o->out[o->m++], CGR__OP_WAIT, last_of(o, s),
				 NULL, true);
		o->done[s] = o->placed[s];
	}
	o->out[o->m++] = *op;
	note_made(o, o->m - 1);
	for (int s = 0; s < CGR__NSTREAMS; s++)
		o->last_coll[s] = o->m;
}

/*
 * A collective on its stream, as early as its inputs and its stream allow,
 * its stream first joining stream task tneed (if any) by an SWAIT.
 * Returns 1 if the WRITE after it (op i + 1) was fused into its job, 0, or
 * -ENOMEM.
 */
static int place_async_coll(struct ov *o, size_t i,
			    struct cgr_task_ctx *tneed)
{
	const struct cgr__op *op = &o->p->ops[i];
	struct cgr__coll_rt *cr = op->coll;
	int sc = cr->sclass;
	struct cgr__coll_rt *need[CGR__NSTREAMS] = { NULL };
	size_t at = o->last_coll[sc], w;

	for (size_t q = 0; q < cr->k; q++) {
		size_t j = cr->in_ports[q] != CGR__NO_PORT ?
				   o->mk[cr->in_ports[q]] :
				   SIZE_MAX;
		struct cgr__coll_rt *p;
		if (j == SIZE_MAX)
			continue;
		p = o->out[j].coll;
		if (j + 1 > at)
			at = j + 1;
		/* Made by a collective on the collective stream (an edge
		 * sends its output): the thread waits for it before it
		 * issues this one on another stream. */
		if (o->out[j].kind == CGR__OP_COLL && p->async &&
		    p->sclass == CGR__S_COLL && sc != CGR__S_COLL &&
		    p->sidx >= o->done[p->sclass] &&
		    (need[p->sclass] == NULL ||
		     need[p->sclass]->sidx < p->sidx))
			need[p->sclass] = p;
	}
	for (int s = 0; s < CGR__NSTREAMS; s++)
		if (need[s] != NULL) {
			shift(o, at, 1);
			put_wait(&o->out[at++], CGR__OP_WAIT, need[s], NULL,
				 false);
			o->m++;
			o->done[s] = need[s]->sidx + 1;
			for (int t = 0; t < CGR__NSTREAMS; t++)
				if (o->last_coll[t] >= at)
					o->last_coll[t]++;
		}
	w = tneed != NULL && tneed->tidx >= o->tsdone[sc];
	shift(o, at, 1 + w);
	if (w) {
		put_wait(&o->out[at], CGR__OP_SWAIT, cr, tneed, false);
		o->tsdone[sc] = tneed->tidx + 1;
	}
	cr->swait = tneed;
	o->out[at + w] = *op;
	o->m += 1 + w;
	note_made(o, at + w);
	o->lastc[sc] = cr;
	for (int s = 0; s < CGR__NSTREAMS; s++)
		if (o->last_coll[s] > at)
			o->last_coll[s] += 1 + w;
	o->last_coll[sc] = at + 1 + w;
	cr->sidx = o->placed[sc]++;
	cr->fused_write = next_write(o->p, i);
	cr->prog = o->p;
	return cr->fused_write != NULL;
}

/* An input of an operation: if an asynchronous collective not yet known
 * done made it, the latest such per stream class goes to need[]. */
static void latest_coll(struct ov *o, unsigned port, void *arg)
{
	struct cgr__coll_rt **need = arg, *cr;
	size_t j = o->mk[port];

	if (j == SIZE_MAX || o->out[j].kind != CGR__OP_COLL)
		return;
	cr = o->out[j].coll;
	if (!cr->async || cr->sidx < o->done[cr->sclass])
		return;
	if (need[cr->sclass] == NULL || need[cr->sclass]->sidx < cr->sidx)
		need[cr->sclass] = cr;
}

/* Any other operation: per stream, a WAIT for the last collective whose
 * output it reads (unless one already covers it).  Returns 1 if it is a
 * stream task whose WRITE (op i + 1) was fused into its job, else 0. */
static int place_other(struct ov *o, size_t i)
{
	struct cgr__op *op = &o->p->ops[i];
	struct cgr__coll_rt *need[CGR__NSTREAMS] = { NULL };

	if (op->kind == CGR__OP_COMPUTE || op->kind == CGR__OP_WRITE)
		op_inputs(o, op, latest_coll, need);
	for (int s = 0; s < CGR__NSTREAMS; s++)
		if (need[s] != NULL) {
			put_wait(&o->out[o->m++], CGR__OP_WAIT, need[s], NULL,
				 false);
			o->done[s] = need[s]->sidx + 1;
		}
	o->out[o->m++] = *op;
	note_made(o, o->m - 1);
	if (op->kind != CGR__OP_COMPUTE || !op->tc->async)
		return 0;
	op->tc->tidx = o->tplaced++;
	op->tc->fused_write = next_write(o->p, i);
	return op->tc->fused_write != NULL;
}

/*
 * Across executions: the thread may start the next execution's first
 * synchronous collective while a stream still runs this one's later
 * collectives, which may share a communicator with it.  For each stream
 * with no collective before it in the same execution (whose WAIT would
 * order them), it waits for the stream's last one of the previous
 * execution (a `prev` WAIT).
 */
static void add_prev_waits(struct ov *o)
{
	for (size_t i = 0; i < o->m; i++) {
		if (o->out[i].kind != CGR__OP_COLL || o->out[i].coll->async)
			continue;
		for (int s = 0; s < CGR__NSTREAMS; s++) {
			struct cgr__coll_rt *last = NULL;
			bool before = false;
			for (size_t j = 0; j < o->m; j++)
				if (o->out[j].kind == CGR__OP_COLL &&
				    o->out[j].coll->async &&
				    o->out[j].coll->sclass == s) {
					before |= j < i;
					last = o->out[j].coll;
				}
			if (before || last == NULL)
				continue;
			memmove(&o->out[i + 1], &o->out[i],
				(o->m - i) * sizeof(*o->out));
			o->m++;
			put_wait(&o->out[i], CGR__OP_WAIT, last, NULL, true);
			o->out[i++].prev = true;
		}
		break;
	}
}

/* A stream task's WAIT on the thread before op, unless op is a
 * collective on a stream (whose stream joins by SWAIT instead). */
static struct cgr_task_ctx *join_tasks(struct ov *o, const struct cgr__op *op)
{
	struct cgr_task_ctx *tneed = NULL;

	if (op->kind != CGR__OP_COMPUTE || !op->tc->async)
		tneed = task_used(o, op);
	if (tneed == NULL || (op->kind == CGR__OP_COLL && op->coll->async))
		return tneed;
	if (tneed->tidx >= o->tdone)
		put_wait(&o->out[o->m++], CGR__OP_WAIT, NULL, tneed, false);
	if (o->tdone < tneed->tidx + 1)
		o->tdone = tneed->tidx + 1;
	return NULL;
}

static int overlap_prog(struct cgr_compiled *c, struct cgr__prog *p,
			size_t *mk, struct cgr_task_ctx **atask)
{
	size_t n = p->nops;
	struct ov o = { .c = c, .p = p, .mk = mk, .atask = atask };
	int ret;

	o.out = cgr__c_alloc(c, (CGR__NSTREAMS + 3) * (n + 1) * sizeof(*o.out));
	if (o.out == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct cgr__op *op = &p->ops[i];
		struct cgr_task_ctx *tneed = join_tasks(&o, op);
		if (op->kind == CGR__OP_COLL && !op->coll->async) {
			place_sync_coll(&o, op);
			continue;
		}
		ret = op->kind == CGR__OP_COLL ? place_async_coll(&o, i, tneed) :
						 place_other(&o, i);
		if (ret < 0)
			return ret;
		if (op->kind == CGR__OP_COLL && !op->coll->nccl)
			put_wait(&o.out[o.m++], CGR__OP_RUN, op->coll, NULL,
				 false);
		i += (size_t)ret; /* its WRITE was fused */
	}
	add_prev_waits(&o);
	p->ops = o.out;
	p->nops = o.m;
	/* The maps back to empty for the next program. */
	for (size_t j = 0; j < o.m; j++) {
		size_t k;
		const unsigned *ports = op_made(c, &o.out[j], &k);
		for (size_t q = 0; q < k; q++)
			if (ports[q] != CGR__NO_PORT) {
				mk[ports[q]] = SIZE_MAX;
				atask[ports[q]] = NULL;
			}
	}
	return 0;
}

/* Decides where each collective of p runs; whether p has anything to
 * overlap. */
static bool choose_streams(struct cgr_compiled *c, struct cgr__prog *p)
{
	bool any = false;

	for (size_t k = 0; k < p->ntcs; k++)
		any |= p->tcs[k].async;
	for (size_t k = 0; k < p->nops; k++) {
		struct cgr__coll_rt *cr = p->ops[k].coll;
		if (p->ops[k].kind != CGR__OP_COLL)
			continue;
		cr->async = cr->overlap == CGR_OVERLAP_ON ||
			    (cr->overlap == CGR_OVERLAP_DEFAULT &&
			     c->p.overlap);
		cr->cstream = !cr->edge		   ? CGR__S_COLL :
			      cr->rank == cr->root ? CGR__S_SEND :
						     CGR__S_RECV;
		cr->sclass = cr->nccl ? CGR__S_NCCL : cr->cstream;
		any |= cr->async;
	}
	return any;
}

int cgr__overlap(struct cgr__cc *cc)
{
	struct cgr_compiled *c = cc->c;
	struct cgr__arena *a = &c->ctx->arena;
	size_t sz = (c->nports + 1) * (sizeof(size_t) + sizeof(void *));
	unsigned char *mem = NULL;
	size_t *mk = NULL;
	struct cgr_task_ctx **atask = NULL;
	int ret = 0;
	bool overlapped = false;

	for (size_t i = 0; i < c->nprogs && ret == 0; i++) {
		if (!choose_streams(c, &c->progs[i]))
			continue;
		if (mem == NULL) {
			if ((mem = cgr__alloc(a, sz, 16)) == NULL)
				return -ENOMEM;
			mk = (size_t *)mem;
			atask = (struct cgr_task_ctx **)(mk + c->nports + 1);
			for (size_t q = 0; q <= c->nports; q++)
				mk[q] = SIZE_MAX;
		}
		ret = overlap_prog(c, &c->progs[i], mk, atask);
		overlapped = true;
	}
	cgr__free(a, mem, sz, 16);
	return ret < 0 ? ret : overlapped;
}
