/* The plan: pure functions of the config and the model's shape, no I/O (docs/engine.md).
 *
 * - Shard bounds: each layer's parameters are one flat buffer, padded so every rank's
 *   shard is a multiple of ZN_SHARD_ALIGN_NUMEL elements (4 KiB of bf16, 8 KiB of fp32:
 *   O_DIRECT and io_uring fixed buffers need 4 KiB alignment); rank r owns shard r.
 * - Placement: the home tier of each class of bytes from the stage and offload settings.
 * - Estimate: bytes per rank on device, host and nvme (the ZeRO paper's model-state
 *   formulas plus the working set offload needs). `zinc estimate` prints these numbers and
 *   the engine refuses, before allocating, a run whose numbers exceed a budget.
 *
 *     struct zn_shard s;
 *     zn_plan_shard(layer_numel, world, rank, &s);   // s.begin .. s.end are real elements
 */
#ifndef ZN_SCHED_PLAN_H
#define ZN_SCHED_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/size.h"
#include "zinc.h"

#define ZN_SHARD_ALIGN_NUMEL 2048

enum zn_tier {
	ZN_TIER_DEVICE = 0,
	ZN_TIER_HOST = 1,
	ZN_TIER_NVME = 2,
};

const char *zn_tier_name(enum zn_tier t); /* "device", "host", "nvme" */

struct zn_shard {
	uint64_t numel;        /* real elements of the layer */
	uint64_t padded_numel; /* shard_numel x world */
	uint64_t shard_numel;  /* elements every rank holds (padding included) */
	uint64_t offset;       /* rank x shard_numel: first element of this rank's shard */
	uint64_t real_numel;   /* elements of this shard inside [0, numel) (0 for a tail rank) */
};

void zn_plan_shard(uint64_t numel, int world, int rank, struct zn_shard *out);

/* Where each class of bytes lives between uses, and whether it is partitioned. */
struct zn_placement {
	enum zn_tier params;   /* low-precision (or fp32) working parameters */
	enum zn_tier grads;    /* this rank's gradient (shard, when partitioned) */
	enum zn_tier optim;    /* fp32 master, m, v */
	bool params_sharded;   /* stage 3 */
	bool grads_sharded;    /* stage >= 2 */
	bool optim_sharded;    /* stage >= 1 */
};

void zn_plan_placement(int stage, enum zn_offload_device offload_optimizer,
		       enum zn_offload_device offload_param, struct zn_placement *out);

/* Bytes per parameter of each class: mixed precision (bf16/fp16 params and grads, fp32
 * master + m + v = 2 + 2 + 12) or fp32 training (params are the master: 4 + 4 + 8), with
 * m and v as zinc.optimizer_states stores them (bf16: 2 + 2; int8: 1 + 1 and an fp32
 * absmax per 256 elements each, so the master + m + v of mixed precision are 8 or 6.03). */
struct zn_state_bytes {
	unsigned param;
	unsigned grad;
	double optim;
};

void zn_plan_state_bytes(bool mixed_precision, enum zn_optim_states states,
			 struct zn_state_bytes *out);
/* The precision ("fp32", "bf16" or "fp16") and the bytes per parameter of the model states:
 * "bf16 mixed precision (2+2+12 B/param)", "bf16 mixed precision, int8 optimizer states
 * (2+2+6.03 B/param)", "fp32 (4+4+8 B/param)", ... */
const char *zn_plan_fmt_state_bytes(const char *dtype, enum zn_optim_states states, char *buf,
				    size_t size);
/* Optimizer bytes of n elements: the fp32 master (mixed precision) and m and v as stored. */
uint64_t zn_plan_optim_bytes(bool mixed_precision, enum zn_optim_states states, uint64_t n);
/* One moment (m or v) of n elements as stored (cpu/adamw.h zn_adamw_state_bytes). */
uint64_t zn_plan_moment_bytes(enum zn_optim_states states, uint64_t n);

