/* The model ops' table: one entry per forward/backward op of a GPT-2 style model, then
 * the optimizer's device ops (fused AdamW, gradient squared norm), then the Llama family's
 * ops (embedding, RMSNorm, RoPE, SwiGLU, grouped-query attention).
 *
 * Two implementations share these names, argument order and semantics:
 *   zn_kernels_cpu  (kernels/cpu, OpenMP; the reference and the host backend's compute)
 *   zn_kernels_cuda (kernels/cuda, CUDA C + cuBLAS; only when built with CUDA)
 * Arguments: outputs first, then inputs, then sizes (llm.c's order). All tensors are fp32,
 * row-major, contiguous; accumulation is fp32. Backward ops ACCUMULATE (+=) into their
 * d-inputs and d-weights, as llm.c does, so callers zero gradient buffers first.
 *
 * `stream` is the backend's native stream: ignored by the CPU table (it runs synchronously
 * on the calling thread, which for the host device is the stream's worker thread), a
 * cudaStream_t for the CUDA table (the op is enqueued and returns at once).
 *
 * Shapes: B batch, T sequence, C channels, V vocab (Vp = padded vocab row stride), NH heads,
 * OC output channels. matmul weights are [OC, C] (out = inp @ weight^T + bias), as llm.c;
 * the model converts from/to Hugging Face's Conv1D [in, out] layout at load/save.
 */
#ifndef ZN_KERNELS_H
#define ZN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifndef ZN_IGNORE_INDEX
#define ZN_IGNORE_INDEX (-100) /* as zinc.h: a target that is no label */
#endif

/* Hyperparameters of one `adamw` call (src/cpu/adamw.h's struct zn_adamw_params minus the
 * thread count). The op reads them when it is called (enqueued): they may go away after. */
struct zn_kernel_adamw {
	float lr;
	float beta1, beta2;  /* [0, 1) */
	float eps;           /* > 0 */
	float weight_decay;  /* >= 0, decoupled; 0 for a span without decay */
	float grad_scale;    /* > 0 and finite; 1 = none */
	int64_t step;        /* >= 1: the step being taken, for bias correction */
	int32_t l2;          /* 0: AdamW; 1: L2-regularised Adam (weight_decay into the gradient) */
};

/* AdamW's m and v stored compactly (zinc.optimizer_states; src/cpu/adamw.h "compact
 * moments"): states 1 = bf16 (uint16), 2 = int8 (codes, with one fp32 absmax per block of
 * 256 elements: element 0 starts a block); the enum zn_optim_states values. */
struct zn_kernel_moments {
	int32_t states;
	void *m, *v;
	float *m_absmax, *v_absmax;
};

/* Elements [first, first + count) of an adamw_states call take weight_decay. */
struct zn_kernel_span {
	uint64_t first, count;
	float weight_decay;
};
#define ZN_KERNEL_ADAMW_SPANS 16 /* spans per adamw_states call (a layer's tensors) */

/* a target that is not predicted (no loss, no gradient): Hugging Face's -100 label; any
 * negative target is read so */
#define ZN_TARGET_IGNORE (-1)

/* doubles of device scratch `grad_sumsq` needs in work_d (the CUDA reduction's partials) */
#define ZN_KERNEL_SUMSQ_WORK_COUNT 1024

struct zn_kernel_table {
	const char *name; /* "cpu" or "cuda" */

	/* out[B,T,C] = wte[inp[b,t]] + wpe[t] */
	void (*encoder_forward)(void *stream, float *out, const int *inp, const float *wte,
				const float *wpe, int B, int T, int C);
	void (*encoder_backward)(void *stream, float *dwte, float *dwpe, const float *dout,
				 const int *inp, int B, int T, int C);

	/* mean, rstd [B,T] are saved for backward (eps 1e-5); backward: dweight and dbias
	 * both NULL for frozen weights (only dinp) */
	void (*layernorm_forward)(void *stream, float *out, float *mean, float *rstd,
				  const float *inp, const float *weight, const float *bias,
				  int B, int T, int C);
	void (*layernorm_backward)(void *stream, float *dinp, float *dweight, float *dbias,
				   const float *dout, const float *inp, const float *weight,
				   const float *mean, const float *rstd, int B, int T, int C);

