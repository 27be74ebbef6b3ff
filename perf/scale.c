/*
 * perf/scale.c: how cgr scales with the graph and with its workers.
 *
 * Each configuration runs in a child process of its own (fork), so that
 * its peak RSS (the child's ru_maxrss) is its own.  A configuration
 * builds a graph through cgr.h, compiles it (each compiler pass timed),
 * runs executions one at a time (execute, get, release) and checks every
 * result against the value computed here, then reports:
 *   build and compile time (per pass, and per node), the peak RSS, the
 *   bytes cgr allocated for the compiled graph (its arena), the address
 *   space it reserved for large values (resident only where used), the
 *   shared segment of a graph with process workers, and the execution
 *   latency per task (p50, p99) next to its floor: the same work as
 *   plain function calls, one per task, in this process.
 *
 * Graphs (8-byte values, default compile parameters but the wait mode):
 *   chain     input -> t0 -> t1 -> ... -> t(N-1) (each adds 1) on one
 *             worker, or alternating over two (every edge crosses);
 *   fan       the input to N leaves (leaf i adds i), spread round robin
 *             over W workers, summed on each worker by a tree of fan-ins
 *             (64 inputs each), the partial sums by one task on worker 0;
 *   tp        N / 5 tensor-parallel layers on 4 workers: each worker adds
 *             its index to its copy, an allreduce sums the copies (a
 *             one-element uint64 tensor), layer after layer; tp-ovl the
 *             same compiled with overlap on (the collectives on their
 *             streams: the overlap rewrite and its pruning run).
 * Sweeps: chains of N = 100 .. 100,000; fan-out/fan-in of N = 100 ..
 * 100,000 leaves on 2 workers; fan-out/fan-in of 4 leaves per worker on
 * 1 .. 256 thread workers (block mode) and 1 .. 64 process workers (this
 * program started again: cgr_worker_main first in main), with the time
 * to start each worker and the memory per worker.  Then "flat": chains of
 * 100 and of 10,000 tasks compiled side by side in one process on two
 * workers, their executions interleaved window by window (the order
 * alternating), and the ratio of their per-task p50 (median over
 * windows of the per-window ratio).
 *
 * Options: --quick (N up to 10,000, fewer workers and windows), --json
 * (JSON lines only), --case NAME (chain, chain2, fan, tp, tp-ovl, threads,
 * procs, sizing, flat), -w windows for flat.
 */
#include "perf.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cgr.h>

#include "compile/prog.h"
#include "ctx/ctx.h"

#define BENCH "scale"
#define FAN_ARITY 64

/* ---- tasks ---- */

static uint64_t in_u64(const cgr_value *v)
{
	uint64_t x = 0;

	if (v->kind == CGR_VALUE_BYTES && v->u.bytes.len == 8)
		memcpy(&x, v->u.bytes.data, 8);
	return x;
}

static int put_u64(cgr_task_ctx *tc, cgr_value *out, uint64_t x)
{
	uint64_t *o = cgr_task_output_buffer(tc, 0, 8);

	if (o == NULL)
		return -1;
	*o = x;
	out[0] = cgr_value_bytes(o, 8);
	return 0;
}

/* in + the u64 of its arg_data (a chain's 1, a leaf's index). */
static int add_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	uint64_t k;

	(void)st, (void)nin, (void)nout;
	memcpy(&k, cgr_task_arg(tc), 8);
	return put_u64(tc, out, in_u64(&in[0]) + k);
}

static int sum_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		  size_t nin, cgr_value *out, size_t nout)
{
	uint64_t s = 0;

	(void)st, (void)nout;
	for (size_t i = 0; i < nin; i++)
		s += in_u64(&in[i]);
	return put_u64(tc, out, s);
}

/* A tensor-parallel layer's share: in (the input's bytes, or the last
 * allreduce's one-element uint64 tensor) + k, as such a tensor. */
static int tp_fn(cgr_task_ctx *tc, void *st, const cgr_value *in,
		 size_t nin, cgr_value *out, size_t nout)
{
	static const int64_t one[1] = { 1 };
	uint64_t k, x = 0, *o = cgr_task_output_buffer(tc, 0, 8);

	(void)st, (void)nin, (void)nout;
	if (in[0].kind == CGR_VALUE_TENSOR)
		memcpy(&x, in[0].u.tensor.data, 8);
	else
		x = in_u64(&in[0]);
	memcpy(&k, cgr_task_arg(tc), 8);
	if (o == NULL)
		return -1;
	*o = x + k;
	out[0] = cgr_value_tensor(o, kDLUInt, 64, 1, (int64_t *)one);
	return 0;
}

