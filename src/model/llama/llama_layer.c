/* Llama-family per-layer forward and backward against the kernel table (the composition of
 * tests/test_kernels_llama_layer.c), with the carving of acts and scratch, so the sizes and
 * the carving cannot disagree. */
#include <assert.h>
#include <stddef.h>

#include "lmhead_ce.h"
#include "model/llama/llama.h"

struct dims {
	int H, I, NH, KV, D, Q, S, V;
	int chunk; /* rows per lm_head + cross-entropy chunk */
	uint64_t bt, bth, bnt; /* bnt: B x NH x T, the fused attention's row statistics */
};

static struct dims dims_of(const struct zn_llama_config *c, const struct zn_layer_desc *L,
			   int B, int T)
{
	struct dims d;

	d.H = c->hidden, d.I = c->intermediate, d.NH = c->heads, d.KV = c->kv_heads;
	d.D = c->head_dim, d.V = c->vocab;
	d.Q = d.NH * d.D;
	d.S = (d.NH + 2 * d.KV) * d.D;
	d.bt = (uint64_t)B * (uint64_t)T;
	d.bth = d.bt * (uint64_t)d.H;
	d.bnt = (uint64_t)B * (uint64_t)d.NH * (uint64_t)T;
	d.chunk = zn_llama_ce_chunk(d.V, d.bt, L->work_bytes);
	return d;
}

static uint64_t carve(float *base, float **const *bufs, const uint64_t *numel, int n)
{
	uint64_t off = 0;

	for (int i = 0; i < n; i++) {
		if (base)
			*bufs[i] = base + off;
		off += numel[i];
	}
	return off;
}

/* qk_norm: qkv_raw (the projection before the norms) and qk_rstd [BT, NH + KV] as well;
 * else they take no room */
/* a sparse block (moe_numel > 0): the MoE block's acts (llama_moe.c) instead of gu and m,
 * last, 64-float aligned as the block's carving (its ints and floats) wants */
struct block_acts {
	float *h1, *rstd1, *qkv, *atty, *lse, *res2, *h2, *rstd2, *gu, *m, *qkv_raw, *qk_rstd;
	float *moe;
};

static uint64_t align64(uint64_t n)
{
	return (n + 63) / 64 * 64;
}

static uint64_t block_acts_carve(const struct dims *d, bool qk_norm, uint64_t moe_numel,
				 float *acts, struct block_acts *a)
{
	const uint64_t dense = moe_numel ? 0 : 1;
	float **const bufs[] = { &a->h1, &a->rstd1, &a->qkv, &a->atty, &a->lse, &a->res2,
				 &a->h2, &a->rstd2, &a->gu, &a->m, &a->qkv_raw, &a->qk_rstd };
	const uint64_t numel[] = { d->bth, d->bt, d->bt * (uint64_t)d->S, d->bt * (uint64_t)d->Q,
				   d->bnt, d->bth, d->bth, d->bt, dense * d->bt * 2 * (uint64_t)d->I,
				   dense * d->bt * (uint64_t)d->I,
				   qk_norm ? d->bt * (uint64_t)d->S : 0,
				   qk_norm ? d->bt * (uint64_t)(d->NH + d->KV) : 0 };
	uint64_t n = carve(acts, bufs, numel, 12);

	if (!moe_numel)
		return n;
	a->moe = acts ? acts + align64(n) : NULL;
	return align64(n) + moe_numel;
}

static uint64_t moe_acts_numel(const struct zn_llama_config *c, const struct zn_layer_desc *L,
			       int B, int T)
{
	if (L->kind != ZN_LLAMA_LAYER_BLOCK || !zn_llama_layer_is_moe(c, L->index - 1))
		return 0;
	return zn_llama_moe_act_numel(c, B, T);
}