	/* out[B,T,OC] = inp[B,T,C] @ weight[OC,C]^T + bias[OC] (bias may be NULL) */
	void (*matmul_forward)(void *stream, float *out, const float *inp, const float *weight,
			       const float *bias, int B, int T, int C, int OC);
	/* dbias may be NULL; dweight NULL: the weight is frozen, only dinp is computed */
	void (*matmul_backward)(void *stream, float *dinp, float *dweight, float *dbias,
				const float *dout, const float *inp, const float *weight,
				int B, int T, int C, int OC);

	/* inp is qkv [B,T,3C]; out [B,T,C]; preatt, att [B,NH,T,T] are scratch saved for
	 * backward (att = causal softmax of q.k/sqrt(hs)). */
	void (*attention_forward)(void *stream, float *out, float *preatt, float *att,
				  const float *inp, int B, int T, int C, int NH);
	void (*attention_backward)(void *stream, float *dinp, float *dpreatt, float *datt,
				   const float *dout, const float *inp, const float *att,
				   int B, int T, int C, int NH);

	/* GELU, tanh approximation, over N elements */
	void (*gelu_forward)(void *stream, float *out, const float *inp, size_t N);
	void (*gelu_backward)(void *stream, float *dinp, const float *inp, const float *dout,
			      size_t N);

	/* out = inp1 + inp2 (N elements); backward adds dout into both */
	void (*residual_forward)(void *stream, float *out, const float *inp1, const float *inp2,
				 size_t N);
	void (*residual_backward)(void *stream, float *dinp1, float *dinp2, const float *dout,
				  size_t N);

	/* Fused softmax + cross-entropy over logits [B,T,Vp] (first V columns are real):
	 * losses[B,T] = -log softmax(logits)[target]; probs [B,T,Vp] saved. A target of
	 * ZN_IGNORE_INDEX (-100: a masked token) has loss 0 and a zero dlogits row.
	 * Backward writes (not accumulates) dlogits = (probs - onehot) * dloss_scale, zero in
	 * padded columns; dloss_scale is typically 1/(B*T). A negative target
	 * (ZN_TARGET_IGNORE) is a token not predicted: loss 0, dlogits row 0. */
	void (*crossentropy_forward)(void *stream, float *losses, float *probs,
				     const float *logits, const int *targets, int B, int T, int V,
				     int Vp);
	void (*crossentropy_backward)(void *stream, float *dlogits, const float *probs,
				      const int *targets, float dloss_scale, int B, int T, int V,
				      int Vp);

	/* casts; bf16 is round-to-nearest-even, NaN stays NaN */
	void (*cast_f32_to_bf16)(void *stream, uint16_t *out, const float *inp, size_t N);
	void (*cast_bf16_to_f32)(void *stream, float *out, const uint16_t *inp, size_t N);

	/* out[i] *= s (used to average gradients, scale losses) */
	void (*scale)(void *stream, float *out, float s, size_t N);

	/* Optimizer ops (added after the model ops; the table's layout is append-only). */

	/* Fused AdamW over a span of N elements, in one pass: reads grad (fp32), master, m, v;
	 * writes master, m, v and, unless out_bf16 is NULL, the new parameters as bf16 (round
	 * to nearest even). Exactly src/cpu/adamw.h's formula and roundings (per-call scalars
	 * in double, per-element fmaf), so both tables give the same bits where the CPU build
	 * has hardware FMA. Weight decay is per call: a caller whose span mixes tensors with
	 * and without decay calls once per tensor span. hp->l2 selects L2-regularised Adam
	 * (adamw.h: g += weight_decay * master before the moments, no decoupled decay). hp must pass zn_adamw_params_check
	 * (the caller checks; the ops do not report errors). Buffers must not overlap. */
	void (*adamw)(void *stream, float *master, float *m, float *v, uint16_t *out_bf16,
		      const float *grad, const struct zn_kernel_adamw *hp, size_t N);

