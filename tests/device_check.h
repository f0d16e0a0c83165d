/* Test-only helpers shared by test_device.c and test_gpu_device.c: seeded random bytes and
 * a byte comparison that names the first wrong byte. Static functions in a header, test
 * code only, included by one file each. */
#ifndef ZN_TESTS_DEVICE_CHECK_H
#define ZN_TESTS_DEVICE_CHECK_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>

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

#endif
