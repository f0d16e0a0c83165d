/* kernels/cpu's Llama-family ops (embedding, RMSNorm, RoPE, SwiGLU, grouped-query
 * attention) and kernels/rope.c's inverse frequencies.
 *
 * Forwards: against tests/ref/llama_kernels_ref.h, float64 references written by an
 * independent PyTorch implementation of Hugging Face's Llama equations
 * (tests/ref/gen_llama_kernels.py), and against double-precision loops here. Backwards:
 * against central finite differences of those double loops, with loss sum(out * w) for
 * random w; accumulate semantics (prefilled gradients, backward run twice = 2x); written
 * scratch starts as garbage. Shapes cover MHA (KV = NH), GQA, MQA (KV = 1), a head_dim
 * that is not hidden / heads, and a sliding window shorter than the sequence.
 * Tolerances as tests/test_kernels.c (kernels_grad.h): forwards 64 fp32 eps, backwards
 * 512 fp32 eps.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "kernels.h"
#include "kernels_check.h"
#include "kernels_grad.h"
#include "ref/llama_kernels_ref.h"
#include "rope.h"

static int same_bits(const float *a, const float *b, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], 4)) {
			fprintf(stderr, "%s: element %zu differs: %.9g vs %.9g\n", what, i, a[i],
				b[i]);
			return 0;
		}
	return 1;
}

/* ---- embedding ----------------------------------------------------------------------- */

Test(kernels_llama, embedding)
{
	struct kc_rng r = { 11 };
	enum { B = 2, T = 5, C = 12, V = 6 }; /* V < B*T: tokens repeat, so dwte sums */
	size_t n = (size_t)B * T * C, nw = (size_t)V * C;
	int inp[B * T];

	kc_fill_int(&r, inp, B * T, V);
	float *wte = frand(&r, nw, -1, 1), *w = frand(&r, n, -1, 1), *out = frand(&r, n, -9, 9);
	double *g = dalloc(nw);

	zn_cpu_embedding_forward(out, inp, wte, B, T, C);
	for (int bt = 0; bt < B * T; bt++)
		for (int i = 0; i < C; i++)
			cr_assert(out[bt * C + i] == wte[inp[bt] * C + i], "embedding out %d,%d", bt,
				  i);
	/* L = sum(out * w): dwte[v] = sum of w over the positions holding token v */
	for (int bt = 0; bt < B * T; bt++)
		for (int i = 0; i < C; i++)
			g[inp[bt] * C + i] += w[bt * C + i];
	float *d0 = prefill(&r, g, nw), *d = fcopy(d0, nw);

	for (int times = 1; times <= 2; times++) {
		zn_cpu_embedding_backward(d, w, inp, B, T, C);
		cr_assert(close_accum("embedding dwte", d, d0, g, nw, times));
	}
	free(wte), free(w), free(out), free(g), free(d0), free(d);
}

/* ---- rmsnorm ------------------------------------------------------------------------- */

struct rms_ctx {
	int BT, C;
	double eps, *inp, *weight, *w;
};

static void rms_ref(double *out, double *rstd, const struct rms_ctx *c)
{
	for (long bt = 0; bt < c->BT; bt++) {
		const double *x = c->inp + bt * c->C;
		double ss = 0;

		for (int i = 0; i < c->C; i++)
			ss += x[i] * x[i];
		double s = 1.0 / sqrt(ss / c->C + c->eps);

		for (int i = 0; i < c->C; i++)
			out[bt * c->C + i] = x[i] * s * c->weight[i];
		rstd[bt] = s;
	}
}

static double rms_loss(void *p)
{
	struct rms_ctx *c = p;
	size_t n = (size_t)c->BT * c->C;
	double *out = dalloc(n), *s = dalloc(c->BT);

	rms_ref(out, s, c);
	double l = dot_d(out, c->w, n);

	free(out), free(s);
	return l;
}

Test(kernels_llama, rmsnorm_forward_vs_torch)
{
	size_t n = (size_t)RMS_B * RMS_T * RMS_C, BT = (size_t)RMS_B * RMS_T;
	float *out = falloc(n), *rstd = falloc(BT);

	zn_cpu_rmsnorm_forward(out, rstd, rms_x, rms_w, RMS_EPS, RMS_B, RMS_T, RMS_C);
	cr_assert(kc_close("rmsnorm out vs torch", out, rms_out, n, RTOL_FWD));
	cr_assert(kc_close("rmsnorm rstd vs torch", rstd, rms_rstd, BT, RTOL_FWD));
	free(out), free(rstd);
}

