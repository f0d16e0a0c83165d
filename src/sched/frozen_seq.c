/* Frozen parameters (frozen.h, docs/lora.md): the fetch sequence. The ring of working slots
 * (store/ring.h) fetches each use's layer from its home (through its read buffer on nvme,
 * frozen_io.c), copies it up and widens or expands it on copy_in; layer 0's is held for the
 * step and kept across steps (the base never changes). */
#include "sched/acts.h"
#include "sched/frozen.h"
#include "sched/plan.h"
#include "sched/trace_dev.h"

static uint64_t fnumel(const struct zn_frozen *fz, int l)
{
	return fz->sh.numel[l];
}

/* The ring's fill: enqueues layer l's working copy into ring slot i for item (-1: layer
 * 0, the held slot): [nvme read into its pinned read buffer] -> [copy up] -> [cast]; ready
 * recorded on copy_in. */
static int fetch_into(void *ctx, int item, int l, int i)
{
	struct zn_frozen *fz = ctx;
	struct zn_fslot *s = &fz->slot[i];
	const struct zn_engine_plan *p = fz->c.plan;
	/* a layer whose experts are fetched per routed expert: the rest of it (its head) */
	uint64_t bytes = zn_frozen_fetch_bytes(fz, l);
	uint64_t n = zn_frozen_streams(fz, l) ? bytes / p->frozen_elem_bytes : fnumel(fz, l);
	bool wide = p->frozen_elem_bytes == 4 && !p->frozen_q4; /* comes up as the fp32 copy */
	const void *src = fz->home[l];
	int h = -1, rc = 0;

	if (!n)
		return 0;
	if (p->frozen_home == ZN_TIER_NVME) /* submitted ahead (frozen_io.c), or now */
		rc = zn_frozen_io_take(fz, item, l, &src);
	if (!rc)
		rc = zn_stream_wait_event(fz->c.copy_in, zn_ring_free_event(&fz->ring, i));
	if (!rc && p->frozen_home != ZN_TIER_DEVICE && zn_frozen_traced(fz))
		rc = zn_tracer_begin(fz->c.tr, fz->c.copy_in, "frozen up", l, bytes, &h);
	if (rc)
		return rc;
	if (p->frozen_home != ZN_TIER_DEVICE) {
		/* a layer whose experts come per routed expert: its rest only */
		rc = zn_frozen_rest_up(fz, l, wide ? (void *)s->f32_d : s->stage_d, src,
				       p->frozen_home == ZN_TIER_NVME);
		if (!rc && p->frozen_home == ZN_TIER_NVME)
			rc = zn_frozen_io_copied(fz, item);
		if (!rc)
			rc = zn_tracer_span_end(fz->c.tr, fz->c.copy_in, h);
		src = s->stage_d;
	}
	if (!rc && p->frozen_q4)
		rc = zn_frozen_q4_expand(fz, l, s, src);
	else if (!rc && !wide && p->frozen_wide)
		rc = zn_launch_widen(fz->c.copy_in, s->f32_d, src, n, fz->sh.pdt);
	if (!rc)
		rc = zn_frozen_experts_clear(fz, s);
	if (!rc)
		rc = zn_event_record(zn_ring_ready_event(&fz->ring, i), fz->c.copy_in);
	return rc;
}

/* what the compute reads of a slot: the fp32 copy, or with bf16 compute the bf16 one */
static const float *work(const struct zn_frozen *fz, const struct zn_fslot *s)
{
	if (fz->c.plan->frozen_wide)
		return s->f32_d;
	return fz->c.plan->frozen_q4 ? (const float *)s->w16_d : (const float *)s->stage_d;
}

static bool none(const struct zn_frozen *fz)
{
	return !fz->c.plan->frozen;
}

/* the activations' sequence of layer uses, as the prefetcher's (acts.h: with activation
 * checkpointing, recomputed forwards are uses too) */
static int seq_layer(void *ctx, int item)
{
	const struct zn_frozen *fz = ctx;

	return fz->use[item].layer;
}

/* the ring's staged: item's read done (home on nvme), so its copy up would not block */
static bool seq_staged(void *ctx, int item, int i)
{
	(void)i;
	return zn_frozen_io_ready(ctx, item);
}

/* the ring's poll: the reads ahead, never blocking (frozen_io.c) */
static int seq_poll(void *ctx)
{
	return zn_frozen_io_pump(ctx);
}

