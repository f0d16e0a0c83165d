/* The NVMe I/O engine: asynchronous O_DIRECT reads and writes through io_uring.
 *
 * An engine owns `intra_op_parallelism` rings, each driven by its own worker thread. A
 * request (file, offset, bytes, host buffer) is cut into pieces of at most `block_size`
 * bytes; every ring takes pieces from the engine's queue and keeps up to `queue_depth` of
 * them in flight, submitting them in batches (one at a time with `single_submit`). So one
 * large request is spread over all rings, and many small ones share them.
 *
 * Fixed resources: buffers registered with zn_aio_register_buffer() (the host arena's
 * pinned allocation) are registered with every ring, and a piece that lies in one is sent
 * as READ_FIXED / WRITE_FIXED; files added with zn_aio_file_add() are registered files.
 * Where the kernel refuses either, plain buffers / descriptors are used and
 * zn_aio_describe() says so. Where io_uring itself is unavailable (gVisor, seccomp, a
 * kernel without it, io_uring_disabled) the engine falls back to a pool of pread/pwrite
 * threads with the same API and logs that once. ZINC_AIO_BACKEND=pool forces the fallback
 * (=uring forbids it), as does zn_aio_create_backend().
 *
 * Contract:
 *   - offset, bytes and the buffer address must be multiples of ZN_AIO_ALIGN (4 KiB):
 *     anything else is -EINVAL at submission, with a line naming the bad value. There is
 *     no bounce buffer.
 *   - A short transfer is resubmitted for the rest; EINTR/EAGAIN are retried. Any other
 *     error ends the request (pieces already in flight are waited for, the rest are not
 *     issued) and zn_aio_wait() returns it; the engine logs one line naming the operation,
 *     the file, the offset and strerror, and zn_aio_req_strerror() formats the same text.
 *     A read that meets end of file fails with -ENODATA.
 *   - The request struct is caller-owned and must stay alive (and the buffer untouched)
 *     until zn_aio_wait() returns or zn_aio_poll() stops returning -EINPROGRESS. Requests
 *     may be submitted, waited for and polled from any thread.
 *   - Requests are not ordered against each other: a read submitted after a write to the
 *     same bytes may see old data until the write has been waited for.
 *
 *     struct zn_aio *aio;
 *     struct zn_aio_file *f;
 *     struct zn_aio_req req;
 *     rc = zn_aio_create(&aio, &cfg.aio);
 *     rc = zn_aio_file_add(aio, fd, path, &f);            // fd opened O_DIRECT
 *     rc = zn_aio_register_buffer(aio, arena_h, arena_bytes);  // optional, once
 *     rc = zn_aio_read(aio, f, 0, 1 << 20, buf_h, &req);
 *     ... compute ...
 *     rc = zn_aio_wait(&req);                             // 0 or -errno
 *     zn_aio_file_remove(aio, f);
 *     zn_aio_destroy(aio);
 */
#ifndef ZN_NVME_AIO_H
#define ZN_NVME_AIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

#define ZN_AIO_ALIGN 4096u

struct zn_aio;
struct zn_aio_file;

enum zn_aio_op {
	ZN_AIO_READ = 0,
	ZN_AIO_WRITE = 1,
};

/* Queue priority (zn_aio_io.prio). A background request's pieces are taken only when no
 * normal request of its direction is queued, and at most ZN_AIO_BACKGROUND_INFLIGHT of them
 * are in flight at once (so a normal request that arrives later waits behind at most that
 * many background pieces, not behind a whole queue of them). The swap tier reads the
 * optimizer's state ahead as background work: a parameter read that the compute waits for
 * overtakes it. */
enum zn_aio_prio {
	ZN_AIO_PRIO_NORMAL = 0,
	ZN_AIO_PRIO_BACKGROUND = 1,
};

#define ZN_AIO_BACKGROUND_INFLIGHT 2

enum zn_aio_backend {
	ZN_AIO_BACKEND_AUTO = 0, /* io_uring, else the pool (ZINC_AIO_BACKEND may force one) */
	ZN_AIO_BACKEND_URING = 1,
	ZN_AIO_BACKEND_POOL = 2,
};

/* One transfer. With map_unit_bytes == 0 the buffer is contiguous: file byte f is at
 * buf_h + (f - offset). Otherwise file byte f is at
 *     buf_h + map_bias_bytes + (f / map_unit_bytes) * map_stride_bytes + f % map_unit_bytes
 * and no piece crosses a multiple of map_unit_bytes. This is how the swap store stripes an
 * extent over several files (stride = paths x stripe unit) and how the benchmark reuses a
 * buffer smaller than the file (stride 0). Every field must be a multiple of 4 KiB. */