Test(kernels_llama, rmsnorm)
{
	struct kc_rng r = { 22 };
	enum { B = 2, T = 5, C = 40 };
	size_t n = (size_t)B * T * C, BT = (size_t)B * T;
	float eps = 1e-5f;
	float *inp = frand(&r, n, -2, 2), *weight = frand(&r, C, 0.5f, 1.5f);
	float *w = frand(&r, n, -1, 1), *out = falloc(n), *rstd = falloc(BT);
	struct rms_ctx c = { B * T, C, eps, todouble(inp, n), todouble(weight, C), todouble(w, n) };
	double *ref = dalloc(n), *rs = dalloc(BT);

	zn_cpu_rmsnorm_forward(out, rstd, inp, weight, eps, B, T, C);
	rms_ref(ref, rs, &c);
	cr_assert(kc_close("rmsnorm out", out, ref, n, RTOL_FWD));
	cr_assert(kc_close("rmsnorm rstd", rstd, rs, BT, RTOL_FWD));

	double *gi = dalloc(n), *gw = dalloc(C);

	fd_grad(gi, c.inp, n, rms_loss, &c);
	fd_grad(gw, c.weight, C, rms_loss, &c);
	float *di0 = prefill(&r, gi, n), *dw0 = prefill(&r, gw, C);
	float *di = fcopy(di0, n), *dw = fcopy(dw0, C);

	for (int times = 1; times <= 2; times++) {
		zn_cpu_rmsnorm_backward(di, dw, w, inp, weight, rstd, B, T, C);
		cr_assert(close_accum("rmsnorm dinp", di, di0, gi, n, times));
		cr_assert(close_accum("rmsnorm dweight", dw, dw0, gw, C, times));
	}
	free(inp), free(weight), free(w), free(out), free(rstd), free(c.inp), free(c.weight);
	free(c.w), free(ref), free(rs), free(gi), free(gw), free(di0), free(dw0), free(di), free(dw);
}

/* ---- rope: inverse frequencies ------------------------------------------------------- */

/* within ulps of fp32 units of want (a float) */
static int within_ulps(float got, float want, int ulps)
{
	return fabsf(got - want) <= ulps * (nextafterf(fabsf(want), INFINITY) - fabsf(want));
}

static void check_inv_freq(const char *what, const struct zn_rope_params *p,
			   const double *ref64, const float *ref32)
{
	float inv[64];

	cr_assert_eq(zn_rope_inv_freq(inv, 128, p), 0, "%s: refused", what);
	/* against float64: transformers' own fp32 steps are this close */
	for (int i = 0; i < 64; i++)
		cr_assert(fabs(inv[i] - ref64[i]) <= 1e-6 * ref64[i],
			  "%s: inv_freq[%d] %.9g, float64 reference %.17g", what, i, inv[i],
			  ref64[i]);
	/* against transformers' fp32 computation: the same steps, so within 2 ulp (powf) */
	if (ref32)
		for (int i = 0; i < 64; i++)
			cr_assert(within_ulps(inv[i], ref32[i], 2),
				  "%s: inv_freq[%d] %a, torch fp32 %a", what, i, inv[i], ref32[i]);
}

Test(kernels_llama, rope_inv_freq_vs_torch)
{
	struct zn_rope_params def = { .theta = 10000.0 };
	struct zn_rope_params l3 = { .theta = 500000.0, .type = ZN_ROPE_LLAMA3, .factor = 8,
				     .low_freq_factor = 1, .high_freq_factor = 4,
				     .original_max_position_embeddings = 8192 };
	float inv[64];
	int low = 0, mid = 0, high = 0;

	check_inv_freq("default", &def, rope_inv_default, rope_inv_default_f32);
	check_inv_freq("llama3 factor 8", &l3, rope_inv_llama3_8, rope_inv_llama3_8_f32);
	l3.factor = 32;
	check_inv_freq("llama3 factor 32", &l3, rope_inv_llama3_32, NULL);
	/* the three regions are all exercised: unscaled, smoothed, divided by factor */
	cr_assert_eq(zn_rope_inv_freq(inv, 128, &l3), 0);
	for (int i = 0; i < 64; i++) {
		float base = 1.0f / powf(500000.0f, (float)(2 * i) / 128.0f);

		if (inv[i] == base)
			high++;
		else if (within_ulps(inv[i], base / 32, 1))
			low++;
		else
			mid++;
	}
	cr_assert(low > 0 && mid > 0 && high > 0, "regions: %d low, %d mid, %d high", low, mid,
		  high);
}

