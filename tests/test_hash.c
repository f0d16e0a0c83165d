/* core/hash.h: zn_hash_seeded is splitmix64 (the published outputs, pinned: every seeded
 * init, dropout mask, shuffle and sample depends on these bits), and output i computed alone
 * equals the i-th output of the stream stepped one at a time. */
#include <criterion/criterion.h>
#include <inttypes.h>

#include "core/hash.h"

/* splitmix64's next() as Vigna's reference writes it, for the stream check */
static uint64_t next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

Test(hash, published_splitmix64_outputs)
{
	static const uint64_t seed0[] = { 0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull,
					  0x06c45d188009454full };

	for (uint64_t i = 0; i < 3; i++)
		cr_assert_eq(zn_hash_seeded(0, i), seed0[i], "output %" PRIu64 ": %016" PRIx64, i,
			     zn_hash_seeded(0, i));
	cr_assert_eq(zn_hash_seeded(1234567, 0), 6457827717110365317ull);
	cr_assert_eq(zn_mix64(0), 0);
	cr_assert_eq(zn_mix64(ZN_HASH_GOLDEN), seed0[0]);
}

Test(hash, any_output_alone_equals_the_stepped_stream)
{
	static const uint64_t seeds[] = { 0, 1, 42, 0x4c6f5241ull, ~0ull, 0x8000000000000000ull };

	for (size_t s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s++) {
		uint64_t state = seeds[s];

		for (uint64_t i = 0; i < 10000; i++) {
			uint64_t want = next(&state);

			if (zn_hash_seeded(seeds[s], i) != want)
				cr_assert_fail("seed %016" PRIx64 " output %" PRIu64 ": %016" PRIx64
					       " != %016" PRIx64, seeds[s], i,
					       zn_hash_seeded(seeds[s], i), want);
		}
	}
}
