/*
 * comm/nccl.h: the NCCL backend, private to comm/nccl_*.c.  A cgr
 * communicator of n ranks over CUDA devices: rank r on its member
 * worker's CUDA device (without members, on CUDA device r), one NCCL
 * communicator per rank, all made in this process from one unique id
 * (ncclCommInitRankConfig for every rank inside one group), nonblocking
 * (config.blocking = 0).  It lives in three files: nccl_setup.c (loading
 * libnccl, creating and destroying a communicator, its table of
 * operations), nccl_progress.c (the failure of the communicator, waiting
 * for NCCL to settle, the completion of operations: events, polling) and
 * nccl_ops.c (the agreement on the host, enqueueing, the entry points
 * and groups).  This header holds what they share: the library's table,
 * the communicator and its ranks, the record of an enqueued operation,
 * and the calls between the files.
 *
 * Loading.  libnccl is loaded when a context first makes an NCCL
 * communicator (dlopen of cgr_ctx_params.nccl_path, or of libnccl.so.2),
 * and the version the loaded library reports (ncclGetVersion) must be at
 * least 2.18; gather, scatter and alltoall are NCCL's own from 2.28.3 and
 * grouped sends and receives before.  Nothing links against NCCL.
 *
 * Operations.  Each is enqueued on a CUDA stream of the rank's device (s;
 * NULL: the rank's own stream, and the call waits) by the calling thread,
 * the rank's one thread at a time.  A call that returns ncclInProgress is
 * followed by ncclCommGetAsyncError until it leaves that state, and only
 * then is the completion event recorded on the stream (recorded earlier it
 * could pass before NCCL's kernel is enqueued).  The future is polled: it
 * is done when its event is, and fails when the communicator does
 * (cgr__dfuture_poll_by; a worker's reactor polls those of its graph).
 *
 * Agreement.  NCCL hangs on ranks that disagree, so before an operation
 * is enqueued the ranks agree on the host: over two CPU communicators of
 * the same ranks (comm/cpu_*.c), every rank's record reaches every rank
 * of a collective, or the peer of a send or receive, and each reaches the
 * same verdict (poison first, then kind, count, dtype, op, root): the
 * agreement's (comm/agree.h), as every path's; a disagreement fails the
 * operation on every rank and enqueues nothing.  Descriptors marked agreed (the graph's collective
 * nodes agree on their own board, run/coll.c) skip this.  int16 and
 * uint16 move as bytes; NCCL cannot reduce them (-EINVAL on every rank).
 *
 * Failure.  A communicator fails as a whole: an error returned by NCCL,
 * an asynchronous error (ncclCommGetAsyncError, polled while operations
 * are pending, also while ranks are inside a collective that will never
 * complete), a rank's failed device (the sticky error of its stream,
 * seen when an operation is issued there or by a pending operation's
 * event: CGR_EDEVICE), an operation past its deadline (-ETIMEDOUT),
 * cgr_comm_abort (-ECANCELED).  Every
 * pending and later operation of every rank then fails with that code and
 * a message naming the rank and NCCL's text, and a thread of its own
 * aborts every rank's NCCL communicator (ncclCommAbort; no call on a
 * rank's communicator runs meanwhile: each rank's calls hold its lock).
 * A result code nccl.h does not have (a newer library's) is CGR_EDEVICE,
 * its number and ncclGetErrorString's text in the message.
 * Destroy finalizes every rank (all at once, nonblocking) and destroys
 * them, unless the communicator failed: then only the aborts run.
 * ncclCommDestroy is never used on an error path.
 */
#ifndef CGR_COMM_NCCL_H
#define CGR_COMM_NCCL_H

#include <pthread.h>

#include <nccl.h>

#include "comm/comm.h"
#include "comm/nccl_abi.h"

/* ---- the library -------------------------------------------------- */

struct cgr__ncclrt {
	int version; /* ncclGetVersion's; 0: not loaded (why says why) */
	char why[256];
#define FIELD(field, name, ret, args) ret(*field) args;
	CGR__NCCL_CALLS(FIELD)
	/* NULL before 2.28.3: grouped sends and receives instead */
	CGR__NCCL_GSA_CALLS(FIELD)
#undef FIELD
};

/* ---- the communicator ---------------------------------------------- */

/* An operation held until its group ends. */
struct gop {
	struct cgr__coll_desc d;
	char msg[128]; /* d.poison_msg's copy */
	struct cgr__dfuture *fut;
	int res; /* its verdict, then its enqueueing's */
};

