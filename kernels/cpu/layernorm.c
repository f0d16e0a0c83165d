/* LayerNorm over the channel dimension, forward and backward (CPU reference).
 *
 * Statistics are computed in fp32 as llm.c does: mean, then the biased variance about it
 * (two passes, no E[x^2] - E[x]^2 cancellation); rstd = 1 / sqrt(var + eps).
 */
#include "ops.h"

#include <math.h>

#include "par.h"

void zn_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
			      const float *weight, const float *bias, int B, int T, int C)
{
	long BT = (long)B * T;

#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const float *x = inp + bt * C;
		float *o = out + bt * C;
		float m = 0.0f, v = 0.0f;

		for (int i = 0; i < C; i++)
			m += x[i];
		m /= C;
		for (int i = 0; i < C; i++) {
			float d = x[i] - m;

			v += d * d;
		}
		v /= C;
		float s = 1.0f / sqrtf(v + ZN_LAYERNORM_EPS);

		for (int i = 0; i < C; i++)
			o[i] = (x[i] - m) * s * weight[i] + bias[i];
		mean[bt] = m;
		rstd[bt] = s;
	}
}

/* dinp, one row per position (rows are independent). */
static void layernorm_backward_inp(float *dinp, const float *dout, const float *inp,
				   const float *weight, const float *mean, const float *rstd,
				   long BT, int C)
{
#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const float *d = dout + bt * C;
		const float *x = inp + bt * C;
		float *di = dinp + bt * C;
		float m = mean[bt], s = rstd[bt];
		float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;

		for (int i = 0; i < C; i++) {
			float dnorm = weight[i] * d[i];

			dnorm_mean += dnorm;
			dnorm_norm_mean += dnorm * (x[i] - m) * s;
		}
		dnorm_mean /= C;
		dnorm_norm_mean /= C;
		for (int i = 0; i < C; i++) {
			float norm = (x[i] - m) * s;
			float dnorm = weight[i] * d[i];

			di[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
		}
	}
}

/* dweight, dbias: threads split the channels; each channel sums the positions in order, so
 * the result does not depend on the thread count. */
static void layernorm_backward_weight(float *dweight, float *dbias, const float *dout,
				      const float *inp, const float *mean, const float *rstd,
				      long BT, int C)
{
	int nchunk = (C + ZN_CPU_CHUNK - 1) / ZN_CPU_CHUNK;

#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (int k = 0; k < nchunk; k++) {
		int c0 = k * ZN_CPU_CHUNK;
		int n = c0 + ZN_CPU_CHUNK < C ? ZN_CPU_CHUNK : C - c0;
		float dw[ZN_CPU_CHUNK] = { 0 }, db[ZN_CPU_CHUNK] = { 0 };

		for (long bt = 0; bt < BT; bt++) {
			const float *d = dout + bt * C + c0;
			const float *x = inp + bt * C + c0;
			float m = mean[bt], s = rstd[bt];

			for (int i = 0; i < n; i++) {
				dw[i] += (x[i] - m) * s * d[i];
				db[i] += d[i];
			}
		}
		for (int i = 0; i < n; i++) {
			dweight[c0 + i] += dw[i];
			dbias[c0 + i] += db[i];
		}
	}
}

void zn_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
			       const float *inp, const float *weight, const float *mean,
			       const float *rstd, int B, int T, int C)
{
	long BT = (long)B * T;

	layernorm_backward_inp(dinp, dout, inp, weight, mean, rstd, BT, C);
	if (dweight && dbias) /* NULL: frozen weights, skipped */
		layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, BT, C);
}
