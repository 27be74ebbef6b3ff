#!/bin/sh
# tests/kinds.sh: where a worker lives is one interface (graph/worker.h,
# struct cgr__worker_ops).  Only the implementations (src/thread/,
# src/proc/, src/remote/) and the registry (src/drive/worker.c) may tell one kind of
# worker from another; no other code of src/ names a kind, a kind's ops
# table or state, or the process workers' internals.  Comments may.  TAP.
set -u
echo "1..3"
src=${abs_top_srcdir:?run from make check}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# What asks which kind a worker is: the public kinds, the fields that once
# said so (remote, kind) or hold a kind's own state (impl, proc), a kind's
# ops table, the process workers' functions and types, comparing a
# table's name.
pat='CGR_WORKER_(THREAD|PROCESS)\b|->(remote|proc|impl)\b'
pat="$pat"'|(\bw|worker|->w)->kind\b|\bcgr__(proc|pgraph)_|struct cgr__procs?\b'
pat="$pat"'|\bcgr__thread_ops\b|strcmp\([^;]*ops->name'
# Each line of C files without its comments, as FILE:LINE: code.
code() {
	awk '{
		line = $0; out = "";
		while (line != "") {
			if (inc) {
				i = index(line, "*/");
				if (!i) { line = ""; break }
				line = substr(line, i + 2); inc = 0;
			} else {
				i = index(line, "/*");
				if (!i) { out = out line; line = ""; break }
				out = out substr(line, 1, i - 1);
				line = substr(line, i + 2); inc = 1;
			}
		}
		print FILENAME ":" FNR ": " out
	}' "$@"
}
cd "$src" || exit 1
files=$(find src -name '*.[ch]' |
	grep -v '^src/thread/\|^src/proc/\|^src/remote/' |
	grep -vx 'src/drive/worker.c' | sort)
code $files | grep -E "$pat" >"$tmp/found"
n=$(echo "$files" | wc -l)
if [ -s "$tmp/found" ]; then
	echo "not ok 1 - outside thread/, proc/, remote/ and the registry, code" \
		"asks which kind a worker is:"
	sed 's/^/# /' "$tmp/found"
else
	echo "ok 1 - none of $n files outside thread/, proc/, remote/ and" \
		"drive/worker.c asks which kind a worker is"
fi
# The registry is where the kinds are named (else the check above would
# pass over nothing).
if code src/drive/worker.c | grep -q 'CGR_WORKER_PROCESS' &&
	code src/drive/worker.c | grep -q 'CGR_WORKER_THREAD'; then
	echo "ok 2 - the registry (drive/worker.c) names both kinds"
else
	echo "not ok 2 - drive/worker.c does not name CGR_WORKER_THREAD" \
		"and CGR_WORKER_PROCESS"
fi
# And the check itself can fail: a planted test of the kind is caught,
# one in a comment is not.
mkdir -p "$tmp/src/drive"
cat >"$tmp/src/drive/x.c" <<'C'
/* a comment may say CGR_WORKER_PROCESS and w->remote */
static int f(const cgr_worker *w) { return w->kind == 1; }
static int g(const cgr_worker *w) { return w->ops == &cgr__proc_ops; }
static int h(const cgr_worker *w) { return p->w->remote; }
C
got=$(cd "$tmp" && code src/drive/x.c | grep -cE "$pat")
if [ "$got" -eq 3 ]; then
	echo "ok 3 - planted tests of the kind are caught (3 of 3)," \
		"comments pass"
else
	echo "not ok 3 - planted tests of the kind: $got caught, 3 expected"
fi
