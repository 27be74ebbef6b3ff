/*
 * tests/net-graph.c: one compiled graph across hosts, a rank of a job a
 * PMIx launcher started (tests/net-graph.sh runs it on three network
 * namespaces).  Every rank joins the job; ranks other than 0 serve
 * (cgr_job_serve); rank 0 drives, in the mode its first argument names:
 *
 *  pipeline: a 3-stage pipeline, stage k on rank k (a thread worker
 *      here, then one on each other rank), against the same graph on
 *      three thread workers here, in one run: values of 0 B to 1 MiB
 *      (rendezvous above UCX's eager size), a failing task's error
 *      value crossing hosts, 4 executions in flight; every output
 *      byte-identical to the local graph's and to a direct computation,
 *      in order.  Prints "pipeline OK ..." with both medians.  Then
 *      what does not cross hosts yet (a collective on a communicator of
 *      the caller's whose ranks are elsewhere, a device edge, a process
 *      worker, eager execution) is refused, saying so ("refusals OK").
 *  gpu: CUDA workers on the three ranks, two GPUs each, over the models
 *      of CUDA and NCCL (tests/fake_cudart.c, tests/fake_nccl.c, which
 *      every host loads from the driver context's cudart_path and
 *      nccl_path): device tasks, a device edge (rank 1) and allreduces
 *      (ranks 2 and 0) through NCCL within a host, stream tasks copying
 *      CUDA tensors to host memory to cross hosts, against the same
 *      graph on one host (every
 *      output also checked against a direct computation); a device
 *      missing there reported as -ENODEV; a CUDA tensor read on another
 *      host (by a task, a collective's member it does not feed, as a
 *      graph output) and a host tensor over a device edge across hosts
 *      refused: "gpu OK ...".  Each rank then prints what its NCCL
 *      model saw ("nccl rank R ops N misuse M order ok").
 *  ncomm: NCCL communicators over CUDA workers of the three ranks (and
 *      of the two serving ones only), called directly by tasks there
 *      with buffers in the CUDA model's device memory, against a CPU
 *      communicator here (tests/net-comm.c), the NCCL model's worlds
 *      spanning the processes: "ncomm OK ...", then each rank's "nccl
 *      rank R ..." as for gpu.
 *  ngraph: collective nodes (allreduce, broadcast, allgather) and a
 *      device edge through NCCL across the three ranks, device tasks making
 *      their inputs and stream tasks copying their outputs to host
 *      memory on each member's host, against the same graph on three
 *      GPUs here and a direct computation, error values crossing, on a
 *      communicator of the caller's and on the compile's: "ngraph OK
 *      ...", and "nccl rank R ..." lines.
 *  coll: every collective kind with members on several hosts against
 *      the same graph on one host (tests/net-coll.c): "coll OK ...".
 *  comm: communicators over workers of several hosts, called directly by
 *      tasks (tests/net-comm.c): "comm OK ...".
 *  gaps N: N small executions at random gaps of 0-2 ms, every worker and
 *      the link in blocking mode (parked between messages): none lost,
 *      the slowest reported.
 *  lose: executions until one fails with CGR_EHOSTLOST (the script kills
 *      or cuts a host after "steady"), then: every output an error value
 *      naming the lost host, the next execute refused at once, teardown
 *      and the workers' destruction timed.  Prints when the loss was
 *      logged (CLOCK_REALTIME ns) for the script to compare.
 *  losecoll: lose, over an allreduce of the three hosts (each member's
 *      input made on its own host): every output of the pending
 *      execution must fail alike.
 *  losecomm: the same over a communicator of the three hosts whose
 *      members' tasks call its allreduce (tests/net-comm.c).
 *  losencomm: losecoll's allreduce node on such a communicator
 *      (cgr_coll_params.comm).
 *  loseacomm: losecoll's allreduce node, backend AUTO: the compile gives
 *      it a communicator across the hosts of its own.
 *  losenccl: losecomm's allreduce on an NCCL communicator across the
 *      hosts (the models of CUDA and NCCL; host 3's ranks hang in NCCL
 *      from its fourth collective on, so the others wait in NCCL, not in
 *      the agreement, when host 3 goes).
 *  idle: compiles, prints "steady", then waits (no executions) until the
 *      log says a host was lost, and checks the graph refuses executes.
 *  driverkill: the pipeline with its workers on ranks 0 and 1 only (rank
 *      2 hosts none), one execution, "killing at_ns T", and the driver
 *      kills itself (SIGKILL).  The serving ranks ignore SIGTERM here
 *      (mpirun ends the job after a rank died) and print what
 *      cgr_job_serve returned and when ("serve rank R: ... at_ns T"),
 *      and how long cgr_job_leave took ("left rank R ms X").
 *
 * The ranks print what the script checks; the driver exits 0 when every
 * check it made held.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cgr.h>

#include "t_netcoll.h"

#define SEC 1000000000ll
#define MAXV (1u << 20)

static _Atomic int64_t lost_at; /* CLOCK_REALTIME ns of the first loss */
static char lost_msg[300];

static int64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static void logf_(void *arg, int level, const char *msg)
{
	int64_t zero = 0;

	(void)arg;
	if (strstr(msg, "lost:") != NULL &&
	    atomic_compare_exchange_strong(&lost_at, &zero,
					   now_ns(CLOCK_REALTIME)))
		snprintf(lost_msg, sizeof(lost_msg), "%s", msg);
	/* (And how each NCCL id reached a host: net-graph.sh counts.) */
	if (level <= CGR_LOG_WARN || strstr(msg, "NCCL id") != NULL)
		fprintf(stderr, "log: %s\n", msg);
}

/* Stage k's function of a value: every byte mixed with its position and
 * the stage; a first byte 0xEE at stage 1 fails the task (stage 0 makes
 * one of an input whose first byte is 0x52: 0x52 * 31 = 0xEE mod 256). */
static void mix(unsigned char *o, const unsigned char *in, size_t n, int k)
{
	for (size_t i = 0; i < n; i++)
		o[i] = (unsigned char)(in[i] * 31u + (unsigned)k + i * 7u);
}

static int stage(cgr_task_ctx *tc, void *state, const cgr_value *in,
		 size_t nin, cgr_value *out, size_t nout)
{
	int k = *(const unsigned char *)cgr_task_arg(tc);
	size_t n;
	unsigned char *o;

	(void)state, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_BYTES)
		return -EINVAL;
	n = in[0].u.bytes.len;
	if (k == 1 && n > 0 && ((const unsigned char *)in[0].u.bytes.data)[0] ==
				       0xEE) {
		cgr_task_set_error(tc, -EDOM, "stage 1 refuses 0xEE (%zu B)",
				   n);
		return -EDOM;
	}
	o = cgr_task_output_buffer(tc, 0, n);
	if (o == NULL && n > 0)
		return -ENOMEM;
	mix(o, in[0].u.bytes.data, n, k);
	out[0] = cgr_value_bytes(o, n);
	return 0;
}

/* gpu: CUDA workers on other hosts (the CUDA model, tests/fake_cudart.c,
 * loaded on every host from the driver context's cudart_path). */
/* List item i of execution seed's list: i * 4099 % 20011 bytes, each
 * (seed + i * 13 + b) & 0xFF; odd items as uint8 tensors. */
static size_t litem_len(size_t i)
{
	return i * 4099 % 20011;
}

static unsigned char litem_byte(unsigned seed, size_t i, size_t b)
{
	return (unsigned char)(seed + i * 13 + b);
}

/* Sleeps the milliseconds its input gives (a long task), then echoes it. */
static int napper(cgr_task_ctx *tc, void *state, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	uint32_t ms = 0;
	struct timespec ts;

	(void)tc, (void)state, (void)nin, (void)nout;
	if (in[0].kind == CGR_VALUE_BYTES && in[0].u.bytes.len == 4)
		memcpy(&ms, in[0].u.bytes.data, 4);
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (long)(ms % 1000) * 1000000;
	nanosleep(&ts, NULL);
	out[0] = in[0];
	return 0;
}

/* Its input, (n, seed) as two uint32: a list of n items as above. */
static int mklist(cgr_task_ctx *tc, void *state, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	/* One worker runs it (one thread at a time): a static buffer. */
	static cgr_value items[64];
	static int64_t shapes[64];
	static unsigned char data[64 * 20011];
	uint32_t a[2];
	size_t at = 0;

	(void)tc, (void)state, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_BYTES || in[0].u.bytes.len != 8)
		return -EINVAL;
	memcpy(a, in[0].u.bytes.data, 8);
	if (a[0] > 64)
		return -EINVAL;
	for (size_t i = 0; i < a[0]; i++) {
		size_t len = litem_len(i);
		for (size_t b = 0; b < len; b++)
			data[at + b] = litem_byte(a[1], i, b);
		shapes[i] = (int64_t)len;
		items[i] = i % 2 ? cgr_value_tensor(data + at, kDLUInt, 8, 1,
						    &shapes[i]) :
				   cgr_value_bytes(data + at, len);
		at += len;
	}
	out[0] = cgr_value_list(items, a[0]);
	return 0;
}

