/* Activation checkpointing (docs/activations.md): the checkpoints, the run buffers and the
 * order of a micro-batch's layer uses. State: struct zn_recompute (field ck of struct zn_acts).
 *
 * Layers 1 .. n-1 form runs of K (zinc.checkpoint_every) layers: run r is layers
 * 1 + rK .. min(n-1, (r+1)K); R runs. Checkpoint r is the input of run r (checkpoint 0 is
 * layer 0's output). Forward keeps the checkpoints and writes every layer's activations
 * and intermediate outputs into the run buffers (K activation buffers, K-1 outputs), which
 * the next run overwrites. Backward: the last run's buffers are still those of the
 * forward, so it runs at once; every other run first recomputes its forward from its
 * checkpoint (the last layer's output goes to a sink: it is the next checkpoint, already
 * used), then runs its backward. Each use of a layer's parameters is one item of the
 * prefetch sequence (zn_use): recomputed forwards are uses too.
 *
 * Homes of checkpoints 0 .. R-2 (checkpoint R-1 is used by the run that follows it at
 * once and never leaves the device):
 *   device  R device buffers.
 *   host    two device slots (checkpoint c in slot c mod 2) and R-1 pinned host buffers:
 *           copied down on the copy-out stream as soon as the layer that makes it is done
 *           (the layer that overwrites the slot waits for that copy), and copied back up on
 *           the copy-in stream one run ahead of the run that recomputes from it.
 *   nvme    the two slots, ZN_RECOMPUTE_STAGES pinned staging buffers and one swap extent per
 *           checkpoint (its own swap store and I/O engine): copied down, written behind
 *           (submitted two checkpoints later), read ahead two runs before it is needed,
 *           copied up one run ahead. A failed read or write stops the step naming the file.
 */
#ifndef ZN_SCHED_RECOMPUTE_H
#define ZN_SCHED_RECOMPUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/device.h"
#include "model/model.h"
#include "nvme/aio.h"
#include "nvme/swap.h"
#include "sched/plan.h"

struct zn_engine;
struct zn_layer_io;

#define ZN_RECOMPUTE_STAGES 4

/* One use of a layer's parameters in a micro-batch: its forward, its backward, or a
 * recomputed forward (fwd) followed by the backward (fwd && bwd). */
struct zn_use {
	int layer;
	bool fwd, bwd;
};

enum zn_recompute_buf_state {
	ZN_RECOMPUTE_BUF_FREE = 0,
	ZN_RECOMPUTE_BUF_DOWN,    /* copy down enqueued (out event) */
	ZN_RECOMPUTE_BUF_WRITING, /* nvme write submitted */
	ZN_RECOMPUTE_BUF_READING, /* nvme read submitted */
	ZN_RECOMPUTE_BUF_UP,      /* copy up enqueued (in event) */
};

/* A pinned buffer of one checkpoint (host: one per checkpoint; nvme: staging). */
struct zn_recompute_buf {
	float *h;
	int ck;                  /* the checkpoint it holds, -1 none */
	enum zn_recompute_buf_state state;
	struct zn_event *down, *up;
	struct zn_swap_req req;
};

/* A store of pinned staging buffers written to and read from one swap extent per id
 * (ZN_SWAP_ACTIVATION keys 0 .. count-1, its own swap store and I/O engine), shared by the
 * activation checkpoints on nvme and layer-major's boundaries on nvme (lmajor.h). The
 * caller enqueues the copies down and up and records b->down and b->up; the store writes,
 * reads and settles. A failed read or write logs the item (name) and the swap file. With
 * nvme false (host home) settling only waits the copies. */
struct zn_recompute_store {
	struct zn_engine *e;
	bool nvme;
	uint64_t x_bytes;        /* one item (its extent: rounded as the arena rounds) */
	struct zn_aio *aio;
	struct zn_swap *swap;
	/* writes what item id is for an error ("activation checkpoint 3 (input of layer 4)") */
	void (*name)(const struct zn_engine *e, int id, char *out, size_t size);
};

struct zn_recompute {
	bool on;
	int every;               /* K */
	int runs;                /* R */
	enum zn_tier home;
	uint64_t x_bytes, acts_bytes; /* one checkpoint; one run activation buffer */
	float **x_d;             /* device: R checkpoints; host, nvme: 2 slots */
	int x_n;
	float **run_acts_d;      /* K */
	float **run_x_d;         /* K - 1 */
	float *sink_d;           /* a recomputed run's last output (R > 1) */
	struct zn_event *made[2];  /* slot c mod 2: the layer making checkpoint c is done */
	struct zn_event *slot_free[2]; /* slot's last reader is done */
	struct zn_recompute_buf *buf;    /* host: R - 1; nvme: ZN_RECOMPUTE_STAGES */
	int buf_n;
	struct zn_recompute_store st; /* its aio and swap: nvme only */
};

/* Sums over the layers that size the activation buffers (unrounded bytes unless said). */
struct zn_act_sums {
	uint64_t acts_max;       /* the largest activations of layers 1 .. n-1 */
	uint64_t all_acts;       /* every layer's activations, each rounded as the device does */
	uint64_t scratch_max;    /* the largest scratch */
};

