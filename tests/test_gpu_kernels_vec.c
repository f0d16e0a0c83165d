/* The CUDA elementwise ops that run four elements a thread on aligned buffers (float4
 * loads and stores, kernels/cuda/vec.cuh) and one a thread on the n % 4 tail and on
 * misaligned buffers. Each op runs twice on the same values: its buffers at element
 * offset 0 (aligned: the vectorized kernel, then the tail) and at offset 1 (misaligned:
 * the scalar kernel throughout); the two must agree BIT FOR BIT (the same expression per
 * element), and with the CPU table: bit for bit where the op is exact (residual sums,
 * scale, casts, dropout, embedding gathers), at 1e-5 normalized error where it calls
 * tanhf or expf (GELU, SwiGLU; their bf16 outputs at 1e-2). Sizes 4k + 3 and 4k.
 * Skips, with the reason, without CUDA or a usable GPU.
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

#define MAXBUF 6
#define SWIGLU_IC 12 /* a multiple of 4: SwiGLU's rows take the vectorized kernel */

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

/* An op over n elements: nbuf buffers of mult[i] * n elements of elem[i] bytes (4: fp32,
 * 2: bf16 or fp16 bits), the first nin read only; call runs it on one table. */
struct vop {
	const char *name;
	int nbuf, nin;
	int mult[MAXBUF];
	size_t elem[MAXBUF];
	void (*call)(const struct zn_kernel_table *k, void *st, void **b, size_t n);
	double rtol; /* against the CPU: 0 bit for bit */
};

static void gelu_fwd(const struct zn_kernel_table *k, void *st, void **b, size_t n)
{
	k->gelu_forward(st, b[1], b[0], n);
	k->gelu_forward_bf16out(st, b[2], b[0], n);
}

static void gelu_bwd(const struct zn_kernel_table *k, void *st, void **b, size_t n)
{
	k->gelu_backward(st, b[2], b[0], b[1], n);
	k->gelu_backward_bf16out(st, b[3], b[4], b[0], b[1], n);
}

static void residual(const struct zn_kernel_table *k, void *st, void **b, size_t n)
{
	k->residual_forward(st, b[2], b[0], b[1], n);
	k->residual_backward(st, b[3], b[4], b[0], n);
}

static void scale(const struct zn_kernel_table *k, void *st, void **b, size_t n)
{
	k->scale(st, b[1], 0.37f, n);
	k->dropout(st, b[2], b[0], 0.25f, 1234567, n);
}

static void casts(const struct zn_kernel_table *k, void *st, void **b, size_t n)
{
	k->cast_f32_to_bf16(st, b[2], b[0], n);
	k->cast_bf16_to_f32(st, b[3], b[1], n);
	k->cast_f32_to_f16(st, b[4], b[0], n);
}

static void cast_f16(const struct zn_kernel_table *k, void *st, void **b, size_t n)
{
	k->cast_f16_to_f32(st, b[1], b[0], n);
}

static void swiglu(const struct zn_kernel_table *k, void *st, void **b, size_t n)
{
	int T = (int)(n / SWIGLU_IC);

	k->swiglu_forward(st, b[2], b[0], 1, T, SWIGLU_IC);
	k->swiglu_forward_bf16out(st, b[3], b[0], 1, T, SWIGLU_IC);
	k->swiglu_backward_bf16out(st, b[4], b[5], b[1], b[0], 1, T, SWIGLU_IC);
}

