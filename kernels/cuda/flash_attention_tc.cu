/* Fused attention on tensor cores (bf16 tiles, fp32 accumulation): the FlashAttention-2
 * algorithm of flash_attention.cu with every product (Q K^T, P V, dO V^T, P^T dO, dS^T Q,
 * dS K) a WMMA 16x16x16 bf16 MMA (sm_80+). Same layout, arguments, window and outputs as
 * flash_attention_forward/backward (kernels.h); the inputs q, k, v, dout and the
 * probabilities are rounded to bf16 for the MMAs, the softmax (max, sum, lse), the
 * rescaling and every accumulator stay fp32, so results agree with the fp32 op to bf16
 * tolerance (tests/test_gpu_kernels_flash_tc.c: 2e-2 against the CPU table).
 *
 * Tiles: a block of 2 warps owns 32 query rows (forward, dQ) or 32 key rows (dK, dV); the
 * other side streams through in tiles of 32 rows in a fixed order; head_dim is padded to a
 * multiple of 16 in shared memory (hd <= 128). Every output element is accumulated by one
 * fragment in a fixed tile order, no atomics: the same bits run to run.
 *
 * Compile-checked on the 2-core VM (no GPU); validated only by the GPU check.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "common.cuh"

extern "C" {
#include "core/log.h"
#include "ops.h"
}

using namespace nvcuda;

#define TQ 32          /* query (or key) rows per block */
#define TK 32          /* rows of the streamed side per tile */
#define HD_MAX 128
#define TC_THREADS 64  /* 2 warps, 16 rows each */

struct tc_view {
	int T, NH, KV, hd, hdp, G, window;
	long S, C;
	float scale;
};

static struct tc_view tc_view_make(int T, int NH, int KV, int hd, int window)
{
	struct tc_view a;

	a.T = T, a.NH = NH, a.KV = KV, a.hd = hd, a.hdp = (hd + 15) / 16 * 16;
	a.G = NH / KV, a.window = window;
	a.S = (long)(NH + 2 * KV) * hd, a.C = (long)NH * hd;
	a.scale = (float)(1.0 / sqrt((double)hd));
	return a;
}

static __device__ __forceinline__ bool tc_visible(const struct tc_view &a, int t, int t2)
{
	return t2 <= t && t2 < a.T && t < a.T && (a.window <= 0 || t - t2 < a.window);
}

/* rows r0..r0+n of a [T, stride] fp32 matrix at column offset col, as bf16 [n][hdp]
 * (zero beyond T and hd) */
static __device__ void load_rows(__nv_bfloat16 *dst, const float *src, long stride, int r0,
				 int n, const struct tc_view &a)
{
	for (int i = threadIdx.x; i < n * a.hdp; i += blockDim.x) {
		int r = i / a.hdp, c = i % a.hdp;
		float v = r0 + r < a.T && c < a.hd ? src[(long)(r0 + r) * stride + c] : 0.0f;

		dst[i] = __float2bfloat16_rn(v);
	}
}

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_t;

/* C[16 x 16] (fp32, row-major ld ldc) (+)= A[16 x K] B[K x 16], bf16, K a multiple of 16;
 * A row-major (lda) or col-major, B row-major or col-major (ldb). */
template <typename LA, typename LB>
static __device__ void mma_tile(float *c, int ldc, bool accumulate, const __nv_bfloat16 *A,
				int lda, int a_step, const __nv_bfloat16 *B, int ldb, int b_step,
				int K)
{
	wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LA> fa;
	wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LB> fb;
	acc_t acc;

	if (accumulate)
		wmma::load_matrix_sync(acc, c, ldc, wmma::mem_row_major);
	else
		wmma::fill_fragment(acc, 0.0f);
	for (int k = 0; k < K; k += 16) {
		wmma::load_matrix_sync(fa, A + (long)k * a_step, lda);
		wmma::load_matrix_sync(fb, B + (long)k * b_step, ldb);
		wmma::mma_sync(acc, fa, fb, acc);
	}
	wmma::store_matrix_sync(c, acc, ldc, wmma::mem_row_major);
}

/* shared memory of the forward: Q, K, V bf16 [32][hdp], S fp32 [32][32], P bf16 [32][32],
 * O fp32 [32][hdp], m, l [32] */
