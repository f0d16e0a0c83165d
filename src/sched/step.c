/* The step (docs/architecture.md, "The step"): zn_engine_step reads as the numbered list
 * there. One micro-batch: tokens up, forward over the layers, losses down, backward in
 * reverse with each layer's gradient reduced (reduce.c) as soon as its backward is
 * enqueued; step_common.c's zn_step_adamw_during_backward is the one rule for when AdamW
 * runs.
 *
 * Step-time split: fwd and bwd are compute-stream time between events, opt the AdamW time
 * (CPU, or the device's workers), wait the time the calling thread was blocked on a
 * gradient shard or the norm before the optimizer could go on (not the end-of-step drain,
 * which overlaps the last device work).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "sched/engine_impl.h"
#include "sched/step_impl.h"

/* the device positions when this step has them (packed documents), else NULL */
static const int *step_pos(const struct zn_engine *e)
{
	return e->act.pred > 0 ? e->act.pos_d : NULL;
}

/* aux: the auxiliary loss's buffer (zn_layer_io.aux), or NULL (evaluation) */
static int forward(struct zn_engine *e, const float *p0, const float *f0, int micro, float *aux)
{
	struct zn_layer_call a = { .model = e->model,
				.io = { .tokens = e->act.tok_d, .targets = e->act.tgt_d, .B = e->B,
					.T = e->T, .scratch = e->act.scratch_d, .pos = step_pos(e),
					.seed = zn_step_seed(e, micro), .aux = aux } };
	int n = e->n, rc;

	a.io.L = &e->ld[0];
	zn_step_set_params(e, &a.io, 0, p0, NULL);
	a.io.frozen = f0;
	zn_acts_fwd_io(&e->act, 0, false, &a.io);
	rc = zn_recompute_fwd_before(&e->act.rec, 0);
	if (!rc)
		rc = zn_step_launch(e, true, 0, &a);
	if (!rc)
		rc = zn_recompute_fwd_after(&e->act.rec, 0);
	for (int k = 0; !rc && k < n - 1; k++) {
		int l = k + 1;
		const float *p;

		rc = zn_fetch_acquire(&e->pf, k, l, &p);
		if (!rc)
			rc = zn_frozen_acquire(&e->fz, k, l, &a.io.frozen);
		if (rc)
			break;
		a.io.L = &e->ld[l];
		zn_step_set_params(e, &a.io, l, p, p0);
		a.io.tied_frozen = zn_step_tied(e, l, f0);
		zn_acts_fwd_io(&e->act, l, false, &a.io);
		if (l == n - 1) /* the previous micro-batch's losses must be on the host first */
			rc = zn_acts_losses_into(&e->act, &a.io);
		if (!rc)
			rc = zn_recompute_fwd_before(&e->act.rec, l);
		if (!rc)
			rc = zn_step_launch(e, true, l, &a);
		if (!rc)
			rc = zn_fetch_release(&e->pf, k);
		if (!rc)
			rc = zn_frozen_release(&e->fz, k);
		if (!rc)
			rc = zn_recompute_fwd_after(&e->act.rec, l);
	}
	if (!rc)
		rc = zn_recompute_fwd_end(&e->act.rec);
	return rc;
}

/* Use k of the sequence (acts.h): with activation checkpointing, a recomputed forward
 * (into the run's buffers; never the last layer, whose losses stand) before a backward. */
static int recompute(struct zn_engine *e, int l, const float *p, const float *p0,
		     const float *f, const float *f0, uint64_t seed)
{
	struct zn_layer_call a = { .model = e->model,
				.io = { .L = &e->ld[l], .tokens = e->act.tok_d,
					.targets = e->act.tgt_d, .scratch = e->act.scratch_d,
					.B = e->B, .T = e->T, .frozen = f, .pos = step_pos(e),
					.tied_frozen = zn_step_tied(e, l, f0), .seed = seed } };

	zn_step_set_params(e, &a.io, l, p, p0);
	zn_acts_fwd_io(&e->act, l, true, &a.io);
	return zn_step_launch(e, true, l, &a);
}

