/* Shared by tests/test_engine_recompute.c and tests/test_nvme_recompute.c: trains GPT-2 and
 * Llama with and without activation checkpointing and compares the losses and weights bit
 * for bit (deterministic mode: recomputing a layer's forward gives the same bits). */
#ifndef ZN_TESTS_ENGINE_RECOMPUTE_H
#define ZN_TESTS_ENGINE_RECOMPUTE_H

#include <criterion/criterion.h>

#include "engine_common.h"
#include "model/llama/llama.h"
#include "model/model.h"

#define RC_STEPS 3

/* Llama relatives (rc_case.relative): Qwen2's q/k/v biases and tied embeddings, Llama's
 * attention_bias (o_proj bias too), Mistral's sliding window */
#define RC_QWEN2 1
#define RC_ATTENTION_BIAS 2
#define RC_MISTRAL 4

struct rc_case {
	bool llama;
	int relative;                  /* llama: RC_* bits, 0 plain Llama (untied, GQA) */
	int stage;
	enum zn_offload_device off;
	int gas;
	int every;                     /* 0: checkpointing off */
	enum zn_offload_device home;   /* checkpoints: none = device, cpu, nvme */
	const char *nvme_dir;          /* home nvme (and off nvme) */
	bool layer_major;              /* --schedule layer-major, else micro-batch */
	bool lora;                     /* a LoRA adapter over the model (frozen base) */
	bool bf16;                     /* bf16 parameters (fp32 compute) */
};

static inline struct zn_gpt2_config rc_gpt2(void)
{
	struct zn_gpt2_config mc;

	et_model(&mc);
	mc.layers = 4; /* 6 engine layers: runs of 1, 2 and 3 differ */
	cr_assert_eq(zn_gpt2_config_validate(&mc), 0);
	return mc;
}

static inline struct zn_llama_config rc_llama(int relative)
{
	struct zn_llama_config c;

	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
	c.layers = 3, c.hidden = 16, c.intermediate = 24, c.heads = 4, c.kv_heads = 2;
	c.head_dim = 6, c.vocab = 32, c.seq = 16;
	if (relative & RC_QWEN2)
		c.qkv_bias = c.tied = true;
	if (relative & RC_ATTENTION_BIAS)
		c.qkv_bias = c.o_bias = true;
	if (relative & RC_MISTRAL)
		c.window = 8; /* shorter than seq 16: the attention masks older keys */
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	return c;
}

