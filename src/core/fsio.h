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

#include <stdbool.h>
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

/* ---- removal, locks and output directories (fsio_tree.c) ----
 *
 * Removal never follows a link: a symlink (or any non-directory) is unlinked itself, a
 * directory is opened with O_NOFOLLOW|O_DIRECTORY and emptied through its fd (unlinkat),
 * its subdirectories likewise; another file system is never entered (-EXDEV). So a link
 * planted where zinc removes its own files (a stale temporary, an old checkpoint) costs
 * the link, never what it points to. */

/* Removes path: a directory with everything in it, or the file or link itself. The
 * components above the last are followed as given (they are the user's path). 0 (also
 * when path is absent) or the first negative errno, after one warning line naming what
 * and path. */
int zn_remove_tree(const char *path, const char *what);
/* The same for name in the directory dir_fd. */
int zn_remove_tree_at(int dir_fd, const char *name, const char *what);

#define ZN_DIR_LOCK_NAME ".zinc-lock"
/* Locks the directory dir for this process's life: flock() on dir/.zinc-lock (made when
 * missing, never through a link), which then names this process (pid, host, start time).
 * -EBUSY, after a line naming dir and the run that holds it, when another process holds
 * it; a file system without locks (ENOLCK) gets a warning and *fd_out without a lock.
 * *fd_out: the lock file's descriptor; closing it (or exiting) releases the lock. */
int zn_dir_lock(const char *dir, const char *what, int *fd_out);

/* An output directory, made when missing (mode 0777 less the umask): refused when path
 * names a symlink (to a directory or not), a file, FIFO or device, as zn_output_check_dir
 * does; so files are never written through a link planted at the directory's name. */
int zn_output_dir_make(const char *path, const char *what);

/* ---- what a command reads and writes, by identity (fsio_ident.c) ----
 *
 * A command lists every path it reads (inputs) and writes or removes (outputs) and
 * zn_io_check refuses, before any work, an output that is the same file as another entry
 * (same device and inode after resolving links, so hard links and symlinks count; for a
 * path that does not exist yet, the same resolved parent directory and name), or that
 * lies inside another entry's directory at a name that entry reads or writes (or contains
 * one). Two exceptions, both declared by the command: entries of one `kind` (an output
 * replacing an input of its own kind) and two `shared` entries.
 *
 *     struct zn_io io[] = { { .path = in, .what = "input" },
 *                           { .path = out, .what = "-o", .out = true } };
 *     if (zn_io_check(io, 2))
 *             return ZN_EUSAGE;            // "-o x and input ./x are the same file: ..."
 */
struct zn_io {
	const char *path;  /* NULL: not given (skipped) */
	const char *what;  /* the flag, for the message */
	bool out;          /* written or removed by the command */
	/* when path is (or, for an output, will be) a directory: fnmatch patterns of the
	 * names in it the command reads or writes ("*": everything); NULL: path is a file */
	const char *const *names;
	/* a directory the command both reads and writes by design (--save-dir, and the
	 * --resume that reads it): two shared entries are not compared with each other, and
	 * a shared one is compared with others only by the names inside it */
	bool shared;
	/* an output may be the same file or directory as an input of the same kind, which
	 * the command has read whole before it writes (a model saved over the one a run
	 * started from, as transformers' save_pretrained allows); NULL: never */
	const char *kind;
};

/* 0, or ZN_EUSAGE after a line naming both flags and paths and what to change. */
int zn_io_check(const struct zn_io *io, int n);

/* "a directory", "a FIFO (named pipe)", "a character device", ... for messages. */
const char *zn_file_kind(mode_t m);

/* "12.50 GiB", "3.00 MiB", "512.00 KiB" or "100 bytes": the largest binary unit in which
 * the value is at least 1, so small sizes never print as "0.00 GiB". Returns buf. */
const char *zn_format_bytes(char *buf, size_t n, uint64_t bytes);

#endif
