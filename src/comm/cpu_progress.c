/*
 * comm/cpu_progress.c: the CPU backend's progress (see cpu.h): waits
 * (spin, then park on the communicator's bell), each rank's records run
 * in issue order on a stream or the calling thread, the entry points and
 * groups.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm/cpu.h"

/* ---- waiting ------------------------------------------------------- */

int cgr__cpu_fail(struct cgr__wctx *w, int code, const char *fmt, ...)
{
	va_list ap;

	if (!w->failed) {
		va_start(ap, fmt);
		vsnprintf(w->c->ranks[w->rank].errmsg,
			  sizeof(w->c->ranks[w->rank].errmsg), fmt, ap);
		va_end(ap);
		w->failed = true;
	}
	return code;
}

/*
 * Waits until ready(arg).  0, -ECANCELED (abort, or the stream is being
 * destroyed: w->stopped), -ETIMEDOUT (w->deadline).
 */
int cgr__cpu_wait(struct cgr__wctx *w, cgr__ready_fn ready, void *arg,
		  bool abortable)
{
	struct cgr__cpu *c = w->c;

	for (;;) {
		int64_t now, dl = w->deadline;
		int ret;

		if (abortable && cgr__aborted(c))
			return ready(arg) ? 0 : -ECANCELED;
		if (w->s != NULL && cgr__stream_stopping(w->s)) {
			w->stopped = true;
			if (abortable)
				return -ECANCELED;
			/* Not abortable (in-order wait): abort the comm so
			 * that what we wait for fails fast, keep waiting. */
			cgr__cpu_abort(&c->base);
		}
		now = cgr__now_ns();
		if (now >= dl)
			return ready(arg) ? 0 : -ETIMEDOUT;
		if (w->s != NULL && dl - now > CGR__STOP_POLL_NS)
			dl = now + CGR__STOP_POLL_NS;
		ret = cgr__reactor_wait(NULL, &c->sh->bell, ready, arg,
					abortable ? &c->sh->aborted : NULL,
					CGR_WAIT_ADAPTIVE, CGR__COMM_SPIN_NS,
					dl);
		if (ret == 0)
			return 0;
	}
}

struct cgr__stagew {
	struct cgr__cpu *c;
	uint64_t target;
	int only; /* -1: every rank; else that rank */
};

static bool cgr__stage_ready(void *arg)
{
	struct cgr__stagew *sw = arg;
	struct cgr__cpu *c = sw->c;

	if (sw->only >= 0)
		return atomic_load_explicit(&c->pub[sw->only].stage,
					    memory_order_acquire) >=
		       sw->target;
	for (int j = 0; j < c->base.n; j++)
		if (atomic_load_explicit(&c->pub[j].stage,
					 memory_order_acquire) < sw->target)
			return false;
	return true;
}

/* "ranks 1, 3" that have not reached target. */
static void cgr__missing(struct cgr__cpu *c, uint64_t target, int only,
			 char *buf, size_t len)
{
	size_t o = 0;
	int cnt = 0;

	buf[0] = '\0';
	for (int j = 0; j < c->base.n && o + 16 < len; j++) {
		if (only >= 0 && j != only)
			continue;
		if (atomic_load_explicit(&c->pub[j].stage,
					 memory_order_relaxed) >= target)
			continue;
		o += (size_t)snprintf(buf + o, len - o, "%s%d",
				      cnt++ ? ", " : "", j);
	}
	if (cnt == 0)
		snprintf(buf, len, "none");
}

/*
 * An operation ends early (ret: -ECANCELED or -ETIMEDOUT).  A timeout or
 * a stream being destroyed aborts the communicator (the sequences no
 * longer line up).  Then wait until nobody copies any more, so that our
 * buffers are ours again when we return.
 */
int cgr__cpu_bail(struct cgr__wctx *w, int ret)
{
	struct cgr__cpu *c = w->c;
	unsigned i = 0;

	if (ret == -ETIMEDOUT || w->stopped) {
		if (!cgr__aborted(c))
			cgr__warn(c->base.log,
				  "rank %d: %s: aborting the communicator",
				  w->rank,
				  ret == -ETIMEDOUT ?
					  "operation timed out" :
					  "stream destroyed with an operation "
					  "pending");
		cgr__cpu_abort(&c->base);
		if (ret != -ETIMEDOUT)
			ret = -ECANCELED;
	}
	/* Copies in progress are bounded (no waits inside them). */
	while (atomic_load_explicit(&c->sh->movers, memory_order_acquire) != 0)
		if ((++i & 63) == 0)
			sched_yield();
		else
			cgr__cpu_relax();
	return ret;
}

