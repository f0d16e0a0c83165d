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

/* an op's four output elements at quad q: fp32 as they are, or bf16 (zn_put's forms) */
static __device__ __forceinline__ void zn_put4(float *p, size_t q, float4 v)
{
	zn_st4(p, q, v);
}

static __device__ __forceinline__ void zn_put4(uint16_t *p, size_t q, float4 v)
{
	zn_st4_bf16(p, q, v);
}

static __device__ __forceinline__ float4 zn_make4(float a, float b, float c, float d)
{
	return make_float4(a, b, c, d);
}

static __device__ __forceinline__ ushort4 zn_make4(uint16_t a, uint16_t b, uint16_t c,
						   uint16_t d)
{
	return make_ushort4(a, b, c, d);
}

static __device__ __forceinline__ ushort4 zn_ld4(const uint16_t *p, size_t q)
{
	return zn_ld4_u16(p, q);
}

static __device__ __forceinline__ void zn_st4(uint16_t *p, size_t q, ushort4 v)
{
	zn_st4_u16(p, q, v);
}

/* out[i] = f(inp[i]) for one input and one output array (in place allowed: out == inp),
 * InT and OutT float or uint16_t (bf16, fp16 bits); f a functor with
 * `__device__ OutT operator()(InT) const` */
template <class F, class InT, class OutT> struct zn_map_op {
	OutT *out;
	const InT *inp;
	F f;

	__device__ void one(size_t i) const
	{
		out[i] = f(inp[i]);
	}
	__device__ void four(size_t q) const
	{
		auto x = zn_ld4(inp, q);

		zn_st4(out, q, zn_make4(f(x.x), f(x.y), f(x.z), f(x.w)));
	}
};

template <class F, class InT, class OutT>
static void zn_ew_map(cudaStream_t s, const char *name, OutT *out, const InT *inp, size_t n,
		      F f)
{
	zn_map_op<F, InT, OutT> op = { out, inp, f };

	zn_ew_launch(s, name, op, n,
		     zn_aligned(out, 4 * sizeof(OutT)) && zn_aligned(inp, 4 * sizeof(InT)));
}

/* a table element as fp32: fp32 as is, bf16 widened (exact) */
static __device__ __forceinline__ float zn_widen(float x)
{
	return x;
}

static __device__ __forceinline__ float zn_widen(uint16_t h)
{
	return __uint_as_float((unsigned)h << 16);
}

static __device__ __forceinline__ float4 zn_widen4(float4 x)
{
	return x;
}

static __device__ __forceinline__ float4 zn_widen4(ushort4 h)
{
	return make_float4(zn_widen(h.x), zn_widen(h.y), zn_widen(h.z), zn_widen(h.w));
}

/* Embedding rows: out[bt, c] = wte[inp[bt], c] (+ wpe[pos[bt] or bt % T, c] when wpe is not
 * NULL), out [BT, C] fp32, the tables fp32 or bf16 (TabT uint16_t). four(): C % 4 == 0
 * and the tables aligned (the caller checks), so a quad is one row's, aligned in every
 * table. */
template <class TabT> struct zn_embed_op {
	float *out;
	const int *inp, *pos;
	const TabT *wte, *wpe;
	size_t C;
	int T;

	__device__ size_t prow(size_t bt) const
	{
		return pos ? (size_t)pos[bt] : bt % (size_t)T;
	}
	__device__ void one(size_t i) const
	{
		size_t bt = i / C, c = i % C;
		float v = zn_widen(wte[(size_t)inp[bt] * C + c]);

		if (wpe)
			v += zn_widen(wpe[prow(bt) * C + c]);
		out[i] = v;
	}
	__device__ void four(size_t q) const
	{
		size_t bt = 4 * q / C, c = 4 * q % C;
		float4 v = zn_widen4(zn_ld4(wte, ((size_t)inp[bt] * C + c) / 4));

		if (wpe) {
			float4 p = zn_widen4(zn_ld4(wpe, (prow(bt) * C + c) / 4));

			v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
		}
		zn_st4(out, q, v);
	}
};

template <class TabT>
static void zn_embed(cudaStream_t s, const char *name, float *out, const int *inp,
		     const int *pos, const TabT *wte, const TabT *wpe, int B, int T, int C)
{
	zn_embed_op<TabT> op = { out, inp, pos, wte, wpe, (size_t)C, T };
	bool vec = C % 4 == 0 && zn_aligned(out, 16) && zn_aligned(wte, 4 * sizeof(TabT)) &&
		   zn_aligned(wpe, 4 * sizeof(TabT));

	zn_ew_launch(s, name, op, (size_t)B * T * C, vec);
}

/* A bias over the rows of out [rows, OC]: out[i] = bias[i % OC] (add false: the fill
 * before a GEMM that accumulates) or out[i] += bias[i % OC]. four(): OC % 4 == 0 (the
 * caller checks), so a quad's bias is one aligned quad. */
struct zn_bias_op {
	float *out;
	const float *bias;
	size_t OC;
	bool add;

	__device__ void one(size_t i) const
	{
		out[i] = add ? out[i] + bias[i % OC] : bias[i % OC];
	}
	__device__ void four(size_t q) const
	{
		float4 b = zn_ld4(bias, 4 * q % OC / 4);

		if (add) {
			float4 o = zn_ld4(out, q);

			b = make_float4(o.x + b.x, o.y + b.y, o.z + b.z, o.w + b.w);
		}
		zn_st4(out, q, b);
	}
};

static inline void zn_bias(cudaStream_t s, const char *name, float *out, const float *bias,
			   size_t rows, int OC, bool add)
{
	zn_bias_op op = { out, bias, (size_t)OC, add };

	zn_ew_launch(s, name, op, rows * (size_t)OC,
		     OC % 4 == 0 && zn_aligned(out, 16) && zn_aligned(bias, 16));
}

#endif
