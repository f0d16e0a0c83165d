/* Splitting a GEMM into pieces a 32-bit BLAS can index (kernels/gemm_split.h). */
#include "gemm_split.h"

#include <errno.h>

void zn_gemm_piece_spans(const struct zn_gemm_shape *g, int64_t mc, int64_t kc,
			 int64_t *a_span, int64_t *b_span, int64_t *c_span)
{
	*a_span = g->ta ? (kc - 1) * g->lda + mc : (mc - 1) * g->lda + kc;
	*b_span = g->tb ? (g->N - 1) * g->ldb + kc : (kc - 1) * g->ldb + g->N;
	*c_span = (mc - 1) * g->ldc + g->N;
}

void zn_gemm_piece_offsets(const struct zn_gemm_shape *g, int64_t m0, int64_t k0,
			   int64_t *a_off, int64_t *b_off, int64_t *c_off)
{
	*a_off = g->ta ? k0 * g->lda + m0 : m0 * g->lda + k0;
	*b_off = g->tb ? k0 : k0 * g->ldb;
	*c_off = m0 * g->ldc;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

int zn_gemm_split_plan(const struct zn_gemm_shape *g, int64_t limit, int64_t *mc, int64_t *kc)
{
	int64_t m, k;

	*mc = 0;
	*kc = 0;
	if (g->M < 1 || g->N < 1 || g->K < 1 || limit < 1 || g->N > limit ||
	    g->lda > limit || g->ldb > limit || g->ldc > limit)
		return -EINVAL;
	if ((g->ta ? g->lda < g->M : g->lda < g->K) || (g->tb ? g->ldb < g->K : g->ldb < g->N) ||
	    g->ldc < g->N)
		return -EINVAL;
	/* K first: its bounds below hold for any mc (mc <= M <= lda when ta) */
	k = min64(g->K, limit);
	if (g->ta)
		k = min64(k, limit / g->lda);
	if (g->tb) {
		if ((g->N - 1) * g->ldb >= limit)
			return -EINVAL;
		k = min64(k, limit - (g->N - 1) * g->ldb);
	} else {
		k = min64(k, (limit - g->N) / g->ldb + 1);
	}
	if (k < 1)
		return -EINVAL;
	/* then M, given kc */
	m = min64(g->M, limit);
	if (g->ta)
		m = min64(m, limit - (k - 1) * g->lda);
	else
		m = min64(m, (limit - k) / g->lda + 1);
	m = min64(m, (limit - g->N) / g->ldc + 1);
	if (m < 1)
		return -EINVAL;
	*mc = m;
	*kc = k;
	return 0;
}
