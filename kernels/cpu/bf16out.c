/* bf16 activations (kernels.h: the *_bf16out slots): a forward op whose output only feeds
 * a bf16 GEMM, writing that output as bf16. The CPU reference is literally the fp32 op
 * followed by the cast, block of rows by block of rows through a bounded buffer (rows are
 * independent in every one of these ops), so the bits are the fp32 op's rounded by
 * zn_cpu_cast_f32_to_bf16, whatever the block. The backward ones (a GEMM's output
 * gradient, kept in fp32 too) need no buffer: the fp32 op, then the cast of its result. */
#include <stdlib.h>

#include "core/log.h"
#include "ops.h"

/* floats of the fp32 buffer a call uses at most (4 MiB) */
#define BF16OUT_FLOATS ((size_t)1 << 20)

/* A buffer for blocks of whole rows of `row` floats: *rows_per gets the rows it holds (at
 * least 1). NULL (logged) when even one row cannot be had. */
static float *block_buf(size_t row, long rows, long *rows_per, const char *op)
{
	long n = (long)(BF16OUT_FLOATS / (row ? row : 1));
	float *buf;

	if (n < 1)
		n = 1;
	if (n > rows)
		n = rows > 0 ? rows : 1;
	buf = malloc((size_t)n * row * sizeof(float));
	if (!buf && n > 1) {
		n = 1;
		buf = malloc(row * sizeof(float));
	}
	if (!buf)
		zn_error("%s: no memory for a row of %zu floats: output not written", op, row);
	*rows_per = n;
	return buf;
}

void zn_cpu_layernorm_forward_bf16out(uint16_t *out16, float *mean, float *rstd,
				      const float *inp, const float *weight, const float *bias,
				      int B, int T, int C)
{
	long BT = (long)B * T, per;
	float *buf = block_buf((size_t)C, BT, &per, "layernorm_forward_bf16out");

	if (!buf)
		return;
	for (long r0 = 0; r0 < BT; r0 += per) {
		int n = (int)(BT - r0 < per ? BT - r0 : per);

		zn_cpu_layernorm_forward(buf, mean + r0, rstd + r0, inp + r0 * C, weight, bias, 1,
					 n, C);
		zn_cpu_cast_f32_to_bf16(out16 + r0 * C, buf, (size_t)n * C);
	}
	free(buf);
}

void zn_cpu_rmsnorm_forward_bf16out(uint16_t *out16, float *rstd, const float *inp,
				    const float *weight, float eps, int B, int T, int C)
{
	long BT = (long)B * T, per;
	float *buf = block_buf((size_t)C, BT, &per, "rmsnorm_forward_bf16out");

	if (!buf)
		return;
	for (long r0 = 0; r0 < BT; r0 += per) {
		int n = (int)(BT - r0 < per ? BT - r0 : per);

		zn_cpu_rmsnorm_forward(buf, rstd + r0, inp + r0 * C, weight, eps, 1, n, C);
		zn_cpu_cast_f32_to_bf16(out16 + r0 * C, buf, (size_t)n * C);
	}
	free(buf);
}

void zn_cpu_gelu_forward_bf16out(uint16_t *out16, const float *inp, size_t N)
{
	long per;
	float *buf = block_buf(1, (long)(N < BF16OUT_FLOATS ? N : BF16OUT_FLOATS), &per,
			       "gelu_forward_bf16out");

	if (!buf)
		return;
	for (size_t i0 = 0; i0 < N; i0 += (size_t)per) {
		size_t n = N - i0 < (size_t)per ? N - i0 : (size_t)per;

		zn_cpu_gelu_forward(buf, inp + i0, n);
		zn_cpu_cast_f32_to_bf16(out16 + i0, buf, n);
	}
	free(buf);
}

void zn_cpu_swiglu_forward_bf16out(uint16_t *out16, const float *inp, int B, int T, int IC)
{
	long BT = (long)B * T, per;
	float *buf = block_buf((size_t)IC, BT, &per, "swiglu_forward_bf16out");

	if (!buf)
		return;
	for (long r0 = 0; r0 < BT; r0 += per) {
		int n = (int)(BT - r0 < per ? BT - r0 : per);

		zn_cpu_swiglu_forward(buf, inp + r0 * 2 * IC, 1, n, IC);
		zn_cpu_cast_f32_to_bf16(out16 + r0 * IC, buf, (size_t)n * IC);
	}
	free(buf);
}

/* ---- bf16 output gradients: the fp32 result stays, its bf16 copy beside it ----------- */

void zn_cpu_gelu_backward_bf16out(float *dinp, uint16_t *dinp16, const float *inp,
				  const float *dout, size_t N)
{
	zn_cpu_gelu_backward(dinp, inp, dout, N);
	zn_cpu_cast_f32_to_bf16(dinp16, dinp, N);
}

void zn_cpu_swiglu_backward_bf16out(float *dinp, uint16_t *dinp16, const float *dout,
				    const float *inp, int B, int T, int IC)
{
	zn_cpu_swiglu_backward(dinp, dout, inp, B, T, IC);
	zn_cpu_cast_f32_to_bf16(dinp16, dinp, (size_t)B * T * 2 * IC);
}

void zn_cpu_residual_forward_bf16out(float *out, uint16_t *out16, const float *inp1,
				     const float *inp2, size_t N)
{
	zn_cpu_residual_forward(out, inp1, inp2, N);
	zn_cpu_cast_f32_to_bf16(out16, out, N);
}

void zn_cpu_rope_backward_bf16out(float *dqkv, uint16_t *dqkv16, const float *inv_freq,
				  const int *pos, int B, int T, int NH, int KV, int hd)
{
	zn_cpu_rope_backward(dqkv, inv_freq, pos, B, T, NH, KV, hd);
	zn_cpu_cast_f32_to_bf16(dqkv16, dqkv, (size_t)B * T * (NH + 2 * KV) * hd);
}

void zn_cpu_rope_forward_bf16out(float *qkv, uint16_t *qkv16, const float *inv_freq,
				 const int *pos, int B, int T, int NH, int KV, int hd)
{
	zn_cpu_rope_forward(qkv, inv_freq, pos, B, T, NH, KV, hd);
	zn_cpu_cast_f32_to_bf16(qkv16, qkv, (size_t)B * T * (NH + 2 * KV) * hd);
}

void zn_cpu_flash_attention_doc_backward_bf16out(float *dqkv, uint16_t *dqkv16, float *drow,
						 const float *dout, const float *qkv,
						 const float *out, const float *lse,
						 const int *pos, int B, int T, int NH, int KV,
						 int hd, int window)
{
	zn_cpu_flash_attention_doc_backward(dqkv, drow, dout, qkv, out, lse, pos, B, T, NH, KV,
					    hd, window);
	if (dqkv16)
		zn_cpu_cast_f32_to_bf16(dqkv16, dqkv, (size_t)B * T * (NH + 2 * KV) * hd);
}
