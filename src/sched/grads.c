/* Gradient homes: the pinned ring (grads.h). */
#include "sched/grads.h"

#include <errno.h>

#include "sched/engine_impl.h"

static bool ring_on(const struct zn_engine *e)
{
	return e->plan.grad_home == ZN_GRAD_PINNED_RING && e->plan.grad_ring > 0;
}

int zn_grads_create(struct zn_engine *e)
{
	float *ring[ZN_PLAN_GRAD_RING] = { 0 };
	int rc = 0;

	if (!ring_on(e))
		return 0;
	for (int i = 0; !rc && i < e->plan.grad_ring; i++)
		rc = zn_tiers_halloc(e, &ring[i], e->plan.grad_ring_numel * 4);
	for (int l = 1; !rc && l < e->n; l++)
		e->L[l].grad_h = ring[(e->n - 1 - l) % e->plan.grad_ring];
	return rc;
}

int zn_grads_step_begin(struct zn_engine *e)
{
	return ring_on(e) ? zn_swapio_opt_begin(e) : 0;
}

bool zn_grads_updated_in_backward(const struct zn_engine *e, int l)
{
	/* the reduce of layer l - ring (a ring layer) updated it */
	return ring_on(e) && l - e->plan.grad_ring >= 1;
}

int zn_grads_before_reduce(struct zn_engine *e, int l)
{
	int prev = l + e->plan.grad_ring;

	if (!ring_on(e) || l < 1 || prev > e->n - 1)
		return 0;
	return zn_optim_update_host(e, prev);
}

void zn_engine_memory(const struct zn_engine *e, struct zn_engine_memory *out)
{
	*out = (struct zn_engine_memory){
		.device_bytes = e->plan.device_bytes,
		.pinned_plan_bytes = e->plan.host_bytes,
		.pinned_reserved_bytes = e->arena ? zn_arena_size(e->arena) : 0,
		.pinned_budget_bytes = e->pinned_budget,
		.grad_pinned_bytes = e->plan.host_grad_bytes,
		.grad_home = zn_plan_grad_home_name(e->plan.grad_home),
		.grad_ring = ring_on(e) ? e->plan.grad_ring : 0,
	};
}
