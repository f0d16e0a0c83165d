/* The CPU kernel table (stub until kernels/cpu lands: every op NULL). */
#include "kernels.h"

const struct zn_kernel_table zn_kernels_cpu = {
	.name = "cpu",
};
