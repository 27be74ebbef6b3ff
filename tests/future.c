/*
 * tests/future.c: futures (future/future.h): the life of one generation,
 * deadlines, stale generations (no ABA), and completion from other threads
 * waking a blocked waiter without ever losing the wake-up.
 *
 *  1. arm -> test says pending (0) at once; complete -> test says 1 with
 *     the result; wait returns it; a second complete is -ESTALE and does
 *     not change the result; a negative result comes back from wait.
 *  2. wait on a future nobody completes returns -ETIMEDOUT at or after its
 *     deadline, in every wait mode.
 *  3. after release and re-arm, the old generation gets -ESTALE from test,
 *     complete, wait and release, and cannot disturb the new one.
 *  4. release wakes a waiter parked on the released generation (-ESTALE).
 *  5. stress: each round the owner arms, two threads race to complete the
 *     generation with different results, the owner waits (mostly in
 *     CGR_WAIT_BLOCK) and releases; exactly one completer wins and its
 *     result is the one waited for.  A fourth thread keeps testing the
 *     current generation while the owner releases and re-arms: whenever it
 *     is told "done" the result belongs to that generation.  A lost
 *     wake-up hangs the program until the hard time limit.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "future/future.h"
#include "tap.h"

#define MS 1000000LL
#define T_LATE_NS (50 * MS)

static const int t_modes[] = {CGR_WAIT_BLOCK, CGR_WAIT_ADAPTIVE, CGR_WAIT_BUSY};

static const char *t_mode_name(int mode)
{
	return mode == CGR_WAIT_BUSY	? "busy"
	       : mode == CGR_WAIT_BLOCK ? "block"
					: "adaptive";
}

static void t_basics(void)
{
	struct cgr_future f;
	uint32_t g;
	int res = 12345, ret;
	int64_t t0;

	cgr__future_init(&f);
	t_is(cgr__future_test(&f, 0, &res), -ESTALE,
	     "a future never armed is stale");
	g = cgr__future_arm(&f);
	t0 = cgr__now_ns();
	ret = cgr__future_test(&f, g, &res);
	t_is(ret, 0, "armed: test says pending");
	t_ok(cgr__now_ns() - t0 < 100 * MS, "test does not block");
	t_is(res, 12345, "pending: the result is left alone");
	t_is(cgr__future_complete(&f, g, 0), 0, "complete with 0");
	t_is(cgr__future_test(&f, g, &res), 1, "done: test says 1");
	t_is(res, 0, "done: the result is 0");
	t_is(cgr__future_test(&f, g, NULL), 1, "test takes a NULL result");
	t_is(cgr__future_complete(&f, g, -EIO), -ESTALE,
	     "double complete -> -ESTALE");
	res = 1;
	cgr__future_test(&f, g, &res);
	t_is(res, 0, "the second complete did not change the result");
	t_is(cgr__future_wait(&f, g, CGR_FOREVER, NULL, CGR_WAIT_BLOCK, 0), 0,
	     "wait on a done future returns its result");
	t_is(cgr__future_release(&f, g), 0, "release");

	g = cgr__future_arm(&f);
	t_is(cgr__future_complete(&f, g, -EIO), 0, "complete with -EIO");
	t_is(cgr__future_wait(&f, g, cgr__now_ns() + 1000 * MS, NULL,
			      CGR_WAIT_ADAPTIVE, 10000),
	     -EIO, "wait returns the negative result");
	t_is(cgr__future_test(&f, g, &res), 1, "test after wait says done");
	t_is(res, -EIO, "test gives the negative result");
	t_is(cgr__future_release(&f, g), 0, "release");

	/* Re-arming a done future without a release is allowed too. */
	g = cgr__future_arm(&f);
	cgr__future_complete(&f, g, -2);
	uint32_t g2 = cgr__future_arm(&f);
	t_ok(g2 != g, "arm over a done future gives a new generation");
	t_is(cgr__future_test(&f, g2, &res), 0, "and it is pending");
	t_is(cgr__future_test(&f, g, &res), -ESTALE,
	     "the done generation is stale");
	cgr__future_release(&f, g2);
}

