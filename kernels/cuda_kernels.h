/* The CUDA kernel table, or a NULL stand-in when zinc is built without CUDA. */
#ifndef ZN_CUDA_KERNELS_H
#define ZN_CUDA_KERNELS_H

#include "kernels.h"

#ifdef ZN_HAVE_CUDA
extern const struct zn_kernel_table zn_kernels_cuda;
static inline const struct zn_kernel_table *zn_kernels_cuda_table(void)
{
	return &zn_kernels_cuda;
}
#else
static inline const struct zn_kernel_table *zn_kernels_cuda_table(void)
{
	return NULL;
}
#endif

#endif
