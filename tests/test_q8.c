/* Blockwise 8-bit quantization (cpu/q8.h) against an independent float64 reference
 * (tests/q8_ref.h): the dynamic maps entry by entry, each block's absmax, the nearest code
 * for seeded values over eight decades, dequantization exactly, m's sign, all-zero blocks
 * and sizes that end inside a block; the block passes of AdamW's int8 pass against the
 * bucket tables. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/adamw_simd.h"
#include "cpu/q8.h"
#include "cpu/q8_block.h"
#include "kernels_check.h"
#include "q8_ref.h"

Test(q8, maps_are_bitsandbytes_dynamic_maps)
{
	for (int sgn = 0; sgn < 2; sgn++) {
		const float *map = zn_q8_map(sgn);
		const float *bound = zn_q8_bounds(sgn);
		double ref[256];
		int negative = 0;

		qr_map(ref, sgn);
		for (int c = 0; c < 256; c++) {
			cr_expect_eq(map[c], (float)ref[c], "%s map[%d] = %.9g, reference %.17g",
				     sgn ? "signed" : "unsigned", c, map[c], ref[c]);
			negative += map[c] < 0;
			if (c > 0)
				cr_expect_gt(map[c], map[c - 1], "map[%d] not ascending", c);
			if (c < 255)
				cr_expect_eq(bound[c], (map[c] + map[c + 1]) * 0.5f, "bound[%d]", c);
		}
		cr_expect(isinf(bound[255]) && bound[255] > 0);
		cr_expect_eq(map[255], 1.0f);
		cr_expect_eq(negative, sgn ? 127 : 0);
		cr_expect_eq(map[sgn ? ZN_Q8_ZERO_SIGNED : ZN_Q8_ZERO_UNSIGNED], 0.0f);
	}
	/* by hand: the smallest magnitude is 1e-6 x mean(0.1, 1); the largest below 1 is the
	 * top interval's centre of linspace(0.1, 1, 65) (signed) or 129 (unsigned) */
	cr_expect_float_eq(zn_q8_map(true)[128], 5.5e-7f, 1e-13f);
	cr_expect_float_eq(zn_q8_map(true)[0], -(1.0f - 0.9f / 128), 1e-7f);
	cr_expect_float_eq(zn_q8_map(false)[254], 1.0f - 0.9f / 256, 1e-7f);
	cr_expect_float_eq(zn_q8_map(false)[1], 1e-6f * (0.1f + 0.9f / 4), 1e-13f);
}

/* seeded values whose magnitudes spread over eight decades; v's are positive */
static void fill_spread(float *x, size_t n, bool sgn, uint64_t seed)
{
	struct kc_rng r = { seed };

	for (size_t i = 0; i < n; i++) {
		float mag = powf(10.0f, kc_uniform(&r, -8.0f, 0.0f));

		x[i] = sgn && (kc_next(&r) & 1) ? -mag : mag;
	}
}

/* codes and absmax of x against the reference; returns mismatches (printed) */
static int check_quantized(const float *x, const uint8_t *codes, const float *absmax, size_t n,
			   bool sgn)
{
	const float *map = zn_q8_map(sgn);
	int bad = 0;

	for (size_t b = 0; b * QR_BLOCK < n; b++) {
		size_t first = b * QR_BLOCK, end = first + QR_BLOCK < n ? first + QR_BLOCK : n;
		double amax = 0.0;

		for (size_t i = first; i < end; i++)
			amax = fmax(amax, fabs((double)x[i]));
		if (absmax[b] != (float)amax) {
			printf("block %zu: absmax %.9g, reference %.9g\n", b, absmax[b], amax);
			bad++;
		}
		for (size_t i = first; i < end; i++) {
			/* q8.h: x times the block's reciprocal, in float */
			float xn = amax > 0 ? x[i] * (1.0f / (float)amax) : 0.0f;
			int want = qr_nearest(map, xn);

			if (sgn && x[i] < 0 && map[want] >= 0)
				want--; /* m keeps its sign */
			if (codes[i] == want)
				continue;
			if (abs(codes[i] - want) == 1 &&
			    qr_near_midpoint(map, codes[i] < want ? codes[i] : want, xn))
				continue;
			if (bad++ < 5)
				printf("element %zu: %.9g (x / absmax %.9g): code %d (%.9g), reference "
				       "%d (%.9g)\n", i, x[i], xn, codes[i], map[codes[i]], want,
				       map[want]);
		}
	}
	return bad;
}

