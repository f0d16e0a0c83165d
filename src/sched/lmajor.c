/* Layer-major gradient accumulation: buffers, use sequence and bytes (lmajor.h). The step
 * is step_lm.c; the choice of schedule is the engine's (engine_schedule.c, zn_lmajor_plan). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "core/size.h"
#include "sched/acts.h"
#include "sched/runtime.h"
#include "sched/tiers.h"

bool zn_lmajor_stored(int n, int k, bool tied_again, int l, int m)
{
	(void)k;
	return l <= n - 2 || (tied_again && l == n - 1 && m >= 1);
}

int zn_lmajor_stored_count(int n, int k, bool tied_again)
{
	return (n - 2) * k + (tied_again ? k - 1 : 0);
}

/* the backward's order: layers n-2 .. 1, micro-batches 0 .. k-1 each, then the tied
 * head's micro-batches 1 .. k-1 */
int zn_lmajor_read_id(int n, int k, int p)
{
	int l = p < (n - 2) * k ? n - 2 - p / k : n - 1;
	int m = p < (n - 2) * k ? p % k : 1 + p - (n - 2) * k;

	return (l - 1) * k + m;
}

void zn_lmajor_bytes_of(const struct zn_act_shape *s, int k, enum zn_tier home,
			uint64_t tied_sink_bytes, bool tied_again, struct zn_lmajor_bytes *out)
{
	uint64_t bt = (uint64_t)s->B * (uint64_t)s->T, bnd, xa, slots, toks;
	struct zn_act_bytes b;

	zn_act_bytes_of(s, &b);
	xa = zn_plan_device_alloc_bytes(b.x);
	bnd = zn_size_mul((uint64_t)(s->n - 1), (uint64_t)k);
	/* device home: every boundary and k + 1 gradients; host: 2k forward slots, 2 copy-up
	 * slots and 4 gradient slots */
	slots = home == ZN_TIER_DEVICE ? zn_size_add(bnd, (uint64_t)k + 1) : 2 * (uint64_t)k + 6;
	toks = zn_plan_device_alloc_bytes(zn_size_mul(zn_size_mul(bt, (uint64_t)k), sizeof(int)));
	out->device = zn_size_mul(slots, xa);
	/* one layer's activations, the output and loss sinks */
	out->device = zn_size_add(out->device, zn_plan_device_alloc_bytes(b.acts_max));
	out->device = zn_size_add(out->device, xa);
	out->device = zn_size_add(out->device, zn_plan_device_alloc_bytes(bt * 4));
	out->device = zn_size_add(out->device, zn_size_mul(s->pos ? 3 : 2, toks));
	out->device = zn_size_add(out->device, tied_sink_bytes);
	/* the fixed buffers micro-batch order has too (eval reads them) */
	out->device = zn_size_add(out->device, b.device_fixed);
	/* host: every boundary and every micro-batch's boundary gradient; nvme: the
	 * gradients and the staging buffers, every boundary's extent, and those read again
	 * written and read once a step */
	out->host = home == ZN_TIER_HOST ? zn_size_mul(zn_size_add(bnd, (uint64_t)k),
						       zn_plan_host_alloc_bytes(b.x)) : 0;
	out->nvme = 0;
	out->nvme_step = 0;
	if (home == ZN_TIER_NVME) {
		out->host = zn_size_mul((uint64_t)k + ZN_RECOMPUTE_STAGES,
					zn_plan_host_alloc_bytes(b.x));
		out->nvme = zn_size_mul(bnd, zn_plan_host_alloc_bytes(b.x));
		out->nvme_step = zn_size_mul((uint64_t)zn_lmajor_stored_count(s->n, k, tied_again),
					     zn_plan_host_alloc_bytes(b.x));
	}
}

