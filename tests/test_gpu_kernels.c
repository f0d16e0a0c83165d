/* kernels/cuda against kernels/cpu: every op of the table on the GPU with seeded random
 * inputs, compared with zn_kernels_cpu on the same inputs (normalized error, kc_close).
 * Gradient buffers start from the same random values on both sides (accumulate semantics);
 * written outputs and scratch (probs, preatt, att, datt, dpreatt, dlogits) start as garbage
 * on the device. Every device buffer has guard bytes after it. Ops run on a non-default
 * stream. Skips, with the reason, when zinc is built without CUDA or no GPU is usable.
 *
 * Tolerances (rtol of kc_close): elementwise ops 1e-5 (CUDA's expf/tanhf are within 2 ulp
 * of glibc's); reductions 1e-4 (different summation order over up to ~1000 terms); casts and
 * the embedding are expected bit-exact.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cuda_kernels.h"
#include "gpu_buf.h"
#include "gpu_kernel_check.h"
#include "gemm_split.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"

#define RTOL_EXACT 1e-6
#define RTOL_ELEM 1e-5
#define RTOL_RED 1e-4

struct shape {
	int B, T, C, NH, V, Vp, OC;
};

/* a round shape and an odd one (C not a multiple of 32, hs = 24, T not a multiple of 32) */
static const struct shape shapes[] = {
	{ 2, 64, 128, 4, 1000, 1024, 384 },
	{ 3, 37, 72, 3, 101, 128, 200 },
};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

/* One line per comparison for gpu-check.sh's summary: the largest absolute error and the
 * worst element's error as a multiple of kc_close's tolerance (<= 1 passes). */
static void report(const char *op, const char *what, const float *g, const double *ref,
		   size_t n, double rtol)
{
	double maxref = 0.0, maxabs = 0.0, worst = 0.0;

	for (size_t i = 0; i < n; i++)
		if (fabs(ref[i]) > maxref)
			maxref = fabs(ref[i]);
	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)g[i] - ref[i]);
		double r = e / (rtol * (fabs(ref[i]) + maxref) + 1e-30);

		if (e > maxabs)
			maxabs = e;
		if (r > worst)
			worst = r;
	}
	fprintf(stderr, "gpu-vs-cpu: %s %s max_abs_err %.3g rtol %.0e x_tol %.3g\n", op, what,
		maxabs, rtol, worst);
}

/* device tensor d of n floats against the CPU's result */
static void same(const char *op, const char *what, const struct shape *s, const float *d,
		 const float *cpu_h, size_t n, double rtol)
{
	float *g = malloc((n ? n : 1) * sizeof(float));
	double *ref = calloc(n ? n : 1, sizeof(double));
	char name[160];

	cr_assert(g && ref);
	snprintf(name, sizeof(name), "%s %s (B %d T %d C %d NH %d V %d/%d OC %d)", op, what,
		 s->B, s->T, s->C, s->NH, s->V, s->Vp, s->OC);
	down(g, d, n * sizeof(float), name);
	for (size_t i = 0; i < n; i++)
		ref[i] = cpu_h[i];
	report(op, what, g, ref, n, rtol);
	cr_assert(kc_close(name, g, ref, n, rtol));
	free(g);
	free(ref);
}

Test(kernels_gpu, table_complete)
{
	const struct zn_kernel_table *k = zn_kernels_cuda_table();

	if (!k)
		cr_skip_test("no CUDA GPU: zinc was built without CUDA");
	void (*const *slot)(void) = (void (*const *)(void))&k->encoder_forward;
	size_t nslot = (sizeof(*k) - offsetof(struct zn_kernel_table, encoder_forward)) /
		       sizeof(void (*)(void));

	cr_assert_str_eq(k->name, "cuda");
	for (size_t i = 0; i < nslot; i++)
		cr_assert(slot[i] != NULL, "zn_kernels_cuda slot %zu is NULL", i);
}

