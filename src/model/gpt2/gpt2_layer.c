/* GPT-2 per-layer forward and backward, written once against the kernel table (the same
 * code runs on the CPU table and, enqueued, on the CUDA table). Buffer carving of acts and
 * scratch is here too, so act_numel/scratch_numel and the carving cannot disagree.
 * The op sequence is llm.c's (train_gpt2.c gpt2_forward/gpt2_backward), split per layer. */
#include <assert.h>
#include <stddef.h>

#include "lmhead_ce.h"
#include "model/gpt2/gpt2.h"

/* Saved activations of one block, carved from acts in this order. */
struct block_acts {
	float *ln1, *ln1_mean, *ln1_rstd; /* [BTC], [BT], [BT] */
	float *qkv;                       /* [BT, 3C] */
	float *atty;                      /* [BTC] */
	float *lse;                       /* [B, NH, T]: fused attention's row statistics */
	float *res2;                      /* [BTC]: x_in + attention branch */
	float *ln2, *ln2_mean, *ln2_rstd;
	float *fch, *fch_gelu;            /* [BT, 4C] each */
};

struct final_acts {
	float *lnf, *lnf_mean, *lnf_rstd;
};

struct sizes {
	uint64_t bt, btc, bnt;
};

int zn_gpt2_ce_chunk(const struct zn_gpt2_config *cfg, uint64_t bt, uint64_t work_bytes)
{
	/* chunks within the work budget: never [BT, Vp] at once unless the budget holds it */
	return zn_lmhead_ce_chunk((int64_t)bt, cfg->padded_vocab, work_bytes);
}

/* the final layer's chunk rows and its work floats: from the descriptor the scratch size
 * and the calls share */
static int chunk_of(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L, int B,
		    int T)
{
	return zn_gpt2_ce_chunk(cfg, (uint64_t)B * (uint64_t)T, L->work_bytes);
}

static uint64_t ce_work_of(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			   int B, int T)
{
	return zn_lmhead_ce_work_count(chunk_of(cfg, L, B, T), cfg->padded_vocab);
}

static struct sizes sizes_of(const struct zn_gpt2_config *cfg, int B, int T)
{
	struct sizes s;

	s.bt = (uint64_t)B * (uint64_t)T;
	s.btc = s.bt * (uint64_t)cfg->d_model;
	s.bnt = (uint64_t)B * (uint64_t)cfg->heads * (uint64_t)T;
	return s;
}

/* Carves bufs in order from base; returns the floats used. base NULL: only counts. */
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

static uint64_t block_acts_carve(const struct zn_gpt2_config *cfg, int B, int T, float *acts,
				 struct block_acts *a)
{
	struct sizes s = sizes_of(cfg, B, T);
	float **const bufs[] = { &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->atty,
				 &a->lse, &a->res2, &a->ln2, &a->ln2_mean, &a->ln2_rstd,
				 &a->fch, &a->fch_gelu };
	const uint64_t numel[] = { s.btc, s.bt, s.bt, 3 * s.btc, s.btc, s.bnt,
				   s.btc, s.btc, s.bt, s.bt, 4 * s.btc, 4 * s.btc };

	return carve(acts, bufs, numel, 12);
}

static uint64_t final_acts_carve(const struct zn_gpt2_config *cfg, int B, int T, float *acts,
				 struct final_acts *a)
{
	struct sizes s = sizes_of(cfg, B, T);
	float **const bufs[] = { &a->lnf, &a->lnf_mean, &a->lnf_rstd };
	const uint64_t numel[] = { s.btc, s.bt, s.bt };

	return carve(acts, bufs, numel, 3);
}

/* Block backward's scratch: every buffer is accumulated into (so zero on entry) except
 * dres2, which is written by residual_forward and reuses dln2 once that is consumed. */
