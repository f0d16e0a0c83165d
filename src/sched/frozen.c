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
#include "sched/engine_impl.h"
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

static uint64_t fnumel(const struct zn_engine *e, int l)
{
	return e->ld[l].frozen_numel;
}

static uint64_t stored_bytes(const struct zn_engine *e, int l)
{
	return zn_frozen_stored_bytes(e, l);
}

static uint64_t extent(const struct zn_engine *e, int l)
{
	return zn_plan_host_alloc_bytes(stored_bytes(e, l));
}

/* ---- create, init, read-back -------------------------------------------------------- */

/* a slot of numel floats whose stored layer is up to bytes (frozen_plan.c's sizes) */
static int alloc_slot(struct zn_engine *e, struct zn_fslot *s, uint64_t numel, uint64_t bytes)
{
	const struct zn_engine_plan *p = &e->plan;
	int rc = 0;

	if (p->frozen_wide)
		rc = zn_tiers_dalloc(e->rt.dev, &s->f32_d, zn_plan_device_alloc_bytes(numel * 4));
	else if (p->frozen_q4)
		rc = zn_tiers_dalloc(e->rt.dev, (void **)&s->w16_d, zn_plan_device_alloc_bytes(numel * 2));
	if (!rc && p->frozen_home != ZN_TIER_DEVICE && (p->frozen_q4 || p->frozen_elem_bytes == 2))
		rc = zn_tiers_dalloc(e->rt.dev, &s->stage_d, zn_plan_device_alloc_bytes(bytes));
	if (!rc && p->frozen_q4)
		rc = zn_tiers_dalloc(e->rt.dev, (void **)&s->absmax_d,
				     zn_plan_device_alloc_bytes(e->frozen_q4_scratch));
	if (!rc)
		rc = zn_event_create(e->rt.dev, &s->ready);
	if (!rc)
		rc = zn_event_create(e->rt.dev, &s->free);
	return rc;
}

static void free_slot(struct zn_engine *e, struct zn_fslot *s)
{
	zn_device_free(e->rt.dev, s->f32_d);
	zn_device_free(e->rt.dev, s->stage_d);
	zn_device_free(e->rt.dev, s->w16_d);
	zn_device_free(e->rt.dev, s->absmax_d);
	zn_event_destroy(s->ready);
	zn_event_destroy(s->free);
	free(s->xres);
}

uint64_t zn_frozen_pinned_bytes(const struct zn_engine *e)
{
	return e->fz.pinned_bytes;
}

int zn_frozen_create(struct zn_engine *e)
{
	const struct zn_engine_plan *p = &e->plan;
	struct zn_frozen *fz = &e->fz;
	uint64_t off = 0;
	int rc = 0;

	fz->fd = -1;
	if (!p->frozen)
		return 0;
	fz->home = zn_size_calloc((uint64_t)e->n, sizeof(*fz->home), "the frozen layers' homes");
	fz->file_off = zn_size_calloc((uint64_t)e->n, sizeof(*fz->file_off),
				      "the frozen layers' file offsets");
	if (!fz->home || !fz->file_off)
		return -ENOMEM;
	if (p->frozen_home == ZN_TIER_NVME)
		rc = zn_frozen_io_open(e);
	for (int l = 0; !rc && l < e->n; l++) {
		if (p->frozen_home == ZN_TIER_DEVICE)
			rc = zn_tiers_dalloc(e->rt.dev, &fz->home[l],
					     zn_plan_device_alloc_bytes(stored_bytes(e, l)));
		else if (p->frozen_home == ZN_TIER_HOST)
			rc = zn_tiers_halloc(e->arena, &fz->home[l], stored_bytes(e, l));
		if (!rc && p->frozen_home == ZN_TIER_HOST && stored_bytes(e, l))
			fz->pinned_bytes += extent(e, l);
		fz->file_off[l] = off;
		off += zn_frozen_file_extent(e, l); /* a streamed layer's parts each aligned */
	}
	if (rc || p->frozen_direct)
		return rc;
	rc = alloc_slot(e, &fz->slot0, p->frozen_layer0_numel, p->frozen_layer0_bytes);
	fz->ring_n = p->frozen_slots;
	fz->ring = zn_size_calloc((uint64_t)fz->ring_n, sizeof(*fz->ring), "the frozen slot ring");
	if (!rc && !fz->ring)
		rc = -ENOMEM;
	for (int i = 0; !rc && i < fz->ring_n; i++)
		rc = alloc_slot(e, &fz->ring[i], p->frozen_slot_numel, p->frozen_slot_bytes);
	return rc ? rc : zn_frozen_experts_create(e);
}

