/* The bf16-output forward ops on the CPU table (kernels.h: layernorm_forward_bf16out,
 * rmsnorm_forward_bf16out, gelu_forward_bf16out, swiglu_forward_bf16out, and the out16 of
 * flash_attention_doc_tc_forward): each is exactly its fp32 op followed by
 * cast_f32_to_bf16 of the output, so the outputs are compared BIT FOR BIT with those two
 * calls, and the saved statistics (mean, rstd) bit for bit with the fp32 op's. The
 * backward ones (gelu_backward_bf16out, swiglu_backward_bf16out, residual_forward_bf16out,
 * rope_backward_bf16out, flash_attention_doc_tc_backward_bf16out) likewise: the fp32
 * result bit for bit the op's, the bf16 copy its cast. Shapes cross
 * the ops' 2^20-float internal blocks (C 5000: 209 rows a block; 2^20 + 12345 GELU
 * elements) and hold NaN and infinities (NaN stays a quiet NaN). Seeded random inputs.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_check.h"

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

static float *rnd(struct kc_rng *r, size_t n, float a)
{
	float *x = malloc((n ? n : 1) * sizeof(float));

	cr_assert(x);
	kc_fill(r, x, n, -a, a);
	return x;
}

static void *zalloc(size_t bytes)
{
	void *p = calloc(bytes ? bytes : 1, 1);

	cr_assert(p);
	return p;
}

/* the bf16 output against the fp32 output's cast */
static void same16(const char *what, const uint16_t *got, const float *f32, size_t n)
{
	uint16_t *want = zalloc(n * 2);

	cpu->cast_f32_to_bf16(NULL, want, f32, n);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(got[i], want[i], "%s[%zu] = 0x%04x, the cast of %.9g is 0x%04x", what,
			     i, got[i], f32[i], want[i]);
	free(want);
}

static void same32(const char *what, const float *a, const float *b, size_t n)
{
	cr_assert(!memcmp(a, b, n * sizeof(float)), "%s: not bit-identical", what);
}

/* a few special values where the rounding has cases: NaN, +-inf, a tie */
static void specials(float *x, size_t n)
{
	if (n < 4)
		return;
	x[0] = NAN;
	x[1] = INFINITY;
	x[2] = -INFINITY;
	x[3] = 1.00390625f; /* 1 + 2^-8: a tie between two bf16 values */
}

Test(kernels_bf16out, norms_equal_fp32_then_cast)
{
	const int shapes[][3] = { { 2, 3, 8 }, { 1, 500, 5000 }, { 3, 37, 72 } };

	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		int B = shapes[k][0], T = shapes[k][1], C = shapes[k][2];
		size_t BT = (size_t)B * T, n = BT * C;
		struct kc_rng r = { 300 + k };
		float *x = rnd(&r, n, 3), *w = rnd(&r, C, 1.5f), *bias = rnd(&r, C, 0.5f);
		float *out = zalloc(n * 4), *m1 = zalloc(BT * 4), *s1 = zalloc(BT * 4);
		float *m2 = zalloc(BT * 4), *s2 = zalloc(BT * 4);
		uint16_t *o16 = zalloc(n * 2);

		x[C + 1] = NAN; /* row 1 of the first sample: a NaN row */
		cpu->layernorm_forward(NULL, out, m1, s1, x, w, bias, B, T, C);
		cpu->layernorm_forward_bf16out(NULL, o16, m2, s2, x, w, bias, B, T, C);
		same16("layernorm out16", o16, out, n);
		same32("layernorm mean", m1, m2, BT);
		same32("layernorm rstd", s1, s2, BT);
		cpu->rmsnorm_forward(NULL, out, s1, x, w, 1e-5f, B, T, C);
		cpu->rmsnorm_forward_bf16out(NULL, o16, s2, x, w, 1e-5f, B, T, C);
		same16("rmsnorm out16", o16, out, n);
		same32("rmsnorm rstd", s1, s2, BT);
		free(x), free(w), free(bias), free(out), free(m1), free(s1), free(m2), free(s2);
		free(o16);
	}
}

Test(kernels_bf16out, gelu_and_swiglu_equal_fp32_then_cast)
{
	const size_t ng = ((size_t)1 << 20) + 12345;
	const int B = 2, T = 300, IC = 1800; /* 582 rows a block: 600 rows, 2 blocks */
	const size_t ns = (size_t)B * T * IC, most = ng > ns ? ng : ns;
	struct kc_rng r = { 77 };
	float *x = rnd(&r, ng, 6), *out = zalloc(most * 4);
	uint16_t *o16 = zalloc(most * 2);
	float *gu = rnd(&r, 2 * ns, 8);

	specials(x, ng);
	cpu->gelu_forward(NULL, out, x, ng);
	cpu->gelu_forward_bf16out(NULL, o16, x, ng);
	same16("gelu out16", o16, out, ng);
	specials(gu, 2 * ns);
	cpu->swiglu_forward(NULL, out, gu, B, T, IC);
	cpu->swiglu_forward_bf16out(NULL, o16, gu, B, T, IC);
	same16("swiglu out16", o16, out, ns);
	free(x), free(out), free(o16), free(gu);
}

