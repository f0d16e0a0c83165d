/* LoRA's forward and backward (lora.h): the base layer's own code runs against a copy of
 * the kernel table whose entries below add the adapters and drop the frozen weights'
 * gradients. The entries find their layer through `cur`, set by zn_lora_forward /
 * zn_lora_backward around the base call on the same thread (the model ops run on the
 * thread that enqueues, or the host stream's worker): thread-local, so engines on other
 * threads never see it.
 *
 * Scratch after the base's: t [BT, r], u [BT, max out] (forward: t B^T; backward: the
 * output-gradient columns of the target, scaled), xd [BT, max in] (dropout only: the
 * dropped input), then per adapter dt [BT, r] and, with dropout, dxd [BT, in] (both
 * accumulated into: the engine zeroes the scratch before a backward).
 */
#include <stdint.h>

#include "model/lora/lora.h"

struct lora_ctx {
	const struct zn_kernel_table *k;  /* the real table */
	const struct zn_lora_config *cfg;
	const struct zn_lora_layer *ly;
	const struct zn_layer_desc *L;    /* the wrapper's descriptor (adapters) */
	const struct zn_layer_io *io;     /* the wrapper's call: adapters and their grads */
	float *t, *u, *xd, *dt0, *dxd0;   /* scratch (see above) */
	int64_t maxin;
};

static _Thread_local const struct lora_ctx *cur;

struct sizes {
	int64_t maxin, maxout, dxd; /* dxd: sum of in over the adapters (dropout) */
};

static struct sizes sizes_of(const struct zn_lora_config *cfg, const struct zn_lora_layer *ly)
{
	struct sizes s = { 0, 0, 0 };

	for (int i = 0; i < ly->count; i++) {
		if (ly->ad[i].in > s.maxin)
			s.maxin = ly->ad[i].in;
		if (ly->ad[i].out > s.maxout)
			s.maxout = ly->ad[i].out;
		s.dxd += ly->ad[i].in;
	}
	if (!(cfg->dropout > 0))
		s.maxin = s.dxd = 0;
	return s;
}

uint64_t zn_lora_scratch_extra(const struct zn_lora_config *cfg, const struct zn_layer_desc *L,
			       int B, int T)
{
	const struct zn_lora_layer *ly = &cfg->lay[L->index];
	struct sizes s = sizes_of(cfg, ly);
	uint64_t bt = (uint64_t)B * (uint64_t)T, r = (uint64_t)cfg->r;

	if (!ly->count)
		return 0;
	return bt * (r + (uint64_t)s.maxout + (uint64_t)s.maxin +
		     (uint64_t)ly->count * r + (uint64_t)s.dxd);
}

static void carve(struct lora_ctx *c, float *extra, int B, int T)
{
	struct sizes s = sizes_of(c->cfg, c->ly);
	int64_t bt = (int64_t)B * T, r = c->cfg->r;

	c->t = extra;
	c->u = c->t + bt * r;
	c->xd = c->u + bt * s.maxout;
	c->dt0 = c->xd + bt * s.maxin;
	c->dxd0 = c->dt0 + bt * r * c->ly->count;
	c->maxin = s.maxin;
}

/* Row offset of adapter a's weight inside the matmul weight w [OC, C], or -1. */
static int64_t rows_in(const struct lora_ctx *c, const struct zn_lora_adapter *a,
		       const float *w, int C, int OC)
{
	const float *p = c->io->frozen + c->ly->base.tensors[a->base_tensor].offset;
	uintptr_t pp = (uintptr_t)p, wp = (uintptr_t)w;
	uintptr_t span = (uintptr_t)OC * (uintptr_t)C * sizeof(float);

	if (a->in != C || pp < wp || pp >= wp + span)
		return -1;
	return (int64_t)((pp - wp) / sizeof(float) / (uintptr_t)C);
}

static uint64_t adapter_seed(const struct lora_ctx *c, int i)
{
	uint64_t z = c->io->seed + 0x9e3779b97f4a7c15ull * (uint64_t)(c->L->index * 64 + i + 1);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	return z ^ (z >> 27);
}