int zn_lmajor_schedule(int n, bool tied_again, struct zn_use *use)
{
	int c = 0;

#define LM_USE(l, f, b)                                                                   \
	do {                                                                              \
		if (use)                                                                  \
			use[c] = (struct zn_use){ (l), (f), (b) };                        \
		c++;                                                                      \
	} while (0)
	for (int l = 1; l < n - 1; l++)
		LM_USE(l, true, false);
	LM_USE(n - 1, true, true);
	for (int l = n - 2; l >= 1; l--)
		LM_USE(l, true, true);
	if (tied_again)
		LM_USE(n - 1, true, true);
#undef LM_USE
	return c;
}

float *zn_lmajor_fwd_x(struct zn_lmajor *lm, int l, int m)
{
	if (lm->home == ZN_TIER_DEVICE)
		return lm->bnd_d[(size_t)(l - 1) * (size_t)lm->k + (size_t)m];
	return lm->bnd_d[(size_t)(l % 2) * (size_t)lm->k + (size_t)m];
}

/* host home: every boundary in a pinned buffer of a bare home (store/home.h: buffer
 * (l-1) k + m; its copies are ordered by the forward slots' events, not the buffers') */
static int open_pinned_home(struct zn_lmajor *lm, struct zn_arena *arena, uint64_t nb)
{
	struct zn_home_config c = {
		.tier = ZN_TIER_HOST, .count = (int)nb, .buf_n = (int)nb,
		.item_bytes = lm->x_bytes, .dev = lm->rt->dev, .arena = arena, .bare = true,
	};

	if (nb > (uint64_t)INT32_MAX)
		return -EOVERFLOW;
	return zn_home_open(&lm->st, &c);
}

static int alloc_host_home(struct zn_lmajor *lm, struct zn_arena *arena, uint64_t nb)
{
	struct zn_device *dev = lm->rt->dev;
	int rc = 0;

	lm->down = zn_size_calloc(2 * (uint64_t)lm->k, sizeof(*lm->down), "boundary events");
	lm->dxh = zn_size_calloc((uint64_t)lm->k, sizeof(*lm->dxh), "boundary gradients");
	lm->dx_down = zn_size_calloc((uint64_t)lm->k, sizeof(*lm->dx_down), "gradient events");
	if (!lm->down || !lm->dxh || !lm->dx_down)
		return -ENOMEM;
	if (nb)
		rc = open_pinned_home(lm, arena, nb);
	for (int i = 0; !rc && i < lm->k; i++)
		rc = zn_tiers_halloc(arena, &lm->dxh[i], lm->x_bytes);
	for (int i = 0; !rc && i < lm->k; i++)
		rc = zn_event_create(dev, &lm->dx_down[i]);
	for (int i = 0; !rc && i < 2; i++) {
		rc = zn_event_create(dev, &lm->rd_ready[i]);
		if (!rc)
			rc = zn_event_create(dev, &lm->rd_free[i]);
		if (!rc)
			rc = zn_event_create(dev, &lm->wr_free[i]);
	}
	if (!rc)
		rc = zn_event_create(dev, &lm->dx_made);
	for (int i = 0; !rc && i < 2 * lm->k; i++)
		rc = zn_event_create(dev, &lm->down[i]);
	for (int i = 0; !rc && i < 2; i++) {
		rc = zn_tiers_dalloc(dev, &lm->up_d[i], lm->x_bytes);
		if (!rc)
			rc = zn_event_create(dev, &lm->up_ready[i]);
		if (!rc)
			rc = zn_event_create(dev, &lm->up_free[i]);
	}
	if (!rc)
		rc = zn_event_create(dev, &lm->all_down);
	return rc;
}

/* "layer boundary 5 (input of layer 2, micro-batch 1)" (ctx: layer-major's state) */
static void bnd_name(const void *ctx, int id, char *out, size_t size)
{
	int k = ((const struct zn_lmajor *)ctx)->k;

	snprintf(out, size, "layer boundary %d (input of layer %d, micro-batch %d)", id,
		 1 + id / k, id % k);
}

