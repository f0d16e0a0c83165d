/* The config.json keys of the Llama family's mixtures of experts (llama_hf.c reads the
 * rest), as transformers' MixtralConfig and Qwen3MoeConfig define them:
 *   mixtral:   num_local_experts (8), num_experts_per_tok (2), output_router_logits
 *              (false), router_aux_loss_coef (0.001), router_jitter_noise (0.0; > 0 is
 *              refused: zinc's router has no noise), attention_dropout (0); an expert's
 *              size is intermediate_size, the top-k weights always renormalized.
 *   qwen3_moe: num_experts (128), num_experts_per_tok (8), moe_intermediate_size (768),
 *              norm_topk_prob (false), decoder_sparse_step (1), mlp_only_layers ([]: the
 *              layers with the dense MLP of intermediate_size), output_router_logits,
 *              router_aux_loss_coef (0.001).
 * Shared experts (Qwen2-MoE's shared_expert_intermediate_size, DeepSeek's
 * n_shared_experts) are refused, naming the key. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "model/hf_family.h"
#include "model/llama/llama.h"

static int parse_mlp_only(const struct zn_hf_keys *c, struct zn_hf_config *cfg)
{
	const cJSON *v = zn_hf_key(c, "mlp_only_layers", NULL), *e;

	memset(cfg->mlp_only, 0, sizeof(cfg->mlp_only));
	if (!v)
		return 0;
	if (!cJSON_IsArray(v))
		goto bad;
	cJSON_ArrayForEach(e, v) {
		if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int64_t)e->valuedouble ||
		    e->valuedouble < 0 || e->valuedouble >= (double)cfg->num_hidden_layers)
			goto bad;
		cfg->mlp_only[e->valueint / 8] |= (uint8_t)(1u << (e->valueint % 8));
	}
	return 0;
bad:
	zn_error("%s: key \"mlp_only_layers\" must be a list of layer numbers 0 .. %lld",
		 c->path, (long long)cfg->num_hidden_layers - 1);
	return -EINVAL;
}

/* keys of designs zinc does not build: present and not zero/false is an error */
static int refuse(const struct zn_hf_keys *c, const char *key, const char *why)
{
	const cJSON *v = zn_hf_key(c, key, NULL);

	if (!v || (cJSON_IsNumber(v) && v->valuedouble == 0) || cJSON_IsFalse(v))
		return 0;
	zn_error("%s: key \"%s\" is set: %s (zinc refuses it rather than ignore it)", c->path,
		 key, why);
	return -EINVAL;
}

/* MixtralConfig's attention_dropout (qwen3_moe's is read with Qwen3's keys) */
static int no_dropout(const struct zn_hf_keys *c)
{
	double dropout;
	int rc = zn_hf_key_num(c, "attention_dropout", NULL, false, 0, -1, 1, &dropout);

	if (!rc && dropout != 0) {
		zn_error("%s: key \"attention_dropout\" is %g: zinc has no attention dropout "
			 "(set it 0.0)", c->path, dropout);
		return -EINVAL;
	}
	return rc;
}

static int parse_aux(const struct zn_hf_keys *c, struct zn_hf_config *cfg)
{
	int rc = zn_hf_key_bool(c, "output_router_logits", false, &cfg->output_router_logits);

	if (!rc)
		rc = zn_hf_key_num(c, "router_aux_loss_coef", NULL, false, 0.001, -1, 1e6,
				   &cfg->router_aux_loss_coef);
	if (!rc && cfg->router_aux_loss_coef < 0) {
		zn_error("%s: key \"router_aux_loss_coef\" is %g: it must be >= 0", c->path,
			 cfg->router_aux_loss_coef);
		return -EINVAL;
	}
	return rc;
}

int zn_llama_hf_parse_moe(const struct zn_hf_keys *c, struct zn_hf_config *cfg)
{
	bool mixtral = cfg->type == ZN_LLAMA_MIXTRAL;
	const char *ne = mixtral ? "num_local_experts" : "num_experts";
	int rc = zn_hf_key_int(c, ne, NULL, false, mixtral ? 8 : 128, 1, ZN_LLAMA_MAX_EXPERTS,
			       &cfg->num_experts);

	if (!rc)
		rc = zn_hf_key_int(c, "num_experts_per_tok", NULL, false, mixtral ? 2 : 8, 1, 4096,
				   &cfg->num_experts_per_tok);
	if (!rc && cfg->num_experts_per_tok > cfg->num_experts) {
		zn_error("%s: key \"num_experts_per_tok\" is %lld, more than the %lld experts "
			 "(\"%s\")", c->path, (long long)cfg->num_experts_per_tok,
			 (long long)cfg->num_experts, ne);
		return -EINVAL;
	}
	if (!rc && cfg->num_hidden_layers > ZN_HF_MAX_MOE_LAYERS) {
		zn_error("%s: key \"num_hidden_layers\" is %lld: zinc's mixtures of experts have "
			 "at most %d layers", c->path, (long long)cfg->num_hidden_layers,
			 ZN_HF_MAX_MOE_LAYERS);
		return -EINVAL;
	}
	if (!rc)
		rc = parse_aux(c, cfg);
	if (!rc)
		rc = refuse(c, "router_jitter_noise", "zinc's router has no jitter noise; set it "
			    "0.0");
	if (!rc)
		rc = refuse(c, "shared_expert_intermediate_size", "shared experts (Qwen2-MoE) are "
			    "not built");
	if (!rc)
		rc = refuse(c, "n_shared_experts", "shared experts (DeepSeek) are not built");
	if (!rc && mixtral)
		rc = no_dropout(c);
	if (rc || mixtral) {
		cfg->moe_intermediate_size = cfg->intermediate_size;
		cfg->norm_topk_prob = true;
		cfg->decoder_sparse_step = 1;
		memset(cfg->mlp_only, 0, sizeof(cfg->mlp_only));
		return rc;
	}
	rc = zn_hf_key_int(c, "moe_intermediate_size", NULL, false, 768, 1, ZN_HF_MAX_DIM,
			   &cfg->moe_intermediate_size);
	if (!rc)
		rc = zn_hf_key_bool(c, "norm_topk_prob", false, &cfg->norm_topk_prob);
	if (!rc)
		rc = zn_hf_key_int(c, "decoder_sparse_step", NULL, false, 1, 1, ZN_HF_MAX_INT,
				   &cfg->decoder_sparse_step);
	if (!rc)
		rc = parse_mlp_only(c, cfg);
	return rc;
}