/* The adapter's input: x, or dropout(x) in xd. */
static const float *adapter_input(const struct lora_ctx *c, int i, void *st, const float *x,
				  int64_t bt)
{
	if (!(c->cfg->dropout > 0))
		return x;
	c->k->dropout(st, c->xd, x, c->cfg->dropout, adapter_seed(c, i),
		      (size_t)(bt * c->ly->ad[i].in));
	return c->xd;
}

static const float *A_of(const struct lora_ctx *c, int i)
{
	return c->io->params + c->L->tensors[c->ly->ad[i].a_tensor].offset;
}

static const float *B_of(const struct lora_ctx *c, int i)
{
	return c->io->params + c->L->tensors[c->ly->ad[i].a_tensor + 1].offset;
}

static void lora_matmul_forward(void *st, float *out, const float *inp, const float *weight,
				const float *bias, int B, int T, int C, int OC)
{
	const struct lora_ctx *c = cur;
	int64_t bt = (int64_t)B * T;
	int r = c->cfg->r;

	c->k->matmul_forward(st, out, inp, weight, bias, B, T, C, OC);
	for (int i = 0; i < c->ly->count; i++) {
		const struct zn_lora_adapter *a = &c->ly->ad[i];
		int64_t row0 = rows_in(c, a, weight, C, OC);
		const float *x;

		if (row0 < 0)
			continue;
		x = adapter_input(c, i, st, inp, bt);
		/* t = x A^T [BT, r]; out[:, row0 ..] += scale t B^T, accumulated by the GEMM
		 * itself (lora_up: beta = 1 into the column block, no [BT, out] pass) */
		c->k->matmul_forward(st, c->t, x, A_of(c, i), NULL, B, T, C, r);
		c->k->lora_up(st, out, c->t, B_of(c, i), c->cfg->scale, bt, r, OC, (int)row0,
			      (int)a->out);
	}
}

static void lora_matmul_backward(void *st, float *dinp, float *dweight, float *dbias,
				 const float *dout, const float *inp, const float *weight, int B,
				 int T, int C, int OC)
{
	const struct lora_ctx *c = cur;
	int64_t bt = (int64_t)B * T;
	int r = c->cfg->r;

	(void)dweight;
	(void)dbias;
	/* the frozen weight: input gradient only */
	c->k->matmul_backward(st, dinp, NULL, NULL, dout, inp, weight, B, T, C, OC);
	for (int i = 0; i < c->ly->count; i++) {
		const struct zn_lora_adapter *a = &c->ly->ad[i];
		int64_t row0 = rows_in(c, a, weight, C, OC), dxo = 0;
		float *gA = c->io->grads + c->L->tensors[a->a_tensor].offset;
		float *gB = c->io->grads + c->L->tensors[a->a_tensor + 1].offset;
		float *dt = c->dt0 + bt * r * i, *dxd;
		const float *x;

		if (row0 < 0)
			continue;
		for (int j = 0; j < i; j++)
			dxo += c->ly->ad[j].in;
		dxd = c->dxd0 + bt * dxo;
		x = adapter_input(c, i, st, inp, bt);
		/* t again (cheap: BT x in x r); u = scale x dout's target columns */
		c->k->matmul_forward(st, c->t, x, A_of(c, i), NULL, B, T, C, r);
		c->k->cols_take(st, c->u, dout, c->cfg->scale, bt, OC, (int)row0, (int)a->out);
		/* dB += u^T t, dt += u B; dA += dt^T x, dx += dt A */
		c->k->matmul_backward(st, dt, gB, NULL, c->u, c->t, B_of(c, i), B, T, r,
				      (int)a->out);
		if (!(c->cfg->dropout > 0)) {
			c->k->matmul_backward(st, dinp, gA, NULL, dt, x, A_of(c, i), B, T, C, r);
			continue;
		}
		c->k->matmul_backward(st, dxd, gA, NULL, dt, x, A_of(c, i), B, T, C, r);
		/* through the dropout: the same mask, the same 1 / (1 - p) */
		c->k->dropout(st, dxd, dxd, c->cfg->dropout, adapter_seed(c, i),
			      (size_t)(bt * C));
		c->k->residual_forward(st, dinp, dinp, dxd, (size_t)(bt * C));
	}
}

