/* zinc generate's layers 1 .. n-1 as the training engine's frozen parameters (frozen.h,
 * docs/generate.md): generation trains nothing, so every layer but layer 0 (kept on the
 * device: the tied head reads it again) is a frozen layer, homed on the device, in pinned
 * host memory or in the frozen store on nvme (a swap store's file), and fetched into the
 * frozen part's working slots ahead of use with the same code as LoRA's frozen base: nvme
 * reads through the aio engine (io_uring) into the frozen part's pinned read buffers,
 * submitted as soon as a buffer is free, the copy up on the copy stream, the compute waiting on the slot's ready event.
 *
 * The frozen part is made here as the engine makes its own, given what it uses: its shape
 * (the layers' sizes, frozen numel = numel for layers >= 1, and their 4-bit layouts), the
 * plan's frozen part (zn_plan_frozen), generate's device and streams, a pinned arena for
 * the host homes or read buffers, the offload path and the aio block; and at each begin
 * the use sequence: generation is forward-only, one use of each layer 1 .. n-1 per
 * forward (a prefill chunk or a token), so the sequence is those uses for fz_forwards
 * forwards in a row. Its reads and copies run ahead across the end of a forward into the
 * next one (the next token's first layers come in while the last ones compute and the host
 * samples). No engine is made: only the part and what it is given. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/size.h"
#include "cpu/arena.h"
#include "sched/frozen.h"
#include "sched/generate_impl.h"
#include "sched/plan.h"
#include "sched/recompute.h"
#include "sched/tiers.h"

#define GEN_FZ_FORWARDS 64 /* forwards per use sequence by default */

/* layers 1 .. n-1's frozen part and what it is given */
struct zn_gen_fz {
	struct zn_frozen fz;
	struct zn_config cfg;          /* defaults with the home, depth and aio (the plan's) */
	struct zn_engine_plan_input pin;
	struct zn_engine_plan plan;
	struct zn_arena *arena;        /* the host homes or read buffers */
	uint64_t *numel;               /* per layer: layer 0 none, the others whole */
	struct zn_use *use;            /* fz_forwards forwards' uses, one a layer 1 .. n-1 */
	int use_n;
};

static enum zn_tier tier_of(enum zn_gen_home h)
{
	return h == ZN_GEN_CPU ? ZN_TIER_HOST : h == ZN_GEN_NVME ? ZN_TIER_NVME : ZN_TIER_DEVICE;
}

/* the plan's frozen part at read-ahead depth d */
static void plan(struct zn_gen *g, int d)
{
	struct zn_gen_fz *gz = g->fz;

	memset(&gz->pin, 0, sizeof(gz->pin));
	memset(&gz->plan, 0, sizeof(gz->plan));
	gz->pin.layer_count = g->n;
	gz->pin.grad_accum = 1;
	gz->pin.prefetch_depth = d;
	zn_frozen_plan_input(&gz->fz, &gz->pin);
	gz->plan.pl.params = tier_of(g->o.home);
	zn_plan_frozen(&gz->pin, &gz->plan);
}

/* The read-ahead depth: --prefetch-depth, else the training default (plan.c
 * zn_plan_prefetch_depth) lowered until the working slots fit what is left of the device
 * budget after the KV caches, activations and layer 0. */
static int choose_depth(struct zn_gen *g, uint64_t slot_numel)
{
	struct zn_gen_fz *gz = g->fz;
	uint64_t budget = zn_device_budget_bytes(g->dev), used = zn_device_used_bytes(g->dev);
	uint64_t left = budget > used ? budget - used : 0;
	int d = g->o.prefetch_depth;

	if (d) {
		plan(g, d < 0 ? 0 : d);
		return 0;
	}
	d = zn_plan_prefetch_depth(&gz->cfg, slot_numel, g->n);
	for (;; d--) {
		plan(g, d);
		if (d == 0 || !budget || gz->plan.dev_frozen_bytes <= left)
			break;
	}
	if (budget && gz->plan.dev_frozen_bytes > left) {
		zn_error("zinc generate: the layers need %llu bytes on the device (%s, read ahead "
			 "%d) and %llu of the budget are left after the KV caches and activations: "
			 "raise --device-mem, lower --max-seq / --prefill-chunk, or stream the "
			 "layers with --offload-param cpu|nvme",
			 (unsigned long long)gz->plan.dev_frozen_bytes,
			 g->o.home == ZN_GEN_DEVICE ? "all of them" : "working slots",
			 gz->plan.frozen_depth, (unsigned long long)left);
		return -ENOMEM;
	}
	return 0;
}