static uint64_t moe_scratch_numel(const struct zn_llama_config *c,
				  const struct zn_layer_desc *L, int B, int T)
{
	if (L->kind != ZN_LLAMA_LAYER_BLOCK || !zn_llama_layer_is_moe(c, L->index - 1))
		return 0;
	return zn_llama_moe_scratch_numel(c, B, T);
}

/* all accumulated into (zero on entry) except dres2, written over dh2 once consumed, and
 * drow, written by the attention backward */
struct block_grads {
	float *dm, *dgu, *dh2, *dres2_n, *datty, *dqkv, *drow, *dh1, *dx_n;
	float *moe; /* a sparse block's MoE scratch (instead of dm, dgu), last */
};

static uint64_t block_grads_carve(const struct dims *d, uint64_t moe_numel, float *s,
				  struct block_grads *g)
{
	const uint64_t dense = moe_numel ? 0 : 1;
	float **const bufs[] = { &g->dm, &g->dgu, &g->dh2, &g->dres2_n, &g->datty,
				 &g->dqkv, &g->drow, &g->dh1, &g->dx_n };
	const uint64_t numel[] = { dense * d->bt * (uint64_t)d->I,
				   dense * d->bt * 2 * (uint64_t)d->I, d->bth,
				   d->bth, d->bt * (uint64_t)d->Q, d->bt * (uint64_t)d->S,
				   d->bnt, d->bth, d->bth };
	uint64_t n = carve(s, bufs, numel, 9);

	if (!moe_numel)
		return n;
	g->moe = s ? s + align64(n) : NULL;
	return align64(n) + moe_numel;
}

/* The final layer saves hn and rstd only: lm_head + cross-entropy run in chunks of rows
 * (kernels/lmhead_ce.h), so no [BT, V] logits or probs exist at once, and the backward
 * recomputes each chunk's logits. Scratch: the chunks' work, dhn, dx_n, a zero [BTH]. */
struct final_acts {
	float *hn, *rstd;
};

struct final_scr {
	float *work, *dhn, *dx_n, *zero;
};

static uint64_t final_acts_carve(const struct dims *d, float *acts, struct final_acts *a)
{
	float **const bufs[] = { &a->hn, &a->rstd };
	const uint64_t numel[] = { d->bth, d->bt };

	return carve(acts, bufs, numel, 2);
}

static uint64_t final_scr_carve(const struct dims *d, float *s, struct final_scr *f)
{
	float **const bufs[] = { &f->work, &f->dhn, &f->dx_n, &f->zero };
	const uint64_t numel[] = { zn_lmhead_ce_work_count(d->chunk, d->V),
				   d->bth, d->bth, d->bth };

	return carve(s, bufs, numel, 4);
}

int zn_llama_ce_chunk(int vocab, uint64_t bt, uint64_t work_bytes)
{
	return zn_lmhead_ce_chunk((int64_t)bt, vocab, work_bytes);
}

uint64_t zn_llama_act_numel(const struct zn_llama_config *cfg, const struct zn_layer_desc *L,
			    int B, int T)
{
	struct dims d = dims_of(cfg, L, B, T);
	struct block_acts ba;
	struct final_acts fa;

	if (L->kind == ZN_LLAMA_LAYER_BLOCK)
		return block_acts_carve(&d, cfg->qk_norm, moe_acts_numel(cfg, L, B, T), NULL, &ba);
	if (L->kind == ZN_LLAMA_LAYER_FINAL)
		return final_acts_carve(&d, NULL, &fa);
	return 0;
}

uint64_t zn_llama_scratch_numel(const struct zn_llama_config *cfg,
				const struct zn_layer_desc *L, int B, int T)
{
	struct dims d = dims_of(cfg, L, B, T);
	struct block_grads g;
	struct final_scr f;
	uint64_t fwd, bwd;

	if (L->kind == ZN_LLAMA_LAYER_BLOCK) {
		fwd = d.bth; /* branch output */
		bwd = block_grads_carve(&d, moe_scratch_numel(cfg, L, B, T), NULL, &g);
		return fwd > bwd ? fwd : bwd;
	}
	if (L->kind == ZN_LLAMA_LAYER_FINAL)
		return final_scr_carve(&d, NULL, &f);
	return 0;
}

