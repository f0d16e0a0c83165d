/* Fused causal attention on tensor cores, FlashAttention-2's structure (Dao, 2023): the
 * flash_attention_tc slots (and their packed-document form) for head_dim 32, 64, 96 and
 * 128. Same layout, arguments, window and outputs as flash_attention_forward/backward
 * (kernels.h); pos [B,T] (or NULL) as flash_attention_doc.
 *
 * - A block is 4 warps and owns 64 rows (query rows: forward and dQ; key rows: dK and dV);
 *   each warp owns 16 of them. The other side streams through shared memory in tiles of
 *   64 rows, in a fixed order.
 * - Every product is an mma.sync m16n8k16 (bf16 inputs, fp32 accumulation, sm_80+) on
 *   register fragments: S = Q K^T and dP = dO V^T land in registers, and their
 *   accumulator layout is reused directly as the A operand of the next product (P V,
 *   dS K, P^T dO, dS^T Q), so scores never go through shared memory. The output, dQ, dK
 *   and dV accumulators stay in registers across all tiles (FA2's register accumulators).
 * - Online softmax per row in fp32 (max, sum, the rescale by exp(m_old - m_new)); the
 *   four lanes holding a row combine with two xor shuffles (a fixed order).
 * - The backward is deterministic without atomics: one kernel for dK, dV (per key tile,
 *   the group's query heads in order, then query tiles in order), one for dQ (per query
 *   tile, key tiles in order), each recomputing P from lse; drow = rowsum(dO * O) first.
 * - The forward's epilogue also writes out rounded to bf16 (out16, when asked: the o_proj
 *   GEMM's input, so no separate cast pass); the backward's epilogues likewise dqkv16,
 *   the qkv GEMM backward's dout16 (each dqkv element is added to by one thread, once).
 * - Inputs: q/k/v from qkv16, the bf16 copy of qkv (RoPE's or a cast's), by 16-byte
 *   cp.async copies into two shared-memory stages: the next tile is in flight while the
 *   current one is multiplied. Without qkv16 (or with a misaligned one) the same tiles
 *   from the fp32 qkv, rounded as they are stored (scalar coalesced loads), in the same
 *   two stages. dout stays fp32, rounded as loaded, one buffer.
 *
 * Rounding: q, k, v, dout, P and dS are bf16 in the products; everything else fp32. The
 * results agree with the fp32 op to bf16 tolerance (tests/test_gpu_kernels_flash_tc.c).
 * Compile-checked on a machine without a GPU; validated by the GPU check.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "fa2_tiles.cuh"

extern "C" {
#include "core/fault.h"
#include "core/log.h"
#include "ops.h"
}

/* ---- forward: block = (b, h, 64 query rows) ------------------------------------------ */

/* Src: float (qkv fp32, tiles rounded as loaded) or uint16_t (its bf16 copy, cp.async).
 * Shared memory: Q, then a.stages x K and V (two stages: the next tile is copied while
 * this one is multiplied; one: after it). */
