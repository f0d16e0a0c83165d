/* Opening Hugging Face model directories and files: config.json (or the file's metadata)
 * and the index. Tensors are found and read in hf_dir_read.c, saving is in hf_save.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/fsio.h"
#include "core/json.h"
#include "core/log.h"
#include "model/hf_dir.h"

#include "model/family.h"
#include "model/hf_dir_impl.h"

void zn_hf_close(struct zn_hf_src *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->shard_count; i++) {
		zn_st_close(s->shards[i].f);
		free(s->shards[i].name);
	}
	free(s->shards);
	free(s->map);
	cJSON_Delete(s->index);
	free(s->config_json);
	free(s->index_path);
	free(s->dir);
	free(s->path);
	free(s);
}

const char *zn_hf_src_path(const struct zn_hf_src *s)
{
	return s->path;
}

const struct zn_hf_config *zn_hf_src_config(const struct zn_hf_src *s)
{
	return s->has_config ? &s->config : NULL;
}

const char *zn_hf_src_config_json(const struct zn_hf_src *s)
{
	return s->config_json;
}

char *zn_hf_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

static bool is_file(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode);
}

/* The whole small file (config.json, the index) as a string, or NULL (logged): a regular
 * file only (core/fsio), so a FIFO or directory is refused, never waited on. */
static char *slurp(const char *path, size_t *len, int *rc)
{
	char *text = NULL;

	*rc = zn_read_input_file(path, "Hugging Face file", 64u << 20, &text, len);
	return text;
}

static int load_config(struct zn_hf_src *s, const char *path)
{
	size_t len = 0;
	int rc;

	s->config_json = slurp(path, &len, &rc);
	if (rc)
		return rc;
	rc = zn_hf_config_parse_n(s->config_json, len, path, &s->config);
	s->has_config = !rc;
	return rc;
}

static int add_shard(struct zn_hf_src *s, const char *name)
{
	for (int i = 0; i < s->shard_count; i++)
		if (!strcmp(s->shards[i].name, name))
			return i;
	s->shards[s->shard_count].name = strdup(name);
	if (!s->shards[s->shard_count].name)
		return -ENOMEM;
	return s->shard_count++;
}

int zn_hf_cmp_mapped(const void *a, const void *b)
{
	return strcmp(((const struct mapped *)a)->name, ((const struct mapped *)b)->name);
}

/* A weight_map value: a file name in the directory, no folders. */
static int check_shard_name(const struct zn_hf_src *s, const cJSON *v)
{
	if (!cJSON_IsString(v) || !v->valuestring[0] || strchr(v->valuestring, '/') ||
	    !strcmp(v->valuestring, ".") || !strcmp(v->valuestring, "..")) {
		zn_error("%s: key \"weight_map\".\"%s\" must be a file name in the directory",
			 s->index_path, v->string);
		return -EINVAL;
	}
	return 0;
}

static int check_shard_exists(const struct zn_hf_src *s, const cJSON *v)
{
	char *p = zn_hf_join(s->dir, v->valuestring);
	bool ok;

	if (!p)
		return -ENOMEM;
	ok = is_file(p);
	if (!ok)
		zn_error("%s: key \"weight_map\".\"%s\" names shard %s, which does not exist: "
			 "the directory is incomplete (download it again)", s->index_path,
			 v->string, p);
	free(p);
	return ok ? 0 : -EINVAL;
}

static int load_index(struct zn_hf_src *s)
{
	struct zn_json_opts o = { .origin = s->index_path };
	char *text;
	size_t len = 0;
	const cJSON *wm, *v;
	int rc, n, i = 0;

	text = slurp(s->index_path, &len, &rc);
	if (rc)
		return rc;
	/* core/json: a tensor named twice in weight_map goes to its last shard, as
	 * transformers' json.load of the index has it */
	rc = zn_json_parse(text, len, &o, &s->index);
	free(text);
	if (rc)
		return rc;
	wm = cJSON_GetObjectItemCaseSensitive(s->index, "weight_map");
	if (!cJSON_IsObject(wm)) {
		zn_error("%s: %s", s->index_path, cJSON_IsObject(s->index) ?
			 "key \"weight_map\" is missing or not an object" : "not a JSON object");
		return -EINVAL;
	}
	n = cJSON_GetArraySize(wm);
	s->shards = calloc((size_t)n + 1, sizeof(*s->shards));
	s->map = calloc((size_t)n + 1, sizeof(*s->map));
	if (!s->shards || !s->map)
		return -ENOMEM;
	cJSON_ArrayForEach(v, wm) {
		int before = s->shard_count;

		rc = check_shard_name(s, v);
		if (rc)
			return rc;
		s->map[i].name = v->string;
		s->map[i].shard = add_shard(s, v->valuestring);
		if (s->map[i++].shard < 0)
			return -ENOMEM;
		if (s->shard_count > before) {
			rc = check_shard_exists(s, v);
			if (rc)
				return rc;
		}
	}
	s->mapped_count = n;
	qsort(s->map, (size_t)n, sizeof(*s->map), zn_hf_cmp_mapped);
	return 0;
}

