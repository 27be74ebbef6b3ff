/*
 * compile/plan.c: the compiled plan (plan.h): its writer (the compiler's
 * final programs encoded as one image, in the graph's shared segment
 * when it has one), its checker (every header field, the checksum, and
 * every count, offset and index against its bound), and the loader that
 * builds a runner's programs (struct cgr__prog, prog.h) from a checked
 * image: pointers resolved from indices, and the runtime state (scratch,
 * jobs, trace buffers, collectives' buckets) allocated here, in one order
 * in every process, so that what lives in a shared segment lands at the
 * same offsets everywhere.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compile/compile.h"

/* ---- checksum --------------------------------------------------------- */

uint64_t cgr__plan_fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

uint64_t cgr__plan_sum(const void *img, size_t len)
{
	size_t from = offsetof(struct cgr__plan_hdr, checksum) + 8;

	return len > from ? cgr__plan_fnv((const char *)img + from, len - from)
			  : 0;
}

/* ---- the writer ------------------------------------------------------- */

/*
 * Whether program p waits for the driver to admit each execution: nothing
 * anybody can see (a task call, an NCCL operation, a write) may happen
 * for an execution nobody asked for.  Its leading operations decide.  A
 * READ waits for a producer that was admitted (by induction).  A CPU
 * collective reached before any READ or task is one this worker only
 * receives from (a member with an input made it first): on the thread its
 * agreement, and a WAIT for one started on a communication stream, wait
 * for the root's data, so for the root's admission.  Not one on a
 * communicator across hosts (far): its members send their records
 * first, which a teardown would cut short.  The start on a stream and
 * waits for an earlier execution show nothing: skipped.
 */
static bool prog_gated(const struct cgr__prog *p)
{
	for (size_t i = 0; i < p->nops; i++) {
		const struct cgr__op *op = &p->ops[i];
		const struct cgr__coll_rt *cr = op->coll;
		if (op->kind == CGR__OP_SWAIT ||
		    (op->kind == CGR__OP_WAIT && (cr == NULL || op->prev)) ||
		    (op->kind == CGR__OP_COLL && cr->async && !cr->nccl))
			continue;
		return op->kind != CGR__OP_READ &&
		       !((op->kind == CGR__OP_COLL ||
			  op->kind == CGR__OP_WAIT ||
			  op->kind == CGR__OP_RUN) &&
			 !cr->nccl && !cr->far);
	}
	return false;
}

/* An image under construction: counts first (buf NULL), then filled. */
struct pw {
	unsigned char *buf;
	struct cgr__plan_hdr h;
	uint32_t nops, ntcs, ncolls, npool, nstr;
};

static uint32_t *pw_at(struct pw *w, uint32_t off, size_t esize, uint32_t i)
{
	return (uint32_t *)(void *)(w->buf + off + (size_t)i * esize);
}

/* n entries of the u32 pool; returns the first's index. */
static uint32_t pw_pool(struct pw *w, const unsigned *v, size_t n)
{
	uint32_t at = w->npool;

	if (w->buf != NULL)
		for (size_t i = 0; i < n; i++)
			pw_at(w, w->h.pool_off, 4, at)[i] = v[i];
	w->npool += (uint32_t)n;
	return at;
}

static uint32_t pw_str(struct pw *w, const char *s)
{
	size_t n = strlen(s != NULL ? s : "") + 1;
	uint32_t at = w->nstr;

	if (w->buf != NULL)
		memcpy(w->buf + w->h.str_off + at, s != NULL ? s : "", n);
	w->nstr += (uint32_t)n;
	return at;
}

/* Numbers p's collectives by their place among its COLL operations
 * (cr->pidx; NONE for one no COLL of p runs). */
static void coll_number(const struct cgr__prog *p)
{
	uint32_t n = 0;

	for (size_t k = 0; k < p->nops; k++)
		if (p->ops[k].coll != NULL)
			p->ops[k].coll->pidx = CGR__PLAN_NONE;
	for (size_t k = 0; k < p->nops; k++)
		if (p->ops[k].kind == CGR__OP_COLL)
			p->ops[k].coll->pidx = n++;
}

/* The index of collective cr among p's COLL operations (coll_number). */
static uint32_t coll_index(const struct cgr__coll_rt *cr)
{
	return cr == NULL ? CGR__PLAN_NONE : cr->pidx;
}

static uint32_t tc_index(const struct cgr__prog *p,
			 const struct cgr_task_ctx *tc)
{
	return tc == NULL ? CGR__PLAN_NONE : (uint32_t)(tc - p->tcs);
}

static void put_task(struct pw *w, const struct cgr_task_ctx *tc)
{
	struct cgr__plan_task e;

	memset(&e, 0, sizeof(e));
	e.task_id = tc->task_id;
	e.flags = (tc->stream ? CGR__PLAN_STREAM : 0) |
		  (tc->async ? CGR__PLAN_ASYNC : 0) |
		  (tc->device ? CGR__PLAN_DEVICE : 0) |
		  (tc->fused_write != NULL ? CGR__PLAN_FUSED : 0);
	e.tidx = tc->tidx;
	e.nin = (uint32_t)tc->nin;
	e.in = pw_pool(w, tc->in_ports, tc->nin);
	e.nout = (uint32_t)tc->nout;
	e.out = pw_pool(w, tc->out_ports, tc->nout);
	if (tc->fused_write != NULL) {
		e.nfw = (uint32_t)tc->fused_write->nchans;
		e.fw = pw_pool(w, tc->fused_write->chans, e.nfw);
	}
	e.name = pw_str(w, tc->name);
	if (w->buf != NULL)
		memcpy(pw_at(w, w->h.tasks_off, sizeof(e), w->ntcs), &e,
		       sizeof(e));
	w->ntcs++;
}

