/* bf16 compute ops on the CPU table (docs/kernels.md, "bf16 compute"):
 *
 * - matmul_forward_bf16 / matmul_backward_bf16 against a double loop over the same bf16
 *   inputs (the GEMM's exact products, fp32 accumulation): rtol 1e-5 (kc_close's
 *   normalized error); against the fp32 matmul on the unrounded fp32 inputs: the bf16
 *   tolerance, rtol 1e-2 (each input rounded to 8 significant bits: relative error 2^-9 per
 *   input, about 2^-8 per product; sums of random signs stay below 1e-2 of the largest
 *   magnitude); shapes across the 256-row/column tiles and the 2048-long K chunks;
 *   accumulate semantics (dinp, dweight, dbias prefilled); bias NULL.
 * - bit-identical results with 1 and 3 OpenMP threads, and on a rerun.
 * - encoder_forward_bf16 / embedding_forward_bf16 bit-exact against casting the tables to
 *   fp32 and running the fp32 ops.
 * - the chunked lm_head + cross-entropy in bf16 against the fp32 one on the bf16-rounded
 *   inputs (rtol 1e-5: dlogits are rounded to bf16 for the backward GEMMs, hence 1e-2 for
 *   dx, dwte) and chunk sizes 1, 7, all rows giving the same losses.
 */
#include <criterion/criterion.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cpu/ops.h"
#include "kernels.h"
#include "kernels_check.h"
#include "lmhead_ce.h"

static uint16_t *to_bf16(const float *x, size_t n)
{
	uint16_t *h = malloc(n * 2);

	zn_cast_f32_to_bf16(h, x, n);
	return h;
}

static float *from_bf16(const uint16_t *h, size_t n)
{
	float *x = malloc(n * 4);

	zn_cast_bf16_to_f32(x, h, n);
	return x;
}

static float *rnd(struct kc_rng *r, size_t n, float a)
{
	float *x = malloc(n * 4);

	kc_fill(r, x, n, -a, a);
	return x;
}

struct mm {
	int BT, C, OC;
	float *inp, *w, *bias, *dout;        /* fp32 originals */
	uint16_t *inp16, *w16, *dout16;      /* rounded */
	float *inr, *wr, *doutr;             /* rounded, as fp32 */
};

static void mm_make(struct mm *m, int BT, int C, int OC, uint64_t seed)
{
	struct kc_rng r = { seed };

	m->BT = BT, m->C = C, m->OC = OC;
	m->inp = rnd(&r, (size_t)BT * C, 1.0f);
	m->w = rnd(&r, (size_t)OC * C, 0.5f);
	m->bias = rnd(&r, OC, 0.5f);
	m->dout = rnd(&r, (size_t)BT * OC, 1.0f);
	m->inp16 = to_bf16(m->inp, (size_t)BT * C);
	m->w16 = to_bf16(m->w, (size_t)OC * C);
	m->dout16 = to_bf16(m->dout, (size_t)BT * OC);
	m->inr = from_bf16(m->inp16, (size_t)BT * C);
	m->wr = from_bf16(m->w16, (size_t)OC * C);
	m->doutr = from_bf16(m->dout16, (size_t)BT * OC);
}

static void mm_free(struct mm *m)
{
	free(m->inp), free(m->w), free(m->bias), free(m->dout);
	free(m->inp16), free(m->w16), free(m->dout16);
	free(m->inr), free(m->wr), free(m->doutr);
}

/* double references; pre is what the accumulated outputs held before */
static void ref_forward(double *out, const float *in, const float *w, const float *bias,
			int BT, int C, int OC)
{
	for (int i = 0; i < BT; i++)
		for (int o = 0; o < OC; o++) {
			double s = bias ? bias[o] : 0.0;

			for (int c = 0; c < C; c++)
				s += (double)in[(size_t)i * C + c] * w[(size_t)o * C + c];
			out[(size_t)i * OC + o] = s;
		}
}

static void ref_backward(double *dinp, double *dw, double *db, const float *dout16,
			 const float *dout, const float *in, const float *w, int BT, int C,
			 int OC, double pre)
{
	for (size_t i = 0; i < (size_t)BT * C; i++)
		dinp[i] = pre;
	for (size_t i = 0; i < (size_t)OC * C; i++)
		dw[i] = pre;
	for (int o = 0; o < OC; o++)
		db[o] = pre;
	for (int i = 0; i < BT; i++)
		for (int o = 0; o < OC; o++) {
			double d = dout16[(size_t)i * OC + o];

			db[o] += dout[(size_t)i * OC + o];
			for (int c = 0; c < C; c++) {
				dinp[(size_t)i * C + c] += d * w[(size_t)o * C + c];
				dw[(size_t)o * C + c] += d * in[(size_t)i * C + c];
			}
		}
}

