/* The optimizer's device work: AdamW over each layer's span and the squared gradient norm,
 * as the kernel table's adamw and grad_sumsq ops inside zn_launch, so one code path serves
 * both backends. Under the host device the callback runs on the stream's worker thread,
 * in order with the stream's other work, and the table is kernels/cpu, whose ops are the
 * CPU tier's own zn_adamw_step and zn_grad_sumsq (the CPU optimizer's numerics exactly);
 * under cuda it runs at once on the calling thread and enqueues the CUDA kernels.
 *
 * The norm's results stay on the device (norm_d: per layer a double sum and an int32
 * non-finite flag, then the reduction's scratch) until zn_devops_sumsq_read copies every
 * layer's back at once.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/dtype.h"
#include "core/log.h"
#include "cpu/adamw.h"
#include "model/model.h"
#include "sched/optim.h"
#include "sched/runtime.h"
#include "sched/tiers.h"

/* a layer's spans (zn_optim_spans: tensors of one decay flag merged) fit one adamw_states
 * call: ZN_OPTIM_MAX_SPANS is the kernel's ZN_KERNEL_ADAMW_SPANS */

struct adamw_job {
	struct zn_optim *o;
	int layer;
	float *master;
	struct zn_adamw_moments mo;
	const float *grad;
	uint16_t *out;
	struct zn_kernel_adamw hp; /* weight_decay: the configured one, for decaying tensors */
};

struct sumsq_job {
	double *sumsq_d;
	int32_t *nonfinite_d;
	double *work_d;
	const float *grad;
	uint64_t n;
};

/* norm_d: sums [n] (double), flags [n] (int32), then the work area 8-byte aligned */
static uint64_t flags_offset(int layer_count)
{
	return (uint64_t)layer_count * sizeof(double);
}

static uint64_t work_offset(int layer_count)
{
	uint64_t end = flags_offset(layer_count) + (uint64_t)layer_count * sizeof(int32_t);

	return (end + 7) / 8 * 8;
}

uint64_t zn_devops_norm_bytes(const struct zn_config *cfg, int layer_count)
{
	struct zn_placement pl;

	zn_plan_placement(cfg->zero.stage, cfg->zero.offload_optimizer.device,
			  cfg->zero.offload_param.device, &pl);
	/* every step checks the gradients are finite; a device optimizer sums them there */
	if (pl.optim != ZN_TIER_DEVICE)
		return 0;
	return work_offset(layer_count) + ZN_KERNEL_SUMSQ_WORK_COUNT * sizeof(double);
}

/* compact moments: one launch over the layer's span, each tensor's decay in a span */
static void adamw_states_fn(struct adamw_job *j, void *native, const struct zn_kernel_table *k,
			    const struct zn_optim_span *sp, int n)
{
	const struct zn_layer *ly = &j->o->c.L[j->layer];
	struct zn_kernel_span ks[ZN_KERNEL_ADAMW_SPANS];
	struct zn_kernel_moments mo = {
		.states = (int32_t)j->mo.states, .m = j->mo.m, .v = j->mo.v,
		.m_absmax = j->mo.m_absmax, .v_absmax = j->mo.v_absmax,
	};
	bool f16 = j->o->c.pdt == ZN_DTYPE_F16;

	for (int s = 0; s < n; s++)
		ks[s] = (struct zn_kernel_span){ sp[s].i, sp[s].len,
						 sp[s].decay ? j->hp.weight_decay : 0.0f };
	k->adamw_states(native, j->master, &mo, j->out && !f16 ? j->out : NULL, j->grad, &j->hp,
			ks, n, (size_t)ly->opt_count);
	if (j->out && f16)
		k->cast_f32_to_f16(native, j->out, j->master, (size_t)ly->opt_count);
}

