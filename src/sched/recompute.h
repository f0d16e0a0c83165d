/* Activation checkpointing (docs/activations.md): the checkpoints, the run buffers and the
 * order of a micro-batch's layer uses. State: struct zn_recompute (field rec of struct zn_acts),
 * given at create its config (acts.h struct zn_acts_config) and the use sequence.
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
 *   host    two device slots and R-1 pinned host buffers: copied down on the copy-out
 *           stream as soon as the layer that makes it is done (the layer that overwrites
 *           the slot waits for that copy), and copied back up on the copy-in stream one run
 *           ahead of the run that recomputes from it.
 *   nvme    the two slots, ZN_RECOMPUTE_STAGES pinned staging buffers and one swap extent per
 *           checkpoint (the store's tiered home, store/home.h): copied down, written behind
 *           (submitted two checkpoints later), read ahead two runs before it is needed,
 *           copied up one run ahead. A failed read or write stops the step naming the file.
 * The copies up are the store's prefetch ring's (store/ring.h, field up): its sequence is the
 * backward's runs, item j run R-1-j, whose checkpoint R-1-j lives in slot j mod 2 (forward
 * and backward); a fill is the copy up from the home's buffer, a staging the nvme read.
 * The copies down are the forward's, outside the ring.
 */
#ifndef ZN_SCHED_RECOMPUTE_H
#define ZN_SCHED_RECOMPUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/device.h"
#include "model/model.h"
#include "nvme/aio.h"
#include "sched/plan.h"
#include "store/home.h"
#include "store/ring.h"

struct zn_acts_config;
struct zn_layer_io;
struct zn_runtime;

#define ZN_RECOMPUTE_STAGES 4

/* One use of a layer's parameters in a micro-batch: its forward, its backward, or a
 * recomputed forward (fwd) followed by the backward (fwd && bwd). */
struct zn_use {
	int layer;
	bool fwd, bwd;
};

struct zn_recompute {
	struct zn_runtime *rt;   /* the device, the compute and copy streams */
	int n;                   /* layers */
	const struct zn_use *use; /* acts.h: a micro-batch's layer uses */
	bool on;
	int every;               /* K */
	int runs;                /* R */
	enum zn_tier home;
	uint64_t x_bytes, acts_bytes; /* one checkpoint; one run activation buffer */
	float **x_d;             /* device: R checkpoints; host, nvme: the ring's 2 slots */
	int x_n;
	float **run_acts_d;      /* K */
	float **run_x_d;         /* K - 1 */
	float *sink_d;           /* a recomputed run's last output (R > 1) */
	struct zn_event *made;   /* the layer making a checkpoint is done: its copy down waits */
	struct zn_ring up;       /* host, nvme: the copies up (item j: run R-1-j's checkpoint) */
	/* checkpoints 0 .. R-2 on the host or nvme (store/home.h): host, R - 1 buffers;
	 * nvme, ZN_RECOMPUTE_STAGES staging buffers (checkpoint c in buffer c mod buf_n) */
	struct zn_home st;
	int buf_n;
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

void zn_act_bytes_of(const struct zn_act_shape *s, struct zn_act_bytes *out); /* pure */
/* Layer l's activation bytes, unrounded (saturated at ZN_SIZE_OVERFLOW, core/size.h) */
uint64_t zn_act_layer_bytes(const struct zn_act_shape *s, int l);
void zn_act_sums_of(const struct zn_act_shape *s, struct zn_act_sums *out); /* pure */

/* The use sequence of s's checkpointing: forward 1 .. n-1, then the backward's uses;
 * returns the count (use may be NULL to count). Pure. */
int zn_recompute_schedule(const struct zn_act_shape *s, struct zn_use *use);
/* K, R and the pinned buffers of s's checkpoints (pure) */
int zn_act_shape_every(const struct zn_act_shape *s);
int zn_act_shape_runs(const struct zn_act_shape *s);

/* The buffers of c->shape's checkpointing (on), the use sequence borrowed (acts.h);
 * destroy accepts a half-built or never-created (zeroed) one. */
int zn_recompute_create(struct zn_recompute *ck, const struct zn_acts_config *c,
			const struct zn_use *use);
void zn_recompute_destroy(struct zn_recompute *ck);

/* The io's acts, x_in and x_out for layer l's forward (recompute: in the backward) and
 * backward; layer 0: x_out only. */
void zn_recompute_fwd_io(struct zn_recompute *ck, int l, bool recompute, struct zn_layer_io *io);
void zn_recompute_bwd_io(struct zn_recompute *ck, int l, struct zn_layer_io *io);
/* around the forward of layer l (not a recompute): slot reuse, checkpoints down */
int zn_recompute_fwd_before(struct zn_recompute *ck, int l);
int zn_recompute_fwd_after(struct zn_recompute *ck, int l);
int zn_recompute_fwd_end(struct zn_recompute *ck);
/* around backward use k of the sequence: checkpoints up ahead, slot release */
int zn_recompute_use_before(struct zn_recompute *ck, int k);
int zn_recompute_use_after(struct zn_recompute *ck, int k);
/* every nvme request waited for (end of step, errors) */
int zn_recompute_quiesce(struct zn_recompute *ck);
/* internal (recompute.c, recompute_home.c): run r of layer l, its first and last layer,
 * the device buffer of checkpoint c; the copy-up ring made (host, nvme) */
int zn_recompute_run_of(const struct zn_recompute *ck, int l);
int zn_recompute_run_first(const struct zn_recompute *ck, int r);
int zn_recompute_run_last(const struct zn_recompute *ck, int r);
float *zn_recompute_x(struct zn_recompute *ck, int c);
int zn_recompute_up_create(struct zn_recompute *ck);

#endif
