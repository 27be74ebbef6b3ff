/*
 * tests/plan.c: the compiled plan (compile/plan.h).
 *
 * This program is also its own worker processes (cgr_worker_main first
 * thing in main).  One graph over three workers (a task per worker, an
 * allreduce of their tensors, a fan-out of the argument, a task reading
 * the allreduce's output and the argument) runs, overlap off and on:
 * compiled as usual, then with its programs built from a copy of its plan
 * at another address (malloc, then a fresh mmap; the compile's test hook
 * hands the copy over), then on process workers, whose programs come from
 * the driver's plan in the graph's segment; every result equals the
 * first run's, bit for bit.  A plan with a flipped byte, an index out of
 * its range (checksum recomputed), another version or magic, or a short
 * length is refused with a reason saying which; so is a corrupted plan
 * handed to a compile (thread workers), a sound one that does not fit
 * the graph, and, by worker processes, a corrupted one in the segment
 * or one that is not what their own compile writes (they still serve the
 * next graph).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cgr.h>

#include "compile/compile.h"
#include "tap.h"

#define NW 3
#define ELEMS 6

/* ---- what the workers run ------------------------------------------ */

/* x (u64) -> int64 tensor [ELEMS]: x * 7 + rank * 1000 + i (rank: arg). */
static int fill_fn(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		   cgr_value *out, size_t nout)
{
	const int32_t *rank = cgr_task_arg(tc);
	static __thread int64_t shape[1] = {ELEMS};
	int64_t *o = cgr_task_output_buffer(tc, 0, ELEMS * 8);
	uint64_t x;

	(void)st, (void)nin, (void)nout;
	memcpy(&x, in[0].u.bytes.data, 8);
	for (int i = 0; i < ELEMS; i++)
		o[i] = (int64_t)x * 7 + *rank * 1000 + i;
	out[0] = cgr_value_tensor(o, kDLInt, 64, 1, shape);
	return 0;
}

/* x -> 2x + 1 (u64). */
static int twice_fn(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		    cgr_value *out, size_t nout)
{
	uint64_t x, *o = cgr_task_output_buffer(tc, 0, 8);

	(void)st, (void)nin, (void)nout;
	memcpy(&x, in[0].u.bytes.data, 8);
	*o = 2 * x + 1;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

/* (sum tensor, x) -> sum of the tensor's elements times x, and x (u64s). */
static int mix_fn(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		  cgr_value *out, size_t nout)
{
	uint64_t x, *o = cgr_task_output_buffer(tc, 0, 16);
	const int64_t *s = in[0].u.tensor.data;
	int64_t acc = 0;

	(void)st, (void)nin, (void)nout;
	memcpy(&x, in[1].u.bytes.data, 8);
	for (int i = 0; i < ELEMS; i++)
		acc += s[i] * (int64_t)(i + 1);
	o[0] = (uint64_t)acc * x;
	o[1] = x;
	out[0] = cgr_value_bytes(o, 16);
	return 0;
}

static const cgr_export exports[] = {
    {"fill", fill_fn, NULL, NULL},
    {"twice", twice_fn, NULL, NULL},
    {"mix", mix_fn, NULL, NULL},
    {NULL, NULL, NULL, NULL},
};

/* ---- the graph and its results -------------------------------------- */

static cgr_ctx *ctx;
static cgr_worker *TW[NW], *PW[NW];
static int32_t ranks[NW] = {0, 1, 2};

static cgr_graph *build(cgr_worker **w)
{
	cgr_graph *g;
	cgr_node *x, *fills[NW], *sums[NW], *tw, *mx, *outs[NW + 2];

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int r = 0; r < NW; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = "fill", d.fn = fill_fn;
		d.arg_data = &ranks[r], d.arg_len = sizeof(ranks[r]);
		cgr_graph_task(g, w[r], &d, &x, 1, &fills[r], 1);
	}
	cgr_graph_allreduce(g, fills, NW, CGR_SUM, NULL, sums);
	{
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = "twice", d.fn = twice_fn;
		cgr_graph_task(g, w[1], &d, &x, 1, &tw, 1);
	}
	{
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		cgr_node *in[2] = {sums[2], x};
		d.name = "mix", d.fn = mix_fn;
		cgr_graph_task(g, w[0], &d, in, 2, &mx, 1);
	}
	for (int r = 0; r < NW; r++)
		outs[r] = sums[r];
	outs[NW] = tw;
	outs[NW + 1] = mx;
	cgr_graph_output(g, outs, NW + 2);
	return g;
}

