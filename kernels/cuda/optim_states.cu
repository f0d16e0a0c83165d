/* AdamW with compact moments on CUDA (kernels.h adamw_states): bf16 moments element-wise,
 * int8 moments one CUDA block per 256-element quantization block, as bitsandbytes'
 * kOptimizerStatic8bit2StateBlockwise.
 *
 * Same bits as the CPU (src/cpu/adamw_states.c, adamw_q8.c) where the CPU build has FMA:
 * the per-call and per-span scalars come from zn_adamw_consts_get on the host, every
 * element runs adamw.h's operations in their order through IEEE intrinsics (nvcc can
 * neither contract nor relax them), the maps are the CPU's (cpu/q8.h, passed by value),
 * their midpoints computed here as (a + b) * 0.5f in the same roundings, the absmax is a
 * max (exact in any order), the code the same eight halvings over the same midpoints, and
 * the block's reciprocal 1 / absmax with __frcp_rn (IEEE division's result).
 */
#include "common.cuh"

extern "C" {
#include "cpu/adamw_impl.h"
#include "cpu/q8.h"
#include "kernels.h"
#include "ops.h"
}

/* the call's scalars, each span's decay factors and the maps: by value (under 4 KiB) */
struct states_args {
	struct zn_adamw_consts k;
	int span_count;
	uint64_t span_end[ZN_KERNEL_ADAMW_SPANS];
	float span_decay[ZN_KERNEL_ADAMW_SPANS], span_l2[ZN_KERNEL_ADAMW_SPANS];
	float map_s[256], map_u[256];
};

