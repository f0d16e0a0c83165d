/* AdamW with compact moments (cpu/adamw.h, zn_adamw_step_states): the SIMD passes against
 * the scalar reference bit for bit (bf16 and int8, every gradient and output dtype, L2 mode,
 * spans with their own weight decay that straddle blocks, thread counts); a step against a
 * float64 AdamW on the dequantized state (tests/q8_ref.h's maps and nearest code);
 * bitsandbytes' non-finite rule; the padding of the last block; refusals before writing. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cpu/adamw.h"
#include "cpu/q8.h"
#include "kernels_check.h"
#include "q8_ref.h"

/* One call's buffers: master, moments (as stored), gradient (fp32 and a 16-bit copy), out. */
struct st {
	size_t n, cap;    /* elements; moments' capacity (whole blocks) */
	enum zn_optim_states s;
	float *master, *grad32;
	uint16_t *grad16;
	void *m, *v, *out;
	struct zn_adamw_moments mo;
};

static void st_init(struct st *t, enum zn_optim_states s, size_t n, uint64_t seed)
{
	struct kc_rng r = { seed };
	size_t cap = zn_q8_blocks(n) * ZN_Q8_BLOCK;
	float *m32 = malloc(cap * 4), *v32 = malloc(cap * 4);

	*t = (struct st){ .n = n, .cap = cap, .s = s };
	t->master = malloc(n * 4);
	t->grad32 = malloc(n * 4);
	t->grad16 = malloc(n * 2);
	t->m = malloc(zn_adamw_state_bytes(s, cap));
	t->v = malloc(zn_adamw_state_bytes(s, cap));
	t->out = malloc(n * 4);
	cr_assert(m32 && v32 && t->master && t->grad32 && t->grad16 && t->m && t->v && t->out);
	kc_fill(&r, t->master, n, -1.0f, 1.0f);
	kc_fill(&r, t->grad32, n, -1e-1f, 1e-1f);
	kc_fill(&r, m32, cap, -1e-2f, 1e-2f);
	kc_fill(&r, v32, cap, 1e-8f, 1e-4f);
	for (size_t i = n; i < cap; i++)
		m32[i] = v32[i] = 0.0f;
	zn_adamw_moments_of(&t->mo, s, t->m, t->v, cap);
	if (s == ZN_STATES_INT8) {
		zn_q8_quantize(t->m, t->mo.m_absmax, m32, cap, true);
		zn_q8_quantize(t->v, t->mo.v_absmax, v32, cap, false);
	} else if (s == ZN_STATES_BF16) {
		zn_cast_f32_to_bf16(t->m, m32, cap);
		zn_cast_f32_to_bf16(t->v, v32, cap);
	} else {
		memcpy(t->m, m32, cap * 4);
		memcpy(t->v, v32, cap * 4);
	}
	memset(t->out, 0x5a, n * 4);
	free(m32);
	free(v32);
}

static void st_copy(struct st *d, const struct st *t)
{
	st_init(d, t->s, t->n, 1);
	memcpy(d->master, t->master, t->n * 4);
	memcpy(d->grad32, t->grad32, t->n * 4);
	memcpy(d->grad16, t->grad16, t->n * 2);
	memcpy(d->m, t->m, zn_adamw_state_bytes(t->s, t->cap));
	memcpy(d->v, t->v, zn_adamw_state_bytes(t->s, t->cap));
	memcpy(d->out, t->out, t->n * 4);
}

static void st_free(struct st *t)
{
	free(t->master);
	free(t->grad32);
	free(t->grad16);
	free(t->m);
	free(t->v);
	free(t->out);
}

static const void *st_grad(struct st *t, enum zn_dtype gt)
{
	if (gt == ZN_DTYPE_BF16)
		zn_cast_f32_to_bf16(t->grad16, t->grad32, t->n);
	else if (gt == ZN_DTYPE_F16)
		zn_cast_f32_to_f16(t->grad16, t->grad32, t->n);
	return gt == ZN_DTYPE_F32 ? (const void *)t->grad32 : (const void *)t->grad16;
}

/* spans of 77, 300, 1 and the rest, decaying in turn: they start inside blocks */
static int make_spans(struct zn_adamw_span *sp, size_t n, float wd)
{
	static const size_t len[] = { 77, 300, 1 };
	size_t at = 0;
	int k = 0;

	for (int i = 0; i < 3 && at < n; i++) {
		size_t c = len[i] < n - at ? len[i] : n - at;
		float w = k % 2 ? 0.0f : wd;

		sp[k++] = (struct zn_adamw_span){ at, c, w };
		at += c;
	}
	if (at < n)
		sp[k++] = (struct zn_adamw_span){ at, n - at, wd };
	return k;
}