static void t_deadlines(void)
{
	static const int64_t ds[] = {1 * MS, 5 * MS, 20 * MS};
	struct cgr_future f;
	uint32_t g;

	cgr__future_init(&f);
	g = cgr__future_arm(&f);
	for (size_t m = 0; m < CGR__ARRAY_SIZE(t_modes); m++) {
		for (size_t k = 0; k < CGR__ARRAY_SIZE(ds); k++) {
			int64_t deadline = cgr__now_ns() + ds[k], end;
			int ret = cgr__future_wait(&f, g, deadline, NULL,
						   t_modes[m], 50000);
			end = cgr__now_ns();
			t_ok(ret == -ETIMEDOUT && end >= deadline &&
				 end < deadline + T_LATE_NS,
			     "%s wait %lld ms on a pending future -> %s at "
			     "%+.3f ms",
			     t_mode_name(t_modes[m]), (long long)(ds[k] / MS),
			     cgr_err_name(ret), (end - deadline) / 1e6);
		}
	}
	t_is(
	    cgr__future_wait(&f, g, cgr__now_ns() - 1, NULL, CGR_WAIT_BLOCK, 0),
	    -ETIMEDOUT, "a deadline already past -> -ETIMEDOUT");
	t_is(cgr__future_test(&f, g, NULL), 0, "still pending after that");
	cgr__future_release(&f, g);
}

static void t_generations(void)
{
	struct cgr_future f;
	uint32_t g1, g2;
	int res = 0;

	cgr__future_init(&f);
	g1 = cgr__future_arm(&f);
	t_is(cgr__future_release(&f, g1), 0, "release a pending generation");
	t_is(cgr__future_test(&f, g1, &res), -ESTALE,
	     "released: test -> -ESTALE");
	t_is(cgr__future_complete(&f, g1, 0), -ESTALE,
	     "released: complete -> -ESTALE");
	t_is(cgr__future_release(&f, g1), -ESTALE,
	     "released: release again -> -ESTALE");

	g2 = cgr__future_arm(&f);
	t_ok(g2 != g1, "re-arm gives a new generation (%u -> %u)", g1, g2);
	t_is(cgr__future_test(&f, g1, &res), -ESTALE,
	     "re-armed: old test -> -ESTALE");
	t_is(cgr__future_complete(&f, g1, -1), -ESTALE,
	     "re-armed: old complete -> -ESTALE");
	t_is(cgr__future_wait(&f, g1, CGR_FOREVER, NULL, CGR_WAIT_BLOCK, 0),
	     -ESTALE, "re-armed: old wait -> -ESTALE at once");
	t_is(cgr__future_release(&f, g1), -ESTALE,
	     "re-armed: old release -> -ESTALE");
	t_is(cgr__future_test(&f, g2, &res), 0,
	     "the new generation is untouched: pending");
	t_is(cgr__future_complete(&f, g2, -7), 0, "complete the new one");
	t_is(cgr__future_test(&f, g1, &res), -ESTALE,
	     "old generation still stale once the new one is done");
	t_is(cgr__future_wait(&f, g2, CGR_FOREVER, NULL, CGR_WAIT_BLOCK, 0), -7,
	     "the new generation's result");
	t_is(cgr__future_release(&f, g2), 0, "release the new one");
	t_is(cgr__future_wait(&f, g2, CGR_FOREVER, NULL, CGR_WAIT_BLOCK, 0),
	     -ESTALE, "wait on a released generation -> -ESTALE");
}

/* ---- release wakes a parked waiter ----------------------------------- */

struct t_parked {
	struct cgr_future *f;
	uint32_t gen;
	int ret;
	int64_t deadline;
};

static void *t_parked_main(void *arg)
{
	struct t_parked *p = arg;

	p->ret = cgr__future_wait(p->f, p->gen, p->deadline, NULL,
				  CGR_WAIT_BLOCK, 0);
	return NULL;
}

