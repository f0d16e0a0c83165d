/* bitsandbytes 4-bit checkpoints read into a 4-bit base's extents (bnb.h): the config's
 * quantization_config, each quantized weight's components and its quant_state JSON, all
 * checked before a byte of them is used. */
#include "model/quant/bnb.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/json.h"
#include "core/log.h"

/* ---- config.json ---------------------------------------------------------------------- */

static int bad(const char *path, const char *key, const char *why)
{
	zn_error("%s: quantization_config.%s %s", path, key, why);
	return -EINVAL;
}

static int dtype_of(const char *s, enum zn_dtype *out)
{
	if (!strcmp(s, "bfloat16"))
		*out = ZN_DTYPE_BF16;
	else if (!strcmp(s, "float16"))
		*out = ZN_DTYPE_F16;
	else if (!strcmp(s, "float32"))
		*out = ZN_DTYPE_F32;
	else
		return -EINVAL;
	return 0;
}

static int config_key(const cJSON *v, const char *path, struct zn_bnb_config *out)
{
	static const char *const passive[] = { "llm_int8_threshold", "llm_int8_skip_modules",
					       "llm_int8_enable_fp32_cpu_offload",
					       "llm_int8_has_fp16_weight", "_load_in_4bit" };
	const char *k = v->string;

	for (size_t i = 0; i < sizeof(passive) / sizeof(passive[0]); i++)
		if (!strcmp(k, passive[i]))
			return 0; /* 8-bit settings, or per-tensor keys decide (skip modules) */
	if (!strcmp(k, "quant_method"))
		return cJSON_IsString(v) && !strcmp(v->valuestring, "bitsandbytes") ? 0 :
		       bad(path, k, "is not \"bitsandbytes\": zinc reads bitsandbytes 4-bit "
			   "checkpoints only (GPTQ, AWQ, ... are not implemented)");
	if (!strcmp(k, "load_in_4bit"))
		return cJSON_IsTrue(v) ? 0 : bad(path, k, "is not true: only 4-bit "
					       "bitsandbytes checkpoints are read");
	if (!strcmp(k, "load_in_8bit") || !strcmp(k, "_load_in_8bit"))
		return cJSON_IsFalse(v) ? 0 : bad(path, k, "is true: 8-bit bitsandbytes "
						"(LLM.int8) checkpoints are not implemented");
	if (!strcmp(k, "bnb_4bit_quant_type")) {
		if (cJSON_IsString(v) && !strcmp(v->valuestring, "nf4"))
			out->type = ZN_Q4_NF4;
		else if (cJSON_IsString(v) && !strcmp(v->valuestring, "fp4"))
			out->type = ZN_Q4_FP4;
		else
			return bad(path, k, "is neither \"nf4\" nor \"fp4\"");
		return 0;
	}
	if (!strcmp(k, "bnb_4bit_use_double_quant")) {
		if (!cJSON_IsBool(v))
			return bad(path, k, "is not a bool");
		out->double_quant = cJSON_IsTrue(v);
		return 0;
	}
	if (!strcmp(k, "bnb_4bit_compute_dtype"))
		return cJSON_IsString(v) && !dtype_of(v->valuestring, &out->compute_dtype) ? 0 :
		       bad(path, k, "is not bfloat16, float16 or float32");
	if (!strcmp(k, "bnb_4bit_quant_storage"))
		return cJSON_IsString(v) && !strcmp(v->valuestring, "uint8") ? 0 :
		       bad(path, k, "is not \"uint8\": codes packed in other dtypes (FSDP's "
			   "quant_storage) are not implemented");
	zn_error("%s: quantization_config has '%s', which BitsAndBytesConfig does not: zinc "
		 "cannot say what it does", path, k);
	return -EINVAL;
}

