/* Private to kernels/cuda: launch sizes, warp reductions, error notes, row-major GEMM. */
#ifndef ZN_KERNELS_CUDA_COMMON_CUH
#define ZN_KERNELS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#define ZN_CUDA_THREADS 256
#define ZN_CUDA_MAX_BLOCKS 65535 /* elementwise kernels are grid-stride beyond this */

static inline unsigned zn_cuda_blocks(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;

	if (b == 0)
		b = 1;
	return b > ZN_CUDA_MAX_BLOCKS ? ZN_CUDA_MAX_BLOCKS : (unsigned)b;
}

/* blocks to cover n items at per_block each, at least 1 (a 0-block launch is an error;
 * kernels check their bounds, so an empty tensor is a no-op) */
static inline unsigned zn_cuda_grid(long n, long per_block)
{
	long b = (n + per_block - 1) / per_block;

	return b < 1 ? 1u : (unsigned)b;
}

/* grid-stride loops: i from this thread's global index, stepping by the grid's size */
static __device__ __forceinline__ size_t first_index(void)
{
	return blockIdx.x * (size_t)blockDim.x + threadIdx.x;
}

static __device__ __forceinline__ size_t grid_step(void)
{
	return (size_t)gridDim.x * blockDim.x;
}

/* Reductions over a full warp with a fixed butterfly: the same bits every run. */
static __device__ __forceinline__ float zn_warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ float zn_warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* fp32 -> bf16 bits as src/core/dtype.c rounds: to nearest, ties to even; NaN keeps its
 * sign and becomes quiet. Every bf16 the CUDA kernels write goes through this, so a fused
 * output equals the cast kernel's bit for bit. */
static __device__ __forceinline__ uint16_t zn_bf16_rne(float f)
{
	unsigned u = __float_as_uint(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* an op's output element: fp32 as is, or bf16 (the *_bf16out ops) */
static __device__ __forceinline__ void zn_put(float *p, float v)
{
	*p = v;
}

static __device__ __forceinline__ void zn_put(uint16_t *p, float v)
{
	*p = zn_bf16_rne(v);
}

/* Checks the launch just made (cudaGetLastError): on failure logs "op: launch failed at
 * file:line: message" and sets the sticky error flag. */
void zn_cuda_note_launch(const char *op, const char *file, int line);

/* Row-major C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C, `batch` times with element
 * strides sA, sB, sC between matrices (cuBLAS strided batched; batch 1 = plain sgemm). ta, tb:
 * A, B stored transposed ([K,M], [K,N]). Row-major is cuBLAS's column-major transposed, so
 * this calls cuBLAS with the operands swapped: C^T = op(B)^T op(A)^T. Failures are noted as
 * above. */
void zn_cuda_gemm(void *stream, const char *op, bool ta, bool tb, int M, int N, int K,
		  float alpha, const float *A, int lda, long long sA, const float *B, int ldb,
		  long long sB, float beta, float *C, int ldc, long long sC, int batch);

/* The calling thread's cuBLAS handle (created on first use; NULL and noted on failure),
 * and the sticky error flag's setter, for GEMM wrappers outside blas.cu. */
#include <cublas_v2.h>
cublasHandle_t zn_cuda_blas_handle(const char *op);
void zn_cuda_note_error(void);

/* Row-major C[M,N] (fp32) = alpha * op(A) @ op(B) + beta * C with A and B bf16, fp32
 * accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F; kernels/cuda/gemm_bf16.cu). Same
 * argument rules as zn_cuda_gemm, batch 1, split like it past 2^31 elements. */
void zn_cuda_gemm_bf16(void *stream, const char *op, bool ta, bool tb, int M, int N, int K,
		       float alpha, const uint16_t *A, int lda, const uint16_t *B, int ldb,
		       float beta, float *C, int ldc);

/* dst[c] += sum over rows of src[r * cols + c], rows in a fixed order per column */
void zn_cuda_column_sum(cudaStream_t s, const char *op, float *dst, const float *src,
			long rows, int cols);

/* FlashAttention-2 on tensor cores (kernels/cuda/flash_attention_fa2.cu): the
 * flash_attention_tc and flash_attention_doc_tc ops (pos NULL: no documents) for the
 * head_dims zn_cuda_fa2_supported accepts (32, 64, 96, 128). */
bool zn_cuda_fa2_supported(int hd);
/* out16 (NULL: none) receives out rounded to bf16 (zn_bf16_rne) by the epilogue; dqkv16
 * (NULL: none) likewise dqkv after the backward's sums. qkv16 (NULL: none) is qkv rounded
 * to bf16 (cast_f32_to_bf16's bits): when given and 16-byte aligned the kernels copy their
 * tiles from it by cp.async (the same tiles, so the same results), else from qkv. */
void zn_cuda_fa2_forward(void *stream, float *out, uint16_t *out16, float *lse,
			 const float *qkv, const uint16_t *qkv16, const int *pos, int B, int T,
			 int NH, int KV, int hd, int window);
void zn_cuda_fa2_backward(void *stream, float *dqkv, uint16_t *dqkv16, float *drow,
			  const float *dout, const float *qkv, const uint16_t *qkv16,
			  const float *out, const float *lse, const int *pos, int B, int T, int NH,
			  int KV, int hd, int window);
/* drow[(b*NH + h)*T + t] = sum over hd of dout * out (flash_attention_tc.cu), enqueued */
void zn_cuda_flash_drow(cudaStream_t s, const char *op, float *drow, const float *dout,
			const float *out, int B, int T, int NH, int hd);

/* dw[key[p], c] += dout[p, c] for p < BT, c < C: the embedding backward's scatter-add as
 * a stable sort by key and one thread per (distinct key, channel) summing its rows in
 * (b, t) order (kernels/cuda/embed_backward.cu): bit-identical to the CPU's serial walk.
 * Takes 12 x BT bytes of stream-ordered scratch; failures are noted as above. */
void zn_cuda_segment_add_rows(cudaStream_t s, const char *op, float *dw, const float *dout,
			      const int *key, long BT, int C);

#endif
