/* zinc generate's loading (cmd_generate_load.c), internal to src/cli: the model and its
 * weights from --init-from (a Hugging Face directory or .safetensors file, zinc's
 * --save-final output included; or a zinc checkpoint directory, --save-dir's format,
 * with the model flags of the run), and the tokenizer (--tokenizer, else the model's own
 * tokenizer.json; "bytes" for a byte-level model). */
#ifndef ZN_CLI_CMD_GENERATE_H
#define ZN_CLI_CMD_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cli/train_model.h"
#include "data/tokenizer.h"
#include "model/model.h"

struct zn_train_hf_loader;
struct zn_ckpt_dir;

struct zn_gen_model {
	struct zn_train_model tm;
	struct zn_model m;
	struct zn_train_hf_loader *hf;
	struct zn_ckpt_dir *ck;
	int (*init_layer)(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h);
	void *init_ctx;
	struct zn_tok *tok;   /* NULL with bytes */
	bool bytes;           /* --tokenizer bytes: token = byte */
};

/* argv[0 .. argc): the model flags only. 0 or ZN_EUSAGE / a negative code (logged). */
int zn_gen_model_open(struct zn_gen_model *gm, const char *init_from, const char *tokenizer,
		      int argc, char **argv);
void zn_gen_model_close(struct zn_gen_model *gm);
/* zinc generate --help's text (cmd_generate.c). */
void zn_generate_usage(FILE *f);
/* The prompt's ids (the tokenizer's BOS first when it adds one). 0 or a negative code. */
int zn_gen_model_encode(const struct zn_gen_model *gm, const char *text, struct zn_ids *ids);
/* The text of one generated id appended to buf (special tokens: nothing); its length. */
int zn_gen_model_piece(const struct zn_gen_model *gm, int id, char *buf, size_t size);
int zn_gen_model_eos(const struct zn_gen_model *gm); /* -1: none */

#endif