/* One launch per layer; the span is split at tensor boundaries (each tensor's decay flag). */
static void adamw_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct adamw_job *j = ctx;
	const struct zn_layer *ly = &j->o->c.L[j->layer];
	struct zn_optim_span sp[ZN_OPTIM_MAX_SPANS];
	int n = zn_optim_spans(&j->o->c.ld[j->layer], ly->opt_off, ly->opt_count, sp);
	struct zn_kernel_adamw hp = j->hp;
	double t0 = zn_runtime_now_ms();
	float *m = j->mo.m, *v = j->mo.v;

	if (j->mo.states != ZN_STATES_FP32)
		adamw_states_fn(j, native, k, sp, n);
	for (int s = 0; j->mo.states == ZN_STATES_FP32 && s < n; s++) {
		uint64_t i = sp[s].i;

		hp.weight_decay = sp[s].decay ? j->hp.weight_decay : 0.0f;
		/* fp16 parameters: the update, then the new master cast into the fp16 copy
		 * (the same bits as the CPU's fused fp16 output) */
		bool f16 = j->o->c.pdt == ZN_DTYPE_F16;

		k->adamw(native, j->master + i, m + i, v + i,
			 j->out && !f16 ? j->out + i : NULL, j->grad + i, &hp, (size_t)sp[s].len);
		if (j->out && f16)
			k->cast_f32_to_f16(native, j->out + i, j->master + i, (size_t)sp[s].len);
	}
	/* host: the update itself; cuda: only the time to enqueue it */
	atomic_fetch_add(&j->o->opt_ns, (uint64_t)((zn_runtime_now_ms() - t0) * 1e6));
}

static void sumsq_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct sumsq_job *j = ctx;

	k->grad_sumsq(native, j->sumsq_d, j->nonfinite_d, j->work_d, j->grad, (size_t)j->n);
}

int zn_devops_adamw(struct zn_optim *o, struct zn_stream *s, int layer, float *master,
		    const struct zn_adamw_moments *mo, const float *grad, void *out,
		    float grad_scale)
{
	const struct zn_optimizer_config *oc = &o->c.cfg->optimizer;
	struct adamw_job j = {
		.o = o, .layer = layer, .master = master, .mo = *mo, .grad = grad,
		.out = out,
		.hp = { .lr = o->lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = oc->eps,
			.weight_decay = oc->weight_decay, .grad_scale = grad_scale,
			.step = o->step - o->skipped,
			.l2 = oc->type == ZN_OPTIM_ADAM && !oc->adam_w_mode },
	};
	struct zn_adamw_params p;

	if (out && o->c.pdt == ZN_DTYPE_F32) {
		zn_error("AdamW on the device writes a bf16 or fp16 parameter copy only "
			 "(parameters are %s here)", zn_dtype_name(o->c.pdt));
		return -EINVAL;
	}
	/* the ops report nothing: check the hyperparameters here, before any launch */
	zn_adamw_params_init(&p, oc);
	p.lr = o->lr;
	p.beta1 = o->beta1;
	p.beta2 = o->beta2;
	p.step = o->step - o->skipped;
	p.grad_scale = grad_scale;
	if (zn_adamw_params_check(&p))
		return -EINVAL;
	return zn_launch(s, adamw_fn, &j, sizeof(j));
}

int zn_devops_sumsq(struct zn_optim *o, struct zn_stream *s, int layer, const float *grad,
		    uint64_t n)
{
	char *base = o->norm_d;
	struct sumsq_job j = {
		.sumsq_d = (double *)base + layer,
		.nonfinite_d = (int32_t *)(base + flags_offset(o->c.n)) + layer,
		.work_d = (double *)(base + work_offset(o->c.n)),
		.grad = grad,
		.n = n,
	};

	if (!base) {
		zn_error("gradient norm on the device: no result buffer (the optimizer is not on "
			 "the device)");
		return -EINVAL;
	}
	/* every layer's op shares work_d: they are ordered on the one stream s */
	return zn_launch(s, sumsq_fn, &j, sizeof(j));
}

int zn_devops_sumsq_read(struct zn_optim *o, struct zn_stream *s)
{
	uint64_t bytes = work_offset(o->c.n);
	const double *sums = o->norm_h;
	const int32_t *flags = (const int32_t *)((const char *)o->norm_h + flags_offset(o->c.n));
	int rc;

	rc = zn_memcpy_async(s, o->norm_h, o->norm_d, bytes, ZN_COPY_D2H);
	if (!rc)
		rc = zn_stream_synchronize(s);
	if (rc)
		return rc;
	for (int l = 0; l < o->c.n; l++)
		o->c.L[l].sumsq = flags[l] ? INFINITY : sums[l];
	return 0;
}
