/* kernels/cuda's packed-document ops (flash_attention_doc_*, encoder_pos_*) against
 * kernels/cpu's (themselves checked against a double loop, finite differences and the
 * documents run separately in test_kernels_flash_doc.c): GQA, MHA, MQA, head_dim 24..128,
 * documents of length 1, across the 32-key tile, a row that is one document, with and
 * without a sliding window. dqkv starts from the same random values on both sides
 * (accumulate semantics); reruns bit-identical; encoder_pos (and its bf16-table forward)
 * equal bit for bit (the same (b, t) order). Skips, with the reason, without CUDA or a usable GPU. Tolerance 1e-4.
 * The tensor-core slots (flash_attention_doc_tc_*, the FlashAttention-2 kernels of
 * kernels/cuda/flash_attention_fa2.cu for head_dim 32, 64, 96, 128, the fp32 ops
 * otherwise) against the CPU's fp32 op at 2e-2 (bf16 products): tiles of
 * 64 rows crossed, documents across and inside tiles, GQA, MQA, windows, pos NULL.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cuda_kernels.h"
#include "gpu_flash_check.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"

#define RTOL 1e-4

static const struct fshape shapes[] = {
	{ 2, 64, 8, 2, 32, 0, 20, 0 },   /* GQA */
	{ 3, 37, 6, 3, 24, 0, 3, 0 },    /* short documents */
	{ 1, 45, 4, 1, 40, 0, 45, 0 },   /* MQA */
	{ 2, 33, 4, 4, 64, 0, 40, 0 },   /* MHA (GPT-2's layout) */
	{ 1, 300, 4, 2, 128, 0, 90, 0 }, /* hd 128, documents across tiles */
	{ 1, 300, 8, 2, 64, 70, 200, 0 }, /* window across tiles */
	{ 2, 50, 2, 1, 24, 0, 1000, 0 }, /* one document per row */
};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

#define RTOL_TC 2e-2

static const struct fshape tc_shapes[] = {
	{ 2, 64, 8, 2, 32, 0, 20, 1 },     /* one 64-row tile, GQA */
	{ 1, 300, 4, 2, 128, 0, 90, 1 },   /* Llama 3's head_dim, documents across tiles */
	{ 2, 130, 6, 2, 96, 0, 50, 1 },    /* hd 96, T across two tiles plus 2 rows */
	{ 1, 257, 8, 2, 64, 70, 200, 1 },  /* window and documents */
	{ 3, 100, 4, 1, 64, 0, 1, 1 },     /* MQA, documents of one token */
	{ 2, 200, 4, 4, 64, 0, 0, 1 },     /* MHA (GPT-2's layout), pos NULL: the causal op */
	{ 1, 333, 8, 2, 128, 100, 0, 1 },  /* pos NULL, window across tiles */
	{ 2, 70, 4, 2, 40, 0, 30, 1 },     /* hd 40: the fp32 doc op (no FA2 kernel) */
	{ 2, 70, 4, 2, 40, 0, 0, 1 },      /* hd 40, pos NULL: the fp32 op */
};

Test(kernels_gpu_flash_doc, flash_attention_doc)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	cr_assert(gpu->flash_attention_doc_forward && gpu->flash_attention_doc_backward);
	for (size_t k = 0; k < NSHAPES; k++)
		check_flash(gpu, st, &shapes[k], 901 + k, RTOL);
	close_gpu(st);
}

Test(kernels_gpu_flash_doc, flash_attention_doc_tc)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	cr_assert(gpu->flash_attention_doc_tc_forward && gpu->flash_attention_doc_tc_backward);
	for (size_t k = 0; k < sizeof(tc_shapes) / sizeof(tc_shapes[0]); k++)
		check_flash(gpu, st, &tc_shapes[k], 1901 + k, RTOL_TC);
	close_gpu(st);
}

Test(kernels_gpu_flash_doc, encoder_pos)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	enum { B = 3, T = 70, C = 48, V = 50 };
	struct fshape s = { B, T, 0, 0, C, 0, 9, 0 };
	struct kc_rng r = { 950 };
	float *wte = frand(&r, V * C, -1, 1), *wpe = frand(&r, T * C, -1, 1);
	float *dout = frand(&r, B * T * C, -1, 1), *dwte = frand(&r, V * C, -1, 1);
	float *dwpe = frand(&r, T * C, -1, 1), *out = malloc(B * T * C * 4);
	int *inp = malloc(B * T * sizeof(int)), *pos = rand_pos(&r, B, T, s.doc);

	cr_assert(out && inp);
	kc_fill_int(&r, inp, B * T, V);
	int *inp_d = up(inp, B * T * sizeof(int)), *pos_d = up(pos, B * T * sizeof(int));
	float *wte_d = up(wte, V * C * 4), *wpe_d = up(wpe, T * C * 4);
	float *dout_d = up(dout, B * T * C * 4), *dwte_d = up(dwte, V * C * 4);
	float *dwpe_d = up(dwpe, T * C * 4), *out_d = up(NULL, B * T * C * 4);

	gpu->encoder_pos_forward(st, out_d, inp_d, pos_d, wte_d, wpe_d, B, T, C);
	cpu->encoder_pos_forward(NULL, out, inp, pos, wte, wpe, B, T, C);
	same("encoder_pos_forward", &s, out_d, out, B * T * C, 0);
	gpu->encoder_pos_backward(st, dwte_d, dwpe_d, dout_d, inp_d, pos_d, B, T, C);
	cpu->encoder_pos_backward(NULL, dwte, dwpe, dout, inp, pos, B, T, C);
	same("encoder_pos_backward dwte", &s, dwte_d, dwte, V * C, 0);
	same("encoder_pos_backward dwpe", &s, dwpe_d, dwpe, T * C, 0);
	/* bf16 tables (bf16 compute): the same bits as the CPU op */
	{
		uint16_t *wte16 = malloc(V * C * 2), *wpe16 = malloc(T * C * 2);

		cr_assert(wte16 && wpe16);
		for (int i = 0; i < V * C; i++)
			wte16[i] = zn_f32_to_bf16(wte[i]);
		for (int i = 0; i < T * C; i++)
			wpe16[i] = zn_f32_to_bf16(wpe[i]);
		uint16_t *wte16_d = up(wte16, V * C * 2), *wpe16_d = up(wpe16, T * C * 2);

		gpu->encoder_pos_forward_bf16(st, out_d, inp_d, pos_d, wte16_d, wpe16_d, B, T, C);
		cpu->encoder_pos_forward_bf16(NULL, out, inp, pos, wte16, wpe16, B, T, C);
		same("encoder_pos_forward_bf16", &s, out_d, out, B * T * C, 0);
		free(wte16), free(wpe16);
		gt_free(wte16_d), gt_free(wpe16_d);
	}
	free(wte), free(wpe), free(dout), free(dwte), free(dwpe), free(out), free(inp), free(pos);
	gt_free(inp_d), gt_free(pos_d), gt_free(wte_d), gt_free(wpe_d), gt_free(dout_d);
	gt_free(dwte_d), gt_free(dwpe_d), gt_free(out_d);
	close_gpu(st);
}
