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
 * The trainer (zn_net_*, zn_trainer_*, at the end) is what `zinc train` runs: a model
 * from a preset, flags or a Hugging Face directory, trained on a token or text file with
 * checkpoints and saves. The training engine (zn_engine_*) below it runs data-parallel
 * ZeRO steps of a model on caller-made batches. docs/api.md shows both from C and Python.
 *
 * Errors: functions return 0 or a negative errno-style code and log one line on stderr;
 * zn_last_error() returns that line for the calling thread.
 */
#ifndef ZINC_H
#define ZINC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ZN_MAX_NVME_PATHS 8
#define ZN_PATH_MAX 1024
#define ZN_RUN_ID_MAX 40 /* characters of a run id (zinc.run_id, --run-id) */

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

/* How AdamW's m and v are stored (zinc.optimizer_states, --optimizer-states; docs/cpu.md,
 * "Compact optimizer state"): fp32; bf16 (round to nearest even); int8 = bitsandbytes'
 * blockwise 8-bit state (256-element blocks, an fp32 absmax per block, a signed dynamic map
 * for m and an unsigned one for v). The fp32 master stays in every setting. */
enum zn_optim_states {
	ZN_STATES_FP32 = 0,
	ZN_STATES_BF16 = 1,
	ZN_STATES_INT8 = 2,
};

enum zn_lr_schedule {
	ZN_LR_CONSTANT = 0,     /* no "scheduler" block, as in DeepSpeed */
	ZN_LR_WARMUP = 1,       /* WarmupLR */
	ZN_LR_WARMUP_DECAY = 2, /* WarmupDecayLR */
	ZN_LR_WARMUP_COSINE = 3, /* WarmupCosineLR */
	ZN_LR_ONE_CYCLE = 4,     /* OneCycle (lr and, with cycle_momentum, beta1) */
	ZN_LR_RANGE_TEST = 5     /* LRRangeTest */
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
	ZN_OPTIM_ADAMW = 0, /* "AdamW": decoupled weight decay whatever adam_w_mode says */
	ZN_OPTIM_ADAM = 1,  /* "Adam": AdamW when adam_w_mode (default), else L2-regularised */
};

struct zn_optimizer_config {
	enum zn_optimizer_type type;
	float lr;
	float beta1;
	float beta2;
	float eps;
	float weight_decay;
	bool adam_w_mode; /* Adam: true (DeepSpeed's default) = AdamW, false = L2 (Adam) */
	enum zn_optim_states states; /* zinc.optimizer_states: m and v as fp32, bf16 or int8 */
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
	/* OneCycle */
	float cycle_min_lr, cycle_max_lr, decay_lr_rate;
	int64_t cycle_first_step_size, cycle_second_step_size; /* second 0 = same as first */
	int64_t cycle_first_stair_count, cycle_second_stair_count, decay_step_size;
	bool cycle_momentum;
	float cycle_min_mom, cycle_max_mom, decay_mom_rate;
	/* LRRangeTest */
	float lr_range_test_min_lr, lr_range_test_step_rate;
	int64_t lr_range_test_step_size;
	bool lr_range_test_staircase;
};

struct zn_precision_config {
	bool bf16;
	bool fp16;
	float loss_scale; /* 0 = dynamic */
	int initial_scale_power;
	int loss_scale_window;
	int hysteresis;
	bool consecutive_hysteresis;
	float min_loss_scale;
};

/* How --data is read (zinc.data_format): auto = an llm.c token file by its header, else
 * UTF-8 text (anything else is refused); text = every byte a token; tokens = a token file
 * only. */
enum zn_data_format {
	ZN_DATA_FORMAT_AUTO = 0,
	ZN_DATA_FORMAT_TEXT = 1,
	ZN_DATA_FORMAT_TOKENS = 2,
};

/* How sequences are cut from --data (zinc.packing, docs/packing.md): windows = consecutive
 * windows of T + 1 tokens across document boundaries (llm.c's layout); documents = whole
 * documents packed into rows, attention inside each document, positions restarting at
 * each, the token before a boundary not predicted. */
enum zn_packing {
	ZN_PACKING_WINDOWS = 0,
	ZN_PACKING_DOCUMENTS = 1,
};

