/* The CUDA backward ops that write a bf16 copy of their fp32 result (kernels.h: the GEMMs'
 * output gradients; gelu_backward_bf16out, swiglu_backward_bf16out,
 * residual_forward_bf16out, rope_backward_bf16out,
 * flash_attention_doc_tc_backward_bf16out). Each runs the fp32 op's own kernel with the
 * copy's store added, so:
 *   - the fp32 result is bit for bit the CUDA fp32 op's (from the same starting dinp);
 *   - the bf16 copy is bit for bit the cast of that result (zn_cast_f32_to_bf16, the
 *     cast kernel's arithmetic);
 *   - against the CPU table's slot (itself the fp32 op + cast, test_kernels_bf16out.c):
 *     the fp32 ops' tolerances (1e-5 elementwise; 2e-2 for the tensor-core attention) and
 *     the copy within bf16 rounding of the CPU's.
 * The elementwise ones at sizes 4k and 4k + 3 on aligned and misaligned (offset 1)
 * buffers: the vectorized and the scalar paths. The attention at head_dim 64 (the
 * FlashAttention-2 epilogues) and 48 (the fp32 op and a cast), with and without packed
 * documents. Skips, with the reason, without CUDA or a usable GPU.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cuda_kernels.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"

#define RTOL_ELEM 1e-5
#define RTOL_TC 2e-2
#define RTOL_COPY 1e-2

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

static float *f32_rand(struct kc_rng *r, size_t n, float a)
{
	float *x = malloc((n ? n : 1) * 4);

	cr_assert(x);
	kc_fill(r, x, n, -a, a);
	return x;
}

/* n elements of a device buffer from element offset off (elem bytes each); from 0 the
 * whole buffer (n elements), its guard checked */
static void *down_at(const void *d, size_t off, size_t n, size_t elem, const char *what)
{
	const char *err;
	void *h = malloc((n ? n : 1) * elem);

	cr_assert(h);
	if (off == 0) {
		down(h, d, n * elem, what);
		return h;
	}
	gt_download_part(h, d, off * elem, n * elem, &err);
	cr_assert(!*err, "%s: cudaDeviceSynchronize/cudaMemcpy: %s", what, err);
	return h;
}

/* got32_d/got16_d (from element off): the fp32 result bit for bit the device fp32 op's
 * want32_d, the copy the cast of it; against the CPU's cpu32/cpu16 within rtol */
static void check(const char *what, const float *got32_d, const uint16_t *got16_d,
		  const float *want32_d, size_t off, const float *cpu32, const uint16_t *cpu16,
		  size_t n, double rtol)
{
	float *g = down_at(got32_d, off, n, 4, what), *w = down_at(want32_d, off, n, 4, what);
	uint16_t *g16 = down_at(got16_d, off, n, 2, what), *c16 = malloc((n ? n : 1) * 2);
	float *g16f = malloc((n ? n : 1) * 4);
	double *ref = malloc((n ? n : 1) * sizeof(double));

	cr_assert(c16 && g16f && ref);
	cr_assert(!memcmp(g, w, n * 4), "%s: the fp32 result is not the fp32 op's bit for bit",
		  what);
	zn_cast_f32_to_bf16(c16, g, n);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(g16[i], c16[i], "%s: copy[%zu] = 0x%04x, the cast of %.9g is 0x%04x",
			     what, i, g16[i], g[i], c16[i]);
	for (size_t i = 0; i < n; i++)
		ref[i] = cpu32[i];
	cr_assert(kc_close(what, g, ref, n, rtol));
	zn_cast_bf16_to_f32(g16f, g16, n);
	for (size_t i = 0; i < n; i++)
		ref[i] = zn_bf16_to_f32(cpu16[i]);
	cr_assert(kc_close(what, g16f, ref, n, rtol > RTOL_COPY ? rtol : RTOL_COPY));
	free(g), free(w), free(g16), free(c16), free(g16f), free(ref);
}

/* gelu_backward_bf16out and residual_forward_bf16out: vectorized (aligned, n = 4k) and
 * scalar (tail, offset 1) */