/* the configuration the plan and the part read: the home, the read-ahead depth */
static void make_config(struct zn_gen *g, struct zn_config *c)
{
	zn_config_defaults(c);
	c->zero.stage = 3;
	c->runtime.prefetch_depth = g->o.prefetch_depth > 0 ? g->o.prefetch_depth : 0;
	c->zero.offload_param.device = g->o.home == ZN_GEN_NVME ? ZN_OFFLOAD_NVME :
				       g->o.home == ZN_GEN_CPU  ? ZN_OFFLOAD_CPU :
								  ZN_OFFLOAD_NONE;
	if (g->o.home == ZN_GEN_NVME) {
		c->zero.offload_param.nvme_path_count = 1;
		snprintf(c->zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", g->o.nvme_path);
	}
}

/* the sizes, the part's shape (a 4-bit base's layouts from the checkpoint or of the
 * descriptors, frozen_q4.c), the use sequence and the plan */
static int make_shape(struct zn_gen *g)
{
	struct zn_gen_fz *gz;
	struct zn_frozen_shape sh;
	uint64_t slot = 0;
	int rc;

	gz = g->fz = calloc(1, sizeof(*gz));
	if (!gz)
		return -ENOMEM;
	make_config(g, &gz->cfg);
	gz->numel = zn_size_calloc((uint64_t)g->n, sizeof(*gz->numel), "the layers' sizes");
	if (!gz->numel)
		return -ENOMEM;
	for (int l = 1; l < g->n; l++) {
		gz->numel[l] = g->L[l].numel;
		slot = g->L[l].numel > slot ? g->L[l].numel : slot;
	}
	g->fz_forwards = g->o.fz_forwards > 0 ? g->o.fz_forwards : GEN_FZ_FORWARDS;
	sh = (struct zn_frozen_shape){
		.n = g->n, .numel = gz->numel, .pdt = ZN_DTYPE_F32, .model = &g->m, .ld = g->L,
		.q4 = g->o.q4, .quantize_base = g->o.quantize_base,
		.double_quant = g->o.double_quant,
	};
	rc = zn_frozen_prepare(&gz->fz, &sh);
	if (rc)
		return rc;
	gz->use_n = (g->n - 1) * g->fz_forwards;
	gz->use = calloc((size_t)gz->use_n, sizeof(*gz->use));
	if (!gz->use)
		return -ENOMEM;
	for (int i = 0; i < gz->use_n; i++)
		gz->use[i] = (struct zn_use){ .layer = 1 + i % (g->n - 1), .fwd = true };
	return choose_depth(g, slot);
}

static int make_arena(struct zn_gen *g)
{
	struct zn_gen_fz *gz = g->fz;
	struct zn_arena_config ac;
	int rc;

	if (!gz->plan.host_frozen_bytes)
		return 0;
	zn_arena_config_init(&ac, &gz->cfg);
	ac.bytes = gz->plan.host_frozen_bytes + ZN_PLAN_HOST_ALIGN;
	ac.pin_required = false; /* pinned if the system allows, as zn_device_host_alloc */
	ac.cuda = zn_device_kind_of(g->dev) == ZN_DEVICE_CUDA;
	rc = zn_arena_create(&gz->arena, &ac);
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
	struct zn_frozen *fz = &g->fz->fz;
	bool raw = zn_frozen_quantized(fz) && g->o.init_q4;
	uint64_t most = 0;
	float *h;
	int rc = 0;

	for (int l = 1; l < g->n; l++) {
		uint64_t b = raw ? zn_frozen_stored_bytes(fz, l) : g->L[l].numel * 4;

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
				rc = zn_frozen_init_layer_q4(fz, l, h);
			continue;
		}
		rc = g->o.init_layer(g->o.init_ctx, l, &g->L[l], h);
		if (!rc)
			rc = zn_frozen_init_layer(fz, l, h);
	}
	free(h);
	return rc;
}

