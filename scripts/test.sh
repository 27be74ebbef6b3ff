#!/usr/bin/env bash
# scripts/test.sh [DIR [configure args...]]: installs what is missing,
# builds cgr in DIR (default: build) with the tests' fault injection
# (--enable-fault-injection) and runs the whole test suite.
# Prints one closing line: "tests: N passed, N failed, N skipped".
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-build}
[ $# -gt 0 ] && shift
"$top/scripts/deps.sh" || exit 1
if ! "$top/scripts/build.sh" "$dir" --enable-fault-injection "$@"; then
	echo "tests: 0 passed, 1 failed, 0 skipped"
	exit 1
fi
cd "$top/$dir" 2>/dev/null || cd "$dir"
make -j"$(nproc)" -s check >check.out 2>&1
rc=$?
grep -E "^(PASS|FAIL|ERROR|XPASS|SKIP)" check.out | grep -v "^PASS" || true
# test-suite.log counts every TAP test point.
count() { awk -v k="# $1:" '$0 ~ "^"k {print $3; exit}' test-suite.log 2>/dev/null; }
p=$(count PASS); f=$(count FAIL); s=$(count SKIP)
x=$(count XPASS); e=$(count ERROR); xf=$(count XFAIL)
p=$(( ${p:-0} + ${xf:-0} )); f=$(( ${f:-0} + ${x:-0} + ${e:-0} )); s=${s:-0}
if [ $rc -ne 0 ] && [ $f -eq 0 ]; then
	tail -30 check.out
	f=1
fi
echo "tests: $p passed, $f failed, $s skipped"
[ $rc -eq 0 ] && [ $f -eq 0 ]
