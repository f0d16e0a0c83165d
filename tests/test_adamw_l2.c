/* L2-regularised Adam (zn_adamw_params.l2: torch.optim.Adam, DeepSpeed's Adam with
 * adam_w_mode false) in the CPU SIMD pass: against the scalar reference bit for bit (every
 * gradient and output dtype, sizes that are not multiples of the SIMD width, several steps),
 * against a float64 Adam written here from PyTorch's documented formula, the first step by
 * hand, and zn_adamw_params_init choosing the mode from the optimizer config. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cpu/adamw.h"

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static float uniform(uint64_t *s, float lo, float hi)
{
	return lo + (hi - lo) * (float)((rng_next(s) >> 40) * (1.0 / (1ull << 24)));
}

struct l2_state {
	float *master, *m, *v, *grad;
	uint16_t *grad16;
	void *out;
};

static void l2_fill(struct l2_state *s, size_t n, uint64_t seed)
{
	uint64_t r = seed * 0x9e3779b97f4a7c15ull | 1;

	s->master = malloc(n * 4);
	s->m = malloc(n * 4);
	s->v = malloc(n * 4);
	s->grad = malloc(n * 4);
	s->grad16 = malloc(n * 2);
	s->out = malloc(n * 4);
	cr_assert(s->master && s->m && s->v && s->grad && s->grad16 && s->out);
	for (size_t i = 0; i < n; i++) {
		s->master[i] = uniform(&r, -1, 1);
		s->m[i] = uniform(&r, -1e-2f, 1e-2f);
		s->v[i] = uniform(&r, 0, 1e-4f);
	}
	memset(s->out, 0x5a, n * 4);
}

static void l2_free(struct l2_state *s)
{
	free(s->master);
	free(s->m);
	free(s->v);
	free(s->grad);
	free(s->grad16);
	free(s->out);
}

static const void *l2_grad(struct l2_state *s, size_t n, int t, enum zn_dtype gt)
{
	uint64_t r = 0x2468aceull + (uint64_t)t * 7919;

	for (size_t i = 0; i < n; i++) {
		s->grad[i] = uniform(&r, -1e-1f, 1e-1f);
		if (gt == ZN_DTYPE_BF16)
			s->grad16[i] = zn_f32_to_bf16(s->grad[i]);
		else if (gt == ZN_DTYPE_F16)
			s->grad16[i] = zn_f32_to_f16(s->grad[i]);
	}
	return gt == ZN_DTYPE_F32 ? (const void *)s->grad : (const void *)s->grad16;
}

static void l2_params(struct zn_adamw_params *p)
{
	struct zn_optimizer_config o = { .type = ZN_OPTIM_ADAM, .lr = 1e-2f, .beta1 = 0.9f,
					 .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.2f,
					 .adam_w_mode = false };

	zn_adamw_params_init(p, &o);
	cr_assert(p->l2, "Adam with adam_w_mode false must select L2");
}

static void simd_vs_ref(size_t n, enum zn_dtype gt, int ot, float scale)
{
	struct l2_state a, b;
	struct zn_adamw_params p;
	size_t osize = ot == ZN_DTYPE_F32 ? 4 : 2;

	l2_fill(&a, n, n + 3);
	l2_fill(&b, n, n + 3);
	l2_params(&p);
	p.grad_scale = scale;
	for (int t = 1; t <= 3; t++) {
		p.step = t;
		cr_assert_eq(zn_adamw_step(&p, a.master, a.m, a.v, l2_grad(&a, n, t, gt), gt,
					   ot < 0 ? NULL : a.out, ot < 0 ? 0 : ot, n), 0);
		cr_assert_eq(zn_adamw_step_ref(&p, b.master, b.m, b.v, l2_grad(&b, n, t, gt), gt,
					       ot < 0 ? NULL : b.out, ot < 0 ? 0 : ot, n), 0);
	}
	cr_expect(memcmp(a.master, b.master, n * 4) == 0, "n %zu gt %d ot %d: master", n, gt, ot);
	cr_expect(memcmp(a.m, b.m, n * 4) == 0, "n %zu gt %d ot %d: m", n, gt, ot);
	cr_expect(memcmp(a.v, b.v, n * 4) == 0, "n %zu gt %d ot %d: v", n, gt, ot);
	if (ot >= 0)
		cr_expect(memcmp(a.out, b.out, n * osize) == 0, "n %zu ot %d: out", n, ot);
	l2_free(&a);
	l2_free(&b);
}

Test(adamw_l2, simd_equals_scalar_reference)
{
	static const size_t sizes[] = { 1, 7, 17, 1000, 70001, 300007 };
	static const int outs[] = { -1, ZN_DTYPE_F32, ZN_DTYPE_BF16, ZN_DTYPE_F16 };

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (int o = 0; o < 4; o++)
			simd_vs_ref(sizes[s], ZN_DTYPE_F32, outs[o], 1.0f);
		simd_vs_ref(sizes[s], ZN_DTYPE_BF16, ZN_DTYPE_BF16, 0.5f);
		simd_vs_ref(sizes[s], ZN_DTYPE_F16, -1, 1.0f / 64);
	}
}

/* float64 Adam from PyTorch's torch.optim.Adam documentation (weight_decay into g) */
Test(adamw_l2, matches_float64_adam)
{
	const size_t n = 4099;
	struct l2_state a;
	struct zn_adamw_params p;
	double *mst = malloc(n * 8), *m = malloc(n * 8), *v = malloc(n * 8);

	cr_assert(mst && m && v);
	l2_fill(&a, n, 9);
	for (size_t i = 0; i < n; i++) {
		mst[i] = a.master[i];
		m[i] = a.m[i];
		v[i] = a.v[i];
	}
	l2_params(&p);
	p.grad_scale = 0.5f;
	for (int t = 1; t <= 6; t++) {
		const float *g = l2_grad(&a, n, t, ZN_DTYPE_F32);
		double bc1 = 1 - pow(p.beta1, t), bc2 = 1 - pow(p.beta2, t);

		p.step = t;
		cr_assert_eq(zn_adamw_step(&p, a.master, a.m, a.v, g, ZN_DTYPE_F32, NULL, 0, n), 0);
		for (size_t i = 0; i < n; i++) {
			double gi = (double)g[i] * p.grad_scale + (double)p.weight_decay * mst[i];

			m[i] = p.beta1 * m[i] + (1 - (double)p.beta1) * gi;
			v[i] = p.beta2 * v[i] + (1 - (double)p.beta2) * gi * gi;
			mst[i] -= p.lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + p.eps);
		}
	}
	for (size_t i = 0; i < n; i++)
		cr_assert(fabs(a.master[i] - mst[i]) <= 1e-5 * fmax(fabs(mst[i]), 1e-3),
			  "element %zu: %.9g, float64 Adam %.9g", i, a.master[i], mst[i]);
	l2_free(&a);
	free(mst);
	free(m);
	free(v);
}

