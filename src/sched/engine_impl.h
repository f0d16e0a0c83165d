/* Internal to src/sched: the engine's state, shared by engine.c (create, destroy, init,
 * read-back), fetch.c (working parameter copies and their prefetch ring), step.c (forward,
 * backward, gradient reduction) and optim.c (clipping and AdamW on the device or the host).
 *
 * Streams (DESIGN.md, the step): compute runs the model; copy_in carries host -> device
 * (tokens, offloaded parameter shards, updated shards); copy_out device -> host (gradient
 * shards, losses); comm carries every collective, in the same order on every rank (the
 * comm layer's rule), plus the casts and accumulations that belong to a collective's
 * result. Events order them; only the calling thread enqueues (a stream is used from one
 * thread at a time), and it blocks only on an event it needs on the host (a gradient shard
 * before CPU AdamW) or at the end of the step.
 */
#ifndef ZN_SCHED_ENGINE_IMPL_H
#define ZN_SCHED_ENGINE_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "cpu/arena.h"
#include "gpu/device.h"
#include "model/gpt2.h"
#include "nvme/aio.h"
#include "nvme/swap.h"
#include "sched/plan.h"
#include "zinc.h"

/* A full-layer fp32 working copy of some layer's parameters on the device. */
struct zn_slot {
	float *f32_d;
	uint16_t *bf16_d;        /* stage 3 bf16: the gather lands here, then is cast */
	struct zn_event *ready;  /* the fetch into this slot is complete */
	struct zn_event *free;   /* compute is done with the slot's previous layer */
};

/* A full-layer fp32 gradient buffer (stage >= 2) before its reduce-scatter. */
struct zn_gslot {
	float *d;
	struct zn_event *free;   /* its last reduce-scatter result has been consumed */
};

struct zn_layer {
	struct zn_shard sh;
	struct zn_layer_buffers sz;
	uint64_t opt_off;        /* AdamW span: layer elements [opt_off, opt_off + opt_count) */
	uint64_t opt_count;
	void *param_d;           /* stage 0-2: full padded; stage 3 on device: shard */
	float *grad_d;           /* stage 0-1: full padded */
	float *grad_shard_d;     /* stage 2-3 without offload: this rank's shard */
	float *master_d, *m_d, *v_d;
	void *param_h;           /* stage 3 offload_param: shard */
	void *param_stage_h;     /* AdamW's new parameter shard on its way to the device */
	float *grad_h, *grad_recv_h;
	float *master_h, *m_h, *v_h;
	struct zn_event *grad_ev; /* this micro-batch's gradient shard is on its tier */
	struct zn_event *aux_ev;  /* scratch event for a hand-over inside this layer */
	bool recv_pending;        /* grad_recv_h holds a shard not yet added to grad_h */
	double sumsq;             /* this rank's part of the squared gradient norm */
};

/* One pinned staging buffer of the optimizer step with state on nvme (swapio.c): sections
 * of the largest shard; NULL where that class is not on nvme. */
struct zn_sbuf {
	float *master_h, *m_h, *v_h; /* optimizer on nvme (master_h: the parameters if aliased) */
	void *param_h;               /* parameters on nvme, not aliased: AdamW's new shard */
	int rd_n, wr_n;              /* requests submitted and not yet waited for */
	int layer;                   /* whose state it holds */
	struct zn_swap_req rd[3], wr[4];
};

/* A parameter fetch staging buffer (parameters on nvme): the shard read from nvme, then
 * copied up on copy_in; `copied` is recorded after that copy. */
struct zn_fbuf {
	void *h;
	bool reading, copy_pending;
	int layer;               /* whose shard it holds */
	struct zn_swap_req req;
	struct zn_event *copied;
};

struct zn_engine {
	struct zn_config cfg;
	struct zn_gpt2_config mc;
	struct zn_layer_desc *ld;
	int n;                   /* layers: L + 2 */
	int B, T, gas, rank, world;
	uint64_t *numel;
	struct zn_engine_plan_input pin;
	struct zn_engine_plan plan;
	enum zn_dtype pdt;       /* stored parameter dtype */

	struct zn_device *dev;
	const struct zn_kernel_table *k;
	struct zn_comm *comm;
	struct zn_arena *arena;
	struct zn_stream *compute, *copy_in, *copy_out, *comm_s;

	struct zn_layer *L;
	struct zn_slot slot0;    /* layer 0's working copy, alive for the whole step */
	struct zn_slot *ring;
	int ring_n;
	struct zn_gslot gslot0;  /* layer 0's full gradient: final layer's bwd .. layer 0's */
	struct zn_gslot gring[ZN_PLAN_GRAD_SLOTS];

	float **acts_d;          /* per layer */
	float **x_d;             /* x_d[l]: output of layer l, l = 0 .. L */
	float *dx_d[2];
	float *scratch_d;
	uint64_t scratch_bytes;
	int *tok_d, *tgt_d;
	float *loss_d;
	float *loss_h;           /* gas x B x T */
	struct zn_event *tok_ready, *tok_free, *loss_done, *fwd_done;
	struct zn_event **tev;   /* 3 per micro-batch: start, forward end, backward end */

	/* prefetch cursor over one micro-batch's fetch sequence (fetch.c) */
	int seq_len;             /* 2 x (n - 1): forward 1 .. n-1, backward n-1 .. 1 */
	int seq_issued;          /* items fetched so far */

