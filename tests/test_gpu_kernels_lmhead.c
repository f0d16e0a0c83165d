/* kernels/lmhead_ce.c, the chunked lm_head + cross-entropy, run with the CUDA table
 * against the same with the CPU table (checked against the unchunked path and finite
 * differences in test_kernels_lmhead.c): losses, dx and dwte (accumulated into the same
 * random start), a chunk that does not divide the rows, bit-identical reruns. Skips, with
 * the reason, without CUDA or a usable GPU. Tolerance 1e-4 (GEMMs sum in other orders).
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

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

Test(kernels_gpu_lmhead, chunked_matches_cpu)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	enum { BT = 300, C = 64, V = 1000, Vp = 1024, CH = 128 };
	size_t nx = (size_t)BT * C, nw = (size_t)Vp * C, nk = zn_lmhead_ce_work_count(CH, Vp);
	struct kc_rng r = { 91 };
	float *x = calloc(nx, 4), *w = calloc(nw, 4), *dx = calloc(nx, 4), *dw = calloc(nw, 4);
	float *l = calloc(BT, 4), *work = calloc(nk, 4);
	int *tg = malloc(BT * sizeof(int));

	cr_assert(x && w && dx && dw && l && work && tg);
	kc_fill(&r, x, nx, -1, 1);
	kc_fill(&r, w, (size_t)V * C, -1, 1);
	kc_fill(&r, dx, nx, -1, 1);
	kc_fill(&r, dw, (size_t)V * C, -1, 1);
	kc_fill_int(&r, tg, BT, V);
	float *x_d = up(x, nx * 4), *w_d = up(w, nw * 4), *dx_d = up(dx, nx * 4);
	float *dw_d = up(dw, nw * 4), *l_d = up(NULL, BT * 4), *work_d = up(NULL, nk * 4);
	float *dx2_d = up(dx, nx * 4), *dw2_d = up(dw, nw * 4);
	int *tg_d = up(tg, BT * sizeof(int));

	cr_assert(!zn_lmhead_ce_forward(gpu, st, l_d, work_d, x_d, w_d, tg_d, BT, C, V, Vp, CH));
	cr_assert(!zn_lmhead_ce_forward(&zn_kernels_cpu, NULL, l, work, x, w, tg, BT, C, V, Vp, CH));
	same("lmhead losses", l_d, l, BT);
	cr_assert(!zn_lmhead_ce_backward(gpu, st, dx_d, dw_d, work_d, x_d, w_d, tg_d, 1.0f / BT,
					 BT, C, V, Vp, CH));
	cr_assert(!zn_lmhead_ce_backward(&zn_kernels_cpu, NULL, dx, dw, work, x, w, tg, 1.0f / BT, BT,
					 C, V, Vp, CH));
	same("lmhead dx", dx_d, dx, nx);
	same("lmhead dwte", dw_d, dw, nw);
	cr_assert(!zn_lmhead_ce_backward(gpu, st, dx2_d, dw2_d, work_d, x_d, w_d, tg_d,
					 1.0f / BT, BT, C, V, Vp, CH));
	float *a = malloc(nw * 4), *b = malloc(nw * 4);

	cr_assert(a && b);
	down(a, dw_d, nw * 4, "dwte");
	down(b, dw2_d, nw * 4, "dwte rerun");
	cr_assert(!memcmp(a, b, nw * 4), "dwte: not bit-identical run to run");
	free(x), free(w), free(dx), free(dw), free(l), free(work), free(tg), free(a), free(b);
	gt_free(x_d), gt_free(w_d), gt_free(dx_d), gt_free(dw_d), gt_free(l_d), gt_free(work_d);
	gt_free(dx2_d), gt_free(dw2_d), gt_free(tg_d);
	close_gpu(st);
}
