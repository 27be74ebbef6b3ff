/*
 * tests/graph-schedule.c: the compiler's schedules never deadlock.
 *
 * 1e4 random small graphs (tasks, stream tasks, collectives and
 * device-transport edges over 2-4 workers, some with a late-bound back
 * edge) are planned without running, with overlap off and on.  A graph
 * with a cycle must be rejected with CGR_ECYCLE (checked by the test's own
 * DFS); every accepted graph's final programs (threads and streams) are
 * explored exhaustively over every interleaving of two executions (a
 * brute-force state search): no reachable state may be stuck.  Then
 * mutations: swapping two collectives in one worker's program (on its
 * thread, or on its stream), or a WAIT before its collective's issue,
 * must make the compiler's verifier report CGR_EDEADLOCK naming the
 * workers (and streams) of the cycle.  Plan shapes with overlap: receives
 * issued first, the send and recv streams, WAITs pruned where other
 * orderings imply them and kept where not, stream tasks joined.
 */
#include <errno.h>
#include <string.h>

#include <cgr.h>

#include "compile/compile.h"
#include "tap.h"

static int nop(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
	       cgr_value *out, size_t nout)
{
	(void)tc, (void)st, (void)in, (void)nin, (void)out, (void)nout;
	return 0;
}

/* ---- brute force over interleavings -------------------------------- */

/*
 * Every interleaving of the final programs, threads and streams, for two
 * executions: an exhaustive search of the states, written apart from the
 * compiler's verifier (compile/verify.c), with the same rules: READ takes
 * a message, WRITE adds one (and so does a stream job's fused WRITE), a
 * collective is one joint step of every member (on its thread or at the
 * head of its stream, once issued), a WAIT needs its job run, an SWAIT
 * (a stream job) the stream task's job, a stream task without overlap is
 * waited for by its thread, and the driver admits at most max_inflight
 * executions whose outputs have not all arrived.
 */
#define MAXP 8
#define MAXC 64
#define NS CGR__NSTREAMS_ALL /* streams per worker */
#define EXECS 2

struct state {
	uint16_t pc[MAXP];
	uint8_t pos[MAXP][NS];
	uint8_t have[MAXC];
	uint8_t admitted;
};

struct bf {
	struct cgr_compiled *c;
	/* per program and stream: the ops it gets jobs from, in order */
	uint16_t jobs[MAXP][NS][64];
	uint8_t njobs[MAXP][NS];
	bool driver[MAXC];
	/* seen states: open addressing */
	struct state *tab;
	bool *used;
	size_t cap, n;
	long explored;
	int stuck;
};

static int op_stream(const struct cgr__op *op)
{
	if (op->kind == CGR__OP_COLL && op->coll->async)
		return op->coll->sclass;
	if (op->kind == CGR__OP_SWAIT)
		return op->coll->sclass;
	if (op->kind == CGR__OP_COMPUTE && op->tc->stream)
		return CGR__S_COMP;
	return -1;
}

static const struct cgr__op *fused(const struct cgr__op *op)
{
	if (op->kind == CGR__OP_COLL && op->coll->async)
		return op->coll->fused_write;
	if (op->kind == CGR__OP_COMPUTE && op->tc->stream)
		return op->tc->fused_write;
	return NULL;
}

