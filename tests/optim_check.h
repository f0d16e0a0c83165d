/* Test-only helpers shared by test_kernels_optim.c and test_gpu_optim.c: a seeded AdamW
 * state (master, m, v, grad; never zeros), the hyperparameters of a step, and comparisons
 * that print the worst element. Static so each test executable carries its own copy.
 */
#ifndef ZN_TESTS_OPTIM_CHECK_H
#define ZN_TESTS_OPTIM_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_check.h"

struct oc_state {
	size_t n;
	float *master, *m, *v, *grad;
	uint16_t *out; /* bf16 parameter copy, starts as garbage */
};

static inline void oc_state_init(struct oc_state *s, size_t n, uint64_t seed)
{
	struct kc_rng r = { seed };
	size_t b = (n ? n : 1) * sizeof(float);

	s->n = n;
	s->master = malloc(b);
	s->m = malloc(b);
	s->v = malloc(b);
	s->grad = malloc(b);
	s->out = malloc((n ? n : 1) * sizeof(uint16_t));
	if (!s->master || !s->m || !s->v || !s->grad || !s->out)
		abort();
	kc_fill(&r, s->master, n, -1.0f, 1.0f);
	kc_fill(&r, s->m, n, -1e-2f, 1e-2f);
	kc_fill(&r, s->v, n, 1e-8f, 1e-4f);
	kc_fill(&r, s->grad, n, -1e-1f, 1e-1f);
	memset(s->out, 0x5a, n * sizeof(uint16_t));
}

static inline void oc_state_copy(struct oc_state *d, const struct oc_state *s)
{
	oc_state_init(d, s->n, 1);
	memcpy(d->master, s->master, s->n * sizeof(float));
	memcpy(d->m, s->m, s->n * sizeof(float));
	memcpy(d->v, s->v, s->n * sizeof(float));
	memcpy(d->grad, s->grad, s->n * sizeof(float));
	memcpy(d->out, s->out, s->n * sizeof(uint16_t));
}

static inline void oc_state_free(struct oc_state *s)
{
	free(s->master);
	free(s->m);
	free(s->v);
	free(s->grad);
	free(s->out);
}

/* new gradients for the next step (the state's other arrays carry over) */
static inline void oc_regrad(struct oc_state *s, uint64_t seed)
{
	struct kc_rng r = { seed };

	kc_fill(&r, s->grad, s->n, -1e-1f, 1e-1f);
}

/* a step with large-ish lr and decay so every term of the update matters */
static inline struct zn_kernel_adamw oc_hparams(int64_t step, float weight_decay)
{
	return (struct zn_kernel_adamw){ .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f,
					 .eps = 1e-8f, .weight_decay = weight_decay,
					 .grad_scale = 0.75f, .step = step };
}

/* 1 when a and b hold the same bits, else 0 after printing the first difference */
static inline int oc_same_bits(const char *what, const void *a, const void *b, size_t n,
			       size_t elem_bytes)
{
	for (size_t i = 0; i < n; i++) {
		const char *x = (const char *)a + i * elem_bytes;
		const char *y = (const char *)b + i * elem_bytes;

		if (memcmp(x, y, elem_bytes)) {
			uint32_t u = 0, w = 0;

			memcpy(&u, x, elem_bytes);
			memcpy(&w, y, elem_bytes);
			fprintf(stderr, "%s: element %zu of %zu differs: 0x%x vs 0x%x\n", what, i,
				n, u, w);
			return 0;
		}
	}
	return 1;
}

#endif
