/* The double-precision references shared by test_kernels_flash.c and
 * test_kernels_flash_doc.c: the attention shape (qkv [B,T,(NH+2KV)*hd], out [B,T,NH*hd],
 * lse [B,NH,T]), a causal attention loop with an optional sliding window and optional
 * documents (pos [B,T]: each token's position in its document; keys before the query's
 * document start are masked), and its central finite differences (step FD_H). Static
 * inline in a header: test code only. */
#ifndef ZN_TESTS_FLASH_REF_H
#define ZN_TESTS_FLASH_REF_H

#include <math.h>
#include <stdlib.h>

#include "kernels_buf.h"

#define FD_H 1e-5

struct shape {
	int B, T, NH, KV, hd;
};

static inline size_t n_qkv(struct shape s)
{
	return (size_t)s.B * s.T * (s.NH + 2 * s.KV) * s.hd;
}

static inline size_t n_out(struct shape s)
{
	return (size_t)s.B * s.T * s.NH * s.hd;
}

static inline size_t n_row(struct shape s)
{
	return (size_t)s.B * s.NH * s.T;
}

/* out and lse (either may be NULL) of causal attention over window W (0 = none) and, when
 * pos, within each document; returns loss = sum(out * w) when w */
static inline double ref_attention(double *out, double *lse, const double *qkv,
				   const double *w, const int *pos, struct shape s, int W)
{
	long S = (long)(s.NH + 2 * s.KV) * s.hd, C = (long)s.NH * s.hd;
	double scale = 1.0 / sqrt((double)s.hd), loss = 0.0;
	double *p = dalloc(s.T);

	for (int b = 0; b < s.B; b++)
		for (int h = 0; h < s.NH; h++)
			for (int t = 0; t < s.T; t++) {
				int g = h / (s.NH / s.KV);
				const double *x = qkv + (long)b * s.T * S;
				const double *q = x + t * S + (long)h * s.hd;
				double mx = -INFINITY, sum = 0.0;
				int lo = W > 0 && t - W + 1 > 0 ? t - W + 1 : 0;

				if (pos && t - pos[b * s.T + t] > lo)
					lo = t - pos[b * s.T + t];
				for (int t2 = lo; t2 <= t; t2++) {
					const double *k = x + t2 * S + (long)(s.NH + g) * s.hd;
					double d = 0.0;

					for (int i = 0; i < s.hd; i++)
						d += q[i] * k[i];
					p[t2] = d * scale;
					mx = fmax(mx, p[t2]);
				}
				for (int t2 = lo; t2 <= t; t2++)
					sum += (p[t2] = exp(p[t2] - mx));
				if (lse)
					lse[((long)b * s.NH + h) * s.T + t] = mx + log(sum);
				for (int i = 0; i < s.hd; i++) {
					double o = 0.0;

					for (int t2 = lo; t2 <= t; t2++)
						o += p[t2] / sum *
						     x[t2 * S + (long)(s.NH + s.KV + g) * s.hd + i];
					long oi = ((long)b * s.T + t) * C + (long)h * s.hd + i;

					if (out)
						out[oi] = o;
					if (w)
						loss += o * w[oi];
				}
			}
	free(p);
	return loss;
}

/* g = d(sum(out * w))/d qkv by central finite differences of ref_attention (qkv restored) */
static inline void ref_attention_grad(double *g, double *qkv, const double *w, const int *pos,
				      struct shape s, int W)
{
	for (size_t i = 0; i < n_qkv(s); i++) {
		double save = qkv[i], lp, lm;

		qkv[i] = save + FD_H;
		lp = ref_attention(NULL, NULL, qkv, w, pos, s, W);
		qkv[i] = save - FD_H;
		lm = ref_attention(NULL, NULL, qkv, w, pos, s, W);
		qkv[i] = save;
		g[i] = (lp - lm) / (2 * FD_H);
	}
}

#endif
