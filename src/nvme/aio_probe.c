/* Probes for zinc info: what io_uring offers on this kernel, and what a directory offers
 * as an nvme path (filesystem, free space, O_DIRECT, fallocate). Nothing here is on the
 * I/O path; every probe cleans up after itself.
 */
#include "nvme/aio.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "core/log.h"

static int probe_nop(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct io_uring_cqe *cqe;
	int rc;

	io_uring_prep_nop(sqe);
	rc = io_uring_submit_and_wait(ring, 1);
	if (rc < 0)
		return rc;
	rc = io_uring_peek_cqe(ring, &cqe);
	if (rc < 0)
		return rc;
	rc = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return rc < 0 ? rc : 0;
}

static void probe_fixed(struct io_uring *ring, struct zn_aio_probe *p)
{
	struct io_uring_probe *op = io_uring_get_probe_ring(ring);
	struct iovec iov;
	void *page = NULL;
	int rc;

	if (op) {
		p->read_fixed_op = io_uring_opcode_supported(op, IORING_OP_READ_FIXED) &&
				   io_uring_opcode_supported(op, IORING_OP_WRITE_FIXED);
		io_uring_free_probe(op);
	}
	rc = io_uring_register_files_sparse(ring, 4);
	p->fixed_files = rc >= 0;
	p->fixed_files_err = rc < 0 ? rc : 0;
	rc = io_uring_register_buffers_sparse(ring, 4);
	if (rc >= 0) {
		/* The sparse table alone proves little: pin one page as the engine would. */
		if (posix_memalign(&page, ZN_AIO_ALIGN, ZN_AIO_ALIGN)) {
			rc = -ENOMEM;
		} else {
			iov.iov_base = page;
			iov.iov_len = ZN_AIO_ALIGN;
			rc = io_uring_register_buffers_update_tag(ring, 0, &iov, NULL, 1);
		}
	}
	p->fixed_buffers = rc >= 0 && p->read_fixed_op;
	p->fixed_buffers_err = rc < 0 ? rc : (p->read_fixed_op ? 0 : -EOPNOTSUPP);
	io_uring_unregister_buffers(ring);
	free(page);
}

int zn_aio_probe(struct zn_aio_probe *p)
{
	struct io_uring ring;
	struct utsname u;
	int rc;

	memset(p, 0, sizeof(*p));
	if (!uname(&u))
		snprintf(p->kernel, sizeof(p->kernel), "%s", u.release);
	rc = io_uring_queue_init(4, &ring, 0);
	if (rc < 0) {
		p->uring_err = rc;
		p->fixed_buffers_err = p->fixed_files_err = rc;
		return 0;
	}
	rc = probe_nop(&ring);
	p->uring = rc == 0;
	p->uring_err = rc;
	if (p->uring)
		probe_fixed(&ring, p);
	io_uring_queue_exit(&ring);
	return 0;
}

const char *zn_nvme_fs_name(long f_type)
{
	static const struct {
		unsigned long magic;
		const char *name;
	} fs[] = {
		{ 0xEF53, "ext4" },        { 0x58465342, "xfs" },      { 0x9123683E, "btrfs" },
		{ 0x01021994, "tmpfs" },   { 0x794c7630, "overlay" },  { 0x6969, "nfs" },
		{ 0x2fc12fc1, "zfs" },     { 0xF2F52010, "f2fs" },     { 0x65735546, "fuse" },
		{ 0xFF534D42, "cifs" },    { 0x5346544e, "ntfs" },     { 0x4d44, "vfat" },
		{ 0x858458f6, "ramfs" },   { 0x73717368, "squashfs" }, { 0x01021997, "9p" },
		{ 0x6a656a63, "fakeowner" }, { 0xca451a4e, "bcachefs" },
	};
	size_t i;

	for (i = 0; i < sizeof(fs) / sizeof(fs[0]); i++)
		if ((unsigned long)(unsigned int)f_type == fs[i].magic)
			return fs[i].name;
	return NULL;
}

/* Writes and reads back one 4 KiB block with O_DIRECT in a scratch file under dir. */
static void probe_direct(const char *dir, struct zn_nvme_path_probe *out)
{
	char path[ZN_PATH_MAX + 32];
	unsigned char *buf = NULL;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/.zinc-probe-%ld", dir, (long)getpid());
	/* Scratch file for the O_DIRECT test; removed below whatever happens. */
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0) {
		out->o_direct_err = -errno;
		return;
	}
	unlink(path);
	out->fallocate = fallocate(fd, 0, 0, ZN_AIO_ALIGN) == 0;
	if (posix_memalign((void **)&buf, ZN_AIO_ALIGN, ZN_AIO_ALIGN)) {
		rc = -ENOMEM;
		goto close_fd;
	}
	memset(buf, 0x5a, ZN_AIO_ALIGN);
	if (pwrite(fd, buf, ZN_AIO_ALIGN, 0) != (ssize_t)ZN_AIO_ALIGN) {
		rc = errno ? -errno : -EIO;
		goto free_buf;
	}
	memset(buf, 0, ZN_AIO_ALIGN);
	if (pread(fd, buf, ZN_AIO_ALIGN, 0) != (ssize_t)ZN_AIO_ALIGN) {
		rc = errno ? -errno : -EIO;
		goto free_buf;
	}
	if (buf[0] != 0x5a || buf[ZN_AIO_ALIGN - 1] != 0x5a)
		rc = -EIO;
free_buf:
	free(buf);
close_fd:
	close(fd);
	out->o_direct = rc == 0;
	out->o_direct_err = rc;
}

int zn_nvme_path_probe(const char *path, struct zn_nvme_path_probe *out)
{
	struct statvfs sv;
	struct statfs sf;
	const char *name;
	struct stat st;

	memset(out, 0, sizeof(*out));
	if (stat(path, &st)) {
		int rc = -errno;

		zn_error("nvme path %s: %s", path, zn_strerror(rc));
		return rc;
	}
	if (!S_ISDIR(st.st_mode)) {
		zn_error("nvme path %s is not a directory", path);
		return -ENOTDIR;
	}
	if (!statfs(path, &sf)) {
		name = zn_nvme_fs_name((long)sf.f_type);
		if (name)
			snprintf(out->fs_type, sizeof(out->fs_type), "%s", name);
		else
			snprintf(out->fs_type, sizeof(out->fs_type), "0x%lx",
				 (unsigned long)sf.f_type);
	}
	if (!statvfs(path, &sv)) {
		out->free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
		out->total_bytes = (uint64_t)sv.f_blocks * sv.f_frsize;
	}
	out->writable = access(path, W_OK | X_OK) == 0;
	if (out->writable)
		probe_direct(path, out);
	else
		out->o_direct_err = -EACCES;
	return 0;
}