static void put_coll(struct pw *w, const struct cgr__prog *p,
		     const struct cgr__coll_rt *cr, uint32_t opi)
{
	struct cgr__plan_coll e;

	memset(&e, 0, sizeof(e));
	e.task_id = cr->task_id;
	e.flags = (cr->static_shape ? CGR__PLAN_STATIC : 0) |
		  (cr->edge ? CGR__PLAN_EDGE : 0) |
		  (cr->nccl ? CGR__PLAN_NCCL : 0) |
		  (cr->async ? CGR__PLAN_CASYNC : 0) |
		  (cr->joins_all ? CGR__PLAN_JOINS_ALL : 0) |
		  (cr->spans ? CGR__PLAN_SPANS : 0) |
		  (cr->fused_write != NULL ? CGR__PLAN_CFUSED : 0);
	e.kind = cr->kind;
	e.op = cr->op;
	e.root = cr->root;
	e.rank = cr->rank;
	e.n = cr->n;
	e.k = (uint32_t)cr->k;
	e.cstream = cr->cstream;
	e.sclass = cr->sclass;
	e.sidx = cr->sidx;
	e.overlap = cr->overlap;
	e.opi = opi;
	e.swait = tc_index(p, cr->swait);
	e.root_port = cr->root_port;
	e.in = pw_pool(w, cr->in_ports, cr->k);
	e.out = pw_pool(w, cr->out_ports, cr->k);
	e.all_in = pw_pool(w, cr->all_in_ports, (size_t)cr->n * cr->k);
	if (cr->fused_write != NULL) {
		e.nfw = (uint32_t)cr->fused_write->nchans;
		e.fw = pw_pool(w, cr->fused_write->chans, e.nfw);
	}
	e.name = pw_str(w, cr->name);
	e.cap = cr->cap;
	if (w->buf != NULL)
		memcpy(pw_at(w, w->h.colls_off, sizeof(e), w->ncolls), &e,
		       sizeof(e));
	w->ncolls++;
}

static void put_op(struct pw *w, const struct cgr__prog *p,
		   const struct cgr__op *op)
{
	struct cgr__plan_op e;

	e.kind = (uint32_t)op->kind;
	e.flags =
	    (op->order ? CGR__PLAN_ORDER : 0) | (op->prev ? CGR__PLAN_PREV : 0);
	e.chan = op->kind == CGR__OP_READ ? op->chan : CGR__PLAN_NONE;
	e.tc = tc_index(p, op->tc);
	e.coll = coll_index(op->coll);
	e.chans = e.nchans = 0;
	if (op->kind == CGR__OP_WRITE) {
		e.nchans = (uint32_t)op->nchans;
		e.chans = pw_pool(w, op->chans, op->nchans);
	}
	if (w->buf != NULL)
		memcpy(pw_at(w, w->h.ops_off, sizeof(e), w->nops), &e,
		       sizeof(e));
	w->nops++;
}

/* One pass over every program: counts (w->buf NULL) or fills. */
static void pw_pass(struct pw *w, const struct cgr_compiled *c)
{
	w->nops = w->ntcs = w->ncolls = w->npool = w->nstr = 0;
	for (size_t i = 0; i < c->nprogs; i++) {
		const struct cgr__prog *p = &c->progs[i];
		struct cgr__plan_prog e;
		memset(&e, 0, sizeof(e));
		e.worker = p->w->index;
		e.flags = prog_gated(p) ? CGR__PLAN_GATE : 0;
		e.op0 = w->nops;
		e.tc0 = w->ntcs;
		e.coll0 = w->ncolls;
		coll_number(p);
		for (size_t k = 0; k < p->nops; k++)
			put_op(w, p, &p->ops[k]);
		for (size_t k = 0; k < p->ntcs; k++)
			put_task(w, &p->tcs[k]);
		for (size_t k = 0; k < p->nops; k++)
			if (p->ops[k].kind == CGR__OP_COLL)
				put_coll(w, p, p->ops[k].coll, (uint32_t)k);
		e.nops = w->nops - e.op0;
		e.ntcs = w->ntcs - e.tc0;
		e.ncolls = w->ncolls - e.coll0;
		if (w->buf != NULL)
			memcpy(pw_at(w, w->h.progs_off, sizeof(e), (uint32_t)i),
			       &e, sizeof(e));
	}
}

static uint32_t align8(size_t n)
{
	return (uint32_t)CGR__ALIGN_UP(n, 8);
}

/* The size of every section, from the counts of a first pass. */
static size_t pw_layout(struct pw *w, const struct cgr_compiled *c)
{
	struct cgr__plan_hdr *h = &w->h;
	size_t at = align8(sizeof(*h));

	h->nprogs = (uint32_t)c->nprogs;
	h->progs_off = (uint32_t)at;
	at += align8((size_t)h->nprogs * sizeof(struct cgr__plan_prog));
	h->ops_off = (uint32_t)at, h->nops = w->nops;
	at += align8((size_t)w->nops * sizeof(struct cgr__plan_op));
	h->tasks_off = (uint32_t)at, h->ntcs = w->ntcs;
	at += align8((size_t)w->ntcs * sizeof(struct cgr__plan_task));
	h->colls_off = (uint32_t)at, h->ncolls = w->ncolls;
	at += align8((size_t)w->ncolls * sizeof(struct cgr__plan_coll));
	h->pool_off = (uint32_t)at, h->npool = w->npool;
	at += align8((size_t)w->npool * 4);
	h->str_off = (uint32_t)at, h->nstr = w->nstr;
	at += align8(w->nstr);
	return at;
}