/* nvme home: the staging buffers and the store of every boundary's extent */
static int alloc_nvme_home(struct zn_lmajor *lm, const struct zn_acts_config *ac, uint64_t nb)
{
	struct zn_home_config c = {
		.tier = ZN_TIER_NVME, .count = 0, .buf_n = ZN_RECOMPUTE_STAGES,
		.item_bytes = lm->x_bytes, .dev = lm->rt->dev, .arena = ac->arena,
		.rank = lm->rt->rank, .kind = ZN_SWAP_ACTIVATION, .paths = ac->bnd_paths,
		.run_id = ac->run_id, .what = "bnd", .aio = ac->aio, .name = bnd_name, .ctx = lm,
	};

	lm->stage_n = ZN_RECOMPUTE_STAGES;
	if (!ac->bnd_paths) {
		zn_error("layer-major: the layer boundaries' home is nvme but no nvme path is "
			 "set: give --checkpoint-nvme-path DIR (or --nvme-path DIR)");
		return ZN_EUSAGE;
	}
	if (nb > (uint64_t)INT32_MAX)
		return -EOVERFLOW;
	c.count = (int)nb;
	return zn_home_open(&lm->st, &c);
}

int zn_lmajor_quiesce(struct zn_lmajor *lm)
{
	return zn_home_quiesce(&lm->st);
}

uint64_t zn_lmajor_tied_sink_bytes(const struct zn_acts_config *c)
{
	return zn_plan_device_alloc_bytes(c->tied_grad0_bytes) +
	       zn_plan_device_alloc_bytes(c->tied_grad_last_bytes) +
	       zn_plan_device_alloc_bytes(c->head_bytes);
}

/* the device buffers after the boundaries: one layer's activations, the sinks, the
 * tokens, the tied head's sinks and parameters */
static int alloc_device(struct zn_lmajor *lm, const struct zn_acts_config *c,
			uint64_t acts_max)
{
	struct zn_device *dev = lm->rt->dev;
	uint64_t bt = (uint64_t)c->shape.B * (uint64_t)c->shape.T;
	uint64_t toks = bt * (uint64_t)lm->k * sizeof(int);
	int rc = 0;

	for (int i = 0; !rc && i < lm->dx_n; i++)
		rc = zn_tiers_dalloc(dev, &lm->dx_d[i], lm->x_bytes);
	if (!rc)
		rc = zn_tiers_dalloc(dev, &lm->acts_d, acts_max);
	if (!rc)
		rc = zn_tiers_dalloc(dev, &lm->x_sink_d, lm->x_bytes);
	if (!rc)
		rc = zn_tiers_dalloc(dev, &lm->loss_sink_d, bt * 4);
	if (!rc)
		rc = zn_tiers_dalloc(dev, &lm->tok_d, toks);
	if (!rc)
		rc = zn_tiers_dalloc(dev, &lm->tgt_d, toks);
	if (!rc && c->shape.pos)
		rc = zn_tiers_dalloc(dev, &lm->pos_d, toks);
	if (!rc && zn_lmajor_tied_sink_bytes(c)) {
		rc = zn_tiers_dalloc(dev, &lm->tied_sink_d, c->tied_grad0_bytes);
		if (!rc)
			rc = zn_tiers_dalloc(dev, &lm->grad_sink_d, c->tied_grad_last_bytes);
		lm->head_p_bytes = c->head_bytes;
		if (!rc)
			rc = zn_tiers_dalloc(dev, &lm->head_p_d, lm->head_p_bytes);
	}
	if (!rc)
		rc = zn_event_create(dev, &lm->made);
	return rc;
}

