/* Seeded normal samples for weight init: element i of a normal(0, 1) stream, computed alone
 * (counter-based, core/hash.h), so any thread count fills a tensor with the same values.
 *
 *     out[i] = 0.02f * zn_normal_at(key, i);
 */
#ifndef ZN_CORE_RAND_H
#define ZN_CORE_RAND_H

#include <stdint.h>

/* Outputs 2i and 2i+1 of the stream through Box-Muller (cosine branch), in double so the
 * value does not depend on float rounding of intermediate terms. */
float zn_normal_at(uint64_t key, uint64_t i);

#endif
