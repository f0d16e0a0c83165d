/* kernels/cpu/flash_attention.c: the fused (FlashAttention-2) causal attention against the
 * existing naive kernels (gqa_attention, which materializes [T,T], and GPT-2's attention),
 * against a double-precision loop (out, lse) and its central finite differences (the
 * backward), plus accumulate semantics and bit-identical reruns across thread counts.
 * Shapes: MHA, GQA, MQA, head_dim not a power of two, T below, at and across the tile
 * (ZN_FLASH_TILE) including non-multiples. Tolerance: 1e-5 relative (kernels_check.h's
 * normalized error) against the fp32 naive kernels and the double references.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "flash_ref.h"
#include "kernels.h"
#include "kernels_buf.h"
#include "kernels_check.h"

#define RTOL 1e-5

static int same_bits(const float *a, const float *b, size_t n, const char *what)
{
	if (!memcmp(a, b, n * sizeof(float)))
		return 1;
	fprintf(stderr, "%s: reruns differ\n", what);
	return 0;
}

/* forward and backward vs the naive gqa kernel (window W, 0 = none); backward vs finite
 * differences if fd */
static void check_window(struct shape s, int W, uint64_t seed, int fd)
{
	struct kc_rng r = { seed };
	size_t ni = n_qkv(s), no = n_out(s), nr = n_row(s), na = nr * s.T;
	float *qkv = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1);
	float *out = frand(&r, no, -9, 9), *lse = frand(&r, nr, -9, 9), *drow = falloc(nr);
	float *nout = falloc(no), *pre = falloc(na), *att = falloc(na);
	float *ndq = falloc(ni), *dq = falloc(ni);
	char what[160];

	snprintf(what, sizeof(what), "flash B %d T %d NH %d KV %d hd %d window %d", s.B, s.T,
		 s.NH, s.KV, s.hd, W);
	/* out and lse start as garbage: the forward writes every element */
	zn_cpu_flash_attention_forward(out, lse, qkv, s.B, s.T, s.NH, s.KV, s.hd, W);
	zn_cpu_gqa_attention_forward(nout, pre, att, qkv, s.B, s.T, s.NH, s.KV, s.hd, W);
	double *want = todouble(nout, no);

	cr_assert(kc_close(what, out, want, no, RTOL), "%s: out vs naive", what);
	double *dx = todouble(qkv, ni), *rl = dalloc(nr), *ro = dalloc(no);

	ref_attention(ro, rl, dx, NULL, NULL, s, W);
	cr_assert(kc_close(what, out, ro, no, RTOL), "%s: out vs double", what);
	cr_assert(kc_close(what, lse, rl, nr, RTOL), "%s: lse vs double", what);

	zn_cpu_gqa_attention_backward(ndq, pre, att, dout, qkv, att, s.B, s.T, s.NH, s.KV, s.hd,
				      0);
	/* att was overwritten above by datt: recompute the forward and redo the naive backward */
	zn_cpu_gqa_attention_forward(nout, pre, att, qkv, s.B, s.T, s.NH, s.KV, s.hd, W);
	float *datt = falloc(na), *dpre = falloc(na);

	memset(ndq, 0, ni * sizeof(float));
	zn_cpu_gqa_attention_backward(ndq, dpre, datt, dout, qkv, att, s.B, s.T, s.NH, s.KV,
				      s.hd, W);
	zn_cpu_flash_attention_backward(dq, drow, dout, qkv, out, lse, s.B, s.T, s.NH, s.KV,
					s.hd, W);
	double *wq = todouble(ndq, ni);

	cr_assert(kc_close(what, dq, wq, ni, RTOL), "%s: dqkv vs naive", what);
	/* accumulate: a second call adds the same gradient again */
	zn_cpu_flash_attention_backward(dq, drow, dout, qkv, out, lse, s.B, s.T, s.NH, s.KV,
					s.hd, W);
	for (size_t i = 0; i < ni; i++)
		wq[i] *= 2;
	cr_assert(kc_close(what, dq, wq, ni, RTOL), "%s: dqkv accumulates", what);
	if (fd) {
		double *wd = todouble(dout, ni < no ? no : no), *g = dalloc(ni);

		ref_attention_grad(g, dx, wd, NULL, s, W);
		memset(dq, 0, ni * sizeof(float));
		zn_cpu_flash_attention_backward(dq, drow, dout, qkv, out, lse, s.B, s.T, s.NH,
						s.KV, s.hd, W);
		cr_assert(kc_close(what, dq, g, ni, RTOL), "%s: dqkv vs finite differences",
			  what);
		free(wd), free(g);
	}
	free(qkv), free(dout), free(out), free(lse), free(drow), free(nout), free(pre);
	free(att), free(ndq), free(dq), free(want), free(dx), free(rl), free(ro), free(datt);
	free(dpre), free(wq);
}

