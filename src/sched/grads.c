/* Gradient homes: the pinned ring (grads.h). */
#include "sched/grads.h"

#include <errno.h>

#include "cpu/arena.h"
#include "sched/tiers.h"

int zn_grads_create(struct zn_grads *g, const struct zn_grads_config *c)
{
	float *ring[ZN_PLAN_GRAD_RING] = { 0 };
	uint64_t bytes = c->ring_numel * 4;
	int rc = 0;

	*g = (struct zn_grads){ .n = c->n };
	if (c->home != ZN_GRAD_PINNED_RING || c->ring <= 0)
		return 0;
	g->ring = c->ring;
	for (int i = 0; !rc && bytes && i < c->ring; i++)
		rc = zn_arena_alloc(c->arena, zn_plan_host_alloc_bytes(bytes), 0,
				    (void **)&ring[i]);
	for (int l = 1; !rc && l < c->n; l++)
		c->L[l].grad_h = ring[(c->n - 1 - l) % c->ring];
	return rc;
}

bool zn_grads_ring(const struct zn_grads *g)
{
	return g->ring > 0;
}

bool zn_grads_updated_in_backward(const struct zn_grads *g, int l)
{
	/* the reduce of layer l - ring (a ring layer) updated it */
	return g->ring > 0 && l - g->ring >= 1;
}

int zn_grads_ring_due(const struct zn_grads *g, int l)
{
	int prev = l + g->ring;

	return g->ring <= 0 || l < 1 || prev > g->n - 1 ? -1 : prev;
}
