/*
 * comm/comm.h: communicators: the one interface every backend implements
 * (struct cgr__comm_ops), and the descriptor-based entry point behind the
 * public calls (cgr__comm_coll).
 *
 * Every operation of a rank, collective or point to point, is described by
 * a struct cgr__coll_desc.  The public calls of cgr.h (cgr_allreduce, ...,
 * cgr_send, cgr_recv) only fill one in and call cgr__comm_coll, which
 * checks it and dispatches to the backend.  Two fields the public calls
 * cannot set: a `poison` (this rank has no valid data; cgr__comm_coll sets
 * it for arguments only this rank can see are invalid, a backend for a
 * stream whose device failed) and a deadline.  The graph's collective
 * nodes agree on shapes and error values among themselves first (run/,
 * over host memory, also for backends that cannot agree by themselves)
 * and then use the public calls.
 *
 * Agreement: before any data moves, every rank posts its descriptor and
 * reads everybody else's.  If a rank is poisoned, the operation fails on
 * every rank with the poison code of the lowest poisoned rank; otherwise
 * if kind, count, dtype, op (reductions) or root (rooted collectives)
 * differ, it fails on every rank with CGR_EMISMATCH.  Either way
 * cgr_comm_errmsg names the ranks and what differed, e.g.
 * "allreduce #12: rank 0 count 100, rank 2 count 99", and the communicator
 * stays usable for the next operation.  Point-to-point pairs agree on
 * count and dtype the same way.
 *
 * Invalid arguments that only one rank can see (a NULL buffer, a bad
 * overlap, an unknown dtype, a root out of range) are not a silent hang
 * for the others: the bad rank's call returns -EINVAL at once and posts a
 * poisoned descriptor in its place, so every peer fails with -EINVAL too.
 * Only a NULL communicator, a rank out of range, an unknown kind or (for
 * send/recv) a peer out of range return -EINVAL with no effect at all.
 */
#ifndef CGR_COMM_H
#define CGR_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "comm/kinds.h"
#include "device/device.h"

/*
 * One rank's operation.  Fields mean what the matching public call's
 * arguments mean (count is that call's count: allgather's sendcount,
 * reducescatter's recvcount, ...).  send/recv: `send` is the send buffer,
 * `recv` the receive buffer, `root` the peer.
 */
struct cgr__coll_desc {
	int kind;		/* enum cgr_coll_kind, CGR__COLL_SEND/RECV */
	const void *send;
	void *recv;
	size_t count;
	cgr_dtype dtype;
	cgr_redop op;		/* reductions only */
	int root;		/* rooted collectives; the peer of send/recv */
	/* Absolute CLOCK_MONOTONIC deadline for this rank's waits; 0: none.
	 * Expiry fails the operation with -ETIMEDOUT and aborts the
	 * communicator: the ranks' operation sequences no longer line up
	 * (NCCL's rule: abort after a timeout). */
	int64_t deadline;
	/* Across hosts (remote/rcomm.c): when *stop becomes nonzero (a
	 * graph's teardown) a wait gives up: -ECANCELED, and the
	 * communicator is aborted (as after a deadline).  NULL: none.
	 * Others ignore it (their ranks agreed before they call). */
	const _Atomic uint32_t *stop;
	/* 0, or a negative code: this rank has no valid data.  Every rank's
	 * operation then fails with the code of the lowest poisoned rank;
	 * nobody's buffers are touched. */
	int poison;
	const char *poison_msg; /* copied (up to 127 bytes); may be NULL */
	/* The ranks agreed on this operation already (the graph's
	 * collective nodes do, run/coll.c): a backend that agrees on the
	 * host first (NCCL) skips that. */
	bool agreed;
};

/*
 * The entry point of every operation: rank `rank` of c issues operation *d,
 * copied before return.  Stream ordering, futures and groups behave as in
 * the public calls: on stream s (NULL: run on the calling thread and
 * return the operation's result), *out (may be NULL) receives a future;
 * between cgr_group_start and cgr_group_end the operation joins the group.
 * Returns 0, the operation's error (s == NULL), -EINVAL (see above),
 * -ENOMEM, or -ECANCELED after an abort.  Thread: the rank's thread.
 */
int cgr__comm_coll(cgr_comm *c, int rank, const struct cgr__coll_desc *d,
		   cgr_stream *s, cgr_future **out);

