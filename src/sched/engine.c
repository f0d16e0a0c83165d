/* The engine's life cycle: device, comm, plan (refuse before allocating), buffers on their
 * tiers, model initialization, read-back and save. The step itself is in step.c and
 * optim.c, the parameter fetches in fetch.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/dtype.h"
#include "core/log.h"
#include "sched/engine_impl.h"

double zn_engine_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int zn_engine_wait(struct zn_engine *e, struct zn_event *ev)
{
	double t0 = zn_engine_now_ms();
	int rc = zn_event_synchronize(ev);

	e->wait_ms += zn_engine_now_ms() - t0;
	return rc;
}

int zn_engine_rank(const struct zn_engine *e)
{
	return e->rank;
}

int zn_engine_world(const struct zn_engine *e)
{
	return e->world;
}

int zn_engine_micro_batch(const struct zn_engine *e)
{
	return e->B;
}

int zn_engine_grad_accum(const struct zn_engine *e)
{
	return e->gas;
}

int zn_engine_layer_count(const struct zn_engine *e)
{
	return e->n;
}

uint64_t zn_engine_layer_numel(const struct zn_engine *e, int layer)
{
	return e->numel[layer];
}

/* ---- teardown ---------------------------------------------------------------------------- */

static void free_slot(struct zn_engine *e, struct zn_slot *s)
{
	zn_device_free(e->dev, s->f32_d);
	zn_device_free(e->dev, s->bf16_d);
	zn_event_destroy(s->ready);
	zn_event_destroy(s->free);
}

static void free_layer(struct zn_engine *e, struct zn_layer *l)
{
	zn_device_free(e->dev, l->param_d);
	zn_device_free(e->dev, l->grad_d);
	zn_device_free(e->dev, l->grad_shard_d);
	zn_device_free(e->dev, l->master_d);
	zn_device_free(e->dev, l->m_d);
	zn_device_free(e->dev, l->v_d);
	zn_event_destroy(l->grad_ev);
	zn_event_destroy(l->aux_ev);
}

static void free_acts(struct zn_engine *e)
{
	for (int l = 0; e->acts_d && l < e->n; l++)
		zn_device_free(e->dev, e->acts_d[l]);
	for (int l = 0; e->x_d && l < e->n - 1; l++)
		zn_device_free(e->dev, e->x_d[l]);
	free(e->acts_d);
	free(e->x_d);
	zn_device_free(e->dev, e->dx_d[0]);
	zn_device_free(e->dev, e->dx_d[1]);
	zn_device_free(e->dev, e->scratch_d);
	zn_device_free(e->dev, e->tok_d);
	zn_device_free(e->dev, e->tgt_d);
	zn_device_free(e->dev, e->loss_d);
	zn_device_free(e->dev, e->norm_d);
}

static void sync_all(struct zn_engine *e)
{
	struct zn_stream *s[] = { e->compute, e->copy_in, e->copy_out, e->comm_s };

	for (int i = 0; i < 4; i++)
		if (s[i])
			zn_stream_synchronize(s[i]);
}

void zn_engine_destroy(struct zn_engine *e)
{
	if (!e)
		return;
	/* Queued work may still read the buffers: drain every stream before freeing. */
	sync_all(e);
	zn_swapio_destroy(e);
	for (int l = 0; e->L && l < e->n; l++)
		free_layer(e, &e->L[l]);
	free(e->L);
	free_slot(e, &e->slot0);
	for (int i = 0; e->ring && i < e->ring_n; i++)
		free_slot(e, &e->ring[i]);
	free(e->ring);
	zn_device_free(e->dev, e->gslot0.d);
	zn_event_destroy(e->gslot0.free);
	for (int i = 0; i < ZN_PLAN_GRAD_SLOTS; i++) {
		zn_device_free(e->dev, e->gring[i].d);
		zn_event_destroy(e->gring[i].free);
	}
	free_acts(e);
	zn_event_destroy(e->tok_ready);
	zn_event_destroy(e->tok_free);
	zn_event_destroy(e->loss_done);
	zn_event_destroy(e->fwd_done);
	for (int i = 0; e->tev && i < 3 * e->gas; i++)
		zn_event_destroy(e->tev[i]);
	free(e->tev);
	zn_stream_destroy(e->compute);
	zn_stream_destroy(e->copy_in);
	zn_stream_destroy(e->copy_out);
	zn_stream_destroy(e->comm_s);
	zn_comm_destroy(e->comm);
	zn_arena_destroy(e->arena);
	zn_device_destroy(e->dev);
	free(e->loss_h);
	free(e->tmp_h);
	free(e->tmp16_h);
	free(e->norm_h);
	free(e->numel);
	free(e->ld);
	free(e);
}

