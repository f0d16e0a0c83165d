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
#include "model/model.h"
#include "sched/grads.h"
#include "sched/lr.h"
#include "sched/optim.h"
#include "sched/runtime.h"
#include "sched/swapio.h"
#include "sched/tiers.h"
#include "sched/trace_dev.h"

int zn_adamw_layer_span(struct zn_optim *o, int layer, uint64_t first, uint64_t count,
			float grad_scale, float *master, const struct zn_adamw_moments *mo,
			const float *grad, void *out, enum zn_dtype out_dtype)
{
	struct zn_optim_span sp[ZN_OPTIM_MAX_SPANS];
	struct zn_adamw_span ws[ZN_OPTIM_MAX_SPANS];
	int n = zn_optim_spans(&o->c.ld[layer], first, count, sp);
	struct zn_adamw_params p;

	if (n < 0) /* zn_engine_layer_sizes refused such a layer */
		return n;

	zn_adamw_params_init(&p, &o->c.cfg->optimizer);
	p.lr = o->lr;
	p.beta1 = o->beta1;
	p.beta2 = o->beta2;
	p.step = o->step - o->skipped;
	p.grad_scale = grad_scale;
	/* --trace: the workers widen the tracer's times (zn_tracer_workers_begin) */
	p.worker_ns = zn_tracer_workers(o->c.tr);
	if (p.worker_ns)
		p.worker_max = ZN_TRACE_MAX_SUB;
	/* each tensor's weight decay (its flag); fp32 moments: one call per tensor as before */
	for (int s = 0; s < n; s++)
		ws[s] = (struct zn_adamw_span){ (size_t)sp[s].i, (size_t)sp[s].len,
						sp[s].decay ? o->c.cfg->optimizer.weight_decay : 0.0f };
	return zn_adamw_step_states(&p, master, mo, grad, ZN_DTYPE_F32, out, out_dtype,
				    (size_t)count, ws, n);
}

int zn_optim_host_accumulate(struct zn_optim *o, int l)
{
	struct zn_layer *ly = &o->c.L[l];
	int rc;

	if (!o->c.grads_on_host)
		return 0;
	rc = zn_runtime_wait(o->c.rt, ly->grad_ev);
	if (rc || !ly->recv_pending)
		return rc;
	for (uint64_t i = 0; i < ly->sh.shard_numel; i++)
		ly->grad_h[i] += ly->grad_recv_h[i];
	ly->recv_pending = false;
	return 0;
}

/* stage 1-2: every rank's new shard into every rank's full layer, in place */
static int gather_full(struct zn_optim *o, int l)
{
	struct zn_layer *ly = &o->c.L[l];

	if (o->c.cfg->zero.stage == 0 || o->c.cfg->zero.stage == 3 || o->c.rt->world == 1)
		return 0;
	return zn_comm_all_gather(o->c.rt->comm, o->c.rt->comm_s, ly->param_d,
				  zn_tiers_param_dst(o->c.ti, l), ly->sh.shard_numel,
				  o->c.pdt);
}

static int layer_sumsq(struct zn_optim *o, int l);

int zn_optim_update_device(struct zn_optim *o, int l)
{
	struct zn_layer *ly = &o->c.L[l];
	int rc = 0;

	/* without clipping the layer's squared sum goes first, on the same stream (checked at
	 * the end of the step); with clipping the norm already took it */
	if (!(o->c.cfg->gradient_clipping > 0))
		rc = layer_sumsq(o, l);
	int h = -1;

	if (!rc && ly->opt_count)
		rc = zn_tracer_span_begin(o->c.tr, o->c.rt->comm_s, "adamw", l, 0, &h);
	if (!rc && ly->opt_count) {
		struct zn_adamw_moments mo;

		zn_tiers_moments(o->c.ti, l, NULL, &mo);
		rc = zn_devops_adamw(o, o->c.rt->comm_s, l, zn_tiers_master_span(o->c.ti, l, NULL),
				     &mo, zn_tiers_grad_span(o->c.ti, l),
				     zn_tiers_out_span(o->c.ti, l, NULL),
				     o->clip_coef);
	}
	if (!rc)
		rc = zn_tracer_span_end(o->c.tr, o->c.rt->comm_s, h);
	if (!rc)
		rc = gather_full(o, l);
	return rc;
}

/* AdamW on chunk c of layer l's span (one chunk unless state is staged from nvme, where
 * the staging buffer holds the chunk itself: swapio.h); the layer's own buffers hold the
 * whole span. */