static const cgr_export exports[] = { { "add", add_fn, NULL, NULL },
				      { "sum", sum_fn, NULL, NULL },
				      { "tp", tp_fn, NULL, NULL },
				      { NULL, NULL, NULL, NULL } };

/* ---- graphs ---- */

enum shape { CHAIN, CHAIN_ALT, FAN, TP };

struct built {
	cgr_graph *g;
	size_t ntasks;
	uint64_t (*expect)(uint64_t x, size_t n);
	size_t n;
};

static uint64_t chain_expect(uint64_t x, size_t n)
{
	return x + n;
}

static uint64_t fan_expect(uint64_t x, size_t n)
{
	return n * x + (uint64_t)n * (n - 1) / 2;
}

static int task(struct built *b, cgr_worker *w, cgr_task_fn fn,
		const char *name, uint64_t k, cgr_node *const *in, size_t nin,
		cgr_node **out)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;

	d.name = name;
	d.fn = fn;
	d.arg_data = &k;
	d.arg_len = 8;
	b->ntasks++;
	return cgr_graph_task(b->g, w, &d, in, nin, out, 1);
}

static int build_chain(struct built *b, cgr_worker **w, size_t nw, size_t n,
		       bool alt)
{
	cgr_node *x;
	char name[32];
	int ret = cgr_graph_input(b->g, 0, &x);

	for (size_t i = 0; i < n && ret == 0; i++) {
		size_t wi = alt ? i % nw : i * nw / n;
		snprintf(name, sizeof(name), "t%zu", i);
		ret = task(b, w[wi], add_fn, name, 1, &x, 1, &x);
	}
	b->expect = chain_expect;
	return ret ? ret : cgr_graph_output(b->g, &x, 1);
}

/* Sums nodes v[0..n) on worker w by a tree of FAN_ARITY-input tasks;
 * *out gets the root.  v is overwritten. */
static int sum_tree(struct built *b, cgr_worker *w, cgr_node **v, size_t n,
		    size_t tag, cgr_node **out)
{
	char name[48];
	size_t level = 0;
	int ret = 0;

	while (n > 1 && ret == 0) {
		size_t m = 0;
		for (size_t i = 0; i < n && ret == 0; i += FAN_ARITY, m++) {
			size_t k = n - i < FAN_ARITY ? n - i : FAN_ARITY;
			snprintf(name, sizeof(name), "sum%zu.%zu.%zu", tag,
				 level, m);
			ret = task(b, w, sum_fn, name, 0, v + i, k, &v[m]);
		}
		n = m;
		level++;
	}
	*out = v[0];
	return ret;
}

/* n tensor-parallel layers over nw workers: worker j adds j to its copy,
 * then an allreduce sums the copies (every worker gets the sum). */
static uint64_t tp_nw;

static uint64_t tp_expect(uint64_t x, size_t n)
{
	uint64_t v = x;

	for (size_t l = 0; l < n; l++)
		v = tp_nw * v + tp_nw * (tp_nw - 1) / 2;
	return v;
}

static int build_tp(struct built *b, cgr_worker **w, size_t nw, size_t n)
{
	cgr_node *x, *cur[256], *part[256];
	char name[48];
	int ret = cgr_graph_input(b->g, 0, &x);

	for (size_t j = 0; j < nw; j++)
		cur[j] = x;
	for (size_t l = 0; l < n && ret == 0; l++) {
		for (size_t j = 0; j < nw && ret == 0; j++) {
			snprintf(name, sizeof(name), "l%zu.w%zu", l, j);
			ret = task(b, w[j], tp_fn, name, j, &cur[j], 1,
				   &part[j]);
		}
		if (ret == 0)
			ret = cgr_graph_allreduce(b->g, part, nw, CGR_SUM, NULL,
						  cur);
		b->ntasks++;
	}
	tp_nw = nw;
	b->expect = tp_expect;
	return ret ? ret : cgr_graph_output(b->g, &cur[0], 1);
}

