/* zinc merge: a PEFT LoRA adapter merged into its base, written as a Hugging Face
 * directory, with no training (docs/lora.md, "zinc merge"). Each layer of the base is read
 * (train/train_hf.h's loader), its targets get W + scale B A computed in float64 and rounded
 * once to the output dtype (lora.h: zn_lora_merge_layer), and the layer is streamed to the
 * writer (config.json, shards and index as transformers' save_pretrained writes them),
 * so host memory holds one layer. The output directory's rules are merge_out.h's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "cli/merge_out.h"
#include "train/train_hf.h"
#include "train/train_model.h"
#include "core/args.h"
#include "core/dtype.h"
#include "core/log.h"
#include "model/hf_dir.h"
#include "model/lora/lora.h"
#include "model/safetensors.h"
#include "zinc.h"

struct merge_args {
	const char *init_from, *adapter, *output;
	uint64_t shard_bytes;
	int dtype; /* enum zn_dtype, or -1: the base's */
	bool overwrite;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zinc merge --init-from BASE --adapter DIR --output OUT [options]\n"
		"\n"
		"Merges a LoRA adapter into its base (W + scale B A, in float64) and writes a\n"
		"Hugging Face directory: config.json, the weights (model.safetensors, or shards\n"
		"with model.safetensors.index.json), the base's tokenizer and generation_config.json.\n"
		"No training.\n"
		"\n"
		"  --init-from BASE       the base model: a Hugging Face directory or .safetensors\n"
		"                         file (what zinc train --init-from reads)\n"
		"  --adapter DIR          a PEFT LoRA adapter (adapter_config.json,\n"
		"                         adapter_model.safetensors; zinc train --save-adapter)\n"
		"  --output OUT           the new directory (absent or empty)\n"
		"  --max-shard-size SIZE  largest weights file (default 5GB, as transformers; 500MB,\n"
		"                         2GiB, ...)\n"
		"  --dtype auto|fp32|bf16|fp16  the weights' dtype (default auto: the base's)\n"
		"  --overwrite            replace an earlier merge's output at OUT\n");
}

