/* The Llama family (src/model/llama) through the model interface: the whole tiny model's
 * gradient (GQA, untied, q/k/v/o biases) against central finite differences through the
 * layer functions, the engine at ZeRO stages 1/2/3 with and without CPU offload against
 * stage 0, the layout's Hugging Face names, and the refusals. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <errno.h>

#include "engine_common.h"
#include "model/family.h"
#include "model/llama/llama.h"

#define LT_STEPS 3

static struct zn_llama_config tiny(bool bias, bool tied)
{
	struct zn_llama_config c;

	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
	c.layers = 2, c.hidden = 16, c.intermediate = 24, c.heads = 4, c.kv_heads = 2;
	c.head_dim = 6, c.vocab = 32, c.seq = 16;
	c.qkv_bias = c.o_bias = bias;
	c.tied = tied;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	return c;
}

/* the whole model on the host: forward (and backward into grads) with the CPU table */
struct lhost {
	int n;
	struct zn_layer_desc *ld;
	float **p, **g, **acts, *scratch, **x, *dxa, *dxb, *losses;
	uint64_t scratch_n;
};

static void lhost_create(struct lhost *h, const struct zn_llama_config *c, int B, int T)
{
	uint64_t bth = (uint64_t)B * T * c->hidden;

	h->n = zn_llama_layer_count(c);
	h->ld = calloc(h->n, sizeof(*h->ld));
	cr_assert_eq(zn_llama_layers(c, h->ld), 0);
	h->p = calloc(h->n, sizeof(float *)), h->g = calloc(h->n, sizeof(float *));
	h->acts = calloc(h->n, sizeof(float *)), h->x = calloc(h->n, sizeof(float *));
	h->scratch_n = 0;
	for (int l = 0; l < h->n; l++) {
		uint64_t s = zn_llama_scratch_numel(c, &h->ld[l], B, T);

		h->p[l] = malloc(h->ld[l].numel * sizeof(float));
		zn_llama_init_range(c, &h->ld[l], 0, h->ld[l].numel, h->p[l], 7);
		/* std 0.08 instead of 0.02 (and norms, biases off 1, 0): gradients well above the
		 * finite differences' fp32 noise */
		for (uint64_t i = 0; i < h->ld[l].numel; i++)
			h->p[l][i] = h->p[l][i] * 4.0f + 0.02f * (float)((i * 37) % 11) - 0.1f;
		h->g[l] = calloc(h->ld[l].numel, sizeof(float));
		h->acts[l] = calloc(zn_llama_act_numel(c, &h->ld[l], B, T) + 1, sizeof(float));
		h->x[l] = calloc(bth, sizeof(float));
		if (s > h->scratch_n)
			h->scratch_n = s;
	}
	h->scratch = calloc(h->scratch_n, sizeof(float));
	h->dxa = calloc(bth, sizeof(float)), h->dxb = calloc(bth, sizeof(float));
	h->losses = calloc((size_t)B * T, sizeof(float));
}

static void lhost_destroy(struct lhost *h)
{
	for (int l = 0; l < h->n; l++)
		free(h->p[l]), free(h->g[l]), free(h->acts[l]), free(h->x[l]);
	free(h->p), free(h->g), free(h->acts), free(h->x), zn_layer_descs_free(h->ld, h->n), free(h->scratch);
	free(h->dxa), free(h->dxb), free(h->losses);
}

static double lhost_run(struct lhost *h, const struct zn_llama_config *c, const int *tok,
			const int *tgt, int B, int T, bool backward)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	double sum = 0;
	int n = h->n;

	for (int l = 0; l < n; l++) {
		struct zn_layer_io io = { .L = &h->ld[l], .params = h->p[l], .acts = h->acts[l],
					  .scratch = h->scratch, .B = B, .T = T, .tokens = tok,
					  .targets = tgt };

		io.tied_params = h->ld[l].tied_layer >= 0 ? h->p[0] : NULL;
		io.x_in = l ? h->x[l - 1] : NULL;
		io.x_out = l < n - 1 ? h->x[l] : NULL;
		io.losses = l == n - 1 ? h->losses : NULL;
		zn_llama_layer_forward(k, NULL, c, &io);
	}
	for (int i = 0; i < B * T; i++)
		sum += h->losses[i];
	for (int l = n - 1; backward && l >= 0; l--) {
		struct zn_layer_io io = { .L = &h->ld[l], .params = h->p[l], .grads = h->g[l],
					  .acts = h->acts[l], .scratch = h->scratch, .B = B,
					  .T = T, .tokens = tok, .targets = tgt,
					  .dloss_scale = 1.0f / (float)(B * T) };
		float *t;

		io.tied_params = h->ld[l].tied_layer >= 0 ? h->p[0] : NULL;
		io.tied_grads = h->ld[l].tied_layer >= 0 ? h->g[0] : NULL;
		io.x_in = l ? h->x[l - 1] : NULL;
		io.dx_out = l < n - 1 ? h->dxa : NULL;
		io.dx_in = l ? h->dxb : NULL;
		memset(h->scratch, 0, h->scratch_n * sizeof(float));
		zn_llama_layer_backward(k, NULL, c, &io);
		t = h->dxa, h->dxa = h->dxb, h->dxb = t;
	}
	return sum / (B * T);
}

