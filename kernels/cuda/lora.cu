/* LoRA's ops on CUDA (kernels.h: cols_add, cols_take, dropout: grid-stride over the
 * elements, dropout four a thread on aligned buffers (vec.cuh); lora_up: one cuBLAS GEMM).
 * The dropout mask is kernels/dropout.h's hash, the same bits as the CPU's. */
#include "vec.cuh"
#include "core/hash.h"

extern "C" {
#include "ops.h"
}

static __global__ void cols_add_kernel(float *out, const float *inp, float s, size_t total,
				       int ld, int c0, int n)
{
	for (size_t i = first_index(); i < total; i += grid_step()) {
		size_t r = i / (size_t)n, j = i % (size_t)n;

		out[r * (size_t)ld + (size_t)c0 + j] += s * inp[i];
	}
}

static __global__ void cols_take_kernel(float *out, const float *inp, float s, size_t total,
					int ld, int c0, int n)
{
	for (size_t i = first_index(); i < total; i += grid_step()) {
		size_t r = i / (size_t)n, j = i % (size_t)n;

		out[i] = s * inp[r * (size_t)ld + (size_t)c0 + j];
	}
}

static __device__ __forceinline__ float bf16_to_f32(uint16_t h)
{
	return __uint_as_float((unsigned)h << 16);
}

static __global__ void cols_take_bf16_kernel(float *out, const uint16_t *inp, float s,
					     size_t total, int ld, int c0, int n)
{
	for (size_t i = first_index(); i < total; i += grid_step()) {
		size_t r = i / (size_t)n, j = i % (size_t)n;

		out[i] = s * bf16_to_f32(inp[r * (size_t)ld + (size_t)c0 + j]);
	}
}

/* out[i] = inp[i] * s where element i is kept (kernels/dropout.h's hash of (seed, i)) */
struct dropout_op {
	float *out;
	const float *inp;
	float p, s;
	uint64_t seed;

	__device__ float at(size_t i, float x) const
	{
		float u = (float)(zn_hash_seeded(seed, i) >> 40) * (1.0f / 16777216.0f);

		return u >= p ? x * s : 0.0f;
	}
	__device__ void one(size_t i) const
	{
		out[i] = at(i, inp[i]);
	}
	__device__ void four(size_t q) const
	{
		float4 x = zn_ld4(inp, q);
		size_t i = 4 * q;

		zn_st4(out, q, make_float4(at(i, x.x), at(i + 1, x.y), at(i + 2, x.z),
					   at(i + 3, x.w)));
	}
};

extern "C" void zn_cuda_cols_add(void *stream, float *out, const float *inp, float s,
				 int64_t R, int ld, int c0, int n)
{
	size_t total = (size_t)R * (size_t)n;

	cols_add_kernel<<<zn_cuda_blocks(total, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0,
			  (cudaStream_t)stream>>>(out, inp, s, total, ld, c0, n);
	zn_cuda_note_launch("cols_add", __FILE__, __LINE__);
}

extern "C" void zn_cuda_cols_take(void *stream, float *out, const float *inp, float s,
				  int64_t R, int ld, int c0, int n)
{
	size_t total = (size_t)R * (size_t)n;

	cols_take_kernel<<<zn_cuda_blocks(total, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0,
			   (cudaStream_t)stream>>>(out, inp, s, total, ld, c0, n);
	zn_cuda_note_launch("cols_take", __FILE__, __LINE__);
}

extern "C" void zn_cuda_cols_take_bf16(void *stream, float *out, const uint16_t *inp, float s,
				       int64_t R, int ld, int c0, int n)
{
	size_t total = (size_t)R * (size_t)n;

	cols_take_bf16_kernel<<<zn_cuda_blocks(total, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0,
				(cudaStream_t)stream>>>(out, inp, s, total, ld, c0, n);
	zn_cuda_note_launch("cols_take_bf16", __FILE__, __LINE__);
}

extern "C" void zn_cuda_dropout(void *stream, float *out, const float *inp, float p,
				uint64_t seed, size_t N)
{
	struct dropout_op op = { out, inp, p, 1.0f / (1.0f - p), seed };

	zn_ew_launch((cudaStream_t)stream, "dropout", op, N,
		     zn_aligned(out, 16) && zn_aligned(inp, 16));
}

/* out[:, c0 .. c0 + n) += s t w^T as the GEMM's own epilogue: C = out + c0 with ldc = ld
 * (a column block of a row-major matrix is a strided matrix), alpha = s, beta = 1. */
extern "C" void zn_cuda_lora_up(void *stream, float *out, const float *t, const float *w,
				float s, int64_t R, int k, int ld, int c0, int n)
{
	zn_cuda_gemm(stream, "lora_up", false, true, (int)R, n, k, s, t, k, 0, w, k, 0, 1.0f,
		     out + c0, ld, 0, 1);
}
