/* bitsandbytes' 4-bit quantization (src/model/quant/nf4.c, docs/qlora.md) against an
 * independent float64 implementation of its rules: absmax per block of 64, codes the
 * nearest NF4 value of x * (1 / absmax) (fp32 reciprocal and product), two codes a byte
 * with the first element in the high nibble, dequantization code x absmax rounded to the
 * quant dtype; double quant: the mean offset, blocks of 256 over the absmax, the nearest
 * entry of the dynamic map. Seeded inputs; ties within 1e-6 of a midpoint may take either
 * neighbour (bitsandbytes' pivots are the fp32 roundings of the midpoints). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "model/quant/nf4.h"
#include "model/quant/q4.h"

static const double nf4_ref[16] = {
	-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
	-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
	0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
	0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
};

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 11;
}

static double unif(uint64_t *s)
{
	return (double)lcg(s) * 0x1.0p-53;
}

/* nearest of n sorted values in float64; *tie when x is within 1e-6 of a midpoint */
static int nearest(const double *v, int n, double x, bool *tie)
{
	int best = 0;

	*tie = false;
	for (int i = 1; i < n; i++)
		if (fabs(x - v[i]) < fabs(x - v[best]))
			best = i;
	for (int i = 0; i + 1 < n; i++)
		if (fabs(x - (v[i] + v[i + 1]) / 2) < 1e-6)
			*tie = true;
	return best;
}

/* Gaussian-ish weights, a few outliers, one all-zero block */
static float *weights(uint64_t n, uint64_t seed)
{
	float *x = malloc(n * sizeof(*x));

	for (uint64_t i = 0; i < n; i++) {
		double g = unif(&seed) + unif(&seed) + unif(&seed) - 1.5;

		x[i] = (float)(g * 0.05 * (i % 97 == 3 ? 20.0 : 1.0));
	}
	memset(x + 128, 0, 64 * sizeof(*x));
	return x;
}

Test(nf4, codes_absmax_and_nibble_order_match_the_float64_rules)
{
	const uint64_t n = 64 * 300;
	float *x = weights(n, 7), *absmax = malloc(n / 64 * sizeof(float));
	uint8_t *q = malloc(n / 2);
	int ties = 0;

	zn_nf4_quantize(q, absmax, x, n, 64);
	for (uint64_t b = 0; b < n / 64; b++) {
		double m = 0;

		for (int i = 0; i < 64; i++)
			m = fmax(m, fabs((double)x[b * 64 + i]));
		cr_assert_eq((double)absmax[b], m, "block %llu absmax %g, want %g",
			     (unsigned long long)b, (double)absmax[b], m);
		for (int i = 0; i < 64; i++) {
			uint64_t k = b * 64 + i;
			float inv = 1.0f / (float)m;
			double y = (double)(x[k] * inv);
			int got = (i % 2 == 0) ? q[k / 2] >> 4 : q[k / 2] & 15;
			bool tie;
			int want = m == 0 ? 0 : nearest(nf4_ref, 16, y, &tie);

			if (m != 0 && tie && abs(got - want) <= 1) {
				ties++;
				continue;
			}
			cr_assert_eq(got, want, "element %llu (%g, scaled %.9g): code %d, want %d",
				     (unsigned long long)k, (double)x[k], y, got, want);
		}
	}
	cr_assert_lt(ties, 10);
	free(x);
	free(absmax);
	free(q);
}

Test(nf4, the_first_element_is_the_high_nibble)
{
	float x[64] = { 0 };
	float absmax;
	uint8_t q[32];

	x[0] = 1.0f;   /* code 15 */
	x[1] = -1.0f;  /* code 0 */
	x[2] = 0.0f;   /* code 7 */
	x[3] = 0.5f;   /* nearer 0.4407 than 0.5626: code 12 */
	zn_nf4_quantize(q, &absmax, x, 64, 64);
	cr_assert_eq(q[0], 0xf0);
	cr_assert_eq(q[1], 0x7c);
	cr_assert_eq(absmax, 1.0f);
}

