/*
 * tests/graph-errors.c: error values keep their root cause.
 *
 * A task that fails makes error values that carry its origin (code,
 * task, worker, execution) in fixed fields, unchanged wherever they
 * travel, with a message that starts with the origin and ends with the
 * path ("; via ..."), bounded.  The matrix: host edges, chains of two
 * device edges (CGR_TRANSPORT_DEVICE, the CPU communicator), every
 * collective kind, a chain of two broadcasts, overlap off and on,
 * static shapes off and on, each graph failing in its first, a middle
 * and its last execution (all in flight at once) with every other
 * execution correct.  Then a collective's own failure (a shape
 * mismatch, its own origin), a path longer than CGR_ERROR_MAX_HOPS, and
 * names and texts too long for a small buffer.
 *
 * tests/graph-errors-proc is the same program with T_PROCESS_WORKERS:
 * W[1] and W[3] are process workers.  tests/graph-errors-nccl-fake is
 * the same with CGR_FAKE_NCCL: worker i on (model) CUDA device i, the
 * tensor-making tasks CGR_TASK_DEVICE, so that every collective and
 * device edge goes through the NCCL backend (its agreement, and the late
 * verdict of static shapes), against the models of libnccl and
 * libcudart (whose device memory the host may read).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cgr.h>

#include "t_coll.h"
#include "tap.h"

#ifdef T_PROCESS_WORKERS
#define T_ARG(d, p) ((d).arg_data = (p), (d).arg_len = sizeof(*(p)))
#else
#define T_ARG(d, p) ((d).arg = (void *)(p))
#endif

#ifdef CGR_FAKE_NCCL
static const unsigned G_DEV = CGR_TASK_DEVICE; /* tensor makers' flags */
#define G_DEV_TYPE kDLCUDA
#else
static const unsigned G_DEV = 0;
#define G_DEV_TYPE kDLCPU
#endif

static cgr_ctx *ctx;
static cgr_worker *W[4];
static const char *const WN[4] = { "w0", "w1", "w2", "w3" };

/* Executions per graph, all in flight at once; failing ones: the first,
 * a middle one and the last. */
#define NEXEC 7
static bool fails(uint64_t x)
{
	return x == 0 || x == 3 || x == NEXEC - 1;
}

static int fail_code(uint64_t x)
{
	return x == 0 ? -EIO : x == 3 ? -EDOM : -ERANGE;
}

#define ROWS 4 /* rows of 3 int64 per tensor: divides by 4 members */
#define PER (ROWS * 3)

static uint64_t xof(const cgr_value *v)
{
	uint64_t x;
	memcpy(&x, v->u.bytes.data, 8);
	return x;
}

/* src: x -> int64 [ROWS(+1 when grown), 3] of t_coll_elem(x, rank, i);
 * fails on failing executions if fail is set; grows a row on execution
 * grow. */
struct src {
	int rank;
	int fail;
	int grow; /* -1: never */
};

static int src_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	const struct src *s = cgr_task_arg(tc);
	static __thread int64_t shape[2];
	uint64_t x = xof(&in[0]);
	int rows = ROWS + ((int)x == s->grow);
	int64_t *o;

	(void)st, (void)nin, (void)nout;
	if (s->fail && fails(x)) {
		cgr_task_set_error(tc, fail_code(x), "boom on rank %d at %llu",
				   s->rank, (unsigned long long)x);
		return -1;
	}
	o = cgr_task_output_buffer(tc, 0, (size_t)rows * 3 * 8);
	for (int i = 0; i < rows * 3; i++)
		o[i] = t_coll_elem(x, s->rank, i);
	shape[0] = rows;
	shape[1] = 3;
	out[0] = cgr_value_tensor(o, kDLInt, 64, 2, shape);
	return 0;
}

/* mid: a tensor with every element + 1. */
static int mid_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t shape[2];
	const DLTensor *t = &in[0].u.tensor;
	size_t n = cgr_tensor_nbytes(t) / 8;
	int64_t *o = cgr_task_output_buffer(tc, 0, n * 8);

	(void)st, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_TENSOR || t->ndim != 2)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		o[i] = ((const int64_t *)t->data)[i] + 1;
	shape[0] = t->shape[0];
	shape[1] = t->shape[1];
	out[0] = cgr_value_tensor(o, kDLInt, 64, 2, shape);
	return 0;
}

