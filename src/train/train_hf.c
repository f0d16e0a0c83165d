/* zinc train's Hugging Face checkpoints (every registered family) through model/hf_dir.h;
 * see train_hf.h. */
#include "train/train_hf.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsio.h"
#include "core/log.h"
#include "core/size.h"
#include "model/hf_dir.h"
#include "model/quant/bnb.h"

/* mem [rows, cols] = transpose of file [cols, rows] */
static void transpose(float *dst, const float *src, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			dst[r * cols + c] = src[c * rows + r];
}

/* transformers 5's fused stack of d (hf_dir.h), when the file holds that instead: 1 read,
 * 0 not there, < 0 an error */
static int load_fused(struct zn_hf_src *s, const struct zn_tensor_desc *d, float *dst)
{
	const int64_t E = d->parts / d->part_kinds;
	const struct zn_st_tensor *t;
	const struct zn_st_file *f;
	char part[ZN_MODEL_NAME_MAX + 32], name[ZN_MODEL_NAME_MAX + 32];
	int factor, rc;

	zn_tensor_part_name(d, 0, part, sizeof(part));
	if (!zn_hf_fused_expert_name(s, part, name, sizeof(name), &factor) ||
	    zn_hf_find(s, name, &t, &f))
		return 0;
	if (t->ndim != 3 || t->shape[0] != E || t->shape[1] * E != d->shape[0] ||
	    t->shape[2] != d->shape[1] || factor != d->part_kinds) {
		zn_error("%s: tensor '%s' does not have the shape the model needs", zn_st_path(f),
			 name);
		return -EINVAL;
	}
	/* [E, kinds rows, cols]: each expert's gate rows then its up rows, zinc's order */
	rc = zn_hf_read_rows(s, name, 0, E, ZN_DTYPE_F32, dst);
	return rc ? rc : 1;
}

/* A stack of experts (model.h: parts): each part's rows into its place, in order */
static int load_parts(struct zn_hf_src *s, const struct zn_tensor_desc *d, float *dst)
{
	const int64_t rows = d->shape[0] / d->parts;
	char name[ZN_MODEL_NAME_MAX + 32];
	int rc = load_fused(s, d, dst);

	if (rc)
		return rc < 0 ? rc : 0;
	for (int j = 0; !rc && j < d->parts; j++) {
		const struct zn_st_tensor *t;
		const struct zn_st_file *f;

		zn_tensor_part_name(d, j, name, sizeof(name));
		rc = zn_hf_find(s, name, &t, &f);
		if (rc == -ENOENT)
			zn_error("--init-from %s: no tensor '%s'", zn_hf_src_path(s), name);
		if (!rc && (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != d->shape[1])) {
			zn_error("%s: tensor '%s' does not have the shape the model needs",
				 zn_st_path(f), name);
			rc = -EINVAL;
		}
		if (!rc)
			rc = zn_hf_read_rows(s, name, 0, rows, ZN_DTYPE_F32,
					     dst + (uint64_t)j * (uint64_t)rows *
						   (uint64_t)d->shape[1]);
	}
	return rc;
}

static int load_tensor(struct zn_hf_src *s, const struct zn_tensor_desc *d, float *dst)
{
	const struct zn_st_tensor *t;
	const struct zn_st_file *f;
	float *tmp;
	int rc;

	if (d->parts > 0)
		return load_parts(s, d, dst);
	rc = zn_hf_find(s, d->name, &t, &f);

	if (rc == -ENOENT)
		zn_error("--init-from %s: no tensor '%s'", zn_hf_src_path(s), d->name);
	if (rc)
		return rc;
	if (t->ndim != d->ndim || t->shape[0] != d->file_shape[0] ||
	    (d->ndim == 2 && t->shape[1] != d->file_shape[1])) {
		zn_error("%s: tensor '%s' does not have the shape the model needs", zn_st_path(f),
			 t->name);
		return -EINVAL;
	}
	if (!d->transpose) {
		/* file order = memory order; wte's padded rows after the file's are zeroed */
		rc = zn_hf_read_rows(s, d->name, 0, t->shape[0], ZN_DTYPE_F32, dst);
		if (!rc)
			memset(dst + t->numel, 0, (d->numel - t->numel) * sizeof(float));
		return rc;
	}
	tmp = zn_size_alloc(zn_size_mul(t->numel, sizeof(float)), "a tensor to transpose");
	if (!tmp)
		return -ENOMEM;
	rc = zn_hf_read_rows(s, d->name, 0, t->shape[0], ZN_DTYPE_F32, tmp);
	if (!rc)
		transpose(dst, tmp, d->shape[0], d->shape[1]);
	free(tmp);
	return rc;
}

