/*
 * comm/reduce.c: the reduction kernels of comm/reduce.h.
 *
 * Work goes block by block (CGR__RBLK elements): the first two sources are
 * combined into dst, then every further source is folded into that block
 * while it is still in L1, so each source is read once and dst written
 * once per source.  The loops are plain element-wise loops with no
 * loop-carried dependence (dst may only alias srcs[0], at the same index:
 * hence `ivdep`), which GCC vectorises at -O3; the optimize pragma asks
 * for that here only, whatever the build's -O level.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#define CGR__IVDEP _Pragma("GCC ivdep")
#else
#define CGR__IVDEP
#endif

#include "comm/reduce.h"

#define CGR__RBLK 1024

#define CGR__ADD(U, a, b) ((U)(a) + (U)(b))
#define CGR__MUL(U, a, b) ((U)(a) * (U)(b))
#define CGR__MIN(U, a, b) ((a) < (b) ? (a) : (b))
#define CGR__MAX(U, a, b) ((a) > (b) ? (a) : (b))

/* D: the type CGR_AVG divides in (wide enough for any rank count). */

/* One pass over a block: d[i] = a[i] OP b[i].  U is the type arithmetic is
 * done in: unsigned for integers (wrapping, never undefined overflow),
 * the type itself for floating point. */
#define CGR__PASS(name, T, U, OP)                                           \
	static void name(T *d, const T *a, const T *b, size_t m)            \
	{                                                                   \
		CGR__IVDEP                                                  \
		for (size_t i = 0; i < m; i++)                              \
			d[i] = (T)OP(U, a[i], b[i]);                        \
	}

#define CGR__NATIVE(tn, T, U, D)                                             \
	CGR__PASS(cgr__add_##tn, T, U, CGR__ADD)                            \
	CGR__PASS(cgr__mul_##tn, T, U, CGR__MUL)                            \
	CGR__PASS(cgr__min_##tn, T, U, CGR__MIN)                            \
	CGR__PASS(cgr__max_##tn, T, U, CGR__MAX)                            \
	static void cgr__red_##tn(T *d, const T *const *s, int ns, size_t n, \
				  cgr_redop op, int div)                    \
	{                                                                   \
		void (*pass)(T *, const T *, const T *, size_t);            \
		switch (op) {                                               \
		case CGR_PROD:                                              \
			pass = cgr__mul_##tn;                               \
			break;                                              \
		case CGR_MIN:                                               \
			pass = cgr__min_##tn;                               \
			break;                                              \
		case CGR_MAX:                                               \
			pass = cgr__max_##tn;                               \
			break;                                              \
		default:                                                    \
			pass = cgr__add_##tn;                               \
			break;                                              \
		}                                                           \
		for (size_t b = 0; b < n; b += CGR__RBLK) {                 \
			size_t m = n - b < CGR__RBLK ? n - b : CGR__RBLK;   \
			T *db = d + b;                                      \
			if (ns == 1) {                                      \
				if (db != s[0] + b)                         \
					memcpy(db, s[0] + b, m * sizeof(T)); \
			} else {                                            \
				pass(db, s[0] + b, s[1] + b, m);            \
				for (int j = 2; j < ns; j++)                \
					pass(db, db, s[j] + b, m);          \
			}                                                   \
			if (op == CGR_AVG && div > 1)                       \
				for (size_t i = 0; i < m; i++)              \
					db[i] = (T)((D)db[i] / (D)div);     \
		}                                                           \
	}

CGR__NATIVE(i8, int8_t, uint32_t, int64_t)
CGR__NATIVE(u8, uint8_t, uint32_t, uint64_t)
CGR__NATIVE(i16, int16_t, uint32_t, int64_t)
CGR__NATIVE(u16, uint16_t, uint32_t, uint64_t)
CGR__NATIVE(i32, int32_t, uint32_t, int64_t)
CGR__NATIVE(u32, uint32_t, uint32_t, uint64_t)
CGR__NATIVE(i64, int64_t, uint64_t, int64_t)
CGR__NATIVE(u64, uint64_t, uint64_t, uint64_t)
CGR__NATIVE(f32, float, float, float)
CGR__NATIVE(f64, double, double, double)

/* float16 / bfloat16: widen a block to float, fold, round once. */
#define CGR__HALF(tn, TOF, FROMF)                                           \
	static void cgr__red_##tn(uint16_t *d, const uint16_t *const *s,    \
				  int ns, size_t n, cgr_redop op, int div)  \
	{                                                                   \
		float acc[CGR__RBLK];                                       \
		for (size_t b = 0; b < n; b += CGR__RBLK) {                 \
			size_t m = n - b < CGR__RBLK ? n - b : CGR__RBLK;   \
			const uint16_t *a = s[0] + b;                       \
			for (size_t i = 0; i < m; i++)                      \
				acc[i] = TOF(a[i]);                         \
			for (int j = 1; j < ns; j++) {                      \
				const uint16_t *x = s[j] + b;               \
				switch (op) {                               \
				case CGR_PROD:                              \
					for (size_t i = 0; i < m; i++)      \
						acc[i] *= TOF(x[i]);        \
					break;                              \
				case CGR_MIN:                               \
					for (size_t i = 0; i < m; i++) {    \
						float v = TOF(x[i]);        \
						acc[i] = CGR__MIN(float,    \
							acc[i], v);         \
					}                                   \
					break;                              \
				case CGR_MAX:                               \
					for (size_t i = 0; i < m; i++) {    \
						float v = TOF(x[i]);        \
						acc[i] = CGR__MAX(float,    \
							acc[i], v);         \
					}                                   \
					break;                              \
				default:                                    \
					for (size_t i = 0; i < m; i++)      \
						acc[i] += TOF(x[i]);        \
					break;                              \
				}                                           \
			}                                                   \
			if (op == CGR_AVG && div > 1)                       \
				for (size_t i = 0; i < m; i++)              \
					acc[i] /= (float)div;               \
			uint16_t *db = d + b;                               \
			for (size_t i = 0; i < m; i++)                      \
				db[i] = FROMF(acc[i]);                      \
		}                                                           \
	}

CGR__HALF(f16, cgr__half_to_float, cgr__float_to_half)
CGR__HALF(bf16, cgr__bf16_to_float, cgr__float_to_bf16)

void cgr__reduce(void *dst, const void *const *srcs, int nsrc, size_t count,
		 cgr_dtype dt, cgr_redop op, int avg_div)
{
	if (count == 0 || nsrc < 1)
		return;
	switch (dt) {
#define CGR__CASE(e, tn, T)                                                 \
	case e:                                                             \
		cgr__red_##tn((T *)dst, (const T *const *)srcs, nsrc, count, \
			      op, avg_div);                                 \
		break;
		CGR__CASE(CGR_INT8, i8, int8_t)
		CGR__CASE(CGR_UINT8, u8, uint8_t)
		CGR__CASE(CGR_INT16, i16, int16_t)
		CGR__CASE(CGR_UINT16, u16, uint16_t)
		CGR__CASE(CGR_INT32, i32, int32_t)
		CGR__CASE(CGR_UINT32, u32, uint32_t)
		CGR__CASE(CGR_INT64, i64, int64_t)
		CGR__CASE(CGR_UINT64, u64, uint64_t)
		CGR__CASE(CGR_FLOAT16, f16, uint16_t)
		CGR__CASE(CGR_BFLOAT16, bf16, uint16_t)
		CGR__CASE(CGR_FLOAT32, f32, float)
		CGR__CASE(CGR_FLOAT64, f64, double)
#undef CGR__CASE
	default:
		break;
	}
}
