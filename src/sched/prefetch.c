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
#include "sched/engine_impl.h"

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

const float *zn_engine_params_f32(struct zn_engine *e, int layer)
{
	return e->L[layer].param_d;
}

/* the sequence of layer uses is the activations' (acts.h: with checkpointing, recomputed
 * forwards are uses too) */
static int seq_layer(const struct zn_engine *e, int item)
{
	return e->act.use[item].layer;
}

static struct zn_slot *seq_slot(struct zn_engine *e, int item)
{
	return &e->pf.ring[item % e->pf.ring_n];
}

/* Fetch buffer of slot s (parameters on nvme): ring slot i, or layer 0's after them. */
static int fbuf_of(struct zn_engine *e, struct zn_slot *s)
{
	return s == &e->pf.slot0 ? e->pf.ring_n : (int)(s - e->pf.ring);
}

/* Parameters on nvme: starts reading layer l's shard for slot s. */
static int fetch_stage(struct zn_engine *e, int l, struct zn_slot *s)
{
	return zn_swapio_params(&e->sw) ? zn_swapio_fetch_begin(&e->sw, fbuf_of(e, s), l) : 0;
}

/* Enqueues the fetch of layer l into slot s (see the header comment for the steps). */
static int fetch_into(struct zn_engine *e, int l, struct zn_slot *s)
{
	struct zn_layer *ly = &e->L[l];
	bool bf16 = e->pdt != ZN_DTYPE_F32, on_host = e->plan.pl.params == ZN_TIER_HOST;
	uint64_t esz = zn_tiers_param_bytes(&e->ti), padded = ly->sh.padded_numel;
	struct cast_args ca;
	int rc, h;

	if (e->cfg.zero.stage < 3) {
		/* bf16 resident full layer: cast it into the slot */
		ca = (struct cast_args){ s->f32_d, ly->param_d, padded, e->pdt };
		rc = zn_stream_wait_event(e->rt.copy_in, s->free);
		if (!rc)
			rc = zn_launch(e->rt.copy_in, cast_fn, &ca, sizeof(ca));
		if (!rc)
			rc = zn_event_record(s->ready, e->rt.copy_in);
		return rc;
	}
	char *gbuf = bf16 ? (char *)s->bf16_d : (char *)s->f32_d;
	char *mine = gbuf + ly->sh.offset * esz;

	if (e->plan.pl.params != ZN_TIER_DEVICE) {
		/* the shard comes up from pinned memory (its home, or the staging buffer it
		 * was read into from nvme) into its place in the full buffer, then the
		 * all-gather runs in place */
		void *src = ly->param_h;

		rc = on_host ? 0 : zn_swapio_fetch_end(&e->sw, fbuf_of(e, s), &src);
		if (!rc)
			rc = zn_stream_wait_event(e->rt.copy_in, s->free);
		if (!rc)
			rc = zn_tracer_span_begin(&e->tr, e->rt.copy_in, "fetch", l,
					 ly->sh.shard_numel * esz, &h);
		if (!rc)
			rc = zn_memcpy_async(e->rt.copy_in, mine, src, ly->sh.shard_numel * esz,
					     ZN_COPY_H2D);
		if (!rc)
			rc = zn_tracer_span_end(&e->tr, e->rt.copy_in, h);
		if (!rc && !on_host)
			rc = zn_swapio_fetch_copied(&e->sw, fbuf_of(e, s));
		if (!rc)
			rc = zn_event_record(s->ready, e->rt.copy_in);
		if (!rc)
			rc = zn_stream_wait_event(e->rt.comm_s, s->ready);
		if (!rc)
			rc = zn_tracer_span_begin(&e->tr, e->rt.comm_s, "all-gather", l,
					 ly->sh.padded_numel * esz, &h);
		if (!rc)
			rc = zn_comm_all_gather(e->rt.comm, e->rt.comm_s, gbuf, mine, ly->sh.shard_numel,
					        e->pdt);
	} else {
		rc = zn_stream_wait_event(e->rt.comm_s, s->free);
		if (!rc)
			rc = zn_tracer_span_begin(&e->tr, e->rt.comm_s, "all-gather", l,
					 ly->sh.padded_numel * esz, &h);
		if (!rc)
			rc = zn_comm_all_gather(e->rt.comm, e->rt.comm_s, gbuf, ly->param_d,
					        ly->sh.shard_numel, e->pdt);
	}
	if (!rc)
		rc = zn_tracer_span_end(&e->tr, e->rt.comm_s, h);
	if (!rc && bf16 && !e->compute16) {
		ca = (struct cast_args){ s->f32_d, s->bf16_d, padded, e->pdt };
		rc = zn_launch(e->rt.comm_s, cast_fn, &ca, sizeof(ca));
	}
	if (!rc)
		rc = zn_event_record(s->ready, e->rt.comm_s);
	return rc;
}