static uint64_t state_hash(const struct state *s)
{
	const unsigned char *b = (const unsigned char *)s;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < sizeof(*s); i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static bool seen_before(struct bf *b, const struct state *s)
{
	size_t i;

	if (2 * (b->n + 1) > b->cap) {
		struct state *ot = b->tab;
		bool *ou = b->used;
		size_t oc = b->cap;
		b->cap = b->cap ? 2 * b->cap : 4096;
		b->tab = malloc(b->cap * sizeof(*s));
		b->used = calloc(b->cap, 1);
		b->n = 0;
		for (size_t j = 0; j < oc; j++)
			if (ou[j])
				seen_before(b, &ot[j]);
		free(ot);
		free(ou);
	}
	for (i = state_hash(s) & (b->cap - 1); b->used[i];
	     i = (i + 1) & (b->cap - 1))
		if (memcmp(&b->tab[i], s, sizeof(*s)) == 0)
			return true;
	b->used[i] = true;
	b->tab[i] = *s;
	b->n++;
	return false;
}

static size_t nops_of(const struct bf *b, size_t p)
{
	return b->c->progs[p].nops;
}

/* The position of op k among the jobs of its stream s in program p. */
static size_t job_index(const struct bf *b, size_t p, int s, size_t k)
{
	for (size_t j = 0; j < b->njobs[p][s]; j++)
		if (b->jobs[p][s][j] == k)
			return j;
	return SIZE_MAX;
}

/* Whether the job of op k (program p) of execution ex has run; an op of
 * the thread alone: whether the thread passed it. */
static bool ran(const struct bf *b, const struct state *st, size_t p,
		size_t k, size_t ex)
{
	const struct cgr__op *op = &b->c->progs[p].ops[k];
	int s = op_stream(op);
	if (s < 0)
		return st->pc[p] > ex * nops_of(b, p) + k;
	return st->pos[p][s] > ex * b->njobs[p][s] + job_index(b, p, s, k);
}

static void add_write(struct state *n, const struct cgr__op *w)
{
	for (size_t j = 0; w != NULL && j < w->nchans; j++)
		n->have[w->chans[j]]++;
}

/* Where member q is for collective `task` of execution ex: 0 not there,
 * 1 its thread, 2 + s the head of its stream s. */
static int at_coll(const struct bf *b, const struct state *st, size_t q,
		   unsigned task, size_t ex)
{
	const struct cgr__prog *pr = &b->c->progs[q];
	size_t n = pr->nops;

	if (st->pc[q] < EXECS * n) {
		const struct cgr__op *op = &pr->ops[st->pc[q] % n];
		if (op->kind == CGR__OP_COLL && !op->coll->async &&
		    op->coll->task_id == task && st->pc[q] / n == ex)
			return 1;
	}
	for (int s = 0; s < NS; s++) {
		size_t j = st->pos[q][s], nj = b->njobs[q][s], k;
		const struct cgr__op *op;
		if (nj == 0 || j >= EXECS * nj)
			continue;
		k = b->jobs[q][s][j % nj];
		op = &pr->ops[k];
		if (op->kind == CGR__OP_COLL && op->coll->task_id == task &&
		    j / nj == ex && st->pc[q] > ex * n + k)
			return 2 + s;
	}
	return 0;
}

static bool member(const struct bf *b, size_t q, unsigned task)
{
	const struct cgr__prog *pr = &b->c->progs[q];
	for (size_t k = 0; k < pr->nops; k++)
		if (pr->ops[k].kind == CGR__OP_COLL &&
		    pr->ops[k].coll->task_id == task)
			return true;
	return false;
}

/* The joint step of collective `task` of execution ex, if every member is
 * there (taken from the lowest-numbered member only). */
static bool joint(const struct bf *b, const struct state *st, size_t self,
		  unsigned task, size_t ex, struct state *n)
{
	const struct cgr_compiled *c = b->c;
	int where[MAXP];

	for (size_t q = 0; q < c->nprogs; q++) {
		where[q] = member(b, q, task) ? at_coll(b, st, q, task, ex) : -1;
		if (where[q] == 0 || (where[q] > 0 && q < self))
			return false;
	}
	*n = *st;
	for (size_t q = 0; q < c->nprogs; q++) {
		const struct cgr__prog *pr = &c->progs[q];
		if (where[q] == 1) {
			n->pc[q]++;
		} else if (where[q] >= 2) {
			int s = where[q] - 2;
			size_t k = b->jobs[q][s][n->pos[q][s] % b->njobs[q][s]];
			n->pos[q][s]++;
			add_write(n, fused(&pr->ops[k]));
		}
	}
	return true;
}

/* The thread of p: its next state in *n, if it can move. */
static bool thread_move(const struct bf *b, const struct state *st, size_t p,
			struct state *n)
{
	const struct cgr_compiled *c = b->c;
	size_t nops = nops_of(b, p), k = st->pc[p] % nops, ex = st->pc[p] / nops;
	const struct cgr__op *op = &c->progs[p].ops[k];
	int s = op_stream(op);

	if (s >= 0 && op->kind != CGR__OP_SWAIT && ex >= c->nslots &&
	    !ran(b, st, p, k, ex - c->nslots))
		return false;
	*n = *st;
	switch (op->kind) {
	case CGR__OP_READ:
		if (st->have[op->chan] == 0)
			return false;
		n->have[op->chan]--;
		break;
	case CGR__OP_WRITE:
		add_write(n, op);
		break;
	case CGR__OP_COMPUTE:
		if (op->tc->stream && !op->tc->async) {
			if (st->pos[p][s] != ex * b->njobs[p][s] +
						    job_index(b, p, s, k))
				return false;
			n->pos[p][s]++;
			add_write(n, op->tc->fused_write);
		}
		break;
	case CGR__OP_COLL:
		if (!op->coll->async)
			return joint(b, st, p, op->coll->task_id, ex, n);
		break;
	case CGR__OP_WAIT: {
		size_t t = SIZE_MAX, tex = ex;
		const struct cgr__prog *pr = &c->progs[p];
		if (op->prev && ex == 0)
			break;
		tex -= op->prev;
		for (size_t q = 0; q < pr->nops; q++)
			if (op->tc != NULL ?
				    pr->ops[q].kind == CGR__OP_COMPUTE &&
					    pr->ops[q].tc == op->tc :
				    pr->ops[q].kind == CGR__OP_COLL &&
					    pr->ops[q].coll == op->coll)
				t = q;
		if (t != SIZE_MAX && !ran(b, st, p, t, tex))
			return false;
		break;
	}
	default:
		break;
	}
	n->pc[p]++;
	return true;
}

/* Stream s of p: its next state in *n, if it can move. */
static bool stream_move(const struct bf *b, const struct state *st, size_t p,
			int s, struct state *n)
{
	const struct cgr__prog *pr = &b->c->progs[p];
	size_t nj = b->njobs[p][s], j = st->pos[p][s], k, ex;
	const struct cgr__op *op;

	if (nj == 0 || j >= EXECS * nj)
		return false;
	k = b->jobs[p][s][j % nj];
	ex = j / nj;
	op = &pr->ops[k];
	if (st->pc[p] <= ex * pr->nops + k)
		return false; /* not issued */
	if (op->kind == CGR__OP_COLL)
		return joint(b, st, p, op->coll->task_id, ex, n);
	if (op->kind == CGR__OP_SWAIT)
		for (size_t q = 0; q < pr->nops; q++)
			if (pr->ops[q].kind == CGR__OP_COMPUTE &&
			    pr->ops[q].tc == op->tc && !ran(b, st, p, q, ex))
				return false;
	*n = *st;
	n->pos[p][s]++;
	add_write(n, fused(op));
	return true;
}

/* The driver admits execution 1 once execution 1 - max_inflight has every
 * output. */
static void admit(const struct bf *b, struct state *n)
{
	const struct cgr_compiled *c = b->c;

	while (n->admitted < EXECS) {
		if (n->admitted >= c->p.max_inflight)
			for (size_t j = 0; j < c->ndrv_chans; j++)
				if (n->have[c->drv_chans[j]] <
				    n->admitted - c->p.max_inflight + 1)
					return;
		for (size_t ch = 0; ch < c->nchans; ch++)
			if (b->driver[ch])
				n->have[ch]++;
		n->admitted++;
	}
}

static bool finished(const struct bf *b, const struct state *s)
{
	for (size_t p = 0; p < b->c->nprogs; p++) {
		if (s->pc[p] < EXECS * nops_of(b, p))
			return false;
		for (int q = 0; q < NS; q++)
			if (s->pos[p][q] < EXECS * b->njobs[p][q])
				return false;
	}
	return true;
}

static void explore(struct bf *b, struct state *s)
{
	const struct cgr_compiled *c = b->c;
	bool any = false;
	struct state n;

	admit(b, s);
	if (b->stuck || seen_before(b, s))
		return;
	b->explored++;
	for (size_t p = 0; p < c->nprogs; p++) {
		if (s->pc[p] < EXECS * nops_of(b, p) && thread_move(b, s, p, &n)) {
			any = true;
			explore(b, &n);
		}
		for (int q = 0; q < NS; q++)
			if (stream_move(b, s, p, q, &n)) {
				any = true;
				explore(b, &n);
			}
	}
	if (!any && !finished(b, s))
		b->stuck = 1;
}

/* Explores every interleaving of c's programs; 1 if one gets stuck, 0,
 * or -1 if c is too large for the search. */
static int brute_force(struct cgr_compiled *c, long *states)
{
	struct bf *b = calloc(1, sizeof(*b));
	struct state s0;
	int ret = 0;

	b->c = c;
	if (c->nprogs > MAXP || c->nchans > MAXC)
		ret = -1;
	for (size_t p = 0; ret == 0 && p < c->nprogs; p++)
		for (size_t k = 0; k < c->progs[p].nops; k++) {
			const struct cgr__op *op = &c->progs[p].ops[k];
			int s = op_stream(op);
			if (s >= 0 && b->njobs[p][s] < 64)
				b->jobs[p][s][b->njobs[p][s]++] = (uint16_t)k;
		}
	for (size_t ch = 0; ret == 0 && ch < c->nchans; ch++) {
		b->driver[ch] = c->chans[ch].reader_bell != cgr__drv_bell(c);
		for (size_t p = 0; p < c->nprogs; p++)
			for (size_t k = 0; k < c->progs[p].nops; k++) {
				const struct cgr__op *op = &c->progs[p].ops[k];
				const struct cgr__op *w =
					op->kind == CGR__OP_WRITE ? op :
								    fused(op);
				for (size_t j = 0; w != NULL && j < w->nchans;
				     j++)
					if (w->chans[j] == ch)
						b->driver[ch] = false;
			}
	}
	if (ret == 0) {
		memset(&s0, 0, sizeof(s0));
		explore(b, &s0);
		*states += b->explored;
		ret = b->stuck;
	}
	free(b->tab);
	free(b->used);
	free(b);
	return ret;
}

/* ---- random graphs -------------------------------------------------- */

struct rg {
	int nnodes;
	cgr_node *nodes[32];
	int task_of[32];     /* node -> task index, -1 for inputs/consts */
	int deps[16][8];     /* task -> producer tasks */
	int ndeps[16];
	int ntasks;
	bool consumed[32];
};

static bool has_cycle_from(struct rg *r, int t, int *mark)
{
	if (mark[t] == 1)
		return true;
	if (mark[t] == 2)
		return false;
	mark[t] = 1;
	for (int i = 0; i < r->ndeps[t]; i++)
		if (has_cycle_from(r, r->deps[t][i], mark))
			return true;
	mark[t] = 2;
	return false;
}

static bool has_cycle(struct rg *r)
{
	int mark[16] = { 0 };
	for (int t = 0; t < r->ntasks; t++)
		if (has_cycle_from(r, t, mark))
			return true;
	return false;
}

static void add_node(struct rg *r, cgr_node *n, int task)
{
	r->task_of[r->nnodes] = task;
	r->consumed[r->nnodes] = false;
	r->nodes[r->nnodes++] = n;
}

static int pick(struct rg *r)
{
	int i = (int)(t_rand() % (uint64_t)r->nnodes);
	r->consumed[i] = true;
	return i;
}

/* Builds one random graph in g.  Returns whether it has a cycle. */
static bool random_graph(cgr_graph *g, cgr_worker **W, int nw, struct rg *r)
{
	cgr_node *in;
	int ntasks = 1 + (int)(t_rand() % 6);
	bool back = false;
	cgr_node *late = NULL;
	int late_task = -1;

	memset(r, 0, sizeof(*r));
	cgr_graph_input(g, 0, &in);
	add_node(r, in, -1);
	for (int k = 0; k < ntasks; k++) {
		int t = r->ntasks++;
		bool coll = nw >= 2 && t_rand() % 3 == 0;
		if (!coll) {
			cgr_task_desc d = CGR_TASK_DESC_INIT;
			cgr_node *ins[3], *outs[2];
			int nin = 1 + (int)(t_rand() % 3);
			int nout = 1 + (int)(t_rand() % 2);
			d.fn = nop;
			if (t_rand() % 4 == 0) /* work on the compute stream */
				d.flags = CGR_TASK_STREAM;
			for (int i = 0; i < nin; i++) {
				int j = pick(r);
				ins[i] = r->nodes[j];
				if (r->task_of[j] >= 0)
					r->deps[t][r->ndeps[t]++] =
						r->task_of[j];
			}
			/* Sometimes leave input 0 to bind later. */
			if (k > 0 && late == NULL && t_rand() % 8 == 0) {
				ins[0] = NULL;
				late_task = t;
			}
			cgr_graph_task(g, W[t_rand() % (uint64_t)nw], &d, ins,
				       (size_t)nin, outs, (size_t)nout);
			if (late_task == t && late == NULL)
				late = outs[0];
			if (t_rand() % 5 == 0) { /* sent by broadcast */
				cgr_node_set_transport(outs[0],
						       CGR_TRANSPORT_DEVICE, 0);
				if (t_rand() % 4 == 0)
					cgr_node_set_overlap(
						outs[0],
						1 + (int)(t_rand() % 2));
			}
			for (int o = 0; o < nout; o++)
				add_node(r, outs[o], t);
		} else {
			cgr_coll_params p = CGR_COLL_PARAMS_INIT;
			cgr_worker *m[4];
			cgr_node *ins[4], *outs[4];
			int n = 2 + (int)(t_rand() % (uint64_t)(nw - 1));
			int perm[4] = { 0, 1, 2, 3 };
			for (int i = 3; i > 0; i--) {
				int j = (int)(t_rand() % (uint64_t)(i + 1));
				int x = perm[i];
				perm[i] = perm[j], perm[j] = x;
			}
			int used = 0;
			for (int i = 0; i < 4 && used < n; i++)
				if (perm[i] < nw)
					m[used++] = W[perm[i]];
			p.kind = 1 + (int)(t_rand() % CGR_COLL_ALLTOALL);
			p.root = (int)(t_rand() % (uint64_t)n);
			if (t_rand() % 4 == 0) /* forced on or off */
				p.overlap = 1 + (int)(t_rand() % 2);
			int nin = (p.kind == CGR_COLL_BROADCAST ||
				   p.kind == CGR_COLL_SCATTER) ?
					  1 :
					  n;
			int nout = (p.kind == CGR_COLL_REDUCE ||
				    p.kind == CGR_COLL_GATHER) ?
					   1 :
					   n;
			for (int i = 0; i < nin; i++) {
				int j = pick(r);
				ins[i] = r->nodes[j];
				if (r->task_of[j] >= 0)
					r->deps[t][r->ndeps[t]++] =
						r->task_of[j];
			}
			cgr_graph_collective(g, &p, m, (size_t)n, ins,
					     (size_t)nin, outs, (size_t)nout);
			for (int o = 0; o < nout; o++)
				add_node(r, outs[o], t);
		}
	}
	if (late != NULL) {
		/* Bind the hole: usually to an earlier node, sometimes to a
		 * later one (a back edge, which may close a cycle). */
		int j;
		if (t_rand() % 2 == 0) {
			j = r->nnodes - 1;
			back = true;
		} else {
			j = 0;
		}
		r->consumed[j] = true;
		cgr_node_set_input(late, 0, r->nodes[j]);
		if (r->task_of[j] >= 0)
			r->deps[late_task][r->ndeps[late_task]++] =
				r->task_of[j];
	}
	(void)back;
	/* Outputs: every node nobody consumes (so every task reaches one). */
	cgr_node *outs[32];
	size_t no = 0;
	for (int i = 0; i < r->nnodes; i++)
		if (!r->consumed[i] && r->task_of[i] >= 0)
			outs[no++] = r->nodes[i];
	if (no == 0)
		outs[no++] = r->nodes[r->nnodes - 1];
	cgr_graph_output(g, outs, no);
	return has_cycle(r);
}

/* What planning one random graph gave. */
enum { R_ACCEPTED, R_CYCLE_OK, R_OTHER, R_BAD };

static int plan_random(cgr_ctx *ctx, cgr_worker **W, int nw, uint64_t seed,
		       const cgr_compile_params *pp, long it, long *states,
		       bool *cyclic)
{
	cgr_graph *g;
	cgr_compiled *c = NULL;
	struct rg r;
	int ret, res;

	t__rng = seed;
	cgr_graph_create(ctx, &g);
	*cyclic = random_graph(g, W, nw, &r);
	ret = cgr__graph_plan(g, pp, &c);
	if (ret == -EINVAL && strstr(cgr_graph_errmsg(g), "device transport")) {
		res = R_OTHER; /* a device edge with no remote reader */
		*cyclic = false;
	} else if (*cyclic) {
		res = ret == CGR_ECYCLE ? R_CYCLE_OK : R_BAD;
	} else if (ret == 0) {
		int stuck = brute_force(c, states);
		res = stuck < 0 ? R_OTHER : stuck ? R_BAD : R_ACCEPTED;
		if (stuck > 0)
			t_diag("iteration %ld (overlap %d): a stuck interleaving",
			       it, pp->overlap);
	} else if (ret == CGR_EUNUSEDARG || ret == CGR_EUNREACHABLE) {
		res = R_OTHER; /* legitimately rejected shapes */
	} else {
		res = R_BAD;
		t_diag("iteration %ld (overlap %d): %s: %s", it, pp->overlap,
		       cgr_err_name(ret), cgr_graph_errmsg(g));
	}
	if (res == R_BAD && *cyclic)
		t_diag("iteration %ld: a cycle not rejected (%s)", it,
		       cgr_err_name(ret));
	cgr__plan_free(c);
	cgr_graph_destroy(g);
	return res;
}

/*
 * 1e4 random graphs, each planned with overlap off and on (stream tasks,
 * collectives and edges forced on or off here and there; one in four with
 * one execution in flight): the compiler (whose verifier runs on the final
 * programs) must accept every acyclic graph it does not reject for its
 * shape, and the brute force must find no stuck interleaving of the
 * programs it made.
 */
static void test_random(cgr_ctx *ctx, cgr_worker **W)
{
	long n = t_scale(10000), accepted[2] = { 0, 0 }, cycles = 0,
	     rejected_ok = 0, bad = 0, other = 0, states[2] = { 0, 0 };

	for (long it = 0; it < n; it++) {
		uint64_t seed = t_rand();
		int nw = 2 + (int)(seed % 3);
		for (int ov = 0; ov < 2; ov++) {
			cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
			bool cyc;
			int res;
			pp.max_inflight = seed % 4 == 0 ? 1 : 2;
			pp.max_value_bytes = 256;
			pp.overlap = ov;
			res = plan_random(ctx, W, nw, seed, &pp, it, &states[ov],
					  &cyc);
			cycles += cyc && ov == 0;
			rejected_ok += res == R_CYCLE_OK && ov == 0;
			accepted[ov] += res == R_ACCEPTED;
			other += res == R_OTHER && ov == 0;
			bad += res == R_BAD;
		}
	}
	t_is(bad, 0,
	     "%ld random graphs, overlap off / on: %ld / %ld accepted and "
	     "explored (%ld / %ld states), %ld/%ld cycles rejected, %ld other",
	     n, accepted[0], accepted[1], states[0], states[1], rejected_ok,
	     cycles, other);
	t_ok(accepted[0] > n / 2 && accepted[1] > n / 2,
	     "most random graphs were accepted (%ld, %ld)", accepted[0],
	     accepted[1]);
	t_ok(cycles > 0 && rejected_ok == cycles,
	     "every cyclic graph was rejected with CGR_ECYCLE");
}

/* Two allreduces on the same two workers; swapping them on one worker
 * must be caught by the verifier, naming both workers. */
static void test_mutation(cgr_ctx *ctx, cgr_worker **W)
{
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *a[2], *b[2], *ra[2], *rb[2], *outs[4];
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	char msg[512];
	long states = 0;

	d.fn = nop;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < 2; i++) {
		cgr_graph_task(g, W[i], &d, &x, 1, &a[i], 1);
		cgr_graph_task(g, W[i], &d, &x, 1, &b[i], 1);
	}
	cgr_graph_allreduce(g, a, 2, CGR_SUM, NULL, ra);
	cgr_graph_allreduce(g, b, 2, CGR_SUM, NULL, rb);
	outs[0] = ra[0], outs[1] = ra[1], outs[2] = rb[0], outs[3] = rb[1];
	cgr_graph_output(g, outs, 4);
	t_is(cgr__graph_plan(g, NULL, &c), 0, "two allreduces plan");
	t_is(cgr__verify(c, msg, sizeof(msg)), 0,
	     "the compiled order verifies");
	/* Swap the two COLL ops of worker 0's program. */
	struct cgr__prog *p = &c->progs[0];
	size_t k1 = SIZE_MAX, k2 = SIZE_MAX;
	for (size_t k = 0; k < p->nops; k++)
		if (p->ops[k].kind == CGR__OP_COLL) {
			if (k1 == SIZE_MAX)
				k1 = k;
			else
				k2 = k;
		}
	t_ok(k1 != SIZE_MAX && k2 != SIZE_MAX, "worker 0 has two collectives");
	struct cgr__op tmp = p->ops[k1];
	p->ops[k1] = p->ops[k2];
	p->ops[k2] = tmp;
	t_is(cgr__verify(c, msg, sizeof(msg)), CGR_EDEADLOCK,
	     "inconsistent collective order: %s", msg);
	t_ok(strstr(msg, W[0]->name) && strstr(msg, W[1]->name) &&
		     strstr(msg, "allreduce"),
	     "the message names both workers and the collectives");
	t_is(brute_force(c, &states), 1, "the brute force gets stuck too");
	cgr__plan_free(c);
	cgr_graph_destroy(g);

	/* A READ moved before the WRITE that feeds it (same worker pair). */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	cgr_node *p0, *q1, *p1, *q0;
	cgr_graph_task(g, W[0], &d, &x, 1, &p0, 1);
	cgr_graph_task(g, W[1], &d, &p0, 1, &q1, 1);
	cgr_graph_task(g, W[1], &d, &x, 1, &p1, 1);
	cgr_node *two[2] = { p1, q1 };
	cgr_graph_task(g, W[0], &d, two, 2, &q0, 1);
	cgr_graph_output(g, &q0, 1);
	t_is(cgr__graph_plan(g, NULL, &c), 0,
	     "two workers that each read from the other: scheduled safely");
	t_is(cgr__verify(c, msg, sizeof(msg)), 0, "and verified");
	/* Put worker 0's reads first: it now waits for worker 1, which
	 * waits for worker 0's first value. */
	p = &c->progs[0];
	for (size_t k = 0; k < p->nops; k++)
		if (p->ops[k].kind == CGR__OP_READ && k > 0) {
			struct cgr__op r = p->ops[k];
			memmove(&p->ops[1], &p->ops[0], k * sizeof(r));
			p->ops[0] = r;
			break;
		}
	t_is(cgr__verify(c, msg, sizeof(msg)), CGR_EDEADLOCK,
	     "read hoisted above its producer's write: %s", msg);
	cgr__plan_free(c);
	cgr_graph_destroy(g);
}

