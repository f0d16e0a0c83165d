/* LoRA on a mixture of experts' projections (docs/lora.md, "Experts"): one adapter per expert
 * and projection with PEFT's names, on the expert's rows of the fused stack; an expert that
 * gets no token keeps zero adapter gradients; a merge adds each expert's delta to its slice
 * of the stack and nothing else; PEFT's files read back bit for bit. The losses and weights
 * against a float64 PEFT-style reference are scripts/llama_check.py --lora (ctest
 * mixtral_lora_check, qwen3_moe_lora_check). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lora_check.h"
#include "model/llama/llama.h"
#include "model/lora/lora.h"
#include "model/safetensors.h"

#define R 2

/* a Mixtral of 1 block, hidden 16, 4 experts of intermediate 8, 2 per token */
static void tiny_mixtral(struct zn_llama_config *c)
{
	cr_assert_eq(zn_llama_config_from_preset("mixtral-8x7b", c), 0);
	c->layers = 1, c->hidden = 16, c->intermediate = 8, c->moe_intermediate = 8;
	c->heads = 2, c->kv_heads = 1, c->head_dim = 8, c->vocab = 32, c->seq = 8;
	c->experts = 4, c->experts_per_tok = 2;
	cr_assert_eq(zn_llama_config_validate(c), 0);
}

static void prepare(struct zn_lora_config *lc, const struct zn_llama_config *c,
		    const char *targets)
{
	memset(lc, 0, sizeof(*lc));
	lc->base = zn_llama_model(c);
	lc->r = R;
	lc->alpha = 3;
	cr_assert_eq(zn_lora_add_targets(lc, targets), 0);
	cr_assert_eq(zn_lora_prepare(lc), 0);
}

static uint64_t rng = 77;

static float uni(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (float)((double)(rng >> 11) * 0x1.0p-53 - 0.5);
}

Test(lora_moe, an_adapter_per_expert_and_projection_with_peft_names)
{
	struct zn_llama_config c;
	struct zn_lora_config lc;
	struct zn_layer_desc d;
	const struct zn_lora_layer *ly;

	tiny_mixtral(&c);
	prepare(&lc, &c, "w1,w2,w3,q_proj");
	ly = &lc.lay[1];
	cr_assert_eq(ly->count, 1 + 3 * 4, "q_proj and w1, w3, w2 of 4 experts");
	cr_assert_eq(zn_lora_describe(&lc, 1, &d), 0);
	cr_assert_eq(d.tensor_count, 2 * 13);
	cr_expect_str_eq(d.tensors[2].name,
			 "base_model.model.model.layers.0.block_sparse_moe.experts.0.w1.lora_A.weight");
	cr_expect_str_eq(d.tensors[5].name,
			 "base_model.model.model.layers.0.block_sparse_moe.experts.0.w3.lora_B.weight");
	/* the stacks' parts in order: each expert's w1 then w3 (gate_up_proj), then the w2s */
	cr_expect_str_eq(d.tensors[2 * 12].name,
			 "base_model.model.model.layers.0.block_sparse_moe.experts.3.w2.lora_A.weight");
	/* w1, w3: [r, H] and [I, r] on rows e 2I and e 2I + I of gate_up_proj; w2 [r, I], [H, r] */
	cr_expect(d.tensors[2].shape[0] == R && d.tensors[2].shape[1] == 16);
	cr_expect(d.tensors[5].shape[0] == 8 && d.tensors[5].shape[1] == R);
	cr_expect(d.tensors[2 * 12].shape[0] == R && d.tensors[2 * 12].shape[1] == 8);
	cr_expect(d.tensors[2 * 12 + 1].shape[0] == 16 && d.tensors[2 * 12 + 1].shape[1] == R);
	cr_expect_eq(ly->ad[2].base_row, 8, "expert 0's w3: the up rows of its gate_up slice");
	cr_expect_eq(ly->ad[3].base_row, 16, "expert 1's w1");
	cr_expect_eq(ly->ad[12].base_row, 3 * 16, "expert 3's w2: its [H, I] slice of down");
	zn_layer_desc_release(&d);
	zn_lora_release(&lc);
}

/* one token routed to 2 of 4 experts: the adapters of the other two get exactly zero
 * gradients, the chosen ones' do not */
Test(lora_moe, an_expert_without_a_token_keeps_zero_adapter_gradients)
{
	struct zn_llama_config c;
	struct zn_lora_config lc;
	struct zn_model m;
	struct lc_net net;
	int tok[1] = { 5 }, tgt[1] = { 9 }, used = 0;
	const struct zn_lora_layer *ly;

	tiny_mixtral(&c);
	prepare(&lc, &c, "w1,w2,w3");
	m = zn_lora_model(&lc);
	cr_assert_eq(lc_net_init(&net, &m, 3), 0);
	/* B random too, so that A's gradient is not zero for the chosen experts */
	for (uint64_t i = 0; i < net.ld[1].numel; i++)
		net.p[1][i] = uni();
	lc_net_run(&net, &m, tok, tgt, 1, 1, 3);
	ly = &lc.lay[1];
	for (int e = 0; e < 4; e++) {
		double s = 0;

		/* expert e's w1 and w3 (adapters 2e, 2e + 1), its w2 (8 + e) */
		for (int k = 0; k < 3; k++) {
			int i = k < 2 ? 2 * e + k : 8 + e;
			const struct zn_tensor_desc *A = &net.ld[1].tensors[ly->ad[i].a_tensor];
			const struct zn_tensor_desc *B = A + 1;

			for (uint64_t i = 0; i < A->numel; i++)
				s += fabs(net.g[1][A->offset + i]);
			for (uint64_t i = 0; i < B->numel; i++)
				s += fabs(net.g[1][B->offset + i]);
		}
		used += s > 0;
		cr_expect(s == 0 || s > 1e-6, "expert %d: %g", e, s);
	}
	cr_expect_eq(used, 2, "2 experts per token: %d got gradients", used);
	lc_net_free(&net);
	zn_lora_release(&lc);
}

