/* fp16 loss scaling, DeepSpeed's schedule (its LossScaler and DynamicLossScaler), pure.
 *
 * Static (loss_scale > 0): the scale never changes; an overflow still skips the step.
 * Dynamic (loss_scale 0): the scale starts at 2^initial_scale_power. After an overflow:
 * if the hysteresis left is 1 (or hysteresis is 1) the scale is halved, never below
 * min_loss_scale; otherwise one unit of hysteresis is used up and the scale stays. After a
 * good step: with consecutive_hysteresis the hysteresis is refilled; when the steps since
 * the last overflow are a multiple of loss_scale_window the scale doubles (and, without
 * consecutive_hysteresis, the hysteresis is refilled). tests/ref/lossscale_ref.py is the
 * float64 reference of the same schedule.
 */
#ifndef ZN_SCHED_LOSSSCALE_H
#define ZN_SCHED_LOSSSCALE_H

#include <stdbool.h>
#include <stdint.h>

struct zn_precision_config;

struct zn_lossscale {
	bool dynamic;
	double scale;
	double min_scale;
	int window;
	int hysteresis;      /* the configured value (DeepSpeed's delayed_shift) */
	int cur_hysteresis;  /* what is left */
	bool consecutive;
	int64_t iter;        /* updates so far */
	int64_t last_overflow_iter;
};

/* From the fp16 config (precision.loss_scale, initial_scale_power, loss_scale_window,
 * hysteresis, consecutive_hysteresis, min_loss_scale); the config was validated. */
void zn_lossscale_init(struct zn_lossscale *s, const struct zn_precision_config *p);
/* After a step's overflow check: overflow is true when the gradient norm is not finite. */
void zn_lossscale_update(struct zn_lossscale *s, bool overflow);

#endif
