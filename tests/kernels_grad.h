/* Gradient checks shared by test_kernels.c and test_kernels_llama.c: their tolerances
 * (forwards 64 fp32 eps, backwards 512 fp32 eps, kc_close's normalized error), central
 * finite differences of a double reference (step FD_H), and the accumulate check (a
 * backward adds to a random prefill: got - prefill = times * the reference gradient).
 * Static inline in a header: test code only. */
#ifndef ZN_TESTS_KERNELS_GRAD_H
#define ZN_TESTS_KERNELS_GRAD_H

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "kernels_buf.h"
#include "kernels_check.h"

#define RTOL_FWD (64 * FLT_EPSILON)
#define RTOL_BWD (512 * FLT_EPSILON)
#define FD_H 1e-5

static inline double dot_d(const double *a, const double *b, size_t n)
{
	double s = 0.0;

	for (size_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* central finite differences of f with respect to x[0..n) */
typedef double (*loss_fn)(void *ctx);

static inline void fd_grad(double *grad, double *x, size_t n, loss_fn f, void *ctx)
{
	for (size_t i = 0; i < n; i++) {
		double save = x[i];

		x[i] = save + FD_H;
		double lp = f(ctx);

		x[i] = save - FD_H;
		double lm = f(ctx);

		x[i] = save;
		grad[i] = (lp - lm) / (2 * FD_H);
	}
}

/* random prefill (scaled to the gradient) so a backward that writes instead of adding fails */
static inline float *prefill(struct kc_rng *r, const double *ref, size_t n)
{
	double m = 1e-3;
	float *p = falloc(n);

	for (size_t i = 0; i < n; i++)
		if (fabs(ref[i]) > m)
			m = fabs(ref[i]);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(m * kc_uniform(r, -1.0f, 1.0f));
	return p;
}

/* got - base must equal times * ref */
static inline int close_accum(const char *what, const float *got, const float *base,
			      const double *ref, size_t n, int times)
{
	float *d = falloc(n);
	double *want = dalloc(n);

	for (size_t i = 0; i < n; i++) {
		d[i] = got[i] - base[i];
		want[i] = times * ref[i];
	}
	int ok = kc_close(what, d, want, n, RTOL_BWD * times);

	free(d);
	free(want);
	return ok;
}

#endif
