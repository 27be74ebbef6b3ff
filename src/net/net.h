/*
 * net/net.h: peers on other hosts.  This layer knows nothing of graphs.
 * So far: the bootstrap through PMIx (what a PMIx launcher such as Open
 * MPI's mpirun or Slurm's srun --mpi=pmix gives a process): its rank and
 * the job's size, each rank's host, and a key-value exchange (Put,
 * Commit, Fence with the data collected, Get) for what ranks must learn of
 * each other before they talk: transport addresses, NCCL unique ids.
 *
 * libpmix is loaded at run time (dlopen of libpmix.so.2, the Debian
 * package libpmix2): cgr never links it, nor libmpi.  Built only where
 * pmix.h was found at configure (HAVE_PMIX); elsewhere every call returns
 * -ENOSYS.
 *
 * Threads: one bootstrap per process (PMIx is initialised once); its
 * calls from one thread at a time.
 */
#ifndef CGR_NET_H
#define CGR_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CGR__BOOT_KEY_MAX 64

struct cgr__boot {
	uint32_t rank, size;	 /* this process's rank, the job's size */
	char nspace[512];	 /* the job's PMIx namespace */
	void *lib;		 /* libpmix (dlopen) */
	void *fns[16];		 /* its functions (pmix.c's table) */
	bool ready;		 /* PMIx initialised: fini finalizes */
	_Alignas(16) unsigned char me[512]; /* pmix_proc_t of this process */
};

/*
 * Joins the job this process was launched in: 0, -ENOSYS (a build
 * without PMIx), -ENOENT (libpmix.so.2 cannot be loaded), -ENODEV (not
 * started by a PMIx launcher: PMIx_Init refused), why says which.
 */
int cgr__boot_init(struct cgr__boot *b, char *why, size_t len);
/* Publishes len bytes under key (at most CGR__BOOT_KEY_MAX - 1 bytes)
 * for every rank: 0 or -EIO (why says PMIx's error). */
int cgr__boot_put(struct cgr__boot *b, const char *key, const void *data,
		  size_t len, char *why, size_t wlen);
/* Commits what was put and waits, at most timeout_s seconds, until every
 * rank did (a fence collecting the data): 0, -ETIMEDOUT or -EIO. */
int cgr__boot_fence(struct cgr__boot *b, int timeout_s, char *why,
		    size_t wlen);
/* What rank published under key (after the fence), copied into buf (cap
 * bytes); *len gets its length.  0, -ENOENT (nothing under key),
 * -EMSGSIZE (more than cap), -EIO. */
int cgr__boot_get(struct cgr__boot *b, uint32_t rank, const char *key,
		  void *buf, size_t cap, size_t *len, char *why, size_t wlen);
/* Publishes len bytes under key after the fence (PMIx_Put, then
 * PMIx_Commit alone: no other rank waits): 0, -EINVAL (a key too long),
 * -EIO.  Read with cgr__boot_get_late. */
int cgr__boot_publish(struct cgr__boot *b, const char *key, const void *data,
		      size_t len, char *why, size_t wlen);
/* cgr__boot_get of what rank published after the fence
 * (cgr__boot_publish, done before this call): the launcher's PMIx server
 * asks rank's for it (PMIX_GET_REFRESH_CACHE), at most timeout_s. */
int cgr__boot_get_late(struct cgr__boot *b, uint32_t rank, const char *key,
		       void *buf, size_t cap, size_t *len, int timeout_s,
		       char *why, size_t wlen);
/* The host rank runs on, as the launcher knows it: 0 or -EIO. */
int cgr__boot_host(struct cgr__boot *b, uint32_t rank, char *buf, size_t cap,
		   char *why, size_t wlen);
/*
 * Messages to peers on other hosts over UCX active messages: a UCP worker
 * (host transports: what UCX_TLS allows), its address (what peers connect
 * to; publish it through the bootstrap), an endpoint per peer (index <
 * npeers) with peer error handling, and a queue of what arrived, in
 * order per sender.  Large messages go by UCX's rendezvous (no copy
 * through a bounce buffer on the way).  Blocking calls that progress the
 * worker themselves (a reactor's event fd comes later).  libucp.so.0 is
 * loaded at run time; -ENOSYS in a build without ucp/api/ucp.h.
 */
struct cgr__ucx;
/* 0, -ENOSYS, -ENOENT (no libucp.so.0), -EIO, -ENOMEM; why says. */
int cgr__ucx_open(struct cgr__ucx **out, uint32_t npeers, char *why,
		  size_t len);
/* What the control context uses: "UCX_TLS=tcp,self (left out:
 * cuda_copy); resources: self/memory0 tcp/eth0".  Device transports
 * named in UCX_TLS are left out (the context moves host memory only; one
 * naming nothing else fails the open). */
const char *cgr__ucx_transports(const struct cgr__ucx *u);
/* The worker's address (valid until close). */
int cgr__ucx_address(struct cgr__ucx *u, const void **addr, size_t *len);
/* An endpoint to peer at addr (its cgr__ucx_address): 0, -EINVAL, -EIO. */
int cgr__ucx_connect(struct cgr__ucx *u, uint32_t peer, const void *addr,
		     size_t len, char *why, size_t wlen);
