/* bitsandbytes 4-bit checkpoints written as transformers writes them (bnb.h): config.json
 * with its quantization_config, one model.safetensors of mixed dtypes (U8 codes and JSON,
 * F32 scales and maps, the stored dtype for the rest). */
#include "model/quant/bnb.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/fsio.h"
#include "core/json.h"
#include "core/log.h"

void zn_bnb_float_repr(char *buf, size_t size, float v)
{
	double d = (double)v;

	if (!isfinite(d)) { /* json.dumps writes NaN / Infinity */
		snprintf(buf, size, "%s", isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
		return;
	}
	for (int p = 1; p <= 17; p++) {
		snprintf(buf, size, "%.*g", p, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	/* Python's repr: fixed notation from 1e-4 up to 1e16, and always a '.' or 'e' */
	if (d != 0 && (fabs(d) >= 1e16 || fabs(d) < 1e-4)) {
		char m[40];
		int p = 1;

		for (; p <= 17; p++) {
			snprintf(m, sizeof(m), "%.*e", p - 1, d);
			if (strtod(m, NULL) == d)
				break;
		}
		snprintf(buf, size, "%s", m);
		return;
	}
	if (strchr(buf, 'e')) { /* %g chose an exponent Python would not: write it out */
		snprintf(buf, size, "%.1f", d);
		return;
	}
	if (!strchr(buf, '.'))
		strncat(buf, ".0", size - strlen(buf) - 1);
}

static const char *dtype_py(enum zn_dtype t)
{
	return t == ZN_DTYPE_BF16 ? "bfloat16" : t == ZN_DTYPE_F16 ? "float16" : "float32";
}

static const char *dtype_st(enum zn_dtype t)
{
	return t == ZN_DTYPE_BF16 ? "BF16" : t == ZN_DTYPE_F16 ? "F16" : "F32";
}

/* one tensor of the file: its header entry and where its bytes come from in the extent */
struct item {
	char name[ZN_MODEL_NAME_MAX + 48];
	const char *dtype;
	int ndim;
	int64_t shape[2];
	int layer;
	uint64_t src_off, bytes; /* in the layer's extent; or the quant_state JSON */
	const void *fixed;       /* bytes not in the extent (quant_map), or NULL */
	char *json;              /* the quant_state JSON (owned), or NULL */
	const struct zn_q4_seg *seg;
};

struct plan {
	struct item *it;
	int n, cap;
};

static struct item *add(struct plan *p)
{
	if (p->n == p->cap) {
		int cap = p->cap ? 2 * p->cap : 64;
		struct item *it = realloc(p->it, (size_t)cap * sizeof(*it));

		if (!it)
			return NULL;
		p->it = it;
		p->cap = cap;
	}
	memset(&p->it[p->n], 0, sizeof(p->it[0]));
	return &p->it[p->n++];
}

static int add_item(struct plan *p, const char *name, const char *suffix, const char *dt,
		    int ndim, int64_t s0, int64_t s1, int l, uint64_t off, uint64_t bytes)
{
	struct item *it = add(p);

	if (!it)
		return -ENOMEM;
	snprintf(it->name, sizeof(it->name), "%s%s", name, suffix);
	it->dtype = dt;
	it->ndim = ndim;
	it->shape[0] = s0;
	it->shape[1] = s1;
	it->layer = l;
	it->src_off = off;
	it->bytes = bytes;
	return 0;
}

/* the quant_state entry: json.dumps of the non-tensor items, in QuantState.as_dict's order;
 * the nested offset is read from the extent when the data is written */
static char *state_json(const struct zn_q4_seg *s, const struct zn_tensor_desc *d,
			float offset)
{
	char *j = malloc(512), off[48];

	if (!j)
		return NULL;
	snprintf(j, 512, "{\"quant_type\": \"%s\", \"blocksize\": %d, \"dtype\": \"%s\", "
		 "\"shape\": [%lld, %lld]", s->type == ZN_Q4_FP4 ? "fp4" : "nf4", s->blocksize,
		 dtype_py(s->qdtype), (long long)d->shape[0], (long long)d->shape[1]);
	if (s->nested) {
		zn_bnb_float_repr(off, sizeof(off), offset);
		snprintf(j + strlen(j), 512 - strlen(j), ", \"nested_blocksize\": %d, "
			 "\"nested_dtype\": \"float32\", \"nested_offset\": %s", ZN_Q4_NESTED_BLOCK,
			 off);
	}
	strcat(j, "}");
	return j;
}

static int plan_layer(struct plan *p, const struct zn_layer_desc *d, const struct zn_q4_layer *q,
		      int l, enum zn_dtype stored)
{
	int rc = 0;

	for (int t = 0; !rc && t < d->tensor_count; t++) {
		const struct zn_tensor_desc *td = &d->tensors[t];
		int k = zn_q4_find(q, t);
		const struct zn_q4_seg *s = k >= 0 ? &q->seg[k] : NULL;
		uint64_t nb;

		if (!s) {
			int64_t n = td->ndim == 2 ? td->file_shape[0] * td->file_shape[1] :
						    td->file_shape[0];

			if (td->transpose) {
				zn_error("--save-quantized: %s is a Conv1D weight kept unquantized: "
					 "zinc writes those only quantized", td->name);
				return -EINVAL;
			}
			rc = add_item(p, td->name, "", dtype_st(stored), td->ndim, td->file_shape[0],
				      td->file_shape[1], l,
				      zn_q4_plain_index(q, td->offset) * q->elem_bytes,
				      (uint64_t)n * q->elem_bytes);
			continue;
		}
		nb = s->blocks;
		rc = add_item(p, td->name, "", "U8", 2, (int64_t)(s->numel / 2), 1, l,
			      s->packed_off, s->numel / 2);
		if (!rc)
			rc = add_item(p, td->name, ".absmax", s->nested ? "U8" : "F32", 1,
				      (int64_t)nb, 0, l, s->absmax_off, nb * (s->nested ? 1 : 4));
		if (!rc) {
			rc = add_item(p, td->name, ".quant_map", "F32", 1, 16, 0, l, 0, 64);
			if (!rc)
				p->it[p->n - 1].fixed = zn_q4_code(s->type);
		}
		if (!rc && s->nested) {
			uint64_t n2 = (nb + ZN_Q4_NESTED_BLOCK - 1) / ZN_Q4_NESTED_BLOCK;

			rc = add_item(p, td->name, ".nested_absmax", "F32", 1, (int64_t)n2, 0, l,
				      s->nest_off + 4, n2 * 4);
			if (!rc)
				rc = add_item(p, td->name, ".nested_quant_map", "F32", 1, 256, 0, l,
					      q->map_off, 1024);
		}
		if (!rc) {
			rc = add_item(p, td->name, s->type == ZN_Q4_FP4 ?
				      ".quant_state.bitsandbytes__fp4" : ".quant_state.bitsandbytes__nf4",
				      "U8", 1, 0, 0, l, 0, 0);
			if (!rc) {
				p->it[p->n - 1].seg = s;
				p->it[p->n - 1].src_off = (uint64_t)t; /* the tensor, for its shape */
			}
		}
	}
	return rc;
}

static void plan_free(struct plan *p)
{
	for (int i = 0; i < p->n; i++)
		free(p->it[i].json);
	free(p->it);
}

/* the quant_state JSON of every quantized tensor (it needs the nested offset, in the
 * extent): one pass over the layers before the header is written */
static int fill_json(struct plan *p, const struct zn_layer_desc *desc, const struct zn_q4_layer *q,
		     int n, int (*extent)(void *, int, void *), void *ctx)
{
	uint64_t most = 0;
	uint8_t *buf;
	int rc = 0;

	for (int l = 0; l < n; l++)
		most = q[l].bytes > most ? q[l].bytes : most;
	buf = malloc(most ? most : 1);
	if (!buf)
		return -ENOMEM;
	for (int l = 0; !rc && l < n; l++) {
		bool any = false;

		for (int i = 0; i < p->n; i++)
			any |= p->it[i].layer == l && p->it[i].seg && p->it[i].seg->nested;
		if (any)
			rc = extent(ctx, l, buf);
		for (int i = 0; !rc && i < p->n; i++) {
			struct item *it = &p->it[i];
			float off = 0;

			if (it->layer != l || !it->seg)
				continue;
			if (it->seg->nested)
				memcpy(&off, buf + it->seg->nest_off, 4);
			it->json = state_json(it->seg, &desc[l].tensors[it->src_off], off);
			if (!it->json)
				return -ENOMEM;
			it->bytes = strlen(it->json);
			it->shape[0] = (int64_t)it->bytes;
		}
	}
	free(buf);
	return rc;
}

static char *header(const struct plan *p, size_t *len)
{
	size_t cap = 256 + (size_t)p->n * (ZN_MODEL_NAME_MAX + 160), at = 0;
	char *h = malloc(cap);
	uint64_t off = 0;

	if (!h)
		return NULL;
	at += (size_t)snprintf(h + at, cap - at, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (int i = 0; i < p->n; i++) {
		const struct item *it = &p->it[i];

		at += (size_t)snprintf(h + at, cap - at, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
				       it->name, it->dtype);
		if (it->ndim == 2)
			at += (size_t)snprintf(h + at, cap - at, "%lld,%lld", (long long)it->shape[0],
					       (long long)it->shape[1]);
		else
			at += (size_t)snprintf(h + at, cap - at, "%lld", (long long)it->shape[0]);
		at += (size_t)snprintf(h + at, cap - at, "],\"data_offsets\":[%llu,%llu]}",
				       (unsigned long long)off,
				       (unsigned long long)(off + it->bytes));
		off += it->bytes;
	}
	at += (size_t)snprintf(h + at, cap - at, "}");
	while (at % 8) /* the data section 8-byte aligned, as safetensors pads */
		h[at++] = ' ';
	*len = at;
	return h;
}

static int write_data(int fd, const char *path, const struct plan *p, const struct zn_q4_layer *q,
		      int n, int (*extent)(void *, int, void *), void *ctx)
{
	uint64_t most = 0;
	uint8_t *buf;
	int rc = 0, have = -1;

	for (int l = 0; l < n; l++)
		most = q[l].bytes > most ? q[l].bytes : most;
	buf = malloc(most ? most : 1);
	if (!buf)
		return -ENOMEM;
	for (int i = 0; !rc && i < p->n; i++) {
		const struct item *it = &p->it[i];
		const void *src = it->json ? (const void *)it->json : it->fixed;

		if (!src && it->layer != have) {
			rc = extent(ctx, it->layer, buf);
			have = it->layer;
		}
		if (!rc)
			rc = zn_write_all(fd, src ? src : buf + it->src_off, it->bytes, path);
	}
	free(buf);
	return rc;
}

static int write_config(const char *dir, const char *config_json, enum zn_dtype stored,
			const struct zn_q4_layer *q, int n)
{
	char path[ZN_PATH_MAX + 16];
	bool nested = false, fp4 = false;
	struct zn_json_opts o = { .origin = "the base's config.json" };
	cJSON *root = NULL, *qc;
	char *text;
	int rc;

	for (int l = 0; l < n; l++)
		for (int i = 0; i < q[l].count; i++) {
			nested |= q[l].seg[i].nested;
			fp4 |= q[l].seg[i].type == ZN_Q4_FP4;
		}
	rc = zn_json_parse(config_json, strlen(config_json), &o, &root);
	if (rc)
		return rc;
	cJSON_DeleteItemFromObject(root, "quantization_config");
	cJSON_DeleteItemFromObject(root, "torch_dtype");
	cJSON_AddStringToObject(root, "torch_dtype", dtype_py(stored));
	qc = cJSON_AddObjectToObject(root, "quantization_config");
	/* BitsAndBytesConfig(load_in_4bit=True, ...).to_dict() */
	cJSON_AddBoolToObject(qc, "_load_in_4bit", 1);
	cJSON_AddBoolToObject(qc, "_load_in_8bit", 0);
	cJSON_AddStringToObject(qc, "bnb_4bit_compute_dtype", dtype_py(stored));
	cJSON_AddStringToObject(qc, "bnb_4bit_quant_storage", "uint8");
	cJSON_AddStringToObject(qc, "bnb_4bit_quant_type", fp4 ? "fp4" : "nf4");
	cJSON_AddBoolToObject(qc, "bnb_4bit_use_double_quant", nested);
	cJSON_AddBoolToObject(qc, "llm_int8_enable_fp32_cpu_offload", 0);
	cJSON_AddBoolToObject(qc, "llm_int8_has_fp16_weight", 0);
	cJSON_AddNullToObject(qc, "llm_int8_skip_modules");
	cJSON_AddRawToObject(qc, "llm_int8_threshold", "6.0"); /* Python writes the float 6.0 */
	cJSON_AddBoolToObject(qc, "load_in_4bit", 1);
	cJSON_AddBoolToObject(qc, "load_in_8bit", 0);
	cJSON_AddStringToObject(qc, "quant_method", "bitsandbytes");
	text = cJSON_Print(root);
	cJSON_Delete(root);
	if (!text)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s/config.json", dir);
	rc = zn_write_file_atomic(path, "--save-quantized", text, strlen(text));
	free(text);
	return rc;
}

int zn_bnb_save(const char *dir, const char *config_json, enum zn_dtype stored,
		const struct zn_layer_desc *desc, const struct zn_q4_layer *q, int n,
		int (*extent)(void *ctx, int l, void *buf), void *ctx)
{
	char path[ZN_PATH_MAX + 32];
	struct zn_atomic_file af = { .fd = -1 };
	struct plan p = { 0 };
	uint64_t hlen;
	size_t len = 0;
	char *h = NULL;
	int rc = zn_output_dir_make(dir, "--save-quantized");

	for (int l = 0; !rc && l < n; l++)
		rc = plan_layer(&p, &desc[l], &q[l], l, stored);
	if (!rc)
		rc = fill_json(&p, desc, q, n, extent, ctx);
	if (!rc) {
		h = header(&p, &len);
		rc = h ? 0 : -ENOMEM;
	}
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	if (!rc)
		rc = zn_atomic_file_begin(&af, path, "--save-quantized");
	hlen = len;
	if (!rc)
		rc = zn_write_all(af.fd, &hlen, 8, path); /* little-endian hosts */
	if (!rc)
		rc = zn_write_all(af.fd, h, len, path);
	if (!rc)
		rc = write_data(af.fd, path, &p, q, n, extent, ctx);
	if (!rc)
		rc = zn_atomic_file_commit(&af);
	else
		zn_atomic_file_abort(&af);
	if (!rc)
		rc = write_config(dir, config_json, stored, q, n);
	free(h);
	plan_free(&p);
	return rc;
}