static void check_gradient(bool bias, bool tied, int window)
{
	enum { B = 2, T = 5 };
	struct zn_llama_config c = tiny(bias, tied);
	struct lhost h;
	int *tok = et_tokens(B * T + 1, c.vocab, 3);
	const double eps = 3e-3;
	int checked = 0;

	c.window = window;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	lhost_create(&h, &c, B, T);
	lhost_run(&h, &c, tok, tok + 1, B, T, true);
	for (int l = 0; l < h.n; l++) {
		for (int t = 0; t < h.ld[l].tensor_count; t++) {
			const struct zn_tensor_desc *d = &h.ld[l].tensors[t];

			/* a few elements of every tensor, spread over it */
			for (uint64_t j = 0; j < 3; j++) {
				uint64_t i = d->offset + (j * 7919 + (uint64_t)t) % d->numel;
				float keep = h.p[l][i];
				double up, dn, fd, an = h.g[l][i];

				h.p[l][i] = keep + (float)eps;
				up = lhost_run(&h, &c, tok, tok + 1, B, T, false);
				h.p[l][i] = keep - (float)eps;
				dn = lhost_run(&h, &c, tok, tok + 1, B, T, false);
				h.p[l][i] = keep;
				fd = (up - dn) / (2 * eps);
				cr_expect(fabs(fd - an) <= 1e-4 + 1e-2 * fabs(fd),
					  "%s[%llu]: analytic %.7g vs finite difference %.7g",
					  d->name, (unsigned long long)(i - d->offset), an, fd);
				checked++;
			}
		}
	}
	cr_assert_gt(checked, 30);
	lhost_destroy(&h);
	free(tok);
}

Test(engine_llama, gradient_vs_finite_differences_gqa_untied)
{
	check_gradient(false, false, 0);
}

Test(engine_llama, gradient_vs_finite_differences_bias_tied)
{
	check_gradient(true, true, 0);
}

/* Mistral: sliding window 2 < T = 5 < seq 16 (refused before the fused attention) */
Test(engine_llama, gradient_vs_finite_differences_sliding_window)
{
	check_gradient(false, false, 2);
}

static void train(struct et_run *r, const struct zn_llama_config *mc, int stage,
		  enum zn_offload_device off, const int *tok)
{
	struct zn_model m = zn_llama_model(mc);
	struct zn_config c;

	et_config(&c, stage, off, ET_B, 1);
	cr_assert_eq(et_train_any(r, &c, &m, ZN_COMM_SINGLE, tok, LT_STEPS), 0);
	cr_assert_eq(r->layer_count, mc->layers + 2);
}

static void check_stage(int stage, enum zn_offload_device off)
{
	struct zn_llama_config mc = tiny(false, false);
	struct et_run ref, r;
	int *tok = et_tokens(et_stream_len(LT_STEPS, 1, 1, ET_B), mc.vocab, 11);
	char what[64];

	train(&ref, &mc, 0, ZN_OFFLOAD_NONE, tok);
	cr_assert(isfinite(ref.loss[0]) && ref.loss[LT_STEPS - 1] < ref.loss[0],
		  "stage 0 trains: %g then %g", ref.loss[0], ref.loss[LT_STEPS - 1]);
	train(&r, &mc, stage, off, tok);
	snprintf(what, sizeof(what), "llama stage %d offload %d", stage, (int)off);
	cr_assert_eq(et_compare(what, &ref, &r, 1e-5), 0, "%s differs from stage 0", what);
	et_run_free(&ref);
	et_run_free(&r);
	free(tok);
}

Test(engine_llama, stage1_equals_stage0) { check_stage(1, ZN_OFFLOAD_NONE); }
Test(engine_llama, stage1_offload_equals_stage0) { check_stage(1, ZN_OFFLOAD_CPU); }
Test(engine_llama, stage2_equals_stage0) { check_stage(2, ZN_OFFLOAD_NONE); }
Test(engine_llama, stage2_offload_equals_stage0) { check_stage(2, ZN_OFFLOAD_CPU); }
Test(engine_llama, stage3_equals_stage0) { check_stage(3, ZN_OFFLOAD_NONE); }
Test(engine_llama, stage3_offload_equals_stage0) { check_stage(3, ZN_OFFLOAD_CPU); }

