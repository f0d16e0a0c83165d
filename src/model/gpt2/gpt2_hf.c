/* The GPT-2 family's config.json, checkpoint layout and parameter count (its registry
 * entry's hf_* hooks, model/family.h), and the shapes a lone .safetensors file carries in
 * its metadata (llm.c's and zinc's single-file saves).
 *
 * Keys: n_embd, n_layer, n_head, n_positions, vocab_size (required; transformers' aliases
 * hidden_size, num_hidden_layers, num_attention_heads, max_position_embeddings read as
 * well), n_inner (default 4 x n_embd), layer_norm_epsilon (1e-5), activation_function
 * gelu_new or gelu_pytorch_tanh, tie_word_embeddings (must be true: lm_head is wte).
 * Layout (Conv1D weights are [in, out]), as GPT2LMHeadModel names them:
 *   transformer.wte.weight [V, C], transformer.wpe.weight [P, C],
 *   transformer.h.N.ln_1.weight/.bias [C], .attn.c_attn.weight [C, 3C] / .bias [3C],
 *   .attn.c_proj.weight [C, C] / .bias [C], .ln_2.weight/.bias [C],
 *   .mlp.c_fc.weight [C, I] / .bias [I], .mlp.c_proj.weight [I, C] / .bias [C],
 *   transformer.ln_f.weight/.bias [C]; lm_head tied to wte (never stored).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "model/gpt2/gpt2.h"
#include "model/hf_family.h"
#include "model/safetensors.h"

int zn_gpt2_hf_parse(const struct zn_hf_keys *c, struct zn_hf_config *cfg)
{
	static const char *const acts[] = { "gelu_new", "gelu_pytorch_tanh" };
	int rc;

	rc = zn_hf_key_int(c, "n_embd", "hidden_size", true, 0, 1, ZN_HF_MAX_DIM,
			   &cfg->hidden_size);
	if (!rc)
		rc = zn_hf_key_int(c, "n_layer", "num_hidden_layers", true, 0, 1, 100000,
				   &cfg->num_hidden_layers);
	if (!rc)
		rc = zn_hf_key_int(c, "n_head", "num_attention_heads", true, 0, 1, cfg->hidden_size,
				   &cfg->num_attention_heads);
	if (!rc)
		rc = zn_hf_key_int(c, "n_positions", "max_position_embeddings", true, 0, 1,
				   ZN_HF_MAX_INT, &cfg->max_position_embeddings);
	if (!rc)
		rc = zn_hf_key_int(c, "vocab_size", NULL, true, 0, 1, ZN_HF_MAX_INT,
				   &cfg->vocab_size);
	if (!rc)
		rc = zn_hf_key_int(c, "n_inner", NULL, false, 4 * cfg->hidden_size, 1,
				   ZN_HF_MAX_DIM, &cfg->intermediate_size);
	if (!rc)
		rc = zn_hf_key_num(c, "layer_norm_epsilon", NULL, false, 1e-5, 0, 1,
				   &cfg->norm_eps);
	if (!rc)
		rc = zn_hf_key_str(c, "activation_function", acts, 2, NULL);
	if (!rc)
		rc = zn_hf_key_bool(c, "tie_word_embeddings", true, &cfg->tie_word_embeddings);
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

int zn_gpt2_hf_write(cJSON *o, const struct zn_hf_config *c)
{
	int rc = zn_hf_set(o, "activation_function", cJSON_CreateString("gelu_new"));

	if (!rc)
		rc = zn_hf_set_int(o, "n_embd", c->hidden_size);
	if (!rc)
		rc = zn_hf_set_int(o, "n_layer", c->num_hidden_layers);
	if (!rc)
		rc = zn_hf_set_int(o, "n_head", c->num_attention_heads);
	if (!rc)
		rc = zn_hf_set_int(o, "n_positions", c->max_position_embeddings);
	if (!rc && cJSON_GetObjectItemCaseSensitive(o, "n_ctx"))
		rc = zn_hf_set_int(o, "n_ctx", c->max_position_embeddings);
	if (!rc)
		rc = c->intermediate_size == 4 * c->hidden_size ?
			     zn_hf_set(o, "n_inner", cJSON_CreateNull()) :
			     zn_hf_set_int(o, "n_inner", c->intermediate_size);
	if (!rc)
		rc = zn_hf_set(o, "layer_norm_epsilon", zn_hf_json_float(c->norm_eps));
	return rc;
}

void zn_gpt2_hf_layout(const struct zn_hf_config *c, struct zn_hf_emit *e)
{
	const int64_t C = c->hidden_size, I = c->intermediate_size;
	const int last = (int)c->num_hidden_layers + 1;

	zn_hf_emit(e, 0, 2, c->vocab_size, C, "transformer.wte.weight");
	zn_hf_emit(e, 0, 2, c->max_position_embeddings, C, "transformer.wpe.weight");
	for (int64_t l = 0; l < c->num_hidden_layers; l++) {
		const int n = (int)l + 1;

#define H "transformer.h.%lld."
		zn_hf_emit(e, n, 1, C, 0, H "ln_1.weight", (long long)l);
		zn_hf_emit(e, n, 1, C, 0, H "ln_1.bias", (long long)l);
		zn_hf_emit(e, n, 2, C, 3 * C, H "attn.c_attn.weight", (long long)l);
		zn_hf_emit(e, n, 1, 3 * C, 0, H "attn.c_attn.bias", (long long)l);
		zn_hf_emit(e, n, 2, C, C, H "attn.c_proj.weight", (long long)l);
		zn_hf_emit(e, n, 1, C, 0, H "attn.c_proj.bias", (long long)l);
		zn_hf_emit(e, n, 1, C, 0, H "ln_2.weight", (long long)l);
		zn_hf_emit(e, n, 1, C, 0, H "ln_2.bias", (long long)l);
		zn_hf_emit(e, n, 2, C, I, H "mlp.c_fc.weight", (long long)l);
		zn_hf_emit(e, n, 1, I, 0, H "mlp.c_fc.bias", (long long)l);
		zn_hf_emit(e, n, 2, I, C, H "mlp.c_proj.weight", (long long)l);
		zn_hf_emit(e, n, 1, C, 0, H "mlp.c_proj.bias", (long long)l);
#undef H
	}
	zn_hf_emit(e, last, 1, C, 0, "transformer.ln_f.weight");
	zn_hf_emit(e, last, 1, C, 0, "transformer.ln_f.bias");
}

uint64_t zn_gpt2_hf_param_count(const struct zn_hf_config *c)
{
	const uint64_t H = (uint64_t)c->hidden_size, I = (uint64_t)c->intermediate_size;
	const uint64_t V = (uint64_t)c->vocab_size, L = (uint64_t)c->num_hidden_layers;
	const uint64_t block = 4 * H + (H * 3 * H + 3 * H) + (H * H + H) + (H * I + I) +
			       (I * H + H);

	return V * H + (uint64_t)c->max_position_embeddings * H + L * block + 2 * H;
}

/* config.json text from GPT-2's shape keys in a file's metadata (llm.c, zinc's saves) */
int zn_gpt2_metadata_config(const struct zn_st_file *f, char *buf, size_t size)
{
	static const char *const keys[] = { "n_layer", "n_head", "n_embd", "n_positions",
					    "vocab_size" };
	int at = snprintf(buf, size, "{\"model_type\": \"gpt2\"");

	for (int i = 0; i < 5; i++) {
		const char *v = zn_st_metadata(f, keys[i]);

		if (!v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 10 ||
		    (size_t)at >= size)
			return 0;
		at += snprintf(buf + at, size - (size_t)at, ", \"%s\": %s", keys[i], v);
	}
	return (size_t)at + 2 <= size && snprintf(buf + at, size - (size_t)at, "}") == 1;
}
