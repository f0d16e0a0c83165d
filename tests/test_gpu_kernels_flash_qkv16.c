/* bf16 q/k/v in memory for the tensor-core attention (kernels.h: rope_forward_bf16out,
 * flash_attention_doc_tc_forward_qkv16, the qkv16 of flash_attention_doc_tc_backward_
 * bf16out). With qkv16 = cast_f32_to_bf16(qkv) the FlashAttention-2 kernels copy their
 * q/k/v tiles from qkv16 by cp.async (two stages) instead of rounding qkv as they load it:
 * the same bf16 tiles, so out, out16, lse, dqkv, dqkv16 and drow must be BIT FOR BIT the
 * results without qkv16; a misaligned qkv16 (8 bytes off) takes the fp32 path, the same
 * bits again; and against the CPU's fp32 attention at the tensor-core tolerance (2e-2
 * normalized). head_dim 32, 64, 96, 128 (and 48: not FA2, qkv16 unused), T across the
 * 64-row tiles and the two stages (1, 64, 150, 513), GQA, a sliding window, packed
 * documents. RoPE's copy: rope_forward_bf16out's fp32 bit for bit rope_forward's, the
 * copy the cast of every channel. The one-stage kernels (ZINC_TEST_FA2_ONE_STAGE) bit for
 * bit the two-stage ones. Skips, with the reason, without CUDA or a usable GPU.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/fault.h"
#include "cuda_kernels.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"

#define RTOL_TC 2e-2

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

struct qshape {
	int B, T, NH, KV, hd, W, doc; /* W: window (0 none); doc: documents of 1..doc tokens */
};

static const struct qshape shapes[] = {
	{ 2, 150, 4, 2, 64, 0, 0 },   { 1, 513, 2, 1, 128, 0, 0 }, { 2, 64, 3, 3, 32, 0, 0 },
	{ 1, 200, 4, 1, 96, 70, 0 },  { 2, 150, 4, 2, 64, 0, 40 }, { 1, 1, 2, 2, 64, 0, 0 },
	{ 1, 130, 2, 1, 48, 0, 0 },
};

static float *frand(struct kc_rng *r, size_t n, float a)
{
	float *x = malloc((n ? n : 1) * 4);

	cr_assert(x);
	kc_fill(r, x, n, -a, a);
	return x;
}

/* device buffers a_d and b_d (n elements of elem bytes) bit for bit */
static void same_d(const char *what, const struct qshape *s, const void *a_d, const void *b_d,
		   size_t n, size_t elem)
{
	void *a = malloc((n ? n : 1) * elem), *b = malloc((n ? n : 1) * elem);

	cr_assert(a && b);
	down(a, a_d, n * elem, what), down(b, b_d, n * elem, what);
	cr_assert(!memcmp(a, b, n * elem),
		  "%s (B %d T %d NH %d KV %d hd %d window %d doc %d): with qkv16 not bit for bit "
		  "the same as without", what, s->B, s->T, s->NH, s->KV, s->hd, s->W, s->doc);
	free(a), free(b);
}

static void near_cpu(const char *what, const void *d, const float *h, size_t n)
{
	float *g = malloc((n ? n : 1) * 4);
	double *ref = malloc((n ? n : 1) * sizeof(double));

	cr_assert(g && ref);
	down(g, d, n * 4, what);
	for (size_t i = 0; i < n; i++)
		ref[i] = h[i];
	cr_assert(kc_close(what, g, ref, n, RTOL_TC));
	free(g), free(ref);
}

static int *doc_pos(struct kc_rng *r, int B, int T, int doc)
{
	int *pos = malloc((size_t)B * T * sizeof(int));

	cr_assert(pos);
	for (int b = 0; b < B; b++)
		for (int t = 0, i = 0, len = 0; t < T; t++) {
			if (i == len) {
				len = 1 + (int)(kc_next(r) % (uint64_t)doc);
				i = 0;
			}
			pos[b * T + t] = i++;
		}
	return pos;
}

