/* Shared by the LoRA tests: a direct runner of a model's ops on the CPU kernel table (no
 * engine): forward over every layer, then backward, giving the mean loss and every layer's
 * gradient, for a reference with merged weights. */
#ifndef ZN_TESTS_LORA_CHECK_H
#define ZN_TESTS_LORA_CHECK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
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
	zn_layer_descs_free(net->ld, net->n);
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

/* layer l's io with bf16 compute: params16 and the frozen base as bf16 values */
static inline void lc_io16(struct zn_layer_io *io, uint16_t **p16, uint16_t **f16, int l,
			   int tied)
{
	io->params = io->tied_params = NULL;
	io->params16 = p16[l];
	io->tied_params16 = tied ? p16[0] : NULL;
	io->frozen = io->frozen ? (const float *)(const void *)f16[l] : NULL;
	io->tied_frozen = tied ? (const float *)(const void *)f16[0] : NULL;
}

/* One forward and backward of B x T tokens; grads are zeroed first. Returns the mean loss.
 * bf16: as the engine's bf16 compute (params16, the frozen base as bf16 values, the bf16
 * activation and scratch sizes): the parameters are rounded to bf16 copies first. */
static inline double lc_net_run_any(struct lc_net *net, const struct zn_model *m,
				    const int *tok, const int *tgt, int B, int T, uint64_t seed,
				    int bf16)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	const void *c = m->config;
	uint64_t bt = (uint64_t)B * (uint64_t)T, w = (uint64_t)m->ops->width(c);
	int n = net->n;
	float **acts = calloc((size_t)n, sizeof(float *)), **x = calloc((size_t)n, sizeof(float *));
	float *losses = calloc(bt, sizeof(float)), *dx[2], *scratch;
	uint16_t **p16 = calloc((size_t)n, sizeof(uint16_t *));
	uint16_t **f16 = calloc((size_t)n, sizeof(uint16_t *));
	uint64_t smax = 0;
	double loss = 0;

	for (int l = 0; l < n; l++) {
		uint64_t s = (bf16 ? m->ops->scratch_numel_bf16 : m->ops->scratch_numel)(
			c, &net->ld[l], B, T);
		uint64_t an = (bf16 ? m->ops->act_numel_bf16 : m->ops->act_numel)(c, &net->ld[l],
										    B, T);

		acts[l] = calloc(an + 1, sizeof(float));
		if (bf16) {
			p16[l] = calloc(net->ld[l].numel + 1, 2);
			zn_cast_f32_to_bf16(p16[l], net->p[l], net->ld[l].numel);
			f16[l] = calloc(net->ld[l].frozen_numel + 1, 2);
			if (net->f[l])
				zn_cast_f32_to_bf16(f16[l], net->f[l], net->ld[l].frozen_numel);
		}
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
		if (bf16)
			lc_io16(&io, p16, f16, l, net->ld[l].tied_layer == 0);
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
		if (bf16)
			lc_io16(&io, p16, f16, l, net->ld[l].tied_layer == 0);
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
		free(p16[l]);
		free(f16[l]);
	}
	free(p16);
	free(f16);
	free(acts);
	free(x);
	free(losses);
	free(scratch);
	free(dx[0]);
	free(dx[1]);
	return loss / (double)bt;
}

static inline double lc_net_run(struct lc_net *net, const struct zn_model *m, const int *tok,
				const int *tgt, int B, int T, uint64_t seed)
{
	return lc_net_run_any(net, m, tok, tgt, B, T, seed, 0);
}

#endif