int cgr__plan_encode(struct cgr__cc *cc, void **img, size_t *len)
{
	struct cgr_compiled *c = cc->c;
	struct pw w;
	size_t size;

	memset(&w, 0, sizeof(w));
	pw_pass(&w, c);
	size = pw_layout(&w, c);
	if (size > UINT32_MAX)
		return -E2BIG;
	w.buf = cgr__c_alloc(c, size);
	if (w.buf == NULL)
		return -ENOMEM;
	memset(w.buf, 0, size);
	pw_pass(&w, c);
	w.h.magic = CGR__PLAN_MAGIC;
	w.h.version = CGR__PLAN_VERSION;
	w.h.hdr_bytes = sizeof(w.h);
	w.h.size = size;
	w.h.ntasks = (uint32_t)cc->ntasks;
	w.h.nports = (uint32_t)c->nports;
	w.h.nchans = (uint32_t)c->nchans;
	w.h.nslots = c->nslots;
	memcpy(w.buf, &w.h, sizeof(w.h));
	((struct cgr__plan_hdr *)(void *)w.buf)->checksum =
	    cgr__plan_sum(w.buf, size);
	*img = w.buf;
	*len = size;
	return 0;
}

/* ---- the checker ------------------------------------------------------ */

struct ck {
	const unsigned char *b;
	const struct cgr__plan_hdr *h;
	char *why;
	size_t wlen;
};

