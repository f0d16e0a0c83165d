/* Activations: per layer activation buffers (as many as the model has layers), the layer
 * outputs x[0 .. n-2], two gradient-of-output buffers, the scratch, tokens, targets,
 * losses, and the per micro-batch events; with activation checkpointing the buffers are
 * recompute.h's, with layer-major accumulation lmajor.h's. State: struct zn_acts (engine
 * field act), given at create a struct zn_acts_config: the runtime (device, streams, rank),
 * the pinned arena, the activations' shape (model, B, T, micro-batches, checkpointing), the
 * nvme paths and aio block of the checkpoints' and boundaries' homes (store/home.h) and
 * the few bytes the engine's plan works out. The layer-major decision (struct zn_lmajor
 * on, k, tied, home) is the engine's planning's, set before create.
 *
 *     struct zn_acts_config c = { .rt = &rt, .arena = arena, .shape = shape, ... };
 *     rc = zn_acts_create(&act, &c);
 *     zn_acts_fwd_io(&act, l, false, &io);     // layer l's buffers in the forward
 *     zn_acts_destroy(&act);
 */
#ifndef ZN_SCHED_ACTS_H
#define ZN_SCHED_ACTS_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu/device.h"
#include "zinc.h"
#include "sched/lmajor.h"
#include "sched/recompute.h"

struct zn_arena;
struct zn_layer_io;
struct zn_runtime;

/* What the activations are given (borrowed: they outlive the part). */
struct zn_acts_config {
	struct zn_runtime *rt;
	struct zn_arena *arena;          /* pinned checkpoints, boundaries, staging */
	struct zn_act_shape shape;       /* its ld, sums: the engine's */
	uint64_t norm_bytes;             /* the optimizer's norm results (counted here) */
	const struct zn_offload_config *ckpt_paths; /* checkpoints on nvme */
	const struct zn_offload_config *bnd_paths;  /* boundaries on nvme, NULL: none set */
	const struct zn_aio_config *aio;
	const char *run_id;
	/* layer-major's tied head run again (lmajor.h): layer 0's and the last layer's padded
	 * gradient bytes and the head's parameter bytes; 0 otherwise */
	uint64_t tied_grad0_bytes, tied_grad_last_bytes, head_bytes;
	uint64_t host_act_bytes, nvme_act_bytes; /* the plan's (the info line) */
};

struct zn_acts {
	struct zn_acts_config c;
	float **acts_d;          /* per layer */
	float **x_d;             /* x_d[l]: output of layer l, l = 0 .. n-2 */
	float *dx_d[2];
	float *scratch_d;
	uint64_t scratch_bytes;
	int *tok_d, *tgt_d;
	float *loss_d;
	float *loss_h;           /* gas x B x T; zn_device_host_alloc, as tok_h and tgt_h */
	/* the model's auxiliary loss (model.h zn_layer_io.aux): aux_n floats on the device for
	 * each micro-batch (zn_acts_aux: layer-major keeps k of them live), and
	 * each micro-batch's loss (aux[0]) on the host; aux_n 0: none */
	float *aux_d, *aux_h;
	int aux_n;
	int *tok_h, *tgt_h;      /* gas x B x T: the step's tokens and targets, staged */
	/* --packing documents (docs/packing.md): positions [B,T] on the device and staged
	 * [gas,B,T]; NULL otherwise. pred: the step's predicted targets (>= 0) over every
	 * rank and micro-batch, the loss's denominator; 0 = every target (B T gas world) */
	int *pos_d, *pos_h;
	double pred;
	struct zn_event *tok_ready, *tok_free, *loss_done, *fwd_done;
	struct zn_event **tev;   /* 3 per micro-batch: start, forward end, backward end */
	struct zn_use *use;      /* a micro-batch's layer uses: forward 1 .. n-1, backward */
	int use_n;
	struct zn_recompute rec;      /* activation checkpointing (recompute.h); acts_d, x_d unused */
	struct zn_lmajor lm;          /* layer-major accumulation (lmajor.h); acts_d, x_d unused */
};

/* The bytes before the plan, for the configuration c and the layer-major decision lm
 * (pure): device bytes the activations take (as the device counts them), pinned host bytes
 * (checkpoints on the host or nvme staging), nvme extents, and the nvme bytes the step
 * writes, and reads, of them (layer-major's boundaries on nvme; 0 otherwise: activation
 * checkpoints' I/O is not in the step's figures) */
uint64_t zn_acts_bytes(const struct zn_acts_config *c, const struct zn_lmajor *lm);
uint64_t zn_acts_host_bytes(const struct zn_acts_config *c, const struct zn_lmajor *lm);
uint64_t zn_acts_nvme_bytes(const struct zn_acts_config *c, const struct zn_lmajor *lm);
uint64_t zn_acts_nvme_step_bytes(const struct zn_acts_config *c, const struct zn_lmajor *lm);
/* a->lm's decision kept; destroy accepts a half-built part and keeps it too */
int zn_acts_create(struct zn_acts *a, const struct zn_acts_config *c);
void zn_acts_destroy(struct zn_acts *a);
/* Copies the step's gas x B x T tokens and targets into tok_h / tgt_h (the caller's memory
 * is pageable: a copy from it would block) and points *inputs_h / *targets_h at them. The
 * previous step's copies are done: the end of a step drains copy_in. */
void zn_acts_stage_tokens(struct zn_acts *a, const int **inputs_h, const int **targets_h);
/* io->acts, x_in and x_out of layer l's forward (recompute: inside the backward) and
 * io->acts, x_in of its backward */
void zn_acts_fwd_io(struct zn_acts *a, int l, bool recompute, struct zn_layer_io *io);
void zn_acts_bwd_io(struct zn_acts *a, int l, struct zn_layer_io *io);

/* acts_step.c, the step's calls (step.c, step_lm.c, eval.c):
 * tokens_up: micro-batch micro's tokens, targets (and positions, packed documents) up on
 * copy_in once the previous micro-batch is done with the buffers, the compute waiting for
 * them; tokens_up_all: layer-major's, every micro-batch's at once (lmajor.h's buffers);
 * tokens_done: the compute is done with them (after layer 0's backward);
 * losses_into: io->losses for the last layer's forward, once the previous micro-batch's
 * losses are on the host; losses_down: after that forward, micro-batch micro's losses
 * (and with aux its auxiliary loss) down on copy_out while the backward runs;
 * aux: micro-batch micro's auxiliary loss buffer on the device, or NULL (none);
 * aux_zero: every micro-batch's zeroed on the compute stream (the step's start) */
int zn_acts_tokens_up(struct zn_acts *a, int micro, const int *inputs_h, const int *targets_h);
int zn_acts_tokens_up_all(struct zn_acts *a, const int *inputs_h, const int *targets_h);
int zn_acts_tokens_done(struct zn_acts *a);
int zn_acts_losses_into(struct zn_acts *a, struct zn_layer_io *io);
int zn_acts_losses_down(struct zn_acts *a, int micro, bool aux);
float *zn_acts_aux(const struct zn_acts *a, int micro);
int zn_acts_aux_zero(struct zn_acts *a);

#endif
