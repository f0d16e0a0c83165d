/* Fused softmax + cross-entropy on CUDA: one block per position for the forward (block
 * max and sum with a fixed tree), one thread per logit for the backward. Same formulas as
 * kernels/cpu: loss = log(sum exp(l - max)) - (l[target] - max); probs and dlogits are 0 in
 * the padded columns; a target outside [0, V) gives a NaN loss and a zero gradient row
 * (the CPU op also logs it; the device cannot, so the NaN loss is the signal).
 */
#include <float.h>

#include "common.cuh"

extern "C" {
#include "ops.h"
}

#define CE_THREADS 512

/* max or sum over the block, the same bits every run; all threads get the result */
static __device__ float block_reduce(float v, bool is_max, float *shared)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarp = blockDim.x / 32;

	v = is_max ? zn_warp_max(v) : zn_warp_sum(v);
	if (lane == 0)
		shared[warp] = v;
	__syncthreads();
	v = lane < nwarp ? shared[lane] : (is_max ? -FLT_MAX : 0.0f);
	v = is_max ? zn_warp_max(v) : zn_warp_sum(v);
	__syncthreads(); /* shared is reused by the next reduction */
	return v;
}

static __global__ void crossentropy_forward_kernel(float *losses, float *probs, const float *logits,
					    const int *targets, int V, int Vp)
{
	__shared__ float shared[32];
	long bt = blockIdx.x;
	const float *l = logits + bt * Vp;
	float *p = probs + bt * Vp;
	float mx = -FLT_MAX, sum = 0.0f;

	for (int i = threadIdx.x; i < V; i += blockDim.x)
		mx = fmaxf(mx, l[i]);
	mx = block_reduce(mx, true, shared);
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		sum += expf(l[i] - mx);
	sum = block_reduce(sum, false, shared);
	float inv = 1.0f / sum;

	for (int i = threadIdx.x; i < Vp; i += blockDim.x)
		p[i] = i < V ? expf(l[i] - mx) * inv : 0.0f;
	if (threadIdx.x == 0) {
		int tg = targets[bt];

		/* a negative target is not predicted (loss 0); one >= V is bad data (NaN) */
		losses[bt] = tg < 0 ? 0.0f : tg < V ? logf(sum) - (l[tg] - mx) :
						      __int_as_float(0x7fc00000);
	}
}

static __global__ void crossentropy_backward_kernel(float *dlogits, const float *probs,
					     const int *targets, float scale, long BT, int V,
					     int Vp)
{
	size_t n = (size_t)BT * Vp;

	for (size_t idx = first_index(); idx < n; idx += grid_step()) {
		long bt = (long)(idx / Vp);
		int i = (int)(idx % Vp), tg = targets[bt];

		if (i >= V || tg < 0 || tg >= V)
			dlogits[idx] = 0.0f;
		else
			dlogits[idx] = (probs[idx] - (i == tg ? 1.0f : 0.0f)) * scale;
	}
}

extern "C" void zn_cuda_crossentropy_forward(void *stream, float *losses, float *probs,
					     const float *logits, const int *targets, int B, int T,
					     int V, int Vp)
{
	long BT = (long)B * T;

	if (BT == 0)
		return;
	crossentropy_forward_kernel<<<(unsigned)BT, CE_THREADS, 0, (cudaStream_t)stream>>>(
		losses, probs, logits, targets, V, Vp);
	zn_cuda_note_launch("crossentropy_forward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_crossentropy_backward(void *stream, float *dlogits, const float *probs,
					      const int *targets, float dloss_scale, int B, int T,
					      int V, int Vp)
{
	long BT = (long)B * T;
	size_t n = (size_t)BT * Vp;

	crossentropy_backward_kernel<<<zn_cuda_blocks(n, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0,
				       (cudaStream_t)stream>>>(dlogits, probs, targets,
							       dloss_scale, BT, V, Vp);
	zn_cuda_note_launch("crossentropy_backward", __FILE__, __LINE__);
}
