/* Activations (acts.h): allocated per layer count, so the model's depth has no limit; with
 * activation checkpointing the buffers are recompute.c's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "sched/acts.h"
#include "sched/runtime.h"
#include "sched/tiers.h"

static uint64_t bt_of(const struct zn_acts_config *c)
{
	return (uint64_t)c->shape.B * (uint64_t)c->shape.T;
}

/* the tied head runs again at the end of a layer-major backward (lmajor.h) */
static bool tied_again(const struct zn_acts_config *c, const struct zn_lmajor *lm)
{
	return lm->tied && c->shape.gas > 1;
}

/* the layer-major step's buffers (lmajor.h) */
static void lm_bytes(const struct zn_acts_config *c, const struct zn_lmajor *lm,
		     struct zn_lmajor_bytes *out)
{
	struct zn_act_shape s = c->shape;

	s.on = false;
	zn_lmajor_bytes_of(&s, lm->k, lm->home, zn_lmajor_tied_sink_bytes(c), tied_again(c, lm),
			   out);
}

uint64_t zn_acts_bytes(const struct zn_acts_config *c, const struct zn_lmajor *lm)
{
	struct zn_act_bytes b;
	struct zn_lmajor_bytes lb;

	zn_act_bytes_of(&c->shape, &b);
	if (lm->on) {
		lm_bytes(c, lm, &lb);
		b.device = lb.device;
	}
	/* and the optimizer's norm results (optim.h) */
	return b.device + zn_plan_device_alloc_bytes(c->norm_bytes);
}

uint64_t zn_acts_host_bytes(const struct zn_acts_config *c, const struct zn_lmajor *lm)
{
	struct zn_act_bytes b;
	struct zn_lmajor_bytes lb;

	if (lm->on) {
		lm_bytes(c, lm, &lb);
		return lb.host;
	}
	zn_act_bytes_of(&c->shape, &b);
	return b.host;
}

uint64_t zn_acts_nvme_bytes(const struct zn_acts_config *c, const struct zn_lmajor *lm)
{
	struct zn_act_bytes b;
	struct zn_lmajor_bytes lb;

	if (lm->on) {
		lm_bytes(c, lm, &lb);
		return lb.nvme;
	}
	zn_act_bytes_of(&c->shape, &b);
	return b.nvme;
}

uint64_t zn_acts_nvme_step_bytes(const struct zn_acts_config *c, const struct zn_lmajor *lm)
{
	struct zn_lmajor_bytes lb;

	if (!lm->on)
		return 0;
	lm_bytes(c, lm, &lb);
	return lb.nvme_step;
}

/* without checkpointing or layer-major: every layer's activations and outputs */
static int alloc_all_layers(struct zn_acts *a)
{
	const struct zn_act_shape *s = &a->c.shape;
	struct zn_act_bytes ab;
	int rc = 0;

	zn_act_bytes_of(s, &ab);
	for (int l = 0; !rc && l < s->n; l++)
		rc = zn_tiers_dalloc(a->c.rt->dev, &a->acts_d[l], zn_act_layer_bytes(s, l));
	for (int l = 0; !rc && l < s->n - 1; l++)
		rc = zn_tiers_dalloc(a->c.rt->dev, &a->x_d[l], ab.x);
	return rc;
}

/* the use sequence of the step's order (lmajor.h or recompute.h) */
static int make_schedule(struct zn_acts *a)
{
	const struct zn_act_shape *s = &a->c.shape;
	bool again = tied_again(&a->c, &a->lm);

	a->use_n = a->lm.on ? zn_lmajor_schedule(s->n, again, NULL) :
			      zn_recompute_schedule(s, NULL);
	a->use = zn_size_calloc((uint64_t)a->use_n, sizeof(*a->use), "the layer use schedule");
	if (!a->use)
		return -ENOMEM;
	if (a->lm.on)
		zn_lmajor_schedule(s->n, again, a->use);
	else
		zn_recompute_schedule(s, a->use);
	return 0;
}

