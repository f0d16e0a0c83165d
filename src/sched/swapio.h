/* Swap I/O: state homed on nvme through the swap store (optimizer state with
 * offload_optimizer nvme, parameter shards with offload_param nvme), moved through pinned
 * staging views of the arena. The state is struct zn_swapio (engine field sw), given at
 * create the runtime, the tracer, the layers' buffers, the pinned arena, the plan's numbers
 * it reads and the configuration (struct zn_swapio_config); it reads no other part. See
 * swapio.c for the read-ahead / write-behind order; the parameters' fetch buffers are a
 * tiered home (store/home.h) on the parameter store's extents (swapio_fetch.c).
 *
 *     rc = zn_swapio_create(&sw, &(struct zn_swapio_config){ .rt = rt, ... });
 *     rc = zn_swapio_step_begin(&sw, step);        // the optimizer's read-ahead begins
 *     rc = zn_swapio_opt_acquire(&sw, l, c, &sb);  // AdamW on sb, then
 *     rc = zn_swapio_opt_release(&sw, l, c);       // written behind
 *     rc = zn_swapio_step_end(&sw);
 */
#ifndef ZN_SCHED_SWAPIO_H
#define ZN_SCHED_SWAPIO_H

#include <stdbool.h>

#include "gpu/device.h"
#include "nvme/aio.h"
#include "nvme/swap.h"
#include "sched/plan.h"
#include "store/home.h"
#include "zinc.h"

struct zn_arena;
struct zn_layer;
struct zn_runtime;
struct zn_tracer;

/* The plan's numbers the store reads (plan.h, struct zn_engine_plan). */
struct zn_swapio_plan {
	enum zn_tier optim, params;   /* placement: nvme homes the optimizer, the parameters */
	bool master_aliases_params;   /* the master is the parameter extent */
	bool gathers;                 /* compute reads fetched working copies */
	unsigned param_bytes;         /* bytes of one stored parameter */
	enum zn_optim_states states;  /* m and v as stored */
	int swap_buffers, fetch_buffers, hot_layers; /* staging: optimizer, fetch; hot layers */
	uint64_t swap_chunk_numel, swap_moment_bytes, fetch_ring_numel;
};

/* What the store is given (borrowed: they outlive it). */
struct zn_swapio_config {
	struct zn_runtime *rt;
	struct zn_tracer *tr;
	struct zn_layer *L;               /* the layers' buffers (tiers.h), n of them */
	int n;
	struct zn_arena *arena;           /* pinned: the staging views, registered whole */
	struct zn_swapio_plan plan;       /* placement, staging and fetch sizes, hot layers */
	const struct zn_config *cfg;      /* aio, offload paths and pipelining, run id */
	enum zn_dtype pdt;                /* stored parameter dtype */
};


/* One staging buffer of the optimizer step with state on nvme (swapio_opt.c): views of
 * the home's buffer, sections of one chunk (plan.swap_chunk_numel elements of a shard);
 * NULL where that class is not on nvme. */
struct zn_sbuf {
	float *master_h;             /* optimizer on nvme (the parameters if aliased) */
	void *m_h, *v_h;             /* as stored (plan.states), plan.swap_moment_bytes each */
	void *param_h;               /* parameters on nvme, not aliased: AdamW's new shard */
	int layer, chunk;            /* whose state it holds: layer, chunk of its shard */
	bool wr_traced;              /* --trace: the writes' step was traced ... */
	int64_t wr_step;             /* ... and which step that was */
};

struct zn_swapio {
	struct zn_swapio_config c;
	int64_t step;            /* this step (zn_swapio_step_begin): the trace of writes */
	struct zn_aio *aio;
	struct zn_swap *swap_opt, *swap_param;
	bool arena_registered;
	/* the optimizer staging (swapio_opt.c): a home on the stores, item i AdamW's position
	 * i, its buffers the plan.swap_buffers staging buffers (sbuf: their sections) */
	struct zn_home opt;
	struct zn_sbuf *sbuf;
	uint64_t sec_at[4], sec_bytes[4]; /* master, m, v, param: a buffer's sections */
	unsigned opt_moves;      /* the parts a transfer moves (ZN_SWAPIO_*) */
	/* parameters on nvme (swapio_fetch.c): the shards' home on swap_param's extents, its
	 * buffers ring slot i, then layer 0's, then layers 1 .. H's current shards */
	struct zn_home fetch;
	int *fetch_src;          /* plan.fetch_buffers: the buffer fetch i copies up */
	uint64_t *shard_bytes;   /* n: layer l's shard bytes (the home's items) */
	uint64_t *fetch_bytes;   /* the home's buffers' bytes */
	/* AdamW's positions: every layer's chunks, layer n-1's first (plan.h, nvme) */
	int *pos_first;          /* n + 1: the position of layer l's chunk 0 */
	int *pos_layer;          /* positions: the layer of each */
	int positions;
	int opt_next_read;       /* optimizer position whose read is next */
	bool in_step;            /* between zn_swapio_step_begin and the step's end */
};

