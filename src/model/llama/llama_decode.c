/* Llama-family inference with a KV cache (model.h: struct zn_decode_io; zinc generate),
 * batch 1: the forward of llama_layer.c for T new tokens at positions pos0.. (RoPE at
 * those positions), each block's keys and values kept in its cache [2, max_t, KV*D]
 * (kernels.h: kv_attention_forward, grouped-query, Mistral's window). */
#include <assert.h>

#include "model/llama/llama.h"

struct dec {
	float *h, *rstd, *qkv, *atty, *branch, *res2, *gu, *m;
	float *raw, *qk_rstd; /* qk_norm: the projection before q_norm/k_norm, their rstd */
	float *moe;           /* experts: a sparse block's MoE acts (llama_moe.c) */
};

static uint64_t dec_carve(const struct zn_llama_config *c, int T, float *base, struct dec *d)
{
	const uint64_t t = (uint64_t)T, H = (uint64_t)c->hidden, I = (uint64_t)c->intermediate;
	const uint64_t Q = (uint64_t)c->heads * (uint64_t)c->head_dim;
	const uint64_t S = (uint64_t)(c->heads + 2 * c->kv_heads) * (uint64_t)c->head_dim;
	const uint64_t qk = c->qk_norm ? 1 : 0;
	float **const bufs[] = { &d->h,	     &d->rstd, &d->qkv, &d->atty, &d->branch,
				 &d->res2, &d->gu,   &d->m,   &d->raw,  &d->qk_rstd };
	const uint64_t numel[] = { t * H,     t,	 t * S, t * Q,
				   t * H,     t * H,	 t * 2 * I, t * I,
				   qk * t * S, qk * t * (uint64_t)(c->heads + c->kv_heads) };
	uint64_t off = 0;

	for (int i = 0; i < 10; i++) {
		if (base)
			*bufs[i] = base + off;
		off += numel[i];
	}
	if (c->experts <= 0)
		return off;
	off = (off + 63) / 64 * 64; /* the MoE block carves ints and floats */
	d->moe = base ? base + off : NULL;
	return off + zn_llama_moe_act_numel(c, 1, T);
}

uint64_t zn_llama_decode_scratch_numel(const void *config, const struct zn_layer_desc *L, int T)
{
	struct dec d;

	return L->kind == ZN_LLAMA_LAYER_EMBED ? 0 : dec_carve(config, T, NULL, &d);
}

uint64_t zn_llama_decode_kv_numel(const void *config, const struct zn_layer_desc *L, int max_t)
{
	const struct zn_llama_config *c = config;

	if (L->kind != ZN_LLAMA_LAYER_BLOCK)
		return 0;
	return 2 * (uint64_t)max_t * (uint64_t)c->kv_heads * (uint64_t)c->head_dim;
}

int zn_llama_decode_max_t(const void *config)
{
	const struct zn_llama_config *c = config;

	/* RoPE has no table: the model's own limit is max_position_embeddings */
	if (c->max_positions > c->seq && c->max_positions < (1 << 30))
		return (int)c->max_positions;
	return c->seq;
}

/* offsets of a block's tensors in zn_llama_layers' order (as llama_layer.c's block_w_of) */
struct block_w {
	uint64_t ln1, wqkv, bqkv, qn, kn, wo, bo, ln2, wgu, wd;
	int router; /* a sparse block's router tensor, else 0 */
};

static struct block_w block_w_of(const struct zn_llama_config *c, const struct zn_layer_desc *L)
{
	struct block_w w = { 0 };
	int t = 0;

	w.ln1 = L->tensors[t++].offset;
	w.wqkv = L->tensors[t].offset;
	t += 3;
	if (c->qkv_bias) {
		w.bqkv = L->tensors[t].offset;
		t += 3;
	}
	if (c->qk_norm) {
		w.qn = L->tensors[t++].offset;
		w.kn = L->tensors[t++].offset;
	}
	w.wo = L->tensors[t++].offset;
	if (c->o_bias)
		w.bo = L->tensors[t++].offset;
	w.ln2 = L->tensors[t++].offset;
	w.router = zn_llama_layer_is_moe(c, L->index - 1) ? t : 0;
	if (w.router)
		return w;
	w.wgu = L->tensors[t].offset;
	t += 2;
	w.wd = L->tensors[t].offset;
	return w;
}

