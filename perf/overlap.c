/*
 * perf/overlap.c: overlap of computation and communication, Ray's
 * benchmark shape: 3 senders each compute, then send a tensor to 1
 * receiver (device edges: real copies through the CPU communicator) that
 * computes once per received tensor; 5 executions per sample, overlap off
 * and on, interleaved.  Compute is modelled as an operation of a fixed
 * duration that occupies its worker without burning a core (a sleep: on a
 * GPU a kernel occupies the device, not a host core).
 *
 * The critical-path bound per execution comes from the durations measured
 * alone in the same run: senders compute S in parallel, the receiver's
 * communication stream takes the tensors one after the other (T each),
 * and the receiver computes R after each arrives:
 *   c1 = S + T + R, c2 = max(c1, S + 2T) + R, c3 = max(c2, S + 3T) + R.
 * Also the per-execution cost of the overlap bookkeeping, with zero-
 * duration compute and 8-byte tensors; and a 1F1B pipeline of 4 stages x
 * 8 microbatches with compute and transfers about equal per step, against
 * the critical path of its dependencies and each stage's order.
 */
#include "perf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <stdbool.h>

#include <cgr.h>

static int64_t g_compute_ns;
static int64_t g_sim_ns; /* modelled communication: sim_comm_ns */
static size_t g_elems;
/* Compute on the workers' compute streams (CGR_TASK_STREAM) instead of
 * their threads. */
static int g_stream;

static void model_compute(void)
{
	struct timespec ts = { 0, (long)g_compute_ns };
	if (g_compute_ns > 0)
		nanosleep(&ts, NULL);
}

/*
 * Stream compute: the task enqueues the modelled step and its result
 * (base plus the first element of each input, read when the stream gets
 * there: an input from the worker's previous step may still be in flight
 * when the task's function runs) on the compute stream.
 */
#define SW_SLOTS 16 /* per task: more than max_inflight */
struct swork {
	cgr_value in[2];
	size_t nin;
	float base;
	float *o;
};
struct stask {
	struct swork w[SW_SLOTS];
};
static struct stask g_stasks[2 * 4 * 8]; /* one per task of a graph */
static int g_nstasks;

static void swork_run(void *arg)
{
	struct swork *w = arg;
	float s = w->base;
	model_compute();
	for (size_t i = 0; i < w->nin; i++)
		if (w->in[i].kind == CGR_VALUE_TENSOR)
			s += ((const float *)w->in[i].u.tensor.data)[0];
		else if (w->in[i].kind == CGR_VALUE_BYTES)
			s += *(const float *)w->in[i].u.bytes.data;
	w->o[0] = s;
}

/* Enqueues the step; out[0] is o (a tensor of g_elems, or bytes of one
 * float when elems is 0). */
static int stream_step(cgr_task_ctx *tc, const cgr_value *in, size_t nin,
		       float base, float *o, size_t elems, cgr_value *out)
{
	static __thread int64_t shape[1];
	struct stask *st = cgr_task_arg(tc);
	struct swork *w = &st->w[cgr_task_seq(tc) % SW_SLOTS];

	w->nin = nin < 2 ? nin : 2;
	for (size_t i = 0; i < w->nin; i++)
		w->in[i] = in[i];
	w->base = base;
	w->o = o;
	if (cgr_stream_launch_host(cgr_task_stream(tc), swork_run, w) != 0)
		return -1;
	shape[0] = (int64_t)elems;
	out[0] = elems ? cgr_value_tensor(o, kDLFloat, 32, 1, shape) :
			 cgr_value_bytes(o, sizeof(float));
	return 0;
}

/* A task desc for the current mode; a stream task's arg is set by
 * stask_next() right before it is added. */
static cgr_task_desc task_desc(const char *name, cgr_task_fn fn)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	d.name = name;
	d.fn = fn;
	d.flags = g_stream ? CGR_TASK_STREAM : 0;
	return d;
}

