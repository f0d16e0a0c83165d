/* The optimizer part of the step: global-norm clipping and AdamW on each rank's span, on the
 * device (a device op on the comm stream, right behind the layer's reduction) or on the CPU
 * (the calling thread, as soon as the layer's gradient shard is in pinned memory), then the
 * new parameters back where the compute reads them.
 *
 * Overlap: without clipping, layer l's AdamW starts while the device still runs the backward
 * of the layers below: device-tier updates are enqueued from reduce_layer during the
 * backward; CPU updates run in zn_optim_step, which the caller enters once the whole
 * backward is enqueued, taking the layers top-down and waiting only for each layer's own
 * gradient shard. With gradient_clipping > 0 every update waits for the global norm (all
 * gradients reduced, squared sums all-reduced): clipping that waits.
 *
 * Weight decay follows each tensor's decay flag (src/model/gpt2.h: 2-D weights and the
 * embeddings decay; biases and layernorm parameters do not).
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "cpu/adamw.h"
#include "sched/engine_impl.h"

bool zn_optim_tensor_span(const struct zn_layer_desc *L, int t, uint64_t first,
			  uint64_t count, uint64_t *i, uint64_t *len)
{
	uint64_t a = L->tensors[t].offset, b = a + L->tensors[t].numel;

	if (a < first)
		a = first;
	if (b > first + count)
		b = first + count;
	if (a >= b)
		return false;
	*i = a - first;
	*len = b - a;
	return true;
}

int zn_adamw_layer_span(const struct zn_engine *e, int layer, uint64_t first, uint64_t count,
			float grad_scale, float *master, float *m, float *v, const float *grad,
			void *out, enum zn_dtype out_dtype)
{
	const struct zn_layer_desc *L = &e->ld[layer];
	size_t osz = out_dtype == ZN_DTYPE_F32 ? 4 : 2;
	struct zn_adamw_params p;
	uint64_t i, len;
	int rc = 0;

	zn_adamw_params_init(&p, &e->cfg.optimizer);
	p.lr = e->lr;
	p.step = e->step;
	p.grad_scale = grad_scale;
	for (int t = 0; !rc && t < L->tensor_count; t++) {
		if (!zn_optim_tensor_span(L, t, first, count, &i, &len))
			continue;
		p.weight_decay = L->tensors[t].decay ? e->cfg.optimizer.weight_decay : 0.0f;
		rc = zn_adamw_step(&p, master + i, m + i, v + i, grad + i, ZN_DTYPE_F32,
				   out ? (char *)out + i * osz : NULL, out_dtype, (size_t)len);
	}
	return rc;
}

static bool host_tier(const struct zn_engine *e)
{
	return e->plan.pl.optim != ZN_TIER_DEVICE; /* cpu or nvme: AdamW on the CPU */
}

/* This rank's reduced gradient over its optimizer span. */
static float *grad_span(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];

	if (ly->grad_h)
		return ly->grad_h;
	if (ly->grad_shard_d)
		return ly->grad_shard_d;
	return ly->grad_d + ly->opt_off;
}

/* sb: the layer's nvme staging buffer, or NULL */
static float *master_span(struct zn_engine *e, int l, const struct zn_sbuf *sb)
{
	struct zn_layer *ly = &e->L[l];

	if (sb && sb->master_h)
		return sb->master_h;
	if (ly->master_d || ly->master_h)
		return ly->master_d ? ly->master_d : ly->master_h;
	if (ly->param_h)
		return ly->param_h;
	return (float *)ly->param_d + (e->cfg.zero.stage < 3 ? ly->opt_off : 0);
}

/* Where AdamW writes the new parameters (NULL: the master is the parameters). */
static void *out_span(struct zn_engine *e, int l, const struct zn_sbuf *sb)
{
	struct zn_layer *ly = &e->L[l];
	size_t psz = e->pdt == ZN_DTYPE_F32 ? 4 : 2;

	if (e->plan.master_aliases_params)
		return NULL;
	if (sb && sb->param_h)
		return sb->param_h;
	if (ly->param_h)
		return ly->param_h;
	if (ly->param_stage_h)
		return ly->param_stage_h;
	return (char *)ly->param_d + (e->cfg.zero.stage < 3 ? ly->opt_off * psz : 0);
}

int zn_optim_host_accumulate(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	int rc;

	if (!ly->grad_h)
		return 0;
	rc = zn_engine_wait(e, ly->grad_ev);
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
	size_t psz = e->pdt == ZN_DTYPE_F32 ? 4 : 2;

	if (e->cfg.zero.stage == 0 || e->cfg.zero.stage == 3 || e->world == 1)
		return 0;
	return zn_comm_all_gather(e->comm, e->comm_s, ly->param_d,
				  (char *)ly->param_d + ly->sh.offset * psz, ly->sh.shard_numel,
				  e->pdt);
}

