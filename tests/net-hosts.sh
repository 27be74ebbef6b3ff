#!/bin/sh
# tests/net-hosts.sh: three "hosts" on one machine, and the bootstrap
# across them.  Three network namespaces joined by a bridge (mpirun, in
# the root namespace, reaches them from the bridge's address .254; every
# address lives on the test's own bridge and namespaces), each with its
# own address, host name (unshare --uts) and TMPDIR;
# mpirun (used as a launcher only) starts tests/net-boot in each through
# an rsh agent that enters the namespace.  Checks: the fixture comes up;
# three ranks on three distinct hosts, each seeing every rank's host
# through PMIx; rank 0's 128-byte id byte-identical at every rank; nothing
# of libmpi linked; nothing left behind (namespaces, links) after; and
# messages over UCX active messages between the hosts (UCX_TLS=tcp,self:
# shared memory would cross the "hosts"), every byte checked; and a
# device transport named in UCX_TLS (cuda_copy) left out of the control
# context, which says what it uses.
# Every step is bounded with timeout -k.  Skipped without root, ip,
# unshare, mpirun, or a build with PMIx; and under TSan (PMIx's own
# threads are not instrumented).  TAP.
set -u
echo "1..7"
bin=${abs_top_builddir:?run from make check}/tests/net-boot
skip_all() {
	for i in 1 2 3 4 5 6 7; do echo "ok $i # SKIP $1"; done
	exit 0
}
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
for t in ip unshare mpirun timeout; do
	command -v "$t" >/dev/null 2>&1 || skip_all "no $t"
done
out=$(ASAN_OPTIONS=detect_leaks=0 "$bin" 2>&1)
case "$out" in no-pmix:*) skip_all "${out#no-pmix: }";; esac
if nm "$bin" 2>/dev/null | grep -q __tsan_init; then
	skip_all "a TSan build (PMIx's own threads are not instrumented)"
fi

. "${abs_top_srcdir:?run from make check}/tests/netns.sh"
netns_init
if netns_up; then
	echo "ok 1 - three namespaces on a bridge ($net.1-3, tag $tag)"
else
	echo "not ok 1 - the fixture: $(head -3 "$tmp/up.err")"
	for i in 2 3 4 5 6 7; do echo "not ok $i # the fixture failed"; done
	exit 0
fi
NETNS_UCX_TLS=tcp,self,cuda_copy netns_mpirun 60 "$tmp/out" "$tmp/err" "$bin"
rc=$?
lines=$(grep -c '^rank [0-9]* size' "$tmp/out")
hosts=$(sed -n 's/^rank [0-9]* size 3 host \(h[0-9]\) .*/\1/p' "$tmp/out" |
	sort -u | tr '\n' ' ')
views=$(sed -n 's/.* hosts \([^ ]*\) id .*/\1/p' "$tmp/out" | sort -u |
	wc -l)
if [ $rc -eq 0 ] && [ "$lines" = 3 ] && [ "$hosts" = "h1 h2 h3 " ] &&
   [ "$views" = 1 ]; then
	echo "ok 2 - three ranks on hosts $hosts(launched by mpirun), each" \
	     "sees every rank's host: $(sed -n 's/.* hosts \([^ ]*\) .*/\1/p' \
	     "$tmp/out" | head -1)"
else
	echo "not ok 2 - three ranks on three hosts (mpirun exit $rc," \
	     "$lines ranks, hosts '$hosts', $views views)"
	sed 's/^/# /' "$tmp/out" "$tmp/err" | head -30
fi
ids=$(sed -n 's/.* id \([0-9a-f]*\) len 128 .*/\1/p' "$tmp/out" | sort -u)
nid=$(sed -n 's/.* id \([0-9a-f]*\) len 128 .*/\1/p' "$tmp/out" | wc -l)
if [ "$nid" = 3 ] && [ "$(echo "$ids" | wc -l)" = 1 ]; then
	echo "ok 3 - rank 0's 128-byte id is byte-identical at every rank" \
	     "(fence: $(sed -n 's/.* fence_us \([0-9]*\)$/\1/p' "$tmp/out" |
	     tr '\n' ' ')us)"
else
	echo "not ok 3 - the 128-byte id at every rank ($nid copies: $ids)"
fi
ucx=$(grep -c '^ucx [0-9] msgs 500 big OK' "$tmp/out")
if grep -q '^ucx [0-9] skipped' "$tmp/out"; then
	echo "ok 4 # SKIP $(grep -m1 '^ucx [0-9] skipped' "$tmp/out" |
		sed 's/^ucx [0-9] skipped: //')"
elif [ "$ucx" = 3 ]; then
	echo "ok 4 - over UCX (tcp between the hosts): 500 messages of 0 to" \
	     "68 KiB and one of 4 MiB (rendezvous) from each rank to the next," \
	     "every byte right, in order; ping-pong p50" \
	     "$(sed -n 's/^ucx 0 .* rtt_p50_us \([0-9.]*\)$/\1/p' "$tmp/out") us"
else
	echo "not ok 4 - messages over UCX ($ucx ranks right)"
	grep '^ucx' "$tmp/out" | sed 's/^/# /'
	sed 's/^/# /' "$tmp/err" | head -20
fi
tls=$(grep -c '^tls [0-9] UCX_TLS=tcp,self (left out: cuda_copy); resources:.* tcp/eth0' "$tmp/out")
if grep -q '^ucx [0-9] skipped' "$tmp/out"; then
	echo "ok 5 # SKIP no UCX in this build"
elif [ "$tls" = 3 ] &&
     [ "$(ASAN_OPTIONS=detect_leaks=0 "$bin" tls | cut -d' ' -f2,3 | tr '\n' ' ')" = \
       "sm,self -22 posix,sysv,self -22 tcp,self 0 sm,tcp 0 ^tcp -22 " ]; then
	echo "ok 5 - UCX_TLS=tcp,self,cuda_copy: the control context leaves" \
	     "cuda_copy out and says what it uses:" \
	     "$(grep -m1 '^tls 0 ' "$tmp/out" | cut -d' ' -f3-);" \
	     "shared memory and self alone (no peer failure handling): -EINVAL"
else
	echo "not ok 5 - device transports left out of the control context" \
	     "($tls ranks say so)"
	grep '^tls' "$tmp/out" | sed 's/^/# /'
	ASAN_OPTIONS=detect_leaks=0 "$bin" tls | sed 's/^/# /'
fi
if ldd "$bin" | grep -q libmpi; then
	echo "not ok 6 - libmpi linked: $(ldd "$bin" | grep libmpi)"
elif nm "${abs_top_builddir}/libcgr.a" 2>/dev/null | grep -q ' U MPI_'; then
	echo "not ok 6 - libcgr.a refers to MPI"
else
	echo "ok 6 - nothing of libmpi linked (libpmix loaded at run time)"
fi
netns_cleanup
trap - EXIT INT TERM HUP
left=$(netns_left)
if [ "$left" = 0 ]; then
	echo "ok 7 - nothing left behind (namespaces, veths, bridge)"
else
	echo "not ok 7 - $left namespaces or links left behind"
fi
