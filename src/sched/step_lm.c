/* The layer-major step (lmajor.h; docs/architecture.md, "Layer-major accumulation"): part 3
 * of zn_engine_step when the schedule is layer-major. Every micro-batch's tokens go up at
 * once; layer 0 runs for micro-batches 0 .. k-1, then layer 1, ..., each layer's
 * parameters acquired once for its k forwards; the last layer is the turn: forward (the
 * losses) and backward of each micro-batch under one acquisition; then layers n-2 .. 1,
 * each acquired once for its k recomputed forwards and backwards; layer 0 last. Each
 * layer's gradient is reduced micro-batch by micro-batch in micro-batch order, through
 * step.c's zn_step_reduce_update, so the optimizer starts on a layer once its k-th
 * backward is done and every sum is the one micro-batch order makes (bit-identical).
 * The boundaries' homes (lmajor.h): the device, pinned memory, or nvme through the
 * activation checkpoints' store (recompute.h), their copies in lmajor_home.c.
 */
#include "sched/engine_impl.h"
#include "sched/step_impl.h"

struct lm_run {
	struct zn_engine *e;
	struct zn_lmajor *lm;
	const float *p0, *f0;
	float scale;             /* the loss gradient's scale */
	int b;                   /* the next gradient ring index (stage >= 2) */
	bool again;              /* the tied head runs again at the end */
};

static uint64_t bt_of(const struct zn_engine *e)
{
	return (uint64_t)e->B * (uint64_t)e->T;
}

/* the layer io of micro-batch m with what every layer reads */
static void io_of(struct lm_run *r, int l, int m, const float *p, const float *f,
		  struct zn_layer_call *a)
{
	struct zn_engine *e = r->e;
	uint64_t off = (uint64_t)m * bt_of(e);

	*a = (struct zn_layer_call){
		.model = e->model,
		.io = { .L = &e->ld[l], .tokens = r->lm->tok_d + off, .targets = r->lm->tgt_d + off,
			.B = e->B, .T = e->T, .scratch = e->act.scratch_d, .frozen = f,
			.pos = e->act.pred > 0 ? r->lm->pos_d + off : NULL,
			.tied_frozen = zn_step_tied(e, l, r->f0), .seed = zn_step_seed(e, m),
			.aux = zn_acts_aux(&e->act, m), .aux_scale = zn_step_aux_scale(e) } };
	zn_step_set_params(e, &a->io, l, p, r->p0);
	if (l > 0)
		a->io.acts = r->lm->acts_d;
}

/* reduction of (l, m); a shard of micro-batch m >= 2 received on the host needs the
 * previous one added first (micro-batch order adds them between micro-batches) */
static int reduce(struct lm_run *r, int l, int m)
{
	int rc = 0;

	if (m >= 2)
		rc = zn_optim_host_accumulate(&r->e->opt, l);
	if (!rc)
		rc = zn_step_reduce_update(r->e, l, r->b++, m);
	return rc;
}

/* layer 0's forward for every micro-batch (parameters fetched once for the step) */
static int forward0(struct lm_run *r)
{
	struct zn_layer_call a;
	int rc = 0;

	for (int m = 0; !rc && m < r->lm->k; m++) {
		io_of(r, 0, m, r->p0, r->f0, &a);
		a.io.x_out = zn_lmajor_fwd_x(r->lm, 1, m);
		rc = zn_lmajor_slot_before(r->lm, 1, m);
		if (!rc)
			rc = zn_step_launch(r->e, true, 0, &a);
		if (!rc)
			rc = zn_lmajor_slot_after(r->lm, 1, m);
	}
	return rc;
}

