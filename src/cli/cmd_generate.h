/* zinc generate, internal to src/cli (docs/generate.md): its options (cmd_generate.c), the
 * model, adapter and tokenizer it loads (cmd_generate_load.c: --init-from, a Hugging Face
 * directory or .safetensors file, zinc's --save-final output included, or a zinc
 * checkpoint directory with the run's model flags; --adapter, a PEFT directory applied
 * unmerged; --tokenizer, else the model's own tokenizer.json, "bytes" for a byte-level
 * model) and the generation loop (cmd_generate_run.c). */
#ifndef ZN_CLI_CMD_GENERATE_H
#define ZN_CLI_CMD_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "train/train_model.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "model/lora/lora.h"
#include "model/model.h"
#include "sched/generate.h"
#include "zinc.h"

#define ZN_GEN_MAX_STOPS 16
#define ZN_GEN_MAX_STOP_IDS 16

struct gen_args {
	const char *init_from, *prompt, *tokenizer, *nvme_path, *adapter, *system;
	const char *stops[ZN_GEN_MAX_STOPS]; /* --stop TEXT, repeatable */
	int n_stops;
	enum zn_sft_template tmpl;          /* --template; ZN_SFT_NONE: plain text */
	int max_new, top_k, chunk, max_seq, depth;
	float temperature, top_p;
	uint64_t seed, device_mem;
	enum zn_gen_home home;
	enum zn_device_kind device;
	bool ignore_eos, print_ids;
	bool nf4, double_quant; /* --quantize-base nf4, --double-quant (docs/qlora.md) */
};

struct zn_train_hf_loader;
struct zn_ckpt_dir;
struct zn_st_file;

struct zn_gen_model {
	struct zn_train_model tm;
	struct zn_model m;
	struct zn_train_hf_loader *hf;
	struct zn_ckpt_dir *ck;
	int (*init_layer)(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h);
	void *init_ctx;
	struct zn_tok *tok;   /* NULL with bytes */
	const char *tok_path; /* where it came from, for messages */
	bool bytes;           /* --tokenizer bytes: token = byte */
	/* --adapter: the LoRA configuration on m and the adapter file */
	bool lora;
	struct zn_lora_config lc;
	struct zn_st_file *adapter;
	/* ids that end generation: the tokenizer's EOS, generation_config.json's eos_token_id
	 * (one or a list; else config.json's), the template's end of turn (zn_gen_model_stops) */
	int32_t stop_ids[ZN_GEN_MAX_STOP_IDS];
	int n_stop_ids;
};

/* argv[0 .. argc): the model flags only. 0 or ZN_EUSAGE / a negative code (logged). */
int zn_gen_model_open(struct zn_gen_model *gm, const char *init_from, const char *tokenizer,
		      int argc, char **argv);
/* --adapter DIR: adapter_config.json's r, lora_alpha, use_rslora and targets on the model
 * (dropout off: inference), and its adapter_model.safetensors. */
int zn_gen_model_adapter(struct zn_gen_model *gm, const char *dir);
/* zn_gen_opts.init_adapter, ctx the zn_gen_model */
int zn_gen_model_load_adapter(void *ctx, int l, const struct zn_layer_desc *L, float *out_h);
/* Fills stop_ids for a run of a (its template; none with --ignore-eos). */
int zn_gen_model_stops(struct zn_gen_model *gm, const struct gen_args *a);
void zn_gen_model_close(struct zn_gen_model *gm);
/* zinc generate --help's text (cmd_generate.c). */
void zn_generate_usage(FILE *f);
/* The prompt's ids: plain text (the tokenizer's BOS first when it adds one), or with
 * --template the chat turn it renders with --system (data/sft.h: BOS from the template,
 * none added). */
int zn_gen_model_encode(const struct zn_gen_model *gm, const struct gen_args *a,
			struct zn_ids *ids);
/* The text of one generated id appended to buf (special tokens: nothing); its length. */
int zn_gen_model_piece(const struct zn_gen_model *gm, int id, char *buf, size_t size);
bool zn_gen_model_is_stop(const struct zn_gen_model *gm, int id);

/* The generation loop: prefill, decode, text out, figures (cmd_generate_run.c). */
int zn_gen_run(const struct gen_args *a, struct zn_gen_model *gm);

#endif