/* What the compute reads from slot s: its fp32 working copy, or with bf16 compute the
 * gathered bf16 layer itself (the pointer is then to bf16 data: step.c passes it as
 * io.params16). */
const float *zn_slot_params(struct zn_engine *e, struct zn_slot *s)
{
	return e->compute16 ? (const float *)(const void *)s->bf16_d : s->f32_d;
}

int zn_fetch_layer0(struct zn_engine *e, const float **params_d)
{
	if (!e->plan.gathers) {
		*params_d = zn_engine_params_f32(e, 0);
		return 0;
	}
	*params_d = zn_slot_params(e, &e->pf.slot0);
	int rc = fetch_stage(e, 0, &e->pf.slot0);
	if (!rc)
		rc = fetch_into(e, 0, &e->pf.slot0);
	return rc;
}

int zn_fetch_layer0_wait(struct zn_engine *e)
{
	return e->plan.gathers ? zn_stream_wait_event(e->rt.compute, e->pf.slot0.ready) : 0;
}

int zn_fetch_layer0_release(struct zn_engine *e)
{
	return e->plan.gathers ? zn_event_record(e->pf.slot0.free, e->rt.compute) : 0;
}

int zn_fetch_begin(struct zn_engine *e)
{
	int rc = 0;

	/* a sequence cut short (an error): reads staged and never copied up end here */
	for (int j = e->pf.seq_issued; j < e->pf.seq_staged && zn_swapio_params(&e->sw); j++) {
		void *h;
		int x = zn_swapio_fetch_end(&e->sw, fbuf_of(e, seq_slot(e, j)), &h);

		if (!rc)
			rc = x;
	}
	e->pf.seq_len = e->act.use_n;
	e->pf.seq_staged = 0;
	e->pf.seq_issued = 0;
	return rc;
}

/* item j's read is in (or it has none): its copy up would not block the host */
static bool item_ready(struct zn_engine *e, int j)
{
	return !zn_swapio_params(&e->sw) || zn_swapio_fetch_ready(&e->sw, fbuf_of(e, seq_slot(e, j)));
}

/* A stage 3 fetch ends in an all-gather, and every rank must enqueue its collectives (these
 * and the backward's reduce-scatters) in the same order: with more than one rank, only the
 * program's order may decide when a fetch is enqueued, never when its read landed. */
static bool early_ok(const struct zn_engine *e)
{
	return e->rt.world == 1 || e->cfg.zero.stage < 3;
}

/* enqueues the fetches of staged items in order: every one up to `upto` (waiting for its
 * read), then, where early_ok, those whose read is already in */
static int issue_ready(struct zn_engine *e, int upto)
{
	int rc = 0;

	while (!rc && e->pf.seq_issued < e->pf.seq_staged &&
	       (e->pf.seq_issued <= upto ||
		(early_ok(e) && item_ready(e, e->pf.seq_issued)))) {
		int j = e->pf.seq_issued;

		rc = fetch_into(e, seq_layer(e, j), seq_slot(e, j));
		e->pf.seq_issued++;
	}
	return rc;
}

