/* zn_engine_step: the micro-batches (step.c), the optimizer (optim.c), the end of the step
 * (every stream drained, comm errors collected), the loss averaged over ranks and the
 * step-time split: fwd and bwd are compute-stream time between events, opt the AdamW time
 * (CPU, or the device's workers), wait the time the calling thread was blocked on a
 * gradient shard or the norm before the optimizer could go on (not the end-of-step drain,
 * which overlaps the last device work). */
#include <errno.h>
#include <stdlib.h>

#include "core/log.h"
#include "sched/engine_impl.h"
#include "sched/lr.h"

static int drain(struct zn_engine *e)
{
	struct zn_stream *s[] = { e->compute, e->copy_in, e->copy_out, e->comm_s };
	int rc = 0;

	for (int i = 0; i < 4; i++) {
		int r = zn_stream_synchronize(s[i]);

		if (!rc)
			rc = r;
	}
	if (!rc)
		rc = zn_comm_check(e->comm);
	return rc;
}

/* stage 0-1 gradients accumulate in place over the micro-batches: zero them first */
static int zero_full_grads(struct zn_engine *e)
{
	int rc = 0;

	for (int l = 0; !rc && l < e->n; l++)
		if (e->L[l].grad_d)
			rc = zn_memset_async(e->compute, e->L[l].grad_d, 0,
					     e->L[l].sh.padded_numel * 4);
	return rc;
}

static int mean_loss(struct zn_engine *e, float *loss)
{
	uint64_t n = (uint64_t)e->gas * (uint64_t)e->B * (uint64_t)e->T;
	double sum = 0.0;
	float mean;
	int rc = 0;

	for (uint64_t i = 0; i < n; i++)
		sum += e->loss_h[i];
	mean = (float)(sum / (double)n);
	if (e->world > 1) {
		rc = zn_comm_all_reduce(e->comm, NULL, &mean, 1, ZN_DTYPE_F32);
		mean /= (float)e->world;
	}
	*loss = mean;
	return rc;
}

static void timings(struct zn_engine *e, struct zn_step_stats *st)
{
	for (int m = 0; m < e->gas; m++) {
		float f = 0.0f, b = 0.0f;

		if (!zn_event_elapsed_ms(e->tev[3 * m], e->tev[3 * m + 1], &f))
			st->fwd_ms += f;
		if (!zn_event_elapsed_ms(e->tev[3 * m + 1], e->tev[3 * m + 2], &b))
			st->bwd_ms += b;
	}
	st->opt_ms = e->host_opt_ms + (double)atomic_load(&e->opt_ns) / 1e6;
	st->host_wait_ms = e->wait_ms;
}

int zn_engine_step(struct zn_engine *e, const int *inputs_h, const int *targets_h,
		   struct zn_step_stats *st)
{
	double t0 = zn_engine_now_ms();
	int rc;

	*st = (struct zn_step_stats){ 0 };
	e->step++;
	e->lr = zn_lr_for_step(&e->cfg.scheduler, e->cfg.optimizer.lr, e->step);
	e->clip_coef = 1.0f;
	e->grad_norm = 0.0f;
	e->wait_ms = 0.0;
	e->host_opt_ms = 0.0;
	atomic_store(&e->opt_ns, 0);
	rc = zero_full_grads(e);
	for (int m = 0; !rc && m < e->gas; m++) {
		rc = zn_step_micro(e, m, inputs_h, targets_h);
		/* offloaded shards of this micro-batch are added on the host before the next
		 * micro-batch's shards land in the receive buffers */
		for (int l = e->n - 1; !rc && m < e->gas - 1 && l >= 0; l--)
			rc = zn_optim_host_accumulate(e, l);
	}
	if (!rc)
		rc = zn_optim_step(e);
	{
		int r = drain(e);

		if (!rc)
			rc = r;
		/* nvme write-behind (and, after a failure, anything still in flight) */
		r = zn_swapio_quiesce(e);
		if (!rc)
			rc = r;
	}
	if (!rc)
		rc = mean_loss(e, &st->loss);
	if (rc) {
		zn_error("step %lld failed: %s", (long long)e->step, zn_strerror(rc));
		return rc;
	}
	st->step = e->step;
	st->lr = e->lr;
	st->grad_norm = e->grad_norm;
	st->tokens = (uint64_t)e->gas * e->B * e->T * e->world;
	timings(e, st);
	st->step_ms = zn_engine_now_ms() - t0;
	/* What the step loses to data movement: the wall time the compute stream was not
	 * computing (fetches, reductions, the optimizer's exposed tail, host sync). */
	st->wait_ms = st->step_ms - st->fwd_ms - st->bwd_ms;
	if (st->wait_ms < 0)
		st->wait_ms = 0;
	st->device_peak_bytes = zn_device_peak_bytes(e->dev);
	st->pinned_bytes = e->arena ? zn_arena_used_bytes(e->arena) : 0;
	st->plan_device_bytes = e->plan.device_bytes;
	return 0;
}
