/* Private to kernels/cuda: elementwise kernels four elements a thread. An op is a small
 * struct of its pointers with two device members: one(i) computes element i, four(q)
 * elements 4q .. 4q+3 with float4 loads and float4 (bf16: 4 x 16-bit) stores. Both call
 * the same per-element expression, so an element has the same bits whichever runs it.
 * zn_ew_launch runs four() over the whole quads when the caller found every pointer the op
 * touches aligned (16 bytes for fp32, 8 for bf16: carved activation buffers need not be),
 * and one() over the n % 4 tail, or over everything when a pointer is misaligned.
 * Grid-stride over size_t counts, like every elementwise kernel here. */
#ifndef ZN_KERNELS_CUDA_VEC_CUH
#define ZN_KERNELS_CUDA_VEC_CUH

#include "common.cuh"

template <class Op> static __global__ void zn_ew_one_kernel(Op op, size_t first, size_t n)
{
	for (size_t i = first + first_index(); i < n; i += grid_step())
		op.one(i);
}

template <class Op> static __global__ void zn_ew_four_kernel(Op op, size_t n4)
{
	for (size_t q = first_index(); q < n4; q += grid_step())
		op.four(q);
}

/* op over elements [0, n): quads by four() when vec, the rest by one(); each launch noted
 * under `name` */
template <class Op>
static void zn_ew_launch(cudaStream_t s, const char *name, const Op &op, size_t n, bool vec)
{
	size_t n4 = vec ? n / 4 : 0;

	if (n4) {
		zn_ew_four_kernel<Op><<<zn_cuda_blocks(n4, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0, s>>>(
			op, n4);
		zn_cuda_note_launch(name, __FILE__, __LINE__);
	}
	if (n > 4 * n4) {
		zn_ew_one_kernel<Op><<<zn_cuda_blocks(n - 4 * n4, ZN_CUDA_THREADS), ZN_CUDA_THREADS,
				       0, s>>>(op, 4 * n4, n);
		zn_cuda_note_launch(name, __FILE__, __LINE__);
	}
}

/* p is NULL or aligned to `to` bytes (a NULL optional output does not stop the quads) */
static inline bool zn_aligned(const void *p, size_t to)
{
	return (uintptr_t)p % to == 0;
}

static __device__ __forceinline__ float4 zn_ld4(const float *p, size_t q)
{
	return reinterpret_cast<const float4 *>(p)[q];
}

static __device__ __forceinline__ void zn_st4(float *p, size_t q, float4 v)
{
	reinterpret_cast<float4 *>(p)[q] = v;
}

/* four bf16 (or fp16) values at quad q of a 16-bit array */
static __device__ __forceinline__ ushort4 zn_ld4_u16(const uint16_t *p, size_t q)
{
	return reinterpret_cast<const ushort4 *>(p)[q];
}

static __device__ __forceinline__ void zn_st4_u16(uint16_t *p, size_t q, ushort4 v)
{
	reinterpret_cast<ushort4 *>(p)[q] = v;
}

/* v rounded to bf16 (zn_bf16_rne, the cast kernel's bits) at quad q */
static __device__ __forceinline__ void zn_st4_bf16(uint16_t *p, size_t q, float4 v)
{
	zn_st4_u16(p, q, make_ushort4(zn_bf16_rne(v.x), zn_bf16_rne(v.y), zn_bf16_rne(v.z),
				      zn_bf16_rne(v.w)));
}

#endif