static int build_fan(struct built *b, cgr_worker **w, size_t nw, size_t n)
{
	cgr_node *x, **leaf = calloc(n, sizeof(*leaf)), *part[256], *root;
	size_t *cnt = calloc(nw, sizeof(*cnt));
	char name[32];
	int ret = leaf != NULL && cnt != NULL ? cgr_graph_input(b->g, 0, &x) :
						-ENOMEM;

	/* Leaves of worker j at leaf[j * per ...]: grouped per worker. */
	size_t per = (n + nw - 1) / nw;
	cgr_node **grp = calloc(nw * per, sizeof(*grp));
	if (grp == NULL)
		ret = -ENOMEM;
	for (size_t i = 0; i < n && ret == 0; i++) {
		size_t j = i % nw;
		snprintf(name, sizeof(name), "leaf%zu", i);
		ret = task(b, w[j], add_fn, name, i, &x, 1, &leaf[i]);
		grp[j * per + cnt[j]++] = leaf[i];
	}
	for (size_t j = 0; j < nw && ret == 0; j++) {
		if (cnt[j] == 0) {
			part[j] = NULL;
			continue;
		}
		ret = sum_tree(b, w[j], grp + j * per, cnt[j], j, &part[j]);
	}
	if (ret == 0) {
		size_t m = 0;
		for (size_t j = 0; j < nw; j++)
			if (part[j] != NULL)
				part[m++] = part[j];
		ret = m > 1 ? task(b, w[0], sum_fn, "total", 0, part, m, &root) :
			      (root = part[0], 0);
	}
	if (ret == 0)
		ret = cgr_graph_output(b->g, &root, 1);
	b->expect = fan_expect;
	free(grp);
	free(cnt);
	free(leaf);
	return ret;
}

/* ---- one configuration (in its own process) ---- */

struct conf {
	const char *name;
	enum shape shape;
	size_t n;  /* chain: tasks; fan: leaves */
	size_t nw; /* workers */
	int kind;  /* enum cgr_worker_kind */
	int wait_mode;
	int overlap; /* cgr_compile_params.overlap */
};

struct result {
	int err;
	char msg[256];
	size_t ntasks;
	double worker_ms, build_ms, compile_ms, pass_ms[CGR__NPASSES];
	double arena_mb, reserved_mb, seg_mb, rss_compiled_mb;
	double p50_ns, p99_ns, floor_ns; /* per task */
	double exec_p50_us;
	double worker_rss_mb; /* process workers: their peak RSS, summed */
	double worker_pss_mb, worker_anon_mb; /* now: Pss, private anon */
	long iters;
};

static int64_t now_ns(void)
{
	return perf_now_ns();
}

/* A line's kB value from a /proc file ("VmHWM:", "Pss:", ...), in MB. */
static double proc_mb(const char *path, const char *key)
{
	FILE *f = fopen(path, "r");
	char line[128];
	size_t kl = strlen(key);
	double kb = 0;

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl))
			kb = atof(line + kl);
	fclose(f);
	return kb / 1024;
}

static double rss_mb(const char *status)
{
	return proc_mb(status, "VmHWM:");
}

/* The same work as plain calls: n loads, adds and stores through a
 * function pointer, per task (ns). */
static uint64_t floor_op(uint64_t *s, uint64_t k)
{
	return *s + k;
}

static double floor_per_task(size_t n)
{
	uint64_t (*volatile fp)(uint64_t *, uint64_t) = floor_op;
	uint64_t *v = calloc(n + 1, 8);
	double best = 1e30;

	for (int r = 0; r < 5; r++) {
		int64_t t0 = now_ns();
		for (size_t i = 0; i < n; i++)
			v[i + 1] = fp(&v[i], 1);
		int64_t t1 = now_ns();
		if ((double)(t1 - t0) < best)
			best = (double)(t1 - t0);
	}
	if (v[n] != (uint64_t)n)
		best = -1; /* never: keeps the loop's work observable */
	free(v);
	return best / (double)n;
}

static void fail(struct result *r, int err, const char *what,
		 const char *msg)
{
	r->err = err;
	snprintf(r->msg, sizeof(r->msg), "%s: %s%s%s", what, cgr_strerror(err),
		 msg != NULL && *msg ? ": " : "", msg != NULL ? msg : "");
}

