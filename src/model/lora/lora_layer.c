/* LoRA's forward and backward (lora.h): the base layer's own code runs against a copy of
 * the kernel table whose entries below add the adapters and drop the frozen weights'
 * gradients. The entries find their layer through `cur`, set by zn_lora_forward /
 * zn_lora_backward around the base call on the same thread (the model ops run on the
 * thread that enqueues, or the host stream's worker): thread-local, so engines on other
 * threads never see it.
 *
 * Scratch after the base's: t [BT, r], u [BT, max out] (backward: the output-gradient
 * columns of the target, scaled), xd [BT, max in] (dropout only: the dropped input), then
 * dt [BT, r] and, with dropout, dxd [BT, max in], shared by the adapters and zeroed before
 * each adapter's GEMMs accumulate into them (the layer's adapters are hundreds with LoRA
 * on every expert: a buffer each would not fit); with bf16 compute also ab (fp32 copies of
 * the layer's A and B, r (in + out) per adapter) and t16 (dt rounded to bf16, [BT, r]).
 *
 * An adapter is found by the weight a matmul is called with: the rows base_row .. +out of
 * its base tensor in the frozen buffer lie inside the call's [OC, C] weight. That covers a
 * fused q/k/v or gate/up weight (the target's rows of it) and a mixture of experts' stacks:
 * moe.c calls one GEMM per expert on that expert's slice of the stack with the rows routed
 * to it, so each expert's adapters apply to its own tokens only, forward and backward, and
 * an expert without a token gets no call (its adapters' gradients stay zero).
 *
 * bf16 compute (the engine's compute16: io->params16 holds the adapters in bf16, io->frozen
 * points at the bf16 base): the base layer runs its bf16 path on the frozen bf16 weights
 * directly (never cast to fp32), and the adapters' input-side GEMMs run as the base's do,
 * bf16 inputs with fp32 accumulation (forward t = x A^T; backward dx += dt A, dA += dt^T x
 * with dt rounded to bf16), while the rank-side ones (out += scale t B^T through lora_up;
 * dB += u^T t, dt += u B) run in fp32 on fp32 copies of B (r x out: tiny). With dropout the
 * adapter's input is the bf16 input widened to fp32 and dropped, and its GEMMs run in fp32.
 */
#include <stdint.h>

#include "core/hash.h"
#include "model/lora/lora.h"

struct lora_ctx {
	const struct zn_kernel_table *k;  /* the real table */
	const struct zn_lora_config *cfg;
	const struct zn_lora_layer *ly;
	const struct zn_layer_desc *L;    /* the wrapper's descriptor (adapters) */
	const struct zn_layer_io *io;     /* the wrapper's call: adapters and their grads */
	float *t, *u, *xd, *dt0, *dxd0;   /* scratch (see above) */
	float *ab;                        /* bf16 compute: fp32 copies of A and B */
	uint16_t *t16;
	int64_t maxin;
};

static _Thread_local const struct lora_ctx *cur;

struct sizes {
	int64_t maxin, maxout; /* maxin: 0 without dropout */
	int64_t ab;            /* sum of in + out over the adapters */
};

static struct sizes sizes_of(const struct zn_lora_config *cfg, const struct zn_lora_layer *ly)
{
	struct sizes s = { 0, 0, 0 };

	for (int i = 0; i < ly->count; i++) {
		s.ab += ly->ad[i].in + ly->ad[i].out;
		if (ly->ad[i].in > s.maxin)
			s.maxin = ly->ad[i].in;
		if (ly->ad[i].out > s.maxout)
			s.maxout = ly->ad[i].out;
	}
	if (!(cfg->dropout > 0))
		s.maxin = 0;
	return s;
}

uint64_t zn_lora_scratch_extra(const struct zn_lora_config *cfg, const struct zn_layer_desc *L,
			       int B, int T, bool bf16)
{
	const struct zn_lora_layer *ly = &cfg->lay[L->index];
	struct sizes s = sizes_of(cfg, ly);
	uint64_t bt = (uint64_t)B * (uint64_t)T, r = (uint64_t)cfg->r;

	if (!ly->count)
		return 0;
	return bt * (r + (uint64_t)s.maxout + (uint64_t)s.maxin + r + (uint64_t)s.maxin) +
	       (bf16 ? r * (uint64_t)s.ab + (bt * r + 1) / 2 : 0);
}

