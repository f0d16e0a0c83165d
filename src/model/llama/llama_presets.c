/* Llama-family presets (the shapes of the published config.json files in tests/hf/), the
 * model flags, the way back to config.json fields, and the parameter count. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/llama/llama.h"

struct preset {
	const char *name;
	int layers, hidden, intermediate, heads, kv_heads, head_dim, vocab;
	int64_t max_pos;
	double theta;
	bool tied, llama3; /* llama3: rope_scaling llama3, factor 32, 1, 4, 8192 */
	int type;          /* enum zn_llama_type; 0: llama */
	double eps;        /* rms_norm_eps; 0: 1e-5 */
	/* mixtures of experts: E, K, an expert's intermediate size, norm_topk_prob,
	 * router_aux_loss_coef (E 0: dense) */
	int experts, experts_per_tok, moe_intermediate;
	bool norm_topk;
	double aux_coef;
};

/* head_dim 0: hidden / heads */
static const struct preset presets[] = {
	{ "llama-tiny", 2, 64, 128, 4, 2, 16, 256, 64, 10000.0, false, false,
	  0, 0, 0, 0, 0, false, 0 },
	{ "tinyllama-1.1b", 22, 2048, 5632, 32, 4, 0, 32000, 2048, 10000.0, false, false,
	  0, 0, 0, 0, 0, false, 0 },
	{ "llama-3.2-1b", 16, 2048, 8192, 32, 8, 64, 128256, 131072, 500000.0, true, true,
	  0, 0, 0, 0, 0, false, 0 },
	{ "llama-3.2-3b", 28, 3072, 8192, 24, 8, 128, 128256, 131072, 500000.0, true, true,
	  0, 0, 0, 0, 0, false, 0 },
	{ "llama-3-8b", 32, 4096, 14336, 32, 8, 0, 128256, 8192, 500000.0, false, false,
	  0, 0, 0, 0, 0, false, 0 },
	{ "llama-3-70b", 80, 8192, 28672, 64, 8, 0, 128256, 8192, 500000.0, false, false,
	  0, 0, 0, 0, 0, false, 0 },
	{ "llama-2-7b", 32, 4096, 11008, 32, 32, 0, 32000, 4096, 10000.0, false, false,
	  0, 0, 0, 0, 0, false, 0 },
	{ "llama-2-13b", 40, 5120, 13824, 40, 40, 0, 32000, 4096, 10000.0, false, false,
	  0, 0, 0, 0, 0, false, 0 },
	/* Qwen3ForCausalLM (docs/model.md says where each was checked) */
	{ "qwen3-0.6b", 28, 1024, 3072, 16, 8, 128, 151936, 40960, 1e6, true, false,
	  ZN_LLAMA_QWEN3, 1e-6, 0, 0, 0, false, 0 },
	{ "qwen3-1.7b", 28, 2048, 6144, 16, 8, 128, 151936, 40960, 1e6, true, false,
	  ZN_LLAMA_QWEN3, 1e-6, 0, 0, 0, false, 0 },
	{ "qwen3-4b", 36, 2560, 9728, 32, 8, 128, 151936, 40960, 1e6, true, false,
	  ZN_LLAMA_QWEN3, 1e-6, 0, 0, 0, false, 0 },
	{ "qwen3-8b", 36, 4096, 12288, 32, 8, 128, 151936, 40960, 1e6, false, false,
	  ZN_LLAMA_QWEN3, 1e-6, 0, 0, 0, false, 0 },
	{ "qwen3-14b", 40, 5120, 17408, 40, 8, 128, 151936, 40960, 1e6, false, false,
	  ZN_LLAMA_QWEN3, 1e-6, 0, 0, 0, false, 0 },
	{ "qwen3-32b", 64, 5120, 25600, 64, 8, 128, 151936, 40960, 1e6, false, false,
	  ZN_LLAMA_QWEN3, 1e-6, 0, 0, 0, false, 0 },
	/* MixtralForCausalLM, Qwen3MoeForCausalLM (docs/model.md) */
	{ "mixtral-8x7b", 32, 4096, 14336, 32, 8, 128, 32000, 32768, 1e6, false, false,
	  ZN_LLAMA_MIXTRAL, 1e-5, 8, 2, 14336, true, 0.02 },
	{ "qwen3-30b-a3b", 48, 2048, 6144, 32, 4, 128, 151936, 40960, 1e6, false, false,
	  ZN_LLAMA_QWEN3_MOE, 1e-6, 128, 8, 768, true, 0.001 },
	{ "qwen3-235b-a22b", 94, 4096, 12288, 64, 4, 128, 151936, 40960, 1e6, false, false,
	  ZN_LLAMA_QWEN3_MOE, 1e-6, 128, 8, 1536, true, 0.001 },
};

