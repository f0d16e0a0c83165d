/* AdamW and the gradient norm pass: OpenMP over fixed chunks, `omp simd` bodies.
 *
 * Each (grad dtype, output dtype, L2 or not) triple gets its own loop: adamw_chunk is always
 * inlined with constant dtypes and mode, so the dtype switches fold away and GCC vectorizes every variant (check
 * with -fopt-info-vec). The bf16/fp16 conversions here are branchless copies of core/dtype.c
 * (selects instead of branches, so they vectorize); the tests hold them to the originals.
 * Chunks are a fixed CHUNK_COUNT elements whatever the thread count, which keeps results
 * independent of it. Leaves the formula's definition to adamw_ref.c and adamw.h.
 */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "cpu/adamw_impl.h"

/* 16 Ki elements: 64 KiB per fp32 stream, 5 streams stay within L2 while a thread works on
 * one chunk, and thousands of chunks balance threads on a shared machine. */
#define CHUNK_COUNT 16384u
/* Below this many elements one thread is faster than waking a team. */
#define PARALLEL_MIN_COUNT 65536u
#define SUMSQ_CHUNK_COUNT 65536u

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE float fma_simd(float a, float b, float c)
{
#ifdef FP_FAST_FMAF
	return fmaf(a, b, c);
#else
	return a * b + c;
#endif
}

static ALWAYS_INLINE uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static ALWAYS_INLINE float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* zn_f32_to_bf16 without branches: NaN keeps its sign and becomes quiet, the rest rounds to
 * nearest even (overflow to inf, as IEEE). */
static ALWAYS_INLINE uint16_t f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);
	uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	uint32_t quiet = (u >> 16) | 0x0040u;

	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/* zn_f32_to_f16 without branches. Subnormal results come from one float add that lines the
 * 10 result bits up at the bottom of the mantissa, so the FPU's own round-to-nearest-even
 * rounds them (F. Giesen's float_to_half_fast3_rtne). */
