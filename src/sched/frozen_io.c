/* Frozen parameters on nvme (frozen.h, docs/lora.md): the frozen store and its reads ahead.
 *
 * The layers live in a swap store (nvme/swap.h) of one extent per layer (kind
 * ZN_SWAP_FROZEN, a streamed layer's rest first and each expert after it, aligned) on
 * offload_param's first nvme path, not checksummed: the base is written once at load and
 * read at every use, and a CRC32C of every read would sit on the step's path. Every
 * transfer goes through the frozen part's own aio engine (nvme/aio.h: io_uring, else the
 * pread/pwrite pool), made from the run's "aio" block: one layer's extent is cut into
 * block_size_bytes pieces with queue_depth of them in flight, so a single layer's read
 * moves at the device's bandwidth, not at one synchronous pread's.
 *
 * Reads run ahead of use through the pinned buffers of a tiered home on that store
 * (store/home.h, given-store mode; item l: layer l), apart from the device's working
 * slots: buffer 0 is layer 0's, and buffers 1 .. rd_n (the plan's frozen_read_buffers) the
 * sequence's, item j reading into buffer 1 + j % rd_n. A read moves a use's bytes: a layer's
 * extent, or a streamed layer's rest (the home's segments). A buffer takes the read of its
 * next item as soon as the copy up of its previous item is complete (its up event:
 * zn_frozen_io_pump, called at the sequence's begin, acquire and release, never blocking),
 * so the reads run up to rd_n items ahead of the copies up, however few working slots the
 * device budget allows; zn_frozen_io_take blocks only for a read that has not finished (or
 * a buffer still being copied up). The bytes read are the same whichever way they arrive,
 * so the results are bit for bit those of synchronous reads (rd_n 1; test_nvme_lora).
 * Loading and reading back a layer (zn_frozen_io_rw) move its whole extent synchronously
 * from the caller's buffer.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "core/size.h"
#include "core/trace.h"
#include "cpu/arena.h"
#include "sched/acts.h"
#include "sched/frozen.h"
#include "sched/plan.h"
#include "sched/trace_dev.h"

bool zn_frozen_traced(const struct zn_frozen *fz)
{
	return fz->c.tr && zn_tracer_on(fz->c.tr);
}

struct zn_aio *zn_frozen_aio(struct zn_frozen *fz)
{
	return fz->aio;
}

static struct zn_swap_key key_of(const struct zn_frozen *fz, int l)
{
	return (struct zn_swap_key){ ZN_SWAP_FROZEN, l, fz->c.rank };
}

/* what a use of layer l reads: its extent, or a streamed layer's rest (frozen_experts.c) */
static uint64_t use_extent(const struct zn_frozen *fz, int l)
{
	return zn_plan_host_alloc_bytes(zn_frozen_fetch_bytes(fz, l));
}

/* the home's name of item l, for its errors */
static void layer_name(const void *ctx, int l, char *out, size_t size)
{
	(void)ctx;
	snprintf(out, size, "frozen parameters of layer %d", l);
}

/* the home's transfer of item l: a use's read (its rest, for a streamed layer) */
static int layer_segs(const void *ctx, int l, bool write, struct zn_home_seg *out)
{
	const struct zn_frozen *fz = ctx;

	out[0] = (struct zn_home_seg){ NULL, key_of(fz, l), 0,
				       write ? fz->ext_bytes[l] : use_extent(fz, l), 0 };
	return 1;
}

