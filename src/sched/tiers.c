/* The tiers (tiers.h): each layer's buffers, where each state class lives, and the initial
 * state put onto them. Decisions come from the plan's placement, never from NULL pointers. */
#include <errno.h>
#include <string.h>

#include "core/dtype.h"
#include "cpu/arena.h"
#include "sched/swapio.h"
#include "sched/tiers.h"

unsigned zn_tiers_param_bytes(const struct zn_tiers *t)
{
	return t->plan->param_bytes;
}

bool zn_tiers_optim_on_host(const struct zn_tiers *t)
{
	return t->plan->pl.optim != ZN_TIER_DEVICE;
}

static bool aliased(const struct zn_tiers *t)
{
	return t->plan->master_aliases_params;
}

int zn_tiers_dalloc(struct zn_device *dev, void *pp, uint64_t bytes)
{
	return bytes ? zn_device_alloc(dev, (void **)pp, bytes) : 0;
}

int zn_tiers_halloc(struct zn_arena *arena, void *pp, uint64_t bytes)
{
	return bytes ? zn_arena_alloc(arena, zn_plan_host_alloc_bytes(bytes), 0, (void **)pp) :
		       0;
}

int zn_tiers_alloc_layer(struct zn_tiers *t, int l)
{
	struct zn_layer *ly = &t->L[l];
	struct zn_layer_buffers *b = &ly->sz;
	int rc;

	zn_plan_shard(t->numel[l], t->world, t->rank, &ly->sh);
	zn_plan_layer_buffers(t->pin, t->plan, l, b);
	if (t->stage == 0) {
		ly->opt_off = 0;
		ly->opt_count = t->numel[l];
	} else {
		ly->opt_off = ly->sh.offset;
		ly->opt_count = ly->sh.real_numel;
	}
	rc = zn_tiers_dalloc(t->dev, &ly->param_d, b->param_d);
	if (!rc)
		rc = zn_tiers_dalloc(t->dev, &ly->grad_d, b->grad_d);
	if (!rc)
		rc = zn_tiers_dalloc(t->dev, &ly->grad_shard_d, b->grad_shard_d);
	if (!rc)
		rc = zn_tiers_dalloc(t->dev, &ly->master_d, b->master_d);
	if (!rc)
		rc = zn_tiers_dalloc(t->dev, &ly->m_d, b->m_d);
	if (!rc)
		rc = zn_tiers_dalloc(t->dev, &ly->v_d, b->v_d);
	if (!rc)
		rc = zn_tiers_halloc(t->arena, &ly->param_h, b->param_h);
	if (!rc)
		rc = zn_tiers_halloc(t->arena, &ly->param_stage_h, b->param_stage_h);
	if (!rc)
		rc = zn_tiers_halloc(t->arena, &ly->grad_h, b->grad_h);
	if (!rc)
		rc = zn_tiers_halloc(t->arena, &ly->grad_recv_h, b->grad_recv_h);
	if (!rc)
		rc = zn_tiers_halloc(t->arena, &ly->master_h, b->master_h);
	if (!rc)
		rc = zn_tiers_halloc(t->arena, &ly->m_h, b->m_h);
	if (!rc)
		rc = zn_tiers_halloc(t->arena, &ly->v_h, b->v_h);
	if (!rc)
		rc = zn_event_create(t->dev, &ly->grad_ev);
	if (!rc)
		rc = zn_event_create(t->dev, &ly->aux_ev);
	return rc;
}

void zn_tiers_free_layer(struct zn_tiers *t, int l)
{
	struct zn_layer *ly = &t->L[l];

	zn_device_free(t->dev, ly->param_d);
	zn_device_free(t->dev, ly->grad_d);
	zn_device_free(t->dev, ly->grad_shard_d);
	zn_device_free(t->dev, ly->master_d);
	zn_device_free(t->dev, ly->m_d);
	zn_device_free(t->dev, ly->v_d);
	zn_event_destroy(ly->grad_ev);
	zn_event_destroy(ly->aux_ev);
}

/* ---- where each class lives ------------------------------------------------------------ */

float *zn_tiers_grad_span(const struct zn_tiers *t, int l)
{
	struct zn_layer *ly = &t->L[l];

	if (t->plan->pl.grads == ZN_TIER_HOST)
		return ly->grad_h;
	if (t->stage >= 2)
		return ly->grad_shard_d;
	return ly->grad_d + ly->opt_off;
}

float *zn_tiers_master_span(const struct zn_tiers *t, int l, const struct zn_sbuf *sb)
{
	struct zn_layer *ly = &t->L[l];

	if (t->plan->pl.optim == ZN_TIER_NVME)
		return sb->master_h;
	if (!aliased(t))
		return t->plan->pl.optim == ZN_TIER_DEVICE ? ly->master_d : ly->master_h;
	/* aliased: the fp32 parameters, on the optimizer's tier, are the master */
	if (t->plan->pl.params == ZN_TIER_HOST)
		return ly->param_h;
	return (float *)ly->param_d + (t->stage < 3 ? ly->opt_off : 0);
}

void *zn_tiers_param_dst(const struct zn_tiers *t, int l)
{
	struct zn_layer *ly = &t->L[l];

	return (char *)ly->param_d +
	       (t->stage < 3 ? ly->opt_off * zn_tiers_param_bytes(t) : 0);
}

