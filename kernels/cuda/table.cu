/* The CUDA kernel table (stub until kernels/cuda lands: every op NULL). */
extern "C" {
#include "kernels.h"

extern const struct zn_kernel_table zn_kernels_cuda;
const struct zn_kernel_table zn_kernels_cuda = {
	"cuda",
};
}
