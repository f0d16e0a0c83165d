/* Saving Hugging Face checkpoints: one .safetensors file, or a directory with config.json,
 * shards and model.safetensors.index.json as transformers writes them (hf_dir.h). */
#include <ctype.h>
#include <dirent.h>
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
#include "core/log.h"
#include "model/hf_dir.h"
#include "model/hf_json.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SHARD_NAME_MAX 48

int zn_hf_parse_size(const char *text, const char *flag, uint64_t *out)
{
	static const struct {
		const char *unit;
		double mult;
	} units[] = { { "", 1 },	  { "b", 1 },	     { "k", 1e3 },	   { "kb", 1e3 },
		      { "m", 1e6 },	  { "mb", 1e6 },     { "g", 1e9 },	   { "gb", 1e9 },
		      { "t", 1e12 },	  { "tb", 1e12 },    { "kib", 1024.0 },    { "mib", 1048576.0 },
		      { "gib", 1073741824.0 }, { "tib", 1099511627776.0 } };
	char *end = NULL;
	double v = text ? strtod(text, &end) : -1;
	char unit[8];
	size_t n;

	if (end && end != text) {
		n = strlen(end);
		for (size_t i = 0; i < n && i < sizeof(unit) - 1; i++)
			unit[i] = (char)tolower((unsigned char)end[i]);
		unit[n < sizeof(unit) - 1 ? n : sizeof(unit) - 1] = 0;
		for (size_t i = 0; n < sizeof(unit) && i < sizeof(units) / sizeof(units[0]); i++) {
			if (strcmp(unit, units[i].unit) || !(v * units[i].mult >= 1) ||
			    v * units[i].mult > 1e18)
				continue;
			*out = (uint64_t)(v * units[i].mult);
			return 0;
		}
	}
	zn_error("%s '%s': give a size of at least 1 byte, e.g. 5GB (10^9 bytes), 500MB or "
		 "2GiB (2^30 bytes)", flag, text ? text : "");
	return -EINVAL;
}

static uint64_t entry_bytes(const struct zn_st_entry *e, enum zn_dtype dtype)
{
	uint64_t n = zn_dtype_size(dtype);

	for (int d = 0; d < e->ndim; d++)
		n *= (uint64_t)e->shape[d];
	return n;
}

/* huggingface_hub's split (split_state_dict_into_shards_factory), tensor by tensor in
 * the caller's order: a tensor larger than max is a shard of its own, listed when met;
 * otherwise a tensor that would take the current shard past max closes it, and a shard
 * is listed when it is closed (the last one at the end). Sets shard_of[i] to the shard's
 * place in that list and returns the shard count. */
static int plan_shards(const struct zn_st_entry *e, int count, enum zn_dtype dtype,
		       uint64_t max, int *shard_of)
{
	int n = 0, start = -1; /* entries of the open shard are -1 from start on */
	uint64_t cur_bytes = 0;

	for (int i = 0; i <= count; i++) {
		uint64_t b = i < count ? entry_bytes(&e[i], dtype) : 0;
		bool close = i == count || (b <= max && start >= 0 && cur_bytes + b > max);

		if (close && start >= 0) {
			for (int j = start; j < i; j++)
				if (shard_of[j] < 0)
					shard_of[j] = n;
			n++;
			start = -1;
		}
		if (i == count)
			break;
		if (b > max) {
			shard_of[i] = n++;
			continue;
		}
		if (start < 0) {
			start = i;
			cur_bytes = 0;
		}
		shard_of[i] = -1;
		cur_bytes += b;
	}
	return n;
}

static void shard_name(char *buf, int k, int n)
{
	if (n == 1)
		snprintf(buf, SHARD_NAME_MAX, "model.safetensors");
	else
		snprintf(buf, SHARD_NAME_MAX, "model-%05d-of-%05d.safetensors", k + 1, n);
}

/* Writes text to dir/name through core/fsio's atomic file (exclusive temporary, fsync,
 * rename, folder fsync). */
static int write_text_atomic(const char *dir, const char *name, const char *text,
			     const char *what)
{
	char path[ZN_PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return zn_write_file_atomic(path, what, text, strlen(text));
}

static const char *what_of(const struct zn_hf_save_opts *o)
{
	return o->what ? o->what : "saving";
}

static char *index_json(const struct zn_st_entry *e, int count, enum zn_dtype dtype,
			const int *shard_of, int n)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
	cJSON *wm = cJSON_AddObjectToObject(root, "weight_map");
	char name[SHARD_NAME_MAX], *text = NULL;
	uint64_t total = 0;

	for (int i = 0; i < count; i++)
		total += entry_bytes(&e[i], dtype);
	if (!meta || !wm || !cJSON_AddNumberToObject(meta, "total_size", (double)total))
		goto delete_root;
	for (int i = 0; i < count; i++) {
		shard_name(name, shard_of[i], n);
		if (!cJSON_AddStringToObject(wm, e[i].name, name))
			goto delete_root;
	}
	text = zn_hf_json_dumps(root);
delete_root:
	cJSON_Delete(root);
	return text;
}