/* ---- plan --------------------------------------------------------------------------------- */

static uint64_t act_sizes(const struct zn_engine *e, uint64_t *act, uint64_t *x,
			  uint64_t *scratch, uint64_t *tok)
{
	uint64_t bt = (uint64_t)e->B * (uint64_t)e->T, total = 0, smax = 0;

	for (int l = 0; l < e->n; l++) {
		uint64_t s = zn_gpt2_scratch_numel(&e->mc, &e->ld[l], e->B, e->T) * 4;

		act[l] = zn_gpt2_act_numel(&e->mc, &e->ld[l], e->B, e->T) * 4;
		total += zn_plan_device_alloc_bytes(act[l]);
		if (s > smax)
			smax = s;
	}
	*x = bt * (uint64_t)e->mc.d_model * 4;
	*scratch = smax;
	*tok = bt * sizeof(int);
	/* x for layers 0 .. L, two dx buffers, scratch, tokens, targets, losses, norm results */
	total += (uint64_t)(e->n - 1 + 2) * zn_plan_device_alloc_bytes(*x);
	total += zn_plan_device_alloc_bytes(smax);
	total += 2 * zn_plan_device_alloc_bytes(*tok) + zn_plan_device_alloc_bytes(bt * 4);
	total += zn_plan_device_alloc_bytes(zn_devops_norm_bytes(&e->cfg, e->n));
	return total;
}

static int make_plan(struct zn_engine *e, uint64_t act_bytes)
{
	const struct zn_config *c = &e->cfg;
	uint64_t dev_budget = zn_device_budget_bytes(e->dev), pinned_budget;
	struct zn_arena_config ac;
	bool auto_depth = c->runtime.prefetch_depth == 0;
	uint64_t slot = 0;
	char msg[512];
	int rc;

	for (int l = 0; l < e->n; l++) {
		struct zn_shard s;

		zn_plan_shard(e->numel[l], e->world, 0, &s);
		if (l > 0 && s.padded_numel > slot)
			slot = s.padded_numel;
	}
	e->pin = (struct zn_engine_plan_input){
		.layer_count = e->n, .layer_numel = e->numel, .world = e->world,
		.stage = c->zero.stage, .offload_optimizer = c->zero.offload_optimizer.device,
		.offload_param = c->zero.offload_param.device, .bf16 = c->precision.bf16,
		.grad_accum = e->gas, .prefetch_depth = zn_plan_prefetch_depth(c, slot, e->n),
		.activation_bytes = act_bytes,
		.swap_buffer_count = c->zero.offload_optimizer.buffer_count,
		.optim_path_count = c->zero.offload_optimizer.nvme_path_count,
		.param_path_count = c->zero.offload_param.nvme_path_count,
	};
	zn_arena_config_init(&ac, c);
	pinned_budget = c->runtime.pinned_mem_bytes ? c->runtime.pinned_mem_bytes :
						       zn_arena_default_bytes(&ac);
	rc = zn_plan_engine_fit(&e->pin, auto_depth, dev_budget, pinned_budget, &e->plan, msg,
				sizeof(msg));
	if (rc == -ENOMEM)
		zn_error("%s", msg);
	else if (!rc)
		zn_debug("plan: device %" PRIu64 " bytes, pinned %" PRIu64 " bytes, prefetch %d",
			 e->plan.device_bytes, e->plan.host_bytes, e->plan.prefetch_depth);
	e->pin.prefetch_depth = e->plan.prefetch_depth;
	return rc;
}

