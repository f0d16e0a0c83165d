/* Checkpoint files: the counted file operations of a save (each a fault point:
 * ckpt_fault.c), CRC-32 through zlib, and the rank file: written layer by layer from the
 * engine's tiers, verified whole before a resume uses it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/fault.h"
#include "core/fsio.h"
#include "core/log.h"
#include "sched/ckpt_impl.h"
#include "sched/plan.h"
#include "zinc.h"

/* ---- counted operations (each a fault point, ckpt_fault.c) ---------------------------- */

int zn_ckpt_write(int fd, const void *buf, size_t n, const char *path)
{
	int rc = zn_ckpt_fault_point("write", path);

	return rc ? rc : zn_write_all(fd, buf, n, path);
}

int zn_ckpt_fsync(int fd, const char *path)
{
	int rc = zn_ckpt_fault_point("fsync", path);

	if (rc)
		return rc;
	if (fsync(fd)) {
		rc = -errno;
		zn_error("checkpoint: fsync %s failed: %s", path, zn_strerror(rc));
		return rc;
	}
	return 0;
}

int zn_ckpt_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;

	if (fd < 0) {
		rc = -errno;
		zn_error("checkpoint: cannot open the directory %s: %s", dir, zn_strerror(rc));
		return rc;
	}
	rc = zn_ckpt_fsync(fd, dir);
	close(fd);
	return rc;
}

int zn_ckpt_rename(const char *from, const char *to)
{
	int rc = zn_ckpt_fault_point("rename", to);

	if (rc)
		return rc;
	/* an existing checkpoint of the same step: swapped atomically, so `to` never goes
	 * missing; the caller removes what is now at `from` */
	if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE) == 0)
		return 1;
	if (errno != ENOENT && errno != EINVAL && errno != ENOSYS) {
		rc = -errno;
		zn_error("checkpoint: cannot rename %s to %s: %s", from, to, zn_strerror(rc));
		return rc;
	}
	if (rename(from, to) == 0)
		return 0;
	rc = -errno;
	zn_error("checkpoint: cannot rename %s to %s: %s", from, to, zn_strerror(rc));
	return rc;
}

int zn_ckpt_write_small(const char *dir, const char *name, const void *buf, size_t n)
{
	char tmp[ZN_PATH_MAX + 64], dst[ZN_PATH_MAX + 64];
	int fd, rc;

	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp-%ld", dir, name, (long)getpid());
	snprintf(dst, sizeof(dst), "%s/%s", dir, name);
	unlink(tmp); /* a dead save's (same pid only after a pid wrap); a link itself */
	rc = zn_ckpt_fault_point("create", tmp);
	if (rc)
		return rc;
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		zn_error("checkpoint: cannot create %s: %s", tmp, zn_strerror(rc));
		return rc;
	}
	rc = zn_ckpt_write(fd, buf, n, tmp);
	if (!rc)
		rc = zn_ckpt_fsync(fd, tmp);
	close(fd);
	if (!rc)
		rc = zn_ckpt_fault_point("rename", dst);
	if (!rc) {
		if (rename(tmp, dst)) {
			rc = -errno;
			zn_error("checkpoint: cannot rename %s to %s: %s", tmp, dst,
				 zn_strerror(rc));
		}
	}
	if (rc)
		unlink(tmp);
	if (!rc)
		rc = zn_ckpt_fsync_dir(dir);
	return rc;
}

uint32_t zn_ckpt_crc(uint32_t crc, const void *buf, size_t n)
{
	const unsigned char *p = buf;

	/* zlib's crc32 takes uInt lengths */
	while (n > 0) {
		uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;

		crc = (uint32_t)crc32(crc, p, k);
		p += k;
		n -= k;
	}
	return crc;
}

void zn_ckpt_rank_name(char *buf, size_t n, int rank, int world)
{
	snprintf(buf, n, "rank-%05d-of-%05d.bin", rank, world);
}

uint64_t zn_ckpt_slice_bytes(enum zn_optim_states states, uint64_t count)
{
	return count * 4 + 2 * zn_plan_moment_bytes(states, count);
}

