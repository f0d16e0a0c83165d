/* The engine's life cycle: runtime, model, plan (refuse before allocating), each part's
 * state (tiers, prefetch, reduce, acts, optim, swapio: engine_parts.c), initial parameters,
 * read-back and save. The step is step.c (docs/architecture.md). */
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/log.h"
#include "core/size.h"
#include "lmhead_ce.h"
#include "sched/engine_impl.h"

int zn_engine_rank(const struct zn_engine *e)
{
	return e->rt.rank;
}

int zn_engine_set_trace(struct zn_engine *e, struct zn_trace *t)
{
	struct zn_aio *aio;
	int rc = 0;

	/* traced write-behind still in flight belongs to the old trace */
	if (zn_tracer_attached(&e->tr) && !zn_tracer_attached_to(&e->tr, t))
		rc = zn_swapio_quiesce(&e->sw);
	zn_tracer_attach(&e->tr, t);
	/* completion times while a trace is attached (write-behind ends after its step) */
	aio = zn_swapio_aio(&e->sw);
	if (aio)
		zn_aio_set_timing(aio, t != NULL);
	return rc;
}

const float *zn_engine_params_f32(struct zn_engine *e, int layer)
{
	return e->L[layer].param_d;
}

struct zn_aio *zn_engine_ckpt_aio(struct zn_engine *e)
{
	return zn_home_aio(e->act.lm.on ? &e->act.lm.st : &e->act.rec.st);
}

struct zn_aio *zn_engine_aio(struct zn_engine *e)
{
	return zn_swapio_aio(&e->sw);
}

int zn_engine_set_nvme_cap(struct zn_engine *e, uint64_t bytes_per_s)
{
	struct zn_aio *aio = zn_swapio_aio(&e->sw);

	if (!aio)
		return -EINVAL;
	zn_aio_set_bandwidth_cap(aio, bytes_per_s);
	return 0;
}

int zn_engine_flush(struct zn_engine *e)
{
	return zn_swapio_quiesce(&e->sw);
}

