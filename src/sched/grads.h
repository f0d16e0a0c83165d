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
 */
#ifndef ZN_SCHED_GRADS_H
#define ZN_SCHED_GRADS_H

#include <stdbool.h>
#include <stdint.h>

#include "zinc.h"

struct zn_engine;

/* After the layers' buffers: the ring's views, and each ring layer's grad_h. */
int zn_grads_create(struct zn_engine *e);

/* At the start of a step: the optimizer's nvme read-ahead (the ring updates during the
 * backward). */
int zn_grads_step_begin(struct zn_engine *e);

/* Before layer l's shard is copied down (its last micro-batch), l's ring buffer must be
 * free: the layer that used it before, which the step updates first (zn_optim_update_host),
 * or -1 (no ring, or the buffer is fresh). */
int zn_grads_ring_due(const struct zn_engine *e, int l);

/* Whether layer l was updated during the backward (zn_optim_step skips it). */
bool zn_grads_updated_in_backward(const struct zn_engine *e, int l);

/* zn_engine_memory from e's plan, with the arena of pinned_reserved bytes (0: none). */
void zn_grads_memory(const struct zn_engine *e, uint64_t pinned_reserved,
		     struct zn_engine_memory *out);

#endif
