/* A mixture of experts' frozen experts fetched per routed expert (frozen.h, plan.h
 * frozen_experts; docs/lora.md "Experts fetched per routed expert").
 *
 * A sparse layer's frozen buffer ends with its two expert stacks (gate_up_proj [E, 2I, C]
 * and down_proj [E, C, I], each expert's rows contiguous: the descriptors' stacks of parts,
 * model.h). With the home in host memory or on nvme, the layer's fetch through the working
 * slots (frozen_seq.c) moves the rest of the layer only; the model's sparse block, once its
 * router has run and the rows per expert are on the host (moe.h zn_moe_source), calls
 * fetch below right before each routed expert's GEMMs, and the expert is fetched on its
 * own into its slices of the slot's working copy: its stored slices of both stacks copied up from
 * the host home, or read from the frozen store (each expert its own 4 KiB-aligned part
 * of the layer's extent, after its rest: one read an expert) into a pinned buffer and copied up,
 * then cast to fp32 where the stored dtype is 16-bit. The backward (and a recomputed
 * forward) fetches the same experts again: the routing is the forward's.
 *
 * The fetch is synchronous: it runs on the thread that runs the layer's call (the compute
 * stream's worker on the host device, the enqueueing thread under CUDA) and returns with
 * the copies complete (k->write_sync waits for the stream's work before it), so the
 * expert's GEMMs after it read them; under CUDA its nvme read overlaps the previous
 * expert's GEMMs, still running, and nothing else. Its nvme reads go
 * through an aio engine of their own (that thread's). The values copied are the stored
 * bytes the whole layer's fetch would have moved, cast by the same kernel: the results are
 * bit for bit those of a whole fetch. An expert no token chose is not moved at all; its
 * slices of the slot hold whatever an earlier layer left there and the block never reads
 * them. A 4-bit base's stacks are plain (no nn.Linear weight is in them), the tail of its
 * extent's plain part: its rest is then the plain values before them and the quantized
 * tensors after them, back to back (frozen_q4.c expands it with the offsets past the
 * stacks shifted down). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/size.h"
#include "model/model.h"
#include "model/quant/q4.h"
#include "sched/frozen.h"
#include "sched/plan.h"
#include "sched/tiers.h"

/* ---- the layout --------------------------------------------------------------------- */

/* the two expert stacks of d, the tail of its numel floats: their floats and experts, and
 * the first stack's floats per expert; false when d has not exactly that */
static bool stacks(const struct zn_layer_desc *d, uint64_t numel, uint64_t *xn, int *E,
		   uint64_t *first)
{
	const struct zn_tensor_desc *a = NULL, *b = NULL;
	int ea, eb;

	for (int t = 0; t < d->tensor_count; t++) {
		if (d->tensors[t].parts <= 0)
			continue;
		if (b)
			return false;
		if (a)
			b = &d->tensors[t];
		else
			a = &d->tensors[t];
	}
	if (!b || a->part_kinds < 1 || b->part_kinds < 1)
		return false;
	ea = a->parts / a->part_kinds;
	eb = b->parts / b->part_kinds;
	if (ea < 1 || ea != eb || a->numel % (uint64_t)ea || b->numel % (uint64_t)eb ||
	    a->offset + a->numel != b->offset || b->offset + b->numel != numel)
		return false;
	*xn = a->numel + b->numel;
	*E = ea;
	*first = a->numel / (uint64_t)ea;
	return true;
}

/* a 4-bit base: no quantized tensor in layer l's stacks, so they are the tail of its
 * extent's plain part, in the stored dtype (they are: no stack is an nn.Linear weight) */
static bool plain_stacks(const struct zn_frozen *fz, int l)
{
	const struct zn_q4_layer *q = fz->q4 ? &fz->q4[l] : NULL;
	uint64_t from = fz->sh.numel[l] - fz->x_numel[l];

	for (int i = 0; q && i < q->count; i++)
		if (q->seg[i].offset + q->seg[i].numel > from)
			return false;
	/* the quantized tensors come up that many bytes lower: keep their 16-byte alignment */
	return !q || fz->x_numel[l] * q->elem_bytes % 16 == 0;
}

