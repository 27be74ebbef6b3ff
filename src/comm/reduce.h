/*
 * comm/reduce.h: element-wise reduction kernels (every dtype x redop) and
 * the float16/bfloat16 conversions they use.
 */
#ifndef CGR_COMM_REDUCE_H
#define CGR_COMM_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cgr.h"

/*
 * dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i], i < count,
 * folded in that order.  CGR_AVG sums, then divides by avg_div (integer
 * division for integer types, as NCCL).  Integers wrap (two's complement)
 * instead of overflowing; float16 and bfloat16 are reduced in float and
 * rounded to nearest-even once.  dst may be srcs[0] itself (in place);
 * no other overlap is allowed.  nsrc >= 1.
 */
void cgr__reduce(void *dst, const void *const *srcs, int nsrc, size_t count,
		 cgr_dtype dt, cgr_redop op, int avg_div);

static inline float cgr__f32_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline uint32_t cgr__bits_of_f32(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

/* IEEE binary16 to float: exact (subnormals, infinities, NaN kept). */
static inline float cgr__half_to_float(uint16_t h)
{
	const uint32_t shifted_exp = 0x7c00u << 13;
	uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
	uint32_t exp = shifted_exp & o;
	float f;

	o += (uint32_t)(127 - 15) << 23;
	if (exp == shifted_exp) {
		o += (uint32_t)(128 - 16) << 23; /* Inf/NaN */
		f = cgr__f32_of_bits(o);
	} else if (exp == 0) {
		/* Subnormal: renormalise through a float subtraction. */
		o += 1u << 23;
		f = cgr__f32_of_bits(o) - cgr__f32_of_bits(113u << 23);
	} else {
		f = cgr__f32_of_bits(o);
	}
	return cgr__f32_of_bits(cgr__bits_of_f32(f) |
				((uint32_t)(h & 0x8000u) << 16));
}

/* float to IEEE binary16, round to nearest even; overflow gives infinity,
 * NaN stays a (quiet) NaN. */
static inline uint16_t cgr__float_to_half(float f)
{
	const uint32_t f32infty = 255u << 23;
	const uint32_t f16max = (127u + 16u) << 23;
	const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
	uint32_t u = cgr__bits_of_f32(f);
	uint32_t sign = u & 0x80000000u;
	uint16_t o;

	u ^= sign;
	if (u >= f16max) {
		o = u > f32infty ? 0x7e00 : 0x7c00;
	} else if (u < (113u << 23)) {
		/* Subnormal or zero: let the FPU round (nearest even) by
		 * adding a magic number that aligns the mantissa. */
		float t = cgr__f32_of_bits(u) + cgr__f32_of_bits(denorm_magic);
		o = (uint16_t)(cgr__bits_of_f32(t) - denorm_magic);
	} else {
		uint32_t mant_odd = (u >> 13) & 1u;
		u += ((uint32_t)(15 - 127) << 23) + 0xfffu;
		u += mant_odd;
		o = (uint16_t)(u >> 13);
	}
	return (uint16_t)(o | (sign >> 16));
}

static inline float cgr__bf16_to_float(uint16_t h)
{
	return cgr__f32_of_bits((uint32_t)h << 16);
}

/* float to bfloat16, round to nearest even; NaN stays a quiet NaN. */
static inline uint16_t cgr__float_to_bf16(float f)
{
	uint32_t u = cgr__bits_of_f32(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

#endif