/* The GEMMs' input dtype (zinc.compute_dtype, --compute-dtype): auto = bf16 when the
 * parameters are bf16 (and the model family has bf16 compute), else fp32; fp32 = fp32
 * working copies of 16-bit parameters (the exact fp32 path); bf16 = bf16 GEMM inputs with
 * fp32 accumulation (needs bf16 parameters). docs/kernels.md, "bf16 compute". */
enum zn_compute_dtype {
	ZN_COMPUTE_AUTO = 0,
	ZN_COMPUTE_FP32 = 1,
	ZN_COMPUTE_BF16 = 2,
};

/* The order of a step's work with gradient accumulation (zinc.schedule, --schedule,
 * docs/architecture.md "Layer-major accumulation"): micro-batch = each micro-batch's
 * forward and backward in turn (every layer's parameters acquired twice per micro-batch);
 * layer-major = each layer for every micro-batch before the next (acquired once per
 * direction), bit-identical; auto = layer-major where it moves fewer bytes and fits. */
enum zn_schedule {
	ZN_SCHEDULE_AUTO = 0,
	ZN_SCHEDULE_LAYER_MAJOR = 1,
	ZN_SCHEDULE_MICRO_BATCH = 2,
};

/* A frozen base's quantization (docs/qlora.md): none, or bitsandbytes' NF4 */
enum zn_quantize_base {
	ZN_QUANTIZE_NONE = 0,
	ZN_QUANTIZE_NF4 = 1,
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
	/* a frozen base on nvme (LoRA): pinned read buffers, 0 = working slots + 4, fewer
	 * when the pinned budget is short (docs/lora.md) */
	int frozen_read_buffers;
	/* offload_param nvme: layers after layer 0 whose shard stays pinned (hot); -1 =
	 * prefetch depth + 1 within the pinned budget, 0 = none */
	int hot_layers;
	/* seconds a collective may wait for the other ranks (docs/comm.md, "Timeouts") */
	float comm_timeout_s;
	/* names this run's swap directories, so runs sharing an nvme path keep apart:
	 * letters, digits, '.', '_', '-'; "" = p<pid> */
	char run_id[ZN_RUN_ID_MAX + 1];
	enum zn_data_format data_format;
	enum zn_compute_dtype compute_dtype;
	enum zn_packing packing;
	enum zn_schedule schedule;
	/* QLoRA (docs/qlora.md): the frozen base's linear weights quantized at load
	 * (zinc.quantize_base, --quantize-base), with nested absmax (zinc.double_quant) */
	enum zn_quantize_base quantize_base;
	bool double_quant;
};

/* Activation checkpointing (docs/activations.md): "activation_checkpointing" and
 * --gradient-checkpointing. With it on, forward keeps only the input of every `every`-th
 * layer (the checkpoints) and backward recomputes each run of `every` layers from its
 * checkpoint; home.device says where the checkpoints live between forward and backward:
 * ZN_OFFLOAD_NONE on the device, ZN_OFFLOAD_CPU in pinned host memory (DeepSpeed's
 * cpu_checkpointing), ZN_OFFLOAD_NVME in a swap store under home.nvme_path (or the
 * offload_optimizer / offload_param path when none is given). */
struct zn_act_ckpt_config {
	bool enabled;                   /* zinc.gradient_checkpointing */
	int every;                      /* zinc.checkpoint_every: layers per recomputed run */
	bool cpu_checkpointing;         /* = home.device cpu */
	bool partition_activations;     /* model parallel: no effect with data parallelism */
	bool contiguous_memory_optimization; /* buffer layout only */
	int64_t number_checkpoints;     /* buffer sizing only */
	bool synchronize_checkpoint_boundary; /* timing aid */
	bool profile;                   /* timing aid */
	struct zn_offload_config home;  /* device (none = the device, cpu, nvme), nvme_path */
};

/* "csv_monitor": per-step figures as CSV files under output_path/job_name */
struct zn_monitor_config {
	bool csv_enabled;
	char csv_output_path[ZN_PATH_MAX];
	char csv_job_name[256];
};

/* Where a key's value came from (struct zn_config.origin, by key-table row). */
enum zn_config_origin {
	ZN_ORIGIN_DEFAULT = 0,
	ZN_ORIGIN_CONFIG = 1, /* the --config file */
	ZN_ORIGIN_FLAG = 2,   /* a command-line flag */
	ZN_ORIGIN_AUTO = 3,   /* "auto" in the config: the Trainer's default or derived */
};

