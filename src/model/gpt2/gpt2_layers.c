/* GPT-2 parameter layout (one flat buffer per layer, Hugging Face names) and the
 * counter-based initialization that makes every element a pure function of
 * (seed, layer, tensor, element). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "core/log.h"
#include "core/rand.h"
#include "model/gpt2/gpt2.h"

int zn_gpt2_layer_count(const struct zn_gpt2_config *cfg)
{
	return cfg->layers + 2;
}

/* Appends a tensor to L; rows x cols in memory (cols 0: 1-D). file_rows is the number of
 * rows the file holds (wte: V of Vp); transpose: the file holds [cols, rows]. */
static void add_tensor(struct zn_layer_desc *L, const char *name, int64_t rows, int64_t cols,
		       int64_t file_rows, bool transpose)
{
	struct zn_tensor_desc *t = zn_layer_desc_add(L);

	if (!t)
		return;
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->ndim = cols ? 2 : 1;
	t->shape[0] = rows;
	t->shape[1] = cols ? cols : 1;
	t->numel = (uint64_t)rows * (uint64_t)t->shape[1];
	t->offset = L->numel;
	t->decay = t->ndim == 2;
	t->transpose = transpose;
	if (transpose) {
		t->file_shape[0] = cols;
		t->file_shape[1] = file_rows;
	} else {
		t->file_shape[0] = file_rows;
		t->file_shape[1] = t->shape[1];
	}
	L->numel += t->numel;
}

static void block_tensors(const struct zn_gpt2_config *cfg, struct zn_layer_desc *L, int h)
{
	static const char *const names[ZN_GPT2_MAX_TENSORS] = {
		"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
		"attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
		"mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias",
	};
	/* in-memory [rows, cols]; cols 0 = 1-D. Matmul weights are [OC, C]. */
	const int64_t C = cfg->d_model;
	const int64_t rows[ZN_GPT2_MAX_TENSORS] = { C, C, 3 * C, 3 * C, C, C,
						    C, C, 4 * C, 4 * C, C, C };
	const int64_t cols[ZN_GPT2_MAX_TENSORS] = { 0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0 };
	char name[ZN_GPT2_NAME_MAX];

	for (int i = 0; i < ZN_GPT2_MAX_TENSORS; i++) {
		snprintf(name, sizeof(name), "transformer.h.%d.%s", h, names[i]);
		add_tensor(L, name, rows[i], cols[i], rows[i], cols[i] != 0);
	}
}

int zn_gpt2_layer(const struct zn_gpt2_config *cfg, int l, struct zn_layer_desc *out)
{
	int n = zn_gpt2_layer_count(cfg);

	if (cfg->layers <= 0 || cfg->d_model <= 0 || cfg->padded_vocab < cfg->vocab ||
	    l < 0 || l >= n) {
		zn_error("zn_gpt2_layer: invalid config or layer %d (validate it first)", l);
		return -EINVAL;
	}
	memset(out, 0, sizeof(*out));
	out->index = l;
	out->tied_layer = -1;
	if (l == 0) {
		out->kind = ZN_GPT2_LAYER_EMBED;
		add_tensor(out, "transformer.wte.weight", cfg->padded_vocab, cfg->d_model,
			   cfg->vocab, false);
		add_tensor(out, "transformer.wpe.weight", cfg->seq, cfg->d_model, cfg->seq, false);
	} else if (l < n - 1) {
		out->kind = ZN_GPT2_LAYER_BLOCK;
		block_tensors(cfg, out, l - 1);
	} else {
		out->kind = ZN_GPT2_LAYER_FINAL;
		out->tied_layer = 0;
		add_tensor(out, "transformer.ln_f.weight", cfg->d_model, 0, cfg->d_model, false);
		add_tensor(out, "transformer.ln_f.bias", cfg->d_model, 0, cfg->d_model, false);
	}
	return zn_layer_desc_done(out);
}

int zn_gpt2_layers(const struct zn_gpt2_config *cfg, struct zn_layer_desc *out)
{
	int n = zn_gpt2_layer_count(cfg), rc = 0;

	for (int l = 0; l < n && !rc; l++)
		rc = zn_gpt2_layer(cfg, l, &out[l]);
	return rc;
}

uint64_t zn_gpt2_param_numel(const struct zn_gpt2_config *cfg)
{
	uint64_t C = (uint64_t)cfg->d_model;
	uint64_t block = 12 * C * C + 13 * C;

	return ((uint64_t)cfg->padded_vocab + (uint64_t)cfg->seq) * C +
	       (uint64_t)cfg->layers * block + 2 * C;
}

