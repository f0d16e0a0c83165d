/* The plan's part for frozen parameters (plan.h zn_plan_frozen; docs/lora.md). Pure.
 *
 * A frozen layer has parameters only: no gradient, master, m, v or optimizer I/O. Its home
 * is the parameters' tier (the device, or with stage 3 offload_param cpu / nvme pinned host
 * memory / the frozen store on nvme), in the run's stored dtype (bf16 / fp16: 2 bytes, else
 * 4), whole on every rank. The compute reads a working copy on the device, fp32, or with
 * bf16 compute the stored bf16 values (frozen_wide false: never widened): the home itself
 * when it is on the device in that dtype (frozen_direct), else a slot: layer 0's (held for
 * the step, as a later layer may tie to it) and a ring of prefetch_depth + 1 for the others,
 * each slot with a 16-bit staging buffer on the device when the home is off the device and
 * 16-bit (the copy up, then the cast; with bf16 compute the staging buffer is the working
 * copy); with the home on nvme, pinned read buffers apart from the slots: layer 0's and
 * frozen_read_buffers for the others (ring + ZN_PLAN_FROZEN_READ_AHEAD unless given, fewer
 * where the pinned budget is short), so the reads run further ahead than the slot ring.
 * A 4-bit base (docs/qlora.md) is stored as each layer's packed extent: homes, read buffers
 * and staging hold extents, and every slot dequantizes into its own working copy (fp32, or
 * bf16 with bf16 compute) with a scratch for nested absmax.
 * A mixture of experts' frozen experts (frozen_experts): with the home off the device and
 * fp32 working copies (a 4-bit base too: its experts are plain), a sparse layer's fetch (and read) is the rest of the layer
 * only, and each routed expert is fetched on its own (frozen_experts.c): a pinned buffer of
 * one expert for its nvme read, a device one for its 16-bit copy before the cast.
 */
#include "sched/plan.h"

#include "core/size.h"

static uint64_t dev(uint64_t bytes)
{
	return zn_plan_device_alloc_bytes(bytes);
}

static uint64_t host(uint64_t bytes)
{
	return zn_plan_host_alloc_bytes(bytes);
}

/* layer 0's working copy and a ring of the largest other layer's, elem bytes each */
static uint64_t slots(uint64_t s0, uint64_t sl, int ring, uint64_t elem)
{
	return zn_size_add(dev(zn_size_mul(s0, elem)),
			   zn_size_mul((uint64_t)ring, dev(zn_size_mul(sl, elem))));
}

/* layer l's stored bytes: its 4-bit extent, or numel x the stored dtype */
static uint64_t stored(const struct zn_engine_plan_input *in, int l, uint64_t fb)
{
	return in->frozen_q4_bytes ? in->frozen_q4_bytes[l] : zn_size_mul(in->frozen_numel[l], fb);
}

bool zn_plan_frozen_streams(const struct zn_engine_plan_input *in,
			    const struct zn_engine_plan *p, int l)
{
	return p->frozen_experts && l > 0 && in->frozen_expert_numel[l] > 0 &&
	       in->frozen_experts[l] > 0;
}

/* a streamed layer l's rest (the stored bytes before its expert stacks) and one expert's
 * stored bytes (its slices of the stacks) */
static void split(const struct zn_engine_plan_input *in, const struct zn_engine_plan *p, int l,
		  uint64_t *rest, uint64_t *one)
{
	uint64_t fb = p->frozen_elem_bytes, xn = in->frozen_expert_numel[l];

	*rest = stored(in, l, fb) - zn_size_mul(xn, fb);
	*one = zn_size_mul(xn / (uint64_t)in->frozen_experts[l], fb);
}

