/* kernels/lmhead_ce.c, the chunked lm_head + cross-entropy on the CPU table: against the
 * unchunked path (matmul over all rows, then kernels/cpu/crossentropy.c) for chunks of 1
 * row, a chunk that does not divide the rows, exactly the rows and more than the rows;
 * against a double loop and its central finite differences (dx, dwte); accumulate
 * semantics; bit-identical reruns; bad sizes refused. Tolerance 1e-5 (kc_close rtol).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_check.h"
#include "lmhead_ce.h"

#define RTOL 1e-5
#define FD_H 1e-5

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

static float *falloc(size_t n)
{
	float *p = calloc(n ? n : 1, sizeof(float));

	cr_assert(p, "out of memory");
	return p;
}

static double *dalloc(size_t n)
{
	double *p = calloc(n ? n : 1, sizeof(double));

	cr_assert(p, "out of memory");
	return p;
}

static double *todouble(const float *x, size_t n)
{
	double *p = dalloc(n);

	for (size_t i = 0; i < n; i++)
		p[i] = x[i];
	return p;
}

struct prob {
	int BT, C, V, Vp;
	float *x, *wte;
	int *tg;
};

static struct prob make(int BT, int C, int V, int Vp, uint64_t seed)
{
	struct kc_rng r = { seed };
	struct prob p = { BT, C, V, Vp, falloc((size_t)BT * C), falloc((size_t)Vp * C),
			  malloc(BT * sizeof(int)) };

	cr_assert(p.tg);
	kc_fill(&r, p.x, (size_t)BT * C, -1, 1);
	kc_fill(&r, p.wte, (size_t)V * C, -1, 1); /* rows V..Vp-1 stay zero */
	kc_fill_int(&r, p.tg, BT, V);
	return p;
}

static void drop(struct prob *p)
{
	free(p->x), free(p->wte), free(p->tg);
}

/* the unchunked path: losses, dx +=, dwte += */
static void unchunked(const struct prob *p, float *losses, float *dx, float *dwte, float s)
{
	size_t n = (size_t)p->BT * p->Vp;
	float *logits = falloc(n), *probs = falloc(n);

	cpu->matmul_forward(NULL, logits, p->x, p->wte, NULL, 1, p->BT, p->C, p->Vp);
	cpu->crossentropy_forward(NULL, losses, probs, logits, p->tg, 1, p->BT, p->V, p->Vp);
	cpu->crossentropy_backward(NULL, logits, probs, p->tg, s, 1, p->BT, p->V, p->Vp);
	cpu->matmul_backward(NULL, dx, dwte, NULL, logits, p->x, p->wte, 1, p->BT, p->C, p->Vp);
	free(logits), free(probs);
}

static void chunked(const struct prob *p, float *losses, float *dx, float *dwte, float s,
		    int chunk)
{
	float *work = falloc(zn_lmhead_ce_work_count(chunk, p->Vp));

	cr_assert(!zn_lmhead_ce_forward(cpu, NULL, losses, work, p->x, p->wte, p->tg, p->BT,
					p->C, p->V, p->Vp, chunk));
	cr_assert(!zn_lmhead_ce_backward(cpu, NULL, dx, dwte, work, p->x, p->wte, p->tg, s,
					 p->BT, p->C, p->V, p->Vp, chunk));
	free(work);
}

