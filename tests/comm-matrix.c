/*
 * tests/comm-matrix.c: correctness matrix of the CPU communicator: every
 * collective x every dtype x every reduction op (where it applies) x
 * counts {0, 1, 7, 2^10-1, 2^10, 2^10+1, ~1e5} x in place and out of place
 * (where NCCL defines in place) x every root x 1..4 ranks, plus grouped
 * send/recv (ring shift, and all pairs including self), each both inline
 * (s == NULL) and stream ordered (one sim stream per rank, future wait).
 *
 * Results are checked bit for bit: data are small integers, so sums of
 * four ranks, products of four values in [-3, 3] and averages stay exact
 * or round the same way in every dtype (float16 and bfloat16 included);
 * the expected values are computed here independently (float16/bfloat16
 * rounding through nearbyint, not through the library's conversions).
 *
 * Ranks are threads that walk the same list of cases in the same order,
 * so one set of threads runs a whole (ranks, mode) world.
 *
 * Built with CGR_FAKE_NCCL (tests/comm-matrix-nccl-fake), the same matrix
 * runs over the NCCL backend against the models of libnccl and libcudart
 * (tests/fake_nccl.c, tests/fake_cudart.c): rank r on (model) CUDA device
 * r, streams CUDA streams; NCCL reduces no int16 or uint16 (those cases
 * must fail with -EINVAL on every rank).  It checks the backend's logic,
 * not NCCL.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "tap.h"
#include "comm/comm.h"
#include "comm/reduce.h"

enum { C_ALLREDUCE, C_REDUCESCATTER, C_REDUCE, C_ALLGATHER, C_BROADCAST,
       C_GATHER, C_SCATTER, C_ALLTOALL, C_SENDRECV, C_NCOLL };

static const char *const coll_names[C_NCOLL] = {
	"allreduce", "reducescatter", "reduce",	  "allgather", "broadcast",
	"gather",    "scatter",	      "alltoall", "send/recv",
};

static size_t counts[] = { 0, 1, 7, 1023, 1024, 1025, 100003 };
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))
static size_t big_count; /* counts[NCOUNTS - 1] after t_scale */

static uint64_t seed;
static cgr_ctx *ctx;
#ifdef CGR_FAKE_NCCL
#define BACKEND CGR_BACKEND_NCCL
#else
#define BACKEND CGR_BACKEND_CPU
#endif

/* Whether NCCL cannot do this case (it reduces no 16-bit integers). */
static bool unsupported(int coll, cgr_dtype dt);

/* ---- values -------------------------------------------------------- */

static bool is_unsigned(cgr_dtype dt)
{
	return dt == CGR_UINT8 || dt == CGR_UINT16 || dt == CGR_UINT32 ||
	       dt == CGR_UINT64;
}

/* Random bytes from the seed: element i of rank r in case cs is derived
 * from noise[(i + offset(cs, r)) % NOISE], one load per element.  The
 * period is far from every block offset the matrix uses. */
#define NOISE (1u << 16)
static uint8_t noise[NOISE];

static void noise_init(void)
{
	for (unsigned i = 0; i < NOISE; i++)
		noise[i] = (uint8_t)(t_rand() >> 24);
}

/* Element i of rank r's input in case cs: small integers. */
static inline int64_t gen(uint64_t cs, int r, size_t i, cgr_dtype dt, int op)
{
	unsigned h = noise[(i + cs * 7919u + (unsigned)r * 40503u) &
			   (NOISE - 1)];

	/* Products: no zeros (float products would give -0, integers +0). */
	if (op == CGR_PROD) {
		int64_t v = 1 + (int64_t)(h % 3);
		return is_unsigned(dt) || (h & 0x80) ? v : -v;
	}
	return is_unsigned(dt) ? (int64_t)(h % 16) : (int64_t)(h % 16) - 8;
}

/* Round-to-nearest-even of f to `bits` significant bits, independently of
 * the library: scale so the kept bits are the integer part, nearbyint. */
static float round_bits(float f, int bits)
{
	int e;

	if (f == 0 || !isfinite(f))
		return f;
	e = ilogbf(f);
	return ldexpf(nearbyintf(ldexpf(f, bits - 1 - e)), e - (bits - 1));
}