static float *filled(size_t n, float v)
{
	float *x = malloc(n * 4);

	for (size_t i = 0; i < n; i++)
		x[i] = v;
	return x;
}

static void check_shape(int BT, int C, int OC, bool bias)
{
	struct mm m;
	size_t no = (size_t)BT * OC, ni = (size_t)BT * C, nw = (size_t)OC * C;
	double *ref = malloc(no * 8), *rdi = malloc(ni * 8), *rdw = malloc(nw * 8),
	       *rdb = malloc(OC * 8);
	float *out = malloc(no * 4), *out32 = malloc(no * 4);
	float *di = filled(ni, 0.25f), *dw = filled(nw, 0.25f), *db = filled(OC, 0.25f);
	char what[96];

	mm_make(&m, BT, C, OC, 1000 + BT + C + OC);
	const float *b = bias ? m.bias : NULL;

	zn_kernels_cpu.matmul_forward_bf16(NULL, out, m.inp16, m.w16, b, 1, BT, C, OC);
	ref_forward(ref, m.inr, m.wr, b, BT, C, OC);
	snprintf(what, sizeof(what), "fwd %dx%dx%d vs bf16-input ref", BT, C, OC);
	cr_assert(kc_close(what, out, ref, no, 1e-5));
	/* against the fp32 computation on the unrounded inputs: the bf16 tolerance */
	zn_kernels_cpu.matmul_forward(NULL, out32, m.inp, m.w, b, 1, BT, C, OC);
	for (size_t i = 0; i < no; i++)
		ref[i] = out32[i];
	snprintf(what, sizeof(what), "fwd %dx%dx%d vs fp32", BT, C, OC);
	cr_assert(kc_close(what, out, ref, no, 1e-2));

	zn_kernels_cpu.matmul_backward_bf16(NULL, di, dw, bias ? db : NULL, m.dout16,
					    bias ? m.dout : NULL, m.inp16, m.w16, 1, BT, C, OC);
	ref_backward(rdi, rdw, rdb, m.doutr, m.dout, m.inr, m.wr, BT, C, OC, 0.25);
	snprintf(what, sizeof(what), "dinp %dx%dx%d", BT, C, OC);
	cr_assert(kc_close(what, di, rdi, ni, 1e-5));
	snprintf(what, sizeof(what), "dweight %dx%dx%d", BT, C, OC);
	cr_assert(kc_close(what, dw, rdw, nw, 1e-5));
	if (bias) {
		snprintf(what, sizeof(what), "dbias %dx%dx%d", BT, C, OC);
		cr_assert(kc_close(what, db, rdb, OC, 1e-5));
	} else {
		for (int o = 0; o < OC; o++)
			cr_assert_eq(db[o], 0.25f);
	}
	mm_free(&m);
	free(ref), free(rdi), free(rdw), free(rdb), free(out), free(out32);
	free(di), free(dw), free(db);
}

Test(kernels_bf16, matmul_against_references)
{
	check_shape(5, 8, 12, true);
	check_shape(300, 40, 270, true);   /* two row and two column tiles */
	check_shape(7, 33, 5, false);
	check_shape(3, 2100, 9, true);     /* K over one 2048 chunk (forward, dinp) */
	check_shape(2100, 6, 4, true);     /* dweight's K = BT over one chunk */
}

/* 1 and 3 threads, and a rerun, give the same bits */
Test(kernels_bf16, matmul_bit_identical_across_threads)
{
	const int BT = 520, C = 70, OC = 300;
	struct mm m;
	float *o[3], *di[3], *dw[3], *db[3];
	const int threads[3] = { 1, 3, 3 };

	mm_make(&m, BT, C, OC, 77);
	for (int k = 0; k < 3; k++) {
		omp_set_num_threads(threads[k]);
		o[k] = malloc((size_t)BT * OC * 4);
		di[k] = filled((size_t)BT * C, 0.0f);
		dw[k] = filled((size_t)OC * C, 0.0f);
		db[k] = filled(OC, 0.0f);
		zn_kernels_cpu.matmul_forward_bf16(NULL, o[k], m.inp16, m.w16, m.bias, 2, BT / 2,
						   C, OC);
		zn_kernels_cpu.matmul_backward_bf16(NULL, di[k], dw[k], db[k], m.dout16, m.dout,
						    m.inp16, m.w16, 2, BT / 2, C, OC);
	}
	for (int k = 1; k < 3; k++) {
		cr_assert_eq(memcmp(o[0], o[k], (size_t)BT * OC * 4), 0);
		cr_assert_eq(memcmp(di[0], di[k], (size_t)BT * C * 4), 0);
		cr_assert_eq(memcmp(dw[0], dw[k], (size_t)OC * C * 4), 0);
		cr_assert_eq(memcmp(db[0], db[k], (size_t)OC * 4), 0);
	}
	for (int k = 0; k < 3; k++)
		free(o[k]), free(di[k]), free(dw[k]), free(db[k]);
	mm_free(&m);
}

