/* A second model family, implemented in the tests: the engine must train it through
 * struct zn_model_ops (src/model/model.h) alone. Tiny, untied, plain C loops (host device
 * only: the layer calls run on the host stream's worker and read host memory).
 *
 *   layer 0          embed [V, C]:         x = E[token]
 *   layers 1 .. N    w [C], b [C]:         x' = x + tanh(w * x + b)   (elementwise)
 *   layer N + 1      head [V, C], bias [V] losses = cross-entropy(x head^T + bias, target)
 *
 * No tied layer (tied_layer -1 everywhere): the engine must pass no tied parameters. No
 * activations kept (the backward recomputes from x_in); the last layer's scratch holds the
 * logits [B, T, V]. toy_host_step is the naive reference: the whole model on host buffers
 * through the same layer functions, then zinc's CPU AdamW per tensor.
 */
#ifndef ZN_TESTS_TOY_MODEL_H
#define ZN_TESTS_TOY_MODEL_H

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/adamw.h"
#include "model/model.h"

struct toy_config {
	int blocks, width, vocab, seq;
	int tie_to;           /* tests: the last layer's tied_layer (-1: untied) */
};

static atomic_int toy_saw_tied; /* a layer call got tied parameters */

static int toy_validate(const void *c)
{
	const struct toy_config *t = c;

	return t->blocks >= 0 && t->width > 0 && t->vocab > 1 && t->seq > 0 ? 0 : -EINVAL;
}

static int toy_layer_count(const void *c)
{
	return ((const struct toy_config *)c)->blocks + 2;
}

static void toy_tensor(struct zn_layer_desc *L, const char *name, int64_t rows, int64_t cols,
		       bool decay)
{
	struct zn_tensor_desc *t = zn_layer_desc_add(L);

	if (!t)
		return;
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->ndim = cols ? 2 : 1;
	t->shape[0] = t->file_shape[0] = rows;
	t->shape[1] = t->file_shape[1] = cols;
	t->offset = L->numel;
	t->numel = (uint64_t)rows * (uint64_t)(cols ? cols : 1);
	t->decay = decay;
	L->numel += t->numel;
}

static int toy_describe(const void *c, int l, struct zn_layer_desc *L)
{
	const struct toy_config *t = c;
	char name[64];

	memset(L, 0, sizeof(*L));
	L->index = l;
	L->tied_layer = -1;
	if (l == 0) {
		toy_tensor(L, "toy.embed.weight", t->vocab, t->width, true);
	} else if (l <= t->blocks) {
		L->kind = 1;
		snprintf(name, sizeof(name), "toy.h.%d.w", l - 1);
		toy_tensor(L, name, t->width, 0, true);
		snprintf(name, sizeof(name), "toy.h.%d.b", l - 1);
		toy_tensor(L, name, t->width, 0, false);
	} else {
		L->kind = 2;
		L->tied_layer = t->tie_to;
		toy_tensor(L, "toy.head.weight", t->vocab, t->width, true);
		toy_tensor(L, "toy.head.bias", t->vocab, 0, false);
	}
	return zn_layer_desc_done(L);
}

static int toy_max_seq(const void *c) { return ((const struct toy_config *)c)->seq; }
static int toy_vocab(const void *c) { return ((const struct toy_config *)c)->vocab; }
static int toy_width(const void *c) { return ((const struct toy_config *)c)->width; }

static uint64_t toy_act_numel(const void *c, const struct zn_layer_desc *L, int B, int T)
{
	return 0;
}

static uint64_t toy_scratch_numel(const void *c, const struct zn_layer_desc *L, int B, int T)
{
	const struct toy_config *t = c;

	return L->kind == 2 ? (uint64_t)B * T * t->vocab : 0;
}

/* element i of layer l: a fixed hash in [-0.5, 0.5) x 0.5, the same for any split */
static void toy_init(const void *c, const struct zn_layer_desc *L, uint64_t first,
		     uint64_t count, float *out, uint64_t seed)
{
	for (uint64_t j = 0; j < count; j++) {
		uint64_t i = first + j, z = seed * 0x9e3779b97f4a7c15ull + (uint64_t)L->index *
			     0xbf58476d1ce4e5b9ull + i * 0x94d049bb133111ebull;

		z ^= z >> 31;
		z *= 0xd6e8feb86659fd93ull;
		z ^= z >> 29;
		out[j] = i < L->numel ? (float)((double)(z >> 11) * 0x1.0p-53 - 0.5) * 0.5f : 0.0f;
	}
}