static int backward(struct zn_engine *e, const float *p0, const float *f0, int micro)
{
	struct zn_layer_call a = { .model = e->model,
				.io = { .tokens = e->act.tok_d, .targets = e->act.tgt_d, .B = e->B,
					.T = e->T, .scratch = e->act.scratch_d, .pos = step_pos(e),
					.seed = zn_step_seed(e, micro) } };
	int n = e->n, cur = 0, b = 0, rc = 0;

	a.io.dloss_scale = zn_step_dloss_scale(e);
	a.io.aux = zn_acts_aux(&e->act, micro);
	a.io.aux_scale = zn_step_aux_scale(e);
	/* layer 0's gradient buffer first: a tied layer's backward adds into it */
	rc = zn_reduce_prepare(&e->rd, 0, 0);
	for (int k = n - 1; !rc && k < e->act.use_n; k++) {
		struct zn_use u = e->act.use[k];
		int l = u.layer;
		const float *p;

		rc = zn_fetch_acquire(&e->pf, k, l, &p);
		if (!rc)
			rc = zn_frozen_acquire(&e->fz, k, l, &a.io.frozen);
		if (!rc)
			rc = zn_recompute_use_before(&e->act.rec, k);
		if (!rc && u.fwd)
			rc = recompute(e, l, p, p0, a.io.frozen, f0, a.io.seed);
		if (!rc && u.bwd)
			rc = zn_reduce_prepare(&e->rd, l, b);
		if (!rc && u.bwd)
			rc = zn_memset_async(e->rt.compute, e->act.scratch_d, 0, e->act.scratch_bytes);
		if (rc)
			break;
		if (u.bwd) {
			a.io.L = &e->ld[l];
			zn_step_set_params(e, &a.io, l, p, p0);
			a.io.grads = zn_reduce_grad_full(&e->rd, l, b);
			zn_acts_bwd_io(&e->act, l, &a.io);
			a.io.tied_grads = zn_step_tied(e, l, p0) ? zn_reduce_grad_full(&e->rd, 0, 0) : NULL;
			a.io.tied_frozen = zn_step_tied(e, l, f0);
			if (l == n - 1) {
				a.io.dx_out = NULL;
				a.io.dx_in = e->act.dx_d[0];
			} else {
				a.io.dx_out = e->act.dx_d[cur];
				a.io.dx_in = e->act.dx_d[cur ^ 1];
				cur ^= 1;
			}
			rc = zn_step_launch(e, false, l, &a);
		}
		if (!rc)
			rc = zn_fetch_release(&e->pf, k);
		if (!rc)
			rc = zn_frozen_release(&e->fz, k);
		if (!rc)
			rc = zn_recompute_use_after(&e->act.rec, k);
		if (!rc && u.bwd)
			rc = zn_step_reduce_update(e, l, b++, micro);
	}
	if (rc)
		return rc;
	a.io = (struct zn_layer_io){ .L = &e->ld[0],
				     .grads = zn_reduce_grad_full(&e->rd, 0, 0),
				     .dx_out = e->act.dx_d[cur], .tokens = e->act.tok_d,
				     .targets = e->act.tgt_d, .dloss_scale = a.io.dloss_scale,
				     .B = e->B, .T = e->T, .frozen = f0, .seed = a.io.seed,
				     .pos = step_pos(e), .aux = a.io.aux,
				     .aux_scale = a.io.aux_scale };
	zn_step_set_params(e, &a.io, 0, p0, NULL);
	rc = zn_step_launch(e, false, 0, &a);
	if (!rc)
		rc = zn_acts_tokens_done(&e->act);
	if (!rc && micro == e->gas - 1)
		rc = zn_fetch_layer0_release(&e->pf);
	if (!rc && micro == e->gas - 1)
		rc = zn_frozen_layer0_release(&e->fz);
	if (!rc)
		rc = zn_step_reduce_update(e, 0, 0, micro);
	return rc;
}

