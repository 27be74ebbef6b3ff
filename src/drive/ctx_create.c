/*
 * drive/ctx_create.c: cgr_ctx_create: a context (ctx/), and what the
 * layers above it are to know of its parameters, each recorded by the
 * layer that uses it (the GPU libraries to load: device/lib.h; the job
 * whose other ranks may host workers: remote/).
 */
#include <errno.h>
#include <string.h>

#include "device/lib.h"
#include "remote/remote.h"

int cgr_ctx_create(const cgr_ctx_params *p, cgr_ctx **out)
{
	cgr_ctx_params prm;
	const char *libs[CGR__LIB_N] = {0};
	cgr_ctx *ctx;
	int ret;

	if (out == NULL || (p != NULL && p->size < sizeof(size_t)))
		return -EINVAL;
	CGR__PARAMS_COPY(prm, p, ((cgr_ctx_params)CGR_CTX_PARAMS_INIT));
	ret = cgr__ctx_new(&prm, &ctx);
	if (ret < 0)
		return ret;
	if (prm.job != NULL) {
		/* Channels to readers on other hosts ring its link. */
		ctx->job = prm.job;
		ctx->link_bell = &prm.job->quiet;
		ctx->host = prm.job->rank;
		/* Communicators with members on other hosts (rcomm.c); ids
		 * unique in the job: each process counts in its own range. */
		ctx->comm_far = cgr__rcomm_create;
		ctx->comm_ids = (uint64_t)prm.job->rank << 40;
	}
	libs[CGR__LIB_CUDART] = prm.cudart_path;
	libs[CGR__LIB_NCCL] = prm.nccl_path;
	ret = cgr__lib_configure(ctx, libs);
	if (ret < 0) {
		cgr__ctx_put(ctx);
		return ret;
	}
	*out = ctx;
	return 0;
}
