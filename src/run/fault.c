/*
 * run/fault.c: fault injection for the tests, built only with
 * --enable-fault-injection (CGR_FAULT_INJECTION).  A test sets
 * cgr_compiled.debug_coll_delay_ns; then the communication streams sleep
 * a pseudo-random time up to a quarter of it before each collective, and
 * in each execution one (member, stream) starts late (the delay passes
 * before it moves anything) and finishes late: its outputs' data is
 * garbled, the delay passes, then it is restored, all before its job
 * publishes done.  A reader that skipped its WAIT sees garbage even
 * when the other members finished at once and told it so.  The turn goes
 * round (member = execution mod n, stream = execution / n mod 4: the
 * collective, send, recv and compute streams), so each (member, stream)
 * is the late one in a fixed share; a late compute stream is late four
 * times as long (its outputs may be read only after a chain of
 * collectives and other workers' stream tasks).
 */
#include <time.h>

#include "run/run.h"

/* The turns of lateness: a worker's collective, send and recv streams
 * (an NCCL collective's by its CUDA stream), then its compute stream. */
#define LATE (CGR__S_RECV + 2)

static int64_t fault_delay(const struct cgr_compiled *c)
{
	return atomic_load_explicit(&c->debug_coll_delay_ns,
				    memory_order_relaxed);
}

/* A hash of (execution, member's collective) that spreads the delays,
 * differently on every member. */
static uint64_t fault_mix(uint64_t seq, const void *cr)
{
	uint64_t h = (seq + 1) * 0x9E3779B97F4A7C15ull +
		     (uint64_t)(uintptr_t)cr;
	h ^= h >> 31;
	h *= 0xD6E8FEB86659FD93ull;
	return h ^ (h >> 29);
}

static void fault_sleep(int64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000), (long)(ns % 1000000000) };
	nanosleep(&ts, NULL);
}

/* Garbles the data of ports[0..n) of execution seq, sleeps ns, restores. */
static void fault_garble(struct cgr_compiled *c, const unsigned *ports,
			 size_t n, uint64_t seq, int64_t ns)
{
	for (int pass = 0; pass < 2; pass++) {
		for (size_t j = 0; j < n; j++) {
			struct cgr__slot_hdr *h;
			unsigned char *d;
			if (ports[j] == CGR__NO_PORT)
				continue;
			h = cgr__port_slot(&c->ports[ports[j]], seq);
			if (h->kind != CGR_VALUE_TENSOR &&
			    h->kind != CGR_VALUE_BYTES)
				continue;
			d = cgr__slot_data(h);
			for (uint64_t b = 0; b < h->len; b++)
				d[b] ^= 0x5a;
		}
		if (pass == 0)
			fault_sleep(ns);
	}
}

/* Whether (member, stream) of cr is the late one of execution seq. */
static bool fault_late(const struct cgr__coll_rt *cr, uint64_t seq)
{
	return seq % (uint64_t)cr->n == (uint64_t)cr->rank &&
	       seq / (uint64_t)cr->n % LATE == (uint64_t)cr->cstream;
}

void cgr__fault_coll_before(struct cgr__coll_rt *cr, uint64_t seq)
{
	int64_t delay = fault_delay(cr->c);

	/* A quarter of the late delay at most: a consumer's other inputs
	 * come well inside the late member's window.  The late one also
	 * starts late (its outputs stale meanwhile): a consumer that did
	 * not wait may come long after the move itself, behind other
	 * inputs that take their time. */
	if (delay > 0)
		fault_sleep((int64_t)(fault_mix(seq, cr) %
				      (uint64_t)(delay / 4 + 1)) +
			    (fault_late(cr, seq) ? delay : 0));
}

void cgr__fault_coll_after(struct cgr__coll_rt *cr, uint64_t seq)
{
	int64_t delay = fault_delay(cr->c);

	if (delay > 0 && fault_late(cr, seq))
		fault_garble(cr->c, cr->out_ports, cr->k, seq, delay);
}

void cgr__fault_task_after(struct cgr_task_ctx *tc, uint64_t seq)
{
	struct cgr_compiled *c = tc->c;
	int64_t delay = fault_delay(c);

	if (delay > 0 && tc->async &&
	    seq % c->nprogs == (uint64_t)(tc->prog - c->progs) &&
	    seq / c->nprogs % LATE == LATE - 1)
		fault_garble(c, tc->out_ports, tc->nout, seq, 4 * delay);
}

void cgr__fault_slot_after(struct cgr_task_ctx *tc, uint64_t seq)
{
	struct cgr_compiled *c = tc->c;

	for (size_t o = 0; c->debug_corrupt && o < tc->nout; o++) {
		struct cgr__slot_hdr *h =
			cgr__port_slot(&c->ports[tc->out_ports[o]], seq);
		if (c->debug_corrupt == 1)
			h->len = (uint64_t)1 << 40;
		else if (c->debug_corrupt == 2)
			h->kind = 77;
		else if (c->debug_corrupt == 4)
			h->big = 1, h->big_off += 4096; /* data elsewhere */
		else
			h->kind = CGR_VALUE_TENSOR, h->ndim = 1000;
	}
}
