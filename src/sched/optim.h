/* The optimizer: global-norm clipping and AdamW over each rank's span, on the device
 * (optim_device.c, through the kernel table) or on the CPU (optim.c). One tensor-span rule
 * (zn_optim_spans) splits a layer's span at tensor boundaries so weight decay follows each
 * tensor's flag. State: struct zn_optim (engine field opt), given at create the runtime, the
 * tracer, the layers' buffers and descriptors, the configuration and the plan's placement
 * it reads (struct zn_optim_config). When AdamW runs is the step's rule (step.c), not this
 * part's; what the step and the training checkpoint read of it is optim_state.c's.
 *
 * It reads the tiers' answers (tiers.h: where the master, gradient and output spans are),
 * the store's staging (swapio.h) and the gradient ring (grads.h) through what it is given. */
#ifndef ZN_SCHED_OPTIM_H
#define ZN_SCHED_OPTIM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpu/adamw.h"
#include "gpu/device.h"
#include "kernels.h"
#include "sched/lossscale.h"
#include "sched/plan.h"
#include "zinc.h"

struct zn_grads;
struct zn_layer;
struct zn_layer_desc;
struct zn_runtime;
struct zn_swapio;
struct zn_tiers;
struct zn_tracer;

/* What the optimizer is given (borrowed: they outlive it). */
struct zn_optim_config {
	struct zn_runtime *rt;
	struct zn_tracer *tr;
	struct zn_layer *L;             /* the layers' buffers (tiers.h), n of them */
	const struct zn_layer_desc *ld; /* the layers' descriptors (decay flags, names) */
	int n;
	const struct zn_config *cfg;    /* optimizer, scheduler, clipping, precision, zero */
	enum zn_dtype pdt;              /* stored parameter dtype */
	const struct zn_tiers *ti;      /* where master, gradient, output spans live */
	struct zn_swapio *sw;           /* the store: nvme state staged chunk by chunk */
	const struct zn_grads *gr;      /* the pinned gradient ring */
	bool grads_on_host;             /* gradient shards in pinned memory (plan.pl.grads) */
	enum zn_tier params;            /* where the parameters live (plan.pl.params) */
};

struct zn_optim {
	struct zn_optim_config c;
	int64_t step;       /* the engine's step (zn_optim_begin) */
	float lr;
	float beta1, beta2; /* this step's (OneCycle cycles beta1) */
	float clip_coef;
	float grad_norm;
	/* fp16: DeepSpeed's loss scaler; the scale this step's loss gradient is multiplied
	 * by (1 outside fp16); overflow: the step's gradient norm was not finite, nothing
	 * was updated. inject_step / inject_rank: ZINC_TEST_OVERFLOW=STEP[@RANK] makes that
	 * step's local norm infinite on that rank (every rank without @RANK), for tests. */
	struct zn_lossscale ls;
	float scale;
	bool overflow;
	int64_t skipped;             /* fp16 steps skipped: AdamW and lr use step - skipped */
	int64_t inject_step;
	int inject_rank;
	atomic_uint_fast64_t opt_ns;  /* AdamW time on the device's workers */
	double host_opt_ms;           /* CPU AdamW this step */
	int early_next;               /* layers above it had their CPU AdamW during the
				       * backward (zn_optim_update_early); n - 1 at the start */
	/* the optimizer on the device (every step checks its gradients are finite): per layer squared sums and non-finite
	 * flags, then the reduction's scratch; norm_h takes the copy back */
	void *norm_d;
	void *norm_h;
	uint64_t norm_bytes;
};

/* one tensor's part of a layer span: start relative to the span, length, decay flag */
struct zn_optim_span {
	uint64_t i, len;
	bool decay;
};
/* The parts of layer elements [first, first + count) of one weight-decay flag, in order
 * (adjacent tensors with the same flag merged); returns how many, at most
 * ZN_OPTIM_MAX_SPANS (the kernels' adamw_states limit), or -E2BIG when the layer
 * alternates its flag more often (the engine refuses such a layer when it is created). */
#define ZN_OPTIM_MAX_SPANS ZN_KERNEL_ADAMW_SPANS
int zn_optim_spans(const struct zn_layer_desc *L, uint64_t first, uint64_t count,
		   struct zn_optim_span *out);

/* the loss scaler (fp16) and the norm's device buffers (device optimizer); 0 or a negative
 * code. destroy accepts a half-built or never-created (zeroed) optimizer */