static void block_decode(const struct zn_kernel_table *k, void *st,
			 const struct zn_llama_config *c, const struct zn_decode_io *io)
{
	const int T = io->T, H = c->hidden, NH = c->heads, KV = c->kv_heads, D = c->head_dim;
	const int Q = NH * D, S = (NH + 2 * KV) * D, I = c->intermediate;
	const uint64_t th = (uint64_t)T * (uint64_t)H;
	const struct block_w w = block_w_of(c, io->L);
	const float *p = io->params;
	float *kc = io->kv, *vc = io->kv + (uint64_t)io->max_t * (uint64_t)KV * (uint64_t)D;
	struct dec d;

	dec_carve(c, T, io->scratch, &d);
	k->rmsnorm_forward(st, d.h, d.rstd, io->x_in, p + w.ln1, c->eps, 1, T, H);
	k->matmul_forward(st, c->qk_norm ? d.raw : d.qkv, d.h, p + w.wqkv,
			  c->qkv_bias ? p + w.bqkv : NULL, 1, T, H, S);
	if (c->qk_norm) /* Qwen3: before RoPE, so the cache holds normalized rotated keys */
		k->qk_rmsnorm_forward(st, d.qkv, d.qk_rstd, d.raw, p + w.qn, p + w.kn, c->eps, 1,
				      T, NH, KV, D);
	k->rope_forward(st, d.qkv, c->inv_freq, io->pos, 1, T, NH, KV, D);
	k->kv_attention_forward(st, d.atty, kc, vc, d.qkv, io->pos0, T, NH, KV, D, c->window);
	k->matmul_forward(st, d.branch, d.atty, p + w.wo, c->o_bias ? p + w.bo : NULL, 1, T, Q,
			  H);
	k->residual_forward(st, d.res2, io->x_in, d.branch, th);
	k->rmsnorm_forward(st, d.h, d.rstd, d.res2, p + w.ln2, c->eps, 1, T, H);
	if (w.router) {
		zn_llama_moe_forward(k, st, c, io->L, p, w.router, 1, T, NULL, io->experts,
				     d.moe, d.h, d.branch);
	} else {
		k->matmul_forward(st, d.gu, d.h, p + w.wgu, NULL, 1, T, H, 2 * I);
		k->swiglu_forward(st, d.m, d.gu, 1, T, I);
		k->matmul_forward(st, d.branch, d.m, p + w.wd, NULL, 1, T, I, H);
	}
	k->residual_forward(st, io->x_out, d.res2, d.branch, th);
}

/* norm on the last n_logits rows, then logits = h @ lm_head^T */
static void final_decode(const struct zn_kernel_table *k, void *st,
			 const struct zn_llama_config *c, const struct zn_decode_io *io)
{
	const int H = c->hidden, n = io->n_logits;
	const float *x = io->x_in + (uint64_t)(io->T - n) * (uint64_t)H;
	const float *head = io->L->tied_layer >= 0 ? io->tied_params :
						     io->params + io->L->tensors[1].offset;
	struct dec d;

	dec_carve(c, io->T, io->scratch, &d);
	k->rmsnorm_forward(st, d.h, d.rstd, x, io->params, c->eps, 1, n, H);
	k->matmul_forward(st, io->logits, d.h, head, NULL, 1, n, H, c->vocab);
}

void zn_llama_decode(const struct zn_kernel_table *k, void *stream, const void *config,
		     const struct zn_decode_io *io)
{
	const struct zn_llama_config *c = config;

	assert(io->T > 0 && io->pos0 >= 0 && io->pos0 + io->T <= io->max_t);
	switch (io->L->kind) {
	case ZN_LLAMA_LAYER_EMBED:
		k->embedding_forward(stream, io->x_out, io->tokens, io->params, 1, io->T,
				     c->hidden);
		break;
	case ZN_LLAMA_LAYER_BLOCK:
		block_decode(k, stream, c, io);
		break;
	case ZN_LLAMA_LAYER_FINAL:
		assert(io->logits && io->n_logits >= 1 && io->n_logits <= io->T &&
		       (io->L->tied_layer < 0 || io->tied_params));
		final_decode(k, stream, c, io);
		break;
	}
}
