/* SwiGLU, forward and backward (CPU reference): inp [BT, 2I] is gate then up per row,
 * out [BT, IC] = silu(gate) * up, silu(g) = g / (1 + exp(-g)) as torch computes it.
 * With s = sigmoid(g): d silu / dg = s * (1 + g * (1 - s)).
 */
#include "ops.h"

#include <math.h>

#include "par.h"

void zn_cpu_swiglu_forward(float *out, const float *inp, int B, int T, int IC)
{
	long BT = (long)B * T;

#pragma omp parallel for schedule(static) if (BT * IC > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const float *g = inp + bt * 2 * IC, *u = g + IC;
		float *o = out + bt * IC;

		for (int i = 0; i < IC; i++)
			o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
	}
}

void zn_cpu_swiglu_backward(float *dinp, const float *dout, const float *inp, int B, int T,
			    int IC)
{
	long BT = (long)B * T;

#pragma omp parallel for schedule(static) if (BT * IC > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const float *g = inp + bt * 2 * IC, *u = g + IC, *d = dout + bt * IC;
		float *dg = dinp + bt * 2 * IC, *du = dg + IC;

		for (int i = 0; i < IC; i++) {
			float e = 1.0f + expf(-g[i]);
			float s = 1.0f / e, silu = g[i] / e;

			dg[i] += d[i] * u[i] * (s * (1.0f + g[i] * (1.0f - s)));
			du[i] += d[i] * silu;
		}
	}
}