static size_t fwd_smem(int hdp)
{
	return 3 * (size_t)TQ * hdp * 2 + TQ * TK * 4 + TQ * TK * 2 + (size_t)TQ * hdp * 4 +
	       2 * TQ * 4;
}

/* block = (b, h, query tile) */
static __global__ void tc_forward_kernel(float *out, float *lse, const float *qkv,
					 struct tc_view a, int ntiles)
{
	extern __shared__ __align__(32) unsigned char sm[];
	__nv_bfloat16 *Qs = (__nv_bfloat16 *)sm, *Ks = Qs + TQ * a.hdp, *Vs = Ks + TK * a.hdp;
	float *Ss = (float *)(Vs + TK * a.hdp);
	__nv_bfloat16 *Ps = (__nv_bfloat16 *)(Ss + TQ * TK);
	float *Os = (float *)(Ps + TQ * TK), *M = Os + TQ * a.hdp, *L = M + TQ;
	int it = blockIdx.x % ntiles, h = blockIdx.x / ntiles % a.NH;
	long b = blockIdx.x / ntiles / a.NH;
	int g = h / a.G, i0 = it * TQ, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const float *x = qkv + b * a.T * a.S;
	int jfirst = a.window > 0 && i0 - a.window + 1 > 0 ? i0 - a.window + 1 : 0;

	load_rows(Qs, x + (long)h * a.hd, a.S, i0, TQ, a);
	for (int i = threadIdx.x; i < TQ * a.hdp; i += blockDim.x)
		Os[i] = 0.0f;
	for (int i = threadIdx.x; i < TQ; i += blockDim.x)
		M[i] = -INFINITY, L[i] = 0.0f;
	__syncthreads();
	for (int j0 = jfirst - jfirst % TK; j0 <= i0 + TQ - 1 && j0 < a.T; j0 += TK) {
		load_rows(Ks, x + (long)(a.NH + g) * a.hd, a.S, j0, TK, a);
		load_rows(Vs, x + (long)(a.NH + a.KV + g) * a.hd, a.S, j0, TK, a);
		__syncthreads();
		/* S rows warp*16.. = Q K^T: K stored [keys][hdp] is K^T column-major */
		for (int n0 = 0; n0 < TK; n0 += 16)
			mma_tile<wmma::row_major, wmma::col_major>(
				Ss + warp * 16 * TK + n0, TK, false, Qs + warp * 16 * a.hdp, a.hdp, 1,
				Ks + n0 * a.hdp, a.hdp, 1, a.hdp);
		__syncwarp();
		/* online softmax, one row at a time, a key per lane (TK = 32) */
		for (int rr = 0; rr < 16; rr++) {
			int r = warp * 16 + rr, t = i0 + r, t2 = j0 + lane;
			float s = tc_visible(a, t, t2) ? Ss[r * TK + lane] * a.scale : -INFINITY;
			float mold = M[r], mx = zn_warp_max(fmaxf(mold, s));
			float p = mx == -INFINITY ? 0.0f : expf(s - mx);
			float alpha = mx == -INFINITY ? 1.0f : expf(mold - mx);
			float sum = zn_warp_sum(p);

			Ps[r * TK + lane] = __float2bfloat16_rn(p);
			for (int c = lane; c < a.hdp; c += 32)
				Os[r * a.hdp + c] *= alpha;
			__syncwarp();
			if (lane == 0)
				M[r] = mx, L[r] = L[r] * alpha + sum;
			__syncwarp();
		}
		/* O += P V */
		for (int n0 = 0; n0 < a.hdp; n0 += 16)
			mma_tile<wmma::row_major, wmma::row_major>(
				Os + warp * 16 * a.hdp + n0, a.hdp, true, Ps + warp * 16 * TK, TK, 1,
				Vs + n0, a.hdp, a.hdp, TK);
		__syncthreads();
	}
	for (int i = threadIdx.x; i < TQ * a.hd; i += blockDim.x) {
		int r = i / a.hd, c = i % a.hd, t = i0 + r;

		if (t < a.T)
			out[(b * a.T + t) * a.C + (long)h * a.hd + c] = Os[r * a.hdp + c] / L[r];
	}
	for (int r = threadIdx.x; r < TQ; r += blockDim.x)
		if (i0 + r < a.T)
			lse[(b * a.NH + h) * a.T + i0 + r] = M[r] + logf(L[r]);
}