Test(kernels_gpu, encoder)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < NSHAPES; k++) {
		const struct shape *s = &shapes[k];
		struct kc_rng r = { 11 + k };
		size_t n = (size_t)s->B * s->T * s->C, nwte = (size_t)s->V * s->C;
		size_t nwpe = (size_t)s->T * s->C, BT = (size_t)s->B * s->T;
		int *tok = malloc(BT * sizeof(int));

		kc_fill_int(&r, tok, BT, s->V / 8 + 1); /* few distinct tokens: repeats */
		float *wte = frand(&r, nwte, -1, 1), *wpe = frand(&r, nwpe, -1, 1);
		float *dout = frand(&r, n, -1, 1), *dwte = frand(&r, nwte, -1, 1);
		float *dwpe = frand(&r, nwpe, -1, 1), *out = malloc(n * sizeof(float));
		int *tok_d = up(tok, BT * sizeof(int));
		float *wte_d = up(wte, nwte * 4), *wpe_d = up(wpe, nwpe * 4), *out_d = up(NULL, n * 4);
		float *dout_d = up(dout, n * 4), *dwte_d = up(dwte, nwte * 4);
		float *dwpe_d = up(dwpe, nwpe * 4);

		gpu->encoder_forward(st, out_d, tok_d, wte_d, wpe_d, s->B, s->T, s->C);
		cpu->encoder_forward(NULL, out, tok, wte, wpe, s->B, s->T, s->C);
		same("encoder_forward", "out", s, out_d, out, n, RTOL_EXACT);
		gpu->encoder_backward(st, dwte_d, dwpe_d, dout_d, tok_d, s->B, s->T, s->C);
		cpu->encoder_backward(NULL, dwte, dwpe, dout, tok, s->B, s->T, s->C);
		same("encoder_backward", "dwte", s, dwte_d, dwte, nwte, RTOL_EXACT);
		same("encoder_backward", "dwpe", s, dwpe_d, dwpe, nwpe, RTOL_EXACT);
		free(tok), free(wte), free(wpe), free(dout), free(dwte), free(dwpe), free(out);
		gt_free(tok_d), gt_free(wte_d), gt_free(wpe_d), gt_free(out_d), gt_free(dout_d);
		gt_free(dwte_d), gt_free(dwpe_d);
	}
	close_gpu(st);
}

Test(kernels_gpu, layernorm)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < NSHAPES; k++) {
		const struct shape *s = &shapes[k];
		struct kc_rng r = { 21 + k };
		int B = s->B, T = s->T, C = s->C;
		size_t n = (size_t)B * T * C, BT = (size_t)B * T;
		float *x = frand(&r, n, -3, 3), *w = frand(&r, C, 0.5f, 1.5f);
		float *b = frand(&r, C, -1, 1), *dout = frand(&r, n, -1, 1);
		float *dx = frand(&r, n, -1, 1), *dw = frand(&r, C, -1, 1), *db = frand(&r, C, -1, 1);
		float *out = malloc(n * 4), *mean = malloc(BT * 4), *rstd = malloc(BT * 4);
		float *x_d = up(x, n * 4), *w_d = up(w, C * 4), *b_d = up(b, C * 4);
		float *dout_d = up(dout, n * 4), *dx_d = up(dx, n * 4), *dw_d = up(dw, C * 4);
		float *db_d = up(db, C * 4), *out_d = up(NULL, n * 4), *mean_d = up(NULL, BT * 4);
		float *rstd_d = up(NULL, BT * 4);

		gpu->layernorm_forward(st, out_d, mean_d, rstd_d, x_d, w_d, b_d, B, T, C);
		cpu->layernorm_forward(NULL, out, mean, rstd, x, w, b, B, T, C);
		same("layernorm_forward", "out", s, out_d, out, n, RTOL_ELEM);
		same("layernorm_forward", "mean", s, mean_d, mean, BT, RTOL_ELEM);
		same("layernorm_forward", "rstd", s, rstd_d, rstd, BT, RTOL_ELEM);
		/* both backwards from the CPU's mean/rstd so only the backward is compared */
		float *m2_d = up(mean, BT * 4), *r2_d = up(rstd, BT * 4);

		gpu->layernorm_backward(st, dx_d, dw_d, db_d, dout_d, x_d, w_d, m2_d, r2_d, B, T, C);
		cpu->layernorm_backward(NULL, dx, dw, db, dout, x, w, mean, rstd, B, T, C);
		same("layernorm_backward", "dinp", s, dx_d, dx, n, RTOL_RED);
		same("layernorm_backward", "dweight", s, dw_d, dw, C, RTOL_RED);
		same("layernorm_backward", "dbias", s, db_d, db, C, RTOL_RED);
		free(x), free(w), free(b), free(dout), free(dx), free(dw), free(db), free(out);
		free(mean), free(rstd);
		gt_free(x_d), gt_free(w_d), gt_free(b_d), gt_free(dout_d), gt_free(dx_d);
		gt_free(dw_d), gt_free(db_d), gt_free(out_d), gt_free(mean_d), gt_free(rstd_d);
		gt_free(m2_d), gt_free(r2_d);
	}
	close_gpu(st);
}

