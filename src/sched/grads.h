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
 * ZN_GRAD_NVME_HELD (grads_nvme.c; optimizer on nvme, gradients needed after the backward,
 * and held pinned they would not fit the pinned budget): layers 1 .. n-1 land in plan.grad_ring
 * pinned buffers as the ring's do (layer l in buffer (n-1-l) % ring, in every micro-batch
 * that brings a shard down) and each layer has a gradient extent in a swap store of its own
 * on the optimizer's nvme paths. Before a buffer takes the next layer's shard, the layer in
 * it is written to its extent: after the first micro-batch the sum so far is read back into
 * the read-back buffer first and added (sum + new, the held home's order), and in the last
 * micro-batch its squared sum is taken for the norm. The rest go at the end of each
 * micro-batch. The update reads each shard back into its buffer, the next layer's read
 * ahead while AdamW runs. Layer 0 stays pinned (its own shard and receive shard). Host
 * gradient memory: ring + 1 buffers and layer 0's, whatever the layer count; the same
 * arithmetic in the same order as the held home, so the same bits.
 */
#ifndef ZN_SCHED_GRADS_H
#define ZN_SCHED_GRADS_H

#include <stdbool.h>

#include "nvme/swap.h"
#include "sched/plan.h"

struct zn_engine;

struct zn_grads {
	struct zn_swap *swap;                   /* the gradient extents (nvme home) */
	float *buf[ZN_PLAN_GRAD_RING];          /* the ring's (landing) buffers */
	float *back;                            /* nvme: the sum so far, read back */
	int slot_layer[ZN_PLAN_GRAD_RING];      /* nvme: layer landing in the buffer (-1) */
	bool slot_add[ZN_PLAN_GRAD_RING];       /* its extent holds earlier micro-batches */
	bool slot_last[ZN_PLAN_GRAD_RING];      /* its last micro-batch: take the squared sum */
	bool *sumsq_done;                       /* per layer, this step: L[l].sumsq is taken */
	struct zn_swap_req rd;                  /* the update's read ahead */
	int rd_layer;                           /* its layer (-1: none in flight) */
};

/* After the layers' buffers: the ring's views, and each ring layer's grad_h. */
int zn_grads_create(struct zn_engine *e);
/* After zn_swapio_create (its aio engine): the nvme home's gradient extents. */
int zn_grads_nvme_create(struct zn_engine *e);
/* Waits what is in flight; removes the extents. */
void zn_grads_destroy(struct zn_engine *e);

/* At the start of a step: the optimizer's nvme read-ahead (the ring updates during the
 * backward). */
int zn_grads_step_begin(struct zn_engine *e);

/* Before layer l's reduction in micro-batch `micro`: frees the buffer its shard lands in
 * (ring: by updating the layer that used it, in the last micro-batch; nvme: by writing it). */
int zn_grads_before_reduce(struct zn_engine *e, int l, int micro);
/* After a micro-batch's backward is enqueued: nvme: the layers still in buffers written. */
int zn_grads_micro_end(struct zn_engine *e);
/* Before layer l's AdamW on the host: nvme: its shard read back into L[l].grad_h. */
int zn_grads_before_update(struct zn_engine *e, int l);
/* grads_nvme.c for grads.c: the step's start (nothing in buffers, no squared sum taken)
 * and layer l's shard about to land in its buffer */
int zn_grads_nvme_step_begin(struct zn_engine *e);
int zn_grads_nvme_land(struct zn_engine *e, int l, int micro);
/* optim.c: layer l's squared gradient sum into L[l].sumsq (from L[l].grad_h) */
int zn_optim_layer_sumsq(struct zn_engine *e, int l);

/* Whether L[l].sumsq already holds this step's squared sum (nvme: taken before the write). */
bool zn_grads_sumsq_done(const struct zn_engine *e, int l);

/* Whether layer l was updated during the backward (zn_optim_step skips it). */
bool zn_grads_updated_in_backward(const struct zn_engine *e, int l);

#endif
