/*
 * tests/ring-bounds.c: the ring's edges, single threaded: bad sizes and
 * flags, attach of a corrupted header (every field, and the memory is left
 * byte-identical), full and empty, -EMSGSIZE and zero fill, burst (partial)
 * versus bulk (all or nothing), peek/consume, wrong-role calls, and the
 * 64-bit index wrap.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ring/ring.h"
#include "tap.h"

#define ES 56u

static void *xalloc(size_t n)
{
	void *p = aligned_alloc(64, CGR__ALIGN_UP(n, 64));
	if (p == NULL)
		abort();
	return p;
}

static void fill_msg(unsigned char *m, uint64_t v, size_t len)
{
	size_t i;
	for (i = 0; i < len; i++)
		m[i] = (unsigned char)(v * 131 + i);
}

static int check_msg(const unsigned char *m, uint64_t v, size_t len)
{
	size_t i;
	for (i = 0; i < len; i++)
		if (m[i] != (unsigned char)(v * 131 + i))
			return 0;
	return 1;
}

static void test_sizes(void)
{
	t_is(cgr__ring_memsize(0, ES), 0, "memsize: count 0");
	t_is(cgr__ring_memsize(1, ES), sizeof(struct cgr__ring_shared) + 64,
	     "memsize: count 1 is a ring of one");
	t_is(cgr__ring_memsize(3, ES), 0, "memsize: count not a power of two");
	t_is(cgr__ring_memsize(CGR__RING_MAX_COUNT * 2, ES), 0,
	     "memsize: count too large");
	t_is(cgr__ring_memsize(8, 0), 0, "memsize: esize 0");
	t_is(cgr__ring_memsize(8, CGR__RING_MAX_ESIZE + 1), 0,
	     "memsize: esize too large");
	t_is(cgr__ring_memsize(4, 56), sizeof(struct cgr__ring_shared) + 4 * 64,
	     "memsize: 56-byte messages take one line each");
	t_is(cgr__ring_memsize(4, 57),
	     sizeof(struct cgr__ring_shared) + 4 * 128,
	     "memsize: 57-byte messages take two lines");
	t_is(cgr__ring_memsize(CGR__RING_MAX_COUNT, CGR__RING_MAX_ESIZE),
	     sizeof(struct cgr__ring_shared) +
		 (size_t)CGR__RING_MAX_COUNT * (CGR__RING_MAX_ESIZE + 64),
	     "memsize: the largest ring");
}

static void test_init_args(void)
{
	size_t ms = cgr__ring_memsize(8, ES);
	unsigned char *mem = xalloc(ms + 64), *copy = xalloc(ms + 64);
	struct cgr__ring r, before;
	int bad = 0;

	memset(mem, 0xa5, ms + 64);
	memcpy(copy, mem, ms + 64);
	t_is(cgr__ring_init(mem, ms, 8, ES, 1), -EINVAL, "init: unknown flag");
	t_is(cgr__ring_init(mem, ms, 8, ES, 1u << 31), -EINVAL,
	     "init: unknown high flag");
	t_is(cgr__ring_init(mem, ms - 1, 8, ES, 0), -EINVAL,
	     "init: memory too small");
	t_is(cgr__ring_init(mem + 8, ms, 8, ES, 0), -EINVAL,
	     "init: misaligned memory");
	t_is(cgr__ring_init(NULL, ms, 8, ES, 0), -EINVAL, "init: NULL memory");
	t_is(cgr__ring_init(mem, ms, 0, ES, 0), -EINVAL, "init: count 0");
	t_is(cgr__ring_init(mem, ms, 6, ES, 0), -EINVAL,
	     "init: count not a power of two");
	t_is(cgr__ring_init(mem, ms, CGR__RING_MAX_COUNT << 1, ES, 0), -EINVAL,
	     "init: count too large");
	t_is(cgr__ring_init(mem, ms, 8, 0, 0), -EINVAL, "init: esize 0");
	t_is(cgr__ring_init(mem, ms, 8, CGR__RING_MAX_ESIZE + 1, 0), -EINVAL,
	     "init: esize too large");
	t_ok(memcmp(mem, copy, ms + 64) == 0, "init: failures write nothing");

	memset(&r, 0x5a, sizeof(r));
	before = r;
	t_is(cgr__ring_attach(&r, mem, ms, CGR__RING_CONSUMER), CGR_ECORRUPT,
	     "attach: uninitialised memory is corrupt");
	memset(mem, 0, ms);
	t_is(cgr__ring_attach(&r, mem, ms, CGR__RING_PRODUCER), CGR_ECORRUPT,
	     "attach: zeroed memory is corrupt");
	t_ok(memcmp(&r, &before, sizeof(r)) == 0,
	     "attach: the handle is untouched on failure");

	t_is(cgr__ring_init(mem, ms, 8, ES, 0), 0, "init: ok");
	t_is(cgr__ring_attach(&r, mem, ms, 0), -EINVAL, "attach: role 0");
	t_is(cgr__ring_attach(&r, mem, ms, 3), -EINVAL, "attach: role 3");
	t_is(cgr__ring_attach(NULL, mem, ms, CGR__RING_PRODUCER), -EINVAL,
	     "attach: NULL handle");
	t_is(cgr__ring_attach(&r, NULL, ms, CGR__RING_PRODUCER), -EINVAL,
	     "attach: NULL memory");
	t_is(cgr__ring_attach(&r, mem, ms - 1, CGR__RING_PRODUCER),
	     CGR_ECORRUPT, "attach: memsize smaller than the ring");
	t_is(cgr__ring_attach(&r, mem, 16, CGR__RING_PRODUCER), CGR_ECORRUPT,
	     "attach: memsize smaller than the header");
	t_is(cgr__ring_attach(&r, mem, ms + 64, CGR__RING_PRODUCER), 0,
	     "attach: larger memsize is fine");
	for (int i = 0; i < 100; i++) {
		/* A random flag set with at least one bit. */
		unsigned f = (unsigned)t_rand() | 1u << (t_rand() % 32);
		bad += cgr__ring_init(mem, ms, 8, ES, f) != -EINVAL;
	}
	t_is(bad, 0, "init: 100 random flag sets all rejected");
	free(mem);
	free(copy);
}

