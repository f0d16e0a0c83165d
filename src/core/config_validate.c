/* Config rules that span several keys: batch sizes, stage vs offload, nvme paths, O_DIRECT
 * alignment, optimizer and schedule ranges. Each error names the key and what to change.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config_keys.h"
#include "core/log.h"
#include "zinc.h"

#define ZN_DIRECT_ALIGN 4096

/* DeepSpeed's rule: train = micro x accumulation x ranks; any one or two may be given and
 * the rest are derived. */
static int validate_batch(struct zn_config *cfg, int world)
{
	int64_t *tb = &cfg->train_batch_size, *mb = &cfg->train_micro_batch_size_per_gpu;
	int64_t *ga = &cfg->gradient_accumulation_steps;

	if (*tb < 0 || *mb < 0 || *ga < 0) {
		zn_error("batch sizes must be positive: train_batch_size=%lld "
			 "train_micro_batch_size_per_gpu=%lld gradient_accumulation_steps=%lld",
			 (long long)*tb, (long long)*mb, (long long)*ga);
		return ZN_EUSAGE;
	}
	/* The engine holds them as int; their product (tokens per rank per step / T) too. */
	if (*tb > INT_MAX || *mb > INT_MAX || *ga > INT_MAX) {
		zn_error("%s is %lld: batch sizes must be at most %d",
			 *tb > INT_MAX ? "train_batch_size (--train-batch-size)" :
			 *mb > INT_MAX ? "train_micro_batch_size_per_gpu (--micro-batch)" :
					 "gradient_accumulation_steps (--grad-accum)",
			 (long long)(*tb > INT_MAX ? *tb : *mb > INT_MAX ? *mb : *ga), INT_MAX);
		return ZN_EUSAGE;
	}
	if (*mb && *ga && (double)*mb * (double)*ga * world > INT_MAX) {
		zn_error("train_micro_batch_size_per_gpu (--micro-batch) %lld x "
			 "gradient_accumulation_steps (--grad-accum) %lld x %d ranks = %.0f is over "
			 "%d: lower one of them", (long long)*mb, (long long)*ga, world,
			 (double)*mb * (double)*ga * world, INT_MAX);
		return ZN_EUSAGE;
	}
	if (*tb && *mb && *ga) {
		if (*tb != *mb * *ga * world) {
			zn_error("train_batch_size %lld != train_micro_batch_size_per_gpu %lld x "
				 "gradient_accumulation_steps %lld x %d ranks = %lld: change one "
				 "of them (or give only two and zinc derives the third)",
				 (long long)*tb, (long long)*mb, (long long)*ga, world,
				 (long long)(*mb * *ga * world));
			return ZN_EUSAGE;
		}
	} else if (*tb && *mb) {
		if (*tb % (*mb * world)) {
			zn_error("train_batch_size %lld is not a multiple of "
				 "train_micro_batch_size_per_gpu %lld x %d ranks: change either",
				 (long long)*tb, (long long)*mb, world);
			return ZN_EUSAGE;
		}
		*ga = *tb / (*mb * world);
	} else if (*tb && *ga) {
		if (*tb % (*ga * world)) {
			zn_error("train_batch_size %lld is not a multiple of "
				 "gradient_accumulation_steps %lld x %d ranks: change either",
				 (long long)*tb, (long long)*ga, world);
			return ZN_EUSAGE;
		}
		*mb = *tb / (*ga * world);
	} else if (*tb) {
		if (*tb % world) {
			zn_error("train_batch_size %lld is not a multiple of the %d ranks",
				 (long long)*tb, world);
			return ZN_EUSAGE;
		}
		*ga = 1;
		*mb = *tb / world;
	} else {
		if (!*mb)
			*mb = 1;
		if (!*ga)
			*ga = 1;
		*tb = *mb * *ga * world;
	}
	return 0;
}

static int validate_path(const char *key, const char *path)
{
	struct stat st;

	if (stat(path, &st)) {
		zn_error("%s: '%s' does not exist (%s): create the directory or give another "
			 "--nvme-path", key, path, strerror(errno));
		return ZN_EUSAGE;
	}
	if (!S_ISDIR(st.st_mode)) {
		zn_error("%s: '%s' is not a directory: give a directory on the nvme device", key,
			 path);
		return ZN_EUSAGE;
	}
	if (access(path, W_OK | X_OK)) {
		zn_error("%s: '%s' is not writable (%s): fix its permissions or give another "
			 "--nvme-path", key, path, strerror(errno));
		return ZN_EUSAGE;
	}
	return 0;
}