/* ---- allocation ----------------------------------------------------------------------- */

static int dalloc(struct zn_engine *e, void *pp, uint64_t bytes)
{
	return bytes ? zn_device_alloc(e->dev, (void **)pp, bytes) : 0;
}

static int halloc(struct zn_engine *e, void *pp, uint64_t bytes)
{
	return bytes ? zn_arena_alloc(e->arena, bytes, 0, (void **)pp) : 0;
}

static int alloc_layer(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	struct zn_layer_buffers *b = &ly->sz;
	int rc;

	zn_plan_shard(e->numel[l], e->world, e->rank, &ly->sh);
	zn_plan_layer_buffers(&e->pin, &e->plan, l, b);
	if (e->cfg.zero.stage == 0) {
		ly->opt_off = 0;
		ly->opt_count = e->numel[l];
	} else {
		ly->opt_off = ly->sh.offset;
		ly->opt_count = ly->sh.real_numel;
	}
	rc = dalloc(e, &ly->param_d, b->param_d);
	if (!rc)
		rc = dalloc(e, &ly->grad_d, b->grad_d);
	if (!rc)
		rc = dalloc(e, &ly->grad_shard_d, b->grad_shard_d);
	if (!rc)
		rc = dalloc(e, &ly->master_d, b->master_d);
	if (!rc)
		rc = dalloc(e, &ly->m_d, b->m_d);
	if (!rc)
		rc = dalloc(e, &ly->v_d, b->v_d);
	if (!rc)
		rc = halloc(e, &ly->param_h, b->param_h);
	if (!rc)
		rc = halloc(e, &ly->param_stage_h, b->param_stage_h);
	if (!rc)
		rc = halloc(e, &ly->grad_h, b->grad_h);
	if (!rc)
		rc = halloc(e, &ly->grad_recv_h, b->grad_recv_h);
	if (!rc)
		rc = halloc(e, &ly->master_h, b->master_h);
	if (!rc)
		rc = halloc(e, &ly->m_h, b->m_h);
	if (!rc)
		rc = halloc(e, &ly->v_h, b->v_h);
	if (!rc)
		rc = zn_event_create(e->dev, &ly->grad_ev);
	if (!rc)
		rc = zn_event_create(e->dev, &ly->aux_ev);
	return rc;
}

static int alloc_slot(struct zn_engine *e, struct zn_slot *s, uint64_t numel)
{
	int rc = dalloc(e, &s->f32_d, zn_plan_device_alloc_bytes(numel * 4));

	if (!rc && e->plan.bf16_gather)
		rc = dalloc(e, &s->bf16_d, zn_plan_device_alloc_bytes(numel * 2));
	if (!rc)
		rc = zn_event_create(e->dev, &s->ready);
	if (!rc)
		rc = zn_event_create(e->dev, &s->free);
	return rc;
}

static int alloc_working(struct zn_engine *e)
{
	int rc = 0;

	if (e->plan.gathers) {
		rc = alloc_slot(e, &e->slot0, e->plan.layer0_numel);
		e->ring_n = e->plan.param_slots;
		e->ring = calloc((size_t)e->ring_n, sizeof(*e->ring));
		if (!rc && !e->ring)
			rc = -ENOMEM;
		for (int i = 0; !rc && i < e->ring_n; i++)
			rc = alloc_slot(e, &e->ring[i], e->plan.slot_numel);
	}
	if (!rc && e->plan.grad_slots) {
		rc = dalloc(e, &e->gslot0.d, zn_plan_device_alloc_bytes(e->plan.layer0_numel * 4));
		if (!rc)
			rc = zn_event_create(e->dev, &e->gslot0.free);
		for (int i = 0; !rc && i < ZN_PLAN_GRAD_SLOTS; i++) {
			rc = dalloc(e, &e->gring[i].d,
				    zn_plan_device_alloc_bytes(e->plan.slot_numel * 4));
			if (!rc)
				rc = zn_event_create(e->dev, &e->gring[i].free);
		}
	}
	return rc;
}

