/* The CPU kernel table: thin wrappers that drop `stream` (the CPU runs synchronously on
 * the calling thread) and call the zn_cpu_* ops of ops.h. matmul is the BLAS version. */
#include "kernels.h"

#include <string.h>

#include "ops.h"

static void encoder_forward(void *stream, float *out, const int *inp, const float *wte,
			    const float *wpe, int B, int T, int C)
{
	zn_cpu_encoder_forward(out, inp, wte, wpe, B, T, C);
}

static void encoder_backward(void *stream, float *dwte, float *dwpe, const float *dout,
			     const int *inp, int B, int T, int C)
{
	zn_cpu_encoder_backward(dwte, dwpe, dout, inp, B, T, C);
}

static void layernorm_forward(void *stream, float *out, float *mean, float *rstd,
			      const float *inp, const float *weight, const float *bias, int B,
			      int T, int C)
{
	zn_cpu_layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C);
}

static void layernorm_backward(void *stream, float *dinp, float *dweight, float *dbias,
			       const float *dout, const float *inp, const float *weight,
			       const float *mean, const float *rstd, int B, int T, int C)
{
	zn_cpu_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C);
}

static void matmul_forward(void *stream, float *out, const float *inp, const float *weight,
			   const float *bias, int B, int T, int C, int OC)
{
	zn_cpu_matmul_forward(out, inp, weight, bias, B, T, C, OC);
}

static void matmul_backward(void *stream, float *dinp, float *dweight, float *dbias,
			    const float *dout, const float *inp, const float *weight, int B,
			    int T, int C, int OC)
{
	zn_cpu_matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
}

static void attention_forward(void *stream, float *out, float *preatt, float *att,
			      const float *inp, int B, int T, int C, int NH)
{
	zn_cpu_attention_forward(out, preatt, att, inp, B, T, C, NH);
}

static void attention_backward(void *stream, float *dinp, float *dpreatt, float *datt,
			       const float *dout, const float *inp, const float *att, int B,
			       int T, int C, int NH)
{
	zn_cpu_attention_backward(dinp, dpreatt, datt, dout, inp, att, B, T, C, NH);
}

static void gelu_forward(void *stream, float *out, const float *inp, size_t N)
{
	zn_cpu_gelu_forward(out, inp, N);
}

static void gelu_backward(void *stream, float *dinp, const float *inp, const float *dout,
			  size_t N)
{
	zn_cpu_gelu_backward(dinp, inp, dout, N);
}

static void residual_forward(void *stream, float *out, const float *inp1, const float *inp2,
			     size_t N)
{
	zn_cpu_residual_forward(out, inp1, inp2, N);
}

static void residual_backward(void *stream, float *dinp1, float *dinp2, const float *dout,
			      size_t N)
{
	zn_cpu_residual_backward(dinp1, dinp2, dout, N);
}

static void crossentropy_forward(void *stream, float *losses, float *probs,
				 const float *logits, const int *targets, int B, int T, int V,
				 int Vp)
{
	zn_cpu_crossentropy_forward(losses, probs, logits, targets, B, T, V, Vp);
}

static void crossentropy_backward(void *stream, float *dlogits, const float *probs,
				  const int *targets, float dloss_scale, int B, int T, int V,
				  int Vp)
{
	zn_cpu_crossentropy_backward(dlogits, probs, targets, dloss_scale, B, T, V, Vp);
}

static void cast_f32_to_bf16(void *stream, uint16_t *out, const float *inp, size_t N)
{
	zn_cpu_cast_f32_to_bf16(out, inp, N);
}

static void cast_bf16_to_f32(void *stream, float *out, const uint16_t *inp, size_t N)
{
	zn_cpu_cast_bf16_to_f32(out, inp, N);
}

static void cast_f32_to_f16(void *stream, uint16_t *out, const float *inp, size_t N)
{
	zn_cpu_cast_f32_to_f16(out, inp, N);
}

static void cast_f16_to_f32(void *stream, float *out, const uint16_t *inp, size_t N)
{
	zn_cpu_cast_f16_to_f32(out, inp, N);
}

