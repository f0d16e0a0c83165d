/* Elementwise ops on CUDA: GELU (tanh form), residual, scale, fp32 <-> bf16 and fp16 casts
 * (fp16: cuda_fp16's round-to-nearest-even conversions, as src/core/dtype.c's).
 * Every op runs four elements a thread (float4 loads and stores) when its buffers are
 * aligned, one a thread for the n % 4 tail and misaligned buffers, the same expression
 * either way (vec.cuh): the same bits. The bf16 rounding is src/core/dtype.c's bit
 * arithmetic, so the device and host casts agree bit for bit (NaN -> quiet NaN with its
 * sign). */
#include "vec.cuh"

#include <cuda_fp16.h>

extern "C" {
#include "ops.h"
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_CUBE 0.044715f

static __device__ __forceinline__ float gelu_value(float x)
{
	float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);

	return 0.5f * x * (1.0f + tanhf(u));
}

/* the functors of the one-input maps (zn_ew_map) */
struct gelu_f {
	__device__ float operator()(float x) const
	{
		return gelu_value(x);
	}
};

/* gelu_forward_bf16out: the same value, rounded as it is stored */
struct gelu_bf16_f {
	__device__ uint16_t operator()(float x) const
	{
		return zn_bf16_rne(gelu_value(x));
	}
};

struct scale_f {
	float s;

	__device__ float operator()(float x) const
	{
		return x * s;
	}
};

struct f32_to_bf16_f {
	__device__ uint16_t operator()(float x) const
	{
		return zn_bf16_rne(x);
	}
};

struct bf16_to_f32_f {
	__device__ float operator()(uint16_t h) const
	{
		return __uint_as_float((unsigned)h << 16);
	}
};

struct f32_to_f16_f {
	__device__ uint16_t operator()(float x) const
	{
		return __half_as_ushort(__float2half_rn(x));
	}
};

struct f16_to_f32_f {
	__device__ float operator()(uint16_t h) const
	{
		return __half2float(__ushort_as_half(h));
	}
};

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

/* da += dout, db += dout */
struct residual_backward_op {
	float *da, *db;
	const float *dout;

	__device__ void one(size_t i) const
	{
		da[i] += dout[i];
		db[i] += dout[i];
	}
	__device__ void four(size_t q) const
	{
		float4 a = zn_ld4(da, q), b = zn_ld4(db, q), d = zn_ld4(dout, q);

		zn_st4(da, q, make_float4(a.x + d.x, a.y + d.y, a.z + d.z, a.w + d.w));
		zn_st4(db, q, make_float4(b.x + d.x, b.y + d.y, b.z + d.z, b.w + d.w));
	}
};

extern "C" void zn_cuda_gelu_forward(void *stream, float *out, const float *inp, size_t N)
{
	zn_ew_map((cudaStream_t)stream, "gelu_forward", out, inp, N, gelu_f());
}

extern "C" void zn_cuda_gelu_forward_bf16out(void *stream, uint16_t *out16, const float *inp,
					     size_t N)
{
	zn_ew_map((cudaStream_t)stream, "gelu_forward_bf16out", out16, inp, N, gelu_bf16_f());
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
	struct residual_backward_op op = { dinp1, dinp2, dout };

	zn_ew_launch((cudaStream_t)stream, "residual_backward", op, N,
		     zn_aligned(dinp1, 16) && zn_aligned(dinp2, 16) && zn_aligned(dout, 16));
}

extern "C" void zn_cuda_scale(void *stream, float *out, float s, size_t N)
{
	scale_f f = { s };

	zn_ew_map((cudaStream_t)stream, "scale", out, (const float *)out, N, f);
}

extern "C" void zn_cuda_cast_f32_to_bf16(void *stream, uint16_t *out, const float *inp,
					 size_t N)
{
	zn_ew_map((cudaStream_t)stream, "cast_f32_to_bf16", out, inp, N, f32_to_bf16_f());
}

extern "C" void zn_cuda_cast_bf16_to_f32(void *stream, float *out, const uint16_t *inp,
					 size_t N)
{
	zn_ew_map((cudaStream_t)stream, "cast_bf16_to_f32", out, inp, N, bf16_to_f32_f());
}

extern "C" void zn_cuda_cast_f32_to_f16(void *stream, uint16_t *out, const float *inp,
					size_t N)
{
	zn_ew_map((cudaStream_t)stream, "cast_f32_to_f16", out, inp, N, f32_to_f16_f());
}

extern "C" void zn_cuda_cast_f16_to_f32(void *stream, float *out, const uint16_t *inp,
					size_t N)
{
	zn_ew_map((cudaStream_t)stream, "cast_f16_to_f32", out, inp, N, f16_to_f32_f());
}
