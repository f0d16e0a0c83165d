/* kernels/cpu/flash_attention.c's packed-document ops (flash_attention_doc_*, pos [B,T]:
 * each token's position in its document) and encoder_pos_*: against a double-precision
 * loop that masks keys outside the query's document (out, lse), its central finite
 * differences (dqkv), each document run on its own through the plain op (forward and
 * backward), the plain op bit for bit when pos is NULL or one document fills the row,
 * bit-identical reruns across thread counts, and the table slots. Document layouts: length
 * 1, documents across the 32-row tile, a row that is one document, with and without a
 * sliding window. Tolerance: 1e-5 normalized (kernels_check.h).
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
	fprintf(stderr, "%s: differ\n", what);
	return 0;
}

/* pos of row b from document lengths lens[] (0-terminated; the last one runs to T) */
static int *make_pos(struct shape s, const int *const *lens)
{
	int *pos = calloc((size_t)s.B * s.T, sizeof(int));

	cr_assert(pos);
	for (int b = 0; b < s.B; b++) {
		int t = 0, d = 0;

		while (t < s.T) {
			int n = lens[b][d] ? lens[b][d++] : s.T - t;

			for (int i = 0; i < n && t < s.T; i++)
				pos[b * s.T + t++] = i;
		}
	}
	return pos;
}

/* forward vs the double loop; backward vs its finite differences (fd) */
static void check_ref(struct shape s, const int *const *lens, int W, uint64_t seed, int fd)
{
	struct kc_rng r = { seed };
	size_t ni = n_qkv(s), no = n_out(s), nr = n_row(s);
	float *qkv = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1);
	float *out = frand(&r, no, -9, 9), *lse = frand(&r, nr, -9, 9), *drow = falloc(nr);
	float *dq = falloc(ni), *po = falloc(no), *pl = falloc(nr);
	int *pos = make_pos(s, lens);
	char what[160];

	snprintf(what, sizeof(what), "doc B %d T %d NH %d KV %d hd %d window %d", s.B, s.T,
		 s.NH, s.KV, s.hd, W);
	zn_cpu_flash_attention_doc_forward(out, lse, qkv, pos, s.B, s.T, s.NH, s.KV, s.hd, W);
	double *dx = todouble(qkv, ni), *rl = dalloc(nr), *ro = dalloc(no);

	ref_attention(ro, rl, dx, NULL, pos, s, W);
	cr_assert(kc_close(what, out, ro, no, RTOL), "%s: out vs double", what);
	cr_assert(kc_close(what, lse, rl, nr, RTOL), "%s: lse vs double", what);
	/* the mask matters: the plain causal op gives another result on these inputs */
	zn_cpu_flash_attention_forward(po, pl, qkv, s.B, s.T, s.NH, s.KV, s.hd, W);
	cr_assert(memcmp(po, out, no * sizeof(float)), "%s: documents changed nothing", what);
	if (fd) {
		double *wd = todouble(dout, no), *g = dalloc(ni);

		ref_attention_grad(g, dx, wd, pos, s, W);
		zn_cpu_flash_attention_doc_backward(dq, drow, dout, qkv, out, lse, pos, s.B, s.T,
						    s.NH, s.KV, s.hd, W);
		cr_assert(kc_close(what, dq, g, ni, RTOL), "%s: dqkv vs finite differences",
			  what);
		/* accumulate: a second call adds the same gradient again */
		zn_cpu_flash_attention_doc_backward(dq, drow, dout, qkv, out, lse, pos, s.B, s.T,
						    s.NH, s.KV, s.hd, W);
		for (size_t i = 0; i < ni; i++)
			g[i] *= 2;
		cr_assert(kc_close(what, dq, g, ni, RTOL), "%s: dqkv accumulates", what);
		free(wd), free(g);
	}
	free(qkv), free(dout), free(out), free(lse), free(drow), free(dq), free(po), free(pl);
	free(pos), free(dx), free(rl), free(ro);
}

static const int L_a[] = { 1, 3, 0 }, L_b[] = { 5, 0 }, L_c[] = { 0 };
static const int L_d[] = { 30, 7, 1, 20, 0 }, L_e[] = { 64, 33, 0 };
static const int L_f[] = { 2, 40, 45, 1, 1, 0 };

