/*
 * device/cudart_abi.h: what the cuda backend takes from libcudart, in one
 * place: the calls it resolves with dlsym (each with the prototype of
 * cuda_runtime_api.h), the runtime versions it knows, and its own copy
 * of cudaPointerAttributes.  cuda.c builds its table of calls from this
 * list, and tests/cuda-conformance checks every entry against the real
 * header (a prototype that differs does not compile) and the real library
 * (every name resolves), so the two cannot drift apart silently.  The
 * optional calls may be missing from a runtime (cudaGetDriverEntryPoint-
 * ByVersion came with 12.5, cudaGetDriverEntryPoint may go); the one
 * driver call cgr uses, cuStreamWaitValue32, is reached through them
 * (cgr never links libcuda) and checked against cuda.h.
 */
#ifndef CGR_DEVICE_CUDART_ABI_H
#define CGR_DEVICE_CUDART_ABI_H

#include <cuda.h>
#include <cuda_runtime_api.h>

/* The runtime versions cgr knows the ABI of: 12.0 up to 13.x. */
#define CGR__CUDART_MIN 12000
#define CGR__CUDART_END 14000

/* X(field, name, return type, (parameters)) for each call. */
#define CGR__CUDART_CALLS(X)                                               \
	X(runtime_version, cudaRuntimeGetVersion, cudaError_t, (int *))    \
	X(get_device_count, cudaGetDeviceCount, cudaError_t, (int *))      \
	X(set_device, cudaSetDevice, cudaError_t, (int))                   \
	X(priority_range, cudaDeviceGetStreamPriorityRange, cudaError_t,   \
	  (int *, int *))                                                  \
	X(stream_create, cudaStreamCreateWithPriority, cudaError_t,        \
	  (cudaStream_t *, unsigned int, int))                             \
	X(stream_destroy, cudaStreamDestroy, cudaError_t, (cudaStream_t))  \
	X(stream_query, cudaStreamQuery, cudaError_t, (cudaStream_t))      \
	X(launch_host, cudaLaunchHostFunc, cudaError_t,                    \
	  (cudaStream_t, cudaHostFn_t, void *))                            \
	X(memcpy_async, cudaMemcpyAsync, cudaError_t,                      \
	  (void *, const void *, size_t, enum cudaMemcpyKind,              \
	   cudaStream_t))                                                  \
	X(event_create, cudaEventCreateWithFlags, cudaError_t,             \
	  (cudaEvent_t *, unsigned int))                                   \
	X(event_destroy, cudaEventDestroy, cudaError_t, (cudaEvent_t))     \
	X(event_record, cudaEventRecord, cudaError_t,                      \
	  (cudaEvent_t, cudaStream_t))                                     \
	X(event_query, cudaEventQuery, cudaError_t, (cudaEvent_t))         \
	X(stream_wait_event, cudaStreamWaitEvent, cudaError_t,             \
	  (cudaStream_t, cudaEvent_t, unsigned int))                       \
	X(pointer_attributes, cudaPointerGetAttributes, cudaError_t,       \
	  (struct cudaPointerAttributes *, const void *))                  \
	X(error_name, cudaGetErrorName, const char *, (cudaError_t))       \
	X(error_string, cudaGetErrorString, const char *, (cudaError_t))   \
	X(malloc, cudaMalloc, cudaError_t, (void **, size_t))              \
	X(free, cudaFree, cudaError_t, (void *))                           \
	X(memcpy, cudaMemcpy, cudaError_t,                                 \
	  (void *, const void *, size_t, enum cudaMemcpyKind))              \
	X(host_alloc, cudaHostAlloc, cudaError_t,                          \
	  (void **, size_t, unsigned int))                                 \
	X(free_host, cudaFreeHost, cudaError_t, (void *))                  \
	X(host_device_ptr, cudaHostGetDevicePointer, cudaError_t,          \
	  (void **, void *, unsigned int))

/* X(...) for each call that may be missing (NULL in the table). */
#define CGR__CUDART_OPTIONAL(X)                                            \
	X(entry_point_v, cudaGetDriverEntryPointByVersion, cudaError_t,    \
	  (const char *, void **, unsigned int, unsigned long long,        \
	   enum cudaDriverEntryPointQueryResult *))                        \
	X(entry_point, cudaGetDriverEntryPoint, cudaError_t,               \
	  (const char *, void **, unsigned long long,                      \
	   enum cudaDriverEntryPointQueryResult *))

/* The driver calls, from the entry points above (the ABI of CUDA 12.0:
 * cgr asks for that version). */
#define CGR__CU_DRIVER_VERSION 12000
#define CGR__CU_DRIVER_CALLS(X)                                            \
	X(wait_value32, cuStreamWaitValue32, CUresult,                     \
	  (CUstream, CUdeviceptr, cuuint32_t, unsigned int))

/*
 * cudaPointerAttributes as any runtime from 12.0 on writes it: CUDA 12.x
 * writes the first four fields (24 bytes), 13.0 added reserved[8] (88
 * bytes, zero on input).  The header's struct of an older toolkit would
 * be overrun by a newer runtime, so the call gets this one, zeroed, with
 * room to spare; only type is read.
 */
struct cgr__cu_ptr_attr {
	int type; /* enum cudaMemoryType */
	int device;
	void *device_pointer;
	void *host_pointer;
	long reserved[8]; /* 13.0 */
	long spare[16];	  /* whatever a later version adds */
};

#endif
