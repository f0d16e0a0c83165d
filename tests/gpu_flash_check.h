/* The GPU-vs-CPU attention check shared by test_gpu_kernels_flash.c (the causal op,
 * flash_attention_*) and test_gpu_kernels_flash_doc.c (the packed-document op,
 * flash_attention_doc_*): random inputs, a download compared with the CPU result (kc_close
 * at rtol, or bit for bit when rtol is 0), and one shape's forward and backward with
 * bit-identical reruns; with tc set, the tensor-core slots flash_attention_doc_tc_*
 * against the CPU's fp32 op (the CPU table maps them to it). dqkv starts from the same random values on both sides (accumulate
 * semantics); out, lse and drow start as garbage on the device. Static functions in a
 * header: test code only, included by one file each. */
#ifndef ZN_TESTS_GPU_FLASH_CHECK_H
#define ZN_TESTS_GPU_FLASH_CHECK_H

#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "gpu_buf.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"

struct fshape {
	int B, T, NH, KV, hd, W; /* W: sliding window, 0 = none */
	int doc; /* 0: the causal op; else documents of random lengths 1..doc (the doc op) */
	int tc;  /* 1: the tensor-core slots flash_attention_doc_tc_* (pos NULL when doc 0) */
};

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

/* positions of random document lengths 1..doc in each row */
static int *rand_pos(struct kc_rng *r, int B, int T, int doc)
{
	int *pos = malloc((size_t)B * T * sizeof(int));

	cr_assert(pos);
	for (int b = 0; b < B; b++)
		for (int t = 0, n = 0, len = 0; t < T; t++) {
			if (n == len) {
				len = 1 + (int)(kc_next(r) % (uint64_t)doc);
				n = 0;
			}
			pos[b * T + t] = n++;
		}
	return pos;
}

/* device d against the CPU's cpu_h: within rtol, or bit for bit when rtol is 0 */
static void same(const char *what, const struct fshape *s, const float *d, const float *cpu_h,
		 size_t n, double rtol)
{
	float *g = malloc((n ? n : 1) * sizeof(float));
	double *ref = malloc((n ? n : 1) * sizeof(double));
	char name[200];

	cr_assert(g && ref);
	if (s->doc)
		snprintf(name, sizeof(name), "%s (B %d T %d NH %d KV %d hd %d window %d doc %d)",
			 what, s->B, s->T, s->NH, s->KV, s->hd, s->W, s->doc);
	else
		snprintf(name, sizeof(name), "%s (B %d T %d NH %d KV %d hd %d window %d)", what,
			 s->B, s->T, s->NH, s->KV, s->hd, s->W);
	down(g, d, n * sizeof(float), name);
	for (size_t i = 0; i < n; i++)
		ref[i] = cpu_h[i];
	if (rtol > 0)
		cr_assert(kc_close(name, g, ref, n, rtol));
	else
		cr_assert(!memcmp(g, cpu_h, n * sizeof(float)), "%s: not bit-identical", name);
	free(g);
	free(ref);
}

/* t's forward (the doc op when pos, else the causal op); the CPU table takes st NULL */
/* out16: the tc op's bf16 copy of out (NULL: none; the other ops have none) */
static void attn_forward(const struct zn_kernel_table *t, void *st, float *out,
			 uint16_t *out16, float *lse, const float *x, const int *pos,
			 const struct fshape *s)
{
	if (s->tc)
		t->flash_attention_doc_tc_forward(st, out, out16, lse, x, pos, s->B, s->T, s->NH,
						  s->KV, s->hd, s->W);
	else if (pos)
		t->flash_attention_doc_forward(st, out, lse, x, pos, s->B, s->T, s->NH, s->KV,
					       s->hd, s->W);
	else
		t->flash_attention_forward(st, out, lse, x, s->B, s->T, s->NH, s->KV, s->hd, s->W);
}

static void attn_backward(const struct zn_kernel_table *t, void *st, float *dx, float *drow,
			  const float *dout, const float *x, const float *out, const float *lse,
			  const int *pos, const struct fshape *s)
{
	if (s->tc)
		t->flash_attention_doc_tc_backward(st, dx, drow, dout, x, out, lse, pos, s->B,
						   s->T, s->NH, s->KV, s->hd, s->W);
	else if (pos)
		t->flash_attention_doc_backward(st, dx, drow, dout, x, out, lse, pos, s->B, s->T,
						s->NH, s->KV, s->hd, s->W);
	else
		t->flash_attention_backward(st, dx, drow, dout, x, out, lse, s->B, s->T, s->NH,
					    s->KV, s->hd, s->W);
}