/* Tensor offsets of a block (model.layers.N.*), in zn_llama_layers' order. */
struct block_w {
	uint64_t ln1, wqkv, bqkv, qn, kn, wo, bo, ln2, wgu, wd;
	bool has_bqkv, has_bo;
	int router; /* a sparse block: the router's tensor index (experts after it), else 0 */
};

static struct block_w block_w_of(const struct zn_llama_config *c, const struct zn_layer_desc *L)
{
	struct block_w w;
	int t = 0;

	w.has_bqkv = c->qkv_bias, w.has_bo = c->o_bias;
	w.ln1 = L->tensors[t++].offset;
	w.wqkv = L->tensors[t].offset; /* q, k, v back to back */
	t += 3;
	w.bqkv = w.has_bqkv ? L->tensors[t].offset : 0;
	t += w.has_bqkv ? 3 : 0;
	w.qn = c->qk_norm ? L->tensors[t++].offset : 0;
	w.kn = c->qk_norm ? L->tensors[t++].offset : 0;
	w.wo = L->tensors[t++].offset;
	w.bo = w.has_bo ? L->tensors[t++].offset : 0;
	w.ln2 = L->tensors[t++].offset;
	w.router = zn_llama_layer_is_moe(c, L->index - 1) ? t : 0;
	if (w.router)
		return w;
	w.wgu = L->tensors[t].offset; /* gate, up back to back */
	t += 2;
	w.wd = L->tensors[t].offset;
	return w;
}

static void block_forward(const struct zn_kernel_table *k, void *st,
			  const struct zn_llama_config *c, const struct zn_layer_io *io)
{
	struct dims d = dims_of(c, io->L, io->B, io->T);
	struct block_w w = block_w_of(c, io->L);
	const float *p = io->params;
	const int B = io->B, T = io->T;
	struct block_acts a;
	float *branch = io->scratch;

	block_acts_carve(&d, c->qk_norm, moe_acts_numel(c, io->L, B, T), io->acts, &a);
	k->rmsnorm_forward(st, a.h1, a.rstd1, io->x_in, p + w.ln1, c->eps, B, T, d.H);
	k->matmul_forward(st, c->qk_norm ? a.qkv_raw : a.qkv, a.h1, p + w.wqkv,
			  w.has_bqkv ? p + w.bqkv : NULL, B, T, d.H, d.S);
	if (c->qk_norm) /* Qwen3: per head, after the projection and before RoPE */
		k->qk_rmsnorm_forward(st, a.qkv, a.qk_rstd, a.qkv_raw, p + w.qn, p + w.kn, c->eps,
				      B, T, d.NH, d.KV, d.D);
	k->rope_forward(st, a.qkv, c->inv_freq, io->pos, B, T, d.NH, d.KV, d.D);
	/* fused (FlashAttention-2) with Mistral's sliding window: no [T,T] buffer; packed
	 * documents (io->pos): positions restart and attention stays in each document */
	if (io->pos)
		k->flash_attention_doc_forward(st, a.atty, a.lse, a.qkv, io->pos, B, T, d.NH,
					       d.KV, d.D, c->window);
	else
		k->flash_attention_forward(st, a.atty, a.lse, a.qkv, B, T, d.NH, d.KV, d.D,
					   c->window);
	k->matmul_forward(st, branch, a.atty, p + w.wo, w.has_bo ? p + w.bo : NULL, B, T, d.Q,
			  d.H);
	k->residual_forward(st, a.res2, io->x_in, branch, d.bth);
	k->rmsnorm_forward(st, a.h2, a.rstd2, a.res2, p + w.ln2, c->eps, B, T, d.H);
	if (w.router) {
		zn_llama_moe_forward(k, st, c, io->L, p, w.router, B, T, io->aux, io->experts,
				     a.moe, a.h2, branch);
	} else {
		k->matmul_forward(st, a.gu, a.h2, p + w.wgu, NULL, B, T, d.H, 2 * d.I);
		k->swiglu_forward(st, a.m, a.gu, B, T, d.I);
		k->matmul_forward(st, branch, a.m, p + w.wd, NULL, B, T, d.I, d.H);
	}
	k->residual_forward(st, io->x_out, a.res2, branch, d.bth);
}

