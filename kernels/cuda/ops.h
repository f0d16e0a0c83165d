/* The CUDA model ops by name: zn_cuda_<op>, with exactly the table's arguments (kernels.h),
 * `stream` being a cudaStream_t (NULL = the legacy default stream). Each op only enqueues
 * work on that stream and returns at once; inputs must stay valid until the stream has run.
 *
 * Semantics match kernels/cpu (kernels/cpu/ops.h): backward ops accumulate into d-inputs
 * and d-weights; crossentropy_backward writes dlogits; attention_backward writes its
 * scratch gradients datt and dpreatt; masked (t2 > t) attention entries are written as 0.
 * Results agree with the CPU within fp32 rounding (tests/test_gpu_kernels.c); every op is
 * deterministic run to run (fixed reduction trees, no atomics; cuBLAS is deterministic on
 * one stream, and across streams with CUBLAS_WORKSPACE_CONFIG=:4096:8 set in the
 * environment, see docs/kernels.md).
 *
 * cuBLAS: one handle per calling thread, created on first use on the device current then,
 * pointed at the op's stream before each call (cublasSetStream). A thread that goes away
 * has its handle destroyed by a thread-exit destructor; zn_cuda_kernels_thread_release()
 * destroys the calling thread's handle now (call it before cudaDeviceReset or before the
 * thread switches devices). Default math mode: fp32 GEMMs, no TF32.
 *
 * Errors: the ops return nothing. A failed launch or cuBLAS call logs one line (op, call,
 * file:line, CUDA's message) and sets a sticky flag; zn_cuda_kernels_error() returns -EIO
 * once after any such failure (and clears the flag), else 0. Faults inside a kernel show up
 * as the stream's error at the next synchronize, as usual with CUDA.
 */
#ifndef ZN_KERNELS_CUDA_OPS_H
#define ZN_KERNELS_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void zn_cuda_encoder_forward(void *stream, float *out, const int *inp, const float *wte,
			     const float *wpe, int B, int T, int C);
void zn_cuda_encoder_backward(void *stream, float *dwte, float *dwpe, const float *dout,
			      const int *inp, int B, int T, int C);
void zn_cuda_layernorm_forward(void *stream, float *out, float *mean, float *rstd,
			       const float *inp, const float *weight, const float *bias, int B,
			       int T, int C);
void zn_cuda_layernorm_backward(void *stream, float *dinp, float *dweight, float *dbias,
				const float *dout, const float *inp, const float *weight,
				const float *mean, const float *rstd, int B, int T, int C);
void zn_cuda_matmul_forward(void *stream, float *out, const float *inp, const float *weight,
			    const float *bias, int B, int T, int C, int OC);
void zn_cuda_matmul_backward(void *stream, float *dinp, float *dweight, float *dbias,
			     const float *dout, const float *inp, const float *weight, int B,
			     int T, int C, int OC);
void zn_cuda_attention_forward(void *stream, float *out, float *preatt, float *att,
			       const float *inp, int B, int T, int C, int NH);
void zn_cuda_attention_backward(void *stream, float *dinp, float *dpreatt, float *datt,
				const float *dout, const float *inp, const float *att, int B,
				int T, int C, int NH);
void zn_cuda_gelu_forward(void *stream, float *out, const float *inp, size_t N);
void zn_cuda_gelu_backward(void *stream, float *dinp, const float *inp, const float *dout,
			   size_t N);
void zn_cuda_residual_forward(void *stream, float *out, const float *inp1, const float *inp2,
			      size_t N);
void zn_cuda_residual_backward(void *stream, float *dinp1, float *dinp2, const float *dout,
			       size_t N);
void zn_cuda_crossentropy_forward(void *stream, float *losses, float *probs,
				  const float *logits, const int *targets, int B, int T, int V,
				  int Vp);
void zn_cuda_crossentropy_backward(void *stream, float *dlogits, const float *probs,
				   const int *targets, float dloss_scale, int B, int T, int V,
				   int Vp);
void zn_cuda_cast_f32_to_bf16(void *stream, uint16_t *out, const float *inp, size_t N);
void zn_cuda_cast_bf16_to_f32(void *stream, float *out, const uint16_t *inp, size_t N);
void zn_cuda_cast_f32_to_f16(void *stream, uint16_t *out, const float *inp, size_t N);
void zn_cuda_cast_f16_to_f32(void *stream, float *out, const uint16_t *inp, size_t N);
void zn_cuda_scale(void *stream, float *out, float s, size_t N);

struct zn_kernel_adamw;
void zn_cuda_adamw(void *stream, float *master, float *m, float *v, uint16_t *out_bf16,
		   const float *grad, const struct zn_kernel_adamw *hp, size_t N);
struct zn_kernel_moments;
struct zn_kernel_span;
void zn_cuda_adamw_states(void *stream, float *master, const struct zn_kernel_moments *mo,
			  uint16_t *out_bf16, const float *grad, const struct zn_kernel_adamw *hp,
			  const struct zn_kernel_span *spans, int span_count, size_t N);