int zn_lmajor_create(struct zn_lmajor *lm, const struct zn_acts_config *c)
{
	uint64_t k = (uint64_t)lm->k;
	uint64_t nb = zn_size_mul((uint64_t)(c->shape.n - 1), k);
	uint64_t slots = lm->home == ZN_TIER_DEVICE ? nb : 2 * k;
	struct zn_act_bytes ab;
	int rc = 0;

	zn_act_bytes_of(&c->shape, &ab);
	lm->rt = c->rt;
	lm->n = c->shape.n;
	lm->x_bytes = ab.x;
	lm->bnd_d = zn_size_calloc(slots, sizeof(*lm->bnd_d), "boundary slots");
	lm->dx_n = lm->home == ZN_TIER_DEVICE ? (int)k + 1 : 4;
	lm->dx_d = zn_size_calloc((uint64_t)lm->dx_n, sizeof(*lm->dx_d), "boundary gradients");
	lm->dx_of = zn_size_calloc(k + 1, sizeof(*lm->dx_of), "boundary gradient indices");
	if (!lm->bnd_d || !lm->dx_d || !lm->dx_of)
		return -ENOMEM;
	for (uint64_t i = 0; !rc && i < slots; i++)
		rc = zn_tiers_dalloc(lm->rt->dev, &lm->bnd_d[i], lm->x_bytes);
	if (!rc && lm->home != ZN_TIER_DEVICE)
		rc = alloc_host_home(lm, c->arena, lm->home == ZN_TIER_HOST ? nb : 0);
	if (!rc && lm->home == ZN_TIER_NVME)
		rc = alloc_nvme_home(lm, c, nb);
	for (uint64_t i = 0; !rc && i <= k; i++)
		lm->dx_of[i] = (int)i;
	if (!rc)
		rc = alloc_device(lm, c, ab.acts_max);
	return rc;
}

void zn_lmajor_destroy(struct zn_lmajor *lm)
{
	uint64_t k = (uint64_t)lm->k;
	uint64_t slots = lm->home == ZN_TIER_DEVICE ? (uint64_t)(lm->n - 1) * k : 2 * k;
	struct zn_device *dev = lm->rt ? lm->rt->dev : NULL;

	zn_home_close(&lm->st);
	for (uint64_t i = 0; lm->bnd_d && i < slots; i++)
		zn_device_free(dev, lm->bnd_d[i]);
	for (int i = 0; lm->dx_d && i < lm->dx_n; i++)
		zn_device_free(dev, lm->dx_d[i]);
	for (uint64_t i = 0; lm->dx_down && i < k; i++)
		zn_event_destroy(lm->dx_down[i]);
	for (uint64_t i = 0; lm->down && i < 2 * k; i++)
		zn_event_destroy(lm->down[i]);
	for (int i = 0; i < 2; i++) {
		zn_device_free(dev, lm->up_d[i]);
		zn_event_destroy(lm->up_ready[i]);
		zn_event_destroy(lm->up_free[i]);
		zn_event_destroy(lm->rd_ready[i]);
		zn_event_destroy(lm->rd_free[i]);
		zn_event_destroy(lm->wr_free[i]);
	}
	zn_event_destroy(lm->dx_made);
	zn_event_destroy(lm->all_down);
	zn_event_destroy(lm->made);
	zn_device_free(dev, lm->acts_d);
	zn_device_free(dev, lm->x_sink_d);
	zn_device_free(dev, lm->loss_sink_d);
	zn_device_free(dev, lm->grad_sink_d);
	zn_device_free(dev, lm->tied_sink_d);
	zn_device_free(dev, lm->head_p_d);
	zn_device_free(dev, lm->tok_d);
	zn_device_free(dev, lm->tgt_d);
	zn_device_free(dev, lm->pos_d);
	free(lm->bnd_d);
	free(lm->down);
	free(lm->dx_d);
	free(lm->dx_of);
	free(lm->dxh); /* views of the arena */
	free(lm->dx_down);
	/* the decision (on, k, tied, home) is the plan's: it outlives the buffers */
	*lm = (struct zn_lmajor){ .on = lm->on, .k = lm->k, .tied = lm->tied,
				  .tie_other = lm->tie_other, .home = lm->home };
}
