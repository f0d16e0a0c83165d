/* bitsandbytes' 4-bit blockwise quantization and its nested quantization (nf4.h). */
#include "model/quant/nf4.h"

#include <math.h>
#include <stddef.h>

#include "core/dtype.h"

/* NF4's 16 values (QLoRA; bitsandbytes' get_4bit_type("nf4")) */
static const float nf4_code[16] = {
	-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
	-0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
	0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
	0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
	0.7229568362236023f, 1.0f,
};

/* bitsandbytes' encoder compares with these 15 points (its decision tree's pivots, the
 * midpoints between neighbouring codes): the code is how many lie strictly below x */
static const float nf4_pivot[15] = {
	-0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f,
	-0.33967943489551544f, -0.23460740596055984f, -0.13791173323988914f,
	-0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f,
	0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,
	0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f,
};

/* FP4 (1 sign, 2 exponent, 1 mantissa bit, bias 2) in bit-pattern order, divided by its
 * largest magnitude 12 as get_4bit_type("fp4") divides it (constant expressions: the
 * compiler's correctly rounded fp32 quotients) */
static const float fp4_code[16] = {
	0.0f / 12.0f, 0.0625f / 12.0f, 8.0f / 12.0f, 12.0f / 12.0f,
	4.0f / 12.0f, 6.0f / 12.0f, 2.0f / 12.0f, 3.0f / 12.0f,
	-0.0f / 12.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -12.0f / 12.0f,
	-4.0f / 12.0f, -6.0f / 12.0f, -2.0f / 12.0f, -3.0f / 12.0f,
};

const float *zn_q4_code(enum zn_q4_type t)
{
	return t == ZN_Q4_NF4 ? nf4_code : fp4_code;
}

uint8_t zn_nf4_encode(float x)
{
	uint8_t c = 0;

	/* a NaN compares false everywhere: code 0, as bitsandbytes' tree gives it */
	for (int i = 0; i < 15; i++)
		c += x > nf4_pivot[i];
	return c;
}

void zn_nf4_quantize(uint8_t *packed, float *absmax, const float *x, uint64_t n, int blocksize)
{
	for (uint64_t b = 0; b < n / (uint64_t)blocksize; b++) {
		const float *v = x + b * (uint64_t)blocksize;
		uint8_t *o = packed + b * (uint64_t)blocksize / 2;
		float m = 0.0f, inv;

		for (int i = 0; i < blocksize; i++)
			m = fmaxf(m, fabsf(v[i]));
		absmax[b] = m;
		inv = 1.0f / m; /* the reciprocal once, then products: the kernel's rounding */
		for (int i = 0; i < blocksize; i += 2) {
			float hi = v[i] * inv, lo = v[i + 1] * inv;

			o[i / 2] = (uint8_t)(zn_nf4_encode(hi) << 4 | zn_nf4_encode(lo));
		}
	}
}

/* torch.linspace(0.1, 1, steps) in fp32: start + step * i for the first half, end - step *
 * (steps - 1 - i) for the second (ATen's linspace formula) */
static float linspace_at(int steps, int i)
{
	const float start = 0.1f, end = 1.0f;
	float step = (end - start) / (float)(steps - 1);
	/* volatile: the product rounded on its own, never contracted into an fma (the build
	 * is gnu11, where GCC contracts a * b + c across statements) */
	volatile float prod;

	if (i < steps / 2) {
		prod = step * (float)i;
		return start + prod;
	}
	prod = step * (float)(steps - 1 - i);
	return end - prod;
}

static void sort_floats(float *v, int n)
{
	for (int i = 1; i < n; i++) {
		float x = v[i];
		int j = i - 1;

		for (; j >= 0 && v[j] > x; j--)
			v[j + 1] = v[j];
		v[j + 1] = x;
	}
}