static const struct vop ops[] = {
	{ "gelu_forward (+ bf16out)", 3, 1, { 1, 1, 1 }, { 4, 4, 2 }, gelu_fwd, 1e-5 },
	{ "gelu_backward (+ bf16out)", 5, 2, { 1, 1, 1, 1, 1 }, { 4, 4, 4, 4, 2 }, gelu_bwd,
	  1e-5 },
	{ "residual_forward, residual_backward", 5, 2, { 1, 1, 1, 1, 1 }, { 4, 4, 4, 4, 4 },
	  residual, 0 },
	{ "scale, dropout", 3, 1, { 1, 1, 1 }, { 4, 4, 4 }, scale, 0 },
	{ "casts f32 <-> bf16, f32 -> f16", 5, 2, { 1, 1, 1, 1, 1 }, { 4, 2, 2, 4, 2 }, casts, 0 },
	{ "cast f16 -> f32", 2, 1, { 1, 1 }, { 2, 4 }, cast_f16, 0 },
	{ "swiglu forward (+ bf16out), backward (+ bf16out)", 6, 2, { 2, 1, 1, 1, 2, 2 },
	  { 4, 4, 4, 2, 4, 2 }, swiglu, 1e-5 },
};

/* random values: fp32 in [-4, 4) with n/7 of them exactly representable in bf16 and fp16
 * (ties and exact values); 16-bit buffers the bf16 bits of such values (finite as fp16
 * bits too: exponents stay small) */
static void *host_rand(struct kc_rng *r, size_t count, size_t elem)
{
	float *f = malloc((count ? count : 1) * 4);
	void *h;

	cr_assert(f);
	kc_fill(r, f, count, -4, 4);
	if (elem == 4)
		return f;
	h = malloc((count ? count : 1) * 2);
	cr_assert(h);
	zn_cast_f32_to_bf16(h, f, count);
	for (size_t i = 0; i < count; i++) /* bf16 bits of |x| < 4: also a finite fp16 */
		((uint16_t *)h)[i] &= 0xbfffu;
	free(f);
	return h;
}

/* h's count elements at element offset off of a fresh device allocation (*base) */
static void *dev_at(const void *h, size_t count, size_t elem, int off, void **base)
{
	char *staged = malloc((count + (size_t)off) * elem);
	char *d;

	cr_assert(staged);
	memset(staged, 0x5a, (size_t)off * elem);
	memcpy(staged + (size_t)off * elem, h, count * elem);
	d = up(staged, (count + (size_t)off) * elem);
	free(staged);
	*base = d;
	return d + (size_t)off * elem;
}

static void *dev_down(const void *base, int off, size_t count, size_t elem, const char *what)
{
	void *h = malloc((count ? count : 1) * elem);
	const char *err;

	cr_assert(h);
	if (off == 0) { /* the whole allocation: its guard checked too */
		down(h, base, count * elem, what);
		return h;
	}
	gt_download_part(h, base, (size_t)off * elem, count * elem, &err);
	cr_assert(!*err, "%s: cudaDeviceSynchronize/cudaMemcpy: %s", what, err);
	return h;
}

static void check_vs_cpu(const struct vop *o, int i, const void *g, const void *c, size_t cnt)
{
	double *ref;
	float *gf, *cf;

	if (o->rtol == 0.0) {
		cr_assert(!memcmp(g, c, cnt * o->elem[i]), "%s: buffer %d differs from the CPU's",
			  o->name, i);
		return;
	}
	ref = malloc((cnt ? cnt : 1) * sizeof(double));
	gf = malloc((cnt ? cnt : 1) * 4), cf = malloc((cnt ? cnt : 1) * 4);
	cr_assert(ref && gf && cf);
	if (o->elem[i] == 4) {
		memcpy(gf, g, cnt * 4), memcpy(cf, c, cnt * 4);
	} else {
		zn_cast_bf16_to_f32(gf, g, cnt), zn_cast_bf16_to_f32(cf, c, cnt);
	}
	for (size_t j = 0; j < cnt; j++)
		ref[j] = cf[j];
	cr_assert(kc_close(o->name, gf, ref, cnt, o->elem[i] == 4 ? o->rtol : 1e-2));
	free(ref), free(gf), free(cf);
}

