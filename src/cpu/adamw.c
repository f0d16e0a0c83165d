/* AdamW and the gradient norm pass: OpenMP over fixed chunks, `omp simd` bodies.
 *
 * Each (grad dtype, output dtype, L2 or not, fp32 or bf16 moments) gets its own loop:
 * adamw_chunk is always inlined with constant dtypes and mode, so the dtype switches fold
 * away and GCC vectorizes every variant (check with -fopt-info-vec). The conversions are
 * adamw_simd.h's branchless copies of core/dtype.c; the tests hold them to the originals.
 * int8 moments have their own block pass (adamw_q8.c).
 * Chunks are a fixed CHUNK_COUNT elements whatever the thread count, which keeps results
 * independent of it. Leaves the formula's definition to adamw_ref.c and adamw.h.
 */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/dtype.h"
#include "core/log.h"
#include "cpu/adamw_impl.h"
#include "cpu/adamw_simd.h"

/* 16 Ki elements: 64 KiB per fp32 stream, 5 streams stay within L2 while a thread works on
 * one chunk, and thousands of chunks balance threads on a shared machine. */
#define CHUNK_COUNT 16384u
/* Below this many elements one thread is faster than waking a team. */
#define PARALLEL_MIN_COUNT 65536u
#define SUMSQ_CHUNK_COUNT 65536u

/* m and v as stored: fp32, or bf16 (widened exactly, rounded to nearest even) */
static ALWAYS_INLINE float load_state(const void *s, int st, size_t i)
{
	if (st == ZN_STATES_BF16)
		return bf16_to_f32(((const uint16_t *)s)[i]);
	return ((const float *)s)[i];
}

static ALWAYS_INLINE void store_state(void *s, int st, size_t i, float x)
{
	if (st == ZN_STATES_BF16)
		((uint16_t *)s)[i] = f32_to_bf16(x);
	else
		((float *)s)[i] = x;
}

static ALWAYS_INLINE void adamw_chunk(const struct zn_adamw_consts *k, float *restrict master,
				      void *restrict m, void *restrict v,
				      const void *restrict grad, enum zn_dtype gt,
				      void *restrict out, int ot, bool l2, int st, size_t n)
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
		float mi = fma_simd(beta1, load_state(m, st, i), omb1 * g);
		float vi = fma_simd(beta2, load_state(v, st, i), (omb2 * g) * g);
		float denom = fma_simd(sqrtf(vi), ibc2, eps);
		float p = fma_simd(neg_step, mi / denom, master[i] * decay);

		store_state(m, st, i, mi);
		store_state(v, st, i, vi);
		master[i] = p;
		store_out(out, ot, i, p);
	}
}

/* One instantiation per output dtype for a given gradient dtype. */
static ALWAYS_INLINE void adamw_chunk_out(const struct zn_adamw_consts *k, float *master,
					  void *m, void *v, const void *grad,
					  enum zn_dtype gt, void *out, int ot, bool l2, int st,
					  size_t n)
{
	switch (ot) {
	case ZN_DTYPE_F32:
		adamw_chunk(k, master, m, v, grad, gt, out, ZN_DTYPE_F32, l2, st, n);
		break;
	case ZN_DTYPE_BF16:
		adamw_chunk(k, master, m, v, grad, gt, out, ZN_DTYPE_BF16, l2, st, n);
		break;
	case ZN_DTYPE_F16:
		adamw_chunk(k, master, m, v, grad, gt, out, ZN_DTYPE_F16, l2, st, n);
		break;
	default:
		adamw_chunk(k, master, m, v, grad, gt, out, ZN_ADAMW_OUT_NONE, l2, st, n);
		break;
	}
}

static ALWAYS_INLINE void adamw_range_t(const struct zn_adamw_consts *k, float *master,
					void *m, void *v, const void *grad, enum zn_dtype gt,
					void *out, int ot, bool l2, int st, size_t n)
{
	switch (gt) {
	case ZN_DTYPE_F32:
		adamw_chunk_out(k, master, m, v, grad, ZN_DTYPE_F32, out, ot, l2, st, n);
		break;
	case ZN_DTYPE_BF16:
		adamw_chunk_out(k, master, m, v, grad, ZN_DTYPE_BF16, out, ot, l2, st, n);
		break;
	case ZN_DTYPE_F16:
		adamw_chunk_out(k, master, m, v, grad, ZN_DTYPE_F16, out, ot, l2, st, n);
		break;
	}
}

/* The two modes and the two element-wise state kinds as their own loops, chosen once per
 * chunk. */
