/*
 * tests/comm-errors.c: how the CPU communicator fails: mismatched count,
 * dtype, root, op or kind on one rank fail the operation on every
 * rank with CGR_EMISMATCH and a message naming the ranks and the field,
 * and the communicator keeps working; a poisoned descriptor (or bad
 * arguments, or a failed device) on one rank fails every rank with its
 * code; abort and deadlines end waits promptly when a rank never arrives,
 * and so does cgr_comm_destroy (it aborts first);
 * groups let sends and receives both ways complete, and one with a call
 * on another stream fails whole, on the peers too; messages of one
 * (sender, receiver) pair arrive in order.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>

#include "tap.h"
#include "comm/comm.h"

#define N 4

static cgr_ctx *ctx;
static cgr_comm *comm;

typedef int (*rank_fn)(int rank, void *arg);

struct th {
	rank_fn fn;
	void *arg;
	int rank, ret;
	int64_t ns;
	pthread_t t;
};

static void *th_main(void *p)
{
	struct th *t = p;
	int64_t t0 = cgr__now_ns();

	t->ret = t->fn(t->rank, t->arg);
	t->ns = cgr__now_ns() - t0;
	return NULL;
}

/* Runs fn on ranks [0, n) as threads (skipping rank `skip`); ret[r]. */
static void run(int n, int skip, rank_fn fn, void *arg, int *ret,
		int64_t *ns)
{
	struct th t[N];

	for (int r = 0; r < n; r++) {
		t[r] = (struct th){ fn, arg, r, 0, 0, 0 };
		if (r != skip)
			pthread_create(&t[r].t, NULL, th_main, &t[r]);
	}
	for (int r = 0; r < n; r++) {
		if (r == skip)
			continue;
		pthread_join(t[r].t, NULL);
		if (ret != NULL)
			ret[r] = t[r].ret;
		if (ns != NULL)
			ns[r] = t[r].ns;
	}
}

static bool all_eq(const int *ret, int n, int skip, int want)
{
	for (int r = 0; r < n; r++)
		if (r != skip && ret[r] != want)
			return false;
	return true;
}

static bool all_msg(int n, int skip, const char *a, const char *b)
{
	for (int r = 0; r < n; r++) {
		const char *m = cgr_comm_errmsg(comm, r);
		if (r == skip)
			continue;
		if ((a && !strstr(m, a)) || (b && !strstr(m, b))) {
			t_diag("rank %d: \"%s\"", r, m);
			return false;
		}
	}
	return true;
}

/* ---- a good allreduce, to show the communicator still works --------- */

static int good_allreduce(int r, void *arg)
{
	int32_t in[64], out[64];
	(void)arg;
	for (int i = 0; i < 64; i++)
		in[i] = r + i;
	int ret = cgr_allreduce(comm, r, in, out, 64, CGR_INT32, CGR_SUM, NULL,
				NULL);
	if (ret)
		return ret;
	for (int i = 0; i < 64; i++)
		if (out[i] != 6 + 4 * i)
			return -EIO;
	return 0;
}

static void check_works(const char *after)
{
	int ret[N];
	run(N, -1, good_allreduce, NULL, ret, NULL);
	t_ok(all_eq(ret, N, -1, 0), "the next allreduce works after %s",
	     after);
}

/* ---- mismatches ---------------------------------------------------- */

enum { MM_COUNT, MM_DTYPE, MM_ROOT, MM_OP, MM_KIND };

static int mismatch(int r, void *arg)
{
	int what = *(int *)arg;
	static _Thread_local int32_t in[256], out[256 * N];
	size_t count = 100;
	cgr_dtype dt = CGR_INT32;
	cgr_redop op = CGR_SUM;
	int root = 1;

	if (r == 2) {
		switch (what) {
		case MM_COUNT:
			count = 99;
			break;
		case MM_DTYPE:
			dt = CGR_FLOAT32;
			break;
		case MM_ROOT:
			root = 3;
			break;
		case MM_OP:
			op = CGR_MAX;
			break;
		case MM_KIND:
			return cgr_broadcast(comm, r, in, out, count, dt, 0, NULL,
					     NULL);
		}
	}
	if (what == MM_ROOT)
		return cgr_reduce(comm, r, in, out, count, dt, op, root, NULL,
				  NULL);
	return cgr_allreduce(comm, r, in, out, count, dt, op, NULL, NULL);
}

