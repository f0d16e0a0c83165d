/* zinc generate: the model, its weights, its adapter and its tokenizer from the command
 * line, and the ids that end generation (cmd_generate.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include "cli/cmd_generate.h"
#include "cli/train_hf.h"
#include "core/fsio.h"
#include "core/log.h"
#include "model/safetensors.h"
#include "sched/ckpt.h"
#include "zinc.h"

static bool is_file(const char *dir, const char *name)
{
	char p[4096];
	struct stat st;

	if (snprintf(p, sizeof(p), "%s/%s", dir, name) >= (int)sizeof(p))
		return false;
	return !stat(p, &st) && S_ISREG(st.st_mode);
}

static bool is_dir(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

static int model_flags(struct zn_gen_model *gm, const char *init_from, int argc, char **argv)
{
	char *rest[256];
	int rn = 0, rc;

	if (argc > 256) {
		zn_error("zinc generate: too many arguments");
		return ZN_EUSAGE;
	}
	rc = zn_train_model_parse(&gm->tm, argc, argv, init_from, NULL, rest, &rn);
	if (!rc && rn > 0) {
		zn_error("zinc generate: unknown option '%s' (zinc generate --help lists them)",
			 rest[0]);
		rc = ZN_EUSAGE;
	}
	gm->m = zn_train_model_get(&gm->tm);
	return rc;
}

static int open_checkpoint(struct zn_gen_model *gm, const char *path, int argc, char **argv)
{
	const struct zn_ckpt_info *info;
	int rc = model_flags(gm, NULL, argc, argv);

	if (!rc)
		rc = zn_ckpt_open(&gm->ck, path, "--init-from");
	if (rc)
		return rc;
	info = zn_ckpt_info(gm->ck);
	rc = zn_ckpt_check(gm->ck, &gm->m, info->global_micro, info->seq, NULL);
	if (rc) {
		zn_error("zinc generate: --init-from %s is a zinc checkpoint: give the model flags "
			 "the run was trained with (--model, --layers, --seq, ...)", path);
		return rc;
	}
	gm->init_layer = zn_ckpt_init_layer;
	gm->init_ctx = gm->ck;
	return 0;
}

/* the directory holding tokenizer.json for the model at path, or NULL */
static const char *own_tokenizer(const char *path, char *buf, size_t size)
{
	char *slash;

	if (is_dir(path))
		return is_file(path, "tokenizer.json") ? path : NULL;
	snprintf(buf, size, "%s", path);
	slash = strrchr(buf, '/');
	if (slash)
		*slash = 0;
	else
		snprintf(buf, size, ".");
	return is_file(buf, "tokenizer.json") ? buf : NULL;
}

static int open_tokenizer(struct zn_gen_model *gm, const char *init_from, const char *tokenizer,
			  bool checkpoint)
{
	const int vocab = zn_train_model_vocab(&gm->tm);
	char buf[4096];
	const char *src = tokenizer;
	int rc;

	if (tokenizer && !strcmp(tokenizer, "bytes")) {
		if (vocab < 256) {
			zn_error("zinc generate: --tokenizer bytes needs a vocabulary of at least "
				 "256; the model's is %d", vocab);
			return ZN_EUSAGE;
		}
		gm->bytes = true;
		return 0;
	}
	if (!src && !checkpoint)
		src = own_tokenizer(init_from, buf, sizeof(buf));
	if (!src) {
		zn_error("zinc generate: --init-from %s has no tokenizer.json%s: pass --tokenizer "
			 "DIR|FILE (the model's Hugging Face tokenizer.json), or --tokenizer bytes "
			 "for a byte-level model trained on text (vocabulary 256, zinc train "
			 "--data file.txt)", init_from, checkpoint ? " (a checkpoint)" : " beside it");
		return ZN_EUSAGE;
	}
	gm->tok_path = src == buf ? init_from : src;
	rc = zn_tok_load(&gm->tok, src);
	if (rc) {
		zn_error("zinc generate: the tokenizer %s could not be read (above)", src);
		return rc;
	}
	if (zn_tok_vocab(gm->tok) > vocab) {
		zn_error("zinc generate: the tokenizer %s has %lld ids, the model's vocabulary %d: "
			 "it is another model's tokenizer (pass the right --tokenizer)", src,
			 (long long)zn_tok_vocab(gm->tok), vocab);
		return ZN_EUSAGE;
	}
	return 0;
}