Test(kernels_flash_doc, matches_double_reference)
{
	const int *l1[] = { L_a, L_b };
	const int *l2[] = { L_d };
	const int *l3[] = { L_e, L_f };

	check_ref((struct shape){ 2, 7, 4, 2, 6 }, l1, 0, 1, 1);  /* GQA, one-token doc */
	check_ref((struct shape){ 1, 40, 2, 1, 4 }, l2, 0, 2, 1); /* MQA, docs across a tile */
	check_ref((struct shape){ 1, 40, 2, 1, 4 }, l2, 9, 3, 1); /* and a sliding window */
	check_ref((struct shape){ 2, 130, 4, 2, 16 }, l3, 0, 4, 0);
	check_ref((struct shape){ 2, 130, 4, 2, 16 }, l3, 40, 5, 0);
}

/* each document on its own through the plain op: the packed op gives the same out, lse
 * and dqkv (forward and backward), to rounding (the tiles fall differently) */
static void check_separate(struct shape s, const int *lens, uint64_t seed)
{
	struct kc_rng r = { seed };
	size_t ni = n_qkv(s), no = n_out(s), nr = n_row(s);
	long S = (long)(s.NH + 2 * s.KV) * s.hd, C = (long)s.NH * s.hd;
	float *qkv = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1);
	float *out = falloc(no), *lse = falloc(nr), *drow = falloc(nr), *dq = falloc(ni);
	const int *ls[] = { lens };
	int *pos = make_pos(s, ls);

	cr_assert(s.B == 1);
	zn_cpu_flash_attention_doc_forward(out, lse, qkv, pos, 1, s.T, s.NH, s.KV, s.hd, 0);
	zn_cpu_flash_attention_doc_backward(dq, drow, dout, qkv, out, lse, pos, 1, s.T, s.NH,
					    s.KV, s.hd, 0);
	double *wo = dalloc(no), *wl = dalloc(nr), *wq = dalloc(ni);

	for (int t0 = 0; t0 < s.T;) {
		int n = 1;

		while (t0 + n < s.T && pos[t0 + n])
			n++;
		float *o = falloc((size_t)n * C), *l = falloc((size_t)s.NH * n);
		float *dr = falloc((size_t)s.NH * n), *d = falloc((size_t)n * S);

		zn_cpu_flash_attention_forward(o, l, qkv + t0 * S, 1, n, s.NH, s.KV, s.hd, 0);
		zn_cpu_flash_attention_backward(d, dr, dout + t0 * C, qkv + t0 * S, o, l, 1, n,
						s.NH, s.KV, s.hd, 0);
		for (long i = 0; i < n * C; i++)
			wo[t0 * C + i] = o[i];
		for (long i = 0; i < n * S; i++)
			wq[t0 * S + i] = d[i];
		for (int h = 0; h < s.NH; h++)
			for (int t = 0; t < n; t++)
				wl[(long)h * s.T + t0 + t] = l[(long)h * n + t];
		free(o), free(l), free(dr), free(d);
		t0 += n;
	}
	cr_assert(kc_close("separate out", out, wo, no, RTOL));
	cr_assert(kc_close("separate lse", lse, wl, nr, RTOL));
	cr_assert(kc_close("separate dqkv", dq, wq, ni, RTOL));
	free(qkv), free(dout), free(out), free(lse), free(drow), free(dq), free(pos);
	free(wo), free(wl), free(wq);
}

Test(kernels_flash_doc, equals_documents_run_separately)
{
	check_separate((struct shape){ 1, 100, 4, 2, 8 }, L_d, 11);
	check_separate((struct shape){ 1, 150, 6, 3, 12 }, L_f, 12);
	check_separate((struct shape){ 1, 97, 2, 2, 5 }, L_e, 13);
}

