/*
 * compile/prune.c: the WAITs of the overlap rewrite that other orderings
 * already imply are dropped here.
 */
#include <errno.h>
#include <string.h>

#include "compile/compile.h"

/*
 * Drops the WAITs that other orderings already imply.  Knowledge is a
 * vector clock over queues, each a worker's stream or its thread (for the
 * collectives it runs itself): K[q] = how many of queue q's collectives
 * are known finished.  It flows with ring messages (a WRITE sends the
 * writer's knowledge; a fused WRITE its job's), into a stream job from the
 * thread that issued it and from the job before it, and out of a finished
 * job into a WAIT.  A finished collective also proves that some members
 * had started it, so it carries their start-of-job knowledge, in which
 * their earlier collectives of that queue are finished: all members when
 * they agree on shapes every execution (every member posts its description
 * and waits for all the others', run/coll.c) or the backend joins
 * everybody (cgr__backend_joins_all); otherwise those whose data its output
 * needs (all; for broadcast and scatter the root; reduce and gather
 * outputs exist only at the root); none for a collective across hosts,
 * whose members each compute alone.  One execution is modelled.  A WAIT for
 * collective i of queue q is redundant when K[q] > i before it, counting
 * the other WAITs kept right beside it (before the same operation).  Knowledge
 * starts empty and only grows, so every sweep is sound and a cut-off only
 * leaves extra WAITs; dropping a redundant WAIT removes no knowledge, so
 * the other verdicts stay valid.  A worker's compute stream is a queue
 * too: its stream tasks in order, each knowing what the thread knew at its
 * issue; their fused WRITEs send what the task knows when done, a WAIT or
 * a communication stream's SWAIT before a job takes it.
 */
#define CGR__PRUNE_SWEEPS 64
/* Queues per worker: communication streams, compute stream, thread. */
#define CGR__KQ_THREAD CGR__NSTREAMS_ALL
#define CGR__NQ (CGR__NSTREAMS_ALL + 1)

struct kn {
	size_t nq;			 /* queues: programs x CGR__NQ */
	size_t *ncoll, *base;		 /* per queue */
	/* per (queue, item): the collective (NULL on a compute stream) */
	struct cgr__coll_rt **coll;
	/* The members of one collective: a chain through (queue,
	 * collective) indices from head[task id]; SIZE_MAX ends it. */
	size_t *next, *head;
	uint32_t *issue, *start, *after; /* per (queue, collective): nq */
	uint32_t *msg;			 /* per channel: nq */
	uint32_t *d;			 /* nq: the running knowledge */
	uint32_t *tmp;			 /* nq: scratch */
	bool changed;
};

/* The compute stream's queue of program p. */
static size_t kn_comp_q(size_t p)
{
	return p * CGR__NQ + CGR__S_COMP;
}

/* The queue of collective cr of program p. */
static size_t kn_q(size_t p, const struct cgr__coll_rt *cr)
{
	return p * CGR__NQ + (cr->async ? (size_t)cr->sclass : CGR__KQ_THREAD);
}

static uint32_t *kn_at(const struct kn *k, uint32_t *arr, size_t q,
			    size_t j)
{
	return arr + (k->base[q] + j) * k->nq;
}

static void kn_join(const struct kn *k, uint32_t *dst,
			 const uint32_t *src)
{
	for (size_t q = 0; q < k->nq; q++)
		if (src[q] > dst[q])
			dst[q] = src[q];
}

/* Joins the running knowledge into a stored vector, noting growth. */
static void kn_put(struct kn *k, uint32_t *dst)
{
	for (size_t q = 0; q < k->nq; q++)
		if (k->d[q] > dst[q]) {
			dst[q] = k->d[q];
			k->changed = true;
		}
}

