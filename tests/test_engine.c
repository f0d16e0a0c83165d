/* The engine on the host device, one rank: stage 0 against the whole-model host reference,
 * every stage and offload against stage 0, accumulation against a larger batch, budgets,
 * determinism. Multi-rank equivalence is in tests/mpi/engine_equiv.c. */
#include <criterion/criterion.h>

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

static void check_equiv(int stage, enum zn_offload_device off, bool bf16)
{
	struct zn_config c;
	struct et_run ref, r;
	int *tok = stream_for(ET_STEPS, 1, 1, ET_B);
	char what[64];

	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	c.precision.bf16 = bf16;
	cr_assert_eq(et_train(&ref, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	et_config(&c, stage, off, ET_B, 1);
	c.precision.bf16 = bf16;
	cr_assert_eq(et_train(&r, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	snprintf(what, sizeof(what), "stage %d offload %s%s", stage,
		 off == ZN_OFFLOAD_CPU ? "cpu" : "none", bf16 ? " bf16" : "");
	cr_assert(r.loss[ET_STEPS - 1] != ref.loss[0], "the weights moved");
	cr_assert_eq(et_compare(what, &ref, &r, 1e-5), 0, "%s differs from stage 0", what);
	cr_assert(r.peak_bytes <= r.plan_bytes, "%s: device peak %llu > plan %llu", what,
		  (unsigned long long)r.peak_bytes, (unsigned long long)r.plan_bytes);
	et_run_free(&ref);
	et_run_free(&r);
	free(tok);
}

Test(engine, stage1_equals_stage0) { check_equiv(1, ZN_OFFLOAD_NONE, false); }
Test(engine, stage2_equals_stage0) { check_equiv(2, ZN_OFFLOAD_NONE, false); }
Test(engine, stage3_equals_stage0) { check_equiv(3, ZN_OFFLOAD_NONE, false); }
Test(engine, stage1_offload_equals_stage0) { check_equiv(1, ZN_OFFLOAD_CPU, false); }
Test(engine, stage2_offload_equals_stage0) { check_equiv(2, ZN_OFFLOAD_CPU, false); }
Test(engine, stage3_offload_equals_stage0) { check_equiv(3, ZN_OFFLOAD_CPU, false); }
