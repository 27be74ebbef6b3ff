/*
 * perf/collective_bw.c: cgr's CPU collectives (shared memory among ranks
 * of one process) over a size sweep, reported the way nccl-tests reports
 * NCCL's: time per operation, algbw = bytes / time and busbw = algbw times
 * a per-collective factor, next to the memory-bandwidth bound implied by
 * memcpy measured in the same run.
 *
 * Ranks are threads, one per rank, on a communicator made with
 * cgr_comm_create(ctx, NULL, n, CGR_BACKEND_CPU, &c); every call runs
 * inline (stream NULL).  Buffers are out of place.  "bytes" follows
 * nccl-tests: the whole buffer of one rank (allreduce, reduce, broadcast:
 * count * size; allgather, gather: the received total; reducescatter,
 * scatter, alltoall: the sent total; send/recv: what each rank sends to its
 * right neighbour while it receives from its left one).
 *
 * A sample of one (collective, size) is: barrier, then `iters` operations
 * back to back on every rank; its time is the slowest rank's loop divided
 * by iters.  iters is calibrated so that a sample takes about -t ms.  Each
 * window sweeps every collective and size, the memcpy reference first; per
 * (collective, size) it checks the result of one warm-up operation bit for
 * bit (integers in floats, so sums are exact whatever the order),
 * calibrates, then takes -k samples.  The result is the median over all
 * samples of all -w windows.
 *
 * The memcpy bound: an allreduce of S bytes over n ranks must read the n
 * inputs and write the n outputs at least once, 2nS bytes of traffic with
 * equal reads and writes; that is exactly the traffic of n concurrent
 * copies of S bytes, one per rank.  So the run times copies as pseudo
 * collectives (each rank copies its S-byte send buffer to its receive
 * buffer, same threads, same pinning, same loop): glibc's memcpy, and
 * copy_nt, a copy with streaming stores that skips the read for ownership
 * of the destination (which memcpy pays at some sizes, and a reduction that
 * streams its stores does not).  The faster of the two at each size is the
 * allreduce's lower bound, with algbw and busbw derived from it the same
 * way as for the allreduce.  At small sizes the bound is only the copy, not
 * the synchronisation every collective needs.
 *
 * The floor: the least any collective of these ranks can cost, measured
 * the same way: each rank bumps a counter in its own cache line and waits
 * until every peer's counter is as far (one cache-line transfer per peer,
 * spinning like cgr's waits: a yield every 64 polls).  It is printed once
 * per rank count (JSON case floor/<n>r), next to allreduce's time.
 *
 * perf/collective_bw.sh runs this next to Open MPI and Gloo and prints one
 * combined table.
 */
#include "perf.h"

#include <pthread.h>

#include <cgr.h>

#define BENCH "collective_bw"
#define MAX_RANKS 8

enum coll {
	C_MEMCPY, /* the references, not collectives */
	C_COPYNT,
	C_FLOOR,
	C_ALLREDUCE,
	C_ALLGATHER,
	C_REDUCESCATTER,
	C_REDUCE,
	C_BROADCAST,
	C_GATHER,
	C_SCATTER,
	C_ALLTOALL,
	C_SENDRECV,
	C_COUNT
};

static const char *const coll_name[C_COUNT] = {
    "memcpy",	 "copy_nt", "floor", "allreduce", "allgather", "reducescatter", "reduce",
    "broadcast", "gather",  "scatter",	 "alltoall",  "sendrecv",
};

/* nccl-tests' bus bandwidth factors (and their formulas, for the table). */
static double busfac(int c, int n)
{
	switch (c) {
	case C_ALLREDUCE:
		return 2.0 * (n - 1) / n;
	case C_ALLGATHER:
	case C_REDUCESCATTER:
	case C_GATHER:
	case C_SCATTER:
	case C_ALLTOALL:
		return (double)(n - 1) / n;
	default:
		return 1.0;
	}
}

static const char *busfac_formula(int c)
{
	switch (c) {
	case C_ALLREDUCE:
		return "2(n-1)/n";
	case C_ALLGATHER:
	case C_REDUCESCATTER:
	case C_GATHER:
	case C_SCATTER:
	case C_ALLTOALL:
		return "(n-1)/n";
	default:
		return "1";
	}
}

