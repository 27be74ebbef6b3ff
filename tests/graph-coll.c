/*
 * tests/graph-coll.c: collective nodes inside compiled graphs.
 *
 * Every collective kind over 1 to 4 members, checked element by element
 * over many executions; a shape or dtype mismatch on one member and an
 * error value on one member turn that execution's outputs into error
 * values on every member (naming the ranks), and the next execution is
 * fine; teardown while members wait for a stuck one returns; schedules:
 * DDP-style two allreduces, a three-worker cyclic exchange, and 1F1B
 * pipelines of 2x2 and 4x8, all checked over 1e3 executions.
 *
 * Built with CGR_FAKE_NCCL (tests/graph-coll-nccl-fake), the same suite
 * runs with worker i on (model) CUDA device i and every tensor-making
 * task a CGR_TASK_DEVICE task, so each collective and device edge goes
 * through the NCCL backend, against the models of libnccl and libcudart
 * (tests/fake_nccl.c, tests/fake_cudart.c): outputs must be CUDA tensors
 * of the member's device, every two devices must have issued their
 * shared communicators' operations in one order, and the model must have
 * seen nothing NCCL forbids (a mixed list's tensors go through NCCL
 * too).  Modelled communication time is a CPU-communicator feature:
 * there it is left out.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include <cgr.h>

#include "t_coll.h"
#include "t_eager.h"
#include "tap.h"

static cgr_ctx *ctx;
static cgr_worker *W[4];

/* A task's parameters: by pointer, or by value for process workers. */
#ifdef T_PROCESS_WORKERS
#define T_ARG(d, p) ((d).arg_data = (p), (d).arg_len = sizeof(*(p)))
#else
#define T_ARG(d, p) ((d).arg = (void *)(p))
#endif
/* Every graph compiles with these: the suite runs without, then with
 * overlap (collectives on a communication stream per worker). */
static cgr_compile_params G_PP = CGR_COMPILE_PARAMS_INIT;
/* Flags of the tasks that make collective inputs. */
#ifdef CGR_FAKE_NCCL
#include <dlfcn.h>
static const unsigned G_TASK_FLAGS = CGR_TASK_DEVICE;
#define G_DEV_TYPE kDLCUDA
#define G_DEV(w) (w) /* worker w's tensors are on model GPU w */
#else
static const unsigned G_TASK_FLAGS = 0;
#define G_DEV_TYPE kDLCPU
#define G_DEV(w) 0
#endif

/* A task: reads u64 x and emits an int64 tensor [rows, 3] with
 * element (i, j) = x * 7 + rank * 1000 + i * 3 + j.  arg: struct fill. */
struct fill {
	int rank;
	int rows;
	int bad_exec; /* on this x: emit 1 row more (-1: never) */
	int err_exec; /* on this x: fail (-1: never) */
};

static int fill_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	const struct fill *f = cgr_task_arg(tc);
	uint64_t x;
	int rows = f->rows;
	(void)st, (void)nin, (void)nout;
	memcpy(&x, in[0].u.bytes.data, 8);
	if ((int)x == f->err_exec) {
		cgr_task_set_error(tc, -EIO, "rank %d refuses %d", f->rank,
				   (int)x);
		return -1;
	}
	if ((int)x == f->bad_exec)
		rows++;
	int64_t *o = cgr_task_output_buffer(tc, 0, (size_t)rows * 3 * 8);
	for (int i = 0; i < rows * 3; i++)
		o[i] = t_coll_elem(x, f->rank, i);
	static __thread int64_t shape[2];
	shape[0] = rows;
	shape[1] = 3;
	out[0] = cgr_value_tensor(o, kDLInt, 64, 2,
					shape);
	return 0;
}

/* Expected element e of output o of the collective for input x. */
static int64_t expect(int kind, int n, int root, int rows, uint64_t x, int o,
		      int e)
{
	return t_coll_expect(kind, n, root, rows * 3, x, o, e);
}

/* Fill tasks (fn, flags) on W[0..n-1] reading x, task r's arg f[r]; their
 * outputs in ins. */
static void add_fills(cgr_graph *g, cgr_node *x, struct fill *f, int n,
		      cgr_task_fn fn, unsigned flags, cgr_node **ins)
{
	for (int r = 0; r < n; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = "fill", d.fn = fn, d.flags = flags;
		T_ARG(d, &f[r]);
		cgr_graph_task(g, W[r], &d, &x, 1, &ins[r], 1);
	}
}

static void check_kind(int kind, int n, int root, long iters)
{
	static struct fill f[4];
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *ins[4], *outs[4];
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	int rows = 2 * n, nout, nin;
	long bad = 0;
	char what[64];

	snprintf(what, sizeof(what), "%s n=%d root=%d", kind == 1 ? "allreduce" :
		 kind == 2 ? "allgather" : kind == 3 ? "reducescatter" :
		 kind == 4 ? "reduce" : kind == 5 ? "broadcast" :
		 kind == 6 ? "gather" : kind == 7 ? "scatter" : "alltoall",
		 n, root);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int r = 0; r < n; r++)
		f[r] = (struct fill){ r, rows, -1, -1 };
	add_fills(g, x, f, n, fill_fn, G_TASK_FLAGS, ins);
	p.kind = kind;
	p.root = root;
	p.name = "coll";
	nin = (kind == CGR_COLL_BROADCAST || kind == CGR_COLL_SCATTER) ? 1 : n;
	nout = (kind == CGR_COLL_REDUCE || kind == CGR_COLL_GATHER) ? 1 : n;
	cgr_node *cin[4];
	for (int i = 0; i < nin; i++)
		cin[i] = nin == 1 ? ins[root] : ins[i];
	int ret = cgr_graph_collective(g, &p, W, (size_t)n, cin, (size_t)nin,
				       outs, (size_t)nout);
	/* Fill tasks not feeding the collective still need an output. */
	cgr_node *gout[8];
	size_t ng = 0;
	for (int i = 0; i < nout; i++)
		gout[ng++] = outs[i];
	if (nin == 1)
		for (int r = 0; r < n; r++)
			if (r != root)
				gout[ng++] = ins[r];
	cgr_graph_output(g, gout, ng);
	ret = ret ? ret : cgr_graph_compile(g, &G_PP, &c);
	if (ret != 0) {
		t_ok(0, "%s compiles: %s", what, cgr_graph_errmsg(g));
		cgr_graph_destroy(g);
		return;
	}
	cgr_graph_destroy(g);
	for (long it = 0; it < iters; it++) {
		uint64_t xv = (uint64_t)it + 1;
		cgr_value a = cgr_value_bytes(&xv, 8), o[8];
		cgr_ref ref;
		if (cgr_execute(c, &a, 1, &ref) != 0 ||
		    cgr_ref_get(c, ref, -1, o, ng) != 0) {
			bad++;
			continue;
		}
		for (int k = 0; k < nout; k++) {
			const DLTensor *t = &o[k].u.tensor;
			int per = rows * 3;
			int want = (kind == CGR_COLL_ALLGATHER ||
				    kind == CGR_COLL_GATHER) ?
					   per * n :
				   (kind == CGR_COLL_REDUCESCATTER ||
				    kind == CGR_COLL_SCATTER) ?
					   per / n :
					   per;
			int oi = nout == 1 ? root : k;
			/* Rank i's output lives where rank i's inputs do:
			 * on CUDA device i under NCCL, else host memory. */
			if (o[k].kind != CGR_VALUE_TENSOR ||
			    cgr_tensor_nbytes(t) != (size_t)want * 8 ||
			    (int)t->device.device_type != G_DEV_TYPE ||
			    (G_DEV_TYPE == kDLCUDA && t->device.device_id != oi)) {
				if (bad++ < 3)
					t_diag("%s out %d: kind %d %s", what, k,
					       o[k].kind,
					       o[k].kind == CGR_VALUE_ERROR ?
						       o[k].u.error.msg :
						       "");
				continue;
			}
			for (int e = 0; e < want; e++)
				if (((const int64_t *)t->data)[e] !=
				    expect(kind, n, root, rows, xv, oi, e))
					bad++;
		}
		cgr_ref_release(c, ref);
	}
	t_is(bad, 0, "%s: %ld executions bit-exact", what, iters);
	cgr_compiled_destroy(c);
}

