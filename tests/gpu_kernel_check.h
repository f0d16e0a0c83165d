/* Criterion helpers shared by the GPU kernel tests (test_gpu_kernels.c, test_gpu_optim.c):
 * open the CUDA table and a stream or skip with the reason, and move buffers with guard
 * checks. Static functions in a header: test code only, included by one file each. */
#ifndef ZN_TESTS_GPU_KERNEL_CHECK_H
#define ZN_TESTS_GPU_KERNEL_CHECK_H

#include <criterion/criterion.h>

#include "cuda_kernels.h"
#include "gpu_test_util.h"

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

#endif