struct nrank {
	ncclComm_t nc;
	int dev;
	cgr_stream *own; /* inline operations' stream */
	/* NCCL calls on nc: the rank's thread, pollers, the aborter. */
	pthread_mutex_t lock;
	int gdepth;
	struct gop *g;
	size_t gn, gcap;
	cgr_stream *gs;
	bool gs_set;
	bool gmixed; /* a call on another stream: the whole group fails */
	uint64_t nops; /* operations issued (names them in messages) */
	char errmsg[256];
	struct nev *pool; /* records given back (c->pool_lock) */
};

struct ncomm {
	struct cgr_comm base;
	const struct cgr__ncclrt *rt;
	/* Host agreement: collectives' and sends' descriptors on sd, the
	 * receives' answers on rd (two, so that each direction pairs in
	 * order whatever the mix of sends and receives). */
	cgr_comm *sd, *rd;
	/* Across hosts: the maker's additions (a copy; zero on one host),
	 * and when a lost host is next looked for (cgr__nccl_far_lost). */
	struct cgr__nccl_far far;
	_Atomic int64_t far_next;
	bool borrowed; /* sd and rd are the maker's */
	/* 0, or the code every pending and later operation fails with. */
	_Atomic int failed;
	char why[256]; /* written before failed (release) */
	pthread_t aborter;
	_Atomic bool aborter_done;
	bool aborter_started;
	pthread_mutex_t fail_lock;
	/* The creator's, and one per enqueued operation's record (struct
	 * nev): futures may outlive cgr_comm_destroy. */
	_Atomic uint32_t refs;
	bool abandoned; /* an abort hung: the aborter keeps the memory */
	/* Records given back keep their CUDA events for the rank's next
	 * operations (creating and destroying an event per operation costs
	 * more than the rest of an enqueue; an event belongs to one device):
	 * each rank's pool, under pool_lock. */
	pthread_mutex_t pool_lock;
	struct nrank rk[];
};

/* One enqueued operation (or group) of a rank: its event, for the
 * futures of its operations. */
struct nev {
	_Atomic uint32_t refs; /* one per future, and the issuer's */
	struct nev *next;      /* in c->pool */
	struct ncomm *c;
	int rank;
	cgr_event *ev;
	int64_t deadline;
	int first; /* the first error of the group's operations, or 0 */
	struct cgr__arena *arena;
};

/* A result for a message: its name (or "result"), number and NCCL's text
 * for it, which a newer library has for codes cgr does not know. */
struct restxt {
	char s[192];
};

static inline struct ncomm *cgr__nccl_of(cgr_comm *c)
{
	return (struct ncomm *)c;
}

static inline int cgr__nccl_failed(const struct ncomm *c)
{
	return atomic_load_explicit(&c->failed, memory_order_acquire);
}

static inline int cgr__nccl_map_err(ncclResult_t e)
{
	return cgr__nccl_map_result((int)e);
}

/* ---- nccl_progress.c: failure, settling, completion ----------------- */

const char *cgr__nccl_msg(const struct ncomm *c, int r, ncclResult_t e);
struct restxt cgr__nccl_res_text(const struct cgr__ncclrt *rt, ncclResult_t e);
void cgr__nccl_fail(struct ncomm *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void cgr__nccl_stop(struct ncomm *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int cgr__nccl_rank_failed(struct ncomm *c, int r);
/* Across hosts: fails c if a host of it was lost (CGR_EHOSTLOST) or its
 * agreement's communicators failed (far.lost says; looked for at most
 * once a millisecond); the failure, or 0. */
int cgr__nccl_far_lost(struct ncomm *c);
int cgr__nccl_settle(struct ncomm *c, int r, int64_t deadline,
		     const char *what);
void cgr__nccl_nev_put(void *arg);
int cgr__nccl_nev_poll(void *arg, int *result);
int cgr__nccl_nev_poll_all(void *arg, int *result);
int cgr__nccl_done_future(struct ncomm *c, int result, cgr_future **out);
void cgr__nccl_polled_by(struct cgr__dfuture *df, struct nev *p,
			 int (*poll)(void *, int *));

/* ---- nccl_setup.c -------------------------------------------------- */

/* Drops a reference to c: the last frees it. */
void cgr__nccl_put(struct ncomm *c);

/* ---- nccl_ops.c: the entry points ---------------------------------- */

int cgr__nccl_op(cgr_comm *cc, int r, const struct cgr__coll_desc *d,
		 cgr_stream *s, cgr_future **out);
int cgr__nccl_group_start(cgr_comm *cc, int r);
int cgr__nccl_group_end(cgr_comm *cc, int r, cgr_future **out);

#endif
