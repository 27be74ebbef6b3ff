#!/bin/sh
# perf/hosts.sh: a compiled graph across hosts, measured on three network
# namespaces (tests/netns.sh: "hosts" on one machine, UCX over tcp on
# veths): perf/hosts (cgr against raw UCX on the same pair, adaptive and
# parked) and Open MPI's ping-pong (perf/mpi_pingpong, pml ucx over the
# same transports), launched by the same mpirun, alternating.  Root only.
# Usage: perf/hosts.sh [--quick] [-w N] [-n N]   (from the build tree:
# sh ../perf/hosts.sh)
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${abs_top_builddir:-$PWD}
abs_top_srcdir=${abs_top_srcdir:-$(dirname "$here")}
[ "$(id -u)" = 0 ] || { echo "perf/hosts.sh: needs root (namespaces)"; exit 0; }
[ -x "$build/perf/hosts" ] || { echo "perf/hosts.sh: build perf/hosts first"; exit 1; }
. "$abs_top_srcdir/tests/netns.sh"
netns_init
netns_up || { cat "$tmp/up.err"; exit 1; }
echo "3 hosts: network namespaces on a bridge ($net.1-3), UCX_TLS=tcp,self"
for round in 1 2; do
	for mode in adaptive block; do
		echo "== round $round: cgr ($mode) and raw UCX"
		t0=$(date +%s%N)
		NETNS_ENV="-x PERF_MODE=$mode" netns_mpirun 600 "$tmp/o" \
			"$tmp/e" "$build/perf/hosts" "$@"
		first=$(sed -n 's/.* first_result_ns \([0-9]*\)$/\1/p' "$tmp/o")
		cat "$tmp/o"
		[ -n "$first" ] && echo "launch (mpirun started) to the first" \
			"execution's result: $(((first - t0) / 1000000)) ms"
		grep -v '^$' "$tmp/e" | head -5
	done
	if [ -x "$build/perf/mpi_pingpong" ]; then
		echo "== round $round: Open MPI (pml ucx, tcp)"
		NETNS_ENV="-x MPI_LABEL=(ucx) --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any" \
			netns_mpirun 600 "$tmp/o" "$tmp/e" \
			"$build/perf/mpi_pingpong" "$@"
		cat "$tmp/o"
		echo "== round $round: Open MPI (ob1, btl tcp)"
		NETNS_ENV="-x MPI_LABEL=(ob1/tcp)" netns_mpirun 600 "$tmp/o" \
			"$tmp/e" "$build/perf/mpi_pingpong" "$@"
		cat "$tmp/o"
	fi
done
