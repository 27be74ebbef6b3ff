#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS [TARGET...]]: builds the fuzz targets of
# tests/fuzz/ (one .c each) with clang's libFuzzer, ASan and UBSan
# against cgr's sources, in build-fuzz/ (not through automake: the normal
# build never needs clang), and runs each for SECONDS (default 20) from
# its committed seed corpus tests/fuzz/corpus/<target>/.  New inputs go
# to build-fuzz/corpus/<target>/, a crash to build-fuzz/crash/<target>-*
# (rerun one: build-fuzz/fuzz-<target> FILE).  Installs what is missing
# (clang-14 and its libFuzzer runtime, and scripts/deps.sh's packages).
# Prints a TAP line per target, then "fuzz: N passed, N failed".
#
# scripts/fuzz.sh --seeds: writes the seed corpora again, from each
# target's own seed writer (LLVMFuzzerInitialize with CGR_FUZZ_SEEDS).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build-fuzz
seeds=no
if [ "${1:-}" = --seeds ]; then
	seeds=yes
	shift
fi
secs=20
if [ "$seeds" = no ] && [ $# -gt 0 ]; then
	secs=$1
	shift
fi

fail() {
	echo "not ok 1 - fuzz: $*"
	echo "fuzz: 0 passed, 1 failed"
	exit 1
}

# clang with a libFuzzer runtime: clang-14 (Debian 12), else clang.
cc_works() {
	printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ return (int)(d[0] * 0 + n * 0); }\n' |
		"$1" -x c -fsanitize=fuzzer,address,undefined - \
			-o "$out/cc-check" >/dev/null 2>&1
}
mkdir -p "$out"
CC=${FUZZ_CC:-}
if [ -z "$CC" ]; then
	for c in clang-14 clang; do
		if command -v "$c" >/dev/null && cc_works "$c"; then
			CC=$c
			break
		fi
	done
fi
if [ -z "$CC" ]; then
	echo "cgr: installing clang-14 libclang-rt-14-dev (libFuzzer)" >&2
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -q >&2
	$SUDO apt-get install -y -q --no-install-recommends clang-14 \
		libclang-rt-14-dev >&2 || fail "could not install clang-14"
	CC=clang-14
	cc_works "$CC" || fail "$CC cannot build a libFuzzer target"
fi
"$top/scripts/deps.sh" >&2 || fail "scripts/deps.sh failed"

# cgr's sources, as the sanitizer builds compile them, without those an
# option builds (the cuda and nccl backends, fault injection: a
# Makemodule.am names them in EXTRA_DIST); cgr/version.h as configure
# would write it.
ver() { sed -n "s/^cgr_version_$1=//p" "$top/configure.ac"; }
mkdir -p "$out/include/cgr" "$out/obj"
sed -e "s/@CGR_VERSION_MAJOR@/$(ver major)/" \
	-e "s/@CGR_VERSION_MINOR@/$(ver minor)/" \
	-e "s/@CGR_VERSION_PATCH@/$(ver patch)/" \
	-e "s/@PACKAGE_VERSION@/$(ver major).$(ver minor).$(ver patch)/" \
	"$top/include/cgr/version.h.in" >"$out/include/cgr/version.h.new"
cmp -s "$out/include/cgr/version.h.new" "$out/include/cgr/version.h" ||
	cp "$out/include/cgr/version.h.new" "$out/include/cgr/version.h"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
CFLAGS="-std=gnu11 -gline-tables-only -O1 -fno-omit-frame-pointer -pthread -D_GNU_SOURCE \
-DCGR_SANITIZE -I$top/include -I$out/include -I$top/src $SAN"
optional=$(grep -h '^EXTRA_DIST +=' "$top"/src/*/Makemodule.am |
	grep -oE 'src/[^ ]+\.c')
srcs=$(cd "$top" && find src -name '*.c' | sort | grep -vxF "$optional")
# A makefile, so that a second run rebuilds only what changed (objects
# depend on the headers they include, and on the makefile: its flags).
{
	echo "CC = $CC"
	echo "CFLAGS = $CFLAGS"
	echo "OBJS = $(echo "$srcs" | sed 's|^src/\(.*\)\.c$|obj/\1.o|' | tr '\n' ' ')"
	echo "libcgr-fuzz.a: \$(OBJS)"
	printf '\trm -f $@ && ar rcs $@ $(OBJS)\n'
	echo "obj/%.o: $top/src/%.c Makefile"
	printf '\t@mkdir -p $(dir $@)\n'
	printf '\t$(CC) $(CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@\n'
	echo "fuzz-%: $top/tests/fuzz/%.c libcgr-fuzz.a Makefile"
	printf '\t$(CC) $(CFLAGS) -fsanitize=fuzzer -MMD -MP $< libcgr-fuzz.a -luring -lpthread -lm -o $@\n'
	echo '-include $(OBJS:.o=.d) $(wildcard fuzz-*.d)'
} >"$out/Makefile.new"
cmp -s "$out/Makefile.new" "$out/Makefile" || mv "$out/Makefile.new" "$out/Makefile"
rm -f "$out/Makefile.new"
make -C "$out" -s -j"$(nproc)" libcgr-fuzz.a >"$out/build.log" 2>&1 ||
	{ tail -20 "$out/build.log"; fail "cgr's sources do not build"; }

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	for f in "$top"/tests/fuzz/*.c; do
		t=$(basename "$f" .c)
		targets+=("$t")
	done
fi

pass=0 failed=0 n=0
for t in "${targets[@]}"; do
	n=$((n + 1))
	bin=$out/fuzz-$t
	if ! make -C "$out" -s "fuzz-$t" >"$out/$t.build.log" 2>&1; then
		echo "not ok $n - fuzz/$t does not build"
		sed 's/^/# /' "$out/$t.build.log" | tail -20
		failed=$((failed + 1))
		continue
	fi
	if [ "$seeds" = yes ]; then
		rm -rf "$top/tests/fuzz/corpus/$t"
		mkdir -p "$top/tests/fuzz/corpus/$t"
		if CGR_FUZZ_SEEDS="$top/tests/fuzz/corpus/$t" "$bin" \
			>"$out/$t.log" 2>&1; then
			echo "ok $n - fuzz/$t: $(ls "$top/tests/fuzz/corpus/$t" | wc -l) seeds written"
			pass=$((pass + 1))
		else
			echo "not ok $n - fuzz/$t: writing its seeds failed"
			failed=$((failed + 1))
		fi
		continue
	fi
	mkdir -p "$out/corpus/$t" "$out/crash" "$top/tests/fuzz/corpus/$t"
	"$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 \
		-print_final_stats=1 -artifact_prefix="$out/crash/$t-" \
		"$out/corpus/$t" "$top/tests/fuzz/corpus/$t" \
		>"$out/$t.log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log")
	if [ $rc -eq 0 ]; then
		echo "ok $n - fuzz/$t: ${runs:-?} runs in ${secs} s"
		pass=$((pass + 1))
	else
		echo "not ok $n - fuzz/$t: exit $rc after ${runs:-?} runs (log: $out/$t.log)"
		grep -E 'ERROR|invariant|runtime error|SUMMARY|Test unit written' \
			"$out/$t.log" | head -10 | sed 's/^/# /'
		failed=$((failed + 1))
	fi
done
echo "1..$n"
echo "fuzz: $pass passed, $failed failed"
[ "$failed" -eq 0 ]
