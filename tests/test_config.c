/* Config: every accepted key from JSON and flags, precedence, and each validation error. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config_keys.h"
#include "zinc.h"

static char tmpdir[64];

static void make_tmpdir(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/zn-cfg-XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void rm_tmpdir(void)
{
	rmdir(tmpdir);
}

static int load(struct zn_config *cfg, const char *json)
{
	zn_config_defaults(cfg);
	return zn_config_load_json_string(cfg, json, "test.json");
}

static int flags(struct zn_config *cfg, int argc, const char **argv)
{
	char *rest[32];
	int n;

	return zn_config_apply_flags(cfg, argc, (char **)argv, rest, &n);
}

static char *stderr_text(void)
{
	static char buf[8192];
	FILE *f = cr_get_redirected_stderr();
	size_t n;

	fflush(stderr);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	return buf;
}

Test(config, defaults_validate)
{
	struct zn_config cfg;

	zn_config_defaults(&cfg);
	cr_assert_eq(zn_config_validate(&cfg, 4), 0);
	cr_assert_eq(cfg.train_micro_batch_size_per_gpu, 1);
	cr_assert_eq(cfg.gradient_accumulation_steps, 1);
	cr_assert_eq(cfg.train_batch_size, 4);
	cr_assert_eq(cfg.aio.block_size_bytes, 1u << 20);
}

Test(config, deepspeed_sample)
{
	struct zn_config cfg;
	const char *json =
		"{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4,"
		" \"gradient_clipping\": 1.0, \"steps_per_print\": 5,"
		" \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4,"
		"   \"betas\": [0.8, 0.95], \"eps\": 1e-6, \"weight_decay\": 0.1}},"
		" \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": 10,"
		"   \"total_num_steps\": 100, \"cos_min_ratio\": 0.1, \"warmup_min_ratio\": 0.01}},"
		" \"bf16\": {\"enabled\": true},"
		" \"zero_optimization\": {\"stage\": 3, \"contiguous_gradients\": false,"
		"   \"overlap_comm\": false, \"reduce_bucket_size\": 5e8,"
		"   \"stage3_prefetch_bucket_size\": \"50M\", \"stage3_max_live_parameters\": 1e9,"
		"   \"stage3_param_persistence_threshold\": 1e5, \"sub_group_size\": 1e9,"
		"   \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false,"
		"     \"buffer_count\": 8, \"pipeline_read\": false, \"pipeline_write\": false},"
		"   \"offload_param\": {\"device\": \"cpu\", \"buffer_count\": 6,"
		"     \"buffer_size\": 1e8, \"max_in_cpu\": 1e9}},"
		" \"aio\": {\"block_size\": 262144, \"queue_depth\": 8, \"thread_count\": 2,"
		"   \"single_submit\": true, \"overlap_events\": false}}";

	cr_assert_eq(load(&cfg, json), 0);
	cr_assert_eq(zn_config_validate(&cfg, 2), 0);
	cr_assert_eq(cfg.gradient_accumulation_steps, 4);
	cr_assert_float_eq(cfg.gradient_clipping, 1.0f, 1e-7);
	cr_assert_eq(cfg.steps_per_print, 5);
	cr_assert_float_eq(cfg.optimizer.lr, 3e-4f, 1e-10);
	cr_assert_float_eq(cfg.optimizer.beta1, 0.8f, 1e-7);
	cr_assert_float_eq(cfg.optimizer.beta2, 0.95f, 1e-7);
	cr_assert_float_eq(cfg.optimizer.eps, 1e-6f, 1e-12);
	cr_assert_float_eq(cfg.optimizer.weight_decay, 0.1f, 1e-7);
	cr_assert_eq(cfg.scheduler.type, ZN_LR_WARMUP_COSINE);
	cr_assert_eq(cfg.scheduler.warmup_num_steps, 10);
	cr_assert_eq(cfg.scheduler.total_num_steps, 100);
	cr_assert(cfg.precision.bf16);
	cr_assert_eq(cfg.zero.stage, 3);
	cr_assert(!cfg.zero.contiguous_gradients && !cfg.zero.overlap_comm);
	cr_assert_eq(cfg.zero.reduce_bucket_size, 500000000u);
	cr_assert_eq(cfg.zero.stage3_prefetch_bucket_size, 50000000u);
	cr_assert_eq(cfg.zero.stage3_max_live_parameters, 1000000000u);
	cr_assert_eq(cfg.zero.stage3_param_persistence_threshold, 100000u);
	cr_assert_eq(cfg.zero.offload_optimizer.device, ZN_OFFLOAD_CPU);
	cr_assert(!cfg.zero.offload_optimizer.pin_memory);
	cr_assert(cfg.zero.offload_param.pin_memory, "JSON must not mirror into offload_param");
	cr_assert_eq(cfg.zero.offload_optimizer.buffer_count, 8);
	cr_assert_eq(cfg.zero.offload_param.buffer_count, 6);
	cr_assert_eq(cfg.zero.offload_param.buffer_size, 100000000u);
	cr_assert_eq(cfg.zero.offload_param.max_in_cpu, 1000000000u);
	cr_assert_eq(cfg.aio.block_size_bytes, 262144u);
	cr_assert_eq(cfg.aio.queue_depth, 8);
	cr_assert_eq(cfg.aio.intra_op_parallelism, 2, "thread_count is the old name");
	cr_assert(cfg.aio.single_submit && !cfg.aio.overlap_events);
}

/* Every key of the table: set it from JSON with a value unlike the default, print the
 * config, and find the value again in the printed JSON. */