	float *tmp_h;            /* host scratch of the largest padded layer (fp32) */
	uint16_t *tmp16_h;
	int64_t step;
	float lr;
	float clip_coef;
	float grad_norm;
	atomic_uint_fast64_t opt_ns;  /* AdamW time on the device's workers */
	double wait_ms;               /* host blocked on events this step */
	double host_opt_ms;           /* CPU AdamW this step */
	/* clipping with the optimizer on the device (devops.c): per layer squared sums and
	 * non-finite flags, then the reduction's scratch; norm_h takes the copy back */
	void *norm_d;
	void *norm_h;
	uint64_t norm_bytes;

	/* nvme tiers (swapio.c) */
	struct zn_aio *aio;
	struct zn_swap *swap_opt, *swap_param;
	bool arena_registered;
	struct zn_sbuf *sbuf;    /* plan.swap_buffers */
	struct zn_fbuf *fbuf;    /* plan.fetch_buffers: ring slot i, then layer 0's */
	int opt_next_read;       /* optimizer position (0 = layer n-1) whose read is next */
};

/* engine.c */
double zn_engine_now_ms(void);
int zn_engine_wait(struct zn_engine *e, struct zn_event *ev); /* counted in wait_ms */

/* fetch.c: working fp32 copies of parameters (gathers mode) */
/* enqueues layer 0's fetch (compute must wait); *params_d: where it lands */
int zn_fetch_layer0(struct zn_engine *e, const float **params_d);
int zn_fetch_begin(struct zn_engine *e);                 /* new micro-batch sequence */
int zn_fetch_acquire(struct zn_engine *e, int item, int layer, const float **params_d);
int zn_fetch_release(struct zn_engine *e, int item);
int zn_fetch_layer0_wait(struct zn_engine *e);
int zn_fetch_layer0_release(struct zn_engine *e);
const float *zn_engine_params_f32(struct zn_engine *e, int layer); /* resident fp32 (!gathers) */

/* swapio.c: state homed on nvme through the swap store */
int zn_swapio_create(struct zn_engine *e);       /* after the arena; no-op without nvme */
void zn_swapio_destroy(struct zn_engine *e);     /* waits what is in flight */
bool zn_swapio_optim(const struct zn_engine *e); /* optimizer state on nvme */
bool zn_swapio_params(const struct zn_engine *e);/* parameter shards on nvme */
/* initial state of layer l (tmp_h holds its padded parameters) onto the extents */
int zn_swapio_init_layer(struct zn_engine *e, int l);
/* this rank's fp32 master shard of layer l (shard_numel) into a staging view */
int zn_swapio_read_master(struct zn_engine *e, int l, const float **master_h);
/* fetch of layer l's parameter shard into fetch buffer i: begin submits the read (after
 * the buffer's previous copy up is done), end waits for it and returns the buffer */
int zn_swapio_fetch_begin(struct zn_engine *e, int i, int l);
int zn_swapio_fetch_end(struct zn_engine *e, int i, void **shard_h);
int zn_swapio_fetch_copied(struct zn_engine *e, int i); /* copy up enqueued on copy_in */
/* optimizer step: begin (reads ahead), acquire layer l's buffer with its state read,
 * release (writes it back behind), quiesce (waits every request; end of step) */
int zn_swapio_opt_begin(struct zn_engine *e);
int zn_swapio_opt_acquire(struct zn_engine *e, int l, struct zn_sbuf **out);
int zn_swapio_opt_release(struct zn_engine *e, int l);
int zn_swapio_quiesce(struct zn_engine *e);
struct zn_aio *zn_engine_aio(struct zn_engine *e); /* tests: fault injection */

/* step.c */
int zn_step_micro(struct zn_engine *e, int micro, const int *inputs_h, const int *targets_h);

/* optim.c */
int zn_optim_step(struct zn_engine *e);
int zn_optim_update_inline(struct zn_engine *e, int layer);
int zn_optim_host_accumulate(struct zn_engine *e, int layer);

/* devops.c: the optimizer's device work through the kernel table (host and cuda) */
uint64_t zn_devops_norm_bytes(const struct zn_config *cfg, int layer_count); /* 0: none */
int zn_devops_adamw(struct zn_engine *e, struct zn_stream *s, int layer, float *master,
		    float *m, float *v, const float *grad, void *out, float grad_scale);
/* layer's squared sum of grad[0 .. n) into norm_d (n may be 0) */
int zn_devops_sumsq(struct zn_engine *e, struct zn_stream *s, int layer, const float *grad,
		    uint64_t n);
/* after s has every layer's sumsq: copies them back, waits, sets each L[l].sumsq
 * (INFINITY for a non-finite gradient) */
int zn_devops_sumsq_read(struct zn_engine *e, struct zn_stream *s);

/* AdamW over layer elements [first, first + count) split at tensor boundaries so weight
 * decay follows each tensor's decay flag; the buffers start at element `first`. */
int zn_adamw_layer_span(const struct zn_engine *e, int layer, uint64_t first, uint64_t count,
			float grad_scale, float *master, float *m, float *v, const float *grad,
			void *out, enum zn_dtype out_dtype);
/* Tensor t's part of layer elements [first, first + count): false when empty, else its
 * start *i relative to first and its length *len. */
bool zn_optim_tensor_span(const struct zn_layer_desc *L, int t, uint64_t first,
			  uint64_t count, uint64_t *i, uint64_t *len);

#endif
