/*
 * tests/t_workers.h: workers for the graph tests, on the device a run asks
 * for: CGR_TEST_WORKER_DEVICE=i puts every worker's compute stream on CUDA
 * device i (scripts/gpu-check.sh); a program built with CGR_FAKE_CUDART
 * (the *-cuda-fake tests) loads that model of the CUDA runtime and uses its
 * device 0: give t_workers_params() the parameters of every context the
 * test creates.
 */
#ifndef CGR_TEST_WORKERS_H
#define CGR_TEST_WORKERS_H

#include <stdio.h>
#include <stdlib.h>

#include <cgr.h>

/* Context parameters that load the runtime the test was built for. */
static inline cgr_ctx_params *t_workers_params(cgr_ctx_params *cp)
{
#ifdef CGR_FAKE_CUDART
	cp->cudart_path = CGR_FAKE_CUDART;
#endif
	return cp;
}

/* Creates n workers; prints "Bail out!" and returns non-zero if one
 * cannot be made (no such device). */
static inline int t_workers(cgr_ctx *ctx, cgr_worker **w, int n)
{
	for (int i = 0; i < n; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		if (getenv("CGR_TEST_WORKER_DEVICE") != NULL)
			wp.device = atoi(getenv("CGR_TEST_WORKER_DEVICE"));
#ifdef CGR_FAKE_CUDART
		wp.device = 0;
#endif
		if (cgr_worker_create(ctx, &wp, &w[i]) != 0) {
			printf("Bail out! no worker on device %d\n", wp.device);
			return 1;
		}
	}
	return 0;
}

/* Worker i of a set named w0, w1, ...: a process worker if proc, else a
 * thread.  Returns what cgr_worker_create does. */
static inline int t_worker_named(cgr_ctx *ctx, int i, int proc,
				 cgr_worker **out)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	char name[16];

	snprintf(name, sizeof(name), "w%d", i);
	wp.name = name;
	if (proc)
		wp.kind = CGR_WORKER_PROCESS;
	return cgr_worker_create(ctx, &wp, out);
}

#endif