static void scale(void *stream, float *out, float s, size_t N)
{
	zn_cpu_scale(out, s, N);
}

static void adamw(void *stream, float *master, float *m, float *v, uint16_t *out_bf16,
		  const float *grad, const struct zn_kernel_adamw *hp, size_t N)
{
	zn_cpu_adamw(master, m, v, out_bf16, grad, hp, N);
}

static void adamw_states(void *stream, float *master, const struct zn_kernel_moments *mo,
			 uint16_t *out_bf16, const float *grad, const struct zn_kernel_adamw *hp,
			 const struct zn_kernel_span *spans, int span_count, size_t N)
{
	zn_cpu_adamw_states(master, mo, out_bf16, grad, hp, spans, span_count, N);
}

/* work_d is the CUDA reduction's scratch: the CPU sums in fixed chunks of its own */
static void grad_sumsq(void *stream, double *sumsq_d, int32_t *nonfinite_d, double *work_d,
		       const float *grad, size_t N)
{
	zn_cpu_grad_sumsq(sumsq_d, nonfinite_d, grad, N);
}

static void embedding_forward(void *stream, float *out, const int *inp, const float *wte,
			      int B, int T, int C)
{
	zn_cpu_embedding_forward(out, inp, wte, B, T, C);
}

static void embedding_backward(void *stream, float *dwte, const float *dout, const int *inp,
			       int B, int T, int C)
{
	zn_cpu_embedding_backward(dwte, dout, inp, B, T, C);
}

static void rmsnorm_forward(void *stream, float *out, float *rstd, const float *inp,
			    const float *weight, float eps, int B, int T, int C)
{
	zn_cpu_rmsnorm_forward(out, rstd, inp, weight, eps, B, T, C);
}

static void rmsnorm_backward(void *stream, float *dinp, float *dweight, const float *dout,
			     const float *inp, const float *weight, const float *rstd, int B,
			     int T, int C)
{
	zn_cpu_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, B, T, C);
}

static void qk_rmsnorm_forward(void *stream, float *out, float *rstd, const float *inp,
			       const float *wq, const float *wk, float eps, int B, int T, int NH,
			       int KV, int hd)
{
	zn_cpu_qk_rmsnorm_forward(out, rstd, inp, wq, wk, eps, B, T, NH, KV, hd);
}

static void qk_rmsnorm_backward(void *stream, float *dqkv, float *dwq, float *dwk,
				const float *inp, const float *wq, const float *wk,
				const float *rstd, int B, int T, int NH, int KV, int hd)
{
	zn_cpu_qk_rmsnorm_backward(dqkv, dwq, dwk, inp, wq, wk, rstd, B, T, NH, KV, hd);
}

static void rope_forward(void *stream, float *qkv, const float *inv_freq, const int *pos,
			 int B, int T, int NH, int KV, int hd)
{
	zn_cpu_rope_forward(qkv, inv_freq, pos, B, T, NH, KV, hd);
}

static void rope_backward(void *stream, float *dqkv, const float *inv_freq, const int *pos,
			  int B, int T, int NH, int KV, int hd)
{
	zn_cpu_rope_backward(dqkv, inv_freq, pos, B, T, NH, KV, hd);
}

static void swiglu_forward(void *stream, float *out, const float *inp, int B, int T,
			   int IC)
{
	zn_cpu_swiglu_forward(out, inp, B, T, IC);
}

static void swiglu_backward(void *stream, float *dinp, const float *dout, const float *inp,
			    int B, int T, int IC)
{
	zn_cpu_swiglu_backward(dinp, dout, inp, B, T, IC);
}

static void gqa_attention_forward(void *stream, float *out, float *preatt, float *att,
				  const float *qkv, int B, int T, int NH, int KV, int hd,
				  int window)
{
	zn_cpu_gqa_attention_forward(out, preatt, att, qkv, B, T, NH, KV, hd, window);
}