void zn_frozen_destroy(struct zn_engine *e)
{
	struct zn_frozen *fz = &e->fz;

	if (fz->home && e->plan.frozen_home == ZN_TIER_DEVICE)
		for (int l = 0; l < e->n; l++)
			zn_device_free(e->rt.dev, fz->home[l]);
	if (fz->home) /* create ran */
		zn_frozen_io_close(e); /* reads in flight into the slots' buffers first */
	zn_frozen_experts_destroy(e);
	free(fz->file_off);
	free_slot(e, &fz->slot0);
	for (int i = 0; fz->ring && i < fz->ring_n; i++)
		free_slot(e, &fz->ring[i]);
	free(fz->ring);
	free(fz->home);
	*fz = (struct zn_frozen){ .fd = -1 };
}

/* A 4 KiB aligned host buffer of layer l's extent (O_DIRECT wants aligned memory). */
static int aligned_buf(struct zn_engine *e, int l, void **out)
{
	uint64_t len = extent(e, l);

	*out = NULL;
	if (posix_memalign(out, ZN_PLAN_HOST_ALIGN, len ? len : ZN_PLAN_HOST_ALIGN))
		return -ENOMEM;
	memset(*out, 0, len);
	return 0;
}

/* layer l's stored bytes buf (its natural order, an extent) to or from the frozen file; a
 * streamed layer's through its own extent (each expert apart, frozen_experts.c) */
static int nvme_rw(struct zn_engine *e, int l, void *buf, bool write)
{
	uint64_t len = zn_frozen_file_extent(e, l);
	void *ext = NULL;
	int rc;

	if (!zn_frozen_streams(e, l))
		return zn_frozen_io_rw(e, l, buf, write);
	if (posix_memalign(&ext, ZN_PLAN_HOST_ALIGN, len))
		return -ENOMEM;
	memset(ext, 0, len);
	if (write)
		zn_frozen_experts_pack(e, l, ext, buf);
	rc = zn_frozen_io_rw(e, l, ext, write);
	if (!rc && !write)
		zn_frozen_experts_unpack(e, l, buf, ext);
	free(ext);
	return rc;
}

/* the stored bytes src of layer l onto its home */
static int put_home(struct zn_engine *e, int l, const void *src)
{
	const struct zn_engine_plan *p = &e->plan;
	uint64_t bytes = stored_bytes(e, l);
	int rc;

	if (p->frozen_home == ZN_TIER_DEVICE) {
		rc = zn_memcpy_async(e->rt.copy_in, e->fz.home[l], src, bytes, ZN_COPY_H2D);
		return rc ? rc : zn_stream_synchronize(e->rt.copy_in);
	}
	if (p->frozen_home == ZN_TIER_HOST) {
		memcpy(e->fz.home[l], src, bytes);
		return 0;
	}
	return nvme_rw(e, l, (void *)src, true);
}

int zn_frozen_init_layer_q4(struct zn_engine *e, int l, const void *extent)
{
	void *buf = NULL;
	int rc;

	if (!fnumel(e, l))
		return 0;
	if (l == 0)
		e->fz.slot0_valid = false;
	rc = aligned_buf(e, l, &buf); /* the 4 KiB extent, zero-padded (O_DIRECT) */
	if (!rc) {
		memcpy(buf, extent, stored_bytes(e, l));
		rc = put_home(e, l, buf);
	}
	free(buf);
	return rc;
}

int zn_frozen_init_layer(struct zn_engine *e, int l, const float *f32_h)
{
	const struct zn_engine_plan *p = &e->plan;
	uint64_t n = fnumel(e, l), bytes = stored_bytes(e, l);
	void *src = (void *)f32_h, *buf = NULL;
	int rc = 0;

	if (!n)
		return 0;
	if (l == 0)
		e->fz.slot0_valid = false; /* fetched anew at the next step */
	if (e->fq4 || e->pdt != ZN_DTYPE_F32 || p->frozen_home == ZN_TIER_NVME) {
		rc = aligned_buf(e, l, &buf);
		if (rc)
			return rc;
		if (e->fq4) /* quantized once, here, at load */
			rc = zn_q4_pack(&e->fq4[l], buf, f32_h, e->pdt);
		else if (e->pdt == ZN_DTYPE_BF16)
			zn_cast_f32_to_bf16(buf, f32_h, n);
		else if (e->pdt == ZN_DTYPE_F16)
			zn_cast_f32_to_f16(buf, f32_h, n);
		else
			memcpy(buf, f32_h, bytes);
		src = buf;
	}
	(void)bytes;
	if (!rc)
		rc = put_home(e, l, src);
	free(buf);
	return rc;
}

