/* --packing documents with bf16 compute (docs/packing.md "Compute dtype").
 *
 * The bf16 layers (gpt2_layer_bf16.c, llama_layer_bf16.c) read the stored bf16 parameters
 * and take the packed rows' positions: GPT-2's wpe[pos] (encoder_pos_forward_bf16) and
 * Llama's RoPE positions, attention inside each document (flash_attention_doc). Checked on
 * the CPU table, GPT-2 and Llama (GQA, biases):
 *
 * - packed rows (documents of 1 to 24 tokens, padding, a full row) give the summed loss
 *   and per-layer gradients of each document run alone through the same bf16 layers, to
 *   1e-5 as the fp32 test (not bit for bit: the GEMMs see other row counts and the
 *   weight gradients sum in another order; measured 4e-9 and 2e-7); the same rows
 *   without positions do not (attention crosses documents);
 * - packed bf16 tracks packed fp32 on the same bf16-rounded parameters (loss 1e-2
 *   relative), so the bf16 path is the one measured;
 * - encoder_pos_forward_bf16: NULL positions are encoder_forward_bf16 bit for bit, and
 *   explicit positions are the fp32 encoder_pos_forward on the tables cast to fp32;
 * - the engine with bf16 parameters, --compute-dtype bf16 and --packing documents (once
 *   refused) runs, and its loss is the bf16 layers' loss sum over the predicted count.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "engine_common.h"
#include "kernels.h"
#include "kernels_check.h"
#include "model/gpt2/gpt2.h"
#include "model/llama/llama.h"
#include "model/model.h"
#include "pack_docs.h"
#include "pack_net.h"

/* ---- packed rows vs each document on its own, bf16 compute ---------------------------- */

static void check_packed_bf16(const struct zn_model *m, int vocab)
{
	struct net net;
	struct pack_rows rw;

	net_init(&net, m, 7);
	net.bf16 = true;
	double packed = check_packed(&net, m, vocab, 1e-3, &rw);

	/* and the fp32 layers on the same bf16 parameters agree to bf16 rounding */
	net.bf16 = false;
	net_zero_grads(&net);
	double f32 = net_run(&net, m, rw.tok, rw.tgt, rw.pos, NROW, T_ROW);

	cr_assert(fabs(f32 - packed) <= 1e-2 * fabs(f32), "%s: bf16 packed %.9g, fp32 %.9g",
		  m->ops->family, packed, f32);
	cr_assert(fabs(f32 - packed) > 0, "%s: bf16 compute gave the fp32 bits", m->ops->family);
	net_free(&net);
}

static struct zn_gpt2_config gpt2_cfg(void)
{
	struct zn_gpt2_config mc = { .layers = 2, .heads = 4, .d_model = 32, .seq = T_ROW,
				     .vocab = 96, .padded_vocab = 0 };

	cr_assert_eq(zn_gpt2_config_validate(&mc), 0);
	return mc;
}

Test(pack_bf16, gpt2_packed_equals_documents_alone)
{
	struct zn_gpt2_config mc = gpt2_cfg();
	struct zn_model m = zn_gpt2_model(&mc);

	check_packed_bf16(&m, mc.vocab);
}

Test(pack_bf16, llama_packed_equals_documents_alone)
{
	struct zn_llama_config c;

	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
	c.layers = 2, c.hidden = 16, c.intermediate = 24, c.heads = 4, c.kv_heads = 2;
	c.head_dim = 6, c.vocab = 32, c.seq = T_ROW;
	c.qkv_bias = c.o_bias = true;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	struct zn_model m = zn_llama_model(&c);

	check_packed_bf16(&m, c.vocab);
}

/* ---- the kernel ------------------------------------------------------------------------ */

Test(pack_bf16, encoder_pos_forward_bf16)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	enum { B = 2, T = 7, C = 5, V = 11 };
	uint16_t wte[V * C], wpe[T * C];
	float wte32[V * C], wpe32[T * C], a[B * T * C], b[B * T * C];
	int tok[B * T], pos[B * T];

	for (int i = 0; i < V * C; i++) {
		wte[i] = zn_f32_to_bf16(sinf(0.37f * (float)i) * 0.3f);
		wte32[i] = zn_bf16_to_f32(wte[i]);
	}
	for (int i = 0; i < T * C; i++) {
		wpe[i] = zn_f32_to_bf16(cosf(0.21f * (float)i) * 0.1f);
		wpe32[i] = zn_bf16_to_f32(wpe[i]);
	}
	for (int i = 0; i < B * T; i++)
		tok[i] = (i * 5 + 3) % V, pos[i] = i % 3; /* documents of 3 */
	k->encoder_pos_forward_bf16(NULL, a, tok, NULL, wte, wpe, B, T, C);
	k->encoder_forward_bf16(NULL, b, tok, wte, wpe, B, T, C);
	cr_assert(!memcmp(a, b, sizeof(a)), "NULL positions differ from encoder_forward_bf16");
	k->encoder_pos_forward_bf16(NULL, a, tok, pos, wte, wpe, B, T, C);
	k->encoder_pos_forward(NULL, b, tok, pos, wte32, wpe32, B, T, C);
	cr_assert(!memcmp(a, b, sizeof(a)), "positions differ from the fp32 op on cast tables");
}

/* ---- the engine: bf16 compute with packed documents ------------------------------------- */

Test(pack_bf16, engine_runs_bf16_compute_with_documents)
{
	struct zn_gpt2_config mc;
	struct zn_config cfg;
	struct zn_engine *e;
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_step_stats st;
	enum { B = 2 };
	int tok[B * ET_T], tgt[B * ET_T], pos[B * ET_T], count = 0;
	int *r = et_tokens(B * ET_T + 1, 96, 5);
	struct net net;

	et_model(&mc);
	et_config(&cfg, 0, ZN_OFFLOAD_NONE, B, 1);
	cfg.precision.bf16 = true;
	cfg.runtime.compute_dtype = ZN_COMPUTE_BF16;
	cfg.runtime.packing = ZN_PACKING_DOCUMENTS;
	cr_assert_eq(zn_config_validate(&cfg, 1), 0);
	/* row 0: documents of 3 and the rest; row 1: one document */
	for (int i = 0; i < B * ET_T; i++) {
		int t = i % ET_T;

		tok[i] = r[i];
		pos[i] = i < ET_T && t >= 3 ? t - 3 : t;
		tgt[i] = (i < ET_T && t == 2) || t == ET_T - 1 ? ZN_TARGET_IGNORE : r[i + 1];
		count += tgt[i] >= 0;
	}
	struct zn_model m = zn_gpt2_model(&mc);

	cr_assert_eq(zn_engine_create(&e, &cfg, &m, &o), 0);
	cr_assert_eq(zn_engine_step_pos(e, tok, tgt, pos, &st), 0);
	zn_engine_destroy(e);
	net_init(&net, &m, cfg.runtime.seed);
	net.bf16 = true;
	double want = net_run(&net, &m, tok, tgt, pos, B, ET_T) / count;

	cr_assert(fabs(st.loss - want) <= 1e-5 * want, "engine loss %.9g, want %.9g (%d predicted)",
		  st.loss, want, count);
	net_free(&net);
	free(r);
}