/* one shape through gpu's and the CPU's op: out and lse, then dqkv, within rtol of the CPU,
 * and each bit-identical on a rerun; inputs from seed (x, dout, dqkv, then pos if s->doc);
 * messages name the op (flash_attention or flash_attention_doc) and tag (flash or doc) */
static void check_flash(const struct zn_kernel_table *gpu, void *st, const struct fshape *s,
			uint64_t seed, double rtol)
{
	struct kc_rng r = { seed };
	int B = s->B, T = s->T, NH = s->NH, KV = s->KV, hd = s->hd;
	size_t ni = (size_t)B * T * (NH + 2 * KV) * hd, no = (size_t)B * T * NH * hd;
	size_t nr = (size_t)B * NH * T;
	const char *op = s->tc ? "flash_attention_doc_tc" :
			 s->doc ? "flash_attention_doc" : "flash_attention";
	const char *tag = s->tc ? "tc" : s->doc ? "doc" : "flash";
	char what[96];
	float *x = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1);
	float *dx = frand(&r, ni, -1, 1), *out = malloc(no * 4), *lse = malloc(nr * 4);
	float *drow = malloc(nr * 4);
	int *pos = s->doc ? rand_pos(&r, B, T, s->doc) : NULL;
	int *pos_d = pos ? up(pos, (size_t)B * T * sizeof(int)) : NULL;
	float *x_d = up(x, ni * 4), *dout_d = up(dout, no * 4), *dx_d = up(dx, ni * 4);
	float *dx2_d = up(dx, ni * 4), *out_d = up(NULL, no * 4), *lse_d = up(NULL, nr * 4);
	float *drow_d = up(NULL, nr * 4);

	cr_assert(out && lse && drow);
	uint16_t *out16_d = s->tc ? up(NULL, no * 2) : NULL;

	attn_forward(gpu, st, out_d, out16_d, lse_d, x_d, pos_d, s);
	attn_forward(cpu, NULL, out, NULL, lse, x, pos, s);
	snprintf(what, sizeof(what), "%s_forward out", op);
	same(what, s, out_d, out, no, rtol);
	snprintf(what, sizeof(what), "%s_forward lse", op);
	same(what, s, lse_d, lse, nr, rtol);
	snprintf(what, sizeof(what), "%s out", tag);
	float *o1 = fetch(out_d, no * 4, what);

	if (out16_d) { /* the epilogue's bf16 copy: the cast of out, bit for bit */
		uint16_t *h16 = malloc(no * 2);

		cr_assert(h16);
		down(h16, out16_d, no * 2, "tc out16");
		for (size_t i = 0; i < no; i++)
			cr_assert_eq(h16[i], zn_f32_to_bf16(o1[i]),
				     "tc out16[%zu] = 0x%04x, the cast of out %.9g is 0x%04x", i,
				     h16[i], o1[i], zn_f32_to_bf16(o1[i]));
		free(h16);
		gt_free(out16_d);
	}
	attn_forward(gpu, st, out_d, NULL, lse_d, x_d, pos_d, s);
	snprintf(what, sizeof(what), "%s out rerun", tag);
	float *o2 = fetch(out_d, no * 4, what);

	cr_assert(!memcmp(o1, o2, no * 4), "%s out: not bit-identical run to run", tag);
	attn_backward(gpu, st, dx_d, drow_d, dout_d, x_d, out_d, lse_d, pos_d, s);
	attn_backward(cpu, NULL, dx, drow, dout, x, out, lse, pos, s);
	snprintf(what, sizeof(what), "%s_backward dqkv", op);
	same(what, s, dx_d, dx, ni, rtol);
	snprintf(what, sizeof(what), "%s dqkv", tag);
	float *g1 = fetch(dx_d, ni * 4, what);

	attn_backward(gpu, st, dx2_d, drow_d, dout_d, x_d, out_d, lse_d, pos_d, s);
	snprintf(what, sizeof(what), "%s dqkv rerun", tag);
	float *g2 = fetch(dx2_d, ni * 4, what);

	cr_assert(!memcmp(g1, g2, ni * 4), "%s dqkv: not bit-identical run to run", tag);
	free(x), free(dout), free(dx), free(out), free(lse), free(drow), free(o1), free(o2);
	free(g1), free(g2), free(pos);
	gt_free(x_d), gt_free(dout_d), gt_free(dx_d), gt_free(dx2_d), gt_free(out_d);
	gt_free(lse_d), gt_free(drow_d), gt_free(pos_d);
}

#endif
