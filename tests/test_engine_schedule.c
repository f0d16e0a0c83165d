/* Layer-major gradient accumulation (src/sched/step_lm.c, lmajor.c; zinc.schedule): GPT-2
 * (tied head), Llama (untied) and Qwen2 (tied Llama) at ZeRO stages 0-3, with the states
 * and parameters on the device or cpu, grad-accum 1, 2 and 4, give losses and weights bit
 * for bit equal to micro-batch order, with the boundaries on the device and in pinned
 * host memory, with bf16 parameters and fp16; the use sequence; the plan's parameter uses;
 * auto's choice and an explicit layer-major refused with a reason. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include "engine_recompute.h"
#include "model/lora/lora.h"
#include "sched/engine_impl.h"

enum { GPT2, LLAMA, QWEN2 };

static struct rc_case case_of(int model, int stage, enum zn_offload_device off, int gas)
{
	return (struct rc_case){ .llama = model != GPT2, .relative = model == QWEN2 ? RC_QWEN2 : 0,
				 .stage = stage, .off = off, .gas = gas };
}

/* micro-batch order, then layer-major (boundaries on the device, then in pinned host
 * memory): the same bits */
static void same_bits(struct rc_case k)
{
	int *tok = et_tokens(et_stream_len(RC_STEPS, k.gas, 1, ET_B), 32, 11);
	struct et_run ref, got;

	rc_train(&ref, &k, tok);
	k.layer_major = true;
	rc_train(&got, &k, tok);
	rc_assert_same(&ref, &got, &k);
	et_run_free(&got);
	k.every = 1;
	k.home = ZN_OFFLOAD_CPU;
	rc_train(&got, &k, tok);
	rc_assert_same(&ref, &got, &k);
	et_run_free(&got);
	et_run_free(&ref);
	free(tok);
}

static void all_accum(int model, int stage, enum zn_offload_device off)
{
	static const int gas[] = { 1, 2, 4 };

	for (int i = 0; i < 3; i++)
		same_bits(case_of(model, stage, off, gas[i]));
}

Test(engine_schedule, gpt2_stage0) { all_accum(GPT2, 0, ZN_OFFLOAD_NONE); }
Test(engine_schedule, gpt2_stage1) { all_accum(GPT2, 1, ZN_OFFLOAD_NONE); }
Test(engine_schedule, gpt2_stage1_cpu) { all_accum(GPT2, 1, ZN_OFFLOAD_CPU); }
Test(engine_schedule, gpt2_stage2) { all_accum(GPT2, 2, ZN_OFFLOAD_NONE); }
Test(engine_schedule, gpt2_stage2_cpu) { all_accum(GPT2, 2, ZN_OFFLOAD_CPU); }
Test(engine_schedule, gpt2_stage3) { all_accum(GPT2, 3, ZN_OFFLOAD_NONE); }
Test(engine_schedule, gpt2_stage3_cpu) { all_accum(GPT2, 3, ZN_OFFLOAD_CPU); }
Test(engine_schedule, llama_stage0) { all_accum(LLAMA, 0, ZN_OFFLOAD_NONE); }
Test(engine_schedule, llama_stage1_cpu) { all_accum(LLAMA, 1, ZN_OFFLOAD_CPU); }
Test(engine_schedule, llama_stage2) { all_accum(LLAMA, 2, ZN_OFFLOAD_NONE); }
Test(engine_schedule, llama_stage3_cpu) { all_accum(LLAMA, 3, ZN_OFFLOAD_CPU); }
Test(engine_schedule, qwen2_stage1) { all_accum(QWEN2, 1, ZN_OFFLOAD_NONE); }
Test(engine_schedule, qwen2_stage2_cpu) { all_accum(QWEN2, 2, ZN_OFFLOAD_CPU); }
Test(engine_schedule, qwen2_stage3_cpu) { all_accum(QWEN2, 3, ZN_OFFLOAD_CPU); }

Test(engine_schedule, bf16_parameters)
{
	struct rc_case k = case_of(GPT2, 3, ZN_OFFLOAD_CPU, 4);

	k.bf16 = true;
	same_bits(k);
	k = case_of(LLAMA, 2, ZN_OFFLOAD_NONE, 2);
	k.bf16 = true;
	same_bits(k);
}

/* n = 5: forward 1..3, the turn 4, backward 3..1 (recompute and backward), the tied head
 * again */
Test(engine_schedule, use_sequence)
{
	static const int want[][3] = { { 1, 1, 0 }, { 2, 1, 0 }, { 3, 1, 0 }, { 4, 1, 1 },
				       { 3, 1, 1 }, { 2, 1, 1 }, { 1, 1, 1 }, { 4, 1, 1 } };
	struct zn_use u[16];
	int n = zn_lmajor_schedule(5, true, u);

	cr_assert_eq(n, 8);
	for (int i = 0; i < n; i++)
		cr_assert(u[i].layer == want[i][0] && u[i].fwd == want[i][1] &&
			  u[i].bwd == want[i][2], "use %d: layer %d fwd %d bwd %d", i, u[i].layer,
			  u[i].fwd, u[i].bwd);
	cr_assert_eq(zn_lmajor_schedule(5, false, NULL), 7);
	cr_assert_eq(zn_lmajor_schedule(2, false, NULL), 1);
}

Test(engine_schedule, plan_counts_one_use_per_direction)
{
	struct zn_engine_plan_input in = { .layer_count = 6, .grad_accum = 4 };

	cr_assert_eq(zn_plan_layer_uses(&in, 0), 1);
	cr_assert_eq(zn_plan_layer_uses(&in, 3), 8);
	cr_assert_eq(zn_plan_layer_uses(&in, 5), 8);
	in.layer_major = true;
	cr_assert_eq(zn_plan_layer_uses(&in, 0), 1);
	cr_assert_eq(zn_plan_layer_uses(&in, 3), 2);
	cr_assert_eq(zn_plan_layer_uses(&in, 5), 1);
	in.head_again = true;
	cr_assert_eq(zn_plan_layer_uses(&in, 5), 2);
}
