/* The Llama family's config.json, checkpoint layout and parameter count (its registry
 * entry's hf_* hooks, model/family.h) for each model_type it reads: llama, qwen2, mistral,
 * qwen3, mixtral, qwen3_moe (whose expert keys llama_moe_hf.c reads).
 *
 * Keys: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 * vocab_size, max_position_embeddings (required); num_key_value_heads (a divisor of the
 * heads), head_dim (hidden_size / heads when absent, which must then divide), rms_norm_eps
 * (1e-6), rope_theta (10000), rope_scaling (null, "default" or "llama3") or transformers
 * 5's rope_parameters, attention_bias, mlp_bias (must be false), tie_word_embeddings
 * (false), hidden_act (silu); mistral's sliding_window (null: none); qwen2's
 * use_sliding_window (false: sliding_window ignored); qwen3: head_dim (default 128, as
 * Qwen3Config), use_sliding_window (must be false), sliding_window (null or a positive
 * integer), max_window_layers (an integer >= 0), layer_types (one "full_attention" or
 * "sliding_attention" per layer), attention_dropout (0), all checked, the window unused.
 * Layout (H hidden, I intermediate, V vocab, NH heads, KV kv heads, D head_dim; [out, in]
 * as torch.nn.Linear stores it):
 *   model.embed_tokens.weight                      [V, H]
 *   model.layers.N.input_layernorm.weight          [H]
 *   model.layers.N.self_attn.q_proj.weight         [NH*D, H]   (+ .bias [NH*D])
 *   model.layers.N.self_attn.k_proj.weight         [KV*D, H]   (+ .bias [KV*D])
 *   model.layers.N.self_attn.v_proj.weight         [KV*D, H]   (+ .bias [KV*D])
 *   model.layers.N.self_attn.o_proj.weight         [H, NH*D]   (+ .bias [H], llama only)
 *   model.layers.N.post_attention_layernorm.weight [H]
 *   model.layers.N.mlp.gate_proj.weight            [I, H]
 *   model.layers.N.mlp.up_proj.weight              [I, H]
 *   model.layers.N.mlp.down_proj.weight            [H, I]
 *   model.norm.weight                              [H]
 *   lm_head.weight                                 [V, H]      (only when untied)
 * qwen3 adds model.layers.N.self_attn.q_norm.weight and k_norm.weight [D]; qwen3_moe is
 * qwen3 whose sparse blocks (zn_llama_hf_is_moe_layer) have, for the mlp.* tensors, E
 * experts of intermediate IE (moe_intermediate_size):
 *   model.layers.N.mlp.gate.weight                 [E, H]      the router
 *   model.layers.N.mlp.experts.X.gate_proj.weight  [IE, H]     X = 0 .. E-1
 *   model.layers.N.mlp.experts.X.up_proj.weight    [IE, H]
 *   model.layers.N.mlp.experts.X.down_proj.weight  [H, IE]
 * and mixtral is mistral with every block sparse: block_sparse_moe.gate.weight and
 * block_sparse_moe.experts.X.w1 (gate), w3 (up), w2 (down) .weight (IE = I).
 * Biases: llama and qwen3 with attention_bias true on q, k, v and o; qwen2 always on q, k
 * and v (never o); mistral none.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "model/hf_family.h"
#include "model/llama/llama.h"

static int parse_window(const struct zn_hf_keys *c, struct zn_hf_config *cfg)
{
	bool use = cfg->type == ZN_LLAMA_MISTRAL || cfg->type == ZN_LLAMA_MIXTRAL;
	int rc = 0;

	cfg->sliding_window = 0;
	if (cfg->type == ZN_LLAMA_QWEN2)
		rc = zn_hf_key_bool(c, "use_sliding_window", false, &use);
	if (!rc && use)
		rc = zn_hf_key_int(c, "sliding_window", NULL, false, 0, 1, ZN_HF_MAX_INT,
				   &cfg->sliding_window);
	return rc;
}

/* layer_types, when present: one "full_attention" or "sliding_attention" per layer (with
 * use_sliding_window false transformers attends in full either way) */
static int parse_layer_types(const struct zn_hf_keys *c, const struct zn_hf_config *cfg)
{
	const cJSON *v = zn_hf_key(c, "layer_types", NULL), *e;
	bool ok = cJSON_IsArray(v);
	int64_t n = 0;

	if (!v)
		return 0;
	cJSON_ArrayForEach(e, v) {
		ok = ok && cJSON_IsString(e) && (!strcmp(e->valuestring, "full_attention") ||
						 !strcmp(e->valuestring, "sliding_attention"));
		n++;
	}
	if (!ok || n != cfg->num_hidden_layers) {
		zn_error("%s: key \"layer_types\" must be a list of %lld strings, each "
			 "\"full_attention\" or \"sliding_attention\"", c->path,
			 (long long)cfg->num_hidden_layers);
		return -EINVAL;
	}
	return 0;
}