/* pos NULL, and one document filling each row, are the plain op bit for bit */
Test(kernels_flash_doc, one_document_is_the_plain_op)
{
	struct shape s = { 2, 70, 4, 2, 8 };
	struct kc_rng r = { 20 };
	size_t ni = n_qkv(s), no = n_out(s), nr = n_row(s);
	float *qkv = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1), *drow = falloc(nr);
	float *o[3], *l[3], *d[3];
	const int *one[] = { L_c, L_c };
	int *pos = make_pos(s, one);
	const int *ps[3] = { NULL, NULL, pos };

	for (int k = 0; k < 3; k++) {
		o[k] = falloc(no), l[k] = falloc(nr), d[k] = falloc(ni);
		if (k == 0) {
			zn_cpu_flash_attention_forward(o[k], l[k], qkv, s.B, s.T, s.NH, s.KV, s.hd,
						       0);
			zn_cpu_flash_attention_backward(d[k], drow, dout, qkv, o[k], l[k], s.B,
							s.T, s.NH, s.KV, s.hd, 0);
			continue;
		}
		zn_cpu_flash_attention_doc_forward(o[k], l[k], qkv, ps[k], s.B, s.T, s.NH, s.KV,
						   s.hd, 0);
		zn_cpu_flash_attention_doc_backward(d[k], drow, dout, qkv, o[k], l[k], ps[k], s.B,
						    s.T, s.NH, s.KV, s.hd, 0);
	}
	for (int k = 1; k < 3; k++) {
		cr_assert(same_bits(o[0], o[k], no, "out"));
		cr_assert(same_bits(l[0], l[k], nr, "lse"));
		cr_assert(same_bits(d[0], d[k], ni, "dqkv"));
	}
	for (int k = 0; k < 3; k++)
		free(o[k]), free(l[k]), free(d[k]);
	free(qkv), free(dout), free(drow), free(pos);
}

/* fixed order, no atomics: the same bits at 1, 4 and 3 threads; the table slots are the
 * CPU ops */
Test(kernels_flash_doc, bit_identical_reruns_and_table)
{
	struct shape s = { 2, 150, 8, 2, 24 };
	struct kc_rng r = { 30 };
	size_t ni = n_qkv(s), no = n_out(s), nr = n_row(s);
	float *qkv = frand(&r, ni, -2, 2), *dout = frand(&r, no, -1, 1), *drow = falloc(nr);
	float *o[4], *l[4], *d[4];
	int threads[3] = { 1, 4, 3 };
	const int *lens[] = { L_f, L_d };
	int *pos = make_pos(s, lens);

	for (int k = 0; k < 4; k++) {
		o[k] = falloc(no), l[k] = falloc(nr), d[k] = falloc(ni);
		if (k == 3) {
			zn_kernels_cpu.flash_attention_doc_forward(NULL, o[k], l[k], qkv, pos, s.B,
								   s.T, s.NH, s.KV, s.hd, 0);
			zn_kernels_cpu.flash_attention_doc_backward(NULL, d[k], drow, dout, qkv,
								    o[k], l[k], pos, s.B, s.T,
								    s.NH, s.KV, s.hd, 0);
			continue;
		}
		omp_set_num_threads(threads[k]);
		zn_cpu_flash_attention_doc_forward(o[k], l[k], qkv, pos, s.B, s.T, s.NH, s.KV, s.hd,
						   0);
		zn_cpu_flash_attention_doc_backward(d[k], drow, dout, qkv, o[k], l[k], pos, s.B,
						    s.T, s.NH, s.KV, s.hd, 0);
	}
	for (int k = 1; k < 4; k++) {
		cr_assert(same_bits(o[0], o[k], no, "out"));
		cr_assert(same_bits(l[0], l[k], nr, "lse"));
		cr_assert(same_bits(d[0], d[k], ni, "dqkv"));
	}
	for (int k = 0; k < 4; k++)
		free(o[k]), free(l[k]), free(d[k]);
	free(qkv), free(dout), free(drow), free(pos);
}