static void adamw_range(const struct zn_adamw_consts *k, float *master, void *m, void *v,
			int st, const void *grad, enum zn_dtype gt, void *out, int ot, size_t n)
{
	if (st == ZN_STATES_BF16) {
		if (k->l2)
			adamw_range_t(k, master, m, v, grad, gt, out, ot, true, ZN_STATES_BF16, n);
		else
			adamw_range_t(k, master, m, v, grad, gt, out, ot, false, ZN_STATES_BF16, n);
	} else if (k->l2) {
		adamw_range_t(k, master, m, v, grad, gt, out, ot, true, ZN_STATES_FP32, n);
	} else {
		adamw_range_t(k, master, m, v, grad, gt, out, ot, false, ZN_STATES_FP32, n);
	}
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One chunk of a call: elements [c x CHUNK_COUNT, ...) of every stream. */
struct chunk_args {
	const struct zn_adamw_consts *k;
	float *master;
	void *m, *v;
	int st;
	size_t ssize;        /* bytes of one stored moment */
	const void *grad;
	enum zn_dtype gt;
	size_t gsize;
	void *out;
	int ot;
	size_t osize;
	size_t n;
};

static void run_chunk(const void *arg, size_t c)
{
	const struct chunk_args *a = arg;
	size_t b = c * CHUNK_COUNT;
	size_t len = a->n - b < CHUNK_COUNT ? a->n - b : CHUNK_COUNT;
	void *out = a->out ? (char *)a->out + b * a->osize : NULL;

	adamw_range(a->k, a->master + b, (char *)a->m + b * a->ssize, (char *)a->v + b * a->ssize,
		    a->st, (const char *)a->grad + b * a->gsize, a->gt, out, a->ot, len);
}

void zn_adamw_run_chunks(const struct zn_adamw_params *p, size_t n, size_t chunks,
			 void (*fn)(const void *a, size_t c), const void *a)
{
	int threads = p->thread_count > 0 ? p->thread_count : omp_get_max_threads();

	if (!p->worker_ns) {
		/* Static schedule: each thread streams one contiguous run of chunks, which the
		 * hardware prefetchers follow best. */
#pragma omp parallel for schedule(static) num_threads(threads) if (n >= PARALLEL_MIN_COUNT)
		for (size_t c = 0; c < chunks; c++)
			fn(a, c);
		return;
	}
	/* traced: the same static schedule, each worker's start and end recorded */
#pragma omp parallel num_threads(threads) if (n >= PARALLEL_MIN_COUNT)
	{
		int w = omp_get_thread_num();
		uint64_t t0 = mono_ns(), t1;

#pragma omp for schedule(static) nowait
		for (size_t c = 0; c < chunks; c++)
			fn(a, c);
		t1 = mono_ns();
		if (w < p->worker_max) {
			if (t0 < p->worker_ns[2 * w])
				p->worker_ns[2 * w] = t0;
			if (t1 > p->worker_ns[2 * w + 1])
				p->worker_ns[2 * w + 1] = t1;
		}
	}
}

/* zn_adamw_step with m and v stored as st (fp32 or bf16); the arguments are checked. */
static void step_elementwise(const struct zn_adamw_params *p, float *master, void *m, void *v,
			     int st, const void *grad, enum zn_dtype grad_dtype, void *param_out,
			     enum zn_dtype out_dtype, size_t n)
{
	struct zn_adamw_consts k;
	struct chunk_args a = {
		.k = &k, .master = master, .m = m, .v = v, .st = st,
		.ssize = st == ZN_STATES_BF16 ? 2 : 4, .grad = grad, .gt = grad_dtype,
		.gsize = grad_dtype == ZN_DTYPE_F32 ? 4 : 2, .out = param_out,
		.ot = param_out ? (int)out_dtype : ZN_ADAMW_OUT_NONE,
		.osize = out_dtype == ZN_DTYPE_F32 ? 4 : 2, .n = n,
	};
	zn_adamw_consts_get(&k, p);
	zn_adamw_run_chunks(p, n, (n + CHUNK_COUNT - 1) / CHUNK_COUNT, run_chunk, &a);
}

int zn_adamw_step(const struct zn_adamw_params *p, float *master, float *m, float *v,
		  const void *grad, enum zn_dtype grad_dtype, void *param_out,
		  enum zn_dtype out_dtype, size_t n)
{
	int rc = zn_adamw_args_check(p, master, m, v, grad, grad_dtype, param_out, out_dtype, n);

	if (!rc)
		step_elementwise(p, master, m, v, ZN_STATES_FP32, grad, grad_dtype, param_out,
				 out_dtype, n);
	return rc;
}

int zn_adamw_step_states(const struct zn_adamw_params *p, float *master,
			 const struct zn_adamw_moments *mo, const void *grad,
			 enum zn_dtype grad_dtype, void *param_out, enum zn_dtype out_dtype,
			 size_t n, const struct zn_adamw_span *spans, int span_count)
{
	int rc = zn_adamw_states_check(p, master, mo, grad, grad_dtype, param_out, out_dtype, n,
				       spans, span_count);

	if (rc)
		return rc;
	if (mo->states == ZN_STATES_INT8)
		return zn_adamw_q8_step(p, master, mo, grad, grad_dtype, param_out, out_dtype, n,
					spans, span_count);
	/* element-wise: one call per span, each with its weight decay */
	for (int s = 0; s < span_count; s++) {
		struct zn_adamw_params q = *p;
		size_t i = spans[s].first, ss = mo->states == ZN_STATES_BF16 ? 2 : 4;
		size_t gs = grad_dtype == ZN_DTYPE_F32 ? 4 : 2, os = zn_dtype_size(out_dtype);

		q.weight_decay = spans[s].weight_decay;
		step_elementwise(&q, master + i, (char *)mo->m + i * ss, (char *)mo->v + i * ss,
				 (int)mo->states, (const char *)grad + i * gs,
				 grad_dtype, param_out ? (char *)param_out + i * os : NULL,
				 out_dtype, spans[s].count);
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
