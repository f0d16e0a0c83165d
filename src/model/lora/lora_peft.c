/* PEFT's files (lora.h): adapter_model.safetensors with PEFT's tensor names and
 * adapter_config.json, written and read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include "core/fsio.h"
#include "core/json.h"
#include "core/log.h"
#include "model/lora/lora.h"
#include "model/safetensors.h"

static int join(char *out, size_t size, const char *dir, const char *name)
{
	if ((size_t)snprintf(out, size, "%s/%s", dir, name) >= size) {
		zn_error("adapter directory path too long: %s", dir);
		return -ENAMETOOLONG;
	}
	return 0;
}

static int write_config(const struct zn_lora_config *cfg, const char *dir, const char *base)
{
	char path[ZN_PATH_MAX + 32], targets[ZN_LORA_MAX_TARGETS * (ZN_LORA_NAME_MAX + 4)];
	char *text = NULL;
	size_t used = 0, size;
	bool conv1d = !strcmp(cfg->base.ops->family, "gpt2"); /* Conv1D [in, out] weights */
	int rc = join(path, sizeof(path), dir, "adapter_config.json");

	targets[0] = '\0';
	for (int i = 0; i < cfg->target_count; i++)
		used += (size_t)snprintf(targets + used, sizeof(targets) - used, "%s\"%s\"",
					 i ? ", " : "", cfg->targets[i]);
	size = strlen(targets) + strlen(base ? base : "") + 1024;
	text = malloc(size);
	if (!text)
		return -ENOMEM;
	snprintf(text, size,
		 "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n"
		 "  \"base_model_name_or_path\": %s%s%s,\n  \"r\": %d,\n  \"lora_alpha\": %.9g,\n"
		 "  \"lora_dropout\": %.9g,\n  \"use_rslora\": %s,\n  \"target_modules\": [%s],\n"
		 "  \"fan_in_fan_out\": %s,\n  \"bias\": \"none\",\n  \"inference_mode\": true,\n"
		 "  \"init_lora_weights\": true,\n  \"modules_to_save\": null,\n"
		 "  \"layers_to_transform\": null,\n  \"layers_pattern\": null,\n"
		 "  \"rank_pattern\": {},\n  \"alpha_pattern\": {},\n  \"revision\": null\n}\n",
		 base ? "\"" : "", base ? base : "null", base ? "\"" : "", cfg->r,
		 (double)cfg->alpha, (double)cfg->dropout, cfg->rslora ? "true" : "false",
		 targets, conv1d ? "true" : "false");
	if (!rc)
		rc = zn_write_file_atomic(path, "--save-adapter", text, strlen(text));
	free(text);
	return rc;
}

int zn_lora_save_peft(const struct zn_lora_config *cfg, const float *const *adapters,
		      const char *dir, const char *base_name)
{
	struct zn_st_entry *e = calloc((size_t)cfg->layers * ZN_MODEL_MAX_TENSORS, sizeof(*e));
	struct zn_layer_desc *d = calloc((size_t)cfg->layers, sizeof(*d));
	char path[ZN_PATH_MAX + 32];
	int count = 0, rc = e && d ? 0 : -ENOMEM;

	/* made when missing; a link there is refused, never written through */
	if (!rc)
		rc = zn_output_dir_make(dir, "--save-adapter");
	for (int l = 0; !rc && l < cfg->layers; l++) {
		rc = zn_lora_describe(cfg, l, &d[l]);
		for (int t = 0; !rc && t < d[l].tensor_count; t++, count++) {
			const struct zn_tensor_desc *td = &d[l].tensors[t];

			e[count].name = td->name;
			e[count].ndim = 2;
			e[count].shape[0] = td->shape[0];
			e[count].shape[1] = td->shape[1];
			e[count].data_h = adapters[l] + td->offset;
		}
	}
	if (!rc)
		rc = join(path, sizeof(path), dir, "adapter_model.safetensors");
	if (!rc)
		rc = zn_st_write(path, ZN_DTYPE_F32, e, count, NULL, NULL, 0);
	if (!rc)
		rc = write_config(cfg, dir, base_name);
	free(e);
	free(d);
	return rc;
}

/* adapter_config.json's r, lora_alpha and use_rslora must be this run's. */
static int check_config(const struct zn_lora_config *cfg, const char *dir)
{
	char path[ZN_PATH_MAX + 32];
	cJSON *j = NULL;
	const cJSON *r, *a, *rs;
	int rc = join(path, sizeof(path), dir, "adapter_config.json");

	/* core/json: a repeated key takes its last value, as PEFT's json.load */
	if (!rc)
		rc = zn_json_load(path, "--init-adapter", 1 << 20, NULL, &j);
	if (rc)
		return rc;
	r = cJSON_GetObjectItemCaseSensitive(j, "r");
	a = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha");
	rs = cJSON_GetObjectItemCaseSensitive(j, "use_rslora");
	if (!j || !cJSON_IsNumber(r) || !cJSON_IsNumber(a)) {
		zn_error("--init-adapter %s: not a PEFT LoRA config (r and lora_alpha)", path);
		rc = -EINVAL;
	} else if (r->valuedouble != cfg->r || (float)a->valuedouble != cfg->alpha ||
		   (cJSON_IsTrue(rs) != cfg->rslora)) {
		zn_error("--init-adapter %s: r %g, lora_alpha %g, use_rslora %s but this run has "
			 "--lora-r %d --lora-alpha %g%s: give the adapter's values", path,
			 r->valuedouble, a->valuedouble, cJSON_IsTrue(rs) ? "true" : "false",
			 cfg->r, (double)cfg->alpha, cfg->rslora ? " --use-rslora" : "");
		rc = -EINVAL;
	}
	cJSON_Delete(j);
	return rc;
}

int zn_lora_peft_open(const struct zn_lora_config *cfg, const char *dir,
		      struct zn_st_file **out)
{
	char path[ZN_PATH_MAX + 32];
	int rc = check_config(cfg, dir);

	if (!rc)
		rc = join(path, sizeof(path), dir, "adapter_model.safetensors");
	if (!rc)
		rc = zn_st_open(out, path);
	return rc;
}

int zn_lora_peft_load_layer(const struct zn_st_file *f, const struct zn_layer_desc *L,
			    float *params_h)
{
	for (int t = 0; t < L->tensor_count; t++) {
		const struct zn_tensor_desc *d = &L->tensors[t];
		const struct zn_st_tensor *s = zn_st_find(f, d->name);
		int rc;

		if (!s || s->ndim != 2 || s->shape[0] != d->shape[0] ||
		    s->shape[1] != d->shape[1]) {
			zn_error("--init-adapter %s: %s %s (want [%lld, %lld]): the adapter was "
				 "made for other targets, r or model", zn_st_path(f), d->name,
				 s ? "has another shape" : "is missing", (long long)d->shape[0],
				 (long long)d->shape[1]);
			return -EINVAL;
		}
		rc = zn_st_read_f32(f, s, params_h + d->offset);
		if (rc)
			return rc;
	}
	return 0;
}
