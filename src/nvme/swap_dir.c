/* The swap store's footprint on disk: private directories, their lock, the preallocated
 * files, the free-space check, and removal of what a crashed run left behind.
 *
 * A directory is made under a temporary name (.zinc-swap-...tmp), its lock file is made
 * and flock()ed, and only then is it renamed to zinc-swap-...: so a directory with the
 * final name whose lock can be taken belongs to nobody alive, and another rank starting
 * at the same moment never sees a live directory unlocked.
 */
#include "nvme/swap_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/log.h"
#include "core/signals.h"

/* "512 bytes", "1.50 KiB", "3.25 MiB", "80.13 GiB", "2.00 TiB": a size that never reads
 * as 0.00 in an error. */
const char *zn_swap_fmt_bytes(uint64_t bytes, char *buf, size_t size)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, size, "%llu bytes", (unsigned long long)bytes);
		return buf;
	}
	while (v >= 1024.0 && u < 4) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, size, "%.2f %s", v, units[u]);
	return buf;
}

static void dir_name(char *out, size_t n, const char *run_id, int rank, long pid, bool tmp)
{
	snprintf(out, n, "%s" ZN_SWAP_PREFIX "%s-r%d-p%ld%s", tmp ? "." : "", run_id, rank, pid,
		 tmp ? ".tmp" : "");
}

/* The pid at the end of "...-p<pid>" or "...-p<pid>.tmp"; 0 if there is none. */
static long name_pid(const char *name)
{
	const char *p = strrchr(name, 'p');
	char *end;
	long pid;

	if (!p || p == name || p[-1] != '-')
		return 0;
	pid = strtol(p + 1, &end, 10);
	if (end == p + 1 || (*end && strcmp(end, ".tmp")))
		return 0;
	return pid;
}

/* Unlinks the plain files directly in dir_fd (never following links, never recursing)
 * and returns the bytes they held. */
