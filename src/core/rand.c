/* Seeded normal samples (rand.h). */
#include "core/rand.h"

#include <math.h>

#include "core/hash.h"

float zn_normal_at(uint64_t key, uint64_t i)
{
	uint64_t a = zn_hash_seeded(key, 2 * i);
	uint64_t b = zn_hash_seeded(key, 2 * i + 1);
	double u1 = ((double)(a >> 11) + 1.0) * 0x1.0p-53; /* (0, 1]: log stays finite */
	double u2 = (double)(b >> 11) * 0x1.0p-53;

	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2));
}
