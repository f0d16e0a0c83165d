/* Internal to src/sched: the engine is its parts (docs/architecture.md). Each part's state
 * is a struct in that part's header; struct zn_engine only composes them with what every
 * part reads (config, model, plan, layers). Only the engine, the step and the training
 * checkpoint (it saves and restores every part) include this header
 * (scripts/sched_deps.py's allow-list); every part is given what it uses at creation
 * (engine_parts.c create_reduce, create_prefetch, create_frozen, create_swapio,
 * create_optim, ...; engine_plan.c zn_engine_acts_config).
 *
 *   runtime.h   device, kernel table, comm, streams, the timed wait      (rt)
 *   tiers.h     each layer's buffers and where each state class lives    (L, arena)
 *   swapio.h    state homed on nvme                                      (sw)
 *   prefetch.h  working fp32 copies of parameters, the prefetch ring     (pf)
 *   reduce.h    gradient reduction                                       (rd)
 *   grads.h     the pinned gradient ring                                 (gr)
 *   optim.h     clipping and AdamW, host and device                      (opt)
 *   acts.h      activations, tokens, losses, per micro-batch events      (act)
 *   trace_dev.h spans of a traced step (zinc train --trace)              (tr)
 *   frozen.h    frozen parameters: homes, working slots, their fetches   (fz)
 *   step.c      zn_engine_step: the numbered step
 *   engine.c    create, destroy, read-back, save
 *   engine_counts.c  the counts checked before anything scales with them; the layers
 *               read in two passes (sizes for the plan, then the descriptors)
 */
#ifndef ZN_SCHED_ENGINE_IMPL_H
#define ZN_SCHED_ENGINE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu/arena.h"
#include "model/model.h"
#include "sched/acts.h"
#include "sched/frozen.h"
#include "sched/grads.h"
#include "sched/optim.h"
#include "sched/plan.h"
#include "sched/prefetch.h"
#include "sched/reduce.h"
#include "sched/runtime.h"
#include "sched/swapio.h"
#include "sched/tiers.h"
#include "sched/trace_dev.h"
#include "zinc.h"

struct zn_engine {
	struct zn_config cfg;
	struct zn_model model;   /* ops and the borrowed configuration */
	struct zn_layer_desc *ld; /* read once the plan fits (zn_engine_layer_descs) */
	int n;                   /* layers */
	int B, T, gas;
	uint64_t *numel;
	struct zn_act_sums act_sums; /* the activations' sums over the layers (recompute.h) */
	uint64_t work_bytes;          /* each layer's zn_layer_desc.work_bytes (lm_head chunks) */
	struct zn_engine_plan_input pin;
	struct zn_engine_plan plan;
	enum zn_dtype pdt;       /* stored parameter dtype */
	/* bf16 compute: the layers read the stored bf16 parameters (io.params16), no fp32
	 * working copy (zinc.compute_dtype; the model has act_numel_bf16) */
	bool compute16;
	int64_t step;

	struct zn_runtime rt;
	struct zn_arena *arena;  /* pinned host tier (tiers, swapio) */
	uint64_t pinned_budget;  /* --pinned-mem, or the default share of RAM */
	struct zn_layer *L;      /* per layer, tiers.h */
	struct zn_tiers ti;      /* where each class lives: L, the plan, the stage (tiers.h) */
	struct zn_swapio sw;
	struct zn_prefetch pf;
	struct zn_reduce rd;
	struct zn_grads gr;      /* the pinned gradient ring, grads.h */
	struct zn_optim opt;
	struct zn_acts act;
	struct zn_tracer tr;
	struct zn_frozen fz;     /* frozen parameters, frozen.h */
	uint64_t *frozen_numel;  /* per layer (descriptors' frozen_numel) */

	/* this step's labels (targets not ZN_IGNORE_INDEX) over every micro-batch and rank,
	 * and whether every target is one (labels.c zn_engine_count_labels) */
	float labels;
	bool all_labels;

	/* the schedule the plan chose and why (zinc.schedule; the run's header) */
	char sched_line[400];

	float *tmp_h;            /* host scratch of the largest padded layer (fp32) */
	uint16_t *tmp16_h;
};

/* engine_counts.c: pass one over the layers: e->numel, e->frozen_numel and e->act_sums,
 * each layer described into one scratch descriptor and checked (ties, tensor counts);
 * pass two: e->ld, every layer's descriptor, after the plan fits. 0 or a negative code
 * (logged). */