void zn_q4_dynamic_map(float out[256])
{
	/* signed, 7 exponent bits of 8: level i has 2^i fraction means, scaled by 10^(i - 6),
	 * both signs; then 0 and 1 (no additional items, no gap) */
	static const float scale[7] = { 1e-06f, 1e-05f, 0.0001f, 0.001f, 0.01f, 0.1f, 1.0f };
	int k = 0;

	for (int i = 0; i < 7; i++) {
		int steps = (1 << i) + 1;

		for (int j = 0; j + 1 < steps; j++) {
			float sum = linspace_at(steps, j) + linspace_at(steps, j + 1);
			float mean = sum / 2.0f;

			out[k++] = scale[i] * mean;
			out[k++] = -(scale[i] * mean);
		}
	}
	out[k++] = 0.0f;
	out[k++] = 1.0f;
	sort_floats(out, k);
}

/* bitsandbytes' 8-bit encoder: a binary search over the sorted map from its middle, then
 * the nearer neighbour by fp32 midpoints */
static uint8_t encode8(const float map[256], float x)
{
	int pivot = 127, upper_pivot = 255, lower_pivot = 0;
	float lower = -1.0f, upper = 1.0f, val = map[pivot];

	for (int i = 64; i > 0; i >>= 1) {
		if (x > val) {
			lower_pivot = pivot;
			lower = val;
			pivot += i;
		} else {
			upper_pivot = pivot;
			upper = val;
			pivot -= i;
		}
		val = map[pivot];
	}
	if (upper_pivot == 255)
		upper = map[upper_pivot];
	if (lower_pivot == 0)
		lower = map[lower_pivot];
	if (x > val)
		return (uint8_t)(x > (upper + val) * 0.5f ? upper_pivot : pivot);
	return (uint8_t)(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

void zn_q4_nest(uint8_t *q, float *absmax2, float *offset, const float *absmax, uint64_t nb,
		const float map[256])
{
	double sum = 0;
	float off;

	/* torch's fp32 mean; summed here in float64 and rounded once */
	for (uint64_t i = 0; i < nb; i++)
		sum += absmax[i];
	off = nb ? (float)(sum / (double)nb) : 0.0f;
	*offset = off;
	for (uint64_t b = 0; b * ZN_Q4_NESTED_BLOCK < nb; b++) {
		uint64_t first = b * ZN_Q4_NESTED_BLOCK, end = first + ZN_Q4_NESTED_BLOCK;
		float m = 0.0f, inv;

		end = end < nb ? end : nb;
		for (uint64_t i = first; i < end; i++)
			m = fmaxf(m, fabsf(absmax[i] - off));
		absmax2[b] = m;
		inv = 1.0f / m;
		for (uint64_t i = first; i < end; i++)
			q[i] = encode8(map, (absmax[i] - off) * inv);
	}
}

void zn_q4_unnest(float *absmax, const uint8_t *q, const float *absmax2, float offset,
		  uint64_t nb, const float map[256])
{
	for (uint64_t i = 0; i < nb; i++) {
		volatile float v = map[q[i]] * absmax2[i / ZN_Q4_NESTED_BLOCK]; /* no fma */

		absmax[i] = v + offset;
	}
}

static float round_to(float v, enum zn_dtype t)
{
	if (t == ZN_DTYPE_BF16)
		return zn_bf16_to_f32(zn_f32_to_bf16(v));
	if (t == ZN_DTYPE_F16)
		return zn_f16_to_f32(zn_f32_to_f16(v));
	return v;
}

void zn_q4_dequantize(float *out, const uint8_t *packed, const float *absmax, uint64_t n,
		      int blocksize, enum zn_q4_type t, enum zn_dtype qdtype)
{
	const float *code = zn_q4_code(t);

	for (uint64_t i = 0; i < n; i++) {
		uint8_t byte = packed[i / 2];
		uint8_t c = (i & 1) ? (uint8_t)(byte & 0x0f) : (uint8_t)(byte >> 4);

		out[i] = round_to(code[c] * absmax[i / (uint64_t)blocksize], qdtype);
	}
}
