/* adapter_config.json read into a LoRA configuration (lora.h: zn_lora_peft_read_config),
 * for the commands that take a PEFT adapter as it is (zinc generate --adapter, zinc merge).
 * Keys absent take PEFT's LoraConfig defaults (r 8, lora_alpha 8); what zinc does not
 * implement is refused by name rather than ignored. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "core/fsio.h"
#include "core/log.h"
#include "model/lora/lora.h"
#include "model/safetensors.h"

static const char *const all_linear[] = { "q_proj", "k_proj", "v_proj", "o_proj",
					  "gate_proj", "up_proj", "down_proj", "c_attn",
					  "c_proj", "c_fc" };

/* a key that changes the adapter in a way zinc does not implement, when it is set */
static const char *unsupported(const cJSON *j)
{
	static const char *const null_keys[] = { "modules_to_save", "layers_to_transform",
						 "layers_pattern", "layer_replication",
						 "exclude_modules", "target_parameters" };
	static const char *const true_keys[] = { "use_dora", "lora_bias" };
	static const char *const empty_keys[] = { "rank_pattern", "alpha_pattern" };
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "peft_type");

	if (v && !(cJSON_IsString(v) && !strcmp(v->valuestring, "LORA")))
		return "peft_type (zinc reads LORA adapters)";
	v = cJSON_GetObjectItemCaseSensitive(j, "bias");
	if (v && !(cJSON_IsString(v) && !strcmp(v->valuestring, "none")))
		return "bias (zinc's adapters have none: \"none\")";
	for (size_t i = 0; i < sizeof(null_keys) / sizeof(null_keys[0]); i++) {
		v = cJSON_GetObjectItemCaseSensitive(j, null_keys[i]);
		if (v && !cJSON_IsNull(v) && !(cJSON_IsArray(v) && !cJSON_GetArraySize(v)))
			return null_keys[i];
	}
	for (size_t i = 0; i < sizeof(true_keys) / sizeof(true_keys[0]); i++)
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, true_keys[i])))
			return true_keys[i];
	for (size_t i = 0; i < sizeof(empty_keys) / sizeof(empty_keys[0]); i++) {
		v = cJSON_GetObjectItemCaseSensitive(j, empty_keys[i]);
		if (v && !cJSON_IsNull(v) && !(cJSON_IsObject(v) && !v->child))
			return empty_keys[i];
	}
	return NULL;
}

/* target_modules: a list of names, one name, or "all-linear" (every linear layer but the
 * head: the names of both families; zn_lora_prepare keeps those the model has) */
static int targets(struct zn_lora_config *cfg, const cJSON *t, const char *path)
{
	const cJSON *it;

	if (cJSON_IsString(t) && !strcmp(t->valuestring, "all-linear")) {
		for (size_t i = 0; i < sizeof(all_linear) / sizeof(all_linear[0]); i++)
			if (zn_lora_add_targets(cfg, all_linear[i]))
				return -EINVAL;
		return 0;
	}
	if (cJSON_IsString(t) && zn_lora_target_known(t->valuestring))
		return zn_lora_add_targets(cfg, t->valuestring);
	if (!cJSON_IsArray(t) || !cJSON_GetArraySize(t)) {
		zn_error("%s: target_modules %s: give a list of module names (q_proj, ..., "
			 "c_attn, ...) or \"all-linear\"; a regular expression is not read", path,
			 cJSON_IsString(t) ? t->valuestring : "missing or empty");
		return -EINVAL;
	}
	cJSON_ArrayForEach(it, t) {
		if (!cJSON_IsString(it) || zn_lora_add_targets(cfg, it->valuestring)) {
			zn_error("%s: target_modules: each entry must be a module name zinc "
				 "knows (above)", path);
			return -EINVAL;
		}
	}
	return 0;
}

static int number(const cJSON *j, const char *key, double dflt, double *out,
		  const char *path)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);

	if (!v || cJSON_IsNull(v)) {
		*out = dflt;
		return 0;
	}
	if (!cJSON_IsNumber(v)) {
		zn_error("%s: %s is not a number", path, key);
		return -EINVAL;
	}
	*out = v->valuedouble;
	return 0;
}

