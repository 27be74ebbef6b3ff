/*
 * proc/proc.h: process workers (see cgr.h, "Process workers"): the
 * driver's side (proc.c: start, stop, the death monitor, and a graph's
 * compile, run and teardown in its worker processes) and the
 * worker process's (agent.c: cgr_worker_main), and the control messages
 * between them.
 */
#ifndef CGR_EXEC_PROC_H
#define CGR_EXEC_PROC_H

#include "run/run.h"

#define CGR__WORKER_ENV "CGR_WORKER"
#define CGR__PROC_MAX 1024 /* process workers per context */

/* A process worker's process (driver). */
struct cgr__proc {
	int pid;
	int pidfd, sock;
	_Atomic uint32_t dead; /* it ended (seen by the monitor or a reply) */
	bool stopping;	       /* told to stop: no failure to report */
	bool external;	       /* started by something else: not reaped */
	char why[160];	       /* how it ended */
};

/* ---- control messages ---------------------------------------------- */

#define CGR__PMSG_MAGIC 0x50524743u /* "CGRP" */
#define CGR__PMSG_VERSION 1
#define CGR__PMSG_MAX_ARG (64u << 10) /* arg_data bytes */

enum cgr__pmsg_type {
	CGR__PMSG_SPEC = 1,	/* d->w: who it is; arg_len bytes follow */
	CGR__PMSG_READY = 2,	/* w->d: init returned code */
	CGR__PMSG_COMPILE = 3,	/* d->w: graph gid, its segment's fd */
	CGR__PMSG_COMPILED = 4, /* w->d: code, text: why not */
	CGR__PMSG_RUN = 5,	/* d->w: start graph gid's program */
	CGR__PMSG_TEARDOWN = 6, /* d->w: stop graph gid within timeout */
	CGR__PMSG_LEFT = 7,	/* w->d: done with gid (code: teardown's) */
	CGR__PMSG_DROP = 8,	/* d->w: forget gid (never ran) */
	CGR__PMSG_STOP = 9,	/* d->w: fini and exit within timeout */
	CGR__PMSG_BYE = 10,	/* w->d: fini ran (code), exiting */
};

struct cgr__pmsg {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	int32_t code;
	uint32_t index; /* SPEC: the worker's index in the context */
	uint64_t gid;
	int64_t timeout_ns;
	int32_t cpu, device, log_level;
	uint32_t flags, arg_len;
	char name[64]; /* SPEC: the worker's name */
	char fn[64];   /* SPEC: its init/fini export ("": none) */
	char text[400];
};

void cgr__pmsg_init(struct cgr__pmsg *m, int type, uint64_t gid);
/* One message (and at most one descriptor, if fd) by the deadline,
 * checked (its strings terminated): 0, -EPROTO, -ECONNRESET (hung up),
 * -ETIMEDOUT. */
int cgr__pmsg_recv(int sock, struct cgr__pmsg *m, int *fd, int64_t deadline);

/* ---- the driver ----------------------------------------------------- */

/* Starts w's process and runs its init there (w's identity set, kind
 * PROCESS): 0, init's code, or a negative errno (the log says why). */
int cgr__proc_start(cgr_worker *w, int cpu);
/* Stops it (fini, exit) by the deadline, else kills it; reaps it.
 * Returns 0, CGR_EPEERDEAD (it had died) or CGR_ESTUCK. */
int cgr__proc_stop(cgr_worker *w, int64_t deadline);
void cgr__proc_free(cgr_worker *w);
/* Whether w died (*why: how): its process, or, for a thread worker, its
 * thread ended inside a task (thread/thread.c). */
bool cgr__proc_dead(const cgr_worker *w, const char **why);

/* A compiled graph with process workers (proc.c): compile hands each
 * worker process the segment and waits for its compile (0, or the first
 * failure: g's errmsg says whose and why; every process that compiled is
 * told to drop it); run starts their programs; teardown stops them by the
 * deadline (a worker process that does not leave in time is killed:
 * CGR_ESTUCK) and takes the graph off the monitor. */
int cgr__pgraph_compile(cgr_compiled *c, cgr_graph *g);
void cgr__pgraph_run(cgr_compiled *c);
int cgr__pgraph_teardown(cgr_compiled *c, int64_t deadline);

#endif
