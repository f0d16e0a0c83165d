/* kernels/cpu: every op's forward against a straightforward double-precision loop, every
 * backward against central finite differences of that double reference, the accumulate
 * (or write) semantics of each backward, determinism across thread counts, and the table.
 *
 * Loss for gradients: L = sum(out * w) with random w, so every gradient is nontrivial.
 * Tolerances (kernels_grad.h): forwards 64 fp32 eps, backwards 512 fp32 eps, relative to
 * each element plus the array's max (kc_close); the shapes are small (sums of at most a few
 * dozen terms).
 */
#include <criterion/criterion.h>

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cpu/ops.h"
#include "kernels.h"
#include "kernels_check.h"
#include "kernels_grad.h"

/* small shapes: B=2, T=5, C=8, NH=2, V=11 padded to Vp=16 */
enum { SB = 2, ST = 5, SC = 8, SNH = 2, SV = 11, SVP = 16, SOC = 12 };

/* ---- encoder ------------------------------------------------------------------------- */

struct enc_ctx {
	int B, T, C;
	const int *inp;
	double *wte, *wpe, *w;
};

static void enc_ref(double *out, const struct enc_ctx *c)
{
	for (int b = 0; b < c->B; b++)
		for (int t = 0; t < c->T; t++)
			for (int i = 0; i < c->C; i++) {
				long bt = (long)b * c->T + t;

				out[bt * c->C + i] = c->wte[(long)c->inp[bt] * c->C + i] +
						     c->wpe[(long)t * c->C + i];
			}
}

static double enc_loss(void *p)
{
	struct enc_ctx *c = p;
	size_t n = (size_t)c->B * c->T * c->C;
	double *out = dalloc(n);

	enc_ref(out, c);
	double l = dot_d(out, c->w, n);

	free(out);
	return l;
}

Test(kernels_cpu, encoder)
{
	struct kc_rng r = { 101 };
	int B = SB, T = ST, C = SC, V = 7; /* V < B*T: tokens repeat, so dwte sums */
	size_t n = (size_t)B * T * C;
	int inp[SB * ST];

	kc_fill_int(&r, inp, B * T, V);
	float *wte = frand(&r, (size_t)V * C, -1, 1), *wpe = frand(&r, (size_t)T * C, -1, 1);
	float *w = frand(&r, n, -1, 1), *out = falloc(n);
	struct enc_ctx c = { B, T, C, inp, todouble(wte, (size_t)V * C),
			     todouble(wpe, (size_t)T * C), todouble(w, n) };
	double *ref = dalloc(n);

	zn_cpu_encoder_forward(out, inp, wte, wpe, B, T, C);
	enc_ref(ref, &c);
	cr_assert(kc_close("encoder forward", out, ref, n, RTOL_FWD));

	double *gwte = dalloc((size_t)V * C), *gwpe = dalloc((size_t)T * C);

	fd_grad(gwte, c.wte, (size_t)V * C, enc_loss, &c);
	fd_grad(gwpe, c.wpe, (size_t)T * C, enc_loss, &c);
	float *dwte0 = prefill(&r, gwte, (size_t)V * C), *dwpe0 = prefill(&r, gwpe, (size_t)T * C);
	float *dwte = fcopy(dwte0, (size_t)V * C), *dwpe = fcopy(dwpe0, (size_t)T * C);

	for (int times = 1; times <= 2; times++) {
		zn_cpu_encoder_backward(dwte, dwpe, w, inp, B, T, C);
		cr_assert(close_accum("encoder dwte", dwte, dwte0, gwte, (size_t)V * C, times));
		cr_assert(close_accum("encoder dwpe", dwpe, dwpe0, gwpe, (size_t)T * C, times));
	}
	free(wte), free(wpe), free(w), free(out), free(c.wte), free(c.wpe), free(c.w), free(ref);
	free(gwte), free(gwpe), free(dwte0), free(dwpe0), free(dwte), free(dwpe);
}

/* ---- layernorm ----------------------------------------------------------------------- */

struct ln_ctx {
	int B, T, C;
	double *inp, *weight, *bias, *w;
};

