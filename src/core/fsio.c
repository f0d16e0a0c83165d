/* Input files opened only when regular (non-blocking open, so a FIFO never hangs), whole
 * reads and writes, and byte sizes for messages (rules in fsio.h; outputs in
 * fsio_out.c). */
#include "core/fsio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

const char *zn_file_kind(mode_t m)
{
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISFIFO(m))
		return "a FIFO (named pipe)";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISLNK(m))
		return "a symbolic link";
	return "not a regular file";
}

static int refuse_input(const char *path, const char *what, mode_t m)
{
	zn_error("%s %s: is %s, not a regular file: give a file", what, path, zn_file_kind(m));
	return S_ISDIR(m) ? -EISDIR : -EINVAL;
}

int zn_open_input_regular(const char *path, const char *what, uint64_t *size_out)
{
	struct stat st;
	int fd, rc;

	if (!path || !*path) {
		zn_error("%s: the path is empty: give a file", what);
		return -ENOENT;
	}
	/* refuse what is not a regular file before opening it (a device open can act) */
	if (stat(path, &st)) {
		rc = -errno;
		zn_error("%s %s: cannot open: %s%s", what, path, zn_strerror(rc),
			 rc == -ENOENT ? ": check the path" : "");
		return rc;
	}
	if (!S_ISREG(st.st_mode))
		return refuse_input(path, what, st.st_mode);
	/* read-only; non-blocking in case it was swapped for a FIFO since the stat */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		zn_error("%s %s: cannot open: %s", what, path, zn_strerror(rc));
		return rc;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		rc = refuse_input(path, what, st.st_mode);
		close(fd);
		return rc;
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) {
		rc = zn_check_errno(-1, "fcntl(F_SETFL)", __FILE__, __LINE__);
		close(fd);
		return rc;
	}
	if (size_out)
		*size_out = (uint64_t)st.st_size;
	return fd;
}

int zn_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path)
{
	char *p = buf;

	while (n) {
		ssize_t r = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int rc = -errno;

			zn_error("%s: read at byte %llu failed: %s", path, (unsigned long long)off,
				 zn_strerror(rc));
			return rc;
		}
		if (r == 0) {
			zn_error("%s: the file ends at byte %llu, before the data being read: it "
				 "was truncated or replaced while zinc used it", path,
				 (unsigned long long)off);
			return -EIO;
		}
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int zn_write_all(int fd, const void *buf, size_t n, const char *path)
{
	const char *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int rc = -errno;

			zn_error("%s: write failed: %s%s", path, zn_strerror(rc),
				 rc == -ENOSPC || rc == -EDQUOT ? ": free space there" : "");
			return rc;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int zn_read_input_file(const char *path, const char *what, size_t max_bytes, char **out,
		       size_t *len_out)
{
	uint64_t size;
	char *buf;
	int fd = zn_open_input_regular(path, what, &size), rc;

	*out = NULL;
	if (fd < 0)
		return fd;
	if (size > max_bytes) {
		zn_error("%s %s: %llu bytes, more than the %zu-byte limit: is this the right "
			 "file?", what, path, (unsigned long long)size, max_bytes);
		close(fd);
		return -EFBIG;
	}
	buf = malloc((size_t)size + 1);
	rc = buf ? zn_pread_all(fd, buf, (size_t)size, 0, path) : -ENOMEM;
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	buf[size] = 0;
	*out = buf;
	if (len_out)
		*len_out = (size_t)size;
	return 0;
}

const char *zn_format_bytes(char *buf, size_t n, uint64_t bytes)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, n, "%llu bytes", (unsigned long long)bytes);
		return buf;
	}
	while (u < 4 && v >= 1024.0) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, n, "%.2f %s", v, units[u]);
	return buf;
}
