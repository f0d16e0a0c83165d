/* GPT-2: configuration, parameter layout, initialization and the per-layer forward/backward
 * that the training engine drives one layer at a time.
 *
 * The model is a list of layer_count = L + 2 layers, each with ONE flat fp32 parameter
 * buffer (and, in the engine, one flat gradient buffer of the same size):
 *
 *   index 0        ZN_GPT2_LAYER_EMBED  wte [Vp, C], wpe [maxT, C]
 *   index 1..L     ZN_GPT2_LAYER_BLOCK  ln_1 w,b; attn.c_attn w,b; attn.c_proj w,b;
 *                                       ln_2 w,b; mlp.c_fc w,b; mlp.c_proj w,b
 *   index L + 1    ZN_GPT2_LAYER_FINAL  ln_f w,b; its lm_head is layer 0's wte (tied):
 *                                       its forward/backward take layer 0's parameters
 *                                       (tied_params) and accumulate into layer 0's
 *                                       gradients (tied_grads).
 *
 * Tensor names are those of Hugging Face's GPT2LMHeadModel ("transformer.wte.weight",
 * "transformer.h.0.attn.c_attn.weight", ..., "transformer.ln_f.weight"); lm_head.weight is
 * tied to wte and never stored separately.
 *
 * In-memory layout is the kernels' (kernels/kernels.h, llm.c's): matmul weights are
 * [OC, C]. Hugging Face's Conv1D weights (c_attn, c_proj, c_fc) are stored [in, out] = the
 * transpose; zn_tensor_desc.transpose marks them and the safetensors load/save transposes.
 * wte is [Vp, C] in memory (Vp = padded_vocab, a multiple of 128 by default) with rows
 * V..Vp-1 zero: they get zero gradients (the loss ignores padded logits) and so stay zero
 * under AdamW; the file holds only the V real rows ([V, C], as Hugging Face).
 *
 * Weight decay (zn_tensor_desc.decay): true for every 2-D tensor (matmul weights, wte,
 * wpe), false for biases and layernorm weights and biases (nanoGPT/llm.c convention).
 *
 * Initialization (GPT-2 / llm.c): every matrix and both embeddings normal(0, 0.02); the
 * residual projections attn.c_proj.weight and mlp.c_proj.weight normal(0, 0.02/sqrt(2L));
 * biases 0; layernorm weight 1, bias 0; wte padded rows 0. (Hugging Face's _init_weights
 * also uses 0.02 for wpe; we do the same.) Each element's value is a pure function of
 * (seed, layer index, tensor index, element index), drawn from a counter-based generator
 * (splitmix64 hash + Box-Muller), so any shard can be initialized on its own and the model
 * is identical however it is partitioned across ranks, stages or tiers.
 *
 * Device calls: forward/backward take device pointers (for the host device: ordinary memory)
 * and call only the kernel table k on `stream`; they never read device memory on the host.
 * Wrap them in zn_launch (src/gpu/device.h). They keep no state and allocate nothing.
 *
 * Buffers per layer (sizes in floats, from the functions below):
 *   params   zn_layer_desc.numel                     read
 *   grads    zn_layer_desc.numel                     ACCUMULATED (+=) by backward
 *   acts     zn_gpt2_act_numel(cfg, L, B, T)         written by forward, read by backward
 *   scratch  zn_gpt2_scratch_numel(cfg, L, B, T)     temporary; MUST BE ALL ZERO on entry
 *            to zn_gpt2_layer_backward (e.g. zn_memset_async(stream, scratch, 0, bytes)
 *            right before it); forward needs no particular contents. The same scratch may
 *            be shared by all layers, since nothing in it outlives one call.
 *   x_in/x_out, dx_out/dx_in [B, T, C]: the residual stream and its gradient. dx_in is
 *            overwritten (not accumulated); dx_out is only read.
 * act_numel and scratch_numel are 0 for the embedding layer (its backward needs only the
 * tokens); callers may pass NULL for zero-sized buffers.
 *
 * Usage (one step on the host device, B x T tokens; the engine does the same with each
 * call wrapped in zn_launch and buffers in device memory):
 *
 *     struct zn_gpt2_config cfg;
 *     zn_gpt2_config_from_preset("gpt2", &cfg);
 *     int n = zn_gpt2_layer_count(&cfg);                       // L + 2
 *     struct zn_layer_desc *ld = calloc(n, sizeof(*ld));
 *     zn_gpt2_layers(&cfg, ld);                                // zn_layer_desc_release each
 *     for (int l = 0; l < n; l++)                              // params[l]: ld[l].numel
 *             zn_gpt2_init_layer(&cfg, &ld[l], params[l], seed);
 *     // forward: x[l] is layer l's output [B,T,C] (the input of layer l+1)
 *     zn_gpt2_layer_forward(k, s, &cfg, &ld[0], params[0], NULL, acts[0], scratch,
 *                           NULL, x[0], tokens, NULL, NULL, B, T);
 *     for (int l = 1; l <= cfg.layers; l++)
 *             zn_gpt2_layer_forward(k, s, &cfg, &ld[l], params[l], NULL, acts[l], scratch,
 *                                   x[l - 1], x[l], tokens, NULL, NULL, B, T);
 *     zn_gpt2_layer_forward(k, s, &cfg, &ld[n - 1], params[n - 1], params[0], acts[n - 1],
 *                           scratch, x[n - 2], NULL, tokens, targets, losses, B, T);
 *     // backward, in reverse; scratch zeroed before each call; dx_a/dx_b alternate
 *     memset(scratch, 0, scratch_bytes);
 *     zn_gpt2_layer_backward(k, s, &cfg, &ld[n - 1], params[n - 1], params[0], grads[n - 1],
 *                            grads[0], acts[n - 1], scratch, x[n - 2], NULL, dx_a,
 *                            tokens, targets, 1.0f / (B * T), B, T);
 *     for (int l = cfg.layers; l >= 1; l--) {
 *             memset(scratch, 0, scratch_bytes);
 *             zn_gpt2_layer_backward(k, s, &cfg, &ld[l], params[l], NULL, grads[l], NULL,
 *                                    acts[l], scratch, x[l - 1], dx_a, dx_b, tokens, targets,
 *                                    1.0f / (B * T), B, T);
 *             swap(dx_a, dx_b);
 *     }
 *     zn_gpt2_layer_backward(k, s, &cfg, &ld[0], params[0], NULL, grads[0], NULL, NULL,
 *                            NULL, NULL, dx_a, NULL, tokens, targets, 1.0f / (B * T), B, T);
 *
 * zn_gpt2_host (below) does exactly this on host memory with zn_kernels_cpu; it is the
 * reference the engine's tests compare against.
 *
 * Ordering for the engine: the final layer's backward accumulates into layer 0's gradient
 * buffer (tied wte), so layer 0's parameters must be present for the final layer's forward
 * and backward, and layer 0's gradients must not be reduced or consumed before layer 0's own
 * backward has added to them too.
 */
