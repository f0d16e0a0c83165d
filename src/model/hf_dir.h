/* Hugging Face model directories and files as they ship: reading (streaming, one tensor or
 * a range of its rows at a time) and writing (one file, or a sharded directory).
 *
 * A source (zn_hf_open) is
 *   - a directory holding config.json and either model.safetensors or the shards
 *     model-0000K-of-0000N.safetensors with model.safetensors.index.json ({"metadata":
 *     {"total_size": N}, "weight_map": {tensor name: shard file name}}); or
 *   - a .safetensors file; its config comes from its metadata when it has some (a
 *     "config" entry holding config.json text, as zinc writes it; or GPT-2's n_layer,
 *     n_head, n_embd, n_positions, vocab_size), else from a config.json beside it, else
 *     there is none (zn_hf_config returns NULL and the caller infers the model).
 * Opening reads config.json and the index and checks every shard the index names exists;
 * a shard is opened (its header read) the first time one of its tensors is looked up, and
 * stays open until zn_hf_close. Tensor data is read only by zn_hf_read_rows, with pread:
 * memory use is the headers plus what the caller asks for, never the model.
 * Refused with one line naming the file and the key: config.json missing or malformed
 * (hf_config.h), an index that is not JSON or has no "weight_map" object, a weight_map
 * value that is not a plain file name in the directory, a shard that does not exist, a
 * shard without a tensor the index puts there, and (zn_hf_check_layout) a tensor of the
 * config's layout that is missing, has another shape, or a dtype other than F32/BF16/F16.
 * For GPT-2 a name "transformer.X" is also found as "X" (the hub's gpt2 files).
 *
 * Saving (zn_hf_save) to a path ending in ".safetensors" writes one file with metadata
 * {"format": "pt", "config": config.json text}. Any other path is a directory: config.json,
 * then the tensors in the order given split as huggingface_hub splits them (a tensor that
 * would take a shard past shard_bytes starts the next one; a tensor larger than
 * shard_bytes gets a shard of its own), one shard named model.safetensors and no index,
 * else model-0000K-of-0000N.safetensors and model.safetensors.index.json, all written as
 * transformers writes them. A new directory is built as PATH.tmp.PID and renamed to PATH
 * when complete; into an existing directory each file is replaced atomically (temporary
 * file + rename), the index last, and weight files of an earlier save that the new one
 * does not use (model.safetensors, model-DDDDD-of-DDDDD.safetensors, the index) are
 * removed. A trailing '/' in PATH is dropped.
 */
#ifndef ZN_MODEL_HF_DIR_H
#define ZN_MODEL_HF_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/hf_config.h"
#include "model/safetensors.h"
#include "zinc.h"

#define ZN_HF_DEFAULT_SHARD_BYTES 5000000000ull /* "5GB", transformers' default */

struct zn_hf_src;

/* Opens a directory or a .safetensors file. Returns 0, -errno or -EINVAL (logged). */
int zn_hf_open(struct zn_hf_src **out, const char *path);
void zn_hf_close(struct zn_hf_src *s); /* accepts NULL */

const char *zn_hf_src_path(const struct zn_hf_src *s);
/* The model's config, or NULL for a lone .safetensors file without one. */
const struct zn_hf_config *zn_hf_src_config(const struct zn_hf_src *s);
/* config.json text the config came from (for zn_hf_config_to_json's base), or NULL. */
const char *zn_hf_src_config_json(const struct zn_hf_src *s);

/* Finds tensor name, opening its shard if needed. Returns 0 (*t, and *file when file is
 * not NULL, set), -ENOENT when the checkpoint has no such tensor (not logged), or another
 * negative code (logged: a shard that is malformed or lacks a tensor the index names). */
int zn_hf_find(struct zn_hf_src *s, const char *name, const struct zn_st_tensor **t,
	       const struct zn_st_file **file);

/* Reads rows [row0, row0 + rows) of tensor name (a 1-D tensor: elements; 0-D: row 0) as
 * dtype want into out_h. Returns 0, -ENOENT (logged), -EINVAL or -EIO. */
int zn_hf_read_rows(struct zn_hf_src *s, const char *name, int64_t row0, int64_t rows,
		    enum zn_dtype want, void *out_h);

/* Checks every tensor of the config's layout is present with the layout's shape and a
 * float dtype (F32, BF16, F16). Needs a config. Returns 0 or -EINVAL (logged). */
int zn_hf_check_layout(struct zn_hf_src *s);

/* transformers 5's fused experts: the name of the stack that holds one expert's tensor,
 * as s's family names it (model/family.h hf_fused_name; Llama's: "model.layers.L.{mlp,
 * block_sparse_moe}.experts.X.{gate_proj,up_proj,w1,w3}.weight" is in
 * "model.layers.L.mlp.experts.gate_up_proj" [E, 2 rows, cols], *factor 2, and
 * "...{down_proj,w2}.weight" in "...mlp.experts.down_proj" [E, rows, cols], *factor 1);
 * false without a config, for a family without fused experts, or a name of no expert.
 * zn_hf_check_layout accepts such a stack in place of the experts' own tensors. */
bool zn_hf_fused_expert_name(const struct zn_hf_src *s, const char *name, char *fused,
			     size_t size, int *factor);

/* "5GB" (10^9, as transformers), "500MB", "2GiB" (2^30), "1T", "123" (bytes); units are
 * case-insensitive; K, M, G, T alone mean KB, MB, GB, TB. Returns 0 or -EINVAL (logged,
 * naming flag). */
int zn_hf_parse_size(const char *text, const char *flag, uint64_t *out);

struct zn_hf_save_opts {
	enum zn_dtype dtype;      /* of every tensor written */
	uint64_t shard_bytes;     /* 0: ZN_HF_DEFAULT_SHARD_BYTES */
	const char *base_config;  /* config.json text whose other keys to keep, or NULL */
	const char *what;         /* the flag, for messages; NULL: "saving" */
};

/* Saves count tensors (zn_st_entry: name, shape, data_h or fill; see safetensors.h) with
 * config cfg (its torch_dtype is set from opts->dtype). cfg may be NULL only for a
 * .safetensors path. Returns 0, -EINVAL or the -errno of the failed write. */
/* "model-DDDDD-of-DDDDD.safetensors": a shard's name as transformers writes it */
bool zn_hf_is_shard_name(const char *s);
int zn_hf_save(const char *path, const struct zn_hf_config *cfg,
	       const struct zn_hf_save_opts *opts, const struct zn_st_entry *entries,
	       int count);

#endif