template <int HD, typename Src>
static __global__ void __launch_bounds__(FA_THREADS)
fa2_forward_kernel(float *out, uint16_t *out16, float *lse, const Src *qkv, struct fa_view a,
		   int ntiles)
{
	const int LD = fa_ld<HD>::v;
	extern __shared__ __align__(16) unsigned char fa_sm[];
	__nv_bfloat16 *Qs = (__nv_bfloat16 *)fa_sm, *Kb = Qs + FA_BM * LD;
	__nv_bfloat16 *Vb = Kb + 2 * FA_BN * LD;
	const int it = blockIdx.x % ntiles, h = blockIdx.x / ntiles % a.NH;
	const long b = blockIdx.x / ntiles / a.NH;
	const int g = h / a.G, i0 = it * FA_BM, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const int r0 = i0 + warp * 16 + (lane >> 2), r1 = r0 + 8, cq = (lane & 3) * 2;
	const int ds0 = doc_start(a, b, r0), ds1 = doc_start(a, b, r1);
	const Src *x = qkv + b * a.T * a.S;
	const Src *xk = x + (long)(a.NH + g) * a.hd, *xv = x + (long)(a.NH + a.KV + g) * a.hd;
	const int jlast = i0 + FA_BM - 1 < a.T - 1 ? i0 + FA_BM - 1 : a.T - 1;
	const int jfirst = first_key_tile(a, b, i0);
	float o[HD / 8][4], m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
	uint32_t qa[HD / 16][4];

	load_tile<HD>(Qs, x + (long)h * a.hd, a.S, i0, FA_BM, a.T);
	cp_async_commit();
	load_tile<HD>(Kb, xk, a.S, jfirst, FA_BN, a.T);
	load_tile<HD>(Vb, xv, a.S, jfirst, FA_BN, a.T);
	cp_async_commit();
	cp_async_wait<1>(); /* Q is in (the first K, V may still be in flight) */
	__syncthreads();
	#pragma unroll
	for (int kk = 0; kk < HD / 16; kk++)
		frag_a<LD>(qa[kk], Qs, warp * 16, kk * 16, lane);
	#pragma unroll
	for (int n = 0; n < HD / 8; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	for (int j0 = jfirst, st = 0; j0 <= jlast; j0 += FA_BN, st ^= a.stages - 1) {
		const __nv_bfloat16 *Ks = Kb + st * FA_BN * LD, *Vs = Vb + st * FA_BN * LD;
		float s[FA_BN / 8][4];
		float mx0 = -INFINITY, mx1 = -INFINITY, sum0 = 0.0f, sum1 = 0.0f, al0, al1;

		/* two stages: the next tile into the other one (consumed: the last barrier) */
		if (a.stages == 2 && j0 + FA_BN <= jlast) {
			load_tile<HD>(Kb + (st ^ 1) * FA_BN * LD, xk, a.S, j0 + FA_BN, FA_BN, a.T);
			load_tile<HD>(Vb + (st ^ 1) * FA_BN * LD, xv, a.S, j0 + FA_BN, FA_BN, a.T);
		}
		cp_async_commit();
		cp_async_wait<1>(); /* every group but the one just committed: this tile */
		__syncthreads();
		/* S = Q K^T for the warp's 16 rows and the tile's 64 keys */
		#pragma unroll
		for (int j = 0; j < FA_BN / 8; j++) {
			s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
			#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++) {
				uint32_t b0, b1;

				frag_b_rows<LD>(&b0, &b1, Ks, j * 8, kk * 16, lane);
				mma16816(s[j], qa[kk], b0, b1);
			}
		}
		/* scale, mask, the tile's row maxima */
		#pragma unroll
		for (int j = 0; j < FA_BN / 8; j++)
			#pragma unroll
			for (int e = 0; e < 4; e++) {
				int t2 = j0 + j * 8 + cq + (e & 1);
				bool v = e < 2 ? visible(a, r0, t2, ds0) : visible(a, r1, t2, ds1);

				s[j][e] = v ? s[j][e] * a.scale : -INFINITY;
			}
		#pragma unroll
		for (int j = 0; j < FA_BN / 8; j++) {
			mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
			mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
		}
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
		mx0 = fmaxf(mx0, m0);
		mx1 = fmaxf(mx1, m1);
		/* a row that has seen no key yet keeps m = -inf: p = 0, no rescale */
		al0 = mx0 == -INFINITY ? 1.0f : expf(m0 - mx0);
		al1 = mx1 == -INFINITY ? 1.0f : expf(m1 - mx1);
		#pragma unroll
		for (int j = 0; j < FA_BN / 8; j++) {
			s[j][0] = mx0 == -INFINITY ? 0.0f : expf(s[j][0] - mx0);
			s[j][1] = mx0 == -INFINITY ? 0.0f : expf(s[j][1] - mx0);
			s[j][2] = mx1 == -INFINITY ? 0.0f : expf(s[j][2] - mx1);
			s[j][3] = mx1 == -INFINITY ? 0.0f : expf(s[j][3] - mx1);
			sum0 += s[j][0] + s[j][1];
			sum1 += s[j][2] + s[j][3];
		}
		sum0 += __shfl_xor_sync(0xffffffffu, sum0, 1);
		sum0 += __shfl_xor_sync(0xffffffffu, sum0, 2);
		sum1 += __shfl_xor_sync(0xffffffffu, sum1, 1);
		sum1 += __shfl_xor_sync(0xffffffffu, sum1, 2);
		l0 = l0 * al0 + sum0, m0 = mx0;
		l1 = l1 * al1 + sum1, m1 = mx1;
		#pragma unroll
		for (int n = 0; n < HD / 8; n++) {
			o[n][0] *= al0, o[n][1] *= al0;
			o[n][2] *= al1, o[n][3] *= al1;
		}
		/* O += P V: P's accumulators are the A operand (keys are the k dimension) */
		#pragma unroll
		for (int kk = 0; kk < FA_BN / 16; kk++) {
			uint32_t pa[4];

			c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
			#pragma unroll
			for (int n = 0; n < HD / 8; n++) {
				uint32_t b0, b1;

				frag_b_cols<LD>(&b0, &b1, Vs, n * 8, kk * 16, lane);
				mma16816(o[n], pa, b0, b1);
			}
		}
		__syncthreads(); /* this stage is consumed: the next iteration's copy targets it */
		/* one stage: the next tile into it now, a group of its own */
		if (a.stages == 1 && j0 + FA_BN <= jlast) {
			load_tile<HD>(Kb, xk, a.S, j0 + FA_BN, FA_BN, a.T);
			load_tile<HD>(Vb, xv, a.S, j0 + FA_BN, FA_BN, a.T);
			cp_async_commit();
		}
	}
	/* every row < T saw its own key: l > 0 */
	#pragma unroll
	for (int n = 0; n < HD / 8; n++) {
		int c = n * 8 + cq;

		if (r0 < a.T) {
			long at = (b * a.T + r0) * a.C + (long)h * a.hd + c;
			float v0 = o[n][0] / l0, v1 = o[n][1] / l0;

			out[at] = v0, out[at + 1] = v1;
			if (out16)
				out16[at] = zn_bf16_rne(v0), out16[at + 1] = zn_bf16_rne(v1);
		}
		if (r1 < a.T) {
			long at = (b * a.T + r1) * a.C + (long)h * a.hd + c;
			float v0 = o[n][2] / l1, v1 = o[n][3] / l1;

			out[at] = v0, out[at + 1] = v1;
			if (out16)
				out16[at] = zn_bf16_rne(v0), out16[at + 1] = zn_bf16_rne(v1);
		}
	}
	if ((lane & 3) == 0) {
		if (r0 < a.T)
			lse[(b * a.NH + h) * a.T + r0] = m0 + logf(l0);
		if (r1 < a.T)
			lse[(b * a.NH + h) * a.T + r1] = m1 + logf(l1);
	}
}

