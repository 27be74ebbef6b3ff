/*
 * chan/chan.c: ports and channels (see chan.h).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "chan/chan.h"

/* p's geometry over mem and big. */
static void port_layout(struct cgr__port *p, void *mem, size_t stride,
			void *big, size_t want, uint32_t nslots,
			uint32_t nbufs, const char *name)
{
	p->cap = cgr__port_cap(want);
	p->slot_bytes = cgr__port_slot_bytes(want, big == NULL);
	p->stride = stride;
	p->big = big;
	p->nslots = nslots;
	p->mask = nslots - 1;
	p->nbufs = nbufs;
	p->map = NULL;
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->mem = mem;
}

void cgr__port_init(struct cgr__port *p, void *mem, size_t stride, void *big,
		    size_t want, uint32_t nslots, uint32_t nbufs,
		    const char *name)
{
	port_layout(p, mem, stride, big, want, nslots, nbufs, name);
	for (uint32_t b = 0; b < nbufs; b++) {
		struct cgr__slot_hdr *h = cgr__port_bufhdr(p, b);
		memset(h, 0, p->slot_bytes);
		h->big_off = cgr__port_big_off(p, h);
	}
}

void cgr__port_attach(struct cgr__port *p, void *mem, size_t stride,
		      void *big, size_t want, uint32_t nslots, uint32_t nbufs,
		      const char *name)
{
	port_layout(p, mem, stride, big, want, nslots, nbufs, name);
	/* Map every page now (a read: the memory is another process's). */
	for (uint32_t b = 0; b < nbufs; b++) {
		const volatile unsigned char *m =
			(const unsigned char *)cgr__port_bufhdr(p, b);
		for (size_t i = 0; i < p->slot_bytes; i += 4096)
			(void)m[i];
		(void)m[p->slot_bytes - 1];
	}
}

static uint32_t chan_count(uint32_t nslots)
{
	return nslots < 2 ? 2 : nslots;
}

size_t cgr__chan_memsize(uint32_t nslots)
{
	return cgr__ring_memsize(chan_count(nslots), sizeof(struct cgr__msg));
}

int cgr__chan_init(struct cgr__chan *ch, void *mem, size_t memsize,
		   uint32_t nslots, unsigned port,
		   struct cgr__bell *reader_bell, bool attach)
{
	int ret = attach ? 0 :
			   cgr__ring_init(mem, memsize, chan_count(nslots),
					  sizeof(struct cgr__msg), 0);

	if (ret == 0)
		ret = cgr__ring_attach(&ch->prod, mem, memsize,
				       CGR__RING_PRODUCER);
	if (ret == 0)
		ret = cgr__ring_attach(&ch->cons, mem, memsize,
				       CGR__RING_CONSUMER);
	if (ret < 0)
		return ret;
	ch->mem = mem;
	ch->memsize = memsize;
	ch->port = port;
	ch->reader_bell = reader_bell;
	return 0;
}

int cgr__chan_write_wait(struct cgr__chan *ch, uint64_t seq,
			 const _Atomic uint32_t *cancel, int64_t timeout_ns)
{
	struct cgr__msg m = { seq };
	int64_t deadline = cgr__deadline(timeout_ns);
	unsigned spins = 0;

	/* Not expected (see chan.h): bounded, never parked. */
	while (cgr__ring_enqueue(&ch->prod, &m, sizeof(m)) == -EAGAIN) {
		if (cancel != NULL &&
		    atomic_load_explicit(cancel, memory_order_acquire))
			return -ECANCELED;
		if ((++spins & 63) == 0) {
			if (cgr__now_ns() >= deadline)
				return -ETIMEDOUT;
			sched_yield();
		} else {
			cgr__cpu_relax();
		}
	}
	cgr__bell_ring(ch->reader_bell);
	return 0;
}

static bool chan_ready(void *arg)
{
	return cgr__ring_peek(arg) != NULL;
}

int cgr__chan_read_wait(struct cgr__chan *ch, struct cgr__reactor *r,
			struct cgr__bell *b, const _Atomic uint32_t *cancel,
			int mode, int64_t spin_ns, uint64_t *seq)
{
	const struct cgr__msg *m;
	int ret = cgr__reactor_wait(r, b, chan_ready, &ch->cons, cancel, mode,
				    spin_ns, CGR_FOREVER);

	if (ret < 0)
		return ret;
	m = cgr__ring_peek(&ch->cons);
	*seq = m->seq;
	cgr__ring_consume(&ch->cons);
	return 0;
}