static void test_full_empty(void)
{
	size_t ms = cgr__ring_memsize(8, ES);
	unsigned char *mem = xalloc(ms), m[ES], big[ES + 8];
	struct cgr__ring p, c;
	int ok = 1;
	uint64_t v;

	cgr__ring_init(mem, ms, 8, ES, 0);
	t_is(cgr__ring_attach(&p, mem, ms, CGR__RING_PRODUCER), 0, "attach p");
	t_is(cgr__ring_attach(&c, mem, ms, CGR__RING_CONSUMER), 0, "attach c");
	t_is(cgr__ring_capacity(&p), 8, "capacity 8");
	t_is(cgr__ring_dequeue(&c, m), -EAGAIN, "empty: dequeue -EAGAIN");
	t_ok(cgr__ring_peek(&c) == NULL, "empty: peek NULL");
	t_ok(!cgr__ring_ready(&c), "empty: consumer not ready");
	t_ok(cgr__ring_ready(&p), "empty: producer ready");
	t_is(cgr__ring_count(&c), 0, "empty: count 0");

	for (v = 0; v < 8; v++) {
		fill_msg(m, v, ES);
		ok &= cgr__ring_enqueue(&p, m, ES) == 0;
	}
	t_ok(ok, "8 enqueues fill the ring");
	t_is(cgr__ring_enqueue(&p, m, ES), -EAGAIN, "full: enqueue -EAGAIN");
	t_ok(!cgr__ring_ready(&p), "full: producer not ready");
	t_ok(cgr__ring_ready(&c), "full: consumer ready");
	t_is(cgr__ring_count(&p), 8, "full: count 8 (producer)");
	t_is(cgr__ring_count(&c), 8, "full: count 8 (consumer)");
	t_is(cgr__ring_enqueue_burst(&p, m, 1), 0, "full: burst 0");

	/* Wrong-role calls do nothing. */
	t_is(cgr__ring_enqueue(&c, m, ES), -EINVAL, "consumer enqueue -EINVAL");
	t_is(cgr__ring_dequeue(&p, m), -EINVAL, "producer dequeue -EINVAL");
	t_is(cgr__ring_enqueue_burst(&c, m, 1), 0, "consumer burst enqueue 0");
	t_is(cgr__ring_dequeue_burst(&p, m, 1), 0, "producer burst dequeue 0");
	t_ok(cgr__ring_peek(&p) == NULL, "producer peek NULL");
	cgr__ring_consume(&p);
	t_is(cgr__ring_count(&c), 8, "producer consume is a no-op");

	for (v = 0; v < 8; v++)
		ok &= cgr__ring_dequeue(&c, m) == 0 && check_msg(m, v, ES);
	t_ok(ok, "8 dequeues in FIFO order with intact payloads");
	t_is(cgr__ring_dequeue(&c, m), -EAGAIN, "empty again");

	/* -EMSGSIZE changes nothing; a short message is zero-filled. */
	t_is(cgr__ring_enqueue(&p, big, ES + 1), -EMSGSIZE,
	     "esize + 1: -EMSGSIZE");
	t_is(cgr__ring_enqueue(&p, big, SIZE_MAX), -EMSGSIZE,
	     "SIZE_MAX: -EMSGSIZE");
	t_is(cgr__ring_count(&c), 0, "-EMSGSIZE enqueued nothing");
	/* Go round the ring once with full messages so every slot is dirty. */
	for (v = 0; v < 8; v++) {
		memset(m, 0xff, ES);
		cgr__ring_enqueue(&p, m, ES);
		cgr__ring_dequeue(&c, m);
	}
	fill_msg(m, 7, 10);
	t_is(cgr__ring_enqueue(&p, m, 10), 0, "10-byte message");
	t_is(cgr__ring_enqueue(&p, m, 0), 0, "empty message");
	memset(m, 0xee, ES);
	cgr__ring_dequeue(&c, m);
	ok = check_msg(m, 7, 10);
	for (size_t i = 10; i < ES; i++)
		ok &= m[i] == 0;
	t_ok(ok, "short message comes out zero-filled to esize");
	memset(m, 0xee, ES);
	cgr__ring_dequeue(&c, m);
	ok = 1;
	for (size_t i = 0; i < ES; i++)
		ok &= m[i] == 0;
	t_ok(ok, "empty message comes out as esize zero bytes");
	free(mem);
}