Test(kernels_llama, rope_inv_freq_refuses_bad_params)
{
	float inv[8];
	struct zn_rope_params ok = { .theta = 10000.0 };
	struct zn_rope_params p = ok;

	cr_assert_eq(zn_rope_inv_freq(inv, 7, &ok), -EINVAL, "odd head_dim");
	cr_assert_eq(zn_rope_inv_freq(inv, 0, &ok), -EINVAL, "zero head_dim");
	cr_assert_eq(zn_rope_inv_freq(inv, ZN_ROPE_MAX_HEAD_DIM + 2, &ok), -EINVAL,
		     "head_dim past the ops' limit");
	p.theta = 0;
	cr_assert_eq(zn_rope_inv_freq(inv, 8, &p), -EINVAL, "theta 0");
	p.theta = NAN;
	cr_assert_eq(zn_rope_inv_freq(inv, 8, &p), -EINVAL, "theta NaN");
	p = ok;
	p.type = 7;
	cr_assert_eq(zn_rope_inv_freq(inv, 8, &p), -EINVAL, "unknown type");
	p = (struct zn_rope_params){ .theta = 1e4, .type = ZN_ROPE_LLAMA3, .factor = 8,
				     .low_freq_factor = 4, .high_freq_factor = 4,
				     .original_max_position_embeddings = 8192 };
	cr_assert_eq(zn_rope_inv_freq(inv, 8, &p), -EINVAL, "high == low");
	p.high_freq_factor = 8;
	p.original_max_position_embeddings = 0;
	cr_assert_eq(zn_rope_inv_freq(inv, 8, &p), -EINVAL, "no original length");
	p.original_max_position_embeddings = 8192;
	cr_assert_eq(zn_rope_inv_freq(inv, 8, &p), 0);
}

/* ---- rope ---------------------------------------------------------------------------- */

struct rope_ctx {
	int B, T, NH, KV, hd;
	const float *inv_freq;
	const int *pos;
	double *qkv, *w;
};

static void rope_ref(double *out, const struct rope_ctx *c)
{
	long S = (long)(c->NH + 2 * c->KV) * c->hd, n = (long)c->B * c->T * S;
	int half = c->hd / 2;

	memcpy(out, c->qkv, n * sizeof(double));
	for (long bt = 0; bt < (long)c->B * c->T; bt++) {
		double p = c->pos ? c->pos[bt] : (double)(bt % c->T);

		for (int h = 0; h < c->NH + c->KV; h++)
			for (int i = 0; i < half; i++) {
				double a = p * c->inv_freq[i];
				const double *x = c->qkv + bt * S + (long)h * c->hd;
				double *o = out + bt * S + (long)h * c->hd;

				o[i] = x[i] * cos(a) - x[i + half] * sin(a);
				o[i + half] = x[i + half] * cos(a) + x[i] * sin(a);
			}
	}
}

static double rope_loss(void *p)
{
	struct rope_ctx *c = p;
	size_t n = (size_t)c->B * c->T * (c->NH + 2 * c->KV) * c->hd;
	double *out = dalloc(n);

	rope_ref(out, c);
	double l = dot_d(out, c->w, n);

	free(out);
	return l;
}

Test(kernels_llama, rope_forward_vs_torch)
{
	size_t n = (size_t)RO_B * RO_T * (RO_NH + 2 * RO_KV) * RO_HD;
	struct zn_rope_params p = { .theta = RO_THETA };
	float inv[RO_HD / 2], *x = fcopy(ro_qkv, n);

	cr_assert_eq(zn_rope_inv_freq(inv, RO_HD, &p), 0);
	zn_cpu_rope_forward(x, inv, NULL, RO_B, RO_T, RO_NH, RO_KV, RO_HD);
	cr_assert(kc_close("rope (pos = t) vs torch", x, ro_out_t, n, RTOL_FWD));
	memcpy(x, ro_qkv, n * sizeof(float));
	zn_cpu_rope_forward(x, inv, ro_pos, RO_B, RO_T, RO_NH, RO_KV, RO_HD);
	cr_assert(kc_close("rope (positions) vs torch", x, ro_out_p, n, RTOL_FWD));
	free(x);
}

