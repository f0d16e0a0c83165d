/* Gradient reduction (reduce.h): where each layer's gradient goes after its backward.
 *
 * Gradient scale: each rank's backward uses dloss_scale = 1 / (B x T x world x gas), so the
 * sum over ranks (all-reduce or reduce-scatter) and over micro-batches is the gradient of
 * the mean loss over the whole global batch, with no separate scaling pass.
 *
 *   stage 0-1: full buffers accumulate over micro-batches; after the last micro-batch's
 *              backward of layer l, all-reduce on the comm stream (stage 1 with offload:
 *              then this rank's slice goes down to pinned memory).
 *   stage 2-3: a full buffer from a small ring, zeroed, filled by the backward,
 *              reduce-scattered in place; this rank's shard is added to the layer's shard
 *              on the device (a copy for the first micro-batch) or copied down to pinned
 *              memory (into the receive shard after the first micro-batch, added on the
 *              host). Then the buffer is free for the layer two below.
 * Layer 0 (the layer a later layer ties to) has its own full gradient buffer: the tying
 * layer's backward adds its gradient into it and layer 0's backward adds its own; only
 * then is it reduced.
 */
#include <errno.h>

#include "sched/reduce.h"

#include "core/log.h"
#include "sched/runtime.h"
#include "sched/tiers.h"
#include "sched/trace_dev.h"

struct add_args {
	float *acc;
	const float *in;
	uint64_t n;
};

static void add_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct add_args *a = ctx;

	/* acc = acc + in: the residual kernel is elementwise, so out may alias inp1 */
	k->residual_forward(native, a->acc, a->acc, a->in, (size_t)a->n);
}

static struct zn_gslot *grad_slot(struct zn_reduce *r, int l, int bwd_index)
{
	return l == 0 ? &r->gslot0 : &r->gring[bwd_index % ZN_PLAN_GRAD_SLOTS];
}

/* The full gradient buffer layer l's backward accumulates into. */
float *zn_reduce_grad_full(struct zn_reduce *r, int l, int bwd_index)
{
	if (r->c.stage < 2)
		return r->c.L[l].grad_d;
	return grad_slot(r, l, bwd_index)->d;
}

/* stage >= 2: wait for the slot's previous reduce-scatter to be consumed, then zero it */
int zn_reduce_prepare(struct zn_reduce *r, int l, int bwd_index)
{
	struct zn_gslot *g;
	int rc;

	if (r->c.stage < 2)
		return 0;
	g = grad_slot(r, l, bwd_index);
	rc = zn_stream_wait_event(r->c.rt->compute, g->free);
	if (!rc)
		rc = zn_memset_async(r->c.rt->compute, g->d, 0, r->c.L[l].sh.padded_numel * 4);
	return rc;
}

static int reduce_full(struct zn_reduce *r, int l)
{
	struct zn_runtime *rt = r->c.rt;
	struct zn_layer *ly = &r->c.L[l];
	int rc, h = -1;

	rc = zn_event_record(ly->aux_ev, rt->compute);
	if (!rc)
		rc = zn_stream_wait_event(rt->comm_s, ly->aux_ev);
	if (!rc && rt->world > 1)
		rc = zn_tracer_span_begin(r->c.tr, rt->comm_s, "all-reduce", l,
				 ly->sh.padded_numel * 4, &h);
	if (!rc && rt->world > 1)
		rc = zn_comm_all_reduce(rt->comm, rt->comm_s, ly->grad_d, ly->sh.padded_numel,
					ZN_DTYPE_F32);
	if (!rc)
		rc = zn_tracer_span_end(r->c.tr, rt->comm_s, h);
	if (rc)
		return rc;
	if (r->c.grads != ZN_TIER_HOST)
		return zn_event_record(ly->grad_ev, rt->comm_s);
	/* stage 1 with offload: this rank's slice goes down to pinned memory */
	rc = zn_event_record(ly->aux_ev, rt->comm_s);
	if (!rc)
		rc = zn_stream_wait_event(rt->copy_out, ly->aux_ev);
	if (!rc)
		rc = zn_tracer_span_begin(r->c.tr, rt->copy_out, "grad down", l,
				 ly->sh.shard_numel * 4, &h);
	if (!rc)
		rc = zn_memcpy_async(rt->copy_out, ly->grad_h, ly->grad_d + ly->sh.offset,
				     ly->sh.shard_numel * 4, ZN_COPY_D2H);
	if (!rc)
		rc = zn_tracer_span_end(r->c.tr, rt->copy_out, h);
	if (!rc)
		rc = zn_event_record(ly->grad_ev, rt->copy_out);
	return rc;
}