	/* Squared L2 norm of N fp32 gradients, written to device memory: sumsq_d[0] = sum of
	 * grad[i]^2 accumulated in double, nonfinite_d[0] = 1 if any element is inf or NaN
	 * (then sumsq_d[0] is not meaningful) else 0. Deterministic: a fixed reduction tree
	 * that depends only on N (CPU: zn_grad_sumsq's fixed chunks; CUDA: per-thread sums,
	 * block trees, then one block over the partials in order), no float atomics. work_d:
	 * ZN_KERNEL_SUMSQ_WORK_COUNT doubles of device scratch, not used by the CPU table. */
	void (*grad_sumsq)(void *stream, double *sumsq_d, int32_t *nonfinite_d, double *work_d,
			   const float *grad, size_t N);

	/* Llama-family ops (Llama, Qwen2, Mistral; docs/kernels.md). A linear layer, with or
	 * without bias, is matmul above. Shapes: NH query heads, KV key/value heads (NH a
	 * multiple of KV), hd head_dim (even), IC intermediate size. The attention input is one
	 * fused projection qkv [B,T,S], S = (NH + 2*KV)*hd: the NH query heads, then the KV key
	 * heads, then the KV value heads, each head hd contiguous channels (q_proj, k_proj and
	 * v_proj weights stored one after the other are the [S, C] weight of that matmul). */

	/* out[B,T,C] = wte[inp[b,t]] (no position table); backward dwte += */
	void (*embedding_forward)(void *stream, float *out, const int *inp, const float *wte,
				  int B, int T, int C);
	void (*embedding_backward)(void *stream, float *dwte, const float *dout, const int *inp,
				   int B, int T, int C);

	/* RMSNorm (HF LlamaRMSNorm): rstd[B,T] = 1/sqrt(mean(x^2) + eps) saved for backward,
	 * out = (x * rstd) * weight. Backward dinp, dweight += (dweight NULL: frozen, skipped) */
	void (*rmsnorm_forward)(void *stream, float *out, float *rstd, const float *inp,
				const float *weight, float eps, int B, int T, int C);
	void (*rmsnorm_backward)(void *stream, float *dinp, float *dweight, const float *dout,
				 const float *inp, const float *weight, const float *rstd, int B,
				 int T, int C);

	/* RoPE, Hugging Face's rotate_half convention, in place on the NH query and KV key
	 * heads of qkv [B,T,S] (values untouched): with a = pos * inv_freq[i] (fp32), for
	 * i < hd/2: x[i], x[i+hd/2] <- x[i] cos a - x[i+hd/2] sin a, x[i+hd/2] cos a + x[i] sin a.
	 * inv_freq [hd/2] from zn_rope_inv_freq (kernels/rope.h) is HOST memory, read when the
	 * op is called (CUDA passes it as a kernel argument), hd <= ZN_ROPE_MAX_HEAD_DIM;
	 * pos [B,T] positions in the table's memory, or NULL for pos = t. Backward rotates
	 * dqkv's q and k heads back in place (the transpose): the gradient wrt the
	 * pre-rotation q, k. */
	void (*rope_forward)(void *stream, float *qkv, const float *inv_freq, const int *pos,
			     int B, int T, int NH, int KV, int hd);
	void (*rope_backward)(void *stream, float *dqkv, const float *inv_freq, const int *pos,
			      int B, int T, int NH, int KV, int hd);

	/* SwiGLU: inp [B,T,2IC] holds gate (channels 0..IC) then up (IC..2IC), as one matmul
	 * of the stacked gate_proj and up_proj weights gives; out [B,T,IC] = silu(gate) * up
	 * with silu(g) = g / (1 + exp(-g)). Backward dinp += (both halves) */
	void (*swiglu_forward)(void *stream, float *out, const float *inp, int B, int T,
			       int IC);
	void (*swiglu_backward)(void *stream, float *dinp, const float *dout, const float *inp,
				int B, int T, int IC);

	/* Grouped-query causal attention on qkv [B,T,S] (after RoPE): query head h uses key and
	 * value head h / (NH/KV). preatt = q.k / sqrt(hd), att = softmax over the visible keys,
	 * both [B,NH,T,T] saved; out [B,T,NH*hd]. Key t2 is visible from t when t2 <= t and,
	 * with window > 0, t - t2 < window (Mistral's sliding window; 0 = none). Entries not
	 * visible are written 0. Backward: dqkv += ; datt, dpreatt written. */
	void (*gqa_attention_forward)(void *stream, float *out, float *preatt, float *att,
				      const float *qkv, int B, int T, int NH, int KV, int hd,
				      int window);
	void (*gqa_attention_backward)(void *stream, float *dqkv, float *dpreatt, float *datt,
				       const float *dout, const float *qkv, const float *att,
				       int B, int T, int NH, int KV, int hd, int window);

