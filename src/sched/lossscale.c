/* DeepSpeed's loss-scale schedule (lossscale.h). */
#include <math.h>

#include "sched/lossscale.h"
#include "zinc.h"

void zn_lossscale_init(struct zn_lossscale *s, const struct zn_precision_config *p)
{
	*s = (struct zn_lossscale){ .dynamic = !(p->loss_scale > 0), .window = p->loss_scale_window,
				    .hysteresis = p->hysteresis, .cur_hysteresis = p->hysteresis,
				    .consecutive = p->consecutive_hysteresis,
				    .min_scale = p->min_loss_scale, .last_overflow_iter = -1 };
	s->scale = s->dynamic ? ldexp(1.0, p->initial_scale_power) : (double)p->loss_scale;
	if (s->window < 1)
		s->window = 1;
	if (s->hysteresis < 1)
		s->hysteresis = s->cur_hysteresis = 1;
}

void zn_lossscale_update(struct zn_lossscale *s, bool overflow)
{
	if (!s->dynamic) {
		s->iter++;
		return;
	}
	if (overflow) {
		if (s->hysteresis == 1 || s->cur_hysteresis == 1) {
			s->scale /= 2.0;
			if (s->scale < s->min_scale)
				s->scale = s->min_scale;
		} else {
			s->cur_hysteresis--;
		}
		s->last_overflow_iter = s->iter;
	} else {
		if (s->consecutive)
			s->cur_hysteresis = s->hysteresis;
		if ((s->iter - s->last_overflow_iter) % s->window == 0) {
			if (!s->consecutive)
				s->cur_hysteresis = s->hysteresis;
			s->scale *= 2.0;
		}
	}
	s->iter++;
}
