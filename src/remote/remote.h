/*
 * remote/remote.h: workers on other hosts (see cgr.h, "Across hosts").
 *
 * A job (struct cgr_job behind cgr.h's handle) is every process a PMIx
 * launcher started: each joins it (link.c: the bootstrap through PMIx, a
 * UCX worker, every rank's address), and one thread per process, the
 * link, owns that UCX worker from then on: it sends what others queue
 * for it, hands on what arrives, carries heartbeats, and declares a peer
 * lost once nothing was heard from it for the deadline (or UCX saw it
 * end).  It waits on a reactor: its doorbell, the UCX worker's event fd,
 * and its next heartbeat.
 *
 * Four things travel between ranks:
 * - control messages (struct cgr__rmsg): the driver's requests to the
 *   rank that hosts a worker (create it, compile a graph, run it, tear it
 *   down, stop the worker) and their answers; served by cgr_job_serve
 *   (serve.c) on every rank but the driver's, asked by the remote
 *   workers' ops table on the driver's (remote.c);
 * - a channel's announcements with their values (bridge.c): a channel
 *   whose writer is on this host and reader on another has no reader
 *   here: its doorbell is the link's, and the link takes each message
 *   off its ring and sends it with the value's slot (header and data,
 *   the data straight from the slot, by rendezvous when large) to the
 *   reader's host, whose link writes it into its own copy of the slot
 *   (the data straight into it) and announces it on its own ring, in
 *   order per channel;
 * - communicators across hosts (rcomm.c): each host with members has a
 *   share; an operation's records and data travel as control messages
 *   (CGR__RM_COMM_OP), kept in j->box until the ranks they are for take
 *   them;
 * - admissions (a gated program elsewhere waits for them) and
 *   heartbeats.
 *
 * Every message carries the job's epoch; a graph's, its id: what
 * arrives for a graph this host does not run (any more) is counted and
 * dropped.
 *
 * Threads: whoever holds job->busy uses the UCX worker (the link thread,
 * or a thread moving the link while it writes or waits: link.c) and the
 * peers' traffic fields; every graph's registration, the queues and the
 * losses are under job->lock (taken under busy, never the other way).
 */
#ifndef CGR_REMOTE_H
#define CGR_REMOTE_H

#include <pthread.h>
#include <sys/uio.h>

#include "net/net.h"
#include "run/run.h"

#define CGR__LINK_MAGIC 0x48524743u /* "CGRH" */
#define CGR__LINK_VERSION 1
#define CGR__RANK_NONE 0xffffffffu

enum cgr__lmsg_type {
	CGR__LM_HEARTBEAT = 1,
	CGR__LM_CTRL = 2,  /* a struct cgr__rmsg (and its payload) follows */
	CGR__LM_DATA = 3,  /* a slot's header in the AM header, its data */
	CGR__LM_ADMIT = 4, /* seq: executions admitted */
};

/* The header of every message between links. */
struct cgr__lhdr {
	uint32_t magic;
	uint16_t version, type;
	uint32_t from; /* the sender's rank */
	uint32_t chan; /* DATA: the channel */
	uint64_t epoch;
	uint64_t gid;  /* DATA, ADMIT: the graph */
	uint64_t seq;  /* DATA: the execution; ADMIT: admitted */
	uint64_t ack;  /* messages of the receiver the sender has had */
};

/* Control messages (CGR__LM_CTRL). */
enum cgr__rmsg_type {
	CGR__RM_SPEC = 1,     /* d->h: a worker (arg_len bytes of arg) */
	CGR__RM_READY = 2,    /* h->d: its init returned code */
	CGR__RM_COMPILE = 3,  /* d->h: graph gid (blob, then ranks) */
	CGR__RM_COMPILED = 4, /* h->d: code; text: why not */
	CGR__RM_RUN = 5,      /* d->h: start graph gid */
	CGR__RM_TEARDOWN = 6, /* d->h: stop graph gid within timeout */
	CGR__RM_LEFT = 7,     /* h->d: done with gid (code: teardown's) */
	CGR__RM_DROP = 8,     /* d->h: forget gid (never ran) */
	CGR__RM_STOP = 9,     /* d->h: worker index: fini, within timeout */
	CGR__RM_BYE = 10,     /* h->d: it stopped (code) */
	CGR__RM_END = 11,     /* d->h: the driver leaves */
	CGR__RM_ENDING = 12,  /* h->d: END seen: losses are no errors now */
	CGR__RM_GONE = 13,    /* d->h: every rank said ENDING: serve returns */
	/* Communicators across hosts (rcomm.c); gid: the communicator. */
	CGR__RM_COMM_NEW = 14,	 /* d->h: a share (nranks; hosts, indices) */
	CGR__RM_COMM_MADE = 15,	 /* h->d: code */
	CGR__RM_COMM_FREE = 16,	 /* d->h: the share goes */
	CGR__RM_COMM_OP = 17,	 /* any: a rank's record and data (rcomm.c) */
	CGR__RM_COMM_ABORT = 18, /* any: aborted there (code) */
};

