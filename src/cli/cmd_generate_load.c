/* zinc generate: the model, its weights and its tokenizer from the command line
 * (cmd_generate.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cmd_generate.h"
#include "cli/train_hf.h"
#include "cli/train_recipe.h"
#include "core/log.h"
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

static int model_flags(struct zn_gen_model *gm, const char *init_from,
		       const char *model_config, int argc, char **argv)
{
	char *rest[256];
	int rn = 0, rc;

	if (argc > 256) {
		zn_error("zinc generate: too many arguments");
		return ZN_EUSAGE;
	}
	rc = zn_train_model_parse(&gm->tm, argc, argv, init_from, model_config, rest, &rn);
	if (!rc && rn > 0) {
		zn_error("zinc generate: unknown option '%s' (zinc generate --help lists them)",
			 rest[0]);
		rc = ZN_EUSAGE;
	}
	gm->m = zn_train_model_get(&gm->tm);
	return rc;
}

/* argv without --model-config FILE (its value in *mc): the model flags as zinc train
 * takes them */
static int take_model_config(int *argc, char **argv, const char **mc)
{
	int m = 0;

	*mc = NULL;
	for (int i = 0; i < *argc; i++) {
		if (!strcmp(argv[i], "--model-config")) {
			if (i + 1 >= *argc) {
				zn_error("--model-config: give a config.json");
				return ZN_EUSAGE;
			}
			*mc = argv[++i];
		} else if (!strncmp(argv[i], "--model-config=", 15)) {
			*mc = argv[i] + 15;
		} else {
			argv[m++] = argv[i];
		}
	}
	*argc = m;
	return 0;
}

/* The model of a checkpoint: recorded in it (train_recipe.h), or the flags given, which
 * must agree with the record; checkpoints of older zinc need the flags. */
static int open_checkpoint(struct zn_gen_model *gm, const char *path, int argc, char **argv)
{
	struct zn_train_recipe r = { .any_seq = true };
	const struct zn_ckpt_info *info;
	int rc = take_model_config(&argc, argv, &r.model_config);

	if (!rc)
		rc = zn_ckpt_open(&gm->ck, path, "--init-from");
	if (rc)
		return rc;
	if (zn_ckpt_get(gm->ck, "run.lora")) {
		zn_error("zinc generate: --init-from %s is a LoRA checkpoint: it holds the adapter "
			 "without the base; write the adapter with zinc train --resume %s "
			 "--data FILE "
			 "--steps %lld --save-adapter DIR, then zinc generate --init-from BASE "
			 "--adapter DIR", path, path, (long long)zn_ckpt_info(gm->ck)->step);
		return ZN_EUSAGE;
	}
	r.flags = argc ? argv : NULL; /* none: zn_train_recipe_fill allocates the record's */
	r.flag_count = argc;
	if (zn_train_recipe_recorded(gm->ck)) {
		char **given = argv;

		rc = zn_train_recipe_fill(gm->ck, &r, NULL, NULL);
		if (!rc)
			rc = model_flags(gm, r.init_from, r.model_config, r.flag_count, r.flags);
		if (!rc)
			rc = zn_train_recipe_check(gm->ck, "--init-from", &r, &gm->tm, NULL, 0);
		if (argc && r.flags == given)
			r.flags = NULL; /* not ours to free */
		zn_train_recipe_release(&r);
		if (rc)
			return rc;
	} else {
		rc = model_flags(gm, NULL, r.model_config, argc, argv);
	}
	if (rc)
		return rc;
	info = zn_ckpt_info(gm->ck);
	rc = zn_ckpt_check(gm->ck, &gm->m, info->global_micro, info->seq, NULL);
	if (rc) {
		zn_error("zinc generate: --init-from %s is a zinc checkpoint of another model: "
			 "give the model flags the run was trained with (--model, --layers, "
			 "--seq, ... or --model-config FILE)", path);
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
		rc = model_flags(gm, init_from, NULL, argc, argv);
		if (!rc)
			rc = zn_train_hf_loader_open(&gm->hf, init_from, &gm->tm);
		gm->init_layer = zn_train_hf_load_layer;
		gm->init_ctx = gm->hf;
	}
	/* a checkpoint of a run from a Hugging Face directory: that directory's tokenizer */
	if (!rc && ckpt && !tokenizer && zn_ckpt_get(gm->ck, "run.model.path") &&
	    is_file(zn_ckpt_get(gm->ck, "run.model.path"), "tokenizer.json"))
		tokenizer = zn_ckpt_get(gm->ck, "run.model.path");
	if (!rc)
		rc = open_tokenizer(gm, init_from, tokenizer, ckpt);
	return rc;
}

void zn_gen_model_close(struct zn_gen_model *gm)
{
	zn_train_hf_loader_close(gm->hf);
	zn_ckpt_close(gm->ck);
	zn_tok_free(gm->tok);
	memset(gm, 0, sizeof(*gm));
}

int zn_gen_model_encode(const struct zn_gen_model *gm, const char *text, struct zn_ids *ids)
{
	struct zn_tok_scratch *s;
	int rc = 0;

	if (gm->bytes) {
		for (const unsigned char *p = (const unsigned char *)text; *p && !rc; p++)
			rc = zn_ids_push(ids, *p);
		return rc;
	}
	if (zn_tok_adds_bos(gm->tok) && zn_tok_bos(gm->tok) >= 0)
		rc = zn_ids_push(ids, zn_tok_bos(gm->tok));
	s = zn_tok_scratch_new(gm->tok);
	if (!s)
		return -ENOMEM;
	if (!rc)
		rc = zn_tok_encode(gm->tok, s, text, strlen(text), ids);
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

int zn_gen_model_eos(const struct zn_gen_model *gm)
{
	return gm->bytes ? -1 : zn_tok_eos(gm->tok);
}
