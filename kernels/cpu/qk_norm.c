/* Qwen3's q_norm / k_norm (CPU reference): RMSNorm over each head's head_dim values of the
 * query and key heads of qkv, one weight [hd] shared by the query heads and one by the key
 * heads, with kernels/cpu/rmsnorm.c's arithmetic per row (a row: one token's one head).
 * The value heads are copied forward and left alone backward. */
#include "ops.h"

#include <math.h>
#include <string.h>

#include "par.h"

/* the row's first channel in qkv [BT, S]: query heads 0 .. NH-1, then key heads */
static long row_at(long r, int NH, int KV, int hd)
{
	int heads = NH + KV;
	long token = r / heads;
	int h = (int)(r % heads);

	return token * (long)(NH + 2 * KV) * hd + (long)h * hd;
}

void zn_cpu_qk_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *wq,
			       const float *wk, float eps, int B, int T, int NH, int KV, int hd)
{
	long BT = (long)B * T, rows = BT * (NH + KV), S = (long)(NH + 2 * KV) * hd;

#pragma omp parallel for schedule(static) if (rows * hd > ZN_CPU_PAR_MIN)
	for (long r = 0; r < rows; r++) {
		long at = row_at(r, NH, KV, hd);
		const float *x = inp + at, *w = (r % (NH + KV)) < NH ? wq : wk;
		float *o = out + at;
		float ss = 0.0f;

		for (int i = 0; i < hd; i++)
			ss += x[i] * x[i];
		float s = 1.0f / sqrtf(ss / hd + eps);

		for (int i = 0; i < hd; i++)
			o[i] = (x[i] * s) * w[i];
		rstd[r] = s;
	}
	for (long t = 0; out != inp && t < BT; t++) /* v: copied */
		memcpy(out + t * S + (long)(NH + KV) * hd, inp + t * S + (long)(NH + KV) * hd,
		       (size_t)KV * (size_t)hd * sizeof(float));
}

/* dw[i] += sum over the rows of one kind (q: heads 0..NH-1, k: NH..NH+KV-1), in row order */
static void weight_grad(float *dw, const float *dqkv, const float *inp, const float *rstd,
			long BT, int NH, int KV, int hd, int h0, int nh)
{
	int nchunk = (hd + ZN_CPU_CHUNK - 1) / ZN_CPU_CHUNK;

#pragma omp parallel for schedule(static) if (BT * nh * hd > ZN_CPU_PAR_MIN)
	for (int k = 0; k < nchunk; k++) {
		int c0 = k * ZN_CPU_CHUNK;
		int n = c0 + ZN_CPU_CHUNK < hd ? ZN_CPU_CHUNK : hd - c0;
		float acc[ZN_CPU_CHUNK] = { 0 };

		for (long t = 0; t < BT; t++)
			for (int h = h0; h < h0 + nh; h++) {
				long r = t * (NH + KV) + h, at = row_at(r, NH, KV, hd) + c0;
				float s = rstd[r];

				for (int i = 0; i < n; i++)
					acc[i] += (inp[at + i] * s) * dqkv[at + i];
			}
		for (int i = 0; i < n; i++)
			dw[c0 + i] += acc[i];
	}
}

void zn_cpu_qk_rmsnorm_backward(float *dqkv, float *dwq, float *dwk, const float *inp,
				const float *wq, const float *wk, const float *rstd, int B,
				int T, int NH, int KV, int hd)
{
	long BT = (long)B * T, rows = BT * (NH + KV);

	/* the weights' gradients first: they read dqkv before it is overwritten */
	if (dwq)
		weight_grad(dwq, dqkv, inp, rstd, BT, NH, KV, hd, 0, NH);
	if (dwk)
		weight_grad(dwk, dqkv, inp, rstd, BT, NH, KV, hd, NH, KV);
#pragma omp parallel for schedule(static) if (rows * hd > ZN_CPU_PAR_MIN)
	for (long r = 0; r < rows; r++) {
		long at = row_at(r, NH, KV, hd);
		const float *x = inp + at, *w = (r % (NH + KV)) < NH ? wq : wk;
		float *d = dqkv + at;
		float s = rstd[r], gn = 0.0f;

		for (int i = 0; i < hd; i++)
			gn += w[i] * d[i] * (x[i] * s);
		gn /= hd;
		for (int i = 0; i < hd; i++)
			d[i] = s * (w[i] * d[i] - (x[i] * s) * gn);
	}
}
