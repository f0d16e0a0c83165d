/* The sparse MoE block (moe.h) through the kernel table. */
#include "model/moe/moe.h"

#define ALIGN 256u

static uint64_t round_up(uint64_t b)
{
	return (b + ALIGN - 1) / ALIGN * ALIGN;
}

static uint64_t slots(const struct zn_moe_dims *d)
{
	return (uint64_t)d->N * (uint64_t)d->K;
}

uint64_t zn_moe_acts_bytes(const struct zn_moe_dims *d)
{
	uint64_t N = (uint64_t)d->N, E = (uint64_t)d->E, K = (uint64_t)d->K, M = slots(d);
	uint64_t C = (uint64_t)d->C, I = (uint64_t)d->I;

	return 2 * round_up(N * E * 4) + 2 * round_up(N * K * 4) + 2 * round_up(M * 4) +
	       round_up((E + 1) * 4) + 2 * round_up(M * C * 4) + round_up(M * 2 * I * 4) +
	       round_up(M * I * 4);
}

uint64_t zn_moe_scratch_bytes(const struct zn_moe_dims *d)
{
	uint64_t N = (uint64_t)d->N, E = (uint64_t)d->E, K = (uint64_t)d->K, M = slots(d);
	uint64_t C = (uint64_t)d->C, I = (uint64_t)d->I;

	return 2 * round_up(M * C * 4) + round_up(M * I * 4) + round_up(M * 2 * I * 4) +
	       round_up(N * K * 4) + round_up(N * E * 4);
}

/* the next buffer of `bytes` from *p */
static void *take(char **p, uint64_t bytes)
{
	void *r = *p;

	*p += round_up(bytes);
	return r;
}

void zn_moe_acts_carve(struct zn_moe_acts *a, void *base, int *offsets_h,
		       const struct zn_moe_dims *d)
{
	uint64_t N = (uint64_t)d->N, E = (uint64_t)d->E, K = (uint64_t)d->K, M = slots(d);
	uint64_t C = (uint64_t)d->C, I = (uint64_t)d->I;
	char *p = base;

	a->logits = take(&p, N * E * 4);
	a->probs = take(&p, N * E * 4);
	a->w = take(&p, N * K * 4);
	a->sel = take(&p, N * K * 4);
	a->perm = take(&p, M * 4);
	a->pos = take(&p, M * 4);
	a->offsets = take(&p, (E + 1) * 4);
	a->offsets_h = offsets_h;
	a->xg = take(&p, M * C * 4);
	a->hgu = take(&p, M * 2 * I * 4);
	a->act = take(&p, M * I * 4);
	a->y = take(&p, M * C * 4);
}

void zn_moe_scratch_carve(struct zn_moe_scratch *s, void *base, const struct zn_moe_dims *d)
{
	uint64_t N = (uint64_t)d->N, E = (uint64_t)d->E, K = (uint64_t)d->K, M = slots(d);
	uint64_t C = (uint64_t)d->C, I = (uint64_t)d->I;
	char *p = base;

	s->dy = take(&p, M * C * 4);
	s->dact = take(&p, M * I * 4);
	s->dhgu = take(&p, M * 2 * I * 4);
	s->dxg = take(&p, M * C * 4);
	s->dw = take(&p, N * K * 4);
	s->dlogits = take(&p, N * E * 4);
}

void zn_moe_forward(const struct zn_kernel_table *k, void *stream, const struct zn_moe_dims *d,
		    const struct zn_moe_weights *W, const struct zn_moe_source *src,
		    struct zn_moe_acts *a, const float *h, float *out, float *aux)
{
	int N = d->N, C = d->C, E = d->E, K = d->K, I = d->I, M = N * K;
	const int *off = a->offsets_h;

	k->matmul_forward(stream, a->logits, h, W->router, NULL, 1, N, C, E);
	k->moe_route_forward(stream, a->sel, a->w, a->probs, a->logits, N, E, K, d->norm);
	k->moe_dispatch(stream, a->perm, a->pos, a->offsets, a->sel, N, E, K);
	k->read_sync(stream, a->offsets_h, a->offsets, (size_t)(E + 1) * sizeof(int));
	k->moe_gather(stream, a->xg, h, a->perm, M, K, C);
	for (int e = 0; e < E; e++) {
		int r = off[e], m = off[e + 1] - off[e];

		if (m <= 0)
			continue;
		if (src) /* a routed expert, now that the rows per expert are known */
			src->fetch(src, k, stream, W, e, E);
		k->matmul_forward(stream, a->hgu + (size_t)r * 2 * I, a->xg + (size_t)r * C,
				  W->gu + (size_t)e * 2 * I * C, NULL, 1, m, C, 2 * I);
		k->swiglu_forward(stream, a->act + (size_t)r * I, a->hgu + (size_t)r * 2 * I, 1, m,
				  I);
		k->matmul_forward(stream, a->y + (size_t)r * C, a->act + (size_t)r * I,
				  W->down + (size_t)e * C * I, NULL, 1, m, I, C);
	}
	k->moe_combine(stream, out, a->y, a->pos, a->sel, a->w, N, K, C, 0);
	if (aux)
		k->moe_aux_stats(stream, aux, a->probs, a->sel, N, E, K);
}

void zn_moe_backward(const struct zn_kernel_table *k, void *stream,
		     const struct zn_moe_dims *d, const struct zn_moe_weights *W,
		     const struct zn_moe_source *src, const struct zn_moe_grads *g,
		     const struct zn_moe_acts *a,
		     const struct zn_moe_scratch *s, const float *h, const float *dout,
		     const float *dprob, float *dh)
{
	int N = d->N, C = d->C, E = d->E, K = d->K, I = d->I, M = N * K;
	const int *off = a->offsets_h;

	k->moe_scatter_dout(stream, s->dy, s->dw, dout, a->y, a->w, a->perm, M, K, C);
	for (int e = 0; e < E; e++) {
		int r = off[e], m = off[e + 1] - off[e];

		if (m <= 0)
			continue;
		if (src) /* the forward's experts again (the slot may hold another layer's since) */
			src->fetch(src, k, stream, W, e, E);
		k->matmul_backward(stream, s->dact + (size_t)r * I,
				   g->down ? g->down + (size_t)e * C * I : NULL, NULL,
				   s->dy + (size_t)r * C, a->act + (size_t)r * I,
				   W->down + (size_t)e * C * I, 1, m, I, C);
		k->swiglu_backward(stream, s->dhgu + (size_t)r * 2 * I, s->dact + (size_t)r * I,
				   a->hgu + (size_t)r * 2 * I, 1, m, I);
		k->matmul_backward(stream, s->dxg + (size_t)r * C,
				   g->gu ? g->gu + (size_t)e * 2 * I * C : NULL, NULL,
				   s->dhgu + (size_t)r * 2 * I, a->xg + (size_t)r * C,
				   W->gu + (size_t)e * 2 * I * C, 1, m, C, 2 * I);
	}
	/* each token's rows back, by ascending expert, then the router's part */
	k->moe_combine(stream, dh, s->dxg, a->pos, a->sel, NULL, N, K, C, 1);
	k->moe_route_backward(stream, s->dlogits, s->dw, a->probs, a->sel, dprob, N, E, K,
			      d->norm);
	k->matmul_backward(stream, dh, g->router, NULL, s->dlogits, h, W->router, 1, N, C, E);
}
