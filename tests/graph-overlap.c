/*
 * tests/graph-overlap.c: overlap never reads a value before it is ready.
 *
 * Random graphs of tasks and collectives (allreduce, reduce, broadcast;
 * some with static shapes) over 3 workers, with some task values on
 * device edges (send and recv streams), run with overlap on (some
 * forced off or on per node) while the communication streams sleep a
 * pseudo-random time before each collective; every value is checked
 * against a direct computation.  Then the mutation check: each WAIT the
 * overlap pass emitted is removed in turn, and the same run must see a
 * wrong value.  The delay has two parts: before the collective, and after
 * it with one member's outputs on one of its streams garbled until its
 * done is published (the pair changes every execution), so a consumer
 * that skipped its WAIT is caught even when another member finished first
 * and told it so through a ring.  The pass drops every WAIT that another
 * ordering implies (compile/prune.c), so every removal must be
 * caught.  (Waits that only keep the collectives' order before one that
 * runs on the worker thread guard no data and are not mutated.)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cgr.h>

#include "compile/compile.h"
#include "t_workers.h"
#include "tap.h"

#define NW 3
/* The late window of a (member, stream); collectives start up to a
 * quarter of it late too (cgr_compiled.debug_coll_delay_ns). */
#define DELAY_NS 1000000

/* The late windows and the mutations need the library's fault injection
 * (--enable-fault-injection, which scripts/test.sh uses); the mutations
 * race on purpose, so TSan builds skip them. */
#ifdef CGR_FAULT_INJECTION
#define set_delay(c) ((c)->debug_coll_delay_ns = DELAY_NS)
#else
#define set_delay(c) ((void)(c))
#endif
#if defined(CGR_TSAN) || !defined(CGR_FAULT_INJECTION)
#define NO_MUTANTS 1
#endif

/* A task: sum of its int64 tensor inputs (element-wise, length 4) plus
 * its id; its value changes every execution through the input.  Sums wrap
 * (a garbled input is any bit pattern). */
static int sum_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	int64_t *o = cgr_task_output_buffer(tc, 0, 32);
	static __thread int64_t shape[1] = { 4 };
	uint64_t id = (uint64_t)(uintptr_t)cgr_task_arg(tc);
	(void)st, (void)nout;
	for (int e = 0; e < 4; e++) {
		uint64_t v = id * 1000 + (uint64_t)e;
		bool err = false;
		for (size_t i = 0; i < nin; i++) {
			if (in[i].kind == CGR_VALUE_BYTES)
				v += *(const uint64_t *)in[i].u.bytes.data;
			else if (in[i].kind == CGR_VALUE_TENSOR)
				v += ((const uint64_t *)in[i].u.tensor.data)[e];
			else
				err = true; /* an error value arrived */
		}
		o[e] = err ? INT64_MIN : (int64_t)v;
	}
	out[0] = cgr_value_tensor(o, kDLInt, 64, 1,
					shape);
	return 0;
}

/*
 * The same sum as a stream task: the function records its inputs and
 * enqueues the sum on the compute stream, which runs it after a
 * pseudo-random lag (inputs of an earlier stream task of the worker may
 * still be in flight when the function runs).
 */
#define SLOTS 16 /* per task: more than max_inflight */
struct sjob {
	uint64_t id, seq;
	size_t nin;
	cgr_value in[3]; /* the call's array is reused: copies */
	int64_t *out;
};
static struct sjob g_sjobs[24][SLOTS];

static void sum_work(void *arg)
{
	struct sjob *j = arg;
	uint64_t h = (j->seq + 1) * 0x9E3779B97F4A7C15ull + j->id;
	struct timespec ts = { 0, (long)((h >> 33) % (DELAY_NS / 4)) };

	nanosleep(&ts, NULL);
	for (int e = 0; e < 4; e++) {
		uint64_t v = j->id * 1000 + (uint64_t)e;
		bool err = false;
		for (size_t i = 0; i < j->nin; i++) {
			const cgr_value *x = &j->in[i];
			if (x->kind == CGR_VALUE_BYTES)
				v += *(const uint64_t *)x->u.bytes.data;
			else if (x->kind == CGR_VALUE_TENSOR)
				v += ((const uint64_t *)x->u.tensor.data)[e];
			else
				err = true;
		}
		j->out[e] = err ? INT64_MIN : (int64_t)v;
	}
}

