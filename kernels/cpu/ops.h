/* The CPU model ops by name: zn_cpu_<op>, same arguments as the table in kernels/kernels.h
 * minus `stream` (the CPU runs synchronously on the calling thread).
 *
 * These are the reference every other backend is tested against and the host device's
 * compute. Semantics are the table's (kernels.h); in short:
 *   - outputs first, then inputs, then sizes; all tensors fp32, row-major, contiguous;
 *   - backward ops ACCUMULATE (+=) into d-inputs and d-weights (zero them first), except
 *     crossentropy_backward, which writes dlogits, and attention_backward's scratch
 *     gradients datt and dpreatt, which are written too (their old contents never matter);
 *   - masked (t2 > t) entries of attention's preatt, att, dpreatt, datt are written as 0.
 *
 * Determinism: every result is the same run to run and independent of the OpenMP thread
 * count: each output element is reduced by one thread in a fixed order (weight gradients
 * are split across threads by channel, never by batch position).
 *
 * Threads: ops use OpenMP over their outer loop when the work is large enough. matmul cuts
 * the product into fixed tiles, each one single-threaded OpenBLAS cblas_sgemm taken by an
 * OpenMP thread; it calls openblas_set_num_threads(1) (process-wide) first, so OpenBLAS's
 * own pool never runs inside an OpenMP team. Several host streams may run ops at once: each
 * gets its own OpenMP team (OMP_NUM_THREADS each), and the cores are shared.
 *
 * Usage:
 *     zn_cpu_matmul_forward(out, inp, weight, bias, B, T, C, OC);
 */
#ifndef ZN_KERNELS_CPU_OPS_H
#define ZN_KERNELS_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

/* eps of layernorm_forward */
#define ZN_LAYERNORM_EPS 1e-5f

void zn_cpu_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
			    int B, int T, int C);
void zn_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
			     int B, int T, int C);

void zn_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
			      const float *weight, const float *bias, int B, int T, int C);
void zn_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
			       const float *inp, const float *weight, const float *mean,
			       const float *rstd, int B, int T, int C);

/* BLAS (cblas_sgemm) versions: the table's */
void zn_cpu_matmul_forward(float *out, const float *inp, const float *weight,
			   const float *bias, int B, int T, int C, int OC);
void zn_cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
			    const float *inp, const float *weight, int B, int T, int C, int OC);
/* plain-loop versions (same semantics), kept for tests and as a readable reference */
void zn_cpu_matmul_forward_loop(float *out, const float *inp, const float *weight,
				const float *bias, int B, int T, int C, int OC);
void zn_cpu_matmul_backward_loop(float *dinp, float *dweight, float *dbias, const float *dout,
				 const float *inp, const float *weight, int B, int T, int C,
				 int OC);

/* dbias[o] += sum over the BT rows of dout[., o] (threads split the channels) */
void zn_cpu_matmul_backward_bias(float *dbias, const float *dout, long BT, int OC);

/* bf16 compute (kernels/cpu/matmul_bf16.c): bf16 GEMM inputs, fp32 accumulation and
 * outputs; the table's matmul_forward_bf16 / matmul_backward_bf16 / encoder_forward_bf16 /
 * embedding_forward_bf16 (kernels.h). */
void zn_cpu_matmul_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight,
				const float *bias, int B, int T, int C, int OC);
void zn_cpu_matmul_backward_bf16(float *dinp, float *dweight, float *dbias,
				 const uint16_t *dout16, const float *dout, const uint16_t *inp,
				 const uint16_t *weight, int B, int T, int C, int OC);
void zn_cpu_encoder_forward_bf16(float *out, const int *inp, const uint16_t *wte,
				 const uint16_t *wpe, int B, int T, int C);
/* pos [B,T] (packed documents) or NULL: t */
void zn_cpu_encoder_pos_forward_bf16(float *out, const int *inp, const int *pos,
				     const uint16_t *wte, const uint16_t *wpe, int B, int T,
				     int C);
void zn_cpu_embedding_forward_bf16(float *out, const int *inp, const uint16_t *wte, int B,
				   int T, int C);
/* logs "op: out of memory for its conversion buffers" (the op's output is then invalid) */
void zn_cpu_kernel_oom(const char *op);

void zn_cpu_attention_forward(float *out, float *preatt, float *att, const float *inp, int B,
			      int T, int C, int NH);
void zn_cpu_attention_backward(float *dinp, float *dpreatt, float *datt, const float *dout,
			       const float *inp, const float *att, int B, int T, int C, int NH);

void zn_cpu_gelu_forward(float *out, const float *inp, size_t N);
void zn_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N);

void zn_cpu_residual_forward(float *out, const float *inp1, const float *inp2, size_t N);
void zn_cpu_residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N);

void zn_cpu_crossentropy_forward(float *losses, float *probs, const float *logits,
				 const int *targets, int B, int T, int V, int Vp);
