/* Activations (acts.h): allocated per layer count, so the model's depth has no limit; with
 * activation checkpointing the buffers are recompute.c's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "sched/engine_impl.h"

static uint64_t act_bytes(const struct zn_engine *e, int l)
{
	const struct zn_model_ops *o = e->model.ops;

	return (e->compute16 ? o->act_numel_bf16 : o->act_numel)(e->model.config, &e->ld[l],
								 e->B, e->T) * 4;
}

static uint64_t bt_of(const struct zn_engine *e)
{
	return (uint64_t)e->B * (uint64_t)e->T;
}

static uint64_t x_bytes(const struct zn_engine *e)
{
	return bt_of(e) * (uint64_t)e->model.ops->width(e->model.config) * 4;
}

/* the tied head runs again at the end of a layer-major backward (lmajor.h) */
static bool tied_again(const struct zn_engine *e)
{
	return e->act.lm.tied && e->gas > 1;
}

/* the layer-major step's buffers (lmajor.h) */
static void lm_bytes(const struct zn_engine *e, struct zn_lmajor_bytes *out)
{
	struct zn_act_shape s;

	zn_act_shape_of(e, &s);
	s.on = false;
	zn_lmajor_bytes_of(&s, e->act.lm.k, e->act.lm.home, zn_lmajor_tied_sink_bytes(e),
			   tied_again(e), out);
}

uint64_t zn_acts_bytes(const struct zn_engine *e)
{
	struct zn_act_shape s;
	struct zn_act_bytes b;
	struct zn_lmajor_bytes lb;

	zn_act_shape_of(e, &s);
	zn_act_bytes_of(&s, &b);
	if (e->act.lm.on) {
		lm_bytes(e, &lb);
		b.device = lb.device;
	}
	/* and the optimizer's norm results (optim.h) */
	return b.device + zn_plan_device_alloc_bytes(zn_devops_norm_bytes(&e->cfg, e->n));
}

uint64_t zn_acts_host_bytes(const struct zn_engine *e)
{
	struct zn_act_shape s;
	struct zn_act_bytes b;
	struct zn_lmajor_bytes lb;

	if (e->act.lm.on) {
		lm_bytes(e, &lb);
		return lb.host;
	}
	zn_act_shape_of(e, &s);
	zn_act_bytes_of(&s, &b);
	return b.host;
}

uint64_t zn_acts_nvme_bytes(const struct zn_engine *e)
{
	struct zn_act_shape s;
	struct zn_act_bytes b;
	struct zn_lmajor_bytes lb;

	if (e->act.lm.on) {
		lm_bytes(e, &lb);
		return lb.nvme;
	}
	zn_act_shape_of(e, &s);
	zn_act_bytes_of(&s, &b);
	return b.nvme;
}

uint64_t zn_acts_nvme_step_bytes(const struct zn_engine *e)
{
	struct zn_lmajor_bytes lb;

	if (!e->act.lm.on)
		return 0;
	lm_bytes(e, &lb);
	return lb.nvme_step;
}

int zn_acts_create(struct zn_engine *e)
{
	struct zn_acts *a = &e->act;
	uint64_t x = x_bytes(e), bt = bt_of(e), tok = bt * sizeof(int);
	/* the step's gas x B x T, at most INT_MAX (zn_engine_check_counts) */
	uint64_t step_bytes = zn_size_mul(zn_size_mul(bt, (uint64_t)e->gas), 4);
	int rc = 0;

	a->acts_d = zn_size_calloc((uint64_t)e->n, sizeof(*a->acts_d), "activation pointers");
	a->x_d = zn_size_calloc((uint64_t)e->n, sizeof(*a->x_d), "layer output pointers");
	a->tev = zn_size_calloc(3 * (uint64_t)e->gas, sizeof(*a->tev), "micro-batch events");
	a->use_n = a->lm.on ? zn_lmajor_schedule(e->n, tied_again(e), NULL) :
			      zn_recompute_schedule(e, NULL);
	a->use = zn_size_calloc((uint64_t)a->use_n, sizeof(*a->use), "the layer use schedule");
	if (!a->acts_d || !a->x_d || !a->tev || !a->use)
		return -ENOMEM;
	if (a->lm.on)
		zn_lmajor_schedule(e->n, tied_again(e), a->use);
	else
		zn_recompute_schedule(e, a->use);
	/* page-locked under cuda, so the token and loss copies are asynchronous */
	rc = zn_device_host_alloc(e->rt.dev, (void **)&a->loss_h, step_bytes);
	if (!rc)
		rc = zn_device_host_alloc(e->rt.dev, (void **)&a->tok_h, step_bytes);
	if (!rc)
		rc = zn_device_host_alloc(e->rt.dev, (void **)&a->tgt_h, step_bytes);
	if (!rc && e->cfg.runtime.packing == ZN_PACKING_DOCUMENTS)
		rc = zn_device_host_alloc(e->rt.dev, (void **)&a->pos_h, step_bytes);
	if (a->lm.on) {
		if (!rc)
			rc = zn_lmajor_create(e);
	} else if (e->cfg.act_ckpt.enabled) {
		if (!rc)
			rc = zn_recompute_create(e);
	} else {
		for (int l = 0; !rc && l < e->n; l++)
			rc = zn_tiers_dalloc(e->rt.dev, &a->acts_d[l], act_bytes(e, l));
		for (int l = 0; !rc && l < e->n - 1; l++)
			rc = zn_tiers_dalloc(e->rt.dev, &a->x_d[l], x);
	}
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &a->dx_d[0], x);
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &a->dx_d[1], x);
	a->scratch_bytes = e->act_sums.scratch_max;
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &a->scratch_d, a->scratch_bytes);
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &a->tok_d, tok);
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &a->tgt_d, tok);
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &a->loss_d, bt * 4);
	if (!rc && a->pos_h)
		rc = zn_tiers_dalloc(e->rt.dev, &a->pos_d, tok);
	a->aux_n = e->model.ops->aux_floats ? e->model.ops->aux_floats(e->model.config) : 0;
	if (!rc && a->aux_n > 0)
		rc = zn_tiers_dalloc(e->rt.dev, &a->aux_d, (uint64_t)e->gas * (uint64_t)a->aux_n * 4);
	if (!rc && a->aux_n > 0)
		rc = zn_device_host_alloc(e->rt.dev, (void **)&a->aux_h,
					  (uint64_t)e->gas * sizeof(float));
	for (uint64_t i = 0; !rc && i < 3 * (uint64_t)e->gas; i++)
		rc = zn_event_create(e->rt.dev, &a->tev[i]);
	if (!rc)
		rc = zn_event_create(e->rt.dev, &a->tok_ready);
	if (!rc)
		rc = zn_event_create(e->rt.dev, &a->tok_free);
	if (!rc)
		rc = zn_event_create(e->rt.dev, &a->loss_done);
	if (!rc)
		rc = zn_event_create(e->rt.dev, &a->fwd_done);
	return rc;
}

