/* adapter_config.json's LoRA settings (lora.h zn_lora_peft_read_config): what --init-adapter
 * takes from the adapter when the flags leave it out. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "core/fsio.h"
#include "core/log.h"
#include "model/lora/lora.h"

static int targets_of(const cJSON *t, const char *path, struct zn_lora_peft_config *out)
{
	const cJSON *v;

	if (cJSON_IsString(t)) {
		/* PEFT matches a string as a regular expression over the full module names
		 * (or "all-linear"): not a list zinc can read */
		zn_error("--init-adapter %s: target_modules is the string \"%s\" (PEFT's regular "
			 "expression); zinc reads a list of module names: give --lora-targets",
			 path, t->valuestring);
		return -EINVAL;
	}
	if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) < 1 ||
	    cJSON_GetArraySize(t) > ZN_LORA_MAX_TARGETS) {
		zn_error("--init-adapter %s: target_modules must be a list of 1 to %d module names",
			 path, ZN_LORA_MAX_TARGETS);
		return -EINVAL;
	}
	cJSON_ArrayForEach(v, t) {
		if (!cJSON_IsString(v) || !zn_lora_target_known(v->valuestring)) {
			zn_error("--init-adapter %s: target_modules entry %s%s%s is not a module zinc "
				 "adapts (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
				 "down_proj; c_attn, c_proj, c_fc)", path,
				 cJSON_IsString(v) ? "'" : "", cJSON_IsString(v) ? v->valuestring :
				 "(not a string)", cJSON_IsString(v) ? "'" : "");
			return -EINVAL;
		}
		snprintf(out->targets[out->target_count++], ZN_LORA_NAME_MAX, "%s",
			 v->valuestring);
	}
	return 0;
}

static int fields_of(const cJSON *j, const char *path, struct zn_lora_peft_config *out)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "r");
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha");
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "lora_dropout");
	const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "use_rslora");

	if (!cJSON_IsNumber(r) || r->valuedouble != (double)(int)r->valuedouble ||
	    r->valuedouble < 1 || r->valuedouble > (1 << 16)) {
		zn_error("--init-adapter %s: r must be an integer from 1 to %d", path, 1 << 16);
		return -EINVAL;
	}
	if (!cJSON_IsNumber(a) || !(a->valuedouble > 0)) {
		zn_error("--init-adapter %s: lora_alpha must be a number above 0", path);
		return -EINVAL;
	}
	if (d && !cJSON_IsNull(d) && (!cJSON_IsNumber(d) || !(d->valuedouble >= 0) ||
				      !(d->valuedouble < 1))) {
		zn_error("--init-adapter %s: lora_dropout must be in [0, 1)", path);
		return -EINVAL;
	}
	if (rs && !cJSON_IsNull(rs) && !cJSON_IsBool(rs)) {
		zn_error("--init-adapter %s: use_rslora must be true or false", path);
		return -EINVAL;
	}
	out->r = (int)r->valuedouble;
	out->alpha = (float)a->valuedouble;
	out->dropout = cJSON_IsNumber(d) ? (float)d->valuedouble : 0.0f;
	out->rslora = cJSON_IsTrue(rs);
	return targets_of(cJSON_GetObjectItemCaseSensitive(j, "target_modules"), path, out);
}

int zn_lora_peft_read_config(const char *dir, struct zn_lora_peft_config *out)
{
	char path[ZN_PATH_MAX + 32], *text = NULL;
	cJSON *j;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((size_t)snprintf(path, sizeof(path), "%s/adapter_config.json", dir) >= sizeof(path)) {
		zn_error("--init-adapter %s: path too long", dir);
		return -ENAMETOOLONG;
	}
	rc = zn_read_input_file(path, "--init-adapter", 1 << 20, &text, NULL);
	if (rc)
		return rc;
	j = cJSON_Parse(text);
	if (!cJSON_IsObject(j)) {
		zn_error("--init-adapter %s: not a JSON object (PEFT's adapter_config.json)", path);
		rc = -EINVAL;
	} else {
		rc = fields_of(j, path, out);
	}
	cJSON_Delete(j);
	free(text);
	return rc;
}
