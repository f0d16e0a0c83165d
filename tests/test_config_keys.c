/* Config keys as DeepSpeed documents them: "auto" with Hugging Face's meaning and its
 * origin, every documented key classified, refusals, the strict JSON reader, and the
 * integer ranges. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config_keys.h"
#include "zinc.h"

static int load(struct zn_config *cfg, const char *json)
{
	zn_config_defaults(cfg);
	return zn_config_load_json_string(cfg, json, "t.json");
}

static int flags(struct zn_config *cfg, int argc, const char **argv)
{
	char *rest[32];
	int n;

	return zn_config_apply_flags(cfg, argc, (char **)argv, rest, &n);
}

static char *stderr_text(void)
{
	static char buf[65536];
	FILE *f = cr_get_redirected_stderr();
	size_t n;

	fflush(stderr);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	return buf;
}

static unsigned origin(const struct zn_config *cfg, const char *path)
{
	const struct zn_key *k = zn_config_key_by_path(path);

	cr_assert_not_null(k, "%s is not in the table", path);
	return cfg->origin[k - zn_config_keys];
}

/* Hugging Face's ZeRO-3 template (transformers docs), every "auto" it has. */
static const char hf_zero3[] =
	"{\"fp16\": {\"enabled\": \"auto\", \"loss_scale\": 0, \"loss_scale_window\": 1000,"
	"  \"initial_scale_power\": 16, \"hysteresis\": 2, \"min_loss_scale\": 1},"
	" \"bf16\": {\"enabled\": \"auto\"},"
	" \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\","
	"  \"eps\": \"auto\", \"weight_decay\": \"auto\"}},"
	" \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": \"auto\","
	"  \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\"}},"
	" \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\","
	"  \"pin_memory\": true}, \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true},"
	"  \"overlap_comm\": true, \"contiguous_gradients\": true, \"sub_group_size\": 1e9,"
	"  \"reduce_bucket_size\": \"auto\", \"stage3_prefetch_bucket_size\": \"auto\","
	"  \"stage3_param_persistence_threshold\": \"auto\", \"stage3_max_live_parameters\": 1e9,"
	"  \"stage3_max_reuse_distance\": 1e9,"
	"  \"stage3_gather_16bit_weights_on_model_save\": true},"
	" \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\","
	" \"steps_per_print\": 2000, \"train_batch_size\": \"auto\","
	" \"train_micro_batch_size_per_gpu\": \"auto\", \"wall_clock_breakdown\": false}";

Test(config_keys, auto_resolves_to_default_and_derived, .init = cr_redirect_stderr)
{
	struct zn_config cfg, def;
	struct zn_config_derive d = { .hidden = 768, .steps = 50 };

	zn_config_defaults(&def);
	cr_assert_eq(load(&cfg, hf_zero3), 0, "%s", stderr_text());
	zn_config_resolve_auto(&cfg, &d);
	cr_assert_eq(zn_config_validate(&cfg, 1), 0, "%s", stderr_text());
	/* derived, as Hugging Face fills them from hidden_size */
	cr_assert_eq(cfg.zero.reduce_bucket_size, 768u * 768u);
	cr_assert_eq(cfg.zero.stage3_prefetch_bucket_size, 530841u); /* int(0.9 x 768^2) */
	cr_assert_eq(cfg.zero.stage3_param_persistence_threshold, 7680u);
	cr_assert_float_eq(cfg.scheduler.warmup_max_lr, cfg.optimizer.lr, 0);
	/* defaults */
	cr_assert(!cfg.precision.fp16 && !cfg.precision.bf16);
	cr_assert_float_eq(cfg.optimizer.lr, def.optimizer.lr, 0);
	cr_assert_float_eq(cfg.optimizer.beta2, def.optimizer.beta2, 0);
	cr_assert_float_eq(cfg.gradient_clipping, def.gradient_clipping, 0);
	cr_assert_eq(cfg.scheduler.warmup_num_steps, def.scheduler.warmup_num_steps);
	cr_assert_eq(cfg.train_micro_batch_size_per_gpu, 1);
	static const char *const autos[] = {
		"fp16.enabled", "bf16.enabled", "optimizer.params.lr", "optimizer.params.betas",
		"optimizer.params.eps", "optimizer.params.weight_decay",
		"scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr",
		"scheduler.params.warmup_num_steps", "zero_optimization.reduce_bucket_size",
		"zero_optimization.stage3_prefetch_bucket_size",
		"zero_optimization.stage3_param_persistence_threshold", "gradient_clipping",
		"train_batch_size", "gradient_accumulation_steps",
	};
	for (size_t i = 0; i < sizeof(autos) / sizeof(autos[0]); i++)
		cr_assert_eq(origin(&cfg, autos[i]), ZN_ORIGIN_AUTO, "%s", autos[i]);
	cr_assert_eq(origin(&cfg, "zero_optimization.stage"), ZN_ORIGIN_CONFIG);
	cr_assert_eq(origin(&cfg, "aio.queue_depth"), ZN_ORIGIN_DEFAULT);
	cr_assert_null(strstr(stderr_text(), "unknown key"));
}