static void block_backward(const struct zn_kernel_table *k, void *st,
			   const struct zn_llama_config *c, const struct zn_layer_io *io)
{
	struct dims d = dims_of(c, io->L, io->B, io->T);
	struct block_w w = block_w_of(c, io->L);
	const float *p = io->params;
	float *g = io->grads, *dres2;
	const int B = io->B, T = io->T;
	struct block_acts a;
	struct block_grads s;

	block_acts_carve(&d, c->qk_norm, moe_acts_numel(c, io->L, B, T), io->acts, &a);
	block_grads_carve(&d, moe_scratch_numel(c, io->L, B, T), io->scratch, &s);
	if (w.router) {
		zn_llama_moe_backward(k, st, c, io, w.router, a.moe, s.moe, a.h2, s.dh2);
	} else {
		k->matmul_backward(st, s.dm, g + w.wd, NULL, io->dx_out, a.m, p + w.wd, B, T, d.I,
				   d.H);
		k->swiglu_backward(st, s.dgu, s.dm, a.gu, B, T, d.I);
		k->matmul_backward(st, s.dh2, g + w.wgu, NULL, s.dgu, a.h2, p + w.wgu, B, T, d.H,
				   2 * d.I);
	}
	k->rmsnorm_backward(st, s.dres2_n, g + w.ln2, s.dh2, a.res2, p + w.ln2, a.rstd2, B, T,
			    d.H);
	dres2 = s.dh2; /* consumed: d(res2) = dx_out + the norm's part */
	k->residual_forward(st, dres2, io->dx_out, s.dres2_n, d.bth);
	k->matmul_backward(st, s.datty, g + w.wo, w.has_bo ? g + w.bo : NULL, dres2, a.atty,
			   p + w.wo, B, T, d.Q, d.H);
	if (io->pos)
		k->flash_attention_doc_backward(st, s.dqkv, s.drow, s.datty, a.qkv, a.atty, a.lse,
						io->pos, B, T, d.NH, d.KV, d.D, c->window);
	else
		k->flash_attention_backward(st, s.dqkv, s.drow, s.datty, a.qkv, a.atty, a.lse, B,
					    T, d.NH, d.KV, d.D, c->window);
	k->rope_backward(st, s.dqkv, c->inv_freq, io->pos, B, T, d.NH, d.KV, d.D);
	if (c->qk_norm) /* in place: dqkv becomes the gradient wrt the projection */
		k->qk_rmsnorm_backward(st, s.dqkv, g + w.qn, g + w.kn, a.qkv_raw, p + w.qn,
				       p + w.kn, a.qk_rstd, B, T, d.NH, d.KV, d.D);
	k->matmul_backward(st, s.dh1, g + w.wqkv, w.has_bqkv ? g + w.bqkv : NULL, s.dqkv, a.h1,
			   p + w.wqkv, B, T, d.H, d.S);
	k->rmsnorm_backward(st, s.dx_n, g + w.ln1, s.dh1, io->x_in, p + w.ln1, a.rstd1, B, T,
			    d.H);
	k->residual_forward(st, io->dx_in, dres2, s.dx_n, d.bth);
}

/* lm_head: layer 0's embed_tokens (offset 0) when tied, else the final layer's tensor 1 */
static const float *lm_head(const struct zn_layer_io *io, const float *own, const float *tied)
{
	return io->L->tied_layer >= 0 ? tied : own + io->L->tensors[1].offset;
}