int zn_lora_peft_read_config(struct zn_lora_config *cfg, const char *dir, const char *what)
{
	char path[ZN_PATH_MAX + 32], *text = NULL;
	const char *bad;
	double r = 0, alpha = 0, dropout = 0;
	cJSON *j;
	int rc;

	if ((size_t)snprintf(path, sizeof(path), "%s/adapter_config.json", dir) >= sizeof(path)) {
		zn_error("%s %s: path too long", what, dir);
		return -ENAMETOOLONG;
	}
	rc = zn_read_input_file(path, what, 1 << 20, &text, NULL);
	if (rc)
		return rc;
	j = cJSON_Parse(text);
	free(text);
	if (!cJSON_IsObject(j)) {
		zn_error("%s %s: not a JSON object: give a PEFT LoRA adapter directory "
			 "(adapter_config.json, adapter_model.safetensors)", what, path);
		cJSON_Delete(j);
		return -EINVAL;
	}
	bad = unsupported(j);
	if (bad) {
		zn_error("%s %s: %s is set, which zinc does not implement: give a plain LoRA "
			 "adapter", what, path, bad);
		rc = -EINVAL;
	}
	if (!rc)
		rc = number(j, "r", 8, &r, path);
	if (!rc)
		rc = number(j, "lora_alpha", 8, &alpha, path);
	if (!rc)
		rc = number(j, "lora_dropout", 0, &dropout, path);
	if (!rc && (r < 1 || r > 65536 || r != (double)(int)r || !(alpha > 0))) {
		zn_error("%s %s: r %g must be a whole number >= 1 and lora_alpha %g > 0", what,
			 path, r, alpha);
		rc = -EINVAL;
	}
	if (!rc) {
		cfg->r = (int)r;
		cfg->alpha = (float)alpha;
		cfg->dropout = (float)dropout;
		cfg->rslora = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_rslora"));
		cfg->target_count = 0;
		rc = targets(cfg, cJSON_GetObjectItemCaseSensitive(j, "target_modules"), path);
	}
	cJSON_Delete(j);
	return rc;
}

int zn_lora_peft_check_tensors(const struct zn_lora_config *cfg, const struct zn_st_file *f,
			       const char *what)
{
	int want = 0;

	for (int l = 0; l < cfg->layers; l++) {
		struct zn_layer_desc d;
		int rc = zn_lora_describe(cfg, l, &d);

		for (int t = 0; !rc && t < d.tensor_count; t++) {
			const struct zn_tensor_desc *td = &d.tensors[t];
			const struct zn_st_tensor *s = zn_st_find(f, td->name);

			if (!s || s->ndim != 2 || s->shape[0] != td->shape[0] ||
			    s->shape[1] != td->shape[1] || s->dtype < 0) {
				zn_error("%s %s: %s %s (want [%lld, %lld] in F32, BF16 or F16): "
					 "the adapter was made for another model or other targets",
					 what, zn_st_path(f), td->name,
					 !s ? "is missing" : "has another shape or dtype",
					 (long long)td->shape[0], (long long)td->shape[1]);
				return -EINVAL;
			}
			want++;
		}
		if (rc)
			return rc;
	}
	if (zn_st_tensor_count(f) != want) {
		for (int i = 0; i < zn_st_tensor_count(f); i++) {
			const struct zn_st_tensor *s = zn_st_tensor_at(f, i);
			bool used = false;

			for (int l = 0; l < cfg->layers && !used; l++) {
				struct zn_layer_desc d;

				if (zn_lora_describe(cfg, l, &d))
					return -EINVAL;
				for (int t = 0; t < d.tensor_count && !used; t++)
					used = !strcmp(d.tensors[t].name, s->name);
			}
			if (!used) {
				zn_error("%s %s: %s is not an adapter of this model with these "
					 "target_modules: the adapter was made for another model",
					 what, zn_st_path(f), s->name);
				return -EINVAL;
			}
		}
	}
	return 0;
}