static void run_conf(const struct conf *cf, struct result *r)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_worker **w = calloc(cf->nw, sizeof(*w));
	struct built b = { NULL, 0, NULL, cf->n };
	cgr_compiled *c = NULL;
	cgr_ctx *ctx;
	size_t arena0;
	int64_t t0;
	double *lat;
	int ret;

	memset(r, 0, sizeof(*r));
	cp.exports = exports;
	if ((ret = cgr_ctx_create(&cp, &ctx)) != 0) {
		fail(r, ret, "cgr_ctx_create", NULL);
		return;
	}
	t0 = now_ns();
	for (size_t i = 0; i < cf->nw; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		wp.kind = cf->kind;
		if ((ret = cgr_worker_create(ctx, &wp, &w[i])) != 0) {
			fail(r, ret, "cgr_worker_create", NULL);
			return;
		}
	}
	r->worker_ms = (double)(now_ns() - t0) / 1e6;
	arena0 = atomic_load(&ctx->arena.live_bytes);
	t0 = now_ns();
	cgr_graph_create(ctx, &b.g);
	ret = cf->shape == FAN ? build_fan(&b, w, cf->nw, cf->n) :
	      cf->shape == TP	? build_tp(&b, w, cf->nw, cf->n) :
				  build_chain(&b, w, cf->nw, cf->n,
					      cf->shape == CHAIN_ALT);
	r->build_ms = (double)(now_ns() - t0) / 1e6;
	if (ret != 0) {
		fail(r, ret, "building", cgr_graph_errmsg(b.g));
		return;
	}
	r->ntasks = b.ntasks;
	pp.wait_mode = cf->wait_mode;
	pp.overlap = cf->overlap;
	t0 = now_ns();
	ret = cgr_graph_compile(b.g, &pp, &c);
	r->compile_ms = (double)(now_ns() - t0) / 1e6;
	if (ret != 0) {
		fail(r, ret, "cgr_graph_compile", cgr_graph_errmsg(b.g));
		return;
	}
	cgr_graph_destroy(b.g);
	for (int k = 0; k < CGR__NPASSES; k++)
		r->pass_ms[k] = (double)c->pass_ns[k] / 1e6;
	r->arena_mb = (double)(atomic_load(&ctx->arena.live_bytes) - arena0) /
		      (1 << 20);
	r->reserved_mb = (double)c->big_len / (1 << 20);
	r->seg_mb = c->seg != NULL ? (double)c->seg->used / (1 << 20) : 0;
	r->rss_compiled_mb = rss_mb("/proc/self/status");

	/* Executions: as many as take about a second, 20 .. 2000. */
	long iters = (long)(2000000 / (b.ntasks + 1));
	iters = iters < 20 ? 20 : iters > 2000 ? 2000 : iters;
	lat = calloc((size_t)iters, sizeof(double));
	for (long i = -iters / 10 - 1; i < iters; i++) {
		uint64_t x = (uint64_t)(i + 100) * 7, y;
		cgr_value a = cgr_value_bytes(&x, 8), o;
		cgr_ref ref;
		int64_t s = now_ns();
		if ((ret = cgr_execute(c, &a, 1, &ref)) != 0 ||
		    (ret = cgr_ref_get(c, ref, -1, &o, 1)) != 0) {
			fail(r, ret, "executing", NULL);
			break;
		}
		int64_t e = now_ns();
		y = o.kind == CGR_VALUE_TENSOR ?
			    *(const uint64_t *)o.u.tensor.data :
			    in_u64(&o);
		if ((o.kind != CGR_VALUE_BYTES && o.kind != CGR_VALUE_TENSOR) ||
		    y != b.expect(x, cf->n)) {
			snprintf(r->msg, sizeof(r->msg),
				 "execution %ld: got %llu (kind %d), want %llu",
				 i, (unsigned long long)y, o.kind,
				 (unsigned long long)b.expect(x, cf->n));
			r->err = -EPROTO;
			break;
		}
		cgr_ref_release(c, ref);
		if (i >= 0) /* the first tenth warms up */
			lat[i] = (double)(e - s);
	}
	if (r->err == 0) {
		r->iters = iters;
		r->exec_p50_us = perf_quantile(lat, (size_t)iters, 0.5) / 1e3;
		r->p50_ns = r->exec_p50_us * 1e3 / (double)b.ntasks;
		r->p99_ns = perf_quantile(lat, (size_t)iters, 0.99) /
			    (double)b.ntasks;
		r->floor_ns = floor_per_task(b.ntasks);
	}
	free(lat);
	for (size_t i = 0; cf->kind == CGR_WORKER_PROCESS && i < cf->nw; i++) {
		char path[64];
		int pid = cgr_worker_pid(w[i]);
		snprintf(path, sizeof(path), "/proc/%d/status", pid);
		r->worker_rss_mb += rss_mb(path);
		/* Its own share: pages shared with the driver and the other
		 * workers (the segment, libraries) divided among them. */
		snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", pid);
		r->worker_pss_mb += proc_mb(path, "Pss:");
		r->worker_anon_mb += proc_mb(path, "Anonymous:");
	}
	cgr_compiled_destroy(c);
	for (size_t i = 0; i < cf->nw; i++)
		cgr_worker_destroy(w[i], -1);
	cgr_ctx_destroy(ctx);
	free(w);
}

