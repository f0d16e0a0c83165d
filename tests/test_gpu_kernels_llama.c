/* kernels/cuda's Llama-family ops against kernels/cpu (the reference, itself checked
 * against finite differences and PyTorch float64 in test_kernels_llama.c): embedding,
 * RMSNorm, Qwen3's per-head q/k RMSNorm, RoPE (positions t and explicit, llama3
 * frequencies), SwiGLU, grouped-query attention (GQA, MHA, MQA, a head_dim that is not
 * C / NH, a sliding window shorter than T).
 * Same inputs on both sides; gradient buffers start from the same random values
 * (accumulate semantics); written outputs and scratch start as garbage on the device;
 * guard bytes after every device buffer; a non-default stream; the backward ops are
 * bit-identical run to run. Skips, with the reason, without CUDA or a usable GPU.
 *
 * Tolerances (kc_close rtol): the embedding exact; elementwise ops 1e-5 (CUDA's expf,
 * sinf, cosf are within 2 ulp of glibc's); reductions and GEMMs 1e-4.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "gpu_buf.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"
#include "rope.h"

#define RTOL_EXACT 1e-6
#define RTOL_ELEM 1e-5
#define RTOL_RED 1e-4

struct lshape {
	int B, T, C, NH, KV, hd, IC, V, window;
};

static const struct lshape shapes[] = {
	{ 2, 64, 256, 8, 2, 32, 512, 1000, 0 },  /* GQA, round sizes */
	{ 3, 37, 72, 6, 3, 24, 200, 101, 16 },   /* odd sizes, hd*NH != C, window < T */
	{ 1, 45, 96, 4, 1, 40, 160, 77, 0 },     /* MQA */
	{ 2, 33, 64, 4, 4, 16, 96, 50, 0 },      /* MHA */
};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

static void same(const char *op, const char *what, const struct lshape *s, const float *d,
		 const float *cpu_h, size_t n, double rtol)
{
	float *g = malloc((n ? n : 1) * sizeof(float));
	double *ref = malloc((n ? n : 1) * sizeof(double));
	char name[200];

	cr_assert(g && ref);
	snprintf(name, sizeof(name), "%s %s (B %d T %d C %d NH %d KV %d hd %d IC %d window %d)",
		 op, what, s->B, s->T, s->C, s->NH, s->KV, s->hd, s->IC, s->window);
	down(g, d, n * sizeof(float), name);
	for (size_t i = 0; i < n; i++)
		ref[i] = cpu_h[i];
	cr_assert(kc_close(name, g, ref, n, rtol));
	free(g);
	free(ref);
}

/* the device buffer's bytes now must equal `before` (a second run of the same op) */
static void same_bits(const char *what, const void *d, const void *before, size_t bytes)
{
	void *g = malloc(bytes ? bytes : 1);

	cr_assert(g);
	down(g, d, bytes, what);
	cr_assert(!memcmp(g, before, bytes), "%s: not bit-identical run to run", what);
	free(g);
}

Test(kernels_gpu_llama, table_has_llama_ops)
{
	const struct zn_kernel_table *k = zn_kernels_cuda_table();

	if (!k)
		cr_skip_test("no CUDA GPU: zinc was built without CUDA");
	cr_assert(k->embedding_forward && k->embedding_backward && k->rmsnorm_forward &&
		  k->rmsnorm_backward && k->rope_forward && k->rope_backward &&
		  k->swiglu_forward && k->swiglu_backward && k->gqa_attention_forward &&
		  k->gqa_attention_backward && k->qk_rmsnorm_forward && k->qk_rmsnorm_backward);
}