	/* Fused causal attention, the FlashAttention-2 algorithm (docs/kernels.md): the same
	 * qkv [B,T,S] layout and out [B,T,NH*hd] as gqa_attention (GPT-2's qkv [B,T,3C] is
	 * KV = NH, hd = C/NH) and window (0 = none; > 0: key t2 visible from t when
	 * t2 <= t and t - t2 < window, as gqa_attention), and no [T,T] buffer: the forward saves only
	 * lse [B,NH,T], each query row's log-sum-exp of its scaled scores; the backward
	 * recomputes the scores tile by tile from qkv and lse. drow [B,NH,T] is scratch the
	 * backward writes (sum(dout * out) per row). Backward: dqkv += . Deterministic: every
	 * output row is summed by one thread in a fixed tile order, no atomics. */
	void (*flash_attention_forward)(void *stream, float *out, float *lse, const float *qkv,
					int B, int T, int NH, int KV, int hd, int window);
	void (*flash_attention_backward)(void *stream, float *dqkv, float *drow,
					 const float *dout, const float *qkv, const float *out,
					 const float *lse, int B, int T, int NH, int KV, int hd,
					 int window);

	/* fp16 parameters (fp16 training): casts as src/core/dtype.c's (round to nearest even,
	 * subnormals kept, overflow to inf, NaN stays NaN). */
	void (*cast_f32_to_f16)(void *stream, uint16_t *out, const float *inp, size_t N);
	void (*cast_f16_to_f32)(void *stream, float *out, const uint16_t *inp, size_t N);

	/* bf16 compute (--dtype bf16, docs/kernels.md "bf16 compute"): GEMMs on bf16 inputs
	 * with fp32 accumulation and fp32 outputs; weights are the stored bf16 parameters
	 * (no fp32 working copy), activations the caller cast to bf16 (cast_f32_to_bf16).
	 * Biases, dbias and every output stay fp32. */
	/* out[B,T,OC] = inp16[B,T,C] @ weight16[OC,C]^T + bias (bias fp32, may be NULL) */
	void (*matmul_forward_bf16)(void *stream, float *out, const uint16_t *inp,
				    const uint16_t *weight, const float *bias, int B, int T,
				    int C, int OC);
	/* dinp += dout16 @ weight16; dweight += dout16^T @ inp16 (fp32 accumulation into the
	 * fp32 dinp, dweight; dweight NULL: skipped); dbias += column sums of the fp32 dout (dbias, dout may be
	 * NULL together). dout16 is dout rounded to bf16 by the caller. */
	void (*matmul_backward_bf16)(void *stream, float *dinp, float *dweight, float *dbias,
				     const uint16_t *dout16, const float *dout,
				     const uint16_t *inp, const uint16_t *weight, int B, int T,
				     int C, int OC);
	/* encoder_forward / embedding_forward reading bf16 tables; out fp32. The backward ops
	 * do not read the tables: encoder_backward / embedding_backward serve both. */
	void (*encoder_forward_bf16)(void *stream, float *out, const int *inp,
				     const uint16_t *wte, const uint16_t *wpe, int B, int T,
				     int C);
	void (*embedding_forward_bf16)(void *stream, float *out, const int *inp,
				       const uint16_t *wte, int B, int T, int C);

	/* flash_attention_forward/backward on tensor cores (same arguments and outputs):
	 * CUDA multiplies bf16-rounded tiles with fp32 accumulation (FlashAttention-2 mma.sync
	 * kernels for head_dim 32, 64, 96, 128; a WMMA kernel for other head_dims <= 128;
	 * agrees with the fp32 op to bf16 tolerance); the CPU table has no tensor cores and
	 * runs its fp32 flash_attention. The bf16-compute layers use it (docs/kernels.md). */
	void (*flash_attention_tc_forward)(void *stream, float *out, float *lse,
					   const float *qkv, int B, int T, int NH, int KV, int hd,
					   int window);
	void (*flash_attention_tc_backward)(void *stream, float *dqkv, float *drow,
					    const float *dout, const float *qkv, const float *out,
					    const float *lse, int B, int T, int NH, int KV, int hd,
					    int window);

