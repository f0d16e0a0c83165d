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

/* the device peak within the plan, and off micro-batch order's by exactly what the plans
 * differ by (the engine allocates what the plan lists) */
static void within_plan(const struct et_run *ref, const struct et_run *r,
			const struct rc_case *k)
{
	cr_assert_leq(r->peak_bytes, r->plan_bytes, "%s stage %d gas %d home %d: peak %llu over "
		      "the plan %llu", k->llama ? "llama" : "gpt2", k->stage, k->gas,
		      (int)k->home, (unsigned long long)r->peak_bytes,
		      (unsigned long long)r->plan_bytes);
	cr_assert_eq(r->peak_bytes - ref->peak_bytes, r->plan_bytes - ref->plan_bytes,
		     "%s stage %d gas %d home %d: the peak moved by %lld, the plan by %lld",
		     k->llama ? "llama" : "gpt2", k->stage, k->gas, (int)k->home,
		     (long long)(r->peak_bytes - ref->peak_bytes),
		     (long long)(r->plan_bytes - ref->plan_bytes));
}

/* micro-batch order, then layer-major (boundaries on the device, then in pinned host
 * memory): the same bits, the peak within the plan */
static void same_bits(struct rc_case k)
{
	int *tok = et_tokens(et_stream_len(RC_STEPS, k.gas, 1, ET_B), 32, 11);
	struct et_run ref, got;

	rc_train(&ref, &k, tok);
	k.layer_major = true;
	rc_train(&got, &k, tok);
	rc_assert_same(&ref, &got, &k);
	within_plan(&ref, &got, &k);
	et_run_free(&got);
	k.every = 1;
	k.home = ZN_OFFLOAD_CPU;
	rc_train(&got, &k, tok);
	rc_assert_same(&ref, &got, &k);
	within_plan(&ref, &got, &k);
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

/* A run of RC_STEPS steps on packed rows (documents of 1 .. 6 tokens: positions restart,
 * the token before a boundary predicts nothing; without zinc.packing documents the same
 * rows with those targets masked and no positions), each step followed by an eval of the
 * same rows, on model m: the losses, eval losses and weights. */
struct packed_run {
	struct et_run r;
	float eval[RC_STEPS];
};

static void train_packed(struct packed_run *x, const struct zn_config *c, const struct zn_model *m)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	int gas = (int)c->gradient_accumulation_steps, n = gas * ET_B * ET_T;
	int *tok = et_tokens((uint64_t)n * RC_STEPS + 1, 32, 19);
	int *tgt = malloc((size_t)n * sizeof(int)), *pos = malloc((size_t)n * sizeof(int));
	bool packed = c->runtime.packing == ZN_PACKING_DOCUMENTS;
	struct zn_engine *e;

	memset(x, 0, sizeof(*x));
	cr_assert_eq(zn_engine_create(&e, c, m, &o), 0);
	for (int s = 0; s < RC_STEPS; s++) {
		const int *in = tok + (size_t)s * n;
		struct zn_step_stats st;
		int p = 0, len = 1 + (s % 3);

		for (int i = 0; i < n; i++) {
			/* a row starts a document; documents of len .. 6 tokens */
			if (i % ET_T == 0 || p == len) {
				p = 0;
				len = 1 + (len + 2) % 6;
			}
			pos[i] = p++;
			/* the last token of a document predicts nothing */
			tgt[i] = p == len || (i + 1) % ET_T == 0 ? ZN_IGNORE_INDEX : in[i + 1];
		}
		cr_assert_eq(zn_engine_step_pos(e, in, tgt, packed ? pos : NULL, &st), 0);
		x->r.loss[s] = st.loss;
		cr_assert_eq(zn_engine_eval_pos(e, in, tgt, packed ? pos : NULL, &x->eval[s]), 0);
	}
	x->r.steps = RC_STEPS;
	x->r.layer_count = zn_engine_layer_count(e);
	x->r.w = calloc((size_t)x->r.layer_count, sizeof(*x->r.w));
	x->r.numel = calloc((size_t)x->r.layer_count, sizeof(*x->r.numel));
	for (int l = 0; l < x->r.layer_count; l++) {
		x->r.numel[l] = zn_engine_layer_numel(e, l);
		x->r.w[l] = malloc(x->r.numel[l] * sizeof(float));
		cr_assert_eq(zn_engine_read_layer(e, l, x->r.w[l]), 0);
	}
	zn_engine_destroy(e);
	free(tok);
	free(tgt);
	free(pos);
}