Test(config, every_key_round_trips)
{
	for (size_t i = 0; i < zn_config_key_count; i++) {
		const struct zn_key *k = &zn_config_keys[i];
		const char *value;
		char json[1024], expect[128], *out;
		struct zn_config cfg;
		const char *leaf = strrchr(k->path, '.') ? strrchr(k->path, '.') + 1 : k->path;
		int depth = 0;

		switch (k->type) {
		case ZN_KEY_INT: case ZN_KEY_I64: value = "7"; break;
		case ZN_KEY_U64: case ZN_KEY_SIZE: value = "12288"; break;
		case ZN_KEY_FLOAT: value = "0.25"; break;
		case ZN_KEY_BOOL: value = "false"; break;
		case ZN_KEY_ENUM: value = NULL; break;
		case ZN_KEY_PATHS: value = "\"/tmp\""; break;
		case ZN_KEY_BETAS: value = "[0.5, 0.75]"; break;
		case ZN_KEY_NAME: value = "\"run-7.a_b\""; break;
		case ZN_KEY_STRING: value = "\"run-7\""; break;
		default: value = NULL;
		}
		char enum_value[64];

		if (k->type == ZN_KEY_ENUM) {
			int last = 0;

			while (k->choices[last + 1])
				last++;
			snprintf(enum_value, sizeof(enum_value), "\"%s\"", k->choices[last]);
			value = enum_value;
		}
		/* nest the key: a.b.c -> {"a": {"b": {"c": value}}} */
		size_t used = 0;
		const char *p = k->path;

		for (const char *dot; (dot = strchr(p, '.')); p = dot + 1, depth++)
			used += (size_t)snprintf(json + used, sizeof(json) - used, "{\"%.*s\": ",
						 (int)(dot - p), p);
		used += (size_t)snprintf(json + used, sizeof(json) - used, "{\"%s\": %s}", p, value);
		for (int d = 0; d < depth; d++)
			used += (size_t)snprintf(json + used, sizeof(json) - used, "}");

		cr_assert_eq(load(&cfg, json), 0, "key %s did not load from %s", k->path, json);
		cr_assert_eq(cfg.origin[i], ZN_ORIGIN_CONFIG, "key %s: origin", k->path);
		out = zn_config_to_json(&cfg);
		cr_assert_not_null(out);
		if (!strcmp(k->path, "aio.thread_count"))
			leaf = "intra_op_parallelism";
		if (k->type == ZN_KEY_BETAS)
			snprintf(expect, sizeof(expect), "\"%s\":\t[0.5, 0.75]", leaf);
		else
			snprintf(expect, sizeof(expect), "\"%s\":\t%s", leaf, value);
		cr_assert_not_null(strstr(out, expect), "key %s: '%s' not in printed config",
				   k->path, expect);
		free(out);
	}
}