/* Qwen3's own keys (transformers' Qwen3Config): no sliding window (use_sliding_window must
 * be false; sliding_window, max_window_layers and layer_types are then checked and
 * unused), attention_dropout 0 (zinc has no attention dropout) */
static int parse_qwen3(const struct zn_hf_keys *c, struct zn_hf_config *cfg)
{
	bool use = false;
	int64_t unused;
	double dropout;
	int rc = zn_hf_key_bool(c, "use_sliding_window", false, &use);

	if (!rc && use) {
		zn_error("%s: key \"use_sliding_window\" is true: zinc's Qwen3 attends over the "
			 "whole sequence in every layer (set it false)", c->path);
		return -EINVAL;
	}
	if (!rc)
		rc = zn_hf_key_int(c, "sliding_window", NULL, false, 0, 1, ZN_HF_MAX_INT, &unused);
	if (!rc)
		rc = zn_hf_key_int(c, "max_window_layers", NULL, false, 0, 0, ZN_HF_MAX_INT,
				   &unused);
	if (!rc)
		rc = parse_layer_types(c, cfg);
	if (!rc)
		rc = zn_hf_key_num(c, "attention_dropout", NULL, false, 0, -1, 1, &dropout);
	if (!rc && dropout != 0) {
		zn_error("%s: key \"attention_dropout\" is %g: zinc has no attention dropout "
			 "(set it 0.0)", c->path, dropout);
		return -EINVAL;
	}
	cfg->sliding_window = 0;
	return rc;
}

int zn_llama_hf_parse(const struct zn_hf_keys *c, struct zn_hf_config *cfg)
{
	static const char *const acts[] = { "silu" };
	bool mlp_bias = false;
	bool qwen3 = cfg->type == ZN_LLAMA_QWEN3 || cfg->type == ZN_LLAMA_QWEN3_MOE;
	int rc;

	rc = zn_hf_key_int(c, "hidden_size", NULL, true, 0, 1, ZN_HF_MAX_DIM, &cfg->hidden_size);
	if (!rc)
		rc = zn_hf_key_int(c, "intermediate_size", NULL, true, 0, 1, ZN_HF_MAX_DIM,
				   &cfg->intermediate_size);
	if (!rc)
		rc = zn_hf_key_int(c, "num_hidden_layers", NULL, true, 0, 1, 100000,
				   &cfg->num_hidden_layers);
	if (!rc) /* Qwen3Config's head_dim defaults to 128 */
		rc = zn_hf_key_heads(c, cfg, cfg->type == ZN_LLAMA_QWEN3 ? 128 : 0);
	if (!rc)
		rc = zn_hf_key_int(c, "vocab_size", NULL, true, 0, 1, ZN_HF_MAX_INT,
				   &cfg->vocab_size);
	if (!rc)
		rc = zn_hf_key_int(c, "max_position_embeddings", NULL, true, 0, 1, ZN_HF_MAX_INT,
				   &cfg->max_position_embeddings);
	if (!rc)
		rc = zn_hf_key_num(c, "rms_norm_eps", NULL, false, 1e-6, 0, 1, &cfg->norm_eps);
	if (!rc)
		rc = zn_hf_key_rope(c, cfg);
	if (!rc)
		rc = zn_hf_key_bool(c, "attention_bias", cfg->type == ZN_LLAMA_QWEN2,
				    &cfg->attention_bias);
	if (!rc)
		rc = zn_hf_key_bool(c, "mlp_bias", false, &mlp_bias);
	if (!rc)
		rc = zn_hf_key_bool(c, "tie_word_embeddings", false, &cfg->tie_word_embeddings);
	if (!rc)
		rc = qwen3 ? parse_qwen3(c, cfg) : parse_window(c, cfg);
	if (!rc && (cfg->type == ZN_LLAMA_MIXTRAL || cfg->type == ZN_LLAMA_QWEN3_MOE))
		rc = zn_llama_hf_parse_moe(c, cfg);
	if (!rc)
		rc = zn_hf_key_str(c, "hidden_act", acts, 1, NULL);
	if (rc)
		return rc;
	if (mlp_bias) {
		zn_error("%s: key \"mlp_bias\" is true: zinc's MLP has no biases (set it false)",
			 c->path);
		return -EINVAL;
	}
	if (cfg->type == ZN_LLAMA_QWEN2)
		cfg->attention_bias = true; /* Qwen2 has q/k/v biases whatever the key says */
	if (cfg->type == ZN_LLAMA_MISTRAL || cfg->type == ZN_LLAMA_MIXTRAL)
		cfg->attention_bias = false;
	return 0;
}

