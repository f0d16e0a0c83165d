/* matmul with bias on CUDA: cuBLAS sgemm (fp32, no TF32) plus small bias kernels. */
#include "vec.cuh"

extern "C" {
#include "ops.h"
}

extern "C" void zn_cuda_matmul_forward(void *stream, float *out, const float *inp,
				       const float *weight, const float *bias, int B, int T,
				       int C, int OC)
{
	cudaStream_t s = (cudaStream_t)stream;
	int BT = B * T;

	/* out[BT,OC] = inp[BT,C] @ weight[OC,C]^T */
	zn_cuda_gemm(stream, "matmul_forward", false, true, BT, OC, C, 1.0f, inp, C, 0, weight,
		     C, 0, 0.0f, out, OC, 0, 1);
	if (!bias)
		return;
	zn_bias(s, "matmul_forward", out, bias, (size_t)BT, OC, true);
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