uint64_t zn_ckpt_rank_file_bytes(const uint64_t *numel, int layers, int rank, int world,
				 enum zn_optim_states states)
{
	uint64_t b = ZN_CKPT_HEADER_BYTES + (uint64_t)layers * ZN_CKPT_TABLE_BYTES +
		     ZN_CKPT_TRAILER_BYTES;

	for (int l = 0; l < layers; l++) {
		struct zn_shard s;

		zn_plan_shard(numel[l], world, rank, &s);
		b += zn_ckpt_slice_bytes(states, s.real_numel);
	}
	return b;
}

/* ---- the rank file ------------------------------------------------------------------- */

static void put_u32(unsigned char *p, uint32_t x)
{
	memcpy(p, &x, 4);
}

static void put_u64(unsigned char *p, uint64_t x)
{
	memcpy(p, &x, 8);
}

static uint32_t get_u32(const unsigned char *p)
{
	uint32_t x;

	memcpy(&x, p, 4);
	return x;
}

static uint64_t get_u64(const unsigned char *p)
{
	uint64_t x;

	memcpy(&x, p, 8);
	return x;
}

/* header: magic[8], version, rank, world, stage, layers, optimizer states (u32 each: 0
 * fp32, so files from before the setting read as fp32), zero to 64 bytes */
static void header(unsigned char *h, const struct zn_ckpt_rank_hdr *r)
{
	memset(h, 0, ZN_CKPT_HEADER_BYTES);
	memcpy(h, ZN_CKPT_MAGIC, 8);
	put_u32(h + 8, 1);
	put_u32(h + 12, (uint32_t)r->rank);
	put_u32(h + 16, (uint32_t)r->world);
	put_u32(h + 20, (uint32_t)r->stage);
	put_u32(h + 24, (uint32_t)r->layers);
	put_u32(h + 28, (uint32_t)r->states);
}

/* layer table of rank r of w for numel[0 .. layers) into t (layers x 24 bytes) */
static void table(unsigned char *t, const uint64_t *numel, int layers, int r, int w)
{
	for (int l = 0; l < layers; l++) {
		struct zn_shard s;

		zn_plan_shard(numel[l], w, r, &s);
		put_u64(t + l * ZN_CKPT_TABLE_BYTES, numel[l]);
		put_u64(t + l * ZN_CKPT_TABLE_BYTES + 8, s.offset);
		put_u64(t + l * ZN_CKPT_TABLE_BYTES + 16, s.real_numel);
	}
}

/* The CRC of fd's bytes [pos, pos + n), read back in chunks of buf. */
static int crc_back(int fd, uint64_t pos, uint64_t n, void *buf, uint64_t bufbytes,
		    const char *path, uint32_t *c)
{
	int rc = 0;

	while (!rc && n > 0) {
		uint64_t k = n < bufbytes ? n : bufbytes;

		rc = zn_pread_all(fd, buf, k, pos, path);
		if (!rc)
			*c = zn_ckpt_crc(*c, buf, k);
		pos += k;
		n -= k;
	}
	return rc;
}

/* nvme: layer l's parts k0 .. 2 appended to fd file to file, each piece's CRC from the
 * copy just written; *k0 becomes the first part still to write (3: all copied) and *copy
 * false when the filesystems cannot copy (the rest goes through the staging buffer) */
static int copy_parts(struct zn_engine *e, int l, int fd, const char *path, void *buf,
		      uint64_t bufbytes, uint32_t *c, int *k0, bool *copy)
{
	int rc = 0;

	for (; !rc && *k0 < 3; (*k0)++) {
		uint64_t pc[2][2];
		int np = zn_ckpt_state_pieces(e, l, *k0, pc);

		for (int i = 0; !rc && i < np; i++) {
			off_t pos = lseek(fd, 0, SEEK_CUR);

			rc = pos < 0 ? -errno : zn_ckpt_state_copy(e, l, *k0, fd, pc[i][0],
								   pc[i][1], path);
			if (rc == -EOPNOTSUPP && i == 0) {
				*copy = false;
				return 0;
			}
			if (!rc)
				rc = crc_back(fd, (uint64_t)pos, pc[i][1], buf, bufbytes, path, c);
		}
	}
	return rc;
}

