/* Finding and reading tensors of an open Hugging Face source (hf_dir.h): shards opened on
 * first use, rows converted to the wanted dtype, the config's layout checked. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/family.h"
#include "model/hf_dir_impl.h"

static int shard_file(struct zn_hf_src *s, int i, const struct zn_st_file **f)
{
	struct shard *sh = &s->shards[i];
	char *p;
	int rc = 0;

	if (!sh->f) {
		p = zn_hf_join(s->dir, sh->name);
		if (!p)
			return -ENOMEM;
		rc = zn_st_open(&sh->f, p);
		free(p);
	}
	*f = sh->f;
	return rc;
}

static int find_exact(struct zn_hf_src *s, const char *name, const struct zn_st_tensor **t,
		      const struct zn_st_file **file)
{
	struct mapped key = { name, 0 }, *m = NULL;
	const struct zn_st_file *f;
	int rc;

	if (s->map) {
		m = bsearch(&key, s->map, (size_t)s->mapped_count, sizeof(*m), zn_hf_cmp_mapped);
		if (!m)
			return -ENOENT;
	}
	rc = shard_file(s, m ? m->shard : 0, &f);
	if (rc)
		return rc;
	*t = zn_st_find(f, name);
	if (file)
		*file = f;
	if (*t)
		return 0;
	if (!m)
		return -ENOENT;
	zn_error("%s: key \"weight_map\".\"%s\" puts the tensor in %s, which has no such "
		 "tensor", s->index_path, name, zn_st_path(f));
	return -EINVAL;
}

int zn_hf_find(struct zn_hf_src *s, const char *name, const struct zn_st_tensor **t,
	       const struct zn_st_file **file)
{
	const char *prefix = s->has_config ? s->config.family->hf_prefix : NULL;
	int rc = find_exact(s, name, t, file);

	/* hub checkpoints that dropped the family's prefix (GPT-2's "transformer.") */
	if (rc == -ENOENT && prefix && !strncmp(name, prefix, strlen(prefix)))
		rc = find_exact(s, name + strlen(prefix), t, file);
	return rc;
}

/* Where a missing tensor should have been: the index, or the one file. */
const char *zn_hf_expected_in(const struct zn_hf_src *s)
{
	return s->index_path ? s->index_path : s->shards[0].f ? zn_st_path(s->shards[0].f) :
								 s->path;
}

int zn_hf_read_rows(struct zn_hf_src *s, const char *name, int64_t row0, int64_t rows,
		    enum zn_dtype want, void *out_h)
{
	const struct zn_st_tensor *t;
	const struct zn_st_file *f;
	uint64_t row_numel = 1, nrows;
	int rc = zn_hf_find(s, name, &t, &f);

	if (rc == -ENOENT)
		zn_error("%s: no tensor '%s'", zn_hf_expected_in(s), name);
	if (rc)
		return rc;
	for (int d = 1; d < t->ndim; d++)
		row_numel *= (uint64_t)t->shape[d];
	nrows = t->ndim ? (uint64_t)t->shape[0] : 1;
	if (row0 < 0 || rows < 0 || (uint64_t)row0 > nrows || (uint64_t)rows > nrows - (uint64_t)row0) {
		zn_error("%s: tensor '%s': rows [%lld, %lld) are outside its %llu rows",
			 zn_st_path(f), name, (long long)row0, (long long)(row0 + rows),
			 (unsigned long long)nrows);
		return -EINVAL;
	}
	return zn_st_read_range(f, t, (uint64_t)row0 * row_numel, (uint64_t)rows * row_numel,
				want, out_h);
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
	int at = snprintf(buf, n, "[");

	for (int d = 0; d < ndim && at < (int)n; d++)
		at += snprintf(buf + at, n - (size_t)at, d ? ", %lld" : "%lld",
			       (long long)shape[d]);
	if (at < (int)n)
		snprintf(buf + at, n - (size_t)at, "]");
}

bool zn_hf_fused_expert_name(const struct zn_hf_src *s, const char *name, char *fused,
			     size_t size, int *factor)
{
	const struct zn_family *f = s->config.family;

	return f && f->hf_fused_name && f->hf_fused_name(name, fused, size, factor);
}

/* A missing expert tensor that the file holds inside transformers 5's fused stack */
static bool in_fused(struct zn_hf_src *s, const struct zn_hf_tensor_spec *sp)
{
	const struct zn_st_tensor *t;
	const struct zn_st_file *f;
	char name[ZN_HF_NAME_MAX + 16];
	int factor;

	if (sp->ndim != 2 || !zn_hf_fused_expert_name(s, sp->name, name, sizeof(name), &factor) ||
	    zn_hf_find(s, name, &t, &f))
		return false;
	return t->ndim == 3 && t->shape[0] == s->config.num_experts &&
	       t->shape[1] == factor * sp->shape[0] && t->shape[2] == sp->shape[1] && t->dtype >= 0;
}