/* forward and backward without qkv16 (reference), with it, and with it misaligned */
static void run_shape(const struct zn_kernel_table *gpu, void *st, const struct qshape *s,
		      uint64_t seed)
{
	const int B = s->B, T = s->T, NH = s->NH, KV = s->KV, hd = s->hd, W = s->W;
	size_t ni = (size_t)B * T * (NH + 2 * KV) * hd, no = (size_t)B * T * NH * hd;
	size_t nr = (size_t)B * NH * T;
	struct kc_rng r = { seed };
	float *x = frand(&r, ni, 2), *dout = frand(&r, no, 1), *d0 = frand(&r, ni, 1);
	float *out = malloc(no * 4), *lse = malloc(nr * 4), *dq = malloc(ni * 4);
	float *dr = malloc(nr * 4);
	int *pos = s->doc ? doc_pos(&r, B, T, s->doc) : NULL;
	float *x_d = up(x, ni * 4), *dout_d = up(dout, no * 4);
	uint16_t *q16_d = up(NULL, ni * 2), *q16x_d = up(NULL, ni * 2 + 8);
	uint16_t *q16m_d = (uint16_t *)((char *)q16x_d + 8); /* 8-byte aligned only */
	int *pos_d = pos ? up(pos, (size_t)B * T * sizeof(int)) : NULL;
	float *o_d[3], *l_d[3], *dq_d[3], *dr_d[3];
	uint16_t *o16_d[3], *dq16_d[3];
	const uint16_t *src[3] = { NULL, q16_d, q16m_d };
	const char *name[3] = { "without qkv16", "with qkv16", "with a misaligned qkv16" };

	cr_assert(out && lse && dq && dr);
	gpu->cast_f32_to_bf16(st, q16_d, x_d, ni);
	gpu->cast_f32_to_bf16(st, q16m_d, x_d, ni);
	for (int k = 0; k < 3; k++) {
		o_d[k] = up(NULL, no * 4), l_d[k] = up(NULL, nr * 4), dq_d[k] = up(d0, ni * 4);
		dr_d[k] = up(NULL, nr * 4), o16_d[k] = up(NULL, no * 2), dq16_d[k] = up(NULL, ni * 2);
		gpu->flash_attention_doc_tc_forward_qkv16(st, o_d[k], o16_d[k], l_d[k], x_d, src[k],
							  pos_d, B, T, NH, KV, hd, W);
		gpu->flash_attention_doc_tc_backward_bf16out(st, dq_d[k], dq16_d[k], dr_d[k],
							     dout_d, x_d, src[k], o_d[0], l_d[0],
							     pos_d, B, T, NH, KV, hd, W);
	}
	for (int k = 1; k < 3; k++) {
		char what[96];

		snprintf(what, sizeof(what), "out %s", name[k]);
		same_d(what, s, o_d[0], o_d[k], no, 4);
		snprintf(what, sizeof(what), "out16 %s", name[k]);
		same_d(what, s, o16_d[0], o16_d[k], no, 2);
		snprintf(what, sizeof(what), "lse %s", name[k]);
		same_d(what, s, l_d[0], l_d[k], nr, 4);
		snprintf(what, sizeof(what), "dqkv %s", name[k]);
		same_d(what, s, dq_d[0], dq_d[k], ni, 4);
		snprintf(what, sizeof(what), "dqkv16 %s", name[k]);
		same_d(what, s, dq16_d[0], dq16_d[k], ni, 2);
		snprintf(what, sizeof(what), "drow %s", name[k]);
		same_d(what, s, dr_d[0], dr_d[k], nr, 4);
	}
	/* the CPU's fp32 attention (the CPU table ignores qkv16) */
	memcpy(dq, d0, ni * 4);
	cpu->flash_attention_doc_tc_forward_qkv16(NULL, out, NULL, lse, x, NULL, pos, B, T, NH,
						  KV, hd, W);
	cpu->flash_attention_doc_tc_backward_bf16out(NULL, dq, NULL, dr, dout, x, NULL, out, lse,
						     pos, B, T, NH, KV, hd, W);
	near_cpu("out with qkv16 against the CPU", o_d[1], out, no);
	near_cpu("dqkv with qkv16 against the CPU", dq_d[1], dq, ni);
	for (int k = 0; k < 3; k++) {
		gt_free(o_d[k]), gt_free(l_d[k]), gt_free(dq_d[k]), gt_free(dr_d[k]);
		gt_free(o16_d[k]), gt_free(dq16_d[k]);
	}
	free(x), free(dout), free(d0), free(out), free(lse), free(dq), free(dr), free(pos);
	gt_free(x_d), gt_free(dout_d), gt_free(q16_d), gt_free(q16x_d);
	if (pos_d)
		gt_free(pos_d);
}

Test(kernels_gpu_flash_qkv16, same_bits_as_the_fp32_tiles)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
		run_shape(gpu, st, &shapes[k], 1100 + k);
	close_gpu(st);
}

/* rope_forward_bf16out: the rotation bit for bit rope_forward's, every channel's copy
 * the cast of the result (value heads unrotated), with positions and without */
Test(kernels_gpu_flash_qkv16, rope_forward_copy)
{
	enum { B = 2, T = 37, NH = 4, KV = 2, hd = 64, S = (NH + 2 * KV) * hd };
	const size_t n = (size_t)B * T * S;
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	struct kc_rng r = { 1200 };
	float inv[hd / 2], *x = frand(&r, n, 2), *a = malloc(n * 4), *b = malloc(n * 4);
	uint16_t *c = malloc(n * 2), *want = malloc(n * 2);
	int pos[B * T];
	int *pos_d;

	cr_assert(a && b && c && want);
	for (int i = 0; i < hd / 2; i++)
		inv[i] = powf(10000.0f, -2.0f * (float)i / hd);
	for (int t = 0; t < B * T; t++)
		pos[t] = t % T % 9;
	pos_d = up(pos, sizeof(pos));
	for (int withpos = 0; withpos < 2; withpos++) {
		float *a_d = up(x, n * 4), *b_d = up(x, n * 4);
		uint16_t *c_d = up(NULL, n * 2);

		gpu->rope_forward(st, a_d, inv, withpos ? pos_d : NULL, B, T, NH, KV, hd);
		gpu->rope_forward_bf16out(st, b_d, c_d, inv, withpos ? pos_d : NULL, B, T, NH, KV,
					  hd);
		down(a, a_d, n * 4, "rope_forward"), down(b, b_d, n * 4, "rope_forward_bf16out");
		down(c, c_d, n * 2, "rope_forward_bf16out copy");
		cr_assert(!memcmp(a, b, n * 4), "rope_forward_bf16out: not rope_forward's bits");
		zn_cast_f32_to_bf16(want, b, n);
		cr_assert(!memcmp(c, want, n * 2), "rope_forward_bf16out: the copy is not the cast");
		gt_free(a_d), gt_free(b_d), gt_free(c_d);
	}
	free(x), free(a), free(b), free(c), free(want);
	gt_free(pos_d);
	close_gpu(st);
}