/* Every output's bytes of every execution, in order. */
struct res {
	unsigned char *b;
	size_t n, cap;
};

static void res_add(struct res *r, const void *p, size_t n)
{
	if (r->n + n > r->cap) {
		r->cap = 2 * (r->n + n) + 256;
		r->b = realloc(r->b, r->cap);
	}
	memcpy(r->b + r->n, p, n);
	r->n += n;
}

/* Runs iters executions of c (two in flight), their outputs into r;
 * the number of executions that went wrong. */
static long run(cgr_compiled *c, long iters, struct res *r)
{
	size_t nout = cgr_compiled_noutputs(c);
	cgr_value v[NW + 2];
	long bad = 0;

	for (long i = 0; i < iters; i++) {
		uint64_t x = (uint64_t)i + 3;
		cgr_value arg = cgr_value_bytes(&x, 8);
		cgr_ref ref;
		if (cgr_execute(c, &arg, 1, &ref) != 0 ||
		    cgr_ref_get(c, ref, CGR_FOREVER, v, nout) != 0) {
			bad++;
			continue;
		}
		for (size_t o = 0; o < nout; o++) {
			if (v[o].kind == CGR_VALUE_TENSOR)
				res_add(r, v[o].u.tensor.data,
					cgr_tensor_nbytes(&v[o].u.tensor));
			else if (v[o].kind == CGR_VALUE_BYTES)
				res_add(r, v[o].u.bytes.data, v[o].u.bytes.len);
			else
				bad++;
		}
		cgr_ref_release(c, ref);
	}
	return bad;
}

/* ---- the hook: the plan elsewhere ----------------------------------- */

enum where { W_HERE, W_MALLOC, W_MMAP, W_FLIP, W_SEG_FLIP, W_SEG_NAME, W_TASK };

static struct hook {
	enum where where;
	void *copy, *map;
	size_t len, maplen;
	const void *orig;
	int calls;
} H;

static void reseal(void *img, size_t len)
{
	((struct cgr__plan_hdr *)img)->checksum = cgr__plan_sum(img, len);
}

