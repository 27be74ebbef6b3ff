/*
 * tests/fuzz/ring.c: the checks cgr__ring_attach makes of a ring's shared
 * header and slots (ring/ring.c), over memory from the input.  Attach
 * refuses (CGR_ECORRUPT, -EINVAL) or gives a handle that works within
 * the memory: a consumer drains what it holds (every message inside the
 * memory, then empty); a producer fills it, after which a consumer must
 * attach too and find the producer's messages last, in order.
 */
#include <errno.h>
#include <stdlib.h>

#include "ring/ring.h"
#include "fuzz.h"

static void as_consumer(struct cgr__ring *r)
{
	uint32_t cap = cgr__ring_capacity(r), n = 0;
	volatile unsigned char sink = 0;
	const unsigned char *m;

	fz_assert(cgr__ring_count(r) <= cap);
	while ((m = cgr__ring_peek(r)) != NULL) {
		fz_assert(++n <= cap);
		for (uint32_t i = 0; i < r->esize; i++)
			sink += m[i];
		cgr__ring_consume(r);
	}
	fz_assert(cgr__ring_count(r) == 0 || n < cap);
}

static void as_producer(void *mem, size_t memsize, struct cgr__ring *r)
{
	uint32_t cap = cgr__ring_capacity(r), k = 0, before;
	unsigned char msg[CGR__RING_MAX_ESIZE];
	struct cgr__ring c;
	const unsigned char *m;
	uint32_t seen = 0, total = 0;

	before = cgr__ring_count(r);
	fz_assert(before <= cap);
	for (;;) {
		memset(msg, 0, r->esize);
		memcpy(msg, &k, r->esize < 4 ? r->esize : 4);
		if (cgr__ring_enqueue(r, msg, r->esize) != 0)
			break;
		fz_assert(++k <= cap);
	}
	fz_assert(before + k == cap);
	/* A producer that attached left a ring a consumer takes. */
	fz_assert(cgr__ring_attach(&c, mem, memsize, CGR__RING_CONSUMER) == 0);
	while ((m = cgr__ring_peek(&c)) != NULL) {
		total++;
		if (total > before) {
			uint32_t got = 0;
			memcpy(&got, m, r->esize < 4 ? r->esize : 4);
			fz_assert(r->esize < 4 || got == seen);
			seen++;
		}
		cgr__ring_consume(&c);
		fz_assert(total <= cap);
	}
	fz_assert(total == cap && seen == k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	int role = fz_u8(&f) % 2 ? CGR__RING_PRODUCER : CGR__RING_CONSUMER;
	size_t memsize = (f.n + 63) & ~(size_t)63;
	struct cgr__ring r;
	void *mem;
	int ret;

	if (memsize == 0)
		memsize = 64;
	mem = aligned_alloc(64, memsize);
	fz_assert(mem != NULL);
	memset(mem, 0, memsize);
	memcpy(mem, f.p, f.n);
	ret = cgr__ring_attach(&r, mem, memsize, role);
	fz_assert(ret == 0 || ret == CGR_ECORRUPT || ret == -EINVAL);
	if (ret == 0) {
		fz_assert(r.mask + 1 == cgr__ring_capacity(&r));
		fz_assert(cgr__ring_memsize(r.mask + 1, r.esize) <= memsize);
		if (role == CGR__RING_CONSUMER)
			as_consumer(&r);
		else
			as_producer(mem, memsize, &r);
	}
	free(mem);
	return 0;
}

/* Seeds: rings cgr set up, empty, part full and full, some with their
 * positions about to wrap, for each role. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("CGR_FUZZ_SEEDS");
	static const struct {
		uint32_t count, esize, fill;
		uint64_t start;
	} g[] = {
		{ 4, 8, 0, 0 },
		{ 8, 56, 3, 0 },
		{ 4, 100, 4, 0 },
		{ 16, 8, 5, UINT64_MAX - 2 },
		{ 2, 4096, 1, 1u << 20 },
	};
	unsigned char msg[4096] = { 0 };
	char name[64];

	(void)argc, (void)argv;
	if (dir == NULL || !*dir)
		return 0;
	for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
		size_t n = cgr__ring_memsize(g[i].count, g[i].esize);
		unsigned char *buf = aligned_alloc(64, n + 64);
		struct cgr__ring p;
		fz_assert(buf != NULL);
		fz_assert(cgr__ring_init_at(buf + 64, n, g[i].count,
					    g[i].esize, 0, g[i].start) == 0);
		fz_assert(
		    cgr__ring_attach(&p, buf + 64, n, CGR__RING_PRODUCER) == 0);
		for (uint32_t k = 0; k < g[i].fill; k++) {
			msg[0] = (uint8_t)k;
			fz_assert(cgr__ring_enqueue(&p, msg, g[i].esize) == 0);
		}
		for (int role = 0; role < 2; role++) {
			unsigned char *in = buf + 63;
			*in = (uint8_t)role; /* the role, then the memory */
			snprintf(name, sizeof(name), "ring-%zu-%s", i,
				 role ? "prod" : "cons");
			fz_seed_write(dir, name, in, n + 1);
		}
		free(buf);
	}
	exit(0);
}
