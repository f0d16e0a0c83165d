/* The model of a zinc command, of any registered family (model/family.h); see
 * train_model.h. */
#include "train/train_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsio.h"
#include "core/log.h"
#include "model/hf_dir.h"

/* The config of path (--init-from: a checkpoint; --model-config: config.json or a
 * directory holding one) into *hf; *have false for a lone file without config. */
static int source_config(const char *path, bool checkpoint, struct zn_hf_config *hf,
			 bool *have)
{
	struct zn_hf_src *s = NULL;
	char inner[ZN_PATH_MAX + 16];
	struct stat st;
	int rc;

	*have = false;
	if (!checkpoint) {
		if (!stat(path, &st) && S_ISDIR(st.st_mode) && strlen(path) < ZN_PATH_MAX) {
			snprintf(inner, sizeof(inner), "%s/config.json", path);
			path = inner;
		}
		rc = zn_hf_config_load(path, hf);
		if (rc)
			zn_error("--model-config %s: cannot read it as a Hugging Face config.json",
				 path);
		*have = !rc;
		return rc ? -EINVAL : 0;
	}
	rc = zn_hf_open(&s, path);
	if (!rc && zn_hf_src_config(s)) {
		*hf = *zn_hf_src_config(s);
		*have = true;
	}
	zn_hf_close(s);
	return rc ? -EINVAL : 0;
}

static const char *preset_flag(int argc, char **argv)
{
	const char *name = NULL;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--model") && i + 1 < argc)
			name = argv[++i];
		else if (!strncmp(argv[i], "--model=", 8))
			name = argv[i] + 8;
	}
	return name;
}

/* The family of a lone .safetensors file without config: the one that reads such files. */
static const struct zn_family *file_family(const char *src)
{
	for (int i = 0; i < zn_family_count(); i++)
		if (zn_family_at(i)->file)
			return zn_family_at(i);
	zn_error("%s: no config.json and no metadata that says which model it holds", src);
	return NULL;
}

int zn_train_model_parse(struct zn_train_model *tm, int argc, char **argv,
			 const char *init_from, const char *model_config, char **rest,
			 int *rest_count)
{
	const char *src = init_from ? init_from : model_config;
	const char *preset = preset_flag(argc, argv);
	struct zn_family_source fs = { NULL, init_from ? "--init-from" : "--model-config", src,
				       argc, argv, rest, rest_count };
	struct zn_hf_config hf;
	bool have = false;
	char list[1024];
	int rc = 0;

	memset(tm, 0, sizeof(*tm));
	*rest_count = 0;
	if (src)
		rc = source_config(src, init_from != NULL, &hf, &have);
	if (rc)
		return rc;
	if (src) {
		fs.hf = have ? &hf : NULL;
		tm->fam = have ? hf.family : file_family(src);
		return tm->fam ? tm->fam->from_source(tm->config, &fs) : -EINVAL;
	}
	tm->fam = preset ? zn_family_of_preset(preset) : zn_family_at(0);
	if (!tm->fam) {
		zn_family_preset_list(list, sizeof(list));
		zn_error("--model '%s': no such preset: %s", preset, list);
		return -EINVAL;
	}
	return tm->fam->from_flags(tm->config, argc, argv, rest, rest_count);
}

struct zn_model zn_train_model_get(const struct zn_train_model *tm)
{
	return tm->fam ? tm->fam->model(tm->config) : (struct zn_model){ 0 };
}

/* A model whose parse failed (fam NULL) reads as zeros and empty lines: the ranks still
 * compare their texts before they stop. */
int zn_train_model_seq(const struct zn_train_model *tm)
{
	struct zn_model m = zn_train_model_get(tm);

	return tm->fam ? m.ops->max_seq(m.config) : 0;
}

int zn_train_model_vocab(const struct zn_train_model *tm)
{
	struct zn_model m = zn_train_model_get(tm);

	return tm->fam ? m.ops->vocab(m.config) : 0;
}

int zn_train_model_width(const struct zn_train_model *tm)
{
	struct zn_model m = zn_train_model_get(tm);

	return tm->fam ? m.ops->width(m.config) : 0;
}

uint64_t zn_train_model_params(const struct zn_train_model *tm)
{
	return tm->fam ? tm->fam->param_count(tm->config) : 0;
}

uint64_t zn_train_model_largest_layer(const struct zn_train_model *tm)
{
	struct zn_model m = zn_train_model_get(tm);
	struct zn_layer_desc L;
	uint64_t max = 0;

	for (int l = 0; tm->fam && l < m.ops->layer_count(m.config); l++) {
		if (m.ops->describe(m.config, l, &L))
			continue;
		max = L.numel > max ? L.numel : max;
		zn_layer_desc_release(&L);
	}
	return max;
}

void zn_train_model_hf(const struct zn_train_model *tm, struct zn_hf_config *c)
{
	tm->fam->to_hf(tm->config, c);
}

void zn_train_model_line(const struct zn_train_model *tm, char *buf, size_t size)
{
	if (tm->fam)
		tm->fam->line(tm->config, buf, size);
	else if (size)
		buf[0] = 0;
}

void zn_train_model_text(const struct zn_train_model *tm, char *buf, size_t size)
{
	if (tm->fam)
		tm->fam->text(tm->config, buf, size);
	else if (size)
		buf[0] = 0;
}

int zn_train_model_from_flags(int argc, char **argv, struct zn_train_model *out,
			      const char **init_from_out)
{
	char **args = calloc((size_t)argc + 1, sizeof(*args));
	char **left = calloc((size_t)argc + 1, sizeof(*left));
	const char *init_from = NULL, *model_config = NULL;
	struct zn_train_model tm;
	int n = 0, k = 0, rc = args && left ? 0 : -ENOMEM;

	for (int i = 0; !rc && i < argc; i++) {
		bool init = !strcmp(argv[i], "--init-from");

		if ((init || !strcmp(argv[i], "--model-config")) && i + 1 < argc)
			*(init ? &init_from : &model_config) = argv[++i];
		else
			args[n++] = argv[i];
	}
	if (!rc && init_from && model_config) {
		zn_error("--init-from and --model-config both define the model: give one");
		rc = -EINVAL;
	}
	if (!rc)
		rc = zn_train_model_parse(&tm, n, args, init_from, model_config, left, &k);
	if (!rc && k > 0) {
		zn_error("%s: not a model flag (the model flags: zinc train --help, \"model:\")",
			 left[0]);
		rc = -EINVAL;
	}
	if (!rc)
		*out = tm;
	if (!rc && init_from_out)
		*init_from_out = init_from;
	free(args);
	free(left);
	return rc;
}

int zn_train_model_size(int argc, char **argv, uint64_t *params, uint64_t *largest,
			char *line, size_t size)
{
	struct zn_train_model tm;
	int rc = zn_train_model_from_flags(argc, argv, &tm, NULL);

	if (!rc) {
		*params = zn_train_model_params(&tm);
		*largest = zn_train_model_largest_layer(&tm);
		zn_train_model_line(&tm, line, size);
	}
	return rc;
}

