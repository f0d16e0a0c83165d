/* The kernel table's optimizer ops on the CPU (kernels/cpu): adamw against the scalar
 * reference zn_adamw_step_ref bit for bit (the table op is zn_adamw_step, itself held to
 * the reference), over several steps, decay on and off, with and without the bf16 copy;
 * grad_sumsq against a sequential long-double sum, its non-finite flag, N = 0. Sizes are
 * not multiples of 32 (and one spans several of zn_adamw_step's chunks and threads).
 */
#include <criterion/criterion.h>

#include <math.h>

#include "cpu/adamw.h"
#include "kernels.h"
#include "optim_check.h"

static const size_t sizes[] = { 1, 31, 33, 1000, 70001 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

static void ref_step(struct oc_state *s, const struct zn_kernel_adamw *hp, bool out)
{
	struct zn_adamw_params p;

	zn_adamw_params_init(&p, NULL);
	p.lr = hp->lr;
	p.beta1 = hp->beta1;
	p.beta2 = hp->beta2;
	p.eps = hp->eps;
	p.weight_decay = hp->weight_decay;
	p.grad_scale = hp->grad_scale;
	p.step = hp->step;
	p.l2 = hp->l2 != 0;
	cr_assert_eq(zn_adamw_step_ref(&p, s->master, s->m, s->v, s->grad, ZN_DTYPE_F32,
				       out ? s->out : NULL, ZN_DTYPE_BF16, s->n), 0);
}

static void check_adamw(float weight_decay, bool out, int32_t l2)
{
	for (size_t k = 0; k < NSIZES; k++) {
		struct oc_state t, r;
		size_t n = sizes[k];
		char what[96];

		oc_state_init(&t, n, 100 + k);
		oc_state_copy(&r, &t);
		for (int64_t step = 1; step <= 3; step++) {
			struct zn_kernel_adamw hp = oc_hparams(step, weight_decay);
			float before = t.master[n - 1];

			hp.l2 = l2;

			cpu->adamw(NULL, t.master, t.m, t.v, out ? t.out : NULL, t.grad, &hp, n);
			ref_step(&r, &hp, out);
			snprintf(what, sizeof(what), "n %zu step %lld wd %g l2 %d", n,
				 (long long)step, weight_decay, (int)l2);
			cr_assert(t.master[n - 1] != before, "%s: master did not move", what);
			cr_assert(oc_same_bits(what, t.master, r.master, n, 4), "%s: master", what);
			cr_assert(oc_same_bits(what, t.m, r.m, n, 4), "%s: m", what);
			cr_assert(oc_same_bits(what, t.v, r.v, n, 4), "%s: v", what);
			cr_assert(oc_same_bits(what, t.out, r.out, n, 2), "%s: bf16 copy", what);
			oc_regrad(&t, 1000 * step + k);
			oc_regrad(&r, 1000 * step + k);
		}
		oc_state_free(&t);
		oc_state_free(&r);
	}
}

Test(kernels_optim, adamw_equals_reference_with_decay) { check_adamw(0.1f, true, 0); }
Test(kernels_optim, adamw_equals_reference_without_decay) { check_adamw(0.0f, true, 0); }
Test(kernels_optim, adamw_without_bf16_copy_leaves_it_alone) { check_adamw(0.1f, false, 0); }
Test(kernels_optim, l2_adam_equals_reference) { check_adamw(0.1f, true, 1); }
Test(kernels_optim, l2_adam_without_bf16_copy) { check_adamw(0.1f, false, 1); }

/* hp->l2 against a float64 L2-regularised Adam (torch.optim.Adam's update) written here:
 * g' = g * grad_scale + wd * p, the moments of g', p -= lr * m_hat / (sqrt(v_hat) + eps) */
Test(kernels_optim, l2_adam_matches_float64_adam)
{
	struct oc_state s;
	size_t n = 1001;
	double *p = malloc(n * 8), *m = malloc(n * 8), *v = malloc(n * 8);

	cr_assert(p && m && v);
	oc_state_init(&s, n, 41);
	for (size_t i = 0; i < n; i++) {
		p[i] = s.master[i];
		m[i] = s.m[i];
		v[i] = s.v[i];
	}
	for (int64_t t = 1; t <= 4; t++) {
		struct zn_kernel_adamw hp = oc_hparams(t, 0.3f);

		hp.l2 = 1;
		cpu->adamw(NULL, s.master, s.m, s.v, s.out, s.grad, &hp, n);
		double bc1 = 1 - pow(hp.beta1, (double)t), bc2 = 1 - pow(hp.beta2, (double)t);

		for (size_t i = 0; i < n; i++) {
			double g = (double)s.grad[i] * hp.grad_scale + (double)hp.weight_decay * p[i];

			m[i] = hp.beta1 * m[i] + (1 - (double)hp.beta1) * g;
			v[i] = hp.beta2 * v[i] + (1 - (double)hp.beta2) * g * g;
			p[i] -= hp.lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + hp.eps);
		}
		oc_regrad(&s, 77 + (uint64_t)t);
	}
	for (size_t i = 0; i < n; i++)
		cr_assert(fabs(s.master[i] - p[i]) <= 1e-5 * fmax(fabs(p[i]), 1e-3),
			  "element %zu: op %.9g, float64 Adam %.9g", i, s.master[i], p[i]);
	free(p);
	free(m);
	free(v);
	oc_state_free(&s);
}