int zn_gen_model_open(struct zn_gen_model *gm, const char *init_from, const char *tokenizer,
		      int argc, char **argv)
{
	bool ckpt;
	int rc;

	memset(gm, 0, sizeof(*gm));
	if (!init_from) {
		zn_error("zinc generate: --init-from PATH is required (a Hugging Face model "
			 "directory or .safetensors file, or a zinc checkpoint directory)");
		return ZN_EUSAGE;
	}
	ckpt = is_dir(init_from) &&
	       (is_file(init_from, ZN_CKPT_META) || is_file(init_from, ZN_CKPT_LATEST));
	if (ckpt) {
		rc = open_checkpoint(gm, init_from, argc, argv);
	} else {
		rc = model_flags(gm, init_from, argc, argv);
		if (!rc)
			rc = zn_train_hf_loader_open(&gm->hf, init_from, &gm->tm);
		gm->init_layer = zn_train_hf_load_layer;
		gm->init_ctx = gm->hf;
	}
	if (!rc)
		rc = open_tokenizer(gm, init_from, tokenizer, ckpt);
	return rc;
}

void zn_gen_model_close(struct zn_gen_model *gm)
{
	zn_st_close(gm->adapter);
	zn_lora_release(&gm->lc);
	zn_train_hf_loader_close(gm->hf);
	zn_ckpt_close(gm->ck);
	zn_tok_free(gm->tok);
	memset(gm, 0, sizeof(*gm));
}

/* the chat turn of --template: rendered (data/sft.h), then tokenized as it is */
static int encode_chat(const struct zn_gen_model *gm, const struct gen_args *a,
		       struct zn_tok_scratch *s, struct zn_ids *ids)
{
	char *text = NULL;
	size_t n = 0;
	int rc;

	if (gm->bytes) {
		zn_error("zinc generate: --template %s needs the model's Hugging Face tokenizer "
			 "(its special tokens), not --tokenizer bytes", zn_sft_template_name(a->tmpl));
		return ZN_EUSAGE;
	}
	rc = zn_sft_check(gm->tok, a->tmpl, gm->tok_path);
	if (!rc)
		rc = zn_sft_render_prompt(gm->tok, a->tmpl, a->system, a->prompt, &text, &n);
	if (!rc)
		rc = zn_tok_encode(gm->tok, s, text, n, ids);
	free(text);
	return rc;
}

int zn_gen_model_encode(const struct zn_gen_model *gm, const struct gen_args *a,
			struct zn_ids *ids)
{
	struct zn_tok_scratch *s = NULL;
	int rc = 0;

	if (gm->bytes && a->tmpl == ZN_SFT_NONE) {
		for (const unsigned char *p = (const unsigned char *)a->prompt; *p && !rc; p++)
			rc = zn_ids_push(ids, *p);
		return rc;
	}
	if (!gm->bytes) {
		s = zn_tok_scratch_new(gm->tok);
		if (!s)
			return -ENOMEM;
	}
	if (a->tmpl != ZN_SFT_NONE) {
		rc = encode_chat(gm, a, s, ids);
	} else {
		if (zn_tok_adds_bos(gm->tok) && zn_tok_bos(gm->tok) >= 0)
			rc = zn_ids_push(ids, zn_tok_bos(gm->tok));
		if (!rc)
			rc = zn_tok_encode(gm->tok, s, a->prompt, strlen(a->prompt), ids);
	}
	zn_tok_scratch_free(s);
	return rc;
}

int zn_gen_model_piece(const struct zn_gen_model *gm, int id, char *buf, size_t size)
{
	int k;

	if (gm->bytes) {
		if (id > 255 || !size)
			return 0;
		buf[0] = (char)id;
		return 1;
	}
	if (zn_tok_is_special(gm->tok, id))
		return 0;
	k = zn_tok_decode_one(gm->tok, id, buf, size);
	return k < 0 ? 0 : k;
}