/* P = exp(S scale - lse) and dS = P (dP - drow) scale for a 32 x 32 tile of query rows
 * q0.. and key rows k0.. (rows of the tile: queries), in place in Ss (P) and Ds (dS) */
static __device__ void tc_p_ds(float *Ss, float *Ds, const float *ls, const float *dr,
			       const struct tc_view &a, int q0, int k0, int warp, int lane)
{
	for (int rr = 0; rr < 16; rr++) {
		int r = warp * 16 + rr, t = q0 + r, t2 = k0 + lane;
		float p = tc_visible(a, t, t2) ? expf(Ss[r * TK + lane] * a.scale - ls[t]) : 0.0f;
		float d = t < a.T ? dr[t] : 0.0f;

		Ds[r * TK + lane] = p * (Ds[r * TK + lane] - d) * a.scale;
		Ss[r * TK + lane] = p;
	}
}

static __device__ void to_bf16(__nv_bfloat16 *dst, const float *src, int n)
{
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		dst[i] = __float2bfloat16_rn(src[i]);
}

/* shared memory of each backward kernel: 4 bf16 [32][hdp] operands, S and dS fp32 and
 * bf16 [32][32], 2 fp32 [32][hdp] accumulators */
static size_t bwd_smem(int hdp)
{
	return 4 * (size_t)TQ * hdp * 2 + 2 * TQ * TK * 4 + 2 * TQ * TK * 2 +
	       2 * (size_t)TQ * hdp * 4;
}

struct bwd_smem_view {
	__nv_bfloat16 *A, *B, *C, *D; /* operands */
	float *Ss, *Ds;
	__nv_bfloat16 *Pb, *Db;
	float *Acc1, *Acc2;
};

static __device__ struct bwd_smem_view carve_bwd(unsigned char *sm, int hdp)
{
	struct bwd_smem_view v;

	v.A = (__nv_bfloat16 *)sm, v.B = v.A + TQ * hdp, v.C = v.B + TQ * hdp;
	v.D = v.C + TQ * hdp;
	v.Ss = (float *)(v.D + TQ * hdp), v.Ds = v.Ss + TQ * TK;
	v.Pb = (__nv_bfloat16 *)(v.Ds + TQ * TK), v.Db = v.Pb + TQ * TK;
	v.Acc1 = (float *)(v.Db + TQ * TK), v.Acc2 = v.Acc1 + TQ * hdp;
	return v;
}

/* block = (b, g, key tile): dK, dV of 32 key rows over the group's query heads in order,
 * then query tiles in order. Operands: A = K, B = V, C = Q tile, D = dO tile. */