static int micro_batch(struct zn_engine *e, int micro, const int *inputs_h, const int *targets_h)
{
	const float *p0 = NULL, *f0 = NULL;
	int rc;

	rc = zn_acts_tokens_up(&e->act, micro, inputs_h, targets_h);
	if (!rc)
		rc = zn_event_record(e->act.tev[(size_t)3 * micro], e->rt.compute);
	if (rc)
		return rc;
	rc = zn_step_layer0(e, micro, &p0, &f0);
	if (!rc)
		rc = forward(e, p0, f0, micro, zn_acts_aux(&e->act, micro));
	if (!rc)
		rc = zn_event_record(e->act.tev[(size_t)3 * micro + 1], e->rt.compute);
	/* losses down while the backward runs */
	if (!rc)
		rc = zn_acts_losses_down(&e->act, micro, true);
	if (!rc)
		rc = backward(e, p0, f0, micro);
	if (!rc)
		rc = zn_event_record(e->act.tev[(size_t)3 * micro + 2], e->rt.compute);
	return rc;
}

static int mean_loss(struct zn_engine *e, float *loss)
{
	uint64_t n = (uint64_t)e->gas * (uint64_t)e->B * (uint64_t)e->T;
	double sum = 0.0;
	float mean;
	int rc = 0;

	for (uint64_t i = 0; i < n; i++)
		sum += e->act.loss_h[i];
	if (e->act.pred > 0) {
		/* the sum over the predicted targets of every rank, over their count */
		float s = (float)sum;

		if (e->rt.world > 1)
			rc = zn_comm_all_reduce(e->rt.comm, NULL, &s, 1, ZN_DTYPE_F32);
		*loss = (float)((double)s / e->act.pred);
		return rc;
	}
	if (!e->all_labels) /* masked targets: their losses are 0 (eval.c) */
		return zn_engine_label_mean(e, sum, loss);
	mean = (float)(sum / (double)n);
	if (e->rt.world > 1) {
		rc = zn_comm_all_reduce(e->rt.comm, NULL, &mean, 1, ZN_DTYPE_F32);
		mean /= (float)e->rt.world;
	}
	*loss = mean;
	return rc;
}

/* the auxiliary loss of the micro-batches, averaged over them and the ranks */
static int mean_aux_loss(struct zn_engine *e, float *loss)
{
	float sum = 0.0f;
	int rc = 0;

	for (int m = 0; m < e->gas; m++)
		sum += e->act.aux_h[m];
	sum /= (float)e->gas;
	if (e->rt.world > 1) {
		rc = zn_comm_all_reduce(e->rt.comm, NULL, &sum, 1, ZN_DTYPE_F32);
		sum /= (float)e->rt.world;
	}
	*loss = sum;
	return rc;
}

static void timings(struct zn_engine *e, struct zn_step_stats *st)
{
	for (int m = 0; m < e->gas; m++) {
		struct zn_event **ev = e->act.tev + (size_t)3 * m; /* start, forward end, end */
		float f = 0.0f, b = 0.0f;

		if (!zn_event_elapsed_ms(ev[0], ev[1], &f))
			st->fwd_ms += f;
		if (!zn_event_elapsed_ms(ev[1], ev[2], &b))
			st->bwd_ms += b;
	}
	st->host_wait_ms = e->rt.wait_ms;
}

/* Packed documents (pos_h): positions staged, and e->act.pred, the predicted targets
 * (>= 0) of the global batch: this rank's counted, summed over the ranks (exact in fp32
 * up to 2^24 tokens per step). Without positions pred stays 0 (every target). */
int zn_step_positions(struct zn_engine *e, const int *targets_h, const int *pos_h)
{
	uint64_t n = (uint64_t)e->gas * (uint64_t)e->B * (uint64_t)e->T, count = 0;
	float c;
	int rc = 0;

	e->act.pred = 0;
	if (!pos_h)
		return 0;
	if (!e->act.pos_h) {
		zn_error("engine: positions given, but the engine was created without "
			 "zinc.packing documents (--packing documents)");
		return -EINVAL;
	}
	memcpy(e->act.pos_h, pos_h, n * sizeof(int));
	for (uint64_t i = 0; i < n; i++)
		count += targets_h[i] >= 0;
	c = (float)count;
	if (e->rt.world > 1)
		rc = zn_comm_all_reduce(e->rt.comm, NULL, &c, 1, ZN_DTYPE_F32);
	/* none predicted (every document one token long): loss 0, no gradient */
	e->act.pred = c > 0 ? c : 1;
	return rc;
}

