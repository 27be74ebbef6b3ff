/* tests/t_netcoll.h: the collectives across hosts of tests/net-graph
 * (tests/net-coll.c). */
#ifndef T_NETCOLL_H
#define T_NETCOLL_H

#include <cgr.h>

/* The task every member runs to make its input (exported as "gen"). */
int netcoll_gen(cgr_task_ctx *tc, void *state, const cgr_value *in,
		size_t nin, cgr_value *out, size_t nout);
/* An allreduce (sum of int32) over w[0..2] in wait mode `mode`, each
 * member's input made on its own worker; *arg the argument each
 * execution takes.  cm not NULL: on a communicator across hosts it makes
 * over w (*cm; the caller destroys it after the graph). */
int netcoll_allreduce(cgr_ctx *ctx, cgr_worker *const *w, int mode,
		      cgr_comm **cm, cgr_compiled **out, cgr_value *arg);
/* Set: a node without a communicator is built with backend AUTO (an
 * allreduce there gets one of its own at compile), else CPU (over
 * values). */
extern int netcoll_backend_auto;
/* Every collective across the hosts of far3 (a worker on each of ranks
 * 0, 1, 2, and a second one it makes on each) in five layouts against
 * the same on near3 (three here, and three more); 0 when all agree.
 * job's counts show that a value crosses to a host once. */
int netcoll_run(cgr_ctx *ctx, cgr_job *job, cgr_worker *const *far3,
		cgr_worker *const *near3);

/* The task of tests/net-comm.c (exported as "netcomm_task"), and its
 * run: communicators over workers of several hosts, called directly by
 * tasks on far3's hosts, against one host's; 0 when all agree. */
int netcomm_task(cgr_task_ctx *tc, void *state, const cgr_value *in,
		 size_t nin, cgr_value *out, size_t nout);
int netcomm_run(cgr_ctx *ctx, cgr_job *job, cgr_worker *const *far3);
/* An allreduce over a communicator of w[0..2] (*cm, of backend), called
 * by a task on each (graph *g, its argument *arg): a member whose call
 * fails with CGR_EHOSTLOST outputs an error value. */
int netcomm_allreduce(cgr_ctx *ctx, cgr_worker *const *w, int backend,
		      cgr_compiled **g, cgr_comm **cm, cgr_value *arg);

/* Device memory for the operations of netcomm_task (CUDA's model), set
 * on every rank in the ncomm mode; NULL: host memory. */
struct netcomm_mem {
	void *(*alloc)(size_t bytes);
	void (*free)(void *p);
	void (*copy)(void *dst, const void *src, size_t bytes);
};
extern const struct netcomm_mem *netcomm_mem;
/* NCCL communicators over CUDA workers of several hosts (far: a worker
 * on rank 0, 1, 2 and one more on ranks 1 and 2, each its own GPU),
 * called directly by tasks on their hosts, against a CPU communicator
 * of this process; 0 when all agree. */
int netcomm_nccl_run(cgr_ctx *ctx, cgr_worker *const *far);

#endif