static void test_one_slot(void)
{
	size_t ms = cgr__ring_memsize(1, 8);
	unsigned char *mem = xalloc(ms);
	struct cgr__ring p, c;
	uint64_t v, w = 0;
	int ok = 1;

	t_is(cgr__ring_init_at(mem, ms, 1, 8, 0, UINT64_MAX - 2), 0,
	     "one slot: init near the wrap");
	cgr__ring_attach(&p, mem, ms, CGR__RING_PRODUCER);
	cgr__ring_attach(&c, mem, ms, CGR__RING_CONSUMER);
	for (v = 0; v < 6; v++) {
		ok &= cgr__ring_dequeue(&c, &w) == -EAGAIN;
		ok &= cgr__ring_enqueue(&p, &v, 8) == 0;
		ok &= cgr__ring_enqueue(&p, &v, 8) == -EAGAIN;
		ok &= cgr__ring_count(&c) == 1;
		ok &= cgr__ring_dequeue(&c, &w) == 0 && w == v;
	}
	t_ok(ok, "one slot: full after one, empty after one, across the wrap");
	t_is(cgr__ring_attach(&p, mem, ms, CGR__RING_PRODUCER), 0,
	     "one slot: re-attach validates");
	free(mem);
}

static void test_burst_bulk(void)
{
	size_t ms = cgr__ring_memsize(8, ES);
	unsigned char *mem = xalloc(ms), in[16 * ES], out[16 * ES];
	struct cgr__ring p, c;
	const void *pk, *pk2;
	int ok = 1;
	unsigned i;

	for (i = 0; i < 16; i++)
		fill_msg(in + i * ES, i, ES);
	cgr__ring_init(mem, ms, 8, ES, 0);
	cgr__ring_attach(&p, mem, ms, CGR__RING_PRODUCER);
	cgr__ring_attach(&c, mem, ms, CGR__RING_CONSUMER);

	t_is(cgr__ring_enqueue_bulk(&p, in, 0), 0, "bulk 0");
	t_is(cgr__ring_enqueue_burst(&p, in, 0), 0, "burst 0");
	t_is(cgr__ring_enqueue_bulk(&p, in, 9), 0, "bulk above capacity: 0");
	t_is(cgr__ring_enqueue_bulk(&p, in, 5), 5, "bulk 5 into empty ring");
	t_is(cgr__ring_enqueue_bulk(&p, in + 5 * ES, 4), 0,
	     "bulk 4 with 3 free: none");
	t_is(cgr__ring_count(&c), 5, "... and nothing enqueued");
	t_is(cgr__ring_enqueue_burst(&p, in + 5 * ES, 4), 3,
	     "burst 4 with 3 free: 3");
	t_is(cgr__ring_count(&c), 8, "ring full");

	t_is(cgr__ring_dequeue_bulk(&c, out, 9), 0, "dequeue bulk 9: 0");
	t_is(cgr__ring_dequeue_bulk(&c, out, 3), 3, "dequeue bulk 3");
	t_is(cgr__ring_dequeue_burst(&c, out + 3 * ES, 16), 5,
	     "dequeue burst 16 with 5 there: 5");
	t_ok(memcmp(in, out, 8 * ES) == 0, "bulk/burst keep FIFO order");
	t_is(cgr__ring_dequeue_burst(&c, out, 4), 0,
	     "dequeue burst on empty: 0");

	/* Burst larger than the ring is capped at the ring. */
	t_is(cgr__ring_enqueue_burst(&p, in, 16), 8, "burst 16 into 8: 8");
	t_is(cgr__ring_dequeue_bulk(&c, out, 8), 8, "dequeue bulk 8");
	t_ok(memcmp(in, out, 8 * ES) == 0, "... in order");

	/* Partial dequeue burst, partial bulk refusal. */
	t_is(cgr__ring_enqueue_burst(&p, in, 2), 2, "burst 2");
	t_is(cgr__ring_dequeue_bulk(&c, out, 3), 0, "dequeue bulk 3 of 2: 0");
	t_is(cgr__ring_dequeue_burst(&c, out, 3), 2, "dequeue burst 3 of 2: 2");

	/* peek/consume. */
	t_ok(cgr__ring_peek(&c) == NULL, "peek on empty: NULL");
	cgr__ring_consume(&c);
	t_is(cgr__ring_count(&p), 0, "consume on empty: no-op");
	cgr__ring_enqueue(&p, in + 3 * ES, ES);
	cgr__ring_enqueue(&p, in + 4 * ES, ES);
	pk = cgr__ring_peek(&c);
	pk2 = cgr__ring_peek(&c);
	t_ok(pk != NULL && pk == pk2, "peek twice: same message");
	t_ok(pk != NULL && ((uintptr_t)pk & 7) == 0, "peek: 8-byte aligned");
	t_ok(pk != NULL && check_msg(pk, 3, ES), "peek: content in place");
	cgr__ring_consume(&c);
	pk = cgr__ring_peek(&c);
	t_ok(pk != NULL && check_msg(pk, 4, ES), "consume moves to the next");
	cgr__ring_consume(&c);
	t_ok(cgr__ring_peek(&c) == NULL, "both consumed");
	t_is(cgr__ring_count(&c), 0, "count 0");

	/* Random mix against a model FIFO. */
	{
		uint64_t head = 0, tail = 0;
		for (int it = 0; it < 20000; it++) {
			unsigned n = 1 + (unsigned)(t_rand() % 10), k;
			unsigned char buf[10 * ES];
			unsigned room = 8 - (unsigned)(tail - head);
			switch (t_rand() % 6) {
			case 0:
				for (i = 0; i < n; i++)
					fill_msg(buf + i * ES, tail + i, ES);
				k = cgr__ring_enqueue_burst(&p, buf, n);
				ok &= k == (n < room ? n : room);
				tail += k;
				break;
			case 1:
				for (i = 0; i < n; i++)
					fill_msg(buf + i * ES, tail + i, ES);
				k = cgr__ring_enqueue_bulk(&p, buf, n);
				ok &= k == (n <= room ? n : 0);
				tail += k;
				break;
			case 2:
				k = cgr__ring_dequeue_burst(&c, buf, n);
				ok &= k == (n < 8 - room ? n : 8 - room);
				for (i = 0; i < k; i++)
					ok &= check_msg(buf + i * ES, head + i,
							ES);
				head += k;
				break;
			case 3:
				k = cgr__ring_dequeue_bulk(&c, buf, n);
				ok &= k == (n <= 8 - room ? n : 0);
				for (i = 0; i < k; i++)
					ok &= check_msg(buf + i * ES, head + i,
							ES);
				head += k;
				break;
			case 4:
				fill_msg(buf, tail, ES);
				k = cgr__ring_enqueue(&p, buf, ES) == 0;
				ok &= k == (room > 0);
				tail += k;
				break;
			default:
				pk = cgr__ring_peek(&c);
				ok &= (pk != NULL) == (tail != head);
				if (pk != NULL) {
					ok &= check_msg(pk, head, ES);
					cgr__ring_consume(&c);
					head++;
				}
			}
			ok &= cgr__ring_count(&c) == tail - head;
		}
		t_ok(ok, "20000 random operations match a model FIFO");
	}
	free(mem);
}