struct zn_estimate_input {
	uint64_t params;         /* P, total parameters */
	uint64_t largest_layer;  /* parameters of the largest layer (the working-set unit) */
	int ranks;               /* N = gpus per node x nodes */
	int ranks_per_node;
	int stage;
	enum zn_offload_device offload_optimizer;
	enum zn_offload_device offload_param;
	int prefetch_depth;      /* layers fetched ahead of the one computing (>= 0) */
	int buffer_count;        /* pinned staging buffers per swapped class (nvme) */
	bool mixed_precision;
	enum zn_optim_states states; /* m and v as stored (zinc.optimizer_states) */
	uint64_t activation_bytes; /* per rank, added to the device total (0 = not counted) */
	/* LoRA (docs/lora.md): a frozen base of frozen_params (largest layer
	 * frozen_largest_layer); params are then the trainable adapters. The base has
	 * parameters only, 2 (mixed precision) or 4 bytes each, whole on every rank on the
	 * parameters' tier, plus fp32 working copies on the device of (2 + prefetch_depth)
	 * layers unless it is fp32 on the device, and with nvme pinned read buffers: layer 0's
	 * and frozen_read_buffers (0 = automatic: 1 + prefetch_depth + ZN_PLAN_FROZEN_READ_AHEAD,
	 * as the engine plans without a pinned budget short). */
	uint64_t frozen_params;
	uint64_t frozen_largest_layer;
	int frozen_read_buffers;
	bool grad_ring;          /* optimizer on nvme: gradient shards through the pinned ring
				  * (ZN_PLAN_GRAD_RING + 1 of the largest layer's shard), not all */
};

struct zn_estimate {
	uint64_t device_model_bytes;   /* model states resident on the device */
	uint64_t device_working_bytes; /* layers in flight: gathered params, full grads */
	uint64_t device_bytes;         /* model + working + activations */
	uint64_t host_bytes;           /* per rank: model states homed in host memory + staging */
	uint64_t host_node_bytes;      /* host_bytes x ranks_per_node */
	uint64_t pinned_staging_bytes; /* per rank: nvme staging buffers (part of host_bytes) */
	uint64_t nvme_bytes;           /* per rank: model states homed on nvme */
	uint64_t frozen_bytes;         /* the frozen base on its home tier (part of the above) */
};

/* Returns 0, or ZN_EUSAGE for an input that makes no sense (ranks < 1, stage out of
 * range, offload_param without stage 3). Pure. */
int zn_plan_estimate(const struct zn_estimate_input *in, struct zn_estimate *out);


/* ---- the engine's plan -------------------------------------------------------------------
 *
 * Every buffer the engine allocates, per layer and per tier, computed before anything is
 * allocated: the engine allocates exactly the buffers zn_plan_layer_buffers lists (device
 * sizes rounded up to ZN_PLAN_DEVICE_ALIGN as the device layer counts them, pinned host
 * views to ZN_PLAN_HOST_ALIGN as the arena carves them), so the plan's device_bytes bounds
 * the measured device peak and a run that cannot fit is refused before it starts.
 *
 * Classes (docs/engine.md, bytes per parameter), with p = bytes of a stored parameter (4 fp32,
 * 2 bf16) and N ranks:
 *   params:  stage 0-2 the full padded layer on the device (p x padded); stage 3 one shard
 *            (p x shard) on the device or, with offload_param cpu, in pinned host memory.
 *   grads:   fp32 (kernels accumulate in fp32). Stage 0-1: the full padded layer on the
 *            device. Stage 2-3: one shard per layer, on the device, or with
 *            offload_optimizer cpu in pinned memory, plus a receive shard when micro-batches
 *            are accumulated (the next micro-batch's shard lands there and is added).
 *   optim:   fp32 master, m, v: stage 0 full, stage >= 1 one shard, on the optimizer's tier;
 *            m and v as zinc.optimizer_states stores them (zn_plan_moment_bytes).
 *            The master is not a separate buffer when the parameters are fp32 and live on
 *            the same tier (master_aliases_params): then the parameters are the master.
 *   staging: with offload_optimizer cpu and parameters homed on the device, AdamW writes
 *            the new parameter shard (p x shard) into pinned memory and it is copied up.
 *   working: full-layer fp32 buffers the compute reads when the parameters are not full
 *            fp32 on the device (stage 3, or bf16): layer 0's own (kept from its
 *            forward to the final layer's backward) plus a ring of prefetch_depth + 1 for
 *            the others, each of the largest layer; stage 3 bf16 adds a bf16 gather buffer
 *            per slot. bf16 compute (compute16): no fp32 buffers at all; stage 0-2 read
 *            the resident bf16 layer (no slots), stage 3 only the bf16 gather buffers.
 *            Stage 2-3: full-gradient buffers before the reduce-scatter: layer
 *            0's (alive from the final layer's backward to layer 0's) plus a ring of two.
 *   acts:    activation_bytes (device), activation_host_bytes (pinned) and
 *            activation_nvme_bytes as given: the engine sums its own allocations
 *            (recompute.h zn_act_bytes_of: every layer's activations, or with activation
 *            checkpointing the checkpoints on their tier plus the run buffers).
 *   nvme:    offload_optimizer nvme homes master (unless aliased), m and v in swap extents
 *            (one shard each per layer; gradients still come to pinned memory);
 *            offload_param nvme homes the parameter shard there (stage 3). Pinned staging:
 *            swap_buffers buffers, each of one chunk's master + m + v (optimizer on nvme)
 *            and parameter shard (parameters on nvme, not aliased), which AdamW uses in
 *            turn (read ahead, written behind). A chunk is swap_chunk_numel elements of a
 *            shard (a layer's shard is ceil(shard / chunk) chunks, AdamW's positions):
 *            the largest shard, but at most ZN_PLAN_SWAP_CHUNK_NUMEL and at most the
 *            shards' sum / swap_buffers (rounded down to ZN_SHARD_ALIGN_NUMEL, at least
 *            that), so the staging never holds more than the state it stages, whatever
 *            the largest layer (a tied embedding) is. With parameters on nvme also one
 *            fetch buffer per working slot, the shard read before its copy up: the ring's
 *            of the largest shard of layers 1 .. n-1, layer 0's of its own.
 *            Hot layers (parameters on nvme, stage 3): layer 0 and layers 1 .. H, H =
 *            prefetch depth + 1 (at most the ring, at most n - 1): the layers the forward
 *            fetches first, at the step's start and at each micro-batch's. Their current
 *            shard stays in pinned memory (layer 0's in its own fetch buffer, layers 1 .. H
 *            in a buffer each, their shard's size), refreshed by AdamW as it writes the
 *            extent; their fetches copy it up without reading nvme (swapio.c).
 *            Extents are 4 KiB multiples; per path the swap store stripes them in 1 MiB
 *            units (ZN_PLAN_SWAP_STRIPE), so a path holds ceil(stripes / paths) stripes.
 *            NVMe bytes per step (per rank, shard bytes as transferred): reads = the
 *            master (4 B) and m and v as stored (4 KiB-rounded; fp32 4 + 4, bf16 2 + 2,
 *            int8 about 1 + 1) per optimizer element + with parameters on nvme the shard per
 *            fetch of a layer that is not hot (layers above H, 2 x grad_accum each);
 *            writes = the same optimizer bytes + the parameter shard unless it is the
 *            master (fp32, both on nvme).
 */