static void expect_same_bytes(const char *what, const void *a, const void *b, size_t bytes)
{
	const uint8_t *x = a, *y = b;

	for (size_t i = 0; i < bytes; i++)
		if (x[i] != y[i])
			cr_assert_fail("%s: byte %zu differs (%02x, reference %02x)", what, i, x[i],
				       y[i]);
}

static void simd_vs_ref(enum zn_optim_states s, size_t n, enum zn_dtype gt, int ot, bool l2,
			int steps, int threads)
{
	struct st a, b;
	struct zn_adamw_params p;
	struct zn_adamw_span sp[8];
	int ns = make_spans(sp, n, 0.1f);

	st_init(&a, s, n, 1000 + n);
	st_copy(&b, &a);
	zn_adamw_params_init(&p, NULL);
	p.l2 = l2;
	p.lr = 1e-2f;
	p.grad_scale = 0.75f;
	p.thread_count = threads;
	for (int k = 1; k <= steps; k++) {
		p.step = k;
		cr_assert_eq(zn_adamw_step_states(&p, a.master, &a.mo, st_grad(&a, gt), gt,
						  ot < 0 ? NULL : a.out, ot < 0 ? ZN_DTYPE_F32 : ot,
						  n, sp, ns), 0);
		cr_assert_eq(zn_adamw_step_states_ref(&p, b.master, &b.mo, st_grad(&b, gt), gt,
						      ot < 0 ? NULL : b.out,
						      ot < 0 ? ZN_DTYPE_F32 : ot, n, sp, ns), 0);
	}
	expect_same_bytes("master", a.master, b.master, n * 4);
	expect_same_bytes("m", a.m, b.m, zn_adamw_state_bytes(s, a.cap));
	expect_same_bytes("v", a.v, b.v, zn_adamw_state_bytes(s, a.cap));
	if (ot >= 0)
		expect_same_bytes("out", a.out, b.out, n * zn_dtype_size(ot));
	st_free(&a);
	st_free(&b);
}

static const size_t sizes[] = { 1, 255, 256, 1000, 70001, 300007 };

Test(adamw_states, int8_simd_matches_reference_bit_for_bit)
{
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (int gt = ZN_DTYPE_F32; gt <= ZN_DTYPE_F16; gt++)
			for (int ot = -1; ot <= ZN_DTYPE_F16; ot++)
				simd_vs_ref(ZN_STATES_INT8, sizes[k], gt, ot, false, 3, 0);
	simd_vs_ref(ZN_STATES_INT8, 70001, ZN_DTYPE_F32, ZN_DTYPE_BF16, true, 3, 0);
}

Test(adamw_states, bf16_simd_matches_reference_bit_for_bit)
{
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (int gt = ZN_DTYPE_F32; gt <= ZN_DTYPE_F16; gt++)
			for (int ot = -1; ot <= ZN_DTYPE_F16; ot++)
				simd_vs_ref(ZN_STATES_BF16, sizes[k], gt, ot, false, 3, 0);
	simd_vs_ref(ZN_STATES_BF16, 70001, ZN_DTYPE_F32, ZN_DTYPE_BF16, true, 3, 0);
}

Test(adamw_states, same_bits_for_any_thread_count)
{
	for (int t = 1; t <= 3; t++) {
		simd_vs_ref(ZN_STATES_INT8, 300007, ZN_DTYPE_F32, ZN_DTYPE_BF16, false, 2, t);
		simd_vs_ref(ZN_STATES_BF16, 300007, ZN_DTYPE_F32, ZN_DTYPE_BF16, false, 2, t);
	}
}

