/* The swap store's layout and I/O: extents packed at 4 KiB in one logical space, striped
 * over the paths in stripe_bytes units, each read or write turned into one engine request
 * per path (a strided one, see struct zn_aio_io), and the per-extent CRC32C. The files and
 * directories themselves are swap_dir.c's.
 *
 * Logical byte L lives in stripe s = L / S on path s % P at file offset
 * (s / P) * S + L % S. So the stripes of a range that fall on one path are contiguous in
 * its file, and in memory they are P * S apart.
 */
#include "nvme/swap.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fault.h"
#include "core/log.h"
#include "nvme/crc32c.h"
#include "nvme/swap_impl.h"


/* one checksum block of an extent */
struct zn_swap_crc {
	uint32_t crc;
	bool valid;
};

struct zn_swap_ext {
	struct zn_swap_key key;
	uint64_t bytes;   /* rounded up to 4 KiB */
	uint64_t logical; /* start in the striped space */
	uint64_t block;   /* checksum block bytes (the whole extent: bytes) */
	struct zn_swap_crc *crc; /* ceil(bytes / block) blocks */
};

struct zn_swap {
	struct zn_aio *aio;
	int path_count;
	uint64_t stripe_bytes;
	bool checksum;
	pthread_mutex_t lock; /* crc fields */
	bool lock_ok;
	size_t ext_count;
	struct zn_swap_ext *ext; /* sorted by key */
	struct zn_swap_path paths[ZN_MAX_NVME_PATHS];
	struct zn_swap *owner; /* zn_swap_attach: the store whose files and extents these are */
};

static uint64_t align_up(uint64_t v)
{
	return (v + ZN_AIO_ALIGN - 1) / ZN_AIO_ALIGN * ZN_AIO_ALIGN;
}

const char *zn_swap_kind_name(int kind)
{
	static const char *names[] = { "param", "grad", "master", "exp_avg", "exp_avg_sq",
				       "activation", "other", "frozen" };

	return kind >= 0 && kind < (int)(sizeof(names) / sizeof(names[0])) ? names[kind] : "kind";
}

static int key_cmp(const struct zn_swap_key *a, const struct zn_swap_key *b)
{
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if (a->layer != b->layer)
		return a->layer < b->layer ? -1 : 1;
	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	return 0;
}

static int ext_cmp(const void *a, const void *b)
{
	return key_cmp(&((const struct zn_swap_ext *)a)->key, &((const struct zn_swap_ext *)b)->key);
}

static struct zn_swap_ext *find(const struct zn_swap *s, struct zn_swap_key key)
{
	struct zn_swap_ext probe = { .key = key };

	return bsearch(&probe, s->ext, s->ext_count, sizeof(*s->ext), ext_cmp);
}

void zn_swap_config_set_paths(struct zn_swap_config *c, const struct zn_offload_config *off)
{
	int i;

	c->path_count = off->nvme_path_count;
	for (i = 0; i < off->nvme_path_count && i < ZN_MAX_NVME_PATHS; i++)
		c->paths[i] = off->nvme_path[i];
}

