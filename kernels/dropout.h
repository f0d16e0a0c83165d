/* LoRA dropout's mask (kernels.h `dropout`): element i of a call seeded `seed` is kept when
 * a counter-based hash of (seed, i) (core/hash.h's zn_hash_seeded) is at least p. A pure
 * function, written once here for the CPU table and the tests and mirrored bit for bit by
 * kernels/cuda/lora.cu (same hash, from the same header). */
#ifndef ZN_KERNELS_DROPOUT_H
#define ZN_KERNELS_DROPOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/hash.h"

/* a uniform in [0, 1) with 24 bits, compared in float: the CUDA kernel does the same */
static inline bool zn_dropout_keep(uint64_t seed, uint64_t i, float p)
{
	float u = (float)(zn_hash_seeded(seed, i) >> 40) * (1.0f / 16777216.0f);

	return u >= p;
}

#endif
