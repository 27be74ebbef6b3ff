/*
 * chan/board.c: agreement boards (see board.h).
 */
#include <errno.h>
#include <string.h>

#include "chan/board.h"

struct cgr__board {
	uint32_t n, k, nslots; /* members, records per member, slots */
	/* followed by each member's doorbell, as its offset from the board
	 * (the board and the bells may be in memory each process maps at
	 * its own address), then done[n] (a line each), then
	 * agree[nslots][n * k] */
};

struct board_done {
	_Atomic uint64_t seq; /* executions this member finished reading */
	char pad[CGR__CACHELINE - 8];
};

static size_t board_hdr(size_t n)
{
	return CGR__ALIGN_UP(sizeof(struct cgr__board), 64) +
	       CGR__ALIGN_UP(n * sizeof(int64_t), 64);
}

size_t cgr__board_size(size_t n, size_t k, uint32_t nslots)
{
	return board_hdr(n) + n * sizeof(struct board_done) +
	       (size_t)nslots * n * k * sizeof(struct cgr__agree);
}

static int64_t *bell_offs(struct cgr__board *b)
{
	return (int64_t *)((unsigned char *)b + CGR__ALIGN_UP(sizeof(*b), 64));
}

static struct cgr__bell *bell_of(struct cgr__board *b, uint32_t r)
{
	return (struct cgr__bell *)((uintptr_t)b + (uintptr_t)bell_offs(b)[r]);
}

static struct board_done *board_done(struct cgr__board *b)
{
	return (struct board_done *)((unsigned char *)b + board_hdr(b->n));
}

static struct cgr__agree *board_row(struct cgr__board *b, uint64_t seq)
{
	unsigned char *base = (unsigned char *)board_done(b) +
			      b->n * sizeof(struct board_done);
	return (struct cgr__agree *)(base + (size_t)(seq & (b->nslots - 1)) *
						    b->n * b->k *
						    sizeof(struct cgr__agree));
}

bool cgr__board_is(const struct cgr__board *b, size_t n, size_t k,
		   uint32_t nslots)
{
	return b->n == n && b->k == k && b->nslots == nslots;
}

void cgr__board_init(struct cgr__board *b, size_t n, size_t k, uint32_t nslots,
		     struct cgr__bell *const *bells)
{
	struct board_done *d;

	b->n = (uint32_t)n;
	b->k = (uint32_t)k;
	b->nslots = nslots;
	for (size_t i = 0; i < n; i++)
		bell_offs(b)[i] = (int64_t)((uintptr_t)bells[i] - (uintptr_t)b);
	d = board_done(b);
	for (size_t i = 0; i < n; i++)
		atomic_init(&d[i].seq, 0);
	for (uint32_t s = 0; s < nslots; s++) {
		struct cgr__agree *a = board_row(b, s);
		for (size_t i = 0; i < n * k; i++)
			atomic_init(&a[i].seq, 0);
	}
}

struct posted {
	struct cgr__agree *row;
	uint32_t n; /* records */
	uint64_t want;
};

static bool all_posted(void *arg)
{
	struct posted *p = arg;
	for (uint32_t r = 0; r < p->n; r++)
		/* A1: pairs with the release store of each member's post. */
		if (atomic_load_explicit(&p->row[r].seq,
					 memory_order_acquire) != p->want)
			return false;
	return true;
}

struct drained {
	struct board_done *done;
	uint32_t n;
	uint64_t floor;
};

static bool all_drained(void *arg)
{
	struct drained *p = arg;
	for (uint32_t r = 0; r < p->n; r++)
		/* D1: pairs with D0: the member copied the row out. */
		if (atomic_load_explicit(&p->done[r].seq,
					 memory_order_acquire) < p->floor)
			return false;
	return true;
}

static void ring_others(struct cgr__board *b, int self)
{
	for (uint32_t r = 0; r < b->n; r++)
		if ((int)r != self)
			cgr__bell_ring(bell_of(b, r));
}

/* Posts rank's records for seq (its row is free) and rings the others. */
static void post(struct cgr__board *b, int rank, uint64_t seq,
		 const struct cgr__agree *mine)
{
	struct cgr__agree *row = board_row(b, seq);

	for (size_t j = 0; j < b->k; j++) {
		struct cgr__agree *a = &row[(size_t)rank * b->k + j];
		memcpy((char *)a + sizeof(a->seq),
		       (const char *)&mine[j] + sizeof(mine->seq),
		       sizeof(*mine) - sizeof(mine->seq));
		/* R1: publishes the description; pairs with A1. */
		atomic_store_explicit(&a->seq, seq + 1, memory_order_release);
	}
	ring_others(b, rank);
}

/* Copies the row of seq (everybody posted) and says rank is done. */
static void collect(struct cgr__board *b, int rank, uint64_t seq,
		    struct cgr__agree *all)
{
	memcpy(all, board_row(b, seq), (size_t)b->n * b->k * sizeof(*all));
	/* D0: this member is done with the row; pairs with D1. */
	atomic_store_explicit(&board_done(b)[rank].seq, seq + 1,
			      memory_order_release);
	ring_others(b, rank);
}

int cgr__board_exchange(struct cgr__board *b, int rank, uint64_t seq,
			const struct cgr__agree *mine, struct cgr__agree *all,
			struct cgr__reactor *r, const _Atomic uint32_t *cancel,
			int mode, int64_t spin_ns)
{
	struct cgr__bell *self = bell_of(b, (uint32_t)rank);
	int ret;

	/* The row's previous execution must be read by everybody. */
	if (seq >= b->nslots) {
		struct drained dr = { board_done(b), b->n,
				      seq + 1 - b->nslots };
		ret = cgr__reactor_wait(r, self, all_drained, &dr, cancel,
					mode, spin_ns, CGR_FOREVER);
		if (ret < 0)
			return ret;
	}
	post(b, rank, seq, mine);
	struct posted po = { board_row(b, seq), b->n * b->k, seq + 1 };
	ret = cgr__reactor_wait(r, self, all_posted, &po, cancel, mode,
				spin_ns, CGR_FOREVER);
	if (ret < 0)
		return ret;
	collect(b, rank, seq, all);
	return 0;
}

int cgr__board_try_post(struct cgr__board *b, int rank, uint64_t seq,
			const struct cgr__agree *mine)
{
	struct drained dr = { board_done(b), b->n, seq + 1 - b->nslots };

	if (seq >= b->nslots && !all_drained(&dr))
		return -EAGAIN;
	post(b, rank, seq, mine);
	return 0;
}

int cgr__board_try_collect(struct cgr__board *b, int rank, uint64_t seq,
			   struct cgr__agree *all)
{
	struct posted po = { board_row(b, seq), b->n * b->k, seq + 1 };

	if (!all_posted(&po))
		return -EAGAIN;
	collect(b, rank, seq, all);
	return 0;
}
