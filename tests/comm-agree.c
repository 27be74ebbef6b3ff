/*
 * tests/comm-agree.c: the agreement of collectives (src/comm/agree.h), the
 * one set of rules the graph's collective nodes, the CPU communicator and
 * the NCCL communicator decide with.  Its verdict functions are pure, so
 * they are tested here on record sets alone, as the ranks would exchange
 * them: operations that agree, each kind of mismatch (kind, count, dtype,
 * op, root), poisons from one rank reaching every rank's verdict alike,
 * operations agreed already, sends and receives, the latency path's key,
 * then a collective node's inputs (shapes, dtypes, error values, output
 * shapes per kind, capacity) and static shapes.
 *
 * Every verdict is computed once per rank, each over its own copy of the
 * records (as a transport hands them), and must come out the same: code
 * and message.
 */
#include <errno.h>
#include <string.h>

#include "comm/agree.h"
#include "tap.h"

#define NR 4

/* ---- operations ---------------------------------------------------- */

static struct cgr__coll_desc op_desc(int kind, size_t count, cgr_dtype dt,
				     cgr_redop op, int root)
{
	struct cgr__coll_desc d;

	memset(&d, 0, sizeof(d));
	d.kind = kind;
	d.count = count;
	d.dtype = dt;
	d.op = op;
	d.root = root;
	return d;
}

/* The records of descriptors d[0..n), as every rank receives them. */
static void records(const struct cgr__coll_desc *d, int n,
		    struct cgr__agree *all)
{
	memset(all, 0, (size_t)n * sizeof(*all));
	for (int r = 0; r < n; r++)
		cgr__agree_op(&all[r], &d[r]);
}

/*
 * The verdict of collective #k over d[0..n), computed by every rank on its
 * own copy; *same says whether all ranks reached the same code and
 * message.  Returns rank 0's code, its message in msg.
 */
static int ops_verdict(const struct cgr__coll_desc *d, int n, uint64_t k,
		       char *msg, size_t len, bool *same)
{
	struct cgr__agree mine[NR], copy[NR];
	char m[256];
	int code = 0;

	records(d, n, mine);
	*same = true;
	for (int r = 0; r < n; r++) {
		int c;
		memcpy(copy, mine, sizeof(copy));
		m[0] = 0;
		c = cgr__agree_ops(copy, sizeof(*copy), n, k, m, sizeof(m));
		if (r == 0) {
			code = c;
			snprintf(msg, len, "%s", c ? m : "");
		} else if (c != code || (c && strcmp(m, msg) != 0)) {
			*same = false;
		}
	}
	return code;
}

static void test_ops_agree(void)
{
	struct cgr__coll_desc d[NR];
	char msg[256];
	bool same;

	for (int r = 0; r < NR; r++)
		d[r] =
		    op_desc(CGR_COLL_ALLREDUCE, 100, CGR_FLOAT32, CGR_SUM, 0);
	t_is(ops_verdict(d, NR, 1, msg, sizeof(msg), &same), 0,
	     "four equal allreduces agree");
	t_ok(same, "...on every rank");
	/* Fields a kind does not use are not compared. */
	for (int r = 0; r < NR; r++)
		d[r] = op_desc(CGR_COLL_ALLGATHER, 8, CGR_INT32,
			       r ? CGR_MAX : CGR_SUM, r);
	t_is(ops_verdict(d, NR, 2, msg, sizeof(msg), &same), 0,
	     "allgather: op and root differ but are not compared");
	for (int r = 0; r < NR; r++)
		d[r] = op_desc(CGR_COLL_BROADCAST, 8, CGR_INT32,
			       r ? CGR_MAX : CGR_SUM, 2);
	t_is(ops_verdict(d, NR, 3, msg, sizeof(msg), &same), 0,
	     "broadcast: op differs but is not compared");
	d[0] = op_desc(CGR_COLL_ALLREDUCE, 0, CGR_INT8, CGR_SUM, 0);
	t_is(ops_verdict(d, 1, 4, msg, sizeof(msg), &same), 0,
	     "one rank agrees with itself");
}

#define AR4                                                                    \
	{                                                                      \
		CGR_COLL_ALLREDUCE, CGR_COLL_ALLREDUCE, CGR_COLL_ALLREDUCE,    \
		    CGR_COLL_ALLREDUCE                                         \
	}

