/*
 * tests/comm-task.c: tasks that use a communicator directly
 * (cgr_comm_id, cgr_task_comm; cgr.h).  On one host: a communicator over
 * three thread workers, a graph with a task on each that finds it by id
 * (passed in the graph's input), checks its rank and runs an allreduce;
 * every member's result against a direct sum over many executions.  A
 * worker that is no member, an id that is no communicator's and bad
 * arguments get -ENOENT and -EINVAL.  Ids are distinct and never 0.  The
 * communicator destroyed while two tasks hold it (one waiting in an
 * allreduce the third never calls): they are aborted (-ECANCELED), the
 * execution completes, and the destroy returns.  A task that destroys
 * what it took does not wait for itself.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include <cgr.h>

#include "tap.h"

#define N 3
#define COUNT 37

struct cmd {
	uint64_t id;
	uint32_t seed;
	uint8_t lonely; /* only ranks 0 and 1 call the allreduce */
	uint8_t destroy; /* rank 0 takes it and destroys it itself */
	cgr_worker *w0;
};

static _Atomic int held_logs; /* "still holds" in the log */

static void logf_(void *arg, int level, const char *msg)
{
	(void)arg, (void)level;
	if (strstr(msg, "still holds") != NULL)
		atomic_fetch_add(&held_logs, 1);
}

static _Atomic int taken; /* tasks that hold the communicator */

/* Rank r's input element e. */
static int32_t elem(uint32_t seed, int r, int e)
{
	return (int32_t)(seed * 31u + (uint32_t)r * 1000u + (uint32_t)e);
}

/* Outputs: int32 result code, int32 rank, COUNT int32 sums. */
static int member(cgr_task_ctx *tc, void *state, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	int32_t *o = cgr_task_output_buffer(tc, 0, (2 + COUNT) * 4);
	int32_t x[COUNT] = { 0 };
	struct cmd c;
	cgr_comm *cm = NULL;
	int rank = -1, ret;

	(void)state, (void)nin, (void)nout;
	memcpy(&c, in[0].u.bytes.data, sizeof(c));
	if (c.destroy) {
		/* Only member 0: what it took, it may destroy. */
		ret = 0;
		if (cgr_task_worker(tc) == c.w0 &&
		    (ret = cgr_task_comm(tc, c.id, &cm, &rank)) == 0)
			cgr_comm_destroy(cm);
		o[0] = ret;
		o[1] = rank;
		out[0] = cgr_value_bytes(o, (2 + COUNT) * 4);
		return 0;
	}
	ret = cgr_task_comm(tc, c.id, &cm, &rank);
	if (ret == 0) {
		cgr_comm *again = NULL;
		int r2 = -1;
		/* The same again: no second hold. */
		if (cgr_task_comm(tc, c.id, &again, &r2) != 0 || again != cm ||
		    r2 != rank)
			ret = -EPROTO;
	}
	if (ret == 0 && c.lonely) {
		atomic_fetch_add(&taken, 1);
		if (rank == 2)
			ret = 0; /* never calls */
		else
			ret = cgr_allreduce(cm, rank, x, o + 2, COUNT,
					    CGR_INT32, CGR_SUM, NULL, NULL);
	} else if (ret == 0) {
		for (int e = 0; e < COUNT; e++)
			x[e] = elem(c.seed, rank, e);
		ret = cgr_allreduce(cm, rank, x, o + 2, COUNT, CGR_INT32,
				    CGR_SUM, NULL, NULL);
	}
	o[0] = ret;
	o[1] = rank;
	out[0] = cgr_value_bytes(o, (2 + COUNT) * 4);
	return 0;
}

/* Outputs: cgr_task_comm's code for a member that is not one. */
static int outsider(cgr_task_ctx *tc, void *state, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	int32_t *o = cgr_task_output_buffer(tc, 0, 16);
	struct cmd c;
	cgr_comm *cm = NULL;
	int rank = -1;

	(void)state, (void)nin, (void)nout;
	memcpy(&c, in[0].u.bytes.data, sizeof(c));
	o[0] = cgr_task_comm(tc, c.id, &cm, &rank);
	o[1] = cgr_task_comm(tc, c.id + 1000, &cm, &rank);
	o[2] = cgr_task_comm(tc, c.id, NULL, &rank);
	o[3] = cgr_task_comm(NULL, c.id, &cm, &rank);
	out[0] = cgr_value_bytes(o, 16);
	return 0;
}

/* Outputs: cgr_task_comm's code for the id it is given (another
 * context's, in foreign_ctx). */