int zn_bnb_config_parse(const char *config_json, const char *path, struct zn_bnb_config *out)
{
	struct zn_json_opts o = { .origin = path };
	const cJSON *qc, *v;
	cJSON *root;
	int rc;

	*out = (struct zn_bnb_config){ .compute_dtype = ZN_DTYPE_F32 };
	rc = zn_json_parse(config_json, strlen(config_json), &o, &root);
	if (rc)
		return rc;
	qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
	if (qc && !cJSON_IsNull(qc)) {
		out->present = true;
		if (!cJSON_IsObject(qc))
			rc = bad(path, "", "is not an object");
		if (!rc && !cJSON_GetObjectItemCaseSensitive(qc, "quant_method"))
			rc = bad(path, "quant_method", "is missing");
		if (!rc && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(qc, "load_in_4bit")))
			rc = bad(path, "load_in_4bit", "is not true: only 4-bit bitsandbytes "
				 "checkpoints are read");
		cJSON_ArrayForEach(v, qc)
			if (!rc)
				rc = config_key(v, path, out);
	}
	cJSON_Delete(root);
	return rc;
}

/* ---- a weight's components ------------------------------------------------------------ */

struct parts {
	const struct zn_st_tensor *w, *absmax, *qmap, *nabs, *nmap, *state;
	const struct zn_st_file *wf, *af, *mf, *naf, *nmf, *sf;
	enum zn_q4_type type;
};

/* name + suffix in the checkpoint: 0, -ENOENT, or another code (logged) */
static int find(struct zn_hf_src *s, const char *name, const char *suffix,
		const struct zn_st_tensor **t, const struct zn_st_file **f)
{
	char key[ZN_MODEL_NAME_MAX + 48];

	snprintf(key, sizeof(key), "%s%s", name, suffix);
	return zn_hf_find(s, key, t, f);
}

static int refuse(struct zn_hf_src *s, const char *name, const char *what)
{
	zn_error("%s: 4-bit weight %s: %s", zn_hf_src_path(s), name, what);
	return -EINVAL;
}

static bool is(const struct zn_st_tensor *t, const char *dtype, int ndim, int64_t s0, int64_t s1)
{
	return !strcmp(t->dtype_name, dtype) && t->ndim == ndim && t->shape[0] == s0 &&
	       (ndim < 2 || t->shape[1] == s1);
}

/* Is name quantized in s? 1 (p filled), 0 (a plain tensor), or a negative code. */
static int parts_of(struct zn_hf_src *s, const char *name, struct parts *p)
{
	const struct zn_st_tensor *t2;
	const struct zn_st_file *f2;
	int nf = find(s, name, ".quant_state.bitsandbytes__nf4", &p->state, &p->sf);
	int ff = nf ? find(s, name, ".quant_state.bitsandbytes__fp4", &p->state, &p->sf) :
		      find(s, name, ".quant_state.bitsandbytes__fp4", &t2, &f2);
	int rc;

	if ((nf && nf != -ENOENT) || (ff && ff != -ENOENT))
		return nf && nf != -ENOENT ? nf : ff;
	if (!nf && !ff)
		return refuse(s, name, "has both a bitsandbytes__nf4 and a bitsandbytes__fp4 "
			      "quant_state entry");
	if (nf && ff) { /* a 16/32-bit tensor, unless some component says otherwise */
		if (!find(s, name, ".absmax", &p->absmax, &p->af))
			return refuse(s, name, "has an absmax but no quant_state.bitsandbytes__nf4 "
				      "(or __fp4) entry");
		return 0;
	}
	p->type = nf ? ZN_Q4_FP4 : ZN_Q4_NF4;
	rc = find(s, name, "", &p->w, &p->wf);
	if (!rc)
		rc = find(s, name, ".absmax", &p->absmax, &p->af);
	if (!rc)
		rc = find(s, name, ".quant_map", &p->qmap, &p->mf);
	if (rc == -ENOENT)
		return refuse(s, name, "a component is missing (the packed weight, .absmax and "
			      ".quant_map are required)");
	if (rc)
		return rc;
	rc = find(s, name, ".nested_absmax", &p->nabs, &p->naf);
	if (!rc)
		rc = find(s, name, ".nested_quant_map", &p->nmap, &p->nmf);
	if (rc && rc != -ENOENT)
		return rc;
	if (rc == -ENOENT)
		p->nabs = p->nmap = NULL;
	return 1;
}