/* What the activation buffers depend on: the model, B, T and the checkpointing choice. */
struct zn_act_shape {
	struct zn_model model;
	/* n descriptors, or NULL: each layer is described when needed, one at a time (the
	 * engine before the plan fits, zinc estimate), so no memory grows with n */
	const struct zn_layer_desc *ld;
	const struct zn_act_sums *sums; /* precomputed, or NULL: zn_act_bytes_of sums */
	int n, B, T;
	uint64_t work_bytes;     /* a described layer's work_bytes (model.h; ld's have theirs) */
	bool compute16;          /* bf16 compute: the model's *_bf16 sizes */
	bool on;                 /* checkpointing */
	int every;               /* K (clamped to 1 .. n-1) */
	enum zn_tier home;       /* of the checkpoints */
	bool pos;                /* --packing documents: a positions buffer beside the tokens */
	int gas;                 /* micro-batches per step (0: 1): an auxiliary loss buffer each */
};

/* The activation buffers' bytes per tier, as allocated (device sizes rounded as the device
 * counts them, pinned as the arena carves them). */
struct zn_act_bytes {
	uint64_t x;              /* one layer output = one checkpoint (unrounded) */
	uint64_t acts_max;       /* the largest activations of layers 1 .. n-1 (unrounded) */
	uint64_t all_acts;       /* every layer's activations, rounded (without checkpointing) */
	uint64_t device_acts;    /* activations and outputs, or checkpoints and run buffers */
	uint64_t device_fixed;   /* two dx, scratch, tokens, targets, losses */
	uint64_t device;         /* device_acts + device_fixed */
	uint64_t host;           /* pinned: the checkpoints (host) or their staging (nvme) */
	uint64_t nvme;           /* swap extents of the checkpoints (nvme) */
	int every, runs;         /* checkpointing: K and R */
};

void zn_act_shape_of(const struct zn_engine *e, struct zn_act_shape *s);
void zn_act_bytes_of(const struct zn_act_shape *s, struct zn_act_bytes *out); /* pure */
/* Layer l's activation bytes, unrounded (saturated at ZN_SIZE_OVERFLOW, core/size.h) */
uint64_t zn_act_layer_bytes(const struct zn_act_shape *s, int l);
void zn_act_sums_of(const struct zn_act_shape *s, struct zn_act_sums *out); /* pure */

/* The use sequence: forward 1 .. n-1, then the backward's uses; returns the count (use
 * may be NULL to count). */
int zn_recompute_schedule(const struct zn_engine *e, struct zn_use *use);

int zn_recompute_create(struct zn_engine *e);
void zn_recompute_destroy(struct zn_engine *e);

/* The io's acts, x_in and x_out for layer l's forward (recompute: in the backward) and
 * backward; layer 0: x_out only. */
void zn_recompute_fwd_io(struct zn_engine *e, int l, bool recompute, struct zn_layer_io *io);
void zn_recompute_bwd_io(struct zn_engine *e, int l, struct zn_layer_io *io);
/* around the forward of layer l (not a recompute): slot reuse, checkpoints down */
int zn_recompute_fwd_before(struct zn_engine *e, int l);
int zn_recompute_fwd_after(struct zn_engine *e, int l);
int zn_recompute_fwd_end(struct zn_engine *e);
/* around backward use k of the sequence: checkpoints up ahead, slot release */
int zn_recompute_use_before(struct zn_engine *e, int k);
int zn_recompute_use_after(struct zn_engine *e, int k);
/* every nvme request waited for (end of step, errors) */
int zn_recompute_quiesce(struct zn_engine *e);
/* internal (recompute.c, recompute_home.c): run r of layer l, its first and last layer,
 * the device buffer of checkpoint c */
int zn_recompute_run_of(const struct zn_engine *e, int l);
int zn_recompute_run_first(const struct zn_engine *e, int r);
int zn_recompute_run_last(const struct zn_engine *e, int r);
float *zn_recompute_x(struct zn_engine *e, int c);
/* The store (recompute_home.c): open creates its aio and swap for count items of x_bytes
 * on the paths of off (run id suffixed by what); close accepts a half-opened store. */
int zn_recompute_store_open(struct zn_recompute_store *st, struct zn_engine *e, int count,
			    const struct zn_offload_config *off, const char *what);
void zn_recompute_store_close(struct zn_recompute_store *st);
/* buffer b's copy down is written to item b->ck's extent (waits the copy first) */
int zn_recompute_store_write(struct zn_recompute_store *st, struct zn_recompute_buf *b);
/* brings b to FREE, waiting whatever it is doing (a copy down is written first on nvme) */
int zn_recompute_store_settle(struct zn_recompute_store *st, struct zn_recompute_buf *b);
/* starts reading item id into b (settled first) unless b is reading it already */
int zn_recompute_store_read(struct zn_recompute_store *st, struct zn_recompute_buf *b, int id);
/* waits b's read (b FREE after it, its data in b->h) */
int zn_recompute_store_wait_read(struct zn_recompute_store *st, struct zn_recompute_buf *b);
/* tests: the checkpoints' nvme I/O engine (fault injection), NULL unless on nvme */
struct zn_aio *zn_engine_ckpt_aio(struct zn_engine *e);

#endif
