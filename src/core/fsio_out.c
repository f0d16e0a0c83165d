/* Outputs: checked before any work (zn_output_check, _dir) and written through an
 * exclusive temporary file beside the destination, renamed into place (rules in fsio.h). */
#include "core/fsio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

/* Splits path into a malloc'd directory ("." when none) and points *base at the last
 * component. Refuses "", a trailing '/', "." and "..". */
static int split_path(const char *path, const char *what, char **dir, const char **base)
{
	const char *slash;
	size_t n;

	*dir = NULL;
	if (!path || !*path) {
		zn_error("%s: the path is empty: give a file name", what);
		return -EINVAL;
	}
	slash = strrchr(path, '/');
	*base = slash ? slash + 1 : path;
	if (!**base || !strcmp(*base, ".") || !strcmp(*base, "..")) {
		zn_error("%s %s: names a directory: give a file name inside it", what, path);
		return -EISDIR;
	}
	n = slash ? (size_t)(slash - path) : 0;
	*dir = malloc(n + 2);
	if (!*dir)
		return -ENOMEM;
	if (!slash)
		strcpy(*dir, ".");
	else if (n == 0)
		strcpy(*dir, "/");
	else
		snprintf(*dir, n + 1, "%s", path);
	return 0;
}

static int open_dir(const char *dir, const char *path, const char *what)
{
	/* the destination's directory: temporary file, rename and fsync all go through it */
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;

	if (fd >= 0)
		return fd;
	rc = -errno;
	if (rc == -ENOENT)
		zn_error("%s %s: the directory %s does not exist: create it or choose another "
			 "path", what, path, dir);
	else if (rc == -ENOTDIR)
		zn_error("%s %s: %s is not a directory", what, path, dir);
	else
		zn_error("%s %s: cannot open the directory %s: %s", what, path, dir,
			 zn_strerror(rc));
	return rc;
}

/* 0 when base in dir_fd is absent or a regular file (st filled, *exists set). */
static int check_target(int dir_fd, const char *base, const char *path, const char *what,
			struct stat *st, int *exists)
{
	*exists = 0;
	if (fstatat(dir_fd, base, st, AT_SYMLINK_NOFOLLOW)) {
		int rc = -errno;

		if (rc == -ENOENT)
			return 0;
		zn_error("%s %s: cannot check the destination: %s", what, path, zn_strerror(rc));
		return rc;
	}
	if (!S_ISREG(st->st_mode)) {
		zn_error("%s %s: is %s: zinc neither follows nor replaces it: remove it or choose "
			 "another path", what, path, zn_file_kind(st->st_mode));
		return S_ISDIR(st->st_mode) ? -EISDIR : -EEXIST;
	}
	*exists = 1;
	return 0;
}

/* A fresh temporary file in dir_fd: O_EXCL|O_NOFOLLOW, so nothing already at the name
 * (a planted symlink included) is opened; another random name is tried then. */
static int create_tmp(int dir_fd, const char *base, char *name, size_t n, const char *path,
		      const char *what)
{
	static unsigned counter;
	struct timespec ts;
	int rc = -EEXIST;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	for (int attempt = 0; attempt < 64 && rc == -EEXIST; attempt++) {
		unsigned r = (unsigned)ts.tv_nsec ^ (unsigned)(++counter * 2654435761u) ^
			     (unsigned)attempt * 40503u;
		int fd;

		snprintf(name, n, ".%.200s.tmp.%ld.%08x", base, (long)getpid(), r);
		/* new, private to this run, never through a link */
		fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			    0666);
		if (fd >= 0)
			return fd;
		rc = -errno;
	}
	zn_error("%s %s: cannot create a temporary file beside it: %s%s", what, path,
		 zn_strerror(rc), rc == -EACCES || rc == -EROFS ?
		 ": the directory is not writable" : "");
	return rc;
}

/* Files can be created in dir_fd (named dir): not a read-only mount, permitted, and a
 * probe file named after base can really be made and removed there. */
static int check_writable(int dir_fd, const char *dir, const char *base, const char *path,
			  const char *what)
{
	struct statvfs vfs;
	char name[256];
	int fd;

	if (fstatvfs(dir_fd, &vfs) == 0 && (vfs.f_flag & ST_RDONLY)) {
		zn_error("%s %s: %s is on a read-only file system: choose another path", what,
			 path, dir);
		return -EROFS;
	}
	if (faccessat(dir_fd, ".", W_OK | X_OK, AT_EACCESS)) {
		int rc = -errno;

		zn_error("%s %s: cannot create files in %s: %s: choose another path", what, path,
			 dir, zn_strerror(rc));
		return rc;
	}
	/* the real test: create and remove a temporary file there */
	fd = create_tmp(dir_fd, base, name, sizeof(name), path, what);
	if (fd < 0)
		return fd;
	close(fd);
	unlinkat(dir_fd, name, 0);
	return 0;
}

int zn_output_check(const char *path, const char *what)
{
	struct stat st;
	const char *base;
	char *dir;
	int dir_fd, exists, rc = split_path(path, what, &dir, &base);

	if (rc)
		return rc;
	dir_fd = open_dir(dir, path, what);
	if (dir_fd < 0) {
		free(dir);
		return dir_fd;
	}
	rc = check_target(dir_fd, base, path, what, &st, &exists);
	if (!rc)
		rc = check_writable(dir_fd, dir, base, path, what);
	close(dir_fd);
	free(dir);
	return rc;
}

