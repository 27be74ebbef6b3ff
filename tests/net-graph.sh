#!/bin/sh
# tests/net-graph.sh: one compiled graph across three hosts (network
# namespaces, tests/netns.sh), and what happens when a host goes.  mpirun
# (a launcher only) starts tests/net-graph on each; rank 0 drives, the
# others serve.  Checks:
#  1 a 3-stage pipeline over the three hosts gives the same outputs, byte
#    for byte and in order, as the same graph on one host (0 B to 1 MiB
#    values, error values crossing), parked and adaptive (threads that
#    spin move the UCX worker themselves), medians reported; messages of a
#    graph that is gone (fault injection) are counted and dropped; what
#    does not cross hosts yet is refused at compile, saying so; lists of
#    0-64 items made on host 3 reach the driver whole; a teardown waits
#    for a task of host 3 that ends within its deadline;
#  2 25 000 executions (100 000 messages between hosts) at random gaps of
#    0-2 ms with every thread parked between them (blocking mode): none
#    lost, none slower than 100 ms (500 ms in sanitizer builds);
#  3 kill -9 of a host's process under traffic: the driver's log says so
#    within 1 s, the pending execution completes with CGR_EHOSTLOST error
#    values naming the host, the next execute fails at once, teardown
#    and destroying the workers end within 5 s;
#  4 a silent cut (the host's veth off the bridge, its link still up)
#    under traffic: reported within the deadline (3 s) + 0.5 s, the rest
#    as in 3;
#  5 the same cut while idle: the heartbeats tell within the deadline +
#    0.5 s too;
#  6 healed (back on the bridge, neighbour caches flushed), a new job (a
#    new epoch) runs the pipeline again;
#  7 a silent cut of host 3 under the traffic of an allreduce over the
#    three hosts (its members waiting for each other's inputs): every
#    output of the pending execution a CGR_EHOSTLOST error value within
#    the deadline + 0.5 s, the rest as in 3; healed again;
#  8 a slow link (tbf 1 mbit to one host): no host taken for lost;
#  9 collective nodes with members on several hosts (2 and 3 hosts with
#    1 and 2 members each, five layouts): every kind, operation and dtype,
#    counts 0, 1, odd and large, an error value and a shape mismatch at
#    one member, static shapes, buckets; every output the same value as
#    the same graph's on one host (tests/net-coll.c); each graph twice:
#    over values, and on a communicator across hosts (cgr_comm_create)
#    given to the node, which also sends an allreduce's input 4/3 times
#    from a host of two members, not 4, refuses a communicator whose
#    ranks are elsewhere or other workers, serves one graph after another, and is aborted
#    by a teardown that finds members waiting in it;
# 10 communicators over workers of several hosts (2 and 3 hosts with 1
#    and 2 members, four layouts), called directly by a task on each
#    member: every collective, dtype and op, sends and receives, counts
#    0 to 3000, a bad argument or count at one member, an abort: results,
#    codes and untouched bytes the same as a communicator on one host's
#    (tests/net-comm.c); a split allreduce's and a chained broadcast's
#    blocks of 64 KiB or more and an allgather's inputs of 200,000 B
#    land straight in the driver's rank's buffer
#    (cgr_job_stats.comm_bytes_direct, to the byte); hierarchical
#    allreduces of 1.2 MB (several chunks per leader's block), and with
#    fault injection one that fails half through at one leader (every
#    rank -ENOMEM, the next one right);
# 11 as 7, under a communicator's allreduce: the pending execution's
#    outputs are CGR_EHOSTLOST error values naming host 3 (the members on
#    hosts 1 and 2 stop waiting for it), the rest as in 3; healed;
# 12 as 11, under an allreduce node on a communicator across hosts
#    (cgr_coll_params.comm); healed;
# 13 as 12, under an allreduce node that the compile gave a communicator
#    of its own (capacity of 1 MiB or more, backend AUTO); healed;
# 14 CUDA workers on the three hosts, two GPUs each, over the models of
#    CUDA and NCCL (every host loads the driver context's cudart_path and
#    nccl_path): device tasks, a device edge on host 2 and an allreduce
#    on hosts 3 and 1 through NCCL within the host, stream tasks that
#    copy tensors to host memory to cross hosts, every output equal to
#    the same graph's on one host and to a direct computation; each
#    host's NCCL model ran the operations and saw nothing NCCL forbids;
#    a device a host lacks is
#    -ENODEV; a CUDA tensor read on another host (by a task, a
#    collective, a device edge, as a graph output) refused at compile,
#    saying so;
# 15 NCCL communicators across hosts over the same models (the NCCL
#    model's communicators spanning the processes through a file every
#    host maps): CUDA workers on the three hosts, and on the two serving
#    hosts only (two each), called directly by a task on each member
#    with buffers in device memory: every collective, dtype and op,
#    sends and receives, groups, counts 0 to 25 000, a bad argument or
#    count at one member, an abort: results, codes and untouched bytes
#    the same as a CPU communicator on one host's; each host's NCCL model
#    saw nothing NCCL forbids; a collective node on it refused; every
#    NCCL id reached the hosts through PMIx (their logs say so); first,
#    host 3's rank failing to initialise fails cgr_comm_create with its
#    failure within 5 s (not NCCL's 30 s deadline);
# 16 collective nodes on an NCCL communicator across the hosts (the
#    models): an allreduce, a broadcast and an allgather of device
#    tensors made on each member's host, and a device edge from host 1's
#    GPU to hosts 2 and 3, copied to host memory there,
#    equal to the same graph on three GPUs of one host and to a direct
#    computation, a member's error value reaching every output whole,
#    a list over the device edge an error value (-ENOTSUP) on both
#    readers, on a communicator of the caller's and on one the compile
#    makes;
# 17 as 3, under an allreduce on an NCCL communicator across the hosts
#    (the models; host 3's ranks hang in NCCL, so the others wait in
#    NCCL for them, not in the agreement): their calls return
#    CGR_EHOSTLOST, so teardown does not wait for them;
# 18 the driver kills itself (kill -9) after one execution over ranks 0
#    and 1: both serving ranks, the one with a worker and the one without
#    (it watches its driver all the same), return CGR_EHOSTLOST from
#    cgr_job_serve within 1 s, and each cgr_job_leave returns within 1 s
#    although mpirun, ending the job, never answers PMIx_Finalize;
# 19 nothing left behind.
# Every step under timeout -k.  Skipped without root, ip, unshare, tc,
# mpirun, a build with PMIx and UCX; and under TSan (PMIx's and UCX's own
# threads are not instrumented).  TAP.
set -u
N=19
echo "1..$N"
bin=${abs_top_builddir:?run from make check}/tests/net-graph
skip_all() {
	i=1
	while [ $i -le $N ]; do echo "ok $i # SKIP $1"; i=$((i + 1)); done
	exit 0
}
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
for x in ip unshare mpirun timeout tc; do
	command -v "$x" >/dev/null 2>&1 || skip_all "no $x"
