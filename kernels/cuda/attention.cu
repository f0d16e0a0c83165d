/* Causal multi-head attention on CUDA: cuBLAS strided-batched GEMMs straight on the qkv
 * layout (no permute buffers: head h of batch b is a [T, hs] matrix with row stride 3C
 * starting at channel h*hs, so the NH heads of one b are one strided batch) and one warp
 * per (b, h, t) row for the causal softmax and its gradient.
 *
 * The GEMMs compute full T x T score blocks; the softmax kernels then write the masked
 * (t2 > t) entries of preatt, att, datt and dpreatt as 0, as kernels/cpu does, and the
 * zero att / dpreatt entries make the full-block GEMMs that follow exact.
 * One GEMM set per b (B calls of batch NH each): simple, fine for moderate B.
 */
#include <float.h>

#include "common.cuh"

extern "C" {
#include "ops.h"
}

#define ROWS_PER_BLOCK 8 /* warps per block */

/* row r = (b*NH + h)*T + t of preatt/att: causal softmax in place of the scores */
static __global__ void attention_softmax_kernel(float *att, float *preatt, long rows, int T)
{
	long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;

	if (r >= rows)
		return;
	int t = (int)(r % T);
	float *p = preatt + r * T;
	float *a = att + r * T;
	float mx = -FLT_MAX, sum = 0.0f;

	for (int t2 = lane; t2 <= t; t2 += 32)
		mx = fmaxf(mx, p[t2]);
	mx = zn_warp_max(mx);
	for (int t2 = lane; t2 <= t; t2 += 32)
		sum += expf(p[t2] - mx);
	float inv = 1.0f / zn_warp_sum(sum); /* >= 1: the max term is exp(0) */

	for (int t2 = lane; t2 < T; t2 += 32) {
		if (t2 <= t) {
			a[t2] = expf(p[t2] - mx) * inv;
		} else {
			a[t2] = 0.0f;
			p[t2] = 0.0f;
		}
	}
}

/* dpreatt = att * (datt - sum(att * datt)) over t2 <= t; masked entries of both written 0 */
static __global__ void attention_softmax_backward_kernel(float *dpreatt, float *datt,
						  const float *att, long rows, int T)
{
	long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;

	if (r >= rows)
		return;
	int t = (int)(r % T);
	const float *a = att + r * T;
	float *da = datt + r * T;
	float *dp = dpreatt + r * T;
	float s = 0.0f;

	for (int t2 = lane; t2 <= t; t2 += 32)
		s += a[t2] * da[t2];
	s = zn_warp_sum(s);
	for (int t2 = lane; t2 < T; t2 += 32) {
		if (t2 <= t) {
			dp[t2] = a[t2] * (da[t2] - s);
		} else {
			dp[t2] = 0.0f;
			da[t2] = 0.0f;
		}
	}
}

static unsigned row_blocks(long rows)
{
	return zn_cuda_grid(rows, ROWS_PER_BLOCK);
}

extern "C" void zn_cuda_attention_forward(void *stream, float *out, float *preatt, float *att,
					  const float *inp, int B, int T, int C, int NH)
{
	int hs = C / NH, C3 = 3 * C;
	long long TT = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hs);
	long rows = (long)B * NH * T;

	for (int b = 0; b < B; b++) {
		const float *q = inp + (long)b * T * C3, *k = q + C;

		/* preatt[b,h] = scale * q[b,h] @ k[b,h]^T, [T,T] */
		zn_cuda_gemm(stream, "attention_forward", false, true, T, T, hs, scale, q, C3, hs,
			     k, C3, hs, 0.0f, preatt + b * NH * TT, T, TT, NH);
	}
	attention_softmax_kernel<<<row_blocks(rows), 32 * ROWS_PER_BLOCK, 0,
				   (cudaStream_t)stream>>>(att, preatt, rows, T);
	zn_cuda_note_launch("attention_forward", __FILE__, __LINE__);
	for (int b = 0; b < B; b++) {
		const float *v = inp + (long)b * T * C3 + 2 * C;

		/* out[b,:,h] = att[b,h] @ v[b,h], [T,hs] with row stride C */
		zn_cuda_gemm(stream, "attention_forward", false, false, T, hs, T, 1.0f,
			     att + b * NH * TT, T, TT, v, C3, hs, 0.0f, out + (long)b * T * C, C,
			     hs, NH);
	}
}

extern "C" void zn_cuda_attention_backward(void *stream, float *dinp, float *dpreatt,
					   float *datt, const float *dout, const float *inp,
					   const float *att, int B, int T, int C, int NH)
{
	int hs = C / NH, C3 = 3 * C;
	long long TT = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hs);
	long rows = (long)B * NH * T;

	for (int b = 0; b < B; b++) {
		const float *v = inp + (long)b * T * C3 + 2 * C;
		const float *d = dout + (long)b * T * C;
		float *dv = dinp + (long)b * T * C3 + 2 * C;

		/* datt[b,h] = dout[b,h] @ v[b,h]^T (written) */
		zn_cuda_gemm(stream, "attention_backward", false, true, T, T, hs, 1.0f, d, C, hs, v,
			     C3, hs, 0.0f, datt + b * NH * TT, T, TT, NH);
		/* dv[b,h] += att[b,h]^T @ dout[b,h] */
		zn_cuda_gemm(stream, "attention_backward", true, false, T, hs, T, 1.0f,
			     att + b * NH * TT, T, TT, d, C, hs, 1.0f, dv, C3, hs, NH);
	}
	attention_softmax_backward_kernel<<<row_blocks(rows), 32 * ROWS_PER_BLOCK, 0,
					    (cudaStream_t)stream>>>(dpreatt, datt, att, rows, T);
	zn_cuda_note_launch("attention_backward", __FILE__, __LINE__);
	for (int b = 0; b < B; b++) {
		const float *q = inp + (long)b * T * C3, *k = q + C;
		float *dq = dinp + (long)b * T * C3, *dk = dq + C;
		const float *dp = dpreatt + b * NH * TT;

		/* dq[b,h] += scale * dpreatt[b,h] @ k[b,h] */
		zn_cuda_gemm(stream, "attention_backward", false, false, T, hs, T, scale, dp, T, TT,
			     k, C3, hs, 1.0f, dq, C3, hs, NH);
		/* dk[b,h] += scale * dpreatt[b,h]^T @ q[b,h] */
		zn_cuda_gemm(stream, "attention_backward", true, false, T, hs, T, scale, dp, T, TT,
			     q, C3, hs, 1.0f, dk, C3, hs, NH);
	}
}
