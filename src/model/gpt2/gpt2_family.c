/* The GPT-2 family's registry entry (model/family.h): its presets, the model from the
 * command's flags or a checkpoint (its config.json, or a lone .safetensors file with or
 * without GPT-2's metadata), its config.json fields, LoRA targets (Conv1D names) and the
 * lines zinc prints and checks. The registry's first entry: the default model. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/family.h"
#include "model/gpt2/gpt2.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

_Static_assert(sizeof(struct zn_gpt2_config) <= ZN_FAMILY_CONFIG_BYTES,
	       "ZN_FAMILY_CONFIG_BYTES is too small for GPT-2's configuration");

static bool flag_given(int argc, char **argv, const char *flag)
{
	size_t n = strlen(flag);

	for (int i = 0; i < argc; i++)
		if (!strncmp(argv[i], flag, n) && (argv[i][n] == 0 || argv[i][n] == '='))
			return true;
	return false;
}

/* GPT-2 from its config.json fields; mc->heads > 0 is an explicit --heads. */
static int from_hf(const char *flag, const char *path, const struct zn_hf_config *c,
		   struct zn_gpt2_config *mc)
{
	if (c->intermediate_size != 4 * c->hidden_size || c->norm_eps != 1e-5) {
		zn_error("%s %s: n_inner %lld and layer_norm_epsilon %g: zinc's GPT-2 has "
			 "n_inner = 4 x n_embd and epsilon 1e-05", flag, path,
			 (long long)c->intermediate_size, c->norm_eps);
		return -EINVAL;
	}
	if (c->hidden_size > 0x7fffffff || c->num_hidden_layers > 0x7fffffff ||
	    c->num_attention_heads > 0x7fffffff || c->vocab_size > 0x7fffffff ||
	    c->max_position_embeddings > 0x7fffffff) {
		zn_error("%s %s: sizes beyond zinc's GPT-2 limits", flag, path);
		return -EINVAL;
	}
	if (mc->heads > 0 && mc->heads != c->num_attention_heads) {
		zn_error("%s %s: --heads %d contradicts n_head %lld in its config: drop --heads",
			 flag, path, mc->heads, (long long)c->num_attention_heads);
		return -EINVAL;
	}
	mc->layers = (int)c->num_hidden_layers;
	mc->heads = (int)c->num_attention_heads;
	mc->d_model = (int)c->hidden_size;
	mc->seq = (int)c->max_position_embeddings;
	mc->vocab = (int)c->vocab_size;
	if (mc->padded_vocab < mc->vocab)
		mc->padded_vocab = 0;
	return zn_gpt2_config_validate(mc);
}

static int from_flags(void *config, int argc, char **argv, char **rest, int *rest_count)
{
	struct zn_gpt2_config *mc = config;
	int rc = zn_gpt2_config_from_preset("small", mc);

	if (!rc)
		rc = zn_gpt2_config_apply_flags(mc, argc, argv, rest, rest_count);
	/* a --vocab above the preset's padding: the padding follows it (rounded up, as a
	 * config.json's does) unless --padded-vocab says otherwise */
	if (!rc && mc->padded_vocab < mc->vocab && !flag_given(argc, argv, "--padded-vocab"))
		mc->padded_vocab = 0;
	return rc ? -EINVAL : zn_gpt2_config_validate(mc);
}

/* The file defines the shapes; only an explicit --heads is passed on (checked against it). */
static int from_source(void *config, const struct zn_family_source *s)
{
	struct zn_gpt2_config *mc = config;
	int rc = zn_gpt2_config_from_preset("small", mc);

	if (!rc)
		rc = zn_gpt2_config_apply_flags(mc, s->argc, s->argv, s->rest, s->rest_count);
	if (rc)
		return -EINVAL;
	mc->heads = 0;
	for (int i = 0; i + 1 < s->argc; i++)
		if (!strcmp(s->argv[i], "--heads"))
			mc->heads = atoi(s->argv[i + 1]);
	if (s->hf)
		rc = from_hf(s->flag, s->path, s->hf, mc);
	else
		rc = zn_gpt2_config_from_safetensors(s->path, mc);
	return rc ? -EINVAL : zn_gpt2_config_validate(mc);
}