/* Runs cf in a child process: r, and its peak RSS (MB). */
static double run_child(const struct conf *cf, struct result *r)
{
	int fd[2];
	struct rusage ru;
	pid_t pid;
	int st;

	memset(r, 0, sizeof(*r));
	if (pipe(fd) != 0) {
		r->err = -errno;
		return 0;
	}
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		close(fd[0]);
		run_conf(cf, r);
		if (write(fd[1], r, sizeof(*r)) != (ssize_t)sizeof(*r))
			_exit(1);
		_exit(0);
	}
	close(fd[1]);
	if (pid < 0 || read(fd[0], r, sizeof(*r)) != (ssize_t)sizeof(*r)) {
		r->err = -EPIPE;
		snprintf(r->msg, sizeof(r->msg), "the child process failed");
	}
	close(fd[0]);
	if (pid > 0 && wait4(pid, &st, 0, &ru) == pid)
		return (double)ru.ru_maxrss / 1024;
	return 0;
}

/* ---- output ---- */

static const char *kind_name(const struct conf *cf)
{
	return cf->kind == CGR_WORKER_PROCESS ? "process" : "thread";
}

static const char *mode_name(int m)
{
	return m == CGR_WAIT_BLOCK ? "block" :
	       m == CGR_WAIT_BUSY  ? "busy" :
				     "adaptive";
}

static void report(const struct perf_opts *o, const struct conf *cf,
		   const struct result *r, double peak_mb)
{
	char passes[512];
	size_t off = 0;

	if (r->err != 0) {
		fprintf(stderr, "%s n=%zu w=%zu: %s\n", cf->name, cf->n, cf->nw,
			r->msg);
		return;
	}
	for (int k = 0; k < CGR__NPASSES; k++)
		off += (size_t)snprintf(passes + off, sizeof(passes) - off,
					"%s\"%s\":%.3f", k ? "," : "",
					cgr__pass_names[k], r->pass_ms[k]);
	if (!o->json) {
		printf("%-7s %7zu %4zu %-8s %8zu %8.1f %9.1f %7.2f %8.1f "
		       "%7.1f %9.0f %7.1f %8.1f %8.1f %7.2f %9.1f %8.2f\n",
		       cf->name, cf->n, cf->nw, kind_name(cf), r->ntasks,
		       r->build_ms, r->compile_ms,
		       r->compile_ms * 1e3 / (double)r->ntasks, peak_mb,
		       r->arena_mb, r->reserved_mb, r->seg_mb, r->p50_ns,
		       r->p99_ns, r->floor_ns, r->worker_ms,
		       r->worker_rss_mb);
		printf("        passes (ms):");
		for (int k = 0; k < CGR__NPASSES; k++)
			printf(" %s %.1f", cgr__pass_names[k], r->pass_ms[k]);
		printf("\n");
		if (cf->kind == CGR_WORKER_PROCESS)
			printf("        worker processes: Pss %.1f MB, private "
			       "anonymous %.1f MB (in all)\n",
			       r->worker_pss_mb, r->worker_anon_mb);
	}
	perf_json(BENCH, cf->name, "cgr", "exec_p50_per_task", r->p50_ns, "ns",
		  "\"n\":%zu,\"workers\":%zu,\"kind\":\"%s\",\"wait\":\"%s\","
		  "\"tasks\":%zu,\"p99_per_task_ns\":%.2f,"
		  "\"floor_per_task_ns\":%.3f,\"exec_p50_us\":%.2f,"
		  "\"iters\":%ld,\"build_ms\":%.3f,\"compile_ms\":%.3f,"
		  "\"compile_us_per_task\":%.3f,\"passes_ms\":{%s},"
		  "\"peak_rss_mb\":%.1f,\"rss_after_compile_mb\":%.1f,"
		  "\"arena_mb\":%.2f,\"reserved_mb\":%.1f,\"segment_mb\":%.2f,"
		  "\"workers_ms\":%.2f,\"worker_processes_rss_mb\":%.1f,"
		  "\"worker_processes_pss_mb\":%.1f,"
		  "\"worker_processes_anon_mb\":%.1f",
		  cf->n, cf->nw, kind_name(cf), mode_name(cf->wait_mode),
		  r->ntasks, r->p99_ns, r->floor_ns, r->exec_p50_us, r->iters,
		  r->build_ms, r->compile_ms,
		  r->compile_ms * 1e3 / (double)r->ntasks, passes, peak_mb,
		  r->rss_compiled_mb, r->arena_mb, r->reserved_mb, r->seg_mb,
		  r->worker_ms, r->worker_rss_mb, r->worker_pss_mb,
		  r->worker_anon_mb);
}

/* ---- sizing: what each part of a graph costs ---- */

/* The bytes cgr keeps for compiled graph `shape` of n (on nw workers,
 * max_inflight inflight), the graph itself destroyed: its arena's growth
 * (slots, programs, plan, rings, boards). */
