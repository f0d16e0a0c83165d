/* zinc train's LoRA flags (docs/lora.md): --lora-r R --lora-alpha A --lora-targets LIST
 * --lora-dropout P --use-rslora wrap the model in src/model/lora; --init-adapter DIR starts
 * the adapters from a PEFT directory, --save-adapter DIR writes one, --merge-adapter with
 * --save-final DIR|FILE.safetensors writes the base with the adapters merged. Internal to
 * src/cli. */
#ifndef ZN_CLI_TRAIN_LORA_H
#define ZN_CLI_TRAIN_LORA_H

#include <stdbool.h>

#include "cli/train_model.h"
#include "model/lora/lora.h"
#include "zinc.h"

struct zn_train_lora {
	bool on;                   /* --lora-r given */
	bool dropout_given;        /* --lora-dropout given (else the adapter's, or 0) */
	struct zn_lora_config lc;
	const char *save_adapter, *init_adapter;
	bool merge;
	/* set by zn_train_lora_setup */
	struct zn_st_file *adapter;
	int (*base_load)(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h);
	void *base_ctx;
	uint64_t seed;
};

/* Takes the flags above out of rest[0 .. *n) (the others stay, in order). Returns 0 or
 * ZN_EUSAGE (logged). */
int zn_train_lora_flags(int *n, char **rest, struct zn_train_lora *tl);
/* Checks the flags together: save_final is --save-final or NULL. */
int zn_train_lora_check(const struct zn_train_lora *tl, const char *save_final);
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
void zn_train_lora_release(struct zn_train_lora *tl);

#endif