/* sum: the sum of a tensor's elements, as 8 bytes. */
static int sum_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	const DLTensor *t = &in[0].u.tensor;
	int64_t *o = cgr_task_output_buffer(tc, 0, 8);

	(void)st, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_TENSOR)
		return -EINVAL;
	*o = 0;
	for (size_t i = 0; i < cgr_tensor_nbytes(t) / 8; i++)
		*o += ((const int64_t *)t->data)[i];
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

/* triple: x -> 3x (8 bytes), a branch no failure reaches. */
static int triple_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		     size_t nin, cgr_value *out, size_t nout)
{
	uint64_t *o = cgr_task_output_buffer(tc, 0, 8);

	(void)st, (void)nin, (void)nout;
	*o = xof(&in[0]) * 3;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

/* pass: its input as it is (bytes), failing on failing executions if
 * its arg's fail is set (a long chain's first link); a long text. */
struct pass {
	int fail;
	int long_text;
};

static int pass_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	const struct pass *p = cgr_task_arg(tc);
	uint64_t x = xof(&in[0]);

	(void)st, (void)nin, (void)nout;
	if (p->fail && fails(x)) {
		char t[300];
		memset(t, 'z', sizeof(t) - 1);
		t[sizeof(t) - 1] = 0;
		cgr_task_set_error(tc, fail_code(x), "boom at %llu %s",
				   (unsigned long long)x,
				   p->long_text ? t : "");
		return -1;
	}
	out[0] = in[0];
	return 0;
}

/* ---- checking ------------------------------------------------------ */

static long g_bad;
static char g_why[600];

static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...)
{
	va_list ap;

	if (g_bad++ > 0)
		return;
	va_start(ap, fmt);
	vsnprintf(g_why, sizeof(g_why), fmt, ap);
	va_end(ap);
}

/* Whether v is execution x's failure of task `task` on worker `wn` (code
 * fail_code(x)), its message the origin, the text and then exactly
 * `path` ("" none). */
static bool is_origin(const cgr_value *v, uint64_t x, const char *task,
		      const char *wn, const char *path, const char *where)
{
	char pre[200];
	size_t ml, pl = strlen(path);
	const char *msg;

	if (v->kind != CGR_VALUE_ERROR) {
		bad("%s, execution %llu: kind %d, not an error value", where,
		    (unsigned long long)x, v->kind);
		return false;
	}
	msg = v->u.error.msg;
	ml = strlen(msg);
	snprintf(pre, sizeof(pre), "task %s on worker %s, execution %llu: ",
		 task, wn, (unsigned long long)x);
	if (v->code != fail_code(x) || v->u.error.task == NULL ||
	    v->u.error.worker == NULL || strcmp(v->u.error.task, task) != 0 ||
	    strcmp(v->u.error.worker, wn) != 0 ||
	    v->u.error.execution != x ||
	    strncmp(msg, pre, strlen(pre)) != 0 ||
	    strstr(msg, "boom") == NULL || ml < pl ||
	    strcmp(msg + ml - pl, path) != 0 ||
	    (pl == 0 && strstr(msg, "; via") != NULL)) {
		bad("%s, execution %llu: code %d (%s), task %s, worker %s, "
		    "execution %llu: \"%s\" (want %s...%s)",
		    where, (unsigned long long)x, v->code,
		    cgr_err_name(v->code),
		    v->u.error.task ? v->u.error.task : "(null)",
		    v->u.error.worker ? v->u.error.worker : "(null)",
		    (unsigned long long)v->u.error.execution, msg, pre, path);
		return false;
	}
	return true;
}

static void want_sum(const cgr_value *v, int64_t want, uint64_t x,
		     const char *where)
{
	int64_t got;

	if (v->kind != CGR_VALUE_BYTES || v->u.bytes.len != 8) {
		bad("%s, execution %llu: kind %d (%s)", where,
		    (unsigned long long)x, v->kind,
		    v->kind == CGR_VALUE_ERROR ? v->u.error.msg : "");
		return;
	}
	memcpy(&got, v->u.bytes.data, 8);
	if (got != want)
		bad("%s, execution %llu: %lld, want %lld", where,
		    (unsigned long long)x, (long long)got, (long long)want);
}