#define CGR__RMSG_MAX_PAYLOAD ((size_t)1 << 30)

struct cgr__rmsg {
	uint32_t type;
	int32_t code;
	uint32_t index; /* the worker's, in the driver's context */
	uint32_t flags;
	uint64_t gid;
	int64_t timeout_ns;
	int32_t cpu, device, log_level;
	uint32_t nranks; /* COMPILE: worker indices the rank table has */
	uint64_t payload; /* bytes that follow */
	char name[64];
	char fn[64];
	char text[400];
};

/* A control message that arrived (inbox), with its payload. */
struct cgr__cmsg {
	struct cgr__cmsg *next;
	uint32_t from;
	uint32_t users; /* (see ext) */
	size_t len; /* of m and the payload */
	/* A communicator's message whose data went straight where its
	 * operation wanted it (a claim: rcomm.c): payload holds its record
	 * only.  claim: while the data is on its way (the link's). */
	bool claimed;
	struct cgr__claim *claim;
	/* A communicator's message within the process whose data stays in
	 * the sending rank's buffer (rcomm.c: put), or one claimed by a
	 * rank whose host's other ranks read it where it landed
	 * (cgr__rcomm_claim_lend): ext, and the count of that rank's such
	 * messages, which it waits to fall to zero before it writes there
	 * or returns (NULL: the data follows the record).  users: ranks
	 * that took it and did not let it go yet.  (Under j->lock; the link
	 * keeps a claimed message's destination in ext until it is in.) */
	const unsigned char *ext;
	unsigned *ext_n;
	struct cgr__rmsg m;
	unsigned char payload[];
};

struct cgr__rpeer {
	char host[64];
	/* Its UCX address (from the bootstrap), and whether this link made
	 * its endpoint yet: only on first use (cgr__job_ep), so that a
	 * rank talks only to the peers its graphs need. */
	void *addr;
	size_t addr_len;
	bool connected;
	int64_t heard, sent; /* link thread: last message from / to it */
	uint64_t nrecv, nsent, acked;
	bool engaged; /* link thread: talked to: heartbeats, deadline */
	/* Lost: why, then lost (release; under job->lock). */
	_Atomic uint32_t lost;
	char why[240];
};

struct cgr__bgraph;
struct cgr__omsg;

struct cgr_job {
	struct cgr__logger log;
	int64_t deadline_ns, heartbeat_ns, spin_ns;
	int wait_mode;
	struct cgr__boot boot;
	bool booted;
	struct cgr__ucx *ucx;
	uint32_t rank, size, driver;
	uint64_t epoch;
	struct cgr__rpeer *peers;

	/* The UCX worker is used by one thread at a time: the link thread,
	 * or a thread that writes or waits for a value of another host and
	 * moves the link itself meanwhile (cgr__job_poll, link.c); whoever
	 * holds busy.  hot: when such a thread last did. */
	_Atomic uint32_t busy;
	_Atomic int64_t hot;
	_Atomic uint32_t handed; /* a poller parked: the link thread watches */
	/* A parked thread watches the UCX worker's event fd (link.c,
	 * park_watch): one at a time. */
	_Atomic uint32_t efd_token;
	/* What channels to readers on other hosts ring (ctx->link_bell):
	 * nobody sleeps on it, their writers move the link themselves. */
	struct cgr__bell quiet;
	/* The link thread. */
	pthread_t thread;
	bool started;
	struct cgr__bell bell; /* rung for it: queued messages, the end */
	_Atomic uint32_t quit;
	/* The job is ending (the driver left, or is leaving): a peer's
	 * end is no failure then. */
	_Atomic uint32_t ending;
	/* The driver lost a rank (its END says so: serve.c), which this
	 * rank may not have talked to: leave's PMIx_Finalize is bounded
	 * (link.c, job_free).  The serving thread's. */
	bool lost_any;
	bool efd_fired; /* link thread: the event fd's watch fired */
	bool watching;
	uint64_t watch_id;