/* layers 1 .. n-2: item l - 1 of the use sequence, k forwards each */
static int forward(struct lm_run *r)
{
	struct zn_engine *e = r->e;
	int rc = 0;

	for (int l = 1; !rc && l < e->n - 1; l++) {
		const float *p, *f;
		struct zn_layer_call a;

		rc = zn_fetch_acquire(&e->pf, l - 1, l, &p);
		if (!rc)
			rc = zn_frozen_acquire(&e->fz, l - 1, l, &f);
		for (int m = 0; !rc && m < r->lm->k; m++) {
			io_of(r, l, m, p, f, &a);
			a.io.x_in = zn_lmajor_fwd_x(&e->act.lm, l, m);
			a.io.x_out = zn_lmajor_fwd_x(&e->act.lm, l + 1, m);
			rc = zn_lmajor_slot_before(&e->act.lm, l + 1, m);
			if (!rc)
				rc = zn_step_launch(e, true, l, &a);
			if (!rc)
				rc = zn_lmajor_slot_after(&e->act.lm, l + 1, m);
		}
		if (!rc)
			rc = zn_fetch_release(&e->pf, l - 1);
		if (!rc)
			rc = zn_frozen_release(&e->fz, l - 1);
	}
	return rc;
}

/* The last layer's backward of micro-batch m from input x: own, into its gradient (else a
 * sink); tie, into layer 0's (else a sink: the tied head runs again at the end) */
static int head_backward(struct lm_run *r, int m, const float *p, const float *f,
			 const float *x, float *dx, bool own, bool tie)
{
	struct zn_engine *e = r->e;
	int n = e->n, rc = 0;
	struct zn_layer_call a;

	if (own)
		rc = zn_reduce_prepare(&e->rd, n - 1, r->b);
	if (!rc)
		rc = zn_memset_async(e->rt.compute, e->act.scratch_d, 0, e->act.scratch_bytes);
	if (rc)
		return rc;
	io_of(r, n - 1, m, p, f, &a);
	a.io.x_in = x;
	a.io.dx_in = dx;
	a.io.dloss_scale = r->scale;
	a.io.grads = own ? zn_reduce_grad_full(&e->rd, n - 1, r->b) : r->lm->grad_sink_d;
	if (zn_step_tied(e, n - 1, r->p0))
		a.io.tied_grads = tie ? zn_reduce_grad_full(&e->rd, 0, 0) : r->lm->tied_sink_d;
	return zn_step_launch(e, false, n - 1, &a);
}

/* The turn, item n-2: the last layer's forward (losses down) and backward for each
 * micro-batch under one acquisition, its gradient reduced (its AdamW may start); with the
 * head running again, the parameters it reads kept as they are now (the update may
 * change them before the second run). */
static int turn(struct lm_run *r)
{
	struct zn_engine *e = r->e;
	int n = e->n, k = r->lm->k, item = n - 2, rc;
	const float *p, *f;

	rc = zn_fetch_acquire(&e->pf, item, n - 1, &p);
	if (!rc)
		rc = zn_frozen_acquire(&e->fz, item, n - 1, &f);
	if (!rc && r->again)
		rc = zn_memcpy_async(e->rt.compute, r->lm->head_p_d, p, r->lm->head_p_bytes,
				     ZN_COPY_D2D);
	/* layer 0's gradient buffer first: the tied head adds into it */
	if (!rc)
		rc = zn_reduce_prepare(&e->rd, 0, 0);
	for (int m = 0; !rc && m < k; m++) {
		struct zn_layer_call a;
		float *dx;
		int ws;

		io_of(r, n - 1, m, p, f, &a);
		a.io.x_in = zn_lmajor_fwd_x(&e->act.lm, n - 1, m);
		/* the previous micro-batch's losses must be on the host first */
		rc = zn_acts_losses_into(&e->act, &a.io);
		if (!rc)
			rc = zn_step_launch(e, true, n - 1, &a);
		if (!rc)
			rc = zn_acts_losses_down(&e->act, m, true);
		if (!rc)
			rc = zn_lmajor_dx_write(&e->act.lm, &dx, &ws);
		if (!rc)
			rc = head_backward(r, m, p, f, a.io.x_in, dx, true, m == 0 || !r->again);
		if (!rc)
			rc = zn_lmajor_dx_written(&e->act.lm, m, ws);
		if (!rc && m == k - 1)
			rc = zn_fetch_release(&e->pf, item);
		if (!rc && m == k - 1)
			rc = zn_frozen_release(&e->fz, item);
		if (!rc)
			rc = reduce(r, n - 1, m);
	}
	return rc;
}

