/*
 * tests/job-single.c: a job without a launcher (cgr.h, "Across hosts"):
 * cgr_job_join gives a job of one, this process, its driver; the same
 * program runs on one host unchanged.  Its rank, size, driver, host and
 * transports; its parameters checked; serving refused on the driver;
 * workers' ranks checked (this rank: here; another: -EINVAL, with a job
 * and without); a graph on a worker of rank 0 runs; nothing was sent;
 * without a launcher's environment libpmix is not loaded (sanitizer
 * builds: nothing leaks, a failed PMIx_Init would keep a few bytes).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cgr.h>

#include "tap.h"

static int add1(cgr_task_ctx *tc, void *state, const cgr_value *in,
		size_t nin, cgr_value *out, size_t nout)
{
	uint64_t *o = cgr_task_output_buffer(tc, 0, 8);

	(void)state, (void)nin, (void)nout;
	memcpy(o, in[0].u.bytes.data, 8);
	*o += 1;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

static int worker_rank(cgr_ctx *ctx, int rank, cgr_worker **w)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;

	wp.rank = rank;
	return cgr_worker_create(ctx, &wp, w);
}

static void params(void)
{
	cgr_job_params p = CGR_JOB_PARAMS_INIT;
	cgr_job *j = NULL;

	p.size = 0;
	t_is(cgr_job_join(&p, &j), -EINVAL, "a params struct of size 0");
	p = (cgr_job_params)CGR_JOB_PARAMS_INIT;
	p.driver = 1;
	t_is(cgr_job_join(&p, &j), -EINVAL, "a driver rank outside the job");
	p = (cgr_job_params)CGR_JOB_PARAMS_INIT;
	p.deadline_ns = 1000000;
	p.heartbeat_ns = 2000000;
	t_is(cgr_job_join(&p, &j), -EINVAL,
	     "heartbeats no sooner than the deadline");
	p.heartbeat_ns = 500001;
	t_is(cgr_job_join(&p, &j), -EINVAL,
	     "heartbeats less often than half the deadline: -EINVAL");
	p.heartbeat_ns = 500000;
	t_is(cgr_job_join(&p, &j), 0, "every half deadline: accepted");
	cgr_job_leave(j);
	j = NULL;
	p = (cgr_job_params)CGR_JOB_PARAMS_INIT;
	p.wait_mode = 7;
	t_is(cgr_job_join(&p, &j), -EINVAL, "an unknown wait mode");
	t_ok(j == NULL, "*out untouched on failure");
	t_is(cgr_job_join(NULL, NULL), -EINVAL, "no out");
	{
		/* A struct from a newer cgr: its tail is ignored, as for
		 * every parameter struct. */
		struct {
			cgr_job_params p;
			char newer[32];
		} big = { CGR_JOB_PARAMS_INIT, { 0 } };
		big.p.size = sizeof(big);
		t_is(cgr_job_join(&big.p, &j), 0, "a larger params struct");
		cgr_job_leave(j);
		j = NULL;
	}
}