done
if nm "$bin" 2>/dev/null | grep -q __tsan_init; then
	skip_all "a TSan build (PMIx's and UCX's threads are not instrumented)"
fi
defs=$(grep '^DEFS' "${abs_top_builddir}/Makefile")
case "$defs" in *HAVE_PMIX=1*HAVE_UCX=1*|*HAVE_UCX=1*HAVE_PMIX=1*) ;;
*) skip_all "a build without PMIx or UCX (pmix.h, ucp/api/ucp.h)";;
esac
. "${abs_top_srcdir:?run from make check}/tests/netns.sh"
netns_init
if ! netns_up; then
	i=1
	while [ $i -le $N ]; do
		echo "not ok $i # the fixture: $(head -1 "$tmp/up.err")"
		i=$((i + 1))
	done
	exit 0
fi

# Waits (at most $2 s) for a line matching $3 in file $1.
await_line() {
	n=0
	while ! grep -q "$3" "$1" 2>/dev/null; do
		n=$((n + 1))
		[ $n -gt $(($2 * 20)) ] && return 1
		sleep 0.05
	done
}
show() { sed 's/^/# /' "$@" | head -25; }
field() { sed -n "s/.* $2 \([^ ]*\).*/\1/p" "$1" | head -1; }

# 1: the pipeline.  In a build with fault injection each serving rank
# also sends the driver a message of a graph that never was, once it has
# dropped the graph: the driver counts each as late, and drops it.
case "$defs" in *CGR_FAULT_INJECTION=1*) late=2;; *) late=0;; esac
NETNS_ENV="-x CGR_TEST_LATE_MESSAGES=1" \
	netns_mpirun 120 "$tmp/p.out" "$tmp/p.err" "$bin" pipeline
