/*
 * examples/hosts.c: one compiled graph across three hosts.  Start it once
 * per host with a PMIx launcher (scripts/hosts-demo.sh does, on three
 * network namespaces of this machine; on a cluster:
 *   mpirun --host a,b,c -np 3 -x UCX_TLS=tcp,self build/examples/hosts).
 * Rank 0 drives: a 3-stage pipeline, stage k a thread worker on rank k
 * (k modulo the job's size: without a launcher the job is this one
 * process, and the program runs all three stages here, unchanged), 1000
 * executions of a 4 KiB value, every output checked against a direct
 * computation.  The other ranks serve until the driver leaves.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cgr.h>

/* Stage k: every byte times 3, plus k. */
static int stage(cgr_task_ctx *tc, void *state, const cgr_value *in,
		 size_t nin, cgr_value *out, size_t nout)
{
	unsigned k = *(const unsigned char *)cgr_task_arg(tc);
	size_t n = in[0].u.bytes.len;
	unsigned char *o = cgr_task_output_buffer(tc, 0, n);
	const unsigned char *x = in[0].u.bytes.data;

	(void)state, (void)nin, (void)nout;
	for (size_t i = 0; i < n; i++)
		o[i] = (unsigned char)(x[i] * 3u + k);
	out[0] = cgr_value_bytes(o, n);
	return 0;
}

/* Task functions cross hosts by name. */
static const cgr_export exports[] = {
	{ "stage", stage, NULL, NULL },
	{ NULL, NULL, NULL, NULL },
};

static int drive(cgr_job *job)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *ctx;
	cgr_graph *g;
	cgr_node *n;
	cgr_compiled *c;
	cgr_worker *w[3];
	unsigned char in[4096], want[4096];
	unsigned bad = 0;
	int nhosts = 0, size = cgr_job_size(job);
	int nranks = size < 3 ? size : 3;
	struct timespec t0, t1;

	cp.job = job;
	cp.exports = exports;
	if (cgr_ctx_create(&cp, &ctx) != 0 || cgr_graph_create(ctx, &g) != 0 ||
	    cgr_graph_input(g, 0, &n) != 0)
		return 1;
	for (int k = 0; k < 3; k++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		unsigned char kb = (unsigned char)k;
		char name[16];
		snprintf(name, sizeof(name), "stage%d", k);
		wp.name = name;
		wp.rank = k % size; /* stage k on rank k */
		d.name = name;
		d.fn = stage;
		d.arg_data = &kb;
		d.arg_len = 1;
		if (cgr_worker_create(ctx, &wp, &w[k]) != 0 ||
		    cgr_graph_task(g, w[k], &d, &n, 1, &n, 1) != 0)
			return 1;
		printf("stage %d on rank %d, %s\n", k, k % size,
		       cgr_job_host(job, k % size));
	}
	if (cgr_graph_output(g, &n, 1) != 0 ||
	    cgr_graph_compile(g, NULL, &c) != 0) {
		fprintf(stderr, "compile: %s\n", cgr_graph_errmsg(g));
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0; i < 1000; i++) {
		cgr_value a, o;
		cgr_ref r;
		for (size_t b = 0; b < sizeof(in); b++) {
			in[b] = (unsigned char)(i + b);
			want[b] = (unsigned char)(((in[b] * 3u) * 3u + 1u) * 3u +
						  2u);
		}
		a = cgr_value_bytes(in, sizeof(in));
		if (cgr_execute(c, &a, 1, &r) != 0 ||
		    cgr_ref_get(c, r, -1, &o, 1) != 0)
			return 1;
		bad += o.kind != CGR_VALUE_BYTES || o.u.bytes.len != sizeof(in) ||
		       memcmp(o.u.bytes.data, want, sizeof(in)) != 0;
		cgr_ref_release(c, r);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	for (int k = 0; k < nranks; k++) { /* the hosts the ranks are on */
		int seen = 0;
		for (int i = 0; i < k; i++)
			seen |= !strcmp(cgr_job_host(job, i),
					cgr_job_host(job, k));
		nhosts += !seen;
	}
	printf("1000 executions over %d rank%s on %d host%s (%s): %u wrong, "
	       "%.1f us each\n",
	       nranks, nranks > 1 ? "s" : "", nhosts, nhosts > 1 ? "s" : "",
	       cgr_job_transports(job)[0] ? cgr_job_transports(job) :
					    "one process",
	       bad,
	       ((double)(t1.tv_sec - t0.tv_sec) * 1e9 +
		(double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / 1000);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	cgr_ctx_destroy(ctx);
	return bad != 0;
}

int main(void)
{
	cgr_job *job;
	int ret;

	if (cgr_job_join(NULL, &job) != 0)
		return 1;
	if (cgr_job_rank(job) != cgr_job_driver(job))
		ret = cgr_job_serve(job, exports) != 0;
	else
		ret = drive(job);
	cgr_job_leave(job);
	return ret;
}