Test(nf4, dequantize_is_code_times_absmax_rounded_to_the_quant_dtype)
{
	const uint64_t n = 64 * 40;
	float *x = weights(n, 11), *absmax = malloc(n / 64 * sizeof(float));
	float *y32 = malloc(n * sizeof(float)), *y16 = malloc(n * sizeof(float));
	uint8_t *q = malloc(n / 2);

	zn_nf4_quantize(q, absmax, x, n, 64);
	zn_q4_dequantize(y32, q, absmax, n, 64, ZN_Q4_NF4, ZN_DTYPE_F32);
	zn_q4_dequantize(y16, q, absmax, n, 64, ZN_Q4_NF4, ZN_DTYPE_BF16);
	for (uint64_t k = 0; k < n; k++) {
		int c = (k % 2 == 0) ? q[k / 2] >> 4 : q[k / 2] & 15;
		double want = nf4_ref[c] * (double)absmax[k / 64];

		/* the float64 product of two floats is exact: rounding it once is fp32's */
		cr_assert_eq(y32[k], (float)want, "element %llu: %.9g, want %.9g",
			     (unsigned long long)k, (double)y32[k], want);
		cr_assert_eq(y16[k], zn_f64_round_to((double)(float)want, ZN_DTYPE_BF16));
	}
	/* the all-zero block: 0 * (1 / 0) is NaN, code 0 (-1.0), value -0.0 as bitsandbytes */
	cr_assert_eq(q[64], 0);
	cr_assert(y32[128] == 0.0f && signbit(y32[128]));
	free(x);
	free(absmax);
	free(y32);
	free(y16);
	free(q);
}

/* create_dynamic_map(signed=True, 7, 8) in float64: level i (0..6) has 2^i means of
 * linspace(0.1, 1, 2^i + 1) neighbours, times 10^(i - 6), both signs; then 0 and 1 */
static void dynamic_ref(double out[256])
{
	int k = 0;

	for (int i = 0; i < 7; i++) {
		int steps = (1 << i) + 1;

		for (int j = 0; j + 1 < steps; j++) {
			double a = 0.1 + 0.9 * j / (steps - 1), b = 0.1 + 0.9 * (j + 1) / (steps - 1);
			double v = pow(10.0, i - 6) * (a + b) / 2;

			out[k++] = v;
			out[k++] = -v;
		}
	}
	out[k++] = 0;
	out[k++] = 1;
	for (int i = 1; i < 256; i++)
		for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
			double t = out[j];

			out[j] = out[j - 1];
			out[j - 1] = t;
		}
}

Test(nf4, dynamic_map_is_bitsandbytes_signed_map)
{
	double ref[256];
	float map[256];

	dynamic_ref(ref);
	zn_q4_dynamic_map(map);
	for (int i = 0; i < 256; i++)
		cr_assert_leq(fabs((double)map[i] - ref[i]), fabs(ref[i]) * 3e-7,
			      "entry %d: %.9g, want %.9g", i, (double)map[i], ref[i]);
	cr_assert_eq(map[0], -map[254]); /* no -1: the largest mean, negated */
	cr_assert_eq(map[255], 1.0f);
}

