/* Shared by test_generate.c and test_gpu_generate.c: a small GPT-2 and Llama (GQA, biases,
 * tied head, window), parameters large enough to spread the logits, a token sequence, and
 * the generation of every position's logits (a prefill of 5, then one token at a time). */
#ifndef ZN_TESTS_GENERATE_CHECK_H
#define ZN_TESTS_GENERATE_CHECK_H

#include <criterion/criterion.h>
#include <stdlib.h>

#include "model/gpt2/gpt2.h"
#include "model/llama/llama.h"
#include "model/lora/lora.h"
#include "sched/generate.h"

#define T_ALL 12

/* every parameter uniform in [-0.5, 0.5) from (layer, element): large enough that the
 * logits spread far from uniform */
static inline int init_layer(void *ctx, int layer, const struct zn_layer_desc *L, float *p)
{
	(void)ctx;
	for (uint64_t i = 0; i < L->numel; i++) {
		uint64_t z = (uint64_t)layer * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 7;

		z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
		z ^= z >> 29;
		p[i] = (float)((double)(z >> 11) / 9007199254740992.0) - 0.5f;
	}
	return 0;
}

static const int tokens[T_ALL] __attribute__((unused)) = { 3, 17, 5, 0, 42, 9, 9, 31, 1, 60, 2, 44 };

static inline struct zn_gen *make_on(const struct zn_model *m, enum zn_gen_home home, const char *dir,
			      enum zn_device_kind kind)
{
	struct zn_gen_opts o = { .max_t = T_ALL, .max_chunk = 5, .home = home, .nvme_path = dir,
				 .device = kind, .init_layer = init_layer };
	struct zn_gen *g = NULL;

	cr_assert_eq(zn_gen_create(&g, m, &o), 0);
	return g;
}

/* logits of every position: a prefill of 5 (all 5 rows), then 7 steps of one token */
static inline void decode_all(struct zn_gen *g, int V, float *logits)
{
	cr_assert_eq(zn_gen_forward(g, tokens, 5, 5, logits), 0);
	for (int t = 5; t < T_ALL; t++)
		cr_assert_eq(zn_gen_forward(g, tokens + t, 1, 1, logits + (size_t)t * V), 0);
	cr_assert_eq(zn_gen_pos(g), T_ALL);
}

/* greedy from the cache's start: a prefill of the first 5 tokens, then the model's own
 * choices (the first highest logit), T_ALL - 5 ids */
static inline void greedy(struct zn_gen *g, int V, int *ids)
{
	float *z = malloc(sizeof(float) * (size_t)V);

	cr_assert_not_null(z);
	zn_gen_reset(g);
	cr_assert_eq(zn_gen_forward(g, tokens, 5, 1, z), 0);
	for (int t = 5; t < T_ALL; t++) {
		int best = 0;

		for (int v = 1; v < V; v++)
			best = z[v] > z[best] ? v : best;
		ids[t - 5] = best;
		if (t + 1 < T_ALL)
			cr_assert_eq(zn_gen_forward(g, &ids[t - 5], 1, 1, z), 0);
	}
	free(z);
}

static inline struct zn_gen *make(const struct zn_model *m, enum zn_gen_home home,
				  const char *dir)
{
	return make_on(m, home, dir, ZN_DEVICE_HOST);
}

/* LoRA adapters (test_generate_lora, test_gpu_generate): A and B uniform in [-0.4, 0.4)
 * from (layer, element), far from PEFT's B = 0 start */
static inline int init_adapter(void *ctx, int layer, const struct zn_layer_desc *L, float *p)
{
	(void)ctx;
	for (uint64_t i = 0; i < L->numel; i++) {
		uint64_t z = (uint64_t)(layer + 101) * 0xd1b54a32d192ed03ull +
			     i * 0x9e3779b97f4a7c15ull;

		z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
		z ^= z >> 32;
		p[i] = 0.8f * ((float)((double)(z >> 11) / 9007199254740992.0) - 0.5f);
	}
	return 0;
}

/* make_on with the adapters of lc (prepared on m, dropout 0) applied unmerged */
static inline struct zn_gen *make_lora_on(const struct zn_model *m,
					  const struct zn_lora_config *lc,
					  enum zn_gen_home home, const char *dir,
					  enum zn_device_kind kind)
{
	struct zn_gen_opts o = { .max_t = T_ALL, .max_chunk = 5, .home = home, .nvme_path = dir,
				 .device = kind, .init_layer = init_layer, .lora = lc,
				 .init_adapter = init_adapter };
	struct zn_gen *g = NULL;

	cr_assert_eq(zn_gen_create(&g, m, &o), 0);
	return g;
}

static inline struct zn_gpt2_config gpt2_cfg(void)
{
	struct zn_gpt2_config c = { .layers = 2, .heads = 4, .d_model = 32, .seq = T_ALL,
				    .vocab = 64, .padded_vocab = 128 };

	cr_assert_eq(zn_gpt2_config_validate(&c), 0);
	return c;
}

static inline struct zn_llama_config llama_cfg(bool bias, bool tied, int window)
{
	struct zn_llama_config c;

	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
	c.hidden = 32, c.intermediate = 48, c.heads = 4, c.kv_heads = 2, c.head_dim = 8;
	c.vocab = 64, c.seq = T_ALL, c.max_positions = T_ALL;
	c.qkv_bias = bias, c.o_bias = bias, c.tied = tied, c.window = window;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	return c;
}

#endif
