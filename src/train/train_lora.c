/* zinc train's LoRA flags, loading and saving (train_lora.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "train/train_hf.h"
#include "train/train_lora.h"
#include "core/args.h"
#include "core/log.h"
#include "core/size.h"
#include "model/hf_dir.h"
#include "model/quant/bnb.h"
#include "model/safetensors.h"

static int float_flag(int n, char **rest, int *i, float lo, float hi, float *out)
{
	const char *v = zn_arg_value(n, rest, i), *a = rest[*i - 1];
	char *end = NULL;
	double x;

	if (!v)
		return ZN_EUSAGE;
	x = strtod(v, &end);
	if (!end || *end || !(x >= lo && x < hi)) {
		zn_error("%s '%s': give a number in [%g, %g)", a, v, (double)lo, (double)hi);
		return ZN_EUSAGE;
	}
	*out = (float)x;
	return 0;
}

int zn_train_lora_flags(int *n, char **rest, struct zn_train_lora *tl)
{
	int m = 0, rc = 0;

	tl->lc.alpha = 0;
	for (int i = 0; !rc && i < *n; i++) {
		const char *a = rest[i];

		if (!strcmp(a, "--lora-r")) {
			rc = zn_arg_int(*n, rest, &i, 1, 1 << 16, &tl->lc.r);
			tl->on = true;
		} else if (!strcmp(a, "--lora-alpha")) {
			rc = float_flag(*n, rest, &i, 1e-6f, 1e9f, &tl->lc.alpha);
			tl->alpha_given = true;
		} else if (!strcmp(a, "--lora-dropout")) {
			rc = float_flag(*n, rest, &i, 0.0f, 1.0f, &tl->lc.dropout);
			tl->dropout_given = true;
		} else if (!strcmp(a, "--lora-targets")) {
			const char *v = zn_arg_value(*n, rest, &i);

			rc = v ? (zn_lora_add_targets(&tl->lc, v) ? ZN_EUSAGE : 0) : ZN_EUSAGE;
		} else if (!strcmp(a, "--use-rslora")) {
			tl->lc.rslora = true;
			tl->rslora_given = true;
		} else if (!strcmp(a, "--save-quantized")) {
			tl->save_quantized = zn_arg_value(*n, rest, &i);
			if (!tl->save_quantized)
				return ZN_EUSAGE;
		} else if (!strcmp(a, "--merge-adapter")) {
			tl->merge = true;
		} else if (!strcmp(a, "--save-adapter") || !strcmp(a, "--init-adapter")) {
			const char *v = zn_arg_value(*n, rest, &i);

			if (!v)
				return ZN_EUSAGE;
			if (a[2] == 's') {
				tl->save_adapter = v;
			} else {
				tl->init_adapter = v;
				tl->on = true;
			}
		} else {
			rest[m++] = rest[i];
		}
	}
	*n = m;
	return rc;
}

/* r, lora_alpha and use_rslora that no flag gives come from the adapter; a flag that gives
 * one must agree with it (targets and dropout: zn_lora_peft_apply in setup). */
static int from_adapter(struct zn_train_lora *tl, const struct zn_lora_peft *p)
{
	struct zn_lora_config *c = &tl->lc;
	const char *dir = tl->init_adapter;

	if (c->r && c->r != p->r) {
		zn_error("--lora-r %d but --init-adapter %s has r %d (adapter_config.json): leave "
			 "--lora-r out to take the adapter's, or give --lora-r %d", c->r, dir, p->r,
			 p->r);
		return ZN_EUSAGE;
	}
	if (tl->alpha_given && c->alpha != p->alpha) {
		zn_error("--lora-alpha %g but --init-adapter %s has lora_alpha %g: leave "
			 "--lora-alpha out to take the adapter's", (double)c->alpha, dir,
			 (double)p->alpha);
		return ZN_EUSAGE;
	}
	if (tl->rslora_given && !p->rslora) {
		zn_error("--use-rslora but --init-adapter %s has use_rslora false: leave "
			 "--use-rslora out", dir);
		return ZN_EUSAGE;
	}
	c->r = p->r;
	c->alpha = p->alpha;
	c->rslora = p->rslora;
	return 0;
}

