/* PEFT's files (lora.h): adapter_model.safetensors with PEFT's tensor names and
 * adapter_config.json, written and read. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include "core/fsio.h"
#include "core/log.h"
#include "model/lora/lora.h"
#include "model/safetensors.h"

static int join(char *out, size_t size, const char *dir, const char *name)
{
	if ((size_t)snprintf(out, size, "%s/%s", dir, name) >= size) {
		zn_error("adapter directory path too long: %s", dir);
		return -ENAMETOOLONG;
	}
	return 0;
}

static int write_config(const struct zn_lora_config *cfg, const char *dir, const char *base)
{
	char path[ZN_PATH_MAX + 32], targets[ZN_LORA_MAX_TARGETS * (ZN_LORA_NAME_MAX + 4)];
	char *text = NULL, *quoted;
	cJSON *node;
	size_t used = 0, size;
	bool conv1d = zn_lora_base_conv1d(cfg); /* Conv1D [in, out] weights */
	int rc = join(path, sizeof(path), dir, "adapter_config.json");

	targets[0] = '\0';
	for (int i = 0; i < cfg->target_count; i++)
		used += (size_t)snprintf(targets + used, sizeof(targets) - used, "%s\"%s\"",
					 i ? ", " : "", cfg->targets[i]);
	/* the base's name as a JSON string (escaped), or null */
	node = base ? cJSON_CreateString(base) : NULL;
	quoted = node ? cJSON_PrintUnformatted(node) : NULL;
	cJSON_Delete(node);
	size = strlen(targets) + strlen(quoted ? quoted : "") + 1024;
	text = base && !quoted ? NULL : malloc(size);
	if (!text) {
		free(quoted);
		return -ENOMEM;
	}
	snprintf(text, size,
		 "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n"
		 "  \"base_model_name_or_path\": %s,\n  \"r\": %d,\n  \"lora_alpha\": %.9g,\n"
		 "  \"lora_dropout\": %.9g,\n  \"use_rslora\": %s,\n  \"target_modules\": [%s],\n"
		 "  \"fan_in_fan_out\": %s,\n  \"bias\": \"none\",\n  \"inference_mode\": true,\n"
		 "  \"init_lora_weights\": true,\n  \"modules_to_save\": null,\n"
		 "  \"layers_to_transform\": null,\n  \"layers_pattern\": null,\n"
		 "  \"rank_pattern\": {},\n  \"alpha_pattern\": {},\n  \"revision\": null\n}\n",
		 quoted ? quoted : "null", cfg->r,
		 (double)cfg->alpha, (double)cfg->dropout, cfg->rslora ? "true" : "false",
		 targets, conv1d ? "true" : "false");
	if (!rc)
		rc = zn_write_file_atomic(path, "--save-adapter", text, strlen(text));
	free(text);
	free(quoted);
	return rc;
}

int zn_lora_save_peft(const struct zn_lora_config *cfg, const float *const *adapters,
		      const char *dir, const char *base_name)
{
	struct zn_layer_desc *d = calloc((size_t)cfg->layers, sizeof(*d));
	struct zn_st_entry *e = NULL;
	char path[ZN_PATH_MAX + 32];
	int count = 0, total = 0, rc = d ? 0 : -ENOMEM;

	/* made when missing; a link there is refused, never written through */
	if (!rc)
		rc = zn_output_dir_make(dir, "--save-adapter");
	for (int l = 0; !rc && l < cfg->layers; l++) {
		rc = zn_lora_describe(cfg, l, &d[l]);
		total += rc ? 0 : d[l].tensor_count;
	}
	if (!rc && !(e = calloc((size_t)total + 1, sizeof(*e))))
		rc = -ENOMEM;
	for (int l = 0; !rc && l < cfg->layers; l++) {
		for (int t = 0; t < d[l].tensor_count; t++, count++) {
			const struct zn_tensor_desc *td = &d[l].tensors[t];

			e[count].name = td->name;
			e[count].ndim = 2;
			e[count].shape[0] = td->shape[0];
			e[count].shape[1] = td->shape[1];
			e[count].data_h = adapters[l] + td->offset;
		}
	}
	if (!rc)
		rc = join(path, sizeof(path), dir, "adapter_model.safetensors");
	if (!rc)
		rc = zn_st_write(path, ZN_DTYPE_F32, e, count, NULL, NULL, 0);
	if (!rc)
		rc = write_config(cfg, dir, base_name);
	free(e);
	zn_layer_descs_free(d, cfg->layers);
	return rc;
}

/* The module path of PEFT's tensor name "base_model.model.<module>.lora_X.weight" into
 * out (the whole name when it is not one); its last part in *leaf. */