/*
 * The verifier on the final programs.  Two allreduces over W[0] and W[1],
 * both on the collective streams: swapping them in W[0]'s program makes
 * the two streams meet them in different orders; a WAIT moved before the
 * issue of its collective waits for a job its own thread has not issued.
 * Both must be reported, naming the streams.
 */
static void test_mutation_overlap(cgr_ctx *ctx, cgr_worker **W)
{
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_node *x, *a[2], *b[2], *ra[2], *rb[2], *f[2];
	struct cgr__prog *p;
	cgr_compiled *c;
	cgr_graph *g;
	char msg[512];
	size_t k1 = SIZE_MAX, k2 = SIZE_MAX, wk = SIZE_MAX;
	long states = 0;

	d.fn = nop;
	pp.overlap = 1;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < 2; i++) {
		cgr_graph_task(g, W[i], &d, &x, 1, &a[i], 1);
		cgr_graph_task(g, W[i], &d, &x, 1, &b[i], 1);
	}
	cgr_graph_allreduce(g, a, 2, CGR_SUM, NULL, ra);
	cgr_graph_allreduce(g, b, 2, CGR_SUM, NULL, rb);
	for (int i = 0; i < 2; i++) {
		cgr_node *in[2] = { ra[i], rb[i] };
		cgr_graph_task(g, W[i], &d, in, 2, &f[i], 1);
	}
	cgr_graph_output(g, f, 2);
	t_is(cgr__graph_plan(g, &pp, &c), 0, "overlap: two allreduces plan");
	t_is(cgr__verify(c, msg, sizeof(msg)), 0, "the final programs verify");
	p = &c->progs[0];
	for (size_t k = 0; k < p->nops; k++) {
		if (p->ops[k].kind == CGR__OP_COLL && k1 == SIZE_MAX)
			k1 = k;
		else if (p->ops[k].kind == CGR__OP_COLL)
			k2 = k;
		if (p->ops[k].kind == CGR__OP_WAIT && wk == SIZE_MAX)
			wk = k;
	}
	t_ok(k1 != SIZE_MAX && k2 != SIZE_MAX && wk != SIZE_MAX &&
		     p->ops[k1].coll->async && p->ops[k2].coll->async,
	     "W[0] issues both to its collective stream and waits");
	if (k1 == SIZE_MAX || k2 == SIZE_MAX || wk == SIZE_MAX) {
		cgr__plan_free(c);
		cgr_graph_destroy(g);
		return;
	}
	struct cgr__op tmp = p->ops[k1];
	p->ops[k1] = p->ops[k2];
	p->ops[k2] = tmp;
	t_is(cgr__verify(c, msg, sizeof(msg)), CGR_EDEADLOCK,
	     "the streams meet the allreduces in different orders: %s", msg);
	t_ok(strstr(msg, "w0's collective stream") &&
		     strstr(msg, "w1's collective stream") &&
		     strstr(msg, "allreduce"),
	     "the message names both streams and the collectives");
	t_is(brute_force(c, &states), 1, "the brute force gets stuck too");
	p->ops[k2] = p->ops[k1];
	p->ops[k1] = tmp;
	t_is(cgr__verify(c, msg, sizeof(msg)), 0, "swapped back: verifies");
	t_is(brute_force(c, &states), 0, "and no interleaving gets stuck");
	/* The first WAIT moved to the front, before its collective's
	 * issue. */
	tmp = p->ops[wk];
	memmove(&p->ops[1], &p->ops[0], wk * sizeof(tmp));
	p->ops[0] = tmp;
	t_is(cgr__verify(c, msg, sizeof(msg)), CGR_EDEADLOCK,
	     "a WAIT before its collective's issue: %s", msg);
	t_ok(strstr(msg, "w0 waits for w0's collective stream") &&
		     strstr(msg, "w0's collective stream waits for w0 (issue"),
	     "the message names the thread and its stream");
	t_is(brute_force(c, &states), 1, "the brute force gets stuck too");
	cgr__plan_free(c);
	cgr_graph_destroy(g);
}

