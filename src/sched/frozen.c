/* Frozen parameters (frozen.h, docs/lora.md): homes, the nvme file, working slots and the
 * fetch sequence. Decisions come from the plan (frozen_home, frozen_direct, slots). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/size.h"
#include "model/quant/q4.h"
#include "sched/acts.h"
#include "sched/frozen.h"
#include "sched/plan.h"
#include "sched/tiers.h"
#include "sched/trace_dev.h"

struct fcast {
	float *out;
	const void *in;
	uint64_t n;
	enum zn_dtype dt;
};

static void fcast_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct fcast *a = ctx;

	if (a->dt == ZN_DTYPE_F16)
		k->cast_f16_to_f32(native, a->out, a->in, (size_t)a->n);
	else
		k->cast_bf16_to_f32(native, a->out, a->in, (size_t)a->n);
}

static uint64_t fnumel(const struct zn_frozen *fz, int l)
{
	return fz->sh.numel[l];
}

static uint64_t stored_bytes(const struct zn_frozen *fz, int l)
{
	return zn_frozen_stored_bytes(fz, l);
}

static uint64_t extent(const struct zn_frozen *fz, int l)
{
	return zn_plan_host_alloc_bytes(stored_bytes(fz, l));
}

/* ---- create, init, read-back -------------------------------------------------------- */

static int create_ring(struct zn_frozen *fz);

/* a slot of numel floats whose stored layer is up to bytes (frozen_plan.c's sizes) */
static int alloc_slot(struct zn_frozen *fz, struct zn_fslot *s, uint64_t numel, uint64_t bytes)
{
	const struct zn_engine_plan *p = fz->c.plan;
	int rc = 0;

	if (p->frozen_wide)
		rc = zn_tiers_dalloc(fz->c.dev, &s->f32_d, zn_plan_device_alloc_bytes(numel * 4));
	else if (p->frozen_q4)
		rc = zn_tiers_dalloc(fz->c.dev, (void **)&s->w16_d,
				     zn_plan_device_alloc_bytes(numel * 2));
	if (!rc && p->frozen_home != ZN_TIER_DEVICE && (p->frozen_q4 || p->frozen_elem_bytes == 2))
		rc = zn_tiers_dalloc(fz->c.dev, &s->stage_d, zn_plan_device_alloc_bytes(bytes));
	if (!rc && p->frozen_q4)
		rc = zn_tiers_dalloc(fz->c.dev, (void **)&s->absmax_d,
				     zn_plan_device_alloc_bytes(fz->q4_scratch));
	return rc;
}

static void free_slot(struct zn_frozen *fz, struct zn_fslot *s)
{
	zn_device_free(fz->c.dev, s->f32_d);
	zn_device_free(fz->c.dev, s->stage_d);
	zn_device_free(fz->c.dev, s->w16_d);
	zn_device_free(fz->c.dev, s->absmax_d);
	free(s->xres);
}

uint64_t zn_frozen_pinned_bytes(const struct zn_frozen *fz)
{
	return fz->pinned_bytes;
}

struct zn_aio *zn_frozen_aio(struct zn_frozen *fz)
{
	return fz->aio;
}

int zn_frozen_prepare(struct zn_frozen *fz, const struct zn_frozen_shape *sh)
{
	int rc;

	fz->sh = *sh;
	rc = zn_frozen_q4_prepare(fz);
	return rc ? rc : zn_frozen_experts_prepare(fz);
}

void zn_frozen_plan_input(const struct zn_frozen *fz, struct zn_engine_plan_input *pin)
{
	pin->frozen_numel = fz->sh.numel;
	pin->frozen_q4_bytes = fz->q4_bytes;
	pin->frozen_q4_scratch = fz->q4_scratch;
	pin->frozen_expert_numel = fz->x_numel;
	pin->frozen_experts = fz->x_experts;
}

