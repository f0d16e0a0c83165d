/* Sizes computed from counts, and allocations that say what failed.
 *
 * Every size zinc derives from a count the user gives (layers x width x bytes per element,
 * micro-batch x seq x accumulation x bytes, slots x shard bytes, ...) goes through
 * zn_size_mul and zn_size_add: a result that does not fit 64 bits saturates at
 * ZN_SIZE_OVERFLOW instead of wrapping, so a count too large for the arithmetic yields a
 * size that every budget refuses, never a small one that passes. Saturation is sticky:
 * any sum or product with a saturated term is saturated.
 *
 * zn_size_alloc / zn_size_calloc are malloc / calloc for buffers whose size comes from
 * counts: on failure (or a size that does not fit size_t) they log one line naming what
 * was being allocated and its size, and return NULL; the caller returns -ENOMEM.
 *
 *     uint64_t bytes = zn_size_mul(zn_size_mul(tokens, gas), sizeof(int));
 *     int *tok = zn_size_alloc(bytes, "the step's tokens");
 *     if (!tok)
 *             return -ENOMEM;
 */
#ifndef ZN_CORE_SIZE_H
#define ZN_CORE_SIZE_H

#include <stdbool.h>
#include <stdint.h>

#define ZN_SIZE_OVERFLOW UINT64_MAX

uint64_t zn_size_mul(uint64_t a, uint64_t b); /* a x b, or ZN_SIZE_OVERFLOW */
uint64_t zn_size_add(uint64_t a, uint64_t b); /* a + b, or ZN_SIZE_OVERFLOW */
/* a rounded up to a multiple of align (> 0); a saturated size stays saturated */
uint64_t zn_size_round_up(uint64_t a, uint64_t align);
bool zn_size_overflowed(uint64_t size);

/* NULL (logged: "out of memory allocating WHAT: N bytes (X GiB)") when bytes is
 * ZN_SIZE_OVERFLOW, does not fit size_t or malloc fails. 0 bytes allocates 1. */
void *zn_size_alloc(uint64_t bytes, const char *what);
/* count x size zeroed bytes; as zn_size_alloc. */
void *zn_size_calloc(uint64_t count, uint64_t size, const char *what);

/* Logs the line zn_size_alloc logs, for allocators of their own (device, pinned). */
void zn_size_report_oom(uint64_t bytes, const char *what);

#endif