struct zn_aio_io {
	enum zn_aio_op op;
	struct zn_aio_file *file;
	uint64_t offset;
	uint64_t bytes;
	void *buf_h;
	uint64_t map_unit_bytes;
	uint64_t map_stride_bytes;
	int64_t map_bias_bytes;
	enum zn_aio_prio prio;
};

/* Completion handle. Caller-owned; the fields are private to the engine. */
struct zn_aio_req {
	struct zn_aio *aio;
	struct zn_aio_io io;
	struct zn_aio_req *next;  /* engine queue */
	uint64_t issued_bytes;    /* bytes handed to rings so far */
	uint64_t done_bytes;
	uint32_t pieces_inflight;
	int err;                  /* first error, 0 if none */
	uint64_t err_offset;      /* file offset of the piece that failed */
	int done;                 /* set (release) when finished; read with acquire */
	uint64_t done_ns;         /* CLOCK_MONOTONIC at completion, with zn_aio_set_timing */
};

/* Fault injection for tests: the nth piece sent to the kernel from now on (1-based;
 * 0 = off) completes with -err, or, when err is 0, as if only short_bytes of it had moved
 * (a short transfer, which the engine must complete). repeat > 1 hits that many pieces in
 * a row. writes_only: count write pieces only (the nth write from now on), for a fault
 * that must hit a write whatever order the queue's priorities give reads and writes. */
struct zn_aio_fault {
	uint64_t nth;
	int err;
	uint32_t short_bytes;
	uint32_t repeat;
	bool writes_only;
};

/* What the kernel offers, for zinc info. Never fails: unsupported things are false with
 * the reason in the matching *_err (negative errno). */
struct zn_aio_probe {
	bool uring;           /* a ring could be set up and ran a NOP */
	int uring_err;
	bool fixed_buffers;   /* sparse buffer table + update (kernel 5.19+) */
	int fixed_buffers_err;
	bool fixed_files;     /* sparse file table + update */
	int fixed_files_err;
	bool read_fixed_op;   /* IORING_OP_READ_FIXED / WRITE_FIXED in the opcode probe */
	char kernel[65];      /* uname release */
};

/* A directory that may hold swap files. */
struct zn_nvme_path_probe {
	char fs_type[32];     /* "ext4", "xfs", "tmpfs", ... or "0x<magic>" */
	uint64_t free_bytes;  /* available to this user (statvfs f_bavail) */
	uint64_t total_bytes;
	bool writable;
	bool o_direct;        /* a 4 KiB O_DIRECT write + read of a scratch file worked */
	int o_direct_err;     /* why not (negative errno) */
	bool fallocate;       /* the scratch file could be fallocate()d */
};

/* Creates an engine from the "aio" config block (block_size_bytes, queue_depth,
 * intra_op_parallelism, single_submit, overlap_events, bandwidth_cap_bytes_per_s).
 * Returns 0, -EINVAL for a bad value (logged with the key to change), -ENOSYS when
 * ZINC_AIO_BACKEND=uring and io_uring is unavailable, or another -errno. */
int zn_aio_create(struct zn_aio **out, const struct zn_aio_config *cfg);
int zn_aio_create_backend(struct zn_aio **out, const struct zn_aio_config *cfg,
			  enum zn_aio_backend backend);
/* Waits for nothing: requests still queued are failed with -ECANCELED, pieces in flight
 * are waited for. Accepts NULL. */
void zn_aio_destroy(struct zn_aio *aio);

/* The backend in use, e.g. "io_uring, 2 rings, fixed buffers, fixed files" or
 * "pread/pwrite pool, 8 threads (io_uring unavailable: Operation not permitted)". */
const char *zn_aio_describe(const struct zn_aio *aio);
bool zn_aio_is_uring(const struct zn_aio *aio);
bool zn_aio_fixed_buffers(const struct zn_aio *aio);
bool zn_aio_fixed_files(const struct zn_aio *aio);

/* Adds an open descriptor (O_DIRECT recommended; the engine does not own or close it).
 * name is used in error messages. Remove only when no request on it is in flight. */
int zn_aio_file_add(struct zn_aio *aio, int fd, const char *name, struct zn_aio_file **out);
void zn_aio_file_remove(struct zn_aio *aio, struct zn_aio_file *f);
const char *zn_aio_file_name(const struct zn_aio_file *f);