static void check_rope(int B, int T, int NH, int KV, int hd, const int *pos, uint64_t seed)
{
	struct kc_rng r = { seed };
	size_t n = (size_t)B * T * (NH + 2 * KV) * hd;
	struct zn_rope_params p = { .theta = 500000.0, .type = ZN_ROPE_LLAMA3, .factor = 8,
				    .low_freq_factor = 1, .high_freq_factor = 4,
				    .original_max_position_embeddings = 64 };
	float *inv = falloc(hd / 2), *x = frand(&r, n, -1.5f, 1.5f), *w = frand(&r, n, -1, 1);
	float *y = fcopy(x, n);

	cr_assert_eq(zn_rope_inv_freq(inv, hd, &p), 0);
	struct rope_ctx c = { B, T, NH, KV, hd, inv, pos, todouble(x, n), todouble(w, n) };
	double *ref = dalloc(n), *g = dalloc(n);

	zn_cpu_rope_forward(y, inv, pos, B, T, NH, KV, hd);
	rope_ref(ref, &c);
	cr_assert(kc_close("rope forward", y, ref, n, RTOL_FWD));
	fd_grad(g, c.qkv, n, rope_loss, &c);
	/* backward rotates the gradient in place; value channels stay as they are */
	float *d = fcopy(w, n);

	zn_cpu_rope_backward(d, inv, pos, B, T, NH, KV, hd);
	cr_assert(kc_close("rope backward", d, g, n, RTOL_BWD));
	/* and undoes the forward */
	zn_cpu_rope_backward(y, inv, pos, B, T, NH, KV, hd);
	double *xd = todouble(x, n);

	cr_assert(kc_close("rope backward(forward(x)) = x", y, xd, n, RTOL_FWD));
	free(inv), free(x), free(w), free(y), free(c.qkv), free(c.w), free(ref), free(g), free(d);
	free(xd);
}

Test(kernels_llama, rope)
{
	int pos[2 * 6] = { 5, 6, 7, 8, 9, 10, 0, 1, 2, 40, 41, 42 };

	check_rope(2, 6, 4, 2, 8, NULL, 31);  /* GQA */
	check_rope(2, 6, 3, 3, 6, pos, 32);   /* MHA, explicit positions */
	check_rope(1, 4, 4, 1, 10, NULL, 33); /* MQA */
}

/* ---- swiglu -------------------------------------------------------------------------- */

struct sw_ctx {
	int BT, IC;
	double *inp, *w;
};

static double silu_d(double g)
{
	return g / (1.0 + exp(-g));
}

static void sw_ref(double *out, const struct sw_ctx *c)
{
	for (long bt = 0; bt < c->BT; bt++)
		for (int i = 0; i < c->IC; i++)
			out[bt * c->IC + i] = silu_d(c->inp[bt * 2 * c->IC + i]) *
					      c->inp[bt * 2 * c->IC + c->IC + i];
}

static double sw_loss(void *p)
{
	struct sw_ctx *c = p;
	size_t n = (size_t)c->BT * c->IC;
	double *out = dalloc(n);

	sw_ref(out, c);
	double l = dot_d(out, c->w, n);

	free(out);
	return l;
}

Test(kernels_llama, swiglu_forward_vs_torch)
{
	size_t n = (size_t)SW_B * SW_T * SW_I;
	float *out = falloc(n);

	zn_cpu_swiglu_forward(out, sw_inp, SW_B, SW_T, SW_I);
	cr_assert(kc_close("swiglu vs torch", out, sw_out, n, RTOL_FWD));
	free(out);
}

Test(kernels_llama, swiglu)
{
	struct kc_rng r = { 44 };
	enum { B = 2, T = 3, IC = 17 };
	size_t n = (size_t)B * T * IC, ni = 2 * n;
	float *inp = frand(&r, ni, -6, 6), *w = frand(&r, n, -1, 1), *out = falloc(n);
	struct sw_ctx c = { B * T, IC, todouble(inp, ni), todouble(w, n) };
	double *ref = dalloc(n), *g = dalloc(ni);

	zn_cpu_swiglu_forward(out, inp, B, T, IC);
	sw_ref(ref, &c);
	cr_assert(kc_close("swiglu forward", out, ref, n, RTOL_FWD));
	fd_grad(g, c.inp, ni, sw_loss, &c);
	float *d0 = prefill(&r, g, ni), *d = fcopy(d0, ni);

	for (int times = 1; times <= 2; times++) {
		zn_cpu_swiglu_backward(d, w, inp, B, T, IC);
		cr_assert(close_accum("swiglu dinp", d, d0, g, ni, times));
	}
	/* large |gate|: no NaN from exp overflow */
	float big[4] = { -100.0f, 100.0f, 1.0f, 1.0f }, o[2], dd[4] = { 0 }, one[2] = { 1, 1 };

	zn_cpu_swiglu_forward(o, big, 1, 1, 2);
	zn_cpu_swiglu_backward(dd, one, big, 1, 1, 2);
	cr_assert(o[0] == 0.0f && o[1] == 100.0f, "silu(-100), silu(100): %g %g", o[0], o[1]);
	for (int i = 0; i < 4; i++)
		cr_assert(isfinite(dd[i]), "swiglu backward at |gate| 100: %g", dd[i]);
	free(inp), free(w), free(out), free(c.inp), free(c.w), free(ref), free(g), free(d0), free(d);
}

/* ---- grouped-query attention --------------------------------------------------------- */

struct ga_ctx {
	int B, T, NH, KV, hd, win;
	double *qkv, *w;
};

static int visible(int t, int t2, int win)
{
	return t2 <= t && (win == 0 || t - t2 < win);
}

