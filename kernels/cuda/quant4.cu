/* A 4-bit frozen base dequantized on the device (kernels.h dequant_4bit, dequant_absmax8;
 * docs/qlora.md): bitsandbytes' dequantize_4bit and its nested absmax, the same tables and
 * roundings as kernels/cpu/quant4.c (fp32 product, then the quant dtype's RNE rounding). */
#include "common.cuh"

#include <cuda_fp16.h>

extern "C" {
#include "ops.h"
}

/* NF4 and FP4 (bit-pattern order, / 12) as src/model/quant/nf4.c's tables */
__constant__ float zn_q4_nf4[16] = {
	-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
	-0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
	0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
	0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
	0.7229568362236023f, 1.0f,
};
__constant__ float zn_q4_fp4[16] = {
	0.0f / 12.0f, 0.0625f / 12.0f, 8.0f / 12.0f, 12.0f / 12.0f,
	4.0f / 12.0f, 6.0f / 12.0f, 2.0f / 12.0f, 3.0f / 12.0f,
	-0.0f / 12.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -12.0f / 12.0f,
	-4.0f / 12.0f, -6.0f / 12.0f, -2.0f / 12.0f, -3.0f / 12.0f,
};

static __global__ void dequant_4bit_kernel(float *out32, uint16_t *out16,
					   const uint8_t *packed, const float *absmax, size_t n,
					   int blocksize, int type, int qdtype)
{
	const float *code = type == 1 ? zn_q4_fp4 : zn_q4_nf4;

	for (size_t i = first_index(); i < n; i += grid_step()) {
		uint8_t b = packed[i / 2];
		/* __fmul_rn: the fp32 product, never contracted into anything */
		float v = __fmul_rn(code[(i & 1) ? (b & 15) : (b >> 4)], absmax[i / blocksize]);

		if (qdtype == 1)
			v = __uint_as_float((unsigned)zn_bf16_rne(v) << 16);
		else if (qdtype == 2)
			v = __half2float(__float2half_rn(v));
		if (out16)
			out16[i] = zn_bf16_rne(v);
		else
			out32[i] = v;
	}
}

static __global__ void dequant_absmax8_kernel(float *absmax, const uint8_t *q, const float *map,
					      const float *absmax2, const float *offset, size_t n,
					      int blocksize2)
{
	for (size_t i = first_index(); i < n; i += grid_step())
		absmax[i] = __fadd_rn(__fmul_rn(map[q[i]], absmax2[i / blocksize2]), *offset);
}

extern "C" void zn_cuda_dequant_4bit(void *stream, float *out32, uint16_t *out16,
				     const uint8_t *packed, const float *absmax, size_t N,
				     int blocksize, int type, int qdtype)
{
	dequant_4bit_kernel<<<zn_cuda_blocks(N, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0,
			      (cudaStream_t)stream>>>(out32, out16, packed, absmax, N, blocksize,
						      type, qdtype);
	zn_cuda_note_launch("dequant_4bit", __FILE__, __LINE__);
}

extern "C" void zn_cuda_dequant_absmax8(void *stream, float *absmax, const uint8_t *q,
					const float *map, const float *absmax2, const float *offset,
					size_t N, int blocksize2)
{
	dequant_absmax8_kernel<<<zn_cuda_blocks(N, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0,
				 (cudaStream_t)stream>>>(absmax, q, map, absmax2, offset, N,
							 blocksize2);
	zn_cuda_note_launch("dequant_absmax8", __FILE__, __LINE__);
}
