/* The model of a zinc command, GPT-2 or the Llama family; see train_model.h. */
#include "train/train_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsio.h"
#include "core/log.h"
#include "model/hf_dir.h"

/* GPT-2 from its config.json fields; mc->heads > 0 is an explicit --heads. */
static int gpt2_from_hf(const char *flag, const char *path, const struct zn_hf_config *c,
			struct zn_gpt2_config *mc)
{
	if (c->intermediate_size != 4 * c->hidden_size || c->norm_eps != 1e-5) {
		zn_error("%s %s: n_inner %lld and layer_norm_epsilon %g: zinc's GPT-2 has "
			 "n_inner = 4 x n_embd and epsilon 1e-05", flag, path, (long long)c->intermediate_size,
			 c->norm_eps);
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

static bool flag_given(int argc, char **argv, const char *flag)
{
	size_t n = strlen(flag);

	for (int i = 0; i < argc; i++)
		if (!strncmp(argv[i], flag, n) && (argv[i][n] == 0 || argv[i][n] == '='))
			return true;
	return false;
}

/* The config of path (--init-from: a checkpoint; --model-config: config.json or a
 * directory holding one) into *hf; *have false for a lone file without config. */
static int source_config(const char *path, bool checkpoint, struct zn_hf_config *hf,
			 bool *have)
{
	struct zn_hf_src *s = NULL;
	char inner[ZN_PATH_MAX + 16];
	struct stat st;
	int rc;

	*have = false;
	if (!checkpoint) {
		if (!stat(path, &st) && S_ISDIR(st.st_mode) && strlen(path) < ZN_PATH_MAX) {
			snprintf(inner, sizeof(inner), "%s/config.json", path);
			path = inner;
		}
		rc = zn_hf_config_load(path, hf);
		if (rc)
			zn_error("--model-config %s: cannot read it as a Hugging Face config.json",
				 path);
		*have = !rc;
		return rc ? -EINVAL : 0;
	}
	rc = zn_hf_open(&s, path);
	if (!rc && zn_hf_src_config(s)) {
		*hf = *zn_hf_src_config(s);
		*have = true;
	}
	zn_hf_close(s);
	return rc ? -EINVAL : 0;
}

static const char *const llama_shape_flags[] = {
	"--model",	  "--layers",	  "--heads", "--kv-heads",	 "--d-model",
	"--head-dim", "--intermediate", "--vocab", "--tied-embeddings", "--padded-vocab",
};

/* A Llama model from a config: --seq (the training length) and nothing else of the model. */
static int llama_from_config(struct zn_train_model *tm, const struct zn_hf_config *hf,
			     const char *src, int argc, char **argv, char **rest, int *k)
{
	int rc = zn_llama_config_from_hf(hf, &tm->llama);

	for (int i = 0; !rc && i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '=');
		size_t n = eq ? (size_t)(eq - a) : strlen(a);
		bool shape = false;

		for (size_t f = 0; f < sizeof(llama_shape_flags) / sizeof(*llama_shape_flags); f++)
			shape = shape || (strlen(llama_shape_flags[f]) == n &&
					  !strncmp(a, llama_shape_flags[f], n));
		if (shape) {
			zn_error("%.*s: the model comes from %s's config.json; drop the flag", (int)n,
				 a, src);
			return -EINVAL;
		}
		if (n == 5 && !strncmp(a, "--seq", 5)) {
			const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
			char *end;
			long t = v ? strtol(v, &end, 10) : 0;

			if (!v || *end || t < 1 || t > (1 << 20)) {
				zn_error("--seq '%s': expected 1 .. 1048576", v ? v : "");
				return -EINVAL;
			}
			tm->llama.seq = (int)t;
			continue;
		}
		rest[(*k)++] = argv[i];
	}
	return rc ? rc : zn_llama_config_validate(&tm->llama);
}

static const char *preset_flag(int argc, char **argv)
{
	const char *name = NULL;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--model") && i + 1 < argc)
			name = argv[++i];
		else if (!strncmp(argv[i], "--model=", 8))
			name = argv[i] + 8;
	}
	return name;
}

static bool gpt2_preset(const char *name)
{
	static const char *const names[] = { "tiny",	   "small",	 "gpt2",
					     "gpt2-medium", "gpt2-large", "gpt2-xl" };

	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
		if (!strcmp(name, names[i]))
			return true;
	return false;
}