static const void *hook(void *arg, void *img, size_t len)
{
	struct hook *h = arg;

	h->calls++;
	h->orig = img;
	h->len = len;
	switch (h->where) {
	case W_HERE:
		return img;
	case W_MALLOC:
	case W_FLIP:
		h->copy = aligned_alloc(64, CGR__ALIGN_UP(len, 64));
		memcpy(h->copy, img, len);
		if (h->where == W_FLIP)
			((unsigned char *)h->copy)[len / 2] ^= 0x10;
		return h->copy;
	case W_MMAP:
		h->maplen = len;
		h->map = mmap(NULL, len, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		memcpy(h->map, img, len);
		/* The runners may only read it. */
		mprotect(h->map, len, PROT_READ);
		return h->map;
	case W_TASK:
		/* Sound bytes, but a task that is a collective here. */
		h->copy = aligned_alloc(64, CGR__ALIGN_UP(len, 64));
		memcpy(h->copy, img, len);
		{
			const struct cgr__plan_hdr *ph = h->copy;
			struct cgr__plan_task *t =
			    (void *)((char *)h->copy + ph->tasks_off);
			const struct cgr__plan_coll *cl =
			    (void *)((char *)h->copy + ph->colls_off);
			t[0].task_id = cl[0].task_id;
			reseal(h->copy, len);
		}
		return h->copy;
	case W_SEG_NAME:
		/* A sound plan in the segment (checksum made to match), but
		 * not the one the workers' compiles write: a name changed. */
		h->copy = aligned_alloc(64, CGR__ALIGN_UP(len, 64));
		memcpy(h->copy, img, len);
		{
			const struct cgr__plan_hdr *ph = img;
			((char *)img)[ph->str_off] ^= 0x20;
			reseal(img, len);
		}
		return h->copy;
	case W_SEG_FLIP:
		/* The driver builds its programs from a good copy; the
		 * worker processes read the segment's, corrupted. */
		h->copy = aligned_alloc(64, CGR__ALIGN_UP(len, 64));
		memcpy(h->copy, img, len);
		((unsigned char *)img)[len - 3] ^= 0x01;
		return h->copy;
	}
	return img;
}

static void hook_done(void)
{
	free(H.copy);
	if (H.map != NULL)
		munmap(H.map, H.maplen);
	memset(&H, 0, sizeof(H));
}

/* Compiles the graph on workers w (the plan moved as `where` says) and
 * runs it; 0, or the compile's error (its message in msg). */
static int compile_run(cgr_worker **w, int overlap, enum where where,
		       long iters, struct res *r, void **plan, size_t *plen,
		       char *msg, size_t mlen)
{
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_graph *g = build(w);
	cgr_compiled *c;
	int ret;

	pp.overlap = overlap;
	pp.max_inflight = 4;
	H.where = where;
	g->plan_hook = hook;
	g->plan_hook_arg = &H;
	ret = cgr_graph_compile(g, &pp, &c);
	if (ret != 0) {
		snprintf(msg, mlen, "%s", cgr_graph_errmsg(g));
		cgr_graph_destroy(g);
		hook_done();
		return ret;
	}
	cgr_graph_destroy(g);
	if (plan != NULL) {
		*plan = malloc(c->plan_len);
		memcpy(*plan, c->plan, c->plan_len);
		*plen = c->plan_len;
	}
	if (where != W_HERE)
		t_ok(H.calls == 1 && H.orig == c->plan,
		     "overlap %d: the hook saw the plan the graph keeps",
		     overlap);
	t_is(run(c, iters, r), 0, "overlap %d, plan %d: %ld executions",
	     overlap, (int)where, iters);
	cgr_compiled_destroy(c);
	hook_done();
	return 0;
}

/* ---- corruption ------------------------------------------------------ */

/* A copy of plan (len bytes) in a fresh aligned buffer. */
static void *dup_plan(const void *plan, size_t len)
{
	void *p = aligned_alloc(64, CGR__ALIGN_UP(len, 64));

	memcpy(p, plan, len);
	return p;
}

/* Whether plan (len) is refused with err and a reason containing want. */
static void refused(const void *img, size_t len, int err, const char *want,
		    const char *what)
{
	char why[256] = "";
	int ret = cgr__plan_check(img, len, NULL, why, sizeof(why));

	t_ok(ret == err && strstr(why, want) != NULL,
	     "%s: refused (%d, want %d): %s", what, ret, err, why);
}

static void corruption(const void *plan, size_t len)
{
	struct cgr__plan pl;
	char why[256] = "";
	void *p;
	int ret;

	ret = cgr__plan_check(plan, len, &pl, why, sizeof(why));
	t_is(ret, 0, "the plan checks: %s", why);
	if (ret != 0)
		return;
	t_ok(pl.h->nprogs == NW && pl.h->ncolls == NW,
	     "%u programs, %u collectives", pl.h->nprogs, pl.h->ncolls);

	p = dup_plan(plan, len);
	((unsigned char *)p)[len / 2] ^= 0x40;
	refused(p, len, -EPROTO, "plan checksum mismatch", "a flipped byte");
	free(p);

	p = dup_plan(plan, len);
	((unsigned char *)p)[len - 1] ^= 0x01;
	refused(p, len, -EPROTO, "plan checksum mismatch", "its last byte");
	free(p);

	/* A READ's channel out of range, the checksum made to match. */
	p = dup_plan(plan, len);
	{
		const struct cgr__plan_hdr *h = p;
		struct cgr__plan_op *ops =
		    (void *)((unsigned char *)p + h->ops_off);
		uint32_t i;
		for (i = 0; i < h->nops && ops[i].kind != CGR__OP_READ; i++)
			;
		t_ok(i < h->nops, "the plan has a READ");
		if (i < h->nops) {
			char want[64];
			uint32_t prog = 0;
			const struct cgr__plan_prog *pp =
			    (void *)((unsigned char *)p + h->progs_off);
			while (i >= pp[prog].op0 + pp[prog].nops)
				prog++;
			ops[i].chan = h->nchans + 40;
			reseal(p, len);
			snprintf(want, sizeof(want),
				 "program %u op %u: channel %u out of range "
				 "(%u)",
				 prog, i - pp[prog].op0, h->nchans + 40,
				 h->nchans);
			refused(p, len, -EINVAL, want,
				"a channel out of range");
		}
	}
	free(p);

	/* A collective's input port out of range. */
	p = dup_plan(plan, len);
	{
		const struct cgr__plan_hdr *h = p;
		struct cgr__plan_coll *cl =
		    (void *)((unsigned char *)p + h->colls_off);
		uint32_t *pool = (void *)((unsigned char *)p + h->pool_off);
		pool[cl[0].in] = h->nports + 7;
		reseal(p, len);
		refused(p, len, -EINVAL, "input port 0 is",
			"a port out of range");
	}
	free(p);

	/* A task's name outside the string table. */
	p = dup_plan(plan, len);
	{
		const struct cgr__plan_hdr *h = p;
		struct cgr__plan_task *t =
		    (void *)((unsigned char *)p + h->tasks_off);
		t[0].name = h->nstr;
		reseal(p, len);
		refused(p, len, -EINVAL, "name at", "a name out of range");
	}
	free(p);

	/* A program's ops past the table. */
	p = dup_plan(plan, len);
	{
		const struct cgr__plan_hdr *h = p;
		struct cgr__plan_prog *pp =
		    (void *)((unsigned char *)p + h->progs_off);
		pp[NW - 1].nops += 1;
		reseal(p, len);
		refused(p, len, -EINVAL, "program 2: its ops",
			"a program's range");
	}
	free(p);

	p = dup_plan(plan, len);
	((struct cgr__plan_hdr *)p)->version = 99;
	reseal(p, len);
	refused(p, len, -EPROTO, "plan version 99", "another version");
	free(p);

	p = dup_plan(plan, len);
	((struct cgr__plan_hdr *)p)->magic ^= 1;
	reseal(p, len);
	refused(p, len, -EPROTO, "not a plan", "another magic");
	free(p);

	p = dup_plan(plan, len);
	refused(p, len - 8, -EPROTO, "plan size mismatch", "a short image");
	free(p);

	/* Random bytes anywhere after the checksum, the checksum made to
	 * match: the checker reads nothing outside the image (ASan builds
	 * would say) and whatever it accepts stays in its bounds. */
	{
		long n = t_scale(20000), accepted = 0, bad = 0;
		p = dup_plan(plan, len);
		for (long i = 0; i < n; i++) {
			size_t from = offsetof(struct cgr__plan_hdr, version);
			size_t at = from + t_rand() % (len - from);
			unsigned char old = ((unsigned char *)p)[at];
			((unsigned char *)p)[at] = (unsigned char)t_rand();
			reseal(p, len);
			why[0] = 0;
			ret = cgr__plan_check(p, len, &pl, why, sizeof(why));
			if (ret == 0) {
				accepted++;
				bad += pl.h != p || pl.h->size != len;
			} else if (why[0] == 0 ||
				   (ret != -EINVAL && ret != -EPROTO)) {
				bad++;
			}
			((unsigned char *)p)[at] = old;
		}
		free(p);
		t_ok(bad == 0,
		     "%ld random mutations: each refused with a reason or "
		     "checked sound (%ld)",
		     n, accepted);
	}
}

int main(int argc, char **argv)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	long iters = t_scale(300);
	struct res ref[2], r;
	void *plan = NULL;
	size_t plen = 0;
	char msg[512];
	int ret;

	cgr_worker_main(argc, argv, exports);
	t_init(argc, argv, 240);
	cp.exports = exports;
	if (cgr_ctx_create(&cp, &ctx) != 0) {
		printf("Bail out! no context\n");
		return 1;
	}
	for (int i = 0; i < NW; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		char name[8];
		snprintf(name, sizeof(name), "t%d", i);
		wp.name = name;
		if (cgr_worker_create(ctx, &wp, &TW[i]) != 0) {
			printf("Bail out! no worker\n");
			return 1;
		}
		snprintf(name, sizeof(name), "p%d", i);
		wp.kind = CGR_WORKER_PROCESS;
		if ((ret = cgr_worker_create(ctx, &wp, &PW[i])) != 0) {
			printf("Bail out! no process worker: %s\n",
			       cgr_strerror(ret));
			return 1;
		}
	}

	for (int ov = 0; ov <= 1; ov++) {
		memset(&ref[ov], 0, sizeof(ref[ov]));
		ret = compile_run(TW, ov, W_HERE, iters, &ref[ov],
				  ov == 0 ? &plan : NULL, &plen, msg,
				  sizeof(msg));
		t_is(ret, 0, "overlap %d: compiles (%s)", ov, ret ? msg : "");
		for (int where = W_MALLOC; where <= W_MMAP; where++) {
			memset(&r, 0, sizeof(r));
			ret = compile_run(TW, ov, (enum where)where, iters, &r,
					  NULL, NULL, msg, sizeof(msg));
			t_is(ret, 0,
			     "overlap %d, plan copied (%s): compiles "
			     "(%s)",
			     ov, where == W_MALLOC ? "malloc" : "mmap",
			     ret ? msg : "");
			t_ok(r.n == ref[ov].n && r.n > 0 &&
				 memcmp(r.b, ref[ov].b, r.n) == 0,
			     "overlap %d, plan copied (%s): %zu result bytes "
			     "equal the original's",
			     ov, where == W_MALLOC ? "malloc" : "mmap", r.n);
			free(r.b);
		}
		memset(&r, 0, sizeof(r));
		ret = compile_run(PW, ov, W_HERE, iters, &r, NULL, NULL, msg,
				  sizeof(msg));
		t_is(ret, 0, "overlap %d, process workers: compiles (%s)", ov,
		     ret ? msg : "");
		t_ok(r.n == ref[ov].n && r.n > 0 &&
			 memcmp(r.b, ref[ov].b, r.n) == 0,
		     "overlap %d, process workers (programs from the plan in "
		     "the segment): %zu result bytes equal the threads'",
		     ov, r.n);
		free(r.b);
	}

	/* The compile is deterministic: two compiles of one graph on the
	 * same workers write the same plan. */
	{
		void *again = NULL;
		size_t alen = 0;
		memset(&r, 0, sizeof(r));
		compile_run(TW, 0, W_HERE, 1, &r, &again, &alen, msg,
			    sizeof(msg));
		t_ok(again != NULL && alen == plen &&
			 memcmp(again, plan, plen) == 0,
		     "two compiles of one graph write the same %zu plan bytes",
		     plen);
		free(again);
		free(r.b);
	}

	corruption(plan, plen);

	/* A corrupted plan handed to the compile is refused there. */
	memset(&r, 0, sizeof(r));
	ret =
	    compile_run(TW, 1, W_FLIP, iters, &r, NULL, NULL, msg, sizeof(msg));
	t_ok(ret == -EPROTO && strstr(msg, "plan checksum mismatch") != NULL,
	     "a compile refuses a corrupted plan (%d): %s", ret, msg);
	free(r.b);
	/* A sound plan that does not fit the graph: refused by the loader. */
	memset(&r, 0, sizeof(r));
	ret =
	    compile_run(TW, 1, W_TASK, iters, &r, NULL, NULL, msg, sizeof(msg));
	t_ok(ret == -EPROTO &&
		 strstr(msg, "program 0 task 0: graph task") != NULL,
	     "a plan whose task is a collective here is refused (%d): %s", ret,
	     msg);
	free(r.b);
	/* Worker processes refuse a corrupted plan in the segment. */
	memset(&r, 0, sizeof(r));
	ret = compile_run(PW, 1, W_SEG_FLIP, iters, &r, NULL, NULL, msg,
			  sizeof(msg));
	t_ok(ret < 0 && strstr(msg, "plan") != NULL &&
		 strstr(msg, "checksum mismatch") != NULL,
	     "worker processes refuse a corrupted plan in the segment (%d): "
	     "%s",
	     ret, msg);
	free(r.b);
	/* Or a sound one that is not what their own compiles write. */
	memset(&r, 0, sizeof(r));
	ret = compile_run(PW, 0, W_SEG_NAME, iters, &r, NULL, NULL, msg,
			  sizeof(msg));
	t_ok(ret < 0 &&
		 strstr(msg, "differs from this worker's compile") != NULL,
	     "worker processes refuse a plan that is not their compile's "
	     "(%d): %s",
	     ret, msg);
	free(r.b);
	/* And the workers still serve a sound one. */
	memset(&r, 0, sizeof(r));
	ret =
	    compile_run(PW, 1, W_HERE, iters, &r, NULL, NULL, msg, sizeof(msg));
	t_ok(ret == 0 && r.n == ref[1].n && memcmp(r.b, ref[1].b, r.n) == 0,
	     "the process workers run the next graph (%s)", ret ? msg : "ok");
	free(r.b);

	free(plan);
	free(ref[0].b);
	free(ref[1].b);
	for (int i = 0; i < NW; i++) {
		t_is(cgr_worker_destroy(TW[i], 10 * 1000000000ll), 0,
		     "thread worker %d destroyed", i);
		t_is(cgr_worker_destroy(PW[i], 10 * 1000000000ll), 0,
		     "process worker %d destroyed", i);
	}
	cgr_ctx_destroy(ctx);
	return t_done();
}