static void test_ops_mismatch(void)
{
	static const struct {
		const char *what;
		int kind[NR];
		size_t count[NR];
		cgr_dtype dt[NR];
		cgr_redop op[NR];
		int root[NR];
		const char *want;
	} cases[] = {
	    {"count",
	     AR4,
	     {100, 100, 99, 100},
	     {CGR_FLOAT32, CGR_FLOAT32, CGR_FLOAT32, CGR_FLOAT32},
	     {0},
	     {0},
	     "allreduce #12: rank 0 count 100, rank 2 count 99"},
	    {"count on two ranks",
	     AR4,
	     {100, 98, 100, 97},
	     {CGR_FLOAT32, CGR_FLOAT32, CGR_FLOAT32, CGR_FLOAT32},
	     {0},
	     {0},
	     "allreduce #12: rank 0 count 100, rank 1 count 98, rank 3 "
	     "count 97"},
	    {"dtype",
	     AR4,
	     {5, 5, 5, 5},
	     {CGR_INT32, CGR_INT32, CGR_FLOAT32, CGR_INT32},
	     {0},
	     {0},
	     "allreduce #12: rank 0 dtype int32, rank 2 dtype float32"},
	    {"op",
	     AR4,
	     {5, 5, 5, 5},
	     {CGR_INT32, CGR_INT32, CGR_INT32, CGR_INT32},
	     {CGR_SUM, CGR_SUM, CGR_MAX, CGR_SUM},
	     {0},
	     "allreduce #12: rank 0 op sum, rank 2 op max"},
	    {"root",
	     {CGR_COLL_REDUCE, CGR_COLL_REDUCE, CGR_COLL_REDUCE,
	      CGR_COLL_REDUCE},
	     {5, 5, 5, 5},
	     {CGR_INT32, CGR_INT32, CGR_INT32, CGR_INT32},
	     {0},
	     {1, 1, 3, 1},
	     "reduce #12: rank 0 root 1, rank 2 root 3"},
	    {"kind",
	     {CGR_COLL_ALLREDUCE, CGR_COLL_ALLREDUCE, CGR_COLL_BROADCAST,
	      CGR_COLL_ALLREDUCE},
	     {5, 5, 5, 5},
	     {CGR_INT32, CGR_INT32, CGR_INT32, CGR_INT32},
	     {0},
	     {0},
	     "collective #12: rank 0 allreduce, rank 2 broadcast"},
	    /* The first difference in the order kind, count, dtype, op,
	     * root decides. */
	    {"kind before count",
	     {CGR_COLL_ALLREDUCE, CGR_COLL_ALLGATHER, CGR_COLL_ALLREDUCE,
	      CGR_COLL_ALLREDUCE},
	     {5, 5, 6, 5},
	     {CGR_INT32, CGR_INT32, CGR_INT32, CGR_INT32},
	     {0},
	     {0},
	     "collective #12: rank 0 allreduce, rank 1 allgather"},
	    {"count before dtype",
	     AR4,
	     {5, 5, 5, 6},
	     {CGR_INT32, CGR_INT64, CGR_INT32, CGR_INT32},
	     {0},
	     {0},
	     "allreduce #12: rank 0 count 5, rank 3 count 6"},
	    {"dtype before op",
	     AR4,
	     {5, 5, 5, 5},
	     {CGR_INT32, CGR_INT32, CGR_INT32, CGR_UINT8},
	     {CGR_SUM, CGR_MIN, CGR_SUM, CGR_SUM},
	     {0},
	     "allreduce #12: rank 0 dtype int32, rank 3 dtype uint8"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cgr__coll_desc d[NR];
		char msg[256];
		bool same;
		int code;

		for (int r = 0; r < NR; r++)
			d[r] = op_desc(cases[i].kind[r], cases[i].count[r],
				       cases[i].dt[r], cases[i].op[r],
				       cases[i].root[r]);
		code = ops_verdict(d, NR, 12, msg, sizeof(msg), &same);
		t_is(code, CGR_EMISMATCH, "%s differs: CGR_EMISMATCH",
		     cases[i].what);
		t_ok(strcmp(msg, cases[i].want) == 0,
		     "...saying \"%s\" (got \"%s\")", cases[i].want, msg);
		t_ok(same, "...the same on every rank");
	}
}

static void test_ops_poison(void)
{
	struct cgr__coll_desc d[NR];
	char msg[256];
	bool same;
	int code;

	for (int r = 0; r < NR; r++)
		d[r] = op_desc(CGR_COLL_ALLGATHER, 4, CGR_INT32, CGR_SUM, 0);
	d[2].poison = CGR_ETASK;
	d[2].poison_msg = "task producer#0 failed";
	d[3].poison = -EINVAL;
	d[3].poison_msg = "NULL buffer";
	code = ops_verdict(d, NR, 5, msg, sizeof(msg), &same);
	t_is(code, CGR_ETASK, "poisons on ranks 2 and 3: rank 2's code");
	t_ok(strcmp(msg, "allgather #5: rank 2 failed before the operation "
			 "(CGR_ETASK): task producer#0 failed") == 0,
	     "...its message names the rank and carries its text (%s)", msg);
	t_ok(same, "...the same code and message on every rank");
	/* A poison wins over any mismatch: the poisoned rank's fields are
	 * not what it meant to do. */
	d[0].count = 3;
	d[1].kind = CGR_COLL_ALLREDUCE;
	code = ops_verdict(d, NR, 5, msg, sizeof(msg), &same);
	t_is(code, CGR_ETASK, "a poison decides before a mismatch");
	d[2].poison_msg = NULL;
	d[3].poison = 0;
	d[0].count = 4;
	d[1].kind = CGR_COLL_ALLGATHER;
	ops_verdict(d, NR, 5, msg, sizeof(msg), &same);
	t_ok(strcmp(msg, "allgather #5: rank 2 failed before the operation "
			 "(CGR_ETASK)") == 0,
	     "a poison without text: just the code (%s)", msg);
	/* A long message is cut, never overflows the record. */
	char longmsg[400];
	memset(longmsg, 'x', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = 0;
	d[2].poison_msg = longmsg;
	code = ops_verdict(d, NR, 5, msg, sizeof(msg), &same);
	t_ok(code == CGR_ETASK && same && strstr(msg, "xxxx") != NULL,
	     "a long poison message is cut to the record");
}

static void test_ops_agreed(void)
{
	struct cgr__coll_desc d[NR];
	struct cgr__agree all[NR];
	char msg[256];
	bool same;

	/* The graph's collective nodes agreed on their board: the result
	 * is used, not recomputed (these records would not agree). */
	for (int r = 0; r < NR; r++) {
		d[r] = op_desc(CGR_COLL_ALLREDUCE, 10 + (size_t)r, CGR_INT32,
			       CGR_SUM, 0);
		d[r].agreed = true;
	}
	records(d, NR, all);
	t_ok(all[1].flags & CGR__AGREE_AGREED, "agreed records say so");
	t_is(ops_verdict(d, NR, 9, msg, sizeof(msg), &same), 0,
	     "every rank agreed already: not compared again");
	d[1].poison = CGR_EDEVICE;
	d[1].poison_msg = "device error";
	t_is(ops_verdict(d, NR, 9, msg, sizeof(msg), &same), CGR_EDEVICE,
	     "...but a poison that arose since fails every rank");
	t_ok(same && strstr(msg, "rank 1 failed before the operation") != NULL,
	     "...named alike on every rank");
	d[1].poison = 0;
	d[3].agreed = false;
	t_is(ops_verdict(d, NR, 9, msg, sizeof(msg), &same), CGR_EMISMATCH,
	     "one rank not agreed: the records are compared");
	t_ok(same, "...the same on every rank");
}

/* Records laid out in a larger struct (the CPU communicator's per-rank state): the
 * verdict reads them at any stride. */
static void test_ops_stride(void)
{
	struct wide {
		char before[40];
		struct cgr__agree a;
		char after[24];
	} w[3];
	char msg[256];
	int code;

	memset(w, 0, sizeof(w));
	for (int r = 0; r < 3; r++) {
		struct cgr__coll_desc d = op_desc(
		    CGR_COLL_SCATTER, 6, CGR_FLOAT64, CGR_SUM, r == 1 ? 0 : 2);
		cgr__agree_op(&w[r].a, &d);
	}
	code = cgr__agree_ops(&w[0].a, sizeof(w[0]), 3, 3, msg, sizeof(msg));
	t_is(code, CGR_EMISMATCH, "records at a stride: compared");
	t_ok(strcmp(msg, "scatter #3: rank 0 root 2, rank 1 root 0") == 0,
	     "...\"%s\"", msg);
}

static void test_p2p(void)
{
	struct cgr__coll_desc s = op_desc(CGR__COLL_SEND, 10, CGR_INT32, 0, 1);
	struct cgr__coll_desc r = op_desc(CGR__COLL_RECV, 12, CGR_INT32, 0, 0);
	struct cgr__agree as, ar;
	char ms[256], mr[256];
	int cs, cr;

	memset(&as, 0, sizeof(as));
	memset(&ar, 0, sizeof(ar));
	cgr__agree_op(&as, &s);
	cgr__agree_op(&ar, &r);
	cs = cgr__agree_p2p(&as, &ar, 0, "send with rank 1", ms, sizeof(ms));
	cr = cgr__agree_p2p(&ar, &as, 1, "recv with rank 0", mr, sizeof(mr));
	t_ok(cs == CGR_EMISMATCH && cr == CGR_EMISMATCH,
	     "send 10, receive 12: CGR_EMISMATCH at both ends");
	t_ok(strstr(ms, "rank 0 sends 10 int32, rank 1 receives 12 int32") &&
		 strstr(mr, "rank 0 sends 10 int32, rank 1 receives 12 "
			    "int32"),
	     "...both say who sends and who receives what (%s | %s)", ms, mr);
	r.count = 10;
	cgr__agree_op(&ar, &r);
	t_ok(cgr__agree_p2p(&as, &ar, 0, "send", ms, sizeof(ms)) == 0 &&
		 cgr__agree_p2p(&ar, &as, 1, "recv", mr, sizeof(mr)) == 0,
	     "matching send and receive agree");
	s.poison = CGR_ETASK;
	s.poison_msg = "no data";
	cgr__agree_op(&as, &s);
	cs = cgr__agree_p2p(&as, &ar, 0, "send with rank 1", ms, sizeof(ms));
	cr = cgr__agree_p2p(&ar, &as, 1, "recv with rank 0", mr, sizeof(mr));
	t_ok(cs == CGR_ETASK && cr == CGR_ETASK,
	     "a poisoned send fails both ends with its code");
	t_ok(strcmp(ms, "send with rank 1: no data") == 0 &&
		 strcmp(mr, "recv with rank 0: rank 0 failed before the "
			    "operation (CGR_ETASK): no data") == 0,
	     "...named (%s | %s)", ms, mr);
	/* Both ends poisoned: the sender's code at both ends. */
	r.poison = -EINVAL;
	r.poison_msg = "NULL buffer";
	cgr__agree_op(&ar, &r);
	cs = cgr__agree_p2p(&as, &ar, 0, "send with rank 1", ms, sizeof(ms));
	cr = cgr__agree_p2p(&ar, &as, 1, "recv with rank 0", mr, sizeof(mr));
	t_ok(cs == CGR_ETASK && cr == CGR_ETASK,
	     "both ends poisoned: the sender's code at both ends");
	s.poison = 0;
	cgr__agree_op(&as, &s);
	cs = cgr__agree_p2p(&as, &ar, 0, "send with rank 1", ms, sizeof(ms));
	cr = cgr__agree_p2p(&ar, &as, 1, "recv with rank 0", mr, sizeof(mr));
	t_ok(cs == -EINVAL && cr == -EINVAL &&
		 strstr(ms, "rank 1 failed before the operation (") &&
		 strstr(ms, "NULL buffer") &&
		 strcmp(mr, "recv with rank 0: NULL buffer") == 0,
	     "a poisoned receive fails both ends with its code (%s | %s)", ms,
	     mr);
}

static void test_key(void)
{
	struct cgr__coll_desc a =
	    op_desc(CGR_COLL_ALLREDUCE, 16, CGR_FLOAT32, CGR_SUM, 3);
	struct cgr__coll_desc b = a;
	struct cgr__agree_key ka, kb;

	cgr__agree_key_of(&ka, &a, 0);
	b.root = 1; /* not compared for allreduce */
	cgr__agree_key_of(&kb, &b, 0);
	t_ok(cgr__agree_key_eq(&ka, &kb), "keys: root of an allreduce ignored");
	b.count = 17;
	cgr__agree_key_of(&kb, &b, 0);
	t_ok(!cgr__agree_key_eq(&ka, &kb), "keys: a count differs");
	cgr__agree_key_of(&kb, &a, CGR__AGREE_PATH);
	t_ok(!cgr__agree_key_eq(&ka, &kb), "keys: a path flag differs");
	a.agreed = b.agreed = true;
	cgr__agree_key_of(&ka, &a, 0);
	cgr__agree_key_of(&kb, &b, 0);
	t_ok(cgr__agree_key_eq(&ka, &kb) && cgr__agree_key_eq(&kb, &ka),
	     "keys agreed already: only the flags compare");
	cgr__agree_key_of(&kb, &b, CGR__AGREE_PATH);
	t_ok(!cgr__agree_key_eq(&ka, &kb),
	     "...a rank on the full path still differs");
	b.agreed = false;
	b.count = 16;
	cgr__agree_key_of(&kb, &b, 0);
	t_ok(!cgr__agree_key_eq(&ka, &kb) && !cgr__agree_key_eq(&kb, &ka),
	     "agreed and not agreed differ, both ways");
}

/* ---- inputs -------------------------------------------------------- */

/* Member r's input record: a tensor of dtype (code, bits) and shape, or
 * (ndim < 0) none. */
static void tensor_rec(struct cgr__agree *a, int code, int bits, int ndim,
		       const int64_t *shape)
{
	static char data[8];
	int64_t sh[CGR_MAX_NDIM];
	cgr_value v;

	memset(a, 0, sizeof(*a));
	if (ndim < 0) {
		cgr__agree_value(a, NULL, false);
		return;
	}
	for (int i = 0; i < ndim; i++)
		sh[i] = shape[i];
	v = cgr_value_tensor(data, code, bits, ndim, sh);
	cgr__agree_value(a, &v, true);
}

static void error_rec(struct cgr__agree *a, int code, const char *msg)
{
	cgr_value v;

	memset(&v, 0, sizeof(v));
	memset(a, 0, sizeof(*a));
	v.kind = CGR_VALUE_ERROR;
	v.code = code;
	v.u.error.msg = msg;
	cgr__agree_value(a, &v, true);
}

/* The verdict of collective kind over all[0..n), on every member's own
 * copy; whether all reached the same. */
static bool inputs_verdict(int kind, int n, int root,
			   const struct cgr__agree *all, size_t cap,
			   struct cgr__verdict *v)
{
	struct cgr__agree copy[NR];
	struct cgr__verdict w;
	bool same = true;

	cgr__agree_inputs(kind, n, root, all, sizeof(*all), cap, v);
	for (int r = 1; r < n; r++) {
		memcpy(copy, all, (size_t)n * sizeof(*all));
		cgr__agree_inputs(kind, n, root, copy, sizeof(*copy), cap, &w);
		if (w.err != v->err || w.from != v->from ||
		    strcmp(w.msg, v->msg) != 0 ||
		    (w.err == 0 &&
		     (w.count != v->count || w.out_bytes != v->out_bytes)))
			same = false;
	}
	return same;
}

static void test_inputs_agree(void)
{
	static const int64_t s43[] = {4, 3}, s0[] = {0};
	struct cgr__agree all[NR];
	struct cgr__verdict v;
	bool same;

	for (int r = 0; r < 3; r++)
		tensor_rec(&all[r], kDLFloat, 32, 2, s43);
	same = inputs_verdict(CGR_COLL_ALLREDUCE, 3, 0, all, 1 << 20, &v);
	t_ok(v.err == 0 && same, "three [4,3] float32 allreduce: agreed");
	t_ok(v.count == 12 && v.in_bytes == 48 && v.out_bytes == 48 &&
		 v.out.ndim == 2 && v.out.shape[0] == 4 &&
		 v.out.dtype == CGR_FLOAT32,
	     "...count 12, 48 bytes in and out, output [4,3] float32");
	inputs_verdict(CGR_COLL_ALLGATHER, 3, 0, all, 1 << 20, &v);
	t_ok(v.err == 0 && v.count == 12 && v.out.shape[0] == 12 &&
		 v.out.shape[1] == 3 && v.out_bytes == 144,
	     "allgather: dimension 0 concatenated, [12,3]");
	inputs_verdict(CGR_COLL_REDUCESCATTER, 2, 0, all, 1 << 20, &v);
	t_ok(v.err == 0 && v.count == 6 && v.out.shape[0] == 2 &&
		 v.out_bytes == 24,
	     "reducescatter over 2: dimension 0 split, [2,3], count 6");
	inputs_verdict(CGR_COLL_ALLTOALL, 2, 0, all, 1 << 20, &v);
	t_ok(v.err == 0 && v.count == 6 && v.out.shape[0] == 4,
	     "alltoall over 2: count 6 per peer, output [4,3]");
	inputs_verdict(CGR_COLL_REDUCESCATTER, 3, 0, all, 1 << 20, &v);
	t_ok(v.err == -EINVAL && strstr(v.msg, "does not divide by 3"),
	     "reducescatter of 4 rows over 3: -EINVAL (%s)", v.msg);
	for (int r = 0; r < 3; r++)
		tensor_rec(&all[r], kDLInt, 64, 0, s0);
	inputs_verdict(CGR_COLL_ALLGATHER, 3, 0, all, 1 << 20, &v);
	t_ok(v.err == 0 && v.out.ndim == 1 && v.out.shape[0] == 3,
	     "allgather of scalars: [3]");
	for (int r = 0; r < 3; r++)
		tensor_rec(&all[r], kDLFloat, 32, 2, s43);
	inputs_verdict(CGR_COLL_ALLREDUCE, 3, 0, all, 40, &v);
	t_ok(v.err == CGR_ETOOBIG && strstr(v.msg, "48 bytes") &&
		 strstr(v.msg, "40-byte"),
	     "an output larger than the buffers: CGR_ETOOBIG (%s)", v.msg);
	/* Broadcast: only the root has an input. */
	tensor_rec(&all[0], 0, 0, -1, NULL);
	tensor_rec(&all[1], kDLFloat, 32, 2, s43);
	tensor_rec(&all[2], 0, 0, -1, NULL);
	same = inputs_verdict(CGR_COLL_BROADCAST, 3, 1, all, 1 << 20, &v);
	t_ok(v.err == 0 && same && v.count == 12,
	     "broadcast: only the root's input counts");
	inputs_verdict(CGR_COLL_BROADCAST, 3, 0, all, 1 << 20, &v);
	t_ok(v.err == CGR_EBADVALUE && strstr(v.msg, "rank 0 has no tensor"),
	     "broadcast whose root has none: CGR_EBADVALUE (%s)", v.msg);
}

static void test_inputs_mismatch(void)
{
	static const int64_t s73[] = {7, 3}, s63[] = {6, 3};
	struct cgr__agree all[NR];
	struct cgr__verdict v;
	bool same;

	tensor_rec(&all[0], kDLInt, 64, 2, s73);
	tensor_rec(&all[1], kDLInt, 64, 2, s73);
	tensor_rec(&all[2], kDLInt, 64, 2, s63);
	same = inputs_verdict(CGR_COLL_ALLREDUCE, 3, 0, all, 1 << 20, &v);
	t_is(v.err, CGR_EMISMATCH, "a shape differs: CGR_EMISMATCH");
	t_ok(strcmp(v.msg, "shape mismatch: rank 0 has [7,3] int64, rank 2 "
			   "has [6,3] int64") == 0 &&
		 v.from == -1 && same,
	     "...naming ranks and shapes alike everywhere (%s)", v.msg);
	tensor_rec(&all[2], kDLFloat, 64, 2, s73);
	inputs_verdict(CGR_COLL_ALLREDUCE, 3, 0, all, 1 << 20, &v);
	t_ok(v.err == CGR_EMISMATCH &&
		 strcmp(v.msg, "dtype mismatch: rank 0 has [7,3] int64, "
			       "rank 2 has [7,3] float64") == 0,
	     "a dtype differs: \"%s\"", v.msg);
	/* The reference is the first member with an input. */
	tensor_rec(&all[0], 0, 0, -1, NULL);
	tensor_rec(&all[2], 0, 0, -1, NULL);
	inputs_verdict(CGR_COLL_ALLREDUCE, 3, 0, all, 1 << 20, &v);
	t_ok(v.err == CGR_EBADVALUE && strstr(v.msg, "rank 0 has no tensor"),
	     "a member without an input in an allreduce: CGR_EBADVALUE");
}

static void test_inputs_error(void)
{
	static const int64_t s43[] = {4, 3}, s53[] = {5, 3};
	struct cgr__agree all[NR];
	struct cgr__verdict v;
	bool same;

	tensor_rec(&all[0], kDLFloat, 32, 2, s43);
	error_rec(&all[1], -EIO, "task t refuses");
	error_rec(&all[2], CGR_ETASK, "another");
	tensor_rec(&all[3], kDLFloat, 32, 2, s53);
	same = inputs_verdict(CGR_COLL_ALLREDUCE, 4, 0, all, 1 << 20, &v);
	t_ok(v.err == -EIO && v.from == 1 && same,
	     "error values at ranks 1 and 2: rank 1's code, from rank 1, "
	     "on every member (even with a shape mismatch)");
	t_ok(strcmp(v.msg, "rank 1 contributed an error value: task t "
			   "refuses") == 0,
	     "...\"%s\"", v.msg);
	error_rec(&all[1], 0, "");
	inputs_verdict(CGR_COLL_ALLREDUCE, 4, 0, all, 1 << 20, &v);
	t_ok(v.err == CGR_ETASK && v.from == 1,
	     "an error value without a code: CGR_ETASK");
	/* A non-root's error value reaches a broadcast too. */
	tensor_rec(&all[0], kDLFloat, 32, 2, s43);
	error_rec(&all[1], -EIO, "late");
	tensor_rec(&all[2], 0, 0, -1, NULL);
	inputs_verdict(CGR_COLL_BROADCAST, 3, 0, all, 1 << 20, &v);
	t_ok(v.err == -EIO && v.from == 1,
	     "broadcast: a reader's error value reaches every member");
}

static void test_static(void)
{
	static const int64_t s73[] = {7, 3}, s83[] = {8, 3}, s37[] = {3, 7};
	struct cgr__agree agreed[NR], now[NR];
	struct cgr__verdict v;

	for (int r = 0; r < 3; r++) {
		tensor_rec(&agreed[r], kDLInt, 64, 2, s73);
		tensor_rec(&now[r], kDLInt, 64, 2, s73);
	}
	t_ok(!cgr__agree_static(CGR_COLL_ALLREDUCE, 3, 0, agreed, now, &v) &&
		 v.err == 0,
	     "static shapes unchanged: nothing to say");
	tensor_rec(&now[2], kDLInt, 64, 2, s83);
	tensor_rec(&now[1], kDLInt, 64, 2, s37);
	t_ok(cgr__agree_static(CGR_COLL_ALLREDUCE, 3, 0, agreed, now, &v) &&
		 v.err == CGR_EMISMATCH && v.from == -1,
	     "ranks 1 and 2 changed: CGR_EMISMATCH");
	t_ok(strcmp(v.msg, "rank 1 changed its static shape from [7,3] int64 "
			   "to [3,7] int64") == 0,
	     "...the lowest rank named, same count or not (%s)", v.msg);
	error_rec(&now[2], -EIO, "boom");
	tensor_rec(&now[1], kDLInt, 64, 2, s73);
	t_ok(cgr__agree_static(CGR_COLL_ALLREDUCE, 3, 0, agreed, now, &v) &&
		 v.err == -EIO && v.from == 2 &&
		 strcmp(v.msg, "rank 2 contributed an error value: boom") == 0,
	     "an error value under static shapes: its code, from its rank");
	t_ok(!cgr__agree_static(CGR_COLL_BROADCAST, 3, 0, agreed, now, &v),
	     "broadcast: only the root's input is looked at");
	t_ok(cgr__agree_changed(0, &agreed[0], &now[2], &v) && v.err == -EIO &&
		 v.from == 0,
	     "one member's own change: the same rules");
	tensor_rec(&now[2], kDLInt, 64, 2, s73);
	t_ok(!cgr__agree_changed(2, &agreed[2], &now[2], &v),
	     "...and its own unchanged input: none");
}

int main(int argc, char **argv)
{
	t_init(argc, argv, 60);
	test_ops_agree();
	test_ops_mismatch();
	test_ops_poison();
	test_ops_agreed();
	test_ops_stride();
	test_p2p();
	test_key();
	test_inputs_agree();
	test_inputs_mismatch();
	test_inputs_error();
	test_static();
	return t_done();
}