static void matmul_case(const struct zn_kernel_table *gpu, void *st, const struct shape *s,
			bool with_bias, uint64_t seed)
{
	struct kc_rng r = { seed };
	int B = s->B, T = s->T, C = s->C, OC = s->OC;
	size_t ni = (size_t)B * T * C, nw = (size_t)OC * C, no = (size_t)B * T * OC;
	const char *fw = with_bias ? "matmul_forward" : "matmul_forward (no bias)";
	const char *bw = with_bias ? "matmul_backward" : "matmul_backward (no dbias)";
	float *x = frand(&r, ni, -1, 1), *w = frand(&r, nw, -1, 1), *b = frand(&r, OC, -1, 1);
	float *dout = frand(&r, no, -1, 1), *dx = frand(&r, ni, -1, 1);
	float *dw = frand(&r, nw, -1, 1), *db = frand(&r, OC, -1, 1), *out = malloc(no * 4);
	float *x_d = up(x, ni * 4), *w_d = up(w, nw * 4), *b_d = up(b, OC * 4);
	float *dout_d = up(dout, no * 4), *dx_d = up(dx, ni * 4), *dw_d = up(dw, nw * 4);
	float *db_d = up(db, OC * 4), *out_d = up(NULL, no * 4);

	gpu->matmul_forward(st, out_d, x_d, w_d, with_bias ? b_d : NULL, B, T, C, OC);
	cpu->matmul_forward(NULL, out, x, w, with_bias ? b : NULL, B, T, C, OC);
	same(fw, "out", s, out_d, out, no, RTOL_RED);
	gpu->matmul_backward(st, dx_d, dw_d, with_bias ? db_d : NULL, dout_d, x_d, w_d, B, T, C,
			     OC);
	cpu->matmul_backward(NULL, dx, dw, with_bias ? db : NULL, dout, x, w, B, T, C, OC);
	same(bw, "dinp", s, dx_d, dx, ni, RTOL_RED);
	same(bw, "dweight", s, dw_d, dw, nw, RTOL_RED);
	same(bw, "dbias", s, db_d, db, OC, RTOL_RED); /* untouched when NULL was passed */
	free(x), free(w), free(b), free(dout), free(dx), free(dw), free(db), free(out);
	gt_free(x_d), gt_free(w_d), gt_free(b_d), gt_free(dout_d), gt_free(dx_d), gt_free(dw_d);
	gt_free(db_d), gt_free(out_d);
}

Test(kernels_gpu, matmul)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < NSHAPES; k++) {
		matmul_case(gpu, st, &shapes[k], true, 31 + k);
		matmul_case(gpu, st, &shapes[k], false, 41 + k);
	}
	close_gpu(st);
}