/* after the arena; only the config without nvme. destroy accepts a half-built or
 * never-created (zeroed) store */
int zn_swapio_create(struct zn_swapio *sw, const struct zn_swapio_config *c);
void zn_swapio_destroy(struct zn_swapio *sw);     /* waits what is in flight */
bool zn_swapio_optim(const struct zn_swapio *sw); /* optimizer state on nvme */
/* the store's I/O engine (its statistics, timing, bandwidth cap); NULL: nothing on nvme */
struct zn_aio *zn_swapio_aio(const struct zn_swapio *sw);
/* the I/O engine's counters so far into out (zeros without one) */
void zn_swapio_io_stats(const struct zn_swapio *sw, struct zn_aio_stats *out);
bool zn_swapio_params(const struct zn_swapio *sw);/* parameter shards on nvme */
/* initial state of layer l (params_h: its padded fp32 parameters) onto the extents */
int zn_swapio_init_layer(struct zn_swapio *sw, int l, const float *params_h);
/* this rank's fp32 master shard of layer l (shard_numel floats) into dst_h */
int zn_swapio_read_master(struct zn_swapio *sw, int l, float *dst_h);
/* Layer l's optimizer state one chunk at a time through staging buffer 0, after every
 * request in flight (zn_swapio_quiesce): reading, the parts' chunk is read, then each()
 * looks at it; writing, each() fills it, then it is written. parts: ZN_SWAPIO_* bits
 * (the master is the parameter extent when aliased). off, len: the chunk's elements of
 * the shard. A layer of one chunk moves whole extents (the swap store checks their
 * CRC32C). Returns 0, each()'s error or the I/O's (logged). */
#define ZN_SWAPIO_MASTER 1u
#define ZN_SWAPIO_M 2u
#define ZN_SWAPIO_V 4u
int zn_swapio_state_io(struct zn_swapio *sw, int l, unsigned parts, bool write,
		       int (*each)(void *ctx, uint64_t off, uint64_t len,
				   const struct zn_sbuf *sb),
		       void *ctx);
/* Where byte off of layer l's optimizer extent k lives (k: 0 the master, the parameter
 * extent when aliased; 1 m; 2 v): *file, its path (the store's), and *file_off; 0 or
 * zn_swap_locate's error. Checkpoints copy extents file to file from there. */
int zn_swapio_state_locate(const struct zn_swapio *sw, int l, int k, uint64_t off,
			   const char **file, uint64_t *file_off);
/* layer l's staging chunks (1 without staging) and chunk c's elements [off, off + len) */
int zn_swapio_chunks(const struct zn_swapio *sw, int l);
void zn_swapio_chunk(const struct zn_swapio *sw, int l, int c, uint64_t *off, uint64_t *len);
/* fetch of layer l's parameter shard into fetch buffer i: begin submits the read (after
 * the buffer's previous copy up is done), end waits for it and returns the buffer; a hot
 * layer's fetch reads nothing and returns its pinned shard */
int zn_swapio_fetch_begin(struct zn_swapio *sw, int i, int l);
int zn_swapio_fetch_end(struct zn_swapio *sw, int i, void **shard_h);
int zn_swapio_fetch_copied(struct zn_swapio *sw, int i); /* copy up enqueued on copy_in */
bool zn_swapio_fetch_ready(struct zn_swapio *sw, int i);  /* fetch_end would not block */
/* optimizer step: begin (reads ahead), acquire layer l's buffer with its state read,
 * release (writes it back behind); step_end waits for the step's reads, and for its
 * writes too without offload_optimizer.pipeline_write (with it they go on into the next
 * step: write-behind); quiesce waits for every request (before anything else reads the
 * extents: checkpoints, read-back, eval's end, destroy) */
int zn_swapio_opt_begin(struct zn_swapio *sw);
/* the step begins: no optimizer position read yet, then zn_swapio_opt_begin (the first
 * positions read ahead in the background; the tracer's step has begun) */
int zn_swapio_step_begin(struct zn_swapio *sw, int64_t step);
/* during a step: zn_swapio_opt_begin again, for the first positions whose buffers the
 * previous step's write-behind has freed since; the parameter ring calls it at every
 * acquisition (zn_fetch_acquire), so the compute loop never does */
int zn_swapio_opt_poke(struct zn_swapio *sw);
/* chunk c of layer l (zn_swapio_chunks: 1 without staging, then out is NULL) */
int zn_swapio_opt_acquire(struct zn_swapio *sw, int l, int c, struct zn_sbuf **out);
int zn_swapio_opt_release(struct zn_swapio *sw, int l, int c);
/* layer l's first chunk is in its staging buffer (its read issued and finished), so
 * acquiring it would not block; true without optimizer state on nvme */
bool zn_swapio_opt_ready(struct zn_swapio *sw, int l);
int zn_swapio_step_end(struct zn_swapio *sw);
int zn_swapio_quiesce(struct zn_swapio *sw);

#endif
