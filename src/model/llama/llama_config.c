/* Llama-family configuration: from a Hugging Face config.json, validation (presets and
 * flags: llama_presets.c). */
#include <errno.h>
#include <string.h>

#include "core/log.h"
#include "model/family.h"
#include "model/llama/llama.h"

static int fits_int(int64_t v, const char *key)
{
	if (v <= 0 || v > 0x7fffffff) {
		zn_error("llama model: config.json %s = %lld must be in 1 .. 2^31-1", key,
			 (long long)v);
		return 0;
	}
	return 1;
}

int zn_llama_config_from_hf(const struct zn_hf_config *hf, struct zn_llama_config *cfg)
{
	if (hf->family != &zn_llama_family) {
		zn_error("llama model: config.json model_type %s is not one of the Llama "
			 "family's", zn_hf_model_type(hf));
		return -EINVAL;
	}
	if (!fits_int(hf->num_hidden_layers, "num_hidden_layers") ||
	    !fits_int(hf->hidden_size, "hidden_size") ||
	    !fits_int(hf->intermediate_size, "intermediate_size") ||
	    !fits_int(hf->num_attention_heads, "num_attention_heads") ||
	    !fits_int(hf->num_key_value_heads, "num_key_value_heads") ||
	    !fits_int(hf->head_dim, "head_dim") || !fits_int(hf->vocab_size, "vocab_size") ||
	    !fits_int(hf->max_position_embeddings, "max_position_embeddings"))
		return -EINVAL;
	memset(cfg, 0, sizeof(*cfg));
	cfg->layers = (int)hf->num_hidden_layers;
	cfg->hidden = (int)hf->hidden_size;
	cfg->intermediate = (int)hf->intermediate_size;
	cfg->heads = (int)hf->num_attention_heads;
	cfg->kv_heads = (int)hf->num_key_value_heads;
	cfg->head_dim = (int)hf->head_dim;
	cfg->vocab = (int)hf->vocab_size;
	cfg->max_positions = hf->max_position_embeddings;
	cfg->window = hf->sliding_window > 0x7fffffff ? 0x7fffffff : (int)hf->sliding_window;
	/* the default training length: a 128k-position model does not train at 128k */
	cfg->seq = (int)(hf->max_position_embeddings < ZN_LLAMA_DEFAULT_SEQ ?
			 hf->max_position_embeddings : ZN_LLAMA_DEFAULT_SEQ);
	if (cfg->window > 0 && cfg->seq > cfg->window)
		cfg->seq = cfg->window;
	cfg->eps = (float)hf->norm_eps;
	/* Qwen3's attention is Llama's (attention_bias on q, k, v and o) with q_norm/k_norm */
	cfg->qkv_bias = hf->type == ZN_LLAMA_QWEN2 ||
			(hf->type != ZN_LLAMA_MISTRAL && hf->attention_bias);
	cfg->o_bias = hf->type != ZN_LLAMA_QWEN2 && hf->type != ZN_LLAMA_MISTRAL &&
		      hf->attention_bias;
	cfg->qk_norm = hf->type == ZN_LLAMA_QWEN3 || hf->type == ZN_LLAMA_QWEN3_MOE;
	if (hf->type == ZN_LLAMA_MIXTRAL || hf->type == ZN_LLAMA_QWEN3_MOE) {
		cfg->experts = (int)hf->num_experts;
		cfg->experts_per_tok = (int)hf->num_experts_per_tok;
		cfg->moe_intermediate = (int)hf->moe_intermediate_size;
		cfg->sparse_step = (int)hf->decoder_sparse_step;
		cfg->norm_topk = hf->norm_topk_prob;
		cfg->aux = hf->output_router_logits;
		cfg->aux_coef = (float)hf->router_aux_loss_coef;
		memcpy(cfg->mlp_only, hf->mlp_only, sizeof(cfg->mlp_only));
	}
	cfg->tied = hf->tie_word_embeddings;
	cfg->rope.theta = hf->rope_theta;
	cfg->rope.type = hf->rope_scaling.type == ZN_HF_ROPE_LLAMA3 ? ZN_ROPE_LLAMA3 :
								    ZN_ROPE_DEFAULT;
	cfg->rope.factor = hf->rope_scaling.factor;
	cfg->rope.low_freq_factor = hf->rope_scaling.low_freq_factor;
	cfg->rope.high_freq_factor = hf->rope_scaling.high_freq_factor;
	cfg->rope.original_max_position_embeddings =
		hf->rope_scaling.original_max_position_embeddings;
	return zn_llama_config_validate(cfg);
}

