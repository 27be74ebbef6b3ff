/*
 * perf/hosts_coll.c: collective nodes across hosts, one rank of a job a
 * PMIx launcher started (perf/hosts.sh runs it on three network
 * namespaces, then Open MPI's perf/mpi_coll_bw on the same ones, with the
 * same mpirun and transport).  Rank 0 drives a graph per collective and
 * size, one after the other: a task on each member (one worker on each
 * rank) makes its input (writing one element per execution: the rest of
 * its buffer stays, as MPI's benchmark sends the same buffer again), the
 * collective over the
 * three members, and on each member a task that reads its output and
 * answers 8 bytes (the graph's outputs): an execution ends when every
 * member has its output.  Its time, execute to result, includes the
 * driver's trigger to the members on the other hosts and their answers:
 * two hops more than MPI's back-to-back operations.
 *
 * Sizes as mpi_coll_bw has them (the bytes of the whole operation:
 * float32 for the reducing kinds, bytes else; split kinds divide by the
 * members), 8 B and 16 MiB unless -s gives others.  Each case's number
 * is the median over windows of the median of its executions.  Each
 * window runs the node over values, then the same node on a
 * communicator across the hosts (cgr_coll_params.comm: "hosts_ncomm"),
 * alternating.  The link's and graphs' wait mode:
 * PERF_MODE=adaptive (default) or block.  Then the same kinds and sizes
 * on a communicator across the hosts (cgr_comm_create over the three
 * members): a task on each member runs the operations back to back, as
 * MPI's benchmark does, and the driver's member's median is the case's
 * number ("hosts_comm").  Prints a line per case and a JSON line per
 * result ("hosts_coll", "hosts_ncomm", "hosts_comm").  --hier: only the
 * hierarchical case (hier_case).
 */
#include "perf.h"

#include <stdbool.h>

#include <cgr.h>

#define NM 3
#define MAXM 6 /* the hierarchical case: two members per host */

/* Members of the node graphs (graph, run1): NM, or MAXM for hier_case. */
static int nm = NM;
/* --hier: hier_case alone. */
static bool hier_only;
#define MAXC 8
#define MAXS 8

static int gen(cgr_task_ctx *tc, void *state, const cgr_value *in,
	       size_t nin, cgr_value *out, size_t nout)
{
	const uint64_t *bytes = cgr_task_arg(tc);
	static __thread int64_t shape[1];
	int reducing = (int)(bytes[1] != 0);
	size_t n = bytes[0];
	unsigned char *o = cgr_task_output_buffer(tc, 0, n);

	(void)state, (void)nin, (void)nout;
	if (o == NULL)
		return -ENOMEM;
	/* One element per execution (floats: 0 or 1, no denormals). */
	if (reducing)
		memset(o, 0, 4);
	else
		memcpy(o, in[0].u.bytes.data, 1);
	shape[0] = (int64_t)(reducing ? n / 4 : n);
	out[0] = cgr_value_tensor(o, reducing ? kDLFloat : kDLUInt,
				  reducing ? 32 : 8, 1, shape);
	return 0;
}

/* ack: a member's output seen (8 bytes back: its first ones). */
static int ack(cgr_task_ctx *tc, void *state, const cgr_value *in,
	       size_t nin, cgr_value *out, size_t nout)
{
	unsigned char *o = cgr_task_output_buffer(tc, 0, 8);

	(void)state, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_TENSOR || o == NULL)
		return -EINVAL;
	memset(o, 0, 8);
	memcpy(o, in[0].u.tensor.data,
	       cgr_tensor_nbytes(&in[0].u.tensor) < 8 ?
		       cgr_tensor_nbytes(&in[0].u.tensor) :
		       8);
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

static const struct {
	const char *name;
	int kind;
} colls[] = {
	{ "allreduce", CGR_COLL_ALLREDUCE },
	{ "allgather", CGR_COLL_ALLGATHER },
	{ "reducescatter", CGR_COLL_REDUCESCATTER },
	{ "broadcast", CGR_COLL_BROADCAST },
	{ "alltoall", CGR_COLL_ALLTOALL },
};
#define NCOLL (sizeof(colls) / sizeof(colls[0]))

static bool reducing(int kind)
{
	return kind == CGR_COLL_ALLREDUCE || kind == CGR_COLL_REDUCESCATTER;
}