/* the CPU's tensor-core slot is the fp32 op; out16 is its cast; NULL writes none */
Test(kernels_bf16out, attention_out16_is_the_cast)
{
	enum { B = 2, T = 45, NH = 4, KV = 2, hd = 16 };
	size_t ni = (size_t)B * T * (NH + 2 * KV) * hd, no = (size_t)B * T * NH * hd;
	size_t nr = (size_t)B * NH * T;
	struct kc_rng r = { 4040 };
	float *x = rnd(&r, ni, 2), *o1 = zalloc(no * 4), *o2 = zalloc(no * 4);
	float *l1 = zalloc(nr * 4), *l2 = zalloc(nr * 4);
	uint16_t *o16 = zalloc(no * 2);

	cpu->flash_attention_forward(NULL, o1, l1, x, B, T, NH, KV, hd, 0);
	cpu->flash_attention_doc_tc_forward(NULL, o2, o16, l2, x, NULL, B, T, NH, KV, hd, 0);
	same32("tc out", o1, o2, no);
	same32("tc lse", l1, l2, nr);
	same16("tc out16", o16, o1, no);
	cpu->flash_attention_doc_tc_forward(NULL, o2, NULL, l2, x, NULL, B, T, NH, KV, hd, 0);
	same32("tc out without out16", o1, o2, no);
	free(x), free(o1), free(o2), free(l1), free(l2), free(o16);
}

/* the bf16 copy of a backward op's fp32 result, and that result against the fp32 op's */
static void same_both(const char *what, const float *got, const uint16_t *got16,
		      const float *want, size_t n)
{
	same32(what, got, want, n);
	same16(what, got16, want, n);
}

/* The backward *_bf16out slots (the GEMMs' output gradients): the fp32 result bit for bit
 * the fp32 op's (accumulating into a nonzero dinp), the bf16 copy the cast of it. */
Test(kernels_bf16out, backward_ops_equal_fp32_then_cast)
{
	const size_t ng = ((size_t)1 << 20) + 4099;
	const int B = 2, T = 37, IC = 300;
	const size_t ns = (size_t)B * T * IC, most = ng > 2 * ns ? ng : 2 * ns;
	struct kc_rng r = { 91 };
	float *x = rnd(&r, ng, 6), *dout = rnd(&r, ng, 2), *d0 = rnd(&r, most, 1);
	float *d1 = zalloc(most * 4), *d2 = zalloc(most * 4), *gu = rnd(&r, 2 * ns, 8);
	uint16_t *o16 = zalloc(most * 2);

	specials(x, ng);
	memcpy(d1, d0, ng * 4), memcpy(d2, d0, ng * 4);
	cpu->gelu_backward(NULL, d1, x, dout, ng);
	cpu->gelu_backward_bf16out(NULL, d2, o16, x, dout, ng);
	same_both("gelu_backward_bf16out", d2, o16, d1, ng);
	memcpy(d1, d0, 2 * ns * 4), memcpy(d2, d0, 2 * ns * 4);
	cpu->swiglu_backward(NULL, d1, dout, gu, B, T, IC);
	cpu->swiglu_backward_bf16out(NULL, d2, o16, dout, gu, B, T, IC);
	same_both("swiglu_backward_bf16out", d2, o16, d1, 2 * ns);
	cpu->residual_forward(NULL, d1, x, dout, ng);
	cpu->residual_forward_bf16out(NULL, d2, o16, x, dout, ng);
	same_both("residual_forward_bf16out", d2, o16, d1, ng);
	/* in place (out = inp1), as the layers' dres2 is not, but the slot allows */
	memcpy(d1, d0, ng * 4), memcpy(d2, d0, ng * 4);
	cpu->residual_forward(NULL, d1, d1, dout, ng);
	cpu->residual_forward_bf16out(NULL, d2, o16, d2, dout, ng);
	same_both("residual_forward_bf16out in place", d2, o16, d1, ng);
	free(x), free(dout), free(d0), free(d1), free(d2), free(gu), free(o16);
}

/* rope_backward_bf16out: dqkv rotated back as rope_backward, the copy of every channel
 * (the value heads too); the attention's dqkv16 the cast of its whole dqkv (accumulated
 * into a nonzero dqkv), with and without packed documents */
