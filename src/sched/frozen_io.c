/* Frozen parameters on nvme (frozen.h, docs/lora.md): the frozen file and its reads.
 *
 * The file is unlinked at create and opened O_DIRECT where the filesystem allows it. Every
 * transfer goes through the frozen part's own aio engine (nvme/aio.h: io_uring, else the
 * pread/pwrite pool), made from the run's "aio" block: one layer's extent is cut into
 * block_size_bytes pieces with queue_depth of them in flight, so a single layer's read
 * moves at the device's bandwidth, not at one synchronous pread's.
 *
 * Reads run ahead of use: a working slot's pinned read buffer takes the read of the next
 * item that will use the slot as soon as the copy up of its previous item is complete
 * (zn_frozen_io_pump, called at the sequence's begin, acquire and release, never blocking);
 * zn_frozen_io_need makes sure an item's read has been submitted, blocking only when its
 * buffer is still being copied up. The bytes read are the same whichever way they arrive,
 * so the results are bit for bit those of the synchronous reads.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "sched/engine_impl.h"

static uint64_t extent(const struct zn_engine *e, int l)
{
	return zn_plan_host_alloc_bytes(e->ld[l].frozen_numel * e->plan.frozen_elem_bytes);
}

int zn_frozen_io_open(struct zn_engine *e)
{
	const struct zn_offload_config *o = &e->cfg.zero.offload_param;
	struct zn_frozen *fz = &e->fz;
	char path[ZN_PATH_MAX + 64];
	int fd, rc;

	snprintf(path, sizeof(path), "%s/.zinc-frozen-r%d-XXXXXX",
		 o->nvme_path_count > 0 ? o->nvme_path[0] : ".", e->rt.rank);
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
	rc = zn_aio_create(&fz->aio, &e->cfg.aio);
	if (!rc)
		rc = zn_aio_file_add(fz->aio, fd, "the frozen parameters' file", &fz->af);
	if (!rc)
		zn_debug("frozen parameters on nvme through %s", zn_aio_describe(fz->aio));
	return rc;
}

static void wait_slot(struct zn_fslot *s)
{
	if (s->reading)
		(void)zn_aio_wait(&s->req);
	s->reading = false;
}

void zn_frozen_io_close(struct zn_engine *e)
{
	struct zn_frozen *fz = &e->fz;

	wait_slot(&fz->slot0);
	for (int i = 0; fz->ring && i < fz->ring_n; i++)
		wait_slot(&fz->ring[i]);
	if (fz->af)
		zn_aio_file_remove(fz->aio, fz->af);
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

int zn_frozen_io_rw(struct zn_engine *e, int l, void *buf, bool write)
{
	struct zn_aio_req req;
	int rc = write ? zn_aio_write(e->fz.aio, e->fz.af, e->fz.file_off[l], extent(e, l), buf,
				      &req) :
			 zn_aio_read(e->fz.aio, e->fz.af, e->fz.file_off[l], extent(e, l), buf,
				     &req);

	if (!rc)
		rc = zn_aio_wait(&req);
	return rc ? failed(l, write, rc) : 0;
}

/* Submits layer l's read into s->read_h; with block, first waits for the buffer's previous
 * copy up, else returns -EAGAIN while it is pending. */
static int submit(struct zn_engine *e, int l, struct zn_fslot *s, bool block)
{
	int rc = 0;

	if (s->reading) /* left from a step that failed: its bytes are not wanted */
		(void)zn_aio_wait(&s->req);
	s->reading = false;
	if (s->copy_pending) {
		if (!block && !zn_event_query(s->copied))
			return -EAGAIN;
		rc = zn_event_synchronize(s->copied);
		if (rc)
			return rc;
		s->copy_pending = false;
	}
	rc = zn_aio_read(e->fz.aio, e->fz.af, e->fz.file_off[l], extent(e, l), s->read_h,
			 &s->req);
	if (rc)
		return failed(l, false, rc);
	s->reading = true;
	s->read_layer = l;
	return 0;
}

int zn_frozen_io_read_begin(struct zn_engine *e, int l, struct zn_fslot *s)
{
	if (s->reading)
		return 0;
	return submit(e, l, s, true);
}

int zn_frozen_io_read_end(struct zn_engine *e, int l, struct zn_fslot *s)
{
	int rc;

	if (!s->reading || s->read_layer != l) {
		zn_error("frozen parameters of layer %d: no read in flight for it (internal)", l);
		return -EINVAL;
	}
	rc = zn_aio_wait(&s->req);
	s->reading = false;
	if (rc)
		return failed(l, false, rc);
	e->fz.bytes_read += extent(e, l);
	return 0;
}

static struct zn_fslot *slot_of(struct zn_engine *e, int item)
{
	return &e->fz.ring[item % e->fz.ring_n];
}

/* The next item's read, if its buffer is free: its previous item's copy up enqueued
 * (item - ring_n < seq_issued) and, unless block, already complete. */
static int next_read(struct zn_engine *e, bool block)
{
	struct zn_frozen *fz = &e->fz;
	int j = fz->seq_read, l, rc;

	if (j >= fz->seq_len || j - fz->ring_n >= fz->seq_issued)
		return -EAGAIN;
	l = e->act.use[j].layer;
	if (e->ld[l].frozen_numel) {
		rc = submit(e, l, slot_of(e, j), block);
		if (rc)
			return rc;
	}
	fz->seq_read++;
	return 0;
}

int zn_frozen_io_pump(struct zn_engine *e)
{
	int rc = 0;

	if (e->plan.frozen_home != ZN_TIER_NVME)
		return 0;
	while (!rc)
		rc = next_read(e, false);
	return rc == -EAGAIN ? 0 : rc;
}

int zn_frozen_io_need(struct zn_engine *e, int item)
{
	int rc = 0;

	if (e->plan.frozen_home != ZN_TIER_NVME)
		return 0;
	while (!rc && e->fz.seq_read <= item)
		rc = next_read(e, true);
	return rc == -EAGAIN ? 0 : rc;
}
