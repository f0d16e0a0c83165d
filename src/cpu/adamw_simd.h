/* Internal to src/cpu: the element loads, stores and conversions every AdamW pass inlines
 * into its `omp simd` loops (adamw.c, adamw_q8.c). They are branchless copies of
 * core/dtype.c (selects instead of branches, so they vectorize); the tests hold the passes
 * that use them to the scalar references, which convert through core/dtype.h. Always
 * inlined with constant dtypes, so the dtype switches fold away. */
#ifndef ZN_CPU_ADAMW_SIMD_H
#define ZN_CPU_ADAMW_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu/q8.h"
#include "zinc.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE float fma_simd(float a, float b, float c)
{
#ifdef FP_FAST_FMAF
	return fmaf(a, b, c);
#else
	return a * b + c;
#endif
}

static ALWAYS_INLINE uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static ALWAYS_INLINE float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* zn_f32_to_bf16 without branches: NaN keeps its sign and becomes quiet, the rest rounds to
 * nearest even (overflow to inf, as IEEE). */
static ALWAYS_INLINE uint16_t f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);
	uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	uint32_t quiet = (u >> 16) | 0x0040u;

	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/* zn_f32_to_f16 without branches. Subnormal results come from one float add that lines the
 * 10 result bits up at the bottom of the mantissa, so the FPU's own round-to-nearest-even
 * rounds them (F. Giesen's float_to_half_fast3_rtne). */
static ALWAYS_INLINE uint16_t f32_to_f16(float f)
{
	const uint32_t denorm_magic_bits = ((127 - 15) + (23 - 10) + 1) << 23;
	uint32_t u = f32_bits(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t a = u & 0x7fffffffu;
	uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
	uint32_t sub = f32_bits(bits_f32(a) + bits_f32(denorm_magic_bits)) - denorm_magic_bits;
	uint32_t r = a - 0x38000000u;
	uint32_t norm = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
	uint32_t h = a < 0x38800000u ? sub : norm;

	h = a >= 0x477ff000u ? 0x7c00u : h; /* rounds to >= 65520: inf */
	h = a > 0x7f800000u ? nan : h;
	return (uint16_t)(sign | h);
}

/* zn_f16_to_f32 without branches (subnormals via one exact float subtraction). */
static ALWAYS_INLINE float f16_to_f32(uint16_t h)
{
	const float magic = bits_f32(113u << 23);
	uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
	uint32_t exp = o & (0x7c00u << 13);
	uint32_t normal = o + ((127 - 15) << 23);
	uint32_t infnan = normal + ((128 - 16) << 23);
	uint32_t sub = f32_bits(bits_f32(normal + (1u << 23)) - magic);

	o = exp == (0x7c00u << 13) ? infnan : (exp == 0 ? sub : normal);
	return bits_f32(o | ((uint32_t)(h & 0x8000u) << 16));
}

static ALWAYS_INLINE float load_grad(const void *grad, enum zn_dtype t, size_t i)
{
	if (t == ZN_DTYPE_F32)
		return ((const float *)grad)[i];
	if (t == ZN_DTYPE_BF16)
		return bits_f32((uint32_t)((const uint16_t *)grad)[i] << 16);
	return f16_to_f32(((const uint16_t *)grad)[i]);
}

static ALWAYS_INLINE void store_out(void *out, int t, size_t i, float x)
{
	if (t == ZN_DTYPE_F32)
		((float *)out)[i] = x;
	else if (t == ZN_DTYPE_BF16)
		((uint16_t *)out)[i] = f32_to_bf16(x);
	else if (t == ZN_DTYPE_F16)
		((uint16_t *)out)[i] = f32_to_f16(x);
}

/* The code of x (q8.h): the midpoints below x, through a bucket table's entry. */
static ALWAYS_INLINE unsigned q8_code(const int32_t *restrict entry, float x)
{
	uint32_t u = f32_bits(x);
	uint32_t k = (u & 0x7fffffffu) >> 16, lo = u & 0xffffu, neg = u >> 31;
	uint32_t e, mid;

	k = k > ZN_Q8_LUT_BASE ? k - ZN_Q8_LUT_BASE : 0;
	k = k < ZN_Q8_LUT_COUNT - 1 ? k : ZN_Q8_LUT_COUNT - 1;
	e = (uint32_t)entry[k + neg * ZN_Q8_LUT_COUNT];
	mid = e & 0xffffu;
	return (e >> 16) + (neg ? (mid > lo ? 1u : 0u) : (lo > mid ? 1u : 0u));
}

/* zn_bf16_to_f32: exact */
static ALWAYS_INLINE float bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

#endif