	/* Guards what follows, and every peer's loss. */
	pthread_mutex_t lock;
	pthread_cond_t cond; /* inbox arrivals, losses, fetches ended */
	struct cgr__cmsg *in_head, **in_tail;
	struct cgr__omsg *out_head, **out_tail;
	_Atomic uint32_t nout; /* queued in out */
	struct cgr__bgraph *graphs;
	uint64_t next_gid;
	/* Communicators across hosts (rcomm.c): this process's shares, and
	 * the operations' messages that are in, not yet taken. */
	struct cgr__rcomm *rcomms;
	struct cgr__cmsg *box;
	struct cgr__claim *claims; /* rcomm.c: where operations want data */
	uint64_t rcomm_seen; /* the largest id of a share made here */

#ifdef CGR_FAULT_INJECTION
	/* Tests only: a serving rank sends the driver one message of a
	 * graph that never was (stale_gid, under lock) each time it drops a
	 * graph, which the driver must count as late and drop
	 * (CGR_TEST_LATE_MESSAGES in a serving rank's environment). */
	bool debug_late;
	/* Perf comparisons: every communicator's message copied out of
	 * itself, none claimed, none within the process borrowed, a large
	 * allgather's, alltoall's, gather's or scatter's data sent with its
	 * records (CGR_TEST_NO_CLAIMS in the environment). */
	bool debug_copy;
	/* Tests and perf comparisons: a hierarchical allreduce's chunks of
	 * this many bytes (0: its own choice; rounded up to whole elements:
	 * CGR_TEST_HIER_CHUNK); one of debug_hfail elements fails at the
	 * leader of the last host, as it folds its host's inputs for its
	 * second chunk (-ENOMEM: CGR_TEST_HIER_FAIL). */
	size_t debug_hchunk, debug_hfail;
	uint64_t stale_gid;
#endif
	/* What happened (cgr_job_stats). */
	_Atomic uint64_t st_data_sent, st_data_recv, st_ctrl, st_heartbeats;
	_Atomic uint64_t st_late, st_lost;
	_Atomic uint64_t st_bytes_sent, st_bytes_recv;
	_Atomic uint64_t st_comm_sent, st_comm_recv;
	_Atomic uint64_t st_comm_direct; /* of st_comm_recv: claimed */
};

/* ---- link.c ---------------------------------------------------------- */

/* Queues control message m (and len bytes of payload, copied) for rank
 * to: 0, CGR_EHOSTLOST (lost: the log and cgr__job_why say why),
 * -ENOMEM. */
int cgr__job_send(struct cgr_job *j, uint32_t to, const struct cgr__rmsg *m,
		  const void *payload, size_t len);
/* The same with a payload in nv parts, one after the other. */
int cgr__job_sendv(struct cgr_job *j, uint32_t to, const struct cgr__rmsg *m,
		   const struct iovec *v, int nv);
/* The same with the payload's last len bytes sent straight from data (no
 * copy; by rendezvous when large): data must stay as it is until
 * done(arg, status) says UCX is done with it (status 0: sent; negative:
 * not, the peer lost or the job gone).  Returning 0, done runs once
 * later, from the thread that moves the link (never under job->lock);
 * returning an error (CGR_EHOSTLOST, -EINVAL, -ENOMEM), never.
 * The parts before data (v) travel in the message's UCX header: at most
 * cgr__job_sendz_room bytes of them (-EINVAL). */
int cgr__job_sendz(struct cgr_job *j, uint32_t to, const struct cgr__rmsg *m,
		   const struct iovec *v, int nv, const void *data, size_t len,
		   cgr__ucx_done_fn done, void *arg);
size_t cgr__job_sendz_room(const struct cgr_job *j);
/* The next control message from rank `from` (CGR__RANK_NONE: any) of
 * type (0: any) and gid (type's gid-less ones: any) by the deadline: 0
 * (*out, the caller frees it), CGR_EHOSTLOST (from was lost),
 * -ETIMEDOUT.  Other messages stay queued. */
int cgr__job_await(struct cgr_job *j, uint32_t from, uint32_t type,
		   uint64_t gid, int64_t deadline, struct cgr__cmsg **out);
/* Whether rank was lost, and why. */
bool cgr__job_lost(struct cgr_job *j, uint32_t rank, const char **why);
/* Rank declared lost now (why), from any thread. */
void cgr__job_lose(struct cgr_job *j, uint32_t rank, const char *why);
/* A round of the link's work by the calling thread (progress, queued
 * control messages, the graphs' outgoing channels and admissions), if
 * nobody else holds the UCX worker (then its holder does it): true if it
 * did something.  Any thread; after writing a value for another host, and
 * while waiting for one. */
