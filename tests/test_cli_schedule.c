/* zinc train --schedule (zinc.schedule, docs/architecture.md "Layer-major accumulation"):
 * the header says which order runs and why (auto: layer-major with offloaded parameters
 * and accumulation, micro-batch with one micro-batch); both orders save the same bytes,
 * with validation and from a JSON config; a layer-major run stopped and resumed saves a
 * straight run's bytes; zinc estimate prints the run's schedule line; where the boundary
 * activations fit no home auto falls back saying why and an explicit layer-major is
 * refused with the numbers; a bad value is refused naming the values; with checkpoints on
 * nvme the boundaries live there (the header says so), and auto puts them there where
 * neither memory holds them and an nvme path is set, if that moves fewer nvme bytes a step
 * (then the step's nvme bytes are the plan's). Host device. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_child.h"

#define TINY "--model tiny --vocab 256 --device host --pinned-mem 64M --seq 16 --deterministic"
#define OFF TINY " --zero-stage 3 --offload-optimizer cpu --offload-param cpu --micro-batch 2"
#define DATA "--data " ZN_TEST_SRC_DIR "/data/demo.txt"

static char dir[64];
static char out[1 << 17];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_clisched_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_schedule, .init = make_dir, .fini = remove_dir, .timeout = 300);

static void has(const char *what)
{
	cr_assert(strstr(out, what), "no '%s' in:\n%s", what, out);
}

static void write_json(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "%s", path);
	cr_assert_geq(fputs(text, f), 0);
	cr_assert_eq(fclose(f), 0);
}

Test(cli_schedule, both_orders_save_the_same_bytes)
{
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --grad-accum 4 --steps 3 "
				     DATA " --val-data " ZN_TEST_SRC_DIR "/data/demo.txt "
				     "--eval-steps 2 --eval-batches 2 --schedule micro-batch "
				     "--save-final %s/a.safetensors", dir), 0, "%s", out);
	has("schedule: micro-batch (--schedule)");
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --grad-accum 4 --steps 3 "
				     DATA " --val-data " ZN_TEST_SRC_DIR "/data/demo.txt "
				     "--eval-steps 2 --eval-batches 2 --save-final %s/b.safetensors",
				     dir), 0, "%s", out);
	has("schedule: layer-major (auto: fewer parameter reads; the boundary activations of "
	    "4 micro-batches on the device; the tied head's backward runs again)");
	zt_same_file(dir, "a.safetensors", "b.safetensors");
	/* the JSON key; boundaries in pinned memory with checkpoints on the cpu */
	write_json(zt_path(dir, "c.json"), "{\"zinc\": {\"schedule\": \"layer-major\"}, "
		   "\"activation_checkpointing\": {\"cpu_checkpointing\": true}}");
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --grad-accum 4 --steps 3 "
				     DATA " --val-data " ZN_TEST_SRC_DIR "/data/demo.txt "
				     "--eval-steps 2 --eval-batches 2 --config %s/c.json "
				     "--save-final %s/c.safetensors", dir, dir), 0, "%s", out);
	has("schedule: layer-major (--schedule; the boundary activations of 4 micro-batches in "
	    "pinned host memory");
	zt_same_file(dir, "a.safetensors", "c.safetensors");
}

Test(cli_schedule, auto_keeps_micro_batch_order_where_nothing_is_saved)
{
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --steps 1 " DATA), 0,
		     "%s", out);
	has("schedule: micro-batch (auto: one micro-batch per step)");
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " TINY " --grad-accum 2 --steps 1 "
				     DATA), 0, "%s", out);
	has("schedule: micro-batch (auto: every parameter stays on the device");
}

Test(cli_schedule, layer_major_resume_is_exact)
{
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --grad-accum 2 --steps 4 "
				     DATA " --schedule layer-major --save-final %s/a.safetensors",
				     dir), 0, "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --grad-accum 2 --steps 2 "
				     DATA " --schedule layer-major --save-dir %s/ck", dir), 0, "%s",
		     out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --grad-accum 2 --steps 4 "
				     DATA " --schedule layer-major --resume %s/ck --save-final "
				     "%s/b.safetensors", dir, dir), 0, "%s", out);
	has("resumed from");
	zt_same_file(dir, "a.safetensors", "b.safetensors");
}