rc=$?
if [ $rc = 0 ] && grep -q '^pipeline OK' "$tmp/p.out" &&
	grep -q '^refusals OK' "$tmp/p.out" &&
	grep -q '^lists OK' "$tmp/p.out" &&
	grep -q '^far-teardown OK' "$tmp/p.out" &&
	[ "$(grep -c '^serve rank [12]: done' "$tmp/p.out")" = 2 ] &&
	[ "$(sed -n 's/^left late \([0-9]*\)$/\1/p' "$tmp/p.out")" = $late ]; then
	echo "ok 1 - a 3-stage pipeline over hosts" \
	     "$(sed -n 's/^hosts \([^ ]* [^ ]* [^ ]*\) .*/\1/p' "$tmp/p.out")" \
	     "equals the same graph on one host, byte for byte, in order" \
	     "($(field "$tmp/p.out" executions) executions of 0 B-1 MiB," \
	     "error values crossing; p50 $(field "$tmp/p.out" far_p50_us) us" \
	     "across hosts, $(field "$tmp/p.out" near_p50_us) us on one," \
	     "$(field "$tmp/p.out" spin_p50_us) us across hosts adaptive);" \
	     "$late messages of graphs that are gone counted and dropped;" \
	     "refused, saying so:" \
	     "$(sed -n 's/^refusal OK \([^:]*\):.*/\1/p' "$tmp/p.out" | xargs);" \
	     "lists of 0-64 items from host 3 read by the driver;" \
	     "teardown(1 s) waits for a task of host 3 ending at 930 ms"
else
	echo "not ok 1 - the pipeline across hosts (mpirun exit $rc)"
	show "$tmp/p.out" "$tmp/p.err"
fi

# 2: random gaps, everything parked between executions: 25 000
# executions, 100 000 messages between hosts (a tenth of that under
# CGR_TEST_SCALE=10, the sanitizer builds).
ng=$((25000 / ${CGR_TEST_SCALE:-1}))
[ $ng -lt 1000 ] && ng=1000
netns_mpirun 300 "$tmp/g.out" "$tmp/g.err" "$bin" gaps $ng
rc=$?
# A lost wake-up would show as a wait of a tick (100 ms) or more.
slow=$(field "$tmp/g.out" slowest_ms)
if [ $rc = 0 ] && grep -q "^gaps OK executions $ng " "$tmp/g.out" &&
	awk -v s="${slow:-99999}" -v b="${CGR_TEST_SCALE:+500}" \
		'BEGIN { exit !(s < (b ? b : 100)) }'; then
	echo "ok 2 - $ng executions ($((ng * 4)) messages between hosts) at" \
	     "random gaps of 0-2 ms, every thread parked between them:" \
	     "none lost, the slowest $slow ms (a lost wake-up: 100 ms)"
