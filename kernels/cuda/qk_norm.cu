/* Qwen3's q_norm / k_norm on CUDA (kernels.h qk_rmsnorm_*): one warp per row (a token's
 * query or key head of hd channels) for the forward and the in-place input gradient, with
 * kernels/cuda/rmsnorm.cu's reductions; the weights' gradients by a column reduction over
 * the rows of each kind with a fixed tree (no atomics). Same formulas as
 * kernels/cpu/qk_norm.c. */
#include "common.cuh"

extern "C" {
#include "ops.h"
}

#define ROWS_PER_BLOCK 8 /* warps per block */

static __device__ __forceinline__ long warp_row(void)
{
	return ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
}

/* the row's first channel in qkv [BT, S]: query heads 0 .. NH-1, then key heads */
static __device__ __forceinline__ long row_at(long r, int NH, int KV, int hd)
{
	long token = r / (NH + KV);
	int h = (int)(r % (NH + KV));

	return token * (long)(NH + 2 * KV) * hd + (long)h * hd;
}

static __global__ void qk_forward_kernel(float *out, float *rstd, const float *inp,
					 const float *wq, const float *wk, float eps, long rows,
					 int NH, int KV, int hd)
{
	long row = warp_row();
	int lane = threadIdx.x % 32;

	if (row >= rows) /* whole warps leave together: row is per warp */
		return;
	long at = row_at(row, NH, KV, hd);
	const float *x = inp + at, *w = (row % (NH + KV)) < NH ? wq : wk;
	float *o = out + at;
	float ss = 0.0f;

	for (int i = lane; i < hd; i += 32)
		ss += x[i] * x[i];
	float s = 1.0f / sqrtf(zn_warp_sum(ss) / hd + eps);

	for (int i = lane; i < hd; i += 32)
		o[i] = (x[i] * s) * w[i];
	if (lane == 0)
		rstd[row] = s;
}

/* the value heads of each token: copied */
static __global__ void copy_v_kernel(float *out, const float *inp, long BT, int NH, int KV,
				     int hd)
{
	long n = (long)KV * hd, i = (long)blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= BT * n)
		return;
	long t = i / n, at = t * (long)(NH + 2 * KV) * hd + (long)(NH + KV) * hd + i % n;

	out[at] = inp[at];
}

static __global__ void qk_backward_inp_kernel(float *dqkv, const float *inp, const float *wq,
					      const float *wk, const float *rstd, long rows,
					      int NH, int KV, int hd)
{
	long row = warp_row();
	int lane = threadIdx.x % 32;

	if (row >= rows)
		return;
	long at = row_at(row, NH, KV, hd);
	const float *x = inp + at, *w = (row % (NH + KV)) < NH ? wq : wk;
	float *d = dqkv + at;
	float s = rstd[row], gn = 0.0f;

	for (int i = lane; i < hd; i += 32)
		gn += w[i] * d[i] * (x[i] * s);
	gn = zn_warp_sum(gn) / hd; /* every lane has read its d[i] before any writes */
	for (int i = lane; i < hd; i += 32)
		d[i] = s * (w[i] * d[i] - (x[i] * s) * gn);
}

/* block: 32 channels x 32 row lanes; rows of heads h0 .. h0+nh-1 of every token */
static __global__ void qk_backward_weight_kernel(float *dw, const float *dqkv, const float *inp,
						 const float *rstd, long BT, int NH, int KV,
						 int hd, int h0, int nh)
{
	__shared__ float part[32][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float acc = 0.0f;

	if (c < hd)
		for (long k = threadIdx.y; k < BT * nh; k += 32) {
			long r = (k / nh) * (NH + KV) + h0 + k % nh;
			long at = row_at(r, NH, KV, hd) + c;

			acc += (inp[at] * rstd[r]) * dqkv[at];
		}
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < hd) {
		float s = 0.0f;

		for (int y = 0; y < 32; y++)
			s += part[y][threadIdx.x];
		dw[c] += s;
	}
}

extern "C" void zn_cuda_qk_rmsnorm_forward(void *stream, float *out, float *rstd,
					   const float *inp, const float *wq, const float *wk,
					   float eps, int B, int T, int NH, int KV, int hd)
{
	cudaStream_t s = (cudaStream_t)stream;
	long BT = (long)B * T, rows = BT * (NH + KV);

	qk_forward_kernel<<<zn_cuda_grid(rows, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0, s>>>(
		out, rstd, inp, wq, wk, eps, rows, NH, KV, hd);
	zn_cuda_note_launch("qk_rmsnorm_forward", __FILE__, __LINE__);
	copy_v_kernel<<<zn_cuda_grid(BT * KV * hd, 256), 256, 0, s>>>(out, inp, BT, NH, KV, hd);
	zn_cuda_note_launch("qk_rmsnorm_forward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_qk_rmsnorm_backward(void *stream, float *dqkv, float *dwq, float *dwk,
					    const float *inp, const float *wq, const float *wk,
					    const float *rstd, int B, int T, int NH, int KV,
					    int hd)
{
	cudaStream_t s = (cudaStream_t)stream;
	long BT = (long)B * T, rows = BT * (NH + KV);

	/* the weights' gradients first: they read dqkv before it is overwritten (one stream:
	 * in order) */
	if (dwq)
		qk_backward_weight_kernel<<<zn_cuda_grid(hd, 32), dim3(32, 32), 0, s>>>(
			dwq, dqkv, inp, rstd, BT, NH, KV, hd, 0, NH);
	if (dwk)
		qk_backward_weight_kernel<<<zn_cuda_grid(hd, 32), dim3(32, 32), 0, s>>>(
			dwk, dqkv, inp, rstd, BT, NH, KV, hd, NH, KV);
	zn_cuda_note_launch("qk_rmsnorm_backward", __FILE__, __LINE__);
	qk_backward_inp_kernel<<<zn_cuda_grid(rows, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0, s>>>(
		dqkv, inp, wq, wk, rstd, rows, NH, KV, hd);
	zn_cuda_note_launch("qk_rmsnorm_backward", __FILE__, __LINE__);
}
