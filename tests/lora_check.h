/* Shared by the LoRA tests: a direct runner of a model's ops on the CPU kernel table (no
 * engine): forward over every layer, then backward, giving the mean loss and every layer's
 * gradient, for a reference with merged weights. */
#ifndef ZN_TESTS_LORA_CHECK_H
#define ZN_TESTS_LORA_CHECK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "model/model.h"

struct lc_net {
	int n;
	struct zn_layer_desc *ld;
	float **p, **g, **f; /* trainable params, their grads, frozen params (or NULL) */
};

static inline void lc_net_free(struct lc_net *net)
{
	for (int l = 0; l < net->n; l++) {
		free(net->p[l]);
		free(net->g[l]);
		free(net->f[l]);
	}
	free(net->p);
	free(net->g);
	free(net->f);
	free(net->ld);
	memset(net, 0, sizeof(*net));
}

/* descriptors and seeded initial parameters of every layer */
static inline int lc_net_init(struct lc_net *net, const struct zn_model *m, uint64_t seed)
{
	const void *c = m->config;

	net->n = m->ops->layer_count(c);
	net->ld = calloc((size_t)net->n, sizeof(*net->ld));
	net->p = calloc((size_t)net->n, sizeof(float *));
	net->g = calloc((size_t)net->n, sizeof(float *));
	net->f = calloc((size_t)net->n, sizeof(float *));
	for (int l = 0; l < net->n; l++) {
		struct zn_layer_desc *L = &net->ld[l];
		int rc = m->ops->describe(c, l, L);

		if (rc)
			return rc;
		net->p[l] = calloc(L->numel + 1, sizeof(float));
		net->g[l] = calloc(L->numel + 1, sizeof(float));
		m->ops->init(c, L, 0, L->numel, net->p[l], seed);
		if (L->frozen_numel) {
			net->f[l] = calloc(L->frozen_numel, sizeof(float));
			m->ops->init_frozen(c, L, 0, L->frozen_numel, net->f[l], seed);
		}
	}
	return 0;
}

/* One forward and backward of B x T tokens; grads are zeroed first. Returns the mean loss. */
static inline double lc_net_run(struct lc_net *net, const struct zn_model *m, const int *tok,
				const int *tgt, int B, int T, uint64_t seed)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	const void *c = m->config;
	uint64_t bt = (uint64_t)B * (uint64_t)T, w = (uint64_t)m->ops->width(c);
	int n = net->n;
	float **acts = calloc((size_t)n, sizeof(float *)), **x = calloc((size_t)n, sizeof(float *));
	float *losses = calloc(bt, sizeof(float)), *dx[2], *scratch;
	uint64_t smax = 0;
	double loss = 0;

	for (int l = 0; l < n; l++) {
		uint64_t s = m->ops->scratch_numel(c, &net->ld[l], B, T);

		acts[l] = calloc(m->ops->act_numel(c, &net->ld[l], B, T) + 1, sizeof(float));
		x[l] = calloc(bt * w, sizeof(float));
		memset(net->g[l], 0, (net->ld[l].numel + 1) * sizeof(float));
		smax = s > smax ? s : smax;
	}
	scratch = calloc(smax + 1, sizeof(float));
	dx[0] = calloc(bt * w, sizeof(float));
	dx[1] = calloc(bt * w, sizeof(float));
	for (int l = 0; l < n; l++) {
		struct zn_layer_io io = { .L = &net->ld[l], .params = net->p[l], .acts = acts[l],
					  .scratch = scratch, .tokens = tok, .targets = tgt,
					  .B = B, .T = T, .frozen = net->f[l], .seed = seed };

		if (net->ld[l].tied_layer == 0) {
			io.tied_params = net->p[0];
			io.tied_frozen = net->f[0];
		}
		io.x_in = l ? x[l - 1] : NULL;
		if (l < n - 1)
			io.x_out = x[l];
		else
			io.losses = losses;
		m->ops->forward(k, NULL, c, &io);
	}
	for (uint64_t i = 0; i < bt; i++)
		loss += losses[i];
	for (int l = n - 1, cur = 0; l >= 0; l--) {
		struct zn_layer_io io = { .L = &net->ld[l], .params = net->p[l],
					  .grads = net->g[l], .acts = acts[l], .scratch = scratch,
					  .tokens = tok, .targets = tgt, .B = B, .T = T,
					  .frozen = net->f[l], .seed = seed,
					  .dloss_scale = 1.0f / (float)bt };

		if (net->ld[l].tied_layer == 0) {
			io.tied_params = net->p[0];
			io.tied_grads = net->g[0];
			io.tied_frozen = net->f[0];
		}
		memset(scratch, 0, (smax + 1) * sizeof(float));
		io.x_in = l ? x[l - 1] : NULL;
		if (l < n - 1) {
			io.dx_out = dx[cur];
			cur ^= 1;
		}
		io.dx_in = l ? dx[cur] : NULL;
		m->ops->backward(k, NULL, c, &io);
	}
	for (int l = 0; l < n; l++) {
		free(acts[l]);
		free(x[l]);
	}
	free(acts);
	free(x);
	free(losses);
	free(scratch);
	free(dx[0]);
	free(dx[1]);
	return loss / (double)bt;
}

#endif
