/* Gradient reduction: where each layer's gradient goes after its backward (see reduce.c):
 * stage 0-1 all-reduce of the full buffer, stage 2-3 reduce-scatter of a full buffer from a
 * small ring into this rank's shard (device or pinned host). State: struct zn_reduce (engine
 * field rd). */
#ifndef ZN_SCHED_REDUCE_H
#define ZN_SCHED_REDUCE_H

#include "gpu/device.h"
#include "sched/plan.h"

struct zn_engine;

/* A full-layer fp32 gradient buffer (stage >= 2) before its reduce-scatter. */
struct zn_gslot {
	float *d;
	struct zn_event *free;   /* its last reduce-scatter result has been consumed */
};

struct zn_reduce {
	struct zn_gslot gslot0;  /* layer 0's full gradient: final layer's bwd .. layer 0's */
	struct zn_gslot gring[ZN_PLAN_GRAD_SLOTS];
};

int zn_reduce_create(struct zn_engine *e);
void zn_reduce_destroy(struct zn_engine *e);
/* stage 0-1: zero the full gradients (they accumulate over micro-batches) */
int zn_reduce_zero_full(struct zn_engine *e);
/* the full gradient buffer layer l's backward accumulates into (bwd_index: its position
 * in the backward, 0 = the final layer) */
float *zn_reduce_grad_full(struct zn_engine *e, int l, int bwd_index);
/* before layer l's backward: its buffer free and zeroed (stage >= 2) */
int zn_reduce_prepare(struct zn_engine *e, int l, int bwd_index);
/* after layer l's backward is enqueued: its reduction (the last micro-batch's, stage 0-1) */
int zn_reduce_layer(struct zn_engine *e, int l, int bwd_index, int micro);

#endif
