/* kernels/cuda/flash_attention_tc.cu, the fused attention on tensor cores (bf16 WMMA
 * tiles, fp32 accumulation), against the CPU table's fp32 flash_attention (itself checked
 * against the naive attention, a double loop and finite differences in
 * test_kernels_flash.c): out, lse and dqkv (accumulated into the same random start) for
 * GQA, MHA and MQA, head_dim 24 and 40 (the WMMA kernel, padded to 16 in the tiles) and
 * 32, 64, 96, 128 (the FlashAttention-2 kernels, flash_attention_fa2.cu), T across the
 * 32- and 64-row tiles, sliding windows; bit-identical reruns; head_dim over 128 refused with the
 * error flag. Tolerance 2e-2 (kc_close's normalized error): q, k, v, dout and the
 * probabilities are rounded to bf16 (8 significant bits) for the products. Skips, with
 * the reason, without CUDA or a usable GPU.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"

#define RTOL 2e-2

struct tshape {
	int B, T, NH, KV, hd, W;
};

static const struct tshape shapes[] = {
	{ 2, 64, 8, 2, 32, 0 },  { 3, 37, 6, 3, 24, 0 },   { 1, 45, 4, 1, 40, 0 },
	{ 2, 33, 4, 4, 64, 0 },  { 1, 300, 4, 2, 128, 0 }, { 2, 100, 4, 2, 32, 16 },
	{ 1, 300, 8, 2, 64, 70 }, { 1, 40, 2, 1, 24, 1 },
	/* the FlashAttention-2 kernels' 64-row tiles: hd 96, T = 2 tiles + 2, GQA groups of 3,
	 * a window of 1, a long window */
	{ 2, 130, 6, 2, 96, 0 }, { 1, 200, 6, 2, 64, 1 }, { 1, 513, 4, 1, 128, 300 },
	{ 2, 128, 12, 4, 64, 0 },
};

static void same(const char *what, const struct tshape *s, const float *d, const float *h,
		 size_t n)
{
	char name[200];

	snprintf(name, sizeof(name), "%s (B %d T %d NH %d KV %d hd %d window %d)", what, s->B,
		 s->T, s->NH, s->KV, s->hd, s->W);
	gk_near(name, d, h, n, RTOL);
}

Test(kernels_gpu_flash_tc, matches_cpu_flash)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	const struct zn_kernel_table *cpu = &zn_kernels_cpu;

	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		const struct tshape *s = &shapes[k];
		struct kc_rng r = { 801 + k };
		int B = s->B, T = s->T, NH = s->NH, KV = s->KV, hd = s->hd, W = s->W;
		size_t ni = (size_t)B * T * (NH + 2 * KV) * hd, no = (size_t)B * T * NH * hd;
		size_t nr = (size_t)B * NH * T;
		float *x = gk_frand(&r, ni, 2), *dout = gk_frand(&r, no, 1);
		float *dx = gk_frand(&r, ni, 1);
		float *out = malloc(no * 4), *lse = malloc(nr * 4), *drow = malloc(nr * 4);
		float *a = malloc(ni * 4), *b = malloc(ni * 4);
		float *x_d = up(x, ni * 4), *dout_d = up(dout, no * 4), *dx_d = up(dx, ni * 4);
		float *dx2_d = up(dx, ni * 4), *out_d = up(NULL, no * 4), *lse_d = up(NULL, nr * 4);
		float *drow_d = up(NULL, nr * 4);

		cr_assert(out && lse && drow && a && b);
		gpu->flash_attention_tc_forward(st, out_d, lse_d, x_d, B, T, NH, KV, hd, W);
		cpu->flash_attention_forward(NULL, out, lse, x, B, T, NH, KV, hd, W);
		same("tc forward out", s, out_d, out, no);
		same("tc forward lse", s, lse_d, lse, nr);
		gpu->flash_attention_tc_backward(st, dx_d, drow_d, dout_d, x_d, out_d, lse_d, B, T,
						 NH, KV, hd, W);
		cpu->flash_attention_backward(NULL, dx, drow, dout, x, out, lse, B, T, NH, KV, hd,
					      W);
		same("tc backward dqkv", s, dx_d, dx, ni);
		gpu->flash_attention_tc_backward(st, dx2_d, drow_d, dout_d, x_d, out_d, lse_d, B,
						 T, NH, KV, hd, W);
		down(a, dx_d, ni * 4, "tc dqkv");
		down(b, dx2_d, ni * 4, "tc dqkv rerun");
		cr_assert(!memcmp(a, b, ni * 4), "tc dqkv: not bit-identical run to run");
		free(x), free(dout), free(dx), free(out), free(lse), free(drow), free(a), free(b);
		gt_free(x_d), gt_free(dout_d), gt_free(dx_d), gt_free(dx2_d), gt_free(out_d);
		gt_free(lse_d), gt_free(drow_d);
	}
	close_gpu(st);
}

Test(kernels_gpu_flash_tc, head_dim_over_128_refused)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	float *x_d = up(NULL, 3 * 160 * 4), *o_d = up(NULL, 160 * 4), *l_d = up(NULL, 4);

	gpu->flash_attention_tc_forward(st, o_d, l_d, x_d, 1, 1, 1, 1, 160, 0);
	cr_assert_eq(gt_kernels_error(), -5, "head_dim 160 not refused");
	gt_free(x_d), gt_free(o_d), gt_free(l_d);
	close_gpu(st);
}
