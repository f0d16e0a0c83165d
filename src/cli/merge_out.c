/* zinc merge's output directory: checks, staging, copies and the move into place
 * (merge_out.h). */
#include "cli/merge_out.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fsio.h"
#include "core/log.h"
#include "model/hf_dir.h"
#include "zinc.h"

/* the files copied from the base, in this order */
static const char *const copied_files[] = {
	"tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json",
	"tokenizer.model",    "vocab.json",	       "merges.txt",
	"added_tokens.json",  "chat_template.jinja",   "chat_template.json",
	"generation_config.json",
};
#define N_COPIED (sizeof(copied_files) / sizeof(copied_files[0]))

bool merge_out_is_ours(const char *name)
{
	if (!strcmp(name, "config.json") || !strcmp(name, "model.safetensors") ||
	    !strcmp(name, "model.safetensors.index.json") || zn_hf_is_shard_name(name))
		return true;
	for (size_t i = 0; i < N_COPIED; i++)
		if (!strcmp(name, copied_files[i]))
			return true;
	return false;
}

/* the directory of a base given as a directory or a file */
static void base_dir(const char *base, char *buf, size_t size)
{
	struct stat st;
	char *slash;

	snprintf(buf, size, "%s", base);
	if (!stat(base, &st) && S_ISDIR(st.st_mode))
		return;
	slash = strrchr(buf, '/');
	if (slash && slash != buf)
		*slash = 0;
	else
		snprintf(buf, size, slash ? "/" : ".");
}

static bool same_dir(const struct stat *a, const char *path)
{
	struct stat st;

	return path && !stat(path, &st) && st.st_dev == a->st_dev && st.st_ino == a->st_ino;
}