/* ---- backward: dK, dV; block = (b, kv head g, 64 key rows) --------------------------- */

/* dqkv[at], dqkv[at + 1] += v0, v1 (each element is added to once, by one thread), and
 * when asked the sums rounded to bf16 (the cast pass's bits: the next GEMM's input) */
static __device__ __forceinline__ void add2(float *dqkv, uint16_t *dqkv16, long at, float v0,
					    float v1)
{
	float s0 = dqkv[at] + v0, s1 = dqkv[at + 1] + v1;

	dqkv[at] = s0, dqkv[at + 1] = s1;
	if (dqkv16)
		dqkv16[at] = zn_bf16_rne(s0), dqkv16[at + 1] = zn_bf16_rne(s1);
}

/* Shared memory: K, V, then a.stages x Q, dO, and the query tile's lse, drow and document
 * starts. The (head, query tile) pairs run in a fixed order, heads outer. */
template <int HD, typename Src>
static __global__ void __launch_bounds__(FA_THREADS)
fa2_dkv_kernel(float *dqkv, uint16_t *dqkv16, const float *dout, const Src *qkv,
	       const float *lse, const float *drow, struct fa_view a, int ntiles)
{
	const int LD = fa_ld<HD>::v;
	extern __shared__ __align__(16) unsigned char fa_sm[];
	__nv_bfloat16 *Ks = (__nv_bfloat16 *)fa_sm, *Vs = Ks + FA_BM * LD, *Qb = Vs + FA_BM * LD;
	__nv_bfloat16 *Ds = Qb + 2 * FA_BN * LD;
	float *Ls = (float *)(Ds + FA_BN * LD), *Rs = Ls + FA_BN;
	int *Dst = (int *)(Rs + FA_BN);
	const int jt = blockIdx.x % ntiles, g = blockIdx.x / ntiles % a.KV;
	const long b = blockIdx.x / ntiles / a.KV;
	const int j0 = jt * FA_BM, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const int k0 = j0 + warp * 16 + (lane >> 2), k1 = k0 + 8, cq = (lane & 3) * 2;
	const Src *x = qkv + b * a.T * a.S;
	const float *d = dout + b * a.T * a.C;
	/* queries that may see these keys: from j0 up to the window's reach */
	const long qreach = a.window > 0 ? (long)j0 + FA_BM - 1 + a.window : (long)a.T;
	const int qend = qreach < a.T ? (int)qreach : a.T, qfirst = j0 / FA_BN * FA_BN;
	int qstop = qend, nq, total;
	float dk[HD / 8][4], dv[HD / 8][4];

	/* documents start in order: once q0's starts after these keys, no later query sees
	 * them (uniform across the block) */
	if (a.pos)
		for (int q0 = qfirst; q0 < qend; q0 += FA_BN)
			if (doc_start(a, b, q0) > j0 + FA_BM - 1) {
				qstop = q0;
				break;
			}
	nq = qstop > qfirst ? (qstop - qfirst + FA_BN - 1) / FA_BN : 0;
	total = a.G * nq;
	#pragma unroll
	for (int n = 0; n < HD / 8; n++)
		#pragma unroll
		for (int e = 0; e < 4; e++)
			dk[n][e] = dv[n][e] = 0.0f;
	load_tile<HD>(Ks, x + (long)(a.NH + g) * a.hd, a.S, j0, FA_BM, a.T);
	load_tile<HD>(Vs, x + (long)(a.NH + a.KV + g) * a.hd, a.S, j0, FA_BM, a.T);
	if (total > 0)
		load_tile<HD>(Qb, x + (long)(g * a.G) * a.hd, a.S, qfirst, FA_BN, a.T);
	cp_async_commit();
	for (int k = 0; k < total; k++) {
		const int h = g * a.G + k / nq, q0 = qfirst + k % nq * FA_BN;
		const int sg = a.stages == 2 ? k & 1 : 0;
		const __nv_bfloat16 *Qs = Qb + sg * FA_BN * LD;
		const float *ls = lse + (b * a.NH + h) * a.T, *dr = drow + (b * a.NH + h) * a.T;
		float st[FA_BN / 8][4], dpt[FA_BN / 8][4];

		/* two stages: the next pair's Q into the other one (consumed: the last barrier) */
		if (a.stages == 2 && k + 1 < total)
			load_tile<HD>(Qb + (sg ^ 1) * FA_BN * LD,
				      x + (long)(g * a.G + (k + 1) / nq) * a.hd, a.S,
				      qfirst + (k + 1) % nq * FA_BN, FA_BN, a.T);
		cp_async_commit();
		load_tile<HD>(Ds, d + (long)h * a.hd, a.C, q0, FA_BN, a.T);
		for (int i = threadIdx.x; i < FA_BN; i += FA_THREADS) {
			int t = q0 + i;

			Ls[i] = t < a.T ? ls[t] : 0.0f;
			Rs[i] = t < a.T ? dr[t] : 0.0f;
			Dst[i] = doc_start(a, b, t);
		}
		cp_async_wait<1>(); /* K, V and this pair's Q */
		__syncthreads();
		/* S^T = K Q^T and dP^T = V dO^T: the warp's 16 keys x 64 queries */
		#pragma unroll
		for (int j = 0; j < FA_BN / 8; j++) {
			st[j][0] = st[j][1] = st[j][2] = st[j][3] = 0.0f;
			dpt[j][0] = dpt[j][1] = dpt[j][2] = dpt[j][3] = 0.0f;
			#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++) {
				uint32_t fa[4], b0, b1;

				frag_a<LD>(fa, Ks, warp * 16, kk * 16, lane);
				frag_b_rows<LD>(&b0, &b1, Qs, j * 8, kk * 16, lane);
				mma16816(st[j], fa, b0, b1);
				frag_a<LD>(fa, Vs, warp * 16, kk * 16, lane);
				frag_b_rows<LD>(&b0, &b1, Ds, j * 8, kk * 16, lane);
				mma16816(dpt[j], fa, b0, b1);
			}
		}
		/* P^T = exp(S^T scale - lse[q]) where visible, dS^T = P^T (dP^T - drow[q]) */
		#pragma unroll
		for (int j = 0; j < FA_BN / 8; j++)
			#pragma unroll
			for (int e = 0; e < 4; e++) {
				int qi = j * 8 + cq + (e & 1), t = q0 + qi;
				int t2 = e < 2 ? k0 : k1;
				float p = visible(a, t, t2, Dst[qi]) ?
						  expf(st[j][e] * a.scale - Ls[qi]) : 0.0f;

				st[j][e] = p;
				dpt[j][e] = p * (dpt[j][e] - Rs[qi]);
			}
		/* dV += P^T dO, dK += dS^T Q (queries are the k dimension) */
		#pragma unroll
		for (int kk = 0; kk < FA_BN / 16; kk++) {
			uint32_t pa[4], sa[4];

			c_to_a(pa, st[2 * kk], st[2 * kk + 1]);
			c_to_a(sa, dpt[2 * kk], dpt[2 * kk + 1]);
			#pragma unroll
			for (int n = 0; n < HD / 8; n++) {
				uint32_t b0, b1;

				frag_b_cols<LD>(&b0, &b1, Ds, n * 8, kk * 16, lane);
				mma16816(dv[n], pa, b0, b1);
				frag_b_cols<LD>(&b0, &b1, Qs, n * 8, kk * 16, lane);
				mma16816(dk[n], sa, b0, b1);
			}
		}
		__syncthreads(); /* Q's stage, dO, lse, drow consumed */
		/* one stage: the next pair's Q into it now, a group of its own */
		if (a.stages == 1 && k + 1 < total) {
			load_tile<HD>(Qb, x + (long)(g * a.G + (k + 1) / nq) * a.hd, a.S,
				      qfirst + (k + 1) % nq * FA_BN, FA_BN, a.T);
			cp_async_commit();
		}
	}
	cp_async_wait<0>(); /* nothing left in flight at exit */
	#pragma unroll
	for (int n = 0; n < HD / 8; n++) {
		long ck = (long)(a.NH + g) * a.hd + n * 8 + cq;
		long cv = (long)(a.NH + a.KV + g) * a.hd + n * 8 + cq;

		if (k0 < a.T) {
			long row = (b * a.T + k0) * a.S;

			add2(dqkv, dqkv16, row + ck, dk[n][0] * a.scale, dk[n][1] * a.scale);
			add2(dqkv, dqkv16, row + cv, dv[n][0], dv[n][1]);
		}
		if (k1 < a.T) {
			long row = (b * a.T + k1) * a.S;

			add2(dqkv, dqkv16, row + ck, dk[n][2] * a.scale, dk[n][3] * a.scale);
			add2(dqkv, dqkv16, row + cv, dv[n][2], dv[n][3]);
		}
	}
}

