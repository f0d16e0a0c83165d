/* safetensors reader: validates the whole header against the file before any tensor is
 * read; reads tensors with pread and converts BF16/F16 to fp32. The writer is in
 * safetensors_write.c. Little-endian hosts only (x86-64, aarch64), as the format's data. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/dtype.h"
#include "core/fsio.h"
#include "core/json.h"
#include "core/log.h"
#include "model/safetensors.h"

struct zn_st_file {
	char *path;
	int fd;
	uint64_t header_bytes; /* N */
	uint64_t data_bytes;   /* file size - 8 - N */
	int count;
	struct zn_st_tensor *tensors; /* file (JSON) order */
	int *by_name;                 /* indices sorted by name, for zn_st_find */
	cJSON *metadata;              /* detached "__metadata__", or NULL */
};

struct dtype_info {
	const char *name;
	int bytes;
	int dtype;
};

static const struct dtype_info dtypes[] = {
	{ "F32", 4, ZN_DTYPE_F32 }, { "BF16", 2, ZN_DTYPE_BF16 }, { "F16", 2, ZN_DTYPE_F16 },
	{ "F64", 8, -1 },	    { "I64", 8, -1 },		  { "U64", 8, -1 },
	{ "I32", 4, -1 },	    { "U32", 4, -1 },		  { "I16", 2, -1 },
	{ "U16", 2, -1 },	    { "I8", 1, -1 },		  { "U8", 1, -1 },
	{ "BOOL", 1, -1 },	    { "F8_E4M3", 1, -1 },	  { "F8_E5M2", 1, -1 },
};

#define DTYPE_COUNT ((int)(sizeof(dtypes) / sizeof(dtypes[0])))

void zn_st_close(struct zn_st_file *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	cJSON_Delete(f->metadata);
	free(f->tensors);
	free(f->by_name);
	free(f->path);
	free(f);
}

const char *zn_st_path(const struct zn_st_file *f)
{
	return f->path;
}

int zn_st_tensor_count(const struct zn_st_file *f)
{
	return f->count;
}

const struct zn_st_tensor *zn_st_tensor_at(const struct zn_st_file *f, int i)
{
	return i >= 0 && i < f->count ? &f->tensors[i] : NULL;
}