/* Mismatch on one member, then an error value on one member. */
/* A 3-rank allreduce "ar" of 6-row fills where rank 2 emits a row more
 * on execution 5 and rank 1 fails on execution 9. */
static cgr_compiled *faulty_allreduce(int static_shape, const char *what)
{
	static struct fill f[2][3];
	struct fill *fs = f[static_shape != 0];
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	cgr_node *x, *ins[3], *outs[3];
	cgr_compiled *c = NULL;
	cgr_graph *g;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int r = 0; r < 3; r++)
		fs[r] = (struct fill){ r, 6, r == 2 ? 5 : -1, r == 1 ? 9 : -1 };
	add_fills(g, x, fs, 3, fill_fn, G_TASK_FLAGS, ins);
	p.kind = CGR_COLL_ALLREDUCE;
	p.name = "ar";
	p.static_shape = static_shape;
	cgr_graph_collective(g, &p, W, 3, ins, 3, outs, 3);
	cgr_graph_output(g, outs, 3);
	t_is(cgr_graph_compile(g, &G_PP, &c), 0, "%s", what);
	cgr_graph_destroy(g);
	return c;
}

static void check_errors(void)
{
	cgr_compiled *c = faulty_allreduce(0, "compile 3-rank allreduce");
	int good = 0, mism = 0, errv = 0;

	for (int it = 1; it <= 12; it++) {
		uint64_t xv = (uint64_t)it;
		cgr_value a = cgr_value_bytes(&xv, 8), o[3];
		cgr_ref ref;
		cgr_execute(c, &a, 1, &ref);
		if (cgr_ref_get(c, ref, -1, o, 3) != 0)
			continue;
		if (it == 5) {
			for (int k = 0; k < 3; k++)
				mism += o[k].kind == CGR_VALUE_ERROR &&
					o[k].code == CGR_EMISMATCH &&
					strstr(o[k].u.error.msg, "rank 2") &&
					strstr(o[k].u.error.msg, "[7,3]") &&
					strstr(o[k].u.error.msg, "[6,3]");
			if (mism != 3)
				t_diag("mismatch: %s",
				       o[0].kind == CGR_VALUE_ERROR ?
					       o[0].u.error.msg :
					       "(no error)");
		} else if (it == 9) {
			for (int k = 0; k < 3; k++)
				errv += o[k].kind == CGR_VALUE_ERROR &&
					o[k].code == -EIO &&
					strstr(o[k].u.error.msg, "rank 1") &&
					strstr(o[k].u.error.msg, "refuses");
		} else {
			int ok = 1;
			for (int k = 0; k < 3; k++)
				ok &= o[k].kind == CGR_VALUE_TENSOR &&
				      ((const int64_t *)o[k].u.tensor.data)[4] ==
					      expect(CGR_COLL_ALLREDUCE, 3, 0, 6,
						     xv, k, 4);
			good += ok;
		}
		cgr_ref_release(c, ref);
	}
	t_is(mism, 3, "shape mismatch on rank 2: error value on all 3 "
		      "members naming the ranks and shapes");
	t_is(errv, 3, "error value on rank 1: reaches all 3 members");
	t_is(good, 10, "every other execution is correct");
	cgr_compiled_destroy(c);
}

/*
 * Static shapes: only the first execution agrees.  Rank 2 grows a row on
 * execution 5 and rank 1 fails on 9: every member's outputs of those two
 * are error values (on NCCL, which checks nothing, through the late
 * verdict), and every other execution is correct: nothing hangs and the
 * collective recovers.
 */
static void check_static(long iters)
{
	cgr_compiled *c = faulty_allreduce(1, "static-shape allreduce");
	long good = 0, mism = 0, errv = 0;

	for (long it = 1; it <= iters; it++) {
		uint64_t xv = (uint64_t)it;
		cgr_value a = cgr_value_bytes(&xv, 8), o[3];
		cgr_ref ref;
		if (cgr_execute(c, &a, 1, &ref) || cgr_ref_get(c, ref, -1, o, 3))
			continue;
		for (int k = 0; k < 3; k++) {
			const int64_t *d = o[k].u.tensor.data;
			if (it == 5 || it == 9) {
				bool e = o[k].kind == CGR_VALUE_ERROR;
				/* The code, and who changed what, on every
				 * member. */
				mism += it == 5 && e &&
					o[k].code == CGR_EMISMATCH &&
					strstr(o[k].u.error.msg,
					       "rank 2 changed its static "
					       "shape from [6,3] int64 to "
					       "[7,3] int64") != NULL;
				errv += it == 9 && e;
				if (!e)
					t_diag("execution %ld member %d: no "
					       "error value", it, k);
				continue;
			}
			good += o[k].kind == CGR_VALUE_TENSOR &&
				d[17] == expect(CGR_COLL_ALLREDUCE, 3, 0, 6, xv,
						k, 17);
		}
		cgr_ref_release(c, ref);
	}
	t_is(mism, 3, "rank 2 changed its static shape: an error value on "
		      "all 3 members");
	t_is(errv, 3, "rank 1 failed its task: an error value on all 3");
	t_is(good, 3 * (iters - 2), "every other execution is correct");
	cgr_compiled_destroy(c);
}

static _Atomic int gate, entered;

static int gated_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	atomic_store(&entered, 1);
	while (!atomic_load(&gate))
		;
	return fill_fn(tc, st, in, nin, out, nout);
}

#ifdef CGR_FAKE_NCCL
static void *nccl_sym(const char *name)
{
	void *h = dlopen(CGR_FAKE_NCCL, RTLD_NOW | RTLD_NOLOAD);
	void *f = h != NULL ? dlsym(h, name) : NULL;

	if (h != NULL)
		dlclose(h);
	return f;
}

static long nccl_waiting(void)
{
	long (*waiting)(void);
	*(void **)&waiting = nccl_sym("fake_nccl_waiting");
	return waiting != NULL ? waiting() : -1;
}

/* Group ends settle after polls polls (0: at once). */
static void nccl_inprogress(int polls)
{
	void (*inprogress)(int);
	*(void **)&inprogress = nccl_sym("fake_nccl_inprogress");
	if (inprogress != NULL)
		inprogress(polls);
}
#endif

/* Teardown while members m[0] and m[1] wait for m[2], stuck in its
 * task: in the agreement, or with static shapes (after a first
 * execution) inside the communicator, on NCCL with their operations
 * enqueued on their devices.  m[2] is abandoned. */
static __attribute__((unused)) void
check_teardown(cgr_worker *m0, cgr_worker *m1, cgr_worker *m2,
			   bool stat)
{
	cgr_worker *m[3] = { m0, m1, m2 };
	const int stuck = 2;
	/* Per call: the abandoned worker of a call before may still read
	 * its own. */
	static struct fill fs[2][3];
	struct fill *f = fs[stat];
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *ins[3], *outs[3];
	cgr_ref ref;
	uint64_t xv = 1;
	cgr_value a = cgr_value_bytes(&xv, 8), o[3];

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int r = 0; r < 3; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		f[r] = (struct fill){ r, 3, -1, -1 };
		d.name = r == stuck ? "gated" : "fill";
		d.fn = r == stuck ? gated_fn : fill_fn;
		T_ARG(d, &f[r]);
		d.flags = G_TASK_FLAGS;
		cgr_graph_task(g, m[r], &d, &x, 1, &ins[r], 1);
	}
	p.kind = CGR_COLL_ALLREDUCE;
	p.static_shape = stat;
	cgr_graph_collective(g, &p, m, 3, ins, 3, outs, 3);
	cgr_graph_output(g, outs, 3);
	cgr_graph_compile(g, &G_PP, &c);
	cgr_graph_destroy(g);