int zn_engine_step(struct zn_engine *e, const int *inputs_h, const int *targets_h,
		   struct zn_step_stats *st)
{
	return zn_engine_step_pos(e, inputs_h, targets_h, NULL, st);
}

int zn_engine_step_pos(struct zn_engine *e, const int *inputs_h, const int *targets_h,
		       const int *pos_h, struct zn_step_stats *st)
{
	double t0 = zn_runtime_now_ms();
	struct zn_aio_stats io0 = { 0 }, io1 = { 0 }, bd0 = { 0 }, bd1 = { 0 };
	uint64_t h2d0 = zn_device_copy_bytes(e->rt.dev, ZN_COPY_H2D);
	uint64_t d2h0 = zn_device_copy_bytes(e->rt.dev, ZN_COPY_D2H);
	uint64_t frozen0 = zn_frozen_read_bytes(&e->fz), xn0, xb0, xn, xb, xr;
	int rc;

	*st = (struct zn_step_stats){ 0 };
	zn_frozen_expert_figures(&e->fz, &xn0, &xb0, &xr);
	/* 1. the step's learning rate, counters reset */
	e->step++;
	e->rt.wait_ms = 0.0;
	zn_swapio_io_stats(&e->sw, &io0);
	/* layer-major's boundaries on nvme: their own I/O engine, in the step's figures */
	if (zn_home_aio(&e->act.lm.st))
		zn_aio_get_stats(zn_home_aio(&e->act.lm.st), &bd0);
	zn_optim_begin(&e->opt, e->step);
	/* --trace: this step's spans (trace_dev.h); nothing when not traced */
	rc = zn_tracer_step_begin(&e->tr, e->step);
	/* 2. a comm that failed (sticky) stays failed: stop before enqueuing; the tokens into
	 *    page-locked staging; stage 0-1: the full gradients, which accumulate, zeroed */
	if (!rc)
		rc = zn_comm_check(e->rt.comm);
	if (!rc)
		rc = zn_step_positions(e, targets_h, pos_h);
	if (!rc) {
		zn_acts_stage_tokens(&e->act, &inputs_h, &targets_h);
		rc = zn_engine_count_labels(e, targets_h);
	}
	if (!rc)
		rc = zn_reduce_zero_full(&e->rd);
	/* the store: the optimizer's state read ahead from now on, as background I/O behind
	 * the parameter reads, going on at each acquisition (swapio.h) */
	if (!rc)
		rc = zn_swapio_step_begin(&e->sw, e->step);
	/* the auxiliary loss's buffers (one a micro-batch) zero: the last step drained */
	if (!rc)
		rc = zn_acts_aux_zero(&e->act);
	/* 3. each micro-batch: forward, losses down, backward with each layer's reduction
	 *    (and AdamW, when adamw_during_backward) enqueued behind its backward */
	if (!rc && e->act.lm.on)
		rc = zn_step_layer_major(e, inputs_h, targets_h);
	for (int m = 0; !rc && !e->act.lm.on && m < e->gas; m++) {
		rc = micro_batch(e, m, inputs_h, targets_h);
		/* offloaded shards of this micro-batch are added on the host before the next
		 * micro-batch's shards land in the receive buffers */
		for (int l = e->n - 1; !rc && m < e->gas - 1 && l >= 0; l--)
			rc = zn_optim_host_accumulate(&e->opt, l);
	}
	/* 4. the rest of the optimizer: norm and clipping, AdamW not run during the backward */
	if (!rc)
		rc = zn_optim_step(&e->opt, zn_step_adamw_during_backward(e));
	/* 5. the end: every stream drained, comm errors collected, nvme reads waited for */
	{
		int r = zn_runtime_drain(&e->rt);

		if (!rc)
			rc = r;
		/* the step's nvme reads; its write-behind goes on into the next step (anything
		 * still in flight after a failure) */
		r = rc ? zn_swapio_quiesce(&e->sw) : zn_swapio_step_end(&e->sw);
		if (!rc)
			rc = r;
		r = zn_recompute_quiesce(&e->act.rec);
		if (!rc)
			rc = r;
		r = zn_lmajor_quiesce(&e->act.lm);
		if (!rc)
			rc = r;
		/* an expert's fetch that failed during a layer's call (frozen_experts.c) */
		if (!rc)
			rc = zn_frozen_expert_error(&e->fz);
	}
	/* 6. the loss averaged over ranks, the step's figures */
	if (!rc)
		rc = mean_loss(e, &st->loss);
	if (!rc && e->act.aux_d)
		rc = mean_aux_loss(e, &st->aux_loss);
	st->has_aux = e->act.aux_d != NULL;
	/* 7. a non-finite loss or gradient stops the run (the caller saves nothing); an fp16
	 *    overflow skipped the step instead (zn_optim_step) */
	if (!rc)
		rc = zn_optim_check_finite(&e->opt, st->loss);
	/* the traced step's spans to the file (a trace that cannot be written is logged and
	 * does not stop training) */
	zn_tracer_step_end(&e->tr, e->step, rc);
	if (rc) {
		zn_error("step %lld failed: %s", (long long)e->step, zn_strerror(rc));
		return rc;
	}
	st->step = e->step;
	zn_optim_stats(&e->opt, st);
	st->tokens = (uint64_t)e->gas * e->B * e->T * e->rt.world;
	timings(e, st);
	st->step_ms = zn_runtime_now_ms() - t0;
	/* What the step loses to data movement: the wall time the compute stream was not
	 * computing (fetches, reductions, the optimizer's exposed tail, host sync). */
	st->wait_ms = st->step_ms - st->fwd_ms - st->bwd_ms;
	if (st->wait_ms < 0)
		st->wait_ms = 0;
	st->device_peak_bytes = zn_device_peak_bytes(e->rt.dev);
	st->pinned_bytes = e->arena ? zn_arena_used_bytes(e->arena) : 0;
	st->plan_device_bytes = e->plan.device_bytes;
	st->pinned_size_bytes = e->arena ? zn_arena_size(e->arena) : 0;
	zn_swapio_io_stats(&e->sw, &io1);
	if (zn_home_aio(&e->act.lm.st))
		zn_aio_get_stats(zn_home_aio(&e->act.lm.st), &bd1);
	st->nvme_read_bytes = io1.bytes_read - io0.bytes_read +
			      (zn_frozen_read_bytes(&e->fz) - frozen0) +
			      (bd1.bytes_read - bd0.bytes_read);
	st->nvme_write_bytes = io1.bytes_write_submitted - io0.bytes_write_submitted +
			       (bd1.bytes_write_submitted - bd0.bytes_write_submitted);
	st->plan_nvme_read_bytes = e->plan.nvme_step_read_bytes;
	st->plan_nvme_write_bytes = e->plan.nvme_step_write_bytes;
	st->plan_nvme_first_read_bytes = e->plan.frozen_first_read_bytes;
	zn_frozen_expert_figures(&e->fz, &xn, &xb, &xr);
	zn_frozen_expert_stats(&e->fz, xn - xn0, xb - xb0, st);
	st->copy_h2d_bytes = zn_device_copy_bytes(e->rt.dev, ZN_COPY_H2D) - h2d0;
	st->copy_d2h_bytes = zn_device_copy_bytes(e->rt.dev, ZN_COPY_D2H) - d2h0;
	return 0;
}

/* eval.c's forward-only pass runs this same forward (zn_engine_eval). */
int zn_step_forward(struct zn_engine *e, const float *p0, const float *f0, int micro)
{
	return forward(e, p0, f0, micro, NULL);
}