static void carve(struct lora_ctx *c, float *extra, int B, int T)
{
	struct sizes s = sizes_of(c->cfg, c->ly);
	int64_t bt = (int64_t)B * T, r = c->cfg->r;

	c->t = extra;
	c->u = c->t + bt * r;
	c->xd = c->u + bt * s.maxout;
	c->dt0 = c->xd + bt * s.maxin;
	c->dxd0 = c->dt0 + bt * r;
	c->ab = c->dxd0 + bt * s.maxin;
	c->t16 = (uint16_t *)(void *)(c->ab + r * s.ab);
	c->maxin = s.maxin;
}

/* Row offset of adapter a's weight inside the matmul weight w [OC, C] of elements of
 * `elem` bytes (4, or 2 with bf16 compute), or -1. */
static int64_t rows_in(const struct lora_ctx *c, const struct zn_lora_adapter *a,
		       const void *w, int C, int OC, uintptr_t elem)
{
	uint64_t at = c->ly->base.tensors[a->base_tensor].offset + (uint64_t)a->base_row * a->in;
	uintptr_t pp = (uintptr_t)c->io->frozen + (uintptr_t)at * elem;
	uintptr_t wp = (uintptr_t)w, span = (uintptr_t)OC * (uintptr_t)C * elem;
	int64_t row0;

	if (a->in != C || pp < wp || pp >= wp + span)
		return -1;
	row0 = (int64_t)((pp - wp) / elem / (uintptr_t)C);
	return row0 + a->out <= OC ? row0 : -1;
}

/* dt (and with dropout dxd) zeroed for adapter i's accumulating GEMMs */
static float *dt_zeroed(const struct lora_ctx *c, void *st, int64_t bt, int C)
{
	c->k->scale(st, c->dt0, 0.0f, (size_t)(bt * c->cfg->r));
	if (c->cfg->dropout > 0)
		c->k->scale(st, c->dxd0, 0.0f, (size_t)(bt * C));
	return c->dt0;
}

/* The seed of adapter i's dropout masks in this layer. Only the first half of splitmix64's
 * mix (core/hash.h): each mask element hashes it again with zn_hash_seeded, and the full
 * mix would change every LoRA dropout mask, so every loss, of runs already made. */
