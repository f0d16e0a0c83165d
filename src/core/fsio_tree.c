/* Removing what zinc made without ever following a link, locking a directory for a run's
 * life, and making an output directory that is not a link (rules in fsio.h). Everything
 * acts through directory descriptors (openat/unlinkat with O_NOFOLLOW), so a name swapped
 * for a link between two calls is at worst unlinked itself. */
#include "core/fsio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

#define REMOVE_DEPTH_MAX 16 /* zinc's trees are one or two levels deep */

static int remove_at(int dir_fd, dev_t dev, const char *name, int depth);

/* Every entry of the directory fd (on device dev), removed; the first error. */
static int empty_dir(int fd, dev_t dev, int depth)
{
	int dup_fd = dup(fd), rc = 0;
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	struct dirent *e;

	if (!d) {
		rc = -errno;
		if (dup_fd >= 0)
			close(dup_fd);
		return rc;
	}
	while ((e = readdir(d))) {
		int r;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		r = remove_at(fd, dev, e->d_name, depth + 1);
		if (r && !rc)
			rc = r;
	}
	closedir(d);
	return rc;
}

/* name in dir_fd: a non-directory (a link included) unlinked itself; a directory on the
 * same device emptied through its own descriptor, then removed. */
static int remove_at(int dir_fd, dev_t dev, const char *name, int depth)
{
	struct stat st;
	int fd, rc;

	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW))
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dir_fd, name, 0) && errno != ENOENT ? -errno : 0;
	if (st.st_dev != dev)
		return -EXDEV; /* a mount point: never enter another file system */
	if (depth >= REMOVE_DEPTH_MAX)
		return -ELOOP;
	/* the directory itself: if it was swapped for a link since the fstatat, this fails
	 * and the link is unlinked below, its target untouched */
	fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ELOOP && errno != ENOTDIR)
			return -errno;
		return unlinkat(dir_fd, name, 0) && errno != ENOENT ? -errno : 0;
	}
	rc = empty_dir(fd, dev, depth);
	close(fd);
	if (unlinkat(dir_fd, name, AT_REMOVEDIR) && errno != ENOENT && !rc)
		rc = -errno;
	return rc;
}

int zn_remove_tree_at(int dir_fd, const char *name, const char *what)
{
	struct stat st;
	int rc;

	if (fstat(dir_fd, &st))
		return zn_check_errno(-1, "fstat", __FILE__, __LINE__);
	rc = remove_at(dir_fd, st.st_dev, name, 0);
	if (rc)
		zn_warn("%s: could not remove %s completely: %s%s", what, name, zn_strerror(rc),
			rc == -EXDEV ? " (it holds a mount point, which zinc never enters)" : "");
	return rc;
}

int zn_remove_tree(const char *path, const char *what)
{
	size_t n = strlen(path);
	char *copy, *slash;
	int dir_fd, rc;

	while (n > 1 && path[n - 1] == '/')
		n--; /* "d/" is d, itself never followed */
	copy = strndup(path, n);
	if (!copy)
		return -ENOMEM;
	/* the parent as given; the last component is never followed */
	slash = strrchr(copy, '/');
	if (slash)
		*slash = 0;
	dir_fd = open(!slash ? "." : slash == copy ? "/" : copy, O_RDONLY | O_DIRECTORY |
		      O_CLOEXEC);
	if (dir_fd < 0) {
		rc = errno == ENOENT ? 0 : -errno;
		free(copy);
		return rc;
	}
	rc = zn_remove_tree_at(dir_fd, slash ? slash + 1 : copy, what);
	if (rc)
		zn_warn("%s: %s was left (partly)", what, path);
	close(dir_fd);
	free(copy);
	return rc;
}

/* ---- directory lock ---------------------------------------------------------------- */

/* The holder's line from the lock file ("pid 123 on host a since ..."), for the message. */
static void read_holder(int fd, char *buf, size_t n)
{
	ssize_t r = pread(fd, buf, n - 1, 0);

	buf[r > 0 ? r : 0] = 0;
	buf[strcspn(buf, "\n")] = 0;
	if (!buf[0])
		snprintf(buf, n, "a process that has not written its name yet");
}

static void write_holder(int fd)
{
	char host[256] = "?", when[64] = "?", line[400];
	time_t now = time(NULL);
	struct tm tm;
	int n;

	gethostname(host, sizeof(host) - 1);
	if (localtime_r(&now, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
	n = snprintf(line, sizeof(line), "pid %ld on host %s since %s\n", (long)getpid(), host,
		     when);
	/* informative only: a failure here leaves the lock held and the message vaguer */
	if (ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)n, 0) < 0)
		zn_debug("lock file: cannot write the holder: %s", zn_strerror(-errno));
}

int zn_dir_lock(const char *dir, const char *what, int *fd_out)
{
	char holder[400];
	struct stat st;
	int dir_fd, fd, rc;

	*fd_out = -1;
	dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir_fd < 0) {
		rc = -errno;
		zn_error("%s %s: cannot open the directory to lock it: %s", what, dir,
			 zn_strerror(rc));
		return rc;
	}
	/* never through a link; non-blocking so a FIFO planted there cannot hang the open */
	fd = openat(dir_fd, ZN_DIR_LOCK_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
		    O_CLOEXEC, 0644);
	rc = fd < 0 ? -errno : 0;
	close(dir_fd);
	if (!rc && (fstat(fd, &st) || !S_ISREG(st.st_mode)))
		rc = -EEXIST;
	if (rc) {
		zn_error("%s %s: cannot use its lock file %s: %s: remove it", what, dir,
			 ZN_DIR_LOCK_NAME, rc == -EEXIST || rc == -ELOOP ?
			 "not a regular file" : zn_strerror(rc));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		write_holder(fd);
		*fd_out = fd;
		return 0;
	}
	rc = -errno;
	if (rc == -EWOULDBLOCK) {
		read_holder(fd, holder, sizeof(holder));
		zn_error("%s %s is in use by another zinc run (%s): two runs would overwrite each "
			 "other's checkpoints; wait for it to end or give another directory", what,
			 dir, holder);
		close(fd);
		return -EBUSY;
	}
	/* e.g. NFS without a lock manager: the run goes on, unprotected */
	zn_warn("%s %s: cannot lock it (%s): make sure no other run writes there", what, dir,
		zn_strerror(rc));
	*fd_out = fd;
	return 0;
}

/* ---- output directories ------------------------------------------------------------ */

int zn_output_dir_make(const char *path, const char *what)
{
	size_t n = strlen(path);
	struct stat st;
	char *p;
	int rc = 0;

	while (n > 1 && path[n - 1] == '/')
		n--; /* "out/" is out; with the '/' lstat would follow a link */
	p = strndup(path, n);
	if (!p)
		return -ENOMEM;
	if (mkdir(p, 0777) && errno != EEXIST) {
		rc = -errno;
		zn_error("%s %s: cannot create the directory: %s", what, path, zn_strerror(rc));
	} else if (lstat(p, &st)) {
		rc = -errno;
		zn_error("%s %s: cannot check the directory: %s", what, path, zn_strerror(rc));
	} else if (!S_ISDIR(st.st_mode)) {
		zn_error("%s %s: is %s, not a directory: zinc neither follows nor replaces it: "
			 "remove it or choose another path", what, path,
			 S_ISREG(st.st_mode) ? "a file" : zn_file_kind(st.st_mode));
		rc = -EEXIST;
	}
	free(p);
	return rc;
}