static void test_wrap(void)
{
	size_t ms = cgr__ring_memsize(4, 16);
	unsigned char *mem = xalloc(ms), m[16], buf[3 * 16];
	struct cgr__ring p, c;
	struct cgr__ring_shared *sh = (void *)mem;
	uint64_t v = 0, w = 0;
	int ok = 1;

	t_is(cgr__ring_init_at(mem, ms, 4, 16, 0, UINT64_MAX - 5), 0,
	     "init_at UINT64_MAX - 5");
	cgr__ring_attach(&p, mem, ms, CGR__RING_PRODUCER);
	cgr__ring_attach(&c, mem, ms, CGR__RING_CONSUMER);
	t_ok(p.pos == UINT64_MAX - 5 && c.pos == UINT64_MAX - 5,
	     "handles start at the given position");
	while (v < 40) {
		unsigned n = 1 + (unsigned)(t_rand() % 3), k, i;
		for (i = 0; i < n; i++)
			fill_msg(buf + i * 16, v + i, 16);
		k = cgr__ring_enqueue_burst(&p, buf, n);
		v += k;
		k = cgr__ring_dequeue_burst(&c, buf,
					   1 + (unsigned)(t_rand() % 3));
		for (i = 0; i < k; i++)
			ok &= check_msg(buf + i * 16, w + i, 16);
		w += k;
		ok &= cgr__ring_count(&p) == v - w;
	}
	while (cgr__ring_dequeue(&c, m) == 0)
		ok &= check_msg(m, w++, 16);
	t_ok(ok && w == v, "40 messages across the 64-bit wrap, in order");
	t_ok(atomic_load(&sh->prod_pos) == v - 6 &&
		 atomic_load(&sh->cons_pos) == v - 6,
	     "published positions wrapped past 0");
	t_is(cgr__ring_attach(&p, mem, ms, CGR__RING_PRODUCER), 0,
	     "re-attach after the wrap validates");
	t_ok(p.pos == v - 6, "... at the wrapped position");
	free(mem);
}