struct zn_train_hf_loader {
	struct zn_hf_src *s;
	struct zn_st_file *bare; /* a lone file without config: the family's file ops read it */
	const struct zn_train_model *tm;
	struct zn_layer_desc *ld;
	int n;
	struct zn_bnb_config bnb;  /* a 4-bit checkpoint's quantization_config */
	struct zn_q4_layer *q4;    /* its layouts (zn_train_hf_q4_layouts) */
	enum zn_dtype stored;
};

/* The model's layer descriptors, 0 .. n-1 (calloc'd into *out; zn_layer_descs_free). */
static int describe_all(const struct zn_train_model *tm, struct zn_layer_desc **out, int *n)
{
	struct zn_model m = zn_train_model_get(tm);
	int rc = 0;

	*n = m.ops->layer_count(m.config);
	*out = zn_size_calloc((uint64_t)*n, sizeof(**out), "the layer descriptors");
	if (!*out)
		return -ENOMEM;
	for (int l = 0; !rc && l < *n; l++)
		rc = m.ops->describe(m.config, l, &(*out)[l]);
	return rc;
}

int zn_train_hf_loader_open(struct zn_train_hf_loader **out, const char *path,
			    const struct zn_train_model *tm)
{
	struct zn_train_hf_loader *h = calloc(1, sizeof(*h));
	int rc = h ? 0 : -ENOMEM;

	*out = NULL;
	if (!rc) {
		h->tm = tm;
		rc = describe_all(tm, &h->ld, &h->n);
	}
	if (!rc)
		rc = zn_hf_open(&h->s, path);
	if (!rc && !zn_hf_src_config(h->s) && !tm->fam->file) {
		zn_error("--init-from %s: no config.json beside the file: a %s-family "
			 "checkpoint needs its config", path, tm->fam->name);
		rc = -EINVAL;
	} else if (!rc && !zn_hf_src_config(h->s)) {
		rc = zn_st_open(&h->bare, path);
	} else if (!rc && zn_hf_src_config_json(h->s)) {
		rc = zn_bnb_config_parse(zn_hf_src_config_json(h->s), path, &h->bnb);
		/* a 4-bit checkpoint's weights are checked by its layouts */
		if (!rc && !h->bnb.present)
			rc = zn_hf_check_layout(h->s);
	} else if (!rc) {
		rc = zn_hf_check_layout(h->s);
	}
	if (rc) {
		zn_train_hf_loader_close(h);
		return rc;
	}
	*out = h;
	return 0;
}

void zn_train_hf_loader_close(struct zn_train_hf_loader *h)
{
	if (!h)
		return;
	zn_st_close(h->bare);
	zn_hf_close(h->s);
	zn_layer_descs_free(h->ld, h->n);
	free(h->q4);
	free(h);
}

bool zn_train_hf_is_4bit(const struct zn_train_hf_loader *h)
{
	return h && h->bnb.present;
}

int zn_train_hf_q4_layouts(struct zn_train_hf_loader *h, enum zn_dtype stored,
			   const struct zn_q4_layer **out)
{
	int rc = 0;

	*out = NULL;
	free(h->q4);
	h->q4 = zn_size_calloc((uint64_t)h->n, sizeof(*h->q4), "the 4-bit base's layouts");
	if (!h->q4)
		return -ENOMEM;
	h->stored = stored;
	for (int l = 0; !rc && l < h->n; l++)
		rc = zn_bnb_layout(h->s, &h->ld[l], h->ld[l].numel, stored, &h->q4[l]);
	*out = rc ? NULL : h->q4;
	return rc;
}

int zn_train_hf_load_q4(void *ctx, int l, void *extent)
{
	struct zn_train_hf_loader *h = ctx;

	if (!h->q4 || l < 0 || l >= h->n)
		return -EINVAL;
	return zn_bnb_read_layer(h->s, &h->ld[l], &h->q4[l], h->stored, extent);
}

/* A NaN or infinity in a checkpoint would only show as a NaN loss steps later. */
static int check_finite(const struct zn_layer_desc *L, const float *p, const char *path)
{
	for (int t = 0; t < L->tensor_count; t++) {
		const struct zn_tensor_desc *td = &L->tensors[t];
		const float *x = p + td->offset;

		for (uint64_t i = 0; i < td->numel; i++) {
			if (isfinite(x[i]))
				continue;
			zn_error("--init-from %s: tensor %s holds %s at element %llu: the "
				 "checkpoint is corrupt or its training diverged; start from "
				 "another one", path, td->name, isnan(x[i]) ? "NaN" : "an infinity",
				 (unsigned long long)i);
			return -ERANGE;
		}
	}
	return 0;
}

