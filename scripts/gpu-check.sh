#!/usr/bin/env bash
# scripts/gpu-check.sh prep | run
#
# The checks that need a GPU, for the `device` tool (a machine with an
# NVIDIA GPU, CUDA and no Debian packages or network).
#   prep  (here): builds the test programs and copies the shared libraries
#         they need beyond glibc into .gpulibs/ (ignored by git).
#   run   (there, in the repo root, carrying build/tests/device-stream and
#         .gpulibs): runs tests/device-stream, whose backend-neutral tests
#         then also run on CUDA device 0 (the cuda backend), and writes its
#         output to $OUT/device-stream.log.
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
prep)
	scripts/build.sh build >/dev/null
	make -C build -s tests/device-stream
	grep -qx '/.gpulibs/' .git/info/exclude 2>/dev/null ||
		echo /.gpulibs/ >>.git/info/exclude
	mkdir -p .gpulibs
	for lib in liburing.so.2 libjemalloc.so.2; do
		cp -L "$(ldd build/tests/device-stream |
			awk -v l="$lib" '$1 == l { print $3 }')" .gpulibs/
	done
	echo "carry: build/tests/device-stream .gpulibs"
	;;
run)
	export LD_LIBRARY_PATH="$PWD/.gpulibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
	nvidia-smi -L || true
	out=${OUT:-/tmp}
	set -o pipefail
	build/tests/device-stream 2>&1 | tee "$out/device-stream.log"
	;;
*)
	echo "usage: $0 prep|run" >&2
	exit 2
	;;
esac
