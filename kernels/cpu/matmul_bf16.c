/* bf16 compute on the CPU: matmul with bf16 inputs and fp32 accumulation, and the
 * encoder's forward reading bf16 tables (docs/kernels.md, "bf16 compute").
 *
 * Debian 12's OpenBLAS 0.3.21 declares cblas_sbgemm in cblas.h but does not export it (it
 * is built without BUILD_BFLOAT16: `nm -D libopenblasp-r0.3.21.so` lists no sbgemm), so
 * this is the converting path: each fixed TILE_M x TILE_N output tile converts its panels
 * of op(A) and op(B), KC columns of K at a time, from bf16 to fp32 (exact: a bf16 value is
 * an fp32 value with 16 low zero bits) into the thread's buffers and runs one
 * single-threaded sgemm per K chunk. The products of bf16 values are exact in fp32, so
 * this computes what a bf16 GEMM with fp32 accumulation computes, up to the order of the
 * fp32 sums. The tile grid and K chunks are fixed: the result does not depend on the
 * thread count (the matmul.c rule). Memory: (TILE_M + TILE_N) x KC floats per thread.
 */
#include "ops.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "par.h"

#define TILE_M 256
#define TILE_N 256
#define KC 2048

static inline float bf16_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* dst[r, 0..kn) = op(X)[r0 + r, k0 .. k0 + kn) for r < rows; op(X) is X (t = 0, X stored
 * [rows_total, K] with leading dimension ld) or X^T (t = 1, X stored [K, rows_total]). */
static void panel(float *dst, const uint16_t *X, int ld, int t, int r0, int rows, int k0,
		  int kn)
{
	for (int r = 0; r < rows; r++) {
		float *d = dst + (long)r * kn;

		if (!t) {
			const uint16_t *s = X + (long)(r0 + r) * ld + k0;

			for (int k = 0; k < kn; k++)
				d[k] = bf16_f32(s[k]);
		} else {
			for (int k = 0; k < kn; k++)
				d[k] = bf16_f32(X[(long)(k0 + k) * ld + r0 + r]);
		}
	}
}

/* C[M,N] = op(A)[M,K] @ op(B)[K,N] + beta * C, A and B bf16, C fp32, row-major. op(B) is
 * B (tb = 0, stored [K, N]) or B^T (tb = 1, stored [N, K]). Returns -ENOMEM (as -12) when
 * a thread's panel buffers cannot be allocated (nothing is written then by that thread:
 * callers treat it as fatal). */
static int gemm_bf16_tiled(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
			   const uint16_t *Bm, int ldb, float beta, float *C, int ldc)
{
	int tm = (M + TILE_M - 1) / TILE_M, tn = (N + TILE_N - 1) / TILE_N;
	long flops = 2L * M * N * K;
	int failed = 0;

	openblas_set_num_threads(1);
#pragma omp parallel if (tm * tn > 1 && flops > (1L << 22)) reduction(| : failed)
	{
		float *pa = malloc(sizeof(float) * TILE_M * KC);
		float *pb = malloc(sizeof(float) * TILE_N * KC);

		if (!pa || !pb)
			failed = 1;
#pragma omp for collapse(2) schedule(static)
		for (int i = 0; i < tm; i++) {
			for (int j = 0; j < tn; j++) {
				int m0 = i * TILE_M, n0 = j * TILE_N;
				int m = M - m0 < TILE_M ? M - m0 : TILE_M;
				int n = N - n0 < TILE_N ? N - n0 : TILE_N;
				float *c = C + (long)m0 * ldc + n0;

				if (!pa || !pb)
					continue;
				if (K == 0 && beta != 1.0f)
					for (int r = 0; r < m; r++)
						for (int q = 0; q < n; q++)
							c[(long)r * ldc + q] *= beta;
				for (int k0 = 0; k0 < K; k0 += KC) {
					int kn = K - k0 < KC ? K - k0 : KC;

					panel(pa, A, lda, ta, m0, m, k0, kn);
					/* op(B)^T rows are op(B)'s columns: B^T is stored [N,K]
					 * when tb, i.e. not transposed for the panel */
					panel(pb, Bm, ldb, !tb, n0, n, k0, kn);
					cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n,
						    kn, 1.0f, pa, kn, pb, kn, k0 ? 1.0f : beta, c,
						    ldc);
				}
			}
		}
		free(pa);
		free(pb);
	}
	return failed ? -12 : 0;
}

static void bias_fill(float *out, const float *bias, long BT, int OC)
{
#pragma omp parallel for schedule(static) if (BT * OC > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++)
		for (int o = 0; o < OC; o++)
			out[bt * OC + o] = bias[o];
}

void zn_cpu_matmul_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight,
				const float *bias, int B, int T, int C, int OC)
{
	int BT = B * T;

	if (bias)
		bias_fill(out, bias, BT, OC);
	if (gemm_bf16_tiled(0, 1, BT, OC, C, inp, C, weight, C, bias ? 1.0f : 0.0f, out, OC))
		zn_cpu_kernel_oom("matmul_forward_bf16");
}

void zn_cpu_matmul_backward_bf16(float *dinp, float *dweight, float *dbias,
				 const uint16_t *dout16, const float *dout, const uint16_t *inp,
				 const uint16_t *weight, int B, int T, int C, int OC)
{
	int BT = B * T;
	int rc;

	/* dinp[BT,C] += dout[BT,OC] @ weight[OC,C] */
	rc = gemm_bf16_tiled(0, 0, BT, C, OC, dout16, OC, weight, C, 1.0f, dinp, C);
	/* dweight[OC,C] += dout^T[OC,BT] @ inp[BT,C] (NULL: a frozen weight, skipped) */
	if (!rc && dweight)
		rc = gemm_bf16_tiled(1, 0, OC, C, BT, dout16, OC, inp, C, 1.0f, dweight, C);
	if (rc)
		zn_cpu_kernel_oom("matmul_backward_bf16");
	if (dbias)
		zn_cpu_matmul_backward_bias(dbias, dout, BT, OC);
}

void zn_cpu_encoder_forward_bf16(float *out, const int *inp, const uint16_t *wte,
				 const uint16_t *wpe, int B, int T, int C)
{
	zn_cpu_encoder_pos_forward_bf16(out, inp, NULL, wte, wpe, B, T, C);
}

void zn_cpu_encoder_pos_forward_bf16(float *out, const int *inp, const int *pos,
				     const uint16_t *wte, const uint16_t *wpe, int B, int T,
				     int C)
{
	long BT = (long)B * T;

#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const uint16_t *e = wte + (long)inp[bt] * C;
		const uint16_t *p = wpe + (pos ? (long)pos[bt] : bt % T) * C;
		float *o = out + bt * C;

		for (int c = 0; c < C; c++)
			o[c] = bf16_f32(e[c]) + bf16_f32(p[c]);
	}
}

void zn_cpu_embedding_forward_bf16(float *out, const int *inp, const uint16_t *wte, int B,
				   int T, int C)
{
	long BT = (long)B * T;

#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const uint16_t *e = wte + (long)inp[bt] * C;
		float *o = out + bt * C;

		for (int c = 0; c < C; c++)
			o[c] = bf16_f32(e[c]);
	}
}

void zn_cpu_kernel_oom(const char *op)
{
	zn_error("%s: out of host memory for the bf16 -> fp32 panel buffers (%d KiB per "
		 "thread); lower OMP_NUM_THREADS or free host memory", op,
		 (int)((TILE_M + TILE_N) * KC * sizeof(float) / 1024));
}