Test(kernels_gpu, attention)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < NSHAPES; k++) {
		const struct shape *s = &shapes[k];
		struct kc_rng r = { 51 + k };
		int B = s->B, T = s->T, C = s->C, NH = s->NH;
		size_t ni = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
		size_t na = (size_t)B * NH * T * T;
		float *x = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1);
		float *dx = frand(&r, ni, -1, 1), *out = malloc(no * 4), *pre = malloc(na * 4);
		float *att = malloc(na * 4), *datt = malloc(na * 4), *dpre = malloc(na * 4);
		float *x_d = up(x, ni * 4), *dout_d = up(dout, no * 4), *dx_d = up(dx, ni * 4);
		float *out_d = up(NULL, no * 4), *pre_d = up(NULL, na * 4);
		float *att_d = up(NULL, na * 4), *datt_d = up(NULL, na * 4);
		float *dpre_d = up(NULL, na * 4);

		gpu->attention_forward(st, out_d, pre_d, att_d, x_d, B, T, C, NH);
		cpu->attention_forward(NULL, out, pre, att, x, B, T, C, NH);
		same("attention_forward", "out", s, out_d, out, no, RTOL_RED);
		same("attention_forward", "preatt", s, pre_d, pre, na, RTOL_RED);
		same("attention_forward", "att", s, att_d, att, na, RTOL_RED);
		/* backward from the CPU's att so only the backward is compared */
		float *att2_d = up(att, na * 4);

		gpu->attention_backward(st, dx_d, dpre_d, datt_d, dout_d, x_d, att2_d, B, T, C, NH);
		cpu->attention_backward(NULL, dx, dpre, datt, dout, x, att, B, T, C, NH);
		same("attention_backward", "dinp", s, dx_d, dx, ni, RTOL_RED);
		same("attention_backward", "datt", s, datt_d, datt, na, RTOL_RED);
		same("attention_backward", "dpreatt", s, dpre_d, dpre, na, RTOL_RED);
		free(x), free(dout), free(dx), free(out), free(pre), free(att), free(datt);
		free(dpre);
		gt_free(x_d), gt_free(dout_d), gt_free(dx_d), gt_free(out_d), gt_free(pre_d);
		gt_free(att_d), gt_free(datt_d), gt_free(dpre_d), gt_free(att2_d);
	}
	close_gpu(st);
}

Test(kernels_gpu, elementwise)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	const struct shape s = { 0, 0, 0, 0, 0, 0, 0 };
	/* one size under a block, one past the grid-stride cap (65535 blocks x 256) */
	size_t sizes[] = { 131, (size_t)65535 * 256 + 1001 };

	for (size_t k = 0; k < 2; k++) {
		struct kc_rng r = { 61 + k };
		size_t n = sizes[k];
		float *x = frand(&r, n, -5, 5), *y = frand(&r, n, -1, 1), *dout = frand(&r, n, -1, 1);
		float *d1 = frand(&r, n, -1, 1), *d2 = frand(&r, n, -1, 1), *out = malloc(n * 4);
		float *x_d = up(x, n * 4), *y_d = up(y, n * 4), *dout_d = up(dout, n * 4);
		float *d1_d = up(d1, n * 4), *d2_d = up(d2, n * 4), *out_d = up(NULL, n * 4);

		gpu->gelu_forward(st, out_d, x_d, n);
		cpu->gelu_forward(NULL, out, x, n);
		same("gelu_forward", "out", &s, out_d, out, n, RTOL_ELEM);
		gpu->gelu_backward(st, d1_d, x_d, dout_d, n);
		cpu->gelu_backward(NULL, d1, x, dout, n);
		same("gelu_backward", "dinp", &s, d1_d, d1, n, RTOL_ELEM);
		gpu->residual_forward(st, out_d, x_d, y_d, n);
		cpu->residual_forward(NULL, out, x, y, n);
		same("residual_forward", "out", &s, out_d, out, n, RTOL_EXACT);
		gpu->residual_backward(st, d1_d, d2_d, dout_d, n);
		cpu->residual_backward(NULL, d1, d2, dout, n);
		same("residual_backward", "dinp1", &s, d1_d, d1, n, RTOL_EXACT);
		same("residual_backward", "dinp2", &s, d2_d, d2, n, RTOL_EXACT);
		gpu->scale(st, x_d, 0.37f, n);
		cpu->scale(NULL, x, 0.37f, n);
		same("scale", "out", &s, x_d, x, n, RTOL_EXACT);
		free(x), free(y), free(dout), free(d1), free(d2), free(out);
		gt_free(x_d), gt_free(y_d), gt_free(dout_d), gt_free(d1_d), gt_free(d2_d);
		gt_free(out_d);
	}
	close_gpu(st);
}

