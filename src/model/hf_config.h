/* Hugging Face config.json: the model_types zinc knows (gpt2, llama, qwen2, mistral) read
 * into one family-neutral struct, written back, and the tensor layout (names and shapes as
 * the published checkpoints hold them) with its parameter count.
 *
 * Parsing checks every key it reads (type and range) and refuses, in one line naming the
 * file and the key: an unknown model_type, a missing required key, a non-positive size,
 * hidden_size not heads x head_dim where head_dim is implied, num_attention_heads not a
 * multiple of num_key_value_heads, mlp_bias true, a rope_scaling type other than llama3
 * (or null/absent), a hidden_act other than the family's (silu; GPT-2's gelu_new/gelu).
 * GPT-2's names (n_embd, n_layer, n_head, n_positions, n_inner, layer_norm_epsilon) map
 * onto the same fields; GPT-2's intermediate_size is n_inner or 4 x n_embd.
 *
 * Layout (zn_hf_layout), Llama / Qwen2 / Mistral (H hidden, I intermediate, V vocab, NH
 * heads, KV kv heads, D head_dim; [out, in] as torch.nn.Linear stores it):
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
 * Biases: llama with attention_bias true on q, k, v and o; qwen2 always on q, k and v
 * (never o); mistral none.
 * GPT-2 (Conv1D weights are [in, out]), as GPT2LMHeadModel names them:
 *   transformer.wte.weight [V, C], transformer.wpe.weight [P, C],
 *   transformer.h.N.ln_1.weight/.bias [C], .attn.c_attn.weight [C, 3C] / .bias [3C],
 *   .attn.c_proj.weight [C, C] / .bias [C], .ln_2.weight/.bias [C],
 *   .mlp.c_fc.weight [C, I] / .bias [I], .mlp.c_proj.weight [I, C] / .bias [C],
 *   transformer.ln_f.weight/.bias [C]; lm_head tied to wte (never stored).
 * zn_hf_param_count is the sum over the layout: Hugging Face's num_parameters() (a tied
 * lm_head counted once).
 */
#ifndef ZN_MODEL_HF_CONFIG_H
#define ZN_MODEL_HF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#define ZN_HF_NAME_MAX 96

enum zn_hf_family {
	ZN_HF_GPT2 = 0,
	ZN_HF_LLAMA = 1,
	ZN_HF_QWEN2 = 2,
	ZN_HF_MISTRAL = 3,
};

enum zn_hf_rope_type {
	ZN_HF_ROPE_DEFAULT = 0, /* rope_scaling null or absent */
	ZN_HF_ROPE_LLAMA3 = 1,
};

struct zn_hf_rope_scaling {
	int type; /* enum zn_hf_rope_type */
	double factor, low_freq_factor, high_freq_factor;
	int64_t original_max_position_embeddings;
};

struct zn_hf_config {
	int family; /* enum zn_hf_family */
	int64_t hidden_size;
	int64_t intermediate_size;
	int64_t num_hidden_layers;
	int64_t num_attention_heads;
	int64_t num_key_value_heads; /* = num_attention_heads when absent (and for GPT-2) */
	int64_t head_dim;            /* = hidden_size / num_attention_heads when absent */
	int64_t vocab_size;
	int64_t max_position_embeddings; /* GPT-2: n_positions */
	double norm_eps;                 /* rms_norm_eps; GPT-2: layer_norm_epsilon */
	double rope_theta;               /* 0 for GPT-2 */
	struct zn_hf_rope_scaling rope_scaling;
	bool attention_bias;      /* llama's key; qwen2: q/k/v biases (always true) */
	bool tie_word_embeddings; /* GPT-2: always true */
	int64_t sliding_window;   /* 0: none (qwen2: only with use_sliding_window true) */
	char torch_dtype[16];     /* "bfloat16", "float32", "float16" or "" */
};

/* One tensor of the layout. */
struct zn_hf_tensor_spec {
	char name[ZN_HF_NAME_MAX];
	int ndim; /* 1 or 2 */
	int64_t shape[2];
	int layer; /* 0 embeddings, 1..L blocks, L + 1 final norm and lm_head */
};

const char *zn_hf_family_name(int family); /* "gpt2", "llama", "qwen2", "mistral" */

/* Parses config.json text json[0 .. len) (core/json.h's rules: a repeated key takes its
 * last value, a NUL byte is refused); path names the file in errors. Returns 0 or
 * -EINVAL. zn_hf_config_parse: the same for a NUL-terminated string. */
int zn_hf_config_parse_n(const char *json, size_t len, const char *path,
			 struct zn_hf_config *out);
int zn_hf_config_parse(const char *json, const char *path, struct zn_hf_config *out);

/* Reads and parses the file at path. Returns 0, -errno or -EINVAL. */
int zn_hf_config_load(const char *path, struct zn_hf_config *out);

/* config.json text for cfg as transformers writes it (json.dumps indent 2, sorted keys,
 * trailing newline): architectures, model_type and the family's own key names. base_json,
 * when not NULL, is the config.json the model came from: its other keys (bos_token_id,
 * eos_token_id, initializer_range, ...) are kept. Returns a malloc'd string or NULL (out
 * of memory, or base_json not a JSON object). */
char *zn_hf_config_to_json(const struct zn_hf_config *cfg, const char *base_json);

/* Number of tensors in the layout. */
int zn_hf_layout_count(const struct zn_hf_config *cfg);

/* Fills out[0 .. zn_hf_layout_count) in checkpoint order (embeddings, layer 0 .. L-1,
 * final norm, lm_head). */
void zn_hf_layout(const struct zn_hf_config *cfg, struct zn_hf_tensor_spec *out);

/* Parameters, as Hugging Face's num_parameters() reports them. */
uint64_t zn_hf_param_count(const struct zn_hf_config *cfg);

#endif
