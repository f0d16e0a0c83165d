/* safetensors writer: header (space-padded to 8 bytes), then each tensor converted from
 * fp32, written through core/fsio's atomic file (an exclusive temporary beside PATH,
 * fsynced and renamed over it, then the folder fsynced), so a crash leaves either the old
 * file or the whole new one, and a symlink or other non-regular file at PATH is refused. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/dtype.h"
#include "core/fsio.h"
#include "core/log.h"
#include "model/safetensors.h"

static const char *st_dtype_name(enum zn_dtype d)
{
	switch (d) {
	case ZN_DTYPE_F32:
		return "F32";
	case ZN_DTYPE_BF16:
		return "BF16";
	case ZN_DTYPE_F16:
		return "F16";
	}
	return NULL;
}

static uint64_t entry_numel(const struct zn_st_entry *e)
{
	uint64_t n = 1;

	for (int d = 0; d < e->ndim; d++)
		n *= (uint64_t)e->shape[d];
	return n;
}

static int add_entry_json(cJSON *root, const struct zn_st_entry *e, const char *dtype,
			  uint64_t begin, uint64_t end)
{
	cJSON *t = cJSON_AddObjectToObject(root, e->name);
	cJSON *shape = t ? cJSON_AddArrayToObject(t, "shape") : NULL;
	cJSON *offs = t ? cJSON_AddArrayToObject(t, "data_offsets") : NULL;

	if (!shape || !offs || !cJSON_AddStringToObject(t, "dtype", dtype))
		return -ENOMEM;
	for (int d = 0; d < e->ndim; d++)
		if (!cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)e->shape[d])))
			return -ENOMEM;
	if (!cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)begin)) ||
	    !cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)end)))
		return -ENOMEM;
	return 0;
}

/* The header JSON, space-padded so 8 + its length is a multiple of 8. *len_out excludes
 * the terminating NUL. */
static char *build_header(enum zn_dtype dtype, const struct zn_st_entry *entries, int count,
			  const char *const *keys, const char *const *values, int meta_count,
			  uint64_t *len_out)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *meta;
	char *json = NULL, *padded = NULL;
	uint64_t at = 0, n, len;

	if (!root)
		return NULL;
	if (meta_count > 0) {
		meta = cJSON_AddObjectToObject(root, "__metadata__");
		for (int i = 0; meta && i < meta_count; i++)
			if (!cJSON_AddStringToObject(meta, keys[i], values[i]))
				meta = NULL;
		if (!meta)
			goto delete_root;
	}
	for (int i = 0; i < count; i++) {
		n = entry_numel(&entries[i]) * zn_dtype_size(dtype);
		if (add_entry_json(root, &entries[i], st_dtype_name(dtype), at, at + n))
			goto delete_root;
		at += n;
	}
	json = cJSON_PrintUnformatted(root);
	if (!json)
		goto delete_root;
	len = strlen(json);
	n = (len + 7) / 8 * 8;
	padded = malloc(n + 1);
	if (padded) {
		memcpy(padded, json, len);
		memset(padded + len, ' ', n - len);
		padded[n] = 0;
		*len_out = n;
	}
	free(json);
delete_root:
	cJSON_Delete(root);
	return padded;
}

static int check_entries(const char *path, enum zn_dtype dtype, const struct zn_st_entry *e,
			 int count)
{
	if (!st_dtype_name(dtype)) {
		zn_error("%s: cannot write dtype %d: use fp32, bf16 or fp16", path, (int)dtype);
		return -EINVAL;
	}
	for (int i = 0; i < count; i++) {
		if (!e[i].name || !strcmp(e[i].name, "__metadata__") || e[i].ndim < 0 ||
		    e[i].ndim > ZN_ST_MAX_DIMS || (!e[i].data_h && !e[i].fill)) {
			zn_error("%s: entry %d ('%s') has no name, a bad ndim or no data", path, i,
				 e[i].name ? e[i].name : "");
			return -EINVAL;
		}
		for (int d = 0; d < e[i].ndim; d++) {
			if (e[i].shape[d] < 0) {
				zn_error("%s: tensor '%s' has a negative size", path, e[i].name);
				return -EINVAL;
			}
		}
	}
	return 0;
}

