/* The tiers: the one place that answers where each layer's master, gradient, parameters
 * and output live, for every stage and offload setting. Everything here follows from the
 * plan (plan.h: placement pl, master_aliases_params, param_bytes), never from which
 * pointers happen to be NULL.
 *
 *   parameters: stage 0-2 the full padded layer on the device; stage 3 this rank's shard on
 *               pl.params (device, pinned host, or nvme through swapio).
 *   gradient:   stage 0-1 the full padded layer on the device (accumulated over
 *               micro-batches); stage 2-3 this rank's shard on the device. With the
 *               optimizer off the device, this rank's shard also comes down to pinned host
 *               memory (pl.grads host), plus a receive shard when micro-batches accumulate.
 *   optimizer:  fp32 master, m, v on pl.optim (stage 0 the whole layer, else a shard); the
 *               master is the parameters when master_aliases_params; m and v as
 *               zinc.optimizer_states stores them (plan.states: fp32, bf16 or int8 codes
 *               followed by their blocks' absmax), on every tier alike.
 *   output:     where AdamW writes the new parameters: nothing when aliased; the nvme
 *               staging buffer, the host shard, a pinned staging shard on its way up
 *               (optimizer on the host, parameters on the device), or the device copy.
 */
#ifndef ZN_SCHED_TIERS_H
#define ZN_SCHED_TIERS_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu/adamw.h"
#include "gpu/device.h"
#include "sched/plan.h"

struct zn_arena;
struct zn_sbuf;

/* Where each class lives, as a part is given it (engine field ti, set before the layers are
 * allocated, once the plan fits): the layers' buffers, the plan, the ZeRO stage; and what
 * allocating the layers and putting their initial state on them uses (borrowed: they
 * outlive it). */
struct zn_tiers {
	struct zn_layer *L;
	const struct zn_engine_plan *plan;
	int stage;
	const struct zn_engine_plan_input *pin; /* each layer's buffer sizes (plan.h) */
	const uint64_t *numel;                  /* per layer: the parameters */
	int rank, world;                        /* this rank's shard */
	enum zn_dtype pdt;                      /* stored parameter dtype */
	struct zn_device *dev;
	struct zn_arena *arena;                 /* the pinned host tier (NULL: none planned) */
	struct zn_stream *copy_in;              /* the initial state's copies up */
};

/* One layer's buffers on their tiers (sizes from zn_plan_layer_buffers). */
struct zn_layer {
	struct zn_shard sh;
	struct zn_layer_buffers sz;
	uint64_t opt_off;        /* AdamW span: layer elements [opt_off, opt_off + opt_count) */
	uint64_t opt_count;
	void *param_d;           /* stage 0-2: full padded; stage 3 on device: shard */
	float *grad_d;           /* stage 0-1: full padded */
	float *grad_shard_d;     /* stage 2-3 without offload: this rank's shard */
	float *master_d;
	void *m_d, *v_d;         /* as stored (plan.states) */
	void *param_h;           /* stage 3 offload_param cpu: shard */
	void *param_stage_h;     /* AdamW's new parameter shard on its way to the device */
	float *grad_h, *grad_recv_h;
	float *master_h;
	void *m_h, *v_h;
	struct zn_event *grad_ev; /* this micro-batch's gradient shard is on its tier */
	struct zn_event *aux_ev;  /* scratch event for a hand-over inside this layer */
	bool recv_pending;        /* grad_recv_h holds a shard not yet added to grad_h */
	double sumsq;             /* this rank's part of the squared gradient norm */
};

/* bytes of one stored parameter (4 fp32, 2 bf16): the plan's rule */
unsigned zn_tiers_param_bytes(const struct zn_tiers *t);
bool zn_tiers_optim_on_host(const struct zn_tiers *t); /* AdamW on the CPU (host or nvme) */
int zn_tiers_dalloc(struct zn_device *dev, void *pp, uint64_t bytes); /* 0 bytes: nothing */
int zn_tiers_halloc(struct zn_arena *arena, void *pp, uint64_t bytes); /* pinned arena view */

/* layer l's shard, optimizer span and buffers on their tiers; 0 or a negative code.
 * free_layer accepts a half-allocated (zeroed) layer */
int zn_tiers_alloc_layer(struct zn_tiers *t, int l);
void zn_tiers_free_layer(struct zn_tiers *t, int l);
/* the initial state of layer l onto its tiers: params_h holds its padded fp32 parameters,
 * scratch16_h room for as many 16-bit values (the bf16 or fp16 stored copy) */
int zn_tiers_init_layer(struct zn_tiers *t, int l, const float *params_h,
			uint16_t *scratch16_h);

/* This rank's reduced gradient over its optimizer span. */
float *zn_tiers_grad_span(const struct zn_tiers *t, int l);
/* The fp32 master over the optimizer span (sb: the layer's nvme staging buffer or NULL). */
float *zn_tiers_master_span(const struct zn_tiers *t, int l, const struct zn_sbuf *sb);
/* Where AdamW writes the new parameters (NULL: the master is the parameters). */
void *zn_tiers_out_span(const struct zn_tiers *t, int l, const struct zn_sbuf *sb);
/* Where the device copy of this rank's new shard goes (its part of param_d). */
void *zn_tiers_param_dst(const struct zn_tiers *t, int l);
/* Elements of layer l's optimizer buffers (master, m, v): stage 0 the padded layer, else
 * the shard; a multiple of the int8 block. */
uint64_t zn_tiers_optim_numel(const struct zn_tiers *t, int l);
/* m and v over the optimizer span, on the optimizer's tier (device pointers there; sb: the
 * nvme staging buffer or NULL), as stored. */
void zn_tiers_moments(const struct zn_tiers *t, int l, const struct zn_sbuf *sb,
		      struct zn_adamw_moments *mo);
/* read-back: this rank's fp32 master (stage 0: the full padded layer, else the shard) and
 * whether it is on the device (optimizer not on nvme) */
const float *zn_tiers_master_full(const struct zn_tiers *t, int l, bool *on_device);

#endif
