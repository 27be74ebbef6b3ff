/*
 * ring/ring.c: the SPSC ring of ring.h: sizing and initialisation on caller
 * memory, attach with validation of the shared header, single, burst and
 * bulk enqueue/dequeue, peek/consume, and parking on the doorbells.
 *
 * Memory-order labels (each acquire names the release it pairs with):
 *   R1 producer publishes message q (slot seq = q + 1)     -> A1
 *   R2 consumer publishes cons_pos (frees slots below it)  -> A2
 *   R3 producer publishes prod_pos                         -> A3
 *
 * The producer stores prod_pos before the slots it covers (R3 before R1).
 * So attach, reading cons_pos then prod_pos, sees cons <= prod <= cons +
 * count in any snapshot taken while nothing moves, and an enqueue caught
 * half done shows as a run of not-yet-written slots at the end of the full
 * region, which a consumer attaching accepts.
 */
#include <errno.h>
#include <string.h>

#include "base/base.h"
#include "base/futex.h"
#include "ring/ring.h"

_Static_assert(offsetof(struct cgr__ring_shared, prod_pos) ==
		   1 * CGR__CACHELINE,
	       "prod_pos has line 1");
_Static_assert(offsetof(struct cgr__ring_shared, cons_pos) ==
		   2 * CGR__CACHELINE,
	       "cons_pos has line 2");
_Static_assert(offsetof(struct cgr__ring_shared, cons_bell) ==
		   3 * CGR__CACHELINE,
	       "cons_bell has line 3");
_Static_assert(offsetof(struct cgr__ring_shared, prod_bell) ==
		   4 * CGR__CACHELINE,
	       "prod_bell has line 4");
_Static_assert(sizeof(struct cgr__ring_shared) == 5 * CGR__CACHELINE,
	       "the shared header is five lines");
_Static_assert(CGR__RING_INLINE_MAX + CGR__RING_SLOT_HDR == CGR__CACHELINE,
	       "an inline message and its sequence fill one line");
_Static_assert(sizeof(_Atomic uint64_t) == CGR__RING_SLOT_HDR,
	       "the slot sequence is a lock-free 64-bit word");

/* Attach retries while positions move under it (the other side is live). */
#define CGR__RING_ATTACH_MOVING 1000
/* ... and while they stand still but a slot read disagreed. */
#define CGR__RING_ATTACH_STILL 4

static inline uint32_t cgr__ring_slot_size(uint32_t esize)
{
	return (uint32_t)CGR__ALIGN_UP((size_t)esize + CGR__RING_SLOT_HDR,
				       CGR__CACHELINE);
}

static inline bool cgr__ring_geometry_ok(uint32_t count, uint32_t esize)
{
	return count != 0 && count <= CGR__RING_MAX_COUNT &&
	       (count & (count - 1)) == 0 && esize != 0 &&
	       esize <= CGR__RING_MAX_ESIZE;
}

static inline unsigned char *cgr__ring_slot(const struct cgr__ring *r,
					    uint64_t pos)
{
	return r->slots + (size_t)(pos & r->mask) * r->slot_size;
}

static inline _Atomic uint64_t *cgr__ring_seq(unsigned char *slot)
{
	return (_Atomic uint64_t *)(void *)slot;
}

/* memcpy, with the one-line message size spelled out so that the common
 * case compiles to a few moves instead of a library call. */
static inline void cgr__ring_copy(void *dst, const void *src, size_t n)
{
	if (n == CGR__RING_INLINE_MAX)
		memcpy(dst, src, CGR__RING_INLINE_MAX);
	else
		memcpy(dst, src, n);
}

size_t cgr__ring_memsize(uint32_t count, uint32_t esize)
{
	if (!cgr__ring_geometry_ok(count, esize))
		return 0;
	return sizeof(struct cgr__ring_shared) +
	       (size_t)count * cgr__ring_slot_size(esize);
}

/* FNV-1a over the geometry line, so that no single corrupted field (an
 * esize that keeps the slot size, say) passes for a valid ring. */