static inline void rc_config(struct zn_config *c, const struct rc_case *k)
{
	et_config(c, k->stage, k->off, ET_B, k->gas);
	if (k->nvme_dir) {
		c->zero.offload_optimizer.nvme_path_count = 1;
		c->zero.offload_param.nvme_path_count = 1;
		snprintf(c->zero.offload_optimizer.nvme_path[0], ZN_PATH_MAX, "%s", k->nvme_dir);
		snprintf(c->zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", k->nvme_dir);
	}
	if (k->every) {
		c->act_ckpt.enabled = true;
		c->act_ckpt.every = k->every;
		c->act_ckpt.home.device = k->home;
		if (k->home == ZN_OFFLOAD_NVME) {
			c->act_ckpt.home.nvme_path_count = 1;
			snprintf(c->act_ckpt.home.nvme_path[0], ZN_PATH_MAX, "%s", k->nvme_dir);
		}
	}
	c->runtime.schedule = k->layer_major ? ZN_SCHEDULE_LAYER_MAJOR : ZN_SCHEDULE_MICRO_BATCH;
	c->precision.bf16 = k->bf16;
	cr_assert_eq(zn_config_validate(c, 1), 0);
}

static inline void rc_train(struct et_run *r, const struct rc_case *k, const int *tok)
{
	struct zn_gpt2_config g = rc_gpt2();
	struct zn_llama_config l = rc_llama(k->relative);
	struct zn_model m = k->llama ? zn_llama_model(&l) : zn_gpt2_model(&g);
	struct zn_config c;

	rc_config(&c, k);
	cr_assert_eq(et_train_any(r, &c, &m, ZN_COMM_SINGLE, tok, RC_STEPS), 0,
		     "%s stage %d gas %d every %d home %d: the run trains",
		     k->llama ? "llama" : "gpt2", k->stage, k->gas, k->every, (int)k->home);
}

/* bit for bit: every loss and every weight */
static inline void rc_assert_same(const struct et_run *a, const struct et_run *b,
				  const struct rc_case *k)
{
	cr_assert_eq(a->layer_count, b->layer_count);
	cr_assert_eq(memcmp(a->loss, b->loss, sizeof(a->loss)), 0,
		     "%s stage %d every %d home %d: losses differ (%.9g vs %.9g at step 1)",
		     k->llama ? "llama" : "gpt2", k->stage, k->every, (int)k->home, b->loss[0],
		     a->loss[0]);
	for (int l = 0; l < a->layer_count; l++)
		cr_assert_eq(memcmp(a->w[l], b->w[l], a->numel[l] * sizeof(float)), 0,
			     "%s stage %d every %d home %d: layer %d weights differ",
			     k->llama ? "llama" : "gpt2", k->stage, k->every, (int)k->home, l);
}

/* The device peak within the plan, and lower than without checkpointing by exactly what
 * the plan says (the engine allocates what the plan lists). */
static inline void rc_assert_peak(const struct et_run *off, const struct et_run *on,
				  const struct rc_case *k)
{
	cr_assert_leq(off->peak_bytes, off->plan_bytes);
	cr_assert_leq(on->peak_bytes, on->plan_bytes, "%s stage %d every %d home %d: peak %llu "
		      "over the plan %llu", k->llama ? "llama" : "gpt2", k->stage, k->every,
		      (int)k->home, (unsigned long long)on->peak_bytes,
		      (unsigned long long)on->plan_bytes);
	cr_assert_eq(off->peak_bytes - on->peak_bytes, off->plan_bytes - on->plan_bytes,
		     "%s stage %d every %d home %d: the peak fell by %llu, the plan by %llu",
		     k->llama ? "llama" : "gpt2", k->stage, k->every, (int)k->home,
		     (unsigned long long)(off->peak_bytes - on->peak_bytes),
		     (unsigned long long)(off->plan_bytes - on->plan_bytes));
}

/* the case without checkpointing, then with every given `every`: the same bits, the peak
 * within the plan and lower by the planned amount */
static inline void rc_check(struct rc_case k, const int *everies, int count)
{
	struct et_run ref, got;
	int *tok = et_tokens(et_stream_len(RC_STEPS, k.gas, 1, ET_B), 32, 11);
	int every = k.every;

	(void)every;
	k.every = 0;
	rc_train(&ref, &k, tok);
	for (int i = 0; i < count; i++) {
		k.every = everies[i];
		rc_train(&got, &k, tok);
		rc_assert_same(&ref, &got, &k);
		rc_assert_peak(&ref, &got, &k);
		et_run_free(&got);
	}
	et_run_free(&ref);
	free(tok);
}

/* The device peak stays within the plan with the checkpoints on each home, and is lower
 * than without checkpointing by exactly what the plan says (the engine allocates what the
 * plan lists). */
static inline void rc_check_peak(bool llama, enum zn_offload_device home, int every, int stage,
				 const char *dir)
{
	struct rc_case k = { .llama = llama, .stage = stage, .home = home, .gas = 1,
			     .nvme_dir = dir };
	int *tok = et_tokens(et_stream_len(RC_STEPS, 1, 1, ET_B), 32, 3);
	struct et_run off, on;

	rc_train(&off, &k, tok);
	k.every = every;
	rc_train(&on, &k, tok);
	cr_assert_lt(on.plan_bytes, off.plan_bytes, "checkpointing plans less device memory");
	rc_assert_peak(&off, &on, &k);
	et_run_free(&off);
	et_run_free(&on);
	free(tok);
}

#endif
