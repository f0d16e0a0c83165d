/* Checkpoint save (collective, atomic) and keep-limit rotation (ckpt.h; docs/checkpoint.md).
 * Opening, checking and restoring are ckpt_load.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/fsio.h"
#include "core/log.h"
#include "sched/ckpt_impl.h"
#include "sched/engine_impl.h"

/* Every rank learns whether every rank succeeded: 0 on all, or a negative code on all. */
static int agree(struct zn_comm *c, int rc)
{
	int x;

	if (!c)
		return rc;
	x = zn_comm_agree(c, "", rc == 0);
	return rc ? rc : x;
}

int zn_ckpt_any(struct zn_comm *c, bool local, bool *any)
{
	float f = local ? 1.0f : 0.0f;
	int rc;

	*any = local;
	if (!c || zn_comm_size(c) == 1)
		return 0;
	rc = zn_comm_all_reduce(c, NULL, &f, 1, ZN_DTYPE_F32);
	*any = f > 0.0f;
	return rc;
}

static int make_dir(const char *dir, bool counted)
{
	struct stat st;
	int rc = counted ? zn_ckpt_fault_point("mkdir", dir) : 0;

	if (rc)
		return rc;
	if (mkdir(dir, 0777) == 0)
		return 0;
	/* an existing DIR: a directory itself, never a link to one (lstat) */
	if (errno == EEXIST && !lstat(dir, &st) && S_ISDIR(st.st_mode))
		return 0;
	rc = errno == EEXIST ? -ENOTDIR : -errno;
	zn_error("checkpoint: cannot create the directory %s: %s", dir,
		 rc == -ENOTDIR ? "something that is not a directory (or is a link) is there" :
		 zn_strerror(rc));
	return rc;
}

/* rank 0: DIR and a fresh DIR/.tmp-checkpoint-N (a stale one, from a save that was
 * killed, is removed first: `latest` never names it; a link there goes, never its
 * target); *tmp_id: what was made, so that finish renames only this run's directory */
static int make_tmp(const char *dir, const char *tmp, struct stat *tmp_id)
{
	int rc = make_dir(dir, false);

	if (!rc)
		rc = zn_remove_tree(tmp, "checkpoint: a stale temporary");
	if (!rc)
		rc = make_dir(tmp, true);
	if (!rc && lstat(tmp, tmp_id))
		rc = zn_check_errno(-1, tmp, __FILE__, __LINE__);
	return rc;
}

/* A new file in a checkpoint's temporary directory: written, fsynced, closed. */
static int write_new(const char *path, const void *buf, size_t n, uint32_t *crc)
{
	int fd, rc = zn_ckpt_fault_point("create", path);

	if (rc)
		return rc;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		zn_error("checkpoint: cannot create %s: %s", path, zn_strerror(rc));
		return rc;
	}
	rc = zn_ckpt_write(fd, buf, n, path);
	if (!rc)
		rc = zn_ckpt_fsync(fd, path);
	close(fd);
	if (crc)
		*crc = zn_ckpt_crc(zn_ckpt_crc(0, NULL, 0), buf, n);
	return rc;
}

static int write_rank(struct zn_engine *e, const char *tmp, uint32_t *crc)
{
	struct zn_ckpt_rank_hdr hd = { e->rt.rank, e->rt.world, e->cfg.zero.stage, e->n,
				       zn_ckpt_state_states(e) };
	char name[64], path[ZN_PATH_MAX + 256];
	int fd, rc;

	zn_ckpt_rank_name(name, sizeof(name), e->rt.rank, e->rt.world);
	snprintf(path, sizeof(path), "%s/%s", tmp, name);
	rc = zn_ckpt_fault_point("create", path);
	if (rc)
		return rc;
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		zn_error("checkpoint: cannot create %s: %s", path, zn_strerror(rc));
		return rc;
	}
	rc = zn_ckpt_write_rank_file(e, fd, path, crc, &hd, e->numel);
	if (close(fd) && !rc) {
		rc = -errno;
		zn_error("checkpoint: closing %s failed: %s", path, zn_strerror(rc));
	}
	return rc;
}

/* ---- rotation ---------------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* Removes the oldest checkpoint-N beyond keep (the one just written always stays). Only
 * real directories count: a link named checkpoint-N is left alone, as is its target. */