void zn_frozen_experts_free(struct zn_frozen *fz)
{
	free(fz->x_numel);
	free(fz->x_experts);
	free(fz->x_first);
	fz->x_numel = NULL;
	fz->x_experts = NULL;
	fz->x_first = NULL;
}

int zn_frozen_experts_prepare(struct zn_frozen *fz)
{
	const struct zn_model_ops *o = fz->sh.model->ops;
	bool any = false;

	zn_frozen_experts_free(fz);
	fz->x_numel = zn_size_calloc((uint64_t)fz->sh.n, sizeof(uint64_t),
						"the frozen experts' sizes");
	fz->x_experts = zn_size_calloc((uint64_t)fz->sh.n, sizeof(int), "the frozen experts");
	fz->x_first = zn_size_calloc((uint64_t)fz->sh.n, sizeof(uint64_t),
						"the frozen experts' first stacks");
	if (!fz->x_numel || !fz->x_experts || !fz->x_first) {
		zn_frozen_experts_free(fz);
		return -ENOMEM;
	}
	for (int l = 1; l < fz->sh.n; l++) {
		const struct zn_layer_desc *d;

		if (!fz->sh.numel[l])
			continue;
		/* the frozen buffer's tensors (LoRA: the base layer's), or the layer's own where
		 * the frozen buffer is the layer (zinc generate's streamed layers) */
		d = o->frozen_desc ? o->frozen_desc(fz->sh.model->config, l) :
		    fz->sh.ld && fz->sh.ld[l].numel == fz->sh.numel[l] ? &fz->sh.ld[l] : NULL;
		if (d && stacks(d, fz->sh.numel[l], &fz->x_numel[l],
				&fz->x_experts[l], &fz->x_first[l]) &&
		    plain_stacks(fz, l))
			any = true;
		else
			fz->x_numel[l] = 0;
	}
	if (!any) /* the plan then has nothing to stream */
		zn_frozen_experts_free(fz);
	return 0;
}

bool zn_frozen_streams(const struct zn_frozen *fz, int l)
{
	return fz->x_numel && zn_plan_frozen_streams(fz->c.pin, fz->c.plan, l);
}

uint64_t zn_frozen_stored_bytes(const struct zn_frozen *fz, int l)
{
	return fz->q4 ? fz->q4[l].bytes : fz->sh.numel[l] * fz->c.plan->frozen_elem_bytes;
}

uint64_t zn_frozen_file_extent(const struct zn_frozen *fz, int l)
{
	return zn_plan_frozen_extent(fz->c.pin, fz->c.plan, l);
}

/* where the stacks start: in the layer's layout (the working copy), and in its stored
 * extent's plain values (a 4-bit base's plain part leaves out the quantized tensors) */
static uint64_t rest_numel(const struct zn_frozen *fz, int l)
{
	return fz->sh.numel[l] - fz->x_numel[l];
}

static uint64_t plain_first(const struct zn_frozen *fz, int l)
{
	uint64_t plain = fz->q4 ? fz->q4[l].plain_numel : fz->sh.numel[l];

	return plain - fz->x_numel[l];
}

/* the stacks' stored bytes */
static uint64_t stack_bytes(const struct zn_frozen *fz, int l)
{
	return fz->x_numel[l] * fz->c.plan->frozen_elem_bytes;
}

uint64_t zn_frozen_fetch_bytes(const struct zn_frozen *fz, int l)
{
	if (!zn_frozen_streams(fz, l))
		return zn_frozen_stored_bytes(fz, l);
	return zn_frozen_stored_bytes(fz, l) - stack_bytes(fz, l);
}

uint64_t zn_frozen_stack_shift(const struct zn_frozen *fz, int l, uint64_t *layout_end)
{
	*layout_end = fz->sh.numel[l];
	if (!zn_frozen_streams(fz, l))
		return 0;
	*layout_end = rest_numel(fz, l);
	return stack_bytes(fz, l);
}

