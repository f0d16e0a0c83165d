/* zinc generate --adapter at the library level (sched/generate.h o.lora, lora.h
 * zn_lora_decode): a model with LoRA adapters applied unmerged gives, at every position of
 * a prefill and the decode steps after it, the logits of the same model with the adapters
 * merged into its weights (float64, lora.h), for GPT-2 (fused c_attn: the adapter's rows
 * of it) and a GQA Llama with biases, rsLoRA or not; the adapters move the logits well
 * beyond the tolerance; streamed layers (cpu) give the on-device bits. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "generate_check.h"
#include "model/lora/lora.h"

/* the base's weights with the adapters merged (ctx: the LoRA config) */
static int init_merged(void *ctx, int layer, const struct zn_layer_desc *L, float *p)
{
	const struct zn_lora_config *lc = ctx;
	struct zn_layer_desc ad;
	float *a;

	cr_assert_eq(init_layer(NULL, layer, L, p), 0);
	cr_assert_eq(zn_lora_describe(lc, layer, &ad), 0);
	a = malloc(ad.numel * sizeof(float) + 4);
	cr_assert_not_null(a);
	init_adapter(NULL, layer, &ad, a);
	zn_lora_merge_layer(lc, layer, a, p, ZN_DTYPE_F32);
	free(a);
	zn_layer_desc_release(&ad);
	return 0;
}

static void run_all(const struct zn_model *m, const struct zn_lora_config *lc,
		    enum zn_gen_home home, bool merged, float *logits)
{
	struct zn_gen_opts o = { .max_t = T_ALL, .max_chunk = 5, .home = home,
				 .device = ZN_DEVICE_HOST, .init_layer = init_merged,
				 .init_ctx = (void *)lc };
	struct zn_gen *g = NULL;

	if (merged)
		cr_assert_eq(zn_gen_create(&g, m, &o), 0);
	else if (lc)
		g = make_lora_on(m, lc, home, NULL, ZN_DEVICE_HOST);
	else
		g = make_on(m, home, NULL, ZN_DEVICE_HOST);
	decode_all(g, zn_gen_vocab(g), logits);
	zn_gen_destroy(g);
}

static void check(const struct zn_model *base, const char *targets, int r, float alpha,
		  bool rslora)
{
	struct zn_lora_config lc = { .base = *base, .r = r, .alpha = alpha, .rslora = rslora };
	int V = base->ops->vocab(base->config);
	size_t n = (size_t)T_ALL * (size_t)V;
	float *with = malloc(n * 4), *merged = malloc(n * 4), *plain = malloc(n * 4);
	float *streamed = malloc(n * 4);
	double worst = 0, moved = 0;
	size_t at = 0;

	cr_assert(with && merged && plain && streamed);
	cr_assert_eq(zn_lora_add_targets(&lc, targets), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	run_all(base, &lc, ZN_GEN_DEVICE, false, with);
	run_all(base, &lc, ZN_GEN_DEVICE, true, merged);
	run_all(base, NULL, ZN_GEN_DEVICE, false, plain);
	run_all(base, &lc, ZN_GEN_CPU, false, streamed);
	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)with[i] - merged[i]) / (1.0 + fabs((double)merged[i]));

		cr_assert(!isnan(with[i]), "NaN at %zu", i);
		if (e > worst)
			worst = e, at = i;
		moved = fmax(moved, fabs((double)with[i] - plain[i]));
	}
	cr_assert(worst <= 5e-6, "%s: position %zu token %zu: %.9g unmerged, %.9g merged",
		  targets, at / (size_t)V, at % (size_t)V, (double)with[at], (double)merged[at]);
	cr_assert(moved > 0.05, "%s: the adapters moved the logits by %.3g only", targets, moved);
	cr_assert_eq(memcmp(with, streamed, n * 4), 0, "%s: streamed layers differ", targets);
	zn_lora_release(&lc);
	free(with), free(merged), free(plain), free(streamed);
}

Test(generate_lora, gpt2_adapters_unmerged_equal_merged)
{
	struct zn_gpt2_config c = gpt2_cfg();
	struct zn_model m = zn_gpt2_model(&c);

	check(&m, "c_attn,c_proj,c_fc", 4, 8, false);
}

Test(generate_lora, llama_adapters_unmerged_equal_merged)
{
	struct zn_llama_config c = llama_cfg(true, false, 0);
	struct zn_model m = zn_llama_model(&c);

	check(&m, "q_proj,v_proj,o_proj,down_proj", 3, 8, false);
	check(&m, "k_proj,gate_proj,up_proj", 4, 6, true);
}