/* ---- backward: dQ; block = (b, h, 64 query rows) ------------------------------------- */

/* Shared memory: Q, dO, then a.stages x K and V */
template <int HD, typename Src>
static __global__ void __launch_bounds__(FA_THREADS)
fa2_dq_kernel(float *dqkv, uint16_t *dqkv16, const float *dout, const Src *qkv,
	      const float *lse, const float *drow, struct fa_view a, int ntiles)
{
	const int LD = fa_ld<HD>::v;
	extern __shared__ __align__(16) unsigned char fa_sm[];
	__nv_bfloat16 *Qs = (__nv_bfloat16 *)fa_sm, *Ds = Qs + FA_BM * LD, *Kb = Ds + FA_BM * LD;
	__nv_bfloat16 *Vb = Kb + 2 * FA_BN * LD;
	const int it = blockIdx.x % ntiles, h = blockIdx.x / ntiles % a.NH;
	const long b = blockIdx.x / ntiles / a.NH;
	const int g = h / a.G, i0 = it * FA_BM, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const int r0 = i0 + warp * 16 + (lane >> 2), r1 = r0 + 8, cq = (lane & 3) * 2;
	const int ds0 = doc_start(a, b, r0), ds1 = doc_start(a, b, r1);
	const Src *x = qkv + b * a.T * a.S;
	const Src *xk = x + (long)(a.NH + g) * a.hd, *xv = x + (long)(a.NH + a.KV + g) * a.hd;
	const float *d = dout + b * a.T * a.C;
	const float *ls = lse + (b * a.NH + h) * a.T, *dr = drow + (b * a.NH + h) * a.T;
	const float lse0 = r0 < a.T ? ls[r0] : 0.0f, lse1 = r1 < a.T ? ls[r1] : 0.0f;
	const float dr0 = r0 < a.T ? dr[r0] : 0.0f, dr1 = r1 < a.T ? dr[r1] : 0.0f;
	const int jlast = i0 + FA_BM - 1 < a.T - 1 ? i0 + FA_BM - 1 : a.T - 1;
	const int jfirst = first_key_tile(a, b, i0);
	float dq[HD / 8][4];

	#pragma unroll
	for (int n = 0; n < HD / 8; n++)
		dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
	load_tile<HD>(Qs, x + (long)h * a.hd, a.S, i0, FA_BM, a.T);
	load_tile<HD>(Ds, d + (long)h * a.hd, a.C, i0, FA_BM, a.T);
	load_tile<HD>(Kb, xk, a.S, jfirst, FA_BN, a.T);
	load_tile<HD>(Vb, xv, a.S, jfirst, FA_BN, a.T);
	cp_async_commit();
	for (int j0 = jfirst, st = 0; j0 <= jlast; j0 += FA_BN, st ^= a.stages - 1) {
		const __nv_bfloat16 *Ks = Kb + st * FA_BN * LD, *Vs = Vb + st * FA_BN * LD;
		float s[FA_BN / 8][4], dp[FA_BN / 8][4];

		/* two stages: the next tile into the other one (consumed: the last barrier) */
		if (a.stages == 2 && j0 + FA_BN <= jlast) {
			load_tile<HD>(Kb + (st ^ 1) * FA_BN * LD, xk, a.S, j0 + FA_BN, FA_BN, a.T);
			load_tile<HD>(Vb + (st ^ 1) * FA_BN * LD, xv, a.S, j0 + FA_BN, FA_BN, a.T);
		}
		cp_async_commit();
		cp_async_wait<1>(); /* this tile (and Q, dO) */
		__syncthreads();
		/* S = Q K^T, dP = dO V^T: the warp's 16 queries x 64 keys */
		#pragma unroll
		for (int j = 0; j < FA_BN / 8; j++) {
			s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
			dp[j][0] = dp[j][1] = dp[j][2] = dp[j][3] = 0.0f;
			#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++) {
				uint32_t fa[4], b0, b1;

				frag_a<LD>(fa, Qs, warp * 16, kk * 16, lane);
				frag_b_rows<LD>(&b0, &b1, Ks, j * 8, kk * 16, lane);
				mma16816(s[j], fa, b0, b1);
				frag_a<LD>(fa, Ds, warp * 16, kk * 16, lane);
				frag_b_rows<LD>(&b0, &b1, Vs, j * 8, kk * 16, lane);
				mma16816(dp[j], fa, b0, b1);
			}
		}
		/* P = exp(S scale - lse) where visible; dS = P (dP - drow) */
		#pragma unroll
		for (int j = 0; j < FA_BN / 8; j++)
			#pragma unroll
			for (int e = 0; e < 4; e++) {
				int t2 = j0 + j * 8 + cq + (e & 1);
				bool v = e < 2 ? visible(a, r0, t2, ds0) : visible(a, r1, t2, ds1);
				float p = v ? expf(s[j][e] * a.scale - (e < 2 ? lse0 : lse1)) : 0.0f;

				dp[j][e] = p * (dp[j][e] - (e < 2 ? dr0 : dr1));
			}
		/* dQ += dS K (keys are the k dimension) */
		#pragma unroll
		for (int kk = 0; kk < FA_BN / 16; kk++) {
			uint32_t sa[4];

			c_to_a(sa, dp[2 * kk], dp[2 * kk + 1]);
			#pragma unroll
			for (int n = 0; n < HD / 8; n++) {
				uint32_t b0, b1;

				frag_b_cols<LD>(&b0, &b1, Ks, n * 8, kk * 16, lane);
				mma16816(dq[n], sa, b0, b1);
			}
		}
		__syncthreads(); /* this stage is consumed: the next iteration's copy targets it */
		/* one stage: the next tile into it now, a group of its own */
		if (a.stages == 1 && j0 + FA_BN <= jlast) {
			load_tile<HD>(Kb, xk, a.S, j0 + FA_BN, FA_BN, a.T);
			load_tile<HD>(Vb, xv, a.S, j0 + FA_BN, FA_BN, a.T);
			cp_async_commit();
		}
	}
	#pragma unroll
	for (int n = 0; n < HD / 8; n++) {
		long c = (long)h * a.hd + n * 8 + cq;

		if (r0 < a.T)
			add2(dqkv, dqkv16, (b * a.T + r0) * a.S + c, dq[n][0] * a.scale,
			     dq[n][1] * a.scale);
		if (r1 < a.T)
			add2(dqkv, dqkv16, (b * a.T + r1) * a.S + c, dq[n][2] * a.scale,
			     dq[n][3] * a.scale);
	}
}