static void run_op(const struct zn_kernel_table *gpu, void *st, const struct vop *o, size_t n,
		   uint64_t seed)
{
	struct kc_rng r = { seed };
	void *h[MAXBUF], *got[2][MAXBUF];

	for (int i = 0; i < o->nbuf; i++)
		h[i] = host_rand(&r, o->mult[i] * n, o->elem[i]);
	for (int off = 0; off < 2; off++) {
		void *d[MAXBUF], *base[MAXBUF];

		for (int i = 0; i < o->nbuf; i++)
			d[i] = dev_at(h[i], o->mult[i] * n, o->elem[i], off, &base[i]);
		o->call(gpu, st, d, n);
		for (int i = 0; i < o->nbuf; i++) {
			got[off][i] = dev_down(base[i], off, o->mult[i] * n, o->elem[i], o->name);
			gt_free(base[i]);
		}
	}
	o->call(cpu, NULL, h, n);
	for (int i = o->nin; i < o->nbuf; i++) {
		size_t cnt = o->mult[i] * n;

		cr_assert(!memcmp(got[0][i], got[1][i], cnt * o->elem[i]),
			  "%s n %zu: buffer %d, aligned (four a thread) and misaligned (one a "
			  "thread) runs differ", o->name, n, i);
		check_vs_cpu(o, i, got[0][i], h[i], cnt);
	}
	for (int i = 0; i < o->nbuf; i++)
		free(h[i]), free(got[0][i]), free(got[1][i]);
}

Test(kernels_gpu_vec, aligned_and_misaligned_agree)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
		/* SwiGLU: whole rows of SWIGLU_IC */
		size_t n4 = ops[k].call == swiglu ? 4092 * SWIGLU_IC : 40963;

		run_op(gpu, st, &ops[k], n4, 900 + k);
		run_op(gpu, st, &ops[k], ops[k].call == swiglu ? 12 * SWIGLU_IC : 4096, 950 + k);
	}
	close_gpu(st);
}

/* the device output (n floats from element off of base) bit for bit the CPU's */
static void same_out(const char *what, const void *base, int off, const float *want, size_t n,
		     int C)
{
	float *got = dev_down(base, off, n, 4, what);

	cr_assert(!memcmp(got, want, n * 4), "%s C %d offset %d: not the CPU's bits", what, C,
		  off);
	free(got);
}

/* embedding_forward, encoder_forward (and _pos), their bf16-table forms: rows of C = 64
 * (vectorized) and 66 (scalar), tables at offset 0 and 1: bit for bit the CPU's */
Test(kernels_gpu_vec, embedding_gathers)
{
	const int Cs[] = { 64, 66 };
	const int B = 3, T = 17, V = 50;
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (int k = 0; k < 2; k++)
		for (int off = 0; off < 2; off++) {
			int C = Cs[k];
			size_t n = (size_t)B * T * C, nw = (size_t)V * C, np = (size_t)T * C;
			struct kc_rng r = { 970 + 2 * (uint64_t)k + (uint64_t)off };
			float *wte = host_rand(&r, nw, 4), *wpe = host_rand(&r, np, 4);
			uint16_t *wte16 = host_rand(&r, nw, 2), *wpe16 = host_rand(&r, np, 2);
			float *out = calloc(n, 4);
			int tok[B * T], pos[B * T];
			void *b1, *b2, *b3, *b4, *b5;
			float *wte_d = dev_at(wte, nw, 4, off, &b1), *wpe_d = dev_at(wpe, np, 4, off, &b2);
			uint16_t *wte16_d = dev_at(wte16, nw, 2, off, &b3);
			uint16_t *wpe16_d = dev_at(wpe16, np, 2, off, &b4);
			float *out_d = dev_at(out, n, 4, off, &b5);
			int *tok_d, *pos_d;

			cr_assert(out);
			kc_fill_int(&r, tok, B * T, V);
			for (int t = 0; t < B * T; t++)
				pos[t] = t % T % 5;
			tok_d = up(tok, sizeof(tok)), pos_d = up(pos, sizeof(pos));
			gpu->embedding_forward(st, out_d, tok_d, wte_d, B, T, C);
			cpu->embedding_forward(NULL, out, tok, wte, B, T, C);
			same_out("embedding_forward", b5, off, out, n, C);
			gpu->encoder_forward(st, out_d, tok_d, wte_d, wpe_d, B, T, C);
			cpu->encoder_forward(NULL, out, tok, wte, wpe, B, T, C);
			same_out("encoder_forward", b5, off, out, n, C);
			gpu->encoder_pos_forward(st, out_d, tok_d, pos_d, wte_d, wpe_d, B, T, C);
			cpu->encoder_pos_forward(NULL, out, tok, pos, wte, wpe, B, T, C);
			same_out("encoder_pos_forward", b5, off, out, n, C);
			gpu->embedding_forward_bf16(st, out_d, tok_d, wte16_d, B, T, C);
			cpu->embedding_forward_bf16(NULL, out, tok, wte16, B, T, C);
			same_out("embedding_forward_bf16", b5, off, out, n, C);
			gpu->encoder_pos_forward_bf16(st, out_d, tok_d, pos_d, wte16_d, wpe16_d, B, T,
						      C);
			cpu->encoder_pos_forward_bf16(NULL, out, tok, pos, wte16, wpe16, B, T, C);
			same_out("encoder_pos_forward_bf16", b5, off, out, n, C);
			free(wte), free(wpe), free(wte16), free(wpe16), free(out);
			gt_free(b1), gt_free(b2), gt_free(b3), gt_free(b4), gt_free(b5);
			gt_free(tok_d), gt_free(pos_d);
		}
	close_gpu(st);
}