/* the fixed device buffers: two dx, scratch, tokens, targets, losses, positions, the
 * auxiliary losses */
static int alloc_fixed(struct zn_acts *a, uint64_t x)
{
	const struct zn_act_shape *s = &a->c.shape;
	struct zn_device *dev = a->c.rt->dev;
	uint64_t bt = bt_of(&a->c), tok = bt * sizeof(int), gas = (uint64_t)s->gas;
	int rc;

	rc = zn_tiers_dalloc(dev, &a->dx_d[0], x);
	if (!rc)
		rc = zn_tiers_dalloc(dev, &a->dx_d[1], x);
	a->scratch_bytes = s->sums->scratch_max;
	if (!rc)
		rc = zn_tiers_dalloc(dev, &a->scratch_d, a->scratch_bytes);
	if (!rc)
		rc = zn_tiers_dalloc(dev, &a->tok_d, tok);
	if (!rc)
		rc = zn_tiers_dalloc(dev, &a->tgt_d, tok);
	if (!rc)
		rc = zn_tiers_dalloc(dev, &a->loss_d, bt * 4);
	if (!rc && a->pos_h)
		rc = zn_tiers_dalloc(dev, &a->pos_d, tok);
	a->aux_n = s->model.ops->aux_floats ? s->model.ops->aux_floats(s->model.config) : 0;
	if (!rc && a->aux_n > 0)
		rc = zn_tiers_dalloc(dev, &a->aux_d, gas * (uint64_t)a->aux_n * 4);
	if (!rc && a->aux_n > 0)
		rc = zn_device_host_alloc(dev, (void **)&a->aux_h, gas * sizeof(float));
	return rc;
}

static int create_events(struct zn_acts *a)
{
	struct zn_device *dev = a->c.rt->dev;
	int rc = 0;

	for (uint64_t i = 0; !rc && i < 3 * (uint64_t)a->c.shape.gas; i++)
		rc = zn_event_create(dev, &a->tev[i]);
	if (!rc)
		rc = zn_event_create(dev, &a->tok_ready);
	if (!rc)
		rc = zn_event_create(dev, &a->tok_free);
	if (!rc)
		rc = zn_event_create(dev, &a->loss_done);
	if (!rc)
		rc = zn_event_create(dev, &a->fwd_done);
	return rc;
}

int zn_acts_create(struct zn_acts *a, const struct zn_acts_config *c)
{
	const struct zn_act_shape *s = &c->shape;
	struct zn_device *dev = c->rt->dev;
	/* the step's gas x B x T, at most INT_MAX (zn_engine_check_counts) */
	uint64_t step_bytes = zn_size_mul(zn_size_mul(bt_of(c), (uint64_t)s->gas), 4);
	struct zn_act_bytes ab;
	int rc;

	a->c = *c;
	zn_act_bytes_of(s, &ab);
	a->acts_d = zn_size_calloc((uint64_t)s->n, sizeof(*a->acts_d), "activation pointers");
	a->x_d = zn_size_calloc((uint64_t)s->n, sizeof(*a->x_d), "layer output pointers");
	a->tev = zn_size_calloc(3 * (uint64_t)s->gas, sizeof(*a->tev), "micro-batch events");
	if (!a->acts_d || !a->x_d || !a->tev || make_schedule(a))
		return -ENOMEM;
	/* page-locked under cuda, so the token and loss copies are asynchronous */
	rc = zn_device_host_alloc(dev, (void **)&a->loss_h, step_bytes);
	if (!rc)
		rc = zn_device_host_alloc(dev, (void **)&a->tok_h, step_bytes);
	if (!rc)
		rc = zn_device_host_alloc(dev, (void **)&a->tgt_h, step_bytes);
	if (!rc && s->pos)
		rc = zn_device_host_alloc(dev, (void **)&a->pos_h, step_bytes);
	if (rc)
		return rc;
	if (a->lm.on)
		rc = zn_lmajor_create(&a->lm, &a->c);
	else if (s->on)
		rc = zn_recompute_create(&a->rec, &a->c, a->use);
	else
		rc = alloc_all_layers(a);
	if (!rc)
		rc = alloc_fixed(a, ab.x);
	if (!rc)
		rc = create_events(a);
	return rc;
}

