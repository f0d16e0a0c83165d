/* zn_engine_eval (src/sched/eval.c): the validation loss of a batch equals the loss
 * zn_engine_step reports for the same tokens (its forward, before the update), for stage 0
 * and stage 3 with parameters offloaded, with gradient accumulation; it changes no weight
 * and is the same twice; the step after an eval is the step without one (no gradient or
 * optimizer state touched); with LoRA too (the frozen base's fetches walk with it). */
#include <criterion/criterion.h>

#include "engine_common.h"
#include "model/lora/lora.h"

static void check_eval(int stage, enum zn_offload_device off, int gas, bool lora)
{
	struct zn_lora_config lc = { .r = 4, .alpha = 8 };
	struct zn_model m;
	struct zn_gpt2_config mc;
	struct zn_config c;
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_engine *e = NULL, *ref = NULL;
	uint64_t bt = (uint64_t)ET_B * ET_T;
	int *tok = et_tokens(4 * gas * bt + 1, 96, 7);
	struct zn_step_stats st, st_ref;
	float v1 = 0, v2 = 0, v3 = 0;

	et_model(&mc);
	et_config(&c, stage, off, ET_B, gas);
	m = *et_gpt2(&mc);
	if (lora) { /* the frozen base is fetched as the step fetches it */
		lc.base = m;
		cr_assert_eq(zn_lora_add_targets(&lc, "c_attn,c_fc"), 0);
		cr_assert_eq(zn_lora_prepare(&lc), 0);
		m = zn_lora_model(&lc);
	}
	cr_assert_eq(zn_engine_create(&e, &c, &m, &o), 0);
	cr_assert_eq(zn_engine_create(&ref, &c, &m, &o), 0);
	/* a step first, so the weights are not the initial ones */
	cr_assert_eq(zn_engine_step(e, tok, tok + 1, &st), 0);
	cr_assert_eq(zn_engine_step(ref, tok, tok + 1, &st_ref), 0);
	/* eval of batch 2 twice on e, nothing on ref */
	int *in = tok + gas * bt;

	cr_assert_eq(zn_engine_eval(e, in, in + 1, &v1), 0);
	cr_assert_eq(zn_engine_eval(e, in, in + 1, &v2), 0);
	cr_expect_eq(v1, v2, "eval twice: %.9g then %.9g", v1, v2);
	/* the step on the same tokens reports the same forward loss, and both engines
	 * (one with evals in between) step to the same weights */
	cr_assert_eq(zn_engine_step(e, in, in + 1, &st), 0);
	cr_assert_eq(zn_engine_step(ref, in, in + 1, &st_ref), 0);
	cr_expect_eq(st.loss, v1, "step loss %.9g vs eval %.9g", st.loss, v1);
	cr_expect_eq(st.loss, st_ref.loss);
	cr_assert_eq(zn_engine_eval(e, in, in + 1, &v3), 0);
	cr_expect_lt(v3, v1, "the step lowered the loss on its own batch");
	for (int l = 0; l < zn_engine_layer_count(e); l++) {
		uint64_t n = zn_engine_layer_numel(e, l);
		float *a = malloc(n * 4), *b = malloc(n * 4);

		cr_assert_eq(zn_engine_read_layer(e, l, a), 0);
		cr_assert_eq(zn_engine_read_layer(ref, l, b), 0);
		cr_expect_eq(memcmp(a, b, n * 4), 0, "layer %d differs after evals", l);
		free(a);
		free(b);
	}
	zn_engine_destroy(e);
	zn_engine_destroy(ref);
	if (lora)
		zn_lora_release(&lc);
	free(tok);
}

Test(engine_eval, stage0_equals_the_steps_forward) { check_eval(0, ZN_OFFLOAD_NONE, 1, false); }
Test(engine_eval, stage2_cpu_adam_gas2) { check_eval(2, ZN_OFFLOAD_CPU, 2, false); }
Test(engine_eval, stage3_params_offloaded) { check_eval(3, ZN_OFFLOAD_CPU, 1, false); }
Test(engine_eval, lora_stage3_offloaded_gas2) { check_eval(3, ZN_OFFLOAD_CPU, 2, true); }
