/* struct zn_hf_config -> config.json text, in each family's own key names. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "core/json.h"

#include "model/hf_config.h"
#include "model/hf_json.h"

/* Sets key to v (replacing any value); v NULL (out of memory) fails. */
static int set(cJSON *o, const char *key, cJSON *v)
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

static int set_int(cJSON *o, const char *key, int64_t v)
{
	return set(o, key, cJSON_CreateNumber((double)v));
}

static int set_arch(cJSON *o, const char *arch)
{
	cJSON *a = cJSON_CreateArray();

	if (a && !cJSON_AddItemToArray(a, cJSON_CreateString(arch))) {
		cJSON_Delete(a);
		a = NULL;
	}
	return set(o, "architectures", a);
}

/* The legacy keys (rope_theta, rope_scaling), or transformers 5's rope_parameters when
 * the original config used it. */
static int set_rope(cJSON *o, const struct zn_hf_config *c)
{
	const struct zn_hf_rope_scaling *rs = &c->rope_scaling;
	bool params = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(o, "rope_parameters"));
	cJSON *r;
	int rc;

	if (params) {
		cJSON_DeleteItemFromObjectCaseSensitive(o, "rope_theta");
		cJSON_DeleteItemFromObjectCaseSensitive(o, "rope_scaling");
	} else {
		rc = set(o, "rope_theta", zn_hf_json_float(c->rope_theta));
		if (rc || rs->type != ZN_HF_ROPE_LLAMA3)
			return rc ? rc : set(o, "rope_scaling", cJSON_CreateNull());
	}
	r = cJSON_CreateObject();
	rc = set(o, params ? "rope_parameters" : "rope_scaling", r);
	if (!rc && params)
		rc = set(r, "rope_theta", zn_hf_json_float(c->rope_theta));
	if (!rc)
		rc = set(r, "rope_type", cJSON_CreateString(rs->type == ZN_HF_ROPE_LLAMA3 ?
								   "llama3" : "default"));
	if (rc || rs->type != ZN_HF_ROPE_LLAMA3)
		return rc;
	rc = set(r, "factor", zn_hf_json_float(rs->factor));
	if (!rc)
		rc = set(r, "low_freq_factor", zn_hf_json_float(rs->low_freq_factor));
	if (!rc)
		rc = set(r, "high_freq_factor", zn_hf_json_float(rs->high_freq_factor));
	if (!rc)
		rc = set_int(r, "original_max_position_embeddings",
			     rs->original_max_position_embeddings);
	return rc;
}

static int write_gpt2(cJSON *o, const struct zn_hf_config *c)
{
	int rc = set_arch(o, "GPT2LMHeadModel");

	if (!rc)
		rc = set(o, "activation_function", cJSON_CreateString("gelu_new"));
	if (!rc)
		rc = set_int(o, "n_embd", c->hidden_size);
	if (!rc)
		rc = set_int(o, "n_layer", c->num_hidden_layers);
	if (!rc)
		rc = set_int(o, "n_head", c->num_attention_heads);
	if (!rc)
		rc = set_int(o, "n_positions", c->max_position_embeddings);
	if (!rc && cJSON_GetObjectItemCaseSensitive(o, "n_ctx"))
		rc = set_int(o, "n_ctx", c->max_position_embeddings);
	if (!rc)
		rc = c->intermediate_size == 4 * c->hidden_size ?
			     set(o, "n_inner", cJSON_CreateNull()) :
			     set_int(o, "n_inner", c->intermediate_size);
	if (!rc)
		rc = set(o, "layer_norm_epsilon", zn_hf_json_float(c->norm_eps));
	return rc;
}

static int write_llama(cJSON *o, const struct zn_hf_config *c)
{
	static const char *const arch[] = { "", "LlamaForCausalLM", "Qwen2ForCausalLM",
					    "MistralForCausalLM" };
	int rc = set_arch(o, arch[c->family]);

	if (!rc)
		rc = set(o, "hidden_act", cJSON_CreateString("silu"));
	if (!rc)
		rc = set_int(o, "hidden_size", c->hidden_size);
	if (!rc)
		rc = set_int(o, "intermediate_size", c->intermediate_size);
	if (!rc)
		rc = set_int(o, "num_hidden_layers", c->num_hidden_layers);
	if (!rc)
		rc = set_int(o, "num_attention_heads", c->num_attention_heads);
	if (!rc)
		rc = set_int(o, "num_key_value_heads", c->num_key_value_heads);
	if (!rc)
		rc = set_int(o, "head_dim", c->head_dim);
	if (!rc)
		rc = set_int(o, "max_position_embeddings", c->max_position_embeddings);
	if (!rc)
		rc = set(o, "rms_norm_eps", zn_hf_json_float(c->norm_eps));
	if (!rc)
		rc = set_rope(o, c);
	if (!rc && c->family == ZN_HF_LLAMA)
		rc = set(o, "attention_bias", cJSON_CreateBool(c->attention_bias));
	if (!rc && c->family == ZN_HF_LLAMA)
		rc = set(o, "mlp_bias", cJSON_CreateFalse());
	if (!rc && c->family == ZN_HF_QWEN2)
		rc = set(o, "use_sliding_window", cJSON_CreateBool(c->sliding_window > 0));
	if (!rc && c->family == ZN_HF_MISTRAL)
		rc = c->sliding_window ? set_int(o, "sliding_window", c->sliding_window) :
					 set(o, "sliding_window", cJSON_CreateNull());
	if (!rc && c->family == ZN_HF_QWEN2 && c->sliding_window)
		rc = set_int(o, "sliding_window", c->sliding_window);
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
	rc = set(o, "model_type", cJSON_CreateString(zn_hf_family_name(cfg->family)));
	if (!rc)
		rc = cfg->family == ZN_HF_GPT2 ? write_gpt2(o, cfg) : write_llama(o, cfg);
	if (!rc)
		rc = set(o, "tie_word_embeddings", cJSON_CreateBool(cfg->tie_word_embeddings));
	if (!rc)
		rc = set_int(o, "vocab_size", cfg->vocab_size);
	if (!rc && cfg->torch_dtype[0])
		rc = set(o, dtype_key, cJSON_CreateString(cfg->torch_dtype));
	if (!rc)
		text = zn_hf_json_dumps(o);
delete_obj:
	cJSON_Delete(o);
	return text;
}