static void check_shape(struct shape s, uint64_t seed, int fd)
{
	check_window(s, 0, seed, fd);
}

Test(kernels_flash, matches_naive_attention)
{
	check_shape((struct shape){ 2, 1, 4, 4, 8 }, 1, 1);    /* one token */
	check_shape((struct shape){ 2, 7, 4, 2, 6 }, 2, 1);    /* GQA, hd 6 */
	check_shape((struct shape){ 1, 33, 4, 1, 5 }, 3, 1);   /* MQA, one past the tile */
	check_shape((struct shape){ 2, 32, 3, 3, 16 }, 4, 0);  /* exactly one tile */
	check_shape((struct shape){ 2, 70, 6, 3, 12 }, 5, 0);  /* 2 tiles + 6 */
	check_shape((struct shape){ 1, 130, 8, 2, 64 }, 6, 0); /* hd 64, 4 tiles + 2 */
	check_shape((struct shape){ 1, 97, 2, 2, 40 }, 7, 0);  /* hd 40 */
}

/* GPT-2's attention (qkv [B,T,3C]) is the case KV = NH, hd = C/NH */
Test(kernels_flash, matches_gpt2_attention)
{
	struct kc_rng r = { 9 };
	enum { B = 2, T = 45, NH = 4, hd = 8, C = NH * hd };
	size_t ni = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
	float *qkv = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1);
	float *o1 = falloc(no), *o2 = falloc(no), *pre = falloc(na), *att = falloc(na);
	float *dp = falloc(na), *da = falloc(na), *lse = falloc(B * NH * T);
	float *drow = falloc(B * NH * T), *d1 = falloc(ni), *d2 = falloc(ni);

	zn_cpu_attention_forward(o1, pre, att, qkv, B, T, C, NH);
	zn_cpu_flash_attention_forward(o2, lse, qkv, B, T, NH, NH, hd, 0);
	double *w = todouble(o1, no);

	cr_assert(kc_close("gpt2 out", o2, w, no, RTOL));
	zn_cpu_attention_backward(d1, dp, da, dout, qkv, att, B, T, C, NH);
	zn_cpu_flash_attention_backward(d2, drow, dout, qkv, o2, lse, B, T, NH, NH, hd, 0);
	double *wd = todouble(d1, ni);

	cr_assert(kc_close("gpt2 dqkv", d2, wd, ni, RTOL));
	free(qkv), free(dout), free(o1), free(o2), free(pre), free(att), free(dp), free(da);
	free(lse), free(drow), free(d1), free(d2), free(w), free(wd);
}