uint64_t zn_plan_frozen_extent(const struct zn_engine_plan_input *in,
			       const struct zn_engine_plan *p, int l)
{
	uint64_t rest, one;

	if (!zn_plan_frozen_streams(in, p, l))
		return host(stored(in, l, p->frozen_elem_bytes));
	split(in, p, l, &rest, &one);
	return zn_size_add(host(rest), zn_size_mul((uint64_t)in->frozen_experts[l], host(one)));
}

/* bytes a use of layer l reads from nvme: its extent, or a streamed layer's rest */
static uint64_t use_read(const struct zn_engine_plan_input *in, const struct zn_engine_plan *p,
			 int l)
{
	uint64_t rest, one;

	if (!zn_plan_frozen_streams(in, p, l))
		return host(stored(in, l, p->frozen_elem_bytes));
	split(in, p, l, &rest, &one);
	return host(rest);
}

/* the experts' figures: one expert's bytes (the largest), and every expert of every use */
static void expert_figures(const struct zn_engine_plan_input *in, struct zn_engine_plan *out)
{
	for (int l = 0; l < in->layer_count; l++) {
		uint64_t rest, one;

		if (!zn_plan_frozen_streams(in, out, l))
			continue;
		split(in, out, l, &rest, &one);
		if (one > out->frozen_expert_bytes)
			out->frozen_expert_bytes = one;
		out->frozen_step_expert_bytes = zn_size_add(out->frozen_step_expert_bytes,
			zn_size_mul(zn_plan_layer_uses(in, l),
				    zn_size_mul((uint64_t)in->frozen_experts[l], one)));
	}
}

/* the numel and bytes of layer 0 and the largest other layer; the bytes are what a use
 * fetches (a streamed layer's rest: the read buffers and staging hold no expert) */
static void sizes(const struct zn_engine_plan_input *in, struct zn_engine_plan *out)
{
	for (int l = 0; in->frozen_numel && l < in->layer_count; l++) {
		uint64_t n = in->frozen_numel[l], b = stored(in, l, out->frozen_elem_bytes), one;

		if (zn_plan_frozen_streams(in, out, l))
			split(in, out, l, &b, &one);

		out->frozen_numel_total = zn_size_add(out->frozen_numel_total, n);
		if (l == 0) {
			out->frozen_layer0_numel = n;
			out->frozen_layer0_bytes = b;
			continue;
		}
		if (n > out->frozen_slot_numel)
			out->frozen_slot_numel = n;
		if (b > out->frozen_slot_bytes)
			out->frozen_slot_bytes = b;
	}
}

