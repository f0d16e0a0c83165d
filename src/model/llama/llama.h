/* Llama family (Llama, Qwen2, Mistral, Qwen3) as an implementation of the model interface
 * (src/model/model.h), built from the kernel table's Llama ops (kernels/kernels.h).
 *
 * Layers (layer_count = L + 2), one flat fp32 buffer each, Hugging Face names:
 *   0        ZN_LLAMA_LAYER_EMBED  model.embed_tokens.weight [V, H]
 *   1..L     ZN_LLAMA_LAYER_BLOCK  model.layers.N.input_layernorm.weight [H],
 *                                  self_attn.q_proj, k_proj, v_proj .weight (back to back:
 *                                  together the [S, H] weight of one matmul, S = (NH+2KV)D),
 *                                  their biases back to back when qkv_bias,
 *                                  self_attn.q_norm.weight, k_norm.weight [D] when qk_norm,
 *                                  self_attn.o_proj.weight [H, NH*D] (+ .bias when o_bias),
 *                                  post_attention_layernorm.weight [H],
 *                                  mlp.gate_proj, up_proj .weight (back to back: [2I, H]),
 *                                  mlp.down_proj.weight [H, I]
 *                                  or, a sparse block (Mixtral, Qwen3-MoE: llama_moe.c), in
 *                                  place of the three: the router ...gate.weight [E, H],
 *                                  mlp.experts.gate_up_proj [E 2IE, H] and
 *                                  mlp.experts.down_proj [E H, IE] (transformers 5's fused
 *                                  experts; checkpoints name each expert's tensors:
 *                                  zn_tensor_desc.parts, model.h)
 *   L + 1    ZN_LLAMA_LAYER_FINAL  model.norm.weight [H], lm_head.weight [V, H] (untied);
 *                                  tied: no lm_head, tied_layer 0 (embed_tokens).
 * All weights are [out, in] as torch.nn.Linear (no transpose), no vocabulary padding.
 * Decay on 2-D tensors only. Init: matrices normal(0, 0.02) (HF initializer_range),
 * biases 0, norms 1; each element a pure function of (seed, layer, tensor, element).
 *
 * Block: h = rmsnorm(x); qkv = h Wqkv^T (+b); [qk_norm: every q head rmsnorm(., q_norm),
 *        every k head rmsnorm(., k_norm), over D]; rope(q, k); x += gqa_attn(qkv) Wo^T (+bo);
 *        h = rmsnorm(x); x += swiglu(h Wgu^T) Wd^T.
 *        (sparse: x += the MoE block of h, model/moe/moe.h; the load-balancing loss's
 *        statistics into io->aux)
 * Final: losses = cross-entropy(rmsnorm(x) lm_head^T, targets).
 * RoPE frequencies are kept in the (host) configuration: zn_llama_config_from_hf and
 * zn_llama_config_validate fill inv_freq.
 */
#ifndef ZN_MODEL_LLAMA_H
#define ZN_MODEL_LLAMA_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"
#include "model/hf_config.h"
#include "model/model.h"
#include "rope.h"

#define ZN_LLAMA_DEFAULT_SEQ 2048
#define ZN_LLAMA_MAX_EXPERTS 512
/* the most tensors a layer of the family describes (a block with q/k/v and o biases and
 * q/k norms: 15) */
#define ZN_LLAMA_MAX_TENSORS 16