Test(kernels_gpu, crossentropy)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < NSHAPES; k++) {
		const struct shape *s = &shapes[k];
		struct kc_rng r = { 71 + k };
		int B = s->B, T = s->T, V = s->V, Vp = s->Vp;
		size_t BT = (size_t)B * T, n = BT * Vp;
		int *tg = malloc(BT * sizeof(int));

		kc_fill_int(&r, tg, BT, V);
		float *l = frand(&r, n, -4, 4);

		for (size_t bt = 0; bt < BT; bt++) /* padding holds garbage that must be ignored */
			for (int i = V; i < Vp; i++)
				l[bt * Vp + i] = 1e30f;
		float *loss = malloc(BT * 4), *probs = malloc(n * 4), *dl = malloc(n * 4);
		int *tg_d = up(tg, BT * sizeof(int));
		float *l_d = up(l, n * 4), *loss_d = up(NULL, BT * 4), *probs_d = up(NULL, n * 4);
		float *dl_d = up(NULL, n * 4);
		float scale = 1.0f / (float)BT;

		gpu->crossentropy_forward(st, loss_d, probs_d, l_d, tg_d, B, T, V, Vp);
		cpu->crossentropy_forward(NULL, loss, probs, l, tg, B, T, V, Vp);
		same("crossentropy_forward", "losses", s, loss_d, loss, BT, RTOL_RED);
		same("crossentropy_forward", "probs", s, probs_d, probs, n, RTOL_RED);
		float *p2_d = up(probs, n * 4);

		gpu->crossentropy_backward(st, dl_d, p2_d, tg_d, scale, B, T, V, Vp);
		cpu->crossentropy_backward(NULL, dl, probs, tg, scale, B, T, V, Vp);
		same("crossentropy_backward", "dlogits", s, dl_d, dl, n, RTOL_ELEM);
		free(tg), free(l), free(loss), free(probs), free(dl);
		gt_free(tg_d), gt_free(l_d), gt_free(loss_d), gt_free(probs_d), gt_free(dl_d);
		gt_free(p2_d);
	}
	close_gpu(st);
}

Test(kernels_gpu, crossentropy_bad_target)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	int tg[2] = { 3, 11 }; /* 11 is outside V = 11 */
	float l[32] = { 0 }, loss[2], d[32];
	int *tg_d = up(tg, sizeof(tg));
	float *l_d = up(l, sizeof(l)), *loss_d = up(NULL, sizeof(loss));
	float *p_d = up(NULL, sizeof(l)), *d_d = up(NULL, sizeof(d));

	gpu->crossentropy_forward(st, loss_d, p_d, l_d, tg_d, 1, 2, 11, 16);
	gpu->crossentropy_backward(st, d_d, p_d, tg_d, 1.0f, 1, 2, 11, 16);
	down(loss, loss_d, sizeof(loss), "crossentropy losses");
	down(d, d_d, sizeof(d), "crossentropy dlogits");
	cr_assert(fabsf(loss[0] - logf(11.0f)) < 1e-5f, "loss %g, want log(11)", loss[0]);
	cr_assert(isnan(loss[1]), "a target outside the vocab must give NaN, got %g", loss[1]);
	for (int i = 16; i < 32; i++)
		cr_assert(d[i] == 0.0f, "bad-target row must get zero gradient, [%d] = %g", i, d[i]);
	gt_free(tg_d), gt_free(l_d), gt_free(loss_d), gt_free(p_d), gt_free(d_d);
	close_gpu(st);
}

