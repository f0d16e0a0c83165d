/* The swap store: model state that lives on NVMe, as extents of preallocated files.
 *
 * A store is made for one run and one rank from a list of extents, each named by a key
 * (kind, layer, rank) and a size. Under every nvme path it makes a private directory
 *     <path>/zinc-swap-<run_id>-r<rank>-p<pid>/        mode 0700, with
 *         lock                                         flock()ed while the store lives
 *         stripe-<i>-of-<n>.bin                        mode 0600, O_EXCL | O_NOFOLLOW
 * and reserves the whole size with fallocate() before anything else happens, so a full
 * disk stops the run at start-up with "need X GiB on PATH, Y GiB free" (all paths on one
 * filesystem are counted together). With n paths the extents are striped over them
 * RAID-0 style in stripe_bytes units, so one extent read uses every device.
 *
 * Start-up also removes what a crashed run left under the same paths: any zinc-swap-*
 * directory whose lock nobody holds (and any half-made .zinc-swap-*.tmp of a dead pid),
 * with a line saying so. zn_swap_destroy() removes this store's files and directories.
 *
 * With checksum set, an extent is checked in blocks of its crc_block bytes (0: the whole
 * extent is one block): every write of whole blocks records the CRC32C of each, and every
 * later read of whole blocks checks them (-EBADMSG on mismatch, with a line naming the
 * extent, the block's offset and the files). A block is whole when it starts at a multiple
 * of crc_block and ends at the next or at the extent's end, so a caller that moves an
 * extent in chunks sets crc_block to the chunk's bytes. A write of part of a block drops
 * that block's checksum until its next whole write (partial blocks are not verified).
 *
 * I/O goes through the caller's engine; offsets, sizes and buffers must be 4 KiB aligned
 * (extent sizes are rounded up to 4 KiB: buffers for a whole extent need the rounded
 * size). Threading: reads and writes of different extents may run concurrently from any
 * threads; a read racing a write of the same bytes sees either.
 *
 *     struct zn_swap_extent ext[] = {
 *             { { ZN_SWAP_MASTER, 0, rank }, shard_bytes },
 *             { { ZN_SWAP_EXP_AVG, 0, rank }, shard_bytes },
 *     };
 *     struct zn_swap_config sc = { .run_id = "run1", .rank = rank, .extents = ext,
 *                                  .extent_count = 2, .checksum = true };
 *     zn_swap_config_set_paths(&sc, &cfg.zero.offload_optimizer);
 *     rc = zn_swap_create(&swap, aio, &sc);
 *     rc = zn_swap_write(swap, ext[0].key, 0, shard_bytes, master_h, &req);
 *     rc = zn_swap_wait(&req);
 *     zn_swap_destroy(swap);
 */
#ifndef ZN_NVME_SWAP_H
#define ZN_NVME_SWAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvme/aio.h"
#include "zinc.h"

enum zn_swap_kind {
	ZN_SWAP_PARAM = 0,      /* bf16 parameter shard */
	ZN_SWAP_GRAD = 1,       /* gradient shard */
	ZN_SWAP_MASTER = 2,     /* fp32 master weights */
	ZN_SWAP_EXP_AVG = 3,    /* AdamW m */
	ZN_SWAP_EXP_AVG_SQ = 4, /* AdamW v */
	ZN_SWAP_ACTIVATION = 5,
	ZN_SWAP_OTHER = 6,
	ZN_SWAP_FROZEN = 7,     /* a frozen base's layer (sched/frozen.h) */
};

struct zn_swap_key {
	int kind; /* enum zn_swap_kind, or any small integer */
	int layer;
	int rank;
};

struct zn_swap_extent {
	struct zn_swap_key key;
	uint64_t bytes;
	uint64_t crc_block; /* checksum block (multiple of 4 KiB); 0: the whole extent */
};

struct zn_swap_config {
	int path_count;
	const char *paths[ZN_MAX_NVME_PATHS];
	const char *run_id; /* letters, digits, '.', '_', '-'; at most 64 */
	int rank;
	const struct zn_swap_extent *extents; /* copied: may go away after create */
	size_t extent_count;
	uint64_t stripe_bytes; /* 0 = 1 MiB; multiple of 4 KiB */
	bool checksum;
	int inject_fallocate_errno; /* tests: fallocate() fails with this errno; 0: the
				     * environment's ZINC_SWAP_FAIL_FALLOCATE (ENOSPC, EIO,
				     * ... or a number), read at create */
};