static int check_tensor(struct zn_hf_src *s, const struct zn_hf_tensor_spec *sp)
{
	const struct zn_st_tensor *t;
	const struct zn_st_file *f;
	char have[96], want[96];
	bool ok;
	int rc = zn_hf_find(s, sp->name, &t, &f);

	if (rc == -ENOENT && in_fused(s, sp))
		return 0;
	if (rc == -ENOENT)
		zn_error("%s: no tensor '%s', which a %s model with %lld layers has",
			 zn_hf_expected_in(s), sp->name, zn_hf_model_type(&s->config),
			 (long long)s->config.num_hidden_layers);
	if (rc)
		return rc;
	ok = t->ndim == sp->ndim;
	for (int d = 0; ok && d < sp->ndim; d++)
		ok = t->shape[d] == sp->shape[d];
	if (!ok) {
		shape_str(have, sizeof(have), t->ndim, t->shape);
		shape_str(want, sizeof(want), sp->ndim, sp->shape);
		zn_error("%s: tensor '%s' has shape %s but the config gives %s: config.json and "
			 "the weights do not match", zn_st_path(f), t->name, have, want);
		return -EINVAL;
	}
	if (t->dtype < 0) {
		zn_error("%s: tensor '%s' is %s: zinc reads F32, BF16 and F16", zn_st_path(f),
			 t->name, t->dtype_name);
		return -EINVAL;
	}
	return 0;
}

static int cmp_spec(const void *a, const void *b)
{
	return strcmp(((const struct zn_hf_tensor_spec *)a)->name,
		      ((const struct zn_hf_tensor_spec *)b)->name);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

/* A checkpoint tensor the layout (specs, sorted by name) does not use. Buffers that
 * checkpoints carry (the family's hf_buffers: GPT-2's attention masks, old Llama rotary
 * inv_freq) and a tied lm_head are expected. */
static bool unused(const struct zn_hf_src *s, const struct zn_hf_tensor_spec *specs, int n,
		   const char *name)
{
	const struct zn_family *f = s->config.family;
	struct zn_hf_tensor_spec key;

	for (int i = 0; f->hf_buffers && f->hf_buffers[i]; i++)
		if (ends_with(name, f->hf_buffers[i]))
			return false;
	if (!strcmp(name, "lm_head.weight") || (f->hf_fused_stack && f->hf_fused_stack(name)))
		return false; /* a tied head; transformers 5's fused experts (in_fused) */
	/* a name longer than any the model has is not one of them (not cut to match) */
	if (snprintf(key.name, sizeof(key.name), "%s%s",
		     f->hf_prefix && strncmp(name, f->hf_prefix, strlen(f->hf_prefix)) ?
			     f->hf_prefix : "", name) >= (int)sizeof(key.name))
		return true;
	return !bsearch(&key, specs, (size_t)n, sizeof(*specs), cmp_spec);
}

/* One warning for the checkpoint's tensors that the model does not use (a checkpoint
 * deeper or wider than its config.json says). */
static void warn_unused(struct zn_hf_src *s, struct zn_hf_tensor_spec *specs, int n)
{
	const struct zn_st_file *f = s->shards[0].f;
	int count = s->map ? s->mapped_count : zn_st_tensor_count(f), extra = 0;
	const char *first = NULL;

	qsort(specs, (size_t)n, sizeof(*specs), cmp_spec);
	for (int i = 0; i < count; i++) {
		const char *name = s->map ? s->map[i].name : zn_st_tensor_at(f, i)->name;

		if (unused(s, specs, n, name) && !extra++)
			first = name;
	}
	if (extra)
		zn_warn("%s: %d tensors are not part of the %s model config.json describes and "
			"are ignored (first: '%s')", zn_hf_expected_in(s), extra,
			zn_hf_model_type(&s->config), first);
}

int zn_hf_check_layout(struct zn_hf_src *s)
{
	struct zn_hf_tensor_spec *specs;
	int n, rc = 0;

	if (!s->has_config) {
		zn_error("%s: no config (no config.json beside the file, no metadata)", s->path);
		return -EINVAL;
	}
	n = zn_hf_layout_count(&s->config);
	specs = malloc((size_t)n * sizeof(*specs));
	if (!specs)
		return -ENOMEM;
	zn_hf_layout(&s->config, specs);
	for (int i = 0; !rc && i < n; i++)
		rc = check_tensor(s, &specs[i]);
	if (!rc)
		warn_unused(s, specs, n);
	free(specs);
	return rc;
}