/* ---- host side ------------------------------------------------------------------------ */

static int stages_for(int hd);

static struct fa_view fa_view_make(int T, int NH, int KV, int hd, int window, const int *pos)
{
	struct fa_view a;

	a.T = T, a.NH = NH, a.KV = KV, a.hd = hd, a.G = NH / KV, a.window = window;
	a.S = (long)(NH + 2 * KV) * hd, a.C = (long)NH * hd;
	a.scale = (float)(1.0 / sqrt((double)hd));
	a.stages = zn_cuda_fa2_supported(hd) ? stages_for(hd) : 1;
	a.pos = pos;
	return a;
}

bool zn_cuda_fa2_supported(int hd)
{
	return hd == 32 || hd == 64 || hd == 96 || hd == 128;
}

/* shared memory (bf16 tiles of 64 rows), st the stages of the streamed side (2 or 1): the
 * forward Q and st x (K, V); dK/dV K, V, st x Q and dO plus the query tile's lse, drow and
 * document starts; dQ Q, dO and st x (K, V) */
static size_t fwd_bytes(int hd, int st)
{
	return (1 + 2 * (size_t)st) * FA_BM * (hd + 8) * 2;
}

static size_t dkv_bytes(int hd, int st)
{
	return (3 + (size_t)st) * FA_BM * (hd + 8) * 2 + 3 * FA_BN * 4;
}

