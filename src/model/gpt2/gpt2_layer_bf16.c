/* GPT-2 layers in bf16 compute (gpt2.h, docs/kernels.md "bf16 compute"): the op sequence
 * of gpt2_layer.c with the GEMMs on bf16 inputs (the stored bf16 weights, activations cast
 * to bf16) and fp32 accumulation. Layernorm, attention (fused, fp32), GELU, residuals, the
 * loss and every gradient stay fp32; each GEMM's output gradient is rounded to bf16 for
 * its two backward GEMMs (dbias from the fp32 gradient), by the op producing it (the
 * *_bf16out backward slots) except the block's incoming dx_out, cast here. 1-D tensors (layernorm weights,
 * biases) are cast to fp32 into a small region of scratch at the start of each call. */
#include <assert.h>
#include <stddef.h>

#include "lmhead_ce.h"
#include "model/gpt2/gpt2.h"

struct sizes {
	uint64_t bt, btc, bnt, ce_work, small;
	int chunk;
};

/* floats holding n bf16 values (rounded up: the next buffer stays 4-byte aligned) */
static uint64_t half(uint64_t n)
{
	return (n + 1) / 2;
}

static uint64_t small_numel(const struct zn_layer_desc *L)
{
	uint64_t n = 0;

	for (int t = 0; t < L->tensor_count; t++)
		if (L->tensors[t].ndim == 1)
			n += L->tensors[t].numel;
	return n;
}

static struct sizes sizes_of(const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			     int B, int T)
{
	struct sizes s;

