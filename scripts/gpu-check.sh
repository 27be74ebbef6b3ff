#!/usr/bin/env bash
# scripts/gpu-check.sh prep | run
#
# The checks that need a GPU, for the `device` tool (a machine with an
# NVIDIA GPU, CUDA and no Debian packages or network).
#   prep  (here): builds the test programs and copies them, and the shared
#         libraries they need beyond glibc, into .gpulibs/ (ignored by git).
#   run   (there, in the repo root, carrying .gpulibs): runs
#         tests/device-stream, whose backend-neutral tests then also run on
#         CUDA device 0 (the cuda backend), then tests/graph-stream and
#         tests/graph-overlap with every worker's compute stream on CUDA
#         device 0, then tests/gpu-nccl (the NCCL backend on the real
#         libnccl: correctness of every operation and dtype on one rank,
#         two ranks on one GPU, cgr's latency over raw NCCL at 8 B and
#         16 MiB, event-to-future latency, overlap of a memset kernel, a
#         copy and an allreduce, a device task's list output, a faulting
#         kernel under a stream and under a graph); each writes its output to $OUT/<name>.log, and every
#         result line of all of them goes to $OUT/results.jsonl.  libnccl
#         (about 200 MB) is not carried: the machine's own is used
#         (/usr/local/cuda/lib64 or the loader's path); without one,
#         tests/gpu-nccl says so and skips.  Ten minutes at most.
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
prep)
	scripts/build.sh build >/dev/null
	make -C build -s tests/device-stream tests/graph-stream \
		tests/graph-overlap tests/gpu-nccl
	grep -qx '/.gpulibs/' .git/info/exclude 2>/dev/null ||
		echo /.gpulibs/ >>.git/info/exclude
	mkdir -p .gpulibs
	cp build/tests/device-stream build/tests/graph-stream \
		build/tests/graph-overlap build/tests/gpu-nccl .gpulibs/
	for lib in liburing.so.2 libjemalloc.so.2; do
		cp -L "$(ldd build/tests/device-stream |
			awk -v l="$lib" '$1 == l { print $3 }')" .gpulibs/
	done
	echo "carry: .gpulibs"
	;;
run)
	libs="$PWD/.gpulibs:/usr/local/cuda/lib64"
	export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
	nvidia-smi -L || true
	out=${OUT:-/tmp}
	set -o pipefail
	rc=0
	.gpulibs/device-stream 2>&1 | tee "$out/device-stream.log" || rc=1
	for t in graph-stream graph-overlap; do
		CGR_TEST_WORKER_DEVICE=0 timeout 150 ".gpulibs/$t" 2>&1 |
			tee "$out/$t.log" || rc=1
	done
	timeout 300 .gpulibs/gpu-nccl 2>&1 | tee "$out/gpu-nccl.log" || rc=1
	# Every result as one JSON line: TAP lines, and the JSON ones.
	for f in "$out"/*.log; do
		n=$(basename "$f" .log)
		sed -n 's/^# json //p' "$f"
		{ grep -E '^(not )?ok ' "$f" || true; } | sed 's/"/\\"/g' |
			awk -v n="$n" '{ printf "{\"test\":\"%s\",\"line\":\"%s\"}\n", n, $0 }'
	done >"$out/results.jsonl"
	exit $rc
	;;
*)
	echo "usage: $0 prep|run" >&2
	exit 2
	;;
esac
