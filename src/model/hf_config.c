/* config.json -> struct zn_hf_config, checked key by key. The layout and parameter count
 * are in hf_layout.c, writing config.json in hf_config_write.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/fsio.h"
#include "core/json.h"
#include "core/log.h"
#include "model/hf_config.h"

#define MAX_DIM (1ll << 24)
#define MAX_INT 0x7fffffffll

struct jctx {
	const char *path;
	const cJSON *obj;
	const char *prefix; /* "" or "rope_scaling." for messages */
};

static const char *const family_names[] = { "gpt2", "llama", "qwen2", "mistral" };

const char *zn_hf_family_name(int family)
{
	return family >= 0 && family < 4 ? family_names[family] : "?";
}

/* key, else alias (GPT-2's hidden_size for n_embd ...); JSON null counts as absent. */
static const cJSON *item(const struct jctx *c, const char *key, const char *alias)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, key);

	if ((!v || cJSON_IsNull(v)) && alias)
		v = cJSON_GetObjectItemCaseSensitive(c->obj, alias);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

static int missing(const struct jctx *c, const char *key)
{
	zn_error("%s: key \"%s%s\" is missing: the model's config.json needs it", c->path,
		 c->prefix, key);
	return -EINVAL;
}

/* An integer in [lo, hi]; absent: def, or an error when required. */
static int get_int(const struct jctx *c, const char *key, const char *alias, int required,
		   int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
	const cJSON *v = item(c, key, alias);

	if (!v) {
		*out = def;
		return required ? missing(c, key) : 0;
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
static int get_num(const struct jctx *c, const char *key, const char *alias, int required,
		   double def, double lo, double hi, double *out)
{
	const cJSON *v = item(c, key, alias);

	if (!v) {
		*out = def;
		return required ? missing(c, key) : 0;
	}
	if (!cJSON_IsNumber(v) || !(v->valuedouble > lo) || !(v->valuedouble <= hi)) {
		zn_error("%s: key \"%s%s\" must be a number in (%g, %g]", c->path, c->prefix,
			 key, lo, hi);
		return -EINVAL;
	}
	*out = v->valuedouble;
	return 0;
}

static int get_bool(const struct jctx *c, const char *key, bool def, bool *out)
{
	const cJSON *v = item(c, key, NULL);

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
static int check_str(const struct jctx *c, const char *key, const char *const *allowed,
		     int n, const char **out)
{
	const cJSON *v = item(c, key, NULL);

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

static int parse_dtype(const struct jctx *c, struct zn_hf_config *cfg)
{
	static const char *const dts[] = { "bfloat16", "float32", "float16" };
	const char *key = item(c, "torch_dtype", NULL) ? "torch_dtype" : "dtype";
	const cJSON *v = item(c, key, NULL);

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
static int parse_rope(const struct jctx *c, struct zn_hf_config *cfg)
{
	const cJSON *params = item(c, "rope_parameters", NULL);
	const char *key = params ? "rope_parameters" : "rope_scaling";
	const cJSON *v = params ? params : item(c, "rope_scaling", NULL);
	struct zn_hf_rope_scaling *rs = &cfg->rope_scaling;
	struct jctx r = { c->path, v, params ? "rope_parameters." : "rope_scaling." };
	const cJSON *type;
	int rc;

	memset(rs, 0, sizeof(*rs));
	rc = get_num(c, "rope_theta", NULL, 0, 10000.0, 0, 1e12, &cfg->rope_theta);
	if (rc || !v)
		return rc;
	type = cJSON_IsObject(v) ? item(&r, "rope_type", "type") : NULL;
	if (!cJSON_IsObject(v) || (!params && !cJSON_IsString(type)) ||
	    (type && !cJSON_IsString(type))) {
		zn_error("%s: key \"%s\" must be %san object with a \"rope_type\" string",
			 c->path, key, params ? "" : "null or ");
		return -EINVAL;
	}
	if (params)
		rc = get_num(&r, "rope_theta", NULL, 0, cfg->rope_theta, 0, 1e12,
			     &cfg->rope_theta);
	if (rc || !type || !strcmp(type->valuestring, "default"))
		return rc;
	if (strcmp(type->valuestring, "llama3")) {
		zn_error("%s: key \"%s.rope_type\" is \"%s\": zinc supports \"llama3\" "
			 "(or \"default\")", c->path, key, type->valuestring);
		return -EINVAL;
	}
	rs->type = ZN_HF_ROPE_LLAMA3;
	rc = get_num(&r, "factor", NULL, 1, 0, 0, 1e6, &rs->factor);
	if (!rc)
		rc = get_num(&r, "low_freq_factor", NULL, 1, 0, 0, 1e6, &rs->low_freq_factor);
	if (!rc)
		rc = get_num(&r, "high_freq_factor", NULL, 1, 0, 0, 1e6, &rs->high_freq_factor);
	if (!rc)
		rc = get_int(&r, "original_max_position_embeddings", NULL, 1, 0, 1, MAX_INT,
			     &rs->original_max_position_embeddings);
	if (!rc && rs->high_freq_factor <= rs->low_freq_factor) {
		zn_error("%s: key \"%s.high_freq_factor\" (%g) must be greater than "
			 "low_freq_factor (%g)", c->path, key, rs->high_freq_factor,
			 rs->low_freq_factor);
		rc = -EINVAL;
	}
	return rc;
}

static int parse_gpt2(const struct jctx *c, struct zn_hf_config *cfg)
{
	static const char *const acts[] = { "gelu_new", "gelu_pytorch_tanh" };
	int rc;

	rc = get_int(c, "n_embd", "hidden_size", 1, 0, 1, MAX_DIM, &cfg->hidden_size);
	if (!rc)
		rc = get_int(c, "n_layer", "num_hidden_layers", 1, 0, 1, 100000,
			     &cfg->num_hidden_layers);
	if (!rc)
		rc = get_int(c, "n_head", "num_attention_heads", 1, 0, 1, cfg->hidden_size,
			     &cfg->num_attention_heads);
	if (!rc)
		rc = get_int(c, "n_positions", "max_position_embeddings", 1, 0, 1, MAX_INT,
			     &cfg->max_position_embeddings);
	if (!rc)
		rc = get_int(c, "vocab_size", NULL, 1, 0, 1, MAX_INT, &cfg->vocab_size);
	if (!rc)
		rc = get_int(c, "n_inner", NULL, 0, 4 * cfg->hidden_size, 1, MAX_DIM,
			     &cfg->intermediate_size);
	if (!rc)
		rc = get_num(c, "layer_norm_epsilon", NULL, 0, 1e-5, 0, 1, &cfg->norm_eps);
	if (!rc)
		rc = check_str(c, "activation_function", acts, 2, NULL);
	if (!rc)
		rc = get_bool(c, "tie_word_embeddings", true, &cfg->tie_word_embeddings);
	if (rc)
		return rc;
	if (!cfg->tie_word_embeddings) {
		zn_error("%s: key \"tie_word_embeddings\" is false: zinc's GPT-2 ties lm_head to "
			 "wte", c->path);
		return -EINVAL;
	}
	if (cfg->hidden_size % cfg->num_attention_heads) {
		zn_error("%s: key \"n_embd\" (%lld) is not a multiple of \"n_head\" (%lld)",
			 c->path, (long long)cfg->hidden_size,
			 (long long)cfg->num_attention_heads);
		return -EINVAL;
	}
	cfg->num_key_value_heads = cfg->num_attention_heads;
	cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;
	return 0;
}

static int parse_heads(const struct jctx *c, struct zn_hf_config *cfg)
{
	int rc = get_int(c, "num_attention_heads", NULL, 1, 0, 1, cfg->hidden_size,
			 &cfg->num_attention_heads);

	if (!rc)
		rc = get_int(c, "num_key_value_heads", NULL, 0, cfg->num_attention_heads, 1,
			     cfg->num_attention_heads, &cfg->num_key_value_heads);
	if (rc)
		return rc;
	if (cfg->num_attention_heads % cfg->num_key_value_heads) {
		zn_error("%s: key \"num_attention_heads\" (%lld) is not a multiple of "
			 "\"num_key_value_heads\" (%lld)", c->path,
			 (long long)cfg->num_attention_heads, (long long)cfg->num_key_value_heads);
		return -EINVAL;
	}
	if (!item(c, "head_dim", NULL) && cfg->hidden_size % cfg->num_attention_heads) {
		zn_error("%s: key \"hidden_size\" (%lld) is not a multiple of "
			 "\"num_attention_heads\" (%lld) and there is no \"head_dim\"", c->path,
			 (long long)cfg->hidden_size, (long long)cfg->num_attention_heads);
		return -EINVAL;
	}
	return get_int(c, "head_dim", NULL, 0, cfg->hidden_size / cfg->num_attention_heads, 1,
		       MAX_DIM, &cfg->head_dim);
}

static int parse_window(const struct jctx *c, struct zn_hf_config *cfg)
{
	bool use = cfg->family == ZN_HF_MISTRAL;
	int rc = 0;

	cfg->sliding_window = 0;
	if (cfg->family == ZN_HF_QWEN2)
		rc = get_bool(c, "use_sliding_window", false, &use);
	if (!rc && use)
		rc = get_int(c, "sliding_window", NULL, 0, 0, 1, MAX_INT, &cfg->sliding_window);
	return rc;
}

/* llama, qwen2, mistral */
static int parse_llama(const struct jctx *c, struct zn_hf_config *cfg)
{
	static const char *const acts[] = { "silu" };
	bool mlp_bias = false;
	int rc;

	rc = get_int(c, "hidden_size", NULL, 1, 0, 1, MAX_DIM, &cfg->hidden_size);
	if (!rc)
		rc = get_int(c, "intermediate_size", NULL, 1, 0, 1, MAX_DIM,
			     &cfg->intermediate_size);
	if (!rc)
		rc = get_int(c, "num_hidden_layers", NULL, 1, 0, 1, 100000,
			     &cfg->num_hidden_layers);
	if (!rc)
		rc = parse_heads(c, cfg);
	if (!rc)
		rc = get_int(c, "vocab_size", NULL, 1, 0, 1, MAX_INT, &cfg->vocab_size);
	if (!rc)
		rc = get_int(c, "max_position_embeddings", NULL, 1, 0, 1, MAX_INT,
			     &cfg->max_position_embeddings);
	if (!rc)
		rc = get_num(c, "rms_norm_eps", NULL, 0, 1e-6, 0, 1, &cfg->norm_eps);
	if (!rc)
		rc = parse_rope(c, cfg);
	if (!rc)
		rc = get_bool(c, "attention_bias", cfg->family == ZN_HF_QWEN2,
			      &cfg->attention_bias);
	if (!rc)
		rc = get_bool(c, "mlp_bias", false, &mlp_bias);
	if (!rc)
		rc = get_bool(c, "tie_word_embeddings", false, &cfg->tie_word_embeddings);
	if (!rc)
		rc = parse_window(c, cfg);
	if (!rc)
		rc = check_str(c, "hidden_act", acts, 1, NULL);
	if (rc)
		return rc;
	if (mlp_bias) {
		zn_error("%s: key \"mlp_bias\" is true: zinc's MLP has no biases (set it false)",
			 c->path);
		return -EINVAL;
	}
	if (cfg->family == ZN_HF_QWEN2)
		cfg->attention_bias = true; /* Qwen2 has q/k/v biases whatever the key says */
	if (cfg->family == ZN_HF_MISTRAL)
		cfg->attention_bias = false;
	return 0;
}

int zn_hf_config_parse_n(const char *json, size_t len, const char *path,
			 struct zn_hf_config *out)
{
	struct zn_json_opts o = { .origin = path };
	cJSON *root = NULL;
	struct jctx c = { path, NULL, "" };
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
	out->family = -1;
	for (int i = 0; i < 4; i++)
		if (!strcmp(type->valuestring, family_names[i]))
			out->family = i;
	if (out->family < 0) {
		zn_error("%s: key \"model_type\" is \"%s\": zinc reads gpt2, llama, qwen2 and "
			 "mistral", path, type->valuestring);
		goto delete_root;
	}
	rc = out->family == ZN_HF_GPT2 ? parse_gpt2(&c, out) : parse_llama(&c, out);
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