Test(config_keys, auto_takes_the_flag, .init = cr_redirect_stderr)
{
	struct zn_config cfg;
	const char *argv[] = { "--lr", "0.5", "--bf16", "--grad-clip", "2", "--micro-batch", "3",
			       "--reduce-bucket-size", "1000", "--total-steps", "77" };
	struct zn_config_derive d = { .hidden = 64, .steps = 9 };

	cr_assert_eq(load(&cfg, "{\"optimizer\": {\"params\": {\"lr\": \"auto\"}},"
				" \"bf16\": {\"enabled\": \"auto\"}, \"gradient_clipping\": \"auto\","
				" \"train_micro_batch_size_per_gpu\": \"auto\","
				" \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {"
				"  \"warmup_max_lr\": \"auto\", \"total_num_steps\": \"auto\"}},"
				" \"zero_optimization\": {\"reduce_bucket_size\": \"auto\"}}"), 0);
	cr_assert_eq(flags(&cfg, sizeof(argv) / sizeof(argv[0]), argv), 0);
	zn_config_resolve_auto(&cfg, &d);
	cr_assert_float_eq(cfg.optimizer.lr, 0.5f, 0);
	cr_assert_float_eq(cfg.scheduler.warmup_max_lr, 0.5f, 0, "warmup_max_lr follows lr");
	cr_assert(cfg.precision.bf16);
	cr_assert_float_eq(cfg.gradient_clipping, 2.0f, 0);
	cr_assert_eq(cfg.train_micro_batch_size_per_gpu, 3);
	cr_assert_eq(cfg.zero.reduce_bucket_size, 1000u, "the flag wins over the derived value");
	cr_assert_eq(cfg.scheduler.total_num_steps, 77);
	cr_assert_eq(origin(&cfg, "optimizer.params.lr"), ZN_ORIGIN_FLAG);
	cr_assert_eq(origin(&cfg, "bf16.enabled"), ZN_ORIGIN_FLAG);
	cr_assert_eq(origin(&cfg, "scheduler.params.warmup_max_lr"), ZN_ORIGIN_AUTO);
	/* without the flag, total_num_steps comes from the run's steps */
	cr_assert_eq(load(&cfg, "{\"scheduler\": {\"params\": {\"total_num_steps\": \"auto\"}}}"),
		     0);
	zn_config_resolve_auto(&cfg, &d);
	cr_assert_eq(cfg.scheduler.total_num_steps, 9);
}

