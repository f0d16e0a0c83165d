/* The store's tiered home: count items of item_bytes each (or item_size[i]), homed in pinned
 * host memory or on NVMe, moved through pinned buffers the home owns. Activation checkpoints
 * (sched/recompute.h), layer-major's boundary activations on nvme (sched/lmajor.h) and the
 * trainable parameters' shards on nvme (sched/swapio.c: its fetch buffers and hot layers,
 * on the extents of swapio's own swap store), the optimizer's nvme staging
 * (sched/swapio_opt.c: items AdamW's positions, each a chunk of a layer's master, m and v)
 * and the frozen base on nvme (sched/frozen_io.c: layer 0's and the sequence's read
 * buffers, on the frozen part's swap store of one extent per layer) live in one.
 *
 *   host  buf_n pinned buffers, one per item (buffer i is item i's home): the caller copies
 *         an item down into its buffer and up from it; the home only waits those copies.
 *   nvme  buf_n pinned staging buffers and one swap extent per item (nvme/swap.h: key
 *         (kind, id, rank), its own swap store and aio engine made at open, the extents
 *         checksummed; or a swap store and engine it is given, whose extents of that kind
 *         exist already: it reads and writes them, and close leaves them). An item
 *         copied down into a buffer is written behind (put), read ahead into a buffer
 *         before it is needed (read_ahead) and waited for (wait) before the caller copies
 *         it up.
 *
 * The caller picks the buffer of each transfer, enqueues the device copies on its streams
 * and records b->down (after the copy into b->h) and b->up (after the copy out of it); the
 * home tracks what each buffer is doing (enum zn_home_state) and settles it: settle waits
 * whatever the buffer is doing (a copy down not yet written is written first on nvme) and
 * leaves it FREE. Nothing here knows the engine: the home is given the device (its
 * events), the pinned arena (its buffers), the rank, the nvme paths, the run's id, the aio
 * block and a name callback for errors.
 *
 * Errors: 0 or a negative code. A failed nvme read or write logs one line naming the item
 * (the name callback: "activation checkpoint 3 (input of layer 4)"), the operation and the
 * swap file, with the system's message. A half-opened home closes.
 *
 *     struct zn_home h;
 *     struct zn_home_config c = { .tier = ZN_TIER_NVME, .count = 8, .buf_n = 4,
 *                                 .item_bytes = x, .kind = ZN_SWAP_ACTIVATION,
 *                                 .dev = dev, .arena = arena,
 *                                 .paths = &cfg.act_ckpt.home, .aio = &cfg.aio,
 *                                 .what = "acts", .name = name, .ctx = me };
 *     rc = zn_home_open(&h, &c);
 *     struct zn_home_buf *b = zn_home_buf(&h, id % 4);
 *     rc = zn_home_settle(&h, b);                 // the buffer's previous work done
 *     ... copy item id down into b->h on a stream, record b->down ...
 *     zn_home_filled(b, id);
 *     rc = zn_home_put(&h, b);                    // written behind (nvme)
 *     ...
 *     rc = zn_home_read_ahead(&h, b, id);         // nvme: the read starts (at b->t0)
 *     if (zn_home_ready(&h, b)) ...               // wait would not block
 *     rc = zn_home_wait(&h, b);                   // b->h holds item id
 *     ... copy b->h up, record b->up ...
 *     zn_home_emptying(&h, b);
 *     rc = zn_home_quiesce(&h);                   // end of step
 *     zn_home_close(&h);
 *
 * Threading: one thread drives a home (the step's).
 *
 * Segments: by default a transfer of item id moves its one extent (kind, id, rank) whole,
 * at the start of the buffer. A user whose item is several extents, parts of extents or
 * extents of another store (the optimizer's chunk of a layer's master, m and v) gives a
 * segs callback: item id's read or write as up to ZN_HOME_SEGS ranges, each (store, key,
 * offset, bytes) at buf_off in the buffer. Reads may run at background priority
 * (zn_home_read_ahead_prio, promoted to normal with zn_home_promote when someone waits);
 * a buffer the host filled (no device copy) is written behind with zn_home_write.
 */
#ifndef ZN_STORE_HOME_H
#define ZN_STORE_HOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/device.h"
#include "nvme/aio.h"
#include "nvme/swap.h"
#include "sched/plan.h"
#include "zinc.h"

struct zn_arena;

/* One range of a transfer: bytes of the extent key of store (NULL: the home's) from byte
 * off, to or from the buffer at buf_off. */
struct zn_home_seg {
	struct zn_swap *store;
	struct zn_swap_key key;
	uint64_t off, bytes, buf_off;
};

#define ZN_HOME_SEGS 4

enum zn_home_state {
	ZN_HOME_FREE = 0,
	ZN_HOME_DOWN,    /* the caller's copy into h enqueued (b->down) */
	ZN_HOME_WRITING, /* nvme write submitted */
	ZN_HOME_READING, /* nvme read submitted */
	ZN_HOME_UP,      /* nvme: the caller's copy out of h enqueued (b->up) */
};

/* One pinned buffer: an item's home (host) or a staging buffer (nvme). */
struct zn_home_buf {
	float *h;                /* bytes, rounded as the arena carves */
	uint64_t bytes;          /* buf_bytes[i] or item_bytes */
	int id;                  /* the item it holds, -1 none */
	uint64_t t0;             /* nvme: when its last read or write was submitted
				  * (zn_trace_now_ns) */
	enum zn_home_state state;
	struct zn_event *down, *up;
	int nreq;                /* nvme: the requests of the transfer in flight */
	struct zn_home_seg seg[ZN_HOME_SEGS];
	struct zn_swap_req req[ZN_HOME_SEGS];
};

