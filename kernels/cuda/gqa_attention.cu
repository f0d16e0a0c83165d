/* Grouped-query causal attention on CUDA: cuBLAS strided-batched GEMMs straight on the
 * fused qkv layout [B,T,S], S = (NH + 2 KV) hd, and one warp per (b, h, t) row for the
 * masked softmax and its gradient (kernels/cpu/gqa_attention.c has the semantics).
 *
 * Query head h = g*G + r (G = NH/KV) uses key/value head g. For one b and one r, the KV
 * heads g form one strided batch: q at column r*hd + g*(G*hd), k and v at g*hd, scores at
 * (b*NH + r)*T*T + g*(G*T*T). So each b takes G batched GEMMs of batch KV per product.
 * dk and dv of head g sum over its G query heads: the G GEMMs accumulate (beta 1) one
 * after the other on the stream, in r order, so the sums are deterministic (no atomics).
 *
 * The GEMMs compute full T x T blocks; the softmax kernels write the masked entries of
 * preatt, att, datt and dpreatt as 0, so the full-block GEMMs that follow are exact.
 */
#include <float.h>

#include "common.cuh"

extern "C" {
#include "ops.h"
}

#define ROWS_PER_BLOCK 8 /* warps per block */

static __device__ __forceinline__ int first_key(int t, int window)
{
	return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
}

/* row r = (b*NH + h)*T + t: masked softmax in place of the scores */
static __global__ void gqa_softmax_kernel(float *att, float *preatt, long rows, int T,
					  int window)
{
	long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;

	if (r >= rows)
		return;
	int t = (int)(r % T), t0 = first_key(t, window);
	float *p = preatt + r * T;
	float *a = att + r * T;
	float mx = -FLT_MAX, sum = 0.0f;

	for (int t2 = t0 + lane; t2 <= t; t2 += 32)
		mx = fmaxf(mx, p[t2]);
	mx = zn_warp_max(mx);
	for (int t2 = t0 + lane; t2 <= t; t2 += 32)
		sum += expf(p[t2] - mx);
	float inv = 1.0f / zn_warp_sum(sum); /* >= 1: the max term is exp(0) */

	for (int t2 = lane; t2 < T; t2 += 32) {
		if (t2 >= t0 && t2 <= t) {
			a[t2] = expf(p[t2] - mx) * inv;
		} else {
			a[t2] = 0.0f;
			p[t2] = 0.0f;
		}
	}
}

/* dpreatt = att * (datt - sum(att * datt)) over the visible keys; others written 0 */
static __global__ void gqa_softmax_backward_kernel(float *dpreatt, float *datt,
						   const float *att, long rows, int T,
						   int window)
{
	long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;

	if (r >= rows)
		return;
	int t = (int)(r % T), t0 = first_key(t, window);
	const float *a = att + r * T;
	float *da = datt + r * T;
	float *dp = dpreatt + r * T;
	float s = 0.0f;

	for (int t2 = t0 + lane; t2 <= t; t2 += 32)
		s += a[t2] * da[t2];
	s = zn_warp_sum(s);
	for (int t2 = lane; t2 < T; t2 += 32) {
		if (t2 >= t0 && t2 <= t) {
			dp[t2] = a[t2] * (da[t2] - s);
		} else {
			dp[t2] = 0.0f;
			da[t2] = 0.0f;
		}
	}
}

/* the offsets of one (b, r) batch of KV heads */
struct gqa_view {
	int T, NH, KV, hd, G;
	long S, C;          /* qkv and out row strides */
	long long TT;       /* T*T */
	long long sq, sa;   /* batch strides: q/out (G*hd) and scores (G*T*T) */
	float scale;
};

static struct gqa_view view(int T, int NH, int KV, int hd)
{
	struct gqa_view v;

	v.T = T, v.NH = NH, v.KV = KV, v.hd = hd, v.G = NH / KV;
	v.S = (long)(NH + 2 * KV) * hd;
	v.C = (long)NH * hd;
	v.TT = (long long)T * T;
	v.sq = (long long)v.G * hd;
	v.sa = (long long)v.G * v.TT;
	v.scale = (float)(1.0 / sqrt((double)hd));
	return v;
}

static unsigned row_blocks(long rows)
{
	return zn_cuda_grid(rows, ROWS_PER_BLOCK);
}