/* The next task's work records (a graph has at most 64 tasks). */
static void *stask_next(void)
{
	if (g_nstasks >= (int)(sizeof(g_stasks) / sizeof(g_stasks[0])))
		abort();
	return &g_stasks[g_nstasks++];
}

static int send_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t shape[1];
	float *o = cgr_task_output_buffer(tc, 0, g_elems * 4);
	(void)st, (void)in, (void)nin, (void)nout;
	if (g_stream)
		return stream_step(tc, in, 0, (float)cgr_task_seq(tc), o,
				   g_elems, out);
	model_compute();
	o[0] = (float)cgr_task_seq(tc);
	shape[0] = (int64_t)g_elems;
	out[0] = cgr_value_tensor(o, kDLFloat, 32, 1,
					shape);
	return 0;
}

static int recv_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	static __thread float s;
	(void)tc, (void)st, (void)nout;
	if (g_stream)
		return stream_step(tc, in, nin, 0,
				   cgr_task_output_buffer(tc, 0, 4), 0, out);
	model_compute();
	s = 0;
	for (size_t i = 0; i < nin; i++)
		if (in[i].kind == CGR_VALUE_TENSOR)
			s += ((const float *)in[i].u.tensor.data)[0];
		else if (in[i].kind == CGR_VALUE_BYTES)
			s += *(const float *)in[i].u.bytes.data;
	out[0] = cgr_value_bytes(&s, sizeof(s));
	return 0;
}

static int build(cgr_ctx *ctx, cgr_worker **w, int overlap, cgr_compiled **c)
{
	cgr_graph *g;
	cgr_node *x, *v[3], *r = NULL;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	int ret;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	g_nstasks = 0;
	for (int i = 0; i < 3; i++) {
		cgr_task_desc d = task_desc("send", send_fn);
		d.max_out_bytes = g_elems * 4 + 64;
		d.arg = stask_next();
		cgr_graph_task(g, w[i], &d, &x, 1, &v[i], 1);
		cgr_node_set_transport(v[i], CGR_TRANSPORT_DEVICE, 0);
	}
	for (int i = 0; i < 3; i++) {
		cgr_task_desc d = task_desc("recv", recv_fn);
		cgr_node *in2[2] = { v[i], r != NULL ? r : v[i] };
		d.arg = stask_next();
		cgr_graph_task(g, w[3], &d, in2, 2, &r, 1);
	}
	cgr_graph_output(g, &r, 1);
	pp.overlap = overlap;
	pp.max_value_bytes = g_elems * 4 + 64;
	pp.sim_comm_ns = g_sim_ns;
	pp.trace_events = getenv("CGR_PERF_TRACE") ? 1000 : 0;
	ret = cgr_graph_compile(g, &pp, c);
	cgr_graph_destroy(g);
	return ret;
}

/* ns per execution over `execs` executions (execute, get, release). */
static double run(cgr_compiled *c, int execs)
{
	int64_t t0 = perf_now_ns();
	for (int i = 0; i < execs; i++) {
		uint64_t v = (uint64_t)i;
		cgr_value a = cgr_value_bytes(&v, 8), o;
		cgr_ref ref;
		if (cgr_execute(c, &a, 1, &ref) || cgr_ref_get(c, ref, -1, &o, 1))
			return -1;
		cgr_ref_release(c, ref);
	}
	return (double)(perf_now_ns() - t0) / execs;
}

struct bc {
	cgr_comm *comm;
	int rank;
	int reps;
	double *lat;
	struct perf_barrier *bar;
};

/* Like the graph, cycle through 8 buffers (its buffer slots), so the
 * copies meet memory as cold as in the graph. */
#define NBUF 8

static void *bc_thread(void *arg)
{
	struct bc *b = arg;
	float *buf[NBUF];
	for (int k = 0; k < NBUF; k++)
		buf[k] = calloc(g_elems ? g_elems : 1, 4);
	for (int i = -NBUF; i < b->reps; i++) {
		float *p = buf[(i + NBUF) % NBUF];
		perf_barrier_wait(b->bar, 2);
		int64_t t0 = perf_now_ns();
		cgr_broadcast(b->comm, b->rank, p, p, g_elems, CGR_FLOAT32, 0,
			      NULL, NULL);
		if (b->rank == 1 && i >= 0)
			b->lat[i] = (double)(perf_now_ns() - t0);
	}
	for (int k = 0; k < NBUF; k++)
		free(buf[k]);
	return NULL;
}

