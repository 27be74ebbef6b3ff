/*
 * comm/cpu_setup.c: the CPU backend's life (see cpu.h): creating a
 * communicator (its shared state laid out here or attached to in another
 * process's segment), aborting and destroying it, its table of
 * operations.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "comm/cpu.h"

int cgr__cpu_abort(cgr_comm *cc)
{
	struct cgr__cpu *c = cgr__cpu_of(cc);

	/* A0: seq_cst: pairs with the re-check in cgr__move_begin. */
	if (atomic_exchange_explicit(&c->sh->aborted, 1, memory_order_seq_cst) ==
	    0)
		cgr__info(c->base.log, "communicator aborted");
	cgr__bell_ring_force(&c->sh->bell);
	return 0;
}

static const char *cgr__cpu_errmsg(const cgr_comm *cc, int r)
{
	return ((const struct cgr__cpu *)cc)->ranks[r].errmsg;
}

static bool cgr__all_done(void *arg)
{
	struct cgr__cpu *c = arg;

	for (int r = 0; r < c->base.n; r++)
		if (atomic_load_explicit(&c->ranks[r].done,
					 memory_order_acquire) !=
		    c->ranks[r].issued)
			return false;
	return true;
}

/* Every record's executor let go of c (L0), by the deadline. */
static bool cgr__all_left(struct cgr__cpu *c, int64_t deadline)
{
	for (;;) {
		bool all = true;
		for (int r = 0; r < c->base.n && all; r++)
			all = atomic_load_explicit(&c->ranks[r].left,
						   memory_order_acquire) ==
			      c->ranks[r].issued;
		if (all)
			return true;
		if (cgr__now_ns() >= deadline)
			return false;
		sched_yield();
	}
}

static void cgr__cpu_destroy(cgr_comm *cc)
{
	struct cgr__cpu *c = cgr__cpu_of(cc);
	struct cgr__arena *a = c->base.arena;
	size_t n = (size_t)c->base.n;

	/* A record whose futures completed still marks itself done and
	 * rings the bell: a moment, not an operation pending. */
	if (!cgr__all_left(c, cgr__deadline(10000000)) && !cgr__all_done(c)) {
		cgr__warn(c->base.log,
			  "communicator destroyed with operations pending: "
			  "aborting them");
		cgr__cpu_abort(cc);
		(void)cgr__reactor_wait(NULL, &c->sh->bell, cgr__all_done, c,
					NULL, CGR_WAIT_BLOCK, 0,
					cgr__deadline(1000000000));
	}
	if (!cgr__all_left(c, cgr__deadline(1000000000))) {
		cgr__err(c->base.log, "communicator: pending operations did not "
				      "finish; its memory is leaked");
		return;
	}
	for (size_t r = 0; r < n; r++) {
		struct cgr__rank *rk = &c->ranks[r];
		/* A group never ended: its futures (the callers hold
		 * them) fail. */
		for (size_t i = 0; i < rk->gn; i++)
			if (rk->gitems[i].fut != NULL)
				cgr__dfuture_complete(rk->gitems[i].fut,
						      -ECANCELED);
		if (rk->gcap)
			cgr__free(a, rk->gitems, rk->gcap * sizeof(*rk->gitems),
				  CGR__CACHELINE);
		for (size_t i = 0; i < rk->gfn; i++)
			cgr__dfuture_complete(rk->gfuts[i], -ECANCELED);
		if (rk->gfcap)
			cgr__free(a, rk->gfuts, rk->gfcap * sizeof(*rk->gfuts),
				  16);
		cgr__free(a, rk->sidx, CGR__IDX_WORDS(n) * 8, 16);
		for (size_t i = 0; i < CGR__NREC; i++) {
			struct cgr__rec *rec = &rk->recs[i];
			if (rec->arrcap)
				cgr__free(a, rec->arr,
					  rec->arrcap * sizeof(*rec->arr),
					  CGR__CACHELINE);
			if (rec->gfarrcap)
				cgr__free(a, rec->gfarr,
					  rec->gfarrcap * sizeof(*rec->gfarr),
					  16);
		}
	}
	cgr__free(a, c->ranks, n * sizeof(*c->ranks), CGR__CACHELINE);
	if (c->own_sh)
		cgr__free(a, c->sh, cgr__cpu_shared_size((int)n),
			  CGR__CACHELINE);
	cgr__free(a, c, sizeof(*c), CGR__CACHELINE);
}

static const struct cgr__comm_ops cgr__cpu_ops = {
	.name = "cpu",
	.send = cgr__cpu_op,
	.recv = cgr__cpu_op,
	.allreduce = cgr__cpu_op,
	.allgather = cgr__cpu_op,
	.reducescatter = cgr__cpu_op,
	.reduce = cgr__cpu_op,
	.broadcast = cgr__cpu_op,
	.gather = cgr__cpu_op,
	.scatter = cgr__cpu_op,
	.alltoall = cgr__cpu_op,
	.group_start = cgr__cpu_group_start,
	.group_end = cgr__cpu_group_end,
	.abort = cgr__cpu_abort,
	.destroy = cgr__cpu_destroy,
	.errmsg = cgr__cpu_errmsg,
};

