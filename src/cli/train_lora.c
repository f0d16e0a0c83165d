/* zinc train's LoRA flags, loading and saving (train_lora.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/train_lora.h"
#include "cli/util.h"
#include "core/log.h"
#include "model/safetensors.h"

static int float_flag(int n, char **rest, int *i, float lo, float hi, float *out)
{
	const char *v = zn_cli_value(n, rest, i), *a = rest[*i - 1];
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
			rc = zn_cli_int(*n, rest, &i, 1, 1 << 16, &tl->lc.r);
			tl->on = true;
		} else if (!strcmp(a, "--lora-alpha")) {
			rc = float_flag(*n, rest, &i, 1e-6f, 1e9f, &tl->lc.alpha);
		} else if (!strcmp(a, "--lora-dropout")) {
			rc = float_flag(*n, rest, &i, 0.0f, 1.0f, &tl->lc.dropout);
		} else if (!strcmp(a, "--lora-targets")) {
			const char *v = zn_cli_value(*n, rest, &i);

			rc = v ? (zn_lora_add_targets(&tl->lc, v) ? ZN_EUSAGE : 0) : ZN_EUSAGE;
		} else if (!strcmp(a, "--use-rslora")) {
			tl->lc.rslora = true;
		} else if (!strcmp(a, "--merge-adapter")) {
			tl->merge = true;
		} else if (!strcmp(a, "--save-adapter") || !strcmp(a, "--init-adapter")) {
			const char *v = zn_cli_value(*n, rest, &i);

			if (!v)
				return ZN_EUSAGE;
			if (a[2] == 's')
				tl->save_adapter = v;
			else
				tl->init_adapter = v;
		} else {
			rest[m++] = rest[i];
		}
	}
	*n = m;
	return rc;
}

int zn_train_lora_check(const struct zn_train_lora *tl, const char *save_final)
{
	bool any = tl->lc.alpha > 0 || tl->lc.target_count || tl->lc.dropout > 0 ||
		   tl->lc.rslora || tl->merge || tl->save_adapter || tl->init_adapter;

	if (!tl->on && any) {
		zn_error("LoRA flags given without --lora-r: add --lora-r R (e.g. --lora-r 8 "
			 "--lora-alpha 16 --lora-targets q_proj,v_proj)");
		return ZN_EUSAGE;
	}
	if (!tl->on)
		return 0;
	if (!tl->lc.target_count) {
		zn_error("--lora-r: give the modules with --lora-targets (Llama: q_proj,k_proj,"
			 "v_proj,o_proj,gate_proj,up_proj,down_proj; GPT-2: c_attn,c_proj,c_fc)");
		return ZN_EUSAGE;
	}
	if (save_final && !tl->merge) {
		zn_error("--save-final with LoRA writes the merged model: add --merge-adapter "
			 "(or save the adapters alone with --save-adapter DIR)");
		return ZN_EUSAGE;
	}
	if (tl->merge && save_final &&
	    (strlen(save_final) < 12 ||
	     strcmp(save_final + strlen(save_final) - 12, ".safetensors"))) {
		zn_error("--merge-adapter --save-final %s: the merged model is one file: give a "
			 "path ending in .safetensors", save_final);
		return ZN_EUSAGE;
	}
	if (tl->merge && !save_final) {
		zn_error("--merge-adapter: give the merged model's file with --save-final "
			 "FILE.safetensors");
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

int zn_train_lora_setup(struct zn_train_lora *tl, struct zn_model *model,
			struct zn_engine_options *eo, uint64_t seed)
{
	int rc;

	if (!tl->on)
		return 0;
	if (tl->lc.alpha <= 0)
		tl->lc.alpha = (float)tl->lc.r; /* PEFT's default is 8 with r 8: scale 1 */
	tl->lc.base = *model;
	tl->seed = seed;
	rc = zn_lora_prepare(&tl->lc);
	if (!rc && tl->init_adapter)
		rc = zn_lora_peft_open(&tl->lc, tl->init_adapter, &tl->adapter);
	if (rc)
		return ZN_EUSAGE;
	tl->base_load = eo->init_params_h ? NULL : eo->init_layer;
	tl->base_ctx = eo->init_ctx;
	eo->init_params_h = NULL;
	eo->init_layer = init_adapters;
	eo->init_frozen = init_frozen;
	eo->init_ctx = tl;
	*model = zn_lora_model(&tl->lc);
	return 0;
}

static int save_merged(struct zn_train_lora *tl, struct zn_engine *e, float **ad,
		       const char *path, enum zn_dtype dtype)
{
	const struct zn_lora_config *c = &tl->lc;
	int n = c->layers, rc = 0;
	float **w = calloc((size_t)n, sizeof(*w));
	struct zn_layer_desc *bd = calloc((size_t)n, sizeof(*bd));

	if (!w || !bd)
		rc = -ENOMEM;
	for (int l = 0; !rc && l < n; l++) {
		bd[l] = c->lay[l].base;
		w[l] = malloc((bd[l].numel + 1) * sizeof(float));
		rc = w[l] ? zn_engine_read_frozen(e, l, w[l]) : -ENOMEM;
		if (!rc)
			zn_lora_merge_layer(c, l, ad[l], w[l]);
	}
	if (!rc && !c->base.ops->save) {
		zn_error("--merge-adapter: model %s cannot be saved", c->base.ops->family);
		rc = -EINVAL;
	}
	if (!rc && zn_engine_rank(e) == 0)
		rc = c->base.ops->save(c->base.config, bd, (const float *const *)w, path, dtype);
	for (int l = 0; w && l < n; l++)
		free(w[l]);
	free(w);
	free(bd);
	return rc;
}

int zn_train_lora_save(struct zn_train_lora *tl, struct zn_engine *e, const char *save_final,
		       enum zn_dtype dtype, const char *base_name)
{
	int n = zn_engine_layer_count(e), rc = 0;
	float **ad = calloc((size_t)n, sizeof(*ad));

	if (!tl->save_adapter && !(tl->merge && save_final)) {
		free(ad);
		return 0;
	}
	if (!ad)
		return -ENOMEM;
	/* collective: every rank reads every layer */
	for (int l = 0; !rc && l < n; l++) {
		ad[l] = malloc((zn_engine_layer_numel(e, l) + 1) * sizeof(float));
		rc = ad[l] ? zn_engine_read_layer(e, l, ad[l]) : -ENOMEM;
	}
	if (!rc && tl->save_adapter && zn_engine_rank(e) == 0)
		rc = zn_lora_save_peft(&tl->lc, (const float *const *)ad, tl->save_adapter,
				       base_name);
	if (!rc && tl->save_adapter && zn_engine_rank(e) == 0)
		printf("saved adapter %s\n", tl->save_adapter);
	if (!rc && tl->merge && save_final)
		rc = save_merged(tl, e, ad, save_final, dtype);
	for (int l = 0; l < n; l++)
		free(ad[l]);
	free(ad);
	return rc;
}

void zn_train_lora_release(struct zn_train_lora *tl)
{
	zn_st_close(tl->adapter);
	tl->adapter = NULL;
	zn_lora_release(&tl->lc);
}
