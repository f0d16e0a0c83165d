/* kernels/cuda's LoRA ops against kernels/cpu (itself checked against float64 in
 * test_lora.c): lora_up (the adapter's second GEMM accumulating into a column block of the
 * base GEMM's output: cuBLAS with beta = 1, ldc = the base's width), cols_add, cols_take
 * and the seeded dropout (the same mask bits on both tables). Same inputs on both sides;
 * the accumulated output starts from the same random values; guard bytes after every
 * device buffer; a non-default stream. Skips, with the reason, without CUDA or a GPU.
 * Tolerances (kc_close rtol): dropout and the column copies exact (1e-6), the GEMM 1e-4.
 */
#include <criterion/criterion.h>

#include <stdlib.h>

#include "cuda_kernels.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

/* R rows, base width ld, the target's block [c0, c0 + n), rank k */
struct lshape {
	int R, ld, c0, n, k;
};

static const struct lshape shapes[] = {
	{ 64, 768, 256, 256, 8 },   /* GPT-2 c_attn's v block */
	{ 37, 200, 0, 200, 4 },     /* the whole width, odd rows */
	{ 130, 96, 33, 40, 16 },    /* an unaligned block */
};

Test(kernels_gpu_lora, table_has_lora_ops)
{
	const struct zn_kernel_table *k = zn_kernels_cuda_table();

	if (!k)
		cr_skip_test("no CUDA GPU: zinc was built without CUDA");
	cr_assert(k->cols_add && k->cols_take && k->dropout && k->lora_up);
}

Test(kernels_gpu_lora, lora_up_cols_and_dropout_match_cpu)
{
	void *st;
	const struct zn_kernel_table *g = open_gpu(&st);
	struct kc_rng rng = { 19 };

	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const struct lshape *s = &shapes[si];
		size_t no = (size_t)s->R * s->ld, nt = (size_t)s->R * s->k;
		size_t nw = (size_t)s->n * s->k, nb = (size_t)s->R * s->n;
		float *out = gk_frand(&rng, no, 1.0f), *t = gk_frand(&rng, nt, 1.0f);
		float *w = gk_frand(&rng, nw, 1.0f);
		float *blk = gk_frand(&rng, nb, 1.0f), *take = malloc(nb * sizeof(float));
		float *drop = malloc(no * sizeof(float));
		float *out_d = up(out, no * 4), *t_d = up(t, nt * 4), *w_d = up(w, nw * 4);
		float *blk_d = up(blk, nb * 4), *take_d = up(take, nb * 4);
		float *drop_d = up(drop, no * 4);

		cr_assert(take && drop);
		/* lora_up into out, then cols_add of blk on top: both accumulate */
		g->lora_up(st, out_d, t_d, w_d, 0.75f, s->R, s->k, s->ld, s->c0, s->n);
		cpu->lora_up(NULL, out, t, w, 0.75f, s->R, s->k, s->ld, s->c0, s->n);
		gk_near("lora_up", out_d, out, no, 1e-4);
		g->cols_add(st, out_d, blk_d, -0.5f, s->R, s->ld, s->c0, s->n);
		cpu->cols_add(NULL, out, blk, -0.5f, s->R, s->ld, s->c0, s->n);
		gk_near("cols_add", out_d, out, no, 1e-4);
		g->cols_take(st, take_d, out_d, 2.0f, s->R, s->ld, s->c0, s->n);
		cpu->cols_take(NULL, take, out, 2.0f, s->R, s->ld, s->c0, s->n);
		gk_near("cols_take", take_d, take, nb, 1e-4);
		g->dropout(st, drop_d, out_d, 0.3f, 1234 + si, no);
		cpu->dropout(NULL, drop, out, 0.3f, 1234 + si, no);
		gk_near("dropout", drop_d, drop, no, 1e-4);
		gt_free(out_d), gt_free(t_d), gt_free(w_d), gt_free(blk_d), gt_free(take_d);
		gt_free(drop_d);
		free(out), free(t), free(w), free(blk), free(take), free(drop);
	}
	close_gpu(st);
}
