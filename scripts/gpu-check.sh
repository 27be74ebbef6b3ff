#!/usr/bin/env bash
# scripts/gpu-check.sh prep | run
#
# The checks that need a GPU, for the `device` tool (a machine with an
# NVIDIA GPU, CUDA and no Debian packages or network).
#   prep  (here): builds the test programs and copies them, and the shared
#         libraries they need beyond glibc, into .gpulibs/ (ignored by git).
#   run   (there, in the repo root, carrying .gpulibs): finds libcudart
#         (libcudart.so.13, else .so.12) and libnccl.so.2 on the machine:
#         CGR_GPU_LIBDIRS (colon-separated) first, then the CUDA toolkit,
#         the loader's cache, and Python wheels in every site-packages
#         (nvidia/cu13/lib, nvidia/cuda_runtime/lib, nvidia/nccl/lib);
#         prints the path and version of each and puts their folders on
#         LD_LIBRARY_PATH.  No libcudart is a failure (nothing runs); no
#         libnccl fails the NCCL step (the others still run).  Then, each
#         step under its own time limit:
#           device-stream   60 s  streams and events on CUDA device 0
#           graph-stream    90 s  every worker's compute stream on it
#           graph-overlap   90 s  (CGR_TEST_WORKER_DEVICE=0)
#           gpu-nccl       200 s  the NCCL backend on the real libnccl
#         (tests/gpu-nccl: every operation and dtype on one rank, two
#         ranks on one GPU, latency against raw NCCL, event-to-future
#         latency, overlap, a device task's list output, a faulting kernel
#         under a stream and under a graph).  The whole run stays under
#         CGR_GPU_BUDGET seconds (default 450, under the 8 minutes it is
#         allowed): a step gets what is left if that is less, and one with
#         under 15 s left fails as not run.  A skip on the GPU machine
#         (no CUDA device, no NCCL) is a failure.
#         Each step's output goes to $OUT/<name>.log; $OUT/results.jsonl
#         gets one line per TAP result and per "# json" line as it is
#         printed, and one status line per step and per library, so a run
#         cut short still leaves what it did.
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
prep)
	scripts/build.sh build >/dev/null
	make -C build -s tests/device-stream tests/graph-stream \
		tests/graph-overlap tests/gpu-nccl
	# Ignored by a .gitignore of its own (in a worktree .git is a file,
	# and info/exclude is shared by every worktree).
	mkdir -p .gpulibs
	echo '*' >.gpulibs/.gitignore
	cp build/tests/device-stream build/tests/graph-stream \
		build/tests/graph-overlap build/tests/gpu-nccl .gpulibs/
	for lib in liburing.so.2 libjemalloc.so.2; do
		cp -L "$(ldd build/tests/device-stream |
			awk -v l="$lib" '$1 == l { print $3 }')" .gpulibs/
	done
	echo "carry: .gpulibs"
	;;
