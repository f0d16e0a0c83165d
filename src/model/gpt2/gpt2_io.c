/* GPT-2 <-> safetensors: Hugging Face names and layouts (Conv1D [in, out] transposed, wte
 * without its padded rows, lm_head tied), the model's config inferred from a checkpoint.
 * File format checks are the reader's (safetensors_read.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/gpt2/gpt2.h"
#include "model/safetensors.h"

#define PREFIX "transformer."

/* name, or name without "transformer." (GPT2Model checkpoints) */
static const struct zn_st_tensor *find_tensor(const struct zn_st_file *f, const char *name)
{
	const struct zn_st_tensor *t = zn_st_find(f, name);

	if (!t && !strncmp(name, PREFIX, strlen(PREFIX)))
		t = zn_st_find(f, name + strlen(PREFIX));
	return t;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
	int at = snprintf(buf, n, "[");

	for (int d = 0; d < ndim && at < (int)n; d++)
		at += snprintf(buf + at, n - (size_t)at, d ? ", %lld" : "%lld",
			       (long long)shape[d]);
	if (at < (int)n)
		snprintf(buf + at, n - (size_t)at, "]");
}

static int check_shape(const struct zn_st_file *f, const struct zn_st_tensor *t,
		       const struct zn_tensor_desc *d)
{
	char have[128], want[128];
	bool ok = t->ndim == d->ndim;

	for (int i = 0; ok && i < d->ndim; i++)
		ok = t->shape[i] == d->file_shape[i];
	if (ok)
		return 0;
	shape_str(have, sizeof(have), t->ndim, t->shape);
	shape_str(want, sizeof(want), d->ndim, d->file_shape);
	zn_error("%s: tensor '%s' has shape %s but the model needs %s: the model config "
		 "(--layers/--heads/--d-model/--seq/--vocab) does not match the checkpoint",
		 zn_st_path(f), t->name, have, want);
	return -EINVAL;
}

/* mem [rows, cols] = transpose of file [cols, rows] */
static void transpose(float *dst, const float *src, int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			dst[r * cols + c] = src[c * rows + r];
}

static int load_tensor(const struct zn_st_file *f, const struct zn_tensor_desc *d,
		       float *dst)
{
	const struct zn_st_tensor *t = find_tensor(f, d->name);
	float *tmp;
	int rc;

	if (!t) {
		zn_error("%s: no tensor '%s' (nor '%s'): the checkpoint does not match the model "
			 "(too few layers?)", zn_st_path(f), d->name, d->name + strlen(PREFIX));
		return -EINVAL;
	}
	rc = check_shape(f, t, d);
	if (rc)
		return rc;
	if (!d->transpose) {
		/* file order = memory order; wte's padded rows after the file's are zeroed */
		rc = zn_st_read_f32(f, t, dst);
		if (!rc)
			memset(dst + t->numel, 0, (d->numel - t->numel) * sizeof(float));
		return rc;
	}
	tmp = malloc(t->numel * sizeof(float) + 1);
	if (!tmp)
		return -ENOMEM;
	rc = zn_st_read_f32(f, t, tmp);
	if (!rc)
		transpose(dst, tmp, d->shape[0], d->shape[1]);
	free(tmp);
	return rc;
}

int zn_gpt2_load_layer_safetensors(const struct zn_st_file *f, const struct zn_gpt2_config *cfg,
				   const struct zn_layer_desc *L, float *params_h)
{
	for (int i = 0; i < L->tensor_count; i++) {
		int rc = load_tensor(f, &L->tensors[i], params_h + L->tensors[i].offset);

		if (rc)
			return rc;
	}
	return 0;
}

