/*
 * perf/ring_pingpong.c: round-trip latency and one-way throughput of
 * one-cache-line messages between two pinned sides (CPU 0 and CPU 1), as
 * two threads and as two processes (fork; the rings in a memfd that the
 * child maps again at its own address).
 *
 * Implementations, interleaved window by window in one run (the order
 * rotates every window so drift in the machine hits all of them alike):
 *   floor  one cache line, atomically ping-ponged: the hardware's floor
 *   cgr    two cgr rings (one per direction), 56-byte messages: payload
 *          and sequence fill one 64-byte slot
 *   ck     Concurrency Kit ck_ring spsc, 64-byte typed elements
 *   rte    DPDK rte_ring (SP/SC) on our own memory via rte_ring_init, no
 *          EAL, 64-byte elements
 * Each carries one cache line of message per hop.  Per window we take the
 * median round trip; we report the median of the window medians and its
 * ratio to the floor.  Throughput: one side sends M messages, singly and
 * in bursts of 32 (ck has no burst call: a loop of singles), the other
 * receives them; messages per second, median over windows.
 *
 * Options: -w windows, -n round trips per window, --quick, --json.
 */
#include "perf.h"

#include <pthread.h>
#include <sys/wait.h>

#include "ring/ring.h"
#include "shm/shm.h"

#ifdef HAVE_CK
#include <ck_ring.h>
#endif
#ifdef HAVE_DPDK
#include <rte_ring.h>
#include <rte_ring_elem.h>
#endif

#define COUNT 1024u  /* slots per ring */
#define BURST 32u    /* throughput burst */
#define CGR_MSG 56u  /* cgr payload: 56 + 8-byte sequence = one line */
#define LINE_MSG 64u /* ck/rte element: one line */
#define BENCH "ring_pingpong"

struct m64 {
	uint64_t seq;
	unsigned char pad[LINE_MSG - 8];
} __attribute__((aligned(64)));

#ifdef HAVE_CK
CK_RING_PROTOTYPE(m64, m64)
#endif

enum impl_id { FLOOR, CGR, CK, RTE, NIMPL };
static const char *const impl_name[NIMPL] = {"floor", "cgr", "ck", "rte"};

/* ---- the shared arena: offsets only, mapped anywhere ---- */

struct arena_hdr {
	struct perf_barrier bar __attribute__((aligned(64)));
	_Atomic uint64_t floor __attribute__((aligned(64)));
	unsigned char pad[64 - sizeof(_Atomic uint64_t)];
};

struct layout {
	size_t cgr[2]; /* ring 0: A to B, ring 1: B to A */
	size_t ck[2];  /* struct ck_ring, then its buffer */
	size_t ck_buf[2];
	size_t rte[2];
	size_t size;
	size_t cgr_size;
};

static struct layout lay;
static int have[NIMPL];

static void layout_make(void)
{
	size_t off = sizeof(struct arena_hdr);
	int d;

	lay.cgr_size = cgr__ring_memsize(COUNT, CGR_MSG);
	for (d = 0; d < 2; d++) {
		lay.cgr[d] = off;
		off = CGR__ALIGN_UP(off + lay.cgr_size, 4096);
	}
#ifdef HAVE_CK
	for (d = 0; d < 2; d++) {
		lay.ck[d] = off;
		lay.ck_buf[d] = CGR__ALIGN_UP(off + sizeof(struct ck_ring), 64);
		off = CGR__ALIGN_UP(lay.ck_buf[d] + COUNT * sizeof(struct m64),
				    4096);
	}
#endif
#ifdef HAVE_DPDK
	for (d = 0; d < 2; d++) {
		lay.rte[d] = off;
		off = CGR__ALIGN_UP(
		    off + (size_t)rte_ring_get_memsize_elem(LINE_MSG, COUNT),
		    4096);
	}
#endif
	lay.size = off;
}

/* Initialises every ring in the arena (once per case, before the sides
 * start). */
