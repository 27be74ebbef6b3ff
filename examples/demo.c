/*
 * examples/demo.c: a compiled graph over four worker threads.
 *
 *            +--> scale (w1) --+
 *   input -->+                 +--> combine (w3) --> output 0
 *            +--> square (w2) -+
 *   input --> checksum (w0) ------------------------> output 1
 *
 * Each execution takes a vector of int64 as a DLPack tensor.  The demo
 * runs it many times, checks every result against a direct computation,
 * and prints the per-execution latency (execute + get + release).
 *
 * Then a tensor-parallel 2-layer MLP, y = relu(x W1) W2, split over the
 * same four workers as Megatron does: each worker holds a column block of
 * W1 and the matching row block of W2 (built by the worker's init), computes
 * its partial y, and an allreduce sums the partials.  Checked bit for bit
 * against a single-thread reference (integer-valued floats keep every sum
 * exact whatever the order).
 *
 * Usage: demo [executions] [--trace DIR]: with --trace, the MLP graph is
 * also written as DOT (graph and schedule) and its run as Chrome trace
 * JSON into DIR (made if missing).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include <cgr.h>

#define N 256

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* out = in * k, written straight into cgr's buffer (zero copy). */
static int scale(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		 cgr_value *out, size_t nout)
{
	const DLTensor *t = &in[0].u.tensor;
	int64_t k = *(const int64_t *)cgr_task_arg(tc);
	int64_t n = t->shape[0];
	int64_t *o = cgr_task_output_buffer(tc, 0, (size_t)n * 8);

	(void)st, (void)nin, (void)nout;
	if (in[0].kind != CGR_VALUE_TENSOR || o == NULL)
		return CGR_EBADVALUE;
	for (int64_t i = 0; i < n; i++)
		o[i] = ((const int64_t *)t->data)[i] * k;
	out[0].kind = CGR_VALUE_TENSOR;
	out[0].u.tensor = *t;
	out[0].u.tensor.data = o;
	return 0;
}

static int square(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		  cgr_value *out, size_t nout)
{
	const DLTensor *t = &in[0].u.tensor;
	int64_t n = t->shape[0];
	int64_t *o = cgr_task_output_buffer(tc, 0, (size_t)n * 8);

	(void)st, (void)nin, (void)nout;
	for (int64_t i = 0; i < n; i++)
		o[i] = ((const int64_t *)t->data)[i] *
		       ((const int64_t *)t->data)[i];
	out[0].kind = CGR_VALUE_TENSOR;
	out[0].u.tensor = *t;
	out[0].u.tensor.data = o;
	return 0;
}

/* out = a + b, as a value cgr copies. */
static int combine(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t acc[N];
	const DLTensor *a = &in[0].u.tensor, *b = &in[1].u.tensor;

	(void)tc, (void)st, (void)nin, (void)nout;
	for (int64_t i = 0; i < a->shape[0]; i++)
		acc[i] = ((const int64_t *)a->data)[i] +
			 ((const int64_t *)b->data)[i];
	out[0].kind = CGR_VALUE_TENSOR;
	out[0].u.tensor = *a;
	out[0].u.tensor.data = acc;
	return 0;
}

