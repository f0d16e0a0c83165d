/* Activations: per layer activation buffers (as many as the model has layers), the layer
 * outputs x[0 .. n-2], two gradient-of-output buffers, the scratch, tokens, targets,
 * losses, and the per micro-batch events. State: struct zn_acts (engine field act). */
#ifndef ZN_SCHED_ACTS_H
#define ZN_SCHED_ACTS_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu/device.h"
#include "sched/lmajor.h"
#include "sched/recompute.h"

struct zn_engine;
struct zn_layer_io;

struct zn_acts {
	float **acts_d;          /* per layer */
	float **x_d;             /* x_d[l]: output of layer l, l = 0 .. n-2 */
	float *dx_d[2];
	float *scratch_d;
	uint64_t scratch_bytes;
	int *tok_d, *tgt_d;
	float *loss_d;
	float *loss_h;           /* gas x B x T; zn_device_host_alloc, as tok_h and tgt_h */
	/* the model's auxiliary loss (model.h zn_layer_io.aux): aux_n floats on the device for
	 * each micro-batch (step_impl.h zn_step_aux: layer-major keeps k of them live), and
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

/* device bytes the activations take (as the device counts them), before the plan */
uint64_t zn_acts_bytes(const struct zn_engine *e);
/* pinned host bytes of the activations (checkpoints on the host or nvme staging) */
uint64_t zn_acts_host_bytes(const struct zn_engine *e);
uint64_t zn_acts_nvme_bytes(const struct zn_engine *e); /* checkpoint extents on nvme */
/* nvme bytes the step writes, and reads, of them (layer-major's boundaries on nvme; 0
 * otherwise: activation checkpoints' I/O is not in the step's figures) */
uint64_t zn_acts_nvme_step_bytes(const struct zn_engine *e);
int zn_acts_create(struct zn_engine *e);
void zn_acts_destroy(struct zn_engine *e);
/* Copies the step's gas x B x T tokens and targets into tok_h / tgt_h (the caller's memory
 * is pageable: a copy from it would block) and points *inputs_h / *targets_h at them. The
 * previous step's copies are done: the end of a step drains copy_in. */
void zn_acts_stage_tokens(struct zn_engine *e, const int **inputs_h, const int **targets_h);
/* io->acts, x_in and x_out of layer l's forward (recompute: inside the backward) and
 * io->acts, x_in of its backward */
void zn_acts_fwd_io(struct zn_engine *e, int l, bool recompute, struct zn_layer_io *io);
void zn_acts_bwd_io(struct zn_engine *e, int l, struct zn_layer_io *io);

#endif
