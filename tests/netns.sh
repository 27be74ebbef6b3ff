# tests/netns.sh: the "hosts on one machine" fixture, sourced by the
# tests that span hosts (net-hosts.sh, net-graph.sh).  Three network
# namespaces on a bridge of the test's own (addresses $net.1-3, the bridge
# $net.254, nothing else), each a "host" with its own host name (unshare
# --uts) and TMPDIR, entered by an rsh agent that mpirun (a launcher
# only) uses; every step bounded by timeout -k; everything removed at the
# end (namespaces, links, the processes left in them), also on failure.
#
# netns_init   the names; the cleanup trap
# netns_up     the namespaces (0, or 1 with the reason in $tmp/up.err)
# netns_mpirun SECONDS OUT ERR PROGRAM ARGS...: the program on the three
#              hosts (UCX over tcp on eth0: nothing crosses but the link)
# netns_cut N / netns_heal N: host N off the bridge (its link stays up:
#              a silent partition) and back (neighbour caches flushed)
# netns_left   how many namespaces and links are left (after cleanup)

netns_init() {
	tag=$$
	br=cgrb$tag
	net=10.77.$((tag % 250 + 1))
	tmp=$(mktemp -d)
	netns_stale
	trap netns_cleanup EXIT INT TERM HUP
}

ns() { echo "cgr${tag}h$1"; }
t() { timeout -k 2 10 "$@"; }

# The namespaces, links and bridge of fixture $1 (a test's pid), and the
# processes left in them (a rank cut off from mpirun): they go first,
# since deleting a namespace does not end them.
netns_remove() {
	for i in 1 2 3; do
		for p in $(ip netns pids "cgr${1}h$i" 2>/dev/null); do
			kill -9 "$p" 2>/dev/null
		done
		t ip netns del "cgr${1}h$i" 2>/dev/null
		t ip link del "cgrv${1}$i" 2>/dev/null
	done
	t ip link del "cgrb$1" 2>/dev/null
}

# Fixtures of runs that were killed before their trap ran (their pid is
# gone): removed, so that their bridge's subnet cannot shadow ours.
netns_stale() {
	for p in $(ip netns list 2>/dev/null |
		   sed -n 's/^cgr\([0-9][0-9]*\)h[123]\( .*\)\{0,1\}$/\1/p' |
		   sort -u); do
		kill -0 "$p" 2>/dev/null || netns_remove "$p"
	done
}

netns_cleanup() {
	netns_remove "$tag"
	rm -rf "$tmp"
}

netns_up() {
	{
		t ip link add "$br" type bridge &&
		t ip addr add "$net.254/24" dev "$br" &&
		t ip link set "$br" up || return 1
		for i in 1 2 3; do
			t ip netns add "$(ns $i)" &&
			t ip link add "cgrv${tag}$i" type veth peer name eth0 \
				netns "$(ns $i)" &&
			t ip link set "cgrv${tag}$i" master "$br" &&
			t ip link set "cgrv${tag}$i" up &&
			t ip -n "$(ns $i)" addr add "$net.$i/24" dev eth0 &&
			t ip -n "$(ns $i)" link set eth0 up &&
			t ip -n "$(ns $i)" link set lo up || return 1
		done
	} 2>"$tmp/up.err"
	# The rsh agent: "host" $net.N -> namespace N, its own host name
	# and TMPDIR (Open MPI's session directories must not collide).
	cat >"$tmp/agent" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift;; *) break;; esac; done
host=\$1; shift; n=\${host##*.}; mkdir -p "$tmp/h\$n"
exec ip netns exec cgr${tag}h\$n unshare --uts /bin/sh -c "hostname h\$n; export TMPDIR=$tmp/h\$n; \$*"
AGENT
	chmod +x "$tmp/agent"
	# Leak checks (ASan builds) stay on for cgr's code; libpmix and UCX
	# keep a few bytes past their finalize.
	printf "leak:libpmix.so\nleak:libuc\n" >"$tmp/lsan.supp"
}

netns_mpirun() {
	secs=$1 out=$2 err=$3
	shift 3
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		timeout -k 5 "$secs" mpirun --bind-to none --oversubscribe \
		--mca plm_rsh_agent "$tmp/agent" \
		--mca oob_tcp_if_include "$net.0/24" \
		--mca btl self,tcp --mca btl_tcp_if_include "$net.0/24" \
		--host "$net.1,$net.2,$net.3" -np 3 \
		-x LSAN_OPTIONS="suppressions=$tmp/lsan.supp:print_suppressions=0" \
		-x UCX_TLS="${NETNS_UCX_TLS:-tcp,self}" -x UCX_NET_DEVICES=eth0 \
		${NETNS_ENV:-} "$@" >"$out" 2>"$err"
}

netns_cut() { t ip link set "cgrv${tag}$1" nomaster; }
netns_heal() {
	t ip link set "cgrv${tag}$1" master "$br" &&
	for i in 1 2 3; do t ip -n "$(ns $i)" neigh flush all; done
}

netns_left() {
	left=$(ip netns list | grep -c "cgr${tag}h"
	       ip link show | grep -c "cgr[bv]$tag")
	echo "$left" | awk '{s += $1} END {print s}'
}