void zn_acts_destroy(struct zn_engine *e)
{
	struct zn_acts *a = &e->act;

	zn_recompute_destroy(e);
	zn_lmajor_destroy(e);
	for (int l = 0; a->acts_d && l < e->n; l++)
		zn_device_free(e->rt.dev, a->acts_d[l]);
	for (int l = 0; a->x_d && l < e->n - 1; l++)
		zn_device_free(e->rt.dev, a->x_d[l]);
	free(a->acts_d);
	free(a->x_d);
	zn_device_free(e->rt.dev, a->dx_d[0]);
	zn_device_free(e->rt.dev, a->dx_d[1]);
	zn_device_free(e->rt.dev, a->scratch_d);
	zn_device_free(e->rt.dev, a->tok_d);
	zn_device_free(e->rt.dev, a->tgt_d);
	zn_device_free(e->rt.dev, a->loss_d);
	zn_device_free(e->rt.dev, a->aux_d);
	zn_device_host_free(e->rt.dev, a->aux_h);
	zn_device_free(e->rt.dev, a->pos_d);
	zn_event_destroy(a->tok_ready);
	zn_event_destroy(a->tok_free);
	zn_event_destroy(a->loss_done);
	zn_event_destroy(a->fwd_done);
	for (uint64_t i = 0; a->tev && i < 3 * (uint64_t)e->gas; i++)
		zn_event_destroy(a->tev[i]);
	free(a->tev);
	free(a->use);
	zn_device_host_free(e->rt.dev, a->loss_h);
	zn_device_host_free(e->rt.dev, a->tok_h);
	zn_device_host_free(e->rt.dev, a->tgt_h);
	zn_device_host_free(e->rt.dev, a->pos_h);
	/* the schedule is the plan's: it outlives the buffers */
	*a = (struct zn_acts){ .lm = a->lm };
}

void zn_acts_fwd_io(struct zn_engine *e, int l, bool recompute, struct zn_layer_io *io)
{
	if (e->act.rec.on) {
		zn_recompute_fwd_io(e, l, recompute, io);
		return;
	}
	if (e->act.lm.on) { /* eval's forward: micro-batch 0's buffers */
		io->acts = l > 0 ? e->act.lm.acts_d : NULL;
		io->x_in = l > 0 ? zn_lmajor_fwd_x(e, l, 0) : NULL;
		io->x_out = l < e->n - 1 ? zn_lmajor_fwd_x(e, l + 1, 0) : NULL;
		return;
	}
	io->acts = l > 0 ? e->act.acts_d[l] : NULL;
	io->x_in = l > 0 ? e->act.x_d[l - 1] : NULL;
	io->x_out = l < e->n - 1 ? e->act.x_d[l] : NULL;
}

void zn_acts_bwd_io(struct zn_engine *e, int l, struct zn_layer_io *io)
{
	if (e->act.rec.on) {
		zn_recompute_bwd_io(e, l, io);
		return;
	}
	io->acts = e->act.acts_d[l];
	io->x_in = e->act.x_d[l - 1];
}

void zn_acts_stage_tokens(struct zn_engine *e, const int **inputs_h, const int **targets_h)
{
	size_t bytes = (size_t)e->B * (size_t)e->T * (size_t)e->gas * sizeof(int);

	memcpy(e->act.tok_h, *inputs_h, bytes);
	memcpy(e->act.tgt_h, *targets_h, bytes);
	*inputs_h = e->act.tok_h;
	*targets_h = e->act.tgt_h;
}
