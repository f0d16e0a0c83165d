/* Frozen parameters (frozen.h, docs/lora.md): the layout, the homes and the working slots
 * made at create, and their teardown. Decisions come from the plan (frozen_home,
 * frozen_direct, slots); loading and reading back the layers is frozen_load.c's, the fetch
 * sequence frozen_seq.c's, the nvme store frozen_io.c's. */
#include <errno.h>
#include <stdlib.h>

#include "sched/frozen.h"
#include "sched/plan.h"
#include "sched/tiers.h"

static uint64_t stored_bytes(const struct zn_frozen *fz, int l)
{
	return zn_frozen_stored_bytes(fz, l);
}

/* a slot of numel floats whose stored layer is up to bytes (frozen_plan.c's sizes) */
static int alloc_slot(struct zn_frozen *fz, struct zn_fslot *s, uint64_t numel, uint64_t bytes)
{
	const struct zn_engine_plan *p = fz->c.plan;
	int rc = 0;

	if (p->frozen_wide)
		rc = zn_tiers_dalloc(fz->c.dev, &s->f32_d, zn_plan_device_alloc_bytes(numel * 4));
	else if (p->frozen_q4)
		rc = zn_tiers_dalloc(fz->c.dev, (void **)&s->w16_d,
				     zn_plan_device_alloc_bytes(numel * 2));
	if (!rc && p->frozen_home != ZN_TIER_DEVICE && (p->frozen_q4 || p->frozen_elem_bytes == 2))
		rc = zn_tiers_dalloc(fz->c.dev, &s->stage_d, zn_plan_device_alloc_bytes(bytes));
	if (!rc && p->frozen_q4)
		rc = zn_tiers_dalloc(fz->c.dev, (void **)&s->absmax_d,
				     zn_plan_device_alloc_bytes(fz->q4_scratch));
	return rc;
}

static void free_slot(struct zn_frozen *fz, struct zn_fslot *s)
{
	zn_device_free(fz->c.dev, s->f32_d);
	zn_device_free(fz->c.dev, s->stage_d);
	zn_device_free(fz->c.dev, s->w16_d);
	zn_device_free(fz->c.dev, s->absmax_d);
	free(s->xres);
}

uint64_t zn_frozen_pinned_bytes(const struct zn_frozen *fz)
{
	return fz->pinned_bytes;
}

int zn_frozen_prepare(struct zn_frozen *fz, const struct zn_frozen_shape *sh)
{
	int rc;

	fz->sh = *sh;
	rc = zn_frozen_q4_prepare(fz);
	return rc ? rc : zn_frozen_experts_prepare(fz);
}

void zn_frozen_plan_input(const struct zn_frozen *fz, struct zn_engine_plan_input *pin)
{
	pin->frozen_numel = fz->sh.numel;
	pin->frozen_q4_bytes = fz->q4_bytes;
	pin->frozen_q4_scratch = fz->q4_scratch;
	pin->frozen_expert_numel = fz->x_numel;
	pin->frozen_experts = fz->x_experts;
}

int zn_frozen_create(struct zn_frozen *fz, const struct zn_frozen_config *c)
{
	const struct zn_engine_plan *p = c->plan;
	int rc = 0;

	fz->c = *c;
	if (!p->frozen)
		return 0;
	fz->home = zn_size_calloc((uint64_t)fz->sh.n, sizeof(*fz->home),
				  "the frozen layers' homes");
	if (!fz->home)
		return -ENOMEM;
	if (p->frozen_home == ZN_TIER_NVME)
		rc = zn_frozen_io_open(fz);
	for (int l = 0; !rc && l < fz->sh.n; l++) {
		if (p->frozen_home == ZN_TIER_DEVICE)
			rc = zn_tiers_dalloc(fz->c.dev, &fz->home[l],
					     zn_plan_device_alloc_bytes(stored_bytes(fz, l)));
		else if (p->frozen_home == ZN_TIER_HOST)
			rc = zn_tiers_halloc(fz->c.arena, &fz->home[l], stored_bytes(fz, l));
		if (!rc && p->frozen_home == ZN_TIER_HOST && stored_bytes(fz, l))
			fz->pinned_bytes += zn_plan_host_alloc_bytes(stored_bytes(fz, l));
	}
	if (rc || p->frozen_direct)
		return rc;
	/* the ring's slots, then layer 0's (the held slot) */
	fz->slot = zn_size_calloc((uint64_t)p->frozen_slots + 1, sizeof(*fz->slot),
				  "the frozen slot ring");
	if (!fz->slot)
		return -ENOMEM;
	fz->slot_n = p->frozen_slots + 1;
	rc = alloc_slot(fz, &fz->slot[p->frozen_slots], p->frozen_layer0_numel,
			p->frozen_layer0_bytes);
	for (int i = 0; !rc && i < p->frozen_slots; i++)
		rc = alloc_slot(fz, &fz->slot[i], p->frozen_slot_numel, p->frozen_slot_bytes);
	if (!rc)
		rc = zn_frozen_ring_create(fz);
	return rc ? rc : zn_frozen_experts_create(fz);
}

void zn_frozen_destroy(struct zn_frozen *fz)
{
	if (fz->home && fz->c.plan->frozen_home == ZN_TIER_DEVICE)
		for (int l = 0; l < fz->sh.n; l++)
			zn_device_free(fz->c.dev, fz->home[l]);
	/* the experts' handle on the store first (zn_swap_attach) */
	zn_frozen_experts_destroy(fz);
	if (fz->home) /* create ran */
		zn_frozen_io_close(fz); /* reads in flight into the read buffers first */
	for (int i = 0; fz->slot && i < fz->slot_n; i++)
		free_slot(fz, &fz->slot[i]);
	free(fz->slot);
	zn_ring_destroy(&fz->ring);
	free(fz->home);
	zn_frozen_q4_free(fz);
	zn_frozen_experts_free(fz);
	*fz = (struct zn_frozen){ 0 };
}