struct state {
	enum zn_q4_type type;
	int blocksize, nested_blocksize;
	enum zn_dtype dtype;
	int64_t shape[2];
	bool nested, has_offset;
};

static int state_key(struct zn_hf_src *s, const char *name, const cJSON *v, struct state *st)
{
	const char *k = v->string;
	int64_t x;

	if (!strcmp(k, "quant_type")) {
		if (!cJSON_IsString(v) || (strcmp(v->valuestring, "nf4") &&
					   strcmp(v->valuestring, "fp4")))
			return refuse(s, name, "quant_state quant_type is not \"nf4\" or \"fp4\"");
		st->type = strcmp(v->valuestring, "nf4") ? ZN_Q4_FP4 : ZN_Q4_NF4;
	} else if (!strcmp(k, "blocksize") || !strcmp(k, "nested_blocksize")) {
		if (zn_json_int(v, 32, 4096, &x) || (x & (x - 1)))
			return refuse(s, name, "quant_state blocksize is not a power of 2 in "
				      "32 .. 4096");
		if (k[0] == 'b')
			st->blocksize = (int)x;
		else
			st->nested_blocksize = (int)x;
	} else if (!strcmp(k, "dtype")) {
		if (!cJSON_IsString(v) || dtype_of(v->valuestring, &st->dtype))
			return refuse(s, name, "quant_state dtype is not bfloat16, float16 or "
				      "float32");
	} else if (!strcmp(k, "nested_dtype")) {
		if (!cJSON_IsString(v) || strcmp(v->valuestring, "float32"))
			return refuse(s, name, "quant_state nested_dtype is not float32");
		st->nested = true;
	} else if (!strcmp(k, "nested_offset")) {
		if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
			return refuse(s, name, "quant_state nested_offset is not a finite number");
		st->has_offset = true;
	} else if (!strcmp(k, "shape")) {
		if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 ||
		    zn_json_int(cJSON_GetArrayItem(v, 0), 1, INT64_MAX, &st->shape[0]) ||
		    zn_json_int(cJSON_GetArrayItem(v, 1), 1, INT64_MAX, &st->shape[1]))
			return refuse(s, name, "quant_state shape is not [out, in]");
	} else {
		zn_error("%s: 4-bit weight %s: quant_state has '%s', which bitsandbytes' QuantState "
			 "does not write", zn_hf_src_path(s), name, k);
		return -EINVAL;
	}
	return 0;
}

static int read_state(struct zn_hf_src *s, const char *name, const struct parts *p,
		      struct state *st)
{
	struct zn_json_opts o = { .origin = name };
	char *text;
	cJSON *root = NULL;
	const cJSON *v;
	int rc;

	memset(st, 0, sizeof(*st));
	if (strcmp(p->state->dtype_name, "U8") || p->state->ndim != 1 ||
	    p->state->numel > 4096)
		return refuse(s, name, "the quant_state entry is not a U8 vector of JSON bytes");
	text = calloc(p->state->numel + 1, 1);
	if (!text)
		return -ENOMEM;
	rc = zn_st_read_raw(p->sf, p->state, text);
	if (!rc && zn_json_parse(text, p->state->numel, &o, &root))
		rc = refuse(s, name, "its quant_state entry is not JSON");
	if (!rc && !cJSON_IsObject(root))
		rc = refuse(s, name, "its quant_state entry is not a JSON object");
	for (v = root ? root->child : NULL; !rc && v; v = v->next)
		rc = state_key(s, name, v, st);
	if (!rc && (!st->blocksize || !st->shape[0] ||
		    !cJSON_GetObjectItemCaseSensitive(root, "dtype") ||
		    !cJSON_GetObjectItemCaseSensitive(root, "quant_type")))
		rc = refuse(s, name, "quant_state lacks quant_type, blocksize, dtype or shape");
	if (!rc && st->type != p->type)
		rc = refuse(s, name, "quant_state quant_type is not its entry's name's");
	if (!rc && st->nested != (p->nabs != NULL) )
		rc = refuse(s, name, "nested_absmax and the quant_state's nested_* keys do not "
			    "come together");
	if (!rc && st->nested && (!st->has_offset || st->nested_blocksize != ZN_Q4_NESTED_BLOCK))
		rc = refuse(s, name, "a nested quant_state needs nested_offset and "
			    "nested_blocksize 256 (bitsandbytes' quantize_4bit)");
	cJSON_Delete(root);
	free(text);
	return rc;
}