/* One tensor broadcast between two ranks, alone. */
static double comm_alone(cgr_ctx *ctx, int reps)
{
	static struct perf_barrier bar;
	cgr_comm *comm;
	pthread_t t[2];
	struct bc b[2];
	double *lat = calloc((size_t)reps, sizeof(double)), m;

	cgr_comm_create(ctx, NULL, 2, CGR_BACKEND_CPU, &comm);
	for (int i = 0; i < 2; i++) {
		b[i] = (struct bc){ comm, i, reps, lat, &bar };
		pthread_create(&t[i], NULL, bc_thread, &b[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	cgr_comm_destroy(comm);
	m = perf_median(lat, (size_t)reps);
	free(lat);
	return m;
}

/* A sleep of ns (a modelled compute step or transfer), alone. */
static double sleep_alone(int64_t ns, int reps)
{
	double *lat = calloc((size_t)reps, sizeof(double)), m;
	struct timespec ts = { 0, (long)ns };
	for (int i = 0; i < reps; i++) {
		int64_t t0 = perf_now_ns();
		if (ns > 0)
			nanosleep(&ts, NULL);
		lat[i] = (double)(perf_now_ns() - t0);
	}
	m = perf_median(lat, (size_t)reps);
	free(lat);
	return m;
}

/* A transfer alone: the copy, plus its modelled time if any. */
static double transfer_alone(cgr_ctx *ctx, int reps)
{
	return comm_alone(ctx, reps) +
	       (g_sim_ns > 0 ? sleep_alone(g_sim_ns, reps) : 0);
}

/* The bookkeeping cases' medians (us): thread and stream compute, off
 * and on; filled by report(). */
static double g_book[2][2];

/* The floor next to the bookkeeping latencies: a one-cache-line ping-pong
 * between two threads, round trip in ns (median of 2000). */
static _Atomic uint64_t g_line __attribute__((aligned(64)));

static void *pong(void *arg)
{
	for (uint64_t i = 1; i <= (uint64_t)(intptr_t)arg; i++) {
		while (atomic_load_explicit(&g_line, memory_order_acquire) !=
		       2 * i - 1)
			;
		atomic_store_explicit(&g_line, 2 * i, memory_order_release);
	}
	return NULL;
}

static double pingpong_floor(void)
{
	enum { N = 2000 };
	static double lat[N];
	pthread_t t;

	atomic_store(&g_line, 0);
	pthread_create(&t, NULL, pong, (void *)(intptr_t)N);
	for (uint64_t i = 1; i <= N; i++) {
		int64_t t0 = perf_now_ns();
		atomic_store_explicit(&g_line, 2 * i - 1, memory_order_release);
		while (atomic_load_explicit(&g_line, memory_order_acquire) !=
		       2 * i)
			;
		lat[i - 1] = (double)(perf_now_ns() - t0);
	}
	pthread_join(t, NULL);
	return perf_median(lat, N);
}

/* The targets for the bookkeeping cases, from one run. */
static void book_summary(int quiet)
{
	double off = g_book[0][0], on = g_book[0][1], son = g_book[1][1],
	       soff = g_book[1][0], fl = pingpong_floor();

	if (off <= 0 || on <= 0 || son <= 0 || soff <= 0)
		return;
	if (!quiet)
		printf("bookkeeping: on / off (thread compute) %.2fx; stream "
		       "compute on / thread off %.2fx, off / thread off "
		       "%.2fx; floor (one-line ping-pong) %.2f us\n",
		       on / off, son / off, soff / off, fl / 1e3);
	perf_json("overlap", "bookkeeping_summary", "cgr", "on_over_off",
		  on / off, "x",
		  "\"stream_on_over_off\":%.3f,\"stream_off_over_off\":%.3f,"
		  "\"floor_us\":%.3f",
		  son / off, soff / off, fl / 1e3);
}

/* Prints and emits one case: medians of off and on against bound. */
static void report(const char *name, double *off, double *on,
		   int nw, int execs, double C, double T, double bound,
		   int quiet)
{
	double moff = perf_median(off, (size_t)nw),
	       mon = perf_median(on, (size_t)nw);
	if (strncmp(name, "bookkeeping", 11) == 0) {
		g_book[g_stream][0] = moff / 1e3;
		g_book[g_stream][1] = mon / 1e3;
	}
	if (!quiet) {
		printf("%s: compute %.0f us per step, tensor %zu KiB%s, "
		       "transfer alone %.0f us; %d windows of %d executions\n",
		       name, C / 1e3, g_elems * 4 / 1024,
		       g_sim_ns ? " (modelled transfer)" : "", T / 1e3, nw,
		       execs);
		printf("  overlap off  %9.1f us per execution\n", moff / 1e3);
		printf("  overlap on   %9.1f us per execution  (%.0f%% less)\n",
		       mon / 1e3, 100.0 * (1 - mon / moff));
		printf("  critical-path bound %9.1f us: on = %.2fx bound\n",
		       bound / 1e3, mon / bound);
	}
	perf_json("overlap", name, "cgr_off", "time_per_exec", moff / 1e3, "us",
		  "\"bound_us\":%.1f", bound / 1e3);
	perf_json("overlap", name, "cgr_on", "time_per_exec", mon / 1e3, "us",
		  "\"bound_us\":%.1f,\"reduction\":%.3f,\"x_bound\":%.3f",
		  bound / 1e3, 1 - mon / moff, mon / bound);
}

static void shape_case(cgr_ctx *ctx, cgr_worker **w, const char *name,
		       int64_t compute_ns, size_t elems, int64_t sim_ns,
		       int windows, int quiet)
{
	double off[64], on[64], S, T, R;
	int nw = windows < 64 ? windows : 64;

	g_compute_ns = compute_ns;
	g_elems = elems;
	g_sim_ns = sim_ns;
	for (int win = 0; win < nw; win++)
		for (int j = 0; j < 2; j++) {
			int ov = (j + win) % 2;
			cgr_compiled *c;
			if (build(ctx, w, ov, &c) != 0) {
				fprintf(stderr, "compile failed\n");
				exit(1);
			}
			run(c, 10); /* warm up: every buffer slot once */
			(ov ? on : off)[win] = run(c, 5);
			if (getenv("CGR_PERF_TRACE") && win == 0) {
				char path[256];
				snprintf(path, sizeof(path), "%s/%s_%s.json",
					 getenv("CGR_PERF_TRACE"), name,
					 ov ? "on" : "off");
				cgr_compiled_teardown(c, -1);
				cgr_compiled_write_trace(c, path);
				snprintf(path, sizeof(path), "%s/%s_%s.dot",
					 getenv("CGR_PERF_TRACE"), name,
					 ov ? "on" : "off");
				cgr_compiled_write_dot(c, path);
			}
			cgr_compiled_destroy(c);
		}
	S = R = sleep_alone(g_compute_ns, 20);
	T = transfer_alone(ctx, 20);
	double c1 = S + T + R, c2 = (c1 > S + 2 * T ? c1 : S + 2 * T) + R,
	       c3 = (c2 > S + 3 * T ? c2 : S + 3 * T) + R;
	report(name, off, on, nw, 5, S, T, c3, quiet);
}

/* ---- 1F1B: 4 stages x 8 microbatches --------------------------------- */

#define S1 4
#define M1 8

/* A stage step: modelled compute, then its output tensor (the sum of its
 * inputs' first elements, so results stay checkable). */
static int step_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t shape[1];
	float *o = cgr_task_output_buffer(tc, 0, g_elems * 4);
	(void)st, (void)nout;
	if (g_stream)
		return stream_step(tc, in, nin, 1, o, g_elems, out);
	model_compute();
	o[0] = 1;
	for (size_t i = 0; i < nin; i++)
		if (in[i].kind == CGR_VALUE_TENSOR)
			o[0] += ((const float *)in[i].u.tensor.data)[0];
	shape[0] = (int64_t)g_elems;
	out[0] = cgr_value_tensor(o, kDLFloat, 32, 1, shape);
	return 0;
}

/*
 * Builds 1F1B over S1 workers: F(s,m) after F(s-1,m), B(s,m) after
 * B(s+1,m) and F(s,m); each worker binds its steps in 1F1B order (S1-s-1
 * warm-up forwards, then alternating).  Values crossing workers use device
 * edges.  Also returns the critical path from op durations: every step C,
 * every crossing T, steps of one worker one after another in their order.
 */
static int build_1f1b(cgr_ctx *ctx, cgr_worker **w, int overlap,
		      cgr_compiled **c, double C, double T, double *bound)
{
	cgr_graph *g;
	cgr_node *x, *F[S1][M1], *B[S1][M1];
	double fend[S1][M1], bend[S1][M1], wend[S1] = { 0 };
	int fi[S1] = { 0 }, bi[S1] = { 0 }, done = 0;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	int ret;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	g_nstasks = 0;
	while (done < 2 * S1 * M1) {
		for (int s = 0; s < S1; s++) {
			int warm = S1 - s - 1;
			cgr_task_desc d = task_desc(NULL, step_fn);
			d.max_out_bytes = g_elems * 4 + 64;
			if (fi[s] < M1 && (fi[s] < warm + 1 + bi[s] || bi[s] >= M1)) {
				int m = fi[s];
				if (s > 0 && fi[s - 1] <= m)
					continue;
				cgr_node *in = s ? F[s - 1][m] : x;
				double ready = s ? fend[s - 1][m] + T : 0;
				d.name = "F";
				d.arg = stask_next();
				cgr_graph_task(g, w[s], &d, &in, 1, &F[s][m], 1);
				if (s < S1 - 1)
					cgr_node_set_transport(
						F[s][m], CGR_TRANSPORT_DEVICE, 0);
				fend[s][m] = (ready > wend[s] ? ready : wend[s]) + C;
				wend[s] = fend[s][m];
				fi[s]++, done++;
			} else if (bi[s] < M1) {
				int m = bi[s];
				if (fi[s] <= m || (s < S1 - 1 && bi[s + 1] <= m))
					continue;
				cgr_node *in2[2] = { F[s][m],
						     s < S1 - 1 ? B[s + 1][m] :
								  F[s][m] };
				double ready = s < S1 - 1 ? bend[s + 1][m] + T : 0;
				if (fend[s][m] > ready)
					ready = fend[s][m];
				d.name = "B";
				d.arg = stask_next();
				cgr_graph_task(g, w[s], &d, in2, 2, &B[s][m], 1);
				if (s > 0)
					cgr_node_set_transport(
						B[s][m], CGR_TRANSPORT_DEVICE, 0);
				bend[s][m] = (ready > wend[s] ? ready : wend[s]) + C;
				wend[s] = bend[s][m];
				bi[s]++, done++;
			}
		}
	}
	/* Stage 0's backward outputs (host transport) go to the driver. */
	cgr_graph_output(g, B[0], M1);
	pp.overlap = overlap;
	pp.max_value_bytes = g_elems * 4 + 64;
	pp.sim_comm_ns = g_sim_ns;
	ret = cgr_graph_compile(g, &pp, c);
	if (ret != 0)
		fprintf(stderr, "1f1b: %s\n", cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	*bound = 0;
	for (int m = 0; m < M1; m++)
		if (bend[0][m] > *bound)
			*bound = bend[0][m];
	return ret;
}

static double run_1f1b(cgr_compiled *c, int execs)
{
	int64_t t0 = perf_now_ns();
	for (int i = 0; i < execs; i++) {
		uint64_t v = (uint64_t)i;
		cgr_value a = cgr_value_bytes(&v, 8), o[M1];
		cgr_ref ref;
		if (cgr_execute(c, &a, 1, &ref) ||
		    cgr_ref_get(c, ref, -1, o, M1))
			return -1;
		cgr_ref_release(c, ref);
	}
	return (double)(perf_now_ns() - t0) / execs;
}

static void case_1f1b(cgr_ctx *ctx, cgr_worker **w, const char *name,
		      int64_t compute_ns, size_t elems, int64_t sim_ns,
		      int windows, int quiet)
{
	double off[64], on[64], C, T, bound = 0;
	int nw = windows < 64 ? windows : 64;

	g_compute_ns = compute_ns;
	g_elems = elems;
	g_sim_ns = sim_ns;
	C = sleep_alone(g_compute_ns, 20);
	T = transfer_alone(ctx, 20);
	for (int win = 0; win < nw; win++)
		for (int j = 0; j < 2; j++) {
			int ov = (j + win) % 2;
			cgr_compiled *c;
			if (build_1f1b(ctx, w, ov, &c, C, T, &bound) != 0)
				exit(1);
			/* Warm up: every buffer slot once (8: the default
			 * max_inflight).  A slot's big area becomes resident
			 * where a value first writes it, so fewer would time
			 * the page faults of a fresh graph, not 1F1B. */
			run_1f1b(c, 10);
			(ov ? on : off)[win] = run_1f1b(c, 3);
			cgr_compiled_destroy(c);
		}
	report(name, off, on, nw, 3, C, T, bound, quiet);
}

int main(int argc, char **argv)
{
	struct perf_opts o = { 5, 0, 0, 0 };
	cgr_ctx *ctx;
	cgr_worker *w[4];

	if (perf_parse(argc, argv, &o,
		       "Ray's overlap shape, overlap off and on, vs the "
		       "critical-path bound"))
		return 2;
	cgr_ctx_create(NULL, &ctx);
	for (int i = 0; i < 4; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		char name[16];
		snprintf(name, sizeof(name), i < 3 ? "sender%d" : "receiver",
			 i);
		wp.name = name;
		cgr_worker_create(ctx, &wp, &w[i]);
	}
	/* Each case with compute on the worker threads, then (name_stream)
	 * on their compute streams as stream tasks: the threads only issue
	 * work.  CGR_OVERLAP_CASE=name runs one case only, name* those
	 * that start so (bookkeeping* prints the summary). */
	static const struct {
		const char *name;
		bool pipeline; /* 1F1B, else Ray's shape */
		int64_t compute_ns;
		size_t elems;
		int64_t sim_ns;
	} cases[] = {
		{ "ray_shape", false, 1000000, (size_t)4 << 20, 0 },
		/* 4 KiB tensors whose transfer is modelled as 1 ms */
		{ "ray_shape_modelled", false, 1000000, 1024, 1000000 },
		{ "bookkeeping_zero_ops", false, 0, 2, 0 },
		/* compute and a transfer about equal per microbatch step */
		{ "1f1b_4x8", true, 500000, (size_t)1 << 20, 0 },
		{ "1f1b_4x8_modelled", true, 500000, 1024, 500000 },
	};
	const char *only = getenv("CGR_OVERLAP_CASE");
	for (g_stream = 0; g_stream < 2; g_stream++)
		for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
			char name[64];
			snprintf(name, sizeof(name), "%s%s", cases[k].name,
				 g_stream ? "_stream" : "");
			if (only != NULL && strcmp(only, name) != 0 &&
			    !(only[0] != 0 && only[strlen(only) - 1] == '*' &&
			      strncmp(only, name, strlen(only) - 1) == 0))
				continue;
			(cases[k].pipeline ? case_1f1b : shape_case)(
				ctx, w, name, cases[k].compute_ns,
				cases[k].elems, cases[k].sim_ns, o.windows,
				o.json);
		}
	book_summary(o.json);
	cgr_ctx_destroy(ctx);
	return 0;
}
