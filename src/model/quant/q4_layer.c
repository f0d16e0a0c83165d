/* A layer's 4-bit layout, its packing and unpacking on the host (q4.h). */
#include "model/quant/q4.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/log.h"

#define ALIGN 16

static uint64_t up(uint64_t x)
{
	return (x + ALIGN - 1) / ALIGN * ALIGN;
}

/* module name m (without ".weight") against one skip entry s of length n */
static bool skip_match(const char *m, const char *s, size_t n)
{
	size_t ml = strlen(m);
	const char *last = strrchr(m, '.');

	last = last ? last + 1 : m;
	if (strlen(last) == n && !strncmp(last, s, n))
		return true;
	if (ml == n && !strncmp(m, s, n))
		return true;
	/* transformers: key + "." in the module path */
	for (const char *p = m; *p; p++)
		if (!strncmp(p, s, n) && p[n] == '.' && (p == m || p[-1] == '.'))
			return true;
	return false;
}

bool zn_q4_is_linear(const struct zn_tensor_desc *d, const char *skip)
{
	static const char *const not_linear[] = { "embed_tokens", "wte", "wpe", "lm_head",
						  "embed_in", "embed_out" };
	char m[ZN_MODEL_NAME_MAX];
	size_t n = strlen(d->name);
	const char *last;

	if (d->ndim != 2 || n <= 7 || strcmp(d->name + n - 7, ".weight"))
		return false;
	memcpy(m, d->name, n - 7);
	m[n - 7] = '\0';
	last = strrchr(m, '.');
	last = last ? last + 1 : m;
	for (size_t i = 0; i < sizeof(not_linear) / sizeof(not_linear[0]); i++)
		if (!strcmp(last, not_linear[i]))
			return false;
	while (skip && *skip) {
		const char *end = strchr(skip, ',');
		size_t k = end ? (size_t)(end - skip) : strlen(skip);

		if (k && skip_match(m, skip, k))
			return false;
		skip = end ? end + 1 : NULL;
	}
	return true;
}

void zn_q4_begin(struct zn_q4_layer *q, uint64_t numel, unsigned elem_bytes)
{
	memset(q, 0, sizeof(*q));
	q->numel = numel;
	q->plain_numel = numel;
	q->elem_bytes = elem_bytes;
}

int zn_q4_add(struct zn_q4_layer *q, int t, const char *name, uint64_t offset, uint64_t numel,
	      enum zn_q4_type type, int blocksize, bool nested, enum zn_dtype qdtype)
{
	struct zn_q4_seg *s = &q->seg[q->count];
	uint64_t prev_end = q->count ? q->seg[q->count - 1].offset + q->seg[q->count - 1].numel : 0;

	if (blocksize < 2 || numel % (uint64_t)blocksize) {
		zn_error("4-bit base: %s has %llu elements, not a multiple of the quantization "
			 "block (%d): zinc quantizes whole blocks only; keep it unquantized "
			 "(llm_int8_skip_modules)", name, (unsigned long long)numel, blocksize);
		return -EINVAL;
	}
	if (q->count >= ZN_Q4_MAX_SEGS) {
		zn_error("4-bit base: %s: a layer quantizes at most %d tensors (model/quant/q4.h "
			 "ZN_Q4_MAX_SEGS)", name, ZN_Q4_MAX_SEGS);
		return -EINVAL;
	}
	if (offset < prev_end || offset + numel > q->numel) {
		zn_error("4-bit base: %s lies outside its layer or overlaps another tensor", name);
		return -EINVAL;
	}
	*s = (struct zn_q4_seg){ .tensor = t, .offset = offset, .numel = numel,
				 .blocks = numel / (uint64_t)blocksize, .blocksize = blocksize,
				 .type = type, .qdtype = qdtype, .nested = nested };
	q->plain_numel -= numel;
	q->nested |= nested;
	if (s->blocks > q->max_blocks)
		q->max_blocks = s->blocks;
	q->count++;
	return 0;
}

void zn_q4_finish(struct zn_q4_layer *q)
{
	uint64_t at = up(q->plain_numel * q->elem_bytes);

	for (int i = 0; i < q->count; i++) {
		struct zn_q4_seg *s = &q->seg[i];

		s->packed_off = at;
		at = up(at + s->numel / 2);
		s->absmax_off = at;
		at = up(at + s->blocks * (s->nested ? 1 : 4));
		if (s->nested) {
			s->nest_off = at;
			at = up(at + 4 * (1 + (s->blocks + ZN_Q4_NESTED_BLOCK - 1) /
						   ZN_Q4_NESTED_BLOCK));
		}
	}
	if (q->nested) {
		q->map_off = at;
		at += 256 * 4;
	}
	q->bytes = at;
}

int zn_q4_layout(struct zn_q4_layer *q, const struct zn_layer_desc *desc, uint64_t numel,
		 enum zn_dtype stored, bool nested, const char *skip)
{
	int rc = 0;