int zn_output_check_dir(const char *path, const char *what)
{
	struct stat st;
	size_t n = path ? strlen(path) : 0;
	char *p;
	int fd, rc;

	while (n > 1 && path[n - 1] == '/')
		n--; /* "out/" is the directory out */
	p = n ? strndup(path, n) : NULL;
	if (!p) {
		if (n)
			return -ENOMEM;
		zn_error("%s: the path is empty: give a directory", what);
		return -EINVAL;
	}
	if (lstat(p, &st) == 0) {
		if (!S_ISDIR(st.st_mode)) {
			zn_error("%s %s: is %s: zinc neither follows nor replaces it: remove it or "
				 "choose another path", what, path, zn_file_kind(st.st_mode));
			free(p);
			return -EEXIST;
		}
		/* an existing directory: files are written into it */
		fd = open_dir(p, path, what);
		rc = fd < 0 ? fd : check_writable(fd, p, "zinc", path, what);
		if (fd >= 0)
			close(fd);
	} else {
		/* a new directory: made in its parent */
		rc = zn_output_check(p, what);
	}
	free(p);
	return rc;
}

static void release(struct zn_atomic_file *af)
{
	if (af->fd >= 0)
		close(af->fd);
	if (af->dir_fd >= 0)
		close(af->dir_fd);
	free(af->path);
	free(af->tmp);
	memset(af, 0, sizeof(*af));
	af->fd = -1;
	af->dir_fd = -1;
}

/* An existing destination's mode, and its owner when we may set it. */
static int keep_attributes(const struct zn_atomic_file *af, const struct stat *st)
{
	if (geteuid() == 0) {
		if (fchown(af->fd, st->st_uid, st->st_gid))
			return zn_check_errno(-1, "fchown", __FILE__, __LINE__);
	} else if (st->st_gid != getegid()) {
		/* a group we belong to can be kept; otherwise the new file has ours */
		if (fchown(af->fd, (uid_t)-1, st->st_gid))
			zn_debug("%s: keeping group %u failed: the new file has ours", af->path,
				 (unsigned)st->st_gid);
	}
	return zn_check_errno(fchmod(af->fd, st->st_mode & 07777), "fchmod", __FILE__, __LINE__);
}

int zn_atomic_file_begin(struct zn_atomic_file *af, const char *path, const char *what)
{
	struct stat st;
	char name[256];
	const char *base;
	char *dir = NULL;
	int exists, rc;

	memset(af, 0, sizeof(*af));
	af->fd = -1;
	af->dir_fd = -1;
	af->what = what;
	rc = split_path(path, what, &dir, &base);
	if (rc)
		return rc;
	af->dir_fd = open_dir(dir, path, what);
	free(dir);
	if (af->dir_fd < 0) {
		rc = af->dir_fd;
		goto fail;
	}
	af->path = strdup(path);
	af->base = af->path ? af->path + (base - path) : NULL;
	rc = af->path ? check_target(af->dir_fd, base, path, what, &st, &exists) : -ENOMEM;
	if (rc)
		goto fail;
	af->fd = create_tmp(af->dir_fd, base, name, sizeof(name), path, what);
	if (af->fd < 0) {
		rc = af->fd;
		goto fail;
	}
	af->tmp = strdup(name);
	if (!af->tmp) {
		rc = -ENOMEM;
		goto fail;
	}
	if (exists) {
		rc = keep_attributes(af, &st);
		if (rc)
			goto fail;
	}
	return 0;
fail:
	zn_atomic_file_abort(af);
	return rc;
}

void zn_atomic_file_abort(struct zn_atomic_file *af)
{
	if (af->tmp && af->dir_fd >= 0)
		unlinkat(af->dir_fd, af->tmp, 0);
	release(af);
}

/* The name tmp in dir_fd is still our file (not swapped for something else). */
static int is_ours(int dir_fd, const char *name, int fd)
{
	struct stat a, b;

	return !fstatat(dir_fd, name, &a, AT_SYMLINK_NOFOLLOW) && !fstat(fd, &b) &&
	       S_ISREG(a.st_mode) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int zn_atomic_file_commit(struct zn_atomic_file *af)
{
	struct stat st;
	int exists, rc;

	if (fsync(af->fd)) {
		rc = -errno;
		zn_error("%s %s: fsync failed: %s", af->what, af->path, zn_strerror(rc));
		goto fail;
	}
	/* the destination may have changed since begin: still refuse non-regular ones */
	rc = check_target(af->dir_fd, af->base, af->path, af->what, &st, &exists);
	if (rc)
		goto fail;
	if (!is_ours(af->dir_fd, af->tmp, af->fd)) {
		zn_error("%s %s: the temporary file %s was replaced by someone else: not saved",
			 af->what, af->path, af->tmp);
		rc = -EEXIST;
		goto fail;
	}
	if (renameat(af->dir_fd, af->tmp, af->dir_fd, af->base)) {
		rc = -errno;
		zn_error("%s %s: rename into place failed: %s", af->what, af->path,
			 zn_strerror(rc));
		goto fail;
	}
	free(af->tmp);
	af->tmp = NULL;
	if (fsync(af->dir_fd)) {
		rc = -errno;
		zn_error("%s %s: fsync of its directory failed: %s", af->what, af->path,
			 zn_strerror(rc));
	}
	release(af);
	return rc;
fail:
	zn_atomic_file_abort(af);
	return rc;
}

int zn_write_file_atomic(const char *path, const char *what, const void *buf, size_t n)
{
	struct zn_atomic_file af;
	int rc = zn_atomic_file_begin(&af, path, what);

	if (rc)
		return rc;
	rc = zn_write_all(af.fd, buf, n, path);
	if (rc) {
		zn_atomic_file_abort(&af);
		return rc;
	}
	return zn_atomic_file_commit(&af);
}