static int adamw_chunk(struct zn_optim *o, int l, int c, struct zn_sbuf *sb)
{
	struct zn_layer *ly = &o->c.L[l];
	uint64_t off, len, real, so;
	char *out = zn_tiers_out_span(o->c.ti, l, sb);
	struct zn_adamw_moments all, mo;

	zn_swapio_chunk(o->c.sw, l, c, &off, &len);
	real = ly->opt_count > off ? ly->opt_count - off : 0;
	if (real > len)
		real = len;
	if (!real || o->overflow)
		return 0;
	so = zn_swapio_optim(o->c.sw) ? 0 : off;
	if (out && !zn_swapio_params(o->c.sw))
		out += off * zn_tiers_param_bytes(o->c.ti);
	/* compact moments are one chunk (plan.c), so an int8 so is 0 */
	zn_tiers_moments(o->c.ti, l, sb, &all);
	zn_adamw_moments_at(&mo, &all, so);
	return zn_adamw_layer_span(o, l, ly->opt_off + off, real, o->clip_coef,
				   zn_tiers_master_span(o->c.ti, l, sb) + so, &mo, ly->grad_h + off, out,
				   o->c.pdt);
}

int zn_optim_update_host(struct zn_optim *o, int l)
{
	struct zn_layer *ly = &o->c.L[l];
	double t0;
	int rc;

	/* nvme: the state is read into staging buffers (read ahead), a chunk at a time, and
	 * written back behind */
	rc = zn_optim_host_accumulate(o, l);
	/* without clipping the layer's squared sum is taken beside its update */
	if (!rc && !(o->c.cfg->gradient_clipping > 0))
		rc = layer_sumsq(o, l);
	zn_tracer_workers_begin(o->c.tr);
	for (int c = 0; !rc && c < zn_swapio_chunks(o->c.sw, l); c++) {
		struct zn_sbuf *sb = NULL;

		rc = zn_swapio_opt_acquire(o->c.sw, l, c, &sb);
		if (rc)
			break;
		t0 = zn_runtime_now_ms();
		rc = adamw_chunk(o, l, c, sb);
		o->host_opt_ms += zn_runtime_now_ms() - t0;
		if (!rc)
			rc = zn_swapio_opt_release(o->c.sw, l, c);
	}
	/* --trace: each CPU AdamW worker's part of this layer */
	zn_tracer_workers_end(o->c.tr, l);
	if (rc || o->overflow || o->c.params != ZN_TIER_DEVICE)
		return rc;
	/* the new shard goes up into the device's copy, then (stage 1-2) to every rank */
	int h;

	rc = zn_tracer_span_begin(o->c.tr, o->c.rt->copy_in, "param up", l,
			 ly->opt_count * zn_tiers_param_bytes(o->c.ti), &h);
	if (!rc)
		rc = zn_memcpy_async(o->c.rt->copy_in, zn_tiers_param_dst(o->c.ti, l),
				     ly->param_stage_h, ly->opt_count * zn_tiers_param_bytes(o->c.ti), ZN_COPY_H2D);
	if (!rc)
		rc = zn_tracer_span_end(o->c.tr, o->c.rt->copy_in, h);
	if (!rc)
		rc = zn_event_record(ly->aux_ev, o->c.rt->copy_in);
	if (!rc)
		rc = zn_stream_wait_event(o->c.rt->comm_s, ly->aux_ev);
	if (!rc)
		rc = gather_full(o, l);
	return rc;
}

void zn_optim_begin(struct zn_optim *o, int64_t step)
{
	const struct zn_config *c = o->c.cfg;
	/* fp16: skipped steps advance neither the schedule nor AdamW's step */
	int64_t t = step - o->skipped;

	o->step = step;
	o->lr = zn_lr_for_step(&c->scheduler, c->optimizer.lr, t);
	zn_betas_for_step(&c->scheduler, c->optimizer.beta1, c->optimizer.beta2, t, &o->beta1,
			  &o->beta2);
	o->clip_coef = 1.0f;
	o->grad_norm = 0.0f;
	o->overflow = false;
	o->scale = c->precision.fp16 ? (float)o->ls.scale : 1.0f;
	o->host_opt_ms = 0.0;
	o->early_next = o->c.n - 1;
	atomic_store(&o->opt_ns, 0);
}

