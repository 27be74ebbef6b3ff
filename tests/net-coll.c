/*
 * tests/net-coll.c: collective nodes whose members are on several hosts
 * (the "coll" mode of tests/net-graph, which tests/net-graph.sh runs on
 * three network namespaces).
 *
 * Every collective kind, with reducing ones under every operation, over
 * five layouts: 2 and 3 hosts with 1 and 2 members each (layouts[]).
 * Each member's input is made by a task on its own worker ("gen",
 * exported: it runs on the host of its worker) from the execution's
 * argument: a dtype (every one), a count (0, 1, odd, large),
 * and a fault: none, one member's task failing (its error value must
 * reach every output, its origin kept), or one member's shape differing
 * (CGR_EMISSMATCH on every output).  The same graph on as many thread
 * workers here is the reference: every output of every execution must be
 * the same value, byte for byte (the data are small integers, so sums
 * are exact in every float type and the order of reduction cannot show);
 * an allreduce's sum is also checked against a direct computation.  A
 * static-shape allreduce and a bucket (two tensors per member) too.
 * Every graph is built twice: over values (each member reads the inputs
 * it needs), and on a communicator across hosts made over the same
 * members (cgr_coll_params.comm: the members agree and move the data
 * through it).  On a communicator also: the bytes an allreduce sends
 * from a host (bytes_far), the refusals (refusals), a teardown while
 * members wait in it (torn).
 * Prints "coll OK graphs G executions E outputs O" or what differed.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cgr.h>

#include "t_netcoll.h"

#define SEC 1000000000ll
#define MAXM 6		  /* members at most */
#define BIG 10000	  /* the large count (times the members) */
#define MAXB (4u << 20) /* bytes of a value at most */
#define SLOW (2 * SEC)	  /* a late member's delay */

/* The execution's argument, read by every member's gen. */
struct arg {
	uint32_t seed;
	uint32_t count; /* elements of each member's input */
	uint8_t dtype;	/* cgr_dtype */
	uint8_t fault;	/* 0 none, 1 error value at `who`, 2 shape at `who`,
			   3 `who` late (SLOW) */
	uint8_t who;
	uint8_t twice;	/* a bucket: the second tensor's count is doubled */
};

/* Element e of member r's input: 1..5 (1..2 in bfloat16, whose 8 bits
 * hold products of four such), so that sums and products are exact. */
static unsigned elem(uint32_t seed, unsigned r, size_t e, cgr_dtype dt)
{
	return (unsigned)((seed + 7u * r + 3u * e) %
			  (dt == CGR_BFLOAT16 ? 2u : 5u)) + 1u;
}

static void put(unsigned char *p, cgr_dtype dt, size_t e, unsigned v)
{
	switch (dt) {
	case CGR_INT8: case CGR_UINT8: p[e] = (unsigned char)v; break;
	case CGR_INT16: case CGR_UINT16: {
		uint16_t x = (uint16_t)v;
		memcpy(p + 2 * e, &x, 2);
		break;
	}
	case CGR_INT32: case CGR_UINT32: {
		uint32_t x = v;
		memcpy(p + 4 * e, &x, 4);
		break;
	}
	case CGR_INT64: case CGR_UINT64: {
		uint64_t x = v;
		memcpy(p + 8 * e, &x, 8);
		break;
	}
	case CGR_FLOAT16: {
		/* v in 1..5: exponent 15 + floor(log2 v), 10-bit fraction */
		int ex = v >= 4 ? 2 : v >= 2 ? 1 : 0;
		uint16_t x = (uint16_t)(((15 + ex) << 10) |
					(((v << 10) >> ex) & 0x3ff));
		memcpy(p + 2 * e, &x, 2);
		break;
	}
	case CGR_BFLOAT16: {
		float f = (float)v;
		uint32_t u;
		uint16_t x;
		memcpy(&u, &f, 4);
		x = (uint16_t)(u >> 16);
		memcpy(p + 2 * e, &x, 2);
		break;
	}
	case CGR_FLOAT32: {
		float f = (float)v;
		memcpy(p + 4 * e, &f, 4);
		break;
	}
	default: {
		double f = (double)v;
		memcpy(p + 8 * e, &f, 8);
		break;
	}
	}
}