/* the store, its engine (the pinned arena registered as fixed buffers) */
static int open_store(struct zn_frozen *fz)
{
	static atomic_int seq; /* stores of one process (engines, generate) keep apart */
	struct zn_swap_extent *ext = zn_size_calloc((uint64_t)fz->sh.n, sizeof(*ext),
						    "the frozen layers' extents");
	struct zn_swap_config sc = { .path_count = 1, .rank = fz->c.rank, .extents = ext,
				     .extent_count = (size_t)fz->sh.n,
				     .stripe_bytes = ZN_PLAN_SWAP_STRIPE };
	char run_id[64];
	int rc;

	if (!ext)
		return -ENOMEM;
	for (int l = 0; l < fz->sh.n; l++)
		ext[l] = (struct zn_swap_extent){ key_of(fz, l), fz->ext_bytes[l], 0 };
	/* zinc-swap-frozen<n>-r<rank>-p<pid>: the pid keeps runs sharing a path apart */
	snprintf(run_id, sizeof(run_id), "frozen%d", atomic_fetch_add(&seq, 1));
	sc.run_id = run_id;
	sc.paths[0] = fz->c.nvme_dir ? fz->c.nvme_dir : ".";
	rc = zn_aio_create(&fz->aio, fz->c.aio);
	if (!rc)
		rc = zn_swap_create(&fz->store, fz->aio, &sc);
	free(ext);
	if (rc) {
		zn_error("frozen parameters on nvme: no store in %s (%s): check "
			 "offload_param.nvme_path", sc.paths[0], zn_strerror(rc));
		return rc;
	}
	/* the whole pinned arena (the read buffers are in it) as fixed buffers: no page
	 * pinning per request */
	if (fz->c.arena)
		rc = zn_aio_register_buffer(fz->aio, zn_arena_base(fz->c.arena),
					    zn_arena_size(fz->c.arena) / ZN_AIO_ALIGN *
						    ZN_AIO_ALIGN);
	fz->arena_registered = !rc && fz->c.arena;
	return rc;
}

int zn_frozen_io_open(struct zn_frozen *fz)
{
	const struct zn_engine_plan *p = fz->c.plan;
	uint64_t *buf_bytes;
	struct zn_home_config hc = {
		.tier = ZN_TIER_NVME, .count = fz->sh.n, .dev = fz->c.dev, .arena = fz->c.arena,
		.rank = fz->c.rank, .kind = ZN_SWAP_FROZEN, .name = layer_name,
		.segs = layer_segs, .ctx = fz,
	};
	int rc;

	fz->rd_n = p->frozen_read_buffers > 0 ? p->frozen_read_buffers : 1;
	fz->ext_bytes = zn_size_calloc((uint64_t)fz->sh.n, sizeof(*fz->ext_bytes),
				       "the frozen layers' extents");
	buf_bytes = zn_size_calloc((uint64_t)fz->rd_n + 1, sizeof(*buf_bytes),
				   "the frozen read buffers");
	if (!fz->ext_bytes || !buf_bytes) {
		free(buf_bytes);
		return -ENOMEM;
	}
	/* a layer's stored extent; a streamed layer's rest and experts each aligned */
	for (int l = 0; l < fz->sh.n; l++)
		fz->ext_bytes[l] = zn_frozen_file_extent(fz, l);
	buf_bytes[0] = p->frozen_layer0_bytes;
	for (int i = 1; i <= fz->rd_n; i++)
		buf_bytes[i] = p->frozen_slot_bytes;
	rc = open_store(fz);
	if (!rc)
		zn_debug("frozen parameters on nvme in %s through %s, %d read buffers",
			 zn_swap_file(fz->store, 0), zn_aio_describe(fz->aio), fz->rd_n);
	hc.item_size = fz->ext_bytes;
	hc.buf_n = fz->rd_n + 1;
	hc.buf_bytes = buf_bytes;
	hc.store = fz->store;
	hc.engine = fz->aio;
	if (!rc) /* a half-opened home is closed by zn_frozen_io_close */
		rc = zn_home_open(&fz->io, &hc);
	for (int i = 0; !rc && i <= fz->rd_n; i++)
		if (buf_bytes[i])
			fz->pinned_bytes += zn_plan_host_alloc_bytes(buf_bytes[i]);
	free(buf_bytes);
	return rc;
}

void zn_frozen_io_close(struct zn_frozen *fz)
{
	zn_home_close(&fz->io); /* reads in flight and copies up waited; a zeroed home too */
	zn_swap_destroy(fz->store);
	fz->store = NULL;
	if (fz->arena_registered)
		zn_aio_unregister_buffer(fz->aio, zn_arena_base(fz->c.arena));
	fz->arena_registered = false;
	zn_aio_destroy(fz->aio);
	fz->aio = NULL;
	free(fz->ext_bytes);
	fz->ext_bytes = NULL;
	fz->rd_n = 0;
}