int zn_engine_layer_sizes(struct zn_engine *e);
int zn_engine_layer_descs(struct zn_engine *e);
/* host bytes per layer zn_engine_check_counts counts (descriptor, state, sizes) */
uint64_t zn_engine_layer_host_bytes(void);
/* engine_counts.c: model's ops present, its config valid, e->model and e->n (>= 2) set;
 * 0 or -EINVAL (logged) */
int zn_engine_check_model(struct zn_engine *e, const struct zn_model *model);
/* engine_counts.c: a warning for --pinned-mem (and --device-mem of the host device) above
 * the machine's memory (MemTotal); the plan may still fit */
void zn_engine_warn_budgets(const struct zn_engine *e, uint64_t dev_budget,
			    uint64_t pinned_budget);

/* engine_parts.c: rc of allocating `what` (an allocation failure logged naming it and the
 * layer, -1: none); the parts after the layers' buffers, each given what it uses */
int zn_engine_part(int rc, const char *what, int layer);
int zn_engine_create_parts(struct zn_engine *e);
/* engine_plan.c: zn_engine_memory from e's plan, with the arena of pinned_reserved bytes
 * (0: none) */
void zn_engine_memory_of(const struct zn_engine *e, uint64_t pinned_reserved,
			 struct zn_engine_memory *out);
/* engine_plan.c: e->pin and e->plan for the prepared engine (the schedule as e->act.lm says)
 * on a device of dev_budget bytes; -ENOMEM with msg saying why when a budget is short */
int zn_engine_plan_once(struct zn_engine *e, uint64_t dev_budget, char *msg, size_t msg_size);

/* engine_plan.c: the activations' shape (recompute.h) and everything the activations part
 * is given (acts.h), from the engine's configuration, layers and plan */
void zn_act_shape_of(const struct zn_engine *e, struct zn_act_shape *s);
void zn_engine_acts_config(struct zn_engine *e, struct zn_acts_config *c);
/* engine_plan.c: the nvme paths of layer-major's boundaries on nvme: the checkpoints',
 * else the optimizer's or the parameters' offload; NULL where none is configured */
const struct zn_offload_config *zn_lmajor_nvme_paths(const struct zn_engine *e);
/* engine_schedule.c: e->act.lm's decision, e->sched_line and the plan for it (zinc.schedule):
 * an explicit layer-major that cannot run is refused (ZN_EUSAGE logged, or -ENOMEM with
 * the plan's numbers in msg) */
int zn_lmajor_plan(struct zn_engine *e, uint64_t dev_budget, char *msg, size_t msg_size);
/* step_lm.c: the step's micro-batches, layer by layer (zn_engine_step's part 3) */
int zn_step_layer_major(struct zn_engine *e, const int *inputs_h, const int *targets_h);
/* engine.c, tests: the activation checkpoints' (or layer-major boundaries') nvme I/O
 * engine (fault injection), NULL unless on nvme */
struct zn_aio *zn_engine_ckpt_aio(struct zn_engine *e);

/* engine.c: resident fp32 parameters of a layer (no gathers) */
const float *zn_engine_params_f32(struct zn_engine *e, int layer);
struct zn_aio *zn_engine_aio(struct zn_engine *e); /* tests: fault injection */
/* step.c: one micro-batch's forward (tokens on the device, layer 0 and its frozen
 * parameters fetched); eval.c */
int zn_step_forward(struct zn_engine *e, const float *p0, const float *f0, int micro);
/* step.c: layer 0 of micro-batch `micro` on the device (*p0, *f0) and the prefetch begun;
 * eval.c */
int zn_step_layer0(struct zn_engine *e, int micro, const float **p0, const float **f0);
/* labels.c: e->labels and e->all_labels for this step's targets (grad_accum x B x T on the
 * host); collective */
int zn_engine_count_labels(struct zn_engine *e, const int *targets_h);
/* Packed documents: pos_h [gas, B, T] staged for zn_acts_tokens_up and e->act.pred set to
 * the predicted targets of every rank (NULL: pred 0, no positions). step.c; step.c and
 * eval.c */
int zn_step_positions(struct zn_engine *e, const int *targets_h, const int *pos_h);
/* labels.c: *loss = (the sum of every rank's token losses) / e->labels (0 without labels),
 * given this rank's sum; collective */
int zn_engine_label_mean(struct zn_engine *e, double sum, float *loss);

#endif
