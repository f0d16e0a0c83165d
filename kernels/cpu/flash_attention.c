/* Fused causal grouped-query attention, the FlashAttention-2 algorithm (CPU reference).
 *
 * qkv [B,T,S], S = (NH + 2 KV) hd, the layout of gqa_attention (GPT-2's [B,T,3C] is the
 * case KV = NH, hd = C/NH): query head h at channel h*hd, its key and value head
 * g = h / (NH/KV) at (NH+g)*hd and (NH+KV+g)*hd. out [B,T,NH*hd]; lse [B,NH,T] is the
 * only saved statistic: lse = m + log(l) of each query row's scores q.k/sqrt(hd) over the
 * visible keys: t2 <= t and, with window > 0, t - t2 < window (Mistral's sliding window,
 * as gqa_attention masks it). Key tiles wholly outside a query tile's window are skipped
 * (window 0: every tile from 0, the same loops as without a window). No [T,T] buffer exists: scores live in one ZN_FLASH_TILE^2 tile per thread.
 *
 * Forward, one (b, h, query tile) per task: for key tiles in order, the tile's scores, the
 * running row max m and sum l (the online softmax: earlier partial sums rescaled by
 * exp(m_old - m_new)), and out += P V accumulated in out's own rows; finally out /= l.
 *
 * Backward recomputes P = exp(S - lse) tile by tile. Three passes, each output row summed
 * by one task in a fixed order (no atomics, bit-identical reruns): drow[b,h,t] =
 * sum(dout * out); per (b, g, key tile) dK and dV over the group's query heads in order,
 * then query tiles in order; per (b, h, query tile) dQ over key tiles in order. dS =
 * P (dP - drow) with dP = dout . v.
 *
 * Packed documents (the _doc ops, docs/packing.md): pos [B,T] is each token's position in
 * its document (0 at a document's first token, +1 after), so t - pos[t] is the first
 * token of t's document and key t2 is visible from t only when t - pos[t] <= t2 as well.
 * Documents are contiguous: t - pos[t] never decreases along a row, which bounds the key
 * tiles a query tile sees (from its first row's document start) and the query tiles a
 * key tile is seen by (up to the end of its last key's document). pos NULL: plain causal.
 */
#include "ops.h"

#include <math.h>

#include "par.h"

#define TILE ZN_FLASH_TILE

struct fl {
	const int *pos; /* [T] of the current batch row, or NULL */
	int T, NH, KV, hd, G, window;
	long S, C; /* row strides of qkv and out */
	float scale;
};

static struct fl fl_make(int T, int NH, int KV, int hd, int window)
{
	struct fl a = { NULL, T, NH, KV, hd, NH / KV, window, (long)(NH + 2 * KV) * hd, (long)NH * hd,
			(float)(1.0 / sqrt((double)hd)) };

	return a;
}

static float dot(const float *x, const float *y, int n)
{
	float s = 0.0f;

	for (int i = 0; i < n; i++)
		s += x[i] * y[i];
	return s;
}

static int imin(int a, int b)
{
	return a < b ? a : b;
}

static int visible(const struct fl *a, int t, int t2)
{
	return t2 <= t && (a->window <= 0 || t - t2 < a->window) &&
	       (!a->pos || t2 >= t - a->pos[t]);
}

/* first key tile a query tile starting at i0 sees (0 without a window) */
static int first_key_tile(const struct fl *a, int i0)
{
	int j = a->window > 0 ? i0 - a->window + 1 : 0;

	if (a->pos && i0 - a->pos[i0] > j)
		j = i0 - a->pos[i0]; /* the document of row i0 starts there */
	return j <= 0 ? 0 : j - j % TILE;
}

/* end (exclusive) of the query rows that see a key tile ending at key j1 - 1 */
static int query_end(const struct fl *a, int j1)
{
	int end = a->T;

	if (a->window > 0 && (long)j1 - 1 + a->window < a->T)
		end = j1 - 1 + a->window;
	if (a->pos) /* the end of key j1 - 1's document */
		for (int t = j1; t < end; t++)
			if (t - a->pos[t] > j1 - 1)
				return t;
	return end;
}

/* s[r][c] = q_(i0+r) . k_(j0+c) * scale for the visible pairs, -INFINITY elsewhere */
static void scores(float *s, const float *q, const float *k, const struct fl *a, int i0,
		   int ni, int j0, int nj)
{
	for (int r = 0; r < ni; r++)
		for (int c = 0; c < nj; c++)
			s[r * TILE + c] = visible(a, i0 + r, j0 + c) ?
				dot(q + (long)(i0 + r) * a->S, k + (long)(j0 + c) * a->S, a->hd) *
					a->scale :
				-INFINITY;
}

