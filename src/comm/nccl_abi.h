/*
 * comm/nccl_abi.h: what the NCCL backend takes from libnccl, in one
 * place: the calls it resolves with dlsym (each with the prototype of
 * nccl.h) and the versions it depends on.  comm/nccl.h and nccl_setup.c
 * build its table of calls from these lists, and tests/cuda-conformance
 * checks every entry against the real header (a prototype that differs
 * does not compile) and the real library (every name resolves).
 */
#ifndef CGR_COMM_NCCL_ABI_H
#define CGR_COMM_NCCL_ABI_H

#include <nccl.h>

#define CGR__NCCL_MIN_VERSION 21800 /* 2.18.0 */
#define CGR__NCCL_NATIVE_GSA 22803  /* 2.28.3: ncclGather, ncclScatter, AlltoAll */

/* X(field, name, return type, (parameters)): the calls every supported
 * version has. */
#define CGR__NCCL_CALLS(X)                                                 \
	X(get_version, ncclGetVersion, ncclResult_t, (int *))              \
	X(get_unique_id, ncclGetUniqueId, ncclResult_t, (ncclUniqueId *))  \
	X(init_rank_config, ncclCommInitRankConfig, ncclResult_t,          \
	  (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *))          \
	X(async_error, ncclCommGetAsyncError, ncclResult_t,                \
	  (ncclComm_t, ncclResult_t *))                                    \
	X(finalize, ncclCommFinalize, ncclResult_t, (ncclComm_t))          \
	X(destroy, ncclCommDestroy, ncclResult_t, (ncclComm_t))            \
	X(abort, ncclCommAbort, ncclResult_t, (ncclComm_t))                \
	X(group_start, ncclGroupStart, ncclResult_t, (void))               \
	X(group_end, ncclGroupEnd, ncclResult_t, (void))                   \
	X(all_reduce, ncclAllReduce, ncclResult_t,                         \
	  (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,      \
	   ncclComm_t, cudaStream_t))                                      \
	X(all_gather, ncclAllGather, ncclResult_t,                         \
	  (const void *, void *, size_t, ncclDataType_t, ncclComm_t,       \
	   cudaStream_t))                                                  \
	X(reduce_scatter, ncclReduceScatter, ncclResult_t,                 \
	  (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,      \
	   ncclComm_t, cudaStream_t))                                      \
	X(reduce, ncclReduce, ncclResult_t,                                \
	  (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, \
	   ncclComm_t, cudaStream_t))                                      \
	X(broadcast, ncclBroadcast, ncclResult_t,                          \
	  (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,  \
	   cudaStream_t))                                                  \
	X(send, ncclSend, ncclResult_t,                                    \
	  (const void *, size_t, ncclDataType_t, int, ncclComm_t,          \
	   cudaStream_t))                                                  \
	X(recv, ncclRecv, ncclResult_t,                                    \
	  (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)) \
	X(error_string, ncclGetErrorString, const char *, (ncclResult_t))  \
	X(last_error, ncclGetLastError, const char *, (ncclComm_t))

/* The calls of CGR__NCCL_NATIVE_GSA and later (NULL before: grouped
 * sends and receives instead). */
#define CGR__NCCL_GSA_CALLS(X)                                             \
	X(gather, ncclGather, ncclResult_t,                                \
	  (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,  \
	   cudaStream_t))                                                  \
	X(scatter, ncclScatter, ncclResult_t,                              \
	  (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,  \
	   cudaStream_t))                                                  \
	X(alltoall, ncclAlltoAll, ncclResult_t,                            \
	  (const void *, void *, size_t, ncclDataType_t, ncclComm_t,       \
	   cudaStream_t))

#endif