/* Waits for stage target of every rank (only < 0) or of rank `only`. */
int cgr__cpu_stage_wait(struct cgr__wctx *w, uint64_t target, int only,
			const char *kind, uint64_t k)
{
	struct cgr__stagew sw = { w->c, target, only };
	char miss[96];
	int ret;

	ret = cgr__cpu_wait(w, cgr__stage_ready, &sw, true);
	if (ret == 0)
		return 0;
	cgr__missing(w->c, target, only, miss, sizeof(miss));
	ret = cgr__cpu_bail(w, ret);
	return cgr__cpu_fail(w, ret, "%s #%llu: %s while waiting for rank%s %s",
			     kind, (unsigned long long)k,
			     ret == -ETIMEDOUT ? "timed out" : "aborted",
			     strchr(miss, ',') ? "s" : "", miss);
}

/* ---- records ------------------------------------------------------- */

struct cgr__donew {
	struct cgr__rank *rk;
	uint64_t k;
};

static bool cgr__done_ready(void *arg)
{
	struct cgr__donew *dw = arg;

	/* D1: acquire: pairs with D0: the previous record's effects on the
	 * rank's execution state are visible. */
	return atomic_load_explicit(&dw->rk->done, memory_order_acquire) ==
	       dw->k;
}

/* Grows *arr (of *cap elements of size es) to hold n; 0 or -ENOMEM. */
static int cgr__grow(struct cgr__arena *a, void **arr, size_t *cap, size_t n,
		     size_t es, size_t align)
{
	size_t nc = *cap ? *cap : 4;
	void *p;

	if (n <= *cap)
		return 0;
	while (nc < n)
		nc *= 2;
	p = cgr__alloc(a, nc * es, align);
	if (p == NULL)
		return -ENOMEM;
	if (*cap)
		cgr__free(a, *arr, *cap * es, align);
	*arr = p;
	*cap = nc;
	return 0;
}

/*
 * Runs a record: the CGR__SOP_CALL function, or called inline.  err: 0;
 * a device error (the operations are poisoned so peers fail too);
 * -ECANCELED with s set: the stream is being destroyed (abort).
 */
static int cgr__cpu_exec(void *arg, cgr_stream *s, int err)
{
	struct cgr__rec *rec = arg;
	struct cgr__cpu *c = rec->c;
	struct cgr__rank *rk = &c->ranks[rec->rank];
	struct cgr__wctx w = { c, rec->rank, s, rec->deadline, false, false };
	struct cgr__donew dw = { rk, rec->k };
	int res = 0;

	if (!cgr__done_ready(&dw)) {
		/* No deadline here: the order must hold whatever happens
		 * (an abort makes the previous record end fast). */
		struct cgr__wctx wo = w;
		wo.deadline = CGR_FOREVER;
		cgr__cpu_wait(&wo, cgr__done_ready, &dw, false);
	}
	if (s != NULL && err == -ECANCELED) {
		w.stopped = true;
		cgr__cpu_bail(&w, -ECANCELED);
	} else if (err != 0) {
		for (size_t i = 0; i < rec->nitems; i++)
			if (rec->items[i].d.poison == 0) {
				rec->items[i].d.poison = err;
				snprintf(rec->items[i].msg, CGR__MSG, "%s%s",
					 err == -ENOTSUP ?
						 "refused on a CUDA stream "
						 "(the CPU communicator's "
						 "operations block on their "
						 "peers): " :
						 "device error: ",
					 cgr_strerror(err));
			}
	}
	for (size_t i = 0; i < rec->nitems; i++) {
		struct cgr__item *it = &rec->items[i];
		it->result = 0;
		if (cgr__is_p2p(it->d.kind))
			continue;
		if (cgr__aborted(c))
			it->result = cgr__cpu_fail(
			    &w, -ECANCELED, "%s: communicator aborted",
			    cgr__coll_kind_name(it->d.kind));
		else
			it->result = cgr__cpu_coll(&w, &it->d);
	}
	for (size_t i = 0; i < rec->nitems; i++)
		if (cgr__is_p2p(rec->items[i].d.kind)) {
			cgr__cpu_p2p(&w, rec->items, rec->nitems);
			break;
		}
	for (size_t i = 0; i < rec->nitems; i++) {
		struct cgr__item *it = &rec->items[i];
		if (it->result && res == 0)
			res = it->result;
		if (it->fut != NULL)
			cgr__dfuture_complete(it->fut, it->result);
	}
	for (size_t i = 0; i < rec->ngfuts; i++)
		cgr__dfuture_complete(rec->gfuts[i], res);
	/* D0: release: the record slot is free and this rank's execution
	 * state is handed to its next record; pairs with D1 and with the
	 * issuer's space check. */
	atomic_store_explicit(&rk->done, rec->k + 1, memory_order_release);
	cgr__bell_ring(&c->sh->bell);
	/* L0: the last touch of c; pairs with destroy's acquire. */
	atomic_fetch_add_explicit(&rk->left, 1, memory_order_release);
	return res;
}