/* an existing OUT: empty, or (overwrite) an earlier merge's regular files only */
static int check_entries(struct merge_out *mo, bool overwrite)
{
	DIR *d = opendir(mo->out);
	struct dirent *de;
	char p[4400];
	int rc = 0, n = 0;

	if (!d) {
		rc = -errno;
		zn_error("--output %s: cannot read the directory: %s", mo->out, zn_strerror(rc));
		return ZN_EUSAGE;
	}
	while (!rc && (de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		n++;
		snprintf(p, sizeof(p), "%s/%s", mo->out, de->d_name);
		if (!overwrite) {
			zn_error("--output %s exists and is not empty (%s, ...): give a new or "
				 "empty directory, or add --overwrite to replace an earlier merge's "
				 "output", mo->out, de->d_name);
			rc = ZN_EUSAGE;
		} else if (lstat(p, &st) || !S_ISREG(st.st_mode) ||
			   !merge_out_is_ours(de->d_name)) {
			zn_error("--output %s holds %s, which is not a file a merge writes: "
				 "--overwrite replaces only an earlier merge's output; give a new "
				 "or empty directory", mo->out, de->d_name);
			rc = ZN_EUSAGE;
		}
	}
	closedir(d);
	mo->state = n ? MERGE_OUT_REPLACE : MERGE_OUT_EMPTY;
	return rc;
}

int merge_out_check(struct merge_out *mo, const char *out, const char *base,
		    const char *adapter, bool overwrite)
{
	size_t n = strlen(out);
	char bdir[4096];
	struct stat st;

	while (n > 1 && out[n - 1] == '/')
		n--;
	if (!n || n >= sizeof(mo->out)) {
		zn_error("--output '%s': give a directory path", out);
		return ZN_EUSAGE;
	}
	snprintf(mo->out, sizeof(mo->out), "%.*s", (int)n, out);
	snprintf(mo->staging, sizeof(mo->staging), "%s.merge.%ld", mo->out, (long)getpid());
	if (n >= 12 && !strcmp(mo->out + n - 12, ".safetensors")) {
		zn_error("--output %s: zinc merge writes a Hugging Face directory (config.json, "
			 "shards, tokenizer): give a directory path", out);
		return ZN_EUSAGE;
	}
	if (lstat(mo->out, &st)) {
		mo->state = MERGE_OUT_ABSENT;
		return zn_output_check_dir(mo->out, "--output") ? ZN_EUSAGE : 0;
	}
	if (!S_ISDIR(st.st_mode)) {
		zn_error("--output %s is %s: zinc merge neither follows nor replaces it: give a "
			 "new or empty directory", out, zn_file_kind(st.st_mode));
		return ZN_EUSAGE;
	}
	base_dir(base, bdir, sizeof(bdir));
	if (same_dir(&st, bdir) || same_dir(&st, adapter)) {
		zn_error("--output %s is the %s's directory: the merge would replace what it "
			 "reads; give a new directory", out, same_dir(&st, bdir) ? "base" :
			 "adapter");
		return ZN_EUSAGE;
	}
	if (zn_output_check_dir(mo->out, "--output"))
		return ZN_EUSAGE;
	/* the merge is written beside OUT first: OUT's parent must take new entries too */
	if (zn_output_check(mo->staging, "--output (its parent: the merge is written beside "
			    "it, then renamed)"))
		return ZN_EUSAGE;
	return check_entries(mo, overwrite);
}

int merge_out_copy(const struct merge_out *mo, const char *base, int *copied)
{
	char bdir[4096], src[4400], dst[4400], *text = NULL;
	int rc = 0;

	*copied = 0;
	base_dir(base, bdir, sizeof(bdir));
	for (size_t i = 0; i < N_COPIED && !rc; i++) {
		struct stat st;
		size_t len = 0;

		snprintf(src, sizeof(src), "%s/%s", bdir, copied_files[i]);
		if (stat(src, &st) || !S_ISREG(st.st_mode))
			continue; /* the base has none */
		snprintf(dst, sizeof(dst), "%s/%s", mo->staging, copied_files[i]);
		rc = zn_read_input_file(src, "--init-from", (size_t)1 << 31, &text, &len);
		if (!rc)
			rc = zn_write_file_atomic(dst, "--output", text, len);
		free(text);
		text = NULL;
		*copied += rc ? 0 : 1;
	}
	return rc;
}

static int sync_parent(const char *path)
{
	char parent[4096];
	char *slash;
	int fd, rc = 0;

	snprintf(parent, sizeof(parent), "%s", path);
	slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = 0;
	else
		snprintf(parent, sizeof(parent), slash ? "/" : ".");
	fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		rc = zn_check_errno(fsync(fd), "fsync(folder)", __FILE__, __LINE__);
		close(fd);
	}
	return rc;
}

/* removes dir's regular files and dir */
static void remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[4400];

	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		unlink(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

int merge_out_commit(struct merge_out *mo)
{
	char old[4200];
	int rc = 0;

	if (mo->state != MERGE_OUT_REPLACE) {
		/* rename replaces an empty directory, and refuses a non-empty one that
		 * appeared since the check */
		if (rename(mo->staging, mo->out)) {
			rc = -errno;
			zn_error("--output: rename %s -> %s failed: %s", mo->staging, mo->out,
				 zn_strerror(rc));
			return rc;
		}
		return sync_parent(mo->out);
	}
	snprintf(old, sizeof(old), "%s.old.%ld", mo->out, (long)getpid());
	if (rename(mo->out, old)) {
		rc = -errno;
		zn_error("--output: rename %s -> %s failed: %s", mo->out, old, zn_strerror(rc));
		return rc;
	}
	if (rename(mo->staging, mo->out)) {
		rc = -errno;
		zn_error("--output: rename %s -> %s failed: %s; %s is back as it was",
			 mo->staging, mo->out, zn_strerror(rc), mo->out);
		(void)rename(old, mo->out);
		return rc;
	}
	rc = sync_parent(mo->out);
	remove_dir(old); /* the earlier merge: regular files only (check_entries) */
	return rc;
}

void merge_out_abort(struct merge_out *mo)
{
	struct stat st;

	if (!lstat(mo->staging, &st) && S_ISDIR(st.st_mode))
		remove_dir(mo->staging);
}
