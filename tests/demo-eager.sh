#!/bin/sh
# tests/demo-eager.sh: the demo's graphs (its 4-worker graph and the
# tensor-parallel MLP with its allreduce) run eagerly give the values of
# compiled execution: tests/demo-eager is examples/demo.c built with
# tests/t_eager.h, which runs every graph it compiles eagerly; the demo
# checks every result itself and exits non-zero on a mismatch.  TAP.
set -u
echo "1..2"
bin=${abs_top_builddir:?run from make check}/tests/demo-eager
out=$("$bin" 300 2>&1)
rc=$?
if [ $rc -eq 0 ]; then
	echo "ok 1 - the demo's graphs run eagerly, every result right"
else
	echo "not ok 1 - the demo's graphs run eagerly (exit $rc)"
	echo "$out" | sed 's/^/# /'
fi
if echo "$out" | grep -q "results correct" &&
   echo "$out" | grep -q "bit-exact"; then
	echo "ok 2 - both graphs checked: $(echo "$out" | grep -c '^demo:') lines of report"
else
	echo "not ok 2 - the demo's report"
	echo "$out" | sed 's/^/# /'
fi
