/* Elementwise ops: GELU (tanh form), residual add, scale (CPU reference). */
#include "ops.h"

#include <math.h>

#include "par.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_CUBE 0.044715f

void zn_cpu_gelu_forward(float *out, const float *inp, size_t N)
{
#pragma omp parallel for simd schedule(static) if (N > (size_t)ZN_CPU_PAR_MIN)
	for (size_t i = 0; i < N; i++) {
		float x = inp[i];
		float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);

		out[i] = 0.5f * x * (1.0f + tanhf(u));
	}
}

/* d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx */
void zn_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N)
{
#pragma omp parallel for simd schedule(static) if (N > (size_t)ZN_CPU_PAR_MIN)
	for (size_t i = 0; i < N; i++) {
		float x = inp[i];
		float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
		float th = tanhf(u);
		float sech2 = 1.0f - th * th;
		float g = 0.5f * (1.0f + th) +
			  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);

		dinp[i] += g * dout[i];
	}
}

void zn_cpu_residual_forward(float *out, const float *inp1, const float *inp2, size_t N)
{
#pragma omp parallel for simd schedule(static) if (N > (size_t)ZN_CPU_PAR_MIN)
	for (size_t i = 0; i < N; i++)
		out[i] = inp1[i] + inp2[i];
}

void zn_cpu_residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N)
{
#pragma omp parallel for simd schedule(static) if (N > (size_t)ZN_CPU_PAR_MIN)
	for (size_t i = 0; i < N; i++) {
		dinp1[i] += dout[i];
		dinp2[i] += dout[i];
	}
}

void zn_cpu_scale(float *out, float s, size_t N)
{
#pragma omp parallel for simd schedule(static) if (N > (size_t)ZN_CPU_PAR_MIN)
	for (size_t i = 0; i < N; i++)
		out[i] *= s;
}
