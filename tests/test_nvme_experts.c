/* A mixture of experts' frozen experts fetched per routed expert (docs/lora.md, "Experts
 * fetched per routed expert"): LoRA on a tiny Qwen3-MoE's attention (16 experts, 2 per
 * token) with the base in host memory or on nvme moves only the experts some token routes
 * to, and gives the same losses, adapters and base bit for bit as the base on the device
 * (fetched whole, every expert in place), fp32 and bf16.
 *
 * The count is the test's own: a base built so that every token of every sparse layer
 * routes to two experts the test chose (the embedding's column 0 is 1, no attention output
 * and no expert output reaches column 0, the post-attention norm keeps column 0 alone, and
 * the router's column 0 ranks the experts), so each use of a sparse layer fetches exactly
 * those two and the other fourteen (no token at all) are never moved: the step's expert
 * fetches, bytes and nvme reads are then known to the byte. With the initial (random)
 * base, the routing is whatever it is: fewer experts than all are fetched, each counted
 * at an expert's bytes. */
#include <criterion/criterion.h>
#include <errno.h>

#include "core/dtype.h"
#include "engine_common.h"
#include "model/llama/llama.h"
#include "model/lora/lora.h"
#include "nvme_test_util.h"
#include "sched/engine_impl.h"

#define X_E 16
#define X_K 2
#define X_C 32
#define X_I 8
#define X_BLOCKS 2
#define X_STEPS 3
#define X_GAS 2

struct xres {
	float loss[X_STEPS];
	float **w, **f;
	uint64_t numel[8], fnumel[8];
	int n;
	struct zn_step_stats st[X_STEPS];
};

static void xres_free(struct xres *r)
{
	for (int l = 0; l < r->n; l++) {
		free(r->w[l]);
		free(r->f[l]);
	}
	free(r->w);
	free(r->f);
}

static void model_config(struct zn_llama_config *mc)
{
	cr_assert_eq(zn_llama_config_from_preset("qwen3-30b-a3b", mc), 0);
	mc->layers = X_BLOCKS;
	mc->hidden = X_C;
	mc->intermediate = 64;
	mc->heads = 4;
	mc->kv_heads = 2;
	mc->head_dim = 8;
	mc->vocab = 64;
	mc->seq = 16;
	mc->max_positions = 16;
	mc->experts = X_E;
	mc->experts_per_tok = X_K;
	mc->moe_intermediate = X_I;
	mc->aux = false;
	cr_assert_eq(zn_llama_config_validate(mc), 0);
}

/* the base tensor of layer l whose name ends in sfx */
static const struct zn_tensor_desc *tensor(const struct zn_lora_config *lc, int l,
					   const char *sfx)
{
	const struct zn_layer_desc *d = &lc->lay[l].base;
	size_t n = strlen(sfx);

	for (int t = 0; t < d->tensor_count; t++) {
		size_t m = strlen(d->tensors[t].name);

		if (m >= n && !strcmp(d->tensors[t].name + m - n, sfx))
			return &d->tensors[t];
	}
	cr_assert_fail("layer %d has no tensor *%s", l, sfx);
	return NULL;
}

/* the experts every token of block layer l routes to */
static int chosen(int l, int j)
{
	return j == 0 ? (3 * l + 1) % X_E : (7 * l + 4) % X_E;
}

/* the base as the header says: every token of block l routes to chosen(l, 0 and 1) */
static void route_fixed(struct zn_engine *e, const struct zn_lora_config *lc)
{
	for (int l = 0; l <= X_BLOCKS; l++) {
		uint64_t n = zn_engine_frozen_numel(e, l);
		float *f = malloc(n * 4);
		const struct zn_tensor_desc *t;

		cr_assert_eq(zn_engine_read_frozen(e, l, f), 0);
		if (l == 0) {
			t = tensor(lc, 0, "embed_tokens.weight"); /* [V, C] */
			for (int64_t v = 0; v < t->shape[0]; v++)
				f[t->offset + (uint64_t)v * X_C] = 1.0f;
		} else {
			t = tensor(lc, l, "o_proj.weight"); /* [C, Q]: output row 0 */
			memset(f + t->offset, 0, (size_t)t->shape[1] * 4);
			t = tensor(lc, l, "post_attention_layernorm.weight");
			for (int c = 0; c < X_C; c++)
				f[t->offset + c] = c == 0 ? 1.0f : 0.0f;
			t = tensor(lc, l, "mlp.gate.weight"); /* [E, C] */
			for (int x = 0; x < X_E; x++)
				f[t->offset + (uint64_t)x * X_C] = -1.0f - 0.01f * x;
			f[t->offset + (uint64_t)chosen(l, 0) * X_C] = 2.0f;
			f[t->offset + (uint64_t)chosen(l, 1) * X_C] = 1.5f;
			t = tensor(lc, l, "mlp.experts.down_proj"); /* [E, C, I]: row 0 of each */
			for (int x = 0; x < X_E; x++)
				memset(f + t->offset + (uint64_t)x * X_C * X_I, 0, X_I * 4);
		}
		cr_assert_eq(zn_frozen_init_layer(&e->fz, l, f), 0);
		free(f);
	}
}