#ifdef CGR_FAKE_NCCL
	nccl_inprogress(0);
#endif
	if (stat) {
		/* The first execution agrees and fixes the shapes. */
		int re = 1, rg = 1;
		atomic_store(&gate, 1);
		if ((re = cgr_execute(c, &a, 1, &ref)) == 0)
			rg = cgr_ref_get(c, ref, -1, o, 3);
		t_ok(re == 0 && rg == 0 && o[0].kind == CGR_VALUE_TENSOR,
		     "static shapes: the first execution agrees (execute %s, "
		     "get %s, %s)",
		     cgr_strerror(re), cgr_strerror(rg),
		     re == 0 && rg == 0 && o[0].kind == CGR_VALUE_ERROR ?
			     o[0].u.error.msg :
			     "no error value");
		if (re == 0)
			cgr_ref_release(c, ref);
	}
	atomic_store(&gate, 0);
	atomic_store(&entered, 0);
	int rx = cgr_execute(c, &a, 1, &ref);
	int64_t te = t_now_ns();
	while (rx == 0 && !atomic_load(&entered) &&
	       t_now_ns() - te < 30 * 1000000000ll)
		sched_yield();
	if (rx != 0 || !atomic_load(&entered)) {
		t_ok(0, "the stuck member's task started (execute: %s)",
		     cgr_strerror(rx));
		atomic_store(&gate, 1);
		cgr_compiled_destroy(c);
		return;
	}
#ifdef CGR_FAKE_NCCL
	/* The other two enqueued theirs (settled at once: only the events
	 * say they still run) and wait on their devices. */
	while (stat && nccl_waiting() < 2)
		sched_yield();
#endif
	int64_t t0 = t_now_ns();
	int ret = cgr_compiled_teardown(c, 200 * 1000000);
	t_ok(ret == CGR_ESTUCK && t_now_ns() - t0 < 2000000000ll,
	     "teardown while 2 members wait %s for a stuck third: the stuck "
	     "one is reported, the others return (%s, %lld ms)",
	     stat ? "inside the communicator" : "in the agreement",
	     cgr_strerror(ret), (long long)(t_now_ns() - t0) / 1000000);
	atomic_store(&gate, 1);
	cgr_compiled_destroy(c);
#ifdef CGR_FAKE_NCCL
	nccl_inprogress(2);
#endif
}

/* DDP: two allreduces per step over 2 workers, then an update. */
static int grad_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t g[2][8];
	static __thread int64_t shape[1] = { 8 };
	const struct fill *f = cgr_task_arg(tc);
	uint64_t x;
	(void)st, (void)nin;
	memcpy(&x, in[0].u.bytes.data, 8);
	for (size_t k = 0; k < nout; k++) {
		for (int i = 0; i < 8; i++)
			g[k][i] = (int64_t)(x * (k + 1)) + f->rank * 10 + i;
		out[k] = cgr_value_tensor(g[k], kDLInt, 64, 1,
						shape);
	}
	return 0;
}

static int sum_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t s;
	(void)tc, (void)st, (void)nout;
	s = 0;
	for (size_t k = 0; k < nin; k++) {
		if (in[k].kind == CGR_VALUE_TENSOR) {
			size_t n = cgr_tensor_nbytes(&in[k].u.tensor) / 8;
			for (size_t i = 0; i < n; i++)
				s += ((const int64_t *)in[k].u.tensor.data)[i];
		} else {
			int64_t v;
			memcpy(&v, in[k].u.bytes.data, 8);
			s += v;
		}
	}
	out[0] = cgr_value_bytes(&s, 8);
	return 0;
}

/* sim_ns: cgr_compile_params.sim_comm_ns; each execution's two
 * allreduces then take at least 2 * sim_ns (one after the other). */
static void check_ddp(long iters, int64_t sim_ns)
{
	cgr_compile_params pp = G_PP;
	struct timespec t0, t1;
	static struct fill f[2] = { { 0, 0, -1, -1 }, { 1, 0, -1, -1 } };
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *gr[2][2], *ra[2], *rb[2], *up[2];
	long bad = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int r = 0; r < 2; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		cgr_node *o[2];
		d.name = "backward", d.fn = grad_fn;
		T_ARG(d, &f[r]);
		d.flags = G_TASK_FLAGS;
		cgr_graph_task(g, W[r], &d, &x, 1, o, 2);
		gr[0][r] = o[0], gr[1][r] = o[1];
	}
	cgr_graph_allreduce(g, gr[0], 2, CGR_SUM, NULL, ra);
	cgr_graph_allreduce(g, gr[1], 2, CGR_SUM, NULL, rb);
	for (int r = 0; r < 2; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		cgr_node *two[2] = { ra[r], rb[r] };
		d.name = "update", d.fn = sum_fn;
		cgr_graph_task(g, W[r], &d, two, 2, &up[r], 1);
	}
	cgr_graph_output(g, up, 2);
	pp.sim_comm_ns = sim_ns;
	t_is(cgr_graph_compile(g, &pp, &c), 0, "DDP graph compiles");
	cgr_graph_destroy(g);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long it = 0; it < iters; it++) {
		uint64_t xv = (uint64_t)it;
		cgr_value a = cgr_value_bytes(&xv, 8), o[2];
		cgr_ref ref;
		int64_t want = 0;
		for (int k = 0; k < 2; k++)
			for (int r = 0; r < 2; r++)
				for (int i = 0; i < 8; i++)
					want += (int64_t)(xv * (uint64_t)(k + 1)) +
						r * 10 + i;
		if (cgr_execute(c, &a, 1, &ref) || cgr_ref_get(c, ref, -1, o, 2)) {
			bad++;
			continue;
		}
		for (int r = 0; r < 2; r++) {
			int64_t v = 0;
			if (o[r].kind == CGR_VALUE_BYTES)
				memcpy(&v, o[r].u.bytes.data, 8);
			bad += v != want;
		}
		cgr_ref_release(c, ref);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	t_is(bad, 0, "DDP two allreduces: %ld steps correct", iters);
	if (sim_ns > 0) {
		int64_t ns = (t1.tv_sec - t0.tv_sec) * 1000000000ll +
			     (t1.tv_nsec - t0.tv_nsec);
		t_ok(ns >= iters * 2 * sim_ns,
		     "modelled communication of %lld us per allreduce: %ld "
		     "steps took %lld us (at least %lld)",
		     (long long)sim_ns / 1000, iters, (long long)ns / 1000,
		     (long long)(iters * 2 * sim_ns) / 1000);
	}
	cgr_compiled_destroy(c);
}

#ifndef CGR_FAKE_NCCL /* modelled time is the CPU communicator's */
/* Teardown while a collective sleeps its modelled 5 s: it returns at
 * once (the model sleeps in slices and watches for teardown), the
 * workers stay usable. */
