/* The optimizer part of the step: global-norm clipping and AdamW on each rank's span, on the
 * device (a device op on the comm stream, right behind the layer's reduction) or on the CPU
 * (the calling thread, as soon as the layer's gradient shard is in pinned memory), then the
 * new parameters back where the compute reads them.
 *
 * Overlap: without clipping, layer l's AdamW starts while the device still runs the backward
 * of the layers below: device-tier updates are enqueued right behind the layer's reduction
 * during the backward (the step's rule, step.c); CPU updates run in zn_optim_step, which
 * the step enters once the whole backward is enqueued, taking the layers top-down and waiting only for each layer's own
 * gradient shard. With gradient_clipping > 0 every update waits for the global norm (all
 * gradients reduced, squared sums all-reduced): clipping that waits.
 *
 * fp16 (DeepSpeed's loss scaling, lossscale.h): the loss gradient was multiplied by the
 * scale, so the norm of the gradients is the scaled one; a non-finite norm (the norm is
 * all-reduced, so every rank sees it) is an overflow: no layer is updated on any rank and
 * the scaler lowers the scale. Otherwise AdamW takes the gradients times clip / scale. As
 * with clipping, every fp16 update waits for the norm.
 *
 * Weight decay follows each tensor's decay flag in the model's layer descriptors.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/fault.h"
#include "core/log.h"
#include "cpu/adamw.h"
#include "sched/engine_impl.h"
#include "sched/grads.h"
#include "sched/lr.h"

int zn_adamw_layer_span(const struct zn_engine *e, int layer, uint64_t first, uint64_t count,
			float grad_scale, float *master, const struct zn_adamw_moments *mo,
			const float *grad, void *out, enum zn_dtype out_dtype)
{
	struct zn_optim_span sp[ZN_OPTIM_MAX_SPANS];
	struct zn_adamw_span ws[ZN_OPTIM_MAX_SPANS];
	int n = zn_optim_spans(&e->ld[layer], first, count, sp);
	struct zn_adamw_params p;

	if (n < 0) /* zn_engine_layer_sizes refused such a layer */
		return n;

	zn_adamw_params_init(&p, &e->cfg.optimizer);
	p.lr = e->opt.lr;
	p.beta1 = e->opt.beta1;
	p.beta2 = e->opt.beta2;
	p.step = e->step - e->opt.skipped;
	p.grad_scale = grad_scale;
	if (e->tr.on) {
		p.worker_ns = ((struct zn_engine *)e)->tr.worker_ns;
		p.worker_max = ZN_TRACE_MAX_SUB;
	}
	/* each tensor's weight decay (its flag); fp32 moments: one call per tensor as before */
	for (int s = 0; s < n; s++)
		ws[s] = (struct zn_adamw_span){ (size_t)sp[s].i, (size_t)sp[s].len,
						sp[s].decay ? e->cfg.optimizer.weight_decay : 0.0f };
	return zn_adamw_step_states(&p, master, mo, grad, ZN_DTYPE_F32, out, out_dtype,
				    (size_t)count, ws, n);
}

int zn_optim_host_accumulate(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	int rc;

	if (e->plan.pl.grads != ZN_TIER_HOST)
		return 0;
	rc = zn_runtime_wait(&e->rt, ly->grad_ev);
	if (rc || !ly->recv_pending)
		return rc;
	for (uint64_t i = 0; i < ly->sh.shard_numel; i++)
		ly->grad_h[i] += ly->grad_recv_h[i];
	ly->recv_pending = false;
	return 0;
}

/* stage 1-2: every rank's new shard into every rank's full layer, in place */
static int gather_full(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];

	if (e->cfg.zero.stage == 0 || e->cfg.zero.stage == 3 || e->rt.world == 1)
		return 0;
	return zn_comm_all_gather(e->rt.comm, e->rt.comm_s, ly->param_d,
				  zn_tiers_param_dst(e, l), ly->sh.shard_numel,
				  e->pdt);
}

static int layer_sumsq(struct zn_engine *e, int l);

int zn_optim_update_device(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	int rc = 0;

	/* without clipping the layer's squared sum goes first, on the same stream (checked at
	 * the end of the step); with clipping the norm already took it */
	if (!(e->cfg.gradient_clipping > 0))
		rc = layer_sumsq(e, l);
	int h = -1;

	if (!rc && ly->opt_count)
		rc = zn_tr_begin(e, e->tr.on, e->rt.comm_s, "adamw", l, 0, &h);
	if (!rc && ly->opt_count) {
		struct zn_adamw_moments mo;

		zn_tiers_moments(e, l, NULL, &mo);
		rc = zn_devops_adamw(e, e->rt.comm_s, l, zn_tiers_master_span(e, l, NULL), &mo,
				     zn_tiers_grad_span(e, l), zn_tiers_out_span(e, l, NULL),
				     e->opt.clip_coef);
	}
	if (!rc)
		rc = zn_tr_end(e, e->rt.comm_s, h);
	if (!rc)
		rc = gather_full(e, l);
	return rc;
}