/* Qwen3's q_norm / k_norm: every q and k head of qkv [B, T, S] */
Test(kernels_gpu_llama, qk_rmsnorm)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < NSHAPES; k++) {
		const struct lshape *s = &shapes[k];
		struct kc_rng r = { 251 + k };
		int B = s->B, T = s->T, NH = s->NH, KV = s->KV, hd = s->hd;
		size_t n = (size_t)B * T * (NH + 2 * KV) * hd, nr = (size_t)B * T * (NH + KV);
		float *x = frand(&r, n, -3, 3), *wq = frand(&r, hd, 0.5f, 1.5f);
		float *wk = frand(&r, hd, 0.5f, 1.5f), *dout = frand(&r, n, -1, 1);
		float *dwq = frand(&r, hd, -1, 1), *dwk = frand(&r, hd, -1, 1);
		float *out = malloc(n * 4), *rstd = malloc(nr * 4);
		float *x_d = up(x, n * 4), *wq_d = up(wq, hd * 4), *wk_d = up(wk, hd * 4);
		float *d_d = up(dout, n * 4), *dwq_d = up(dwq, hd * 4), *dwk_d = up(dwk, hd * 4);
		float *out_d = up(NULL, n * 4), *rstd_d = up(NULL, nr * 4);

		gpu->qk_rmsnorm_forward(st, out_d, rstd_d, x_d, wq_d, wk_d, 1e-6f, B, T, NH, KV,
					hd);
		cpu->qk_rmsnorm_forward(NULL, out, rstd, x, wq, wk, 1e-6f, B, T, NH, KV, hd);
		same("qk_rmsnorm_forward", "out", s, out_d, out, n, RTOL_ELEM);
		same("qk_rmsnorm_forward", "rstd", s, rstd_d, rstd, nr, RTOL_ELEM);
		float *r2_d = up(rstd, nr * 4); /* the CPU's rstd: compare only the backward */

		gpu->qk_rmsnorm_backward(st, d_d, dwq_d, dwk_d, x_d, wq_d, wk_d, r2_d, B, T, NH, KV,
					 hd);
		cpu->qk_rmsnorm_backward(NULL, dout, dwq, dwk, x, wq, wk, rstd, B, T, NH, KV, hd);
		same("qk_rmsnorm_backward", "dqkv", s, d_d, dout, n, RTOL_RED);
		same("qk_rmsnorm_backward", "dwq", s, dwq_d, dwq, hd, RTOL_RED);
		same("qk_rmsnorm_backward", "dwk", s, dwk_d, dwk, hd, RTOL_RED);
		free(x), free(wq), free(wk), free(dout), free(dwq), free(dwk), free(out),
		     free(rstd);
		gt_free(x_d), gt_free(wq_d), gt_free(wk_d), gt_free(d_d), gt_free(dwq_d);
		gt_free(dwk_d), gt_free(out_d), gt_free(rstd_d), gt_free(r2_d);
	}
	close_gpu(st);
}

Test(kernels_gpu_llama, embedding)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < NSHAPES; k++) {
		const struct lshape *s = &shapes[k];
		struct kc_rng r = { 101 + k };
		size_t BT = (size_t)s->B * s->T, n = BT * s->C, nw = (size_t)s->V * s->C;
		int *tok = malloc(BT * sizeof(int));

		cr_assert(tok);
		kc_fill_int(&r, tok, BT, s->V / 8 + 1); /* few distinct tokens: repeats */
		float *wte = frand(&r, nw, -1, 1), *dout = frand(&r, n, -1, 1);
		float *dw = frand(&r, nw, -1, 1), *out = malloc(n * 4);
		int *tok_d = up(tok, BT * sizeof(int));
		float *wte_d = up(wte, nw * 4), *out_d = up(NULL, n * 4), *dout_d = up(dout, n * 4);
		float *dw_d = up(dw, nw * 4);

		gpu->embedding_forward(st, out_d, tok_d, wte_d, s->B, s->T, s->C);
		cpu->embedding_forward(NULL, out, tok, wte, s->B, s->T, s->C);
		same("embedding_forward", "out", s, out_d, out, n, RTOL_EXACT);
		gpu->embedding_backward(st, dw_d, dout_d, tok_d, s->B, s->T, s->C);
		cpu->embedding_backward(NULL, dw, dout, tok, s->B, s->T, s->C);
		same("embedding_backward", "dwte", s, dw_d, dw, nw, RTOL_EXACT);
		free(tok), free(wte), free(dout), free(dw), free(out);
		gt_free(tok_d), gt_free(wte_d), gt_free(out_d), gt_free(dout_d), gt_free(dw_d);
	}
	close_gpu(st);
}

