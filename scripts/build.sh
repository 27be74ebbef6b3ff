#!/usr/bin/env bash
# scripts/build.sh [DIR [configure args...]]: bootstraps autotools if
# needed and builds cgr out of tree in DIR (default: build), configured
# with those arguments (again if they differ from the last ones).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-build}
[ $# -gt 0 ] && shift
cd "$top"
[ -x configure ] || autoreconf -fi >/dev/null
mkdir -p "$dir"
cd "$dir"
# Configured again when options are given that differ from the last ones
# (the demo's build, then the tests' with fault injection); without
# options any configured build will do.
want="$*"
if [ ! -f Makefile ] ||
   { [ $# -gt 0 ] && [ "$(cat .cgr-configure-args 2>/dev/null)" != "$want" ]; }; then
	"$top/configure" -q "$@"
	printf '%s' "$want" > .cgr-configure-args
fi
make -j"$(nproc)" -s
