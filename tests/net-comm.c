/*
 * tests/net-comm.c: communicators whose members are on several hosts,
 * called directly (the "comm" mode of tests/net-graph, which
 * tests/net-graph.sh runs on three network namespaces).
 *
 * The driver makes a communicator over workers of two or three hosts
 * (four layouts, 1 and 2 members per host, one interleaved, one on the
 * serving hosts only) and a graph with one task per member (netcomm_task,
 * exported: it runs on its worker's host).  Each execution's argument
 * names an operation; every member's task finds its share of the
 * communicator by id (cgr_task_comm), makes its input from the argument
 * and its rank, calls the operation, and outputs the call's result and
 * its whole receive buffer.  The reference: the same operation on a
 * communicator of this process (no members, one thread per rank), with
 * the same inputs: every member's output must be the same, byte for byte
 * (receive buffers start filled with 0xAB, so what an operation must not
 * touch is checked too).  Every collective, every dtype, counts 0, 1, 7
 * and 3000 (and 25000 of 8 bytes, whose messages leave straight from
 * the ranks' buffers), a root on each rank in turn, reductions under every op; sends
 * and receives around a ring; one member with an invalid argument (every
 * rank -EINVAL) or a different count (CGR_EMISMATCH); an allreduce of
 * int32 against a direct sum; groups (an allreduce and sends and
 * receives among all ranks, itself too); the driver's host's ranks on
 * streams (two operations there, then one on the task's thread, in call
 * order); an abort by one member
 * (every rank -ECANCELED); NCCL across hosts and a call for a rank on
 * another host refused; the communicator destroyed while half its
 * ranks wait in an allreduce (they return); what an allreduce sends between hosts (each
 * rank's input once per other host; split and hierarchical, 4/3 of an
 * input from a host of two ranks).  A member whose operation fails with
 * CGR_EHOSTLOST outputs an error value saying so (tests/net-graph's
 * losecomm: netcomm_allreduce).  Prints "comm OK layouts L executions E ..."
 * with the median of 8-byte allreduces across the hosts.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cgr.h>

#include "t_netcoll.h"

#define SEC 1000000000ll
#define MAXM 6
#define BIGC 3000
#define SPLITC 8300 /* above the split */
/* Messages of 64 KiB and more leave straight from a rank's buffers: a
 * count whose blocks are that large too (3 blocks of 8-byte elements). */
#define ZCC 25000
/* Elements (int64) of a block that goes after the records (LATE_BYTES in
 * src/remote/rcomm.c, 128 KiB), with room for one more in OUTMAX. */
#define LATEC 17000
/* A hierarchical allreduce of int64 or float64 with several chunks in a
 * leader's block (hier_cases); the count whose operation fails half
 * through under CGR_TEST_HIER_FAIL (float32: 2 chunks of 256 KiB and
 * more in each of two leaders' blocks). */
#define HIERC 149999
#define HFAILC 299999
/* A rough bfloat16 allreduce (rough_sum): several chunks per block. */
#define BF16C 599999
/* An output: the call's result (int32) in a 16-byte head, so that the
 * receive buffer after it is aligned for every dtype. */
#define HEAD 16
#define OUTMAX (HEAD + (size_t)MAXM * ZCC * 8)
_Static_assert(HEAD + SPLITC * 8 <= OUTMAX, "room for split allreduces");
_Static_assert(HEAD + HIERC * 8 <= OUTMAX, "room for hierarchical ones");
_Static_assert(HEAD + (HFAILC + 1) * 4 <= OUTMAX, "room for HFAILC");
_Static_assert(HEAD + BF16C * 2 <= OUTMAX, "room for BF16C");
_Static_assert(HEAD + (MAXM + 1) * 1000 * 8 <= OUTMAX, "room for groups");

enum {
	OP_P2P = 100,
	OP_GROUP = 101,
	OP_ABORT = 102,
	OP_LONELY = 103,
	OP_NONE = 104,
	OP_STREAM = 105
};

/* Where the operations' buffers are (netcomm_nccl_run: CUDA's model's
 * device memory, on every host), else host memory. */
const struct netcomm_mem *netcomm_mem;

/* The driver's process: a stream for each rank whose worker is here
 * (OP_STREAM); NULL elsewhere and for the reference. */
static cgr_stream *streams[MAXM];

/* The execution's argument: what every member does. */
struct cmd {
	uint64_t id; /* the communicator */
	uint32_t seed, count;
	int32_t kind; /* cgr_coll_kind, or OP_* */
	uint8_t dtype, op, root;
	uint8_t fault; /* 0, 1: `who` passes NULL, 2: `who` count + 1 */
	uint8_t who;
	uint8_t inplace; /* allreduce: send == recv on every rank */
	uint8_t rough;	 /* bfloat16 inputs in [1, 2) that round (bf16in) */
};

/* Element e of rank r's input: 1..5 (1..2 for products), so that every
 * sum and product is exact in every dtype. */
static unsigned elem(const struct cmd *c, int r, size_t e)
{
	unsigned m = c->op == CGR_PROD || c->dtype == CGR_BFLOAT16 ? 2 : 5;

	return (unsigned)((c->seed + 7u * (unsigned)r + 3u * e) % m) + 1u;
}

/* A rough command's element e of rank r: a bfloat16 in [1, 2), any of
 * its 128 values (two of them sum exactly in float, not in bfloat16). */
static uint16_t bf16in(const struct cmd *c, int r, size_t e)
{
	uint32_t x = c->seed * 2654435761u ^ (uint32_t)r * 40503u ^
		     (uint32_t)e * 2246822519u;

	x ^= x >> 15;
	x *= 2246822519u;
	x ^= x >> 13;
	return (uint16_t)(0x3f80 | (x & 0x7f));
}

static void put(unsigned char *p, cgr_dtype dt, size_t e, unsigned v)
{
	uint16_t h;
	float f = (float)v;
	double d = v;
	uint32_t u;

	switch (dt) {
	case CGR_INT8: case CGR_UINT8: p[e] = (unsigned char)v; return;
	case CGR_INT16: case CGR_UINT16: h = (uint16_t)v;
		memcpy(p + 2 * e, &h, 2); return;
	case CGR_INT32: case CGR_UINT32: u = v;
		memcpy(p + 4 * e, &u, 4); return;
	case CGR_INT64: case CGR_UINT64: {
		uint64_t x = v;
		memcpy(p + 8 * e, &x, 8);
		return;
	}
	case CGR_FLOAT16: {
		int ex = v >= 4 ? 2 : v >= 2 ? 1 : 0;
		h = (uint16_t)(((15 + ex) << 10) | (((v << 10) >> ex) & 0x3ff));
		memcpy(p + 2 * e, &h, 2);
		return;
	}
	case CGR_BFLOAT16:
		memcpy(&u, &f, 4);
		h = (uint16_t)(u >> 16);
		memcpy(p + 2 * e, &h, 2);
		return;
	case CGR_FLOAT32: memcpy(p + 4 * e, &f, 4); return;
	case CGR_FLOAT64: memcpy(p + 8 * e, &d, 8); return;
	default: return;
	}
}