Test(kernels_gpu_llama, rmsnorm)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < NSHAPES; k++) {
		const struct lshape *s = &shapes[k];
		struct kc_rng r = { 201 + k };
		int B = s->B, T = s->T, C = s->C;
		size_t n = (size_t)B * T * C, BT = (size_t)B * T;
		float *x = frand(&r, n, -3, 3), *w = frand(&r, C, 0.5f, 1.5f);
		float *dout = frand(&r, n, -1, 1), *dx = frand(&r, n, -1, 1);
		float *dw = frand(&r, C, -1, 1), *out = malloc(n * 4), *rstd = malloc(BT * 4);
		float *x_d = up(x, n * 4), *w_d = up(w, C * 4), *dout_d = up(dout, n * 4);
		float *dx_d = up(dx, n * 4), *dw_d = up(dw, C * 4), *out_d = up(NULL, n * 4);
		float *rstd_d = up(NULL, BT * 4);

		gpu->rmsnorm_forward(st, out_d, rstd_d, x_d, w_d, 1e-5f, B, T, C);
		cpu->rmsnorm_forward(NULL, out, rstd, x, w, 1e-5f, B, T, C);
		same("rmsnorm_forward", "out", s, out_d, out, n, RTOL_ELEM);
		same("rmsnorm_forward", "rstd", s, rstd_d, rstd, BT, RTOL_ELEM);
		float *r2_d = up(rstd, BT * 4); /* the CPU's rstd: compare only the backward */
		void *dx1, *dw1;

		gpu->rmsnorm_backward(st, dx_d, dw_d, dout_d, x_d, w_d, r2_d, B, T, C);
		cpu->rmsnorm_backward(NULL, dx, dw, dout, x, w, rstd, B, T, C);
		same("rmsnorm_backward", "dinp", s, dx_d, dx, n, RTOL_RED);
		same("rmsnorm_backward", "dweight", s, dw_d, dw, C, RTOL_RED);
		/* run to run: the same accumulation from the same start gives the same bits */
		dx1 = fetch(dx_d, n * 4, "rmsnorm dinp"), dw1 = fetch(dw_d, C * 4, "rmsnorm dw");
		gpu->rmsnorm_backward(st, dx_d, dw_d, dout_d, x_d, w_d, r2_d, B, T, C);
		gpu->rmsnorm_backward(st, dx_d, dw_d, dout_d, x_d, w_d, r2_d, B, T, C);
		float *dx2 = fetch(dx_d, n * 4, "rmsnorm dinp"), *dw2 = fetch(dw_d, C * 4, "dw");
		float *dx3_d = up(dx1, n * 4), *dw3_d = up(dw1, C * 4);

		gpu->rmsnorm_backward(st, dx3_d, dw3_d, dout_d, x_d, w_d, r2_d, B, T, C);
		gpu->rmsnorm_backward(st, dx3_d, dw3_d, dout_d, x_d, w_d, r2_d, B, T, C);
		same_bits("rmsnorm_backward dinp", dx3_d, dx2, n * 4);
		same_bits("rmsnorm_backward dweight", dw3_d, dw2, C * 4);
		free(x), free(w), free(dout), free(dx), free(dw), free(out), free(rstd), free(dx1);
		free(dw1), free(dx2), free(dw2);
		gt_free(x_d), gt_free(w_d), gt_free(dout_d), gt_free(dx_d), gt_free(dw_d);
		gt_free(out_d), gt_free(rstd_d), gt_free(r2_d), gt_free(dx3_d), gt_free(dw3_d);
	}
	close_gpu(st);
}

Test(kernels_gpu_llama, rope)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	struct zn_rope_params p = { .theta = 500000.0, .type = ZN_ROPE_LLAMA3, .factor = 8,
				    .low_freq_factor = 1, .high_freq_factor = 4,
				    .original_max_position_embeddings = 64 };

	for (size_t k = 0; k < NSHAPES; k++) {
		const struct lshape *s = &shapes[k];
		struct kc_rng r = { 301 + k };
		int B = s->B, T = s->T, NH = s->NH, KV = s->KV, hd = s->hd;
		size_t BT = (size_t)B * T, n = BT * (NH + 2 * KV) * hd;
		float *inv = malloc(hd / 2 * sizeof(float)), *x = frand(&r, n, -2, 2);
		int *pos = malloc(BT * sizeof(int));

		cr_assert(inv && pos);
		cr_assert_eq(zn_rope_inv_freq(inv, hd, &p), 0);
		kc_fill_int(&r, pos, BT, 4096);
		float *x_d = up(x, n * 4); /* inv_freq stays in host memory: the ops read it */
		int *pos_d = up(pos, BT * sizeof(int));

		for (int withpos = 0; withpos <= 1; withpos++) {
			const char *fw = withpos ? "rope_forward (positions)" : "rope_forward";
			const char *bw = withpos ? "rope_backward (positions)" : "rope_backward";

			gpu->rope_forward(st, x_d, inv, withpos ? pos_d : NULL, B, T, NH, KV, hd);
			cpu->rope_forward(NULL, x, inv, withpos ? pos : NULL, B, T, NH, KV, hd);
			same(fw, "qkv", s, x_d, x, n, RTOL_ELEM);
			gpu->rope_backward(st, x_d, inv, withpos ? pos_d : NULL, B, T, NH, KV, hd);
			cpu->rope_backward(NULL, x, inv, withpos ? pos : NULL, B, T, NH, KV, hd);
			same(bw, "dqkv", s, x_d, x, n, RTOL_ELEM);
		}
		free(inv), free(x), free(pos);
		gt_free(x_d), gt_free(pos_d);
	}
	close_gpu(st);
}

