/* GPT-2 configuration: presets, validation and the model flags (--model, --layers, ...).
 * The layer layout built from a config lives in gpt2_layers.c. */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/gpt2/gpt2.h"

struct preset {
	const char *name;
	struct zn_gpt2_config cfg;
};

static const struct preset presets[] = {
	{ "gpt2", { 12, 12, 768, 1024, 50257, 50304 } },
	{ "gpt2-medium", { 24, 16, 1024, 1024, 50257, 50304 } },
	{ "gpt2-large", { 36, 20, 1280, 1024, 50257, 50304 } },
	{ "gpt2-xl", { 48, 25, 1600, 1024, 50257, 50304 } },
	{ "tiny", { 2, 4, 64, 64, 256, 256 } },
	{ "small", { 4, 4, 128, 128, 256, 256 } },
};

#define PRESET_COUNT ((int)(sizeof(presets) / sizeof(presets[0])))

int zn_gpt2_config_from_preset(const char *name, struct zn_gpt2_config *cfg)
{
	for (int i = 0; i < PRESET_COUNT; i++) {
		if (!strcmp(name, presets[i].name)) {
			*cfg = presets[i].cfg;
			return 0;
		}
	}
	zn_error("unknown model preset '%s': use gpt2, gpt2-medium, gpt2-large, gpt2-xl, tiny "
		 "or small (or give --layers/--heads/--d-model/--seq/--vocab)", name);
	return -EINVAL;
}

static int check_positive(const char *flag, int v)
{
	if (v > 0)
		return 0;
	zn_error("model config: %s is %d: it must be a positive integer", flag, v);
	return -EINVAL;
}

int zn_gpt2_config_validate(struct zn_gpt2_config *cfg)
{
	if (check_positive("--layers", cfg->layers) || check_positive("--heads", cfg->heads) ||
	    check_positive("--d-model", cfg->d_model) || check_positive("--seq", cfg->seq) ||
	    check_positive("--vocab", cfg->vocab))
		return -EINVAL;
	if (cfg->d_model % cfg->heads) {
		zn_error("model config: --d-model %d is not a multiple of --heads %d: change one "
			 "of them", cfg->d_model, cfg->heads);
		return -EINVAL;
	}
	/* the kernels take C, 4C, 3C, Vp and T*T as int */
	if (cfg->d_model > INT_MAX / 4 || (int64_t)cfg->seq * cfg->seq > INT_MAX) {
		zn_error("model config: --d-model %d or --seq %d is too large for the kernels' "
			 "int sizes", cfg->d_model, cfg->seq);
		return -EINVAL;
	}
	if (cfg->padded_vocab == 0) {
		int64_t vp = ((int64_t)cfg->vocab + ZN_GPT2_VOCAB_PAD - 1) / ZN_GPT2_VOCAB_PAD *
			     ZN_GPT2_VOCAB_PAD;

		if (vp > INT_MAX) {
			zn_error("model config: --vocab %d is too large", cfg->vocab);
			return -EINVAL;
		}
		cfg->padded_vocab = (int)vp;
	}
	if (cfg->padded_vocab < cfg->vocab) {
		zn_error("model config: --padded-vocab %d is below --vocab %d: it must be at "
			 "least the vocabulary (0 rounds up to a multiple of %d)",
			 cfg->padded_vocab, cfg->vocab, ZN_GPT2_VOCAB_PAD);
		return -EINVAL;
	}
	return 0;
}

static int parse_int(const char *flag, const char *s, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > INT_MAX) {
		zn_error("%s '%s': expected a non-negative integer", flag, s);
		return -EINVAL;
	}
	*out = (int)v;
	return 0;
}

struct int_flag {
	const char *flag;
	size_t field;
};

static const struct int_flag int_flags[] = {
	{ "--layers", offsetof(struct zn_gpt2_config, layers) },
	{ "--heads", offsetof(struct zn_gpt2_config, heads) },
	{ "--d-model", offsetof(struct zn_gpt2_config, d_model) },
	{ "--seq", offsetof(struct zn_gpt2_config, seq) },
	{ "--vocab", offsetof(struct zn_gpt2_config, vocab) },
	{ "--padded-vocab", offsetof(struct zn_gpt2_config, padded_vocab) },
};

#define INT_FLAG_COUNT ((int)(sizeof(int_flags) / sizeof(int_flags[0])))

/* Matches "--flag V" or "--flag=V" at argv[*i]; sets *value and advances *i past it.
 * Returns 1 on a match, 0 on none, -EINVAL when the value is missing. */
static int match_flag(const char *flag, int argc, char **argv, int *i, const char **value)
{
	size_t n = strlen(flag);
	const char *a = argv[*i];

	if (strncmp(a, flag, n))
		return 0;
	if (a[n] == '=') {
		*value = a + n + 1;
		return 1;
	}
	if (a[n])
		return 0;
	if (*i + 1 >= argc) {
		zn_error("%s needs a value", flag);
		return -EINVAL;
	}
	*i += 1;
	*value = argv[*i];
	return 1;
}

/* A --model preset is applied before the other flags so "--layers 2 --model gpt2" keeps
 * the 2 layers. */
static int apply_model_flag(struct zn_gpt2_config *cfg, int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		const char *v;
		int m = match_flag("--model", argc, argv, &i, &v);

		if (m < 0)
			return m;
		if (m && zn_gpt2_config_from_preset(v, cfg))
			return -EINVAL;
	}
	return 0;
}

int zn_gpt2_config_apply_flags(struct zn_gpt2_config *cfg, int argc, char **argv,
			       char **rest, int *rest_count)
{
	int rc = apply_model_flag(cfg, argc, argv);

	*rest_count = 0;
	if (rc)
		return rc;
	for (int i = 0; i < argc; i++) {
		const char *v;
		int m = match_flag("--model", argc, argv, &i, &v);

		for (int f = 0; !m && f < INT_FLAG_COUNT; f++) {
			m = match_flag(int_flags[f].flag, argc, argv, &i, &v);
			if (m > 0 && parse_int(int_flags[f].flag, v,
					       (int *)((char *)cfg + int_flags[f].field)))
				return -EINVAL;
		}
		if (m < 0)
			return m;
		if (!m)
			rest[(*rest_count)++] = argv[i];
	}
	return 0;
}