static void ln_ref(double *out, double *mean, double *rstd, const struct ln_ctx *c)
{
	for (long bt = 0; bt < (long)c->B * c->T; bt++) {
		const double *x = c->inp + bt * c->C;
		double m = 0, v = 0;

		for (int i = 0; i < c->C; i++)
			m += x[i];
		m /= c->C;
		for (int i = 0; i < c->C; i++)
			v += (x[i] - m) * (x[i] - m);
		v /= c->C;
		double s = 1.0 / sqrt(v + 1e-5);

		for (int i = 0; i < c->C; i++)
			out[bt * c->C + i] = (x[i] - m) * s * c->weight[i] + c->bias[i];
		mean[bt] = m;
		rstd[bt] = s;
	}
}

static double ln_loss(void *p)
{
	struct ln_ctx *c = p;
	size_t n = (size_t)c->B * c->T * c->C, bt = (size_t)c->B * c->T;
	double *out = dalloc(n), *m = dalloc(bt), *s = dalloc(bt);

	ln_ref(out, m, s, c);
	double l = dot_d(out, c->w, n);

	free(out), free(m), free(s);
	return l;
}

Test(kernels_cpu, layernorm)
{
	struct kc_rng r = { 202 };
	int B = SB, T = ST, C = SC;
	size_t n = (size_t)B * T * C, BT = (size_t)B * T;
	float *inp = frand(&r, n, -2, 2), *weight = frand(&r, C, 0.5f, 1.5f);
	float *bias = frand(&r, C, -0.5f, 0.5f), *w = frand(&r, n, -1, 1);
	float *out = falloc(n), *mean = falloc(BT), *rstd = falloc(BT);
	struct ln_ctx c = { B, T, C, todouble(inp, n), todouble(weight, C), todouble(bias, C),
			    todouble(w, n) };
	double *ref = dalloc(n), *rm = dalloc(BT), *rs = dalloc(BT);

	zn_cpu_layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C);
	ln_ref(ref, rm, rs, &c);
	cr_assert(kc_close("layernorm out", out, ref, n, RTOL_FWD));
	cr_assert(kc_close("layernorm mean", mean, rm, BT, RTOL_FWD));
	cr_assert(kc_close("layernorm rstd", rstd, rs, BT, RTOL_FWD));

	double *gi = dalloc(n), *gw = dalloc(C), *gb = dalloc(C);

	fd_grad(gi, c.inp, n, ln_loss, &c);
	fd_grad(gw, c.weight, C, ln_loss, &c);
	fd_grad(gb, c.bias, C, ln_loss, &c);
	float *di0 = prefill(&r, gi, n), *dw0 = prefill(&r, gw, C), *db0 = prefill(&r, gb, C);
	float *di = fcopy(di0, n), *dw = fcopy(dw0, C), *db = fcopy(db0, C);

	for (int times = 1; times <= 2; times++) {
		zn_cpu_layernorm_backward(di, dw, db, w, inp, weight, mean, rstd, B, T, C);
		cr_assert(close_accum("layernorm dinp", di, di0, gi, n, times));
		cr_assert(close_accum("layernorm dweight", dw, dw0, gw, C, times));
		cr_assert(close_accum("layernorm dbias", db, db0, gb, C, times));
	}
	free(inp), free(weight), free(bias), free(w), free(out), free(mean), free(rstd);
	free(c.inp), free(c.weight), free(c.bias), free(c.w), free(ref), free(rm), free(rs);
	free(gi), free(gw), free(gb), free(di0), free(dw0), free(db0), free(di), free(dw), free(db);
}

/* ---- matmul -------------------------------------------------------------------------- */

struct mm_ctx {
	int BT, C, OC;
	double *inp, *weight, *bias, *w; /* bias may be NULL */
};

static void mm_ref(double *out, const struct mm_ctx *c)
{
	for (long bt = 0; bt < c->BT; bt++)
		for (int o = 0; o < c->OC; o++) {
			double v = c->bias ? c->bias[o] : 0.0;

			for (int i = 0; i < c->C; i++)
				v += c->inp[bt * c->C + i] * c->weight[(long)o * c->C + i];
			out[bt * c->OC + o] = v;
		}
}

static double mm_loss(void *p)
{
	struct mm_ctx *c = p;
	size_t n = (size_t)c->BT * c->OC;
	double *out = dalloc(n);

	mm_ref(out, c);
	double l = dot_d(out, c->w, n);

	free(out);
	return l;
}

typedef void (*mm_fwd_fn)(float *, const float *, const float *, const float *, int, int, int,
			  int);
typedef void (*mm_bwd_fn)(float *, float *, float *, const float *, const float *,
			  const float *, int, int, int, int);