Test(nf4, double_quant_matches_the_float64_rules)
{
	const uint64_t nb = 700; /* 3 nested blocks, the last partial */
	float *absmax = malloc(nb * sizeof(float)), *back = malloc(nb * sizeof(float));
	float absmax2[3], offset, map[256];
	uint8_t *q = malloc(nb);
	double ref[256], sum = 0;
	uint64_t seed = 5;
	int ties = 0;

	for (uint64_t i = 0; i < nb; i++) {
		absmax[i] = (float)(0.02 + 0.2 * unif(&seed));
		sum += absmax[i];
	}
	zn_q4_dynamic_map(map);
	for (int i = 0; i < 256; i++)
		ref[i] = map[i];
	zn_q4_nest(q, absmax2, &offset, absmax, nb, map);
	cr_assert_eq(offset, (float)(sum / nb));
	for (uint64_t b = 0; b < 3; b++) {
		double m = 0;

		for (uint64_t i = b * 256; i < nb && i < b * 256 + 256; i++)
			m = fmax(m, fabs((double)(absmax[i] - offset)));
		cr_assert_eq((double)absmax2[b], m);
		for (uint64_t i = b * 256; i < nb && i < b * 256 + 256; i++) {
			double y = (double)((absmax[i] - offset) * (1.0f / (float)m));
			bool tie;
			int want = nearest(ref, 256, y, &tie);

			if (tie && abs((int)q[i] - want) <= 1) {
				ties++;
				continue;
			}
			cr_assert_eq(q[i], want, "absmax %llu (scaled %.9g): code %d, want %d",
				     (unsigned long long)i, y, q[i], want);
		}
	}
	cr_assert_lt(ties, 10);
	zn_q4_unnest(back, q, absmax2, offset, nb, map);
	for (uint64_t i = 0; i < nb; i++) {
		/* volatile: the product rounded on its own (no fma), as bitsandbytes' two ops */
		volatile float prod = (float)((double)map[q[i]] * absmax2[i / 256]);
		float want = prod + offset;

		cr_assert_eq(back[i], want);
		/* 8 bits of a scaled difference: within a few percent of the true scale */
		cr_assert_leq(fabs(back[i] - absmax[i]), 0.01 * absmax2[i / 256] + 1e-7);
	}
	free(absmax);
	free(back);
	free(q);
}

/* --quantize-base: which tensors (transformers' choice) and whole blocks only */
Test(nf4, layout_takes_linear_weights_and_refuses_partial_blocks, .init = cr_redirect_stderr)
{
	static const char *const names[] = { "model.embed_tokens.weight",
					      "model.layers.0.input_layernorm.weight",
					      "model.layers.0.self_attn.q_proj.weight",
					      "model.layers.0.self_attn.q_proj.bias", "lm_head.weight",
					      "transformer.h.0.attn.c_attn.weight", "transformer.wte.weight" };
	static const int ndim[] = { 2, 1, 2, 1, 2, 2, 2 };
	static const bool linear[] = { false, false, true, false, false, true, false };
	struct zn_tensor_desc one[1];
	struct zn_layer_desc d = { .tensor_count = 1, .tensors = one };
	struct zn_q4_layer q;
	char buf[512] = { 0 };

	for (int i = 0; i < 7; i++) {
		struct zn_tensor_desc t = { .ndim = ndim[i] };

		snprintf(t.name, sizeof(t.name), "%s", names[i]);
		cr_assert_eq(zn_q4_is_linear(&t, NULL), linear[i], "%s", names[i]);
	}
	d.tensors[0] = (struct zn_tensor_desc){ .name = "model.layers.0.mlp.down_proj.weight",
						.ndim = 2, .shape = { 64, 2 }, .numel = 128 };
	cr_assert(!zn_q4_is_linear(&d.tensors[0], "down_proj"), "llm_int8_skip_modules");
	cr_assert(!zn_q4_is_linear(&d.tensors[0], "model.layers.0"), "a skipped prefix");
	cr_assert(zn_q4_is_linear(&d.tensors[0], "up_proj,lm_head"));
	cr_assert_eq(zn_q4_layout(&q, &d, 128, ZN_DTYPE_BF16, false, NULL), 0);
	cr_assert_eq(q.count, 1);
	cr_assert_eq(q.bytes, 64 + 2 * 4 + 8 /* the packed codes, absmax, 16-byte aligned */);
	d.tensors[0].shape[1] = 1;
	d.tensors[0].numel = 100;
	cr_assert_eq(zn_q4_layout(&q, &d, 100, ZN_DTYPE_BF16, false, NULL), -EINVAL);
	fflush(stderr);
	fread(buf, 1, sizeof(buf) - 1, cr_get_redirected_stderr());
	cr_assert(strstr(buf, "down_proj") && strstr(buf, "multiple"), "%s", buf);
}