static size_t dq_bytes(int hd, int st)
{
	return (2 + 2 * (size_t)st) * FA_BM * (hd + 8) * 2;
}

/* 2 when the current device gives a block the double-buffered kernels' shared memory
 * (sm_80: 163 KB, sm_90: 227 KB; 99 KB on sm_86/89 parts is short of dQ's 104 KB at
 * head_dim 128), else 1 */
static int stages_for(int hd)
{
	int dev = 0, optin = 0;
	size_t most = dq_bytes(hd, 2);

	if (fwd_bytes(hd, 2) > most)
		most = fwd_bytes(hd, 2);
	if (dkv_bytes(hd, 2) > most)
		most = dkv_bytes(hd, 2);
	if (zn_fault_value(ZN_FAULT_FA2_ONE_STAGE)) /* tests: the one-stage kernels on any GPU */
		return 1;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
		    cudaSuccess)
		return 1;
	return (size_t)optin >= most ? 2 : 1;
}

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

template <int HD, typename Src>
static void forward_src(cudaStream_t s, const char *op, float *out, uint16_t *out16,
			float *lse, const Src *qkv, int B, const struct fa_view &a)
{
	int nt = (a.T + FA_BM - 1) / FA_BM;
	size_t smem = fwd_bytes(HD, a.stages);

	if (!smem_ok((const void *)fa2_forward_kernel<HD, Src>, smem, op))
		return;
	fa2_forward_kernel<HD, Src><<<(unsigned)((long)B * a.NH * nt), FA_THREADS, smem, s>>>(
		out, out16, lse, qkv, a, nt);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
}