int zn_train_model_parse(struct zn_train_model *tm, int argc, char **argv,
			 const char *init_from, const char *model_config, char **rest,
			 int *rest_count)
{
	const char *src = init_from ? init_from : model_config;
	struct zn_hf_config hf;
	bool have = false;
	int rc = 0;

	memset(tm, 0, sizeof(*tm));
	*rest_count = 0;
	if (src)
		rc = source_config(src, init_from != NULL, &hf, &have);
	if (rc)
		return rc;
	if (have && hf.family != ZN_HF_GPT2) {
		tm->is_llama = true;
		return llama_from_config(tm, &hf, src, argc, argv, rest, rest_count);
	}
	if (!src && zn_llama_is_preset(preset_flag(argc, argv))) {
		tm->is_llama = true;
		return zn_llama_config_apply_flags(&tm->llama, argc, argv, rest, rest_count);
	}
	if (!src && preset_flag(argc, argv) && !gpt2_preset(preset_flag(argc, argv))) {
		zn_error("--model '%s': no such preset: GPT-2: tiny, small, gpt2, gpt2-medium, "
			 "gpt2-large, gpt2-xl; Llama: llama-tiny, tinyllama-1.1b, llama-3.2-1b, "
			 "llama-3.2-3b, llama-3-8b, llama-3-70b, llama-2-7b, llama-2-13b",
			 preset_flag(argc, argv));
		return -EINVAL;
	}
	rc = zn_gpt2_config_from_preset("small", &tm->gpt2);
	if (!rc)
		rc = zn_gpt2_config_apply_flags(&tm->gpt2, argc, argv, rest, rest_count);
	/* a --vocab above the preset's padding: the padding follows it (rounded up, as a
	 * config.json's does) unless --padded-vocab says otherwise */
	if (!rc && !src && tm->gpt2.padded_vocab < tm->gpt2.vocab &&
	    !flag_given(argc, argv, "--padded-vocab"))
		tm->gpt2.padded_vocab = 0;
	if (!rc && src) {
		/* the file defines the shapes; only an explicit --heads is passed on */
		tm->gpt2.heads = 0;
		for (int i = 0; i + 1 < argc; i++)
			if (!strcmp(argv[i], "--heads"))
				tm->gpt2.heads = atoi(argv[i + 1]);
		if (have)
			rc = gpt2_from_hf(init_from ? "--init-from" : "--model-config", src, &hf,
					  &tm->gpt2);
		else
			rc = zn_gpt2_config_from_safetensors(src, &tm->gpt2);
	}
	return rc ? -EINVAL : zn_gpt2_config_validate(&tm->gpt2);
}

struct zn_model zn_train_model_get(const struct zn_train_model *tm)
{
	return tm->is_llama ? zn_llama_model(&tm->llama) : zn_gpt2_model(&tm->gpt2);
}

int zn_train_model_seq(const struct zn_train_model *tm)
{
	return tm->is_llama ? tm->llama.seq : tm->gpt2.seq;
}

int zn_train_model_vocab(const struct zn_train_model *tm)
{
	return tm->is_llama ? tm->llama.vocab : tm->gpt2.vocab;
}

int zn_train_model_width(const struct zn_train_model *tm)
{
	return tm->is_llama ? tm->llama.hidden : tm->gpt2.d_model;
}

uint64_t zn_train_model_params(const struct zn_train_model *tm)
{
	return tm->is_llama ? zn_llama_param_count(&tm->llama) : zn_gpt2_param_count(&tm->gpt2);
}

uint64_t zn_train_model_largest_layer(const struct zn_train_model *tm)
{
	struct zn_model m = zn_train_model_get(tm);
	struct zn_layer_desc L;
	uint64_t max = 0;

	for (int l = 0; l < m.ops->layer_count(m.config); l++)
		if (!m.ops->describe(m.config, l, &L) && L.numel > max)
			max = L.numel;
	return max;
}