static int is_reducing(int c)
{
	return c == C_ALLREDUCE || c == C_REDUCESCATTER || c == C_REDUCE;
}

static const size_t full_sizes[] = {
    8,	      64,	 512,	  4 << 10,  32 << 10,
    64 << 10, 256 << 10, 2 << 20, 16 << 20, 64 << 20,
};
static const size_t quick_sizes[] = {
    8, 512, 64 << 10, 2 << 20, 16 << 20, 64 << 20,
};
#define MAX_BYTES ((size_t)64 << 20)

static const char *size_label(size_t b, char *buf, size_t len)
{
	if (b >= (1u << 20) && b % (1u << 20) == 0)
		snprintf(buf, len, "%zuMiB", b >> 20);
	else if (b >= 1024 && b % 1024 == 0)
		snprintf(buf, len, "%zuKiB", b >> 10);
	else
		snprintf(buf, len, "%zuB", b);
	return buf;
}

/*
 * The element count of one call for nominal size `nominal` (see the top of
 * the file for what the size means) and the bytes that count really
 * moves; reducing collectives use float32, the others uint8.  Counts are
 * at least one element, so tiny sizes over many ranks round up.
 */
static size_t coll_count(int c, size_t nominal, int n, size_t *bytes)
{
	size_t esz = is_reducing(c) ? 4 : 1, cnt;

	switch (c) {
	case C_ALLGATHER:
	case C_REDUCESCATTER:
	case C_GATHER:
	case C_SCATTER:
	case C_ALLTOALL:
		cnt = nominal / esz / (size_t)n;
		if (cnt == 0)
			cnt = 1;
		*bytes = cnt * esz * (size_t)n;
		return cnt;
	default:
		cnt = nominal / esz;
		if (cnt == 0)
			cnt = 1;
		*bytes = cnt * esz;
		return cnt;
	}
}

/* Input values: small integers, so float sums are exact in any order. */
static float fval(int r, size_t i)
{
	return (float)((r * 3 + i) % 13);
}

static unsigned char uval(int r, size_t i)
{
	return (unsigned char)(r * 37 + i * 11 + 5);
}

/* The i-th CPU this process may run on, or -1 (i counts from 0). */
static int nth_cpu(int i)
{
	cpu_set_t set;
	int c;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return -1;
	for (c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set) && i-- == 0)
			return c;
	return -1;
}

/* ---- shared state of one run ---- */

struct run {
	cgr_comm *comm;
	int n;
	int pin;
	int windows;
	int reps; /* samples per window after one calibration */
	long max_iters;
	double target_ns;
	double tick;
	const size_t *sizes;
	size_t nsizes;
	unsigned cmask; /* collectives to run, bit per enum coll */
	/* The floor's counters, one cache line per rank. */
	struct flag_line {
		_Atomic uint64_t v;
		char pad[56];
	} *flags;
	struct perf_barrier bar;
	_Atomic int failed;
	double rank_ns[MAX_RANKS]; /* this sample's loop time per rank */
	int bad[MAX_RANKS];	   /* check failures per rank */
	/* results[coll][size][window]: ns per operation */
	double *res;
	int *checked_bad; /* [coll][size]: any window's check failed */
	long *res_iters;  /* [coll][size]: iters of the last window */
};

static double *res_at(struct run *R, int c, size_t s, int w)
{
	return &R->res[((size_t)c * R->nsizes + s) * (size_t)R->windows *
			   (size_t)R->reps +
		       (size_t)w];
}

struct rank_arg {
	struct run *R;
	int rank;
	unsigned char *send, *recv;
};

/*
 * A copy with non-temporal (streaming) stores: no read for ownership of
 * the destination, so 2 bytes of traffic per byte instead of glibc
 * memcpy's 3 where it does not stream itself.  The bound takes the faster
 * of the two at each size.
 */
