/*
 * tests/trace.c: Chrome trace JSON of what the workers did (the right
 * number of records, one track per worker, well-formed, time moving
 * forward on each track, capped at trace_events), and DOT pictures of the
 * graph and of the schedule naming every worker, task and collective.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <cgr.h>

#include "tap.h"

static int echo(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	static __thread int64_t v[4], shape[1] = { 4 };
	(void)tc, (void)st, (void)nin, (void)nout;
	memset(&out[0], 0, sizeof(out[0]));
	for (int i = 0; i < 4; i++)
		v[i] = ((const int64_t *)in[0].u.bytes.data)[0] + i;
	out[0].kind = CGR_VALUE_TENSOR;
	out[0].u.tensor.data = v;
	out[0].u.tensor.device.device_type = kDLCPU;
	out[0].u.tensor.ndim = 1;
	out[0].u.tensor.shape = shape;
	out[0].u.tensor.dtype.code = kDLInt;
	out[0].u.tensor.dtype.bits = 64;
	out[0].u.tensor.dtype.lanes = 1;
	return 0;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;
	if (f == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n)
		n = 0;
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static int count(const char *s, const char *sub)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, sub)) != NULL; p++)
		n++;
	return n;
}

/* Braces and brackets balance outside strings, and "ts" never goes
 * backwards on a track. */
static int json_sane(const char *s, int tracks)
{
	int depth = 0, in_str = 0;
	double last[16];
	for (int i = 0; i < 16; i++)
		last[i] = -1;
	for (const char *p = s; *p; p++) {
		if (in_str) {
			if (*p == '\\')
				p++;
			else if (*p == '"')
				in_str = 0;
			continue;
		}
		if (*p == '"')
			in_str = 1;
		else if (*p == '{' || *p == '[')
			depth++;
		else if (*p == '}' || *p == ']')
			depth--;
		if (depth < 0)
			return 0;
	}
	for (const char *p = s; (p = strstr(p, "\"ph\":\"X\"")) != NULL;
	     p++) {
		int tid;
		double ts, dur;
		if (sscanf(p, "\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%lf,"
			      "\"dur\":%lf",
			   &tid, &ts, &dur) != 3 ||
		    tid < 0 || tid >= tracks || dur < 0 || ts < last[tid])
			return 0;
		last[tid] = ts;
	}
	return depth == 0 && !in_str;
}