static __global__ void tc_dkv_kernel(float *dqkv, const float *dout, const float *qkv,
				     const float *lse, const float *drow, struct tc_view a,
				     int ntiles)
{
	extern __shared__ __align__(32) unsigned char sm[];
	struct bwd_smem_view v = carve_bwd(sm, a.hdp);
	int jt = blockIdx.x % ntiles, g = blockIdx.x / ntiles % a.KV;
	long b = blockIdx.x / ntiles / a.KV;
	int j0 = jt * TK, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const float *x = qkv + b * a.T * a.S, *d = dout + b * a.T * a.C;
	int qend = a.window > 0 && (long)j0 + TK - 1 + a.window < a.T ? j0 + TK - 1 + a.window :
									    a.T;

	load_rows(v.A, x + (long)(a.NH + g) * a.hd, a.S, j0, TK, a);
	load_rows(v.B, x + (long)(a.NH + a.KV + g) * a.hd, a.S, j0, TK, a);
	for (int i = threadIdx.x; i < TK * a.hdp; i += blockDim.x)
		v.Acc1[i] = 0.0f, v.Acc2[i] = 0.0f;
	for (int h = g * a.G; h < (g + 1) * a.G; h++) {
		const float *ls = lse + (b * a.NH + h) * a.T, *dr = drow + (b * a.NH + h) * a.T;

		for (int q0 = j0 - j0 % TQ; q0 < qend; q0 += TQ) {
			__syncthreads();
			load_rows(v.C, x + (long)h * a.hd, a.S, q0, TQ, a);
			load_rows(v.D, d + (long)h * a.hd, a.C, q0, TQ, a);
			__syncthreads();
			/* S = Q K^T and dP = dO V^T, query rows warp*16.. */
			for (int n0 = 0; n0 < TK; n0 += 16) {
				mma_tile<wmma::row_major, wmma::col_major>(
					v.Ss + warp * 16 * TK + n0, TK, false,
					v.C + warp * 16 * a.hdp, a.hdp, 1, v.A + n0 * a.hdp, a.hdp, 1,
					a.hdp);
				mma_tile<wmma::row_major, wmma::col_major>(
					v.Ds + warp * 16 * TK + n0, TK, false,
					v.D + warp * 16 * a.hdp, a.hdp, 1, v.B + n0 * a.hdp, a.hdp, 1,
					a.hdp);
			}
			__syncwarp();
			tc_p_ds(v.Ss, v.Ds, ls, dr, a, q0, j0, warp, lane);
			__syncthreads();
			to_bf16(v.Pb, v.Ss, TQ * TK);
			to_bf16(v.Db, v.Ds, TQ * TK);
			__syncthreads();
			/* key rows warp*16..: dV += P^T dO, dK += dS^T Q (P, dS stored [q][k]:
			 * their transposes are column-major) */
			for (int n0 = 0; n0 < a.hdp; n0 += 16) {
				mma_tile<wmma::col_major, wmma::row_major>(
					v.Acc2 + warp * 16 * a.hdp + n0, a.hdp, true, v.Pb + warp * 16,
					TK, TK, v.D + n0, a.hdp, a.hdp, TQ);
				mma_tile<wmma::col_major, wmma::row_major>(
					v.Acc1 + warp * 16 * a.hdp + n0, a.hdp, true, v.Db + warp * 16,
					TK, TK, v.C + n0, a.hdp, a.hdp, TQ);
			}
		}
	}
	__syncthreads();
	for (int i = threadIdx.x; i < TK * a.hd; i += blockDim.x) {
		int r = i / a.hd, c = i % a.hd, t2 = j0 + r;
		float *row = dqkv + (b * a.T + t2) * a.S;

		if (t2 >= a.T)
			continue;
		row[(long)(a.NH + g) * a.hd + c] += v.Acc1[r * a.hdp + c];
		row[(long)(a.NH + a.KV + g) * a.hd + c] += v.Acc2[r * a.hdp + c];
	}
}

/* block = (b, h, query tile): dQ of 32 query rows over key tiles in order. Operands: A = Q,
 * B = dO, C = K tile, D = V tile. */
static __global__ void tc_dq_kernel(float *dqkv, const float *dout, const float *qkv,
				    const float *lse, const float *drow, struct tc_view a,
				    int ntiles)
{
	extern __shared__ __align__(32) unsigned char sm[];
	struct bwd_smem_view v = carve_bwd(sm, a.hdp);
	int it = blockIdx.x % ntiles, h = blockIdx.x / ntiles % a.NH;
	long b = blockIdx.x / ntiles / a.NH;
	int g = h / a.G, i0 = it * TQ, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const float *x = qkv + b * a.T * a.S, *d = dout + b * a.T * a.C;
	const float *ls = lse + (b * a.NH + h) * a.T, *dr = drow + (b * a.NH + h) * a.T;
	int jfirst = a.window > 0 && i0 - a.window + 1 > 0 ? i0 - a.window + 1 : 0;

	load_rows(v.A, x + (long)h * a.hd, a.S, i0, TQ, a);
	load_rows(v.B, d + (long)h * a.hd, a.C, i0, TQ, a);
	for (int i = threadIdx.x; i < TQ * a.hdp; i += blockDim.x)
		v.Acc1[i] = 0.0f;
	for (int j0 = jfirst - jfirst % TK; j0 <= i0 + TQ - 1 && j0 < a.T; j0 += TK) {
		__syncthreads();
		load_rows(v.C, x + (long)(a.NH + g) * a.hd, a.S, j0, TK, a);
		load_rows(v.D, x + (long)(a.NH + a.KV + g) * a.hd, a.S, j0, TK, a);
		__syncthreads();
		for (int n0 = 0; n0 < TK; n0 += 16) {
			mma_tile<wmma::row_major, wmma::col_major>(
				v.Ss + warp * 16 * TK + n0, TK, false, v.A + warp * 16 * a.hdp, a.hdp,
				1, v.C + n0 * a.hdp, a.hdp, 1, a.hdp);
			mma_tile<wmma::row_major, wmma::col_major>(
				v.Ds + warp * 16 * TK + n0, TK, false, v.B + warp * 16 * a.hdp, a.hdp,
				1, v.D + n0 * a.hdp, a.hdp, 1, a.hdp);
		}
		__syncwarp();
		tc_p_ds(v.Ss, v.Ds, ls, dr, a, i0, j0, warp, lane);
		__syncwarp();
		for (int i = lane; i < 16 * TK; i += 32)
			v.Db[warp * 16 * TK + i] = __float2bfloat16_rn(v.Ds[warp * 16 * TK + i]);
		__syncwarp();
		/* dQ rows warp*16.. += dS K */
		for (int n0 = 0; n0 < a.hdp; n0 += 16)
			mma_tile<wmma::row_major, wmma::row_major>(
				v.Acc1 + warp * 16 * a.hdp + n0, a.hdp, true, v.Db + warp * 16 * TK, TK,
				1, v.C + n0, a.hdp, a.hdp, TK);
	}
	__syncthreads();
	for (int i = threadIdx.x; i < TQ * a.hd; i += blockDim.x) {
		int r = i / a.hd, c = i % a.hd, t = i0 + r;

		if (t < a.T)
			dqkv[(b * a.T + t) * a.S + (long)h * a.hd + c] += v.Acc1[r * a.hdp + c];
	}
}

