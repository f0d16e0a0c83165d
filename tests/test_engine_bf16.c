/* bf16 compute in the engine (docs/kernels.md, "bf16 compute"): with bf16 parameters and
 * zinc.compute_dtype auto/bf16 the GPT-2 layers read the stored bf16 parameters directly
 * (no fp32 working copy) and run bf16 GEMMs with fp32 accumulation; compute_dtype fp32
 * keeps the fp32 working-copy path.
 *
 * - bf16 compute tracks the fp32-compute run of the same bf16 parameters on stages 0-3
 *   and cpu offload: losses within 1e-2 relative (the bf16 tolerance: GEMM inputs rounded
 *   to 8 significant bits; measured well under it), final master weights within 2 x lr x
 *   steps of each other element by element (AdamW moves an element by about lr a step).
 * - bit-identical reruns; stages 0 and 3 (world 1) give the same bits.
 * - the plan has no fp32 working slots with bf16 compute, so the device peak is lower
 *   than with compute_dtype fp32, and the measured peak stays within the plan.
 * - compute_dtype auto equals bf16; compute_dtype bf16 without bf16 parameters is refused
 *   by the config check.
 */
#include <criterion/criterion.h>

#include "engine_common.h"

struct tier {
	int stage;
	enum zn_offload_device off;
};

static const struct tier tiers[] = {
	{ 0, ZN_OFFLOAD_NONE }, { 1, ZN_OFFLOAD_NONE }, { 2, ZN_OFFLOAD_NONE },
	{ 3, ZN_OFFLOAD_NONE }, { 2, ZN_OFFLOAD_CPU },  { 3, ZN_OFFLOAD_CPU },
};

static void config(struct zn_config *c, const struct tier *t, enum zn_compute_dtype cd)
{
	et_config(c, t->stage, t->off, ET_B, 1);
	c->precision.bf16 = true;
	c->runtime.compute_dtype = cd;
	cr_assert_eq(zn_config_validate(c, 1), 0);
}

static bool same_bits(const struct et_run *a, const struct et_run *b)
{
	if (memcmp(a->loss, b->loss, sizeof(a->loss)))
		return false;
	for (int l = 0; l < a->layer_count; l++)
		if (memcmp(a->w[l], b->w[l], a->numel[l] * sizeof(float)))
			return false;
	return true;
}

Test(engine_bf16, tracks_fp32_compute_on_every_tier)
{
	struct zn_gpt2_config mc;

	et_model(&mc);
	for (size_t i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
		const struct tier *t = &tiers[i];
		int *tok = et_tokens(et_stream_len(ET_STEPS, 1, 1, ET_B), mc.vocab, 5);
		struct zn_config c;
		struct et_run a, b;
		double bound = 2.0 * 3e-3 * ET_STEPS, worst = 0;
		char what[64];

		snprintf(what, sizeof(what), "stage %d offload %s", t->stage,
			 t->off == ZN_OFFLOAD_CPU ? "cpu" : "none");
		config(&c, t, ZN_COMPUTE_FP32);
		cr_assert_eq(et_train(&a, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0, "%s", what);
		config(&c, t, ZN_COMPUTE_BF16);
		cr_assert_eq(et_train(&b, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0, "%s", what);
		for (int s = 0; s < ET_STEPS; s++)
			cr_assert(fabs((double)a.loss[s] - b.loss[s]) <= 1e-2 * fabs((double)a.loss[s]),
				  "%s: step %d loss %.7g (bf16) vs %.7g (fp32 compute)", what, s + 1,
				  b.loss[s], a.loss[s]);
		for (int l = 0; l < a.layer_count; l++)
			for (uint64_t j = 0; j < a.numel[l]; j++) {
				double d = fabs((double)a.w[l][j] - b.w[l][j]);

				cr_assert(isfinite(b.w[l][j]));
				if (d > worst)
					worst = d;
			}
		cr_assert(worst <= bound, "%s: weights differ by %g (bound %g)", what, worst, bound);
		cr_assert(!same_bits(&a, &b), "%s: bf16 compute ran the fp32 path", what);
		cr_assert(b.peak_bytes <= b.plan_bytes, "%s: peak %llu over the plan %llu", what,
			  (unsigned long long)b.peak_bytes, (unsigned long long)b.plan_bytes);
		et_run_free(&a);
		et_run_free(&b);
		free(tok);
	}
}

Test(engine_bf16, reruns_and_stages_bit_identical)
{
	struct zn_gpt2_config mc;
	const struct tier s0 = { 0, ZN_OFFLOAD_NONE }, s3 = { 3, ZN_OFFLOAD_NONE };
	struct zn_config c;
	struct et_run a, b, d, e;
	int *tok;

	et_model(&mc);
	tok = et_tokens(et_stream_len(ET_STEPS, 1, 1, ET_B), mc.vocab, 11);
	config(&c, &s0, ZN_COMPUTE_BF16);
	cr_assert_eq(et_train(&a, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	cr_assert_eq(et_train(&b, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	cr_assert(same_bits(&a, &b), "bf16 compute rerun differs");
	config(&c, &s0, ZN_COMPUTE_AUTO);
	cr_assert_eq(et_train(&d, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	cr_assert(same_bits(&a, &d), "compute_dtype auto is not bf16 with bf16 parameters");
	config(&c, &s3, ZN_COMPUTE_BF16);
	cr_assert_eq(et_train(&e, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	cr_assert(same_bits(&a, &e), "stage 3 differs from stage 0 under bf16 compute");
	et_run_free(&a), et_run_free(&b), et_run_free(&d), et_run_free(&e);
	free(tok);
}

Test(engine_bf16, lower_device_peak_than_fp32_working_copies)
{
	struct zn_gpt2_config mc;
	struct zn_config c;
	struct et_run a, b;
	int *tok;

	et_model(&mc);
	tok = et_tokens(et_stream_len(2, 1, 1, ET_B), mc.vocab, 3);
	for (int stage = 0; stage <= 3; stage += 3) {
		const struct tier t = { stage, ZN_OFFLOAD_NONE };

		config(&c, &t, ZN_COMPUTE_FP32);
		cr_assert_eq(et_train(&a, &c, ZN_COMM_SINGLE, tok, 2), 0);
		config(&c, &t, ZN_COMPUTE_BF16);
		cr_assert_eq(et_train(&b, &c, ZN_COMM_SINGLE, tok, 2), 0);
		cr_assert(b.plan_bytes < a.plan_bytes, "stage %d: plan %llu vs fp32 %llu", stage,
			  (unsigned long long)b.plan_bytes, (unsigned long long)a.plan_bytes);
		cr_assert(b.peak_bytes < a.peak_bytes, "stage %d: peak %llu vs fp32 %llu", stage,
			  (unsigned long long)b.peak_bytes, (unsigned long long)a.peak_bytes);
		cr_assert(b.peak_bytes <= b.plan_bytes);
		et_run_free(&a), et_run_free(&b);
	}
	free(tok);
}

Test(engine_bf16, bf16_compute_needs_bf16_parameters)
{
	struct zn_config c;

	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	c.runtime.compute_dtype = ZN_COMPUTE_BF16;
	cr_assert_neq(zn_config_validate(&c, 1), 0);
	c.precision.bf16 = true;
	cr_assert_eq(zn_config_validate(&c, 1), 0);
}
