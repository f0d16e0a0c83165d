/* kernels/cpu's qk_rmsnorm (Qwen3's q_norm / k_norm, kernels.h) against the rmsnorm op it
 * applies per head: the query heads of every token gathered as rows [BT x NH, hd] and the
 * key heads as [BT x KV, hd], normalized by zn_cpu_rmsnorm_forward / _backward (itself
 * checked against finite differences and PyTorch float64 in test_kernels_llama.c), give
 * the same bits: out, rstd, the input gradient (written in place) and the weights'
 * gradients (accumulated onto random starting values, rows in the same order). The value
 * heads are copied forward and left alone backward; NULL weight gradients (LoRA's frozen
 * norms) skip the weights and give the same input gradient. The whole Qwen3 math against a
 * float64 reference of transformers' is scripts/llama_check.py --model qwen3.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "kernels_buf.h"
#include "kernels_check.h"

/* the rows of one kind (heads h0 .. h0+nh-1 of every token) of qkv [BT, S], as [BT*nh, hd] */
static void gather(float *rows, const float *qkv, int BT, int S, int hd, int h0, int nh)
{
	for (int t = 0; t < BT; t++)
		for (int h = 0; h < nh; h++)
			memcpy(rows + ((size_t)t * nh + h) * hd,
			       qkv + (size_t)t * S + (size_t)(h0 + h) * hd, (size_t)hd * sizeof(float));
}

static void check(int B, int T, int NH, int KV, int hd, uint64_t seed)
{
	struct kc_rng r = { seed };
	const int BT = B * T, S = (NH + 2 * KV) * hd, heads[2] = { NH, KV };
	size_t n = (size_t)BT * S;
	float *x = frand(&r, n, -3, 3), *dout = frand(&r, n, -1, 1);
	float *w[2] = { frand(&r, hd, 0.5f, 1.5f), frand(&r, hd, 0.5f, 1.5f) };
	float *dw[2] = { frand(&r, hd, -1, 1), frand(&r, hd, -1, 1) };
	float *dw0[2] = { malloc(hd * 4), malloc(hd * 4) };
	float *out = frand(&r, n, -9, 9), *rstd = malloc((size_t)BT * (NH + KV) * 4);
	float *d = malloc(n * 4), *dnull = malloc(n * 4);

	cr_assert(dw0[0] && dw0[1] && rstd && d && dnull);
	memcpy(dw0[0], dw[0], hd * 4), memcpy(dw0[1], dw[1], hd * 4);
	zn_cpu_qk_rmsnorm_forward(out, rstd, x, w[0], w[1], 1e-6f, B, T, NH, KV, hd);
	memcpy(d, dout, n * 4);
	zn_cpu_qk_rmsnorm_backward(d, dw[0], dw[1], x, w[0], w[1], rstd, B, T, NH, KV, hd);
	memcpy(dnull, dout, n * 4);
	zn_cpu_qk_rmsnorm_backward(dnull, NULL, NULL, x, w[0], w[1], rstd, B, T, NH, KV, hd);
	cr_expect(!memcmp(d, dnull, n * 4), "frozen weights changed the input gradient");
	for (int k = 0; k < 2; k++) {
		int h0 = k ? NH : 0, rows = BT * heads[k];
		size_t m = (size_t)rows * hd;
		float *rx = malloc(m * 4), *rd = malloc(m * 4), *ro = malloc(m * 4);
		float *got = malloc(m * 4), *rs = malloc(rows * 4), *rdi = calloc(m, 4);
		float *rdw = malloc(hd * 4);

		cr_assert(rx && rd && ro && got && rs && rdi && rdw);
		memcpy(rdw, dw0[k], hd * 4);
		gather(rx, x, BT, S, hd, h0, heads[k]);
		gather(rd, dout, BT, S, hd, h0, heads[k]);
		zn_cpu_rmsnorm_forward(ro, rs, rx, w[k], 1e-6f, 1, rows, hd);
		zn_cpu_rmsnorm_backward(rdi, rdw, rd, rx, w[k], rs, 1, rows, hd);
		gather(got, out, BT, S, hd, h0, heads[k]);
		cr_expect(!memcmp(got, ro, m * 4), "%s heads: out differs", k ? "key" : "query");
		for (int i = 0; i < rows; i++)
			cr_expect(rstd[(i / heads[k]) * (NH + KV) + h0 + i % heads[k]] == rs[i],
				  "%s rstd row %d", k ? "key" : "query", i);
		gather(got, d, BT, S, hd, h0, heads[k]);
		cr_expect(!memcmp(got, rdi, m * 4), "%s heads: input gradient differs",
			  k ? "key" : "query");
		cr_expect(!memcmp(dw[k], rdw, hd * 4), "%s weight gradient differs",
			  k ? "key" : "query");
		free(rx), free(rd), free(ro), free(got), free(rs), free(rdi), free(rdw);
	}
	/* v: copied forward, untouched backward */
	for (int t = 0; t < BT; t++) {
		size_t v = (size_t)t * S + (size_t)(NH + KV) * hd;

		cr_expect(!memcmp(out + v, x + v, (size_t)KV * hd * 4), "v not copied");
		cr_expect(!memcmp(d + v, dout + v, (size_t)KV * hd * 4), "v gradient touched");
	}
	free(x), free(dout), free(w[0]), free(w[1]), free(dw[0]), free(dw[1]), free(dw0[0]);
	free(dw0[1]), free(out), free(rstd), free(d), free(dnull);
}

Test(kernels_qk_norm, per_head_rmsnorm)
{
	check(2, 5, 4, 2, 24, 31);  /* GQA, head_dim apart from any hidden / heads */
	check(1, 7, 3, 3, 128, 32); /* MHA, Qwen3's head_dim: two weight-gradient chunks */
	check(4, 64, 8, 1, 16, 33); /* MQA, enough rows for the parallel input loops */
}
