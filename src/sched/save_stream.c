/* Streaming save: one layer at a time (save_stream.h). */
#include "sched/save_stream.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "sched/engine_impl.h"

struct zn_save_stream_ref {
	struct zn_save_stream *s;
	int layer;
	const struct zn_tensor_desc *d;
};

/* Weights that are not finite are never written: -ERANGE naming the tensor. */
static int check_finite(const struct zn_save_stream *s, int l)
{
	const struct zn_layer_desc *L = &s->ld[l];

	for (int t = 0; t < L->tensor_count; t++)
		for (uint64_t i = 0; i < L->tensors[t].numel; i++) {
			float x = s->buf[L->tensors[t].offset + i];

			if (isfinite(x))
				continue;
			zn_error("not saving %s: %s element %llu is %s (the run diverged)", s->path,
				 L->tensors[t].name, (unsigned long long)i,
				 isnan(x) ? "NaN" : "infinite");
			return -ERANGE;
		}
	return 0;
}

static int engine_read(void *ctx, int l, float *out_h)
{
	return zn_engine_read_layer(ctx, l, out_h);
}

static int stream_to(struct zn_save_stream *s, int l)
{
	int rc = 0;

	while (!rc && s->have < l) {
		rc = s->read_layer(s->ctx, ++s->have, s->buf);
		if (!rc)
			rc = check_finite(s, s->have);
	}
	return rc;
}

/* mem [rows, cols] = transpose of file [cols, rows] */
static void transpose(float *dst, const float *src, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			dst[r * cols + c] = src[c * rows + r];
}

static int fill_tensor(void *ctx, float *out)
{
	const struct zn_save_stream_ref *t = ctx;
	const float *src;
	int rc;

	if (t->layer < t->s->have)
		return -EINVAL; /* out of order: the writer's contract is in order */
	rc = stream_to(t->s, t->layer);
	if (rc)
		return rc;
	src = t->s->buf + t->d->offset;
	if (t->d->transpose)
		transpose(out, src, t->d->shape[1], t->d->shape[0]);
	else /* an embedding: its first file rows */
		memcpy(out, src, (size_t)(t->d->file_shape[0] *
					  (t->d->ndim == 2 ? t->d->file_shape[1] : 1)) *
		       sizeof(float));
	return 0;
}

int zn_save_stream_open(struct zn_save_stream *s, struct zn_engine *e,
			const struct zn_layer_desc *ld, int n, const char *path,
			zn_save_read_layer_fn read_layer, void *ctx)
{
	uint64_t max = 0;
	int k = 0;

	*s = (struct zn_save_stream){ .e = e, .ld = ld, .n = n, .have = -1, .path = path,
				      .read_layer = read_layer ? read_layer : engine_read,
				      .ctx = read_layer ? ctx : (void *)e };
	for (int l = 0; l < n; l++)
		max = ld[l].numel > max ? ld[l].numel : max;
	s->buf = malloc(max * sizeof(float) + 4); /* + 4: a frozen layer's 0 */
	s->entries = calloc((size_t)n * ZN_MODEL_MAX_TENSORS, sizeof(*s->entries));
	s->refs = calloc((size_t)n * ZN_MODEL_MAX_TENSORS, sizeof(*s->refs));
	if (!s->buf || !s->entries || !s->refs) {
		zn_save_stream_finish(s, -ENOMEM);
		return -ENOMEM;
	}
	for (int l = 0; l < n; l++)
		for (int i = 0; i < ld[l].tensor_count; i++, k++) {
			const struct zn_tensor_desc *d = &ld[l].tensors[i];

			s->entries[k] = (struct zn_st_entry){
				.name = d->name, .ndim = d->ndim,
				.shape = { d->file_shape[0], d->file_shape[1] },
				.fill = fill_tensor, .ctx = &s->refs[k] };
			s->refs[k] = (struct zn_save_stream_ref){ s, l, d };
		}
	s->count = k;
	return 0;
}

int zn_save_stream_finish(struct zn_save_stream *s, int rc)
{
	/* every rank reads every layer, whatever rank 0's writing did */
	int rc2 = s->buf ? stream_to(s, s->n - 1) : 0;

	free(s->buf);
	free(s->entries);
	free(s->refs);
	s->buf = NULL;
	s->entries = NULL;
	s->refs = NULL;
	return rc ? rc : rc2;
}

int zn_engine_save_safetensors(struct zn_engine *e, const char *path, enum zn_dtype dtype,
			       const char *const *meta_keys, const char *const *meta_values,
			       int meta_count)
{
	struct zn_save_stream s;
	int rc = zn_save_stream_open(&s, e, e->ld, e->n, path, NULL, NULL);

	if (rc)
		return rc;
	if (e->rt.rank == 0)
		rc = zn_st_write(path, dtype, s.entries, s.count, meta_keys, meta_values,
				 meta_count);
	return zn_save_stream_finish(&s, rc);
}