static const struct {
	int code, bits;
} dl[CGR_DTYPE_COUNT] = {
	[CGR_INT8] = { kDLInt, 8 },	 [CGR_UINT8] = { kDLUInt, 8 },
	[CGR_INT16] = { kDLInt, 16 },	 [CGR_UINT16] = { kDLUInt, 16 },
	[CGR_INT32] = { kDLInt, 32 },	 [CGR_UINT32] = { kDLUInt, 32 },
	[CGR_INT64] = { kDLInt, 64 },	 [CGR_UINT64] = { kDLUInt, 64 },
	[CGR_FLOAT16] = { kDLFloat, 16 }, [CGR_BFLOAT16] = { kDLBfloat, 16 },
	[CGR_FLOAT32] = { kDLFloat, 32 }, [CGR_FLOAT64] = { kDLFloat, 64 },
};

/* gen: member r's input (task arg: r and the tensor's index j). */
int netcoll_gen(cgr_task_ctx *tc, void *state, const cgr_value *in,
		size_t nin, cgr_value *out, size_t nout)
{
	const unsigned char *ra = cgr_task_arg(tc);
	unsigned r = ra[0], j = ra[1];
	struct arg a;
	cgr_dtype dt;
	size_t n, esz;
	unsigned char *o;
	static __thread int64_t shape[1];

	(void)state, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_BYTES || in[0].u.bytes.len != sizeof(a))
		return -EINVAL;
	memcpy(&a, in[0].u.bytes.data, sizeof(a));
	if (a.fault == 3 && a.who == r) {
		/* Late: the others wait in the collective meanwhile. */
		struct timespec ts = { SLOW / SEC, 0 };
		nanosleep(&ts, NULL);
	}
	if (a.fault == 1 && a.who == r) {
		cgr_task_set_error(tc, -EDOM, "member %u refuses seed %u", r,
				   a.seed);
		return -EDOM;
	}
	dt = (cgr_dtype)a.dtype;
	n = (size_t)a.count * (j && a.twice ? 2 : 1) +
	    (a.fault == 2 && a.who == r ? 4 : 0);
	esz = cgr_dtype_size(dt);
	o = cgr_task_output_buffer(tc, 0, n * esz);
	if (o == NULL && n > 0)
		return -ENOMEM;
	for (size_t e = 0; e < n; e++)
		put(o, dt, e, elem(a.seed + j, r, e, dt));
	shape[0] = (int64_t)n;
	out[0] = cgr_value_tensor(o, dl[dt].code, dl[dt].bits, 1, shape);
	return 0;
}

/* One collective over m members (gen on each, inputs from argument 0),
 * every output a graph output; k tensors per member (a bucket). */
/* Nodes without a communicator: over values (CGR_BACKEND_CPU), or as
 * the compile chooses (AUTO: an allreduce of capacity MAXB across hosts
 * gets a communicator of its own). */
int netcoll_backend_auto;