Test(q8, quantize_matches_the_float64_reference)
{
	static const size_t sizes[] = { 1, 255, 256, 257, 1000, 4096 + 17 };

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (int sgn = 0; sgn < 2; sgn++) {
			size_t n = sizes[k];
			float *x = malloc(n * 4), *absmax = malloc(zn_q8_blocks(n) * 4);
			uint8_t *codes = malloc(n);

			cr_assert(x && absmax && codes);
			fill_spread(x, n, sgn, 11 + k);
			zn_q8_quantize(codes, absmax, x, n, sgn);
			cr_expect_eq(check_quantized(x, codes, absmax, n, sgn), 0,
				     "n %zu %s: codes differ from the reference", n,
				     sgn ? "signed" : "unsigned");
			free(x);
			free(absmax);
			free(codes);
		}
}

Test(q8, dequantize_is_map_times_absmax_and_within_half_a_step)
{
	size_t n = 3 * QR_BLOCK + 100;
	float *x = malloc(n * 4), *y = malloc(n * 4), absmax[4];
	uint8_t *codes = malloc(n);

	cr_assert(x && y && codes);
	for (int sgn = 0; sgn < 2; sgn++) {
		const float *map = zn_q8_map(sgn);
		double worst = 0.0;

		fill_spread(x, n, sgn, 5);
		zn_q8_quantize(codes, absmax, x, n, sgn);
		zn_q8_dequantize(y, codes, absmax, n, sgn);
		for (size_t i = 0; i < n; i++) {
			float a = absmax[i / QR_BLOCK];
			int c = codes[i];
			/* the widest gap around the code bounds the rounding error */
			double lo = c > 0 ? map[c] - map[c - 1] : 0, hi = c < 255 ? map[c + 1] - map[c] : 0;
			double bound = (fmax(lo, hi) / 2 + 0x1p-23) * a;

			cr_assert_eq(y[i], map[c] * a, "element %zu: %.9g, not map x absmax", i, y[i]);
			cr_assert(fabs(y[i] - x[i]) <= bound || (sgn && x[i] < 0 && map[c + 1] == 0),
				  "element %zu: %.9g back as %.9g (bound %.3g)", i, x[i], y[i], bound);
			worst = fmax(worst, fabs(y[i] - x[i]) / a);
		}
		/* the largest gap is the top decade's: 0.9 / 64 (signed) or / 128 */
		cr_expect_leq(worst, (sgn ? 0.9 / 64 : 0.9 / 128) / 2 + 1e-6, "worst %.3g", worst);
	}
	free(x);
	free(y);
	free(codes);
}

Test(q8, m_keeps_its_sign_and_zero_blocks_stay_zero)
{
	float x[QR_BLOCK], y[QR_BLOCK], absmax[1];
	uint8_t codes[QR_BLOCK];

	/* one large value: the others are far below the map's smallest step */
	for (int i = 0; i < QR_BLOCK; i++)
		x[i] = (i & 1 ? -1e-9f : 1e-9f) * (float)(i + 1);
	x[7] = 1.0f;
	x[8] = -0.0f;
	zn_q8_quantize(codes, absmax, x, QR_BLOCK, true);
	zn_q8_dequantize(y, codes, absmax, QR_BLOCK, true);
	for (int i = 0; i < QR_BLOCK; i++) {
		if (x[i] < 0)
			cr_expect(y[i] < 0, "element %d: %g came back as %g", i, x[i], y[i]);
		else
			cr_expect(y[i] >= 0, "element %d: %g came back as %g", i, x[i], y[i]);
	}
	cr_expect_eq(codes[8], ZN_Q8_ZERO_SIGNED, "-0.0 stays 0 (bitsandbytes: signbit)");
	cr_expect_eq(codes[2], ZN_Q8_ZERO_SIGNED, "a tiny positive value becomes 0");
	cr_expect_eq(codes[1], ZN_Q8_ZERO_SIGNED - 1, "a tiny negative one the nearest negative");
	for (int i = 0; i < QR_BLOCK; i++)
		x[i] = 0.0f;
	for (int sgn = 0; sgn < 2; sgn++) {
		zn_q8_quantize(codes, absmax, x, QR_BLOCK, sgn);
		cr_expect_eq(absmax[0], 0.0f);
		for (int i = 0; i < QR_BLOCK; i++)
			cr_expect_eq(codes[i], sgn ? ZN_Q8_ZERO_SIGNED : ZN_Q8_ZERO_UNSIGNED);
	}
}

