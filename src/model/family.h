/* The model-family registry: everything zinc knows about a family outside the family's own
 * folder (src/model/<family>/) is one struct zn_family, and the registry (families.c) is
 * the list of them. Nothing else in zinc names a family: config.json parsing and writing
 * (hf_config.h), the checkpoint layout and parameter count, zinc train / estimate /
 * generate / merge's model (src/train/train_model.h), lone .safetensors files, LoRA's
 * target names and PEFT's fan_in_fan_out all go through these entries.
 *
 * A family is one folder and one entry. Its Hugging Face model_types (each with the
 * architecture transformers writes for it) are its variants: the llama family reads
 * llama, qwen2, mistral and qwen3; a zn_hf_config names its family and variant (type).
 * The family's model configuration is its own struct, at most ZN_FAMILY_CONFIG_BYTES,
 * which the hooks below receive as void *.
 *
 * Adding a family (docs/model.md "Adding a family"): write src/model/<name>/ with its
 * struct zn_model_ops (model.h) and a const struct zn_family zn_<name>_family filling the
 * required hooks, then add &zn_<name>_family to the list in families.c.
 *
 *     int type;
 *     const struct zn_family *f = zn_family_of_model_type("qwen2", &type);
 *     f->types[type].architecture;             // "Qwen2ForCausalLM"
 */
#ifndef ZN_MODEL_FAMILY_H
#define ZN_MODEL_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "zinc.h"

#define ZN_FAMILY_CONFIG_BYTES 2048 /* the largest family configuration struct */

struct cJSON;
struct zn_hf_config;
struct zn_hf_keys;
struct zn_hf_emit;
struct zn_st_file;
struct zn_st_entry;

/* One config.json model_type the family reads. */
struct zn_hf_type {
	const char *model_type;   /* "qwen2" */
	const char *architecture; /* architectures[0] as transformers writes it */
};

/* What --model-config / --init-from hand a family: the file's config (NULL: a lone
 * .safetensors file without one, handed to the family with file ops) and the command's model
 * flags, of which the family takes what it allows and moves the rest, in order, to rest
 * (counted in *rest_count). */
struct zn_family_source {
	const struct zn_hf_config *hf;
	const char *flag; /* "--init-from" or "--model-config" */
	const char *path;
	int argc;
	char **argv;
	char **rest;
	int *rest_count;
};

/* A family whose checkpoints may be a lone .safetensors file that carries its shapes in
 * metadata of its own (GPT-2's, as llm.c writes them) rather than config.json text. */
struct zn_family_file_ops {
	/* config.json text from the file's metadata into buf: 1 written, 0 not this
	 * family's metadata */
	int (*metadata_config)(const struct zn_st_file *f, char *buf, size_t size);
	/* layer l of such a file (ld: every layer's descriptor, n of them) */
	int (*load_layer)(const struct zn_st_file *f, const void *config,
			  const struct zn_layer_desc *ld, int n, int l, float *params_h);
	/* writes entries[0 .. count) to path as one file with the family's metadata */
	int (*save)(const void *config, const char *path, enum zn_dtype dtype,
		    const struct zn_st_entry *entries, int count);
};

struct zn_family {
	const char *name; /* the folder and the model ops' family ("llama") */
	const struct zn_hf_type *types;
	int type_count;
	const char *const *(*presets)(void); /* --model names, NULL-terminated */
	const char *flags_help;          /* the model flags from_flags takes, for --help */
	const char *const *lora_targets; /* PEFT module names ("all-linear"), NULL-terminated */
	bool conv1d;                     /* weights stored [in, out]: PEFT's fan_in_fan_out */
	/* RoPE positions: the training length is not part of the weights, so a resumed run
	 * may change --seq (else it must match the checkpoint's) */
	bool seq_free;
	const char *hf_prefix; /* a name prefix hub checkpoints may drop ("transformer."), or
				* NULL */
	const char *const *hf_buffers; /* name suffixes of non-parameter tensors checkpoints
					* carry (masks, inv_freq), NULL-terminated */
	/* optional (NULL: none): transformers 5's fused experts. hf_fused_name: the stack
	 * that holds one expert's checkpoint tensor into fused, *factor its rows per expert
	 * over the tensor's (2: gate and up stacked), false when name is no expert's;
	 * hf_fused_stack: is name such a stack (a tensor the layout does not list that a
	 * file may hold in place of the experts' own) */
	bool (*hf_fused_name)(const char *name, char *fused, size_t size, int *factor);
	bool (*hf_fused_stack)(const char *name);
	size_t config_bytes;           /* sizeof the family's configuration */

	/* config.json (model/hf_family.h has the helpers): the family's keys into out
	 * (out->family and out->type set), checked key by key; writing them into o; the
	 * tensors in checkpoint order; Hugging Face's num_parameters() */
	int (*hf_parse)(const struct zn_hf_keys *c, struct zn_hf_config *out);
	int (*hf_write)(struct cJSON *o, const struct zn_hf_config *c);
	void (*hf_layout)(const struct zn_hf_config *c, struct zn_hf_emit *e);
	uint64_t (*hf_param_count)(const struct zn_hf_config *c);

	/* The model configuration (void *config: config_bytes). From the model flags alone
	 * (--model NAME, one of presets, or the family's default, then single fields); from a
	 * config (src->hf set); back to config.json fields. Validated; 0 or -EINVAL (logged,
	 * naming the flag or key). */
	int (*from_flags)(void *config, int argc, char **argv, char **rest, int *rest_count);
	int (*from_source)(void *config, const struct zn_family_source *src);
	void (*to_hf)(const void *config, struct zn_hf_config *hf);
	struct zn_model (*model)(const void *config);
	uint64_t (*param_count)(const void *config); /* as Hugging Face counts them */
	/* one line for people ("llama, 2 layers, ..."), and "model.KEY=VALUE\n" lines every
	 * rank and a resumed run must agree on */
	void (*line)(const void *config, char *buf, size_t size);
	void (*text)(const void *config, char *buf, size_t size);

	const struct zn_family_file_ops *file; /* optional */
	/* optional: the parameters and largest layer of a model of the family shaped by
	 * `zinc estimate --fit`'s flags alone (no --model); the registry's first family's is
	 * used. Pure. */
	void (*shape_params)(int layers, int hidden, int vocab, int seq, uint64_t *params,
			     uint64_t *largest);
};

/* The registry, in order; the first is the default (no --model, no config). */
int zn_family_count(void);
const struct zn_family *zn_family_at(int i);
/* By name ("llama", the model ops' family), by config.json model_type (*type: its index in
 * types), by --model preset name; NULL when none has it. */
const struct zn_family *zn_family_by_name(const char *name);
const struct zn_family *zn_family_of_model_type(const char *model_type, int *type);
const struct zn_family *zn_family_of_preset(const char *name);
/* "gpt2, llama, qwen2, mistral and qwen3": every model_type, for messages */
void zn_family_model_types(char *buf, size_t size);
/* every family's presets, "GPT-2: tiny, ...; llama: ...", for messages */
void zn_family_preset_list(char *buf, size_t size);
/* Is name a LoRA target of any family? */
bool zn_family_lora_target_known(const char *name);

#endif