/* ZN_IGNORE_INDEX (-100, a masked token): loss 0 and a zero dlogits row, no NaN */
Test(kernels_gpu, crossentropy_ignore_index)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	int tg[2] = { ZN_IGNORE_INDEX, 3 };
	float l[32] = { 0 }, loss[2], d[32];
	int *tg_d = up(tg, sizeof(tg));
	float *l_d = up(l, sizeof(l)), *loss_d = up(NULL, sizeof(loss));
	float *p_d = up(NULL, sizeof(l)), *d_d = up(NULL, sizeof(d));

	gpu->crossentropy_forward(st, loss_d, p_d, l_d, tg_d, 1, 2, 11, 16);
	gpu->crossentropy_backward(st, d_d, p_d, tg_d, 1.0f, 1, 2, 11, 16);
	down(loss, loss_d, sizeof(loss), "crossentropy losses");
	down(d, d_d, sizeof(d), "crossentropy dlogits");
	cr_assert(loss[0] == 0.0f, "a masked target's loss is 0, got %g", loss[0]);
	cr_assert(fabsf(loss[1] - logf(11.0f)) < 1e-5f, "loss %g, want log(11)", loss[1]);
	for (int i = 0; i < 16; i++)
		cr_assert(d[i] == 0.0f, "masked row must get zero gradient, [%d] = %g", i, d[i]);
	gt_free(tg_d), gt_free(l_d), gt_free(loss_d), gt_free(p_d), gt_free(d_d);
	close_gpu(st);
}

Test(kernels_gpu, casts_bit_exact)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	struct kc_rng r = { 81 };
	size_t n = 100003;
	float *x = frand(&r, n, -1e4f, 1e4f), *back = malloc(n * 4);
	uint16_t *h = malloc(n * 2);
	uint32_t special[] = { 0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xffc12345u,
			       0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u,
			       0x00000001u, 0x7f7fffffu, 0x3f807fffu, 0x7f800001u };

	for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
		memcpy(&x[i], &special[i], 4);
	for (size_t i = 100; i < 1100; i++) { /* random bit patterns, NaNs and subnormals too */
		uint32_t u = (uint32_t)kc_next(&r);

		memcpy(&x[i], &u, 4);
	}
	float *x_d = up(x, n * 4), *back_d = up(NULL, n * 4);
	uint16_t *h_d = up(NULL, n * 2);

	gpu->cast_f32_to_bf16(st, h_d, x_d, n);
	down(h, h_d, n * 2, "cast_f32_to_bf16");
	for (size_t i = 0; i < n; i++)
		cr_assert(h[i] == zn_f32_to_bf16(x[i]), "bf16 of element %zu (0x%08x): 0x%04x, "
			  "want 0x%04x", i, ((uint32_t *)x)[i], h[i], zn_f32_to_bf16(x[i]));
	gpu->cast_bf16_to_f32(st, back_d, h_d, n);
	down(back, back_d, n * 4, "cast_bf16_to_f32");
	for (size_t i = 0; i < n; i++) {
		uint32_t got;

		memcpy(&got, &back[i], 4);
		cr_assert(got == (uint32_t)h[i] << 16, "f32 of bf16 0x%04x: 0x%08x", h[i], got);
	}
	free(x), free(back), free(h);
	gt_free(x_d), gt_free(back_d), gt_free(h_d);
	close_gpu(st);
}

/* the reduction ops twice on identical inputs into zeroed buffers: identical bits */
enum { DET_LN_DX, DET_LN_DW, DET_LN_DB, DET_AT_DX, DET_AT_DATT, DET_AT_DPRE, DET_MM_DX,
       DET_MM_DW, DET_MM_DB, DET_COUNT };

