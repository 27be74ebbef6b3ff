/*
 * perf/mpi_coll_bw.c: the peer of perf/collective_bw.c: the same sweep
 * (collectives, sizes, element types, root 0, out of place, calibration and
 * sample rules, nccl-tests' algbw/busbw) over Open MPI's collectives, for
 * running under mpirun on one host (shared memory: --mca btl self,vader).
 * perf/collective_bw.sh launches it as
 *
 *   mpirun --allow-run-as-root --oversubscribe -np N --bind-to none \
 *          --mca btl self,vader perf/mpi_coll_bw [options]
 *
 * and pins rank r to the r-th CPU it may use itself when there are N of
 * them, as collective_bw does for its threads.  Only rank 0 prints.  JSON
 * lines carry impl "openmpi".  Options: -w, -n (iteration cap), --quick,
 * --json as every perf program, -c coll[,coll], -t ms per sample, -k
 * samples per window, -s bytes[,bytes] (the sizes instead of the
 * sweep's, at most 64 MiB).
 */
#include "perf.h"

#include <mpi.h>

#define BENCH "collective_bw"

enum coll {
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
    "allreduce", "allgather", "reducescatter", "reduce",   "broadcast",
    "gather",	 "scatter",   "alltoall",      "sendrecv",
};

/* As in collective_bw.c: nccl-tests' factors, sizes and counts. */
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

static int is_reducing(int c)
{
	return c == C_ALLREDUCE || c == C_REDUCESCATTER || c == C_REDUCE;
}