int main(int argc, char **argv)
{
	cgr_ctx *ctx;
	cgr_worker *w[2];
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *a[2], *s[2];
	char dir[] = "/tmp/cgr-trace-XXXXXX", path[256];
	size_t len;
	char *txt;

	t_init(argc, argv, 30);
	t_ok(mkdtemp(dir) != NULL, "scratch directory");
	cgr_ctx_create(NULL, &ctx);
	for (int i = 0; i < 2; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		wp.name = i ? "beta" : "alpha";
		cgr_worker_create(ctx, &wp, &w[i]);
	}
	/* Round 2: overlap, the collective on each worker's stream. */
	for (int round = 0; round < 3; round++) {
		cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
		uint32_t cap = round == 1 ? 5 : 1000;
		pp.overlap = round == 2;
		cgr_graph_create(ctx, &g);
		cgr_graph_input(g, 0, &x);
		for (int i = 0; i < 2; i++) {
			cgr_task_desc d = CGR_TASK_DESC_INIT;
			d.name = i ? "make_b" : "make_a";
			d.fn = echo;
			cgr_graph_task(g, w[i], &d, &x, 1, &a[i], 1);
		}
		cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
		cp.kind = CGR_COLL_ALLREDUCE;
		cp.name = "sum_ab";
		cgr_graph_collective(g, &cp, w, 2, a, 2, s, 2);
		cgr_graph_output(g, s, 2);
		if (round == 0) {
			snprintf(path, sizeof(path), "%s/graph.dot", dir);
			t_is(cgr_graph_write_dot(g, path), 0, "graph DOT");
			txt = slurp(path, &len);
			t_ok(txt && strncmp(txt, "digraph", 7) == 0 &&
				     count(txt, "subgraph cluster_") == 2 &&
				     strstr(txt, "make_a") &&
				     strstr(txt, "make_b") &&
				     strstr(txt, "allreduce") &&
				     strstr(txt, "alpha,beta") &&
				     count(txt, "->") == 6,
			     "graph DOT: two worker clusters, the tasks, the "
			     "allreduce and its members, 6 edges");
			free(txt);
		}
		pp.trace_events = cap;
		t_is(cgr_graph_compile(g, &pp, &c), 0, "compile with tracing");
		cgr_graph_destroy(g);
		for (int it = 0; it < 10; it++) {
			int64_t v = it;
			cgr_value arg = cgr_value_bytes(&v, 8), o[2];
			cgr_ref r;
			cgr_execute(c, &arg, 1, &r);
			cgr_ref_get(c, r, -1, o, 2);
			cgr_ref_release(c, r);
		}
		snprintf(path, sizeof(path), "%s/trace%d.json", dir, round);
		cgr_compiled_teardown(c, -1); /* every record is in */
		t_is(cgr_compiled_write_trace(c, path), 0, "trace JSON");
		txt = slurp(path, &len);
		/* Per worker and execution: READ x, COMPUTE, COLL, WRITE;
		 * with overlap the WRITE is the stream job's, which its own
		 * track shows. */
		int want = round == 0 ? 2 * 10 * 4 :
			   round == 1 ? 2 * 5 :
					2 * 10 * 3 + 2 * 10;
		int tracks = round == 2 ? 4 : 2;
		t_ok(txt != NULL && strstr(txt, "\"traceEvents\""),
		     "trace file has traceEvents");
		t_is(count(txt, "\"ph\":\"X\""), want,
		     "%d operation records (cap %u)", want, cap);
		t_is(count(txt, "thread_name"), tracks,
		     "one track per worker%s",
		     round == 2 ? " and per stream" : "");
		t_ok(json_sane(txt, tracks), "well-formed, time moves forward "
					     "per track");
		if (round == 2)
			t_ok(count(txt, "run sum_ab") == 20 &&
				     count(txt, "alpha collective stream") == 1,
			     "each stream's track has its 10 runs of the "
			     "allreduce");
		if (round == 0)
			t_ok(count(txt, "collective sum_ab") == 20 &&
				     count(txt, "compute make_a") == 10,
			     "records name the operations");
		free(txt);
		if (round == 0) {
			snprintf(path, sizeof(path), "%s/schedule.dot", dir);
			t_is(cgr_compiled_write_dot(c, path), 0,
			     "schedule DOT");
			txt = slurp(path, &len);
			t_ok(txt && count(txt, "subgraph cluster_p") == 2 &&
				     count(txt, "color=blue") == 1 &&
				     strstr(txt, "compute make_b"),
			     "schedule DOT: two programs joined at the "
			     "allreduce");
			free(txt);
		}
		cgr_compiled_destroy(c);
	}
	/* Tracing off. */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	d.fn = echo;
	cgr_graph_task(g, w[0], &d, &x, 1, &a[0], 1);
	cgr_graph_output(g, a, 1);
	cgr_graph_compile(g, NULL, &c);
	t_is(cgr_compiled_write_trace(c, path), -ENODATA,
	     "no trace when tracing is off");
	t_is(cgr_graph_write_dot(g, "/nonexistent/dir/x.dot"), -ENOENT,
	     "unwritable path: -ENOENT");
	if (access("/dev/full", W_OK) == 0) {
		t_is(cgr_graph_write_dot(g, "/dev/full"), -ENOSPC,
		     "a full device: -ENOSPC (the write's own errno)");
		t_is(cgr_compiled_write_dot(c, "/dev/full"), -ENOSPC,
		     "...and for the schedule");
	} else {
		t_skip("no writable /dev/full");
		t_skip("no writable /dev/full");
	}
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	cgr_ctx_destroy(ctx);
	static const char *const files[] = { "graph.dot", "trace0.json",
					     "trace1.json", "trace2.json",
					     "schedule.dot" };
	for (size_t i = 0; i < 5 && getenv("CGR_TEST_KEEP") == NULL; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		remove(path);
	}
	if (getenv("CGR_TEST_KEEP") == NULL)
		remove(dir);
	return t_done();
}