static void check_matmul(const char *name, mm_fwd_fn fwd, mm_bwd_fn bwd, int with_bias,
			 uint64_t seed)
{
	struct kc_rng r = { seed };
	int B = SB, T = ST, C = SC, OC = SOC, BT = B * T;
	size_t ni = (size_t)BT * C, nw = (size_t)OC * C, no = (size_t)BT * OC;
	float *inp = frand(&r, ni, -1, 1), *weight = frand(&r, nw, -1, 1);
	float *bias = with_bias ? frand(&r, OC, -1, 1) : NULL;
	float *w = frand(&r, no, -1, 1), *out = falloc(no);
	struct mm_ctx c = { BT, C, OC, todouble(inp, ni), todouble(weight, nw),
			    with_bias ? todouble(bias, OC) : NULL, todouble(w, no) };
	double *ref = dalloc(no);
	char what[96];

	fwd(out, inp, weight, bias, B, T, C, OC);
	mm_ref(ref, &c);
	snprintf(what, sizeof(what), "%s forward", name);
	cr_assert(kc_close(what, out, ref, no, RTOL_FWD));

	double *gi = dalloc(ni), *gw = dalloc(nw), *gb = dalloc(OC);

	fd_grad(gi, c.inp, ni, mm_loss, &c);
	fd_grad(gw, c.weight, nw, mm_loss, &c);
	if (with_bias)
		fd_grad(gb, c.bias, OC, mm_loss, &c);
	else /* dbias = sum over positions of dout, whether or not the forward had a bias */
		for (int o = 0; o < OC; o++)
			for (int bt = 0; bt < BT; bt++)
				gb[o] += c.w[(long)bt * OC + o];
	float *di0 = prefill(&r, gi, ni), *dw0 = prefill(&r, gw, nw), *db0 = prefill(&r, gb, OC);
	float *di = fcopy(di0, ni), *dw = fcopy(dw0, nw), *db = fcopy(db0, OC);

	for (int times = 1; times <= 2; times++) {
		/* the bias-free case also checks that a NULL dbias is skipped */
		bwd(di, dw, with_bias ? db : NULL, w, inp, weight, B, T, C, OC);
		snprintf(what, sizeof(what), "%s dinp", name);
		cr_assert(close_accum(what, di, di0, gi, ni, times));
		snprintf(what, sizeof(what), "%s dweight", name);
		cr_assert(close_accum(what, dw, dw0, gw, nw, times));
		if (with_bias) {
			snprintf(what, sizeof(what), "%s dbias", name);
			cr_assert(close_accum(what, db, db0, gb, OC, times));
		}
	}
	if (!with_bias) { /* and dbias given without a forward bias */
		bwd(di, dw, db, w, inp, weight, B, T, C, OC);
		snprintf(what, sizeof(what), "%s dbias (no forward bias)", name);
		cr_assert(close_accum(what, db, db0, gb, OC, 1));
	}
	free(inp), free(weight), free(bias), free(w), free(out), free(c.inp), free(c.weight);
	free(c.bias), free(c.w), free(ref), free(gi), free(gw), free(gb), free(di0), free(dw0);
	free(db0), free(di), free(dw), free(db);
}

Test(kernels_cpu, matmul_blas)
{
	check_matmul("matmul blas", zn_cpu_matmul_forward, zn_cpu_matmul_backward, 1, 303);
	check_matmul("matmul blas (no bias)", zn_cpu_matmul_forward, zn_cpu_matmul_backward, 0,
		     304);
}

Test(kernels_cpu, matmul_loop)
{
	check_matmul("matmul loop", zn_cpu_matmul_forward_loop, zn_cpu_matmul_backward_loop, 1,
		     305);
	check_matmul("matmul loop (no bias)", zn_cpu_matmul_forward_loop,
		     zn_cpu_matmul_backward_loop, 0, 306);
}