void *zn_tiers_out_span(const struct zn_tiers *t, int l, const struct zn_sbuf *sb)
{
	if (aliased(t))
		return NULL;
	if (t->plan->pl.params == ZN_TIER_NVME)
		return sb->param_h;
	if (t->plan->pl.params == ZN_TIER_HOST)
		return t->L[l].param_h;
	if (zn_tiers_optim_on_host(t))
		return t->L[l].param_stage_h; /* copied up after AdamW */
	return zn_tiers_param_dst(t, l);
}

uint64_t zn_tiers_optim_numel(const struct zn_tiers *t, int l)
{
	return t->stage == 0 ? t->L[l].sh.padded_numel : t->L[l].sh.shard_numel;
}

void zn_tiers_moments(const struct zn_tiers *t, int l, const struct zn_sbuf *sb,
		      struct zn_adamw_moments *mo)
{
	struct zn_layer *ly = &t->L[l];
	void *m = ly->m_d, *v = ly->v_d;

	if (t->plan->pl.optim == ZN_TIER_NVME) {
		m = sb->m_h;
		v = sb->v_h;
	} else if (t->plan->pl.optim == ZN_TIER_HOST) {
		m = ly->m_h;
		v = ly->v_h;
	}
	/* the staging sections hold the largest shard's layout: an int8 absmax follows the
	 * codes of this layer's own count, as on the extent */
	zn_adamw_moments_of(mo, t->plan->states, m, v, zn_tiers_optim_numel(t, l));
}

const float *zn_tiers_master_full(const struct zn_tiers *t, int l, bool *on_device)
{
	/* stage 0: opt_off is 0, so the span is the full layer */
	*on_device = t->plan->pl.optim == ZN_TIER_DEVICE;
	return zn_tiers_master_span(t, l, NULL);
}

/* ---- initial state ----------------------------------------------------------------------- */

/* Copies count parameters from src_h + first to dst in the stored dtype (through
 * scratch16_h when 16-bit); on the device, waits for the copy (the sources are reused for
 * the next layer). */
static int put_params(struct zn_tiers *t, void *dst, bool on_device, const float *src_h,
		      uint16_t *scratch16_h, uint64_t first, uint64_t count)
{
	const void *src = src_h + first;
	uint64_t bytes = count * zn_tiers_param_bytes(t);
	int rc;

	if (t->pdt == ZN_DTYPE_BF16) {
		zn_cast_f32_to_bf16(scratch16_h, src_h + first, count);
		src = scratch16_h;
	} else if (t->pdt == ZN_DTYPE_F16) {
		zn_cast_f32_to_f16(scratch16_h, src_h + first, count);
		src = scratch16_h;
	}
	if (!on_device) {
		memcpy(dst, src, bytes);
		return 0;
	}
	rc = zn_memcpy_async(t->copy_in, dst, src, bytes, ZN_COPY_H2D);
	if (!rc)
		rc = zn_stream_synchronize(t->copy_in);
	return rc;
}

static int put_f32(struct zn_tiers *t, float *dst, bool on_device, const float *src_h,
		   uint64_t count)
{
	int rc;

	if (!on_device) {
		memcpy(dst, src_h, count * 4);
		return 0;
	}
	rc = zn_memcpy_async(t->copy_in, dst, src_h, count * 4, ZN_COPY_H2D);
	if (!rc)
		rc = zn_stream_synchronize(t->copy_in);
	return rc;
}

int zn_tiers_init_layer(struct zn_tiers *t, int l, const float *params_h,
			uint16_t *scratch16_h)
{
	struct zn_layer *ly = &t->L[l];
	const struct zn_placement *pl = &t->plan->pl;
	uint64_t opt_n = zn_tiers_optim_numel(t, l);
	/* all-zero bytes are the zero state of every setting (cpu/adamw.h) */
	uint64_t mv_bytes = zn_plan_moment_bytes(t->plan->states, opt_n);
	const float *opt_h = params_h + (t->stage == 0 ? 0 : ly->sh.offset);
	int rc = 0;

	if (t->stage < 3)
		rc = put_params(t, ly->param_d, true, params_h, scratch16_h, 0,
				ly->sh.padded_numel);
	else if (pl->params == ZN_TIER_DEVICE)
		rc = put_params(t, ly->param_d, true, params_h, scratch16_h, ly->sh.offset,
				ly->sh.shard_numel);
	else if (pl->params == ZN_TIER_HOST)
		rc = put_params(t, ly->param_h, false, params_h, scratch16_h, ly->sh.offset,
				ly->sh.shard_numel);
	if (!rc && !aliased(t) && pl->optim == ZN_TIER_DEVICE)
		rc = put_f32(t, ly->master_d, true, opt_h, opt_n);
	if (!rc && !aliased(t) && pl->optim == ZN_TIER_HOST)
		rc = put_f32(t, ly->master_h, false, opt_h, opt_n);
	if (!rc && pl->optim == ZN_TIER_DEVICE) {
		rc = zn_memset_async(t->copy_in, ly->m_d, 0, mv_bytes);
		if (!rc)
			rc = zn_memset_async(t->copy_in, ly->v_d, 0, mv_bytes);
	}
	if (pl->optim == ZN_TIER_HOST) {
		memset(ly->m_h, 0, mv_bytes);
		memset(ly->v_h, 0, mv_bytes);
	}
	if (zn_tiers_optim_on_host(t) && pl->params == ZN_TIER_DEVICE)
		memset(ly->param_stage_h, 0, ly->sz.param_stage_h);
	if (pl->grads == ZN_TIER_HOST)
		memset(ly->grad_h, 0, ly->sh.shard_numel * 4);
	if (!rc)
		rc = zn_stream_synchronize(t->copy_in);
	return rc;
}