static void rotate(const char *dir, int keep, int64_t current)
{
	int dir_fd = keep > 0 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	int fd = dir_fd >= 0 ? dup(dir_fd) : -1;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	int64_t *steps = NULL;
	size_t n = 0, cap = 0;

	if (!d) {
		if (fd >= 0)
			close(fd);
		if (dir_fd >= 0)
			close(dir_fd);
		return;
	}
	while ((de = readdir(d))) {
		struct stat st;
		char *end;
		long long s;

		if (strncmp(de->d_name, "checkpoint-", 11))
			continue;
		s = strtoll(de->d_name + 11, &end, 10);
		if (*end || end == de->d_name + 11 || s == current ||
		    fstatat(dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(st.st_mode))
			continue;
		if (n == cap) {
			int64_t *p = realloc(steps, (cap = cap * 2 + 16) * sizeof(*steps));

			if (!p)
				break;
			steps = p;
		}
		steps[n++] = s;
	}
	closedir(d);
	if (n > 0)
		qsort(steps, n, sizeof(*steps), cmp_i64);
	/* keep - 1 others besides the current one: the newest by step */
	for (size_t i = 0; i + (size_t)(keep - 1) < n; i++) {
		char name[64];

		snprintf(name, sizeof(name), "checkpoint-%" PRId64, steps[i]);
		if (!zn_remove_tree_at(dir_fd, name, "checkpoint: rotation"))
			zn_info("checkpoint: removed %s/%s (--save-total-limit %d)", dir, name, keep);
	}
	close(dir_fd);
	free(steps);
}

/* tmp is still the directory this save made: a run that ignored the lock (or a person)
 * may have replaced it, and its contents would then not be this run's. */
static bool same_dir(const char *tmp, const struct stat *id)
{
	struct stat st;

	return !lstat(tmp, &st) && S_ISDIR(st.st_mode) && st.st_dev == id->st_dev &&
	       st.st_ino == id->st_ino;
}

/* rank 0, once every rank file is in tmp: config, metadata, rename, latest, rotation */
static int finish(struct zn_engine *e, const struct zn_ckpt_save_args *a, const char *tmp,
		  const struct stat *tmp_id, const char *fin, const char *name,
		  const uint32_t *crcs)
{
	uint64_t *sizes = calloc((size_t)e->rt.world, sizeof(*sizes));
	char path[ZN_PATH_MAX + 128], latest[96], *meta = NULL;
	const char *cj = a->config_json ? a->config_json : "{}\n";
	uint32_t ccrc = 0;
	int rc = sizes ? 0 : -ENOMEM;

	for (int r = 0; !rc && r < e->rt.world; r++)
		sizes[r] = zn_ckpt_rank_file_bytes(e->numel, e->n, r, e->rt.world,
						   e->plan.states);
	snprintf(path, sizeof(path), "%s/%s", tmp, ZN_CKPT_CONFIG);
	if (!rc)
		rc = write_new(path, cj, strlen(cj), &ccrc);
	if (!rc) {
		meta = zn_ckpt_meta_text(e, a, sizes, crcs, strlen(cj), ccrc);
		rc = meta ? 0 : -ENOMEM;
	}
	snprintf(path, sizeof(path), "%s/%s", tmp, ZN_CKPT_META);
	if (!rc)
		rc = write_new(path, meta, strlen(meta), NULL);
	if (!rc)
		rc = zn_ckpt_fsync_dir(tmp);
	if (!rc && !same_dir(tmp, tmp_id)) {
		zn_error("checkpoint: %s was replaced while this run saved into it (another run "
			 "on the same --save-dir?): not saved", tmp);
		rc = -ESTALE;
	}
	if (!rc) {
		rc = zn_ckpt_rename(tmp, fin);
		if (rc == 1) { /* exchanged with an older checkpoint of this step (or a link
				* there): now at tmp, removed without following */
			zn_remove_tree(tmp, "checkpoint: the replaced one");
			rc = 0;
		}
	}
	if (!rc)
		rc = zn_ckpt_fsync_dir(a->dir);
	snprintf(latest, sizeof(latest), "%s\n", name);
	if (!rc)
		rc = zn_ckpt_write_small(a->dir, ZN_CKPT_LATEST, latest, strlen(latest));
	if (!rc)
		rotate(a->dir, a->keep, e->step);
	free(sizes);
	free(meta);
	return rc;
}

int zn_ckpt_save(struct zn_engine *e, struct zn_comm *c, const struct zn_ckpt_save_args *a,
		 char *where, size_t where_size)
{
	char name[64], tmp[ZN_PATH_MAX + 80], fin[ZN_PATH_MAX + 80];
	uint32_t crc = 0, *crcs = calloc((size_t)e->rt.world, sizeof(*crcs));
	struct stat tmp_id;
	bool made = false;
	int rc = crcs ? 0 : -ENOMEM;

	snprintf(name, sizeof(name), "checkpoint-%" PRId64, e->step);
	snprintf(tmp, sizeof(tmp), "%s/.tmp-%s", a->dir, name);
	snprintf(fin, sizeof(fin), "%s/%s", a->dir, name);
	if (!rc && e->rt.rank == 0) {
		rc = make_tmp(a->dir, tmp, &tmp_id);
		made = !rc;
	}
	rc = agree(c, rc);
	if (!rc)
		rc = write_rank(e, tmp, &crc);
	rc = agree(c, rc);
	if (!rc && a->extra_files)
		rc = agree(c, a->extra_files(a->extra_ctx, e, tmp));
	crcs[e->rt.rank] = crc;
	if (!rc && c && zn_comm_size(c) > 1)
		rc = zn_comm_all_gather(c, NULL, crcs, crcs + e->rt.rank, 1, ZN_DTYPE_F32);
	if (!rc && e->rt.rank == 0)
		rc = finish(e, a, tmp, &tmp_id, fin, name, crcs);
	rc = agree(c, rc);
	if (!rc) {
		snprintf(where, where_size, "%s", fin);
	} else {
		zn_error("checkpoint %s not saved (step %" PRId64 "): %s; the previous checkpoint "
			 "in %s is unchanged", fin, e->step, zn_strerror(rc), a->dir);
		/* every rank is past its writes (agreed): the partial temporary goes (a disk
		 * full must not stay full of it); after the rename it is no longer there */
		if (made && same_dir(tmp, &tmp_id))
			zn_remove_tree(tmp, "checkpoint: the failed save's temporary");
	}
	free(crcs);
	return rc;
}
