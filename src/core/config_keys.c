/* The key tables: every DeepSpeed config key zinc knows. zn_config_keys holds the keys
 * with a value in struct zn_config (a NULL note: implemented; a note: accepted, shown by
 * --print-config, with no effect in zinc); zn_config_doc_keys the other documented
 * DeepSpeed keys, each accepted with a "no effect in zinc" line or refused with a reason
 * when ignoring it would change the training. Flags and `zinc train --help` come from
 * here, so a key cannot be known to one and not the other.
 */
#include <stddef.h>
#include <string.h>

#include "core/config_keys.h"

#define OFF(field) offsetof(struct zn_config, field)
#define OPT(field) OFF(zero.offload_optimizer.field)
#define PRM(field) OFF(zero.offload_param.field)
#define SCH(field) OFF(scheduler.field)
#define ACK(field) OFF(act_ckpt.field)

static const char *const offload_names[] = { "none", "cpu", "nvme", NULL };
static const char *const device_names[] = { "auto", "host", "cuda", NULL };
static const char *const sched_names[] = { "none", "WarmupLR", "WarmupDecayLR",
					   "WarmupCosineLR", "OneCycle", "LRRangeTest", NULL };
static const char *const optim_names[] = { "AdamW", "Adam", NULL };
static const char *const warmup_names[] = { "linear", "log", NULL };
static const char *const data_format_names[] = { "auto", "text", "tokens", NULL };
static const char *const compute_dtype_names[] = { "auto", "fp32", "bf16", NULL };
static const char *const states_names[] = { "fp32", "bf16", "int8", NULL };
static const char *const packing_names[] = { "windows", "documents", NULL };
static const char *const schedule_names[] = { "auto", "layer-major", "micro-batch", NULL };
static const char *const quantize_names[] = { "none", "nf4", NULL };

static const char *const ckpt_home_names[] = { "device", "cpu", "nvme", NULL };

static const char no_param_swap[] = "parameter staging is sized by zinc's plan";

