/* Shard bounds, placement and the engine's plan (the estimate of `zinc estimate` is in
 * plan_estimate.c). Pure: no I/O, no globals; sizes saturate (core/size.h). */
#include "sched/plan.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/size.h"
#include "cpu/adamw.h"

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
	/* a layer with nothing to train (every parameter frozen) still gets one unit of
	 * padding: its gradient stays 0 and AdamW leaves the zeros as they are */
	if (per == 0)
		per = ZN_SHARD_ALIGN_NUMEL;
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

uint64_t zn_plan_moment_bytes(enum zn_optim_states states, uint64_t n)
{
	if (zn_size_overflowed(zn_size_mul(n, 4)))
		return ZN_SIZE_OVERFLOW;
	return zn_adamw_state_bytes(states, n);
}

uint64_t zn_plan_optim_bytes(bool mixed_precision, enum zn_optim_states states, uint64_t n)
{
	return zn_size_add(mixed_precision ? zn_size_mul(n, 4) : 0,
			   zn_size_mul(2, zn_plan_moment_bytes(states, n)));
}

const char *zn_plan_fmt_state_bytes(const char *dtype, enum zn_optim_states states, char *buf,
				    size_t size)
{
	bool mixed = strcmp(dtype, "fp32") != 0;
	struct zn_state_bytes b;
	char st[48] = "";

	zn_plan_state_bytes(mixed, states, &b);
	if (states != ZN_STATES_FP32)
		snprintf(st, sizeof(st), ", %s optimizer states", zn_optim_states_name(states));
	snprintf(buf, size, "%s%s%s (%u+%u+%.3g B/param)", dtype, mixed ? " mixed precision" : "",
		 st, b.param, b.grad, b.optim);
	return buf;
}

void zn_plan_state_bytes(bool mixed_precision, enum zn_optim_states states,
			 struct zn_state_bytes *out)
{
	/* per parameter: a whole number of blocks, so int8's absmax counts as it is stored */
	double optim = (double)zn_plan_optim_bytes(mixed_precision, states, 1 << 20) / (1 << 20);

	if (mixed_precision)
		*out = (struct zn_state_bytes){ .param = 2, .grad = 2, .optim = optim };
	else
		*out = (struct zn_state_bytes){ .param = 4, .grad = 4, .optim = optim };
}

/* ---- the engine's plan ---------------------------------------------------------------- */

static int engine_input_check(const struct zn_engine_plan_input *in)
{
	if (in->layer_count < 2 || !in->layer_numel || in->world < 1 || in->stage < 0 ||
	    in->stage > 3 || in->grad_accum < 1 || in->prefetch_depth < 0) {
		zn_error("plan: bad engine input (layers %d, world %d, stage %d, grad_accum %d, "
			 "prefetch %d)", in->layer_count, in->world, in->stage, in->grad_accum,
			 in->prefetch_depth);
		return ZN_EUSAGE;
	}
	if (in->offload_optimizer != ZN_OFFLOAD_NONE && in->stage < 1) {
		zn_error("offload_optimizer needs zero stage 1, 2 or 3 (is 0): add --zero-stage 3");
		return ZN_EUSAGE;
	}
	if (in->offload_param != ZN_OFFLOAD_NONE &&
	    (in->stage < 3 || in->offload_optimizer == ZN_OFFLOAD_NONE)) {
		zn_error("offload_param needs zero stage 3 and offload_optimizer cpu or nvme "
			 "(AdamW writes the offloaded parameter shard): add --zero-stage 3 "
			 "--offload-optimizer cpu");
		return ZN_EUSAGE;
	}
	return 0;
}

static uint64_t padded_of(const struct zn_engine_plan_input *in, int l)
{
	struct zn_shard s;

	zn_plan_shard(in->layer_numel[l], in->world, 0, &s);
	return s.padded_numel;
}