#define ZN_PLAN_DEVICE_ALIGN 256
#define ZN_PLAN_HOST_ALIGN 4096
#define ZN_PLAN_GRAD_SLOTS 2
#define ZN_PLAN_SWAP_STRIPE (1ull << 20)
/* The largest optimizer staging chunk: 32 MiB of each fp32 part (see nvme above). */
#define ZN_PLAN_SWAP_CHUNK_NUMEL (8ull << 20)
/* Pinned gradient ring (docs/memory.md): buffers for layers 1 .. n-1 when the gradients need
 * not outlive the backward. */
#define ZN_PLAN_GRAD_RING 2
/* The arena reserves the plan's pinned bytes plus this margin (within the budget): room for
 * the page rounding of the mapping, never for an unplanned view. */
#define ZN_PLAN_PINNED_MARGIN (2ull << 20)

/* Where the gradient shards AdamW reads live between the backward and the update. */
enum zn_grad_home {
	ZN_GRAD_DEVICE = 0,  /* on the device (optimizer on the device) */
	ZN_GRAD_PINNED_RING, /* optimizer on nvme, nothing waits for the norm, one micro-batch:
			      * each shard lands in one of grad_ring pinned buffers and AdamW
			      * runs on it during the backward, before the buffer is reused */
	ZN_GRAD_PINNED_HELD, /* every layer's shard pinned for the whole step (accumulation,
			      * clipping or fp16 need them after the backward; optimizer cpu) */
};

