/* struct zn_hf_config -> config.json text: model_type, architectures, the common keys, and
 * the family's own (its registry entry's hf_write, with the setters here). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "core/json.h"

#include "model/family.h"
#include "model/hf_config.h"
#include "model/hf_family.h"
#include "model/hf_json.h"

/* Sets key to v (replacing any value); v NULL (out of memory) fails. */
int zn_hf_set(cJSON *o, const char *key, cJSON *v)
{
	if (!v)
		return -1;
	cJSON_DeleteItemFromObjectCaseSensitive(o, key);
	if (!cJSON_AddItemToObject(o, key, v)) {
		cJSON_Delete(v);
		return -1;
	}
	return 0;
}

int zn_hf_set_int(cJSON *o, const char *key, int64_t v)
{
	return zn_hf_set(o, key, cJSON_CreateNumber((double)v));
}

static int set_arch(cJSON *o, const char *arch)
{
	cJSON *a = cJSON_CreateArray();

	if (a && !cJSON_AddItemToArray(a, cJSON_CreateString(arch))) {
		cJSON_Delete(a);
		a = NULL;
	}
	return zn_hf_set(o, "architectures", a);
}

/* The legacy keys (rope_theta, rope_scaling), or transformers 5's rope_parameters when
 * the original config used it. */
int zn_hf_set_rope(cJSON *o, const struct zn_hf_config *c)
{
	const struct zn_hf_rope_scaling *rs = &c->rope_scaling;
	bool params = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(o, "rope_parameters"));
	cJSON *r;
	int rc;

	if (params) {
		cJSON_DeleteItemFromObjectCaseSensitive(o, "rope_theta");
		cJSON_DeleteItemFromObjectCaseSensitive(o, "rope_scaling");
	} else {
		rc = zn_hf_set(o, "rope_theta", zn_hf_json_float(c->rope_theta));
		if (rc || rs->type != ZN_HF_ROPE_LLAMA3)
			return rc ? rc : zn_hf_set(o, "rope_scaling", cJSON_CreateNull());
	}
	r = cJSON_CreateObject();
	rc = zn_hf_set(o, params ? "rope_parameters" : "rope_scaling", r);
	if (!rc && params)
		rc = zn_hf_set(r, "rope_theta", zn_hf_json_float(c->rope_theta));
	if (!rc)
		rc = zn_hf_set(r, "rope_type", cJSON_CreateString(rs->type == ZN_HF_ROPE_LLAMA3 ?
								   "llama3" : "default"));
	if (rc || rs->type != ZN_HF_ROPE_LLAMA3)
		return rc;
	rc = zn_hf_set(r, "factor", zn_hf_json_float(rs->factor));
	if (!rc)
		rc = zn_hf_set(r, "low_freq_factor", zn_hf_json_float(rs->low_freq_factor));
	if (!rc)
		rc = zn_hf_set(r, "high_freq_factor", zn_hf_json_float(rs->high_freq_factor));
	if (!rc)
		rc = zn_hf_set_int(r, "original_max_position_embeddings",
			     rs->original_max_position_embeddings);
	return rc;
}

char *zn_hf_config_to_json(const struct zn_hf_config *cfg, const char *base_json)
{
	struct zn_json_opts jo = { .origin = "config.json", .flags = ZN_JSON_QUIET_DUP };
	cJSON *o = NULL;
	char *text = NULL;
	const char *dtype_key;
	int rc;

	/* the base was read by zn_hf_config_parse already: the same rules, warned there */
	if (base_json && zn_json_parse(base_json, strlen(base_json), &jo, &o))
		return NULL;
	if (!base_json)
		o = cJSON_CreateObject();
	if (!cJSON_IsObject(o))
		goto delete_obj;
	/* what zinc writes through here is 16/32-bit: a 4-bit base's quantization_config
	 * does not carry over (docs/qlora.md; dequantize() drops it too) */
	cJSON_DeleteItemFromObjectCaseSensitive(o, "quantization_config");
	/* transformers 5 names torch_dtype "dtype": keep the original's name */
	dtype_key = cJSON_GetObjectItemCaseSensitive(o, "dtype") ? "dtype" : "torch_dtype";
	rc = zn_hf_set(o, "model_type", cJSON_CreateString(zn_hf_model_type(cfg)));
	if (!rc)
		rc = set_arch(o, cfg->family->types[cfg->type].architecture);
	if (!rc)
		rc = cfg->family->hf_write(o, cfg);
	if (!rc)
		rc = zn_hf_set(o, "tie_word_embeddings",
			       cJSON_CreateBool(cfg->tie_word_embeddings));
	if (!rc)
		rc = zn_hf_set_int(o, "vocab_size", cfg->vocab_size);
	if (!rc && cfg->torch_dtype[0])
		rc = zn_hf_set(o, dtype_key, cJSON_CreateString(cfg->torch_dtype));
	if (!rc)
		text = zn_hf_json_dumps(o);
delete_obj:
	cJSON_Delete(o);
	return text;
}