static int sum_stream_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
			 size_t nin, cgr_value *out, size_t nout)
{
	uint64_t id = (uint64_t)(uintptr_t)cgr_task_arg(tc);
	uint64_t seq = cgr_task_seq(tc);
	struct sjob *j = &g_sjobs[id][seq % SLOTS];
	static __thread int64_t shape[1] = { 4 };
	(void)st, (void)nout;

	j->id = id;
	j->seq = seq;
	j->nin = nin;
	/* What they point to stays valid while the execution is in
	 * flight. */
	for (size_t i = 0; i < nin; i++)
		j->in[i] = in[i];
	j->out = cgr_task_output_buffer(tc, 0, 32);
	if (cgr_stream_launch_host(cgr_task_stream(tc), sum_work, j) != 0)
		return -EIO;
	out[0] = cgr_value_tensor(j->out, kDLInt, 64, 1, shape);
	return 0;
}

/* The model: node values for one execution, computed directly. */
struct model {
	int n;		/* nodes */
	int kind[24];	/* 0 input, 1 task, 2 collective output */
	int in[24][3];	/* task inputs (node indices) */
	int nin[24];
	int members[24][NW]; /* collective: the layer's task nodes */
	int ckind[24], root[24]; /* collective: kind, root */
	int id[24];
	int wk[24];	/* task: its worker */
	cgr_node *node[24];
	int64_t val[24][4];
	int out[24]; /* graph output k is node out[k] */
};

static void model_eval(struct model *m, int64_t x)
{
	for (int i = 0; i < m->n; i++)
		for (int e = 0; e < 4; e++) {
			if (m->kind[i] == 0) {
				m->val[i][e] = x;
			} else if (m->kind[i] == 1) {
				int64_t v = m->id[i] * 1000 + e;
				for (int k = 0; k < m->nin[i]; k++)
					v += m->val[m->in[i][k]][e];
				m->val[i][e] = v;
			} else if (m->ckind[i] == CGR_COLL_BROADCAST) {
				m->val[i][e] =
					m->val[m->members[i][m->root[i]]][e];
			} else { /* allreduce, reduce */
				int64_t v = 0;
				for (int r = 0; r < NW; r++)
					v += m->val[m->members[i][r]][e];
				m->val[i][e] = v;
			}
		}
}

static cgr_worker *W[NW];

/* What a WAIT or SWAIT waits for. */
static const char *wname(const struct cgr__op *op)
{
	return op->tc != NULL ? op->tc->name : op->coll->name;
}

/* A WAIT or SWAIT the mutation check removes (not an order WAIT). */
static bool mutable_wait(const struct cgr__op *op)
{
	return (op->kind == CGR__OP_WAIT && !op->order) ||
	       op->kind == CGR__OP_SWAIT;
}

/* Prints every program, one "#" line each, for a failure report. */
static void dump(const cgr_compiled *c)
{
	for (size_t i = 0; i < c->nprogs; i++) {
		fprintf(stderr, "# program %zu:", i);
		for (size_t k = 0; k < c->progs[i].nops; k++) {
			const struct cgr__op *op = &c->progs[i].ops[k];
			switch (op->kind) {
			case CGR__OP_READ:
				fprintf(stderr, " read(%s)",
					c->ports[c->chans[op->chan].port].name);
				break;
			case CGR__OP_COMPUTE:
				fprintf(stderr, " %s%s(",
					op->tc->stream ? "stream:" : "",
					op->tc->name);
				for (size_t q = 0; q < op->tc->nin; q++) {
					unsigned pt = op->tc->in_ports[q];
					if (pt != CGR__NO_PORT)
						fprintf(stderr, "%s%s",
							q ? "," : "",
							c->ports[pt].name);
				}
				fprintf(stderr, ")");
				break;
			case CGR__OP_COLL:
				fprintf(stderr, " %s(%s%s)",
					op->coll->async ? "issue" : "run",
					op->coll->name,
					op->coll->static_shape ? ",static" :
								 "");
				break;
			case CGR__OP_WAIT:
				fprintf(stderr, " wait%s(%s)",
					op->order ? "-order" : "",
					wname(op));
				break;
			case CGR__OP_SWAIT:
				fprintf(stderr, " swait(%s before %s)",
					op->tc->name, op->coll->name);
				break;
			case CGR__OP_WRITE:
				fprintf(stderr, " write");
				break;
			default: /* the removed WAIT */
				fprintf(stderr, " REMOVED-wait(%s)",
					wname(op));
				break;
			}
		}
		fprintf(stderr, "\n");
	}
}

