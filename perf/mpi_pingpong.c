/*
 * perf/mpi_pingpong.c: Open MPI's 64-byte ping-pong between ranks 0 and
 * 1, the peer perf/hosts.sh sets beside cgr's graph across hosts (same
 * hosts, same launcher).  Windows of iterations after a warm-up; the
 * median of the windows' medians and p99s, one JSON line.
 */
#include "perf.h"

#include <mpi.h>

#define WMAX 64

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct perf_opts o = { 5, 2000, 0, 0 };
	double p50[WMAX], p99[WMAX], *lat;
	char buf[64] = { 0 };
	int rank, size;

	MPI_Init(&argc, &argv);
	if (perf_parse(argc, argv, &o, "Open MPI's 64-byte ping-pong"))
		MPI_Abort(MPI_COMM_WORLD, 2);
	if (o.quick)
		o.windows = 3, o.iters = 500;
	if (o.windows > WMAX)
		o.windows = WMAX;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	lat = calloc((size_t)o.iters, sizeof(*lat));
	for (int w = -1; w < o.windows && size >= 2 && rank < 2; w++) {
		for (long i = 0; i < o.iters; i++) {
			int64_t t0 = perf_now_ns();
			if (rank == 0) {
				MPI_Send(buf, 64, MPI_CHAR, 1, 0,
					 MPI_COMM_WORLD);
				MPI_Recv(buf, 64, MPI_CHAR, 1, 0,
					 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(buf, 64, MPI_CHAR, 0, 0,
					 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, 64, MPI_CHAR, 0, 0,
					 MPI_COMM_WORLD);
			}
			lat[i] = (double)(perf_now_ns() - t0) / 1e3;
		}
		if (w < 0)
			continue; /* warm-up */
		qsort(lat, (size_t)o.iters, sizeof(*lat), cmp);
		p50[w] = lat[o.iters / 2];
		p99[w] = lat[(size_t)((double)(o.iters - 1) * 0.99)];
	}
	if (rank == 0 && size >= 2) {
		double m = perf_median(p50, (size_t)o.windows);
		double m99 = perf_median(p99, (size_t)o.windows);
		const char *l = getenv("MPI_LABEL");
		char impl[64];
		snprintf(impl, sizeof(impl), "Open MPI%s%s", l ? " " : "",
			 l ? l : "");
		printf("%-10s %-22s p50 %9.1f us  p99 %9.1f us\n", "rtt-64B",
		       impl, m, m99);
		perf_json("hosts", "rtt-64B", impl, "rtt_p50", m, "us",
			  "\"p99_us\":%.1f,\"windows\":%d", m99, o.windows);
	}
	free(lat);
	MPI_Finalize();
	return 0;
}