static bool ckpt; /* activation checkpointing in the next runs */
static bool nf4;  /* --quantize-base nf4 in the next runs */
static const char *targets = "q_proj,v_proj"; /* the adapters of the next runs */

/* the engine of adapters (the targets above) on mc's base, the base's nvme path dir */
static void create(struct zn_engine **e, struct zn_config *cfg, struct zn_lora_config *lc,
		   struct zn_model *m, const struct zn_llama_config *mc, const char *dir)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };

	cfg->zero.offload_param.nvme_path_count = 1;
	snprintf(cfg->zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", dir);
	lc->base = zn_llama_model(mc);
	cr_assert_eq(zn_lora_add_targets(lc, targets), 0);
	cr_assert_eq(zn_lora_prepare(lc), 0);
	*m = zn_lora_model(lc);
	cr_assert_eq(zn_engine_create(e, cfg, m, &o), 0);
}

static void run(struct xres *r, enum zn_offload_device prm, bool bf16, bool fixed,
		enum zn_schedule order, const char *dir)
{
	struct zn_llama_config mc;
	struct zn_lora_config lc = { .r = 4, .alpha = 8 };
	uint64_t bt = (uint64_t)X_GAS * ET_B * ET_T;
	struct zn_config cfg;
	struct zn_engine *e;
	struct zn_model m;
	int *stream;

	model_config(&mc);
	stream = et_tokens(X_STEPS * bt + 1, mc.vocab, 11);
	et_config(&cfg, 3, ZN_OFFLOAD_CPU, ET_B, X_GAS);
	cfg.zero.offload_param.device = prm;
	cfg.precision.bf16 = bf16;
	cfg.runtime.schedule = order;
	cfg.act_ckpt.enabled = ckpt;
	cfg.runtime.quantize_base = nf4 ? ZN_QUANTIZE_NF4 : ZN_QUANTIZE_NONE;
	cfg.act_ckpt.every = 1;
	create(&e, &cfg, &lc, &m, &mc, dir);
	cr_assert_eq(e->plan.frozen_experts, prm != ZN_OFFLOAD_NONE);
	cr_assert_eq(e->plan.frozen_q4, nf4);
	cr_assert_eq(zn_frozen_pinned_bytes(&e->fz), e->plan.host_frozen_bytes);
	if (fixed)
		route_fixed(e, &lc);
	for (int s = 0; s < X_STEPS; s++) {
		cr_assert_eq(zn_engine_step(e, stream + s * bt, stream + s * bt + 1, &r->st[s]), 0);
		r->loss[s] = r->st[s].loss;
	}
	r->n = zn_engine_layer_count(e);
	r->w = calloc((size_t)r->n, sizeof(float *));
	r->f = calloc((size_t)r->n, sizeof(float *));
	for (int l = 0; l < r->n; l++) {
		r->numel[l] = zn_engine_layer_numel(e, l);
		r->fnumel[l] = zn_engine_frozen_numel(e, l);
		r->w[l] = malloc((r->numel[l] + 1) * 4);
		r->f[l] = malloc((r->fnumel[l] + 1) * 4);
		cr_assert_eq(zn_engine_read_layer(e, l, r->w[l]), 0);
		cr_assert_eq(zn_engine_read_frozen(e, l, r->f[l]), 0);
	}
	zn_engine_destroy(e);
	zn_lora_release(&lc);
	free(stream);
}

