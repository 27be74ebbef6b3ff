/*
 * tests/ring-stress.c: the ring under load.  FIFO order and payload
 * integrity (sequence, checksum, zero fill) of many messages with random
 * lengths and a random mix of single, burst, bulk and peek/consume
 * operations:
 *   - between two threads;
 *   - between two processes, the ring in a memfd mapped at different
 *     addresses in each (checked);
 *   - with positions starting just below the 64-bit wrap;
 *   - four producer/consumer pairs on two cores, parking on the doorbells;
 * and a doorbell ping-pong where each side parks on every message: a lost
 * wake-up shows as a futex wait that times out with the message there.
 * Counts scale down with CGR_TEST_SCALE.  No sleeps for synchronisation.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "base/futex.h"
#include "ring/ring.h"
#include "shm/shm.h"
#include "tap.h"

#define ES 56u
#define BURST 16u
#define SPINS 256

struct msg {
	uint64_t seq;
	uint32_t len; /* bytes of the whole message, 16..ES */
	uint32_t sum; /* FNV-1a of data[0 .. len - 16) */
	unsigned char data[ES - 16];
};
_Static_assert(sizeof(struct msg) == ES, "message fills the slot payload");

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static uint32_t fnv(const unsigned char *p, size_t n)
{
	uint32_t h = 2166136261u;
	while (n--)
		h = (h ^ *p++) * 16777619u;
	return h;
}

static void make_msg(struct msg *m, uint64_t seq, uint32_t len)
{
	uint32_t i;
	memset(m, 0, sizeof(*m));
	m->seq = seq;
	m->len = len;
	for (i = 0; i < len - 16; i++)
		m->data[i] = (unsigned char)mix(seq * 64 + i);
	m->sum = fnv(m->data, len - 16);
}

/* Checks one received message; the bytes past len must be zero. */
static int check_msg(const struct msg *m, uint64_t seq)
{
	uint32_t i;
	if (m->seq != seq || m->len < 16 || m->len > ES)
		return 0;
	if (m->sum != fnv(m->data, m->len - 16))
		return 0;
	for (i = 0; i < m->len - 16; i++)
		if (m->data[i] != (unsigned char)mix(seq * 64 + i))
			return 0;
	for (; i < sizeof(m->data); i++)
		if (m->data[i] != 0)
			return 0;
	return 1;
}

static uint64_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return mix(*s);
}

/* One side of a FIFO run. */
struct side {
	struct cgr__ring r;
	uint64_t n;	   /* messages to move */
	uint64_t seed;	   /* for the operation mix */
	int park;	   /* park on the bell after spinning */
	uint64_t done;	   /* messages moved */
	uint64_t bad;	   /* messages out of order or damaged */
	uint64_t parks;	   /* times parked */
	uint64_t timeouts; /* parks that hit their (generous) deadline */
};

/* Waits for the ring to become ready: spin, then park or yield. */
static void side_wait(struct side *s, unsigned *spins)
{
	if (++*spins < SPINS) {
		cgr__cpu_relax();
		return;
	}
	*spins = 0;
	if (!s->park) {
		sched_yield();
		return;
	}
	s->parks++;
	if (cgr__ring_wait(&s->r, cgr__now_ns() + 5000000000ll) == -ETIMEDOUT)
		s->timeouts++;
}

static void *producer(void *arg)
{
	struct side *s = arg;
	struct msg batch[BURST];
	uint64_t seq = 0, rs = s->seed;
	unsigned spins = 0;

	while (seq < s->n) {
		uint64_t r = rnd(&rs);
		unsigned k, want = 1 + (unsigned)(r >> 8) % BURST;

		if (want > s->n - seq)
			want = (unsigned)(s->n - seq);
		switch (r % 4) {
		case 0:
		case 1: {
			struct msg m;
			make_msg(&m, seq, 16 + (uint32_t)(r >> 16) % (ES - 15));
			k = cgr__ring_enqueue(&s->r, &m, m.len) == 0;
			break;
		}
		case 2:
			for (k = 0; k < want; k++)
				make_msg(&batch[k], seq + k, ES);
			k = cgr__ring_enqueue_burst(&s->r, batch, want);
			break;
		default:
			for (k = 0; k < want; k++)
				make_msg(&batch[k], seq + k, ES);
			k = cgr__ring_enqueue_bulk(&s->r, batch, want);
		}
		if (k == 0) {
			side_wait(s, &spins);
			continue;
		}
		spins = 0;
		seq += k;
		cgr__ring_notify(&s->r);
	}
	s->done = seq;
	return NULL;
}

