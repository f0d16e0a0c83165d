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
 * output columns (a fused q/k/v or gate/up weight: the target's rows of it; a stack of
 * experts (model.h parts): one adapter per expert and projection, on its rows, named as
 * the checkpoint names the part, "...experts.3.up_proj"), and whose
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

/* One adapter of a layer: on rows base_row .. base_row + out of base tensor base_tensor
 * (the whole tensor, or one expert's projection in a stack of experts: model.h parts),
 * trainable tensors a_tensor (A) and a_tensor + 1 (B) of the wrapper's layer. */
struct zn_lora_adapter {
	int base_tensor;
	int a_tensor;
	int64_t base_row;
	int64_t in, out;
	char module[ZN_MODEL_NAME_MAX]; /* the base name without ".weight" */
};

/* A layer's adapters: count of them in ad, as many as the layer's targets (owned by the
 * configuration: zn_lora_release frees ad and base's tensors). */
struct zn_lora_layer {
	struct zn_layer_desc base; /* the base model's descriptor of this layer */
	int count;
	struct zn_lora_adapter *ad;
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

/* The module names LoRA may target: any registered family's (model/family.h: PEFT's for
 * Llama, GPT-2's Conv1D names). zn_lora_target_list: them, per family, for messages. */
bool zn_lora_target_known(const char *name);
void zn_lora_target_list(char *buf, size_t size);
/* Are the base's weights stored [in, out] (its family's conv1d: PEFT's fan_in_fan_out)? */
bool zn_lora_base_conv1d(const struct zn_lora_config *cfg);
/* Appends the comma-separated PEFT names in list. Returns 0 or -EINVAL (logged, naming
 * --lora-targets and the accepted names). */
int zn_lora_add_targets(struct zn_lora_config *cfg, const char *list);
/* Checks r, alpha, dropout and targets, reads the base's descriptors and places the
 * adapters; -EINVAL (logged) when a target matches nothing. */
int zn_lora_prepare(struct zn_lora_config *cfg);
void zn_lora_release(struct zn_lora_config *cfg);
/* alpha / r, or alpha / sqrt(r) with rslora */
float zn_lora_scale(const struct zn_lora_config *cfg);

/* The trainable descriptor of layer l (from the prepared layers); *out owns its tensors
 * (zn_layer_desc_release), as every describe's. */
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

/* alpha / r, or alpha / sqrt(r) with rslora, in float64 (PEFT's `scaling`, a Python
 * float): what a merge multiplies by. */
double zn_lora_scale64(const struct zn_lora_config *cfg);
/* Inference with the adapters unmerged (zinc generate --adapter): the base family's decode
 * op on layer io->L (the base's descriptor; io->params its weights) against a kernel table
 * whose matmul_forward adds scale * x A^T B^T to each target's output columns, as the
 * training forward does. ad is the wrapper's descriptor of the layer (zn_lora_describe),
 * adapters its floats on the device; extra holds zn_lora_scratch_extra(cfg, ad, 1, T,
 * false) floats. cfg->dropout must be 0 (inference: PEFT's eval mode). */
void zn_lora_decode(const struct zn_kernel_table *k, void *stream,
		    const struct zn_lora_config *cfg, const struct zn_decode_io *io,
		    const struct zn_layer_desc *ad, const float *adapters, float *extra);

/* The merged weights of layer l: base (frozen_numel floats, the base layout) gets
 * W + scale64 * B A for every adapter, computed in float64 per element and rounded once
 * to dtype (held in the float: zn_f64_round_to), so a bf16 or fp16 save writes that value
 * exactly. */
void zn_lora_merge_layer(const struct zn_lora_config *cfg, int l, const float *adapters,
			 float *base, enum zn_dtype dtype);

/* PEFT's adapter_config.json (lora_peft_config.c): what zinc takes from it. */
enum zn_lora_peft_targets {
	ZN_LORA_PEFT_TARGETS_NONE,       /* null or absent */
	ZN_LORA_PEFT_TARGETS_LIST,       /* names, comma-separated in targets */
	ZN_LORA_PEFT_TARGETS_ALL_LINEAR, /* "all-linear" */
	ZN_LORA_PEFT_TARGETS_REGEX,      /* another string: a regular expression */
};

struct zn_lora_peft {
	int r;
	float alpha, dropout;
	bool rslora, fan_in_fan_out;
	enum zn_lora_peft_targets targets_kind;
	char targets[512];
	char base[ZN_PATH_MAX]; /* base_model_name_or_path, "" when null */
};

/* Parses adapter_config.json's text (NUL-terminated; path names it in errors): peft_type
 * LORA, r, lora_alpha, use_rslora, lora_dropout in [0, 1), bias "none", target_modules,
 * and every other LoraConfig field that changes the model or the training (modules_to_save,
 * layers_to_transform, rank_pattern, alpha_pattern, use_dora, lora_bias, init_lora_weights
 * that rewrite the base, ...) at the value PEFT treats as its default, else -EINVAL
 * (logged, naming the field and value). A field PEFT does not have is accepted only when
 * null, false, 0, "", [] or {}. Pure: no file, no model. */
int zn_lora_peft_parse(const char *text, const char *path, struct zn_lora_peft *out);
/* dir/adapter_config.json read and parsed (core/json: a repeated key takes its last value,
 * as PEFT's json.load); what names the flag in messages. */
int zn_lora_peft_read(const char *dir, const char *what, struct zn_lora_peft *out);
/* Before zn_lora_prepare (cfg->base set): r, lora_alpha and use_rslora must be cfg's;
 * target_modules become cfg's targets when it has none (a list of names zinc knows, or
 * "all-linear"; a regular expression is refused: give the targets); lora_dropout becomes
 * cfg's when take_dropout; fan_in_fan_out true is refused on nn.Linear families (all but
 * GPT-2, whose Conv1D weights PEFT marks so). 0 or -EINVAL (logged). */
int zn_lora_peft_apply(struct zn_lora_config *cfg, const struct zn_lora_peft *p,
		       const char *path, bool take_dropout);

/* PEFT's files (lora_peft.c). save: dir/adapter_model.safetensors (fp32, PEFT's names) and
 * dir/adapter_config.json (base_name may be NULL); adapters[l] is layer l's trainable
 * buffer. open (cfg prepared): opens dir/adapter_model.safetensors and checks its tensors
 * are exactly cfg's adapters, with their shapes and finite values (-EINVAL naming the
 * modules outside cfg's targets, a missing or misshapen tensor, or a NaN/Inf element);
 * load_layer reads layer L's adapters. Return 0 or a negative code (logged). */
struct zn_st_file;
int zn_lora_save_peft(const struct zn_lora_config *cfg, const float *const *adapters,
		      const char *dir, const char *base_name);
int zn_lora_peft_open(const struct zn_lora_config *cfg, const char *dir,
		      struct zn_st_file **out);
/* dir/adapter_config.json into cfg (cfg->base set; lora_peft_config.c), for the commands
 * that take an adapter as it is (zinc merge, generate --adapter): zn_lora_peft_read's checks,
 * then r, lora_alpha, use_rslora, lora_dropout and target_modules (a list of names or
 * "all-linear"; a regular expression is refused) taken. what names the flag in messages.
 * 0 or a negative code (logged). */
int zn_lora_peft_read_config(struct zn_lora_config *cfg, const char *dir, const char *what);
/* Every adapter tensor of cfg is in f with its shape and a float dtype, and f holds no
 * other tensor. 0 or -EINVAL (logged, naming the tensor; what names the flag). */
int zn_lora_peft_check_tensors(const struct zn_lora_config *cfg, const struct zn_st_file *f,
			       const char *what);
int zn_lora_peft_load_layer(const struct zn_st_file *f, const struct zn_layer_desc *L,
			    float *params_h);

/* zn_lora_ops, or where the base family has bf16 compute (act_numel_bf16) zn_lora_ops_bf16,
 * which has it too: then the engine's bf16 compute calls the layers with io->params16 (the
 * adapters in bf16) and io->frozen pointing at the stored bf16 base (read as uint16_t; never
 * widened to fp32), see lora_layer.c. */
extern const struct zn_model_ops zn_lora_ops, zn_lora_ops_bf16;
struct zn_model zn_lora_model(const struct zn_lora_config *cfg); /* { ops, cfg } */

#endif
