/* Test-only: an independent float64 reference of blockwise 8-bit quantization (cpu/q8.h),
 * shared by test_q8.c and test_adamw_states.c. The maps are built from bitsandbytes'
 * definition written another way (entry = decade x fraction, fraction the centre of its
 * interval of [0.1, 1]), the nearest entry by a full scan in double. Static, as the other
 * test headers. */
#ifndef ZN_TESTS_Q8_REF_H
#define ZN_TESTS_Q8_REF_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QR_BLOCK 256

/* create_dynamic_map(signed): 256 ascending doubles */
static inline void qr_map(double *map, bool is_signed)
{
	int k = 0;

	map[k++] = 0.0;
	map[k++] = 1.0;
	for (int e = 0; e < 7; e++) {
		int parts = is_signed ? 1 << e : 2 << e;
		double decade = pow(10.0, e - 6);

		for (int j = 0; j < parts; j++) {
			double f = 0.1 + 0.9 * (2.0 * j + 1.0) / (2.0 * parts);

			map[k++] = decade * f;
			if (is_signed)
				map[k++] = -decade * f;
		}
	}
	for (int i = 1; i < k; i++) /* insertion sort */
		for (int j = i; j > 0 && map[j - 1] > map[j]; j--) {
			double t = map[j];

			map[j] = map[j - 1];
			map[j - 1] = t;
		}
}

/* the entry nearest to x among map32 (a tie: the lower), by a full scan */
static inline int qr_nearest(const float *map32, double x)
{
	int best = 0;

	for (int c = 1; c < 256; c++)
		if (fabs(x - map32[c]) < fabs(x - map32[best]))
			best = c;
	return best;
}

/* whether x is within a float rounding of the midpoint between entries c and c + 1 (where
 * q8.h's float midpoints may round a value to the other neighbour) */
static inline bool qr_near_midpoint(const float *map32, int c, double x)
{
	double mid;

	if (c < 0 || c > 254)
		return false;
	mid = ((double)map32[c] + map32[c + 1]) / 2.0;
	return fabs(x - mid) <= fabs(mid) * 0x1p-23 + 0x1p-149;
}

#endif