/* fixed tile order, no atomics: the same bits on every rerun and at any thread count */
static void reruns(int W)
{
	struct shape s = { 2, 150, 8, 2, 24 };
	struct kc_rng r = { 10 };
	size_t ni = n_qkv(s), no = n_out(s), nr = n_row(s);
	float *qkv = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1), *drow = falloc(nr);
	float *o[3], *l[3], *d[3];
	int threads[3] = { 1, 4, 3 };

	for (int k = 0; k < 3; k++) {
		o[k] = falloc(no), l[k] = falloc(nr), d[k] = falloc(ni);
		omp_set_num_threads(threads[k]);
		zn_cpu_flash_attention_forward(o[k], l[k], qkv, s.B, s.T, s.NH, s.KV, s.hd, W);
		zn_cpu_flash_attention_backward(d[k], drow, dout, qkv, o[k], l[k], s.B, s.T, s.NH,
						s.KV, s.hd, W);
	}
	for (int k = 1; k < 3; k++) {
		cr_assert(same_bits(o[0], o[k], no, "out"));
		cr_assert(same_bits(l[0], l[k], nr, "lse"));
		cr_assert(same_bits(d[0], d[k], ni, "dqkv"));
	}
	for (int k = 0; k < 3; k++)
		free(o[k]), free(l[k]), free(d[k]);
	free(qkv), free(dout), free(drow);
}

Test(kernels_flash, bit_identical_reruns)
{
	reruns(0);
	reruns(45); /* sliding window across tiles */
}

/* the table slots are the CPU ops */
Test(kernels_flash, table_slots)
{
	struct shape s = { 1, 40, 2, 1, 8 };
	struct kc_rng r = { 11 };
	size_t ni = n_qkv(s), no = n_out(s), nr = n_row(s);
	float *qkv = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1), *drow = falloc(nr);
	float *o1 = falloc(no), *o2 = falloc(no), *l1 = falloc(nr), *l2 = falloc(nr);
	float *d1 = falloc(ni), *d2 = falloc(ni);

	zn_cpu_flash_attention_forward(o1, l1, qkv, s.B, s.T, s.NH, s.KV, s.hd, 7);
	zn_kernels_cpu.flash_attention_forward(NULL, o2, l2, qkv, s.B, s.T, s.NH, s.KV, s.hd, 7);
	zn_cpu_flash_attention_backward(d1, drow, dout, qkv, o1, l1, s.B, s.T, s.NH, s.KV, s.hd,
					7);
	zn_kernels_cpu.flash_attention_backward(NULL, d2, drow, dout, qkv, o2, l2, s.B, s.T,
						s.NH, s.KV, s.hd, 7);
	cr_assert(same_bits(o1, o2, no, "table out"));
	cr_assert(same_bits(d1, d2, ni, "table dqkv"));
	free(qkv), free(dout), free(drow), free(o1), free(o2), free(l1), free(l2), free(d1);
	free(d2);
}

/* Mistral's sliding window: key t2 visible from t when t - t2 < window (gqa_attention's
 * mask), against the naive op, the double loop and its finite differences, windows inside
 * one tile, across tiles, 1 (only the diagonal) and >= T (the causal result, bit for bit) */
Test(kernels_flash, sliding_window)
{
	check_window((struct shape){ 2, 7, 4, 2, 6 }, 3, 21, 1);
	check_window((struct shape){ 1, 33, 4, 1, 5 }, 1, 22, 1);
	check_window((struct shape){ 1, 40, 2, 2, 4 }, 9, 23, 1);
	check_window((struct shape){ 2, 70, 6, 3, 12 }, 32, 24, 0);
	check_window((struct shape){ 1, 130, 8, 2, 16 }, 40, 25, 0);
	check_window((struct shape){ 1, 97, 2, 2, 8 }, 33, 26, 0);

	struct shape s = { 1, 50, 2, 1, 8 };
	struct kc_rng r = { 27 };
	size_t ni = n_qkv(s), no = n_out(s), nr = n_row(s);
	float *qkv = frand(&r, ni, -2, 2), *o1 = falloc(no), *o2 = falloc(no);
	float *l1 = falloc(nr), *l2 = falloc(nr);

	zn_cpu_flash_attention_forward(o1, l1, qkv, s.B, s.T, s.NH, s.KV, s.hd, 0);
	zn_cpu_flash_attention_forward(o2, l2, qkv, s.B, s.T, s.NH, s.KV, s.hd, s.T);
	cr_assert(same_bits(o1, o2, no, "window T vs none"));
	cr_assert(same_bits(l1, l2, nr, "window T lse vs none"));
	free(qkv), free(o1), free(o2), free(l1), free(l2);
}