/* Builds a random layered graph: tasks on random workers, and allreduces
 * over one task per worker.  Returns the graph's outputs in outs. */
static void build(cgr_graph *g, struct model *m, cgr_node **outs, size_t *no)
{
	cgr_node *x;
	memset(m, 0, sizeof(*m));
	cgr_graph_input(g, 0, &x);
	m->node[m->n++] = x;
	for (int layer = 0; layer < 3; layer++) {
		int base = m->n;
		/* one task per worker, inputs from earlier nodes */
		for (int w = 0; w < NW; w++) {
			int i = m->n++;
			cgr_task_desc d = CGR_TASK_DESC_INIT;
			cgr_node *ins[3];
			m->kind[i] = 1;
			m->id[i] = i;
			m->wk[i] = w;
			m->nin[i] = 1 + (int)(t_rand() % 2);
			for (int k = 0; k < m->nin[i]; k++) {
				m->in[i][k] = (int)(t_rand() % (uint64_t)base);
				ins[k] = m->node[m->in[i][k]];
			}
			/* About a third run on the compute stream. */
			if (t_rand() % 3 == 0) {
				d.fn = sum_stream_fn;
				d.flags = CGR_TASK_STREAM;
			} else {
				d.fn = sum_fn;
			}
			d.arg = (void *)(intptr_t)i;
			cgr_graph_task(g, W[w], &d, ins, (size_t)m->nin[i],
				       &m->node[i], 1);
		}
		/* a collective over this layer's tasks: allreduce, reduce
		 * or broadcast, the last two with a random root */
		static const int kinds[3] = { CGR_COLL_ALLREDUCE,
					      CGR_COLL_REDUCE,
					      CGR_COLL_BROADCAST };
		cgr_node *ar_in[NW], *ar_out[NW];
		cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
		cp.kind = kinds[t_rand() % 3];
		cp.root = (int)(t_rand() % NW);
		/* Static shapes skip the agreement, which orders members. */
		cp.static_shape = t_rand() % 3 == 0;
		size_t nin = cp.kind == CGR_COLL_BROADCAST ? 1 : NW;
		size_t nout = cp.kind == CGR_COLL_REDUCE ? 1 : NW;
		for (int w = 0; w < NW; w++)
			ar_in[w] = m->node[base + w];
		if (nin == 1)
			ar_in[0] = m->node[base + cp.root];
		/* Mostly as the graph, sometimes forced on or off: a
		 * collective on the worker thread must keep the order. */
		cp.overlap = (int)(t_rand() % 5);
		if (cp.overlap > CGR_OVERLAP_OFF)
			cp.overlap = CGR_OVERLAP_DEFAULT;
		cgr_graph_collective(g, &cp, W, NW, ar_in, nin, ar_out, nout);
		for (size_t o = 0; o < nout; o++) {
			int i = m->n++;
			m->kind[i] = 2;
			m->ckind[i] = cp.kind;
			m->root[i] = cp.root;
			for (int r = 0; r < NW; r++)
				m->members[i][r] = base + r;
			m->node[i] = ar_out[o];
		}
	}
	/* Outputs: every node nobody consumes (each task reaches one). */
	bool used[24] = { false }, used_by_coll[24] = { false },
	     is_out[24] = { false };
	for (int i = 0; i < m->n; i++) {
		for (int k = 0; k < m->nin[i] && m->kind[i] == 1; k++)
			used[m->in[i][k]] = true;
		for (int r = 0; r < NW && m->kind[i] == 2; r++)
			if (m->ckind[i] != CGR_COLL_BROADCAST ||
			    r == m->root[i])
				used[m->members[i][r]] =
					used_by_coll[m->members[i][r]] = true;
	}
	*no = 0;
	for (int i = 1; i < m->n; i++)
		if (!used[i]) {
			m->out[*no] = i;
			outs[(*no)++] = m->node[i];
			is_out[i] = true;
		}
	cgr_graph_output(g, outs, *no);
	/* Device edges: about half the task values read only by tasks, one
	 * of them on another worker, go by the communicator (send and recv
	 * streams) instead of host rings. */
	for (int i = 1; i < m->n; i++) {
		bool other = false, only_tasks = !used_by_coll[i] && !is_out[i];
		for (int j = 0; j < m->n && m->kind[i] == 1; j++)
			for (int k = 0; k < m->nin[j] && m->kind[j] == 1; k++)
				other |= m->in[j][k] == i &&
					 m->wk[j] != m->wk[i];
		if (m->kind[i] == 1 && other && only_tasks && t_rand() % 2)
			cgr_node_set_transport(m->node[i],
					       CGR_TRANSPORT_DEVICE, 0);
	}
}

