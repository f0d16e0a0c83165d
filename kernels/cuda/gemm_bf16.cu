/* bf16 compute on CUDA: GEMMs with bf16 inputs and fp32 accumulation and output
 * (cublasGemmEx: A, B CUDA_R_16BF, C CUDA_R_32F, CUBLAS_COMPUTE_32F, the tensor-core path
 * on sm_80+), matmul forward/backward on bf16 weights and activations, and the encoder and
 * embedding forwards reading bf16 tables (docs/kernels.md, "bf16 compute"). */
#include "vec.cuh"

extern "C" {
#include "core/log.h"
#include "gemm_split.h"
#include "ops.h"
}

/* Pieces as blas.cu's gemm_pieces (operands over 2^31 elements), each one GemmEx. */
void zn_cuda_gemm_bf16(void *stream, const char *op, bool ta, bool tb, int M, int N, int K,
		       float alpha, const uint16_t *A, int lda, const uint16_t *B, int ldb,
		       float beta, float *C, int ldc)
{
	cublasHandle_t h = zn_cuda_blas_handle(op);
	cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	struct zn_gemm_shape g = { M, N, K, lda, ldb, ldc, ta, tb };
	cublasStatus_t st;
	const float one = 1.0f;
	int64_t mc, kc, ao, bo, co;

	if (!h)
		return;
	st = cublasSetStream(h, (cudaStream_t)stream);
	if (st == CUBLAS_STATUS_SUCCESS && zn_gemm_split_plan(&g, ZN_GEMM_SPLIT_LIMIT, &mc, &kc)) {
		zn_error("%s: GEMM (M %d N %d K %d) cannot be split into pieces of at most 2^31 "
			 "elements; lower the micro-batch or the sequence length", op, M, N, K);
		st = CUBLAS_STATUS_INVALID_VALUE;
	}
	for (int64_t k0 = 0; k0 < K && st == CUBLAS_STATUS_SUCCESS; k0 += kc) {
		int kn = (int)(K - k0 < kc ? K - k0 : kc);

		for (int64_t m0 = 0; m0 < M && st == CUBLAS_STATUS_SUCCESS; m0 += mc) {
			int mn = (int)(M - m0 < mc ? M - m0 : mc);

			zn_gemm_piece_offsets(&g, m0, k0, &ao, &bo, &co);
			/* column-major cuBLAS computes C^T = op(B)^T op(A)^T */
			st = cublasGemmEx(h, ob, oa, N, mn, kn, &alpha, B + bo, CUDA_R_16BF, ldb,
					  A + ao, CUDA_R_16BF, lda, k0 ? &one : &beta, C + co,
					  CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
		}
	}
	if (st != CUBLAS_STATUS_SUCCESS) {
		zn_error("%s: cublasGemmEx bf16 (M %d N %d K %d) failed: %s", op, M, N, K,
			 cublasGetStatusString(st));
		zn_cuda_note_error();
	}
}

extern "C" void zn_cuda_matmul_forward_bf16(void *stream, float *out, const uint16_t *inp,
					    const uint16_t *weight, const float *bias, int B,
					    int T, int C, int OC)
{
	cudaStream_t s = (cudaStream_t)stream;
	int BT = B * T;

	if (bias) /* the GEMM accumulates onto the bias rows */
		zn_bias(s, "matmul_forward_bf16", out, bias, (size_t)BT, OC, false);
	/* out[BT,OC] (+)= inp[BT,C] @ weight[OC,C]^T */
	zn_cuda_gemm_bf16(stream, "matmul_forward_bf16", false, true, BT, OC, C, 1.0f, inp, C,
			  weight, C, bias ? 1.0f : 0.0f, out, OC);
}

extern "C" void zn_cuda_matmul_backward_bf16(void *stream, float *dinp, float *dweight,
					     float *dbias, const uint16_t *dout16,
					     const float *dout, const uint16_t *inp,
					     const uint16_t *weight, int B, int T, int C, int OC)
{
	int BT = B * T;

	/* dinp[BT,C] += dout[BT,OC] @ weight[OC,C] */
	zn_cuda_gemm_bf16(stream, "matmul_backward_bf16", false, false, BT, C, OC, 1.0f, dout16,
			  OC, weight, C, 1.0f, dinp, C);
	/* dweight[OC,C] += dout^T @ inp (NULL: a frozen weight, skipped) */
	if (dweight)
		zn_cuda_gemm_bf16(stream, "matmul_backward_bf16", true, false, OC, C, BT, 1.0f,
				  dout16, OC, inp, C, 1.0f, dweight, C);
	if (dbias)
		zn_cuda_column_sum((cudaStream_t)stream, "matmul_backward_bf16", dbias, dout, BT,
				   OC);
}

extern "C" void zn_cuda_encoder_forward_bf16(void *stream, float *out, const int *inp,
					     const uint16_t *wte, const uint16_t *wpe, int B,
					     int T, int C)
{
	zn_cuda_encoder_pos_forward_bf16(stream, out, inp, NULL, wte, wpe, B, T, C);
}

extern "C" void zn_cuda_encoder_pos_forward_bf16(void *stream, float *out, const int *inp,
						 const int *pos, const uint16_t *wte,
						 const uint16_t *wpe, int B, int T, int C)
{
	/* pos NULL: position t, else pos[b,t] */
	zn_embed((cudaStream_t)stream, "encoder_forward_bf16", out, inp, pos, wte, wpe, B, T, C);
}

extern "C" void zn_cuda_embedding_forward_bf16(void *stream, float *out, const int *inp,
					       const uint16_t *wte, int B, int T, int C)
{
	zn_embed((cudaStream_t)stream, "embedding_forward_bf16", out, inp, (const int *)NULL, wte,
		 (const uint16_t *)NULL, B, T, C);
}
