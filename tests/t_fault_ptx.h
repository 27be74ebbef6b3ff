/*
 * tests/t_fault_ptx.h: the kernel tests/gpu-nccl loads through the driver
 * API (cuModuleLoadData) to make a device fail: one store to address 8.
 * tests/cuda-conformance compiles it with ptxas for sm_90, so that a
 * typo here shows in CI rather than on the GPU.
 */
#ifndef CGR_TEST_FAULT_PTX_H
#define CGR_TEST_FAULT_PTX_H

static const char fault_ptx[] =
	".version 6.0\n"
	".target sm_50\n"
	".address_size 64\n"
	".visible .entry cgr_fault(.param .u64 p)\n"
	"{\n"
	"	.reg .u64 %rd<2>;\n"
	"	.reg .u32 %r<2>;\n"
	"	ld.param.u64 %rd1, [p];\n"
	"	mov.u32 %r1, 1;\n"
	"	st.global.u32 [%rd1], %r1;\n"
	"	ret;\n"
	"}\n";

#endif
