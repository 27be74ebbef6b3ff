/*
 * device/lib.h: the one loader of the GPU libraries cgr uses without
 * linking them: the CUDA runtime (device/cuda.c) and libnccl
 * (comm/nccl_setup.c).  Each backend names what it loads (a kind, the
 * sonames to try, its symbol table); this file keeps which file a context
 * asked for (cgr_ctx_params.cudart_path, nccl_path: recorded at context
 * creation as per-context state, so the context itself names neither),
 * opens it or the first soname that loads, resolves the table and says
 * why when it cannot.
 *
 * Libraries stay loaded for the life of the process: unloading libcudart
 * or libnccl under their own exit handlers is not safe.
 *
 * Threads: cgr__lib_configure on the thread creating the context, before
 * anything else sees it; the rest from any thread.
 */
#ifndef CGR_DEVICE_LIB_H
#define CGR_DEVICE_LIB_H

#include <stdbool.h>
#include <stddef.h>

#include "base/dl.h"
#include "ctx/ctx.h"

enum cgr__lib_kind {
	CGR__LIB_CUDART, /* cgr_ctx_params.cudart_path */
	CGR__LIB_NCCL,	 /* cgr_ctx_params.nccl_path */
	CGR__LIB_N
};


/* Records the library files ctx is to load (paths[kind], NULL: by
 * soname; copied): 0 or -ENOMEM. */
int cgr__lib_configure(cgr_ctx *ctx, const char *const paths[CGR__LIB_N]);

/* The file ctx was told to load for kind, or NULL (by soname). */
const char *cgr__lib_asked(cgr_ctx *ctx, int kind);

/*
 * Opens library kind for ctx: the file the context was given (that one
 * only), else the first of names[0..n) that loads.  Returns the handle,
 * with the file actually loaded in path; or NULL, with why = "<what>
 * (<file or sonames>) could not be loaded: <the loader's reason>".
 * sonames describes names[] in that message.
 */
void *cgr__lib_open(cgr_ctx *ctx, int kind, const char *what,
		    const char *const *names, size_t n, const char *sonames,
		    char *path, size_t plen, char *why, size_t wlen);

/* cgr__lib_resolve (base/dl.h) fills a table from an opened library. */

#endif