#ifdef CGR_FAKE_CUDART
/* A CUDA worker's state: host memory a device task mixes into (its output
 * points there and is copied to the device after the task). */
static int gpu_init(void *arg, void **state)
{
	(void)arg;
	*state = malloc(MAXV);
	return *state != NULL ? 0 : -ENOMEM;
}

static void gpu_fini(void *arg, void *state)
{
	(void)arg;
	free(state);
}

/* A device task: its input (bytes) mixed, as a CUDA tensor of uint8;
 * stage 1 refuses what stage() does. */
static int gpu_mix(cgr_task_ctx *tc, void *state, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t shape[1];
	int k = *(const unsigned char *)cgr_task_arg(tc);

	(void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_BYTES || in[0].u.bytes.len > MAXV)
		return -EINVAL;
	if (k == 1 && in[0].u.bytes.len > 0 &&
	    ((const unsigned char *)in[0].u.bytes.data)[0] == 0xEE) {
		cgr_task_set_error(tc, -EDOM, "stage 1 refuses 0xEE (%zu B)",
				   in[0].u.bytes.len);
		return -EDOM;
	}
	/* k 3: mix 0, as a list of the argument's bytes and that tensor
	 * when the argument starts with 'L'. */
	mix(state, in[0].u.bytes.data, in[0].u.bytes.len, k == 3 ? 0 : k);
	shape[0] = (int64_t)in[0].u.bytes.len;
	out[0] = cgr_value_tensor(state, kDLUInt, 8, 1, shape);
	if (k == 3 && in[0].u.bytes.len > 0 &&
	    ((const unsigned char *)in[0].u.bytes.data)[0] == 'L') {
		static __thread cgr_value items[2]; /* past the return */
		items[0] = in[0];
		items[1] = out[0];
		out[0] = cgr_value_list(items, 2);
	}
	return 0;
}

/* A stream task: its input (a CUDA tensor of uint8) as bytes, copied to
 * host memory by its stream. */
static int gpu_d2h(cgr_task_ctx *tc, void *state, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	const DLTensor *t = &in[0].u.tensor;

	(void)tc, (void)state, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_TENSOR || t->ndim != 1 ||
	    t->device.device_type != kDLCUDA)
		return -EINVAL;
	out[0] = cgr_value_bytes((const char *)t->data + t->byte_offset,
				 (size_t)t->shape[0]);
	return 0;
}

#endif

static const cgr_export exports[] = {
	{ "stage", stage, NULL, NULL },
	{ "mklist", mklist, NULL, NULL },
	{ "napper", napper, NULL, NULL },
	{ "gen", netcoll_gen, NULL, NULL },
	{ "netcomm_task", netcomm_task, NULL, NULL },
#ifdef CGR_FAKE_CUDART
	{ "gpu_mix", gpu_mix, NULL, NULL },
	{ "gpu_d2h", gpu_d2h, NULL, NULL },
	{ "gpu_state", NULL, gpu_init, gpu_fini },
#endif
	{ NULL, NULL, NULL, NULL },
};

static int64_t env_ns(const char *name, int64_t dflt)
{
	const char *v = getenv(name);

	return v != NULL ? strtoll(v, NULL, 10) * 1000000 : dflt;
}