const char *zn_st_metadata(const struct zn_st_file *f, const char *key)
{
	const cJSON *v = f->metadata ? cJSON_GetObjectItemCaseSensitive(f->metadata, key) : NULL;

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int zn_st_metadata_int(const struct zn_st_file *f, const char *key, int64_t lo, int64_t hi,
		       int64_t *out)
{
	const char *s = zn_st_metadata(f, key);
	char *end;
	long long v;

	if (!s)
		return -ENOENT;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || isspace((unsigned char)*s) || *s == '+' || v < lo || v > hi) {
		zn_error("%s: metadata %s '%s' is not an integer in [%lld, %lld]: fix the file or "
			 "drop the key", f->path, key, s, (long long)lo, (long long)hi);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* A JSON number written as an integer (the Rust reader refuses 16.0 for a usize), 0 to
 * 2^63 - 1. */
static int json_u64(const cJSON *v, uint64_t *out)
{
	int64_t x;

	if (zn_json_int(v, 0, INT64_MAX, &x))
		return -EINVAL;
	*out = (uint64_t)x;
	return 0;
}

static int parse_dtype(const char *path, struct zn_st_tensor *t, const cJSON *v)
{
	if (!cJSON_IsString(v)) {
		zn_error("%s: tensor '%s' has no \"dtype\" string", path, t->name);
		return -EINVAL;
	}
	for (int i = 0; i < DTYPE_COUNT; i++) {
		if (!strcmp(v->valuestring, dtypes[i].name)) {
			snprintf(t->dtype_name, sizeof(t->dtype_name), "%s", dtypes[i].name);
			t->elem_bytes = dtypes[i].bytes;
			t->dtype = dtypes[i].dtype;
			return 0;
		}
	}
	zn_error("%s: tensor '%s' has unknown dtype \"%s\"", path, t->name, v->valuestring);
	return -EINVAL;
}

static int parse_shape(const char *path, struct zn_st_tensor *t, const cJSON *v)
{
	const cJSON *d;
	uint64_t n = 1, x;

	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > ZN_ST_MAX_DIMS) {
		zn_error("%s: tensor '%s': \"shape\" must be an array of at most %d sizes", path,
			 t->name, ZN_ST_MAX_DIMS);
		return -EINVAL;
	}
	t->ndim = 0;
	cJSON_ArrayForEach(d, v) {
		if (json_u64(d, &x) || (x && n > UINT64_MAX / x)) {
			zn_error("%s: tensor '%s': shape entry %d is not a valid size", path,
				 t->name, t->ndim);
			return -EINVAL;
		}
		t->shape[t->ndim++] = (int64_t)x;
		n *= x;
	}
	t->numel = n;
	return 0;
}

static int parse_offsets(const struct zn_st_file *f, struct zn_st_tensor *t, const cJSON *v)
{
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 ||
	    json_u64(cJSON_GetArrayItem(v, 0), &t->begin) ||
	    json_u64(cJSON_GetArrayItem(v, 1), &t->end) || t->end < t->begin) {
		zn_error("%s: tensor '%s': \"data_offsets\" must be [begin, end] with 0 <= "
			 "begin <= end", f->path, t->name);
		return -EINVAL;
	}
	if (t->numel > UINT64_MAX / (uint64_t)t->elem_bytes ||
	    t->numel * (uint64_t)t->elem_bytes != t->end - t->begin) {
		zn_error("%s: tensor '%s': shape and dtype %s give %llu elements (%llu bytes) "
			 "but data_offsets [%llu, %llu] span %llu bytes", f->path, t->name,
			 t->dtype_name, (unsigned long long)t->numel,
			 (unsigned long long)(t->numel * (uint64_t)t->elem_bytes),
			 (unsigned long long)t->begin, (unsigned long long)t->end,
			 (unsigned long long)(t->end - t->begin));
		return -EINVAL;
	}
	if (t->end > f->data_bytes) {
		zn_error("%s: tensor '%s' ends at data byte %llu but the file holds only %llu "
			 "data bytes: the file is truncated or its offsets are out of range",
			 f->path, t->name, (unsigned long long)t->end,
			 (unsigned long long)f->data_bytes);
		return -EINVAL;
	}
	return 0;
}

static int parse_tensor(struct zn_st_file *f, struct zn_st_tensor *t, const cJSON *item)
{
	int rc;

	if (strlen(item->string) >= sizeof(t->name)) {
		zn_error("%s: tensor name '%.40s...' is longer than %d bytes", f->path,
			 item->string, ZN_ST_NAME_MAX - 1);
		return -EINVAL;
	}
	snprintf(t->name, sizeof(t->name), "%s", item->string);
	if (!cJSON_IsObject(item)) {
		zn_error("%s: entry '%s' is not an object", f->path, t->name);
		return -EINVAL;
	}
	rc = parse_dtype(f->path, t, cJSON_GetObjectItemCaseSensitive(item, "dtype"));
	if (!rc)
		rc = parse_shape(f->path, t, cJSON_GetObjectItemCaseSensitive(item, "shape"));
	if (!rc)
		rc = parse_offsets(f, t, cJSON_GetObjectItemCaseSensitive(item, "data_offsets"));
	return rc;
}