struct zn_swap;

/* One read or write of an extent range; caller-owned, private fields. */
struct zn_swap_req {
	struct zn_swap *swap;
	int extent;
	int part_count;
	uint64_t block_first, block_count; /* the whole checksum blocks it covers (0: none) */
	bool finished;
	int result;
	enum zn_aio_op op;
	void *buf_h;
	uint64_t bytes;
	struct zn_aio_req parts[ZN_MAX_NVME_PATHS];
};

/* Points the config at an offload block's nvme_path[]; the block must outlive create. */
void zn_swap_config_set_paths(struct zn_swap_config *c, const struct zn_offload_config *off);

/* Returns 0; -EINVAL for a bad config (logged with what to change); -ENOSPC with "need X
 * GiB on PATH, Y GiB free"; -EBUSY when a live run holds this run id and rank on a path;
 * another -errno naming the file otherwise. Nothing is left on disk after a failure. */
int zn_swap_create(struct zn_swap **out, struct zn_aio *aio, const struct zn_swap_config *cfg);
/* Removes the files and directories. Requests must be finished. Accepts NULL. */
void zn_swap_destroy(struct zn_swap *s);

int zn_swap_read(struct zn_swap *s, struct zn_swap_key key, uint64_t offset, uint64_t bytes,
		 void *buf_h, struct zn_swap_req *req);
/* A read at a queue priority (enum zn_aio_prio): ZN_AIO_PRIO_BACKGROUND for read-ahead
 * that must not delay reads someone waits for. */
int zn_swap_read_prio(struct zn_swap *s, struct zn_swap_key key, uint64_t offset,
		      uint64_t bytes, void *buf_h, enum zn_aio_prio prio, struct zn_swap_req *req);
/* The parts of a background read not yet under way become normal (zn_aio_promote). */
void zn_swap_promote(struct zn_swap_req *req);
int zn_swap_write(struct zn_swap *s, struct zn_swap_key key, uint64_t offset, uint64_t bytes,
		  const void *buf_h, struct zn_swap_req *req);
/* 0, the first I/O error, or -EBADMSG for a checksum mismatch. */
int zn_swap_wait(struct zn_swap_req *req);
/* When a finished request completed (the latest part's req->done_ns; 0 unless the engine
 * stamps completions, zn_aio_set_timing). */
uint64_t zn_swap_done_ns(const struct zn_swap_req *req);
/* -EINPROGRESS while any part is in flight, else what zn_swap_wait() returns. */
int zn_swap_poll(struct zn_swap_req *req);

/* Size of an extent as reserved (rounded up to 4 KiB); -ENOENT for an unknown key. */
int zn_swap_extent_bytes(const struct zn_swap *s, struct zn_swap_key key, uint64_t *bytes);
uint64_t zn_swap_reserved_bytes(const struct zn_swap *s); /* over all paths */
const char *zn_swap_dir(const struct zn_swap *s, int path_index);
const char *zn_swap_file(const struct zn_swap *s, int path_index);
/* Where byte `offset` of an extent lives (for tests and error messages). */
int zn_swap_locate(const struct zn_swap *s, struct zn_swap_key key, uint64_t offset,
		   int *path_index, uint64_t *file_offset);
const char *zn_swap_kind_name(int kind);

/* A second handle on s's files and extents through another engine, for reads and writes
 * from a thread that keeps its own queue (the frozen experts' reads on the compute
 * stream's thread, sched/frozen_experts.c): its files are added to aio; the store's
 * checksums live in s alone, so s must be made without them (-EINVAL, logged). Destroy it
 * (zn_swap_destroy: its files leave aio, the files stay) before s; its requests must be
 * finished. Returns 0, -EINVAL or -ENOMEM. */
int zn_swap_attach(struct zn_swap **out, struct zn_swap *s, struct zn_aio *aio);

#endif