static void module_of(const char *name, char *out, size_t size, const char **leaf)
{
	const char *p = strncmp(name, "base_model.model.", 17) ? name : name + 17;
	const char *end = strstr(p, ".lora_");
	size_t n = end ? (size_t)(end - p) : strlen(p);

	snprintf(out, size, "%.*s", (int)n, p);
	*leaf = strrchr(out, '.') ? strrchr(out, '.') + 1 : out;
}

/* Is name one of the adapter tensors of layers d[0 .. n)? */
static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The adapters' names of the n descriptors d, sorted (malloc'd; *count of them): a layer with
 * LoRA on every expert has hundreds, so a file's tensors are looked up, not scanned. */
static const char **sorted_names(const struct zn_layer_desc *d, int n, int *count)
{
	const char **s;
	int k = 0;

	for (int l = 0; l < n; l++)
		k += d[l].tensor_count;
	s = malloc(((size_t)k + 1) * sizeof(*s));
	if (!s)
		return NULL;
	k = 0;
	for (int l = 0; l < n; l++)
		for (int t = 0; t < d[l].tensor_count; t++)
			s[k++] = d[l].tensors[t].name;
	qsort(s, (size_t)k, sizeof(*s), cmp_name);
	*count = k;
	return s;
}

static bool is_adapter(const char **sorted, int count, const char *name)
{
	return bsearch(&name, sorted, (size_t)count, sizeof(*sorted), cmp_name) != NULL;
}

static bool is_target(const struct zn_lora_config *cfg, const char *name)
{
	for (int i = 0; i < cfg->target_count; i++)
		if (!strcmp(cfg->targets[i], name))
			return true;
	return false;
}

/* What is wrong with the file's tensors that are none of the run's adapters. */
enum extra_kind {
	EXTRA_OTHER,   /* no lora_A / lora_B weight: bias, DoRA magnitude, embedding, ... */
	EXTRA_OUTSIDE, /* a module outside the targets */
	EXTRA_ABSENT,  /* a targeted name at a path this model does not have */
	EXTRA_KINDS
};

static void report_extra(const struct zn_lora_config *cfg, const struct zn_st_file *f,
			 const int *count, char (*first)[ZN_ST_NAME_MAX], const char *leaves)
{
	char targets[ZN_LORA_MAX_TARGETS * (ZN_LORA_NAME_MAX + 1)] = "";

	for (int i = 0, u = 0; i < cfg->target_count; i++)
		u += snprintf(targets + u, sizeof(targets) - (size_t)u, "%s%s", i ? "," : "",
			      cfg->targets[i]);
	if (count[EXTRA_OTHER])
		zn_error("--init-adapter %s: %d tensors are no LoRA factor zinc trains (e.g. %s: "
			 "a bias, a DoRA magnitude, an embedding adapter or a module to save): the "
			 "adapter is not plain LoRA on linear layers", zn_st_path(f),
			 count[EXTRA_OTHER], first[EXTRA_OTHER]);
	else if (count[EXTRA_OUTSIDE])
		zn_error("--init-adapter %s: %d tensors are adapters of modules outside "
			 "--lora-targets %s: %s (e.g. %s): add them to --lora-targets, or leave "
			 "--lora-targets out to take the adapter's target_modules", zn_st_path(f),
			 count[EXTRA_OUTSIDE], targets, leaves, first[EXTRA_OUTSIDE]);
	else
		zn_error("--init-adapter %s: %d tensors are adapters of modules this %s model "
			 "does not have (e.g. %s): the adapter was made for another model",
			 zn_st_path(f), count[EXTRA_ABSENT], cfg->base.ops->family,
			 first[EXTRA_ABSENT]);
}

/* Tensors of the file that are none of cfg's adapters: refused, naming them (a tensor left
 * out would be lost at --save-adapter). */
