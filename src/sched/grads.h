/* Gradient homes (docs/memory.md): where the gradient shards AdamW reads live between the
 * backward and the update, as the plan decides (plan.h, enum zn_grad_home).
 *
 * ZN_GRAD_PINNED_RING (optimizer on nvme, one micro-batch, no clipping, not fp16): layers
 * 1 .. n-1 share plan.grad_ring pinned buffers, layer l (backward position n-1-l) using
 * buffer (n-1-l) % ring; layer 0, whose gradient gathers the tied head's until the end of
 * the backward, keeps its own. Before layer l's shard is copied down into its buffer, the
 * layer that used it before, l + ring, is updated: its shard is waited for, its optimizer
 * state (read ahead since the step began) goes through AdamW and is written behind, and
 * the buffer is free. The rest (the last ring layers and layer 0) are updated by
 * zn_optim_step as before. Host gradient memory: (ring + 1) shards, whatever the layer count;
 * the same arithmetic in the same order as the held home, so the same bits.
 *
 * ZN_GRAD_PINNED_HELD: every layer has its own shard for the whole step (tiers.c).
 *
 * State: struct zn_grads (engine field gr), given at create the layers' buffers, the pinned
 * arena and the plan's ring numbers; it reads no other part.
 */
#ifndef ZN_SCHED_GRADS_H
#define ZN_SCHED_GRADS_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/plan.h"

struct zn_arena;
struct zn_layer;

struct zn_grads_config {
	struct zn_layer *L;          /* the layers' buffers (tiers.h), n of them */
	int n;
	struct zn_arena *arena;      /* the pinned arena the ring is carved from */
	enum zn_grad_home home;      /* plan.grad_home */
	int ring;                    /* plan.grad_ring buffers */
	uint64_t ring_numel;         /* plan.grad_ring_numel: each buffer's elements */
};

struct zn_grads {
	int n;
	int ring;                    /* 0: no pinned ring */
};

/* After the layers' buffers: the ring's views, and each ring layer's grad_h. 0 or
 * -ENOMEM. */
int zn_grads_create(struct zn_grads *g, const struct zn_grads_config *c);

/* Before layer l's shard is copied down (its last micro-batch), l's ring buffer must be
 * free: the layer that used it before, which the step updates first (zn_optim_update_host),
 * or -1 (no ring, or the buffer is fresh). */
int zn_grads_ring_due(const struct zn_grads *g, int l);

/* Whether layer l was updated during the backward (zn_optim_step skips it). */
bool zn_grads_updated_in_backward(const struct zn_grads *g, int l);

/* Whether the gradients go through the pinned ring (the optimizer's nvme read-ahead then
 * begins with the step, zn_optim_step does not begin it again). */
bool zn_grads_ring(const struct zn_grads *g);

#endif