static cgr_node *task_fl(cgr_graph *g, cgr_worker *w, const char *name,
			 cgr_task_fn fn, const void *arg, size_t alen,
			 cgr_node *in, unsigned flags)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_node *out = NULL;

	d.name = name;
	d.fn = fn;
	d.flags = flags;
#ifdef T_PROCESS_WORKERS
	d.arg_data = arg;
	d.arg_len = arg != NULL ? alen : 0;
#else
	(void)alen;
	d.arg = (void *)arg;
#endif
	cgr_graph_task(g, w, &d, &in, 1, &out, 1);
	return out;
}

/* A host task; a tensor maker (src, mid) takes G_DEV. */
static cgr_node *task(cgr_graph *g, cgr_worker *w, const char *name,
		      cgr_task_fn fn, const void *arg, size_t alen,
		      cgr_node *in)
{
	return task_fl(g, w, name, fn, arg, alen, in,
		       fn == src_fn || fn == mid_fn ? G_DEV : 0);
}

/* Compiles g (overlap ov) and runs NEXEC executions, all in flight, then
 * hands each one's outputs to check. */
static void run(cgr_graph *g, int ov, size_t nout, const char *what,
		void (*check)(uint64_t x, const cgr_value *o, void *arg),
		void *arg)
{
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_compiled *c = NULL;
	cgr_ref ref[NEXEC];
	cgr_value o[16];
	int ret;

	pp.overlap = ov;
	ret = cgr_graph_compile(g, &pp, &c);
	if (ret != 0) {
		bad("%s: compile: %s", what, cgr_graph_errmsg(g));
		cgr_graph_destroy(g);
		return;
	}
	cgr_graph_destroy(g);
	for (uint64_t x = 0; x < NEXEC; x++) {
		cgr_value a = cgr_value_bytes(&x, 8);
		if ((ret = cgr_execute(c, &a, 1, &ref[x])) != 0) {
			bad("%s: execute %llu: %s", what, (unsigned long long)x,
			    cgr_err_name(ret));
			cgr_compiled_destroy(c);
			return;
		}
	}
	/* In another order than submitted: each its own. */
	for (uint64_t k = 0; k < NEXEC; k++) {
		uint64_t x = (k * 3) % NEXEC;
		if ((ret = cgr_ref_get(c, ref[x], -1, o, nout)) != 0) {
			bad("%s: get %llu: %s", what, (unsigned long long)x,
			    cgr_err_name(ret));
			continue;
		}
		if (ref[x] != x)
			bad("%s: execution %llu has ref %llu", what,
			    (unsigned long long)x, (unsigned long long)ref[x]);
		check(x, o, arg);
		cgr_ref_release(c, ref[x]);
	}
	if ((ret = cgr_compiled_teardown(c, 2000000000ll)) != 0)
		bad("%s: teardown: %s", what, cgr_err_name(ret));
	cgr_compiled_destroy(c);
}

static void report(const char *what)
{
	t_ok(g_bad == 0, "%s%s%s", what, g_bad ? ": " : "",
	     g_bad ? g_why : "");
	g_bad = 0;
}

/* ---- host and device edges ------------------------------------------ */

/*
 * src (w0) -> mid (w1) -> fin (w2), and src -> side (w3); triple (w3)
 * reads only x.  With device edges, src's and mid's outputs travel by
 * the CPU communicator (a chain of two), static shapes or not.
 */
static struct src g_src0 = { 0, 1, -1 };

struct edges_arg {
	bool dev;
	const char *what;
};

static void edges_check(uint64_t x, const cgr_value *o, void *arg)
{
	const struct edges_arg *e = arg;
	int64_t fin = 0, side = 0;

	if (fails(x)) {
		is_origin(&o[0], x, "src", "w0",
			  e->dev ? "; via broadcast src->device, task mid, "
				   "broadcast mid->device, task fin" :
				   "; via task mid, task fin",
			  "fin");
		is_origin(&o[1], x, "src", "w0",
			  e->dev ? "; via broadcast src->device, task side" :
				   "; via task side",
			  "side");
	} else {
		for (int i = 0; i < PER; i++) {
			fin += t_coll_elem(x, 0, i) + 1;
			side += t_coll_elem(x, 0, i);
		}
		want_sum(&o[0], fin, x, "fin");
		want_sum(&o[1], side, x, "side");
	}
	want_sum(&o[2], (int64_t)x * 3, x, "triple (no failure there)");
}