uint64_t zn_gpt2_param_count(const struct zn_gpt2_config *cfg)
{
	return zn_gpt2_param_numel(cfg) -
	       (uint64_t)(cfg->padded_vocab - cfg->vocab) * (uint64_t)cfg->d_model;
}

void zn_gpt2_shape_params(int layers, int hidden, int vocab, int seq, uint64_t *params,
			uint64_t *largest_layer)
{
	uint64_t C = (uint64_t)hidden;
	/* per block: ln_1 2C, c_attn 3C^2 + 3C, c_proj C^2 + C, ln_2 2C, c_fc 4C^2 + 4C,
	 * mlp c_proj 4C^2 + C = 12C^2 + 13C */
	uint64_t block = 12 * C * C + 13 * C;
	uint64_t embed = (uint64_t)vocab * C + (uint64_t)seq * C; /* wte (tied lm_head) + wpe */
	uint64_t final_norm = 2 * C;

	*params = embed + (uint64_t)layers * block + final_norm;
	*largest_layer = embed > block ? embed : block;
}

/* ---- initialization -------------------------------------------------------------------- */

/* The stream key of one tensor: a splitmix64 state derived from (seed, layer, tensor). */
static uint64_t tensor_key(uint64_t seed, int layer, int tensor)
{
	uint64_t k = zn_hash_seeded(seed, 0);

	k = zn_hash_seeded(k, (uint64_t)layer);
	return zn_hash_seeded(k, (uint64_t)tensor);
}

enum init_kind { INIT_ZERO, INIT_ONE, INIT_NORMAL };

static enum init_kind tensor_init(const struct zn_gpt2_config *cfg,
				  const struct zn_layer_desc *L, int t, float *std)
{
	*std = 0.02f;
	if (L->kind == ZN_GPT2_LAYER_EMBED)
		return INIT_NORMAL;
	if (L->kind == ZN_GPT2_LAYER_FINAL)
		return t == ZN_GPT2_LNF_W ? INIT_ONE : INIT_ZERO;
	switch (t) {
	case ZN_GPT2_LN1_W:
	case ZN_GPT2_LN2_W:
		return INIT_ONE;
	case ZN_GPT2_QKV_W:
	case ZN_GPT2_FC_W:
		return INIT_NORMAL;
	case ZN_GPT2_ATTPROJ_W:
	case ZN_GPT2_FCPROJ_W:
		/* GPT-2: residual projections scaled by 1/sqrt(number of residual layers) */
		*std = (float)(0.02 / sqrt(2.0 * cfg->layers));
		return INIT_NORMAL;
	default:
		return INIT_ZERO;
	}
}

/* Fills elements [lo, hi) of tensor t (tensor-relative indices) into out. */
static void init_tensor_part(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			     int t, uint64_t lo, uint64_t hi, float *out, uint64_t seed)
{
	const struct zn_tensor_desc *d = &L->tensors[t];
	float std;
	enum init_kind kind = tensor_init(cfg, L, t, &std);
	uint64_t key = tensor_key(seed, L->index, t);
	/* wte rows V..Vp-1 are padding and stay zero */
	uint64_t real = (L->kind == ZN_GPT2_LAYER_EMBED && t == ZN_GPT2_WTE) ?
				(uint64_t)cfg->vocab * (uint64_t)d->shape[1] : d->numel;
	int64_t n = (int64_t)(hi - lo);

#pragma omp parallel for schedule(static) if (n > 65536)
	for (int64_t j = 0; j < n; j++) {
		uint64_t i = lo + (uint64_t)j;

		if (kind == INIT_ONE)
			out[j] = 1.0f;
		else if (kind == INIT_ZERO || i >= real)
			out[j] = 0.0f;
		else
			out[j] = std * zn_normal_at(key, i);
	}
}

void zn_gpt2_init_range(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			uint64_t first, uint64_t count, float *out_h, uint64_t seed)
{
	uint64_t end = first + count;

	for (int t = 0; t < L->tensor_count; t++) {
		const struct zn_tensor_desc *d = &L->tensors[t];
		uint64_t lo = first > d->offset ? first : d->offset;
		uint64_t hi = end < d->offset + d->numel ? end : d->offset + d->numel;

		if (lo < hi)
			init_tensor_part(cfg, L, t, lo - d->offset, hi - d->offset,
					 out_h + (lo - first), seed);
	}
	if (end > L->numel) {
		uint64_t lo = first > L->numel ? first : L->numel;

		memset(out_h + (lo - first), 0, (end - lo) * sizeof(float));
	}
}

void zn_gpt2_init_layer(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			float *params_h, uint64_t seed)
{
	zn_gpt2_init_range(cfg, L, 0, L->numel, params_h, seed);
}