static __attribute__((unused)) void check_sim_teardown(void)
{
	struct timespec t0, t1;
	cgr_compile_params pp = G_PP;
	cgr_compiled *c;
	cgr_graph *g;
	cgr_node *x, *a[2], *r[2];
	static struct fill f[2] = { { 0, 2, -1, -1 }, { 1, 2, -1, -1 } };
	cgr_ref ref;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < 2; i++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.fn = fill_fn;
		T_ARG(d, &f[i]);
		d.flags = G_TASK_FLAGS;
		cgr_graph_task(g, W[i], &d, &x, 1, &a[i], 1);
	}
	cgr_graph_allreduce(g, a, 2, CGR_SUM, NULL, r);
	cgr_graph_output(g, r, 2);
	pp.sim_comm_ns = 5000000000ll;
	t_is(cgr_graph_compile(g, &pp, &c), 0, "5 s modelled allreduce compiles");
	cgr_graph_destroy(g);
	uint64_t xv = 1;
	cgr_value arg = cgr_value_bytes(&xv, 8);
	t_is(cgr_execute(c, &arg, 1, &ref), 0, "one execution in flight");
	cgr_value o[2];
	t_is(cgr_ref_get(c, ref, 200000000, o, 2), -ETIMEDOUT,
	     "not done after 200 ms: the allreduce is in its modelled 5 s");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int ret = cgr_compiled_teardown(c, 3000000000ll);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	int64_t ns = (t1.tv_sec - t0.tv_sec) * 1000000000ll +
		     (t1.tv_nsec - t0.tv_nsec);
	t_ok(ret == 0 && ns < 2500000000ll,
	     "teardown during a modelled transfer: %s after %lld ms",
	     cgr_strerror(ret), (long long)ns / 1000000);
	cgr_compiled_destroy(c);
}

#endif

/* u64 -> u64 * mul + add */
struct aff {
	uint64_t mul, add;
};

static int aff_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	const struct aff *a = cgr_task_arg(tc);
	uint64_t s = 0, v, *o = cgr_task_output_buffer(tc, 0, 8);
	(void)st, (void)nout;
	for (size_t i = 0; i < nin; i++) {
		memcpy(&v, in[i].u.bytes.data, 8);
		s += v;
	}
	*o = s * a->mul + a->add;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

static cgr_node *aff(cgr_graph *g, cgr_worker *w, const char *name,
		     struct aff *a, cgr_node **in, size_t nin)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_node *n;
	d.name = name, d.fn = aff_fn;
	T_ARG(d, a);
	cgr_graph_task(g, w, &d, in, nin, &n, 1);
	return n;
}

static void check_cyclic(long iters)
{
	static struct aff a[3] = { { 2, 1 }, { 3, 2 }, { 5, 3 } }, id = { 1, 0 };
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *p[3], *q[3];
	long bad = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < 3; i++)
		p[i] = aff(g, W[i], "send", &a[i], &x, 1);
	/* Worker i receives from worker i-1 (cyclic exchange). */
	for (int i = 0; i < 3; i++) {
		cgr_node *two[2] = { p[(i + 2) % 3], p[i] };
		q[i] = aff(g, W[i], "recv", &id, two, 2);
	}
	cgr_graph_output(g, q, 3);
	t_is(cgr_graph_compile(g, &G_PP, &c), 0, "cyclic exchange compiles");
	cgr_graph_destroy(g);
	for (long it = 0; it < iters; it++) {
		uint64_t xv = (uint64_t)it, v;
		cgr_value arg = cgr_value_bytes(&xv, 8), o[3];
		cgr_ref ref;
		if (cgr_execute(c, &arg, 1, &ref) ||
		    cgr_ref_get(c, ref, -1, o, 3)) {
			bad++;
			continue;
		}
		for (int i = 0; i < 3; i++) {
			int j = (i + 2) % 3;
			memcpy(&v, o[i].u.bytes.data, 8);
			bad += v != xv * a[j].mul + a[j].add + xv * a[i].mul +
					    a[i].add;
		}
		cgr_ref_release(c, ref);
	}
	t_is(bad, 0, "three-worker cyclic exchange: %ld executions", iters);
	cgr_compiled_destroy(c);
}

/*
 * 1F1B: S stages on S workers, M microbatches.  F(s,m) = F(s-1,m) * 3 + s,
 * B(s,m) = B(s+1,m) * 2 + F(s,m) (B(S-1,m) from F(S-1,m)).  Tasks are
 * bound per worker in 1F1B order: S-s-1 warm-up forwards, then alternate.
 * Outputs: B(0,m) for every m.
 */
static void check_1f1b(int S, int M, long iters)
{
	static struct aff fw = { 3, 0 }, bw = { 1, 0 };
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x[8], *F[4][8], *B[4][8];
	long bad = 0;
	int fi[4] = { 0 }, bi[4] = { 0 };

	(void)fw, (void)bw;
	cgr_graph_create(ctx, &g);
	for (int m = 0; m < M; m++)
		cgr_graph_input(g, m, &x[m]);
	/* Bind in a global order that keeps each worker's 1F1B order. */
	static struct aff fa[4], ba[4];
	for (int s = 0; s < S; s++) {
		fa[s] = (struct aff){ 3, (uint64_t)s };
		ba[s] = (struct aff){ 1, 0 };
	}
	int done = 0, total = 2 * S * M;
	while (done < total) {
		for (int s = 0; s < S; s++) {
			int warm = S - s - 1;
			bool want_f = fi[s] < M &&
				      (fi[s] < warm + 1 + bi[s] || bi[s] >= M);
			if (want_f) {
				int m = fi[s];
				if (s > 0 && fi[s - 1] <= m)
					continue; /* input not bound yet */
				cgr_node *in = s == 0 ? x[m] : F[s - 1][m];
				F[s][m] = aff(g, W[s], "F", &fa[s], &in, 1);
				fi[s]++, done++;
			} else if (bi[s] < M) {
				int m = bi[s];
				if (fi[s] <= m || (s < S - 1 && bi[s + 1] <= m))
					continue;
				cgr_node *in2[2] = { F[s][m],
						     s < S - 1 ? B[s + 1][m] :
								 F[s][m] };
				B[s][m] = aff(g, W[s], "B", &ba[s], in2, 2);
				bi[s]++, done++;
			}
		}
	}
	cgr_graph_output(g, B[0], (size_t)M);
	int ret = cgr_graph_compile(g, &G_PP, &c);
	t_is(ret, 0, "1F1B %dx%d compiles: %s", S, M, cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	if (ret != 0)
		return;
	for (long it = 0; it < iters; it++) {
		uint64_t xv[8];
		cgr_value args[8], o[8];
		cgr_ref ref;
		for (int m = 0; m < M; m++) {
			xv[m] = (uint64_t)(it * 10 + m);
			args[m] = cgr_value_bytes(&xv[m], 8);
		}
		if (cgr_execute(c, args, (size_t)M, &ref) ||
		    cgr_ref_get(c, ref, -1, o, (size_t)M)) {
			bad++;
			continue;
		}
		for (int m = 0; m < M; m++) {
			uint64_t f[4], b, v;
			for (int s = 0; s < S; s++)
				f[s] = (s ? f[s - 1] : xv[m]) * 3 + (uint64_t)s;
			b = f[S - 1] + f[S - 1];
			for (int s = S - 2; s >= 0; s--)
				b = f[s] + b;
			memcpy(&v, o[m].u.bytes.data, 8);
			bad += v != b;
		}
		cgr_ref_release(c, ref);
	}
	t_is(bad, 0, "1F1B %dx%d: %ld executions correct", S, M, iters);
	cgr_compiled_destroy(c);
}

/* Three outputs: tensor j has j + 1 rows of 3; element i of tensor j is
 * t_coll_elem(x, rank, i) + 100 * j.  On x == bad_exec tensor 1 has one row
 * more. */
static int fill3_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	const struct fill *f = cgr_task_arg(tc);
	static __thread int64_t shape[3][2];
	uint64_t x;
	(void)st, (void)nin;
	memcpy(&x, in[0].u.bytes.data, 8);
	for (size_t j = 0; j < nout; j++) {
		int rows = (int)j + 1 + ((int)x == f->bad_exec && j == 1);
		int64_t *o = cgr_task_output_buffer(tc, j, (size_t)rows * 24);
		for (int i = 0; i < rows * 3; i++)
			o[i] = t_coll_elem(x, f->rank, i) + 100 * (int64_t)j;
		shape[j][0] = rows;
		shape[j][1] = 3;
		out[j] = cgr_value_tensor(o, kDLInt, 64, 2,
						shape[j]);
	}
	return 0;
}