/* The running knowledge after collective j of queue q finished. */
static void kn_finish(struct kn *k, size_t q, size_t j)
{
	const struct cgr__coll_rt *cr = k->coll[k->base[q] + j];
	/* Else only what the data needs is proven. */
	bool rooted = !cr->joins_all && cgr__coll_in_at_root(cr->kind);
	bool at_root = !cr->joins_all && cgr__coll_out_at_root(cr->kind);

	/* Across hosts a member meets nobody: its finish proves nothing of
	 * the others (run/coll.c, spans_run). */
	if (!cr->spans && (!rooted || cr->rank != cr->root) &&
	    (!at_root || cr->rank == cr->root))
		for (size_t x = k->head[cr->task_id]; x != SIZE_MAX;
		     x = k->next[x])
			if (!rooted || k->coll[x]->rank == k->coll[x]->root)
				kn_join(k, k->d, k->start + x * k->nq);
	if (k->d[q] < j + 1)
		k->d[q] = (uint32_t)j + 1;
	kn_put(k, kn_at(k, k->after, q, j));
}

/* The queue and item a WAIT (or SWAIT) w of program p waits for. */
static size_t kn_wq(size_t p, const struct cgr__op *w, size_t *j)
{
	if (w->tc != NULL) {
		*j = w->tc->tidx;
		return kn_comp_q(p);
	}
	*j = w->coll->sidx;
	return kn_q(p, w->coll);
}

/* What WAIT w of program p proves: its item's after-knowledge. */
static const uint32_t *kn_waited(const struct kn *k, size_t p,
				      const struct cgr__op *w)
{
	size_t j, q = kn_wq(p, w, &j);
	return kn_at(k, k->after, q, j);
}

/* Joins into dst what the other members of collective cr (of program p)
 * knew as they started it.  When members agree on shapes first
 * (run/coll.c), no data moves before every member posted: a wait that
 * only guards cr's input is redundant if any of them knew it done. */
static void kn_others(const struct kn *k, uint32_t *dst, size_t p,
			   const struct cgr__coll_rt *cr)
{
	size_t q = kn_q(p, cr);

	for (size_t x = k->head[cr->task_id];
	     !cr->static_shape && x != SIZE_MAX; x = k->next[x])
		if (x != k->base[q] + cr->sidx)
			kn_join(k, dst, k->start + x * k->nq);
}

/*
 * A run of WAITs [i, e) of program p before one operation: their order
 * does not matter, so each is judged against what the others still kept
 * will have proven (red may be NULL: no judging).  Then the running
 * knowledge takes what they all prove.
 */
static void kn_wait_run(struct kn *k, const struct cgr__prog *pr, size_t p,
			size_t i, size_t e, bool *red)
{
	/* A stream task's WAIT right before a collective on the thread
	 * guards that collective's input. */
	const struct cgr__coll_rt *next =
		e < pr->nops && pr->ops[e].kind == CGR__OP_COLL &&
				!pr->ops[e].coll->async ?
			pr->ops[e].coll :
			NULL;

	for (size_t x = i; x < e && red != NULL; x++) {
		const struct cgr__op *wx = &pr->ops[x];
		size_t jx, qx = kn_wq(p, wx, &jx);
		if (wx->prev)
			continue;
		memcpy(k->tmp, k->d, k->nq * sizeof(*k->d));
		for (size_t y = i; y < e; y++) {
			const struct cgr__op *wy = &pr->ops[y];
			if (y != x && !wy->prev && !red[y])
				kn_join(k, k->tmp, kn_waited(k, p, wy));
		}
		if (wx->tc != NULL && next != NULL)
			kn_others(k, k->tmp, p, next);
		red[x] = k->tmp[qx] > jx;
	}
	/* prev: another execution: kept, no news */
	for (size_t y = i; y < e; y++)
		if (!pr->ops[y].prev)
			kn_join(k, k->d, kn_waited(k, p, &pr->ops[y]));
}

/* Program p's worker thread; red[i]: whether its op i is a redundant
 * WAIT (red may be NULL). */