void zn_cuda_grad_sumsq(void *stream, double *sumsq_d, int32_t *nonfinite_d, double *work_d,
			const float *grad, size_t N);

/* Llama-family ops */
void zn_cuda_embedding_forward(void *stream, float *out, const int *inp, const float *wte,
			       int B, int T, int C);
void zn_cuda_embedding_backward(void *stream, float *dwte, const float *dout, const int *inp,
				int B, int T, int C);
void zn_cuda_rmsnorm_forward(void *stream, float *out, float *rstd, const float *inp,
			     const float *weight, float eps, int B, int T, int C);
void zn_cuda_rmsnorm_backward(void *stream, float *dinp, float *dweight, const float *dout,
			      const float *inp, const float *weight, const float *rstd, int B,
			      int T, int C);
void zn_cuda_qk_rmsnorm_forward(void *stream, float *out, float *rstd, const float *inp,
				const float *wq, const float *wk, float eps, int B, int T, int NH,
				int KV, int hd);
void zn_cuda_qk_rmsnorm_backward(void *stream, float *dqkv, float *dwq, float *dwk,
				 const float *inp, const float *wq, const float *wk,
				 const float *rstd, int B, int T, int NH, int KV, int hd);
void zn_cuda_rope_forward(void *stream, float *qkv, const float *inv_freq, const int *pos,
			  int B, int T, int NH, int KV, int hd);
void zn_cuda_rope_backward(void *stream, float *dqkv, const float *inv_freq, const int *pos,
			   int B, int T, int NH, int KV, int hd);
void zn_cuda_swiglu_forward(void *stream, float *out, const float *inp, int B, int T, int IC);
void zn_cuda_swiglu_backward(void *stream, float *dinp, const float *dout, const float *inp,
			     int B, int T, int IC);
void zn_cuda_gqa_attention_forward(void *stream, float *out, float *preatt, float *att,
				   const float *qkv, int B, int T, int NH, int KV, int hd,
				   int window);
void zn_cuda_gqa_attention_backward(void *stream, float *dqkv, float *dpreatt, float *datt,
				    const float *dout, const float *qkv, const float *att, int B,
				    int T, int NH, int KV, int hd, int window);
void zn_cuda_flash_attention_forward(void *stream, float *out, float *lse, const float *qkv,
				     int B, int T, int NH, int KV, int hd, int window);
void zn_cuda_flash_attention_backward(void *stream, float *dqkv, float *drow,
				      const float *dout, const float *qkv, const float *out,
				      const float *lse, int B, int T, int NH, int KV, int hd,
				      int window);
void zn_cuda_flash_attention_doc_forward(void *stream, float *out, float *lse,
					 const float *qkv, const int *pos, int B, int T, int NH,
					 int KV, int hd, int window);
void zn_cuda_flash_attention_doc_backward(void *stream, float *dqkv, float *drow,
					  const float *dout, const float *qkv, const float *out,
					  const float *lse, const int *pos, int B, int T, int NH,
					  int KV, int hd, int window);
void zn_cuda_encoder_pos_forward(void *stream, float *out, const int *inp, const int *pos,
				 const float *wte, const float *wpe, int B, int T, int C);
void zn_cuda_encoder_pos_backward(void *stream, float *dwte, float *dwpe, const float *dout,
				  const int *inp, const int *pos, int B, int T, int C);
void zn_cuda_matmul_forward_bf16(void *stream, float *out, const uint16_t *inp,
				 const uint16_t *weight, const float *bias, int B, int T, int C,
				 int OC);
void zn_cuda_matmul_backward_bf16(void *stream, float *dinp, float *dweight, float *dbias,
				  const uint16_t *dout16, const float *dout, const uint16_t *inp,
				  const uint16_t *weight, int B, int T, int C, int OC);
void zn_cuda_encoder_forward_bf16(void *stream, float *out, const int *inp,
				  const uint16_t *wte, const uint16_t *wpe, int B, int T, int C);
void zn_cuda_embedding_forward_bf16(void *stream, float *out, const int *inp,
				    const uint16_t *wte, int B, int T, int C);
void zn_cuda_encoder_pos_forward_bf16(void *stream, float *out, const int *inp,
				      const int *pos, const uint16_t *wte, const uint16_t *wpe,
				      int B, int T, int C);
void zn_cuda_flash_attention_tc_forward(void *stream, float *out, float *lse,
					const float *qkv, int B, int T, int NH, int KV, int hd,
					int window);
void zn_cuda_flash_attention_tc_backward(void *stream, float *dqkv, float *drow,
					 const float *dout, const float *qkv, const float *out,
					 const float *lse, int B, int T, int NH, int KV, int hd,
					 int window);
void zn_cuda_flash_attention_doc_tc_forward(void *stream, float *out, uint16_t *out16,
					    float *lse, const float *qkv, const int *pos, int B,
					    int T, int NH, int KV, int hd, int window);
void zn_cuda_flash_attention_doc_tc_backward(void *stream, float *dqkv, float *drow,
					     const float *dout, const float *qkv,
					     const float *out, const float *lse, const int *pos,
					     int B, int T, int NH, int KV, int hd, int window);
