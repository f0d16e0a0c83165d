/* Elementwise ops on CUDA: GELU (tanh form), residual, scale, fp32 <-> bf16 and fp16 casts
 * (fp16: cuda_fp16's round-to-nearest-even conversions, as src/core/dtype.c's).
 * All grid-stride over size_t N; residual_forward and the fp32 -> bf16 cast (the most
 * frequent passes of a step) four elements a thread when the buffers are aligned. The bf16 rounding is src/core/dtype.c's bit arithmetic,
 * so the device and host casts agree bit for bit (NaN -> quiet NaN with its sign). */
#include "vec.cuh"

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

/* GELU's derivative at x times dout, added to dinp */
static __device__ __forceinline__ float gelu_backward_value(float dinp, float x, float dout)
{
	float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
	float th = tanhf(u);
	float sech2 = 1.0f - th * th;
	float g = 0.5f * (1.0f + th) +
		  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);

	return dinp + g * dout;
}

/* dinp += gelu'(inp) dout; dinp16 (NULL: none) the sums rounded to bf16 */
struct gelu_backward_op {
	float *dinp;
	uint16_t *dinp16;
	const float *inp, *dout;

	__device__ void one(size_t i) const
	{
		float v = gelu_backward_value(dinp[i], inp[i], dout[i]);

		dinp[i] = v;
		if (dinp16)
			dinp16[i] = zn_bf16_rne(v);
	}
	__device__ void four(size_t q) const
	{
		float4 d = zn_ld4(dinp, q), x = zn_ld4(inp, q), g = zn_ld4(dout, q), v;

		v.x = gelu_backward_value(d.x, x.x, g.x);
		v.y = gelu_backward_value(d.y, x.y, g.y);
		v.z = gelu_backward_value(d.z, x.z, g.z);
		v.w = gelu_backward_value(d.w, x.w, g.w);
		zn_st4(dinp, q, v);
		if (dinp16)
			zn_st4_bf16(dinp16, q, v);
	}
};

/* out = a + b; out16 (NULL: none) the sums rounded to bf16 */
struct residual_op {
	float *out;
	uint16_t *out16;
	const float *a, *b;

	__device__ void one(size_t i) const
	{
		float v = a[i] + b[i];

		out[i] = v;
		if (out16)
			out16[i] = zn_bf16_rne(v);
	}
	__device__ void four(size_t q) const
	{
		float4 x = zn_ld4(a, q), y = zn_ld4(b, q);
		float4 v = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);

		zn_st4(out, q, v);
		if (out16)
			zn_st4_bf16(out16, q, v);
	}
};

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

struct f32_to_bf16_op {
	uint16_t *out;
	const float *inp;

	__device__ void one(size_t i) const
	{
		out[i] = zn_bf16_rne(inp[i]);
	}
	__device__ void four(size_t q) const
	{
		zn_st4_bf16(out, q, zn_ld4(inp, q));
	}
};

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

extern "C" void zn_cuda_gelu_backward_bf16out(void *stream, float *dinp, uint16_t *dinp16,
					      const float *inp, const float *dout, size_t N)
{
	struct gelu_backward_op op = { dinp, dinp16, inp, dout };
	bool vec = zn_aligned(dinp, 16) && zn_aligned(inp, 16) && zn_aligned(dout, 16) &&
		   zn_aligned(dinp16, 8);

	zn_ew_launch((cudaStream_t)stream, dinp16 ? "gelu_backward_bf16out" : "gelu_backward", op,
		     N, vec);
}

extern "C" void zn_cuda_gelu_backward(void *stream, float *dinp, const float *inp,
				      const float *dout, size_t N)
{
	zn_cuda_gelu_backward_bf16out(stream, dinp, NULL, inp, dout, N);
}

extern "C" void zn_cuda_residual_forward_bf16out(void *stream, float *out, uint16_t *out16,
						 const float *inp1, const float *inp2, size_t N)
{
	struct residual_op op = { out, out16, inp1, inp2 };
	bool vec = zn_aligned(out, 16) && zn_aligned(inp1, 16) && zn_aligned(inp2, 16) &&
		   zn_aligned(out16, 8);

	zn_ew_launch((cudaStream_t)stream, out16 ? "residual_forward_bf16out" : "residual_forward",
		     op, N, vec);
}

extern "C" void zn_cuda_residual_forward(void *stream, float *out, const float *inp1,
					 const float *inp2, size_t N)
{
	zn_cuda_residual_forward_bf16out(stream, out, NULL, inp1, inp2, N);
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
	struct f32_to_bf16_op op = { out, inp };

	zn_ew_launch((cudaStream_t)stream, "cast_f32_to_bf16", op, N,
		     zn_aligned(out, 8) && zn_aligned(inp, 16));
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