static cJSON *mlp_only_list(const struct zn_hf_config *c)
{
	cJSON *a = cJSON_CreateArray();

	for (int64_t l = 0; a && l < c->num_hidden_layers; l++)
		if (c->mlp_only[l / 8] & (1u << (l % 8)))
			cJSON_AddItemToArray(a, cJSON_CreateNumber((double)l));
	return a;
}

int zn_llama_hf_write_moe(cJSON *o, const struct zn_hf_config *c)
{
	bool mixtral = c->type == ZN_LLAMA_MIXTRAL;
	int rc = zn_hf_set_int(o, mixtral ? "num_local_experts" : "num_experts", c->num_experts);

	if (!rc)
		rc = zn_hf_set_int(o, "num_experts_per_tok", c->num_experts_per_tok);
	if (!rc)
		rc = zn_hf_set(o, "output_router_logits", cJSON_CreateBool(c->output_router_logits));
	if (!rc)
		rc = zn_hf_set(o, "router_aux_loss_coef",
			       zn_hf_json_float(c->router_aux_loss_coef));
	if (!rc && mixtral)
		rc = zn_hf_set(o, "router_jitter_noise", cJSON_CreateNumber(0.0));
	if (rc || mixtral)
		return rc;
	rc = zn_hf_set_int(o, "moe_intermediate_size", c->moe_intermediate_size);
	if (!rc)
		rc = zn_hf_set(o, "norm_topk_prob", cJSON_CreateBool(c->norm_topk_prob));
	if (!rc)
		rc = zn_hf_set_int(o, "decoder_sparse_step", c->decoder_sparse_step);
	if (!rc)
		rc = zn_hf_set(o, "mlp_only_layers", mlp_only_list(c));
	return rc;
}

bool zn_llama_hf_is_moe_layer(const struct zn_hf_config *c, int64_t n)
{
	if (c->num_experts <= 0 || n >= ZN_HF_MAX_MOE_LAYERS)
		return false;
	if (c->mlp_only[n / 8] & (1u << (n % 8)))
		return false;
	return (n + 1) % (c->decoder_sparse_step > 0 ? c->decoder_sparse_step : 1) == 0;
}

/* transformers 5's fused experts: for one expert's tensor "model.layers.L.M.experts.X.P.weight"
 * (P gate_proj, up_proj, down_proj; Mixtral's w1, w3, w2), the layer's stack
 * "model.layers.L.mlp.experts.gate_up_proj" [E, 2 rows, cols] or "...down_proj"
 * [E, rows, cols] into fused; *factor 2 or 1. false: not an expert's name. */
bool zn_llama_hf_fused_name(const char *name, char *fused, size_t size, int *factor)
{
	static const char *const gu[] = { "gate_proj", "up_proj", "w1", "w3" };
	const char *ex = strstr(name, ".experts."), *x, *proj, *end;
	int layer, n = 0;

	if (!ex || sscanf(name, "model.layers.%d.%n", &layer, &n) != 1 || n <= 0)
		return false;
	for (x = ex + 9; *x >= '0' && *x <= '9'; x++)
		;
	proj = x;
	end = strstr(proj, ".weight");
	if (x == ex + 9 || *proj != '.' || !end || end[7])
		return false;
	proj++;
	*factor = 1;
	for (size_t i = 0; i < sizeof(gu) / sizeof(gu[0]); i++)
		if ((size_t)(end - proj) == strlen(gu[i]) && !strncmp(proj, gu[i], strlen(gu[i])))
			*factor = 2;
	if (*factor == 1 && strncmp(proj, "down_proj.", 10) && strncmp(proj, "w2.", 3))
		return false;
	snprintf(fused, size, "model.layers.%d.mlp.experts.%s", layer,
		 *factor == 2 ? "gate_up_proj" : "down_proj");
	return true;
}

/* a name of such a stack: "model.layers.L.mlp.experts.{gate_up_proj,down_proj}" */
bool zn_llama_hf_fused_stack(const char *name)
{
	const char *ex = strstr(name, ".mlp.experts.");

	return ex && (!strcmp(ex + 13, "gate_up_proj") || !strcmp(ex + 13, "down_proj"));
}
