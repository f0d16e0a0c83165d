/* LoRA's ops on the CPU (kernels.h: cols_add, cols_take, dropout, lora_up). */
#include "core/dtype.h"
#include "dropout.h"
#include "ops.h"
#include "par.h"

void zn_cpu_cols_add(float *out, const float *inp, float s, int64_t R, int ld, int c0, int n)
{
#pragma omp parallel for schedule(static) if (R * n > ZN_CPU_PAR_MIN)
	for (int64_t r = 0; r < R; r++)
		for (int j = 0; j < n; j++)
			out[r * ld + c0 + j] += s * inp[r * n + j];
}

void zn_cpu_cols_take(float *out, const float *inp, float s, int64_t R, int ld, int c0, int n)
{
#pragma omp parallel for schedule(static) if (R * n > ZN_CPU_PAR_MIN)
	for (int64_t r = 0; r < R; r++)
		for (int j = 0; j < n; j++)
			out[r * n + j] = s * inp[r * ld + c0 + j];
}

void zn_cpu_cols_take_bf16(float *out, const uint16_t *inp, float s, int64_t R, int ld, int c0,
			   int n)
{
#pragma omp parallel for schedule(static) if (R * n > ZN_CPU_PAR_MIN)
	for (int64_t r = 0; r < R; r++)
		for (int j = 0; j < n; j++)
			out[r * n + j] = s * zn_bf16_to_f32(inp[r * ld + c0 + j]);
}

void zn_cpu_dropout(float *out, const float *inp, float p, uint64_t seed, size_t N)
{
	float s = 1.0f / (1.0f - p);

#pragma omp parallel for schedule(static) if ((long)N > ZN_CPU_PAR_MIN)
	for (long i = 0; i < (long)N; i++)
		out[i] = zn_dropout_keep(seed, (uint64_t)i, p) ? inp[i] * s : 0.0f;
}

void zn_cpu_lora_up(float *out, const float *t, const float *w, float s, int64_t R, int k,
		    int ld, int c0, int n)
{
#pragma omp parallel for schedule(static) if (R * n * k > ZN_CPU_PAR_MIN)
	for (int64_t r = 0; r < R; r++) {
		const float *tr = t + r * k;
		float *o = out + r * ld + c0;

		for (int j = 0; j < n; j++) {
			const float *wj = w + (int64_t)j * k;
			float acc = 0.0f;

			for (int q = 0; q < k; q++)
				acc += tr[q] * wj[q];
			o[j] += s * acc;
		}
	}
}