static void kn_thread(struct kn *k, const struct cgr_compiled *c, size_t p,
		      bool *red)
{
	const struct cgr__prog *pr = &c->progs[p];

	memset(k->d, 0, k->nq * sizeof(*k->d));
	for (size_t i = 0; i < pr->nops; i++) {
		const struct cgr__op *op = &pr->ops[i];
		size_t q, j, e;
		switch (op->kind) {
		case CGR__OP_READ:
			kn_join(k, k->d, k->msg + op->chan * k->nq);
			break;
		case CGR__OP_WRITE:
			for (size_t w = 0; w < op->nchans; w++)
				kn_put(k, k->msg + op->chans[w] * k->nq);
			break;
		case CGR__OP_COMPUTE:
			if (op->tc->async)
				kn_put(k, kn_at(k, k->issue, kn_comp_q(p),
						op->tc->tidx));
			break;
		case CGR__OP_COLL:
			q = kn_q(p, op->coll);
			j = op->coll->sidx;
			if (op->coll->async) {
				kn_put(k, kn_at(k, k->issue, q, j));
			} else {
				kn_put(k, kn_at(k, k->start, q, j));
				kn_finish(k, q, j);
			}
			break;
		case CGR__OP_WAIT:
			for (e = i; e < pr->nops &&
				    pr->ops[e].kind == CGR__OP_WAIT;
			     e++)
				;
			kn_wait_run(k, pr, p, i, e, red);
			i = e - 1;
			break;
		default:
			break;
		}
	}
}

/* What queue q knows before its job j: its issue, the job before. */
static void kn_before(struct kn *k, size_t q, size_t j)
{
	memcpy(k->d, kn_at(k, k->issue, q, j), k->nq * sizeof(*k->d));
	if (j > 0)
		kn_join(k, k->d, kn_at(k, k->after, q, j - 1));
}

/* Compute stream queue q: its stream tasks in order. */
static void kn_comp(struct kn *k, const struct cgr_compiled *c,
			 size_t q)
{
	const struct cgr__prog *pr = &c->progs[q / CGR__NQ];

	for (size_t i = 0, j = 0; i < pr->nops; i++) {
		const struct cgr_task_ctx *tc = pr->ops[i].tc;
		if (pr->ops[i].kind != CGR__OP_COMPUTE || !tc->async)
			continue;
		kn_before(k, q, j);
		k->d[q] = (uint32_t)j + 1;
		kn_put(k, kn_at(k, k->after, q, j));
		for (size_t w = 0; tc->fused_write != NULL &&
				   w < tc->fused_write->nchans;
		     w++)
			kn_put(k, k->msg + tc->fused_write->chans[w] *
						       k->nq);
		j++;
	}
}

/* Communication stream queue q of program p: its jobs in order, each
 * after its SWAIT (if any). */
static void kn_stream(struct kn *k, size_t p, size_t q)
{
	for (size_t j = 0; j < k->ncoll[q]; j++) {
		const struct cgr__coll_rt *cr = k->coll[k->base[q] + j];
		const struct cgr__op *fw = cr->fused_write;
		kn_before(k, q, j);
		if (cr->swait != NULL)
			kn_join(k, k->d,
				     kn_at(k, k->after,
						kn_comp_q(p),
						cr->swait->tidx));
		kn_put(k, kn_at(k, k->start, q, j));
		kn_finish(k, q, j);
		for (size_t w = 0; fw != NULL && w < fw->nchans; w++)
			kn_put(k, k->msg + fw->chans[w] * k->nq);
	}
}

/* Lays the knowledge's arrays out in one block (k->nq set); NULL when
 * out of memory.  *size gets the block's size. */
static unsigned char *kn_alloc(struct kn *k, const struct cgr_compiled *c,
			       size_t ntasks, size_t *maxops, size_t *size)
{
	size_t total = 0, nv;
	unsigned char *mem;

	*maxops = 0;
	for (size_t p = 0; p < c->nprogs; p++) {
		const struct cgr__prog *pr = &c->progs[p];
		for (size_t i = 0; i < pr->nops; i++)
			total += pr->ops[i].kind == CGR__OP_COLL ||
				 (pr->ops[i].kind == CGR__OP_COMPUTE &&
				  pr->ops[i].tc->async);
		if (pr->nops > *maxops)
			*maxops = pr->nops;
	}
	nv = total * k->nq;
	*size = (2 * k->nq + total + ntasks) * sizeof(size_t) +
		total * sizeof(void *) +
		(3 * nv + c->nchans * k->nq + 2 * k->nq) * sizeof(uint32_t) +
		*maxops;
	mem = cgr__alloc(&c->ctx->arena, *size, 16);
	if (mem == NULL)
		return NULL;
	k->ncoll = (size_t *)mem;
	k->base = k->ncoll + k->nq;
	k->next = k->base + k->nq;
	k->head = k->next + total;
	k->coll = (struct cgr__coll_rt **)(k->head + ntasks);
	k->issue = (uint32_t *)(k->coll + total);
	k->start = k->issue + nv;
	k->after = k->start + nv;
	k->msg = k->after + nv;
	k->d = k->msg + c->nchans * k->nq;
	k->tmp = k->d + k->nq;
	return mem;
}