static void copy_nt(void *dst, const void *src, size_t n)
{
#if defined(__SSE2__)
	if (n >= 4096 && ((uintptr_t)dst & 15) == 0 &&
	    ((uintptr_t)src & 15) == 0) {
		__m128i *d = dst;
		const __m128i *s = src;
		size_t i, k = n / 64;

		for (i = 0; i < k; i++) {
			__m128i a = _mm_load_si128(s + 4 * i);
			__m128i b = _mm_load_si128(s + 4 * i + 1);
			__m128i c = _mm_load_si128(s + 4 * i + 2);
			__m128i e = _mm_load_si128(s + 4 * i + 3);

			_mm_stream_si128(d + 4 * i, a);
			_mm_stream_si128(d + 4 * i + 1, b);
			_mm_stream_si128(d + 4 * i + 2, c);
			_mm_stream_si128(d + 4 * i + 3, e);
		}
		_mm_sfence();
		memcpy((char *)dst + k * 64, (const char *)src + k * 64,
		       n - k * 64);
		return;
	}
#endif
	memcpy(dst, src, n);
}

/* The floor: a flag exchange among the ranks (see the top). */
static int flag_exchange(struct run *R, int rank)
{
	uint64_t v = atomic_load_explicit(&R->flags[rank].v,
					  memory_order_relaxed) + 1;
	int j;

	atomic_store_explicit(&R->flags[rank].v, v, memory_order_release);
	for (j = 0; j < R->n; j++) {
		unsigned i = 0;

		while (atomic_load_explicit(&R->flags[j].v,
					    memory_order_acquire) < v)
			if ((++i & 63) == 0)
				sched_yield();
			else
				perf_relax();
	}
	return 0;
}

/* One operation of collective c; 0 or the error. */
static int do_op(struct run *R, int c, int rank, const void *send, void *recv,
		 size_t cnt)
{
	cgr_comm *cm = R->comm;
	int n = R->n, rc;

	switch (c) {
	case C_MEMCPY:
		memcpy(recv, send, cnt);
		return 0;
	case C_COPYNT:
		copy_nt(recv, send, cnt);
		return 0;
	case C_FLOOR:
		return flag_exchange(R, rank);
	case C_ALLREDUCE:
		return cgr_allreduce(cm, rank, send, recv, cnt, CGR_FLOAT32,
				     CGR_SUM, NULL, NULL);
	case C_ALLGATHER:
		return cgr_allgather(cm, rank, send, recv, cnt, CGR_UINT8, NULL,
				     NULL);
	case C_REDUCESCATTER:
		return cgr_reducescatter(cm, rank, send, recv, cnt, CGR_FLOAT32,
					 CGR_SUM, NULL, NULL);
	case C_REDUCE:
		return cgr_reduce(cm, rank, send, recv, cnt, CGR_FLOAT32,
				  CGR_SUM, 0, NULL, NULL);
	case C_BROADCAST:
		return cgr_broadcast(cm, rank, send, recv, cnt, CGR_UINT8, 0,
				     NULL, NULL);
	case C_GATHER:
		return cgr_gather(cm, rank, send, recv, cnt, CGR_UINT8, 0, NULL,
				  NULL);
	case C_SCATTER:
		return cgr_scatter(cm, rank, send, recv, cnt, CGR_UINT8, 0,
				   NULL, NULL);
	case C_ALLTOALL:
		return cgr_alltoall(cm, rank, send, recv, cnt, CGR_UINT8, NULL,
				    NULL);
	case C_SENDRECV:
		rc = cgr_group_start(cm, rank);
		if (rc == 0)
			rc = cgr_send(cm, rank, send, cnt, CGR_UINT8,
				      (rank + 1) % n, NULL, NULL);
		if (rc == 0)
			rc = cgr_recv(cm, rank, recv, cnt, CGR_UINT8,
				      (rank + n - 1) % n, NULL, NULL);
		/* End the group even after a failure: never left open. */
		{
			int rc2 = cgr_group_end(cm, rank, NULL);
			if (rc == 0)
				rc = rc2;
		}
		return rc;
	}
	return -EINVAL;
}

/* Fills rank r's send buffer for collective c with cnt elements per block
 * (the whole buffer: `bytes` bytes). */
