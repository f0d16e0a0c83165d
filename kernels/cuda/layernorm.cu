/* LayerNorm on CUDA: one warp per row for the forward and for dinp (fixed butterfly
 * reductions); dweight and dbias by a column reduction with a fixed tree (no atomics).
 * Same formulas as kernels/cpu: two-pass mean and biased variance, rstd = 1/sqrt(var+eps).
 */
#include "common.cuh"

extern "C" {
#include "ops.h"
}

#define LN_EPS 1e-5f
#define ROWS_PER_BLOCK 8 /* warps per block */

static __device__ __forceinline__ long warp_row(void)
{
	return ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
}

/* OutT float: the op; uint16_t: layernorm_forward_bf16out (the same value, rounded) */
template <typename OutT>
static __global__ void layernorm_forward_kernel(OutT *out, float *mean, float *rstd,
					 const float *inp, const float *weight, const float *bias,
					 long BT, int C)
{
	long row = warp_row();
	int lane = threadIdx.x % 32;

	if (row >= BT) /* whole warps leave together: row is per warp */
		return;
	const float *x = inp + row * C;
	OutT *o = out + row * C;
	float m = 0.0f, v = 0.0f;

	for (int i = lane; i < C; i += 32)
		m += x[i];
	m = zn_warp_sum(m) / C;
	for (int i = lane; i < C; i += 32) {
		float d = x[i] - m;

		v += d * d;
	}
	v = zn_warp_sum(v) / C;
	float s = 1.0f / sqrtf(v + LN_EPS);

	for (int i = lane; i < C; i += 32)
		zn_put(o + i, (x[i] - m) * s * weight[i] + bias[i]);
	if (lane == 0) {
		mean[row] = m;
		rstd[row] = s;
	}
}

static __global__ void layernorm_backward_inp_kernel(float *dinp, const float *dout, const float *inp,
					      const float *weight, const float *mean,
					      const float *rstd, long BT, int C)
{
	long row = warp_row();
	int lane = threadIdx.x % 32;

	if (row >= BT)
		return;
	const float *d = dout + row * C;
	const float *x = inp + row * C;
	float *di = dinp + row * C;
	float m = mean[row], s = rstd[row];
	float dmean = 0.0f, dnmean = 0.0f;

	for (int i = lane; i < C; i += 32) {
		float dn = weight[i] * d[i];

		dmean += dn;
		dnmean += dn * (x[i] - m) * s;
	}
	dmean = zn_warp_sum(dmean) / C;
	dnmean = zn_warp_sum(dnmean) / C;
	for (int i = lane; i < C; i += 32) {
		float norm = (x[i] - m) * s;
		float dn = weight[i] * d[i];

		di[i] += (dn - dmean - norm * dnmean) * s;
	}
}

/* block: 32 channels x 32 row lanes, as zn_cuda_column_sum, for both sums at once */
static __global__ void layernorm_backward_weight_kernel(float *dweight, float *dbias,
						 const float *dout, const float *inp,
						 const float *mean, const float *rstd, long BT,
						 int C)
{
	__shared__ float pw[32][33], pb[32][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float aw = 0.0f, ab = 0.0f;

	if (c < C)
		for (long r = threadIdx.y; r < BT; r += 32) {
			float d = dout[r * C + c];

			aw += (inp[r * C + c] - mean[r]) * rstd[r] * d;
			ab += d;
		}
	pw[threadIdx.y][threadIdx.x] = aw;
	pb[threadIdx.y][threadIdx.x] = ab;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		float sw = 0.0f, sb = 0.0f;

		for (int y = 0; y < 32; y++) {
			sw += pw[y][threadIdx.x];
			sb += pb[y][threadIdx.x];
		}
		dweight[c] += sw;
		dbias[c] += sb;
	}
}

static unsigned row_blocks(long BT)
{
	return zn_cuda_grid(BT, ROWS_PER_BLOCK);
}

extern "C" void zn_cuda_layernorm_forward(void *stream, float *out, float *mean, float *rstd,
					  const float *inp, const float *weight,
					  const float *bias, int B, int T, int C)
{
	long BT = (long)B * T;

	layernorm_forward_kernel<float><<<row_blocks(BT), 32 * ROWS_PER_BLOCK, 0,
					  (cudaStream_t)stream>>>(out, mean, rstd, inp, weight,
								  bias, BT, C);
	zn_cuda_note_launch("layernorm_forward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_layernorm_forward_bf16out(void *stream, uint16_t *out16, float *mean,
						  float *rstd, const float *inp,
						  const float *weight, const float *bias, int B,
						  int T, int C)
{
	long BT = (long)B * T;

	layernorm_forward_kernel<uint16_t><<<row_blocks(BT), 32 * ROWS_PER_BLOCK, 0,
					     (cudaStream_t)stream>>>(out16, mean, rstd, inp,
								     weight, bias, BT, C);
	zn_cuda_note_launch("layernorm_forward_bf16out", __FILE__, __LINE__);
}

extern "C" void zn_cuda_layernorm_backward(void *stream, float *dinp, float *dweight,
					   float *dbias, const float *dout, const float *inp,
					   const float *weight, const float *mean,
					   const float *rstd, int B, int T, int C)
{
	cudaStream_t s = (cudaStream_t)stream;
	long BT = (long)B * T;

	layernorm_backward_inp_kernel<<<row_blocks(BT), 32 * ROWS_PER_BLOCK, 0, s>>>(
		dinp, dout, inp, weight, mean, rstd, BT, C);
	zn_cuda_note_launch("layernorm_backward", __FILE__, __LINE__);
	if (!dweight || !dbias) /* frozen weights: skipped */
		return;
	layernorm_backward_weight_kernel<<<zn_cuda_grid(C, 32), dim3(32, 32), 0, s>>>(
		dweight, dbias, dout, inp, mean, rstd, BT, C);
	zn_cuda_note_launch("layernorm_backward", __FILE__, __LINE__);
}
