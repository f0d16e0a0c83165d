/* The prefetcher: full-layer fp32 working copies of the parameters on the device.
 *
 * When the compute cannot read the parameters where they live (stage 3: each rank holds a
 * shard; bf16: the stored copy is bf16 and the kernels are fp32), every use of a layer is
 * preceded by a fetch into a slot: [H2D of the host shard (offload_param)] -> all-gather on
 * the comm stream (stage 3) -> bf16 -> fp32 cast. One micro-batch uses layers in the
 * sequence forward 1 .. n-1, backward n-1 .. 1 (with activation checkpointing the backward's
 * recomputed forwards are uses too: acts.h use[]) (layer 0 has its own slot, fetched once per
 * step: it starts the forward and ends the backward, and a layer tied to it (tied_layer)
 * reads it in between). Item j of the
 * sequence goes to ring slot j mod R (R = prefetch depth + 1); while item k computes, items
 * k+1 .. k+d are being fetched. A fetch into a slot waits (on the device, not the host) for
 * the release of the item that used the slot before, so R slots bound the working set.
 * With parameters on nvme a fetch has two halves: the shard's read (staged: submitted for
 * items up to k+d when item k is acquired) and its copy up (enqueued in item order once the
 * read is in: for item k itself the host waits for it; a later item's goes as soon as a
 * poll at an acquire or release finds its read done), so the host never waits for a read
 * ahead of the item the compute needs next while that compute's stream runs dry. That
 * holds on one rank only (early_ok): with several, a fetch ends in an all-gather, whose
 * order must not depend on when a read lands, so item k's acquire enqueues k .. k+d.
 * Without gathers (fp32, stage 0-2) the compute reads the resident full layer directly.
 * Layer 0's own slot exists because a later layer ties to it (tied_layer in the model's
 * layer descriptors).
 *
 * The slots, their events and the order of the fills are the prefetch ring's (store/ring.h:
 * stage = the shard's read, staged = its read is in, fill = fetch_into, in_order = not
 * early_ok); what a slot holds and what a fill moves are here.
 */
#include <errno.h>
#include <stdlib.h>

#include "core/log.h"
#include "core/size.h"
#include "sched/prefetch.h"
#include "sched/recompute.h"
#include "sched/runtime.h"
#include "sched/swapio.h"
#include "sched/tiers.h"
#include "sched/trace_dev.h"
#include "store/ring.h"

/* device bytes (0: nothing) */
static int dalloc(struct zn_prefetch *pf, void *pp, uint64_t bytes)
{
	return bytes ? zn_device_alloc(pf->c.rt->dev, (void **)pp, bytes) : 0;
}

/* the layer's resident parameters (no gathers: the compute reads them in place) */
static const float *resident(const struct zn_prefetch *pf, int layer)
{
	return pf->c.L[layer].param_d;
}

/* the sequence of layer uses given at zn_fetch_begin (acts.h: with checkpointing,
 * recomputed forwards are uses too) */
static int seq_layer(void *ctx, int item)
{
	const struct zn_prefetch *pf = ctx;

	return pf->use[item].layer;
}

/* Parameters on nvme: starts reading layer l's shard for ring slot i (its fetch buffer:
 * ring slot i, or layer 0's, the held slot, after them). */
static int fetch_stage(void *ctx, int item, int l, int i)
{
	struct zn_prefetch *pf = ctx;

	(void)item;
	return zn_swapio_params(pf->c.sw) ? zn_swapio_fetch_begin(pf->c.sw, i, l) : 0;
}