static int alloc_acts(struct zn_engine *e)
{
	uint64_t x, scratch, tok, bt = (uint64_t)e->B * e->T;
	uint64_t *acts = calloc((size_t)e->n, sizeof(*acts));
	int rc = 0;

	e->acts_d = calloc((size_t)e->n, sizeof(*e->acts_d));
	e->x_d = calloc((size_t)e->n, sizeof(*e->x_d));
	e->loss_h = calloc((size_t)(bt * (uint64_t)e->gas), sizeof(float));
	e->tev = calloc((size_t)(3 * e->gas), sizeof(*e->tev));
	if (!acts || !e->acts_d || !e->x_d || !e->loss_h || !e->tev) {
		free(acts);
		return -ENOMEM;
	}
	act_sizes(e, acts, &x, &scratch, &tok);
	for (int l = 0; !rc && l < e->n; l++)
		rc = dalloc(e, &e->acts_d[l], acts[l]);
	for (int l = 0; !rc && l < e->n - 1; l++)
		rc = dalloc(e, &e->x_d[l], x);
	if (!rc)
		rc = dalloc(e, &e->dx_d[0], x);
	if (!rc)
		rc = dalloc(e, &e->dx_d[1], x);
	if (!rc)
		rc = dalloc(e, &e->scratch_d, scratch);
	if (!rc)
		rc = dalloc(e, &e->tok_d, tok);
	if (!rc)
		rc = dalloc(e, &e->tgt_d, tok);
	if (!rc)
		rc = dalloc(e, &e->loss_d, bt * 4);
	e->norm_bytes = zn_devops_norm_bytes(&e->cfg, e->n);
	if (!rc)
		rc = dalloc(e, &e->norm_d, e->norm_bytes);
	if (!rc && e->norm_bytes && !(e->norm_h = malloc(e->norm_bytes)))
		rc = -ENOMEM;
	e->scratch_bytes = scratch;
	for (int i = 0; !rc && i < 3 * e->gas; i++)
		rc = zn_event_create(e->dev, &e->tev[i]);
	if (!rc)
		rc = zn_event_create(e->dev, &e->tok_ready);
	if (!rc)
		rc = zn_event_create(e->dev, &e->tok_free);
	if (!rc)
		rc = zn_event_create(e->dev, &e->loss_done);
	if (!rc)
		rc = zn_event_create(e->dev, &e->fwd_done);
	free(acts);
	return rc;
}

/* ---- initialization ----------------------------------------------------------------- */

/* tmp_h[0 .. padded) = layer l's initial parameters (zero beyond numel). */
static void initial_layer(struct zn_engine *e, int l, const float *const *init)
{
	uint64_t padded = e->L[l].sh.padded_numel;

	if (init) {
		memcpy(e->tmp_h, init[l], e->numel[l] * sizeof(float));
		memset(e->tmp_h + e->numel[l], 0, (padded - e->numel[l]) * sizeof(float));
	} else {
		zn_gpt2_init_range(&e->mc, &e->ld[l], 0, padded, e->tmp_h, e->cfg.runtime.seed);
	}
}

