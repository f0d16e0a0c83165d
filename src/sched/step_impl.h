/* Internal to the step (step.c, step_lm.c): the pieces both orders of a step share, so the
 * layer-major step (lmajor.h) runs the same launches, seeds, scales and reductions as
 * micro-batch order and its result is bit-identical. */
#ifndef ZN_SCHED_STEP_IMPL_H
#define ZN_SCHED_STEP_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

struct zn_engine;

/* One layer's forward or backward, run by the model's ops on the compute stream (the
 * struct is copied by zn_launch). */
struct zn_layer_call {
	struct zn_model model;
	struct zn_layer_io io;
};

/* a layer's forward or backward on the compute stream (a traced span "fwd l" / "bwd l") */
int zn_step_launch(struct zn_engine *e, bool fwd, int l, const struct zn_layer_call *a);
/* layer l's parameters (p, and p0 for a tie to layer 0) into io, fp32 or bf16 compute */
void zn_step_set_params(const struct zn_engine *e, struct zn_layer_io *io, int l,
			const float *p, const float *p0);
/* layer 0's parameters p0 when layer l ties to it, else NULL */
const float *zn_step_tied(const struct zn_engine *e, int l, const float *p0);
/* micro-batch micro's random stream (LoRA dropout) */
uint64_t zn_step_seed(const struct zn_engine *e, int micro);
/* the loss gradient's scale of every backward of this step */
float zn_step_dloss_scale(const struct zn_engine *e);
/* the scale of the auxiliary loss's gradient (model.h zn_layer_io.aux; its buffer:
 * acts.h zn_acts_aux, one a micro-batch zeroed at the step's start) */
float zn_step_aux_scale(const struct zn_engine *e);
/* THE rule for when AdamW runs: during the backward, behind each layer's last reduction
 * (the optimizer on the device, nothing waiting for the global norm), else after it */
bool zn_step_adamw_during_backward(const struct zn_engine *e);
/* layer l's reduction of micro-batch micro; after the last micro-batch's, its AdamW when
 * the step's rule says so (bwd_index picks the gradient ring slot, stage >= 2) */
int zn_step_reduce_update(struct zn_engine *e, int l, int bwd_index, int micro);

#endif
