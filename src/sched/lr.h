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
 *
 * When the step uses which iteration: DeepSpeed's engine calls scheduler.step() AFTER each
 * optimizer step, and its schedulers do not touch the optimizer at construction, so the
 * first optimizer step runs with the optimizer's own lr and optimizer step k >= 2 runs with
 * the schedule at it = k - 2. zn_lr_for_step reproduces that; zn_lr_at is the bare formula.
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

#endif
