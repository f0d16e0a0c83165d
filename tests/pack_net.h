/* A direct runner of a model's layer ops on the CPU table, fp32 or bf16 compute, for the
 * packed-document tests (test_pack.c, test_pack_bf16.c, test_pack_mask.c): forward and
 * backward of B x T tokens with optional positions, returning the summed loss and
 * accumulating the gradients of d sum(losses). Static functions: test code only, one includer per test. */
#ifndef ZN_TESTS_PACK_NET_H
#define ZN_TESTS_PACK_NET_H

#include <criterion/criterion.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels.h"
#include "model/model.h"

struct net {
	int n;
	bool bf16;
	struct zn_layer_desc *ld;
	float **p, **g;
	uint16_t **p16;
};

/* parameters from the model's init (seed), rounded to bf16 for both paths */
static inline void net_init(struct net *net, const struct zn_model *m, uint64_t seed)
{
	net->n = m->ops->layer_count(m->config);
	net->bf16 = false; /* fp32 compute unless the caller sets it */
	net->ld = calloc((size_t)net->n, sizeof(*net->ld));
	net->p = calloc((size_t)net->n, sizeof(float *));
	net->g = calloc((size_t)net->n, sizeof(float *));
	net->p16 = calloc((size_t)net->n, sizeof(uint16_t *));
	for (int l = 0; l < net->n; l++) {
		uint64_t n;

		cr_assert_eq(m->ops->describe(m->config, l, &net->ld[l]), 0);
		n = net->ld[l].numel;
		net->p[l] = calloc(n + 1, sizeof(float));
		net->g[l] = calloc(n + 1, sizeof(float));
		net->p16[l] = calloc(n + 1, sizeof(uint16_t));
		m->ops->init(m->config, &net->ld[l], 0, n, net->p[l], seed);
		for (uint64_t i = 0; i < n; i++) {
			net->p16[l][i] = zn_f32_to_bf16(net->p[l][i]);
			net->p[l][i] = zn_bf16_to_f32(net->p16[l][i]);
		}
	}
}

static inline void net_zero_grads(struct net *net)
{
	for (int l = 0; l < net->n; l++)
		memset(net->g[l], 0, (net->ld[l].numel + 1) * sizeof(float));
}

static inline void net_free(struct net *net)
{
	for (int l = 0; l < net->n; l++)
		free(net->p[l]), free(net->g[l]), free(net->p16[l]);
	free(net->p), free(net->g), free(net->p16), zn_layer_descs_free(net->ld, net->n);
}

static inline uint64_t act_n(const struct zn_model *m, const struct net *net, int l, int B,
			     int T)
{
	return net->bf16 ? m->ops->act_numel_bf16(m->config, &net->ld[l], B, T) :
			   m->ops->act_numel(m->config, &net->ld[l], B, T);
}

static inline uint64_t scratch_n(const struct zn_model *m, const struct net *net, int l,
				 int B, int T)
{
	return net->bf16 ? m->ops->scratch_numel_bf16(m->config, &net->ld[l], B, T) :
			   m->ops->scratch_numel(m->config, &net->ld[l], B, T);
}

static inline void set_params(struct zn_layer_io *io, const struct net *net, int l)
{
	bool tied = net->ld[l].tied_layer == 0;

	io->params = net->bf16 ? NULL : net->p[l];
	io->params16 = net->bf16 ? net->p16[l] : NULL;
	io->tied_params = tied && !net->bf16 ? net->p[0] : NULL;
	io->tied_params16 = tied && net->bf16 ? net->p16[0] : NULL;
}

/* forward and backward of B x T; returns sum(losses); grads += d sum(losses) */
static inline double net_run(struct net *net, const struct zn_model *m, const int *tok,
			     const int *tgt, const int *pos, int B, int T)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	const void *c = m->config;
	uint64_t bt = (uint64_t)B * T, w = (uint64_t)m->ops->width(c), smax = 0;
	int n = net->n;
	float **acts = calloc((size_t)n, sizeof(float *)), **x = calloc((size_t)n, sizeof(float *));
	float *losses = calloc(bt, sizeof(float)), *dx[2], *scratch;
	double sum = 0;

	for (int l = 0; l < n; l++) {
		uint64_t s = scratch_n(m, net, l, B, T);

		acts[l] = calloc(act_n(m, net, l, B, T) + 1, sizeof(float));
		x[l] = calloc(bt * w, sizeof(float));
		smax = s > smax ? s : smax;
	}
	scratch = calloc(smax + 1, sizeof(float));
	dx[0] = calloc(bt * w, sizeof(float));
	dx[1] = calloc(bt * w, sizeof(float));
	for (int l = 0; l < n; l++) {
		struct zn_layer_io io = { .L = &net->ld[l], .acts = acts[l], .scratch = scratch,
					  .tokens = tok, .targets = tgt, .pos = pos, .B = B,
					  .T = T };

		set_params(&io, net, l);
		io.x_in = l ? x[l - 1] : NULL;
		if (l < n - 1)
			io.x_out = x[l];
		else
			io.losses = losses;
		m->ops->forward(k, NULL, c, &io);
	}
	for (uint64_t i = 0; i < bt; i++)
		sum += losses[i];
	for (int l = n - 1, cur = 0; l >= 0; l--) {
		struct zn_layer_io io = { .L = &net->ld[l], .grads = net->g[l], .acts = acts[l],
					  .scratch = scratch, .tokens = tok, .targets = tgt,
					  .pos = pos, .B = B, .T = T, .dloss_scale = 1.0f };

		set_params(&io, net, l);
		if (net->ld[l].tied_layer == 0)
			io.tied_grads = net->g[0];
		memset(scratch, 0, (smax + 1) * sizeof(float));
		io.x_in = l ? x[l - 1] : NULL;
		if (l < n - 1) {
			io.dx_out = dx[cur];
			cur ^= 1;
		}
		io.dx_in = l ? dx[cur] : NULL;
		m->ops->backward(k, NULL, c, &io);
	}
	for (int l = 0; l < n; l++)
		free(acts[l]), free(x[l]);
	free(acts), free(x), free(losses), free(scratch), free(dx[0]), free(dx[1]);
	return sum;
}

#endif