void zn_plan_layer_buffers(const struct zn_engine_plan_input *in,
			   const struct zn_engine_plan *p, int l, struct zn_layer_buffers *out)
{
	struct zn_shard s;
	uint64_t pb = p->param_bytes, full, opt;
	bool offload = p->pl.optim != ZN_TIER_DEVICE; /* AdamW on the CPU */
	bool host_optim = p->pl.optim == ZN_TIER_HOST;

	zn_plan_shard(in->layer_numel[l], in->world, 0, &s);
	*out = (struct zn_layer_buffers){ 0 };
	full = s.padded_numel;
	opt = in->stage == 0 ? full : s.shard_numel; /* optimizer span */

	if (in->stage < 3)
		out->param_d = zn_plan_device_alloc_bytes(zn_size_mul(full, pb));
	else if (p->pl.params == ZN_TIER_DEVICE)
		out->param_d = zn_plan_device_alloc_bytes(zn_size_mul(s.shard_numel, pb));
	else if (p->pl.params == ZN_TIER_HOST)
		out->param_h = zn_plan_host_alloc_bytes(zn_size_mul(s.shard_numel, pb));

	if (in->stage < 2)
		out->grad_d = zn_plan_device_alloc_bytes(zn_size_mul(full, 4));
	if (offload) {
		/* the ring's buffers are counted once for the plan (zn_plan_engine) */
		if (p->grad_home != ZN_GRAD_PINNED_RING || l == 0)
			out->grad_h = zn_plan_host_alloc_bytes(zn_size_mul(s.shard_numel, 4));
		if (in->stage >= 2 && in->grad_accum > 1)
			out->grad_recv_h = zn_plan_host_alloc_bytes(zn_size_mul(s.shard_numel, 4));
		if (host_optim && !p->master_aliases_params)
			out->master_h = zn_plan_host_alloc_bytes(zn_size_mul(opt, 4));
		if (host_optim) {
			out->m_h = zn_plan_host_alloc_bytes(zn_plan_moment_bytes(p->states, opt));
			out->v_h = zn_plan_host_alloc_bytes(zn_plan_moment_bytes(p->states, opt));
		}
		if (p->pl.params == ZN_TIER_DEVICE)
			out->param_stage_h = zn_plan_host_alloc_bytes(zn_size_mul(s.shard_numel, pb));
	} else {
		if (in->stage >= 2)
			out->grad_shard_d = zn_plan_device_alloc_bytes(zn_size_mul(s.shard_numel, 4));
		if (!p->master_aliases_params)
			out->master_d = zn_plan_device_alloc_bytes(zn_size_mul(opt, 4));
		out->m_d = zn_plan_device_alloc_bytes(zn_plan_moment_bytes(p->states, opt));
		out->v_d = zn_plan_device_alloc_bytes(zn_plan_moment_bytes(p->states, opt));
	}
}

static uint64_t path_bytes(uint64_t logical, int paths)
{
	uint64_t stripes = (logical + ZN_PLAN_SWAP_STRIPE - 1) / ZN_PLAN_SWAP_STRIPE;
	uint64_t p = paths > 0 ? (uint64_t)paths : 1;

	return (stripes + p - 1) / p * ZN_PLAN_SWAP_STRIPE;
}

/* The staging chunk (plan.h, nvme): the largest shard, at most ZN_PLAN_SWAP_CHUNK_NUMEL
 * and at most the state / buffers, in whole ZN_SHARD_ALIGN_NUMEL units (shards are: a
 * chunk's offset stays 4 KiB aligned for O_DIRECT in any dtype). */
static uint64_t swap_chunk(uint64_t largest, uint64_t state_numel, int buffers)
{
	uint64_t c = state_numel / (uint64_t)buffers / ZN_SHARD_ALIGN_NUMEL * ZN_SHARD_ALIGN_NUMEL;

	if (c > ZN_PLAN_SWAP_CHUNK_NUMEL)
		c = ZN_PLAN_SWAP_CHUNK_NUMEL;
	if (c < ZN_SHARD_ALIGN_NUMEL)
		c = ZN_SHARD_ALIGN_NUMEL;
	return c < largest ? c : largest;
}

int zn_plan_swap_chunks(uint64_t swap_chunk_numel, uint64_t shard_numel)
{
	if (!swap_chunk_numel || shard_numel <= swap_chunk_numel)
		return 1;
	return (int)((shard_numel + swap_chunk_numel - 1) / swap_chunk_numel);
}