Test(kernels_gpu_llama, swiglu)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < NSHAPES; k++) {
		const struct lshape *s = &shapes[k];
		struct kc_rng r = { 401 + k };
		int B = s->B, T = s->T, IC = s->IC;
		size_t n = (size_t)B * T * IC;
		float *x = frand(&r, 2 * n, -8, 8), *dout = frand(&r, n, -1, 1);
		float *dx = frand(&r, 2 * n, -1, 1), *out = malloc(n * 4);
		float *x_d = up(x, 2 * n * 4), *dout_d = up(dout, n * 4), *dx_d = up(dx, 2 * n * 4);
		float *out_d = up(NULL, n * 4);

		gpu->swiglu_forward(st, out_d, x_d, B, T, IC);
		cpu->swiglu_forward(NULL, out, x, B, T, IC);
		same("swiglu_forward", "out", s, out_d, out, n, RTOL_ELEM);
		gpu->swiglu_backward(st, dx_d, dout_d, x_d, B, T, IC);
		cpu->swiglu_backward(NULL, dx, dout, x, B, T, IC);
		same("swiglu_backward", "dinp", s, dx_d, dx, 2 * n, RTOL_ELEM);
		free(x), free(dout), free(dx), free(out);
		gt_free(x_d), gt_free(dout_d), gt_free(dx_d), gt_free(out_d);
	}
	close_gpu(st);
}

Test(kernels_gpu_llama, gqa_attention)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < NSHAPES; k++) {
		const struct lshape *s = &shapes[k];
		struct kc_rng r = { 501 + k };
		int B = s->B, T = s->T, NH = s->NH, KV = s->KV, hd = s->hd, win = s->window;
		size_t ni = (size_t)B * T * (NH + 2 * KV) * hd, no = (size_t)B * T * NH * hd;
		size_t na = (size_t)B * NH * T * T;
		float *x = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1);
		float *dx = frand(&r, ni, -1, 1), *out = malloc(no * 4), *pre = malloc(na * 4);
		float *att = malloc(na * 4), *datt = malloc(na * 4), *dpre = malloc(na * 4);
		float *x_d = up(x, ni * 4), *dout_d = up(dout, no * 4), *dx_d = up(dx, ni * 4);
		float *dx2_d = up(dx, ni * 4), *out_d = up(NULL, no * 4), *pre_d = up(NULL, na * 4);
		float *att_d = up(NULL, na * 4), *datt_d = up(NULL, na * 4);
		float *dpre_d = up(NULL, na * 4);

		gpu->gqa_attention_forward(st, out_d, pre_d, att_d, x_d, B, T, NH, KV, hd, win);
		cpu->gqa_attention_forward(NULL, out, pre, att, x, B, T, NH, KV, hd, win);
		same("gqa_attention_forward", "out", s, out_d, out, no, RTOL_RED);
		same("gqa_attention_forward", "preatt", s, pre_d, pre, na, RTOL_RED);
		same("gqa_attention_forward", "att", s, att_d, att, na, RTOL_RED);
		float *att2_d = up(att, na * 4); /* the CPU's att: compare only the backward */

		gpu->gqa_attention_backward(st, dx_d, dpre_d, datt_d, dout_d, x_d, att2_d, B, T, NH,
					    KV, hd, win);
		cpu->gqa_attention_backward(NULL, dx, dpre, datt, dout, x, att, B, T, NH, KV, hd,
					    win);
		same("gqa_attention_backward", "dqkv", s, dx_d, dx, ni, RTOL_RED);
		same("gqa_attention_backward", "datt", s, datt_d, datt, na, RTOL_RED);
		same("gqa_attention_backward", "dpreatt", s, dpre_d, dpre, na, RTOL_RED);
		/* run to run: the same call from the same start gives the same bits */
		float *g1 = fetch(dx_d, ni * 4, "gqa dqkv");

		gpu->gqa_attention_backward(st, dx2_d, dpre_d, datt_d, dout_d, x_d, att2_d, B, T,
					    NH, KV, hd, win);
		same_bits("gqa_attention_backward dqkv", dx2_d, g1, ni * 4);
		free(x), free(dout), free(dx), free(out), free(pre), free(att), free(datt);
		free(dpre), free(g1);
		gt_free(x_d), gt_free(dout_d), gt_free(dx_d), gt_free(dx2_d), gt_free(out_d);
		gt_free(pre_d), gt_free(att_d), gt_free(datt_d), gt_free(dpre_d), gt_free(att2_d);
	}
	close_gpu(st);
}