static void fill_send(int c, int r, unsigned char *send, size_t bytes)
{
	size_t i;

	if (is_reducing(c)) {
		float *f = (float *)(void *)send;
		for (i = 0; i < bytes / 4; i++)
			f[i] = fval(r, i);
	} else {
		for (i = 0; i < bytes; i++)
			send[i] = uval(r, i);
	}
}

/*
 * Checks what rank r received from the warm-up operation; returns the
 * index of the first wrong byte or element plus one, 0 if all is right.
 */
static size_t check_recv(int c, int r, int n, const unsigned char *recv,
			 size_t cnt)
{
	const float *f = (const float *)(const void *)recv;
	size_t i, j;
	int b, q;

	switch (c) {
	case C_FLOOR:
		return 0;
	case C_MEMCPY:
	case C_COPYNT:
		for (i = 0; i < cnt; i++)
			if (recv[i] != uval(r, i))
				return i + 1;
		return 0;
	case C_ALLREDUCE:
	case C_REDUCE:
		if (c == C_REDUCE && r != 0)
			return 0;
		for (i = 0; i < cnt; i++) {
			float want = 0;
			for (q = 0; q < n; q++)
				want += fval(q, i);
			if (f[i] != want)
				return i + 1;
		}
		return 0;
	case C_REDUCESCATTER:
		for (i = 0; i < cnt; i++) {
			float want = 0;
			for (q = 0; q < n; q++)
				want += fval(q, (size_t)r * cnt + i);
			if (f[i] != want)
				return i + 1;
		}
		return 0;
	case C_ALLGATHER:
	case C_GATHER:
		if (c == C_GATHER && r != 0)
			return 0;
		for (b = 0; b < n; b++)
			for (j = 0; j < cnt; j++)
				if (recv[(size_t)b * cnt + j] != uval(b, j))
					return (size_t)b * cnt + j + 1;
		return 0;
	case C_BROADCAST:
		for (i = 0; i < cnt; i++)
			if (recv[i] != uval(0, i))
				return i + 1;
		return 0;
	case C_SCATTER:
		for (j = 0; j < cnt; j++)
			if (recv[j] != uval(0, (size_t)r * cnt + j))
				return j + 1;
		return 0;
	case C_ALLTOALL:
		for (b = 0; b < n; b++)
			for (j = 0; j < cnt; j++)
				if (recv[(size_t)b * cnt + j] !=
				    uval(b, (size_t)r * cnt + j))
					return (size_t)b * cnt + j + 1;
		return 0;
	case C_SENDRECV:
		for (i = 0; i < cnt; i++)
			if (recv[i] != uval((r + n - 1) % n, i))
				return i + 1;
		return 0;
	}
	return 0;
}

static void fail(struct run *R, int c, int rank, int rc)
{
	if (atomic_exchange(&R->failed, 1) == 0) {
		fprintf(stderr, "collective_bw: %s rank %d: %s: %s\n",
			coll_name[c], rank, cgr_strerror(rc),
			cgr_comm_errmsg(R->comm, rank));
		cgr_comm_abort(R->comm);
	}
}

/* The slowest rank's loop time of this sample, in ns (after a barrier). */
static double slowest(struct run *R)
{
	double m = 0;
	int r;

	for (r = 0; r < R->n; r++)
		if (R->rank_ns[r] > m)
			m = R->rank_ns[r];
	return m;
}

/*
 * Times `iters` operations back to back on every rank and returns the
 * slowest rank's loop in ns (the same value on every rank), or -1 after a
 * failure anywhere.
 */
static double timed_loop(struct run *R, int c, int rank, struct rank_arg *A,
			 size_t cnt, long iters)
{
	uint64_t t0;
	double m;
	long it;
	int rc;

	perf_barrier_wait(&R->bar, (uint32_t)R->n);
	t0 = perf_ticks();
	for (it = 0; it < iters &&
		     !atomic_load_explicit(&R->failed, memory_order_relaxed);
	     it++) {
		rc = do_op(R, c, rank, A->send, A->recv, cnt);
		if (rc) {
			fail(R, c, rank, rc);
			break;
		}
	}
	R->rank_ns[rank] = (double)(perf_ticks() - t0) * R->tick;
	perf_barrier_wait(&R->bar, (uint32_t)R->n);
	m = atomic_load(&R->failed) ? -1 : slowest(R);
	/* Everyone has read rank_ns before the next loop overwrites it. */
	perf_barrier_wait(&R->bar, (uint32_t)R->n);
	return m;
}

