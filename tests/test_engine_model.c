/* The engine through the model interface alone: a second family (tests/toy_model.h,
 * untied, 100 layers of width 4) trains against a naive host loop and at every stage. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <unistd.h>

#include "engine_common.h"
#include "toy_model.h"

#define TOY_STEPS 3

static const struct toy_config toy100 = { .blocks = 100, .width = 4, .vocab = 16, .seq = 8,
					  .tie_to = -1 };

static int *toy_stream(void)
{
	return et_tokens(et_stream_len(TOY_STEPS, 1, 1, ET_B), toy100.vocab, 11);
}

static void train_toy(struct et_run *r, int stage, enum zn_offload_device off, bool bf16,
		      const int *tok)
{
	struct zn_model m = { &toy_ops, &toy100 };
	struct zn_config c;

	et_config(&c, stage, off, ET_B, 1);
	c.precision.bf16 = bf16;
	atomic_store(&toy_saw_tied, 0);
	cr_assert_eq(et_train_any(r, &c, &m, ZN_COMM_SINGLE, tok, TOY_STEPS), 0);
	cr_assert_eq(r->layer_count, 102);
	cr_assert_eq(atomic_load(&toy_saw_tied), 0, "an untied layer got tied parameters");
}

/* stage 0 against the naive loop: same layer functions, zinc's AdamW per tensor */
Test(engine_model, toy_100_layers_matches_naive_loop)
{
	struct zn_config c;
	struct toy_host h;
	struct et_run r, ref = { 0 };
	int *tok = toy_stream();
	uint64_t bt = (uint64_t)ET_B * ET_T;

	train_toy(&r, 0, ZN_OFFLOAD_NONE, false, tok);
	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	toy_host_create(&h, &toy100, c.runtime.seed);
	ref.steps = TOY_STEPS;
	for (int s = 0; s < TOY_STEPS; s++)
		ref.loss[s] = toy_host_step(&h, &c.optimizer, s + 1, tok + s * bt,
					    tok + s * bt + 1, ET_B, ET_T);
	ref.layer_count = h.n;
	ref.w = h.p;
	ref.numel = calloc(h.n, sizeof(uint64_t));
	for (int l = 0; l < h.n; l++)
		ref.numel[l] = h.ld[l].numel;
	cr_assert(isfinite(ref.loss[0]) && ref.loss[1] != ref.loss[0], "the naive loop trains");
	cr_assert_eq(et_compare("toy stage 0 vs naive", &ref, &r, 1e-5), 0);
	free(ref.numel);
	toy_host_destroy(&h);
	et_run_free(&r);
	free(tok);
}

static void check_stage(int stage, enum zn_offload_device off, bool bf16)
{
	struct et_run ref, r;
	int *tok = toy_stream();
	char what[64];

	train_toy(&ref, 0, ZN_OFFLOAD_NONE, bf16, tok);
	train_toy(&r, stage, off, bf16, tok);
	snprintf(what, sizeof(what), "toy stage %d offload %d%s", stage, (int)off,
		 bf16 ? " bf16" : "");
	cr_assert_eq(et_compare(what, &ref, &r, 1e-5), 0, "%s differs from stage 0", what);
	et_run_free(&ref);
	et_run_free(&r);
	free(tok);
}

Test(engine_model, toy_stage1_equals_stage0) { check_stage(1, ZN_OFFLOAD_NONE, false); }
Test(engine_model, toy_stage2_offload_equals_stage0) { check_stage(2, ZN_OFFLOAD_CPU, false); }
Test(engine_model, toy_stage3_equals_stage0) { check_stage(3, ZN_OFFLOAD_NONE, false); }
Test(engine_model, toy_stage3_offload_equals_stage0) { check_stage(3, ZN_OFFLOAD_CPU, false); }
Test(engine_model, toy_bf16_stage3_offload_equals_stage0) { check_stage(3, ZN_OFFLOAD_CPU, true); }

/* The engine reads tied_layer: a tie to a layer other than 0 is refused by name. */
Test(engine_model, tie_to_a_layer_other_than_0_refused, .init = cr_redirect_stderr)
{
	struct toy_config t = toy100;
	struct zn_model m = { &toy_ops, &t };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_config c;
	struct zn_engine *e = NULL;

	t.tie_to = 1;
	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	cr_assert_eq(zn_engine_create(&e, &c, &m, &o), -EINVAL);
	cr_assert_null(e);
}

/* A model table missing a required op is refused before anything is allocated. */
Test(engine_model, missing_op_refused, .init = cr_redirect_stderr)
{
	struct zn_model_ops ops = toy_ops;
	struct zn_model m = { &ops, &toy100 };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_config c;
	struct zn_engine *e = NULL;

	ops.backward = NULL;
	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	cr_assert_eq(zn_engine_create(&e, &c, &m, &o), -EINVAL);
	cr_assert_null(e);
}

/* GPT-2's optional ops: what zn_engine_save writes, load_layer reads back layer by layer. */
Test(engine_model, gpt2_save_then_load_layer_round_trip)
{
	struct zn_gpt2_config mc;
	struct zn_model m;
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_config c;
	struct zn_engine *e = NULL;
	char path[] = "/tmp/zn_engine_model_XXXXXX";
	int fd = mkstemp(path);

	cr_assert(fd >= 0);
	close(fd);
	et_model(&mc);
	m = zn_gpt2_model(&mc);
	cr_assert_not_null(m.ops->load_layer);
	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	cr_assert_eq(zn_engine_create(&e, &c, &m, &o), 0);
	cr_assert_eq(zn_engine_save(e, path, ZN_DTYPE_F32), 0);
	for (int l = 0; l < zn_engine_layer_count(e); l++) {
		uint64_t n = zn_engine_layer_numel(e, l);
		float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
		struct zn_layer_desc L;

		cr_assert_eq(m.ops->describe(m.config, l, &L), 0);
		cr_assert_eq(zn_engine_read_layer(e, l, a), 0);
		cr_assert_eq(m.ops->load_layer(m.config, &L, path, b), 0, "layer %d", l);
		cr_assert_eq(memcmp(a, b, n * sizeof(float)), 0, "layer %d differs", l);
		free(a);
		free(b);
		zn_layer_desc_release(&L);
	}
	zn_engine_destroy(e);
	unlink(path);
}