static __device__ __forceinline__ uint16_t bf16_rne(float f)
{
	unsigned u = __float_as_uint(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static __device__ __forceinline__ float bf16_f32(uint16_t h)
{
	return __uint_as_float((unsigned)h << 16);
}

/* the span holding element i (spans tile [0, N) in order) */
static __device__ __forceinline__ int span_of(const struct states_args &a, size_t i)
{
	int s = 0;

	while (s + 1 < a.span_count && i >= a.span_end[s])
		s++;
	return s;
}

/* adamw.h's update of one element, in the CPU's order and roundings */
static __device__ __forceinline__ float update(const struct states_args &a, int s, float grad,
					       float master, float *m, float *v)
{
	const struct zn_adamw_consts &k = a.k;
	float g = __fmul_rn(grad, k.grad_scale);

	if (k.l2)
		g = __fmaf_rn(a.span_l2[s], master, g);
	*m = __fmaf_rn(k.beta1, *m, __fmul_rn(k.omb1, g));
	*v = __fmaf_rn(k.beta2, *v, __fmul_rn(__fmul_rn(k.omb2, g), g));
	float denom = __fmaf_rn(__fsqrt_rn(*v), k.inv_bc2_sqrt, k.eps);

	return __fmaf_rn(k.neg_step_size, __fdiv_rn(*m, denom), __fmul_rn(master, a.span_decay[s]));
}

static __global__ void adamw_bf16_kernel(float *master, uint16_t *m, uint16_t *v, uint16_t *out,
					 const float *grad, struct states_args a, size_t n)
{
	for (size_t i = first_index(); i < n; i += grid_step()) {
		float mi = bf16_f32(m[i]), vi = bf16_f32(v[i]);
		float p = update(a, span_of(a, i), grad[i], master[i], &mi, &vi);

		m[i] = bf16_rne(mi);
		v[i] = bf16_rne(vi);
		master[i] = p;
		if (out)
			out[i] = bf16_rne(p);
	}
}

/* the number of midpoints below x: q8.c's eight halvings */
static __device__ __forceinline__ unsigned q8_code(const float *bound, float x)
{
	unsigned c = 0;

	for (unsigned s = 128; s; s >>= 1)
		c += bound[c + s - 1] < x ? s : 0u;
	return c;
}

/* the block's largest value of x (x >= 0): warp butterflies, then the warps' maxima */
static __device__ __forceinline__ float block_max(float x, float *sh)
{
	x = zn_warp_max(x);
	if ((threadIdx.x & 31) == 0)
		sh[threadIdx.x >> 5] = x;
	__syncthreads();
	x = sh[0];
	for (int w = 1; w < ZN_Q8_BLOCK / 32; w++)
		x = fmaxf(x, sh[w]);
	__syncthreads();
	return x;
}

/* one CUDA block of ZN_Q8_BLOCK threads per quantization block (grid-stride over blocks) */
static __global__ void adamw_q8_kernel(float *master, uint8_t *mq, uint8_t *vq, float *m_absmax,
				       float *v_absmax, uint16_t *out, const float *grad,
				       struct states_args a, size_t n)
{
	__shared__ float map_s[256], map_u[256], bound_s[256], bound_u[256], sh[ZN_Q8_BLOCK / 32];
	unsigned t = threadIdx.x;

	map_s[t] = a.map_s[t];
	map_u[t] = a.map_u[t];
	__syncthreads();
	/* q8.h's midpoints, in float as the CPU computes them */
	bound_s[t] = t < 255 ? __fmul_rn(__fadd_rn(map_s[t], map_s[t + 1]), 0.5f) : INFINITY;
	bound_u[t] = t < 255 ? __fmul_rn(__fadd_rn(map_u[t], map_u[t + 1]), 0.5f) : INFINITY;
	__syncthreads();
	for (size_t b = blockIdx.x; b * ZN_Q8_BLOCK < n; b += gridDim.x) {
		size_t i = b * ZN_Q8_BLOCK + t;
		float mi = 0.0f, vi = 0.0f;

		if (i < n) {
			float g = grad[i];
			/* bitsandbytes: an inf or NaN gradient resets the element's state */
			bool ok = (__float_as_uint(g) & 0x7f800000u) != 0x7f800000u;
			float p = master[i];

			mi = __fmul_rn(map_s[mq[i]], m_absmax[b]);
			vi = __fmul_rn(map_u[vq[i]], v_absmax[b]);
			if (ok) {
				p = update(a, span_of(a, i), g, p, &mi, &vi);
			} else {
				mi = 0.0f;
				vi = 0.0f;
			}
			master[i] = p;
			if (out)
				out[i] = bf16_rne(p);
		}
		/* every thread has read the old absmax before it is replaced */
		float am = block_max(fabsf(mi), sh), av = block_max(fabsf(vi), sh);

		if (t == 0) {
			m_absmax[b] = am;
			v_absmax[b] = av;
		}
		float im = am > 0.0f ? __frcp_rn(am) : 0.0f, iv = av > 0.0f ? __frcp_rn(av) : 0.0f;

		if (i < n) {
			unsigned cm = q8_code(bound_s, __fmul_rn(mi, im));

			/* m keeps its sign: a negative m never becomes 0 */
			cm -= mi < 0.0f && cm == ZN_Q8_ZERO_SIGNED ? 1u : 0u;
			mq[i] = (uint8_t)cm;
			vq[i] = (uint8_t)q8_code(bound_u, __fmul_rn(vi, iv));
		} else {
			/* the rest of the last block is padding: zero */
			mq[i] = ZN_Q8_ZERO_SIGNED;
			vq[i] = ZN_Q8_ZERO_UNSIGNED;
		}
	}
}

extern "C" void zn_cuda_adamw_states(void *stream, float *master,
				     const struct zn_kernel_moments *mo, uint16_t *out_bf16,
				     const float *grad, const struct zn_kernel_adamw *hp,
				     const struct zn_kernel_span *spans, int span_count, size_t N)
{
	struct zn_adamw_params p = {};
	struct states_args a = {};
	cudaStream_t s = (cudaStream_t)stream;

	if (N == 0 || span_count < 1 || span_count > ZN_KERNEL_ADAMW_SPANS)
		return;
	p.lr = hp->lr;
	p.beta1 = hp->beta1;
	p.beta2 = hp->beta2;
	p.eps = hp->eps;
	p.step = hp->step;
	p.grad_scale = hp->grad_scale;
	p.l2 = hp->l2 != 0;
	/* each span's decay factors, rounded as zn_adamw_consts_get rounds them */
	for (int k = 0; k < span_count; k++) {
		p.weight_decay = spans[k].weight_decay;
		zn_adamw_consts_get(&a.k, &p);
		a.span_end[k] = spans[k].first + spans[k].count;
		a.span_decay[k] = a.k.decay;
		a.span_l2[k] = a.k.l2_decay;
	}
	a.span_count = span_count;
	for (int c = 0; c < 256; c++) {
		a.map_s[c] = zn_q8_map(true)[c];
		a.map_u[c] = zn_q8_map(false)[c];
	}
	if (mo->states == ZN_STATES_BF16) {
		adamw_bf16_kernel<<<zn_cuda_blocks(N, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0, s>>>(
			master, (uint16_t *)mo->m, (uint16_t *)mo->v, out_bf16, grad, a, N);
		zn_cuda_note_launch("adamw_states (bf16)", __FILE__, __LINE__);
		return;
	}
	adamw_q8_kernel<<<zn_cuda_blocks(N, ZN_Q8_BLOCK), ZN_Q8_BLOCK, 0, s>>>(
		master, (uint8_t *)mo->m, (uint8_t *)mo->v, mo->m_absmax, mo->v_absmax, out_bf16,
		grad, a, N);
	zn_cuda_note_launch("adamw_states (int8)", __FILE__, __LINE__);
}