/* layer l's recomputed forward and backward of micro-batch m */
static int layer_backward(struct lm_run *r, int l, int m, const float *p, const float *f)
{
	struct zn_engine *e = r->e;
	struct zn_layer_call a;
	float *x, *dxo;
	int slot, rs, ws, rc;

	rc = zn_lmajor_boundary(&e->act.lm, l, m, &x, &slot);
	io_of(r, l, m, p, f, &a);
	a.io.x_in = x;
	a.io.x_out = r->lm->x_sink_d;
	a.io.aux = NULL; /* a recomputed forward gathers no auxiliary loss */
	if (!rc)
		rc = zn_step_launch(e, true, l, &a);
	if (!rc)
		rc = zn_reduce_prepare(&e->rd, l, r->b);
	if (!rc)
		rc = zn_memset_async(e->rt.compute, e->act.scratch_d, 0, e->act.scratch_bytes);
	if (rc)
		return rc;
	io_of(r, l, m, p, f, &a);
	a.io.x_in = x;
	a.io.dloss_scale = r->scale;
	a.io.grads = zn_reduce_grad_full(&e->rd, l, r->b);
	a.io.tied_grads = zn_step_tied(e, l, r->p0) ? zn_reduce_grad_full(&e->rd, 0, 0) : NULL;
	rc = zn_lmajor_dx_read(&e->act.lm, m, &dxo, &rs);
	if (!rc)
		rc = zn_lmajor_dx_write(&e->act.lm, &a.io.dx_in, &ws);
	a.io.dx_out = dxo;
	if (!rc)
		rc = zn_step_launch(e, false, l, &a);
	if (!rc)
		rc = zn_lmajor_dx_read_done(&e->act.lm, rs);
	if (!rc)
		rc = zn_lmajor_dx_written(&e->act.lm, m, ws);
	if (!rc)
		rc = zn_lmajor_up_done(&e->act.lm, slot);
	return rc;
}

/* layers n-2 .. 1: item n-1 + (n-2-l), k recomputed forwards and backwards each */
static int backward(struct lm_run *r)
{
	struct zn_engine *e = r->e;
	int n = e->n, k = r->lm->k, rc = 0;

	for (int l = n - 2; !rc && l >= 1; l--) {
		int item = n - 1 + (n - 2 - l);
		const float *p, *f;

		rc = zn_fetch_acquire(&e->pf, item, l, &p);
		if (!rc)
			rc = zn_frozen_acquire(&e->fz, item, l, &f);
		for (int m = 0; !rc && m < k; m++) {
			rc = layer_backward(r, l, m, p, f);
			if (!rc && m == k - 1)
				rc = zn_fetch_release(&e->pf, item);
			if (!rc && m == k - 1)
				rc = zn_frozen_release(&e->fz, item);
			if (!rc)
				rc = reduce(r, l, m);
		}
	}
	return rc;
}

/* the tied head's second run for micro-batch m: its forward again from the boundary (the
 * losses to a sink) with the parameters of the turn, its backward into layer 0's gradient
 * (its own went in at the turn: here into a sink) */
static int head_again(struct lm_run *r, int m, const float *f)
{
	const float *p = r->lm->head_p_d;
	struct zn_engine *e = r->e;
	int n = e->n, slot, rc;
	struct zn_layer_call a;
	float *x;

	rc = zn_lmajor_boundary(&e->act.lm, n - 1, m, &x, &slot);
	io_of(r, n - 1, m, p, f, &a);
	a.io.x_in = x;
	a.io.losses = r->lm->loss_sink_d;
	a.io.aux = NULL;
	if (!rc)
		rc = zn_step_launch(e, true, n - 1, &a);
	if (!rc)
		rc = head_backward(r, m, p, f, x, r->lm->x_sink_d, false, true);
	if (!rc)
		rc = zn_lmajor_up_done(&e->act.lm, slot);
	return rc;
}