/* config.json from the file's metadata: zinc's "config", or a family's own keys (its file
 * ops: GPT-2's shapes). */
static int config_from_metadata(struct zn_hf_src *s, const struct zn_st_file *f)
{
	const char *text = zn_st_metadata(f, "config");
	char own[512];

	for (int i = 0; !text && i < zn_family_count(); i++) {
		const struct zn_family *fam = zn_family_at(i);

		if (fam->file && fam->file->metadata_config(f, own, sizeof(own)))
			text = own;
	}
	if (!text)
		return 0;
	s->config_json = strdup(text);
	if (!s->config_json)
		return -ENOMEM;
	s->has_config = !zn_hf_config_parse(text, s->path, &s->config);
	return s->has_config ? 0 : -EINVAL;
}

static int open_file(struct zn_hf_src *s)
{
	char *slash = strrchr(s->path, '/');
	char *cfg;
	int rc;

	s->dir = slash ? strndup(s->path, (size_t)(slash - s->path)) : strdup(".");
	s->shards = calloc(1, sizeof(*s->shards));
	if (!s->dir || !s->shards)
		return -ENOMEM;
	s->shard_count = 1;
	s->shards[0].name = strdup(slash ? slash + 1 : s->path);
	if (!s->shards[0].name)
		return -ENOMEM;
	rc = zn_st_open(&s->shards[0].f, s->path);
	if (!rc)
		rc = config_from_metadata(s, s->shards[0].f);
	if (rc || s->has_config)
		return rc;
	cfg = zn_hf_join(s->dir, "config.json");
	if (!cfg)
		return -ENOMEM;
	if (is_file(cfg))
		rc = load_config(s, cfg);
	free(cfg);
	return rc;
}

static int open_dir(struct zn_hf_src *s)
{
	char *cfg = zn_hf_join(s->path, "config.json");
	char *single = zn_hf_join(s->path, SINGLE_NAME);
	int rc = -ENOMEM;

	s->dir = strdup(s->path);
	s->index_path = zn_hf_join(s->path, INDEX_NAME);
	if (!cfg || !single || !s->dir || !s->index_path)
		goto free_paths;
	rc = -EINVAL;
	if (!is_file(cfg)) {
		zn_error("%s: no config.json: a Hugging Face model directory needs it", s->path);
		goto free_paths;
	}
	rc = load_config(s, cfg);
	if (rc)
		goto free_paths;
	if (is_file(s->index_path)) {
		rc = load_index(s);
		goto free_paths;
	}
	free(s->index_path);
	s->index_path = NULL;
	if (!is_file(single)) {
		char *bin = zn_hf_join(s->path, "pytorch_model.bin");

		zn_error("%s: neither %s nor %s: no weights in the directory%s", s->path,
			 SINGLE_NAME, INDEX_NAME, bin && is_file(bin) ? " (pytorch_model.bin is "
			 "a pickle, which zinc does not read: save the model with "
			 "safe_serialization=True)" : "");
		free(bin);
		rc = -EINVAL;
		goto free_paths;
	}
	rc = -ENOMEM;
	s->shards = calloc(1, sizeof(*s->shards));
	if (!s->shards || add_shard(s, SINGLE_NAME) < 0)
		goto free_paths;
	rc = 0;
free_paths:
	free(single);
	free(cfg);
	return rc;
}

int zn_hf_open(struct zn_hf_src **out, const char *path)
{
	struct zn_hf_src *s = calloc(1, sizeof(*s));
	struct stat st;
	int rc = -ENOMEM;

	*out = NULL;
	if (!s)
		return rc;
	s->path = strdup(path);
	if (!s->path)
		goto close_src;
	if (stat(path, &st)) {
		rc = -errno;
		zn_error("%s: %s: give a Hugging Face model directory or a .safetensors file",
			 path, zn_strerror(rc));
		goto close_src;
	}
	rc = S_ISDIR(st.st_mode) ? open_dir(s) : open_file(s);
	if (rc)
		goto close_src;
	*out = s;
	return 0;
close_src:
	zn_hf_close(s);
	return rc;
}