static int check_config(const struct zn_swap_config *c)
{
	size_t i, len = c->run_id ? strlen(c->run_id) : 0;

	if (c->path_count < 1 || c->path_count > ZN_MAX_NVME_PATHS) {
		zn_error("swap: %d nvme paths: give 1 to %d (offload nvme_path)", c->path_count,
			 ZN_MAX_NVME_PATHS);
		return -EINVAL;
	}
	for (i = 0; i < (size_t)c->path_count; i++) {
		if (!c->paths[i] || !c->paths[i][0] || strlen(c->paths[i]) >= ZN_PATH_MAX) {
			zn_error("swap: nvme path %zu is empty or too long", i);
			return -EINVAL;
		}
	}
	if (!len || len > 64 || strspn(c->run_id, "abcdefghijklmnopqrstuvwxyz"
				       "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != len) {
		zn_error("swap: run id '%s': use 1 to 64 letters, digits, '.', '_' or '-'",
			 c->run_id ? c->run_id : "");
		return -EINVAL;
	}
	if (c->rank < 0 || c->stripe_bytes % ZN_AIO_ALIGN) {
		zn_error("swap: %s", c->rank < 0 ? "rank must be >= 0" :
			 "stripe_bytes must be a multiple of 4096");
		return -EINVAL;
	}
	if (c->extent_count && !c->extents) {
		zn_error("swap: extent_count is %zu but no extents given", c->extent_count);
		return -EINVAL;
	}
	return 0;
}

/* Copies, sorts and places the extents; sets each path's file size. */
static int layout(struct zn_swap *s, const struct zn_swap_config *c)
{
	uint64_t logical = 0, stripes, per_path;
	size_t i;
	int p;

	s->ext_count = c->extent_count;
	s->ext = calloc(c->extent_count ? c->extent_count : 1, sizeof(*s->ext));
	if (!s->ext)
		return -ENOMEM;
	for (i = 0; i < c->extent_count; i++) {
		uint64_t b = align_up(c->extents[i].bytes), blk = c->extents[i].crc_block;

		if (blk % 4096) {
			zn_error("swap: extent (%s, layer %d): a checksum block of %" PRIu64
				 " bytes is not a multiple of 4 KiB", zn_swap_kind_name(
					 c->extents[i].key.kind), c->extents[i].key.layer, blk);
			return -EINVAL;
		}
		s->ext[i].key = c->extents[i].key;
		s->ext[i].bytes = b;
		s->ext[i].block = blk && blk < b ? blk : (b ? b : 4096);
		s->ext[i].crc = calloc((size_t)((b + s->ext[i].block - 1) / s->ext[i].block) + 1,
				       sizeof(*s->ext[i].crc));
		if (!s->ext[i].crc)
			return -ENOMEM;
	}
	qsort(s->ext, s->ext_count, sizeof(*s->ext), ext_cmp);
	for (i = 0; i < s->ext_count; i++) {
		if (i && !key_cmp(&s->ext[i - 1].key, &s->ext[i].key)) {
			zn_error("swap: extent (%s, layer %d, rank %d) is listed twice",
				 zn_swap_kind_name(s->ext[i].key.kind), s->ext[i].key.layer,
				 s->ext[i].key.rank);
			return -EINVAL;
		}
		s->ext[i].logical = logical;
		logical += s->ext[i].bytes;
	}
	if (s->path_count == 1) {
		s->paths[0].file_bytes = logical;
		return 0;
	}
	stripes = (logical + s->stripe_bytes - 1) / s->stripe_bytes;
	per_path = (stripes + (uint64_t)s->path_count - 1) / (uint64_t)s->path_count;
	for (p = 0; p < s->path_count; p++)
		s->paths[p].file_bytes = per_path * s->stripe_bytes;
	return 0;
}

/* The errno fallocate() is to fail with: the config's, else ZINC_SWAP_FAIL_FALLOCATE
 * (ENOSPC, EDQUOT, EIO, EOPNOTSUPP or a number; tests of the failure paths), else 0. */
static int inject_errno(const struct zn_swap_config *c)
{
	static const struct { const char *name; int err; } names[] = {
		{ "ENOSPC", ENOSPC }, { "EDQUOT", EDQUOT }, { "EIO", EIO },
		{ "EOPNOTSUPP", EOPNOTSUPP },
	};
	const char *v = zn_fault_value(ZN_FAULT_SWAP_FALLOCATE);
	char *end;
	long n;

	if (c->inject_fallocate_errno || !v || !*v)
		return c->inject_fallocate_errno;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(v, names[i].name))
			return names[i].err;
	n = strtol(v, &end, 10);
	if (*end || n <= 0 || n > 4095) {
		zn_warn("ZINC_SWAP_FAIL_FALLOCATE=%s ignored: give ENOSPC, EDQUOT, EIO, EOPNOTSUPP "
			"or an errno number", v);
		return 0;
	}
	return (int)n;
}