/* Hugging Face names and shapes; q,k,v and gate,up back to back; tie to layer 0 */
Test(engine_llama, layout_names)
{
	struct zn_llama_config c = tiny(true, false);
	struct zn_layer_desc L[4];
	const struct zn_tensor_desc *t;

	cr_assert_eq(zn_llama_layers(&c, L), 0);
	cr_assert_str_eq(L[0].tensors[0].name, "model.embed_tokens.weight");
	t = L[2].tensors;
	cr_assert_eq(L[2].tensor_count, 13);
	cr_assert_str_eq(t[0].name, "model.layers.1.input_layernorm.weight");
	cr_assert_str_eq(t[1].name, "model.layers.1.self_attn.q_proj.weight");
	cr_assert_eq(t[1].shape[0], 24);
	cr_assert_eq(t[1].shape[1], 16);
	cr_assert_str_eq(t[2].name, "model.layers.1.self_attn.k_proj.weight");
	cr_assert_eq(t[2].offset, t[1].offset + t[1].numel);
	cr_assert_eq(t[3].offset, t[2].offset + t[2].numel);
	cr_assert_str_eq(t[4].name, "model.layers.1.self_attn.q_proj.bias");
	cr_assert_str_eq(t[7].name, "model.layers.1.self_attn.o_proj.weight");
	cr_assert_str_eq(t[8].name, "model.layers.1.self_attn.o_proj.bias");
	cr_assert_str_eq(t[9].name, "model.layers.1.post_attention_layernorm.weight");
	cr_assert_str_eq(t[10].name, "model.layers.1.mlp.gate_proj.weight");
	cr_assert_str_eq(t[11].name, "model.layers.1.mlp.up_proj.weight");
	cr_assert_eq(t[11].offset, t[10].offset + t[10].numel);
	cr_assert_str_eq(t[12].name, "model.layers.1.mlp.down_proj.weight");
	cr_assert_str_eq(L[3].tensors[0].name, "model.norm.weight");
	cr_assert_str_eq(L[3].tensors[1].name, "lm_head.weight");
	cr_assert_eq(L[3].tied_layer, -1);
	c.tied = true;
	for (int l = 0; l < 4; l++)
		zn_layer_desc_release(&L[l]);
	cr_assert_eq(zn_llama_layers(&c, L), 0);
	cr_assert_eq(L[3].tensor_count, 1);
	cr_assert_eq(L[3].tied_layer, 0);
	for (int l = 0; l < 4; l++)
		zn_layer_desc_release(&L[l]);
}

/* From config.json: Qwen2 has q,k,v biases only; a Mistral seq beyond its window accepted
 * (the fused attention's sliding window; the default seq stops at the window) */
Test(engine_llama, from_hf_qwen2_and_mistral_window, .init = cr_redirect_stderr)
{
	struct zn_hf_config hf = { .hidden_size = 16,
				   .intermediate_size = 24, .num_hidden_layers = 1,
				   .num_attention_heads = 4, .num_key_value_heads = 2,
				   .head_dim = 4, .vocab_size = 32,
				   .max_position_embeddings = 64, .norm_eps = 1e-6,
				   .rope_theta = 1e6, .tie_word_embeddings = true };
	struct zn_llama_config c;
	struct zn_layer_desc L[3];

	hf.family = zn_family_of_model_type("qwen2", &hf.type);
	cr_assert_eq(zn_llama_config_from_hf(&hf, &c), 0);
	cr_assert(c.qkv_bias && !c.o_bias && c.tied);
	cr_assert_eq(zn_llama_layers(&c, L), 0);
	cr_assert_eq(L[1].tensor_count, 12);
	for (int l = 0; l < 3; l++)
		zn_layer_desc_release(&L[l]);
	hf.family = zn_family_of_model_type("mistral", &hf.type);
	hf.sliding_window = 32;
	/* the default training length stops at the window; a longer one trains */
	cr_assert_eq(zn_llama_config_from_hf(&hf, &c), 0);
	cr_assert_eq(c.seq, 32);
	c.seq = 33;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	hf.sliding_window = 64;
	cr_assert_eq(zn_llama_config_from_hf(&hf, &c), 0);
	cr_assert(!c.qkv_bias && !c.o_bias && c.window == 64);
	hf.family = zn_family_of_model_type("gpt2", &hf.type);
	cr_assert_eq(zn_llama_config_from_hf(&hf, &c), -EINVAL);
}

/* the engine refuses a configuration whose inv_freq was never filled */
Test(engine_llama, unvalidated_config_refused, .init = cr_redirect_stderr)
{
	struct zn_llama_config mc = tiny(false, false);
	struct zn_model m = zn_llama_model(&mc);
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_config c;
	struct zn_engine *e = NULL;

	memset(mc.inv_freq, 0, sizeof(mc.inv_freq));
	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	cr_assert_eq(zn_engine_create(&e, &c, &m, &o), -EINVAL);
	cr_assert_null(e);
}
