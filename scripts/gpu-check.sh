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
#         device 0; each writes its output to $OUT/<name>.log.
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
prep)
	scripts/build.sh build >/dev/null
	make -C build -s tests/device-stream tests/graph-stream \
		tests/graph-overlap
	grep -qx '/.gpulibs/' .git/info/exclude 2>/dev/null ||
		echo /.gpulibs/ >>.git/info/exclude
	mkdir -p .gpulibs
	cp build/tests/device-stream build/tests/graph-stream \
		build/tests/graph-overlap .gpulibs/
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
		CGR_TEST_WORKER_DEVICE=0 ".gpulibs/$t" 2>&1 |
			tee "$out/$t.log" || rc=1
	done
	exit $rc
	;;
*)
	echo "usage: $0 prep|run" >&2
	exit 2
	;;
esac
