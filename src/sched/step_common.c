/* What both orders of a step share (step_impl.h): the launch of a layer, its parameters,
 * seeds and scales, the reduction with THE rule for when AdamW runs, the auxiliary loss's
 * buffers and layer 0's fetch; step.c (micro-batch order) and step_lm.c (layer-major) call
 * these, so their results are the same bits. */
#include "sched/step_impl.h"

#include "core/hash.h"
#include "sched/engine_impl.h"
#include "sched/grads.h"

static void fwd_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct zn_layer_call *c = ctx;

	c->model.ops->forward(k, native, c->model.config, &c->io);
}

static void bwd_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct zn_layer_call *c = ctx;

	c->model.ops->backward(k, native, c->model.config, &c->io);
}

/* The parameters layer l also reads (its descriptor's tied_layer: layer 0, resident for
 * the whole step in p0), or NULL. */
const float *zn_step_tied(const struct zn_engine *e, int l, const float *p0)
{
	return e->ld[l].tied_layer == 0 ? p0 : NULL;
}

/* A layer's forward or backward on the compute stream, a span "fwd l" / "bwd l" when traced;
 * a sparse layer whose frozen experts are fetched per routed expert gets their source. */
int zn_step_launch(struct zn_engine *e, bool fwd, int l, const struct zn_layer_call *a)
{
	int h, rc = zn_tracer_span_begin(&e->tr, e->rt.compute, fwd ? "fwd" : "bwd", l, 0, &h);
	struct zn_layer_call c = *a;

	c.io.experts = zn_frozen_experts_source(&e->fz, l);
	if (!rc)
		rc = zn_launch(e->rt.compute, fwd ? fwd_fn : bwd_fn, &c, sizeof(c));
	if (!rc)
		rc = zn_tracer_span_end(&e->tr, e->rt.compute, h);
	return rc;
}

/* Layer l's parameters into io: p (and p0 for a tie) are fp32 working copies or, with bf16
 * compute, the bf16 parameters themselves (prefetch.c's slot_params). */
void zn_step_set_params(const struct zn_engine *e, struct zn_layer_io *io, int l,
			const float *p, const float *p0)
{
	const float *tied = zn_step_tied(e, l, p0);

	io->params = e->compute16 ? NULL : p;
	io->tied_params = e->compute16 ? NULL : tied;
	io->params16 = e->compute16 ? (const uint16_t *)(const void *)p : NULL;
	io->tied_params16 = e->compute16 ? (const uint16_t *)(const void *)tied : NULL;
}

/* The random stream of this step's micro-batch (model.h zn_layer_io.seed: LoRA dropout). */
uint64_t zn_step_seed(const struct zn_engine *e, int micro)
{
	return zn_mix64(e->cfg.runtime.seed ^ ((uint64_t)e->step * ZN_HASH_GOLDEN) ^
			((uint64_t)micro << 48) ^ ((uint64_t)e->rt.rank << 32));
}

/* THE rule for when AdamW runs: during the backward, right behind each layer's last
 * reduction on the comm stream, when the optimizer is on the device and nothing has to wait
 * for the global norm; otherwise after the whole backward is enqueued (zn_optim_step), the
 * CPU taking layers top-down as each gradient shard lands, or every update behind the
 * norm (clipping; fp16, whose overflow check of the whole step must come before any
 * layer is updated: fp16 loses the overlap of AdamW with the backward). */
bool zn_step_adamw_during_backward(const struct zn_engine *e)
{
	return !zn_tiers_optim_on_host(&e->ti) && !(e->cfg.gradient_clipping > 0) &&
	       !e->cfg.precision.fp16;
}

/* layer l's reduction; after the last micro-batch's, its AdamW when the rule says so */
int zn_step_reduce_update(struct zn_engine *e, int l, int bwd_index, int micro)
{
	/* the pinned gradient ring: the buffer this shard lands in is freed first, by the
	 * AdamW of the layer that used it */
	int due = micro == e->gas - 1 ? zn_grads_ring_due(&e->gr, l) : -1, rc = 0;

	if (due >= 0)
		rc = zn_optim_update_host(&e->opt, due);
	if (!rc)
		rc = zn_reduce_layer(&e->rd, l, bwd_index, micro);
	if (!rc && micro == e->gas - 1 && zn_step_adamw_during_backward(e))
		rc = zn_optim_update_device(&e->opt, l);
	/* held gradients, state on nvme: the AdamW of layers whose shard has landed */
	if (!rc && micro == e->gas - 1 && l > 0)
		rc = zn_optim_update_early(&e->opt, l);
	return rc;
}

/* the mean over every token of the global batch, times the fp16 loss scale (1 else);
 * with targets not predicted (packed documents, masked tokens), over the predicted ones of
 * every micro-batch and rank */
float zn_step_dloss_scale(const struct zn_engine *e)
{
	if (e->act.pred > 0)
		return zn_optim_loss_scale(&e->opt) / (float)e->act.pred;
	if (!e->all_labels)
		return e->labels > 0 ? zn_optim_loss_scale(&e->opt) / e->labels : 0.0f;
	return zn_optim_loss_scale(&e->opt) / ((float)e->B * (float)e->T * (float)e->rt.world * (float)e->gas);
}

float zn_step_aux_scale(const struct zn_engine *e)
{
	return zn_optim_loss_scale(&e->opt) / ((float)e->rt.world * (float)e->gas);
}

/* A micro-batch's layer 0 (parameters and frozen parameters: fetched on the first
 * micro-batch, kept for the others) ready on the device, and the prefetch of the layers
 * after it begun; step.c and eval.c */
int zn_step_layer0(struct zn_engine *e, int micro, const float **p0, const float **f0)
{
	int rc = 0;

	if (micro == 0)
		rc = zn_fetch_layer0(&e->pf, p0);
	else
		*p0 = e->plan.gathers ? zn_fetch_layer0_params(&e->pf) : zn_engine_params_f32(e, 0);
	if (!rc && micro == 0)
		rc = zn_frozen_layer0(&e->fz, e->act.use, e->act.use_n, f0);
	else
		*f0 = zn_frozen_layer0_params(&e->fz);
	if (!rc)
		rc = zn_fetch_layer0_wait(&e->pf);
	if (!rc)
		rc = zn_frozen_layer0_wait(&e->fz);
	if (!rc)
		rc = zn_fetch_begin(&e->pf, e->act.use, e->act.use_n);
	if (!rc)
		rc = zn_frozen_begin(&e->fz, e->act.use, e->act.use_n);
	return rc;
}