static int cmp_begin(const void *a, const void *b, void *ctx)
{
	const struct zn_st_file *f = ctx;
	const struct zn_st_tensor *x = &f->tensors[*(const int *)a];
	const struct zn_st_tensor *y = &f->tensors[*(const int *)b];

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_name(const void *a, const void *b, void *ctx)
{
	const struct zn_st_file *f = ctx;

	return strcmp(f->tensors[*(const int *)a].name, f->tensors[*(const int *)b].name);
}

/* The tensors must tile the data section: sorted by begin, each starts where the last
 * ended, and the last ends at the end of the data. */
static int check_tiling(struct zn_st_file *f, int *order)
{
	uint64_t at = 0;

	for (int i = 0; i < f->count; i++)
		order[i] = i;
	qsort_r(order, (size_t)f->count, sizeof(*order), cmp_begin, f);
	for (int i = 0; i < f->count; i++) {
		const struct zn_st_tensor *t = &f->tensors[order[i]];

		if (t->begin < at) {
			zn_error("%s: tensor '%s' [%llu, %llu) overlaps tensor '%s' ending at %llu",
				 f->path, t->name, (unsigned long long)t->begin,
				 (unsigned long long)t->end, f->tensors[order[i - 1]].name,
				 (unsigned long long)at);
			return -EINVAL;
		}
		if (t->begin > at) {
			zn_error("%s: data bytes [%llu, %llu) before tensor '%s' belong to no "
				 "tensor", f->path, (unsigned long long)at,
				 (unsigned long long)t->begin, t->name);
			return -EINVAL;
		}
		at = t->end;
	}
	if (at != f->data_bytes) {
		zn_error("%s: %llu bytes after the last tensor belong to no tensor", f->path,
			 (unsigned long long)(f->data_bytes - at));
		return -EINVAL;
	}
	return 0;
}

static int check_names(struct zn_st_file *f)
{
	for (int i = 0; i < f->count; i++)
		f->by_name[i] = i;
	qsort_r(f->by_name, (size_t)f->count, sizeof(*f->by_name), cmp_name, f);
	for (int i = 1; i < f->count; i++) {
		if (!strcmp(f->tensors[f->by_name[i]].name, f->tensors[f->by_name[i - 1]].name)) {
			zn_error("%s: tensor '%s' appears twice", f->path,
				 f->tensors[f->by_name[i]].name);
			return -EINVAL;
		}
	}
	return 0;
}

static int parse_metadata(struct zn_st_file *f, cJSON *root, cJSON *item)
{
	const cJSON *v;

	if (!cJSON_IsObject(item)) {
		zn_error("%s: \"__metadata__\" must be an object of strings", f->path);
		return -EINVAL;
	}
	cJSON_ArrayForEach(v, item) {
		if (!cJSON_IsString(v)) {
			zn_error("%s: \"__metadata__\" value '%s' is not a string", f->path,
				 v->string);
			return -EINVAL;
		}
	}
	f->metadata = cJSON_DetachItemViaPointer(root, item);
	return 0;
}

/* Repeated keys as the Rust reader (serde) takes them: the last of two tensors with one
 * name (a HashMap) and of two __metadata__ entries; a second __metadata__ or a tensor's
 * dtype, shape or data_offsets given twice is an error there ("duplicate field"). */
static const char *header_dup(void *arg, int depth, const char *parent, const char *key)
{
	(void)arg;
	if (depth == 1 && !strcmp(key, "__metadata__"))
		return "safetensors allows one \"__metadata__\"";
	if (depth == 2 && strcmp(parent, "__metadata__") &&
	    (!strcmp(key, "dtype") || !strcmp(key, "shape") || !strcmp(key, "data_offsets")))
		return "safetensors refuses a tensor's field given twice";
	return NULL;
}

/* The header: JSON as core/json reads it, n bytes that only white space (the format pads
 * with spaces) may end; a NUL byte is refused, not taken as the end. */
static int parse_header(struct zn_st_file *f, const char *json, size_t n)
{
	char origin[ZN_PATH_MAX + 16];
	struct zn_json_opts o = { .origin = origin, .dup = header_dup };
	cJSON *root = NULL;
	cJSON *item, *meta = NULL;
	int *order = NULL;
	int rc, i = 0;

	snprintf(origin, sizeof(origin), "%s (header)", f->path);
	rc = zn_json_parse(json, n, &o, &root);
	if (rc)
		return rc;
	rc = -EINVAL;
	if (!cJSON_IsObject(root)) {
		zn_error("%s: the header is not a JSON object", f->path);
		goto delete_root;
	}
	cJSON_ArrayForEach(item, root) {
		if (!strcmp(item->string, "__metadata__"))
			meta = item;
		else
			f->count++;
	}
	rc = -ENOMEM;
	f->tensors = calloc((size_t)f->count + 1, sizeof(*f->tensors));
	f->by_name = calloc((size_t)f->count + 1, sizeof(*f->by_name));
	order = calloc((size_t)f->count + 1, sizeof(*order));
	if (!f->tensors || !f->by_name || !order)
		goto delete_root;
	cJSON_ArrayForEach(item, root) {
		if (item == meta)
			continue;
		rc = parse_tensor(f, &f->tensors[i++], item);
		if (rc)
			goto delete_root;
	}
	rc = check_tiling(f, order);
	if (!rc)
		rc = check_names(f);
	if (!rc && meta)
		rc = parse_metadata(f, root, meta);
delete_root:
	free(order);
	cJSON_Delete(root);
	return rc;
}

static int read_header(struct zn_st_file *f)
{
	struct stat st;
	unsigned char len_le[8];
	uint64_t file_bytes, n = 0;
	char *json;
	int rc;

	if (fstat(f->fd, &st))
		return zn_check_errno(-1, "fstat", __FILE__, __LINE__);
	file_bytes = (uint64_t)st.st_size;
	if (file_bytes < 8) {
		zn_error("%s: %llu bytes: too short for a safetensors file (8-byte header length "
			 "first)", f->path, (unsigned long long)file_bytes);
		return -EINVAL;
	}
	rc = zn_pread_all(f->fd, len_le, 8, 0, f->path);
	if (rc)
		return rc;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | len_le[i];
	if (n > file_bytes - 8 || n > ZN_ST_HEADER_MAX_BYTES) {
		zn_error("%s: header length %llu is beyond the file (%llu bytes) or the %u-byte "
			 "limit: not a safetensors file, or truncated", f->path,
			 (unsigned long long)n, (unsigned long long)file_bytes,
			 ZN_ST_HEADER_MAX_BYTES);
		return -EINVAL;
	}
	f->header_bytes = n;
	f->data_bytes = file_bytes - 8 - n;
	json = malloc(n + 1);
	if (!json)
		return -ENOMEM;
	rc = zn_pread_all(f->fd, json, n, 8, f->path);
	json[n] = 0;
	if (!rc)
		rc = parse_header(f, json, (size_t)n);
	free(json);
	return rc;
}

int zn_st_open(struct zn_st_file **out, const char *path)
{
	struct zn_st_file *f;
	int rc;

	*out = NULL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = -1;
	f->path = strdup(path);
	if (!f->path) {
		rc = -ENOMEM;
		goto close_file;
	}
	/* the checkpoint, read-only; a FIFO, device or directory is refused */
	f->fd = zn_open_input_regular(path, "safetensors file", NULL);
	if (f->fd < 0) {
		rc = f->fd;
		goto close_file;
	}
	rc = read_header(f);
	if (rc)
		goto close_file;
	*out = f;
	return 0;
close_file:
	zn_st_close(f);
	return rc;
}

const struct zn_st_tensor *zn_st_find(const struct zn_st_file *f, const char *name)
{
	int lo = 0, hi = f->count - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		int c = strcmp(name, f->tensors[f->by_name[mid]].name);

		if (!c)
			return &f->tensors[f->by_name[mid]];
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return NULL;
}

int zn_st_read_f32(const struct zn_st_file *f, const struct zn_st_tensor *t, float *out_h)
{
	uint64_t off = 8 + f->header_bytes + t->begin;
	uint16_t *half;
	int rc;

	if (t->dtype < 0) {
		zn_error("%s: tensor '%s' is %s: only F32, BF16 and F16 can be read as floats",
			 f->path, t->name, t->dtype_name);
		return -EINVAL;
	}
	if (t->dtype == ZN_DTYPE_F32)
		return zn_pread_all(f->fd, out_h, t->end - t->begin, off, f->path);
	half = malloc(t->end - t->begin + 1);
	if (!half)
		return -ENOMEM;
	rc = zn_pread_all(f->fd, half, t->end - t->begin, off, f->path);
	if (!rc && t->dtype == ZN_DTYPE_BF16)
		zn_cast_bf16_to_f32(out_h, half, t->numel);
	else if (!rc)
		zn_cast_f16_to_f32(out_h, half, t->numel);
	free(half);
	return rc;
}

/* n elements of dtype src at in -> dtype want at out */
static void convert(void *out, enum zn_dtype want, const void *in, enum zn_dtype src, size_t n,
		    float *tmp)
{
	const float *f32 = in;

	if (src == want) {
		memcpy(out, in, n * zn_dtype_size(src));
		return;
	}
	if (src == ZN_DTYPE_BF16)
		zn_cast_bf16_to_f32(tmp, in, n);
	else if (src == ZN_DTYPE_F16)
		zn_cast_f16_to_f32(tmp, in, n);
	if (src != ZN_DTYPE_F32)
		f32 = tmp;
	if (want == ZN_DTYPE_F32)
		memcpy(out, f32, n * sizeof(float));
	else if (want == ZN_DTYPE_BF16)
		zn_cast_f32_to_bf16(out, f32, n);
	else
		zn_cast_f32_to_f16(out, f32, n);
}

int zn_st_read_raw(const struct zn_st_file *f, const struct zn_st_tensor *t, void *out_h)
{
	return zn_pread_all(f->fd, out_h, t->end - t->begin, 8 + f->header_bytes + t->begin,
			    f->path);
}

#define RANGE_CHUNK (4u << 20) /* elements per read: 16 MiB of F32 */

int zn_st_read_range(const struct zn_st_file *f, const struct zn_st_tensor *t, uint64_t first,
		     uint64_t count, enum zn_dtype want, void *out_h)
{
	const size_t in_bytes = (size_t)t->elem_bytes, out_bytes = zn_dtype_size(want);
	void *raw = NULL;
	float *tmp = NULL;
	int rc = -EINVAL;

	if (t->dtype < 0 || (want != ZN_DTYPE_F32 && want != ZN_DTYPE_BF16 &&
			     want != ZN_DTYPE_F16)) {
		zn_error("%s: tensor '%s' is %s: only F32, BF16 and F16 can be read as floats",
			 f->path, t->name, t->dtype_name);
		return -EINVAL;
	}
	if (first > t->numel || count > t->numel - first) {
		zn_error("%s: tensor '%s': elements [%llu, %llu) are outside its %llu", f->path,
			 t->name, (unsigned long long)first, (unsigned long long)(first + count),
			 (unsigned long long)t->numel);
		return -EINVAL;
	}
	if ((enum zn_dtype)t->dtype == want)
		return zn_pread_all(f->fd, out_h, count * in_bytes,
				    8 + f->header_bytes + t->begin + first * in_bytes, f->path);
	rc = -ENOMEM;
	raw = malloc(RANGE_CHUNK * in_bytes);
	tmp = malloc(RANGE_CHUNK * sizeof(float));
	if (!raw || !tmp)
		goto free_bufs;
	rc = 0;
	for (uint64_t at = 0; !rc && at < count; at += RANGE_CHUNK) {
		size_t n = count - at < RANGE_CHUNK ? (size_t)(count - at) : RANGE_CHUNK;

		rc = zn_pread_all(f->fd, raw, n * in_bytes,
				  8 + f->header_bytes + t->begin + (first + at) * in_bytes, f->path);
		if (!rc)
			convert((char *)out_h + at * out_bytes, want, raw,
				(enum zn_dtype)t->dtype, n, tmp);
	}
free_bufs:
	free(tmp);
	free(raw);
	return rc;
}