/* The nvme extents and their pinned staging (see the header). */
static void plan_nvme(const struct zn_engine_plan_input *in, struct zn_engine_plan *out)
{
	bool opt_nvme = out->pl.optim == ZN_TIER_NVME, prm_nvme = out->pl.params == ZN_TIER_NVME;
	uint64_t pb = out->param_bytes, per_buf = 0, state_numel = 0;

	if (!opt_nvme && !prm_nvme)
		return;
	/* hot layers (plan.h): 0 and the first forward's prefetch batch, 1 .. depth + 1 */
	if (prm_nvme && out->gathers) {
		out->hot_layers = out->prefetch_depth + 1;
		if (out->hot_layers > out->param_slots)
			out->hot_layers = out->param_slots;
		if (out->hot_layers > in->layer_count - 1)
			out->hot_layers = in->layer_count - 1;
		if (in->hot_cap < 0 || (in->hot_cap > 0 && out->hot_layers > in->hot_cap))
			out->hot_layers = in->hot_cap < 0 ? 0 : in->hot_cap;
	}
	for (int l = 0; l < in->layer_count; l++) {
		struct zn_shard s;

		zn_plan_shard(in->layer_numel[l], in->world, 0, &s);
		if (s.shard_numel > out->swap_shard_numel)
			out->swap_shard_numel = s.shard_numel;
		/* m and v as stored, each extent (and transfer) a 4 KiB multiple */
		uint64_t mv = zn_size_mul(2, zn_plan_host_alloc_bytes(
			zn_plan_moment_bytes(out->states, s.shard_numel)));
		uint64_t master = out->master_aliases_params ? 0 :
			zn_plan_host_alloc_bytes(zn_size_mul(s.shard_numel, 4));

		if (l > 0 && s.shard_numel > out->fetch_ring_numel)
			out->fetch_ring_numel = s.shard_numel;
		state_numel = zn_size_add(state_numel, s.shard_numel);
		if (opt_nvme)
			out->nvme_optim_bytes = zn_size_add(out->nvme_optim_bytes,
							    zn_size_add(mv, master));
		if (prm_nvme)
			out->nvme_param_bytes = zn_size_add(out->nvme_param_bytes,
				zn_plan_host_alloc_bytes(zn_size_mul(s.shard_numel, pb)));
		/* per step: AdamW reads and writes master, m and v; with parameters on nvme
		 * every use fetches the shard (layer 0 once a step, the others in each
		 * micro-batch's forward and backward) and AdamW writes the new shard unless
		 * it is the master */
		if (opt_nvme) {
			uint64_t rw = zn_size_add(zn_size_mul(s.shard_numel, 4), mv);

			out->nvme_step_read_bytes = zn_size_add(out->nvme_step_read_bytes, rw);
			out->nvme_step_write_bytes = zn_size_add(out->nvme_step_write_bytes, rw);
		}
		if (prm_nvme) {
			uint64_t uses = zn_plan_layer_uses(in, l);

			/* a hot layer's fetches copy its pinned shard: no reads */
			if (l > out->hot_layers)
				out->nvme_step_read_bytes = zn_size_add(out->nvme_step_read_bytes,
					zn_size_mul(uses, zn_size_mul(s.shard_numel, pb)));
			else if (l > 0)
				out->host_swap_bytes = zn_size_add(out->host_swap_bytes,
					zn_plan_host_alloc_bytes(zn_size_mul(s.shard_numel, pb)));
			if (!(opt_nvme && out->master_aliases_params))
				out->nvme_step_write_bytes = zn_size_add(out->nvme_step_write_bytes,
					zn_size_mul(s.shard_numel, pb));
		}
	}
	out->nvme_optim_path_bytes = opt_nvme ? path_bytes(out->nvme_optim_bytes,
							   in->optim_path_count) : 0;
	out->nvme_param_path_bytes = prm_nvme ? path_bytes(out->nvme_param_bytes,
							   in->param_path_count) : 0;
	out->swap_buffers = in->swap_buffer_count > 2 ? in->swap_buffer_count : 2;
	/* compact m and v are stored whole per layer (their int8 block scales follow the
	 * codes), so a layer is one chunk: staging holds the largest shard */
	out->swap_chunk_numel = out->states == ZN_STATES_FP32 ?
		swap_chunk(out->swap_shard_numel, state_numel, out->swap_buffers) :
		out->swap_shard_numel;
	out->swap_moment_bytes = zn_plan_host_alloc_bytes(
		zn_plan_moment_bytes(out->states, out->swap_chunk_numel));
	if (opt_nvme)
		per_buf = zn_size_add(zn_plan_host_alloc_bytes(zn_size_mul(out->swap_chunk_numel, 4)),
				      zn_size_mul(2, out->swap_moment_bytes));
	if (prm_nvme && !(opt_nvme && out->master_aliases_params))
		per_buf = zn_size_add(per_buf, zn_plan_host_alloc_bytes(
					  zn_size_mul(out->swap_chunk_numel, pb)));
	out->host_swap_bytes = zn_size_add(out->host_swap_bytes,
					   zn_size_mul((uint64_t)out->swap_buffers, per_buf));
	if (prm_nvme) {
		struct zn_shard s0;

		zn_plan_shard(in->layer_numel[0], in->world, 0, &s0);
		out->fetch_buffers = out->param_slots + 1;
		out->host_swap_bytes = zn_size_add(out->host_swap_bytes, zn_size_add(
			zn_size_mul((uint64_t)out->param_slots,
				    zn_plan_host_alloc_bytes(zn_size_mul(out->fetch_ring_numel, pb))),
			zn_plan_host_alloc_bytes(zn_size_mul(s0.shard_numel, pb))));
	}
}