/* W + scale B A on each expert's rows of the stacks, in float64, and nothing else changed */
Test(lora_moe, merge_adds_each_experts_delta_to_its_slice)
{
	struct zn_llama_config c;
	struct zn_lora_config lc;
	struct zn_layer_desc d;
	const struct zn_lora_layer *ly;
	float *base, *merged, *ad;
	uint64_t n;
	double scale;

	tiny_mixtral(&c);
	prepare(&lc, &c, "w1,w2");
	ly = &lc.lay[1];
	n = ly->base.numel;
	cr_assert_eq(zn_lora_describe(&lc, 1, &d), 0);
	base = malloc(n * sizeof(float));
	merged = malloc(n * sizeof(float));
	ad = malloc(d.numel * sizeof(float));
	for (uint64_t i = 0; i < n; i++)
		base[i] = uni();
	for (uint64_t i = 0; i < d.numel; i++)
		ad[i] = uni();
	memcpy(merged, base, n * sizeof(float));
	zn_lora_merge_layer(&lc, 1, ad, merged, ZN_DTYPE_F32);
	scale = zn_lora_scale64(&lc);
	{
		/* the expected: base, then each adapter's delta on its rows */
		float *want = malloc(n * sizeof(float));

		memcpy(want, base, n * sizeof(float));
		for (int i = 0; i < ly->count; i++) {
			const struct zn_lora_adapter *a = &ly->ad[i];
			const float *A = ad + d.tensors[a->a_tensor].offset;
			const float *B = ad + d.tensors[a->a_tensor + 1].offset;
			uint64_t w0 = ly->base.tensors[a->base_tensor].offset +
				      (uint64_t)a->base_row * (uint64_t)a->in;

			for (int64_t o = 0; o < a->out; o++)
				for (int64_t k = 0; k < a->in; k++) {
					double s = 0;

					for (int j = 0; j < R; j++)
						s += (double)B[o * R + j] * (double)A[j * a->in + k];
					want[w0 + (uint64_t)(o * a->in + k)] =
						(float)((double)base[w0 + (uint64_t)(o * a->in + k)] +
							scale * s);
				}
		}
		for (uint64_t i = 0; i < n; i++)
			cr_assert_eq(merged[i], want[i], "element %llu: %.9g, want %.9g",
				     (unsigned long long)i, merged[i], want[i]);
		free(want);
	}
	/* w3 (the up rows) was no target: those rows unchanged */
	{
		const struct zn_tensor_desc *gu = &ly->base.tensors[ly->ad[0].base_tensor];

		for (int e = 0; e < 4; e++)
			for (uint64_t i = 0; i < 8 * 16; i++) {
				uint64_t at = gu->offset + (uint64_t)(e * 16 + 8) * 16 + i;

				cr_assert_eq(merged[at], base[at], "expert %d up_proj changed", e);
			}
	}
	free(base), free(merged), free(ad);
	zn_layer_desc_release(&d);
	zn_lora_release(&lc);
}

/* PEFT's files: every expert's A and B under its name, read back bit for bit */
Test(lora_moe, save_then_load_bit_for_bit)
{
	struct zn_llama_config c;
	struct zn_lora_config lc;
	struct zn_st_file *f;
	char dir[] = "/tmp/zn_test_lora_moe_XXXXXX", cmd[64];
	float **ad;

	tiny_mixtral(&c);
	prepare(&lc, &c, "w1,w2,w3,gate");
	ad = calloc((size_t)lc.layers, sizeof(*ad));
	for (int l = 0; l < lc.layers; l++) {
		struct zn_layer_desc d;

		cr_assert_eq(zn_lora_describe(&lc, l, &d), 0);
		ad[l] = malloc((d.numel + 1) * sizeof(float));
		for (uint64_t i = 0; i < d.numel; i++)
			ad[l][i] = uni();
		zn_layer_desc_release(&d);
	}
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(zn_lora_save_peft(&lc, (const float *const *)ad, dir, NULL), 0);
	cr_assert_eq(zn_lora_peft_open(&lc, dir, &f), 0);
	cr_expect_not_null(zn_st_find(f, "base_model.model.model.layers.0.block_sparse_moe."
				      "experts.2.w2.lora_B.weight"));
	cr_expect_not_null(zn_st_find(f, "base_model.model.model.layers.0.block_sparse_moe.gate."
				      "lora_A.weight"));
	for (int l = 0; l < lc.layers; l++) {
		struct zn_layer_desc d;
		float *back;

		cr_assert_eq(zn_lora_describe(&lc, l, &d), 0);
		back = malloc((d.numel + 1) * sizeof(float));
		cr_assert_eq(zn_lora_peft_load_layer(f, &d, back), 0);
		cr_assert_eq(memcmp(back, ad[l], d.numel * sizeof(float)), 0, "layer %d", l);
		free(back);
		zn_layer_desc_release(&d);
		free(ad[l]);
	}
	free(ad);
	zn_st_close(f);
	zn_lora_release(&lc);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}