static void same(const struct xres *a, const struct xres *b, const char *what)
{
	for (int s = 0; s < X_STEPS; s++)
		cr_assert_eq(memcmp(&a->loss[s], &b->loss[s], 4), 0, "%s: step %d: %.9g vs %.9g",
			     what, s + 1, (double)a->loss[s], (double)b->loss[s]);
	cr_assert_eq(a->n, b->n);
	for (int l = 0; l < a->n; l++) {
		cr_assert_eq(memcmp(a->w[l], b->w[l], 4 * a->numel[l]), 0, "%s: adapters of %d",
			     what, l);
		cr_assert_eq(memcmp(a->f[l], b->f[l], 4 * a->fnumel[l]), 0, "%s: base of %d",
			     what, l);
	}
}

/* the same runs with the base on the device, in host memory and on nvme (dir: a new test
 * directory, the caller removes it): the adapters and the base bit for bit the same */
static void three_homes(struct xres *dev, struct xres *host, struct xres *nv, bool bf16,
			bool fixed, enum zn_schedule order, char dir[ZN_PATH_MAX])
{
	nvme_test_dir(dir, ZN_PATH_MAX);
	run(dev, ZN_OFFLOAD_NONE, bf16, fixed, order, dir);
	run(host, ZN_OFFLOAD_CPU, bf16, fixed, order, dir);
	run(nv, ZN_OFFLOAD_NVME, bf16, fixed, order, dir);
	same(dev, host, "base in host memory");
	same(dev, nv, "base on nvme");
}

/* one expert's stored bytes: its gate_up [2I, C] and down [C, I] rows */
static uint64_t expert_bytes(bool bf16)
{
	return (uint64_t)3 * X_I * X_C * (bf16 ? 2 : 4);
}

static uint64_t align4k(uint64_t b)
{
	return (b + 4095) / 4096 * 4096;
}

/* A use of a sparse layer (one fetch of it) fetches each expert its calls route to once:
 * in micro-batch order each micro-batch's forward and backward are uses (2 x gas), in
 * layer-major order one forward and one backward (a recomputed forward included) serve
 * every micro-batch. */
static void fixed_routing(bool bf16, enum zn_schedule order)
{
	char dir[ZN_PATH_MAX];
	struct xres dev = { 0 }, host = { 0 }, nv = { 0 };
	uint64_t uses = order == ZN_SCHEDULE_MICRO_BATCH ? 2 * X_GAS : 2;
	/* two experts at every use of every sparse layer; the fourteen others never */
	uint64_t fetches = (uint64_t)X_BLOCKS * uses * X_K;

	three_homes(&dev, &host, &nv, bf16, true, order, dir);
	for (int s = 0; s < X_STEPS; s++) {
		const struct zn_step_stats *h = &host.st[s], *v = &nv.st[s];

		cr_assert_eq(dev.st[s].expert_fetches, 0, "the device home fetches none");
		cr_assert_eq(h->expert_fetches, fetches, "step %d: %llu fetches", s + 1,
			     (unsigned long long)h->expert_fetches);
		cr_assert_eq(h->expert_bytes, fetches * expert_bytes(bf16));
		cr_assert_eq(v->expert_fetches, fetches);
		cr_assert_eq(v->expert_bytes, fetches * expert_bytes(bf16));
		/* every expert at every use: what the whole layer's fetch moved */
		cr_assert_eq(h->plan_expert_fetches, (uint64_t)X_BLOCKS * uses * X_E);
		cr_assert_eq(h->plan_expert_bytes, h->plan_expert_fetches * expert_bytes(bf16));
		/* nvme: the layers' rest as planned, and one aligned extent per expert fetched */
		cr_assert_eq(v->nvme_read_bytes,
			     v->plan_nvme_read_bytes + fetches * align4k(expert_bytes(bf16)) +
			     (s == 0 ? v->plan_nvme_first_read_bytes : 0),
			     "step %d: read %llu, plan %llu", s + 1,
			     (unsigned long long)v->nvme_read_bytes,
			     (unsigned long long)v->plan_nvme_read_bytes);
	}
	xres_free(&dev);
	xres_free(&host);
	xres_free(&nv);
	nvme_test_rmdir(dir);
}

Test(nvme_experts, routed_experts_only_fp32) { fixed_routing(false, ZN_SCHEDULE_MICRO_BATCH); }
Test(nvme_experts, routed_experts_only_bf16) { fixed_routing(true, ZN_SCHEDULE_MICRO_BATCH); }
Test(nvme_experts, routed_experts_only_layer_major)
{
	fixed_routing(false, ZN_SCHEDULE_LAYER_MAJOR);
}