#define ZN_CONFIG_MAX_KEYS 160

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
	struct zn_monitor_config monitor;
	struct zn_act_ckpt_config act_ckpt;
	unsigned char origin[ZN_CONFIG_MAX_KEYS]; /* enum zn_config_origin per key row */
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

/* What "auto" values are derived from (Hugging Face's meaning): the model's hidden size,
 * the run's step count and --warmup-ratio; 0 leaves those keys at zinc's defaults. */
struct zn_config_derive {
	int64_t hidden;
	int64_t steps;
	double warmup_ratio; /* > 0: warmup_num_steps = ceil(steps x ratio), as the Trainer's */
};

/* Fills every key the config gave as "auto" as the Hugging Face Trainer does when no flag
 * gave it (docs/config.md): TrainingArguments' defaults (lr 5e-5, betas 0.9,0.999, eps
 * 1e-8, weight decay 0, clipping 1.0, warmup 0 or ceil(steps x warmup_ratio), warmup_min_lr
 * 0), bucket sizes from hidden, warmup_max_lr from the lr, total_num_steps from steps.
 * Returns 0, or ZN_EUSAGE (logged) when warmup_ratio meets a warmup_num_steps given as a
 * number or a flag. */
int zn_config_resolve_auto(struct zn_config *cfg, const struct zn_config_derive *d);

/* One line per key: "path = value  (origin)", origin one of default, config, flag, auto. */
void zn_config_print_origins(FILE *f, const struct zn_config *cfg);

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

/* ---- the training engine (src/sched) ---------------------------------------------------
 *
 * One engine per rank. It creates the device (runtime.device, device_mem), the comm (every
 * rank of the launch), the pinned host arena, plans every buffer and refuses a run that
 * does not fit its budgets before allocating anything that scales with it (ZN_EUSAGE with
 * one line naming the budget and the shortfall, or the counts zn_engine_check_counts
 * refuses), then initializes the model (seeded, the same values however it is partitioned,
 * or from init_params_h). An allocation that fails after that is -ENOMEM, logged with what
 * and how many bytes (a runtime failure, not a usage error). See docs/engine.md.
 *
 *     struct zn_engine_options o = { .seq_len = 64 };
 *     struct zn_engine *e;
 *     rc = zn_engine_create(&e, &cfg, &model, &o);   // model.h; e.g. zn_gpt2_model(&mc)
 *     for (step = 0; !rc && step < steps; step++) {
 *             // this rank's gas x micro x T inputs and targets (llm.c's rank layout)
 *             rc = zn_engine_step(e, inputs, targets, &stats);
 *     }
 *     zn_engine_destroy(e);
 *
 * Threading: one thread per engine. Collective: create, step, read_layer and save must be
 * called by every rank in the same order.
 */
struct zn_engine;
struct zn_model; /* src/model/model.h: a model family's ops and configuration */
struct zn_layer_desc; /* src/model/model.h: one layer's tensors */
struct zn_q4_layer;   /* src/model/quant/q4.h: a layer of a 4-bit frozen base */

struct zn_engine_options {
	int seq_len;                       /* T: 1 .. model seq */
	int comm_kind;                     /* enum zn_comm_kind (0 = auto from the launch) */
	const float *const *init_params_h; /* per layer (model layout), or NULL: seeded init */
	/* Or, when init_params_h is NULL and init_layer is set: called during create for
	 * layers 0 .. n-1 in order, it writes layer l's L->numel initial floats to params_h
	 * (the engine's buffer of one layer) and returns 0, or a negative code that fails
	 * create. Loading a checkpoint this way holds one layer in host memory at a time. */
	int (*init_layer)(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h);
	/* Likewise for a layer's frozen parameters (L->frozen_numel > 0; docs/lora.md), or
	 * NULL: the model's init_frozen. */
	int (*init_frozen)(void *ctx, int layer, const struct zn_layer_desc *L, float *frozen_h);
	void *init_ctx;
	/* A 4-bit frozen base given as stored (a bitsandbytes checkpoint, docs/qlora.md): each
	 * layer's layout (src/model/quant/q4.h; n of them, a layer without frozen parameters
	 * an empty one), and init_frozen_q4 writing layer l's extent (layout bytes, zeroed)
	 * in place of init_frozen. NULL: zinc.quantize_base decides (nf4: the engine
	 * quantizes init_frozen's values at load). */
	const struct zn_q4_layer *frozen_q4;
	int (*init_frozen_q4)(void *ctx, int layer, void *extent);
};

