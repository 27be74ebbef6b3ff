#!/bin/sh
# tests/func-length.sh: no function in src/ is longer than 80 lines unless
# the comment right above it gives the reason ("(Long: ...").  Functions in
# the kernel style of the tree: a line starting with "{" opens one, a line
# starting with "}" closes it.  TAP.
set -u
echo "1..1"
src=${abs_top_srcdir:?run from make check}
out=$(find "$src/src" -name '*.c' | sort | xargs awk '
	FNR == 1 { cmt = "" }
	/^\/\*/ { cmt = "" ; incmt = 1 }
	incmt { cmt = cmt $0 }
	/\*\// { incmt = 0 }
	/^[a-zA-Z_].*\(/ { sig = $0; why = cmt }
	/^\{/ { start = FNR; name = sig; reason = why }
	/^\}/ {
		if (start && FNR - start + 1 > 80 && reason !~ /\(Long:/)
			printf "%s:%d %d lines: %s\n", FILENAME, start,
			       FNR - start + 1, name
		start = 0; cmt = ""
	}
	/^$/ { if (!incmt && !start) cmt = "" }
')
if [ -z "$out" ]; then
	echo "ok 1 - every function of src/ is at most 80 lines or says why"
else
	echo "not ok 1 - functions over 80 lines without a reason:"
	echo "$out" | sed 's/^/# /'
fi
