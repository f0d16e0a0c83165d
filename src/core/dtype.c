/* bf16/fp16 <-> fp32 conversions (scalar and array). */
#include "core/dtype.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

uint16_t zn_f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	/* round to nearest, ties to even: add 0x7fff plus the lowest kept bit */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float zn_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

uint16_t zn_f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t abs = u & 0x7fffffffu;

	if (abs > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
	if (abs >= 0x477ff000u) /* rounds to >= 65520: inf */
		return (uint16_t)(sign | 0x7c00u);
	if (abs < 0x38800000u) { /* below 2^-14: fp16 subnormal or zero */
		if (abs < 0x33000000u) /* below half the smallest subnormal (2^-25) */
			return (uint16_t)sign;
		uint32_t e = abs >> 23;
		uint32_t m = (abs & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126 - e; /* 14 + (127 - e) - 1 - ... chosen so m >> shift is units of 2^-24 */
		uint32_t q = m >> shift;
		uint32_t rem = m & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);

		if (rem > half || (rem == half && (q & 1u)))
			q++;
		return (uint16_t)(sign | q);
	}
	/* normal: rebias exponent 127 -> 15 and round the 13 dropped bits to nearest even */
	uint32_t r = abs - 0x38000000u;
	r += 0xfffu + ((r >> 13) & 1u);
	return (uint16_t)(sign | (r >> 13));
}

float zn_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu;
	uint32_t m = h & 0x3ffu;

	if (e == 0x1f)
		return bits_f32(sign | 0x7f800000u | (m << 13));
	if (e == 0) {
		/* subnormal: m * 2^-24, exact in fp32 */
		float v = (float)m * 5.9604644775390625e-8f;
		return sign ? -v : v;
	}
	return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

void zn_cast_f32_to_bf16(uint16_t *out, const float *in, size_t n)
{
#pragma omp parallel for simd if (n > (1u << 16)) schedule(static)
	for (size_t i = 0; i < n; i++)
		out[i] = zn_f32_to_bf16(in[i]);
}

void zn_cast_bf16_to_f32(float *out, const uint16_t *in, size_t n)
{
#pragma omp parallel for simd if (n > (1u << 16)) schedule(static)
	for (size_t i = 0; i < n; i++)
		out[i] = zn_bf16_to_f32(in[i]);
}

void zn_cast_f32_to_f16(uint16_t *out, const float *in, size_t n)
{
#pragma omp parallel for if (n > (1u << 16)) schedule(static)
	for (size_t i = 0; i < n; i++)
		out[i] = zn_f32_to_f16(in[i]);
}

void zn_cast_f16_to_f32(float *out, const uint16_t *in, size_t n)
{
#pragma omp parallel for if (n > (1u << 16)) schedule(static)
	for (size_t i = 0; i < n; i++)
		out[i] = zn_f16_to_f32(in[i]);
}

float zn_f64_round_to(double x, enum zn_dtype t)
{
	/* bf16: 7 stored mantissa bits, normals from 2^-126 (fp32's range); fp16: 10 bits,
	 * normals from 2^-14, largest 65504 */
	const int mant = t == ZN_DTYPE_BF16 ? 7 : 10, emin = t == ZN_DTYPE_BF16 ? -126 : -14;
	const double max = t == ZN_DTYPE_BF16 ? ldexp(2.0 - ldexp(1.0, -7), 127) : 65504.0;
	double ulp, q;
	int e;

	if (t == ZN_DTYPE_F32 || !isfinite(x) || x == 0.0)
		return (float)x; /* fp32: one rounding of the double, to nearest even */
	(void)frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
	e = e - 1 < emin ? emin : e - 1;
	ulp = ldexp(1.0, e - mant); /* the spacing of t's values at x (subnormals: fixed) */
	/* x / ulp and the product are exact (powers of two); nearbyint rounds to nearest
	 * even in the default mode, so this is the one rounding of x to t */
	q = nearbyint(x / ulp) * ulp;
	if (fabs(q) > max) /* past the largest finite value by half an ulp or more */
		return x > 0 ? INFINITY : -INFINITY;
	return (float)q; /* exact: t's values are fp32 values */
}

size_t zn_dtype_size(enum zn_dtype t)
{
	return t == ZN_DTYPE_F32 ? 4 : 2;
}

const char *zn_dtype_name(enum zn_dtype t)
{
	switch (t) {
	case ZN_DTYPE_F32:
		return "fp32";
	case ZN_DTYPE_BF16:
		return "bf16";
	case ZN_DTYPE_F16:
		return "fp16";
	}
	return "?";
}
