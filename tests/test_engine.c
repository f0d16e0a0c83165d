/* The engine on the host device, one rank: stage 0 against the whole-model host reference,
 * every stage and offload against stage 0, accumulation against a larger batch, budgets,
 * determinism. Multi-rank equivalence is in tests/mpi/engine_equiv.c. */
#include <criterion/criterion.h>
#include <errno.h>

#include "cpu/adamw.h"
#include "engine_common.h"
#include "sched/plan.h"

static int *stream_for(int steps, int gas, int world, int micro)
{
	struct zn_gpt2_config mc;

	et_model(&mc);
	return et_tokens(et_stream_len(steps, gas, world, micro), mc.vocab, 7);
}

Test(engine, stage0_first_loss_matches_host_reference)
{
	struct zn_gpt2_config mc;
	struct zn_gpt2_host *m;
	struct zn_config c;
	struct et_run r;
	int *tok = stream_for(1, 1, 1, ET_B);
	float ref;

	et_model(&mc);
	cr_assert_eq(zn_gpt2_host_create(&m, &mc, false), 0);
	zn_gpt2_host_init(m, 42);
	cr_assert_eq(zn_gpt2_host_forward_backward(m, tok, tok + 1, ET_B, ET_T, false, &ref), 0);
	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	cr_assert_eq(et_train(&r, &c, ZN_COMM_SINGLE, tok, 1), 0);
	cr_assert(fabsf(r.loss[0] - ref) <= 1e-6f * fabsf(ref), "loss %.9g vs host %.9g",
		  r.loss[0], ref);
	et_run_free(&r);
	zn_gpt2_host_destroy(m);
	free(tok);
}

Test(engine, stage0_loss_goes_down)
{
	struct zn_config c;
	struct et_run r;
	int *tok = stream_for(1, 1, 1, ET_B);
	int *rep = malloc(et_stream_len(10, 1, 1, ET_B) * sizeof(int));

	/* the same batch ten times: the loss must fall */
	for (int s = 0; s < 10; s++)
		memcpy(rep + s * ET_B * ET_T, tok, (ET_B * ET_T + 1) * sizeof(int));
	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	cr_assert_eq(et_train(&r, &c, ZN_COMM_SINGLE, rep, 10), 0);
	cr_assert(r.loss[9] < r.loss[0] - 0.5f, "loss %g -> %g", r.loss[0], r.loss[9]);
	et_run_free(&r);
	free(tok);
	free(rep);
}

/* stage and offload against stage 0, m and v stored as `states` in both: within 1e-5
 * (fp32 states; the reference tolerance of docs/testing.md), or bit for bit (compact
 * states: one rank reduces nothing, so every tier computes the same bits, and a code
 * flipped by rounding would show) */