/* the components' dtypes and sizes against the quant_state and the model */
static int check_parts(struct zn_hf_src *s, const struct zn_tensor_desc *d, const struct parts *p,
		       const struct state *st)
{
	uint64_t n = (uint64_t)d->shape[0] * (uint64_t)d->shape[1];
	uint64_t nb = n / (uint64_t)st->blocksize;
	float map[16];
	int rc;

	if (d->ndim != 2 || st->shape[0] != d->shape[0] || st->shape[1] != d->shape[1])
		return refuse(s, d->name, "quant_state shape is not the model's [out, in]");
	if (n % (uint64_t)st->blocksize)
		return refuse(s, d->name, "its size is not a multiple of the block: zinc "
			      "dequantizes whole blocks only");
	if (!is(p->w, "U8", 2, (int64_t)(n / 2), 1) && !is(p->w, "U8", 2, 1, (int64_t)(n / 2)))
		return refuse(s, d->name, "the packed weight is not U8 [numel / 2, 1] (the "
			      "model's numel / 2 bytes)");
	if (!is(p->absmax, st->nested ? "U8" : "F32", 1, (int64_t)nb, 0))
		return refuse(s, d->name, st->nested ? ".absmax is not U8 [blocks] (double quant)" :
			      ".absmax is not F32 [blocks]");
	if (!is(p->qmap, "F32", 1, 16, 0))
		return refuse(s, d->name, ".quant_map is not F32 [16]");
	rc = zn_st_read_raw(p->mf, p->qmap, map);
	if (!rc && memcmp(map, zn_q4_code(p->type), sizeof(map)))
		return refuse(s, d->name, ".quant_map is not bitsandbytes' code table for its "
			      "quant_type");
	if (!rc && st->nested &&
	    (!is(p->nabs, "F32", 1, (int64_t)((nb + 255) / 256), 0) || !is(p->nmap, "F32", 1, 256, 0)))
		return refuse(s, d->name, ".nested_absmax is not F32 [ceil(blocks / 256)] or "
			      ".nested_quant_map not F32 [256]");
	return rc;
}

int zn_bnb_layout(struct zn_hf_src *s, const struct zn_layer_desc *desc, uint64_t numel,
		  enum zn_dtype stored, struct zn_q4_layer *q)
{
	int rc = 0;

	zn_q4_begin(q, numel, (unsigned)zn_dtype_size(stored));
	for (int t = 0; !rc && t < desc->tensor_count; t++) {
		const struct zn_tensor_desc *d = &desc->tensors[t];
		struct parts p = { 0 };
		struct state st;
		int k = parts_of(s, d->name, &p);

		if (k <= 0) {
			rc = k;
			continue;
		}
		rc = read_state(s, d->name, &p, &st);
		if (!rc)
			rc = check_parts(s, d, &p, &st);
		if (!rc)
			rc = zn_q4_add(q, t, d->name, d->offset, d->numel, st.type, st.blocksize,
				       st.nested, st.dtype);
	}
	zn_q4_finish(q);
	return rc;
}

/* ---- the layer's bytes ---------------------------------------------------------------- */

