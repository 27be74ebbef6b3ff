#!/bin/sh
# scripts/hosts-demo.sh: the 3-host example (examples/hosts) on this one
# machine: three network namespaces on a bridge of its own, each a "host"
# (own address, host name and TMPDIR), mpirun as the launcher; removed
# after.  Root only.  Installs what is missing and builds first, as
# scripts/demo.sh does.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "hosts-demo: needs root (network namespaces)"; exit 1; }
"$root/scripts/deps.sh"
"$root/scripts/build.sh" build
set +e
abs_top_srcdir=$root
. "$root/tests/netns.sh"
netns_init
netns_up || { cat "$tmp/up.err"; exit 1; }
netns_mpirun 120 "$tmp/out" "$tmp/err" "$root/build/examples/hosts"
rc=$?
cat "$tmp/out"
[ $rc = 0 ] || cat "$tmp/err"
exit $rc