/* BLAS against the loops on a shape big enough for OpenBLAS's blocked, threaded paths */
Test(kernels_cpu, matmul_blas_vs_loop_large)
{
	struct kc_rng r = { 307 };
	int B = 3, T = 37, C = 200, OC = 150, BT = B * T;
	size_t ni = (size_t)BT * C, nw = (size_t)OC * C, no = (size_t)BT * OC;
	float *inp = frand(&r, ni, -1, 1), *weight = frand(&r, nw, -1, 1);
	float *bias = frand(&r, OC, -1, 1), *dout = frand(&r, no, -1, 1);
	float *o1 = falloc(no), *o2 = falloc(no);
	float *di1 = falloc(ni), *di2 = falloc(ni), *dw1 = falloc(nw), *dw2 = falloc(nw);
	float *db1 = falloc(OC), *db2 = falloc(OC);
	/* sums of C (or BT) terms of size <= 1: tolerance grows with the length */
	double rtol = 8 * FLT_EPSILON * sqrt((double)(C > BT ? C : BT)) * 8;

	zn_cpu_matmul_forward(o1, inp, weight, bias, B, T, C, OC);
	zn_cpu_matmul_forward_loop(o2, inp, weight, bias, B, T, C, OC);
	zn_cpu_matmul_backward(di1, dw1, db1, dout, inp, weight, B, T, C, OC);
	zn_cpu_matmul_backward_loop(di2, dw2, db2, dout, inp, weight, B, T, C, OC);
	double *ref;

	ref = todouble(o2, no);
	cr_assert(kc_close("matmul large forward", o1, ref, no, rtol));
	free(ref);
	ref = todouble(di2, ni);
	cr_assert(kc_close("matmul large dinp", di1, ref, ni, rtol));
	free(ref);
	ref = todouble(dw2, nw);
	cr_assert(kc_close("matmul large dweight", dw1, ref, nw, rtol));
	free(ref);
	ref = todouble(db2, OC);
	cr_assert(kc_close("matmul large dbias", db1, ref, OC, rtol));
	free(ref);
	free(inp), free(weight), free(bias), free(dout), free(o1), free(o2), free(di1), free(di2);
	free(dw1), free(dw2), free(db1), free(db2);
}

/* ---- attention ----------------------------------------------------------------------- */

struct att_ctx {
	int B, T, C, NH;
	double *inp, *w;
};

static void att_ref(double *out, double *pre, double *att, const struct att_ctx *c)
{
	int B = c->B, T = c->T, C = c->C, NH = c->NH, hs = C / NH, C3 = 3 * C;
	double scale = 1.0 / sqrt((double)hs);

	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++)
			for (int t = 0; t < T; t++) {
				const double *q = c->inp + ((long)b * T + t) * C3 + h * hs;
				double *p = pre + (((long)b * NH + h) * T + t) * T;
				double *a = att + (((long)b * NH + h) * T + t) * T;
				double *o = out + ((long)b * T + t) * C + h * hs;
				double mx = -INFINITY, sum = 0;

				for (int t2 = 0; t2 < T; t2++) {
					const double *k = c->inp + ((long)b * T + t2) * C3 + C +
							  h * hs;

					p[t2] = t2 <= t ? dot_d(q, k, hs) * scale : 0.0;
					if (t2 <= t && p[t2] > mx)
						mx = p[t2];
				}
				for (int t2 = 0; t2 < T; t2++) {
					a[t2] = t2 <= t ? exp(p[t2] - mx) : 0.0;
					sum += a[t2];
				}
				for (int i = 0; i < hs; i++)
					o[i] = 0;
				for (int t2 = 0; t2 < T; t2++) {
					const double *v = c->inp + ((long)b * T + t2) * C3 + 2 * C +
							  h * hs;

					a[t2] /= sum;
					for (int i = 0; i < hs; i++)
						o[i] += a[t2] * v[i];
				}
			}
}

static double att_loss(void *p)
{
	struct att_ctx *c = p;
	size_t n = (size_t)c->B * c->T * c->C, na = (size_t)c->B * c->NH * c->T * c->T;
	double *out = dalloc(n), *pre = dalloc(na), *att = dalloc(na);

	att_ref(out, pre, att, c);
	double l = dot_d(out, c->w, n);

	free(out), free(pre), free(att);
	return l;
}

/* analytic datt and dpreatt from the double forward, for the scratch gradients */
static void att_scratch_ref(double *datt, double *dpre, const double *att,
			    const struct att_ctx *c)
{
	int B = c->B, T = c->T, C = c->C, NH = c->NH, hs = C / NH;

	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++)
			for (int t = 0; t < T; t++) {
				long row = (((long)b * NH + h) * T + t) * T;
				const double *d = c->w + ((long)b * T + t) * C + h * hs;
				double s = 0;

				for (int t2 = 0; t2 < T; t2++) {
					const double *v = c->inp + ((long)b * T + t2) * 3 * C +
							  2 * C + h * hs;

					datt[row + t2] = t2 <= t ? dot_d(d, v, hs) : 0.0;
					s += att[row + t2] * datt[row + t2];
				}
				for (int t2 = 0; t2 < T; t2++)
					dpre[row + t2] = att[row + t2] * (datt[row + t2] - s);
			}
}