static int check_extra(const struct zn_lora_config *cfg, const struct zn_st_file *f)
{
	char leaves[256] = "", first[EXTRA_KINDS][ZN_ST_NAME_MAX];
	struct zn_layer_desc *d = calloc((size_t)cfg->layers, sizeof(*d));
	int count[EXTRA_KINDS] = { 0 }, rc = d ? 0 : -ENOMEM, n = 0;
	const char **names = NULL;
	size_t used = 0;

	for (int l = 0; !rc && l < cfg->layers; l++)
		rc = zn_lora_describe(cfg, l, &d[l]);
	if (!rc && !(names = sorted_names(d, cfg->layers, &n)))
		rc = -ENOMEM;
	for (int i = 0; !rc && i < zn_st_tensor_count(f); i++) {
		const struct zn_st_tensor *s = zn_st_tensor_at(f, i);
		char module[ZN_ST_NAME_MAX];
		const char *leaf, *ab = strstr(s->name, ".lora_");
		enum extra_kind k;

		if (is_adapter(names, n, s->name))
			continue;
		module_of(s->name, module, sizeof(module), &leaf);
		k = !ab || (strcmp(ab, ".lora_A.weight") && strcmp(ab, ".lora_B.weight")) ?
			    EXTRA_OTHER : is_target(cfg, leaf) ? EXTRA_ABSENT : EXTRA_OUTSIDE;
		if (!count[k]++)
			snprintf(first[k], sizeof(first[k]), "%s", s->name);
		if (k == EXTRA_OUTSIDE && !strstr(leaves, leaf) &&
		    used + strlen(leaf) + 3 < sizeof(leaves))
			used += (size_t)snprintf(leaves + used, sizeof(leaves) - used, "%s%s",
						 used ? ", " : "", leaf);
	}
	free(names);
	zn_layer_descs_free(d, cfg->layers);
	if (!rc && (count[EXTRA_OTHER] || count[EXTRA_OUTSIDE] || count[EXTRA_ABSENT])) {
		report_extra(cfg, f, count, first, leaves);
		rc = -EINVAL;
	}
	return rc;
}

/* NaN or Inf anywhere in tensor `name`: refused, naming it and the first such element */
static int check_finite(const struct zn_st_file *f, const struct zn_tensor_desc *d,
			const float *v)
{
	for (uint64_t i = 0; i < d->numel; i++)
		if (!isfinite(v[i])) {
			zn_error("--init-adapter %s: %s holds %s at [%llu, %llu]: the adapter is "
				 "damaged (a diverged run?); give another one", zn_st_path(f),
				 d->name, isnan(v[i]) ? "NaN" : "Inf",
				 (unsigned long long)(i / (uint64_t)d->shape[1]),
				 (unsigned long long)(i % (uint64_t)d->shape[1]));
			return -EINVAL;
		}
	return 0;
}

static int read_tensor(const struct zn_st_file *f, const struct zn_tensor_desc *d, float *out)
{
	const struct zn_st_tensor *s = zn_st_find(f, d->name);
	int rc;

	if (!s || s->ndim != 2 || s->shape[0] != d->shape[0] || s->shape[1] != d->shape[1]) {
		zn_error("--init-adapter %s: %s %s (want [%lld, %lld]): the adapter was made for "
			 "other targets, r or model", zn_st_path(f), d->name,
			 s ? "has another shape" : "is missing", (long long)d->shape[0],
			 (long long)d->shape[1]);
		return -EINVAL;
	}
	rc = zn_st_read_f32(f, s, out);
	return rc ? rc : check_finite(f, d, out);
}

/* Every adapter of cfg is in the file with its shape and finite values. */
static int check_all(const struct zn_lora_config *cfg, const struct zn_st_file *f)
{
	float *buf = NULL;
	uint64_t cap = 0;
	int rc = 0;

	for (int l = 0; !rc && l < cfg->layers; l++) {
		struct zn_layer_desc d;

		rc = zn_lora_describe(cfg, l, &d);
		for (int t = 0; !rc && t < d.tensor_count; t++) {
			if (d.tensors[t].numel > cap) {
				float *p = realloc(buf, d.tensors[t].numel * sizeof(float));

				if (!p) {
					rc = -ENOMEM;
					break;
				}
				buf = p;
				cap = d.tensors[t].numel;
			}
			rc = read_tensor(f, &d.tensors[t], buf);
		}
		zn_layer_desc_release(&d);
	}
	free(buf);
	return rc;
}

int zn_lora_peft_open(const struct zn_lora_config *cfg, const char *dir,
		      struct zn_st_file **out)
{
	char path[ZN_PATH_MAX + 32];
	int rc = join(path, sizeof(path), dir, "adapter_model.safetensors");

	*out = NULL;
	if (!rc)
		rc = zn_st_open(out, path);
	if (!rc)
		rc = check_extra(cfg, *out);
	if (!rc)
		rc = check_all(cfg, *out);
	if (rc) {
		zn_st_close(*out);
		*out = NULL;
	}
	return rc;
}

int zn_lora_peft_load_layer(const struct zn_st_file *f, const struct zn_layer_desc *L,
			    float *params_h)
{
	int rc = 0;

	for (int t = 0; !rc && t < L->tensor_count; t++)
		rc = read_tensor(f, &L->tensors[t], params_h + L->tensors[t].offset);
	return rc;
}
