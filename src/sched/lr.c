/* DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle and LRRangeTest (formulas
 * in lr.h). Pure. */
#include "sched/lr.h"

#include <math.h>

static double warmup_fraction(const struct zn_scheduler_config *s, int64_t it, double w)
{
	if (s->warmup_log)
		return log((double)it + 1.0) / log(w);
	return (double)it / w;
}

/* OneCycle's position in the cycle: 0 at its ends, 1 at the peak (DeepSpeed's
 * _get_scale_factor with batch_iteration = it + 1). */
static double one_cycle_scale(const struct zn_scheduler_config *s, int64_t it)
{
	double first = (double)s->cycle_first_step_size;
	double second = s->cycle_second_step_size > 0 ? (double)s->cycle_second_step_size : first;
	double total = first + second, ratio = first / total;
	double bi = (double)it + 1.0;
	double x = 1.0 + bi / total - floor(1.0 + bi / total);

	return x <= ratio ? x / ratio : (x - 1.0) / (ratio - 1.0);
}

static double one_cycle_total(const struct zn_scheduler_config *s)
{
	double first = (double)s->cycle_first_step_size;

	return first + (s->cycle_second_step_size > 0 ? (double)s->cycle_second_step_size : first);
}

/* Intervals of decay_step_size after the cycle (0 when decay_step_size is 0: no decay). */
static double one_cycle_decay(const struct zn_scheduler_config *s, int64_t it)
{
	double d = (double)it - one_cycle_total(s) + 1.0;

	return s->decay_step_size > 0 ? d / (double)s->decay_step_size : 0.0;
}

static double one_cycle_lr(const struct zn_scheduler_config *s, int64_t it)
{
	double lo = s->cycle_min_lr, hi = s->cycle_max_lr;

	if ((double)it < one_cycle_total(s))
		return lo + (hi - lo) * one_cycle_scale(s, it);
	return lo / (1.0 + (double)s->decay_lr_rate * one_cycle_decay(s, it));
}

double zn_mom_at(const struct zn_scheduler_config *s, int64_t it)
{
	double lo = s->cycle_min_mom, hi = s->cycle_max_mom;

	if ((double)it < one_cycle_total(s))
		return hi - (hi - lo) * one_cycle_scale(s, it);
	return hi * (1.0 + (double)s->decay_mom_rate * one_cycle_decay(s, it));
}

static double range_test_lr(const struct zn_scheduler_config *s, int64_t it)
{
	double v = ((double)it + 1.0) / (double)s->lr_range_test_step_size;

	if (s->lr_range_test_staircase)
		v = floor(v);
	return s->lr_range_test_min_lr * (1.0 + s->lr_range_test_step_rate * v);
}

double zn_lr_at(const struct zn_scheduler_config *s, double opt_lr, int64_t it)
{
	/* DeepSpeed clamps the warmup length to 2 so ln(w) is never 0. */
	double w = s->warmup_num_steps < 2 ? 2.0 : (double)s->warmup_num_steps;
	double total = (double)s->total_num_steps;
	double lo = s->warmup_min_lr, hi = s->warmup_max_lr;
	double g, ratio;

	if (s->type == ZN_LR_CONSTANT)
		return opt_lr;
	/* these two set the optimizer's lr when built: iteration -1 is the first step's */
	if (s->type == ZN_LR_ONE_CYCLE)
		return one_cycle_lr(s, it < -1 ? -1 : it);
	if (s->type == ZN_LR_RANGE_TEST)
		return range_test_lr(s, it < -1 ? -1 : it);
	if (it < 0)
		return 0.0;
	switch (s->type) {
	case ZN_LR_WARMUP:
		g = (double)it < w ? warmup_fraction(s, it, w) : 1.0;
		return lo + (hi - lo) * g;
	case ZN_LR_WARMUP_DECAY:
		if ((double)it < w) {
			g = warmup_fraction(s, it, w);
		} else {
			g = (total - (double)it) / fmax(1.0, total - w);
			g = fmax(0.0, g);
		}
		return lo + (hi - lo) * g;
	case ZN_LR_WARMUP_COSINE:
		if ((double)it < w) {
			g = warmup_fraction(s, it, w);
			ratio = s->warmup_min_ratio + g * (1.0 - s->warmup_min_ratio);
		} else {
			double step = (double)it - w + 1.0;

			/* DeepSpeed divides by zero here; the engine refuses total <= warmup. */
			if (total - w <= 0.0)
				return opt_lr * s->cos_min_ratio;

			ratio = (1.0 + cos(M_PI * step / (total - w))) / 2.0;
			ratio = fmax(0.0, s->cos_min_ratio + (1.0 - s->cos_min_ratio) * ratio);
		}
		return opt_lr * ratio;
	default:
		return opt_lr;
	}
}

float zn_lr_for_step(const struct zn_scheduler_config *s, float opt_lr, int64_t step)
{
	/* scheduler.step() runs after optimizer.step(): step 1 sees the optimizer's lr, or
	 * the lr OneCycle and LRRangeTest set when built (their formula at iteration -1). */
	if (s->type == ZN_LR_ONE_CYCLE || s->type == ZN_LR_RANGE_TEST)
		return (float)zn_lr_at(s, opt_lr, step < 1 ? -1 : step - 2);
	if (s->type == ZN_LR_CONSTANT || step <= 1)
		return opt_lr;
	return (float)zn_lr_at(s, opt_lr, step - 2);
}

void zn_betas_for_step(const struct zn_scheduler_config *s, float beta1, float beta2,
		       int64_t step, float *b1, float *b2)
{
	*b1 = beta1;
	*b2 = beta2;
	if (s->type != ZN_LR_ONE_CYCLE || !s->cycle_momentum)
		return;
	/* OneCycle sets betas = (cycle_min_mom, 0.99) when built, then (mom(it), 0.99) */
	*b2 = 0.99f;
	*b1 = step <= 1 ? s->cycle_min_mom : (float)zn_mom_at(s, step - 2);
}