/* layer l's stored bytes from its home into the 4 KiB-aligned buf (its extent) */
static int get_home(struct zn_engine *e, int l, void *buf)
{
	const struct zn_engine_plan *p = &e->plan;
	uint64_t bytes = stored_bytes(e, l);
	int rc;

	if (p->frozen_home == ZN_TIER_DEVICE) {
		rc = zn_memcpy_async(e->rt.copy_out, buf, e->fz.home[l], bytes, ZN_COPY_D2H);
		return rc ? rc : zn_stream_synchronize(e->rt.copy_out);
	}
	if (p->frozen_home == ZN_TIER_HOST) {
		memcpy(buf, e->fz.home[l], bytes);
		return 0;
	}
	return nvme_rw(e, l, buf, false);
}

int zn_frozen_read_layer_q4(struct zn_engine *e, int l, void *extent)
{
	void *buf = NULL;
	int rc;

	if (!fnumel(e, l))
		return 0;
	rc = aligned_buf(e, l, &buf);
	if (!rc)
		rc = get_home(e, l, buf);
	if (!rc)
		memcpy(extent, buf, stored_bytes(e, l));
	free(buf);
	return rc;
}

int zn_frozen_read_layer(struct zn_engine *e, int l, float *out_h)
{
	uint64_t n = fnumel(e, l), bytes = stored_bytes(e, l);
	void *buf = NULL;
	int rc;

	if (!n)
		return 0;
	rc = aligned_buf(e, l, &buf);
	if (!rc)
		rc = get_home(e, l, buf);
	if (!rc && e->fq4) /* dequantized as the device does */
		rc = zn_q4_unpack(&e->fq4[l], out_h, buf, e->pdt);
	else if (!rc && e->pdt == ZN_DTYPE_BF16)
		zn_cast_bf16_to_f32(out_h, buf, n);
	else if (!rc && e->pdt == ZN_DTYPE_F16)
		zn_cast_f16_to_f32(out_h, buf, n);
	else if (!rc)
		memcpy(out_h, buf, bytes);
	free(buf);
	return rc;
}

/* ---- the fetch sequence ------------------------------------------------------------- */

/* Enqueues layer l's working copy into slot s for item (-1: layer 0): [nvme read into
 * its pinned read buffer] -> [copy up] -> [cast]; ready recorded on copy_in. */
static int fetch_into(struct zn_engine *e, int l, struct zn_fslot *s, int item)
{
	const struct zn_engine_plan *p = &e->plan;
	/* a layer whose experts are fetched per routed expert: the rest of it (its head) */
	uint64_t bytes = zn_frozen_fetch_bytes(e, l);
	uint64_t n = zn_frozen_streams(e, l) ? bytes / p->frozen_elem_bytes : fnumel(e, l);
	bool wide = p->frozen_elem_bytes == 4 && !p->frozen_q4; /* comes up as the fp32 copy */
	const void *src = e->fz.home[l];
	struct fcast ca;
	int h = -1, rc = 0;

	if (!n)
		return 0;
	if (p->frozen_home == ZN_TIER_NVME) /* submitted ahead (frozen_io.c), or now */
		rc = zn_frozen_io_take(e, item, l, &src);
	if (!rc)
		rc = zn_stream_wait_event(e->rt.copy_in, s->free);
	if (!rc && p->frozen_home != ZN_TIER_DEVICE)
		rc = zn_tr_begin(e, e->tr.on, e->rt.copy_in, "frozen up", l, bytes, &h);
	if (rc)
		return rc;
	if (p->frozen_home != ZN_TIER_DEVICE) {
		/* a layer whose experts come per routed expert: its rest only */
		rc = zn_frozen_rest_up(e, l, wide ? (void *)s->f32_d : s->stage_d, src,
				       p->frozen_home == ZN_TIER_NVME);
		if (!rc && p->frozen_home == ZN_TIER_NVME)
			rc = zn_frozen_io_copied(e, item);
		if (!rc)
			rc = zn_tr_end(e, e->rt.copy_in, h);
		src = s->stage_d;
	}
	if (!rc && p->frozen_q4)
		rc = zn_frozen_q4_expand(e, l, s, src);
	else if (!rc && !wide && p->frozen_wide) {
		ca = (struct fcast){ s->f32_d, src, n, e->pdt };
		rc = zn_launch(e->rt.copy_in, fcast_fn, &ca, sizeof(ca));
	}
	if (!rc)
		rc = zn_frozen_experts_clear(e, s);
	if (!rc)
		rc = zn_event_record(s->ready, e->rt.copy_in);
	return rc;
}

/* what the compute reads of a slot: the fp32 copy, or with bf16 compute the bf16 one */
static const float *work(const struct zn_engine *e, const struct zn_fslot *s)
{
	if (e->plan.frozen_wide)
		return s->f32_d;
	return e->plan.frozen_q4 ? (const float *)s->w16_d : (const float *)s->stage_d;
}