struct zn_engine_plan_input {
	int layer_count;
	const uint64_t *layer_numel; /* real elements of each layer */
	int world;
	int stage;
	enum zn_offload_device offload_optimizer;
	enum zn_offload_device offload_param;
	bool bf16;  /* 16-bit stored parameters: bf16 or fp16 (2 bytes, fp32 master) */
	bool compute16; /* bf16 compute: the layers read the 16-bit parameters themselves */
	enum zn_optim_states states; /* m and v as stored (zinc.optimizer_states) */
	int grad_accum;              /* micro-batches per step, >= 1 */
	bool norm_first;             /* clipping or fp16: every update waits for the norm */
	int prefetch_depth;          /* >= 0: layers fetched ahead of the one computing */
	uint64_t activation_bytes;   /* device bytes of activations, scratch, tokens, losses */
	uint64_t activation_host_bytes; /* pinned bytes of activation checkpoints (host, nvme) */
	uint64_t activation_nvme_bytes; /* swap extents of activation checkpoints (nvme) */
	/* nvme bytes the step writes, and reads, of activations (layer-major's boundaries on
	 * nvme: each written and read once); added to nvme_step_read_bytes and _write_bytes */
	uint64_t activation_nvme_step_bytes;
	/* nvme tiers (ignored otherwise) */
	int swap_buffer_count;       /* optimizer-step staging buffers (at least 2 are used) */
	int hot_cap;                 /* hot layers 1 .. H at most (0: no cap; < 0: none) */
	int optim_path_count;        /* offload_optimizer.nvme_path entries (>= 1) */
	int param_path_count;        /* offload_param.nvme_path entries (>= 1) */
	/* frozen parameters (docs/lora.md): floats per layer, or NULL for none */
	const uint64_t *frozen_numel;
	int frozen_read_buffers;     /* home on nvme: pinned read buffers (0 = automatic) */
	/* a 4-bit base (docs/qlora.md): each layer's stored extent in bytes (packed codes,
	 * scales and the unquantized rest), NULL: numel x the stored dtype; and the bytes of
	 * one slot's nested-absmax scratch on the device */
	const uint64_t *frozen_q4_bytes;
	uint64_t frozen_q4_scratch;
	/* a mixture of experts' frozen experts (docs/lora.md, "Experts fetched per routed
	 * expert"): per layer the floats of its expert stacks, the tail of its frozen buffer
	 * (0: none), and its experts; NULL: no layer has them */
	const uint64_t *frozen_expert_numel;
	const int *frozen_experts;
	/* zinc.schedule layer-major (lmajor.h): a layer's parameters are used once per
	 * direction (the last layer once, twice when its tied head runs again) instead of
	 * 2 x grad_accum times */
	bool layer_major, head_again;
};
/* uses of layer l's parameters (or frozen base) per step: fetches with offload */
static inline uint64_t zn_plan_layer_uses(const struct zn_engine_plan_input *in, int l)
{
	if (l == 0)
		return 1;
	if (in->layer_major)
		return l == in->layer_count - 1 && !in->head_again ? 1 : 2;
	return 2 * (uint64_t)in->grad_accum;
}

/* Bytes of each buffer of one layer (0 = not allocated). */
struct zn_layer_buffers {
	uint64_t param_d, grad_d, grad_shard_d, master_d, m_d, v_d;     /* device */
	uint64_t param_h, param_stage_h, grad_h, grad_recv_h, master_h, m_h, v_h; /* pinned */
};