struct block_grads {
	float *dfch_gelu, *dfch; /* [BT, 4C] */
	float *dln2;             /* [BTC]; later dres2 */
	float *dres2_ln;         /* [BTC]: ln_2's contribution to d(res2) */
	float *datty;            /* [BTC] */
	float *dqkv;             /* [BT, 3C] */
	float *drow;             /* [B, NH, T]: written by the attention backward */
	float *dln1;             /* [BTC] */
	float *dx_ln;            /* [BTC]: ln_1's contribution to d(x_in) */
};

static uint64_t block_grads_carve(const struct zn_gpt2_config *cfg, int B, int T,
				  float *scratch, struct block_grads *g)
{
	struct sizes s = sizes_of(cfg, B, T);
	float **const bufs[] = { &g->dfch_gelu, &g->dfch, &g->dln2, &g->dres2_ln, &g->datty,
				 &g->dqkv, &g->drow, &g->dln1, &g->dx_ln };
	const uint64_t numel[] = { 4 * s.btc, 4 * s.btc, s.btc, s.btc, s.btc,
				   3 * s.btc, s.bnt, s.btc, s.btc };

	return carve(scratch, bufs, numel, 9);
}

uint64_t zn_gpt2_act_numel(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			   int B, int T)
{
	struct block_acts ba;
	struct final_acts fa;

	switch (L->kind) {
	case ZN_GPT2_LAYER_BLOCK:
		return block_acts_carve(cfg, B, T, NULL, &ba);
	case ZN_GPT2_LAYER_FINAL:
		return final_acts_carve(cfg, B, T, NULL, &fa);
	default:
		return 0;
	}
}

uint64_t zn_gpt2_scratch_numel(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			       int B, int T)
{
	struct sizes s = sizes_of(cfg, B, T);
	struct block_grads g;
	uint64_t fwd, bwd;

	switch (L->kind) {
	case ZN_GPT2_LAYER_BLOCK:
		fwd = s.btc; /* branch output */
		bwd = block_grads_carve(cfg, B, T, NULL, &g);
		return fwd > bwd ? fwd : bwd;
	case ZN_GPT2_LAYER_FINAL:
		/* lm_head + cross-entropy chunk work, dlnf, dx_ln, a zero [BTC] */
		return ce_work_of(cfg, L, B, T) + 3 * s.btc;
	default:
		return 0;
	}
}

static const float *tensor(const float *base, const struct zn_layer_desc *L, int t)
{
	return base + L->tensors[t].offset;
}

static float *tensor_mut(float *base, const struct zn_layer_desc *L, int t)
{
	return base + L->tensors[t].offset;
}

/* ---- forward ------------------------------------------------------------------------- */

static void block_forward(const struct zn_kernel_table *k, void *st,
			  const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			  const float *p, float *acts, float *scratch, const float *x_in,
			  float *x_out, const int *pos, int B, int T)
{
	const int C = cfg->d_model, NH = cfg->heads;
	struct sizes s = sizes_of(cfg, B, T);
	struct block_acts a;
	float *branch = scratch; /* attention, then MLP, branch output [BTC] */

	block_acts_carve(cfg, B, T, acts, &a);
	k->layernorm_forward(st, a.ln1, a.ln1_mean, a.ln1_rstd, x_in, tensor(p, L, ZN_GPT2_LN1_W),
			     tensor(p, L, ZN_GPT2_LN1_B), B, T, C);
	k->matmul_forward(st, a.qkv, a.ln1, tensor(p, L, ZN_GPT2_QKV_W),
			  tensor(p, L, ZN_GPT2_QKV_B), B, T, C, 3 * C);
	/* fused (FlashAttention-2): GPT-2's qkv [B,T,3C] is KV = NH heads of C/NH; packed
	 * documents (pos) keep attention inside each document */
	if (pos)
		k->flash_attention_doc_forward(st, a.atty, a.lse, a.qkv, pos, B, T, NH, NH,
					       C / NH, 0);
	else
		k->flash_attention_forward(st, a.atty, a.lse, a.qkv, B, T, NH, NH, C / NH, 0);
	k->matmul_forward(st, branch, a.atty, tensor(p, L, ZN_GPT2_ATTPROJ_W),
			  tensor(p, L, ZN_GPT2_ATTPROJ_B), B, T, C, C);
	k->residual_forward(st, a.res2, x_in, branch, s.btc);
	k->layernorm_forward(st, a.ln2, a.ln2_mean, a.ln2_rstd, a.res2,
			     tensor(p, L, ZN_GPT2_LN2_W), tensor(p, L, ZN_GPT2_LN2_B), B, T, C);
	k->matmul_forward(st, a.fch, a.ln2, tensor(p, L, ZN_GPT2_FC_W), tensor(p, L, ZN_GPT2_FC_B),
			  B, T, C, 4 * C);
	k->gelu_forward(st, a.fch_gelu, a.fch, 4 * s.btc);
	k->matmul_forward(st, branch, a.fch_gelu, tensor(p, L, ZN_GPT2_FCPROJ_W),
			  tensor(p, L, ZN_GPT2_FCPROJ_B), B, T, 4 * C, C);
	k->residual_forward(st, x_out, a.res2, branch, s.btc);
}