struct zn_llama_config {
	int layers;       /* L */
	int hidden;       /* H */
	int intermediate; /* I */
	int heads;        /* NH */
	int kv_heads;     /* KV, NH % KV == 0 */
	int head_dim;     /* D, even, <= ZN_ROPE_MAX_HEAD_DIM */
	int vocab;        /* V */
	int seq;          /* longest T (the training length; see zn_llama_config_from_hf) */
	int64_t max_positions; /* config.json's max_position_embeddings (0: seq) */
	int window;       /* Mistral sliding_window, 0 none; seq must be <= window */
	float eps;        /* rms_norm_eps */
	bool qkv_bias;    /* q, k, v biases (Llama attention_bias, Qwen2 always) */
	bool o_bias;      /* o_proj bias (Llama attention_bias) */
	bool qk_norm;     /* Qwen3's q_norm / k_norm: RMSNorm of each q and k head over D */
	bool tied;        /* tie_word_embeddings */
	/* A mixture of experts (Mixtral; Qwen3-MoE, which has qk_norm): experts 0 is dense.
	 * Block n's MLP is the sparse block (model/moe/moe.h) unless bit n of mlp_only is set
	 * or (n + 1) % sparse_step != 0 (zn_llama_layer_is_moe) */
	int experts;          /* E */
	int experts_per_tok;  /* K <= E */
	int moe_intermediate; /* an expert's intermediate size */
	int sparse_step;      /* decoder_sparse_step, >= 1 */
	bool norm_topk;       /* the top-k weights divided by their sum */
	bool aux;             /* output_router_logits: the load-balancing loss is added */
	float aux_coef;       /* router_aux_loss_coef (--router-aux-loss-coef) */
	uint8_t mlp_only[ZN_HF_MAX_MOE_LAYERS / 8];
	struct zn_rope_params rope;
	float inv_freq[ZN_ROPE_MAX_HEAD_DIM / 2]; /* filled by zn_llama_config_validate */
};

/* The model_types the family reads (zn_hf_config.type; its registry entry's types[]) */
enum zn_llama_type {
	ZN_LLAMA_LLAMA = 0,
	ZN_LLAMA_QWEN2 = 1,
	ZN_LLAMA_MISTRAL = 2,
	ZN_LLAMA_QWEN3 = 3,
	ZN_LLAMA_MIXTRAL = 4,
	ZN_LLAMA_QWEN3_MOE = 5,
};

enum zn_llama_layer_kind {
	ZN_LLAMA_LAYER_EMBED = 0,
	ZN_LLAMA_LAYER_BLOCK = 1,
	ZN_LLAMA_LAYER_FINAL = 2,
};

/* Presets (llama_presets.c), the shapes of the published config.json files (tests/hf/):
 *   llama-tiny      2 layers, hidden 64, intermediate 128, 4 heads, 2 kv heads (GQA),
 *                   head_dim 16, vocab 256, seq 64, eps 1e-5, theta 10000, untied (tests)
 *   tinyllama-1.1b, llama-3.2-1b, llama-3.2-3b, llama-3-8b, llama-3-70b, llama-2-7b,
 *   llama-2-13b     as Hugging Face ships them (rope_scaling llama3 for 3.2); seq (the
 *                   default training length) min(max_position_embeddings, 2048).
 *   qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b
 *                   Qwen3ForCausalLM as published (head_dim 128, q_norm/k_norm, eps 1e-6,
 *                   theta 1e6, max_position_embeddings 40960; tied up to 4b).
 *   mixtral-8x7b    MixtralForCausalLM: 8 experts, 2 per token, every block sparse.
 *   qwen3-30b-a3b, qwen3-235b-a22b
 *                   Qwen3MoeForCausalLM: 128 experts, 8 per token (norm_topk_prob), every
 *                   block sparse, moe_intermediate_size 768 and 1536.
 * Returns 0 or -EINVAL (logged with the valid names). */
int zn_llama_config_from_preset(const char *name, struct zn_llama_config *cfg);
bool zn_llama_is_preset(const char *name);
/* The names, NULL-terminated. */
const char *const *zn_llama_preset_names(void);

/* Applies the model flags in argv[0..argc): --model NAME (a preset, applied first), --layers
 * N, --heads N, --kv-heads N, --d-model N (hidden), --head-dim N, --intermediate N, --seq N,
 * --vocab N, --tied-embeddings true|false ("--flag V" or "--flag=V"). Others are moved in
 * order to rest (argc slots), counted in *rest_count. head_dim follows --d-model / --heads
 * unless --head-dim is given. Validates. Returns 0 or -EINVAL (logged). */
int zn_llama_config_apply_flags(struct zn_llama_config *cfg, int argc, char **argv,
				char **rest, int *rest_count);

