/* cudaHostRegister of the arena's mapping (CUDA builds only). Leaves the choice of falling
 * back to mlock to arena.c. */
#include "cpu/arena_cuda.h"

#include <stdbool.h>

#include <cuda_runtime_api.h>

#include "core/log.h"

static bool no_gpu_here(cudaError_t e)
{
	/* The runtime loads the driver lazily: these mean "no usable GPU", not a failure. */
	return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
	       e == cudaErrorInitializationError || e == cudaErrorCompatNotSupportedOnDevice ||
	       e == cudaErrorSystemDriverMismatch || e == cudaErrorDevicesUnavailable;
}

int zn_arena_cuda_register(void *ptr_h, size_t bytes)
{
	cudaError_t e = cudaHostRegister(ptr_h, bytes, cudaHostRegisterPortable);

	if (e == cudaSuccess)
		return 0;
	if (no_gpu_here(e)) {
		cudaGetLastError(); /* clear the sticky "no device" state for later calls */
		return -ENODEV;
	}
	zn_warn("cudaHostRegister of %zu bytes failed: %s (%s)", bytes, cudaGetErrorString(e),
		cudaGetErrorName(e));
	cudaGetLastError();
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

void zn_arena_cuda_unregister(void *ptr_h)
{
	cudaError_t e = cudaHostUnregister(ptr_h);

	if (e != cudaSuccess)
		zn_warn("cudaHostUnregister failed: %s", cudaGetErrorString(e));
}