/* Path i is not the same directory as an earlier one (spelled alike or not). */
static int distinct_paths(const char *key, const struct zn_offload_config *o, int i)
{
	struct stat a, b;

	if (stat(o->nvme_path[i], &a))
		return 0; /* validate_path reported it */
	for (int j = 0; j < i; j++) {
		if (stat(o->nvme_path[j], &b) || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
			continue;
		zn_error("%s: paths %d ('%s') and %d ('%s') are the same directory: give each "
			 "directory once (stripe over different devices)", key, j + 1,
			 o->nvme_path[j], i + 1, o->nvme_path[i]);
		return ZN_EUSAGE;
	}
	return 0;
}

static int validate_offload(const struct zn_offload_config *o, const char *name, int stage,
			    int min_stage)
{
	char key[96];
	int rc = 0;

	if (o->device == ZN_OFFLOAD_NONE)
		return 0;
	if (stage < min_stage) {
		zn_error("zero_optimization.%s needs zero_optimization.stage >= %d (stage is %d): "
			 "raise the stage (--zero-stage %d) or set %s.device to none", name,
			 min_stage, stage, min_stage == 3 ? 3 : 1, name);
		return ZN_EUSAGE;
	}
	if (o->buffer_count < 1) {
		zn_error("zero_optimization.%s.buffer_count must be at least 1 (is %d)", name,
			 o->buffer_count);
		return ZN_EUSAGE;
	}
	if (o->device != ZN_OFFLOAD_NVME)
		return 0;
	snprintf(key, sizeof(key), "zero_optimization.%s.nvme_path", name);
	if (o->nvme_path_count == 0) {
		zn_error("%s.device is nvme but %s is not set: give --nvme-path DIR", name, key);
		return ZN_EUSAGE;
	}
	for (int i = 0; i < o->nvme_path_count && !rc; i++)
		rc = validate_path(key, o->nvme_path[i]);
	for (int i = 0; i < o->nvme_path_count && !rc; i++)
		rc = distinct_paths(key, o, i);
	return rc;
}

static int validate_aio(const struct zn_aio_config *a)
{
	if (a->block_size_bytes == 0 || a->block_size_bytes % ZN_DIRECT_ALIGN) {
		zn_error("aio.block_size %llu must be a positive multiple of %d bytes (O_DIRECT): "
			 "e.g. 1M", (unsigned long long)a->block_size_bytes, ZN_DIRECT_ALIGN);
		return ZN_EUSAGE;
	}
	if (a->queue_depth < 1 || a->queue_depth > 4096) {
		zn_error("aio.queue_depth %d must be between 1 and 4096", a->queue_depth);
		return ZN_EUSAGE;
	}
	if (a->intra_op_parallelism < 1 || a->intra_op_parallelism > 64) {
		zn_error("aio.intra_op_parallelism %d must be between 1 and 64",
			 a->intra_op_parallelism);
		return ZN_EUSAGE;
	}
	return 0;
}

static int validate_optimizer(const struct zn_config *cfg)
{
	const struct zn_optimizer_config *o = &cfg->optimizer;

	if (!(o->lr >= 0)) {
		zn_error("optimizer.params.lr must be >= 0 (is %g)", o->lr);
		return ZN_EUSAGE;
	}
	if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1)) {
		zn_error("optimizer.params.betas must be in [0, 1) (are %g, %g)", o->beta1,
			 o->beta2);
		return ZN_EUSAGE;
	}
	if (!(o->eps > 0) || !(o->weight_decay >= 0)) {
		zn_error("optimizer.params: eps must be > 0 and weight_decay >= 0 (are %g, %g)",
			 o->eps, o->weight_decay);
		return ZN_EUSAGE;
	}
	if (!(cfg->gradient_clipping >= 0)) {
		zn_error("gradient_clipping must be >= 0 (0 = off), is %g", cfg->gradient_clipping);
		return ZN_EUSAGE;
	}
	if (cfg->scheduler.type != ZN_LR_CONSTANT && cfg->scheduler.warmup_num_steps < 0) {
		zn_error("scheduler.params.warmup_num_steps must be >= 0");
		return ZN_EUSAGE;
	}
	if ((cfg->scheduler.type == ZN_LR_WARMUP_DECAY ||
	     cfg->scheduler.type == ZN_LR_WARMUP_COSINE) &&
	    cfg->scheduler.total_num_steps <= cfg->scheduler.warmup_num_steps) {
		zn_error("scheduler.params.total_num_steps (%lld) must be greater than "
			 "warmup_num_steps (%lld) for %s",
			 (long long)cfg->scheduler.total_num_steps,
			 (long long)cfg->scheduler.warmup_num_steps,
			 cfg->scheduler.type == ZN_LR_WARMUP_DECAY ? "WarmupDecayLR" :
								     "WarmupCosineLR");
		return ZN_EUSAGE;
	}
	return 0;
}

