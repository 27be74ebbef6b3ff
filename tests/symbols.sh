#!/bin/sh
# tests/symbols.sh: what libcgr.a exports.  A static archive is linked into
# the user's program, so every global it defines must be a name of cgr.h;
# internals, global inside libcgr_internal.a (the archive the tests link),
# must all be named cgr__*.  TAP.
set -u
echo "1..3"
b=${abs_top_builddir:?run from make check}
src=${abs_top_srcdir:?run from make check}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Names the compiler makes (sanitizers' __odr_asan.*, ...) start with __.
defined() {
	nm -g --defined-only "$1" | awk 'NF == 3 && $3 !~ /^__/ { print $3 }' |
		sort -u
}
grep -oE '\bcgr_[a-z0-9_]+ *\(' "$src/include/cgr.h" | tr -d '( ' |
	sort -u >"$tmp/public"
defined "$b/libcgr.a" >"$tmp/lib"
extra=$(comm -23 "$tmp/lib" "$tmp/public" | tr '\n' ' ')
n=$(wc -l <"$tmp/lib")
if [ -z "$extra" ] && [ "$n" -gt 50 ]; then
	echo "ok 1 - libcgr.a defines $n globals, every one a name of cgr.h"
else
	echo "not ok 1 - libcgr.a defines $n globals; not in cgr.h: $extra"
fi
defined "$b/libcgr_internal.a" >"$tmp/all"
stray=$(comm -23 "$tmp/all" "$tmp/public" | grep -v '^cgr__' | tr '\n' ' ')
if [ -z "$stray" ]; then
	echo "ok 2 - every other global of the objects is named cgr__*"
else
	echo "not ok 2 - globals neither in cgr.h nor cgr__*: $stray"
fi
hidden=$(comm -23 "$tmp/all" "$tmp/public" | wc -l)
if [ "$hidden" -gt 100 ] && ! grep -q '^cgr__ring_enqueue$' "$tmp/lib"; then
	echo "ok 3 - the $hidden internal globals (cgr__ring_enqueue, ...) are local in libcgr.a"
else
	echo "not ok 3 - internals in libcgr.a: $hidden hidden"
fi