/* Buckets: 3 tensors per member fused into one allreduce / allgather. */
static void check_bucket(int kind, long iters)
{
	static struct fill f[3];
	const int n = 3, k = 3;
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *ins[9], *outs[9];
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	long bad = 0, errs = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int r = 0; r < n; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		f[r] = (struct fill){ r, 0, r == 1 ? 4 : -1, -1 };
		d.name = "fill3", d.fn = fill3_fn;
		T_ARG(d, &f[r]);
		d.flags = G_TASK_FLAGS;
		cgr_graph_task(g, W[r], &d, &x, 1, &ins[r * k], (size_t)k);
	}
	p.kind = kind;
	p.name = "bucket";
	p.ntensors = (size_t)k;
	t_is(cgr_graph_collective(g, &p, W, (size_t)n, ins, (size_t)(n * k),
				  outs, (size_t)(n * k)),
	     0, "bucketed %s node", kind == CGR_COLL_ALLREDUCE ? "allreduce" :
							      "allgather");
	cgr_graph_output(g, outs, (size_t)(n * k));
	t_is(cgr_graph_compile(g, &G_PP, &c), 0, "compiles: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	for (long it = 1; it <= iters; it++) {
		uint64_t xv = (uint64_t)it;
		cgr_value a = cgr_value_bytes(&xv, 8), o[9];
		cgr_ref ref;
		if (cgr_execute(c, &a, 1, &ref) ||
		    cgr_ref_get(c, ref, -1, o, (size_t)(n * k))) {
			bad++;
			continue;
		}
		for (int r = 0; r < n; r++)
			for (int j = 0; j < k; j++) {
				const cgr_value *v = &o[r * k + j];
				int per = (j + 1) * 3;
				if (it == 4) {
					errs += v->kind == CGR_VALUE_ERROR &&
						v->code == CGR_EMISMATCH &&
						strstr(v->u.error.msg,
						       "tensor 1 of 3") != NULL;
					continue;
				}
				if (v->kind != CGR_VALUE_TENSOR) {
					bad++;
					continue;
				}
				const int64_t *d = v->u.tensor.data;
				if (kind == CGR_COLL_ALLREDUCE) {
					for (int e = 0; e < per; e++) {
						int64_t want = 0;
						for (int q = 0; q < n; q++)
							want += t_coll_elem(xv, q, e) +
								100 * j;
						bad += d[e] != want;
					}
					bad += v->u.tensor.shape[0] != j + 1;
				} else {
					for (int q = 0; q < n; q++)
						for (int e = 0; e < per; e++)
							bad += d[q * per + e] !=
							       t_coll_elem(xv, q, e) +
								       100 * j;
					bad += v->u.tensor.shape[0] !=
					       (j + 1) * n;
				}
			}
		cgr_ref_release(c, ref);
	}
	t_is(bad, 0, "bucket of 3 tensors x 3 ranks: %ld executions correct",
	     iters);
	t_is(errs, n * k, "a mismatch in tensor 1 fails the whole bucket on "
			  "every member, naming the tensor");
	cgr_compiled_destroy(c);
}

/* A tensor edge with the device transport: sent once to three readers. */
static void check_device_edge(unsigned flags, long iters)
{
	static struct fill f = { 0, 4, -1, -1 };
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *v, *s[4];
	long bad = 0, errs = 0;

	f.bad_exec = (flags & CGR_EDGE_STATIC_SHAPE) ? 5 : -1;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	d.name = "make", d.fn = fill_fn;
	T_ARG(d, &f);
	d.flags = G_TASK_FLAGS;
	cgr_graph_task(g, W[0], &d, &x, 1, &v, 1);
	t_is(cgr_node_set_transport(v, CGR_TRANSPORT_DEVICE, flags), 0,
	     "device transport on make");
	for (int r = 0; r < 4; r++) {
		cgr_task_desc e = CGR_TASK_DESC_INIT;
		e.name = "sum", e.fn = sum_fn;
		cgr_graph_task(g, W[r], &e, &v, 1, &s[r], 1);
	}
	cgr_graph_output(g, s, 4);
	t_is(cgr_graph_compile(g, &G_PP, &c), 0, "device edge compiles: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	for (long it = 1; it <= iters; it++) {
		uint64_t xv = (uint64_t)it;
		cgr_value a = cgr_value_bytes(&xv, 8), o[4];
		cgr_ref ref;
		int rows = (int)it == f.bad_exec ? 5 : 4;
		int64_t want = 0;
		for (int i = 0; i < rows * 3; i++)
			want += t_coll_elem(xv, 0, i);
		if (cgr_execute(c, &a, 1, &ref) || cgr_ref_get(c, ref, -1, o, 4)) {
			bad++;
			continue;
		}
		for (int r = 0; r < 4; r++) {
			int64_t got = 0;
			if ((int)it == f.bad_exec && r > 0) {
				errs += o[r].kind == CGR_VALUE_ERROR;
				continue;
			}
			if (o[r].kind == CGR_VALUE_BYTES)
				memcpy(&got, o[r].u.bytes.data, 8);
			else if (bad < 3)
				t_diag("exec %ld reader %d: %s", it, r,
				       o[r].kind == CGR_VALUE_ERROR ?
					       o[r].u.error.msg :
					       "?");
			bad += got != want;
		}
		cgr_ref_release(c, ref);
	}
	t_is(bad, 0, "device edge%s: %ld executions, every reader correct",
	     flags ? " (static shape)" : "", iters);
	if (flags)
		t_is(errs, 3, "a changed static shape is an error value at the "
			      "3 remote readers");
	cgr_compiled_destroy(c);

	/* No reader on another worker: rejected, naming the node. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	cgr_graph_task(g, W[1], &d, &x, 1, &v, 1);
	cgr_node_set_transport(v, CGR_TRANSPORT_DEVICE, 0);
	cgr_task_desc e = CGR_TASK_DESC_INIT;
	e.name = "local", e.fn = sum_fn;
	cgr_graph_task(g, W[1], &e, &v, 1, &s[0], 1);
	cgr_graph_output(g, s, 1);
	t_is(cgr_graph_compile(g, &G_PP, &c), -EINVAL,
	     "device edge within one worker: %s", cgr_graph_errmsg(g));
	t_ok(strstr(cgr_graph_errmsg(g), "make") != NULL,
	     "the message names the node");
	cgr_graph_destroy(g);
}

/* Two device-transport outputs of one task read by the same workers:
 * one bucketed broadcast carries both. */
static void check_edge_group(long iters)
{
	static struct fill f = { 0, 0, -1, -1 };
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *v[3], *s[3];
	long bad = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	d.name = "make3", d.fn = fill3_fn;
	T_ARG(d, &f);
	d.flags = G_TASK_FLAGS;
	cgr_graph_task(g, W[0], &d, &x, 1, v, 3);
	cgr_node_set_transport(v[0], CGR_TRANSPORT_DEVICE, 0);
	cgr_node_set_transport(v[2], CGR_TRANSPORT_DEVICE, 0);
	for (int r = 1; r < 3; r++) {
		cgr_task_desc e = CGR_TASK_DESC_INIT;
		cgr_node *two[2] = { v[0], v[2] };
		e.name = "sum2", e.fn = sum_fn;
		cgr_graph_task(g, W[r], &e, two, 2, &s[r - 1], 1);
	}
	cgr_task_desc e = CGR_TASK_DESC_INIT;
	e.name = "host", e.fn = sum_fn;
	cgr_graph_task(g, W[3], &e, &v[1], 1, &s[2], 1);
	cgr_graph_output(g, s, 3);
	t_is(cgr_graph_compile(g, &G_PP, &c), 0, "two device edges of one task "
						"compile: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	for (long it = 1; it <= iters; it++) {
		uint64_t xv = (uint64_t)it;
		cgr_value a = cgr_value_bytes(&xv, 8), o[3];
		cgr_ref ref;
		int64_t want = 0, want1 = 0, got;
		for (int i = 0; i < 3; i++)
			want += t_coll_elem(xv, 0, i);
		for (int i = 0; i < 9; i++)
			want += t_coll_elem(xv, 0, i) + 200;
		for (int i = 0; i < 6; i++)
			want1 += t_coll_elem(xv, 0, i) + 100;
		if (cgr_execute(c, &a, 1, &ref) || cgr_ref_get(c, ref, -1, o, 3)) {
			bad++;
			continue;
		}
		for (int r = 0; r < 3; r++) {
			got = 0;
			if (o[r].kind == CGR_VALUE_BYTES)
				memcpy(&got, o[r].u.bytes.data, 8);
			bad += got != (r < 2 ? want : want1);
		}
		cgr_ref_release(c, ref);
	}
	t_is(bad, 0, "both edges, fused into one broadcast: %ld executions",
	     iters);
	cgr_compiled_destroy(c);
}

/* A mixed value: [bytes "x=<x>", tensor [4,3] int64, bytes "end", tensor
 * [5] int32], or [bytes "x=<x>", bytes "end"] when 7 divides x.  A device
 * task's (NCCL build): bytes on the host, tensors copied to its GPU. */
static int mixed_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	static __thread char head[32];
	static __thread int64_t data[12], shape[2] = { 4, 3 }, shape1 = 5;
	static __thread int32_t small[5];
	static __thread cgr_value items[4];
	uint64_t x;
	(void)tc, (void)st, (void)nin, (void)nout;
	memcpy(&x, in[0].u.bytes.data, 8);
	snprintf(head, sizeof(head), "x=%llu", (unsigned long long)x);
	for (int i = 0; i < 12; i++)
		data[i] = t_coll_elem(x, 0, i);
	for (int i = 0; i < 5; i++)
		small[i] = (int32_t)(x + (uint64_t)i);
	items[0] = cgr_value_bytes(head, strlen(head) + 1);
	items[1] = cgr_value_tensor(data, kDLInt, 64, 2,
					shape);
	items[2] = cgr_value_bytes("end", 4);
	items[3] = cgr_value_tensor(small, kDLInt, 32, 1, &shape1);
	/* Every 7th: bytes only (over NCCL nothing to move, nobody calls). */
	if (x % 7 == 0)
		items[1] = items[2];
	out[0] = cgr_value_list(items, x % 7 == 0 ? 2 : 4);
	return 0;
}