/* The gradient home (plan.h): the ring when nothing needs a gradient after its update. */
static void grad_home(const struct zn_engine_plan_input *in, struct zn_engine_plan *out)
{
	if (out->pl.optim == ZN_TIER_DEVICE) {
		out->grad_home = ZN_GRAD_DEVICE;
		return;
	}
	out->grad_home = ZN_GRAD_PINNED_HELD;
	if (out->pl.optim != ZN_TIER_NVME || in->grad_accum > 1 || in->norm_first)
		return;
	out->grad_home = ZN_GRAD_PINNED_RING;
	out->grad_ring = in->layer_count - 1 < ZN_PLAN_GRAD_RING ? in->layer_count - 1 :
								   ZN_PLAN_GRAD_RING;
	for (int l = 1; l < in->layer_count; l++) {
		struct zn_shard s;

		zn_plan_shard(in->layer_numel[l], in->world, 0, &s);
		if (s.shard_numel > out->grad_ring_numel)
			out->grad_ring_numel = s.shard_numel;
	}
}

const char *zn_plan_grad_home_name(enum zn_grad_home h)
{
	switch (h) {
	case ZN_GRAD_PINNED_RING:
		return "pinned ring";
	case ZN_GRAD_PINNED_HELD:
		return "pinned, held for the step";
	case ZN_GRAD_DEVICE:
		break;
	}
	return "device";
}

uint64_t zn_plan_pinned_reserve(const struct zn_engine_plan *p, uint64_t pinned_budget)
{
	uint64_t r;

	if (!p->host_bytes)
		return 0;
	r = p->host_bytes + ZN_PLAN_PINNED_MARGIN;
	if (pinned_budget && r > pinned_budget)
		r = pinned_budget > p->host_bytes ? pinned_budget : p->host_bytes;
	return r;
}

static uint64_t sum6(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f)
{
	return zn_size_add(zn_size_add(zn_size_add(a, b), zn_size_add(c, d)), zn_size_add(e, f));
}

/* layer 0's own working buffer and `ring` of the largest other layer, elem bytes each */
static uint64_t slots_bytes(const struct zn_engine_plan *p, int ring, uint64_t elem)
{
	return zn_size_add(zn_plan_device_alloc_bytes(zn_size_mul(p->layer0_numel, elem)),
			   zn_size_mul((uint64_t)ring, zn_plan_device_alloc_bytes(
					   zn_size_mul(p->slot_numel, elem))));
}

static void add_layer(struct zn_engine_plan *out, const struct zn_layer_buffers *b)
{
	out->dev_param_bytes = zn_size_add(out->dev_param_bytes, b->param_d);
	out->dev_grad_bytes = zn_size_add(out->dev_grad_bytes,
					  zn_size_add(b->grad_d, b->grad_shard_d));
	out->dev_optim_bytes = zn_size_add(out->dev_optim_bytes,
					   zn_size_add(zn_size_add(b->master_d, b->m_d), b->v_d));
	out->host_param_bytes = zn_size_add(out->host_param_bytes, b->param_h);
	out->host_grad_bytes = zn_size_add(out->host_grad_bytes,
					   zn_size_add(b->grad_h, b->grad_recv_h));
	out->host_optim_bytes = zn_size_add(out->host_optim_bytes,
					    zn_size_add(zn_size_add(b->master_h, b->m_h), b->v_h));
	out->host_staging_bytes = zn_size_add(out->host_staging_bytes, b->param_stage_h);
}

