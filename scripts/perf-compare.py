#!/usr/bin/env python3
"""scripts/perf-compare.py OLD_BUILD NEW_BUILD [-r ROUNDS] [BENCH[:ARGS] ...]

Runs the same perf binaries of two builds side by side, interleaved
(old, new, old, new, ...; the first side alternates each round), each with
--json, and prints per result (bench, case, impl, metric) the median of
each side over the rounds and the ratio new/old, with the floor the
binaries printed next to each latency.  Only cgr's results (impl "cgr",
"cgr_on", ...) are compared: the reference rings and libraries did not
change.
Example:
  scripts/perf-compare.py /work/base/build build -r 5 \
      ring_pingpong:--quick graph_roundtrip:--quick
"""
import json
import statistics
import subprocess
import sys


def run(build, bench, args):
    cmd = [f"{build}/perf/{bench}", "--json"] + args
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    res = {}
    for line in out.stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            j = json.loads(line)
        except ValueError:
            continue
        impl = j.get("impl", "cgr")
        if not impl.startswith("cgr") or "value" not in j:
            continue
        case = j.get("case", "")
        if impl != "cgr":
            case += " " + impl[4:]
        key = (j.get("bench", bench), case, j.get("metric", ""))
        res[key] = (j["value"], j.get("unit", ""), j.get("floor_ns"))
    return res


def main():
    argv = sys.argv[1:]
    rounds = 5
    if len(argv) < 3:
        print(__doc__)
        return 2
    old, new = argv[0], argv[1]
    rest = argv[2:]
    if rest[0] == "-r":
        rounds = int(rest[1])
        rest = rest[2:]
    for spec in rest:
        bench, _, a = spec.partition(":")
        args = a.split() if a else []
        vals = {}
        for r in range(rounds):
            order = [("old", old), ("new", new)]
            if r % 2:
                order.reverse()
            for side, build in order:
                for key, v in run(build, bench, args).items():
                    vals.setdefault(key, {"old": [], "new": [], "unit": v[1],
                                          "floor": []})
                    vals[key][side].append(v[0])
                    if v[2] is not None:
                        vals[key]["floor"].append(v[2])
        print(f"## {bench} {' '.join(args)} ({rounds} rounds, interleaved)")
        print(f"{'case':28} {'metric':16} {'old':>12} {'new':>12} "
              f"{'new/old':>8} {'unit':8} floor_ns")
        for key in sorted(vals):
            v = vals[key]
            if not v["old"] or not v["new"]:
                continue
            mo = statistics.median(v["old"])
            mn = statistics.median(v["new"])
            ratio = mn / mo if mo else float("nan")
            fl = (f"{statistics.median(v['floor']):.0f}" if v["floor"]
                  else "")
            print(f"{key[1][:28]:28} {key[2][:16]:16} {mo:12.4g} {mn:12.4g} "
                  f"{ratio:8.3f} {v['unit'][:8]:8} {fl}")
            print(json.dumps({"bench": key[0], "case": key[1],
                              "metric": key[2], "old": mo, "new": mn,
                              "ratio": round(ratio, 4), "unit": v["unit"],
                              "rounds": rounds}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