struct zn_step_stats {
	int64_t step;              /* 1-based optimizer step just taken */
	float loss;                /* mean over every token of every rank and micro-batch */
	float lr;                  /* learning rate this step used */
	float grad_norm;           /* global L2 norm of the gradients (before clipping) */
	uint64_t tokens;           /* tokens in the global batch */
	double step_ms;            /* wall time of zn_engine_step */
	double fwd_ms, bwd_ms;     /* compute stream time in forward / backward */
	double opt_ms;             /* AdamW time (CPU or device workers) */
	double wait_ms;            /* step_ms - fwd_ms - bwd_ms: compute stream idle in the step */
	double host_wait_ms;       /* calling thread blocked on gradient shards or the norm */
	uint64_t device_peak_bytes;
	uint64_t pinned_bytes;     /* pinned host memory in use */
	uint64_t plan_device_bytes;
	uint64_t pinned_size_bytes;     /* the pinned arena's budget */
	uint64_t nvme_read_bytes;       /* this rank's swap-store bytes moved in the step */
	uint64_t nvme_write_bytes;
	uint64_t plan_nvme_read_bytes;  /* the plan's figures for the same */
	uint64_t plan_nvme_write_bytes;
	uint64_t plan_nvme_first_read_bytes; /* read once, by the first step of the process (the
					      * frozen base's layer 0 on nvme), beyond the above */
	uint64_t copy_h2d_bytes;        /* host -> device copies enqueued in the step */
	uint64_t copy_d2h_bytes;        /* device -> host */
	float loss_scale;          /* fp16: the scale this step's gradients had (1 otherwise) */
	bool overflow;             /* fp16: the gradients overflowed; nothing was updated */
	float next_loss_scale;     /* fp16: the scale of the next step (after this update) */
	/* a model with an auxiliary loss (a mixture of experts' load balancing, with
	 * output_router_logits): that loss (before its coefficient), averaged over the
	 * micro-batches and ranks; loss above is the cross-entropy alone; 0 otherwise */
	float aux_loss;
	bool has_aux;
	/* a mixture of experts' frozen experts fetched per routed expert (docs/lora.md): the
	 * experts fetched in the step (each use of a layer counts its own) and their stored
	 * bytes moved up (their nvme reads are in nvme_read_bytes); the plan's figures for a
	 * fetch of every expert at every use (what the whole layers' fetch moved) */
	uint64_t expert_fetches, expert_bytes;
	uint64_t plan_expert_fetches, plan_expert_bytes;
};

int zn_engine_create(struct zn_engine **out, const struct zn_config *cfg,
		     const struct zn_model *model, const struct zn_engine_options *opt);
/* What zn_engine_create checks first, in constant memory, and callers that do per-layer
 * work of their own before it (a checkpoint loader) call first: the step's tokens per rank
 * (micro-batch x seq_len x accumulation) fit an int, and the host bookkeeping that grows
 * with the counts (per layer, per token, per micro-batch) fits the available memory.
 * Returns 0, or ZN_EUSAGE with a line naming the counts and the bytes. model: validated. */
int zn_engine_check_counts(const struct zn_config *cfg, const struct zn_model *model,
			   int seq_len);
void zn_engine_destroy(struct zn_engine *e); /* accepts NULL and half-built */

int zn_engine_rank(const struct zn_engine *e);
/* Traces the steps t wants into t (src/core/trace.h; NULL: off). t stays the caller's and
 * must outlive the engine's steps. Leaving a trace waits for the write-behind first (its
 * spans are the old trace's): returns 0 or that wait's error, as zn_engine_flush. */
struct zn_trace;
int zn_engine_set_trace(struct zn_engine *e, struct zn_trace *t);
/* Waits for the NVMe write-behind of the last step (zn_engine_step returns with its state
 * writes still in flight; the next step, a checkpoint, a read-back, eval and destroy wait
 * for them as they need). Returns 0 or the first write's error, logged with its layer. */
int zn_engine_flush(struct zn_engine *e);
/* Sets aio.bandwidth_cap_bytes_per_s (per direction, 0 = none) of the engine's NVMe I/O
 * from now on; -EINVAL when no state is on NVMe. */