size_t cgr__cpu_shared_size(int n)
{
	size_t nn = (size_t)n;

	return sizeof(struct cgr__cshm) + nn * sizeof(struct cgr__rpub) +
	       2 * nn * sizeof(struct cgr__fast) +
	       nn * nn * sizeof(struct cgr__pair);
}

/* The shared state laid out over c->sh (set up unless attach). */
static void cpu_shared_init(struct cgr__cpu *c, bool attach)
{
	size_t nn = (size_t)c->base.n;
	unsigned char *m = (unsigned char *)c->sh + sizeof(*c->sh);

	c->pub = (struct cgr__rpub *)m;
	m += nn * sizeof(*c->pub);
	c->fast = (struct cgr__fast *)m;
	m += 2 * nn * sizeof(*c->fast);
	c->pairs = (struct cgr__pair *)m;
	if (attach)
		return; /* the process that made it set it up */
	c->sh->magic = CGR__CSHM_MAGIC;
	c->sh->version = CGR__CSHM_VERSION;
	c->sh->n = (uint32_t)nn;
	atomic_init(&c->sh->aborted, 0);
	atomic_init(&c->sh->movers, 0);
	cgr__bell_init(&c->sh->bell);
	for (size_t i = 0; i < 2 * nn; i++)
		atomic_init(&c->fast[i].seq, 0);
	for (size_t r = 0; r < nn; r++)
		atomic_init(&c->pub[r].stage, 0);
	for (size_t i = 0; i < nn * nn; i++) {
		atomic_init(&c->pairs[i].sent, 0);
		atomic_init(&c->pairs[i].taken, 0);
	}
}

int cgr__cpu_comm_create(cgr_ctx *ctx, int n, const struct cgr__comm_shm *shm,
			 cgr_comm **out)
{
	struct cgr__arena *a = &ctx->arena;
	struct cgr__cpu *c;
	size_t nn = (size_t)n;

	c = cgr__alloc(a, sizeof(*c), CGR__CACHELINE);
	if (c == NULL)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	c->base.ops = &cgr__cpu_ops;
	c->base.arena = a;
	c->base.log = &ctx->log;
	c->base.ctx = ctx;
	c->base.n = n;
	if (shm != NULL) {
		c->sh = shm->mem;
		c->xbase = (uintptr_t)shm->seg;
		c->xsize = shm->seg_size;
	} else {
		c->sh = cgr__alloc(a, cgr__cpu_shared_size(n), CGR__CACHELINE);
		c->own_sh = true;
	}
	c->ranks = cgr__alloc(a, nn * sizeof(*c->ranks), CGR__CACHELINE);
	if (c->sh == NULL || c->ranks == NULL)
		goto nomem;
	memset(c->ranks, 0, nn * sizeof(*c->ranks));
	if (shm != NULL && shm->attach &&
	    (c->sh->magic != CGR__CSHM_MAGIC ||
	     c->sh->version != CGR__CSHM_VERSION || c->sh->n != (uint32_t)n)) {
		cgr__err(&ctx->log,
			 "communicator: the shared state of another process is "
			 "not a %d-rank communicator of this version",
			 n);
		cgr__free(a, c->ranks, nn * sizeof(*c->ranks), CGR__CACHELINE);
		cgr__free(a, c, sizeof(*c), CGR__CACHELINE);
		return -EPROTO;
	}
	cpu_shared_init(c, shm != NULL && shm->attach);
	for (size_t r = 0; r < nn; r++) {
		atomic_init(&c->ranks[r].done, 0);
		atomic_init(&c->ranks[r].left, 0);
		/* sidx, ridx and sfree share one allocation. */
		c->ranks[r].sidx = cgr__alloc(a, CGR__IDX_WORDS(nn) * 8, 16);
		if (c->ranks[r].sidx == NULL)
			goto nomem;
		c->ranks[r].ridx = c->ranks[r].sidx + nn;
		c->ranks[r].sfree = c->ranks[r].ridx + nn;
		for (size_t i = 0; i < nn * CGR__P2P_SLOTS; i++)
			c->ranks[r].sfree[i] = i % CGR__P2P_SLOTS;
	}
	*out = &c->base;
	return 0;
nomem:
	if (c->ranks != NULL)
		for (size_t r = 0; r < nn; r++)
			cgr__free(a, c->ranks[r].sidx, CGR__IDX_WORDS(nn) * 8,
				  16);
	cgr__free(a, c->ranks, nn * sizeof(*c->ranks), CGR__CACHELINE);
	if (c->own_sh)
		cgr__free(a, c->sh, cgr__cpu_shared_size(n), CGR__CACHELINE);
	cgr__free(a, c, sizeof(*c), CGR__CACHELINE);
	return -ENOMEM;
}