void zn_cpu_crossentropy_backward(float *dlogits, const float *probs, const int *targets,
				  float dloss_scale, int B, int T, int V, int Vp);

void zn_cpu_cast_f32_to_bf16(uint16_t *out, const float *inp, size_t N);
void zn_cpu_cast_bf16_to_f32(float *out, const uint16_t *inp, size_t N);
void zn_cpu_cast_f32_to_f16(uint16_t *out, const float *inp, size_t N);
void zn_cpu_cast_f16_to_f32(float *out, const uint16_t *inp, size_t N);

void zn_cpu_scale(float *out, float s, size_t N);

/* Optimizer ops (kernels.h): zn_adamw_step and zn_grad_sumsq of src/cpu/adamw.h. */
struct zn_kernel_adamw;
void zn_cpu_adamw(float *master, float *m, float *v, uint16_t *out_bf16, const float *grad,
		  const struct zn_kernel_adamw *hp, size_t N);
struct zn_kernel_moments;
struct zn_kernel_span;
void zn_cpu_adamw_states(float *master, const struct zn_kernel_moments *mo, uint16_t *out_bf16,
			 const float *grad, const struct zn_kernel_adamw *hp,
			 const struct zn_kernel_span *spans, int span_count, size_t N);
void zn_cpu_grad_sumsq(double *sumsq, int32_t *nonfinite, const float *grad, size_t N);

/* Llama-family ops (kernels.h): embedding, RMSNorm, RoPE, SwiGLU, grouped-query attention */
void zn_cpu_embedding_forward(float *out, const int *inp, const float *wte, int B, int T,
			      int C);
void zn_cpu_embedding_backward(float *dwte, const float *dout, const int *inp, int B, int T,
			       int C);
void zn_cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
			    float eps, int B, int T, int C);
void zn_cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
			     const float *weight, const float *rstd, int B, int T, int C);
void zn_cpu_qk_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *wq,
			       const float *wk, float eps, int B, int T, int NH, int KV, int hd);
void zn_cpu_qk_rmsnorm_backward(float *dqkv, float *dwq, float *dwk, const float *inp,
				const float *wq, const float *wk, const float *rstd, int B,
				int T, int NH, int KV, int hd);
void zn_cpu_rope_forward(float *qkv, const float *inv_freq, const int *pos, int B, int T,
			 int NH, int KV, int hd);
void zn_cpu_rope_backward(float *dqkv, const float *inv_freq, const int *pos, int B, int T,
			  int NH, int KV, int hd);
void zn_cpu_swiglu_forward(float *out, const float *inp, int B, int T, int IC);
void zn_cpu_swiglu_backward(float *dinp, const float *dout, const float *inp, int B, int T,
			    int IC);
void zn_cpu_gqa_attention_forward(float *out, float *preatt, float *att, const float *qkv,
				  int B, int T, int NH, int KV, int hd, int window);
void zn_cpu_gqa_attention_backward(float *dqkv, float *dpreatt, float *datt, const float *dout,
				   const float *qkv, const float *att, int B, int T, int NH,
				   int KV, int hd, int window);

/* Fused causal attention (FlashAttention-2; kernels/cpu/flash_attention.c): query and key
 * rows per tile of the forward and backward passes. */
#define ZN_FLASH_TILE 32
void zn_cpu_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T,
				    int NH, int KV, int hd, int window);
void zn_cpu_flash_attention_backward(float *dqkv, float *drow, const float *dout,
				     const float *qkv, const float *out, const float *lse, int B,
				     int T, int NH, int KV, int hd, int window);
/* Packed documents (docs/packing.md): as above with key t2 visible from t only when
 * t - pos[t] <= t2 (t's document); pos [B,T] or NULL (plain causal). */
void zn_cpu_flash_attention_doc_forward(float *out, float *lse, const float *qkv,
					const int *pos, int B, int T, int NH, int KV, int hd,
					int window);
void zn_cpu_flash_attention_doc_backward(float *dqkv, float *drow, const float *dout,
					 const float *qkv, const float *out, const float *lse,
					 const int *pos, int B, int T, int NH, int KV, int hd,
					 int window);
/* bf16 activations (bf16out.c): the fp32 op, then zn_cpu_cast_f32_to_bf16 of its output,
 * through a bounded buffer of whole rows (the same bits as the two calls) */
void zn_cpu_layernorm_forward_bf16out(uint16_t *out16, float *mean, float *rstd,
				      const float *inp, const float *weight, const float *bias,
				      int B, int T, int C);
void zn_cpu_rmsnorm_forward_bf16out(uint16_t *out16, float *rstd, const float *inp,
				    const float *weight, float eps, int B, int T, int C);
void zn_cpu_gelu_forward_bf16out(uint16_t *out16, const float *inp, size_t N);
void zn_cpu_swiglu_forward_bf16out(uint16_t *out16, const float *inp, int B, int T, int IC);
/* bf16 output gradients (bf16out.c): the fp32 op, then zn_cpu_cast_f32_to_bf16 of its
 * whole fp32 result into the bf16 copy (dqkv16: every channel of [B,T,S]) */