int zn_frozen_rest_up(struct zn_frozen *fz, int l, void *dst_d, const void *src_h, bool packed)
{
	uint64_t a, rest = zn_frozen_fetch_bytes(fz, l);
	int rc;

	if (packed || !zn_frozen_streams(fz, l))
		return zn_memcpy_async(fz->c.copy_in, dst_d, src_h, rest, ZN_COPY_H2D);
	a = plain_first(fz, l) * fz->c.plan->frozen_elem_bytes;
	/* the home's extent: the plain values before the stacks, then what follows them (a
	 * 4-bit base's quantized tensors), back to back */
	rc = zn_memcpy_async(fz->c.copy_in, dst_d, src_h, a, ZN_COPY_H2D);
	if (!rc && rest > a)
		rc = zn_memcpy_async(fz->c.copy_in, (char *)dst_d + a,
				     (const char *)src_h + a + stack_bytes(fz, l), rest - a,
				     ZN_COPY_H2D);
	return rc;
}

/* expert x of layer l: floats per expert of each stack, and the stored offsets (bytes, in
 * the layer's natural order) of its two slices */
struct xpart {
	uint64_t n[2], off[2], bytes; /* bytes: both slices */
};

static struct xpart xpart_of(const struct zn_frozen *fz, int l, int x)
{
	uint64_t fb = fz->c.plan->frozen_elem_bytes, E = (uint64_t)fz->x_experts[l];
	uint64_t r = plain_first(fz, l), n0 = fz->x_first[l];
	uint64_t n1 = fz->x_numel[l] / E - n0;
	struct xpart p;

	p.n[0] = n0;
	p.n[1] = n1;
	p.off[0] = (r + (uint64_t)x * n0) * fb;
	p.off[1] = (r + E * n0 + (uint64_t)x * n1) * fb;
	p.bytes = (n0 + n1) * fb;
	return p;
}

/* where expert x's extent starts in layer l's nvme extent */
static uint64_t ext_off(const struct zn_frozen *fz, int l, int x)
{
	struct xpart p = xpart_of(fz, l, 0);

	return zn_plan_host_alloc_bytes(zn_frozen_fetch_bytes(fz, l)) +
	       (uint64_t)x * zn_plan_host_alloc_bytes(p.bytes);
}

/* the extent's rest first (the plain values before the stacks, then what follows them),
 * then each expert's extent */
void zn_frozen_experts_pack(const struct zn_frozen *fz, int l, void *ext, const void *stored)
{
	uint64_t a = plain_first(fz, l) * fz->c.plan->frozen_elem_bytes;
	const char *s = stored;
	char *d = ext;

	memcpy(d, s, a);
	memcpy(d + a, s + a + stack_bytes(fz, l), zn_frozen_fetch_bytes(fz, l) - a);
	for (int x = 0; x < fz->x_experts[l]; x++) {
		struct xpart p = xpart_of(fz, l, x);
		uint64_t o = ext_off(fz, l, x), b0 = p.n[0] * fz->c.plan->frozen_elem_bytes;

		memcpy(d + o, s + p.off[0], b0);
		memcpy(d + o + b0, s + p.off[1], p.bytes - b0);
	}
}

void zn_frozen_experts_unpack(const struct zn_frozen *fz, int l, void *stored, const void *ext)
{
	uint64_t a = plain_first(fz, l) * fz->c.plan->frozen_elem_bytes;
	const char *s = ext;
	char *d = stored;

	memcpy(d, s, a);
	memcpy(d + a + stack_bytes(fz, l), s + a, zn_frozen_fetch_bytes(fz, l) - a);
	for (int x = 0; x < fz->x_experts[l]; x++) {
		struct xpart p = xpart_of(fz, l, x);
		uint64_t o = ext_off(fz, l, x), b0 = p.n[0] * fz->c.plan->frozen_elem_bytes;

		memcpy(d + p.off[0], s + o, b0);
		memcpy(d + p.off[1], s + o + b0, p.bytes - b0);
	}
}

static int max_experts(const struct zn_frozen *fz)
{
	int most = 0;

	for (int l = 0; fz->x_experts && l < fz->sh.n; l++)
		if (fz->x_experts[l] > most)
			most = fz->x_experts[l];
	return most;
}

/* ---- the fetch (on the thread of the layer's call) ---------------------------------- */

/* n stored values at src (host) into the fp32 working copy dst; 16-bit ones through the
 * staging at byte stage_off, cast by the kernel the whole fetch casts with */