static void to_hf(const void *config, struct zn_hf_config *c)
{
	const struct zn_gpt2_config *mc = config;

	memset(c, 0, sizeof(*c));
	c->family = &zn_gpt2_family;
	c->type = 0;
	c->hidden_size = mc->d_model;
	c->intermediate_size = 4ll * mc->d_model;
	c->num_hidden_layers = mc->layers;
	c->num_attention_heads = c->num_key_value_heads = mc->heads;
	c->head_dim = mc->d_model / mc->heads;
	c->vocab_size = mc->vocab;
	c->max_position_embeddings = mc->seq;
	c->norm_eps = 1e-5;
	c->tie_word_embeddings = true;
}

static struct zn_model model(const void *config)
{
	return zn_gpt2_model(config);
}

static uint64_t param_count(const void *config)
{
	return zn_gpt2_param_count(config);
}

static void line(const void *config, char *buf, size_t size)
{
	const struct zn_gpt2_config *g = config;

	snprintf(buf, size, "%d layers, %d heads, d_model %d, vocab %d, seq %d", g->layers,
		 g->heads, g->d_model, g->vocab, g->seq);
}

/* no model.family line: the registry's default, as checkpoints before the registry */
static void text(const void *config, char *buf, size_t size)
{
	const struct zn_gpt2_config *g = config;

	snprintf(buf, size, "model.layers=%d\nmodel.heads=%d\nmodel.d_model=%d\n"
		 "model.seq=%d\nmodel.vocab=%d\nmodel.padded_vocab=%d\n", g->layers, g->heads,
		 g->d_model, g->seq, g->vocab, g->padded_vocab);
}

/* lm_head = wte, no extra blocks: checked once wte (layer 0) is in */
static int file_load_layer(const struct zn_st_file *f, const void *config,
			   const struct zn_layer_desc *ld, int n, int l, float *params_h)
{
	int rc = zn_gpt2_load_layer_safetensors(f, config, &ld[l], params_h);

	(void)n;
	if (!rc && l == 0)
		rc = zn_gpt2_check_safetensors(f, config, ld, params_h);
	return rc;
}

/* one file as zn_gpt2_save_safetensors writes it */
static int file_save(const void *config, const char *path, enum zn_dtype dtype,
		     const struct zn_st_entry *entries, int count)
{
	const char *values[ZN_GPT2_META_COUNT];
	char nums[ZN_GPT2_META_COUNT][24];
	const char *const *keys = zn_gpt2_safetensors_meta(config, values, nums);

	return zn_st_write(path, dtype, entries, count, keys, values, ZN_GPT2_META_COUNT);
}

static const struct zn_family_file_ops file_ops = {
	.metadata_config = zn_gpt2_metadata_config,
	.load_layer = file_load_layer,
	.save = file_save,
};

static const struct zn_hf_type types[] = { { "gpt2", "GPT2LMHeadModel" } };
static const char *const *presets(void)
{
	static const char *const names[] = { "tiny",	    "small",	  "gpt2",
					     "gpt2-medium", "gpt2-large", "gpt2-xl", NULL };

	return names;
}

static const char *const lora_targets[] = { "c_attn", "c_proj", "c_fc", NULL };
static const char *const hf_buffers[] = { ".attn.bias", ".attn.masked_bias", NULL };

const struct zn_family zn_gpt2_family = {
	.name = "gpt2",
	.types = types,
	.type_count = 1,
	.presets = presets,
	.flags_help = "--layers N --heads N --d-model N --seq N --vocab N --padded-vocab N",
	.lora_targets = lora_targets,
	.conv1d = true,
	.seq_free = false,
	.hf_prefix = "transformer.",
	.hf_buffers = hf_buffers,
	.config_bytes = sizeof(struct zn_gpt2_config),
	.hf_parse = zn_gpt2_hf_parse,
	.hf_write = zn_gpt2_hf_write,
	.hf_layout = zn_gpt2_hf_layout,
	.hf_param_count = zn_gpt2_hf_param_count,
	.from_flags = from_flags,
	.from_source = from_source,
	.to_hf = to_hf,
	.model = model,
	.param_count = param_count,
	.line = line,
	.text = text,
	.file = &file_ops,
	.shape_params = zn_gpt2_shape_params,
};