static bool cgr__space_ready(void *arg)
{
	struct cgr__donew *dw = arg;

	return dw->k - atomic_load_explicit(&dw->rk->done,
					    memory_order_acquire) <
	       CGR__NREC;
}

/*
 * Issues a record: nitems items (copied) and the group_end futures gf.
 * Runs it on s or inline; returns the inline result or 0.
 */
static int cgr__issue(struct cgr__cpu *c, int r, struct cgr__item *items,
		      size_t nitems, struct cgr__dfuture **gf, size_t ngf,
		      cgr_stream *s)
{
	struct cgr__rank *rk = &c->ranks[r];
	struct cgr__donew dw = { rk, rk->issued };
	struct cgr__arena *a = c->base.arena;
	struct cgr__rec *rec;
	struct cgr__sop op = { .kind = CGR__SOP_CALL };
	int ret = 0;

	/* D2: acquire (in cgr__space_ready): the slot's last run is over. */
	if (!cgr__space_ready(&dw))
		cgr__reactor_wait(NULL, &c->sh->bell, cgr__space_ready, &dw, NULL,
				  CGR_WAIT_ADAPTIVE, CGR__COMM_SPIN_NS,
				  CGR_FOREVER);
	rec = &rk->recs[rk->issued % CGR__NREC];
	rec->items = &rec->one;
	rec->nitems = nitems;
	if (nitems == 1) {
		rec->one = items[0];
	} else if (nitems > 1) {
		if (cgr__grow(a, (void **)&rec->arr, &rec->arrcap, nitems,
			      sizeof(*rec->arr), CGR__CACHELINE) == 0) {
			memcpy(rec->arr, items, nitems * sizeof(*items));
			rec->items = rec->arr;
		} else {
			/* Out of memory: the group still takes its turn, as
			 * one poisoned operation, so the peers fail too. */
			for (size_t i = 0; i < nitems; i++)
				if (items[i].fut != NULL)
					cgr__dfuture_complete(items[i].fut,
							      -ENOMEM);
			rec->one = items[0];
			rec->one.fut = NULL;
			rec->one.d.poison = -ENOMEM;
			snprintf(rec->one.msg, CGR__MSG, "out of memory");
			rec->nitems = 1;
		}
	}
	rec->gfuts = rec->gfarr;
	rec->ngfuts = 0;
	if (ngf != 0) {
		if (cgr__grow(a, (void **)&rec->gfarr, &rec->gfarrcap, ngf,
			      sizeof(*gf), 16) == 0) {
			memcpy(rec->gfarr, gf, ngf * sizeof(*gf));
			rec->gfuts = rec->gfarr;
			rec->ngfuts = ngf;
		} else {
			for (size_t i = 0; i < ngf; i++)
				cgr__dfuture_complete(gf[i], -ENOMEM);
		}
	}
	rec->c = c;
	rec->rank = r;
	rec->k = rk->issued++;
	rec->deadline = CGR_FOREVER;
	for (size_t i = 0; i < rec->nitems; i++) {
		struct cgr__item *it = &rec->items[i];
		it->d.poison_msg = it->msg;
		if (it->d.deadline > 0 && it->d.deadline < rec->deadline)
			rec->deadline = it->d.deadline;
	}
	if (s != NULL) {
		op.u.call.fn = cgr__cpu_exec;
		op.u.call.arg = rec;
		ret = cgr__stream_enqueue(s, &op);
		if (ret == 0)
			return 0;
		/* Refused by the stream (a CUDA stream: -ENOTSUP; a failed
		 * device): it still takes its turn, poisoned, here, so that
		 * the peers fail too; the caller gets the refusal. */
		(void)cgr__cpu_exec(rec, NULL, ret);
		return ret;
	}
	return cgr__cpu_exec(rec, NULL, 0);
}