int main(int argc, char **argv)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_job_stats st;
	cgr_job *j;
	cgr_ctx *ctx, *plain;
	cgr_worker *w, *x;
	char host[256] = "";
	int ret;

	t_init(argc, argv, 60);
	params();
	ret = cgr_job_join(NULL, &j);
	t_is(ret, 0, "joins without a launcher");
	if (ret != 0)
		return t_done();
	gethostname(host, sizeof(host) - 1);
	t_ok(cgr_job_rank(j) == 0 && cgr_job_size(j) == 1 &&
		     cgr_job_driver(j) == 0,
	     "a job of one: rank 0 of 1, its own driver");
	t_ok(strcmp(cgr_job_host(j, 0), host) == 0,
	     "its host is this one's name (%s)", cgr_job_host(j, 0));
	t_ok(strcmp(cgr_job_host(j, 1), "") == 0 &&
		     strcmp(cgr_job_host(j, -1), "") == 0,
	     "no other rank's host");
	t_ok(strcmp(cgr_job_transports(j), "") == 0, "no transports");
	t_is(cgr_job_serve(j, NULL), -EINVAL, "the driver does not serve");
	t_is(cgr_job_serve(NULL, NULL), -EINVAL, "serving no job");
	t_ok(cgr_job_rank(NULL) < 0 && cgr_job_size(NULL) < 0,
	     "no job has no rank or size");

	cp.job = j;
	t_is(cgr_ctx_create(&cp, &ctx), 0, "a context driving the job");
	t_is(worker_rank(ctx, 1, &x), -EINVAL, "no rank 1 in a job of one");
	t_is(worker_rank(ctx, -2, &x), -EINVAL, "rank -2 is no rank");
	t_is(worker_rank(ctx, 0, &w), 0, "a worker on rank 0 is here");
	{
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		wp.rank = 1;
		wp.kind = CGR_WORKER_PROCESS;
		t_is(cgr_worker_create(ctx, &wp, &x), -EINVAL,
		     "a process worker on another rank: refused");
	}
	{
		cgr_graph *g;
		cgr_node *in, *out;
		cgr_compiled *c;
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		uint64_t v = 41;
		cgr_value a = cgr_value_bytes(&v, 8), o;
		cgr_ref r;
		d.name = "add1";
		d.fn = add1;
		ret = cgr_graph_create(ctx, &g);
		if (ret == 0)
			ret = cgr_graph_input(g, 0, &in);
		if (ret == 0)
			ret = cgr_graph_task(g, w, &d, &in, 1, &out, 1);
		if (ret == 0)
			ret = cgr_graph_output(g, &out, 1);
		if (ret == 0)
			ret = cgr_graph_compile(g, NULL, &c);
		if (ret == 0)
			ret = cgr_execute(c, &a, 1, &r);
		if (ret == 0)
			ret = cgr_ref_get(c, r, -1, &o, 1);
		t_ok(ret == 0 && o.kind == CGR_VALUE_BYTES &&
			     *(const uint64_t *)o.u.bytes.data == 42,
		     "a graph on it runs (41 + 1)");
		if (ret == 0)
			cgr_compiled_destroy(c);
		cgr_graph_destroy(g);
	}
	cgr_job_stats_get(j, &st);
	t_ok(st.data_sent == 0 && st.data_received == 0 && st.control == 0 &&
		     st.heartbeats == 0 && st.late == 0 && st.lost == 0,
	     "nothing crossed hosts");
	cgr_ctx_destroy(ctx);

	t_is(cgr_ctx_create(NULL, &plain), 0, "a context without a job");
	t_is(worker_rank(plain, 0, &w), 0, "rank 0 is this process there");
	t_is(worker_rank(plain, 1, &x), -EINVAL, "rank 1 is no rank there");
	cgr_ctx_destroy(plain);
	{
		cgr_job *j2 = NULL;
		t_is(cgr_job_join(NULL, &j2), -EBUSY,
		     "a second job while in one: -EBUSY");
		t_ok(j2 == NULL, "...and no job for it");
	}
	cgr_job_leave(j);
	cgr_job_leave(NULL);
	t_ok(1, "left the job (and a NULL one)");
	ret = cgr_job_join(NULL, &j);
	t_is(ret, 0, "joins again once it left");
	t_ok(ret == 0 && cgr_job_size(j) == 1, "...a job of one again");
	if (ret == 0)
		cgr_job_leave(j);
#if defined(HAVE_PMIX) && defined(HAVE_UCX)
	/* A launcher's variables set, its PMIx server nowhere: not a job
	 * of one (every rank would drive its own), -EIO.  In a child: the
	 * failed PMIx_Init keeps a few bytes (sanitizer builds see them). */
	{
		int status = -1;
		pid_t pid = fork();
		if (pid == 0) {
			setenv("PMIX_NAMESPACE", "cgr-test-no-such-launcher", 1);
			setenv("PMIX_RANK", "0", 1);
			j = NULL;
			ret = cgr_job_join(NULL, &j);
			_exit(ret == -EIO && j == NULL	   ? 0 :
			      ret == -ENOENT && j == NULL ? 2 :
							    1);
		}
		waitpid(pid, &status, 0);
		t_ok(WIFEXITED(status) && WEXITSTATUS(status) != 1,
		     "launcher variables without its PMIx: %s, not a job of "
		     "one",
		     WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "-EIO" :
		     WIFEXITED(status) && WEXITSTATUS(status) == 2 ?
								      "-ENOENT (no libpmix)" :
								      "wrong");
	}
#endif
	return t_done();
}
