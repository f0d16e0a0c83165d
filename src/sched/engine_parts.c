/* The engine's parts made, each given at creation only what it uses (docs/architecture.md,
 * "Who owns what"): the runtime, the tracer, the layers' buffers, the tiers' answers, the
 * store and the plan's numbers, as config structs. The parts hold the addresses of the
 * engine's fields (e->sw, e->ti, ...), which stay put for the engine's life: the store is
 * made last, and nothing uses it before the first step. */
#include <errno.h>

#include "core/log.h"
#include "sched/engine_impl.h"

/* rc of allocating `what`: an allocation failure gets a line naming the part (the
 * allocator's own line above gives the bytes) */
int zn_engine_part(int rc, const char *what, int layer)
{
	if (rc == -ENOMEM && layer >= 0)
		zn_error("zn_engine_create: out of memory allocating layer %d's %s", layer, what);
	else if (rc == -ENOMEM)
		zn_error("zn_engine_create: out of memory allocating %s", what);
	return rc;
}

/* the gradient reduction, given the runtime, the tracer, the layers and the plan's ring */
static int create_reduce(struct zn_engine *e)
{
	struct zn_reduce_config c = {
		.rt = &e->rt, .tr = &e->tr, .L = e->L, .n = e->n, .gas = e->gas,
		.stage = e->cfg.zero.stage, .overlap_comm = e->cfg.zero.overlap_comm,
		.grads = e->plan.pl.grads, .grad_slots = e->plan.grad_slots,
		.layer0_numel = e->plan.layer0_numel, .slot_numel = e->plan.slot_numel,
	};

	return zn_reduce_create(&e->rd, &c);
}

/* the optimizer, given the runtime, the tracer, the layers and the plan's placement */
static int create_optim(struct zn_engine *e)
{
	struct zn_optim_config c = {
		.rt = &e->rt, .tr = &e->tr, .L = e->L, .ld = e->ld, .n = e->n, .cfg = &e->cfg,
		.pdt = e->pdt, .ti = &e->ti, .sw = &e->sw, .gr = &e->gr,
		.grads_on_host = e->plan.pl.grads == ZN_TIER_HOST, .params = e->plan.pl.params,
	};

	return zn_optim_create(&e->opt, &c);
}

/* the prefetcher, given the runtime, the tracer, the layers, the tiers, the store, the plan */
static int create_prefetch(struct zn_engine *e)
{
	struct zn_prefetch_config c = {
		.rt = &e->rt, .tr = &e->tr, .L = e->L, .ti = &e->ti, .sw = &e->sw,
		.plan = &e->plan, .stage = e->cfg.zero.stage, .pdt = e->pdt,
		.compute16 = e->compute16,
	};

	return zn_prefetch_create(&e->pf, &c);
}

/* the frozen base, given the device and streams, the tracer, the arena, the plan and the
 * offload paths (its shape came before the plan, zn_frozen_prepare) */
static int create_frozen(struct zn_engine *e)
{
	const struct zn_offload_config *o = &e->cfg.zero.offload_param;
	struct zn_frozen_config c = {
		.dev = e->rt.dev, .compute = e->rt.compute, .copy_in = e->rt.copy_in,
		.copy_out = e->rt.copy_out, .rank = e->rt.rank, .tr = &e->tr, .arena = e->arena,
		.pin = &e->pin, .plan = &e->plan,
		.nvme_dir = o->nvme_path_count > 0 ? o->nvme_path[0] : NULL, .aio = &e->cfg.aio,
	};

	return zn_frozen_create(&e->fz, &c);
}

/* the store, given the runtime, the tracer, the layers, the arena, the plan's numbers it
 * reads and config */
static int create_swapio(struct zn_engine *e)
{
	const struct zn_engine_plan *p = &e->plan;
	struct zn_swapio_config c = {
		.rt = &e->rt, .tr = &e->tr, .L = e->L, .n = e->n, .arena = e->arena,
		.cfg = &e->cfg, .pdt = e->pdt,
		.plan = {
			.optim = p->pl.optim, .params = p->pl.params,
			.master_aliases_params = p->master_aliases_params,
			.gathers = p->gathers, .param_bytes = p->param_bytes, .states = p->states,
			.swap_buffers = p->swap_buffers, .fetch_buffers = p->fetch_buffers,
			.hot_layers = p->hot_layers, .swap_chunk_numel = p->swap_chunk_numel,
			.swap_moment_bytes = p->swap_moment_bytes,
			.fetch_ring_numel = p->fetch_ring_numel,
		},
	};

	return zn_swapio_create(&e->sw, &c);
}

/* the activations, given the runtime, the arena, their shape, homes' paths and plan bytes */
static int create_acts(struct zn_engine *e)
{
	struct zn_acts_config c;

	zn_engine_acts_config(e, &c);
	return zn_acts_create(&e->act, &c);
}

int zn_engine_create_parts(struct zn_engine *e)
{
	struct zn_grads_config gc = {
		.L = e->L, .n = e->n, .arena = e->arena, .home = e->plan.grad_home,
		.ring = e->plan.grad_ring, .ring_numel = e->plan.grad_ring_numel,
	};
	int rc;

	rc = zn_engine_part(zn_grads_create(&e->gr, &gc), "gradient buffers", -1);
	if (!rc)
		rc = zn_engine_part(create_prefetch(e), "the parameter prefetch ring", -1);
	if (!rc)
		rc = zn_engine_part(create_frozen(e), "the frozen parameters' buffers", -1);
	if (!rc)
		rc = zn_engine_part(create_reduce(e), "the gradient reduction buffers", -1);
	if (!rc)
		rc = zn_engine_part(create_acts(e),
				    "the activations, the step's tokens and their events", -1);
	if (!rc)
		rc = zn_engine_part(create_optim(e), "the optimizer's buffers", -1);
	if (!rc)
		rc = zn_engine_part(create_swapio(e), "the nvme swap staging", -1);
	return rc;
}
