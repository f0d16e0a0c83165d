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
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"

#define RTOL 1e-4

struct fshape {
	int B, T, NH, KV, hd, W; /* W: sliding window, 0 = none */
};

static const struct fshape shapes[] = {
	{ 2, 64, 8, 2, 32, 0 },   /* GQA, round sizes */
	{ 3, 37, 6, 3, 24, 0 },   /* odd sizes */
	{ 1, 45, 4, 1, 40, 0 },   /* MQA */
	{ 2, 33, 4, 4, 64, 0 },   /* MHA (GPT-2's layout) */
	{ 1, 300, 4, 2, 128, 0 }, /* hd 128, many tiles */
	{ 2, 100, 4, 2, 32, 16 }, /* window inside a tile */
	{ 1, 300, 8, 2, 64, 70 }, /* window across tiles */
	{ 1, 40, 2, 1, 24, 1 },   /* window 1: the diagonal only */
};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

static float *frand(struct kc_rng *r, size_t n, float lo, float hi)
{
	float *p = malloc((n ? n : 1) * sizeof(float));

	cr_assert(p);
	kc_fill(r, p, n, lo, hi);
	return p;
}

static void same(const char *what, const struct fshape *s, const float *d, const float *cpu_h,
		 size_t n)
{
	float *g = malloc((n ? n : 1) * sizeof(float));
	double *ref = malloc((n ? n : 1) * sizeof(double));
	char name[200];

	cr_assert(g && ref);
	snprintf(name, sizeof(name), "%s (B %d T %d NH %d KV %d hd %d window %d)", what, s->B,
		 s->T, s->NH, s->KV, s->hd, s->W);
	down(g, d, n * sizeof(float), name);
	for (size_t i = 0; i < n; i++)
		ref[i] = cpu_h[i];
	cr_assert(kc_close(name, g, ref, n, RTOL));
	free(g);
	free(ref);
}

static void *fetch(const void *d, size_t bytes, const char *what)
{
	void *h = malloc(bytes ? bytes : 1);

	cr_assert(h);
	down(h, d, bytes, what);
	return h;
}

Test(kernels_gpu_flash, flash_attention)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	cr_assert(gpu->flash_attention_forward && gpu->flash_attention_backward);
	for (size_t k = 0; k < NSHAPES; k++) {
		const struct fshape *s = &shapes[k];
		struct kc_rng r = { 701 + k };
		int B = s->B, T = s->T, NH = s->NH, KV = s->KV, hd = s->hd, W = s->W;
		size_t ni = (size_t)B * T * (NH + 2 * KV) * hd, no = (size_t)B * T * NH * hd;
		size_t nr = (size_t)B * NH * T;
		float *x = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1);
		float *dx = frand(&r, ni, -1, 1), *out = malloc(no * 4), *lse = malloc(nr * 4);
		float *drow = malloc(nr * 4);
		float *x_d = up(x, ni * 4), *dout_d = up(dout, no * 4), *dx_d = up(dx, ni * 4);
		float *dx2_d = up(dx, ni * 4), *out_d = up(NULL, no * 4), *lse_d = up(NULL, nr * 4);
		float *drow_d = up(NULL, nr * 4);

		cr_assert(out && lse && drow);
		gpu->flash_attention_forward(st, out_d, lse_d, x_d, B, T, NH, KV, hd, W);
		cpu->flash_attention_forward(NULL, out, lse, x, B, T, NH, KV, hd, W);
		same("flash_attention_forward out", s, out_d, out, no);
		same("flash_attention_forward lse", s, lse_d, lse, nr);
		float *o1 = fetch(out_d, no * 4, "flash out");

		gpu->flash_attention_forward(st, out_d, lse_d, x_d, B, T, NH, KV, hd, W);
		float *o2 = fetch(out_d, no * 4, "flash out rerun");

		cr_assert(!memcmp(o1, o2, no * 4), "flash out: not bit-identical run to run");
		gpu->flash_attention_backward(st, dx_d, drow_d, dout_d, x_d, out_d, lse_d, B, T, NH,
					      KV, hd, W);
		cpu->flash_attention_backward(NULL, dx, drow, dout, x, out, lse, B, T, NH, KV, hd,
					      W);
		same("flash_attention_backward dqkv", s, dx_d, dx, ni);
		float *g1 = fetch(dx_d, ni * 4, "flash dqkv");

		gpu->flash_attention_backward(st, dx2_d, drow_d, dout_d, x_d, out_d, lse_d, B, T,
					      NH, KV, hd, W);
		float *g2 = fetch(dx2_d, ni * 4, "flash dqkv rerun");

		cr_assert(!memcmp(g1, g2, ni * 4), "flash dqkv: not bit-identical run to run");
		free(x), free(dout), free(dx), free(out), free(lse), free(drow), free(o1), free(o2);
		free(g1), free(g2);
		gt_free(x_d), gt_free(dout_d), gt_free(dx_d), gt_free(dx2_d), gt_free(out_d);
		gt_free(lse_d), gt_free(drow_d);
	}
	close_gpu(st);
}