/* "model-DDDDD-of-DDDDD.safetensors", the only names besides model.safetensors that a
 * save removes (transformers' rule), so a user's other files stay. */
bool zn_hf_is_shard_name(const char *s)
{
	static const char pattern[] = "model-#####-of-#####.safetensors";

	if (strlen(s) != sizeof(pattern) - 1)
		return false;
	for (size_t i = 0; pattern[i]; i++)
		if (pattern[i] == '#' ? !isdigit((unsigned char)s[i]) : s[i] != pattern[i])
			return false;
	return true;
}

/* Removes model.safetensors or model-DDDDD-of-DDDDD.safetensors files (and the index when
 * unsharded) that the save did not write: transformers would load a stale model.safetensors
 * before the index. Through the directory's own descriptor: each name is unlinked itself,
 * a link never followed. */
static void remove_stale(const char *dir, int n)
{
	int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int fd = dir_fd >= 0 ? dup(dir_fd) : -1;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	int removed = 0;

	while (d && (de = readdir(d))) {
		const char *s = de->d_name;
		bool single = !strcmp(s, "model.safetensors");
		bool shard = zn_hf_is_shard_name(s);
		int k = 0, of = 0;
		bool ours = n == 1 ? single :
				     shard && sscanf(s, "model-%5d-of-%5d", &k, &of) == 2 && of == n;

		if (((single || shard) && !ours) || (n == 1 && !strcmp(s, INDEX_NAME)))
			removed += !unlinkat(dir_fd, s, 0);
	}
	if (d)
		closedir(d);
	else if (fd >= 0)
		close(fd);
	if (dir_fd >= 0)
		close(dir_fd);
	if (removed)
		zn_info("%s: removed %d files of an earlier save that this one does not use",
			dir, removed);
}

/* The tensors in the caller's order, each into its shard: a shard's file is begun (its
 * header written) at its first tensor and committed after its last, so the values are
 * asked for (fill) strictly in order and only the shards that interleave are open at once
 * (a tensor over the limit between two of another shard's). */
static int write_shards(const char *dir, const struct zn_st_entry *e, int count,
			enum zn_dtype dtype, const int *shard_of, int n)
{
	static const char *const keys[] = { "format" };
	static const char *const values[] = { "pt" };
	char name[SHARD_NAME_MAX], path[ZN_PATH_MAX + 64];
	struct zn_st_entry *part = malloc(((size_t)count + 1) * sizeof(*part));
	int *start = calloc((size_t)n + 1, sizeof(*start)); /* shard k's entries in part */
	int *left = calloc((size_t)n + 1, sizeof(*left));   /* its tensors still to write */
	struct zn_st_writer **w = calloc((size_t)n + 1, sizeof(*w));
	int rc = part && start && left && w ? 0 : -ENOMEM;

	for (int i = 0; !rc && i < count; i++)
		left[shard_of[i]]++;
	for (int k = 1; !rc && k < n; k++)
		start[k] = start[k - 1] + left[k - 1];
	for (int k = 0, m = 0; !rc && k < n; k++)
		for (int i = 0; i < count; i++)
			if (shard_of[i] == k)
				part[m++] = e[i];
	for (int i = 0; !rc && i < count; i++) {
		int k = shard_of[i];

		if (!w[k]) {
			shard_name(name, k, n);
			snprintf(path, sizeof(path), "%s/%s", dir, name);
			rc = zn_st_writer_begin(&w[k], path, dtype, part + start[k], left[k],
						keys, values, 1);
		}
		if (!rc)
			rc = zn_st_writer_put_entry(w[k], &e[i]);
		if (!rc && --left[k] == 0) {
			rc = zn_st_writer_commit(w[k]);
			w[k] = NULL;
		}
	}
	for (int k = 0; w && k < n; k++)
		zn_st_writer_abort(w[k]);
	free(w);
	free(left);
	free(start);
	free(part);
	return rc;
}