template <int HD, typename Src>
static void backward_src(cudaStream_t s, const char *op, float *dqkv, uint16_t *dqkv16,
			 const float *drow, const float *dout, const Src *qkv, const float *lse,
			 int B, const struct fa_view &a)
{
	int nt = (a.T + FA_BM - 1) / FA_BM;
	size_t kv_smem = dkv_bytes(HD, a.stages), q_smem = dq_bytes(HD, a.stages);

	if (!smem_ok((const void *)fa2_dkv_kernel<HD, Src>, kv_smem, op) ||
	    !smem_ok((const void *)fa2_dq_kernel<HD, Src>, q_smem, op))
		return;
	fa2_dkv_kernel<HD, Src><<<(unsigned)((long)B * a.KV * nt), FA_THREADS, kv_smem, s>>>(
		dqkv, dqkv16, dout, qkv, lse, drow, a, nt);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
	fa2_dq_kernel<HD, Src><<<(unsigned)((long)B * a.NH * nt), FA_THREADS, q_smem, s>>>(
		dqkv, dqkv16, dout, qkv, lse, drow, a, nt);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
}

/* the tiles from qkv16 by cp.async when given and 16-byte aligned (carved buffers may not
 * be), else from the fp32 qkv: the same bf16 tiles either way */
static bool use16(const uint16_t *qkv16)
{
	return qkv16 && (uintptr_t)qkv16 % 16 == 0;
}