struct zn_engine_plan {
	struct zn_placement pl;
	unsigned param_bytes;        /* bytes per stored parameter: 4 or 2 */
	enum zn_optim_states states; /* m and v: fp32, bf16 or int8 (zn_plan_moment_bytes) */
	bool master_aliases_params;
	bool gathers;                /* compute reads fetched working copies (stage 3 or bf16) */
	bool bf16_gather;            /* stage 3 bf16: slots have a bf16 gather buffer too */
	bool f32_slots;              /* slots hold an fp32 working copy (not bf16 compute) */
	int prefetch_depth;
	int param_slots;             /* ring slots for layers 1 .. n-1 (0 without gathers) */
	int grad_slots;              /* full-gradient ring for layers 1 .. n-1 (stage >= 2) */
	uint64_t slot_numel;         /* largest padded numel among layers 1 .. n-1 */
	uint64_t layer0_numel;       /* padded numel of layer 0 */
	uint64_t dev_param_bytes, dev_grad_bytes, dev_optim_bytes, dev_working_bytes;
	uint64_t dev_act_bytes, device_bytes;
	uint64_t host_param_bytes, host_grad_bytes, host_optim_bytes, host_staging_bytes;
	uint64_t host_swap_bytes;    /* pinned nvme staging (below) */
	uint64_t host_act_bytes;     /* activation checkpoints on the host, or their staging */
	uint64_t host_bytes;
	enum zn_grad_home grad_home;
	int grad_ring;               /* pinned gradient ring buffers (ZN_GRAD_PINNED_RING) */
	uint64_t grad_ring_numel;    /* each ring buffer: the largest shard of layers 1 .. n-1 */
	/* nvme */
	int swap_buffers;            /* optimizer-step staging buffers (0: nothing on nvme) */
	int fetch_buffers;           /* parameter fetch staging buffers (parameters on nvme) */
	int hot_layers;              /* parameters on nvme: layers 1 .. hot_layers (and 0) hot */
	uint64_t swap_shard_numel;   /* largest shard over all layers */
	uint64_t fetch_ring_numel;   /* a ring fetch buffer: the largest shard of layers 1 .. n-1 */
	uint64_t swap_chunk_numel;   /* a staging buffer's sections: elements of one chunk (the
				      * largest shard with compact optimizer states) */
	uint64_t swap_moment_bytes;  /* m (or v) of one chunk as stored, 4 KiB multiple: the
				      * staging sections of m and v */
	uint64_t nvme_optim_bytes;   /* extents of master, m, v (per rank) */
	uint64_t nvme_param_bytes;   /* extents of the parameter shards (per rank) */
	uint64_t nvme_act_bytes;     /* extents of the activation checkpoints (per rank) */
	uint64_t nvme_optim_path_bytes; /* file size on each offload_optimizer path */
	uint64_t nvme_param_path_bytes; /* file size on each offload_param path */
	uint64_t nvme_step_read_bytes;  /* per rank and step: AdamW's state reads + fetches
					 * (+ activation reads) */
	uint64_t nvme_step_write_bytes; /* per rank and step: AdamW's state (+ param) writes
					 * (+ activation writes) */
	/* frozen parameters (zn_plan_frozen, frozen_plan.c; docs/lora.md) */
	bool frozen;                 /* some layer has frozen parameters */
	enum zn_tier frozen_home;    /* pl.params: device, or with offload_param host / nvme */
	unsigned frozen_elem_bytes;  /* 2 (bf16 / fp16 run) or 4 */
	bool frozen_direct;          /* the home on the device is what the compute reads: fp32,
				      * or bf16 with bf16 compute; no slots */
	bool frozen_wide;            /* working copies in fp32 (else the stored bf16 values:
				      * bf16 compute never widens the base) */
	int frozen_slots;            /* working-copy ring for layers 1 .. n-1 */
	int frozen_depth;            /* layers fetched ahead (ring - 1) */
	int frozen_read_buffers;     /* home on nvme: pinned read buffers for layers 1 .. n-1
				      * (reads run this many items ahead of the copies up) */
	uint64_t frozen_numel_total; /* floats over all layers */
	uint64_t frozen_slot_numel;  /* largest frozen layer among 1 .. n-1 */
	uint64_t frozen_layer0_numel;
	uint64_t frozen_home_bytes;  /* the base on its home tier, as allocated */
	uint64_t dev_frozen_bytes;   /* device homes + working copies (+ 16-bit staging) */
	uint64_t host_frozen_bytes;  /* pinned homes, or the nvme read buffers */
	uint64_t nvme_frozen_bytes;  /* the frozen file (per rank; every rank holds all) */
	uint64_t frozen_step_read_bytes; /* nvme: layers 1 .. n-1 2 x grad_accum (layer 0 is
					  * read at the first step only, its copy kept) */
	uint64_t frozen_first_read_bytes; /* nvme: layer 0's extent, read by the first step */
	/* 4-bit base (frozen_q4_bytes given): the homes, reads and copies up move the packed
	 * extents; every slot dequantizes into its working copy (never direct) */
	bool frozen_q4;
	uint64_t frozen_layer0_bytes; /* layer 0's stored extent (before host alignment) */
	uint64_t frozen_slot_bytes;   /* the largest stored extent among layers 1 .. n-1 (a
				       * layer with experts fetched per expert: its rest) */
	/* Frozen experts fetched per routed expert (frozen_experts.c): with the home in host
	 * memory or on nvme, not 4-bit, fp32 working copies. A layer's expert stacks then
	 * leave its fetch (its working slot keeps their room) and each expert some token
	 * routes to is fetched on its own, its stored slices of both stacks; on nvme each
	 * expert is its own 4 KiB-aligned extent after the rest of the layer's. The step's
	 * reads above count the rest; the experts' depend on the routing, at most
	 * frozen_step_expert_bytes (every expert at every use). */
	bool frozen_experts;
	uint64_t frozen_expert_bytes;      /* one expert's stored bytes (the largest) */
	uint64_t frozen_step_expert_bytes; /* every expert of every use of a step, stored */
};