/*
 * Iterations for a sample of about target_ns: after the checked warm-up,
 * batches of 1, 4, 16, ... operations until one takes an eighth of the
 * target (and at least two batches unless one operation alone takes the
 * whole target), then extrapolated from the fastest batch per operation so
 * that one preempted batch does not shrink the sample.  Every rank
 * computes the same count.
 */
static long calibrate(struct run *R, int c, int rank, struct rank_arg *A,
		      size_t cnt)
{
	double t, k, per = 0;
	long batch = 1;

	for (;;) {
		t = timed_loop(R, c, rank, A, cnt, batch);
		if (t < 0)
			return -1;
		if (per == 0 || t / (double)batch < per)
			per = t / (double)batch;
		if ((t >= R->target_ns / 8 &&
		     (batch > 1 || t >= R->target_ns)) ||
		    batch >= R->max_iters)
			break;
		batch *= 4;
	}
	k = per > 0 ? R->target_ns / per : 1e9;
	if (k < 1)
		k = 1;
	if (k > (double)R->max_iters)
		k = (double)R->max_iters;
	return (long)k;
}

static void *rank_main(void *arg)
{
	struct rank_arg *A = arg;
	struct run *R = A->R;
	int rank = A->rank, n = R->n, w, c, q, k;
	size_t s;

	if (R->pin)
		perf_pin(nth_cpu(rank));
	/* First touch on this rank's thread. */
	memset(A->send, 0, MAX_BYTES);
	memset(A->recv, 0, MAX_BYTES);

	for (w = 0; w < R->windows; w++) {
		for (c = 0; c < C_COUNT; c++) {
			if (!(R->cmask & (1u << c)))
				continue;
			for (s = 0; s < R->nsizes; s++) {
				size_t bytes, cnt, bad = 0;
				long iters;
				double t;

				cnt = coll_count(c, R->sizes[s], n, &bytes);
				/* memcpy copies uint8 values. */
				/* The floor is one number per rank count. */
				if (c == C_FLOOR && s > 0)
					continue;
				fill_send(c <= C_FLOOR ? C_BROADCAST : c, rank,
					  A->send, bytes);
				memset(A->recv, 0xa5, bytes);

				/* The warm-up operation, checked. */
				if (timed_loop(R, c, rank, A, cnt, 1) < 0)
					goto out;
				bad = check_recv(c, rank, n, A->recv, cnt);
				R->bad[rank] = bad != 0;
				if (bad)
					fprintf(stderr,
						"collective_bw: %s/%dr/%zuB "
						"rank %d: wrong result at "
						"%zu\n",
						coll_name[c], n, bytes, rank,
						bad - 1);
				iters = calibrate(R, c, rank, A, cnt);
				if (iters < 0)
					goto out;
				for (k = 0; k < R->reps; k++) {
					t = timed_loop(R, c, rank, A, cnt,
						       iters);
					if (t < 0)
						goto out;
					if (rank == 0)
						*res_at(R, c, s,
							w * R->reps + k) =
						    t / (double)iters;
				}
				if (rank == 0) {
					R->res_iters[c * R->nsizes + s] = iters;
					/* bad[] was written before the
					 * barriers of calibrate. */
					for (q = 0; q < n; q++)
						if (R->bad[q])
							R->checked_bad
							    [c * R->nsizes +
							     s] = 1;
				}
			}
		}
	}
out:
	return NULL;
}

/* Median over every sample of collective c at size index s, ns per
 * operation. */
static double median_at(struct run *R, int c, size_t s)
{
	double tmp[64 * 4];
	int i;

	for (i = 0; i < R->windows * R->reps; i++)
		tmp[i] = *res_at(R, c, s, i);
	return perf_median(tmp, (size_t)i);
}