static int build(cgr_ctx *ctx, cgr_worker *const *w, int m, int kind,
		 cgr_redop op, int root, int stat, int k, int mode,
		 cgr_comm *comm, cgr_compiled **out)
{
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_node *arg, *in[2 * MAXM], *o[2 * MAXM];
	bool rooted_in = kind == CGR_COLL_BROADCAST ||
			 kind == CGR_COLL_SCATTER;
	bool rooted_out = kind == CGR_COLL_REDUCE || kind == CGR_COLL_GATHER;
	int nin = rooted_in ? 1 : m * k, nout = rooted_out ? 1 : m * k;
	cgr_graph *g;
	int ret = cgr_graph_create(ctx, &g);

	if (ret == 0)
		ret = cgr_graph_input(g, 0, &arg);
	for (int i = 0; i < nin && ret == 0; i++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		int r = rooted_in ? root : i / k;
		unsigned char ra[2] = { (unsigned char)r,
					(unsigned char)(i % k) };
		char name[16];
		snprintf(name, sizeof(name), "gen%d.%d", r, i % k);
		d.name = name;
		d.fn = netcoll_gen;
		d.arg_data = ra;
		d.arg_len = 2;
		d.max_out_bytes = MAXB;
		ret = cgr_graph_task(g, w[r], &d, &arg, 1, &in[i], 1);
	}
	p.name = "c";
	p.kind = kind;
	p.op = op;
	p.root = root;
	p.static_shape = stat;
	p.ntensors = (size_t)k;
	p.max_out_bytes = MAXB;
	p.comm = comm;
	p.backend = comm == NULL && !netcoll_backend_auto ? CGR_BACKEND_CPU :
						    CGR_BACKEND_AUTO;
	if (ret == 0)
		ret = cgr_graph_collective(g, &p, w, (size_t)m, in, (size_t)nin,
					   o, (size_t)nout);
	if (ret == 0)
		ret = cgr_graph_output(g, o, (size_t)nout);
	cp.max_inflight = 2;
	cp.wait_mode = mode;
	cp.max_value_bytes = MAXB;
	cp.get_timeout_ns = 30 * SEC;
	if (ret == 0)
		ret = cgr_graph_compile(g, &cp, out);
	if (ret != 0)
		fprintf(stderr, "coll build: %s: %s\n", cgr_strerror(ret),
			cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return ret;
}

static size_t vbytes(const cgr_value *v)
{
	return v->kind == CGR_VALUE_BYTES ? v->u.bytes.len :
	       v->kind == CGR_VALUE_TENSOR ? cgr_tensor_nbytes(&v->u.tensor) :
					     0;
}

/* Whether error messages a (across hosts) and b (one host) are the same
 * but for the workers' names (w0 there is l0 here). */
static bool same_msg(const char *a, const char *b)
{
	static const char on[] = " on worker ";

	while (*a && *a == *b) {
		if (strncmp(a, on, sizeof(on) - 1) == 0 &&
		    strncmp(b, on, sizeof(on) - 1) == 0 &&
		    a[sizeof(on) - 1] == 'w' && b[sizeof(on) - 1] == 'l') {
			a += sizeof(on), b += sizeof(on);
			continue;
		}
		a++, b++;
	}
	return *a == *b;
}

/* Whether far and near are the same value (static: error messages may
 * differ, the codes not). */
static bool same(const cgr_value *f, const cgr_value *n, bool stat)
{
	if (f->kind != n->kind || f->code != n->code)
		return false;
	if (f->kind == CGR_VALUE_ERROR)
		return stat || (strcmp(f->u.error.task, n->u.error.task) == 0 &&
				same_msg(f->u.error.msg, n->u.error.msg));
	if (f->kind != CGR_VALUE_TENSOR)
		return false;
	const DLTensor *a = &f->u.tensor, *b = &n->u.tensor;
	if (a->ndim != b->ndim || a->dtype.code != b->dtype.code ||
	    a->dtype.bits != b->dtype.bits)
		return false;
	for (int i = 0; i < a->ndim; i++)
		if (a->shape[i] != b->shape[i])
			return false;
	return memcmp((const char *)a->data + a->byte_offset,
		      (const char *)b->data + b->byte_offset, vbytes(f)) == 0;
}

static void show(const char *what, const cgr_value *v)
{
	if (v->kind == CGR_VALUE_ERROR)
		fprintf(stderr, "  %s: error %s task '%s': %s\n", what,
			cgr_strerror(v->code), v->u.error.task,
			v->u.error.msg);
	else if (v->kind == CGR_VALUE_TENSOR)
		fprintf(stderr, "  %s: tensor ndim %d [%lld] dtype %d/%d\n",
			what, v->u.tensor.ndim,
			v->u.tensor.ndim ? (long long)v->u.tensor.shape[0] : 0,
			v->u.tensor.dtype.code, v->u.tensor.dtype.bits);
	else
		fprintf(stderr, "  %s: kind %d\n", what, v->kind);
}

/* An allreduce sum of int32 against the direct computation. */
static bool direct_sum(const cgr_value *o, const struct arg *a, int m)
{
	if (o->kind != CGR_VALUE_TENSOR || vbytes(o) != 4 * (size_t)a->count)
		return false;
	for (size_t e = 0; e < a->count; e++) {
		int32_t want = 0, got;
		for (int r = 0; r < m; r++)
			want += (int32_t)elem(a->seed, (unsigned)r, e,
					      CGR_INT32);
		memcpy(&got, (const char *)o->u.tensor.data + 4 * e, 4);
		if (got != want)
			return false;
	}
	return true;
}

struct tally {
	unsigned graphs, execs, outs, bad, direct, comm;
};

/* Runs the executions of one graph pair, comparing every output. */
static void compare(cgr_compiled *cf, cgr_compiled *cn, int m, int kind,
		    cgr_redop op, int stat, int nout, struct tally *t)
{
	static const uint32_t counts[] = { 0, 1, 7, BIG };
	unsigned i = 0;

	for (int dt = 0; dt < CGR_DTYPE_COUNT; dt++)
		for (size_t ci = 0; ci < 4; ci++)
			for (int fault = 0; fault < 3; fault++) {
				struct arg a = { 0 };
				cgr_value av, of[2 * MAXM], on[2 * MAXM];
				cgr_ref rf, rn;
				/* Faults at one count; a large count with
				 * the widest dtypes only. */
				if ((fault && ci != 2) ||
				    (counts[ci] == BIG && dt % 4 != 3 &&
				     dt != CGR_FLOAT32))
					continue;
				a.seed = i++;
				a.dtype = (uint8_t)dt;
				/* Split ones need a multiple of m. */
				a.count = counts[ci] * (uint32_t)m;
				a.fault = (uint8_t)fault;
				a.who = (uint8_t)(1 + a.seed % (unsigned)(m - 1));
				a.twice = 1;
				if (stat && fault == 2)
					a.who = 0;
				av = cgr_value_bytes(&a, sizeof(a));
				if (cgr_execute(cf, &av, 1, &rf) != 0 ||
				    cgr_execute(cn, &av, 1, &rn) != 0 ||
				    cgr_ref_get(cf, rf, 30 * SEC, of,
						(size_t)nout) != 0 ||
				    cgr_ref_get(cn, rn, 30 * SEC, on,
						(size_t)nout) != 0) {
					fprintf(stderr, "coll: execute failed\n");
					t->bad++;
					return;
				}
				for (int q = 0; q < nout; q++, t->outs++)
					if (!same(&of[q], &on[q], stat)) {
						if (t->bad++ < 6) {
							fprintf(stderr,
								"coll kind %d op %d m %d "
								"dtype %d count %u fault "
								"%d output %d differs\n",
								kind, op, m, dt,
								a.count, fault, q);
							show("across hosts", &of[q]);
							show("one host", &on[q]);
						}
					}
				if (kind == CGR_COLL_ALLREDUCE && op == CGR_SUM &&
				    dt == CGR_INT32 && fault == 0 && !stat) {
					t->direct++;
					t->bad += !direct_sum(&of[0], &a, m);
				}
				/* A fault: every output an error value
				 * (broadcast and scatter: at the root). */
				for (int q = 0;
				     fault && q < nout &&
				     kind != CGR_COLL_BROADCAST &&
				     kind != CGR_COLL_SCATTER;
				     q++)
					if (of[q].kind != CGR_VALUE_ERROR ||
					    of[q].code != (fault == 1 ? -EDOM :
							   CGR_EMISMATCH)) {
						t->bad++;
						fprintf(stderr,
							"coll kind %d m %d fault %d "
							"static %d output %d:\n",
							kind, m, fault, stat, q);
						show("across hosts", &of[q]);
					}
				cgr_ref_release(cf, rf);
				cgr_ref_release(cn, rn);
				t->execs++;
			}
}

/* One collective across hosts against one host.  via_comm: on a
 * communicator across hosts the test makes over the same members (its
 * ranks their order), not over values every member reads. */
static int one(cgr_ctx *ctx, cgr_worker *const *far, cgr_worker *const *near,
	       int m, int kind, cgr_redop op, int stat, int k, bool via_comm,
	       struct tally *t)
{
	cgr_compiled *cf = NULL, *cn = NULL;
	cgr_comm *cm = NULL;
	int root = 1;
	bool rooted_out = kind == CGR_COLL_REDUCE || kind == CGR_COLL_GATHER;
	int nout = rooted_out ? 1 : m * k;

	if ((via_comm &&
	     cgr_comm_create(ctx, far, (size_t)m, CGR_BACKEND_CPU, &cm) != 0) ||
	    build(ctx, far, m, kind, op, root, stat, k, CGR_WAIT_ADAPTIVE, cm,
		  &cf) != 0 ||
	    build(ctx, near, m, kind, op, root, stat, k, CGR_WAIT_ADAPTIVE,
		  NULL, &cn) != 0) {
		fprintf(stderr, "coll kind %d m %d%s: not built\n", kind, m,
			via_comm ? " on a communicator" : "");
		t->bad++;
		if (cf != NULL)
			cgr_compiled_destroy(cf);
		cgr_comm_destroy(cm);
		return 1;
	}
	t->graphs++;
	t->comm += via_comm;
	compare(cf, cn, m, kind, op, stat, nout, t);
	cgr_compiled_destroy(cf);
	cgr_compiled_destroy(cn);
	cgr_comm_destroy(cm);
	return 0;
}

int netcoll_allreduce(cgr_ctx *ctx, cgr_worker *const *w, int mode,
		      cgr_comm **cm, cgr_compiled **out, cgr_value *arg)
{
	static struct arg a = { 7, 64, CGR_INT32, 0, 0, 0 };
	int ret = cm != NULL ? cgr_comm_create(ctx, w, 3, CGR_BACKEND_CPU, cm)
			     : 0;

	if (ret == 0)
		ret = build(ctx, w, 3, CGR_COLL_ALLREDUCE, CGR_SUM, 0, 0, 1,
			    mode, cm != NULL ? *cm : NULL, out);

	*arg = cgr_value_bytes(&a, sizeof(a));
	return ret;
}

/* The layouts (rank of each member's worker; b: a second worker there),
 * 2 and 3 hosts with 1 and 2 members each, members in rank order not
 * grouped by host in one of them. */
#define NLAYOUT 5
static const struct layout {
	int m;
	int host[MAXM]; /* 0..2: the first worker there, 3..5: the second */
} layouts[NLAYOUT] = {
	{ 3, { 0, 1, 2 } },		/* 3 hosts, 1 each */
	{ 4, { 0, 1, 4, 2 } },		/* 3 hosts, 1 or 2 */
	{ 2, { 1, 2 } },		/* 2 hosts (neither the driver's), 1 each */
	{ 4, { 0, 1, 3, 4 } },		/* 2 hosts, 2 each, interleaved */
	{ 6, { 0, 3, 1, 4, 2, 5 } },	/* 3 hosts, 2 each */
};

/* A value crosses to a host once however many of its workers read it:
 * an allgather over two hosts with two members each (w0 w1 w0b w1b)
 * moves, per execution, from the driver's host the argument (read by
 * both gens on rank 1) and its two members' inputs (each read by both
 * members on rank 1), and into it rank 1's two inputs and two outputs. */
static void crossings(cgr_ctx *ctx, cgr_job *job, cgr_worker *const *f,
		      cgr_worker *const *n, struct tally *t)
{
	cgr_job_stats a, b;
	unsigned execs = t->execs;

	cgr_job_stats_get(job, &a);
	one(ctx, f, n, 4, CGR_COLL_ALLGATHER, CGR_SUM, 0, 1, false, t);
	cgr_job_stats_get(job, &b);
	execs = t->execs - execs;
	if (b.data_sent - a.data_sent != 3ull * execs ||
	    b.data_received - a.data_received != 4ull * execs) {
		t->bad++;
		fprintf(stderr, "coll: %u executions sent %llu values (want "
			"%u), received %llu (want %u)\n", execs,
			(unsigned long long)(b.data_sent - a.data_sent),
			3 * execs,
			(unsigned long long)(b.data_received - a.data_received),
			4 * execs);
	}
}

/* Only the block a member reads crosses: an alltoall over one member on
 * each of three hosts sends, per execution, from the driver's host the
 * argument twice (to the gens on ranks 1 and 2) and a third of its
 * member's input to each of the other two. */
static void slices(cgr_ctx *ctx, cgr_job *job, cgr_worker *const *f,
		   struct tally *t)
{
	struct arg a = { 5, 3 * BIG, CGR_INT32, 0, 0, 1 };
	cgr_value av = cgr_value_bytes(&a, sizeof(a)), o[3];
	uint64_t want = 2 * sizeof(a) + 2 * (4ull * a.count / 3);
	cgr_compiled *c;
	cgr_job_stats x, y;
	cgr_ref r;

	if (build(ctx, f, 3, CGR_COLL_ALLTOALL, CGR_SUM, 1, 0, 1,
		  CGR_WAIT_ADAPTIVE, NULL, &c) != 0) {
		t->bad++;
		return;
	}
	cgr_job_stats_get(job, &x);
	if (cgr_execute(c, &av, 1, &r) != 0 ||
	    cgr_ref_get(c, r, 30 * SEC, o, 3) != 0) {
		t->bad++;
		fprintf(stderr, "coll slices: execute failed\n");
	} else {
		cgr_job_stats_get(job, &y);
		for (int q = 0; q < 3; q++)
			t->bad += o[q].kind != CGR_VALUE_TENSOR ||
				  vbytes(&o[q]) != 4ull * a.count;
		if (y.bytes_sent - x.bytes_sent != want) {
			t->bad++;
			fprintf(stderr, "coll slices: sent %llu bytes, want "
				"%llu\n",
				(unsigned long long)(y.bytes_sent - x.bytes_sent),
				(unsigned long long)want);
		}
		cgr_ref_release(c, r);
	}
	cgr_compiled_destroy(c);
}

/* What one execution of an allreduce of 3 hosts x 2 (layout 4) sends
 * from this host: over values every member's input crosses to each other
 * host (4 inputs); on a communicator its leaders reduce-scatter and
 * allgather (4/3 of an input, and the records), the user's or the one
 * the compile makes for a node of capacity 1 MiB or more (AUTO).  The
 * argument crosses too in each.  The outputs of the three the same,
 * byte for byte. */
static void bytes_far(cgr_ctx *ctx, cgr_job *job, cgr_worker *const *f6,
		      struct tally *t)
{
	static const char *how[3] = { "over values", "on a communicator",
				      "on the compile's communicator" };
	struct arg a = { 3, 6 * BIG, CGR_INT32, 0, 0, 0 };
	cgr_value av = cgr_value_bytes(&a, sizeof(a)), o[6];
	cgr_worker *f[6];
	uint64_t sent[3] = { 0, 0, 0 }, in = 4ull * a.count;
	unsigned char *first = malloc(6 * in);

	for (int i = 0; i < 6; i++)
		f[i] = f6[layouts[4].host[i]];
	for (int via = 0; via < 3 && first != NULL; via++) {
		cgr_compiled *c = NULL;
		cgr_comm *cm = NULL;
		cgr_job_stats x, y;
		cgr_ref r;
		int ret = via != 1 ? 0 :
				     cgr_comm_create(ctx, f, 6, CGR_BACKEND_CPU,
						     &cm);
		netcoll_backend_auto = via == 2;
		if (ret == 0)
			ret = build(ctx, f, 6, CGR_COLL_ALLREDUCE, CGR_SUM, 0,
				    0, 1, CGR_WAIT_ADAPTIVE, cm, &c);
		netcoll_backend_auto = 0;
		if (ret != 0) {
			t->bad++;
			cgr_comm_destroy(cm);
			break;
		}
		cgr_job_stats_get(job, &x);
		if (cgr_execute(c, &av, 1, &r) != 0 ||
		    cgr_ref_get(c, r, 30 * SEC, o, 6) != 0) {
			t->bad++;
		} else {
			cgr_job_stats_get(job, &y);
			sent[via] = y.bytes_sent - x.bytes_sent +
				    y.comm_bytes_sent - x.comm_bytes_sent;
			for (int q = 0; q < 6; q++) {
				bool ok = o[q].kind == CGR_VALUE_TENSOR &&
					  vbytes(&o[q]) == in;
				if (ok && via == 0)
					memcpy(first + q * in,
					       o[q].u.tensor.data, in);
				else if (ok)
					ok = memcmp(first + q * in,
						    o[q].u.tensor.data,
						    in) == 0;
				t->bad += !ok;
			}
			cgr_ref_release(c, r);
			t->execs++;
		}
		cgr_compiled_destroy(c);
		cgr_comm_destroy(cm);
	}
	free(first);
	printf("coll bytes: an allreduce of %llu B over 3 hosts x 2 sent "
	       "from this host %llu B %s, %llu B %s, %llu B %s\n",
	       (unsigned long long)in, (unsigned long long)sent[0], how[0],
	       (unsigned long long)sent[1], how[1],
	       (unsigned long long)sent[2], how[2]);
	if (sent[0] < 4 * in || sent[1] >= 2 * in || sent[1] < 4 * in / 3 ||
	    sent[2] >= 2 * in || sent[2] < 4 * in / 3) {
		t->bad++;
		fprintf(stderr, "coll bytes: want at least %llu over values, "
			"%llu to %llu on a communicator\n",
			(unsigned long long)(4 * in),
			(unsigned long long)(4 * in / 3),
			(unsigned long long)(2 * in));
	}
}

/* A communicator across hosts that cannot serve a collective node: one
 * whose ranks are on other hosts than the members (the compile says
 * which), one of a single host for members on several, and one whose
 * rank 0 is another worker on member 0's host (far[3]: its rank 0 could
 * be issued from two threads). */
static void refusals(cgr_ctx *ctx, cgr_worker *const *far,
		     cgr_worker *const *near, struct tally *t)
{
	cgr_worker *rev[3] = { far[2], far[1], far[0] };
	cgr_worker *other[3] = { far[3], far[1], far[2] };
	cgr_worker *const *over[3] = { rev, near, other };

	for (int i = 0; i < 3; i++) {
		cgr_compiled *c = NULL;
		cgr_comm *cm = NULL;
		if (cgr_comm_create(ctx, over[i], 3, CGR_BACKEND_CPU, &cm) != 0) {
			t->bad++;
			continue;
		}
		t->bad += build(ctx, far, 3, CGR_COLL_ALLREDUCE, CGR_SUM, 0, 0,
				1, CGR_WAIT_ADAPTIVE, cm, &c) != -ENOTSUP;
		cgr_compiled_destroy(c);
		cgr_comm_destroy(cm);
	}
}

/* A communicator serves one graph after another (teardown leaves it
 * whole).  Teardown while members wait in it for a late one (its gen
 * sleeps SLOW): it returns, the execution's outputs are error
 * values, and the communicator is aborted (its ranks' sequences no
 * longer line up): rank 0's next call fails with -ECANCELED.  Rank 0 is
 * known to wait once this host sent its records (comm_bytes_sent). */
static void torn(cgr_ctx *ctx, cgr_job *job, cgr_worker *const *far,
		 struct tally *t)
{
	struct arg a = { 9, 64, CGR_INT32, 3, 2, 0 };
	cgr_value av = cgr_value_bytes(&a, sizeof(a)), o[3];
	cgr_job_stats x, y;
	cgr_compiled *c = NULL;
	cgr_comm *cm = NULL;
	int32_t one = 1;
	cgr_ref r;
	int ret;

	if (cgr_comm_create(ctx, far, 3, CGR_BACKEND_CPU, &cm) != 0) {
		t->bad++;
		return;
	}
	/* A graph done with it leaves it whole for the next one. */
	for (int i = 0; i < 2; i++) {
		struct arg ok = { 9, 64, CGR_INT32, 0, 0, 0 };
		cgr_value okv = cgr_value_bytes(&ok, sizeof(ok));
		c = NULL;
		if (build(ctx, far, 3, CGR_COLL_ALLREDUCE, CGR_SUM, 0, 0, 1,
			  CGR_WAIT_ADAPTIVE, cm, &c) != 0 ||
		    (i == 0 && (cgr_execute(c, &okv, 1, &r) != 0 ||
				cgr_ref_get(c, r, 30 * SEC, o, 3) != 0 ||
				!direct_sum(&o[2], &ok, 3)))) {
			fprintf(stderr, "coll torn: graph %d on the "
				"communicator failed\n", i);
			t->bad++;
			cgr_compiled_destroy(c);
			cgr_comm_destroy(cm);
			return;
		}
		if (i == 0) {
			cgr_ref_release(c, r);
			cgr_compiled_destroy(c);
		}
	}
	cgr_job_stats_get(job, &x);
	if (cgr_execute(c, &av, 1, &r) != 0) {
		t->bad++;
	} else {
		do
			cgr_job_stats_get(job, &y);
		while (y.comm_bytes_sent == x.comm_bytes_sent);
		ret = cgr_compiled_teardown(c, 10 * SEC);
		if (ret != 0)
			fprintf(stderr, "coll torn: teardown %s\n",
				cgr_strerror(ret));
		t->bad += ret != 0;
		ret = cgr_ref_get(c, r, 5 * SEC, o, 3);
		if (ret == 0)
			for (int q = 0; q < 3; q++)
				t->bad += o[q].kind != CGR_VALUE_ERROR;
		/* (Or aborted by another host's member that stopped
		 * first.) */
		if (strstr(cgr_comm_errmsg(cm, 0), "torn down") == NULL &&
		    strstr(cgr_comm_errmsg(cm, 0), "aborted") == NULL) {
			t->bad++;
			fprintf(stderr, "coll torn: rank 0 says '%s'\n",
				cgr_comm_errmsg(cm, 0));
		}
		ret = cgr_allreduce(cm, 0, &one, &one, 1, CGR_INT32, CGR_SUM,
				    NULL, NULL);
		t->bad += ret != -ECANCELED;
		t->execs++;
	}
	cgr_compiled_destroy(c);
	cgr_comm_destroy(cm);
}

static int layout_run(cgr_ctx *ctx, cgr_job *job, const struct layout *l,
		      cgr_worker *const *far6, cgr_worker *const *near6,
		      struct tally *t)
{
	cgr_worker *f[MAXM], *n[MAXM];
	int m = l->m;

	for (int i = 0; i < m; i++)
		f[i] = far6[l->host[i]], n[i] = near6[l->host[i]];
	for (int kind = CGR_COLL_ALLREDUCE; kind <= CGR_COLL_ALLTOALL;
	     kind++) {
		bool red = kind == CGR_COLL_ALLREDUCE ||
			   kind == CGR_COLL_REDUCE ||
			   kind == CGR_COLL_REDUCESCATTER;
		int nops = !red ? 1 :
			   kind == CGR_COLL_ALLREDUCE ? CGR_REDOP_COUNT :
							2;
		if (kind == CGR_COLL_ALLGATHER && l->host[1] == 1 &&
		    l->host[2] == 3 && m == 4) {
			crossings(ctx, job, f, n, t);
			one(ctx, f, n, m, kind, CGR_SUM, 0, 1, true, t);
			continue;
		}
		for (int op = 0; op < nops; op++)
			for (int via = 0; via < 2; via++)
				one(ctx, f, n, m, kind,
				    (cgr_redop)(kind == CGR_COLL_ALLREDUCE ?
							op :
							op * CGR_MAX),
				    0, 1, via, t);
	}
	/* Static shapes, and a bucket of two tensors. */
	for (int via = 0; via < 2; via++) {
		one(ctx, f, n, m, CGR_COLL_ALLREDUCE, CGR_SUM, 1, 1, via, t);
		one(ctx, f, n, m, CGR_COLL_ALLREDUCE, CGR_SUM, 0, 2, via, t);
		one(ctx, f, n, m, CGR_COLL_ALLGATHER, CGR_SUM, 0, 2, via, t);
	}
	if (m == 3)
		slices(ctx, job, f, t);
	return 0;
}

int netcoll_run(cgr_ctx *ctx, cgr_job *job, cgr_worker *const *far3,
		cgr_worker *const *near3)
{
	cgr_worker *far[6] = { far3[0], far3[1], far3[2] };
	cgr_worker *near[6] = { near3[0], near3[1], near3[2] };
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	struct tally t = { 0 };
	char name[8];
	int made = 3, want = NLAYOUT * 17 * 2;

	/* A second worker on each host, and as many here. */
	for (; made < 6; made++) {
		snprintf(name, sizeof(name), "w%db", made - 3);
		wp.name = name;
		wp.rank = made - 3;
		if (cgr_worker_create(ctx, &wp, &far[made]) != 0)
			break;
		snprintf(name, sizeof(name), "l%db", made - 3);
		wp.rank = -1;
		if (cgr_worker_create(ctx, &wp, &near[made]) != 0) {
			cgr_worker_destroy(far[made], 5 * SEC);
			break;
		}
	}
	for (size_t i = 0; i < NLAYOUT && made == 6; i++)
		layout_run(ctx, job, &layouts[i], far, near, &t);
	refusals(ctx, far, near, &t);
	if (made == 6)
		bytes_far(ctx, job, far, &t);
	torn(ctx, job, far, &t);
	/* Per layout: 14 kinds and operations, static, two buckets; each
	 * over values and on a communicator. */
	printf("coll %s layouts %d graphs %u (on a communicator %u) "
	       "executions %u outputs %u direct %u bad %u\n",
	       t.bad == 0 && t.graphs == (unsigned)want &&
			       t.comm == (unsigned)want / 2 && t.direct > 0 ?
		       "OK" :
		       "BAD",
	       NLAYOUT, t.graphs, t.comm, t.execs, t.outs, t.direct, t.bad);
	for (int i = 3; i < made; i++) {
		cgr_worker_destroy(far[i], 5 * SEC);
		cgr_worker_destroy(near[i], 5 * SEC);
	}
	return t.bad != 0 || t.graphs != (unsigned)want ||
	       t.comm != (unsigned)want / 2 || t.direct == 0;
}