/* Two device edges of one task to the same reader: one fused broadcast. */
static void test_edge_group(cgr_ctx *ctx, cgr_worker **W)
{
	cgr_graph *g;
	cgr_compiled *c;
	cgr_node *x, *v[2], *s;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	size_t colls = 0;

	d.fn = nop;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	cgr_graph_task(g, W[0], &d, &x, 1, v, 2);
	cgr_node_set_transport(v[0], CGR_TRANSPORT_DEVICE, 0);
	cgr_node_set_transport(v[1], CGR_TRANSPORT_DEVICE, 0);
	cgr_graph_task(g, W[1], &d, v, 2, &s, 1);
	cgr_graph_output(g, &s, 1);
	t_is(cgr__graph_plan(g, NULL, &c), 0, "two device edges plan");
	for (size_t i = 0; i < c->nprogs; i++)
		for (size_t k = 0; k < c->progs[i].nops; k++)
			colls += c->progs[i].ops[k].kind == CGR__OP_COLL;
	t_is(colls, 2, "one broadcast (one op on each of the 2 workers)");
	t_is(c->nchans, 2, "and no host ring for them (input and output only)");
	cgr__plan_free(c);
	cgr_graph_destroy(g);
}

/* Ray's overlap shape: 3 senders each send a tensor (device edge) to a
 * receiver on W[3] that computes once per tensor.  mid_mode is the middle
 * edge's overlap mode. */