/* One corruption case: applied, attach fails with the memory untouched,
 * then undone. */
struct field {
	const char *name;
	size_t off, len;
};

static int corrupt_one(unsigned char *mem, size_t ms, size_t off, size_t len,
		       uint64_t x, int role, unsigned char *snap)
{
	struct cgr__ring r;
	uint64_t old = 0, val;
	int ret, same;

	memcpy(&old, mem + off, len);
	val = old ^ x;
	memcpy(mem + off, &val, len);
	memcpy(snap, mem, ms);
	ret = cgr__ring_attach(&r, mem, ms, role);
	same = memcmp(snap, mem, ms) == 0;
	memcpy(mem + off, &old, len);
	return ret == CGR_ECORRUPT && same;
}

static void test_corrupt(void)
{
	const uint32_t n = 8;
	size_t ms = cgr__ring_memsize(n, 24);
	unsigned char *mem = xalloc(ms), *snap = xalloc(ms), *good = xalloc(ms),
		      m[24] = {0};
	struct cgr__ring p, c;
	struct cgr__ring_shared *sh = (void *)mem;
	const struct field f[] = {
#define F(x) {#x, offsetof(struct cgr__ring_shared, x), sizeof(sh->x)}
	    F(magic), F(version), F(count),	F(esize), F(slot_size),
	    F(flags), F(memsize), F(slots_off), F(check),
#undef F
	};
	size_t i;
	int k, role;

	cgr__ring_init_at(mem, ms, n, 24, 0, 1000);
	cgr__ring_attach(&p, mem, ms, CGR__RING_PRODUCER);
	cgr__ring_attach(&c, mem, ms, CGR__RING_CONSUMER);
	/* Three messages in flight, position 1003 vs 1001. */
	for (k = 0; k < 3; k++)
		cgr__ring_enqueue(&p, m, sizeof(m));
	cgr__ring_dequeue(&c, m);
	cgr__ring_enqueue(&p, m, sizeof(m));
	memcpy(good, mem, ms);

	for (i = 0; i < CGR__ARRAY_SIZE(f); i++) {
		int ok = 1;
		for (role = 1; role <= 2; role++) {
			/* Each bit alone, then random garbage. */
			for (k = 0; k < (int)f[i].len * 8; k++)
				ok &= corrupt_one(mem, ms, f[i].off, f[i].len,
						  1ull << k, role, snap);
			for (k = 0; k < 50; k++)
				ok &= corrupt_one(mem, ms, f[i].off, f[i].len,
						  t_rand() | 1, role, snap);
		}
		t_ok(ok && memcmp(mem, good, ms) == 0,
		     "corrupt %s (every bit, 50 random values, both roles): "
		     "CGR_ECORRUPT, memory byte-identical",
		     f[i].name);
	}

	/* Indices out of range: prod - cons > count, cons > prod. */
	{
		size_t po = offsetof(struct cgr__ring_shared, prod_pos);
		size_t co = offsetof(struct cgr__ring_shared, cons_pos);
		uint64_t pp = atomic_load(&sh->prod_pos);
		uint64_t cc = atomic_load(&sh->cons_pos);
		int ok = 1;

		for (role = 1; role <= 2; role++) {
			/* prod = cons + count + 1, and prod = cons - 1 */
			ok &= corrupt_one(mem, ms, po, 8, pp ^ (cc + n + 1),
					  role, snap);
			ok &= corrupt_one(mem, ms, po, 8, pp ^ (cc - 1), role,
					  snap);
			/* cons = prod + 1, cons = prod - count - 1 */
			ok &= corrupt_one(mem, ms, co, 8, cc ^ (pp + 1), role,
					  snap);
			ok &= corrupt_one(mem, ms, co, 8, cc ^ (pp - n - 1),
					  role, snap);
			/*
			 * Every single-bit flip.  prod_pos: the producer
			 * always refuses; a consumer accepts a prod_pos in
			 * (pp, cc + n], which is what an enqueue caught half
			 * done looks like.  cons_pos: both refuse, except a
			 * cons_pos in [pp - n, pp]: slots do not record that
			 * a message was consumed, so any of those passes.
			 */
			for (k = 0; k < 64; k++) {
				uint64_t vp = pp ^ 1ull << k,
					 vc = cc ^ 1ull << k;
				int flight_p = vp > pp && vp - cc <= n;
				int ahead_c = vc <= pp && pp - vc <= n;
				int rp = corrupt_one(mem, ms, po, 8, 1ull << k,
						     role, snap);
				int rc = corrupt_one(mem, ms, co, 8, 1ull << k,
						     role, snap);
				if (role == CGR__RING_PRODUCER)
					ok &= rp && (rc || ahead_c);
				else
					ok &=
					    (rp || flight_p) && (rc || ahead_c);
			}
		}
		t_ok(ok, "indices out of range: CGR_ECORRUPT, memory intact");

		/*
		 * prod_pos one ahead of the filled slots is exactly what a
		 * producer half-way through an enqueue looks like: the
		 * consumer accepts it (the producer may be live), a producer
		 * attaching does not (its own side cannot be half done).
		 */
		atomic_store(&sh->prod_pos, pp + 1);
		t_is(cgr__ring_attach(&c, mem, ms, CGR__RING_CONSUMER), 0,
		     "prod_pos + 1 (producer mid-enqueue): consumer attaches");
		t_is(cgr__ring_attach(&p, mem, ms, CGR__RING_PRODUCER),
		     CGR_ECORRUPT, "prod_pos + 1: producer does not");
		atomic_store(&sh->prod_pos, pp);
	}

	/* Slot sequences. */
	{
		int ok = 1;
		for (uint32_t s = 0; s < n; s++) {
			size_t off = sizeof(*sh) + (size_t)s * 64;
			for (role = 1; role <= 2; role++) {
				for (k = 0; k < 20; k++)
					ok &= corrupt_one(mem, ms, off, 8,
							  t_rand() | 1u << 20,
							  role, snap);
				ok &=
				    corrupt_one(mem, ms, off, 8,
						(uint64_t)1 << 40, role, snap);
			}
		}
		t_ok(ok, "corrupt slot sequences: CGR_ECORRUPT, memory intact");
	}
	t_ok(memcmp(mem, good, ms) == 0, "memory restored");
	t_is(cgr__ring_attach(&p, mem, ms, CGR__RING_PRODUCER), 0,
	     "intact ring attaches (producer)");
	t_is(p.pos, 1004, "... at position 1004");
	t_is(cgr__ring_attach(&c, mem, ms, CGR__RING_CONSUMER), 0,
	     "intact ring attaches (consumer)");
	t_is(c.pos, 1001, "... at position 1001");
	free(mem);
	free(snap);
	free(good);
}

int main(int argc, char **argv)
{
	t_init(argc, argv, 60);
	test_sizes();
	test_init_args();
	test_full_empty();
	test_one_slot();
	test_burst_bulk();
	test_wrap();
	test_corrupt();
	return t_done();
}