static void toy_logits(const struct toy_config *t, const struct zn_layer_io *io, int bt,
		       float *z)
{
	const float *W = io->params, *bias = io->params + (uint64_t)t->vocab * t->width;
	const float *x = io->x_in + (uint64_t)bt * t->width;

	for (int v = 0; v < t->vocab; v++) {
		double s = bias[v];

		for (int c2 = 0; c2 < t->width; c2++)
			s += (double)W[v * t->width + c2] * x[c2];
		z[v] = (float)s;
	}
}

static void toy_forward(const struct zn_kernel_table *k, void *stream, const void *c,
			const struct zn_layer_io *io)
{
	const struct toy_config *t = c;
	int C = t->width, n = io->B * io->T;

	if (io->tied_params || io->tied_grads)
		atomic_store(&toy_saw_tied, 1);
	for (int bt = 0; bt < n; bt++) {
		const float *x = io->x_in ? io->x_in + (uint64_t)bt * C : NULL;

		if (io->L->kind == 0) {
			memcpy(io->x_out + (uint64_t)bt * C, io->params + (uint64_t)io->tokens[bt] * C,
			       C * sizeof(float));
		} else if (io->L->kind == 1) {
			for (int i = 0; i < C; i++)
				io->x_out[(uint64_t)bt * C + i] =
					x[i] + tanhf(io->params[i] * x[i] + io->params[C + i]);
		} else {
			float *z = io->scratch + (uint64_t)bt * t->vocab;
			double mx = -INFINITY, se = 0.0;

			toy_logits(t, io, bt, z);
			for (int v = 0; v < t->vocab; v++)
				mx = z[v] > mx ? z[v] : mx;
			for (int v = 0; v < t->vocab; v++)
				se += exp(z[v] - mx);
			io->losses[bt] = (float)(mx + log(se) - z[io->targets[bt]]);
		}
	}
}

static void toy_backward(const struct zn_kernel_table *k, void *stream, const void *c,
			 const struct zn_layer_io *io)
{
	const struct toy_config *t = c;
	int C = t->width, V = t->vocab, n = io->B * io->T;

	if (io->tied_params || io->tied_grads)
		atomic_store(&toy_saw_tied, 1);
	for (int bt = 0; bt < n; bt++) {
		const float *x = io->x_in ? io->x_in + (uint64_t)bt * C : NULL;

		if (io->L->kind == 0) {
			for (int i = 0; i < C; i++)
				io->grads[(uint64_t)io->tokens[bt] * C + i] +=
					io->dx_out[(uint64_t)bt * C + i];
		} else if (io->L->kind == 1) {
			for (int i = 0; i < C; i++) {
				float w = io->params[i], th = tanhf(w * x[i] + io->params[C + i]);
				float dy = io->dx_out[(uint64_t)bt * C + i];
				float dh = dy * (1.0f - th * th);

				io->grads[i] += dh * x[i];
				io->grads[C + i] += dh;
				io->dx_in[(uint64_t)bt * C + i] = dy + dh * w;
			}
		} else {
			float *z = io->scratch + (uint64_t)bt * V;
			const float *W = io->params;
			double mx = -INFINITY, se = 0.0;

			toy_logits(t, io, bt, z);
			for (int v = 0; v < V; v++)
				mx = z[v] > mx ? z[v] : mx;
			for (int v = 0; v < V; v++)
				se += exp(z[v] - mx);
			for (int i = 0; i < C; i++)
				io->dx_in[(uint64_t)bt * C + i] = 0.0f;
			for (int v = 0; v < V; v++) {
				float d = (float)(exp(z[v] - mx) / se) - (v == io->targets[bt]);

				d *= io->dloss_scale;
				for (int i = 0; i < C; i++) {
					io->grads[(uint64_t)v * C + i] += d * x[i];
					io->dx_in[(uint64_t)bt * C + i] += d * W[(uint64_t)v * C + i];
				}
				io->grads[(uint64_t)V * C + v] += d;
			}
		}
	}
}

static const struct zn_model_ops toy_ops = {
	.family = "toy",
	.validate = toy_validate,
	.layer_count = toy_layer_count,
	.describe = toy_describe,
	.max_seq = toy_max_seq,
	.vocab = toy_vocab,
	.width = toy_width,
	.act_numel = toy_act_numel,
	.scratch_numel = toy_scratch_numel,
	.init = toy_init,
	.forward = toy_forward,
	.backward = toy_backward,
};

/* ---- the naive reference: whole model on host buffers, then AdamW per tensor ---------- */

struct toy_host {
	const struct toy_config *t;
	int n;
	struct zn_layer_desc *ld;
	float **p, **g, **m, **v;
};

