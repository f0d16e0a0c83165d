/* Elementwise ops on CUDA: GELU (tanh form), residual, scale, fp32 <-> bf16 and fp16 casts
 * (fp16: cuda_fp16's round-to-nearest-even conversions, as src/core/dtype.c's).
 * All grid-stride over size_t N. The bf16 rounding is src/core/dtype.c's bit arithmetic,
 * so the device and host casts agree bit for bit (NaN -> quiet NaN with its sign). */
#include "common.cuh"

#include <cuda_fp16.h>

extern "C" {
#include "ops.h"
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_CUBE 0.044715f

/* OutT float: the op; uint16_t: gelu_forward_bf16out (the same value, rounded) */
template <typename OutT>
static __global__ void gelu_forward_kernel(OutT *out, const float *inp, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step()) {
		float x = inp[i];
		float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);

		zn_put(out + i, 0.5f * x * (1.0f + tanhf(u)));
	}
}

static __global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step()) {
		float x = inp[i];
		float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
		float th = tanhf(u);
		float sech2 = 1.0f - th * th;
		float g = 0.5f * (1.0f + th) +
			  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);

		dinp[i] += g * dout[i];
	}
}

static __global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step())
		out[i] = a[i] + b[i];
}

static __global__ void residual_backward_kernel(float *da, float *db, const float *dout, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step()) {
		da[i] += dout[i];
		db[i] += dout[i];
	}
}

static __global__ void scale_kernel(float *out, float s, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step())
		out[i] *= s;
}

static __global__ void f32_to_bf16_kernel(uint16_t *out, const float *inp, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step())
		out[i] = zn_bf16_rne(inp[i]);
}

static __global__ void bf16_to_f32_kernel(float *out, const uint16_t *inp, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step())
		out[i] = __uint_as_float((unsigned)inp[i] << 16);
}

static unsigned blocks(size_t n)
{
	return zn_cuda_blocks(n, ZN_CUDA_THREADS);
}

extern "C" void zn_cuda_gelu_forward(void *stream, float *out, const float *inp, size_t N)
{
	gelu_forward_kernel<float><<<blocks(N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		out, inp, N);
	zn_cuda_note_launch("gelu_forward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_gelu_forward_bf16out(void *stream, uint16_t *out16, const float *inp,
					     size_t N)
{
	gelu_forward_kernel<uint16_t><<<blocks(N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		out16, inp, N);
	zn_cuda_note_launch("gelu_forward_bf16out", __FILE__, __LINE__);
}

extern "C" void zn_cuda_gelu_backward(void *stream, float *dinp, const float *inp,
				      const float *dout, size_t N)
{
	gelu_backward_kernel<<<blocks(N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(dinp, inp,
										     dout, N);
	zn_cuda_note_launch("gelu_backward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_residual_forward(void *stream, float *out, const float *inp1,
					 const float *inp2, size_t N)
{
	residual_forward_kernel<<<blocks(N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		out, inp1, inp2, N);
	zn_cuda_note_launch("residual_forward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_residual_backward(void *stream, float *dinp1, float *dinp2,
					  const float *dout, size_t N)
{
	residual_backward_kernel<<<blocks(N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		dinp1, dinp2, dout, N);
	zn_cuda_note_launch("residual_backward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_scale(void *stream, float *out, float s, size_t N)
{
	scale_kernel<<<blocks(N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(out, s, N);
	zn_cuda_note_launch("scale", __FILE__, __LINE__);
}

extern "C" void zn_cuda_cast_f32_to_bf16(void *stream, uint16_t *out, const float *inp,
					 size_t N)
{
	f32_to_bf16_kernel<<<blocks(N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(out, inp, N);
	zn_cuda_note_launch("cast_f32_to_bf16", __FILE__, __LINE__);
}

extern "C" void zn_cuda_cast_bf16_to_f32(void *stream, float *out, const uint16_t *inp,
					 size_t N)
{
	bf16_to_f32_kernel<<<blocks(N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(out, inp, N);
	zn_cuda_note_launch("cast_bf16_to_f32", __FILE__, __LINE__);
}

static __global__ void f32_to_f16_kernel(uint16_t *out, const float *inp, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step())
		out[i] = __half_as_ushort(__float2half_rn(inp[i]));
}

static __global__ void f16_to_f32_kernel(float *out, const uint16_t *inp, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step())
		out[i] = __half2float(__ushort_as_half(inp[i]));
}

extern "C" void zn_cuda_cast_f32_to_f16(void *stream, uint16_t *out, const float *inp,
					size_t N)
{
	f32_to_f16_kernel<<<blocks(N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(out, inp, N);
	zn_cuda_note_launch("cast_f32_to_f16", __FILE__, __LINE__);
}

extern "C" void zn_cuda_cast_f16_to_f32(void *stream, float *out, const uint16_t *inp,
					size_t N)
{
	f16_to_f32_kernel<<<blocks(N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(out, inp, N);
	zn_cuda_note_launch("cast_f16_to_f32", __FILE__, __LINE__);
}
