/* Splitting a GEMM whose operands exceed a BLAS's 32-bit element reach.
 *
 * cuBLAS's (and OpenBLAS's) classic API takes int dimensions and leading dimensions and
 * indexes each operand from its base pointer, so an operand spanning more than 2^31 - 1
 * elements (the logits of B x T >= 16,744 tokens at Llama 3's 128,256 vocab) is out of
 * its reach even when every dimension fits in an int. zn_gemm_split_plan cuts the row
 * dimension M (rows of C and of op(A)) and, where an operand's span grows with K (A
 * transposed, B not transposed: the weight-gradient GEMM), the K dimension into pieces
 * whose every operand spans at most `limit` elements. Pure arithmetic, tested on the CPU;
 * kernels/cuda/blas.cu runs the pieces.
 *
 * Row-major, as zn_cuda_gemm: C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C, A stored
 * [M,lda] (or [K,lda] when ta), B stored [K,ldb] (or [N,ldb] when tb), C stored [M,ldc].
 * The piece (m0, k0) computes rows m0..m0+mc of C from columns k0..k0+kc of op(A) and
 * rows k0..k0+kc of op(B); pieces with k0 > 0 accumulate (beta 1), so split K changes
 * the summation order (by rounding only).
 */
#ifndef ZN_KERNELS_GEMM_SPLIT_H
#define ZN_KERNELS_GEMM_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#define ZN_GEMM_SPLIT_LIMIT 2147483647ll /* INT32_MAX elements */

struct zn_gemm_shape {
	int64_t M, N, K;
	int64_t lda, ldb, ldc;
	bool ta, tb;
};

/* Rows (*mc) and K columns (*kc) per piece, each as large as the limit allows (the whole
 * M and K when nothing needs splitting). Returns 0, or -EINVAL when no split fits: a
 * dimension or leading dimension above the limit, or a single row or column of N too
 * long (op(B) with N x ldb elements in one piece). */
int zn_gemm_split_plan(const struct zn_gemm_shape *g, int64_t limit, int64_t *mc, int64_t *kc);

/* Element offsets of the piece starting at row m0 and column k0 in A, B and C. */
void zn_gemm_piece_offsets(const struct zn_gemm_shape *g, int64_t m0, int64_t k0,
			   int64_t *a_off, int64_t *b_off, int64_t *c_off);

/* Elements of A, B and C that the piece of mc rows and kc columns spans (for tests). */
void zn_gemm_piece_spans(const struct zn_gemm_shape *g, int64_t mc, int64_t kc,
			 int64_t *a_span, int64_t *b_span, int64_t *c_span);

#endif