else
	echo "not ok 2 - executions at random gaps (mpirun exit $rc," \
	     "slowest '$slow' ms)"
	show "$tmp/g.out" "$tmp/g.err"
fi

# Runs the driver in mode $1 in the background, waits for "steady", notes
# when (CLOCK_REALTIME ns), does $2 (a command) to host 3 (a kill can be
# seen before a later clock reading: hence before), waits for the
# driver to finish; mpirun (which may wait for the lost host for ever)
# is stopped then.  Output in $tmp/$1.out.
lose_run() {
	netns_mpirun 60 "$tmp/$1.out" "$tmp/$1.err" "$bin" "$1" &
	mp=$!
	if await_line "$tmp/$1.out" 30 '^steady'; then
		date +%s%N >"$tmp/$1.when"
		$2
		await_line "$tmp/$1.out" 30 '^driver ' ||
			echo "driver never ended" >>"$tmp/$1.err"
	else
		echo "never steady" >>"$tmp/$1.err"
	fi
	kill "$mp" 2>/dev/null
	wait "$mp" 2>/dev/null
}
# The detection delay (ms) of run $1, and its check against $2 ms.
delay_ms() {
	at=$(sed -n 's/^lost_at_ns \([0-9]*\) .*/\1/p' "$tmp/$1.out")
	when=$(cat "$tmp/$1.when" 2>/dev/null)
	[ -n "$at" ] && [ -n "$when" ] && [ "$at" != 0 ] &&
		echo $(((at - when) / 1000000))
}
kill_h3() {
	for p in $(ip netns pids "$(ns 3)"); do
		[ "$(cat /proc/$p/comm 2>/dev/null)" = net-graph ] &&
			kill -9 "$p"
	done
}
lost_check() { # name, test number, bound (ms), what[, mpirun aborts]
	d=$(delay_ms "$1")
	td=$(sed -n 's/.* teardown_ms \([0-9.]*\) .*/\1/p' "$tmp/$1.out")
	ds=$(sed -n 's/.* destroy_ms \([0-9.]*\) .*/\1/p' "$tmp/$1.out")
	ne=$(sed -n 's/^next_execute \(.*\) us .*/\1/p' "$tmp/$1.out")
	if [ -n "$d" ] && [ "$d" -ge 0 ] && [ "$d" -le "$3" ] &&
		{ [ $# -gt 4 ] || grep -q '^driver done' "$tmp/$1.out"; } &&
		! grep -q '^driver FAILED' "$tmp/$1.out" &&
		awk -v a="${td:-99999}" -v b="${ds:-99999}" \
			'BEGIN { exit !(a + b < 5000) }'; then
		echo "ok $2 - $4: the driver knew in $d ms (bound $3 ms);" \
		     "next execute: $ne; teardown $td ms, workers $ds ms;" \
		     "$(grep -m1 '^error_value\|^refused' "$tmp/$1.out" |
		     cut -c1-160)"
	else
		echo "not ok $2 - $4 (delay '$d' ms, teardown '$td'," \
		     "destroy '$ds')"
		show "$tmp/$1.out" "$tmp/$1.err"
	fi
}

# 3: kill -9.
# (mpirun ends the job once it sees a rank killed: the driver has said
# what it saw by then.)
lose_run lose kill_h3
lost_check lose 3 1000 "kill -9 of host 3's process under traffic" aborts

# 4: a silent cut under traffic; 5: idle.  Each leaves host 3 cut off:
# healed for the next.
cut3() { netns_cut 3; }
lose_run lose cut3
netns_heal 3
lost_check lose 4 3500 "a silent cut of host 3 under traffic"
lose_run idle cut3
netns_heal 3
lost_check idle 5 3500 "a silent cut of host 3 while idle"

# 6: healed, a new job (a new epoch) runs the pipeline.
netns_mpirun 120 "$tmp/h.out" "$tmp/h.err" "$bin" pipeline
rc=$?
if [ $rc = 0 ] && grep -q '^pipeline OK' "$tmp/h.out"; then
	echo "ok 6 - healed: a new job over the same hosts runs the" \
	     "pipeline again"
else
	echo "not ok 6 - healed (mpirun exit $rc)"
	show "$tmp/h.out" "$tmp/h.err"
fi

# 7: a silent cut under an allreduce's traffic, then healed.
lose_run losecoll cut3
netns_heal 3
lost_check losecoll 7 3500 "a silent cut of host 3 under an allreduce"

# 8: a slow link to host 2: 1 mbit/s, 400 ms of queue.
t tc qdisc add dev "cgrv${tag}2" root tbf rate 1mbit burst 32kbit \
	latency 400ms
NETNS_ENV="-x NET_SIZES_MAX=65536 -x NET_N=10" \
	netns_mpirun 120 "$tmp/s.out" "$tmp/s.err" "$bin" pipeline
rc=$?
t tc qdisc del dev "cgrv${tag}2" root
if [ $rc = 0 ] && grep -q '^pipeline OK' "$tmp/s.out" &&
	! grep -q 'lost:' "$tmp/s.err"; then
	echo "ok 8 - a 1 mbit/s link to host 2 (tbf): values up to 64 KiB" \
	     "cross it, no host taken for lost (p50" \
	     "$(field "$tmp/s.out" far_p50_us) us)"
else
	echo "not ok 8 - the slow link (mpirun exit $rc)"
	show "$tmp/s.out" "$tmp/s.err"
fi

# Runs the driver in mode $2 (test $1): ok with its "$2 OK" line's rest
# after "$3", else its output.
mode_check() {
	netns_mpirun 300 "$tmp/$2.out" "$tmp/$2.err" "$bin" "$2"
	rc=$?
	if [ $rc = 0 ] && grep -q "^$2 OK" "$tmp/$2.out"; then
		echo "ok $1 - $3: $(sed -n "s/^$2 OK //p" "$tmp/$2.out")"
	else
		echo "not ok $1 - $3 (mpirun exit $rc)"
		show "$tmp/$2.out" "$tmp/$2.err"
	fi
}

# 9: collectives across hosts; 10: communicators across hosts, called
# directly.
mode_check 9 coll "collectives across hosts equal one host's"
# (With fault injection, a hierarchical allreduce fails half through at
# one leader: tests/net-comm.c, hier_cases.)
case "$defs" in *CGR_FAULT_INJECTION=1*) hf="-x CGR_TEST_HIER_FAIL=299999";;
*) hf=;; esac
NETNS_ENV=$hf mode_check 10 comm "communicators across hosts equal one host's"