/* Copies count parameters from tmp_h + first to dst on tier `dev_tier` in dtype pdt. */
static int put_params(struct zn_engine *e, void *dst, bool on_device, uint64_t first,
		      uint64_t count)
{
	const void *src = e->tmp_h + first;
	uint64_t bytes = count * (e->pdt == ZN_DTYPE_BF16 ? 2 : 4);

	if (e->pdt == ZN_DTYPE_BF16) {
		zn_cast_f32_to_bf16(e->tmp16_h, e->tmp_h + first, count);
		src = e->tmp16_h;
	}
	if (!on_device) {
		memcpy(dst, src, bytes);
		return 0;
	}
	/* tmp_h is reused for the next layer: wait for the copy before returning */
	int rc = zn_memcpy_async(e->copy_in, dst, src, bytes, ZN_COPY_H2D);

	if (!rc)
		rc = zn_stream_synchronize(e->copy_in);
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
	rc = zn_memcpy_async(e->copy_in, dst, e->tmp_h + first, count * 4, ZN_COPY_H2D);
	if (!rc)
		rc = zn_stream_synchronize(e->copy_in);
	return rc;
}

static int init_layer(struct zn_engine *e, int l, const float *const *init)
{
	struct zn_layer *ly = &e->L[l];
	uint64_t opt_n = e->cfg.zero.stage == 0 ? ly->sh.padded_numel : ly->sh.shard_numel;
	uint64_t opt_first = e->cfg.zero.stage == 0 ? 0 : ly->sh.offset;
	int rc = 0;

	initial_layer(e, l, init);
	if (ly->sz.param_d && e->cfg.zero.stage < 3)
		rc = put_params(e, ly->param_d, true, 0, ly->sh.padded_numel);
	else if (ly->sz.param_d)
		rc = put_params(e, ly->param_d, true, ly->sh.offset, ly->sh.shard_numel);
	else if (ly->sz.param_h)
		rc = put_params(e, ly->param_h, false, ly->sh.offset, ly->sh.shard_numel);
	if (!rc && ly->master_d)
		rc = put_f32(e, ly->master_d, true, opt_first, opt_n);
	if (!rc && ly->master_h)
		rc = put_f32(e, ly->master_h, false, opt_first, opt_n);
	if (!rc && ly->m_d)
		rc = zn_memset_async(e->copy_in, ly->m_d, 0, opt_n * 4);
	if (!rc && ly->v_d)
		rc = zn_memset_async(e->copy_in, ly->v_d, 0, opt_n * 4);
	if (ly->m_h)
		memset(ly->m_h, 0, opt_n * 4);
	if (ly->v_h)
		memset(ly->v_h, 0, opt_n * 4);
	if (ly->param_stage_h)
		memset(ly->param_stage_h, 0, ly->sz.param_stage_h);
	if (ly->grad_h)
		memset(ly->grad_h, 0, ly->sh.shard_numel * 4);
	if (!rc)
		rc = zn_swapio_init_layer(e, l);
	if (!rc)
		rc = zn_stream_synchronize(e->copy_in);
	return rc;
}

/* ---- create ------------------------------------------------------------------------------ */

static int check_options(struct zn_engine *e, const struct zn_engine_options *opt)
{
	const struct zn_config *c = &e->cfg;

	if (opt->seq_len < 1 || opt->seq_len > e->mc.seq) {
		zn_error("sequence length %d: must be 1 .. %d (the model's --seq)", opt->seq_len,
			 e->mc.seq);
		return -EINVAL;
	}
	if (c->precision.fp16) {
		zn_error("fp16 training is not supported by the engine: use --bf16 (or fp32)");
		return -EINVAL;
	}
	if (c->scheduler.type == ZN_LR_WARMUP_COSINE &&
	    c->scheduler.total_num_steps <= c->scheduler.warmup_num_steps) {
		zn_error("scheduler WarmupCosineLR: total_num_steps (%" PRId64 ") must exceed "
			 "warmup_num_steps (%" PRId64 ")", c->scheduler.total_num_steps,
			 c->scheduler.warmup_num_steps);
		return -EINVAL;
	}
	if (e->n > 64 + 2) {
		zn_error("the engine supports at most 64 layers (model has %d)", e->n - 2);
		return -EINVAL;
	}
	return 0;
}