Test(kernels_bf16, encoder_and_embedding_exact)
{
	const int B = 2, T = 5, C = 12, V = 17;
	struct kc_rng r = { 5 };
	float *wte = rnd(&r, (size_t)V * C, 1.0f), *wpe = rnd(&r, (size_t)T * C, 1.0f);
	uint16_t *wte16 = to_bf16(wte, (size_t)V * C), *wpe16 = to_bf16(wpe, (size_t)T * C);
	float *wter = from_bf16(wte16, (size_t)V * C), *wper = from_bf16(wpe16, (size_t)T * C);
	float a[B * T * C], b[B * T * C];
	int tok[B * T];

	kc_fill_int(&r, tok, B * T, V);
	zn_kernels_cpu.encoder_forward_bf16(NULL, a, tok, wte16, wpe16, B, T, C);
	zn_kernels_cpu.encoder_forward(NULL, b, tok, wter, wper, B, T, C);
	cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
	zn_kernels_cpu.embedding_forward_bf16(NULL, a, tok, wte16, B, T, C);
	zn_kernels_cpu.embedding_forward(NULL, b, tok, wter, B, T, C);
	cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
	free(wte), free(wpe), free(wte16), free(wpe16), free(wter), free(wper);
}

Test(kernels_bf16, lmhead_ce_against_fp32)
{
	const int BT = 23, C = 16, V = 50, Vp = 64;
	const int chunks[3] = { 1, 7, BT };
	struct kc_rng r = { 9 };
	float *x = rnd(&r, (size_t)BT * C, 1.0f), *wte = rnd(&r, (size_t)Vp * C, 0.5f);
	uint16_t *x16, *w16;
	float *xr, *wr, *work = malloc(zn_lmhead_ce_work_count(BT, Vp) * 4);
	float loss32[BT], loss[BT], first[BT];
	double ref[BT * C > Vp * C ? BT * C : Vp * C];
	int tg[BT];

	memset(wte + (size_t)V * C, 0, (size_t)(Vp - V) * C * 4);
	x16 = to_bf16(x, (size_t)BT * C), w16 = to_bf16(wte, (size_t)Vp * C);
	xr = from_bf16(x16, (size_t)BT * C), wr = from_bf16(w16, (size_t)Vp * C);
	kc_fill_int(&r, tg, BT, V);
	cr_assert_eq(zn_lmhead_ce_forward(&zn_kernels_cpu, NULL, loss32, work, xr, wr, tg, BT, C,
					  V, Vp, BT), 0);
	for (int k = 0; k < 3; k++) {
		float *dx = filled((size_t)BT * C, 0.0f), *dw = filled((size_t)Vp * C, 0.0f);
		float *dx32 = filled((size_t)BT * C, 0.0f), *dw32 = filled((size_t)Vp * C, 0.0f);

		cr_assert_eq(zn_lmhead_ce_forward_bf16(&zn_kernels_cpu, NULL, loss, work, x16,
						       w16, tg, BT, C, V, Vp, chunks[k]), 0);
		for (int i = 0; i < BT; i++)
			ref[i] = loss32[i];
		cr_assert(kc_close("bf16 losses", loss, ref, BT, 1e-5));
		if (k == 0)
			memcpy(first, loss, sizeof(loss));
		else
			cr_assert_eq(memcmp(first, loss, sizeof(loss)), 0, "chunk %d", chunks[k]);
		cr_assert_eq(zn_lmhead_ce_backward_bf16(&zn_kernels_cpu, NULL, dx, dw, work, x16,
							w16, tg, 0.1f, BT, C, V, Vp, chunks[k]),
			     0);
		cr_assert_eq(zn_lmhead_ce_backward(&zn_kernels_cpu, NULL, dx32, dw32, work, xr, wr,
						   tg, 0.1f, BT, C, V, Vp, chunks[k]), 0);
		for (int i = 0; i < BT * C; i++)
			ref[i] = dx32[i];
		cr_assert(kc_close("bf16 dx", dx, ref, (size_t)BT * C, 1e-2));
		for (int i = 0; i < Vp * C; i++)
			ref[i] = dw32[i];
		cr_assert(kc_close("bf16 dwte", dw, ref, (size_t)Vp * C, 1e-2));
		free(dx), free(dw), free(dx32), free(dw32);
	}
	free(x), free(wte), free(x16), free(w16), free(xr), free(wr), free(work);
}