/* a 4-bit base: the attention and router in NF4, the experts plain bf16 (no nn.Linear),
 * fetched per routed expert as a bf16 base's */
Test(nvme_experts, routed_experts_only_nf4)
{
	nf4 = true;
	fixed_routing(true, ZN_SCHEDULE_MICRO_BATCH);
}

/* checkpointing: the recomputed forward and the backward share their use's fetch */
Test(nvme_experts, routed_experts_only_recomputed)
{
	ckpt = true;
	fixed_routing(true, ZN_SCHEDULE_MICRO_BATCH);
	fixed_routing(false, ZN_SCHEDULE_LAYER_MAJOR);
}

/* The initial base's own routing: 2 x 8 tokens a micro-batch, 2 experts each, so at most
 * 16 of the 16 experts are used and in practice fewer; bit for bit the device's. */
static void random_routing(bool bf16)
{
	char dir[ZN_PATH_MAX];
	struct xres dev = { 0 }, host = { 0 }, nv = { 0 };

	three_homes(&dev, &host, &nv, bf16, false, ZN_SCHEDULE_AUTO, dir);
	for (int s = 0; s < X_STEPS; s++) {
		const struct zn_step_stats *h = &host.st[s], *v = &nv.st[s];

		cr_assert(h->expert_fetches > 0);
		cr_assert(h->expert_fetches < h->plan_expert_fetches, "%llu of %llu",
			  (unsigned long long)h->expert_fetches,
			  (unsigned long long)h->plan_expert_fetches);
		cr_assert_eq(h->expert_bytes, h->expert_fetches * expert_bytes(bf16));
		cr_assert_eq(v->expert_fetches, h->expert_fetches);
		cr_assert_eq(v->nvme_read_bytes,
			     v->plan_nvme_read_bytes + v->expert_fetches *
			     align4k(expert_bytes(bf16)) +
			     (s == 0 ? v->plan_nvme_first_read_bytes : 0));
	}
	xres_free(&dev);
	xres_free(&host);
	xres_free(&nv);
	nvme_test_rmdir(dir);
}

Test(nvme_experts, initial_routing_fp32) { random_routing(false); }
Test(nvme_experts, initial_routing_bf16) { random_routing(true); }

/* Adapters on the experts' projections over a streamed base: each routed expert's slice of
 * the working stack is fetched before its GEMMs and its adapter applied there; the adapters
 * (the experts' included) and the base bit for bit the device's, the fetches counted. */
Test(nvme_experts, adapters_on_streamed_experts)
{
	struct zn_llama_config mc;
	struct zn_lora_config a = { .r = 4, .alpha = 8 }, b = { .r = 4, .alpha = 8 };

	/* the targets do reach the experts: 16 experts x 3 adapters more on each block */
	model_config(&mc);
	a.base = b.base = zn_llama_model(&mc);
	cr_assert_eq(zn_lora_add_targets(&a, "q_proj,v_proj"), 0);
	cr_assert_eq(zn_lora_add_targets(&b, "q_proj,v_proj,gate_proj,up_proj,down_proj"), 0);
	cr_assert_eq(zn_lora_prepare(&a), 0);
	cr_assert_eq(zn_lora_prepare(&b), 0);
	cr_assert_eq(b.lay[1].count - a.lay[1].count, 3 * X_E);
	zn_lora_release(&a);
	zn_lora_release(&b);
	targets = "q_proj,v_proj,gate_proj,up_proj,down_proj";
	random_routing(false);
	targets = "q_proj,v_proj";
}

/* The plan (pure): a layer with expert stacks (the tail of its frozen buffer) streams them
 * with the home in host memory or on nvme, fp32 working copies, not 4-bit: its nvme extent
 * is the rest and each expert aligned apart, its reads per use the rest, and the figures
 * one expert's bytes and every expert of a step; on the device or with bf16 compute nothing
 * streams; a 4-bit base streams its (plain) experts. */