static void test_mismatch(void)
{
	static const struct {
		int what;
		const char *name, *a, *b;
	} cases[] = {
		{ MM_COUNT, "count", "rank 0 count 100", "rank 2 count 99" },
		{ MM_DTYPE, "dtype", "rank 0 dtype int32",
		  "rank 2 dtype float32" },
		{ MM_ROOT, "root", "rank 0 root 1", "rank 2 root 3" },
		{ MM_OP, "op", "rank 0 op sum", "rank 2 op max" },
		{ MM_KIND, "kind", "rank 0 allreduce", "rank 2 broadcast" },
	};
	int ret[N];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int what = cases[i].what;
		run(N, -1, mismatch, &what, ret, NULL);
		t_ok(all_eq(ret, N, -1, CGR_EMISMATCH),
		     "%s differs on one rank: CGR_EMISMATCH on every rank",
		     cases[i].name);
		t_ok(all_msg(N, -1, cases[i].a, cases[i].b),
		     "...and every rank's message says \"%s, %s\"", cases[i].a,
		     cases[i].b);
		check_works(cases[i].name);
	}
	t_diag("e.g. \"%s\"", cgr_comm_errmsg(comm, 0));
}

/* ---- poison, bad arguments, device errors --------------------------- */

static int poisoned(int r, void *arg)
{
	int32_t in[16] = { 0 }, out[16];
	struct cgr__coll_desc d = {
		.kind = CGR_COLL_ALLGATHER, .send = in, .recv = out,
		.count = 4, .dtype = CGR_INT32,
	};
	(void)arg;
	if (r == 2) {
		d.poison = CGR_ETASK;
		d.poison_msg = "task producer#0 failed";
	}
	return cgr__comm_coll(comm, r, &d, NULL, NULL);
}

static int bad_args(int r, void *arg)
{
	int32_t in[16] = { 0 }, out[16];
	(void)arg;
	return cgr_allreduce(comm, r, in, r == 1 ? NULL : out, 16, CGR_INT32,
			     CGR_SUM, NULL, NULL);
}

static void test_poison(void)
{
	int ret[N];

	run(N, -1, poisoned, NULL, ret, NULL);
	t_ok(all_eq(ret, N, -1, CGR_ETASK),
	     "a poisoned descriptor on one rank fails every rank with its "
	     "code");
	t_ok(all_msg(N, -1, "rank 2 failed before the operation",
		     "task producer#0 failed"),
	     "...and the message names the rank and carries its message");
	check_works("a poisoned one");
	run(N, -1, bad_args, NULL, ret, NULL);
	t_ok(all_eq(ret, N, -1, -EINVAL),
	     "NULL recv on one rank: -EINVAL there and on every peer");
	t_ok(all_msg(N, -1, "rank 1", "NULL buffer"), "...named");
	check_works("bad arguments");
}

struct devfail {
	cgr_stream *s[N];
};

static int on_streams(int r, void *arg)
{
	struct devfail *df = arg;
	int32_t in[8] = { 1 }, out[8];
	cgr_future *f;
	int ret;

	ret = cgr_allreduce(comm, r, in, out, 8, CGR_INT32, CGR_SUM, df->s[r],
			    &f);
	if (ret)
		return ret;
	ret = cgr_future_wait(f, 5000000000);
	cgr_future_release(f);
	return ret;
}

