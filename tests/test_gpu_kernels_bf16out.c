/* The CUDA bf16-output forward ops (layernorm_forward_bf16out, rmsnorm_forward_bf16out,
 * gelu_forward_bf16out, swiglu_forward_bf16out: the fp32 kernels' value rounded by
 * zn_bf16_rne as it is stored) against
 *   - the CUDA fp32 op followed by the CUDA cast: within one bf16 ulp (the same device
 *     code for the value; one ulp of room only in case the compiler contracts the two
 *     template instances differently), mean and rstd bit for bit;
 *   - the CPU table's bf16out op (itself bit for bit the fp32 op + cast,
 *     test_kernels_bf16out.c): the fp32 ops' tolerance, 1e-4 normalized error after
 *     widening, plus the rounding (1e-2).
 * Shapes with C not a multiple of 32 and a row count past one block of warps; bit-identical
 * reruns. And the vectorized residual_forward and cast_f32_to_bf16 bit for bit against the
 * CPU on aligned and misaligned buffers. Skips, with the reason, without CUDA or a usable
 * GPU.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cuda_kernels.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"

#define RTOL_CPU 1e-2

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

static float *f32_rand(struct kc_rng *r, size_t n, float a)
{
	float *x = malloc((n ? n : 1) * 4);

	cr_assert(x);
	kc_fill(r, x, n, -a, a);
	return x;
}

/* device out16_d against the device cast of the device fp32 output f32_d (one ulp) and
 * against the CPU's bf16 output h16 (RTOL_CPU) */
static void check16(const char *what, const uint16_t *out16_d, const float *f32_d,
		    const uint16_t *h16, size_t n)
{
	uint16_t *g = malloc(n * 2), *c = malloc(n * 2);
	float *f = malloc(n * 4), *gf = malloc(n * 4);
	double *ref = malloc(n * sizeof(double));

	cr_assert(g && c && f && gf && ref);
	down(g, out16_d, n * 2, what);
	down(f, f32_d, n * 4, what);
	zn_cast_f32_to_bf16(c, f, n);
	for (size_t i = 0; i < n; i++) {
		int d = (int)g[i] - (int)c[i];

		cr_assert(d >= -1 && d <= 1, "%s[%zu] = 0x%04x, the cast of the fp32 op's %.9g is "
			  "0x%04x", what, i, g[i], f[i], c[i]);
	}
	zn_cast_bf16_to_f32(gf, g, n);
	for (size_t i = 0; i < n; i++)
		ref[i] = zn_bf16_to_f32(h16[i]);
	cr_assert(kc_close(what, gf, ref, n, RTOL_CPU));
	free(g), free(c), free(f), free(gf), free(ref);
}

static void same_bits_d(const char *what, const void *d, const void *h, size_t bytes)
{
	void *g = malloc(bytes);

	cr_assert(g);
	down(g, d, bytes, what);
	cr_assert(!memcmp(g, h, bytes), "%s: not bit-identical", what);
	free(g);
}

Test(kernels_gpu_bf16out, norms)
{
	const int shapes[][3] = { { 2, 37, 72 }, { 1, 300, 4096 }, { 4, 9, 5 } };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		int B = shapes[k][0], T = shapes[k][1], C = shapes[k][2];
		size_t BT = (size_t)B * T, n = BT * C;
		struct kc_rng r = { 600 + k };
		float *x = f32_rand(&r, n, 3), *w = f32_rand(&r, C, 1.5f), *b = f32_rand(&r, C, 1);
		uint16_t *h16 = malloc(n * 2);
		float *hm = malloc(BT * 4), *hs = malloc(BT * 4);
		float *x_d = up(x, n * 4), *w_d = up(w, C * 4), *b_d = up(b, C * 4);
		float *f_d = up(NULL, n * 4), *m1_d = up(NULL, BT * 4), *s1_d = up(NULL, BT * 4);
		float *m2_d = up(NULL, BT * 4), *s2_d = up(NULL, BT * 4);
		uint16_t *o16_d = up(NULL, n * 2), *c16_d = up(NULL, n * 2);
		float *m1 = malloc(BT * 4), *s1 = malloc(BT * 4);

		cr_assert(h16 && hm && hs && m1 && s1);
		gpu->layernorm_forward(st, f_d, m1_d, s1_d, x_d, w_d, b_d, B, T, C);
		gpu->layernorm_forward_bf16out(st, o16_d, m2_d, s2_d, x_d, w_d, b_d, B, T, C);
		cpu->layernorm_forward_bf16out(NULL, h16, hm, hs, x, w, b, B, T, C);
		check16("layernorm_forward_bf16out", o16_d, f_d, h16, n);
		down(m1, m1_d, BT * 4, "layernorm mean"), down(s1, s1_d, BT * 4, "layernorm rstd");
		same_bits_d("layernorm_forward_bf16out mean", m2_d, m1, BT * 4);
		same_bits_d("layernorm_forward_bf16out rstd", s2_d, s1, BT * 4);
		gpu->rmsnorm_forward(st, f_d, s1_d, x_d, w_d, 1e-5f, B, T, C);
		gpu->rmsnorm_forward_bf16out(st, o16_d, s2_d, x_d, w_d, 1e-5f, B, T, C);
		cpu->rmsnorm_forward_bf16out(NULL, h16, hs, x, w, 1e-5f, B, T, C);
		check16("rmsnorm_forward_bf16out", o16_d, f_d, h16, n);
		down(s1, s1_d, BT * 4, "rmsnorm rstd");
		same_bits_d("rmsnorm_forward_bf16out rstd", s2_d, s1, BT * 4);
		/* a rerun: the same bits */
		gpu->rmsnorm_forward_bf16out(st, c16_d, s2_d, x_d, w_d, 1e-5f, B, T, C);
		{
			uint16_t *a = malloc(n * 2);

			cr_assert(a);
			down(a, o16_d, n * 2, "rmsnorm out16");
			same_bits_d("rmsnorm_forward_bf16out rerun", c16_d, a, n * 2);
			free(a);
		}
		free(x), free(w), free(b), free(h16), free(hm), free(hs), free(m1), free(s1);
		gt_free(x_d), gt_free(w_d), gt_free(b_d), gt_free(f_d), gt_free(m1_d);
		gt_free(s1_d), gt_free(m2_d), gt_free(s2_d), gt_free(o16_d), gt_free(c16_d);
	}
	close_gpu(st);
}