Test(nvme_experts, plan_knows_the_per_expert_fetch)
{
	/* layer 1: 1000 floats of rest and 8 experts of 300 + 200 floats */
	uint64_t tr[3] = { 10, 10, 10 }, fr[3] = { 700, 1000 + 8 * 500, 300 };
	uint64_t xn[3] = { 0, 8 * 500, 0 }, q4[3] = { 400, 900 + 8 * 1000, 200 };
	int xe[3] = { 0, 8, 0 };
	struct zn_engine_plan_input in = { .layer_count = 3, .layer_numel = tr, .world = 1,
					   .stage = 3, .grad_accum = 2, .prefetch_depth = 1,
					   .frozen_numel = fr, .bf16 = true,
					   .offload_optimizer = ZN_OFFLOAD_CPU,
					   .offload_param = ZN_OFFLOAD_NVME,
					   .frozen_expert_numel = xn, .frozen_experts = xe };
	struct zn_engine_plan p = { 0 };
	uint64_t one = 500 * 2; /* bf16 */

	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert(p.frozen_experts);
	cr_assert(zn_plan_frozen_streams(&in, &p, 1));
	cr_assert(!zn_plan_frozen_streams(&in, &p, 0) && !zn_plan_frozen_streams(&in, &p, 2));
	cr_assert_eq(zn_plan_frozen_extent(&in, &p, 1), align4k(2000) + 8 * align4k(one));
	cr_assert_eq(p.nvme_frozen_bytes, align4k(1400) + align4k(2000) + 8 * align4k(one) +
		     align4k(600));
	cr_assert_eq(p.frozen_expert_bytes, one);
	/* read buffers and staging of the largest fetch: layer 1's rest, not its 10000 bytes */
	cr_assert_eq(p.frozen_slot_bytes, 2000);
	/* 2 uses per micro-batch x 2 micro-batches: the rest (and layer 2) read at each */
	cr_assert_eq(p.frozen_step_read_bytes, 4 * (align4k(2000) + align4k(600)));
	cr_assert_eq(p.frozen_step_expert_bytes, 4 * 8 * one);
	/* host memory: the same figures, no nvme */
	in.offload_param = ZN_OFFLOAD_CPU;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert(p.frozen_experts && p.frozen_step_expert_bytes == 4 * 8 * one);
	/* the device, bf16 compute (the stored values read directly), a 4-bit base: whole */
	in.offload_param = ZN_OFFLOAD_NONE;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert(!p.frozen_experts && !zn_plan_frozen_streams(&in, &p, 1));
	in.offload_param = ZN_OFFLOAD_NVME;
	in.compute16 = true;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert(!p.frozen_experts);
	/* a 4-bit base (its stacks plain, bf16): the rest is the extent without them */
	in.compute16 = false;
	in.frozen_q4_bytes = q4;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert(p.frozen_experts && p.frozen_expert_bytes == one);
	cr_assert_eq(zn_plan_frozen_extent(&in, &p, 1), align4k(900) + 8 * align4k(one));
	cr_assert_eq(p.frozen_slot_bytes, 900);
}

/* An expert's nvme read that fails fails the step (never computes on a stale slice), with a
 * line naming the expert and the layer. */
Test(nvme_experts, a_failed_expert_read_fails_the_step)
{
	struct zn_llama_config mc;
	struct zn_lora_config lc = { .r = 4, .alpha = 8 };
	char dir[ZN_PATH_MAX];
	struct zn_step_stats st;
	struct zn_config cfg;
	struct zn_engine *e;
	struct zn_model m;
	int *stream;

	nvme_test_dir(dir, sizeof(dir));
	model_config(&mc);
	stream = et_tokens(2 * ET_B * ET_T + 1, mc.vocab, 11);
	et_config(&cfg, 3, ZN_OFFLOAD_CPU, ET_B, 1);
	cfg.zero.offload_param.device = ZN_OFFLOAD_NVME;
	create(&e, &cfg, &lc, &m, &mc, dir);
	cr_assert_not_null(e->fz.xaio);
	zn_aio_set_fault(e->fz.xaio, &(struct zn_aio_fault){ .nth = 1, .err = EIO });
	cr_redirect_stderr();
	cr_assert_neq(zn_engine_step(e, stream, stream + 1, &st), 0);
	fflush(stderr);
	cr_assert(nvme_test_stderr_has("nvme read failed", "frozen expert"),
		  "no line names the expert");
	zn_engine_destroy(e);
	zn_lora_release(&lc);
	free(stream);
	nvme_test_rmdir(dir);
}