#ifndef ZN_MODEL_GPT2_H
#define ZN_MODEL_GPT2_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"
#include "model/model.h"
#include "zinc.h"

#define ZN_GPT2_MAX_TENSORS 12 /* a block's */
#define ZN_GPT2_NAME_MAX ZN_MODEL_NAME_MAX
#define ZN_GPT2_VOCAB_PAD 128 /* default padded_vocab = vocab rounded up to this */

struct zn_gpt2_config {
	int layers;       /* L: transformer blocks */
	int heads;        /* NH; d_model % heads == 0 */
	int d_model;      /* C */
	int seq;          /* maxT: wpe rows, the longest T a forward accepts */
	int vocab;        /* V: real vocabulary (50257 for GPT-2) */
	int padded_vocab; /* Vp >= V: wte rows in memory and logits row stride */
};

enum zn_gpt2_layer_kind {
	ZN_GPT2_LAYER_EMBED = 0,
	ZN_GPT2_LAYER_BLOCK = 1,
	ZN_GPT2_LAYER_FINAL = 2,
};

/* Tensor indices inside each layer kind (zn_layer_desc.tensors[i]). */
enum { ZN_GPT2_WTE = 0, ZN_GPT2_WPE = 1 };
enum {
	ZN_GPT2_LN1_W = 0,
	ZN_GPT2_LN1_B,
	ZN_GPT2_QKV_W, /* attn.c_attn.weight [3C, C] */
	ZN_GPT2_QKV_B,
	ZN_GPT2_ATTPROJ_W, /* attn.c_proj.weight [C, C] */
	ZN_GPT2_ATTPROJ_B,
	ZN_GPT2_LN2_W,
	ZN_GPT2_LN2_B,
	ZN_GPT2_FC_W, /* mlp.c_fc.weight [4C, C] */
	ZN_GPT2_FC_B,
	ZN_GPT2_FCPROJ_W, /* mlp.c_proj.weight [C, 4C] */
	ZN_GPT2_FCPROJ_B,
};
enum { ZN_GPT2_LNF_W = 0, ZN_GPT2_LNF_B = 1 };

