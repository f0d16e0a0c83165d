/* Test-only CUDA helpers for test_gpu_kernels.c: device presence, and device buffers with
 * guard elements after them (a kernel that writes past its tensor fails the test). Static
 * functions in a header, test code only. Without CUDA every helper is a stub and
 * gt_gpu_usable() says why, so the test file compiles and skips.
 */
#ifndef ZN_TESTS_GPU_TEST_UTIL_H
#define ZN_TESTS_GPU_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define GT_GUARD_BYTES 256
#define GT_GUARD_BYTE 0xa5

#ifdef ZN_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/ops.h"

static inline bool gt_gpu_usable(char *why, size_t n)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);

	if (e != cudaSuccess) {
		snprintf(why, n, "no CUDA GPU: cudaGetDeviceCount: %s", cudaGetErrorString(e));
		return false;
	}
	if (count == 0) {
		snprintf(why, n, "no CUDA GPU: cudaGetDeviceCount found 0 devices");
		return false;
	}
	return true;
}

/* "" when fine, else the failing call's message (static storage) */
static inline const char *gt_err(cudaError_t e)
{
	return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

/* device copy of bytes of host memory (NULL host: garbage 0x5a bytes), guard after it */
static inline void *gt_upload(const void *h, size_t bytes, const char **err)
{
	void *d = NULL;
	cudaError_t e = cudaMalloc(&d, bytes + GT_GUARD_BYTES);

	if (e == cudaSuccess)
		e = h ? cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) : cudaMemset(d, 0x5a, bytes);
	if (e == cudaSuccess)
		e = cudaMemset((char *)d + bytes, GT_GUARD_BYTE, GT_GUARD_BYTES);
	/* the ops run on a non-blocking stream, which does not wait for the legacy stream's
	 * memset or for the DMA tail of a pageable cudaMemcpy: finish them here */
	if (e == cudaSuccess)
		e = cudaDeviceSynchronize();
	*err = gt_err(e);
	return d;
}

/* waits for the device, copies bytes back to h; returns false if the guard was written */
static inline bool gt_download(void *h, const void *d, size_t bytes, const char **err)
{
	unsigned char guard[GT_GUARD_BYTES];
	cudaError_t e = cudaDeviceSynchronize();

	if (e == cudaSuccess)
		e = cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
	if (e == cudaSuccess)
		e = cudaMemcpy(guard, (const char *)d + bytes, GT_GUARD_BYTES,
			       cudaMemcpyDeviceToHost);
	*err = gt_err(e);
	if (e != cudaSuccess)
		return true;
	for (size_t i = 0; i < GT_GUARD_BYTES; i++)
		if (guard[i] != GT_GUARD_BYTE)
			return false;
	return true;
}

static inline void gt_free(void *d)
{
	cudaFree(d);
}

/* bytes at d + offset (no guard check: the middle of a buffer) after the device is idle */
static inline void gt_download_part(void *h, const void *d, size_t offset, size_t bytes,
				    const char **err)
{
	cudaError_t e = cudaDeviceSynchronize();

	if (e == cudaSuccess)
		e = cudaMemcpy(h, (const char *)d + offset, bytes, cudaMemcpyDeviceToHost);
	*err = gt_err(e);
}

/* free memory on the current GPU (0 on error) */
static inline size_t gt_free_bytes(void)
{
	size_t f = 0, t = 0;

	if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return f;
}

static inline void *gt_stream_create(const char **err)
{
	cudaStream_t s = NULL;

	*err = gt_err(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	return s;
}

static inline void gt_stream_destroy(void *s)
{
	cudaStreamDestroy((cudaStream_t)s);
}

static inline int gt_kernels_error(void)
{
	return zn_cuda_kernels_error();
}

#else /* !ZN_HAVE_CUDA */

static inline bool gt_gpu_usable(char *why, size_t n)
{
	snprintf(why, n, "no CUDA GPU: zinc was built without CUDA (ZN_HAVE_CUDA unset)");
	return false;
}

static inline void *gt_upload(const void *h, size_t bytes, const char **err)
{
	*err = "built without CUDA";
	return NULL;
}

static inline bool gt_download(void *h, const void *d, size_t bytes, const char **err)
{
	*err = "built without CUDA";
	return true;
}

static inline void gt_free(void *d)
{
}

static inline void gt_download_part(void *h, const void *d, size_t offset, size_t bytes,
				    const char **err)
{
	*err = "built without CUDA";
}

static inline size_t gt_free_bytes(void)
{
	return 0;
}

static inline void *gt_stream_create(const char **err)
{
	*err = "built without CUDA";
	return NULL;
}

static inline void gt_stream_destroy(void *s)
{
}

static inline int gt_kernels_error(void)
{
	return 0;
}

#endif

#endif