/* Enqueues the fetch of layer l into ring slot i (see the header comment for the steps). */
static int fetch_into(void *ctx, int item, int l, int i)
{
	struct zn_prefetch *pf = ctx;
	struct zn_slot *s = &pf->slot[i];
	struct zn_event *ready = zn_ring_ready_event(&pf->ring, i);
	struct zn_event *sfree = zn_ring_free_event(&pf->ring, i);
	struct zn_layer *ly = &pf->c.L[l];
	bool bf16 = pf->c.pdt != ZN_DTYPE_F32, on_host = pf->c.plan->pl.params == ZN_TIER_HOST;
	uint64_t esz = zn_tiers_param_bytes(pf->c.ti), padded = ly->sh.padded_numel;
	int rc, h;

	(void)item;
	if (pf->c.stage < 3) {
		/* bf16 resident full layer: cast it into the slot */
		rc = zn_stream_wait_event(pf->c.rt->copy_in, sfree);
		if (!rc)
			rc = zn_launch_widen(pf->c.rt->copy_in, s->f32_d, ly->param_d, padded,
					     pf->c.pdt);
		if (!rc)
			rc = zn_event_record(ready, pf->c.rt->copy_in);
		return rc;
	}
	char *gbuf = bf16 ? (char *)s->bf16_d : (char *)s->f32_d;
	char *mine = gbuf + ly->sh.offset * esz;

	if (pf->c.plan->pl.params != ZN_TIER_DEVICE) {
		/* the shard comes up from pinned memory (its home, or the staging buffer it
		 * was read into from nvme) into its place in the full buffer, then the
		 * all-gather runs in place */
		void *src = ly->param_h;

		rc = on_host ? 0 : zn_swapio_fetch_end(pf->c.sw, i, &src);
		if (!rc)
			rc = zn_stream_wait_event(pf->c.rt->copy_in, sfree);
		if (!rc)
			rc = zn_tracer_span_begin(pf->c.tr, pf->c.rt->copy_in, "fetch", l,
					 ly->sh.shard_numel * esz, &h);
		if (!rc)
			rc = zn_memcpy_async(pf->c.rt->copy_in, mine, src, ly->sh.shard_numel * esz,
					     ZN_COPY_H2D);
		if (!rc)
			rc = zn_tracer_span_end(pf->c.tr, pf->c.rt->copy_in, h);
		if (!rc && !on_host)
			rc = zn_swapio_fetch_copied(pf->c.sw, i);
		if (!rc)
			rc = zn_event_record(ready, pf->c.rt->copy_in);
		if (!rc)
			rc = zn_stream_wait_event(pf->c.rt->comm_s, ready);
		if (!rc)
			rc = zn_tracer_span_begin(pf->c.tr, pf->c.rt->comm_s, "all-gather", l,
					 ly->sh.padded_numel * esz, &h);
		if (!rc)
			rc = zn_comm_all_gather(pf->c.rt->comm, pf->c.rt->comm_s, gbuf, mine, ly->sh.shard_numel,
					        pf->c.pdt);
	} else {
		rc = zn_stream_wait_event(pf->c.rt->comm_s, sfree);
		if (!rc)
			rc = zn_tracer_span_begin(pf->c.tr, pf->c.rt->comm_s, "all-gather", l,
					 ly->sh.padded_numel * esz, &h);
		if (!rc)
			rc = zn_comm_all_gather(pf->c.rt->comm, pf->c.rt->comm_s, gbuf, ly->param_d,
					        ly->sh.shard_numel, pf->c.pdt);
	}
	if (!rc)
		rc = zn_tracer_span_end(pf->c.tr, pf->c.rt->comm_s, h);
	if (!rc && bf16 && !pf->c.compute16)
		rc = zn_launch_widen(pf->c.rt->comm_s, s->f32_d, s->bf16_d, padded, pf->c.pdt);
	if (!rc)
		rc = zn_event_record(ready, pf->c.rt->comm_s);
	return rc;
}

/* What the compute reads from ring slot i: its fp32 working copy, or with bf16 compute the
 * gathered bf16 layer itself (the pointer is then to bf16 data: step.c passes it as
 * io.params16). */
static const float *slot_params(const struct zn_prefetch *pf, int i)
{
	const struct zn_slot *s = &pf->slot[i];

	return pf->c.compute16 ? (const float *)(const void *)s->bf16_d : s->f32_d;
}

const float *zn_fetch_layer0_params(struct zn_prefetch *pf)
{
	return slot_params(pf, zn_ring_held(&pf->ring));
}

int zn_fetch_layer0(struct zn_prefetch *pf, const float **params_d)
{
	if (!pf->c.plan->gathers) {
		*params_d = resident(pf, 0);
		return 0;
	}
	*params_d = zn_fetch_layer0_params(pf);
	return zn_ring_hold(&pf->ring, 0);
}

int zn_fetch_layer0_wait(struct zn_prefetch *pf)
{
	return pf->c.plan->gathers ? zn_ring_held_wait(&pf->ring) : 0;
}

int zn_fetch_layer0_release(struct zn_prefetch *pf)
{
	return pf->c.plan->gathers ? zn_ring_held_release(&pf->ring) : 0;
}

/* a sequence cut short (an error): a read staged and never copied up ends here */
static int fetch_unstage(void *ctx, int item, int i)
{
	struct zn_prefetch *pf = ctx;
	void *h;

	(void)item;
	return zn_swapio_params(pf->c.sw) ? zn_swapio_fetch_end(pf->c.sw, i, &h) : 0;
}

int zn_fetch_begin(struct zn_prefetch *pf, const struct zn_use *use, int use_n)
{
	int rc = pf->c.plan->gathers ? zn_ring_begin(&pf->ring, use_n) : 0;

	pf->use = use;
	return rc;
}