int zn_optim_create(struct zn_optim *o, const struct zn_optim_config *c);
void zn_optim_destroy(struct zn_optim *o);
/* What a training checkpoint saves of the optimizer: the fp16 steps skipped and the loss
 * scaler (zeroed outside fp16). resume puts them back: skipped as saved; under fp16 a
 * dynamic scaler goes on from ls's position (hysteresis at most this run's, the scale at
 * least its minimum), its settings this run's config's; without ls (NULL: the checkpoint
 * has no dynamic scale) or with a static scale, the scale is this run's (logged on rank 0) */
void zn_optim_counters(const struct zn_optim *o, int64_t *skipped, struct zn_lossscale *ls);
void zn_optim_resume_counters(struct zn_optim *o, int64_t skipped,
			      const struct zn_lossscale *ls);
/* the step begins: learning rate for step - skipped, clip coefficient 1, this step's loss
 * scale */
void zn_optim_begin(struct zn_optim *o, int64_t step);
/* AdamW of layer l on the device tier, right behind its reduction (comm stream) */
int zn_optim_update_device(struct zn_optim *o, int l);
/* Layer l's update on the CPU (optimizer cpu or nvme): waits for its gradient shard, reads
 * its nvme state (read ahead), AdamW, writes behind, the new shard up. */
int zn_optim_update_host(struct zn_optim *o, int l);
/* after the backward: the norm (clipping or fp16) and clipping, the fp16 overflow check
 * (an overflow skips every update and lowers the scale), then AdamW of every layer not
 * yet updated (inline_done: the device updates already ran during the backward) */
int zn_optim_step(struct zn_optim *o, bool inline_done);
/* Held gradients (several micro-batches) with the optimizer's state on nvme and nothing
 * waiting for the norm: during the last micro-batch's backward, once layer l's reduction is
 * enqueued, the CPU AdamW of the layers from the top down to l whose gradient shard has
 * landed and whose state is read, top-down and without blocking, so their write-behind
 * starts as early as the gradients allow; zn_optim_step does the rest. Order and results
 * are those of zn_optim_step. */
int zn_optim_update_early(struct zn_optim *o, int l);
/* After the step's streams drained: without clipping the global norm from the squared
 * sums taken beside the updates into opt.grad_norm; then *layer = the lowest layer whose
 * gradient is not finite on any rank (-1: none). Every rank calls it (all-reduces). The
 * caller decides: stop (zn_optim_report_nonfinite) or, under loss scaling, skip. */
int zn_optim_first_nonfinite(struct zn_optim *o, int *layer);
/* Logs the stop for a non-finite loss or gradient norm, naming the step and `layer`
 * (from zn_optim_first_nonfinite); returns -ERANGE. */
int zn_optim_report_nonfinite(const struct zn_optim *o, float loss, int layer);
/* Step 7 of the step: after zn_optim_step and the drain, every rank: 0 when the fp16 loss
 * scaler skipped the step (overflow), else zn_optim_first_nonfinite, and the stop
 * (zn_optim_report_nonfinite, -ERANGE) for a non-finite loss, gradient or norm */
int zn_optim_check_finite(struct zn_optim *o, float loss);
/* this step's loss scale: what the loss gradient is multiplied by (1 outside fp16) */
float zn_optim_loss_scale(const struct zn_optim *o);
/* this step's figures into st: lr, grad_norm, overflow, loss_scale, next_loss_scale, opt_ms */
void zn_optim_stats(const struct zn_optim *o, struct zn_step_stats *st);
/* offloaded gradient shards: the receive shard added into the layer's shard */
int zn_optim_host_accumulate(struct zn_optim *o, int layer);

/* CPU AdamW over layer elements [first, first + count); the buffers start at `first` (mo:
 * the moments as stored; int8: first starts a block), each tensor with its weight decay. */
int zn_adamw_layer_span(struct zn_optim *o, int layer, uint64_t first, uint64_t count,
			float grad_scale, float *master, const struct zn_adamw_moments *mo,
			const float *grad, void *out, enum zn_dtype out_dtype);

/* optim_device.c: the optimizer's device work through the kernel table */
uint64_t zn_devops_norm_bytes(const struct zn_config *cfg, int layer_count); /* 0: none */
int zn_devops_adamw(struct zn_optim *o, struct zn_stream *s, int layer, float *master,
		    const struct zn_adamw_moments *mo, const float *grad, void *out,
		    float grad_scale);
/* layer's squared sum of grad[0 .. n) into norm_d (n may be 0) */
int zn_devops_sumsq(struct zn_optim *o, struct zn_stream *s, int layer, const float *grad,
		    uint64_t n);
/* after s has every layer's sumsq: copies them back, waits, sets each L[l].sumsq
 * (INFINITY for a non-finite gradient) */
int zn_devops_sumsq_read(struct zn_optim *o, struct zn_stream *s);

#endif