static int validate_moe(const struct zn_llama_config *c)
{
	if (c->experts < 0 || c->experts > ZN_LLAMA_MAX_EXPERTS || c->experts_per_tok < 1 ||
	    c->experts_per_tok > c->experts || c->moe_intermediate < 1 || c->sparse_step < 1 ||
	    c->layers > ZN_HF_MAX_MOE_LAYERS || !(c->aux_coef >= 0.0f) ||
	    2 * (int64_t)c->moe_intermediate * c->hidden > 0x7fffffff) {
		zn_error("llama model: experts %d (at most %d), experts_per_tok %d (1 .. experts), "
			 "moe_intermediate %d, sparse_step %d must be positive, layers %d at most "
			 "%d, router_aux_loss_coef %g >= 0", c->experts, ZN_LLAMA_MAX_EXPERTS,
			 c->experts_per_tok, c->moe_intermediate, c->sparse_step, c->layers,
			 ZN_HF_MAX_MOE_LAYERS, (double)c->aux_coef);
		return -EINVAL;
	}
	if (c->window > 0 && c->qk_norm) {
		zn_error("llama model: Qwen3-MoE has no sliding window");
		return -EINVAL;
	}
	/* Mixtral's config.json has one intermediate_size, its experts' */
	if (!c->qk_norm && c->moe_intermediate != c->intermediate) {
		zn_error("llama model: a Mixtral's experts are its intermediate size (%d), not %d: "
			 "config.json has one intermediate_size", c->intermediate,
			 c->moe_intermediate);
		return -EINVAL;
	}
	return 0;
}

int zn_llama_config_validate(struct zn_llama_config *cfg)
{
	int64_t S, bigT;

	if (cfg->layers <= 0 || cfg->hidden <= 0 || cfg->intermediate <= 0 || cfg->heads <= 0 ||
	    cfg->kv_heads <= 0 || cfg->head_dim <= 0 || cfg->vocab <= 0 || cfg->seq <= 0 ||
	    cfg->window < 0) {
		zn_error("llama model: layers %d, hidden %d, intermediate %d, heads %d, kv_heads "
			 "%d, head_dim %d, vocab %d, seq %d must be positive (window %d >= 0)",
			 cfg->layers, cfg->hidden, cfg->intermediate, cfg->heads, cfg->kv_heads,
			 cfg->head_dim, cfg->vocab, cfg->seq, cfg->window);
		return -EINVAL;
	}
	if (cfg->heads % cfg->kv_heads) {
		zn_error("llama model: heads %d is not a multiple of kv_heads %d", cfg->heads,
			 cfg->kv_heads);
		return -EINVAL;
	}
	if (cfg->qk_norm && (cfg->window > 0 || cfg->qkv_bias != cfg->o_bias)) {
		zn_error("llama model: q/k norms (Qwen3) with window %d, qkv_bias %d, o_bias %d: "
			 "Qwen3 has no sliding window and its attention_bias is on q, k, v and o "
			 "together", cfg->window, cfg->qkv_bias, cfg->o_bias);
		return -EINVAL;
	}
	if (cfg->experts && validate_moe(cfg))
		return -EINVAL;
	if (!(cfg->eps > 0.0f)) {
		zn_error("llama model: rms_norm_eps %g must be > 0", (double)cfg->eps);
		return -EINVAL;
	}
	/* a sequence longer than Mistral's sliding_window is fine: the fused attention masks
	 * keys t - t2 >= window (kernels/kernels.h, flash_attention) */
	S = (int64_t)(cfg->heads + 2 * cfg->kv_heads) * cfg->head_dim;
	bigT = (int64_t)cfg->seq * cfg->seq * cfg->heads;
	if (S > 0x7fffffff || 2 * (int64_t)cfg->intermediate > 0x7fffffff ||
	    (int64_t)cfg->vocab * cfg->hidden > 0x7fffffff || bigT > ((int64_t)1 << 40)) {
		zn_error("llama model: sizes too large for the kernels' int arguments");
		return -EINVAL;
	}
	if (zn_rope_inv_freq(cfg->inv_freq, cfg->head_dim, &cfg->rope))
		return -EINVAL;
	return 0;
}