int zn_frozen_create(struct zn_frozen *fz, const struct zn_frozen_config *c)
{
	const struct zn_engine_plan *p = c->plan;
	uint64_t off = 0;
	int rc = 0;

	fz->c = *c;
	fz->fd = -1;
	if (!p->frozen)
		return 0;
	fz->home = zn_size_calloc((uint64_t)fz->sh.n, sizeof(*fz->home),
				  "the frozen layers' homes");
	fz->file_off = zn_size_calloc((uint64_t)fz->sh.n, sizeof(*fz->file_off),
				      "the frozen layers' file offsets");
	if (!fz->home || !fz->file_off)
		return -ENOMEM;
	if (p->frozen_home == ZN_TIER_NVME)
		rc = zn_frozen_io_open(fz);
	for (int l = 0; !rc && l < fz->sh.n; l++) {
		if (p->frozen_home == ZN_TIER_DEVICE)
			rc = zn_tiers_dalloc(fz->c.dev, &fz->home[l],
					     zn_plan_device_alloc_bytes(stored_bytes(fz, l)));
		else if (p->frozen_home == ZN_TIER_HOST)
			rc = zn_tiers_halloc(fz->c.arena, &fz->home[l], stored_bytes(fz, l));
		if (!rc && p->frozen_home == ZN_TIER_HOST && stored_bytes(fz, l))
			fz->pinned_bytes += extent(fz, l);
		fz->file_off[l] = off;
		off += zn_frozen_file_extent(fz, l); /* a streamed layer's parts each aligned */
	}
	if (rc || p->frozen_direct)
		return rc;
	/* the ring's slots, then layer 0's (the held slot) */
	fz->slot = zn_size_calloc((uint64_t)p->frozen_slots + 1, sizeof(*fz->slot),
				  "the frozen slot ring");
	if (!fz->slot)
		return -ENOMEM;
	fz->slot_n = p->frozen_slots + 1;
	rc = alloc_slot(fz, &fz->slot[p->frozen_slots], p->frozen_layer0_numel,
			p->frozen_layer0_bytes);
	for (int i = 0; !rc && i < p->frozen_slots; i++)
		rc = alloc_slot(fz, &fz->slot[i], p->frozen_slot_numel, p->frozen_slot_bytes);
	if (!rc)
		rc = create_ring(fz);
	return rc ? rc : zn_frozen_experts_create(fz);
}

void zn_frozen_destroy(struct zn_frozen *fz)
{
	if (fz->home && fz->c.plan->frozen_home == ZN_TIER_DEVICE)
		for (int l = 0; l < fz->sh.n; l++)
			zn_device_free(fz->c.dev, fz->home[l]);
	if (fz->home) /* create ran */
		zn_frozen_io_close(fz); /* reads in flight into the slots' buffers first */
	zn_frozen_experts_destroy(fz);
	free(fz->file_off);
	for (int i = 0; fz->slot && i < fz->slot_n; i++)
		free_slot(fz, &fz->slot[i]);
	free(fz->slot);
	zn_ring_destroy(&fz->ring);
	free(fz->home);
	zn_frozen_q4_free(fz);
	zn_frozen_experts_free(fz);
	*fz = (struct zn_frozen){ .fd = -1 };
}

/* A 4 KiB aligned host buffer of layer l's extent (O_DIRECT wants aligned memory). */
static int aligned_buf(struct zn_frozen *fz, int l, void **out)
{
	uint64_t len = extent(fz, l);

	*out = NULL;
	if (posix_memalign(out, ZN_PLAN_HOST_ALIGN, len ? len : ZN_PLAN_HOST_ALIGN))
		return -ENOMEM;
	memset(*out, 0, len);
	return 0;
}

/* layer l's stored bytes buf (its natural order, an extent) to or from the frozen file; a
 * streamed layer's through its own extent (each expert apart, frozen_experts.c) */
static int nvme_rw(struct zn_frozen *fz, int l, void *buf, bool write)
{
	uint64_t len = zn_frozen_file_extent(fz, l);
	void *ext = NULL;
	int rc;

	if (!zn_frozen_streams(fz, l))
		return zn_frozen_io_rw(fz, l, buf, write);
	if (posix_memalign(&ext, ZN_PLAN_HOST_ALIGN, len))
		return -ENOMEM;
	memset(ext, 0, len);
	if (write)
		zn_frozen_experts_pack(fz, l, ext, buf);
	rc = zn_frozen_io_rw(fz, l, ext, write);
	if (!rc && !write)
		zn_frozen_experts_unpack(fz, l, buf, ext);
	free(ext);
	return rc;
}

/* the stored bytes src of layer l onto its home */
static int put_home(struct zn_frozen *fz, int l, const void *src)
{
	const struct zn_engine_plan *p = fz->c.plan;
	uint64_t bytes = stored_bytes(fz, l);
	int rc;

	if (p->frozen_home == ZN_TIER_DEVICE) {
		rc = zn_memcpy_async(fz->c.copy_in, fz->home[l], src, bytes, ZN_COPY_H2D);
		return rc ? rc : zn_stream_synchronize(fz->c.copy_in);
	}
	if (p->frozen_home == ZN_TIER_HOST) {
		memcpy(fz->home[l], src, bytes);
		return 0;
	}
	return nvme_rw(fz, l, (void *)src, true);
}

