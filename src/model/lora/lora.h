/* LoRA (docs/lora.md): a model family that wraps another one, freezes all of its
 * parameters and trains low-rank adapters on some of its linear layers, as Hugging Face
 * PEFT's LoraConfig(r, lora_alpha, target_modules, lora_dropout, use_rslora) does.
 *
 * Layer l of the wrapper is layer l of the base: its frozen buffer (zn_layer_desc
 * frozen_numel) is the base layer's whole flat buffer, its trainable tensors are the
 * adapters: for each targeted module M (a 2-D matmul weight W [out, in] whose name is
 * "<path>.M.weight"), base_model.model.<path>.M.lora_A.weight [r, in] and .lora_B.weight
 * [out, r]. The base's forward and backward run unchanged against a kernel table whose
 * matmul entries add the adapter: out += scale * dropout(x) A^T B^T on the target's
 * output columns (a fused q/k/v or gate/up weight: the target's rows of it), and whose
 * weight-gradient outputs are dropped (frozen: dweight NULL, no embedding gradient); the
 * input gradients flow through W and the adapter. scale = alpha / r, or alpha / sqrt(r)
 * with use_rslora. Init as PEFT's: A Kaiming-uniform (a = sqrt(5): U(-1/sqrt(in),
 * 1/sqrt(in))), B zero; seeded per (seed, layer, tensor, element).
 *
 *     struct zn_lora_config lc = { .base = zn_gpt2_model(&mc), .r = 4, .alpha = 8 };
 *     zn_lora_add_targets(&lc, "c_attn,c_proj");
 *     rc = zn_lora_prepare(&lc);               // descriptors; zn_lora_release(&lc) after
 *     struct zn_model m = zn_lora_model(&lc);
 */
#ifndef ZN_MODEL_LORA_H
#define ZN_MODEL_LORA_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

#define ZN_LORA_MAX_TARGETS 16
#define ZN_LORA_NAME_MAX 32
#define ZN_LORA_MAX_ADAPTERS (ZN_MODEL_MAX_TENSORS / 2)

/* One adapter of a layer: on base tensor base_tensor, trainable tensors a_tensor (A) and
 * a_tensor + 1 (B) of the wrapper's layer. */
struct zn_lora_adapter {
	int base_tensor;
	int a_tensor;
	int64_t in, out;
	char module[ZN_MODEL_NAME_MAX]; /* the base name without ".weight" */
};

struct zn_lora_layer {
	struct zn_layer_desc base; /* the base model's descriptor of this layer */
	int count;
	struct zn_lora_adapter ad[ZN_LORA_MAX_ADAPTERS];
};

struct zn_lora_config {
	struct zn_model base; /* borrowed: must outlive this */
	int r;                /* >= 1 */
	float alpha;          /* > 0 */
	float dropout;        /* [0, 1) */
	bool rslora;
	int target_count;
	char targets[ZN_LORA_MAX_TARGETS][ZN_LORA_NAME_MAX];
	/* filled by zn_lora_prepare */
	float scale;
	int layers;
	struct zn_lora_layer *lay;
};

/* The module names LoRA may target (PEFT's for Llama, GPT-2's Conv1D names). */
bool zn_lora_target_known(const char *name);
/* Appends the comma-separated PEFT names in list. Returns 0 or -EINVAL (logged, naming
 * --lora-targets and the accepted names). */
int zn_lora_add_targets(struct zn_lora_config *cfg, const char *list);
/* Checks r, alpha, dropout and targets, reads the base's descriptors and places the
 * adapters; -EINVAL (logged) when a target matches nothing. */
int zn_lora_prepare(struct zn_lora_config *cfg);
void zn_lora_release(struct zn_lora_config *cfg);
/* alpha / r, or alpha / sqrt(r) with rslora */
float zn_lora_scale(const struct zn_lora_config *cfg);

/* The trainable descriptor of layer l (from the prepared layers). */
int zn_lora_describe(const struct zn_lora_config *cfg, int l, struct zn_layer_desc *out);
/* PEFT's initialization of elements [first, first + count) of layer L's adapters. */
void zn_lora_init_range(const struct zn_lora_config *cfg, const struct zn_layer_desc *L,
			uint64_t first, uint64_t count, float *out_h, uint64_t seed);
/* Extra scratch floats of the adapters of layer L (after the base's scratch; bf16: with
 * bf16 compute). */
uint64_t zn_lora_scratch_extra(const struct zn_lora_config *cfg, const struct zn_layer_desc *L,
			       int B, int T, bool bf16);
void zn_lora_forward(const struct zn_kernel_table *k, void *stream,
		     const struct zn_lora_config *cfg, const struct zn_layer_io *io);
void zn_lora_backward(const struct zn_kernel_table *k, void *stream,
		      const struct zn_lora_config *cfg, const struct zn_layer_io *io);

/* The merged weights of layer l: base (frozen_numel floats, the base layout) gets
 * W += scale * B A for every adapter, in float64 per element. */
void zn_lora_merge_layer(const struct zn_lora_config *cfg, int l, const float *adapters,
			 float *base);

/* PEFT's files (lora_peft.c). save: dir/adapter_model.safetensors (fp32, PEFT's names) and
 * dir/adapter_config.json (base_name may be NULL); adapters[l] is layer l's trainable
 * buffer. open: checks dir/adapter_config.json's r, lora_alpha, use_rslora against cfg and
 * opens the tensors; load_layer reads layer L's adapters (-EINVAL naming a missing or
 * misshapen tensor). Return 0 or a negative code (logged). */
struct zn_st_file;
int zn_lora_save_peft(const struct zn_lora_config *cfg, const float *const *adapters,
		      const char *dir, const char *base_name);
int zn_lora_peft_open(const struct zn_lora_config *cfg, const char *dir,
		      struct zn_st_file **out);
int zn_lora_peft_load_layer(const struct zn_st_file *f, const struct zn_layer_desc *L,
			    float *params_h);

/* dir/adapter_config.json's LoRA settings (lora_peft_config.c): r, lora_alpha,
 * lora_dropout (absent or null: 0), use_rslora (absent or null: false) and
 * target_modules, which must be a list of names zn_lora_target_known accepts (PEFT's string
 * form is a regular expression: refused). 0 or a negative code (logged, naming the file
 * and the field). */
struct zn_lora_peft_config {
	int r;
	float alpha, dropout;
	bool rslora;
	int target_count;
	char targets[ZN_LORA_MAX_TARGETS][ZN_LORA_NAME_MAX];
};
int zn_lora_peft_read_config(const char *dir, struct zn_lora_peft_config *out);

/* zn_lora_ops, or where the base family has bf16 compute (act_numel_bf16) zn_lora_ops_bf16,
 * which has it too: then the engine's bf16 compute calls the layers with io->params16 (the
 * adapters in bf16) and io->frozen pointing at the stored bf16 base (read as uint16_t; never
 * widened to fp32), see lora_layer.c. */
extern const struct zn_model_ops zn_lora_ops, zn_lora_ops_bf16;
struct zn_model zn_lora_model(const struct zn_lora_config *cfg); /* { ops, cfg } */

#endif