static void up(struct zn_frozen *fz, const struct zn_kernel_table *k, void *stream, float *dst,
	       const void *src, uint64_t n, uint64_t stage_off)
{
	uint16_t *st = (uint16_t *)(void *)((char *)fz->xstage_d + stage_off);

	if (fz->c.plan->frozen_elem_bytes == 4) {
		k->write_sync(stream, dst, src, (size_t)n * 4);
		return;
	}
	k->write_sync(stream, st, src, (size_t)n * 2);
	if (fz->sh.pdt == ZN_DTYPE_F16)
		k->cast_f16_to_f32(stream, dst, st, (size_t)n);
	else
		k->cast_bf16_to_f32(stream, dst, st, (size_t)n);
}

static int fetch_one(struct zn_frozen *fz, const struct zn_kernel_table *k, void *stream, int l,
		     const struct zn_moe_weights *W, int x)
{
	struct xpart p = xpart_of(fz, l, x);
	uint64_t b0 = p.n[0] * fz->c.plan->frozen_elem_bytes;
	const char *s0, *s1;
	/* the slot's working copy, written here: the weights the block is handed are it */
	float *gu = (float *)(uintptr_t)W->gu, *down = (float *)(uintptr_t)W->down;

	if (fz->c.plan->frozen_home == ZN_TIER_NVME) {
		uint64_t len = zn_plan_host_alloc_bytes(p.bytes);
		struct zn_swap_key key = { ZN_SWAP_FROZEN, l, fz->c.rank };
		struct zn_swap_req req;
		int rc = zn_swap_read(fz->xswap, key, ext_off(fz, l, x), len, fz->xbuf, &req);

		if (!rc)
			rc = zn_swap_wait(&req);
		if (rc) {
			zn_error("frozen expert %d of layer %d: nvme read failed (%s), from %s", x,
				 l, zn_strerror(rc), zn_swap_file(fz->xswap, 0));
			return rc;
		}
		fz->x_read_bytes += len;
		s0 = fz->xbuf;
		s1 = s0 + b0;
	} else {
		s0 = (const char *)fz->home[l] + p.off[0];
		s1 = (const char *)fz->home[l] + p.off[1];
	}
	up(fz, k, stream, gu + (uint64_t)x * p.n[0], s0, p.n[0], 0);
	up(fz, k, stream, down + (uint64_t)x * p.n[1], s1, p.n[1], b0);
	fz->x_count++;
	fz->x_bytes += p.bytes;
	return 0;
}

/* the ring slot whose working copy W points into (layer l's gate_up stack follows its
 * rest), or NULL */
static struct zn_fslot *slot_of(struct zn_frozen *fz, int l, const struct zn_moe_weights *W)
{
	const float *base = W->gu - rest_numel(fz, l);

	for (int i = 0; i < fz->slot_n - 1; i++) /* the ring's, not layer 0's */
		if (fz->slot[i].f32_d == base)
			return &fz->slot[i];
	return NULL;
}

/* A routed expert the slot does not hold yet: a layer's use fetches each of its routed
 * experts once, however many calls it serves (layer-major: the micro-batches' forwards, or
 * a recomputed forward and the backward, under one fetch of the layer). */
static void fetch(const struct zn_moe_source *src, const struct zn_kernel_table *k,
		  void *stream, const struct zn_moe_weights *W, int x, int E)
{
	struct zn_frozen *fz = src->ctx;
	struct zn_fslot *s = slot_of(fz, src->layer, W);

	if (fz->xerr)
		return;
	if (!s || E != fz->x_experts[src->layer] || x < 0 || x >= E) {
		zn_error("frozen expert %d of %d, layer %d: %s (internal)", x, E, src->layer,
			 s ? "not in the layout" : "not in a slot of the frozen ring");
		fz->xerr = -EINVAL;
		return;
	}
	if (s->xres[x])
		return;
	fz->xerr = fetch_one(fz, k, stream, src->layer, W, x);
	s->xres[x] = 1;
}

struct clear_args {
	uint8_t *xres;
	int n;
};

static void clear_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	const struct clear_args *a = ctx;

	(void)native;
	(void)k;
	memset(a->xres, 0, (size_t)a->n);
}