/* forward + backward of shape s into out_d, lse_d, dq_d (dqkv from d0), tiles from q16_d
 * (NULL: the fp32 qkv) */
static void fwd_bwd(const struct zn_kernel_table *gpu, void *st, const struct qshape *s,
		    const float *x_d, const uint16_t *q16_d, const float *dout_d,
		    const int *pos_d, float *out_d, float *lse_d, float *dr_d, float *dq_d)
{
	gpu->flash_attention_doc_tc_forward_qkv16(st, out_d, NULL, lse_d, x_d, q16_d, pos_d, s->B,
						  s->T, s->NH, s->KV, s->hd, s->W);
	gpu->flash_attention_doc_tc_backward_bf16out(st, dq_d, NULL, dr_d, dout_d, x_d, q16_d,
						     out_d, lse_d, pos_d, s->B, s->T, s->NH,
						     s->KV, s->hd, s->W);
}

/* The single-buffered kernels (what a device short of shared memory runs; the test hook
 * ZINC_TEST_FA2_ONE_STAGE forces them here): bit for bit the double-buffered results,
 * from qkv16 and from the fp32 qkv */
Test(kernels_gpu_flash_qkv16, one_stage_same_bits)
{
	const struct qshape one[] = { { 1, 513, 2, 1, 128, 0, 0 }, { 2, 150, 4, 2, 64, 0, 40 },
				      { 1, 200, 4, 1, 96, 70, 0 } };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	if (!zn_fault_hooks_built())
		cr_skip_test("built without ZINC_FAULT_HOOKS: the one-stage hook is compiled out");
	for (size_t k = 0; k < sizeof(one) / sizeof(one[0]); k++) {
		const struct qshape *s = &one[k];
		size_t ni = (size_t)s->B * s->T * (s->NH + 2 * s->KV) * s->hd;
		size_t no = (size_t)s->B * s->T * s->NH * s->hd, nr = (size_t)s->B * s->NH * s->T;
		struct kc_rng r = { 1300 + k };
		float *x = frand(&r, ni, 2), *dout = frand(&r, no, 1), *d0 = frand(&r, ni, 1);
		int *pos = s->doc ? doc_pos(&r, s->B, s->T, s->doc) : NULL;
		float *x_d = up(x, ni * 4), *dout_d = up(dout, no * 4);
		uint16_t *q16_d = up(NULL, ni * 2);
		int *pos_d = pos ? up(pos, (size_t)s->B * s->T * sizeof(int)) : NULL;
		float *o_d[2], *l_d[2], *dr_d[2], *dq_d[2];

		gpu->cast_f32_to_bf16(st, q16_d, x_d, ni);
		for (int fp32 = 0; fp32 < 2; fp32++) {
			for (int i = 0; i < 2; i++) {
				o_d[i] = up(NULL, no * 4), l_d[i] = up(NULL, nr * 4);
				dr_d[i] = up(NULL, nr * 4), dq_d[i] = up(d0, ni * 4);
				if (i == 1)
					setenv("ZINC_TEST_FA2_ONE_STAGE", "1", 1);
				fwd_bwd(gpu, st, s, x_d, fp32 ? NULL : q16_d, dout_d, pos_d, o_d[i],
					l_d[i], dr_d[i], dq_d[i]);
				/* the hook is read when the op is called: the launches are made */
				unsetenv("ZINC_TEST_FA2_ONE_STAGE");
			}
			same_d(fp32 ? "one stage, fp32 tiles: out" : "one stage: out", s, o_d[0],
			       o_d[1], no, 4);
			same_d("one stage: lse", s, l_d[0], l_d[1], nr, 4);
			same_d("one stage: dqkv", s, dq_d[0], dq_d[1], ni, 4);
			for (int i = 0; i < 2; i++)
				gt_free(o_d[i]), gt_free(l_d[i]), gt_free(dr_d[i]), gt_free(dq_d[i]);
		}
		free(x), free(dout), free(d0), free(pos);
		gt_free(x_d), gt_free(dout_d), gt_free(q16_d);
		if (pos_d)
			gt_free(pos_d);
	}
	close_gpu(st);
}