/* one line naming layer l, the operation and the store's file */
static int failed(struct zn_frozen *fz, int l, bool write, int rc)
{
	zn_error("frozen parameters of layer %d: nvme %s of %s failed: %s", l,
		 write ? "write" : "read", zn_swap_file(fz->store, 0), zn_strerror(rc));
	return rc;
}

int zn_frozen_io_rw(struct zn_frozen *fz, int l, void *buf, bool write)
{
	struct zn_swap_req req;
	int rc = write ? zn_swap_write(fz->store, key_of(fz, l), 0, fz->ext_bytes[l], buf,
				       &req) :
			 zn_swap_read(fz->store, key_of(fz, l), 0, fz->ext_bytes[l], buf, &req);

	if (!rc)
		rc = zn_swap_wait(&req);
	return rc ? failed(fz, l, write, rc) : 0;
}

/* item's read buffer; item -1: layer 0's */
static struct zn_home_buf *rbuf(struct zn_frozen *fz, int item)
{
	return zn_home_buf(&fz->io, item < 0 ? 0 : 1 + item % fz->rd_n);
}

/* The next item's read, if its buffer is free: its previous item's copy up enqueued
 * (item - rd_n < the items the ring issued) and, unless block, already complete. */
static int next_read(struct zn_frozen *fz, bool block)
{
	int j = fz->seq_read, l, rc;
	struct zn_home_buf *b;

	if (j >= fz->seq_len || j - fz->rd_n >= zn_ring_issued(&fz->ring))
		return -EAGAIN;
	l = fz->use[j].layer;
	b = rbuf(fz, j);
	if (fz->sh.numel[l]) {
		if (!block && !zn_home_idle(&fz->io, b))
			return -EAGAIN;
		/* settles the buffer first: its copy up waited */
		rc = zn_home_read_ahead(&fz->io, b, l);
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
	if (read0 && fz->sh.numel[0]) /* unless it is reading it already */
		rc = zn_home_read_ahead(&fz->io, rbuf(fz, -1), 0);
	return rc ? rc : zn_frozen_io_pump(fz);
}

int zn_frozen_io_take(struct zn_frozen *fz, int item, int l, const void **src)
{
	struct zn_home_buf *b = rbuf(fz, item);
	int rc = 0;

	*src = NULL;
	if (item >= 0) /* every read up to item's submitted, in order */
		while (!rc && fz->seq_read <= item)
			rc = next_read(fz, true);
	else
		rc = zn_home_read_ahead(&fz->io, b, l);
	if (rc && rc != -EAGAIN)
		return rc;
	if (b->state != ZN_HOME_READING || b->id != l) {
		zn_error("frozen parameters of layer %d: no read in flight for it (internal)", l);
		return -EINVAL;
	}
	rc = zn_home_wait(&fz->io, b);
	if (rc)
		return rc;
	fz->bytes_read += use_extent(fz, l);
	if (zn_frozen_traced(fz)) {
		uint64_t done = zn_home_done_ns(b);

		zn_tracer_add_host(fz->c.tr, ZN_TRACE_NVME_READ, 0, "read frozen", l, b->t0,
				   done ? done : zn_trace_now_ns(), use_extent(fz, l));
	}
	*src = b->h;
	return 0;
}

int zn_frozen_io_copied(struct zn_frozen *fz, int item)
{
	struct zn_home_buf *b = rbuf(fz, item);
	int rc = zn_event_record(b->up, fz->c.copy_in);

	if (!rc) /* busy until the copy up is done */
		zn_home_emptying(&fz->io, b);
	return rc;
}

bool zn_frozen_io_ready(struct zn_frozen *fz, int item)
{
	struct zn_home_buf *b;

	if (fz->c.plan->frozen_home != ZN_TIER_NVME || !fz->sh.numel[fz->use[item].layer])
		return true;
	if (item >= fz->seq_read)
		return false;
	b = rbuf(fz, item);
	return b->state == ZN_HOME_READING && zn_home_ready(&fz->io, b);
}

uint64_t zn_frozen_read_bytes(const struct zn_frozen *fz)
{
	return fz->bytes_read + fz->x_read_bytes;
}