/* micro-batch order and layer-major on packed rows, model m: the same bits, eval too */
static void packed_same(struct rc_case k, const struct zn_model *m, bool packing)
{
	struct packed_run a, b;
	struct zn_config c;

	rc_config(&c, &k);
	c.runtime.packing = packing ? ZN_PACKING_DOCUMENTS : ZN_PACKING_WINDOWS;
	train_packed(&a, &c, m);
	k.layer_major = true;
	rc_config(&c, &k);
	c.runtime.packing = packing ? ZN_PACKING_DOCUMENTS : ZN_PACKING_WINDOWS;
	train_packed(&b, &c, m);
	rc_assert_same(&a.r, &b.r, &k);
	cr_assert_eq(memcmp(a.eval, b.eval, sizeof(a.eval)), 0, "eval losses differ (%.9g vs "
		     "%.9g)", a.eval[0], b.eval[0]);
	et_run_free(&a.r);
	et_run_free(&b.r);
}

Test(engine_schedule, packed_documents_and_eval)
{
	struct zn_gpt2_config g = rc_gpt2();
	struct zn_llama_config l = rc_llama(0);
	struct zn_model gm = zn_gpt2_model(&g), lm = zn_llama_model(&l);

	packed_same(case_of(GPT2, 3, ZN_OFFLOAD_CPU, 4), &gm, true);
	packed_same(case_of(LLAMA, 1, ZN_OFFLOAD_NONE, 2), &lm, true);
}

/* LoRA over GPT-2 and Llama (the frozen base acquired once per layer and direction, in
 * host memory with the parameters offloaded), with dropout (the micro-batch's stream) */
Test(engine_schedule, lora)
{
	for (int i = 0; i < 2; i++) {
		struct zn_gpt2_config g = rc_gpt2();
		struct zn_llama_config l = rc_llama(0);
		struct zn_lora_config lc = { .r = 4, .alpha = 8, .dropout = 0.1f };
		struct zn_model m;

		lc.base = i ? zn_llama_model(&l) : zn_gpt2_model(&g);
		cr_assert_eq(zn_lora_add_targets(&lc, i ? "q_proj,v_proj" : "c_attn,c_fc"), 0);
		cr_assert_eq(zn_lora_prepare(&lc), 0);
		m = zn_lora_model(&lc);
		packed_same(case_of(i ? LLAMA : GPT2, 3, ZN_OFFLOAD_CPU, 4), &m, false);
		packed_same(case_of(i ? LLAMA : GPT2, 1, ZN_OFFLOAD_NONE, 2), &m, false);
		zn_lora_release(&lc);
	}
}

Test(engine_schedule, fp16)
{
	struct rc_case k = case_of(GPT2, 2, ZN_OFFLOAD_CPU, 4);
	struct zn_gpt2_config g = rc_gpt2();
	struct zn_model m = zn_gpt2_model(&g);
	int *tok = et_tokens(et_stream_len(RC_STEPS, k.gas, 1, ET_B), 32, 11);
	struct et_run a, b;
	struct zn_config c;

	for (int i = 0; i < 2; i++) {
		k.layer_major = i;
		rc_config(&c, &k);
		c.precision.fp16 = true;
		cr_assert_eq(zn_config_validate(&c, 1), 0);
		cr_assert_eq(et_train_any(i ? &b : &a, &c, &m, ZN_COMM_SINGLE, tok, RC_STEPS), 0);
	}
	rc_assert_same(&a, &b, &k);
	et_run_free(&a);
	et_run_free(&b);
	free(tok);
}
