/* zinc train's Hugging Face checkpoints for every model family (model/hf_dir.h):
 * --init-from DIR or FILE (config.json, or the file's metadata, defines the model:
 * train_model.h), --save-final DIR or FILE.safetensors with --save-shard-size. Tensors go
 * by the model's layer descriptors (model.h), so nothing here names a family; a lone file
 * without config (GPT-2's) goes to the family's file ops (model/family.h), which check it
 * and write its metadata when saving one.
 * Internal to zinc (src/train). */
#ifndef ZN_TRAIN_HF_H
#define ZN_TRAIN_HF_H

#include <stdint.h>

#include "train/train_model.h"
#include "zinc.h"

/* Loading layer by layer (the engine's init_layer, zinc.h): open checks the checkpoint
 * (its layout, or for a lone file without config the GPT-2 loader's checks once layer 0 is
 * read); zn_train_hf_load_layer(loader, l, L, params_h) reads layer l's tensors, one at a
 * time, into params_h (Conv1D weights transposed, wte's padded rows zeroed) and refuses a
 * NaN or infinity naming the tensor. Host memory: the headers and one tensor at most beyond
 * params_h. Return 0 or a negative code (logged). */
struct zn_train_hf_loader;
int zn_train_hf_loader_open(struct zn_train_hf_loader **out, const char *path,
			    const struct zn_train_model *tm);
int zn_train_hf_load_layer(void *loader, int l, const struct zn_layer_desc *L,
			   float *params_h);
void zn_train_hf_loader_close(struct zn_train_hf_loader *h); /* accepts NULL */
/* A bitsandbytes 4-bit checkpoint (docs/qlora.md; model/quant/bnb.h): whether the loader's
 * is one; its layouts (n, owned by the loader) with the plain parts in stored, every
 * quantized weight checked; and layer l's extent as stored (the engine's init_frozen_q4,
 * ctx the loader). Return 0 or a negative code (logged). */
bool zn_train_hf_is_4bit(const struct zn_train_hf_loader *h);
int zn_train_hf_q4_layouts(struct zn_train_hf_loader *h, enum zn_dtype stored,
			   const struct zn_q4_layer **out);
int zn_train_hf_load_q4(void *loader, int l, void *extent);

/* Can --save-final write path? A .safetensors path or a new directory: core/fsio's
 * zn_output_check of path; an existing directory: of path/config.json in it. */
int zn_train_hf_output_check(const char *path);

/* Writes a model whose layers come from read(ctx, l, buf) (called for l = 0 .. n-1 in
 * order, buf the layer's numel floats: the descriptors' layout) to path as zn_train_hf_save
 * does, on this process alone (zinc merge). 0 or a negative code. */
struct zn_hf_save_opts;
int zn_train_hf_write(const struct zn_train_model *tm,
		      int (*read)(void *ctx, int l, float *buf), void *ctx, const char *path,
		      const struct zn_hf_save_opts *o);

/* Saves the engine's weights layer by layer: every rank calls it and reads layers 0 .. n-1
 * in order (the read is collective); rank 0 streams each into the writer, so host memory
 * holds one layer (and one tensor's conversion) at a time. A .safetensors path is one file
 * with the family's own metadata (its file ops: GPT-2's shape keys) or else the config.json
 * text under "config" (hf_dir.h); any other path a Hugging Face
 * directory (model/hf_dir.h) with shards of at most shard_bytes (0: 5GB) whose
 * config.json keeps the other keys (token ids, ...) of init_from's config when the run
 * started from one (init_from may be NULL). what: the flag, for messages. A link (or
 * anything but a directory) at a directory path is refused, never written through.
 * Returns 0 or a negative code. */
int zn_train_hf_save(struct zn_engine *e, const struct zn_train_model *tm, const char *path,
		     const char *what, enum zn_dtype dtype, uint64_t shard_bytes,
		     const char *init_from);

#endif
