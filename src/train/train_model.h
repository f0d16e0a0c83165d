/* The model a zinc command works on, whichever registered family it is (model/family.h),
 * chosen from the command line. Internal to zinc (src/train); zinc train
 * and zinc estimate share it, so both take the same model flags.
 *
 * Where the model comes from, first match:
 *   --init-from PATH     a Hugging Face directory or .safetensors file: its config.json (or
 *                        metadata) defines the model (its model_type names the
 *                        family); a lone GPT-2 file without one: its shapes (train_hf.h)
 *   --model-config PATH  a config.json (or a directory holding one): its shapes, seeded init
 *   --model NAME         a preset of any family (llama-tiny, llama-3-8b, ...: llama.h;
 *                        tiny, small, gpt2, ...: gpt2.h); default: the registry's first
 *                        family's default, GPT-2 "small"
 * then the model flags override single fields: GPT-2 --layers --heads --d-model --seq
 * --vocab --padded-vocab; Llama --layers --heads --kv-heads --d-model --head-dim
 * --intermediate --seq --vocab --tied-embeddings. With --init-from or --model-config a
 * Llama model takes only --seq (the training length); GPT-2 only --heads (checked against
 * the file) and --seq.
 */
#ifndef ZN_TRAIN_MODEL_H
#define ZN_TRAIN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/family.h"
#include "model/hf_config.h"

struct zn_train_model {
	const struct zn_family *fam;
	/* the family's configuration struct (fam->config_bytes) */
	_Alignas(16) unsigned char config[ZN_FAMILY_CONFIG_BYTES];
};

/* Reads the model from init_from / model_config / the flags in argv[0 .. argc) (see above);
 * flags that are not model flags go, in order, to rest (argc slots), counted in *rest_count.
 * Returns 0 or -EINVAL (logged, naming the flag, file or key). */
int zn_train_model_parse(struct zn_train_model *tm, int argc, char **argv,
			 const char *init_from, const char *model_config, char **rest,
			 int *rest_count);

/* { ops, config } pointing into tm: tm must outlive its users; { NULL, NULL } for a model
 * whose parse failed. */
struct zn_model zn_train_model_get(const struct zn_train_model *tm);

int zn_train_model_seq(const struct zn_train_model *tm);
int zn_train_model_vocab(const struct zn_train_model *tm);
int zn_train_model_width(const struct zn_train_model *tm);
/* Parameters as Hugging Face counts them; largest layer (floats of its flat buffer). */
uint64_t zn_train_model_params(const struct zn_train_model *tm);
uint64_t zn_train_model_largest_layer(const struct zn_train_model *tm);

/* The config.json fields of the model (the family's to_hf). */
void zn_train_model_hf(const struct zn_train_model *tm, struct zn_hf_config *hf);

/* The family's line: "2 layers, 4 heads, d_model 64, vocab 256, seq 16" (GPT-2) or "llama,
 * 2 layers, 4 heads (2 kv), head_dim 16, hidden 64, intermediate 128, vocab 256, seq 64,
 * untied" */
void zn_train_model_line(const struct zn_train_model *tm, char *buf, size_t size);
/* "model.layers=2\n..." lines every rank must agree on */
void zn_train_model_text(const struct zn_train_model *tm, char *buf, size_t size);

/* The model of a command line of model flags only (--init-from and --model-config
 * included; anything else is refused); *init_from_out (may be NULL): --init-from's value,
 * pointing into argv, or NULL. 0 or -EINVAL / -ENOMEM (logged). */
int zn_train_model_from_flags(int argc, char **argv, struct zn_train_model *out,
			      const char **init_from_out);

/* zinc estimate --fit's model: argv holds only model flags (--init-from and --model-config
 * included). Sets the parameter count, the largest layer and the model line. Returns 0 or
 * -EINVAL (logged). */
int zn_train_model_size(int argc, char **argv, uint64_t *params, uint64_t *largest,
			char *line, size_t size);

#endif
