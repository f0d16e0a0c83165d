/* Llama-family layers in bf16 compute (llama.h, docs/kernels.md "bf16 compute"): the op
 * sequence of llama_layer.c with the GEMMs on bf16 inputs (the stored bf16 weights read
 * directly, activations cast to bf16) and fp32 accumulation. RMSNorm (inputs, statistics,
 * outputs before their cast), RoPE, the attention (fused, fp32), SwiGLU, residual sums,
 * the loss and every gradient stay fp32; each GEMM's output gradient is rounded to bf16
 * for its two backward GEMMs, by the op producing it (the *_bf16out backward slots)
 * except the block's incoming dx_out, cast here. 1-D tensors (norm weights, biases) are cast to fp32 into a
 * small region of scratch at the start of each call. */
#include <assert.h>
#include <stddef.h>

#include "lmhead_ce.h"
#include "model/llama/llama.h"

struct sizes {
	int H, I, NH, KV, D, Q, S, V, chunk;
	uint64_t bt, bth, bnt, ce_work, small;
};

/* floats holding n bf16 values (rounded up: the next buffer stays 4-byte aligned) */
static uint64_t half(uint64_t n)
{
	return (n + 1) / 2;
}

static uint64_t max3(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t m = a > b ? a : b;

	return m > c ? m : c;
}