static int is_split(int c)
{
	return c == C_ALLGATHER || c == C_REDUCESCATTER || c == C_GATHER ||
	       c == C_SCATTER || c == C_ALLTOALL;
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

static size_t coll_count(int c, size_t nominal, int n, size_t *bytes)
{
	size_t esz = is_reducing(c) ? 4 : 1, cnt;

	cnt = nominal / esz / (is_split(c) ? (size_t)n : 1);
	if (cnt == 0)
		cnt = 1;
	*bytes = cnt * esz * (is_split(c) ? (size_t)n : 1);
	return cnt;
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

static void do_op(int c, int rank, int n, const void *send, void *recv,
		  size_t cnt)
{
	MPI_Comm w = MPI_COMM_WORLD;
	int k = (int)cnt;

	switch (c) {
	case C_ALLREDUCE:
		MPI_Allreduce(send, recv, k, MPI_FLOAT, MPI_SUM, w);
		break;
	case C_ALLGATHER:
		MPI_Allgather(send, k, MPI_BYTE, recv, k, MPI_BYTE, w);
		break;
	case C_REDUCESCATTER:
		MPI_Reduce_scatter_block(send, recv, k, MPI_FLOAT, MPI_SUM, w);
		break;
	case C_REDUCE:
		MPI_Reduce(send, recv, k, MPI_FLOAT, MPI_SUM, 0, w);
		break;
	case C_BROADCAST:
		/* In place, as MPI has it: the root's buffer is the data. */
		MPI_Bcast(rank == 0 ? (void *)send : recv, k, MPI_BYTE, 0, w);
		break;
	case C_GATHER:
		MPI_Gather(send, k, MPI_BYTE, recv, k, MPI_BYTE, 0, w);
		break;
	case C_SCATTER:
		MPI_Scatter(send, k, MPI_BYTE, recv, k, MPI_BYTE, 0, w);
		break;
	case C_ALLTOALL:
		MPI_Alltoall(send, k, MPI_BYTE, recv, k, MPI_BYTE, w);
		break;
	case C_SENDRECV:
		MPI_Sendrecv(send, k, MPI_BYTE, (rank + 1) % n, 0, recv, k,
			     MPI_BYTE, (rank + n - 1) % n, 0, w,
			     MPI_STATUS_IGNORE);
		break;
	}
}

/* The slowest rank's time for iters operations back to back, in ns. */
static double timed(int c, int rank, int n, const void *send, void *recv,
		    size_t cnt, long iters, double tick)
{
	double mine, slowest;
	uint64_t t0;
	long it;

	MPI_Barrier(MPI_COMM_WORLD);
	t0 = perf_ticks();
	for (it = 0; it < iters; it++)
		do_op(c, rank, n, send, recv, cnt);
	mine = (double)(perf_ticks() - t0) * tick;
	MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return slowest;
}

int main(int argc, char **argv)
{
	struct perf_opts o = {.windows = 3, .iters = 100000};
	unsigned cmask = (1u << C_COUNT) - 1;
	double target_ms = -1, tick, *res;
	const size_t *sizes;
	size_t nsizes, s;
	unsigned char *send, *recv;
	char *rest[64];
	int nrest = 0, rank, n, i, c, w, q, pass, reps = 3, nsamp;
	long *res_iters;
	size_t own[16];
	size_t nown = 0;
	int pin;
	int64_t wall0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	rest[nrest++] = argv[0];
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-c") && i + 1 < argc) {
			char buf[256], *tok, *save = NULL;

			cmask = 0;
			snprintf(buf, sizeof(buf), "%s", argv[++i]);
			for (tok = strtok_r(buf, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				for (c = 0; c < C_COUNT; c++)
					if (!strcmp(tok, coll_name[c]))
						cmask |= 1u << c;
			}
		} else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
			target_ms = atof(argv[++i]);
		} else if (!strcmp(argv[i], "-k") && i + 1 < argc) {
			reps = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
			char *tok, *save = NULL;

			nown = 0;
			for (tok = strtok_r(argv[++i], ",", &save);
			     tok && nown < 16; tok = strtok_r(NULL, ",", &save))
				if (strtoull(tok, NULL, 10) - 1 < MAX_BYTES)
					own[nown++] = strtoull(tok, NULL, 10);
		} else if (nrest < 63) {
			rest[nrest++] = argv[i];
		}
	}
	rest[nrest] = NULL;
	if (perf_parse(nrest, rest, &o,
		       "Open MPI collectives, 8 B..64 MiB (run under mpirun); "
		       "own options: -c coll[,coll], -t MS per sample, -k "
		       "samples per window (1..4, default 3)")) {
		MPI_Finalize();
		return 2;
	}
	if (target_ms <= 0)
		target_ms = o.quick ? 3 : 10;
	if (o.windows > 64)
		o.windows = 64;
	if (reps < 1 || reps > 4)
		reps = 3;
	nsamp = o.windows * reps;
	sizes = o.quick ? quick_sizes : full_sizes;
	nsizes = o.quick ? sizeof(quick_sizes) / sizeof(quick_sizes[0])
			 : sizeof(full_sizes) / sizeof(full_sizes[0]);
	if (nown > 0)
		sizes = own, nsizes = nown;
	/* One CPU per rank when there are enough, else the scheduler's. */
	pin = nth_cpu(n - 1) >= 0;
	if (pin)
		perf_pin(nth_cpu(rank));
	tick = perf_tick_ns();
	send = aligned_alloc(4096, MAX_BYTES);
	recv = aligned_alloc(4096, MAX_BYTES);
	res = calloc((size_t)C_COUNT * nsizes * (size_t)nsamp, sizeof(double));
	res_iters = calloc((size_t)C_COUNT * nsizes, sizeof(long));
	if (send == NULL || recv == NULL || res == NULL || res_iters == NULL)
		MPI_Abort(MPI_COMM_WORLD, 1);
	memset(send, 0, MAX_BYTES); /* float zeros: no denormals */
	memset(recv, 0, MAX_BYTES);
	MPI_Barrier(MPI_COMM_WORLD);
	wall0 = perf_now_ns();

	for (w = 0; w < o.windows; w++) {
		for (c = 0; c < C_COUNT; c++) {
			if (!(cmask & (1u << c)))
				continue;
			for (s = 0; s < nsizes; s++) {
				size_t bytes,
				    cnt = coll_count(c, sizes[s], n, &bytes);
				long batch = 1, iters;
				double t, k, per = 0;

				/* Warm-up, then batches of 1, 4, 16, ...
				 * as collective_bw calibrates: until one
				 * takes an eighth of the target (and two
				 * batches unless one operation takes it
				 * all); the fastest batch per operation. */
				timed(c, rank, n, send, recv, cnt, 1, tick);
				for (;;) {
					t = timed(c, rank, n, send, recv, cnt,
						  batch, tick);
					if (per == 0 || t / (double)batch < per)
						per = t / (double)batch;
					if ((t >= target_ms * 1e6 / 8 &&
					     (batch > 1 ||
					      t >= target_ms * 1e6)) ||
					    batch >= o.iters)
						break;
					batch *= 4;
				}
				k = per > 0 ? target_ms * 1e6 / per : 1e9;
				if (k < 1)
					k = 1;
				if (k > (double)o.iters)
					k = (double)o.iters;
				iters = (long)k;
				for (q = 0; q < reps; q++) {
					t = timed(c, rank, n, send, recv, cnt,
						  iters, tick);
					res[((size_t)c * nsizes + s) *
						(size_t)nsamp +
					    (size_t)(w * reps + q)] =
					    t / (double)iters;
				}
				res_iters[c * nsizes + s] = iters;
			}
		}
	}

	if (rank == 0) {
		if (!o.json)
			printf(
			    "\nOpen MPI %d ranks (processes%s), median of %d "
			    "window(s) x %d sample(s)\n"
			    "%-14s %7s %10s %9s %12s %9s %9s\n",
			    n, pin ? ", pinned" : ", unpinned", o.windows, reps,
			    "collective", "size", "bytes", "iters", "time_us",
			    "algbw", "busbw");
		for (pass = 0; pass < 2; pass++) {
			if (pass == 0 && o.json)
				continue;
			for (c = 0; c < C_COUNT; c++) {
				for (s = 0; s < nsizes; s++) {
					double *v, t, alg, f;
					char lab[32], cs[96];
					size_t bytes;

					if (!(cmask & (1u << c)))
						continue;
					v = &res[((size_t)c * nsizes + s) *
						 (size_t)nsamp];
					t = perf_median(v, (size_t)nsamp);
					coll_count(c, sizes[s], n, &bytes);
					f = busfac(c, n);
					alg = t > 0 ? (double)bytes / t : 0;
					size_label(sizes[s], lab, sizeof(lab));
					if (pass == 0) {
						printf(
						    "%-14s %7s %10zu %9ld "
						    "%12.2f %9.3f %9.3f\n",
						    coll_name[c], lab, bytes,
						    res_iters[c * nsizes + s],
						    t / 1e3, alg, alg * f);
						continue;
					}
					snprintf(cs, sizeof(cs), "%s/%dr/%s",
						 coll_name[c], n, lab);
					perf_json(BENCH, cs, "openmpi",
						  "time_us", t / 1e3, "us",
						  "\"bytes\":%zu", bytes);
					perf_json(BENCH, cs, "openmpi", "algbw",
						  alg, "GB/s", "\"bytes\":%zu",
						  bytes);
					perf_json(BENCH, cs, "openmpi", "busbw",
						  alg * f, "GB/s",
						  "\"bytes\":%zu,"
						  "\"busbw_factor\":%.4f",
						  bytes, f);
				}
			}
		}
		if (!o.json)
			printf("Open MPI %d ranks: whole sweep took %.2f s\n",
			       n, (double)(perf_now_ns() - wall0) / 1e9);
	}
	free(send);
	free(recv);
	free(res);
	free(res_iters);
	MPI_Finalize();
	return 0;
}