static int checksum(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	static __thread uint64_t sum;
	const DLTensor *t = &in[0].u.tensor;

	(void)tc, (void)st, (void)nin, (void)nout;
	sum = 0;
	for (int64_t i = 0; i < t->shape[0]; i++)
		sum = sum * 31 + (uint64_t)((const int64_t *)t->data)[i];
	out[0] = cgr_value_bytes(&sum, sizeof(sum));
	return 0;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

#include "tp_mlp.h"

static int run_tp_mlp(cgr_ctx *ctx, int iters, const char *trace_dir)
{
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	char path[4096];
	cgr_worker *w[TP];
	cgr_compiled *c;
	static float xin[BATCH * DIN], want[BATCH * DOUT];
	int64_t shape[2], *lat;
	int bad = 0, ret;

	mlp_weights();
	if (trace_dir != NULL) {
		pp.trace_events = 4096;
		snprintf(path, sizeof(path), "%s/tp_mlp.dot", trace_dir);
	}
	if ((ret = mlp_workers(ctx, w)) != 0 ||
	    (ret = mlp_compile(ctx, w, 1, &pp, trace_dir ? path : NULL,
			       &c)) != 0)
		return ret;
	lat = calloc((size_t)iters, sizeof(*lat));
	for (int it = 0; it < iters; it++) {
		cgr_value arg = { 0 }, res[TP];
		cgr_ref ref;
		arg.kind = CGR_VALUE_TENSOR;
		mlp_input(xin, it, &arg.u.tensor, shape);
		int64_t t0 = now_ns();
		if ((ret = cgr_execute(c, &arg, 1, &ref)) != 0 ||
		    (ret = cgr_ref_get(c, ref, -1, res, TP)) != 0)
			return ret;
		lat[it] = now_ns() - t0;
		mlp_reference(xin, want);
		for (int r = 0; r < TP; r++) {
			if (res[r].kind != CGR_VALUE_TENSOR ||
			    memcmp(res[r].u.tensor.data, want, sizeof(want)) != 0)
				bad++;
		}
		cgr_ref_release(c, ref);
	}
	qsort(lat, (size_t)iters, sizeof(*lat), cmp64);
	printf("demo: tensor-parallel MLP [%d x %d] -> %d -> %d over %d "
	       "workers with allreduce: %d executions, %s (%d mismatches "
	       "against the single-thread reference)\n",
	       BATCH, DIN, DHID, DOUT, TP, iters, bad ? "WRONG" : "bit-exact",
	       bad);
	printf("demo: tp-mlp latency per execution: p50 %.2f us, p99 %.2f "
	       "us\n",
	       lat[iters / 2] / 1e3, lat[iters * 99 / 100] / 1e3);
	free(lat);
	if (trace_dir != NULL) {
		snprintf(path, sizeof(path), "%s/tp_mlp_schedule.dot",
			 trace_dir);
		ret = cgr_compiled_write_dot(c, path);
		snprintf(path, sizeof(path), "%s/tp_mlp_trace.json", trace_dir);
		cgr_compiled_teardown(c, -1);
		if (ret == 0)
			ret = cgr_compiled_write_trace(c, path);
		if (ret == 0)
			printf("demo: wrote %s/tp_mlp.dot, tp_mlp_schedule.dot "
			       "and tp_mlp_trace.json\n",
			       trace_dir);
		else
			fprintf(stderr, "demo: cannot write into %s: %s\n",
				trace_dir, cgr_strerror(ret));
		bad += ret != 0;
	}
	cgr_compiled_destroy(c);
	return bad ? -1 : 0;
}

static int usage(FILE *f, int status)
{
	fprintf(f, "usage: demo [EXECUTIONS] [--trace DIR]\n"
		   "  EXECUTIONS  of the first graph (default 20000; the MLP "
		   "runs a tenth, at least 100)\n"
		   "  --trace DIR also write the MLP's graph and schedule "
		   "(DOT) and trace (JSON) into DIR\n");
	return status;
}

int main(int argc, char **argv)
{
	int iters = 20000;
	const char *trace_dir = NULL;

	for (int a = 1; a < argc; a++) {
		char *end;
		long v;
		if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0)
			return usage(stdout, 0);
		if (strcmp(argv[a], "--trace") == 0 && a + 1 < argc) {
			trace_dir = argv[++a];
			if (mkdir(trace_dir, 0777) != 0 && errno != EEXIST) {
				perror(trace_dir);
				return 1;
			}
			continue;
		}
		errno = 0;
		v = strtol(argv[a], &end, 10);
		if (a != 1 || end == argv[a] || *end != 0 || errno || v < 1 ||
		    v > 100000000)
			return usage(stderr, 2);
		iters = (int)v;
	}
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx;
	cgr_worker *w[4];
	cgr_graph *g;
	cgr_node *in, *s, *q, *sum, *chk, *outs[2];
	cgr_compiled *c;
	static int64_t k = 3;
	int64_t x[N], shape[1] = { N }, *lat;
	int bad = 0, ret;

	cp.log_fn = cgr_log_stderr;
	if ((ret = cgr_ctx_create(&cp, &ctx)) != 0)
		goto fail;
	for (int i = 0; i < 4; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		char name[16];
		snprintf(name, sizeof(name), "w%d", i);
		wp.name = name;
		if ((ret = cgr_worker_create(ctx, &wp, &w[i])) != 0)
			goto fail;
	}
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &in);
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	d.name = "scale", d.fn = scale, d.arg = &k;
	cgr_graph_task(g, w[1], &d, &in, 1, &s, 1);
	d.name = "square", d.fn = square, d.arg = NULL;
	cgr_graph_task(g, w[2], &d, &in, 1, &q, 1);
	d.name = "combine", d.fn = combine;
	cgr_node *ab[2] = { s, q };
	cgr_graph_task(g, w[3], &d, ab, 2, &sum, 1);
	d.name = "checksum", d.fn = checksum;
	cgr_graph_task(g, w[0], &d, &in, 1, &chk, 1);
	outs[0] = sum, outs[1] = chk;
	cgr_graph_output(g, outs, 2);
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	if ((ret = cgr_graph_compile(g, &pp, &c)) != 0) {
		fprintf(stderr, "compile: %s\n", cgr_graph_errmsg(g));
		goto fail;
	}
	cgr_graph_destroy(g);

	lat = calloc((size_t)iters, sizeof(*lat));
	for (int it = 0; it < iters; it++) {
		cgr_value arg = { 0 }, res[2];
		cgr_ref ref;
		uint64_t want = 0;

		for (int i = 0; i < N; i++)
			x[i] = (int64_t)(it * 7 + i) - 100;
		arg.kind = CGR_VALUE_TENSOR;
		arg.u.tensor.data = x;
		arg.u.tensor.device.device_type = kDLCPU;
		arg.u.tensor.ndim = 1;
		arg.u.tensor.dtype.code = kDLInt;
		arg.u.tensor.dtype.bits = 64;
		arg.u.tensor.dtype.lanes = 1;
		arg.u.tensor.shape = shape;
		int64_t t0 = now_ns();
		if ((ret = cgr_execute(c, &arg, 1, &ref)) != 0 ||
		    (ret = cgr_ref_get(c, ref, -1, res, 2)) != 0)
			goto fail;
		int64_t t1 = now_ns();
		lat[it] = t1 - t0;
		const int64_t *r = res[0].u.tensor.data;
		for (int i = 0; i < N; i++) {
			want = want * 31 + (uint64_t)x[i];
			if (r[i] != x[i] * k + x[i] * x[i])
				bad++;
		}
		if (res[1].kind != CGR_VALUE_BYTES ||
		    *(const uint64_t *)res[1].u.bytes.data != want)
			bad++;
		cgr_ref_release(c, ref);
	}
	qsort(lat, (size_t)iters, sizeof(*lat), cmp64);
	printf("demo: 4 workers, %d executions of a %d-element graph "
	       "(scale | square -> combine, checksum)\n",
	       iters, N);
	printf("demo: results %s (%d mismatches against the direct "
	       "computation)\n",
	       bad ? "WRONG" : "correct", bad);
	printf("demo: latency per execution (execute+get): p50 %.2f us, "
	       "p99 %.2f us\n",
	       lat[iters / 2] / 1e3, lat[iters * 99 / 100] / 1e3);
	free(lat);
	cgr_compiled_destroy(c);
	ret = run_tp_mlp(ctx, iters / 10 > 100 ? iters / 10 : 100, trace_dir);
	cgr_ctx_destroy(ctx);
	if (ret != 0 && ret != -1)
		goto fail;
	return bad || ret ? 1 : 0;
fail:
	fprintf(stderr, "demo: %s\n", cgr_strerror(ret));
	return 1;
}