static void test_device_error(void)
{
	struct devfail df;
	cgr_ctx *c2;
	int ret[N];

	/* Rank 1's stream lives on a device of its own (another context's
	 * sim device), which fails. */
	cgr_ctx_create(NULL, &c2);
	for (int r = 0; r < N; r++)
		cgr_stream_create(r == 1 ? c2 : ctx, CGR_DEVICE_SIM, 0,
				  &df.s[r]);
	run(N, -1, on_streams, &df, ret, NULL);
	t_ok(all_eq(ret, N, -1, 0), "allreduce on streams");
	cgr__device_fail(df.s[1]->dev, CGR_EDEVICE, "test: GPU fell off");
	run(N, -1, on_streams, &df, ret, NULL);
	t_ok(all_eq(ret, N, -1, CGR_EDEVICE),
	     "one rank's device failed: every rank gets CGR_EDEVICE");
	t_ok(all_msg(N, 1, "rank 1 failed before the operation", NULL),
	     "...and the peers' message names rank 1");
	for (int r = 0; r < N; r++)
		cgr_stream_destroy(df.s[r]);
	cgr_ctx_destroy(c2);
	check_works("a device failure on one rank");
}

/* ---- abort and deadlines ------------------------------------------- */

static int coll_forever(int r, void *arg)
{
	int32_t in[64] = { 0 }, out[64];
	(void)arg;
	return cgr_allreduce(comm, r, in, out, 64, CGR_INT32, CGR_SUM, NULL,
			     NULL);
}

struct aborter {
	int64_t delay_ns;
	cgr_comm *c;
};

static void *abort_later(void *p)
{
	struct aborter *a = p;
	usleep((useconds_t)(a->delay_ns / 1000));
	cgr_comm_abort(a->c);
	return NULL;
}

static int with_deadline(int r, void *arg)
{
	int32_t in[64] = { 0 }, out[64];
	struct cgr__coll_desc d = {
		.kind = CGR_COLL_ALLREDUCE, .send = in, .recv = out,
		.count = 64, .dtype = CGR_INT32,
	};
	(void)arg;
	if (r == 0)
		d.deadline = cgr__now_ns() + 50000000;
	return cgr__comm_coll(comm, r, &d, NULL, NULL);
}

static int stream_ops_after_abort(int r, void *arg)
{
	cgr_stream *s = arg;
	int32_t in[4] = { 0 }, out[4];
	cgr_future *f;
	int ret;

	if (r != 0)
		return 0;
	ret = cgr_allreduce(comm, r, in, out, 4, CGR_INT32, CGR_SUM, s, &f);
	if (ret)
		return ret;
	ret = cgr_future_wait(f, 2000000000);
	cgr_future_release(f);
	return ret;
}