static void cgr__item_fill(struct cgr__item *it,
			   const struct cgr__coll_desc *d)
{
	it->d = *d;
	snprintf(it->msg, sizeof(it->msg), "%s",
		 d->poison && d->poison_msg ? d->poison_msg : "");
	it->d.poison_msg = it->msg;
	it->fut = NULL;
	it->result = 0;
}

static int cgr__group_grow(struct cgr__cpu *c, struct cgr__rank *rk)
{
	size_t cap = rk->gcap ? rk->gcap * 2 : 8;
	struct cgr__item *p;

	/* The group's items so far are kept: copied over. */
	p = cgr__alloc(c->base.arena, cap * sizeof(*p), CGR__CACHELINE);
	if (p == NULL)
		return -ENOMEM;
	if (rk->gn)
		memcpy(p, rk->gitems, rk->gn * sizeof(*p));
	if (rk->gcap)
		cgr__free(c->base.arena, rk->gitems, rk->gcap * sizeof(*p),
			  CGR__CACHELINE);
	rk->gitems = p;
	rk->gcap = cap;
	return 0;
}

/* A completed future for an operation that ran inline, in *out. */
static int done_future(struct cgr__cpu *c, cgr_future **out)
{
	struct cgr__dfuture *df;

	if (cgr__dfuture_create(c->base.ctx, NULL, &df) < 0)
		return -ENOMEM;
	cgr__dfuture_complete(df, 0);
	*out = cgr__dfuture_pub(df);
	return 0;
}

/* Inside a group: the operation joins rank r's list (issued at the
 * outermost cgr_group_end).  All of a group's operations use one stream
 * (cgr__group_mixed). */
static int group_add(struct cgr__cpu *c, struct cgr__rank *rk,
		     const struct cgr__coll_desc *d, cgr_stream *s,
		     cgr_future **out)
{
	struct cgr__dfuture *df = NULL;
	struct cgr__coll_desc p = *d;
	struct cgr__item *gi;
	int ret;

	if (!rk->gstream_set) {
		rk->gstream = s;
		rk->gstream_set = true;
	} else if (s != rk->gstream && p.poison == 0) {
		p.poison = -EINVAL;
		p.poison_msg = CGR__GROUP_MIXED_MSG;
		rk->gmixed = true;
		out = NULL;
	}
	if (rk->gn == rk->gcap && cgr__group_grow(c, rk) < 0)
		return -ENOMEM;
	if (out != NULL) {
		ret = cgr__dfuture_create(c->base.ctx, rk->gstream, &df);
		if (ret < 0)
			return ret;
	}
	gi = &rk->gitems[rk->gn++];
	cgr__item_fill(gi, &p);
	gi->fut = df;
	if (df != NULL)
		*out = cgr__dfuture_pub(df);
	return p.poison != d->poison ? -EINVAL : 0;
}