static uint32_t cgr__ring_check(const struct cgr__ring_shared *sh)
{
	uint64_t v[7] = {sh->version, sh->count,   sh->esize,	 sh->slot_size,
			 sh->flags,   sh->memsize, sh->slots_off};
	uint32_t h = 2166136261u;
	size_t i, b;

	for (i = 0; i < CGR__ARRAY_SIZE(v); i++)
		for (b = 0; b < 8; b++)
			h = (h ^ (uint8_t)(v[i] >> (8 * b))) * 16777619u;
	return h;
}

int cgr__ring_init_at(void *mem, size_t memsize, uint32_t count, uint32_t esize,
		     unsigned flags, uint64_t start)
{
	struct cgr__ring_shared *sh = mem;
	uint32_t slot_size = cgr__ring_slot_size(esize);
	size_t need = cgr__ring_memsize(count, esize);
	unsigned char *slots;
	uint64_t k;

	if (mem == NULL || flags != 0 || need == 0 || memsize < need ||
	    ((uintptr_t)mem & (CGR__CACHELINE - 1)) != 0)
		return -EINVAL;

	memset(mem, 0, need);
	sh->version = CGR__RING_VERSION;
	sh->count = count;
	sh->esize = esize;
	sh->slot_size = slot_size;
	sh->flags = 0;
	sh->memsize = need;
	sh->slots_off = sizeof(*sh);
	sh->check = cgr__ring_check(sh);
	atomic_init(&sh->prod_pos, start);
	atomic_init(&sh->cons_pos, start);
	cgr__bell_init(&sh->cons_bell);
	cgr__bell_init(&sh->prod_bell);
	/* Every slot looks like it held the message a lap before the one the
	 * producer writes there first, consumed. */
	slots = (unsigned char *)mem + sh->slots_off;
	for (k = 0; k < count; k++) {
		uint64_t q = start + k;
		atomic_init(
		    cgr__ring_seq(slots + (q & (count - 1)) * slot_size),
		    q - count + 1);
	}
	/*
	 * The magic last: a ring whose init was cut short never attaches.
	 * Publication to the other side is the caller's business (thread
	 * creation, fork, or whatever hands over the memory).
	 */
	sh->magic = CGR__RING_MAGIC;
	return 0;
}

int cgr__ring_init(void *mem, size_t memsize, uint32_t count, uint32_t esize,
		  unsigned flags)
{
	return cgr__ring_init_at(mem, memsize, count, esize, flags, 0);
}

/*
 * Checks every slot against the positions c and p (p - c <= count).  The
 * window of positions [c, c + count) covers each slot once:
 *   [c, p)          full: seq == q + 1, except that an enqueue caught half
 *                   done leaves a tail still a lap behind, q - count + 1
 *                   (accepted only when the producer is the other side);
 *   [p, c + count)  free: seq == q - count + 1, the consumed message of
 *                   the previous lap.
 */
static bool cgr__ring_scan(const struct cgr__ring *r, uint64_t c, uint64_t p,
			   int role)
{
	uint64_t count = (uint64_t)r->mask + 1, q;
	bool tail = false;

	for (q = c; q != p; q++) {
		uint64_t s = atomic_load_explicit(
		    cgr__ring_seq(cgr__ring_slot(r, q)), memory_order_relaxed);
		if (s == q + 1 && !tail)
			continue;
		if (s == q - count + 1 && role == CGR__RING_CONSUMER) {
			tail = true;
			continue;
		}
		return false;
	}
	for (; q != c + count; q++) {
		if (atomic_load_explicit(cgr__ring_seq(cgr__ring_slot(r, q)),
					 memory_order_relaxed) != q - count + 1)
			return false;
	}
	return true;
}

