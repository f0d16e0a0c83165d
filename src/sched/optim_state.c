/* What the optimizer tells the others (optim.h): the step its figures and loss scale, the
 * stop on a non-finite loss or gradient; the training checkpoint the counters it saves and
 * puts back. The updates themselves are optim.c's. */
#include <math.h>
#include <stdatomic.h>

#include "core/log.h"
#include "sched/optim.h"
#include "sched/runtime.h"

float zn_optim_loss_scale(const struct zn_optim *o)
{
	return o->scale;
}

void zn_optim_stats(const struct zn_optim *o, struct zn_step_stats *st)
{
	st->lr = o->lr;
	st->grad_norm = o->grad_norm;
	st->overflow = o->overflow;
	st->loss_scale = o->scale;
	st->next_loss_scale = o->c.cfg->precision.fp16 ? (float)o->ls.scale : 1.0f;
	st->opt_ms = o->host_opt_ms + (double)atomic_load(&o->opt_ns) / 1e6;
}

int zn_optim_check_finite(struct zn_optim *o, float loss)
{
	int bad, rc;

	if (o->overflow)
		return 0; /* fp16: the overflow skipped the step instead (zn_optim_step) */
	rc = zn_optim_first_nonfinite(o, &bad);
	if (!rc && (bad >= 0 || !isfinite(loss) || !isfinite(o->grad_norm)))
		rc = zn_optim_report_nonfinite(o, loss, bad);
	return rc;
}

void zn_optim_counters(const struct zn_optim *o, int64_t *skipped, struct zn_lossscale *ls)
{
	*skipped = o->skipped;
	*ls = o->ls;
}

void zn_optim_resume_counters(struct zn_optim *o, int64_t skipped,
			      const struct zn_lossscale *ls)
{
	o->skipped = skipped;
	if (!o->c.cfg->precision.fp16)
		return;
	/* the scaler's settings come from this run's config; a dynamic scaler's position
	 * from an fp16 checkpoint; a static scale is the config's */
	if (ls && o->ls.dynamic) {
		o->ls.scale = ls->scale;
		o->ls.cur_hysteresis = ls->cur_hysteresis < o->ls.hysteresis ?
					       ls->cur_hysteresis : o->ls.hysteresis;
		o->ls.iter = ls->iter;
		o->ls.last_overflow_iter = ls->last_overflow_iter;
		if (o->ls.scale < o->ls.min_scale)
			o->ls.scale = o->ls.min_scale;
	} else if (o->c.rt->rank == 0) {
		zn_info("--resume: the checkpoint has no %s loss scale to go on with: it starts "
			"at %g", ls ? "dynamic" : "fp16", o->ls.scale);
	}
}