int zn_train_lora_check(struct zn_train_lora *tl, const char *save_final)
{
	bool any = tl->lc.alpha > 0 || tl->lc.target_count || tl->dropout_given ||
		   tl->lc.rslora || tl->merge || tl->save_adapter || tl->init_adapter ||
		   tl->save_quantized;
	struct zn_lora_peft p;

	if (!tl->on && any) {
		zn_error("LoRA flags given without --lora-r: add --lora-r R (e.g. --lora-r 8 "
			 "--lora-alpha 16 --lora-targets q_proj,v_proj), or start from an adapter "
			 "with --init-adapter DIR");
		return ZN_EUSAGE;
	}
	if (!tl->on)
		return 0;
	if (tl->init_adapter && zn_lora_peft_read(tl->init_adapter, "--init-adapter", &p))
		return ZN_EUSAGE;
	if (tl->init_adapter && from_adapter(tl, &p))
		return ZN_EUSAGE;
	if (!tl->lc.target_count && !tl->init_adapter) {
		char list[512];

		zn_lora_target_list(list, sizeof(list));
		zn_error("--lora-r: give the modules with --lora-targets (%s), or an adapter whose "
			 "target_modules to take with --init-adapter DIR", list);
		return ZN_EUSAGE;
	}
	if (save_final && !tl->merge) {
		zn_error("--save-final with LoRA writes the merged model: add --merge-adapter "
			 "(or save the adapters alone with --save-adapter DIR)");
		return ZN_EUSAGE;
	}
	if (tl->merge && !save_final) {
		zn_error("--merge-adapter: give the merged model's destination with --save-final "
			 "DIR (a Hugging Face directory) or FILE.safetensors (to merge a saved "
			 "adapter without training: zinc merge)");
		return ZN_EUSAGE;
	}
	return 0;
}

static int init_frozen(void *ctx, int l, const struct zn_layer_desc *L, float *out)
{
	struct zn_train_lora *tl = ctx;
	const struct zn_layer_desc *bd = &tl->lc.lay[l].base;

	(void)L;
	if (tl->base_load)
		return tl->base_load(tl->base_ctx, l, bd, out);
	tl->lc.base.ops->init(tl->lc.base.config, bd, 0, bd->numel, out, tl->seed);
	return 0;
}

static int init_adapters(void *ctx, int l, const struct zn_layer_desc *L, float *out)
{
	struct zn_train_lora *tl = ctx;

	if (tl->adapter_load)
		return tl->adapter_load(tl->adapter_ctx, l, L, out);
	if (tl->adapter)
		return zn_lora_peft_load_layer(tl->adapter, L, out);
	zn_lora_init_range(&tl->lc, L, 0, L->numel, out, tl->seed);
	return 0;
}

/* The model's name in path: its last part (trailing slashes and ".safetensors"
 * dropped), or its folder's when that is the generic "model" (model.safetensors) */
static void model_name(const char *path, char *out, size_t size)
{
	size_t n = strlen(path);
	const char *p;

	while (n > 1 && path[n - 1] == '/')
		n--;
	p = path + n;
	while (p > path && p[-1] != '/')
		p--;
	if (path + n - p == 17 && !strncmp(p, "model.safetensors", 17) && p > path + 1) {
		n = (size_t)(p - 1 - path);
		p = path + n;
		while (p > path && p[-1] != '/')
			p--;
	}
	n -= (size_t)(p - path);
	if (n > 12 && !strncmp(p + n - 12, ".safetensors", 12))
		n -= 12;
	snprintf(out, size, "%.*s", (int)n, p);
}

static bool same_file(const char *a, const char *b)
{
	struct stat x, y;

	return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* Does base_model_name_or_path `name` (a local path, or a hub id "org/model") name the
 * model at init_from (a directory, or a file in one)? The same file or directory (or
 * init_from's folder), else the same model name (a hub id against a local copy:
 * "meta-llama/Llama-3-8B" and /models/Llama-3-8B), case-insensitively. */
static bool same_base(const char *name, const char *init_from)
{
	char a[256], b[256], dir[ZN_PATH_MAX];
	const char *slash = strrchr(init_from, '/');

	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - init_from) : 1,
		 slash ? init_from : ".");
	if (!strcmp(name, init_from) || same_file(name, init_from) || same_file(name, dir))
		return true;
	model_name(name, a, sizeof(a));
	model_name(init_from, b, sizeof(b));
	return a[0] && !strcasecmp(a, b);
}

