/* DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR (formulas in lr.h). Pure. */
#include "sched/lr.h"

#include <math.h>

static double warmup_fraction(const struct zn_scheduler_config *s, int64_t it, double w)
{
	if (s->warmup_log)
		return log((double)it + 1.0) / log(w);
	return (double)it / w;
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
	/* scheduler.step() runs after optimizer.step(): step 1 sees the optimizer's lr. */
	if (s->type == ZN_LR_CONSTANT || step <= 1)
		return opt_lr;
	return (float)zn_lr_at(s, opt_lr, step - 2);
}