const struct zn_key zn_config_keys[] = {
	{ "train_batch_size", "train-batch-size", ZN_KEY_I64, OFF(train_batch_size), NULL, 0,
	  "global batch: micro-batch x accumulation x ranks", NULL, 0 },
	{ "train_micro_batch_size_per_gpu", "micro-batch", ZN_KEY_I64,
	  OFF(train_micro_batch_size_per_gpu), NULL, 0, "sequences per rank per micro-step", NULL, 0 },
	{ "gradient_accumulation_steps", "grad-accum", ZN_KEY_I64,
	  OFF(gradient_accumulation_steps), NULL, 0, "micro-batches per optimizer step", NULL, 0 },
	{ "gradient_clipping", "grad-clip", ZN_KEY_FLOAT, OFF(gradient_clipping), NULL, 0,
	  "global-norm clipping threshold (0 = off)", NULL, 0 },
	{ "steps_per_print", "steps-per-print", ZN_KEY_INT, OFF(steps_per_print), NULL, 0,
	  "print a line every N steps", NULL, 0 },
	{ "optimizer.type", "optimizer", ZN_KEY_ENUM, OFF(optimizer.type), optim_names, 0,
	  "AdamW, or Adam (AdamW unless adam_w_mode is false)", NULL, 0 },
	{ "optimizer.params.lr", "lr", ZN_KEY_FLOAT, OFF(optimizer.lr), NULL, 0,
	  "learning rate", NULL, 0 },
	{ "optimizer.params.betas", "betas", ZN_KEY_BETAS, OFF(optimizer.beta1), NULL, 0,
	  "Adam betas, e.g. 0.9,0.95", NULL, 0 },
	{ "optimizer.params.eps", "eps", ZN_KEY_FLOAT, OFF(optimizer.eps), NULL, 0, "Adam eps", NULL, 0 },
	{ "optimizer.params.weight_decay", "weight-decay", ZN_KEY_FLOAT,
	  OFF(optimizer.weight_decay), NULL, 0, "weight decay (decoupled unless L2 Adam)", NULL, 0 },
	{ "optimizer.params.adam_w_mode", "adam-w-mode", ZN_KEY_BOOL, OFF(optimizer.adam_w_mode),
	  NULL, 0, "Adam: decoupled weight decay (true) or L2 in the gradient (false)", NULL, 0 },
	{ "scheduler.type", "lr-schedule", ZN_KEY_ENUM, SCH(type), sched_names, 0,
	  "none, WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle or LRRangeTest", NULL, 0 },
	{ "scheduler.params.warmup_min_lr", "warmup-min-lr", ZN_KEY_FLOAT, SCH(warmup_min_lr),
	  NULL, 0, "lr at step 0 (WarmupLR, WarmupDecayLR)", NULL, 0 },
	{ "scheduler.params.warmup_max_lr", "warmup-max-lr", ZN_KEY_FLOAT, SCH(warmup_max_lr),
	  NULL, 0, "lr after warmup (WarmupLR, WarmupDecayLR)", NULL, 0 },
	{ "scheduler.params.warmup_num_steps", "warmup-steps", ZN_KEY_I64,
	  SCH(warmup_num_steps), NULL, 0, "warmup steps", NULL, 0 },
	{ "scheduler.params.total_num_steps", "total-steps", ZN_KEY_I64, SCH(total_num_steps),
	  NULL, 0, "steps of the whole schedule (decay, cosine)", NULL, 0 },
	{ "scheduler.params.warmup_type", "warmup-type", ZN_KEY_ENUM, SCH(warmup_log),
	  warmup_names, 0, "log (DeepSpeed default) or linear", NULL, 0 },
	{ "scheduler.params.warmup_min_ratio", "warmup-min-ratio", ZN_KEY_FLOAT,
	  SCH(warmup_min_ratio), NULL, 0, "WarmupCosineLR: start lr / optimizer lr", NULL, 0 },
	{ "scheduler.params.cos_min_ratio", "cos-min-ratio", ZN_KEY_FLOAT, SCH(cos_min_ratio),
	  NULL, 0, "WarmupCosineLR: final lr / optimizer lr", NULL, 0 },
	{ "scheduler.params.cycle_min_lr", "cycle-min-lr", ZN_KEY_FLOAT, SCH(cycle_min_lr), NULL,
	  0, "OneCycle: lr at the start and end of the cycle", NULL, 0 },
	{ "scheduler.params.cycle_max_lr", "cycle-max-lr", ZN_KEY_FLOAT, SCH(cycle_max_lr), NULL,
	  0, "OneCycle: lr at the peak", NULL, 0 },
	{ "scheduler.params.decay_lr_rate", "decay-lr-rate", ZN_KEY_FLOAT, SCH(decay_lr_rate),
	  NULL, 0, "OneCycle: lr decay rate after the cycle", NULL, 0 },
	{ "scheduler.params.cycle_first_step_size", "cycle-first-step-size", ZN_KEY_I64,
	  SCH(cycle_first_step_size), NULL, 0, "OneCycle: steps of the rising half", NULL, 0 },
	{ "scheduler.params.cycle_second_step_size", "cycle-second-step-size", ZN_KEY_I64,
	  SCH(cycle_second_step_size), NULL, 0,
	  "OneCycle: steps of the falling half (0 = first)", NULL, 0 },
	{ "scheduler.params.cycle_first_stair_count", NULL, ZN_KEY_I64,
	  SCH(cycle_first_stair_count), NULL, 0, "OneCycle: stairs of the rising half",
	  "DeepSpeed's OneCycle does not use it either", 0 },
	{ "scheduler.params.cycle_second_stair_count", NULL, ZN_KEY_I64,
	  SCH(cycle_second_stair_count), NULL, 0, "OneCycle: stairs of the falling half",
	  "DeepSpeed's OneCycle does not use it either", 0 },
	{ "scheduler.params.decay_step_size", "decay-step-size", ZN_KEY_I64, SCH(decay_step_size),
	  NULL, 0, "OneCycle: steps per decay interval after the cycle (0 = no decay)", NULL, 0 },
	{ "scheduler.params.cycle_momentum", "cycle-momentum", ZN_KEY_BOOL, SCH(cycle_momentum),
	  NULL, 0, "OneCycle: cycle beta1 against the lr (betas become (mom, 0.99))", NULL, 0 },
	{ "scheduler.params.cycle_min_mom", "cycle-min-mom", ZN_KEY_FLOAT, SCH(cycle_min_mom),
	  NULL, 0, "OneCycle: lowest beta1", NULL, 0 },
	{ "scheduler.params.cycle_max_mom", "cycle-max-mom", ZN_KEY_FLOAT, SCH(cycle_max_mom),
	  NULL, 0, "OneCycle: highest beta1", NULL, 0 },
	{ "scheduler.params.decay_mom_rate", "decay-mom-rate", ZN_KEY_FLOAT, SCH(decay_mom_rate),
	  NULL, 0, "OneCycle: beta1 decay rate after the cycle", NULL, 0 },
	{ "scheduler.params.lr_range_test_min_lr", "lr-range-test-min-lr", ZN_KEY_FLOAT,
	  SCH(lr_range_test_min_lr), NULL, 0, "LRRangeTest: starting lr", NULL, 0 },
	{ "scheduler.params.lr_range_test_step_size", "lr-range-test-step-size", ZN_KEY_I64,
	  SCH(lr_range_test_step_size), NULL, 0, "LRRangeTest: steps per interval", NULL, 0 },
	{ "scheduler.params.lr_range_test_step_rate", "lr-range-test-step-rate", ZN_KEY_FLOAT,
	  SCH(lr_range_test_step_rate), NULL, 0, "LRRangeTest: lr increase per interval", NULL, 0 },
	{ "scheduler.params.lr_range_test_staircase", "lr-range-test-staircase", ZN_KEY_BOOL,
	  SCH(lr_range_test_staircase), NULL, 0, "LRRangeTest: whole intervals only", NULL, 0 },
	{ "bf16.enabled", "bf16", ZN_KEY_BOOL, OFF(precision.bf16), NULL, 0,
	  "bf16 parameters and gradients, fp32 master", NULL, 0 },
	{ "fp16.enabled", "fp16", ZN_KEY_BOOL, OFF(precision.fp16), NULL, 0,
	  "fp16 parameters (fp32 master) with loss scaling", NULL, 0 },
	{ "fp16.loss_scale", "loss-scale", ZN_KEY_FLOAT, OFF(precision.loss_scale), NULL, 0,
	  "static loss scale (0 = dynamic)", NULL, 0 },
	{ "fp16.initial_scale_power", "initial-scale-power", ZN_KEY_INT,
	  OFF(precision.initial_scale_power), NULL, 0, "dynamic scale starts at 2^N", NULL, 0 },
	{ "fp16.loss_scale_window", "loss-scale-window", ZN_KEY_INT,
	  OFF(precision.loss_scale_window), NULL, 0, "steps without overflow before raising",
	  NULL, 0 },
	{ "fp16.hysteresis", "hysteresis", ZN_KEY_INT, OFF(precision.hysteresis), NULL, 0,
	  "overflows tolerated before lowering", NULL, 0 },
	{ "fp16.consecutive_hysteresis", NULL, ZN_KEY_BOOL, OFF(precision.consecutive_hysteresis),
	  NULL, 0, "refill hysteresis after a good step", NULL, 0 },
	{ "fp16.min_loss_scale", "min-loss-scale", ZN_KEY_FLOAT, OFF(precision.min_loss_scale),
	  NULL, 0, "lowest dynamic loss scale", NULL, 0 },
	{ "zero_optimization.stage", "zero-stage", ZN_KEY_INT, OFF(zero.stage), NULL, 0,
	  "ZeRO stage 0-3", NULL, 0 },
	{ "zero_optimization.contiguous_gradients", "contiguous-gradients", ZN_KEY_BOOL,
	  OFF(zero.contiguous_gradients), NULL, 0, "gradients in one flat buffer per layer",
	  "each layer's gradient is always one flat buffer", 0 },
	{ "zero_optimization.overlap_comm", "overlap-comm", ZN_KEY_BOOL, OFF(zero.overlap_comm),
	  NULL, 0, "reduce gradients on the comm stream during backward", NULL, 0 },
	{ "zero_optimization.reduce_bucket_size", "reduce-bucket-size", ZN_KEY_U64,
	  OFF(zero.reduce_bucket_size), NULL, 0, "elements per gradient reduction bucket",
	  "gradients are reduced one layer at a time", 0 },
	{ "zero_optimization.stage3_prefetch_bucket_size", "prefetch-bucket-size", ZN_KEY_U64,
	  OFF(zero.stage3_prefetch_bucket_size), NULL, 0, "elements prefetched ahead (stage 3)", NULL, 0 },
	{ "zero_optimization.stage3_max_live_parameters", "max-live-parameters", ZN_KEY_U64,
	  OFF(zero.stage3_max_live_parameters), NULL, 0,
	  "full parameters on the device at once", NULL, 0 },
	{ "zero_optimization.stage3_param_persistence_threshold", "param-persistence-threshold",
	  ZN_KEY_U64, OFF(zero.stage3_param_persistence_threshold), NULL, 0,
	  "layers smaller than this stay gathered",
	  "every layer is gathered when used and released after; results are the same", 0 },
	{ "zero_optimization.sub_group_size", "sub-group-size", ZN_KEY_U64,
	  OFF(zero.sub_group_size), NULL, 0, "elements per optimizer sub-group",
	  "the optimizer steps one layer shard at a time", 0 },
	{ "zero_optimization.offload_optimizer.device", "offload-optimizer", ZN_KEY_ENUM,
	  OPT(device), offload_names, 0, "home of optimizer state: none, cpu or nvme", NULL, 0 },
	{ "zero_optimization.offload_optimizer.nvme_path", "nvme-path", ZN_KEY_PATHS,
	  OPT(nvme_path_count), NULL, ZN_MIRROR_PARAM,
	  "nvme directory; repeat to stripe over several devices", NULL, 0 },
	{ "zero_optimization.offload_optimizer.pin_memory", "pin-memory", ZN_KEY_BOOL,
	  OPT(pin_memory), NULL, ZN_MIRROR_PARAM, "page-locked host buffers",
	  "staging buffers always come from the pinned arena (--pinned-mem)", 0 },
	{ "zero_optimization.offload_optimizer.buffer_count", "optimizer-buffer-count", ZN_KEY_INT,
	  OPT(buffer_count), NULL, 0, "optimizer swap buffers (nvme)", NULL, 0 },
	{ "zero_optimization.offload_optimizer.pipeline_read", "pipeline-read", ZN_KEY_BOOL,
	  OPT(pipeline_read), NULL, 0, "read optimizer state ahead", NULL, 0 },
	{ "zero_optimization.offload_optimizer.pipeline_write", "pipeline-write", ZN_KEY_BOOL,
	  OPT(pipeline_write), NULL, 0, "write optimizer state behind", NULL, 0 },
	{ "zero_optimization.offload_param.device", "offload-param", ZN_KEY_ENUM, PRM(device),
	  offload_names, 0, "home of bf16 parameter shards (stage 3): none, cpu or nvme", NULL, 0 },
	{ "zero_optimization.offload_param.nvme_path", NULL, ZN_KEY_PATHS, PRM(nvme_path_count),
	  NULL, 0, "nvme directory for parameters", NULL, 0 },
	{ "zero_optimization.offload_param.pin_memory", NULL, ZN_KEY_BOOL, PRM(pin_memory), NULL,
	  0, "page-locked parameter buffers",
	  "staging buffers always come from the pinned arena (--pinned-mem)", 0 },
	{ "zero_optimization.offload_param.buffer_count", "param-buffer-count", ZN_KEY_INT,
	  PRM(buffer_count), NULL, 0, "parameter swap buffers (nvme)", no_param_swap, 0 },
	{ "zero_optimization.offload_param.buffer_size", "param-buffer-size", ZN_KEY_U64,
	  PRM(buffer_size), NULL, 0, "elements per parameter swap buffer", no_param_swap, 0 },
	{ "zero_optimization.offload_param.max_in_cpu", "max-in-cpu", ZN_KEY_U64,
	  PRM(max_in_cpu), NULL, 0, "parameter elements kept in host memory (nvme)",
	  no_param_swap, 0 },
	{ "aio.block_size", "aio-block-size", ZN_KEY_SIZE, OFF(aio.block_size_bytes), NULL, 0,
	  "bytes per I/O request (multiple of 4096)", NULL, 0 },
	{ "aio.queue_depth", "aio-queue-depth", ZN_KEY_INT, OFF(aio.queue_depth), NULL, 0,
	  "requests in flight per ring", NULL, 0 },
	{ "aio.intra_op_parallelism", "aio-threads", ZN_KEY_INT, OFF(aio.intra_op_parallelism),
	  NULL, 0, "io_uring rings (worker threads)", NULL, 0 },
	{ "aio.thread_count", NULL, ZN_KEY_INT, OFF(aio.intra_op_parallelism), NULL, 0,
	  "old name of intra_op_parallelism", NULL, 0 },
	{ "aio.single_submit", "aio-single-submit", ZN_KEY_BOOL, OFF(aio.single_submit), NULL, 0,
	  "submit requests one at a time", NULL, 0 },
	{ "aio.overlap_events", "aio-overlap-events", ZN_KEY_BOOL, OFF(aio.overlap_events), NULL,
	  0, "overlap submission and completion", NULL, 0 },
	{ "aio.bandwidth_cap", "nvme-bw-cap", ZN_KEY_SIZE, OFF(aio.bandwidth_cap_bytes_per_s),
	  NULL, 0, "zinc: cap nvme bytes/s per direction (0 = none)", NULL, 0 },
	{ "csv_monitor.enabled", "csv-monitor", ZN_KEY_BOOL, OFF(monitor.csv_enabled), NULL, 0,
	  "write per-step figures as CSV (one file per figure)", NULL, 0 },
	{ "csv_monitor.output_path", "csv-output-path", ZN_KEY_STRING,
	  OFF(monitor.csv_output_path), NULL, 0, "CSV directory (default ./csv_monitor)", NULL,
	  ZN_PATH_MAX },
	{ "csv_monitor.job_name", "csv-job-name", ZN_KEY_STRING, OFF(monitor.csv_job_name), NULL,
	  0, "CSV subdirectory (default DeepSpeedJobName)", NULL, 256 },
	{ "activation_checkpointing.partition_activations", "partition-activations", ZN_KEY_BOOL,
	  ACK(partition_activations), NULL, 0, "split checkpoints over model-parallel ranks",
	  "a model-parallel feature: with zinc's pure data parallelism every rank's "
	  "activations are its own; see activation_checkpointing.cpu_checkpointing", 0 },
	{ "activation_checkpointing.cpu_checkpointing", "cpu-checkpointing", ZN_KEY_BOOL,
	  ACK(cpu_checkpointing), NULL, 0,
	  "checkpoints in pinned host memory (turns checkpointing on)", NULL, 0 },
	{ "activation_checkpointing.contiguous_memory_optimization", NULL, ZN_KEY_BOOL,
	  ACK(contiguous_memory_optimization), NULL, 0, "checkpoints in one buffer",
	  "zinc's plan sizes and lays out the checkpoint buffers itself", 0 },
	{ "activation_checkpointing.number_checkpoints", NULL, ZN_KEY_I64,
	  ACK(number_checkpoints), NULL, 0, "checkpoint count for the contiguous buffer",
	  "zinc's plan sizes the checkpoint buffers from the layers and --checkpoint-every", 0 },
	{ "activation_checkpointing.synchronize_checkpoint_boundary", NULL, ZN_KEY_BOOL,
	  ACK(synchronize_checkpoint_boundary), NULL, 0, "synchronize at each checkpoint",
	  "a timing aid; zinc's step line has the forward/backward split", 0 },
	{ "activation_checkpointing.profile", NULL, ZN_KEY_BOOL, ACK(profile), NULL, 0,
	  "time the checkpoint functions", "a timing aid; use --trace", 0 },
	{ "activation_checkpointing.device", "checkpoint-device", ZN_KEY_ENUM, ACK(home.device),
	  ckpt_home_names, 0, "zinc: where checkpoints live: device, cpu or nvme (cpu and nvme "
	  "turn checkpointing on)", NULL, 0 },
	{ "activation_checkpointing.nvme_path", "checkpoint-nvme-path", ZN_KEY_PATHS,
	  ACK(home.nvme_path_count), NULL, 0,
	  "zinc: nvme directory for checkpoints (default: the offload nvme_path)", NULL, 0 },
	{ "zinc.gradient_checkpointing", "gradient-checkpointing", ZN_KEY_BOOL, ACK(enabled),
	  NULL, 0, "keep only each layer's input in forward; recompute in backward", NULL, 0 },
	{ "zinc.checkpoint_every", "checkpoint-every", ZN_KEY_INT, ACK(every), NULL, 0,
	  "checkpoint every K-th layer's input (backward recomputes runs of K layers)", NULL, 0 },
	{ "zinc.device", "device", ZN_KEY_ENUM, OFF(runtime.device), device_names, 0,
	  "compute device: auto, host (emulated) or cuda", NULL, 0 },
	{ "zinc.device_mem", "device-mem", ZN_KEY_SIZE, OFF(runtime.device_mem_bytes), NULL, 0,
	  "device memory budget (default: all of the GPU; 1G for host)", NULL, 0 },
	{ "zinc.pinned_mem", "pinned-mem", ZN_KEY_SIZE, OFF(runtime.pinned_mem_bytes), NULL, 0,
	  "pinned host memory budget (default: a fraction of RAM)", NULL, 0 },
	{ "zinc.numa_node", "numa-node", ZN_KEY_INT, OFF(runtime.numa_node), NULL, 0,
	  "NUMA node for host memory (-1 = nearest the GPU or this thread)", NULL, 0 },
	{ "zinc.seed", "seed", ZN_KEY_U64, OFF(runtime.seed), NULL, 0, "seed for init and data", NULL, 0 },
	{ "zinc.deterministic", "deterministic", ZN_KEY_BOOL, OFF(runtime.deterministic), NULL, 0,
	  "bit-identical results run to run: pins NCCL_ALGO=Ring (zinc's kernels are "
	  "deterministic always)", NULL, 0 },
	{ "zinc.prefetch_depth", "prefetch-depth", ZN_KEY_INT, OFF(runtime.prefetch_depth), NULL,
	  0, "layers fetched ahead (0 = from the stage3 limits and the budget)", NULL, 0 },
	{ "zinc.frozen_read_buffers", "frozen-read-buffers", ZN_KEY_INT,
	  OFF(runtime.frozen_read_buffers), NULL, 0,
	  "a frozen base on nvme (LoRA): pinned layer buffers its reads run ahead into (0 = "
	  "working slots + 4, fewer when the pinned budget is short)", NULL, 0 },
	{ "zinc.quantize_base", "quantize-base", ZN_KEY_ENUM, OFF(runtime.quantize_base),
	  quantize_names, 0,
	  "QLoRA: the frozen base's linear weights in 4 bits, none or nf4 (bitsandbytes' NF4, "
	  "blocks of 64; LoRA only)", NULL, 0 },
	{ "zinc.double_quant", "double-quant", ZN_KEY_BOOL, OFF(runtime.double_quant), NULL, 0,
	  "with quantize_base nf4: bitsandbytes' nested quantization of the block scales", NULL,
	  0 },
	{ "zinc.hot_layers", "hot-layers", ZN_KEY_INT, OFF(runtime.hot_layers), NULL, 0,
	  "parameters on nvme: layers after layer 0 whose shard stays pinned, fetched without "
	  "a read (-1 = prefetch depth + 1 within the pinned budget, 0 = none)", NULL, 0 },
	{ "zinc.comm_timeout", "comm-timeout", ZN_KEY_FLOAT, OFF(runtime.comm_timeout_s), NULL, 0,
	  "seconds a collective waits for the other ranks before the job stops, naming the "
	  "ranks that did not arrive (default 600)", NULL, 0 },
	{ "zinc.run_id", "run-id", ZN_KEY_NAME, OFF(runtime.run_id), NULL, 0,
	  "names the swap directories: runs sharing an nvme path need different ids "
	  "(default p<pid>)", NULL, 0 },
	{ "zinc.data_format", "data-format", ZN_KEY_ENUM, OFF(runtime.data_format),
	  data_format_names, 0, "--data as: auto (token file or UTF-8 text), text or tokens",
	  NULL, 0 },
	{ "zinc.compute_dtype", "compute-dtype", ZN_KEY_ENUM, OFF(runtime.compute_dtype),
	  compute_dtype_names, 0,
	  "GEMM inputs: auto (bf16 with bf16 parameters), fp32 (exact fp32 path) or bf16 "
	  "(fp32 accumulation)", NULL, 0 },
	{ "zinc.optimizer_states", "optimizer-states", ZN_KEY_ENUM, OFF(optimizer.states),
	  states_names, 0,
	  "AdamW's m and v: fp32, bf16 (2 bytes each) or int8 (bitsandbytes' blockwise 8-bit "
	  "state: 1 byte each + an fp32 scale per 256); the fp32 master stays (docs/cpu.md)",
	  NULL, 0 },
	{ "zinc.packing", "packing", ZN_KEY_ENUM, OFF(runtime.packing), packing_names, 0,
	  "sequences from --data: windows (consecutive windows across documents) or "
	  "documents (whole documents packed, attention and positions per document; "
	  "docs/packing.md)", NULL, 0 },
	{ "zinc.schedule", "schedule", ZN_KEY_ENUM, OFF(runtime.schedule), schedule_names, 0,
	  "gradient accumulation order: auto (layer-major where it moves fewer bytes and "
	  "fits), layer-major (each layer for every micro-batch: parameters read once per "
	  "direction, bit-identical) or micro-batch", NULL, 0 },
};
const size_t zn_config_key_count = sizeof(zn_config_keys) / sizeof(zn_config_keys[0]);