Test(config, flags_override_json)
{
	struct zn_config cfg;
	const char *argv[] = { "--zero-stage", "3", "--offload-param=nvme", "--offload-optimizer",
			       "cpu", "--no-pin-memory", "--nvme-path", "/a", "--nvme-path", "/b",
			       "--aio-block-size", "1M", "--aio-queue-depth", "32", "--lr", "0.5",
			       "--betas", "0.1,0.2", "--deterministic", "--device", "host",
			       "--device-mem", "2G", "train.txt" };
	char *rest[32];
	int n;

	cr_assert_eq(load(&cfg, "{\"zero_optimization\": {\"stage\": 1, \"offload_param\": "
				"{\"nvme_path\": [\"/x\", \"/y\", \"/z\"]}}}"), 0);
	cr_assert_eq(cfg.zero.offload_param.nvme_path_count, 3);
	cr_assert_eq(zn_config_apply_flags(&cfg, (int)(sizeof(argv) / sizeof(argv[0])), (char **)argv,
					   rest, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_str_eq(rest[0], "train.txt");
	cr_assert_eq(cfg.zero.stage, 3);
	cr_assert_eq(cfg.zero.offload_param.device, ZN_OFFLOAD_NVME);
	cr_assert_eq(cfg.zero.offload_optimizer.device, ZN_OFFLOAD_CPU);
	cr_assert(!cfg.zero.offload_optimizer.pin_memory && !cfg.zero.offload_param.pin_memory);
	cr_assert_eq(cfg.zero.offload_param.nvme_path_count, 2, "flags replace the JSON list");
	cr_assert_str_eq(cfg.zero.offload_param.nvme_path[1], "/b");
	cr_assert_eq(cfg.zero.offload_optimizer.nvme_path_count, 2);
	cr_assert_eq(cfg.aio.block_size_bytes, 1u << 20);
	cr_assert_float_eq(cfg.optimizer.lr, 0.5f, 1e-7);
	cr_assert_float_eq(cfg.optimizer.beta2, 0.2f, 1e-7);
	cr_assert(cfg.runtime.deterministic);
	cr_assert_eq(cfg.runtime.device, ZN_DEVICE_HOST);
	cr_assert_eq(cfg.runtime.device_mem_bytes, 2ull << 30);
}

Test(config, from_args_config_first)
{
	struct zn_config cfg;
	char path[] = "/tmp/zn-cfg-XXXXXX.json";
	int fd = mkstemps(path, 5);
	const char *doc = "{\"zero_optimization\": {\"stage\": 2}, \"steps_per_print\": 3}";
	/* the flag comes before --config and still wins */
	const char *argv[] = { "--zero-stage", "1", "--config", path };
	char *rest[8];
	int n;

	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, doc, strlen(doc)), (ssize_t)strlen(doc));
	close(fd);
	cr_assert_eq(zn_config_from_args(&cfg, 4, (char **)argv, rest, &n), 0);
	unlink(path);
	cr_assert_eq(cfg.zero.stage, 1);
	cr_assert_eq(cfg.steps_per_print, 3);
	cr_assert_eq(n, 0);
}

Test(config, auto_and_null_keep_defaults)
{
	struct zn_config cfg;

	cr_assert_eq(load(&cfg, "{\"train_batch_size\": \"auto\", "
				"\"train_micro_batch_size_per_gpu\": 2, "
				"\"gradient_accumulation_steps\": \"auto\", "
				"\"zero_optimization\": {\"offload_param\": {\"device\": null}}}"),
		     0);
	cr_assert_eq(zn_config_validate(&cfg, 3), 0);
	cr_assert_eq(cfg.train_batch_size, 6);
}

Test(config, unknown_key_warns_with_closest, .init = cr_redirect_stderr)
{
	struct zn_config cfg;

	cr_assert_eq(load(&cfg, "{\"zero_optimisation\": {\"stage\": 2}, "
				"\"zero_optimization\": {\"offload_optimiser\": {}}}"),
		     0);
	char *err = stderr_text();

	cr_assert_not_null(strstr(err, "unknown key 'zero_optimisation'"), "%s", err);
	cr_assert_not_null(strstr(err, "did you mean 'zero_optimization'"), "%s", err);
	cr_assert_not_null(strstr(err, "did you mean 'offload_optimizer'"), "%s", err);
	cr_assert_eq(cfg.zero.stage, 0, "a misspelt block is not applied");
}

Test(config, misplaced_aio_is_an_error, .init = cr_redirect_stderr)
{
	struct zn_config cfg;

	cr_assert_eq(load(&cfg, "{\"zero_optimization\": {\"offload_optimizer\": {\"aio\": "
				"{\"block_size\": 4096}}}}"),
		     ZN_EUSAGE);
	cr_assert_not_null(strstr(stderr_text(), "move it to the top level"));
}

Test(config, bad_json_names_the_line, .init = cr_redirect_stderr)
{
	struct zn_config cfg;

	cr_assert_eq(load(&cfg, "{\n\"a\": 1,\n\"b\": }"), ZN_EUSAGE);
	cr_assert_not_null(strstr(stderr_text(), "test.json:3:6: '}' where a value should be"));
	cr_assert_eq(load(&cfg, "[1, 2]"), ZN_EUSAGE);
}

