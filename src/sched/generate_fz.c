/* zinc generate's layers 1 .. n-1 as the training engine's frozen parameters (frozen.h,
 * docs/generate.md): generation trains nothing, so every layer but layer 0 (kept on the
 * device: the tied head reads it again) is a frozen layer, homed on the device, in pinned
 * host memory or in the frozen file on nvme, and fetched into the frozen part's working
 * slots ahead of use with the same code as LoRA's frozen base: nvme reads through the aio
 * engine (io_uring) into the slots' pinned read buffers, submitted as soon as a buffer is
 * free, the copy up on the copy stream, the compute waiting on the slot's ready event.
 *
 * The frozen part lives in an engine of its own (g->fe) that has only what frozen*.c
 * reads: the configuration (offload_param, aio), the layer descriptors (frozen_numel =
 * numel for layers >= 1), the plan's frozen part (zn_plan_frozen), the runtime's device
 * and streams (generate's), a pinned arena for the host homes or read buffers, and the use
 * sequence: generation is forward-only, one use of each layer 1 .. n-1 per forward (a
 * prefill chunk or a token), so the sequence is those uses for fz_forwards forwards in a
 * row. Its reads and copies run ahead across the end of a forward into the next one (the
 * next token's first layers come in while the last ones compute and the host samples). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/size.h"
#include "sched/engine_impl.h"
#include "sched/generate_impl.h"

#define GEN_FZ_FORWARDS 64 /* forwards per use sequence by default */

static enum zn_tier tier_of(enum zn_gen_home h)
{
	return h == ZN_GEN_CPU ? ZN_TIER_HOST : h == ZN_GEN_NVME ? ZN_TIER_NVME : ZN_TIER_DEVICE;
}

/* the plan's frozen part at read-ahead depth d */
static void plan(struct zn_gen *g, int d)
{
	struct zn_engine *e = g->fe;

	memset(&e->pin, 0, sizeof(e->pin));
	memset(&e->plan, 0, sizeof(e->plan));
	e->pin.layer_count = g->n;
	e->pin.grad_accum = 1;
	e->pin.prefetch_depth = d;
	e->pin.frozen_numel = e->frozen_numel;
	e->pin.frozen_q4_bytes = e->frozen_q4_bytes;
	e->pin.frozen_q4_scratch = e->frozen_q4_scratch;
	e->pin.frozen_expert_numel = e->frozen_expert_numel;
	e->pin.frozen_experts = e->frozen_experts;
	e->plan.pl.params = tier_of(g->o.home);
	zn_plan_frozen(&e->pin, &e->plan);
}

/* The read-ahead depth: --prefetch-depth, else the training default (plan.c
 * zn_plan_prefetch_depth) lowered until the working slots fit what is left of the device
 * budget after the KV caches, activations and layer 0. */
static int choose_depth(struct zn_gen *g, uint64_t slot_numel)
{
	struct zn_engine *e = g->fe;
	uint64_t budget = zn_device_budget_bytes(g->dev), used = zn_device_used_bytes(g->dev);
	uint64_t left = budget > used ? budget - used : 0;
	int d = g->o.prefetch_depth;

	if (d) {
		plan(g, d < 0 ? 0 : d);
		return 0;
	}
	d = zn_plan_prefetch_depth(&e->cfg, slot_numel, g->n);
	for (;; d--) {
		plan(g, d);
		if (d == 0 || !budget || e->plan.dev_frozen_bytes <= left)
			break;
	}
	if (budget && e->plan.dev_frozen_bytes > left) {
		zn_error("zinc generate: the layers need %llu bytes on the device (%s, read ahead "
			 "%d) and %llu of the budget are left after the KV caches and activations: "
			 "raise --device-mem, lower --max-seq / --prefill-chunk, or stream the "
			 "layers with --offload-param cpu|nvme",
			 (unsigned long long)e->plan.dev_frozen_bytes,
			 g->o.home == ZN_GEN_DEVICE ? "all of them" : "working slots",
			 e->plan.frozen_depth, (unsigned long long)left);
		return -ENOMEM;
	}
	return 0;
}