/* decay actually changes the result (the op does not drop weight_decay) */
Test(kernels_optim, adamw_decay_matters)
{
	struct oc_state a, b;
	struct zn_kernel_adamw with = oc_hparams(1, 0.5f), without = oc_hparams(1, 0.0f);

	oc_state_init(&a, 33, 7);
	oc_state_copy(&b, &a);
	float *orig = malloc(a.n * sizeof(float));

	cr_assert(orig);
	memcpy(orig, a.master, a.n * sizeof(float));
	cpu->adamw(NULL, a.master, a.m, a.v, NULL, a.grad, &with, a.n);
	cpu->adamw(NULL, b.master, b.m, b.v, NULL, b.grad, &without, b.n);
	for (size_t i = 0; i < a.n; i++) {
		/* decoupled decay: the difference is lr * wd * master, exactly in double */
		double want = -1e-2 * 0.5 * (double)orig[i];

		cr_assert(fabs((double)a.master[i] - b.master[i] - want) <= 1e-6,
			  "element %zu: with decay %.9g, without %.9g", i, a.master[i],
			  b.master[i]);
	}
	free(orig);
	oc_state_free(&a);
	oc_state_free(&b);
}

static long double sumsq_ld(const float *g, size_t n)
{
	long double s = 0;

	for (size_t i = 0; i < n; i++)
		s += (long double)g[i] * g[i];
	return s;
}

Test(kernels_optim, grad_sumsq_equals_long_double_sum)
{
	static const size_t ns[] = { 1, 31, 1000, 65537, 200003 };

	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
		struct kc_rng r = { 55 + k };
		size_t n = ns[k];
		float *g = malloc(n * sizeof(float));
		double s = -1.0;
		int32_t bad = -1;

		cr_assert(g);
		kc_fill(&r, g, n, -3.0f, 2.0f);
		cpu->grad_sumsq(NULL, &s, &bad, NULL, g, n);
		long double want = sumsq_ld(g, n);
		/* products are exact in double and every term is positive, so n additions of
		 * relative error 2^-53 bound the error by n 2^-53 of the sum; twice that allows
		 * for a reference summed in double (valgrind runs long double as double) */
		cr_assert(fabsl(s - want) <= 2.0L * (long double)n * 0x1p-53L * want,
			  "n %zu: sumsq %.17g, want %.17Lg", n, s, want);
		cr_assert_eq(bad, 0, "n %zu: finite gradient flagged non-finite", n);
		free(g);
	}
}

Test(kernels_optim, grad_sumsq_flags_inf_and_nan)
{
	static const float specials[] = { INFINITY, -INFINITY, NAN };
	struct kc_rng r = { 77 };
	size_t n = 1003;
	float *g = malloc(n * sizeof(float));

	cr_assert(g);
	for (size_t k = 0; k < 3; k++) {
		double s;
		int32_t bad = -1;

		kc_fill(&r, g, n, -1.0f, 1.0f);
		g[n / 2 + k] = specials[k];
		cpu->grad_sumsq(NULL, &s, &bad, NULL, g, n);
		cr_assert_eq(bad, 1, "special %zu (%g) not flagged", k, specials[k]);
	}
	free(g);
}

Test(kernels_optim, grad_sumsq_of_nothing_is_zero)
{
	float g = 1.0f;
	double s = -1.0;
	int32_t bad = -1;

	cpu->grad_sumsq(NULL, &s, &bad, NULL, &g, 0);
	cr_assert(s == 0.0 && bad == 0, "N = 0: sumsq %g, nonfinite %d", s, bad);
}