/* In stream order: on the host device the copy stream's worker runs it after the slot's
 * previous compute (its free event) and before its ready, so the compute's next fetch sees
 * it; under CUDA it runs at once, on the thread that also ran the slot's previous layer's
 * fetches (during that layer's launch, before this fetch was issued). */
int zn_frozen_experts_clear(struct zn_frozen *fz, struct zn_fslot *s)
{
	struct clear_args a = { s->xres, fz->c.plan->frozen_experts ? max_experts(fz) : 0 };

	if (!s->xres)
		return 0;
	return zn_launch(fz->c.copy_in, clear_fn, &a, sizeof(a));
}

void zn_frozen_expert_stats(const struct zn_frozen *fz, uint64_t fetches, uint64_t bytes,
			    struct zn_step_stats *st)
{
	st->expert_fetches = fetches;
	st->expert_bytes = bytes;
	st->plan_expert_bytes = fz->c.plan->frozen_step_expert_bytes;
	st->plan_expert_fetches = 0;
	for (int l = 0; l < fz->sh.n; l++)
		if (zn_frozen_streams(fz, l))
			st->plan_expert_fetches += zn_plan_layer_uses(fz->c.pin, l) *
						   (uint64_t)fz->x_experts[l];
}

const struct zn_moe_source *zn_frozen_experts_source(const struct zn_frozen *fz, int l)
{
	return fz->xsrc && zn_frozen_streams(fz, l) ? &fz->xsrc[l] : NULL;
}

int zn_frozen_experts_create(struct zn_frozen *fz)
{
	const struct zn_engine_plan *p = fz->c.plan;
	int rc = 0;

	if (!p->frozen_experts || !fz->x_numel)
		return 0;
	fz->xsrc = zn_size_calloc((uint64_t)fz->sh.n, sizeof(*fz->xsrc),
				  "the frozen experts' sources");
	if (!fz->xsrc)
		return -ENOMEM;
	for (int l = 0; l < fz->sh.n; l++)
		fz->xsrc[l] = (struct zn_moe_source){ fetch, fz, l };
	for (int i = 0; i < fz->slot_n - 1; i++) { /* the ring's, not layer 0's */
		fz->slot[i].xres = calloc((size_t)max_experts(fz), 1);
		if (!fz->slot[i].xres)
			return -ENOMEM;
	}
	if (p->frozen_elem_bytes == 2)
		rc = zn_tiers_dalloc(fz->c.dev, &fz->xstage_d,
				     zn_plan_device_alloc_bytes(p->frozen_expert_bytes));
	if (rc || p->frozen_home != ZN_TIER_NVME)
		return rc;
	rc = zn_tiers_halloc(fz->c.arena, &fz->xbuf, p->frozen_expert_bytes);
	if (!rc)
		fz->pinned_bytes += zn_plan_host_alloc_bytes(p->frozen_expert_bytes);
	if (!rc)
		rc = zn_aio_create(&fz->xaio, fz->c.aio);
	/* the store's file through this engine: the reads come from the layer's thread, in a
	 * queue of their own (not behind the layers' reads ahead) */
	if (!rc)
		rc = zn_swap_attach(&fz->xswap, fz->store, fz->xaio);
	return rc;
}

void zn_frozen_experts_destroy(struct zn_frozen *fz)
{
	zn_swap_destroy(fz->xswap); /* before the store (zn_frozen_io_close) */
	zn_aio_destroy(fz->xaio);
	zn_device_free(fz->c.dev, fz->xstage_d);
	free(fz->xsrc);
	fz->xaio = NULL;
	fz->xswap = NULL;
	fz->xstage_d = NULL;
	fz->xsrc = NULL;
}

int zn_frozen_expert_count(const struct zn_frozen *fz, int l)
{
	return fz->x_experts ? fz->x_experts[l] : 0;
}

int zn_frozen_expert_error(const struct zn_frozen *fz)
{
	return fz->xerr;
}

void zn_frozen_expert_figures(const struct zn_frozen *fz, uint64_t *count, uint64_t *bytes,
			      uint64_t *read_bytes)
{
	*count = fz->x_count;
	*bytes = fz->x_bytes;
	*read_bytes = fz->x_read_bytes;
}
