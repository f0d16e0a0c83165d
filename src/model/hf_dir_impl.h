/* The state of an open Hugging Face source, shared by hf_dir.c (opening) and
 * hf_dir_read.c (finding and reading tensors). Private to src/model/hf_dir*.c. */
#ifndef ZN_MODEL_HF_DIR_IMPL_H
#define ZN_MODEL_HF_DIR_IMPL_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "model/hf_dir.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

struct shard {
	char *name; /* file name in the directory */
	struct zn_st_file *f; /* NULL until first used */
};

struct mapped {
	const char *name; /* points into the index JSON */
	int shard;
};

struct zn_hf_src {
	char *path;       /* as given */
	char *dir;        /* folder holding the shards */
	char *index_path; /* NULL without an index */
	cJSON *index;
	char *config_json;
	bool has_config;
	struct zn_hf_config config;
	int shard_count;
	struct shard *shards;
	int mapped_count;
	struct mapped *map; /* sorted by name; NULL: every tensor is in shard 0 */
};

/* "dir/name", malloc'd, or NULL */
char *zn_hf_join(const char *dir, const char *name);

/* Where a missing tensor should have been: the index, or the one file. */
const char *zn_hf_expected_in(const struct zn_hf_src *s);

/* struct mapped by name (qsort, bsearch) */
int zn_hf_cmp_mapped(const void *a, const void *b);

#endif
