/* GPT-2 inference with a KV cache (model.h: struct zn_decode_io; zinc generate), batch 1,
 * the forward of gpt2_layer.c for T new tokens at positions pos0.. with each block's keys
 * and values kept in its cache [2, max_t, C] (kernels.h: kv_attention_forward). */
#include <assert.h>

#include "model/gpt2/gpt2.h"

struct dec {
	float *ln, *mean, *rstd, *qkv, *atty, *branch, *res2, *fch, *fch_gelu;
};

static uint64_t dec_carve(const struct zn_gpt2_config *c, int T, float *base, struct dec *d)
{
	const uint64_t tc = (uint64_t)T * (uint64_t)c->d_model, t = (uint64_t)T;
	float **const bufs[] = { &d->ln, &d->mean, &d->rstd, &d->qkv, &d->atty,
				 &d->branch, &d->res2, &d->fch, &d->fch_gelu };
	const uint64_t numel[] = { tc, t, t, 3 * tc, tc, tc, tc, 4 * tc, 4 * tc };
	uint64_t off = 0;

	for (int i = 0; i < 9; i++) {
		if (base)
			*bufs[i] = base + off;
		off += numel[i];
	}
	return off;
}

uint64_t zn_gpt2_decode_scratch_numel(const void *config, const struct zn_layer_desc *L, int T)
{
	const struct zn_gpt2_config *c = config;
	struct dec d;

	return L->kind == ZN_GPT2_LAYER_EMBED ? 0 : dec_carve(c, T, NULL, &d);
}

uint64_t zn_gpt2_decode_kv_numel(const void *config, const struct zn_layer_desc *L, int max_t)
{
	const struct zn_gpt2_config *c = config;

	if (L->kind != ZN_GPT2_LAYER_BLOCK)
		return 0;
	return 2 * (uint64_t)max_t * (uint64_t)c->d_model;
}

static const float *w(const float *p, const struct zn_layer_desc *L, int t)
{
	return p + L->tensors[t].offset;
}

static void block_decode(const struct zn_kernel_table *k, void *st,
			 const struct zn_gpt2_config *c, const struct zn_decode_io *io)
{
	const int C = c->d_model, NH = c->heads, T = io->T;
	const uint64_t tc = (uint64_t)T * (uint64_t)C;
	const float *p = io->params;
	const struct zn_layer_desc *L = io->L;
	float *kc = io->kv, *vc = io->kv + (uint64_t)io->max_t * (uint64_t)C;
	struct dec d;

	dec_carve(c, T, io->scratch, &d);
	k->layernorm_forward(st, d.ln, d.mean, d.rstd, io->x_in, w(p, L, ZN_GPT2_LN1_W),
			     w(p, L, ZN_GPT2_LN1_B), 1, T, C);
	k->matmul_forward(st, d.qkv, d.ln, w(p, L, ZN_GPT2_QKV_W), w(p, L, ZN_GPT2_QKV_B), 1, T,
			  C, 3 * C);
	k->kv_attention_forward(st, d.atty, kc, vc, d.qkv, io->pos0, T, NH, NH, C / NH, 0);
	k->matmul_forward(st, d.branch, d.atty, w(p, L, ZN_GPT2_ATTPROJ_W),
			  w(p, L, ZN_GPT2_ATTPROJ_B), 1, T, C, C);
	k->residual_forward(st, d.res2, io->x_in, d.branch, tc);
	k->layernorm_forward(st, d.ln, d.mean, d.rstd, d.res2, w(p, L, ZN_GPT2_LN2_W),
			     w(p, L, ZN_GPT2_LN2_B), 1, T, C);
	k->matmul_forward(st, d.fch, d.ln, w(p, L, ZN_GPT2_FC_W), w(p, L, ZN_GPT2_FC_B), 1, T, C,
			  4 * C);
	k->gelu_forward(st, d.fch_gelu, d.fch, 4 * tc);
	k->matmul_forward(st, d.branch, d.fch_gelu, w(p, L, ZN_GPT2_FCPROJ_W),
			  w(p, L, ZN_GPT2_FCPROJ_B), 1, T, 4 * C, C);
	k->residual_forward(st, io->x_out, d.res2, d.branch, tc);
}

/* ln_f on the last n_logits rows, then logits = ln @ wte[0 .. V)^T (the real rows) */
static void final_decode(const struct zn_kernel_table *k, void *st,
			 const struct zn_gpt2_config *c, const struct zn_decode_io *io)
{
	const int C = c->d_model, n = io->n_logits;
	const float *x = io->x_in + (uint64_t)(io->T - n) * (uint64_t)C;
	struct dec d;

	dec_carve(c, io->T, io->scratch, &d);
	k->layernorm_forward(st, d.ln, d.mean, d.rstd, x, w(io->params, io->L, ZN_GPT2_LNF_W),
			     w(io->params, io->L, ZN_GPT2_LNF_B), 1, n, C);
	k->matmul_forward(st, io->logits, d.ln, io->tied_params, NULL, 1, n, C, c->vocab);
}

int zn_gpt2_decode_max_t(const void *config)
{
	return ((const struct zn_gpt2_config *)config)->seq; /* wpe rows */
}

void zn_gpt2_decode(const struct zn_kernel_table *k, void *stream, const void *config,
		    const struct zn_decode_io *io)
{
	const struct zn_gpt2_config *c = config;

	assert(io->T > 0 && io->pos0 >= 0 && io->pos0 + io->T <= io->max_t &&
	       io->max_t <= c->seq);
	switch (io->L->kind) {
	case ZN_GPT2_LAYER_EMBED:
		/* wpe rows from pos0 */
		k->encoder_forward(stream, io->x_out, io->tokens, w(io->params, io->L, ZN_GPT2_WTE),
				   w(io->params, io->L, ZN_GPT2_WPE) +
					   (uint64_t)io->pos0 * (uint64_t)c->d_model,
				   1, io->T, c->d_model);
		break;
	case ZN_GPT2_LAYER_BLOCK:
		block_decode(k, stream, c, io);
		break;
	case ZN_GPT2_LAYER_FINAL:
		assert(io->tied_params && io->logits && io->n_logits >= 1 &&
		       io->n_logits <= io->T);
		final_decode(k, stream, c, io);
		break;
	}
}