Test(config_keys, print_origins_names_each)
{
	struct zn_config cfg;
	const char *argv[] = { "--zero-stage", "2" };
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cr_assert_eq(load(&cfg, "{\"gradient_clipping\": 1.5, \"optimizer\": {\"params\": "
				"{\"eps\": \"auto\"}}}"), 0);
	cr_assert_eq(flags(&cfg, 2, argv), 0);
	zn_config_print_origins(f, &cfg);
	fclose(f);
	cr_assert(strstr(text, "zero_optimization.stage") &&
		  strstr(strstr(text, "zero_optimization.stage"), "2"));
	cr_assert_not_null(strstr(text, "gradient_clipping"));
	/* each line: key value origin */
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strncmp(line, "zero_optimization.stage ", 24))
			cr_assert_not_null(strstr(line, " flag"), "%s", line);
		if (!strncmp(line, "gradient_clipping ", 18))
			cr_assert_not_null(strstr(line, " config"), "%s", line);
		if (!strncmp(line, "optimizer.params.eps ", 21))
			cr_assert_not_null(strstr(line, " auto"), "%s", line);
		if (!strncmp(line, "aio.queue_depth ", 16))
			cr_assert_not_null(strstr(line, " default"), "%s", line);
	}
	free(text);
}

/* The keys of DeepSpeed's config-json documentation (deepspeed.ai/docs/config-json),
 * with the ZeRO, offload, aio, fp16/bf16, scheduler and monitor keys. */