static void ga_ref(double *out, double *pre, double *att, const struct ga_ctx *c)
{
	int T = c->T, NH = c->NH, hd = c->hd, G = NH / c->KV;
	long S = (long)(NH + 2 * c->KV) * hd;
	double scale = 1.0 / sqrt((double)hd);

	for (int b = 0; b < c->B; b++)
		for (int h = 0; h < NH; h++)
			for (int t = 0; t < T; t++) {
				const double *x = c->qkv + (long)b * T * S;
				const double *q = x + t * S + h * hd;
				long row = (((long)b * NH + h) * T + t) * T;
				double *p = pre + row, *a = att + row;
				double *o = out + ((long)b * T + t) * NH * hd + h * hd;
				double mx = -INFINITY, sum = 0;

				for (int t2 = 0; t2 < T; t2++) {
					const double *k = x + t2 * S + (NH + h / G) * hd;

					p[t2] = visible(t, t2, c->win) ? dot_d(q, k, hd) * scale : 0;
					if (visible(t, t2, c->win) && p[t2] > mx)
						mx = p[t2];
				}
				for (int t2 = 0; t2 < T; t2++) {
					a[t2] = visible(t, t2, c->win) ? exp(p[t2] - mx) : 0;
					sum += a[t2];
				}
				for (int i = 0; i < hd; i++)
					o[i] = 0;
				for (int t2 = 0; t2 < T; t2++) {
					const double *v = x + t2 * S + (NH + c->KV + h / G) * hd;

					a[t2] /= sum;
					for (int i = 0; i < hd; i++)
						o[i] += a[t2] * v[i];
				}
			}
}

static double ga_loss(void *p)
{
	struct ga_ctx *c = p;
	size_t n = (size_t)c->B * c->T * c->NH * c->hd, na = (size_t)c->B * c->NH * c->T * c->T;
	double *out = dalloc(n), *pre = dalloc(na), *att = dalloc(na);

	ga_ref(out, pre, att, c);
	double l = dot_d(out, c->w, n);

	free(out), free(pre), free(att);
	return l;
}

/* analytic datt and dpreatt from the double forward */
static void ga_scratch_ref(double *datt, double *dpre, const double *att,
			   const struct ga_ctx *c)
{
	int T = c->T, NH = c->NH, hd = c->hd, G = NH / c->KV;
	long S = (long)(NH + 2 * c->KV) * hd;

	for (int b = 0; b < c->B; b++)
		for (int h = 0; h < NH; h++)
			for (int t = 0; t < T; t++) {
				long row = (((long)b * NH + h) * T + t) * T;
				const double *d = c->w + ((long)b * T + t) * NH * hd + h * hd;
				double s = 0;

				for (int t2 = 0; t2 < T; t2++) {
					const double *v = c->qkv + ((long)b * T + t2) * S +
							  (NH + c->KV + h / G) * hd;

					datt[row + t2] = visible(t, t2, c->win) ? dot_d(d, v, hd) : 0;
					s += att[row + t2] * datt[row + t2];
				}
				for (int t2 = 0; t2 < T; t2++)
					dpre[row + t2] = att[row + t2] * (datt[row + t2] - s);
			}
}

Test(kernels_llama, gqa_attention_forward_vs_torch)
{
	size_t ni = (size_t)GA_B * GA_T * (GA_NH + 2 * GA_KV) * GA_HD;
	size_t no = (size_t)GA_B * GA_T * GA_NH * GA_HD, na = (size_t)GA_B * GA_NH * GA_T * GA_T;
	float *out = falloc(no), *pre = falloc(na), *att = falloc(na);

	(void)ni;
	zn_cpu_gqa_attention_forward(out, pre, att, ga_qkv, GA_B, GA_T, GA_NH, GA_KV, GA_HD, 0);
	cr_assert(kc_close("gqa out vs torch", out, ga_out, no, RTOL_FWD));
	cr_assert(kc_close("gqa att vs torch", att, ga_att, na, RTOL_FWD));
	zn_cpu_gqa_attention_forward(out, pre, att, ga_qkv, GA_B, GA_T, GA_NH, GA_KV, GA_HD,
				     GA_WIN);
	cr_assert(kc_close("gqa out (window) vs torch", out, ga_out_w, no, RTOL_FWD));
	cr_assert(kc_close("gqa att (window) vs torch", att, ga_att_w, na, RTOL_FWD));
	free(out), free(pre), free(att);
}