/* out = wte[inp] + wpe[pos]; dwte, dwpe sums in double; NULL pos is the plain encoder */
Test(kernels_flash_doc, encoder_positions)
{
	enum { B = 2, T = 9, C = 5, V = 7 };
	struct kc_rng r = { 40 };
	float *wte = frand(&r, V * C, -1, 1), *wpe = frand(&r, T * C, -1, 1);
	float *dout = frand(&r, B * T * C, -1, 1), *out = falloc(B * T * C);
	float *dwte = falloc(V * C), *dwpe = falloc(T * C), *o2 = falloc(B * T * C);
	float *e2 = falloc(V * C), *p2 = falloc(T * C);
	int inp[B * T], pos[B * T] = { 0, 1, 2, 0, 1, 0, 0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8 };
	double *wo = dalloc(B * T * C), *we = dalloc(V * C), *wp = dalloc(T * C);

	kc_fill_int(&r, inp, B * T, V);
	zn_kernels_cpu.encoder_pos_forward(NULL, out, inp, pos, wte, wpe, B, T, C);
	zn_kernels_cpu.encoder_pos_backward(NULL, dwte, dwpe, dout, inp, pos, B, T, C);
	for (int bt = 0; bt < B * T; bt++)
		for (int c = 0; c < C; c++) {
			wo[bt * C + c] = (double)wte[inp[bt] * C + c] + wpe[pos[bt] * C + c];
			we[inp[bt] * C + c] += dout[bt * C + c];
			wp[pos[bt] * C + c] += dout[bt * C + c];
		}
	cr_assert(kc_close("encoder_pos out", out, wo, B * T * C, 1e-6));
	cr_assert(kc_close("encoder_pos dwte", dwte, we, V * C, 1e-6));
	cr_assert(kc_close("encoder_pos dwpe", dwpe, wp, T * C, 1e-6));
	memset(dwte, 0, V * C * sizeof(float));
	memset(dwpe, 0, T * C * sizeof(float));
	zn_cpu_encoder_pos_forward(out, inp, NULL, wte, wpe, B, T, C);
	zn_cpu_encoder_forward(o2, inp, wte, wpe, B, T, C);
	zn_cpu_encoder_pos_backward(dwte, dwpe, dout, inp, NULL, B, T, C);
	zn_cpu_encoder_backward(e2, p2, dout, inp, B, T, C);
	cr_assert(same_bits(out, o2, B * T * C, "encoder NULL pos"));
	cr_assert(same_bits(dwte, e2, V * C, "encoder NULL pos dwte"));
	cr_assert(same_bits(dwpe, p2, T * C, "encoder NULL pos dwpe"));
	free(wte), free(wpe), free(dout), free(out), free(dwte), free(dwpe), free(o2), free(e2);
	free(p2), free(wo), free(we), free(wp);
}

/* a negative target (ZN_TARGET_IGNORE) is not predicted: loss 0 and a zero gradient row,
 * the other rows unchanged; a target >= V still gives NaN (bad data) */
Test(kernels_flash_doc, crossentropy_ignored_target)
{
	int targets[3] = { 3, ZN_TARGET_IGNORE, 2 };
	float logits[3 * 16], probs[3 * 16], losses[3], d[3 * 16];
	struct kc_rng r = { 50 };

	kc_fill(&r, logits, 3 * 16, -2, 2);
	zn_cpu_crossentropy_forward(losses, probs, logits, targets, 1, 3, 11, 16);
	cr_assert(losses[1] == 0.0f, "ignored target: loss %g, want 0", losses[1]);
	for (int k = 0; k < 3; k += 2) {
		double mx = -INFINITY, sum = 0;

		for (int i = 0; i < 11; i++)
			mx = fmax(mx, logits[k * 16 + i]);
		for (int i = 0; i < 11; i++)
			sum += exp(logits[k * 16 + i] - mx);
		double want = log(sum) - (logits[k * 16 + targets[k]] - mx);

		cr_assert(fabs(losses[k] - want) < 1e-5, "row %d loss %g, want %g", k, losses[k],
			  want);
	}
	zn_cpu_crossentropy_backward(d, probs, targets, 0.5f, 1, 3, 11, 16);
	for (int i = 16; i < 32; i++)
		cr_assert(d[i] == 0.0f, "ignored row: dlogits[%d] = %g, want 0", i, d[i]);
	cr_assert(d[3] != 0.0f && d[32 + 2] != 0.0f);
	targets[1] = 11;
	zn_cpu_crossentropy_forward(losses, probs, logits, targets, 1, 3, 11, 16);
	cr_assert(isnan(losses[1]), "target >= V: loss %g, want NaN", losses[1]);
}