static const char *const documented[] = {
	"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
	"optimizer.type", "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps",
	"optimizer.params.weight_decay", "optimizer.params.adam_w_mode",
	"optimizer.params.torch_adam", "optimizer.params.amsgrad",
	"optimizer.params.bias_correction", "scheduler.type", "scheduler.params.warmup_min_lr",
	"scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
	"scheduler.params.warmup_type", "scheduler.params.total_num_steps",
	"scheduler.params.warmup_min_ratio", "scheduler.params.cos_min_ratio",
	"scheduler.params.last_batch_iteration", "scheduler.params.cycle_min_lr",
	"scheduler.params.cycle_max_lr", "scheduler.params.decay_lr_rate",
	"scheduler.params.cycle_first_step_size", "scheduler.params.cycle_second_step_size",
	"scheduler.params.cycle_first_stair_count", "scheduler.params.cycle_second_stair_count",
	"scheduler.params.decay_step_size", "scheduler.params.cycle_momentum",
	"scheduler.params.cycle_min_mom", "scheduler.params.cycle_max_mom",
	"scheduler.params.decay_mom_rate", "scheduler.params.lr_range_test_min_lr",
	"scheduler.params.lr_range_test_step_size", "scheduler.params.lr_range_test_step_rate",
	"scheduler.params.lr_range_test_staircase", "communication_data_type",
	"prescale_gradients", "gradient_predivide_factor", "sparse_gradients", "fp16.enabled",
	"fp16.auto_cast", "fp16.loss_scale", "fp16.initial_scale_power", "fp16.loss_scale_window",
	"fp16.hysteresis", "fp16.consecutive_hysteresis", "fp16.min_loss_scale", "bf16.enabled",
	"bf16.immediate_grad_update", "amp.enabled", "amp.opt_level", "gradient_clipping",
	"zero_optimization.stage", "zero_optimization.allgather_partitions",
	"zero_optimization.allgather_bucket_size", "zero_optimization.overlap_comm",
	"zero_optimization.reduce_scatter", "zero_optimization.reduce_bucket_size",
	"zero_optimization.contiguous_gradients", "zero_optimization.load_from_fp32_weights",
	"zero_optimization.grad_hooks", "zero_optimization.round_robin_gradients",
	"zero_optimization.offload_param.device", "zero_optimization.offload_param.nvme_path",
	"zero_optimization.offload_param.pin_memory", "zero_optimization.offload_param.buffer_count",
	"zero_optimization.offload_param.buffer_size", "zero_optimization.offload_param.max_in_cpu",
	"zero_optimization.offload_optimizer.device",
	"zero_optimization.offload_optimizer.nvme_path",
	"zero_optimization.offload_optimizer.pin_memory",
	"zero_optimization.offload_optimizer.ratio",
	"zero_optimization.offload_optimizer.buffer_count",
	"zero_optimization.offload_optimizer.fast_init",
	"zero_optimization.offload_optimizer.pipeline_read",
	"zero_optimization.offload_optimizer.pipeline_write",
	"zero_optimization.stage3_max_live_parameters", "zero_optimization.stage3_max_reuse_distance",
	"zero_optimization.stage3_prefetch_bucket_size",
	"zero_optimization.stage3_param_persistence_threshold", "zero_optimization.sub_group_size",
	"zero_optimization.elastic_checkpoint",
	"zero_optimization.stage3_gather_16bit_weights_on_model_save",
	"zero_optimization.stage3_gather_fp16_weights_on_model_save",
	"zero_optimization.ignore_unused_parameters", "zero_optimization.zero_hpz_partition_size",
	"zero_optimization.zero_quantized_weights", "zero_optimization.zero_quantized_gradients",
	"zero_optimization.mics_shard_size", "zero_optimization.mics_hierarchical_params_gather",
	"zero_optimization.memory_efficient_linear", "zero_optimization.cpu_offload",
	"zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "aio.block_size",
	"aio.queue_depth", "aio.thread_count", "aio.intra_op_parallelism", "aio.single_submit",
	"aio.overlap_events", "steps_per_print", "wall_clock_breakdown", "dump_state",
	"memory_breakdown", "flops_profiler.enabled", "flops_profiler.profile_step",
	"flops_profiler.module_depth", "flops_profiler.top_modules", "flops_profiler.detailed",
	"flops_profiler.output_file", "activation_checkpointing.partition_activations",
	"activation_checkpointing.cpu_checkpointing",
	"activation_checkpointing.contiguous_memory_optimization",
	"activation_checkpointing.number_checkpoints",
	"activation_checkpointing.synchronize_checkpoint_boundary",
	"activation_checkpointing.profile", "sparse_attention.mode", "sparse_attention.block",
	"tensorboard.enabled", "tensorboard.output_path", "tensorboard.job_name",
	"wandb.enabled", "wandb.group", "wandb.team", "wandb.project", "comet.enabled",
	"csv_monitor.enabled", "csv_monitor.output_path", "csv_monitor.job_name",
	"comms_logger.enabled", "comms_logger.verbose", "comms_logger.prof_all",
	"comms_logger.debug", "comms_logger.prof_ops", "elasticity.enabled",
	"elasticity.max_train_batch_size", "autotuning.enabled", "checkpoint.tag_validation",
	"checkpoint.load_universal", "checkpoint.use_node_local_storage",
	"checkpoint.parallel_write.pipeline_stage", "data_types.grad_accum_dtype",
	"progressive_layer_drop.enabled", "progressive_layer_drop.theta",
	"progressive_layer_drop.gamma", "curriculum_learning.enabled",
	"curriculum_learning.curriculum_type", "data_efficiency.enabled",
	"compression_training.weight_quantization.shared_parameters.enabled", "pipeline.stages",
	"eigenvalue.enabled", "hybrid_engine.enabled", "nebula.enabled", "timers.throughput",
};

/* "zero_optimization.grad_hooks" is in DeepSpeed's docs too: classify it with the hints. */
Test(config_keys, every_documented_key_is_classified)
{
	for (size_t i = 0; i < sizeof(documented) / sizeof(documented[0]); i++) {
		const char *p = documented[i];

		cr_assert(zn_config_key_by_path(p) || zn_config_doc_key(p),
			  "documented DeepSpeed key %s is unknown to zinc", p);
	}
}

