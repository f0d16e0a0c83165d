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

/* device bytes (0: nothing) */
static int dalloc(struct zn_prefetch *pf, void *pp, uint64_t bytes)
{
	return bytes ? zn_device_alloc(pf->c.rt->dev, (void **)pp, bytes) : 0;
}

struct cast_args {
	float *out;
	const uint16_t *in;
	uint64_t n;
	enum zn_dtype dt; /* the stored 16-bit dtype: bf16 or fp16 */
};

static void cast_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct cast_args *a = ctx;

	if (a->dt == ZN_DTYPE_F16)
		k->cast_f16_to_f32(native, a->out, a->in, (size_t)a->n);
	else
		k->cast_bf16_to_f32(native, a->out, a->in, (size_t)a->n);
}

/* the layer's resident parameters (no gathers: the compute reads them in place) */
static const float *resident(const struct zn_prefetch *pf, int layer)
{
	return pf->c.L[layer].param_d;
}

/* the sequence of layer uses given at zn_fetch_begin (acts.h: with checkpointing,
 * recomputed forwards are uses too) */
static int seq_layer(const struct zn_prefetch *pf, int item)
{
	return pf->use[item].layer;
}

static struct zn_slot *seq_slot(struct zn_prefetch *pf, int item)
{
	return &pf->ring[item % pf->ring_n];
}

/* Fetch buffer of slot s (parameters on nvme): ring slot i, or layer 0's after them. */
static int fbuf_of(struct zn_prefetch *pf, struct zn_slot *s)
{
	return s == &pf->slot0 ? pf->ring_n : (int)(s - pf->ring);
}

/* Parameters on nvme: starts reading layer l's shard for slot s. */
static int fetch_stage(struct zn_prefetch *pf, int l, struct zn_slot *s)
{
	return zn_swapio_params(pf->c.sw) ? zn_swapio_fetch_begin(pf->c.sw, fbuf_of(pf, s), l) : 0;
}

/* Enqueues the fetch of layer l into slot s (see the header comment for the steps). */
static int fetch_into(struct zn_prefetch *pf, int l, struct zn_slot *s)
{
	struct zn_layer *ly = &pf->c.L[l];
	bool bf16 = pf->c.pdt != ZN_DTYPE_F32, on_host = pf->c.plan->pl.params == ZN_TIER_HOST;
	uint64_t esz = zn_tiers_param_bytes(pf->c.ti), padded = ly->sh.padded_numel;
	struct cast_args ca;
	int rc, h;

	if (pf->c.stage < 3) {
		/* bf16 resident full layer: cast it into the slot */
		ca = (struct cast_args){ s->f32_d, ly->param_d, padded, pf->c.pdt };
		rc = zn_stream_wait_event(pf->c.rt->copy_in, s->free);
		if (!rc)
			rc = zn_launch(pf->c.rt->copy_in, cast_fn, &ca, sizeof(ca));
		if (!rc)
			rc = zn_event_record(s->ready, pf->c.rt->copy_in);
		return rc;
	}
	char *gbuf = bf16 ? (char *)s->bf16_d : (char *)s->f32_d;
	char *mine = gbuf + ly->sh.offset * esz;

	if (pf->c.plan->pl.params != ZN_TIER_DEVICE) {
		/* the shard comes up from pinned memory (its home, or the staging buffer it
		 * was read into from nvme) into its place in the full buffer, then the
		 * all-gather runs in place */
		void *src = ly->param_h;

		rc = on_host ? 0 : zn_swapio_fetch_end(pf->c.sw, fbuf_of(pf, s), &src);
		if (!rc)
			rc = zn_stream_wait_event(pf->c.rt->copy_in, s->free);
		if (!rc)
			rc = zn_tracer_span_begin(pf->c.tr, pf->c.rt->copy_in, "fetch", l,
					 ly->sh.shard_numel * esz, &h);
		if (!rc)
			rc = zn_memcpy_async(pf->c.rt->copy_in, mine, src, ly->sh.shard_numel * esz,
					     ZN_COPY_H2D);
		if (!rc)
			rc = zn_tracer_span_end(pf->c.tr, pf->c.rt->copy_in, h);
		if (!rc && !on_host)
			rc = zn_swapio_fetch_copied(pf->c.sw, fbuf_of(pf, s));
		if (!rc)
			rc = zn_event_record(s->ready, pf->c.rt->copy_in);
		if (!rc)
			rc = zn_stream_wait_event(pf->c.rt->comm_s, s->ready);
		if (!rc)
			rc = zn_tracer_span_begin(pf->c.tr, pf->c.rt->comm_s, "all-gather", l,
					 ly->sh.padded_numel * esz, &h);
		if (!rc)
			rc = zn_comm_all_gather(pf->c.rt->comm, pf->c.rt->comm_s, gbuf, mine, ly->sh.shard_numel,
					        pf->c.pdt);
	} else {
		rc = zn_stream_wait_event(pf->c.rt->comm_s, s->free);
		if (!rc)
			rc = zn_tracer_span_begin(pf->c.tr, pf->c.rt->comm_s, "all-gather", l,
					 ly->sh.padded_numel * esz, &h);
		if (!rc)
			rc = zn_comm_all_gather(pf->c.rt->comm, pf->c.rt->comm_s, gbuf, ly->param_d,
					        ly->sh.shard_numel, pf->c.pdt);
	}
	if (!rc)
		rc = zn_tracer_span_end(pf->c.tr, pf->c.rt->comm_s, h);
	if (!rc && bf16 && !pf->c.compute16) {
		ca = (struct cast_args){ s->f32_d, s->bf16_d, padded, pf->c.pdt };
		rc = zn_launch(pf->c.rt->comm_s, cast_fn, &ca, sizeof(ca));
	}
	if (!rc)
		rc = zn_event_record(s->ready, pf->c.rt->comm_s);
	return rc;
}