/* frozen weights: no weight gradients */
static void lora_layernorm_backward(void *st, float *dinp, float *dweight, float *dbias,
				    const float *dout, const float *inp, const float *weight,
				    const float *mean, const float *rstd, int B, int T, int C)
{
	(void)dweight;
	(void)dbias;
	cur->k->layernorm_backward(st, dinp, NULL, NULL, dout, inp, weight, mean, rstd, B, T, C);
}

static void lora_rmsnorm_backward(void *st, float *dinp, float *dweight, const float *dout,
				  const float *inp, const float *weight, const float *rstd, int B,
				  int T, int C)
{
	(void)dweight;
	cur->k->rmsnorm_backward(st, dinp, NULL, dout, inp, weight, rstd, B, T, C);
}

static void lora_encoder_backward(void *st, float *dwte, float *dwpe, const float *dout,
				  const int *inp, int B, int T, int C)
{
	(void)st, (void)dwte, (void)dwpe, (void)dout, (void)inp, (void)B, (void)T, (void)C;
}

static void lora_embedding_backward(void *st, float *dwte, const float *dout, const int *inp,
				    int B, int T, int C)
{
	(void)st, (void)dwte, (void)dout, (void)inp, (void)B, (void)T, (void)C;
}

/* The base layer's call: its descriptor, the frozen parameters; gradients of the frozen
 * weights would go to `grads`, which the table above never writes (it must still point
 * into a buffer of the base layout for the base's pointer arithmetic). */
static void run(const struct zn_kernel_table *k, void *stream, const struct zn_lora_config *cfg,
		const struct zn_layer_io *io, bool bwd)
{
	const struct zn_lora_layer *ly = &cfg->lay[io->L->index];
	struct zn_kernel_table kt = *k;
	struct zn_layer_io b = *io;
	struct lora_ctx c = { .k = k, .cfg = cfg, .ly = ly, .L = io->L, .io = io };
	const struct lora_ctx *prev = cur;
	uint64_t base_scratch = cfg->base.ops->scratch_numel(cfg->base.config, &ly->base, io->B,
							      io->T);

	carve(&c, io->scratch + base_scratch, io->B, io->T);
	kt.matmul_forward = lora_matmul_forward;
	kt.matmul_backward = lora_matmul_backward;
	kt.layernorm_backward = lora_layernorm_backward;
	kt.rmsnorm_backward = lora_rmsnorm_backward;
	kt.encoder_backward = lora_encoder_backward;
	kt.embedding_backward = lora_embedding_backward;
	b.L = &ly->base;
	b.params = io->frozen;
	b.tied_params = io->tied_frozen;
	b.grads = (float *)(uintptr_t)io->frozen;
	b.tied_grads = (float *)(uintptr_t)io->tied_frozen;
	b.frozen = b.tied_frozen = NULL;
	/* the LoRA family has no bf16 compute (no act_numel_bf16): the base runs in fp32 */
	b.params16 = b.tied_params16 = NULL;
	cur = &c;
	if (bwd)
		cfg->base.ops->backward(&kt, stream, cfg->base.config, &b);
	else
		cfg->base.ops->forward(&kt, stream, cfg->base.config, &b);
	cur = prev;
}

void zn_lora_forward(const struct zn_kernel_table *k, void *stream,
		     const struct zn_lora_config *cfg, const struct zn_layer_io *io)
{
	run(k, stream, cfg, io, false);
}

void zn_lora_backward(const struct zn_kernel_table *k, void *stream,
		      const struct zn_lora_config *cfg, const struct zn_layer_io *io)
{
	run(k, stream, cfg, io, true);
}