static cgr_graph *ray_shape(cgr_ctx *ctx, cgr_worker **W, int mid_mode)
{
	cgr_graph *g;
	cgr_node *x, *v[3], *s[3], *prev = NULL;
	cgr_task_desc d = CGR_TASK_DESC_INIT;

	d.fn = nop;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < 3; i++) {
		cgr_graph_task(g, W[i], &d, &x, 1, &v[i], 1);
		cgr_node_set_transport(v[i], CGR_TRANSPORT_DEVICE, 0);
	}
	t_is(cgr_node_set_overlap(v[1], mid_mode), 0,
	     "overlap mode %d for the middle edge", mid_mode);
	for (int i = 0; i < 3; i++) {
		cgr_node *in2[2] = { v[i], prev != NULL ? prev : v[i] };
		cgr_graph_task(g, W[3], &d, in2, 2, &s[i], 1);
		prev = s[i];
	}
	cgr_graph_output(g, &s[2], 1);
	return g;
}

/* w's program as one letter per operation: R C W w, B for a collective
 * on the stream, S for one on the worker thread, r where the thread may
 * run a stream's job (a RUN: where overlap off runs it). */
static void prog_shape(const cgr_compiled *c, const cgr_worker *w,
		       char *shape, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < c->nprogs; i++) {
		const struct cgr__prog *p = &c->progs[i];
		if (p->w != w)
			continue;
		for (size_t k = 0; k < p->nops && n + 1 < len; k++) {
			const struct cgr__op *op = &p->ops[k];
			/* K: a stream task; t: a WAIT for one; s: a
			 * stream's wait for one (SWAIT) */
			char ch = 'S';
			if (op->kind == CGR__OP_READ)
				ch = 'R';
			else if (op->kind == CGR__OP_COMPUTE)
				ch = op->tc->stream ? 'K' : 'C';
			else if (op->kind == CGR__OP_WRITE)
				ch = 'W';
			else if (op->kind == CGR__OP_WAIT)
				ch = op->tc != NULL ? 't' : 'w';
			else if (op->kind == CGR__OP_SWAIT)
				ch = 's';
			else if (op->kind == CGR__OP_RUN)
				ch = 'r';
			else if (op->coll->async)
				ch = 'B';
			shape[n++] = ch;
		}
	}
	shape[n] = 0;
}