Test(kernels_gpu, deterministic)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	const struct shape *s = &shapes[0];
	struct kc_rng r = { 91 };
	int B = s->B, T = s->T, C = s->C, NH = s->NH, OC = s->OC;
	size_t n = (size_t)B * T * C, BT = (size_t)B * T, na = (size_t)B * NH * T * T;
	size_t nw = (size_t)OC * C, no = BT * OC, nd = no > n ? no : n;
	size_t len[DET_COUNT] = { n, C, C, 3 * n, na, na, n, nw, OC };
	/* x: qkv [B,T,3C], its first n also the layernorm and matmul input; w: [OC,C], its
	 * first C also the layernorm weight; dout: [B,T,max(C,OC)] */
	float *x = frand(&r, 3 * n, -2, 2), *dout = frand(&r, nd, -1, 1);
	float *w = frand(&r, nw, -1, 1), *stat = frand(&r, BT, 0.5f, 1.5f);
	float *zero = calloc(3 * n > nw ? 3 * n : (nw > na ? nw : na), 4);
	float *first[DET_COUNT], *o[DET_COUNT];
	float *x_d = up(x, 3 * n * 4), *dout_d = up(dout, nd * 4), *w_d = up(w, nw * 4);
	float *stat_d = up(stat, BT * 4), *att_d = up(NULL, na * 4), *out_d = up(NULL, n * 4);
	float *pre_d = up(NULL, na * 4);

	cr_assert(zero);
	gpu->attention_forward(st, out_d, pre_d, att_d, x_d, B, T, C, NH);
	for (int run = 0; run < 2; run++) {
		for (int i = 0; i < DET_COUNT; i++)
			o[i] = up(zero, len[i] * 4);
		gpu->layernorm_backward(st, o[DET_LN_DX], o[DET_LN_DW], o[DET_LN_DB], dout_d, x_d,
					w_d, stat_d, stat_d, B, T, C);
		gpu->attention_backward(st, o[DET_AT_DX], o[DET_AT_DPRE], o[DET_AT_DATT], dout_d,
					x_d, att_d, B, T, C, NH);
		gpu->matmul_backward(st, o[DET_MM_DX], o[DET_MM_DW], o[DET_MM_DB], dout_d, x_d, w_d,
				     B, T, C, OC);
		for (int i = 0; i < DET_COUNT; i++) {
			char what[64];

			snprintf(what, sizeof(what), "deterministic buffer %d", i);
			if (run == 0) {
				first[i] = malloc(len[i] * 4);
				cr_assert(first[i]);
				down(first[i], o[i], len[i] * 4, what);
			} else {
				gk_same_bits(what, o[i], first[i], len[i] * 4);
				free(first[i]);
			}
			gt_free(o[i]);
		}
	}
	free(x), free(dout), free(w), free(stat), free(zero);
	gt_free(x_d), gt_free(dout_d), gt_free(w_d), gt_free(stat_d), gt_free(att_d);
	gt_free(out_d), gt_free(pre_d);
	close_gpu(st);
}

/* Logits past 2^31 elements (Llama 3's 128,256 vocab at B x T = 16,744): the GEMMs run in
 * pieces (kernels/gemm_split.h). Integer-valued inputs make the forward exact; rows on both
 * sides of the first piece boundary are checked. Backward with a constant dout: dinp and
 * dweight have closed forms. Needs about 9 GiB of free GPU memory. */