static int foreign(cgr_task_ctx *tc, void *state, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	int32_t *o = cgr_task_output_buffer(tc, 0, 8);
	uint64_t id;
	cgr_comm *cm = NULL;
	int rank = -1;

	(void)state, (void)nin, (void)nout;
	memcpy(&id, in[0].u.bytes.data, sizeof(id));
	o[0] = cgr_task_comm(tc, id, &cm, &rank);
	o[1] = cm == NULL && rank == -1;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

/* Ids are unique in the process: a member of this context's first
 * communicator that asks for another context's first one gets -ENOENT,
 * not its own (the audit's case: both were id 1). */
static void foreign_ctx(cgr_ctx *ctx, cgr_worker *w0, uint64_t other_id,
			uint64_t own_id)
{
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compiled *c = NULL;
	cgr_node *arg, *o;
	cgr_graph *g;
	cgr_value v, a = cgr_value_bytes(&other_id, 8);
	cgr_ref ref;
	int ret = cgr_graph_create(ctx, &g);

	d.fn = foreign;
	d.name = "foreign";
	d.max_out_bytes = 8;
	if (ret == 0)
		ret = cgr_graph_input(g, 0, &arg);
	if (ret == 0)
		ret = cgr_graph_task(g, w0, &d, &arg, 1, &o, 1);
	if (ret == 0)
		ret = cgr_graph_output(g, &o, 1);
	if (ret == 0)
		ret = cgr_graph_compile(g, &cp, &c);
	cgr_graph_destroy(g);
	t_ok(other_id != own_id, "another context's first communicator has "
				 "an id of its own (%llu, here %llu)",
	     (unsigned long long)other_id, (unsigned long long)own_id);
	ret = ret ? ret : cgr_execute(c, &a, 1, &ref);
	ret = ret ? ret : cgr_ref_get(c, ref, -1, &v, 1);
	t_ok(ret == 0 && v.kind == CGR_VALUE_BYTES &&
		     ((const int32_t *)v.u.bytes.data)[0] == -ENOENT &&
		     ((const int32_t *)v.u.bytes.data)[1] == 1,
	     "a member given another context's id: -ENOENT, nothing out "
	     "(%d)",
	     ret == 0 ? ((const int32_t *)v.u.bytes.data)[0] : ret);
	cgr_compiled_destroy(c);
}

static cgr_compiled *build(cgr_ctx *ctx, cgr_worker *const *w)
{
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_node *arg, *o[N + 1];
	cgr_compiled *c = NULL;
	cgr_graph *g;
	int ret = cgr_graph_create(ctx, &g);

	if (ret == 0)
		ret = cgr_graph_input(g, 0, &arg);
	for (int r = 0; r <= N && ret == 0; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.fn = r < N ? member : outsider;
		d.max_out_bytes = (2 + COUNT) * 4;
		ret = cgr_graph_task(g, w[r], &d, &arg, 1, &o[r], 1);
	}
	if (ret == 0)
		ret = cgr_graph_output(g, o, N + 1);
	if (ret == 0)
		ret = cgr_graph_compile(g, &cp, &c);
	cgr_graph_destroy(g);
	return c;
}

static void runs(cgr_compiled *c, cgr_comm *cm)
{
	int bad = 0, execs = (int)t_scale(200);

	for (int i = 0; i < execs; i++) {
		struct cmd k = { cgr_comm_id(cm), (uint32_t)i, 0, 0, NULL };
		cgr_value a = cgr_value_bytes(&k, sizeof(k)), o[N + 1];
		cgr_ref ref;
		if (cgr_execute(c, &a, 1, &ref) != 0 ||
		    cgr_ref_get(c, ref, 10000000000ll, o, N + 1) != 0) {
			bad++;
			break;
		}
		for (int r = 0; r < N; r++) {
			const int32_t *v = o[r].u.bytes.data;
			bad += v[0] != 0 || v[1] != r;
			for (int e = 0; e < COUNT; e++) {
				int32_t want = 0;
				for (int q = 0; q < N; q++)
					want += elem(k.seed, q, e);
				bad += v[2 + e] != want;
			}
		}
		if (i == 0) {
			const int32_t *v = o[N].u.bytes.data;
			t_ok(v[0] == -ENOENT && v[1] == -ENOENT &&
				     v[2] == -EINVAL && v[3] == -EINVAL,
			     "a worker that is no member, an unknown id: -ENOENT "
			     "(%d, %d); NULL arguments: -EINVAL (%d, %d)",
			     v[0], v[1], v[2], v[3]);
		}
		cgr_ref_release(c, ref);
	}
	t_ok(bad == 0, "%d executions: every member found the communicator "
		       "by id, its own rank, and the allreduce's sum",
	     execs);
}

/* Destroyed while two tasks hold it, one of them waiting. */
static void destroyed(cgr_compiled *c, cgr_comm *cm)
{
	struct cmd k = { cgr_comm_id(cm), 0, 1, 0, NULL };
	cgr_value a = cgr_value_bytes(&k, sizeof(k)), o[N + 1];
	cgr_ref ref;
	int ret;

	atomic_store(&taken, 0);
	t_is(cgr_execute(c, &a, 1, &ref), 0, "execute the lonely allreduce");
	/* Every member holds it (a real condition, not a nap). */
	while (atomic_load(&taken) < N)
		sched_yield();
	cgr_comm_destroy(cm);
	ret = cgr_ref_get(c, ref, 10000000000ll, o, N + 1);
	t_ok(ret == 0 && ((const int32_t *)o[0].u.bytes.data)[0] == -ECANCELED &&
		     ((const int32_t *)o[1].u.bytes.data)[0] == -ECANCELED &&
		     ((const int32_t *)o[2].u.bytes.data)[0] == 0,
	     "destroyed while its tasks hold it: the waiting ones are "
	     "aborted (-ECANCELED), the execution completes");
	if (ret == 0)
		cgr_ref_release(c, ref);
}

/* A task destroys the communicator it took: no wait for itself. */
static void self_destroy(cgr_ctx *ctx, cgr_compiled *c, cgr_worker *const *w)
{
	struct cmd k = { 0, 0, 0, 1, w[0] };
	cgr_value a, o[N + 1];
	cgr_comm *cm;
	cgr_ref ref;
	int64_t t0;
	bool ok;

	if (cgr_comm_create(ctx, w, N, CGR_BACKEND_CPU, &cm) != 0)
		return;
	k.id = cgr_comm_id(cm);
	a = cgr_value_bytes(&k, sizeof(k));
	t0 = t_now_ns();
	ok = cgr_execute(c, &a, 1, &ref) == 0 &&
	     cgr_ref_get(c, ref, 10000000000ll, o, N + 1) == 0 &&
	     ((const int32_t *)o[0].u.bytes.data)[0] == 0;
	t_ok(ok && atomic_load(&held_logs) == 0,
	     "a task destroys the communicator it took: no wait for itself "
	     "(%.1f ms, %d warnings)",
	     (double)(t_now_ns() - t0) / 1e6, atomic_load(&held_logs));
	if (ok)
		cgr_ref_release(c, ref);
}

int main(int argc, char **argv)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_ctx *ctx, *ctx2;
	cgr_worker *w[N + 1], *w2;
	cgr_comm *cm, *other, *cm2;
	cgr_compiled *c;
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;

	t_init(argc, argv, 120);
	cp.log_fn = logf_;
	cp.log_level = CGR_LOG_WARN;
	/* Another context first, with a communicator of its own. */
	if (cgr_ctx_create(&cp, &ctx2) != 0 ||
	    cgr_worker_create(ctx2, &wp, &w2) != 0 ||
	    cgr_comm_create(ctx2, &w2, 1, CGR_BACKEND_CPU, &cm2) != 0)
		return 1;
	if (cgr_ctx_create(&cp, &ctx) != 0)
		return 1;
	for (int r = 0; r <= N; r++)
		if (cgr_worker_create(ctx, &wp, &w[r]) != 0)
			return 1;
	t_is(cgr_comm_create(ctx, w, N, CGR_BACKEND_CPU, &cm), 0,
	     "a communicator over three workers");
	foreign_ctx(ctx, w[0], cgr_comm_id(cm2), cgr_comm_id(cm));
	t_is(cgr_comm_create(ctx, NULL, 2, CGR_BACKEND_CPU, &other), 0,
	     "another, without members");
	t_ok(cgr_comm_id(cm) != 0 && cgr_comm_id(other) != 0 &&
		     cgr_comm_id(cm) != cgr_comm_id(other) &&
		     cgr_comm_id(NULL) == 0,
	     "ids: distinct, never 0 (NULL: 0)");
	c = build(ctx, w);
	t_ok(c != NULL, "a graph with a task on each member and one outside");
	if (c != NULL) {
		runs(c, cm);
		destroyed(c, cm);
		self_destroy(ctx, c, w);
		cgr_compiled_destroy(c);
	}
	cgr_comm_destroy(other);
	for (int r = 0; r <= N; r++)
		cgr_worker_destroy(w[r], 1000000000);
	cgr_ctx_destroy(ctx);
	cgr_comm_destroy(cm2);
	cgr_worker_destroy(w2, 1000000000);
	cgr_ctx_destroy(ctx2);
	return t_done();
}