/* AdamW on chunk c of layer l's span (one chunk unless state is staged from nvme, where
 * the staging buffer holds the chunk itself: swapio.h); the layer's own buffers hold the
 * whole span. */
static int adamw_chunk(struct zn_engine *e, int l, int c, struct zn_sbuf *sb)
{
	struct zn_layer *ly = &e->L[l];
	uint64_t off, len, real, so;
	char *out = zn_tiers_out_span(e, l, sb);
	struct zn_adamw_moments all, mo;

	zn_swapio_chunk(e, l, c, &off, &len);
	real = ly->opt_count > off ? ly->opt_count - off : 0;
	if (real > len)
		real = len;
	if (!real || e->opt.overflow)
		return 0;
	so = zn_swapio_optim(e) ? 0 : off;
	if (out && !zn_swapio_params(e))
		out += off * zn_tiers_param_bytes(e);
	/* compact moments are one chunk (plan.c), so an int8 so is 0 */
	zn_tiers_moments(e, l, sb, &all);
	zn_adamw_moments_at(&mo, &all, so);
	return zn_adamw_layer_span(e, l, ly->opt_off + off, real, e->opt.clip_coef,
				   zn_tiers_master_span(e, l, sb) + so, &mo, ly->grad_h + off, out,
				   e->pdt);
}

int zn_optim_update_host(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	double t0;
	int rc;

	/* nvme: the state is read into staging buffers (read ahead), a chunk at a time, and
	 * written back behind */
	rc = zn_optim_host_accumulate(e, l);
	/* without clipping the layer's squared sum is taken beside its update */
	if (!rc && !(e->cfg.gradient_clipping > 0))
		rc = layer_sumsq(e, l);
	if (e->tr.on)
		for (int w = 0; w < ZN_TRACE_MAX_SUB; w++) {
			e->tr.worker_ns[2 * w] = UINT64_MAX;
			e->tr.worker_ns[2 * w + 1] = 0;
		}
	for (int c = 0; !rc && c < zn_swapio_chunks(e, l); c++) {
		struct zn_sbuf *sb = NULL;

		rc = zn_swapio_opt_acquire(e, l, c, &sb);
		if (rc)
			break;
		t0 = zn_runtime_now_ms();
		rc = adamw_chunk(e, l, c, sb);
		e->opt.host_opt_ms += zn_runtime_now_ms() - t0;
		if (!rc)
			rc = zn_swapio_opt_release(e, l, c);
	}
	/* --trace: each CPU AdamW worker's part of this layer */
	for (int w = 0; e->tr.on && w < ZN_TRACE_MAX_SUB; w++)
		if (e->tr.worker_ns[2 * w + 1])
			zn_tracer_host(e, ZN_TRACE_ADAMW, w, "adamw", l, e->tr.worker_ns[2 * w],
				       e->tr.worker_ns[2 * w + 1], 0);
	if (rc || e->opt.overflow || e->plan.pl.params != ZN_TIER_DEVICE)
		return rc;
	/* the new shard goes up into the device's copy, then (stage 1-2) to every rank */
	int h;

	rc = zn_tr_begin(e, e->tr.on, e->rt.copy_in, "param up", l,
			 ly->opt_count * zn_tiers_param_bytes(e), &h);
	if (!rc)
		rc = zn_memcpy_async(e->rt.copy_in, zn_tiers_param_dst(e, l), ly->param_stage_h,
				     ly->opt_count * zn_tiers_param_bytes(e), ZN_COPY_H2D);
	if (!rc)
		rc = zn_tr_end(e, e->rt.copy_in, h);
	if (!rc)
		rc = zn_event_record(ly->aux_ev, e->rt.copy_in);
	if (!rc)
		rc = zn_stream_wait_event(e->rt.comm_s, ly->aux_ev);
	if (!rc)
		rc = gather_full(e, l);
	return rc;
}

void zn_optim_begin(struct zn_engine *e)
{
	zn_swapio_step_begin(e);
	/* fp16: skipped steps advance neither the schedule nor AdamW's step */
	int64_t step = e->step - e->opt.skipped;

	e->opt.lr = zn_lr_for_step(&e->cfg.scheduler, e->cfg.optimizer.lr, step);
	zn_betas_for_step(&e->cfg.scheduler, e->cfg.optimizer.beta1, e->cfg.optimizer.beta2,
			  step, &e->opt.beta1, &e->opt.beta2);
	e->opt.clip_coef = 1.0f;
	e->opt.grad_norm = 0.0f;
	e->opt.overflow = false;
	e->opt.scale = e->cfg.precision.fp16 ? (float)e->opt.ls.scale : 1.0f;
	e->opt.host_opt_ms = 0.0;
	e->opt.early_next = e->n - 1;
	atomic_store(&e->opt.opt_ns, 0);
}