Test(kernels_lmhead, matches_unchunked)
{
	struct prob p = make(23, 16, 50, 64, 1);
	size_t nx = (size_t)p.BT * p.C, nw = (size_t)p.Vp * p.C;
	float s = 1.0f / p.BT;
	float *l0 = falloc(p.BT), *dx0 = falloc(nx), *dw0 = falloc(nw);
	int chunks[] = { 1, 5, 23, 64 };

	unchunked(&p, l0, dx0, dw0, s);
	double *wl = todouble(l0, p.BT), *wx = todouble(dx0, nx), *ww = todouble(dw0, nw);

	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		float *l = falloc(p.BT), *dx = falloc(nx), *dw = falloc(nw);
		char what[64];

		snprintf(what, sizeof(what), "chunk %d", chunks[c]);
		chunked(&p, l, dx, dw, s, chunks[c]);
		cr_assert(kc_close(what, l, wl, p.BT, RTOL), "%s: losses", what);
		cr_assert(kc_close(what, dx, wx, nx, RTOL), "%s: dx", what);
		cr_assert(kc_close(what, dw, ww, nw, RTOL), "%s: dwte", what);
		for (int i = p.V * p.C; i < (int)nw; i++)
			cr_assert(dw[i] == 0.0f, "%s: padded dwte row written", what);
		/* accumulate: a second backward adds the same again */
		float *work = falloc(zn_lmhead_ce_work_count(chunks[c], p.Vp));

		zn_lmhead_ce_backward(cpu, NULL, dx, dw, work, p.x, p.wte, p.tg, s, p.BT, p.C, p.V,
				      p.Vp, chunks[c]);
		for (size_t i = 0; i < nx; i++)
			wx[i] *= 2;
		for (size_t i = 0; i < nw; i++)
			ww[i] *= 2;
		cr_assert(kc_close(what, dx, wx, nx, RTOL), "%s: dx accumulates", what);
		cr_assert(kc_close(what, dw, ww, nw, RTOL), "%s: dwte accumulates", what);
		for (size_t i = 0; i < nx; i++)
			wx[i] /= 2;
		for (size_t i = 0; i < nw; i++)
			ww[i] /= 2;
		free(l), free(dx), free(dw), free(work);
	}
	free(l0), free(dx0), free(dw0), free(wl), free(wx), free(ww);
	drop(&p);
}

/* mean loss in double */
static double ref_loss(const double *x, const double *w, const int *tg, int BT, int C, int V)
{
	double total = 0.0;

	for (int r = 0; r < BT; r++) {
		double mx = -INFINITY, sum = 0.0, lt = 0.0;
		double *l = dalloc(V);

		for (int v = 0; v < V; v++) {
			for (int i = 0; i < C; i++)
				l[v] += x[(long)r * C + i] * w[(long)v * C + i];
			mx = fmax(mx, l[v]);
		}
		for (int v = 0; v < V; v++)
			sum += exp(l[v] - mx);
		lt = l[tg[r]];
		total += log(sum) + mx - lt;
		free(l);
	}
	return total / BT;
}

static void fd(double *g, double *v, size_t n, const double *x, const double *w,
	       const struct prob *p)
{
	for (size_t i = 0; i < n; i++) {
		double save = v[i], lp, lm;

		v[i] = save + FD_H;
		lp = ref_loss(x, w, p->tg, p->BT, p->C, p->V);
		v[i] = save - FD_H;
		lm = ref_loss(x, w, p->tg, p->BT, p->C, p->V);
		v[i] = save;
		g[i] = (lp - lm) / (2 * FD_H);
	}
}

Test(kernels_lmhead, finite_differences)
{
	struct prob p = make(7, 6, 11, 16, 2);
	size_t nx = (size_t)p.BT * p.C, nw = (size_t)p.V * p.C;
	float *l = falloc(p.BT), *dx = falloc(nx), *dw = falloc((size_t)p.Vp * p.C);
	double *x = todouble(p.x, nx), *w = todouble(p.wte, nw), *gx = dalloc(nx);
	double *gw = dalloc(nw), mean = 0.0;

	chunked(&p, l, dx, dw, 1.0f / p.BT, 3);
	for (int r = 0; r < p.BT; r++)
		mean += l[r];
	mean /= p.BT;
	cr_assert(fabs(mean - ref_loss(x, w, p.tg, p.BT, p.C, p.V)) < 1e-5 * fabs(mean),
		  "mean loss %.9g vs double", mean);
	fd(gx, x, nx, x, w, &p);
	fd(gw, w, nw, x, w, &p);
	cr_assert(kc_close("dx vs finite differences", dx, gx, nx, RTOL));
	cr_assert(kc_close("dwte vs finite differences", dw, gw, nw, RTOL));
	free(l), free(dx), free(dw), free(x), free(w), free(gx), free(gw);
	drop(&p);
}

Test(kernels_lmhead, bit_identical_reruns)
{
	struct prob p = make(40, 32, 100, 128, 3);
	size_t nx = (size_t)p.BT * p.C, nw = (size_t)p.Vp * p.C;
	float *l1 = falloc(p.BT), *dx1 = falloc(nx), *dw1 = falloc(nw);
	float *l2 = falloc(p.BT), *dx2 = falloc(nx), *dw2 = falloc(nw);

	chunked(&p, l1, dx1, dw1, 0.025f, 7);
	chunked(&p, l2, dx2, dw2, 0.025f, 7);
	cr_assert(!memcmp(l1, l2, p.BT * sizeof(float)), "losses differ on rerun");
	cr_assert(!memcmp(dx1, dx2, nx * sizeof(float)), "dx differs on rerun");
	cr_assert(!memcmp(dw1, dw2, nw * sizeof(float)), "dwte differs on rerun");
	free(l1), free(dx1), free(dw1), free(l2), free(dx2), free(dw2);
	drop(&p);
}

