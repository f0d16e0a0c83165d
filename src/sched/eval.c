/* zn_engine_eval: the forward of each micro-batch as zn_engine_step runs it (step.c's
 * forward), the per-token losses down, nothing else: no gradient buffer is prepared or
 * reduced, no optimizer state read or written. The prefetch sequence (acts.h's uses) is
 * walked to its end without compute so the ring and any checkpoint store are left as a
 * step leaves them: with stage 3 that still issues the backward order's parameter fetches
 * (a forward-only fetch sequence would halve that traffic: not done). */
#include "core/log.h"
#include "sched/engine_impl.h"
#include "sched/frozen.h"
#include "sched/recompute.h"

static int eval_micro(struct zn_engine *e, int micro, const int *inputs_h, const int *targets_h)
{
	const float *p0 = NULL, *f0 = NULL;
	int rc;

	rc = zn_acts_tokens_up(&e->act, micro, inputs_h, targets_h);
	if (rc)
		return rc;
	rc = zn_step_layer0(e, micro, &p0, &f0);
	if (!rc)
		rc = zn_step_forward(e, p0, f0, micro);
	if (!rc)
		rc = zn_acts_losses_down(&e->act, micro, false);
	/* the rest of the use sequence, fetched and released without compute */
	for (int k = e->n - 1; !rc && k < e->act.use_n; k++) {
		const float *p, *f;

		rc = zn_fetch_acquire(&e->pf, k, e->act.use[k].layer, &p);
		if (!rc)
			rc = zn_frozen_acquire(&e->fz, k, e->act.use[k].layer, &f);
		if (!rc)
			rc = zn_recompute_use_before(&e->act.rec, k);
		if (!rc)
			rc = zn_fetch_release(&e->pf, k);
		if (!rc)
			rc = zn_frozen_release(&e->fz, k);
		if (!rc)
			rc = zn_recompute_use_after(&e->act.rec, k);
	}
	if (!rc)
		rc = zn_acts_tokens_done(&e->act);
	if (!rc && micro == e->gas - 1)
		rc = zn_fetch_layer0_release(&e->pf);
	if (!rc && micro == e->gas - 1)
		rc = zn_frozen_layer0_release(&e->fz);
	return rc;
}

int zn_engine_eval(struct zn_engine *e, const int *inputs_h, const int *targets_h, float *loss)
{
	return zn_engine_eval_pos(e, inputs_h, targets_h, NULL, loss);
}

int zn_engine_eval_pos(struct zn_engine *e, const int *inputs_h, const int *targets_h,
		       const int *pos_h, float *loss)
{
	uint64_t n = (uint64_t)e->gas * (uint64_t)e->B * (uint64_t)e->T;
	double sum = 0.0;
	float mean = 0.0f;
	int rc = zn_comm_check(e->rt.comm), r;

	/* packed rows: their positions; windows (pos_h NULL): none, whatever the last
	 * training step staged */
	if (!rc)
		rc = zn_step_positions(e, targets_h, pos_h);
	if (!rc) {
		zn_acts_stage_tokens(&e->act, &inputs_h, &targets_h);
		rc = zn_engine_count_labels(e, targets_h);
	}
	for (int m = 0; !rc && m < e->gas; m++)
		rc = eval_micro(e, m, inputs_h, targets_h);
	r = zn_runtime_drain(&e->rt);
	if (!rc)
		rc = r;
	r = zn_swapio_quiesce(&e->sw);
	if (!rc)
		rc = r;
	r = zn_recompute_quiesce(&e->act.rec);
	if (!rc)
		rc = r;
	if (rc)
		return rc;
	for (uint64_t i = 0; i < n; i++)
		sum += e->act.loss_h[i];
	if (!e->all_labels)
		return zn_engine_label_mean(e, sum, loss);
	mean = (float)(sum / (double)n);
	if (e->rt.world > 1) {
		rc = zn_comm_all_reduce(e->rt.comm, NULL, &mean, 1, ZN_DTYPE_F32);
		mean /= (float)e->rt.world;
	}
	*loss = mean;
	return rc;
}