static int write_dir_files(const char *dir, const struct zn_hf_config *cfg,
			   const struct zn_hf_save_opts *o, const struct zn_st_entry *e,
			   int count, uint64_t max)
{
	int *plan = calloc((size_t)count + 1, sizeof(*plan));
	char *config = zn_hf_config_to_json(cfg, o->base_config);
	char *index = NULL;
	int n, rc = -ENOMEM;

	if (!plan || !config)
		goto free_all;
	n = plan_shards(e, count, o->dtype, max, plan);
	if (n > 1)
		index = index_json(e, count, o->dtype, plan, n);
	if (n > 1 && !index)
		goto free_all;
	rc = write_text_atomic(dir, "config.json", config, what_of(o));
	if (!rc)
		rc = write_shards(dir, e, count, o->dtype, plan, n);
	if (!rc && index)
		rc = write_text_atomic(dir, INDEX_NAME, index, what_of(o));
	if (!rc)
		remove_stale(dir, n);
free_all:
	free(index);
	free(config);
	free(plan);
	return rc;
}

static int sync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd >= 0) {
		rc = zn_check_errno(fsync(fd), "fsync(folder)", __FILE__, __LINE__);
		close(fd);
	}
	return rc;
}

/* A new directory: built as PATH.tmp.PID, renamed to PATH when complete. */
static int save_new_dir(const char *path, const struct zn_hf_config *cfg,
			const struct zn_hf_save_opts *o, const struct zn_st_entry *e, int count,
			uint64_t max)
{
	char tmp[ZN_PATH_MAX + 32], parent[ZN_PATH_MAX];
	char *slash;
	int rc;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
	/* new (mkdir fails on anything already there, a link included) */
	if (mkdir(tmp, 0755)) {
		rc = -errno;
		zn_error("%s %s: cannot create %s: %s", what_of(o), path, tmp, zn_strerror(rc));
		return rc;
	}
	rc = write_dir_files(tmp, cfg, o, e, count, max);
	if (!rc && rename(tmp, path)) {
		rc = -errno;
		zn_error("rename %s -> %s failed: %s", tmp, path, zn_strerror(rc));
	}
	if (rc) {
		zn_remove_tree(tmp, what_of(o));
		return rc;
	}
	snprintf(parent, sizeof(parent), "%s", path);
	slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = 0;
	return sync_path(slash ? parent : ".");
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

static int save_file(const char *path, const struct zn_hf_config *cfg,
		     const struct zn_hf_save_opts *o, const struct zn_st_entry *e, int count)
{
	const char *keys[] = { "format", "config" };
	const char *values[] = { "pt", NULL };
	char *config = NULL;
	int rc;

	if (cfg) {
		config = zn_hf_config_to_json(cfg, o->base_config);
		if (!config)
			return -ENOMEM;
		values[1] = config;
	}
	rc = zn_st_write(path, o->dtype, e, count, keys, values, cfg ? 2 : 1);
	free(config);
	return rc;
}

int zn_hf_save(const char *path, const struct zn_hf_config *cfg,
	       const struct zn_hf_save_opts *opts, const struct zn_st_entry *entries, int count)
{
	static const char *const dts[] = { "float32", "bfloat16", "float16" };
	struct zn_hf_config c;
	uint64_t max = opts->shard_bytes ? opts->shard_bytes : ZN_HF_DEFAULT_SHARD_BYTES;
	struct stat st;

	char clean[ZN_PATH_MAX];
	size_t len = strlen(path);

	if (len >= ZN_PATH_MAX - 64 || !len || (unsigned)opts->dtype > ZN_DTYPE_F16) {
		zn_error("'%s': path empty or too long, or dtype not fp32/bf16/fp16", path);
		return -EINVAL;
	}
	/* "out/" is the directory out */
	while (len > 1 && path[len - 1] == '/')
		len--;
	snprintf(clean, sizeof(clean), "%.*s", (int)len, path);
	path = clean;
	if (cfg) {
		c = *cfg;
		snprintf(c.torch_dtype, sizeof(c.torch_dtype), "%s", dts[opts->dtype]);
		cfg = &c;
	}
	if (ends_with(path, ".safetensors"))
		return save_file(path, cfg, opts, entries, count);
	if (!cfg) {
		zn_error("%s: a Hugging Face directory needs the model's config", path);
		return -EINVAL;
	}
	/* the directory itself, never a link to one: writing through a link would replace
	 * (and remove) another directory's files (fsio.h, outputs) */
	if (lstat(path, &st) && errno == ENOENT)
		return save_new_dir(path, cfg, opts, entries, count, max);
	if (zn_output_dir_make(path, what_of(opts)))
		return -EINVAL; /* a file, a link, a FIFO ... there */
	return write_dir_files(path, cfg, opts, entries, count, max);
}