static bool none(const struct zn_engine *e)
{
	return !e->plan.frozen;
}

static struct zn_fslot *seq_slot(struct zn_engine *e, int item)
{
	return &e->fz.ring[item % e->fz.ring_n];
}

/* the activations' sequence of layer uses, as the prefetcher's (acts.h: with activation
 * checkpointing, recomputed forwards are uses too) */
static int seq_layer(const struct zn_engine *e, int item)
{
	return e->act.use[item].layer;
}

/* a micro-batch's sequence from its first item */
static void seq_reset(struct zn_engine *e)
{
	e->fz.seq_len = e->act.use_n;
	e->fz.seq_issued = 0;
	e->fz.seq_read = 0;
	e->fz.seq_cur = -1;
}

const float *zn_frozen_layer0_params(struct zn_engine *e)
{
	if (none(e) || !fnumel(e, 0))
		return NULL;
	return e->plan.frozen_direct ? e->fz.home[0] : work(e, &e->fz.slot0);
}

int zn_frozen_layer0(struct zn_engine *e, const float **f32_d)
{
	int rc;

	*f32_d = zn_frozen_layer0_params(e);
	if (none(e) || e->plan.frozen_direct)
		return 0;
	/* the sequence begins here: its first reads queue behind layer 0's */
	seq_reset(e);
	e->fz.seq_begun = true;
	/* the base never changes: layer 0's working copy, once fetched, stays for later steps */
	rc = zn_frozen_io_start0(e, !e->fz.slot0_valid);
	if (!rc && !e->fz.slot0_valid)
		rc = fetch_into(e, 0, &e->fz.slot0, -1);
	e->fz.slot0_valid = !rc;
	return rc;
}

int zn_frozen_layer0_wait(struct zn_engine *e)
{
	if (none(e) || e->plan.frozen_direct || !fnumel(e, 0))
		return 0;
	return zn_stream_wait_event(e->rt.compute, e->fz.slot0.ready);
}

int zn_frozen_layer0_release(struct zn_engine *e)
{
	if (none(e) || e->plan.frozen_direct || !fnumel(e, 0))
		return 0;
	return zn_event_record(e->fz.slot0.free, e->rt.compute);
}

int zn_frozen_begin(struct zn_engine *e)
{
	if (!e->fz.seq_begun) /* else zn_frozen_layer0 began it (and its reads) */
		seq_reset(e);
	e->fz.seq_begun = false;
	if (none(e) || e->plan.frozen_direct)
		return 0;
	return zn_frozen_io_pump(e);
}

/* Items up to upto (waiting for their reads), then those up to frozen_depth after the one
 * acquired (seq_cur) whose read is done: a read not yet done never holds up the
 * enqueueing of an item before it. */
static int issue(struct zn_engine *e, int upto)
{
	struct zn_frozen *fz = &e->fz;
	int last = fz->seq_cur + e->plan.frozen_depth, rc = 0;

	if (last < upto) /* one slot: upto's previous item is the one just released */
		last = upto;
	if (last >= fz->seq_len)
		last = fz->seq_len - 1;
	while (!rc && fz->seq_issued <= last) {
		int j = fz->seq_issued;

		if (j > upto && !zn_frozen_io_ready(e, j))
			break;
		rc = fetch_into(e, seq_layer(e, j), seq_slot(e, j), j);
		fz->seq_issued++;
	}
	return rc;
}

int zn_frozen_acquire(struct zn_engine *e, int item, int layer, const float **f32_d)
{
	int rc;

	*f32_d = NULL;
	if (none(e) || !fnumel(e, layer))
		return 0;
	if (e->plan.frozen_direct) {
		*f32_d = e->fz.home[layer];
		return 0;
	}
	/* items .. item + depth: each waits on the device for its slot's release */
	e->fz.seq_cur = item;
	rc = zn_frozen_io_pump(e);
	if (!rc)
		rc = issue(e, item);
	if (!rc)
		rc = zn_frozen_io_pump(e);
	if (rc)
		return rc;
	*f32_d = work(e, seq_slot(e, item));
	return zn_stream_wait_event(e->rt.compute, seq_slot(e, item)->ready);
}

int zn_frozen_release(struct zn_engine *e, int item)
{
	int rc;

	if (none(e) || e->plan.frozen_direct || !fnumel(e, seq_layer(e, item)))
		return 0;
	rc = zn_event_record(seq_slot(e, item)->free, e->rt.compute);
	if (!rc)
		rc = zn_frozen_io_pump(e);
	/* item + 1's copy up now, its read waited for if need be: the compute of item is
	 * enqueued, and item + 1 is the next it needs (so its copy runs during item's compute,
	 * not after whatever the caller does before the next acquire) */
	return rc ? rc : issue(e, item + 1);
}