static void *consumer(void *arg)
{
	struct side *s = arg;
	struct msg batch[BURST];
	uint64_t seq = 0, rs = s->seed;
	unsigned spins = 0, i;

	while (seq < s->n) {
		uint64_t r = rnd(&rs);
		unsigned k = 0, want = 1 + (unsigned)(r >> 8) % BURST;
		const struct msg *pm;

		if (want > s->n - seq)
			want = (unsigned)(s->n - seq);
		switch (r % 4) {
		case 0:
			if (cgr__ring_dequeue(&s->r, batch) == 0)
				k = 1;
			break;
		case 1:
			k = cgr__ring_dequeue_burst(&s->r, batch, want);
			break;
		case 2:
			k = cgr__ring_dequeue_bulk(&s->r, batch, want);
			break;
		default:
			pm = cgr__ring_peek(&s->r);
			if (pm != NULL) {
				s->bad += !check_msg(pm, seq);
				cgr__ring_consume(&s->r);
				seq++;
				spins = 0;
				cgr__ring_notify(&s->r);
				continue;
			}
		}
		if (k == 0) {
			side_wait(s, &spins);
			continue;
		}
		for (i = 0; i < k; i++)
			s->bad += !check_msg(&batch[i], seq + i);
		spins = 0;
		seq += k;
		cgr__ring_notify(&s->r);
	}
	s->done = seq;
	return NULL;
}

static void *xalloc(size_t n)
{
	void *p = aligned_alloc(64, CGR__ALIGN_UP(n, 64));
	if (p == NULL)
		abort();
	return p;
}

/* Runs one producer/consumer pair in threads over fresh memory. */
static void fifo_threads(const char *what, uint32_t count, uint64_t n,
			 uint64_t start, int park)
{
	size_t ms = cgr__ring_memsize(count, ES);
	void *mem = xalloc(ms);
	struct cgr__ring_shared *sh = mem;
	struct side p = {0}, c = {0};
	pthread_t tp, tc;

	cgr__ring_init_at(mem, ms, count, ES, 0, start);
	cgr__ring_attach(&p.r, mem, ms, CGR__RING_PRODUCER);
	cgr__ring_attach(&c.r, mem, ms, CGR__RING_CONSUMER);
	p.n = c.n = n;
	p.seed = t_rand();
	c.seed = t_rand();
	p.park = c.park = park;
	pthread_create(&tp, NULL, producer, &p);
	pthread_create(&tc, NULL, consumer, &c);
	pthread_join(tp, NULL);
	pthread_join(tc, NULL);
	t_ok(p.done == n && c.done == n && c.bad == 0,
	     "%s: %llu messages in order and intact (bad %llu, parks %llu)",
	     what, (unsigned long long)n, (unsigned long long)c.bad,
	     (unsigned long long)(p.parks + c.parks));
	t_ok(atomic_load(&sh->prod_pos) == start + n &&
		 atomic_load(&sh->cons_pos) == start + n,
	     "%s: published positions at start + n", what);
	free(mem);
}

static void test_threads(void)
{
	fifo_threads("threads", 64, (uint64_t)t_scale(1000000), 0, 0);
	fifo_threads("threads, ring of 2", 2, (uint64_t)t_scale(200000), 0, 0);
	fifo_threads("threads, ring of 1", 1, (uint64_t)t_scale(100000), 0, 0);
}

static void test_wrap(void)
{
	uint64_t start = UINT64_MAX - 1000;
	uint64_t n = (uint64_t)t_scale(200000);

	if (n < 2000)
		n = 2000; /* must cross the wrap whatever the scale */
	fifo_threads("threads from UINT64_MAX - 1000 across the wrap", 64, n,
		     start, 0);
}

/* Four pairs, eight threads on two cores: spinning alone would crawl, so
 * both sides park on the bells. */
