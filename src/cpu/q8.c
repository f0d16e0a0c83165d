/* The dynamic maps and blockwise quantization of q8.h. The maps are built once (in
 * double, rounded once to float), with their midpoints, bucket tables and the block passes'
 * tables (q8_block.c); quantize and dequantize are plain loops through adamw_simd.h's
 * q8_code (the reference the block passes are held to), and the tests hold both to a full
 * search. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/adamw_simd.h"
#include "cpu/q8.h"
#include "cpu/q8_block.h"

static float maps[2][256], bounds[2][256];
static struct zn_q8_lut luts[2];
static struct zn_q8_vtab vtabs[2];
static pthread_once_t maps_once = PTHREAD_ONCE_INIT;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* bitsandbytes' create_dynamic_map(signed, max_exponent_bits 7, total_bits 8): with 7
 * non-sign bits and 7 exponent bits there are no "additional items" */
static void make_map(float *map, float *bound, bool is_signed)
{
	static const double decade[7] = { 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0 };
	double v[256];
	int k = 0;

	for (int i = 0; i < 7; i++) {
		int intervals = is_signed ? 1 << i : 1 << (i + 1);

		for (int j = 0; j < intervals; j++) {
			/* the midpoint of [lo, hi], lo and hi consecutive points of
			 * linspace(0.1, 1, intervals + 1) */
			double lo = 0.1 + 0.9 * j / intervals, hi = 0.1 + 0.9 * (j + 1) / intervals;
			double mean = (lo + hi) / 2.0;

			v[k++] = decade[i] * mean;
			if (is_signed)
				v[k++] = -decade[i] * mean;
		}
	}
	v[k++] = 0.0;
	v[k++] = 1.0;
	qsort(v, 256, sizeof(v[0]), cmp_double);
	for (int i = 0; i < 256; i++)
		map[i] = (float)v[i];
	/* bitsandbytes' kernel: midpoint = (upper + val) * 0.5f, in float */
	for (int i = 0; i < 255; i++)
		bound[i] = (map[i] + map[i + 1]) * 0.5f;
	bound[255] = INFINITY;
}