int cgr__ring_attach(struct cgr__ring *r, void *mem, size_t memsize, int role)
{
	struct cgr__ring_shared *sh = mem;
	struct cgr__ring h;
	unsigned moving = 0, still = 0;
	size_t need;

	if (r == NULL || mem == NULL ||
	    ((uintptr_t)mem & (CGR__CACHELINE - 1)) != 0 ||
	    (role != CGR__RING_PRODUCER && role != CGR__RING_CONSUMER))
		return -EINVAL;
	if (memsize < sizeof(*sh) || sh->magic != CGR__RING_MAGIC ||
	    sh->version != CGR__RING_VERSION || sh->flags != 0 ||
	    !cgr__ring_geometry_ok(sh->count, sh->esize) ||
	    sh->slot_size != cgr__ring_slot_size(sh->esize) ||
	    sh->slots_off != sizeof(*sh) || sh->check != cgr__ring_check(sh))
		return CGR_ECORRUPT;
	need = cgr__ring_memsize(sh->count, sh->esize);
	if (sh->memsize != need || memsize < need)
		return CGR_ECORRUPT;

	h.sh = sh;
	h.slots = (unsigned char *)mem + sh->slots_off;
	h.mask = sh->count - 1;
	h.esize = sh->esize;
	h.slot_size = sh->slot_size;
	h.role = role;
	for (;;) {
		/* A2: pairs with R2; with it, the consumer's acquires (A1) of
		 * the messages it passed, hence (via R1) the prod_pos stores
		 * (R3) before them: the prod_pos read next is at least c. */
		uint64_t c =
		    atomic_load_explicit(&sh->cons_pos, memory_order_acquire);
		/* A3: pairs with R3. */
		uint64_t p =
		    atomic_load_explicit(&sh->prod_pos, memory_order_acquire);

		if (p - c <= sh->count && cgr__ring_scan(&h, c, p, role)) {
			h.pos = role == CGR__RING_PRODUCER ? p : c;
			h.peer = c;
			break;
		}
		/* A live other side moves the positions under the scan: try
		 * again.  Standing still, a mismatch may still be a slot read
		 * racing its write: a few more tries, then it is corrupt. */
		if (c != atomic_load_explicit(&sh->cons_pos,
					      memory_order_acquire) ||
		    p != atomic_load_explicit(&sh->prod_pos,
					      memory_order_acquire)) {
			if (++moving < CGR__RING_ATTACH_MOVING)
				continue;
		} else if (++still < CGR__RING_ATTACH_STILL) {
			cgr__cpu_relax();
			continue;
		}
		return CGR_ECORRUPT;
	}
	*r = h;
	return 0;
}

/* ---- producer ---- */

/* Free slots from the producer's position, refreshing the cached cons_pos
 * only when fewer than want are known free. */
static inline uint32_t cgr__ring_room(struct cgr__ring *r, uint32_t want)
{
	uint64_t room = (uint64_t)r->mask + 1 - (r->pos - r->peer);

	if (cgr__likely(room >= want))
		return (uint32_t)room;
	/* A2: pairs with R2: the consumer is done reading every slot below
	 * cons_pos before we overwrite them. */
	r->peer = atomic_load_explicit(&r->sh->cons_pos, memory_order_acquire);
	return (uint32_t)((uint64_t)r->mask + 1 - (r->pos - r->peer));
}

int cgr__ring_enqueue(struct cgr__ring *r, const void *msg, size_t len)
{
	uint64_t pos = r->pos;
	unsigned char *slot;

	if (cgr__unlikely(r->role != CGR__RING_PRODUCER))
		return -EINVAL;
	if (cgr__unlikely(len > r->esize))
		return -EMSGSIZE;
	if (cgr__unlikely(pos - r->peer > r->mask) && cgr__ring_room(r, 1) == 0)
		return -EAGAIN;
	slot = cgr__ring_slot(r, pos);
	cgr__ring_copy(slot + CGR__RING_SLOT_HDR, msg, len);
	if (len < r->esize)
		memset(slot + CGR__RING_SLOT_HDR + len, 0, r->esize - len);
	r->pos = pos + 1;
	/* R3: pairs with A3 in attach; stored before the slot it covers. */
	atomic_store_explicit(&r->sh->prod_pos, pos + 1, memory_order_release);
	/* R1: publishes the message; pairs with A1 (dequeue, peek, ready). */
	atomic_store_explicit(cgr__ring_seq(slot), pos + 1,
			      memory_order_release);
	return 0;
}