	/* LoRA's ops (src/model/lora, docs/lora.md): column blocks of a row-major [R, ld]
	 * buffer and a seeded dropout. cols_add: out[r, c0 + j] += s * inp[r, j] for j < n
	 * (inp [R, n], out [R, ld]); cols_take: out[r, j] = s * inp[r, c0 + j] (out [R, n],
	 * written; inp [R, ld]). dropout: out[i] = inp[i] / (1 - p) when element i is kept,
	 * else 0 (written); kept: zn_dropout_keep(seed, i, p) of kernels/dropout.h, the same
	 * bits on both tables. */
	void (*cols_add)(void *stream, float *out, const float *inp, float s, int64_t R, int ld,
			 int c0, int n);
	void (*cols_take)(void *stream, float *out, const float *inp, float s, int64_t R, int ld,
			  int c0, int n);
	void (*dropout)(void *stream, float *out, const float *inp, float p, uint64_t seed,
			size_t N);
	/* LoRA's second GEMM with the add as its epilogue: out[r, c0 + j] += s * sum_q
	 * t[r, q] w[j, q] for j < n (t [R, k], w [n, k], out [R, ld]). CUDA: one cuBLAS sgemm
	 * with alpha = s, beta = 1 writing the column block of out in place (ldc = ld): no
	 * [R, n] intermediate and no separate add pass. */
	void (*lora_up)(void *stream, float *out, const float *t, const float *w, float s,
			int64_t R, int k, int ld, int c0, int n);
	/* cols_take from a bf16 matrix: out[r, j] = s * inp16[r, c0 + j] (out fp32 [R, n]) */
	void (*cols_take_bf16)(void *stream, float *out, const uint16_t *inp, float s, int64_t R,
			       int ld, int c0, int n);

	/* Inference with a KV cache (zinc generate, docs/generate.md), batch 1. qkv [T,S] holds
	 * T new tokens at positions pos0 .. pos0+T-1 in gqa_attention's layout (after RoPE);
	 * their key and value heads are first written into kcache, vcache [maxT, KV*hd] at
	 * rows pos0 .. pos0+T-1, then query t attends keys 0 .. pos0+t of the caches (with
	 * window > 0 only those with pos0 + t - t2 < window). out [T, NH*hd]. Every output
	 * row is summed by one thread (CPU) or warp (CUDA) over the keys in order: the same
	 * values as gqa_attention of the whole sequence within fp32 rounding. */
	void (*kv_attention_forward)(void *stream, float *out, float *kcache, float *vcache,
				     const float *qkv, int pos0, int T, int NH, int KV, int hd,
				     int window);

	/* Packed documents (--packing documents, docs/packing.md). pos [B,T] (device memory)
	 * is each token's position in its document: 0 at a document's first token, then
	 * +1 (documents contiguous, so t - pos[t], the start of t's document, never
	 * decreases along a row); NULL is the plain op (pos = t).
	 * flash_attention_doc: flash_attention with key t2 visible from t only when also
	 * t - pos[t] <= t2 (attention stays inside a document).
	 * encoder_pos: out[B,T,C] = wte[inp[b,t]] + wpe[pos[b,t]]; backward dwte, dwpe +=
	 * (deterministic: each element summed in (b, t) order). */
	void (*flash_attention_doc_forward)(void *stream, float *out, float *lse,
					    const float *qkv, const int *pos, int B, int T,
					    int NH, int KV, int hd, int window);
	void (*flash_attention_doc_backward)(void *stream, float *dqkv, float *drow,
					     const float *dout, const float *qkv,
					     const float *out, const float *lse, const int *pos,
					     int B, int T, int NH, int KV, int hd, int window);
	void (*encoder_pos_forward)(void *stream, float *out, const int *inp, const int *pos,
				    const float *wte, const float *wpe, int B, int T, int C);
	void (*encoder_pos_backward)(void *stream, float *dwte, float *dwpe, const float *dout,
				     const int *inp, const int *pos, int B, int T, int C);
	/* encoder_pos_forward reading bf16 tables (bf16 compute with packed documents);
	 * pos NULL: encoder_forward_bf16. The backward is encoder_pos_backward. */
	void (*encoder_pos_forward_bf16)(void *stream, float *out, const int *inp,
					 const int *pos, const uint16_t *wte,
					 const uint16_t *wpe, int B, int T, int C);

