/* Llama-family parameter layout (one flat buffer per layer, Hugging Face names) and the
 * counter-based initialization: each element a pure function of (seed, layer, tensor,
 * element), so any shard initializes on its own. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "core/log.h"
#include "core/rand.h"
#include "model/llama/llama.h"

int zn_llama_layer_count(const struct zn_llama_config *cfg)
{
	return cfg->layers + 2;
}

bool zn_llama_layer_is_moe(const struct zn_llama_config *cfg, int n)
{
	if (cfg->experts <= 0 || n < 0 || n >= ZN_HF_MAX_MOE_LAYERS)
		return false;
	if (cfg->mlp_only[n / 8] & (1u << (n % 8)))
		return false;
	return (n + 1) % (cfg->sparse_step > 0 ? cfg->sparse_step : 1) == 0;
}

/* rows x cols, [out, in] as the file holds it; cols 0: 1-D */
static void add(struct zn_layer_desc *L, const char *name, int64_t rows, int64_t cols)
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
	t->transpose = false;
	t->file_shape[0] = rows;
	t->file_shape[1] = t->shape[1];
	L->numel += t->numel;
}

/* rows x cols in memory, the checkpoint's parts of rows / parts each (model.h) */
static void add_parts(struct zn_layer_desc *L, const char *name, int64_t rows, int64_t cols,
		      int parts, const char *prefix, const char *s0, const char *s1)
{
	struct zn_tensor_desc *t;

	add(L, name, rows, cols);
	if (L->add_failed)
		return;
	t = &L->tensors[L->tensor_count - 1];
	t->parts = parts;
	t->part_kinds = s1 ? 2 : 1;
	snprintf(t->part_prefix, sizeof(t->part_prefix), "%s", prefix);
	t->part_suffix[0] = s0;
	t->part_suffix[1] = s1;
}

/* An MoE block's router [E, H] and its experts, kept as transformers 5 keeps them:
 * gate_up_proj [E, 2I, H] (each expert's gate_proj then up_proj rows) and down_proj
 * [E, H, I], here 2-D; checkpoints name each expert's matrices (llama_hf.c) */
static void experts(const struct zn_llama_config *c, struct zn_layer_desc *L, int n)
{
	const int64_t H = c->hidden, I = c->moe_intermediate, E = c->experts;
	const bool mixtral = !c->qk_norm;
	char name[ZN_MODEL_NAME_MAX], prefix[ZN_MODEL_NAME_MAX];

	snprintf(name, sizeof(name), "model.layers.%d.%s.gate.weight", n,
		 mixtral ? "block_sparse_moe" : "mlp");
	add(L, name, E, H);
	snprintf(prefix, sizeof(prefix), "model.layers.%d.%s.experts.", n,
		 mixtral ? "block_sparse_moe" : "mlp");
	snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.gate_up_proj", n);
	add_parts(L, name, E * 2 * I, H, (int)(2 * E), prefix,
		  mixtral ? "w1.weight" : "gate_proj.weight",
		  mixtral ? "w3.weight" : "up_proj.weight");
	snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.down_proj", n);
	add_parts(L, name, E * H, I, (int)E, prefix, mixtral ? "w2.weight" : "down_proj.weight",
		  NULL);
}