static void test_abort(void)
{
	struct aborter ab = { 50000000, NULL };
	pthread_t t;
	cgr_stream *s;
	int ret[N];
	int64_t ns[N], t0;

	cgr_comm_destroy(comm);
	cgr_comm_create(ctx, NULL, N, CGR_BACKEND_CPU, &comm);
	ab.c = comm;
	pthread_create(&t, NULL, abort_later, &ab);
	t0 = cgr__now_ns();
	run(N, 3, coll_forever, NULL, ret, ns);
	pthread_join(t, NULL);
	t_ok(all_eq(ret, N, 3, -ECANCELED),
	     "rank 3 never arrives; abort: the others get -ECANCELED");
	t_ok((cgr__now_ns() - t0) < 1000000000, "promptly (%.0f ms)",
	     (cgr__now_ns() - t0) / 1e6);
	t_ok(all_msg(N, 3, "allreduce #1", "waiting for rank 3"),
	     "...and the message names the missing rank");
	run(N, -1, coll_forever, NULL, ret, NULL);
	t_ok(all_eq(ret, N, -1, -ECANCELED),
	     "after abort every operation fails at once");
	cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &s);
	run(1, -1, stream_ops_after_abort, s, ret, NULL);
	t_is(ret[0], -ECANCELED, "...stream-ordered ones too");
	cgr_stream_destroy(s);
	t_is(cgr_comm_abort(comm), 0, "abort is idempotent");
	cgr_comm_destroy(comm);

	/* Deadline: rank 0 gives one, rank 3 never arrives. */
	cgr_comm_create(ctx, NULL, N, CGR_BACKEND_CPU, &comm);
	t0 = cgr__now_ns();
	run(N, 3, with_deadline, NULL, ret, ns);
	t_is(ret[0], -ETIMEDOUT, "rank 0's deadline passes: -ETIMEDOUT");
	t_ok(ret[1] == -ECANCELED && ret[2] == -ECANCELED,
	     "...it aborts the communicator: the others get -ECANCELED");
	t_ok((cgr__now_ns() - t0) < 1000000000, "promptly (%.0f ms)",
	     (cgr__now_ns() - t0) / 1e6);
	t_ok(strstr(cgr_comm_errmsg(comm, 0), "timed out") != NULL &&
		     strstr(cgr_comm_errmsg(comm, 0), "rank 3") != NULL,
	     "\"%s\"", cgr_comm_errmsg(comm, 0));
	cgr_comm_destroy(comm);

	/* A stream destroyed under a pending operation aborts the comm. */
	cgr_comm_create(ctx, NULL, 2, CGR_BACKEND_CPU, &comm);
	{
		int32_t in[4] = { 0 }, out[4];
		cgr_future *f;
		cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &s);
		cgr_allreduce(comm, 0, in, out, 4, CGR_INT32, CGR_SUM, s, &f);
		t0 = cgr__now_ns();
		cgr_stream_destroy(s);
		t_ok((cgr__now_ns() - t0) < 2000000000,
		     "destroying a stream whose collective waits for a rank "
		     "that never comes returns (%.0f ms)",
		     (cgr__now_ns() - t0) / 1e6);
		t_is(cgr_future_wait(f, 1000000000), -ECANCELED,
		     "...its future fails with -ECANCELED");
		cgr_future_release(f);
		t_is(cgr_allreduce(comm, 1, in, out, 4, CGR_INT32, CGR_SUM,
				   NULL, NULL),
		     -ECANCELED, "...and the communicator is aborted");
	}
	cgr_comm_destroy(comm);
	cgr_comm_create(ctx, NULL, N, CGR_BACKEND_CPU, &comm);
}

/* ---- point to point ------------------------------------------------ */

#define BIG 200000

static int both_ways(int r, void *arg)
{
	static int32_t buf[2][2][BIG];
	int peer = 1 - r, ret;
	(void)arg;

	for (int i = 0; i < BIG; i++)
		buf[r][0][i] = r * 1000000 + i;
	/* Both ranks send first: without the group this would deadlock. */
	cgr_group_start(comm, r);
	cgr_send(comm, r, buf[r][0], BIG, CGR_INT32, peer, NULL, NULL);
	cgr_recv(comm, r, buf[r][1], BIG, CGR_INT32, peer, NULL, NULL);
	ret = cgr_group_end(comm, r, NULL);
	if (ret)
		return ret;
	for (int i = 0; i < BIG; i++)
		if (buf[r][1][i] != peer * 1000000 + i)
			return -EIO;
	return 0;
}

