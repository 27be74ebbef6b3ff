/*
 * ctx/ctx.h: the context (struct cgr_ctx behind cgr.h's cgr_ctx): what one
 * process's use of cgr owns.  Every layer takes its logger, its arena and
 * its references from here; nothing in cgr is process-wide.
 *
 * A context is freed when its last reference goes: the driver's (dropped
 * by cgr_ctx_destroy) and one per object that may outlive it (a stream, an
 * event, a future, a communicator, a compiled graph, a live worker
 * thread), so an object released after cgr_ctx_destroy still has its
 * arena.
 *
 * Layers above keep their per-context state in it without this layer
 * knowing their types: the device table (device/), state created on first
 * use with a destructor run at the last reference (cgr__ctx_state: the
 * CUDA runtime, say), and the worker and compiled-graph lists of the graph
 * layers (opaque pointers here).
 *
 * Threads: the driver thread creates and destroys; references, the locks
 * and cgr__ctx_state may be used from any thread.
 */
#ifndef CGR_CTX_H
#define CGR_CTX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/alloc.h"
#include "base/base.h"

struct cgr__device;
struct cgr_worker;
struct cgr_compiled;

/* Per-context states of higher layers (cgr__ctx_state), each under the
 * key its owner chose: at most this many kinds. */
#define CGR__CTX_EXT 8

struct cgr__ctx_ext {
	/* NULL: a free entry.  Published (release) after p and fini, so
	 * cgr__ctx_state_get reads an entry without the lock. */
	const void *_Atomic key;
	void *p;
	void (*fini)(cgr_ctx *ctx, void *p);
};

struct cgr_ctx {
	struct cgr__logger log;
	struct cgr__arena arena;
	unsigned flags;
	const struct cgr_export *exports; /* cgr_ctx_params.exports */
	/* The driver's reference plus one per object that may outlive
	 * cgr_ctx_destroy (see the top of this file). */
	_Atomic uint32_t refs;
	atomic_bool uring_fallback_logged;
	/* Guards devices (creation and removal; rare). */
	pthread_mutex_t lock;
	struct cgr__device *devices; /* device/device.c */
	/* Guards ext: taken alone, never under lock (a backend's device
	 * set-up, under lock, may create its state). */
	pthread_mutex_t ext_lock;
	struct cgr__ctx_ext ext[CGR__CTX_EXT]; /* in order of creation */

	/* The graph layers' (graph/ and above): the driver thread's, and a
	 * task's that drives other graphs (cgr.h): graph_lock guards the
	 * lists of graphs and compiled graphs and a whole compile (which
	 * claims workers).  Workers are freed with the context
	 * (release_workers), since an abandoned worker thread uses its
	 * struct until it exits. */
	pthread_mutex_t graph_lock;
	struct cgr_worker *workers;	/* every worker ever created */
	struct cgr_compiled *compiled;	/* live (not destroyed) graphs */
	struct cgr_graph *graphs;	/* graphs not yet destroyed */
	unsigned nworkers;
	void (*release_workers)(cgr_ctx *ctx);
	/* A worker's device (cgr_worker_params.device), for communicators
	 * bound to members (comm/ sees workers as handles only). */
	int (*worker_device)(const struct cgr_worker *w);
	/* Whether w can be a member of a communicator of ctx: 0, or
	 * -EINVAL (another context's worker, a destroyed one) or -ENOTSUP
	 * (a process worker, but for a graph's communicator in its shared
	 * segment), *why saying which. */
	int (*worker_unfit)(cgr_ctx *ctx, const struct cgr_worker *w,
			    bool shared, const char **why);
	/* Communicators by id (comm/comm.c: cgr_comm_id, cgr_task_comm),
	 * under comm_lock; and, with a job, the maker of communicators whose
	 * members are on several hosts (remote/rcomm.c): 1 if they are not
	 * (the caller makes one here), else 0 (*out) or an error. */
	pthread_mutex_t comm_lock;
	pthread_cond_t comm_cond; /* a communicator's uses dropped to 0 */
	struct cgr_comm *comms;
	uint64_t comm_ids; /* the ids' base: the job rank << 40, or 0 */
	int (*comm_far)(cgr_ctx *ctx, struct cgr_worker *const *members,
			size_t n, int backend, struct cgr_comm **out);
	/* Across hosts (remote/): the job the context drives (or serves),
	 * the doorbell of its link (where channels to readers on other hosts
	 * ring: compile/prog.h, cgr__reader_bell), and whether the driver
	 * of its graphs is on another host (a serving rank's context). */
	struct cgr_job *job;
	struct cgr__bell *link_bell;
	uint32_t host; /* the job's rank of this process (0: no job) */
	bool driver_far;
	bool destroyed;
};

static inline void cgr__ctx_ref(cgr_ctx *ctx)
{
	/* Relaxed: the caller already holds a reference. */
	atomic_fetch_add_explicit(&ctx->refs, 1, memory_order_relaxed);
}

/* A context from checked parameters p (the whole struct, defaults
 * filled in): 0, -EINVAL (unknown flags) or -ENOMEM. */
int cgr__ctx_new(const cgr_ctx_params *p, cgr_ctx **out);

/* Drops a reference; the last one frees the context. */
void cgr__ctx_put(cgr_ctx *ctx);

/*
 * The state under key (the address of something of the owner's: this
 * layer names none of them), created by make(ctx, &p) on first use (under
 * the context's lock, so exactly once); fini(ctx, p) runs when the context
 * is freed, the states in the reverse of the order they were made.
 * Returns 0, make's negative code (nothing is kept then, and the next call
 * tries again), or -ENOSPC (more than CGR__CTX_EXT kinds of state).
 */
int cgr__ctx_state(cgr_ctx *ctx, const void *key,
		   int (*make)(cgr_ctx *, void **),
		   void (*fini)(cgr_ctx *, void *), void **out);

/* The state under key if it was made already, else NULL; takes no lock
 * (so a make() of another key may call it). */
void *cgr__ctx_state_get(cgr_ctx *ctx, const void *key);

#endif