Test(adamw_states, fp32_states_are_zn_adamw_step_per_span)
{
	struct st a, b;
	struct zn_adamw_params p;
	struct zn_adamw_span sp[8];
	size_t n = 1000;
	int ns = make_spans(sp, n, 0.1f);

	st_init(&a, ZN_STATES_FP32, n, 3);
	st_copy(&b, &a);
	zn_adamw_params_init(&p, NULL);
	cr_assert_eq(zn_adamw_step_states(&p, a.master, &a.mo, a.grad32, ZN_DTYPE_F32, a.out,
					  ZN_DTYPE_BF16, n, sp, ns), 0);
	for (int s = 0; s < ns; s++) {
		size_t i = sp[s].first;

		p.weight_decay = sp[s].weight_decay;
		cr_assert_eq(zn_adamw_step(&p, b.master + i, (float *)b.m + i, (float *)b.v + i,
					   b.grad32 + i, ZN_DTYPE_F32, (uint16_t *)b.out + i,
					   ZN_DTYPE_BF16, sp[s].count), 0);
	}
	expect_same_bytes("master", a.master, b.master, n * 4);
	expect_same_bytes("m", a.m, b.m, n * 4);
	expect_same_bytes("out", a.out, b.out, n * 2);
	st_free(&a);
	st_free(&b);
}

/* float64 AdamW (adamw.h's formula, decoupled decay) of one element */
static void adamw64(const struct zn_adamw_params *p, double wd, double g, double *master,
		    double *m, double *v)
{
	double t = (double)p->step;

	g *= p->grad_scale;
	*m = p->beta1 * *m + (1 - (double)p->beta1) * g;
	*v = p->beta2 * *v + (1 - (double)p->beta2) * g * g;
	double mh = *m / (1 - pow(p->beta1, t)), vh = *v / (1 - pow(p->beta2, t));

	*master -= p->lr * (mh / (sqrt(vh) + p->eps) + wd * *master);
}

/* x within float error of the midpoint of a and b */
static bool near_mid(double x, double a, double b)
{
	double mid = (a + b) / 2.0;

	return fabs(x - mid) <= 1e-5 * fabs(mid) + 1e-12;
}

Test(adamw_states, int8_step_matches_float64_adamw_on_the_dequantized_state)
{
	size_t n = 4 * ZN_Q8_BLOCK + 77;
	struct st a;
	struct zn_adamw_params p;
	struct zn_adamw_span sp[8];
	int ns = make_spans(sp, n, 0.1f), bad = 0;
	const float *map_s = zn_q8_map(true), *map_u = zn_q8_map(false);
	double *master = malloc(n * 8), *m = malloc(n * 8), *v = malloc(n * 8);
	double ref_map_s[256], ref_map_u[256];

	cr_assert(master && m && v);
	qr_map(ref_map_s, true);
	qr_map(ref_map_u, false);
	st_init(&a, ZN_STATES_INT8, n, 77);
	zn_adamw_params_init(&p, NULL);
	p.lr = 1e-2f;
	p.step = 5;
	/* the reference widens with its own maps */
	for (size_t i = 0, s = 0; i < n; i++) {
		const uint8_t *mq = a.m, *vq = a.v;

		m[i] = ref_map_s[mq[i]] * a.mo.m_absmax[i / ZN_Q8_BLOCK];
		v[i] = ref_map_u[vq[i]] * a.mo.v_absmax[i / ZN_Q8_BLOCK];
		master[i] = a.master[i];
		while (i >= sp[s].first + sp[s].count)
			s++;
		adamw64(&p, sp[s].weight_decay, a.grad32[i], &master[i], &m[i], &v[i]);
	}
	cr_assert_eq(zn_adamw_step_states(&p, a.master, &a.mo, a.grad32, ZN_DTYPE_F32, NULL,
					  ZN_DTYPE_F32, n, sp, ns), 0);
	for (size_t i = 0; i < n; i++)
		cr_assert(fabs(a.master[i] - master[i]) <= 1e-6 * (1 + fabs(master[i])),
			  "master %zu: %.9g, float64 %.12g", i, a.master[i], master[i]);
	/* the new codes: the float64 moments quantized by the reference */
	for (size_t b = 0; b < zn_q8_blocks(n); b++) {
		size_t first = b * ZN_Q8_BLOCK, end = first + ZN_Q8_BLOCK < n ? first + ZN_Q8_BLOCK : n;
		double am = 0, av = 0;

		for (size_t i = first; i < end; i++) {
			am = fmax(am, fabs(m[i]));
			av = fmax(av, v[i]);
		}
		cr_expect(fabs(a.mo.m_absmax[b] - am) <= 1e-5 * am, "block %zu m absmax %.9g, %.12g",
			  b, a.mo.m_absmax[b], am);
		cr_expect(fabs(a.mo.v_absmax[b] - av) <= 1e-5 * av, "block %zu v absmax", b);
		for (size_t i = first; i < end; i++) {
			const uint8_t *mq = a.m, *vq = a.v;
			double xm = m[i] / am, xv = v[i] / av;
			int cm = qr_nearest(map_s, xm), cv = qr_nearest(map_u, xv);

			if (m[i] < 0 && map_s[cm] >= 0)
				cm--;
			/* a value within float error of a midpoint may round either way */
			if (mq[i] != cm && !(abs(mq[i] - cm) == 1 &&
					     near_mid(xm, map_s[mq[i]], map_s[cm])))
				bad++;
			if (vq[i] != cv && !(abs(vq[i] - cv) == 1 &&
					     near_mid(xv, map_u[vq[i]], map_u[cv])))
				bad++;
		}
	}
	cr_expect_eq(bad, 0, "%d codes differ from the float64 reference's", bad);
	free(master);
	free(m);
	free(v);
	st_free(&a);
}