/* q8.h's bucket tables: at most one midpoint in every bucket, and the code through them is
 * the full count of midpoints below x at every bucket's edges and around every midpoint */
static float next_up(float x)
{
	return nextafterf(x, INFINITY);
}

Test(q8, bucket_tables_give_the_full_count)
{
	for (int sgn = 0; sgn < 2; sgn++) {
		const struct zn_q8_lut *t = zn_q8_lut(sgn);
		const float *bound = zn_q8_bounds(sgn);
		float *x = malloc(sizeof(float) * 256 * 64), *absmax = malloc(64 * 4), probe[8];
		uint8_t *codes = malloc(256 * 64);
		size_t n = 0;
		int bad = 0;

		cr_assert(x && absmax && codes);
		for (uint32_t k = 1; k + 1 < ZN_Q8_LUT_COUNT; k++) {
			uint32_t u = (k + ZN_Q8_LUT_BASE) << 16, w = (k + 1 + ZN_Q8_LUT_BASE) << 16;
			float lo, hi;
			int in_pos = 0, in_neg = 0;

			memcpy(&lo, &u, 4);
			memcpy(&hi, &w, 4);
			for (int j = 0; j < 255; j++) {
				in_pos += bound[j] >= lo && bound[j] < hi;
				in_neg += bound[j] > -hi && bound[j] <= -lo;
			}
			cr_assert_leq(in_pos, 1, "bucket %u [%g, %g) holds %d midpoints", k, lo, hi,
				      in_pos);
			cr_assert_leq(in_neg, 1, "bucket %u holds %d negative midpoints", k, in_neg);
		}
		/* probes: bucket edges, every midpoint and its neighbours, both signs; one
		 * block at a time with absmax 1 (x * (1 / 1) is x) */
		for (uint32_t k = 0; k < ZN_Q8_LUT_COUNT + 255; k++) {
			float p;
			int np = 0;

			if (k < ZN_Q8_LUT_COUNT) {
				uint32_t u = (k + ZN_Q8_LUT_BASE) << 16;

				memcpy(&p, &u, 4);
				probe[np++] = p;
				probe[np++] = nextafterf(p, 0);
			} else {
				p = bound[k - ZN_Q8_LUT_COUNT];
				probe[np++] = p;
				probe[np++] = next_up(p);
				probe[np++] = nextafterf(p, -INFINITY);
			}
			for (int q = 0; q < np; q++)
				for (int neg = 0; neg < 2; neg++) {
					if (n % 256 == 0)
						x[n++] = 1.0f; /* the block's absmax */
					x[n++] = neg ? -fabsf(probe[q]) : fabsf(probe[q]);
					if (fabsf(x[n - 1]) > 1.0f)
						x[n - 1] = neg ? -1.0f : 1.0f;
					if (n == 256 * 64 || (k + 1 == ZN_Q8_LUT_COUNT + 255 &&
							      q + 1 == np && neg)) {
						zn_q8_quantize(codes, absmax, x, n, sgn);
						for (size_t i = 0; i < n; i++) {
							int want = 0;

							for (int j = 0; j < 255; j++)
								want += bound[j] < x[i];
							if (sgn && x[i] < 0 && want == ZN_Q8_ZERO_SIGNED)
								want--;
							if (!sgn && x[i] < 0)
								continue; /* v is never negative */
							if (codes[i] != want && bad++ < 5)
								printf("%s x %.9g: code %d, full count %d\n",
								       sgn ? "signed" : "unsigned", x[i],
								       codes[i], want);
						}
						n = 0;
					}
				}
		}
		cr_expect_eq(bad, 0, "%d codes differ from the full count", bad);
		(void)t;
		free(x);
		free(absmax);
		free(codes);
	}
}