run)
	start=$(date +%s)
	budget=${CGR_GPU_BUDGET:-450}
	out=${OUT:-/tmp}
	res=$out/results.jsonl
	: >"$res"
	rc=0
	# A JSON string's body.
	esc() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
	status() { # step, status, rc, seconds, note
		printf '{"step":"%s","status":"%s","rc":%s,"seconds":%s,"note":"%s"}\n' \
			"$1" "$2" "$3" "$4" "$(esc "$5")" | tee -a "$res"
	}

	# ---- the libraries ----
	site_dirs() {
		if command -v python3 >/dev/null 2>&1; then
			timeout 10 python3 -c 'import site
for d in site.getsitepackages() + [site.getusersitepackages()]:
    print(d)' 2>/dev/null || true
		fi
		for d in /usr/local/lib/python3*/*-packages \
			/usr/lib/python3*/*-packages /usr/lib/python3/dist-packages \
			/opt/conda/lib/python3*/site-packages \
			"${VIRTUAL_ENV:-/nonexistent}"/lib/python3*/site-packages \
			"$HOME"/.local/lib/python3*/site-packages; do
			[ -d "$d" ] && echo "$d"
		done
	}
	dirs=$(
		echo "${CGR_GPU_LIBDIRS:-}" | tr ':' '\n'
		echo /usr/local/cuda/lib64
		echo /usr/local/cuda/lib
		for sp in $(site_dirs); do
			echo "$sp/nvidia/cu13/lib"
			echo "$sp/nvidia/cuda_runtime/lib"
			echo "$sp/nvidia/nccl/lib"
		done
		ldconfig -p 2>/dev/null |
			awk '/libcudart\.so\.1[23] |libnccl\.so\.2 / { print $NF }' |
			xargs -r -n1 dirname
	)
	find_lib() { # soname...: the first found, in order of names then dirs
		local n d
		for n in "$@"; do
			for d in $dirs; do
				[ -n "$d" ] && [ -e "$d/$n" ] &&
					{ echo "$d/$n"; return 0; }
			done
		done
		return 1
	}
	libver() { # what a library says its version is
		case "$1" in
		*nccl*) grep -a -o -m1 'NCCL version [0-9][0-9.+a-z]*' "$1" |
				head -1 ;;
		*) basename "$(readlink -f "$1")" | sed 's/^libcudart\.so\.//' ;;
		esac
	}
	libpath=$PWD/.gpulibs
	if cudart=$(find_lib libcudart.so.13 libcudart.so.12); then
		v=$(libver "$cudart")
		echo "libcudart: $cudart ($v)"
		printf '{"lib":"cudart","path":"%s","version":"%s"}\n' \
			"$(esc "$cudart")" "$(esc "$v")" >>"$res"
		libpath=$libpath:$(dirname "$cudart")
	else
		status libraries fail 1 0 "no libcudart.so.13 or .so.12 in: $(echo $dirs)"
		exit 1
	fi
	if nccl=$(find_lib libnccl.so.2); then
		v=$(libver "$nccl")
		echo "libnccl: $nccl ($v)"
		printf '{"lib":"nccl","path":"%s","version":"%s"}\n' \
			"$(esc "$nccl")" "$(esc "$v")" >>"$res"
		libpath=$libpath:$(dirname "$nccl")
	else
		status libraries fail 1 0 "no libnccl.so.2 in: $(echo $dirs)"
		rc=1
	fi
	export LD_LIBRARY_PATH="$libpath:${LD_LIBRARY_PATH:-}"
	timeout 20 nvidia-smi -L || true

	# ---- the steps ----
	step() { # name, seconds, then the command
		local name=$1 limit=$2 left t0 src
		shift 2
		left=$((budget - ($(date +%s) - start)))
		[ "$left" -lt "$limit" ] && limit=$left
		if [ "$limit" -lt 15 ]; then
			status "$name" fail 1 0 "not run: the budget is spent"
			rc=1
			return
		fi
		t0=$(date +%s)
		set +e
		timeout -k 5 "$limit" "$@" 2>&1 |
			awk -v n="$name" -v res="$res" '
			function esc(s) {
				gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s)
				gsub(/\t/, " ", s); return s
			}
			{ print; fflush() }
			/^# json / {
				s = $0; sub(/^# json /, "", s)
				print s >>res; fflush(res)
			}
			/^(not )?ok / {
				printf "{\"test\":\"%s\",\"line\":\"%s\"}\n",
					n, esc($0) >>res
				fflush(res)
			}' | tee "$out/$name.log"
		src=${PIPESTATUS[0]}
		set -e
		if [ "$src" -eq 124 ] || [ "$src" -eq 137 ]; then
			status "$name" timeout "$src" $(($(date +%s) - t0)) \
				"killed at its limit of ${limit} s"
			rc=1
		elif [ "$src" -ne 0 ]; then
			status "$name" fail "$src" $(($(date +%s) - t0)) ""
			rc=1
		elif grep -qE '# SKIP no (CUDA device|NCCL)' "$out/$name.log"; then
			status "$name" fail 0 $(($(date +%s) - t0)) \
				"skipped on the GPU machine: $(grep -m1 '# SKIP' "$out/$name.log")"
			rc=1
		else
			status "$name" pass 0 $(($(date +%s) - t0)) ""
		fi
	}
	step device-stream 60 .gpulibs/device-stream
	CGR_TEST_WORKER_DEVICE=0 step graph-stream 90 .gpulibs/graph-stream
	CGR_TEST_WORKER_DEVICE=0 step graph-overlap 90 .gpulibs/graph-overlap
	if [ -n "${nccl:-}" ]; then
		step gpu-nccl 200 .gpulibs/gpu-nccl
	else
		status gpu-nccl fail 1 0 "not run: no libnccl.so.2"
	fi
	echo "gpu-check: $(($(date +%s) - start)) s, rc $rc"
	exit $rc
	;;
*)
	echo "usage: $0 prep|run" >&2
	exit 2
	;;
esac