/* Each documented key with a harmless value loads without an "unknown" warning. */
Test(config_keys, documented_keys_load_without_unknown, .init = cr_redirect_stderr)
{
	static const char *const json[] = {
		"{\"zero_optimization\": {\"stage3_max_reuse_distance\": 1e9,"
		" \"allgather_bucket_size\": 5e8, \"round_robin_gradients\": true,"
		" \"zero_quantized_weights\": false, \"zero_hpz_partition_size\": 1,"
		" \"mics_shard_size\": -1, \"grad_hooks\": true}}",
		"{\"activation_checkpointing\": {\"partition_activations\": true},"
		" \"flops_profiler\": {\"enabled\": true}, \"tensorboard\": {\"enabled\": true,"
		" \"output_path\": \"x\"}, \"wandb\": {\"enabled\": false},"
		" \"comms_logger\": {\"enabled\": true}, \"amp\": {\"enabled\": false},"
		" \"communication_data_type\": null, \"prescale_gradients\": false,"
		" \"elasticity\": {\"enabled\": false}, \"checkpoint\": {\"tag_validation\": \"Warn\"}}",
	};
	struct zn_config cfg;

	for (size_t i = 0; i < 2; i++)
		cr_assert_eq(load(&cfg, json[i]), 0);
	cr_assert_null(strstr(stderr_text(), "unknown"));
}

Test(config_keys, misspellings_are_unknown_with_the_right_key, .init = cr_redirect_stderr)
{
	struct zn_config cfg;
	char *err;

	cr_assert_eq(load(&cfg, "{\"zero_optimization\": {\"stage3_max_reuse_distanse\": 1,"
				" \"round_robin_gradient\": true}, \"wall_clock_breakdwn\": true}"), 0);
	err = stderr_text();
	cr_assert_not_null(strstr(err, "unknown key 'zero_optimization.stage3_max_reuse_distanse'"
				       " is ignored: did you mean 'stage3_max_reuse_distance'"), "%s",
			   err);
	cr_assert_not_null(strstr(err, "did you mean 'round_robin_gradients'"), "%s", err);
	cr_assert_not_null(strstr(err, "did you mean 'wall_clock_breakdown'"), "%s", err);
}

Test(config_keys, refused_keys, .init = cr_redirect_stderr)
{
	static const char *const bad[] = {
		"{\"zero_optimization\": {\"zero_quantized_weights\": true}}",
		"{\"zero_optimization\": {\"zero_quantized_gradients\": true}}",
		"{\"amp\": {\"enabled\": true, \"opt_level\": \"O1\"}}",
		"{\"optimizer\": {\"params\": {\"amsgrad\": true}}}",
		"{\"communication_data_type\": \"fp16\"}",
		"{\"sparse_attention\": {\"mode\": \"fixed\"}}",
		"{\"compression_training\": {\"weight_quantization\": {\"shared_parameters\": "
		"{\"enabled\": true}}}}",
		"{\"curriculum_learning\": {\"enabled\": true}}",
		"{\"zero_optimization\": {\"cpu_offload\": true}}",
		"{\"optimizer\": {\"type\": \"Lamb\"}}",
	};
	struct zn_config cfg;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(load(&cfg, bad[i]), ZN_EUSAGE, "%s was accepted", bad[i]);
	cr_assert_not_null(strstr(stderr_text(), "'zero_optimization.zero_quantized_weights' is "
					  "not supported"));
}

