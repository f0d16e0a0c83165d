/* zn_plan_estimate (plan.h): the per-rank bytes of `zinc estimate --params`, the ZeRO
 * paper's model-state formulas with each class on its home tier, plus the working set and
 * the nvme staging. Pure; sizes saturate (core/size.h), so a count too large for 64 bits
 * prints as more than any budget, never as a wrapped small number. */
#include "sched/plan.h"

#include "core/size.h"

static void add(uint64_t *sum, uint64_t bytes)
{
	*sum = zn_size_add(*sum, bytes);
}

/* bytes per element x P elements, over `ranks` shards */
static uint64_t class_bytes(uint64_t per, uint64_t P, uint64_t ranks)
{
	uint64_t b = zn_size_mul(per, P);

	return zn_size_overflowed(b) ? b : b / ranks;
}

int zn_plan_estimate(const struct zn_estimate_input *in, struct zn_estimate *out)
{
	struct zn_state_bytes b;
	struct zn_placement pl;
	uint64_t P = in->params, N, L = in->largest_layer, Ls;

	*out = (struct zn_estimate){ 0 };
	if (in->ranks < 1 || in->ranks_per_node < 1 || in->stage < 0 || in->stage > 3 ||
	    in->prefetch_depth < 0 || in->buffer_count < 0)
		return ZN_EUSAGE;
	if (in->offload_param != ZN_OFFLOAD_NONE && in->stage < 3)
		return ZN_EUSAGE;
	N = (uint64_t)in->ranks;
	Ls = (L + N - 1) / N; /* one rank's shard of the largest layer */
	zn_plan_state_bytes(in->mixed_precision, in->states, &b);
	zn_plan_placement(in->stage, in->offload_optimizer, in->offload_param, &pl);

	/* Model states: the ZeRO paper's 16P, 4P + 12P/N, 2P + 14P/N, 16P/N (mixed precision)
	 * with each class counted on its home tier. */
	uint64_t param_b = class_bytes(b.param, P, pl.params_sharded ? N : 1);
	uint64_t grad_b = class_bytes(b.grad, P, pl.grads_sharded ? N : 1);
	uint64_t optim_b = zn_plan_optim_bytes(in->mixed_precision, in->states,
					       pl.optim_sharded ? P / N : P);
	uint64_t grad_shard_b = class_bytes(b.grad, P, N);

	if (pl.params == ZN_TIER_DEVICE)
		add(&out->device_model_bytes, param_b);
	else if (pl.params == ZN_TIER_HOST)
		add(&out->host_bytes, param_b);
	else
		add(&out->nvme_bytes, param_b);

	if (pl.grads == ZN_TIER_DEVICE) {
		add(&out->device_model_bytes, grad_b);
	} else {
		/* Stage 1 still reduces full gradients on the device; only the shard moves. */
		if (!pl.grads_sharded)
			add(&out->device_model_bytes, grad_b);
		/* the pinned ring (grads.h): one micro-batch, nothing waits for the norm */
		if (in->grad_ring && pl.optim == ZN_TIER_NVME &&
		    zn_size_mul(ZN_PLAN_GRAD_RING + 1, zn_size_mul(Ls, b.grad)) < grad_shard_b)
			grad_shard_b = zn_size_mul(ZN_PLAN_GRAD_RING + 1, zn_size_mul(Ls, b.grad));
		add(&out->host_bytes, grad_shard_b);
	}

	if (pl.optim == ZN_TIER_DEVICE)
		add(&out->device_model_bytes, optim_b);
	else if (pl.optim == ZN_TIER_HOST)
		add(&out->host_bytes, optim_b);
	else
		add(&out->nvme_bytes, optim_b);

	/* Working set: a partitioned class needs its largest layer in full on the device
	 * while it is used: gathered parameters for the layer computing and the d layers
	 * prefetched behind it, and one layer's full gradients before the reduce-scatter. */
	if (pl.params_sharded)
		add(&out->device_working_bytes, zn_size_mul(1 + (uint64_t)in->prefetch_depth,
							    zn_size_mul(L, b.param)));
	if (pl.grads_sharded)
		add(&out->device_working_bytes, zn_size_mul(L, b.grad));

	/* nvme needs pinned staging: buffer_count buffers of one layer's shard per class. */
	if (pl.optim == ZN_TIER_NVME)
		add(&out->pinned_staging_bytes, zn_size_mul((uint64_t)in->buffer_count,
			zn_plan_optim_bytes(in->mixed_precision, in->states, Ls)));
	if (pl.params == ZN_TIER_NVME)
		add(&out->pinned_staging_bytes, zn_size_mul((uint64_t)in->buffer_count,
							    zn_size_mul(Ls, b.param)));
	add(&out->host_bytes, out->pinned_staging_bytes);

	/* a frozen base: parameters only, on the parameters' tier, whole on every rank */
	if (in->frozen_params) {
		uint64_t slots = zn_size_mul(2 + (uint64_t)in->prefetch_depth,
					     in->frozen_largest_layer);

		out->frozen_bytes = zn_size_mul(in->frozen_params, b.param);
		if (pl.params == ZN_TIER_DEVICE)
			add(&out->device_model_bytes, out->frozen_bytes);
		else if (pl.params == ZN_TIER_HOST)
			add(&out->host_bytes, out->frozen_bytes);
		else
			add(&out->nvme_bytes, out->frozen_bytes);
		if (!(pl.params == ZN_TIER_DEVICE && b.param == 4))
			add(&out->device_working_bytes, zn_size_mul(slots, 4));
		if (pl.params == ZN_TIER_NVME) {
			uint64_t rb = in->frozen_read_buffers > 0 ?
					      (uint64_t)in->frozen_read_buffers :
					      1 + (uint64_t)in->prefetch_depth +
						      ZN_PLAN_FROZEN_READ_AHEAD;
			uint64_t reads = zn_size_mul(1 + rb, zn_size_mul(in->frozen_largest_layer,
									 b.param));

			add(&out->pinned_staging_bytes, reads);
			add(&out->host_bytes, reads);
		}
	}

	out->device_bytes = zn_size_add(zn_size_add(out->device_model_bytes,
						    out->device_working_bytes), in->activation_bytes);
	out->host_node_bytes = zn_size_mul(out->host_bytes, (uint64_t)in->ranks_per_node);
	return 0;
}