/* Runs iters executions; returns the number of wrong values. */
static long run(cgr_compiled *c, struct model *m, cgr_node **outs, size_t no,
		long iters, bool verbose)
{
	long bad = 0;
	(void)outs;
	for (long it = 0; it < iters; it++) {
		int64_t x = it * 7 + 3;
		cgr_value a = cgr_value_bytes(&x, 8), o[24];
		cgr_ref ref;
		int ret = cgr_execute(c, &a, 1, &ref);
		if (ret == 0)
			ret = cgr_ref_get(c, ref, -1, o, no);
		if (ret != 0) {
			if (verbose)
				t_diag("execution %ld: %s", it,
				       cgr_strerror(ret));
			bad++;
			continue;
		}
		model_eval(m, x);
		for (size_t k = 0; k < no; k++) {
			int i = m->out[k];
			if (o[k].kind != CGR_VALUE_TENSOR) {
				if (verbose)
					t_diag("execution %ld: output %zu (node "
					       "%d) is not a tensor: %s",
					       it, k, i,
					       o[k].kind == CGR_VALUE_ERROR ?
						       o[k].u.error.msg :
						       "?");
				bad++;
				continue;
			}
			for (int e = 0; e < 4; e++) {
				int64_t got =
					((const int64_t *)o[k].u.tensor.data)[e];
				if (got != m->val[i][e] && verbose)
					t_diag("execution %ld: output %zu (node "
					       "%d) element %d is %lld, not "
					       "%lld",
					       it, k, i, e, (long long)got,
					       (long long)m->val[i][e]);
				bad += got != m->val[i][e];
			}
		}
		cgr_ref_release(c, ref);
	}
	return bad;
}

/* Builds the graph of seed again and runs it with p and no delays: the
 * short jobs then run on the worker threads at their RUNs (inline_ns),
 * mixed with the stream jobs of stream tasks.  The number of wrong
 * values; *held counts the jobs the threads ran. */
static long run_inline(cgr_ctx *ctx, uint64_t seed,
		       const cgr_compile_params *p, struct model *m,
		       long iters, uint64_t *held)
{
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *outs[24];
	size_t no;
	long bad;

	cgr_graph_create(ctx, &g);
	t__rng = seed;
	build(g, m, outs, &no);
	if (cgr_graph_compile(g, p, &c) != 0) {
		t_diag("compile: %s", cgr_graph_errmsg(g));
		cgr_graph_destroy(g);
		return 1;
	}
	bad = run(c, m, outs, no, iters, true);
	cgr_compiled_teardown(c, -1);
	for (size_t i = 0; i < c->nprogs; i++)
		for (size_t k = 0; k < c->progs[i].nops; k++)
			if (c->progs[i].ops[k].kind == CGR__OP_RUN)
				*held += c->progs[i].ops[k].coll->inline_runs;
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	return bad;
}

/* Builds the graph of seed again, compiles it with p, removes its
 * mutable wait wi and runs it; the number of wrong values (the programs
 * are dumped when none). */
static long mutant(cgr_ctx *ctx, uint64_t seed, const cgr_compile_params *p,
		   size_t wi, struct model *m, long iters)
{
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *outs[24];
	size_t no, seen = 0;
	long bad;

	cgr_graph_create(ctx, &g);
	t__rng = seed; /* the same graph again */
	build(g, m, outs, &no);
	if (cgr_graph_compile(g, p, &c) != 0) {
		cgr_graph_destroy(g);
		return 0;
	}
	for (size_t i = 0; i < c->nprogs; i++)
		for (size_t k = 0; k < c->progs[i].nops; k++)
			if (mutable_wait(&c->progs[i].ops[k]) && seen++ == wi)
				c->progs[i].ops[k].kind = 0;
	set_delay(c);
	bad = run(c, m, outs, no, iters, false);
	if (bad == 0 && p->max_inflight == 1)
		dump(c);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	return bad;
}

