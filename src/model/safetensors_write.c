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

/* Converts and writes one tensor; fp32 data already in memory is written as is. */
static int write_tensor(int fd, const char *path, enum zn_dtype dtype,
			const struct zn_st_entry *e)
{
	uint64_t n = entry_numel(e);
	float *vals = NULL;
	const float *src = e->data_h;
	void *out = NULL;
	int rc = -ENOMEM;

	if (!src) {
		vals = malloc(n * sizeof(float) + 1);
		if (!vals)
			goto free_bufs;
		rc = e->fill(e->ctx, vals);
		if (rc)
			goto free_bufs;
		src = vals;
	}
	if (dtype == ZN_DTYPE_F32) {
		rc = zn_write_all(fd, src, n * sizeof(float), path);
		goto free_bufs;
	}
	rc = -ENOMEM;
	out = malloc(n * 2 + 1);
	if (!out)
		goto free_bufs;
	if (dtype == ZN_DTYPE_BF16)
		zn_cast_f32_to_bf16(out, src, n);
	else
		zn_cast_f32_to_f16(out, src, n);
	rc = zn_write_all(fd, out, n * 2, path);
free_bufs:
	free(out);
	free(vals);
	return rc;
}

static int write_file(int fd, const char *path, enum zn_dtype dtype,
		      const struct zn_st_entry *entries, int count, const char *header,
		      uint64_t header_len)
{
	unsigned char len_le[8];
	int rc;

	for (int i = 0; i < 8; i++)
		len_le[i] = (unsigned char)(header_len >> (8 * i));
	rc = zn_write_all(fd, len_le, 8, path);
	if (!rc)
		rc = zn_write_all(fd, header, header_len, path);
	for (int i = 0; !rc && i < count; i++)
		rc = write_tensor(fd, path, dtype, &entries[i]);
	return rc;
}

int zn_st_write(const char *path, enum zn_dtype dtype, const struct zn_st_entry *entries,
		int count, const char *const *meta_keys, const char *const *meta_values,
		int meta_count)
{
	struct zn_atomic_file af;
	char *header;
	uint64_t header_len = 0;
	int rc;

	rc = check_entries(path, dtype, entries, count);
	if (rc)
		return rc;
	header = build_header(dtype, entries, count, meta_keys, meta_values, meta_count,
			      &header_len);
	if (!header) {
		zn_error("%s: out of memory building the header", path);
		return -ENOMEM;
	}
	/* a fresh temporary beside path, renamed over it once complete */
	rc = zn_atomic_file_begin(&af, path, "saving");
	if (rc)
		goto free_header;
	rc = write_file(af.fd, path, dtype, entries, count, header, header_len);
	if (rc)
		zn_atomic_file_abort(&af);
	else
		rc = zn_atomic_file_commit(&af);
free_header:
	free(header);
	return rc;
}
