#!/usr/bin/env bash
# scripts/build.sh [DIR [configure args...]]: bootstraps autotools if
# needed and builds cgr out of tree in DIR (default: build).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-build}
[ $# -gt 0 ] && shift
cd "$top"
[ -x configure ] || autoreconf -fi >/dev/null
mkdir -p "$dir"
cd "$dir"
[ -f Makefile ] || "$top/configure" -q "$@"
make -j"$(nproc)" -s