#define MANY 20
static int many_in_group(int r, void *arg)
{
	static int32_t data[2][MANY][16], got[2][MANY][16];
	cgr_future *fs[MANY], *g;
	int peer = 1 - r, ret = 0;
	cgr_stream **s = arg;

	for (int m = 0; m < MANY; m++)
		for (int i = 0; i < 16; i++)
			data[r][m][i] = r * 100000 + m * 100 + i;
	/* More messages to one peer than it has slots, both ways, on the
	 * rank's stream, with per-call futures. */
	cgr_group_start(comm, r);
	for (int m = 0; m < MANY; m++)
		cgr_send(comm, r, data[r][m], 16, CGR_INT32, peer, s[r], NULL);
	for (int m = 0; m < MANY; m++)
		cgr_recv(comm, r, got[r][m], 16, CGR_INT32, peer, s[r], &fs[m]);
	cgr_group_end(comm, r, &g);
	ret = cgr_future_wait(g, 5000000000);
	if (ret != 0)
		printf("# rank %d: group future: %s\n", r, cgr_strerror(ret));
	for (int m = 0; m < MANY; m++) {
		int t = cgr_future_test(fs[m]);
		if (t != 1) {
			/* Seen once in ~44 runs (a distcheck run): say which
			 * message and what its future said. */
			printf("# rank %d: recv %d future: %d (%s)\n", r, m, t,
			       t < 0 ? cgr_strerror(t) : "pending");
			ret = ret ? ret : -EIO;
		}
		cgr_future_release(fs[m]);
		for (int i = 0; i < 16; i++)
			if (got[r][m][i] != peer * 100000 + m * 100 + i) {
				printf("# rank %d: recv %d element %d: %d, "
				       "want %d\n",
				       r, m, i, got[r][m][i],
				       peer * 100000 + m * 100 + i);
				ret = ret ? ret : -EBADMSG;
				break;
			}
	}
	cgr_future_release(g);
	return ret;
}