static void check_base(const struct zn_train_lora *tl, const char *name, const char *init_from)
{
	if (!name[0])
		return;
	if (!init_from)
		zn_warn("--init-adapter %s: its base_model_name_or_path is '%s', but this run's "
			"base is a seeded initialization (no --init-from): the adapter was trained "
			"on another model", tl->init_adapter, name);
	else if (!same_base(name, init_from))
		zn_warn("--init-adapter %s: its base_model_name_or_path is '%s', but --init-from "
			"is %s: the adapter was trained on another model (check --init-from)",
			tl->init_adapter, name, init_from);
}

/* a 4-bit checkpoint's base layer, as stored (the engine's init_frozen_q4) */
static int init_frozen_q4(void *ctx, int layer, void *extent)
{
	struct zn_train_lora *tl = ctx;

	return tl->base_q4(tl->base_ctx, layer, extent);
}

int zn_train_lora_setup(struct zn_train_lora *tl, struct zn_model *model,
			struct zn_engine_options *eo, uint64_t seed, const char *init_from)
{
	struct zn_lora_peft peft;
	int rc = 0;

	if (!tl->on)
		return 0;
	if (tl->lc.alpha <= 0)
		tl->lc.alpha = (float)tl->lc.r; /* PEFT's default is 8 with r 8: scale 1 */
	tl->lc.base = *model;
	tl->seed = seed;
	tl->base_name = init_from;
	if (tl->init_adapter)
		rc = zn_lora_peft_read(tl->init_adapter, "--init-adapter", &peft);
	if (!rc && tl->init_adapter)
		rc = zn_lora_peft_apply(&tl->lc, &peft, tl->init_adapter, !tl->dropout_given);
	if (!rc)
		rc = zn_lora_prepare(&tl->lc);
	if (!rc && tl->init_adapter)
		rc = zn_lora_peft_open(&tl->lc, tl->init_adapter, &tl->adapter);
	if (rc)
		return ZN_EUSAGE;
	if (tl->init_adapter)
		check_base(tl, peft.base, init_from);
	tl->base_load = eo->init_params_h ? NULL : eo->init_layer;
	tl->base_q4 = eo->init_frozen_q4;
	tl->base_ctx = eo->init_ctx;
	if (eo->init_frozen_q4)
		eo->init_frozen_q4 = init_frozen_q4;
	eo->init_params_h = NULL;
	eo->init_layer = init_adapters;
	eo->init_frozen = init_frozen;
	eo->init_ctx = tl;
	*model = zn_lora_model(&tl->lc);
	return 0;
}

/* the merged model, streamed layer by layer to the writer (train/train_hf.h): each layer's
 * frozen base (whole on every rank) with its adapters merged in float64 */
struct merge_src {
	struct zn_train_lora *tl;
	struct zn_engine *e;
	float **ad;
	enum zn_dtype dtype;
};

static int merged_layer(void *ctx, int l, float *buf)
{
	struct merge_src *m = ctx;
	int rc = zn_engine_read_frozen(m->e, l, buf);

	if (!rc)
		zn_lora_merge_layer(&m->tl->lc, l, m->ad[l], buf, m->dtype);
	return rc;
}

static int save_merged(struct zn_train_lora *tl, struct zn_engine *e, float **ad,
		       const struct zn_train_lora_out *out)
{
	struct merge_src m = { tl, e, ad, out->dtype };
	struct zn_hf_save_opts o = { out->dtype, out->shard_bytes, NULL, "--save-final" };
	struct zn_hf_src *src = NULL;
	int rc;

	if (zn_engine_rank(e) != 0)
		return 0;
	/* the config the run started from, for its other keys */
	if (out->init_from && !zn_hf_open(&src, out->init_from))
		o.base_config = zn_hf_src_config_json(src);
	rc = zn_train_hf_write(out->tm, merged_layer, &m, out->path, &o);
	zn_hf_close(src);
	return rc;
}