static int read_plain(struct zn_hf_src *s, const struct zn_tensor_desc *d,
		      const struct zn_q4_layer *q, enum zn_dtype stored, uint8_t *x)
{
	const struct zn_st_tensor *t;
	int rc = zn_hf_find(s, d->name, &t, NULL);

	if (rc == -ENOENT)
		zn_error("%s: no tensor '%s'", zn_hf_src_path(s), d->name);
	if (rc)
		return rc;
	if (t->ndim != d->ndim || t->shape[0] != d->file_shape[0] ||
	    (d->ndim == 2 && t->shape[1] != d->file_shape[1]))
		return refuse(s, d->name, "kept unquantized, it does not have the model's shape");
	if (d->transpose)
		return refuse(s, d->name, "a Conv1D weight kept unquantized is not implemented");
	return zn_hf_read_rows(s, d->name, 0, t->shape[0], stored,
			       x + zn_q4_plain_index(q, d->offset) * q->elem_bytes);
}

static int read_quantized(struct zn_hf_src *s, const struct zn_tensor_desc *d,
			  const struct zn_q4_seg *sg, const struct zn_q4_layer *q, uint8_t *x,
			  bool *have_map)
{
	struct parts p = { 0 };
	float map[256];
	int rc = parts_of(s, d->name, &p);

	if (rc != 1)
		return rc < 0 ? rc : refuse(s, d->name, "is no longer quantized");
	rc = zn_st_read_raw(p.wf, p.w, x + sg->packed_off);
	if (!rc)
		rc = zn_st_read_raw(p.af, p.absmax, x + sg->absmax_off);
	if (!rc && sg->nested) {
		struct state st;

		/* the offset: quant_state's nested_offset, a Python float of the fp32 value */
		rc = read_state(s, d->name, &p, &st);
		if (!rc)
			rc = zn_st_read_raw(p.naf, p.nabs, x + sg->nest_off + 4);
		if (!rc)
			rc = zn_st_read_raw(p.nmf, p.nmap, map);
		if (!rc && *have_map && memcmp(map, x + q->map_off, sizeof(map)))
			rc = refuse(s, d->name, ".nested_quant_map differs from another weight's "
				    "of its layer");
		if (!rc)
			memcpy(x + q->map_off, map, sizeof(map));
		*have_map = true;
	}
	return rc;
}

/* nested_offset from the JSON, as a float (the fp32 offset bitsandbytes stored) */
static int read_offset(struct zn_hf_src *s, const char *name, float *out)
{
	struct parts p = { 0 };
	struct zn_json_opts o = { .origin = name };
	char *text;
	cJSON *root = NULL;
	int rc = parts_of(s, name, &p);

	if (rc != 1)
		return rc < 0 ? rc : -EINVAL;
	text = calloc(p.state->numel + 1, 1);
	if (!text)
		return -ENOMEM;
	rc = zn_st_read_raw(p.sf, p.state, text);
	if (!rc)
		rc = zn_json_parse(text, p.state->numel, &o, &root);
	if (!rc)
		*out = (float)cJSON_GetObjectItemCaseSensitive(root, "nested_offset")->valuedouble;
	cJSON_Delete(root);
	free(text);
	return rc;
}

int zn_bnb_read_layer(struct zn_hf_src *s, const struct zn_layer_desc *desc,
		      const struct zn_q4_layer *q, enum zn_dtype stored, void *extent)
{
	uint8_t *x = extent;
	bool have_map = false;
	int rc = 0;

	for (int t = 0; !rc && t < desc->tensor_count; t++) {
		const struct zn_tensor_desc *d = &desc->tensors[t];
		int k = zn_q4_find(q, t);

		if (k < 0) {
			rc = read_plain(s, d, q, stored, x);
			continue;
		}
		rc = read_quantized(s, d, &q->seg[k], q, x, &have_map);
		if (!rc && q->seg[k].nested) {
			float off;

			rc = read_offset(s, d->name, &off);
			if (!rc)
				memcpy(x + q->seg[k].nest_off, &off, 4);
		}
	}
	return rc;
}