Test(kernels_bf16out, rope_and_attention_backward_dqkv16)
{
	enum { B = 2, T = 45, NH = 4, KV = 2, hd = 16, S = (NH + 2 * KV) * hd };
	size_t ni = (size_t)B * T * S, no = (size_t)B * T * NH * hd, nr = (size_t)B * NH * T;
	struct kc_rng r = { 5151 };
	float *x = rnd(&r, ni, 2), *d0 = rnd(&r, ni, 1), *d1 = zalloc(ni * 4), *d2 = zalloc(ni * 4);
	float *out = zalloc(no * 4), *lse = zalloc(nr * 4), *dout = rnd(&r, no, 1);
	float *dr1 = zalloc(nr * 4), *dr2 = zalloc(nr * 4), inv[hd / 2];
	uint16_t *o16 = zalloc(ni * 2);
	int pos[B * T];

	for (int i = 0; i < hd / 2; i++)
		inv[i] = powf(10000.0f, -2.0f * (float)i / hd);
	for (int t = 0; t < B * T; t++) /* documents of 20 tokens */
		pos[t] = t % T % 20;
	memcpy(d1, d0, ni * 4), memcpy(d2, d0, ni * 4);
	cpu->rope_backward(NULL, d1, inv, pos, B, T, NH, KV, hd);
	cpu->rope_backward_bf16out(NULL, d2, o16, inv, pos, B, T, NH, KV, hd);
	same_both("rope_backward_bf16out", d2, o16, d1, ni);
	for (int withpos = 0; withpos < 2; withpos++) {
		const int *p = withpos ? pos : NULL;

		cpu->flash_attention_doc_tc_forward(NULL, out, NULL, lse, x, p, B, T, NH, KV, hd,
						    0);
		memcpy(d1, d0, ni * 4), memcpy(d2, d0, ni * 4);
		cpu->flash_attention_doc_tc_backward(NULL, d1, dr1, dout, x, out, lse, p, B, T, NH,
						     KV, hd, 0);
		cpu->flash_attention_doc_tc_backward_bf16out(NULL, d2, o16, dr2, dout, x, NULL, out,
							     lse, p, B, T, NH, KV, hd, 0);
		same_both("flash_attention_doc_tc_backward_bf16out", d2, o16, d1, ni);
		same32("flash_attention_doc_tc_backward_bf16out drow", dr2, dr1, nr);
	}
	free(x), free(d0), free(d1), free(d2), free(out), free(lse), free(dout), free(dr1);
	free(dr2), free(o16);
}

/* bf16 q/k/v: rope_forward_bf16out is rope_forward + the cast of every channel; the CPU's
 * attention slots with qkv16 read the fp32 qkv: the same bits as without it */
Test(kernels_bf16out, rope_forward_qkv16_and_attention_with_it)
{
	enum { B = 2, T = 45, NH = 4, KV = 2, hd = 16, S = (NH + 2 * KV) * hd };
	size_t ni = (size_t)B * T * S, no = (size_t)B * T * NH * hd, nr = (size_t)B * NH * T;
	struct kc_rng r = { 6161 };
	float *x0 = rnd(&r, ni, 2), *x1 = zalloc(ni * 4), *x2 = zalloc(ni * 4);
	float *o1 = zalloc(no * 4), *o2 = zalloc(no * 4), *l1 = zalloc(nr * 4), *l2 = zalloc(nr * 4);
	float *d1 = zalloc(ni * 4), *d2 = zalloc(ni * 4), *dout = rnd(&r, no, 1);
	float *dr1 = zalloc(nr * 4), *dr2 = zalloc(nr * 4), inv[hd / 2];
	uint16_t *q16 = zalloc(ni * 2), *a16 = zalloc(no * 2), *b16 = zalloc(no * 2);
	int pos[B * T];

	for (int i = 0; i < hd / 2; i++)
		inv[i] = powf(10000.0f, -2.0f * (float)i / hd);
	for (int t = 0; t < B * T; t++)
		pos[t] = t % T % 20;
	memcpy(x1, x0, ni * 4), memcpy(x2, x0, ni * 4);
	cpu->rope_forward(NULL, x1, inv, pos, B, T, NH, KV, hd);
	cpu->rope_forward_bf16out(NULL, x2, q16, inv, pos, B, T, NH, KV, hd);
	same_both("rope_forward_bf16out", x2, q16, x1, ni);
	cpu->flash_attention_doc_tc_forward(NULL, o1, a16, l1, x1, pos, B, T, NH, KV, hd, 0);
	cpu->flash_attention_doc_tc_forward_qkv16(NULL, o2, b16, l2, x1, q16, pos, B, T, NH, KV,
						  hd, 0);
	same32("forward_qkv16 out", o2, o1, no);
	same32("forward_qkv16 lse", l2, l1, nr);
	cr_assert(!memcmp(a16, b16, no * 2), "forward_qkv16 out16: not bit-identical");
	cpu->flash_attention_doc_tc_backward_bf16out(NULL, d1, NULL, dr1, dout, x1, NULL, o1, l1,
						     pos, B, T, NH, KV, hd, 0);
	cpu->flash_attention_doc_tc_backward_bf16out(NULL, d2, NULL, dr2, dout, x1, q16, o1, l1,
						     pos, B, T, NH, KV, hd, 0);
	same32("backward with qkv16 dqkv", d2, d1, ni);
	same32("backward with qkv16 drow", dr2, dr1, nr);
	free(x0), free(x1), free(x2), free(o1), free(o2), free(l1), free(l2), free(d1), free(d2);
	free(dout), free(dr1), free(dr2), free(q16), free(a16), free(b16);
}