static int load_dequantized(struct zn_train_hf_loader *h, int l, float *params_h)
{
	struct zn_q4_layer q;
	void *x;
	int rc = zn_bnb_layout(h->s, &h->ld[l], h->ld[l].numel, ZN_DTYPE_F32, &q);

	if (rc)
		return rc;
	x = zn_size_calloc(1, q.bytes, "a 4-bit layer");
	if (!x)
		return -ENOMEM;
	rc = zn_bnb_read_layer(h->s, &h->ld[l], &q, ZN_DTYPE_F32, x);
	if (!rc)
		rc = zn_q4_unpack(&q, params_h, x, ZN_DTYPE_F32);
	free(x);
	return rc ? rc : check_finite(&h->ld[l], params_h, zn_hf_src_path(h->s));
}

int zn_train_hf_load_layer(void *ctx, int l, const struct zn_layer_desc *L, float *params_h)
{
	struct zn_train_hf_loader *h = ctx;
	const char *path = zn_hf_src_path(h->s);
	int rc = 0;

	if (l < 0 || l >= h->n || L->numel != h->ld[l].numel)
		return -EINVAL;
	L = &h->ld[l];
	if (h->bnb.present) /* a 4-bit checkpoint read as fp32: dequantized as the device does */
		return load_dequantized(h, l, params_h);
	if (h->bare)
		rc = h->tm->fam->file->load_layer(h->bare, h->tm->config, h->ld, h->n, l,
						  params_h);
	for (int i = 0; !h->bare && !rc && i < L->tensor_count; i++)
		rc = load_tensor(h->s, &L->tensors[i], params_h + L->tensors[i].offset);
	if (!rc)
		rc = check_finite(L, params_h, path);
	return rc;
}

/* The layers, one at a time, from read (the engine's: every rank reads layers 0 .. n-1 in
 * order, the read is collective; or zinc merge's): the writer asks for the tensors in
 * layer order and each fill reads its layer into the one buffer when it is not there yet. */
struct layer_stream {
	int (*read)(void *ctx, int l, float *buf);
	void *ctx;
	const struct zn_layer_desc *ld;
	int n, have; /* the layer in buf, or the last one read; -1 none */
	float *buf;  /* the largest layer's numel floats */
};

struct tensor_ref {
	struct layer_stream *ls;
	int layer;
	const struct zn_tensor_desc *d;
	int part; /* a stack of experts' part (model.h), else 0 */
	char name[ZN_MODEL_NAME_MAX + 32];
};

static int stream_to(struct layer_stream *ls, int l)
{
	int rc = 0;

	while (!rc && ls->have < l)
		rc = ls->read(ls->ctx, ++ls->have, ls->buf);
	return rc;
}