/* layer 0's backward of each micro-batch (before it, micro-batch m's tied head again) */
static int backward0(struct lm_run *r)
{
	struct zn_engine *e = r->e;
	int n = e->n, k = r->lm->k, item = e->act.use_n - 1, rc = 0;
	const float *p = NULL, *f = NULL;

	/* the parameters come from the turn's copy; the frozen base (unchanged) is acquired
	 * again, and with it the parameters' item of the sequence */
	if (r->again)
		rc = zn_fetch_acquire(&e->pf, item, n - 1, &p);
	if (!rc && r->again)
		rc = zn_frozen_acquire(&e->fz, item, n - 1, &f);
	for (int m = 0; !rc && m < k; m++) {
		struct zn_layer_call a;
		float *dxo;
		int rs;

		/* stage >= 2: layer 0's buffer is zeroed per micro-batch (step.c's backward) */
		if (m > 0)
			rc = zn_reduce_prepare(&e->rd, 0, 0);
		if (!rc && r->again && m > 0)
			rc = head_again(r, m, f);
		if (!rc && r->again && m == k - 1)
			rc = zn_fetch_release(&e->pf, item);
		if (!rc && r->again && m == k - 1)
			rc = zn_frozen_release(&e->fz, item);
		if (rc)
			break;
		io_of(r, 0, m, r->p0, r->f0, &a);
		a.io.grads = zn_reduce_grad_full(&e->rd, 0, 0);
		a.io.dloss_scale = r->scale;
		rc = zn_lmajor_dx_read(&e->act.lm, m, &dxo, &rs);
		a.io.dx_out = dxo;
		if (!rc)
			rc = zn_step_launch(e, false, 0, &a);
		if (!rc)
			rc = zn_lmajor_dx_read_done(&e->act.lm, rs);
		if (!rc && m == k - 1)
			rc = zn_acts_tokens_done(&e->act);
		if (!rc && m == k - 1)
			rc = zn_fetch_layer0_release(&e->pf);
		if (!rc && m == k - 1)
			rc = zn_frozen_layer0_release(&e->fz);
		if (!rc)
			rc = reduce(r, 0, m);
	}
	return rc;
}

/* the per micro-batch spans timings() reads: the whole forward and backward on
 * micro-batch 0's events, the others empty */
static int times(struct zn_engine *e, int which)
{
	int rc = zn_event_record(e->act.tev[which], e->rt.compute);

	for (int m = 1; !rc && which == 2 && m < e->gas; m++)
		for (int i = 0; !rc && i < 3; i++)
			rc = zn_event_record(e->act.tev[(size_t)3 * m + i], e->rt.compute);
	return rc;
}

int zn_step_layer_major(struct zn_engine *e, const int *inputs_h, const int *targets_h)
{
	struct lm_run r = { .e = e, .lm = &e->act.lm, .again = e->act.lm.tied && e->gas > 1 };
	int rc;

	r.scale = zn_step_dloss_scale(e);
	r.lm->up_next = 0;
	r.lm->rd_next = 0;
	r.lm->wr_next = 0;
	r.lm->down_n = 0;
	r.lm->read_n = 0;
	for (int i = 0; i <= r.lm->k; i++)
		r.lm->dx_of[i] = i;
	rc = zn_acts_tokens_up_all(&e->act, inputs_h, targets_h);
	if (!rc)
		rc = times(e, 0);
	if (!rc)
		rc = zn_step_layer0(e, 0, &r.p0, &r.f0);
	if (!rc)
		rc = forward0(&r);
	if (!rc)
		rc = forward(&r);
	if (!rc)
		rc = times(e, 1);
	/* host and nvme homes: every boundary down before any comes back up */
	if (!rc && r.lm->home != ZN_TIER_DEVICE)
		rc = zn_event_record(r.lm->all_down, e->rt.copy_out);
	if (!rc && r.lm->home != ZN_TIER_DEVICE)
		rc = zn_stream_wait_event(e->rt.copy_in, r.lm->all_down);
	if (!rc)
		rc = turn(&r);
	if (!rc)
		rc = zn_lmajor_reads_begin(&e->act.lm);
	if (!rc)
		rc = backward(&r);
	if (!rc)
		rc = backward0(&r);
	if (!rc)
		rc = times(e, 2);
	return rc;
}
