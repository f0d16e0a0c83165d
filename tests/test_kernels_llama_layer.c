/* One Llama decoder layer composed from the CPU table's ops, against PyTorch float64
 * (tests/ref/llama_kernels_ref.h, from tests/ref/gen_llama_kernels.py): Hugging Face's
 * q_proj, k_proj, v_proj (and gate_proj, up_proj) weights stored one after the other are
 * the fused qkv (gate_up) matmul the kernels expect, with attention_bias (q, k, v and o),
 * an explicit head_dim (6, not hidden / heads = 4), GQA and llama3 RoPE frequencies.
 *
 *   h = rmsnorm(x); qkv = h @ [Wq; Wk; Wv]^T + [bq; bk; bv]; rope(q, k);
 *   x = x + gqa_attention(qkv) @ Wo^T + bo;
 *   h = rmsnorm(x); x = x + swiglu(h @ [Wg; Wu]^T) @ Wd^T
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_check.h"
#include "ref/llama_kernels_ref.h"
#include "rope.h"

/* a after b in one buffer: the layer's tensors back to back */
static float *stack(const float *a, size_t na, const float *b, size_t nb, const float *c,
		    size_t nc)
{
	float *p = malloc((na + nb + nc) * sizeof(float));

	cr_assert(p);
	memcpy(p, a, na * sizeof(float));
	memcpy(p + na, b, nb * sizeof(float));
	if (c)
		memcpy(p + na + nb, c, nc * sizeof(float));
	return p;
}

static float *zalloc(size_t n)
{
	float *p = calloc(n, sizeof(float));

	cr_assert(p);
	return p;
}

Test(kernels_llama_layer, decoder_layer_vs_torch)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	enum { B = DL_B, T = DL_T, H = DL_H, NH = DL_NH, KV = DL_KV, hd = DL_HD, IC = DL_I };
	enum { Q = NH * hd, KVD = KV * hd, S = Q + 2 * KVD };
	size_t n = (size_t)B * T * H, na = (size_t)B * NH * T * T;
	struct zn_rope_params rp = { .theta = 500000.0, .type = ZN_ROPE_LLAMA3, .factor = 8,
				     .low_freq_factor = 1, .high_freq_factor = 4,
				     .original_max_position_embeddings = 16 };
	float inv[hd / 2];
	float *wqkv = stack(dl_wq, (size_t)Q * H, dl_wk, (size_t)KVD * H, dl_wv, (size_t)KVD * H);
	float *bqkv = stack(dl_bq, Q, dl_bk, KVD, dl_bv, KVD);
	float *wgu = stack(dl_wg, (size_t)IC * H, dl_wu, (size_t)IC * H, NULL, 0);
	float *x = zalloc(n), *h = zalloc(n), *rstd = zalloc((size_t)B * T);
	float *qkv = zalloc((size_t)B * T * S), *att_out = zalloc((size_t)B * T * Q);
	float *pre = zalloc(na), *att = zalloc(na), *o = zalloc(n);
	float *gu = zalloc((size_t)B * T * 2 * IC), *m = zalloc((size_t)B * T * IC);

	cr_assert_eq(zn_rope_inv_freq(inv, hd, &rp), 0);
	memcpy(x, dl_x, n * sizeof(float));
	k->rmsnorm_forward(NULL, h, rstd, x, dl_ln1, DL_EPS, B, T, H);
	k->matmul_forward(NULL, qkv, h, wqkv, bqkv, B, T, H, S);
	k->rope_forward(NULL, qkv, inv, NULL, B, T, NH, KV, hd);
	k->gqa_attention_forward(NULL, att_out, pre, att, qkv, B, T, NH, KV, hd, 0);
	k->matmul_forward(NULL, o, att_out, dl_wo, dl_bo, B, T, Q, H);
	k->residual_forward(NULL, x, x, o, n);
	k->rmsnorm_forward(NULL, h, rstd, x, dl_ln2, DL_EPS, B, T, H);
	k->matmul_forward(NULL, gu, h, wgu, NULL, B, T, H, 2 * IC);
	k->swiglu_forward(NULL, m, gu, B, T, IC);
	k->matmul_forward(NULL, o, m, dl_wd, NULL, B, T, IC, H);
	k->residual_forward(NULL, x, x, o, n);
	/* sums of up to 24 products per matmul, through four of them: 1e-5 */
	cr_assert(kc_close("decoder layer vs torch", x, dl_out, n, 1e-5));
	free(wqkv), free(bqkv), free(wgu), free(x), free(h), free(rstd), free(qkv), free(att_out);
	free(pre), free(att), free(o), free(gu), free(m);
}