/* Whether v is the mixed value of x, its tensors on device dev. */
static bool mixed_ok(const cgr_value *v, uint64_t x, int dev)
{
	const cgr_value *it = v->u.list.items;
	char head[32];
	bool ok;

	snprintf(head, sizeof(head), "x=%llu", (unsigned long long)x);
	if (x % 7 == 0)
		return v->kind == CGR_VALUE_LIST && v->u.list.n == 2 &&
		       it[0].kind == CGR_VALUE_BYTES &&
		       strcmp(it[0].u.bytes.data, head) == 0 &&
		       it[1].kind == CGR_VALUE_BYTES &&
		       strcmp(it[1].u.bytes.data, "end") == 0;
	ok = v->kind == CGR_VALUE_LIST && v->u.list.n == 4 &&
	     it[0].kind == CGR_VALUE_BYTES &&
	     strcmp(it[0].u.bytes.data, head) == 0 &&
	     it[1].kind == CGR_VALUE_TENSOR && it[1].u.tensor.ndim == 2 &&
	     it[1].u.tensor.shape[0] == 4 && it[1].u.tensor.shape[1] == 3 &&
	     it[2].kind == CGR_VALUE_BYTES &&
	     strcmp(it[2].u.bytes.data, "end") == 0 &&
	     it[3].kind == CGR_VALUE_TENSOR && it[3].u.tensor.ndim == 1 &&
	     it[3].u.tensor.shape[0] == 5 && it[3].u.tensor.dtype.bits == 32;
	for (int k = 1; ok && k <= 3; k += 2)
		ok = it[k].u.tensor.device.device_type == G_DEV_TYPE &&
		     it[k].u.tensor.device.device_id == dev;
	/* The model's device memory is host memory: read in place. */
	for (int i = 0; ok && i < 12; i++)
		ok = ((const int64_t *)it[1].u.tensor.data)[i] == t_coll_elem(x, 0, i);
	for (int i = 0; ok && i < 5; i++)
		ok = ((const int32_t *)it[3].u.tensor.data)[i] ==
		     (int32_t)(x + (uint64_t)i);
	return ok;
}

/* Checks a mixed value (arg: the device its tensors must be on); returns
 * an int64 1 if right, 0 if not. */
static int mixed_check_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
			  size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t ok;
	const uint64_t *x = in[1].u.bytes.data;
	(void)st, (void)nin, (void)nout;
	ok = mixed_ok(&in[0], *x, *(const int *)cgr_task_arg(tc));
	out[0] = cgr_value_bytes(&ok, 8);
	return 0;
}