/* ---- configuration ------------------------------------------------------------------ */

/* Presets: "gpt2" (124M: 12 layers, 12 heads, 768, seq 1024, vocab 50257 padded 50304),
 * "gpt2-medium" (350M: 24, 16, 1024), "gpt2-large" (774M: 36, 20, 1280), "gpt2-xl"
 * (1.5B: 48, 25, 1600), and for tests and demos "tiny" (2 layers, 4 heads, 64, seq 64,
 * vocab 256) and "small" (4, 4, 128, seq 128, vocab 256: the byte-level demo).
 * Returns 0, or -EINVAL after logging the valid names. Made-up sizes: set the fields
 * (zn_gpt2_config_apply_flags), then zn_gpt2_config_validate. */
int zn_gpt2_config_from_preset(const char *name, struct zn_gpt2_config *cfg);

/* Checks every field (positive, d_model % heads == 0, padded_vocab >= vocab, sizes whose
 * products fit the kernels' int arguments). A padded_vocab of 0 is set to vocab rounded up
 * to ZN_GPT2_VOCAB_PAD. Returns 0 or -EINVAL after logging which field to change. */
int zn_gpt2_config_validate(struct zn_gpt2_config *cfg);

/* Applies the model flags in argv[0..argc): --model NAME (a preset; applied first, whatever
 * its position), --layers N, --heads N, --d-model N, --seq N, --vocab N, --padded-vocab N
 * (each "--flag V" or "--flag=V"). Other arguments are moved, in order, to rest (caller
 * provides argc slots), counted in *rest_count. Does not validate. Returns 0 or -EINVAL. */
int zn_gpt2_config_apply_flags(struct zn_gpt2_config *cfg, int argc, char **argv,
			       char **rest, int *rest_count);

/* ---- layers --------------------------------------------------------------------------- */

/* L + 2 */
int zn_gpt2_layer_count(const struct zn_gpt2_config *cfg);

/* Fills out[0 .. L+2) (caller provides zn_gpt2_layer_count slots). cfg must be valid.
 * Returns 0 or -EINVAL. */
/* One layer's descriptor (0 <= l < layer count); the list below is these in order. */
int zn_gpt2_layer(const struct zn_gpt2_config *cfg, int l, struct zn_layer_desc *out);
int zn_gpt2_layers(const struct zn_gpt2_config *cfg, struct zn_layer_desc *out);

/* A GPT-2 shape from estimate's flags: parameter count and largest layer (embeddings with
 * the position table, or one block). Pure. */
void zn_gpt2_shape_params(int layers, int hidden, int vocab, int seq, uint64_t *params,
			  uint64_t *largest_layer);

/* Parameters of the whole model, wte padding included / excluded. */
uint64_t zn_gpt2_param_numel(const struct zn_gpt2_config *cfg);
uint64_t zn_gpt2_param_count(const struct zn_gpt2_config *cfg); /* real: as HF counts */

/* Initializes the whole layer (params_h: L->numel floats, host memory). */
void zn_gpt2_init_layer(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			float *params_h, uint64_t seed);

/* Initializes elements [first, first + count) of the layer's flat buffer into out_h[0 ..
 * count); elements at or beyond L->numel (shard padding) are set to 0. The values equal
 * those zn_gpt2_init_layer puts there, so shards can be initialized independently. */