Test(kernels_lmhead, bad_sizes_refused)
{
	float f = 0.0f;
	int t = 0;

	cr_assert(zn_lmhead_ce_forward(cpu, NULL, &f, &f, &f, &f, &t, 1, 1, 1, 1, 0) == -EINVAL);
	/* Llama 3's padded vocab: a chunk of 16,744 rows would be 2^31 + elements */
	cr_assert(zn_lmhead_ce_forward(cpu, NULL, &f, &f, &f, &f, &t, 20000, 8, 128256, 128256,
				       16744) == -EINVAL);
	cr_assert(zn_lmhead_ce_backward(cpu, NULL, &f, &f, &f, &f, &f, &t, 1.0f, 1, 1, 2, 1,
					1) == -EINVAL); /* Vp < V */
	cr_assert(zn_lmhead_ce_work_count(16743, 128256) > (size_t)INT32_MAX,
		  "work count is computed in 64 bits");
}

/* zn_lmhead_ce_chunk: the rows per chunk for given row counts, vocabularies and work
 * budgets (the figures worked by hand from the rule in kernels/lmhead_ce.h) */
Test(kernels_lmhead, chunk_rows_from_the_budget)
{
	const uint64_t MiB = 1ull << 20, GiB = 1ull << 30;
	const struct {
		int64_t bt;
		int vp;
		uint64_t work;
		int rows;
	} c[] = {
		/* the default 128 MiB at vocab 65536: 256 rows; 264 rows run as 256 + 8 */
		{ 264, 65536, 0, 256 },
		{ 264, 65536, 128 * MiB, 256 },
		/* Llama 3 (128,256): the default holds 130 rows, rounded down to 128 */
		{ 8192, 128256, 0, 128 },
		/* H200-sized: 141 GB / 16 = 8.8 GB holds 8588 rows: the 8192 rows in one chunk */
		{ 8192, 128256, 141000000000ull / 16, 8192 },
		/* 16384 rows, 8 GiB (8371 rows, 8320 after rounding): two balanced chunks */
		{ 16384, 128256, 8 * GiB, 8192 },
		/* 1000 rows, 1 GiB at 128,256 (1046 rows): one chunk of all 1000 */
		{ 1000, 128256, GiB, 1000 },
		/* 3000 rows, 1 GiB: room for 1046 (1024 rounded): 3 chunks of 1000 -> 1024 */
		{ 3000, 128256, GiB, 1024 },
		/* a budget under one quantum: 128 rows, not slivers; fewer rows: all of them */
		{ 1000, 128256, 1, 128 },
		{ 100, 128256, 1, 100 },
		/* the kernels' int limit, 16,743 rows of 128,256 (16,640 rounded): 2^20 rows in 64
		 * chunks, 20000 in 2 */
		{ 1 << 20, 128256, 1ull << 50, 16384 },
		{ 20000, 128256, 1ull << 50, 10112 },
		/* nothing to do */
		{ 0, 128256, 0, 1 },
		{ 10, 0, 0, 1 },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		int rows = zn_lmhead_ce_chunk(c[i].bt, c[i].vp, c[i].work);

		cr_assert_eq(rows, c[i].rows, "case %zu: %lld rows, vocab %d, work %llu: %d, not %d",
			     i, (long long)c[i].bt, c[i].vp, (unsigned long long)c[i].work, rows,
			     c[i].rows);
		cr_assert_leq((int64_t)rows * (c[i].vp > 0 ? c[i].vp : 1), INT32_MAX);
	}
	/* the budget from the device's: 1/16, at least 128 MiB */
	cr_assert_eq(zn_lmhead_ce_work_bytes(0), 128 * MiB);
	cr_assert_eq(zn_lmhead_ce_work_bytes(GiB), 128 * MiB);
	cr_assert_eq(zn_lmhead_ce_work_bytes(16 * GiB), GiB);
}