Test(kernels_cpu, attention)
{
	struct kc_rng r = { 404 };
	int B = SB, T = ST, C = SC, NH = SNH;
	size_t ni = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
	float *inp = frand(&r, ni, -1.5f, 1.5f), *w = frand(&r, no, -1, 1);
	float *out = falloc(no), *pre = frand(&r, na, -9, 9), *att = frand(&r, na, -9, 9);
	struct att_ctx c = { B, T, C, NH, todouble(inp, ni), todouble(w, no) };
	double *ro = dalloc(no), *rp = dalloc(na), *ra = dalloc(na);

	/* preatt and att start as garbage: the forward must write every entry */
	zn_cpu_attention_forward(out, pre, att, inp, B, T, C, NH);
	att_ref(ro, rp, ra, &c);
	cr_assert(kc_close("attention out", out, ro, no, RTOL_FWD));
	cr_assert(kc_close("attention preatt", pre, rp, na, RTOL_FWD));
	cr_assert(kc_close("attention att", att, ra, na, RTOL_FWD));

	double *gi = dalloc(ni), *rda = dalloc(na), *rdp = dalloc(na);

	fd_grad(gi, c.inp, ni, att_loss, &c);
	att_scratch_ref(rda, rdp, ra, &c);
	float *di0 = prefill(&r, gi, ni), *di = fcopy(di0, ni);

	for (int times = 1; times <= 2; times++) {
		/* scratch gradients start as fresh garbage each time: they are written */
		float *datt = frand(&r, na, -9, 9), *dpre = frand(&r, na, -9, 9);

		zn_cpu_attention_backward(di, dpre, datt, w, inp, att, B, T, C, NH);
		cr_assert(close_accum("attention dinp", di, di0, gi, ni, times));
		cr_assert(kc_close("attention datt", datt, rda, na, RTOL_BWD));
		cr_assert(kc_close("attention dpreatt", dpre, rdp, na, RTOL_BWD));
		free(datt), free(dpre);
	}
	free(inp), free(w), free(out), free(pre), free(att), free(c.inp), free(c.w), free(ro);
	free(rp), free(ra), free(gi), free(rda), free(rdp), free(di0), free(di);
}

/* ---- gelu, residual, scale ----------------------------------------------------------- */