/* A refused row refuses values not in ok ("a|b|c", the JSON text of the value; NULL:
 * none); an object is refused when it holds "enabled": true anywhere, or always when ok
 * is "!". A path that names a block covers every key inside it. */
#define NOEFFECT(path, why) { path, false, NULL, why }
#define REFUSE(path, ok, why) { path, true, ok, why }

const struct zn_doc_key zn_config_doc_keys[] = {
	/* logging, monitoring, profiling: cannot change the training */
	NOEFFECT("wall_clock_breakdown", "zinc's step line always has the time split"),
	NOEFFECT("memory_breakdown", "logging only"),
	NOEFFECT("dump_state", "logging only"),
	NOEFFECT("flops_profiler", "profiling only"),
	NOEFFECT("tensorboard", "monitor not implemented in zinc; use csv_monitor"),
	NOEFFECT("wandb", "monitor not implemented in zinc; use csv_monitor"),
	NOEFFECT("comet", "monitor not implemented in zinc; use csv_monitor"),
	NOEFFECT("comms_logger", "logging only"),
	NOEFFECT("timers", "logging only"),
	NOEFFECT("autotuning", "zinc plans its buffers from the budgets itself"),
	NOEFFECT("checkpoint", "DeepSpeed checkpoint layout; zinc train --save-dir/--resume "
		 "(docs/checkpoint.md)"),
	NOEFFECT("nebula", "DeepSpeed checkpoint service"),
	NOEFFECT("zero_allow_untested_optimizer", "zinc's optimizers are its own"),
	NOEFFECT("zero_force_ds_cpu_optimizer", "zinc's CPU optimizer is its own"),
	NOEFFECT("gradient_predivide_factor", "changes rounding only; zinc averages in fp32"),
	NOEFFECT("prescale_gradients", "changes rounding only; zinc averages in fp32"),
	NOEFFECT("sparse_gradients", "embedding gradients are reduced densely; same result"),
	NOEFFECT("disable_allgather", "communication detail"),
	NOEFFECT("pipeline", "zinc has no pipeline parallelism; applies to PipelineModule"),
	NOEFFECT("eigenvalue", "used by curriculum and layer drop, which zinc refuses"),
	NOEFFECT("hybrid_engine", "RLHF generation engine"),
	NOEFFECT("compile", "torch.compile of the model"),
	NOEFFECT("graph_harvesting", "CUDA graphs of the model"),
	NOEFFECT("steps_per_print_log", "logging only"),
	NOEFFECT("fp16.auto_cast", "zinc computes in fp32 from fp16 parameters"),
	NOEFFECT("bf16.immediate_grad_update", "zinc accumulates gradients in fp32"),
	NOEFFECT("bf16.check_grad_overflow", "bf16 does not overflow as fp16 does"),
	NOEFFECT("optimizer.params.torch_adam", "implementation choice; same update"),
	NOEFFECT("optimizer.params.fused", "implementation choice; same update"),
	NOEFFECT("optimizer.params.set_grad_none", "implementation detail"),
	NOEFFECT("scheduler.params.last_batch_iteration",
		 "zinc starts every run at iteration -1, as a fresh DeepSpeed run does"),
	/* ZeRO performance hints */
	NOEFFECT("zero_optimization.allgather_partitions", "communication detail"),
	NOEFFECT("zero_optimization.allgather_bucket_size", "zinc gathers one layer at a time"),
	NOEFFECT("zero_optimization.reduce_scatter", "communication detail"),
	NOEFFECT("zero_optimization.round_robin_gradients", "performance hint"),
	NOEFFECT("zero_optimization.load_from_fp32_weights", "checkpoint loading detail"),
	NOEFFECT("zero_optimization.elastic_checkpoint", "checkpoint layout"),
	NOEFFECT("zero_optimization.ignore_unused_parameters", "every zinc parameter is used"),
	NOEFFECT("zero_optimization.legacy_stage1", "implementation choice"),
	NOEFFECT("zero_optimization.grad_hooks", "implementation choice"),
	NOEFFECT("zero_optimization.stage3_max_reuse_distance", "performance hint"),
	NOEFFECT("zero_optimization.stage3_gather_16bit_weights_on_model_save",
		 "zinc saves the gathered weights always"),
	NOEFFECT("zero_optimization.stage3_gather_fp16_weights_on_model_save",
		 "zinc saves the gathered weights always"),
	NOEFFECT("zero_optimization.stage3_module_granularity_threshold", "performance hint"),
	NOEFFECT("zero_optimization.memory_efficient_linear", "memory detail"),
	NOEFFECT("zero_optimization.use_all_reduce_for_fetch_params", "communication detail"),
	NOEFFECT("zero_optimization.zero_hpz_partition_size",
		 "hierarchical partitioning changes communication, not results"),
	NOEFFECT("zero_optimization.mics_shard_size", "sharding layout; same results"),
	NOEFFECT("zero_optimization.mics_hierarchical_params_gather", "communication detail"),
	NOEFFECT("zero_optimization.log_trace_cache_warnings", "logging only"),
	NOEFFECT("zero_optimization.offload_optimizer.fast_init", "initialisation detail"),
	NOEFFECT("zero_optimization.offload_optimizer.ratio",
		 "partial offload changes where AdamW runs, not the update"),
	/* would change the training if ignored: refused */
	REFUSE("amp", NULL, "Apex AMP is not in zinc: use \"bf16\": {\"enabled\": true}"),
	REFUSE("zero_optimization.zero_quantized_weights", "false|null",
	       "quantized weight communication (ZeRO++) changes the results; zinc does not have "
	       "it: set it to false"),
	REFUSE("zero_optimization.zero_quantized_nontrainable_weights", "false|null",
	       "quantized weights (ZeRO++) are not in zinc: set it to false"),
	REFUSE("zero_optimization.zero_quantized_gradients", "false|null",
	       "quantized gradient communication (ZeRO++) changes the results; zinc does not "
	       "have it: set it to false"),
	REFUSE("zero_optimization.cpu_offload", "false|null",
	       "old name: use \"offload_optimizer\": {\"device\": \"cpu\"}"),
	REFUSE("zero_optimization.cpu_offload_params", "false|null",
	       "old name: use \"offload_param\": {\"device\": \"cpu\"}"),
	REFUSE("zero_optimization.cpu_offload_use_pin_memory", "false|true|null",
	       "old name: use offload_optimizer.pin_memory"),
	REFUSE("optimizer.params.amsgrad", "false|null", "AMSGrad is not in zinc: set it false"),
	REFUSE("optimizer.params.bias_correction", "true|null",
	       "zinc's Adam always corrects the bias: remove it or set it true"),
	REFUSE("communication_data_type", "null|\"fp32\"",
	       "zinc reduces gradients in fp32: remove it or set it to \"fp32\""),
	REFUSE("data_types", NULL, "zinc accumulates gradients in fp32: remove the block"),
	REFUSE("sequence_parallel_size", "1|null", "zinc has no sequence parallelism"),
	REFUSE("tensor_parallel", NULL, "zinc has no tensor parallelism: remove the block"),
	REFUSE("compression_training", NULL, "compression changes the model; not in zinc"),
	REFUSE("quantize_training", NULL, "quantized training is not in zinc"),
	REFUSE("sparse_attention", "!", "sparse attention changes the model; not in zinc"),
	REFUSE("progressive_layer_drop", NULL, "layer drop changes the training; not in zinc"),
	REFUSE("curriculum_learning", NULL, "curriculum learning changes the data; not in zinc"),
	REFUSE("data_efficiency", NULL, "data sampling and routing are not in zinc"),
	REFUSE("elasticity", NULL, "elastic batch sizes are not in zinc: give the batch sizes"),
	REFUSE("weight_quantization", NULL, "weight quantization is not in zinc"),
	{ NULL, false, NULL, NULL },
};

const struct zn_doc_key *zn_config_doc_key(const char *path)
{
	const struct zn_doc_key *best = NULL;
	size_t best_n = 0;

	for (const struct zn_doc_key *d = zn_config_doc_keys; d->path; d++) {
		size_t n = strlen(d->path);

		if (!strcmp(d->path, path))
			return d;
		if (!strncmp(d->path, path, n) && path[n] == '.' && n > best_n) {
			best = d;
			best_n = n;
		}
	}
	return best;
}

const struct zn_key *zn_config_key_by_path(const char *path)
{
	for (size_t i = 0; i < zn_config_key_count; i++)
		if (!strcmp(zn_config_keys[i].path, path))
			return &zn_config_keys[i];
	return NULL;
}

const struct zn_key *zn_config_key_by_flag(const char *flag)
{
	for (size_t i = 0; i < zn_config_key_count; i++)
		if (zn_config_keys[i].flag && !strcmp(zn_config_keys[i].flag, flag))
			return &zn_config_keys[i];
	return NULL;
}
