/* zinc train's LoRA flags (docs/lora.md): --lora-r R --lora-alpha A --lora-targets LIST
 * --lora-dropout P --use-rslora wrap the model in src/model/lora; --init-adapter DIR starts
 * the adapters from a PEFT directory, --save-adapter DIR writes one, --merge-adapter with
 * --save-final DIR|FILE.safetensors writes the base with the adapters merged. Internal to
 * src/cli. */
#ifndef ZN_TRAIN_LORA_H
#define ZN_TRAIN_LORA_H

#include <stdbool.h>

#include "train/train_model.h"
#include "model/lora/lora.h"
#include "zinc.h"

struct zn_train_lora {
	bool on;                   /* --lora-r or --init-adapter given */
	bool alpha_given, dropout_given, rslora_given; /* flags given (r, targets: lc's) */
	struct zn_lora_config lc;
	const char *save_adapter, *init_adapter;
	const char *save_quantized; /* --save-quantized DIR: the 4-bit base (docs/qlora.md) */
	bool merge;
	/* set by the caller: the adapters from a checkpoint (--resume) instead of
	 * --init-adapter or PEFT's init; NULL: none */
	int (*adapter_load)(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h);
	void *adapter_ctx;
	/* set by zn_train_lora_setup */
	struct zn_st_file *adapter;
	int (*base_load)(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h);
	int (*base_q4)(void *ctx, int layer, void *extent); /* a 4-bit checkpoint's reader */
	void *base_ctx;
	uint64_t seed;
	const char *base_name;     /* --init-from (NULL: a seeded base), for adapter_config.json */
};

/* Takes the flags above out of rest[0 .. *n) (the others stay, in order). Returns 0 or
 * ZN_EUSAGE (logged). */
int zn_train_lora_flags(int *n, char **rest, struct zn_train_lora *tl);
/* Checks the flags together: save_final is --save-final or NULL. With --init-adapter DIR,
 * r, alpha, targets, dropout and rslora come from DIR/adapter_config.json where no flag
 * gives them; a flag that disagrees with the file is refused naming both. */
int zn_train_lora_check(struct zn_train_lora *tl, const char *save_final);
/* With --lora-r: wraps *model, and routes eo's loading: the base's loader (eo->init_layer,
 * or the base's seeded init) fills the frozen parameters, --init-adapter or PEFT's init the
 * adapters. --init-adapter's config is checked and applied first (its targets without
 * --lora-targets, its lora_dropout without --lora-dropout), its tensors checked against
 * the adapters, and a warning printed when its base_model_name_or_path names another model
 * than init_from (--init-from, or NULL). No-op without --lora-r. */
int zn_train_lora_setup(struct zn_train_lora *tl, struct zn_model *model,
			struct zn_engine_options *eo, uint64_t seed, const char *init_from);
/* Where --save-final's merged model goes: path (NULL: none; a .safetensors file or a
 * Hugging Face directory, as zn_train_hf_save writes them), its dtype and shard size, the
 * base model and the --init-from it came from (its config's other keys, and the adapter's
 * base_model_name_or_path at --save-adapter; NULL: none). */
struct zn_train_lora_out {
	const char *path;
	enum zn_dtype dtype;
	uint64_t shard_bytes;
	const struct zn_train_model *tm;
	const char *init_from;
};
/* After training: --save-adapter, and --save-final with --merge-adapter (the base with the
 * adapters merged in float64, rounded once to out->dtype). Collective. */
int zn_train_lora_save(struct zn_train_lora *tl, struct zn_engine *e,
		       const struct zn_train_lora_out *out);
/* The checkpoint's copy of the adapter (ckpt.h's extra_files, ctx the zn_train_lora):
 * dir/adapter_model.safetensors and adapter_config.json as --save-adapter writes them, so
 * a checkpoint-N is a PEFT adapter directory, as the Hugging Face Trainer saves a PEFT
 * model's (zinc generate --adapter and zinc merge --adapter take it). Collective; rank 0
 * writes. 0 or a negative code (logged). */
int zn_train_lora_ckpt_files(void *ctx, struct zn_engine *e, const char *dir);
void zn_train_lora_release(struct zn_train_lora *tl);
/* --save-quantized DIR: the engine's 4-bit base written as a bitsandbytes checkpoint
 * (model/quant/bnb.h: config.json with quantization_config, model.safetensors), the
 * config's other keys init_from's when given; stored its plain tensors' dtype. Rank 0
 * writes. 0, ZN_EUSAGE (logged: the base is not quantized) or a negative code. */
int zn_train_lora_save_quantized(struct zn_train_lora *tl, struct zn_engine *e,
				 const struct zn_train_model *tm, const char *init_from,
				 enum zn_dtype stored);

#endif
