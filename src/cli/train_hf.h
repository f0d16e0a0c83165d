/* zinc train's Hugging Face checkpoints for GPT-2 (model/hf_dir.h): --init-from DIR or
 * FILE (config.json, or the file's metadata, defines the model), --save-final DIR or
 * FILE.safetensors with --save-shard-size. Internal to src/cli. */
#ifndef ZN_CLI_TRAIN_HF_H
#define ZN_CLI_TRAIN_HF_H

#include <stdint.h>

#include "model/gpt2/gpt2.h"
#include "zinc.h"

/* The model of the checkpoint at path: its config.json (or metadata) when it has one,
 * else its shapes (zn_gpt2_config_from_safetensors). mc->heads > 0 is an explicit
 * --heads, which must agree. Returns 0 or -EINVAL (logged, naming --init-from). */
int zn_train_hf_config(const char *path, struct zn_gpt2_config *mc);

/* Reads the checkpoint into the layers' buffers (layout ld), one tensor at a time
 * (Conv1D weights transposed, wte's padded rows zeroed). Returns 0 or a negative code. */
int zn_train_hf_load(const char *path, const struct zn_gpt2_config *mc,
		     const struct zn_layer_desc *ld, float *const *params_h);

/* Can --save-final write path? A .safetensors path or a new directory: core/fsio's
 * zn_output_check of path; an existing directory: of path/config.json in it. */
int zn_train_hf_output_check(const char *path);

/* Saves the engine's weights: every rank calls it (the layers are gathered); rank 0
 * writes path as a .safetensors file or a Hugging Face directory (model/hf_dir.h) with
 * shards of at most shard_bytes (0: 5GB); config.json keeps the other keys (token ids,
 * ...) of init_from's config when the run started from one (init_from may be NULL).
 * Returns 0 or a negative code. */
int zn_train_hf_save(struct zn_engine *e, const struct zn_gpt2_config *mc, const char *path,
		     enum zn_dtype dtype, uint64_t shard_bytes, const char *init_from);

#endif