static void final_forward(const struct zn_kernel_table *k, void *st,
			  const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			  const float *p, const float *wte, float *acts, float *scratch,
			  const float *x_in, const int *targets, float *losses, int B, int T)
{
	const int C = cfg->d_model;
	struct sizes s = sizes_of(cfg, B, T);
	struct final_acts a;

	final_acts_carve(cfg, B, T, acts, &a);
	k->layernorm_forward(st, a.lnf, a.lnf_mean, a.lnf_rstd, x_in, tensor(p, L, ZN_GPT2_LNF_W),
			     tensor(p, L, ZN_GPT2_LNF_B), B, T, C);
	/* lm_head = wte (tied); its padded rows are zero, so padded logits are 0 and ignored.
	 * Chunked (kernels/lmhead_ce.h): the sizes are valid, so it cannot fail. */
	(void)zn_lmhead_ce_forward(k, st, losses, scratch, a.lnf, wte, targets, (int64_t)s.bt, C,
				   cfg->vocab, cfg->padded_vocab, chunk_of(cfg, L, B, T));
}

void zn_gpt2_layer_forward(const struct zn_kernel_table *k, void *stream,
			   const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			   const float *params, const float *tied_params, float *acts,
			   float *scratch, const float *x_in, float *x_out, const int *tokens,
			   const int *targets, float *losses, int B, int T)
{
	zn_gpt2_layer_forward_pos(k, stream, cfg, L, params, tied_params, acts, scratch, x_in,
				  x_out, tokens, NULL, targets, losses, B, T);
}

void zn_gpt2_layer_forward_pos(const struct zn_kernel_table *k, void *stream,
			       const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			       const float *params, const float *tied_params, float *acts,
			       float *scratch, const float *x_in, float *x_out,
			       const int *tokens, const int *pos, const int *targets,
			       float *losses, int B, int T)
{
	assert(B > 0 && T > 0 && T <= cfg->seq);
	switch (L->kind) {
	case ZN_GPT2_LAYER_EMBED:
		if (pos)
			k->encoder_pos_forward(stream, x_out, tokens, pos,
					       tensor(params, L, ZN_GPT2_WTE),
					       tensor(params, L, ZN_GPT2_WPE), B, T, cfg->d_model);
		else
			k->encoder_forward(stream, x_out, tokens, tensor(params, L, ZN_GPT2_WTE),
					   tensor(params, L, ZN_GPT2_WPE), B, T, cfg->d_model);
		break;
	case ZN_GPT2_LAYER_BLOCK:
		block_forward(k, stream, cfg, L, params, acts, scratch, x_in, x_out, pos, B, T);
		break;
	case ZN_GPT2_LAYER_FINAL:
		assert(tied_params && targets && losses);
		final_forward(k, stream, cfg, L, params, tied_params /* layer 0: wte first */,
			      acts, scratch, x_in, targets, losses, B, T);
		break;
	}
}