/* What the compute reads from slot s: its fp32 working copy, or with bf16 compute the
 * gathered bf16 layer itself (the pointer is then to bf16 data: step.c passes it as
 * io.params16). */
const float *zn_slot_params(struct zn_prefetch *pf, struct zn_slot *s)
{
	return pf->c.compute16 ? (const float *)(const void *)s->bf16_d : s->f32_d;
}

int zn_fetch_layer0(struct zn_prefetch *pf, const float **params_d)
{
	if (!pf->c.plan->gathers) {
		*params_d = resident(pf, 0);
		return 0;
	}
	*params_d = zn_slot_params(pf, &pf->slot0);
	int rc = fetch_stage(pf, 0, &pf->slot0);
	if (!rc)
		rc = fetch_into(pf, 0, &pf->slot0);
	return rc;
}

int zn_fetch_layer0_wait(struct zn_prefetch *pf)
{
	return pf->c.plan->gathers ? zn_stream_wait_event(pf->c.rt->compute, pf->slot0.ready) : 0;
}

int zn_fetch_layer0_release(struct zn_prefetch *pf)
{
	return pf->c.plan->gathers ? zn_event_record(pf->slot0.free, pf->c.rt->compute) : 0;
}

int zn_fetch_begin(struct zn_prefetch *pf, const struct zn_use *use, int use_n)
{
	int rc = 0;

	/* a sequence cut short (an error): reads staged and never copied up end here */
	for (int j = pf->seq_issued; j < pf->seq_staged && zn_swapio_params(pf->c.sw); j++) {
		void *h;
		int x = zn_swapio_fetch_end(pf->c.sw, fbuf_of(pf, seq_slot(pf, j)), &h);

		if (!rc)
			rc = x;
	}
	pf->use = use;
	pf->seq_len = use_n;
	pf->seq_staged = 0;
	pf->seq_issued = 0;
	return rc;
}

/* item j's read is in (or it has none): its copy up would not block the host */
static bool item_ready(struct zn_prefetch *pf, int j)
{
	return !zn_swapio_params(pf->c.sw) || zn_swapio_fetch_ready(pf->c.sw, fbuf_of(pf, seq_slot(pf, j)));
}

/* A stage 3 fetch ends in an all-gather, and every rank must enqueue its collectives (these
 * and the backward's reduce-scatters) in the same order: with more than one rank, only the
 * program's order may decide when a fetch is enqueued, never when its read landed. */
static bool early_ok(const struct zn_prefetch *pf)
{
	return pf->c.rt->world == 1 || pf->c.stage < 3;
}

/* enqueues the fetches of staged items in order: every one up to `upto` (waiting for its
 * read), then, where early_ok, those whose read is already in */
static int issue_ready(struct zn_prefetch *pf, int upto)
{
	int rc = 0;

	while (!rc && pf->seq_issued < pf->seq_staged &&
	       (pf->seq_issued <= upto ||
		(early_ok(pf) && item_ready(pf, pf->seq_issued)))) {
		int j = pf->seq_issued;

		rc = fetch_into(pf, seq_layer(pf, j), seq_slot(pf, j));
		pf->seq_issued++;
	}
	return rc;
}

