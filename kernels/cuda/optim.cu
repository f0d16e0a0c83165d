/* Optimizer ops on CUDA: fused AdamW over a span and the gradient squared norm.
 *
 * AdamW: the per-call scalars come from the CPU tier's own zn_adamw_consts_get (computed
 * on the host in double, then rounded to float), and each element runs src/cpu/adamw.h's
 * operations in its order through IEEE intrinsics (__fmaf_rn, __fmul_rn, __fdiv_rn,
 * __fsqrt_rn): nvcc can neither contract them nor relax them under --use_fast_math, so the
 * result is the CPU's bit for bit wherever the CPU build uses hardware FMA. The bf16 copy
 * is src/core/dtype.c's bit arithmetic (round to nearest even, NaN -> quiet NaN).
 *
 * Norm: two passes, no atomics. Pass 1: G blocks (G depends only on N), each thread sums
 * its grid-stride elements in double, a shared-memory tree per block gives work_d[b] and
 * the block's non-finite flag work_d[G + b]; pass 2: one block adds the G partials in a
 * fixed tree. The same N gives the same bits on every run (and every GPU).
 */
#include "common.cuh"

extern "C" {
#include "cpu/adamw_impl.h"
#include "kernels.h"
#include "ops.h"
}

#define SUMSQ_THREADS 256
#define SUMSQ_BLOCKS (ZN_KERNEL_SUMSQ_WORK_COUNT / 2) /* partial sums, then their flags */
#define SUMSQ_PER_THREAD 8 /* elements per thread before another block is worth it */

static_assert(SUMSQ_BLOCKS >= 1, "ZN_KERNEL_SUMSQ_WORK_COUNT too small");

static __device__ __forceinline__ uint16_t bf16_rne(float f)
{
	unsigned u = __float_as_uint(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	/* round to nearest, ties to even: add 0x7fff plus the lowest kept bit */
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static __global__ void adamw_kernel(float *master, float *m, float *v, uint16_t *out,
				    const float *grad, struct zn_adamw_consts k, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step()) {
		/* adamw.h's formula, one rounding per operation, in the CPU's order */
		float g = __fmul_rn(grad[i], k.grad_scale);

		if (k.l2) /* L2-regularised Adam: the decay goes into the gradient */
			g = __fmaf_rn(k.l2_decay, master[i], g);
		float mi = __fmaf_rn(k.beta1, m[i], __fmul_rn(k.omb1, g));
		float vi = __fmaf_rn(k.beta2, v[i], __fmul_rn(__fmul_rn(k.omb2, g), g));
		float denom = __fmaf_rn(__fsqrt_rn(vi), k.inv_bc2_sqrt, k.eps);
		float p = __fmaf_rn(k.neg_step_size, __fdiv_rn(mi, denom),
				    __fmul_rn(master[i], k.decay));

		m[i] = mi;
		v[i] = vi;
		master[i] = p;
		if (out)
			out[i] = bf16_rne(p);
	}
}

/* Sums sh[0 .. SUMSQ_THREADS) into sh[0] in a fixed tree; every thread must call it. */
static __device__ __forceinline__ void block_tree(double *sh)
{
	for (unsigned o = SUMSQ_THREADS / 2; o > 0; o >>= 1) {
		if (threadIdx.x < o)
			sh[threadIdx.x] += sh[threadIdx.x + o];
		__syncthreads();
	}
}

static __global__ void sumsq_partial_kernel(double *work, const float *grad, size_t n)
{
	__shared__ double sh[SUMSQ_THREADS];
	double s = 0.0;
	int bad = 0;

	for (size_t i = first_index(); i < n; i += grid_step()) {
		float g = grad[i];

		/* exponent all ones: inf or NaN (the CPU pass's test) */
		bad |= (__float_as_uint(g) & 0x7f800000u) == 0x7f800000u;
		s = __dadd_rn(s, __dmul_rn((double)g, (double)g));
	}
	sh[threadIdx.x] = s;
	bad = __syncthreads_or(bad);
	block_tree(sh);
	if (threadIdx.x == 0) {
		work[blockIdx.x] = sh[0];
		work[gridDim.x + blockIdx.x] = bad ? 1.0 : 0.0;
	}
}

static __global__ void sumsq_final_kernel(double *sumsq, int32_t *nonfinite, const double *work,
					  unsigned parts)
{
	__shared__ double sh[SUMSQ_THREADS];
	double s = 0.0;
	int bad = 0;

	/* each thread adds its partials in index order, then the block tree */
	for (unsigned b = threadIdx.x; b < parts; b += SUMSQ_THREADS) {
		s = __dadd_rn(s, work[b]);
		bad |= work[parts + b] != 0.0;
	}
	sh[threadIdx.x] = s;
	bad = __syncthreads_or(bad);
	block_tree(sh);
	if (threadIdx.x == 0) {
		*sumsq = sh[0];
		*nonfinite = bad ? 1 : 0;
	}
}

extern "C" void zn_cuda_adamw(void *stream, float *master, float *m, float *v,
			      uint16_t *out_bf16, const float *grad,
			      const struct zn_kernel_adamw *hp, size_t N)
{
	struct zn_adamw_params p;
	struct zn_adamw_consts k;

	p.lr = hp->lr;
	p.beta1 = hp->beta1;
	p.beta2 = hp->beta2;
	p.eps = hp->eps;
	p.weight_decay = hp->weight_decay;
	p.step = hp->step;
	p.grad_scale = hp->grad_scale;
	p.thread_count = 0;
	p.l2 = hp->l2 != 0;
	if (N == 0)
		return;
	zn_adamw_consts_get(&k, &p);
	adamw_kernel<<<zn_cuda_blocks(N, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0,
		       (cudaStream_t)stream>>>(master, m, v, out_bf16, grad, k, N);
	zn_cuda_note_launch("adamw", __FILE__, __LINE__);
}

extern "C" void zn_cuda_grad_sumsq(void *stream, double *sumsq_d, int32_t *nonfinite_d,
				   double *work_d, const float *grad, size_t N)
{
	size_t per_block = (size_t)SUMSQ_THREADS * SUMSQ_PER_THREAD;
	size_t g = (N + per_block - 1) / per_block;
	unsigned parts = g < 1 ? 1u : g > SUMSQ_BLOCKS ? SUMSQ_BLOCKS : (unsigned)g;

	/* parts depends only on N: the tree, and so the bits, are fixed for a given N */
	sumsq_partial_kernel<<<parts, SUMSQ_THREADS, 0, (cudaStream_t)stream>>>(work_d, grad, N);
	zn_cuda_note_launch("grad_sumsq (partials)", __FILE__, __LINE__);
	sumsq_final_kernel<<<1, SUMSQ_THREADS, 0, (cudaStream_t)stream>>>(sumsq_d, nonfinite_d,
									  work_d, parts);
	zn_cuda_note_launch("grad_sumsq (final)", __FILE__, __LINE__);
}
