/* Gradient reduction: where each layer's gradient goes after its backward (see reduce.c):
 * stage 0-1 all-reduce of the full buffer, stage 2-3 reduce-scatter of a full buffer from a
 * small ring into this rank's shard (device or pinned host). State: struct zn_reduce (engine
 * field rd), given at create the runtime, the tracer, the layers' buffers (tiers.h) and the
 * plan's numbers it reads; it reads no other part.
 *
 *     rc = zn_reduce_create(&r, &(struct zn_reduce_config){ .rt = rt, .tr = tr, .L = L, ... });
 *     rc = zn_reduce_prepare(&r, l, b);       // before layer l's backward
 *     ... backward into zn_reduce_grad_full(&r, l, b) ...
 *     rc = zn_reduce_layer(&r, l, b, micro);  // right after it is enqueued
 */
#ifndef ZN_SCHED_REDUCE_H
#define ZN_SCHED_REDUCE_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu/device.h"
#include "sched/plan.h"

struct zn_layer;
struct zn_runtime;
struct zn_tracer;

/* What the reduction is given: the parts it uses and the plan's numbers (borrowed, they
 * outlive it). */
struct zn_reduce_config {
	struct zn_runtime *rt;
	struct zn_tracer *tr;
	struct zn_layer *L;         /* the layers' buffers (tiers.h), n of them */
	int n, gas, stage;
	bool overlap_comm;          /* zinc.zero_optimization.overlap_comm */
	enum zn_tier grads;         /* where this rank's gradient shard goes (plan.pl.grads) */
	int grad_slots;             /* plan.grad_slots: 0, no full-gradient ring */
	uint64_t layer0_numel, slot_numel; /* the ring's sizes (plan.h) */
};

/* A full-layer fp32 gradient buffer (stage >= 2) before its reduce-scatter. */
struct zn_gslot {
	float *d;
	struct zn_event *free;   /* its last reduce-scatter result has been consumed */
};

struct zn_reduce {
	struct zn_reduce_config c;
	struct zn_gslot gslot0;  /* layer 0's full gradient: final layer's bwd .. layer 0's */
	struct zn_gslot gring[ZN_PLAN_GRAD_SLOTS];
};

/* the ring's device buffers and events (none without grad_slots); 0 or a negative code;
 * destroy accepts a half-built or never-created (zeroed) reduction */
int zn_reduce_create(struct zn_reduce *r, const struct zn_reduce_config *c);
void zn_reduce_destroy(struct zn_reduce *r);
/* stage 0-1: zero the full gradients (they accumulate over micro-batches) */
int zn_reduce_zero_full(struct zn_reduce *r);
/* the full gradient buffer layer l's backward accumulates into (bwd_index: its position
 * in the backward, 0 = the final layer) */
float *zn_reduce_grad_full(struct zn_reduce *r, int l, int bwd_index);
/* before layer l's backward: its buffer free and zeroed (stage >= 2) */
int zn_reduce_prepare(struct zn_reduce *r, int l, int bwd_index);
/* after layer l's backward is enqueued: its reduction (the last micro-batch's, stage 0-1) */
int zn_reduce_layer(struct zn_reduce *r, int l, int bwd_index, int micro);

#endif