void zn_gpt2_init_range(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			uint64_t first, uint64_t count, float *out_h, uint64_t seed);

/* Floats the layer's forward keeps for its backward (acts). */
uint64_t zn_gpt2_act_numel(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			   int B, int T);
/* Floats of temporary space forward and backward need (scratch; zero before backward). */
uint64_t zn_gpt2_scratch_numel(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			       int B, int T);

/* ---- forward / backward (device pointers; see the contract above) ---------------------- */

/* embed:  x_out = wte[tokens] + wpe[0..T)         (x_in, tied_params, targets unused)
 * block:  x_out = block(x_in)
 * final:  losses[b,t] = cross-entropy(softmax(ln_f(x_in) @ wte^T)[:V], targets[b,t])
 *         (tied_params = layer 0's params, targets required, x_out unused)
 * 1 <= T <= cfg->seq; tokens and targets < cfg->vocab. */
void zn_gpt2_layer_forward(const struct zn_kernel_table *k, void *stream,
			   const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			   const float *params, const float *tied_params, float *acts,
			   float *scratch, const float *x_in, float *x_out, const int *tokens,
			   const int *targets, float *losses, int B, int T);

/* Gradients of sum(losses) * dloss_scale (dloss_scale = 1/(B*T) gives the mean loss's;
 * the engine folds in ranks and accumulation steps), ACCUMULATED into grads (and, for the
 * final layer, tied_grads = layer 0's gradients). acts and x_in must be what this layer's
 * forward saw; scratch must be zero on entry.
 * embed:  dx_out in; dx_in, x_in, acts, scratch unused (NULL)
 * block:  dx_out in, dx_in out (overwritten)
 * final:  starts from the loss (dx_out NULL; targets required), dx_in out (overwritten) */
void zn_gpt2_layer_backward(const struct zn_kernel_table *k, void *stream,
			    const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			    const float *params, const float *tied_params, float *grads,
			    float *tied_grads, const float *acts, float *scratch,
			    const float *x_in, const float *dx_out, float *dx_in,
			    const int *tokens, const int *targets, float dloss_scale, int B,
			    int T);

/* The same with packed documents (docs/packing.md): pos [B,T] each token's position in
 * its document (wpe[pos], attention inside each document), NULL: as above; a target < 0
 * has no loss and no gradient. */
void zn_gpt2_layer_forward_pos(const struct zn_kernel_table *k, void *stream,
			       const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			       const float *params, const float *tied_params, float *acts,
			       float *scratch, const float *x_in, float *x_out,
			       const int *tokens, const int *pos, const int *targets,
			       float *losses, int B, int T);
void zn_gpt2_layer_backward_pos(const struct zn_kernel_table *k, void *stream,
				const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
				const float *params, const float *tied_params, float *grads,
				float *tied_grads, const float *acts, float *scratch,
				const float *x_in, const float *dx_out, float *dx_in,
				const int *tokens, const int *pos, const int *targets,
				float dloss_scale, int B, int T);

/* Rows per lm_head + cross-entropy chunk (kernels/lmhead_ce.h) for bt rows within
 * work_bytes (the descriptor's work_bytes; 0: the default 128 MiB): zn_lmhead_ce_chunk. */
int zn_gpt2_ce_chunk(const struct zn_gpt2_config *cfg, uint64_t bt, uint64_t work_bytes);

/* bf16 compute (src/model/gpt2/gpt2_layer_bf16.c, docs/kernels.md "bf16 compute"): the
 * same layers reading the stored bf16 parameters directly, GEMMs on bf16 inputs with fp32
 * accumulation (matmul_*_bf16), layernorm, softmax statistics, residuals, loss and every
 * gradient fp32. The GEMM inputs ln_1, ln_2, GELU(fc) and ln_f are saved as bf16; 1-D
 * tensors (layernorm weights, biases) are cast to fp32 into scratch per call. Sizes and
 * contract as the fp32 functions above (pos: the _pos variants' packed documents, or
 * NULL), with their own act/scratch counts. */
