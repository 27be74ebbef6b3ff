/*
 * proc/proc.h: process workers (see cgr.h, "Process workers"): the
 * driver's side (proc.c: cgr__proc_ops, see graph/worker.h: start, stop,
 * the death monitor, and a graph's compile, run and teardown in its worker
 * processes), the worker process's (agent.c: cgr_worker_main, and its
 * stand-ins for the driver's other workers), and the control messages
 * between them.
 */
#ifndef CGR_EXEC_PROC_H
#define CGR_EXEC_PROC_H

#include "run/run.h"

#define CGR__WORKER_ENV "CGR_WORKER"
#define CGR__PROC_MAX 1024 /* process workers per context */
/* How long a worker process may take to answer a compile (its share of
 * the graph: cgr's work, not the user's) before it is killed. */
#define CGR__PROC_COMPILE_NS 10000000000ll

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

#endif