static bool given(const struct zn_config *cfg, const char *path)
{
	const struct zn_key *k = zn_config_key_by_path(path);

	return k && cfg->origin[k - zn_config_keys] != ZN_ORIGIN_DEFAULT &&
	       cfg->origin[k - zn_config_keys] != ZN_ORIGIN_AUTO;
}

/* What the engine cannot do yet: refused here, so --print-config refuses it as a run does. */
static int validate_supported(const struct zn_config *cfg)
{
	if (cfg->precision.fp16) {
		const struct zn_precision_config *p = &cfg->precision;

		if (!(p->loss_scale >= 0) || !isfinite(p->loss_scale) ||
		    p->initial_scale_power < 0 || p->initial_scale_power > 64 ||
		    p->loss_scale_window < 1 || p->hysteresis < 1 || !(p->min_loss_scale > 0) ||
		    !isfinite(p->min_loss_scale)) {
			zn_error("fp16: loss_scale must be >= 0 (0 = dynamic), initial_scale_power "
				 "0 .. 64, loss_scale_window >= 1, hysteresis >= 1, min_loss_scale "
				 "> 0 (got %g, %d, %d, %d, %g)", (double)p->loss_scale,
				 p->initial_scale_power, p->loss_scale_window, p->hysteresis,
				 (double)p->min_loss_scale);
			return ZN_EUSAGE;
		}
	}
	if (cfg->zero.offload_param.device != ZN_OFFLOAD_NONE &&
	    cfg->zero.offload_optimizer.device == ZN_OFFLOAD_NONE) {
		zn_error("zero_optimization.offload_param needs offload_optimizer cpu or nvme too "
			 "(AdamW writes the offloaded parameter shard): add --offload-optimizer cpu");
		return ZN_EUSAGE;
	}
	if (given(cfg, "zinc.device_mem") && cfg->runtime.device_mem_bytes == 0) {
		zn_error("zinc.device_mem (--device-mem) is 0: give a budget such as 8G, or leave "
			 "it out for the default (all of the GPU; 1G for host)");
		return ZN_EUSAGE;
	}
	if (given(cfg, "zinc.pinned_mem") && cfg->runtime.pinned_mem_bytes == 0) {
		zn_error("zinc.pinned_mem (--pinned-mem) is 0: give a budget such as 4G, or leave "
			 "it out for the default (a fraction of RAM)");
		return ZN_EUSAGE;
	}
	if (!(cfg->runtime.comm_timeout_s > 0) || !isfinite(cfg->runtime.comm_timeout_s)) {
		zn_error("zinc.comm_timeout (--comm-timeout) is %g: give the seconds a collective "
			 "may wait for the other ranks, > 0 (default 600)",
			 (double)cfg->runtime.comm_timeout_s);
		return ZN_EUSAGE;
	}
	if (cfg->monitor.csv_enabled && !cfg->monitor.csv_job_name[0]) {
		zn_error("csv_monitor.job_name is empty: give a name (the CSV subdirectory)");
		return ZN_EUSAGE;
	}
	return 0;
}

/* Activation checkpointing (docs/activations.md): a home off the device, cpu_checkpointing
 * or --checkpoint-every turn it on; nvme without its own path uses the offload path. */
static int validate_act_ckpt(struct zn_config *cfg)
{
	struct zn_act_ckpt_config *a = &cfg->act_ckpt;
	const struct zn_offload_config *from = NULL;
	int rc = 0;

	if (a->every < 1) {
		zn_error("zinc.checkpoint_every (--checkpoint-every) must be >= 1 (is %d): 1 keeps "
			 "every layer's input", a->every);
		return ZN_EUSAGE;
	}
	if (a->cpu_checkpointing && a->home.device == ZN_OFFLOAD_NONE) {
		if (given(cfg, "activation_checkpointing.device")) {
			zn_error("activation_checkpointing: cpu_checkpointing is true but device is "
				 "\"device\": set device to cpu (or nvme), or cpu_checkpointing "
				 "to false");
			return ZN_EUSAGE;
		}
		a->home.device = ZN_OFFLOAD_CPU;
	}
	if (a->home.device != ZN_OFFLOAD_NONE || a->cpu_checkpointing ||
	    given(cfg, "zinc.checkpoint_every"))
		a->enabled = true;
	if (a->home.device != ZN_OFFLOAD_NVME)
		return 0;
	if (a->home.nvme_path_count == 0) {
		if (cfg->zero.offload_optimizer.nvme_path_count > 0)
			from = &cfg->zero.offload_optimizer;
		else if (cfg->zero.offload_param.nvme_path_count > 0)
			from = &cfg->zero.offload_param;
		if (!from) {
			zn_error("activation_checkpointing.device is nvme but no nvme path is set: "
				 "give --checkpoint-nvme-path DIR (or --nvme-path DIR)");
			return ZN_EUSAGE;
		}
		a->home.nvme_path_count = from->nvme_path_count;
		memcpy(a->home.nvme_path, from->nvme_path, sizeof(a->home.nvme_path));
	}
	for (int i = 0; i < a->home.nvme_path_count && !rc; i++)
		rc = validate_path("activation_checkpointing.nvme_path", a->home.nvme_path[i]);
	for (int i = 0; i < a->home.nvme_path_count && !rc; i++)
		rc = distinct_paths("activation_checkpointing.nvme_path", &a->home, i);
	return rc;
}