static void gqa_attention_backward(void *stream, float *dqkv, float *dpreatt, float *datt,
				   const float *dout, const float *qkv, const float *att, int B,
				   int T, int NH, int KV, int hd, int window)
{
	zn_cpu_gqa_attention_backward(dqkv, dpreatt, datt, dout, qkv, att, B, T, NH, KV, hd,
				      window);
}

static void flash_attention_forward(void *stream, float *out, float *lse, const float *qkv,
				    int B, int T, int NH, int KV, int hd, int window)
{
	zn_cpu_flash_attention_forward(out, lse, qkv, B, T, NH, KV, hd, window);
}

static void flash_attention_backward(void *stream, float *dqkv, float *drow, const float *dout,
				     const float *qkv, const float *out, const float *lse, int B,
				     int T, int NH, int KV, int hd, int window)
{
	zn_cpu_flash_attention_backward(dqkv, drow, dout, qkv, out, lse, B, T, NH, KV, hd,
					window);
}

static void matmul_forward_bf16(void *stream, float *out, const uint16_t *inp,
				const uint16_t *weight, const float *bias, int B, int T, int C,
				int OC)
{
	zn_cpu_matmul_forward_bf16(out, inp, weight, bias, B, T, C, OC);
}

static void matmul_backward_bf16(void *stream, float *dinp, float *dweight, float *dbias,
				 const uint16_t *dout16, const float *dout, const uint16_t *inp,
				 const uint16_t *weight, int B, int T, int C, int OC)
{
	zn_cpu_matmul_backward_bf16(dinp, dweight, dbias, dout16, dout, inp, weight, B, T, C,
				    OC);
}

static void encoder_forward_bf16(void *stream, float *out, const int *inp,
				 const uint16_t *wte, const uint16_t *wpe, int B, int T, int C)
{
	zn_cpu_encoder_forward_bf16(out, inp, wte, wpe, B, T, C);
}

static void embedding_forward_bf16(void *stream, float *out, const int *inp,
				   const uint16_t *wte, int B, int T, int C)
{
	zn_cpu_embedding_forward_bf16(out, inp, wte, B, T, C);
}

static void cols_add(void *stream, float *out, const float *inp, float s, int64_t R, int ld,
		     int c0, int n)
{
	zn_cpu_cols_add(out, inp, s, R, ld, c0, n);
}

static void kv_attention_forward(void *stream, float *out, float *kcache, float *vcache,
				 const float *qkv, int pos0, int T, int NH, int KV, int hd,
				 int window)
{
	(void)stream;
	zn_cpu_kv_attention_forward(out, kcache, vcache, qkv, pos0, T, NH, KV, hd, window);
}

static void cols_take(void *stream, float *out, const float *inp, float s, int64_t R, int ld,
		      int c0, int n)
{
	zn_cpu_cols_take(out, inp, s, R, ld, c0, n);
}

static void dropout(void *stream, float *out, const float *inp, float p, uint64_t seed,
		    size_t N)
{
	zn_cpu_dropout(out, inp, p, seed, N);
}

static void lora_up(void *stream, float *out, const float *t, const float *w, float s,
		    int64_t R, int k, int ld, int c0, int n)
{
	zn_cpu_lora_up(out, t, w, s, R, k, ld, c0, n);
}

static void cols_take_bf16(void *stream, float *out, const uint16_t *inp, float s, int64_t R,
			   int ld, int c0, int n)
{
	zn_cpu_cols_take_bf16(out, inp, s, R, ld, c0, n);
}

static void flash_attention_doc_forward(void *stream, float *out, float *lse, const float *qkv,
					const int *pos, int B, int T, int NH, int KV, int hd,
					int window)
{
	zn_cpu_flash_attention_doc_forward(out, lse, qkv, pos, B, T, NH, KV, hd, window);
}

static void flash_attention_doc_backward(void *stream, float *dqkv, float *drow,
					 const float *dout, const float *qkv, const float *out,
					 const float *lse, const int *pos, int B, int T, int NH,
					 int KV, int hd, int window)
{
	zn_cpu_flash_attention_doc_backward(dqkv, drow, dout, qkv, out, lse, pos, B, T, NH, KV,
					    hd, window);
}