int main(int argc, char **argv)
{
	cgr_ctx *ctx;
	/* Not scaled: mostly sleeping, and few graphs give few waits. */
	/* each (rank, stream) late 4 times: 3 ranks x 4 streams */
	long graphs = 12, iters = 48;
	long clean_bad = 0, waits = 0, caught = 0, twaits = 0, inline_bad = 0;
	uint64_t held = 0;

	t_init(argc, argv, 240);
#ifdef CGR_FAKE_CUDART
	/* The stream tasks' host functions stand for kernels, which CUDA
	 * runs concurrently across streams: the model's one host-function
	 * thread per device would serialize them and hide the races the
	 * mutations look for.  Set before any thread reads it. */
	setenv("FAKE_CUDA_HOSTFN", "stream", 1);
#endif
	/* Compute streams on a CUDA device when asked (t_workers.h): the
	 * communication streams then wait for CUDA events. */
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx_create(t_workers_params(&cp), &ctx);
	if (t_workers(ctx, W, NW) != 0)
		return 1;
	for (long gi = 0; gi < graphs; gi++) {
		uint64_t seed = t_rand();
		struct model m;
		cgr_node *outs[24];
		size_t no;
		cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
		pp.overlap = 1;
		pp.max_inflight = 4;

		/* Clean run. */
		cgr_graph *g;
		cgr_compiled *c;
		cgr_graph_create(ctx, &g);
		t__rng = seed;
		build(g, &m, outs, &no);
		if (cgr_graph_compile(g, &pp, &c) != 0) {
			t_ok(0, "compile: %s", cgr_graph_errmsg(g));
			cgr_graph_destroy(g);
			continue;
		}
		set_delay(c);
		long nbad = run(c, &m, outs, no, iters, true);
		if (nbad != 0) {
			t_diag("graph %ld: %ld wrong values", gi, nbad);
			dump(c);
		}
		clean_bad += nbad;
		/* The WAITs the overlap pass emitted, across all programs. */
		size_t nwaits = 0;
		for (size_t i = 0; i < c->nprogs; i++)
			for (size_t k = 0; k < c->progs[i].nops; k++)
				if (mutable_wait(&c->progs[i].ops[k])) {
					nwaits++;
					twaits += c->progs[i].ops[k].tc != NULL;
				}
		cgr_compiled_destroy(c);
		cgr_graph_destroy(g);
		inline_bad += run_inline(ctx, seed, &pp, &m, iters, &held);

		/* Mutations: the same graph (same seed) without one WAIT. */
#ifdef NO_MUTANTS
		nwaits = 0;
#endif
		/* A WAIT may also be what orders a later collective on the
		 * thread after the stream's (no separate order WAIT is then
		 * emitted): without it they can meet out of order on their
		 * communicator and hang, which counts as caught once the gets
		 * time out; a short timeout keeps that cheap. */
		cgr_compile_params mp = pp;
		mp.get_timeout_ns = 1000000000;
		for (size_t wi = 0; wi < nwaits; wi++) {
			long bad = mutant(ctx, seed, &mp, wi, &m, iters);
			/* Detection is by timing: on a loaded machine (CI runs
			 * sanitizer builds in parallel) a consumer may be
			 * descheduled past every late window; and a worker
			 * running executions ahead of the others (in flight
			 * together) may be late while they are still behind.
			 * Up to three more, longer runs with one execution at
			 * a time before calling it missed (a CI distcheck
			 * under load missed one of 40 once, after one). */
			for (int tries = 0; bad == 0 && tries < 3; tries++) {
				cgr_compile_params one = mp;
				one.max_inflight = 1;
				bad = mutant(ctx, seed, &one, wi, &m,
					     2 * iters);
			}
			waits++;
			caught += bad > 0;
			if (bad == 0)
				t_diag("graph %ld: removing wait %zu went "
				       "unnoticed",
				       gi, wi);
		}
	}
	t_is(clean_bad, 0, "%ld random graphs with overlap and random "
			   "communication delays: every value right",
	     graphs);
	t_is(inline_bad, 0, "the same graphs without delays, short jobs on "
			    "the worker threads: every value right");
	t_ok(held > 0, "the threads ran %llu of the collectives' jobs",
	     (unsigned long long)held);
#ifdef NO_MUTANTS
#ifdef CGR_TSAN
	const char *why = "mutations race on purpose: not under TSan";
#else
	const char *why = "no fault injection in this build "
			  "(--enable-fault-injection)";
#endif
	t_skip(why);
	t_skip(why);
	cgr_ctx_destroy(ctx);
	return t_done();
#endif
	t_ok(waits > 0 && twaits > 0,
	     "the overlap pass emitted waits (%ld, %ld of them for stream "
	     "tasks)",
	     waits, twaits);
	t_ok(waits > 0 && caught == waits,
	     "removing a wait is caught in %ld of %ld cases", caught, waits);
	cgr_ctx_destroy(ctx);
	return t_done();
}