static int reduce_shard(struct zn_reduce *r, int l, int bwd_index, int micro)
{
	struct zn_runtime *rt = r->c.rt;
	struct zn_layer *ly = &r->c.L[l];
	struct zn_gslot *g = grad_slot(r, l, bwd_index);
	float *mine = g->d + ly->sh.offset;
	uint64_t count = ly->sh.shard_numel;
	int rc, h;

	rc = zn_event_record(ly->aux_ev, rt->compute);
	if (!rc)
		rc = zn_stream_wait_event(rt->comm_s, ly->aux_ev);
	if (!rc)
		rc = zn_tracer_span_begin(r->c.tr, rt->comm_s, "reduce-scatter", l,
				 count * 4 * (uint64_t)rt->world, &h);
	if (!rc)
		rc = zn_comm_reduce_scatter(rt->comm, rt->comm_s, mine, g->d, count, ZN_DTYPE_F32);
	if (!rc)
		rc = zn_tracer_span_end(r->c.tr, rt->comm_s, h);
	if (rc)
		return rc;
	if (r->c.grads == ZN_TIER_DEVICE) {
		struct add_args a = { ly->grad_shard_d, mine, count };

		if (micro == 0)
			rc = zn_memcpy_async(rt->comm_s, ly->grad_shard_d, mine, count * 4,
					     ZN_COPY_D2D);
		else
			rc = zn_launch(rt->comm_s, add_fn, &a, sizeof(a));
		if (!rc)
			rc = zn_event_record(g->free, rt->comm_s);
		if (!rc)
			rc = zn_event_record(ly->grad_ev, rt->comm_s);
		return rc;
	}
	/* offload: the shard goes down; after the first micro-batch into the receive
	 * shard, which the host adds (zn_optim_host_accumulate) */
	rc = zn_event_record(ly->aux_ev, rt->comm_s);
	if (!rc)
		rc = zn_stream_wait_event(rt->copy_out, ly->aux_ev);
	if (!rc)
		rc = zn_tracer_span_begin(r->c.tr, rt->copy_out, "grad down", l, count * 4, &h);
	if (!rc)
		rc = zn_memcpy_async(rt->copy_out, micro == 0 ? ly->grad_h : ly->grad_recv_h, mine,
				     count * 4, ZN_COPY_D2H);
	if (!rc)
		rc = zn_tracer_span_end(r->c.tr, rt->copy_out, h);
	if (!rc)
		rc = zn_event_record(g->free, rt->copy_out);
	ly->recv_pending = micro > 0;
	if (!rc)
		rc = zn_event_record(ly->grad_ev, rt->copy_out);
	return rc;
}

int zn_reduce_layer(struct zn_reduce *r, int l, int bwd_index, int micro)
{
	bool last = micro == r->c.gas - 1;
	int rc;

	if (r->c.stage < 2) {
		if (!last)
			return 0;
		rc = reduce_full(r, l);
	} else {
		rc = reduce_shard(r, l, bwd_index, micro);
	}
	/* without overlap_comm the compute waits for each reduction */
	if (!rc && !r->c.overlap_comm)
		rc = zn_stream_wait_event(r->c.rt->compute, r->c.L[l].grad_ev);
	return rc;
}

/* stage 0-1 gradients accumulate in place over the micro-batches: zero them first */
int zn_reduce_zero_full(struct zn_reduce *r)
{
	int rc = 0;

	for (int l = 0; !rc && l < r->c.n; l++)
		if (r->c.stage < 2)
			rc = zn_memset_async(r->c.rt->compute, r->c.L[l].grad_d, 0,
					     r->c.L[l].sh.padded_numel * 4);
	return rc;
}

/* a ring buffer of numel fp32 (the plan's allocation rounding) */
static int alloc_slot(struct zn_reduce *r, struct zn_gslot *g, uint64_t numel)
{
	uint64_t bytes = zn_plan_device_alloc_bytes(numel * 4);
	int rc = bytes ? zn_device_alloc(r->c.rt->dev, (void **)&g->d, bytes) : 0;

	return rc ? rc : zn_event_create(r->c.rt->dev, &g->free);
}

int zn_reduce_create(struct zn_reduce *r, const struct zn_reduce_config *c)
{
	int rc = 0;

	*r = (struct zn_reduce){ .c = *c };
	if (!c->grad_slots)
		return 0;
	rc = alloc_slot(r, &r->gslot0, c->layer0_numel);
	for (int i = 0; !rc && i < ZN_PLAN_GRAD_SLOTS; i++)
		rc = alloc_slot(r, &r->gring[i], c->slot_numel);
	return rc;
}

void zn_reduce_destroy(struct zn_reduce *r)
{
	struct zn_device *dev = r->c.rt ? r->c.rt->dev : NULL;

	if (dev)
		zn_device_free(dev, r->gslot0.d);
	zn_event_destroy(r->gslot0.free);
	for (int i = 0; i < ZN_PLAN_GRAD_SLOTS; i++) {
		if (dev)
			zn_device_free(dev, r->gring[i].d);
		zn_event_destroy(r->gring[i].free);
	}
	*r = (struct zn_reduce){ 0 };
}