uint64_t zn_gpt2_act_numel_bf16(const struct zn_gpt2_config *cfg,
				const struct zn_layer_desc *L, int B, int T);
uint64_t zn_gpt2_scratch_numel_bf16(const struct zn_gpt2_config *cfg,
				    const struct zn_layer_desc *L, int B, int T);
void zn_gpt2_layer_forward_bf16(const struct zn_kernel_table *k, void *stream,
				const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
				const uint16_t *params, const uint16_t *tied_params,
				float *acts, float *scratch, const float *x_in, float *x_out,
				const int *tokens, const int *pos, const int *targets,
				float *losses, int B, int T);
void zn_gpt2_layer_backward_bf16(const struct zn_kernel_table *k, void *stream,
				 const struct zn_gpt2_config *cfg,
				 const struct zn_layer_desc *L, const uint16_t *params,
				 const uint16_t *tied_params, float *grads, float *tied_grads,
				 const float *acts, float *scratch, const float *x_in,
				 const float *dx_out, float *dx_in, const int *tokens,
				 const int *pos, const int *targets, float dloss_scale, int B,
				 int T);

/* ---- the model interface (model.h) -------------------------------------------------------
 *
 * GPT-2 as one implementation of struct zn_model_ops: layer 0 the embeddings (wte, wpe),
 * layers 1 .. L the blocks, layer L + 1 ln_f and the lm_head tied to layer 0's wte
 * (tied_layer 0). */
extern const struct zn_model_ops zn_gpt2_ops;
struct zn_model zn_gpt2_model(const struct zn_gpt2_config *cfg); /* { &zn_gpt2_ops, cfg } */

/* ---- whole model on the host (tests, reference, safetensors I/O) ------------------------ */

struct zn_gpt2_host {
	struct zn_gpt2_config cfg;
	int layer_count;
	struct zn_layer_desc *layers; /* layer_count */
	float **params;               /* layer_count flat buffers, layers[l].numel each */
	float **grads;                /* same shapes, zeroed at create; NULL without grads */
};

/* Allocates descriptors and zeroed parameter (and gradient) buffers; cfg is validated
 * (a copy is kept). Returns 0, -EINVAL or -ENOMEM. */
int zn_gpt2_host_create(struct zn_gpt2_host **out, const struct zn_gpt2_config *cfg,
			bool with_grads);
void zn_gpt2_host_destroy(struct zn_gpt2_host *m); /* accepts NULL and half-built */

void zn_gpt2_host_init(struct zn_gpt2_host *m, uint64_t seed);
void zn_gpt2_host_zero_grads(struct zn_gpt2_host *m);

/* Runs the whole model on tokens/targets [B, T] with zn_kernels_cpu through the per-layer
 * functions above. *mean_loss = mean of the B*T losses. With backward (m must have grads),
 * ACCUMULATES the gradients of the mean loss into m->grads (zero them first for plain
 * gradients). Returns 0, -EINVAL (bad B/T, no grads) or -ENOMEM. */
int zn_gpt2_host_forward_backward(struct zn_gpt2_host *m, const int *tokens_h,
				  const int *targets_h, int B, int T, bool backward,
				  float *mean_loss);

/* ---- safetensors checkpoints (gpt2_io.c; format checks in safetensors.h) -------------------
 *
 * Names as Hugging Face's GPT2LMHeadModel: "transformer.wte.weight", ...; a file whose
 * names lack the "transformer." prefix (GPT2Model checkpoints, as the hub's gpt2 files)
 * loads too. Conv1D weights are transposed from the file's [in, out]; wte's V file rows
 * fill the first V of Vp rows (the rest zeroed). lm_head.weight, when present, must equal
 * wte (zinc ties them; an untied checkpoint is rejected). The attention mask buffers
 * (".attn.bias", ".attn.masked_bias") of older checkpoints are ignored; other tensors the
 * model does not use are a warning. Any F32/BF16/F16 file loads; zinc saves F32 or BF16
 * (F16 works too) with "transformer." names, no lm_head, and "__metadata__" n_layer,
 * n_head, n_embd, n_positions, vocab_size (Hugging Face's config names). */
struct zn_st_file;