/* q8.h's block passes (AVX-512 byte-plane lookups and the estimate where the build has
 * VBMI, plain loops otherwise): widening gives map[c] for every code in any position, and
 * the codes equal q8_code's (the bucket tables, held to the full count above) plus m's sign
 * rule for probes of every kind: every bf16 value (all signs, decades, inf and NaN) and its
 * neighbours, every midpoint and power of ten +-2 ulps, seeded bit patterns */
Test(q8, widen_block_is_the_map)
{
	uint8_t codes[QR_BLOCK];
	float y[QR_BLOCK];

	for (int sgn = 0; sgn < 2; sgn++) {
		const float *map = zn_q8_map(sgn);

		for (int rot = 0; rot < 256; rot += 37) {
			for (int i = 0; i < QR_BLOCK; i++)
				codes[i] = (uint8_t)(i * 167 + rot); /* a permutation of 0 .. 255 */
			zn_q8_widen_block(y, codes, sgn);
			for (int i = 0; i < QR_BLOCK; i++)
				cr_assert(memcmp(&y[i], &map[codes[i]], 4) == 0,
					  "%s code %d at %d: %.9g, map %.9g", sgn ? "signed" : "unsigned",
					  codes[i], i, y[i], map[codes[i]]);
		}
	}
}

struct probes {
	float x[QR_BLOCK];
	size_t n;
	int bad;
	bool sgn;
	float inv;
};

/* codes of the full block against q8_code; the block is then refilled */
static void probe_flush(struct probes *p)
{
	const int32_t *entry = zn_q8_lut(p->sgn)->entry;
	uint8_t codes[QR_BLOCK];

	zn_q8_code_block(codes, p->x, p->inv, p->sgn);
	for (size_t i = 0; i < QR_BLOCK; i++) {
		unsigned want = q8_code(entry, p->x[i] * p->inv);

		if (p->sgn && p->x[i] < 0.0f && want == ZN_Q8_ZERO_SIGNED)
			want--;
		if (codes[i] != want && p->bad++ < 5)
			printf("%s x %.9g (bits %08x) x inv %.9g: code %d, q8_code %u\n",
			       p->sgn ? "signed" : "unsigned", p->x[i], f32_bits(p->x[i]), p->inv,
			       codes[i], want);
	}
	p->n = 0;
}

static void probe(struct probes *p, float x)
{
	p->x[p->n++] = x;
	if (p->n == QR_BLOCK)
		probe_flush(p);
}

/* x and its neighbours, both signs */
static void probe_near(struct probes *p, float x, int ulps)
{
	for (int neg = 0; neg < 2; neg++) {
		float y = neg ? -fabsf(x) : fabsf(x), up = y, down = y;

		probe(p, y);
		for (int k = 0; k < ulps; k++) {
			up = nextafterf(up, INFINITY);
			down = nextafterf(down, -INFINITY);
			probe(p, up);
			probe(p, down);
		}
	}
}

Test(q8, code_block_equals_the_bucket_tables)
{
	for (int sgn = 0; sgn < 2; sgn++) {
		struct probes p = { .sgn = sgn, .inv = 1.0f };
		const float *bound = zn_q8_bounds(sgn);
		struct kc_rng r = { 29 + sgn };

		for (uint32_t h = 0; h < 0x10000; h++) {
			uint32_t u = h << 16;
			float x;

			memcpy(&x, &u, 4);
			probe(&p, x);
			probe(&p, nextafterf(x, 0.0f));
		}
		for (int j = 0; j < 255; j++)
			probe_near(&p, bound[j], 2);
		for (int e = -9; e <= 1; e++)
			probe_near(&p, (float)pow(10.0, e), 2);
		for (int i = 0; i < 1 << 20; i++) {
			uint32_t u = (uint32_t)kc_next(&r);
			float x;

			memcpy(&x, &u, 4);
			probe(&p, x);
		}
		/* a block scale: x * inv in float, as zn_q8_quantize */
		probe_flush(&p);
		p.inv = 1.0f / 3.7e-3f;
		for (int i = 0; i < 1 << 16; i++)
			probe(&p, kc_uniform(&r, -3.7e-3f, 3.7e-3f));
		while (p.n)
			probe(&p, 0.0f);
		cr_expect_eq(p.bad, 0, "%s: %d codes differ from q8_code", sgn ? "signed" : "unsigned",
			     p.bad);
	}
}