static int self_p2p(int r, void *arg)
{
	int32_t a[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, b[8] = { 0 };
	int ret;
	(void)arg;

	if (r != 0)
		return 0;
	if (cgr_send(comm, 0, a, 8, CGR_INT32, 0, NULL, NULL) != -EINVAL)
		return -EIO;
	cgr_group_start(comm, 0);
	cgr_recv(comm, 0, b, 8, CGR_INT32, 0, NULL, NULL);
	cgr_send(comm, 0, a, 8, CGR_INT32, 0, NULL, NULL);
	ret = cgr_group_end(comm, 0, NULL);
	return ret ? ret : memcmp(a, b, sizeof(a)) ? -EIO : 0;
}

#define MSGS 300
static int ordered(int r, void *arg)
{
	cgr_stream **s = arg;
	static int32_t out[3][MSGS][4];
	int32_t in[4];
	int ret;

	if (r == 0 || r == 1) {
		/* Senders: asynchronous on their streams, so many messages
		 * are in flight at once. */
		for (int m = 0; m < MSGS; m++) {
			for (int i = 0; i < 4; i++)
				out[r][m][i] = r * 100000 + m * 10 + i;
			ret = cgr_send(comm, r, out[r][m], 4, CGR_INT32, 2,
				       s[r], NULL);
			if (ret)
				return ret;
		}
		return cgr_stream_synchronize(s[r], 10000000000);
	}
	if (r == 2) {
		/* Receiver: alternately from 0 and 1, inline. */
		for (int m = 0; m < MSGS; m++)
			for (int from = 0; from < 2; from++) {
				ret = cgr_recv(comm, r, in, 4, CGR_INT32, from,
					       NULL, NULL);
				if (ret)
					return ret;
				for (int i = 0; i < 4; i++)
					if (in[i] != from * 100000 + m * 10 + i)
						return -EIO;
			}
	}
	return 0;
}

static int p2p_mismatch(int r, void *arg)
{
	int32_t a[16] = { 0 };
	(void)arg;
	if (r == 0)
		return cgr_send(comm, 0, a, 10, CGR_INT32, 1, NULL, NULL);
	if (r == 1)
		return cgr_recv(comm, 1, a, 12, CGR_INT32, 0, NULL, NULL);
	return 0;
}

/* In one group, more messages to one peer than it has slots, one of them
 * mismatched: exactly that message fails, on both sides. */
static int group_one_bad(int r, void *arg)
{
	int32_t a[12][8] = { { 0 } };
	cgr_future *f[12];
	int *bad = arg, peer = 1 - r;

	if (r > 1)
		return 0;
	cgr_group_start(comm, r);
	for (int m = 0; m < 12; m++)
		if (r == 0)
			cgr_send(comm, r, a[m], m == 10 ? 5 : 4, CGR_INT32,
				 peer, NULL, &f[m]);
		else
			cgr_recv(comm, r, a[m], 4, CGR_INT32, peer, NULL,
				 &f[m]);
	cgr_group_end(comm, r, NULL);
	for (int m = 0; m < 12; m++) {
		int want = m == 10 ? CGR_EMISMATCH : 1;
		if (cgr_future_test(f[m]) != want)
			bad[r]++;
		cgr_future_release(f[m]);
	}
	return 0;
}

static int group_two_streams(int r, void *arg)
{
	cgr_stream **s = arg;
	int32_t a[4] = { 0 }, b[4];
	int ret, peer = 1 - r;

	if (r > 1)
		return 0;
	cgr_group_start(comm, r);
	cgr_send(comm, r, a, 4, CGR_INT32, peer, NULL, NULL);
	ret = cgr_recv(comm, r, b, 4, CGR_INT32, peer, r == 0 ? s[0] : NULL,
		       NULL);
	if (r == 0) {
		cgr_group_end(comm, r, NULL);
		return ret;
	}
	return cgr_group_end(comm, r, NULL);
}

/* Rank 1 sends to rank 0, then (on another stream) receives from rank 2:
 * its whole group fails, and so do the peers' operations with it, its
 * send too: rank 0 fails and its buffer stays untouched, rank 2 fails.
 * Returns group_end's result (1000 more if rank 0's buffer changed). */
static int group_mixed(int r, void *arg)
{
	cgr_stream **s = arg;
	int32_t a[4] = { 7, 7, 7, 7 }, b[4] = { -1, -1, -1, -1 };
	int ret;

	cgr_group_start(comm, r);
	if (r == 1) {
		cgr_send(comm, r, a, 4, CGR_INT32, 0, NULL, NULL);
		cgr_recv(comm, r, b, 4, CGR_INT32, 2, s[1], NULL);
	} else if (r == 0) {
		cgr_recv(comm, r, b, 4, CGR_INT32, 1, NULL, NULL);
	} else {
		cgr_send(comm, r, a, 4, CGR_INT32, 1, NULL, NULL);
	}
	ret = cgr_group_end(comm, r, NULL);
	return ret + (b[0] != -1 || b[3] != -1 ? 1000 : 0);
}

static void test_p2p(void)
{
	cgr_stream *s[N];
	int ret[N];

	for (int r = 0; r < N; r++)
		cgr_stream_create(ctx, CGR_DEVICE_SIM, 0, &s[r]);
	run(2, -1, both_ways, NULL, ret, NULL);
	t_ok(all_eq(ret, 2, -1, 0),
	     "group: send and recv both ways (%d ints) complete", BIG);
	run(2, -1, many_in_group, s, ret, NULL);
	t_ok(all_eq(ret, 2, -1, 0),
	     "group: %d messages each way to one peer, on streams, futures "
	     "per call",
	     MANY);
	run(1, -1, self_p2p, NULL, ret, NULL);
	t_is(ret[0], 0,
	     "send to self: -EINVAL outside a group, works inside one");
	run(3, -1, ordered, s, ret, NULL);
	t_ok(all_eq(ret, 3, -1, 0),
	     "%d messages from each of two senders arrive in order", MSGS);
	run(2, -1, p2p_mismatch, NULL, ret, NULL);
	t_ok(ret[0] == CGR_EMISMATCH && ret[1] == CGR_EMISMATCH,
	     "send 10 / recv 12: CGR_EMISMATCH on both sides");
	t_ok(all_msg(2, -1, "rank 0 sends 10 int32", "rank 1 receives 12 int32"),
	     "\"%s\"", cgr_comm_errmsg(comm, 1));
	{
		int bad[2] = { 0, 0 };
		run(2, -1, group_one_bad, bad, ret, NULL);
		t_ok(bad[0] == 0 && bad[1] == 0,
		     "12 messages in one group, the 11th mismatched: only it "
		     "fails, on both sides");
	}
	run(2, -1, group_two_streams, s, ret, NULL);
	t_ok(ret[0] == -EINVAL && ret[1] == -EINVAL,
	     "a group spread over two streams fails on both sides "
	     "(%s, %s)",
	     cgr_err_name(ret[0]), cgr_err_name(ret[1]));
	run(3, -1, group_mixed, s, ret, NULL);
	t_ok(all_eq(ret, 3, -1, -EINVAL),
	     "a group with one call on another stream fails whole: its send "
	     "before that call fails at its peer too, whose buffer stays "
	     "untouched (%d, %d, %d)",
	     ret[0], ret[1], ret[2]);
	for (int r = 0; r < N; r++)
		cgr_stream_destroy(s[r]);
	check_works("point-to-point errors");
}

/* cgr_comm_destroy while a thread waits inside a synchronous call: the
 * communicator is aborted first, the call returns -ECANCELED, and only
 * then is it freed. */
struct in_call {
	cgr_comm *c;
	int ret;
};

static void *call_blocked(void *p)
{
	struct in_call *ic = p;
	int32_t x = 1, y = 0;

	/* Rank 0 never comes. */
	ic->ret = cgr_allreduce(ic->c, 1, &x, &y, 1, CGR_INT32, CGR_SUM, NULL,
				NULL);
	return NULL;
}

static void test_destroy_in_call(void)
{
	struct in_call ic = { NULL, 1 };
	pthread_t t;

	cgr_comm_create(ctx, NULL, 2, CGR_BACKEND_CPU, &ic.c);
	pthread_create(&t, NULL, call_blocked, &ic);
	/* Inside the call (its count: comm.h). */
	while (atomic_load(&ic.c->calls[1].n) == 0)
		sched_yield();
	cgr_comm_destroy(ic.c);
	pthread_join(t, NULL);
	t_is(ic.ret, -ECANCELED,
	     "cgr_comm_destroy while a thread waits in a synchronous "
	     "allreduce: aborted first, the call returns -ECANCELED");
}

/* Destroy right after every future completed: nothing is pending (no
 * warning, no abort), and the streams' executors are done with the
 * communicator before it is freed (TSan/ASan: no use after free). */
static _Atomic int pending_logs;

static void pending_log(void *arg, int level, const char *msg)
{
	(void)arg, (void)level;
	if (strstr(msg, "pending") != NULL)
		atomic_fetch_add(&pending_logs, 1);
}

static void test_destroy_after_wait(void)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_ctx *x;
	cgr_stream *st[2];
	int n = (int)t_scale(3000), bad = 0;

	cp.log_fn = pending_log;
	cp.log_level = CGR_LOG_DEBUG;
	cgr_ctx_create(&cp, &x);
	for (int r = 0; r < 2; r++)
		cgr_stream_create(x, CGR_DEVICE_SIM, 0, &st[r]);
	for (int i = 0; i < n; i++) {
		cgr_comm *c;
		cgr_future *f[2];
		int32_t in[2][4], out[2][4];
		if (cgr_comm_create(x, NULL, 2, CGR_BACKEND_CPU, &c) != 0) {
			bad++;
			break;
		}
		for (int r = 0; r < 2; r++) {
			for (int k = 0; k < 4; k++)
				in[r][k] = i + r + k;
			bad += cgr_allreduce(c, r, in[r], out[r], 4, CGR_INT32,
					     CGR_SUM, st[r], &f[r]) != 0;
		}
		for (int r = 0; r < 2; r++) {
			bad += cgr_future_wait(f[r], -1) != 0 ||
			       out[r][3] != 2 * i + 7;
			cgr_future_release(f[r]);
		}
		cgr_comm_destroy(c);
	}
	for (int r = 0; r < 2; r++)
		cgr_stream_destroy(st[r]);
	cgr_ctx_destroy(x);
	t_is(bad, 0, "%d allreduces on streams, each communicator destroyed "
		     "once its futures completed", n);
	t_is(atomic_load(&pending_logs), 0,
	     "none was taken for pending (no abort)");
}