int zn_swap_create(struct zn_swap **out, struct zn_aio *aio, const struct zn_swap_config *cfg)
{
	struct zn_swap *s;
	uint64_t total = 0;
	char size[32];
	int rc, p;

	*out = NULL;
	rc = check_config(cfg);
	if (rc)
		return rc;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->aio = aio;
	s->path_count = cfg->path_count;
	s->stripe_bytes = cfg->stripe_bytes ? cfg->stripe_bytes : 1u << 20;
	s->checksum = cfg->checksum;
	for (p = 0; p < ZN_MAX_NVME_PATHS; p++) {
		s->paths[p].dir_fd = s->paths[p].lock_fd = s->paths[p].fd = -1;
		s->paths[p].sig_slot = -1;
	}
	for (p = 0; p < s->path_count; p++)
		snprintf(s->paths[p].root, sizeof(s->paths[p].root), "%s", cfg->paths[p]);
	if (pthread_mutex_init(&s->lock, NULL)) {
		rc = -ENOMEM;
		goto destroy;
	}
	s->lock_ok = true;
	rc = layout(s, cfg);
	if (rc)
		goto destroy;
	/* Stale files first: the space they free counts for the check. */
	for (p = 0; p < s->path_count && !rc; p++)
		rc = zn_swap_clean_stale(s->paths[p].root, cfg->run_id, cfg->rank);
	if (!rc)
		rc = zn_swap_check_space(s->paths, s->path_count);
	for (p = 0; p < s->path_count && !rc; p++)
		rc = zn_swap_path_make(&s->paths[p], cfg->run_id, cfg->rank, p, s->path_count,
				       inject_errno(cfg));
	for (p = 0; p < s->path_count && !rc; p++)
		rc = zn_aio_file_add(aio, s->paths[p].fd, s->paths[p].file, &s->paths[p].af);
	if (rc)
		goto destroy;
	for (p = 0; p < s->path_count; p++)
		total += s->paths[p].file_bytes;
	zn_info("swap: reserved %s for %zu extents in %d file%s (%s%s)",
		zn_swap_fmt_bytes(total, size, sizeof(size)), s->ext_count, s->path_count,
		s->path_count > 1 ? "s, striped" : "", s->paths[0].dir,
		s->path_count > 1 ? ", ..." : "");
	*out = s;
	return 0;
destroy:
	zn_swap_destroy(s);
	return rc;
}

void zn_swap_destroy(struct zn_swap *s)
{
	int p;

	if (!s)
		return;
	if (s->owner) { /* attached: the files and extents are the owner's */
		for (p = 0; p < s->path_count; p++)
			if (s->paths[p].af)
				zn_aio_file_remove(s->aio, s->paths[p].af);
		free(s);
		return;
	}
	for (p = 0; p < s->path_count; p++) {
		if (s->paths[p].af)
			zn_aio_file_remove(s->aio, s->paths[p].af);
		zn_swap_path_remove(&s->paths[p]);
	}
	if (s->lock_ok)
		pthread_mutex_destroy(&s->lock);
	for (size_t i = 0; s->ext && i < s->ext_count; i++)
		free(s->ext[i].crc);
	free(s->ext);
	free(s);
}

int zn_swap_extent_bytes(const struct zn_swap *s, struct zn_swap_key key, uint64_t *bytes)
{
	const struct zn_swap_ext *e = find(s, key);

	if (!e)
		return -ENOENT;
	*bytes = e->bytes;
	return 0;
}

uint64_t zn_swap_reserved_bytes(const struct zn_swap *s)
{
	uint64_t total = 0;
	int p;

	for (p = 0; p < s->path_count; p++)
		total += s->paths[p].file_bytes;
	return total;
}

const char *zn_swap_dir(const struct zn_swap *s, int path_index)
{
	return path_index >= 0 && path_index < s->path_count ? s->paths[path_index].dir : NULL;
}

const char *zn_swap_file(const struct zn_swap *s, int path_index)
{
	return path_index >= 0 && path_index < s->path_count ? s->paths[path_index].file : NULL;
}

static void locate_logical(const struct zn_swap *s, uint64_t L, int *path, uint64_t *off)
{
	uint64_t S = s->stripe_bytes, P = (uint64_t)s->path_count, st = L / S;

	if (P == 1) {
		*path = 0;
		*off = L;
		return;
	}
	*path = (int)(st % P);
	*off = (st / P) * S + L % S;
}

int zn_swap_locate(const struct zn_swap *s, struct zn_swap_key key, uint64_t offset,
		   int *path_index, uint64_t *file_offset)
{
	const struct zn_swap_ext *e = find(s, key);

	if (!e || offset >= e->bytes)
		return e ? -ERANGE : -ENOENT;
	locate_logical(s, e->logical + offset, path_index, file_offset);
	return 0;
}

/* The part of logical [a, b) on path p as a strided engine request; false if none. */
static bool part_for_path(const struct zn_swap *s, int p, uint64_t a, uint64_t b,
			  struct zn_aio_io *io)
{
	uint64_t S = s->stripe_bytes, P = (uint64_t)s->path_count, up = (uint64_t)p;
	uint64_t sa = a / S, sb = (b - 1) / S, s0, s1, f0, f1;

