/* Mixture-of-experts routing on the CPU (kernels.h, "mixture of experts"): the router's
 * softmax and top-k, the grouping of token slots by expert, the gather of the routed rows,
 * the weighted combine in a fixed order, and their backward. Every loop runs in a fixed
 * order (parallel only across tokens or slots, each written by one thread), so results do
 * not depend on the thread count. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "ops.h"
#include "par.h"

/* top-k of row p[0 .. E): descending value, the lower expert first on a tie */
static void top_k(int *sel, const float *p, int E, int K)
{
	for (int k = 0; k < K; k++) {
		int best = -1;

		for (int e = 0; e < E; e++) {
			bool taken = false;

			for (int j = 0; j < k; j++)
				taken = taken || sel[j] == e;
			if (!taken && (best < 0 || p[e] > p[best]))
				best = e;
		}
		sel[k] = best;
	}
}

void zn_cpu_moe_route_forward(int *sel, float *w, float *probs, const float *logits, int N,
			      int E, int K, int norm)
{
#pragma omp parallel for schedule(static) if ((int64_t)N * E > ZN_CPU_PAR_MIN)
	for (int t = 0; t < N; t++) {
		const float *x = logits + (int64_t)t * E;
		float *p = probs + (int64_t)t * E, mx = x[0], sum = 0.0f, s = 0.0f;

		for (int e = 1; e < E; e++)
			mx = x[e] > mx ? x[e] : mx;
		for (int e = 0; e < E; e++) {
			p[e] = expf(x[e] - mx);
			sum += p[e];
		}
		for (int e = 0; e < E; e++)
			p[e] /= sum;
		top_k(sel + (int64_t)t * K, p, E, K);
		for (int k = 0; k < K; k++)
			s += p[sel[(int64_t)t * K + k]];
		for (int k = 0; k < K; k++) {
			float v = p[sel[(int64_t)t * K + k]];

			w[(int64_t)t * K + k] = norm ? v / s : v;
		}
	}
}

void zn_cpu_moe_route_backward(float *dlogits, const float *dw, const float *probs,
			       const int *sel, const float *dprob, int N, int E, int K, int norm)
{
#pragma omp parallel for schedule(static) if ((int64_t)N * E > ZN_CPU_PAR_MIN)
	for (int t = 0; t < N; t++) {
		const float *p = probs + (int64_t)t * E, *g = dw + (int64_t)t * K;
		const int *s = sel + (int64_t)t * K;
		float *d = dlogits + (int64_t)t * E, S = 0.0f, gw = 0.0f, dot = 0.0f;

		/* d/dp of the weights: w_k = p_k / S (norm) or p_k */
		for (int e = 0; e < E; e++)
			d[e] = dprob ? dprob[e] : 0.0f;
		for (int k = 0; k < K; k++)
			S += p[s[k]];
		for (int k = 0; k < K; k++)
			gw += g[k] * (p[s[k]] / S);
		for (int k = 0; k < K; k++)
			d[s[k]] += norm ? (g[k] - gw) / S : g[k];
		/* softmax: dlogit_e = p_e (dp_e - sum_j p_j dp_j) */
		for (int e = 0; e < E; e++)
			dot += p[e] * d[e];
		for (int e = 0; e < E; e++)
			d[e] = p[e] * (d[e] - dot);
	}
}

void zn_cpu_moe_dispatch(int *perm, int *pos, int *offsets, const int *sel, int N, int E,
			 int K)
{
	int64_t M = (int64_t)N * K;

	/* a counting sort by expert, stable in token-slot order */
	for (int e = 0; e <= E; e++)
		offsets[e] = 0;
	for (int64_t i = 0; i < M; i++)
		offsets[sel[i] + 1]++;
	for (int e = 0; e < E; e++)
		offsets[e + 1] += offsets[e];
	/* offsets[e] as expert e's cursor, then shifted back to the starts */
	for (int64_t i = 0; i < M; i++) {
		int at = offsets[sel[i]]++;

		perm[at] = (int)i;
		pos[i] = at;
	}
	for (int e = E; e > 0; e--)
		offsets[e] = offsets[e - 1];
	offsets[0] = 0;
}

void zn_cpu_moe_gather(float *out, const float *inp, const int *perm, int M, int K, int C)
{
#pragma omp parallel for schedule(static) if ((int64_t)M * C > ZN_CPU_PAR_MIN)
	for (int i = 0; i < M; i++)
		memcpy(out + (int64_t)i * C, inp + (int64_t)(perm[i] / K) * C,
		       (size_t)C * sizeof(float));
}

void zn_cpu_moe_combine(float *out, const float *y, const int *pos, const int *sel,
			const float *w, int N, int K, int C, int accumulate)
{
#pragma omp parallel for schedule(static) if ((int64_t)N * C > ZN_CPU_PAR_MIN)
	for (int t = 0; t < N; t++) {
		float *o = out + (int64_t)t * C;
		int done = 0;

		if (!accumulate)
			memset(o, 0, (size_t)C * sizeof(float));
		/* the token's slots by ascending expert: the order of a sum over the experts */
		for (int r = 0; r < K; r++) {
			int k = -1;

			for (int j = 0; j < K; j++) {
				int e = sel[(int64_t)t * K + j];

				if (!(done >> j & 1) && (k < 0 || e < sel[(int64_t)t * K + k]))
					k = j;
			}
			done |= 1 << k;
			{
				const float *yr = y + (int64_t)pos[(int64_t)t * K + k] * C;
				float s = w ? w[(int64_t)t * K + k] : 1.0f;

				for (int c = 0; c < C; c++)
					o[c] += s * yr[c];
			}
		}
	}
}

void zn_cpu_moe_scatter_dout(float *dy, float *dw, const float *dout, const float *y,
			     const float *w, const int *perm, int M, int K, int C)
{
#pragma omp parallel for schedule(static) if ((int64_t)M * C > ZN_CPU_PAR_MIN)
	for (int i = 0; i < M; i++) {
		int slot = perm[i];
		const float *g = dout + (int64_t)(slot / K) * C, *yr = y + (int64_t)i * C;
		float *d = dy + (int64_t)i * C, s = w[slot], acc = 0.0f;

		for (int c = 0; c < C; c++) {
			d[c] = s * g[c];
			acc += g[c] * yr[c];
		}
		dw[slot] = acc;
	}
}

void zn_cpu_moe_aux_stats(float *acc, const float *probs, const int *sel, int N, int E, int K)
{
	for (int64_t i = 0; i < (int64_t)N * K; i++)
		acc[sel[i]] += 1.0f;
#pragma omp parallel for schedule(static) if ((int64_t)N * E > ZN_CPU_PAR_MIN)
	for (int e = 0; e < E; e++) {
		float s = 0.0f;

		for (int t = 0; t < N; t++)
			s += probs[(int64_t)t * E + e];
		acc[E + e] += s;
	}
}

void zn_cpu_moe_aux_finish(float *loss, float *dprob, const float *acc, int E, float ntot,
			   float scale)
{
	float l = 0.0f;

	for (int e = 0; e < E; e++) {
		l += (acc[e] / ntot) * (acc[E + e] / ntot);
		if (dprob)
			dprob[e] = scale * (float)E * acc[e] / (ntot * ntot);
	}
	if (loss)
		loss[0] = (float)E * l;
}
