/* Choosing the next token from logits (zinc generate, docs/generate.md): greedy (argmax,
 * the lowest id on a tie) at temperature 0, else a draw from softmax(logits / temperature)
 * restricted to the top_k most likely tokens (0: all) and then to the smallest set of the
 * most likely whose probabilities sum to top_p or more (1: all). The draw is a pure function
 * of (seed, step): the same seed gives the same text on any machine and device. */
#ifndef ZN_SCHED_GENERATE_SAMPLE_H
#define ZN_SCHED_GENERATE_SAMPLE_H

#include <stdint.h>

struct zn_sampler {
	float temperature; /* >= 0; 0: greedy */
	int top_k;         /* >= 0; 0: no limit */
	float top_p;       /* (0, 1]; 1: no limit */
	uint64_t seed;
	int vocab;
	int *idx;          /* work: vocab ids sorted by probability */
	double *prob;
};

/* 0, -EINVAL (logged, naming the flag) or -ENOMEM */
int zn_sampler_init(struct zn_sampler *s, float temperature, int top_k, float top_p,
		    uint64_t seed, int vocab);
void zn_sampler_free(struct zn_sampler *s);
/* the token for generation step `step` (0, 1, ...) from logits [vocab] */
int zn_sample(struct zn_sampler *s, const float *logits, uint64_t step);

#endif