	s0 = sa + (up + P - sa % P) % P; /* first stripe >= sa on path p */
	if (s0 > sb)
		return false;
	s1 = sb - (sb % P + P - up) % P; /* last stripe <= sb on path p */
	f0 = (s0 / P) * S + (s0 == sa ? a % S : 0);
	f1 = (s1 / P) * S + (s1 == sb ? (b - 1) % S + 1 : S);
	io->offset = f0;
	io->bytes = f1 - f0;
	io->map_unit_bytes = S;
	io->map_stride_bytes = P * S;
	io->map_bias_bytes = (int64_t)(up * S) - (int64_t)a;
	return true;
}

static int check_range(const struct zn_swap *s, const struct zn_swap_ext *e,
		       struct zn_swap_key key, uint64_t offset, uint64_t bytes, const void *buf)
{
	if (!e) {
		zn_error("swap: no extent (%s, layer %d, rank %d) in this store",
			 zn_swap_kind_name(key.kind), key.layer, key.rank);
		return -ENOENT;
	}
	if (offset % ZN_AIO_ALIGN || bytes % ZN_AIO_ALIGN || (uintptr_t)buf % ZN_AIO_ALIGN) {
		zn_error("swap: extent (%s, layer %d, rank %d): offset %" PRIu64 ", size %" PRIu64
			 " and buffer %p must be multiples of 4096", zn_swap_kind_name(key.kind),
			 key.layer, key.rank, offset, bytes, buf);
		return -EINVAL;
	}
	if (offset > e->bytes || bytes > e->bytes - offset) {
		zn_error("swap: extent (%s, layer %d, rank %d) has %" PRIu64 " bytes: [%" PRIu64
			 ", +%" PRIu64 ") is outside it", zn_swap_kind_name(key.kind), key.layer,
			 key.rank, e->bytes, offset, bytes);
		return -ERANGE;
	}
	return 0;
}

static int submit(struct zn_swap *s, enum zn_aio_op op, struct zn_swap_key key,
		  uint64_t offset, uint64_t bytes, void *buf, enum zn_aio_prio prio,
		  struct zn_swap_req *req)
{
	struct zn_swap_ext *e = find(s, key);
	uint64_t a, b;
	int p, rc;

	memset(req, 0, sizeof(*req));
	req->swap = s;
	req->op = op;
	req->buf_h = buf;
	req->bytes = bytes;
	rc = check_range(s, e, key, offset, bytes, buf);
	if (rc) {
		req->finished = true;
		req->result = rc;
		return rc;
	}
	req->extent = (int)(e - s->ext);
	/* the whole checksum blocks it covers: from a block's start to a block's end or the
	 * extent's */
	if (bytes && offset % e->block == 0 &&
	    (bytes % e->block == 0 || offset + bytes == e->bytes)) {
		req->block_first = offset / e->block;
		req->block_count = (bytes + e->block - 1) / e->block;
	}
	if (s->checksum && op == ZN_AIO_WRITE && bytes) {
		/* Until this write is waited for, the blocks it touches are in flux. */
		pthread_mutex_lock(&s->lock);
		for (uint64_t k = offset / e->block; k <= (offset + bytes - 1) / e->block; k++)
			e->crc[k].valid = false;
		pthread_mutex_unlock(&s->lock);
	}
	if (!bytes)
		return 0;
	a = e->logical + offset;
	b = a + bytes;
	for (p = 0; p < s->path_count; p++) {
		struct zn_aio_io io = { .op = op, .file = s->paths[p].af, .buf_h = buf,
					.prio = prio };

		if (s->path_count == 1) {
			io.offset = a;
			io.bytes = bytes;
		} else if (!part_for_path(s, p, a, b, &io)) {
			continue;
		}
		rc = zn_aio_submit(s->aio, &io, &req->parts[req->part_count]);
		if (rc) {
			/* Parts already queued use the buffer: wait for them before failing. */
			while (req->part_count)
				zn_aio_wait(&req->parts[--req->part_count]);
			req->finished = true;
			req->result = rc;
			return rc;
		}
		req->part_count++;
	}
	return 0;
}

int zn_swap_read(struct zn_swap *s, struct zn_swap_key key, uint64_t offset, uint64_t bytes,
		 void *buf_h, struct zn_swap_req *req)
{
	return submit(s, ZN_AIO_READ, key, offset, bytes, buf_h, ZN_AIO_PRIO_NORMAL, req);
}