int zn_fetch_acquire(struct zn_prefetch *pf, int item, int layer, const float **params_d)
{
	int depth = pf->c.plan->prefetch_depth, last, rc;

	/* the store's optimizer read-ahead goes on as its staging frees (swapio.h): every
	 * acquisition, before this layer's reads, gives it the chance */
	rc = zn_swapio_opt_poke(pf->c.sw);
	if (rc)
		return rc;
	if (!pf->c.plan->gathers) {
		*params_d = resident(pf, layer);
		return 0;
	}
	/* never into the slot of `item` itself (the plan clamps too: this keeps it true) */
	if (depth > pf->ring_n - 1)
		depth = pf->ring_n - 1;
	last = item + depth;
	if (last >= pf->seq_len)
		last = pf->seq_len - 1;
	/* Stage item..item+d (with parameters on nvme: submit the reads; a fetch buffer's
	 * previous copy up, of item j - R <= item - 1, is enqueued by then), then enqueue the
	 * fetches up to item and those ahead whose read is in. Each waits on the device for
	 * its slot's previous release, which compute recorded for item - 1 or earlier. */
	while (!rc && pf->seq_staged <= last) {
		rc = fetch_stage(pf, seq_layer(pf, pf->seq_staged), seq_slot(pf, pf->seq_staged));
		pf->seq_staged++;
	}
	/* with several ranks the whole batch, as its order is the same on every rank */
	if (!rc)
		rc = issue_ready(pf, early_ok(pf) ? item : last);
	if (rc)
		return rc;
	*params_d = zn_slot_params(pf, seq_slot(pf, item));
	return zn_stream_wait_event(pf->c.rt->compute, seq_slot(pf, item)->ready);
}

int zn_fetch_release(struct zn_prefetch *pf, int item)
{
	int rc;

	if (!pf->c.plan->gathers)
		return 0;
	rc = zn_event_record(seq_slot(pf, item)->free, pf->c.rt->compute);
	/* reads ahead that landed while the item was enqueued: their copies up go now */
	if (!rc)
		rc = issue_ready(pf, item);
	return rc;
}

/* ---- create and destroy ------------------------------------------------------------------ */

static int alloc_slot(struct zn_prefetch *pf, struct zn_slot *s, uint64_t numel)
{
	int rc = 0;

	if (pf->c.plan->f32_slots)
		rc = dalloc(pf, &s->f32_d, zn_plan_device_alloc_bytes(numel * 4));
	if (!rc && pf->c.plan->bf16_gather)
		rc = dalloc(pf, &s->bf16_d, zn_plan_device_alloc_bytes(numel * 2));
	if (!rc)
		rc = zn_event_create(pf->c.rt->dev, &s->ready);
	if (!rc)
		rc = zn_event_create(pf->c.rt->dev, &s->free);
	return rc;
}

static void free_slot(struct zn_prefetch *pf, struct zn_slot *s)
{
	zn_device_free(pf->c.rt->dev, s->f32_d);
	zn_device_free(pf->c.rt->dev, s->bf16_d);
	zn_event_destroy(s->ready);
	zn_event_destroy(s->free);
}

int zn_prefetch_create(struct zn_prefetch *pf, const struct zn_prefetch_config *c)
{
	int rc;

	*pf = (struct zn_prefetch){ .c = *c };
	if (!pf->c.plan->gathers)
		return 0;
	rc = alloc_slot(pf, &pf->slot0, pf->c.plan->layer0_numel);
	pf->ring_n = pf->c.plan->param_slots;
	pf->ring = zn_size_calloc((uint64_t)pf->ring_n, sizeof(*pf->ring), "the prefetch ring");
	if (!rc && !pf->ring)
		rc = -ENOMEM;
	for (int i = 0; !rc && i < pf->ring_n; i++)
		rc = alloc_slot(pf, &pf->ring[i], pf->c.plan->slot_numel);
	return rc;
}

void zn_prefetch_destroy(struct zn_prefetch *pf)
{
	if (!pf->c.rt)
		return; /* never created */
	free_slot(pf, &pf->slot0);
	for (int i = 0; pf->ring && i < pf->ring_n; i++)
		free_slot(pf, &pf->ring[i]);
	free(pf->ring);
	*pf = (struct zn_prefetch){ 0 };
}