static void test_four_pairs(void)
{
	enum { PAIRS = 4 };
	uint32_t count = 32;
	size_t ms = cgr__ring_memsize(count, ES);
	void *mem[PAIRS];
	struct side p[PAIRS], c[PAIRS];
	pthread_t tp[PAIRS], tc[PAIRS];
	uint64_t n = (uint64_t)t_scale(200000), parks = 0, timeouts = 0;
	int i, ok = 1;

	memset(p, 0, sizeof(p));
	memset(c, 0, sizeof(c));
	for (i = 0; i < PAIRS; i++) {
		mem[i] = xalloc(ms);
		cgr__ring_init(mem[i], ms, count, ES, 0);
		cgr__ring_attach(&p[i].r, mem[i], ms, CGR__RING_PRODUCER);
		cgr__ring_attach(&c[i].r, mem[i], ms, CGR__RING_CONSUMER);
		p[i].n = c[i].n = n;
		p[i].seed = t_rand();
		c[i].seed = t_rand();
		p[i].park = c[i].park = 1;
	}
	for (i = 0; i < PAIRS; i++) {
		pthread_create(&tp[i], NULL, producer, &p[i]);
		pthread_create(&tc[i], NULL, consumer, &c[i]);
	}
	for (i = 0; i < PAIRS; i++) {
		pthread_join(tp[i], NULL);
		pthread_join(tc[i], NULL);
		ok &= p[i].done == n && c[i].done == n && c[i].bad == 0;
		parks += p[i].parks + c[i].parks;
		timeouts += p[i].timeouts + c[i].timeouts;
		free(mem[i]);
	}
	t_ok(ok, "four pairs on two cores: all %llu messages each, in order",
	     (unsigned long long)n);
	t_is(timeouts, 0, "four pairs: no park hit its deadline (%llu parks)",
	     (unsigned long long)parks);
}

/* The ring in a memfd; the child maps it again at its own address. */
struct xresult {
	_Atomic uint64_t addr; /* the child's mapping */
	uint64_t done, bad, parks;
};

static void test_processes(void)
{
	uint32_t count = 64;
	size_t ms = cgr__ring_memsize(count, ES);
	size_t roff = CGR__ALIGN_UP(ms, 64);
	struct cgr__shm seg;
	struct side p = {0};
	uint64_t n = (uint64_t)t_scale(1000000);
	uint64_t cseed = t_rand();
	struct xresult *xr;
	int ret, status = 0;
	pid_t pid;

	ret = cgr__shm_create("ring-stress", roff + sizeof(*xr), &seg);
	t_is(ret, 0, "processes: memfd segment");
	if (ret != 0)
		return;
	xr = (struct xresult *)((char *)seg.addr + roff);
	t_is(cgr__ring_init(seg.addr, ms, count, ES, 0), 0, "processes: init");
	pid = fork();
	if (pid == 0) {
		/* Child: the consumer, through its own mapping only. */
		struct cgr__shm mine;
		struct side c = {0};
		struct xresult *cx;

		if (cgr__shm_map(seg.fd, 0, &mine) != 0)
			_exit(2);
		if (mine.addr == seg.addr)
			_exit(3);
		/* Drop the inherited mapping: a stray pointer into it now
		 * faults instead of passing. */
		cgr__shm_close(&seg);
		if (cgr__ring_attach(&c.r, mine.addr, ms, CGR__RING_CONSUMER))
			_exit(4);
		c.n = n;
		c.seed = cseed;
		c.park = 1;
		consumer(&c);
		cx = (struct xresult *)((char *)mine.addr + roff);
		cx->done = c.done;
		cx->bad = c.bad;
		cx->parks = c.parks;
		atomic_store(&cx->addr, (uint64_t)(uintptr_t)mine.addr);
		_exit(c.done == n && c.bad == 0 ? 0 : 1);
	}
	t_ok(pid > 0, "processes: fork");
	if (pid < 0) {
		cgr__shm_close(&seg);
		return;
	}
	t_is(cgr__ring_attach(&p.r, seg.addr, ms, CGR__RING_PRODUCER), 0,
	     "processes: producer attaches");
	p.n = n;
	p.seed = t_rand();
	p.park = 1;
	producer(&p);
	waitpid(pid, &status, 0);
	t_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	     "processes: child consumer exits 0 (status %d)", status);
	t_ok(p.done == n && xr->done == n && xr->bad == 0,
	     "processes: %llu messages in order and intact (bad %llu, "
	     "parks %llu)",
	     (unsigned long long)n, (unsigned long long)xr->bad,
	     (unsigned long long)(xr->parks + p.parks));
	t_ok(atomic_load(&xr->addr) != 0 &&
		 atomic_load(&xr->addr) != (uint64_t)(uintptr_t)seg.addr,
	     "processes: mapped at different addresses (%p here, %#llx "
	     "there)",
	     seg.addr, (unsigned long long)atomic_load(&xr->addr));
	cgr__shm_close(&seg);
}