Test(config_keys, validation_refusals, .init = cr_redirect_stderr)
{
	struct zn_config cfg;
	const char *mem0[] = { "--device-mem", "0" }, *pin0[] = { "--pinned-mem=0" };
	const char *huge[] = { "--micro-batch", "4294967297" };
	const char *over[] = { "--micro-batch", "65536", "--grad-accum", "65536" };
	char *err;

	cr_assert_eq(load(&cfg, "{\"fp16\": {\"enabled\": true}}"), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), 0, "fp16 trains (issue 15 item 4)");
	cr_assert_eq(load(&cfg, "{\"fp16\": {\"enabled\": true, \"hysteresis\": 0}}"), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"optimizer\": {\"type\": \"Adam\", \"params\": "
				"{\"adam_w_mode\": false}}}"), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), 0, "L2 Adam (adam_w_mode false) is accepted");
	cr_assert(cfg.optimizer.type == ZN_OPTIM_ADAM && !cfg.optimizer.adam_w_mode);
	cr_assert_eq(load(&cfg, "{\"optimizer\": {\"type\": \"Adam\"}}"), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), 0, "Adam with adam_w_mode (default) is AdamW");
	cr_assert_eq(load(&cfg, "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": "
				"{\"device\": \"cpu\"}}}"), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), ZN_EUSAGE);
	zn_config_defaults(&cfg);
	cr_assert_eq(flags(&cfg, 2, mem0), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), ZN_EUSAGE);
	zn_config_defaults(&cfg);
	cr_assert_eq(flags(&cfg, 1, pin0), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"zinc\": {\"device_mem\": 0}}"), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), ZN_EUSAGE);
	zn_config_defaults(&cfg);
	cr_assert_eq(flags(&cfg, 2, huge), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"gradient_accumulation_steps\": 4294967298}"), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), ZN_EUSAGE);
	zn_config_defaults(&cfg);
	cr_assert_eq(flags(&cfg, 4, over), 0);
	cr_assert_eq(zn_config_validate(&cfg, 1), ZN_EUSAGE);
	err = stderr_text();
	cr_assert_not_null(strstr(err, "fp16: loss_scale must be >= 0"), "%s", err);
	cr_assert_not_null(strstr(err, "--device-mem) is 0"), "%s", err);
	cr_assert_not_null(strstr(err, "--pinned-mem) is 0"), "%s", err);
	cr_assert_not_null(strstr(err, "(--micro-batch) is 4294967297"), "%s", err);
	cr_assert_not_null(strstr(err, "(--grad-accum) is 4294967298"), "%s", err);
	cr_assert_not_null(strstr(err, "(--micro-batch) 65536 x gradient_accumulation_steps "
				       "(--grad-accum) 65536"), "%s", err);
	/* the default (no flag) is fine */
	zn_config_defaults(&cfg);
	cr_assert_eq(zn_config_validate(&cfg, 1), 0);
}

Test(config_keys, strict_json, .init = cr_redirect_stderr)
{
	struct zn_config cfg;
	char path[] = "/tmp/zn-cfgk-XXXXXX";
	int fd = mkstemp(path);
	static const char nul_doc[] = "{\"steps_per_print\": 3}\0{\"x\": 1}";
	char *err;

	cr_assert_eq(load(&cfg, "{\"steps_per_print\": 3} trailing"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"steps_per_print\": 3}}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"steps_per_print\": 03}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"gradient_clipping\": -01.5}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"steps_per_print\\u0000junk\": 3}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"steps_per_print\": 3}\n  \n"), 0, "white space may follow");
	cr_assert_eq(load(&cfg, "{\"gradient_clipping\": 0.5, \"a\": \"01\", \"b\": [0, 10]}"), 0,
		     "zeros that are not leading, and digits in strings, are fine");
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, nul_doc, sizeof(nul_doc) - 1), (ssize_t)(sizeof(nul_doc) - 1));
	close(fd);
	zn_config_defaults(&cfg);
	cr_assert_eq(zn_config_load_json(&cfg, path), ZN_EUSAGE);
	unlink(path);
	err = stderr_text();
	cr_assert_not_null(strstr(err, "leading zero"), "%s", err);
	cr_assert_not_null(strstr(err, "NUL"), "%s", err);
}

/* A key given twice takes its last value as Python's json.load in the Hugging Face
 * Trainer does: a repeated object replaces the first whole (its eps is gone), never merges
 * into it; integers are read as written, exact past 2^53. */
