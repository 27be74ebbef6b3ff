#!/bin/sh
# tests/install.sh: `make install` into a scratch root, then build and run a
# program that uses nothing but `pkg-config --cflags --libs cgr`, and the
# README's sample program as it stands there (-Wall -Wextra -Werror).  TAP.
set -u
echo "1..6"
b=${abs_top_builddir:?run from make check}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if make -s -C "$b" install DESTDIR="$tmp" >"$tmp/install.log" 2>&1; then
	echo "ok 1 - make install DESTDIR"
else
	echo "not ok 1 - make install DESTDIR"; sed 's/^/# /' "$tmp/install.log"
fi
pc=$(find "$tmp" -name cgr.pc | head -1)
lib=$(find "$tmp" -name libcgr.a | head -1)
hdr=$(find "$tmp" -path '*/cgr/version.h' | head -1)
if [ -n "$pc" ] && [ -n "$lib" ] && [ -n "$hdr" ] &&
	[ -n "$(find "$tmp" -name cgr.h)" ]; then
	echo "ok 2 - installed libcgr.a, cgr.h, cgr/version.h and cgr.pc"
else
	echo "not ok 2 - installed files missing"; exit 1
fi
# The .pc names the configured prefix; point it at the scratch root.
prefix=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=prefix cgr)
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config \
	--define-variable=prefix="$tmp$prefix" --cflags --libs cgr)
cat >"$tmp/app.c" <<'PROG'
#include <stdio.h>
#include <string.h>
#include <cgr.h>
static int add1(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	static __thread unsigned char b[1];
	(void)tc, (void)st, (void)nin, (void)nout;
	b[0] = ((const unsigned char *)in[0].u.bytes.data)[0] + 1;
	out[0] = cgr_value_bytes(b, 1);
	return 0;
}
int main(void)
{
	cgr_ctx *ctx; cgr_worker *w; cgr_graph *g; cgr_node *x, *y;
	cgr_compiled *c; cgr_ref r; cgr_value v, o;
	unsigned char in = 41;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	if (cgr_ctx_create(NULL, &ctx) || cgr_worker_create(ctx, NULL, &w) ||
	    cgr_graph_create(ctx, &g) || cgr_graph_input(g, 0, &x))
		return 1;
	d.fn = add1;
	cgr_graph_task(g, w, &d, &x, 1, &y, 1);
	cgr_graph_output(g, &y, 1);
	if (cgr_graph_compile(g, NULL, &c))
		return 2;
	v = cgr_value_bytes(&in, 1);
	if (cgr_execute(c, &v, 1, &r) || cgr_ref_get(c, r, -1, &o, 1))
		return 3;
	printf("cgr %s: %d\n", CGR_VERSION_STRING,
	       ((const unsigned char *)o.u.bytes.data)[0]);
	cgr_ref_release(c, r);
	cgr_compiled_destroy(c);
	cgr_graph_destroy(g);
	cgr_ctx_destroy(ctx);
	return 0;
}
PROG
# shellcheck disable=SC2086
if ${CC:-cc} ${CGR_SAN_FLAGS:-} -o "$tmp/app" "$tmp/app.c" $flags \
	>"$tmp/cc.log" 2>&1; then
	echo "ok 3 - builds with only: pkg-config --cflags --libs cgr"
else
	echo "not ok 3 - build with pkg-config flags: $flags"
	sed 's/^/# /' "$tmp/cc.log"
fi
out=$("$tmp/app" 2>&1)
case "$out" in
*": 42") echo "ok 4 - runs: $out" ;;
*) echo "not ok 4 - runs: $out" ;;
esac
# The README's sample: the first C block of "Using it", verbatim.
src=${abs_top_srcdir:?run from make check}
awk '/^## Using it/ { on = 1 } on && /^```c$/ { inc = 1; next }
     inc && /^```$/ { exit } inc { print }' "$src/README.md" >"$tmp/sample.c"
# shellcheck disable=SC2086
if [ -s "$tmp/sample.c" ] &&
	${CC:-cc} ${CGR_SAN_FLAGS:-} -Wall -Wextra -Werror -o "$tmp/sample" \
	"$tmp/sample.c" $flags >"$tmp/cc2.log" 2>&1; then
	echo "ok 5 - the README's sample builds with -Wall -Wextra -Werror"
else
	echo "not ok 5 - the README's sample builds"
	sed 's/^/# /' "$tmp/cc2.log"
fi
out=$("$tmp/sample" 2>&1)
case "$out" in
42) echo "ok 6 - the README's sample prints 42" ;;
*) echo "not ok 6 - the README's sample prints: $out" ;;
esac
