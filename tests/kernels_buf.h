/* Host buffers for the CPU kernel tests (test_kernels.c, test_kernels_llama.c,
 * test_kernels_flash.c, test_kernels_flash_doc.c): zeroed float and double arrays that fail
 * the test when out of memory, a seeded random fill (kernels_check.h), a copy, and a widening
 * to double for the references. Static inline in a header: test code only. */
#ifndef ZN_TESTS_KERNELS_BUF_H
#define ZN_TESTS_KERNELS_BUF_H

#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "kernels_check.h"

static inline float *falloc(size_t n)
{
	float *p = calloc(n ? n : 1, sizeof(float));

	cr_assert(p, "out of memory");
	return p;
}

static inline double *dalloc(size_t n)
{
	double *p = calloc(n ? n : 1, sizeof(double));

	cr_assert(p, "out of memory");
	return p;
}

/* n floats uniform in [lo, hi) from r */
static inline float *frand(struct kc_rng *r, size_t n, float lo, float hi)
{
	float *p = falloc(n);

	kc_fill(r, p, n, lo, hi);
	return p;
}

static inline float *fcopy(const float *x, size_t n)
{
	float *p = falloc(n);

	memcpy(p, x, n * sizeof(float));
	return p;
}

static inline double *todouble(const float *x, size_t n)
{
	double *p = dalloc(n);

	for (size_t i = 0; i < n; i++)
		p[i] = x[i];
	return p;
}

#endif
