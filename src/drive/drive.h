/*
 * drive/drive.h: what the driver's calls share (drive/worker.c): the kinds
 * of worker a compiled graph uses, each of which prepares, starts, stops
 * and waits for its workers' share of the graph (graph/worker.h), and the
 * end of every kind's state of a context.
 */
#ifndef CGR_DRIVE_H
#define CGR_DRIVE_H

#include "compile/compile.h"
#include "run/run.h"

/* More than there are kinds of worker (thread, process, a worker
 * process's stand-in). */
#define CGR__KINDS_MAX 8
/* The least time cgr_compiled_teardown gives workers to leave: an idle
 * one answers in microseconds, but may have to be scheduled first. */
#define CGR__LEAVE_MIN_NS 20000000 /* 20 ms */

/* The kinds (ops tables) of c's programs' workers, each once, in the
 * order of their first program: how many. */
size_t cgr__compiled_kinds(const cgr_compiled *c,
			   const struct cgr__worker_ops **out);

/* cgr_ctx_destroy, once every worker was destroyed: every kind of the
 * registry ends what it keeps of ctx (ctx_release). */
void cgr__worker_kinds_release(cgr_ctx *ctx);

#endif