	/* flash_attention_doc_forward/backward on tensor cores (same arguments and outputs;
	 * pos NULL: flash_attention_tc_forward/backward): CUDA's FlashAttention-2 kernels for
	 * head_dim 32, 64, 96, 128 (bf16 products, fp32 softmax and accumulators), the fp32
	 * ops for other head_dims (not the WMMA kernel); the CPU table runs its fp32 flash_attention_doc. The
	 * bf16-compute layers (GPT-2, Llama family) run their attention through these
	 * (docs/kernels.md). out16 (NULL: none) also receives out rounded to bf16 (exactly
	 * cast_f32_to_bf16 of out), the next GEMM's input, without a separate cast pass. */
	void (*flash_attention_doc_tc_forward)(void *stream, float *out, uint16_t *out16,
					       float *lse, const float *qkv, const int *pos, int B,
					       int T, int NH, int KV, int hd, int window);
	void (*flash_attention_doc_tc_backward)(void *stream, float *dqkv, float *drow,
						const float *dout, const float *qkv,
						const float *out, const float *lse, const int *pos,
						int B, int T, int NH, int KV, int hd, int window);

	/* bf16 activations (docs/kernels.md "bf16 compute"): the forward ops whose output
	 * only feeds a bf16 GEMM, writing that output as bf16: exactly the fp32 op followed
	 * by cast_f32_to_bf16 of its output (the same bits), without the fp32 output buffer
	 * or the cast pass. The saved statistics (mean, rstd) stay fp32. */
	void (*layernorm_forward_bf16out)(void *stream, uint16_t *out16, float *mean,
					  float *rstd, const float *inp, const float *weight,
					  const float *bias, int B, int T, int C);
	void (*rmsnorm_forward_bf16out)(void *stream, uint16_t *out16, float *rstd,
					const float *inp, const float *weight, float eps, int B,
					int T, int C);
	void (*gelu_forward_bf16out)(void *stream, uint16_t *out16, const float *inp, size_t N);
	void (*swiglu_forward_bf16out)(void *stream, uint16_t *out16, const float *inp, int B,
				       int T, int IC);
	/* adamw with compact moments (mo->states bf16 or int8): src/cpu/adamw.h's
	 * zn_adamw_step_states, the same bits where the CPU build has hardware FMA. bf16:
	 * each moment widened, updated, rounded to nearest even. int8: one pass per block of
	 * 256 (widen through the dynamic maps, update with the fresh fp32 m and v, new absmax,
	 * nearest code, m's sign kept; an element with an inf or NaN gradient gets m = v = 0
	 * and keeps its weight; the rest of N's last block becomes 0). Weight decay per
	 * element: spans[0 .. span_count) (at most ZN_KERNEL_ADAMW_SPANS) tile [0, N);
	 * hp->weight_decay is not read. hp and the spans must pass the CPU checks (the caller
	 * checks; the ops report nothing). */
	void (*adamw_states)(void *stream, float *master, const struct zn_kernel_moments *mo,
			     uint16_t *out_bf16, const float *grad, const struct zn_kernel_adamw *hp,
			     const struct zn_kernel_span *spans, int span_count, size_t N);