static int parse(struct merge_args *a, int argc, char **argv)
{
	int rc = 0;

	for (int i = 1; i < argc && !rc; i++) {
		const char *f = argv[i], *v;

		if (!strcmp(f, "--init-from")) {
			rc = (a->init_from = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--adapter")) {
			rc = (a->adapter = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--output")) {
			rc = (a->output = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--overwrite")) {
			a->overwrite = true;
		} else if (!strcmp(f, "--max-shard-size")) {
			rc = (v = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc && zn_hf_parse_size(v, "--max-shard-size", &a->shard_bytes))
				rc = ZN_EUSAGE;
		} else if (!strcmp(f, "--dtype")) {
			rc = (v = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc && !strcmp(v, "auto"))
				a->dtype = -1;
			else if (!rc && !strcmp(v, "fp32"))
				a->dtype = ZN_DTYPE_F32;
			else if (!rc && !strcmp(v, "bf16"))
				a->dtype = ZN_DTYPE_BF16;
			else if (!rc && !strcmp(v, "fp16"))
				a->dtype = ZN_DTYPE_F16;
			else if (!rc) {
				zn_error("--dtype '%s': give auto, fp32, bf16 or fp16", v);
				rc = ZN_EUSAGE;
			}
		} else {
			zn_cli_unknown_flag("zinc merge", f, usage);
			rc = ZN_EUSAGE;
		}
	}
	if (!rc && (!a->init_from || !a->adapter || !a->output)) {
		zn_error("zinc merge: give --init-from BASE, --adapter DIR and --output OUT");
		rc = ZN_EUSAGE;
	}
	return rc;
}

/* The base's dtype: its tensors' one dtype; when they mix, config.json's torch_dtype;
 * else fp32. */
static enum zn_dtype base_dtype(struct zn_hf_src *src, const struct zn_lora_config *lc)
{
	static const char *const names[] = { "float32", "bfloat16", "float16" };
	const struct zn_hf_config *c = zn_hf_src_config(src);
	int seen = -1;
	bool mixed = false;

	for (int l = 0; l < lc->layers && !mixed; l++)
		for (int t = 0; t < lc->lay[l].base.tensor_count; t++) {
			const struct zn_st_tensor *st;

			if (zn_hf_find(src, lc->lay[l].base.tensors[t].name, &st, NULL) ||
			    st->dtype < 0)
				continue;
			mixed = seen >= 0 && st->dtype != seen;
			seen = st->dtype;
			if (mixed)
				break;
		}
	if (!mixed && seen >= 0)
		return (enum zn_dtype)seen;
	for (int d = 0; c && d < 3; d++)
		if (!strcmp(c->torch_dtype, names[d]))
			return (enum zn_dtype)d;
	return ZN_DTYPE_F32;
}

struct merge {
	struct zn_train_model tm;
	struct zn_lora_config lc;
	struct zn_train_hf_loader *base;
	struct zn_st_file *adapter;
	struct zn_hf_src *src;  /* the base again: its dtype and config.json text */
	enum zn_dtype dtype;
	float *ad;              /* one layer's adapters */
	int merged;             /* adapters merged */
};

/* layer l of the merged model (train_hf.h's writer calls it for l = 0 .. n-1) */
static int merged_layer(void *ctx, int l, float *buf)
{
	struct merge *m = ctx;
	struct zn_layer_desc d;
	int rc = zn_train_hf_load_layer(m->base, l, &m->lc.lay[l].base, buf);

	if (rc || (rc = zn_lora_describe(&m->lc, l, &d)))
		return rc;
	if (d.numel)
		rc = zn_lora_peft_load_layer(m->adapter, &d, m->ad);
	if (!rc && d.numel)
		zn_lora_merge_layer(&m->lc, l, m->ad, buf, m->dtype);
	m->merged += rc ? 0 : m->lc.lay[l].count;
	zn_layer_desc_release(&d);
	return rc;
}

static int open_all(struct merge *m, const struct merge_args *a)
{
	char *rest[1];
	int rn = 0, rc;
	uint64_t most = 0;

	rc = zn_train_model_parse(&m->tm, 0, NULL, a->init_from, NULL, rest, &rn);
	if (!rc) {
		m->lc.base = zn_train_model_get(&m->tm);
		rc = zn_lora_peft_read_config(&m->lc, a->adapter, "--adapter");
	}
	m->lc.dropout = 0;
	if (!rc)
		rc = zn_lora_prepare(&m->lc);
	if (!rc)
		rc = zn_lora_peft_open(&m->lc, a->adapter, &m->adapter);
	if (!rc)
		rc = zn_lora_peft_check_tensors(&m->lc, m->adapter, "--adapter");
	if (rc)
		return ZN_EUSAGE;
	rc = zn_train_hf_loader_open(&m->base, a->init_from, &m->tm);
	if (!rc)
		rc = zn_hf_open(&m->src, a->init_from);
	for (int l = 0; !rc && l < m->lc.layers; l++) {
		struct zn_layer_desc d;

		rc = zn_lora_describe(&m->lc, l, &d);
		most = d.numel > most ? d.numel : most;
		zn_layer_desc_release(&d);
	}
	if (!rc && !(m->ad = malloc(most * sizeof(float) + 1)))
		rc = -ENOMEM;
	if (!rc)
		m->dtype = a->dtype >= 0 ? (enum zn_dtype)a->dtype : base_dtype(m->src, &m->lc);
	return rc;
}

static void close_all(struct merge *m)
{
	free(m->ad);
	zn_hf_close(m->src);
	zn_train_hf_loader_close(m->base);
	zn_st_close(m->adapter);
	zn_lora_release(&m->lc);
}

int zn_cmd_merge(int argc, char **argv)
{
	struct merge_args a = { .dtype = -1 };
	struct merge m;
	struct merge_out mo;
	struct zn_hf_save_opts o;
	int rc, copied = 0;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
	memset(&m, 0, sizeof(m));
	rc = parse(&a, argc, argv);
	/* the destination first: no work is lost to an unusable OUT */
	if (!rc)
		rc = merge_out_check(&mo, a.output, a.init_from, a.adapter, a.overwrite);
	if (!rc)
		rc = open_all(&m, &a);
	if (rc) {
		close_all(&m);
		return rc == ZN_EUSAGE || rc == -EINVAL || rc == -ENOENT ? ZN_EXIT_USAGE : 1;
	}
	o = (struct zn_hf_save_opts){ m.dtype, a.shard_bytes, zn_hf_src_config_json(m.src),
				     "--output" };
	rc = zn_train_hf_write(&m.tm, merged_layer, &m, mo.staging, &o);
	if (!rc)
		rc = merge_out_copy(&mo, a.init_from, &copied);
	if (!rc)
		rc = merge_out_commit(&mo);
	if (rc)
		merge_out_abort(&mo);
	if (!rc)
		printf("merged %d adapters (r %d, lora_alpha %g%s: scale %.9g) into %s: %s, %d "
		       "tokenizer/generation files copied\n", m.merged, m.lc.r, (double)m.lc.alpha,
		       m.lc.rslora ? ", rsLoRA" : "", zn_lora_scale64(&m.lc), mo.out,
		       zn_dtype_name(m.dtype), copied);
	close_all(&m);
	return rc ? 1 : 0;
}
