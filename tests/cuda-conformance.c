/*
 * tests/cuda-conformance.c: what cgr copies from CUDA and NCCL, checked
 * against the real headers and libraries of the toolkit configure found,
 * without a GPU.
 *
 *  - At compile time: every call the cuda and nccl backends resolve with
 *    dlsym (device/cudart_abi.h, comm/nccl_abi.h) has exactly the
 *    prototype cuda_runtime_api.h and nccl.h declare (a difference does
 *    not compile), and so do its optional calls (the driver entry points)
 *    and the driver call it reaches through them (cuStreamWaitValue32,
 *    against cuda.h); cgr's copy of cudaPointerAttributes has the header's
 *    offsets and room for it; the lists tests/cuda-abi-gen.sh read from
 *    the headers (sticky errors, NCCL results) have the numbers the
 *    compiler sees.
 *  - At run time: those lists against cgr's, both ways; every name
 *    resolves in the real libcudart and libnccl, whose versions cgr
 *    accepts; the kernel tests/gpu-nccl loads compiles with ptxas for
 *    sm_90; and the cuda backend over the real runtime with no driver
 *    (the default library, then the toolkit's by path) reports -ENODEV
 *    with the runtime's own message in the log, for streams, workers and
 *    NCCL communicators, and leaves no memory behind.  On a machine with
 *    a driver and a GPU those last checks skip, saying so.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "tap.h"
#include "device/cudart_abi.h"
#include "device/device.h"
#ifdef HAVE_NCCL
#include <nccl.h>

#include "comm/comm.h"
#include "comm/nccl_abi.h"
#endif
#include "cuda-abi-gen.h"
#include "t_fault_ptx.h"

/* ---- compile time -------------------------------------------------- */