static uint16_t ref_half(float f)
{
	float r = round_bits(f, 11);
	uint32_t u;
	int e;

	if (r == 0)
		return (uint16_t)(signbit(r) ? 0x8000 : 0);
	memcpy(&u, &r, 4);
	e = (int)((u >> 23) & 0xff) - 127 + 15; /* normal values only */
	return (uint16_t)(((u >> 16) & 0x8000) | ((uint32_t)e << 10) |
			  ((u >> 13) & 0x3ff));
}

static uint16_t ref_bf16(float f)
{
	float r = round_bits(f, 8);
	uint32_t u;

	memcpy(&u, &r, 4);
	return (uint16_t)(u >> 16);
}

/* ref_half / ref_bf16 of v / div (div 0: v) for the small values the
 * matrix uses, computed once. */
#define TBL_V 512
static uint16_t tbl_half[5][2 * TBL_V + 1], tbl_bf16[5][2 * TBL_V + 1];

static void tables_init(void)
{
	for (int d = 0; d <= 4; d++)
		for (int v = -TBL_V; v <= TBL_V; v++) {
			float f = d ? (float)v / (float)d : (float)v;
			tbl_half[d][v + TBL_V] = ref_half(f);
			tbl_bf16[d][v + TBL_V] = ref_bf16(f);
		}
}

/* Stores integer v (or, with avg, sum / div rounded the dtype's way) as
 * element i of buf. */
static void store(void *buf, size_t i, cgr_dtype dt, int64_t v, int avg_div)
{
	if ((dt == CGR_FLOAT16 || dt == CGR_BFLOAT16) && avg_div <= 4 &&
	    v >= -TBL_V && v <= TBL_V) {
		((uint16_t *)buf)[i] = (dt == CGR_FLOAT16 ?
						tbl_half :
						tbl_bf16)[avg_div][v + TBL_V];
		return;
	}
	switch (dt) {
	case CGR_INT8:
		((int8_t *)buf)[i] = (int8_t)(avg_div ? v / avg_div : v);
		break;
	case CGR_UINT8:
		((uint8_t *)buf)[i] = (uint8_t)(avg_div ? v / avg_div : v);
		break;
	case CGR_INT16:
		((int16_t *)buf)[i] = (int16_t)(avg_div ? v / avg_div : v);
		break;
	case CGR_UINT16:
		((uint16_t *)buf)[i] = (uint16_t)(avg_div ? v / avg_div : v);
		break;
	case CGR_INT32:
		((int32_t *)buf)[i] = (int32_t)(avg_div ? v / avg_div : v);
		break;
	case CGR_UINT32:
		((uint32_t *)buf)[i] = (uint32_t)(avg_div ? v / avg_div : v);
		break;
	case CGR_INT64:
		((int64_t *)buf)[i] = avg_div ? v / avg_div : v;
		break;
	case CGR_UINT64:
		((uint64_t *)buf)[i] = (uint64_t)(avg_div ? v / avg_div : v);
		break;
	case CGR_FLOAT16:
		((uint16_t *)buf)[i] = ref_half(
			avg_div ? (float)v / (float)avg_div : (float)v);
		break;
	case CGR_BFLOAT16:
		((uint16_t *)buf)[i] = ref_bf16(
			avg_div ? (float)v / (float)avg_div : (float)v);
		break;
	case CGR_FLOAT32:
		((float *)buf)[i] =
			avg_div ? (float)v / (float)avg_div : (float)v;
		break;
	case CGR_FLOAT64:
		((double *)buf)[i] =
			avg_div ? (double)v / (double)avg_div : (double)v;
		break;
	default:
		break;
	}
}

/* store() for n values at once: one dtype switch, tight loops. */
static void store_all(void *buf, cgr_dtype dt, const int64_t *v, size_t n,
		      int avg_div)
{
#define STORE_LOOP(T)                                                       \
	do {                                                                \
		T *o = buf;                                                 \
		if (avg_div)                                                \
			for (size_t i = 0; i < n; i++)                      \
				o[i] = (T)(v[i] / avg_div);                 \
		else                                                        \
			for (size_t i = 0; i < n; i++)                      \
				o[i] = (T)v[i];                             \
	} while (0)
	switch (dt) {
	case CGR_INT8: STORE_LOOP(int8_t); break;
	case CGR_UINT8: STORE_LOOP(uint8_t); break;
	case CGR_INT16: STORE_LOOP(int16_t); break;
	case CGR_UINT16: STORE_LOOP(uint16_t); break;
	case CGR_INT32: STORE_LOOP(int32_t); break;
	case CGR_UINT32: STORE_LOOP(uint32_t); break;
	case CGR_INT64: STORE_LOOP(int64_t); break;
	case CGR_UINT64: STORE_LOOP(uint64_t); break;
	default:
		for (size_t i = 0; i < n; i++)
			store(buf, i, dt, v[i], avg_div);
		break;
	}
#undef STORE_LOOP
}

