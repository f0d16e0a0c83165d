/* The zinc command's exit codes and machine-readable output. */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <unistd.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int run(const char *args, char *out, size_t size)
{
	char cmd[1024];
	FILE *p;
	size_t n = 0;
	int status;

	snprintf(cmd, sizeof(cmd), "%s %s 2>/dev/null", ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	if (out) {
		n = fread(out, 1, size - 1, p);
		out[n] = 0;
	} else {
		char sink[4096];

		while (fread(sink, 1, sizeof(sink), p) > 0)
			;
	}
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(cli, exit_codes)
{
	cr_assert_eq(run("", NULL, 0), 2);
	cr_assert_eq(run("--help", NULL, 0), 0);
	cr_assert_eq(run("frobnicate", NULL, 0), 2);
	cr_assert_eq(run("bench", NULL, 0), 2);
	cr_assert_eq(run("estimate --help", NULL, 0), 0);
	cr_assert_eq(run("estimate", NULL, 0), 2);
	cr_assert_eq(run("estimate --params 70X", NULL, 0), 2);
	cr_assert_eq(run("estimate --params 1B --layers 2", NULL, 0), 2);
	cr_assert_eq(run("estimate --params 1B --largest-layer 2B", NULL, 0), 2);
	cr_assert_eq(run("estimate --params 1B --gpus 0", NULL, 0), 2);
	cr_assert_eq(run("estimate --params 70B --largest-layer 1B --gpus 8 --nodes 8", NULL, 0), 0);
	cr_assert_eq(run("train --zero-stage 7 --print-config", NULL, 0), 2);
	cr_assert_eq(run("train --zero-stag 3", NULL, 0), 2);
	cr_assert_eq(run("train --config /no/such/file.json", NULL, 0), 2);
	cr_assert_eq(run("train --help", NULL, 0), 0);
}

Test(cli, estimate_json)
{
	static char out[65536];
	cJSON *root, *rows, *r;
	int seen = 0;

	cr_assert_eq(run("estimate --params 70B --largest-layer 1B --gpus 8 --nodes 8 --json", out,
			 sizeof(out)), 0);
	root = cJSON_Parse(out);
	cr_assert_not_null(root, "not JSON: %s", out);
	cr_assert_eq(cJSON_GetObjectItem(root, "ranks")->valueint, 64);
	rows = cJSON_GetObjectItem(root, "rows");
	cr_assert_eq(cJSON_GetArraySize(rows), 16, "stage 0, 1x3, 2x3, 3x9 offload choices");
	cJSON_ArrayForEach(r, rows) {
		int stage = cJSON_GetObjectItem(r, "stage")->valueint;
		const char *opt = cJSON_GetObjectItem(r, "offload_optimizer")->valuestring;
		const char *prm = cJSON_GetObjectItem(r, "offload_param")->valuestring;
		double dev = cJSON_GetObjectItem(r, "device_model_bytes")->valuedouble;

		if (stage == 0) {
			cr_assert_float_eq(dev, 1.12e12, 1);
			seen++;
		}
		if (stage == 3 && !strcmp(opt, "none") && !strcmp(prm, "none")) {
			cr_assert_float_eq(dev, 17.5e9, 1);
			seen++;
		}
	}
	cr_assert_eq(seen, 2);
	cJSON_Delete(root);
}

/* --optimizer-states: the bytes per parameter in the header and the table's figures */
Test(cli, estimate_optimizer_states)
{
	static char out[65536];
	cJSON *root, *r;
	double nvme = -1;

	cr_assert_eq(run("estimate --params 64B --largest-layer 1B --gpus 8 --nodes 8 "
			 "--optimizer-states int8", out, sizeof(out)), 0);
	cr_assert(strstr(out, "bf16 mixed precision, int8 optimizer states (2+2+6.03 B/param)"),
		  "%s", out);
	cr_assert_eq(run("estimate --params 64B --largest-layer 1B --gpus 8 --nodes 8 "
			 "--optimizer-states bf16 --json", out, sizeof(out)), 0);
	root = cJSON_Parse(out);
	cr_assert_not_null(root, "not JSON: %s", out);
	cr_assert_str_eq(cJSON_GetObjectItem(root, "optimizer_states")->valuestring, "bf16");
	cr_assert_float_eq(cJSON_GetObjectItem(root, "optimizer_bytes_per_param")->valuedouble,
			   8.0, 1e-9);
	cJSON_ArrayForEach(r, cJSON_GetObjectItem(root, "rows"))
		if (cJSON_GetObjectItem(r, "stage")->valueint == 3 &&
		    !strcmp(cJSON_GetObjectItem(r, "offload_optimizer")->valuestring, "nvme") &&
		    !strcmp(cJSON_GetObjectItem(r, "offload_param")->valuestring, "cpu"))
			nvme = cJSON_GetObjectItem(r, "nvme_bytes_per_rank")->valuedouble;
	cr_assert_float_eq(nvme, 8.0 * 64e9 / 64, 1, "master + bf16 m and v: 8 B/param on nvme");
	cJSON_Delete(root);
	cr_assert_eq(run("estimate --params 1B --optimizer-states int4", NULL, 0), 2);
}

Test(cli, estimate_gpt_shape)
{
	static char out[65536];
	cJSON *root;

	cr_assert_eq(run("estimate --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 "
			 "--json", out, sizeof(out)), 0);
	root = cJSON_Parse(out);
	cr_assert_not_null(root);
	cr_assert_float_eq(cJSON_GetObjectItem(root, "params")->valuedouble, 124439808.0, 0.5);
	cJSON_Delete(root);
	cr_assert_eq(run("estimate --layers 12 --hidden 768 --heads 11 --vocab 50257 --seq 1024",
			 NULL, 0), 2, "hidden not a multiple of heads");
}

Test(cli, print_config_is_json_with_flags_applied)
{
	static char out[65536];
	cJSON *root, *zero;

	cr_assert_eq(run("train --print-config --zero-stage 3 --offload-optimizer cpu "
			 "--offload-param cpu --aio-block-size 2M", out, sizeof(out)), 0);
	root = cJSON_Parse(out);
	cr_assert_not_null(root, "not JSON: %s", out);
	zero = cJSON_GetObjectItem(root, "zero_optimization");
	cr_assert_eq(cJSON_GetObjectItem(zero, "stage")->valueint, 3);
	cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(zero, "offload_param"),
					     "device")->valuestring, "cpu");
	cr_assert_float_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "aio"),
					       "block_size")->valuedouble, 2097152.0, 0.5);
	cJSON_Delete(root);
}