/* no tensor cores: the fp32 op, and out16 its cast (the same bits as a cast pass) */
static void flash_attention_doc_tc_forward(void *stream, float *out, uint16_t *out16,
					   float *lse, const float *qkv, const int *pos, int B,
					   int T, int NH, int KV, int hd, int window)
{
	zn_cpu_flash_attention_doc_forward(out, lse, qkv, pos, B, T, NH, KV, hd, window);
	if (out16)
		zn_cpu_cast_f32_to_bf16(out16, out, (size_t)B * T * NH * hd);
}

static void layernorm_forward_bf16out(void *stream, uint16_t *out16, float *mean, float *rstd,
				      const float *inp, const float *weight, const float *bias,
				      int B, int T, int C)
{
	zn_cpu_layernorm_forward_bf16out(out16, mean, rstd, inp, weight, bias, B, T, C);
}

static void rmsnorm_forward_bf16out(void *stream, uint16_t *out16, float *rstd,
				    const float *inp, const float *weight, float eps, int B,
				    int T, int C)
{
	zn_cpu_rmsnorm_forward_bf16out(out16, rstd, inp, weight, eps, B, T, C);
}

static void gelu_forward_bf16out(void *stream, uint16_t *out16, const float *inp, size_t N)
{
	zn_cpu_gelu_forward_bf16out(out16, inp, N);
}

static void swiglu_forward_bf16out(void *stream, uint16_t *out16, const float *inp, int B,
				   int T, int IC)
{
	zn_cpu_swiglu_forward_bf16out(out16, inp, B, T, IC);
}

static void encoder_pos_forward(void *stream, float *out, const int *inp, const int *pos,
				const float *wte, const float *wpe, int B, int T, int C)
{
	zn_cpu_encoder_pos_forward(out, inp, pos, wte, wpe, B, T, C);
}

static void encoder_pos_backward(void *stream, float *dwte, float *dwpe, const float *dout,
				 const int *inp, const int *pos, int B, int T, int C)
{
	zn_cpu_encoder_pos_backward(dwte, dwpe, dout, inp, pos, B, T, C);
}

static void encoder_pos_forward_bf16(void *stream, float *out, const int *inp,
				     const int *pos, const uint16_t *wte, const uint16_t *wpe,
				     int B, int T, int C)
{
	zn_cpu_encoder_pos_forward_bf16(out, inp, pos, wte, wpe, B, T, C);
}

static void moe_route_forward(void *stream, int *sel, float *w, float *probs,
			      const float *logits, int N, int E, int K, int norm)
{
	zn_cpu_moe_route_forward(sel, w, probs, logits, N, E, K, norm);
}

static void moe_route_backward(void *stream, float *dlogits, const float *dw,
			       const float *probs, const int *sel, const float *dprob, int N, int E,
			       int K, int norm)
{
	zn_cpu_moe_route_backward(dlogits, dw, probs, sel, dprob, N, E, K, norm);
}

static void moe_dispatch(void *stream, int *perm, int *pos, int *offsets, const int *sel, int N,
			 int E, int K)
{
	zn_cpu_moe_dispatch(perm, pos, offsets, sel, N, E, K);
}

static void moe_gather(void *stream, float *out, const float *inp, const int *perm, int M, int K,
		       int C)
{
	zn_cpu_moe_gather(out, inp, perm, M, K, C);
}

static void moe_combine(void *stream, float *out, const float *y, const int *pos, const int *sel,
			const float *w, int N, int K, int C, int accumulate)
{
	zn_cpu_moe_combine(out, y, pos, sel, w, N, K, C, accumulate);
}

static void moe_scatter_dout(void *stream, float *dy, float *dw, const float *dout,
			     const float *y, const float *w, const int *perm, int M, int K, int C)
{
	zn_cpu_moe_scatter_dout(dy, dw, dout, y, w, perm, M, K, C);
}

static void moe_aux_stats(void *stream, float *acc, const float *probs, const int *sel, int N,
			  int E, int K)
{
	zn_cpu_moe_aux_stats(acc, probs, sel, N, E, K);
}

