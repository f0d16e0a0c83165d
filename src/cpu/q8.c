/* The dynamic maps and blockwise quantization of q8.h. The maps are built once (in
 * double, rounded once to float); quantize and dequantize are plain loops: AdamW's block
 * pass (adamw_q8.c) inlines the same search over the same midpoints, and the tests hold
 * it to these. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "cpu/q8.h"

static float maps[2][256], bounds[2][256];
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

static void make_maps(void)
{
	make_map(maps[0], bounds[0], false);
	make_map(maps[1], bounds[1], true);
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

/* the number of bounds below x: 8 halvings over 256 entries (the last is +infinity) */
static unsigned code_of(const float *bound, float x)
{
	unsigned c = 0;

	for (unsigned s = 128; s; s >>= 1)
		c += bound[c + s - 1] < x ? s : 0;
	return c;
}

void zn_q8_quantize(uint8_t *codes, float *absmax, const float *x, size_t n, bool is_signed)
{
	const float *bound = zn_q8_bounds(is_signed);

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
			unsigned c = code_of(bound, x[i] * inv);

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