static void test_create(void)
{
	cgr_comm *c;
	cgr_worker *w[2] = { NULL, NULL };

	t_is(cgr_comm_create(ctx, NULL, 0, CGR_BACKEND_CPU, &c), -EINVAL,
	     "0 ranks: -EINVAL");
	t_is(cgr_comm_create(ctx, w, 2, CGR_BACKEND_CPU, &c), -EINVAL,
	     "NULL member: -EINVAL");
	t_is(cgr_comm_create(ctx, NULL, 2, 77, &c), -EINVAL,
	     "unknown backend: -EINVAL");
	{
		/* Members must be this context's live workers (a context
		 * of their own: workers stay until it goes). */
		cgr_ctx *mine = NULL, *other = NULL;
		cgr_worker *m[2] = { NULL, NULL }, *gone = NULL;
		cgr_ctx_create(NULL, &mine);
		cgr_ctx_create(NULL, &other);
		cgr_worker_create(mine, NULL, &m[0]);
		cgr_worker_create(other, NULL, &m[1]);
		t_is(cgr_comm_create(mine, m, 2, CGR_BACKEND_CPU, &c), -EINVAL,
		     "a member of another context: -EINVAL");
		cgr_worker_create(mine, NULL, &gone);
		cgr_worker_destroy(gone, -1);
		m[1] = gone;
		t_is(cgr_comm_create(mine, m, 2, CGR_BACKEND_CPU, &c), -EINVAL,
		     "a destroyed member: -EINVAL");
		cgr_ctx_destroy(other);
		cgr_ctx_destroy(mine);
	}
	t_is(cgr_comm_create(ctx, NULL, N, CGR_BACKEND_AUTO, &comm), 0,
	     "AUTO: the CPU backend");
	t_is(cgr_comm_size(comm), N, "size");
	t_ok(cgr_comm_errmsg(comm, 0)[0] == '\0', "no message yet");
	t_is(cgr_allreduce(comm, N, NULL, NULL, 0, CGR_INT32, CGR_SUM, NULL,
			   NULL),
	     -EINVAL, "rank out of range: -EINVAL, no effect");
	t_is(cgr_send(comm, 0, NULL, 0, CGR_INT32, N, NULL, NULL), -EINVAL,
	     "peer out of range: -EINVAL, no effect");
	t_is(cgr_group_end(comm, 0, NULL), -EINVAL, "group_end without start");
	check_works("calls without effect");
}