static void t_release_wakes(void)
{
	struct cgr_future f;
	struct t_parked p;
	struct timespec ts = {0, 5 * MS};
	pthread_t th;

	cgr__future_init(&f);
	p.f = &f;
	p.gen = cgr__future_arm(&f);
	p.ret = 1;
	p.deadline = cgr__now_ns() + 2000 * MS;
	if (pthread_create(&th, NULL, t_parked_main, &p) != 0) {
		t_ok(0, "release wake: start the waiter");
		return;
	}
	/* Give the waiter time to park; it passes whether or not it has. */
	nanosleep(&ts, NULL);
	cgr__future_release(&f, p.gen);
	pthread_join(th, NULL);
	t_ok(p.ret == -ESTALE && cgr__now_ns() < p.deadline,
	     "release wakes a parked waiter of that generation: %s",
	     cgr_err_name(p.ret));
}

/* ---- stress ----------------------------------------------------------- */

/* The result completer k gives generation gen: distinct, never positive. */
static int t_value(uint32_t gen, int k)
{
	return -(int)((gen % 100000u) * 2u + (uint32_t)k + 1u);
}

struct t_stress {
	struct cgr_future f;
	_Atomic uint32_t go; /* round number; UINT32_MAX: stop */
	struct cgr__bell go_bell;
	_Atomic uint32_t gen;  /* current generation, for the tester */
	_Atomic uint32_t acks; /* completers finished this round */
	struct cgr__bell ack_bell;
	_Atomic int won[2];
	_Atomic int stop;
	/* Tester's findings. */
	_Atomic long seen_done, seen_pending, seen_stale, seen_wrong;
};

struct t_completer {
	struct t_stress *s;
	int k;
	uint32_t seen;
	uint64_t rng;
};

static bool t_go_ready(void *arg)
{
	struct t_completer *c = arg;
	return atomic_load_explicit(&c->s->go, memory_order_acquire) != c->seen;
}

static uint64_t t_crand(struct t_completer *c)
{
	c->rng ^= c->rng << 13;
	c->rng ^= c->rng >> 7;
	c->rng ^= c->rng << 17;
	return c->rng;
}

static void *t_completer_main(void *arg)
{
	struct t_completer *c = arg;
	struct t_stress *s = c->s;

	for (;;) {
		uint32_t gen;
		uint64_t x;

		cgr__reactor_wait(NULL, &s->go_bell, t_go_ready, c, NULL,
				  CGR_WAIT_ADAPTIVE, 20000, CGR_FOREVER);
		c->seen = atomic_load_explicit(&s->go, memory_order_acquire);
		if (c->seen == UINT32_MAX)
			return NULL;
		gen = atomic_load_explicit(&s->gen, memory_order_relaxed);
		x = t_crand(c);
		if ((x & 63) == 0) {
			/* Late enough that the owner has parked. */
			struct timespec ts = {0, 200000};
			nanosleep(&ts, NULL);
		} else if ((x & 3) != 0) {
			int64_t end = cgr__now_ns() + (int64_t)(x >> 8) % 30000;
			while (cgr__now_ns() < end)
				cgr__cpu_relax();
		}
		atomic_store(
		    &s->won[c->k],
		    cgr__future_complete(&s->f, gen, t_value(gen, c->k)) == 0);
		/* A1: the owner reads won[] after seeing both acks. */
		atomic_fetch_add_explicit(&s->acks, 1, memory_order_release);
		cgr__bell_ring(&s->ack_bell);
	}
}

static void *t_tester_main(void *arg)
{
	struct t_stress *s = arg;
	long done = 0, pending = 0, stale = 0, wrong = 0;

	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		uint32_t gen =
		    atomic_load_explicit(&s->gen, memory_order_relaxed);
		for (int i = 0; i < 64; i++) {
			int res = 1, t = cgr__future_test(&s->f, gen, &res);
			if (t == 1) {
				done++;
				if (res != t_value(gen, 0) &&
				    res != t_value(gen, 1))
					wrong++;
			} else if (t == 0) {
				pending++;
			} else {
				stale++;
			}
		}
		sched_yield();
	}
	atomic_store(&s->seen_done, done);
	atomic_store(&s->seen_pending, pending);
	atomic_store(&s->seen_stale, stale);
	atomic_store(&s->seen_wrong, wrong);
	return NULL;
}

struct t_count {
	_Atomic uint32_t *word;
	uint32_t want;
};

static bool t_count_ready(void *arg)
{
	struct t_count *c = arg;
	/* A2: pairs with A1. */
	return atomic_load_explicit(c->word, memory_order_acquire) >= c->want;
}

