/* config.json -> struct zn_hf_config, checked key by key: model_type picks the registry
 * entry (model/family.h), whose hf_parse reads the family's keys with the helpers here
 * (model/hf_family.h). The layout and parameter count are in hf_layout.c, writing
 * config.json in hf_config_write.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/fsio.h"
#include "core/json.h"
#include "core/log.h"
#include "model/family.h"
#include "model/hf_config.h"
#include "model/hf_family.h"

#define MAX_DIM ZN_HF_MAX_DIM
#define MAX_INT ZN_HF_MAX_INT

const char *zn_hf_model_type(const struct zn_hf_config *cfg)
{
	const struct zn_family *f = cfg->family;

	return f && cfg->type >= 0 && cfg->type < f->type_count ? f->types[cfg->type].model_type :
								"?";
}

/* key, else alias (GPT-2's hidden_size for n_embd ...); JSON null counts as absent. */
const cJSON *zn_hf_key(const struct zn_hf_keys *c, const char *key, const char *alias)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, key);

	if ((!v || cJSON_IsNull(v)) && alias)
		v = cJSON_GetObjectItemCaseSensitive(c->obj, alias);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

int zn_hf_key_missing(const struct zn_hf_keys *c, const char *key)
{
	zn_error("%s: key \"%s%s\" is missing: the model's config.json needs it", c->path,
		 c->prefix, key);
	return -EINVAL;
}

/* An integer in [lo, hi]; absent: def, or an error when required. */
int zn_hf_key_int(const struct zn_hf_keys *c, const char *key, const char *alias, bool required,
		   int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
	const cJSON *v = zn_hf_key(c, key, alias);

	if (!v) {
		*out = def;
		return required ? zn_hf_key_missing(c, key) : 0;
	}
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
	    v->valuedouble < (double)lo || v->valuedouble > (double)hi) {
		zn_error("%s: key \"%s%s\" must be an integer in [%lld, %lld]", c->path,
			 c->prefix, key, (long long)lo, (long long)hi);
		return -EINVAL;
	}
	*out = (int64_t)v->valuedouble;
	return 0;
}

/* A number in (lo, hi]. */
int zn_hf_key_num(const struct zn_hf_keys *c, const char *key, const char *alias, bool required,
		   double def, double lo, double hi, double *out)
{
	const cJSON *v = zn_hf_key(c, key, alias);

	if (!v) {
		*out = def;
		return required ? zn_hf_key_missing(c, key) : 0;
	}
	if (!cJSON_IsNumber(v) || !(v->valuedouble > lo) || !(v->valuedouble <= hi)) {
		zn_error("%s: key \"%s%s\" must be a number in (%g, %g]", c->path, c->prefix,
			 key, lo, hi);
		return -EINVAL;
	}
	*out = v->valuedouble;
	return 0;
}

int zn_hf_key_bool(const struct zn_hf_keys *c, const char *key, bool def, bool *out)
{
	const cJSON *v = zn_hf_key(c, key, NULL);

	*out = def;
	if (!v)
		return 0;
	if (!cJSON_IsBool(v)) {
		zn_error("%s: key \"%s\" must be true or false", c->path, key);
		return -EINVAL;
	}
	*out = cJSON_IsTrue(v);
	return 0;
}

/* A string key that must be one of allowed[] when present. */
int zn_hf_key_str(const struct zn_hf_keys *c, const char *key, const char *const *allowed,
		     int n, const char **out)
{
	const cJSON *v = zn_hf_key(c, key, NULL);

	if (out)
		*out = NULL;
	if (!v)
		return 0;
	for (int i = 0; cJSON_IsString(v) && i < n; i++) {
		if (!strcmp(v->valuestring, allowed[i])) {
			if (out)
				*out = allowed[i];
			return 0;
		}
	}
	zn_error("%s: key \"%s\" is %s%s%s: zinc supports %s%s%s", c->path, key,
		 cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "not a string",
		 cJSON_IsString(v) ? "\"" : "", allowed[0], n > 1 ? " or " : "",
		 n > 1 ? allowed[1] : "");
	return -EINVAL;
}

static int parse_dtype(const struct zn_hf_keys *c, struct zn_hf_config *cfg)
{
	static const char *const dts[] = { "bfloat16", "float32", "float16" };
	const char *key = zn_hf_key(c, "torch_dtype", NULL) ? "torch_dtype" : "dtype";
	const cJSON *v = zn_hf_key(c, key, NULL);

	cfg->torch_dtype[0] = 0;
	if (!v)
		return 0;
	for (int i = 0; cJSON_IsString(v) && i < 3; i++) {
		if (!strcmp(v->valuestring, dts[i])) {
			snprintf(cfg->torch_dtype, sizeof(cfg->torch_dtype), "%s", dts[i]);
			return 0;
		}
	}
	zn_error("%s: key \"%s\" must be \"bfloat16\", \"float32\" or \"float16\"", c->path,
		 key);
	return -EINVAL;
}

/* rope_scaling (null, or an object with rope_type/type "default" or "llama3"), or
 * transformers 5's rope_parameters (rope_type, rope_theta and the scaling keys in one
 * object). */
