/* The cuda backend's host-memory and free-memory slots (device_impl.h): page-locked host
 * memory for copies, with a pageable fallback, and cudaMemGetInfo for the budget's
 * re-measurement once a communicator exists. Built only with CUDA. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "gpu/cuda_check.h"
#include "gpu/device_impl.h"

int zn_cuda_free_bytes(struct zn_device *dev, uint64_t *free_b)
{
	size_t f = 0, total = 0;
	int rc = zn_cuda_check(cudaSetDevice(dev->ordinal), "cudaSetDevice", __FILE__, __LINE__);

	if (!rc)
		rc = zn_cuda_check(cudaMemGetInfo(&f, &total), "cudaMemGetInfo", __FILE__,
				   __LINE__);
	*free_b = f;
	return rc;
}

/* Page-locked host memory; pageable memory with a warning when the driver refuses. */
int zn_cuda_host_alloc(struct zn_device *dev, void **ptr_h, uint64_t bytes)
{
	cudaError_t err = cudaHostAlloc(ptr_h, bytes, cudaHostAllocPortable);
	char b[32];

	if (err == cudaSuccess) {
		memset(*ptr_h, 0, bytes);
		return 0;
	}
	cudaGetLastError();
	zn_warn("cudaHostAlloc of %s failed (%s): using pageable memory, so copies of it "
		"block the host", zn_device_fmt_bytes(b, bytes), cudaGetErrorString(err));
	*ptr_h = calloc(1, bytes);
	return *ptr_h ? 0 : -ENOMEM;
}

void zn_cuda_host_free(struct zn_device *dev, void *ptr_h)
{
	unsigned int flags = 0;

	/* memory from the pageable fallback is not the driver's */
	if (cudaHostGetFlags(&flags, ptr_h) != cudaSuccess) {
		cudaGetLastError();
		free(ptr_h);
		return;
	}
	zn_cuda_check(cudaFreeHost(ptr_h), "cudaFreeHost", __FILE__, __LINE__);
}