/* Adds the frozen parameters' buffers to out (called by zn_plan_engine before its totals:
 * device_bytes and host_bytes include them). The frozen base is not sharded: every rank
 * holds it on the home tier, stored in the run's parameter dtype (or 4-bit extents). */
void zn_plan_frozen(const struct zn_engine_plan_input *in, struct zn_engine_plan *out);
/* Read buffers beyond the working slots that frozen_read_buffers 0 (automatic) plans,
 * fewer when the pinned budget is short (zn_plan_engine_fit), and zinc estimate counts. */
#define ZN_PLAN_FROZEN_READ_AHEAD 4
/* The read buffers planned for n layers, ring working slots and a request (0 = automatic):
 * the request, or ring + ZN_PLAN_FROZEN_READ_AHEAD; at most the 2 (n - 1) items of a
 * micro-batch's sequence, at least 1. Pure. */
int zn_plan_frozen_read_buffers(int requested, int ring, int layer_count);
/* Whether layer l's experts are fetched per routed expert (the plan's frozen_experts and
 * the layer has some beyond layer 0), and the layer's extent on nvme: the rest of the
 * layer, then each expert's, every part 4 KiB-aligned (else its stored bytes'). */
bool zn_plan_frozen_streams(const struct zn_engine_plan_input *in,
			    const struct zn_engine_plan *p, int l);
uint64_t zn_plan_frozen_extent(const struct zn_engine_plan_input *in,
			       const struct zn_engine_plan *p, int l);

/* rounded as the device counts it */
static inline uint64_t zn_plan_device_alloc_bytes(uint64_t bytes)
{
	return zn_size_round_up(bytes, ZN_PLAN_DEVICE_ALIGN);
}
/* What the arena reserves for plan p: host_bytes + ZN_PLAN_PINNED_MARGIN, at most the
 * budget (0 = none), 0 when the plan has no pinned bytes. Pure. */
uint64_t zn_plan_pinned_reserve(const struct zn_engine_plan *p, uint64_t pinned_budget);
const char *zn_plan_grad_home_name(enum zn_grad_home h); /* "device", "pinned ring", ... */
/* rounded as the arena carves it */
static inline uint64_t zn_plan_host_alloc_bytes(uint64_t bytes)
{
	return zn_size_round_up(bytes, ZN_PLAN_HOST_ALIGN);
}

/* Fills out. Returns 0, or ZN_EUSAGE for inputs that make no sense (logged: which one),
 * including offload_param without offload_optimizer. Pure apart from that log line. */
int zn_plan_engine(const struct zn_engine_plan_input *in, struct zn_engine_plan *out);

/* The buffers of layer l under plan p (sizes as allocated, rounded). Pure. */
/* The staging chunks of a shard of shard_numel elements: ceil(shard / chunk), 1 without
 * staging (swap_chunk_numel: the plan's, 0 without staging). */
int zn_plan_swap_chunks(uint64_t swap_chunk_numel, uint64_t shard_numel);

void zn_plan_layer_buffers(const struct zn_engine_plan_input *in,
			   const struct zn_engine_plan *p, int l, struct zn_layer_buffers *out);

/* Prefetch depth from the config: runtime.prefetch_depth when > 0, else
 * min(stage3_prefetch_bucket_size / slot_numel, stage3_max_live_parameters / slot_numel - 1,
 * layer_count - 2, 4), at least 1 (0 for a model with fewer than 3 layers). Pure. */
int zn_plan_prefetch_depth(const struct zn_config *cfg, uint64_t slot_numel, int layer_count);

/* Compares p with the budgets (0 = unlimited). Returns 0, or -ENOMEM with msg holding
 * "device budget X is short by Y for stage S (...); try ..." or the pinned equivalent. */
int zn_plan_check_budget(const struct zn_engine_plan *p, int stage, uint64_t device_budget,
			 uint64_t pinned_budget, char *msg, size_t msg_size);

/* zn_plan_engine, then, when the depth was automatic (auto_depth) and the device budget
 * is short, the deepest prefetch in [0, in->prefetch_depth] that fits; then the budget
 * check. Returns 0, ZN_EUSAGE or -ENOMEM (msg as zn_plan_check_budget). Pure. */
int zn_plan_engine_fit(const struct zn_engine_plan_input *in, bool auto_depth,
		       uint64_t device_budget, uint64_t pinned_budget,
		       struct zn_engine_plan *out, char *msg, size_t msg_size);

#endif