static void cgr__ring_put(struct cgr__ring *r, const unsigned char *src,
			  unsigned k)
{
	uint64_t pos = r->pos;
	unsigned i;

	r->pos = pos + k;
	/* R3: pairs with A3 in attach; stored before the slots it covers. */
	atomic_store_explicit(&r->sh->prod_pos, pos + k, memory_order_release);
	for (i = 0; i < k; i++, src += r->esize) {
		unsigned char *slot = cgr__ring_slot(r, pos + i);
		cgr__ring_copy(slot + CGR__RING_SLOT_HDR, src, r->esize);
		/* R1: publishes this message; pairs with A1.  Slot by slot, so
		 * the consumer can start on the first before the last. */
		atomic_store_explicit(cgr__ring_seq(slot), pos + i + 1,
				      memory_order_release);
	}
}

unsigned cgr__ring_enqueue_bulk(struct cgr__ring *r, const void *msgs,
				unsigned n)
{
	if (r->role != CGR__RING_PRODUCER || n == 0 || n > r->mask + 1u ||
	    cgr__ring_room(r, n) < n)
		return 0;
	cgr__ring_put(r, msgs, n);
	return n;
}

unsigned cgr__ring_enqueue_burst(struct cgr__ring *r, const void *msgs,
				 unsigned n)
{
	uint32_t room;

	if (r->role != CGR__RING_PRODUCER || n == 0)
		return 0;
	room = cgr__ring_room(r, n);
	if (n > room)
		n = room;
	if (n != 0)
		cgr__ring_put(r, msgs, n);
	return n;
}

/* ---- consumer ---- */

int cgr__ring_dequeue(struct cgr__ring *r, void *msg)
{
	uint64_t pos = r->pos;
	unsigned char *slot = cgr__ring_slot(r, pos);

	if (cgr__unlikely(r->role != CGR__RING_CONSUMER))
		return -EINVAL;
	/* A1: pairs with R1: the message is in the slot. */
	if (atomic_load_explicit(cgr__ring_seq(slot), memory_order_acquire) !=
	    pos + 1)
		return -EAGAIN;
	cgr__ring_copy(msg, slot + CGR__RING_SLOT_HDR, r->esize);
	r->pos = pos + 1;
	/* R2: frees the slot; pairs with A2.  Orders our read of the message
	 * before the producer's overwrite a lap later. */
	atomic_store_explicit(&r->sh->cons_pos, pos + 1, memory_order_release);
	return 0;
}

static void cgr__ring_take(struct cgr__ring *r, unsigned char *dst, unsigned k)
{
	uint64_t pos = r->pos;
	unsigned i;

	for (i = 0; i < k; i++, dst += r->esize)
		cgr__ring_copy(dst,
			       cgr__ring_slot(r, pos + i) + CGR__RING_SLOT_HDR,
			       r->esize);
	r->pos = pos + k;
	/* R2: frees the k slots at once; pairs with A2. */
	atomic_store_explicit(&r->sh->cons_pos, pos + k, memory_order_release);
}

unsigned cgr__ring_dequeue_burst(struct cgr__ring *r, void *msgs, unsigned n)
{
	unsigned char *dst = msgs;
	uint64_t pos = r->pos;
	unsigned k;

	if (r->role != CGR__RING_CONSUMER || n == 0)
		return 0;
	if (n > r->mask + 1u)
		n = r->mask + 1u;
	/*
	 * One pass, in order: each slot's line is read once for its sequence
	 * and payload.  (Probing the last slot first would pull a line the
	 * producer is about to write whenever the burst is not all there.)
	 */
	for (k = 0; k < n; k++, dst += r->esize) {
		unsigned char *slot = cgr__ring_slot(r, pos + k);
		/* A1: pairs with R1: the message is in the slot. */
		if (atomic_load_explicit(cgr__ring_seq(slot),
					 memory_order_acquire) != pos + k + 1)
			break;
		cgr__ring_copy(dst, slot + CGR__RING_SLOT_HDR, r->esize);
	}
	if (k != 0) {
		r->pos = pos + k;
		/* R2: frees the k slots at once; pairs with A2. */
		atomic_store_explicit(&r->sh->cons_pos, pos + k,
				      memory_order_release);
	}
	return k;
}