void zn_cuda_layernorm_forward_bf16out(void *stream, uint16_t *out16, float *mean,
				       float *rstd, const float *inp, const float *weight,
				       const float *bias, int B, int T, int C);
void zn_cuda_rmsnorm_forward_bf16out(void *stream, uint16_t *out16, float *rstd,
				     const float *inp, const float *weight, float eps, int B,
				     int T, int C);
void zn_cuda_gelu_forward_bf16out(void *stream, uint16_t *out16, const float *inp, size_t N);
void zn_cuda_swiglu_forward_bf16out(void *stream, uint16_t *out16, const float *inp, int B,
				    int T, int IC);
void zn_cuda_dequant_4bit(void *stream, float *out32, uint16_t *out16, const uint8_t *packed,
			  const float *absmax, size_t N, int blocksize, int type, int qdtype);
void zn_cuda_dequant_absmax8(void *stream, float *absmax, const uint8_t *q, const float *map,
			     const float *absmax2, const float *offset, size_t N, int blocksize2);
void zn_cuda_gelu_backward_bf16out(void *stream, float *dinp, uint16_t *dinp16,
				   const float *inp, const float *dout, size_t N);
void zn_cuda_swiglu_backward_bf16out(void *stream, float *dinp, uint16_t *dinp16,
				     const float *dout, const float *inp, int B, int T, int IC);
void zn_cuda_residual_forward_bf16out(void *stream, float *out, uint16_t *out16,
				      const float *inp1, const float *inp2, size_t N);
void zn_cuda_rope_backward_bf16out(void *stream, float *dqkv, uint16_t *dqkv16,
				   const float *inv_freq, const int *pos, int B, int T, int NH,
				   int KV, int hd);
void zn_cuda_flash_attention_doc_tc_backward_bf16out(void *stream, float *dqkv,
						     uint16_t *dqkv16, float *drow,
						     const float *dout, const float *qkv,
						     const uint16_t *qkv16, const float *out,
						     const float *lse, const int *pos, int B, int T,
						     int NH, int KV, int hd, int window);
void zn_cuda_rope_forward_bf16out(void *stream, float *qkv, uint16_t *qkv16,
				  const float *inv_freq, const int *pos, int B, int T, int NH,
				  int KV, int hd);
void zn_cuda_flash_attention_doc_tc_forward_qkv16(void *stream, float *out, uint16_t *out16,
						  float *lse, const float *qkv,
						  const uint16_t *qkv16, const int *pos, int B,
						  int T, int NH, int KV, int hd, int window);

/* LoRA (kernels/cuda/lora.cu) */
void zn_cuda_kv_attention_forward(void *stream, float *out, float *kcache, float *vcache,
				  const float *qkv, int pos0, int T, int NH, int KV, int hd,
				  int window);
void zn_cuda_cols_add(void *stream, float *out, const float *inp, float s, int64_t R, int ld,
		      int c0, int n);
void zn_cuda_cols_take(void *stream, float *out, const float *inp, float s, int64_t R, int ld,
		       int c0, int n);
void zn_cuda_dropout(void *stream, float *out, const float *inp, float p, uint64_t seed,
		     size_t N);
void zn_cuda_cols_take_bf16(void *stream, float *out, const uint16_t *inp, float s, int64_t R,
			    int ld, int c0, int n);
void zn_cuda_lora_up(void *stream, float *out, const float *t, const float *w, float s,
		     int64_t R, int k, int ld, int c0, int n);

/* -EIO once after a failed launch or cuBLAS call since the last call, else 0 */
int zn_cuda_kernels_error(void);
/* destroys the calling thread's cuBLAS handle (the next op creates a new one) */
void zn_cuda_kernels_thread_release(void);

#ifdef __cplusplus
}
#endif

/* moe.cu */
void zn_cuda_moe_route_forward(void *stream, int *sel, float *w, float *probs,
			       const float *logits, int N, int E, int K, int norm);
void zn_cuda_moe_route_backward(void *stream, float *dlogits, const float *dw,
				const float *probs, const int *sel, const float *dprob, int N,
				int E, int K, int norm);
void zn_cuda_moe_dispatch(void *stream, int *perm, int *pos, int *offsets, const int *sel,
			  int N, int E, int K);
void zn_cuda_moe_gather(void *stream, float *out, const float *inp, const int *perm, int M,
			int K, int C);
void zn_cuda_moe_combine(void *stream, float *out, const float *y, const int *pos,
			 const int *sel, const float *w, int N, int K, int C, int accumulate);
void zn_cuda_moe_scatter_dout(void *stream, float *dy, float *dw, const float *dout,
			      const float *y, const float *w, const int *perm, int M, int K,
			      int C);
void zn_cuda_moe_aux_stats(void *stream, float *acc, const float *probs, const int *sel,
			   int N, int E, int K);
void zn_cuda_moe_aux_finish(void *stream, float *loss, float *dprob, const float *acc, int E,
			    float ntot, float scale);
void zn_cuda_read_sync(void *stream, void *dst, const void *src, size_t bytes);
void zn_cuda_write_sync(void *stream, void *dst, const void *src, size_t bytes);

#endif