int zn_gen_fz_create(struct zn_gen *g)
{
	int rc;

	if (g->n < 2)
		return 0;
	rc = make_shape(g);
	if (!rc)
		rc = make_arena(g);
	if (!rc) {
		struct zn_frozen_config c = {
			.dev = g->dev, .compute = g->compute, .copy_in = g->copy,
			.copy_out = g->copy, .arena = g->fz->arena, .pin = &g->fz->pin,
			.plan = &g->fz->plan, .aio = &g->fz->cfg.aio,
			.nvme_dir = g->o.home == ZN_GEN_NVME ? g->o.nvme_path : NULL,
		};

		rc = zn_frozen_create(&g->fz->fz, &c);
		if (rc && g->o.home == ZN_GEN_NVME && rc != -ENOMEM)
			zn_error("zinc generate: --nvme-path %s: cannot hold the layers' file there: "
				 "give a writable directory", g->o.nvme_path);
		else if (rc)
			zn_error("zinc generate: the layers' buffers (%llu bytes on the device, read "
				 "ahead %d) do not fit: raise --device-mem, lower --prefetch-depth, or "
				 "stream the layers with --offload-param cpu|nvme",
				 (unsigned long long)g->fz->plan.dev_frozen_bytes,
				 g->fz->plan.frozen_depth);
	}
	if (!rc)
		rc = place_layers(g);
	g->fz_restart = true;
	return rc;
}

void zn_gen_fz_destroy(struct zn_gen *g)
{
	struct zn_gen_fz *gz = g->fz;

	if (!gz)
		return;
	zn_frozen_destroy(&gz->fz);
	zn_arena_destroy(gz->arena);
	free(gz->use);
	free(gz->numel);
	free(gz);
	g->fz = NULL;
}

int zn_gen_fz_depth(const struct zn_gen *g)
{
	return g->fz && !g->fz->plan.frozen_direct ? g->fz->plan.frozen_depth : 0;
}

struct zn_aio *zn_gen_aio(struct zn_gen *g)
{
	return g->fz ? zn_frozen_aio(&g->fz->fz) : NULL;
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
	return l > 0 && g->fz ? zn_frozen_experts_source(&g->fz->fz, l) : NULL;
}

int zn_gen_fz_error(struct zn_gen *g)
{
	return g->fz ? zn_frozen_expert_error(&g->fz->fz) : 0;
}

void zn_gen_fz_expert_stats(struct zn_gen *g, struct zn_gen_stats *s)
{
	uint64_t count, bytes, read_bytes;

	if (!g->fz)
		return;
	zn_frozen_expert_figures(&g->fz->fz, &count, &bytes, &read_bytes);
	s->streamed_bytes += bytes;
	s->nvme_read_bytes += read_bytes;
	s->expert_fetches = count;
	s->expert_bytes = bytes;
	s->expert_all_fetches = g->expert_all_fetches;
	s->expert_all_bytes = g->expert_all_bytes;
}

/* the start of a forward: a fresh use sequence when this one has no room for it */
int zn_gen_fz_begin(struct zn_gen *g)
{
	int rc;

	if (!g->fz || (!g->fz_restart && g->fz_item + g->n - 1 <= g->fz->use_n))
		return 0;
	rc = zn_frozen_begin(&g->fz->fz, g->fz->use, g->fz->use_n);
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
	struct zn_frozen *fz;
	int rc;

	if (l == 0) {
		*params_d = g->params_d[0];
		return 0;
	}
	fz = &g->fz->fz;
	rc = zn_frozen_acquire(fz, g->fz_item, l, params_d);
	if (rc)
		return failed(g, l, rc);
	/* the bytes copied up: the stored layer (fp32, or its 4-bit extent), a sparse layer's
	 * without its experts (those routed to are counted as fetched, frozen_experts.c) */
	if (g->o.home != ZN_GEN_DEVICE)
		g->streamed_bytes += zn_frozen_fetch_bytes(fz, l);
	if (zn_frozen_streams(fz, l)) {
		g->expert_all_fetches += (uint64_t)zn_frozen_expert_count(fz, l);
		g->expert_all_bytes += zn_frozen_stored_bytes(fz, l) - zn_frozen_fetch_bytes(fz, l);
	}
	return 0;
}

int zn_gen_fz_release(struct zn_gen *g, int l)
{
	int rc;

	if (l == 0)
		return 0;
	rc = zn_frozen_release(&g->fz->fz, g->fz_item++);
	return rc ? failed(g, l, rc) : 0;
}
