/* The Llama family's mixture-of-experts parts: a sparse block's MLP (model/moe/moe.h) on
 * the block's normalized h2, its share of the block's acts and scratch, and the
 * load-balancing loss (transformers' load_balancing_loss_func over the MoE layers of one
 * forward) through the auxiliary buffer (model.h zn_layer_io.aux), laid out as
 *   aux[0]              the loss (the final layer's forward writes it)
 *   aux[1 .. E]         dprob: the loss's gradient per probability, times the
 *                       coefficient and aux_scale (the final layer's backward writes it,
 *                       before any block's backward reads it)
 *   aux[1+E .. 1+3E]    per expert the routed slots, then the probability sums, over
 *                       every MoE layer's tokens (each MoE block's forward adds its own).
 * Without output_router_logits no buffer exists and the blocks neither gather nor read. */
#include "model/llama/llama.h"
#include "model/moe/moe.h"

void zn_llama_moe_dims(const struct zn_llama_config *cfg, int B, int T, struct zn_moe_dims *d)
{
	d->N = B * T;
	d->C = cfg->hidden;
	d->E = cfg->experts;
	d->K = cfg->experts_per_tok;
	d->I = cfg->moe_intermediate;
	d->norm = cfg->norm_topk;
}

int zn_llama_aux_floats(const struct zn_llama_config *cfg)
{
	return cfg->experts > 0 && cfg->aux ? 1 + 3 * cfg->experts : 0;
}

static int moe_layers(const struct zn_llama_config *cfg)
{
	int n = 0;

	for (int l = 0; l < cfg->layers; l++)
		n += zn_llama_layer_is_moe(cfg, l);
	return n;
}

uint64_t zn_llama_moe_act_numel(const struct zn_llama_config *cfg, int B, int T)
{
	struct zn_moe_dims d;

	zn_llama_moe_dims(cfg, B, T, &d);
	return zn_moe_acts_bytes(&d) / sizeof(float);
}

uint64_t zn_llama_moe_scratch_numel(const struct zn_llama_config *cfg, int B, int T)
{
	struct zn_moe_dims d;

	zn_llama_moe_dims(cfg, B, T, &d);
	return zn_moe_scratch_bytes(&d) / sizeof(float);
}

/* the router, gate_up_proj and down_proj of a block whose tensor t is the router */
static struct zn_moe_weights weights_of(const struct zn_layer_desc *L, int t, const float *p)
{
	return (struct zn_moe_weights){ p + L->tensors[t].offset, p + L->tensors[t + 1].offset,
					p + L->tensors[t + 2].offset };
}

void zn_llama_moe_forward(const struct zn_kernel_table *k, void *st,
			  const struct zn_llama_config *cfg, const struct zn_layer_desc *L,
			  const float *params, int t, int B, int T, float *aux,
			  const struct zn_moe_source *src, float *acts, const float *h2,
			  float *out)
{
	struct zn_moe_weights W = weights_of(L, t, params);
	int offsets_h[ZN_LLAMA_MAX_EXPERTS + 1];
	struct zn_moe_acts a;
	struct zn_moe_dims d;

	zn_llama_moe_dims(cfg, B, T, &d);
	zn_moe_acts_carve(&a, acts, offsets_h, &d);
	zn_moe_forward(k, st, &d, &W, src, &a, h2, out, aux ? aux + 1 + cfg->experts : NULL);
}

void zn_llama_moe_backward(const struct zn_kernel_table *k, void *st,
			   const struct zn_llama_config *cfg, const struct zn_layer_io *io,
			   int t, const float *acts, float *scratch, const float *h2,
			   float *dh2)
{
	struct zn_moe_weights W = weights_of(io->L, t, io->params);
	struct zn_moe_grads G = { io->grads + io->L->tensors[t].offset,
				  io->grads + io->L->tensors[t + 1].offset,
				  io->grads + io->L->tensors[t + 2].offset };
	int offsets_h[ZN_LLAMA_MAX_EXPERTS + 1];
	struct zn_moe_scratch s;
	struct zn_moe_acts a;
	struct zn_moe_dims d;

	zn_llama_moe_dims(cfg, io->B, io->T, &d);
	zn_moe_acts_carve(&a, (void *)acts, offsets_h, &d);
	zn_moe_scratch_carve(&s, scratch, &d);
	/* the rows per expert, which size the per-expert GEMMs, as the forward found them */
	k->read_sync(st, offsets_h, a.offsets, (size_t)(d.E + 1) * sizeof(int));
	zn_moe_backward(k, st, &d, &W, io->experts, &G, &a, &s, h2, io->dx_out,
			io->aux ? io->aux + 1 : NULL, dh2);
}

/* The final layer's part: the loss (forward) or each probability's gradient (backward),
 * from the counts the MoE blocks gathered over B T tokens each. */
void zn_llama_moe_aux_finish(const struct zn_kernel_table *k, void *st,
			     const struct zn_llama_config *cfg, const struct zn_layer_io *io,
			     bool backward)
{
	const float ntot = (float)io->B * (float)io->T * (float)moe_layers(cfg);
	float *acc;

	if (!io->aux || zn_llama_aux_floats(cfg) == 0)
		return;
	acc = io->aux + 1 + cfg->experts;
	if (backward)
		k->moe_aux_finish(st, NULL, io->aux + 1, acc, cfg->experts, ntot,
				  io->aux_scale * cfg->aux_coef);
	else
		k->moe_aux_finish(st, io->aux, NULL, acc, cfg->experts, ntot, 0.0f);
}
