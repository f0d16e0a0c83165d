/* Learning-rate schedules as DeepSpeed computes them (deepspeed/runtime/lr_schedules.py).
 *
 * Pure functions of the scheduler config, the optimizer's lr and an iteration index. With
 * `it` = DeepSpeed's last_batch_iteration (0, 1, ...) and w = max(2, warmup_num_steps):
 *
 *   warmup fraction g(it), it < w:  log:    ln(it + 1) / ln(w)
 *                                   linear: it / w
 *   WarmupLR:        lr = min_lr + (max_lr - min_lr) * (it < w ? g(it) : 1)
 *   WarmupDecayLR:   lr = min_lr + (max_lr - min_lr) * (it < w ? g(it) :
 *                         max(0, (total - it) / max(1, total - w)))
 *   WarmupCosineLR:  lr = opt_lr * ratio, ratio = it < w ?
 *                         min_ratio + g(it) * (1 - min_ratio) :
 *                         max(0, cos_min + (1 - cos_min) * (1 + cos(pi * s / (total - w))) / 2)
 *                         with s = it - w + 1
 *   no scheduler:    lr = opt_lr (constant)
 *   OneCycle:        with b = it + 1, T = first + second (second 0 = first), r = first / T,
 *                    x = 1 + b/T - floor(1 + b/T), f = x <= r ? x/r : (x - 1)/(r - 1):
 *                    it < T: lr = min_lr + (max_lr - min_lr) f, beta1 = max_mom - (max_mom -
 *                    min_mom) f; after: with d = (it - T + 1) / decay_step_size (0 if that
 *                    is 0), lr = min_lr / (1 + decay_lr_rate d), beta1 = max_mom (1 +
 *                    decay_mom_rate d); beta2 = 0.99 while cycle_momentum (DeepSpeed's pair)
 *   LRRangeTest:     lr = min_lr (1 + step_rate v), v = (it + 1) / step_size, floored
 *                    when staircase
 *
 * When the step uses which iteration: DeepSpeed's engine calls scheduler.step() AFTER each
 * optimizer step, and its schedulers do not touch the optimizer at construction, so the
 * first optimizer step runs with the optimizer's own lr and optimizer step k >= 2 runs with
 * the schedule at it = k - 2. OneCycle and LRRangeTest do set the optimizer's lr (and
 * OneCycle its betas, to (cycle_min_mom, 0.99)) when built, so their step 1 runs with the
 * formula at it = -1 (and beta1 = cycle_min_mom). zn_lr_for_step and zn_betas_for_step
 * reproduce that; zn_lr_at and zn_mom_at are the bare formulas.
 * All arithmetic in double, as Python does; the result is rounded to float once.
 *
 *     float lr = zn_lr_for_step(&cfg.scheduler, cfg.optimizer.lr, step);  // step 1, 2, ...
 */
#ifndef ZN_SCHED_LR_H
#define ZN_SCHED_LR_H

#include <stdint.h>

#include "zinc.h"

/* DeepSpeed's get_lr() at last_batch_iteration = it (it < 0 gives 0, as DeepSpeed does). */
double zn_lr_at(const struct zn_scheduler_config *s, double opt_lr, int64_t it);

/* The lr optimizer step `step` (1-based) uses under DeepSpeed's engine. */
float zn_lr_for_step(const struct zn_scheduler_config *s, float opt_lr, int64_t step);

/* OneCycle's beta1 at iteration it. */
double zn_mom_at(const struct zn_scheduler_config *s, int64_t it);

/* The betas optimizer step `step` uses: the optimizer's, or OneCycle's with cycle_momentum. */
void zn_betas_for_step(const struct zn_scheduler_config *s, float beta1, float beta2,
		       int64_t step, float *b1, float *b2);

#endif
