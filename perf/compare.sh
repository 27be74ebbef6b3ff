#!/usr/bin/env bash
# perf/compare.sh [-r rounds] [-b "bench [args]" ...] A_BUILD B_BUILD
#
# Runs the perf programs of two builds (say, the previous main and this
# tree) interleaved: each round runs every benchmark of A then of B, the
# next round B then A, so that drift of the machine (these VMs move vCPUs
# between host cores) falls on both alike.  Prints, per result, the median
# over rounds of A and of B and their ratio, next to the one-line floor
# each round measured; the JSON lines of every run are kept in
# $COMPARE_OUT (default: a temporary folder, printed).
#
#   perf/compare.sh /tmp/cgr-base/build build
#   perf/compare.sh -r 5 -b "ring_pingpong -w 5 -n 20000" A B
set -u
rounds=3
benches=()
while getopts "r:b:" o; do
	case $o in
	r) rounds=$OPTARG ;;
	b) benches+=("$OPTARG") ;;
	*) echo "usage: $0 [-r rounds] [-b 'bench [args]'] A B" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { echo "usage: $0 [-r rounds] [-b 'bench [args]'] A B" >&2; exit 2; }
for b in "${benches[@]}"; do
	# The benchmark's name first (a perf/ program of both builds).
	for d in "$1" "$2"; do
		[ -x "$d/perf/${b%% *}" ] || {
			echo "$0: -b '$b': no program $d/perf/${b%% *}" \
			     "(give the benchmark's name, then its arguments)" >&2
			exit 2
		}
	done
done
A=$1 B=$2
if [ ${#benches[@]} -eq 0 ]; then
	benches=("ring_pingpong -w 5 -n 20000" "graph_roundtrip -w 5 -n 20000"
		"overlap -w 2")
fi
out=${COMPARE_OUT:-$(mktemp -d)}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
	order="A B"
	[ $((r % 2)) -eq 0 ] && order="B A"
	for b in "${benches[@]}"; do
		for side in $order; do
			dir=$A
			[ "$side" = B ] && dir=$B
			# shellcheck disable=SC2086
			"$dir"/perf/$b 2>/dev/null | grep '^{' |
				sed "s/^{/{\"side\":\"$side\",\"round\":$r,/" \
					>>"$out/runs.jsonl"
		done
	done
done
echo "# $rounds rounds, interleaved; A = $A, B = $B; runs in $out/runs.jsonl"
python3 - "$out/runs.jsonl" <<'PY'
import json, statistics, sys
rows = {}
floors = {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    key = (j["bench"], j.get("case", ""), j.get("impl", ""), j["metric"])
    rows.setdefault(key, {}).setdefault(j["side"], []).append(j["value"])
    # Ratios each run measured against its own floor or bound: what
    # drift of the machine moves least.
    for r in ("ratio_to_floor", "ratio_to_ck", "x_bound"):
        if r in j:
            k2 = (key[0], key[1], key[2], key[3] + "/" + r[len("ratio_to_"):]
                  if r.startswith("ratio_to_") else key[3] + "/" + r)
            rows.setdefault(k2, {}).setdefault(j["side"], []).append(j[r])
    f = j.get("floor_ns")
    if j.get("impl") == "floor":
        f = j["value"]
    if f is not None:
        floors.setdefault((j["bench"], j["side"]), []).append(f)
med = statistics.median
print("%-16s %-28s %-10s %-18s %12s %12s %7s" %
      ("bench", "case", "impl", "metric", "A", "B", "B/A"))
for key in sorted(rows):
    a, b = rows[key].get("A"), rows[key].get("B")
    if not a or not b:
        continue
    ma, mb = med(a), med(b)
    ratio = mb / ma if ma else float("nan")
    fmt = "%12.3f %12.3f" if ma < 100 else "%12.1f %12.1f"
    print(("%-16s %-28s %-10s %-18s " + fmt + " %7.3f") %
          (key[0], key[1][:28], key[2][:10], key[3], ma, mb, ratio))
for (bench, side), v in sorted(floors.items()):
    print("floor (one cache line) %s %s: median %.1f ns, %.1f to %.1f" %
          (bench, side, med(v), min(v), max(v)))
PY
