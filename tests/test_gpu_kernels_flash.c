/* kernels/cuda's fused (FlashAttention-2) attention against kernels/cpu's (itself checked
 * against the naive attention, a double loop and finite differences in
 * test_kernels_flash.c): GQA, MHA, MQA, head_dim 24, 40, 64 and 128, T across tile
 * boundaries, and Mistral's sliding window (inside a tile, across tiles, 1). Same inputs on both sides; dqkv starts from the same random values
 * (accumulate semantics); out, lse and drow start as garbage on the device; a non-default
 * stream; bit-identical reruns. Skips, with the reason, without CUDA or a usable GPU.
 * Tolerance 1e-4 (kc_close rtol): the two sum in different orders.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "gpu_flash_check.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"

#define RTOL 1e-4

static const struct fshape shapes[] = {
	{ 2, 64, 8, 2, 32, 0, 0, 0 },   /* GQA, round sizes */
	{ 3, 37, 6, 3, 24, 0, 0, 0 },   /* odd sizes */
	{ 1, 45, 4, 1, 40, 0, 0, 0 },   /* MQA */
	{ 2, 33, 4, 4, 64, 0, 0, 0 },   /* MHA (GPT-2's layout) */
	{ 1, 300, 4, 2, 128, 0, 0, 0 }, /* hd 128, many tiles */
	{ 2, 100, 4, 2, 32, 16, 0, 0 }, /* window inside a tile */
	{ 1, 300, 8, 2, 64, 70, 0, 0 }, /* window across tiles */
	{ 1, 40, 2, 1, 24, 1, 0, 0 },   /* window 1: the diagonal only */
};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

Test(kernels_gpu_flash, flash_attention)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	cr_assert(gpu->flash_attention_forward && gpu->flash_attention_backward);
	for (size_t k = 0; k < NSHAPES; k++)
		check_flash(gpu, st, &shapes[k], 701 + k, RTOL);
	close_gpu(st);
}