static void moe_aux_finish(void *stream, float *loss, float *dprob, const float *acc, int E,
			   float ntot, float scale)
{
	zn_cpu_moe_aux_finish(loss, dprob, acc, E, ntot, scale);
}

/* the stream's work before it already ran: the CPU runs in order on the calling thread */
static void read_sync(void *stream, void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
}

static void write_sync(void *stream, void *dst, const void *src, size_t bytes)
{
	(void)stream;
	memcpy(dst, src, bytes);
}

static void dequant_4bit(void *stream, float *out32, uint16_t *out16, const uint8_t *packed,
			 const float *absmax, size_t N, int blocksize, int type, int qdtype)
{
	(void)stream;
	zn_cpu_dequant_4bit(out32, out16, packed, absmax, N, blocksize, type, qdtype);
}

static void dequant_absmax8(void *stream, float *absmax, const uint8_t *q, const float *map,
			    const float *absmax2, const float *offset, size_t N, int blocksize2)
{
	(void)stream;
	zn_cpu_dequant_absmax8(absmax, q, map, absmax2, offset, N, blocksize2);
}

static void gelu_backward_bf16out(void *stream, float *dinp, uint16_t *dinp16,
				  const float *inp, const float *dout, size_t N)
{
	zn_cpu_gelu_backward_bf16out(dinp, dinp16, inp, dout, N);
}

static void swiglu_backward_bf16out(void *stream, float *dinp, uint16_t *dinp16,
				    const float *dout, const float *inp, int B, int T, int IC)
{
	zn_cpu_swiglu_backward_bf16out(dinp, dinp16, dout, inp, B, T, IC);
}

static void residual_forward_bf16out(void *stream, float *out, uint16_t *out16,
				     const float *inp1, const float *inp2, size_t N)
{
	zn_cpu_residual_forward_bf16out(out, out16, inp1, inp2, N);
}

static void rope_backward_bf16out(void *stream, float *dqkv, uint16_t *dqkv16,
				  const float *inv_freq, const int *pos, int B, int T, int NH,
				  int KV, int hd)
{
	zn_cpu_rope_backward_bf16out(dqkv, dqkv16, inv_freq, pos, B, T, NH, KV, hd);
}

/* no tensor cores: the fp32 op on the fp32 qkv (qkv16 not read), and dqkv16 its cast */
static void flash_attention_doc_tc_backward_bf16out(void *stream, float *dqkv,
						    uint16_t *dqkv16, float *drow,
						    const float *dout, const float *qkv,
						    const uint16_t *qkv16, const float *out,
						    const float *lse, const int *pos, int B, int T,
						    int NH, int KV, int hd, int window)
{
	zn_cpu_flash_attention_doc_backward_bf16out(dqkv, dqkv16, drow, dout, qkv, out, lse, pos,
						    B, T, NH, KV, hd, window);
}

static void rope_forward_bf16out(void *stream, float *qkv, uint16_t *qkv16,
				 const float *inv_freq, const int *pos, int B, int T, int NH, int KV,
				 int hd)
{
	zn_cpu_rope_forward_bf16out(qkv, qkv16, inv_freq, pos, B, T, NH, KV, hd);
}

/* the fp32 op on the fp32 qkv: qkv16 not read */
static void flash_attention_doc_tc_forward_qkv16(void *stream, float *out, uint16_t *out16,
						 float *lse, const float *qkv,
						 const uint16_t *qkv16, const int *pos, int B,
						 int T, int NH, int KV, int hd, int window)
{
	flash_attention_doc_tc_forward(stream, out, out16, lse, qkv, pos, B, T, NH, KV, hd,
				       window);
}

