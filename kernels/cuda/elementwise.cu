/* Elementwise ops on CUDA: GELU (tanh form), residual, scale, fp32 <-> bf16 and fp16 casts
 * (fp16: cuda_fp16's round-to-nearest-even conversions, as src/core/dtype.c's).
 * All grid-stride over size_t N; residual_forward and the fp32 -> bf16 cast (the most
 * frequent passes of a step) four elements a thread when the buffers are aligned. The bf16 rounding is src/core/dtype.c's bit arithmetic,
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

/* four elements a thread (float4 loads and stores) where every pointer is 16-byte aligned
 * (8 for the bf16 output); the n % 4 tail and misaligned buffers take the scalar kernel.
 * Each element is computed by the same expression either way: the same bits. */
static __global__ void residual_forward_vec_kernel(float4 *out, const float4 *a,
						   const float4 *b, size_t n4)
{
	for (size_t i = first_index(); i < n4; i += grid_step()) {
		float4 x = a[i], y = b[i];

		out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
	}
}

static __global__ void f32_to_bf16_vec_kernel(ushort4 *out, const float4 *inp, size_t n4)
{
	for (size_t i = first_index(); i < n4; i += grid_step()) {
		float4 v = inp[i];

		out[i] = make_ushort4(zn_bf16_rne(v.x), zn_bf16_rne(v.y), zn_bf16_rne(v.z),
				      zn_bf16_rne(v.w));
	}
}

static bool aligned(const void *p, size_t to)
{
	return (uintptr_t)p % to == 0;
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
	cudaStream_t s = (cudaStream_t)stream;
	size_t n4 = 0;

	if (aligned(out, 16) && aligned(inp1, 16) && aligned(inp2, 16)) {
		n4 = N / 4;
		if (n4) {
			residual_forward_vec_kernel<<<blocks(n4), ZN_CUDA_THREADS, 0, s>>>(
				(float4 *)out, (const float4 *)inp1, (const float4 *)inp2, n4);
			zn_cuda_note_launch("residual_forward", __FILE__, __LINE__);
		}
	}
	if (N - 4 * n4 == 0)
		return;
	residual_forward_kernel<<<blocks(N - 4 * n4), ZN_CUDA_THREADS, 0, s>>>(
		out + 4 * n4, inp1 + 4 * n4, inp2 + 4 * n4, N - 4 * n4);
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
	cudaStream_t s = (cudaStream_t)stream;
	size_t n4 = 0;

	if (aligned(out, 8) && aligned(inp, 16)) {
		n4 = N / 4;
		if (n4) {
			f32_to_bf16_vec_kernel<<<blocks(n4), ZN_CUDA_THREADS, 0, s>>>(
				(ushort4 *)out, (const float4 *)inp, n4);
			zn_cuda_note_launch("cast_f32_to_bf16", __FILE__, __LINE__);
		}
	}
	if (N - 4 * n4 == 0)
		return;
	f32_to_bf16_kernel<<<blocks(N - 4 * n4), ZN_CUDA_THREADS, 0, s>>>(out + 4 * n4,
									 inp + 4 * n4,
									 N - 4 * n4);
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
