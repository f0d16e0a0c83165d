/* Frozen parameters on nvme (frozen.h, docs/lora.md): the frozen file and its reads.
 *
 * The file is unlinked at create and opened O_DIRECT where the filesystem allows it. Every
 * transfer goes through the frozen part's own aio engine (nvme/aio.h: io_uring, else the
 * pread/pwrite pool), made from the run's "aio" block: one layer's extent is cut into
 * block_size_bytes pieces with queue_depth of them in flight, so a single layer's read
 * moves at the device's bandwidth, not at one synchronous pread's.
 *
 * Reads run ahead of use through their own pinned read buffers, apart from the device's
 * working slots: layer 0's, and the plan's frozen_read_buffers for the sequence, item j
 * reading into rd[j % rd_n]. A buffer takes the read of its next item as soon as the copy
 * up of its previous item is complete (zn_frozen_io_pump, called at the sequence's begin,
 * acquire and release, never blocking), so the reads run up to rd_n items ahead of the
 * copies up, however few working slots the device budget allows; zn_frozen_io_take blocks
 * only for a read that has not finished (or a buffer still being copied up). The bytes
 * read are the same whichever way they arrive, so the results are bit for bit those of
 * synchronous reads (rd_n 1; test_nvme_lora).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "core/size.h"
#include "core/trace.h"
#include "cpu/arena.h"
#include "model/quant/q4.h"
#include "sched/acts.h"
#include "sched/frozen.h"
#include "sched/plan.h"
#include "sched/tiers.h"
#include "sched/trace_dev.h"

bool zn_frozen_traced(const struct zn_frozen *fz)
{
	return fz->c.tr && zn_tracer_on(fz->c.tr);
}

/* layer l's extent in the file (zn_frozen_io_rw) */
static uint64_t extent(const struct zn_frozen *fz, int l)
{
	return zn_frozen_file_extent(fz, l);
}

/* what a use of layer l reads: its extent, or a streamed layer's rest (frozen_experts.c) */
static uint64_t use_extent(const struct zn_frozen *fz, int l)
{
	return zn_plan_host_alloc_bytes(zn_frozen_fetch_bytes(fz, l));
}

/* a pinned read buffer of a layer's stored bytes, counted in pinned_bytes */
static int alloc_read(struct zn_frozen *fz, struct zn_fread *r, uint64_t bytes)
{
	int rc = zn_tiers_halloc(fz->c.arena, &r->buf, bytes);

	if (!rc && bytes)
		fz->pinned_bytes += zn_plan_host_alloc_bytes(bytes);
	r->layer = -1;
	return rc ? rc : zn_event_create(fz->c.dev, &r->copied);
}

int zn_frozen_io_open(struct zn_frozen *fz)
{
	char path[ZN_PATH_MAX + 64];
	int fd, rc;

	snprintf(path, sizeof(path), "%s/.zinc-frozen-r%d-XXXXXX",
		 fz->c.nvme_dir ? fz->c.nvme_dir : ".", fz->c.rank);
	fd = mkstemp(path);
	if (fd < 0) {
		rc = -errno;
		zn_error("frozen parameters on nvme: cannot create a file in %s (%s): check "
			 "offload_param.nvme_path", path, zn_strerror(rc));
		return rc;
	}
	unlink(path); /* anonymous: gone when closed, even after a crash */
	/* O_DIRECT where the filesystem has it (tmpfs has not: then through the page cache) */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_DIRECT))
		zn_debug("frozen file: no O_DIRECT (%s)", zn_strerror(-errno));
	fz->fd = fd;
	rc = zn_aio_create(&fz->aio, fz->c.aio);
	if (!rc)
		rc = zn_aio_file_add(fz->aio, fd, "the frozen parameters' file", &fz->af);
	/* the whole pinned arena (the read buffers are in it) as fixed buffers: no page
	 * pinning per request */
	if (!rc && fz->c.arena)
		rc = zn_aio_register_buffer(fz->aio, zn_arena_base(fz->c.arena),
					    zn_arena_size(fz->c.arena) / ZN_AIO_ALIGN *
						    ZN_AIO_ALIGN);
	fz->arena_registered = !rc && fz->c.arena;
	if (!rc)
		zn_debug("frozen parameters on nvme through %s, %d read buffers",
			 zn_aio_describe(fz->aio), fz->c.plan->frozen_read_buffers);
	if (!rc)
		rc = alloc_read(fz, &fz->rd0, fz->c.plan->frozen_layer0_bytes);
	fz->rd_n = fz->c.plan->frozen_read_buffers > 0 ? fz->c.plan->frozen_read_buffers : 1;
	fz->rd = rc ? NULL : zn_size_calloc((uint64_t)fz->rd_n, sizeof(*fz->rd),
					    "the frozen read buffers");
	if (!rc && !fz->rd)
		rc = -ENOMEM;
	for (int i = 0; !rc && i < fz->rd_n; i++)
		rc = alloc_read(fz, &fz->rd[i], fz->c.plan->frozen_slot_bytes);
	return rc;
}

static void wait_read(struct zn_fread *r)
{
	if (r->reading)
		(void)zn_aio_wait(&r->req);
	r->reading = false;
}

void zn_frozen_io_close(struct zn_frozen *fz)
{

	wait_read(&fz->rd0);
	zn_event_destroy(fz->rd0.copied);
	for (int i = 0; fz->rd && i < fz->rd_n; i++) {
		wait_read(&fz->rd[i]);
		zn_event_destroy(fz->rd[i].copied);
	}
	free(fz->rd);
	fz->rd = NULL;
	fz->rd_n = 0;
	if (fz->af)
		zn_aio_file_remove(fz->aio, fz->af);
	if (fz->arena_registered)
		zn_aio_unregister_buffer(fz->aio, zn_arena_base(fz->c.arena));
	fz->arena_registered = false;
	zn_aio_destroy(fz->aio);
	fz->af = NULL;
	fz->aio = NULL;
	if (fz->fd >= 0)
		close(fz->fd);
	fz->fd = -1;
}