static void check_edges(bool dev, int stat, int ov)
{
	cgr_graph *g;
	cgr_node *x, *s, *m, *outs[3];
	char what[120];
	struct edges_arg e = { dev, what };

	snprintf(what, sizeof(what), "%s edges, static shape %s, overlap %s",
		 dev ? "device" : "host", stat ? "on" : "off",
		 ov ? "on" : "off");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	s = task(g, W[0], "src", src_fn, &g_src0, sizeof(g_src0), x);
	m = task(g, W[1], "mid", mid_fn, NULL, 0, s);
	outs[0] = task(g, W[2], "fin", sum_fn, NULL, 0, m);
	outs[1] = task(g, W[3], "side", sum_fn, NULL, 0, s);
	outs[2] = task(g, W[3], "triple", triple_fn, NULL, 0, x);
	if (dev) {
		unsigned fl = stat ? CGR_EDGE_STATIC_SHAPE : 0;
		cgr_node_set_transport(s, CGR_TRANSPORT_DEVICE, fl);
		cgr_node_set_transport(m, CGR_TRANSPORT_DEVICE, fl);
	}
	cgr_graph_output(g, outs, 3);
	run(g, ov, 3, what, edges_check, &e);
	report(what);
}

/* ---- collectives ------------------------------------------------------ */

static const char *kind_name(int kind)
{
	static const char *const n[] = { "?",	  "allreduce", "allgather",
					 "reducescatter", "reduce",    "broadcast",
					 "gather",	  "scatter",   "alltoall" };
	return kind >= 1 && kind <= 8 ? n[kind] : "?";
}

static bool in_at_root(int kind)
{
	return kind == CGR_COLL_BROADCAST || kind == CGR_COLL_SCATTER;
}

static bool out_at_root(int kind)
{
	return kind == CGR_COLL_REDUCE || kind == CGR_COLL_GATHER;
}

static size_t out_elems(int kind, int n)
{
	switch (kind) {
	case CGR_COLL_ALLGATHER:
	case CGR_COLL_GATHER:
		return (size_t)PER * n;
	case CGR_COLL_REDUCESCATTER:
	case CGR_COLL_SCATTER:
		return (size_t)PER / n;
	default:
		return PER;
	}
}

struct coll_arg {
	int kind, n, root, fr, nout;
	const char *path;
};

static void want_tensor(const struct coll_arg *ca, const cgr_value *v,
			uint64_t x, int oi)
{
	size_t ne = out_elems(ca->kind, ca->n);

	if (v->kind != CGR_VALUE_TENSOR ||
	    cgr_tensor_nbytes(&v->u.tensor) != ne * 8 ||
	    (int)v->u.tensor.device.device_type != G_DEV_TYPE) {
		bad("%s output %d, execution %llu: kind %d (%s)",
		    kind_name(ca->kind), oi, (unsigned long long)x, v->kind,
		    v->kind == CGR_VALUE_ERROR ? v->u.error.msg : "");
		return;
	}
	for (size_t e = 0; e < ne; e++)
		if (((const int64_t *)v->u.tensor.data)[e] !=
		    t_coll_expect(ca->kind, ca->n, ca->root, PER, x, oi, (int)e)) {
			bad("%s output %d, execution %llu: element %zu wrong",
			    kind_name(ca->kind), oi, (unsigned long long)x, e);
			return;
		}
}

static void coll_check(uint64_t x, const cgr_value *o, void *arg)
{
	const struct coll_arg *ca = arg;
	char task[16], where[64];

	snprintf(task, sizeof(task), "src%d", ca->fr);
	for (int k = 0; k < ca->nout; k++) {
		int oi = ca->nout == 1 ? ca->root : k;
		snprintf(where, sizeof(where), "%s output %d",
			 kind_name(ca->kind), oi);
		if (fails(x))
			is_origin(&o[k], x, task, WN[ca->fr], ca->path, where);
		else
			want_tensor(ca, &o[k], x, oi);
	}
}

static struct src g_srcs[4];

/* Collective kind over W[0..3]: rank fr's input fails (the root for
 * broadcast and scatter; not the root for reduce and gather, whose
 * root's output must show it). */