static void report(struct run *R, const struct perf_opts *o)
{
	int n = R->n, c, pass, have_mc = (R->cmask & (1u << C_MEMCPY)) != 0;
	int have_fl = (R->cmask & (1u << C_FLOOR)) != 0;
	const char *how = "";
	char lab[32], cs[96], fl_case[32];
	size_t s;

	snprintf(fl_case, sizeof(fl_case), "floor/%dr", n);

	if (!o->json) {
		printf("\n%d ranks (threads%s), median of %d window(s) x %d "
		       "sample(s); algbw = bytes/time, busbw = algbw * factor "
		       "(nccl-tests)\n",
		       n, R->pin ? ", pinned" : ", unpinned", R->windows,
		       R->reps);
		printf("%-14s %-8s %7s %10s %9s %12s %9s %9s %-6s %s\n",
		       "collective", "factor", "size", "bytes", "iters",
		       "time_us", "algbw", "busbw", "check",
		       "bound_us (allreduce: n concurrent copies)");
		if (have_fl)
			printf("%-14s %-8s %7s %10s %9ld %12.3f   (flag "
			       "exchange: one cache line per rank, the least "
			       "any collective costs)\n",
			       "floor", "-", "-", "-", R->res_iters[C_FLOOR *
								   R->nsizes],
			       median_at(R, C_FLOOR, 0) / 1e3);
	}
	/* The table first, then the JSON lines. */
	for (pass = 0; pass < 2; pass++) {
		if (pass == 0 && o->json)
			continue;
		for (c = 0; c < C_COUNT; c++) {
			if (!(R->cmask & (1u << c)))
				continue;
			if (pass == 0 && c <= C_FLOOR)
				continue;
			for (s = 0; s < R->nsizes; s++) {
				double t = median_at(R, c, s), f = busfac(c, n);
				double alg, bus, bt = 0;
				int bad = R->checked_bad[c * R->nsizes + s];
				size_t bytes;

				coll_count(c, R->sizes[s], n, &bytes);
				/* bytes per ns is GB/s */
				alg = t > 0 ? (double)bytes / t : 0;
				bus = alg * f;
				if (c == C_ALLREDUCE && have_mc) {
					/* the faster copy at this size */
					double nt = median_at(R, C_COPYNT, s);

					bt = median_at(R, C_MEMCPY, s);
					how = "memcpy";
					if (nt > 0 && nt < bt) {
						bt = nt;
						how = "copy_nt";
					}
				}
				size_label(R->sizes[s], lab, sizeof(lab));
				snprintf(cs, sizeof(cs), "%s/%dr/%s",
					 coll_name[c], n, lab);
				if (pass == 0) {
					char bound[32] = "";

					if (bt > 0)
						snprintf(bound, sizeof(bound),
							 "%.2f", bt / 1e3);
					printf("%-14s %-8s %7s %10zu %9ld "
					       "%12.2f %9.3f %9.3f %-6s %s\n",
					       coll_name[c], busfac_formula(c),
					       lab, bytes,
					       R->res_iters[c * R->nsizes + s],
					       t / 1e3, alg, bus,
					       bad ? "WRONG" : "ok", bound);
					continue;
				}
				if (c == C_FLOOR) {
					if (s == 0)
						perf_json(BENCH, fl_case,
							  "floor", "time_us",
							  t / 1e3, "us",
							  "\"ranks\":%d", n);
					continue;
				}
				if (c <= C_COPYNT) {
					perf_json(BENCH, cs, coll_name[c],
						  "time_us", t / 1e3, "us",
						  "\"bytes\":%zu,\"copies\":%d",
						  bytes, n);
					continue;
				}
				perf_json(BENCH, cs, "cgr", "time_us", t / 1e3,
					  "us", "\"bytes\":%zu", bytes);
				perf_json(BENCH, cs, "cgr", "algbw", alg,
					  "GB/s", "\"bytes\":%zu", bytes);
				perf_json(BENCH, cs, "cgr", "busbw", bus,
					  "GB/s",
					  "\"bytes\":%zu,\"busbw_factor\":%.4f,"
					  "\"factor_formula\":\"%s\","
					  "\"check\":\"%s\"",
					  bytes, f, busfac_formula(c),
					  bad ? "wrong" : "ok");
				if (bt <= 0)
					continue;
				perf_json(BENCH, cs, "memcpy_bound", "time_us",
					  bt / 1e3, "us",
					  "\"bytes\":%zu,\"copy\":\"%s\","
					  "\"formula\":\"time of n concurrent "
					  "S-byte copies (2nS bytes of "
					  "traffic)\"",
					  bytes, how);
				perf_json(BENCH, cs, "memcpy_bound", "algbw",
					  (double)bytes / bt, "GB/s",
					  "\"bytes\":%zu", bytes);
				perf_json(BENCH, cs, "memcpy_bound", "busbw",
					  (double)bytes / bt * f, "GB/s",
					  "\"bytes\":%zu", bytes);
			}
		}
	}
}