static inline int toy_host_create(struct toy_host *h, const struct toy_config *t, uint64_t seed)
{
	memset(h, 0, sizeof(*h));
	h->t = t;
	h->n = toy_layer_count(t);
	h->ld = calloc(h->n, sizeof(*h->ld));
	h->p = calloc(h->n, sizeof(float *));
	h->g = calloc(h->n, sizeof(float *));
	h->m = calloc(h->n, sizeof(float *));
	h->v = calloc(h->n, sizeof(float *));
	for (int l = 0; l < h->n; l++) {
		toy_describe(t, l, &h->ld[l]);
		h->p[l] = calloc(h->ld[l].numel, sizeof(float));
		h->g[l] = calloc(h->ld[l].numel, sizeof(float));
		h->m[l] = calloc(h->ld[l].numel, sizeof(float));
		h->v[l] = calloc(h->ld[l].numel, sizeof(float));
		toy_init(t, &h->ld[l], 0, h->ld[l].numel, h->p[l], seed);
	}
	return 0;
}

static inline void toy_host_destroy(struct toy_host *h)
{
	for (int l = 0; l < h->n; l++) {
		free(h->p[l]);
		free(h->g[l]);
		free(h->m[l]);
		free(h->v[l]);
	}
	free(h->p);
	free(h->g);
	free(h->m);
	free(h->v);
	zn_layer_descs_free(h->ld, h->n);
}

/* One step on B x T tokens: forward, backward of the mean loss, AdamW (step `step`).
 * Returns the mean loss. */
static inline float toy_host_step(struct toy_host *h, const struct zn_optimizer_config *opt,
				  int64_t step, const int *tok, const int *tgt, int B, int T)
{
	int n = h->n, C = h->t->width;
	uint64_t bt = (uint64_t)B * T;
	float **x = calloc(n, sizeof(float *)), *dx[2], *scratch, *loss;
	struct zn_layer_io io;
	double sum = 0.0;

	for (int l = 0; l < n - 1; l++)
		x[l] = calloc(bt * C, sizeof(float));
	dx[0] = calloc(bt * C, sizeof(float));
	dx[1] = calloc(bt * C, sizeof(float));
	scratch = calloc(bt * h->t->vocab, sizeof(float));
	loss = calloc(bt, sizeof(float));
	for (int l = 0; l < n; l++) {
		io = (struct zn_layer_io){ .L = &h->ld[l], .params = h->p[l], .scratch = scratch,
					   .x_in = l ? x[l - 1] : NULL,
					   .x_out = l < n - 1 ? x[l] : NULL, .tokens = tok,
					   .targets = tgt, .losses = loss, .B = B, .T = T };
		toy_forward(NULL, NULL, h->t, &io);
	}
	for (uint64_t i = 0; i < bt; i++)
		sum += loss[i];
	for (int l = n - 1, cur = 0; l >= 0; l--) {
		memset(scratch, 0, bt * h->t->vocab * sizeof(float));
		io = (struct zn_layer_io){ .L = &h->ld[l], .params = h->p[l], .grads = h->g[l],
					   .scratch = scratch, .x_in = l ? x[l - 1] : NULL,
					   .dx_out = l < n - 1 ? dx[cur] : NULL,
					   .dx_in = l ? dx[l < n - 1 ? cur ^ 1 : 0] : NULL,
					   .tokens = tok, .targets = tgt,
					   .dloss_scale = 1.0f / (float)bt, .B = B, .T = T };
		toy_backward(NULL, NULL, h->t, &io);
		if (l < n - 1)
			cur ^= 1;
	}
	for (int l = 0; l < n; l++) {
		const struct zn_layer_desc *L = &h->ld[l];

		for (int k = 0; k < L->tensor_count; k++) {
			const struct zn_tensor_desc *td = &L->tensors[k];
			struct zn_adamw_params p;

			zn_adamw_params_init(&p, opt);
			p.step = step;
			p.grad_scale = 1.0f;
			p.weight_decay = td->decay ? opt->weight_decay : 0.0f;
			zn_adamw_step(&p, h->p[l] + td->offset, h->m[l] + td->offset,
				      h->v[l] + td->offset, h->g[l] + td->offset, ZN_DTYPE_F32,
				      NULL, ZN_DTYPE_F32, td->numel);
		}
		memset(h->g[l], 0, L->numel * sizeof(float));
	}
	for (int l = 0; l < n - 1; l++)
		free(x[l]);
	free(x);
	free(dx[0]);
	free(dx[1]);
	free(scratch);
	free(loss);
	return (float)(sum / (double)bt);
}

#endif