/* A 3-stage chain over w[0..2]. */
static int build(cgr_ctx *ctx, cgr_worker **w, int mode, cgr_compiled **out)
{
	cgr_graph *g;
	cgr_node *prev, *n;
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	int ret = cgr_graph_create(ctx, &g);

	if (ret == 0)
		ret = cgr_graph_input(g, 0, &prev);
	for (int k = 0; k < 3 && ret == 0; k++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		unsigned char kb = (unsigned char)k;
		char name[8];
		snprintf(name, sizeof(name), "s%d", k);
		d.name = name;
		d.fn = stage;
		d.arg_data = &kb; /* copied: crosses hosts */
		d.arg_len = 1;
		d.max_out_bytes = MAXV;
		ret = cgr_graph_task(g, w[k], &d, &prev, 1, &n, 1);
		prev = n;
	}
	if (ret == 0)
		ret = cgr_graph_output(g, &prev, 1);
	cp.max_inflight = 4;
	cp.max_value_bytes = MAXV;
	cp.wait_mode = mode;
	cp.get_timeout_ns = 30 * SEC;
	if (ret == 0)
		ret = cgr_graph_compile(g, &cp, out);
	if (ret != 0)
		fprintf(stderr, "build: %s: %s\n", cgr_strerror(ret),
			cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return ret;
}

static size_t sizes[] = { 0,    1,     64,     511,	 512,
			  513,  4096,  65536,  300000, 1u << 20 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void input(unsigned char *buf, size_t n, unsigned i)
{
	for (size_t b = 0; b < n; b++)
		buf[b] = (unsigned char)(i * 131u + b * 17u + (b >> 8));
	if (n > 0 && i % 97 == 13)
		buf[0] = 0x52; /* stage 0 makes it 0xEE: stage 1 fails it */
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Runs n executions on c (4 in flight), checking each output against the
 * direct computation; *p50 the median latency (us).  Returns mismatches. */
static int drive(cgr_compiled *c, unsigned n, double *p50, unsigned *errs)
{
	unsigned char *in = malloc(MAXV), *x = malloc(MAXV), *y = malloc(MAXV);
	int64_t *lat = calloc(n, sizeof(*lat)), t0[4];
	cgr_ref refs[4];
	unsigned bad = 0, bad0 = 0, sub = 0, got = 0;

	*errs = 0;
	while (got < n) {
		while (sub < n && sub - got < 4) {
			size_t len = sizes[sub % NSIZES];
			cgr_value a;
			input(in, len, sub);
			a = cgr_value_bytes(in, len);
			t0[sub % 4] = now_ns(CLOCK_MONOTONIC);
			if (cgr_execute(c, &a, 1, &refs[sub % 4]) != 0) {
				fprintf(stderr, "execute %u failed\n", sub);
				return (int)n;
			}
			sub++;
		}
		{
			cgr_value o;
			size_t len = sizes[got % NSIZES];
			int ret = cgr_ref_get(c, refs[got % 4], 30 * SEC, &o,
					      1);
			lat[got] = now_ns(CLOCK_MONOTONIC) - t0[got % 4];
			input(in, len, got);
			if (ret != 0) {
				bad++;
			} else if (len > 0 && (mix(x, in, 1, 0), x[0] == 0xEE)) {
				(*errs)++;
				bad += o.kind != CGR_VALUE_ERROR ||
				       o.code != -EDOM ||
				       strcmp(o.u.error.task, "s1") != 0 ||
				       strstr(o.u.error.msg, "refuses 0xEE") ==
					       NULL;
			} else {
				mix(x, in, len, 0);
				mix(y, x, len, 1);
				mix(x, y, len, 2);
				bad += o.kind != CGR_VALUE_BYTES ||
				       o.u.bytes.len != len ||
				       (len && memcmp(o.u.bytes.data, x, len));
			}
			if (bad > bad0 && bad < 4)
				fprintf(stderr,
					"execution %u (%zu B): %s: kind %d "
					"code %d len %zu msg %s\n",
					got, len, cgr_strerror(ret), o.kind,
					o.code,
					o.kind == CGR_VALUE_BYTES ?
						o.u.bytes.len :
						0,
					o.kind == CGR_VALUE_ERROR ?
						o.u.error.msg :
						"");
			bad0 = bad;
			cgr_ref_release(c, refs[got % 4]);
			got++;
		}
	}
	qsort(lat, n, sizeof(*lat), cmp_i64);
	*p50 = (double)lat[n / 2] / 1e3;
	free(in), free(x), free(y), free(lat);
	return (int)bad;
}

/* losenccl: workers own CUDA device 0 of their host (the CUDA model). */
static int worker_device = -1;

static int mk_worker(cgr_ctx *ctx, const char *name, int rank,
		     cgr_worker **out)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	int ret;

	wp.name = name;
	wp.rank = rank;
	wp.device = worker_device;
	ret = cgr_worker_create(ctx, &wp, out);
	if (ret != 0)
		fprintf(stderr, "worker %s on rank %d: %s\n", name, rank,
			cgr_strerror(ret));
	return ret;
}

/* Compiles g (destroying it), expecting -ENOTSUP (eager: runs it once
 * instead); prints what was refused and why.  Returns 1 if it was not. */
/* Whether g (NULL: it could not be built) is refused with -ENOTSUP,
 * saying "host"; g destroyed. */
static int refused(cgr_graph *g, const char *what, bool eager)
{
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	unsigned char b = 1;
	cgr_value a = cgr_value_bytes(&b, 1), o;
	cgr_compiled *c = NULL;
	int ret;
	const char *msg;
	bool ok;

	if (g == NULL) {
		printf("refusal BAD %s: the graph was not built\n", what);
		return 1;
	}
	ret = eager ? cgr_graph_execute_eager(g, &a, 1, &o, 1, NULL) :
		      cgr_graph_compile(g, &cp, &c);
	msg = cgr_graph_errmsg(g);
	ok = ret == -ENOTSUP && strstr(msg, "host") != NULL;
	printf("refusal %s %s: %s (%s)\n", ok ? "OK" : "BAD", what,
	       cgr_strerror(ret), msg);
	if (c != NULL)
		cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	return !ok;
}

/* input -> d on a -> d on b -> output (the edge between them on the
 * device transport if asked); NULL if it cannot be built. */
static cgr_graph *chain(cgr_ctx *ctx, cgr_worker *a, cgr_worker *b,
			const cgr_task_desc *d, bool device_edge)
{
	cgr_graph *g = NULL;
	cgr_node *in, *n[2];

	if (cgr_graph_create(ctx, &g) == 0 && cgr_graph_input(g, 0, &in) == 0 &&
	    cgr_graph_task(g, a, d, &in, 1, &n[0], 1) == 0 &&
	    (!device_edge ||
	     cgr_node_set_transport(n[0], CGR_TRANSPORT_DEVICE, 0) == 0) &&
	    cgr_graph_task(g, b, d, n, 1, &n[1], 1) == 0 &&
	    cgr_graph_output(g, &n[1], 1) == 0)
		return g;
	cgr_graph_destroy(g);
	return NULL;
}

/* What does not cross hosts yet is refused at compile, saying so: a
 * collective node with a member there on a communicator of the caller's
 * whose ranks are on other hosts, a device-transport edge to it, a
 * process worker in a graph with workers on other hosts, eager execution
 * of such a graph (device tasks there: gpu). */
static int refusals(cgr_ctx *ctx, cgr_worker *const *far)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *pw = NULL;
	cgr_comm *comm = NULL;
	cgr_worker *rev[2];
	cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
	cgr_graph *g = NULL;
	cgr_node *in, *n[2], *o[2];
	unsigned char kb = 0;
	int bad = 0;

	d.name = "t";
	d.fn = stage;
	d.arg_data = &kb;
	d.arg_len = 1;
	d.max_out_bytes = 64;
	/* An allreduce over rank 0 and rank 1 on a communicator made by
	 * the caller whose rank 0 is on rank 1 (and 1 on 0). */
	g = NULL;
	cp.kind = CGR_COLL_ALLREDUCE;
	rev[0] = far[1], rev[1] = far[0];
	if (cgr_comm_create(ctx, rev, 2, CGR_BACKEND_CPU, &comm) ||
	    cgr_graph_create(ctx, &g) || cgr_graph_input(g, 0, &in) ||
	    cgr_graph_task(g, far[0], &d, &in, 1, &n[0], 1) ||
	    cgr_graph_task(g, far[1], &d, &in, 1, &n[1], 1) ||
	    (cp.comm = comm, 0) ||
	    cgr_graph_collective(g, &cp, far, 2, n, 2, o, 2) ||
	    cgr_graph_output(g, o, 2)) {
		cgr_graph_destroy(g);
		g = NULL;
	}
	bad += refused(g, "user-comm-collective", false);
	cgr_comm_destroy(comm);
	/* A device-transport edge from rank 0 to rank 1. */
	bad += refused(chain(ctx, far[0], far[1], &d, true), "device-edge",
		       false);
	/* A process worker here and a worker on rank 1. */
	wp.name = "p0";
	wp.kind = CGR_WORKER_PROCESS;
	if (cgr_worker_create(ctx, &wp, &pw) != 0) {
		printf("refusal BAD process-worker: not created\n");
		bad++;
	} else {
		bad += refused(chain(ctx, pw, far[1], &d, false),
			       "process-worker", false);
		cgr_worker_destroy(pw, 5 * SEC);
	}
	/* Eager execution of a chain over ranks 0 and 1. */
	bad += refused(chain(ctx, far[0], far[1], &d, false), "eager", true);
	printf("refusals %s\n", bad == 0 ? "OK" : "BAD");
	return bad;
}

/* Whether list o is execution seed's list of n items (mklist). */
static bool list_ok(const cgr_value *o, uint32_t n, unsigned seed)
{
	if (o->kind != CGR_VALUE_LIST || o->u.list.n != n)
		return false;
	for (size_t i = 0; i < n; i++) {
		const cgr_value *it = &o->u.list.items[i];
		const unsigned char *d;
		size_t len = litem_len(i);
		if (i % 2 ? it->kind != CGR_VALUE_TENSOR ||
				    it->u.tensor.ndim != 1 ||
				    it->u.tensor.shape[0] != (int64_t)len :
			    it->kind != CGR_VALUE_BYTES ||
				    it->u.bytes.len != len)
			return false;
		d = i % 2 ? (const unsigned char *)it->u.tensor.data +
				    it->u.tensor.byte_offset :
			    it->u.bytes.data;
		for (size_t b = 0; b < len; b++)
			if (d[b] != litem_byte(seed, i, b))
				return false;
	}
	return true;
}

/* A list made on host 3 reaches the driver as a graph output only (its
 * tables laid out on host 3 at that slot's place, read here at this
 * slot's): 0 to 64 items of bytes and tensors, up to 1.3 MiB in all
 * (large ones fetched by rendezvous).  Returns the lists that were not
 * the ones made. */
static int lists(cgr_ctx *ctx, cgr_worker *far)
{
	static const uint32_t ns[] = { 0, 1, 2, 3, 5, 17, 63, 64 };
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_compiled *c = NULL;
	cgr_graph *g = NULL;
	cgr_node *in, *o;
	int bad = 0;

	d.name = "mklist";
	d.fn = mklist;
	cp.max_value_bytes = 2 * MAXV;
	if (cgr_graph_create(ctx, &g) || cgr_graph_input(g, 0, &in) ||
	    cgr_graph_task(g, far, &d, &in, 1, &o, 1) ||
	    cgr_graph_output(g, &o, 1) || cgr_graph_compile(g, &cp, &c)) {
		printf("lists BAD: not compiled: %s\n", cgr_graph_errmsg(g));
		cgr_graph_destroy(g);
		return 1;
	}
	cgr_graph_destroy(g);
	for (unsigned k = 0; k < 3 * sizeof(ns) / sizeof(ns[0]); k++) {
		uint32_t a[2] = { ns[k % (sizeof(ns) / sizeof(ns[0]))], k };
		cgr_value v = cgr_value_bytes(a, 8), out;
		cgr_ref ref;
		int ret = cgr_execute(c, &v, 1, &ref);
		if (ret == 0)
			ret = cgr_ref_get(c, ref, 30 * SEC, &out, 1);
		if (ret != 0 || !list_ok(&out, a[0], k)) {
			if (bad++ < 3)
				printf("list of %u: %s kind %d %s\n", a[0],
				       cgr_strerror(ret), out.kind,
				       ret == 0 && out.kind == CGR_VALUE_ERROR ?
					       out.u.error.msg :
					       "");
		}
		if (ret == 0)
			cgr_ref_release(c, ref);
	}
	cgr_compiled_destroy(c);
	printf("lists %s\n", bad == 0 ? "OK" : "BAD");
	return bad;
}

/* Teardown(1 s) while a task on host 3 runs 930 ms more: that host is
 * given all but a little of the deadline (not an eighth less), so the
 * task ends in time and the worker stays usable.  Returns 0 if so. */
static int far_teardown(cgr_ctx *ctx, cgr_worker *far)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compiled *c = NULL;
	cgr_graph *g = NULL;
	cgr_node *in, *o;
	uint32_t ms = 930;
	cgr_value v = cgr_value_bytes(&ms, 4), out;
	cgr_ref ref;
	int ret, again;

	d.name = "napper";
	d.fn = napper;
	for (int k = 0; k < 2; k++) {
		g = NULL, c = NULL;
		ret = cgr_graph_create(ctx, &g);
		if (ret == 0)
			ret = cgr_graph_input(g, 0, &in);
		if (ret == 0)
			ret = cgr_graph_task(g, far, &d, &in, 1, &o, 1);
		if (ret == 0)
			ret = cgr_graph_output(g, &o, 1);
		if (ret == 0)
			ret = cgr_graph_compile(g, NULL, &c);
		cgr_graph_destroy(g);
		if (ret != 0)
			break;
		if (k == 1) { /* the worker is still usable */
			ms = 0;
			ret = cgr_execute(c, &v, 1, &ref);
			if (ret == 0)
				ret = cgr_ref_get(c, ref, 10 * SEC, &out, 1);
			cgr_compiled_destroy(c);
			break;
		}
		ret = cgr_execute(c, &v, 1, &ref);
		again = cgr_compiled_teardown(c, SEC);
		cgr_compiled_destroy(c);
		if (ret == 0)
			ret = again;
		if (ret != 0)
			break;
	}
	printf("far-teardown %s: %s\n", ret == 0 ? "OK" : "BAD",
	       cgr_strerror(ret));
	return ret != 0;
}