void zn_train_model_hf(const struct zn_train_model *tm, struct zn_hf_config *c)
{
	const struct zn_gpt2_config *mc = &tm->gpt2;

	if (tm->is_llama) {
		zn_llama_config_to_hf(&tm->llama, c);
		return;
	}
	memset(c, 0, sizeof(*c));
	c->family = ZN_HF_GPT2;
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

void zn_train_model_line(const struct zn_train_model *tm, char *buf, size_t size)
{
	const struct zn_llama_config *c = &tm->llama;
	struct zn_hf_config hf;

	if (!tm->is_llama) {
		snprintf(buf, size, "%d layers, %d heads, d_model %d, vocab %d, seq %d",
			 tm->gpt2.layers, tm->gpt2.heads, tm->gpt2.d_model, tm->gpt2.vocab,
			 tm->gpt2.seq);
		return;
	}
	zn_llama_config_to_hf(c, &hf);
	snprintf(buf, size, "%s, %d layers, %d heads (%d kv), head_dim %d, hidden %d, "
		 "intermediate %d, vocab %d, seq %d, %s", zn_hf_family_name(hf.family), c->layers,
		 c->heads, c->kv_heads, c->head_dim, c->hidden, c->intermediate, c->vocab, c->seq,
		 c->tied ? "tied" : "untied");
}

void zn_train_model_text(const struct zn_train_model *tm, char *buf, size_t size)
{
	const struct zn_llama_config *c = &tm->llama;
	const struct zn_gpt2_config *g = &tm->gpt2;

	if (!tm->is_llama) {
		snprintf(buf, size, "model.layers=%d\nmodel.heads=%d\nmodel.d_model=%d\n"
			 "model.seq=%d\nmodel.vocab=%d\nmodel.padded_vocab=%d\n", g->layers,
			 g->heads, g->d_model, g->seq, g->vocab, g->padded_vocab);
		return;
	}
	snprintf(buf, size, "model.family=llama\nmodel.layers=%d\nmodel.heads=%d\n"
		 "model.kv_heads=%d\nmodel.head_dim=%d\nmodel.hidden=%d\nmodel.intermediate=%d\n"
		 "model.seq=%d\nmodel.vocab=%d\nmodel.window=%d\nmodel.eps=%.9g\n"
		 "model.qkv_bias=%d\nmodel.o_bias=%d\nmodel.tied=%d\nmodel.rope=%d,%.17g,%.17g,"
		 "%.17g,%.17g,%lld\n", c->layers, c->heads, c->kv_heads, c->head_dim, c->hidden,
		 c->intermediate, c->seq, c->vocab, c->window, (double)c->eps, c->qkv_bias,
		 c->o_bias, c->tied, c->rope.type, c->rope.theta, c->rope.factor,
		 c->rope.low_freq_factor, c->rope.high_freq_factor,
		 (long long)c->rope.original_max_position_embeddings);
}

int zn_train_model_from_flags(int argc, char **argv, struct zn_train_model *out,
			      const char **init_from_out)
{
	char **args = calloc((size_t)argc + 1, sizeof(*args));
	char **left = calloc((size_t)argc + 1, sizeof(*left));
	const char *init_from = NULL, *model_config = NULL;
	struct zn_train_model tm;
	int n = 0, k = 0, rc = args && left ? 0 : -ENOMEM;

	for (int i = 0; !rc && i < argc; i++) {
		bool init = !strcmp(argv[i], "--init-from");

		if ((init || !strcmp(argv[i], "--model-config")) && i + 1 < argc)
			*(init ? &init_from : &model_config) = argv[++i];
		else
			args[n++] = argv[i];
	}
	if (!rc && init_from && model_config) {
		zn_error("--init-from and --model-config both define the model: give one");
		rc = -EINVAL;
	}
	if (!rc)
		rc = zn_train_model_parse(&tm, n, args, init_from, model_config, left, &k);
	if (!rc && k > 0) {
		zn_error("%s: not a model flag (the model flags: zinc train --help, \"model:\")",
			 left[0]);
		rc = -EINVAL;
	}
	if (!rc)
		*out = tm;
	if (!rc && init_from_out)
		*init_from_out = init_from;
	free(args);
	free(left);
	return rc;
}

int zn_train_model_size(int argc, char **argv, uint64_t *params, uint64_t *largest,
			char *line, size_t size)
{
	struct zn_train_model tm;
	int rc = zn_train_model_from_flags(argc, argv, &tm, NULL);

	if (!rc) {
		*params = zn_train_model_params(&tm);
		*largest = zn_train_model_largest_layer(&tm);
		zn_train_model_line(&tm, line, size);
	}
	return rc;
}