/* Bytes of member r's input for an operation of `bytes` in all. */
static size_t in_bytes(int kind, size_t bytes)
{
	size_t esz = reducing(kind) ? 4 : 1, cnt = bytes / esz;

	/* As mpi_coll_bw counts: split kinds move nm blocks of cnt / nm. */
	if (kind == CGR_COLL_ALLGATHER || kind == CGR_COLL_REDUCESCATTER ||
	    kind == CGR_COLL_ALLTOALL) {
		cnt /= (size_t)nm;
		if (cnt == 0)
			cnt = 1;
		if (kind != CGR_COLL_ALLGATHER)
			cnt *= (size_t)nm;
	}
	return (cnt ? cnt : 1) * esz;
}

/* What a member's "loop" task does: reps operations of kind back to
 * back on communicator id, its input in_bytes. */
struct loop_arg {
	uint64_t id, in_bytes, reps;
	int32_t kind, pad;
};

static int run_comm_op(cgr_comm *c, int r, const struct loop_arg *a,
		       const void *s, void *d)
{
	size_t cnt = a->in_bytes / (reducing(a->kind) ? 4 : 1);
	cgr_dtype dt = reducing(a->kind) ? CGR_FLOAT32 : CGR_UINT8;

	switch (a->kind) {
	case CGR_COLL_ALLREDUCE:
		return cgr_allreduce(c, r, s, d, cnt, dt, CGR_SUM, NULL, NULL);
	case CGR_COLL_ALLGATHER:
		return cgr_allgather(c, r, s, d, cnt, dt, NULL, NULL);
	case CGR_COLL_REDUCESCATTER:
		return cgr_reducescatter(c, r, s, d, cnt / NM, dt, CGR_SUM,
					 NULL, NULL);
	case CGR_COLL_BROADCAST:
		return cgr_broadcast(c, r, s, d, cnt, dt, 0, NULL, NULL);
	case CGR_COLL_ALLTOALL:
		return cgr_alltoall(c, r, s, d, cnt / NM, dt, NULL, NULL);
	default:
		return -EINVAL;
	}
}

/* loop: a member's reps operations on the communicator across hosts,
 * back to back as MPI's benchmark runs them; the median of their times
 * (double, us) out. */
static int loop(cgr_task_ctx *tc, void *state, const cgr_value *in,
		size_t nin, cgr_value *out, size_t nout)
{
	const struct loop_arg *a = cgr_task_arg(tc);
	static __thread unsigned char *s, *d;
	static __thread size_t cap;
	static __thread double *lat;
	size_t need = a->in_bytes * NM + 64;
	double *o = cgr_task_output_buffer(tc, 0, sizeof(double));
	cgr_comm *c;
	int r, ret;

	(void)state, (void)in, (void)nin, (void)nout;
	if (o == NULL || (ret = cgr_task_comm(tc, a->id, &c, &r)) != 0)
		return o == NULL ? -ENOMEM : ret;
	if (cap < need) {
		free(s), free(d);
		s = calloc(1, need), d = calloc(1, need);
		cap = s && d ? need : 0;
		if (cap == 0)
			return -ENOMEM;
	}
	free(lat);
	if ((lat = calloc(a->reps + 1, sizeof(*lat))) == NULL)
		return -ENOMEM;
	for (uint64_t i = 0; i < a->reps; i++) {
		int64_t t0 = perf_now_ns();
		if ((ret = run_comm_op(c, r, a, s, d)) != 0) {
			cgr_task_set_error(tc, ret, "%s", cgr_comm_errmsg(c, r));
			return ret;
		}
		lat[i] = (double)(perf_now_ns() - t0) / 1e3;
	}
	*o = perf_median(lat, a->reps);
	out[0] = cgr_value_bytes(o, sizeof(*o));
	return 0;
}

static const cgr_export exports[] = {
	{ "gen", gen, NULL, NULL },
	{ "ack", ack, NULL, NULL },
	{ "loop", loop, NULL, NULL },
	{ NULL, NULL, NULL, NULL },
};