	zn_q4_begin(q, numel, (unsigned)zn_dtype_size(stored));
	for (int t = 0; !rc && t < desc->tensor_count; t++) {
		const struct zn_tensor_desc *d = &desc->tensors[t];

		if (zn_q4_is_linear(d, skip))
			rc = zn_q4_add(q, t, d->name, d->offset, d->numel, ZN_Q4_NF4, ZN_Q4_BLOCK,
				       nested, stored);
	}
	zn_q4_finish(q);
	return rc;
}

bool zn_q4_plain_run(const struct zn_q4_layer *q, int i, uint64_t *first, uint64_t *end,
		     uint64_t *plain_at)
{
	uint64_t at = 0, prev = 0;

	if (i < 0 || i > q->count)
		return false;
	for (int j = 0; j < i; j++) {
		at += q->seg[j].offset - prev;
		prev = q->seg[j].offset + q->seg[j].numel;
	}
	*first = prev;
	*end = i < q->count ? q->seg[i].offset : q->numel;
	*plain_at = at;
	return true;
}

int zn_q4_find(const struct zn_q4_layer *q, int t)
{
	for (int i = 0; i < q->count; i++)
		if (q->seg[i].tensor == t)
			return i;
	return -1;
}

uint64_t zn_q4_plain_index(const struct zn_q4_layer *q, uint64_t offset)
{
	uint64_t at = offset;

	for (int i = 0; i < q->count && q->seg[i].offset < offset; i++)
		at -= q->seg[i].numel;
	return at;
}

static void put_plain(void *dst, const float *src, uint64_t n, enum zn_dtype stored)
{
	if (stored == ZN_DTYPE_BF16)
		zn_cast_f32_to_bf16(dst, src, n);
	else if (stored == ZN_DTYPE_F16)
		zn_cast_f32_to_f16(dst, src, n);
	else
		memcpy(dst, src, n * 4);
}

static void get_plain(float *dst, const void *src, uint64_t n, enum zn_dtype stored)
{
	if (stored == ZN_DTYPE_BF16)
		zn_cast_bf16_to_f32(dst, src, n);
	else if (stored == ZN_DTYPE_F16)
		zn_cast_f16_to_f32(dst, src, n);
	else
		memcpy(dst, src, n * 4);
}

int zn_q4_pack(const struct zn_q4_layer *q, void *extent, const float *f32,
	       enum zn_dtype stored)
{
	uint8_t *x = extent;
	uint64_t first, end, at;
	float map[256], *absmax = NULL;

	memset(x, 0, q->bytes);
	if (q->nested) {
		absmax = malloc(q->max_blocks * sizeof(*absmax));
		if (!absmax)
			return -ENOMEM;
		zn_q4_dynamic_map(map);
		memcpy(x + q->map_off, map, sizeof(map));
	}
	for (int i = 0; zn_q4_plain_run(q, i, &first, &end, &at); i++)
		put_plain(x + at * q->elem_bytes, f32 + first, end - first, stored);
	for (int i = 0; i < q->count; i++) {
		const struct zn_q4_seg *s = &q->seg[i];
		float *nest = (float *)(x + s->nest_off);

		if (!s->nested) {
			zn_nf4_quantize(x + s->packed_off, (float *)(x + s->absmax_off),
					f32 + s->offset, s->numel, s->blocksize);
			continue;
		}
		zn_nf4_quantize(x + s->packed_off, absmax, f32 + s->offset, s->numel,
				s->blocksize);
		zn_q4_nest(x + s->absmax_off, nest + 1, nest, absmax, s->blocks, map);
	}
	free(absmax);
	return 0;
}

int zn_q4_unpack(const struct zn_q4_layer *q, float *f32, const void *extent,
		 enum zn_dtype stored)
{
	const uint8_t *x = extent;
	uint64_t first, end, at;
	float *absmax = NULL;

	if (q->nested) {
		absmax = malloc(q->max_blocks * sizeof(*absmax));
		if (!absmax)
			return -ENOMEM;
	}
	for (int i = 0; zn_q4_plain_run(q, i, &first, &end, &at); i++)
		get_plain(f32 + first, x + at * q->elem_bytes, end - first, stored);
	for (int i = 0; i < q->count; i++) {
		const struct zn_q4_seg *s = &q->seg[i];
		const float *a = (const float *)(x + s->absmax_off);

		if (s->nested) {
			const float *nest = (const float *)(x + s->nest_off);

			zn_q4_unnest(absmax, x + s->absmax_off, nest + 1, nest[0], s->blocks,
				     (const float *)(x + q->map_off));
			a = absmax;
		}
		zn_q4_dequantize(f32 + s->offset, x + s->packed_off, a, s->numel, s->blocksize,
				 s->type, s->qdtype);
	}
	free(absmax);
	return 0;
}
