/* The Llama family's registry entry (model/family.h): its model_types (llama, qwen2,
 * mistral, qwen3, mixtral, qwen3_moe) with their architectures, presets, the model from the
 * command's flags or a config.json (which takes --seq, the training length,
 * --router-aux-loss-coef for a mixture of experts, and no other model flag), LoRA's PEFT
 * target names and the lines zinc prints and checks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/family.h"
#include "model/llama/llama.h"

_Static_assert(sizeof(struct zn_llama_config) <= ZN_FAMILY_CONFIG_BYTES,
	       "ZN_FAMILY_CONFIG_BYTES is too small for the Llama configuration");

static const char *const shape_flags[] = {
	"--model",    "--layers",	"--heads", "--kv-heads",	"--d-model",
	"--head-dim", "--intermediate", "--vocab", "--tied-embeddings", "--padded-vocab",
};

static bool is_shape_flag(const char *a, size_t n)
{
	for (size_t f = 0; f < sizeof(shape_flags) / sizeof(*shape_flags); f++)
		if (strlen(shape_flags[f]) == n && !strncmp(a, shape_flags[f], n))
			return true;
	return false;
}

/* --router-aux-loss-coef X among the flags left in rest[0 .. *n), taken out: the
 * coefficient of the load-balancing loss, which X > 0 turns on and 0 off (config.json's
 * router_aux_loss_coef and output_router_logits, as a transformers user sets them) */
static int take_aux_flag(struct zn_llama_config *c, char **rest, int *n)
{
	static const char flag[] = "--router-aux-loss-coef";
	const size_t fl = sizeof(flag) - 1;
	int out = 0;

	for (int i = 0; i < *n; i++) {
		const char *a = rest[i], *v;
		char *end;
		double x;

		if (strncmp(a, flag, fl) || (a[fl] && a[fl] != '=')) {
			rest[out++] = rest[i];
			continue;
		}
		v = a[fl] == '=' ? a + fl + 1 : i + 1 < *n ? rest[++i] : NULL;
		x = v ? strtod(v, &end) : -1;
		if (!v || end == v || *end || !(x >= 0 && x <= 1e6)) {
			zn_error("%s '%s': expected a number >= 0", flag, v ? v : "");
			return -EINVAL;
		}
		if (c->experts <= 0) {
			zn_error("%s: the model has no experts (a mixtral or qwen3_moe model has)",
				 flag);
			return -EINVAL;
		}
		c->aux_coef = (float)x;
		c->aux = x > 0;
	}
	*n = out;
	return 0;
}

static int from_flags(void *config, int argc, char **argv, char **rest, int *rest_count)
{
	int rc = zn_llama_config_apply_flags(config, argc, argv, rest, rest_count);

	return rc ? rc : take_aux_flag(config, rest, rest_count);
}

/* A model from a config: --seq (the training length) and nothing else of the model. */
static int from_source(void *config, const struct zn_family_source *s)
{
	struct zn_llama_config *c = config;
	int rc = zn_llama_config_from_hf(s->hf, c);

	for (int i = 0; !rc && i < s->argc; i++) {
		const char *a = s->argv[i], *eq = strchr(a, '=');
		size_t n = eq ? (size_t)(eq - a) : strlen(a);

		if (is_shape_flag(a, n)) {
			zn_error("%.*s: the model comes from %s's config.json; drop the flag",
				 (int)n,
				 a, s->path);
			return -EINVAL;
		}
		if (n == 5 && !strncmp(a, "--seq", 5)) {
			const char *v = eq ? eq + 1 : i + 1 < s->argc ? s->argv[++i] : NULL;
			char *end;
			long t = v ? strtol(v, &end, 10) : 0;

			if (!v || *end || t < 1 || t > (1 << 20)) {
				zn_error("--seq '%s': expected 1 .. 1048576", v ? v : "");
				return -EINVAL;
			}
			c->seq = (int)t;
			continue;
		}
		s->rest[(*s->rest_count)++] = s->argv[i];
	}
	if (!rc)
		rc = take_aux_flag(c, s->rest, s->rest_count);
	return rc ? rc : zn_llama_config_validate(c);
}

static void to_hf(const void *config, struct zn_hf_config *hf)
{
	zn_llama_config_to_hf(config, hf);
}

static struct zn_model model(const void *config)
{
	return zn_llama_model(config);
}

static uint64_t param_count(const void *config)
{
	return zn_llama_param_count(config);
}

static int sparse_layers(const struct zn_llama_config *c)
{
	int n = 0;

	for (int l = 0; l < c->layers; l++)
		n += zn_llama_layer_is_moe(c, l);
	return n;
}

/* the experts' weights (gate, up, down of each), the router not counted */
static uint64_t expert_params(const struct zn_llama_config *c)
{
	return (uint64_t)sparse_layers(c) * (uint64_t)c->experts * 3 * (uint64_t)c->hidden *
	       (uint64_t)c->moe_intermediate;
}