bool zn_gen_model_is_stop(const struct zn_gen_model *gm, int id)
{
	for (int i = 0; i < gm->n_stop_ids; i++)
		if (gm->stop_ids[i] == id)
			return true;
	return false;
}

static void add_stop(struct zn_gen_model *gm, int64_t id)
{
	if (id < 0 || id > INT32_MAX || zn_gen_model_is_stop(gm, (int)id) ||
	    gm->n_stop_ids >= ZN_GEN_MAX_STOP_IDS)
		return;
	gm->stop_ids[gm->n_stop_ids++] = (int32_t)id;
}

/* eos_token_id of dir/name: a number or a list of them (Llama 3 Instruct's generation
 * config lists <|end_of_text|>, <|eom_id|> and <|eot_id|>). 1: the key was there; 0: no
 * file or no key; < 0: a file that is not JSON. */
static int eos_ids_of(struct zn_gen_model *gm, const char *dir, const char *name)
{
	char path[ZN_PATH_MAX + 32], *text = NULL;
	const cJSON *v, *it, *list;
	cJSON *j;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path) ||
	    !is_file(dir, name))
		return 0;
	if (zn_read_input_file(path, "--init-from", 1 << 24, &text, NULL))
		return -EINVAL;
	j = cJSON_Parse(text);
	free(text);
	if (!j) {
		zn_error("zinc generate: %s is not JSON", path);
		return -EINVAL;
	}
	v = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
	list = cJSON_IsArray(v) ? v : NULL;
	if (cJSON_IsNumber(v))
		add_stop(gm, (int64_t)v->valuedouble);
	cJSON_ArrayForEach(it, list)
		if (cJSON_IsNumber(it))
			add_stop(gm, (int64_t)it->valuedouble);
	cJSON_Delete(j);
	return v && !cJSON_IsNull(v) ? 1 : 0;
}

int zn_gen_model_stops(struct zn_gen_model *gm, const struct gen_args *a)
{
	char dir[4096];
	int rc = 0;

	gm->n_stop_ids = 0;
	if (a->ignore_eos || gm->bytes)
		return 0;
	add_stop(gm, zn_tok_eos(gm->tok));
	/* what transformers' generate() stops at: generation_config.json, else the model
	 * config's eos_token_id (GenerationConfig.from_model_config); a checkpoint has none */
	if (!gm->ck) {
		snprintf(dir, sizeof(dir), "%s", a->init_from);
		if (!is_dir(dir)) {
			char *slash = strrchr(dir, '/');

			if (slash)
				*slash = 0;
			else
				snprintf(dir, sizeof(dir), ".");
		}
		rc = eos_ids_of(gm, dir, "generation_config.json");
		if (rc == 0)
			rc = eos_ids_of(gm, dir, "config.json");
	}
	if (rc >= 0 && a->tmpl != ZN_SFT_NONE)
		add_stop(gm, zn_sft_end_of_turn(gm->tok, a->tmpl));
	return rc < 0 ? ZN_EUSAGE : 0;
}

int zn_gen_model_load_adapter(void *ctx, int l, const struct zn_layer_desc *L, float *out_h)
{
	const struct zn_gen_model *gm = ctx;

	(void)l;
	return zn_lora_peft_load_layer(gm->adapter, L, out_h);
}

int zn_gen_model_adapter(struct zn_gen_model *gm, const char *dir)
{
	int rc;

	gm->lc.base = gm->m;
	rc = zn_lora_peft_read_config(&gm->lc, dir, "--adapter");
	gm->lc.dropout = 0; /* inference: PEFT's eval mode */
	if (!rc)
		rc = zn_lora_prepare(&gm->lc);
	if (!rc)
		rc = zn_lora_peft_open(&gm->lc, dir, &gm->adapter);
	if (!rc)
		rc = zn_lora_peft_check_tensors(&gm->lc, gm->adapter, "--adapter");
	if (rc) {
		zn_error("zinc generate: --adapter %s: give a PEFT LoRA adapter of this model "
			 "(zinc train --save-adapter DIR writes one)", dir);
		return ZN_EUSAGE;
	}
	gm->lora = true;
	return 0;
}