int zn_llama_hf_write(cJSON *o, const struct zn_hf_config *c)
{
	bool qwen3 = c->type == ZN_LLAMA_QWEN3 || c->type == ZN_LLAMA_QWEN3_MOE;
	int rc = zn_hf_set(o, "hidden_act", cJSON_CreateString("silu"));

	if (!rc)
		rc = zn_hf_set_int(o, "hidden_size", c->hidden_size);
	if (!rc)
		rc = zn_hf_set_int(o, "intermediate_size", c->intermediate_size);
	if (!rc)
		rc = zn_hf_set_int(o, "num_hidden_layers", c->num_hidden_layers);
	if (!rc)
		rc = zn_hf_set_int(o, "num_attention_heads", c->num_attention_heads);
	if (!rc)
		rc = zn_hf_set_int(o, "num_key_value_heads", c->num_key_value_heads);
	if (!rc)
		rc = zn_hf_set_int(o, "head_dim", c->head_dim);
	if (!rc)
		rc = zn_hf_set_int(o, "max_position_embeddings", c->max_position_embeddings);
	if (!rc)
		rc = zn_hf_set(o, "rms_norm_eps", zn_hf_json_float(c->norm_eps));
	if (!rc)
		rc = zn_hf_set_rope(o, c);
	if (!rc && (c->type == ZN_LLAMA_LLAMA || qwen3))
		rc = zn_hf_set(o, "attention_bias", cJSON_CreateBool(c->attention_bias));
	if (!rc && qwen3) /* Qwen3Config's to_dict: the window None */
		rc = zn_hf_set(o, "use_sliding_window", cJSON_CreateFalse());
	if (!rc && qwen3)
		rc = zn_hf_set(o, "sliding_window", cJSON_CreateNull());
	if (!rc && c->type == ZN_LLAMA_LLAMA)
		rc = zn_hf_set(o, "mlp_bias", cJSON_CreateFalse());
	if (!rc && c->type == ZN_LLAMA_QWEN2)
		rc = zn_hf_set(o, "use_sliding_window", cJSON_CreateBool(c->sliding_window > 0));
	if (!rc && (c->type == ZN_LLAMA_MISTRAL || c->type == ZN_LLAMA_MIXTRAL))
		rc = c->sliding_window ? zn_hf_set_int(o, "sliding_window", c->sliding_window) :
					 zn_hf_set(o, "sliding_window", cJSON_CreateNull());
	if (!rc && c->type == ZN_LLAMA_QWEN2 && c->sliding_window)
		rc = zn_hf_set_int(o, "sliding_window", c->sliding_window);
	if (!rc && c->num_experts > 0)
		rc = zn_llama_hf_write_moe(o, c);
	return rc;
}

/* An MoE block's router and experts as the published checkpoints name them (Mixtral's
 * block_sparse_moe.gate, experts.N.w1 (gate), w3 (up), w2 (down); Qwen3-MoE's mlp.gate,
 * experts.N.gate_proj, up_proj, down_proj) */
static void experts(const struct zn_hf_config *c, struct zn_hf_emit *e, int b, long long n)
{
	const int64_t H = c->hidden_size, I = c->moe_intermediate_size;
	const bool mixtral = c->type == ZN_LLAMA_MIXTRAL;
	const char *m = mixtral ? "block_sparse_moe" : "mlp";
	const char *g = mixtral ? "w1" : "gate_proj", *u = mixtral ? "w3" : "up_proj";
	const char *d = mixtral ? "w2" : "down_proj";

	zn_hf_emit(e, b, 2, c->num_experts, H, "model.layers.%lld.%s.gate.weight", n, m);
	for (int64_t x = 0; x < c->num_experts; x++) {
		const long long j = (long long)x;

		zn_hf_emit(e, b, 2, I, H, "model.layers.%lld.%s.experts.%lld.%s.weight", n, m, j, g);
		zn_hf_emit(e, b, 2, I, H, "model.layers.%lld.%s.experts.%lld.%s.weight", n, m, j, u);
		zn_hf_emit(e, b, 2, H, I, "model.layers.%lld.%s.experts.%lld.%s.weight", n, m, j, d);
	}
}