static int pipeline(cgr_ctx *ctx, cgr_job *job)
{
	cgr_worker *far[3], *near[3], *spin[3];
	cgr_compiled *cf = NULL, *cn = NULL, *cs = NULL;
	double pf = 0, pn = 0, ps = 0;
	unsigned ef = 0, en = 0, es = 0;
	unsigned n = getenv("NET_N") ? (unsigned)atoi(getenv("NET_N")) : 300;
	int bf = 0, bn = 0, bs = 0;
	bool ok;
	cgr_job_stats st;

	if (mk_worker(ctx, "w0", 0, &far[0]) || mk_worker(ctx, "w1", 1, &far[1]) ||
	    mk_worker(ctx, "w2", 2, &far[2]) || mk_worker(ctx, "l0", -1, &near[0]) ||
	    mk_worker(ctx, "l1", -1, &near[1]) ||
	    mk_worker(ctx, "l2", -1, &near[2]) ||
	    mk_worker(ctx, "a0", 0, &spin[0]) || mk_worker(ctx, "a1", 1, &spin[1]) ||
	    mk_worker(ctx, "a2", 2, &spin[2]))
		return 1;
	/* Parked across hosts, on one host, and adaptive across hosts (its
	 * threads move the UCX worker themselves while they spin). */
	if (build(ctx, far, CGR_WAIT_BLOCK, &cf) ||
	    build(ctx, near, CGR_WAIT_BLOCK, &cn) ||
	    build(ctx, spin, CGR_WAIT_ADAPTIVE, &cs))
		return 1;
	/* Interleaved: a round of each, three times. */
	for (int r = 0; r < 3; r++) {
		double a, b, c;
		unsigned e1, e2, e3;
		bf += drive(cf, n, &a, &e1);
		bn += drive(cn, n, &b, &e2);
		bs += drive(cs, n, &c, &e3);
		pf += a / 3, pn += b / 3, ps += c / 3;
		ef += e1, en += e2, es += e3;
	}
	cgr_job_stats_get(job, &st);
	ok = bf == 0 && bn == 0 && bs == 0 && ef == en && es == en &&
	     (n <= 13 || ef > 0);
	printf("pipeline %s executions %u mismatches %d/%d/%d errors %u/%u/%u "
	       "far_p50_us %.1f near_p50_us %.1f spin_p50_us %.1f sent %llu "
	       "received %llu late %llu\n",
	       ok ? "OK" : "BAD", 3 * n, bf, bn, bs, ef, en, es, pf, pn, ps,
	       (unsigned long long)st.data_sent,
	       (unsigned long long)st.data_received,
	       (unsigned long long)st.late);
	printf("hosts %s %s %s transports %s\n", cgr_job_host(job, 0),
	       cgr_job_host(job, 1), cgr_job_host(job, 2),
	       cgr_job_transports(job));
	cgr_compiled_destroy(cf);
	cgr_compiled_destroy(cn);
	cgr_compiled_destroy(cs);
	ok = refusals(ctx, far) == 0 && ok;
	ok = lists(ctx, far[2]) == 0 && ok;
	ok = far_teardown(ctx, far[2]) == 0 && ok;
	/* Each serving rank's stale message (fault injection) arrives
	 * after its answer to the teardown: wait for them on the clock. */
	{
		int64_t end = now_ns(CLOCK_MONOTONIC) + 2 * SEC;
		struct timespec gap = { 0, 1000000 };
		do {
			cgr_job_stats_get(job, &st);
			if (st.late >= 2)
				break;
			nanosleep(&gap, NULL);
		} while (now_ns(CLOCK_MONOTONIC) < end);
		printf("left late %llu\n", (unsigned long long)st.late);
	}
	return !ok;
}

/* coll: collectives across hosts (tests/net-coll.c). */
static int coll(cgr_ctx *ctx, cgr_job *job)
{
	cgr_worker *far[3], *near[3];

	if (mk_worker(ctx, "w0", 0, &far[0]) || mk_worker(ctx, "w1", 1, &far[1]) ||
	    mk_worker(ctx, "w2", 2, &far[2]) || mk_worker(ctx, "l0", -1, &near[0]) ||
	    mk_worker(ctx, "l1", -1, &near[1]) ||
	    mk_worker(ctx, "l2", -1, &near[2]))
		return 1;
	return netcoll_run(ctx, job, far, near);
}

/* comm: communicators across hosts, called directly (tests/net-comm.c). */
static int comm(cgr_ctx *ctx, cgr_job *job)
{
	cgr_worker *far[3] = { NULL, NULL, NULL };
	int ret;

	if (mk_worker(ctx, "w0", 0, &far[0]) || mk_worker(ctx, "w1", 1, &far[1]) ||
	    mk_worker(ctx, "w2", 2, &far[2]))
		return 1;
	ret = netcomm_run(ctx, job, far);
	for (int k = 0; k < 3; k++)
		cgr_worker_destroy(far[k], 5 * SEC);
	return ret;
}

/* gaps: n one-byte executions at random gaps, everything parked between
 * them. */
static int gaps(cgr_ctx *ctx, unsigned n)
{
	cgr_worker *w[3];
	cgr_compiled *c;
	int64_t worst = 0;
	unsigned bad = 0, seed = (unsigned)getpid();

	if (mk_worker(ctx, "w0", 0, &w[0]) || mk_worker(ctx, "w1", 1, &w[1]) ||
	    mk_worker(ctx, "w2", 2, &w[2]) || build(ctx, w, CGR_WAIT_BLOCK, &c))
		return 1;
	for (unsigned i = 0; i < n; i++) {
		unsigned char b = (unsigned char)i, x, y, z;
		cgr_value a = cgr_value_bytes(&b, 1), o;
		cgr_ref r;
		struct timespec gap = { 0, (long)(rand_r(&seed) % 2000000) };
		int64_t t0;
		nanosleep(&gap, NULL); /* the load's shape, not a wait */
		if (b == 0x52)
			b = 0; /* stage 1 would refuse it */
		t0 = now_ns(CLOCK_MONOTONIC);
		if (cgr_execute(c, &a, 1, &r) != 0 ||
		    cgr_ref_get(c, r, 10 * SEC, &o, 1) != 0) {
			bad++;
			break;
		}
		if (now_ns(CLOCK_MONOTONIC) - t0 > worst)
			worst = now_ns(CLOCK_MONOTONIC) - t0;
		mix(&x, &b, 1, 0), mix(&y, &x, 1, 1), mix(&z, &y, 1, 2);
		bad += o.kind != CGR_VALUE_BYTES || o.u.bytes.len != 1 ||
		       *(const unsigned char *)o.u.bytes.data != z;
		cgr_ref_release(c, r);
	}
	printf("gaps %s executions %u bad %u slowest_ms %.2f\n",
	       bad == 0 ? "OK" : "BAD", n, bad, (double)worst / 1e6);
	cgr_compiled_destroy(c);
	return bad != 0;
}

#ifdef CGR_FAKE_CUDART
/* A task of fn on w, reading *in, with k as its argument. */
static int gpu_task(cgr_graph *g, cgr_worker *w, const char *name,
		    cgr_task_fn fn, unsigned flags, int k, cgr_node *in,
		    cgr_node **out)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	unsigned char kb = (unsigned char)k;

	d.name = name;
	d.fn = fn;
	d.flags = flags;
	d.arg_data = &kb;
	d.arg_len = 1;
	d.max_out_bytes = MAXV;
	return cgr_graph_task(g, w, &d, &in, 1, out, 1);
}

/*
 * in -> mix 0 on a CUDA worker of rank 1 (device 0) -> a device edge
 * (NCCL there) to one on device 1 -> to host there -> mix 1 on both
 * CUDA workers of rank 2 -> an allreduce (max: the same tensor) over
 * them, NCCL there -> to host there -> mix 2 on both CUDA workers here ->
 * an allreduce over them, NCCL here -> to host -> out: the pipeline's
 * function.  w: two CUDA workers (devices 0 and 1) of rank 0, of rank 1,
 * of rank 2.
 */
