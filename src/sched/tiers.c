/* The tiers (tiers.h): each layer's buffers, where each state class lives, and the initial
 * state put onto them. Decisions come from the plan's placement, never from NULL pointers. */
#include <errno.h>
#include <string.h>

#include "core/dtype.h"
#include "sched/engine_impl.h"

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

int zn_tiers_alloc_layer(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	struct zn_layer_buffers *b = &ly->sz;
	int rc;

	zn_plan_shard(e->numel[l], e->rt.world, e->rt.rank, &ly->sh);
	zn_plan_layer_buffers(&e->pin, &e->plan, l, b);
	if (e->cfg.zero.stage == 0) {
		ly->opt_off = 0;
		ly->opt_count = e->numel[l];
	} else {
		ly->opt_off = ly->sh.offset;
		ly->opt_count = ly->sh.real_numel;
	}
	rc = zn_tiers_dalloc(e->rt.dev, &ly->param_d, b->param_d);
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &ly->grad_d, b->grad_d);
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &ly->grad_shard_d, b->grad_shard_d);
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &ly->master_d, b->master_d);
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &ly->m_d, b->m_d);
	if (!rc)
		rc = zn_tiers_dalloc(e->rt.dev, &ly->v_d, b->v_d);
	if (!rc)
		rc = zn_tiers_halloc(e->arena, &ly->param_h, b->param_h);
	if (!rc)
		rc = zn_tiers_halloc(e->arena, &ly->param_stage_h, b->param_stage_h);
	if (!rc)
		rc = zn_tiers_halloc(e->arena, &ly->grad_h, b->grad_h);
	if (!rc)
		rc = zn_tiers_halloc(e->arena, &ly->grad_recv_h, b->grad_recv_h);
	if (!rc)
		rc = zn_tiers_halloc(e->arena, &ly->master_h, b->master_h);
	if (!rc)
		rc = zn_tiers_halloc(e->arena, &ly->m_h, b->m_h);
	if (!rc)
		rc = zn_tiers_halloc(e->arena, &ly->v_h, b->v_h);
	if (!rc)
		rc = zn_event_create(e->rt.dev, &ly->grad_ev);
	if (!rc)
		rc = zn_event_create(e->rt.dev, &ly->aux_ev);
	return rc;
}

void zn_tiers_free_layer(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];

	zn_device_free(e->rt.dev, ly->param_d);
	zn_device_free(e->rt.dev, ly->grad_d);
	zn_device_free(e->rt.dev, ly->grad_shard_d);
	zn_device_free(e->rt.dev, ly->master_d);
	zn_device_free(e->rt.dev, ly->m_d);
	zn_device_free(e->rt.dev, ly->v_d);
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

/* Copies count parameters from tmp_h + first to dst in the stored dtype; on the device,
 * waits for the copy (tmp_h is reused for the next layer). */
static int put_params(struct zn_engine *e, void *dst, bool on_device, uint64_t first,
		      uint64_t count)
{
	const void *src = e->tmp_h + first;
	uint64_t bytes = count * zn_tiers_param_bytes(&e->ti);
	int rc;

	if (e->pdt == ZN_DTYPE_BF16) {
		zn_cast_f32_to_bf16(e->tmp16_h, e->tmp_h + first, count);
		src = e->tmp16_h;
	} else if (e->pdt == ZN_DTYPE_F16) {
		zn_cast_f32_to_f16(e->tmp16_h, e->tmp_h + first, count);
		src = e->tmp16_h;
	}
	if (!on_device) {
		memcpy(dst, src, bytes);
		return 0;
	}
	rc = zn_memcpy_async(e->rt.copy_in, dst, src, bytes, ZN_COPY_H2D);
	if (!rc)
		rc = zn_stream_synchronize(e->rt.copy_in);
	return rc;
}

static int put_f32(struct zn_engine *e, float *dst, bool on_device, uint64_t first,
		   uint64_t count)
{
	int rc;

	if (!on_device) {
		memcpy(dst, e->tmp_h + first, count * 4);
		return 0;
	}
	rc = zn_memcpy_async(e->rt.copy_in, dst, e->tmp_h + first, count * 4, ZN_COPY_H2D);
	if (!rc)
		rc = zn_stream_synchronize(e->rt.copy_in);
	return rc;
}

int zn_tiers_init_layer(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	const struct zn_placement *pl = &e->plan.pl;
	bool stage0 = e->cfg.zero.stage == 0;
	uint64_t opt_n = zn_tiers_optim_numel(&e->ti, l);
	/* all-zero bytes are the zero state of every setting (cpu/adamw.h) */
	uint64_t mv_bytes = zn_plan_moment_bytes(e->plan.states, opt_n);
	uint64_t opt_first = stage0 ? 0 : ly->sh.offset;
	int rc = 0;

	if (e->cfg.zero.stage < 3)
		rc = put_params(e, ly->param_d, true, 0, ly->sh.padded_numel);
	else if (pl->params == ZN_TIER_DEVICE)
		rc = put_params(e, ly->param_d, true, ly->sh.offset, ly->sh.shard_numel);
	else if (pl->params == ZN_TIER_HOST)
		rc = put_params(e, ly->param_h, false, ly->sh.offset, ly->sh.shard_numel);
	if (!rc && !aliased(&e->ti) && pl->optim == ZN_TIER_DEVICE)
		rc = put_f32(e, ly->master_d, true, opt_first, opt_n);
	if (!rc && !aliased(&e->ti) && pl->optim == ZN_TIER_HOST)
		rc = put_f32(e, ly->master_h, false, opt_first, opt_n);
	if (!rc && pl->optim == ZN_TIER_DEVICE) {
		rc = zn_memset_async(e->rt.copy_in, ly->m_d, 0, mv_bytes);
		if (!rc)
			rc = zn_memset_async(e->rt.copy_in, ly->v_d, 0, mv_bytes);
	}
	if (pl->optim == ZN_TIER_HOST) {
		memset(ly->m_h, 0, mv_bytes);
		memset(ly->v_h, 0, mv_bytes);
	}
	if (zn_tiers_optim_on_host(&e->ti) && pl->params == ZN_TIER_DEVICE)
		memset(ly->param_stage_h, 0, ly->sz.param_stage_h);
	if (pl->grads == ZN_TIER_HOST)
		memset(ly->grad_h, 0, ly->sh.shard_numel * 4);
	if (!rc)
		rc = zn_stream_synchronize(e->rt.copy_in);
	return rc;
}