int zn_optim_update_early(struct zn_optim *o, int l)
{
	int rc = 0;

	/* the ring (one micro-batch) has its own rule (grads.h); the norm (clipping, fp16)
	 * must come before any update; which layers go early depends on timing, so only
	 * where an update enqueues nothing on the device's streams and no collective (its
	 * order must be the same on every rank): parameters not on the device, no all-gather
	 * of the new shards (stage 1-2 with several ranks) */
	if (!zn_tiers_optim_on_host(o->c.ti) || !zn_swapio_optim(o->c.sw) ||
	    zn_grads_ring(o->c.gr) || o->c.cfg->gradient_clipping > 0 ||
	    o->c.cfg->precision.fp16 || o->c.params == ZN_TIER_DEVICE ||
	    (o->c.rt->world > 1 && o->c.cfg->zero.stage != 3 && o->c.cfg->zero.stage != 0))
		return 0;
	/* test hook: the shards land as late as they may (all at layer 1's reduction) */
	if (l > 1 && zn_fault_value(ZN_FAULT_LATE_EARLY_ADAMW))
		return 0;
	/* layers >= l were reduced in this micro-batch: their grad_ev is this one's */
	while (!rc && o->early_next >= l && o->early_next > 0) {
		int u = o->early_next;

		if (!zn_event_query(o->c.L[u].grad_ev) || !zn_swapio_opt_ready(o->c.sw, u))
			break;
		rc = zn_optim_update_host(o, u);
		o->early_next--;
	}
	return rc;
}

int zn_optim_create(struct zn_optim *o, const struct zn_optim_config *c)
{
	const char *inject = zn_fault_value(ZN_FAULT_OVERFLOW);
	int rc = 0;

	*o = (struct zn_optim){ .c = *c };
	if (c->cfg->precision.fp16)
		zn_lossscale_init(&o->ls, &c->cfg->precision);
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
	o->norm_bytes = zn_devops_norm_bytes(c->cfg, c->n);
	if (o->norm_bytes)
		rc = zn_device_alloc(c->rt->dev, &o->norm_d, o->norm_bytes);
	if (!rc) /* page-locked under cuda: the result's copy down is asynchronous */
		rc = zn_device_host_alloc(c->rt->dev, &o->norm_h, o->norm_bytes);
	return rc;
}

void zn_optim_destroy(struct zn_optim *o)
{
	if (o->c.rt) {
		zn_device_free(o->c.rt->dev, o->norm_d);
		zn_device_host_free(o->c.rt->dev, o->norm_h);
	}
	o->norm_d = o->norm_h = NULL;
}

/* Layer l's squared gradient sum over this rank's span into L[l].sumsq (INFINITY when an
 * element is not finite): the host tier computes it now, the device tier enqueues it on
 * the comm stream (zn_devops_sumsq_read brings it back). */
static int layer_sumsq(struct zn_optim *o, int l)
{
	struct zn_layer *ly = &o->c.L[l];
	uint64_t n = ly->sh.real_numel;
	/* stage 0 spans the whole layer; the norm takes this rank's shard of it */
	const float *g = zn_tiers_grad_span(o->c.ti, l) +
			 (o->c.cfg->zero.stage == 0 ? ly->sh.offset : 0);
	bool nonfinite = false;
	int rc;

	ly->sumsq = 0.0;
	if (!zn_tiers_optim_on_host(o->c.ti)) /* n = 0 too: the op writes 0, every result is fresh */
		return zn_devops_sumsq(o, o->c.rt->comm_s, l, g, n);
	rc = zn_optim_host_accumulate(o, l);
	if (!rc && n)
		rc = zn_grad_sumsq(g, ZN_DTYPE_F32, n, 0, &ly->sumsq, &nonfinite);
	if (nonfinite)
		ly->sumsq = INFINITY;
	return rc;
}

/* The global norm from every layer's L[l].sumsq: summed here, all-reduced. */
static int total_norm(struct zn_optim *o, float *norm)
{
	const struct zn_runtime *rt = o->c.rt;
	double total = 0.0;
	float t;
	int rc = 0;

	for (int l = o->c.n - 1; l >= 0; l--)
		total += o->c.L[l].sumsq;
	if (o->inject_step == o->step && (o->inject_rank < 0 || o->inject_rank == rt->rank))
		total = INFINITY;
	t = (float)total;
	if (rt->world > 1)
		rc = zn_comm_all_reduce(rt->comm, NULL, &t, 1, ZN_DTYPE_F32);
	*norm = sqrtf(t);
	return rc;
}

/* The global gradient norm (clipping, before any update): each rank's squared sum over its
 * span, all-reduced. */
