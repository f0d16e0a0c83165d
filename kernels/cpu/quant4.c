/* A 4-bit frozen base dequantized into its working copy (kernels.h dequant_4bit,
 * dequant_absmax8): bitsandbytes' dequantize_4bit and nested absmax, as the host
 * reference src/model/quant/nf4.c computes them (the same tables and roundings). */
#include "ops.h"
#include "par.h"

#include "core/dtype.h"
#include "model/quant/nf4.h"

void zn_cpu_dequant_4bit(float *out32, uint16_t *out16, const uint8_t *packed,
			 const float *absmax, size_t N, int blocksize, int type, int qdtype)
{
	const float *code = zn_q4_code(type == 1 ? ZN_Q4_FP4 : ZN_Q4_NF4);
	long n = (long)N;

#pragma omp parallel for schedule(static) if (N > (size_t)ZN_CPU_PAR_MIN)
	for (long i = 0; i < n; i++) {
		uint8_t b = packed[i / 2];
		float v = code[(i & 1) ? (b & 15) : (b >> 4)] * absmax[i / blocksize];

		if (qdtype == ZN_DTYPE_BF16)
			v = zn_bf16_to_f32(zn_f32_to_bf16(v));
		else if (qdtype == ZN_DTYPE_F16)
			v = zn_f16_to_f32(zn_f32_to_f16(v));
		if (out16)
			out16[i] = zn_f32_to_bf16(v);
		else
			out32[i] = v;
	}
}

void zn_cpu_dequant_absmax8(float *absmax, const uint8_t *q, const float *map,
			    const float *absmax2, const float *offset, size_t N, int blocksize2)
{
	for (size_t i = 0; i < N; i++) {
		/* volatile: rounded before the add, as bitsandbytes' two ops (no fma) */
		volatile float v = map[q[i]] * absmax2[i / (size_t)blocksize2];

		absmax[i] = v + *offset;
	}
}
