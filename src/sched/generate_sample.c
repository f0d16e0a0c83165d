/* Greedy, temperature, top-k and top-p sampling (generate_sample.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "core/hash.h"
#include "core/log.h"
#include "sched/generate_sample.h"

int zn_sampler_init(struct zn_sampler *s, float temperature, int top_k, float top_p,
		    uint64_t seed, int vocab)
{
	*s = (struct zn_sampler){ temperature, top_k, top_p, seed, vocab, NULL, NULL };
	if (!(temperature >= 0.0f) || !isfinite(temperature)) {
		zn_error("zinc generate: --temperature %g: give 0 (greedy) or a positive number",
			 (double)temperature);
		return -EINVAL;
	}
	if (top_k < 0) {
		zn_error("zinc generate: --top-k %d: give 0 (no limit) or a positive count", top_k);
		return -EINVAL;
	}
	if (!(top_p > 0.0f && top_p <= 1.0f)) {
		zn_error("zinc generate: --top-p %g: give a probability in (0, 1] (1: no limit)",
			 (double)top_p);
		return -EINVAL;
	}
	s->idx = malloc(sizeof(int) * (size_t)vocab);
	s->prob = malloc(sizeof(double) * (size_t)vocab);
	if (!s->idx || !s->prob) {
		zn_sampler_free(s);
		return -ENOMEM;
	}
	return 0;
}

void zn_sampler_free(struct zn_sampler *s)
{
	free(s->idx);
	free(s->prob);
	s->idx = NULL;
	s->prob = NULL;
}

static const double *g_prob; /* qsort's comparison reads it; one thread */

static int by_prob(const void *a, const void *b)
{
	int i = *(const int *)a, j = *(const int *)b;

	if (g_prob[i] != g_prob[j])
		return g_prob[i] > g_prob[j] ? -1 : 1;
	return i < j ? -1 : i > j;
}

static int argmax(const float *x, int n)
{
	int best = 0;

	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

int zn_sample(struct zn_sampler *s, const float *logits, uint64_t step)
{
	const int V = s->vocab;
	double mx, sum = 0.0, u, acc = 0.0;
	int keep = V;

	if (s->temperature == 0.0f)
		return argmax(logits, V);
	mx = logits[argmax(logits, V)];
	for (int i = 0; i < V; i++) {
		s->prob[i] = exp(((double)logits[i] - mx) / (double)s->temperature);
		s->idx[i] = i;
	}
	g_prob = s->prob;
	qsort(s->idx, (size_t)V, sizeof(int), by_prob);
	if (s->top_k > 0 && s->top_k < keep)
		keep = s->top_k;
	for (int i = 0; i < keep; i++)
		sum += s->prob[s->idx[i]];
	if (s->top_p < 1.0f) {
		double c = 0.0;

		for (int i = 0; i < keep; i++) {
			c += s->prob[s->idx[i]] / sum;
			if (c >= (double)s->top_p) {
				keep = i + 1;
				break;
			}
		}
		sum = 0.0;
		for (int i = 0; i < keep; i++)
			sum += s->prob[s->idx[i]];
	}
	/* 53 random bits from (seed, step) */
	u = (double)(zn_hash_seeded(zn_hash_seeded(s->seed, 0) ^ step, 0) >> 11) * (1.0 / 9007199254740992.0) * sum;
	for (int i = 0; i < keep; i++) {
		acc += s->prob[s->idx[i]];
		if (u < acc)
			return s->idx[i];
	}
	return s->idx[keep - 1];
}