# 11: a silent cut under a communicator's allreduce, then healed.
lose_run losecomm cut3
netns_heal 3
lost_check losecomm 11 3500 \
	"a silent cut of host 3 under a communicator's allreduce"

# 12: the same under an allreduce node on a communicator, then healed.
lose_run losencomm cut3
netns_heal 3
lost_check losencomm 12 3500 \
	"a silent cut of host 3 under an allreduce node on a communicator"

# 13: the same under an allreduce node on the compile's communicator.
lose_run loseacomm cut3
netns_heal 3
lost_check loseacomm 13 3500 \
	"a silent cut of host 3 under an allreduce node on its own communicator"

# Runs the driver in mode $2 (test $1, at most $3 s) over the models of
# CUDA and NCCL: ok with its "$2 OK" line's rest after "$4" and what
# each rank's NCCL model saw (nothing NCCL forbids, one order), then what
# was refused; a skip in a build without them.
model_check() {
	netns_mpirun "$3" "$tmp/$2.out" "$tmp/$2.err" "$bin" "$2"
	rc=$?
	if [ $rc = 0 ] && grep -q "^$2 SKIP" "$tmp/$2.out"; then
		echo "ok $1 # SKIP $(sed -n "s/^$2 SKIP: //p" "$tmp/$2.out")"
	elif [ $rc = 0 ] && grep -q "^$2 OK" "$tmp/$2.out" &&
		[ "$(grep -c '^nccl rank [012] ops [1-9][0-9]* misuse 0 order ok$' \
			"$tmp/$2.out")" = 3 ] &&
		# NCCL ids across hosts: every one through PMIx.
		{ [ "$2" = gpu ] ||
		  { grep -q 'its NCCL id through PMIx' "$tmp/$2.err" &&
		    ! grep -q 'NCCL id not' "$tmp/$2.err"; }; }; then
		refused=$(sed -n 's/^refusal OK \([^:]*\):.*/\1/p' \
			"$tmp/$2.out" | xargs)
		ids=$(grep -c 'its NCCL id through PMIx' "$tmp/$2.err")
		echo "ok $1 - $4 (the CUDA and NCCL models):" \
		     "$(sed -n "s/^$2 OK //p" "$tmp/$2.out");" \
		     "$(grep '^nccl rank' "$tmp/$2.out" | sort | xargs)" \
		     "${refused:+; refused: $refused}" \
		     "; NCCL ids through PMIx: $ids"
	else
		echo "not ok $1 - $4 (mpirun exit $rc)"
		show "$tmp/$2.out" "$tmp/$2.err"
	fi
}