static int gpu_build(cgr_ctx *ctx, cgr_worker *const *w, cgr_compiled **out)
{
	static const char *sn[3][2] = { { "s0", "s0b" },
					{ "s1", "s1b" },
					{ "s2", "s2b" } };
	static const char *cn[3] = { "c0", "c1", "c2" };
	static const char *an[3] = { "", "ar1", "ar2" };
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_coll_params ar = CGR_COLL_PARAMS_INIT;
	cgr_graph *g;
	cgr_node *n, *x[2], *y[2];
	int ret = cgr_graph_create(ctx, &g);

	if (ret == 0)
		ret = cgr_graph_input(g, 0, &n);
	/* Stage k on host k + 1 (mod 3): the device workers w[2h], w[2h+1]. */
	for (int k = 0; k < 3 && ret == 0; k++) {
		cgr_worker *const *hw = w + 2 * ((k + 1) % 3);
		ret = gpu_task(g, hw[0], sn[k][0], gpu_mix, CGR_TASK_DEVICE, k,
			       n, &x[0]);
		if (ret == 0 && k == 0) { /* a device edge to device 1 */
			ret = cgr_node_set_transport(x[0],
						     CGR_TRANSPORT_DEVICE, 0);
			if (ret == 0)
				ret = gpu_task(g, hw[1], cn[k], gpu_d2h,
					       CGR_TASK_STREAM, 0, x[0], &n);
			continue;
		}
		if (ret == 0)
			ret = gpu_task(g, hw[1], sn[k][1], gpu_mix,
				       CGR_TASK_DEVICE, k, n, &x[1]);
		ar.kind = CGR_COLL_ALLREDUCE, ar.op = CGR_MAX, ar.name = an[k];
		if (ret == 0)
			ret = cgr_graph_collective(g, &ar, hw, 2, x, 2, y, 2);
		if (ret == 0)
			ret = gpu_task(g, hw[0], cn[k], gpu_d2h,
				       CGR_TASK_STREAM, 0, y[0], &n);
	}
	if (ret == 0)
		ret = cgr_graph_output(g, &n, 1);
	cp.max_inflight = 4;
	cp.max_value_bytes = MAXV;
	cp.get_timeout_ns = 30 * SEC;
	if (ret == 0)
		ret = cgr_graph_compile(g, &cp, out);
	if (ret != 0)
		fprintf(stderr, "gpu build: %s: %s\n", cgr_strerror(ret),
			cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return ret;
}

/* What a device task on another host cannot do yet is refused at
 * compile, saying so: its output read on another host (by a task there,
 * by the driver as a graph output, by a collective's member that it does
 * not feed), a device tensor of this host read there, and a host tensor
 * over a device edge across hosts.  w: here, rank 1, rank 2. */
static int gpu_refusals(cgr_ctx *ctx, cgr_worker *const *w, cgr_worker *here)
{
	cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
	cgr_worker *mem[2] = { w[1], w[2] };
	cgr_graph *g;
	cgr_node *in, *a[2], *b[2], *o[2];
	int bad = 0;

	for (int v = 0; v < 5; v++) {
		static const char *what[] = { "device-out-other-host",
					      "device-out-graph-output",
					      "device-in-collective",
					      "device-in-from-here",
					      "host-edge-other-host" };
		int ret = cgr_graph_create(ctx, &g);
		if (ret == 0)
			ret = cgr_graph_input(g, 0, &in);
		if (ret == 0)
			/* (v 4: a host tensor over a device edge.) */
			ret = gpu_task(g, v == 3 ? here : w[1], "d1", gpu_mix,
				       v == 4 ? 0 : CGR_TASK_DEVICE, 0, in,
				       &a[0]);
		if (ret == 0 && v == 0)
			ret = gpu_task(g, w[2], "h2", gpu_d2h, CGR_TASK_STREAM,
				       0, a[0], &b[0]);
		if (ret == 0 && v == 1)
			b[0] = a[0];
		if (ret == 0 && v == 2) {
			/* Member g2 would read g1's tensor (on a
			 * communicator across the hosts the compile makes,
			 * each member reads its own input). */
			a[1] = a[0];
			cp.kind = CGR_COLL_ALLREDUCE;
			ret = cgr_graph_collective(g, &cp, mem, 2, a, 2, o, 2);
			b[0] = o[0];
		}
		if (ret == 0 && v == 3)
			ret = gpu_task(g, w[1], "h1", gpu_d2h, CGR_TASK_STREAM,
				       0, a[0], &b[0]);
		if (ret == 0 && v == 4 &&
		    (ret = cgr_node_set_transport(a[0], CGR_TRANSPORT_DEVICE,
						  0)) == 0)
			ret = gpu_task(g, w[2], "h2", gpu_d2h, CGR_TASK_STREAM,
				       0, a[0], &b[0]);
		if (ret == 0)
			ret = cgr_graph_output(g, b, 1);
		if (ret != 0) {
			cgr_graph_destroy(g);
			g = NULL;
		}
		bad += refused(g, what[v], false);
	}
	return bad;
}

#ifdef CGR_FAKE_NCCL
/* What the NCCL model of this process saw (a serving rank's, after its
 * graphs): "nccl rank R ops N misuse M order ok|<why>". */
static void nccl_report(int rank)
{
	void *h = dlopen(CGR_FAKE_NCCL, RTLD_NOW | RTLD_NOLOAD);
	long (*ops)(void) = NULL, (*misuse)(void) = NULL;
	int (*order)(char *, size_t) = NULL;
	char why[256] = "";

	if (h != NULL) {
		*(void **)&ops = dlsym(h, "fake_nccl_ops");
		*(void **)&misuse = dlsym(h, "fake_nccl_misuse");
		*(void **)&order = dlsym(h, "fake_nccl_order");
	}
	if (ops == NULL || misuse == NULL || order == NULL) {
		printf("nccl rank %d not loaded\n", rank);
		return;
	}
	printf("nccl rank %d ops %ld misuse %ld order %s\n", rank, ops(),
	       misuse(), order(why, sizeof(why)) == 0 ? "ok" : why);
}
#endif

static int gpu(cgr_ctx *ctx)
{
	/* Across hosts: g0, g0b here, g1, g1b on rank 1, g2, g2b on rank 2,
	 * devices 0 and 1 of each; on one host: l0 .. l2b, all here, devices
	 * 0 to 5 (one GPU a worker: NCCL's ranks of several communicators
	 * sharing two GPUs would have to issue in one order). */
	static const char *names[12] = { "g0", "g0b", "g1", "g1b", "g2", "g2b",
					 "l0", "l0b", "l1", "l1b", "l2", "l2b" };
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w[12] = { NULL }, *none = NULL;
	cgr_compiled *cf = NULL, *cn = NULL;
	unsigned n = getenv("NET_N") ? (unsigned)atoi(getenv("NET_N")) : 200;
	unsigned ef = 0, en = 0;
	double pf = 0, pn = 0;
	int bf = 0, bn = 0, br, nodev;
	bool ok;

	wp.init = gpu_init, wp.fini = gpu_fini;
	for (int k = 0; k < 12; k++) {
		wp.name = names[k];
		wp.rank = k < 6 ? k / 2 : -1;
		wp.device = k < 6 ? k % 2 : k - 6;
		if (cgr_worker_create(ctx, &wp, &w[k]) != 0) {
			printf("gpu BAD: worker %s on rank %d\n", names[k],
			       wp.rank);
			return 1;
		}
	}
	/* The model has eight devices (FAKE_CUDA_NDEV): device 8 there is
	 * none, and the driver hears why. */
	wp.name = "nodev", wp.rank = 1, wp.device = 8;
	nodev = cgr_worker_create(ctx, &wp, &none);
	if (gpu_build(ctx, w, &cf) != 0 || gpu_build(ctx, w + 6, &cn) != 0)
		return 1;
	for (int r = 0; r < 2; r++) { /* interleaved */
		double a, b;
		unsigned e1, e2;
		bf += drive(cf, n, &a, &e1);
		bn += drive(cn, n, &b, &e2);
		pf += a / 2, pn += b / 2, ef += e1, en += e2;
	}
	cgr_compiled_destroy(cf);
	cgr_compiled_destroy(cn);
	{
		cgr_worker *r3[3] = { w[0], w[2], w[4] };
		br = gpu_refusals(ctx, r3, w[0]);
	}
	ok = bf == 0 && bn == 0 && ef == en && (n <= 13 || ef > 0) &&
	     br == 0 && nodev == -ENODEV;
	printf("gpu %s executions %u mismatches %d/%d errors %u/%u "
	       "far_p50_us %.1f near_p50_us %.1f device-8-on-rank-1 %s\n",
	       ok ? "OK" : "BAD", 2 * n, bf, bn, ef, en, pf, pn,
	       cgr_strerror(nodev));
	for (int k = 0; k < 12; k++)
		cgr_worker_destroy(w[k], 5 * SEC);
	if (none != NULL)
		cgr_worker_destroy(none, 5 * SEC);
#ifdef CGR_FAKE_NCCL
	nccl_report(0);
#endif
	return !ok;
}
#endif

#if defined(CGR_FAKE_CUDART) && defined(CGR_FAKE_NCCL)
#define NGRAPH_MAX 65536 /* ngraph's largest argument */
/* ncomm: NCCL communicators across hosts (tests/net-comm.c), over the
 * models of CUDA and NCCL; the tasks' buffers are the CUDA model's device
 * memory. */
static void *(*dmalloc_)(void **, size_t);
static int (*dfree_)(void *);
static int (*dcopy_)(void *, const void *, size_t, int);

static void *dm_alloc(size_t n)
{
	void *p = NULL;

	dmalloc_(&p, n);
	return p;
}

static void dm_free(void *p)
{
	dfree_(p);
}

static void dm_copy(void *d, const void *s, size_t n)
{
	dcopy_(d, s, n, 4 /* cudaMemcpyDefault */);
}

static const struct netcomm_mem dm = { dm_alloc, dm_free, dm_copy };

/* Every rank: the tasks' buffers in the CUDA model's memory. */
static int ncomm_mem(void)
{
	void *h = dlopen(CGR_FAKE_CUDART, RTLD_NOW);

	if (h == NULL)
		return -1;
	*(void **)&dmalloc_ = dlsym(h, "cudaMalloc");
	*(void **)&dfree_ = dlsym(h, "cudaFree");
	*(void **)&dcopy_ = dlsym(h, "cudaMemcpy");
	if (dmalloc_ == NULL || dfree_ == NULL || dcopy_ == NULL)
		return -1;
	netcomm_mem = &dm;
	return 0;
}

/* The driver: the communicators' worlds of the NCCL model in a directory
 * every host sees (the id names it: under the driver's TMPDIR, which the
 * test's fixture removes), removed at the end (span_drop). */
static char span_dir[600];

static int span_make(void)
{
	const char *t = getenv("TMPDIR");

	snprintf(span_dir, sizeof(span_dir), "%.500s/fake-nccl-XXXXXX",
		 t != NULL && t[0] == '/' ? t : "/tmp");
	if (mkdtemp(span_dir) == NULL)
		return -1;
	setenv("FAKE_NCCL_SPAN_DIR", span_dir, 1);
	return 0;
}

static void span_drop(void)
{
	DIR *d = opendir(span_dir);
	struct dirent *e;
	char p[600];

	while (d != NULL && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.') {
			snprintf(p, sizeof(p), "%.300s/%.250s", span_dir,
				 e->d_name);
			unlink(p);
		}
	if (d != NULL)
		closedir(d);
	rmdir(span_dir);
}

/* ngraph: collective nodes through NCCL across the hosts.  Member k
 * (w[k]) mixes the argument on its GPU (gpu_mix, stage k: member 1
 * refuses a first byte 0xEE); each member's results are copied to host
 * memory by a stream task there.  Variant 0: an allreduce (sum) of the
 * three, a broadcast of that from member 2 and an allgather of the
 * mixed inputs: outputs o0..o2 (the broadcast), a0..a2 (the allgather).
 * Variant 0 also has a device edge from member 0 (e0, mixed as stage 0)
 * to members 1 and 2 (e1, e2).  Variant 1: the allreduce with static
 * shapes (o0..o2), and a bucketed allgather of each member's input twice
 * (a0, a0b .. a2, a2b).  comm: an NCCL communicator of the three (NULL:
 * the compile's, across the hosts or on one). */
#define NGRAPH_OUTS(v) ((v) ? 9 : 8)
static int ngraph_build(cgr_ctx *ctx, cgr_worker *const *w, cgr_comm *comm,
			int variant, cgr_compiled **out)
{
	static const char *xn[3] = { "x0", "x1", "x2" };
	static const char *on[9] = { "o0", "o1", "o2", "a0", "a1", "a2",
				     "a0b", "a1b", "a2b" };
	static const char *en[2] = { "e1", "e2" };
	cgr_compile_params cp = CGR_COMPILE_PARAMS_INIT;
	cgr_coll_params ar = CGR_COLL_PARAMS_INIT;
	cgr_node *n, *x[6], *y[3], *z[3], *a[6], *o[9], *e,
		**b = variant ? y : z;
	cgr_graph *g;
	int ret = cgr_graph_create(ctx, &g);

	if (ret == 0)
		ret = cgr_graph_input(g, 0, &n);
	for (int k = 0; k < 3 && ret == 0; k++)
		ret = gpu_task(g, w[k], xn[k], gpu_mix, CGR_TASK_DEVICE, k, n,
			       &x[k]);
	ar.comm = comm;
	ar.kind = CGR_COLL_ALLREDUCE, ar.op = CGR_SUM, ar.name = "sum";
	ar.static_shape = variant;
	if (ret == 0)
		ret = cgr_graph_collective(g, &ar, w, 3, x, 3, y, 3);
	ar.static_shape = 0;
	ar.kind = CGR_COLL_BROADCAST, ar.root = 2, ar.name = "bcast";
	if (ret == 0 && variant == 0)
		ret = cgr_graph_collective(g, &ar, w, 3, &y[2], 1, z, 3);
	ar.kind = CGR_COLL_ALLGATHER, ar.root = 0, ar.name = "gather";
	if (variant) { /* each member's input twice: a bucket of two */
		ar.ntensors = 2;
		for (int k = 2; k >= 0; k--)
			x[2 * k] = x[2 * k + 1] = x[k];
	}
	if (ret == 0)
		ret = cgr_graph_collective(g, &ar, w, 3, x, variant ? 6 : 3, a,
					   variant ? 6 : 3);
	for (int k = 0; k < 3 && ret == 0; k++) {
		ret = gpu_task(g, w[k], on[k], gpu_d2h, CGR_TASK_STREAM, 0,
			       b[k], &o[k]);
		for (int t = 0; t < (variant ? 2 : 1) && ret == 0; t++)
			ret = gpu_task(g, w[k], on[3 + 3 * t + k], gpu_d2h,
				       CGR_TASK_STREAM, 0,
				       a[variant ? 2 * k + t : k],
				       &o[3 + 3 * t + k]);
	}
	/* A device edge: e0's tensor (a list for an argument starting with
	 * 'L') to members 1 and 2. */
	if (ret == 0 && variant == 0)
		ret = gpu_task(g, w[0], "e0", gpu_mix, CGR_TASK_DEVICE, 3, n,
			       &e);
	if (ret == 0 && variant == 0)
		ret = cgr_node_set_transport(e, CGR_TRANSPORT_DEVICE, 0);
	for (int k = 1; k < 3 && ret == 0 && variant == 0; k++)
		ret = gpu_task(g, w[k], en[k - 1], gpu_d2h, CGR_TASK_STREAM, 0,
			       e, &o[5 + k]);
	if (ret == 0)
		ret = cgr_graph_output(g, o, NGRAPH_OUTS(variant));
	cp.max_inflight = 4;
	cp.max_value_bytes = MAXV;
	cp.get_timeout_ns = 30 * SEC;
	if (ret == 0)
		ret = cgr_graph_compile(g, &cp, out);
	if (ret != 0)
		printf("ngraph build: %s: %s\n", cgr_strerror(ret),
		       cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return ret;
}

/* Whether o (an output of ngraph for the argument in, len bytes) is
 * right: of kind 0, the sum of the three mixes (o0..o2); 1, their
 * concatenation (a0..); either, member 1's error value when it refused;
 * 2, the device edge's, stage 0's mix (e1, e2). */
static bool ngraph_ok(const cgr_value *o, int kind, const unsigned char *in,
		      size_t len)
{
	unsigned char m[3][NGRAPH_MAX];
	const unsigned char *d = o->u.bytes.data;

	if (len > 0 && in[0] == 0xEE && kind < 2)
		return o->kind == CGR_VALUE_ERROR && o->code == -EDOM &&
		       strcmp(o->u.error.task, "x1") == 0 &&
		       strstr(o->u.error.msg, "refuses 0xEE") != NULL;
	if (o->kind != CGR_VALUE_BYTES ||
	    o->u.bytes.len != (kind == 1 ? 3 * len : len))
		return false;
	for (int k = 0; k < 3; k++)
		mix(m[k], in, len, k);
	for (size_t b = 0; b < len; b++)
		if (kind == 0 ? d[b] != (unsigned char)(m[0][b] + m[1][b] +
							m[2][b]) :
		    kind == 2 ? d[b] != m[0][b] :
				d[b] != m[0][b] || d[len + b] != m[1][b] ||
					d[2 * len + b] != m[2][b])
			return false;
	return true;
}

/* Whether outputs f and n of the two graphs are the same (error values:
 * code, origin task and message, but the origin's worker: d1 and l1). */
static bool ngraph_same(const cgr_value *f, const cgr_value *n)
{
	const char *a, *b;

	if (f->kind != n->kind)
		return false;
	if (f->kind == CGR_VALUE_BYTES)
		return f->u.bytes.len == n->u.bytes.len &&
		       (f->u.bytes.len == 0 ||
			memcmp(f->u.bytes.data, n->u.bytes.data,
			       f->u.bytes.len) == 0);
	if (f->kind != CGR_VALUE_ERROR)
		return false;
	a = strchr(f->u.error.msg, ':'), b = strchr(n->u.error.msg, ':');
	return f->code == n->code && a != NULL && b != NULL &&
	       strcmp(f->u.error.task, n->u.error.task) == 0 &&
	       strcmp(a, b) == 0;
}

/* n executions of far and near (variant v), interleaved: every output
 * equal to the other graph's, and right (ngraph_ok) or, with static
 * shapes (v 1: arguments of 512 B but every fifth), CGR_EMISMATCH where
 * the argument's length is not the first's; v 0: every eleventh
 * argument makes e0's output a list, an error value (-ENOTSUP) on both
 * readers across hosts.  Counts member 1's refusals (*errs), mismatches
 * (*mism) and lists (*lists); returns the outputs that were not so. */
static unsigned ngraph_drive(cgr_compiled *far, cgr_compiled *near, int v,
			     unsigned n, unsigned *errs, unsigned *mism,
			     unsigned *lists)
{
	static unsigned char in[NGRAPH_MAX];
	unsigned bad = 0, nq = NGRAPH_OUTS(v);
	size_t first = 0;

	for (unsigned i = 0; i < n; i++) {
		/* Static shapes: 512 B but every fifth (4 KiB). */
		size_t len = v ? (i % 5 == 4 ? 4096 : 512) :
				 sizes[i % NSIZES] % (NGRAPH_MAX + 1);
		cgr_value a, of[9], on[9];
		cgr_ref rf, rn;
		bool list;
		input(in, len, i);
		if (len > 0 && in[0] == 'L')
			in[0] = 'M';
		if (len > 0 && i % 7 == 3)
			in[0] = 0xEE, (*errs)++; /* member 1 refuses */
		else if (len > 0 && v == 0 && i % 11 == 5)
			in[0] = 'L', (*lists)++; /* e0 makes a list */
		list = len > 0 && in[0] == 'L';
		a = cgr_value_bytes(in, len);
		if (cgr_execute(far, &a, 1, &rf) != 0 ||
		    cgr_execute(near, &a, 1, &rn) != 0 ||
		    cgr_ref_get(far, rf, 30 * SEC, of, nq) != 0 ||
		    cgr_ref_get(near, rn, 30 * SEC, on, nq) != 0)
			return nq * n;
		for (unsigned q = 0; q < nq; q++) {
			bool ok = ngraph_same(&of[q], &on[q]);
			bool mm = ok && v && q < 3 &&
				  of[q].code == CGR_EMISMATCH;
			*mism += mm;
			/* e0's list over its edge across hosts: -ENOTSUP
			 * on each reader (on one host, a list each reader
			 * refuses: gpu_d2h). */
			if (list && q >= 6)
				ok = of[q].kind == CGR_VALUE_ERROR &&
				     of[q].code == -ENOTSUP &&
				     strstr(of[q].u.error.msg, "list") !=
					     NULL &&
				     on[q].kind == CGR_VALUE_ERROR &&
				     on[q].code == -EINVAL;
			else if (ok && !mm)
				ok = ngraph_ok(&of[q],
					       q < 3 ? 0 : v || q < 6 ? 1 : 2,
					       in, len);
			else if (ok)
				ok = len != first;
			if (!ok && bad++ < 4)
				printf("ngraph BAD: variant %d execution %u "
				       "(%zu B) output %u: kind %d/%d code "
				       "%d/%d %s\n",
				       v, i, len, q, of[q].kind, on[q].kind,
				       of[q].code, on[q].code,
				       of[q].kind == CGR_VALUE_ERROR ?
					       of[q].u.error.msg :
					       "");
		}
		if (i == 0)
			first = len; /* (static shapes agree on it) */
		cgr_ref_release(far, rf);
		cgr_ref_release(near, rn);
	}
	return bad;
}

/* The collective nodes of ngraph on an NCCL communicator of w[0..2]
 * (three hosts: the caller's, both variants; then, variant 0, the one
 * the compile makes) against the same graph on l[0..2] (here, the
 * compile's communicator); over the CPU communicator, refused. */
static int ngraph(cgr_ctx *ctx, cgr_worker *const *w, cgr_worker *const *l)
{
	unsigned n = getenv("NET_N") ? (unsigned)atoi(getenv("NET_N")) : 100;
	cgr_compiled *far = NULL, *near = NULL;
	cgr_comm *cm = NULL;
	unsigned bad = 0, errs = 0, mism = 0, lists = 0;
	int ret = cgr_comm_create(ctx, w, 3, CGR_BACKEND_NCCL, &cm);

	if (ret != 0) {
		printf("ngraph BAD: communicator: %s\n", cgr_strerror(ret));
		return 1;
	}
	for (int v = 0; v < 3; v++) {
		if (ngraph_build(ctx, w, v < 2 ? cm : NULL, v % 2, &far) != 0 ||
		    ngraph_build(ctx, l, NULL, v % 2, &near) != 0)
			bad++;
		else
			bad += ngraph_drive(far, near, v % 2, n, &errs, &mism,
					    &lists);
		cgr_compiled_destroy(far);
		cgr_compiled_destroy(near);
		far = near = NULL;
	}
	cgr_comm_destroy(cm);
	printf("ngraph %s graphs 3 (one on the compile's communicators) "
	       "executions %u outputs %u errors %u mismatches %u lists %u "
	       "bad %u\n",
	       bad || mism == 0 || lists == 0 ? "FAILED" : "OK", 3 * n,
	       25 * n, errs, mism, lists, bad);
	return bad != 0 || mism == 0 || lists == 0;
}

/* ncomm (graph false): NCCL communicators across hosts called by tasks;
 * ngraph (graph true): collective nodes on one. */
static int ncomm(cgr_ctx *ctx, bool graph)
{
	/* d0 .. e2 across the hosts (device 0 and 1 of each), l0 .. l2
	 * here (devices 3 to 5: one GPU a worker). */
	static const char *names[8] = { "d0", "d1", "d2", "e1",
					"e2", "l0", "l1", "l2" };
	static const int rank[8] = { 0, 1, 2, 1, 2, -1, -1, -1 };
	static const int dev[8] = { 0, 0, 0, 1, 1, 3, 4, 5 };
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w[8] = { NULL };
	int ret = 0;

	wp.init = gpu_init, wp.fini = gpu_fini;
	for (int k = 0; k < 8 && ret == 0; k++) {
		wp.name = names[k];
		wp.rank = rank[k];
		wp.device = dev[k];
		ret = cgr_worker_create(ctx, &wp, &w[k]);
	}
	if (ret != 0)
		printf("%s BAD: workers: %s\n", graph ? "ngraph" : "ncomm",
		       cgr_strerror(ret));
	else if (graph)
		ret = ngraph(ctx, w, w + 5);
	else
		ret = netcomm_nccl_run(ctx, w);
	for (int k = 0; k < 8; k++)
		if (w[k] != NULL)
			cgr_worker_destroy(w[k], 5 * SEC);
	nccl_report(0);
	return ret != 0;
}
#endif

/* lose / idle / losecoll / losecomm / losencomm / loseacomm: a host
 * goes (the script's doing); what the driver sees (losecoll (coll 1): of
 * an allreduce over the three hosts, its members waiting for each
 * other's inputs; losecomm (2): the same on a communicator, called by a
 * task on each; losencomm (3): the allreduce node on a communicator;
 * loseacomm (4): on the one the compile gave it). */
static int lose(cgr_ctx *ctx, bool idle, int coll)
{
	cgr_worker *w[3];
	cgr_compiled *c;
	cgr_comm *cm = NULL;
	unsigned char b = 1;
	cgr_value a = cgr_value_bytes(&b, 1), os[3], o;
	cgr_ref r;
	int ret = 0, bad = 0;
	size_t nout = coll ? 3 : 1;
	unsigned i;
	int64_t t, t_teardown, t_destroy;

	if (mk_worker(ctx, "w0", 0, &w[0]) || mk_worker(ctx, "w1", 1, &w[1]) ||
	    mk_worker(ctx, "w2", 2, &w[2]) ||
	    (coll == 1 || coll == 4 ?
		     (netcoll_backend_auto = coll == 4,
		      netcoll_allreduce(ctx, w, CGR_WAIT_BLOCK, NULL, &c, &a)) :
	     coll == 3 ? netcoll_allreduce(ctx, w, CGR_WAIT_BLOCK, &cm, &c,
					   &a) :
	     coll == 2 || coll == 5 ?
		     netcomm_allreduce(ctx, w,
				       coll == 5 ? CGR_BACKEND_NCCL :
						   CGR_BACKEND_CPU,
				       &c, &cm, &a) :
			 build(ctx, w, CGR_WAIT_BLOCK, &c)))
		return 1;
	/* A round trip first: everything is up. */
	if (cgr_execute(c, &a, 1, &r) != 0 ||
	    cgr_ref_get(c, r, 10 * SEC, os, nout) || os[0].kind == CGR_VALUE_ERROR ||
	    cgr_ref_release(c, r))
		return 1;
	printf("steady\n");
	fflush(stdout);
	for (i = 0; !idle; i++) {
		struct timespec gap = { 0, 10000000 };
		if ((ret = cgr_execute(c, &a, 1, &r)) != 0)
			break;
		ret = cgr_ref_get(c, r, 60 * SEC, os, nout);
		o = os[0];
		/* Every output fails alike. */
		for (size_t q = 1; ret == 0 && q < nout; q++)
			bad += os[q].kind != o.kind || os[q].code != o.code;
		if (ret == 0 && o.kind == CGR_VALUE_ERROR)
			break;
		cgr_ref_release(c, r);
		nanosleep(&gap, NULL); /* steady traffic, every 10 ms */
	}
	if (idle) {
		/* Nothing runs: only the heartbeats can tell. */
		while (atomic_load(&lost_at) == 0) {
			struct timespec gap = { 0, 20000000 };
			nanosleep(&gap, NULL);
		}
		ret = 0;
	} else if (ret == 0) {
		/* The execution in flight: error values naming the host. */
		bad += o.code != CGR_EHOSTLOST ||
		       strstr(o.u.error.msg, "lost") == NULL;
		printf("error_value code %s msg %s\n", cgr_strerror(o.code),
		       o.u.error.msg);
	} else {
		/* Lost between executions: the next one was refused. */
		bad += ret != CGR_EHOSTLOST;
		printf("refused %s\n", cgr_strerror(ret));
	}
	t = now_ns(CLOCK_MONOTONIC);
	ret = cgr_execute(c, &a, 1, &r);
	printf("next_execute %s us %.0f\n", cgr_strerror(ret),
	       (double)(now_ns(CLOCK_MONOTONIC) - t) / 1e3);
	bad += ret != CGR_EHOSTLOST;
	t = now_ns(CLOCK_MONOTONIC);
	cgr_compiled_destroy(c);
	cgr_comm_destroy(cm);
	t_teardown = now_ns(CLOCK_MONOTONIC) - t;
	t = now_ns(CLOCK_MONOTONIC);
	for (int k = 0; k < 3; k++)
		cgr_worker_destroy(w[k], 2 * SEC);
	t_destroy = now_ns(CLOCK_MONOTONIC) - t;
	printf("lost_at_ns %lld executions %u teardown_ms %.1f "
	       "destroy_ms %.1f msg %s\n",
	       (long long)atomic_load(&lost_at), i, (double)t_teardown / 1e6,
	       (double)t_destroy / 1e6, lost_msg);
	fflush(stdout);
	return bad != 0;
}

/* driverkill: one execution over ranks 0 and 1, then the driver dies. */
static int driver_kill(cgr_ctx *ctx)
{
	cgr_worker *w[3];
	cgr_compiled *c;
	unsigned char b = 1;
	cgr_value a = cgr_value_bytes(&b, 1), o;
	cgr_ref r;

	if (mk_worker(ctx, "w0", 0, &w[0]) || mk_worker(ctx, "w1", 1, &w[1]))
		return 1;
	w[2] = w[1];
	if (build(ctx, w, CGR_WAIT_BLOCK, &c) != 0 ||
	    cgr_execute(c, &a, 1, &r) != 0 ||
	    cgr_ref_get(c, r, 10 * SEC, &o, 1) != 0 ||
	    o.kind == CGR_VALUE_ERROR)
		return 1;
	printf("killing at_ns %lld\n", (long long)now_ns(CLOCK_REALTIME));
	fflush(stdout);
	raise(SIGKILL);
	return 1;
}

int main(int argc, char **argv)
{
	cgr_job_params jp = CGR_JOB_PARAMS_INIT;
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	const char *mode = argc > 1 ? argv[1] : "pipeline";
	bool cuda = strcmp(mode, "gpu") == 0 || strcmp(mode, "ncomm") == 0 ||
		    strcmp(mode, "ngraph") == 0 ||
		    strcmp(mode, "losenccl") == 0;
	cgr_job *job;
	cgr_ctx *ctx;
	int ret, r;

	cgr_worker_main(argc, argv, exports); /* a worker process ends here */
	/* The CUDA model's, on every rank. */
	if (cuda)
		setenv("FAKE_CUDA_NDEV", "8", 1);
#if defined(CGR_FAKE_CUDART) && defined(CGR_FAKE_NCCL)
	if (cuda && strcmp(mode, "gpu") != 0 && ncomm_mem() != 0) {
		printf("%s BAD: %s cannot be loaded\n", mode, CGR_FAKE_CUDART);
		return 1;
	}
#endif
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("NET_SIZES_MAX") != NULL) /* a slow link: smaller */
		for (size_t i = 0; i < NSIZES; i++)
			if (sizes[i] > (size_t)atol(getenv("NET_SIZES_MAX")))
				sizes[i] = (size_t)atol(getenv("NET_SIZES_MAX"));
	jp.log_fn = logf_;
	jp.log_level = CGR_LOG_INFO;
	jp.wait_mode = CGR_WAIT_BLOCK;
	jp.deadline_ns = env_ns("NET_DEADLINE_MS", 0);
	if ((ret = cgr_job_join(&jp, &job)) != 0) {
		printf("join failed: %s\n", cgr_strerror(ret));
		return 1;
	}
	if (cgr_job_size(job) < 3) {
		printf("no-job: %d rank(s): run under a PMIx launcher with 3\n",
		       cgr_job_size(job));
		cgr_job_leave(job);
		return 0;
	}
	if (cgr_job_rank(job) != cgr_job_driver(job)) {
		/* losenccl: host 3's NCCL ranks hang from the fourth
		 * collective on (the driver's rank 0 and host 2's wait in
		 * NCCL for them when host 3 goes). */
		if (strcmp(mode, "losenccl") == 0 && cgr_job_rank(job) == 2)
			setenv("FAKE_NCCL_SPAN_STALL_AFTER", "3", 1);
		/* ncomm: host 3's first NCCL rank fails to initialise
		 * (net-comm.c, init_failure). */
		if (strcmp(mode, "ncomm") == 0 && cgr_job_rank(job) == 2)
			setenv("FAKE_NCCL_SPAN_FAIL_INIT", "1", 1);
		int64_t t;
		if (strcmp(mode, "driverkill") == 0)
			signal(SIGTERM, SIG_IGN);
		ret = cgr_job_serve(job, exports);
		printf("serve rank %d: %s at_ns %lld\n", cgr_job_rank(job),
		       ret == 0 ? "done" : cgr_strerror(ret),
		       (long long)now_ns(CLOCK_REALTIME));
#ifdef CGR_FAKE_NCCL
		if (cuda && strcmp(mode, "losenccl") != 0)
			nccl_report(cgr_job_rank(job));
#endif
		t = now_ns(CLOCK_MONOTONIC);
		r = cgr_job_rank(job);
		cgr_job_leave(job);
		printf("left rank %d ms %.1f\n", r,
		       (double)(now_ns(CLOCK_MONOTONIC) - t) / 1e6);
		/* A lost driver is what some runs are about: no failure
		 * for mpirun to abort the job over. */
		return ret == 0 || ret == CGR_EHOSTLOST ? 0 : 3;
	}
	cp.job = job;
	cp.exports = exports;
	cp.log_fn = logf_;
	cp.log_level = CGR_LOG_INFO;
#ifdef CGR_FAKE_CUDART
	if (cuda) {
		/* Every host loads them. */
		cp.cudart_path = CGR_FAKE_CUDART;
#ifdef CGR_FAKE_NCCL
		cp.nccl_path = CGR_FAKE_NCCL;
#endif
	}
#endif
#if !defined(CGR_FAKE_CUDART) || !defined(CGR_FAKE_NCCL)
	if (cuda) {
		printf("%s SKIP: a build without the CUDA toolkit has no "
		       "CUDA model\n", mode);
		cgr_job_leave(job);
		return 0;
	}
#endif
#if defined(CGR_FAKE_CUDART) && defined(CGR_FAKE_NCCL)
	if (cuda && span_make() != 0) {
		printf("%s BAD: no directory for the NCCL model\n", mode);
		cgr_job_leave(job);
		return 1;
	}
#endif
	if ((ret = cgr_ctx_create(&cp, &ctx)) != 0) {
		cgr_job_leave(job);
		return 1;
	}
	if (strcmp(mode, "pipeline") == 0)
		ret = pipeline(ctx, job);
	else if (strcmp(mode, "coll") == 0)
		ret = coll(ctx, job);
	else if (strcmp(mode, "comm") == 0)
		ret = comm(ctx, job);
#if defined(CGR_FAKE_CUDART) && defined(CGR_FAKE_NCCL)
	else if (strcmp(mode, "gpu") == 0)
		ret = gpu(ctx);
	else if (strcmp(mode, "ncomm") == 0 || strcmp(mode, "ngraph") == 0)
		ret = ncomm(ctx, strcmp(mode, "ngraph") == 0);
	else if (strcmp(mode, "losenccl") == 0)
		worker_device = 0, ret = lose(ctx, false, 5);
#endif
	else if (strcmp(mode, "gaps") == 0)
		ret = gaps(ctx, argc > 2 ? (unsigned)atoi(argv[2]) : 1000);
	else if (strcmp(mode, "driverkill") == 0)
		ret = driver_kill(ctx);
	else
		ret = lose(ctx, strcmp(mode, "idle") == 0,
			   strcmp(mode, "losecoll") == 0    ? 1 :
			   strcmp(mode, "losecomm") == 0  ? 2 :
			   strcmp(mode, "losencomm") == 0 ? 3 :
			   strcmp(mode, "loseacomm") == 0 ? 4 :
							    0);
	cgr_ctx_destroy(ctx);
#if defined(CGR_FAKE_CUDART) && defined(CGR_FAKE_NCCL)
	if (cuda)
		span_drop();
#endif
	cgr_job_leave(job);
	printf("driver %s\n", ret == 0 ? "done" : "FAILED");
	return ret;
}