void zn_llama_hf_layout(const struct zn_hf_config *c, struct zn_hf_emit *e)
{
	const int64_t H = c->hidden_size, I = c->intermediate_size;
	const int64_t Q = c->num_attention_heads * c->head_dim;
	const int64_t KV = c->num_key_value_heads * c->head_dim;
	const int qkv_bias = c->attention_bias;
	const int o_bias = c->attention_bias && c->type != ZN_LLAMA_QWEN2;
	const int qk_norm = c->type == ZN_LLAMA_QWEN3 || c->type == ZN_LLAMA_QWEN3_MOE;
	const int last = (int)c->num_hidden_layers + 1;

	zn_hf_emit(e, 0, 2, c->vocab_size, H, "model.embed_tokens.weight");
	for (int64_t l = 0; l < c->num_hidden_layers; l++) {
		const long long n = (long long)l;
		const int b = (int)l + 1;

#define P "model.layers.%lld."
		zn_hf_emit(e, b, 1, H, 0, P "input_layernorm.weight", n);
		zn_hf_emit(e, b, 2, Q, H, P "self_attn.q_proj.weight", n);
		if (qkv_bias)
			zn_hf_emit(e, b, 1, Q, 0, P "self_attn.q_proj.bias", n);
		zn_hf_emit(e, b, 2, KV, H, P "self_attn.k_proj.weight", n);
		if (qkv_bias)
			zn_hf_emit(e, b, 1, KV, 0, P "self_attn.k_proj.bias", n);
		zn_hf_emit(e, b, 2, KV, H, P "self_attn.v_proj.weight", n);
		if (qkv_bias)
			zn_hf_emit(e, b, 1, KV, 0, P "self_attn.v_proj.bias", n);
		zn_hf_emit(e, b, 2, H, Q, P "self_attn.o_proj.weight", n);
		if (o_bias)
			zn_hf_emit(e, b, 1, H, 0, P "self_attn.o_proj.bias", n);
		if (qk_norm) {
			zn_hf_emit(e, b, 1, c->head_dim, 0, P "self_attn.q_norm.weight", n);
			zn_hf_emit(e, b, 1, c->head_dim, 0, P "self_attn.k_norm.weight", n);
		}
		zn_hf_emit(e, b, 1, H, 0, P "post_attention_layernorm.weight", n);
		if (zn_llama_hf_is_moe_layer(c, l)) {
			experts(c, e, b, n);
			continue;
		}
		zn_hf_emit(e, b, 2, I, H, P "mlp.gate_proj.weight", n);
		zn_hf_emit(e, b, 2, I, H, P "mlp.up_proj.weight", n);
		zn_hf_emit(e, b, 2, H, I, P "mlp.down_proj.weight", n);
	}
#undef P
	zn_hf_emit(e, last, 1, H, 0, "model.norm.weight");
	if (!c->tie_word_embeddings)
		zn_hf_emit(e, last, 2, c->vocab_size, H, "lm_head.weight");
}

uint64_t zn_llama_hf_param_count(const struct zn_hf_config *c)
{
	const uint64_t H = (uint64_t)c->hidden_size, I = (uint64_t)c->intermediate_size;
	const uint64_t V = (uint64_t)c->vocab_size, L = (uint64_t)c->num_hidden_layers;
	const uint64_t Q = (uint64_t)(c->num_attention_heads * c->head_dim);
	const uint64_t KV = (uint64_t)(c->num_key_value_heads * c->head_dim);
	const uint64_t E = (uint64_t)c->num_experts, IE = (uint64_t)c->moe_intermediate_size;
	uint64_t block = 2 * H + Q * H + 2 * KV * H + H * Q, sum = 0;

	if (c->attention_bias)
		block += Q + 2 * KV + (c->type != ZN_LLAMA_QWEN2 ? H : 0);
	if (c->type == ZN_LLAMA_QWEN3 || c->type == ZN_LLAMA_QWEN3_MOE)
		block += 2 * (uint64_t)c->head_dim; /* q_norm, k_norm */
	for (uint64_t l = 0; l < L; l++) /* the router and E experts, or the dense MLP */
		sum += block + (zn_llama_hf_is_moe_layer(c, (int64_t)l) ? E * H + E * 3 * H * IE :
									   3 * H * I);
	return V * H * (c->tie_word_embeddings ? 1 : 2) + sum + H;
}