static cgr_compiled *graph(cgr_ctx *ctx, cgr_worker *const *w, int kind,
			   size_t bytes, int mode, cgr_comm *comm)
{
	cgr_coll_params p = CGR_COLL_PARAMS_INIT;
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_node *arg, *in[MAXM], *out[MAXM], *acks[MAXM];
	size_t nin = kind == CGR_COLL_BROADCAST ? 1 : (size_t)nm;
	size_t ib = in_bytes(kind, bytes), cap = (size_t)nm * ib + 4096;
	uint64_t targ[2] = { ib, reducing(kind) };
	cgr_compiled *c = NULL;
	cgr_graph *g;
	int ret = cgr_graph_create(ctx, &g);

	if (ret == 0)
		ret = cgr_graph_input(g, 0, &arg);
	for (size_t r = 0; r < nin && ret == 0; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = "gen";
		d.fn = gen;
		d.arg_data = targ;
		d.arg_len = sizeof(targ);
		d.max_out_bytes = ib;
		ret = cgr_graph_task(g, w[r], &d, &arg, 1, &in[r], 1);
	}
	p.name = "c";
	p.kind = kind;
	p.op = CGR_SUM;
	p.max_out_bytes = cap;
	p.comm = comm;
	/* Without one: over values (AUTO would give an allreduce of 1 MiB
	 * or more a communicator of its own, the hosts_ncomm case). */
	p.backend = comm == NULL ? CGR_BACKEND_CPU : CGR_BACKEND_AUTO;
	if (ret == 0)
		ret = cgr_graph_collective(g, &p, w, (size_t)nm, in, nin, out,
					   (size_t)nm);
	/* Every member's output seen where it is: 8 bytes each back. */
	for (size_t r = 0; r < (size_t)nm && ret == 0; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = "ack";
		d.fn = ack;
		d.max_out_bytes = 8;
		ret = cgr_graph_task(g, w[r], &d, &out[r], 1, &acks[r], 1);
	}
	if (ret == 0)
		ret = cgr_graph_output(g, acks, (size_t)nm);
	cp.max_inflight = 1;
	cp.max_value_bytes = cap;
	cp.wait_mode = mode;
	cp.get_timeout_ns = 60ll * 1000000000;
	if (ret == 0)
		ret = cgr_graph_compile(g, &cp, &c);
	if (ret != 0)
		fprintf(stderr, "graph %d %zu: %s\n", kind, bytes,
			cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return c;
}

/* The "loop" graph: a task on each member running reps operations of
 * kind on communicator id. */
static cgr_compiled *loop_graph(cgr_ctx *ctx, cgr_worker *const *w,
				uint64_t id, int kind, size_t bytes,
				uint64_t reps)
{
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	struct loop_arg la = { id, in_bytes(kind, bytes), reps, kind, 0 };
	cgr_node *arg, *out[NM];
	cgr_compiled *c = NULL;
	cgr_graph *g;
	int ret = cgr_graph_create(ctx, &g);

	if (ret == 0)
		ret = cgr_graph_input(g, 0, &arg);
	for (size_t r = 0; r < NM && ret == 0; r++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = "loop";
		d.fn = loop;
		d.arg_data = &la;
		d.arg_len = sizeof(la);
		d.max_out_bytes = sizeof(double);
		ret = cgr_graph_task(g, w[r], &d, &arg, 1, &out[r], 1);
	}
	if (ret == 0)
		ret = cgr_graph_output(g, out, NM);
	cp.get_timeout_ns = 600ll * 1000000000;
	if (ret == 0)
		ret = cgr_graph_compile(g, &cp, &c);
	if (ret != 0)
		fprintf(stderr, "loop graph %d %zu: %s\n", kind, bytes,
			cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return c;
}

/* The communicator's cases: per kind and size, the median over windows
 * of the driver's member's median operation (us) in comm[k][s]. */
static int comm_cases(cgr_ctx *ctx, cgr_worker *const *w, long iters,
		      int windows, const size_t *sizes, size_t ns,
		      double comm[][MAXS])
{
	static double med[64];
	cgr_comm *cm;

	if (cgr_comm_create(ctx, w, NM, CGR_BACKEND_CPU, &cm) != 0)
		return 1;
	for (size_t k = 0; k < NCOLL; k++)
		for (size_t s = 0; s < ns; s++) {
			long n = sizes[s] >= (1u << 20) ?
					 (iters / 100 > 3 ? iters / 100 : 3) :
					 iters;
			uint64_t reps = (uint64_t)n;
			cgr_compiled *c = loop_graph(ctx, w, cgr_comm_id(cm),
						     colls[k].kind, sizes[s],
						     reps);
			for (int win = 0; c != NULL && win < windows; win++) {
				unsigned char b = 0;
				cgr_value a = cgr_value_bytes(&b, 1), o[NM];
				cgr_ref ref;
				if (cgr_execute(c, &a, 1, &ref) != 0 ||
				    cgr_ref_get(c, ref, -1, o, NM) != 0 ||
				    o[0].kind != CGR_VALUE_BYTES) {
					fprintf(stderr, "comm %s: %s\n",
						colls[k].name,
						o[0].kind == CGR_VALUE_ERROR ?
							o[0].u.error.msg : "?");
					return 1;
				}
				memcpy(&med[win], o[0].u.bytes.data, 8);
				cgr_ref_release(c, ref);
			}
			if (c == NULL)
				return 1;
			comm[k][s] = perf_median(med, (size_t)windows);
			cgr_compiled_destroy(c);
		}
	cgr_comm_destroy(cm);
	return 0;
}

/* One execution: ns, -1 on failure. */
static int64_t run1(cgr_compiled *c, unsigned char b)
{
	cgr_value a = cgr_value_bytes(&b, 1), o[MAXM];
	cgr_ref ref;
	int64_t t0 = perf_now_ns();

	if (cgr_execute(c, &a, 1, &ref) != 0 ||
	    cgr_ref_get(c, ref, -1, o, (size_t)nm) != 0)
		return -1;
	for (int r = 0; r < nm; r++)
		if (o[r].kind != CGR_VALUE_BYTES) {
			if (o[r].kind == CGR_VALUE_ERROR)
				fprintf(stderr, "member %d: %s\n", r,
					o[r].u.error.msg);
			cgr_ref_release(c, ref);
			return -1;
		}
	t0 = perf_now_ns() - t0;
	cgr_ref_release(c, ref);
	return t0;
}

/* One window of case (kind, bytes): n executions of the node over values
 * (comm NULL) or on comm; their median (us), -1 on failure.  Compiled
 * per window: a worker serves one graph at a time, and the two variants
 * alternate window by window. */
static double window(cgr_ctx *ctx, cgr_worker *const *w, int kind,
		     size_t bytes, int mode, cgr_comm *comm, long n,
		     double *lat)
{
	cgr_compiled *c = graph(ctx, w, kind, bytes, mode, comm);

	if (c == NULL || run1(c, 1) < 0) {
		cgr_compiled_destroy(c);
		return -1;
	}
	for (long i = 0; i < n; i++) {
		int64_t t = run1(c, (unsigned char)i);
		if (t < 0) {
			cgr_compiled_destroy(c);
			return -1;
		}
		lat[i] = (double)t / 1e3;
	}
	cgr_compiled_destroy(c);
	return perf_median(lat, (size_t)n);
}

static void report(const char *tag, const size_t *sizes, size_t ns,
		   int windows, double (*med)[MAXS][64])
{
	for (size_t k = 0; k < NCOLL; k++)
		for (size_t s = 0; s < ns; s++) {
			double us = perf_median(med[k][s], (size_t)windows);
			char cs[48];
			snprintf(cs, sizeof(cs), "%s-%zu", colls[k].name,
				 sizes[s]);
			printf("%s %-14s %10zu B  %10.1f us  %8.3f GB/s\n",
			       tag, colls[k].name, sizes[s], us,
			       (double)sizes[s] / us / 1e3);
			perf_json(tag, cs, "cgr", "time", us, "us",
				  "\"bytes\":%zu", sizes[s]);
		}
}

/*
 * The hierarchical case: an allreduce of 16 MiB over two members on each
 * host (w3 and a second worker it makes on each rank, rank order), over
 * values (a host receives the 4 inputs of the other hosts) and on a
 * communicator over the six (a leader per host folds its two, the
 * leaders reduce-scatter and allgather: a host sends 4/3 of an input),
 * then an allgather of 16 MiB (each member's 16/6 MiB) the same two ways
 * (on the communicator each input lands at one rank of each other host,
 * the other rank there copies it) and an alltoall (each block lands at
 * its rank), window by window.  Prints "hosts_hier" lines.
 */
static int hier_case(cgr_ctx *ctx, cgr_worker *const *w3, long n,
		     int windows, int mode, double *lat)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w[MAXM] = { NULL };
	double med[3][2][64];
	const char *how[2] = { "values", "comm" };
	const int ci[3] = { 0, 1, 4 }; /* colls[]: allreduce, allgather,
					  alltoall */
	cgr_comm *cm = NULL;
	int ret = 0;

	for (int r = 0; r < NM && ret == 0; r++) {
		char name[8];
		snprintf(name, sizeof(name), "m%db", r);
		wp.name = name;
		wp.rank = r;
		w[2 * r] = w3[r];
		ret = cgr_worker_create(ctx, &wp, &w[2 * r + 1]);
	}
	nm = MAXM;
	if (ret == 0)
		ret = cgr_comm_create(ctx, w, MAXM, CGR_BACKEND_CPU, &cm);
	for (int win = 0; win < windows && ret == 0; win++)
		for (int k = 0; k < 3 && ret == 0; k++)
			for (int v = 0; v < 2 && ret == 0; v++) {
				med[k][v][win] = window(ctx, w,
							colls[ci[k]].kind,
							16u << 20, mode,
							v ? cm : NULL, n, lat);
				ret = med[k][v][win] < 0;
			}
	nm = NM;
	cgr_comm_destroy(cm);
	for (int r = 0; r < NM; r++)
		cgr_worker_destroy(w[2 * r + 1], 5000000000ll);
	if (ret != 0)
		return 1;
	printf("an allreduce, an allgather and an alltoall node of 16 MiB "
	       "over two members per host (six), over values and on a "
	       "communicator, window by window:\n");
	for (int k = 0; k < 3; k++)
		for (int v = 0; v < 2; v++) {
			const char *kn = colls[ci[k]].name;
			double us = perf_median(med[k][v], (size_t)windows);
			char cs[48];
			printf("hosts_hier %-8s %-9s %10u B  %10.1f us  %8.3f "
			       "GB/s\n",
			       how[v], kn, 16u << 20, us,
			       (double)(16u << 20) / us / 1e3);
			snprintf(cs, sizeof(cs), "%s-%s", how[v], kn);
			perf_json("hosts_hier", cs, "cgr", "time", us, "us",
				  "\"bytes\":%u", 16u << 20);
		}
	return 0;
}

static int drive(cgr_ctx *ctx, const struct perf_opts *o, const size_t *sizes,
		 size_t ns)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	const char *env = getenv("PERF_MODE");
	int mode = env && !strcmp(env, "block") ? CGR_WAIT_BLOCK :
						  CGR_WAIT_ADAPTIVE;
	cgr_worker *w[NM];
	static double med[NCOLL][MAXS][64], onc[NCOLL][MAXS][64];
	cgr_comm *cm = NULL;
	double *lat;
	long iters = o->iters;
	int windows = o->windows > 64 ? 64 : o->windows;

	for (int r = 0; r < NM; r++) {
		char name[8];
		snprintf(name, sizeof(name), "m%d", r);
		wp.name = name;
		wp.rank = r;
		if (cgr_worker_create(ctx, &wp, &w[r]) != 0)
			return 1;
	}
	static double comm[NCOLL][MAXS];

	if (hier_only) {
		lat = calloc((size_t)iters + 3, sizeof(*lat));
		if (lat == NULL ||
		    hier_case(ctx, w, iters / 100 > 3 ? iters / 100 : 3,
			      windows, mode, lat) != 0)
			return 1;
		free(lat);
		return 0;
	}
	if (comm_cases(ctx, w, iters, windows, sizes, ns, comm) != 0)
		return 1;
	lat = calloc((size_t)iters + 3, sizeof(*lat));
	if (lat == NULL ||
	    cgr_comm_create(ctx, w, NM, CGR_BACKEND_CPU, &cm) != 0)
		return 1;
	for (size_t k = 0; k < NCOLL; k++)
		for (size_t s = 0; s < ns; s++)
			for (int win = 0; win < windows; win++) {
				/* Big ones: fewer, at least 3. */
				long n = sizes[s] >= (1u << 20) ?
						 (iters / 100 > 3 ? iters / 100 : 3) :
						 iters;
				med[k][s][win] = window(ctx, w, colls[k].kind,
							sizes[s], mode, NULL,
							n, lat);
				onc[k][s][win] = window(ctx, w, colls[k].kind,
							sizes[s], mode, cm, n,
							lat);
				if (med[k][s][win] < 0 || onc[k][s][win] < 0)
					return 1;
			}
	cgr_comm_destroy(cm);
	if (hier_case(ctx, w, iters / 100 > 3 ? iters / 100 : 3, windows, mode,
		      lat) != 0)
		return 1;
	printf("cgr collectives across 3 hosts (%s; execute to result, one "
	       "member per host; medians of %d windows): over values\n",
	       mode == CGR_WAIT_BLOCK ? "parked" : "adaptive", windows);
	report("hosts_coll", sizes, ns, windows, med);
	printf("the same nodes on a communicator across the hosts "
	       "(cgr_coll_params.comm), window by window with the above:\n");
	report("hosts_ncomm", sizes, ns, windows, onc);
	printf("cgr communicator across 3 hosts (cgr_comm_create with one "
	       "member per host; a task on each runs the operations back to "
	       "back; the driver's member's median, medians of %d "
	       "windows):\n",
	       windows);
	for (size_t k = 0; k < NCOLL; k++)
		for (size_t s = 0; s < ns; s++) {
			char cs[48];
			snprintf(cs, sizeof(cs), "%s-%zu", colls[k].name,
				 sizes[s]);
			printf("hosts_comm %-14s %10zu B  %10.1f us  %8.3f "
			       "GB/s\n",
			       colls[k].name, sizes[s], comm[k][s],
			       (double)sizes[s] / comm[k][s] / 1e3);
			perf_json("hosts_comm", cs, "cgr", "time", comm[k][s],
				  "us", "\"bytes\":%zu", sizes[s]);
		}
	free(lat);
	return 0;
}