static ALWAYS_INLINE uint16_t f32_to_f16(float f)
{
	const uint32_t denorm_magic_bits = ((127 - 15) + (23 - 10) + 1) << 23;
	uint32_t u = f32_bits(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t a = u & 0x7fffffffu;
	uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
	uint32_t sub = f32_bits(bits_f32(a) + bits_f32(denorm_magic_bits)) - denorm_magic_bits;
	uint32_t r = a - 0x38000000u;
	uint32_t norm = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
	uint32_t h = a < 0x38800000u ? sub : norm;

	h = a >= 0x477ff000u ? 0x7c00u : h; /* rounds to >= 65520: inf */
	h = a > 0x7f800000u ? nan : h;
	return (uint16_t)(sign | h);
}

/* zn_f16_to_f32 without branches (subnormals via one exact float subtraction). */
static ALWAYS_INLINE float f16_to_f32(uint16_t h)
{
	const float magic = bits_f32(113u << 23);
	uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
	uint32_t exp = o & (0x7c00u << 13);
	uint32_t normal = o + ((127 - 15) << 23);
	uint32_t infnan = normal + ((128 - 16) << 23);
	uint32_t sub = f32_bits(bits_f32(normal + (1u << 23)) - magic);

	o = exp == (0x7c00u << 13) ? infnan : (exp == 0 ? sub : normal);
	return bits_f32(o | ((uint32_t)(h & 0x8000u) << 16));
}

static ALWAYS_INLINE float load_grad(const void *grad, enum zn_dtype t, size_t i)
{
	if (t == ZN_DTYPE_F32)
		return ((const float *)grad)[i];
	if (t == ZN_DTYPE_BF16)
		return bits_f32((uint32_t)((const uint16_t *)grad)[i] << 16);
	return f16_to_f32(((const uint16_t *)grad)[i]);
}

static ALWAYS_INLINE void store_out(void *out, int t, size_t i, float x)
{
	if (t == ZN_DTYPE_F32)
		((float *)out)[i] = x;
	else if (t == ZN_DTYPE_BF16)
		((uint16_t *)out)[i] = f32_to_bf16(x);
	else if (t == ZN_DTYPE_F16)
		((uint16_t *)out)[i] = f32_to_f16(x);
}

static ALWAYS_INLINE void adamw_chunk(const struct zn_adamw_consts *k, float *restrict master,
				      float *restrict m, float *restrict v,
				      const void *restrict grad, enum zn_dtype gt,
				      void *restrict out, int ot, bool l2, size_t n)
{
	/* Locals, so the compiler keeps the constants in registers across the stores. */
	const float beta1 = k->beta1, beta2 = k->beta2, omb1 = k->omb1, omb2 = k->omb2;
	const float eps = k->eps, neg_step = k->neg_step_size, ibc2 = k->inv_bc2_sqrt;
	const float decay = k->decay, scale = k->grad_scale, l2_decay = k->l2_decay;

#pragma omp simd
	for (size_t i = 0; i < n; i++) {
		float g = load_grad(grad, gt, i) * scale;

		if (l2) /* a constant here: folded away */
			g = fma_simd(l2_decay, master[i], g);
		float mi = fma_simd(beta1, m[i], omb1 * g);
		float vi = fma_simd(beta2, v[i], (omb2 * g) * g);
		float denom = fma_simd(sqrtf(vi), ibc2, eps);
		float p = fma_simd(neg_step, mi / denom, master[i] * decay);

		m[i] = mi;
		v[i] = vi;
		master[i] = p;
		store_out(out, ot, i, p);
	}
}

/* One instantiation per output dtype for a given gradient dtype. */
static ALWAYS_INLINE void adamw_chunk_out(const struct zn_adamw_consts *k, float *master,
					  float *m, float *v, const void *grad,
					  enum zn_dtype gt, void *out, int ot, bool l2, size_t n)
{
	switch (ot) {
	case ZN_DTYPE_F32:
		adamw_chunk(k, master, m, v, grad, gt, out, ZN_DTYPE_F32, l2, n);
		break;
	case ZN_DTYPE_BF16:
		adamw_chunk(k, master, m, v, grad, gt, out, ZN_DTYPE_BF16, l2, n);
		break;
	case ZN_DTYPE_F16:
		adamw_chunk(k, master, m, v, grad, gt, out, ZN_DTYPE_F16, l2, n);
		break;
	default:
		adamw_chunk(k, master, m, v, grad, gt, out, ZN_ADAMW_OUT_NONE, l2, n);
		break;
	}
}

static ALWAYS_INLINE void adamw_range_t(const struct zn_adamw_consts *k, float *master,
					float *m, float *v, const void *grad, enum zn_dtype gt,
					void *out, int ot, bool l2, size_t n)
{
	switch (gt) {
	case ZN_DTYPE_F32:
		adamw_chunk_out(k, master, m, v, grad, ZN_DTYPE_F32, out, ot, l2, n);
		break;
	case ZN_DTYPE_BF16:
		adamw_chunk_out(k, master, m, v, grad, ZN_DTYPE_BF16, out, ot, l2, n);
		break;
	case ZN_DTYPE_F16:
		adamw_chunk_out(k, master, m, v, grad, ZN_DTYPE_F16, out, ot, l2, n);
		break;
	}
}

/* The two modes as two sets of loops, chosen once per chunk. */
static void adamw_range(const struct zn_adamw_consts *k, float *master, float *m, float *v,
			const void *grad, enum zn_dtype gt, void *out, int ot, size_t n)
{
	if (k->l2)
		adamw_range_t(k, master, m, v, grad, gt, out, ot, true, n);
	else
		adamw_range_t(k, master, m, v, grad, gt, out, ot, false, n);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* zn_adamw_step with each worker's start and end recorded (tracing): the same static
 * schedule over the same chunks, so the same results. */
static int adamw_step_timed(const struct zn_adamw_params *p, const struct zn_adamw_consts *k,
			    float *master, float *m, float *v, const void *grad,
			    enum zn_dtype grad_dtype, void *param_out, int ot, size_t n, int threads)
{
	size_t gsize = grad_dtype == ZN_DTYPE_F32 ? 4 : 2;
	size_t osize = ot == (int)ZN_DTYPE_F32 ? 4 : 2;
	size_t chunks = (n + CHUNK_COUNT - 1) / CHUNK_COUNT;

#pragma omp parallel num_threads(threads) if (n >= PARALLEL_MIN_COUNT)
	{
		int w = omp_get_thread_num();
		uint64_t t0 = mono_ns(), t1;

#pragma omp for schedule(static) nowait
		for (size_t c = 0; c < chunks; c++) {
			size_t b = c * CHUNK_COUNT;
			size_t len = n - b < CHUNK_COUNT ? n - b : CHUNK_COUNT;
			void *out = param_out ? (char *)param_out + b * osize : NULL;

			adamw_range(k, master + b, m + b, v + b, (const char *)grad + b * gsize,
				    grad_dtype, out, ot, len);
		}
		t1 = mono_ns();
		if (w < p->worker_max) {
			if (t0 < p->worker_ns[2 * w])
				p->worker_ns[2 * w] = t0;
			if (t1 > p->worker_ns[2 * w + 1])
				p->worker_ns[2 * w + 1] = t1;
		}
	}
	return 0;
}

int zn_adamw_step(const struct zn_adamw_params *p, float *master, float *m, float *v,
		  const void *grad, enum zn_dtype grad_dtype, void *param_out,
		  enum zn_dtype out_dtype, size_t n)
{
	struct zn_adamw_consts k;
	int rc = zn_adamw_args_check(p, master, m, v, grad, grad_dtype, param_out, out_dtype, n);

	if (rc)
		return rc;
	zn_adamw_consts_get(&k, p);
	int ot = param_out ? (int)out_dtype : ZN_ADAMW_OUT_NONE;
	size_t gsize = grad_dtype == ZN_DTYPE_F32 ? 4 : 2;
	size_t osize = out_dtype == ZN_DTYPE_F32 ? 4 : 2;
	size_t chunks = (n + CHUNK_COUNT - 1) / CHUNK_COUNT;
	int threads = p->thread_count > 0 ? p->thread_count : omp_get_max_threads();

	if (p->worker_ns)
		return adamw_step_timed(p, &k, master, m, v, grad, grad_dtype, param_out, ot, n,
					threads);
	/* Static schedule: each thread streams one contiguous run of chunks, which the
	 * hardware prefetchers follow best. */
#pragma omp parallel for schedule(static) num_threads(threads) if (n >= PARALLEL_MIN_COUNT)
	for (size_t c = 0; c < chunks; c++) {
		size_t b = c * CHUNK_COUNT;
		size_t len = n - b < CHUNK_COUNT ? n - b : CHUNK_COUNT;
		void *out = param_out ? (char *)param_out + b * osize : NULL;

		adamw_range(&k, master + b, m + b, v + b, (const char *)grad + b * gsize,
			    grad_dtype, out, ot, len);
	}
	return 0;
}

static ALWAYS_INLINE double sumsq_chunk_t(const void *grad, enum zn_dtype t, size_t n,
					  unsigned *bad)
{
	double s = 0;
	unsigned b = 0;

#pragma omp simd reduction(+ : s) reduction(| : b)
	for (size_t i = 0; i < n; i++) {
		float g = load_grad(grad, t, i);

		/* exponent all ones: inf or NaN */
		b |= (f32_bits(g) & 0x7f800000u) == 0x7f800000u;
		s += (double)g * g;
	}
	*bad |= b;
	return s;
}

static double sumsq_chunk(const void *grad, enum zn_dtype t, size_t n, unsigned *bad)
{
	if (t == ZN_DTYPE_F32)
		return sumsq_chunk_t(grad, ZN_DTYPE_F32, n, bad);
	if (t == ZN_DTYPE_BF16)
		return sumsq_chunk_t(grad, ZN_DTYPE_BF16, n, bad);
	return sumsq_chunk_t(grad, ZN_DTYPE_F16, n, bad);
}

int zn_grad_sumsq(const void *grad, enum zn_dtype grad_dtype, size_t n, int thread_count,
		  double *sumsq, bool *nonfinite)
{
	int rc = zn_adamw_grad_dtype_check(grad_dtype, "gradient");

	if (rc)
		return rc;
	size_t gsize = grad_dtype == ZN_DTYPE_F32 ? 4 : 2;
	size_t chunks = (n + SUMSQ_CHUNK_COUNT - 1) / SUMSQ_CHUNK_COUNT;
	double *part = malloc((chunks ? chunks : 1) * sizeof(*part));
	int threads = thread_count > 0 ? thread_count : omp_get_max_threads();
	unsigned bad = 0;
	double s = 0;

	if (!part)
		return -ENOMEM;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(| : bad) \
	if (n >= PARALLEL_MIN_COUNT)
	for (size_t c = 0; c < chunks; c++) {
		size_t b = c * SUMSQ_CHUNK_COUNT;
		size_t len = n - b < SUMSQ_CHUNK_COUNT ? n - b : SUMSQ_CHUNK_COUNT;

		part[c] = sumsq_chunk((const char *)grad + b * gsize, grad_dtype, len, &bad);
	}
	/* In chunk order: the same sum for every thread count. */
	for (size_t c = 0; c < chunks; c++)
		s += part[c];
	free(part);
	*sumsq = s;
	*nonfinite = bad != 0;
	return 0;
}