/* Runs the sweep with n ranks; 0 or -1 after a failure (already told). */
static int run_ranks(cgr_ctx *ctx, int n, const struct perf_opts *o,
		     struct run *tmpl)
{
	struct run *R;
	struct rank_arg A[MAX_RANKS];
	pthread_t th[MAX_RANKS];
	size_t cells = (size_t)C_COUNT * tmpl->nsizes;
	int r, rc, ret = 0;
	int64_t t0 = perf_now_ns();

	R = calloc(1, sizeof(*R));
	if (R == NULL)
		return -1;
	*R = *tmpl;
	R->n = n;
	/* One CPU per rank when there are enough, else the scheduler's. */
	R->pin = nth_cpu(n - 1) >= 0;
	R->flags = aligned_alloc(64, MAX_RANKS * sizeof(*R->flags));
	if (R->flags == NULL) {
		ret = -1;
		goto out;
	}
	memset(R->flags, 0, MAX_RANKS * sizeof(*R->flags));
	R->res = calloc(cells * (size_t)(R->windows * R->reps), sizeof(double));
	R->checked_bad = calloc(cells, sizeof(int));
	R->res_iters = calloc(cells, sizeof(long));
	rc = cgr_comm_create(ctx, NULL, (size_t)n, CGR_BACKEND_CPU, &R->comm);
	if (rc) {
		fprintf(stderr, "collective_bw: cgr_comm_create(%d): %s\n", n,
			cgr_strerror(rc));
		ret = -1;
		goto out;
	}
	for (r = 0; r < n; r++) {
		A[r].R = R;
		A[r].rank = r;
		A[r].send = aligned_alloc(4096, MAX_BYTES);
		A[r].recv = aligned_alloc(4096, MAX_BYTES);
		if (A[r].send == NULL || A[r].recv == NULL) {
			fprintf(stderr, "collective_bw: out of memory\n");
			exit(1);
		}
	}
	for (r = 0; r < n; r++)
		pthread_create(&th[r], NULL, rank_main, &A[r]);
	for (r = 0; r < n; r++)
		pthread_join(th[r], NULL);
	for (r = 0; r < n; r++) {
		free(A[r].send);
		free(A[r].recv);
	}
	if (atomic_load(&R->failed)) {
		ret = -1;
	} else {
		double wall = (double)(perf_now_ns() - t0) / 1e9;
		char cs[32];

		report(R, o);
		if (!o->json)
			printf("%d ranks: whole sweep took %.2f s\n", n, wall);
		snprintf(cs, sizeof(cs), "sweep/%dr", n);
		perf_json(BENCH, cs, "cgr", "wall_s", wall, "s",
			  "\"ranks\":%d,\"windows\":%d,\"samples\":%d", n,
			  R->windows, R->reps);
	}
	cgr_comm_destroy(R->comm);
out:
	free(R->flags);
	free(R->res);
	free(R->checked_bad);
	free(R->res_iters);
	free(R);
	return ret;
}

static unsigned parse_colls(const char *s)
{
	unsigned m = 1u << C_MEMCPY | 1u << C_COPYNT | 1u << C_FLOOR;
	char buf[256], *tok, *save = NULL;
	int c;

	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		for (c = 0; c < C_COUNT; c++)
			if (!strcmp(tok, coll_name[c]))
				break;
		if (c == C_COUNT) {
			fprintf(stderr,
				"collective_bw: unknown collective "
				"'%s'\n",
				tok);
			exit(2);
		}
		m |= 1u << c;
	}
	return m;
}

