#!/usr/bin/env bash
# perf/collective_bw.sh: cgr's collectives next to Open MPI's, Gloo's
# allreduce and the memcpy bound, in one run, as one combined table.
#
#   perf/collective_bw.sh [--quick] [--json] [-R rounds] [-t ms] [-b builddir]
#   perf/collective_bw.sh --hosts [-b builddir] [--quick]
#
# --hosts: the collectives across three hosts (network namespaces, root)
# next to Open MPI's on the same namespaces, mpirun and transport: what
# perf/hosts.sh --coll runs (its table, with the fraction of the link
# bound), from the build directory.
#
# Runs in rounds; each round runs, for 2 and then 4 ranks, one window of
# every implementation back to back (perf/collective_bw, then Open MPI's
# perf/mpi_coll_bw under mpirun, then perf/gloo_allreduce; the order turns
# round by round so that no implementation always goes first).  In its
# window each program checks one warm-up result per case, calibrates, and
# reports the median of 3 samples; every number in the table is the median
# of those over the rounds.  A peer that is not built or not installed is
# skipped with a note.  Then it prints a PASS/MISS line per target (it never fails on a
# MISS) and one JSON line per result (medians; `grep '^{'`).
#
# Defaults: 4 rounds of the full sweep (8 B..64 MiB, 10 sizes, 10 ms per
# sample; about 2 minutes on an idle machine, more when the cores are
# shared); --quick: 1 round of 6 sizes, 3 ms per sample (about 20 s).
# builddir defaults to the current directory if it holds
# perf/collective_bw, else build/.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
bdir="" quick="" json=0 rounds="" tms="" hosts=0
while [ $# -gt 0 ]; do
	case $1 in
	--hosts) hosts=1 ;;
	--quick) quick=--quick ;;
	--json) json=1 ;;
	-R) rounds=$2; shift ;;
	-t) tms=$2; shift ;;
	-b) bdir=$2; shift ;;
	*)
		echo "usage: $0 [--hosts] [--quick] [--json] [-R rounds] [-t ms per sample] [-b builddir]" >&2
		exit 2 ;;
	esac
	shift
done
if [ -z "$bdir" ]; then
	if [ -x ./perf/collective_bw ] || [ -x ./perf/mpi_coll_bw ]; then
		bdir=.
	else
		bdir=$top/build
	fi
fi
bin=$bdir/perf
if [ $hosts = 1 ]; then
	cd "$bdir" && exec sh "$top/perf/hosts.sh" --coll $quick
fi
[ -n "$rounds" ] || { [ -n "$quick" ] && rounds=1 || rounds=4; }
targ=()
[ -n "$tms" ] && targ=(-t "$tms")
limit=300 # seconds for one program run; a hang is reported, not waited on
ranks="2 4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
note() { [ "$json" = 1 ] || echo "$*"; }
say() { echo "$*" >&2; }

have_cgr=0 have_mpi=0 have_gloo=0
[ -x "$bin/collective_bw" ] && have_cgr=1 ||
	note "note: $bin/collective_bw is not built: cgr is skipped"
if [ ! -x "$bin/mpi_coll_bw" ]; then
	note "note: Open MPI not found at configure time (no mpicc): skipped"
elif ! command -v mpirun >/dev/null 2>&1; then
	note "note: mpirun not found: Open MPI skipped"
else
	have_mpi=1
fi
[ -x "$bin/gloo_allreduce" ] && have_gloo=1 ||
	note "note: Gloo not found at configure time (gloo/allreduce.h, libgloo): skipped"

# One program run: impl, ranks, round, then the command.  JSON lines go to
# $tmp/json; failures and hangs to $tmp/fail.
run1() {
	local impl=$1 n=$2 r=$3 t0 t1 rc
	shift 3
	t0=$(date +%s.%N)
	timeout -k 5 $limit "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	t1=$(date +%s.%N)
	grep '^{' "$tmp/out" >>"$tmp/json"
	awk -v i="$impl" -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN {
		printf "{\"bench\":\"collective_bw\",\"case\":\"run/%dr\",\"impl\":\"%s\",\"metric\":\"wall_s\",\"value\":%.3f,\"unit\":\"s\"}\n", n, i, b - a }' >>"$tmp/json"
	if [ $rc -ne 0 ]; then
		echo "$impl $n ranks, round $r: exit $rc$([ $rc -eq 124 ] && echo " (timed out after ${limit} s)")" >>"$tmp/fail"
		sed 's/^/    /' "$tmp/err" | tail -5 >>"$tmp/fail"
	fi
	say "  round $r/$rounds, $n ranks: $impl $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f s", b - a}')$([ $rc -ne 0 ] && echo ", FAILED (exit $rc)")"
}

mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none
	--mca btl self,vader)
t_start=$(date +%s.%N)
load0=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
say "collective_bw.sh: $rounds round(s)${quick:+ (quick)}, ranks $ranks, binaries in $bin"
: >"$tmp/json"
for r in $(seq 1 "$rounds"); do
	for n in $ranks; do
		order="cgr mpi gloo"
		[ $((r % 2)) -eq 0 ] && order="gloo mpi cgr"
		for impl in $order; do
			case $impl in
			cgr) [ $have_cgr = 1 ] && run1 cgr "$n" "$r" \
				"$bin/collective_bw" -r "$n" -w 1 $quick --json "${targ[@]}" ;;
			mpi) [ $have_mpi = 1 ] && run1 openmpi "$n" "$r" \
				"${mpirun_cmd[@]}" -np "$n" "$bin/mpi_coll_bw" -w 1 $quick --json "${targ[@]}" ;;
			gloo) [ $have_gloo = 1 ] && run1 gloo "$n" "$r" \
				"$bin/gloo_allreduce" -r "$n" -w 1 $quick --json "${targ[@]}" ;;
			esac
		done
	done
done
t_end=$(date +%s.%N)
load1=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")

# Medians over rounds, the table, the targets, the JSON lines.
touch "$tmp/fail"
fail4=$(grep -c '^cgr 4 ranks' "$tmp/fail")
awk -v json="$json" -v rounds="$rounds" -v fail4="$fail4" -v wall="$(awk -v a="$t_start" -v b="$t_end" 'BEGIN{print b - a}')" \
	-v load0="$load0" -v load1="$load1" -v ncpu="$(nproc)" \
	-v have_mpi="$have_mpi" -v have_gloo="$have_gloo" -v have_cgr="$have_cgr" '