Test(config_keys, repeated_key_takes_the_last_value, .init = cr_redirect_stderr)
{
	struct zn_config cfg;
	char *err;

	cr_assert_eq(load(&cfg, "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.1, "
			  "\"eps\": 1e-3}},\n \"steps_per_print\": 3,\n \"optimizer\": {\"type\": "
			  "\"AdamW\", \"params\": {\"lr\": 0.2}}, \"steps_per_print\": 5}"), 0);
	cr_assert_float_eq(cfg.optimizer.lr, 0.2f, 0);
	cr_assert_float_eq(cfg.optimizer.eps, 1e-8f, 0, "eps %g came from the replaced object",
			   (double)cfg.optimizer.eps);
	cr_assert_eq(cfg.steps_per_print, 5);
	cr_assert_eq(load(&cfg, "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
			  "{\"warmup_num_steps\": 9007199254740993}}}"), 0);
	cr_assert_eq(cfg.scheduler.warmup_num_steps, 9007199254740993ll);
	err = stderr_text();
	cr_assert_not_null(strstr(err, "t.json:3:2: key \"optimizer\" repeats in one object "
				       "(so do other keys): the last value is used"), "%s", err);
}

/* A float key's value must be one a float holds: 1e300 would be inf after the cast (which
 * C leaves undefined), 1e-50 would be 0. Refused at load, naming the key (exit 2). */
Test(config_keys, floats_beyond_a_float_are_refused, .init = cr_redirect_stderr)
{
	struct zn_config cfg;
	const char *lr[] = { "--lr", "1e300" }, *betas[] = { "--betas", "0.9,1e39" };
	char *err;

	cr_assert_eq(load(&cfg, "{\"optimizer\": {\"params\": {\"lr\": 1e300}}}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"optimizer\": {\"params\": {\"eps\": 1e-50}}}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"gradient_clipping\": -3.5e38}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"optimizer\": {\"params\": {\"betas\": [0.9, 1e300]}}}"),
		     ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"gradient_clipping\": 1e400}"), ZN_EUSAGE);
	zn_config_defaults(&cfg);
	cr_assert_eq(flags(&cfg, 2, lr), ZN_EUSAGE);
	cr_assert_eq(flags(&cfg, 2, betas), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"gradient_clipping\": 3.4e38, \"optimizer\": {\"params\": "
			  "{\"eps\": 1.2e-38, \"weight_decay\": 0}}}"), 0, "the float's own range");
	cr_assert_float_eq(cfg.gradient_clipping, 3.4e38f, 1e31);
	cr_assert_eq(zn_config_validate(&cfg, 1), 0);
	err = stderr_text();
	cr_assert_not_null(strstr(err, "t.json: optimizer.params.lr: '1e300' is not valid: "
				       "give a number a 32-bit float holds"), "%s", err);
	cr_assert_not_null(strstr(err, "optimizer.params.eps: '1e-50'"), "%s",
			   err);
	cr_assert_not_null(strstr(err, "gradient_clipping: '-3.5e38'"), "%s", err);
	cr_assert_not_null(strstr(err, "optimizer.params.betas"), "%s", err);
	cr_assert_not_null(strstr(err, "gradient_clipping: '1e400'"), "%s", err);
	cr_assert_not_null(strstr(err, "--lr: '1e300' is not valid"), "%s", err);
	cr_assert_not_null(strstr(err, "--betas: '0.9,1e39' is not valid"), "%s", err);
}

Test(config_keys, help_lists_every_key)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	zn_config_print_flags_help(f);
	fclose(f);
	for (size_t i = 0; i < zn_config_key_count; i++)
		cr_assert_not_null(strstr(text, zn_config_keys[i].path), "%s",
				   zn_config_keys[i].path);
	for (const struct zn_doc_key *d = zn_config_doc_keys; d->path; d++)
		cr_assert_not_null(strstr(text, d->path), "%s", d->path);
	cr_assert_not_null(strstr(text, "stage3_max_reuse_distance"));
	free(text);
}
