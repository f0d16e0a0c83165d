/* The plan: pure functions of the config and the model's shape, no I/O (DESIGN.md, plan).
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
#include <stdint.h>

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
 * master + m + v = 2 + 2 + 12) or fp32 training (params are the master: 4 + 4 + 8). */
struct zn_state_bytes {
	unsigned param;
	unsigned grad;
	unsigned optim;
};

void zn_plan_state_bytes(bool mixed_precision, struct zn_state_bytes *out);

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
	uint64_t activation_bytes; /* per rank, added to the device total (0 = not counted) */
};

struct zn_estimate {
	uint64_t device_model_bytes;   /* model states resident on the device */
	uint64_t device_working_bytes; /* layers in flight: gathered params, full grads */
	uint64_t device_bytes;         /* model + working + activations */
	uint64_t host_bytes;           /* per rank: model states homed in host memory + staging */
	uint64_t host_node_bytes;      /* host_bytes x ranks_per_node */
	uint64_t pinned_staging_bytes; /* per rank: nvme staging buffers (part of host_bytes) */
	uint64_t nvme_bytes;           /* per rank: model states homed on nvme */
};

/* Returns 0, or ZN_EUSAGE for an input that makes no sense (ranks < 1, stage out of
 * range, offload_param without stage 3). Pure. */
int zn_plan_estimate(const struct zn_estimate_input *in, struct zn_estimate *out);

/* GPT-2 shaped model: parameter count and largest layer (embeddings with the position
 * table, or one block). Pure. */
void zn_plan_gpt_params(int layers, int hidden, int vocab, int seq, uint64_t *params,
			uint64_t *largest_layer);

#endif
