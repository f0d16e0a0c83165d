/* Test-only helpers shared by test_device.c and test_gpu_device.c: seeded random bytes, a
 * byte comparison that names the first wrong byte, and the copy round trip every backend
 * must pass. Static functions in a header, test code only, included by one file each. */
#ifndef ZN_TESTS_DEVICE_CHECK_H
#define ZN_TESTS_DEVICE_CHECK_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"

static void fill_random(unsigned char *p, size_t n, unsigned seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)(x >> 24);
	}
}

static void assert_bytes_eq(const unsigned char *got, const unsigned char *want, size_t n,
			    const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i])
			cr_assert_fail("%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, n,
				       got[i], want[i]);
}

/* H2D -> D2D -> D2H of seeded random bytes for each size on one stream: the bytes come
 * back, allocations are 256-byte aligned, and the budget is whole again afterwards. */
static void check_copy_round_trip(struct zn_device *dev, const size_t *sizes, size_t count,
				  unsigned seed)
{
	struct zn_stream *s;

	cr_assert_eq(zn_stream_create(dev, &s), 0);
	for (size_t t = 0; t < count; t++) {
		size_t n = sizes[t];
		unsigned char *src_h = malloc(n), *back_h = malloc(n), *a_d, *b_d;

		cr_assert(src_h && back_h);
		fill_random(src_h, n, seed + (unsigned)t);
		memset(back_h, 0, n);
		cr_assert_eq(zn_device_alloc(dev, (void **)&a_d, n), 0);
		cr_assert_eq(zn_device_alloc(dev, (void **)&b_d, n), 0);
		cr_assert_eq((uintptr_t)a_d % 256, 0, "allocation not 256-byte aligned");
		cr_assert_eq(zn_memcpy_async(s, a_d, src_h, n, ZN_COPY_H2D), 0);
		cr_assert_eq(zn_memcpy_async(s, b_d, a_d, n, ZN_COPY_D2D), 0);
		cr_assert_eq(zn_memcpy_async(s, back_h, b_d, n, ZN_COPY_D2H), 0);
		cr_assert_eq(zn_stream_synchronize(s), 0);
		assert_bytes_eq(back_h, src_h, n, "H2D -> D2D -> D2H");
		zn_device_free(dev, a_d);
		zn_device_free(dev, b_d);
		free(src_h);
		free(back_h);
	}
	cr_assert_eq(zn_device_used_bytes(dev), 0);
	zn_stream_destroy(s);
}

#endif
