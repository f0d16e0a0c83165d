/* Gradient homes: the pinned ring (grads.h). */
#include "sched/grads.h"

#include <errno.h>
#include <stdio.h>

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

int zn_grads_ring_due(const struct zn_engine *e, int l)
{
	int prev = l + e->plan.grad_ring;

	return !ring_on(e) || l < 1 || prev > e->n - 1 ? -1 : prev;
}

void zn_grads_memory(const struct zn_engine *e, uint64_t pinned_reserved,
		     struct zn_engine_memory *out)
{
	const struct zn_engine_plan *p = &e->plan;

	*out = (struct zn_engine_memory){
		.device_bytes = p->device_bytes,
		.pinned_plan_bytes = p->host_bytes,
		.pinned_reserved_bytes = pinned_reserved,
		.pinned_budget_bytes = e->pinned_budget,
		.grad_pinned_bytes = p->host_grad_bytes,
		.grad_home = zn_plan_grad_home_name(p->grad_home),
		.grad_ring = ring_on(e) ? p->grad_ring : 0,
		.device_model_bytes = p->dev_param_bytes + p->dev_grad_bytes + p->dev_optim_bytes +
				      p->dev_frozen_bytes,
		.device_working_bytes = p->dev_working_bytes,
		.device_act_bytes = p->dev_act_bytes,
		.pinned_swap_bytes = p->host_swap_bytes,
		.nvme_bytes = p->nvme_optim_bytes + p->nvme_param_bytes + p->nvme_act_bytes +
			      p->nvme_frozen_bytes,
		.frozen_bytes = p->frozen_home_bytes,
		.prefetch_depth = p->prefetch_depth,
		.nvme_step_read_bytes = p->nvme_step_read_bytes,
		.expert_bytes = p->frozen_expert_bytes,
		.step_expert_bytes = p->frozen_step_expert_bytes,
	};
	snprintf(out->schedule, sizeof(out->schedule), "%s", e->sched_line);
}

void zn_engine_memory(const struct zn_engine *e, struct zn_engine_memory *out)
{
	zn_grads_memory(e, e->arena ? zn_arena_size(e->arena) : 0, out);
}