static struct sizes sizes_of(const struct zn_llama_config *c, const struct zn_layer_desc *L,
			     int B, int T)
{
	struct sizes s;

	s.H = c->hidden, s.I = c->intermediate, s.NH = c->heads, s.KV = c->kv_heads;
	s.D = c->head_dim, s.V = c->vocab;
	s.Q = s.NH * s.D;
	s.S = (s.NH + 2 * s.KV) * s.D;
	s.bt = (uint64_t)B * (uint64_t)T;
	s.bth = s.bt * (uint64_t)s.H;
	s.bnt = (uint64_t)B * (uint64_t)s.NH * (uint64_t)T;
	s.chunk = zn_llama_ce_chunk(s.V, s.bt, L->work_bytes);
	s.ce_work = zn_lmhead_ce_work_count(s.chunk, s.V);
	s.small = 0;
	for (int t = 0; t < L->tensor_count; t++)
		if (L->tensors[t].ndim == 1)
			s.small += L->tensors[t].numel;
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

/* Saved activations of a block: the GEMM inputs h1, atty16, h2, m as bf16; qkv (after
 * RoPE), atty, lse for the attention backward, res2 for the second norm's, gu for SwiGLU's
 * in fp32; qkv16 (qkv's bf16 copy, which RoPE writes: the attention's tile source) first,
 * where the activations' own alignment makes it 16-byte aligned for cp.async. */
struct block_acts {
	float *qkv16, *h1, *rstd1, *qkv, *atty, *atty16, *lse, *res2, *h2, *rstd2, *gu, *m;
	float *qkv_raw, *qk_rstd; /* qk_norm: the projection before the norms, their rstd */
};

static uint64_t block_acts_carve(const struct sizes *s, bool qk_norm, float *acts,
				 struct block_acts *a)
{
	float **const bufs[] = { &a->qkv16, &a->h1, &a->rstd1, &a->qkv, &a->atty, &a->atty16,
				 &a->lse, &a->res2, &a->h2, &a->rstd2, &a->gu, &a->m, &a->qkv_raw,
				 &a->qk_rstd };
	const uint64_t numel[] = { half(s->bt * (uint64_t)s->S), half(s->bth), s->bt,
				   s->bt * (uint64_t)s->S, s->bt * (uint64_t)s->Q,
				   half(s->bt * (uint64_t)s->Q), s->bnt, s->bth, half(s->bth),
				   s->bt, s->bt * 2 * (uint64_t)s->I,
				   half(s->bt * (uint64_t)s->I),
				   qk_norm ? s->bt * (uint64_t)s->S : 0,
				   qk_norm ? s->bt * (uint64_t)(s->NH + s->KV) : 0 };

	return carve(acts, bufs, numel, 14);
}

/* Block scratch, forward: branch [BTH], tmp (a norm or SwiGLU output before its cast),
 * small. Backward: llama_layer.c's fp32 gradients (zero on entry), dout16 (the current
 * GEMM's output gradient in bf16), small. */
struct block_fwd {
	float *branch, *tmp, *small;
};

struct block_bwd {
	float *dm, *dgu, *dh2, *dres2_n, *datty, *dqkv, *drow, *dh1, *dx_n, *dout16, *small;
};

static uint64_t block_fwd_carve(const struct sizes *s, float *scratch, struct block_fwd *f)
{
	float **const bufs[] = { &f->branch, &f->tmp, &f->small };
	const uint64_t numel[] = { s->bth, s->bth > s->bt * (uint64_t)s->I ?
						   s->bth : s->bt * (uint64_t)s->I, s->small };

	return carve(scratch, bufs, numel, 3);
}

static uint64_t block_bwd_carve(const struct sizes *s, float *scratch, struct block_bwd *g)
{
	float **const bufs[] = { &g->dm, &g->dgu, &g->dh2, &g->dres2_n, &g->datty, &g->dqkv,
				 &g->drow, &g->dh1, &g->dx_n, &g->dout16, &g->small };
	const uint64_t numel[] = { s->bt * (uint64_t)s->I, s->bt * 2 * (uint64_t)s->I, s->bth,
				   s->bth, s->bt * (uint64_t)s->Q, s->bt * (uint64_t)s->S, s->bnt,
				   s->bth, s->bth,
				   half(max3(s->bth, s->bt * 2 * (uint64_t)s->I,
					     s->bt * (uint64_t)s->S)),
				   s->small };

	return carve(scratch, bufs, numel, 11);
}

/* Final layer: acts hn16, rstd; scratch the lm_head + CE chunks' work, dhn (the forward's
 * fp32 hn first), dx_n, a zero [BTH], small. */
struct final_acts {
	float *hn, *rstd;
};

struct final_scr {
	float *work, *dhn, *dx_n, *zero, *small;
};

static uint64_t final_acts_carve(const struct sizes *s, float *acts, struct final_acts *a)
{
	float **const bufs[] = { &a->hn, &a->rstd };
	const uint64_t numel[] = { half(s->bth), s->bt };

	return carve(acts, bufs, numel, 2);
}

static uint64_t final_scr_carve(const struct sizes *s, float *scratch, struct final_scr *f)
{
	float **const bufs[] = { &f->work, &f->dhn, &f->dx_n, &f->zero, &f->small };
	const uint64_t numel[] = { s->ce_work, s->bth, s->bth, s->bth, s->small };

	return carve(scratch, bufs, numel, 5);
}

uint64_t zn_llama_act_numel_bf16(const struct zn_llama_config *cfg,
				 const struct zn_layer_desc *L, int B, int T)
{
	struct sizes s = sizes_of(cfg, L, B, T);
	struct block_acts ba;
	struct final_acts fa;

	if (L->kind == ZN_LLAMA_LAYER_BLOCK)
		return block_acts_carve(&s, cfg->qk_norm, NULL, &ba);
	if (L->kind == ZN_LLAMA_LAYER_FINAL)
		return final_acts_carve(&s, NULL, &fa);
	return 0;
}

uint64_t zn_llama_scratch_numel_bf16(const struct zn_llama_config *cfg,
				     const struct zn_layer_desc *L, int B, int T)
{
	struct sizes s = sizes_of(cfg, L, B, T);
	struct block_fwd f;
	struct block_bwd g;
	struct final_scr fs;
	uint64_t fwd, bwd;

	if (L->kind == ZN_LLAMA_LAYER_BLOCK) {
		fwd = block_fwd_carve(&s, NULL, &f);
		bwd = block_bwd_carve(&s, NULL, &g);
		return fwd > bwd ? fwd : bwd;
	}
	if (L->kind == ZN_LLAMA_LAYER_FINAL)
		return final_scr_carve(&s, NULL, &fs);
	return 0;
}

/* A block's tensor indices (llama.h's order; q,k,v and their biases, gate,up back to back) */
struct block_t {
	int ln1, wqkv, bqkv, qn, kn, wo, bo, ln2, wgu, wd; /* bqkv, qn, kn, bo: -1 when absent */
};

static struct block_t block_t_of(const struct zn_llama_config *c)
{
	struct block_t w;
	int t = 0;

	w.ln1 = t++;
	w.wqkv = t;
	t += 3;
	w.bqkv = c->qkv_bias ? t : -1;
	t += c->qkv_bias ? 3 : 0;
	w.qn = c->qk_norm ? t++ : -1;
	w.kn = c->qk_norm ? t++ : -1;
	w.wo = t++;
	w.bo = c->o_bias ? t++ : -1;
	w.ln2 = t++;
	w.wgu = t;
	t += 2;
	w.wd = t;
	return w;
}

/* bf16 views of every tensor, fp32 copies of the 1-D ones (cast into `small`, in tensor
 * order: consecutive 1-D tensors such as the q, k, v biases stay back to back) */
struct wv {
	const uint16_t *b[ZN_LLAMA_MAX_TENSORS];
	const float *f[ZN_LLAMA_MAX_TENSORS];
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

static const float *fopt(const struct wv *w, int t)
{
	return t >= 0 ? w->f[t] : NULL;
}

static uint16_t *u16(float *p)
{
	return (uint16_t *)p;
}

static const uint16_t *cu16(const float *p)
{
	return (const uint16_t *)p;
}

static void block_forward(const struct zn_kernel_table *k, void *st,
			  const struct zn_llama_config *c, const struct zn_layer_io *io)
{
	struct sizes s = sizes_of(c, io->L, io->B, io->T);
	struct block_t t = block_t_of(c);
	const int B = io->B, T = io->T;
	struct block_acts a;
	struct block_fwd f;
	struct wv w;

	block_acts_carve(&s, c->qk_norm, io->acts, &a);
	block_fwd_carve(&s, io->scratch, &f);
	views(k, st, io->L, io->params16, f.small, &w);
	/* the producers of GEMM inputs write bf16 directly (the fp32 op + cast's bits) */
	k->rmsnorm_forward_bf16out(st, u16(a.h1), a.rstd1, io->x_in, w.f[t.ln1], c->eps, B, T,
				   s.H);
	k->matmul_forward_bf16(st, c->qk_norm ? a.qkv_raw : a.qkv, cu16(a.h1), w.b[t.wqkv],
			       fopt(&w, t.bqkv), B, T, s.H, s.S);
	if (c->qk_norm) /* Qwen3, fp32 as every norm here */
		k->qk_rmsnorm_forward(st, a.qkv, a.qk_rstd, a.qkv_raw, w.f[t.qn], w.f[t.kn],
				      c->eps, B, T, s.NH, s.KV, s.D);
	/* RoPE also writes qkv's bf16 copy, the attention's tile source */
	k->rope_forward_bf16out(st, a.qkv, u16(a.qkv16), c->inv_freq, io->pos, B, T, s.NH, s.KV,
				s.D);
	/* tensor cores on CUDA (bf16 products; the CPU table: the fp32 op, same bits as
	 * llama_layer.c); pos NULL: one sequence per row, else packed documents */
	k->flash_attention_doc_tc_forward_qkv16(st, a.atty, u16(a.atty16), a.lse, a.qkv,
						cu16(a.qkv16), io->pos, B, T, s.NH, s.KV, s.D,
						c->window);
	k->matmul_forward_bf16(st, f.branch, cu16(a.atty16), w.b[t.wo], fopt(&w, t.bo), B, T,
			       s.Q, s.H);
	k->residual_forward(st, a.res2, io->x_in, f.branch, s.bth);
	k->rmsnorm_forward_bf16out(st, u16(a.h2), a.rstd2, a.res2, w.f[t.ln2], c->eps, B, T,
				   s.H);
	k->matmul_forward_bf16(st, a.gu, cu16(a.h2), w.b[t.wgu], NULL, B, T, s.H, 2 * s.I);
	k->swiglu_forward_bf16out(st, u16(a.m), a.gu, B, T, s.I);
	k->matmul_forward_bf16(st, f.branch, cu16(a.m), w.b[t.wd], NULL, B, T, s.I, s.H);
	k->residual_forward(st, io->x_out, a.res2, f.branch, s.bth);
}

/* the bf16 GEMM backward of one linear layer: d16 holds dout rounded to bf16 (written by
 * dout's producer) */
static void linear_bwd16(const struct zn_kernel_table *k, void *st, const struct wv *w,
			 const struct zn_layer_io *io, int tw, int tb, float *dinp,
			 const float *dout, const float *d16, const float *inp16, int C, int OC)
{
	const struct zn_layer_desc *L = io->L;

	k->matmul_backward_bf16(st, dinp, io->grads + L->tensors[tw].offset,
				tb >= 0 ? io->grads + L->tensors[tb].offset : NULL, cu16(d16),
				tb >= 0 ? dout : NULL, cu16(inp16), w->b[tw], io->B, io->T, C,
				OC);
}

/* the same with dout rounded to bf16 into d16 first: the block's dx_out, which the next
 * layer's backward wrote in fp32 */
static void linear_bwd(const struct zn_kernel_table *k, void *st, const struct wv *w,
		       const struct zn_layer_io *io, int tw, int tb, float *dinp,
		       const float *dout, float *d16, const float *inp16, int C, int OC)
{
	k->cast_f32_to_bf16(st, u16(d16), dout, (size_t)io->B * io->T * OC);
	linear_bwd16(k, st, w, io, tw, tb, dinp, dout, d16, inp16, C, OC);
}

static void block_backward(const struct zn_kernel_table *k, void *st,
			   const struct zn_llama_config *c, const struct zn_layer_io *io)
{
	struct sizes s = sizes_of(c, io->L, io->B, io->T);
	struct block_t t = block_t_of(c);
	const int B = io->B, T = io->T;
	float *g = io->grads, *dres2;
	struct block_acts a;
	struct block_bwd d;
	struct wv w;

	block_acts_carve(&s, c->qk_norm, io->acts, &a);
	block_bwd_carve(&s, io->scratch, &d);
	views(k, st, io->L, io->params16, d.small, &w);
	linear_bwd(k, st, &w, io, t.wd, -1, d.dm, io->dx_out, d.dout16, a.m, s.I, s.H);
	/* the producers of the other GEMMs' output gradients write their bf16 copy too */
	k->swiglu_backward_bf16out(st, d.dgu, u16(d.dout16), d.dm, a.gu, B, T, s.I);
	linear_bwd16(k, st, &w, io, t.wgu, -1, d.dh2, d.dgu, d.dout16, a.h2, s.H, 2 * s.I);
	k->rmsnorm_backward(st, d.dres2_n, g + io->L->tensors[t.ln2].offset, d.dh2, a.res2,
			    w.f[t.ln2], a.rstd2, B, T, s.H);
	dres2 = d.dh2; /* consumed: d(res2) = dx_out + the norm's part */
	k->residual_forward_bf16out(st, dres2, u16(d.dout16), io->dx_out, d.dres2_n, s.bth);
	linear_bwd16(k, st, &w, io, t.wo, t.bo, d.datty, dres2, d.dout16, a.atty16, s.Q, s.H);
	k->flash_attention_doc_tc_backward_bf16out(st, d.dqkv, NULL, d.drow, d.datty, a.qkv,
						   cu16(a.qkv16), a.atty, a.lse, io->pos, B, T,
						   s.NH, s.KV, s.D, c->window);
	if (c->qk_norm) {
		/* Qwen3: the gradient of qkv before the norms is the GEMM's, cast after them */
		k->rope_backward(st, d.dqkv, c->inv_freq, io->pos, B, T, s.NH, s.KV, s.D);
		k->qk_rmsnorm_backward(st, d.dqkv, g + io->L->tensors[t.qn].offset,
				       g + io->L->tensors[t.kn].offset, a.qkv_raw, w.f[t.qn],
				       w.f[t.kn], a.qk_rstd, B, T, s.NH, s.KV, s.D);
		linear_bwd(k, st, &w, io, t.wqkv, t.bqkv, d.dh1, d.dqkv, d.dout16, a.h1, s.H, s.S);
	} else {
		k->rope_backward_bf16out(st, d.dqkv, u16(d.dout16), c->inv_freq, io->pos, B, T,
					 s.NH, s.KV, s.D);
		linear_bwd16(k, st, &w, io, t.wqkv, t.bqkv, d.dh1, d.dqkv, d.dout16, a.h1, s.H,
			     s.S);
	}
	k->rmsnorm_backward(st, d.dx_n, g + io->L->tensors[t.ln1].offset, d.dh1, io->x_in,
			    w.f[t.ln1], a.rstd1, B, T, s.H);
	k->residual_forward(st, io->dx_in, dres2, d.dx_n, s.bth);
}

/* lm_head: layer 0's embed_tokens (offset 0) when tied, else the final layer's tensor 1 */
static const uint16_t *lm_head16(const struct zn_layer_io *io)
{
	return io->L->tied_layer >= 0 ? io->tied_params16 :
					io->params16 + io->L->tensors[1].offset;
}

static void final_forward(const struct zn_kernel_table *k, void *st,
			  const struct zn_llama_config *c, const struct zn_layer_io *io)
{
	struct sizes s = sizes_of(c, io->L, io->B, io->T);
	struct final_acts a;
	struct final_scr f;
	struct wv w;

	final_acts_carve(&s, io->acts, &a);
	final_scr_carve(&s, io->scratch, &f);
	views(k, st, io->L, io->params16, f.small, &w);
	k->rmsnorm_forward_bf16out(st, u16(a.hn), a.rstd, io->x_in, w.f[0], c->eps, io->B,
				   io->T, s.H);
	(void)zn_lmhead_ce_forward_bf16(k, st, io->losses, f.work, cu16(a.hn), lm_head16(io),
					io->targets, (int64_t)s.bt, s.H, s.V, s.V, s.chunk);
}

static void final_backward(const struct zn_kernel_table *k, void *st,
			   const struct zn_llama_config *c, const struct zn_layer_io *io)
{
	struct sizes s = sizes_of(c, io->L, io->B, io->T);
	struct final_acts a;
	struct final_scr f;
	struct wv w;
	float *dlm = io->L->tied_layer >= 0 ? io->tied_grads :
					      io->grads + io->L->tensors[1].offset;

	final_acts_carve(&s, io->acts, &a);
	final_scr_carve(&s, io->scratch, &f);
	views(k, st, io->L, io->params16, f.small, &w);
	(void)zn_lmhead_ce_backward_bf16(k, st, f.dhn, dlm, f.work, cu16(a.hn), lm_head16(io),
					 io->targets, io->dloss_scale, (int64_t)s.bt, s.H, s.V,
					 s.V, s.chunk);
	k->rmsnorm_backward(st, f.dx_n, io->grads, f.dhn, io->x_in, w.f[0], a.rstd, io->B,
			    io->T, s.H);
	/* f.zero stays zero: residual_forward copies */
	k->residual_forward(st, io->dx_in, f.dx_n, f.zero, s.bth);
}

void zn_llama_layer_forward_bf16(const struct zn_kernel_table *k, void *stream,
				 const struct zn_llama_config *cfg, const struct zn_layer_io *io)
{
	assert(io->B > 0 && io->T > 0 && io->T <= cfg->seq && io->params16);
	switch (io->L->kind) {
	case ZN_LLAMA_LAYER_EMBED:
		k->embedding_forward_bf16(stream, io->x_out, io->tokens, io->params16, io->B,
					  io->T, cfg->hidden);
		break;
	case ZN_LLAMA_LAYER_BLOCK:
		block_forward(k, stream, cfg, io);
		break;
	case ZN_LLAMA_LAYER_FINAL:
		assert(io->targets && io->losses && (io->L->tied_layer < 0 || io->tied_params16));
		final_forward(k, stream, cfg, io);
		break;
	}
}

void zn_llama_layer_backward_bf16(const struct zn_kernel_table *k, void *stream,
				  const struct zn_llama_config *cfg,
				  const struct zn_layer_io *io)
{
	assert(io->B > 0 && io->T > 0 && io->T <= cfg->seq && io->params16);
	switch (io->L->kind) {
	case ZN_LLAMA_LAYER_EMBED: /* reads no parameters */
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