/* The queues' items in order: a stream's collectives in program order are
 * in its order (the overlap pass keeps it), the thread's likewise, and
 * the stream tasks (tidx); each collective's members chained by task. */
static void kn_queues(struct kn *k, const struct cgr_compiled *c,
		      size_t ntasks)
{
	for (size_t t = 0; t < ntasks; t++)
		k->head[t] = SIZE_MAX;
	for (size_t q = 0, n = 0; q < k->nq; q++) {
		const struct cgr__prog *pr = &c->progs[q / CGR__NQ];
		k->base[q] = n;
		for (size_t i = 0; i < pr->nops; i++) {
			struct cgr__coll_rt *cr = pr->ops[i].coll;
			if (q % CGR__NQ == CGR__S_COMP) {
				if (pr->ops[i].kind == CGR__OP_COMPUTE &&
				    pr->ops[i].tc->async) {
					k->next[n] = SIZE_MAX;
					k->coll[n++] = NULL;
				}
				continue;
			}
			if (pr->ops[i].kind != CGR__OP_COLL ||
			    kn_q(q / CGR__NQ, cr) != q)
				continue;
			cr->sidx = (uint32_t)(n - k->base[q]);
			k->next[n] = k->head[cr->task_id];
			k->head[cr->task_id] = n;
			k->coll[n++] = cr;
		}
		k->ncoll[q] = n - k->base[q];
	}
}

/*
 * Marks program p's redundant WAITs and SWAITs in red and drops them.
 * An SWAIT is redundant when its stream already knows the stream task
 * finished (the COLL after it is its job); or, when the members agree on
 * shapes first (run/coll.c: no data moves before every member posted),
 * when another member knew it as it started.
 */
static void prune_prog(struct kn *k, struct cgr_compiled *c, size_t p,
		       bool *red)
{
	struct cgr__prog *pr = &c->progs[p];
	size_t m = 0;

	memset(red, 0, pr->nops);
	kn_thread(k, c, p, red);
	for (size_t i = 0; i + 1 < pr->nops; i++) {
		const struct cgr__coll_rt *cr = pr->ops[i + 1].coll;
		size_t q;
		if (pr->ops[i].kind != CGR__OP_SWAIT)
			continue;
		q = kn_q(p, cr);
		kn_before(k, q, cr->sidx);
		kn_others(k, k->d, p, cr);
		red[i] = k->d[kn_comp_q(p)] > pr->ops[i].tc->tidx;
	}
	for (size_t i = 0; i < pr->nops; i++)
		if ((pr->ops[i].kind != CGR__OP_WAIT &&
		     pr->ops[i].kind != CGR__OP_SWAIT) ||
		    !red[i])
			pr->ops[m++] = pr->ops[i];
	pr->nops = m;
}

int cgr__prune_waits(struct cgr_compiled *c, size_t ntasks)
{
	struct kn k = { .nq = c->nprogs * CGR__NQ };
	size_t maxops, size;
	unsigned char *mem = kn_alloc(&k, c, ntasks, &maxops, &size);
	bool *red;

	if (mem == NULL)
		return -ENOMEM;
	red = (bool *)(k.tmp + k.nq);
	kn_queues(&k, c, ntasks);
	k.changed = true;
	for (int sw = 0; sw < CGR__PRUNE_SWEEPS && k.changed; sw++) {
		k.changed = false;
		for (size_t p = 0; p < c->nprogs; p++)
			kn_thread(&k, c, p, NULL);
		for (size_t q = 0; q < k.nq; q++)
			if (q % CGR__NQ == CGR__S_COMP)
				kn_comp(&k, c, q);
			else if (q % CGR__NQ != CGR__KQ_THREAD)
				kn_stream(&k, q / CGR__NQ, q);
	}
	for (size_t p = 0; p < c->nprogs; p++)
		prune_prog(&k, c, p, red);
	cgr__free(&c->ctx->arena, mem, size, 16);
	return 0;
}