extern "C" void zn_cuda_gqa_attention_forward(void *stream, float *out, float *preatt,
					      float *att, const float *qkv, int B, int T,
					      int NH, int KV, int hd, int window)
{
	const char *op = "gqa_attention_forward";
	struct gqa_view v = view(T, NH, KV, hd);
	long rows = (long)B * NH * T;

	for (int b = 0; b < B; b++)
		for (int r = 0; r < v.G; r++) {
			const float *x = qkv + (long)b * T * v.S;
			long long a0 = ((long long)b * NH + r) * v.TT;

			/* preatt[b,h] = scale * q[b,h] @ k[b,g]^T */
			zn_cuda_gemm(stream, op, false, true, T, T, hd, v.scale, x + (long)r * hd,
				     (int)v.S, v.sq, x + v.C, (int)v.S, hd, 0.0f, preatt + a0, T,
				     v.sa, KV);
		}
	gqa_softmax_kernel<<<row_blocks(rows), 32 * ROWS_PER_BLOCK, 0, (cudaStream_t)stream>>>(
		att, preatt, rows, T, window);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
	for (int b = 0; b < B; b++)
		for (int r = 0; r < v.G; r++) {
			const float *x = qkv + (long)b * T * v.S;
			long long a0 = ((long long)b * NH + r) * v.TT;

			/* out[b,:,h] = att[b,h] @ v[b,g] */
			zn_cuda_gemm(stream, op, false, false, T, hd, T, 1.0f, att + a0, T, v.sa,
				     x + v.C + (long)KV * hd, (int)v.S, hd, 0.0f,
				     out + (long)b * T * v.C + (long)r * hd, (int)v.C, v.sq, KV);
		}
}

extern "C" void zn_cuda_gqa_attention_backward(void *stream, float *dqkv, float *dpreatt,
					       float *datt, const float *dout,
					       const float *qkv, const float *att, int B, int T,
					       int NH, int KV, int hd, int window)
{
	const char *op = "gqa_attention_backward";
	struct gqa_view v = view(T, NH, KV, hd);
	long rows = (long)B * NH * T;

	for (int b = 0; b < B; b++)
		for (int r = 0; r < v.G; r++) {
			const float *x = qkv + (long)b * T * v.S;
			const float *d = dout + (long)b * T * v.C + (long)r * hd;
			float *dx = dqkv + (long)b * T * v.S;
			long long a0 = ((long long)b * NH + r) * v.TT;

			/* datt[b,h] = dout[b,h] @ v[b,g]^T (written) */
			zn_cuda_gemm(stream, op, false, true, T, T, hd, 1.0f, d, (int)v.C, v.sq,
				     x + v.C + (long)KV * hd, (int)v.S, hd, 0.0f, datt + a0, T,
				     v.sa, KV);
			/* dv[b,g] += att[b,h]^T @ dout[b,h] */
			zn_cuda_gemm(stream, op, true, false, T, hd, T, 1.0f, att + a0, T, v.sa, d,
				     (int)v.C, v.sq, 1.0f, dx + v.C + (long)KV * hd, (int)v.S, hd,
				     KV);
		}
	gqa_softmax_backward_kernel<<<row_blocks(rows), 32 * ROWS_PER_BLOCK, 0,
				      (cudaStream_t)stream>>>(dpreatt, datt, att, rows, T, window);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
	for (int b = 0; b < B; b++)
		for (int r = 0; r < v.G; r++) {
			const float *x = qkv + (long)b * T * v.S;
			float *dx = dqkv + (long)b * T * v.S;
			long long a0 = ((long long)b * NH + r) * v.TT;

			/* dq[b,h] += scale * dpreatt[b,h] @ k[b,g] */
			zn_cuda_gemm(stream, op, false, false, T, hd, T, v.scale, dpreatt + a0, T,
				     v.sa, x + v.C, (int)v.S, hd, 1.0f, dx + (long)r * hd, (int)v.S,
				     v.sq, KV);
			/* dk[b,g] += scale * dpreatt[b,h]^T @ q[b,h] */
			zn_cuda_gemm(stream, op, true, false, T, hd, T, v.scale, dpreatt + a0, T,
				     v.sa, x + (long)r * hd, (int)v.S, v.sq, 1.0f, dx + v.C,
				     (int)v.S, hd, KV);
		}
}