int zn_frozen_init_layer_q4(struct zn_frozen *fz, int l, const void *extent)
{
	void *buf = NULL;
	int rc;

	if (!fnumel(fz, l))
		return 0;
	if (l == 0)
		fz->slot0_valid = false;
	rc = aligned_buf(fz, l, &buf); /* the 4 KiB extent, zero-padded (O_DIRECT) */
	if (!rc) {
		memcpy(buf, extent, stored_bytes(fz, l));
		rc = put_home(fz, l, buf);
	}
	free(buf);
	return rc;
}

int zn_frozen_init_layer(struct zn_frozen *fz, int l, const float *f32_h)
{
	const struct zn_engine_plan *p = fz->c.plan;
	uint64_t n = fnumel(fz, l), bytes = stored_bytes(fz, l);
	void *src = (void *)f32_h, *buf = NULL;
	int rc = 0;

	if (!n)
		return 0;
	if (l == 0)
		fz->slot0_valid = false; /* fetched anew at the next step */
	if (fz->q4 || fz->sh.pdt != ZN_DTYPE_F32 || p->frozen_home == ZN_TIER_NVME) {
		rc = aligned_buf(fz, l, &buf);
		if (rc)
			return rc;
		if (fz->q4) /* quantized once, here, at load */
			rc = zn_q4_pack(&fz->q4[l], buf, f32_h, fz->sh.pdt);
		else if (fz->sh.pdt == ZN_DTYPE_BF16)
			zn_cast_f32_to_bf16(buf, f32_h, n);
		else if (fz->sh.pdt == ZN_DTYPE_F16)
			zn_cast_f32_to_f16(buf, f32_h, n);
		else
			memcpy(buf, f32_h, bytes);
		src = buf;
	}
	(void)bytes;
	if (!rc)
		rc = put_home(fz, l, src);
	free(buf);
	return rc;
}

/* layer l's stored bytes from its home into the 4 KiB-aligned buf (its extent) */
static int get_home(struct zn_frozen *fz, int l, void *buf)
{
	const struct zn_engine_plan *p = fz->c.plan;
	uint64_t bytes = stored_bytes(fz, l);
	int rc;

	if (p->frozen_home == ZN_TIER_DEVICE) {
		rc = zn_memcpy_async(fz->c.copy_out, buf, fz->home[l], bytes, ZN_COPY_D2H);
		return rc ? rc : zn_stream_synchronize(fz->c.copy_out);
	}
	if (p->frozen_home == ZN_TIER_HOST) {
		memcpy(buf, fz->home[l], bytes);
		return 0;
	}
	return nvme_rw(fz, l, buf, false);
}

int zn_frozen_read_layer_q4(struct zn_frozen *fz, int l, void *extent)
{
	void *buf = NULL;
	int rc;

	if (!fnumel(fz, l))
		return 0;
	rc = aligned_buf(fz, l, &buf);
	if (!rc)
		rc = get_home(fz, l, buf);
	if (!rc)
		memcpy(extent, buf, stored_bytes(fz, l));
	free(buf);
	return rc;
}

int zn_frozen_read_layer(struct zn_frozen *fz, int l, float *out_h)
{
	uint64_t n = fnumel(fz, l), bytes = stored_bytes(fz, l);
	void *buf = NULL;
	int rc;

	if (!n)
		return 0;
	rc = aligned_buf(fz, l, &buf);
	if (!rc)
		rc = get_home(fz, l, buf);
	if (!rc && fz->q4) /* dequantized as the device does */
		rc = zn_q4_unpack(&fz->q4[l], out_h, buf, fz->sh.pdt);
	else if (!rc && fz->sh.pdt == ZN_DTYPE_BF16)
		zn_cast_bf16_to_f32(out_h, buf, n);
	else if (!rc && fz->sh.pdt == ZN_DTYPE_F16)
		zn_cast_f16_to_f32(out_h, buf, n);
	else if (!rc)
		memcpy(out_h, buf, bytes);
	free(buf);
	return rc;
}

/* ---- the fetch sequence ------------------------------------------------------------- */

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
	struct fcast ca;
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
	else if (!rc && !wide && p->frozen_wide) {
		ca = (struct fcast){ s->f32_d, src, n, fz->sh.pdt };
		rc = zn_launch(fz->c.copy_in, fcast_fn, &ca, sizeof(ca));
	}
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
static int create_ring(struct zn_frozen *fz)
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
	/* items .. item + depth (create_ring): each waits on the device for its slot's
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
