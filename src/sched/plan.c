/* Shard bounds, placement and the per-rank byte estimate. Pure: no I/O, no globals. */
#include "sched/plan.h"

#include "core/log.h"

const char *zn_tier_name(enum zn_tier t)
{
	switch (t) {
	case ZN_TIER_DEVICE:
		return "device";
	case ZN_TIER_HOST:
		return "host";
	case ZN_TIER_NVME:
		return "nvme";
	}
	return "?";
}

void zn_plan_shard(uint64_t numel, int world, int rank, struct zn_shard *out)
{
	uint64_t per = (numel + (uint64_t)world - 1) / (uint64_t)world;
	uint64_t end;

	/* Round every shard up to the alignment unit so shards start on 4 KiB boundaries in
	 * bf16 and fp32 alike; the tail of the last shards is padding that stays zero. */
	per = (per + ZN_SHARD_ALIGN_NUMEL - 1) / ZN_SHARD_ALIGN_NUMEL * ZN_SHARD_ALIGN_NUMEL;
	out->numel = numel;
	out->shard_numel = per;
	out->padded_numel = per * (uint64_t)world;
	out->offset = per * (uint64_t)rank;
	end = out->offset + per;
	if (out->offset >= numel)
		out->real_numel = 0;
	else
		out->real_numel = (end > numel ? numel : end) - out->offset;
}

static enum zn_tier tier_of(enum zn_offload_device d)
{
	return d == ZN_OFFLOAD_NVME ? ZN_TIER_NVME :
	       d == ZN_OFFLOAD_CPU  ? ZN_TIER_HOST : ZN_TIER_DEVICE;
}

void zn_plan_placement(int stage, enum zn_offload_device offload_optimizer,
		       enum zn_offload_device offload_param, struct zn_placement *out)
{
	out->optim_sharded = stage >= 1;
	out->grads_sharded = stage >= 2;
	out->params_sharded = stage >= 3;
	out->optim = stage >= 1 ? tier_of(offload_optimizer) : ZN_TIER_DEVICE;
	/* With the optimizer off the device, the gradient shard goes where AdamW runs: host
	 * memory (nvme holds only master, m and v; gradients are consumed at once). */
	out->grads = out->optim == ZN_TIER_DEVICE ? ZN_TIER_DEVICE : ZN_TIER_HOST;
	out->params = stage >= 3 ? tier_of(offload_param) : ZN_TIER_DEVICE;
}

void zn_plan_state_bytes(bool mixed_precision, struct zn_state_bytes *out)
{
	if (mixed_precision)
		*out = (struct zn_state_bytes){ .param = 2, .grad = 2, .optim = 12 };
	else
		*out = (struct zn_state_bytes){ .param = 4, .grad = 4, .optim = 8 };
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
	zn_plan_state_bytes(in->mixed_precision, &b);
	zn_plan_placement(in->stage, in->offload_optimizer, in->offload_param, &pl);

	/* Model states: the ZeRO paper's 16P, 4P + 12P/N, 2P + 14P/N, 16P/N (mixed precision)
	 * with each class counted on its home tier. */
	uint64_t param_b = pl.params_sharded ? b.param * P / N : b.param * P;
	uint64_t grad_b = pl.grads_sharded ? b.grad * P / N : b.grad * P;
	uint64_t optim_b = pl.optim_sharded ? b.optim * P / N : b.optim * P;
	uint64_t grad_shard_b = b.grad * P / N;

	if (pl.params == ZN_TIER_DEVICE)
		out->device_model_bytes += param_b;
	else if (pl.params == ZN_TIER_HOST)
		out->host_bytes += param_b;
	else
		out->nvme_bytes += param_b;

	if (pl.grads == ZN_TIER_DEVICE) {
		out->device_model_bytes += grad_b;
	} else {
		/* Stage 1 still reduces full gradients on the device; only the shard moves. */
		if (!pl.grads_sharded)
			out->device_model_bytes += grad_b;
		out->host_bytes += grad_shard_b;
	}

	if (pl.optim == ZN_TIER_DEVICE)
		out->device_model_bytes += optim_b;
	else if (pl.optim == ZN_TIER_HOST)
		out->host_bytes += optim_b;
	else
		out->nvme_bytes += optim_b;

	/* Working set: a partitioned class needs its largest layer in full on the device
	 * while it is used: gathered parameters for the layer computing and the d layers
	 * prefetched behind it, and one layer's full gradients before the reduce-scatter. */
	if (pl.params_sharded)
		out->device_working_bytes += (uint64_t)(1 + in->prefetch_depth) * L * b.param;
	if (pl.grads_sharded)
		out->device_working_bytes += L * b.grad;

	/* nvme needs pinned staging: buffer_count buffers of one layer's shard per class. */
	if (pl.optim == ZN_TIER_NVME)
		out->pinned_staging_bytes += (uint64_t)in->buffer_count * Ls * b.optim;
	if (pl.params == ZN_TIER_NVME)
		out->pinned_staging_bytes += (uint64_t)in->buffer_count * Ls * b.param;
	out->host_bytes += out->pinned_staging_bytes;

	out->device_bytes = out->device_model_bytes + out->device_working_bytes +
			    in->activation_bytes;
	out->host_node_bytes = out->host_bytes * (uint64_t)in->ranks_per_node;
	return 0;
}

void zn_plan_gpt_params(int layers, int hidden, int vocab, int seq, uint64_t *params,
			uint64_t *largest_layer)
{
	uint64_t C = (uint64_t)hidden;
	/* per block: ln_1 2C, c_attn 3C^2 + 3C, c_proj C^2 + C, ln_2 2C, c_fc 4C^2 + 4C,
	 * mlp c_proj 4C^2 + C = 12C^2 + 13C */
	uint64_t block = 12 * C * C + 13 * C;
	uint64_t embed = (uint64_t)vocab * C + (uint64_t)seq * C; /* wte (tied lm_head) + wpe */
	uint64_t final_norm = 2 * C;

	*params = embed + (uint64_t)layers * block + final_norm;
	*largest_layer = embed > block ? embed : block;
}