void zn_cpu_gelu_backward_bf16out(float *dinp, uint16_t *dinp16, const float *inp,
				  const float *dout, size_t N);
void zn_cpu_swiglu_backward_bf16out(float *dinp, uint16_t *dinp16, const float *dout,
				    const float *inp, int B, int T, int IC);
void zn_cpu_residual_forward_bf16out(float *out, uint16_t *out16, const float *inp1,
				     const float *inp2, size_t N);
void zn_cpu_rope_backward_bf16out(float *dqkv, uint16_t *dqkv16, const float *inv_freq,
				  const int *pos, int B, int T, int NH, int KV, int hd);
void zn_cpu_flash_attention_doc_backward_bf16out(float *dqkv, uint16_t *dqkv16, float *drow,
						 const float *dout, const float *qkv,
						 const float *out, const float *lse,
						 const int *pos, int B, int T, int NH, int KV,
						 int hd, int window);
/* rope_forward, then qkv16 = the cast of every channel of qkv [B,T,S] */
void zn_cpu_rope_forward_bf16out(float *qkv, uint16_t *qkv16, const float *inv_freq,
				 const int *pos, int B, int T, int NH, int KV, int hd);

/* The embedding backward's scatter-add (segment.c): dw[key[p], c] += dout[p, c] for
 * p < BT, c < C, each dw element summed by one thread in row order (the serial walk's
 * bits, any thread count), through zn_cpu_sort_rows_by_key's segments. */
void zn_cpu_segment_add_rows(float *dw, const float *dout, const int *key, long BT, int C);
/* order[0..n) = the rows 0..n-1 sorted by key[row], equal keys in increasing row (a
 * stable sort): the segments are the runs of equal key[order[i]]. Returns 0, -ENOMEM, or
 * -EINVAL when n > INT32_MAX. */
int zn_cpu_sort_rows_by_key(int *order, const int *key, long n);

/* encoder with positions: out = wte[inp] + wpe[pos[b,t]] (pos NULL: t) */
void zn_cpu_encoder_pos_forward(float *out, const int *inp, const int *pos, const float *wte,
				const float *wpe, int B, int T, int C);
void zn_cpu_encoder_pos_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
				 const int *pos, int B, int T, int C);

/* LoRA (kernels/cpu/lora.c) */
void zn_cpu_cols_add(float *out, const float *inp, float s, int64_t R, int ld, int c0, int n);
void zn_cpu_cols_take(float *out, const float *inp, float s, int64_t R, int ld, int c0, int n);
void zn_cpu_cols_take_bf16(float *out, const uint16_t *inp, float s, int64_t R, int ld, int c0,
			   int n);
void zn_cpu_lora_up(float *out, const float *t, const float *w, float s, int64_t R, int k,
		    int ld, int c0, int n);
void zn_cpu_dropout(float *out, const float *inp, float p, uint64_t seed, size_t N);

/* KV-cache attention for inference (kernels/cpu/kv_attention.c) */
void zn_cpu_kv_attention_forward(float *out, float *kcache, float *vcache, const float *qkv,
				 int pos0, int T, int NH, int KV, int hd, int window);

/* mixture of experts (moe.c; kernels.h) */
void zn_cpu_moe_route_forward(int *sel, float *w, float *probs, const float *logits, int N,
			      int E, int K, int norm);
void zn_cpu_moe_route_backward(float *dlogits, const float *dw, const float *probs,
			       const int *sel, const float *dprob, int N, int E, int K, int norm);
void zn_cpu_moe_dispatch(int *perm, int *pos, int *offsets, const int *sel, int N, int E,
			 int K);
void zn_cpu_moe_gather(float *out, const float *inp, const int *perm, int M, int K, int C);
void zn_cpu_moe_combine(float *out, const float *y, const int *pos, const int *sel,
			const float *w, int N, int K, int C, int accumulate);
void zn_cpu_moe_scatter_dout(float *dy, float *dw, const float *dout, const float *y,
			     const float *w, const int *perm, int M, int K, int C);
void zn_cpu_moe_aux_stats(float *acc, const float *probs, const int *sel, int N, int E, int K);
void zn_cpu_moe_aux_finish(float *loss, float *dprob, const float *acc, int E, float ntot,
			   float scale);
/* 4-bit frozen base (kernels.h dequant_4bit, dequant_absmax8; quant4.c) */
void zn_cpu_dequant_4bit(float *out32, uint16_t *out16, const uint8_t *packed,
			 const float *absmax, size_t N, int blocksize, int type, int qdtype);
void zn_cpu_dequant_absmax8(float *absmax, const uint8_t *q, const float *map,
			    const float *absmax2, const float *offset, size_t N, int blocksize2);

#endif