int zn_engine_set_nvme_cap(struct zn_engine *e, uint64_t bytes_per_s);
int zn_engine_world(const struct zn_engine *e);
int zn_engine_micro_batch(const struct zn_engine *e);
int zn_engine_grad_accum(const struct zn_engine *e);
int zn_engine_layer_count(const struct zn_engine *e);
uint64_t zn_engine_layer_numel(const struct zn_engine *e, int layer);

/* Where the engine's memory goes (docs/memory.md), per rank, from its plan. */
struct zn_engine_memory {
	uint64_t device_bytes;          /* the plan's device bytes (host memory on --device host) */
	uint64_t pinned_plan_bytes;     /* the pinned views the plan lists */
	uint64_t pinned_reserved_bytes; /* the arena: the plan + the margin, within the budget */
	uint64_t pinned_budget_bytes;   /* --pinned-mem, or the default share of RAM */
	uint64_t grad_pinned_bytes;     /* of the plan's pinned bytes: gradient shards */
	const char *grad_home;          /* "device", "pinned ring", "pinned, held for the step" */
	int grad_ring;                  /* buffers of the pinned ring (0 otherwise) */
	/* of device_bytes: the model states (parameters, gradients, optimizer state, the
	 * frozen base and its working copies), the layers in flight (working copies, full
	 * gradients), activations */
	uint64_t device_model_bytes, device_working_bytes, device_act_bytes;
	uint64_t pinned_swap_bytes;     /* of the plan's pinned bytes: nvme staging */
	uint64_t nvme_bytes;            /* swap extents: optimizer, parameters, checkpoints, base */
	uint64_t frozen_bytes;          /* the frozen base (LoRA) on its home tier, as allocated */
	int prefetch_depth;             /* layers fetched ahead, as planned */
	/* the step's order (zinc.schedule) as chosen, and why; nvme bytes read per step */
	char schedule[400];
	uint64_t nvme_step_read_bytes;
	/* frozen experts fetched per routed expert (docs/lora.md): one expert's stored bytes,
	 * and every expert at every use of a step (what the whole layers' fetch moves; the
	 * routed experts are a part of it, nvme_step_read_bytes counts the layers' rest) */
	uint64_t expert_bytes, step_expert_bytes;
};
void zn_engine_memory(const struct zn_engine *e, struct zn_engine_memory *out);

/* The memory zn_engine_create(cfg, model, opt) would plan on `world` ranks with a device
 * of device_budget bytes (zn_device_budget_bytes of the device the run creates; 0: no
 * limit), without a device, a rank or an allocation: the same planning code, so `zinc
 * estimate` prints the run's own "memory plan:" line. pinned_reserved_bytes is the arena
 * the run would map. Returns 0; -ENOMEM when the run would be refused for a budget (msg
 * says why, as the run logs it; out holds the plan); or what zn_engine_create refuses
 * before planning (ZN_EUSAGE, -EINVAL: logged). */
int zn_engine_plan_memory(const struct zn_config *cfg, const struct zn_model *model,
			  const struct zn_engine_options *opt, int world, uint64_t device_budget,
			  struct zn_engine_memory *out, char *msg, size_t msg_size);

/* A target that is no label (Hugging Face's -100): no loss, no gradient, not counted. */
#define ZN_IGNORE_INDEX (-100)

/* One optimizer step over grad_accum micro-batches: inputs_h and targets_h hold this rank's
 * grad_accum x micro x T tokens (micro-batch k at offset k x micro x T). Targets equal to
 * ZN_IGNORE_INDEX are masked: the loss (reported and differentiated) is the sum over the
 * other targets of every micro-batch and rank divided by their global count, as Hugging
 * Face's mean over labels != -100 (a step without any label has loss 0 and no gradient:
 * AdamW still moves by its momentum). Returns 0 or a
 * negative code (logged); after an error destroy the engine. A loss or gradient norm that
 * is not finite is -ERANGE, logged with the step and the first layer whose gradient is not
 * finite (with gradient_clipping the weights are left as they were; without, the update
 * already ran: do not save them). */
int zn_engine_step(struct zn_engine *e, const int *inputs_h, const int *targets_h,
		   struct zn_step_stats *st);
