/* A 4-bit frozen base (frozen.h, docs/qlora.md): each layer's layout, and the working copy
 * made on the device from the extent that came up (the plain part copied or cast, each
 * quantized tensor dequantized as bitsandbytes does: code x absmax in fp32, rounded to the
 * quant dtype, then to the compute dtype). The homes, reads and copies up are frozen.c's
 * and frozen_io.c's, on the extents' bytes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/size.h"
#include "model/quant/q4.h"
#include "sched/engine_impl.h"

static int no_frozen(const struct zn_engine *e)
{
	for (int l = 0; l < e->n; l++)
		if (e->frozen_numel[l])
			return 0;
	zn_error("--quantize-base nf4 (zinc.quantize_base) quantizes a frozen base, and this "
		 "run trains every weight: QLoRA is LoRA on a 4-bit base (add --lora-r R and "
		 "--lora-targets), full fine-tuning keeps the weights in %s",
		 zn_dtype_name(e->pdt));
	return -EINVAL;
}

static int layout(struct zn_engine *e, int l)
{
	const struct zn_model_ops *o = e->model.ops;
	const struct zn_layer_desc *d;

	if (e->opt_q4) {
		e->fq4[l] = e->opt_q4[l];
		if (e->fq4[l].numel != e->frozen_numel[l]) {
			zn_error("4-bit base: layer %d's layout has %llu floats, the model %llu", l,
				 (unsigned long long)e->fq4[l].numel,
				 (unsigned long long)e->frozen_numel[l]);
			return -EINVAL;
		}
		return 0;
	}
	/* the family's description of the frozen buffer (LoRA: the base layer), or, where
	 * the frozen buffer is the layer's own (zinc generate's streamed layers), the layer */
	d = o->frozen_desc ? o->frozen_desc(e->model.config, l) :
	    e->ld && e->ld[l].numel == e->frozen_numel[l] ? &e->ld[l] : NULL;
	if (!d) {
		zn_error("--quantize-base nf4: the %s model family does not describe its frozen "
			 "tensors (model.h frozen_desc)", o->family);
		return -EINVAL;
	}
	return zn_q4_layout(&e->fq4[l], d, e->frozen_numel[l], e->pdt,
			    e->cfg.runtime.double_quant, NULL);
}

int zn_frozen_q4_prepare(struct zn_engine *e)
{
	uint64_t most = 0;
	int rc;

	zn_frozen_q4_free(e);
	if (!e->opt_q4 && e->cfg.runtime.quantize_base == ZN_QUANTIZE_NONE)
		return 0;
	rc = no_frozen(e);
	if (rc)
		return rc;
	e->fq4 = zn_size_calloc((uint64_t)e->n, sizeof(*e->fq4), "the 4-bit base's layouts");
	e->frozen_q4_bytes = zn_size_calloc((uint64_t)e->n, sizeof(*e->frozen_q4_bytes),
					    "the 4-bit base's extents");
	if (!e->fq4 || !e->frozen_q4_bytes)
		return -ENOMEM;
	for (int l = 0; !rc && l < e->n; l++) {
		if (!e->frozen_numel[l]) {
			zn_q4_begin(&e->fq4[l], 0, (unsigned)zn_dtype_size(e->pdt));
			zn_q4_finish(&e->fq4[l]);
			continue;
		}
		rc = layout(e, l);
		e->frozen_q4_bytes[l] = e->fq4[l].bytes;
		if (e->fq4[l].nested && e->fq4[l].max_blocks > most)
			most = e->fq4[l].max_blocks;
	}
	e->frozen_q4_scratch = most * sizeof(float);
	return rc;
}

void zn_frozen_q4_free(struct zn_engine *e)
{
	free(e->fq4);
	free(e->frozen_q4_bytes);
	e->fq4 = NULL;
	e->frozen_q4_bytes = NULL;
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

struct widen {
	float *out;
	const uint16_t *in;
	uint64_t n;
	bool f16;
};

static void widen_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	const struct widen *a = ctx;

	if (a->f16)
		k->cast_f16_to_f32(native, a->out, a->in, (size_t)a->n);
	else
		k->cast_bf16_to_f32(native, a->out, a->in, (size_t)a->n);
}

/* plain floats [first, end) of the layer from the extent's plain element at */
static int plain(struct zn_engine *e, const struct zn_q4_layer *q, struct zn_fslot *s,
		 const uint8_t *x, uint64_t first, uint64_t end, uint64_t at)
{
	struct zn_stream *st = e->rt.copy_in;
	const void *src = x + at * q->elem_bytes;
	uint64_t n = end - first;
	struct widen w;

	if (!e->plan.frozen_wide) /* bf16 compute: the stored bf16 values as they are */
		return zn_memcpy_async(st, s->w16_d + first, src, n * 2, ZN_COPY_D2D);
	if (q->elem_bytes == 4)
		return zn_memcpy_async(st, s->f32_d + first, src, n * 4, ZN_COPY_D2D);
	w = (struct widen){ s->f32_d + first, src, n, e->pdt == ZN_DTYPE_F16 };
	return zn_launch(st, widen_fn, &w, sizeof(w));
}

int zn_frozen_q4_expand(struct zn_engine *e, int l, struct zn_fslot *s, const void *src_d)
{
	const struct zn_q4_layer *q = &e->fq4[l];
	uint64_t first, end, at, lim, shift = zn_frozen_stack_shift(e, l, &lim);
	struct dq a;
	int rc = 0;

	/* a streamed layer's stacks (the plain tail) did not come up: their routed experts
	 * come per expert (frozen_experts.c) */
	for (int i = 0; !rc && zn_q4_plain_run(q, i, &first, &end, &at); i++) {
		end = end < lim ? end : lim;
		if (end > first)
			rc = plain(e, q, s, src_d, first, end, at);
	}
	if (rc || !q->count)
		return rc;
	a = (struct dq){ q, src_d, shift, e->plan.frozen_wide ? s->f32_d : NULL,
			 e->plan.frozen_wide ? NULL : s->w16_d, s->absmax_d };
	return zn_launch(e->rt.copy_in, dq_fn, &a, sizeof(a));
}