int zn_optim_update_early(struct zn_engine *e, int l)
{
	int rc = 0;

	/* the ring (one micro-batch) has its own rule (grads.h); the norm (clipping, fp16)
	 * must come before any update; which layers go early depends on timing, so only
	 * where an update enqueues nothing on the device's streams and no collective (its
	 * order must be the same on every rank): parameters not on the device, no all-gather
	 * of the new shards (stage 1-2 with several ranks) */
	if (!zn_tiers_optim_on_host(e) || !zn_swapio_optim(e) ||
	    e->plan.grad_home == ZN_GRAD_PINNED_RING || e->cfg.gradient_clipping > 0 ||
	    e->cfg.precision.fp16 || e->plan.pl.params == ZN_TIER_DEVICE ||
	    (e->rt.world > 1 && e->cfg.zero.stage != 3 && e->cfg.zero.stage != 0))
		return 0;
	/* test hook: the shards land as late as they may (all at layer 1's reduction) */
	if (l > 1 && zn_fault_value(ZN_FAULT_LATE_EARLY_ADAMW))
		return 0;
	/* layers >= l were reduced in this micro-batch: their grad_ev is this one's */
	while (!rc && e->opt.early_next >= l && e->opt.early_next > 0) {
		int u = e->opt.early_next;

		if (!zn_event_query(e->L[u].grad_ev) || !zn_swapio_opt_ready(e, u))
			break;
		rc = zn_optim_update_host(e, u);
		e->opt.early_next--;
	}
	return rc;
}

int zn_optim_create(struct zn_engine *e)
{
	struct zn_optim *o = &e->opt;
	int rc;

	const char *inject = zn_fault_value(ZN_FAULT_OVERFLOW);

	if (e->cfg.precision.fp16)
		zn_lossscale_init(&o->ls, &e->cfg.precision);
	o->inject_step = 0;
	o->inject_rank = -1;
	if (inject && *inject) {
		char *end;

		o->inject_step = strtoll(inject, &end, 10);
		if (*end == '@')
			o->inject_rank = (int)strtol(end + 1, &end, 10);
		if (*end || o->inject_step < 1) {
			zn_error("ZINC_TEST_OVERFLOW '%s': use STEP or STEP@RANK (a test hook)",
				 inject);
			return -EINVAL;
		}
	}
	o->norm_bytes = zn_devops_norm_bytes(&e->cfg, e->n);
	rc = zn_tiers_dalloc(e, &o->norm_d, o->norm_bytes);
	if (!rc) /* page-locked under cuda: the result's copy down is asynchronous */
		rc = zn_device_host_alloc(e->rt.dev, &o->norm_h, o->norm_bytes);
	return rc;
}

void zn_optim_destroy(struct zn_engine *e)
{
	zn_device_free(e->rt.dev, e->opt.norm_d);
	zn_device_host_free(e->rt.dev, e->opt.norm_h);
	e->opt.norm_d = e->opt.norm_h = NULL;
}

/* Layer l's squared gradient sum over this rank's span into L[l].sumsq (INFINITY when an
 * element is not finite): the host tier computes it now, the device tier enqueues it on
 * the comm stream (zn_devops_sumsq_read brings it back). */
static int layer_sumsq(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	uint64_t n = ly->sh.real_numel;
	/* stage 0 spans the whole layer; the norm takes this rank's shard of it */
	const float *g = zn_tiers_grad_span(e, l) + (e->cfg.zero.stage == 0 ? ly->sh.offset : 0);
	bool nonfinite = false;
	int rc;

	ly->sumsq = 0.0;
	if (!zn_tiers_optim_on_host(e)) /* n = 0 too: the op writes 0, every result is fresh */
		return zn_devops_sumsq(e, e->rt.comm_s, l, g, n);
	rc = zn_optim_host_accumulate(e, l);
	if (!rc && n)
		rc = zn_grad_sumsq(g, ZN_DTYPE_F32, n, 0, &ly->sumsq, &nonfinite);
	if (nonfinite)
		ly->sumsq = INFINITY;
	return rc;
}

/* The global norm from every layer's L[l].sumsq: summed here, all-reduced. */
static int total_norm(struct zn_engine *e, float *norm)
{
	double total = 0.0;
	float t;
	int rc = 0;

	for (int l = e->n - 1; l >= 0; l--)
		total += e->L[l].sumsq;
	if (e->opt.inject_step == e->step &&
	    (e->opt.inject_rank < 0 || e->opt.inject_rank == e->rt.rank))
		total = INFINITY;
	t = (float)total;
	if (e->rt.world > 1)
		rc = zn_comm_all_reduce(e->rt.comm, NULL, &t, 1, ZN_DTYPE_F32);
	*norm = sqrtf(t);
	return rc;
}