/* The sorted, segmented embedding backward (kernels/cuda/embed_backward.cu) at a training
 * batch's size, 8192 rows with skewed tokens (half one token, the largest id too): bit for
 * bit the CPU's serial walk, for the Llama embedding and GPT-2's encoder (dwte, dwpe, and
 * dwpe keyed by packed documents' positions), bit-identical run to run. */
Test(kernels_gpu_llama, embedding_backward_sorted_bit_exact)
{
	enum { B = 4, T = 2048, C = 256, V = 1000 };
	const size_t BT = (size_t)B * T, n = BT * C, nw = (size_t)V * C, np = (size_t)T * C;
	struct kc_rng r = { 5150 };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	int *tok = malloc(BT * sizeof(int)), *pos = malloc(BT * sizeof(int));

	cr_assert(tok && pos);
	for (size_t i = 0; i < BT; i++) {
		int u = (int)(kc_next(&r) % 8);

		tok[i] = u < 4 ? 17 : u < 7 ? (int)(kc_next(&r) % V) : V - 1;
		pos[i] = (int)(i % T % 300); /* documents of 300 tokens */
	}
	float *dout = frand(&r, n, -1, 1), *dw = frand(&r, nw, -1, 1);
	float *dwpe = frand(&r, np, -1, 1), *dwpe2 = frand(&r, np, -1, 1);
	float *emb = malloc(nw * 4), *enc = malloc(nw * 4);
	int *tok_d = up(tok, BT * sizeof(int)), *pos_d = up(pos, BT * sizeof(int));
	float *dout_d = up(dout, n * 4), *emb_d = up(dw, nw * 4), *enc_d = up(dw, nw * 4);
	float *wpe_d = up(dwpe, np * 4), *wpe2_d = up(dwpe2, np * 4), *again_d = up(dw, nw * 4);

	cr_assert(emb && enc);
	memcpy(emb, dw, nw * 4);
	memcpy(enc, dw, nw * 4);
	gpu->embedding_backward(st, emb_d, dout_d, tok_d, B, T, C);
	gpu->embedding_backward(st, again_d, dout_d, tok_d, B, T, C);
	cpu->embedding_backward(NULL, emb, dout, tok, B, T, C);
	same_bits("embedding_backward dwte (sorted) vs the CPU", emb_d, emb, nw * 4);
	same_bits("embedding_backward dwte rerun", again_d, emb, nw * 4);
	gpu->encoder_backward(st, enc_d, wpe_d, dout_d, tok_d, B, T, C);
	cpu->encoder_backward(NULL, enc, dwpe, dout, tok, B, T, C);
	same_bits("encoder_backward dwte (sorted) vs the CPU", enc_d, enc, nw * 4);
	same_bits("encoder_backward dwpe vs the CPU", wpe_d, dwpe, np * 4);
	memcpy(enc, dw, nw * 4);
	gpu->encoder_pos_backward(st, again_d, wpe2_d, dout_d, tok_d, pos_d, B, T, C);
	cpu->encoder_pos_backward(NULL, enc, dwpe2, dout, tok, pos, B, T, C);
	/* again_d held dw + one embedding backward: the CPU's enc the same */
	cpu->embedding_backward(NULL, enc, dout, tok, B, T, C);
	same_bits("encoder_pos_backward dwte vs the CPU", again_d, enc, nw * 4);
	same_bits("encoder_pos_backward dwpe (sorted by position) vs the CPU", wpe2_d, dwpe2,
		  np * 4);
	free(tok), free(pos), free(dout), free(dw), free(dwpe), free(dwpe2), free(emb), free(enc);
	gt_free(tok_d), gt_free(pos_d), gt_free(dout_d), gt_free(emb_d), gt_free(enc_d);
	gt_free(wpe_d), gt_free(wpe2_d), gt_free(again_d);
	close_gpu(st);
}