#define T_PROTO(field, name, ret, args)                                    \
	_Static_assert(__builtin_types_compatible_p(__typeof__(&name),     \
						    ret(*) args),          \
		       #name ": cgr's prototype differs from the header's");
CGR__CUDART_CALLS(T_PROTO)
/* cudaGetDriverEntryPoint is deprecated (cgr uses it on 12.0-12.4 only). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
CGR__CUDART_OPTIONAL(T_PROTO)
#pragma GCC diagnostic pop
/* The driver call, against cuda.h (cuStreamWaitValue32 is a macro for
 * the _v2 that the entry point of version 12000 returns). */
CGR__CU_DRIVER_CALLS(T_PROTO)
_Static_assert(CU_STREAM_WAIT_VALUE_GEQ == 0 &&
		       CUDA_ERROR_NOT_SUPPORTED == 801 &&
		       cudaDriverEntryPointSuccess == 0,
	       "the driver's constants moved");
_Static_assert(sizeof(CUdeviceptr) == sizeof(void *),
	       "CUdeviceptr is not pointer-sized");
#ifdef HAVE_NCCL
CGR__NCCL_CALLS(T_PROTO)
CGR__NCCL_GSA_CALLS(T_PROTO)
#endif

#define T_SAME_OFFSET(ours, theirs)                                        \
	_Static_assert(offsetof(struct cgr__cu_ptr_attr, ours) ==          \
			       offsetof(struct cudaPointerAttributes, theirs), \
		       "cudaPointerAttributes." #theirs " moved")
T_SAME_OFFSET(type, type);
T_SAME_OFFSET(device, device);
T_SAME_OFFSET(device_pointer, devicePointer);
T_SAME_OFFSET(host_pointer, hostPointer);
_Static_assert(sizeof(struct cgr__cu_ptr_attr) >=
		       sizeof(struct cudaPointerAttributes),
	       "cudaPointerAttributes outgrew cgr's copy");
_Static_assert(sizeof(enum cudaMemoryType) == sizeof(int),
	       "cudaPointerAttributes.type is not an int");
_Static_assert(CUDART_VERSION >= CGR__CUDART_MIN &&
		       CUDART_VERSION < CGR__CUDART_END,
	       "the toolkit's runtime version is not one cgr knows");

#define T_SAME_NUMBER(name, num)                                           \
	_Static_assert((long)(name) == (num), #name " is not " #num);
T_CUDA_STICKY(T_SAME_NUMBER)
#ifdef HAVE_NCCL
T_NCCL_RESULTS(T_SAME_NUMBER)
_Static_assert(NCCL_VERSION_CODE >= CGR__NCCL_MIN_VERSION,
	       "nccl.h is older than cgr supports");
_Static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES &&
		       NCCL_UNIQUE_ID_BYTES == 128,
	       "ncclUniqueId is not 128 bytes");
#endif

/* ---- the lists, both ways ------------------------------------------ */

/* Sticky in cgr though driver_types.h does not say "relaunch": ECC,
 * devices unavailable, a destroyed context, unknown (cuda.c says why). */
static const int extra_sticky[] = { 46, 214, 709, 999 };

static void test_sticky(void)
{
#define T_CODE(name, num) num,
	static const int doc[] = { T_CUDA_STICKY(T_CODE) };
	char missing[256] = "", extra[256] = "";
	size_t nd = sizeof(doc) / sizeof(*doc);

	for (size_t i = 0; i < nd; i++)
		if (!cgr__cuda_sticky(doc[i]))
			snprintf(missing + strlen(missing),
				 sizeof(missing) - strlen(missing), " %d",
				 doc[i]);
	t_ok(nd >= 13 && missing[0] == 0,
	     "every one of the %zu errors driver_types.h documents as sticky "
	     "is sticky in cgr (missing:%s)",
	     nd, missing);
	for (int e = 0; e < 100000; e++) {
		bool known = false;
		if (!cgr__cuda_sticky(e))
			continue;
		for (size_t i = 0; i < nd; i++)
			known |= doc[i] == e;
		for (size_t i = 0; i < 4; i++)
			known |= extra_sticky[i] == e;
		if (!known)
			snprintf(extra + strlen(extra),
				 sizeof(extra) - strlen(extra), " %d", e);
	}
	t_ok(extra[0] == 0,
	     "every code cgr treats as sticky is documented so, or one of "
	     "its four named extras (others:%s)",
	     extra);
}

#ifdef HAVE_NCCL
static void test_nccl_results(void)
{
#define T_RES(name, num) { #name, num },
	static const struct {
		const char *name;
		int num;
	} hdr[] = { T_NCCL_RESULTS(T_RES) };
	size_t nh = sizeof(hdr) / sizeof(*hdr), bad = 0, ncgr = 0;

	for (size_t i = 0; i < nh; i++) {
		const char *n = cgr__nccl_result_name(hdr[i].num);
		if (n == NULL || strcmp(n, hdr[i].name) != 0) {
			t_diag("%s (%d): cgr says %s", hdr[i].name,
			       hdr[i].num, n ? n : "unknown");
			bad++;
		}
	}
	for (int e = -100; e < 1000; e++) {
		bool in = false;
		if (cgr__nccl_result_name(e) == NULL)
			continue;
		ncgr++;
		for (size_t i = 0; i < nh; i++)
			in |= hdr[i].num == e;
		if (!in) {
			t_diag("cgr knows NCCL result %d; nccl.h does not", e);
			bad++;
		}
	}
	t_ok(bad == 0 && ncgr == nh && nh == ncclNumResults,
	     "cgr's %zu NCCL results are nccl.h's %zu, by name and number",
	     ncgr, nh);
	t_is(cgr__nccl_map_result(ncclNumResults), CGR_EDEVICE,
	     "a result newer than nccl.h (%d) is CGR_EDEVICE",
	     (int)ncclNumResults);
	t_is(cgr__nccl_map_result(-1), CGR_EDEVICE, "...and so is -1");
}
#endif

/* ---- the real libraries -------------------------------------------- */

static void *open_cudart(void)
{
	void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		h = dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		h = dlopen(T_CUDA_LIBDIR "/libcudart.so.13", RTLD_NOW);
	if (h == NULL)
		h = dlopen(T_CUDA_LIBDIR "/libcudart.so.12", RTLD_NOW);
	return h;
}

static void test_cudart_symbols(void *h)
{
	char missing[512] = "";
	int n = 0, v = 0;
	cudaError_t (*version)(int *);

#define T_RESOLVES(field, name, ret, args)                                 \
	n++;                                                               \
	if (dlsym(h, #name) == NULL)                                       \
		snprintf(missing + strlen(missing),                        \
			 sizeof(missing) - strlen(missing), " %s", #name);
	CGR__CUDART_CALLS(T_RESOLVES)
	t_ok(missing[0] == 0, "the real libcudart has all %d calls cgr "
	     "resolves (missing:%s)", n, missing);
	n = 0;
	CGR__CUDART_OPTIONAL(T_RESOLVES)
	t_ok(missing[0] == 0, "...and its %d optional ones: the driver's "
	     "entry points (missing:%s)", n, missing);
	*(void **)&version = dlsym(h, "cudaRuntimeGetVersion");
	if (version == NULL || version(&v) != cudaSuccess)
		v = -1;
	t_ok(v >= CGR__CUDART_MIN && v < CGR__CUDART_END &&
		     v / 1000 == CUDART_VERSION / 1000,
	     "its version %d is one cgr accepts, the header's major (%d)", v,
	     CUDART_VERSION);
}

#ifdef HAVE_NCCL
static void test_nccl_symbols(void)
{
	void *h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
	char missing[512] = "";
	int n = 0, v = 0;
	ncclResult_t (*version)(int *);

	if (h == NULL)
		h = dlopen(T_NCCL_LIBDIR "/libnccl.so.2", RTLD_LAZY);
	if (h == NULL) {
		t_ok(0, "the real libnccl.so.2 loads: %s", dlerror());
		return;
	}
	CGR__NCCL_CALLS(T_RESOLVES)
	CGR__NCCL_GSA_CALLS(T_RESOLVES)
	t_ok(missing[0] == 0, "the real libnccl has all %d calls cgr "
	     "resolves (missing:%s)", n, missing);
	*(void **)&version = dlsym(h, "ncclGetVersion");
	if (version == NULL || version(&v) != ncclSuccess)
		v = -1;
	t_ok(v >= CGR__NCCL_MIN_VERSION,
	     "its version %d is one cgr accepts (header: %d)", v,
	     NCCL_VERSION_CODE);
}
#endif

/* The PTX tests/gpu-nccl loads compiles for the H200's sm_90. */
static void test_ptx(void)
{
	char dir[] = "/tmp/cgr-ptx-XXXXXX", cmd[512], path[64];
	FILE *f;
	int rc;

	if (access(T_PTXAS, X_OK) != 0) {
		t_skipf("no ptxas at %s", T_PTXAS);
		return;
	}
	if (mkdtemp(dir) == NULL) {
		t_ok(0, "a temporary directory");
		return;
	}
	snprintf(path, sizeof(path), "%s/fault.ptx", dir);
	f = fopen(path, "w");
	if (f != NULL) {
		fputs(fault_ptx, f);
		fclose(f);
	}
	snprintf(cmd, sizeof(cmd),
		 "%s -arch=sm_90 %s -o %s/fault.cubin 2>&1 | sed 's/^/# /'; "
		 "test -s %s/fault.cubin",
		 T_PTXAS, path, dir, dir);
	rc = system(cmd);
	t_ok(rc == 0, "ptxas -arch=sm_90 compiles tests/t_fault_ptx.h");
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	(void)!system(cmd);
}

/* ---- the real runtime with no driver ------------------------------- */

static char g_log[2048];

static void log_all(void *arg, int level, const char *msg)
{
	(void)arg, (void)level;
	snprintf(g_log + strlen(g_log), sizeof(g_log) - strlen(g_log),
		 "%s; ", msg);
}

static void no_driver(const char *path, const char *expect)
{
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_ctx *ctx;
	cgr_stream *s = NULL;
	cgr_worker *w = NULL;
	size_t b0, n0, b1, n1;
	int64_t t0 = cgr__now_ns();
	const char *name = path != NULL ? path : "the default library";

	cp.cudart_path = path;
	cp.log_fn = log_all;
	cp.log_level = CGR_LOG_DEBUG;
	g_log[0] = 0;
	if (cgr_ctx_create(&cp, &ctx) != 0) {
		t_ok(0, "a context");
		return;
	}
	t_is(cgr_stream_create(ctx, 0, 0, &s), -ENODEV,
	     "%s, no driver: a stream on CUDA device 0 is -ENODEV", name);
	t_ok(strstr(g_log, "cudaGetDeviceCount: error") != NULL &&
		     strstr(g_log, expect) != NULL &&
		     strstr(g_log, "libcudart.so.1") != NULL,
	     "...the log has the library, its version and the runtime's "
	     "message: %s",
	     g_log);
	for (int round = 0; round < 2; round++) {
		/* The runtimes' state, kept until the context goes, is in
		 * the baseline: nothing else may stay. */
		if (round == 1)
			cgr_ctx_memory(ctx, &b0, &n0);
		wp.device = 0;
		t_is(cgr_worker_create(ctx, &wp, &w), -ENODEV,
		     "...a worker on CUDA device 0 is -ENODEV");
#ifdef HAVE_NCCL
		cgr_comm *c = NULL;
		t_is(cgr_comm_create(ctx, NULL, 1, CGR_BACKEND_NCCL, &c),
		     -ENODEV, "...an NCCL communicator is -ENODEV");
#endif
		t_is(cgr_stream_create(ctx, 0, 0, &s), -ENODEV, "...a stream");
	}
	cgr_ctx_memory(ctx, &b1, &n1);
	t_ok(b1 == b0 && n1 == n0,
	     "...and nothing is left allocated (%zu -> %zu bytes)", b0, b1);
	cgr_ctx_destroy(ctx);
	t_ok(cgr__now_ns() - t0 < 20000000000ll, "...in %.0f ms",
	     (cgr__now_ns() - t0) / 1e6);
}

static void test_no_driver(void *h)
{
	cudaError_t (*count)(int *);
	const char *(*text)(cudaError_t);
	char expect[256], path[512];
	cudaError_t e;
	int n = 0;

	*(void **)&count = dlsym(h, "cudaGetDeviceCount");
	*(void **)&text = dlsym(h, "cudaGetErrorString");
	if (count == NULL || text == NULL) {
		t_ok(0, "cudaGetDeviceCount and cudaGetErrorString resolve");
		return;
	}
	e = count(&n);
	if (e == cudaSuccess && n > 0) {
		t_skipf("a driver and %d GPU(s) here: the no-driver checks "
			"are for machines without one", n);
		return;
	}
	/* What the runtime itself says (35, insufficient driver, here). */
	snprintf(expect, sizeof(expect), "error %d", (int)e);
	t_diag("the runtime alone: cudaGetDeviceCount -> %d (%s)", (int)e,
	       text(e));
	no_driver(NULL, expect);
	snprintf(path, sizeof(path), "%s/libcudart.so.%d", T_CUDA_LIBDIR,
		 CUDART_VERSION / 1000);
	no_driver(path, text(e));
}

int main(int argc, char **argv)
{
	void *h;

	t_init(argc, argv, 120);
	test_sticky();
#ifdef HAVE_NCCL
	test_nccl_results();
#endif
	h = open_cudart();
	if (h == NULL) {
		t_ok(0, "the toolkit's libcudart (.so.13 or .so.12) loads: %s",
		     dlerror());
	} else {
		test_cudart_symbols(h);
		test_no_driver(h);
	}
#ifdef HAVE_NCCL
	test_nccl_symbols();
#endif
	test_ptx();
	return t_done();
}