static void t_stress(void)
{
	static struct t_stress s;
	struct t_completer comp[2];
	struct t_count acks = {&s.acks, 0};
	pthread_t th[3];
	long n = t_scale(20000), bad_res = 0, bad_won = 0, bad_rel = 0;
	int64_t t0;
	uint32_t prev = 0;

	cgr__future_init(&s.f);
	cgr__bell_init(&s.go_bell);
	cgr__bell_init(&s.ack_bell);
	atomic_init(&s.go, 0);
	atomic_init(&s.gen, 0);
	atomic_init(&s.acks, 0);
	atomic_init(&s.stop, 0);
	for (int k = 0; k < 2; k++) {
		comp[k] = (struct t_completer){&s, k, 0, t_rand() | 1};
		if (pthread_create(&th[k], NULL, t_completer_main, &comp[k]) !=
		    0) {
			t_ok(0, "stress: start a completer");
			exit(t_done());
		}
	}
	if (pthread_create(&th[2], NULL, t_tester_main, &s) != 0) {
		t_ok(0, "stress: start the tester");
		exit(t_done());
	}

	t0 = cgr__now_ns();
	for (long i = 1; i <= n; i++) {
		if ((i & 255) == 0 && cgr__now_ns() - t0 > 4000 * MS) {
			/* A loaded machine: enough rounds. */
			t_diag("stress: time is up after %ld of %ld rounds",
			       i - 1, n);
			n = i - 1;
			break;
		}
		uint32_t gen = cgr__future_arm(&s.f);
		int mode = t_modes[t_rand() % 4 == 0 ? 1 + t_rand() % 2 : 0];
		int64_t spin = (t_rand() & 1) ? 0 : (int64_t)(t_rand() % 50000);
		int res;

		atomic_store_explicit(&s.gen, gen, memory_order_relaxed);
		/* G1: publishes gen to the completers; pairs with their
		 * acquire of go. */
		atomic_store_explicit(&s.go, (uint32_t)i, memory_order_release);
		cgr__bell_ring(&s.go_bell);
		res =
		    cgr__future_wait(&s.f, gen, CGR_FOREVER, NULL, mode, spin);
		/* Both completers have tried before the next round. */
		acks.want = (uint32_t)(2 * i);
		cgr__reactor_wait(NULL, &s.ack_bell, t_count_ready, &acks, NULL,
				  CGR_WAIT_ADAPTIVE, 20000, CGR_FOREVER);
		int w0 = atomic_load(&s.won[0]), w1 = atomic_load(&s.won[1]);
		if (w0 + w1 != 1) {
			if (bad_won++ < 5)
				t_diag("round %ld: %d completers won", i,
				       w0 + w1);
		} else if (res != t_value(gen, w0 ? 0 : 1)) {
			if (bad_res++ < 5)
				t_diag("round %ld: waited %d, winner gave %d",
				       i, res, t_value(gen, w0 ? 0 : 1));
		}
		if (cgr__future_release(&s.f, gen) != 0 ||
		    (prev != 0 && cgr__future_release(&s.f, prev) != -ESTALE))
			bad_rel++;
		prev = gen;
	}
	atomic_store(&s.stop, 1);
	atomic_store_explicit(&s.go, UINT32_MAX, memory_order_release);
	cgr__bell_ring(&s.go_bell);
	for (int k = 0; k < 3; k++)
		pthread_join(th[k], NULL);
	t_diag("stress: %ld rounds in %.0f ms; tester saw done %ld, pending "
	       "%ld, stale %ld",
	       n, (cgr__now_ns() - t0) / 1e6, atomic_load(&s.seen_done),
	       atomic_load(&s.seen_pending), atomic_load(&s.seen_stale));
	t_is(bad_won, 0, "stress: exactly one of two racing completers wins");
	t_is(bad_res, 0, "stress: the waiter gets the winner's result");
	t_is(bad_rel, 0, "stress: release works once per generation");
	t_is(atomic_load(&s.seen_wrong), 0,
	     "stress: a tester racing release and re-arm never sees another "
	     "generation's result");
}

int main(int argc, char **argv)
{
	t_init(argc, argv, 60);
	t_basics();
	t_deadlines();
	t_generations();
	t_release_wakes();
	t_stress();
	return t_done();
}