/* A small text file the tiny model can train on (one token per byte). */
static const char *train_text(void)
{
	static char path[] = "/tmp/zinc-cli-train-XXXXXX";
	static bool made;
	FILE *f;
	int fd;

	if (made)
		return path;
	fd = mkstemp(path);
	cr_assert(fd >= 0);
	f = fdopen(fd, "w");
	for (int i = 0; i < 200; i++)
		fprintf(f, "the quick brown fox %d jumps over the lazy dog. ", i);
	fclose(f);
	made = true;
	return path;
}

static int run_both(const char *args, char *out, size_t size)
{
	char cmd[1024];
	FILE *p;
	size_t n;
	int status;

	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(cli, train_runs_and_prints_the_step_line)
{
	char args[512], out[8192];

	snprintf(args, sizeof(args), "train --device host --model tiny --vocab 256 --seq 16 "
		 "--micro-batch 2 --steps 3 --zero-stage 3 --offload-optimizer cpu "
		 "--offload-param cpu --no-pin-memory --data %s", train_text());
	cr_assert_eq(run_both(args, out, sizeof(out)), 0, "%s", out);
	cr_assert(strstr(out, "step 3/3 | loss "), "%s", out);
	cr_assert(strstr(out, "tok/s |") && strstr(out, "(fwd ") && strstr(out, "dev peak"),
		  "%s", out);
}

Test(cli, train_refuses_what_does_not_fit)
{
	char args[512], out[8192];

	snprintf(args, sizeof(args), "train --device host --model tiny --vocab 256 --seq 16 "
		 "--steps 1 --device-mem 256K --data %s", train_text());
	cr_assert_eq(run_both(args, out, sizeof(out)), 2, "%s", out);
	cr_assert(strstr(out, "device budget 0.25 MiB is short by"), "%s", out);
	cr_assert_eq(run_both("train --model tiny --steps 1", out, sizeof(out)), 2,
		     "no --data: %s", out);
	cr_assert(strstr(out, "--data"), "%s", out);
	cr_assert_eq(run_both("train --dtype fp8 --data x", out, sizeof(out)), 2, "%s", out);
	cr_assert_eq(run_both("train --data /no/such/file --model tiny --vocab 256 --device host",
			      out, sizeof(out)), 1, "%s", out);
}

/* The demo's recipe, small: stage 3 + CPU offload on data/demo.txt; the loss goes down. */
Test(cli, train_on_demo_text_loss_decreases)
{
	char args[768], out[16384];
	float first = 0, last = 0;
	const char *p;

	snprintf(args, sizeof(args), "train --device host --model tiny --vocab 256 --seq 32 "
		 "--micro-batch 4 --steps 40 --steps-per-print 1 --lr 3e-3 --zero-stage 3 "
		 "--offload-optimizer cpu --offload-param cpu --no-pin-memory --data "
		 "%s/data/demo.txt", ZN_TEST_SRC_DIR);
	cr_assert_eq(run_both(args, out, sizeof(out)), 0, "%s", out);
	p = strstr(out, "step 1/40 | loss ");
	cr_assert(p && sscanf(p, "step 1/40 | loss %f", &first) == 1, "%s", out);
	p = strstr(out, "step 40/40 | loss ");
	cr_assert(p && sscanf(p, "step 40/40 | loss %f", &last) == 1, "%s", out);
	cr_assert(last < first - 1.0f, "loss %g -> %g", first, last);
}

Test(cli, info_reports_the_machine)
{
	static char out[16384];

	cr_assert_eq(run("info --nvme-path /tmp", out, sizeof(out)), 0);
	cr_assert_not_null(strstr(out, "cores:"), "%s", out);
	cr_assert_not_null(strstr(out, "numa nodes:"), "%s", out);
	cr_assert_not_null(strstr(out, "gpus:"), "%s", out);
	cr_assert_not_null(strstr(out, "io_uring:"), "%s", out);
	cr_assert_not_null(strstr(out, "nvme path /tmp:"), "%s", out);
	cr_assert_not_null(strstr(out, "O_DIRECT"), "%s", out);
	cr_assert_eq(run("info --frobnicate", NULL, 0), 2);
}

static long file_bytes(const char *path, char **data)
{
	FILE *f = fopen(path, "rb");
	long n;

	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	*data = malloc((size_t)n);
	cr_assert_eq(fread(*data, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return n;
}

/* --save-final then --init-from: with lr 0 the second run changes nothing, so the file it
 * saves is the same, byte for byte (names, shapes, layout, dtype round trip), also when the
 * second run is partitioned differently. */
Test(cli, save_final_and_init_from_round_trip)
{
	char dir[] = "/tmp/zn-cli-XXXXXX", a[96], b[96], args[1024], out[16384];
	char *da, *db;
	long na, nb;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(a, sizeof(a), "%s/a.safetensors", dir);
	snprintf(b, sizeof(b), "%s/b.safetensors", dir);
	snprintf(args, sizeof(args), "train --device host --model tiny --vocab 256 --seq 16 "
		 "--micro-batch 2 --steps 3 --no-pin-memory --data %s/data/demo.txt "
		 "--save-final %s", ZN_TEST_SRC_DIR, a);
	cr_assert_eq(run_both(args, out, sizeof(out)), 0, "%s", out);
	snprintf(args, sizeof(args), "train --device host --init-from %s --heads 4 --seq 16 "
		 "--micro-batch 2 --steps 1 --lr 0 --zero-stage 3 --offload-optimizer cpu "
		 "--offload-param cpu --no-pin-memory --data %s/data/demo.txt --save-final %s",
		 a, ZN_TEST_SRC_DIR, b);
	cr_assert_eq(run_both(args, out, sizeof(out)), 0, "%s", out);
	na = file_bytes(a, &da);
	nb = file_bytes(b, &db);
	cr_assert_eq(na, nb);
	cr_assert(memcmp(da, db, (size_t)na) == 0, "the reloaded weights differ");
	free(da);
	free(db);
	unlink(a);
	unlink(b);
	rmdir(dir);
}

/* --save-dtype bf16 writes BF16 tensors (half the bytes) that --init-from reads back. */
Test(cli, save_bf16_and_init_from_it)
{
	char dir[] = "/tmp/zn-cli-XXXXXX", a[96], args[1024], out[16384], *data;
	long n;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(a, sizeof(a), "%s/a.safetensors", dir);
	snprintf(args, sizeof(args), "train --device host --model tiny --vocab 256 --seq 16 "
		 "--micro-batch 2 --steps 1 --no-pin-memory --data %s/data/demo.txt "
		 "--save-final %s --save-dtype bf16", ZN_TEST_SRC_DIR, a);
	cr_assert_eq(run_both(args, out, sizeof(out)), 0, "%s", out);
	n = file_bytes(a, &data);
	cr_assert(n > 8 && memmem(data, (size_t)n, "\"BF16\"", 6), "no BF16 tensor in %s", a);
	cr_assert_null(memmem(data, (size_t)n, "\"F32\"", 5), "an F32 tensor in %s", a);
	free(data);
	snprintf(args, sizeof(args), "train --device host --init-from %s --heads 4 --seq 16 "
		 "--micro-batch 2 --steps 1 --no-pin-memory --data %s/data/demo.txt", a,
		 ZN_TEST_SRC_DIR);
	cr_assert_eq(run_both(args, out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(run_both("train --save-dtype fp8 --data x", out, sizeof(out)), 2, "%s", out);
	unlink(a);
	rmdir(dir);
}

/* --print-config's origin line of key on stderr: "key value origin". */
static void print_config_says(const char *out, const char *key, const char *value,
			      const char *origin)
{
	char k[128], v[64], o[32];
	const char *p = out;

	while (p && !(sscanf(p, "%127s %63s %31s", k, v, o) == 3 && !strcmp(k, key))) {
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	cr_assert_not_null(p, "no %s in:\n%s", key, out);
	cr_assert_str_eq(v, value, "%s", key);
	cr_assert_str_eq(o, origin, "%s", key);
}

/* The lr a "step N/M" line shows. */
static double step_lr(const char *out, int step, int steps)
{
	char head[32];
	const char *p;

	snprintf(head, sizeof(head), "step %d/%d | loss ", step, steps);
	p = strstr(out, head);
	cr_assert_not_null(p, "no %s in:\n%s", head, out);
	p = strstr(p, " | lr ");
	cr_assert_not_null(p, "no lr on the step line:\n%s", out);
	return atof(p + 6);
}

/* Hugging Face's ZeRO-3 template (transformers' docs ds_config_zero3.json, every value
 * "auto") runs 4 steps as the Trainer fills it: lr 5e-5 (WarmupLR: DeepSpeed's warmup of
 * at least 2 steps from warmup_min_lr 0, step 1 at the optimizer's lr), clipping 1.0;
 * --print-config says so. Its WarmupDecayLR form with total_num_steps "auto" (4) and
 * --warmup-ratio 0.75 (3 warmup steps) runs too, and "number_checkpoints": false is "not
 * set". The step line shows the lr each step used. */
Test(cli, hf_zero3_template_runs_as_the_trainer_fills_it)
{
	static char out[1 << 16];
	char args[1024], cfg[] = "/tmp/zinc-cli-hfdecay-XXXXXX";
	FILE *f;
	int fd;

	snprintf(args, sizeof(args), "train --config %s/tests/configs/hf_zero3.json --steps 4 "
		 "--steps-per-print 1 --device host --model tiny --vocab 256 --seq 16 "
		 "--no-pin-memory --data %s", ZN_TEST_SRC_DIR, train_text());
	cr_assert_eq(run_both(args, out, sizeof(out)), 0, "%s", out);
	cr_assert_float_eq(step_lr(out, 1, 4), 5e-5, 1e-12);
	cr_assert_float_eq(step_lr(out, 2, 4), 0.0, 1e-12);
	cr_assert_float_eq(step_lr(out, 3, 4), 5e-5, 1e-12);
	cr_assert_float_eq(step_lr(out, 4, 4), 5e-5, 1e-12);
	snprintf(args, sizeof(args), "train --config %s/tests/configs/hf_zero3.json --steps 4 "
		 "--model tiny --print-config", ZN_TEST_SRC_DIR);
	cr_assert_eq(run_both(args, out, sizeof(out)), 0, "%s", out);
	print_config_says(out, "gradient_clipping", "1", "auto");
	print_config_says(out, "optimizer.params.weight_decay", "0", "auto");
	print_config_says(out, "optimizer.params.lr", "5e-05", "auto");
	print_config_says(out, "scheduler.params.warmup_num_steps", "0", "auto");

	fd = mkstemp(cfg);
	cr_assert(fd >= 0);
	f = fdopen(fd, "w");
	fputs("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\":"
	      " \"auto\", \"eps\": \"auto\", \"weight_decay\": \"auto\"}},"
	      " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\":"
	      " \"auto\", \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\","
	      " \"total_num_steps\": \"auto\"}},"
	      " \"activation_checkpointing\": {\"partition_activations\": false,"
	      " \"number_checkpoints\": false},"
	      " \"zero_optimization\": {\"stage\": 3}, \"gradient_clipping\": \"auto\","
	      " \"train_micro_batch_size_per_gpu\": \"auto\"}", f);
	fclose(f);
	snprintf(args, sizeof(args), "train --config %s --steps 4 --warmup-ratio 0.75 "
		 "--steps-per-print 1 --device host --model tiny --vocab 256 --seq 16 --data %s",
		 cfg, train_text());
	cr_assert_eq(run_both(args, out, sizeof(out)), 0, "%s", out);
	cr_assert_float_eq(step_lr(out, 1, 4), 5e-5, 1e-12);
	cr_assert_float_eq(step_lr(out, 2, 4), 0.0, 1e-12);
	/* warmup 3, log: ln(2) / ln(3) of the way at iteration 1 */
	cr_assert_float_eq(step_lr(out, 3, 4), 5e-5 * 0.6309298, 5e-8); /* printed %.3g */
	cr_assert_float_eq(step_lr(out, 4, 4), 5e-5, 1e-12);
	snprintf(args, sizeof(args), "train --config %s --steps 4 --warmup-ratio 0.5 "
		 "--warmup-steps 1 --model tiny --print-config", cfg);
	cr_assert_eq(run_both(args, out, sizeof(out)), 2, "%s", out);
	cr_assert(strstr(out, "--warmup-ratio 0.5 and --warmup-steps 1 both set the warmup"),
		  "%s", out);
	remove(cfg);
}

/* Each case's command exits 2 (a usage error) printing the case's text. */
static void usage_errors(const char *const (*cases)[2], size_t n)
{
	char out[16384];

	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(run_both(cases[i][0], out, sizeof(out)), 2, "%s: %s", cases[i][0],
			     out);
		cr_assert(strstr(out, cases[i][1]), "zinc %s: want '%s' in:\n%s", cases[i][0],
			  cases[i][1], out);
	}
}

/* The bench commands' numbers are whole numbers in range, and each flag takes a value or
 * none: "--reps 3x" and "--numa-node abc" were read by atoi as 3 and node 0 and ran. */
Test(cli, bench_values_are_checked)
{
	static const char *const cases[][2] = {
		{ "bench adam --params 1K --threads 1 --reps 3x",
		  "zinc bench adam: bad value '3x' for --reps" },
		{ "bench adam --params 1K --threads 1 --reps 1 --numa-node abc",
		  "zinc bench adam: bad value 'abc' for --numa-node" },
		{ "bench adam --params 1K --threads 1 --reps 99999999999",
		  "zinc bench adam: bad value '99999999999' for --reps" },
		{ "bench adam --params 1K --json=yes", "zinc bench adam: --json takes no value" },
		{ "bench adam --reps", "zinc bench adam: --reps needs a value" },
		{ "bench nvme --file /nonexistent/x --iters 2x", "--iters '2x': give 1 to 1000" },
		{ "bench nvme --file /nonexistent/x stray", "unexpected argument 'stray'" },
		{ "bench step --model tiny --warmup -1", "zinc bench step: bad value '-1' for --warmup" },
	};
	usage_errors(cases, sizeof(cases) / sizeof(*cases));
}

/* Every command answers an unknown option with the one it most likely meant: a Hugging
 * Face name with zinc's, '_' for '-', a typo, a flag cut short, a command name. */
Test(cli, unknown_options_get_what_they_meant)
{
	static const char *const cases[][2] = {
		{ "train --learning-rate 1e-4", "(did you mean --lr? Hugging Face's "
		  "--learning-rate is zinc's --lr)" },
		{ "train --per_device_train_batch_size 2", "did you mean --micro-batch?" },
		{ "train --gradient-accumulation-steps 4", "did you mean --grad-accum?" },
		{ "train --num-train-epochs 1", "did you mean --epochs?" },
		{ "train --output-dir out", "did you mean --save-dir?" },
		{ "train --lora-target q_proj", "did you mean --lora-targets?" },
		{ "train --micro_batch 2", "did you mean --micro-batch?" },
		{ "train --zero-stag 3", "did you mean --zero-stage?" },
		{ "estimate --params 1B --largest-layer 1M --prefetch 2",
		  "zinc estimate: unknown option '--prefetch' (did you mean --prefetch-depth?)" },
		{ "estimate --model tiny --max-grad-norm 1", "did you mean --grad-clip?" },
		{ "tokenize --tokenizr x", "zinc tokenize: unknown option '--tokenizr' (did you "
		  "mean --tokenizer?)" },
		{ "bench nvme --sizee 1M", "zinc bench nvme: unknown option '--sizee' (did you "
		  "mean --size?)" },
		{ "bench adam --rep 2", "zinc bench adam: unknown option '--rep' (did you mean "
		  "--reps?)" },
		{ "bench step --bww max", "zinc bench step: unknown option '--bww' (did you mean "
		  "--bw?)" },
		{ "info --nvme-pth /tmp", "zinc info: unknown option '--nvme-pth' (did you mean "
		  "--nvme-path?)" },
		{ "merge --adaptor a", "zinc merge: unknown option '--adaptor' (did you mean "
		  "--adapter?)" },
		{ "merge --model_name_or_path b", "zinc merge: unknown option "
		  "'--model_name_or_path' (did you mean --init-from?" },
		{ "trian", "zinc: unknown command 'trian' (did you mean 'train'?)" },
		{ "merg", "zinc: unknown command 'merg' (did you mean 'merge'?)" },
		{ "train --frobnicate", "zinc train: unknown option '--frobnicate' (zinc train "
		  "--help lists the options)" },
	};
	usage_errors(cases, sizeof(cases) / sizeof(*cases));
}

/* zinc generate: after the model is found, its unknown options get a suggestion too. */
Test(cli, generate_unknown_option_gets_what_it_meant)
{
	char args[1024], out[16384], dir[] = "/tmp/zinc-cli-gen-XXXXXX";

	cr_assert_not_null(mkdtemp(dir));
	snprintf(args, sizeof(args), "train --device host --model tiny --vocab 256 --seq 16 "
		 "--steps 1 --data %s --save-final %s/m", train_text(), dir);
	cr_assert_eq(run_both(args, out, sizeof(out)), 0, "%s", out);
	snprintf(args, sizeof(args), "generate --init-from %s/m --tokenizer bytes --prompt hi "
		 "--max_new_tokens 3", dir);
	cr_assert_eq(run_both(args, out, sizeof(out)), 2, "%s", out);
	cr_assert(strstr(out, "zinc generate: unknown option '--max_new_tokens' (did you mean "
			 "--max-new-tokens?)"), "%s", out);
	snprintf(args, sizeof(args), "rm -rf %s", dir);
	cr_assert_eq(system(args), 0);
}
