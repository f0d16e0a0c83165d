/* Private to kernels/cuda/flash_attention_fa2.cu: the FlashAttention-2 kernels' tile
 * machinery. The block shape (4 warps, 64 owned rows, 64-row streamed tiles), the view of
 * qkv, the mma.sync m16n8k16 wrapper and its fragment loads from shared memory, the tile
 * copies into shared memory (from the fp32 qkv, rounded as stored, or by cp.async from
 * its bf16 copy), and the causal / window / document masks. Device code only; the
 * kernels and their launches stay in the .cu file. */
#ifndef ZN_KERNELS_CUDA_FA2_TILES_CUH
#define ZN_KERNELS_CUDA_FA2_TILES_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "common.cuh"

#define FA_WARPS 4
#define FA_THREADS (FA_WARPS * 32)
#define FA_BM 64 /* rows a block owns: 16 per warp */
#define FA_BN 64 /* rows of a streamed tile */

static_assert(FA_BM == FA_WARPS * 16, "each warp owns one 16-row MMA tile");
static_assert(FA_BN % 16 == 0, "a streamed tile is whole k-steps of 16");

struct fa_view {
	int T, NH, KV, hd, G, window;
	int stages; /* 2: the streamed tiles double-buffered; 1 where shared memory is short */
	long S, C;
	float scale;
	const int *pos; /* [B,T] document positions or NULL */
};

/* row stride of a bf16 tile in shared memory: 8 elements of padding keep the fragment
 * loads of the 8 row groups on different banks */
template <int HD> struct fa_ld {
	static const int v = HD + 8;
};

static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0,
						uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* two floats as a bf16 pair: lo in the low half (the lower k or column index) */
static __device__ __forceinline__ uint32_t pack_f2(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *reinterpret_cast<uint32_t *>(&v);
}

static __device__ __forceinline__ uint32_t pack_b2(__nv_bfloat16 lo, __nv_bfloat16 hi)
{
	return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}

static __device__ __forceinline__ uint32_t ld32(const __nv_bfloat16 *p)
{
	return *reinterpret_cast<const uint32_t *>(p);
}

/* A fragment (16 x 16, row-major) of X [rows][LD] at rows r0.., columns k0.. */
template <int LD>
static __device__ __forceinline__ void frag_a(uint32_t a[4], const __nv_bfloat16 *X, int r0,
					      int k0, int lane)
{
	int g = lane >> 2, c = (lane & 3) * 2;

	a[0] = ld32(X + (r0 + g) * LD + k0 + c);
	a[1] = ld32(X + (r0 + g + 8) * LD + k0 + c);
	a[2] = ld32(X + (r0 + g) * LD + k0 + c + 8);
	a[3] = ld32(X + (r0 + g + 8) * LD + k0 + c + 8);
}

/* B fragment (16 x 8) with B[k][n] = Y[n0 + n][k0 + k]: Y's rows are B's columns (K for
 * Q K^T, V for dO V^T, Q and dO for the transposed products) */
template <int LD>
static __device__ __forceinline__ void frag_b_rows(uint32_t *b0, uint32_t *b1,
						   const __nv_bfloat16 *Y, int n0, int k0, int lane)
{
	int g = lane >> 2, c = (lane & 3) * 2;

	*b0 = ld32(Y + (n0 + g) * LD + k0 + c);
	*b1 = ld32(Y + (n0 + g) * LD + k0 + c + 8);
}

/* B fragment (16 x 8) with B[k][n] = Z[k0 + k][n0 + n]: Z's rows are B's rows (V for P V,
 * K for dS K, dO for P^T dO, Q for dS^T Q) */
template <int LD>
static __device__ __forceinline__ void frag_b_cols(uint32_t *b0, uint32_t *b1,
						   const __nv_bfloat16 *Z, int n0, int k0, int lane)
{
	int g = lane >> 2, k = (lane & 3) * 2;
	const __nv_bfloat16 *z = Z + (k0 + k) * LD + n0 + g;

	*b0 = pack_b2(z[0], z[LD]);
	*b1 = pack_b2(z[8 * LD], z[9 * LD]);
}