/* Items up to the one acquired (waiting for their reads), then those up to frozen_depth
 * after it whose read is done: a read not yet done never holds up the enqueueing of an
 * item before it. A release enqueues the next item too (release_ahead), its read waited
 * for if need be: the compute of the item released is enqueued, and the next item is the
 * next it needs (so its copy runs during that compute, not after whatever the caller does
 * before the next acquire). The reads are pumped at each acquire and release. */
int zn_frozen_ring_create(struct zn_frozen *fz)
{
	static const struct zn_ring_ops ops = {
		.layer = seq_layer, .fill = fetch_into, .staged = seq_staged, .poll = seq_poll,
	};
	struct zn_ring_config c = {
		.dev = fz->c.dev, .compute = fz->c.compute, .slots = fz->c.plan->frozen_slots,
		.depth = fz->c.plan->frozen_depth, .release_ahead = 1, .ops = &ops, .ctx = fz,
	};

	return zn_ring_create(&fz->ring, &c);
}

/* a micro-batch's sequence from its first item */
static void seq_reset(struct zn_frozen *fz, const struct zn_use *use, int use_n)
{
	fz->use = use;
	fz->seq_len = use_n;
	fz->seq_read = 0;
	if (fz->slot) /* the ring is made (neither none nor direct) */
		(void)zn_ring_begin(&fz->ring, use_n); /* nothing staged to end: no unstage */
}

/* layer 0's slot (held by the ring for the whole step) */
static struct zn_fslot *slot0(struct zn_frozen *fz)
{
	return &fz->slot[zn_ring_held(&fz->ring)];
}

const float *zn_frozen_layer0_params(struct zn_frozen *fz)
{
	if (none(fz) || !fnumel(fz, 0))
		return NULL;
	return fz->c.plan->frozen_direct ? fz->home[0] : work(fz, slot0(fz));
}

int zn_frozen_layer0(struct zn_frozen *fz, const struct zn_use *use, int use_n,
		     const float **f32_d)
{
	int rc;

	*f32_d = zn_frozen_layer0_params(fz);
	if (none(fz) || fz->c.plan->frozen_direct)
		return 0;
	/* the sequence begins here: its first reads queue behind layer 0's */
	seq_reset(fz, use, use_n);
	fz->seq_begun = true;
	/* the base never changes: layer 0's working copy, once fetched, stays for later steps */
	rc = zn_frozen_io_start0(fz, !fz->slot0_valid);
	if (!rc && !fz->slot0_valid)
		rc = zn_ring_hold(&fz->ring, 0);
	fz->slot0_valid = !rc;
	return rc;
}

int zn_frozen_layer0_wait(struct zn_frozen *fz)
{
	if (none(fz) || fz->c.plan->frozen_direct || !fnumel(fz, 0))
		return 0;
	return zn_ring_held_wait(&fz->ring);
}

int zn_frozen_layer0_release(struct zn_frozen *fz)
{
	if (none(fz) || fz->c.plan->frozen_direct || !fnumel(fz, 0))
		return 0;
	return zn_ring_held_release(&fz->ring);
}

int zn_frozen_begin(struct zn_frozen *fz, const struct zn_use *use, int use_n)
{
	if (!fz->seq_begun) /* else zn_frozen_layer0 began it (and its reads) */
		seq_reset(fz, use, use_n);
	fz->seq_begun = false;
	if (none(fz) || fz->c.plan->frozen_direct)
		return 0;
	return zn_frozen_io_pump(fz);
}

int zn_frozen_acquire(struct zn_frozen *fz, int item, int layer, const float **f32_d)
{
	int slot, rc;

	*f32_d = NULL;
	if (none(fz) || !fnumel(fz, layer))
		return 0;
	if (fz->c.plan->frozen_direct) {
		*f32_d = fz->home[layer];
		return 0;
	}
	/* items .. item + depth (zn_frozen_ring_create): each waits on the device for its slot's
	 * release */
	rc = zn_ring_acquire(&fz->ring, item, &slot);
	if (!rc)
		*f32_d = work(fz, &fz->slot[slot]);
	return rc;
}

int zn_frozen_release(struct zn_frozen *fz, int item)
{
	if (none(fz) || fz->c.plan->frozen_direct || !fnumel(fz, fz->use[item].layer))
		return 0;
	return zn_ring_release(&fz->ring, item);
}