/* ---- backward ------------------------------------------------------------------------ */

static void block_backward(const struct zn_kernel_table *k, void *st,
			   const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			   const float *p, float *g, float *acts, float *scratch,
			   const float *x_in, const float *dx_out, float *dx_in, const int *pos,
			   int B, int T)
{
	const int C = cfg->d_model, NH = cfg->heads;
	struct sizes s = sizes_of(cfg, B, T);
	struct block_acts a;
	struct block_grads d;
	float *dres2;

	block_acts_carve(cfg, B, T, acts, &a);
	block_grads_carve(cfg, B, T, scratch, &d);
	/* x_out = res2 + mlp: the MLP branch's output gradient is dx_out itself */
	k->matmul_backward(st, d.dfch_gelu, tensor_mut(g, L, ZN_GPT2_FCPROJ_W),
			   tensor_mut(g, L, ZN_GPT2_FCPROJ_B), dx_out, a.fch_gelu,
			   tensor(p, L, ZN_GPT2_FCPROJ_W), B, T, 4 * C, C);
	k->gelu_backward(st, d.dfch, a.fch, d.dfch_gelu, 4 * s.btc);
	k->matmul_backward(st, d.dln2, tensor_mut(g, L, ZN_GPT2_FC_W),
			   tensor_mut(g, L, ZN_GPT2_FC_B), d.dfch, a.ln2,
			   tensor(p, L, ZN_GPT2_FC_W), B, T, C, 4 * C);
	k->layernorm_backward(st, d.dres2_ln, tensor_mut(g, L, ZN_GPT2_LN2_W),
			      tensor_mut(g, L, ZN_GPT2_LN2_B), d.dln2, a.res2,
			      tensor(p, L, ZN_GPT2_LN2_W), a.ln2_mean, a.ln2_rstd, B, T, C);
	/* d(res2) = dx_out (skip path) + ln_2's part; written over dln2, which is consumed */
	dres2 = d.dln2;
	k->residual_forward(st, dres2, dx_out, d.dres2_ln, s.btc);
	k->matmul_backward(st, d.datty, tensor_mut(g, L, ZN_GPT2_ATTPROJ_W),
			   tensor_mut(g, L, ZN_GPT2_ATTPROJ_B), dres2, a.atty,
			   tensor(p, L, ZN_GPT2_ATTPROJ_W), B, T, C, C);
	if (pos)
		k->flash_attention_doc_backward(st, d.dqkv, d.drow, d.datty, a.qkv, a.atty, a.lse,
						pos, B, T, NH, NH, C / NH, 0);
	else
		k->flash_attention_backward(st, d.dqkv, d.drow, d.datty, a.qkv, a.atty, a.lse, B,
					    T, NH, NH, C / NH, 0);
	k->matmul_backward(st, d.dln1, tensor_mut(g, L, ZN_GPT2_QKV_W),
			   tensor_mut(g, L, ZN_GPT2_QKV_B), d.dqkv, a.ln1,
			   tensor(p, L, ZN_GPT2_QKV_W), B, T, C, 3 * C);
	k->layernorm_backward(st, d.dx_ln, tensor_mut(g, L, ZN_GPT2_LN1_W),
			      tensor_mut(g, L, ZN_GPT2_LN1_B), d.dln1, x_in,
			      tensor(p, L, ZN_GPT2_LN1_W), a.ln1_mean, a.ln1_rstd, B, T, C);
	/* dx_in is written, not accumulated: skip path + ln_1's part */
	k->residual_forward(st, dx_in, dres2, d.dx_ln, s.btc);
}