static void check_mixed(long iters)
{
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *v, *chk[3], *outs[4];
	long bad = 0;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	d.name = "mixed", d.fn = mixed_fn, d.flags = G_TASK_FLAGS;
	cgr_graph_task(g, W[0], &d, &x, 1, &v, 1);
	cgr_node_set_transport(v, CGR_TRANSPORT_DEVICE, 0);
	for (int r = 0; r < 3; r++) {
		static const int on_dev[3] = { G_DEV(1), G_DEV(2), G_DEV(3) };
		cgr_task_desc e = CGR_TASK_DESC_INIT;
		cgr_node *two[2] = { v, x };
		e.name = "check", e.fn = mixed_check_fn;
		T_ARG(e, &on_dev[r]);
		cgr_graph_task(g, W[r + 1], &e, two, 2, &chk[r], 1);
	}
	outs[0] = chk[0], outs[1] = chk[1], outs[2] = chk[2], outs[3] = v;
	cgr_graph_output(g, outs, 4);
	t_is(cgr_graph_compile(g, &G_PP, &c), 0, "mixed value graph: %s",
	     cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	for (long it = 1; it <= iters; it++) {
		uint64_t xv = (uint64_t)it;
		cgr_value a = cgr_value_bytes(&xv, 8), o[4];
		cgr_ref ref;
		if (cgr_execute(c, &a, 1, &ref) || cgr_ref_get(c, ref, -1, o, 4)) {
			bad++;
			continue;
		}
		for (int r = 0; r < 3; r++) {
			int64_t ok = 0;
			if (o[r].kind == CGR_VALUE_BYTES)
				memcpy(&ok, o[r].u.bytes.data, 8);
			else if (bad < 2)
				t_diag("reader %d: %s", r,
				       o[r].kind == CGR_VALUE_ERROR ?
					       o[r].u.error.msg :
					       "?");
			bad += ok != 1;
		}
		bad += !mixed_ok(&o[3], xv, G_DEV(0));
		cgr_ref_release(c, ref);
	}
	t_is(bad, 0, "mixed bytes+tensor value%s: tensors by broadcast, "
		     "bytes by host, to 3 readers and the driver: %ld "
		     "executions",
	     G_TASK_FLAGS ? " of a device task, over NCCL" : "", iters);
	cgr_compiled_destroy(c);
}

#ifdef CGR_FAKE_NCCL
/* Compiles an allreduce of two fill tasks on a and b (device tasks if
 * dev) asking for backend; returns the compile's result, its message in
 * msg. */
static int try_allreduce(cgr_worker *a, cgr_worker *b, unsigned dev0,
			 unsigned dev1, int backend, char *msg, size_t len)
{
	static struct fill f[2] = { { 0, 2, -1, -1 }, { 1, 2, -1, -1 } };
	cgr_worker *m[2] = { a, b };
	unsigned fl[2] = { dev0, dev1 };
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	cgr_node *x, *in[2], *out[2];
	cgr_compiled *c = NULL;
	cgr_graph *g;
	int ret;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int r = 0; r < 2; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = "fill", d.fn = fill_fn;
		T_ARG(d, &f[r]);
		d.flags = fl[r];
		cgr_graph_task(g, m[r], &d, &x, 1, &in[r], 1);
	}
	p.kind = CGR_COLL_ALLREDUCE;
	p.name = "ar";
	p.backend = backend;
	ret = cgr_graph_collective(g, &p, m, 2, in, 2, out, 2);
	if (ret == 0)
		cgr_graph_output(g, out, 2);
	ret = ret ? ret : cgr_graph_compile(g, &G_PP, &c);
	snprintf(msg, len, "%s", cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	if (c != NULL)
		cgr_compiled_destroy(c);
	return ret;
}

/* What cannot go through NCCL is refused at compile, saying why. */
static void check_refusals(void)
{
	const unsigned D = CGR_TASK_DEVICE;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *same, *host;
	char msg[256];
	int ret;

	wp.name = "w0bis", wp.device = 0;
	cgr_worker_create(ctx, &wp, &same);
	wp.name = "nodev", wp.device = CGR_DEVICE_NONE;
	cgr_worker_create(ctx, &wp, &host);
	ret = try_allreduce(W[0], same, D, D, 0, msg, sizeof(msg));
	t_ok(ret == -EINVAL && strstr(msg, "share CUDA device 0"),
	     "device tensors of two workers on one GPU: refused (%s)", msg);
	ret = try_allreduce(W[0], W[1], 0, 0, CGR_BACKEND_NCCL, msg,
			    sizeof(msg));
	t_ok(ret == -EINVAL && strstr(msg, "host tensors"),
	     "host tensors asked onto NCCL: refused (%s)", msg);
	ret = try_allreduce(W[0], W[1], D, D, CGR_BACKEND_CPU, msg,
			    sizeof(msg));
	t_ok(ret == -EINVAL && strstr(msg, "CPU communicator cannot"),
	     "device tensors asked onto the CPU communicator: refused (%s)",
	     msg);
	ret = try_allreduce(W[0], W[1], D, 0, 0, msg, sizeof(msg));
	t_ok(ret == -EINVAL && strstr(msg, "mixes device and host"),
	     "device and host inputs in one collective: refused (%s)", msg);
	ret = try_allreduce(W[0], host, D, D, 0, msg, sizeof(msg));
	t_ok(ret == -EINVAL && strstr(msg, "nodev"),
	     "a device task on a worker without a CUDA device: refused (%s)",
	     msg);
	ret = try_allreduce(W[0], W[1], 0, 0, 0, msg, sizeof(msg));
	t_is(ret, 0, "host tensors on CUDA workers: the CPU communicator");
	cgr_worker_destroy(same, -1);
	cgr_worker_destroy(host, -1);
}

/* Every two devices issued their shared communicators' operations in one
 * order, and nothing NCCL forbids happened. */
static void check_model(const char *when)
{
	long (*misuse)(void), (*ops)(void);
	int (*order)(char *, size_t);
	char msg[256] = "";

	*(void **)&misuse = nccl_sym("fake_nccl_misuse");
	*(void **)&ops = nccl_sym("fake_nccl_ops");
	*(void **)&order = nccl_sym("fake_nccl_order");
	if (misuse == NULL || ops == NULL || order == NULL) {
		t_ok(0, "the NCCL model is loaded (%s)", when);
		return;
	}
	t_ok(ops() > 0, "%s: NCCL ran the collectives (%ld operations)", when,
	     ops());
	t_ok(order(msg, sizeof(msg)) == 0,
	     "%s: one order of NCCL operations on every device %s", when, msg);
	t_is(misuse(), 0, "%s: the model saw nothing NCCL forbids", when);
}

static long nccl_aborts(void)
{
	long (*aborts)(void);
	*(void **)&aborts = nccl_sym("fake_nccl_aborts");
	return aborts != NULL ? aborts() : 0; /* not loaded yet: none */
}
#endif

#ifdef CGR_FAKE_NCCL
/* Stream work that holds its stream until sgate opens (on execution
 * gate_exec only). */
static _Atomic int sgate = 1, sentered;
static uint64_t gate_exec;

static void stream_gate(void *arg)
{
	(void)arg;
	atomic_store(&sentered, 1);
	while (!atomic_load(&sgate))
		sched_yield();
}

static int gated_fill_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
			 size_t nin, cgr_value *out, size_t nout)
{
	uint64_t x;
	memcpy(&x, in[0].u.bytes.data, 8);
	if (x == gate_exec &&
	    cgr_stream_launch_host(cgr_task_stream(tc), stream_gate, NULL) < 0)
		return -1;
	return fill_fn(tc, st, in, nin, out, nout);
}

/* A 3-worker allreduce of fill tasks with `flags`, overlap on. */
static cgr_compiled *failure_graph(unsigned flags)
{
	static struct fill f[3];
	cgr_compile_params pp = G_PP;
	cgr_node *x, *ins[3], *outs[3];
	cgr_compiled *c = NULL;
	cgr_graph *g;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int r = 0; r < 3; r++)
		f[r] = (struct fill){ r, 2, -1, -1 };
	add_fills(g, x, f, 3,
		  flags & CGR_TASK_STREAM ? gated_fill_fn : fill_fn, flags,
		  ins);
	cgr_graph_allreduce(g, ins, 3, CGR_SUM, NULL, outs);
	cgr_graph_output(g, outs, 3);
	pp.overlap = 1;
	if (cgr_graph_compile(g, &pp, &c) != 0)
		t_diag("compile: %s", cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return c;
}

/* Execution ref's outputs (for input xv): 1 all 3 right, 0 all 3
 * CGR_EDEVICE error values whose messages hold `want`, -1 otherwise (a
 * get that timed out, a mix); the first odd message in msg. */
static int failure_get(cgr_compiled *c, cgr_ref ref, uint64_t xv,
		       const char *want, char *msg, size_t len)
{
	cgr_value o[3];
	int good = 0, errs = 0;

	/* Bounded: a hang fails the check instead of the suite. */
	if (cgr_ref_get(c, ref, 20000000000ll, o, 3) != 0) {
		snprintf(msg, len, "get timed out");
		return -1;
	}
	for (int k = 0; k < 3; k++) {
		if (o[k].kind == CGR_VALUE_TENSOR &&
		    ((const int64_t *)o[k].u.tensor.data)[5] ==
			    expect(CGR_COLL_ALLREDUCE, 3, 0, 2, xv, k, 5))
			good++;
		else if (o[k].kind == CGR_VALUE_ERROR &&
			 o[k].code == CGR_EDEVICE &&
			 strstr(o[k].u.error.msg, want) != NULL)
			errs++;
		else if (msg[0] == 0)
			snprintf(msg, len, "member %d: %s", k,
				 o[k].kind == CGR_VALUE_ERROR ?
					 o[k].u.error.msg :
					 "a wrong value");
	}
	cgr_ref_release(c, ref);
	return good == 3 ? 1 : errs == 3 ? 0 : -1;
}

/* One execution, as failure_get; or cgr_execute's error. */
static int failure_exec(cgr_compiled *c, uint64_t xv, const char *want,
			char *msg, size_t len)
{
	cgr_value a = cgr_value_bytes(&xv, 8);
	cgr_ref ref;
	int ret = cgr_execute(c, &a, 1, &ref);

	return ret != 0 ? ret : failure_get(c, ref, xv, want, msg, len);
}

