/* AdamW (SIMD, OpenMP) against the scalar reference and a double-precision textbook AdamW;
 * the gradient norm / inf-NaN pass. Seeded random data, sizes that are not multiples of the
 * SIMD width, several steps (bias correction), weight decay on and off. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cpu/adamw.h"

struct rng {
	uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
	r->s ^= r->s << 13;
	r->s ^= r->s >> 7;
	r->s ^= r->s << 17;
	return r->s;
}

/* uniform in [lo, hi) */
static float rng_uniform(struct rng *r, float lo, float hi)
{
	return lo + (hi - lo) * (float)((rng_next(r) >> 40) * (1.0 / (1ull << 24)));
}

struct state {
	size_t n;
	float *master, *m, *v, *grad32;
	uint16_t *grad16; /* bf16 or fp16 copy of grad32 */
	void *out;
};

static void state_fill(struct state *s, size_t n, uint64_t seed)
{
	struct rng r = { seed * 0x9e3779b97f4a7c15ull | 1 };

	s->n = n;
	s->master = malloc(n * 4 + 4);
	s->m = malloc(n * 4 + 4);
	s->v = malloc(n * 4 + 4);
	s->grad32 = malloc(n * 4 + 4);
	s->grad16 = malloc(n * 2 + 2);
	s->out = malloc(n * 4 + 4);
	cr_assert(s->master && s->m && s->v && s->grad32 && s->grad16 && s->out);
	for (size_t i = 0; i < n; i++) {
		s->master[i] = rng_uniform(&r, -1, 1);
		s->m[i] = rng_uniform(&r, -1e-2f, 1e-2f);
		s->v[i] = rng_uniform(&r, 0, 1e-4f);
		s->grad32[i] = rng_uniform(&r, -1e-1f, 1e-1f);
	}
	memset(s->out, 0x5a, n * 4);
}

static void state_copy(struct state *d, const struct state *s)
{
	size_t n = s->n;

	state_fill(d, n, 1);
	memcpy(d->master, s->master, n * 4);
	memcpy(d->m, s->m, n * 4);
	memcpy(d->v, s->v, n * 4);
	memcpy(d->grad32, s->grad32, n * 4);
	memcpy(d->grad16, s->grad16, n * 2);
}

static void state_free(struct state *s)
{
	free(s->master);
	free(s->m);
	free(s->v);
	free(s->grad32);
	free(s->grad16);
	free(s->out);
}

/* New gradient for step t, also as bf16/fp16 when gt asks for it. */
static const void *state_grad(struct state *s, int t, enum zn_dtype gt)
{
	struct rng r = { 0x1234567ull + (uint64_t)t * 7919 };

	for (size_t i = 0; i < s->n; i++)
		s->grad32[i] = rng_uniform(&r, -1e-1f, 1e-1f);
	if (gt == ZN_DTYPE_F32)
		return s->grad32;
	for (size_t i = 0; i < s->n; i++)
		s->grad16[i] = gt == ZN_DTYPE_BF16 ? zn_f32_to_bf16(s->grad32[i])
						   : zn_f32_to_f16(s->grad32[i]);
	return s->grad16;
}

/* |a - b| <= rel * max(|a|, |b|); NaN fails. Reports the worst element. */
static void expect_close(const char *what, const float *a, const float *b, size_t n, double rel)
{
	double worst = 0;
	size_t wi = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		double scale = fmax(fabs(a[i]), fabs(b[i]));
		double e = scale > 0 ? d / scale : d;

		if (isnan(a[i]) || isnan(b[i]))
			e = INFINITY;
		if (e > worst) {
			worst = e;
			wi = i;
		}
	}
	cr_expect(worst <= rel, "%s: worst relative error %.3g at [%zu]: %.9g vs reference %.9g "
		  "(n %zu, bound %.1g)", what, worst, wi, a[wi], b[wi], n, rel);
}

static uint16_t out_round(enum zn_dtype ot, float x)
{
	return ot == ZN_DTYPE_BF16 ? zn_f32_to_bf16(x) : zn_f32_to_f16(x);
}

/* The output copy must be master rounded exactly as core/dtype.c rounds it. */
static void expect_out_exact(const struct state *s, enum zn_dtype ot)
{
	for (size_t i = 0; i < s->n; i++) {
		if (ot == ZN_DTYPE_F32) {
			float o = ((const float *)s->out)[i];

			cr_assert(memcmp(&o, &s->master[i], 4) == 0, "fp32 out[%zu] %.9g != master "
				  "%.9g", i, o, s->master[i]);
			continue;
		}
		uint16_t o = ((const uint16_t *)s->out)[i];
		uint16_t want = out_round(ot, s->master[i]);

		cr_assert_eq(o, want, "%s out[%zu] = 0x%04x, master %.9g rounds to 0x%04x",
			     zn_dtype_name(ot), i, o, s->master[i], want);
	}
}