/* item's read is in (or it has none): its copy up would not block the host */
static bool fetch_staged(void *ctx, int item, int i)
{
	struct zn_prefetch *pf = ctx;

	(void)item;
	return !zn_swapio_params(pf->c.sw) || zn_swapio_fetch_ready(pf->c.sw, i);
}

/* A stage 3 fetch ends in an all-gather, and every rank must enqueue its collectives (these
 * and the backward's reduce-scatters) in the same order: with more than one rank, only the
 * program's order may decide when a fetch is enqueued, never when its read landed. */
static bool early_ok(const struct zn_prefetch *pf)
{
	return pf->c.rt->world == 1 || pf->c.stage < 3;
}

int zn_fetch_acquire(struct zn_prefetch *pf, int item, int layer, const float **params_d)
{
	int slot, rc;

	/* the store's optimizer read-ahead goes on as its staging frees (swapio.h): every
	 * acquisition, before this layer's reads, gives it the chance */
	rc = zn_swapio_opt_poke(pf->c.sw);
	if (rc)
		return rc;
	if (!pf->c.plan->gathers) {
		*params_d = resident(pf, layer);
		return 0;
	}
	/* Stage item..item+d (with parameters on nvme: submit the reads; a fetch buffer's
	 * previous copy up, of item j - R <= item - 1, is enqueued by then), then enqueue the
	 * fetches up to item and those ahead whose read is in (with several ranks the whole
	 * window). Each waits on the device for its slot's previous release. */
	rc = zn_ring_acquire(&pf->ring, item, &slot);
	if (!rc)
		*params_d = slot_params(pf, slot);
	return rc;
}

int zn_fetch_release(struct zn_prefetch *pf, int item)
{
	/* reads ahead that landed while the item was enqueued: their copies up go now */
	return pf->c.plan->gathers ? zn_ring_release(&pf->ring, item) : 0;
}

/* ---- create and destroy ------------------------------------------------------------------ */

static int alloc_slot(struct zn_prefetch *pf, struct zn_slot *s, uint64_t numel)
{
	int rc = 0;

	if (pf->c.plan->f32_slots)
		rc = dalloc(pf, &s->f32_d, zn_plan_device_alloc_bytes(numel * 4));
	if (!rc && pf->c.plan->bf16_gather)
		rc = dalloc(pf, &s->bf16_d, zn_plan_device_alloc_bytes(numel * 2));
	return rc;
}

static const struct zn_ring_ops fetch_ops = {
	.layer = seq_layer, .fill = fetch_into, .stage = fetch_stage, .unstage = fetch_unstage,
	.staged = fetch_staged,
};

int zn_prefetch_create(struct zn_prefetch *pf, const struct zn_prefetch_config *c)
{
	struct zn_ring_config rc_ = { 0 };
	int n, rc;

	*pf = (struct zn_prefetch){ .c = *c };
	if (!pf->c.plan->gathers)
		return 0;
	n = pf->c.plan->param_slots;
	/* the ring's slots, then layer 0's (the held slot) */
	pf->slot = zn_size_calloc((uint64_t)n + 1, sizeof(*pf->slot), "the prefetch ring");
	if (!pf->slot)
		return -ENOMEM;
	pf->slot_n = n + 1;
	rc = alloc_slot(pf, &pf->slot[n], pf->c.plan->layer0_numel);
	for (int i = 0; !rc && i < n; i++)
		rc = alloc_slot(pf, &pf->slot[i], pf->c.plan->slot_numel);
	/* never into the slot of the item acquired (the plan clamps too: this keeps it true) */
	rc_ = (struct zn_ring_config){
		.dev = pf->c.rt->dev, .compute = pf->c.rt->compute, .slots = n,
		.depth = pf->c.plan->prefetch_depth < n - 1 ? pf->c.plan->prefetch_depth : n - 1,
		.in_order = !early_ok(pf), .ops = &fetch_ops, .ctx = pf,
	};
	return rc ? rc : zn_ring_create(&pf->ring, &rc_);
}

void zn_prefetch_destroy(struct zn_prefetch *pf)
{
	if (!pf->c.rt)
		return; /* never created */
	for (int i = 0; pf->slot && i < pf->slot_n; i++) {
		zn_device_free(pf->c.rt->dev, pf->slot[i].f32_d);
		zn_device_free(pf->c.rt->dev, pf->slot[i].bf16_d);
	}
	free(pf->slot);
	zn_ring_destroy(&pf->ring);
	*pf = (struct zn_prefetch){ 0 };
}