void zn_acts_destroy(struct zn_acts *a)
{
	struct zn_device *dev = a->c.rt ? a->c.rt->dev : NULL;
	int n = a->c.shape.n;

	zn_recompute_destroy(&a->rec);
	zn_lmajor_destroy(&a->lm);
	for (int l = 0; a->acts_d && l < n; l++)
		zn_device_free(dev, a->acts_d[l]);
	for (int l = 0; a->x_d && l < n - 1; l++)
		zn_device_free(dev, a->x_d[l]);
	free(a->acts_d);
	free(a->x_d);
	zn_device_free(dev, a->dx_d[0]);
	zn_device_free(dev, a->dx_d[1]);
	zn_device_free(dev, a->scratch_d);
	zn_device_free(dev, a->tok_d);
	zn_device_free(dev, a->tgt_d);
	zn_device_free(dev, a->loss_d);
	zn_device_free(dev, a->aux_d);
	zn_device_host_free(dev, a->aux_h);
	zn_device_free(dev, a->pos_d);
	zn_event_destroy(a->tok_ready);
	zn_event_destroy(a->tok_free);
	zn_event_destroy(a->loss_done);
	zn_event_destroy(a->fwd_done);
	for (uint64_t i = 0; a->tev && i < 3 * (uint64_t)a->c.shape.gas; i++)
		zn_event_destroy(a->tev[i]);
	free(a->tev);
	free(a->use);
	zn_device_host_free(dev, a->loss_h);
	zn_device_host_free(dev, a->tok_h);
	zn_device_host_free(dev, a->tgt_h);
	zn_device_host_free(dev, a->pos_h);
	/* the schedule is the plan's: it outlives the buffers */
	*a = (struct zn_acts){ .lm = a->lm };
}

void zn_acts_fwd_io(struct zn_acts *a, int l, bool recompute, struct zn_layer_io *io)
{
	int n = a->c.shape.n;

	if (a->rec.on) {
		zn_recompute_fwd_io(&a->rec, l, recompute, io);
		return;
	}
	if (a->lm.on) { /* eval's forward: micro-batch 0's buffers */
		io->acts = l > 0 ? a->lm.acts_d : NULL;
		io->x_in = l > 0 ? zn_lmajor_fwd_x(&a->lm, l, 0) : NULL;
		io->x_out = l < n - 1 ? zn_lmajor_fwd_x(&a->lm, l + 1, 0) : NULL;
		return;
	}
	io->acts = l > 0 ? a->acts_d[l] : NULL;
	io->x_in = l > 0 ? a->x_d[l - 1] : NULL;
	io->x_out = l < n - 1 ? a->x_d[l] : NULL;
}

void zn_acts_bwd_io(struct zn_acts *a, int l, struct zn_layer_io *io)
{
	if (a->rec.on) {
		zn_recompute_bwd_io(&a->rec, l, io);
		return;
	}
	io->acts = a->acts_d[l];
	io->x_in = a->x_d[l - 1];
}

void zn_acts_stage_tokens(struct zn_acts *a, const int **inputs_h, const int **targets_h)
{
	size_t bytes = (size_t)bt_of(&a->c) * (size_t)a->c.shape.gas * sizeof(int);

	memcpy(a->tok_h, *inputs_h, bytes);
	memcpy(a->tgt_h, *targets_h, bytes);
	*inputs_h = a->tok_h;
	*targets_h = a->tgt_h;
}