static void run_case(size_t n, enum zn_dtype gt, int ot, float wd, float scale, int steps)
{
	struct state a, b;
	struct zn_adamw_params p;
	bool has_out = ot >= 0;

	state_fill(&a, n, n + 17);
	state_copy(&b, &a);
	zn_adamw_params_init(&p, NULL);
	p.lr = 1e-2f;
	p.weight_decay = wd;
	p.grad_scale = scale;
	for (int t = 1; t <= steps; t++) {
		p.step = t;
		const void *ga = state_grad(&a, t, gt);
		const void *gb = state_grad(&b, t, gt);

		cr_assert_eq(zn_adamw_step(&p, a.master, a.m, a.v, ga, gt, has_out ? a.out : NULL,
					   has_out ? ot : 0, n), 0);
		cr_assert_eq(zn_adamw_step_ref(&p, b.master, b.m, b.v, gb, gt,
					       has_out ? b.out : NULL, has_out ? ot : 0, n), 0);
	}
	expect_close("master", a.master, b.master, n, 1e-6);
	expect_close("m", a.m, b.m, n, 1e-6);
	expect_close("v", a.v, b.v, n, 1e-6);
	if (has_out)
		expect_out_exact(&a, ot);
	state_free(&a);
	state_free(&b);
}

static const size_t sizes[] = { 1, 7, 15, 17, 33, 1000, 70001, 300007 };

Test(adamw, fp32_matches_reference_all_outputs)
{
	int outs[] = { -1, ZN_DTYPE_F32, ZN_DTYPE_BF16, ZN_DTYPE_F16 };

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (int o = 0; o < 4; o++) {
			run_case(sizes[s], ZN_DTYPE_F32, outs[o], 0.1f, 1.0f, 4);
			run_case(sizes[s], ZN_DTYPE_F32, outs[o], 0.0f, 1.0f, 3);
		}
}

Test(adamw, bf16_and_fp16_gradients)
{
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		run_case(sizes[s], ZN_DTYPE_BF16, ZN_DTYPE_BF16, 0.01f, 1.0f, 3);
		run_case(sizes[s], ZN_DTYPE_F16, ZN_DTYPE_F16, 0.01f, 1.0f, 3);
		run_case(sizes[s], ZN_DTYPE_BF16, -1, 0.0f, 1.0f, 2);
	}
}

Test(adamw, grad_scale_in_the_same_pass)
{
	run_case(70001, ZN_DTYPE_F32, ZN_DTYPE_BF16, 0.01f, 1.0f / 1024, 3);
	run_case(70001, ZN_DTYPE_F16, ZN_DTYPE_BF16, 0.01f, 0.37f, 3);
}

/* A double-precision AdamW written from the textbook formula (PyTorch's docs), independent
 * of the shared per-call constants: catches a wrong formula that both float versions share. */
Test(adamw, matches_textbook_double_adamw)
{
	const size_t n = 4099;
	const int steps = 6;
	struct state a;
	struct zn_adamw_params p;
	double *mst = malloc(n * 8), *m = malloc(n * 8), *v = malloc(n * 8);
	float *md = malloc(n * 4);

	state_fill(&a, n, 5);
	for (size_t i = 0; i < n; i++) {
		mst[i] = a.master[i];
		m[i] = a.m[i];
		v[i] = a.v[i];
	}
	zn_adamw_params_init(&p, NULL);
	p.lr = 3e-3f;
	p.weight_decay = 0.05f;
	p.grad_scale = 0.5f;
	for (int t = 1; t <= steps; t++) {
		p.step = t;
		const float *g = state_grad(&a, t, ZN_DTYPE_F32);

		cr_assert_eq(zn_adamw_step(&p, a.master, a.m, a.v, g, ZN_DTYPE_F32, NULL, 0, n), 0);
		double bc1 = 1 - pow(p.beta1, t), bc2 = 1 - pow(p.beta2, t);

		for (size_t i = 0; i < n; i++) {
			double gi = (double)g[i] * p.grad_scale;

			mst[i] *= 1 - (double)p.lr * p.weight_decay;
			m[i] = p.beta1 * m[i] + (1 - (double)p.beta1) * gi;
			v[i] = p.beta2 * v[i] + (1 - (double)p.beta2) * gi * gi;
			mst[i] -= p.lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + p.eps);
		}
	}
	for (size_t i = 0; i < n; i++)
		md[i] = (float)mst[i];
	/* float vs double over 6 steps: a few ulp of master */
	expect_close("master vs double AdamW", a.master, md, n, 1e-5);
	state_free(&a);
	free(mst);
	free(m);
	free(v);
	free(md);
}

