#!/bin/sh
# tests/layers.sh: the layering of src/ stays true.  The README's layout
# table lists the src/ folders from the lowest layer to the highest; a
# file may include headers of its own folder and of folders listed before
# it, never of one listed after it (so the folders' include graph has no
# cycle).  Every src/ folder is in the table and every folder of the table
# exists.  TAP.
set -u
echo "1..3"
src=${abs_top_srcdir:?run from make check}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n 's/^| `src\/\([a-z_]*\)\/` |.*/\1/p' "$src/README.md" >"$tmp/order"
(cd "$src/src" && for d in */; do echo "${d%/}"; done) | sort >"$tmp/tree"
sort "$tmp/order" >"$tmp/table"
if cmp -s "$tmp/tree" "$tmp/table"; then
	echo "ok 1 - the README's layout table lists every src/ folder: $(tr '\n' ' ' <"$tmp/order")"
else
	echo "not ok 1 - the README's layout table and src/ differ"
	diff "$tmp/table" "$tmp/tree" | sed 's/^/# /'
fi
rank() { grep -nx "$1" "$tmp/order" | cut -d: -f1; }
bad=0 n=0
for f in $(cd "$src/src" && find . -name '*.[ch]' | sed 's|^\./||' | sort); do
	own=${f%%/*}
	ro=$(rank "$own")
	for inc in $(sed -n 's/^#include "\([a-z_]*\)\/.*/\1/p' "$src/src/$f" |
		sort -u); do
		n=$((n + 1))
		ri=$(rank "$inc")
		if [ -z "$ri" ] || [ -z "$ro" ] || [ "$ri" -gt "$ro" ]; then
			echo "# $f includes $inc/ (a higher layer)"
			bad=$((bad + 1))
		fi
	done
done
if [ "$bad" -eq 0 ] && [ "$n" -gt 50 ]; then
	echo "ok 2 - no file includes a higher layer ($n folder includes)"
else
	echo "not ok 2 - $bad of $n includes reach a higher layer"
fi
# And the check itself can fail: a lower layer including a higher one.
mkdir -p "$tmp/src/base"
echo '#include "run/run.h"' >"$tmp/src/base/x.c"
ri=$(rank run) ro=$(rank base)
if [ -n "$ri" ] && [ -n "$ro" ] && [ "$ri" -gt "$ro" ]; then
	echo "ok 3 - base/ including run/ would be caught (layer $ro < $ri)"
else
	echo "not ok 3 - the order puts run/ ($ri) at or below base/ ($ro)"
fi
