/* One checking helper for CUDA runtime results, for every module that calls CUDA.
 *
 * zn_cuda_check(err, call, file, line) returns 0 for cudaSuccess; otherwise it logs
 * "CALL failed: <cudaGetErrorName>: <cudaGetErrorString>" with file:line and returns a
 * negative errno: -ENOMEM (out of memory), -ENODEV (no device or driver), -EINVAL (bad
 * value or handle), -EIO (anything else, including sticky launch errors). The goto stays
 * at the call site:
 *
 *     rc = zn_cuda_check(cudaMemcpyAsync(dst_d, src_h, n, cudaMemcpyHostToDevice, st),
 *                        "cudaMemcpyAsync", __FILE__, __LINE__);
 *     if (rc)
 *             goto free_buf;
 *
 * err is an int so this header needs no CUDA header (cudaError_t converts). Without CUDA
 * the stub maps any nonzero code to -EIO; nothing should call it then.
 * zn_cuda_errno maps without logging (for codes a caller expects, e.g. cudaErrorNotReady).
 */
#ifndef ZN_GPU_CUDA_CHECK_H
#define ZN_GPU_CUDA_CHECK_H

#include <errno.h>

#ifdef ZN_HAVE_CUDA
int zn_cuda_errno(int err);
int zn_cuda_check(int err, const char *call, const char *file, int line);
#else
static inline int zn_cuda_errno(int err)
{
	return err ? -EIO : 0;
}
static inline int zn_cuda_check(int err, const char *call, const char *file, int line)
{
	return err ? -EIO : 0;
}
#endif

#endif