/* Groups (every backend): all operations of a group use one stream.  A
 * call on another is poisoned with -EINVAL and this message, and at the
 * group's end so is every other operation of it (cgr__group_mixed: d
 * unless already poisoned, its message kept in msg, cap bytes), so that
 * the group fails whole, on the peers too, before any data moves. */
#define CGR__GROUP_MIXED_MSG \
	"invalid arguments: operations of one group on different streams"
void cgr__group_mixed(struct cgr__coll_desc *d, char *msg, size_t cap);

/* ---- the backend interface ------------------------------------------ */

typedef int (*cgr__comm_op_fn)(cgr_comm *c, int rank,
			       const struct cgr__coll_desc *d, cgr_stream *s,
			       cgr_future **out);

/*
 * One entry per operation kind (cgr__comm_coll dispatches on d->kind, so a
 * backend may map each to its library's own call: ncclSend, ncclAllReduce,
 * ...), plus groups and lifecycle.  Arguments are validated before the
 * entries are called; descriptors with d->poison set still go through the
 * entry (the backend must agree on the poison with the peers).
 */
struct cgr__comm_ops {
	const char *name;
	cgr__comm_op_fn send, recv;
	cgr__comm_op_fn allreduce, allgather, reducescatter, reduce;
	cgr__comm_op_fn broadcast, gather, scatter, alltoall;
	int (*group_start)(cgr_comm *c, int rank);
	int (*group_end)(cgr_comm *c, int rank, cgr_future **out);
	int (*abort)(cgr_comm *c);
	void (*destroy)(cgr_comm *c);
	const char *(*errmsg)(const cgr_comm *c, int rank);
};

/* The backend-independent head of every communicator. */
struct cgr__comm_calls {
	_Atomic int n;
	char pad[60];
};

struct cgr_comm {
	const struct cgr__comm_ops *ops;
	cgr_ctx *ctx; /* referenced */
	struct cgr__arena *arena;
	const struct cgr__logger *log;
	int n;
	int backend; /* enum cgr_backend */
	cgr_worker **members; /* n entries, or NULL */
	/* Its id (cgr_comm_id: the same in every process of a job), and
	 * the next of the context's (ctx->comms, under ctx->comm_lock). */
	uint64_t id;
	struct cgr_comm *next;
	/* Tasks holding it (cgr_task_comm, until they return; under
	 * ctx->comm_lock): cgr_comm_destroy aborts it and waits for them. */
	int uses;
	/* By rank: its calls in progress on the caller's thread (the public
	 * operations and cgr_group_end), one cache line each; NULL for a
	 * backend's inner communicators.  cgr_comm_destroy aborts it and
	 * waits for them too. */
	struct cgr__comm_calls *calls;
	/* Across hosts: the job rank each rank runs on (remote/rcomm.c);
	 * NULL: all on this host. */
	const uint32_t *hosts;
};

/* Whether a graph that stops leaves c alone (teardown, a lost worker or
 * host): across hosts its waits watch the graph's stop themselves
 * (cgr__coll_desc.stop) and a lost host fails it, so an abort would
 * only kill a communicator the next graph may use (and its abort takes
 * the job's lock, which a host's loss may hold). */
static inline bool cgr__comm_stops_itself(const cgr_comm *c)
{
	return c->hosts != NULL;
}

/* Where c's agreement records travel: c itself, or for an NCCL
 * communicator its CPU communicator of the same ranks (records are host
 * memory; across hosts, one across the hosts). */
cgr_comm *cgr__comm_records(cgr_comm *c);

/* A new communicator id of ctx's (never 0). */
uint64_t cgr__comm_new_id(cgr_ctx *ctx);
/* Completes c's head as cgr_comm_create does (members copied, may be NULL,
 * with NULL entries: ranks on other hosts) and lists it under id: 0 or
 * -ENOMEM (then c is destroyed). */
int cgr__comm_finish(cgr_ctx *ctx, cgr_comm *c, cgr_worker *const *members,
		     size_t n, int backend, uint64_t id);
/* The communicator of ctx with id (NULL: none).  The caller keeps it
 * alive (cgr_comm_destroy while it is used is the caller's error). */
cgr_comm *cgr__comm_find(cgr_ctx *ctx, uint64_t id);
/* The communicator of ctx with id that has worker w as a member, and w's
 * rank: 0 (*out, *rank), -ENOENT, -ENOSPC (the thread holds
 * CGR__TASK_COMMS).  The calling thread holds it (c->uses) until
 * cgr__comm_drop_held (a task's run: until it returns); once per thread. */