static void check_gqa(int B, int T, int NH, int KV, int hd, int win, uint64_t seed)
{
	struct kc_rng r = { seed };
	size_t ni = (size_t)B * T * (NH + 2 * KV) * hd, no = (size_t)B * T * NH * hd;
	size_t na = (size_t)B * NH * T * T;
	float *qkv = frand(&r, ni, -1.5f, 1.5f), *w = frand(&r, no, -1, 1);
	float *out = falloc(no), *pre = frand(&r, na, -9, 9), *att = frand(&r, na, -9, 9);
	struct ga_ctx c = { B, T, NH, KV, hd, win, todouble(qkv, ni), todouble(w, no) };
	double *ro = dalloc(no), *rp = dalloc(na), *ra = dalloc(na);
	char what[128];

	/* preatt and att start as garbage: the forward must write every entry */
	zn_cpu_gqa_attention_forward(out, pre, att, qkv, B, T, NH, KV, hd, win);
	ga_ref(ro, rp, ra, &c);
	snprintf(what, sizeof(what), "gqa NH %d KV %d hd %d window %d", NH, KV, hd, win);
	cr_assert(kc_close(what, out, ro, no, RTOL_FWD));
	cr_assert(kc_close(what, pre, rp, na, RTOL_FWD));
	cr_assert(kc_close(what, att, ra, na, RTOL_FWD));

	double *gi = dalloc(ni), *rda = dalloc(na), *rdp = dalloc(na);

	fd_grad(gi, c.qkv, ni, ga_loss, &c);
	ga_scratch_ref(rda, rdp, ra, &c);
	float *di0 = prefill(&r, gi, ni), *di = fcopy(di0, ni);

	for (int times = 1; times <= 2; times++) {
		float *datt = frand(&r, na, -9, 9), *dpre = frand(&r, na, -9, 9);

		zn_cpu_gqa_attention_backward(di, dpre, datt, w, qkv, att, B, T, NH, KV, hd, win);
		cr_assert(close_accum(what, di, di0, gi, ni, times));
		cr_assert(kc_close(what, datt, rda, na, RTOL_BWD));
		cr_assert(kc_close(what, dpre, rdp, na, RTOL_BWD));
		free(datt), free(dpre);
	}
	free(qkv), free(w), free(out), free(pre), free(att), free(c.qkv), free(c.w), free(ro);
	free(rp), free(ra), free(gi), free(rda), free(rdp), free(di0), free(di);
}

Test(kernels_llama, gqa_attention)
{
	check_gqa(2, 5, 4, 2, 4, 0, 51); /* GQA, groups of 2 */
	check_gqa(2, 5, 3, 3, 4, 0, 52); /* MHA */
	check_gqa(1, 6, 4, 1, 6, 0, 53); /* MQA; head_dim 6 */
	check_gqa(2, 7, 4, 2, 4, 3, 54); /* sliding window shorter than T */
	check_gqa(1, 4, 2, 1, 4, 4, 55); /* window == T: plain causal */
}

/* window >= T is exactly plain causal attention, and KV = NH is GPT-2's attention */
Test(kernels_llama, gqa_attention_special_cases)
{
	struct kc_rng r = { 56 };
	enum { B = 2, T = 6, NH = 3, hd = 4, C = NH * hd };
	size_t ni = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
	float *qkv = frand(&r, ni, -1.5f, 1.5f), *o1 = falloc(no), *o2 = falloc(no);
	float *p1 = falloc(na), *p2 = falloc(na), *a1 = falloc(na), *a2 = falloc(na);

	zn_cpu_gqa_attention_forward(o1, p1, a1, qkv, B, T, NH, NH, hd, 0);
	zn_cpu_gqa_attention_forward(o2, p2, a2, qkv, B, T, NH, NH, hd, T);
	cr_assert(same_bits(o1, o2, no, "window T vs none: out"));
	cr_assert(same_bits(a1, a2, na, "window T vs none: att"));
	zn_cpu_attention_forward(o2, p2, a2, qkv, B, T, C, NH);
	double *ro = todouble(o2, no), *ra = todouble(a2, na);

	cr_assert(kc_close("gqa (KV = NH) vs GPT-2 attention: out", o1, ro, no, RTOL_FWD));
	cr_assert(kc_close("gqa (KV = NH) vs GPT-2 attention: att", a1, ra, na, RTOL_FWD));
	free(qkv), free(o1), free(o2), free(p1), free(p2), free(a1), free(a2), free(ro), free(ra);
}

/* ---- determinism across thread counts ------------------------------------------------ */

struct det_out {
	float *emb_dw, *rms_di, *rms_dw, *sw_di, *ga_di, *ro;
};

enum { DB = 2, DT = 96, DC = 256, DNH = 8, DKV = 2, DHD = 32, DI = 512, DV = 40 };