static double sized(cgr_ctx *ctx, cgr_worker **w, enum shape shape, size_t n,
		    size_t nw, uint32_t inflight)
{
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	struct built b = { NULL, 0, NULL, n };
	cgr_compiled *c = NULL;
	size_t a0 = atomic_load(&ctx->arena.live_bytes), a1;
	int ret;

	cgr_graph_create(ctx, &b.g);
	ret = shape == TP	 ? build_tp(&b, w, nw, n) :
	      shape == FAN	 ? build_fan(&b, w, nw, n) :
				   build_chain(&b, w, nw, n, shape == CHAIN_ALT);
	pp.max_inflight = inflight;
	if (ret == 0)
		ret = cgr_graph_compile(b.g, &pp, &c);
	cgr_graph_destroy(b.g);
	if (ret != 0) {
		fprintf(stderr, "sizing: %s\n", cgr_strerror(ret));
		return -1;
	}
	a1 = atomic_load(&ctx->arena.live_bytes);
	cgr_compiled_destroy(c);
	return (double)(a1 - a0);
}

static int sizing(const struct perf_opts *o)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_worker *w[4];
	cgr_ctx *ctx;
	double task, slot, edge, coll, base;

	cp.exports = exports;
	if (cgr_ctx_create(&cp, &ctx) != 0)
		return 1;
	for (int i = 0; i < 4; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		if (cgr_worker_create(ctx, &wp, &w[i]) != 0)
			return 1;
	}
	/* A task (its output's 8 slots included), then a slot more per
	 * output, a value crossing between workers (a channel), an
	 * allreduce of 4 members (its 4 outputs' slots included). */
	base = sized(ctx, w, CHAIN, 1000, 1, 8);
	task = (sized(ctx, w, CHAIN, 2000, 1, 8) - base) / 1000;
	slot = (sized(ctx, w, CHAIN, 1000, 1, 16) - base) / 1000 / 8;
	edge = (sized(ctx, w, CHAIN_ALT, 1000, 2, 8) -
		sized(ctx, w, CHAIN, 1000, 2, 8)) /
	       998;
	coll = (sized(ctx, w, TP, 400, 4, 8) - sized(ctx, w, TP, 200, 4, 8)) /
		       200 -
	       4 * task;
	if (!o->json)
		printf("\nsizing (bytes cgr allocates when compiling, 8-byte "
		       "values, default max_inflight 8):\n"
		       "  per task, with its output's 8 slots   %8.0f\n"
		       "  per slot more (max_inflight)          %8.0f\n"
		       "  per value crossing workers (channel)  %8.0f\n"
		       "  per allreduce of 4 (its 4 outputs)    %8.0f\n",
		       task, slot, edge, coll);
	perf_json(BENCH, "sizing", "cgr", "bytes_per_task", task, "B",
		  "\"slot\":%.0f,\"crossing_edge\":%.0f,"
		  "\"allreduce4\":%.0f",
		  slot, edge, coll);
	for (int i = 0; i < 4; i++)
		cgr_worker_destroy(w[i], -1);
	cgr_ctx_destroy(ctx);
	return 0;
}

/* ---- flat: 100 and 10,000 tasks side by side ---- */

static int flat_chain(cgr_ctx *ctx, cgr_worker *w, size_t n,
		      cgr_compiled **c)
{
	struct built b = { NULL, 0, NULL, n };
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	int ret;

	cgr_graph_create(ctx, &b.g);
	ret = build_chain(&b, &w, 1, n, false);
	if (getenv("XINF") && n > 1000) pp.max_inflight = atoi(getenv("XINF"));
	if (ret == 0)
		ret = cgr_graph_compile(b.g, &pp, c);
	cgr_graph_destroy(b.g);
	return ret;
}

/* One execution of c (a chain of n) with argument x, checked: its
 * latency in ns, or a negative error. */
static double flat_one(cgr_compiled *c, size_t n, uint64_t x)
{
	cgr_value a = cgr_value_bytes(&x, 8), o;
	cgr_ref ref;
	int64_t s = now_ns();
	int ret = cgr_execute(c, &a, 1, &ref);
	uint64_t y;

	if (ret == 0)
		ret = cgr_ref_get(c, ref, -1, &o, 1);
	if (ret != 0)
		return ret;
	s = now_ns() - s;
	y = in_u64(&o);
	cgr_ref_release(c, ref);
	return y == x + n ? (double)s : -EPROTO;
}

/* k executions of c (a chain of n), one at a time: per-task latencies
 * into lat.  Then k more, pipelined (8 in flight, the default limit: the
 * worker never waits for the driver): *tput gets ns per task. */