static float key_f32(uint32_t key)
{
	uint32_t u = key << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint32_t f32_u32(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* q8.h's buckets: bucket k covers [lo, hi) of |x|, lo the bf16 value of key k + base (0 for
 * bucket 0), hi the next one (+infinity for the last) */
static void make_lut(struct zn_q8_lut *t, const float *bound)
{
	for (uint32_t k = 0; k < ZN_Q8_LUT_COUNT; k++) {
		float lo = k ? key_f32(k + ZN_Q8_LUT_BASE) : 0.0f;
		float hi = k + 1 < ZN_Q8_LUT_COUNT ? key_f32(k + 1 + ZN_Q8_LUT_BASE) : INFINITY;
		uint32_t pos = 0, neg = 0, pos_lo = 0xffff, neg_lo = 0;

		for (int j = 0; j < 255; j++) {
			pos += bound[j] < lo;
			neg += bound[j] <= -hi;
			/* bucket 0 and the last hold no midpoint (the tests check it) */
			if (k && k + 1 < ZN_Q8_LUT_COUNT && bound[j] >= lo && bound[j] < hi)
				pos_lo = f32_u32(bound[j]) & 0xffff;
			if (k && k + 1 < ZN_Q8_LUT_COUNT && bound[j] > -hi && bound[j] <= -lo)
				neg_lo = f32_u32(-bound[j]) & 0xffff;
		}
		t->entry[k] = (int32_t)(pos << 16 | pos_lo);
		t->entry[ZN_Q8_LUT_COUNT + k] = (int32_t)(neg << 16 | neg_lo);
	}
}

static void make_planes(uint8_t plane[4][256], const float *f)
{
	for (int c = 0; c < 256; c++)
		for (int p = 0; p < 4; p++)
			plane[p][c] = (uint8_t)(f32_u32(f[c]) >> (8 * p));
}

/* q8.h's estimate: decade i of the map spans [g, 10 g), g = 10^(i - 7), with K entries
 * s = 0.9 * 10 g / K apart from g + s / 2, the first at code C; a midpoint inside it sits at
 * g + j s (j = 1 .. K - 1) with j + C - 1 midpoints below it. The line C + (y - g) / s - 0.5
 * is the count plus 0.5 there; between two midpoints it stays within half a code of the
 * count, and past the decade's edges (the midpoint to the next decade's first entry lies s
 * beyond 10 g, 0.2 s below g; 0, 1.0 and the clamp to [0, 255] at the ends) within 0.7 */
static void make_vtab(struct zn_q8_vtab *t, const float *map, const float *bound,
		      bool is_signed)
{
	make_planes(t->map_plane, map);
	make_planes(t->bound_plane, bound);
	for (int i = 0; i < 8; i++) {
		int d = i < 7 ? i : 6; /* region 7 is never picked */
		double k = is_signed ? 1 << d : 2 << d, c = is_signed ? 127 + k : k - 1;
		double a = k / (0.9 * pow(10.0, d - 6)), b = c - k / 9.0 - 0.5;

		t->seg_a[i] = (float)a;
		t->seg_b[i] = (float)b;
		/* x <= -0: signed, the count mirrors around 127 (midpoint 126 - j is -midpoint
		 * 127 + j); unsigned, no midpoint is negative: 0 */
		t->seg_a[8 + i] = is_signed ? (float)-a : 0.0f;
		t->seg_b[8 + i] = is_signed ? (float)(254.0 - b) : -1.0f;
	}
	for (int e = 0; e < 32; e++) {
		/* binade [2^x, 2^(x + 1)) for the float exponent 103 .. 128 that e is */
		int x = (e < 7 ? e + 128 : e + 96) - 127, dec = -7;

		while (pow(10.0, dec + 1) <= ldexp(1.0, x))
			dec++;
		uint32_t d = (uint32_t)(dec + 7 < 0 ? 0 : dec + 7 > 6 ? 6 : dec + 7);
		/* the power of ten inside (q8.h; a few ulps off changes nothing: the lines
		 * hold beyond the decades' edges), or a NaN: |x| >= NaN is never true */
		uint32_t edge = 0x7fc00000u;

		if (pow(10.0, dec + 1) < ldexp(1.0, x + 1) && dec + 8 >= 1 && dec + 8 <= 6)
			edge = f32_u32((float)pow(10.0, dec + 1));
		t->bin_edge[e] = (edge & ~15u) | d;
	}
}

static void make_maps(void)
{
	make_map(maps[0], bounds[0], false);
	make_map(maps[1], bounds[1], true);
	make_lut(&luts[0], bounds[0]);
	make_lut(&luts[1], bounds[1]);
	make_vtab(&vtabs[0], maps[0], bounds[0], false);
	make_vtab(&vtabs[1], maps[1], bounds[1], true);
}

const struct zn_q8_vtab *zn_q8_vtab(bool is_signed)
{
	pthread_once(&maps_once, make_maps);
	return &vtabs[is_signed];
}

const struct zn_q8_lut *zn_q8_lut(bool is_signed)
{
	pthread_once(&maps_once, make_maps);
	return &luts[is_signed];
}

const float *zn_q8_map(bool is_signed)
{
	pthread_once(&maps_once, make_maps);
	return maps[is_signed];
}

const float *zn_q8_bounds(bool is_signed)
{
	pthread_once(&maps_once, make_maps);
	return bounds[is_signed];
}

size_t zn_q8_blocks(size_t n)
{
	return (n + ZN_Q8_BLOCK - 1) / ZN_Q8_BLOCK;
}

void zn_q8_quantize(uint8_t *codes, float *absmax, const float *x, size_t n, bool is_signed)
{
	const struct zn_q8_lut *lut = zn_q8_lut(is_signed);

	for (size_t b = 0; b * ZN_Q8_BLOCK < n; b++) {
		size_t first = b * ZN_Q8_BLOCK;
		size_t len = n - first < ZN_Q8_BLOCK ? n - first : ZN_Q8_BLOCK;
		float amax = 0.0f, inv;

		for (size_t i = first; i < first + len; i++)
			amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
		absmax[b] = amax;
		/* one reciprocal per block, then a multiply per element (bitsandbytes'
		 * quantize_blockwise); 0 for an all-zero block: every code is 0's */
		inv = amax > 0.0f ? 1.0f / amax : 0.0f;
		for (size_t i = first; i < first + len; i++) {
			unsigned c = q8_code(lut->entry, x[i] * inv);

			/* m keeps its sign: a negative value never becomes 0 */
			if (is_signed && x[i] < 0.0f && c == ZN_Q8_ZERO_SIGNED)
				c--;
			codes[i] = (uint8_t)c;
		}
	}
}

void zn_q8_dequantize(float *x, const uint8_t *codes, const float *absmax, size_t n,
		      bool is_signed)
{
	const float *map = zn_q8_map(is_signed);

	for (size_t i = 0; i < n; i++)
		x[i] = map[codes[i]] * absmax[i / ZN_Q8_BLOCK];
}