/* Plans g with overlap (and destroys it); shape gets w's program. */
static void overlap_shape(cgr_graph *g, const cgr_worker *w, char *shape,
			  size_t len, const char *what)
{
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_compiled *c;

	pp.overlap = 1;
	shape[0] = 0;
	t_is(cgr__graph_plan(g, &pp, &c), 0, "plan: %s", what);
	if (c != NULL) {
		prog_shape(c, w, shape, len);
		cgr__plan_free(c);
	}
	cgr_graph_destroy(g);
}

/*
 * Two collectives over W[0] and W[1]: an allreduce c1 (r0, r1), then a
 * reduce c2 to W[1] (s1).  W[0]'s last task f needs r0 and t1 from W[1].
 * t1 from s1: W[1] got c2's result, so W[0] had started c2 and its stream
 * had finished c1: f needs no WAIT.  t1 from r1 alone proves only that
 * W[0] started c1: f must wait.  c1_mode: c1's overlap mode.
 */
static cgr_graph *two_colls(cgr_ctx *ctx, cgr_worker **W, bool t1_from_c2,
			    int c1_mode)
{
	cgr_graph *g;
	cgr_node *x, *a[2], *r[2], *b[2], *s1, *t1, *u1, *f, *outs[2];
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
	size_t no = 0;

	d.fn = nop;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < 2; i++)
		cgr_graph_task(g, W[i], &d, &x, 1, &a[i], 1);
	cp.kind = CGR_COLL_ALLREDUCE;
	cp.overlap = c1_mode;
	cgr_graph_collective(g, &cp, W, 2, a, 2, r, 2);
	for (int i = 0; i < 2; i++)
		cgr_graph_task(g, W[i], &d, &x, 1, &b[i], 1);
	cp.kind = CGR_COLL_REDUCE;
	cp.root = 1;
	cp.overlap = CGR_OVERLAP_DEFAULT;
	cgr_graph_collective(g, &cp, W, 2, b, 2, &s1, 1);
	if (t1_from_c2) {
		cgr_node *in[2] = { s1, r[1] };
		cgr_graph_task(g, W[1], &d, in, 2, &t1, 1);
	} else {
		cgr_graph_task(g, W[1], &d, &r[1], 1, &t1, 1);
		cgr_graph_task(g, W[1], &d, &s1, 1, &u1, 1);
		outs[no++] = u1;
	}
	cgr_node *in[2] = { r[0], t1 };
	cgr_graph_task(g, W[0], &d, in, 2, &f, 1);
	outs[no++] = f;
	cgr_graph_output(g, outs, no);
	return g;
}