static int flat_run(cgr_compiled *c, size_t n, long k, double *lat,
		    double *tput)
{
	cgr_ref refs[8];
	int64_t t0;

	for (long i = 0; i < k; i++) {
		lat[i] = flat_one(c, n, (uint64_t)i);
		if (lat[i] < 0)
			return (int)lat[i];
		lat[i] /= (double)n;
	}
	t0 = now_ns();
	for (long i = 0; i < k + 8; i++) {
		uint64_t x = (uint64_t)i, y;
		cgr_value a = cgr_value_bytes(&x, 8), o;
		int ret = 0;
		if (i >= 8) {
			ret = cgr_ref_get(c, refs[i % 8], -1, &o, 1);
			y = ret == 0 ? in_u64(&o) : 0;
			if (ret == 0 && y != (uint64_t)(i - 8) + n)
				ret = -EPROTO;
			if (ret == 0)
				ret = cgr_ref_release(c, refs[i % 8]);
		}
		if (ret == 0 && i < k)
			ret = cgr_execute(c, &a, 1, &refs[i % 8]);
		if (ret != 0)
			return ret;
	}
	*tput = (double)(now_ns() - t0) / (double)k / (double)n;
	return 0;
}

/* A window's run of a chain of n on w: compiled, warmed up (every slot
 * used), measured, torn down (only one graph is alive at a time: an idle
 * one's worker would learn to park, or spin on a core the other needs). */
static int flat_window(cgr_ctx *ctx, cgr_worker *w, size_t n, long k,
		       double *lat, double *p50, double *tput)
{
	cgr_compiled *c;
	double t;
	int ret = flat_chain(ctx, w, n, &c);

	if (ret == 0)
		ret = flat_run(c, n, k / 4 + 8, lat, &t);
	if (ret == 0)
		ret = flat_run(c, n, k, lat, tput);
	if (ret == 0)
		*p50 = perf_quantile(lat, (size_t)k, 0.5);
	cgr_compiled_destroy(c);
	return ret;
}

static int flat(const struct perf_opts *o)
{
	const size_t small = 100, big = 10000;
	const long ks = 2000, kb = 20;
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_worker *w;
	cgr_ctx *ctx;
	size_t nw = (size_t)o->windows;
	double *lat = calloc(ks, sizeof(double));
	double *v = calloc(6 * nw, sizeof(double));
	double *ps = v, *pb = v + nw, *rl = v + 2 * nw, *ts = v + 3 * nw,
	       *tb = v + 4 * nw, *rt = v + 5 * nw;
	double floor = floor_per_task(big);
	int ret;

	cp.exports = exports;
	if ((ret = cgr_ctx_create(&cp, &ctx)) != 0 ||
	    (ret = cgr_worker_create(ctx, &wp, &w)) != 0) {
		fprintf(stderr, "flat: %s\n", cgr_strerror(ret));
		return 1;
	}
	for (size_t win = 0; win < nw && ret == 0; win++) {
		for (int j = 0; j < 2 && ret == 0; j++) {
			if ((j + win) % 2 == 0)
				ret = flat_window(ctx, w, small, ks, lat,
						  &ps[win], &ts[win]);
			else
				ret = flat_window(ctx, w, big, kb, lat,
						  &pb[win], &tb[win]);
		}
		rl[win] = pb[win] / ps[win];
		rt[win] = tb[win] / ts[win];
	}
	if (ret != 0) {
		fprintf(stderr, "flat: %s\n", cgr_strerror(ret));
		return 1;
	}
	double mps = perf_median(ps, nw), mpb = perf_median(pb, nw);
	double mrl = perf_median(rl, nw), mts = perf_median(ts, nw);
	double mtb = perf_median(tb, nw), mrt = perf_median(rt, nw);
	if (!o->json)
		printf("\nflat: chains of %zu and %zu tasks on one worker, "
		       "compiled in turn, %zu windows (floor %.2f ns/task)\n"
		       "  %-34s %8s %8s %7s\n"
		       "  %-34s %8.1f %8.1f %7.2f\n"
		       "  %-34s %8.1f %8.1f %7.2f\n"
		       "  (ratios: medians of per-window ratios; target "
		       "<= 1.30)\n",
		       small, big, nw, floor, "ns per task", "small", "big",
		       "ratio", "latency p50 (one execution at once)", mps,
		       mpb, mrl, "throughput (8 executions in flight)", mts,
		       mtb, mrt);
	perf_json(BENCH, "flat", "cgr", "per_task_ratio_pipelined", mrt, "x",
		  "\"small\":%zu,\"big\":%zu,\"small_ns\":%.2f,"
		  "\"big_ns\":%.2f,\"floor_per_task_ns\":%.3f,\"windows\":%zu",
		  small, big, mts, mtb, floor, nw);
	perf_json(BENCH, "flat", "cgr", "per_task_ratio_latency", mrl, "x",
		  "\"small\":%zu,\"big\":%zu,\"small_p50_ns\":%.2f,"
		  "\"big_p50_ns\":%.2f,\"floor_per_task_ns\":%.3f,"
		  "\"windows\":%zu",
		  small, big, mps, mpb, floor, nw);
	cgr_worker_destroy(w, -1);
	cgr_ctx_destroy(ctx);
	free(lat), free(v);
	return 0;
}