void zn_swap_promote(struct zn_swap_req *req)
{
	for (int p = 0; p < req->part_count; p++)
		zn_aio_promote(&req->parts[p]);
}

int zn_swap_read_prio(struct zn_swap *s, struct zn_swap_key key, uint64_t offset,
		      uint64_t bytes, void *buf_h, enum zn_aio_prio prio, struct zn_swap_req *req)
{
	return submit(s, ZN_AIO_READ, key, offset, bytes, buf_h, prio, req);
}

int zn_swap_write(struct zn_swap *s, struct zn_swap_key key, uint64_t offset, uint64_t bytes,
		  const void *buf_h, struct zn_swap_req *req)
{
	return submit(s, ZN_AIO_WRITE, key, offset, bytes, (void *)buf_h, ZN_AIO_PRIO_NORMAL, req);
}

/* All parts are done: record or check the checksum of each whole block. A written
 * buffer is the caller's until this returns, so its bytes are the ones written. */
static int finish(struct zn_swap_req *req, int rc)
{
	struct zn_swap *s = req->swap;
	struct zn_swap_ext *e = &s->ext[req->extent];

	req->finished = true;
	req->result = rc;
	if (!s->checksum || !req->block_count || rc)
		return rc;
	for (uint64_t i = 0; i < req->block_count; i++) {
		uint64_t k = req->block_first + i, at = i * e->block;
		uint64_t n = req->bytes - at < e->block ? req->bytes - at : e->block;
		uint32_t got = zn_crc32c(0, (const char *)req->buf_h + at, n), want;
		bool check;

		pthread_mutex_lock(&s->lock);
		if (req->op == ZN_AIO_WRITE)
			e->crc[k] = (struct zn_swap_crc){ got, true };
		check = e->crc[k].valid;
		want = e->crc[k].crc;
		pthread_mutex_unlock(&s->lock);
		if (req->op == ZN_AIO_WRITE || !check || got == want)
			continue;
		zn_error("checksum mismatch reading swap extent (%s, layer %d, rank %d) at byte %"
			 PRIu64 " from %s%s: stored %08x, read %08x: the file was changed or the "
			 "device corrupted it; restart from a checkpoint",
			 zn_swap_kind_name(e->key.kind), e->key.layer, e->key.rank, k * e->block,
			 s->paths[0].file, s->path_count > 1 ? " and its stripes" : "", want, got);
		req->result = -EBADMSG;
		break;
	}
	return req->result;
}

int zn_swap_wait(struct zn_swap_req *req)
{
	int i, rc = req->result;

	if (req->finished)
		return req->result;
	/* Every part is waited for, even after a failure: the buffer is in use until then. */
	for (i = 0; i < req->part_count; i++) {
		int r = zn_aio_wait(&req->parts[i]);

		if (r && !rc)
			rc = r;
	}
	return finish(req, rc);
}

uint64_t zn_swap_done_ns(const struct zn_swap_req *req)
{
	uint64_t t = 0;

	for (int i = 0; i < req->part_count; i++)
		if (req->parts[i].done_ns > t)
			t = req->parts[i].done_ns;
	return t;
}

int zn_swap_poll(struct zn_swap_req *req)
{
	int i;

	if (req->finished)
		return req->result;
	for (i = 0; i < req->part_count; i++)
		if (zn_aio_poll(&req->parts[i]) == -EINPROGRESS)
			return -EINPROGRESS;
	return zn_swap_wait(req);
}

int zn_swap_attach(struct zn_swap **out, struct zn_swap *s, struct zn_aio *aio)
{
	struct zn_swap *a;
	int rc = 0, p;

	*out = NULL;
	if (s->checksum) {
		zn_error("swap: a second engine's handle on %s needs a store without checksums "
			 "(they are kept in one handle)", s->paths[0].dir);
		return -EINVAL;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->owner = s;
	a->aio = aio;
	a->path_count = s->path_count;
	a->stripe_bytes = s->stripe_bytes;
	a->ext_count = s->ext_count;
	a->ext = s->ext; /* read only without checksums */
	for (p = 0; p < s->path_count; p++) {
		a->paths[p] = s->paths[p];
		a->paths[p].af = NULL;
	}
	for (p = 0; p < a->path_count && !rc; p++)
		rc = zn_aio_file_add(aio, a->paths[p].fd, a->paths[p].file, &a->paths[p].af);
	if (rc) {
		zn_swap_destroy(a);
		return rc;
	}
	*out = a;
	return 0;
}
