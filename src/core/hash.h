/* Seeded hashing: splitmix64 (Steele, Lea and Flood, 2014), written once for every random
 * stream that must come out the same on any thread count, rank count or device: weight
 * init, LoRA dropout masks, the data shuffle, sampling, benchmark data.
 *
 * Contract: pure functions of their arguments, bit-identical on the CPU and in CUDA
 * kernels (the header compiles as C and as CUDA device code: static inline, no libc).
 * Not for cryptography.
 *
 *     uint64_t key = zn_hash_seeded(seed, layer);       // a per-layer stream key
 *     double u = (double)(zn_hash_seeded(key, i) >> 11) * 0x1.0p-53;   // uniform [0, 1)
 */
#ifndef ZN_CORE_HASH_H
#define ZN_CORE_HASH_H

#include <stdint.h>

#ifdef __CUDACC__
#define ZN_HASH_FN static inline __host__ __device__
#else
#define ZN_HASH_FN static inline
#endif

/* 2^64 / golden ratio: splitmix64's state increment, and Fibonacci hashing's multiplier */
#define ZN_HASH_GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's output function: a bijection of 64 bits that spreads every input bit */
ZN_HASH_FN uint64_t zn_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Output i (from 0) of the splitmix64 stream whose state starts at seed: counter-based, so
 * any element is computed alone. */
ZN_HASH_FN uint64_t zn_hash_seeded(uint64_t seed, uint64_t i)
{
	return zn_mix64(seed + (i + 1) * ZN_HASH_GOLDEN);
}

#undef ZN_HASH_FN

#endif
