/* zinc train's LoRA flags (docs/lora.md): --lora-r R --lora-alpha A --lora-targets LIST
 * --lora-dropout P --use-rslora wrap the model in src/model/lora; --init-adapter DIR starts
 * the adapters from a PEFT directory, --save-adapter DIR writes one, --merge-adapter with
 * --save-final FILE.safetensors writes the base with the adapters merged. Internal to
 * src/cli. */
#ifndef ZN_CLI_TRAIN_LORA_H
#define ZN_CLI_TRAIN_LORA_H

#include <stdbool.h>

#include "model/lora/lora.h"
#include "zinc.h"

struct zn_train_lora {
	bool on;                   /* --lora-r given */
	struct zn_lora_config lc;
	const char *save_adapter, *init_adapter;
	bool merge;
	/* set by the caller: the adapters from a checkpoint (--resume) instead of
	 * --init-adapter or PEFT's init; NULL: none */
	int (*adapter_load)(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h);
	void *adapter_ctx;
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
 * adapters. No-op otherwise. */
int zn_train_lora_setup(struct zn_train_lora *tl, struct zn_model *model,
			struct zn_engine_options *eo, uint64_t seed);
/* After training: --save-adapter, and --save-final with --merge-adapter. Collective. */
int zn_train_lora_save(struct zn_train_lora *tl, struct zn_engine *e, const char *save_final,
		       enum zn_dtype dtype, const char *base_name);
void zn_train_lora_release(struct zn_train_lora *tl);

#endif
