/* zn_cuda_check: CUDA runtime error codes to one log line and a negative errno. */
#include <cuda_runtime_api.h>

#include "core/log.h"
#include "gpu/cuda_check.h"

int zn_cuda_errno(int err)
{
	switch ((enum cudaError)err) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorDevicesUnavailable:
		return -ENODEV;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidResourceHandle:
	case cudaErrorInvalidDevicePointer:
	case cudaErrorInvalidMemcpyDirection:
		return -EINVAL;
	case cudaErrorNotReady:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

int zn_cuda_check(int err, const char *call, const char *file, int line)
{
	if (err == cudaSuccess)
		return 0;
	cudaGetLastError(); /* a reported error must not resurface at the next check */
	zn_log(ZN_LOG_ERROR, file, line, "%s failed: %s: %s", call,
	       cudaGetErrorName((cudaError_t)err), cudaGetErrorString((cudaError_t)err));
	return zn_cuda_errno(err);
}