static uint64_t empty_dir(int dir_fd)
{
	uint64_t bytes = 0;
	struct dirent *e;
	struct stat st;
	int fd = dup(dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	while ((e = readdir(d))) {
		if (fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) || S_ISDIR(st.st_mode))
			continue;
		if (!unlinkat(dir_fd, e->d_name, 0))
			bytes += (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return bytes;
}

/* Removes root/name if it is ours and its owner is gone. Returns -EBUSY when it is
 * `mine` (this run id and rank) and alive. */
static int clean_one(int root_fd, const char *root, const char *name, bool tmp, bool mine)
{
	struct stat st;
	long pid = name_pid(name);
	uint64_t freed;
	char f[32];
	int dfd, lfd, rc = 0;

	if (fstatat(root_fd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(st.st_mode) ||
	    st.st_uid != geteuid())
		return 0;
	/* The directory itself, never a link to elsewhere. */
	dfd = openat(root_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return 0;
	if (tmp) {
		/* Half-made: no lock yet, so only a dead pid makes it stale. */
		if (!pid || pid == getpid() || !(kill((pid_t)pid, 0) && errno == ESRCH))
			goto close_dir;
	} else {
		/* Its lock file, to see whether a live process holds it. */
		lfd = openat(dfd, ZN_SWAP_LOCK_NAME, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB)) {
			if (mine) {
				zn_error("%s/%s is in use by a running zinc (pid %ld) with the same "
					 "run id and rank: give this run another --run-id (zinc.run_id)",
					 root, name, pid);
				rc = -EBUSY;
			}
			close(lfd);
			goto close_dir;
		}
		if (lfd >= 0)
			close(lfd); /* the lock goes with it; the directory is removed below */
	}
	freed = empty_dir(dfd);
	if (unlinkat(root_fd, name, AT_REMOVEDIR))
		zn_warn("could not remove stale swap directory %s/%s: %s", root, name,
			zn_strerror(-errno));
	else
		zn_info("removed stale swap directory %s/%s (%s) left by a run that did not exit "
			"cleanly (pid %ld)", root, name, zn_swap_fmt_bytes(freed, f, sizeof(f)),
			pid);
close_dir:
	close(dfd);
	return rc;
}

int zn_swap_clean_stale(const char *root, const char *run_id, int rank)
{
	char mine_base[128];
	struct dirent *e;
	int root_fd, fd, rc = 0;
	DIR *d;

	/* The nvme path itself, to scan it and act relative to it. */
	root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root_fd < 0) {
		rc = -errno;
		zn_error("nvme path %s: %s", root, zn_strerror(rc));
		return rc;
	}
	fd = dup(root_fd);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		zn_error("reading nvme path %s: %s", root, zn_strerror(rc));
		goto close_root;
	}
	/* Directories of this run id and rank, any pid: "zinc-swap-<id>-r<rank>-p". */
	snprintf(mine_base, sizeof(mine_base), ZN_SWAP_PREFIX "%s-r%d-p", run_id, rank);
	while ((e = readdir(d)) && !rc) {
		const char *n = e->d_name;
		bool tmp = n[0] == '.' && !strncmp(n + 1, ZN_SWAP_PREFIX, strlen(ZN_SWAP_PREFIX));

		if (!tmp && strncmp(n, ZN_SWAP_PREFIX, strlen(ZN_SWAP_PREFIX)))
			continue;
		rc = clean_one(root_fd, root, n, tmp,
			       !tmp && !strncmp(n, mine_base, strlen(mine_base)));
	}
	closedir(d);
close_root:
	close(root_fd);
	return rc;
}

int zn_swap_check_space(const struct zn_swap_path *paths, int count)
{
	dev_t dev[ZN_MAX_NVME_PATHS];
	uint64_t free_bytes[ZN_MAX_NVME_PATHS];
	struct statvfs sv;
	struct stat st;
	int i, j;

	for (i = 0; i < count; i++) {
		if (stat(paths[i].root, &st) || statvfs(paths[i].root, &sv)) {
			int rc = -errno;

			zn_error("nvme path %s: %s", paths[i].root, zn_strerror(rc));
			return rc;
		}
		dev[i] = st.st_dev;
		free_bytes[i] = (uint64_t)sv.f_bavail * sv.f_frsize;
	}
	for (i = 0; i < count; i++) {
		uint64_t need = 0;
		int shared = 0;

		for (j = 0; j < i && dev[j] != dev[i]; j++)
			;
		if (j < i)
			continue; /* counted with the first path on this filesystem */
		for (j = i; j < count; j++) {
			if (dev[j] == dev[i]) {
				need += paths[j].file_bytes;
				shared++;
			}
		}
		if (need > free_bytes[i]) {
			char a[32], b[32];

			zn_error("need %s on %s%s, %s free: free space there, add nvme paths or "
				 "offload less", zn_swap_fmt_bytes(need, a, sizeof(a)), paths[i].root,
				 shared > 1 ? " (all nvme paths on its filesystem)" : "",
				 zn_swap_fmt_bytes(free_bytes[i], b, sizeof(b)));
			return -ENOSPC;
		}
	}
	return 0;
}

static int make_dir(struct zn_swap_path *p, const char *run_id, int rank)
{
	char tmp[128], fin[128], lock[sizeof(p->dir) + 8];
	int root_fd, rc;

	dir_name(tmp, sizeof(tmp), run_id, rank, (long)getpid(), true);
	dir_name(fin, sizeof(fin), run_id, rank, (long)getpid(), false);
	snprintf(p->dir, sizeof(p->dir), "%s/%s", p->root, fin);
	root_fd = open(p->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root_fd < 0)
		return zn_check_errno(-1, p->root, __FILE__, __LINE__);
	if (mkdirat(root_fd, tmp, 0700)) {
		rc = -errno;
		zn_error("making swap directory %s/%s: %s", p->root, tmp, zn_strerror(rc));
		goto close_root;
	}
	/* The new private directory (never a link planted in its place). */
	p->dir_fd = openat(root_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (p->dir_fd < 0) {
		rc = zn_check_errno(-1, "opening the swap directory", __FILE__, __LINE__);
		goto remove_tmp;
	}
	fchmod(p->dir_fd, 0700); /* mkdir honours the umask; be exact */
	/* The lock: held (flock) as long as this store lives; a free lock means stale. */
	p->lock_fd = openat(p->dir_fd, ZN_SWAP_LOCK_NAME,
			    O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (p->lock_fd < 0 || flock(p->lock_fd, LOCK_EX | LOCK_NB)) {
		rc = zn_check_errno(-1, "locking the swap directory", __FILE__, __LINE__);
		goto remove_tmp;
	}
	dprintf(p->lock_fd, "%ld\n", (long)getpid());
	if (renameat(root_fd, tmp, root_fd, fin)) {
		rc = -errno;
		zn_error("renaming swap directory to %s: %s", p->dir, zn_strerror(rc));
		goto remove_tmp;
	}
	close(root_fd);
	/* From here a signal removes it (core/signals.h). */
	p->sig_slot = zn_signals_track(p->dir);
	if (p->sig_slot < 0)
		return p->sig_slot;
	snprintf(lock, sizeof(lock), "%s/" ZN_SWAP_LOCK_NAME, p->dir);
	return zn_signals_track_file(p->sig_slot, lock);

remove_tmp:
	if (p->lock_fd >= 0) {
		unlinkat(p->dir_fd, ZN_SWAP_LOCK_NAME, 0);
		close(p->lock_fd);
		p->lock_fd = -1;
	}
	if (p->dir_fd >= 0) {
		close(p->dir_fd);
		p->dir_fd = -1;
	}
	unlinkat(root_fd, tmp, AT_REMOVEDIR);
close_root:
	p->dir[0] = 0;
	close(root_fd);
	return rc;
}

static int reserve(struct zn_swap_path *p, int inject_errno)
{
	struct statvfs sv;
	int rc = 0;

	if (inject_errno)
		errno = inject_errno, rc = -1;
	else
		rc = fallocate(p->fd, 0, 0, (off_t)p->file_bytes);
	if (!rc)
		return 0;
	rc = -errno;
	if (rc == -ENOSPC || rc == -EDQUOT) {
		uint64_t free_bytes = 0;
		char a[32], b[32];

		if (!statvfs(p->root, &sv))
			free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
		zn_error("need %s on %s, %s free (fallocate of %s: %s): free space there, add "
			 "nvme paths or offload less", zn_swap_fmt_bytes(p->file_bytes, a, sizeof(a)),
			 p->root, zn_swap_fmt_bytes(free_bytes, b, sizeof(b)), p->file,
			 zn_strerror(rc));
	} else if (rc == -EOPNOTSUPP) {
		zn_error("fallocate of %s: the filesystem of %s cannot reserve space: use an "
			 "nvme path on ext4 or xfs", p->file, p->root);
	} else {
		zn_error("fallocate of %" PRIu64 " bytes for %s: %s", p->file_bytes, p->file,
			 zn_strerror(rc));
	}
	return rc;
}

int zn_swap_path_make(struct zn_swap_path *p, const char *run_id, int rank, int index,
		      int count, int inject_fallocate_errno)
{
	int rc;

	p->dir_fd = p->lock_fd = p->fd = p->sig_slot = -1;
	/* A signal waits until what is made here is tracked (core/signals.h). */
	zn_signals_hold();
	rc = make_dir(p, run_id, rank);
	if (rc)
		goto remove;
	snprintf(p->file_name, sizeof(p->file_name), "stripe-%d-of-%d.bin", index, count);
	snprintf(p->file, sizeof(p->file), "%s/%s", p->dir, p->file_name);
	rc = zn_signals_track_file(p->sig_slot, p->file); /* before it exists: no window */
	if (rc)
		goto remove;
	/* The swap file: new (O_EXCL), private, never through a link, unbuffered. */
	p->fd = openat(p->dir_fd, p->file_name,
		       O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_DIRECT | O_CLOEXEC, 0600);
	if (p->fd < 0) {
		rc = -errno;
		zn_error("creating swap file %s: %s%s", p->file, zn_strerror(rc),
			 rc == -EINVAL ? " (the filesystem does not support O_DIRECT)" : "");
		goto remove;
	}
	fchmod(p->fd, 0600);
	if (p->file_bytes) {
		rc = reserve(p, inject_fallocate_errno);
		if (rc)
			goto remove;
	}
	zn_signals_release();
	return 0;
remove:
	zn_swap_path_remove(p);
	zn_signals_release();
	return rc;
}

void zn_swap_path_remove(struct zn_swap_path *p)
{
	if (p->fd >= 0) {
		close(p->fd);
		unlinkat(p->dir_fd, p->file_name, 0);
		p->fd = -1;
	}
	if (p->lock_fd >= 0) {
		unlinkat(p->dir_fd, ZN_SWAP_LOCK_NAME, 0);
		close(p->lock_fd);
		p->lock_fd = -1;
	}
	if (p->dir_fd >= 0) {
		close(p->dir_fd);
		p->dir_fd = -1;
	}
	if (p->dir[0] && rmdir(p->dir))
		zn_warn("could not remove swap directory %s: %s", p->dir, zn_strerror(-errno));
	p->dir[0] = 0;
	zn_signals_untrack(p->sig_slot);
	p->sig_slot = -1;
}