int zn_engine_world(const struct zn_engine *e)
{
	return e->rt.world;
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

void zn_engine_destroy(struct zn_engine *e)
{
	if (!e)
		return;
	/* Queued work may still read the buffers: drain every stream before freeing. */
	zn_runtime_sync(&e->rt);
	zn_tracer_destroy(&e->tr);
	zn_swapio_destroy(&e->sw);
	for (int l = 0; e->L && l < e->n; l++)
		zn_tiers_free_layer(&e->ti, l);
	free(e->L);
	zn_prefetch_destroy(&e->pf);
	zn_reduce_destroy(&e->rd);
	zn_acts_destroy(&e->act);
	zn_frozen_destroy(&e->fz);
	zn_optim_destroy(&e->opt);
	zn_arena_destroy(e->arena);
	zn_runtime_destroy(&e->rt);
	free(e->tmp_h);
	free(e->tmp16_h);
	free(e->numel);
	free(e->frozen_numel);
	zn_layer_descs_free(e->ld, e->n);
	free(e);
}

static int make_plan(struct zn_engine *e)
{
	const struct zn_config *c = &e->cfg;
	uint64_t dev_budget = zn_device_budget_bytes(e->rt.dev);
	char msg[512];
	int rc = zn_lmajor_plan(e, dev_budget, msg, sizeof(msg));

	zn_engine_warn_budgets(e, dev_budget, e->pinned_budget);
	/* a plan over the budgets is the run's settings' fault (exit 2); -ENOMEM is kept for
	 * an allocation that fails (exit 1) */
	if (rc == -ENOMEM) {
		zn_error("%s", msg);
		rc = ZN_EUSAGE;
	} else if (!rc) {
		zn_debug("plan: device %" PRIu64 " bytes, pinned %" PRIu64 " bytes, prefetch %d",
			 e->plan.device_bytes, e->plan.host_bytes, e->plan.prefetch_depth);
	}
	if (!rc && e->plan.gathers && c->runtime.prefetch_depth != 0 &&
	    c->runtime.prefetch_depth > e->plan.prefetch_depth)
		zn_info("prefetch depth %d: with %d layers at most %d can be fetched ahead of the "
			"one computing; using %d", c->runtime.prefetch_depth, e->n,
			e->plan.prefetch_depth, e->plan.prefetch_depth);
	return rc;
}

/* ---- initialization ----------------------------------------------------------------- */

/* tmp_h[0 .. padded) = layer l's initial parameters (zero beyond numel). */
static int initial_layer(struct zn_engine *e, int l, const struct zn_engine_options *opt)
{
	uint64_t padded = e->L[l].sh.padded_numel;
	int rc = 0;

	if (opt->init_params_h)
		memcpy(e->tmp_h, opt->init_params_h[l], e->numel[l] * sizeof(float));
	else if (opt->init_layer)
		rc = opt->init_layer(opt->init_ctx, l, &e->ld[l], e->tmp_h);
	else
		e->model.ops->init(e->model.config, &e->ld[l], 0, padded, e->tmp_h,
				   e->cfg.runtime.seed);
	if (opt->init_params_h || opt->init_layer)
		memset(e->tmp_h + e->numel[l], 0, (padded - e->numel[l]) * sizeof(float));
	return rc;
}

/* ---- create ------------------------------------------------------------------------------ */

static int check_options(struct zn_engine *e, const struct zn_engine_options *opt)
{
	const struct zn_config *c = &e->cfg;

	int max_seq = e->model.ops->max_seq(e->model.config);

	if (opt->seq_len < 1 || opt->seq_len > max_seq) {
		zn_error("sequence length %d: must be 1 .. %d (the model's --seq)", opt->seq_len,
			 max_seq);
		return -EINVAL;
	}
	if (c->scheduler.type == ZN_LR_WARMUP_COSINE &&
	    c->scheduler.total_num_steps <= c->scheduler.warmup_num_steps) {
		zn_error("scheduler WarmupCosineLR: total_num_steps (%" PRId64 ") must exceed "
			 "warmup_num_steps (%" PRId64 ")", c->scheduler.total_num_steps,
			 c->scheduler.warmup_num_steps);
		return -EINVAL;
	}
	return 0;
}

/* Every layer's frozen parameters onto their home (frozen.h), one layer at a time: fp32
 * values (quantized at load with --quantize-base), or a 4-bit checkpoint's extents as
 * stored (init_frozen_q4). */
static int initial_frozen(struct zn_engine *e, const struct zn_engine_options *opt)
{
	uint64_t most = 0;
	float *buf;
	int rc = 0;

	for (int l = 0; l < e->n; l++) {
		if (e->frozen_numel[l] * 4 > most)
			most = e->frozen_numel[l] * 4;
		if (e->fz.q4 && zn_frozen_stored_bytes(&e->fz, l) > most)
			most = zn_frozen_stored_bytes(&e->fz, l);
	}
	if (!most)
		return 0;
	buf = zn_size_alloc(most, "a layer's frozen parameters on the host");
	if (!buf)
		return -ENOMEM;
	for (int l = 0; !rc && l < e->n; l++) {
		if (!e->frozen_numel[l])
			continue;
		memset(buf, 0, most);
		if (zn_frozen_quantized(&e->fz) && opt->init_frozen_q4) {
			rc = opt->init_frozen_q4(opt->init_ctx, l, buf);
			if (!rc)
				rc = zn_frozen_init_layer_q4(&e->fz, l, buf);
			continue;
		}
		if (opt->init_frozen)
			rc = opt->init_frozen(opt->init_ctx, l, &e->ld[l], buf);
		else
			e->model.ops->init_frozen(e->model.config, &e->ld[l], 0,
						  e->frozen_numel[l], buf, e->cfg.runtime.seed);
		if (!rc)
			rc = zn_frozen_init_layer(&e->fz, l, buf);
	}
	free(buf);
	return rc;
}

static int create_buffers(struct zn_engine *e, const struct zn_engine_options *opt)
{
	uint64_t maxpad = 0;
	int rc;

	if (e->plan.host_bytes) {
		struct zn_arena_config ac;

		zn_arena_config_init(&ac, &e->cfg);
		/* what the plan needs and the stated margin, within the budget */
		ac.bytes = zn_plan_pinned_reserve(&e->plan, e->pinned_budget);
		ac.cuda = zn_device_kind_of(e->rt.dev) == ZN_DEVICE_CUDA;
		rc = zn_engine_part(zn_arena_create(&e->arena, &ac), "the pinned host arena", -1);
		if (rc)
			return rc;
	}
	e->L = zn_size_calloc((uint64_t)e->n, sizeof(*e->L), "the layers' state");
	if (!e->L)
		return -ENOMEM;
	e->ti = (struct zn_tiers){
		.L = e->L, .plan = &e->plan, .stage = e->cfg.zero.stage, .pin = &e->pin,
		.numel = e->numel, .rank = e->rt.rank, .world = e->rt.world, .pdt = e->pdt,
		.dev = e->rt.dev, .arena = e->arena, .copy_in = e->rt.copy_in,
	};
	for (int l = 0; l < e->n; l++) {
		rc = zn_engine_part(zn_tiers_alloc_layer(&e->ti, l),
				    "parameters, gradients and optimizer state", l);
		if (rc)
			return rc;
		if (e->L[l].sh.padded_numel > maxpad)
			maxpad = e->L[l].sh.padded_numel;
	}
	rc = zn_engine_create_parts(e);
	if (rc)
		return rc;
	e->tmp_h = zn_size_calloc(maxpad, sizeof(float), "a layer's host scratch (fp32)");
	e->tmp16_h = zn_size_calloc(maxpad, sizeof(uint16_t), "a layer's host scratch (16-bit)");
	if (!e->tmp_h || !e->tmp16_h)
		return -ENOMEM;
	for (int l = 0; l < e->n; l++) {
		rc = initial_layer(e, l, opt);
		if (!rc)
			rc = zn_tiers_init_layer(&e->ti, l, e->tmp_h, e->tmp16_h);
		if (!rc)
			rc = zn_swapio_init_layer(&e->sw, l, e->tmp_h); /* its nvme homes, from the same values */
		if (rc)
			return rc;
	}
	return initial_frozen(e, opt);
}

/* Everything the plan reads: the config, the model's layers, the batch and the options
 * (no device, no rank). */
static int prepare(struct zn_engine *e, const struct zn_config *cfg, const struct zn_model *model,
		   const struct zn_engine_options *opt)
{
	int rc;

	e->cfg = *cfg;
	e->step = 0;
	e->pdt = cfg->precision.bf16 ? ZN_DTYPE_BF16 :
		 cfg->precision.fp16 ? ZN_DTYPE_F16 : ZN_DTYPE_F32;
	rc = zn_engine_check_model(e, model);
	if (rc)
		return rc;
	e->compute16 = e->pdt == ZN_DTYPE_BF16 && cfg->runtime.compute_dtype != ZN_COMPUTE_FP32 &&
		       model->ops->act_numel_bf16 && model->ops->scratch_numel_bf16;
	if (cfg->runtime.compute_dtype == ZN_COMPUTE_BF16 && !e->compute16) {
		zn_error("--compute-dtype bf16: the %s model family has no bf16 compute (it "
			 "computes on fp32 working copies): use --compute-dtype fp32 or auto",
			 model->ops->family);
		return -EINVAL;
	}
	e->T = opt->seq_len;
	e->B = (int)cfg->train_micro_batch_size_per_gpu;
	e->gas = (int)(cfg->gradient_accumulation_steps > 0 ? cfg->gradient_accumulation_steps : 1);
	if (e->B < 1)
		e->B = 1;
	rc = check_options(e, opt);
	return rc ? rc : zn_engine_check_counts(cfg, model, opt->seq_len);
}

/* Pass one over the layers for a device of dev_budget bytes: the lm_head's chunks (and so
 * the scratch the plan counts) are sized from it. Only the sizes until the plan fits:
 * nothing yet grows with the counts but them. */
static int layer_sizes(struct zn_engine *e, uint64_t dev_budget,
		       const struct zn_engine_options *opt)
{
	struct zn_frozen_shape sh = {
		.n = e->n, .pdt = e->pdt, .model = &e->model, .ld = e->ld, .q4 = opt->frozen_q4,
		.quantize_base = e->cfg.runtime.quantize_base,
		.double_quant = e->cfg.runtime.double_quant,
	};
	int rc;

	e->work_bytes = zn_lmhead_ce_work_bytes(dev_budget);
	rc = zn_engine_layer_sizes(e);
	sh.numel = e->frozen_numel;
	return rc ? rc : zn_frozen_prepare(&e->fz, &sh);
}

int zn_engine_plan_memory(const struct zn_config *cfg, const struct zn_model *model,
			  const struct zn_engine_options *opt, int world, uint64_t device_budget,
			  struct zn_engine_memory *out, char *msg, size_t msg_size)
{
	struct zn_engine *e = calloc(1, sizeof(*e));
	int rc;

	*out = (struct zn_engine_memory){ 0 };
	if (msg_size)
		msg[0] = 0;
	if (!e)
		return -ENOMEM;
	rc = prepare(e, cfg, model, opt);
	e->rt.world = world;
	if (!rc)
		rc = layer_sizes(e, device_budget, opt);
	if (!rc)
		rc = zn_lmajor_plan(e, device_budget, msg, msg_size);
	if (!rc || rc == -ENOMEM)
		zn_engine_memory_of(e, e->plan.host_bytes ? zn_arena_size_for(
					   zn_plan_pinned_reserve(&e->plan, e->pinned_budget)) : 0, out);
	zn_engine_destroy(e);
	return rc;
}

int zn_engine_create(struct zn_engine **out, const struct zn_config *cfg,
		     const struct zn_model *model, const struct zn_engine_options *opt)
{
	struct zn_engine *e = calloc(1, sizeof(*e));
	int rc;

	*out = NULL;
	if (!e)
		return -ENOMEM;
	rc = prepare(e, cfg, model, opt);
	if (rc)
		goto destroy;
	rc = zn_engine_part(zn_runtime_create(&e->rt, &e->cfg, opt->comm_kind),
			    "the runtime (device, comm, streams)", -1);
	zn_tracer_init(&e->tr, &e->rt);
	if (!rc)
		rc = layer_sizes(e, zn_device_budget_bytes(e->rt.dev), opt);
	if (rc)
		goto destroy;
	rc = make_plan(e);
	if (!rc)
		rc = zn_engine_layer_descs(e);
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
	first = ly->sh.offset;
	count = ly->sh.shard_numel;
	if (e->cfg.zero.stage == 0) {
		/* every rank holds the full master */
		first = 0;
		count = ly->sh.padded_numel;
	}
	if (zn_swapio_optim(&e->sw)) {
		/* read in chunks straight into place (stage >= 1: the shard) */
		rc = zn_swapio_read_master(&e->sw, l, e->tmp_h + first);
		on_device = false;
		m = e->tmp_h + first;
	} else {
		m = zn_tiers_master_full(&e->ti, l, &on_device);
	}
	if (rc)
		return rc;
	if (on_device) {
		rc = zn_memcpy_async(e->rt.copy_out, e->tmp_h + first, m, count * 4, ZN_COPY_D2H);
		if (!rc)
			rc = zn_stream_synchronize(e->rt.copy_out);
	} else if (m != e->tmp_h + first) {
		memcpy(e->tmp_h + first, m, count * 4);
	}
	if (!rc && e->cfg.zero.stage > 0)
		rc = zn_comm_all_gather(e->rt.comm, NULL, e->tmp_h, e->tmp_h + first, count,
					ZN_DTYPE_F32);
	if (!rc)
		memcpy(out_h, e->tmp_h, e->numel[l] * 4);
	return rc;
}

uint64_t zn_engine_frozen_numel(const struct zn_engine *e, int layer)
{
	return layer >= 0 && layer < e->n ? e->frozen_numel[layer] : 0;
}

const struct zn_q4_layer *zn_engine_frozen_q4(const struct zn_engine *e)
{
	return zn_frozen_layouts(&e->fz);
}

int zn_engine_read_frozen_q4(struct zn_engine *e, int layer, void *out_h)
{
	if (!zn_frozen_quantized(&e->fz) || layer < 0 || layer >= e->n) {
		zn_error("zn_engine_read_frozen_q4: layer %d: no 4-bit base layer", layer);
		return -EINVAL;
	}
	return zn_frozen_read_layer_q4(&e->fz, layer, out_h);
}

int zn_engine_read_frozen(struct zn_engine *e, int layer, float *out_h)
{
	if (layer < 0 || layer >= e->n) {
		zn_error("zn_engine_read_frozen: layer %d: the model has layers 0 .. %d", layer,
			 e->n - 1);
		return -EINVAL;
	}
	return zn_frozen_read_layer(&e->fz, layer, out_h);
}

/* Weights that are not finite are never written: -ERANGE naming the tensor. */
static int check_finite_layer(const struct zn_engine *e, int l, const float *w,
			      const char *path)
{
	const struct zn_layer_desc *L = &e->ld[l];

	for (int t = 0; t < L->tensor_count; t++) {
		for (uint64_t i = 0; i < L->tensors[t].numel; i++) {
			float x = w[L->tensors[t].offset + i];

			if (isfinite(x))
				continue;
			zn_error("not saving %s: %s element %llu is %s (the run diverged)", path,
				 L->tensors[t].name, (unsigned long long)i,
				 isnan(x) ? "NaN" : "infinite");
			return -ERANGE;
		}
	}
	return 0;
}

int zn_engine_save(struct zn_engine *e, const char *path, enum zn_dtype dtype)
{
	float **p = calloc((size_t)e->n, sizeof(*p));
	int rc = p ? 0 : -ENOMEM;

	for (int l = 0; !rc && l < e->n; l++) {
		/* + 1: a frozen layer's 0 */
		p[l] = zn_size_calloc(e->numel[l] + 1, sizeof(float), "a layer to save");
		rc = p[l] ? zn_engine_read_layer(e, l, p[l]) : -ENOMEM;
	}
	/* every rank holds every layer now: all see the same answer */
	for (int l = 0; !rc && l < e->n; l++)
		rc = check_finite_layer(e, l, p[l], path);
	if (!rc && !e->model.ops->save) {
		zn_error("model %s cannot be saved: its ops have no save", e->model.ops->family);
		rc = -EINVAL;
	}
	if (!rc && e->rt.rank == 0)
		rc = e->model.ops->save(e->model.config, e->ld, (const float *const *)p, path,
					dtype);
	for (int l = 0; p && l < e->n; l++)
		free(p[l]);
	free(p);
	return rc;
}