	/* Mixture of experts (kernels/cpu/moe.c; docs/kernels.md "mixture of experts"): N
	 * tokens, E experts, K experts per token, M = N K token slots (slot t K + k).
	 * route_forward: probs [N,E] = softmax of logits [N,E] in fp32, sel [N,K] the K
	 * largest (descending, the lower expert first on a tie), w [N,K] their probabilities,
	 * divided by their sum when norm. route_backward: dlogits [N,E] from dw [N,K] through
	 * the weights and the softmax, plus dprob [E] (NULL: none) on every token's
	 * probabilities (the load-balancing loss). dispatch: the slots grouped by expert,
	 * stably: perm [M] (sorted position -> slot), pos [M] (slot -> sorted position),
	 * offsets [E+1] (expert e's rows are [offsets[e], offsets[e+1])). gather: out [M,C]
	 * row i = inp row perm[i] / K. combine: out [N,C] (= 0, or += when accumulate) plus,
	 * over the token's slots by ascending expert, w (NULL: 1) times y's row pos[slot].
	 * scatter_dout: dy [M,C] row i = w[perm[i]] dout row perm[i] / K, dw[perm[i]] = that
	 * row of dout . y row i. aux_stats: acc [2E] += per expert the slots routed to it,
	 * then the sum of its probabilities over the tokens. Deterministic: fixed orders, no
	 * atomics. */
	void (*moe_route_forward)(void *stream, int *sel, float *w, float *probs,
				  const float *logits, int N, int E, int K, int norm);
	void (*moe_route_backward)(void *stream, float *dlogits, const float *dw,
				   const float *probs, const int *sel, const float *dprob, int N,
				   int E, int K, int norm);
	void (*moe_dispatch)(void *stream, int *perm, int *pos, int *offsets, const int *sel,
			     int N, int E, int K);
	void (*moe_gather)(void *stream, float *out, const float *inp, const int *perm, int M,
			   int K, int C);
	void (*moe_combine)(void *stream, float *out, const float *y, const int *pos,
			    const int *sel, const float *w, int N, int K, int C, int accumulate);
	void (*moe_scatter_dout)(void *stream, float *dy, float *dw, const float *dout,
				 const float *y, const float *w, const int *perm, int M, int K,
				 int C);
	void (*moe_aux_stats)(void *stream, float *acc, const float *probs, const int *sel,
			      int N, int E, int K);
	/* the load-balancing loss from acc [2E] summed over ntot tokens (every MoE layer's):
	 * loss[0] = E sum_e (acc[e] / ntot) (acc[E + e] / ntot) (loss NULL: not written), and
	 * the gradient of scale x that loss per probability, dprob[e] = scale E acc[e] / ntot^2
	 * (dprob NULL: not written) */
	void (*moe_aux_finish)(void *stream, float *loss, float *dprob, const float *acc, int E,
			       float ntot, float scale);
	/* bytes of device memory src into host memory dst once the stream's work before it
	 * is done; the calling thread waits (an MoE layer's expert row counts, which size its
	 * per-expert GEMMs) */
	void (*read_sync)(void *stream, void *dst, const void *src, size_t bytes);
	/* bytes of host memory src into device memory dst once the stream's work before it
	 * is done; the calling thread waits until the copy is complete, so src may be reused
	 * at once (frozen experts fetched per routed expert, moe.h zn_moe_source) */
	void (*write_sync)(void *stream, void *dst, const void *src, size_t bytes);

	/* Qwen3's q_norm and k_norm (HF Qwen3RMSNorm over head_dim, before RoPE): in qkv
	 * [B,T,S] (the NH query heads, the KV key heads, the KV value heads, hd channels
	 * each) every query head is RMS-normalized with weight wq [hd] and every key head
	 * with wk [hd], as rmsnorm_forward does a row of hd channels; out gets them and a
	 * copy of the value heads (out may not alias inp); rstd [B,T,NH+KV] (per token, the
	 * query heads then the key heads). Backward in place: dqkv, the gradient wrt out,
	 * becomes the gradient wrt inp on the q and k heads (the v heads untouched); dwq, dwk
	 * += (NULL: frozen, skipped), summed over tokens and heads. */
	void (*qk_rmsnorm_forward)(void *stream, float *out, float *rstd, const float *inp,
				   const float *wq, const float *wk, float eps, int B, int T,
				   int NH, int KV, int hd);
	void (*qk_rmsnorm_backward)(void *stream, float *dqkv, float *dwq, float *dwk,
				    const float *inp, const float *wq, const float *wk,
				    const float *rstd, int B, int T, int NH, int KV, int hd);