int main(int argc, char **argv)
{
	struct perf_opts o = { 5, 200, 0, 0 };
	cgr_job_params jp = CGR_JOB_PARAMS_INIT;
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	size_t sizes[MAXS] = { 8, 16u << 20 }, ns = 2;
	char *rest[64];
	int nrest = 0, ret;
	cgr_job *job;
	cgr_ctx *ctx;

	rest[nrest++] = argv[0];
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-s") && i + 1 < argc) {
			char *tok, *save = NULL;
			ns = 0;
			for (tok = strtok_r(argv[++i], ",", &save);
			     tok && ns < MAXS; tok = strtok_r(NULL, ",", &save))
				sizes[ns++] = (size_t)strtoull(tok, NULL, 10);
		} else if (!strcmp(argv[i], "--hier")) {
			hier_only = true;
		} else if (nrest < 63) {
			rest[nrest++] = argv[i];
		}
	}
	rest[nrest] = NULL;
	if (perf_parse(nrest, rest, &o,
		       "collective nodes across 3 hosts (a rank program: "
		       "perf/hosts.sh); own options: -s BYTES[,BYTES], --hier (the "
		       "hierarchical case only)"))
		return 2;
	jp.wait_mode = getenv("PERF_MODE") && !strcmp(getenv("PERF_MODE"),
						      "block") ?
			       CGR_WAIT_BLOCK :
			       CGR_WAIT_ADAPTIVE;
	if (cgr_job_join(&jp, &job) != 0)
		return 1;
	if (cgr_job_size(job) != NM) {
		printf("hosts_coll: run under a PMIx launcher with %d ranks "
		       "(this job has %d)\n", NM, cgr_job_size(job));
		cgr_job_leave(job);
		return 0;
	}
	if (cgr_job_rank(job) != cgr_job_driver(job)) {
		ret = cgr_job_serve(job, exports);
		cgr_job_leave(job);
		return ret != 0;
	}
	cp.job = job;
	cp.exports = exports;
	if ((ret = cgr_ctx_create(&cp, &ctx)) != 0) {
		cgr_job_leave(job);
		return 1;
	}
	ret = drive(ctx, &o, sizes, ns);
	cgr_ctx_destroy(ctx);
	cgr_job_leave(job);
	return ret;
}