Test(adamw_states, bf16_step_matches_float64_adamw)
{
	size_t n = 1000;
	struct st a;
	struct zn_adamw_params p;
	struct zn_adamw_span sp[8];

	make_spans(sp, n, 0.1f);
	st_init(&a, ZN_STATES_BF16, n, 9);
	zn_adamw_params_init(&p, NULL);
	p.step = 3;
	for (size_t i = 0, s = 0; i < n; i++) {
		uint16_t *mh = a.m, *vh = a.v;
		double m = zn_bf16_to_f32(mh[i]), v = zn_bf16_to_f32(vh[i]), master = a.master[i];

		while (i >= sp[s].first + sp[s].count)
			s++;
		adamw64(&p, sp[s].weight_decay, a.grad32[i], &master, &m, &v);
		cr_assert_eq(zn_adamw_step_states(&p, a.master + i, &(struct zn_adamw_moments){
			ZN_STATES_BF16, mh + i, vh + i, NULL, NULL }, a.grad32 + i, ZN_DTYPE_F32,
			NULL, ZN_DTYPE_F32, 1, &(struct zn_adamw_span){ 0, 1,
			sp[s].weight_decay }, 1), 0);
		cr_assert(fabs(a.master[i] - master) <= 1e-6 * (1 + fabs(master)), "master %zu", i);
		/* stored rounded to nearest: within half a bf16 step (2^-8 relative) */
		cr_assert(fabs(zn_bf16_to_f32(mh[i]) - m) <= fabs(m) * 0x1p-8 * 1.001, "m %zu", i);
		cr_assert(fabs(zn_bf16_to_f32(vh[i]) - v) <= v * 0x1p-8 * 1.001, "v %zu", i);
	}
	st_free(&a);
}

Test(adamw_states, nonfinite_gradient_resets_the_element_as_bitsandbytes)
{
	size_t n = 2 * ZN_Q8_BLOCK;
	struct st a;
	struct zn_adamw_params p;
	struct zn_adamw_span sp = { 0, n, 0.1f };
	float before[4];
	int at[4] = { 3, 100, 300, 511 };

	st_init(&a, ZN_STATES_INT8, n, 5);
	a.grad32[3] = NAN;
	a.grad32[100] = INFINITY;
	a.grad32[300] = -INFINITY;
	a.grad32[511] = NAN;
	for (int k = 0; k < 4; k++)
		before[k] = a.master[at[k]];
	zn_adamw_params_init(&p, NULL);
	cr_assert_eq(zn_adamw_step_states(&p, a.master, &a.mo, a.grad32, ZN_DTYPE_F32, NULL,
					  ZN_DTYPE_F32, n, &sp, 1), 0);
	for (int k = 0; k < 4; k++) {
		cr_expect_eq(a.master[at[k]], before[k], "element %d's weight changed", at[k]);
		cr_expect_eq(((uint8_t *)a.m)[at[k]], ZN_Q8_ZERO_SIGNED);
		cr_expect_eq(((uint8_t *)a.v)[at[k]], ZN_Q8_ZERO_UNSIGNED);
	}
	for (int b = 0; b < 2; b++)
		cr_expect(isfinite(a.mo.m_absmax[b]) && a.mo.m_absmax[b] > 0 &&
			  isfinite(a.mo.v_absmax[b]) && a.mo.v_absmax[b] > 0, "block %d", b);
	for (size_t i = 0; i < n; i++)
		cr_expect(isfinite(a.master[i]));
	st_free(&a);
}