int zn_plan_engine(const struct zn_engine_plan_input *in, struct zn_engine_plan *out)
{
	int rc = engine_input_check(in);

	*out = (struct zn_engine_plan){ 0 };
	if (rc)
		return rc;
	zn_plan_placement(in->stage, in->offload_optimizer, in->offload_param, &out->pl);
	out->param_bytes = in->bf16 ? 2 : 4;
	out->states = in->states;
	/* fp32 parameters on the optimizer's tier are the master (nothing to round). */
	out->master_aliases_params = !in->bf16 && out->pl.params == out->pl.optim;
	out->gathers = in->stage == 3 || (in->bf16 && !in->compute16);
	out->bf16_gather = in->stage == 3 && in->bf16;
	out->f32_slots = out->gathers && !in->compute16;
	out->prefetch_depth = in->prefetch_depth;
	out->layer0_numel = padded_of(in, 0);
	for (int l = 1; l < in->layer_count; l++) {
		uint64_t n = padded_of(in, l);

		if (n > out->slot_numel)
			out->slot_numel = n;
	}
	if (out->gathers) {
		/* layer 0's own slot plus the ring; a ring deeper than the layers is waste */
		int ring = in->prefetch_depth < in->layer_count - 1 ? in->prefetch_depth + 1 :
								       in->layer_count - 1;

		out->param_slots = ring;
		/* at most ring - 1 ahead: one more would fetch into the slot being computed on */
		if (out->prefetch_depth > ring - 1)
			out->prefetch_depth = ring - 1;
		if (out->f32_slots)
			out->dev_working_bytes = zn_size_add(out->dev_working_bytes,
							     slots_bytes(out, ring, 4));
		if (out->bf16_gather)
			out->dev_working_bytes = zn_size_add(out->dev_working_bytes,
							     slots_bytes(out, ring, 2));
	}
	if (in->stage >= 2) {
		out->grad_slots = ZN_PLAN_GRAD_SLOTS;
		out->dev_working_bytes = zn_size_add(out->dev_working_bytes,
						     slots_bytes(out, ZN_PLAN_GRAD_SLOTS, 4));
	}
	grad_home(in, out);
	out->host_grad_bytes = zn_size_mul((uint64_t)out->grad_ring,
					   zn_plan_host_alloc_bytes(zn_size_mul(out->grad_ring_numel,
										4)));
	for (int l = 0; l < in->layer_count; l++) {
		struct zn_layer_buffers b;

		zn_plan_layer_buffers(in, out, l, &b);
		add_layer(out, &b);
	}
	out->dev_act_bytes = in->activation_bytes;
	plan_nvme(in, out);
	zn_plan_frozen(in, out);
	out->device_bytes = sum6(out->dev_param_bytes, out->dev_grad_bytes, out->dev_optim_bytes,
				 out->dev_working_bytes, out->dev_act_bytes, out->dev_frozen_bytes);
	out->host_act_bytes = in->activation_host_bytes;
	out->nvme_act_bytes = in->activation_nvme_bytes;
	out->host_bytes = zn_size_add(sum6(out->host_param_bytes, out->host_grad_bytes,
					   out->host_optim_bytes, out->host_staging_bytes,
					   out->host_swap_bytes, out->host_act_bytes),
				      out->host_frozen_bytes);
	out->nvme_step_read_bytes = zn_size_add(out->nvme_step_read_bytes,
						out->frozen_step_read_bytes);
	out->nvme_step_read_bytes = zn_size_add(out->nvme_step_read_bytes,
						in->activation_nvme_step_bytes);
	out->nvme_step_write_bytes = zn_size_add(out->nvme_step_write_bytes,
						 in->activation_nvme_step_bytes);
	return 0;
}