#define PRESET_COUNT ((int)(sizeof(presets) / sizeof(presets[0])))

static const char *const names[] = { "llama-tiny",  "tinyllama-1.1b", "llama-3.2-1b",
				     "llama-3.2-3b", "llama-3-8b",    "llama-3-70b",
				     "llama-2-7b",  "llama-2-13b",    "qwen3-0.6b",
				     "qwen3-1.7b",  "qwen3-4b",	      "qwen3-8b",
				     "qwen3-14b",   "qwen3-32b",      "mixtral-8x7b",
				     "qwen3-30b-a3b", "qwen3-235b-a22b", NULL };

const char *const *zn_llama_preset_names(void)
{
	return names;
}

static const struct preset *find(const char *name)
{
	for (int i = 0; name && i < PRESET_COUNT; i++)
		if (!strcmp(presets[i].name, name))
			return &presets[i];
	return NULL;
}

bool zn_llama_is_preset(const char *name)
{
	return find(name) != NULL;
}

int zn_llama_config_from_preset(const char *name, struct zn_llama_config *cfg)
{
	const struct preset *p = find(name);
	struct zn_hf_config hf = { .family = &zn_llama_family };

	if (!p) {
		zn_error("llama model: unknown preset '%s': valid: llama-tiny, tinyllama-1.1b, "
			 "llama-3.2-1b, llama-3.2-3b, llama-3-8b, llama-3-70b, llama-2-7b, "
			 "llama-2-13b, qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, "
			 "qwen3-32b, mixtral-8x7b, qwen3-30b-a3b, qwen3-235b-a22b",
			 name ? name : "");
		return -EINVAL;
	}
	hf.type = p->type;
	hf.hidden_size = p->hidden;
	hf.intermediate_size = p->intermediate;
	hf.num_hidden_layers = p->layers;
	hf.num_attention_heads = p->heads;
	hf.num_key_value_heads = p->kv_heads;
	hf.head_dim = p->head_dim ? p->head_dim : p->hidden / p->heads;
	hf.vocab_size = p->vocab;
	hf.max_position_embeddings = p->max_pos;
	hf.norm_eps = p->eps > 0 ? p->eps : 1e-5;
	hf.rope_theta = p->theta;
	hf.tie_word_embeddings = p->tied;
	hf.num_experts = p->experts;
	hf.num_experts_per_tok = p->experts_per_tok;
	hf.moe_intermediate_size = p->moe_intermediate;
	hf.decoder_sparse_step = 1;
	hf.norm_topk_prob = p->norm_topk;
	hf.router_aux_loss_coef = p->aux_coef;
	if (p->llama3)
		hf.rope_scaling = (struct zn_hf_rope_scaling){ ZN_HF_ROPE_LLAMA3, 32.0, 1.0, 4.0,
							       8192 };
	return zn_llama_config_from_hf(&hf, cfg);
}

/* The shortest decimal that reads back as f, as a double: 1e-05, not 9.99999974e-06. */
static double shortest(float f)
{
	char buf[32];

	for (int p = 1; p <= 9; p++) {
		snprintf(buf, sizeof(buf), "%.*g", p, (double)f);
		if (strtof(buf, NULL) == f)
			break;
	}
	return strtod(buf, NULL);
}

void zn_llama_config_to_hf(const struct zn_llama_config *cfg, struct zn_hf_config *hf)
{
	memset(hf, 0, sizeof(*hf));
	hf->family = &zn_llama_family;
	if (cfg->experts > 0)
		hf->type = cfg->qk_norm ? ZN_LLAMA_QWEN3_MOE : ZN_LLAMA_MIXTRAL;
	else
		hf->type = cfg->qk_norm ? ZN_LLAMA_QWEN3 : cfg->window > 0 ? ZN_LLAMA_MISTRAL :
			   cfg->qkv_bias && !cfg->o_bias ? ZN_LLAMA_QWEN2 : ZN_LLAMA_LLAMA;
	hf->hidden_size = cfg->hidden;
	hf->intermediate_size = cfg->intermediate;
	hf->num_hidden_layers = cfg->layers;
	hf->num_attention_heads = cfg->heads;
	hf->num_key_value_heads = cfg->kv_heads;
	hf->head_dim = cfg->head_dim;
	hf->vocab_size = cfg->vocab;
	hf->max_position_embeddings = cfg->max_positions > cfg->seq ? cfg->max_positions :
								       cfg->seq;
	hf->norm_eps = shortest(cfg->eps);
	hf->rope_theta = cfg->rope.theta;
	if (cfg->rope.type == ZN_ROPE_LLAMA3)
		hf->rope_scaling = (struct zn_hf_rope_scaling){
			ZN_HF_ROPE_LLAMA3, cfg->rope.factor, cfg->rope.low_freq_factor,
			cfg->rope.high_freq_factor, cfg->rope.original_max_position_embeddings
		};
	hf->attention_bias = hf->type == ZN_LLAMA_QWEN2 || cfg->o_bias;
	hf->tie_word_embeddings = cfg->tied;
	hf->sliding_window = cfg->window;
	if (cfg->experts > 0) {
		hf->num_experts = cfg->experts;
		hf->num_experts_per_tok = cfg->experts_per_tok;
		hf->moe_intermediate_size = cfg->moe_intermediate;
		hf->decoder_sparse_step = cfg->sparse_step;
		hf->norm_topk_prob = cfg->norm_topk;
		hf->output_router_logits = cfg->aux;
		hf->router_aux_loss_coef = shortest(cfg->aux_coef);
		memcpy(hf->mlp_only, cfg->mlp_only, sizeof(hf->mlp_only));
	}
}

