/* Grouped-query causal attention, forward and backward (CPU reference).
 *
 * qkv [B,T,S], S = (NH + 2 KV) hd: query head h at channel h*hd, its key and value head
 * g = h / (NH/KV) at NH*hd + g*hd and (NH+KV)*hd + g*hd. preatt = q.k * scale
 * (scale = 1/sqrt(hd)) and att = softmax over the visible keys, both [B,NH,T,T]; key t2 is
 * visible from t when t2 <= t and (window == 0 or t - t2 < window). Entries not visible
 * are written 0, as the CUDA table does. out [B,T,NH*hd].
 *
 * Backward, in two passes so every output row is summed by one thread in a fixed order:
 * rows (b, h, t) write datt and dpreatt = att * (datt - sum(att * datt)) and add dq; then
 * rows (b, g, t2) add dk and dv, summing over the group's query heads in order, then t.
 */
#include "ops.h"

#include <float.h>
#include <math.h>

#include "par.h"

struct gqa {
	int T, NH, KV, hd, G, window;
	long S; /* row stride of qkv */
	float scale;
};

static struct gqa gqa_make(int T, int NH, int KV, int hd, int window)
{
	struct gqa a = { T, NH, KV, hd, NH / KV, window, (long)(NH + 2 * KV) * hd,
			 (float)(1.0 / sqrt((double)hd)) };

	return a;
}

/* first visible key of query t */
static int first_key(const struct gqa *a, int t)
{
	return a->window > 0 && t - a->window + 1 > 0 ? t - a->window + 1 : 0;
}

static float dot(const float *x, const float *y, int n)
{
	float s = 0.0f;

	for (int i = 0; i < n; i++)
		s += x[i] * y[i];
	return s;
}

/* one (b, h, t): x is qkv of batch b; scores, softmax and the weighted sum of values */
static void gqa_row(float *out, float *pre, float *att, const float *x, const struct gqa *a,
		    int h, int t)
{
	int g = h / a->G, t0 = first_key(a, t), hd = a->hd;
	const float *q = x + t * a->S + (long)h * hd;
	const float *k = x + (long)(a->NH + g) * hd;
	const float *v = x + (long)(a->NH + a->KV + g) * hd;
	float maxval = -FLT_MAX, sum = 0.0f;

	for (int t2 = 0; t2 < a->T; t2++) {
		pre[t2] = 0.0f;
		att[t2] = 0.0f;
	}
	for (int t2 = t0; t2 <= t; t2++) {
		float s = dot(q, k + t2 * a->S, hd) * a->scale;

		pre[t2] = s;
		if (s > maxval)
			maxval = s;
	}
	for (int t2 = t0; t2 <= t; t2++) {
		float e = expf(pre[t2] - maxval);

		att[t2] = e;
		sum += e;
	}
	float inv = 1.0f / sum; /* sum >= 1: the max term is exp(0) */

	for (int t2 = t0; t2 <= t; t2++)
		att[t2] *= inv;
	for (int i = 0; i < hd; i++)
		out[i] = 0.0f;
	for (int t2 = t0; t2 <= t; t2++) {
		const float *vr = v + t2 * a->S;

		for (int i = 0; i < hd; i++)
			out[i] += att[t2] * vr[i];
	}
}

void zn_cpu_gqa_attention_forward(float *out, float *preatt, float *att, const float *qkv,
				  int B, int T, int NH, int KV, int hd, int window)
{
	struct gqa a = gqa_make(T, NH, KV, hd, window);
	long n = (long)B * T * NH, C = (long)NH * hd;

#pragma omp parallel for schedule(static) if (n * T * hd > ZN_CPU_PAR_MIN)
	for (long j = 0; j < n; j++) {
		int h = (int)(j % NH);
		int t = (int)(j / NH % T);
		long b = j / NH / T;
		long r = ((b * NH + h) * T + t) * T;

		gqa_row(out + (b * T + t) * C + (long)h * hd, preatt + r, att + r,
			qkv + b * T * a.S, &a, h, t);
	}
}