int zn_fetch_acquire(struct zn_engine *e, int item, int layer, const float **params_d)
{
	int depth = e->plan.prefetch_depth, last, rc;

	/* the store's optimizer read-ahead goes on as its staging frees (swapio.h): every
	 * acquisition, before this layer's reads, gives it the chance */
	rc = zn_swapio_opt_poke(&e->sw);
	if (rc)
		return rc;
	if (!e->plan.gathers) {
		*params_d = zn_engine_params_f32(e, layer);
		return 0;
	}
	/* never into the slot of `item` itself (the plan clamps too: this keeps it true) */
	if (depth > e->pf.ring_n - 1)
		depth = e->pf.ring_n - 1;
	last = item + depth;
	if (last >= e->pf.seq_len)
		last = e->pf.seq_len - 1;
	/* Stage item..item+d (with parameters on nvme: submit the reads; a fetch buffer's
	 * previous copy up, of item j - R <= item - 1, is enqueued by then), then enqueue the
	 * fetches up to item and those ahead whose read is in. Each waits on the device for
	 * its slot's previous release, which compute recorded for item - 1 or earlier. */
	while (!rc && e->pf.seq_staged <= last) {
		rc = fetch_stage(e, seq_layer(e, e->pf.seq_staged), seq_slot(e, e->pf.seq_staged));
		e->pf.seq_staged++;
	}
	/* with several ranks the whole batch, as its order is the same on every rank */
	if (!rc)
		rc = issue_ready(e, early_ok(e) ? item : last);
	if (rc)
		return rc;
	*params_d = zn_slot_params(e, seq_slot(e, item));
	return zn_stream_wait_event(e->rt.compute, seq_slot(e, item)->ready);
}

int zn_fetch_release(struct zn_engine *e, int item)
{
	int rc;

	if (!e->plan.gathers)
		return 0;
	rc = zn_event_record(seq_slot(e, item)->free, e->rt.compute);
	/* reads ahead that landed while the item was enqueued: their copies up go now */
	if (!rc)
		rc = issue_ready(e, item);
	return rc;
}

/* ---- create and destroy ------------------------------------------------------------------ */

static int alloc_slot(struct zn_engine *e, struct zn_slot *s, uint64_t numel)
{
	int rc = 0;

	if (e->plan.f32_slots)
		rc = zn_tiers_dalloc(e, &s->f32_d, zn_plan_device_alloc_bytes(numel * 4));
	if (!rc && e->plan.bf16_gather)
		rc = zn_tiers_dalloc(e, &s->bf16_d, zn_plan_device_alloc_bytes(numel * 2));
	if (!rc)
		rc = zn_event_create(e->rt.dev, &s->ready);
	if (!rc)
		rc = zn_event_create(e->rt.dev, &s->free);
	return rc;
}

static void free_slot(struct zn_engine *e, struct zn_slot *s)
{
	zn_device_free(e->rt.dev, s->f32_d);
	zn_device_free(e->rt.dev, s->bf16_d);
	zn_event_destroy(s->ready);
	zn_event_destroy(s->free);
}

int zn_prefetch_create(struct zn_engine *e)
{
	struct zn_prefetch *pf = &e->pf;
	int rc;

	if (!e->plan.gathers)
		return 0;
	rc = alloc_slot(e, &pf->slot0, e->plan.layer0_numel);
	pf->ring_n = e->plan.param_slots;
	pf->ring = zn_size_calloc((uint64_t)pf->ring_n, sizeof(*pf->ring), "the prefetch ring");
	if (!rc && !pf->ring)
		rc = -ENOMEM;
	for (int i = 0; !rc && i < pf->ring_n; i++)
		rc = alloc_slot(e, &pf->ring[i], e->plan.slot_numel);
	return rc;
}

void zn_prefetch_destroy(struct zn_engine *e)
{
	struct zn_prefetch *pf = &e->pf;

	free_slot(e, &pf->slot0);
	for (int i = 0; pf->ring && i < pf->ring_n; i++)
		free_slot(e, &pf->ring[i]);
	free(pf->ring);
	*pf = (struct zn_prefetch){ 0 };
}