static uint64_t adapter_seed(const struct lora_ctx *c, int i)
{
	uint64_t z = c->io->seed + ZN_HASH_GOLDEN * (uint64_t)(c->L->index * 64 + i + 1);

	/* past 64 adapters a layer (LoRA on the experts), a stream of the layer's own: i + 1
	 * above would reach the next layer's */
	if (i >= 64)
		return zn_hash_seeded(zn_hash_seeded(c->io->seed ^ 0x4d6f4541ull,
						     (uint64_t)c->L->index), (uint64_t)i);

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
		int64_t row0 = rows_in(c, a, weight, C, OC, sizeof(float));
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
		int64_t row0 = rows_in(c, a, weight, C, OC, sizeof(float));
		float *gA = c->io->grads + c->L->tensors[a->a_tensor].offset;
		float *gB = c->io->grads + c->L->tensors[a->a_tensor + 1].offset;
		float *dt, *dxd = c->dxd0;
		const float *x;

		if (row0 < 0)
			continue;
		dt = dt_zeroed(c, st, bt, C);
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

/* ---- bf16 compute --------------------------------------------------------------------- */

static const uint16_t *A16_of(const struct lora_ctx *c, int i)
{
	return c->io->params16 + c->L->tensors[c->ly->ad[i].a_tensor].offset;
}

static const uint16_t *B16_of(const struct lora_ctx *c, int i)
{
	return c->io->params16 + c->L->tensors[c->ly->ad[i].a_tensor + 1].offset;
}

/* fp32 copy of adapter i's A (b false) or B (true) in the ab scratch */
static const float *wide(const struct lora_ctx *c, void *st, int i, bool b)
{
	int64_t off = 0, r = c->cfg->r;
	const struct zn_lora_adapter *a = &c->ly->ad[i];
	float *dst;

	for (int j = 0; j < i; j++)
		off += r * (c->ly->ad[j].in + c->ly->ad[j].out);
	dst = c->ab + off + (b ? r * a->in : 0);
	c->k->cast_bf16_to_f32(st, dst, b ? B16_of(c, i) : A16_of(c, i),
			       (size_t)(r * (b ? a->out : a->in)));
	return dst;
}

/* t = x A^T: bf16 x bf16 with fp32 accumulation, or with dropout x widened into xd, dropped,
 * and an fp32 GEMM */
static void t_bf16(const struct lora_ctx *c, void *st, int i, const uint16_t *inp, int B,
		   int T, int C)
{
	int64_t bt = (int64_t)B * T;

	if (!(c->cfg->dropout > 0)) {
		c->k->matmul_forward_bf16(st, c->t, inp, A16_of(c, i), NULL, B, T, C, c->cfg->r);
		return;
	}
	c->k->cast_bf16_to_f32(st, c->xd, inp, (size_t)(bt * C));
	c->k->dropout(st, c->xd, c->xd, c->cfg->dropout, adapter_seed(c, i), (size_t)(bt * C));
	c->k->matmul_forward(st, c->t, c->xd, wide(c, st, i, false), NULL, B, T, C, c->cfg->r);
}

static void lora_matmul_forward_bf16(void *st, float *out, const uint16_t *inp,
				     const uint16_t *weight, const float *bias, int B, int T,
				     int C, int OC)
{
	const struct lora_ctx *c = cur;

	c->k->matmul_forward_bf16(st, out, inp, weight, bias, B, T, C, OC);
	for (int i = 0; i < c->ly->count; i++) {
		const struct zn_lora_adapter *a = &c->ly->ad[i];
		int64_t row0 = rows_in(c, a, weight, C, OC, sizeof(uint16_t));

		if (row0 < 0)
			continue;
		t_bf16(c, st, i, inp, B, T, C);
		c->k->lora_up(st, out, c->t, wide(c, st, i, true), c->cfg->scale,
			      (int64_t)B * T, c->cfg->r, OC, (int)row0, (int)a->out);
	}
}

static void lora_matmul_backward_bf16(void *st, float *dinp, float *dweight, float *dbias,
				      const uint16_t *dout16, const float *dout,
				      const uint16_t *inp, const uint16_t *weight, int B, int T,
				      int C, int OC)
{
	const struct lora_ctx *c = cur;
	int64_t bt = (int64_t)B * T;
	int r = c->cfg->r;

	(void)dweight;
	(void)dbias;
	c->k->matmul_backward_bf16(st, dinp, NULL, NULL, dout16, NULL, inp, weight, B, T, C, OC);
	for (int i = 0; i < c->ly->count; i++) {
		const struct zn_lora_adapter *a = &c->ly->ad[i];
		int64_t row0 = rows_in(c, a, weight, C, OC, sizeof(uint16_t));
		float *gA = c->io->grads + c->L->tensors[a->a_tensor].offset;
		float *gB = c->io->grads + c->L->tensors[a->a_tensor + 1].offset;
		float *dt, *dxd = c->dxd0;

		if (row0 < 0)
			continue;
		dt = dt_zeroed(c, st, bt, C);
		t_bf16(c, st, i, inp, B, T, C);
		/* u = scale x dout's target columns (fp32 dout when the base has it) */
		if (dout)
			c->k->cols_take(st, c->u, dout, c->cfg->scale, bt, OC, (int)row0,
					(int)a->out);
		else
			c->k->cols_take_bf16(st, c->u, dout16, c->cfg->scale, bt, OC, (int)row0,
					     (int)a->out);
		/* dB += u^T t, dt += u B (fp32) */
		c->k->matmul_backward(st, dt, gB, NULL, c->u, c->t, wide(c, st, i, true), B, T, r,
				      (int)a->out);
		if (!(c->cfg->dropout > 0)) {
			/* dx += dt A, dA += dt^T x: bf16 inputs, fp32 accumulation */
			c->k->cast_f32_to_bf16(st, c->t16, dt, (size_t)(bt * r));
			c->k->matmul_backward_bf16(st, dinp, gA, NULL, c->t16, NULL, inp,
						   A16_of(c, i), B, T, C, r);
			continue;
		}
		c->k->matmul_backward(st, dxd, gA, NULL, dt, c->xd, wide(c, st, i, false), B, T,
				      C, r);
		c->k->dropout(st, dxd, dxd, c->cfg->dropout, adapter_seed(c, i), (size_t)(bt * C));
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

static void lora_qk_rmsnorm_backward(void *st, float *dqkv, float *dwq, float *dwk,
				     const float *inp, const float *wq, const float *wk,
				     const float *rstd, int B, int T, int NH, int KV, int hd)
{
	(void)dwq, (void)dwk;
	cur->k->qk_rmsnorm_backward(st, dqkv, NULL, NULL, inp, wq, wk, rstd, B, T, NH, KV, hd);
}

static void lora_encoder_backward(void *st, float *dwte, float *dwpe, const float *dout,
				  const int *inp, int B, int T, int C)
{
	(void)st, (void)dwte, (void)dwpe, (void)dout, (void)inp, (void)B, (void)T, (void)C;
}

static void lora_encoder_pos_backward(void *st, float *dwte, float *dwpe, const float *dout,
				      const int *inp, const int *pos, int B, int T, int C)
{
	(void)st, (void)dwte, (void)dwpe, (void)dout, (void)inp, (void)pos, (void)B, (void)T;
	(void)C;
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
	bool bf16 = io->params16 != NULL;
	uint64_t base_scratch = (bf16 ? cfg->base.ops->scratch_numel_bf16 :
					cfg->base.ops->scratch_numel)(cfg->base.config, &ly->base,
								      io->B, io->T);

	carve(&c, io->scratch + base_scratch, io->B, io->T);
	kt.matmul_forward = lora_matmul_forward;
	kt.matmul_backward = lora_matmul_backward;
	kt.layernorm_backward = lora_layernorm_backward;
	kt.rmsnorm_backward = lora_rmsnorm_backward;
	kt.qk_rmsnorm_backward = lora_qk_rmsnorm_backward;
	kt.encoder_backward = lora_encoder_backward;
	kt.encoder_pos_backward = lora_encoder_pos_backward; /* packed documents */
	kt.embedding_backward = lora_embedding_backward;
	b.L = &ly->base;
	b.params = io->frozen;
	b.tied_params = io->tied_frozen;
	b.grads = (float *)(uintptr_t)io->frozen;
	b.tied_grads = (float *)(uintptr_t)io->tied_frozen;
	b.frozen = b.tied_frozen = NULL;
	b.params16 = b.tied_params16 = NULL;
	if (bf16) { /* the frozen base is bf16 (lora.h): the base's bf16 path reads it */
		kt.matmul_forward_bf16 = lora_matmul_forward_bf16;
		kt.matmul_backward_bf16 = lora_matmul_backward_bf16;
		b.params16 = (const uint16_t *)(const void *)io->frozen;
		b.tied_params16 = (const uint16_t *)(const void *)io->tied_frozen;
		b.params = b.tied_params = NULL;
	}
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

void zn_lora_decode(const struct zn_kernel_table *k, void *stream,
		    const struct zn_lora_config *cfg, const struct zn_decode_io *io,
		    const struct zn_layer_desc *ad, const float *adapters, float *extra)
{
	const struct zn_lora_layer *ly = &cfg->lay[io->L->index];
	struct zn_kernel_table kt = *k;
	/* the wrapper's view of this layer, as in training: the base is `frozen`, the
	 * adapters `params` (rows_in, A_of and B_of read these) */
	struct zn_layer_io w = { .L = ad, .params = adapters, .frozen = io->params };
	struct lora_ctx c = { .k = k, .cfg = cfg, .ly = ly, .L = ad, .io = &w };
	const struct lora_ctx *prev = cur;

	carve(&c, extra, 1, io->T);
	kt.matmul_forward = lora_matmul_forward;
	cur = &c;
	cfg->base.ops->decode(&kt, stream, cfg->base.config, io);
	cur = prev;
}