/* drow[r] = sum(dout * out) of row r = (b*NH + h)*T + t, a warp per row */
static __global__ void tc_drow_kernel(float *drow, const float *dout, const float *out,
				      long rows, struct tc_view a)
{
	long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;

	if (r >= rows)
		return;
	int t = (int)(r % a.T), h = (int)(r / a.T % a.NH);
	long b = r / a.T / a.NH, o = (b * a.T + t) * a.C + (long)h * a.hd;
	float s = 0.0f;

	for (int i = lane; i < a.hd; i += 32)
		s += dout[o + i] * out[o + i];
	s = zn_warp_sum(s);
	if (lane == 0)
		drow[r] = s;
}

void zn_cuda_flash_drow(cudaStream_t s, const char *op, float *drow, const float *dout,
			const float *out, int B, int T, int NH, int hd)
{
	struct tc_view a = tc_view_make(T, NH, NH, hd, 0);
	long rows = (long)B * NH * T;

	tc_drow_kernel<<<zn_cuda_grid(rows, 8), 256, 0, s>>>(drow, dout, out, rows, a);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
}

/* the dynamic shared memory a kernel needs above the 48 KiB default, once per process */
static bool smem_ok(const void *kernel, size_t bytes, const char *op)
{
	cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
					     (int)bytes);

	if (e == cudaSuccess)
		return true;
	zn_error("%s: %zu bytes of shared memory refused: %s", op, bytes, cudaGetErrorString(e));
	zn_cuda_note_error();
	return false;
}

static bool tc_args_ok(int hd, const char *op)
{
	if (hd >= 1 && hd <= HD_MAX)
		return true;
	zn_error("%s: head_dim %d: the tensor-core kernels take head_dim 1..%d; use "
		 "flash_attention_forward/backward", op, hd, HD_MAX);
	zn_cuda_note_error();
	return false;
}

extern "C" void zn_cuda_flash_attention_tc_forward(void *stream, float *out, float *lse,
						   const float *qkv, int B, int T, int NH, int KV,
						   int hd, int window)
{
	const char *op = "flash_attention_tc_forward";
	struct tc_view a = tc_view_make(T, NH, KV, hd, window);
	int nt = (T + TQ - 1) / TQ;
	size_t smem = fwd_smem(a.hdp);

	if (zn_cuda_fa2_supported(hd)) {
		zn_cuda_fa2_forward(stream, out, NULL, lse, qkv, NULL, NULL, B, T, NH, KV, hd,
				    window);
		return;
	}
	if (!tc_args_ok(hd, op) || !smem_ok((const void *)tc_forward_kernel, smem, op))
		return;
	tc_forward_kernel<<<(unsigned)((long)B * NH * nt), TC_THREADS, smem,
			    (cudaStream_t)stream>>>(out, lse, qkv, a, nt);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
}