Test(kernels_gpu, matmul_logits_past_2_31_elements)
{
	const int B = 8, T = 2093, C = 32, V = 128256, BT = B * T;
	const size_t nout = (size_t)BT * V;
	struct zn_gemm_shape g = { BT, V, C, C, C, V, false, true };
	int64_t mc, kc;
	const char *err;
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	float *x = malloc((size_t)BT * C * 4), *w = malloc((size_t)V * C * 4);
	float *row = malloc((size_t)V * 4), dval;
	double *ref = malloc((size_t)V * C * 8);
	float *got = malloc((size_t)V * C * 4);
	uint32_t bits = 0x5a5a5a5au; /* gt_upload(NULL) fills with 0x5a bytes */

	cr_assert(x && w && row && ref && got);
	if (gt_free_bytes() < nout * 4 + (1ull << 30))
		cr_skip_test("needs %zu GiB of free GPU memory", (nout * 4 >> 30) + 1);
	cr_assert_gt(nout, (size_t)ZN_GEMM_SPLIT_LIMIT);
	cr_assert_eq(zn_gemm_split_plan(&g, ZN_GEMM_SPLIT_LIMIT, &mc, &kc), 0);
	for (size_t i = 0; i < (size_t)BT * C; i++)
		x[i] = (float)(i % 5); /* non-negative: the backward sums do not cancel */
	for (size_t i = 0; i < (size_t)V * C; i++)
		w[i] = (float)(i % 7);
	float *x_d = up(x, (size_t)BT * C * 4), *w_d = up(w, (size_t)V * C * 4);
	float *out_d = gt_upload(NULL, nout * 4, &err);

	cr_assert(!*err, "cudaMalloc of the %zu-byte logits: %s", nout * 4, err);
	gpu->matmul_forward(st, out_d, x_d, w_d, NULL, B, T, C, V);
	const int rows[] = { 0, (int)mc - 1, (int)mc, (int)mc + 1, BT - 1 };

	for (int r = 0; r < 5; r++) {
		gt_download_part(row, out_d, (size_t)rows[r] * V * 4, (size_t)V * 4, &err);
		cr_assert(!*err, "%s", err);
		for (int v = 0; v < V; v++) {
			double s = 0.0;

			for (int c = 0; c < C; c++)
				s += (double)x[(size_t)rows[r] * C + c] * w[(size_t)v * C + c];
			cr_assert_eq(row[v], (float)s, "logit row %d col %d: got %g want %g (pieces "
				     "of %ld rows)", rows[r], v, row[v], s, (long)mc);
		}
	}
	fprintf(stderr, "gpu-vs-cpu: matmul_forward logits[%d,%d] max_abs_err 0 rtol 0e+00 "
		"x_tol 0\n", BT, V);
	/* backward: out_d becomes dout, all 0x5a5a5a5a */
	gt_free(out_d);
	memcpy(&dval, &bits, 4);
	float *dout_d = gt_upload(NULL, nout * 4, &err);

	cr_assert(!*err, "%s", err);
	memset(got, 0, (size_t)V * C * 4);
	float *dx_d = up(got, (size_t)BT * C * 4); /* got holds V x C >= BT x C zeros */
	float *dw_d = up(got, (size_t)V * C * 4);
	double sx[32], sw[32];

	for (int c = 0; c < C; c++) {
		sx[c] = sw[c] = 0.0;
		for (int t = 0; t < BT; t++)
			sx[c] += x[(size_t)t * C + c];
		for (int v = 0; v < V; v++)
			sw[c] += w[(size_t)v * C + c];
	}

	gpu->matmul_backward(st, dx_d, dw_d, NULL, dout_d, x_d, w_d, B, T, C, V);
	down(got, dw_d, (size_t)V * C * 4, "matmul_backward dweight (logits)");
	for (int v = 0; v < V; v++)
		for (int c = 0; c < C; c++)
			ref[(size_t)v * C + c] = (double)dval * sx[c];
	report("matmul_backward", "dweight (logits)", got, ref, (size_t)V * C, RTOL_RED);
	cr_assert(kc_close("matmul_backward dweight (logits)", got, ref, (size_t)V * C, RTOL_RED));
	down(got, dx_d, (size_t)BT * C * 4, "matmul_backward dinp (logits)");
	for (int t = 0; t < BT; t++)
		for (int c = 0; c < C; c++)
			ref[(size_t)t * C + c] = (double)dval * sw[c];
	report("matmul_backward", "dinp (logits)", got, ref, (size_t)BT * C, RTOL_RED);
	cr_assert(kc_close("matmul_backward dinp (logits)", got, ref, (size_t)BT * C, RTOL_RED));
	gt_free(dout_d), gt_free(dx_d), gt_free(dw_d), gt_free(x_d), gt_free(w_d);
	free(x), free(w), free(row), free(ref), free(got);
	close_gpu(st);
}