bool cgr__job_poll(struct cgr_job *j);
/* A thread that polled (cgr__job_poll) is about to sleep on j->cond:
 * the link thread watches the UCX worker from now on. */
void cgr__job_park(struct cgr_job *j);
/* The same as a program's xpoll (compile/prog.h). */
bool cgr__job_xpoll(void *job);
/* Wakes the link thread. */
static inline void cgr__job_kick(struct cgr_job *j)
{
	cgr__bell_ring(&j->bell);
}
/* The link thread: an endpoint to rank `to`, made now if this is the
 * first message to it: 0, or the error (logged; the caller declares the
 * peer lost). */
int cgr__job_ep(struct cgr_job *j, uint32_t to);
/* Bytes after the header of a message of this type. */
void cgr__lhdr_init(const struct cgr_job *j, struct cgr__lhdr *h, int type,
		    uint32_t to);

/* ---- bridge.c (the link thread's share of graphs) -------------------- */

/* Graph c runs on this host with workers elsewhere: rank[i] is where
 * worker index i runs (nranks of them; the driver's reads and writes are
 * on j->driver).  From now on the link forwards c's channels whose writer
 * is here and reader elsewhere, and takes in those the other way, under
 * id gid.  0 or -ENOMEM. */
int cgr__bridge_add(struct cgr_job *j, cgr_compiled *c, uint64_t gid,
		    const uint32_t *rank, uint32_t nranks);
/* Forgets graph c (nothing more is written into its slots once this
 * returns). */
void cgr__bridge_remove(struct cgr_job *j, cgr_compiled *c);
/* Link thread, under j->lock: sends what c's writers here announced for
 * readers elsewhere, and admissions; true if it sent something. */
bool cgr__bridge_pump(struct cgr_job *j);
/* Whether the link has something to send (any thread may look). */
bool cgr__bridge_ready(struct cgr_job *j);
/* Link thread: a DATA or ADMIT message m (header h) arrived. */
void cgr__bridge_in(struct cgr_job *j, const struct cgr__lhdr *h,
		    const struct cgr__ucx_msg *m);
/* Link thread, under j->lock: rank was lost: every graph using it fails
 * with why. */
void cgr__bridge_lost(struct cgr_job *j, uint32_t rank, const char *why);
/* The ranks graph c uses other than this one, into out (nout at most):
 * how many. */
size_t cgr__bridge_ranks(struct cgr_job *j, cgr_compiled *c, uint32_t *out,
			 size_t nout);

/* ---- rcomm.c (communicators across hosts) ----------------------------- */

/* ctx->comm_far of a driver's context (see ctx/ctx.h). */
int cgr__rcomm_create(cgr_ctx *ctx, cgr_worker *const *members, size_t n,
		      int backend, cgr_comm **out);
/* A serving rank: COMM_NEW m (its payload) makes the share in ctx, whose
 * workers by the driver's index are local[0..nlocal): 0 or the error. */
int cgr__rcomm_serve_new(struct cgr_job *j, cgr_ctx *ctx,
			 const struct cgr__cmsg *cm, cgr_worker *const *local,
			 unsigned nlocal);
/* Link thread: an operation's message or an abort came in (takes cm). */
void cgr__rcomm_in(struct cgr_job *j, struct cgr__cmsg *cm);
/* Under j->lock, at the job's end: the messages nobody took. */
void cgr__rcomm_box_free(struct cgr_job *j);
/* The link: where the data (len bytes) of COMM_OP m, which carries its
 * record in its header (cgr__job_sendz), goes: a buffer an operation
 * claimed (*cl its claim, counted until cgr__rcomm_claim_done), or NULL
 * (into the message, as any other). */
void *cgr__rcomm_claim(struct cgr_job *j, const struct cgr__rmsg *m,
		       size_t len, struct cgr__claim **cl);
/* The data of claimed message cm is in, before cm goes to the inbox: if
 * other ranks of this host take cm too, they read its data where it
 * landed (cm->ext), and the claiming rank's operation does not end
 * before they let it go. */
void cgr__rcomm_claim_lend(struct cgr_job *j, struct cgr__claim *cl,
			   struct cgr__cmsg *cm, void *dst);
/* The data of a claimed message is in (or failed to come). */
void cgr__rcomm_claim_done(struct cgr_job *j, struct cgr__claim *cl);

/* ---- serve.c ---------------------------------------------------------- */

/* What a remote rank's stand-ins for workers on other hosts are. */
extern const struct cgr__worker_ops cgr__far_stand_in_ops;

#endif
