/* matmul with bias on CUDA: cuBLAS sgemm (fp32, no TF32) plus small bias kernels. */
#include "common.cuh"

extern "C" {
#include "ops.h"
}

static __global__ void add_bias_kernel(float *out, const float *bias, size_t n, int OC)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		out[i] += bias[i % OC];
}

extern "C" void zn_cuda_matmul_forward(void *stream, float *out, const float *inp,
				       const float *weight, const float *bias, int B, int T,
				       int C, int OC)
{
	cudaStream_t s = (cudaStream_t)stream;
	int BT = B * T;
	size_t n = (size_t)BT * OC;

	/* out[BT,OC] = inp[BT,C] @ weight[OC,C]^T */
	zn_cuda_gemm(stream, "matmul_forward", false, true, BT, OC, C, 1.0f, inp, C, 0, weight,
		     C, 0, 0.0f, out, OC, 0, 1);
	if (!bias)
		return;
	add_bias_kernel<<<zn_cuda_blocks(n, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0, s>>>(out, bias,
										     n, OC);
	zn_cuda_note_launch("matmul_forward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_matmul_backward(void *stream, float *dinp, float *dweight,
					float *dbias, const float *dout, const float *inp,
					const float *weight, int B, int T, int C, int OC)
{
	int BT = B * T;

	/* dinp[BT,C] += dout[BT,OC] @ weight[OC,C] */
	zn_cuda_gemm(stream, "matmul_backward", false, false, BT, C, OC, 1.0f, dout, OC, 0,
		     weight, C, 0, 1.0f, dinp, C, 0, 1);
	/* dweight[OC,C] += dout^T @ inp: dout is stored [BT,OC], i.e. transposed */
	if (dweight) /* NULL: a frozen weight, skipped */
		zn_cuda_gemm(stream, "matmul_backward", true, false, OC, C, BT, 1.0f, dout, OC, 0,
			     inp, C, 0, 1.0f, dweight, C, 0, 1);
	if (dbias)
		zn_cuda_column_sum((cudaStream_t)stream, "matmul_backward", dbias, dout, BT, OC);
}