static void block(const struct zn_llama_config *c, struct zn_layer_desc *L, int n)
{
	const int64_t H = c->hidden, Q = (int64_t)c->heads * c->head_dim;
	const int64_t KVD = (int64_t)c->kv_heads * c->head_dim, I = c->intermediate;
	char p[ZN_MODEL_NAME_MAX], name[ZN_MODEL_NAME_MAX + 40];

	snprintf(p, sizeof(p), "model.layers.%d.", n);
#define ADD(suffix, r, cc)                                                  \
	do {                                                                \
		snprintf(name, sizeof(name), "%s%s", p, suffix);            \
		add(L, name, r, cc);                                        \
	} while (0)
	ADD("input_layernorm.weight", H, 0);
	ADD("self_attn.q_proj.weight", Q, H);
	ADD("self_attn.k_proj.weight", KVD, H);
	ADD("self_attn.v_proj.weight", KVD, H);
	if (c->qkv_bias) {
		ADD("self_attn.q_proj.bias", Q, 0);
		ADD("self_attn.k_proj.bias", KVD, 0);
		ADD("self_attn.v_proj.bias", KVD, 0);
	}
	if (c->qk_norm) {
		ADD("self_attn.q_norm.weight", c->head_dim, 0);
		ADD("self_attn.k_norm.weight", c->head_dim, 0);
	}
	ADD("self_attn.o_proj.weight", H, Q);
	if (c->o_bias)
		ADD("self_attn.o_proj.bias", H, 0);
	ADD("post_attention_layernorm.weight", H, 0);
	if (zn_llama_layer_is_moe(c, n)) {
		experts(c, L, n);
		return;
	}
	ADD("mlp.gate_proj.weight", I, H);
	ADD("mlp.up_proj.weight", I, H);
	ADD("mlp.down_proj.weight", H, I);
#undef ADD
}

int zn_llama_layer(const struct zn_llama_config *cfg, int l, struct zn_layer_desc *out)
{
	int n = zn_llama_layer_count(cfg);

	if (cfg->layers <= 0 || cfg->hidden <= 0 || cfg->vocab <= 0 || l < 0 || l >= n) {
		zn_error("zn_llama_layer: invalid config or layer %d (validate it first)", l);
		return -EINVAL;
	}
	memset(out, 0, sizeof(*out));
	out->index = l;
	out->tied_layer = -1;
	if (l == 0) {
		out->kind = ZN_LLAMA_LAYER_EMBED;
		add(out, "model.embed_tokens.weight", cfg->vocab, cfg->hidden);
	} else if (l < n - 1) {
		out->kind = ZN_LLAMA_LAYER_BLOCK;
		block(cfg, out, l - 1);
	} else {
		out->kind = ZN_LLAMA_LAYER_FINAL;
		add(out, "model.norm.weight", cfg->hidden, 0);
		if (cfg->tied)
			out->tied_layer = 0;
		else
			add(out, "lm_head.weight", cfg->vocab, cfg->hidden);
	}
	return zn_layer_desc_done(out);
}

int zn_llama_layers(const struct zn_llama_config *cfg, struct zn_layer_desc *out)
{
	int n = zn_llama_layer_count(cfg), rc = 0;

	for (int l = 0; l < n && !rc; l++)
		rc = zn_llama_layer(cfg, l, &out[l]);
	return rc;
}

void zn_llama_init_range(const struct zn_llama_config *cfg, const struct zn_layer_desc *L,
			 uint64_t first, uint64_t count, float *out_h, uint64_t seed)
{
	uint64_t end = first + count;

	(void)cfg;
	for (int t = 0; t < L->tensor_count; t++) {
		const struct zn_tensor_desc *d = &L->tensors[t];
		uint64_t lo = first > d->offset ? first : d->offset;
		uint64_t hi = end < d->offset + d->numel ? end : d->offset + d->numel;
		/* norms (1-D "...norm.weight") are 1, biases 0, matrices normal(0, 0.02) */
		int one = d->ndim == 1 && strstr(d->name, "norm.weight") != NULL;
		uint64_t layer_key = zn_hash_seeded(zn_hash_seeded(seed, 0), (uint64_t)L->index);
		uint64_t key = zn_hash_seeded(layer_key, (uint64_t)t);
		int64_t n = hi > lo ? (int64_t)(hi - lo) : 0;

		/* element by element from its index: any thread count gives the same values */
#pragma omp parallel for schedule(static) if (n > 65536)
		for (int64_t j = 0; j < n; j++) {
			uint64_t i = lo + (uint64_t)j;
			float *o = out_h + (i - first);

			if (d->ndim == 2)
				*o = 0.02f * zn_normal_at(key, i - d->offset);
			else
				*o = one ? 1.0f : 0.0f;
		}
	}
	if (end > L->numel) {
		uint64_t lo = first > L->numel ? first : L->numel;

		memset(out_h + (lo - first), 0, (end - lo) * sizeof(float));
	}
}