int zn_hf_key_rope(const struct zn_hf_keys *c, struct zn_hf_config *cfg)
{
	const cJSON *params = zn_hf_key(c, "rope_parameters", NULL);
	const char *key = params ? "rope_parameters" : "rope_scaling";
	const cJSON *v = params ? params : zn_hf_key(c, "rope_scaling", NULL);
	struct zn_hf_rope_scaling *rs = &cfg->rope_scaling;
	struct zn_hf_keys r = { c->path, v, params ? "rope_parameters." : "rope_scaling." };
	const cJSON *type;
	int rc;

	memset(rs, 0, sizeof(*rs));
	rc = zn_hf_key_num(c, "rope_theta", NULL, 0, 10000.0, 0, 1e12, &cfg->rope_theta);
	if (rc || !v)
		return rc;
	type = cJSON_IsObject(v) ? zn_hf_key(&r, "rope_type", "type") : NULL;
	if (!cJSON_IsObject(v) || (!params && !cJSON_IsString(type)) ||
	    (type && !cJSON_IsString(type))) {
		zn_error("%s: key \"%s\" must be %san object with a \"rope_type\" string",
			 c->path, key, params ? "" : "null or ");
		return -EINVAL;
	}
	if (params)
		rc = zn_hf_key_num(&r, "rope_theta", NULL, 0, cfg->rope_theta, 0, 1e12,
				   &cfg->rope_theta);
	if (rc || !type || !strcmp(type->valuestring, "default"))
		return rc;
	if (strcmp(type->valuestring, "llama3")) {
		zn_error("%s: key \"%s.rope_type\" is \"%s\": zinc supports \"llama3\" "
			 "(or \"default\")", c->path, key, type->valuestring);
		return -EINVAL;
	}
	rs->type = ZN_HF_ROPE_LLAMA3;
	rc = zn_hf_key_num(&r, "factor", NULL, 1, 0, 0, 1e6, &rs->factor);
	if (!rc)
		rc = zn_hf_key_num(&r, "low_freq_factor", NULL, 1, 0, 0, 1e6,
				   &rs->low_freq_factor);
	if (!rc)
		rc = zn_hf_key_num(&r, "high_freq_factor", NULL, 1, 0, 0, 1e6,
				   &rs->high_freq_factor);
	if (!rc)
		rc = zn_hf_key_int(&r, "original_max_position_embeddings", NULL, 1, 0, 1, MAX_INT,
				   &rs->original_max_position_embeddings);
	if (!rc && rs->high_freq_factor <= rs->low_freq_factor) {
		zn_error("%s: key \"%s.high_freq_factor\" (%g) must be greater than "
			 "low_freq_factor (%g)", c->path, key, rs->high_freq_factor,
			 rs->low_freq_factor);
		rc = -EINVAL;
	}
	return rc;
}

int zn_hf_key_heads(const struct zn_hf_keys *c, struct zn_hf_config *cfg, int64_t head_dim)
{
	int rc = zn_hf_key_int(c, "num_attention_heads", NULL, 1, 0, 1, cfg->hidden_size,
			 &cfg->num_attention_heads);

	if (!rc)
		rc = zn_hf_key_int(c, "num_key_value_heads", NULL, 0, cfg->num_attention_heads, 1,
				   cfg->num_attention_heads, &cfg->num_key_value_heads);
	if (rc)
		return rc;
	if (cfg->num_attention_heads % cfg->num_key_value_heads) {
		zn_error("%s: key \"num_attention_heads\" (%lld) is not a multiple of "
			 "\"num_key_value_heads\" (%lld)", c->path,
			 (long long)cfg->num_attention_heads, (long long)cfg->num_key_value_heads);
		return -EINVAL;
	}
	if (!head_dim && !zn_hf_key(c, "head_dim", NULL) &&
	    cfg->hidden_size % cfg->num_attention_heads) {
		zn_error("%s: key \"hidden_size\" (%lld) is not a multiple of "
			 "\"num_attention_heads\" (%lld) and there is no \"head_dim\"", c->path,
			 (long long)cfg->hidden_size, (long long)cfg->num_attention_heads);
		return -EINVAL;
	}
	return zn_hf_key_int(c, "head_dim", NULL, 0,
			     head_dim ? head_dim : cfg->hidden_size / cfg->num_attention_heads, 1,
			     MAX_DIM, &cfg->head_dim);
}

int zn_hf_config_parse_n(const char *json, size_t len, const char *path,
			 struct zn_hf_config *out)
{
	struct zn_json_opts o = { .origin = path };
	cJSON *root = NULL;
	struct zn_hf_keys c = { path, NULL, "" };
	const cJSON *type;
	int rc = -EINVAL;

	memset(out, 0, sizeof(*out));
	/* core/json: Python's rules, so a repeated key takes its last value as transformers'
	 * json.load does */
	if (zn_json_parse(json, len, &o, &root))
		return -EINVAL;
	c.obj = root;
	type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
	if (!cJSON_IsObject(root)) {
		zn_error("%s: not a JSON object (config.json expected)", path);
		goto delete_root;
	}
	if (!cJSON_IsString(type)) {
		zn_error("%s: key \"model_type\" is missing or not a string", path);
		goto delete_root;
	}
	out->family = zn_family_of_model_type(type->valuestring, &out->type);
	if (!out->family) {
		char types[256];

		zn_family_model_types(types, sizeof(types));
		zn_error("%s: key \"model_type\" is \"%s\": zinc reads %s", path,
			 type->valuestring, types);
		goto delete_root;
	}
	rc = out->family->hf_parse(&c, out);
	if (!rc)
		rc = parse_dtype(&c, out);
delete_root:
	cJSON_Delete(root);
	return rc;
}

int zn_hf_config_parse(const char *json, const char *path, struct zn_hf_config *out)
{
	return zn_hf_config_parse_n(json, strlen(json), path, out);
}

int zn_hf_config_load(const char *path, struct zn_hf_config *out)
{
	char *text = NULL;
	size_t len = 0;
	/* a regular file only (core/fsio): a FIFO or directory is refused, never waited on */
	int rc = zn_read_input_file(path, "config.json", 16u << 20, &text, &len);

	if (!rc)
		rc = zn_hf_config_parse_n(text, len, path, out);
	free(text);
	return rc;
}
