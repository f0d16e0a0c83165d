/* Criterion helpers shared by the GPU kernel tests (test_gpu_kernels*.c, test_gpu_optim.c):
 * open the CUDA table and a stream or skip with the reason, move buffers with guard
 * checks, random inputs, and a device result against the CPU table's (within a relative
 * tolerance, or bit for bit). Static functions in a header: test code only, included by
 * one file each. */
#ifndef ZN_TESTS_GPU_KERNEL_CHECK_H
#define ZN_TESTS_GPU_KERNEL_CHECK_H

#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "gpu_test_util.h"
#include "kernels_check.h"

/* the CUDA table and a fresh stream, or skip with the reason */
static const struct zn_kernel_table *open_gpu(void **stream)
{
	char why[256];
	const char *err;
	const struct zn_kernel_table *k = zn_kernels_cuda_table();

	if (!k)
		cr_skip_test("no CUDA GPU: zinc was built without CUDA");
	if (!gt_gpu_usable(why, sizeof(why)))
		cr_skip_test("%s", why);
	*stream = gt_stream_create(&err);
	cr_assert(!*err, "cudaStreamCreate: %s", err);
	return k;
}

static void close_gpu(void *stream)
{
	cr_assert(gt_kernels_error() == 0, "a CUDA launch or cuBLAS call failed (see log)");
	gt_stream_destroy(stream);
}

static void *up(const void *h, size_t bytes)
{
	const char *err;
	void *d = gt_upload(h, bytes, &err);

	cr_assert(!*err, "cudaMalloc/cudaMemcpy of %zu bytes: %s", bytes, err);
	return d;
}

static void down(void *h, const void *d, size_t bytes, const char *what)
{
	const char *err;
	bool guard_ok = gt_download(h, d, bytes, &err);

	cr_assert(!*err, "%s: cudaDeviceSynchronize/cudaMemcpy: %s", what, err);
	cr_assert(guard_ok, "%s: a kernel wrote past the end of the buffer (guard changed)", what);
}

/* n floats uniform in [-a, a] (malloc'd; n may be 0) */
static inline float *gk_frand(struct kc_rng *r, size_t n, float a)
{
	float *p = malloc((n ? n : 1) * sizeof(float));

	cr_assert(p);
	kc_fill(r, p, n, -a, a);
	return p;
}

/* device tensor d [n] within rtol of the CPU table's result cpu_h (kc_close) */
static inline void gk_near(const char *what, const void *d, const float *cpu_h, size_t n,
			   double rtol)
{
	float *g = malloc((n ? n : 1) * sizeof(float));
	double *ref = malloc((n ? n : 1) * sizeof(double));

	cr_assert(g && ref);
	down(g, d, n * sizeof(float), what);
	for (size_t i = 0; i < n; i++)
		ref[i] = cpu_h[i];
	cr_assert(kc_close(what, g, ref, n, rtol));
	free(g);
	free(ref);
}

/* device tensor d must hold exactly the bytes of `before` (a second run of the same op) */
static inline void gk_same_bits(const char *what, const void *d, const void *before,
				size_t bytes)
{
	void *g = malloc(bytes ? bytes : 1);

	cr_assert(g);
	down(g, d, bytes, what);
	cr_assert(!memcmp(g, before, bytes), "%s: not bit-identical run to run", what);
	free(g);
}

#endif