static int validate_schedule(const struct zn_scheduler_config *s)
{
	if (s->type == ZN_LR_ONE_CYCLE) {
		if (s->cycle_first_step_size < 1 || s->cycle_second_step_size < 0 ||
		    s->decay_step_size < 0) {
			zn_error("OneCycle: cycle_first_step_size must be >= 1 and "
				 "cycle_second_step_size, decay_step_size >= 0");
			return ZN_EUSAGE;
		}
		if (!(s->cycle_min_lr >= 0 && s->cycle_max_lr >= 0 && s->cycle_min_mom >= 0 &&
		      s->cycle_max_mom < 1 && s->cycle_min_mom < 1)) {
			zn_error("OneCycle: cycle_min_lr and cycle_max_lr must be >= 0 and the "
				 "momenta in [0, 1)");
			return ZN_EUSAGE;
		}
	}
	if (s->type == ZN_LR_RANGE_TEST && s->lr_range_test_step_size < 1) {
		zn_error("LRRangeTest: lr_range_test_step_size must be >= 1 (is %lld)",
			 (long long)s->lr_range_test_step_size);
		return ZN_EUSAGE;
	}
	return 0;
}

int zn_config_validate(struct zn_config *cfg, int world_size)
{
	int rc;

	if (world_size < 1)
		world_size = 1;
	if (cfg->zero.stage < 0 || cfg->zero.stage > 3) {
		zn_error("zero_optimization.stage must be 0, 1, 2 or 3 (is %d)", cfg->zero.stage);
		return ZN_EUSAGE;
	}
	if (cfg->precision.bf16 && cfg->precision.fp16) {
		zn_error("bf16.enabled and fp16.enabled are both true: enable one of them");
		return ZN_EUSAGE;
	}
	if (cfg->runtime.compute_dtype == ZN_COMPUTE_BF16 && !cfg->precision.bf16) {
		zn_error("zinc.compute_dtype (--compute-dtype) bf16 needs bf16 parameters: add "
			 "--dtype bf16 (bf16.enabled), or use --compute-dtype fp32");
		return ZN_EUSAGE;
	}
	if (cfg->steps_per_print < 1) {
		zn_error("steps_per_print must be at least 1 (is %d)", cfg->steps_per_print);
		return ZN_EUSAGE;
	}
	if (cfg->runtime.prefetch_depth < 0) {
		zn_error("zinc.prefetch_depth must be >= 0 (0 = automatic)");
		return ZN_EUSAGE;
	}
	if (cfg->runtime.double_quant && cfg->runtime.quantize_base == ZN_QUANTIZE_NONE) {
		zn_error("zinc.double_quant (--double-quant) quantizes the 4-bit base's scales: "
			 "add --quantize-base nf4 (zinc.quantize_base), or drop it");
		return ZN_EUSAGE;
	}
	if (cfg->runtime.frozen_read_buffers < 0) {
		zn_error("zinc.frozen_read_buffers (--frozen-read-buffers) must be >= 0 (0 = "
			 "automatic), is %d", cfg->runtime.frozen_read_buffers);
		return ZN_EUSAGE;
	}
	if (cfg->runtime.hot_layers < -1) {
		zn_error("zinc.hot_layers (--hot-layers) is %d: use -1 (automatic), 0 (none) or a "
			 "layer count", cfg->runtime.hot_layers);
		return ZN_EUSAGE;
	}
	rc = validate_batch(cfg, world_size);
	if (!rc)
		rc = validate_offload(&cfg->zero.offload_optimizer, "offload_optimizer",
				      cfg->zero.stage, 1);
	if (!rc)
		rc = validate_offload(&cfg->zero.offload_param, "offload_param", cfg->zero.stage, 3);
	if (!rc)
		rc = validate_aio(&cfg->aio);
	if (!rc)
		rc = validate_optimizer(cfg);
	if (!rc)
		rc = validate_schedule(&cfg->scheduler);
	if (!rc)
		rc = validate_supported(cfg);
	if (!rc)
		rc = validate_act_ckpt(cfg);
	return rc;
}