Test(adamw_states, the_last_blocks_padding_becomes_zero)
{
	size_t n = ZN_Q8_BLOCK + 10;
	struct st a;
	struct zn_adamw_params p;
	struct zn_adamw_span sp = { 0, n, 0.0f };
	const uint8_t *mq, *vq;

	st_init(&a, ZN_STATES_INT8, n, 8);
	mq = a.m;
	vq = a.v;
	memset((uint8_t *)a.m + n, 200, a.cap - n); /* not zero before */
	zn_adamw_params_init(&p, NULL);
	cr_assert_eq(zn_adamw_step_states(&p, a.master, &a.mo, a.grad32, ZN_DTYPE_F32, NULL,
					  ZN_DTYPE_F32, n, &sp, 1), 0);
	for (size_t i = n; i < a.cap; i++) {
		cr_expect_eq(mq[i], ZN_Q8_ZERO_SIGNED, "m code %zu", i);
		cr_expect_eq(vq[i], ZN_Q8_ZERO_UNSIGNED, "v code %zu", i);
	}
	st_free(&a);
}

Test(adamw_states, bad_spans_and_moments_refused_before_writing)
{
	size_t n = 600;
	struct st a, b;
	struct zn_adamw_params p;
	struct zn_adamw_span gap[2] = { { 0, 100, 0.0f }, { 101, 499, 0.0f } };
	struct zn_adamw_span shortspan = { 0, 599, 0.0f }, bad_wd = { 0, 600, NAN };
	struct zn_adamw_moments no_absmax;

	st_init(&a, ZN_STATES_INT8, n, 4);
	st_copy(&b, &a);
	zn_adamw_params_init(&p, NULL);
	cr_expect_eq(zn_adamw_step_states(&p, a.master, &a.mo, a.grad32, ZN_DTYPE_F32, NULL,
					  ZN_DTYPE_F32, n, gap, 2), -EINVAL);
	cr_expect_eq(zn_adamw_step_states(&p, a.master, &a.mo, a.grad32, ZN_DTYPE_F32, NULL,
					  ZN_DTYPE_F32, n, &shortspan, 1), -EINVAL);
	cr_expect_eq(zn_adamw_step_states(&p, a.master, &a.mo, a.grad32, ZN_DTYPE_F32, NULL,
					  ZN_DTYPE_F32, n, &bad_wd, 1), -EINVAL);
	no_absmax = a.mo;
	no_absmax.v_absmax = NULL;
	cr_expect_eq(zn_adamw_step_states(&p, a.master, &no_absmax, a.grad32, ZN_DTYPE_F32,
					  NULL, ZN_DTYPE_F32, n, &(struct zn_adamw_span){ 0, n, 0 },
					  1), -EINVAL);
	p.step = 0;
	cr_expect_eq(zn_adamw_step_states(&p, a.master, &a.mo, a.grad32, ZN_DTYPE_F32, NULL,
					  ZN_DTYPE_F32, n, &(struct zn_adamw_span){ 0, n, 0 }, 1),
		     -EINVAL);
	expect_same_bytes("master", a.master, b.master, n * 4);
	expect_same_bytes("m", a.m, b.m, zn_adamw_state_bytes(a.s, a.cap));
	st_free(&a);
	st_free(&b);
}

Test(adamw_states, bytes)
{
	cr_expect_eq(zn_adamw_state_bytes(ZN_STATES_FP32, 2048), 8192);
	cr_expect_eq(zn_adamw_state_bytes(ZN_STATES_BF16, 2048), 4096);
	cr_expect_eq(zn_adamw_state_bytes(ZN_STATES_INT8, 2048), 2048 + 8 * 4);
	/* fp32 grad, bf16 out: 4 + 8 + 4 x (4, 2, 1 + 1/64) + 2 */
	cr_expect_float_eq(zn_adamw_states_bytes_per_param(ZN_STATES_FP32, ZN_DTYPE_F32, true,
							    ZN_DTYPE_BF16), 30.0, 1e-12);
	cr_expect_float_eq(zn_adamw_states_bytes_per_param(ZN_STATES_BF16, ZN_DTYPE_F32, true,
							    ZN_DTYPE_BF16), 22.0, 1e-12);
	cr_expect_float_eq(zn_adamw_states_bytes_per_param(ZN_STATES_INT8, ZN_DTYPE_F32, true,
							    ZN_DTYPE_BF16), 18.0625, 1e-12);
	cr_expect_str_eq(zn_optim_states_name(ZN_STATES_INT8), "int8");
}