static void check_coll(int kind, int stat, int ov)
{
	const int n = 4;
	struct coll_arg ca = { kind, n, 0, 1, 0, NULL };
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	cgr_node *x, *ins[4], *outs[4];
	cgr_graph *g;
	char what[120], path[64];
	int nin;

	if (in_at_root(kind))
		ca.root = ca.fr = 1;
	else if (out_at_root(kind))
		ca.root = 1, ca.fr = 2;
	snprintf(path, sizeof(path), "; via %s coll", kind_name(kind));
	ca.path = path;
	snprintf(what, sizeof(what), "%s, static shape %s, overlap %s",
		 kind_name(kind), stat ? "on" : "off", ov ? "on" : "off");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	nin = in_at_root(kind) ? 1 : n;
	ca.nout = out_at_root(kind) ? 1 : n;
	for (int i = 0; i < nin; i++) {
		int r = nin == 1 ? ca.root : i;
		char name[16];
		snprintf(name, sizeof(name), "src%d", r);
		ins[i] = task(g, W[r], name, src_fn, &g_srcs[r],
			      sizeof(g_srcs[r]), x);
	}
	p.name = "coll";
	p.kind = kind;
	p.root = ca.root;
	p.static_shape = stat;
	if (cgr_graph_collective(g, &p, W, (size_t)n, ins, (size_t)nin, outs,
				 (size_t)ca.nout) != 0) {
		bad("%s: %s", what, cgr_graph_errmsg(g));
		cgr_graph_destroy(g);
		report(what);
		return;
	}
	cgr_graph_output(g, outs, (size_t)ca.nout);
	run(g, ov, (size_t)ca.nout, what, coll_check, &ca);
	report(what);
}

/* Two broadcasts in a chain: ba (root w1, src1's output) to every
 * member, then bb (root w2, ba's copy there) to every member. */
static void bchain_check(uint64_t x, const cgr_value *o, void *arg)
{
	struct coll_arg ca = { CGR_COLL_BROADCAST, 4, 1, 1, 4, NULL };

	(void)arg;
	for (int k = 0; k < 8; k++) {
		char where[32];
		snprintf(where, sizeof(where), "%s output %d",
			 k < 4 ? "ba" : "bb", k % 4);
		if (fails(x))
			is_origin(&o[k], x, "src1", "w1",
				  k < 4 ? "; via broadcast ba" :
					  "; via broadcast ba, broadcast bb",
				  where);
		else
			want_tensor(&ca, &o[k], x, k % 4);
	}
}

static void check_bchain(int stat, int ov)
{
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	cgr_node *x, *s, *outs[8];
	cgr_graph *g;
	char what[120];

	snprintf(what, sizeof(what),
		 "two broadcasts in a chain, static shape %s, overlap %s",
		 stat ? "on" : "off", ov ? "on" : "off");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	s = task(g, W[1], "src1", src_fn, &g_srcs[1], sizeof(g_srcs[1]), x);
	p.kind = CGR_COLL_BROADCAST;
	p.static_shape = stat;
	p.name = "ba";
	p.root = 1;
	cgr_graph_collective(g, &p, W, 4, &s, 1, outs, 4);
	p.name = "bb";
	p.root = 2;
	cgr_graph_collective(g, &p, W, 4, &outs[2], 1, outs + 4, 4);
	cgr_graph_output(g, outs, 8);
	run(g, ov, 8, what, bchain_check, NULL);
	report(what);
}

/* ---- a collective as the origin -------------------------------------- */

static struct src g_grow[3];

static void mism_check(uint64_t x, const cgr_value *o, void *arg)
{
	struct coll_arg ca = { CGR_COLL_ALLREDUCE, 3, 0, 0, 3, NULL };
	const int *stat = arg;

	for (int k = 0; k < 3; k++) {
		char pre[80];
		const cgr_value *v = &o[k];
		if (x != 2) {
			want_tensor(&ca, v, x, k);
			continue;
		}
		snprintf(pre, sizeof(pre),
			 "allreduce am on worker %s, execution 2: ", WN[k]);
		if (v->kind != CGR_VALUE_ERROR || v->code != CGR_EMISMATCH ||
		    strcmp(v->u.error.task, "am") != 0 ||
		    strcmp(v->u.error.worker, WN[k]) != 0 ||
		    v->u.error.execution != 2 ||
		    strncmp(v->u.error.msg, pre, strlen(pre)) != 0 ||
		    strstr(v->u.error.msg, "; via") != NULL ||
		    (!*stat && strstr(v->u.error.msg, "rank 2") == NULL))
			bad("member %d: %s %s (task %s worker %s execution "
			    "%llu)",
			    k, cgr_err_name(v->code),
			    v->kind == CGR_VALUE_ERROR ? v->u.error.msg : "?",
			    v->kind == CGR_VALUE_ERROR ? v->u.error.task : "",
			    v->kind == CGR_VALUE_ERROR ? v->u.error.worker : "",
			    (unsigned long long)v->u.error.execution);
	}
}