/* Elements of the send and receive buffers of rank r (n ranks). */
static void sizes(const struct cmd *c, int n, int r, size_t *ns, size_t *nr)
{
	size_t k = c->count, all = k * (size_t)n;

	*ns = *nr = k;
	switch (c->kind) {
	case CGR_COLL_ALLGATHER: *nr = all; break;
	case CGR_COLL_REDUCESCATTER: *ns = all; break;
	case CGR_COLL_GATHER: *nr = r == c->root ? all : 0; break;
	case CGR_COLL_SCATTER: *ns = r == c->root ? all : 0; break;
	case CGR_COLL_ALLTOALL: *ns = *nr = all; break;
	case CGR_COLL_REDUCE: *nr = r == c->root ? k : 0; break;
	case OP_GROUP: *nr = k + all; break;
	case OP_STREAM: *nr = 3 * k; break;
	default: break;
	}
}

/* Rank r's operation on c (n ranks): out gets the result (int32) and the
 * receive buffer; its length. */
static size_t run_op(cgr_comm *cm, int n, int r, const struct cmd *c,
		     unsigned char *out, bool ref)
{
	cgr_dtype dt = (cgr_dtype)c->dtype;
	size_t es = cgr_dtype_size(dt), ns, nr;
	unsigned char *s, *rb;
	int32_t ret;
	int cnt = (int)c->count;

	sizes(c, n, r, &ns, &nr);
	/* Room for a count one larger (fault 2: the operation may send
	 * that before the ranks find they disagree). */
	s = calloc(ns + (size_t)n, es);
	rb = out + HEAD;
	memset(rb, 0xAB, nr * es);
	for (size_t e = 0; e < ns; e++)
		if (c->rough)
			memcpy(s + 2 * e, &(uint16_t){ bf16in(c, r, e) }, 2);
		else
			put(s, dt, e, elem(c, r, e));
	if (c->fault == 2 && r == c->who)
		cnt++;
	if (c->inplace) {
		memcpy(rb, s, nr * es);
		free(s);
		s = rb;
	}
	/* On a device: copies there (rb's 0xAB too), read back at the end. */
	const struct netcomm_mem *dm = ref ? NULL : netcomm_mem;
	/* (Room for a count one larger, as in out: fault 2's rank receives
	 * that from itself in a group.) */
	unsigned char *db = dm ? dm->alloc((nr + (size_t)n) * es + 1) : rb;
	unsigned char *ds = !dm ? s : c->inplace ? db :
				  dm->alloc((ns + (size_t)n) * es + 1);
	if (dm != NULL) {
		dm->copy(db, rb, nr * es);
		if (ds != db)
			dm->copy(ds, s, (ns + (size_t)n) * es);
	}
	const void *sp = c->fault == 1 && r == c->who &&
				 (c->kind == CGR_COLL_REDUCE ||
				  c->kind == CGR_COLL_GATHER) ? NULL : ds;
	void *rp = c->fault == 1 && r == c->who && sp != NULL ? NULL : db;
	switch (c->kind) {
	case CGR_COLL_ALLREDUCE:
		ret = cgr_allreduce(cm, r, sp, rp, cnt, dt, c->op, NULL, NULL);
		break;
	case CGR_COLL_ALLGATHER:
		ret = cgr_allgather(cm, r, sp, rp, cnt, dt, NULL, NULL);
		break;
	case CGR_COLL_REDUCESCATTER:
		ret = cgr_reducescatter(cm, r, sp, rp, cnt, dt, c->op, NULL,
					NULL);
		break;
	case CGR_COLL_REDUCE:
		ret = cgr_reduce(cm, r, sp, rp, cnt, dt, c->op, c->root, NULL,
				 NULL);
		break;
	case CGR_COLL_BROADCAST:
		ret = cgr_broadcast(cm, r, sp, rp, cnt, dt, c->root, NULL, NULL);
		break;
	case CGR_COLL_GATHER:
		ret = cgr_gather(cm, r, sp, rp, cnt, dt, c->root, NULL, NULL);
		break;
	case CGR_COLL_SCATTER:
		ret = cgr_scatter(cm, r, sp, rp, cnt, dt, c->root, NULL, NULL);
		break;
	case CGR_COLL_ALLTOALL:
		ret = cgr_alltoall(cm, r, sp, rp, cnt, dt, NULL, NULL);
		break;
	case OP_P2P: {
		/* A ring: even ranks send first, odd ones receive first. */
		int to = (r + 1) % n, from = (r + n - 1) % n, a, b;
		if (r % 2 == 0) {
			a = cgr_send(cm, r, sp, cnt, dt, to, NULL, NULL);
			b = cgr_recv(cm, r, rp, cnt, dt, from, NULL, NULL);
		} else {
			b = cgr_recv(cm, r, rp, cnt, dt, from, NULL, NULL);
			a = cgr_send(cm, r, sp, cnt, dt, to, NULL, NULL);
		}
		ret = a != 0 ? a : b;
		break;
	}
	case OP_GROUP: {
		/* An allreduce, then a send to and a receive from every rank
		 * (itself too), fused. */
		int a = cgr_group_start(cm, r), b = 0;
		b |= cgr_allreduce(cm, r, sp, rp, cnt, dt, c->op, NULL, NULL);
		for (int q = 0; q < n; q++) {
			int to = (r + q) % n, from = (r + n - q) % n;
			b |= cgr_send(cm, r, sp, cnt, dt, to, NULL, NULL);
			b |= cgr_recv(cm, r, db + es * c->count * (size_t)(1 + from),
				      cnt, dt, from, NULL, NULL);
		}
		ret = cgr_group_end(cm, r, NULL);
		if (a != 0 || b != 0)
			ret = 77; /* no call in a group fails by itself */
		break;
	}
	case OP_LONELY:
		/* Even ranks only: they wait until the communicator goes. */
		ret = r % 2 ? 0 :
			      cgr_allreduce(cm, r, sp, rp, cnt, dt, c->op, NULL,
					    NULL);
		break;
	case OP_NONE:
		ret = 0;
		break;
	case OP_STREAM: {
		/* An allreduce and a broadcast on the rank's stream (where
		 * it has one), then one on its thread, which must wait for
		 * them (call order). */
		cgr_stream *st = ref ? NULL : streams[r];
		cgr_future *f1 = NULL, *f2 = NULL;
		char *rc = (char *)db;
		int a = cgr_allreduce(cm, r, sp, rp, cnt, dt, c->op, st, &f1);
		int b = cgr_broadcast(cm, r, sp, rc + es * c->count, cnt, dt,
				      c->root, st, &f2);
		int d = cgr_allreduce(cm, r, sp, rc + 2 * es * c->count, cnt,
				      dt, c->op, NULL, NULL);
		int fa = f1 ? cgr_future_wait(f1, 30 * SEC) : a;
		int fb = f2 ? cgr_future_wait(f2, 30 * SEC) : b;
		cgr_future_release(f1);
		cgr_future_release(f2);
		ret = a ? a : b ? b : fa ? fa : fb ? fb : d;
		break;
	}
	case OP_ABORT:
		if (r == c->who)
			cgr_comm_abort(cm);
		ret = cgr_allreduce(cm, r, sp, rp, cnt, dt, c->op, NULL, NULL);
		break;
	default:
		ret = -EINVAL;
	}
	if (dm != NULL) {
		dm->copy(rb, db, nr * es);
		if (ds != db)
			dm->free(ds);
		dm->free(db);
	}
	if (s != rb)
		free(s);
	memset(out, 0, HEAD);
	memcpy(out, &ret, 4);
	return HEAD + nr * es;
}