int cgr__cpu_op(cgr_comm *cc, int r, const struct cgr__coll_desc *d,
		       cgr_stream *s, cgr_future **out)
{
	struct cgr__cpu *c = cgr__cpu_of(cc);
	struct cgr__rank *rk = &c->ranks[r];
	struct cgr__dfuture *df = NULL;
	struct cgr__item it;
	int ret;

	if (cgr__is_p2p(d->kind) && d->root == r && rk->gdepth == 0)
		return -EINVAL; /* would wait for itself: needs a group */
	if (rk->gdepth > 0)
		return group_add(c, rk, d, s, out);
	if (s == NULL && !cgr__is_p2p(d->kind) &&
	    atomic_load_explicit(&rk->done, memory_order_acquire) ==
		    rk->issued) {
		/* Inline with nothing pending (D1: the acquire pairs with D0
		 * of the last record): run it here, without a record.  Only
		 * this thread issues records, so none starts meanwhile. */
		struct cgr__wctx w = { c, r, NULL,
				       d->deadline > 0 ? d->deadline :
							 CGR_FOREVER,
				       false, false };

		if (cgr__aborted(c))
			ret = cgr__cpu_fail(&w, -ECANCELED,
					    "%s: communicator aborted",
					    cgr__coll_kind_name(d->kind));
		else
			ret = cgr__cpu_coll(&w, d);
		if (ret == 0 && out != NULL)
			ret = done_future(c, out);
		return ret;
	}
	cgr__item_fill(&it, d);
	if (s != NULL && out != NULL) {
		ret = cgr__dfuture_create(c->base.ctx, s, &df);
		if (ret < 0)
			return ret;
		it.fut = df;
	}
	ret = cgr__issue(c, r, &it, 1, NULL, 0, s);
	if (s != NULL) {
		if (ret < 0) { /* the stream refused it: no future */
			if (df != NULL)
				cgr__dfuture_put(df);
			return ret;
		}
		if (df != NULL)
			*out = cgr__dfuture_pub(df);
		return 0;
	}
	if (ret == 0 && out != NULL)
		ret = done_future(c, out); /* inline and done */
	return ret;
}

int cgr__cpu_group_start(cgr_comm *cc, int r)
{
	struct cgr__rank *rk = &cgr__cpu_of(cc)->ranks[r];

	if (rk->gdepth++ == 0) {
		rk->gn = 0;
		rk->gfn = 0;
		rk->gstream = NULL;
		rk->gstream_set = false;
		rk->gmixed = false;
	}
	return 0;
}

/* Room for one more group_end future; 0 or -ENOMEM. */
static int cgr__gfuts_grow(struct cgr__cpu *c, struct cgr__rank *rk)
{
	size_t cap = rk->gfcap ? rk->gfcap * 2 : 4;
	struct cgr__dfuture **p;

	if (rk->gfn < rk->gfcap)
		return 0;
	p = cgr__alloc(c->base.arena, cap * sizeof(*p), 16);
	if (p == NULL)
		return -ENOMEM;
	if (rk->gfn)
		memcpy(p, rk->gfuts, rk->gfn * sizeof(*p));
	if (rk->gfcap)
		cgr__free(c->base.arena, rk->gfuts, rk->gfcap * sizeof(*p), 16);
	rk->gfuts = p;
	rk->gfcap = cap;
	return 0;
}

int cgr__cpu_group_end(cgr_comm *cc, int r, cgr_future **out)
{
	struct cgr__cpu *c = cgr__cpu_of(cc);
	struct cgr__rank *rk = &c->ranks[r];
	struct cgr__dfuture *df = NULL;
	bool nomem = false;
	cgr_stream *s;
	int ret;

	if (rk->gdepth == 0)
		return -EINVAL;
	/* The outermost end's future is bound to the group's stream; a
	 * nested end's is not (the stream may not be known yet).  Without
	 * memory for it the group still runs (the peers expect it); the
	 * caller gets -ENOMEM and no future. */
	if (out != NULL) {
		if (cgr__dfuture_create(c->base.ctx,
					rk->gdepth == 1 ? rk->gstream : NULL,
					&df) < 0) {
			nomem = true;
		} else if (cgr__gfuts_grow(c, rk) < 0) {
			cgr__dfuture_put(df);
			cgr__dfuture_put(df);
			df = NULL;
			nomem = true;
		} else {
			rk->gfuts[rk->gfn++] = df;
		}
	}
	if (--rk->gdepth > 0) {
		if (df != NULL)
			*out = cgr__dfuture_pub(df);
		return nomem ? -ENOMEM : 0;
	}
	s = rk->gstream;
	for (size_t i = 0; rk->gmixed && i < rk->gn; i++)
		cgr__group_mixed(&rk->gitems[i].d, rk->gitems[i].msg,
				 sizeof(rk->gitems[i].msg));
	/* On a stream: 0, or the stream's refusal (the group took its turn
	 * inline, poisoned). */
	ret = cgr__issue(c, r, rk->gitems, rk->gn, rk->gfuts, rk->gfn, s);
	rk->gn = 0;
	rk->gfn = 0;
	if (df != NULL) {
		/* Inline and failed: the caller gets the error instead. */
		if (ret != 0)
			cgr__dfuture_put(df);
		else
			*out = cgr__dfuture_pub(df);
	}
	return ret ? ret : nomem ? -ENOMEM : 0;
}