static void final_backward(const struct zn_kernel_table *k, void *st,
			   const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			   const float *p, const float *wte, float *g, float *dwte, float *acts,
			   float *scratch, const float *x_in, float *dx_in, const int *targets,
			   float dloss_scale, int B, int T)
{
	const int C = cfg->d_model, V = cfg->vocab, Vp = cfg->padded_vocab;
	struct sizes s = sizes_of(cfg, B, T);
	struct final_acts a;
	float *work = scratch;
	float *dlnf = scratch + ce_work_of(cfg, L, B, T); /* zero on entry: accumulated */
	float *dx_ln = dlnf + s.btc;
	const float *zero = dx_ln + s.btc; /* stays zero: lets residual_forward copy */

	final_acts_carve(cfg, B, T, acts, &a);
	/* recomputes each chunk's logits: no [BT, Vp] buffer */
	(void)zn_lmhead_ce_backward(k, st, dlnf, dwte, work, a.lnf, wte, targets, dloss_scale,
				    (int64_t)s.bt, C, V, Vp, chunk_of(cfg, L, B, T));
	k->layernorm_backward(st, dx_ln, tensor_mut(g, L, ZN_GPT2_LNF_W),
			      tensor_mut(g, L, ZN_GPT2_LNF_B), dlnf, x_in,
			      tensor(p, L, ZN_GPT2_LNF_W), a.lnf_mean, a.lnf_rstd, B, T, C);
	/* the table has no copy: dx_in = dx_ln + 0 overwrites dx_in */
	k->residual_forward(st, dx_in, dx_ln, zero, s.btc);
}

void zn_gpt2_layer_backward(const struct zn_kernel_table *k, void *stream,
			    const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			    const float *params, const float *tied_params, float *grads,
			    float *tied_grads, const float *acts, float *scratch,
			    const float *x_in, const float *dx_out, float *dx_in,
			    const int *tokens, const int *targets, float dloss_scale, int B,
			    int T)
{
	zn_gpt2_layer_backward_pos(k, stream, cfg, L, params, tied_params, grads, tied_grads,
				   acts, scratch, x_in, dx_out, dx_in, tokens, NULL, targets,
				   dloss_scale, B, T);
}

void zn_gpt2_layer_backward_pos(const struct zn_kernel_table *k, void *stream,
				const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
				const float *params, const float *tied_params, float *grads,
				float *tied_grads, const float *acts, float *scratch,
				const float *x_in, const float *dx_out, float *dx_in,
				const int *tokens, const int *pos, const int *targets,
				float dloss_scale, int B, int T)
{
	/* acts are only read; the carving helpers take a mutable base for reuse */
	float *acts_rw = (float *)acts;

	assert(B > 0 && T > 0 && T <= cfg->seq);
	switch (L->kind) {
	case ZN_GPT2_LAYER_EMBED:
		if (pos)
			k->encoder_pos_backward(stream, tensor_mut(grads, L, ZN_GPT2_WTE),
						tensor_mut(grads, L, ZN_GPT2_WPE), dx_out, tokens,
						pos, B, T, cfg->d_model);
		else
			k->encoder_backward(stream, tensor_mut(grads, L, ZN_GPT2_WTE),
					    tensor_mut(grads, L, ZN_GPT2_WPE), dx_out, tokens, B,
					    T, cfg->d_model);
		break;
	case ZN_GPT2_LAYER_BLOCK:
		block_backward(k, stream, cfg, L, params, grads, acts_rw, scratch, x_in, dx_out,
			       dx_in, pos, B, T);
		break;
	case ZN_GPT2_LAYER_FINAL:
		assert(tied_params && tied_grads && targets);
		/* wte is tensor 0 of layer 0: its offset is 0 in both params and grads */
		final_backward(k, stream, cfg, L, params, tied_params, grads, tied_grads, acts_rw,
			       scratch, x_in, dx_in, targets, dloss_scale, B, T);
		break;
	}
}