Test(adamw, first_step_by_hand)
{
	/* t = 1: m_hat = g, v_hat = g^2, so master -= lr * (g / (|g| + eps) + wd * master). */
	float master = 1.0f, m = 0, v = 0, g = 0.5f;
	struct zn_adamw_params p;

	zn_adamw_params_init(&p, NULL);
	p.lr = 0.1f;
	p.weight_decay = 0.1f;
	cr_assert_eq(zn_adamw_step(&p, &master, &m, &v, &g, ZN_DTYPE_F32, NULL, 0, 1), 0);
	cr_expect_float_eq(master, 1.0f - 0.1f * (0.5f / (0.5f + 1e-8f) + 0.1f), 1e-6f,
			   "master %.9g", master);
	/* (float)(1 - 0.9f) and (float)(1 - 0.999f) are not exactly 0.1 and 0.001 */
	cr_expect_float_eq(m, 0.05f, 1e-6f, "m %.9g", m);
	cr_expect_float_eq(v, 0.001f * 0.25f, 1e-7f, "v %.9g", v);
}

Test(adamw, same_result_for_any_thread_count)
{
	const size_t n = 500001;
	struct state a, b;
	struct zn_adamw_params p;

	state_fill(&a, n, 3);
	state_copy(&b, &a);
	zn_adamw_params_init(&p, NULL);
	for (int t = 1; t <= 2; t++) {
		p.step = t;
		p.thread_count = 1;
		const void *ga = state_grad(&a, t, ZN_DTYPE_F32);
		cr_assert_eq(zn_adamw_step(&p, a.master, a.m, a.v, ga, ZN_DTYPE_F32, a.out,
					   ZN_DTYPE_BF16, n), 0);
		p.thread_count = 3;
		const void *gb = state_grad(&b, t, ZN_DTYPE_F32);
		cr_assert_eq(zn_adamw_step(&p, b.master, b.m, b.v, gb, ZN_DTYPE_F32, b.out,
					   ZN_DTYPE_BF16, n), 0);
	}
	cr_expect(memcmp(a.master, b.master, n * 4) == 0, "master differs between 1 and 3 threads");
	cr_expect(memcmp(a.m, b.m, n * 4) == 0, "m differs between 1 and 3 threads");
	cr_expect(memcmp(a.v, b.v, n * 4) == 0, "v differs between 1 and 3 threads");
	cr_expect(memcmp(a.out, b.out, n * 2) == 0, "bf16 out differs between 1 and 3 threads");
	state_free(&a);
	state_free(&b);
}

Test(adamw, bad_hyperparameters_rejected_before_writing)
{
	float master = 1, m = 0.5f, v = 0.25f, g = 0.125f;
	struct zn_adamw_params p, q;

	zn_adamw_params_init(&p, NULL);
	q = p;
	q.step = 0;
	cr_expect_eq(zn_adamw_step(&q, &master, &m, &v, &g, ZN_DTYPE_F32, NULL, 0, 1), -EINVAL);
	q = p;
	q.beta1 = 1.0f;
	cr_expect_eq(zn_adamw_step(&q, &master, &m, &v, &g, ZN_DTYPE_F32, NULL, 0, 1), -EINVAL);
	q = p;
	q.eps = 0;
	cr_expect_eq(zn_adamw_step(&q, &master, &m, &v, &g, ZN_DTYPE_F32, NULL, 0, 1), -EINVAL);
	q = p;
	q.grad_scale = 0;
	cr_expect_eq(zn_adamw_step(&q, &master, &m, &v, &g, ZN_DTYPE_F32, NULL, 0, 1), -EINVAL);
	q = p;
	q.lr = NAN;
	cr_expect_eq(zn_adamw_step_ref(&q, &master, &m, &v, &g, ZN_DTYPE_F32, NULL, 0, 1), -EINVAL);
	cr_expect_eq(zn_adamw_step(&p, &master, &m, &v, &g, (enum zn_dtype)7, NULL, 0, 1), -EINVAL);
	cr_expect_eq(zn_adamw_step(&p, &master, &m, &v, &g, ZN_DTYPE_F32, &g, (enum zn_dtype)9, 1),
		     -EINVAL);
	cr_expect_eq(zn_adamw_step(&p, NULL, &m, &v, &g, ZN_DTYPE_F32, NULL, 0, 1), -EINVAL);
	cr_expect(master == 1 && m == 0.5f && v == 0.25f, "a rejected call wrote its buffers");
	cr_expect_eq(zn_adamw_step(&p, NULL, NULL, NULL, NULL, ZN_DTYPE_F32, NULL, 0, 0), 0,
		     "n = 0 is a no-op");
}