#define CGR__TASK_COMMS 8
int cgr__comm_take(cgr_ctx *ctx, uint64_t id, const cgr_worker *w,
		   cgr_comm **out, int *rank);
extern _Thread_local unsigned cgr__comm_nheld;
void cgr__comm_drop_held(void);

/* Whether a collective of this backend can finish at any rank only after
 * every rank started it.  The CPU backend: yes, every rank reads every
 * peer's latency line or descriptor first (cpu_algo.c).  NCCL: no (a root can
 * finish a broadcast into peers' buffers).  The overlap pass uses it to
 * drop waits (compile/prune.c, kn_finish). */
static inline bool cgr__backend_joins_all(int backend)
{
	return backend == CGR_BACKEND_CPU;
}

/*
 * Where a CPU communicator whose ranks are processes keeps what they
 * share: mem (cgr__cpu_shared_size bytes, cache-line aligned) inside a
 * segment this process maps at seg (seg_size bytes), into which every
 * buffer its ranks use must fall; attach: another process set mem up
 * already (the first one does, before any rank runs).
 */
struct cgr__comm_shm {
	void *mem;
	void *seg;
	size_t seg_size;
	bool attach;
};
size_t cgr__cpu_shared_size(int n);

/* The CPU (shared memory) backend: fills *out with a communicator of n
 * ranks whose head the caller completes (comm.c); shm NULL: its ranks are
 * threads of this process. */
int cgr__cpu_comm_create(cgr_ctx *ctx, int n, const struct cgr__comm_shm *shm,
			 cgr_comm **out);
/* cgr_comm_create of a CPU communicator over shm (see above). */
int cgr__comm_create_shared(cgr_ctx *ctx, cgr_worker *const *members,
			    size_t n, const struct cgr__comm_shm *shm,
			    cgr_comm **out);
/* Across hosts (remote/rcomm.c): what the communicator's maker adds to
 * one host's part of an NCCL communicator whose ranks are on several
 * hosts.  All may be NULL. */
struct cgr__nccl_far {
	void *arg;
	/* It goes (before its ranks finalize): the driver tells the hosts
	 * so that theirs finalize at the same time. */
	void (*going)(void *arg);
	/* Its memory goes (its NCCL side is gone): what arg holds. */
	void (*gone)(void *arg);
	/* 0, or its failure (why written): CGR_EHOSTLOST once a host of
	 * it is lost, the agreement's once that failed (a host whose
	 * initialisation failed aborts it); polled, now and then, while
	 * its ranks wait for NCCL. */
	int (*lost)(void *arg, char *why, size_t len);
};

#ifdef HAVE_NCCL
/* The NCCL backend (nccl_*.c): the same, over the CUDA devices of members
 * (NULL: rank r on CUDA device r).  -ENODEV (no NCCL, or too old; the log
 * says why), -EINVAL (a member owns no CUDA device), NCCL's failure. */
int cgr__nccl_comm_create(cgr_ctx *ctx, cgr_worker *const *members, int n,
			  cgr_comm **out);
/* An NCCL communicator's CPU communicator of its collectives' records
 * (cgr__comm_records). */
cgr_comm *cgr__nccl_records(cgr_comm *c);
/* The bytes of an NCCL unique id. */
#define CGR__NCCL_ID_BYTES 128
/* A new unique id (ncclGetUniqueId, NCCL loaded as for
 * cgr__nccl_comm_create): 0, -ENODEV, NCCL's failure. */
int cgr__nccl_far_id(cgr_ctx *ctx, void *id);
/* This host's part of an NCCL communicator of n ranks made from id on
 * several hosts: the ranks whose members[r] is not NULL (each initialised
 * here, in one group; the call returns once every rank of every host
 * joined, or fails: past 30 s, or at once when far->lost says another
 * host's ranks failed), the others elsewhere (-EINVAL for their
 * calls here).  sd and rd are the agreement's CPU communicators of the
 * same ranks across hosts (the part does not destroy them: far->gone
 * may; on failure far->gone is not called).  Not listed: the caller's
 * cgr__comm_finish does that. */
int cgr__nccl_far_part(cgr_ctx *ctx, cgr_worker *const *members, int n,
		       const void *id, cgr_comm *sd, cgr_comm *rd,
		       const struct cgr__nccl_far *far, cgr_comm **out);
/* NCCL result e by name (NULL: not a code of the nccl.h built against),
 * and as cgr's code (any unknown one CGR_EDEVICE). */
const char *cgr__nccl_result_name(int e);
int cgr__nccl_map_result(int e);
#endif

#endif