/* one (b, h, query tile i0..i0+ni): x is qkv of batch b, o and ls are out and lse of it */
static void fwd_tile(float *o, float *ls, const float *x, const struct fl *a, int h, int i0,
		     int ni)
{
	int g = h / a->G, hd = a->hd;
	const float *q = x + (long)h * hd, *k = x + (long)(a->NH + g) * hd;
	const float *v = x + (long)(a->NH + a->KV + g) * hd;
	float s[TILE * TILE], m[TILE], l[TILE];

	for (int r = 0; r < ni; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
		for (int i = 0; i < hd; i++)
			o[(long)(i0 + r) * a->C + i] = 0.0f;
	}
	for (int j0 = first_key_tile(a, i0); j0 <= i0 + ni - 1; j0 += TILE) {
		int nj = imin(TILE, a->T - j0);

		scores(s, q, k, a, i0, ni, j0, nj);
		for (int r = 0; r < ni; r++) {
			float *sr = s + r * TILE, mx = m[r], sum = 0.0f;
			float *orow = o + (long)(i0 + r) * a->C;

			for (int c = 0; c < nj; c++)
				if (sr[c] > mx)
					mx = sr[c];
			if (mx == -INFINITY)
				continue; /* no visible key in this tile */
			float alpha = expf(m[r] - mx); /* 0 on the first visible tile */

			for (int c = 0; c < nj; c++) {
				sr[c] = expf(sr[c] - mx);
				sum += sr[c];
			}
			l[r] = l[r] * alpha + sum;
			m[r] = mx;
			for (int i = 0; i < hd; i++)
				orow[i] *= alpha;
			for (int c = 0; c < nj; c++) {
				const float *vr = v + (long)(j0 + c) * a->S;

				if (sr[c] != 0.0f)
					for (int i = 0; i < hd; i++)
						orow[i] += sr[c] * vr[i];
			}
		}
	}
	for (int r = 0; r < ni; r++) {
		float inv = 1.0f / l[r]; /* l >= 1: the max term is exp(0) */

		for (int i = 0; i < hd; i++)
			o[(long)(i0 + r) * a->C + i] *= inv;
		ls[i0 + r] = m[r] + logf(l[r]);
	}
}

void zn_cpu_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T,
				    int NH, int KV, int hd, int window)
{
	zn_cpu_flash_attention_doc_forward(out, lse, qkv, NULL, B, T, NH, KV, hd, window);
}

void zn_cpu_flash_attention_doc_forward(float *out, float *lse, const float *qkv,
					const int *pos, int B, int T, int NH, int KV, int hd,
					int window)
{
	struct fl a0 = fl_make(T, NH, KV, hd, window);
	long nt = (T + TILE - 1) / TILE, n = (long)B * NH * nt;

#pragma omp parallel for schedule(dynamic, 1) if ((long)B * NH * T * T * hd > ZN_CPU_PAR_MIN)
	for (long j = 0; j < n; j++) {
		int it = (int)(j % nt);
		int h = (int)(j / nt % NH);
		long b = j / nt / NH;
		int i0 = it * TILE;
		struct fl a = a0;

		a.pos = pos ? pos + b * T : NULL;
		fwd_tile(out + b * T * a.C + (long)h * hd, lse + (b * NH + h) * T,
			 qkv + b * T * a.S, &a, h, i0, imin(TILE, T - i0));
	}
}

/* p = exp(s - lse) (0 where masked) and ds = p (dP - drow), dP = dout . v, for a tile */
static void bwd_tile_p(float *p, float *ds, const float *q, const float *k, const float *v,
		       const float *d, const float *ls, const float *dr, const struct fl *a,
		       int i0, int ni, int j0, int nj)
{
	scores(p, q, k, a, i0, ni, j0, nj);
	for (int r = 0; r < ni; r++) {
		const float *dd = d + (long)(i0 + r) * a->C;

		for (int c = 0; c < nj; c++) {
			float pv = expf(p[r * TILE + c] - ls[i0 + r]); /* exp(-inf) = 0 */
			float dp = pv != 0.0f ? dot(dd, v + (long)(j0 + c) * a->S, a->hd) : 0.0f;

			p[r * TILE + c] = pv;
			ds[r * TILE + c] = pv * (dp - dr[i0 + r]);
		}
	}
}