Test(adamw, bytes_per_param)
{
	cr_expect_eq(zn_adamw_bytes_per_param(ZN_DTYPE_F32, true, ZN_DTYPE_BF16), 30);
	cr_expect_eq(zn_adamw_bytes_per_param(ZN_DTYPE_BF16, true, ZN_DTYPE_BF16), 28);
	cr_expect_eq(zn_adamw_bytes_per_param(ZN_DTYPE_F32, false, ZN_DTYPE_BF16), 28);
}

/* ---- gradient norm and inf/NaN ---------------------------------------------------- */

static void sumsq_case(size_t n, enum zn_dtype gt, int threads)
{
	struct state s;
	double got, want;
	bool bad_got, bad_want;

	state_fill(&s, n, 11);
	const void *g = state_grad(&s, 1, gt);

	cr_assert_eq(zn_grad_sumsq(g, gt, n, threads, &got, &bad_got), 0);
	cr_assert_eq(zn_grad_sumsq_ref(g, gt, n, &want, &bad_want), 0);
	cr_expect(!bad_got && !bad_want, "finite gradient flagged (n %zu, %s)", n, zn_dtype_name(gt));
	/* different summation order in double: relative 1e-12 */
	cr_expect(fabs(got - want) <= 1e-12 * want, "sumsq %.17g vs reference %.17g (n %zu, %s)",
		  got, want, n, zn_dtype_name(gt));
	state_free(&s);
}

Test(grad_sumsq, matches_reference)
{
	enum zn_dtype types[] = { ZN_DTYPE_F32, ZN_DTYPE_BF16, ZN_DTYPE_F16 };

	for (int t = 0; t < 3; t++) {
		sumsq_case(1, types[t], 0);
		sumsq_case(31, types[t], 0);
		sumsq_case(65537, types[t], 0);
		sumsq_case(1000003, types[t], 2);
	}
}

Test(grad_sumsq, same_for_any_thread_count)
{
	struct state s;
	double a, b;
	bool fa, fb;

	state_fill(&s, 777777, 4);
	cr_assert_eq(zn_grad_sumsq(s.grad32, ZN_DTYPE_F32, s.n, 1, &a, &fa), 0);
	cr_assert_eq(zn_grad_sumsq(s.grad32, ZN_DTYPE_F32, s.n, 3, &b, &fb), 0);
	cr_expect(memcmp(&a, &b, sizeof(a)) == 0, "sumsq %.17g (1 thread) vs %.17g (3 threads)", a, b);
	state_free(&s);
}

Test(grad_sumsq, detects_nan_and_inf)
{
	const size_t n = 200003;
	const float bads[] = { NAN, -NAN, INFINITY, -INFINITY };
	const size_t where[] = { 0, 65535, 65536, n - 1 };
	struct state s;

	state_fill(&s, n, 9);
	for (int b = 0; b < 4; b++)
		for (int w = 0; w < 4; w++) {
			enum zn_dtype types[] = { ZN_DTYPE_F32, ZN_DTYPE_BF16, ZN_DTYPE_F16 };

			for (int t = 0; t < 3; t++) {
				const void *g = state_grad(&s, 1, types[t]);
				double sq;
				bool bad = false;

				if (types[t] == ZN_DTYPE_F32)
					s.grad32[where[w]] = bads[b];
				else
					s.grad16[where[w]] = types[t] == ZN_DTYPE_BF16
						? zn_f32_to_bf16(bads[b]) : zn_f32_to_f16(bads[b]);
				cr_assert_eq(zn_grad_sumsq(g, types[t], n, 0, &sq, &bad), 0);
				cr_expect(bad, "%s %g at [%zu] not detected", zn_dtype_name(types[t]),
					  bads[b], where[w]);
				cr_assert_eq(zn_grad_sumsq_ref(g, types[t], n, &sq, &bad), 0);
				cr_expect(bad, "reference missed %g at [%zu]", bads[b], where[w]);
			}
		}
	/* the largest finite values are not flagged and their squares do not overflow */
	s.grad32[0] = 3.4028235e38f;
	s.grad32[1] = -3.4028235e38f;
	double sq;
	bool bad = true;

	cr_assert_eq(zn_grad_sumsq(s.grad32, ZN_DTYPE_F32, 2, 0, &sq, &bad), 0);
	cr_expect(!bad && isfinite(sq) && sq > 2e77, "FLT_MAX: bad %d sumsq %g", bad, sq);
	state_free(&s);
}

Test(grad_sumsq, rejects_bad_dtype)
{
	float g = 1;
	double sq;
	bool bad;

	cr_expect_eq(zn_grad_sumsq(&g, (enum zn_dtype)5, 1, 0, &sq, &bad), -EINVAL);
}