static void check_equiv_states(int stage, enum zn_offload_device off, bool bf16,
			       enum zn_optim_states states)
{
	struct zn_config c;
	struct et_run ref, r;
	int *tok = stream_for(ET_STEPS, 1, 1, ET_B);
	char what[96];

	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	c.precision.bf16 = bf16;
	c.optimizer.states = states;
	cr_assert_eq(et_train(&ref, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	et_config(&c, stage, off, ET_B, 1);
	c.precision.bf16 = bf16;
	c.optimizer.states = states;
	cr_assert_eq(et_train(&r, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	snprintf(what, sizeof(what), "stage %d offload %s%s states %s", stage,
		 off == ZN_OFFLOAD_CPU ? "cpu" : "none", bf16 ? " bf16" : "",
		 zn_optim_states_name(states));
	cr_assert(r.loss[ET_STEPS - 1] != ref.loss[0], "the weights moved");
	if (states == ZN_STATES_FP32)
		cr_assert_eq(et_compare(what, &ref, &r, 1e-5), 0, "%s differs from stage 0", what);
	else
		cr_assert_eq(et_identical(what, &ref, &r), 0, "%s differs from stage 0", what);
	cr_assert(r.peak_bytes <= r.plan_bytes, "%s: device peak %llu > plan %llu", what,
		  (unsigned long long)r.peak_bytes, (unsigned long long)r.plan_bytes);
	et_run_free(&ref);
	et_run_free(&r);
	free(tok);
}

static void check_equiv(int stage, enum zn_offload_device off, bool bf16)
{
	check_equiv_states(stage, off, bf16, ZN_STATES_FP32);
}

Test(engine, stage1_equals_stage0) { check_equiv(1, ZN_OFFLOAD_NONE, false); }
Test(engine, stage2_equals_stage0) { check_equiv(2, ZN_OFFLOAD_NONE, false); }
Test(engine, stage3_equals_stage0) { check_equiv(3, ZN_OFFLOAD_NONE, false); }
Test(engine, stage1_offload_equals_stage0) { check_equiv(1, ZN_OFFLOAD_CPU, false); }
Test(engine, stage2_offload_equals_stage0) { check_equiv(2, ZN_OFFLOAD_CPU, false); }
Test(engine, stage3_offload_equals_stage0) { check_equiv(3, ZN_OFFLOAD_CPU, false); }

Test(engine, bf16_stage3_offload_equals_bf16_stage0) { check_equiv(3, ZN_OFFLOAD_CPU, true); }
Test(engine, bf16_stage2_equals_bf16_stage0) { check_equiv(2, ZN_OFFLOAD_NONE, true); }

/* compact optimizer state on the device (the kernel table's adamw_states) and on the CPU */
Test(engine, int8_states_every_stage_and_offload_equal_stage0)
{
	for (int stage = 1; stage <= 3; stage++) {
		check_equiv_states(stage, ZN_OFFLOAD_NONE, false, ZN_STATES_INT8);
		check_equiv_states(stage, ZN_OFFLOAD_CPU, false, ZN_STATES_INT8);
	}
	check_equiv_states(3, ZN_OFFLOAD_CPU, true, ZN_STATES_INT8);
}

Test(engine, bf16_states_every_stage_and_offload_equal_stage0)
{
	for (int stage = 1; stage <= 3; stage++) {
		check_equiv_states(stage, ZN_OFFLOAD_NONE, false, ZN_STATES_BF16);
		check_equiv_states(stage, ZN_OFFLOAD_CPU, false, ZN_STATES_BF16);
	}
	check_equiv_states(2, ZN_OFFLOAD_NONE, true, ZN_STATES_BF16);
}

/* compact states change the update a little: the losses stay near fp32 state's and the
 * state is really stored compactly (the runs differ) */
Test(engine, compact_states_track_fp32_states)
{
	struct zn_config c;
	struct et_run a, b;
	int *tok = stream_for(ET_STEPS, 1, 1, ET_B);

	et_config(&c, 3, ZN_OFFLOAD_CPU, ET_B, 1);
	cr_assert_eq(et_train(&a, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	for (int st = ZN_STATES_BF16; st <= ZN_STATES_INT8; st++) {
		c.optimizer.states = st;
		cr_assert_eq(et_train(&b, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
		for (int s = 0; s < ET_STEPS; s++)
			cr_assert(fabsf(a.loss[s] - b.loss[s]) < 1e-2f * a.loss[s],
				  "states %s step %d: loss %g vs fp32 states %g",
				  zn_optim_states_name(st), s + 1, b.loss[s], a.loss[s]);
		cr_assert(memcmp(a.w[0], b.w[0], a.numel[0] * 4) != 0,
			  "states %s: the same weights as fp32 state", zn_optim_states_name(st));
		et_run_free(&b);
	}
	et_run_free(&a);
	free(tok);
}

Test(engine, bf16_tracks_fp32)
{
	struct zn_config c;
	struct et_run a, b;
	int *tok = stream_for(ET_STEPS, 1, 1, ET_B);

	et_config(&c, 3, ZN_OFFLOAD_CPU, ET_B, 1);
	cr_assert_eq(et_train(&a, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	c.precision.bf16 = true;
	cr_assert_eq(et_train(&b, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	for (int s = 0; s < ET_STEPS; s++)
		cr_assert(fabsf(a.loss[s] - b.loss[s]) < 2e-2f * a.loss[s],
			  "step %d: bf16 loss %g vs fp32 %g", s + 1, b.loss[s], a.loss[s]);
	cr_assert(a.loss[0] != b.loss[0], "bf16 parameters round: the losses differ a little");
	et_run_free(&a);
	et_run_free(&b);
	free(tok);
}

static void check_accum(int stage, enum zn_offload_device off)
{
	struct zn_config c;
	struct et_run big, acc;
	int k = 3;
	int *tok = stream_for(ET_STEPS, k, 1, ET_B);

	et_config(&c, stage, off, k * ET_B, 1);
	cr_assert_eq(et_train(&big, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	et_config(&c, stage, off, ET_B, k);
	cr_assert_eq(et_train(&acc, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	cr_assert_eq(et_compare("accumulation", &big, &acc, 1e-5), 0,
		     "stage %d: %d micro-batches of %d differ from one of %d", stage, k, ET_B,
		     k * ET_B);
	et_run_free(&big);
	et_run_free(&acc);
	free(tok);
}

Test(engine, accumulation_stage0) { check_accum(0, ZN_OFFLOAD_NONE); }
Test(engine, accumulation_stage2) { check_accum(2, ZN_OFFLOAD_NONE); }
Test(engine, accumulation_stage2_offload) { check_accum(2, ZN_OFFLOAD_CPU); }
Test(engine, accumulation_stage3_offload) { check_accum(3, ZN_OFFLOAD_CPU); }

Test(engine, deterministic_bit_for_bit)
{
	struct zn_config c;
	struct et_run a, b;
	int *tok = stream_for(ET_STEPS, 2, 1, ET_B);

	et_config(&c, 3, ZN_OFFLOAD_CPU, ET_B, 2);
	c.gradient_clipping = 0.1f;
	cr_assert_eq(et_train(&a, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	cr_assert_eq(et_train(&b, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	cr_assert_eq(memcmp(a.loss, b.loss, sizeof(a.loss)), 0, "losses differ run to run");
	for (int l = 0; l < a.layer_count; l++)
		cr_assert_eq(memcmp(a.w[l], b.w[l], a.numel[l] * 4), 0, "layer %d differs", l);
	et_run_free(&a);
	et_run_free(&b);
	free(tok);
}

/* A model whose stage-0 model states alone exceed the device budget: refused at stage 0
 * before allocating; trains at stage 3 with CPU offload under the budget. */
Test(engine, over_budget_refused_at_stage0_trains_at_stage3_offload)
{
	struct zn_gpt2_config mc = { .layers = 4, .heads = 4, .d_model = 64, .seq = 8,
				     .vocab = 96 };
	uint64_t budget = 1536ull << 10, P;
	struct zn_config c;
	struct et_run r;
	int *tok;

	zn_gpt2_config_validate(&mc);
	P = zn_gpt2_param_numel(&mc);
	cr_assert(16 * P > budget, "stage 0 states (%llu bytes) must exceed the budget",
		  (unsigned long long)(16 * P));
	tok = et_tokens(et_stream_len(3, 1, 1, ET_B), mc.vocab, 3);
	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	c.runtime.device_mem_bytes = budget;
	cr_assert_eq(et_train_model(&r, &c, &mc, ZN_COMM_SINGLE, tok, 3), ZN_EUSAGE);
	et_config(&c, 3, ZN_OFFLOAD_CPU, ET_B, 1);
	c.runtime.device_mem_bytes = budget;
	cr_assert_eq(et_train_model(&r, &c, &mc, ZN_COMM_SINGLE, tok, 3), 0);
	cr_assert(r.peak_bytes <= budget, "peak %llu over budget %llu",
		  (unsigned long long)r.peak_bytes, (unsigned long long)budget);
	cr_assert(r.peak_bytes <= r.plan_bytes, "peak %llu over the plan %llu",
		  (unsigned long long)r.peak_bytes, (unsigned long long)r.plan_bytes);
	cr_assert(r.peak_bytes > 0);
	et_run_free(&r);
	free(tok);
}

/* nvme offload itself is tested in tests/test_nvme_engine.c; without a path it is refused */
Test(engine, nvme_offload_without_a_path_refused)
{
	struct zn_config c;
	struct et_run r;
	int *tok = stream_for(1, 1, 1, ET_B);

	et_config(&c, 3, ZN_OFFLOAD_CPU, ET_B, 1);
	c.zero.offload_optimizer.device = ZN_OFFLOAD_NVME;
	cr_assert_neq(et_train(&r, &c, ZN_COMM_SINGLE, tok, 1), 0);
	free(tok);
}

/* No layer limit (the engine once kept activations in a 66-entry stack array): 100 blocks
 * of width 8 train at stage 3 with CPU offload exactly as at stage 0. */
Test(engine, hundred_layers_stage3_offload_equals_stage0)
{
	struct zn_gpt2_config mc = { .layers = 100, .heads = 2, .d_model = 8, .seq = 16,
				     .vocab = 96, .padded_vocab = 0 };
	struct zn_config c;
	struct et_run ref, r;
	int *tok = stream_for(3, 1, 1, ET_B);

	cr_assert_eq(zn_gpt2_config_validate(&mc), 0);
	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	cr_assert_eq(et_train_model(&ref, &c, &mc, ZN_COMM_SINGLE, tok, 3), 0);
	cr_assert_eq(ref.layer_count, 102);
	et_config(&c, 3, ZN_OFFLOAD_CPU, ET_B, 1);
	cr_assert_eq(et_train_model(&r, &c, &mc, ZN_COMM_SINGLE, tok, 3), 0);
	cr_assert(r.loss[2] != ref.loss[0], "the weights moved");
	cr_assert_eq(et_compare("100 layers stage 3 offload", &ref, &r, 1e-5), 0);
	et_run_free(&ref);
	et_run_free(&r);
	free(tok);
}