/* The task of member r (its arg): the operation the argument names. */
int netcomm_task(cgr_task_ctx *tc, void *state, const cgr_value *in,
		 size_t nin, cgr_value *out, size_t nout)
{
	int me = *(const unsigned char *)cgr_task_arg(tc), rank = -1;
	unsigned char *o;
	struct cmd c;
	cgr_comm *cm;
	int ret;

	(void)state, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_BYTES || in[0].u.bytes.len != sizeof(c))
		return -EINVAL;
	memcpy(&c, in[0].u.bytes.data, sizeof(c));
	if ((ret = cgr_task_comm(tc, c.id, &cm, &rank)) != 0 ||
	    rank != me) {
		cgr_task_set_error(tc, ret ? ret : -EPROTO,
				   "cgr_task_comm: %s, rank %d (want %d)",
				   cgr_strerror(ret), rank, me);
		return ret ? ret : -EPROTO;
	}
	if ((o = cgr_task_output_buffer(tc, 0, OUTMAX)) == NULL)
		return -ENOMEM;
	out[0] = cgr_value_bytes(o, run_op(cm, cgr_comm_size(cm), me, &c, o,
					   false));
	memcpy(&ret, o, 4);
	if (ret == CGR_EHOSTLOST) {
		/* A host went: an error value saying which. */
		cgr_task_set_error(tc, ret, "%s", cgr_comm_errmsg(cm, me));
		return ret;
	}
	return 0;
}

/* ---- the driver ------------------------------------------------------ */

struct refjob {
	pthread_t t;
	cgr_comm *cm;
	int n, r;
	const struct cmd *c;
	unsigned char *out;
	size_t len;
};

static void *ref_main(void *arg)
{
	struct refjob *rj = arg;

	rj->len = run_op(rj->cm, rj->n, rj->r, rj->c, rj->out, true);
	return NULL;
}

struct tally {
	unsigned execs, outs, bad, direct;
	uint64_t sent, sent_split, sent_chain; /* crossing() */
	uint64_t direct_bytes[3];	       /* direct() */
	unsigned waited; /* destroyed(): ranks that were in the call */
	unsigned hfail;	 /* hier_cases(): injected failures */
	size_t rounded_twice; /* rough_sum() */
	uint64_t hier_direct; /* crossing() */
	uint64_t lent_bytes;  /* lent() */
	char msg[200];
};

