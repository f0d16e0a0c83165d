/* RMSNorm on CUDA: one warp per row for the forward and for dinp (fixed butterfly
 * reductions); dweight by a column reduction with a fixed tree (no atomics). Same
 * formulas as kernels/cpu/rmsnorm.c: rstd = 1/sqrt(mean(x^2) + eps), out = (x*rstd)*w.
 */
#include "common.cuh"

extern "C" {
#include "ops.h"
}

#define ROWS_PER_BLOCK 8 /* warps per block */

static __device__ __forceinline__ long warp_row(void)
{
	return ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
}

/* OutT float: the op; uint16_t: rmsnorm_forward_bf16out (the same value, rounded) */
template <typename OutT>
static __global__ void rmsnorm_forward_kernel(OutT *out, float *rstd, const float *inp,
					      const float *weight, float eps, long BT, int C)
{
	long row = warp_row();
	int lane = threadIdx.x % 32;

	if (row >= BT) /* whole warps leave together: row is per warp */
		return;
	const float *x = inp + row * C;
	OutT *o = out + row * C;
	float ss = 0.0f;

	for (int i = lane; i < C; i += 32)
		ss += x[i] * x[i];
	float s = 1.0f / sqrtf(zn_warp_sum(ss) / C + eps);

	for (int i = lane; i < C; i += 32)
		zn_put(o + i, (x[i] * s) * weight[i]);
	if (lane == 0)
		rstd[row] = s;
}

static __global__ void rmsnorm_backward_inp_kernel(float *dinp, const float *dout,
						   const float *inp, const float *weight,
						   const float *rstd, long BT, int C)
{
	long row = warp_row();
	int lane = threadIdx.x % 32;

	if (row >= BT)
		return;
	const float *d = dout + row * C;
	const float *x = inp + row * C;
	float *di = dinp + row * C;
	float s = rstd[row], gn = 0.0f;

	for (int i = lane; i < C; i += 32)
		gn += weight[i] * d[i] * (x[i] * s);
	gn = zn_warp_sum(gn) / C;
	for (int i = lane; i < C; i += 32)
		di[i] += s * (weight[i] * d[i] - (x[i] * s) * gn);
}

/* block: 32 channels x 32 row lanes, as zn_cuda_column_sum */
static __global__ void rmsnorm_backward_weight_kernel(float *dweight, const float *dout,
						      const float *inp, const float *rstd,
						      long BT, int C)
{
	__shared__ float part[32][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float acc = 0.0f;

	if (c < C)
		for (long r = threadIdx.y; r < BT; r += 32)
			acc += (inp[r * C + c] * rstd[r]) * dout[r * C + c];
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		float s = 0.0f;

		for (int y = 0; y < 32; y++)
			s += part[y][threadIdx.x];
		dweight[c] += s;
	}
}

extern "C" void zn_cuda_rmsnorm_forward(void *stream, float *out, float *rstd,
					const float *inp, const float *weight, float eps, int B,
					int T, int C)
{
	long BT = (long)B * T;

	rmsnorm_forward_kernel<float><<<zn_cuda_grid(BT, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0,
					(cudaStream_t)stream>>>(out, rstd, inp, weight, eps, BT, C);
	zn_cuda_note_launch("rmsnorm_forward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_rmsnorm_forward_bf16out(void *stream, uint16_t *out16, float *rstd,
						const float *inp, const float *weight, float eps,
						int B, int T, int C)
{
	long BT = (long)B * T;

	rmsnorm_forward_kernel<uint16_t><<<zn_cuda_grid(BT, ROWS_PER_BLOCK),
					   32 * ROWS_PER_BLOCK, 0, (cudaStream_t)stream>>>(
		out16, rstd, inp, weight, eps, BT, C);
	zn_cuda_note_launch("rmsnorm_forward_bf16out", __FILE__, __LINE__);
}

extern "C" void zn_cuda_rmsnorm_backward(void *stream, float *dinp, float *dweight,
					 const float *dout, const float *inp,
					 const float *weight, const float *rstd, int B, int T,
					 int C)
{
	cudaStream_t s = (cudaStream_t)stream;
	long BT = (long)B * T;

	rmsnorm_backward_inp_kernel<<<zn_cuda_grid(BT, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0,
				      s>>>(dinp, dout, inp, weight, rstd, BT, C);
	zn_cuda_note_launch("rmsnorm_backward", __FILE__, __LINE__);
	if (!dweight) /* a frozen weight: skipped */
		return;
	rmsnorm_backward_weight_kernel<<<zn_cuda_grid(C, 32), dim3(32, 32), 0, s>>>(
		dweight, dout, inp, rstd, BT, C);
	zn_cuda_note_launch("rmsnorm_backward", __FILE__, __LINE__);
}