Test(kernels_gpu_bf16grad, gelu_and_residual)
{
	const size_t sizes[] = { 4096, 100003, 3 };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (int off = 0; off < 2; off++) {
			size_t n = sizes[k], m = n + (size_t)off; /* offset 0: the guard follows */
			struct kc_rng r = { 800 + 2 * k + (uint64_t)off };
			float *x = f32_rand(&r, m, 6), *dout = f32_rand(&r, m, 2);
			float *d0 = f32_rand(&r, m, 1), *h = malloc(m * 4);
			uint16_t *h16 = malloc(m * 2);
			float *x_d = up(x, m * 4), *dout_d = up(dout, m * 4);
			float *a_d = up(d0, m * 4), *b_d = up(d0, m * 4);
			uint16_t *c_d = up(NULL, m * 2);
			char what[96];

			cr_assert(h && h16);
			memcpy(h, d0, m * 4);
			gpu->gelu_backward(st, a_d + off, x_d + off, dout_d + off, n);
			gpu->gelu_backward_bf16out(st, b_d + off, c_d + off, x_d + off, dout_d + off,
						   n);
			cpu->gelu_backward_bf16out(NULL, h + off, h16 + off, x + off, dout + off, n);
			snprintf(what, sizeof(what), "gelu_backward_bf16out n %zu offset %d", n, off);
			check(what, b_d, c_d, a_d, off, h + off, h16 + off, n, RTOL_ELEM);
			gpu->residual_forward(st, a_d + off, x_d + off, dout_d + off, n);
			gpu->residual_forward_bf16out(st, b_d + off, c_d + off, x_d + off,
						      dout_d + off, n);
			cpu->residual_forward_bf16out(NULL, h + off, h16 + off, x + off, dout + off,
						      n);
			snprintf(what, sizeof(what), "residual_forward_bf16out n %zu offset %d", n,
				 off);
			check(what, b_d, c_d, a_d, off, h + off, h16 + off, n, 0.0);
			free(x), free(dout), free(d0), free(h), free(h16);
			gt_free(x_d), gt_free(dout_d), gt_free(a_d), gt_free(b_d), gt_free(c_d);
		}
	close_gpu(st);
}

Test(kernels_gpu_bf16grad, swiglu)
{
	const int shapes[][3] = { { 3, 41, 700 }, { 1, 5, 3 } };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		int B = shapes[k][0], T = shapes[k][1], IC = shapes[k][2];
		size_t n = (size_t)B * T * IC;
		struct kc_rng r = { 820 + k };
		float *gu = f32_rand(&r, 2 * n, 8), *dout = f32_rand(&r, n, 1);
		float *d0 = f32_rand(&r, 2 * n, 1), *h = malloc(2 * n * 4);
		uint16_t *h16 = malloc(2 * n * 2);
		float *gu_d = up(gu, 2 * n * 4), *dout_d = up(dout, n * 4);
		float *a_d = up(d0, 2 * n * 4), *b_d = up(d0, 2 * n * 4);
		uint16_t *c_d = up(NULL, 2 * n * 2);

		cr_assert(h && h16);
		memcpy(h, d0, 2 * n * 4);
		gpu->swiglu_backward(st, a_d, dout_d, gu_d, B, T, IC);
		gpu->swiglu_backward_bf16out(st, b_d, c_d, dout_d, gu_d, B, T, IC);
		cpu->swiglu_backward_bf16out(NULL, h, h16, dout, gu, B, T, IC);
		check("swiglu_backward_bf16out", b_d, c_d, a_d, 0, h, h16, 2 * n, RTOL_ELEM);
		free(gu), free(dout), free(d0), free(h), free(h16);
		gt_free(gu_d), gt_free(dout_d), gt_free(a_d), gt_free(b_d), gt_free(c_d);
	}
	close_gpu(st);
}

/* rope_backward_bf16out: q, k heads rotated back as rope_backward, and every channel's
 * copy (the value heads unrotated), with positions and without */
Test(kernels_gpu_bf16grad, rope)
{
	enum { B = 2, T = 33, NH = 4, KV = 2, hd = 64, S = (NH + 2 * KV) * hd };
	const size_t n = (size_t)B * T * S;
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	struct kc_rng r = { 840 };
	float inv[hd / 2], *d0 = f32_rand(&r, n, 2), *h = malloc(n * 4);
	uint16_t *h16 = malloc(n * 2);
	int pos[B * T];
	int *pos_d;

	cr_assert(h && h16);
	for (int i = 0; i < hd / 2; i++)
		inv[i] = powf(10000.0f, -2.0f * (float)i / hd);
	for (int t = 0; t < B * T; t++)
		pos[t] = t % T % 10;
	pos_d = up(pos, sizeof(pos));
	for (int withpos = 0; withpos < 2; withpos++) {
		float *a_d = up(d0, n * 4), *b_d = up(d0, n * 4);
		uint16_t *c_d = up(NULL, n * 2);
		const int *p = withpos ? pos : NULL, *p_d = withpos ? pos_d : NULL;

		memcpy(h, d0, n * 4);
		gpu->rope_backward(st, a_d, inv, p_d, B, T, NH, KV, hd);
		gpu->rope_backward_bf16out(st, b_d, c_d, inv, p_d, B, T, NH, KV, hd);
		cpu->rope_backward_bf16out(NULL, h, h16, inv, p, B, T, NH, KV, hd);
		check(withpos ? "rope_backward_bf16out (positions)" : "rope_backward_bf16out", b_d,
		      c_d, a_d, 0, h, h16, n, RTOL_ELEM);
		gt_free(a_d), gt_free(b_d), gt_free(c_d);
	}
	free(d0), free(h), free(h16);
	gt_free(pos_d);
	close_gpu(st);
}