/* lm_head.weight, when present, must be wte itself: zinc ties them. */
static int check_lm_head(const struct zn_st_file *f, const struct zn_gpt2_config *cfg,
			 const float *wte)
{
	const struct zn_st_tensor *t = zn_st_find(f, "lm_head.weight");
	uint64_t n = (uint64_t)cfg->vocab * (uint64_t)cfg->d_model;
	uint64_t bad = n;
	float *tmp;
	int rc;

	if (!t)
		return 0;
	if (t->ndim != 2 || t->shape[0] != cfg->vocab || t->shape[1] != cfg->d_model) {
		zn_error("%s: lm_head.weight is not [%d, %d] like wte: zinc ties lm_head to wte",
			 zn_st_path(f), cfg->vocab, cfg->d_model);
		return -EINVAL;
	}
	tmp = malloc(n * sizeof(float) + 1);
	if (!tmp)
		return -ENOMEM;
	rc = zn_st_read_f32(f, t, tmp);
	for (uint64_t i = 0; !rc && i < n && bad == n; i++)
		if (tmp[i] != wte[i])
			bad = i;
	free(tmp);
	if (!rc && bad < n) {
		zn_error("%s: lm_head.weight differs from wte (first at element %llu): zinc ties "
			 "lm_head to wte and cannot load an untied checkpoint", zn_st_path(f),
			 (unsigned long long)bad);
		return -EINVAL;
	}
	return rc;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

static bool model_has(const struct zn_layer_desc *layers, int n, const char *name)
{
	for (int l = 0; l < n; l++)
		for (int i = 0; i < layers[l].tensor_count; i++)
			if (!strcmp(layers[l].tensors[i].name, name) ||
			    !strcmp(layers[l].tensors[i].name + strlen(PREFIX), name))
				return true;
	return false;
}

/* Tensors the model does not use: attention mask buffers silently, the rest a warning. */
static void warn_unused(const struct zn_st_file *f, const struct zn_layer_desc *layers, int n)
{
	int unused = 0;
	const char *first = NULL;

	for (int i = 0; i < zn_st_tensor_count(f); i++) {
		const char *name = zn_st_tensor_at(f, i)->name;

		if (!strcmp(name, "lm_head.weight") || ends_with(name, ".attn.bias") ||
		    ends_with(name, ".attn.masked_bias") || model_has(layers, n, name))
			continue;
		if (!unused++)
			first = name;
	}
	if (unused)
		zn_warn("%s: %d tensors are not part of the model and were ignored (first: '%s')",
			zn_st_path(f), unused, first);
}

/* A checkpoint deeper than the model would load "fine" and silently drop blocks. */
static int check_no_extra_block(const struct zn_st_file *f, const struct zn_gpt2_config *cfg)
{
	char name[64];

	snprintf(name, sizeof(name), PREFIX "h.%d.ln_1.weight", cfg->layers);
	if (!find_tensor(f, name))
		return 0;
	zn_error("%s: the checkpoint has more than %d blocks ('%s' exists): set --layers to "
		 "match it", zn_st_path(f), cfg->layers, name);
	return -EINVAL;
}

int zn_gpt2_load_safetensors(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *layers,
			     float *const *layer_params_h, const char *path)
{
	struct zn_st_file *f;
	int n = zn_gpt2_layer_count(cfg);
	int rc = zn_st_open(&f, path);

	if (rc)
		return rc;
	for (int l = 0; !rc && l < n; l++)
		rc = zn_gpt2_load_layer_safetensors(f, cfg, &layers[l], layer_params_h[l]);
	if (!rc)
		rc = zn_gpt2_check_safetensors(f, cfg, layers, layer_params_h[0]);
	zn_st_close(f);
	return rc;
}

int zn_gpt2_check_safetensors(const struct zn_st_file *f, const struct zn_gpt2_config *cfg,
			      const struct zn_layer_desc *layers, const float *wte)
{
	int rc = check_lm_head(f, cfg, wte);

	if (!rc)
		rc = check_no_extra_block(f, cfg);
	if (!rc)
		warn_unused(f, layers, zn_gpt2_layer_count(cfg));
	return rc;
}

/* ---- save -------------------------------------------------------------------------------- */

struct transposed {
	const float *src; /* memory [rows, cols] */
	int64_t rows, cols;
};

static int fill_transposed(void *ctx, float *out)
{
	const struct transposed *t = ctx;

	/* file [cols, rows] */
	transpose(out, t->src, t->cols, t->rows);
	return 0;
}

static void meta_int(char (*buf)[24], const char **values, int i, int v)
{
	snprintf(buf[i], sizeof(buf[i]), "%d", v);
	values[i] = buf[i];
}

const char *const *zn_gpt2_safetensors_meta(const struct zn_gpt2_config *cfg,
					    const char **values, char (*nums)[24])
{
	static const char *const keys[ZN_GPT2_META_COUNT] = {
		"format", "producer", "n_layer", "n_head", "n_embd", "n_positions", "vocab_size"
	};

	values[0] = "pt";
	values[1] = "zinc";
	meta_int(nums, values, 2, cfg->layers);
	meta_int(nums, values, 3, cfg->heads);
	meta_int(nums, values, 4, cfg->d_model);
	meta_int(nums, values, 5, cfg->seq);
	meta_int(nums, values, 6, cfg->vocab);
	return keys;
}

int zn_gpt2_save_safetensors(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *layers,
			     const float *const *layer_params_h, const char *path,
			     enum zn_dtype dtype)
{
	const int n = zn_gpt2_layer_count(cfg);
	int count = 0, rc;
	struct zn_st_entry *e = calloc((size_t)n * ZN_GPT2_MAX_TENSORS, sizeof(*e));
	struct transposed *tr = calloc((size_t)n * ZN_GPT2_MAX_TENSORS, sizeof(*tr));
	const char *const *keys;
	const char *values[ZN_GPT2_META_COUNT];
	char nums[ZN_GPT2_META_COUNT][24];

	if (!e || !tr) {
		rc = -ENOMEM;
		goto free_entries;
	}
	keys = zn_gpt2_safetensors_meta(cfg, values, nums);
	for (int l = 0; l < n; l++) {
		for (int i = 0; i < layers[l].tensor_count; i++, count++) {
			const struct zn_tensor_desc *d = &layers[l].tensors[i];
			const float *src = layer_params_h[l] + d->offset;

			e[count].name = d->name;
			e[count].ndim = d->ndim;
			e[count].shape[0] = d->file_shape[0];
			e[count].shape[1] = d->file_shape[1];
			if (!d->transpose) {
				/* wte: the first V rows in memory are the file's */
				e[count].data_h = src;
				continue;
			}
			tr[count] = (struct transposed){ src, d->shape[0], d->shape[1] };
			e[count].fill = fill_transposed;
			e[count].ctx = &tr[count];
		}
	}
	rc = zn_st_write(path, dtype, e, count, keys, values, ZN_GPT2_META_COUNT);
free_entries:
	free(tr);
	free(e);
	return rc;
}

/* ---- config from a checkpoint -------------------------------------------------------------- */

static int heads_for(const char *path, const struct zn_st_file *f, struct zn_gpt2_config *cfg)
{
	static const char *const presets[] = { "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl" };
	const char *meta = zn_st_metadata(f, "n_head");
	struct zn_gpt2_config p;

	if (meta) {
		char *end;
		long long h;

		errno = 0;
		h = strtoll(meta, &end, 10);
		if (errno || end == meta || *end || h <= 0 || h > INT32_MAX || meta[0] < '0' ||
		    meta[0] > '9') {
			zn_error("%s: metadata n_head '%s' is not a positive integer", path, meta);
			return -EINVAL;
		}
		if (cfg->heads > 0 && cfg->heads != h) {
			zn_error("%s: --heads %d contradicts the checkpoint's n_head %s: drop "
				 "--heads or fix it", path, cfg->heads, meta);
			return -EINVAL;
		}
		cfg->heads = (int)h;
		return 0;
	}
	if (cfg->heads > 0)
		return 0;
	for (int i = 0; i < 4; i++) {
		zn_gpt2_config_from_preset(presets[i], &p);
		if (p.layers == cfg->layers && p.d_model == cfg->d_model) {
			cfg->heads = p.heads;
			zn_info("%s: no n_head metadata; %d layers x %d is %s's shape: %d heads",
				path, cfg->layers, cfg->d_model, presets[i], p.heads);
			return 0;
		}
	}
	zn_error("%s: the checkpoint has no n_head metadata and is not a GPT-2 preset shape: "
		 "give --heads", path);
	return -EINVAL;
}

static int embed_shape(const struct zn_st_file *f, const char *name, int64_t *rows,
		       int64_t *cols)
{
	const struct zn_st_tensor *t = find_tensor(f, name);

	if (!t || t->ndim != 2 || t->shape[0] <= 0 || t->shape[1] <= 0 ||
	    t->shape[0] > 0x7fffffff || t->shape[1] > 0x7fffffff) {
		zn_error("%s: no 2-D tensor '%s': not a GPT-2 checkpoint", zn_st_path(f), name);
		return -EINVAL;
	}
	*rows = t->shape[0];
	*cols = t->shape[1];
	return 0;
}

int zn_gpt2_config_from_safetensors(const char *path, struct zn_gpt2_config *cfg)
{
	struct zn_st_file *f;
	int64_t v, c, t, c2;
	char name[64];
	int rc = zn_st_open(&f, path);

	if (rc)
		return rc;
	rc = embed_shape(f, PREFIX "wte.weight", &v, &c);
	if (!rc)
		rc = embed_shape(f, PREFIX "wpe.weight", &t, &c2);
	if (!rc && c != c2) {
		zn_error("%s: wte has %lld columns but wpe %lld", path, (long long)c,
			 (long long)c2);
		rc = -EINVAL;
	}
	if (rc)
		goto close_file;
	cfg->vocab = (int)v;
	cfg->d_model = (int)c;
	cfg->seq = (int)t;
	for (cfg->layers = 0;; cfg->layers++) {
		snprintf(name, sizeof(name), PREFIX "h.%d.ln_1.weight", cfg->layers);
		if (!find_tensor(f, name))
			break;
	}
	if (!cfg->layers) {
		zn_error("%s: no 'h.0.ln_1.weight' block: not a GPT-2 checkpoint", path);
		rc = -EINVAL;
		goto close_file;
	}
	if (cfg->padded_vocab < cfg->vocab)
		cfg->padded_vocab = 0;
	rc = heads_for(path, f, cfg);
	if (!rc)
		rc = zn_gpt2_config_validate(cfg);
close_file:
	zn_st_close(f);
	return rc;
}