/* From a parsed config.json (family llama, qwen2 or mistral), then validated. seq, the
 * default training length, is max_position_embeddings capped at 2048 and at Mistral's
 * sliding_window (set cfg->seq and validate again for another; the window still refuses a
 * longer one). Returns 0 or -EINVAL naming the key to change. */
int zn_llama_config_from_hf(const struct zn_hf_config *hf, struct zn_llama_config *cfg);

/* The config.json fields of cfg (model_type: qwen3 with qk_norm, mistral with a window,
 * qwen2 with q/k/v biases and none on o, else llama). */
void zn_llama_config_to_hf(const struct zn_llama_config *cfg, struct zn_hf_config *hf);

/* Parameters as Hugging Face's num_parameters() counts them (a tied lm_head once). */
uint64_t zn_llama_param_count(const struct zn_llama_config *cfg);

/* The model interface's optional load_layer / save (llama_io.c): PATH is a Hugging Face
 * directory or a .safetensors file (model/hf_dir.h); load_layer reads one layer's tensors
 * by name, checking their shapes; save writes config.json + shards (a directory) or one
 * file with the config in its metadata. Return 0 or a negative code (logged). */
int zn_llama_load_layer(const struct zn_llama_config *cfg, const struct zn_layer_desc *L,
			const char *path, float *params_h);
int zn_llama_save(const struct zn_llama_config *cfg, const struct zn_layer_desc *layers,
		  const float *const *params_h, const char *path, enum zn_dtype dtype);

/* Checks every field and fills inv_freq. Returns 0 or -EINVAL naming the field. */
int zn_llama_config_validate(struct zn_llama_config *cfg);

int zn_llama_layer_count(const struct zn_llama_config *cfg);
/* Is block n (0-based) a sparse MoE block? */
bool zn_llama_layer_is_moe(const struct zn_llama_config *cfg, int n);
/* An MoE block's dimensions for B x T tokens (model/moe/moe.h). */
struct zn_moe_dims;
void zn_llama_moe_dims(const struct zn_llama_config *cfg, int B, int T, struct zn_moe_dims *d);
/* The floats of the auxiliary loss buffer (model.h zn_layer_io.aux): 0 without experts or
 * output_router_logits; else [loss, dprob E, counts E, probability sums E]. */
int zn_llama_aux_floats(const struct zn_llama_config *cfg);
/* One layer's descriptor (0 <= l < layer count); the list below is these in order. */
int zn_llama_layer(const struct zn_llama_config *cfg, int l, struct zn_layer_desc *out);
int zn_llama_layers(const struct zn_llama_config *cfg, struct zn_layer_desc *out);
void zn_llama_init_range(const struct zn_llama_config *cfg, const struct zn_layer_desc *L,
			 uint64_t first, uint64_t count, float *out_h, uint64_t seed);
uint64_t zn_llama_act_numel(const struct zn_llama_config *cfg, const struct zn_layer_desc *L,
			    int B, int T);
uint64_t zn_llama_scratch_numel(const struct zn_llama_config *cfg,
				const struct zn_layer_desc *L, int B, int T);
/* Rows per chunk of the final layer's lm_head + cross-entropy (kernels/lmhead_ce.h) for bt
 * rows within work_bytes (the descriptor's work_bytes; 0: the default 128 MiB):
 * zn_lmhead_ce_chunk, never [bt, vocab] at once unless the budget holds it. */
int zn_llama_ce_chunk(int vocab, uint64_t bt, uint64_t work_bytes);
/* The model interface's forward/backward (zn_layer_io as model.h describes it). */
void zn_llama_layer_forward(const struct zn_kernel_table *k, void *stream,
			    const struct zn_llama_config *cfg, const struct zn_layer_io *io);
void zn_llama_layer_backward(const struct zn_kernel_table *k, void *stream,
			     const struct zn_llama_config *cfg, const struct zn_layer_io *io);

/* bf16 compute (llama_layer_bf16.c, docs/kernels.md "bf16 compute"): the same layers
 * reading the stored bf16 parameters io->params16 / tied_params16 directly (no fp32
 * working copy), GEMMs on bf16 inputs with fp32 accumulation (matmul_*_bf16); RMSNorm,
 * RoPE, attention, SwiGLU, softmax statistics, residuals, the loss and every gradient
 * fp32. The sizes are the acts/scratch floats of such calls. */