	s.bt = (uint64_t)B * (uint64_t)T;
	s.btc = s.bt * (uint64_t)cfg->d_model;
	s.bnt = (uint64_t)B * (uint64_t)cfg->heads * (uint64_t)T;
	s.chunk = zn_gpt2_ce_chunk(cfg, s.bt, L->work_bytes);
	s.ce_work = zn_lmhead_ce_work_count(s.chunk, cfg->padded_vocab);
	s.small = small_numel(L);
	return s;
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

/* Saved activations of a block: the GEMM inputs ln1, atty16, ln2, fch_gelu as bf16; qkv16
 * (qkv's bf16 copy, the attention's tile source) first, where the activations' own
 * alignment makes it 16-byte aligned for the attention's cp.async copies */
struct block_acts {
	float *qkv16, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *atty16, *lse, *res2;
	float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu;
};

static uint64_t block_acts_carve(const struct sizes *s, float *acts, struct block_acts *a)
{
	float **const bufs[] = { &a->qkv16, &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv,
				 &a->atty, &a->atty16, &a->lse, &a->res2, &a->ln2,
				 &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu };
	const uint64_t numel[] = { half(3 * s->btc), half(s->btc), s->bt, s->bt, 3 * s->btc,
				   s->btc, half(s->btc), s->bnt, s->btc, half(s->btc), s->bt,
				   s->bt, 4 * s->btc, half(4 * s->btc) };

	return carve(acts, bufs, numel, 14);
}

/* Block scratch, forward: branch [BTC], tmp [4BTC] (fp32 results before their cast),
 * small. Backward: the fp32 gradients of gpt2_layer.c (zero on entry), dout16 (the
 * current GEMM's output gradient in bf16, up to [4BTC]), small. */
struct block_fwd {
	float *branch, *tmp, *small;
};

struct block_bwd {
	float *dfch_gelu, *dfch, *dln2, *dres2_ln, *datty, *dqkv, *drow, *dln1, *dx_ln;
	float *dout16, *small;
};

static uint64_t block_fwd_carve(const struct sizes *s, float *scratch, struct block_fwd *f)
{
	float **const bufs[] = { &f->branch, &f->tmp, &f->small };
	const uint64_t numel[] = { s->btc, 4 * s->btc, s->small };

	return carve(scratch, bufs, numel, 3);
}

static uint64_t block_bwd_carve(const struct sizes *s, float *scratch, struct block_bwd *g)
{
	float **const bufs[] = { &g->dfch_gelu, &g->dfch, &g->dln2, &g->dres2_ln, &g->datty,
				 &g->dqkv, &g->drow, &g->dln1, &g->dx_ln, &g->dout16,
				 &g->small };
	const uint64_t numel[] = { 4 * s->btc, 4 * s->btc, s->btc, s->btc, s->btc,
				   3 * s->btc, s->bnt, s->btc, s->btc, half(4 * s->btc),
				   s->small };

	return carve(scratch, bufs, numel, 11);
}

/* Final layer: acts lnf16, mean, rstd; scratch ce work, dlnf (the forward's fp32 lnf
 * first), dx_ln, a zero [BTC], small. */
struct final_acts {
	float *lnf, *lnf_mean, *lnf_rstd;
};

struct final_scr {
	float *work, *dlnf, *dx_ln, *zero, *small;
};

static uint64_t final_acts_carve(const struct sizes *s, float *acts, struct final_acts *a)
{
	float **const bufs[] = { &a->lnf, &a->lnf_mean, &a->lnf_rstd };
	const uint64_t numel[] = { half(s->btc), s->bt, s->bt };

	return carve(acts, bufs, numel, 3);
}

static uint64_t final_scr_carve(const struct sizes *s, float *scratch, struct final_scr *f)
{
	float **const bufs[] = { &f->work, &f->dlnf, &f->dx_ln, &f->zero, &f->small };
	const uint64_t numel[] = { s->ce_work, s->btc, s->btc, s->btc, s->small };

	return carve(scratch, bufs, numel, 5);
}

uint64_t zn_gpt2_act_numel_bf16(const struct zn_gpt2_config *cfg,
				const struct zn_layer_desc *L, int B, int T)
{
	struct sizes s = sizes_of(cfg, L, B, T);
	struct block_acts ba;
	struct final_acts fa;

	switch (L->kind) {
	case ZN_GPT2_LAYER_BLOCK:
		return block_acts_carve(&s, NULL, &ba);
	case ZN_GPT2_LAYER_FINAL:
		return final_acts_carve(&s, NULL, &fa);
	default:
		return 0;
	}
}

uint64_t zn_gpt2_scratch_numel_bf16(const struct zn_gpt2_config *cfg,
				    const struct zn_layer_desc *L, int B, int T)
{
	struct sizes s = sizes_of(cfg, L, B, T);
	struct block_fwd f;
	struct block_bwd g;
	struct final_scr fs;
	uint64_t fwd, bwd;

	switch (L->kind) {
	case ZN_GPT2_LAYER_BLOCK:
		fwd = block_fwd_carve(&s, NULL, &f);
		bwd = block_bwd_carve(&s, NULL, &g);
		return fwd > bwd ? fwd : bwd;
	case ZN_GPT2_LAYER_FINAL:
		return final_scr_carve(&s, NULL, &fs);
	default:
		return 0;
	}
}

/* The layer's tensors: bf16 views of every tensor, fp32 copies of the 1-D ones (cast
 * into `small`, in tensor order). */
struct wv {
	const uint16_t *b[ZN_GPT2_MAX_TENSORS]; /* a block's; embed and final have 2 */
	const float *f[ZN_GPT2_MAX_TENSORS];
};

static void views(const struct zn_kernel_table *k, void *st, const struct zn_layer_desc *L,
		  const uint16_t *p, float *small, struct wv *w)
{
	uint64_t off = 0;

	for (int t = 0; t < L->tensor_count; t++) {
		w->b[t] = p + L->tensors[t].offset;
		w->f[t] = NULL;
		if (L->tensors[t].ndim != 1)
			continue;
		k->cast_bf16_to_f32(st, small + off, w->b[t], L->tensors[t].numel);
		w->f[t] = small + off;
		off += L->tensors[t].numel;
	}
}

static uint16_t *u16(float *p)
{
	return (uint16_t *)p;
}

static const uint16_t *cu16(const float *p)
{
	return (const uint16_t *)p;
}

/* ---- forward ------------------------------------------------------------------------- */

static void block_forward(const struct zn_kernel_table *k, void *st,
			  const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			  const uint16_t *p, float *acts, float *scratch, const float *x_in,
			  float *x_out, const int *pos, int B, int T)
{
	const int C = cfg->d_model, NH = cfg->heads;
	struct sizes s = sizes_of(cfg, L, B, T);
	struct block_acts a;
	struct block_fwd f;
	struct wv w;

	block_acts_carve(&s, acts, &a);
	block_fwd_carve(&s, scratch, &f);
	views(k, st, L, p, f.small, &w);
	/* the producers of GEMM inputs write bf16 directly (the fp32 op + cast's bits) */
	k->layernorm_forward_bf16out(st, u16(a.ln1), a.ln1_mean, a.ln1_rstd, x_in,
				     w.f[ZN_GPT2_LN1_W], w.f[ZN_GPT2_LN1_B], B, T, C);
	k->matmul_forward_bf16(st, a.qkv, cu16(a.ln1), w.b[ZN_GPT2_QKV_W], w.f[ZN_GPT2_QKV_B],
			       B, T, C, 3 * C);
	/* the attention's q/k/v tiles in bf16 (a cast pass: cuBLAS writes one output type) */
	k->cast_f32_to_bf16(st, u16(a.qkv16), a.qkv, 3 * s.btc);
	/* tensor cores on CUDA (bf16 products; the CPU table: the fp32 op, same bits as
	 * gpt2_layer.c); pos NULL: one sequence per row, else packed documents */
	k->flash_attention_doc_tc_forward_qkv16(st, a.atty, u16(a.atty16), a.lse, a.qkv,
						cu16(a.qkv16), pos, B, T, NH, NH, C / NH, 0);
	k->matmul_forward_bf16(st, f.branch, cu16(a.atty16), w.b[ZN_GPT2_ATTPROJ_W],
			       w.f[ZN_GPT2_ATTPROJ_B], B, T, C, C);
	k->residual_forward(st, a.res2, x_in, f.branch, s.btc);
	k->layernorm_forward_bf16out(st, u16(a.ln2), a.ln2_mean, a.ln2_rstd, a.res2,
				     w.f[ZN_GPT2_LN2_W], w.f[ZN_GPT2_LN2_B], B, T, C);
	k->matmul_forward_bf16(st, a.fch, cu16(a.ln2), w.b[ZN_GPT2_FC_W], w.f[ZN_GPT2_FC_B], B,
			       T, C, 4 * C);
	k->gelu_forward_bf16out(st, u16(a.fch_gelu), a.fch, 4 * s.btc);
	k->matmul_forward_bf16(st, f.branch, cu16(a.fch_gelu), w.b[ZN_GPT2_FCPROJ_W],
			       w.f[ZN_GPT2_FCPROJ_B], B, T, 4 * C, C);
	k->residual_forward(st, x_out, a.res2, f.branch, s.btc);
}

void zn_gpt2_layer_forward_bf16(const struct zn_kernel_table *k, void *st,
				const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
				const uint16_t *params, const uint16_t *tied_params,
				float *acts, float *scratch, const float *x_in, float *x_out,
				const int *tokens, const int *pos, const int *targets,
				float *losses, int B, int T)
{
	const int C = cfg->d_model;
	struct sizes s = sizes_of(cfg, L, B, T);
	struct final_acts fa;
	struct final_scr fs;
	struct wv w;

	assert(B > 0 && T > 0 && T <= cfg->seq);
	switch (L->kind) {
	case ZN_GPT2_LAYER_EMBED:
		k->encoder_pos_forward_bf16(st, x_out, tokens, pos,
					    params + L->tensors[ZN_GPT2_WTE].offset,
					    params + L->tensors[ZN_GPT2_WPE].offset, B, T, C);
		break;
	case ZN_GPT2_LAYER_BLOCK:
		block_forward(k, st, cfg, L, params, acts, scratch, x_in, x_out, pos, B, T);
		break;
	case ZN_GPT2_LAYER_FINAL:
		assert(tied_params && targets && losses);
		final_acts_carve(&s, acts, &fa);
		final_scr_carve(&s, scratch, &fs);
		views(k, st, L, params, fs.small, &w);
		k->layernorm_forward_bf16out(st, u16(fa.lnf), fa.lnf_mean, fa.lnf_rstd, x_in,
					     w.f[ZN_GPT2_LNF_W], w.f[ZN_GPT2_LNF_B], B, T, C);
		/* lm_head = wte (tied, layer 0's tensor 0 at offset 0) */
		(void)zn_lmhead_ce_forward_bf16(k, st, losses, fs.work, cu16(fa.lnf), tied_params,
						targets, (int64_t)s.bt, C, cfg->vocab,
						cfg->padded_vocab, s.chunk);
		break;
	}
}

/* ---- backward ------------------------------------------------------------------------ */

/* the bf16 GEMM backward of one linear layer: d16 holds dout rounded to bf16 (written by
 * dout's producer) */
static void linear_bwd16(const struct zn_kernel_table *k, void *st, const struct wv *w,
			 const struct zn_layer_desc *L, float *g, int tw, int tb, float *dinp,
			 const float *dout, const float *d16, const float *inp16, int B, int T,
			 int C, int OC)
{
	k->matmul_backward_bf16(st, dinp, g + L->tensors[tw].offset, g + L->tensors[tb].offset,
				cu16(d16), dout, cu16(inp16), w->b[tw], B, T, C, OC);
}

/* the same with dout rounded to bf16 into d16 first: the block's dx_out, which the next
 * layer's backward wrote in fp32 */
static void linear_bwd(const struct zn_kernel_table *k, void *st, const struct wv *w,
		       const struct zn_layer_desc *L, float *g, int tw, int tb, float *dinp,
		       const float *dout, float *d16, const float *inp16, int B, int T, int C,
		       int OC)
{
	k->cast_f32_to_bf16(st, u16(d16), dout, (size_t)B * T * OC);
	linear_bwd16(k, st, w, L, g, tw, tb, dinp, dout, d16, inp16, B, T, C, OC);
}

static void block_backward(const struct zn_kernel_table *k, void *st,
			   const struct zn_gpt2_config *cfg, const struct zn_layer_desc *L,
			   const uint16_t *p, float *g, float *acts, float *scratch,
			   const float *x_in, const float *dx_out, float *dx_in, const int *pos,
			   int B, int T)
{
	const int C = cfg->d_model, NH = cfg->heads;
	struct sizes s = sizes_of(cfg, L, B, T);
	struct block_acts a;
	struct block_bwd d;
	struct wv w;
	float *dres2;

	block_acts_carve(&s, acts, &a);
	block_bwd_carve(&s, scratch, &d);
	views(k, st, L, p, d.small, &w);
	linear_bwd(k, st, &w, L, g, ZN_GPT2_FCPROJ_W, ZN_GPT2_FCPROJ_B, d.dfch_gelu, dx_out,
		   d.dout16, a.fch_gelu, B, T, 4 * C, C);
	/* the producers of the other GEMMs' output gradients write their bf16 copy too */
	k->gelu_backward_bf16out(st, d.dfch, u16(d.dout16), a.fch, d.dfch_gelu, 4 * s.btc);
	linear_bwd16(k, st, &w, L, g, ZN_GPT2_FC_W, ZN_GPT2_FC_B, d.dln2, d.dfch, d.dout16,
		     a.ln2, B, T, C, 4 * C);
	k->layernorm_backward(st, d.dres2_ln, g + L->tensors[ZN_GPT2_LN2_W].offset,
			      g + L->tensors[ZN_GPT2_LN2_B].offset, d.dln2, a.res2,
			      w.f[ZN_GPT2_LN2_W], a.ln2_mean, a.ln2_rstd, B, T, C);
	dres2 = d.dln2; /* consumed: d(res2) = dx_out + ln_2's part */
	k->residual_forward_bf16out(st, dres2, u16(d.dout16), dx_out, d.dres2_ln, s.btc);
	linear_bwd16(k, st, &w, L, g, ZN_GPT2_ATTPROJ_W, ZN_GPT2_ATTPROJ_B, d.datty, dres2,
		     d.dout16, a.atty16, B, T, C, C);
	k->flash_attention_doc_tc_backward_bf16out(st, d.dqkv, u16(d.dout16), d.drow, d.datty,
						   a.qkv, cu16(a.qkv16), a.atty, a.lse, pos, B,
						   T, NH, NH, C / NH, 0);
	linear_bwd16(k, st, &w, L, g, ZN_GPT2_QKV_W, ZN_GPT2_QKV_B, d.dln1, d.dqkv, d.dout16,
		     a.ln1, B, T, C, 3 * C);
	k->layernorm_backward(st, d.dx_ln, g + L->tensors[ZN_GPT2_LN1_W].offset,
			      g + L->tensors[ZN_GPT2_LN1_B].offset, d.dln1, x_in,
			      w.f[ZN_GPT2_LN1_W], a.ln1_mean, a.ln1_rstd, B, T, C);
	k->residual_forward(st, dx_in, dres2, d.dx_ln, s.btc);
}

void zn_gpt2_layer_backward_bf16(const struct zn_kernel_table *k, void *st,
				 const struct zn_gpt2_config *cfg,
				 const struct zn_layer_desc *L, const uint16_t *params,
				 const uint16_t *tied_params, float *grads, float *tied_grads,
				 const float *acts, float *scratch, const float *x_in,
				 const float *dx_out, float *dx_in, const int *tokens,
				 const int *pos, const int *targets, float dloss_scale, int B,
				 int T)
{
	const int C = cfg->d_model;
	float *acts_rw = (float *)acts; /* only read; the carving takes a mutable base */
	struct sizes s = sizes_of(cfg, L, B, T);
	struct final_acts fa;
	struct final_scr fs;
	struct wv w;

	assert(B > 0 && T > 0 && T <= cfg->seq);
	switch (L->kind) {
	case ZN_GPT2_LAYER_EMBED:
		/* the embedding backward reads no parameters */
		k->encoder_pos_backward(st, grads + L->tensors[ZN_GPT2_WTE].offset,
					grads + L->tensors[ZN_GPT2_WPE].offset, dx_out, tokens, pos,
					B, T, C);
		break;
	case ZN_GPT2_LAYER_BLOCK:
		block_backward(k, st, cfg, L, params, grads, acts_rw, scratch, x_in, dx_out,
			       dx_in, pos, B, T);
		break;
	case ZN_GPT2_LAYER_FINAL:
		assert(tied_params && tied_grads && targets);
		final_acts_carve(&s, acts_rw, &fa);
		final_scr_carve(&s, scratch, &fs);
		views(k, st, L, params, fs.small, &w);
		(void)zn_lmhead_ce_backward_bf16(k, st, fs.dlnf, tied_grads, fs.work,
						 cu16(fa.lnf), tied_params, targets, dloss_scale,
						 (int64_t)s.bt, C, cfg->vocab, cfg->padded_vocab,
						 s.chunk);
		k->layernorm_backward(st, fs.dx_ln, grads + L->tensors[ZN_GPT2_LNF_W].offset,
				      grads + L->tensors[ZN_GPT2_LNF_B].offset, fs.dlnf, x_in,
				      w.f[ZN_GPT2_LNF_W], fa.lnf_mean, fa.lnf_rstd, B, T, C);
		k->residual_forward(st, dx_in, fs.dx_ln, fs.zero, s.btc);
		break;
	}
}
