/* LoRA (src/model/lora, docs/lora.md) and frozen parameters (src/sched/frozen*):
 * - the adapters' forward and gradients against the merged-weights reference (the base
 *   model with W + scale B A, merged in float64), for GPT-2 and the Llama family (Llama,
 *   Qwen2, Mistral, attention_bias, MQA; tied and untied embeddings);
 * - through the engine: frozen parameters come back bit for bit after training at every
 *   stage and home tier, and the adapters agree across stages and tiers;
 * - the plan counts a LoRA run: no gradient or optimizer bytes for the frozen base. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "engine_common.h"
#include "lora_check.h"
#include "model/llama/llama.h"
#include "model/lora/lora.h"
#include "model/safetensors.h"
#include "sched/plan.h"

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 11;
}

/* adapters with B not zero: every A and B element uniform in (-0.1, 0.1) */
static void randomize(struct lc_net *net, uint64_t seed)
{
	for (int l = 0; l < net->n; l++)
		for (uint64_t i = 0; i < net->ld[l].numel; i++)
			net->p[l][i] = (float)(((double)lcg(&seed) * 0x1.0p-53 - 0.5) * 0.2);
}

/* LoRA on `base` against the merged reference: loss, then dA = s B^T dW, dB = s dW A^T. */
static void check_merged(const struct zn_model *base, const char *targets, bool rslora)
{
	struct zn_lora_config lc = { .base = *base, .r = 4, .alpha = 8, .rslora = rslora };
	struct zn_model lm;
	struct lc_net L = { 0 }, M = { 0 };
	int B = 2, T = 8, V = base->ops->vocab(base->config);
	int *tok = et_tokens((uint64_t)B * T + 1, V, 3);
	double ll, lm_, worst = 0;
	int checked = 0;

	cr_assert_eq(zn_lora_add_targets(&lc, targets), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	cr_assert_float_eq(lc.scale, rslora ? 4.0f : 2.0f, 1e-6);
	lm = zn_lora_model(&lc);
	cr_assert_eq(lc_net_init(&L, &lm, 5), 0);
	randomize(&L, 11);
	cr_assert_eq(lc_net_init(&M, base, 5), 0);
	for (int l = 0; l < L.n; l++) {
		/* the frozen base is the base model's own init, the same seed */
		cr_assert_eq(L.ld[l].frozen_numel, M.ld[l].numel);
		cr_assert_eq(memcmp(L.f[l], M.p[l], M.ld[l].numel * 4), 0, "layer %d", l);
		zn_lora_merge_layer(&lc, l, L.p[l], M.p[l], ZN_DTYPE_F32);
	}
	ll = lc_net_run(&L, &lm, tok, tok + 1, B, T, 0);
	lm_ = lc_net_run(&M, base, tok, tok + 1, B, T, 0);
	cr_assert(fabs(ll - lm_) <= 2e-6 * fabs(lm_), "loss %.9g vs merged %.9g", ll, lm_);
	for (int l = 0; l < L.n; l++) {
		const struct zn_lora_layer *ly = &lc.lay[l];

		for (int i = 0; i < ly->count; i++) {
			const struct zn_lora_adapter *a = &ly->ad[i];
			const float *A = L.p[l] + L.ld[l].tensors[a->a_tensor].offset;
			const float *Bm = L.p[l] + L.ld[l].tensors[a->a_tensor + 1].offset;
			const float *gA = L.g[l] + L.ld[l].tensors[a->a_tensor].offset;
			const float *gB = L.g[l] + L.ld[l].tensors[a->a_tensor + 1].offset;
			const float *dW = M.g[l] + ly->base.tensors[a->base_tensor].offset;
			double big = 0;

			for (int k = 0; k < 4; k++)
				for (int64_t c = 0; c < a->in; c++) {
					double s = 0;

					for (int64_t o = 0; o < a->out; o++)
						s += (double)Bm[o * 4 + k] * dW[o * a->in + c];
					s *= lc.scale;
					big = fmax(big, fabs(s));
					worst = fmax(worst, fabs(s - gA[k * a->in + c]) /
							    (1e-6 + 1e-3 * fabs(s) + 1e-4));
				}
			for (int64_t o = 0; o < a->out; o++)
				for (int k = 0; k < 4; k++) {
					double s = 0;

					for (int64_t c = 0; c < a->in; c++)
						s += dW[o * a->in + c] * (double)A[k * a->in + c];
					s *= lc.scale;
					worst = fmax(worst, fabs(s - gB[o * 4 + k]) /
							    (1e-6 + 1e-3 * fabs(s) + 1e-4));
				}
			cr_assert(big > 1e-6, "layer %d %s: no gradient reached A", l, a->module);
			checked++;
		}
	}
	cr_assert(checked > 0);
	cr_assert(worst <= 1.0, "adapter gradients off the merged reference (%.3g x tol)",
		  worst);
	lc_net_free(&L);
	lc_net_free(&M);
	zn_lora_release(&lc);
	free(tok);
}

Test(lora, gpt2_matches_merged_weights)
{
	struct zn_gpt2_config mc;

	et_model(&mc);
	check_merged(et_gpt2(&mc), "c_attn,c_proj,c_fc", false);
}

Test(lora, llama_matches_merged_weights_every_target_rslora)
{
	struct zn_llama_config c;
	struct zn_model m;

	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
	m = zn_llama_model(&c);
	check_merged(&m, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", true);
	check_merged(&m, "q_proj,v_proj", false);
}

/* The Llama family's other shapes: Qwen2 (q/k/v biases, tied embeddings), Mistral (a
 * sliding window), Llama with attention_bias (o_proj bias too), MQA, Qwen3 (q/k norms, a
 * head_dim apart from hidden / heads: the norms frozen with the rest of the base). */
Test(lora, llama_family_variants_match_merged_weights)
{
	static const char *const what[] = { "qwen2", "mistral", "llama attention_bias", "mqa",
					    "qwen3" };
	const char *all = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";

	for (int v = 0; v < 5; v++) {
		struct zn_llama_config c;
		struct zn_model m;

		cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
		if (v == 0) {
			c.qkv_bias = true;
			c.tied = true;
		} else if (v == 1) {
			c.window = c.seq;
		} else if (v == 2) {
			c.qkv_bias = c.o_bias = true;
		} else if (v == 3) {
			c.kv_heads = 1;
		} else {
			c.qk_norm = true;
			c.head_dim = 24;
		}
		cr_assert_eq(zn_llama_config_validate(&c), 0, "%s", what[v]);
		m = zn_llama_model(&c);
		check_merged(&m, all, v == 3);
	}
}

Test(lora, targets_names_and_init)
{
	struct zn_gpt2_config mc;
	struct zn_lora_config lc = { .r = 8, .alpha = 16 };
	struct zn_layer_desc d;
	float *p;

	et_model(&mc);
	lc.base = zn_gpt2_model(&mc);
	cr_assert_neq(zn_lora_add_targets(&lc, "q_proj,wte"), 0);
	lc.target_count = 0;
	cr_assert_neq(zn_lora_add_targets(&lc, "c_attn,,c_fc"), 0);
	lc.target_count = 0;
	/* Llama names match nothing in GPT-2 */
	cr_assert_eq(zn_lora_add_targets(&lc, "q_proj"), 0);
	cr_assert_neq(zn_lora_prepare(&lc), 0);
	lc.target_count = 0;
	cr_assert_eq(zn_lora_add_targets(&lc, "c_proj"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	/* c_proj is both attn.c_proj and mlp.c_proj (PEFT matches the name's tail) */
	cr_assert_eq(zn_lora_describe(&lc, 1, &d), 0);
	cr_assert_eq(d.tensor_count, 4);
	cr_assert_str_eq(d.tensors[0].name, "base_model.model.transformer.h.0.attn.c_proj.lora_A.weight");
	cr_assert_str_eq(d.tensors[3].name, "base_model.model.transformer.h.0.mlp.c_proj.lora_B.weight");
	cr_assert_eq(d.tensors[2].shape[0], 8);
	cr_assert_eq(d.tensors[2].shape[1], 4 * 32);
	cr_assert_eq(d.frozen_numel, lc.lay[1].base.numel);
	/* A uniform within 1/sqrt(in), B zero; the same values for any split */
	p = calloc(d.numel, sizeof(float));
	zn_lora_init_range(&lc, &d, 0, d.numel, p, 9);
	for (uint64_t i = 0; i < d.tensors[0].numel; i++)
		cr_assert(fabsf(p[i]) <= 1.0f / sqrtf(32.0f) && p[i] != 0.0f);
	for (uint64_t i = 0; i < d.tensors[1].numel; i++)
		cr_assert_eq(p[d.tensors[1].offset + i], 0.0f);
	{
		float part[10];

		zn_lora_init_range(&lc, &d, 100, 10, part, 9);
		cr_assert_eq(memcmp(part, p + 100, sizeof(part)), 0);
	}
	free(p);
	zn_layer_desc_release(&d);
	zn_lora_release(&lc);
}

/* adapter_config.json with `r_text` in place of its "r": 4 line (PEFT's file otherwise, as
 * zinc saves it); whether --init-adapter's read, apply and open take it for r 4 */
static int open_with_r(struct zn_lora_config *lc, const char *d, const char *r_text)
{
	char path[160], *text, *at, *edited;
	struct zn_lora_peft peft;
	struct zn_st_file *f = NULL;
	FILE *fp;
	size_t n;
	int rc;

	snprintf(path, sizeof(path), "%s/adapter_config.json", d);
	fp = fopen(path, "r");
	cr_assert_not_null(fp);
	text = calloc(1, 1 << 16);
	n = fread(text, 1, (1 << 16) - 1, fp);
	fclose(fp);
	at = strstr(text, "\"r\": 4,");
	cr_assert_not_null(at, "%.*s", (int)n, text);
	edited = calloc(1, n + 256);
	snprintf(edited, n + 256, "%.*s%s%s", (int)(at - text), text, r_text, at + 7);
	fp = fopen(path, "w");
	fputs(edited, fp);
	fclose(fp);
	rc = zn_lora_peft_read(d, "--init-adapter", &peft);
	if (!rc)
		rc = zn_lora_peft_apply(lc, &peft, path, false);
	if (!rc)
		rc = zn_lora_peft_open(lc, d, &f);
	zn_st_close(f);
	fp = fopen(path, "w"); /* back as saved, for the next case */
	fputs(text, fp);
	fclose(fp);
	free(edited);
	free(text);
	return rc;
}

/* adapter_config.json is read as PEFT's json.load reads it: a key given twice is its last
 * value ("r": 8 then "r": 4 is r 4, and the reverse r 8, which this run refuses). */
Test(lora, adapter_config_repeated_key_takes_the_last_value, .init = cr_redirect_stderr)
{
	struct zn_gpt2_config mc;
	struct zn_lora_config lc = { .r = 4, .alpha = 8 };
	struct zn_layer_desc d;
	float **adapters;
	char dir[] = "/tmp/zn_test_peft_XXXXXX", cmd[96];

	et_model(&mc);
	lc.base = zn_gpt2_model(&mc);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	adapters = calloc((size_t)lc.layers, sizeof(*adapters));
	for (int l = 0; l < lc.layers; l++) {
		cr_assert_eq(zn_lora_describe(&lc, l, &d), 0);
		adapters[l] = calloc(d.numel + 1, sizeof(float));
		zn_layer_desc_release(&d);
	}
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(zn_lora_save_peft(&lc, (const float *const *)adapters, dir, NULL), 0);
	cr_expect_eq(open_with_r(&lc, dir, "\"r\": 4,"), 0, "as saved");
	cr_expect_eq(open_with_r(&lc, dir, "\"r\": 8,\n  \"r\": 4,"), 0, "the last r is 4");
	cr_expect_neq(open_with_r(&lc, dir, "\"r\": 4,\n  \"r\": 8,"), 0, "the last r is 8");
	for (int l = 0; l < lc.layers; l++)
		free(adapters[l]);
	free(adapters);
	zn_lora_release(&lc);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

/* ---- through the engine ----------------------------------------------------------------- */

struct lrun {
	struct et_run r;
	float **frozen;
};

static void lrun_free(struct lrun *x)
{
	for (int l = 0; x->frozen && l < x->r.layer_count; l++)
		free(x->frozen[l]);
	free(x->frozen);
	et_run_free(&x->r);
}

/* trains 3 steps of LoRA on the tiny GPT-2 under cfg; keeps adapters and frozen read-back */
static void lora_train(struct lrun *x, const struct zn_config *cfg, float dropout)
{
	static struct zn_gpt2_config mc;
	struct zn_lora_config lc = { .r = 4, .alpha = 8, .dropout = dropout };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	int *stream = et_tokens(et_stream_len(3, 1, 1, ET_B), 96, 7);
	struct zn_model m;
	struct zn_engine *e;
	int rc;

	et_model(&mc);
	lc.base = zn_gpt2_model(&mc);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn,c_fc"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	m = zn_lora_model(&lc);
	memset(x, 0, sizeof(*x));
	cr_assert_eq(et_train_any(&x->r, cfg, &m, ZN_COMM_SINGLE, stream, 3), 0);
	/* a second engine (same seed) for the frozen read-back after training */
	rc = zn_engine_create(&e, cfg, &m, &o);
	cr_assert_eq(rc, 0);
	x->frozen = calloc((size_t)zn_engine_layer_count(e), sizeof(float *));
	for (int l = 0; l < zn_engine_layer_count(e); l++) {
		uint64_t n = zn_engine_frozen_numel(e, l);

		x->frozen[l] = malloc((n + 1) * sizeof(float));
		cr_assert_eq(zn_engine_read_frozen(e, l, x->frozen[l]), 0);
	}
	zn_engine_destroy(e);
	zn_lora_release(&lc);
	free(stream);
}

Test(lora, engine_frozen_untouched_and_stages_agree)
{
	static const struct {
		int stage;
		enum zn_offload_device off;
	} v[] = { { 0, ZN_OFFLOAD_NONE }, { 1, ZN_OFFLOAD_NONE }, { 2, ZN_OFFLOAD_NONE },
		  { 3, ZN_OFFLOAD_NONE }, { 1, ZN_OFFLOAD_CPU }, { 3, ZN_OFFLOAD_CPU } };
	struct zn_gpt2_config mc;
	struct zn_config cfg;
	struct lrun ref;

	et_model(&mc);
	et_config(&cfg, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	lora_train(&ref, &cfg, 0);
	for (int s = 0; s < 3; s++)
		cr_assert(ref.r.loss[s] > 0 && isfinite(ref.r.loss[s]));
	cr_assert(ref.r.loss[2] < ref.r.loss[0], "LoRA does not learn: %g -> %g",
		  ref.r.loss[0], ref.r.loss[2]);
	for (size_t i = 1; i < sizeof(v) / sizeof(v[0]); i++) {
		struct lrun x;
		char what[64];

		et_config(&cfg, v[i].stage, v[i].off, ET_B, 1);
		lora_train(&x, &cfg, 0);
		snprintf(what, sizeof(what), "stage %d offload %d", v[i].stage, (int)v[i].off);
		cr_assert_eq(et_compare(what, &ref.r, &x.r, 1e-5), 0, "%s", what);
		lrun_free(&x);
	}
	lrun_free(&ref);
}

/* The frozen home after training: the same bits as the base's init. */
static void check_frozen_bits(int stage, enum zn_offload_device off, bool bf16)
{
	struct zn_gpt2_config mc;
	struct zn_lora_config lc = { .r = 4, .alpha = 8 };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	int *stream = et_tokens(et_stream_len(3, 2, 1, ET_B), 96, 7);
	struct zn_config cfg;
	struct zn_model m;
	struct zn_engine *e;
	float *moved = NULL;
	int moved_any = 0;

	et_model(&mc);
	et_config(&cfg, stage, off, ET_B, 2);
	cfg.precision.bf16 = bf16;
	lc.base = zn_gpt2_model(&mc);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn,c_proj,c_fc"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	m = zn_lora_model(&lc);
	cr_assert_eq(zn_engine_create(&e, &cfg, &m, &o), 0);
	for (int s = 0; s < 3; s++) {
		struct zn_step_stats st;
		uint64_t bt = 2 * ET_B * ET_T;

		cr_assert_eq(zn_engine_step(e, stream + s * bt, stream + s * bt + 1, &st), 0);
	}
	for (int l = 0; l < zn_engine_layer_count(e); l++) {
		const struct zn_layer_desc *bd = &lc.lay[l].base;
		uint64_t n = zn_engine_frozen_numel(e, l), an = zn_engine_layer_numel(e, l);
		float *got = malloc((n + 1) * 4), *want = malloc((n + 1) * 4);

		cr_assert_eq(n, bd->numel);
		zn_gpt2_ops.init(&mc, bd, 0, n, want, cfg.runtime.seed);
		if (bf16) /* the home is bf16: the init rounded once */
			for (uint64_t i = 0; i < n; i++) {
				uint16_t h;

				zn_cast_f32_to_bf16(&h, want + i, 1);
				zn_cast_bf16_to_f32(want + i, &h, 1);
			}
		cr_assert_eq(zn_engine_read_frozen(e, l, got), 0);
		cr_assert_eq(memcmp(got, want, n * 4), 0, "layer %d frozen changed", l);
		moved = realloc(moved, (an + 1) * 4);
		cr_assert_eq(zn_engine_read_layer(e, l, moved), 0);
		{
			struct zn_layer_desc d;

			cr_assert_eq(zn_lora_describe(&lc, l, &d), 0);
			for (int t = 1; t < d.tensor_count; t += 2) /* B tensors moved off 0 */
				for (uint64_t i = 0; i < d.tensors[t].numel; i++)
					moved_any |= moved[d.tensors[t].offset + i] != 0.0f;
			zn_layer_desc_release(&d);
		}
		free(got);
		free(want);
	}
	cr_assert(moved_any, "the adapters did not train");
	free(moved);
	zn_engine_destroy(e);
	zn_lora_release(&lc);
	free(stream);
}

Test(lora, frozen_bit_for_bit_stage0) { check_frozen_bits(0, ZN_OFFLOAD_NONE, false); }
Test(lora, frozen_bit_for_bit_stage1) { check_frozen_bits(1, ZN_OFFLOAD_NONE, false); }
Test(lora, frozen_bit_for_bit_stage2) { check_frozen_bits(2, ZN_OFFLOAD_NONE, false); }
Test(lora, frozen_bit_for_bit_stage3_host) { check_frozen_bits(3, ZN_OFFLOAD_CPU, false); }
Test(lora, frozen_bit_for_bit_bf16_stage1) { check_frozen_bits(1, ZN_OFFLOAD_NONE, true); }
Test(lora, frozen_bit_for_bit_bf16_stage3_host) { check_frozen_bits(3, ZN_OFFLOAD_CPU, true); }

Test(lora, dropout_is_seeded_and_changes_the_step)
{
	struct zn_config cfg;
	struct lrun a, b, c;

	et_config(&cfg, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	lora_train(&a, &cfg, 0.3f);
	lora_train(&b, &cfg, 0.3f);
	lora_train(&c, &cfg, 0);
	cr_assert_eq(et_compare("dropout rerun", &a.r, &b.r, 0), 0);
	cr_assert_neq(et_compare("dropout vs none", &c.r, &a.r, 1e-6), 0);
	lrun_free(&a);
	lrun_free(&b);
	lrun_free(&c);
}

Test(lora, plan_counts_no_optimizer_state_for_the_base)
{
	uint64_t tr[4] = { 0, 5000, 5000, 0 }, fr[4] = { 100000, 300000, 300000, 2000 };
	struct zn_engine_plan_input in = { .layer_count = 4, .layer_numel = tr, .world = 1,
					   .stage = 0, .grad_accum = 1, .prefetch_depth = 1,
					   .frozen_numel = fr };
	struct zn_engine_plan p, q;
	char msg[512];

	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert(p.frozen && p.frozen_direct);
	/* fp32 on the device: the homes only; the trainable bytes do not depend on them */
	cr_assert_eq(p.dev_frozen_bytes, zn_plan_device_alloc_bytes(100000 * 4) +
		     2 * zn_plan_device_alloc_bytes(300000 * 4) +
		     zn_plan_device_alloc_bytes(2000 * 4));
	in.frozen_numel = NULL;
	cr_assert_eq(zn_plan_engine(&in, &q), 0);
	cr_assert_eq(p.device_bytes - p.dev_frozen_bytes, q.device_bytes);
	cr_assert_eq(q.dev_optim_bytes, p.dev_optim_bytes);
	/* bf16 base on nvme: 2-byte extents, pinned read buffers, working slots */
	in.frozen_numel = fr;
	in.bf16 = true;
	in.stage = 3;
	in.offload_optimizer = ZN_OFFLOAD_CPU;
	in.offload_param = ZN_OFFLOAD_NVME;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert_eq(p.frozen_home, ZN_TIER_NVME);
	cr_assert_eq(p.nvme_frozen_bytes, zn_plan_host_alloc_bytes(200000) +
		     2 * zn_plan_host_alloc_bytes(600000) + zn_plan_host_alloc_bytes(4000));
	cr_assert_eq(p.frozen_slots, 2);
	/* read buffers beyond the slots: 2 + ZN_PLAN_FROZEN_READ_AHEAD, at most the 6 items
	 * of the sequence; a count given is used */
	cr_assert_eq(p.frozen_read_buffers, 6);
	cr_assert_eq(p.host_frozen_bytes, zn_plan_host_alloc_bytes(200000) +
		     6 * zn_plan_host_alloc_bytes(600000));
	in.frozen_read_buffers = 3;
	cr_assert_eq(zn_plan_engine(&in, &q), 0);
	cr_assert_eq(q.frozen_read_buffers, 3);
	cr_assert_eq(p.host_bytes - q.host_bytes, 3 * zn_plan_host_alloc_bytes(600000));
	cr_assert_eq(q.host_frozen_bytes, zn_plan_host_alloc_bytes(200000) +
		     3 * zn_plan_host_alloc_bytes(600000));
	/* automatic: as many as the pinned budget leaves room for */
	in.frozen_read_buffers = 0;
	cr_assert_eq(zn_plan_engine_fit(&in, false, 0, q.host_bytes, &p, msg, sizeof(msg)), 0);
	cr_assert_eq(p.frozen_read_buffers, 3);
	cr_assert_eq(zn_plan_engine_fit(&in, false, 0, q.host_bytes - 1, &p, msg, sizeof(msg)), 0);
	cr_assert_eq(p.frozen_read_buffers, 2);
	/* layer 0 at the first step only (its working copy kept), the others at every use */
	cr_assert_eq(p.frozen_step_read_bytes,
		     2 * 2 * zn_plan_host_alloc_bytes(600000) + 2 * zn_plan_host_alloc_bytes(4000));
}

/* bf16 compute (docs/lora.md): the frozen base is read as bf16 on the device, never
 * widened: no fp32 slots in the plan, a bf16 device home read directly. */
Test(lora, plan_bf16_compute_keeps_the_base_bf16)
{
	uint64_t tr[4] = { 0, 5000, 5000, 0 }, fr[4] = { 100000, 300000, 300000, 2000 };
	struct zn_engine_plan_input in = { .layer_count = 4, .layer_numel = tr, .world = 1,
					   .stage = 3, .grad_accum = 1, .prefetch_depth = 1,
					   .frozen_numel = fr, .bf16 = true, .compute16 = true,
					   .offload_optimizer = ZN_OFFLOAD_CPU,
					   .offload_param = ZN_OFFLOAD_CPU };
	struct zn_engine_plan p, w;

	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert(p.frozen && !p.frozen_wide && !p.frozen_direct);
	cr_assert_eq(p.frozen_home, ZN_TIER_HOST);
	/* layer 0's slot and a ring of 2, in bf16 only */
	cr_assert_eq(p.dev_frozen_bytes, zn_plan_device_alloc_bytes(100000 * 2) +
		     2 * zn_plan_device_alloc_bytes(300000 * 2));
	in.compute16 = false;
	cr_assert_eq(zn_plan_engine(&in, &w), 0);
	cr_assert(w.frozen_wide);
	cr_assert_eq(w.dev_frozen_bytes, p.dev_frozen_bytes +
		     zn_plan_device_alloc_bytes(100000 * 4) +
		     2 * zn_plan_device_alloc_bytes(300000 * 4));
	/* the base on the device in bf16: the compute reads the home, no slots */
	in.compute16 = true;
	in.offload_param = ZN_OFFLOAD_NONE;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert(p.frozen_direct && !p.frozen_wide);
	cr_assert_eq(p.dev_frozen_bytes, zn_plan_device_alloc_bytes(100000 * 2) +
		     2 * zn_plan_device_alloc_bytes(300000 * 2) +
		     zn_plan_device_alloc_bytes(2000 * 2));
}

/* bf16 LoRA against the fp32 path on the same bf16-rounded base and adapters: the base's
 * bf16 GEMMs on the frozen bf16 weights and the adapters' bf16 input-side GEMMs (fp32
 * accumulation) against fp32 throughout. Stated tolerance: the loss within 1e-3 relative,
 * every adapter gradient within 2e-2 of its tensor's largest gradient (activations rounded
 * to bf16 at each GEMM input: 2^-9 relative each); dropout on and off. */
static void check_bf16(float dropout)
{
	struct zn_gpt2_config mc;
	struct zn_lora_config lc = { .r = 4, .alpha = 8, .dropout = dropout };
	struct zn_model lm;
	struct lc_net N = { 0 };
	int B = 2, T = 8;
	int *tok;
	float **g32;
	double l32, l16, worst = 0;

	et_model(&mc);
	lc.base = zn_gpt2_model(&mc);
	tok = et_tokens((uint64_t)B * T + 1, mc.vocab, 3);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn,c_proj,c_fc"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	lm = zn_lora_model(&lc);
	cr_assert(lm.ops->act_numel_bf16, "GPT-2 has bf16 compute: so has its LoRA");
	cr_assert_eq(lc_net_init(&N, &lm, 5), 0);
	randomize(&N, 11);
	for (int l = 0; l < N.n; l++) { /* both paths on the same bf16 values */
		for (uint64_t i = 0; i < N.ld[l].numel; i++)
			N.p[l][i] = zn_bf16_to_f32(zn_f32_to_bf16(N.p[l][i]));
		for (uint64_t i = 0; i < N.ld[l].frozen_numel; i++)
			N.f[l][i] = zn_bf16_to_f32(zn_f32_to_bf16(N.f[l][i]));
	}
	l32 = lc_net_run_any(&N, &lm, tok, tok + 1, B, T, 9, 0);
	g32 = calloc((size_t)N.n, sizeof(float *));
	for (int l = 0; l < N.n; l++) {
		g32[l] = malloc((N.ld[l].numel + 1) * sizeof(float));
		memcpy(g32[l], N.g[l], (N.ld[l].numel + 1) * sizeof(float));
	}
	l16 = lc_net_run_any(&N, &lm, tok, tok + 1, B, T, 9, 1);
	cr_assert(fabs(l16 - l32) <= 1e-3 * fabs(l32), "loss bf16 %.9g vs fp32 %.9g", l16, l32);
	for (int l = 0; l < N.n; l++)
		for (int t = 0; t < N.ld[l].tensor_count; t++) {
			const struct zn_tensor_desc *d = &N.ld[l].tensors[t];
			double big = 0, err = 0;

			for (uint64_t i = 0; i < d->numel; i++) {
				big = fmax(big, fabs(g32[l][d->offset + i]));
				err = fmax(err, fabs(g32[l][d->offset + i] - N.g[l][d->offset + i]));
			}
			cr_assert(big > 0, "layer %d %s: no gradient", l, d->name);
			worst = fmax(worst, err / big);
		}
	cr_log_info("bf16 LoRA (dropout %g): loss %.3g relative, gradients %.3g of the largest",
		    dropout, fabs(l16 - l32) / fabs(l32), worst);
	cr_assert(worst <= 2e-2, "adapter gradients bf16 vs fp32: %.3g of the largest", worst);
	for (int l = 0; l < N.n; l++)
		free(g32[l]);
	free(g32);
	lc_net_free(&N);
	zn_lora_release(&lc);
	free(tok);
}

Test(lora, bf16_compute_within_tolerance_of_fp32) { check_bf16(0); }
Test(lora, bf16_compute_with_dropout_within_tolerance_of_fp32) { check_bf16(0.25f); }

/* Through the engine: bf16 LoRA with bf16 compute (the base read as bf16 on the device, on
 * the device and in host memory) gives the losses of bf16 storage with fp32 compute within
 * 1e-2. */
Test(lora, engine_bf16_compute_losses_match)
{
	static const enum zn_offload_device homes[] = { ZN_OFFLOAD_NONE, ZN_OFFLOAD_CPU };
	struct zn_config cfg;
	struct lrun w, b;

	et_config(&cfg, 3, ZN_OFFLOAD_NONE, ET_B, 1);
	cfg.precision.bf16 = true;
	cfg.runtime.compute_dtype = ZN_COMPUTE_FP32;
	lora_train(&w, &cfg, 0);
	for (size_t h = 0; h < sizeof(homes) / sizeof(homes[0]); h++) {
		et_config(&cfg, 3, homes[h], ET_B, 1);
		cfg.precision.bf16 = true;
		cfg.runtime.compute_dtype = ZN_COMPUTE_BF16;
		lora_train(&b, &cfg, 0);
		for (int s = 0; s < 3; s++)
			cr_assert(fabs(b.r.loss[s] - w.r.loss[s]) <= 1e-2 * fabs(w.r.loss[s]),
				  "home %d step %d: loss %.9g vs %.9g", (int)homes[h], s + 1,
				  b.r.loss[s], w.r.loss[s]);
		lrun_free(&b);
	}
	lrun_free(&w);
}

Test(lora, estimate_counts_the_frozen_base_per_tier)
{
	struct zn_estimate_input in = { .params = 1000000, .largest_layer = 100000, .ranks = 2,
					.ranks_per_node = 2, .stage = 3, .prefetch_depth = 1,
					.buffer_count = 4, .mixed_precision = true };
	struct zn_estimate full, lora;

	cr_assert_eq(zn_plan_estimate(&in, &full), 0);
	/* the same adapters on a frozen base of 1e9 parameters (largest layer 5e7) */
	in.frozen_params = 1000000000;
	in.frozen_largest_layer = 50000000;
	cr_assert_eq(zn_plan_estimate(&in, &lora), 0);
	cr_assert_eq(lora.frozen_bytes, 2000000000ull); /* bf16, whole on every rank */
	cr_assert_eq(lora.device_model_bytes - full.device_model_bytes, 2000000000ull);
	cr_assert_eq(lora.device_working_bytes - full.device_working_bytes, 3 * 50000000ull * 4);
	/* on nvme: the base's bytes there, and pinned read buffers */
	in.offload_optimizer = ZN_OFFLOAD_CPU;
	in.offload_param = ZN_OFFLOAD_NVME;
	cr_assert_eq(zn_plan_estimate(&in, &lora), 0);
	in.frozen_params = 0;
	cr_assert_eq(zn_plan_estimate(&in, &full), 0);
	cr_assert_eq(lora.nvme_bytes - full.nvme_bytes, 2000000000ull);
	/* layer 0's and 1 + prefetch depth + ZN_PLAN_FROZEN_READ_AHEAD = 6 */
	cr_assert_eq(lora.pinned_staging_bytes - full.pinned_staging_bytes, 7 * 50000000ull * 2);
	cr_assert_eq(lora.device_model_bytes, full.device_model_bytes);
	in.frozen_params = 1000000000;
	in.frozen_read_buffers = 2;
	cr_assert_eq(zn_plan_estimate(&in, &lora), 0);
	cr_assert_eq(lora.pinned_staging_bytes - full.pinned_staging_bytes, 3 * 50000000ull * 2);
}

/* With activation checkpointing the backward recomputes forwards: the frozen base is
 * fetched for those uses too (the activations' use sequence) and the result is the same. */
Test(lora, activation_checkpointing_gives_the_same_step)
{
	struct zn_config cfg;
	struct lrun ref, x;

	et_config(&cfg, 3, ZN_OFFLOAD_CPU, ET_B, 1);
	lora_train(&ref, &cfg, 0);
	cfg.act_ckpt.enabled = true;
	cfg.act_ckpt.every = 1;
	lora_train(&x, &cfg, 0);
	cr_assert_eq(et_compare("checkpointing, base in host memory", &ref.r, &x.r, 1e-6), 0);
	lrun_free(&x);
	lrun_free(&ref);
	cfg.precision.bf16 = true; /* the base's working copies from bf16 homes */
	lora_train(&x, &cfg, 0);
	cfg.act_ckpt.enabled = false;
	lora_train(&ref, &cfg, 0);
	cr_assert_eq(et_compare("checkpointing, bf16 base", &ref.r, &x.r, 1e-6), 0);
	lrun_free(&x);
	lrun_free(&ref);
}