static int fill_tensor(void *ctx, float *out)
{
	const struct tensor_ref *t = ctx;
	const float *src = t->ls->buf + t->d->offset;
	int rc;

	if (t->layer < t->ls->have)
		return -EINVAL; /* out of order: the writer's contract is in order */
	rc = stream_to(t->ls, t->layer);
	if (rc)
		return rc;
	if (t->d->parts > 0) {
		uint64_t n = t->d->numel / (uint64_t)t->d->parts;

		memcpy(out, src + (uint64_t)t->part * n, n * sizeof(float));
	} else if (t->d->transpose)
		transpose(out, src, t->d->shape[1], t->d->shape[0]);
	else /* wte: its first V rows */
		memcpy(out, src, (size_t)(t->d->file_shape[0] * t->d->file_shape[1]) *
		       sizeof(float));
	return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

/* path ending in .safetensors: one file (a family with file ops: its metadata, GPT-2's;
 * else the config.json text in the metadata); else a directory */
static int write_out(const struct zn_train_model *tm, struct layer_stream *ls,
		     const char *path, const struct zn_hf_save_opts *o)
{
	int n = ls->n, count = 0, rc;
	uint64_t total = 0;
	struct zn_st_entry *e;
	struct tensor_ref *tr;
	struct zn_hf_config c;

	for (int l = 0; l < n; l++) /* the checkpoint's tensors: a stack of experts is many */
		for (int i = 0; i < ls->ld[l].tensor_count; i++)
			total += (uint64_t)zn_tensor_part_count(&ls->ld[l].tensors[i]);
	e = zn_size_calloc(total, sizeof(*e), "the saved tensors' entries");
	tr = zn_size_calloc(total, sizeof(*tr), "the saved tensors' references");
	zn_train_model_hf(tm, &c);
	rc = e && tr ? 0 : -ENOMEM;
	for (int l = 0; !rc && l < n; l++) {
		for (int i = 0; i < ls->ld[l].tensor_count; i++) {
			const struct zn_tensor_desc *d = &ls->ld[l].tensors[i];

			for (int j = 0; j < zn_tensor_part_count(d); j++, count++) {
				tr[count] = (struct tensor_ref){ ls, l, d, j, "" };
				zn_tensor_part_name(d, j, tr[count].name, sizeof(tr[count].name));
				e[count].name = tr[count].name;
				e[count].ndim = d->ndim;
				e[count].shape[0] = d->parts > 0 ? d->shape[0] / d->parts :
								   d->file_shape[0];
				e[count].shape[1] = d->file_shape[1];
				e[count].fill = fill_tensor;
				e[count].ctx = &tr[count];
			}
		}
	}
	if (!rc && tm->fam->file && ends_with(path, ".safetensors")) {
		/* one file with the family's own metadata (GPT-2's shape keys) */
		rc = tm->fam->file->save(tm->config, path, o->dtype, e, count);
	} else if (!rc) {
		rc = zn_hf_save(path, &c, o, e, count);
	}
	free(tr);
	free(e);
	return rc;
}

static int engine_read(void *ctx, int l, float *buf)
{
	return zn_engine_read_layer(ctx, l, buf);
}

/* the buffer of the largest layer and the descriptors, for a stream from read */
static int stream_open(struct layer_stream *ls, const struct zn_train_model *tm,
		       int (*read)(void *ctx, int l, float *buf), void *ctx)
{
	struct zn_layer_desc *ld = NULL;
	uint64_t max = 0;
	int rc;

	*ls = (struct layer_stream){ read, ctx, NULL, 0, -1, NULL };
	rc = describe_all(tm, &ld, &ls->n);
	for (int l = 0; !rc && l < ls->n; l++)
		max = ld[l].numel > max ? ld[l].numel : max;
	ls->ld = ld;
	ls->buf = rc ? NULL : zn_size_alloc(zn_size_add(zn_size_mul(max, sizeof(float)), 1),
						   "a layer to save");
	return rc ? rc : ls->buf ? 0 : -ENOMEM;
}

static void stream_close(struct layer_stream *ls)
{
	free(ls->buf);
	zn_layer_descs_free((struct zn_layer_desc *)(uintptr_t)ls->ld, ls->n);
}

int zn_train_hf_write(const struct zn_train_model *tm,
		      int (*read)(void *ctx, int l, float *buf), void *ctx, const char *path,
		      const struct zn_hf_save_opts *o)
{
	struct layer_stream ls;
	int rc = stream_open(&ls, tm, read, ctx);

	if (!rc)
		rc = write_out(tm, &ls, path, o);
	stream_close(&ls);
	return rc;
}

int zn_train_hf_save(struct zn_engine *e, const struct zn_train_model *tm, const char *path,
		     const char *what, enum zn_dtype dtype, uint64_t shard_bytes,
		     const char *init_from)
{
	struct zn_hf_save_opts o = { dtype, shard_bytes, NULL, what };
	struct zn_hf_src *src = NULL;
	struct layer_stream ls;
	int rc, rc2;

	rc = stream_open(&ls, tm, engine_read, e);
	/* the config the run started from, for its other keys */
	if (!rc && zn_engine_rank(e) == 0 && init_from && !zn_hf_open(&src, init_from))
		o.base_config = zn_hf_src_config_json(src);
	if (!rc && zn_engine_rank(e) == 0)
		rc = write_out(tm, &ls, path, &o);
	/* every rank reads every layer, whatever rank 0's writing did */
	rc2 = ls.buf ? stream_to(&ls, ls.n - 1) : 0;
	zn_hf_close(src);
	stream_close(&ls);
	return rc ? rc : rc2;
}

int zn_train_hf_output_check(const char *path)
{
	struct stat st;
	char inner[ZN_PATH_MAX + 16];
	size_t len = strlen(path);

	if ((len >= 12 && !strcmp(path + len - 12, ".safetensors")) || lstat(path, &st) ||
	    !S_ISDIR(st.st_mode) || len >= ZN_PATH_MAX)
		return zn_output_check(path, "--save-final");
	snprintf(inner, sizeof(inner), "%s/config.json", path);
	return zn_output_check(inner, "--save-final");
}
