/* Private to src/nvme/aio*.c: the engine object shared by the io_uring backend
 * (aio_uring.c) and the pread/pwrite pool (aio_pool.c), and the piece bookkeeping both use.
 *
 * Locking: aio->lock guards the request queue, every request's counters, the rate
 * buckets, the file and buffer tables and each ring's `sleeping` flag. Pieces are owned by
 * the worker that took them and touched without the lock until they are finished.
 */
#ifndef ZN_NVME_AIO_IMPL_H
#define ZN_NVME_AIO_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "nvme/aio.h"

#define ZN_AIO_MAX_RINGS 64
#define ZN_AIO_MAX_POOL_THREADS 16
#define ZN_AIO_FIXED_FILES 256
#define ZN_AIO_FIXED_BUFS 1024
#define ZN_AIO_MAX_REGIONS 64
#define ZN_AIO_BUF_CHUNK_BYTES (1ull << 30) /* the kernel's limit for one fixed buffer */
#define ZN_AIO_MAX_BLOCK_BYTES (256ull << 20)
#define ZN_AIO_MAX_RETRIES 1000             /* EINTR/EAGAIN in a row on one piece */

struct zn_aio_file {
	int fd;
	int fixed_index; /* slot in every ring's file table, -1 = plain descriptor */
	char name[ZN_PATH_MAX];
};

struct zn_aio_region {
	char *base;
	uint64_t bytes;
	int first_index; /* first slot in the buffer tables, -1 = plain memory */
	int index_count;
};

/* One piece of a request in flight: [offset, offset + bytes) of the file <-> mem. done
 * counts bytes already moved by earlier (short) completions. */
struct zn_aio_piece {
	struct zn_aio_req *req;
	enum zn_aio_op op;
	int fd;          /* descriptor or fixed-file index (fixed_file) */
	bool fixed_file;
	int buf_index;   /* fixed buffer slot or -1 */
	uint64_t offset;
	char *mem;
	uint32_t bytes;
	uint32_t done;
	uint32_t retries;
	bool background; /* counted in aio->background_inflight until finished */
	bool fault;      /* this submission was picked by fault injection */
	int err;
};

enum zn_piece_action {
	ZN_PIECE_DONE = 0,
	ZN_PIECE_AGAIN = 1,  /* resubmit the rest (short transfer, EINTR, EAGAIN) */
	ZN_PIECE_FAILED = 2, /* p->err says why */
};

struct zn_aio_backend_ops {
	const char *name;
	int (*start)(struct zn_aio *aio);       /* rings or threads; logs its own errors */
	void (*stop)(struct zn_aio *aio);       /* joins workers; works on a half-started one */
	void (*wake_locked)(struct zn_aio *aio); /* new work was queued */
	int (*file_add)(struct zn_aio *aio, struct zn_aio_file *f);       /* sets fixed_index */
	void (*file_remove)(struct zn_aio *aio, struct zn_aio_file *f);
	int (*buffer_add)(struct zn_aio *aio, struct zn_aio_region *r);   /* sets first_index */
	void (*buffer_remove)(struct zn_aio *aio, struct zn_aio_region *r);
};

struct zn_aio {
	struct zn_aio_config cfg;
	const struct zn_aio_backend_ops *ops;
	void *be;

	pthread_mutex_t lock;
	pthread_cond_t done_cv; /* a request finished */
	pthread_cond_t work_cv; /* pool: work was queued or the engine stops */
	bool lock_ok;
	struct zn_aio_req *head, *tail;
	bool stopping;

	struct zn_aio_cap cap[2]; /* [ZN_AIO_READ], [ZN_AIO_WRITE] */
	int background_inflight;  /* pieces of background requests in flight */
	atomic_bool timing;       /* stamp req->done_ns (zn_aio_set_timing) */

	atomic_uint_fast64_t seq; /* pieces issued */
	atomic_uint_fast64_t wseq; /* write pieces issued */
	atomic_bool fault_writes; /* the fault range counts write pieces (wseq) */
	atomic_uint_fast64_t fixed_buffer_pieces;
	atomic_uint_fast64_t resubmits;
	uint64_t bytes_done[2];   /* lock */
	uint64_t bytes_submitted[2]; /* lock */
	uint64_t failed_requests; /* lock */
	atomic_uint_fast64_t fault_lo, fault_hi; /* seq range [lo, hi) to hit */
	atomic_int fault_err;
	atomic_uint fault_short_bytes;

	bool fixed_buffers;
	bool fixed_files;
	bool file_slot_used[ZN_AIO_FIXED_FILES];
	bool buf_slot_used[ZN_AIO_FIXED_BUFS];
	struct zn_aio_region regions[ZN_AIO_MAX_REGIONS];
	int region_count;

	char fallback_reason[96];
	char desc[192];
};

extern const struct zn_aio_backend_ops zn_aio_uring_ops;
extern const struct zn_aio_backend_ops zn_aio_pool_ops;

/* Takes the next piece from the queue into p (lock held). Returns true when one was taken;
 * false when the queue is empty, or the rate cap holds it back for *wait_ns. */
bool zn_aio_take_locked(struct zn_aio *aio, struct zn_aio_piece *p, uint64_t *wait_ns);
/* Call before each (re)submission of p: counts it and decides fault injection. */
void zn_aio_piece_issue(struct zn_aio *aio, struct zn_aio_piece *p);
/* Classifies a completion (bytes moved or -errno), after fault injection. */
enum zn_piece_action zn_aio_piece_result(struct zn_aio *aio, struct zn_aio_piece *p, long res);
/* Accounts a finished piece (lock held). Returns true when its request is now complete
 * (then broadcast done_cv). */
bool zn_aio_finish_locked(struct zn_aio *aio, struct zn_aio_piece *p);

uint64_t zn_aio_now_ns(void);

#endif
