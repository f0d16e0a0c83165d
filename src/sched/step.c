/* One micro-batch: tokens up, forward over the layers, losses down, backward in reverse with
 * each layer's gradient reduced as soon as its backward is enqueued (DESIGN.md, the step).
 *
 * Gradient scale: each rank's backward uses dloss_scale = 1 / (B x T x world x gas), so the
 * sum over ranks (all-reduce or reduce-scatter) and over micro-batches is the gradient of
 * the mean loss over the whole global batch, with no separate scaling pass.
 *
 * Where each layer's gradient goes (reduce_layer):
 *   stage 0-1: full buffers accumulate over micro-batches; after the last micro-batch's
 *              backward of layer l, all-reduce on the comm stream (stage 1 with offload:
 *              then this rank's slice goes down to pinned memory).
 *   stage 2-3: a full buffer from a small ring, zeroed, filled by the backward,
 *              reduce-scattered in place; this rank's shard is added to the layer's shard
 *              on the device (a copy for the first micro-batch) or copied down to pinned
 *              memory (into the receive shard after the first micro-batch, added on the
 *              host). Then the buffer is free for the layer two below.
 * Layer 0 (tied wte) has its own full gradient buffer: the final layer's backward adds the
 * lm_head gradient into it and layer 0's backward adds the embedding's; only then is it
 * reduced.
 */
#include <errno.h>

#include "core/log.h"
#include "sched/engine_impl.h"

struct fwd_args {
	const struct zn_gpt2_config *cfg;
	const struct zn_layer_desc *L;
	const float *params, *tied;
	float *acts, *scratch;
	const float *x_in;
	float *x_out;
	const int *tok, *tgt;
	float *losses;
	int B, T;
};

struct bwd_args {
	const struct zn_gpt2_config *cfg;
	const struct zn_layer_desc *L;
	const float *params, *tied;
	float *grads, *tied_grads;
	const float *acts;
	float *scratch;
	const float *x_in, *dx_out;
	float *dx_in;
	const int *tok, *tgt;
	float scale;
	int B, T;
};

struct add_args {
	float *acc;
	const float *in;
	uint64_t n;
};

static void fwd_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct fwd_args *a = ctx;

	zn_gpt2_layer_forward(k, native, a->cfg, a->L, a->params, a->tied, a->acts, a->scratch,
			      a->x_in, a->x_out, a->tok, a->tgt, a->losses, a->B, a->T);
}

static void bwd_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct bwd_args *a = ctx;

	zn_gpt2_layer_backward(k, native, a->cfg, a->L, a->params, a->tied, a->grads,
			       a->tied_grads, a->acts, a->scratch, a->x_in, a->dx_out, a->dx_in,
			       a->tok, a->tgt, a->scale, a->B, a->T);
}

static void add_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct add_args *a = ctx;

	/* acc = acc + in: the residual kernel is elementwise, so out may alias inp1 */
	k->residual_forward(native, a->acc, a->acc, a->in, (size_t)a->n);
}

static int forward(struct zn_engine *e, const float *p0)
{
	struct fwd_args a = { .cfg = &e->mc, .tok = e->tok_d, .tgt = e->tgt_d, .B = e->B,
			      .T = e->T, .scratch = e->scratch_d };
	int n = e->n, rc;

	a.L = &e->ld[0];
	a.params = p0;
	a.x_out = e->x_d[0];
	rc = zn_launch(e->compute, fwd_fn, &a, sizeof(a));
	for (int k = 0; !rc && k < n - 1; k++) {
		int l = k + 1;
		const float *p;

		rc = zn_fetch_acquire(e, k, l, &p);
		if (rc)
			break;
		a.L = &e->ld[l];
		a.params = p;
		a.acts = e->acts_d[l];
		a.x_in = e->x_d[l - 1];
		if (l < n - 1) {
			a.x_out = e->x_d[l];
		} else {
			/* the previous micro-batch's losses must be on the host first */
			rc = zn_stream_wait_event(e->compute, e->loss_done);
			a.x_out = NULL;
			a.tied = p0;
			a.losses = e->loss_d;
		}
		if (!rc)
			rc = zn_launch(e->compute, fwd_fn, &a, sizeof(a));
		if (!rc)
			rc = zn_fetch_release(e, k);
	}
	return rc;
}

static struct zn_gslot *grad_slot(struct zn_engine *e, int l, int bwd_index)
{
	return l == 0 ? &e->gslot0 : &e->gring[bwd_index % ZN_PLAN_GRAD_SLOTS];
}