extern "C" void zn_cuda_flash_attention_tc_backward(void *stream, float *dqkv, float *drow,
						    const float *dout, const float *qkv,
						    const float *out, const float *lse, int B,
						    int T, int NH, int KV, int hd, int window)
{
	const char *op = "flash_attention_tc_backward";
	struct tc_view a = tc_view_make(T, NH, KV, hd, window);
	int nt = (T + TQ - 1) / TQ;
	long rows = (long)B * NH * T;
	size_t smem = bwd_smem(a.hdp);
	cudaStream_t s = (cudaStream_t)stream;

	if (zn_cuda_fa2_supported(hd)) {
		zn_cuda_fa2_backward(stream, dqkv, NULL, drow, dout, qkv, NULL, out, lse, NULL, B,
				     T, NH, KV, hd, window);
		return;
	}
	if (!tc_args_ok(hd, op) || !smem_ok((const void *)tc_dkv_kernel, smem, op) ||
	    !smem_ok((const void *)tc_dq_kernel, smem, op))
		return;
	tc_drow_kernel<<<zn_cuda_grid(rows, 8), 256, 0, s>>>(drow, dout, out, rows, a);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
	tc_dkv_kernel<<<(unsigned)((long)B * KV * nt), TC_THREADS, smem, s>>>(dqkv, dout, qkv,
									      lse, drow, a, nt);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
	tc_dq_kernel<<<(unsigned)((long)B * NH * nt), TC_THREADS, smem, s>>>(dqkv, dout, qkv,
									     lse, drow, a, nt);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
}

/* The slots the bf16 layers call (pos NULL: one sequence per row): FlashAttention-2 where
 * it takes the head_dim, else the fp32 kernels (flash_attention(_doc)_*), not the WMMA
 * kernel: a model with an odd head_dim (the tests' tiny ones) keeps fp32 attention, so
 * its cuda-vs-host training comparisons hold at their tolerances. */
extern "C" void zn_cuda_flash_attention_doc_tc_forward(void *stream, float *out,
						       uint16_t *out16, float *lse,
						       const float *qkv, const int *pos, int B,
						       int T, int NH, int KV, int hd, int window)
{
	zn_cuda_flash_attention_doc_tc_forward_qkv16(stream, out, out16, lse, qkv, NULL, pos, B, T,
						     NH, KV, hd, window);
}

extern "C" void zn_cuda_flash_attention_doc_tc_forward_qkv16(void *stream, float *out,
							     uint16_t *out16, float *lse,
							     const float *qkv,
							     const uint16_t *qkv16,
							     const int *pos, int B, int T,
							     int NH, int KV, int hd, int window)
{
	if (zn_cuda_fa2_supported(hd)) { /* out16 written by the kernel's epilogue */
		zn_cuda_fa2_forward(stream, out, out16, lse, qkv, qkv16, pos, B, T, NH, KV, hd,
				    window);
		return;
	}
	zn_cuda_flash_attention_doc_forward(stream, out, lse, qkv, pos, B, T, NH, KV, hd, window);
	if (out16)
		zn_cuda_cast_f32_to_bf16(stream, out16, out, (size_t)B * T * NH * hd);
}

extern "C" void zn_cuda_flash_attention_doc_tc_backward(void *stream, float *dqkv,
							float *drow, const float *dout,
							const float *qkv, const float *out,
							const float *lse, const int *pos, int B,
							int T, int NH, int KV, int hd, int window)
{
	zn_cuda_flash_attention_doc_tc_backward_bf16out(stream, dqkv, NULL, drow, dout, qkv, NULL,
							out, lse, pos, B, T, NH, KV, hd, window);
}

extern "C" void zn_cuda_flash_attention_doc_tc_backward_bf16out(
	void *stream, float *dqkv, uint16_t *dqkv16, float *drow, const float *dout,
	const float *qkv, const uint16_t *qkv16, const float *out, const float *lse,
	const int *pos, int B, int T, int NH, int KV, int hd, int window)
{
	if (zn_cuda_fa2_supported(hd)) { /* dqkv16 written by the kernels' epilogues */
		zn_cuda_fa2_backward(stream, dqkv, dqkv16, drow, dout, qkv, qkv16, out, lse, pos,
				     B, T, NH, KV, hd, window);
		return;
	}
	zn_cuda_flash_attention_doc_backward(stream, dqkv, drow, dout, qkv, out, lse, pos, B, T,
					     NH, KV, hd, window);
	if (dqkv16)
		zn_cuda_cast_f32_to_bf16(stream, dqkv16, dqkv,
					 (size_t)B * T * (NH + 2 * KV) * hd);
}