Test(config, bad_values_are_errors, .init = cr_redirect_stderr)
{
	struct zn_config cfg;

	cr_assert_eq(load(&cfg, "{\"zero_optimization\": {\"stage\": 2.5}}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"zero_optimization\": {\"stage\": \"three\"}}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"bf16\": {\"enabled\": \"maybe\"}}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"zero_optimization\": {\"offload_param\": {\"device\": \"gpu\"}}}"),
		     ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"optimizer\": {\"type\": \"SGD\"}}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"aio\": {\"block_size\": -4096}}"), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"zero_optimization\": 3}"), ZN_EUSAGE);
	cr_assert_not_null(strstr(stderr_text(), "zero_optimization.stage"));
}

Test(config, optimizer_states_flag_and_key, .init = cr_redirect_stderr)
{
	struct zn_config cfg;
	const char *argv[] = { "--optimizer-states", "bf16" };
	const char *bad[] = { "--optimizer-states", "int4" };

	zn_config_defaults(&cfg);
	cr_assert_eq(cfg.optimizer.states, ZN_STATES_FP32, "fp32 by default");
	cr_assert_eq(load(&cfg, "{\"zinc\": {\"optimizer_states\": \"int8\"}}"), 0);
	cr_assert_eq(cfg.optimizer.states, ZN_STATES_INT8);
	cr_assert_eq(flags(&cfg, 2, argv), 0);
	cr_assert_eq(cfg.optimizer.states, ZN_STATES_BF16, "the flag overrides the JSON");
	cr_assert_eq(flags(&cfg, 2, bad), ZN_EUSAGE);
	cr_assert_eq(load(&cfg, "{\"zinc\": {\"optimizer_states\": \"8bit\"}}"), ZN_EUSAGE);
	cr_assert_not_null(strstr(stderr_text(), "zinc.optimizer_states"));
}

static int validate_json(const char *json, int world)
{
	struct zn_config cfg;

	cr_assert_eq(load(&cfg, json), 0, "%s", json);
	return zn_config_validate(&cfg, world);
}

Test(config, validation_errors, .init = cr_redirect_stderr)
{
	char json[512], file[128];
	FILE *f;

	make_tmpdir();
	cr_assert_eq(validate_json("{\"zero_optimization\": {\"stage\": 4}}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"zero_optimization\": {\"stage\": -1}}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"zero_optimization\": {\"stage\": 2, \"offload_param\": "
				   "{\"device\": \"cpu\"}}}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"zero_optimization\": {\"stage\": 0, \"offload_optimizer\": "
				   "{\"device\": \"cpu\"}}}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": "
				   "{\"device\": \"nvme\"}}}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": "
				   "{\"device\": \"nvme\", \"nvme_path\": \"/no/such/dir\"}}}", 1),
		     ZN_EUSAGE);
	snprintf(file, sizeof(file), "%s/file", tmpdir);
	f = fopen(file, "w");
	cr_assert_not_null(f);
	fclose(f);
	snprintf(json, sizeof(json), "{\"zero_optimization\": {\"stage\": 1, \"offload_optimizer\":"
		 " {\"device\": \"nvme\", \"nvme_path\": \"%s\"}}}", file);
	cr_assert_eq(validate_json(json, 1), ZN_EUSAGE, "a file is not an nvme directory");
	snprintf(json, sizeof(json), "{\"zero_optimization\": {\"stage\": 1, \"offload_optimizer\":"
		 " {\"device\": \"nvme\", \"nvme_path\": \"%s\"}}}", tmpdir);
	cr_assert_eq(validate_json(json, 1), 0);
	unlink(file);
	rm_tmpdir();
	cr_assert_eq(validate_json("{\"aio\": {\"block_size\": 1000}}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"aio\": {\"block_size\": 0}}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"aio\": {\"queue_depth\": 0}}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"aio\": {\"intra_op_parallelism\": 0}}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\":"
				   " 2, \"gradient_accumulation_steps\": 2}", 2), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\":"
				   " 3}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"train_batch_size\": 7}", 2), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"train_batch_size\": 0, \"train_micro_batch_size_per_gpu\":"
				   " -1}", 1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"bf16\": {\"enabled\": true}, \"fp16\": {\"enabled\": true}}",
				   1), ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"optimizer\": {\"params\": {\"betas\": [1.5, 0.9]}}}", 1),
		     ZN_EUSAGE);
	cr_assert_eq(validate_json("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
				   "{\"warmup_num_steps\": 10, \"total_num_steps\": 5}}}", 1),
		     ZN_EUSAGE);
	char *err = stderr_text();

	cr_assert_not_null(strstr(err, "must be 0, 1, 2 or 3"), "%s", err);
	cr_assert_not_null(strstr(err, "give --nvme-path DIR"), "%s", err);
	cr_assert_not_null(strstr(err, "multiple of 4096"), "%s", err);
	cr_assert_not_null(strstr(err, "x 2 ranks"), "%s", err);
}