template <int HD>
static void forward_hd(cudaStream_t s, const char *op, float *out, uint16_t *out16,
		       float *lse, const float *qkv, const uint16_t *qkv16, int B,
		       const struct fa_view &a)
{
	if (use16(qkv16))
		forward_src<HD>(s, op, out, out16, lse, qkv16, B, a);
	else
		forward_src<HD>(s, op, out, out16, lse, qkv, B, a);
}

template <int HD>
static void backward_hd(cudaStream_t s, const char *op, float *dqkv, uint16_t *dqkv16,
			const float *drow, const float *dout, const float *qkv,
			const uint16_t *qkv16, const float *lse, int B, const struct fa_view &a)
{
	if (use16(qkv16))
		backward_src<HD>(s, op, dqkv, dqkv16, drow, dout, qkv16, lse, B, a);
	else
		backward_src<HD>(s, op, dqkv, dqkv16, drow, dout, qkv, lse, B, a);
}

void zn_cuda_fa2_forward(void *stream, float *out, uint16_t *out16, float *lse,
			 const float *qkv, const uint16_t *qkv16, const int *pos, int B, int T,
			 int NH, int KV, int hd, int window)
{
	const char *op = pos ? "flash_attention_doc_tc_forward" : "flash_attention_tc_forward";
	struct fa_view a = fa_view_make(T, NH, KV, hd, window, pos);
	cudaStream_t s = (cudaStream_t)stream;

	if (B < 1 || T < 1)
		return;
	switch (hd) {
	case 32: forward_hd<32>(s, op, out, out16, lse, qkv, qkv16, B, a); break;
	case 64: forward_hd<64>(s, op, out, out16, lse, qkv, qkv16, B, a); break;
	case 96: forward_hd<96>(s, op, out, out16, lse, qkv, qkv16, B, a); break;
	case 128: forward_hd<128>(s, op, out, out16, lse, qkv, qkv16, B, a); break;
	default:
		zn_error("%s: head_dim %d: the FlashAttention-2 kernels take 32, 64, 96, 128", op,
			 hd);
		zn_cuda_note_error();
	}
}

void zn_cuda_fa2_backward(void *stream, float *dqkv, uint16_t *dqkv16, float *drow,
			  const float *dout, const float *qkv, const uint16_t *qkv16,
			  const float *out, const float *lse, const int *pos, int B, int T, int NH,
			  int KV, int hd, int window)
{
	const char *op = pos ? "flash_attention_doc_tc_backward" : "flash_attention_tc_backward";
	struct fa_view a = fa_view_make(T, NH, KV, hd, window, pos);
	cudaStream_t s = (cudaStream_t)stream;

	if (B < 1 || T < 1)
		return;
	zn_cuda_flash_drow(s, op, drow, dout, out, B, T, NH, hd);
	switch (hd) {
	case 32: backward_hd<32>(s, op, dqkv, dqkv16, drow, dout, qkv, qkv16, lse, B, a); break;
	case 64: backward_hd<64>(s, op, dqkv, dqkv16, drow, dout, qkv, qkv16, lse, B, a); break;
	case 96: backward_hd<96>(s, op, dqkv, dqkv16, drow, dout, qkv, qkv16, lse, B, a); break;
	case 128:
		backward_hd<128>(s, op, dqkv, dqkv16, drow, dout, qkv, qkv16, lse, B, a);
		break;
	default:
		zn_error("%s: head_dim %d: the FlashAttention-2 kernels take 32, 64, 96, 128", op,
			 hd);
		zn_cuda_note_error();
	}
}