/* The full gradient buffer layer l's backward accumulates into. */
static float *grad_full(struct zn_engine *e, int l, int bwd_index)
{
	if (e->cfg.zero.stage < 2)
		return e->L[l].grad_d;
	return grad_slot(e, l, bwd_index)->d;
}

/* stage >= 2: wait for the slot's previous reduce-scatter to be consumed, then zero it */
static int prepare_grad_slot(struct zn_engine *e, int l, int bwd_index)
{
	struct zn_gslot *g;
	int rc;

	if (e->cfg.zero.stage < 2)
		return 0;
	g = grad_slot(e, l, bwd_index);
	rc = zn_stream_wait_event(e->compute, g->free);
	if (!rc)
		rc = zn_memset_async(e->compute, g->d, 0, e->L[l].sh.padded_numel * 4);
	return rc;
}

static int reduce_full(struct zn_engine *e, int l)
{
	struct zn_layer *ly = &e->L[l];
	int rc;

	rc = zn_event_record(ly->aux_ev, e->compute);
	if (!rc)
		rc = zn_stream_wait_event(e->comm_s, ly->aux_ev);
	if (!rc && e->world > 1)
		rc = zn_comm_all_reduce(e->comm, e->comm_s, ly->grad_d, ly->sh.padded_numel,
					ZN_DTYPE_F32);
	if (rc)
		return rc;
	if (!ly->grad_h)
		return zn_event_record(ly->grad_ev, e->comm_s);
	/* stage 1 with offload: this rank's slice goes down to pinned memory */
	rc = zn_event_record(ly->aux_ev, e->comm_s);
	if (!rc)
		rc = zn_stream_wait_event(e->copy_out, ly->aux_ev);
	if (!rc)
		rc = zn_memcpy_async(e->copy_out, ly->grad_h, ly->grad_d + ly->sh.offset,
				     ly->sh.shard_numel * 4, ZN_COPY_D2H);
	if (!rc)
		rc = zn_event_record(ly->grad_ev, e->copy_out);
	return rc;
}

static int reduce_shard(struct zn_engine *e, int l, int bwd_index, int micro)
{
	struct zn_layer *ly = &e->L[l];
	struct zn_gslot *g = grad_slot(e, l, bwd_index);
	float *mine = g->d + ly->sh.offset;
	uint64_t count = ly->sh.shard_numel;
	int rc;

	rc = zn_event_record(ly->aux_ev, e->compute);
	if (!rc)
		rc = zn_stream_wait_event(e->comm_s, ly->aux_ev);
	if (!rc)
		rc = zn_comm_reduce_scatter(e->comm, e->comm_s, mine, g->d, count, ZN_DTYPE_F32);
	if (rc)
		return rc;
	if (ly->grad_shard_d) {
		struct add_args a = { ly->grad_shard_d, mine, count };

		if (micro == 0)
			rc = zn_memcpy_async(e->comm_s, ly->grad_shard_d, mine, count * 4,
					     ZN_COPY_D2D);
		else
			rc = zn_launch(e->comm_s, add_fn, &a, sizeof(a));
		if (!rc)
			rc = zn_event_record(g->free, e->comm_s);
		if (!rc)
			rc = zn_event_record(ly->grad_ev, e->comm_s);
		return rc;
	}
	/* offload: the shard goes down; after the first micro-batch into the receive
	 * shard, which the host adds (zn_optim_host_accumulate) */
	rc = zn_event_record(ly->aux_ev, e->comm_s);
	if (!rc)
		rc = zn_stream_wait_event(e->copy_out, ly->aux_ev);
	if (!rc)
		rc = zn_memcpy_async(e->copy_out, micro == 0 ? ly->grad_h : ly->grad_recv_h, mine,
				     count * 4, ZN_COPY_D2H);
	if (!rc)
		rc = zn_event_record(g->free, e->copy_out);
	ly->recv_pending = micro > 0;
	if (!rc)
		rc = zn_event_record(ly->grad_ev, e->copy_out);
	return rc;
}

static int reduce_layer(struct zn_engine *e, int l, int bwd_index, int micro)
{
	bool last = micro == e->gas - 1;
	int rc;

	if (e->cfg.zero.stage < 2) {
		if (!last)
			return 0;
		rc = reduce_full(e, l);
	} else {
		rc = reduce_shard(e, l, bwd_index, micro);
	}
	/* without overlap_comm the compute waits for each reduction */
	if (!rc && !e->cfg.zero.overlap_comm)
		rc = zn_stream_wait_event(e->compute, e->L[l].grad_ev);
	if (!rc && last)
		rc = zn_optim_update_inline(e, l);
	return rc;
}