/* C fragments of a 16 x 16 k-step (n-tiles 2kk, 2kk+1) as an A fragment */
static __device__ __forceinline__ void c_to_a(uint32_t a[4], const float lo[4], const float hi[4])
{
	a[0] = pack_f2(lo[0], lo[1]);
	a[1] = pack_f2(lo[2], lo[3]);
	a[2] = pack_f2(hi[0], hi[1]);
	a[3] = pack_f2(hi[2], hi[3]);
}

/* rows r0 .. r0+n of a [T, stride] fp32 matrix at src (column offset applied), as bf16
 * [n][LD], zero beyond T; all threads of the block, synchronously (the carved fp32
 * activations need not be 16-byte aligned: scalar coalesced loads, rounded to nearest
 * even as they are stored) */
template <int HD>
static __device__ void load_tile(__nv_bfloat16 *dst, const float *src, long stride, int r0,
				 int n, int T)
{
	const int LD = fa_ld<HD>::v;

	for (int i = threadIdx.x; i < n * HD; i += FA_THREADS) {
		int r = i / HD, c = i % HD;
		float v = r0 + r < T ? src[(long)(r0 + r) * stride + c] : 0.0f;

		dst[r * LD + c] = __float2bfloat16_rn(v);
	}
}

/* 16 bytes global -> shared without passing through registers (sm_80+); src_bytes 0
 * writes 16 zero bytes (rows past T) and reads nothing */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes)
{
	unsigned d = (unsigned)__cvta_generic_to_shared(dst);

	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
		     "r"(src_bytes));
}

static __device__ __forceinline__ void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

/* waits until at most N of this thread's committed cp.async groups are still in flight;
 * the block's other threads' copies are visible after the __syncthreads() that follows */
template <int N> static __device__ __forceinline__ void cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* the same tile from the bf16 copy of qkv (qkv16: the same values the fp32 load rounds
 * to, so the same tile): 16-byte cp.async copies of 8 elements, issued and not waited for
 * (the caller commits and waits). Needs src 16-byte aligned, and stride and HD multiples
 * of 8 (zn_cuda_fa2_forward checks the base; S = (NH + 2 KV) hd and hd are). */
template <int HD>
static __device__ void load_tile(__nv_bfloat16 *dst, const uint16_t *src, long stride, int r0,
				 int n, int T)
{
	const int LD = fa_ld<HD>::v, CH = HD / 8;

	for (int i = threadIdx.x; i < n * CH; i += FA_THREADS) {
		int r = i / CH, c = i % CH * 8;
		bool in = r0 + r < T;

		/* a row past T reads nothing: row 0's address only keeps the operand valid */
		cp_async16(dst + r * LD + c, src + (long)(in ? r0 + r : 0) * stride + c,
			   in ? 16 : 0);
	}
}

/* the first key row t may see from its document (0 without positions) */
static __device__ __forceinline__ int doc_start(const struct fa_view &a, long b, int t)
{
	if (!a.pos || t >= a.T)
		return 0;
	return t - a.pos[b * a.T + t];
}

static __device__ __forceinline__ bool visible(const struct fa_view &a, int t, int t2, int ds)
{
	return t < a.T && t2 < a.T && t2 <= t && t2 >= ds && (a.window <= 0 || t - t2 < a.window);
}

/* the key tiles a query block i0 .. i0+FA_BM-1 needs: from the first key its first row may
 * see (window, document: document starts never decrease along t), tiles of FA_BN */
static __device__ __forceinline__ int first_key_tile(const struct fa_view &a, long b, int i0)
{
	int lo = 0;

	if (a.window > 0 && i0 - a.window + 1 > lo)
		lo = i0 - a.window + 1;
	if (a.pos && doc_start(a, b, i0) > lo)
		lo = doc_start(a, b, i0);
	return lo / FA_BN * FA_BN;
}

#endif