Test(adamw_l2, first_step_by_hand)
{
	/* t = 1: g' = 0.5 + 0.1 * 1 = 0.6, m_hat = g', v_hat = g'^2: master -= lr * g'/(g'+eps)
	 * (no decoupled decay: AdamW would give 1 - 0.1 * (1 + 0.1) instead) */
	float master = 1.0f, m = 0, v = 0, g = 0.5f;
	struct zn_adamw_params p;

	zn_adamw_params_init(&p, NULL);
	p.l2 = true;
	p.lr = 0.1f;
	p.weight_decay = 0.1f;
	cr_assert_eq(zn_adamw_step(&p, &master, &m, &v, &g, ZN_DTYPE_F32, NULL, 0, 1), 0);
	cr_expect_float_eq(master, 1.0f - 0.1f * (0.6f / (0.6f + 1e-8f)), 1e-6f, "master %.9g",
			   master);
	cr_expect_float_eq(m, 0.06f, 1e-6f, "m %.9g (the moment sees the decay)", m);
	cr_expect_float_eq(v, 0.001f * 0.36f, 1e-7f, "v %.9g", v);
}

Test(adamw_l2, mode_from_config)
{
	struct zn_optimizer_config o = { .type = ZN_OPTIM_ADAM, .lr = 1e-3f, .beta1 = 0.9f,
					 .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
					 .adam_w_mode = true };
	struct zn_adamw_params p;

	zn_adamw_params_init(&p, &o);
	cr_expect(!p.l2, "Adam with adam_w_mode true is AdamW");
	o.adam_w_mode = false;
	zn_adamw_params_init(&p, &o);
	cr_expect(p.l2, "Adam with adam_w_mode false is L2 Adam");
	o.type = ZN_OPTIM_ADAMW;
	zn_adamw_params_init(&p, &o);
	cr_expect(!p.l2, "AdamW is AdamW whatever adam_w_mode says");
	zn_adamw_params_init(&p, NULL);
	cr_expect(!p.l2, "the default is AdamW");
}