static int backward(struct zn_engine *e, const float *p0, int micro)
{
	struct bwd_args a = { .cfg = &e->mc, .tok = e->tok_d, .tgt = e->tgt_d, .B = e->B,
			      .T = e->T, .scratch = e->scratch_d };
	int n = e->n, cur = 0, rc = 0;

	a.scale = 1.0f / ((float)e->B * (float)e->T * (float)e->world * (float)e->gas);
	rc = prepare_grad_slot(e, 0, 0);
	for (int k = n - 1; !rc && k < 2 * (n - 1); k++) {
		int l = 2 * (n - 1) - k, b = k - (n - 1);
		const float *p;

		rc = zn_fetch_acquire(e, k, l, &p);
		if (!rc)
			rc = prepare_grad_slot(e, l, b);
		if (!rc)
			rc = zn_memset_async(e->compute, e->scratch_d, 0, e->scratch_bytes);
		if (rc)
			break;
		a.L = &e->ld[l];
		a.params = p;
		a.grads = grad_full(e, l, b);
		a.acts = e->acts_d[l];
		a.x_in = e->x_d[l - 1];
		if (l == n - 1) {
			a.tied = p0;
			a.tied_grads = grad_full(e, 0, 0);
			a.dx_out = NULL;
			a.dx_in = e->dx_d[0];
		} else {
			a.tied = NULL;
			a.tied_grads = NULL;
			a.dx_out = e->dx_d[cur];
			a.dx_in = e->dx_d[cur ^ 1];
			cur ^= 1;
		}
		rc = zn_launch(e->compute, bwd_fn, &a, sizeof(a));
		if (!rc)
			rc = zn_fetch_release(e, k);
		if (!rc)
			rc = reduce_layer(e, l, b, micro);
	}
	if (rc)
		return rc;
	a = (struct bwd_args){ .cfg = &e->mc, .L = &e->ld[0], .params = p0,
			       .grads = grad_full(e, 0, 0), .dx_out = e->dx_d[cur],
			       .tok = e->tok_d, .tgt = e->tgt_d, .scale = a.scale, .B = e->B,
			       .T = e->T };
	rc = zn_launch(e->compute, bwd_fn, &a, sizeof(a));
	if (!rc)
		rc = zn_event_record(e->tok_free, e->compute);
	if (!rc && micro == e->gas - 1)
		rc = zn_fetch_layer0_release(e);
	if (!rc)
		rc = reduce_layer(e, 0, 0, micro);
	return rc;
}

int zn_step_micro(struct zn_engine *e, int micro, const int *inputs_h, const int *targets_h)
{
	uint64_t bt = (uint64_t)e->B * (uint64_t)e->T;
	const float *p0 = NULL;
	int rc;

	/* tokens up, once the previous micro-batch's backward is done with the last ones */
	rc = zn_stream_wait_event(e->copy_in, e->tok_free);
	if (!rc)
		rc = zn_memcpy_async(e->copy_in, e->tok_d, inputs_h + micro * bt, bt * sizeof(int),
				     ZN_COPY_H2D);
	if (!rc)
		rc = zn_memcpy_async(e->copy_in, e->tgt_d, targets_h + micro * bt,
				     bt * sizeof(int), ZN_COPY_H2D);
	if (!rc)
		rc = zn_event_record(e->tok_ready, e->copy_in);
	if (!rc)
		rc = zn_stream_wait_event(e->compute, e->tok_ready);
	if (!rc)
		rc = zn_event_record(e->tev[3 * micro], e->compute);
	if (rc)
		return rc;
	if (micro == 0)
		rc = zn_fetch_layer0(e, &p0);
	else
		p0 = e->plan.gathers ? e->slot0.f32_d : zn_engine_params_f32(e, 0);
	if (!rc)
		rc = zn_fetch_layer0_wait(e);
	if (!rc)
		rc = zn_fetch_begin(e);
	if (!rc)
		rc = forward(e, p0);
	if (!rc)
		rc = zn_event_record(e->tev[3 * micro + 1], e->compute);
	/* losses down while the backward runs */
	if (!rc)
		rc = zn_event_record(e->fwd_done, e->compute);
	if (!rc)
		rc = zn_stream_wait_event(e->copy_out, e->fwd_done);
	if (!rc)
		rc = zn_memcpy_async(e->copy_out, e->loss_h + micro * bt, e->loss_d, bt * 4,
				     ZN_COPY_D2H);
	if (!rc)
		rc = zn_event_record(e->loss_done, e->copy_out);
	if (!rc)
		rc = backward(e, p0, micro);
	if (!rc)
		rc = zn_event_record(e->tev[3 * micro + 2], e->compute);
	return rc;
}