/* pass 1, one (b, h, t): datt, dpreatt (written) and dq (added) */
static void gqa_backward_row(float *dq, float *dp, float *da, const float *d, const float *x,
			     const float *at, const struct gqa *a, int h, int t)
{
	int g = h / a->G, t0 = first_key(a, t), hd = a->hd;
	const float *k = x + (long)(a->NH + g) * hd;
	const float *v = x + (long)(a->NH + a->KV + g) * hd;
	float s = 0.0f;

	for (int t2 = 0; t2 < a->T; t2++) {
		da[t2] = 0.0f;
		dp[t2] = 0.0f;
	}
	for (int t2 = t0; t2 <= t; t2++) {
		da[t2] = dot(d, v + t2 * a->S, hd);
		s += at[t2] * da[t2];
	}
	for (int t2 = t0; t2 <= t; t2++) {
		const float *kr = k + t2 * a->S;
		float gr = at[t2] * (da[t2] - s);

		dp[t2] = gr;
		gr *= a->scale;
		for (int i = 0; i < hd; i++)
			dq[i] += gr * kr[i];
	}
}

/* pass 2, one (b, g, t2): dk and dv of key t2 from every query that sees it */
static void gqa_backward_key(float *dk, float *dv, const float *dpreatt, const float *att,
			     const float *dout, const float *x, const struct gqa *a, int g,
			     int t2)
{
	int T = a->T, hd = a->hd;
	int t1 = a->window > 0 && t2 + a->window - 1 < T - 1 ? t2 + a->window - 1 : T - 1;
	long C = (long)a->NH * hd;

	for (int h = g * a->G; h < (g + 1) * a->G; h++) {
		const float *dp = dpreatt + (long)h * T * T;
		const float *at = att + (long)h * T * T;

		for (int t = t2; t <= t1; t++) {
			const float *q = x + t * a->S + (long)h * hd;
			const float *d = dout + t * C + (long)h * hd;
			float gk = dp[(long)t * T + t2] * a->scale, gv = at[(long)t * T + t2];

			for (int i = 0; i < hd; i++) {
				dk[i] += gk * q[i];
				dv[i] += gv * d[i];
			}
		}
	}
}

void zn_cpu_gqa_attention_backward(float *dqkv, float *dpreatt, float *datt, const float *dout,
				   const float *qkv, const float *att, int B, int T, int NH,
				   int KV, int hd, int window)
{
	struct gqa a = gqa_make(T, NH, KV, hd, window);
	long n = (long)B * T * NH, C = (long)NH * hd, TT = (long)T * T;

#pragma omp parallel for schedule(static) if (n * T * hd > ZN_CPU_PAR_MIN)
	for (long j = 0; j < n; j++) {
		int h = (int)(j % NH);
		int t = (int)(j / NH % T);
		long b = j / NH / T;
		long r = ((b * NH + h) * T + t) * T;

		gqa_backward_row(dqkv + (b * T + t) * a.S + (long)h * hd, dpreatt + r, datt + r,
				 dout + (b * T + t) * C + (long)h * hd, qkv + b * T * a.S,
				 att + r, &a, h, t);
	}
	long m = (long)B * KV * T;

#pragma omp parallel for schedule(static) if (m * T * hd > ZN_CPU_PAR_MIN)
	for (long j = 0; j < m; j++) {
		int t2 = (int)(j % T);
		int g = (int)(j / T % KV);
		long b = j / T / KV;
		float *row = dqkv + (b * T + t2) * a.S;

		gqa_backward_key(row + (long)(NH + g) * hd, row + (long)(NH + KV + g) * hd,
				 dpreatt + b * NH * TT, att + b * NH * TT, dout + b * T * C,
				 qkv + b * T * a.S, &a, g, t2);
	}
}