static int update_device(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	int rc = 0;

	if (ly->opt_count)
		rc = zn_devops_adamw(e, e->comm_s, l, master_span(e, l, NULL), ly->m_d, ly->v_d,
				     grad_span(e, l), out_span(e, l, NULL), e->clip_coef);
	if (!rc)
		rc = gather_full(e, l);
	return rc;
}

static int update_host(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	size_t psz = e->pdt == ZN_DTYPE_F32 ? 4 : 2;
	struct zn_sbuf *sb = NULL;
	double t0;
	int rc;

	/* nvme: the state is read into a staging buffer (read ahead), written back behind */
	rc = zn_optim_host_accumulate(e, l);
	if (!rc)
		rc = zn_swapio_opt_acquire(e, l, &sb);
	if (rc)
		return rc;
	t0 = zn_engine_now_ms();
	if (ly->opt_count)
		rc = zn_adamw_layer_span(e, l, ly->opt_off, ly->opt_count, e->clip_coef,
					 master_span(e, l, sb), sb && sb->m_h ? sb->m_h : ly->m_h,
					 sb && sb->v_h ? sb->v_h : ly->v_h, ly->grad_h,
					 out_span(e, l, sb), e->pdt);
	e->host_opt_ms += zn_engine_now_ms() - t0;
	if (!rc)
		rc = zn_swapio_opt_release(e, l);
	if (rc || !ly->param_stage_h)
		return rc;
	/* the new shard goes up into the device's copy, then (stage 1-2) to every rank */
	char *dst = (char *)ly->param_d + (e->cfg.zero.stage < 3 ? ly->sh.offset * psz : 0);

	rc = zn_memcpy_async(e->copy_in, dst, ly->param_stage_h, ly->opt_count * psz,
			     ZN_COPY_H2D);
	if (!rc)
		rc = zn_event_record(ly->aux_ev, e->copy_in);
	if (!rc)
		rc = zn_stream_wait_event(e->comm_s, ly->aux_ev);
	if (!rc)
		rc = gather_full(e, l);
	return rc;
}

/* Called by the backward right after layer l's last reduction is enqueued. */
int zn_optim_update_inline(struct zn_engine *e, int l)
{
	if (host_tier(e) || e->cfg.gradient_clipping > 0)
		return 0;
	return update_device(e, l);
}

/* The global gradient norm: each rank's squared sum over its span, all-reduced. */
static int global_norm(struct zn_engine *e, float *norm)
{
	double total = 0.0;
	float t;
	int rc = 0;

	for (int l = e->n - 1; !rc && l >= 0; l--) {
		struct zn_layer *ly = &e->L[l];
		uint64_t n = ly->sh.real_numel;
		/* stage 0 spans the whole layer; the norm takes this rank's shard of it */
		const float *g = grad_span(e, l) + (e->cfg.zero.stage == 0 ? ly->sh.offset : 0);
		bool nonfinite = false;

		ly->sumsq = 0.0;
		if (host_tier(e)) {
			rc = zn_optim_host_accumulate(e, l);
			if (!rc && n)
				rc = zn_grad_sumsq(g, ZN_DTYPE_F32, n, 0, &ly->sumsq, &nonfinite);
			if (nonfinite)
				ly->sumsq = INFINITY;
		} else {
			/* n = 0 too: the op writes 0, so every layer's result is fresh */
			rc = zn_devops_sumsq(e, e->comm_s, l, g, n);
		}
	}
	if (!rc && !host_tier(e))
		rc = zn_devops_sumsq_read(e, e->comm_s);
	for (int l = e->n - 1; l >= 0; l--)
		total += e->L[l].sumsq;
	t = (float)total;
	if (!rc && e->world > 1)
		rc = zn_comm_all_reduce(e->comm, NULL, &t, 1, ZN_DTYPE_F32);
	*norm = sqrtf(t);
	return rc;
}

int zn_optim_step(struct zn_engine *e)
{
	float clip = e->cfg.gradient_clipping, norm = 0.0f;
	int rc = zn_swapio_opt_begin(e);

	if (!rc && clip > 0) {
		rc = global_norm(e, &norm);
		if (rc)
			return rc;
		if (!isfinite(norm)) {
			zn_error("step %lld: the gradient norm is not finite: lower --lr or check "
				 "the data", (long long)e->step);
			return -ERANGE;
		}
		/* PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below 1 */
		e->clip_coef = clip / (norm + 1e-6f);
		if (e->clip_coef > 1.0f)
			e->clip_coef = 1.0f;
	}
	e->grad_norm = norm;
	for (int l = e->n - 1; !rc && l >= 0; l--) {
		if (host_tier(e))
			rc = update_host(e, l);
		else if (clip > 0)
			rc = update_device(e, l);
	}
	return rc;
}