/*
 * Device failures under a running graph, last (the CUDA model's failure
 * is for good): an NCCL asynchronous error turns every execution from
 * then on into CGR_EDEVICE error values on every member, never a hang;
 * a sticky CUDA error under stream tasks does the same for the
 * executions in flight (their stream work enqueued on the dead streams,
 * which never run it) and after, and then the graph takes no more
 * (CGR_EWORKERGONE); teardown is clean.
 */
static void check_device_failure(void)
{
	void (*nfail)(int), (*cfail)(int);
	char msg[600] = "";
	cgr_compiled *c;
	int r, after = 0, bad = 0, gone = 0;

	*(void **)&nfail = nccl_sym("fake_nccl_fail");
	{
		void *h = dlopen(CGR_FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
		*(void **)&cfail = h != NULL ? dlsym(h, "fake_cuda_fail") : NULL;
		if (h != NULL)
			dlclose(h);
	}
	if (nfail == NULL || cfail == NULL) {
		t_ok(0, "the models' failure hooks");
		return;
	}
	c = failure_graph(CGR_TASK_DEVICE);
	for (int i = 1; i <= 3; i++)
		bad += failure_exec(c, (uint64_t)i, "", msg, sizeof(msg)) != 1;
	nfail(6 /* ncclRemoteError */);
	for (int i = 4; i <= 8; i++)
		after += failure_exec(c, (uint64_t)i, "network failure", msg,
				      sizeof(msg)) == 0;
	t_ok(bad == 0 && after == 5,
	     "an NCCL asynchronous error: every execution after it is a "
	     "CGR_EDEVICE error value on all 3 members naming NCCL's "
	     "message, none hangs (%d of 5) %s", after, msg);
	nfail(0);
	t_is(cgr_compiled_teardown(c, 2000000000ll), 0,
	     "...teardown after it is clean");
	cgr_compiled_destroy(c);

	c = failure_graph(CGR_TASK_DEVICE | CGR_TASK_STREAM);
	msg[0] = 0;
	bad = after = 0;
	gate_exec = 4;
	for (int i = 1; i <= 3; i++)
		bad += failure_exec(c, (uint64_t)i, "", msg, sizeof(msg)) != 1;
	/* Executions 4 and 5 in flight, their stream work held; the device
	 * fails under them. */
	uint64_t x4 = 4, x5 = 5;
	cgr_value a4 = cgr_value_bytes(&x4, 8), a5 = cgr_value_bytes(&x5, 8);
	cgr_ref r4, r5;
	atomic_store(&sgate, 0);
	atomic_store(&sentered, 0);
	r = cgr_execute(c, &a4, 1, &r4) | cgr_execute(c, &a5, 1, &r5);
	while (r == 0 && !atomic_load(&sentered))
		sched_yield();
	cfail(700 /* cudaErrorIllegalAddress */);
	atomic_store(&sgate, 1);
	/* Whichever call saw it first names it (the task's enqueue, the
	 * collective's, the watch): CGR_EDEVICE everywhere. */
	t_ok(r == 0 && failure_get(c, r4, 4, "", msg, sizeof(msg)) == 0 &&
		     failure_get(c, r5, 5, "", msg, sizeof(msg)) == 0,
	     "a sticky CUDA error under stream work in flight: those "
	     "executions end in CGR_EDEVICE error values on every member %s",
	     msg);
	for (int i = 6; i <= 24 && !gone; i++) {
		r = failure_exec(c, (uint64_t)i, "", msg, sizeof(msg));
		gone = r == CGR_EWORKERGONE;
		after += r == 0;
		bad += r == -1 || r == 1;
	}
	t_ok(bad == 0 && gone,
	     "...the executions after it too (%d), none hangs, then the graph "
	     "takes no more (CGR_EWORKERGONE) %s",
	     after, msg);
	t_is(cgr_compiled_teardown(c, 2000000000ll), 0,
	     "...teardown after it is clean");
	cgr_compiled_destroy(c);
	cfail(0);
}
#endif

#ifdef T_PROCESS_WORKERS
static const cgr_export exports[] = {
	{ "fill", fill_fn, NULL, NULL },   { "fill3", fill3_fn, NULL, NULL },
	{ "grad", grad_fn, NULL, NULL },   { "sum", sum_fn, NULL, NULL },
	{ "aff", aff_fn, NULL, NULL },	   { "gated", gated_fn, NULL, NULL },
	{ "mixed", mixed_fn, NULL, NULL }, { "mixed_check", mixed_check_fn, NULL, NULL },
	{ NULL, NULL, NULL, NULL },
};
#endif

int main(int argc, char **argv)
{
	long it = t_scale(200);
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
	for (int ov = 0; ov <= 1; ov++) {
		G_PP.overlap = ov;
		t_diag("overlap %s", ov ? "on" : "off");
#ifdef CGR_FAKE_NCCL
		long ab0 = nccl_aborts();
#endif
		/* Fresh workers: the teardown check abandons one. */
		if (cgr_ctx_create(&cp, &ctx) != 0) {
			printf("Bail out! no context\n");
			return 1;
		}
		for (int i = 0; i < 4; i++) {
			cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
			char name[8];
			snprintf(name, sizeof(name), "w%d", i);
			wp.name = name;
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
		}
		for (int kind = CGR_COLL_ALLREDUCE; kind <= CGR_COLL_ALLTOALL; kind++)
			for (int n = 1; n <= 4; n++) {
				bool rooted = kind == CGR_COLL_REDUCE ||
					      kind == CGR_COLL_BROADCAST ||
					      kind == CGR_COLL_GATHER ||
					      kind == CGR_COLL_SCATTER;
				for (int root = 0; root < (rooted ? n : 1); root++)
					check_kind(kind, n, root, it / 4 + 1);
			}
		check_errors();
		check_static(t_scale(100) + 9);
		check_bucket(CGR_COLL_ALLREDUCE, t_scale(300));
		check_bucket(CGR_COLL_ALLGATHER, t_scale(300));
		check_device_edge(0, t_scale(500));
		check_edge_group(t_scale(300));
		check_device_edge(CGR_EDGE_STATIC_SHAPE, 12);
		check_mixed(t_scale(300));
		check_ddp(t_scale(1000), 0);
#ifdef CGR_FAKE_NCCL
		check_refusals();
		check_model(ov ? "overlap on" : "overlap off");
		t_is(nccl_aborts() - ab0, 0, "every graph so far ended with its "
					     "NCCL communicators finalized, none "
					     "aborted");
#elif !defined(T_EAGER) /* eager runs do not model communication */
		check_ddp(5, 2000000);
		check_sim_teardown();
#endif
		check_cyclic(t_scale(1000));
		check_1f1b(2, 2, t_scale(1000));
		check_1f1b(4, 8, t_scale(1000));
#if !defined(T_PROCESS_WORKERS) && !defined(T_EAGER)
		/* Last: each abandons a worker (w2, then w3). */
		check_teardown(W[0], W[1], W[2], false);
		check_teardown(W[0], W[1], W[3], true);
#endif
#ifdef CGR_FAKE_NCCL
		check_model(ov ? "overlap on, after teardown" :
				 "overlap off, after teardown");
		t_is(nccl_aborts() - ab0, 3,
		     "a teardown with operations enqueued for a stuck member "
		     "aborts that communicator (its 3 ranks), only that one");
#endif
		cgr_ctx_destroy(ctx);
	}
#ifdef CGR_FAKE_NCCL
	/* Fresh workers and devices: the CUDA model's failure stays. */
	cgr_ctx_create(&cp, &ctx);
	for (int i = 0; i < 3; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		wp.device = i;
		cgr_worker_create(ctx, &wp, &W[i]);
	}
	check_device_failure();
	cgr_ctx_destroy(ctx);
#endif
	return t_done();
}