struct zn_st_writer {
	struct zn_atomic_file af;
	char *path;
	enum zn_dtype dtype;
	const struct zn_st_entry *entries; /* borrowed until commit */
	int count, next;
};

int zn_st_writer_begin(struct zn_st_writer **out, const char *path, enum zn_dtype dtype,
		       const struct zn_st_entry *entries, int count,
		       const char *const *meta_keys, const char *const *meta_values,
		       int meta_count)
{
	struct zn_st_writer *w;
	unsigned char len_le[8];
	char *header;
	uint64_t header_len = 0;
	int rc;

	*out = NULL;
	rc = check_entries(path, dtype, entries, count);
	if (rc)
		return rc;
	header = build_header(dtype, entries, count, meta_keys, meta_values, meta_count,
			      &header_len);
	w = calloc(1, sizeof(*w));
	if (w)
		w->path = strdup(path);
	if (!header || !w || !w->path) {
		zn_error("%s: out of memory building the header", path);
		rc = -ENOMEM;
		goto fail;
	}
	w->dtype = dtype;
	w->entries = entries;
	w->count = count;
	/* a fresh temporary beside path, renamed over it once complete */
	rc = zn_atomic_file_begin(&w->af, path, "saving");
	if (rc)
		goto fail;
	for (int i = 0; i < 8; i++)
		len_le[i] = (unsigned char)(header_len >> (8 * i));
	rc = zn_write_all(w->af.fd, len_le, 8, path);
	if (!rc)
		rc = zn_write_all(w->af.fd, header, header_len, path);
	if (rc) {
		zn_atomic_file_abort(&w->af);
		goto fail;
	}
	free(header);
	*out = w;
	return 0;
fail:
	free(header);
	if (w)
		free(w->path);
	free(w);
	return rc;
}

int zn_st_writer_put(struct zn_st_writer *w, const float *vals)
{
	uint64_t n;
	void *out;
	int rc;

	if (w->next >= w->count) {
		zn_error("%s: more tensors given than its header lists", w->path);
		return -EINVAL;
	}
	n = entry_numel(&w->entries[w->next++]);
	if (w->dtype == ZN_DTYPE_F32)
		return zn_write_all(w->af.fd, vals, n * sizeof(float), w->path);
	out = malloc(n * 2 + 1);
	if (!out)
		return -ENOMEM;
	if (w->dtype == ZN_DTYPE_BF16)
		zn_cast_f32_to_bf16(out, vals, n);
	else
		zn_cast_f32_to_f16(out, vals, n);
	rc = zn_write_all(w->af.fd, out, n * 2, w->path);
	free(out);
	return rc;
}

/* The next entry's values: data_h, or fill into a buffer of its size. */
int zn_st_writer_put_entry(struct zn_st_writer *w, const struct zn_st_entry *e)
{
	float *vals;
	int rc;

	if (e->data_h)
		return zn_st_writer_put(w, e->data_h);
	vals = malloc(entry_numel(e) * sizeof(float) + 1);
	if (!vals)
		return -ENOMEM;
	rc = e->fill(e->ctx, vals);
	if (!rc)
		rc = zn_st_writer_put(w, vals);
	free(vals);
	return rc;
}

int zn_st_writer_commit(struct zn_st_writer *w)
{
	int rc;

	if (w->next != w->count) {
		zn_error("%s: %d of its %d tensors given", w->path, w->next, w->count);
		zn_st_writer_abort(w);
		return -EINVAL;
	}
	rc = zn_atomic_file_commit(&w->af);
	free(w->path);
	free(w);
	return rc;
}

void zn_st_writer_abort(struct zn_st_writer *w)
{
	if (!w)
		return;
	zn_atomic_file_abort(&w->af);
	free(w->path);
	free(w);
}

int zn_st_write(const char *path, enum zn_dtype dtype, const struct zn_st_entry *entries,
		int count, const char *const *meta_keys, const char *const *meta_values,
		int meta_count)
{
	struct zn_st_writer *w;
	int rc = zn_st_writer_begin(&w, path, dtype, entries, count, meta_keys, meta_values,
				    meta_count);

	for (int i = 0; !rc && i < count; i++)
		rc = zn_st_writer_put_entry(w, &entries[i]);
	if (rc) {
		zn_st_writer_abort(w);
		return rc;
	}
	return zn_st_writer_commit(w);
}