/* ---- main ---- */

static int want(const char *only, const char *name)
{
	return only == NULL || !strcmp(only, name);
}

int main(int argc, char **argv)
{
	static const size_t ns[] = { 100, 1000, 10000, 100000 };
	static const size_t tws[] = { 1, 4, 16, 64, 256 };
	static const size_t pws[] = { 1, 8, 64 };
	struct perf_opts o = { 7, 1, 0, 0 };
	const char *only = NULL;
	char *args[16];
	int nargs = 0, bad = 0;
	size_t maxn;

	cgr_worker_main(argc, argv, exports);
	for (int i = 0; i < argc && nargs < 15; i++) {
		if (!strcmp(argv[i], "--case") && i + 1 < argc)
			only = argv[++i];
		else
			args[nargs++] = argv[i];
	}
	args[nargs] = NULL;
	if (perf_parse(nargs, args, &o,
		       "compile time, memory and per-task latency against graph "
		       "size and worker count; --case chain|chain2|fan|tp|tp-ovl|"
		       "threads|procs|sizing|flat"))
		return 2;
	maxn = o.quick ? 10000 : 100000;
	signal(SIGPIPE, SIG_IGN);
	if (!o.json)
		printf("%-7s %7s %4s %-8s %8s %8s %9s %7s %8s %7s %9s %7s "
		       "%8s %8s %7s %9s %8s\n",
		       "case", "N", "W", "kind", "tasks", "build", "compile",
		       "us/task", "peakRSS", "arena", "reserved", "segment",
		       "p50/task", "p99/task", "floor", "workers", "wRSS");
	if (!o.json)
		printf("%-7s %7s %4s %-8s %8s %8s %9s %7s %8s %7s %9s %7s "
		       "%8s %8s %7s %9s %8s\n",
		       "", "", "", "", "", "ms", "ms", "compile", "MB", "MB",
		       "MB", "MB", "ns", "ns", "ns", "ms", "MB");
	for (int s = 0; s < 5; s++) {
		static const char *const names[] = { "chain", "chain2", "fan",
						     "tp", "tp-ovl" };
		const char *nm = names[s];
		if (!want(only, nm))
			continue;
		for (size_t i = 0; i < CGR__ARRAY_SIZE(ns) && ns[i] <= maxn;
		     i++) {
			/* tp: layers of 4 tasks and an allreduce (N / 5
			 * layers: N nodes). */
			struct conf cf = { nm, s == 4 ? TP : (enum shape)s,
					   s >= 3 ? ns[i] / 5 : ns[i],
					   s == 0 ? 1 : s >= 3 ? 4 : 2,
					   CGR_WORKER_THREAD,
					   CGR_WAIT_ADAPTIVE, s == 4 };
			struct result r;
			double peak = run_child(&cf, &r);
			report(&o, &cf, &r, peak);
			bad |= r.err != 0;
		}
	}
	for (size_t i = 0; want(only, "threads") && i < CGR__ARRAY_SIZE(tws);
	     i++) {
		struct conf cf = { "threads", FAN, 4 * tws[i], tws[i],
				   CGR_WORKER_THREAD, CGR_WAIT_BLOCK, 0 };
		struct result r;
		double peak;
		if (o.quick && tws[i] == 16)
			continue;
		peak = run_child(&cf, &r);
		report(&o, &cf, &r, peak);
		bad |= r.err != 0;
	}
	for (size_t i = 0; want(only, "procs") && i < CGR__ARRAY_SIZE(pws);
	     i++) {
		struct conf cf = { "procs", FAN, 4 * pws[i], pws[i],
				   CGR_WORKER_PROCESS, CGR_WAIT_BLOCK, 0 };
		struct result r;
		double peak;
		if (o.quick && pws[i] == 8)
			continue;
		peak = run_child(&cf, &r);
		report(&o, &cf, &r, peak);
		bad |= r.err != 0;
	}
	if (want(only, "sizing"))
		bad |= sizing(&o);
	if (want(only, "flat"))
		bad |= flat(&o);
	return bad ? 1 : 0;
}
