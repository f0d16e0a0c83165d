/* kernels/gemm_split: pieces cover the GEMM exactly, each operand of each piece spans at
 * most the limit, and a GEMM run piece by piece (a plain CPU loop) gives the unsplit
 * result bit for bit on integer-valued inputs. Also the shapes that matter: Llama 3
 * logits past 2^31 elements, forward and both backward GEMMs. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_split.h"

/* C = alpha op(A) op(B) + beta C over rows m0..m0+mn, k0..k0+kn, row-major, offsets
 * applied as the CUDA wrapper applies them */
static void ref_piece(const struct zn_gemm_shape *g, int64_t m0, int64_t mn, int64_t k0,
		      int64_t kn, const double *A, const double *B, double *C, double beta)
{
	int64_t ao, bo, co;

	zn_gemm_piece_offsets(g, m0, k0, &ao, &bo, &co);
	for (int64_t i = 0; i < mn; i++)
		for (int64_t j = 0; j < g->N; j++) {
			double s = 0.0;

			for (int64_t k = 0; k < kn; k++) {
				double a = g->ta ? A[ao + k * g->lda + i] : A[ao + i * g->lda + k];
				double b = g->tb ? B[bo + j * g->ldb + k] : B[bo + k * g->ldb + j];

				s += a * b;
			}
			C[co + i * g->ldc + j] = s + beta * C[co + i * g->ldc + j];
		}
}

static void check_shape(struct zn_gemm_shape g, int64_t limit, bool expect_split)
{
	int64_t a_n = (g.ta ? g.K : g.M) * g.lda, b_n = (g.tb ? g.N : g.K) * g.ldb;
	int64_t c_n = g.M * g.ldc, mc, kc, as, bs, cs;
	double *A = malloc(a_n * sizeof(double)), *B = malloc(b_n * sizeof(double));
	double *C0 = malloc(c_n * sizeof(double)), *C1 = malloc(c_n * sizeof(double));
	int pieces = 0;

	cr_assert(A && B && C0 && C1);
	for (int64_t i = 0; i < a_n; i++)
		A[i] = (double)((i * 7) % 11) - 5.0;
	for (int64_t i = 0; i < b_n; i++)
		B[i] = (double)((i * 5) % 13) - 6.0;
	for (int64_t i = 0; i < c_n; i++)
		C0[i] = C1[i] = (double)(i % 3);
	cr_assert_eq(zn_gemm_split_plan(&g, limit, &mc, &kc), 0);
	cr_assert(mc >= 1 && mc <= g.M && kc >= 1 && kc <= g.K);
	ref_piece(&g, 0, g.M, 0, g.K, A, B, C0, 2.0);
	for (int64_t k0 = 0; k0 < g.K; k0 += kc) {
		int64_t kn = g.K - k0 < kc ? g.K - k0 : kc;

		for (int64_t m0 = 0; m0 < g.M; m0 += mc) {
			int64_t mn = g.M - m0 < mc ? g.M - m0 : mc;

			zn_gemm_piece_spans(&g, mn, kn, &as, &bs, &cs);
			cr_assert(as <= limit && bs <= limit && cs <= limit,
				  "piece m0 %ld k0 %ld spans A %ld B %ld C %ld > limit %ld",
				  (long)m0, (long)k0, (long)as, (long)bs, (long)cs, (long)limit);
			ref_piece(&g, m0, mn, k0, kn, A, B, C1, k0 ? 1.0 : 2.0);
			pieces++;
		}
	}
	cr_assert_eq(pieces > 1, expect_split, "%d pieces (mc %ld kc %ld)", pieces, (long)mc,
		     (long)kc);
	cr_assert(!memcmp(C0, C1, c_n * sizeof(double)), "split result differs from unsplit");
	free(A);
	free(B);
	free(C0);
	free(C1);
}

Test(gemm_split, no_split_when_everything_fits)
{
	check_shape((struct zn_gemm_shape){ 6, 5, 4, 4, 4, 5, false, true }, 1000, false);
}

/* the three matmul GEMMs of kernels/cuda/matmul.cu at a small limit */
Test(gemm_split, forward_splits_rows)
{
	/* out[BT,OC] = inp[BT,C] weight[OC,C]^T */
	check_shape((struct zn_gemm_shape){ 37, 9, 5, 5, 5, 9, false, true }, 60, true);
}

Test(gemm_split, backward_dinp_splits_rows)
{
	/* dinp[BT,C] = dout[BT,OC] weight[OC,C] */
	check_shape((struct zn_gemm_shape){ 41, 5, 9, 9, 5, 5, false, false }, 70, true);
}

Test(gemm_split, backward_dweight_splits_k)
{
	/* dweight[OC,C] = dout[BT,OC]^T inp[BT,C]: A and B span grows with K = BT */
	check_shape((struct zn_gemm_shape){ 9, 5, 43, 9, 5, 5, true, false }, 80, true);
}

Test(gemm_split, leading_dimensions_wider_than_the_matrix)
{
	check_shape((struct zn_gemm_shape){ 23, 6, 7, 10, 11, 8, false, true }, 64, true);
	check_shape((struct zn_gemm_shape){ 7, 6, 29, 9, 8, 8, true, false }, 64, true);
}

Test(gemm_split, llama3_logits_at_int32_limit)
{
	/* B x T = 16,744 tokens, vocab 128,256 (padded 128,256), C 4096 */
	const int64_t BT = 16744, V = 128256, C = 4096, L = ZN_GEMM_SPLIT_LIMIT;
	struct zn_gemm_shape fwd = { BT, V, C, C, C, V, false, true };
	struct zn_gemm_shape dw = { V, C, BT, V, C, C, true, false };
	int64_t mc, kc, as, bs, cs;

	cr_assert_gt(BT * V, L, "the case the split exists for");
	cr_assert_eq(zn_gemm_split_plan(&fwd, L, &mc, &kc), 0);
	cr_assert_eq(kc, C);
	cr_assert_lt(mc, BT);
	cr_assert_eq(mc, (L - V) / V + 1);
	zn_gemm_piece_spans(&fwd, mc, kc, &as, &bs, &cs);
	cr_assert(as <= L && bs <= L && cs <= L);
	cr_assert_eq(zn_gemm_split_plan(&dw, L, &mc, &kc), 0);
	cr_assert_eq(mc, V);
	cr_assert_lt(kc, BT);
	zn_gemm_piece_spans(&dw, mc, kc, &as, &bs, &cs);
	cr_assert(as <= L && bs <= L && cs <= L);
	/* one token fewer than the threshold: one piece */
	fwd.M = L / V;
	cr_assert_eq(zn_gemm_split_plan(&fwd, L, &mc, &kc), 0);
	cr_assert_eq(mc, fwd.M);
}

Test(gemm_split, refuses_what_cannot_be_split)
{
	int64_t mc = 7, kc = 7;
	/* one row of op(B)^T (tb: N x ldb) already past the limit */
	struct zn_gemm_shape g = { 4, 50, 50, 50, 50, 50, false, true };

	cr_assert_eq(zn_gemm_split_plan(&g, 100, &mc, &kc), -EINVAL);
	cr_assert_eq(mc, 0);
	g = (struct zn_gemm_shape){ 0, 5, 5, 5, 5, 5, false, false };
	cr_assert_eq(zn_gemm_split_plan(&g, 100, &mc, &kc), -EINVAL);
	g = (struct zn_gemm_shape){ 4, 5, 5, 4, 5, 5, false, false }; /* lda < K */
	cr_assert_eq(zn_gemm_split_plan(&g, 100, &mc, &kc), -EINVAL);
}