/* Defines cfg from the file's shapes: layers = number of h.N blocks, d_model = wte
 * columns, vocab = wte rows, seq = wpe rows. heads: the "n_head" metadata; otherwise
 * cfg->heads as given on entry (a --heads flag; 0 = none); otherwise the GPT-2 preset with
 * the same layers and d_model; otherwise -EINVAL asking for --heads. A given cfg->heads
 * that contradicts the metadata is an error. padded_vocab: cfg->padded_vocab on entry if
 * >= vocab, else rounded up as zn_gpt2_config_validate does. Returns 0 or a negative code. */
int zn_gpt2_config_from_safetensors(const char *path, struct zn_gpt2_config *cfg);

/* Loads one layer's tensors from an open file into params_h (L->numel floats). Returns 0,
 * or -EINVAL naming the tensor, the file and both shapes on a mismatch or a missing
 * tensor. */
int zn_gpt2_load_layer_safetensors(const struct zn_st_file *f, const struct zn_gpt2_config *cfg,
				   const struct zn_layer_desc *L, float *params_h);

/* Loads every layer (layer_params_h[l]: layers[l].numel floats each) and checks
 * lm_head.weight and the leftover tensors as described above. */
int zn_gpt2_load_safetensors(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *layers,
			     float *const *layer_params_h, const char *path);

/* The whole-file checks of zn_gpt2_load_safetensors for a caller loading layer by layer:
 * lm_head.weight, when present, equals wte (layer 0's first vocab x d_model floats, already
 * loaded); no block beyond cfg->layers; a warning for tensors the model does not use.
 * Returns 0 or -EINVAL (logged). */
int zn_gpt2_check_safetensors(const struct zn_st_file *f, const struct zn_gpt2_config *cfg,
			      const struct zn_layer_desc *layers, const float *wte);

/* The "__metadata__" of a GPT-2 file zinc writes (format pt, producer zinc, n_layer,
 * n_head, n_embd, n_positions, vocab_size): returns the keys and sets values[0 ..
 * ZN_GPT2_META_COUNT), whose numbers are written into nums. */
#define ZN_GPT2_META_COUNT 7
const char *const *zn_gpt2_safetensors_meta(const struct zn_gpt2_config *cfg,
					    const char **values, char (*nums)[24]);

/* Saves every layer as dtype (ZN_DTYPE_F32 or ZN_DTYPE_BF16; F16 also accepted), atomically
 * (zn_st_write). Returns 0 or a negative code. */
int zn_gpt2_save_safetensors(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *layers,
			     const float *const *layer_params_h, const char *path,
			     enum zn_dtype dtype);

/* Inference with a KV cache (gpt2_decode.c; the model ops' decode entries, model.h) */
uint64_t zn_gpt2_decode_scratch_numel(const void *config, const struct zn_layer_desc *L, int T);
uint64_t zn_gpt2_decode_kv_numel(const void *config, const struct zn_layer_desc *L, int max_t);
int zn_gpt2_decode_max_t(const void *config);
void zn_gpt2_decode(const struct zn_kernel_table *k, void *stream, const void *config,
		    const struct zn_decode_io *io);

/* The family's registry entry (gpt2_family.c, model/family.h) and its config.json hooks
 * (gpt2_hf.c; model/hf_family.h): keys, layout and count as that file's opening lists.
 * zn_gpt2_metadata_config: config.json text from a lone file's GPT-2 metadata keys (1), or
 * 0 when the file has none. */
struct cJSON;
struct zn_family;
struct zn_hf_config;
struct zn_hf_emit;
struct zn_hf_keys;
extern const struct zn_family zn_gpt2_family;
int zn_gpt2_hf_parse(const struct zn_hf_keys *c, struct zn_hf_config *cfg);
int zn_gpt2_hf_write(struct cJSON *o, const struct zn_hf_config *c);
void zn_gpt2_hf_layout(const struct zn_hf_config *c, struct zn_hf_emit *e);
uint64_t zn_gpt2_hf_param_count(const struct zn_hf_config *c);
int zn_gpt2_metadata_config(const struct zn_st_file *f, char *buf, size_t size);

#endif