/*
 * Two workers that send each other a tensor (device edges) computed from
 * the input: each receive goes to the recv stream and is issued first,
 * ahead of the compute that feeds this worker's own send (send stream).
 */
static void test_overlap_streams(cgr_ctx *ctx, cgr_worker **W)
{
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_node *x, *t[2], *u[2];
	cgr_compiled *c;
	cgr_graph *g;
	char shape[64];
	int classes = 0;

	d.fn = nop;
	pp.overlap = 1;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < 2; i++) {
		cgr_graph_task(g, W[i], &d, &x, 1, &t[i], 1);
		cgr_node_set_transport(t[i], CGR_TRANSPORT_DEVICE, 0);
	}
	for (int i = 0; i < 2; i++)
		cgr_graph_task(g, W[i], &d, &t[1 - i], 1, &u[i], 1);
	cgr_graph_output(g, u, 2);
	t_is(cgr__graph_plan(g, &pp, &c), 0, "plan: an exchange");
	for (int i = 0; i < 2; i++) {
		prog_shape(c, W[i], shape, sizeof(shape));
		t_ok(shape[0] == 'B' && strchr(shape + 1, 'B') != NULL,
		     "W[%d] issues its receive first, its send after the "
		     "compute: %s",
		     i, shape);
	}
	for (size_t i = 0; i < c->nprogs; i++)
		for (size_t k = 0; k < c->progs[i].nops; k++)
			if (c->progs[i].ops[k].kind == CGR__OP_COLL)
				classes |= 1 << c->progs[i].ops[k].coll->sclass;
	t_is(classes, (1 << CGR__S_SEND) | (1 << CGR__S_RECV),
	     "sends on the send stream, receives on the recv stream");
	cgr__plan_free(c);
	cgr_graph_destroy(g);
}

/*
 * An allreduce over W[0] and W[1] (r0, r1); W[0] computes t from r0 and
 * r1 (r1 comes over a ring after W[1]'s allreduce finished) and sends it
 * over a device edge to W[1], whose f reads t and r1.  Before f, W[1]
 * needs its receive; that receive proves its allreduce finished, so the
 * WAIT for the allreduce beside it goes.
 */
static cgr_graph *wait_beside(cgr_ctx *ctx, cgr_worker **W)
{
	cgr_graph *g;
	cgr_node *x, *a[2], *r[2], *t, *f;
	cgr_task_desc d = CGR_TASK_DESC_INIT;

	d.fn = nop;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < 2; i++)
		cgr_graph_task(g, W[i], &d, &x, 1, &a[i], 1);
	cgr_graph_allreduce(g, a, 2, CGR_SUM, NULL, r);
	cgr_graph_task(g, W[0], &d, r, 2, &t, 1);
	cgr_node_set_transport(t, CGR_TRANSPORT_DEVICE, 0);
	cgr_node *in[2] = { t, r[1] };
	cgr_graph_task(g, W[1], &d, in, 2, &f, 1);
	cgr_graph_output(g, &f, 1);
	return g;
}

/*
 * Stream tasks on W[0]: k1, then k2 reading k1 (a graph output), an
 * allreduce of k2 with W[1]'s task (its result a graph output), and a
 * host task h reading k2.  k2 follows k1 by stream order (no wait), its
 * WRITE runs in its stream job, the allreduce's stream joins k2 on the
 * device (SWAIT) and h's thread by a WAIT.  Overlap off: no waits at all
 * (the thread waits for each stream task itself).
 */
static void test_stream_tasks_plan(cgr_ctx *ctx, cgr_worker **W)
{
	char shape[64];
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	cgr_compiled *c;

	for (int overlap = 1; overlap >= 0; overlap--) {
		cgr_graph *g;
		cgr_node *x, *k1, *k2, *b, *h, *r[2], *outs[4];
		cgr_task_desc d = CGR_TASK_DESC_INIT, ds = CGR_TASK_DESC_INIT;
		cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
		d.fn = ds.fn = nop;
		ds.flags = CGR_TASK_STREAM;
		cgr_graph_create(ctx, &g);
		cgr_graph_input(g, 0, &x);
		cgr_graph_task(g, W[0], &ds, &x, 1, &k1, 1);
		cgr_graph_task(g, W[0], &ds, &k1, 1, &k2, 1);
		cgr_graph_task(g, W[1], &d, &x, 1, &b, 1);
		cgr_node *ain[2] = { k2, b };
		cp.kind = CGR_COLL_ALLREDUCE;
		cgr_graph_collective(g, &cp, W, 2, ain, 2, r, 2);
		cgr_graph_task(g, W[0], &d, &k2, 1, &h, 1);
		outs[0] = k2, outs[1] = r[0], outs[2] = r[1], outs[3] = h;
		cgr_graph_output(g, outs, 4);
		pp.overlap = overlap;
		shape[0] = 0;
		t_is(cgr__graph_plan(g, &pp, &c), 0, "plan: stream tasks");
		if (c != NULL) {
			prog_shape(c, W[0], shape, sizeof(shape));
			cgr__plan_free(c);
		}
		cgr_graph_destroy(g);
		if (overlap)
			t_ok(strcmp(shape, "RKKsBrtCW") == 0,
			     "stream tasks: k2 by stream order, its write "
			     "fused, the allreduce's stream and h join it: "
			     "%s",
			     shape);
		else
			t_ok(strcmp(shape, "RKKWSWCW") == 0,
			     "stream tasks without overlap: in program order, "
			     "no waits: %s",
			     shape);
	}
}

