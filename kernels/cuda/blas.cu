/* kernels/cuda plumbing: the per-thread cuBLAS handle, the row-major GEMM wrapper, the
 * column-sum reduction shared by matmul and layernorm, and the sticky error flag. */
#include <cublas_v2.h>
#include <errno.h>
#include <pthread.h>

#include "common.cuh"

extern "C" {
#include "core/log.h"
#include "gemm_split.h"
#include "ops.h"
}

static int g_error; /* set by any failed launch or cuBLAS call; read with __atomic */

static pthread_key_t g_handle_key;
static pthread_once_t g_handle_once = PTHREAD_ONCE_INIT;

static void handle_destroy(void *h)
{
	if (h)
		cublasDestroy((cublasHandle_t)h);
}

static void handle_key_create(void)
{
	pthread_key_create(&g_handle_key, handle_destroy);
}

static void note_error(void)
{
	__atomic_store_n(&g_error, 1, __ATOMIC_RELAXED);
}

/* The calling thread's handle, created on first use (on the device current now). */
static cublasHandle_t thread_handle(const char *op)
{
	cublasHandle_t h;
	cublasStatus_t st;

	pthread_once(&g_handle_once, handle_key_create);
	h = (cublasHandle_t)pthread_getspecific(g_handle_key);
	if (h)
		return h;
	st = cublasCreate(&h);
	if (st != CUBLAS_STATUS_SUCCESS) {
		zn_error("%s: cublasCreate failed: %s", op, cublasGetStatusString(st));
		note_error();
		return NULL;
	}
	pthread_setspecific(g_handle_key, h);
	return h;
}

cublasHandle_t zn_cuda_blas_handle(const char *op)
{
	return thread_handle(op);
}

void zn_cuda_note_error(void)
{
	note_error();
}

extern "C" void zn_cuda_kernels_thread_release(void)
{
	cublasHandle_t h;

	pthread_once(&g_handle_once, handle_key_create);
	h = (cublasHandle_t)pthread_getspecific(g_handle_key);
	if (!h)
		return;
	pthread_setspecific(g_handle_key, NULL);
	cublasDestroy(h);
}

extern "C" int zn_cuda_kernels_error(void)
{
	return __atomic_exchange_n(&g_error, 0, __ATOMIC_RELAXED) ? -EIO : 0;
}

void zn_cuda_note_launch(const char *op, const char *file, int line)
{
	cudaError_t e = cudaGetLastError();

	if (e == cudaSuccess)
		return;
	zn_error("%s: kernel launch failed at %s:%d: %s", op, file, line, cudaGetErrorString(e));
	note_error();
}

/* One GEMM as pieces cuBLAS's 32-bit API can index (kernels/gemm_split.h): the logits
 * of a large batch exceed 2^31 elements. A single piece when nothing needs splitting. */
static cublasStatus_t gemm_pieces(cublasHandle_t h, const char *op, cublasOperation_t oa,
				  cublasOperation_t ob, bool ta, bool tb, int M, int N, int K,
				  float alpha, const float *A, int lda, const float *B, int ldb,
				  float beta, float *C, int ldc)
{
	struct zn_gemm_shape g = { M, N, K, lda, ldb, ldc, ta, tb };
	cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
	const float one = 1.0f;
	int64_t mc, kc, ao, bo, co;

	if (zn_gemm_split_plan(&g, ZN_GEMM_SPLIT_LIMIT, &mc, &kc)) {
		zn_error("%s: GEMM (M %d N %d K %d) cannot be split into pieces of at most 2^31 "
			 "elements; lower the micro-batch or the sequence length", op, M, N, K);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	for (int64_t k0 = 0; k0 < K && st == CUBLAS_STATUS_SUCCESS; k0 += kc) {
		int kn = (int)(K - k0 < kc ? K - k0 : kc);

		for (int64_t m0 = 0; m0 < M && st == CUBLAS_STATUS_SUCCESS; m0 += mc) {
			int mn = (int)(M - m0 < mc ? M - m0 : mc);

			zn_gemm_piece_offsets(&g, m0, k0, &ao, &bo, &co);
			/* column-major cuBLAS computes C^T = op(B)^T op(A)^T */
			st = cublasSgemm(h, ob, oa, N, mn, kn, &alpha, B + bo, ldb, A + ao, lda,
					 k0 ? &one : &beta, C + co, ldc);
		}
	}
	return st;
}

void zn_cuda_gemm(void *stream, const char *op, bool ta, bool tb, int M, int N, int K,
		  float alpha, const float *A, int lda, long long sA, const float *B, int ldb,
		  long long sB, float beta, float *C, int ldc, long long sC, int batch)
{
	cublasHandle_t h = thread_handle(op);
	cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasStatus_t st;

	if (!h)
		return;
	st = cublasSetStream(h, (cudaStream_t)stream);
	if (st == CUBLAS_STATUS_SUCCESS && batch == 1)
		st = gemm_pieces(h, op, oa, ob, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
				 ldc);
	else if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasSgemmStridedBatched(h, ob, oa, N, M, K, &alpha, B, ldb, sB, A, lda, sA,
					       &beta, C, ldc, sC, batch);
	if (st != CUBLAS_STATUS_SUCCESS) {
		zn_error("%s: cuBLAS sgemm (M %d N %d K %d batch %d) failed: %s", op, M, N, K,
			 batch, cublasGetStatusString(st));
		note_error();
	}
}

/* Block (32 columns) x (32 row lanes): lane y sums rows y, y+32, ... of its column, then
 * row 0 adds the 32 partials in order. Fixed tree, no atomics: deterministic. */
static __global__ void column_sum_kernel(float *dst, const float *src, long rows, int cols)
{
	__shared__ float part[32][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float acc = 0.0f;

	if (c < cols)
		for (long r = threadIdx.y; r < rows; r += 32)
			acc += src[r * cols + c];
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < cols) {
		float s = 0.0f;

		for (int y = 0; y < 32; y++)
			s += part[y][threadIdx.x];
		dst[c] += s;
	}
}

void zn_cuda_column_sum(cudaStream_t s, const char *op, float *dst, const float *src,
			long rows, int cols)
{
	column_sum_kernel<<<zn_cuda_grid(cols, 32), dim3(32, 32), 0, s>>>(dst, src, rows, cols);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
}
