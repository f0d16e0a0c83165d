/* LoRA dropout's mask (kernels.h `dropout`): element i of a call seeded `seed` is kept when
 * a counter-based hash of (seed, i) is at least p. A pure function, written once here for
 * the CPU table and the tests and mirrored bit for bit by kernels/cuda/lora.cu. */
#ifndef ZN_KERNELS_DROPOUT_H
#define ZN_KERNELS_DROPOUT_H

#include <stdbool.h>
#include <stdint.h>

static inline uint64_t zn_dropout_hash(uint64_t seed, uint64_t i)
{
	uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* a uniform in [0, 1) with 24 bits, compared in float: the CUDA kernel does the same */
static inline bool zn_dropout_keep(uint64_t seed, uint64_t i, float p)
{
	float u = (float)(zn_dropout_hash(seed, i) >> 40) * (1.0f / 16777216.0f);

	return u >= p;
}

#endif