function jstr(s, k,   p, i) {
	p = "\"" k "\":\""; i = index(s, p)
	if (!i) return ""
	s = substr(s, i + length(p)); return substr(s, 1, index(s, "\"") - 1)
}
function jnum(s, k,   p, i) {
	p = "\"" k "\":"; i = index(s, p)
	if (!i) return ""
	s = substr(s, i + length(p)); match(s, /^[-+0-9.eE]+/)
	return substr(s, 1, RLENGTH)
}
function median(str,   v, m, i, j, x) {
	m = split(str, v, " ")
	for (i = 2; i <= m; i++) {       # insertion sort, numerically
		x = v[i] + 0
		for (j = i - 1; j >= 1 && v[j] + 0 > x; j--) v[j + 1] = v[j]
		v[j + 1] = x
	}
	if (m == 0) return ""
	return m % 2 ? v[(m + 1) / 2] + 0 : (v[m / 2] + v[m / 2 + 1]) / 2
}
function get(c, i, m) { k = c SUBSEP i SUBSEP m; return (k in med) ? med[k] : "" }
function f(x, fmt) { return x == "" ? "-" : sprintf(fmt, x) }
function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "" : a / b }
/^\{/ {
	c = jstr($0, "case"); i = jstr($0, "impl"); m = jstr($0, "metric")
	k = c SUBSEP i SUBSEP m
	if (!(k in vals)) { keys[++nk] = k; unit[k] = jstr($0, "unit") }
	vals[k] = vals[k] " " jnum($0, "value"); cnt[k]++
	b = jnum($0, "bytes"); if (b != "") bytes[k] = b
	fac = jnum($0, "busbw_factor"); if (fac != "") factor[c] = fac
	if (jstr($0, "check") == "wrong") wrong[c] = 1
}
END {
	for (q = 1; q <= nk; q++) med[keys[q]] = median(vals[keys[q]])
	# Bandwidths from the median time, so that time, algbw and busbw of
	# a row agree (a median of 1/t is not 1/median of t over even counts).
	for (q = 1; q <= nk; q++) {
		k = keys[q]; split(k, p, SUBSEP)
		if (p[3] != "algbw" && p[3] != "busbw") continue
		tk = p[1] SUBSEP p[2] SUBSEP "time_us"
		if (!(tk in med) || med[tk] <= 0 || !(tk in bytes)) continue
		v = bytes[tk] / (med[tk] * 1e3)
		if (p[3] == "busbw") {
			if (!(p[1] in factor)) continue
			v *= factor[p[1]]
		}
		med[k] = v
	}
	nc = split("allreduce allgather reducescatter reduce broadcast gather scatter alltoall sendrecv", coll, " ")
	form["allreduce"] = "2(n-1)/n"; form["reduce"] = "1"; form["broadcast"] = "1"; form["sendrecv"] = "1"
	form["allgather"] = form["reducescatter"] = form["gather"] = form["scatter"] = form["alltoall"] = "(n-1)/n"
	ns = split("8B 64B 512B 4KiB 32KiB 64KiB 256KiB 2MiB 16MiB 64MiB", sz, " ")
	nr = split("2 4", rk, " ")
	if (json != 1) {
		printf "\ncollective_bw: median over %d round(s); time in us per operation, bandwidth in GB/s\n", rounds
		print "algbw = bytes / time; busbw = algbw * factor (nccl-tests): allreduce 2(n-1)/n;"
		print "allgather, reducescatter, gather, scatter, alltoall (n-1)/n; reduce, broadcast, sendrecv 1."
		print "bytes: the whole per-rank buffer, as nccl-tests (allgather, gather: received; reducescatter,"
		print "scatter, alltoall: sent; sendrecv: sent to the right neighbour while receiving from the left)."
		print "cgr: CPU backend, ranks are threads; openmpi: processes under mpirun, btl self,vader (shared"
		print "memory); gloo: allreduce only, threads over TCP on 127.0.0.1.  Ranks are pinned to CPUs when"
		print "there are at least as many CPUs as ranks (2 ranks), unpinned with 4 ranks on 2 cores."
		print "bound (allreduce only): an allreduce of S bytes on n ranks must read the n inputs and write"
		print "the n outputs at least once, 2nS bytes of traffic, the same as n concurrent S-byte copies"
		print "(one per rank, same threads); bound_us is the time of those copies measured in the same"
		print "run, the faster of glibc memcpy and a streaming-store copy at each size; the bound algbw"
		print "= S / bound_us.  At small sizes it is only the copy, without any synchronisation."
		print "x_ompi = openmpi time / cgr time (above 1: cgr faster); x_bound = bound time / cgr time."
		for (ci = 1; ci <= nc; ci++) {
			c = coll[ci]
			printf "\n%s (busbw factor %s)\n", c, form[c]
			if (c == "allreduce")
				printf "%-3s %7s %10s %10s %10s %10s %8s %8s %8s %8s %7s %7s\n", "n", "size", \
					"cgr_us", "ompi_us", "gloo_us", "bound_us", "cgr_bus", "ompi_bus", "gloo_bus", "bnd_bus", "x_ompi", "x_bound"
			else
				printf "%-3s %7s %10s %10s %8s %8s %7s\n", "n", "size", "cgr_us", "ompi_us", "cgr_bus", "ompi_bus", "x_ompi"
			for (ri = 1; ri <= nr; ri++) for (si = 1; si <= ns; si++) {
				cs = c "/" rk[ri] "r/" sz[si]
				tc = get(cs, "cgr", "time_us"); tm = get(cs, "openmpi", "time_us")
				if (tc == "" && tm == "") continue
				flag = (cs in wrong) ? "  WRONG RESULT" : ""
				if (c == "allreduce") {
					tg = get(cs, "gloo", "time_us"); tb = get(cs, "memcpy_bound", "time_us")
					printf "%-3s %7s %10s %10s %10s %10s %8s %8s %8s %8s %7s %7s%s\n", rk[ri], sz[si], \
						f(tc, "%.2f"), f(tm, "%.2f"), f(tg, "%.2f"), f(tb, "%.2f"), \
						f(get(cs, "cgr", "busbw"), "%.3f"), f(get(cs, "openmpi", "busbw"), "%.3f"), \
						f(get(cs, "gloo", "busbw"), "%.3f"), f(get(cs, "memcpy_bound", "busbw"), "%.3f"), \
						f(ratio(tm, tc), "%.2f"), f(ratio(tb, tc), "%.2f"), flag
				} else {
					printf "%-3s %7s %10s %10s %8s %8s %7s%s\n", rk[ri], sz[si], f(tc, "%.2f"), f(tm, "%.2f"), \
						f(get(cs, "cgr", "busbw"), "%.3f"), f(get(cs, "openmpi", "busbw"), "%.3f"), \
						f(ratio(tm, tc), "%.2f"), flag
				}
			}
		}
		print ""
	}
	# Targets: printed, never fatal.
	t8c = get("allreduce/2r/8B", "cgr", "time_us"); t8m = get("allreduce/2r/8B", "openmpi", "time_us")
	a16c = get("allreduce/2r/16MiB", "cgr", "algbw"); a16m = get("allreduce/2r/16MiB", "openmpi", "algbw")
	a16b = get("allreduce/2r/16MiB", "memcpy_bound", "algbw")
	w4 = get("run/4r", "cgr", "wall_s"); s4 = get("sweep/4r", "cgr", "wall_s")
	t84 = get("allreduce/4r/8B", "cgr", "time_us")
	nt = 0
	tn[++nt] = "allreduce 2r 8B: cgr time <= 0.5x Open MPI"
	tv[nt] = ratio(t8c, t8m); tl[nt] = 0.5; tdir[nt] = "le"; tx[nt] = sprintf("cgr %s us, Open MPI %s us", f(t8c, "%.2f"), f(t8m, "%.2f"))
	tm_[nt] = "time_ratio_to_openmpi"
	tn[++nt] = "allreduce 2r 16MiB: cgr algbw >= 2x Open MPI"
	tv[nt] = ratio(a16c, a16m); tl[nt] = 2; tdir[nt] = "ge"; tx[nt] = sprintf("cgr %s GB/s, Open MPI %s GB/s", f(a16c, "%.3f"), f(a16m, "%.3f"))
	tm_[nt] = "algbw_ratio_to_openmpi"
	tn[++nt] = "allreduce 2r 16MiB: cgr algbw >= 0.6x memcpy bound"
	tv[nt] = ratio(a16c, a16b); tl[nt] = 0.6; tdir[nt] = "ge"; tx[nt] = sprintf("cgr %s GB/s, bound %s GB/s", f(a16c, "%.3f"), f(a16b, "%.3f"))
	tm_[nt] = "algbw_ratio_to_memcpy_bound"
	for (q = 1; q <= nt; q++) {
		if (tv[q] == "") res = "MISS (not measured)"
		else if ((tdir[q] == "le" && tv[q] <= tl[q]) || (tdir[q] == "ge" && tv[q] >= tl[q])) res = "PASS"
		else res = "MISS"
		tres[q] = res
		if (json != 1) printf "%-4s %s: ratio %s (%s)\n", substr(res, 1, 4), tn[q], f(tv[q], "%.3f"), tx[q]
	}
	m4 = get("run/4r", "openmpi", "wall_s")
	done4 = (s4 != "" && fail4 == 0)
	if (json != 1) {
		printf "%-4s 4 ranks on 2 cores: cgr finishes every round: ", done4 ? "PASS" : "MISS"
		if (s4 != "")
			printf "sweep of all collectives and sizes %.2f s (median of %d round(s); Open MPI, same sweep: %s s with mpirun start), allreduce 8B %s us", \
				w4, rounds, f(m4, "%.2f"), f(t84, "%.2f")
		if (fail4 > 0) printf "; %d run(s) failed or hung (see failures)", fail4
		print ""
		printf "driver: %.1f s in all; 1-min load average %s before the run, %s after it (the run adds its own ranks), %d CPUs\n", wall, load0, load1, ncpu
		if (load0 + 0 > 0.5)
			print "note: other processes were using the CPUs when the run started: expect noise; rerun on an idle machine"
	}
	for (q = 1; q <= nk; q++) {
		k = keys[q]; split(k, p, SUBSEP)
		printf "{\"bench\":\"collective_bw\",\"case\":\"%s\",\"impl\":\"%s\",\"metric\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"rounds\":%d", \
			p[1], p[2], p[3], med[k], unit[k], cnt[k]
		if (k in bytes) printf ",\"bytes\":%s", bytes[k]
		if (p[3] == "busbw" && (p[1] in factor)) printf ",\"busbw_factor\":%s", factor[p[1]]
		print "}"
	}
	if (s4 != "")
		printf "{\"bench\":\"collective_bw\",\"case\":\"target/4\",\"impl\":\"cgr\",\"metric\":\"sweep_4r_wall_s\",\"value\":%.6g,\"unit\":\"s\",\"pass\":%s,\"what\":\"4 ranks on 2 cores finish promptly\"}\n", \
			w4, done4 ? "true" : "false"
	for (q = 1; q <= nt; q++)
		if (tv[q] != "")
			printf "{\"bench\":\"collective_bw\",\"case\":\"target/%d\",\"impl\":\"cgr\",\"metric\":\"%s\",\"value\":%.6g,\"unit\":\"x\",\"limit\":%s,\"pass\":%s,\"what\":\"%s\"}\n", \
				q, tm_[q], tv[q], tl[q], tres[q] == "PASS" ? "true" : "false", tn[q]
}' "$tmp/json"

if [ -s "$tmp/fail" ]; then
	if [ "$json" = 1 ]; then
		{ echo "failures:"; cat "$tmp/fail"; } >&2
	else
		echo "failures:"
		cat "$tmp/fail"
	fi
fi
exit 0