/* zn_engine_step with packed documents (docs/packing.md): pos_h [gas, B, T] each token's
 * position in its document (NULL: zn_engine_step). Targets < 0 are not predicted: the
 * loss and its gradient average over the predicted targets of every rank and micro-batch
 * (with pos_h or any negative target). Needs zinc.packing documents at create (for
 * pos_h); fp32 or bf16 compute. */
int zn_engine_step_pos(struct zn_engine *e, const int *inputs_h, const int *targets_h,
		       const int *pos_h, struct zn_step_stats *st);

/* Forward only over grad_accum micro-batches laid out as zn_engine_step's (validation):
 * no gradient buffers touched, no optimizer state read or written, the weights unchanged.
 * *loss: the mean per-label loss over every rank's tokens (the value zn_engine_step would
 * report for the same tokens before its update; ZN_IGNORE_INDEX targets masked as there).
 * Collective. Returns 0 or a negative code. */
int zn_engine_eval(struct zn_engine *e, const int *inputs_h, const int *targets_h, float *loss);
/* zn_engine_eval of packed rows (zinc.packing documents): pos_h as zn_engine_step_pos's
 * (NULL: zn_engine_eval); the loss is the mean over the predicted targets. */
int zn_engine_eval_pos(struct zn_engine *e, const int *inputs_h, const int *targets_h,
		       const int *pos_h, float *loss);

/* The fp32 master weights of layer `layer` (numel floats) gathered from every rank into
 * out_h on every rank. Collective. */
int zn_engine_read_layer(struct zn_engine *e, int layer, float *out_h);

/* Frozen parameters (docs/lora.md): floats of layer `layer`'s frozen buffer (0: none), and
 * those parameters as fp32 from their home into out_h (every rank holds them whole: not
 * collective). */
uint64_t zn_engine_frozen_numel(const struct zn_engine *e, int layer);
int zn_engine_read_frozen(struct zn_engine *e, int layer, float *out_h);
/* A 4-bit frozen base (docs/qlora.md): its layouts (one per layer), or NULL when the base
 * is not quantized; and layer's extent as stored (layout bytes) into out_h. */
const struct zn_q4_layer *zn_engine_frozen_q4(const struct zn_engine *e);
int zn_engine_read_frozen_q4(struct zn_engine *e, int layer, void *out_h);

/* Saves the master weights as a safetensors file (dtype ZN_DTYPE_F32 or ZN_DTYPE_BF16);
 * every rank calls it, rank 0 writes. -ERANGE (nothing written) when a weight is NaN or
 * infinite. */
int zn_engine_save(struct zn_engine *e, const char *path, enum zn_dtype dtype);

/* ---- errors ---------------------------------------------------------------------------
 *
 * The last error line zinc logged on the calling thread (without the "zinc: error: "
 * prefix and the file:line), "" when none yet. Valid until the thread's next zinc call
 * that fails; thread-local, so threads do not see each other's errors. */
const char *zn_last_error(void);

/* sizeof(struct zn_config), for callers that allocate one without this header's layout
 * (Python's ctypes: a buffer of this size, then zn_config_defaults). */
size_t zn_config_size(void);

/* ---- the model: an opaque description (src/train) ---------------------------------------
 *
 * A zn_net is what the model is, not its weights: a family (GPT-2, or Llama / Qwen2 /
 * Mistral / Qwen3: any of zinc's model-family registry), its shapes, and for
 * zn_net_from_hf the directory its weights come from. Build
 * it from one of:
 *   zn_net_from_preset  "tiny", "small", "gpt2", ..., "llama-tiny", "llama-3-8b",
 *                       "qwen3-8b", ...
 *                       (zinc train --model NAME's names)
 *   zn_net_from_flags   zinc train's model flags: {"--model", "tiny", "--layers", "4"},
 *                       {"--model-config", "config.json"}, ...
 *   zn_net_from_hf      a Hugging Face directory (config.json + safetensors): the trainer
 *                       starts from its weights (zinc train --init-from DIR)
 * Each returns 0, or ZN_EUSAGE / -EINVAL (zn_last_error says which flag or key) with
 * *out NULL. The net is read-only afterwards: one net may serve several trainers. */
