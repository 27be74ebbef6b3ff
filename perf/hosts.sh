#!/bin/sh
# perf/hosts.sh: a compiled graph across hosts, measured on three network
# namespaces (tests/netns.sh: "hosts" on one machine, UCX over tcp on
# veths): perf/hosts (cgr against raw UCX on the same pair, adaptive and
# parked) and Open MPI's ping-pong (perf/mpi_pingpong, pml ucx over the
# same transports), launched by the same mpirun, alternating.  Then
# collective nodes across the three hosts (perf/hosts_coll: allreduce,
# allgather, reducescatter, broadcast, alltoall at 8 B and 16 MiB) next to
# Open MPI's (perf/mpi_coll_bw, pml ucx, the same sizes), two rounds, and
# a table: both times, their ratio, and for 16 MiB the fraction of the
# link bound (the bytes each host must send at least, over the raw UCX
# bandwidth measured above); the same nodes on a communicator across the
# hosts (cgr_coll_params.comm, "node+comm"), measured window by window
# with the nodes over values; then that communicator alone
# (cgr_comm_create; a task on each member runs the operations back to
# back, as Open MPI's benchmark does) and its ratio; and an allreduce node
# of 16 MiB over two members per host, over values and on a
# communicator (hierarchical).  Root only.
# Usage: perf/hosts.sh [--coll|--hier [BUILD]|--ab BUILD] [--quick]
#                      [-w N] [-n N]
# (from the build tree: sh ../perf/hosts.sh; --coll: the collectives
# only; --hier: only the allreduce, allgather and alltoall of 16 MiB over two
# members per host, six rounds alternating this build (chunks), this
# build with one chunk per block (CGR_TEST_HIER_CHUNK: a build with fault
# injection), and BUILD's perf/hosts_coll --hier if given (BUILD may
# be an older tree built with this perf/hosts_coll.c), then the medians;
# --ab: perf/hosts (adaptive, -w 3 -n 300 unless given) of this build
# and of BUILD, alternating, AB_ROUNDS rounds (6), each run's echo and
# 1 MiB ratios to raw UCX, then their medians and how many runs met
# 1.2x and 0.9x; BUILD may be an older tree built with this
# perf/hosts.c)
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
: >"$tmp/all"
only_coll=0
[ "${1:-}" = --coll ] && { only_coll=1; shift; }
if [ "${1:-}" = --hier ]; then
	shift
	other=
	case "${1:-}" in -*|'') ;; *) other=$1; shift;; esac
	: >"$tmp/hier"
	for round in 1 2 3 4 5 6; do
		for v in chunks whole ${other:+other}; do
			bin=$build/perf/hosts_coll NETNS_ENV=
			[ $v = whole ] &&
				NETNS_ENV="-x CGR_TEST_HIER_CHUNK=1073741824"
			[ $v = other ] && bin=$other/perf/hosts_coll
			NETNS_ENV=$NETNS_ENV netns_mpirun 600 "$tmp/o" "$tmp/e" \
				"$bin" --hier -w 5 "$@"
			for k in allreduce allgather alltoall; do
				ms=$(awk -v k=$k '$1 == "hosts_hier" &&
					$2 == "comm" && $3 == k {
					printf "%.1f", $6 / 1e3 }' "$tmp/o")
				echo "round $round $v: $k ${ms:-?} ms on a" \
				     "communicator"
				echo "$v-$k ${ms:-0}" >>"$tmp/hier"
			done
		done
	done
	awk '{ v[$1, ++n[$1]] = $2 }
	END { for (k in n) {
		for (i = 1; i <= n[k]; i++) for (j = i + 1; j <= n[k]; j++)
			if (v[k, j] < v[k, i]) { t = v[k, i]; v[k, i] = v[k, j]; v[k, j] = t }
		m = n[k] % 2 ? v[k, (n[k] + 1) / 2] : (v[k, n[k] / 2] + v[k, n[k] / 2 + 1]) / 2
		printf "16 MiB, 3 hosts x 2, on a communicator: %s median %.1f ms\n", k, m } }' \
		"$tmp/hier"
	exit 0
fi
if [ "${1:-}" = --ab ]; then
	other=${2:?"perf/hosts.sh --ab BUILD"}
	shift 2
	[ $# -eq 0 ] && set -- -w 3 -n 300
	: >"$tmp/ab"
	for round in $(seq "${AB_ROUNDS:-6}"); do
		for v in this other; do
			bin=$build/perf/hosts
			[ $v = other ] && bin=$other/perf/hosts
			NETNS_ENV="-x PERF_MODE=adaptive" netns_mpirun 600 \
				"$tmp/o" "$tmp/e" "$bin" "$@"
			e=$(sed -n 's/^rtt-64B *adaptive .*, \([0-9.]*\)x)$/\1/p' \
				"$tmp/o")
			b=$(sed -n 's/^bw-1MiB *adaptive .*, \([0-9.]*\)x)$/\1/p' \
				"$tmp/o")
			echo "round $round $v: echo ${e:-?}x raw UCX, 1 MiB" \
			     "${b:-?}x raw UCX"
			grep '^  windows' "$tmp/o" | sed 's/^ */  /'
			echo "$v ${e:-0} ${b:-0}" >>"$tmp/ab"
		done
	done
	awk 'function med(k,   n, i, j, t) {
		n = cnt[k]
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
			if (v[k, j] < v[k, i]) { t = v[k, i]; v[k, i] = v[k, j]; v[k, j] = t }
		return n % 2 ? v[k, (n + 1) / 2] : (v[k, n / 2] + v[k, n / 2 + 1]) / 2
	}
	{ v[$1 " echo", ++cnt[$1 " echo"]] = $2; v[$1 " 1MiB", ++cnt[$1 " 1MiB"]] = $3
	  runs[$1]++; e12[$1] += $2 > 0 && $2 <= 1.2; b09[$1] += $3 >= 0.9 }
	END { for (k in runs)
		printf "%s: echo median %.2fx raw UCX (1.2x or less in %d of %d runs), 1 MiB median %.2fx (0.9x or more in %d of %d)\n",
		       k, med(k " echo"), e12[k], runs[k], med(k " 1MiB"), b09[k], runs[k] }' \
		"$tmp/ab"
	exit 0
fi
for round in 1 2; do
	[ $only_coll = 1 ] && break
	for mode in adaptive block; do
		echo "== round $round: cgr ($mode) and raw UCX"
		t0=$(date +%s%N)
		NETNS_ENV="-x PERF_MODE=$mode" netns_mpirun 600 "$tmp/o" \
			"$tmp/e" "$build/perf/hosts" "$@"
		first=$(sed -n 's/.* first_result_ns \([0-9]*\)$/\1/p' "$tmp/o")
		cat "$tmp/o" | tee -a "$tmp/all"
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

# --coll alone: the raw UCX bandwidth for the link bound, one short window.
if [ $only_coll = 1 ]; then
	NETNS_ENV=-x\ PERF_MODE=adaptive netns_mpirun 600 "$tmp/o" "$tmp/e" \
		"$build/perf/hosts" -w 1 -n 200
	grep '^bw-64MiB *raw UCX AM' "$tmp/o" | tee -a "$tmp/all"
fi

# Collectives across the hosts, cgr and Open MPI in turn.
sizes=8,16777216
colls=allreduce,allgather,reducescatter,broadcast,alltoall
: >"$tmp/coll"
for round in 1 2; do
	echo "== round $round: cgr collective nodes across the hosts"
	netns_mpirun 600 "$tmp/o" "$tmp/e" "$build/perf/hosts_coll" -s "$sizes" "$@"
	grep '^hosts_\(coll\|comm\|ncomm\|hier\) ' "$tmp/o" | tee -a "$tmp/coll"
	grep -v '^$' "$tmp/e" | head -5
	if [ -x "$build/perf/mpi_coll_bw" ]; then
		echo "== round $round: Open MPI collectives (pml ucx, tcp)"
		NETNS_ENV="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any" \
			netns_mpirun 600 "$tmp/o" "$tmp/e" \
			"$build/perf/mpi_coll_bw" -c "$colls" -s "$sizes" -t 30 "$@"
		awk '$1 ~ /^(allreduce|allgather|reducescatter|broadcast|alltoall)$/ &&
		     NF == 7 { print "mpi", $0 }' "$tmp/o" | tee -a "$tmp/coll"
	fi
done
raw=$(sed -n 's/^bw-64MiB *raw UCX AM .* \([0-9.]*\) GB\/s .*/\1/p' "$tmp/all" | head -1)
echo
echo "collectives across 3 hosts (one member each), medians of the rounds;"
echo "link bound: the bytes each host must send at least / raw UCX ${raw:-?} GB/s"
awk -v raw="${raw:-0}" '
function nominal(l) {
	if (l ~ /MiB$/) return substr(l, 1, length(l) - 3) * 1048576
	if (l ~ /KiB$/) return substr(l, 1, length(l) - 3) * 1024
	return substr(l, 1, length(l) - 1) + 0
}
function med(k,   n, i, j, t, a) {
	n = cnt[k]
	for (i = 1; i <= n; i++) a[i] = v[k, i]
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
		if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function put(k, x) { v[k, ++cnt[k]] = x }
$1 == "hosts_coll" { put("cgr " $2 " " $3, $5); keys[$2 " " $3] = 1 }
$1 == "hosts_comm" { put("comm " $2 " " $3, $5) }
$1 == "hosts_ncomm" { put("ncomm " $2 " " $3, $5) }
$1 == "hosts_hier" { put("hier " $2 " " $3, $6) }
$1 == "mpi" { put("mpi " $2 " " nominal($3), $6) }
END {
	printf "%-14s %10s %12s %12s %8s %12s %12s %9s %12s %9s\n",
	       "collective", "bytes", "cgr us", "Open MPI us", "cgr/MPI",
	       "link bound", "node+comm us", "/MPI", "comm us", "comm/MPI"
	n = split("allreduce allgather reducescatter broadcast alltoall", cs)
	split("8 16777216", ss)
	for (i = 1; i <= n; i++) for (j = 1; j <= 2; j++) {
		k = cs[i] " " ss[j]
		if (!(k in keys)) continue
		c = med("cgr " k); m = ("mpi " k) in cnt ? med("mpi " k) : 0
		f = cs[i] == "allreduce" ? 4 / 3 : cs[i] == "broadcast" ? 1 : 2 / 3
		lb = raw > 0 && ss[j] > 8 ? sprintf("%.2f", f * ss[j] / (raw * 1e3) / c) : "-"
		d = ("comm " k) in cnt ? med("comm " k) : 0
		e = ("ncomm " k) in cnt ? med("ncomm " k) : 0
		printf "%-14s %10d %12.1f %12s %8s %12s %12s %9s %12s %9s\n",
		       cs[i], ss[j], c, m ? sprintf("%.1f", m) : "-",
		       m ? sprintf("%.2fx", c / m) : "-", lb,
		       e ? sprintf("%.1f", e) : "-",
		       e && m ? sprintf("%.2fx", e / m) : "-",
		       d ? sprintf("%.1f", d) : "-",
		       d && m ? sprintf("%.2fx", d / m) : "-"
	}
	n = split("allreduce allgather alltoall", hk)
	for (i = 1; i <= n; i++) {
		a = "hier values " hk[i]; b = "hier comm " hk[i]
		if ((a in cnt) && (b in cnt))
			printf "%s node of 16 MiB, two members on each host: " \
			       "%.1f ms over values, %.1f ms on a " \
			       "communicator (%.2fx)\n", hk[i], med(a) / 1e3,
			       med(b) / 1e3, med(b) / med(a)
	}
}' "$tmp/coll"