/* one (b, g, key tile j0..j0+nj): dk, dv rows of the tile (x, dx, d at batch b) */
static void bwd_kv_tile(float *dx, const float *x, const float *d, const float *ls,
			const float *dr, const struct fl *a, int g, int j0, int nj)
{
	int hd = a->hd;
	const float *k = x + (long)(a->NH + g) * hd, *v = x + (long)(a->NH + a->KV + g) * hd;
	float *dk = dx + (long)(a->NH + g) * hd, *dv = dx + (long)(a->NH + a->KV + g) * hd;
	float p[TILE * TILE], ds[TILE * TILE];

	for (int h = g * a->G; h < (g + 1) * a->G; h++) {
		const float *q = x + (long)h * hd, *dh = d + (long)h * hd;
		const float *lh = ls + (long)h * a->T, *drh = dr + (long)h * a->T;

		int iend = query_end(a, j0 + nj);

		for (int i0 = j0 - j0 % TILE; i0 < iend; i0 += TILE) {
			int ni = imin(TILE, a->T - i0);

			bwd_tile_p(p, ds, q, k, v, dh, lh, drh, a, i0, ni, j0, nj);
			for (int c = 0; c < nj; c++) {
				float *dkr = dk + (long)(j0 + c) * a->S;
				float *dvr = dv + (long)(j0 + c) * a->S;

				for (int r = 0; r < ni; r++) {
					float pv = p[r * TILE + c], gs = ds[r * TILE + c] * a->scale;
					const float *qr = q + (long)(i0 + r) * a->S;
					const float *dd = dh + (long)(i0 + r) * a->C;

					if (pv == 0.0f)
						continue;
					for (int i = 0; i < hd; i++) {
						dvr[i] += pv * dd[i];
						dkr[i] += gs * qr[i];
					}
				}
			}
		}
	}
}

/* one (b, h, query tile): dq rows of the tile */
static void bwd_q_tile(float *dx, const float *x, const float *d, const float *ls,
		       const float *dr, const struct fl *a, int h, int i0, int ni)
{
	int g = h / a->G, hd = a->hd;
	const float *q = x + (long)h * hd, *k = x + (long)(a->NH + g) * hd;
	const float *v = x + (long)(a->NH + a->KV + g) * hd;
	const float *dh = d + (long)h * hd;
	float *dq = dx + (long)h * hd;
	float p[TILE * TILE], ds[TILE * TILE];

	for (int j0 = first_key_tile(a, i0); j0 <= i0 + ni - 1; j0 += TILE) {
		int nj = imin(TILE, a->T - j0);

		bwd_tile_p(p, ds, q, k, v, dh, ls, dr, a, i0, ni, j0, nj);
		for (int r = 0; r < ni; r++) {
			float *dqr = dq + (long)(i0 + r) * a->S;

			for (int c = 0; c < nj; c++) {
				float gs = ds[r * TILE + c] * a->scale;
				const float *kr = k + (long)(j0 + c) * a->S;

				if (p[r * TILE + c] == 0.0f)
					continue;
				for (int i = 0; i < hd; i++)
					dqr[i] += gs * kr[i];
			}
		}
	}
}

void zn_cpu_flash_attention_backward(float *dqkv, float *drow, const float *dout,
				     const float *qkv, const float *out, const float *lse, int B,
				     int T, int NH, int KV, int hd, int window)
{
	zn_cpu_flash_attention_doc_backward(dqkv, drow, dout, qkv, out, lse, NULL, B, T, NH, KV,
					    hd, window);
}

void zn_cpu_flash_attention_doc_backward(float *dqkv, float *drow, const float *dout,
					 const float *qkv, const float *out, const float *lse,
					 const int *pos, int B, int T, int NH, int KV, int hd,
					 int window)
{
	struct fl a = fl_make(T, NH, KV, hd, window);
	long nt = (T + TILE - 1) / TILE, n = (long)B * NH * T;
	long work = (long)B * NH * T * T * hd;

#pragma omp parallel for schedule(static) if (n * hd > ZN_CPU_PAR_MIN)
	for (long j = 0; j < n; j++) {
		int t = (int)(j % T);
		int h = (int)(j / T % NH);
		long b = j / T / NH, o = (b * T + t) * a.C + (long)h * hd;

		drow[j] = dot(dout + o, out + o, hd);
	}
	long m = (long)B * KV * nt;

#pragma omp parallel for schedule(dynamic, 1) if (work > ZN_CPU_PAR_MIN)
	for (long j = 0; j < m; j++) {
		int jt = (int)(j % nt);
		int g = (int)(j / nt % KV);
		long b = j / nt / KV;
		int j0 = jt * TILE;
		struct fl ab = a;

		ab.pos = pos ? pos + b * T : NULL;
		bwd_kv_tile(dqkv + b * T * a.S, qkv + b * T * a.S, dout + b * T * a.C,
			    lse + b * NH * T, drow + b * NH * T, &ab, g, j0, imin(TILE, T - j0));
	}
	long q = (long)B * NH * nt;

#pragma omp parallel for schedule(dynamic, 1) if (work > ZN_CPU_PAR_MIN)
	for (long j = 0; j < q; j++) {
		int it = (int)(j % nt);
		int h = (int)(j / nt % NH);
		long b = j / nt / NH;
		int i0 = it * TILE;
		struct fl ab = a;

		ab.pos = pos ? pos + b * T : NULL;
		bwd_q_tile(dqkv + b * T * a.S, qkv + b * T * a.S, dout + b * T * a.C,
			   lse + (b * NH + h) * T, drow + (b * NH + h) * T, &ab, h, i0,
			   imin(TILE, T - i0));
	}
}