/* What a home is given (borrowed: they outlive the home). */
struct zn_home_config {
	enum zn_tier tier;       /* ZN_TIER_HOST or ZN_TIER_NVME */
	int count;               /* items 0 .. count-1 (nvme: the extents) */
	int buf_n;               /* pinned buffers (host: count) */
	uint64_t item_bytes;
	/* optional, count entries: item i's bytes, read and written exactly (its extent's
	 * size); NULL: every item item_bytes, its extent rounded to 4 KiB */
	const uint64_t *item_size;
	/* optional, buf_n entries: buffer i's bytes (0: no buffer); NULL: item_bytes each */
	const uint64_t *buf_bytes;
	struct zn_device *dev;   /* the buffers' events */
	struct zn_arena *arena;  /* the buffers */
	/* buffers without events: on the host the caller orders its copies with events of
	 * its own and never calls filled or emptying (every buffer stays FREE); on nvme the
	 * host alone fills and reads the buffers (zn_home_write, read_ahead, wait) */
	bool bare;
	/* nvme only */
	int rank;
	enum zn_swap_kind kind;  /* the extents' swap kind, always set (ZN_SWAP_PARAM is 0) */
	/* given (both or neither): the swap store holding the items' extents and its engine;
	 * paths, run_id, what and aio are then unused. NULL: the home makes its own */
	struct zn_swap *store;
	struct zn_aio *engine;
	const struct zn_offload_config *paths;
	const char *run_id;      /* the run's id or "" (then p<pid>); its store is run_id-what */
	const char *what;
	const struct zn_aio_config *aio;
	/* writes what item id is for an error ("activation checkpoint 3 (input of layer 4)") */
	void (*name)(const void *ctx, int id, char *out, size_t size);
	/* optional: item id's read (write false) or write as out[0 .. n-1], n <= ZN_HOME_SEGS,
	 * returning n or a negative code; NULL: its one extent whole */
	int (*segs)(const void *ctx, int id, bool write, struct zn_home_seg *out);
	const void *ctx;
};

struct zn_home {
	struct zn_home_config c;
	struct zn_home_buf *buf; /* buf_n */
	struct zn_aio *aio;      /* nvme: its engine and swap store (its own, or given) */
	struct zn_swap *swap;
	bool owns_store;         /* made at open: close destroys them */
};

/* The buffers (each: its pinned view, then its down and up events unless bare) and, on
 * nvme with count > 0, the aio engine and the swap store. A zeroed home closes; so does a
 * half-opened one. */
int zn_home_open(struct zn_home *h, const struct zn_home_config *c);
/* every buffer settled (errors ignored), the store's files removed (its own store), the
 * events destroyed; the buffers are views of the arena (freed with it) */
void zn_home_close(struct zn_home *h);
struct zn_home_buf *zn_home_buf(struct zn_home *h, int i);
/* the caller enqueued the copy of item id into b->h and recorded b->down */
void zn_home_filled(struct zn_home_buf *b, int id);
/* nvme: b's item written behind to its extent (b's copy down waited first); host: nothing */
int zn_home_put(struct zn_home *h, struct zn_home_buf *b);
/* nvme: reading item id into b starts (b settled first) unless b is reading it already;
 * host: nothing (buffer id is its home) */
int zn_home_read_ahead(struct zn_home *h, struct zn_home_buf *b, int id);
/* the same at a queue priority (ZN_AIO_PRIO_BACKGROUND: read-ahead that yields to reads
 * someone waits for) */
int zn_home_read_ahead_prio(struct zn_home *h, struct zn_home_buf *b, int id,
			    enum zn_aio_prio prio);
/* b's background read, the parts not yet under way, becomes normal */
void zn_home_promote(struct zn_home_buf *b);
/* nvme: the bytes the host wrote into b->h written behind as item id (b settled first);
 * host: nothing */
int zn_home_write(struct zn_home *h, struct zn_home_buf *b, int id);
/* when b's last transfer completed (its latest request; 0 unless the engine stamps
 * completions, zn_aio_set_timing) */
uint64_t zn_home_done_ns(const struct zn_home_buf *b);
/* zn_home_settle would not block: b FREE, its transfer complete, or its device copy done
 * (a copy down on nvme still to be written: false) */
bool zn_home_idle(const struct zn_home *h, struct zn_home_buf *b);
/* nvme: b's read waited (b FREE, item id in b->h); host: nothing */
int zn_home_wait(struct zn_home *h, struct zn_home_buf *b);
/* zn_home_wait would not block: b is not reading, or its read has completed */
bool zn_home_ready(const struct zn_home *h, struct zn_home_buf *b);
/* the caller enqueued the copy out of b->h and recorded b->up: on nvme the buffer is busy
 * until it is done (host: the buffer stays the item's home, as it was) */
void zn_home_emptying(struct zn_home *h, struct zn_home_buf *b);
/* brings b to FREE, waiting whatever it is doing (on nvme a copy down is written first) */
int zn_home_settle(struct zn_home *h, struct zn_home_buf *b);
/* every buffer settled; the first error */
int zn_home_quiesce(struct zn_home *h);
/* the home's nvme aio engine (tests: fault injection, byte counts), NULL unless on nvme */
struct zn_aio *zn_home_aio(const struct zn_home *h);

#endif