static int ck_fail(struct ck *k, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int ck_fail(struct ck *k, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (k->why != NULL && k->wlen > 0)
		vsnprintf(k->why, k->wlen, fmt, ap);
	va_end(ap);
	return err;
}

/* Whether the section at off of n entries of esize bytes lies inside. */
static bool ck_section(const struct ck *k, uint32_t off, uint32_t n,
		       size_t esize)
{
	return off % 8 == 0 && off >= k->h->hdr_bytes && off <= k->h->size &&
	       (uint64_t)n * esize <= k->h->size - off;
}

/* A pool list of n entries at `at`. */
static bool ck_list(const struct ck *k, uint32_t at, uint64_t n)
{
	return at <= k->h->npool && n <= k->h->npool - at;
}

static const uint32_t *ck_pool(const struct ck *k)
{
	return (const uint32_t *)(const void *)(k->b + k->h->pool_off);
}

/* Every entry of the pool list [at, at + n) below bound (NONE allowed if
 * none_ok); else the first bad entry's position. */
static int64_t ck_bounded(const struct ck *k, uint32_t at, uint64_t n,
			  uint32_t bound, bool none_ok)
{
	const uint32_t *pool = ck_pool(k);

	for (uint64_t i = 0; i < n; i++)
		if (pool[at + i] >= bound &&
		    !(none_ok && pool[at + i] == CGR__PLAN_NONE))
			return (int64_t)i;
	return -1;
}

static bool ck_name(const struct ck *k, uint32_t at)
{
	const char *s = (const char *)k->b + k->h->str_off;

	return at < k->h->nstr && memchr(s + at, 0, k->h->nstr - at) != NULL;
}

/* A list of ports or channels: in the pool, every entry below bound. */
static int ck_ports(struct ck *k, const char *what, size_t pi, size_t ei,
		    const char *list, uint32_t at, uint64_t n, uint32_t bound,
		    bool none_ok)
{
	int64_t bad;

	if (!ck_list(k, at, n))
		return ck_fail(k, -EINVAL,
			       "program %zu %s %zu: its %s (%llu at %u) lie "
			       "outside the pool (%u)",
			       pi, what, ei, list, (unsigned long long)n, at,
			       k->h->npool);
	bad = ck_bounded(k, at, n, bound, none_ok);
	if (bad >= 0)
		return ck_fail(k, -EINVAL,
			       "program %zu %s %zu: %s %lld is %u, out of "
			       "range (%u)",
			       pi, what, ei, list, (long long)bad,
			       ck_pool(k)[at + bad], bound);
	return 0;
}

static int ck_op(struct ck *k, size_t pi, size_t oi,
		 const struct cgr__plan_prog *pp, const struct cgr__plan_op *o)
{
	bool need_tc = false, need_coll = false, may_tc = false,
	     may_coll = false;

	switch (o->kind) {
	case CGR__OP_READ:
		if (o->chan >= k->h->nchans)
			return ck_fail(k, -EINVAL,
				       "program %zu op %zu: channel %u out of "
				       "range (%u)",
				       pi, oi, o->chan, k->h->nchans);
		break;
	case CGR__OP_WRITE:
		return ck_ports(k, "op", pi, oi, "channel", o->chans, o->nchans,
				k->h->nchans, false);
	case CGR__OP_COMPUTE:
		need_tc = true;
		break;
	case CGR__OP_COLL:
	case CGR__OP_RUN:
		need_coll = true;
		break;
	case CGR__OP_WAIT:
		may_tc = may_coll = true;
		if (o->tc == CGR__PLAN_NONE && o->coll == CGR__PLAN_NONE)
			return ck_fail(k, -EINVAL,
				       "program %zu op %zu: a WAIT for "
				       "nothing",
				       pi, oi);
		break;
	case CGR__OP_SWAIT:
		need_tc = need_coll = true;
		break;
	default:
		return ck_fail(k, -EINVAL,
			       "program %zu op %zu: kind %u is no operation",
			       pi, oi, o->kind);
	}
	if ((need_tc || (may_tc && o->tc != CGR__PLAN_NONE)) &&
	    o->tc >= pp->ntcs)
		return ck_fail(k, -EINVAL,
			       "program %zu op %zu: task %u out of range (%u)",
			       pi, oi, o->tc, pp->ntcs);
	if ((need_coll || (may_coll && o->coll != CGR__PLAN_NONE)) &&
	    o->coll >= pp->ncolls)
		return ck_fail(k, -EINVAL,
			       "program %zu op %zu: collective %u out of "
			       "range (%u)",
			       pi, oi, o->coll, pp->ncolls);
	return 0;
}

static int ck_task(struct ck *k, size_t pi, size_t ti,
		   const struct cgr__plan_task *t)
{
	int ret;

	if (t->task_id >= k->h->ntasks)
		return ck_fail(k, -EINVAL,
			       "program %zu task %zu: graph task %u out of "
			       "range (%u)",
			       pi, ti, t->task_id, k->h->ntasks);
	if ((ret = ck_ports(k, "task", pi, ti, "input port", t->in, t->nin,
			    k->h->nports, false)) < 0 ||
	    (ret = ck_ports(k, "task", pi, ti, "output port", t->out, t->nout,
			    k->h->nports, false)) < 0 ||
	    (ret = ck_ports(k, "task", pi, ti, "fused channel", t->fw, t->nfw,
			    k->h->nchans, false)) < 0)
		return ret;
	if (!ck_name(k, t->name))
		return ck_fail(k, -EINVAL,
			       "program %zu task %zu: name at %u out of range "
			       "(%u)",
			       pi, ti, t->name, k->h->nstr);
	return 0;
}

static int ck_coll(struct ck *k, size_t pi, size_t ci,
		   const struct cgr__plan_prog *pp,
		   const struct cgr__plan_coll *e)
{
	const struct cgr__plan_op *ops = (const void *)(k->b + k->h->ops_off);
	uint64_t nk = (uint64_t)e->k * (uint64_t)(e->n > 0 ? e->n : 0);
	int ret;

	if (e->task_id >= k->h->ntasks)
		return ck_fail(k, -EINVAL,
			       "program %zu collective %zu: graph task %u out "
			       "of range (%u)",
			       pi, ci, e->task_id, k->h->ntasks);
	if (e->n < 1 || e->n > CGR_MAX_RANKS || e->rank < 0 ||
	    e->rank >= e->n || e->k < 1 ||
	    (cgr__coll_rooted(e->kind) && (e->root < 0 || e->root >= e->n)))
		return ck_fail(k, -EINVAL,
			       "program %zu collective %zu: rank %d (root %d) "
			       "of %d members, %u tensors out of range",
			       pi, ci, e->rank, e->root, e->n, e->k);
	if (e->cstream < 0 || e->cstream >= CGR__S_NCCL || e->sclass < 0 ||
	    e->sclass >= CGR__NSTREAMS)
		return ck_fail(k, -EINVAL,
			       "program %zu collective %zu: stream %d, class "
			       "%d out of range",
			       pi, ci, e->cstream, e->sclass);
	if (e->swait != CGR__PLAN_NONE && e->swait >= pp->ntcs)
		return ck_fail(k, -EINVAL,
			       "program %zu collective %zu: task %u out of "
			       "range (%u)",
			       pi, ci, e->swait, pp->ntcs);
	if (e->opi >= pp->nops || ops[pp->op0 + e->opi].kind != CGR__OP_COLL ||
	    ops[pp->op0 + e->opi].coll != ci)
		return ck_fail(k, -EINVAL,
			       "program %zu collective %zu: op %u is not its "
			       "COLL (%u ops)",
			       pi, ci, e->opi, pp->nops);
	if (e->root_port != CGR__PLAN_NONE && e->root_port >= k->h->nports)
		return ck_fail(k, -EINVAL,
			       "program %zu collective %zu: port %u out of "
			       "range (%u)",
			       pi, ci, e->root_port, k->h->nports);
	if ((ret = ck_ports(k, "collective", pi, ci, "input port", e->in, e->k,
			    k->h->nports, true)) < 0 ||
	    (ret = ck_ports(k, "collective", pi, ci, "output port", e->out,
			    e->k, k->h->nports, true)) < 0 ||
	    (ret = ck_ports(k, "collective", pi, ci, "member's input port",
			    e->all_in, nk, k->h->nports, true)) < 0 ||
	    (ret = ck_ports(k, "collective", pi, ci, "fused channel", e->fw,
			    e->nfw, k->h->nchans, false)) < 0)
		return ret;
	if (!ck_name(k, e->name))
		return ck_fail(k, -EINVAL,
			       "program %zu collective %zu: name at %u out of "
			       "range (%u)",
			       pi, ci, e->name, k->h->nstr);
	return 0;
}

static int ck_prog(struct ck *k, size_t pi, const struct cgr__plan *pl)
{
	const struct cgr__plan_prog *pp = &pl->progs[pi];
	const struct cgr__plan_hdr *h = k->h;
	int ret;

	if (pp->op0 > h->nops || pp->nops > h->nops - pp->op0 ||
	    pp->tc0 > h->ntcs || pp->ntcs > h->ntcs - pp->tc0 ||
	    pp->coll0 > h->ncolls || pp->ncolls > h->ncolls - pp->coll0)
		return ck_fail(k, -EINVAL,
			       "program %zu: its ops [%u, +%u), tasks [%u, "
			       "+%u) or collectives [%u, +%u) out of range "
			       "(%u, %u, %u)",
			       pi, pp->op0, pp->nops, pp->tc0, pp->ntcs,
			       pp->coll0, pp->ncolls, h->nops, h->ntcs,
			       h->ncolls);
	for (uint32_t i = 0; i < pp->nops; i++)
		if ((ret = ck_op(k, pi, i, pp, &pl->ops[pp->op0 + i])) < 0)
			return ret;
	for (uint32_t i = 0; i < pp->ntcs; i++)
		if ((ret = ck_task(k, pi, i, &pl->tcs[pp->tc0 + i])) < 0)
			return ret;
	for (uint32_t i = 0; i < pp->ncolls; i++)
		if ((ret = ck_coll(k, pi, i, pp, &pl->colls[pp->coll0 + i])) <
		    0)
			return ret;
	return 0;
}

int cgr__plan_check(const void *img, size_t len, struct cgr__plan *out,
		    char *why, size_t wlen)
{
	struct ck k = {img, img, why, wlen};
	const struct cgr__plan_hdr *h = img;
	struct cgr__plan pl;
	uint64_t sum;
	int ret;

	if (img == NULL || len < sizeof(*h) || (uintptr_t)img % 8 != 0)
		return ck_fail(&k, -EPROTO,
			       "plan of %zu bytes at %p: too short or "
			       "misaligned",
			       len, img);
	if (h->magic != CGR__PLAN_MAGIC)
		return ck_fail(&k, -EPROTO, "not a plan (magic %#llx)",
			       (unsigned long long)h->magic);
	if (h->version != CGR__PLAN_VERSION)
		return ck_fail(&k, -EPROTO,
			       "plan version %u, this build reads %u",
			       h->version, CGR__PLAN_VERSION);
	if (h->hdr_bytes != sizeof(*h) || h->size != len)
		return ck_fail(&k, -EPROTO,
			       "plan size mismatch: its header says %llu "
			       "bytes (header %u), the image has %zu",
			       (unsigned long long)h->size, h->hdr_bytes, len);
	sum = cgr__plan_sum(img, len);
	if (sum != h->checksum)
		return ck_fail(&k, -EPROTO,
			       "plan checksum mismatch: its header says "
			       "%016llx, its bytes sum to %016llx",
			       (unsigned long long)h->checksum,
			       (unsigned long long)sum);
	if (!ck_section(&k, h->progs_off, h->nprogs,
			sizeof(struct cgr__plan_prog)) ||
	    !ck_section(&k, h->ops_off, h->nops, sizeof(struct cgr__plan_op)) ||
	    !ck_section(&k, h->tasks_off, h->ntcs,
			sizeof(struct cgr__plan_task)) ||
	    !ck_section(&k, h->colls_off, h->ncolls,
			sizeof(struct cgr__plan_coll)) ||
	    !ck_section(&k, h->pool_off, h->npool, 4) ||
	    !ck_section(&k, h->str_off, h->nstr, 1))
		return ck_fail(&k, -EINVAL,
			       "plan sections out of range: a table lies "
			       "outside its %llu bytes",
			       (unsigned long long)h->size);
	pl.h = h;
	pl.progs = (const void *)(k.b + h->progs_off);
	pl.ops = (const void *)(k.b + h->ops_off);
	pl.tcs = (const void *)(k.b + h->tasks_off);
	pl.colls = (const void *)(k.b + h->colls_off);
	pl.pool = (const void *)(k.b + h->pool_off);
	pl.str = (const char *)k.b + h->str_off;
	for (size_t i = 0; i < h->nprogs; i++)
		if ((ret = ck_prog(&k, i, &pl)) < 0)
			return ret;
	if (out != NULL)
		*out = pl;
	return 0;
}

/* ---- the loader ------------------------------------------------------- */

/* A checked plan's list at `at` of n entries, in c's memory. */
static unsigned *ld_list(struct cgr_compiled *c, const struct cgr__plan *pl,
			 uint32_t at, size_t n)
{
	unsigned *v = cgr__c_alloc(c, (n + 1) * sizeof(unsigned));

	if (v != NULL && n > 0)
		memcpy(v, pl->pool + at, n * sizeof(unsigned));
	return v;
}

/* A standalone WRITE of the channels at `at` (a fused one). */
static const struct cgr__op *ld_write(struct cgr_compiled *c,
				      const struct cgr__plan *pl, uint32_t at,
				      uint32_t n)
{
	struct cgr__op *op = cgr__c_alloc(c, sizeof(*op));

	if (op == NULL)
		return NULL;
	memset(op, 0, sizeof(*op));
	op->kind = CGR__OP_WRITE;
	op->nchans = n;
	op->chans = ld_list(c, pl, at, n);
	return op->chans != NULL ? op : NULL;
}

/* Why a load failed: the graph's errmsg. */
static int ld_fail(struct cgr__cc *cc, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int ld_fail(struct cgr__cc *cc, int err, const char *fmt, ...)
{
	char msg[sizeof(cc->g->errmsg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return cgr__graph_fail(cc->g, err, "the compiled plan: %s", msg);
}

/* Task t's inputs with CGR_INPUT_ALL expanded (every argument). */
static size_t nin_expanded(const struct cgr_compiled *c,
			   const struct cgr__task *t)
{
	size_t n = 0;

	for (size_t i = 0; i < t->nin; i++)
		n += t->in[i]->kind == CGR__NODE_INPUT &&
			     t->in[i]->index == CGR_INPUT_ALL
			 ? c->nargs
			 : 1;
	return n;
}

/* What a run of a task touches besides its context, contiguous for all
 * of a program's tasks in program order (one stream through memory for
 * a long program): its ports' lists, then its values' scratch; and its
 * arg_data copy (64-byte aligned, as cgr.h promises) in another. */
struct ld_blk {
	unsigned char *run, *arg;
};

static size_t ld_run_bytes(uint32_t nin, uint32_t nout)
{
	return CGR__ALIGN_UP(((size_t)nin + nout) * sizeof(unsigned), 8) +
	       ((size_t)nin + nout) * sizeof(cgr_value);
}

static size_t ld_arg_bytes(const struct cgr__cc *cc, uint32_t task_id)
{
	const struct cgr__task *t =
		task_id < cc->ntasks ? cc->by_id[task_id] : NULL;

	return t != NULL && t->arg_data != NULL ?
		       CGR__ALIGN_UP(t->arg_len, 64) :
		       0;
}

static int ld_task(struct cgr__cc *cc, const struct cgr__plan *pl, size_t pi,
		   struct cgr__prog *p, size_t ti, struct ld_blk *b)
{
	struct cgr_compiled *c = cc->c;
	const struct cgr__plan_task *e = &pl->tcs[pl->progs[pi].tc0 + ti];
	const struct cgr__task *t = cc->by_id[e->task_id];
	struct cgr_task_ctx *tc = &p->tcs[ti];

	if (t == NULL || t->coll || t->nout != e->nout ||
	    nin_expanded(c, t) != e->nin || cgr__task_rank(t, p->w) != 0)
		return ld_fail(cc, -EPROTO,
			       "program %zu task %zu: graph task %u is no "
			       "task of %u inputs and %u outputs on worker "
			       "%s here",
			       pi, ti, e->task_id, e->nin, e->nout, p->w->name);
	tc->c = c;
	tc->task_id = e->task_id;
	tc->w = p->w;
	tc->name = cgr__c_strdup(c, pl->str + e->name);
	tc->nin = e->nin;
	tc->nout = e->nout;
	if (tc->name == NULL)
		return -ENOMEM;
	tc->in_ports = (unsigned *)b->run;
	tc->out_ports = tc->in_ports + tc->nin;
	tc->inv = (cgr_value *)(b->run + CGR__ALIGN_UP((tc->nin + tc->nout) *
							       sizeof(unsigned),
						       8));
	tc->outv = tc->inv + tc->nin;
	b->run += ld_run_bytes(e->nin, e->nout);
	memcpy(tc->in_ports, pl->pool + e->in, tc->nin * sizeof(unsigned));
	memcpy(tc->out_ports, pl->pool + e->out, tc->nout * sizeof(unsigned));
	if (c->seg != NULL &&
	    (tc->views = cgr__c_alloc(c, tc->nin * sizeof(*tc->views) + 1)) ==
		NULL)
		return -ENOMEM;
	tc->fn = t->fn;
	tc->arg = t->arg;
	if (t->arg_data != NULL) {
		/* The graph may go once compiled: the copy's copy. */
		tc->arg = b->arg;
		b->arg += ld_arg_bytes(cc, e->task_id);
		memcpy(tc->arg, t->arg_data, t->arg_len);
	}
	tc->prog = p;
	tc->stream = (e->flags & CGR__PLAN_STREAM) != 0;
	tc->async = (e->flags & CGR__PLAN_ASYNC) != 0;
	tc->device = (e->flags & CGR__PLAN_DEVICE) != 0;
	tc->tidx = e->tidx;
	atomic_init(&tc->done, 0);
	atomic_init(&tc->ad.last_ns, INT64_MAX);
	if (tc->stream) {
		tc->jobs = cgr__c_alloc(c, c->nslots * sizeof(*tc->jobs));
		tc->ev = cgr__c_alloc(c, c->nslots * sizeof(*tc->ev));
		if (tc->jobs == NULL || tc->ev == NULL)
			return -ENOMEM;
		for (uint32_t q = 0; q < c->nslots; q++)
			tc->jobs[q].tc = tc;
	}
	if ((e->flags & CGR__PLAN_FUSED) &&
	    (tc->fused_write = ld_write(c, pl, e->fw, e->nfw)) == NULL)
		return -ENOMEM;
	return 0;
}

/* Allocates cr's scratch for the run (cr->k, n, cap, edge set). */
static int coll_scratch(struct cgr_compiled *c, struct cgr__coll_rt *cr)
{
	size_t n = (size_t)cr->n, k = cr->k;

	cr->mine = cgr__c_alloc(c, k * sizeof(struct cgr__agree));
	cr->cached = cgr__c_alloc(c, n * k * sizeof(struct cgr__agree));
	if (cr->mine == NULL || cr->cached == NULL)
		return -ENOMEM;
	if (cr->spans && !cr->far) {
		/* This execution's records (cached keeps the first that
		 * agreed), and a verdict per tensor. */
		cr->late = cgr__c_alloc(c, n * k * sizeof(struct cgr__agree));
		cr->verdicts = cgr__c_alloc(c, k * sizeof(struct cgr__verdict));
		return cr->late && cr->verdicts ? 0 : -ENOMEM;
	}
	/* On a communicator across hosts: the records of this execution
	 * (static shapes), and an error value another host's member
	 * contributed (run/coll.c, far_forward). */
	if (cr->far &&
	    ((cr->late = cgr__c_alloc(c, n * k * sizeof(struct cgr__agree))) ==
		     NULL ||
	     (cr->far_err = cgr__c_alloc(c, CGR__FAR_ERR)) == NULL ||
	     (cr->far_mine = cgr__c_alloc(
		      c, k * sizeof(struct cgr__agree) + CGR__FAR_SMALL)) ==
		     NULL ||
	     (cr->far_all = cgr__c_alloc(
		      c, n * (k * sizeof(struct cgr__agree) +
			      CGR__FAR_SMALL))) == NULL))
		return -ENOMEM;
	if (cr->nccl && cr->static_shape && !cr->far &&
	    (cr->late = cgr__c_alloc(c, n * sizeof(struct cgr__agree))) == NULL)
		return -ENOMEM;
	if (k == 1 && cr->edge) {
		/* Lists over a device edge: their tensors travel packed. */
		cr->bucket_in = cgr__c_salloc(c, cr->cap);
		cr->bucket_out = cgr__c_salloc(c, cr->cap);
		if (c->seg != NULL &&
		    (cr->view = cgr__c_alloc(c, sizeof(*cr->view))) == NULL)
			return -ENOMEM;
		return cr->bucket_in && cr->bucket_out ? 0 : -ENOMEM;
	}
	if (k == 1)
		return 0;
	cr->verdicts = cgr__c_alloc(c, k * sizeof(struct cgr__verdict));
	cr->bucket_in = cgr__c_salloc(c, k * cr->cap);
	cr->bucket_out = cgr__c_salloc(
	    c, k * cr->cap * (cr->kind == CGR_COLL_ALLGATHER ? n : 1));
	return cr->verdicts && cr->bucket_in && cr->bucket_out ? 0 : -ENOMEM;
}

static int ld_coll(struct cgr__cc *cc, const struct cgr__plan *pl, size_t pi,
		   struct cgr__prog *p, size_t ci, struct cgr__coll_rt *cr)
{
	struct cgr_compiled *c = cc->c;
	const struct cgr__plan_coll *e = &pl->colls[pl->progs[pi].coll0 + ci];
	const struct cgr__task *t = cc->by_id[e->task_id];

	if (t == NULL || !t->coll || t->coll != e->kind ||
	    (int)t->nmembers != e->n || t->cp.ntensors != e->k ||
	    t->cp.root != e->root || (int)t->cp.op != e->op ||
	    t->edge != ((e->flags & CGR__PLAN_EDGE) != 0) ||
	    cc->spans[t->id] != ((e->flags & CGR__PLAN_SPANS) != 0) ||
	    cgr__task_rank(t, p->w) != e->rank || cc->boards[t->id] == NULL ||
	    e->cap != cgr__port_cap(t->max_out_bytes ? t->max_out_bytes
						     : c->p.max_value_bytes))
		return ld_fail(cc, -EPROTO,
			       "program %zu collective %zu: graph task %u is "
			       "no collective of %d members, %u tensors "
			       "with %s at rank %d here",
			       pi, ci, e->task_id, e->n, e->k, p->w->name,
			       e->rank);
	cr->c = c;
	cr->prog = p;
	cr->task_id = e->task_id;
	cr->w = p->w;
	cr->rank = e->rank;
	cr->n = e->n;
	cr->kind = e->kind;
	cr->op = e->op;
	cr->root = e->root;
	cr->static_shape = (e->flags & CGR__PLAN_STATIC) != 0;
	cr->joins_all = (e->flags & CGR__PLAN_JOINS_ALL) != 0;
	cr->spans = (e->flags & CGR__PLAN_SPANS) != 0;
	cr->far = cr->spans && t->cp.comm != NULL;
	cr->overlap = e->overlap;
	cr->nccl = (e->flags & CGR__PLAN_NCCL) != 0;
	cr->edge = (e->flags & CGR__PLAN_EDGE) != 0;
	cr->async = (e->flags & CGR__PLAN_CASYNC) != 0;
	cr->board = cc->boards[t->id];
	cr->cap = e->cap;
	cr->k = e->k;
	cr->cstream = e->cstream;
	cr->sclass = e->sclass;
	cr->sidx = e->sidx;
	cr->opi = (int32_t)e->opi;
	cr->swait = e->swait != CGR__PLAN_NONE ? &p->tcs[e->swait] : NULL;
	cr->root_port = e->root_port;
	cr->name = cgr__c_strdup(c, pl->str + e->name);
	cr->in_ports = ld_list(c, pl, e->in, cr->k);
	cr->out_ports = ld_list(c, pl, e->out, cr->k);
	cr->all_in_ports = ld_list(c, pl, e->all_in, (size_t)cr->n * cr->k);
	if (cr->name == NULL || cr->in_ports == NULL || cr->out_ports == NULL ||
	    cr->all_in_ports == NULL)
		return -ENOMEM;
	if (coll_scratch(c, cr) < 0)
		return -ENOMEM;
	cr->jobs = cgr__c_alloc(c, c->nslots * sizeof(*cr->jobs));
	if (cr->jobs == NULL)
		return -ENOMEM;
	for (uint32_t q = 0; q < c->nslots; q++)
		cr->jobs[q].cr = cr;
	atomic_init(&cr->moved, cr->k * cr->cap);
	if ((e->flags & CGR__PLAN_CFUSED) &&
	    (cr->fused_write = ld_write(c, pl, e->fw, e->nfw)) == NULL)
		return -ENOMEM;
	return 0;
}

/* Program pi of the plan into p. */
static int ld_prog(struct cgr__cc *cc, const struct cgr__plan *pl, size_t pi,
		   struct cgr__prog *p)
{
	struct cgr_compiled *c = cc->c;
	const struct cgr__plan_prog *e = &pl->progs[pi];
	struct cgr__coll_rt *colls;
	size_t nrun = 0, narg = 0;
	struct ld_blk b;
	int ret;

	for (size_t j = 0; j < cc->nw && p->w == NULL; j++)
		if (cc->ws[j]->index == e->worker)
			p->w = cc->ws[j];
	if (p->w == NULL)
		return ld_fail(cc, -EPROTO,
			       "program %zu: worker index %u is none of this "
			       "graph's workers",
			       pi, e->worker);
	p->c = c;
	p->ops = cgr__c_alloc(c, (e->nops + 1) * sizeof(*p->ops));
	p->tcs = cgr__c_alloc(c, (e->ntcs + 1) * sizeof(*p->tcs));
	colls = cgr__c_alloc(c, (e->ncolls + 1) * sizeof(*colls));
	for (size_t i = 0; i < e->ntcs; i++) {
		const struct cgr__plan_task *t = &pl->tcs[e->tc0 + i];
		nrun += ld_run_bytes(t->nin, t->nout);
		narg += ld_arg_bytes(cc, t->task_id);
	}
	b.run = cgr__c_alloc(c, nrun);
	b.arg = cgr__c_alloc(c, narg);
	if (p->ops == NULL || p->tcs == NULL || colls == NULL ||
	    b.run == NULL || b.arg == NULL)
		return -ENOMEM;
	p->nops = e->nops;
	p->ntcs = e->ntcs;
	p->bell = cgr__reader_bell(c, p->w);
	p->gate = (e->flags & CGR__PLAN_GATE) != 0;
	for (size_t i = 0; i < e->ntcs; i++)
		if ((ret = ld_task(cc, pl, pi, p, i, &b)) < 0)
			return ret;
	for (size_t i = 0; i < e->ncolls; i++)
		if ((ret = ld_coll(cc, pl, pi, p, i, &colls[i])) < 0)
			return ret;
	for (size_t i = 0; i < e->nops; i++) {
		const struct cgr__plan_op *o = &pl->ops[e->op0 + i];
		struct cgr__op *op = &p->ops[i];
		op->kind = (int)o->kind;
		op->order = (o->flags & CGR__PLAN_ORDER) != 0;
		op->prev = (o->flags & CGR__PLAN_PREV) != 0;
		op->chan = o->chan;
		op->tc = o->tc != CGR__PLAN_NONE ? &p->tcs[o->tc] : NULL;
		op->coll = o->coll != CGR__PLAN_NONE ? &colls[o->coll] : NULL;
		if (o->kind == CGR__OP_WRITE) {
			op->nchans = o->nchans;
			op->chans = ld_list(c, pl, o->chans, o->nchans);
			if (op->chans == NULL)
				return -ENOMEM;
		}
	}
	if (c->p.trace_events > 0) {
		p->trace_cap = c->p.trace_events;
		p->trace = cgr__tbuf_new(c, p->trace_cap);
		if (p->trace == NULL)
			return -ENOMEM;
	}
	cgr__future_init(&p->left);
	p->left_gen = cgr__future_arm(&p->left);
	atomic_init(&p->done_seq, 0);
	return 0;
}

int cgr__plan_load(struct cgr__cc *cc, const struct cgr__plan *pl)
{
	struct cgr_compiled *c = cc->c;
	const struct cgr__plan_hdr *h = pl->h;
	struct cgr__prog *progs;
	int ret;

	if (h->ntasks != cc->ntasks || h->nports != c->nports ||
	    h->nchans != c->nchans || h->nslots != c->nslots)
		return ld_fail(cc, -EPROTO,
			       "made for %u tasks, %u ports, %u channels and "
			       "%u slots; this graph has %zu, %zu, %zu and %u",
			       h->ntasks, h->nports, h->nchans, h->nslots,
			       cc->ntasks, c->nports, c->nchans, c->nslots);
	progs = cgr__c_alloc(c, (h->nprogs + 1) * sizeof(*progs));
	if (progs == NULL)
		return -ENOMEM;
	memset(progs, 0, (h->nprogs + 1) * sizeof(*progs));
	for (size_t i = 0; i < h->nprogs; i++)
		if ((ret = ld_prog(cc, pl, i, &progs[i])) < 0)
			return ret;
	c->progs = progs;
	c->nprogs = h->nprogs;
	return 0;
}