static int make_engine(struct zn_gen *g)
{
	struct zn_engine *e;
	uint64_t slot = 0;

	e = g->fe = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	zn_config_defaults(&e->cfg);
	e->cfg.zero.stage = 3;
	e->cfg.runtime.prefetch_depth = g->o.prefetch_depth > 0 ? g->o.prefetch_depth : 0;
	e->cfg.zero.offload_param.device = g->o.home == ZN_GEN_NVME ? ZN_OFFLOAD_NVME :
					   g->o.home == ZN_GEN_CPU  ? ZN_OFFLOAD_CPU :
								      ZN_OFFLOAD_NONE;
	if (g->o.home == ZN_GEN_NVME) {
		e->cfg.zero.offload_param.nvme_path_count = 1;
		snprintf(e->cfg.zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", g->o.nvme_path);
	}
	e->model = g->m;
	e->n = g->n;
	e->pdt = ZN_DTYPE_F32;
	e->ld = zn_size_calloc((uint64_t)g->n, sizeof(*e->ld), "the layer descriptors");
	e->frozen_numel = zn_size_calloc((uint64_t)g->n, sizeof(*e->frozen_numel),
					 "the layers' sizes");
	if (!e->ld || !e->frozen_numel)
		return -ENOMEM;
	for (int l = 1; l < g->n; l++) {
		e->ld[l] = g->L[l]; /* shares g->L's tensors: freed with g, not here */
		e->ld[l].frozen_numel = g->L[l].numel;
		e->frozen_numel[l] = g->L[l].numel;
		slot = g->L[l].numel > slot ? g->L[l].numel : slot;
	}
	e->rt.dev = g->dev;
	e->rt.compute = g->compute;
	e->rt.copy_in = g->copy;
	e->rt.copy_out = g->copy;
	e->rt.world = 1;
	g->fz_forwards = g->o.fz_forwards > 0 ? g->o.fz_forwards : GEN_FZ_FORWARDS;
	/* a 4-bit base: the layouts, from the checkpoint or of the descriptors (frozen_q4.c) */
	e->cfg.runtime.quantize_base = g->o.quantize_base;
	e->cfg.runtime.double_quant = g->o.double_quant;
	e->opt_q4 = g->o.q4;
	{
		int rc = zn_frozen_q4_prepare(e);

		if (!rc)
			rc = zn_frozen_experts_prepare(e);

		if (rc)
			return rc;
	}
	e->act.use_n = (g->n - 1) * g->fz_forwards;
	e->act.use = calloc((size_t)e->act.use_n, sizeof(*e->act.use));
	if (!e->act.use)
		return -ENOMEM;
	for (int i = 0; i < e->act.use_n; i++)
		e->act.use[i] = (struct zn_use){ .layer = 1 + i % (g->n - 1), .fwd = true };
	return choose_depth(g, slot);
}

static int make_arena(struct zn_gen *g)
{
	struct zn_engine *e = g->fe;
	struct zn_arena_config ac;
	int rc;

	if (!e->plan.host_frozen_bytes)
		return 0;
	zn_arena_config_init(&ac, &e->cfg);
	ac.bytes = e->plan.host_frozen_bytes + ZN_PLAN_HOST_ALIGN;
	ac.pin_required = false; /* pinned if the system allows, as zn_device_host_alloc */
	ac.cuda = zn_device_kind_of(g->dev) == ZN_DEVICE_CUDA;
	rc = zn_arena_create(&e->arena, &ac);
	if (rc)
		zn_error("zinc generate: %llu bytes of host memory for the layers (%s) refused: %s",
			 (unsigned long long)ac.bytes,
			 g->o.home == ZN_GEN_CPU ? "their home" : "the read buffers",
			 g->o.home == ZN_GEN_CPU ? "use --offload-param nvme" : "free some memory");
	return rc;
}

/* every streamed layer onto its home, one at a time through one host buffer: fp32 values
 * (quantized on the way with --quantize-base), or a 4-bit checkpoint's extents as stored */
static int place_layers(struct zn_gen *g)
{
	bool raw = g->fe->fq4 && g->o.init_q4;
	uint64_t most = 0;
	float *h;
	int rc = 0;

	for (int l = 1; l < g->n; l++) {
		uint64_t b = raw ? zn_frozen_stored_bytes(g->fe, l) : g->L[l].numel * 4;

		most = b > most ? b : most;
	}
	h = zn_size_calloc(most, 1, "a layer's parameters on the host");
	if (!h)
		return -ENOMEM;
	for (int l = 1; l < g->n && !rc; l++) {
		if (raw) {
			memset(h, 0, most);
			rc = g->o.init_q4(g->o.init_ctx, l, h);
			if (!rc)
				rc = zn_frozen_init_layer_q4(g->fe, l, h);
			continue;
		}
		rc = g->o.init_layer(g->o.init_ctx, l, &g->L[l], h);
		if (!rc)
			rc = zn_frozen_init_layer(g->fe, l, h);
	}
	free(h);
	return rc;
}

int zn_gen_fz_create(struct zn_gen *g)
{
	int rc;

	if (g->n < 2)
		return 0;
	rc = make_engine(g);
	if (!rc)
		rc = make_arena(g);
	if (!rc) {
		rc = zn_frozen_create(g->fe);
		if (rc && g->o.home == ZN_GEN_NVME && rc != -ENOMEM)
			zn_error("zinc generate: --nvme-path %s: cannot hold the layers' file there: "
				 "give a writable directory", g->o.nvme_path);
		else if (rc)
			zn_error("zinc generate: the layers' buffers (%llu bytes on the device, read "
				 "ahead %d) do not fit: raise --device-mem, lower --prefetch-depth, or "
				 "stream the layers with --offload-param cpu|nvme",
				 (unsigned long long)g->fe->plan.dev_frozen_bytes,
				 g->fe->plan.frozen_depth);
	}
	if (!rc)
		rc = place_layers(g);
	g->fz_restart = true;
	return rc;
}

void zn_gen_fz_destroy(struct zn_gen *g)
{
	struct zn_engine *e = g->fe;

	if (!e)
		return;
	zn_frozen_destroy(e);
	zn_frozen_q4_free(e);
	zn_frozen_experts_free(e);
	zn_arena_destroy(e->arena);
	free(e->act.use);
	free(e->ld);
	free(e->frozen_numel);
	free(e);
	g->fe = NULL;
}

int zn_gen_fz_depth(const struct zn_gen *g)
{
	return g->fe && !g->fe->plan.frozen_direct ? g->fe->plan.frozen_depth : 0;
}

struct zn_aio *zn_gen_aio(struct zn_gen *g)
{
	return g->fe ? g->fe->fz.aio : NULL;
}

uint64_t zn_gen_fz_read_bytes(struct zn_gen *g)
{
	struct zn_aio_stats s;

	if (!zn_gen_aio(g))
		return 0;
	zn_aio_get_stats(zn_gen_aio(g), &s);
	return s.bytes_read;
}

const struct zn_moe_source *zn_gen_fz_experts(struct zn_gen *g, int l)
{
	return l > 0 && g->fe ? zn_frozen_experts_source(g->fe, l) : NULL;
}

int zn_gen_fz_error(struct zn_gen *g)
{
	return g->fe ? g->fe->fz.xerr : 0;
}

void zn_gen_fz_expert_stats(struct zn_gen *g, struct zn_gen_stats *s)
{
	if (!g->fe)
		return;
	s->streamed_bytes += g->fe->fz.x_bytes;
	s->nvme_read_bytes += g->fe->fz.x_read_bytes;
	s->expert_fetches = g->fe->fz.x_count;
	s->expert_bytes = g->fe->fz.x_bytes;
	s->expert_all_fetches = g->expert_all_fetches;
	s->expert_all_bytes = g->expert_all_bytes;
}

/* the start of a forward: a fresh use sequence when this one has no room for it */
int zn_gen_fz_begin(struct zn_gen *g)
{
	int rc;

	if (!g->fe || (!g->fz_restart && g->fz_item + g->n - 1 <= g->fe->act.use_n))
		return 0;
	rc = zn_frozen_begin(g->fe);
	g->fz_item = 0;
	g->fz_restart = rc != 0;
	return rc;
}

static int failed(struct zn_gen *g, int l, int rc)
{
	g->fz_restart = true; /* the next forward starts a fresh sequence */
	if (g->o.home == ZN_GEN_NVME)
		zn_error("zinc generate: streaming layer %d from the layers' file under "
			 "--nvme-path %s failed (%s): check that device", l, g->o.nvme_path,
			 zn_strerror(rc));
	return rc;
}

int zn_gen_fz_acquire(struct zn_gen *g, int l, const float **params_d)
{
	int rc;

	if (l == 0) {
		*params_d = g->params_d[0];
		return 0;
	}
	rc = zn_frozen_acquire(g->fe, g->fz_item, l, params_d);
	if (rc)
		return failed(g, l, rc);
	/* the bytes copied up: the stored layer (fp32, or its 4-bit extent), a sparse layer's
	 * without its experts (those routed to are counted as fetched, frozen_experts.c) */
	if (g->o.home != ZN_GEN_DEVICE)
		g->streamed_bytes += zn_frozen_fetch_bytes(g->fe, l);
	if (zn_frozen_streams(g->fe, l)) {
		g->expert_all_fetches += (uint64_t)g->fe->frozen_experts[l];
		g->expert_all_bytes += zn_frozen_stored_bytes(g->fe, l) -
				       zn_frozen_fetch_bytes(g->fe, l);
	}
	return 0;
}

int zn_gen_fz_release(struct zn_gen *g, int l)
{
	int rc;

	if (l == 0)
		return 0;
	rc = zn_frozen_release(g->fe, g->fz_item++);
	return rc ? failed(g, l, rc) : 0;
}