static int arena_init(unsigned char *base)
{
	int d, ret;

	memset(base, 0, sizeof(struct arena_hdr));
	for (d = 0; d < 2; d++) {
		ret = cgr__ring_init(base + lay.cgr[d], lay.cgr_size, COUNT,
				    CGR_MSG, 0);
		if (ret)
			return ret;
	}
	have[FLOOR] = have[CGR] = 1;
#ifdef HAVE_CK
	for (d = 0; d < 2; d++)
		ck_ring_init((struct ck_ring *)(base + lay.ck[d]), COUNT);
	have[CK] = 1;
#endif
#ifdef HAVE_DPDK
	have[RTE] = 1;
	for (d = 0; d < 2; d++) {
		ret = rte_ring_init((struct rte_ring *)(base + lay.rte[d]),
				    d ? "ba" : "ab", COUNT,
				    RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (ret) {
			fprintf(stderr, "rte_ring_init: %d, skipping rte\n",
				ret);
			have[RTE] = 0;
		}
	}
#endif
	return 0;
}

/* ---- one side's view: handles and pointers into its own mapping ---- */

struct side {
	unsigned char *base;
	int id; /* 0: A (measures), 1: B (echoes) */
	struct perf_barrier *bar;
	_Atomic uint64_t *floor;
	uint64_t floor_v; /* the floor line's value between windows */
	struct cgr__ring tx, rx;
#ifdef HAVE_CK
	struct ck_ring *ck_tx, *ck_rx;
	struct m64 *ckb_tx, *ckb_rx;
#endif
#ifdef HAVE_DPDK
	struct rte_ring *rte_tx, *rte_rx;
#endif
};

static int side_attach(struct side *s, unsigned char *base, int id)
{
	int tx = id, rx = !id, ret;
	struct arena_hdr *h = (struct arena_hdr *)base;

	s->base = base;
	s->id = id;
	s->bar = &h->bar;
	s->floor = &h->floor;
	s->floor_v = 0;
	ret = cgr__ring_attach(&s->tx, base + lay.cgr[tx], lay.cgr_size,
			       CGR__RING_PRODUCER);
	if (ret == 0)
		ret = cgr__ring_attach(&s->rx, base + lay.cgr[rx], lay.cgr_size,
				       CGR__RING_CONSUMER);
#ifdef HAVE_CK
	s->ck_tx = (struct ck_ring *)(base + lay.ck[tx]);
	s->ck_rx = (struct ck_ring *)(base + lay.ck[rx]);
	s->ckb_tx = (struct m64 *)(base + lay.ck_buf[tx]);
	s->ckb_rx = (struct m64 *)(base + lay.ck_buf[rx]);
#endif
#ifdef HAVE_DPDK
	s->rte_tx = (struct rte_ring *)(base + lay.rte[tx]);
	s->rte_rx = (struct rte_ring *)(base + lay.rte[rx]);
#endif
	return ret;
}

/* ---- per implementation: try-send, try-receive, bursts ---- */

static inline int cgrring_send(struct side *s, void *m)
{
	return cgr__ring_enqueue(&s->tx, m, CGR_MSG) == 0;
}
static inline int cgrring_recv(struct side *s, void *m)
{
	return cgr__ring_dequeue(&s->rx, m) == 0;
}
static inline unsigned cgrring_send_n(struct side *s, void *m, unsigned n)
{
	return cgr__ring_enqueue_burst(&s->tx, m, n);
}
static inline unsigned cgrring_recv_n(struct side *s, void *m, unsigned n)
{
	return cgr__ring_dequeue_burst(&s->rx, m, n);
}

#ifdef HAVE_CK
static inline int ck_send(struct side *s, void *m)
{
	return ck_ring_enqueue_spsc_m64(s->ck_tx, s->ckb_tx, m);
}
static inline int ck_recv(struct side *s, void *m)
{
	return ck_ring_dequeue_spsc_m64(s->ck_rx, s->ckb_rx, m);
}
static inline unsigned ck_send_n(struct side *s, void *m, unsigned n)
{
	unsigned k;
	for (k = 0; k < n; k++)
		if (!ck_send(s, (struct m64 *)m + k))
			break;
	return k;
}
static inline unsigned ck_recv_n(struct side *s, void *m, unsigned n)
{
	unsigned k;
	for (k = 0; k < n; k++)
		if (!ck_recv(s, (struct m64 *)m + k))
			break;
	return k;
}
#endif

#ifdef HAVE_DPDK
static inline int rte_send(struct side *s, void *m)
{
	return rte_ring_sp_enqueue_elem(s->rte_tx, m, LINE_MSG) == 0;
}
static inline int rte_recv(struct side *s, void *m)
{
	return rte_ring_sc_dequeue_elem(s->rte_rx, m, LINE_MSG) == 0;
}
static inline unsigned rte_send_n(struct side *s, void *m, unsigned n)
{
	return rte_ring_sp_enqueue_burst_elem(s->rte_tx, m, LINE_MSG, n, NULL);
}
static inline unsigned rte_recv_n(struct side *s, void *m, unsigned n)
{
	return rte_ring_sc_dequeue_burst_elem(s->rte_rx, m, LINE_MSG, n, NULL);
}
#endif

/*
 * The loops, instantiated per implementation so its operations inline
 * into them (cgr's are calls into libcgr.a, as a user gets them).
 *   ping: A sends seq i, waits for the echo; one sample per round trip.
 *   pong: B echoes.
 *   put/get: A sends n messages (stride bytes each, burst b), B takes them.
 * Returns the number of errors seen (wrong sequence).
 */
#define DEFINE_LOOPS(P, STRIDE)                                                \
	static long P##_ping(struct side *s, long n, uint64_t *t)              \
	{                                                                      \
		struct m64 out, in;                                            \
		long i, bad = 0;                                               \
		memset(&out, 0, sizeof(out));                                  \
		for (i = 0; i < n; i++) {                                      \
			uint64_t t0 = perf_ticks();                            \
			out.seq = (uint64_t)i;                                 \
			while (!P##_send(s, &out))                             \
				perf_relax();                                  \
			while (!P##_recv(s, &in))                              \
				;                                              \
			t[i] = perf_ticks() - t0;                              \
			bad += in.seq != (uint64_t)i;                          \
		}                                                              \
		return bad;                                                    \
	}                                                                      \
	static long P##_pong(struct side *s, long n)                           \
	{                                                                      \
		struct m64 m;                                                  \
		long i;                                                        \
		for (i = 0; i < n; i++) {                                      \
			while (!P##_recv(s, &m))                               \
				;                                              \
			while (!P##_send(s, &m))                               \
				perf_relax();                                  \
		}                                                              \
		return 0;                                                      \
	}                                                                      \
	static long P##_put(struct side *s, long n, unsigned b)                \
	{                                                                      \
		unsigned char buf[BURST * LINE_MSG];                           \
		long i = 0;                                                    \
		unsigned k;                                                    \
		memset(buf, 0, sizeof(buf));                                   \
		while (i < n) {                                                \
			unsigned want = (unsigned)(n - i < b ? n - i : b);     \
			for (k = 0; k < want; k++)                             \
				*(uint64_t *)(void *)(buf + k * (STRIDE)) =    \
				    (uint64_t)(i + k);                         \
			if (b == 1)                                            \
				k = (unsigned)P##_send(s, buf);                \
			else                                                   \
				k = P##_send_n(s, buf, want);                  \
			if (k == 0)                                            \
				perf_relax();                                  \
			i += k;                                                \
		}                                                              \
		return 0;                                                      \
	}                                                                      \
	static long P##_get(struct side *s, long n, unsigned b)                \
	{                                                                      \
		unsigned char buf[BURST * LINE_MSG];                           \
		long i = 0, bad = 0;                                           \
		unsigned k, j;                                                 \
		while (i < n) {                                                \
			if (b == 1)                                            \
				k = (unsigned)P##_recv(s, buf);                \
			else                                                   \
				k = P##_recv_n(s, buf, b);                     \
			for (j = 0; j < k; j++)                                \
				bad += *(uint64_t *)(void *)(buf +             \
							     j * (STRIDE)) !=  \
				       (uint64_t)(i + j);                      \
			if (k == 0)                                            \
				perf_relax();                                  \
			i += k;                                                \
		}                                                              \
		return bad;                                                    \
	}

DEFINE_LOOPS(cgrring, CGR_MSG)
#ifdef HAVE_CK
DEFINE_LOOPS(ck, LINE_MSG)
#endif
#ifdef HAVE_DPDK
DEFINE_LOOPS(rte, LINE_MSG)
#endif

/* The floor: one line, A writes odd values, B answers with the next even
 * one.  Each side counts the values itself (floor_v): reading the line at
 * the start of a window would race with the other side's first store. */
static long floor_ping(struct side *s, long n, uint64_t *t)
{
	uint64_t v = s->floor_v;
	long i;

	for (i = 0; i < n; i++, v += 2) {
		uint64_t t0 = perf_ticks();
		atomic_store_explicit(s->floor, v + 1, memory_order_release);
		while (atomic_load_explicit(s->floor, memory_order_acquire) !=
		       v + 2)
			;
		t[i] = perf_ticks() - t0;
	}
	s->floor_v = v;
	return 0;
}

static long floor_pong(struct side *s, long n)
{
	uint64_t v = s->floor_v;
	long i;

	for (i = 0; i < n; i++, v += 2) {
		while (atomic_load_explicit(s->floor, memory_order_acquire) !=
		       v + 1)
			;
		atomic_store_explicit(s->floor, v + 2, memory_order_release);
	}
	s->floor_v = v;
	return 0;
}

static long run_ping(int impl, struct side *s, long n, uint64_t *t)
{
	switch (impl) {
	case FLOOR:
		return floor_ping(s, n, t);
	case CGR:
		return cgrring_ping(s, n, t);
#ifdef HAVE_CK
	case CK:
		return ck_ping(s, n, t);
#endif
#ifdef HAVE_DPDK
	case RTE:
		return rte_ping(s, n, t);
#endif
	}
	return 0;
}

static long run_pong(int impl, struct side *s, long n)
{
	switch (impl) {
	case FLOOR:
		return floor_pong(s, n);
	case CGR:
		return cgrring_pong(s, n);
#ifdef HAVE_CK
	case CK:
		return ck_pong(s, n);
#endif
#ifdef HAVE_DPDK
	case RTE:
		return rte_pong(s, n);
#endif
	}
	return 0;
}

static long run_put(int impl, struct side *s, long n, unsigned b)
{
	switch (impl) {
	case CGR:
		return cgrring_put(s, n, b);
#ifdef HAVE_CK
	case CK:
		return ck_put(s, n, b);
#endif
#ifdef HAVE_DPDK
	case RTE:
		return rte_put(s, n, b);
#endif
	}
	return 0;
}

static long run_get(int impl, struct side *s, long n, unsigned b)
{
	switch (impl) {
	case CGR:
		return cgrring_get(s, n, b);
#ifdef HAVE_CK
	case CK:
		return ck_get(s, n, b);
#endif
#ifdef HAVE_DPDK
	case RTE:
		return rte_get(s, n, b);
#endif
	}
	return 0;
}

/* ---- the schedule both sides walk in step ---- */

struct plan {
	int windows;
	long iters;  /* round trips per window */
	long warm;   /* untimed round trips before each window */
	long tput_n; /* messages per throughput window */
};

struct results {
	double rtt[NIMPL][64];	    /* per-window median round trip, ns */
	double rtt_p99[NIMPL][64];  /* per-window p99, ns */
	double rtt_mean[NIMPL][64]; /* per-window mean, ns */
	double tput[NIMPL][2][64];  /* msgs/s, [single, burst] */
	long bad;
};

static struct plan plan;
static double tick_ns;

static int impl_at(int w, int k)
{
	int order[NIMPL], n = 0, i;

	for (i = 0; i < NIMPL; i++)
		if (have[i])
			order[n++] = i;
	return k < n ? order[(k + w) % n] : -1;
}

/* Side A (res != NULL) measures; side B echoes and consumes. */
static void walk(struct side *s, struct results *res)
{
	uint64_t *t = NULL;
	double *ns = NULL;
	int w, k, m;

	if (res != NULL) {
		t = malloc(sizeof(*t) * (size_t)(plan.iters + plan.warm));
		ns = malloc(sizeof(*ns) * (size_t)plan.iters);
		if (t == NULL || ns == NULL)
			abort();
	}
	for (w = 0; w < plan.windows; w++) {
		for (k = 0; k < NIMPL; k++) {
			int impl = impl_at(w, k);
			long n = plan.iters + plan.warm, i;

			if (impl < 0)
				break;
			perf_barrier_wait(s->bar, 2);
			if (res == NULL) {
				run_pong(impl, s, n);
				continue;
			}
			res->bad += run_ping(impl, s, n, t);
			res->rtt_mean[impl][w] = 0;
			for (i = 0; i < plan.iters; i++) {
				ns[i] = (double)t[plan.warm + i] * tick_ns;
				res->rtt_mean[impl][w] += ns[i];
			}
			res->rtt_mean[impl][w] /= (double)plan.iters;
			res->rtt[impl][w] = perf_median(ns, (size_t)plan.iters);
			res->rtt_p99[impl][w] =
			    perf_quantile(ns, (size_t)plan.iters, 0.99);
		}
	}
	for (w = 0; w < plan.windows; w++) {
		for (k = 0; k < NIMPL; k++) {
			int impl = impl_at(w, k);

			if (impl < 0)
				break;
			if (impl == FLOOR)
				continue;
			for (m = 0; m < 2; m++) {
				unsigned b = m ? BURST : 1;
				uint64_t t0;

				perf_barrier_wait(s->bar, 2);
				if (res == NULL) {
					/* errors are A's to count: report
					 * through the exit status instead */
					if (run_get(impl, s, plan.tput_n, b))
						_exit(3);
					perf_barrier_wait(s->bar, 2);
					continue;
				}
				t0 = perf_ticks();
				run_put(impl, s, plan.tput_n, b);
				perf_barrier_wait(s->bar, 2);
				res->tput[impl][m][w] =
				    (double)plan.tput_n /
				    ((double)(perf_ticks() - t0) * tick_ns *
				     1e-9);
			}
		}
	}
	free(t);
	free(ns);
}

struct thread_arg {
	unsigned char *base;
	int pinned;
	int ret;
};

static void *side_b_thread(void *arg)
{
	struct thread_arg *a = arg;
	struct side s;

	if (a->pinned)
		perf_pin(1);
	a->ret = side_attach(&s, a->base, 1);
	if (a->ret == 0)
		walk(&s, NULL);
	return NULL;
}

/* Runs one case; 0 or -1. */
static int run_case(const char *name, int processes, int pinned,
		    struct results *res)
{
	struct cgr__shm seg;
	struct side a;
	int ret;

	memset(res, 0, sizeof(*res));
	ret = cgr__shm_create("ring_pingpong", lay.size, &seg);
	if (ret) {
		fprintf(stderr, "%s: shm: %s\n", name, cgr_strerror(ret));
		return -1;
	}
	ret = arena_init(seg.addr);
	if (ret) {
		fprintf(stderr, "%s: init: %s\n", name, cgr_strerror(ret));
		cgr__shm_close(&seg);
		return -1;
	}
	if (processes) {
		int status = 0;
		pid_t pid = fork();

		if (pid == 0) {
			struct cgr__shm mine;
			struct side s;

			if (pinned)
				perf_pin(1);
			/* Our own mapping, at another address. */
			if (cgr__shm_map(seg.fd, 0, &mine) != 0 ||
			    mine.addr == seg.addr)
				_exit(2);
			cgr__shm_close(&seg);
			if (side_attach(&s, mine.addr, 1) != 0)
				_exit(2);
			walk(&s, NULL);
			_exit(0);
		}
		if (pid < 0) {
			cgr__shm_close(&seg);
			return -1;
		}
		ret = side_attach(&a, seg.addr, 0);
		if (ret == 0)
			walk(&a, res);
		waitpid(pid, &status, 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "%s: child failed (status %d)\n", name,
				status);
			ret = -1;
		}
	} else {
		struct thread_arg ta = {seg.addr, pinned, 0};
		pthread_t th;

		pthread_create(&th, NULL, side_b_thread, &ta);
		ret = side_attach(&a, seg.addr, 0);
		if (ret == 0)
			walk(&a, res);
		pthread_join(th, NULL);
		if (ta.ret)
			ret = ta.ret;
	}
	cgr__shm_close(&seg);
	if (res->bad) {
		fprintf(stderr, "%s: %ld wrong messages\n", name, res->bad);
		ret = -1;
	}
	return ret ? -1 : 0;
}

/* Median over the windows of one row of a results table. */
static double over_windows(const double *row)
{
	double v[64];

	memcpy(v, row, sizeof(double) * (size_t)plan.windows);
	return perf_median(v, (size_t)plan.windows);
}

/* Median over the windows of a's window median over b's: both ran in the
 * same window, so a machine that drifts between windows cancels out. */
static double ratio_windows(const double *a, const double *b)
{
	double v[64];
	int w;

	for (w = 0; w < plan.windows; w++)
		v[w] = b[w] > 0 ? a[w] / b[w] : 0;
	return perf_median(v, (size_t)plan.windows);
}

static unsigned msg_bytes(int impl)
{
	return impl == CGR ? CGR_MSG : impl == FLOOR ? 8 : LINE_MSG;
}

static void report(const char *name, const struct results *res, int json)
{
	char wins[64 * 16], vs[128];
	int impl, m, o;

	if (!json) {
		printf("\n%s: round trip (ns); per window the median of %ld, "
		       "then the median over %d windows; ratios are medians "
		       "of per-window ratios\n",
		       name, plan.iters, plan.windows);
		printf("  %-6s %8s %8s %8s %8s  %s\n", "impl", "p50", "mean",
		       "p99", "x floor", "window medians");
		for (impl = 0; impl < NIMPL; impl++) {
			if (!have[impl])
				continue;
			printf("  %-6s %8.1f %8.1f %8.1f %8.2f  %s\n",
			       impl_name[impl], over_windows(res->rtt[impl]),
			       over_windows(res->rtt_mean[impl]),
			       over_windows(res->rtt_p99[impl]),
			       ratio_windows(res->rtt[impl], res->rtt[FLOOR]),
			       perf_json_array(wins, sizeof(wins),
					       res->rtt[impl],
					       (size_t)plan.windows, 0));
		}
		for (o = CK; o < NIMPL; o++)
			if (have[o])
				printf(
				    "  cgr / %s round trip: %.2f\n",
				    impl_name[o],
				    ratio_windows(res->rtt[CGR], res->rtt[o]));
		printf("%s: one-way throughput (Mmsg/s), median of %d "
		       "windows of %ld messages\n  %-6s %8s %8s\n",
		       name, plan.windows, plan.tput_n, "impl", "single",
		       "burst32");
		for (impl = 0; impl < NIMPL; impl++) {
			if (!have[impl] || impl == FLOOR)
				continue;
			printf("  %-6s %8.2f %8.2f%s\n", impl_name[impl],
			       over_windows(res->tput[impl][0]) / 1e6,
			       over_windows(res->tput[impl][1]) / 1e6,
			       impl == CK ? "  (ck: burst = loop of singles)"
					  : "");
		}
	}
	for (impl = 0; impl < NIMPL; impl++) {
		size_t off = 0;

		if (!have[impl])
			continue;
		vs[0] = 0;
		for (o = CK; impl == CGR && o < NIMPL; o++)
			if (have[o])
				off += (size_t)snprintf(
				    vs + off, sizeof(vs) - off,
				    ",\"ratio_to_%s\":%.3f", impl_name[o],
				    ratio_windows(res->rtt[CGR], res->rtt[o]));
		perf_json(BENCH, name, impl_name[impl], "rtt_p50",
			  over_windows(res->rtt[impl]), "ns",
			  "\"ratio_to_floor\":%.3f%s,\"rtt_mean\":%.1f,"
			  "\"rtt_p99\":%.1f,\"msg_bytes\":%u,\"windows\":%s",
			  ratio_windows(res->rtt[impl], res->rtt[FLOOR]), vs,
			  over_windows(res->rtt_mean[impl]),
			  over_windows(res->rtt_p99[impl]), msg_bytes(impl),
			  perf_json_array(wins, sizeof(wins), res->rtt[impl],
					  (size_t)plan.windows, 1));
	}
	for (impl = 0; impl < NIMPL; impl++) {
		if (!have[impl] || impl == FLOOR)
			continue;
		for (m = 0; m < 2; m++)
			perf_json(BENCH, name, impl_name[impl],
				  m ? "tput_burst32" : "tput_single",
				  over_windows(res->tput[impl][m]), "msgs/s",
				  "\"msg_bytes\":%u,\"windows\":%s%s",
				  msg_bytes(impl),
				  perf_json_array(wins, sizeof(wins),
						  res->tput[impl][m],
						  (size_t)plan.windows, 0),
				  m && impl == CK ? ",\"note\":\"loop of "
						    "single enqueues\""
						  : "");
	}
}

int main(int argc, char **argv)
{
	struct perf_opts o = {.windows = 10, .iters = 100000};
	static struct results res;
	int pinned, ret = 0;

	if (perf_parse(argc, argv, &o,
		       "round trip and throughput of one-line messages: "
		       "floor, cgr, ck_ring, rte_ring"))
		return 2;
	if (o.windows > 64)
		o.windows = 64;
	plan.windows = o.windows;
	plan.iters = o.iters;
	plan.warm = o.iters / 10 + 100;
	plan.tput_n = o.iters * 10;
	layout_make();
	pinned = perf_have_cpus(0, 1);
	if (pinned)
		perf_pin(0);
	tick_ns = perf_tick_ns();
	if (!o.json)
		printf("ring_pingpong: sides on CPU 0 and 1 (%s), %u-slot "
		       "rings, ck %s, rte %s\n",
		       pinned ? "pinned" : "NOT pinned: fewer than 2 CPUs",
		       COUNT,
#ifdef HAVE_CK
		       "yes",
#else
		       "not built",
#endif
#ifdef HAVE_DPDK
		       "yes (rte_ring_init, no EAL)"
#else
		       "not built"
#endif
		);
	if (run_case("threads", 0, pinned, &res) == 0)
		report("threads", &res, o.json);
	else
		ret = 1;
	if (run_case("processes", 1, pinned, &res) == 0)
		report("processes", &res, o.json);
	else
		ret = 1;
	return ret;
}