# 14: CUDA workers on other hosts; 15: NCCL communicators across hosts,
# equal to one host's CPU communicator.
model_check 14 gpu 120 "GPU workers on other hosts"
model_check 15 ncomm 300 \
	"NCCL communicators across hosts equal one host's CPU communicator"
model_check 16 ngraph 300 \
	"collective nodes through NCCL across hosts equal one host's graph"

# 17: kill -9 under an NCCL communicator's allreduce.
case "$defs" in
*HAVE_NCCL=1*)
	lose_run losenccl kill_h3
	lost_check losenccl 17 1000 "kill -9 of host 3's process under an \
NCCL communicator's allreduce, its peers waiting in NCCL" aborts;;
*)	echo "ok 17 # SKIP a build without the CUDA toolkit has no CUDA model";;
esac

# 18: the driver killed; rank 2 hosts no worker.
netns_mpirun 60 "$tmp/dk.out" "$tmp/dk.err" "$bin" driverkill
k=$(sed -n 's/^killing at_ns \([0-9]*\)$/\1/p' "$tmp/dk.out")
dk_ok=1 dk_said=
for r in 1 2; do
	at=$(sed -n "s/^serve rank $r: a host of the job was lost.* at_ns \([0-9]*\)$/\1/p" \
		"$tmp/dk.out")
	lm=$(sed -n "s/^left rank $r ms \([0-9.]*\)$/\1/p" "$tmp/dk.out")
	if [ -n "$k" ] && [ -n "$at" ] && [ -n "$lm" ] &&
		awk -v d=$(((at - k) / 1000000)) -v l="$lm" \
			'BEGIN { exit !(d >= 0 && d <= 1000 && l <= 1000) }'; then
		dk_said="$dk_said rank $r: CGR_EHOSTLOST after $(((at - k) / 1000000)) ms, left in $lm ms;"
	else
		dk_ok=0
	fi
done
if [ $dk_ok = 1 ]; then
	echo "ok 18 - the driver killed: every serving rank's cgr_job_serve" \
	     "returns CGR_EHOSTLOST, a worker there or not, and its leave" \
	     "does not wait on the launcher:$dk_said"
else
	echo "not ok 18 - the driver killed: what the serving ranks saw"
	show "$tmp/dk.out" "$tmp/dk.err"
fi

netns_cleanup
trap - EXIT INT TERM HUP
left=$(netns_left)
if [ "$left" = 0 ]; then
	echo "ok 19 - nothing left behind (namespaces, links, processes)"
else
	echo "not ok 19 - $left namespaces or links left behind"
fi