/* One graph: a task per member, outputs in rank order. */
static int build(cgr_ctx *ctx, cgr_worker *const *w, int m,
		 cgr_compiled **out)
{
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_node *arg, *o[MAXM];
	cgr_graph *g;
	int ret = cgr_graph_create(ctx, &g);

	if (ret == 0)
		ret = cgr_graph_input(g, 0, &arg);
	for (int r = 0; r < m && ret == 0; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		unsigned char ra = (unsigned char)r;
		char name[16];
		snprintf(name, sizeof(name), "op%d", r);
		d.name = name;
		d.fn = netcomm_task;
		d.arg_data = &ra;
		d.arg_len = 1;
		d.max_out_bytes = OUTMAX;
		ret = cgr_graph_task(g, w[r], &d, &arg, 1, &o[r], 1);
	}
	if (ret == 0)
		ret = cgr_graph_output(g, o, (size_t)m);
	cp.max_value_bytes = OUTMAX;
	cp.get_timeout_ns = 30 * SEC;
	if (ret == 0)
		ret = cgr_graph_compile(g, &cp, out);
	if (ret != 0)
		fprintf(stderr, "comm build: %s: %s\n", cgr_strerror(ret),
			cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return ret;
}

/* Whether out (rank r's, len bytes) is an int32 allreduce sum of every
 * rank's input. */
static bool direct_sum(const struct cmd *c, int n, const unsigned char *o,
		       size_t len)
{
	int32_t got;

	if (len != HEAD + 4 * (size_t)c->count || memcmp(o, "\0\0\0\0", 4))
		return false;
	for (size_t e = 0; e < c->count; e++) {
		int32_t want = 0;
		for (int r = 0; r < n; r++)
			want += (int32_t)elem(c, r, e);
		memcpy(&got, o + HEAD + 4 * e, 4);
		if (got != want)
			return false;
	}
	return true;
}

/* Executes command c over the graph: its n outputs in o (*r to release),
 * or false (counted bad). */
static bool exec_cmd(cgr_compiled *g, const struct cmd *c, int n,
		     cgr_value *o, cgr_ref *r, struct tally *t)
{
	cgr_value av = cgr_value_bytes(c, sizeof(*c));

	t->execs++;
	if (cgr_execute(g, &av, 1, r) != 0 ||
	    cgr_ref_get(g, *r, 30 * SEC, o, (size_t)n) != 0) {
		snprintf(t->msg, sizeof(t->msg), "execute failed");
		t->bad++;
		return false;
	}
	return true;
}

/* One execution of command c over the graph, against the reference
 * (ref: a communicator of n ranks here; NULL: expect code `want` on
 * every rank). */
static void one(cgr_compiled *g, cgr_comm *ref, int n, const struct cmd *c,
		int want, struct tally *t)
{
	static _Alignas(16) unsigned char rbuf[MAXM][OUTMAX];
	struct refjob rj[MAXM];
	cgr_value o[MAXM];
	cgr_ref r;

	if (!exec_cmd(g, c, n, o, &r, t))
		return;
	for (int q = 0; ref != NULL && q < n; q++) {
		rj[q] = (struct refjob){ .cm = ref, .n = n, .r = q, .c = c,
					 .out = rbuf[q] };
		pthread_create(&rj[q].t, NULL, ref_main, &rj[q]);
	}
	for (int q = 0; ref != NULL && q < n; q++)
		pthread_join(rj[q].t, NULL);
	for (int q = 0; q < n; q++, t->outs++) {
		int32_t code = 1;
		bool ok = o[q].kind == CGR_VALUE_BYTES && o[q].u.bytes.len >= HEAD;
		if (ok)
			memcpy(&code, o[q].u.bytes.data, 4);
		if (ok && ref != NULL)
			ok = o[q].u.bytes.len == rj[q].len &&
			     memcmp(o[q].u.bytes.data, rbuf[q], rj[q].len) == 0;
		else if (ok)
			ok = code == want;
		if (ok && want == 0 && c->kind == CGR_COLL_ALLREDUCE &&
		    c->op == CGR_SUM &&
		    c->dtype == CGR_INT32 && c->fault == 0) {
			t->direct++;
			ok = direct_sum(c, n, o[q].u.bytes.data,
					o[q].u.bytes.len);
		}
		if (!ok && t->bad++ < 6)
			fprintf(stderr, "comm n %d kind %d dtype %d op %d root "
					"%d count %u fault %d: rank %d differs "
					"(code %d, one host's %d, %s)\n",
				n, c->kind, c->dtype, c->op, c->root, c->count,
				c->fault, q, code,
				ref != NULL ? *(int32_t *)(void *)rbuf[q] : want,
				o[q].kind == CGR_VALUE_ERROR ? o[q].u.error.msg
							     : "");
	}
	cgr_ref_release(g, r);
}

/* One execution of c over the graph against the reference, but a
 * reduction of int16 or uint16 on NCCL (nccl), which every rank refuses
 * (-EINVAL): NCCL cannot reduce them. */
static void one_of(cgr_compiled *g, cgr_comm *ref, int n, const struct cmd *c,
		   bool nccl, struct tally *t)
{
	bool red = c->kind == CGR_COLL_ALLREDUCE ||
		   c->kind == CGR_COLL_REDUCE ||
		   c->kind == CGR_COLL_REDUCESCATTER;

	if (nccl && red && c->fault == 0 &&
	    (c->dtype == CGR_INT16 || c->dtype == CGR_UINT16))
		one(g, NULL, n, c, -EINVAL, t);
	else
		one(g, ref, n, c, 0, t);
}

/* Every operation over one layout's communicator (nccl: an NCCL one, its
 * ranks' buffers in device memory; no streams of the simulated device). */
static void cases(cgr_compiled *g, cgr_comm *cm, cgr_comm *ref, int n,
		  bool nccl, struct tally *t)
{
	static const uint32_t counts[] = { 0, 1, 7, BIGC };
	struct cmd c = { .id = cgr_comm_id(cm) };

	for (int k = CGR_COLL_ALLREDUCE; k <= CGR_COLL_ALLTOALL + 1; k++)
		for (int dt = 0; dt < CGR_DTYPE_COUNT; dt++)
			for (int ci = 0; ci < 4; ci++) {
				c.kind = k > CGR_COLL_ALLTOALL ? OP_P2P : k;
				c.dtype = (uint8_t)dt;
				c.count = counts[ci];
				c.op = (uint8_t)((dt + ci) % CGR_REDOP_COUNT);
				c.root = (uint8_t)(c.seed % (unsigned)n);
				c.seed++;
				c.fault = 0;
				if (counts[ci] == BIGC && dt % 3 != 2)
					continue; /* large: some dtypes */
				one_of(g, ref, n, &c, nccl, t);
			}
	/* One member's invalid argument, and its different count. */
	for (int k = CGR_COLL_ALLREDUCE; k <= CGR_COLL_ALLTOALL; k++)
		for (uint8_t f = 1; f <= 2; f++) {
			c.kind = k;
			c.dtype = CGR_FLOAT32;
			c.count = 5;
			c.op = CGR_SUM;
			c.fault = f;
			c.who = (uint8_t)(c.seed++ % (unsigned)n);
			c.root = (uint8_t)((c.who + 1) % n);
			one_of(g, ref, n, &c, nccl, t);
		}
	/* The same where the data goes only after the records (allgather,
	 * gather, scatter, alltoall with blocks of 128 KiB or more): the
	 * ranks disagree before any of it moves. */
	for (int k = CGR_COLL_ALLGATHER; k <= CGR_COLL_ALLTOALL; k++)
		for (uint8_t f = 1; f <= 2; f++) {
			if (k != CGR_COLL_ALLGATHER && k != CGR_COLL_GATHER &&
			    k != CGR_COLL_SCATTER && k != CGR_COLL_ALLTOALL)
				continue;
			c.kind = k;
			c.dtype = CGR_INT64;
			c.count = LATEC;
			c.op = CGR_SUM;
			c.fault = f;
			c.who = (uint8_t)(c.seed++ % (unsigned)n);
			c.root = (uint8_t)((c.who + 1) % n);
			one_of(g, ref, n, &c, nccl, t);
		}
	c.fault = 0;
	/* Allreduces and broadcasts above the size that splits them (16 KiB:
	 * each rank reduces, or takes from the root, one block, then every
	 * rank gathers them), counts that do not divide among the ranks, in
	 * place and not. */
	for (int dt = 0; dt < 2 * CGR_DTYPE_COUNT; dt++)
		for (uint8_t ip = 0; ip < 2; ip++) {
			c.kind = dt < CGR_DTYPE_COUNT ? CGR_COLL_ALLREDUCE
						      : CGR_COLL_BROADCAST;
			c.root = (uint8_t)(c.seed % (unsigned)n);
			c.dtype = (uint8_t)(dt % CGR_DTYPE_COUNT);
			c.count = SPLITC - 100 + (uint32_t)dt % CGR_DTYPE_COUNT;
			c.op = (uint8_t)((dt + ip) % CGR_REDOP_COUNT);
			c.fault = 0;
			c.inplace = ip;
			c.seed++;
			one_of(g, ref, n, &c, nccl, t);
		}
	/* Data of 64 KiB and more to another host leaves straight from the
	 * rank's buffers, the operation waiting until UCX is done with
	 * them: every kind with such messages (split blocks too), in place
	 * and not. */
	for (int k = CGR_COLL_ALLREDUCE; k <= CGR_COLL_ALLTOALL + 1; k++)
		for (uint8_t ip = 0; ip < 2; ip++) {
			c.kind = k > CGR_COLL_ALLTOALL ? OP_P2P : k;
			c.dtype = ip ? CGR_FLOAT64 : CGR_INT64;
			c.count = ZCC;
			c.op = ip ? CGR_MAX : CGR_SUM;
			c.root = (uint8_t)(c.seed % (unsigned)n);
			c.inplace = ip && (k == CGR_COLL_ALLREDUCE ||
					   k == CGR_COLL_BROADCAST);
			c.seed++;
			one_of(g, ref, n, &c, nccl, t);
		}
	c.inplace = 0;
	/* Groups: an allreduce and sends and receives among all ranks;
	 * one rank's different count. */
	for (int ci = 0; ci < 4; ci++)
		for (uint8_t f = 0; f <= 2; f += 2) {
			c.kind = OP_GROUP;
			c.dtype = ci % 2 ? CGR_FLOAT64 : CGR_INT32;
			c.count = counts[ci] == BIGC ? 1000 : counts[ci];
			c.op = CGR_SUM;
			c.inplace = 0;
			c.fault = f;
			c.who = (uint8_t)(c.seed++ % (unsigned)n);
			if (f == 0 || c.count == 7)
				one_of(g, ref, n, &c, nccl, t);
		}
	c.fault = 0;
	/* Ranks here on streams (the others on their threads). */
	for (int ci = 0; ci < 4 && !nccl; ci++)
		for (uint8_t f = 0; f <= 1; f++) {
			c.kind = OP_STREAM;
			c.dtype = CGR_FLOAT32;
			c.count = ci == 3 ? 5000 : counts[ci];
			c.op = CGR_SUM;
			c.root = (uint8_t)(c.seed % (unsigned)n);
			c.fault = f;
			c.who = (uint8_t)(c.seed++ % (unsigned)n);
			if (f == 0 || c.count == 7)
				one_of(g, ref, n, &c, nccl, t);
		}
	c.fault = 0;
}

/* Hierarchical allreduces (a host with two members: hier) of HIERC
 * elements, several chunks per leader's block at the default chunk size
 * (256 KiB to 1 MiB: src/remote/rcomm.c), the last one shorter, in place
 * and not, integers and floating point (its fold order: bit-identical to
 * one host's).  With CGR_TEST_HIER_FAIL=HFAILC (tests/net-graph.sh sets
 * it in builds with fault injection) the last host's leader fails its
 * fold of its own second chunk with -ENOMEM, half through the
 * operation: every rank's call returns -ENOMEM, none waits for a chunk
 * that does not come, none is left behind (the next operation is
 * right); over one member per host it is not hierarchical and succeeds. */
static void hier_cases(cgr_compiled *g, cgr_comm *cm, cgr_comm *ref, int n,
		       bool hier, struct tally *t)
{
	struct cmd c = { .id = cgr_comm_id(cm), .kind = CGR_COLL_ALLREDUCE,
			 .count = HIERC, .seed = 5 };
	const char *fail = getenv("CGR_TEST_HIER_FAIL");

	for (uint8_t ip = 0; ip < 2; ip++)
		for (int f = 0; f < 2; f++) {
			c.dtype = f ? CGR_FLOAT64 : CGR_INT64;
			c.op = f ? (ip ? CGR_AVG : CGR_SUM) : CGR_MAX;
			c.inplace = ip;
			c.seed++;
			one(g, ref, n, &c, 0, t);
		}
	if (fail == NULL || strtoul(fail, NULL, 10) != HFAILC)
		return;
	c.dtype = CGR_FLOAT32;
	c.op = CGR_SUM;
	c.count = HFAILC;
	c.inplace = 0;
	one(g, hier ? NULL : ref, n, &c, hier ? -ENOMEM : 0, t);
	c.dtype = CGR_INT32;
	c.count = HFAILC + 1;
	one(g, ref, n, &c, 0, t);
	t->hfail += hier;
}

static float bf2f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* float to bfloat16, to nearest even (finite values). */
static uint16_t f2bf(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* A bfloat16 sum allreduce of BF16C rough elements (bf16in) over the
 * layout (host[r]: member r's host): each element as cgr.h documents it,
 * each host's members summed in float in rank order and rounded to
 * bfloat16 where hierarchical (hier), the hosts' in the order of their
 * lowest ranks, rounded once more (else all of them in rank order,
 * rounded once); every member's output equal to that, and (hier) at
 * least one element that rounding once would give otherwise. */
static void rough_sum(cgr_compiled *g, cgr_comm *cm, int n, const int *host,
		      bool hier, struct tally *t)
{
	struct cmd c = { .id = cgr_comm_id(cm), .kind = CGR_COLL_ALLREDUCE,
			 .count = BF16C, .dtype = CGR_BFLOAT16, .op = CGR_SUM,
			 .seed = 91, .rough = 1 };
	cgr_value o[MAXM];
	size_t differ = 0, wrong = 0;
	cgr_ref r;

	if (!exec_cmd(g, &c, n, o, &r, t))
		return;
	for (size_t e = 0; e < BF16C; e++) {
		float part[3] = { 0, 0, 0 }, all = 0, once = 0;
		uint16_t want, got;
		for (int q = 0; q < n; q++) {
			part[host[q]] += bf2f(bf16in(&c, q, e));
			once += bf2f(bf16in(&c, q, e));
		}
		/* Hosts in the order of their lowest ranks. */
		for (int q = 0; q < n; q++) {
			bool first = true;
			for (int p = 0; p < q; p++)
				first = first && host[p] != host[q];
			if (first)
				all += hier ? bf2f(f2bf(part[host[q]]))
					    : part[host[q]];
		}
		want = f2bf(all);
		differ += want != f2bf(once);
		for (int q = 0; q < n; q++) {
			const unsigned char *b = o[q].u.bytes.data;
			if (o[q].kind != CGR_VALUE_BYTES ||
			    o[q].u.bytes.len != HEAD + 2 * BF16C ||
			    memcmp(b, "\0\0\0\0", 4) != 0) {
				wrong = BF16C;
				break;
			}
			memcpy(&got, b + HEAD + 2 * e, 2);
			wrong += got != want;
		}
	}
	t->outs += (unsigned)n;
	if (wrong != 0 || (hier && differ == 0)) {
		snprintf(t->msg, sizeof(t->msg), "bfloat16 sum over %d "
			 "members: %zu elements wrong, %zu rounded twice",
			 n, wrong, differ);
		t->bad++;
	}
	t->rounded_twice += hier ? differ : 0;
	cgr_ref_release(g, r);
}

/* An abort by member who: every rank -ECANCELED, and the next operation
 * too. */
static void aborted(cgr_compiled *g, cgr_comm *cm, int n, uint8_t who,
		    struct tally *t)
{
	struct cmd c = { .id = cgr_comm_id(cm), .count = 3,
			 .dtype = CGR_INT32, .kind = OP_ABORT, .who = who };

	one(g, NULL, n, &c, -ECANCELED, t);
	c.kind = CGR_COLL_ALLREDUCE;
	one(g, NULL, n, &c, -ECANCELED, t);
}

/* The median time of an 8-byte allreduce (float32 x 2) across hosts, ns,
 * executions of the graph included, and of the graph alone (no
 * operation). */
static void timed(cgr_compiled *g, cgr_comm *cm, int n, double *op_us,
		  double *base_us)
{
	enum { R = 201 };
	static double a[R], b[R];
	struct cmd c = { .id = cgr_comm_id(cm), .count = 2,
			 .dtype = CGR_FLOAT32, .op = CGR_SUM };
	struct tally t = { 0 };

	for (int i = 0; i < R; i++)
		for (int k = 0; k < 2; k++) {
			struct timespec t0, t1;
			c.kind = k ? CGR_COLL_ALLREDUCE : OP_NONE;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			one(g, NULL, n, &c, 0, &t);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			(k ? a : b)[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e6 +
					 (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
		}
	for (int i = 1; i < R; i++)
		for (int j = i; j > 0 && a[j] < a[j - 1]; j--) {
			double x = a[j];
			a[j] = a[j - 1], a[j - 1] = x;
		}
	for (int i = 1; i < R; i++)
		for (int j = i; j > 0 && b[j] < b[j - 1]; j--) {
			double x = b[j];
			b[j] = b[j - 1], b[j - 1] = x;
		}
	*op_us = a[R / 2];
	*base_us = b[R / 2];
	(void)n;
}

/* An allreduce of 3000 float32 (b bytes) over layout 3 (3 hosts x 2)
 * sends from the driver's host what its two ranks' inputs must reach the
 * other two hosts with: one message per rank per host, 4 b (plus records,
 * records), not one per rank per rank (8 b): cgr_job_stats. */
static void crossing(cgr_job *job, cgr_compiled *g, cgr_comm *cm, int n,
		     struct tally *t)
{
	struct cmd c = { .id = cgr_comm_id(cm), .count = BIGC,
			 .dtype = CGR_FLOAT32, .kind = CGR_COLL_ALLREDUCE,
			 .op = CGR_SUM };
	const uint64_t b = 4 * BIGC;
	cgr_job_stats x, y;

	cgr_job_stats_get(job, &x);
	one(g, NULL, n, &c, 0, t);
	cgr_job_stats_get(job, &y);
	t->sent = y.comm_bytes_sent - x.comm_bytes_sent;
	if (t->sent < 4 * b || t->sent >= 5 * b) {
		fprintf(stderr, "comm: an allreduce of %llu B per rank sent "
				"%llu B from the driver's host (want 4x)\n",
			(unsigned long long)b, (unsigned long long)t->sent);
		t->bad++;
	}
	/* Split and hierarchical: the host's leader folds its two inputs,
	 * sends the other leaders their two thirds and its third to both:
	 * 4/3 of an input (plus records), not 2 (each rank's blocks). */
	c.count = 8190;
	cgr_job_stats_get(job, &x);
	one(g, NULL, n, &c, 0, t);
	cgr_job_stats_get(job, &y);
	t->sent_split = y.comm_bytes_sent - x.comm_bytes_sent;
	if (3 * t->sent_split < 4 * 4 * 8190 ||
	    2 * t->sent_split >= 3 * 4 * 8190) {
		fprintf(stderr, "comm: a split allreduce of %d B per rank sent "
				"%llu B from the driver's host (want 4/3x)\n",
			4 * 8190, (unsigned long long)t->sent_split);
		t->bad++;
	}
	/* A hierarchical allreduce of HIERC int64 (blocks of 400,000,
	 * 400,000 and 399,992 B, chunks of 256 KiB and the rest: all sent
	 * from the leaders' buffers): the other two leaders' blocks land
	 * straight in rank 0's buffer (its host's leader), the other rank
	 * there reads them where they landed: 799,992 B direct. */
	c.count = HIERC;
	c.dtype = CGR_INT64;
	cgr_job_stats_get(job, &x);
	one(g, NULL, n, &c, 0, t);
	cgr_job_stats_get(job, &y);
	t->hier_direct = y.comm_bytes_direct - x.comm_bytes_direct;
	if (t->hier_direct != 799992) {
		fprintf(stderr, "comm: a hierarchical allreduce of %d B: %llu "
				"B straight into rank 0's buffer (want "
				"799992)\n", 8 * HIERC,
			(unsigned long long)t->hier_direct);
		t->bad++;
	}
	/* A broadcast of 200,000 B from rank 0 over the three hosts is a
	 * chain: rank 0's host sends it once, to the next host, which
	 * passes each chunk on to the last (not scatter and allgather:
	 * 4/3 of it from each host, nor once to each host: 2x). */
	c.kind = CGR_COLL_BROADCAST, c.count = ZCC, c.dtype = CGR_INT64;
	c.root = 0;
	cgr_job_stats_get(job, &x);
	one(g, NULL, n, &c, 0, t);
	cgr_job_stats_get(job, &y);
	t->sent_chain = y.comm_bytes_sent - x.comm_bytes_sent;
	if (t->sent_chain < 8 * ZCC || 8 * t->sent_chain >= 9 * 8 * ZCC) {
		fprintf(stderr, "comm: a broadcast of %d B sent %llu B from "
				"the root's host (want 1x)\n",
			8 * ZCC, (unsigned long long)t->sent_chain);
		t->bad++;
	}
}

/* Over 3 hosts x 1 (the driver's rank 0): the blocks of 64 KiB or more
 * that reach the driver's host after every record is in land straight in
 * rank 0's buffer (cgr_job_stats.comm_bytes_direct), results equal to one
 * host's: a split allreduce of 25,000 int64 (rank 1's and 2's blocks:
 * 66,672 + 66,656 B) and a chained broadcast of as many from rank 2 (rank
 * 0's host is the chain's middle: its three chunks of 64 KiB; the last,
 * 3,392 B, is copied), and an allgather of as many (its data sent once
 * every record is in: rank 1's and rank 2's inputs). */
static void direct(cgr_job *job, cgr_compiled *g, cgr_comm *cm,
		   cgr_comm *ref, int n, struct tally *t)
{
	struct cmd c = { .id = cgr_comm_id(cm), .count = ZCC,
			 .dtype = CGR_INT64, .kind = CGR_COLL_ALLREDUCE,
			 .op = CGR_SUM, .seed = 77 };
	static const uint64_t want[3] = { 66672 + 66656, 3 * 65536,
					  2 * 8 * ZCC };
	static const char *const kind[3] = { "allreduce", "broadcast",
					     "allgather" };
	cgr_job_stats x, y;

	for (int k = 0; k < 3; k++) {
		if (k == 1)
			c.kind = CGR_COLL_BROADCAST, c.root = 2;
		if (k == 2)
			c.kind = CGR_COLL_ALLGATHER, c.root = 0;
		cgr_job_stats_get(job, &x);
		one(g, ref, n, &c, 0, t);
		cgr_job_stats_get(job, &y);
		t->direct_bytes[k] = y.comm_bytes_direct - x.comm_bytes_direct;
		if (t->direct_bytes[k] != want[k]) {
			fprintf(stderr, "comm: a %s of %d B: %llu B straight "
					"into rank 0's buffer (want %llu)\n",
				kind[k], 8 * ZCC,
				(unsigned long long)t->direct_bytes[k],
				(unsigned long long)want[k]);
			t->bad++;
		}
	}
}

/* Data that lands straight in one rank's buffer at a host with two ranks
 * of the communicator, the other rank reading it there (layouts 1 and 3:
 * the driver's host has ranks 0 and 1, or 0 and 3): an allgather of
 * ZCC int64 (200,000 B per rank, sent after the records), each input of
 * a rank on another host (2 or 4 of them); an alltoall of as many per
 * block, each block to its own rank (both ranks there take 2 or 4 of
 * them straight into their buffers); a scatter of as many per block
 * from rank 2 (on another host: both ranks there take theirs straight
 * into their buffers); over two hosts, a broadcast
 * of HIERC int64 from rank 2, scatter and allgather (ranks 2's and 3's
 * blocks land: 300,000 and 299,992 B).  Results equal to one host's;
 * cgr_job_stats.comm_bytes_direct to the byte. */
static void lent(cgr_job *job, cgr_compiled *g, cgr_comm *cm, cgr_comm *ref,
		 int n, struct tally *t)
{
	struct cmd c = { .id = cgr_comm_id(cm), .count = ZCC,
			 .dtype = CGR_INT64, .kind = CGR_COLL_ALLGATHER,
			 .op = CGR_SUM, .seed = 33, .root = 2 };
	const uint64_t want[4] = { (uint64_t)(n - 2) * 8 * ZCC,
				   2 * (uint64_t)(n - 2) * 8 * ZCC,
				   2 * 8 * ZCC, n == 4 ? 300000 + 299992 : 0 };
	static const char *const kn[4] = { "allgather", "alltoall", "scatter",
					   "broadcast" };
	cgr_job_stats x, y;

	for (int k = 0; k < (n == 4 ? 4 : 3); k++) {
		if (k == 1)
			c.kind = CGR_COLL_ALLTOALL;
		if (k == 2)
			c.kind = CGR_COLL_SCATTER;
		if (k == 3)
			c.kind = CGR_COLL_BROADCAST, c.count = HIERC;
		cgr_job_stats_get(job, &x);
		one(g, ref, n, &c, 0, t);
		cgr_job_stats_get(job, &y);
		t->lent_bytes += y.comm_bytes_direct - x.comm_bytes_direct;
		if (y.comm_bytes_direct - x.comm_bytes_direct != want[k]) {
			fprintf(stderr, "comm: a %s over %d ranks: %llu B "
					"straight into a buffer at the "
					"driver's host (want %llu)\n",
				kn[k], n,
				(unsigned long long)(y.comm_bytes_direct -
						     x.comm_bytes_direct),
				(unsigned long long)want[k]);
			t->bad++;
		}
	}
}

/* The driver destroys the communicator while half of its ranks wait in
 * an allreduce the other half never calls: each waiting rank's call
 * returns -ECANCELED (or, if the share went before the task looked for
 * it, its task fails with -ENOENT: on any rank); the execution
 * completes. */
static void destroyed(cgr_compiled *g, cgr_comm *cm, int n, struct tally *t)
{
	struct cmd c = { .id = cgr_comm_id(cm), .count = 3,
			 .dtype = CGR_INT32, .kind = OP_LONELY };
	cgr_value av = cgr_value_bytes(&c, sizeof(c)), o[MAXM];
	cgr_ref r;

	t->execs++;
	if (cgr_execute(g, &av, 1, &r) != 0) {
		t->bad++;
		return;
	}
	cgr_comm_destroy(cm);
	if (cgr_ref_get(g, r, 30 * SEC, o, (size_t)n) != 0) {
		fprintf(stderr, "comm: destroyed while in use: no result\n");
		t->bad++;
		return;
	}
	for (int q = 0; q < n; q++, t->outs++) {
		int32_t code = 1;
		if (o[q].kind == CGR_VALUE_BYTES && o[q].u.bytes.len >= HEAD) {
			memcpy(&code, o[q].u.bytes.data, 4);
			t->waited += code == -ECANCELED;
		} else if (o[q].kind == CGR_VALUE_ERROR &&
			   o[q].code == -ENOENT) {
			code = q % 2 ? 0 : -ECANCELED; /* it was gone */
		}
		if (code != (q % 2 ? 0 : -ECANCELED) && t->bad++ < 6)
			fprintf(stderr, "comm: destroyed while in use: rank %d "
					"code %d\n", q, code);
	}
	cgr_ref_release(g, r);
}

/* What a communicator across hosts refuses: NCCL over workers without a
 * CUDA device (-EINVAL; a build without NCCL: -EOPNOTSUPP), and here, a
 * rank whose worker is on another host (-EINVAL, at once). */
#ifdef CGR_FAKE_NCCL
#define NO_NCCL (-EINVAL)
#else
#define NO_NCCL (-EOPNOTSUPP)
#endif
static void refusals(cgr_ctx *ctx, cgr_worker *const *w, int n, cgr_comm *cm,
		     struct tally *t)
{
	cgr_comm *x = NULL;
	int32_t v = 1, o;
	int a = cgr_comm_create(ctx, w, (size_t)n, CGR_BACKEND_NCCL, &x);
	int b = cgr_allreduce(cm, 1, &v, &o, 1, CGR_INT32, CGR_SUM, NULL,
			      NULL);

	if (a != NO_NCCL || b != -EINVAL) {
		fprintf(stderr, "comm refusals: NCCL %d, a rank elsewhere %d\n",
			a, b);
		t->bad++;
		cgr_comm_destroy(x);
	}
}

int netcomm_allreduce(cgr_ctx *ctx, cgr_worker *const *w, int backend,
		      cgr_compiled **g, cgr_comm **cm, cgr_value *arg)
{
	static struct cmd c = { .count = 64, .dtype = CGR_INT32,
				.kind = CGR_COLL_ALLREDUCE, .op = CGR_SUM };
	int ret = cgr_comm_create(ctx, w, 3, backend, cm);

	if (ret == 0 && (ret = build(ctx, w, 3, g)) != 0)
		cgr_comm_destroy(*cm);
	c.id = cgr_comm_id(*cm);
	*arg = cgr_value_bytes(&c, sizeof(c));
	return ret;
}

int netcomm_run(cgr_ctx *ctx, cgr_job *job, cgr_worker *const *far3)
{
	/* w: far3 (ranks 0, 1, 2) then a second worker on each. */
	static const int layouts[][MAXM + 1] = {
		{ 3, 0, 1, 2 },		 /* 3 hosts x 1 */
		{ 4, 0, 3, 1, 4 },	 /* 2 hosts x 2 (the driver's) */
		{ 4, 1, 2, 4, 5 },	 /* 2 serving hosts x 2, interleaved */
		{ 6, 0, 1, 2, 3, 4, 5 }, /* 3 hosts x 2 */
	};
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w[6] = { far3[0], far3[1], far3[2] };
	struct tally t = { 0 };
	double op_us = 0, base_us = 0;
	int ret = 0, host[MAXM];

	for (int h = 0; h < 3 && ret == 0; h++) {
		char name[8];
		snprintf(name, sizeof(name), "x%d", h);
		wp.name = name;
		wp.rank = h;
		ret = cgr_worker_create(ctx, &wp, &w[3 + h]);
	}
	for (size_t l = 0; l < 4 && ret == 0; l++) {
		int n = layouts[l][0];
		cgr_worker *mw[MAXM];
		cgr_comm *cm = NULL, *ref = NULL;
		cgr_compiled *g = NULL;
		for (int r = 0; r < n; r++) {
			mw[r] = w[layouts[l][1 + r]];
			if (layouts[l][1 + r] % 3 == 0 &&
			    cgr_stream_create(ctx, CGR_DEVICE_SIM, 0,
					      &streams[r]) != 0)
				ret = -ENOMEM;
		}
		if (ret == 0)
			ret = cgr_comm_create(ctx, mw, (size_t)n,
					      CGR_BACKEND_CPU, &cm);
		if (ret == 0)
			ret = cgr_comm_create(ctx, NULL, (size_t)n,
					      CGR_BACKEND_CPU, &ref);
		if (ret == 0)
			ret = build(ctx, mw, n, &g);
		if (ret != 0) {
			fprintf(stderr, "comm layout %zu: %s\n", l,
				cgr_strerror(ret));
			break;
		}
		cases(g, cm, ref, n, false, &t);
		hier_cases(g, cm, ref, n, n > 3, &t);
		for (int r = 0; r < n; r++)
			host[r] = layouts[l][1 + r] % 3;
		rough_sum(g, cm, n, host, n > 3, &t);
		if (l == 0) {
			timed(g, cm, n, &op_us, &base_us);
			refusals(ctx, mw, n, cm, &t);
			direct(job, g, cm, ref, n, &t);
		}
		if (l == 3)
			crossing(job, g, cm, n, &t);
		if (l == 1 || l == 3)
			lent(job, g, cm, ref, n, &t);
		if (l == 3)
			aborted(g, cm, n, 4, &t);
		if (l == 2) {
			destroyed(g, cm, n, &t);
			cm = NULL;
		}
		cgr_compiled_destroy(g);
		cgr_comm_destroy(cm);
		cgr_comm_destroy(ref);
		for (int r = 0; r < MAXM; r++) {
			cgr_stream_destroy(streams[r]);
			streams[r] = NULL;
		}
	}
	for (int h = 0; h < 3; h++)
		if (w[3 + h] != NULL)
			cgr_worker_destroy(w[3 + h], 5 * SEC);
	if (getenv("CGR_TEST_HIER_FAIL") != NULL && t.hfail != 3 && ret == 0) {
		snprintf(t.msg, sizeof(t.msg), "%u injected failures (want 3)",
			 t.hfail);
		t.bad++;
	}
	if (ret != 0 || t.bad != 0) {
		printf("comm FAILED %u of %u outputs (%s)\n", t.bad, t.outs,
		       ret ? cgr_strerror(ret) : t.msg);
		return 1;
	}
	printf("comm OK layouts 4 executions %u outputs %u direct %u "
	       "allreduce8_p50_us %.1f graph_p50_us %.1f "
	       "allreduce_12000B_sent_from_host_B %llu "
	       "allreduce_32760B_sent_from_host_B %llu "
	       "broadcast_200000B_sent_from_host_B %llu "
	       "allreduce_200000B_direct_B %llu "
	       "broadcast_200000B_direct_B %llu "
	       "allgather_200000B_direct_B %llu "
	       "destroyed_while_waiting %u hier_failed_halfway %u "
	       "bf16_rounded_per_host %zu hier_direct_B %llu "
	       "direct_at_two_rank_host_B %llu\n",
	       t.execs, t.outs, t.direct, op_us, base_us,
	       (unsigned long long)t.sent, (unsigned long long)t.sent_split,
	       (unsigned long long)t.sent_chain,
	       (unsigned long long)t.direct_bytes[0],
	       (unsigned long long)t.direct_bytes[1],
	       (unsigned long long)t.direct_bytes[2], t.waited, t.hfail,
	       t.rounded_twice, (unsigned long long)t.hier_direct,
	       (unsigned long long)t.lent_bytes);
	return 0;
}

/* ---- NCCL across hosts (the ncomm mode) -------------------------------- */

/* What an NCCL communicator across hosts refuses: a collective node on
 * it whose device outputs on other hosts are graph outputs (-ENOTSUP,
 * saying so), and here, a rank whose worker is on another host
 * (-EINVAL). */
static void nrefusals(cgr_ctx *ctx, cgr_worker *const *w, int n,
		      cgr_comm *cm, int elsewhere, struct tally *t)
{
	cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
	cgr_node *in[MAXM], *o[MAXM];
	cgr_compiled *x = NULL;
	cgr_graph *g;
	int32_t v = 1, ov;
	int a = cgr_graph_create(ctx, &g), b;

	for (int r = 0; r < n && a == 0; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		unsigned char ra = (unsigned char)r;
		d.name = "gen";
		d.fn = netcomm_task;
		d.flags = CGR_TASK_DEVICE; /* device tensors: NCCL's */
		d.arg_data = &ra;
		d.arg_len = 1;
		cgr_node *arg;
		a = cgr_graph_input(g, 0, &arg);
		if (a == 0)
			a = cgr_graph_task(g, w[r], &d, &arg, 1, &in[r], 1);
	}
	cp.comm = cm;
	cp.kind = CGR_COLL_ALLREDUCE;
	if (a == 0)
		a = cgr_graph_collective(g, &cp, w, (size_t)n, in, (size_t)n,
					 o, (size_t)n);
	if (a == 0)
		a = cgr_graph_output(g, o, (size_t)n);
	if (a == 0)
		a = cgr_graph_compile(g, NULL, &x);
	b = cgr_allreduce(cm, elsewhere, &v, &ov, 1, CGR_INT32, CGR_SUM, NULL,
			  NULL);
	if (a != -ENOTSUP || b != -EINVAL ||
	    strstr(cgr_graph_errmsg(g), "graph output") == NULL) {
		fprintf(stderr, "ncomm refusals: node %d (%s), a rank "
				"elsewhere %d\n",
			a, cgr_graph_errmsg(g), b);
		t->bad++;
	}
	cgr_compiled_destroy(x);
	cgr_graph_destroy(g);
}

/* Host 3's first NCCL rank fails to initialise (net-graph.c sets
 * FAKE_NCCL_SPAN_FAIL_INIT there): cgr_comm_create over d0, d1 and d2
 * fails with that host's failure (ncclSystemError: -EIO; not the
 * others' -ECANCELED or -EPIPE, which it brought about), long
 * before NCCL's 30 s initialisation deadline (bound 5 s): the other
 * hosts' ranks stop waiting for it once its host aborted the agreement.
 * The milliseconds it took. */
static double init_failure(cgr_ctx *ctx, cgr_worker *const *far,
			   struct tally *t)
{
	struct timespec a, b;
	cgr_comm *cm = NULL;
	double ms;
	int ret;

	clock_gettime(CLOCK_MONOTONIC, &a);
	ret = cgr_comm_create(ctx, far, 3, CGR_BACKEND_NCCL, &cm);
	clock_gettime(CLOCK_MONOTONIC, &b);
	ms = (double)(b.tv_sec - a.tv_sec) * 1e3 +
	     (double)(b.tv_nsec - a.tv_nsec) / 1e6;
	if (ret != -EIO || ms > 5000) { /* (ncclSystemError's code) */
		fprintf(stderr, "ncomm: a failed initialisation: %s after "
				"%.1f ms\n", cgr_strerror(ret), ms);
		t->bad++;
	}
	cgr_comm_destroy(cm);
	return ms;
}

int netcomm_nccl_run(cgr_ctx *ctx, cgr_worker *const *far)
{
	/* far: d0 (rank 0), d1 (1), d2 (2), e1 (1), e2 (2). */
	static const int layouts[][MAXM + 1] = {
		{ 3, 0, 1, 2 },	   /* 3 hosts x 1 */
		{ 4, 1, 2, 3, 4 }, /* 2 serving hosts x 2, interleaved */
	};
	struct tally t = { 0 };
	double fail_ms = init_failure(ctx, far, &t);
	int ret = 0;

	for (size_t l = 0; l < 2 && ret == 0; l++) {
		int n = layouts[l][0];
		cgr_worker *mw[MAXM];
		cgr_comm *cm = NULL, *ref = NULL;
		cgr_compiled *g = NULL;
		for (int r = 0; r < n; r++)
			mw[r] = far[layouts[l][1 + r]];
		ret = cgr_comm_create(ctx, mw, (size_t)n, CGR_BACKEND_NCCL,
				      &cm);
		if (ret == 0)
			ret = cgr_comm_create(ctx, NULL, (size_t)n,
					      CGR_BACKEND_CPU, &ref);
		if (ret == 0)
			ret = build(ctx, mw, n, &g);
		if (ret != 0) {
			fprintf(stderr, "ncomm layout %zu: %s\n", l,
				cgr_strerror(ret));
			cgr_comm_destroy(cm);
			cgr_comm_destroy(ref);
			break;
		}
		cases(g, cm, ref, n, true, &t);
		if (l == 1)
			aborted(g, cm, n, 2, &t);
		cgr_compiled_destroy(g);
		nrefusals(ctx, mw, n, cm, l == 0 ? 1 : 0, &t);
		cgr_comm_destroy(cm);
		cgr_comm_destroy(ref);
	}
	if (ret != 0 || t.bad != 0) {
		printf("ncomm FAILED %u of %u outputs (%s)\n", t.bad, t.outs,
		       ret ? cgr_strerror(ret) : t.msg);
		return 1;
	}
	printf("ncomm OK layouts 2 executions %u outputs %u direct %u "
	       "init_failure_ms %.1f\n",
	       t.execs, t.outs, t.direct, fail_ms);
	return 0;
}