Test(config, batch_derivation)
{
	struct zn_config cfg;

	cr_assert_eq(load(&cfg, "{\"train_batch_size\": 32, \"gradient_accumulation_steps\": 2}"), 0);
	cr_assert_eq(zn_config_validate(&cfg, 4), 0);
	cr_assert_eq(cfg.train_micro_batch_size_per_gpu, 4);
	cr_assert_eq(load(&cfg, "{\"train_micro_batch_size_per_gpu\": 3, "
				"\"gradient_accumulation_steps\": 5}"), 0);
	cr_assert_eq(zn_config_validate(&cfg, 2), 0);
	cr_assert_eq(cfg.train_batch_size, 30);
	cr_assert_eq(load(&cfg, "{\"train_batch_size\": 8}"), 0);
	cr_assert_eq(zn_config_validate(&cfg, 8), 0);
	cr_assert_eq(cfg.train_micro_batch_size_per_gpu, 1);
}

Test(config, flag_errors, .init = cr_redirect_stderr)
{
	struct zn_config cfg;
	const char *a1[] = { "--zero-stage" };
	const char *a2[] = { "--aio-block-size", "1Q" };
	const char *a3[] = { "--no-zero-stage" };
	const char *a4[] = { "--no-pin-memory=1" };

	zn_config_defaults(&cfg);
	cr_assert_eq(flags(&cfg, 1, a1), ZN_EUSAGE);
	cr_assert_eq(flags(&cfg, 2, a2), ZN_EUSAGE);
	cr_assert_eq(flags(&cfg, 1, a3) == 0 ? 0 : 1, 0, "not a config flag: left for the command");
	cr_assert_eq(flags(&cfg, 1, a4), ZN_EUSAGE);
	zn_config_report_unknown_flag("--zero-stag");
	cr_assert_not_null(strstr(stderr_text(), "did you mean --zero-stage"));
}

Test(config, sizes_and_counts)
{
	uint64_t v;

	cr_assert_eq(zn_parse_size("4096", &v), 0);
	cr_assert_eq(v, 4096u);
	cr_assert_eq(zn_parse_size("1M", &v), 0);
	cr_assert_eq(v, 1u << 20);
	cr_assert_eq(zn_parse_size("4k", &v), 0);
	cr_assert_eq(v, 4096u);
	cr_assert_eq(zn_parse_size("1.5G", &v), 0);
	cr_assert_eq(v, 3ull << 29);
	cr_assert_eq(zn_parse_size("2GiB", &v), 0);
	cr_assert_eq(v, 2ull << 30);
	cr_assert_eq(zn_parse_size("1T", &v), 0);
	cr_assert_eq(v, 1ull << 40);
	cr_assert_neq(zn_parse_size("1.5", &v), 0);
	cr_assert_neq(zn_parse_size("-1M", &v), 0);
	cr_assert_neq(zn_parse_size("M", &v), 0);
	cr_assert_neq(zn_parse_size("1X", &v), 0);
	cr_assert_neq(zn_parse_size("", &v), 0);
	cr_assert_eq(zn_parse_count("70B", &v), 0);
	cr_assert_eq(v, 70000000000ull);
	cr_assert_eq(zn_parse_count("5e8", &v), 0);
	cr_assert_eq(v, 500000000u);
	cr_assert_eq(zn_parse_count("1.5M", &v), 0);
	cr_assert_eq(v, 1500000u);
	cr_assert_eq(zn_parse_count("124K", &v), 0);
	cr_assert_eq(v, 124000u);
	cr_assert_neq(zn_parse_count("nan", &v), 0);
	cr_assert_neq(zn_parse_count("1e30", &v), 0);
}

Test(config, edit_distance)
{
	cr_assert_eq(zn_edit_distance("stage", "stage"), 0);
	cr_assert_eq(zn_edit_distance("stgae", "stage"), 2);
	cr_assert_eq(zn_edit_distance("zero_optimisation", "zero_optimization"), 1);
	cr_assert_eq(zn_edit_distance("", "abc"), 3);
}