static void det_run(struct det_out *o, int threads)
{
	struct kc_rng r = { 777 };
	size_t n = (size_t)DB * DT * DC, BT = (size_t)DB * DT;
	size_t nq = BT * (DNH + 2 * DKV) * DHD, na = (size_t)DB * DNH * DT * DT;
	int *tok = malloc(BT * sizeof(int));
	float *x = frand(&r, n, -2, 2), *dout = frand(&r, n, -1, 1), *w = frand(&r, DC, 0.5f, 1.5f);
	float *y = falloc(n), *rstd = falloc(BT), *inv = falloc(DHD / 2);
	float *qkv = frand(&r, nq, -1, 1), *gd = frand(&r, BT * DNH * DHD, -1, 1);
	float *ga = falloc(BT * DNH * DHD), *pre = falloc(na), *att = falloc(na);
	float *datt = falloc(na), *dpre = falloc(na);
	float *swi = frand(&r, BT * 2 * DI, -4, 4), *swd = frand(&r, BT * DI, -1, 1);
	struct zn_rope_params p = { .theta = 10000.0 };

	cr_assert(tok);
	kc_fill_int(&r, tok, BT, DV);
	cr_assert_eq(zn_rope_inv_freq(inv, DHD, &p), 0);
	omp_set_num_threads(threads);
	*o = (struct det_out){ falloc((size_t)DV * DC), falloc(n), falloc(DC),
			       falloc(BT * 2 * DI), falloc(nq), fcopy(qkv, nq) };
	zn_cpu_embedding_backward(o->emb_dw, dout, tok, DB, DT, DC);
	zn_cpu_rmsnorm_forward(y, rstd, x, w, 1e-5f, DB, DT, DC);
	zn_cpu_rmsnorm_backward(o->rms_di, o->rms_dw, dout, x, w, rstd, DB, DT, DC);
	zn_cpu_swiglu_backward(o->sw_di, swd, swi, DB, DT, DI);
	zn_cpu_rope_forward(o->ro, inv, NULL, DB, DT, DNH, DKV, DHD);
	zn_cpu_gqa_attention_forward(ga, pre, att, o->ro, DB, DT, DNH, DKV, DHD, 0);
	zn_cpu_gqa_attention_backward(o->ga_di, dpre, datt, gd, o->ro, att, DB, DT, DNH, DKV,
				      DHD, 0);
	free(tok), free(x), free(dout), free(w), free(y), free(rstd), free(inv), free(qkv);
	free(gd), free(ga), free(pre), free(att), free(datt), free(dpre), free(swi), free(swd);
}

static void det_free(struct det_out *o)
{
	free(o->emb_dw), free(o->rms_di), free(o->rms_dw), free(o->sw_di), free(o->ga_di);
	free(o->ro);
}

Test(kernels_llama, deterministic_across_threads)
{
	size_t n = (size_t)DB * DT * DC, BT = (size_t)DB * DT;
	size_t nq = BT * (DNH + 2 * DKV) * DHD;
	struct det_out a, b;

	det_run(&a, 1);
	det_run(&b, 3);
	cr_assert(same_bits(a.emb_dw, b.emb_dw, (size_t)DV * DC, "embedding dwte"));
	cr_assert(same_bits(a.rms_di, b.rms_di, n, "rmsnorm dinp"));
	cr_assert(same_bits(a.rms_dw, b.rms_dw, DC, "rmsnorm dweight"));
	cr_assert(same_bits(a.sw_di, b.sw_di, BT * 2 * DI, "swiglu dinp"));
	cr_assert(same_bits(a.ro, b.ro, nq, "rope"));
	cr_assert(same_bits(a.ga_di, b.ga_di, nq, "gqa dqkv"));
	det_free(&a);
	det_free(&b);
}

/* ---- the table ----------------------------------------------------------------------- */

Test(kernels_llama, table_slots_are_the_cpu_ops)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	struct kc_rng r = { 99 };
	enum { B = 1, T = 4, NH = 2, KV = 1, hd = 4, S = (NH + 2 * KV) * hd };
	size_t nq = (size_t)B * T * S, no = (size_t)B * T * NH * hd, na = (size_t)B * NH * T * T;
	float inv[hd / 2] = { 1.0f, 0.01f };
	float *qkv = frand(&r, nq, -1, 1), *q1 = fcopy(qkv, nq), *q2 = fcopy(qkv, nq);
	float *o1 = falloc(no), *o2 = falloc(no), *p = falloc(na), *a = falloc(na);

	k->rope_forward(NULL, q1, inv, NULL, B, T, NH, KV, hd);
	zn_cpu_rope_forward(q2, inv, NULL, B, T, NH, KV, hd);
	cr_assert(same_bits(q1, q2, nq, "table rope_forward"));
	k->gqa_attention_forward(NULL, o1, p, a, q1, B, T, NH, KV, hd, 0);
	zn_cpu_gqa_attention_forward(o2, p, a, q1, B, T, NH, KV, hd, 0);
	cr_assert(same_bits(o1, o2, no, "table gqa_attention_forward"));
	k->swiglu_forward(NULL, o1, qkv, B, T, (int)(no / 2 / (B * T)));
	zn_cpu_swiglu_forward(o2, qkv, B, T, (int)(no / 2 / (B * T)));
	cr_assert(same_bits(o1, o2, no / 2, "table swiglu_forward"));
	free(qkv), free(q1), free(q2), free(o1), free(o2), free(p), free(a);
}