uint64_t zn_llama_act_numel_bf16(const struct zn_llama_config *cfg,
				 const struct zn_layer_desc *L, int B, int T);
uint64_t zn_llama_scratch_numel_bf16(const struct zn_llama_config *cfg,
				     const struct zn_layer_desc *L, int B, int T);
void zn_llama_layer_forward_bf16(const struct zn_kernel_table *k, void *stream,
				 const struct zn_llama_config *cfg, const struct zn_layer_io *io);
void zn_llama_layer_backward_bf16(const struct zn_kernel_table *k, void *stream,
				  const struct zn_llama_config *cfg,
				  const struct zn_layer_io *io);

/* llama_moe.c: a sparse block's MLP (tensor t of io->L its router, then gate_up_proj and
 * down_proj), its acts and scratch floats, and the load-balancing loss's final part */
uint64_t zn_llama_moe_act_numel(const struct zn_llama_config *cfg, int B, int T);
uint64_t zn_llama_moe_scratch_numel(const struct zn_llama_config *cfg, int B, int T);
void zn_llama_moe_forward(const struct zn_kernel_table *k, void *st,
			  const struct zn_llama_config *cfg, const struct zn_layer_desc *L,
			  const float *params, int t, int B, int T, float *aux,
			  const struct zn_moe_source *src, float *acts, const float *h2,
			  float *out);
void zn_llama_moe_backward(const struct zn_kernel_table *k, void *st,
			   const struct zn_llama_config *cfg, const struct zn_layer_io *io,
			   int t, const float *acts, float *scratch, const float *h2,
			   float *dh2);
void zn_llama_moe_aux_finish(const struct zn_kernel_table *k, void *st,
			     const struct zn_llama_config *cfg, const struct zn_layer_io *io,
			     bool backward);

extern const struct zn_model_ops zn_llama_ops;
/* the same without bf16 compute, with the auxiliary loss: a mixture of experts' model */
extern const struct zn_model_ops zn_llama_moe_ops;
/* { &zn_llama_ops, cfg }, or &zn_llama_moe_ops with experts */
struct zn_model zn_llama_model(const struct zn_llama_config *cfg);

/* Inference with a KV cache (llama_decode.c; the model ops' decode entries, model.h) */
uint64_t zn_llama_decode_scratch_numel(const void *config, const struct zn_layer_desc *L,
				       int T);
uint64_t zn_llama_decode_kv_numel(const void *config, const struct zn_layer_desc *L, int max_t);
int zn_llama_decode_max_t(const void *config);
void zn_llama_decode(const struct zn_kernel_table *k, void *stream, const void *config,
		     const struct zn_decode_io *io);

/* The family's registry entry (llama_family.c, model/family.h) and its config.json hooks
 * (llama_hf.c; model/hf_family.h): keys, layout and count as that file's opening lists. */
struct cJSON;
struct zn_family;
struct zn_hf_emit;
struct zn_hf_keys;
extern const struct zn_family zn_llama_family;
int zn_llama_hf_parse(const struct zn_hf_keys *c, struct zn_hf_config *cfg);
int zn_llama_hf_write(struct cJSON *o, const struct zn_hf_config *c);
void zn_llama_hf_layout(const struct zn_hf_config *c, struct zn_hf_emit *e);
/* the family's zn_family hf_fused_name and hf_fused_stack (llama_moe_hf.c) */
bool zn_llama_hf_fused_name(const char *name, char *fused, size_t size, int *factor);
bool zn_llama_hf_fused_stack(const char *name);
uint64_t zn_llama_hf_param_count(const struct zn_hf_config *c);
/* llama_moe_hf.c: the expert keys of mixtral and qwen3_moe; is block n sparse? */
int zn_llama_hf_parse_moe(const struct zn_hf_keys *c, struct zn_hf_config *cfg);
int zn_llama_hf_write_moe(struct cJSON *o, const struct zn_hf_config *c);
bool zn_llama_hf_is_moe_layer(const struct zn_hf_config *c, int64_t n);

#endif