static int failed(int l, bool write, int rc)
{
	zn_error("frozen parameters of layer %d: nvme %s failed (%s)", l, write ? "write" : "read",
		 zn_strerror(rc));
	return rc;
}

int zn_frozen_io_rw(struct zn_frozen *fz, int l, void *buf, bool write)
{
	struct zn_aio_req req;
	int rc = write ? zn_aio_write(fz->aio, fz->af, fz->file_off[l], extent(fz, l), buf,
				      &req) :
			 zn_aio_read(fz->aio, fz->af, fz->file_off[l], extent(fz, l), buf,
				     &req);

	if (!rc)
		rc = zn_aio_wait(&req);
	return rc ? failed(l, write, rc) : 0;
}

/* Submits layer l's read into r->buf; with block, first waits for the buffer's previous
 * copy up, else returns -EAGAIN while it is pending. */
static int submit(struct zn_frozen *fz, int l, struct zn_fread *r, bool block)
{
	int rc = 0;

	wait_read(r); /* left from a step that failed: its bytes are not wanted */
	if (r->copy_pending) {
		if (!block && !zn_event_query(r->copied))
			return -EAGAIN;
		rc = zn_event_synchronize(r->copied);
		if (rc)
			return rc;
		r->copy_pending = false;
	}
	r->t0_ns = zn_frozen_traced(fz) ? zn_trace_now_ns() : 0;
	rc = zn_aio_read(fz->aio, fz->af, fz->file_off[l], use_extent(fz, l), r->buf,
			 &r->req);
	if (rc)
		return failed(l, false, rc);
	r->reading = true;
	r->layer = l;
	return 0;
}

/* item's read buffer; item -1: layer 0's */
static struct zn_fread *rbuf(struct zn_frozen *fz, int item)
{
	return item < 0 ? &fz->rd0 : &fz->rd[item % fz->rd_n];
}

/* The next item's read, if its buffer is free: its previous item's copy up enqueued
 * (item - rd_n < the items the ring issued) and, unless block, already complete. */
static int next_read(struct zn_frozen *fz, bool block)
{
	int j = fz->seq_read, l, rc;

	if (j >= fz->seq_len || j - fz->rd_n >= zn_ring_issued(&fz->ring))
		return -EAGAIN;
	l = fz->use[j].layer;
	if (fz->sh.numel[l]) {
		rc = submit(fz, l, rbuf(fz, j), block);
		if (rc)
			return rc;
	}
	fz->seq_read++;
	return 0;
}

int zn_frozen_io_pump(struct zn_frozen *fz)
{
	int rc = 0;

	if (fz->c.plan->frozen_home != ZN_TIER_NVME)
		return 0;
	while (!rc)
		rc = next_read(fz, false);
	return rc == -EAGAIN ? 0 : rc;
}

int zn_frozen_io_start0(struct zn_frozen *fz, bool read0)
{
	int rc = 0;

	if (fz->c.plan->frozen_home != ZN_TIER_NVME)
		return 0;
	zn_aio_set_timing(fz->aio, zn_frozen_traced(fz));
	if (read0 && fz->sh.numel[0] && !fz->rd0.reading)
		rc = submit(fz, 0, &fz->rd0, true);
	return rc ? rc : zn_frozen_io_pump(fz);
}

int zn_frozen_io_take(struct zn_frozen *fz, int item, int l, const void **src)
{
	struct zn_fread *r = rbuf(fz, item);
	int rc = 0;

	*src = NULL;
	if (item >= 0) /* every read up to item's submitted, in order */
		while (!rc && fz->seq_read <= item)
			rc = next_read(fz, true);
	else if (!r->reading)
		rc = submit(fz, l, r, true);
	if (rc && rc != -EAGAIN)
		return rc;
	if (!r->reading || r->layer != l) {
		zn_error("frozen parameters of layer %d: no read in flight for it (internal)", l);
		return -EINVAL;
	}
	rc = zn_aio_wait(&r->req);
	r->reading = false;
	if (rc)
		return failed(l, false, rc);
	fz->bytes_read += use_extent(fz, l);
	if (zn_frozen_traced(fz))
		zn_tracer_add_host(fz->c.tr, ZN_TRACE_NVME_READ, 0, "read frozen", l, r->t0_ns,
			       r->req.done_ns ? r->req.done_ns : zn_trace_now_ns(),
			       use_extent(fz, l));
	*src = r->buf;
	return 0;
}

int zn_frozen_io_copied(struct zn_frozen *fz, int item)
{
	struct zn_fread *r = rbuf(fz, item);
	int rc = zn_event_record(r->copied, fz->c.copy_in);

	r->copy_pending = !rc;
	return rc;
}

bool zn_frozen_io_ready(struct zn_frozen *fz, int item)
{
	struct zn_fread *r;

	if (fz->c.plan->frozen_home != ZN_TIER_NVME || !fz->sh.numel[fz->use[item].layer])
		return true;
	if (item >= fz->seq_read)
		return false;
	r = rbuf(fz, item);
	return r->reading && zn_aio_poll(&r->req) != -EINPROGRESS;
}

uint64_t zn_frozen_read_bytes(const struct zn_frozen *fz)
{
	return fz->bytes_read + fz->x_read_bytes;
}