/* The global gradient norm (clipping, before any update): each rank's squared sum over its
 * span, all-reduced. */
static int global_norm(struct zn_engine *e, float *norm)
{
	int rc = 0;

	for (int l = e->n - 1; !rc && l >= 0; l--)
		rc = layer_sumsq(e, l);
	if (!rc && !zn_tiers_optim_on_host(e))
		rc = zn_devops_sumsq_read(e, e->rt.comm_s);
	return rc ? rc : total_norm(e, norm);
}

int zn_optim_first_nonfinite(struct zn_engine *e, int *layer)
{
	float norm = e->opt.grad_norm, *bad;
	int rc = 0;

	*layer = -1;
	if (!(e->cfg.gradient_clipping > 0)) {
		/* the sums were taken beside the updates */
		if (!zn_tiers_optim_on_host(e))
			rc = zn_devops_sumsq_read(e, e->rt.comm_s);
		if (!rc)
			rc = total_norm(e, &norm);
		if (rc)
			return rc;
		e->opt.grad_norm = norm;
	}
	bad = calloc((size_t)e->n, sizeof(*bad));
	if (!bad)
		return -ENOMEM;
	for (int l = 0; l < e->n; l++)
		bad[l] = isfinite(e->L[l].sumsq) ? 0.0f : 1.0f;
	/* every rank learns the lowest layer that is not finite on any rank */
	if (e->rt.world > 1)
		rc = zn_comm_all_reduce(e->rt.comm, NULL, bad, (uint64_t)e->n, ZN_DTYPE_F32);
	for (int l = 0; !rc && l < e->n && *layer < 0; l++)
		if (bad[l] != 0.0f)
			*layer = l;
	free(bad);
	return rc;
}

int zn_optim_report_nonfinite(const struct zn_engine *e, float loss, int layer)
{
	char where[200];

	if (layer >= 0)
		snprintf(where, sizeof(where), "first non-finite gradient in layer %d (%s ...)",
			 layer, e->ld[layer].tensors[0].name);
	else
		snprintf(where, sizeof(where), "every gradient is finite");
	zn_error("step %lld: %s not finite (loss %g, gradient norm %g; %s): stopping, nothing "
		 "saved; lower --lr, set --grad-clip, check the data or start from another "
		 "checkpoint", (long long)e->step, isfinite(loss) ? "the gradient norm is" :
		 "the loss is", loss, e->opt.grad_norm, where);
	return -ERANGE;
}

int zn_optim_step(struct zn_engine *e, bool inline_done)
{
	float clip = e->cfg.gradient_clipping, norm = 0.0f;
	bool fp16 = e->cfg.precision.fp16;
	/* the pinned gradient ring began the nvme read-ahead with the step (grads.h) */
	int rc = e->plan.grad_home == ZN_GRAD_PINNED_RING ? 0 : zn_swapio_opt_begin(e);

	if (!rc && (clip > 0 || fp16)) {
		rc = global_norm(e, &norm);
		if (rc)
			return rc;
		if (fp16) {
			/* the overflow check: every rank has the same all-reduced norm */
			e->opt.overflow = !isfinite(norm);
			zn_lossscale_update(&e->opt.ls, e->opt.overflow);
			/* as DeepSpeed: a skipped step advances neither AdamW's step (bias
			 * correction) nor the learning-rate schedule */
			if (e->opt.overflow)
				e->opt.skipped++;
			/* the true norm, and AdamW's unscaling below */
			norm = e->opt.overflow ? norm : norm / e->opt.scale;
		}
		if (!fp16 && !isfinite(norm)) { /* before any update: the weights stay as they were */
			int bad;

			e->opt.grad_norm = norm;
			rc = zn_optim_first_nonfinite(e, &bad);
			return rc ? rc : zn_optim_report_nonfinite(e, 0.0f, bad);
		}
		/* PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below 1 */
		if (clip > 0 && !e->opt.overflow) {
			e->opt.clip_coef = clip / (norm + 1e-6f);
			if (e->opt.clip_coef > 1.0f)
				e->opt.clip_coef = 1.0f;
		}
		/* fp16: the gradients AdamW reads are scaled: it takes clip / scale */
		e->opt.clip_coef /= e->opt.scale;
	}
	e->opt.grad_norm = norm;
	for (int l = e->n - 1; !rc && l >= 0; l--) {
		if (zn_grads_updated_in_backward(e, l) || l > e->opt.early_next)
			continue;
		if (zn_tiers_optim_on_host(e))
			rc = zn_optim_update_host(e, l);
		else if (!inline_done && !e->opt.overflow)
			rc = zn_optim_update_device(e, l);
	}
	return rc;
}