int zn_ckpt_write_rank_file(struct zn_engine *e, int fd, const char *path, uint32_t *crc,
			    const struct zn_ckpt_rank_hdr *hd, const uint64_t *numel)
{
	size_t tb = (size_t)hd->layers * ZN_CKPT_TABLE_BYTES;
	unsigned char h[ZN_CKPT_HEADER_BYTES], tr[ZN_CKPT_TRAILER_BYTES];
	unsigned char *t = malloc(tb);
	enum zn_optim_states st = hd->states;
	uint64_t bufbytes = zn_ckpt_slice_bytes(st, zn_ckpt_state_max_slice(e)) + 4;
	char *buf = malloc(bufbytes);
	const char *nc = zn_fault_value(ZN_FAULT_CKPT_NO_COPY);
	bool copy = zn_ckpt_state_on_nvme(e) && !(nc && *nc && strcmp(nc, "0"));
	uint32_t c = (uint32_t)crc32(0, Z_NULL, 0);
	int rc = t && buf ? 0 : -ENOMEM;

	header(h, hd);
	if (!rc) {
		table(t, numel, hd->layers, hd->rank, hd->world);
		c = zn_ckpt_crc(c, h, sizeof(h));
		c = zn_ckpt_crc(c, t, tb);
		rc = zn_ckpt_write(fd, h, sizeof(h), path);
	}
	if (!rc)
		rc = zn_ckpt_write(fd, t, tb, path);
	/* one layer at a time: host memory is one slice's master, m and v */
	for (int l = 0; !rc && l < hd->layers; l++) {
		uint64_t first, count, at[4];
		int k = 0;

		zn_ckpt_state_slice(e, l, &first, &count);
		/* nvme: extents copied file to file */
		if (copy && count)
			rc = copy_parts(e, l, fd, path, buf, bufbytes, &c, &k, &copy);
		if (rc || k == 3 || !count)
			continue;
		/* where each part starts in the slice's bytes (master, m, v, end) */
		at[0] = 0;
		at[1] = count * 4;
		at[2] = at[1] + zn_plan_moment_bytes(st, count);
		at[3] = zn_ckpt_slice_bytes(st, count);
		rc = zn_ckpt_state_read(e, l, buf);
		if (!rc) {
			c = zn_ckpt_crc(c, buf + at[k], at[3] - at[k]);
			rc = zn_ckpt_write(fd, buf + at[k], at[3] - at[k], path);
		}
	}
	put_u32(tr, c);
	put_u32(tr + 4, ZN_CKPT_END);
	if (!rc)
		rc = zn_ckpt_write(fd, tr, sizeof(tr), path);
	if (!rc)
		rc = zn_ckpt_fsync(fd, path);
	*crc = c;
	free(t);
	free(buf);
	return rc;
}

static int fail(const char *path, const char *fmt, uint64_t a, uint64_t b)
{
	char what[256];

	snprintf(what, sizeof(what), fmt, a, b);
	zn_error("checkpoint %s: %s: the checkpoint is damaged or from another run; resume "
		 "from another checkpoint (or another --save-dir)", path, what);
	return -EBADMSG;
}