static int64_t fold(int op, int64_t a, int64_t b)
{
	switch (op) {
	case CGR_PROD:
		return a * b;
	case CGR_MIN:
		return a < b ? a : b;
	case CGR_MAX:
		return a > b ? a : b;
	default:
		return a + b;
	}
}

/* ---- the world: ranks as threads walking the same cases ------------- */

struct world {
	int n;
	bool streams;
	cgr_comm *comm;
	cgr_stream *s[4];
	/* results, per collective */
	_Atomic long cases[C_NCOLL], bad[C_NCOLL];
	char first[C_NCOLL][256];
	_Atomic int first_set[C_NCOLL];
};

struct rank_arg {
	struct world *w;
	int r;
	unsigned char *send, *recv, *exp;
	int64_t *iv; /* scratch: values before conversion */
	size_t cap;
};

static void report(struct world *w, int coll, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void report(struct world *w, int coll, const char *fmt, ...)
{
	va_list ap;

	atomic_fetch_add(&w->bad[coll], 1);
	if (atomic_exchange(&w->first_set[coll], 1))
		return;
	va_start(ap, fmt);
	vsnprintf(w->first[coll], sizeof(w->first[coll]), fmt, ap);
	va_end(ap);
}

/* Runs the operation (inline or on the rank's stream) and waits. */
static int finish(struct world *w, int r, int ret, cgr_future *f)
{
	if (!w->streams || ret != 0)
		return ret;
	ret = cgr_future_wait(f, 30000000000);
	cgr_future_release(f);
	return ret;
}

static bool has_inplace(int coll)
{
	return coll != C_ALLTOALL && coll != C_SENDRECV;
}

static bool rooted(int coll)
{
	return coll == C_REDUCE || coll == C_BROADCAST || coll == C_GATHER ||
	       coll == C_SCATTER;
}

static bool reduction(int coll)
{
	return coll == C_ALLREDUCE || coll == C_REDUCESCATTER ||
	       coll == C_REDUCE;
}

static bool unsupported(int coll, cgr_dtype dt)
{
	return BACKEND == CGR_BACKEND_NCCL && reduction(coll) &&
	       (dt == CGR_INT16 || dt == CGR_UINT16);
}

/* One case on rank a->r.  Returns false on a failure (reported). */
static void run_case(struct rank_arg *a, int coll, cgr_dtype dt, int op,
		     size_t cnt, int inplace, int root, uint64_t cs)
{
	struct world *w = a->w;
	int n = w->n, r = a->r, ret;
	size_t es = cgr_dtype_size(dt), b = cnt * es;
	cgr_stream *s = w->streams ? w->s[r] : NULL;
	cgr_future *f = NULL, **fp = w->streams ? &f : NULL;
	cgr_comm *c = w->comm;
	unsigned char *snd = a->send, *rcv = a->recv, *xp = a->exp;
	int64_t *iv = a->iv;
	size_t nexp = 0; /* bytes of recv to check */
	int avg = op == CGR_AVG ? n : 0;
	size_t in_elems = cnt;
	const void *sb;
	void *rb;

	if (coll == C_REDUCESCATTER || coll == C_ALLTOALL ||
	    (coll == C_SCATTER && r == root))
		in_elems = cnt * (size_t)n;
	if (coll == C_SENDRECV)
		in_elems = cnt * (size_t)n;
	/* Inputs: this rank's values.  In place, they live where the
	 * operation expects them inside recv. */
	memset(rcv, 0xa5, (size_t)(n + 2) * b + 64);
	for (size_t i = 0; i < in_elems; i++)
		iv[i] = gen(cs, r, i, dt, op);
	store_all(snd, dt, iv, in_elems, 0);
	sb = snd;
	rb = rcv;
	if (inplace) {
		switch (coll) {
		case C_ALLREDUCE:
		case C_REDUCE:
		case C_BROADCAST:
			memcpy(rcv, snd, b);
			sb = rcv;
			break;
		case C_ALLGATHER:
			memcpy(rcv + (size_t)r * b, snd, b);
			sb = rcv + (size_t)r * b;
			break;
		case C_GATHER:
			if (r == root) {
				memcpy(rcv + (size_t)r * b, snd, b);
				sb = rcv + (size_t)r * b;
			}
			break;
		case C_REDUCESCATTER:
			rb = snd + (size_t)r * b;
			break;
		case C_SCATTER:
			if (r == root)
				rb = snd + (size_t)r * b;
			break;
		default:
			break;
		}
	}
	switch (coll) {
	case C_ALLREDUCE:
		ret = cgr_allreduce(c, r, sb, rb, cnt, dt, op, s, fp);
		break;
	case C_REDUCESCATTER:
		ret = cgr_reducescatter(c, r, sb, rb, cnt, dt, op, s, fp);
		break;
	case C_REDUCE:
		ret = cgr_reduce(c, r, sb, r == root || inplace ? rb : NULL,
				 cnt, dt, op, root, s, fp);
		break;
	case C_ALLGATHER:
		ret = cgr_allgather(c, r, sb, rb, cnt, dt, s, fp);
		break;
	case C_BROADCAST:
		ret = cgr_broadcast(c, r, r == root ? sb : NULL, rb, cnt, dt,
				    root, s, fp);
		break;
	case C_GATHER:
		ret = cgr_gather(c, r, sb, r == root ? rb : NULL, cnt, dt,
				 root, s, fp);
		break;
	case C_SCATTER:
		ret = cgr_scatter(c, r, r == root ? sb : NULL, rb, cnt, dt,
				  root, s, fp);
		break;
	case C_ALLTOALL:
		ret = cgr_alltoall(c, r, sb, rb, cnt, dt, s, fp);
		break;
	case C_SENDRECV:
		/* Group 1: ring shift.  Group 2: block j to rank j, from
		 * every rank (self included), receives in reverse order. */
		cgr_group_start(c, r);
		cgr_send(c, r, snd, cnt, dt, (r + 1) % n, s, NULL);
		cgr_recv(c, r, rcv, cnt, dt, (r + n - 1) % n, s, NULL);
		ret = cgr_group_end(c, r, fp);
		ret = finish(w, r, ret, f);
		if (ret != 0)
			break;
		cgr_group_start(c, r);
		for (int j = n - 1; j >= 0; j--)
			cgr_recv(c, r, rcv + (size_t)(j + 1) * b, cnt, dt, j,
				 s, NULL);
		for (int j = 0; j < n; j++)
			cgr_send(c, r, snd + (size_t)j * b, cnt, dt, j, s,
				 NULL);
		ret = cgr_group_end(c, r, fp);
		break;
	default:
		ret = -EINVAL;
	}
	ret = finish(w, r, ret, f);
	if (unsupported(coll, dt)) {
		if (ret != -EINVAL)
			report(w, coll, "%s of %s: %s, not -EINVAL",
			       coll_names[coll], cgr__dtype_name(dt),
			       cgr_err_name(ret));
		return;
	}
	if (ret != 0) {
		report(w, coll,
		       "%s n=%d rank %d %s %s count %zu %s root %d: %s (%s)",
		       coll_names[coll], n, r, cgr__dtype_name(dt),
		       cgr__redop_name(op), cnt, inplace ? "in place" : "",
		       root, cgr_err_name(ret), cgr_comm_errmsg(c, r));
		return;
	}
	/* Expected output of this rank. */
	switch (coll) {
	case C_ALLREDUCE:
	case C_REDUCE:
	case C_REDUCESCATTER: {
		size_t base = coll == C_REDUCESCATTER ? (size_t)r * cnt : 0;
		if (coll == C_REDUCE && r != root)
			break;
		for (size_t i = 0; i < cnt; i++) {
			int64_t v = gen(cs, 0, base + i, dt, op);
			for (int j = 1; j < n; j++)
				v = fold(op == CGR_AVG ? CGR_SUM : op, v,
					 gen(cs, j, base + i, dt, op));
			iv[i] = v;
		}
		store_all(xp, dt, iv, cnt, avg);
		nexp = b;
		break;
	}
	case C_ALLGATHER:
	case C_GATHER:
		if (coll == C_GATHER && r != root)
			break;
		for (int j = 0; j < n; j++)
			for (size_t i = 0; i < cnt; i++)
				iv[(size_t)j * cnt + i] = gen(cs, j, i, dt, op);
		store_all(xp, dt, iv, (size_t)n * cnt, 0);
		nexp = (size_t)n * b;
		break;
	case C_BROADCAST:
		for (size_t i = 0; i < cnt; i++)
			iv[i] = gen(cs, root, i, dt, op);
		store_all(xp, dt, iv, cnt, 0);
		nexp = b;
		break;
	case C_SCATTER:
		for (size_t i = 0; i < cnt; i++)
			iv[i] = gen(cs, root, (size_t)r * cnt + i, dt, op);
		store_all(xp, dt, iv, cnt, 0);
		nexp = b;
		break;
	case C_ALLTOALL:
		for (int j = 0; j < n; j++)
			for (size_t i = 0; i < cnt; i++)
				iv[(size_t)j * cnt + i] =
					gen(cs, j, (size_t)r * cnt + i, dt, op);
		store_all(xp, dt, iv, (size_t)n * cnt, 0);
		nexp = (size_t)n * b;
		break;
	case C_SENDRECV:
		/* rcv[0..b): the ring shift; then block j+1 from rank j. */
		for (size_t i = 0; i < cnt; i++)
			iv[i] = gen(cs, (r + n - 1) % n, i, dt, op);
		for (int j = 0; j < n; j++)
			for (size_t i = 0; i < cnt; i++)
				iv[(size_t)(j + 1) * cnt + i] =
					gen(cs, j, (size_t)r * cnt + i, dt, op);
		store_all(xp, dt, iv, (size_t)(n + 1) * cnt, 0);
		nexp = (size_t)(n + 1) * b;
		break;
	default:
		break;
	}
	if (nexp != 0 && memcmp(rb, xp, nexp) != 0) {
		size_t i = 0;
		while (((unsigned char *)rb)[i] == xp[i])
			i++;
		report(w, coll,
		       "%s n=%d rank %d %s %s count %zu %s root %d: wrong "
		       "result at byte %zu",
		       coll_names[coll], n, r, cgr__dtype_name(dt),
		       cgr__redop_name(op), cnt, inplace ? "in place" : "",
		       root, i);
	}
	if (coll == C_SENDRECV && memcmp(rb, xp, nexp) == 0 &&
	    rcv[nexp] != 0xa5)
		report(w, coll, "send/recv wrote past its buffer");
}

static void *rank_main(void *arg)
{
	struct rank_arg *a = arg;
	struct world *w = a->w;
	uint64_t cs = 0;

	for (int coll = 0; coll < C_NCOLL; coll++)
		for (int dt = 0; dt < CGR_DTYPE_COUNT; dt++)
			for (int op = 0; op < (reduction(coll) ? CGR_REDOP_COUNT : 1);
			     op++)
				for (size_t ci = 0; ci < NCOUNTS; ci++)
					for (int ip = 0;
					     ip < (has_inplace(coll) ? 2 : 1);
					     ip++)
						for (int root = 0;
						     root < (rooted(coll) ? w->n : 1);
						     root++) {
							size_t cnt =
								ci == NCOUNTS - 1 ?
									big_count :
									counts[ci];
							cs++;
							run_case(a, coll, dt, op, cnt,
								 ip, root, cs);
							if (a->r == 0)
								atomic_fetch_add(
									&w->cases[coll],
									1);
						}
	return NULL;
}

static void run_world(int n, bool streams)
{
	static struct world w;
	struct rank_arg args[4];
	pthread_t th[4];
	size_t cap = ((size_t)(n + 2) * big_count + 64) * 8;
	int64_t t0 = cgr__now_ns();

	memset(&w, 0, sizeof(w));
	w.n = n;
	w.streams = streams;
	if (cgr_comm_create(ctx, NULL, (size_t)n, BACKEND, &w.comm)) {
		t_ok(0, "comm create");
		return;
	}
	for (int r = 0; r < n; r++) {
		/* NCCL: rank r on CUDA device r. */
		if (streams)
			cgr_stream_create(ctx,
					  BACKEND == CGR_BACKEND_NCCL ?
						  r :
						  CGR_DEVICE_SIM,
					  0, &w.s[r]);
		args[r].w = &w;
		args[r].r = r;
		args[r].cap = cap;
		args[r].send = malloc(cap);
		args[r].recv = malloc(cap);
		args[r].exp = malloc(cap);
		args[r].iv = malloc(cap);
		pthread_create(&th[r], NULL, rank_main, &args[r]);
	}
	for (int r = 0; r < n; r++) {
		pthread_join(th[r], NULL);
		free(args[r].send);
		free(args[r].recv);
		free(args[r].exp);
		free(args[r].iv);
		if (streams)
			cgr_stream_destroy(w.s[r]);
	}
	for (int coll = 0; coll < C_NCOLL; coll++) {
		long bad = atomic_load(&w.bad[coll]);
		t_ok(bad == 0, "%d rank%s, %s: %s: %ld cases%s%s", n,
		     n > 1 ? "s" : "", streams ? "streams" : "inline",
		     coll_names[coll], atomic_load(&w.cases[coll]),
		     bad ? ", first failure: " : "", bad ? w.first[coll] : "");
		if (bad)
			t_diag("%ld failures", bad);
	}
	cgr_comm_destroy(w.comm);
	t_diag("%d ranks %s: %.2f s", n, streams ? "streams" : "inline",
	       (cgr__now_ns() - t0) / 1e9);
}

/* The float16/bfloat16 conversions against independent references. */
static void test_conversions(void)
{
	int bad = 0;

	for (uint32_t h = 0; h < 0x10000; h++) {
		uint16_t x = (uint16_t)h;
		float f = cgr__half_to_float(x);
		if ((x & 0x7c00) == 0x7c00 && (x & 0x3ff))
			continue; /* NaN */
		if (cgr__float_to_half(f) != x)
			bad++;
		if (cgr__float_to_bf16(cgr__bf16_to_float(x)) != x &&
		    !((x & 0x7f80) == 0x7f80 && (x & 0x7f)))
			bad++;
	}
	t_is(bad, 0, "float16 and bfloat16 round trips are exact");
	bad = 0;
	for (int i = 0; i < 200000; i++) {
		/* Normal float16 range, random bits: RNE must agree with
		 * the nearbyint reference (ties included). */
		float f = ldexpf((float)(t_rand() % 0x1000000) / 0x1000000 + 1,
				 (int)(t_rand() % 28) - 13);
		if (t_rand() & 1)
			f = -f;
		if (cgr__float_to_half(f) != ref_half(f))
			bad++;
		if (cgr__float_to_bf16(f) != ref_bf16(f))
			bad++;
	}
	t_is(bad, 0, "float -> float16/bfloat16 rounds to nearest even");
	t_is(cgr__float_to_half(65520.0f), 0x7c00, "float16 overflow: inf");
	t_is(cgr__float_to_half(ldexpf(1, -25)), 0, "tie to even: 0");
	t_is(cgr__float_to_half(ldexpf(3, -25)), 2,
	     "subnormal tie rounds to even");
	t_is(cgr__float_to_bf16(1.00390625f), 0x3f80, "bf16 tie to even");
}

int main(int argc, char **argv)
{
	int64_t t0;

	t_init(argc, argv, 600);
	seed = t_rand();
	big_count = (size_t)t_scale((long)counts[NCOUNTS - 1]);
	if (big_count < 2049)
		big_count = 2049;
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
#ifdef CGR_FAKE_NCCL
	setenv("FAKE_CUDA_NDEV", "4", 1);
	cp.cudart_path = CGR_FAKE_CUDART;
	cp.nccl_path = CGR_FAKE_NCCL;
	cp.log_fn = cgr_log_stderr;
	long (*misuse)(void) = NULL;
#endif
	if (cgr_ctx_create(&cp, &ctx) != 0) {
		printf("Bail out! no context\n");
		return 1;
	}
	test_conversions();
	tables_init();
	noise_init();
	t0 = cgr__now_ns();
	for (int n = 1; n <= 4; n++) {
		run_world(n, false);
		run_world(n, true);
	}
	t_diag("matrix: %.1f s", (cgr__now_ns() - t0) / 1e9);
#ifdef CGR_FAKE_NCCL
	void *h = dlopen(CGR_FAKE_NCCL, RTLD_NOW | RTLD_NOLOAD);
	if (h != NULL)
		*(void **)&misuse = dlsym(h, "fake_nccl_misuse");
	t_ok(misuse != NULL && misuse() == 0,
	     "the model saw nothing NCCL forbids (%ld)",
	     misuse != NULL ? misuse() : -1);
#endif
	cgr_ctx_destroy(ctx);
	return t_done();
}