/* An allreduce whose rank 2 grows a row in execution 2: the collective
 * is the origin (CGR_EMISMATCH), each member's output naming its own
 * worker; the executions around it are correct. */
static void check_mismatch(int stat, int ov)
{
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	cgr_node *x, *ins[3], *outs[3];
	cgr_graph *g;
	char what[120];

	snprintf(what, sizeof(what),
		 "a shape mismatch has the collective as its origin, static "
		 "shape %s, overlap %s",
		 stat ? "on" : "off", ov ? "on" : "off");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int r = 0; r < 3; r++) {
		char name[16];
		g_grow[r] = (struct src){ r, 0, r == 2 ? 2 : -1 };
		snprintf(name, sizeof(name), "src%d", r);
		ins[r] = task(g, W[r], name, src_fn, &g_grow[r],
			      sizeof(g_grow[r]), x);
	}
	p.name = "am";
	p.kind = CGR_COLL_ALLREDUCE;
	p.static_shape = stat;
	cgr_graph_collective(g, &p, W, 3, ins, 3, outs, 3);
	cgr_graph_output(g, outs, 3);
	run(g, ov, 3, what, mism_check, &stat);
	report(what);
}

/* ---- bounds ------------------------------------------------------------ */

#define CHAIN 12
static struct pass g_first = { 1, 0 }, g_link = { 0, 0 };

static void chain_check(uint64_t x, const cgr_value *o, void *arg)
{
	char path[300];
	size_t n = 0;

	(void)arg;
	if (!fails(x)) {
		if (o[0].kind != CGR_VALUE_BYTES || xof(&o[0]) != x)
			bad("the chain's execution %llu is wrong",
			    (unsigned long long)x);
		return;
	}
	n += (size_t)snprintf(path, sizeof(path), "; via ");
	for (int i = 1; i <= CGR_ERROR_MAX_HOPS; i++)
		n += (size_t)snprintf(path + n, sizeof(path) - n, "task t%d, ",
				      i);
	snprintf(path + n, sizeof(path) - n, "...");
	is_origin(&o[0], x, "t0", "w0", path, "the chain's end");
}

/* A chain of CHAIN tasks over the workers: the path lists the first
 * CGR_ERROR_MAX_HOPS hops, then "...". */
static void check_long_path(int ov)
{
	cgr_node *x, *v;
	cgr_graph *g;
	char what[80];

	snprintf(what, sizeof(what),
		 "a path of %d hops is cut after %d, overlap %s", CHAIN - 1,
		 CGR_ERROR_MAX_HOPS, ov ? "on" : "off");
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	v = x;
	for (int i = 0; i < CHAIN; i++) {
		char name[16];
		snprintf(name, sizeof(name), "t%d", i);
		v = task(g, W[i % 4], name, pass_fn, i ? &g_link : &g_first,
			 sizeof(g_link), v);
	}
	cgr_graph_output(g, &v, 1);
	run(g, ov, 1, what, chain_check, NULL);
	report(what);
}

/* Names of 80 bytes, a text of 300, buffers of the smallest size: the
 * origin is whole (names cut at 63 bytes), the message fits its buffer
 * and says where it was cut. */
static char g_long[3][81];
static struct pass g_lfirst = { 1, 1 };

