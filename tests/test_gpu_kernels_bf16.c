/* The CUDA bf16 compute ops (kernels/cuda/gemm_bf16.cu: cublasGemmEx with bf16 inputs,
 * fp32 accumulation) against the CPU table's (kernels/cpu/matmul_bf16.c, checked against
 * double references in test_kernels_bf16.c): matmul_forward_bf16 and
 * matmul_backward_bf16 (accumulating into the same random start; with and without bias)
 * on a shape across 256 tiles and odd sizes, encoder_forward_bf16 and
 * embedding_forward_bf16 bit-exact, the bf16 chunked lm_head + cross-entropy, and
 * bit-identical reruns. Tolerance 1e-4 (kc_close's normalized error: both sum the same
 * exact bf16 products in fp32, in different orders). Skips, with the reason, without CUDA
 * or a usable GPU.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cuda_kernels.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"
#include "lmhead_ce.h"

#define RTOL 1e-4

static void same(const char *what, const float *d, const float *h, size_t n)
{
	float *g = malloc(n * sizeof(float));
	double *ref = malloc(n * sizeof(double));

	cr_assert(g && ref);
	down(g, d, n * sizeof(float), what);
	for (size_t i = 0; i < n; i++)
		ref[i] = h[i];
	cr_assert(kc_close(what, g, ref, n, RTOL));
	free(g), free(ref);
}

static uint16_t *bf16_rand(struct kc_rng *r, size_t n, float a)
{
	float *x = malloc(n * 4);
	uint16_t *h = malloc(n * 2);

	cr_assert(x && h);
	kc_fill(r, x, n, -a, a);
	zn_cast_f32_to_bf16(h, x, n);
	free(x);
	return h;
}

static float *f32_rand(struct kc_rng *r, size_t n, float a)
{
	float *x = malloc(n * 4);

	cr_assert(x);
	kc_fill(r, x, n, -a, a);
	return x;
}

static void matmul_case(const struct zn_kernel_table *gpu, void *st, int B, int T, int C,
			int OC, bool with_bias)
{
	struct kc_rng r = { 17 + (uint64_t)B * T + C + OC };
	size_t ni = (size_t)B * T * C, nw = (size_t)OC * C, no = (size_t)B * T * OC;
	uint16_t *in = bf16_rand(&r, ni, 1), *w = bf16_rand(&r, nw, 0.5f), *d16;
	float *bias = f32_rand(&r, OC, 0.5f), *dout = f32_rand(&r, no, 1);
	float *out = malloc(no * 4), *di = f32_rand(&r, ni, 1), *dw = f32_rand(&r, nw, 1);
	float *db = f32_rand(&r, OC, 1), *a = malloc(no * 4), *b = malloc(no * 4);
	const float *bh = with_bias ? bias : NULL;

	d16 = malloc(no * 2);
	cr_assert(out && a && b && d16);
	zn_cast_f32_to_bf16(d16, dout, no);
	uint16_t *in_d = up(in, ni * 2), *w_d = up(w, nw * 2), *d16_d = up(d16, no * 2);
	float *bias_d = up(bias, OC * 4), *dout_d = up(dout, no * 4), *out_d = up(NULL, no * 4);
	float *out2_d = up(NULL, no * 4);
	float *di_d = up(di, ni * 4), *dw_d = up(dw, nw * 4), *db_d = up(db, OC * 4);

	gpu->matmul_forward_bf16(st, out_d, in_d, w_d, with_bias ? bias_d : NULL, B, T, C, OC);
	zn_kernels_cpu.matmul_forward_bf16(NULL, out, in, w, bh, B, T, C, OC);
	same("matmul_forward_bf16", out_d, out, no);
	gpu->matmul_forward_bf16(st, out2_d, in_d, w_d, with_bias ? bias_d : NULL, B, T, C, OC);
	down(a, out_d, no * 4, "out");
	down(b, out2_d, no * 4, "out rerun");
	cr_assert(!memcmp(a, b, no * 4), "matmul_forward_bf16: not bit-identical run to run");
	gpu->matmul_backward_bf16(st, di_d, dw_d, with_bias ? db_d : NULL, d16_d,
				  with_bias ? dout_d : NULL, in_d, w_d, B, T, C, OC);
	zn_kernels_cpu.matmul_backward_bf16(NULL, di, dw, with_bias ? db : NULL, d16,
					    with_bias ? dout : NULL, in, w, B, T, C, OC);
	same("matmul_backward_bf16 dinp", di_d, di, ni);
	same("matmul_backward_bf16 dweight", dw_d, dw, nw);
	same("matmul_backward_bf16 dbias", db_d, db, OC);
	free(in), free(w), free(d16), free(bias), free(dout), free(out), free(di), free(dw);
	free(db), free(a), free(b);
	gt_free(in_d), gt_free(w_d), gt_free(d16_d), gt_free(bias_d), gt_free(dout_d);
	gt_free(out_d), gt_free(out2_d), gt_free(di_d), gt_free(dw_d), gt_free(db_d);
}

Test(kernels_gpu_bf16, matmul_matches_cpu)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	matmul_case(gpu, st, 2, 150, 96, 288, true);
	matmul_case(gpu, st, 1, 7, 33, 5, false);
	matmul_case(gpu, st, 3, 37, 768, 130, true);
	close_gpu(st);
}

Test(kernels_gpu_bf16, encoder_embedding_exact)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	enum { B = 2, T = 9, C = 40, V = 31 };
	struct kc_rng r = { 3 };
	uint16_t *wte = bf16_rand(&r, (size_t)V * C, 1), *wpe = bf16_rand(&r, (size_t)T * C, 1);
	int tok[B * T];
	float h[B * T * C];

	kc_fill_int(&r, tok, B * T, V);
	uint16_t *wte_d = up(wte, (size_t)V * C * 2), *wpe_d = up(wpe, (size_t)T * C * 2);
	int *tok_d = up(tok, sizeof(tok));
	float *o_d = up(NULL, sizeof(h)), *g = malloc(sizeof(h));

	gpu->encoder_forward_bf16(st, o_d, tok_d, wte_d, wpe_d, B, T, C);
	zn_kernels_cpu.encoder_forward_bf16(NULL, h, tok, wte, wpe, B, T, C);
	down(g, o_d, sizeof(h), "encoder_forward_bf16");
	cr_assert(!memcmp(g, h, sizeof(h)), "encoder_forward_bf16 differs from the CPU");
	gpu->embedding_forward_bf16(st, o_d, tok_d, wte_d, B, T, C);
	zn_kernels_cpu.embedding_forward_bf16(NULL, h, tok, wte, B, T, C);
	down(g, o_d, sizeof(h), "embedding_forward_bf16");
	cr_assert(!memcmp(g, h, sizeof(h)), "embedding_forward_bf16 differs from the CPU");
	free(wte), free(wpe), free(g);
	gt_free(wte_d), gt_free(wpe_d), gt_free(tok_d), gt_free(o_d);
	close_gpu(st);
}

Test(kernels_gpu_bf16, lmhead_ce_matches_cpu)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	enum { BT = 300, C = 64, V = 1000, Vp = 1024, CH = 128 };
	size_t nx = (size_t)BT * C, nw = (size_t)Vp * C, nk = zn_lmhead_ce_work_count(CH, Vp);
	struct kc_rng r = { 92 };
	uint16_t *x = bf16_rand(&r, nx, 1), *w = calloc(nw, 2);
	float *dx = f32_rand(&r, nx, 1), *dw = calloc(nw, 4), *l = calloc(BT, 4);
	float *work = calloc(nk, 4);
	int *tg = malloc(BT * sizeof(int));
	uint16_t *wv = bf16_rand(&r, (size_t)V * C, 1);

	cr_assert(w && dw && l && work && tg);
	memcpy(w, wv, (size_t)V * C * 2);
	kc_fill_int(&r, tg, BT, V);
	uint16_t *x_d = up(x, nx * 2), *w_d = up(w, nw * 2);
	float *dx_d = up(dx, nx * 4), *dw_d = up(dw, nw * 4), *l_d = up(NULL, BT * 4);
	float *work_d = up(NULL, nk * 4);
	int *tg_d = up(tg, BT * sizeof(int));

	cr_assert(!zn_lmhead_ce_forward_bf16(gpu, st, l_d, work_d, x_d, w_d, tg_d, BT, C, V, Vp,
					     CH));
	cr_assert(!zn_lmhead_ce_forward_bf16(&zn_kernels_cpu, NULL, l, work, x, w, tg, BT, C, V,
					     Vp, CH));
	same("lmhead bf16 losses", l_d, l, BT);
	cr_assert(!zn_lmhead_ce_backward_bf16(gpu, st, dx_d, dw_d, work_d, x_d, w_d, tg_d,
					      1.0f / BT, BT, C, V, Vp, CH));
	cr_assert(!zn_lmhead_ce_backward_bf16(&zn_kernels_cpu, NULL, dx, dw, work, x, w, tg,
					      1.0f / BT, BT, C, V, Vp, CH));
	same("lmhead bf16 dx", dx_d, dx, nx);
	same("lmhead bf16 dwte", dw_d, dw, nw);
	free(x), free(w), free(wv), free(dx), free(dw), free(l), free(work), free(tg);
	gt_free(x_d), gt_free(w_d), gt_free(dx_d), gt_free(dw_d), gt_free(l_d), gt_free(work_d);
	gt_free(tg_d);
	close_gpu(st);
}