unsigned cgr__ring_dequeue_bulk(struct cgr__ring *r, void *msgs, unsigned n)
{
	if (r->role != CGR__RING_CONSUMER || n == 0 || n > r->mask + 1u)
		return 0;
	/* A1: pairs with R1.  The producer publishes in position order, so
	 * if the last slot wanted is full they all are, and this acquire
	 * covers every message before it. */
	if (atomic_load_explicit(
		cgr__ring_seq(cgr__ring_slot(r, r->pos + n - 1)),
		memory_order_acquire) != r->pos + n)
		return 0;
	cgr__ring_take(r, msgs, n);
	return n;
}

const void *cgr__ring_peek(struct cgr__ring *r)
{
	unsigned char *slot = cgr__ring_slot(r, r->pos);

	if (r->role != CGR__RING_CONSUMER)
		return NULL;
	/* A1: pairs with R1: the message is in the slot. */
	if (atomic_load_explicit(cgr__ring_seq(slot), memory_order_acquire) !=
	    r->pos + 1)
		return NULL;
	return slot + CGR__RING_SLOT_HDR;
}

void cgr__ring_consume(struct cgr__ring *r)
{
	uint64_t pos = r->pos;

	if (r->role != CGR__RING_CONSUMER)
		return;
	/* Relaxed: the caller's peek made the acquire (A1); this only guards
	 * against a consume without a message. */
	if (atomic_load_explicit(cgr__ring_seq(cgr__ring_slot(r, pos)),
				 memory_order_relaxed) != pos + 1)
		return;
	r->pos = pos + 1;
	/* R2: frees the slot; pairs with A2.  Orders the caller's reads of
	 * the message in place before its overwrite. */
	atomic_store_explicit(&r->sh->cons_pos, pos + 1, memory_order_release);
}

/* ---- state, doorbells ---- */

bool cgr__ring_ready(const struct cgr__ring *r)
{
	if (r->role == CGR__RING_CONSUMER)
		/* A1: pairs with R1. */
		return atomic_load_explicit(
			   cgr__ring_seq(cgr__ring_slot(r, r->pos)),
			   memory_order_acquire) == r->pos + 1;
	/* The cached cons_pos only grows stale low: room it shows is there. */
	if (r->pos - r->peer <= r->mask)
		return true;
	/* A2: pairs with R2. */
	return r->pos - atomic_load_explicit(&r->sh->cons_pos,
					     memory_order_acquire) <=
	       r->mask;
}

uint32_t cgr__ring_count(const struct cgr__ring *r)
{
	uint64_t n;

	if (r->role == CGR__RING_PRODUCER)
		n = r->pos - atomic_load_explicit(&r->sh->cons_pos,
						  memory_order_relaxed);
	else
		n = atomic_load_explicit(&r->sh->prod_pos,
					 memory_order_relaxed) -
		    r->pos;
	return n > (uint64_t)r->mask + 1 ? r->mask + 1 : (uint32_t)n;
}

uint32_t cgr__ring_capacity(const struct cgr__ring *r)
{
	return r->mask + 1;
}

struct cgr__bell *cgr__ring_bell(struct cgr__ring *r, int role)
{
	if (role == CGR__RING_CONSUMER)
		return &r->sh->cons_bell;
	if (role == CGR__RING_PRODUCER)
		return &r->sh->prod_bell;
	return NULL;
}

void cgr__ring_notify(struct cgr__ring *r)
{
	/* The other side's bell: the producer wakes a consumer parked on an
	 * empty ring, the consumer a producer parked on a full one. */
	cgr__bell_ring(r->role == CGR__RING_PRODUCER ? &r->sh->cons_bell
						     : &r->sh->prod_bell);
}

int cgr__ring_wait(struct cgr__ring *r, int64_t deadline_ns)
{
	struct cgr__bell *b = cgr__ring_bell(r, r->role);
	uint32_t seq;
	int ret;

	if (b == NULL)
		return -EINVAL;
	for (;;) {
		if (cgr__ring_ready(r))
			return 0;
		/* Register, then re-check: a notify after our check sees the
		 * registration (the store-buffer pattern of base/futex.h). */
		seq = cgr__bell_prepare(b);
		if (cgr__ring_ready(r)) {
			cgr__bell_cancel(b);
			return 0;
		}
		ret = cgr__futex_wait(&b->seq, seq, deadline_ns);
		cgr__bell_cancel(b);
		if (ret < 0)
			return cgr__ring_ready(r) ? 0 : ret;
	}
}