Test(cli_schedule, estimate_prints_the_runs_line)
{
	char est[512], run[512];

	cr_assert_eq(zt_zinc_out("estimate " OFF " --grad-accum 4", out, sizeof(out)), 0, "%s",
		     out);
	zt_line(out, "schedule: ", est, sizeof(est));
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --grad-accum 4 --steps 1 "
				     DATA), 0, "%s", out);
	zt_line(out, "schedule: ", run, sizeof(run));
	cr_assert_str_eq(est, run);
}

/* 64 micro-batches of boundaries do not fit 2 MiB of device memory; micro-batch order
 * does */
Test(cli_schedule, no_home_falls_back_or_is_refused)
{
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --grad-accum 64 "
				     "--device-mem 2M --steps 1 " DATA), 0, "%s", out);
	has("schedule: micro-batch (auto: the boundary activations of 64 micro-batches fit no "
	    "home: device budget 2.00 MiB is short by");
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --grad-accum 64 "
				     "--device-mem 2M --steps 1 --schedule layer-major " DATA), 2,
		     "%s", out);
	has("--schedule layer-major (zinc.schedule): the boundary activations of 64 "
	    "micro-batches fit no home: device budget 2.00 MiB is short by");
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --steps 1 --schedule "
				     "vertical " DATA), 2, "%s", out);
	has("layer-major");
	has("micro-batch");
}

/* --checkpoint-device nvme: an explicit layer-major keeps the boundaries on nvme */
Test(cli_schedule, boundaries_on_nvme)
{
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " OFF " --grad-accum 2 --steps 2 "
				     "--checkpoint-device nvme --checkpoint-nvme-path %s "
				     "--schedule layer-major " DATA, dir), 0, "%s", out);
	has("schedule: layer-major (--schedule; the boundary activations of 2 micro-batches "
	    "on nvme");
}

/* 64 micro-batches: the boundaries fit neither 3 MiB of device memory nor 4 MiB pinned;
 * with every layer read from nvme for each use (--hot-layers 0) layer-major on nvme
 * moves fewer bytes, else (its layers hot in pinned memory) micro-batch order does */
#define NVME_AUTO TINY " --zero-stage 3 --offload-optimizer nvme --offload-param nvme " \
	"--micro-batch 2 --grad-accum 64 --device-mem 3M --pinned-mem 4M --nvme-path %s"

Test(cli_schedule, auto_boundaries_on_nvme)
{
	char sum[512], a[64], b[64], args[512];

	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " NVME_AUTO " --hot-layers 0 "
				     "--steps 2 " DATA, dir), 0, "%s", out);
	has("schedule: layer-major (auto: fewer parameter reads; the boundary activations of 64 "
	    "micro-batches on nvme");
	/* "nvme per step read N B (plan N), write M B (plan M)" */
	zt_line(out, "summary: ", sum, sizeof(sum));
	cr_assert_eq(sscanf(strstr(sum, "nvme per step read"), "nvme per step read %63s B (plan "
			    "%63[0-9]", a, b), 2, "%s", sum);
	cr_assert_str_eq(a, b, "%s", sum);
	cr_assert_eq(sscanf(strstr(sum, ", write"), ", write %63s B (plan %63[0-9]", a, b), 2,
		     "%s", sum);
	cr_assert_str_eq(a, b, "%s", sum);
	snprintf(args, sizeof(args), "estimate " NVME_AUTO, dir);
	cr_assert_eq(zt_zinc_out(args, out, sizeof(out)), 0, "%s", out);
	has("schedule: micro-batch (auto: with the boundary activations of 64 micro-batches on "
	    "nvme, layer-major would move");
}