void zn_plan_frozen(const struct zn_engine_plan_input *in, struct zn_engine_plan *out)
{
	uint64_t fb, s0, sl, b0, bl;
	bool staged, q4 = in->frozen_q4_bytes != NULL;
	int ring;

	out->frozen_home = out->pl.params;
	out->frozen_elem_bytes = in->bf16 ? 2 : 4;
	out->frozen_q4 = q4;
	fb = out->frozen_elem_bytes;
	out->frozen_wide = !(in->compute16 && fb == 2);
	/* a 4-bit base too: its expert stacks are plain (not nn.Linear weights), stored in
	 * the run's dtype at the tail of the extent's plain part (frozen_experts.c offers no
	 * layer where they are not) */
	out->frozen_experts = in->frozen_expert_numel && in->frozen_experts &&
			      out->frozen_wide && (out->frozen_home == ZN_TIER_HOST ||
						   out->frozen_home == ZN_TIER_NVME);
	sizes(in, out);
	out->frozen = out->frozen_numel_total > 0;
	if (!out->frozen) {
		out->frozen_experts = false;
		return;
	}
	expert_figures(in, out);
	for (int l = 0; l < in->layer_count; l++) {
		uint64_t n = in->frozen_numel[l];
		uint64_t bytes = stored(in, l, fb);

		out->frozen_home_bytes = zn_size_add(out->frozen_home_bytes,
			out->frozen_home == ZN_TIER_DEVICE ? dev(bytes) : host(bytes));
		if (out->frozen_home == ZN_TIER_DEVICE)
			out->dev_frozen_bytes = zn_size_add(out->dev_frozen_bytes, dev(bytes));
		else if (out->frozen_home == ZN_TIER_HOST)
			out->host_frozen_bytes = zn_size_add(out->host_frozen_bytes, host(bytes));
		else /* 4 KiB extents (a streamed layer's parts each) */
			out->nvme_frozen_bytes = zn_size_add(out->nvme_frozen_bytes,
							     zn_plan_frozen_extent(in, out, l));
		/* layer 0's working copy is fetched at the first step and kept (the base never
		 * changes); the others' are read for each use (a streamed layer's rest: its
		 * experts as routed, not planned here) */
		if (out->frozen_home == ZN_TIER_NVME && n && l > 0)
			out->frozen_step_read_bytes = zn_size_add(out->frozen_step_read_bytes,
				zn_size_mul(zn_plan_layer_uses(in, l), use_read(in, out, l)));
		else if (out->frozen_home == ZN_TIER_NVME && n)
			out->frozen_first_read_bytes = host(bytes);
	}
	out->frozen_direct = !q4 && out->frozen_home == ZN_TIER_DEVICE &&
			     (fb == 4 || !out->frozen_wide);
	if (out->frozen_direct)
		return;
	ring = in->prefetch_depth < in->layer_count - 1 ? in->prefetch_depth + 1 :
							   in->layer_count - 1;
	if (ring < 1)
		ring = 1;
	out->frozen_slots = ring;
	out->frozen_depth = ring - 1;
	s0 = out->frozen_layer0_numel;
	sl = out->frozen_slot_numel;
	b0 = out->frozen_layer0_bytes;
	bl = out->frozen_slot_bytes;
	staged = out->frozen_home != ZN_TIER_DEVICE && (q4 || fb == 2);
	/* working copies: fp32, or with bf16 compute bf16 (a 4-bit base's dequantized one;
	 * else the staged stored values themselves) */
	if (out->frozen_wide)
		out->dev_frozen_bytes = zn_size_add(out->dev_frozen_bytes, slots(s0, sl, ring, 4));
	else if (q4)
		out->dev_frozen_bytes = zn_size_add(out->dev_frozen_bytes, slots(s0, sl, ring, 2));
	if (staged)
		out->dev_frozen_bytes = zn_size_add(out->dev_frozen_bytes, slots(b0, bl, ring, 1));
	if (q4)
		out->dev_frozen_bytes = zn_size_add(out->dev_frozen_bytes, zn_size_mul(
			(uint64_t)ring + 1, dev(in->frozen_q4_scratch)));
	/* an expert's 16-bit copy up before its cast; its nvme read's pinned buffer */
	if (out->frozen_experts && fb == 2)
		out->dev_frozen_bytes = zn_size_add(out->dev_frozen_bytes,
						    dev(out->frozen_expert_bytes));
	if (out->frozen_experts && out->frozen_home == ZN_TIER_NVME)
		out->host_frozen_bytes = zn_size_add(out->host_frozen_bytes,
						     host(out->frozen_expert_bytes));
	if (out->frozen_home == ZN_TIER_NVME) {
		out->frozen_read_buffers = zn_plan_frozen_read_buffers(in->frozen_read_buffers,
								       ring, in->layer_count);
		out->host_frozen_bytes = zn_size_add(out->host_frozen_bytes, zn_size_add(
			host(b0), zn_size_mul((uint64_t)out->frozen_read_buffers, host(bl))));
	}
}

int zn_plan_frozen_read_buffers(int requested, int ring, int layer_count)
{
	int64_t n = requested > 0 ? requested : (int64_t)ring + ZN_PLAN_FROZEN_READ_AHEAD;
	int64_t most = 2 * ((int64_t)layer_count - 1);

	if (n > most)
		n = most;
	return n < 1 ? 1 : (int)n;
}