int zn_plan_prefetch_depth(const struct zn_config *cfg, uint64_t slot_numel, int layer_count)
{
	uint64_t by_bucket, by_live, d;

	if (cfg->runtime.prefetch_depth > 0)
		return cfg->runtime.prefetch_depth;
	if (layer_count < 3 || slot_numel == 0)
		return 0;
	by_bucket = cfg->zero.stage3_prefetch_bucket_size / slot_numel;
	by_live = cfg->zero.stage3_max_live_parameters / slot_numel;
	by_live = by_live > 0 ? by_live - 1 : 0;
	d = by_bucket < by_live ? by_bucket : by_live;
	if (d > (uint64_t)layer_count - 2)
		d = (uint64_t)layer_count - 2;
	if (d > 4)
		d = 4;
	return d < 1 ? 1 : (int)d;
}

static double mib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0);
}

int zn_plan_check_budget(const struct zn_engine_plan *p, int stage, uint64_t device_budget,
			 uint64_t pinned_budget, char *msg, size_t msg_size)
{
	if (device_budget && p->device_bytes > device_budget) {
		/* suggest what is left to move off the device */
		bool all_off = stage == 3 && p->pl.params != ZN_TIER_DEVICE &&
			       p->pl.optim != ZN_TIER_DEVICE;
		const char *hint = all_off ?
			"a smaller --micro-batch or --seq (activations), or a larger --device-mem" :
			"--zero-stage 3 --offload-optimizer cpu --offload-param cpu, a smaller "
			"--micro-batch or a larger --device-mem";

		snprintf(msg, msg_size,
			 "device budget %.2f MiB is short by %.2f MiB for stage %d (params %.2f, "
			 "grads %.2f, optimizer %.2f, working %.2f, activations %.2f, frozen %.2f "
			 "MiB); try %s",
			 mib(device_budget), mib(p->device_bytes - device_budget), stage,
			 mib(p->dev_param_bytes), mib(p->dev_grad_bytes), mib(p->dev_optim_bytes),
			 mib(p->dev_working_bytes), mib(p->dev_act_bytes), mib(p->dev_frozen_bytes),
			 hint);
		return -ENOMEM;
	}
	if (pinned_budget && p->host_bytes > pinned_budget) {
		snprintf(msg, msg_size,
			 "pinned host budget %.2f MiB is short by %.2f MiB for stage %d (params "
			 "%.2f, grads %.2f, optimizer %.2f, staging %.2f, nvme staging %.2f, "
			 "activation checkpoints %.2f, frozen %.2f MiB); raise --pinned-mem or use "
			 "more ranks",
			 mib(pinned_budget), mib(p->host_bytes - pinned_budget), stage,
			 mib(p->host_param_bytes), mib(p->host_grad_bytes), mib(p->host_optim_bytes),
			 mib(p->host_staging_bytes), mib(p->host_swap_bytes), mib(p->host_act_bytes),
			 mib(p->host_frozen_bytes));
		return -ENOMEM;
	}
	return 0;
}

int zn_plan_engine_fit(const struct zn_engine_plan_input *in, bool auto_depth,
		       uint64_t device_budget, uint64_t pinned_budget,
		       struct zn_engine_plan *out, char *msg, size_t msg_size)
{
	struct zn_engine_plan_input t = *in;
	int rc = zn_plan_engine(&t, out);

	if (rc)
		return rc;
	/* A shallower prefetch only costs overlap; try it before refusing the run. */
	while (auto_depth && out->gathers && t.prefetch_depth > 0 && device_budget &&
	       out->device_bytes > device_budget) {
		t.prefetch_depth--;
		rc = zn_plan_engine(&t, out);
		if (rc)
			return rc;
	}
	/* fewer frozen read buffers only cost read-ahead; a count given is kept */
	while (in->frozen_read_buffers == 0 && out->frozen_read_buffers > 1 && pinned_budget &&
	       out->host_bytes > pinned_budget) {
		t.frozen_read_buffers = out->frozen_read_buffers - 1;
		rc = zn_plan_engine(&t, out);
		if (rc)
			return rc;
	}
	/* hot layers (plan.h) only save reads: fewer of them before refusing the run */
	while (pinned_budget && out->host_bytes > pinned_budget && out->hot_layers > 0) {
		t.hot_cap = out->hot_layers > 1 ? out->hot_layers - 1 : -1;
		rc = zn_plan_engine(&t, out);
		if (rc)
			return rc;
	}
	return zn_plan_check_budget(out, in->stage, device_budget, pinned_budget, msg, msg_size);
}