/* Sends len bytes to peer, `from` (the sender's index) in the header;
 * returns when the data left (0), -ETIMEDOUT, -ECONNRESET (the peer was
 * lost), -EIO. */
int cgr__ucx_send(struct cgr__ucx *u, uint32_t peer, uint32_t from,
		  const void *data, size_t len, int64_t timeout_ns);
/* The next message that arrived (waits up to timeout_ns): its sender and
 * bytes (copied into buf, cap bytes).  0, -ETIMEDOUT, -EMSGSIZE (*len
 * says how many; the message is dropped), -EIO. */
int cgr__ucx_recv(struct cgr__ucx *u, uint32_t *from, void *buf, size_t cap,
		  size_t *len, int64_t timeout_ns);
/* Closes the endpoints (forced for a lost peer), the worker, the context. */
void cgr__ucx_close(struct cgr__ucx *u);

/*
 * Handler mode (the reactor of remote/ uses it; the queue above is for
 * simple programs): every message that arrives is handed to fn, from
 * cgr__ucx_progress, instead of being queued: its header (what the
 * sender posted, at most CGR__UCX_HDR_MAX bytes) and its data, valid only
 * during the call; a rendezvous message's data is not there yet (rndv set):
 * fn fetches it into its final place (cgr__ucx_fetch) or drops it
 * (cgr__ucx_drop_data), before it returns.  lost(arg, peer, why) runs,
 * from progress too, once when a peer's endpoint fails (UCX saw the peer
 * go); sends to it fail from then on.
 */
#define CGR__UCX_HDR_MAX 1024
struct cgr__ucx_msg {
	const void *hdr;
	size_t hlen;
	void *data;
	size_t len;
	void *rndv; /* non-NULL: data to fetch */
};
typedef void (*cgr__ucx_fn)(void *arg, const struct cgr__ucx_msg *m);
typedef void (*cgr__ucx_lost_fn)(void *arg, uint32_t peer, const char *why);
/* A completion: status 0 or a negative errno. */
typedef void (*cgr__ucx_done_fn)(void *arg, int status);
void cgr__ucx_set_handler(struct cgr__ucx *u, cgr__ucx_fn fn,
			  cgr__ucx_lost_fn lost, void *arg);
/* Receives rendezvous data m->rndv (len bytes) into buf: 0 (in already;
 * done not called), 1 (done(arg, status) is called from a later
 * progress), or a negative errno. */
int cgr__ucx_fetch(struct cgr__ucx *u, void *rndv, void *buf, size_t len,
		   cgr__ucx_done_fn done, void *arg);
void cgr__ucx_drop_data(struct cgr__ucx *u, void *rndv);
/* The largest header cgr__ucx_post takes: CGR__UCX_HDR_MAX, or less if
 * the worker's transports carry less (ucp_worker_query). */
size_t cgr__ucx_max_hdr(const struct cgr__ucx *u);
/* Posts hdr (hlen <= cgr__ucx_max_hdr bytes, copied) and len bytes of data
 * (not copied: data stays valid until the send completes) to peer: 0
 * (sent, data may be reused; done not called), 1 (in flight:
 * done(arg, status) from a later progress; done may be NULL), -ECONNRESET
 * (the peer was lost), -EINVAL, -ENOMEM, -EIO.  Never blocks. */
int cgr__ucx_post(struct cgr__ucx *u, uint32_t peer, const void *hdr,
		  size_t hlen, const void *data, size_t len,
		  cgr__ucx_done_fn done, void *arg);
/* Progresses the worker once: how many events it handled. */
unsigned cgr__ucx_progress(struct cgr__ucx *u);
/* The worker's event fd (readable when there is something to progress,
 * once armed) and arming it: 0 (armed: sleep on the fd), -EAGAIN (events
 * are pending: progress first), -EIO. */
int cgr__ucx_efd(struct cgr__ucx *u);
int cgr__ucx_arm(struct cgr__ucx *u);
/* Whether peer's endpoint failed; closing it now, by force (a peer the
 * caller declared lost: nothing more is sent to it or awaited from it). */
bool cgr__ucx_peer_lost(const struct cgr__ucx *u, uint32_t peer);
void cgr__ucx_peer_close(struct cgr__ucx *u, uint32_t peer, const char *why);
/* Sends and fetches in flight. */
size_t cgr__ucx_inflight(const struct cgr__ucx *u);

/* Leaves the job (PMIx_Finalize); libpmix stays loaded (its threads are
 * gone, but a library that was initialised once is not unloaded).
 * bound_ns > 0: waits at most that long (a launcher that is ending the
 * job after a lost rank may never answer): -ETIMEDOUT, and PMIx_Finalize
 * goes on in a thread of its own, which calls late() when it returns;
 * else 0. */
int cgr__boot_fini(struct cgr__boot *b, int64_t bound_ns, void (*late)(void));

#endif