/* Registers [ptr, ptr + bytes) (4 KiB aligned) as fixed buffers with every ring, in 1 GiB
 * pieces (the kernel's limit per buffer). Returns 0 also when the kernel refuses (then the
 * region is used as plain memory and a warning says why); -EINVAL for misalignment.
 * Unregister only when no request on the region is in flight. */
int zn_aio_register_buffer(struct zn_aio *aio, void *ptr, uint64_t bytes);
void zn_aio_unregister_buffer(struct zn_aio *aio, void *ptr);

/* Queues a transfer; returns 0 (then wait or poll req) or -EINVAL (misaligned, bad
 * file) without queuing. bytes == 0 completes at once. */
int zn_aio_submit(struct zn_aio *aio, const struct zn_aio_io *io, struct zn_aio_req *req);
int zn_aio_read(struct zn_aio *aio, struct zn_aio_file *f, uint64_t offset, uint64_t bytes,
		void *buf_h, struct zn_aio_req *req);
int zn_aio_write(struct zn_aio *aio, struct zn_aio_file *f, uint64_t offset, uint64_t bytes,
		 const void *buf_h, struct zn_aio_req *req);

/* A queued background request becomes normal (someone waits for it now): its pieces not yet
 * taken go before later background work. No-op on a finished request. */
void zn_aio_promote(struct zn_aio_req *req);
/* Blocks until req is finished; returns 0 or the request's -errno. */
int zn_aio_wait(struct zn_aio_req *req);
/* -EINPROGRESS while in flight, else what zn_aio_wait() returns. Never blocks. */
int zn_aio_poll(struct zn_aio_req *req);
/* "read of /path at offset 4096: Input/output error" for a failed request. */
const char *zn_aio_req_strerror(const struct zn_aio_req *req, char *buf, size_t n);

/* Changes bandwidth_cap_bytes_per_s (per direction; 0 = uncapped) of a live engine: pieces
 * taken from now on see the new rate (zinc bench step sweeps caps in one process). */
void zn_aio_set_bandwidth_cap(struct zn_aio *aio, uint64_t bytes_per_s);
/* The writes' cap alone (a disk that writes slower than it reads; tests of write-behind). */
void zn_aio_set_write_cap(struct zn_aio *aio, uint64_t bytes_per_s);
/* With on, every request records its completion time in req->done_ns (tracing); off by
 * default, so the engine reads no clock for it. */
void zn_aio_set_timing(struct zn_aio *aio, bool on);

/* Arms (or with NULL clears) fault injection; see struct zn_aio_fault. */
void zn_aio_set_fault(struct zn_aio *aio, const struct zn_aio_fault *f);

/* Counters since creation. pieces counts every submission to the kernel (or the pool),
 * resubmissions included; fixed_buffer_pieces those sent as READ_FIXED/WRITE_FIXED;
 * resubmits those that continued a short or interrupted transfer. */
struct zn_aio_stats {
	uint64_t pieces;
	uint64_t fixed_buffer_pieces;
	uint64_t resubmits;
	uint64_t bytes_read;
	uint64_t bytes_written;
	uint64_t bytes_write_submitted; /* handed to zn_aio_submit, done or not */
	uint64_t failed_requests;
};
void zn_aio_get_stats(struct zn_aio *aio, struct zn_aio_stats *out);
uint64_t zn_aio_pieces_issued(struct zn_aio *aio);

int zn_aio_probe(struct zn_aio_probe *p);
int zn_nvme_path_probe(const char *path, struct zn_nvme_path_probe *out);
/* "ext4" for a statfs f_type, or NULL when unknown. */
const char *zn_nvme_fs_name(long f_type);

/* Token bucket (GCRA) behind bandwidth_cap_bytes_per_s, exposed so it can be tested
 * without a clock. take() returns 0 and charges bytes when they may go at now_ns, else the
 * nanoseconds to wait (nothing charged). The bucket allows a burst of burst_ns of traffic
 * (at least one piece). */
struct zn_aio_cap {
	uint64_t rate_bytes_per_s; /* 0 = unlimited */
	uint64_t burst_ns;
	uint64_t tat_ns;           /* theoretical arrival time of the next byte */
};
void zn_aio_cap_init(struct zn_aio_cap *c, uint64_t rate_bytes_per_s, uint64_t burst_ns);
uint64_t zn_aio_cap_take(struct zn_aio_cap *c, uint64_t bytes, uint64_t now_ns);

#endif