struct zn_net;
int zn_net_from_preset(struct zn_net **out, const char *name);
int zn_net_from_flags(struct zn_net **out, int argc, const char *const *argv);
int zn_net_from_hf(struct zn_net **out, const char *dir);
void zn_net_destroy(struct zn_net *net); /* accepts NULL */
int zn_net_seq(const struct zn_net *net);   /* the model's sequence length */
int zn_net_vocab(const struct zn_net *net);
uint64_t zn_net_params(const struct zn_net *net); /* as Hugging Face counts them */
/* The model as zn_engine_create takes it (valid while net lives); for callers that make
 * their own batches instead of using a trainer. */
const struct zn_model *zn_net_model(const struct zn_net *net);

/* ---- the trainer (src/train) ------------------------------------------------------------
 *
 * zinc train as a library: the batches (llm.c's layout, or packed documents), the engine,
 * LoRA, periodic eval and checkpoints. With the same config, net and options it trains
 * exactly as `zinc train` does (the CLI is built on these calls): the same losses.
 *
 *     struct zn_config cfg;
 *     struct zn_net *net;
 *     struct zn_trainer *t;
 *     struct zn_step_stats st;
 *     zn_config_defaults(&cfg);               // zinc train's defaults; or zn_config_from_args
 *     if (zn_net_from_preset(&net, "tiny") ||
 *         zn_trainer_create(&t, &cfg, net, &(struct zn_trainer_options){
 *                 .data = "data/demo.txt", .steps = 20 }))
 *             fprintf(stderr, "%s\n", zn_last_error());
 *     while (zn_trainer_step(t, &st) == 0)    // 1 after the last step
 *             printf("step %lld loss %.4f\n", (long long)st.step, st.loss);
 *     zn_trainer_save_hf(t, "out");
 *     zn_trainer_destroy(t);
 *     zn_net_destroy(net);
 *
 * Threading: one thread per trainer. Collective (under mpirun): every call but destroy is
 * made by every rank in the same order. A trainer sets no signal handlers; after an error
 * from step, save or eval, only destroy is valid.
 */
struct zn_trainer;

struct zn_trainer_options {
	const char *data;   /* training tokens: an llm.c token file or UTF-8 text (needed) */
	int steps;          /* optimizer steps of the run (its schedule's "auto" length) */
	int seq;            /* T; 0 = the net's sequence length */
	double warmup_ratio; /* > 0: warmup_num_steps = ceil(steps x ratio) (--warmup-ratio) */
	const char *resume; /* a checkpoint directory (zinc train --resume): its weights,
			     * optimizer state and data position; NULL = start fresh */
	const char *val_data; /* eval tokens for zn_trainer_eval; NULL = none */
	int eval_batches;   /* batches per zn_trainer_eval (0: 1) */
};

/* Resolves the config's "auto" values (from the net and steps) and validates it for the
 * ranks of the launch, then builds the engine (weights seeded from cfg's seed, from the
 * net's HF directory, or from options->resume) and opens the data. cfg and options are
 * copied. Returns 0, ZN_EUSAGE (a setting to change), or a negative code (a file, an
 * allocation); zn_last_error() says which. */
int zn_trainer_create(struct zn_trainer **out, const struct zn_config *cfg,
		      const struct zn_net *net, const struct zn_trainer_options *options);
/* One optimizer step on the next batch: 0 and st filled (st->step is 1-based), 1 when
 * the run's steps are done (nothing trained), or a negative code. */
int zn_trainer_step(struct zn_trainer *t, struct zn_step_stats *st);
/* The mean loss over options->eval_batches batches of val_data, forward only (the
 * weights unchanged). -EINVAL without val_data. */
int zn_trainer_eval(struct zn_trainer *t, float *loss);
/* The weights as a Hugging Face model: path ending in .safetensors one file, any other
 * path a directory (config.json + model.safetensors); fp32. */
int zn_trainer_save_hf(struct zn_trainer *t, const char *path);
/* A checkpoint directory of the step just taken (weights, optimizer state, data
 * position) that options->resume (or zinc train --resume) continues from. */
int zn_trainer_save_checkpoint(struct zn_trainer *t, const char *dir);
/* Optimizer steps taken so far (a resumed run starts at the checkpoint's). */
int64_t zn_trainer_steps_done(const struct zn_trainer *t);
struct zn_engine *zn_trainer_engine(struct zn_trainer *t); /* for zn_engine_memory etc. */
void zn_trainer_destroy(struct zn_trainer *t); /* accepts NULL and half-built */

#endif