static int global_norm(struct zn_optim *o, float *norm)
{
	int rc = 0;

	for (int l = o->c.n - 1; !rc && l >= 0; l--)
		rc = layer_sumsq(o, l);
	if (!rc && !zn_tiers_optim_on_host(o->c.ti))
		rc = zn_devops_sumsq_read(o, o->c.rt->comm_s);
	return rc ? rc : total_norm(o, norm);
}

int zn_optim_first_nonfinite(struct zn_optim *o, int *layer)
{
	struct zn_runtime *rt = o->c.rt;
	float norm = o->grad_norm, *bad;
	int n = o->c.n, rc = 0;

	*layer = -1;
	if (!(o->c.cfg->gradient_clipping > 0)) {
		/* the sums were taken beside the updates */
		if (!zn_tiers_optim_on_host(o->c.ti))
			rc = zn_devops_sumsq_read(o, rt->comm_s);
		if (!rc)
			rc = total_norm(o, &norm);
		if (rc)
			return rc;
		o->grad_norm = norm;
	}
	bad = calloc((size_t)n, sizeof(*bad));
	if (!bad)
		return -ENOMEM;
	for (int l = 0; l < n; l++)
		bad[l] = isfinite(o->c.L[l].sumsq) ? 0.0f : 1.0f;
	/* every rank learns the lowest layer that is not finite on any rank */
	if (rt->world > 1)
		rc = zn_comm_all_reduce(rt->comm, NULL, bad, (uint64_t)n, ZN_DTYPE_F32);
	for (int l = 0; !rc && l < n && *layer < 0; l++)
		if (bad[l] != 0.0f)
			*layer = l;
	free(bad);
	return rc;
}

int zn_optim_report_nonfinite(const struct zn_optim *o, float loss, int layer)
{
	char where[200];

	if (layer >= 0)
		snprintf(where, sizeof(where), "first non-finite gradient in layer %d (%s ...)",
			 layer, o->c.ld[layer].tensors[0].name);
	else
		snprintf(where, sizeof(where), "every gradient is finite");
	zn_error("step %lld: %s not finite (loss %g, gradient norm %g; %s): stopping, nothing "
		 "saved; lower --lr, set --grad-clip, check the data or start from another "
		 "checkpoint", (long long)o->step, isfinite(loss) ? "the gradient norm is" :
		 "the loss is", loss, o->grad_norm, where);
	return -ERANGE;
}

int zn_optim_step(struct zn_optim *o, bool inline_done)
{
	float clip = o->c.cfg->gradient_clipping, norm = 0.0f;
	bool fp16 = o->c.cfg->precision.fp16;
	/* the pinned gradient ring began the nvme read-ahead with the step (grads.h) */
	int rc = zn_grads_ring(o->c.gr) ? 0 : zn_swapio_opt_begin(o->c.sw);

	if (!rc && (clip > 0 || fp16)) {
		rc = global_norm(o, &norm);
		if (rc)
			return rc;
		if (fp16) {
			/* the overflow check: every rank has the same all-reduced norm */
			o->overflow = !isfinite(norm);
			zn_lossscale_update(&o->ls, o->overflow);
			/* as DeepSpeed: a skipped step advances neither AdamW's step (bias
			 * correction) nor the learning-rate schedule */
			if (o->overflow)
				o->skipped++;
			/* the true norm, and AdamW's unscaling below */
			norm = o->overflow ? norm : norm / o->scale;
		}
		if (!fp16 && !isfinite(norm)) { /* before any update: the weights stay as they were */
			int bad;

			o->grad_norm = norm;
			rc = zn_optim_first_nonfinite(o, &bad);
			return rc ? rc : zn_optim_report_nonfinite(o, 0.0f, bad);
		}
		/* PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below 1 */
		if (clip > 0 && !o->overflow) {
			o->clip_coef = clip / (norm + 1e-6f);
			if (o->clip_coef > 1.0f)
				o->clip_coef = 1.0f;
		}
		/* fp16: the gradients AdamW reads are scaled: it takes clip / scale */
		o->clip_coef /= o->scale;
	}
	o->grad_norm = norm;
	for (int l = o->c.n - 1; !rc && l >= 0; l--) {
		if (zn_grads_updated_in_backward(o->c.gr, l) || l > o->early_next)
			continue;
		if (zn_tiers_optim_on_host(o->c.ti))
			rc = zn_optim_update_host(o, l);
		else if (!inline_done && !o->overflow)
			rc = zn_optim_update_device(o, l);
	}
	return rc;
}