static void final_forward(const struct zn_kernel_table *k, void *st,
			  const struct zn_llama_config *c, const struct zn_layer_io *io)
{
	struct dims d = dims_of(c, io->L, io->B, io->T);
	struct final_acts a;
	struct final_scr f;

	final_acts_carve(&d, io->acts, &a);
	final_scr_carve(&d, io->scratch, &f);
	k->rmsnorm_forward(st, a.hn, a.rstd, io->x_in, io->params, c->eps, io->B, io->T, d.H);
	(void)zn_lmhead_ce_forward(k, st, io->losses, f.work, a.hn,
				   lm_head(io, io->params, io->tied_params), io->targets,
				   (int64_t)d.bt, d.H, d.V, d.V, d.chunk);
	zn_llama_moe_aux_finish(k, st, c, io, false);
}

static void final_backward(const struct zn_kernel_table *k, void *st,
			   const struct zn_llama_config *c, const struct zn_layer_io *io)
{
	struct dims d = dims_of(c, io->L, io->B, io->T);
	struct final_acts a;
	struct final_scr f;
	float *dlm = io->L->tied_layer >= 0 ? io->tied_grads :
					      io->grads + io->L->tensors[1].offset;

	final_acts_carve(&d, io->acts, &a);
	final_scr_carve(&d, io->scratch, &f);
	/* the load-balancing loss's gradient per probability, before any block reads it */
	zn_llama_moe_aux_finish(k, st, c, io, true);
	/* dhn (zero on entry) += the chunks' dlogits @ lm_head; dlm += dlogits^T @ hn */
	(void)zn_lmhead_ce_backward(k, st, f.dhn, dlm, f.work, a.hn,
				    lm_head(io, io->params, io->tied_params), io->targets,
				    io->dloss_scale, (int64_t)d.bt, d.H, d.V, d.V,
				    d.chunk);
	k->rmsnorm_backward(st, f.dx_n, io->grads, f.dhn, io->x_in, io->params, a.rstd, io->B,
			    io->T, d.H);
	/* f.zero stays zero: residual_forward copies */
	k->residual_forward(st, io->dx_in, f.dx_n, f.zero, d.bth);
}

void zn_llama_layer_forward(const struct zn_kernel_table *k, void *stream,
			    const struct zn_llama_config *cfg, const struct zn_layer_io *io)
{
	assert(io->B > 0 && io->T > 0 && io->T <= cfg->seq);
	switch (io->L->kind) {
	case ZN_LLAMA_LAYER_EMBED:
		k->embedding_forward(stream, io->x_out, io->tokens, io->params, io->B, io->T,
				     cfg->hidden);
		break;
	case ZN_LLAMA_LAYER_BLOCK:
		block_forward(k, stream, cfg, io);
		break;
	case ZN_LLAMA_LAYER_FINAL:
		assert(io->targets && io->losses && (io->L->tied_layer < 0 || io->tied_params));
		final_forward(k, stream, cfg, io);
		break;
	}
}

void zn_llama_layer_backward(const struct zn_kernel_table *k, void *stream,
			     const struct zn_llama_config *cfg, const struct zn_layer_io *io)
{
	assert(io->B > 0 && io->T > 0 && io->T <= cfg->seq);
	switch (io->L->kind) {
	case ZN_LLAMA_LAYER_EMBED:
		k->embedding_backward(stream, io->grads, io->dx_out, io->tokens, io->B, io->T,
				      cfg->hidden);
		break;
	case ZN_LLAMA_LAYER_BLOCK:
		block_backward(k, stream, cfg, io);
		break;
	case ZN_LLAMA_LAYER_FINAL:
		assert(io->targets && (io->L->tied_layer < 0 || io->tied_grads));
		final_backward(k, stream, cfg, io);
		break;
	}
}