/*
 * A stream task k on W[0] feeds an allreduce run on the threads (overlap
 * forced off for it).  When W[1]'s task b reads k over a ring before the
 * allreduce, W[1] cannot post to it before k is done, and no data moves
 * before every member posted: W[0] needs no WAIT for k.  Without that
 * read it does.
 */
static void test_stream_task_barrier(cgr_ctx *ctx, cgr_worker **W)
{
	for (int via_b = 1; via_b >= 0; via_b--) {
		char shape[64];
		cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
		cgr_compiled *c;
		cgr_graph *g;
		cgr_node *x, *k, *b, *r[2];
		cgr_task_desc d = CGR_TASK_DESC_INIT, ds = CGR_TASK_DESC_INIT;
		cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
		d.fn = ds.fn = nop;
		ds.flags = CGR_TASK_STREAM;
		cgr_graph_create(ctx, &g);
		cgr_graph_input(g, 0, &x);
		cgr_graph_task(g, W[0], &ds, &x, 1, &k, 1);
		cgr_graph_task(g, W[1], &d, via_b ? &k : &x, 1, &b, 1);
		cgr_node *ain[2] = { k, b };
		cp.kind = CGR_COLL_ALLREDUCE;
		cp.overlap = CGR_OVERLAP_OFF;
		cgr_graph_collective(g, &cp, W, 2, ain, 2, r, 2);
		cgr_graph_output(g, r, 2);
		pp.overlap = 1;
		shape[0] = 0;
		t_is(cgr__graph_plan(g, &pp, &c), 0, "plan: stream task barrier");
		if (c != NULL) {
			prog_shape(c, W[0], shape, sizeof(shape));
			cgr__plan_free(c);
		}
		cgr_graph_destroy(g);
		if (via_b)
			t_ok(strchr(shape, 't') == NULL,
			     "W[1] read k before the allreduce: W[0] does not "
			     "wait for k: %s",
			     shape);
		else
			t_ok(strstr(shape, "tS") != NULL,
			     "nobody else saw k: W[0] waits for it before the "
			     "allreduce: %s",
			     shape);
	}
}

/* The WAITs other orderings imply are dropped; the others stay. */
static void test_overlap_prune(cgr_ctx *ctx, cgr_worker **W)
{
	char shape[64];

	overlap_shape(two_colls(ctx, W, true, CGR_OVERLAP_DEFAULT), W[0], shape,
		      sizeof(shape), "t1 from the reduce");
	t_ok(strchr(shape, 'w') == NULL && strchr(shape, 'B') != NULL,
	     "W[1]'s reduce result proves W[0]'s allreduce done: no WAIT on "
	     "W[0]: %s",
	     shape);
	overlap_shape(two_colls(ctx, W, false, CGR_OVERLAP_DEFAULT), W[0],
		      shape, sizeof(shape), "t1 from the allreduce");
	t_ok(strchr(shape, 'w') != NULL &&
		     strchr(shape, 'w') == strrchr(shape, 'w') &&
		     strchr(shape, 'w')[1] == 'C',
	     "W[1]'s allreduce result proves only that W[0] started it: one "
	     "WAIT, before f: %s",
	     shape);
	overlap_shape(wait_beside(ctx, W), W[1], shape, sizeof(shape),
		      "a receive beside an allreduce");
	t_ok(strchr(shape, 'w') != NULL &&
		     strchr(shape, 'w') == strrchr(shape, 'w'),
	     "the receive proves the allreduce beside it done: one WAIT on "
	     "W[1]: %s",
	     shape);
	/* The allreduce on the thread, the reduce on the stream: the next
	 * execution's allreduce (same communicator) must wait for this
	 * one's reduce. */
	overlap_shape(two_colls(ctx, W, false, CGR_OVERLAP_OFF), W[0], shape,
		      sizeof(shape), "allreduce on the thread");
	t_ok(strstr(shape, "wS") != NULL && strchr(shape, 'B') != NULL,
	     "the thread's allreduce waits for the previous execution's "
	     "reduce: %s",
	     shape);
}

/*
 * Overlap: the receiver's program must issue all 3 broadcasts first (in
 * the global order), then wait for each right before the compute that
 * uses it; with the middle edge's overlap off, that one runs on the
 * worker thread after the receive before it is done, and nothing is
 * issued ahead of it.
 */
static void test_overlap_plan(cgr_ctx *ctx, cgr_worker **W)
{
	char shape[64];

	overlap_shape(ray_shape(ctx, W, CGR_OVERLAP_DEFAULT), W[3], shape,
		      sizeof(shape), "overlap");
	t_ok(strcmp(shape, "BBBrwCrwCrwCW") == 0,
	     "receiver issues the 3 receives first, waits before each compute: "
	     "%s",
	     shape);
	overlap_shape(ray_shape(ctx, W, CGR_OVERLAP_OFF), W[3], shape,
		      sizeof(shape), "mixed overlap");
	t_ok(strcmp(shape, "BrwCSBCrwCW") == 0,
	     "the synchronous receive keeps the order: %s", shape);
}

int main(int argc, char **argv)
{
	cgr_ctx *ctx;
	cgr_worker *W[4];

	t_init(argc, argv, 120);
	cgr_ctx_create(NULL, &ctx);
	for (int i = 0; i < 4; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		char name[8];
		snprintf(name, sizeof(name), "w%d", i);
		wp.name = name;
		cgr_worker_create(ctx, &wp, &W[i]);
	}
	test_mutation(ctx, W);
	test_mutation_overlap(ctx, W);
	test_edge_group(ctx, W);
	test_overlap_plan(ctx, W);
	test_overlap_prune(ctx, W);
	test_stream_tasks_plan(ctx, W);
	test_stream_task_barrier(ctx, W);
	test_overlap_streams(ctx, W);
	test_random(ctx, W);
	cgr_ctx_destroy(ctx);
	return t_done();
}