	/* A 4-bit frozen base (bitsandbytes' NF4 / FP4, docs/qlora.md), dequantized into the
	 * working copy as bitsandbytes' dequantize_4bit: element i is code[q_i] x
	 * absmax[i / blocksize] in fp32, q_i the high nibble of packed[i / 2] for even i and
	 * the low one for odd i, code NF4's table (type 0) or FP4's (type 1); the product is
	 * rounded to qdtype (0 fp32, 1 bf16, 2 fp16: the quant state's dtype, as the kernel
	 * writes it) and stored as fp32 into out32 or as bf16 into out16 (the other NULL). */
	void (*dequant_4bit)(void *stream, float *out32, uint16_t *out16, const uint8_t *packed,
			     const float *absmax, size_t N, int blocksize, int type, int qdtype);
	/* bitsandbytes' nested absmax (dequantize_blockwise, then + offset, fp32):
	 * absmax[i] = map[q[i]] * absmax2[i / blocksize2] + *offset, map 256 floats; every
	 * pointer the device's (offset is one float of the stored extent). */
	void (*dequant_absmax8)(void *stream, float *absmax, const uint8_t *q, const float *map,
				const float *absmax2, const float *offset, size_t N,
				int blocksize2);
	/* bf16 output gradients (docs/kernels.md "bf16 compute"): the backward ops whose
	 * result is a bf16 GEMM backward's dout, writing beside their fp32 result (which later
	 * ops and dbias still read) its bf16 copy: exactly the fp32 op followed by
	 * cast_f32_to_bf16 of that result (the same bits), without the cast pass. The fp32
	 * result is the op's (gelu_backward and swiglu_backward accumulate into dinp, the copy
	 * is of dinp after the sum). residual_forward_bf16out: out = inp1 + inp2 and out16;
	 * rope_backward_bf16out: rope_backward in place on dqkv, then dqkv16 [B,T,S] of every
	 * channel (the value heads, which RoPE leaves, too); flash_attention_doc_tc_backward_
	 * bf16out: flash_attention_doc_tc_backward, then dqkv16 [B,T,S] of the whole dqkv
	 * (dqkv16 NULL: none); its qkv16 as flash_attention_doc_tc_forward_qkv16's below. */
	void (*gelu_backward_bf16out)(void *stream, float *dinp, uint16_t *dinp16,
				      const float *inp, const float *dout, size_t N);
	void (*swiglu_backward_bf16out)(void *stream, float *dinp, uint16_t *dinp16,
					const float *dout, const float *inp, int B, int T, int IC);
	void (*residual_forward_bf16out)(void *stream, float *out, uint16_t *out16,
					 const float *inp1, const float *inp2, size_t N);
	void (*rope_backward_bf16out)(void *stream, float *dqkv, uint16_t *dqkv16,
				      const float *inv_freq, const int *pos, int B, int T, int NH,
				      int KV, int hd);
	void (*flash_attention_doc_tc_backward_bf16out)(void *stream, float *dqkv,
							uint16_t *dqkv16, float *drow,
							const float *dout, const float *qkv,
							const uint16_t *qkv16, const float *out,
							const float *lse, const int *pos, int B,
							int T, int NH, int KV, int hd, int window);

	/* bf16 q/k/v in memory (docs/kernels.md "bf16 compute"): rope_forward_bf16out is
	 * rope_forward in place on qkv, then qkv16 [B,T,S] = cast_f32_to_bf16 of every channel
	 * of the result (the value heads too); flash_attention_doc_tc_forward_qkv16 is
	 * flash_attention_doc_tc_forward with qkv16 (NULL: none) holding exactly
	 * cast_f32_to_bf16(qkv), the caller's promise: CUDA's FlashAttention-2 kernels copy
	 * their q/k/v tiles from it (cp.async, 16 bytes at a time) instead of rounding the
	 * fp32 qkv as they load it, the same tiles and so the same results; other head_dims
	 * and the CPU table read qkv. */
	void (*rope_forward_bf16out)(void *stream, float *qkv, uint16_t *qkv16,
				     const float *inv_freq, const int *pos, int B, int T, int NH,
				     int KV, int hd);
	void (*flash_attention_doc_tc_forward_qkv16)(void *stream, float *out, uint16_t *out16,
						     float *lse, const float *qkv,
						     const uint16_t *qkv16, const int *pos, int B,
						     int T, int NH, int KV, int hd, int window);
};

extern const struct zn_kernel_table zn_kernels_cpu;

#endif