const struct zn_kernel_table zn_kernels_cpu = {
	.name = "cpu",
	.encoder_forward = encoder_forward,
	.encoder_backward = encoder_backward,
	.layernorm_forward = layernorm_forward,
	.layernorm_backward = layernorm_backward,
	.matmul_forward = matmul_forward,
	.matmul_backward = matmul_backward,
	.attention_forward = attention_forward,
	.attention_backward = attention_backward,
	.gelu_forward = gelu_forward,
	.gelu_backward = gelu_backward,
	.residual_forward = residual_forward,
	.residual_backward = residual_backward,
	.crossentropy_forward = crossentropy_forward,
	.crossentropy_backward = crossentropy_backward,
	.cast_f32_to_bf16 = cast_f32_to_bf16,
	.cast_bf16_to_f32 = cast_bf16_to_f32,
	.scale = scale,
	.adamw = adamw,
	.grad_sumsq = grad_sumsq,
	.embedding_forward = embedding_forward,
	.embedding_backward = embedding_backward,
	.rmsnorm_forward = rmsnorm_forward,
	.rmsnorm_backward = rmsnorm_backward,
	.rope_forward = rope_forward,
	.rope_backward = rope_backward,
	.qk_rmsnorm_forward = qk_rmsnorm_forward,
	.qk_rmsnorm_backward = qk_rmsnorm_backward,
	.swiglu_forward = swiglu_forward,
	.swiglu_backward = swiglu_backward,
	.gqa_attention_forward = gqa_attention_forward,
	.gqa_attention_backward = gqa_attention_backward,
	.flash_attention_forward = flash_attention_forward,
	.flash_attention_backward = flash_attention_backward,
	.cast_f32_to_f16 = cast_f32_to_f16,
	.cast_f16_to_f32 = cast_f16_to_f32,
	.matmul_forward_bf16 = matmul_forward_bf16,
	.matmul_backward_bf16 = matmul_backward_bf16,
	.encoder_forward_bf16 = encoder_forward_bf16,
	.embedding_forward_bf16 = embedding_forward_bf16,
	/* no tensor cores: the fp32 fused attention */
	.flash_attention_tc_forward = flash_attention_forward,
	.flash_attention_tc_backward = flash_attention_backward,
	.cols_add = cols_add,
	.cols_take = cols_take,
	.dropout = dropout,
	.lora_up = lora_up,
	.cols_take_bf16 = cols_take_bf16,
	.kv_attention_forward = kv_attention_forward,
	.flash_attention_doc_forward = flash_attention_doc_forward,
	.flash_attention_doc_backward = flash_attention_doc_backward,
	.encoder_pos_forward = encoder_pos_forward,
	.encoder_pos_backward = encoder_pos_backward,
	.encoder_pos_forward_bf16 = encoder_pos_forward_bf16,
	/* no tensor cores: the fp32 fused attention */
	.flash_attention_doc_tc_forward = flash_attention_doc_tc_forward,
	.flash_attention_doc_tc_backward = flash_attention_doc_backward,
	.layernorm_forward_bf16out = layernorm_forward_bf16out,
	.rmsnorm_forward_bf16out = rmsnorm_forward_bf16out,
	.gelu_forward_bf16out = gelu_forward_bf16out,
	.swiglu_forward_bf16out = swiglu_forward_bf16out,
	.adamw_states = adamw_states,
	.moe_route_forward = moe_route_forward,
	.moe_route_backward = moe_route_backward,
	.moe_dispatch = moe_dispatch,
	.moe_gather = moe_gather,
	.moe_combine = moe_combine,
	.moe_scatter_dout = moe_scatter_dout,
	.moe_aux_stats = moe_aux_stats,
	.moe_aux_finish = moe_aux_finish,
	.read_sync = read_sync,
	.write_sync = write_sync,
	.dequant_4bit = dequant_4bit,
	.dequant_absmax8 = dequant_absmax8,
	.gelu_backward_bf16out = gelu_backward_bf16out,
	.swiglu_backward_bf16out = swiglu_backward_bf16out,
	.residual_forward_bf16out = residual_forward_bf16out,
	.rope_backward_bf16out = rope_backward_bf16out,
	.flash_attention_doc_tc_backward_bf16out = flash_attention_doc_tc_backward_bf16out,
	.rope_forward_bf16out = rope_forward_bf16out,
	.flash_attention_doc_tc_forward_qkv16 = flash_attention_doc_tc_forward_qkv16,
};