/* ---- the embedding backward's sorted, segmented reduction (kernels/cpu/segment.c) ---- */

/* skewed tokens: half the rows one token, a few others, and the largest id */
static void skewed_tokens(struct kc_rng *r, int *tok, long n, int V)
{
	for (long i = 0; i < n; i++) {
		int u = (int)(kc_next(r) % 8);

		tok[i] = u < 4 ? 3 : u < 7 ? (int)(kc_next(r) % 7) : V - 1;
	}
}

Test(kernels_llama, sort_rows_by_key_is_stable)
{
	enum { N = 5000, V = 50 };
	struct kc_rng r = { 4242 };
	int *tok = malloc(N * sizeof(int)), *order = malloc(N * sizeof(int));
	char *seen = calloc(N, 1);

	cr_assert(tok && order && seen);
	skewed_tokens(&r, tok, N, V);
	cr_assert_eq(zn_cpu_sort_rows_by_key(order, tok, N), 0);
	for (long i = 0; i < N; i++) {
		cr_assert(order[i] >= 0 && order[i] < N && !seen[order[i]],
			  "order[%ld] = %d: not a permutation", i, order[i]);
		seen[order[i]] = 1;
		if (i > 0) {
			int a = tok[order[i - 1]], b = tok[order[i]];

			cr_assert(a < b || (a == b && order[i - 1] < order[i]),
				  "order[%ld]: (%d, row %d) after (%d, row %d)", i, b, order[i], a,
				  order[i - 1]);
		}
	}
	cr_assert_eq(zn_cpu_sort_rows_by_key(order, tok, 0), 0);
	free(tok), free(order), free(seen);
}

/* the segmented reduction gives the serial walk's bits (each element summed from its old
 * value in (b, t) order) for 1 and 3 threads, and matches a double sum */
Test(kernels_llama, embedding_backward_segmented_is_the_serial_walk)
{
	enum { B = 3, T = 700, C = 67, V = 20 };
	const long BT = (long)B * T;
	struct kc_rng r = { 9090 };
	int *tok = malloc(BT * sizeof(int));
	float *dout = frand(&r, (size_t)BT * C, -1, 1), *w0 = frand(&r, (size_t)V * C, -1, 1);
	float *serial = fcopy(w0, (size_t)V * C);
	float *e1 = fcopy(w0, (size_t)V * C), *e3 = fcopy(w0, (size_t)V * C);
	float *enc = fcopy(w0, (size_t)V * C), *wpe = falloc((size_t)T * C);
	double *ref = malloc((size_t)V * C * sizeof(double));

	cr_assert(tok && ref);
	skewed_tokens(&r, tok, BT, V);
	for (long bt = 0; bt < BT; bt++)
		for (int c = 0; c < C; c++)
			serial[(long)tok[bt] * C + c] += dout[bt * C + c];
	for (long i = 0; i < (long)V * C; i++)
		ref[i] = w0[i];
	for (long bt = 0; bt < BT; bt++)
		for (int c = 0; c < C; c++)
			ref[(long)tok[bt] * C + c] += dout[bt * C + c];
	omp_set_num_threads(1);
	zn_cpu_embedding_backward(e1, dout, tok, B, T, C);
	omp_set_num_threads(3);
	zn_cpu_embedding_backward(e3, dout, tok, B, T, C);
	zn_cpu_encoder_backward(enc, wpe, dout, tok, B, T, C);
	cr_assert(same_bits(e1, serial, (size_t)V * C, "embedding dwte, 1 thread vs serial"));
	cr_assert(same_bits(e3, serial, (size_t)V * C, "embedding dwte, 3 threads vs serial"));
	cr_assert(same_bits(enc, serial, (size_t)V * C, "encoder dwte vs serial"));
	for (long i = 0; i < (long)V * C; i++)
		cr_assert(fabs(e1[i] - ref[i]) <= 1e-4 * (1 + fabs(ref[i])),
			  "dwte[%ld] = %.9g, double %.9g", i, e1[i], ref[i]);
	free(tok), free(dout), free(w0), free(serial), free(e1), free(e3), free(enc), free(wpe);
	free(ref);
}