int main(int argc, char **argv)
{
	struct perf_opts o = {.windows = 3, .iters = 100000};
	struct run tmpl;
	int ranks[MAX_RANKS], nranks = 0, i, j, ret = 0;
	double target_ms = -1;
	char *rest[64];
	int nrest = 0;
	static size_t usizes[16];
	size_t nusizes = 0;
	cgr_ctx *ctx;

	memset(&tmpl, 0, sizeof(tmpl));
	tmpl.cmask = ~0u & ((1u << C_COUNT) - 1);
	/* Our own options first; perf_parse takes the rest. */
	rest[nrest++] = argv[0];
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-r") && i + 1 < argc) {
			int v = atoi(argv[++i]);
			if (v < 1 || v > MAX_RANKS || nranks == MAX_RANKS) {
				fprintf(stderr, "collective_bw: -r 1..%d\n",
					MAX_RANKS);
				return 2;
			}
			ranks[nranks++] = v;
		} else if (!strcmp(argv[i], "-c") && i + 1 < argc) {
			tmpl.cmask = parse_colls(argv[++i]);
		} else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
			target_ms = atof(argv[++i]);
		} else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
			size_t v = (size_t)strtoull(argv[++i], NULL, 0);
			if (v < 1 || v > MAX_BYTES || nusizes == 16) {
				fprintf(stderr, "collective_bw: -s 1..%zu, "
						"at most 16 times\n",
					MAX_BYTES);
				return 2;
			}
			usizes[nusizes++] = v;
		} else if (!strcmp(argv[i], "-k") && i + 1 < argc) {
			tmpl.reps = atoi(argv[++i]);
		} else if (nrest < 63) {
			rest[nrest++] = argv[i];
		}
	}
	rest[nrest] = NULL;
	if (perf_parse(
		nrest, rest, &o,
		"cgr collectives, 8 B..64 MiB; own options: -r RANKS "
		"(repeatable; default 2 and 4), -c coll[,coll] "
		"(allreduce,allgather,reducescatter,reduce,broadcast,"
		"gather,scatter,alltoall,sendrecv), -s BYTES (repeatable; "
		"default: the sweep), -t MS per sample, -k "
		"samples per window (1..4, default 3)"))
		return 2;
	if (nranks == 0) {
		ranks[nranks++] = 2;
		ranks[nranks++] = 4;
	}
	if (target_ms <= 0)
		target_ms = o.quick ? 3 : 10;
	tmpl.windows = o.windows > 64 ? 64 : o.windows;
	if (tmpl.reps < 1 || tmpl.reps > 4)
		tmpl.reps = 3;
	tmpl.max_iters = o.iters;
	tmpl.target_ns = target_ms * 1e6;
	tmpl.tick = perf_tick_ns();
	if (o.quick) {
		tmpl.sizes = quick_sizes;
		tmpl.nsizes = sizeof(quick_sizes) / sizeof(quick_sizes[0]);
	} else {
		tmpl.sizes = full_sizes;
		tmpl.nsizes = sizeof(full_sizes) / sizeof(full_sizes[0]);
	}
	if (nusizes) {
		tmpl.sizes = usizes;
		tmpl.nsizes = nusizes;
	}

	if (cgr_ctx_create(NULL, &ctx) != 0) {
		fprintf(stderr, "collective_bw: cgr_ctx_create failed\n");
		return 1;
	}
	if (!o.json) {
		printf("collective_bw: cgr CPU backend, ranks as threads, "
		       "stream NULL (inline), out of place; float32 sum for "
		       "reducing collectives, uint8 otherwise; root 0\n");
		printf("busbw factors (nccl-tests): allreduce 2(n-1)/n; "
		       "allgather, reducescatter, gather, scatter, alltoall "
		       "(n-1)/n; reduce, broadcast, sendrecv 1\n");
	}
	for (j = 0; j < nranks; j++)
		if (run_ranks(ctx, ranks[j], &o, &tmpl) != 0)
			ret = 1;
	cgr_ctx_destroy(ctx);
	return ret;
}
