/* matmul with bias: out[BT,OC] = inp[BT,C] @ weight[OC,C]^T + bias (CPU).
 *
 * The table's versions go through OpenBLAS (cblas_sgemm). OpenBLAS's result for an element
 * depends on the shape of the call and on its own thread count (measured: 0.3.21 Haswell
 * kernels, 1 vs 2 threads, and a 64-row slice vs the whole matrix all differ in the last
 * bits). So the product is cut into fixed TILE_M x TILE_N tiles, OpenMP threads take
 * tiles, and each tile is one single-threaded sgemm: the result depends only on the tile
 * grid, never on the thread count or on how many host streams call at once, and OpenBLAS's
 * pthread pool is never used from inside an OpenMP team (no oversubscription). Each op sets
 * openblas_set_num_threads(1) first (cheap when already 1) in case anything changed it.
 * The *_loop versions are plain loops with the same semantics, kept for tests.
 */
#include "ops.h"

#include <cblas.h>

#include "par.h"

/* tile of the output per single-threaded sgemm call: 256 x 256 fp32 = 256 KiB of C, and
 * packing overhead (A and B panels) under 1% of the tile's flops for K >= 64 */
#define TILE_M 256
#define TILE_N 256

/* C[M,N] = op(A)[M,K] @ op(B)[K,N] + beta * C, row-major, in fixed tiles (see above) */
static void gemm_tiled(int ta, int tb, int M, int N, int K, const float *A, int lda,
		       const float *B, int ldb, float beta, float *C, int ldc)
{
	int tm = (M + TILE_M - 1) / TILE_M, tn = (N + TILE_N - 1) / TILE_N;
	long flops = 2L * M * N * K;

	openblas_set_num_threads(1);
#pragma omp parallel for collapse(2) schedule(static) if (tm * tn > 1 && flops > (1L << 22))
	for (int i = 0; i < tm; i++) {
		for (int j = 0; j < tn; j++) {
			int m0 = i * TILE_M, n0 = j * TILE_N;
			int m = M - m0 < TILE_M ? M - m0 : TILE_M;
			int n = N - n0 < TILE_N ? N - n0 : TILE_N;
			/* row m0 of op(A) and column n0 of op(B) in row-major storage */
			const float *a = ta ? A + m0 : A + (long)m0 * lda;
			const float *b = tb ? B + (long)n0 * ldb : B + n0;

			cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
				    tb ? CblasTrans : CblasNoTrans, m, n, K, 1.0f, a, lda, b, ldb,
				    beta, C + (long)m0 * ldc + n0, ldc);
		}
	}
}

/* dbias[o] += sum over positions of dout[bt, o]; threads split the channels */
void zn_cpu_matmul_backward_bias(float *dbias, const float *dout, long BT, int OC)
{
	int nchunk = (OC + ZN_CPU_CHUNK - 1) / ZN_CPU_CHUNK;

#pragma omp parallel for schedule(static) if (BT * OC > ZN_CPU_PAR_MIN)
	for (int k = 0; k < nchunk; k++) {
		int o0 = k * ZN_CPU_CHUNK;
		int n = o0 + ZN_CPU_CHUNK < OC ? ZN_CPU_CHUNK : OC - o0;
		float acc[ZN_CPU_CHUNK] = { 0 };

		for (long bt = 0; bt < BT; bt++) {
			const float *d = dout + bt * OC + o0;

			for (int i = 0; i < n; i++)
				acc[i] += d[i];
		}
		for (int i = 0; i < n; i++)
			dbias[o0 + i] += acc[i];
	}
}

void zn_cpu_matmul_forward(float *out, const float *inp, const float *weight,
			   const float *bias, int B, int T, int C, int OC)
{
	int BT = B * T;
	float beta = 0.0f;

	if (bias) {
		/* start from the bias and let sgemm add the product (beta = 1) */
#pragma omp parallel for schedule(static) if ((long)BT * OC > ZN_CPU_PAR_MIN)
		for (int bt = 0; bt < BT; bt++)
			for (int o = 0; o < OC; o++)
				out[(long)bt * OC + o] = bias[o];
		beta = 1.0f;
	}
	gemm_tiled(0, 1, BT, OC, C, inp, C, weight, C, beta, out, OC);
}

void zn_cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
			    const float *inp, const float *weight, int B, int T, int C, int OC)
{
	int BT = B * T;

	/* dinp[BT,C] += dout[BT,OC] @ weight[OC,C] */
	gemm_tiled(0, 0, BT, C, OC, dout, OC, weight, C, 1.0f, dinp, C);
	/* dweight[OC,C] += dout^T[OC,BT] @ inp[BT,C] (NULL: a frozen weight, skipped) */
	if (dweight)
		gemm_tiled(1, 0, OC, C, BT, dout, OC, inp, C, 1.0f, dweight, C);
	if (dbias)
		zn_cpu_matmul_backward_bias(dbias, dout, BT, OC);
}

void zn_cpu_matmul_forward_loop(float *out, const float *inp, const float *weight,
				const float *bias, int B, int T, int C, int OC)
{
	long BT = (long)B * T;

#pragma omp parallel for schedule(static) if (BT * OC * C > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const float *x = inp + bt * C;

		for (int o = 0; o < OC; o++) {
			const float *w = weight + (long)o * C;
			float v = bias ? bias[o] : 0.0f;

			for (int i = 0; i < C; i++)
				v += x[i] * w[i];
			out[bt * OC + o] = v;
		}
	}
}

void zn_cpu_matmul_backward_loop(float *dinp, float *dweight, float *dbias, const float *dout,
				 const float *inp, const float *weight, int B, int T, int C,
				 int OC)
{
	long BT = (long)B * T;

#pragma omp parallel for schedule(static) if (BT * OC * C > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const float *d = dout + bt * OC;
		float *di = dinp + bt * C;

		for (int o = 0; o < OC; o++) {
			const float *w = weight + (long)o * C;

			for (int i = 0; i < C; i++)
				di[i] += d[o] * w[i];
		}
	}
	if (!dweight) /* a frozen weight: skipped */
		goto bias;
#pragma omp parallel for schedule(static) if (BT * OC * C > ZN_CPU_PAR_MIN)
	for (int o = 0; o < OC; o++) {
		float *dw = dweight + (long)o * C;

		for (long bt = 0; bt < BT; bt++) {
			const float *x = inp + bt * C;
			float d = dout[bt * OC + o];

			for (int i = 0; i < C; i++)
				dw[i] += d * x[i];
		}
	}
bias:
	if (dbias)
		zn_cpu_matmul_backward_bias(dbias, dout, BT, OC);
}