/* flash_attention_doc_tc_backward_bf16out: dqkv as the slot without the copy (the same
 * kernels), the copy its cast; head_dim 64 (FlashAttention-2 epilogues), 48 (fp32 op +
 * cast); documents of 1..40 tokens or none */
Test(kernels_gpu_bf16grad, attention_dqkv16)
{
	const int hds[] = { 64, 48 };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < 2; k++)
		for (int withpos = 0; withpos < 2; withpos++) {
			const int B = 2, T = 150, NH = 4, KV = 2, hd = hds[k];
			size_t ni = (size_t)B * T * (NH + 2 * KV) * hd, no = (size_t)B * T * NH * hd;
			size_t nr = (size_t)B * NH * T;
			struct kc_rng r = { 860 + 2 * k + (uint64_t)withpos };
			float *x = f32_rand(&r, ni, 2), *dout = f32_rand(&r, no, 1);
			float *d0 = f32_rand(&r, ni, 1), *h = malloc(ni * 4);
			float *out = malloc(no * 4), *lse = malloc(nr * 4), *dr = malloc(nr * 4);
			uint16_t *h16 = malloc(ni * 2);
			int *pos = malloc((size_t)B * T * sizeof(int));
			float *x_d = up(x, ni * 4), *dout_d = up(dout, no * 4);
			float *a_d = up(d0, ni * 4), *b_d = up(d0, ni * 4);
			float *out_d = up(NULL, no * 4), *lse_d = up(NULL, nr * 4);
			float *dr_d = up(NULL, nr * 4);
			uint16_t *c_d = up(NULL, ni * 2);
			int *pos_d;
			const int *p, *p_d;
			char what[96];

			cr_assert(h && out && lse && dr && h16 && pos);
			for (int b = 0; b < B; b++) /* documents of 1..40 tokens */
				for (int t = 0, i = 0, len = 0; t < T; t++) {
					if (i == len) {
						len = 1 + (int)(kc_next(&r) % 40);
						i = 0;
					}
					pos[b * T + t] = i++;
				}
			pos_d = up(pos, (size_t)B * T * sizeof(int));
			p = withpos ? pos : NULL, p_d = withpos ? pos_d : NULL;
			memcpy(h, d0, ni * 4);
			gpu->flash_attention_doc_tc_forward(st, out_d, NULL, lse_d, x_d, p_d, B, T, NH,
							    KV, hd, 0);
			gpu->flash_attention_doc_tc_backward(st, a_d, dr_d, dout_d, x_d, out_d, lse_d,
							     p_d, B, T, NH, KV, hd, 0);
			gpu->flash_attention_doc_tc_backward_bf16out(st, b_d, c_d, dr_d, dout_d, x_d,
								     NULL, out_d, lse_d, p_d, B, T,
								     NH, KV, hd, 0);
			cpu->flash_attention_doc_tc_forward(NULL, out, NULL, lse, x, p, B, T, NH, KV,
							    hd, 0);
			cpu->flash_attention_doc_tc_backward_bf16out(NULL, h, h16, dr, dout, x, NULL,
								     out, lse, p, B, T, NH, KV, hd,
								     0);
			snprintf(what, sizeof(what), "attention dqkv16 hd %d%s", hd,
				 withpos ? " (documents)" : "");
			check(what, b_d, c_d, a_d, 0, h, h16, ni, RTOL_TC);
			free(x), free(dout), free(d0), free(h), free(out), free(lse), free(dr);
			free(h16), free(pos);
			gt_free(x_d), gt_free(dout_d), gt_free(a_d), gt_free(b_d), gt_free(out_d);
			gt_free(lse_d), gt_free(dr_d), gt_free(c_d), gt_free(pos_d);
		}
	close_gpu(st);
}