static int create_runtime(struct zn_engine *e, const struct zn_engine_options *opt)
{
	struct zn_device_config dc = { .kind = e->cfg.runtime.device,
				       .budget_bytes = e->cfg.runtime.device_mem_bytes };
	/* an explicit single comm is process-local, even under a multi-rank launch */
	struct zn_comm_config cc = { .kind = (enum zn_comm_kind)opt->comm_kind,
				     .local = opt->comm_kind == ZN_COMM_SINGLE };
	int local = 0, rc;

	if (opt->comm_kind != ZN_COMM_SINGLE) {
		rc = zn_comm_world_hint(NULL, NULL, &local);
		if (rc)
			return rc;
	}
	dc.ordinal = local;
	rc = zn_device_create(&e->dev, &dc);
	if (rc)
		return rc;
	e->k = zn_device_kernels(e->dev);
	cc.dev = e->dev;
	rc = zn_comm_create(&e->comm, &cc);
	if (rc)
		return rc;
	e->rank = zn_comm_rank(e->comm);
	e->world = zn_comm_size(e->comm);
	rc = zn_stream_create(e->dev, &e->compute);
	if (!rc)
		rc = zn_stream_create(e->dev, &e->copy_in);
	if (!rc)
		rc = zn_stream_create(e->dev, &e->copy_out);
	if (!rc)
		rc = zn_stream_create(e->dev, &e->comm_s);
	return rc;
}

static int create_model(struct zn_engine *e, const struct zn_gpt2_config *model)
{
	e->mc = *model;
	if (zn_gpt2_config_validate(&e->mc))
		return -EINVAL;
	e->n = zn_gpt2_layer_count(&e->mc);
	e->ld = calloc((size_t)e->n, sizeof(*e->ld));
	e->numel = calloc((size_t)e->n, sizeof(*e->numel));
	if (!e->ld || !e->numel)
		return -ENOMEM;
	if (zn_gpt2_layers(&e->mc, e->ld))
		return -EINVAL;
	for (int l = 0; l < e->n; l++)
		e->numel[l] = e->ld[l].numel;
	return 0;
}

static int create_buffers(struct zn_engine *e, const struct zn_engine_options *opt)
{
	uint64_t maxpad = 0;
	int rc;

	if (e->plan.host_bytes) {
		struct zn_arena_config ac;

		zn_arena_config_init(&ac, &e->cfg);
		ac.bytes = e->plan.host_bytes;
		ac.cuda = zn_device_kind_of(e->dev) == ZN_DEVICE_CUDA;
		rc = zn_arena_create(&e->arena, &ac);
		if (rc)
			return rc;
	}
	e->L = calloc((size_t)e->n, sizeof(*e->L));
	if (!e->L)
		return -ENOMEM;
	for (int l = 0; l < e->n; l++) {
		rc = alloc_layer(e, l);
		if (rc)
			return rc;
		if (e->L[l].sh.padded_numel > maxpad)
			maxpad = e->L[l].sh.padded_numel;
	}
	rc = alloc_working(e);
	if (!rc)
		rc = alloc_acts(e);
	if (!rc)
		rc = zn_swapio_create(e);
	if (rc)
		return rc;
	e->tmp_h = malloc(maxpad * sizeof(float));
	e->tmp16_h = malloc(maxpad * sizeof(uint16_t));
	if (!e->tmp_h || !e->tmp16_h)
		return -ENOMEM;
	for (int l = 0; l < e->n; l++) {
		rc = init_layer(e, l, opt->init_params_h);
		if (rc)
			return rc;
	}
	return 0;
}