int zn_ckpt_verify_rank(const char *path, const struct zn_ckpt_rank_hdr *hd,
			const uint64_t *numel, uint64_t size, uint32_t crc)
{
	int rank = hd->rank, world = hd->world, layers = hd->layers;
	uint64_t have = 0, want = zn_ckpt_rank_file_bytes(numel, layers, rank, world,
							   hd->states);
	size_t tb = (size_t)layers * ZN_CKPT_TABLE_BYTES, chunk = 1u << 20;
	unsigned char h[ZN_CKPT_HEADER_BYTES], *t = NULL, *buf = NULL;
	uint32_t c = (uint32_t)crc32(0, Z_NULL, 0);
	int fd, rc;

	fd = zn_open_input_regular(path, "checkpoint file", &have);
	if (fd == -ENOENT)
		zn_error("checkpoint %s is missing: rank %d of %d's file; the checkpoint is "
			 "incomplete", path, rank, world);
	if (fd < 0)
		return fd;
	rc = 0;
	if (have != want || have != size)
		rc = fail(path, have < want ? "truncated: %" PRIu64 " bytes, expected %" PRIu64 :
			  "size %" PRIu64 " bytes, expected %" PRIu64, have, want);
	t = malloc(tb + 1);
	buf = malloc(chunk);
	if (!rc && (!t || !buf))
		rc = -ENOMEM;
	if (!rc)
		rc = zn_pread_all(fd, h, sizeof(h), 0, path);
	if (!rc && memcmp(h, ZN_CKPT_MAGIC, 8))
		rc = fail(path, "not a zinc checkpoint rank file (bad magic)%.0" PRIu64 "%.0" PRIu64,
			  0, 0);
	if (!rc && ((int)get_u32(h + 12) != rank || (int)get_u32(h + 16) != world))
		rc = fail(path, "holds rank %" PRIu64 " of %" PRIu64 " ranks, not what its name and "
			  "the metadata say", get_u32(h + 12), get_u32(h + 16));
	if (!rc && (int)get_u32(h + 24) != layers)
		rc = fail(path, "has %" PRIu64 " layers, the metadata %" PRIu64, get_u32(h + 24),
			  (uint64_t)layers);
	if (!rc && get_u32(h + 28) != (uint32_t)hd->states)
		rc = fail(path, "holds optimizer states %" PRIu64 ", the metadata %" PRIu64
			  " (0 fp32, 1 bf16, 2 int8)", get_u32(h + 28), (uint64_t)hd->states);
	/* every other byte: version 1, the metadata's stage, zeros */
	if (!rc) {
		unsigned char want_h[ZN_CKPT_HEADER_BYTES];

		header(want_h, hd);
		if (memcmp(h, want_h, sizeof(want_h)))
			rc = fail(path, "header differs from what the metadata says (version %" PRIu64
				  ", stage %" PRIu64 ", or its reserved bytes)", get_u32(h + 8),
				  get_u32(h + 20));
	}
	if (!rc)
		rc = zn_pread_all(fd, t, tb, sizeof(h), path);
	for (int l = 0; !rc && l < layers; l++) {
		struct zn_shard s;
		const unsigned char *p = t + l * ZN_CKPT_TABLE_BYTES;

		zn_plan_shard(numel[l], world, rank, &s);
		if (get_u64(p) != numel[l] || get_u64(p + 8) != s.offset ||
		    get_u64(p + 16) != s.real_numel)
			rc = fail(path, "layer %" PRIu64 "'s table entry differs from the metadata's "
				  "shapes (numel %" PRIu64 ")", (uint64_t)l, get_u64(p));
	}
	/* the CRC of every byte before the trailer, read in bounded chunks */
	for (uint64_t off = 0; !rc && off < have - ZN_CKPT_TRAILER_BYTES;) {
		uint64_t n = have - ZN_CKPT_TRAILER_BYTES - off;

		if (n > chunk)
			n = chunk;
		rc = zn_pread_all(fd, buf, n, off, path);
		if (!rc)
			c = zn_ckpt_crc(c, buf, n);
		off += n;
	}
	if (!rc)
		rc = zn_pread_all(fd, h, ZN_CKPT_TRAILER_BYTES, have - ZN_CKPT_TRAILER_BYTES, path);
	if (!rc && (get_u32(h) != c || get_u32(h + 4) != ZN_CKPT_END))
		rc = fail(path, "CRC-32 mismatch: the file says %08" PRIx64 ", its bytes give %08"
			  PRIx64, get_u32(h), c);
	if (!rc && c != crc)
		rc = fail(path, "CRC-32 %08" PRIx64 " differs from the metadata's %08" PRIx64, c,
			  crc);
	free(t);
	free(buf);
	close(fd);
	return rc;
}
