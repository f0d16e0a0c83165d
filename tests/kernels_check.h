/* Test-only helpers shared by test_kernels.c and test_gpu_kernels.c: a seeded generator and
 * an element-wise comparison that prints the worst element. Static so each test executable
 * carries its own copy (test code only; the library keeps functions out of headers).
 *
 * Tolerance per element: |got - ref| <= rtol * (|ref| + max|ref|), i.e. relative error for
 * large elements and an absolute floor scaled by the array's magnitude for small ones (a
 * normalized error). NaN in got or ref always fails.
 */
#ifndef ZN_TESTS_KERNELS_CHECK_H
#define ZN_TESTS_KERNELS_CHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct kc_rng {
	uint64_t s;
};

static inline uint64_t kc_next(struct kc_rng *r)
{
	/* splitmix64 */
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* uniform in [lo, hi) */
static inline float kc_uniform(struct kc_rng *r, float lo, float hi)
{
	return lo + (hi - lo) * (float)((kc_next(r) >> 40) * (1.0 / 16777216.0));
}

static inline void kc_fill(struct kc_rng *r, float *x, size_t n, float lo, float hi)
{
	for (size_t i = 0; i < n; i++)
		x[i] = kc_uniform(r, lo, hi);
}

static inline void kc_fill_int(struct kc_rng *r, int *x, size_t n, int hi)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (int)(kc_next(r) % (uint64_t)hi);
}

/* Returns 1 when every element is within tolerance, else 0 after printing the worst one. */
static inline int kc_close(const char *what, const float *got, const double *ref, size_t n,
			   double rtol)
{
	double maxref = 0.0, worst = -1.0;
	size_t wi = 0;
	int nan = 0;

	for (size_t i = 0; i < n; i++)
		if (fabs(ref[i]) > maxref)
			maxref = fabs(ref[i]);
	for (size_t i = 0; i < n; i++) {
		double tol = rtol * (fabs(ref[i]) + maxref) + 1e-30;
		double r = fabs((double)got[i] - ref[i]) / tol;

		if (isnan(got[i]) || isnan(ref[i]) || isnan(r)) {
			r = INFINITY;
			nan = 1;
		}
		if (r > worst) {
			worst = r;
			wi = i;
		}
	}
	if (n == 0 || worst <= 1.0)
		return 1;
	fprintf(stderr,
		"%s: mismatch%s: worst element %zu of %zu: got %.9g, want %.9g (err %.3g, "
		"%.3g x tolerance; rtol %.3g, max|want| %.3g)\n",
		what, nan ? " (NaN)" : "", wi, n, (double)got[wi], ref[wi],
		fabs((double)got[wi] - ref[wi]), worst, rtol, maxref);
	return 0;
}

#endif