/*
 * Doorbell ping-pong: each side sends one message, then parks on its own
 * bell (prepare, re-check, futex wait) until the answer comes.  Every
 * message is a chance to lose a wake-up; a lost one shows as a wait that
 * times out while the message sits in the ring.
 */
struct bellside {
	struct cgr__ring tx, rx;
	uint64_t n, seed;
	int first; /* sends first */
	uint64_t lost, parks, bad;
};

static void bell_recv(struct bellside *b, uint64_t want)
{
	struct cgr__bell *bell = cgr__ring_bell(&b->rx, CGR__RING_CONSUMER);
	uint64_t v;
	uint32_t seq;
	int ret;

	for (;;) {
		if (cgr__ring_dequeue(&b->rx, &v) == 0)
			break;
		seq = cgr__bell_prepare(bell);
		if (cgr__ring_dequeue(&b->rx, &v) == 0) {
			cgr__bell_cancel(bell);
			break;
		}
		b->parks++;
		ret = cgr__futex_wait(&bell->seq, seq,
				      cgr__now_ns() + 2000000000ll);
		cgr__bell_cancel(bell);
		if (ret == -ETIMEDOUT && cgr__ring_ready(&b->rx))
			b->lost++;
	}
	b->bad += v != want;
}

static void *bell_side(void *arg)
{
	struct bellside *b = arg;
	uint64_t i, rs = b->seed;

	for (i = 0; i < b->n; i++) {
		if (!b->first)
			bell_recv(b, i);
		/* A random pause widens the windows the protocol must
		 * close. */
		for (unsigned k = (unsigned)(rnd(&rs) % 64); k; k--)
			cgr__cpu_relax();
		if (cgr__ring_enqueue(&b->tx, &i, sizeof(i)) != 0)
			b->bad++;
		cgr__ring_notify(&b->tx);
		if (b->first)
			bell_recv(b, i);
	}
	return NULL;
}

static void test_doorbell(void)
{
	size_t ms = cgr__ring_memsize(4, 8);
	void *m1 = xalloc(ms), *m2 = xalloc(ms);
	struct bellside a = {0}, b = {0};
	pthread_t ta, tb;
	uint64_t n = (uint64_t)t_scale(20000);

	cgr__ring_init(m1, ms, 4, 8, 0);
	cgr__ring_init(m2, ms, 4, 8, 0);
	cgr__ring_attach(&a.tx, m1, ms, CGR__RING_PRODUCER);
	cgr__ring_attach(&b.rx, m1, ms, CGR__RING_CONSUMER);
	cgr__ring_attach(&b.tx, m2, ms, CGR__RING_PRODUCER);
	cgr__ring_attach(&a.rx, m2, ms, CGR__RING_CONSUMER);
	a.n = b.n = n;
	a.first = 1;
	a.seed = t_rand();
	b.seed = t_rand();
	pthread_create(&ta, NULL, bell_side, &a);
	pthread_create(&tb, NULL, bell_side, &b);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	t_ok(a.bad == 0 && b.bad == 0, "doorbell: %llu round trips in order",
	     (unsigned long long)n);
	t_is(a.lost + b.lost, 0, "doorbell: no lost wake-up in %llu parks",
	     (unsigned long long)(a.parks + b.parks));
	t_ok(a.parks + b.parks > 0, "doorbell: the sides really parked");
	free(m1);
	free(m2);
}

int main(int argc, char **argv)
{
	t_init(argc, argv, 300);
	test_threads();
	test_wrap();
	test_processes();
	test_four_pairs();
	test_doorbell();
	return t_done();
}