int main(int argc, char **argv)
{
	size_t b0, b1;

	t_init(argc, argv, 120);
	if (cgr_ctx_create(NULL, &ctx) != 0) {
		printf("Bail out! no context\n");
		return 1;
	}
	/* Before the baseline: a context keeps what it learnt of NCCL (the
	 * library loaded, or why not) until it goes. */
#ifdef HAVE_NCCL
	cgr_comm *nc;
	int nret = cgr_comm_create(ctx, NULL, 2, CGR_BACKEND_NCCL, &nc);
	t_ok(nret == -ENODEV || nret == 0,
	     "NCCL backend: -ENODEV without two CUDA devices (%s)",
	     cgr_err_name(nret));
	if (nret == 0)
		cgr_comm_destroy(nc);
#else
	cgr_comm *nc;
	t_is(cgr_comm_create(ctx, NULL, 2, CGR_BACKEND_NCCL, &nc), -EOPNOTSUPP,
	     "NCCL backend not built: -EOPNOTSUPP");
#endif
	cgr_ctx_memory(ctx, &b0, NULL);
	test_create();
	test_mismatch();
	test_poison();
	test_device_error();
	test_p2p();
	test_abort();
	test_destroy_in_call();
	test_destroy_after_wait();
	cgr_comm_destroy(comm);
	usleep(20000);
	cgr_ctx_memory(ctx, &b1, NULL);
	t_ok(b0 == b1, "everything freed (%zu -> %zu bytes)", b0, b1);
	cgr_ctx_destroy(ctx);
	return t_done();
}