static void line(const void *config, char *buf, size_t size)
{
	const struct zn_llama_config *c = config;
	struct zn_hf_config hf;

	zn_llama_config_to_hf(c, &hf);
	snprintf(buf, size, "%s, %d layers, %d heads (%d kv), head_dim %d, hidden %d, "
		 "intermediate %d, vocab %d, seq %d, %s", zn_hf_model_type(&hf), c->layers,
		 c->heads, c->kv_heads, c->head_dim, c->hidden, c->intermediate, c->vocab, c->seq,
		 c->tied ? "tied" : "untied");
	if (c->experts > 0)
		snprintf(buf + strlen(buf), size - strlen(buf), ", %d experts (%d per token, "
			 "intermediate %d; %d of %d layers sparse, %.2fM expert parameters), aux "
			 "loss %s", c->experts, c->experts_per_tok, c->moe_intermediate,
			 sparse_layers(c), c->layers, (double)expert_params(c) / 1e6,
			 c->aux ? "on" : "off");
}

static void moe_text(const struct zn_llama_config *c, char *buf, size_t size)
{
	size_t n = (size_t)snprintf(buf, size, "model.experts=%d,%d,%d,%d,%d\nmodel.aux=%d,%.9g\n"
				    "model.mlp_only=", c->experts, c->experts_per_tok,
				    c->moe_intermediate, c->sparse_step, c->norm_topk, c->aux,
				    (double)c->aux_coef);

	for (int l = 0; l < c->layers && n + 8 < size; l++)
		if (c->mlp_only[l / 8] & (1u << (l % 8)))
			n += (size_t)snprintf(buf + n, size - n, "%d,", l);
	if (n + 2 < size)
		snprintf(buf + n, size - n, "\n");
}

static void text(const void *config, char *buf, size_t size)
{
	const struct zn_llama_config *c = config;

	snprintf(buf, size, "model.family=llama\nmodel.layers=%d\nmodel.heads=%d\n"
		 "model.kv_heads=%d\nmodel.head_dim=%d\nmodel.hidden=%d\nmodel.intermediate=%d\n"
		 "model.seq=%d\nmodel.vocab=%d\nmodel.window=%d\nmodel.eps=%.9g\n"
		 "model.qkv_bias=%d\nmodel.o_bias=%d\nmodel.tied=%d\nmodel.rope=%d,%.17g,%.17g,"
		 "%.17g,%.17g,%lld\n", c->layers, c->heads, c->kv_heads, c->head_dim, c->hidden,
		 c->intermediate, c->seq, c->vocab, c->window, (double)c->eps, c->qkv_bias,
		 c->o_bias, c->tied, c->rope.type, c->rope.theta, c->rope.factor,
		 c->rope.low_freq_factor, c->rope.high_freq_factor,
		 (long long)c->rope.original_max_position_embeddings);
	if (c->qk_norm) /* only then: the lines of runs saved before Qwen3 stay as they were */
		snprintf(buf + strlen(buf), size - strlen(buf), "model.qk_norm=1\n");
	if (c->experts > 0)
		moe_text(c, buf + strlen(buf), size - strlen(buf));
}

/* indexed by enum zn_llama_type */
static const struct zn_hf_type types[] = {
	{ "llama", "LlamaForCausalLM" },
	{ "qwen2", "Qwen2ForCausalLM" },
	{ "mistral", "MistralForCausalLM" },
	{ "qwen3", "Qwen3ForCausalLM" },
	{ "mixtral", "MixtralForCausalLM" },
	{ "qwen3_moe", "Qwen3MoeForCausalLM" },
};
/* "gate": a mixture of experts' router (mlp.gate, block_sparse_moe.gate), as PEFT names it;
 * gate_proj, up_proj, down_proj also each expert's of Qwen3-MoE, w1, w3, w2 Mixtral's
 * (an adapter per expert, as PEFT on transformers' per-expert nn.Linear) */
static const char *const lora_targets[] = { "q_proj", "k_proj",	   "v_proj",  "o_proj",
					    "gate_proj", "up_proj", "down_proj", "gate",
					    "w1",	 "w2",	    "w3",	 NULL };
static const char *const hf_buffers[] = { ".rotary_emb.inv_freq", NULL };

const struct zn_family zn_llama_family = {
	.name = "llama",
	.types = types,
	.type_count = (int)(sizeof(types) / sizeof(types[0])),
	.presets = zn_llama_preset_names,
	.flags_help = "--layers N --heads N --kv-heads N --d-model N --head-dim N "
		      "--intermediate N --seq N --vocab N --tied-embeddings true|false "
		      "--router-aux-loss-coef X (mixtral, qwen3_moe)",
	.lora_targets = lora_targets,
	.conv1d = false,
	.seq_free = true,
	.hf_prefix = NULL,
	.hf_buffers = hf_buffers,
	.hf_fused_name = zn_llama_hf_fused_name,
	.hf_fused_stack = zn_llama_hf_fused_stack,
	.config_bytes = sizeof(struct zn_llama_config),
	.hf_parse = zn_llama_hf_parse,
	.hf_write = zn_llama_hf_write,
	.hf_layout = zn_llama_hf_layout,
	.hf_param_count = zn_llama_hf_param_count,
	.from_flags = from_flags,
	.from_source = from_source,
	.to_hf = to_hf,
	.model = model,
	.param_count = param_count,
	.line = line,
	.text = text,
	.file = NULL,
};
