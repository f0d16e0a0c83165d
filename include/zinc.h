/* zinc public C API: the configuration every module reads.
 *
 * A zn_config is filled in three layers, later ones winning: zn_config_defaults(), then a
 * DeepSpeed-style JSON file (zn_config_load_json), then command-line flags
 * (zn_config_apply_flags). zn_config_validate() checks the result against the world size.
 * The struct is plain data: copy it freely. Paths are fixed arrays so a copy owns them.
 *
 *     struct zn_config cfg;
 *     zn_config_defaults(&cfg);
 *     if (zn_config_load_json(&cfg, "ds.json") || zn_config_validate(&cfg, 1))
 *             return 2;
 *
 * The engine API (zn_engine_*) lives in src/sched/engine.h and is re-exported here once it
 * exists.
 */
#ifndef ZINC_H
#define ZINC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ZN_MAX_NVME_PATHS 8
#define ZN_PATH_MAX 1024

enum zn_offload_device {
	ZN_OFFLOAD_NONE = 0,
	ZN_OFFLOAD_CPU = 1,
	ZN_OFFLOAD_NVME = 2,
};

enum zn_dtype {
	ZN_DTYPE_F32 = 0,
	ZN_DTYPE_BF16 = 1,
	ZN_DTYPE_F16 = 2,
};

enum zn_device_kind {
	ZN_DEVICE_AUTO = 0,
	ZN_DEVICE_HOST = 1,
	ZN_DEVICE_CUDA = 2,
};

enum zn_lr_schedule {
	ZN_LR_CONSTANT = 0,     /* no "scheduler" block, as in DeepSpeed */
	ZN_LR_WARMUP = 1,       /* WarmupLR */
	ZN_LR_WARMUP_DECAY = 2, /* WarmupDecayLR */
	ZN_LR_WARMUP_COSINE = 3 /* WarmupCosineLR */
};

/* zero_optimization.offload_optimizer / offload_param */
struct zn_offload_config {
	enum zn_offload_device device;
	int nvme_path_count;
	char nvme_path[ZN_MAX_NVME_PATHS][ZN_PATH_MAX];
	bool pin_memory;
	int buffer_count;
	uint64_t buffer_size;       /* offload_param only: elements per buffer */
	uint64_t max_in_cpu;        /* offload_param only: parameter count kept in host memory */
	bool pipeline_read;         /* offload_optimizer only */
	bool pipeline_write;        /* offload_optimizer only */
};

/* top-level "aio" block */
struct zn_aio_config {
	uint64_t block_size_bytes;
	int queue_depth;
	int intra_op_parallelism; /* rings (worker threads); old name thread_count */
	bool single_submit;
	bool overlap_events;
	uint64_t bandwidth_cap_bytes_per_s; /* zinc extension: 0 = uncapped */
};

struct zn_zero_config {
	int stage;
	bool contiguous_gradients;
	bool overlap_comm;
	uint64_t reduce_bucket_size;                 /* elements */
	uint64_t stage3_prefetch_bucket_size;        /* elements */
	uint64_t stage3_max_live_parameters;         /* elements */
	uint64_t stage3_param_persistence_threshold; /* elements */
	uint64_t sub_group_size;                     /* elements */
	struct zn_offload_config offload_optimizer;
	struct zn_offload_config offload_param;
};

enum zn_optimizer_type {
	ZN_OPTIM_ADAMW = 0,
};

struct zn_optimizer_config {
	enum zn_optimizer_type type;
	float lr;
	float beta1;
	float beta2;
	float eps;
	float weight_decay;
};

/* "scheduler": DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR and their params */
struct zn_scheduler_config {
	enum zn_lr_schedule type;
	float warmup_min_lr;
	float warmup_max_lr;
	int64_t warmup_num_steps;
	int64_t total_num_steps;
	bool warmup_log; /* warmup_type "log" (DeepSpeed's default) or "linear" */
	float warmup_min_ratio; /* WarmupCosineLR */
	float cos_min_ratio;    /* WarmupCosineLR */
};

struct zn_precision_config {
	bool bf16;
	bool fp16;
	float loss_scale; /* 0 = dynamic */
	int initial_scale_power;
	int loss_scale_window;
	int hysteresis;
	float min_loss_scale;
};

/* zinc's own runtime settings: JSON block "zinc" and flags */
struct zn_runtime_config {
	enum zn_device_kind device;
	uint64_t device_mem_bytes;  /* 0 = backend default (all of the GPU; 1 GiB for host) */
	uint64_t pinned_mem_bytes;  /* 0 = default fraction of RAM */
	int numa_node;              /* -1 = nearest the GPU, else the calling thread's */
	uint64_t seed;
	bool deterministic;
	int prefetch_depth; /* 0 = derived from stage3 limits and the device budget */
};

struct zn_config {
	int64_t train_batch_size;
	int64_t train_micro_batch_size_per_gpu;
	int64_t gradient_accumulation_steps;
	float gradient_clipping; /* 0 = off */
	int steps_per_print;
	struct zn_optimizer_config optimizer;
	struct zn_scheduler_config scheduler;
	struct zn_precision_config precision;
	struct zn_zero_config zero;
	struct zn_aio_config aio;
	struct zn_runtime_config runtime;
};

/* Exit status for usage errors (bad flags, bad config). */
#define ZN_EXIT_USAGE 2

/* Error code returned by config functions for a usage error (bad value or key). */
#define ZN_EUSAGE (-22) /* -EINVAL */

void zn_config_defaults(struct zn_config *cfg);

/* Parses a DeepSpeed-style JSON file into cfg (keys not present keep their value).
 * Returns 0, or ZN_EUSAGE after logging "PATH: key: what to change". Unknown keys are a
 * warning naming the closest valid key. */
int zn_config_load_json(struct zn_config *cfg, const char *path);
int zn_config_load_json_string(struct zn_config *cfg, const char *json, const char *origin);

/* Applies the config flags in argv[0..argc) to cfg; arguments that are not config flags are
 * moved, in order, to rest (caller provides argc slots) and counted in *rest_count.
 * Returns 0 or ZN_EUSAGE. */
int zn_config_apply_flags(struct zn_config *cfg, int argc, char **argv, char **rest,
			  int *rest_count);

/* Checks cross-field rules (batch sizes for world_size ranks, stage vs offload, nvme paths
 * exist and are writable, O_DIRECT alignment). Fills derived batch fields. */
int zn_config_validate(struct zn_config *cfg, int world_size);

/* Effective config as JSON (caller frees with free()). */
char *zn_config_to_json(const struct zn_config *cfg);

/* The usual sequence for a command: defaults, then --config FILE if present in argv, then
 * every other config flag; non-config arguments are moved to rest (argc slots). */
int zn_config_from_args(struct zn_config *cfg, int argc, char **argv, char **rest,
			int *rest_count);

/* Logs "unknown option ARG (did you mean --X?)" for an argument no command took. */
void zn_config_report_unknown_flag(const char *arg);

/* Prints the config flags and their meaning. */
void zn_config_print_flags_help(FILE *f);

/* Parses "4096", "1M", "1.5G", "70B" (as a count: K=1e3 style when decimal is true,
 * otherwise K=1024). Returns 0 or ZN_EUSAGE. */
int zn_parse_size(const char *s, uint64_t *out);
int zn_parse_count(const char *s, uint64_t *out);

#endif