Test(kernels_gpu_bf16out, gelu_and_swiglu)
{
	const int B = 3, T = 41, IC = 700;
	const size_t ng = 1000003, ns = (size_t)B * T * IC;
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	struct kc_rng r = { 9 };
	float *x = f32_rand(&r, ng, 6), *gu = f32_rand(&r, 2 * ns, 8);
	uint16_t *h16 = malloc(ng * 2);
	float *x_d = up(x, ng * 4), *gu_d = up(gu, 2 * ns * 4), *f_d = up(NULL, ng * 4);
	uint16_t *o16_d = up(NULL, ng * 2);

	cr_assert(h16);
	gpu->gelu_forward(st, f_d, x_d, ng);
	gpu->gelu_forward_bf16out(st, o16_d, x_d, ng);
	cpu->gelu_forward_bf16out(NULL, h16, x, ng);
	check16("gelu_forward_bf16out", o16_d, f_d, h16, ng);
	gpu->swiglu_forward(st, f_d, gu_d, B, T, IC);
	gpu->swiglu_forward_bf16out(st, o16_d, gu_d, B, T, IC);
	cpu->swiglu_forward_bf16out(NULL, h16, gu, B, T, IC);
	check16("swiglu_forward_bf16out", o16_d, f_d, h16, ns);
	free(x), free(gu), free(h16);
	gt_free(x_d), gt_free(gu_d), gt_free(f_d), gt_free(o16_d);
	close_gpu(st);
}

/* bytes of device buffer d from offset, after the stream's work */
static void part(void *h, const void *d, size_t offset, size_t bytes, const char *what)
{
	const char *err;

	gt_download_part(h, d, offset, bytes, &err);
	cr_assert(!*err, "%s: cudaDeviceSynchronize/cudaMemcpy: %s", what, err);
}

/* The vectorized residual_forward and cast_f32_to_bf16 (four elements a thread on aligned
 * buffers, the scalar kernel for the tail and for misaligned ones) against the CPU bit for
 * bit: sizes 4k, 4k + 3, 1, 2; buffers at offsets 0 and 1 element (misaligned); out
 * aliasing an input. */
Test(kernels_gpu_bf16out, vectorized_residual_and_cast)
{
	const size_t sizes[] = { 4096, 100003, 1, 2 };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (int off = 0; off < 2; off++) {
			size_t n = sizes[k], m = n + 1;
			struct kc_rng r = { 700 + 2 * k + (uint64_t)off };
			float *a = f32_rand(&r, m, 4), *b = f32_rand(&r, m, 4), *o = malloc(m * 4);
			uint16_t *h16 = malloc(m * 2);
			float *a_d = up(a, m * 4), *b_d = up(b, m * 4), *o_d = up(NULL, m * 4);
			uint16_t *o16_d = up(NULL, m * 2);
			char what[96];

			cr_assert(o && h16);
			gpu->residual_forward(st, o_d + off, a_d + off, b_d + off, n);
			cpu->residual_forward(NULL, o + off, a + off, b + off, n);
			snprintf(what, sizeof(what), "residual_forward n %zu offset %d", n, off);
			{
				float *g = malloc(n * 4);

				cr_assert(g);
				part(g, o_d, off * 4, n * 4, what);
				cr_assert(!memcmp(g, o + off, n * 4), "%s: not bit for bit", what);
				free(g);
			}
			/* in place: a += b */
			gpu->residual_forward(st, a_d + off, a_d + off, b_d + off, n);
			cpu->residual_forward(NULL, a + off, a + off, b + off, n);
			gpu->cast_f32_to_bf16(st, o16_d + off, a_d + off, n);
			cpu->cast_f32_to_bf16(NULL, h16 + off, a + off, n);
			snprintf(what, sizeof(what), "cast_f32_to_bf16 n %zu offset %d", n, off);
			{
				uint16_t *g = malloc(n * 2);

				cr_assert(g);
				part(g, o16_d, off * 2, n * 2, what);
				cr_assert(!memcmp(g, h16 + off, n * 2), "%s: not bit for bit", what);
				free(g);
			}
			free(a), free(b), free(o), free(h16);
			gt_free(a_d), gt_free(b_d), gt_free(o_d), gt_free(o16_d);
		}
	close_gpu(st);
}
