/* RMSNorm over the channel dimension, forward and backward (CPU reference).
 *
 * As Hugging Face's LlamaRMSNorm in fp32: rstd = 1 / sqrt(mean(x^2) + eps),
 * out = (x * rstd) * weight. With n = x * rstd and g = weight * dout, the input gradient
 * is dinp = rstd * (g - n * mean(g * n)); dweight = sum over positions of n * dout.
 */
#include "ops.h"

#include <math.h>

#include "par.h"

void zn_cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
			    float eps, int B, int T, int C)
{
	long BT = (long)B * T;

#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const float *x = inp + bt * C;
		float *o = out + bt * C;
		float ss = 0.0f;

		for (int i = 0; i < C; i++)
			ss += x[i] * x[i];
		float s = 1.0f / sqrtf(ss / C + eps);

		for (int i = 0; i < C; i++)
			o[i] = (x[i] * s) * weight[i];
		rstd[bt] = s;
	}
}

static void rmsnorm_backward_inp(float *dinp, const float *dout, const float *inp,
				 const float *weight, const float *rstd, long BT, int C)
{
#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const float *d = dout + bt * C;
		const float *x = inp + bt * C;
		float *di = dinp + bt * C;
		float s = rstd[bt], gn = 0.0f;

		for (int i = 0; i < C; i++)
			gn += weight[i] * d[i] * (x[i] * s);
		gn /= C;
		for (int i = 0; i < C; i++)
			di[i] += s * (weight[i] * d[i] - (x[i] * s) * gn);
	}
}

/* threads split the channels; each channel sums the positions in order */
static void rmsnorm_backward_weight(float *dweight, const float *dout, const float *inp,
				    const float *rstd, long BT, int C)
{
	int nchunk = (C + ZN_CPU_CHUNK - 1) / ZN_CPU_CHUNK;

#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (int k = 0; k < nchunk; k++) {
		int c0 = k * ZN_CPU_CHUNK;
		int n = c0 + ZN_CPU_CHUNK < C ? ZN_CPU_CHUNK : C - c0;
		float dw[ZN_CPU_CHUNK] = { 0 };

		for (long bt = 0; bt < BT; bt++) {
			const float *d = dout + bt * C + c0;
			const float *x = inp + bt * C + c0;
			float s = rstd[bt];

			for (int i = 0; i < n; i++)
				dw[i] += (x[i] * s) * d[i];
		}
		for (int i = 0; i < n; i++)
			dweight[c0 + i] += dw[i];
	}
}

void zn_cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
			     const float *weight, const float *rstd, int B, int T, int C)
{
	long BT = (long)B * T;

	rmsnorm_backward_inp(dinp, dout, inp, weight, rstd, BT, C);
	if (dweight) /* NULL: a frozen weight, skipped */
		rmsnorm_backward_weight(dweight, dout, inp, rstd, BT, C);
}