Test(q8, quantize_block_equals_quantize)
{
	float x[QR_BLOCK], absmax;
	uint8_t codes[QR_BLOCK], want[QR_BLOCK];

	for (int round = 0; round < 64; round++)
		for (int sgn = 0; sgn < 2; sgn++) {
			fill_spread(x, QR_BLOCK, sgn, 100 + round);
			/* the specials of AdamW's moments: zeros (both signs), an overflow */
			x[round % QR_BLOCK] = round & 1 ? -0.0f : 0.0f;
			if (round % 8 == 7)
				x[(round * 5) % QR_BLOCK] = sgn && (round & 8) ? -INFINITY : INFINITY;
			if (round == 0)
				memset(x, 0, sizeof(x));
			zn_q8_quantize(want, &absmax, x, QR_BLOCK, sgn);
			cr_assert_eq(zn_q8_quantize_block(codes, x, sgn), absmax, "round %d", round);
			for (int i = 0; i < QR_BLOCK; i++)
				cr_assert_eq(codes[i], want[i], "%s round %d: x[%d] %.9g: code %d, "
					     "zn_q8_quantize %d", sgn ? "signed" : "unsigned", round, i,
					     x[i], codes[i], want[i]);
		}
}

/* AdamW's int8 pass codes and widens m and v together (zn_q8_quantize_pair,
 * zn_q8_widen_pair, interleaved with AVX-512 VBMI): the same bits as one map at a time */
Test(q8, pair_passes_equal_one_map_at_a_time)
{
	float m[QR_BLOCK], v[QR_BLOCK], wm[QR_BLOCK], wv[QR_BLOCK], ym[QR_BLOCK], yv[QR_BLOCK];
	float am, av;
	uint8_t cm[QR_BLOCK], cv[QR_BLOCK], want_m[QR_BLOCK], want_v[QR_BLOCK];

	for (int round = 0; round < 64; round++) {
		fill_spread(m, QR_BLOCK, true, 700 + round);
		fill_spread(v, QR_BLOCK, false, 900 + round);
		m[(round * 3) % QR_BLOCK] = round & 1 ? -0.0f : 0.0f;
		if (round % 8 == 7)
			v[(round * 5) % QR_BLOCK] = INFINITY;
		if (round == 0)
			memset(v, 0, sizeof(v));
		zn_q8_quantize_pair(cm, &am, m, cv, &av, v);
		cr_assert_eq(am, zn_q8_quantize_block(want_m, m, true), "round %d: m absmax", round);
		cr_assert_eq(av, zn_q8_quantize_block(want_v, v, false), "round %d: v absmax", round);
		for (int i = 0; i < QR_BLOCK; i++) {
			cr_assert_eq(cm[i], want_m[i], "round %d: m[%d] %.9g: pair %d, block %d", round,
				     i, m[i], cm[i], want_m[i]);
			cr_assert_eq(cv[i], want_v[i], "round %d: v[%d] %.9g: pair %d, block %d", round,
				     i, v[i], cv[i], want_v[i]);
		}
		zn_q8_widen_pair(ym, cm, yv, cv);
		zn_q8_widen_block(wm, cm, true);
		zn_q8_widen_block(wv, cv, false);
		cr_assert(memcmp(ym, wm, sizeof(ym)) == 0, "round %d: m widened", round);
		cr_assert(memcmp(yv, wv, sizeof(yv)) == 0, "round %d: v widened", round);
	}
}