/* every layer's adapters, read from the engine (collective: every rank reads every layer)
 * into *out (n arrays; free with free_adapters) */
static int read_adapters(struct zn_engine *e, float ***out)
{
	int n = zn_engine_layer_count(e), rc = 0;
	float **ad = zn_size_calloc((uint64_t)n, sizeof(*ad), "the adapter layers' pointers");

	if (!ad)
		return -ENOMEM;
	for (int l = 0; !rc && l < n; l++) {
		ad[l] = zn_size_calloc(zn_engine_layer_numel(e, l) + 1, sizeof(float),
				       "an adapter layer");
		rc = ad[l] ? zn_engine_read_layer(e, l, ad[l]) : -ENOMEM;
	}
	*out = ad;
	return rc;
}

static void free_adapters(float **ad, int n)
{
	for (int l = 0; ad && l < n; l++)
		free(ad[l]);
	free(ad);
}

int zn_train_lora_save(struct zn_train_lora *tl, struct zn_engine *e,
		       const struct zn_train_lora_out *out)
{
	float **ad = NULL;
	int rc;

	if (!tl->save_adapter && !(tl->merge && out->path))
		return 0;
	rc = read_adapters(e, &ad);
	if (!rc && tl->save_adapter && zn_engine_rank(e) == 0)
		rc = zn_lora_save_peft(&tl->lc, (const float *const *)ad, tl->save_adapter,
				       out->init_from);
	if (!rc && tl->save_adapter && zn_engine_rank(e) == 0)
		printf("saved adapter %s\n", tl->save_adapter);
	if (!rc && tl->merge && out->path)
		rc = save_merged(tl, e, ad, out);
	free_adapters(ad, zn_engine_layer_count(e));
	return rc;
}

int zn_train_lora_ckpt_files(void *ctx, struct zn_engine *e, const char *dir)
{
	struct zn_train_lora *tl = ctx;
	float **ad = NULL;
	int rc = read_adapters(e, &ad);

	if (!rc && zn_engine_rank(e) == 0)
		rc = zn_lora_save_peft(&tl->lc, (const float *const *)ad, dir, tl->base_name);
	free_adapters(ad, zn_engine_layer_count(e));
	return rc;
}

void zn_train_lora_release(struct zn_train_lora *tl)
{
	zn_st_close(tl->adapter);
	tl->adapter = NULL;
	zn_lora_release(&tl->lc);
}

static int read_extent(void *ctx, int l, void *buf)
{
	return zn_engine_read_frozen_q4(ctx, l, buf);
}

int zn_train_lora_save_quantized(struct zn_train_lora *tl, struct zn_engine *e,
				 const struct zn_train_model *tm, const char *init_from,
				 enum zn_dtype stored)
{
	const struct zn_q4_layer *q = zn_engine_frozen_q4(e);
	struct zn_layer_desc *d = NULL;
	struct zn_hf_src *src = NULL;
	struct zn_hf_config hf;
	char *json = NULL;
	int rc = 0;

	if (!q) {
		zn_error("--save-quantized %s writes a 4-bit base: add --quantize-base nf4 (or "
			 "start from a 4-bit checkpoint)", tl->save_quantized);
		return ZN_EUSAGE;
	}
	if (zn_engine_rank(e) != 0)
		return 0; /* the base is whole on every rank: rank 0 writes it */
	if (init_from && !zn_hf_open(&src, init_from) && zn_hf_src_config_json(src))
		json = strdup(zn_hf_src_config_json(src));
	if (!json) {
		zn_train_model_hf(tm, &hf);
		json = zn_hf_config_to_json(&hf, NULL);
	}
	d = zn_size_calloc((uint64_t)tl->lc.layers, sizeof(*d), "the base's descriptors");
	if (!json || !d)
		rc = -ENOMEM;
	for (int l = 0; !rc && l < tl->lc.layers; l++)
		d[l] = tl->lc.lay[l].base;
	if (!rc)
		rc = zn_bnb_save(tl->save_quantized, json, stored, d, q, tl->lc.layers, read_extent,
				 e);
	if (!rc)
		zn_info("saved the 4-bit base to %s (bitsandbytes format)", tl->save_quantized);
	free(d);
	free(json);
	zn_hf_close(src);
	return rc;
}