uint64_t zn_llama_param_count(const struct zn_llama_config *cfg)
{
	struct zn_layer_desc L;
	uint64_t sum = 0;

	for (int l = 0; l < zn_llama_layer_count(cfg); l++)
		if (!zn_llama_layer(cfg, l, &L)) {
			sum += L.numel;
			zn_layer_desc_release(&L);
		}
	return sum;
}

/* Matches "--flag V" or "--flag=V" at argv[*i]; 1 match (value set, *i advanced), 0 none,
 * -EINVAL a missing value. */
static int match(const char *flag, int argc, char **argv, int *i, const char **value)
{
	size_t n = strlen(flag);
	const char *a = argv[*i];

	if (strncmp(a, flag, n) || (a[n] && a[n] != '='))
		return 0;
	if (a[n] == '=') {
		*value = a + n + 1;
		return 1;
	}
	if (*i + 1 >= argc) {
		zn_error("%s needs a value", flag);
		return -EINVAL;
	}
	*value = argv[++*i];
	return 1;
}

static int parse_int(const char *flag, const char *s, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > INT_MAX) {
		zn_error("%s '%s': expected a positive integer", flag, s);
		return -EINVAL;
	}
	*out = (int)v;
	return 0;
}

int zn_llama_config_apply_flags(struct zn_llama_config *cfg, int argc, char **argv,
				char **rest, int *rest_count)
{
	static const char *const ints[] = { "--layers", "--heads", "--kv-heads", "--d-model",
					    "--head-dim", "--intermediate", "--seq", "--vocab" };
	int *fields[8] = { &cfg->layers, &cfg->heads, &cfg->kv_heads, &cfg->hidden,
			   &cfg->head_dim, &cfg->intermediate, &cfg->seq, &cfg->vocab };
	bool head_dim = false, shape = false;
	const char *v;
	int m;

	*rest_count = 0;
	for (int i = 0; i < argc; i++) /* the preset first, wherever it is */
		if ((m = match("--model", argc, argv, &i, &v)) < 0 ||
		    (m && zn_llama_config_from_preset(v, cfg)))
			return -EINVAL;
	for (int i = 0; i < argc; i++) {
		m = match("--model", argc, argv, &i, &v);
		for (int f = 0; !m && f < 8; f++) {
			m = match(ints[f], argc, argv, &i, &v);
			if (m > 0 && parse_int(ints[f], v, fields[f]))
				return -EINVAL;
			head_dim = head_dim || (m > 0 && f == 4);
			shape = shape || (m > 0 && (f == 1 || f == 3));
		}
		if (!m && (m = match("--tied-embeddings", argc, argv, &i, &v)) > 0) {
			if (strcmp(v, "true") && strcmp(v, "false")) {
				zn_error("--tied-embeddings '%s': use true or false", v);
				return -EINVAL;
			}
			cfg->tied = !strcmp(v, "true");
		}
		if (m < 0)
			return m;
		if (!m)
			rest[(*rest_count)++] = argv[i];
	}
	/* Mixtral: --intermediate is its experts' (config.json's one intermediate_size) */
	if (cfg->experts > 0 && !cfg->qk_norm)
		cfg->moe_intermediate = cfg->intermediate;
	if (shape && !head_dim) {
		if (cfg->hidden % cfg->heads) {
			zn_error("llama model: --d-model %d is not a multiple of --heads %d: give "
				 "--head-dim", cfg->hidden, cfg->heads);
			return -EINVAL;
		}
		cfg->head_dim = cfg->hidden / cfg->heads;
	}
	return zn_llama_config_validate(cfg);
}
