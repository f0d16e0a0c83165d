/* Files zinc reads and writes, with the same rules everywhere.
 *
 * Inputs (--data, --init-from, --config, config.json ...): only regular files are opened.
 * The open is non-blocking, then fstat, so a FIFO given as an input is refused at once
 * instead of hanging; a directory, FIFO, socket or device is refused with a line naming
 * the flag, the path and what it is.
 *
 * Outputs (--save-final, bench --out ...): written whole or not at all. The new contents
 * go to a fresh temporary file in the destination's directory, created with
 * O_CREAT|O_EXCL|O_NOFOLLOW (a planted file or symlink at the temporary name is never
 * opened), fsynced, renamed over the destination, and the directory fsynced. A symlink,
 * FIFO, device, socket or directory at the destination is refused, never followed or
 * replaced. An existing file's permission bits are kept (and its owner when running as
 * root); a new file gets 0666 less the umask.
 *
 *     struct zn_atomic_file af;
 *     if (zn_output_check(path, "--save-final"))    // before any work: fails fast
 *             return ZN_EUSAGE;
 *     ...
 *     rc = zn_atomic_file_begin(&af, path, "--save-final");
 *     if (!rc)
 *             rc = zn_write_all(af.fd, buf, n, path);
 *     rc = rc ? (zn_atomic_file_abort(&af), rc) : zn_atomic_file_commit(&af);
 *
 * Every function logs one line naming `what` (the flag or key) and the path on failure
 * and returns 0 or a negative errno.
 */
#ifndef ZN_CORE_FSIO_H
#define ZN_CORE_FSIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Opens path read-only if it is a regular file. Returns the fd (>= 0, close-on-exec,
 * blocking) and its size in *size_out (may be NULL), or a negative errno: -ENOENT
 * (missing), -EISDIR (a directory), -EINVAL (FIFO, socket or device), other open errors. */
int zn_open_input_regular(const char *path, const char *what, uint64_t *size_out);

/* Reads a whole regular file (at most max_bytes) into a NUL-terminated buffer the caller
 * frees. *len_out (may be NULL) excludes the NUL. */
int zn_read_input_file(const char *path, const char *what, size_t max_bytes, char **out,
		       size_t *len_out);

/* Reads exactly n bytes at off; a short read (the file shrank) is -EIO, logged with path. */
int zn_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path);
/* Writes all n bytes; an error (e.g. ENOSPC) is logged with path. */
int zn_write_all(int fd, const void *buf, size_t n, const char *path);

/* Can path be written as an output? Refuses "", a path ending in '/', a missing or
 * non-directory parent, a parent zinc cannot create files in (permissions, read-only
 * mount: checked by creating and removing a probe file), and a directory, symlink, FIFO,
 * socket or device at path. Call it before the first training step. */
int zn_output_check(const char *path, const char *what);
/* The same for an output directory (a Hugging Face save): path (trailing '/' allowed) is
 * absent, with a parent as zn_output_check wants, or an existing directory (not a symlink
 * to one) zinc can create files in; a file, symlink, FIFO or device there is refused. */
int zn_output_check_dir(const char *path, const char *what);

struct zn_atomic_file {
	int fd;       /* the temporary file: write here */
	int dir_fd;   /* the destination's directory */
	char *path;   /* destination as given */
	char *base;   /* its last component */
	char *tmp;    /* temporary name in dir_fd */
	const char *what;
};

/* Creates the temporary file next to path. On failure af is left closed (abort is a
 * no-op). */
int zn_atomic_file_begin(struct zn_atomic_file *af, const char *path, const char *what);
/* fsync, rename over path, fsync the directory; on failure the temporary is removed and
 * the destination left as it was. Always releases af. */
int zn_atomic_file_commit(struct zn_atomic_file *af);
/* Removes the temporary file and releases af. Safe on a zeroed or released af. */
void zn_atomic_file_abort(struct zn_atomic_file *af);

/* Writes a whole buffer to path through zn_atomic_file. */
int zn_write_file_atomic(const char *path, const char *what, const void *buf, size_t n);

/* "a directory", "a FIFO (named pipe)", "a character device", ... for messages. */
const char *zn_file_kind(mode_t m);

/* "12.50 GiB", "3.00 MiB", "512.00 KiB" or "100 bytes": the largest binary unit in which
 * the value is at least 1, so small sizes never print as "0.00 GiB". Returns buf. */
const char *zn_format_bytes(char *buf, size_t n, uint64_t bytes);

#endif
