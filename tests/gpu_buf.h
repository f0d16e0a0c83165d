/* Host buffers of the GPU kernel tests (test_gpu_kernels.c, test_gpu_kernels_llama.c,
 * gpu_flash_check.h): n random floats in [lo, hi), and a device buffer downloaded into a
 * new host buffer (guard checked). Static inline in a header: test code only. */
#ifndef ZN_TESTS_GPU_BUF_H
#define ZN_TESTS_GPU_BUF_H

#include <criterion/criterion.h>

#include <stdlib.h>

#include "gpu_kernel_check.h"
#include "kernels_check.h"

static inline float *frand(struct kc_rng *r, size_t n, float lo, float hi)
{
	float *p = malloc((n ? n : 1) * sizeof(float));

	cr_assert(p);
	kc_fill(r, p, n, lo, hi);
	return p;
}

static inline void *fetch(const void *d, size_t bytes, const char *what)
{
	void *h = malloc(bytes ? bytes : 1);

	cr_assert(h);
	down(h, d, bytes, what);
	return h;
}

#endif