/* The bias passes of the GEMMs, OC = 64 (four a thread) and 66 (one a thread): fp32
 * matmul_forward's add, bit for bit the bias-free GEMM's output plus the bias; the bf16
 * GEMM's fill, through a zero weight (the GEMM then adds exactly 0 to the filled bias) */
Test(kernels_gpu_vec, bias_passes)
{
	const int OCs[] = { 64, 66 };
	const int B = 2, T = 9, C = 24;
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (int k = 0; k < 2; k++) {
		int OC = OCs[k];
		size_t BT = (size_t)B * T, n = BT * OC;
		struct kc_rng r = { 990 + (uint64_t)k };
		float *x = host_rand(&r, BT * C, 4), *w = host_rand(&r, (size_t)OC * C, 4);
		float *bias = host_rand(&r, OC, 4), *want = malloc(n * 4), *got;
		uint16_t *x16 = host_rand(&r, BT * C, 2), *w16 = calloc((size_t)OC * C, 2);
		float *x_d = up(x, BT * C * 4), *w_d = up(w, (size_t)OC * C * 4);
		float *b_d = up(bias, OC * 4), *o_d = up(NULL, n * 4);
		uint16_t *x16_d = up(x16, BT * C * 2), *w16_d;

		cr_assert(want && w16);
		w16_d = up(w16, (size_t)OC * C * 2);
		gpu->matmul_forward(st, o_d, x_d, w_d, NULL, B, T, C, OC);
		got = dev_down(o_d, 0, n, 4, "matmul_forward without bias");
		for (size_t i = 0; i < n; i++)
			want[i] = got[i] + bias[i % OC];
		free(got);
		gpu->matmul_forward(st, o_d, x_d, w_d, b_d, B, T, C, OC);
		same_out("matmul_forward's bias add", o_d, 0, want, n, OC);
		for (size_t i = 0; i < n; i++)
			want[i] = bias[i % OC];
		gpu->matmul_forward_bf16(st, o_d, x16_d, w16_d, b_d, B, T, C, OC);
		same_out("matmul_forward_bf16's bias fill", o_d, 0, want, n, OC);
		free(x), free(w), free(bias), free(want), free(x16), free(w16);
		gt_free(x_d), gt_free(w_d), gt_free(b_d), gt_free(o_d), gt_free(x16_d), gt_free(w16_d);
	}
	close_gpu(st);
}