static double gelu_d(double x)
{
	return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

Test(kernels_cpu, gelu)
{
	struct kc_rng r = { 505 };
	size_t n = 97;
	float *inp = frand(&r, n, -4, 4), *w = frand(&r, n, -1, 1), *out = falloc(n);
	double *ref = dalloc(n), *g = dalloc(n);

	zn_cpu_gelu_forward(out, inp, n);
	for (size_t i = 0; i < n; i++) {
		double x = inp[i];

		ref[i] = gelu_d(x);
		/* elementwise: the FD of L = sum(gelu * w) is w[i] * gelu'(x[i]) */
		g[i] = w[i] * (gelu_d(x + FD_H) - gelu_d(x - FD_H)) / (2 * FD_H);
	}
	cr_assert(kc_close("gelu forward", out, ref, n, RTOL_FWD));
	float *d0 = prefill(&r, g, n), *d = fcopy(d0, n);

	for (int times = 1; times <= 2; times++) {
		zn_cpu_gelu_backward(d, inp, w, n);
		cr_assert(close_accum("gelu dinp", d, d0, g, n, times));
	}
	free(inp), free(w), free(out), free(ref), free(g), free(d0), free(d);
}

Test(kernels_cpu, residual)
{
	struct kc_rng r = { 606 };
	size_t n = 83;
	float *a = frand(&r, n, -1, 1), *b = frand(&r, n, -1, 1), *dout = frand(&r, n, -1, 1);
	float *out = falloc(n);
	double *ref = dalloc(n), *g = todouble(dout, n);

	zn_cpu_residual_forward(out, a, b, n);
	for (size_t i = 0; i < n; i++)
		ref[i] = (double)a[i] + b[i];
	cr_assert(kc_close("residual forward", out, ref, n, RTOL_FWD));
	float *d10 = prefill(&r, g, n), *d20 = prefill(&r, g, n);
	float *d1 = fcopy(d10, n), *d2 = fcopy(d20, n);

	for (int times = 1; times <= 2; times++) {
		zn_cpu_residual_backward(d1, d2, dout, n);
		cr_assert(close_accum("residual dinp1", d1, d10, g, n, times));
		cr_assert(close_accum("residual dinp2", d2, d20, g, n, times));
	}
	/* in place (out aliases inp1), as a residual stream update may be */
	float *x = fcopy(a, n);

	zn_cpu_residual_forward(x, x, b, n);
	cr_assert(kc_close("residual in place", x, ref, n, RTOL_FWD));
	free(a), free(b), free(dout), free(out), free(ref), free(g), free(d10), free(d20);
	free(d1), free(d2), free(x);
}

Test(kernels_cpu, scale)
{
	struct kc_rng r = { 707 };
	size_t n = 71;
	float *x = frand(&r, n, -3, 3);
	double *ref = todouble(x, n);

	for (size_t i = 0; i < n; i++)
		ref[i] *= (double)0.3f;
	zn_cpu_scale(x, 0.3f, n);
	cr_assert(kc_close("scale", x, ref, n, RTOL_FWD));
	free(x), free(ref);
}

/* ---- crossentropy -------------------------------------------------------------------- */

struct ce_ctx {
	int BT, V, Vp;
	const int *targets;
	double *logits;
	double s; /* L = s * sum(losses) */
};

static void ce_ref(double *losses, double *probs, const struct ce_ctx *c)
{
	for (long bt = 0; bt < c->BT; bt++) {
		const double *l = c->logits + bt * c->Vp;
		double mx = -INFINITY, sum = 0;

		for (int i = 0; i < c->V; i++)
			mx = l[i] > mx ? l[i] : mx;
		for (int i = 0; i < c->V; i++)
			sum += exp(l[i] - mx);
		for (int i = 0; i < c->Vp; i++)
			probs[bt * c->Vp + i] = i < c->V ? exp(l[i] - mx) / sum : 0.0;
		losses[bt] = log(sum) - (l[c->targets[bt]] - mx);
	}
}

static double ce_loss(void *p)
{
	struct ce_ctx *c = p;
	double *losses = dalloc(c->BT), *probs = dalloc((size_t)c->BT * c->Vp), l = 0;

	ce_ref(losses, probs, c);
	for (int bt = 0; bt < c->BT; bt++)
		l += c->s * losses[bt];
	free(losses), free(probs);
	return l;
}

Test(kernels_cpu, crossentropy)
{
	struct kc_rng r = { 808 };
	int B = SB, T = ST, V = SV, Vp = SVP, BT = B * T;
	size_t n = (size_t)BT * Vp;
	int targets[SB * ST];

	kc_fill_int(&r, targets, BT, V);
	/* padded columns hold garbage (huge values): they must be ignored */
	float *logits = frand(&r, n, -3, 3), *losses = falloc(BT), *probs = frand(&r, n, -1, 1);

	for (int bt = 0; bt < BT; bt++)
		for (int i = V; i < Vp; i++)
			logits[(long)bt * Vp + i] = 1e30f;
	struct ce_ctx c = { BT, V, Vp, targets, todouble(logits, n), 1.0 / BT };
	double *rl = dalloc(BT), *rp = dalloc(n), *g = dalloc(n);

	zn_cpu_crossentropy_forward(losses, probs, logits, targets, B, T, V, Vp);
	ce_ref(rl, rp, &c);
	cr_assert(kc_close("crossentropy losses", losses, rl, BT, RTOL_FWD));
	cr_assert(kc_close("crossentropy probs", probs, rp, n, RTOL_FWD));
	for (int bt = 0; bt < BT; bt++) /* FD only over the real columns */
		fd_grad(g + (long)bt * Vp, c.logits + (long)bt * Vp, V, ce_loss, &c);
	for (int times = 1; times <= 2; times++) {
		/* writes, not accumulates: garbage before each call must not matter */
		float *d = frand(&r, n, -5, 5);

		zn_cpu_crossentropy_backward(d, probs, targets, (float)c.s, B, T, V, Vp);
		cr_assert(kc_close("crossentropy dlogits", d, g, n, RTOL_BWD));
		for (size_t i = 0; i < n; i++)
			cr_assert(i % Vp < (size_t)V || d[i] == 0.0f,
				  "dlogits padding %zu = %g, want 0", i, d[i]);
		free(d);
	}
	free(logits), free(losses), free(probs), free(c.logits), free(rl), free(rp), free(g);
}

Test(kernels_cpu, crossentropy_bad_target)
{
	int targets[2] = { 3, 11 }; /* 11 is outside V = 11 */
	float logits[2 * 16] = { 0 }, probs[2 * 16], losses[2], d[2 * 16];

	zn_cpu_crossentropy_forward(losses, probs, logits, targets, 1, 2, 11, 16);
	cr_assert(!isnan(losses[0]) && fabsf(losses[0] - logf(11.0f)) < 1e-5f, "loss %g",
		  losses[0]);
	cr_assert(isnan(losses[1]), "a target outside the vocab must give a NaN loss, got %g",
		  losses[1]);
	zn_cpu_crossentropy_backward(d, probs, targets, 1.0f, 1, 2, 11, 16);
	for (int i = 16; i < 32; i++)
		cr_assert(d[i] == 0.0f, "bad-target row must get zero gradient");
}

/* ---- casts --------------------------------------------------------------------------- */

Test(kernels_cpu, casts)
{
	struct kc_rng r = { 909 };
	enum { N = 300 };
	float in[N], back[N];
	uint16_t h[N];

	kc_fill(&r, in, N, -100, 100);
	/* specials: ties (even and odd), NaN, infinities, zeros, subnormal, near-overflow */
	uint32_t special[] = { 0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xffc12345u,
			       0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u,
			       0x00000001u, 0x7f7fffffu, 0x3f807fffu, 0x7f800001u };

	for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
		memcpy(&in[i], &special[i], 4);
	zn_cpu_cast_f32_to_bf16(h, in, N);
	for (int i = 0; i < N; i++)
		cr_assert(h[i] == zn_f32_to_bf16(in[i]), "bf16 of element %d: 0x%04x, want 0x%04x",
			  i, h[i], zn_f32_to_bf16(in[i]));
	cr_assert(h[0] == 0x3f80 && h[1] == 0x3f82, "ties to even: 0x%04x 0x%04x", h[0], h[1]);
	zn_cpu_cast_bf16_to_f32(back, h, N);
	for (int i = 0; i < N; i++) {
		uint32_t got, want = (uint32_t)h[i] << 16;

		memcpy(&got, &back[i], 4);
		cr_assert(got == want, "f32 of bf16 0x%04x: 0x%08x", h[i], got);
	}
	cr_assert(isnan(back[2]) && isnan(back[3]) && isnan(back[11]), "NaN must stay NaN");
}

/* ---- determinism across thread counts ------------------------------------------------ */

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

struct det_bufs {
	float *ln_di, *ln_dw, *ln_db, *enc_dwte, *enc_dwpe, *att_di, *mm_out, *mm_di, *mm_dw,
		*mm_db;
};

/* shapes big enough that every op goes parallel (ZN_CPU_PAR_MIN) */
enum { DB = 4, DT = 80, DC = 256, DNH = 4, DV = 50, DOC = 300 }; /* matmul: 2 x 2 tiles */

static void det_run(struct det_bufs *o, int threads)
{
	struct kc_rng r = { 1234 };
	size_t n = (size_t)DB * DT * DC, BT = (size_t)DB * DT, na = (size_t)DB * DNH * DT * DT;
	int *tok = malloc(BT * sizeof(int));
	float *x = frand(&r, n, -2, 2), *dout = frand(&r, n, -1, 1);
	float *w = frand(&r, DC, 0.5f, 1.5f), *b = frand(&r, DC, -1, 1);
	float *y = falloc(n), *mean = falloc(BT), *rstd = falloc(BT);
	float *qkv = frand(&r, 3 * n, -1, 1), *pre = falloc(na), *att = falloc(na);
	float *datt = falloc(na), *dpre = falloc(na);
	float *mw = frand(&r, (size_t)DOC * DC, -1, 1), *mb = frand(&r, DOC, -1, 1);
	float *mdout = frand(&r, BT * DOC, -1, 1);

	kc_fill_int(&r, tok, BT, DV);
	omp_set_num_threads(threads);
	/* OpenBLAS too: the kernel must force it back to 1 thread per tile */
	openblas_set_num_threads(threads);
	*o = (struct det_bufs){ falloc(n),	   falloc(DC),	    falloc(DC),
				falloc((size_t)DV * DC), falloc((size_t)DT * DC), falloc(3 * n),
				falloc(BT * DOC),	   falloc(n),	    falloc((size_t)DOC * DC),
				falloc(DOC) };
	zn_cpu_layernorm_forward(y, mean, rstd, x, w, b, DB, DT, DC);
	zn_cpu_layernorm_backward(o->ln_di, o->ln_dw, o->ln_db, dout, x, w, mean, rstd, DB, DT,
				  DC);
	zn_cpu_encoder_backward(o->enc_dwte, o->enc_dwpe, dout, tok, DB, DT, DC);
	zn_cpu_attention_forward(y, pre, att, qkv, DB, DT, DC, DNH);
	zn_cpu_attention_backward(o->att_di, dpre, datt, dout, qkv, att, DB, DT, DC, DNH);
	zn_cpu_matmul_forward(o->mm_out, x, mw, mb, DB, DT, DC, DOC);
	zn_cpu_matmul_backward(o->mm_di, o->mm_dw, o->mm_db, mdout, x, mw, DB, DT, DC, DOC);
	free(tok), free(x), free(dout), free(w), free(b), free(y), free(mean), free(rstd);
	free(qkv), free(pre), free(att), free(datt), free(dpre), free(mw), free(mb), free(mdout);
}

static void det_free(struct det_bufs *o)
{
	free(o->ln_di), free(o->ln_dw), free(o->ln_db), free(o->enc_dwte), free(o->enc_dwpe);
	free(o->att_di), free(o->mm_out), free(o->mm_di), free(o->mm_dw), free(o->mm_db);
}

Test(kernels_cpu, deterministic_across_threads)
{
	size_t n = (size_t)DB * DT * DC, BT = (size_t)DB * DT;
	struct det_bufs a, b, c;

	det_run(&a, 1);
	det_run(&b, 3);
	det_run(&c, 3); /* and run to run */
	struct det_bufs *cmp[2] = { &b, &c };

	for (int k = 0; k < 2; k++) {
		struct det_bufs *x = cmp[k];

		cr_assert(same_bits(a.ln_di, x->ln_di, n, "layernorm dinp"));
		cr_assert(same_bits(a.ln_dw, x->ln_dw, DC, "layernorm dweight"));
		cr_assert(same_bits(a.ln_db, x->ln_db, DC, "layernorm dbias"));
		cr_assert(same_bits(a.enc_dwte, x->enc_dwte, (size_t)DV * DC, "encoder dwte"));
		cr_assert(same_bits(a.enc_dwpe, x->enc_dwpe, (size_t)DT * DC, "encoder dwpe"));
		cr_assert(same_bits(a.att_di, x->att_di, 3 * n, "attention dinp"));
		cr_assert(same_bits(a.mm_out, x->mm_out, BT * DOC, "matmul out"));
		cr_assert(same_bits(a.mm_di, x->mm_di, n, "matmul dinp"));
		cr_assert(same_bits(a.mm_dw, x->mm_dw, (size_t)DOC * DC, "matmul dweight"));
		cr_assert(same_bits(a.mm_db, x->mm_db, DOC, "matmul dbias"));
	}
	det_free(&a);
	det_free(&b);
	det_free(&c);
}

/* ---- the table ----------------------------------------------------------------------- */

Test(kernels_cpu, table_complete_and_same_as_direct)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	void (*const *slot)(void) = (void (*const *)(void))&k->encoder_forward;
	size_t nslot = (sizeof(*k) - offsetof(struct zn_kernel_table, encoder_forward)) /
		       sizeof(void (*)(void));

	cr_assert_str_eq(k->name, "cpu");
	for (size_t i = 0; i < nslot; i++)
		cr_assert(slot[i] != NULL, "zn_kernels_cpu slot %zu is NULL", i);

	struct kc_rng r = { 4321 };
	int B = SB, T = ST, C = SC, OC = SOC;
	size_t ni = (size_t)B * T * C, no = (size_t)B * T * OC;
	float *inp = frand(&r, ni, -1, 1), *w = frand(&r, (size_t)OC * C, -1, 1);
	float *bias = frand(&r, OC, -1, 1), *o1 = falloc(no), *o2 = falloc(no);

	k->matmul_forward(NULL, o1, inp, w, bias, B, T, C, OC);
	zn_cpu_matmul_forward(o2, inp, w, bias, B, T, C, OC);
	cr_assert(same_bits(o1, o2, no, "table matmul_forward"));
	k->gelu_forward(NULL, o1, inp, ni);
	zn_cpu_gelu_forward(o2, inp, ni);
	cr_assert(same_bits(o1, o2, ni, "table gelu_forward"));
	free(inp), free(w), free(bias), free(o1), free(o2);
}