int zn_engine_create(struct zn_engine **out, const struct zn_config *cfg,
		     const struct zn_gpt2_config *model, const struct zn_engine_options *opt)
{
	struct zn_engine *e = calloc(1, sizeof(*e));
	uint64_t act_bytes, act[66], x, scratch, tok;
	int rc;

	*out = NULL;
	if (!e)
		return -ENOMEM;
	e->cfg = *cfg;
	e->step = 0;
	e->pdt = cfg->precision.bf16 ? ZN_DTYPE_BF16 : ZN_DTYPE_F32;
	rc = create_model(e, model);
	if (rc)
		goto destroy;
	e->T = opt->seq_len;
	e->B = (int)cfg->train_micro_batch_size_per_gpu;
	e->gas = (int)(cfg->gradient_accumulation_steps > 0 ? cfg->gradient_accumulation_steps : 1);
	if (e->B < 1)
		e->B = 1;
	rc = check_options(e, opt);
	if (rc)
		goto destroy;
	rc = create_runtime(e, opt);
	if (rc)
		goto destroy;
	act_bytes = act_sizes(e, act, &x, &scratch, &tok);
	rc = make_plan(e, act_bytes);
	if (!rc)
		rc = create_buffers(e, opt);
	if (rc)
		goto destroy;
	*out = e;
	return 0;
destroy:
	zn_engine_destroy(e);
	return rc;
}

/* ---- read-back and save --------------------------------------------------------------- */

/* This rank's fp32 master of layer l: its span [first, first + count) and where it is. */
static const float *master_of(struct zn_engine *e, int l, bool *on_device)
{
	struct zn_layer *ly = &e->L[l];

	if (ly->master_d || ly->master_h) {
		*on_device = ly->master_d != NULL;
		return ly->master_d ? ly->master_d : ly->master_h;
	}
	/* aliased: the fp32 parameters are the master */
	*on_device = ly->param_d != NULL;
	if (ly->param_d)
		return e->cfg.zero.stage < 3 ? (const float *)ly->param_d + ly->sh.offset :
					       (const float *)ly->param_d;
	return ly->param_h;
}

int zn_engine_read_layer(struct zn_engine *e, int l, float *out_h)
{
	struct zn_layer *ly;
	bool on_device;
	const float *m;
	uint64_t first, count;
	int rc = 0;

	if (l < 0 || l >= e->n) {
		zn_error("zn_engine_read_layer: layer %d: the model has layers 0 .. %d", l,
			 e->n - 1);
		return -EINVAL;
	}
	ly = &e->L[l];
	if (zn_swapio_optim(e)) {
		rc = zn_swapio_read_master(e, l, &m);
		on_device = false;
	} else {
		m = master_of(e, l, &on_device);
	}
	if (rc)
		return rc;
	first = ly->sh.offset;
	count = ly->sh.shard_numel;
	if (e->cfg.zero.stage == 0) {
		/* every rank holds the full master */
		if (m != ly->master_d && m != ly->master_h)
			m -= ly->sh.offset;
		first = 0;
		count = ly->sh.padded_numel;
	}
	if (on_device) {
		rc = zn_memcpy_async(e->copy_out, e->tmp_h + first, m, count * 4, ZN_COPY_D2H);
		if (!rc)
			rc = zn_stream_synchronize(e->copy_out);
	} else {
		memcpy(e->tmp_h + first, m, count * 4);
	}
	if (!rc && e->cfg.zero.stage > 0)
		rc = zn_comm_all_gather(e->comm, NULL, e->tmp_h, e->tmp_h + first, count,
					ZN_DTYPE_F32);
	if (!rc)
		memcpy(out_h, e->tmp_h, e->numel[l] * 4);
	return rc;
}

int zn_engine_save(struct zn_engine *e, const char *path, enum zn_dtype dtype)
{
	float **p = calloc((size_t)e->n, sizeof(*p));
	int rc = p ? 0 : -ENOMEM;

	for (int l = 0; !rc && l < e->n; l++) {
		p[l] = malloc(e->numel[l] * sizeof(float));
		rc = p[l] ? zn_engine_read_layer(e, l, p[l]) : -ENOMEM;
	}
	if (!rc && e->rank == 0)
		rc = zn_gpt2_save_safetensors(&e->mc, e->ld, (const float *const *)p, path, dtype);
	for (int l = 0; p && l < e->n; l++)
		free(p[l]);
	free(p);
	return rc;
}
