/* Hugging Face config.json: the model_types of the registered families (model/family.h:
 * gpt2; llama, qwen2, mistral, qwen3) read into one family-neutral struct, written back,
 * and the tensor layout (names and shapes as the published checkpoints hold them) with its
 * parameter count. What is common lives here (model_type, torch_dtype, the layout walk);
 * each family's keys, tensor names and count are its registry entry's hooks (the GPT-2
 * family's in src/model/gpt2/gpt2_hf.c, the Llama family's in src/model/llama/llama_hf.c,
 * whose opening comments list the keys and the layouts).
 *
 * Parsing checks every key it reads (type and range) and refuses, in one line naming the
 * file and the key: an unknown model_type, a missing required key, a non-positive size, and
 * whatever the family cannot build (its hook's comment says what).
 * zn_hf_param_count is the sum over the layout: Hugging Face's num_parameters() (a tied
 * lm_head counted once).
 */
#ifndef ZN_MODEL_HF_CONFIG_H
#define ZN_MODEL_HF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#define ZN_HF_NAME_MAX 96
#define ZN_HF_MAX_MOE_LAYERS 1024 /* layers of a mixture-of-experts model */

struct zn_family;

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
	const struct zn_family *family; /* its registry entry (model/family.h) */
	int type;                       /* its model_type: the index in family->types */
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
	/* a mixture of experts (mixtral, qwen3_moe; 0 experts: none) */
	int64_t num_experts;           /* num_local_experts (mixtral), num_experts */
	int64_t num_experts_per_tok;
	int64_t moe_intermediate_size; /* an expert's; mixtral: intermediate_size */
	int64_t decoder_sparse_step;   /* qwen3_moe: layer n is sparse when (n+1) % step == 0 */
	bool norm_topk_prob;           /* mixtral: always true */
	bool output_router_logits;     /* the load-balancing loss is added */
	double router_aux_loss_coef;
	/* qwen3_moe's mlp_only_layers: bit n set, layer n has the dense MLP */
	uint8_t mlp_only[ZN_HF_MAX_MOE_LAYERS / 8];
};

/* One tensor of the layout. */
struct zn_hf_tensor_spec {
	char name[ZN_HF_NAME_MAX];
	int ndim; /* 1 or 2 */
	int64_t shape[2];
	int layer; /* 0 embeddings, 1..L blocks, L + 1 final norm and lm_head */
};

/* cfg's model_type ("qwen2"), or "?" without a family */
const char *zn_hf_model_type(const struct zn_hf_config *cfg);

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
