/* A 4-bit frozen base (frozen.h, docs/qlora.md): each layer's layout, and the working copy
 * made on the device from the extent that came up (the plain part copied or cast, each
 * quantized tensor dequantized as bitsandbytes does: code x absmax in fp32, rounded to the
 * quant dtype, then to the compute dtype). The homes, reads and copies up are
 * frozen_load.c's, frozen_seq.c's and frozen_io.c's, on the extents' bytes. */
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

static int no_frozen(const struct zn_frozen *fz)
{
	for (int l = 0; l < fz->sh.n; l++)
		if (fz->sh.numel[l])
			return 0;
	zn_error("--quantize-base nf4 (zinc.quantize_base) quantizes a frozen base, and this "
		 "run trains every weight: QLoRA is LoRA on a 4-bit base (add --lora-r R and "
		 "--lora-targets), full fine-tuning keeps the weights in %s",
		 zn_dtype_name(fz->sh.pdt));
	return -EINVAL;
}

static int layout(struct zn_frozen *fz, int l)
{
	const struct zn_model_ops *o = fz->sh.model->ops;
	const struct zn_layer_desc *d;

	if (fz->sh.q4) {
		fz->q4[l] = fz->sh.q4[l];
		if (fz->q4[l].numel != fz->sh.numel[l]) {
			zn_error("4-bit base: layer %d's layout has %llu floats, the model %llu", l,
				 (unsigned long long)fz->q4[l].numel,
				 (unsigned long long)fz->sh.numel[l]);
			return -EINVAL;
		}
		return 0;
	}
	/* the family's description of the frozen buffer (LoRA: the base layer), or, where
	 * the frozen buffer is the layer's own (zinc generate's streamed layers), the layer */
	d = o->frozen_desc ? o->frozen_desc(fz->sh.model->config, l) :
	    fz->sh.ld && fz->sh.ld[l].numel == fz->sh.numel[l] ? &fz->sh.ld[l] : NULL;
	if (!d) {
		zn_error("--quantize-base nf4: the %s model family does not describe its frozen "
			 "tensors (model.h frozen_desc)", o->family);
		return -EINVAL;
	}
	return zn_q4_layout(&fz->q4[l], d, fz->sh.numel[l], fz->sh.pdt,
			    fz->sh.double_quant, NULL);
}

int zn_frozen_q4_prepare(struct zn_frozen *fz)
{
	uint64_t most = 0;
	int rc;

	zn_frozen_q4_free(fz);
	if (!fz->sh.q4 && fz->sh.quantize_base == ZN_QUANTIZE_NONE)
		return 0;
	rc = no_frozen(fz);
	if (rc)
		return rc;
	fz->q4 = zn_size_calloc((uint64_t)fz->sh.n, sizeof(*fz->q4), "the 4-bit base's layouts");
	fz->q4_bytes = zn_size_calloc((uint64_t)fz->sh.n, sizeof(*fz->q4_bytes),
					    "the 4-bit base's extents");
	if (!fz->q4 || !fz->q4_bytes)
		return -ENOMEM;
	for (int l = 0; !rc && l < fz->sh.n; l++) {
		if (!fz->sh.numel[l]) {
			zn_q4_begin(&fz->q4[l], 0, (unsigned)zn_dtype_size(fz->sh.pdt));
			zn_q4_finish(&fz->q4[l]);
			continue;
		}
		rc = layout(fz, l);
		fz->q4_bytes[l] = fz->q4[l].bytes;
		if (fz->q4[l].nested && fz->q4[l].max_blocks > most)
			most = fz->q4[l].max_blocks;
	}
	fz->q4_scratch = most * sizeof(float);
	return rc;
}

bool zn_frozen_quantized(const struct zn_frozen *fz)
{
	return fz->q4 != NULL;
}

const struct zn_q4_layer *zn_frozen_layouts(const struct zn_frozen *fz)
{
	return fz->q4;
}

void zn_frozen_q4_free(struct zn_frozen *fz)
{
	free(fz->q4);
	free(fz->q4_bytes);
	fz->q4 = NULL;
	fz->q4_bytes = NULL;
}

struct dq {
	const struct zn_q4_layer *q;
	const uint8_t *x;   /* the extent on the device (without a streamed layer's stacks:
			     * every offset past them shift bytes lower) */
	uint64_t shift;
	float *out32;       /* fp32 working copy, or */
	uint16_t *out16;    /* bf16 working copy */
	float *absmax;      /* nested scratch (max_blocks floats) */
};

/* every quantized tensor of the layer, in order on the one stream (the nested scratch is
 * reused tensor after tensor) */
static void dq_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	const struct dq *a = ctx;

	for (int i = 0; i < a->q->count; i++) {
		const struct zn_q4_seg *s = &a->q->seg[i];
		const uint8_t *x = a->x;
		const float *absmax = (const float *)(x + (s->absmax_off - a->shift));

		if (s->nested) {
			const float *nest = (const float *)(x + (s->nest_off - a->shift));

			k->dequant_absmax8(native, a->absmax, x + (s->absmax_off - a->shift),
					   (const float *)(x + (a->q->map_off - a->shift)),
					   nest + 1, nest, s->blocks, ZN_Q4_NESTED_BLOCK);
			absmax = a->absmax;
		}
		k->dequant_4bit(native, a->out32 ? a->out32 + s->offset : NULL,
				a->out16 ? a->out16 + s->offset : NULL,
				x + (s->packed_off - a->shift),
				absmax, s->numel, s->blocksize, s->type, s->qdtype);
	}
}

/* plain floats [first, end) of the layer from the extent's plain element at */
static int plain(struct zn_frozen *fz, const struct zn_q4_layer *q, struct zn_fslot *s,
		 const uint8_t *x, uint64_t first, uint64_t end, uint64_t at)
{
	struct zn_stream *st = fz->c.copy_in;
	const void *src = x + at * q->elem_bytes;
	uint64_t n = end - first;

	if (!fz->c.plan->frozen_wide) /* bf16 compute: the stored bf16 values as they are */
		return zn_memcpy_async(st, s->w16_d + first, src, n * 2, ZN_COPY_D2D);
	if (q->elem_bytes == 4)
		return zn_memcpy_async(st, s->f32_d + first, src, n * 4, ZN_COPY_D2D);
	return zn_launch_widen(st, s->f32_d + first, src, n, fz->sh.pdt);
}

int zn_frozen_q4_expand(struct zn_frozen *fz, int l, struct zn_fslot *s, const void *src_d)
{
	const struct zn_q4_layer *q = &fz->q4[l];
	uint64_t first, end, at, lim, shift = zn_frozen_stack_shift(fz, l, &lim);
	struct dq a;
	int rc = 0;

	/* a streamed layer's stacks (the plain tail) did not come up: their routed experts
	 * come per expert (frozen_experts.c) */
	for (int i = 0; !rc && zn_q4_plain_run(q, i, &first, &end, &at); i++) {
		end = end < lim ? end : lim;
		if (end > first)
			rc = plain(fz, q, s, src_d, first, end, at);
	}
	if (rc || !q->count)
		return rc;
	a = (struct dq){ q, src_d, shift, fz->c.plan->frozen_wide ? s->f32_d : NULL,
			 fz->c.plan->frozen_wide ? NULL : s->w16_d, s->absmax_d };
	return zn_launch(fz->c.copy_in, dq_fn, &a, sizeof(a));
}