static void small_check(uint64_t x, const cgr_value *o, void *arg)
{
	char pre[200], t63[64], w63[64];
	const cgr_value *v = &o[0];

	(void)arg;
	if (!fails(x)) {
		if (v->kind != CGR_VALUE_BYTES || xof(v) != x)
			bad("small buffers: execution %llu is wrong",
			    (unsigned long long)x);
		return;
	}
	memcpy(t63, g_long[0], 63);
	t63[63] = 0;
	snprintf(w63, sizeof(w63), "%s", cgr_worker_name(W[0]));
	snprintf(pre, sizeof(pre), "task %s on worker %s, execution %llu: ",
		 t63, w63, (unsigned long long)x);
	if (v->kind != CGR_VALUE_ERROR || v->code != fail_code(x) ||
	    strcmp(v->u.error.task, t63) != 0 ||
	    strcmp(v->u.error.worker, w63) != 0 ||
	    v->u.error.execution != x ||
	    strncmp(v->u.error.msg, pre, strlen(pre)) != 0 ||
	    strlen(v->u.error.msg) >= 512 ||
	    strcmp(v->u.error.msg + strlen(v->u.error.msg) - 3, "...") != 0)
		bad("small buffers, execution %llu: %s %s (task %s worker %s)",
		    (unsigned long long)x, cgr_err_name(v->code),
		    v->kind == CGR_VALUE_ERROR ? v->u.error.msg : "?",
		    v->kind == CGR_VALUE_ERROR ? v->u.error.task : "",
		    v->kind == CGR_VALUE_ERROR ? v->u.error.worker : "");
}

static void check_small(int ov)
{
	cgr_node *x, *v;
	cgr_graph *g;
	char what[80];

	snprintf(what, sizeof(what),
		 "long names and text in small buffers, overlap %s",
		 ov ? "on" : "off");
	for (int i = 0; i < 3; i++) {
		memset(g_long[i], 'a' + i, 80);
		g_long[i][80] = 0;
	}
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	v = x;
	for (int i = 0; i < 3; i++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = g_long[i];
		d.fn = pass_fn;
		d.max_out_bytes = 8;
		T_ARG(d, i ? &g_link : &g_lfirst);
		cgr_graph_task(g, W[i == 0 ? 0 : i + 1], &d, &v, 1, &v, 1);
	}
	cgr_graph_output(g, &v, 1);
	run(g, ov, 1, what, small_check, NULL);
	report(what);
}

#ifdef T_PROCESS_WORKERS
static const cgr_export exports[] = {
	{ "src", src_fn, NULL, NULL },	     { "mid", mid_fn, NULL, NULL },
	{ "sum", sum_fn, NULL, NULL },	     { "triple", triple_fn, NULL, NULL },
	{ "pass", pass_fn, NULL, NULL },     { NULL, NULL, NULL, NULL },
};
#endif

int main(int argc, char **argv)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;

#ifdef T_PROCESS_WORKERS
	cgr_worker_main(argc, argv, exports);
	cp.exports = exports;
#endif
	t_init(argc, argv, 240);
#ifdef CGR_FAKE_NCCL
	setenv("FAKE_CUDA_NDEV", "4", 1);
	cp.cudart_path = CGR_FAKE_CUDART;
	cp.nccl_path = CGR_FAKE_NCCL;
	cp.log_fn = cgr_log_stderr;
#endif
	if (cgr_ctx_create(&cp, &ctx) != 0) {
		printf("Bail out! no context\n");
		return 1;
	}
	for (int i = 0; i < 4; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		wp.name = WN[i];
#ifdef CGR_FAKE_NCCL
		wp.device = i;
#endif
#ifdef T_PROCESS_WORKERS
		if (i % 2 == 1)
			wp.kind = CGR_WORKER_PROCESS;
#endif
		if (cgr_worker_create(ctx, &wp, &W[i]) != 0) {
			printf("Bail out! no worker %d\n", i);
			return 1;
		}
		g_srcs[i] = (struct src){ i, 0, -1 };
	}
	for (int ov = 0; ov <= 1; ov++) {
		t_diag("overlap %s", ov ? "on" : "off");
		check_edges(false, 0, ov);
		for (int stat = 0; stat <= 1; stat++)
			check_edges(true, stat, ov);
		for (int kind = CGR_COLL_ALLREDUCE; kind <= CGR_COLL_ALLTOALL;
		     kind++)
			for (int stat = 0; stat <= 1; stat++) {
				int fr = in_at_root(kind)  ? 1 :
					 out_at_root(kind) ? 2 :
							     1;
				g_srcs[fr].fail = 1;
				check_coll(kind, stat, ov);
				g_srcs[fr].fail = 0;
			}
		for (int stat = 0; stat <= 1; stat++) {
			g_srcs[1].fail = 1;
			check_bchain(stat, ov);
			g_srcs[1].fail = 0;
			check_mismatch(stat, ov);
		}
		check_long_path(ov);
		check_small(ov);
	}
	cgr_ctx_destroy(ctx);
	return t_done();
}
