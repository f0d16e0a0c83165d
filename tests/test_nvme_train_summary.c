/* zinc train's summary line: a tiny run with optimizer and parameters on nvme (host device)
 * whose measured NVMe bytes per step equal the plan's, peak RSS from the kernel above 0 and
 * the pinned peak within the arena; the step line's rates. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "nvme_test_util.h"

static int zinc(char *out, size_t size, const char *args)
{
	char cmd[2048];
	size_t n;
	FILE *p;
	int status;

	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* "peak RSS 16.31 MiB" and the like back to bytes (the units of zn_format_bytes). */
static double bytes_of(const char *s)
{
	static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB" };
	char unit[16] = "";
	double v = -1, mul = 1;

	cr_assert(s && sscanf(s, "%lf %15s", &v, unit) == 2, "%s", s ? s : "(none)");
	for (int i = 0; i < 5; i++, mul *= 1024)
		if (!strncmp(unit, units[i], strlen(units[i])))
			return v * mul;
	cr_assert_fail("unit '%s' in %s", unit, s);
	return -1;
}

struct summary {
	int steps;
	unsigned long long tokens, rd, rd_plan, wr, wr_plan;
	double rss, pin_peak, pin_size;
};

static void parse_summary(const char *out, struct summary *s)
{
	const char *p = strstr(out, "\nsummary: ");

	cr_assert_not_null(p, "no summary line:\n%s", out);
	cr_assert_eq(sscanf(p, "\nsummary: %d steps | %llu tokens", &s->steps, &s->tokens), 2,
		     "%s", p);
	s->rss = bytes_of(strstr(p, "peak RSS ") + 9);
	s->pin_peak = bytes_of(strstr(p, "pinned peak ") + 12);
	s->pin_size = bytes_of(strstr(p, " of ") + 4);
	p = strstr(p, "nvme per step read ");
	cr_assert_not_null(p, "%s", out);
	cr_assert_eq(sscanf(p, "nvme per step read %llu B (plan %llu), write %llu B (plan %llu)",
			    &s->rd, &s->rd_plan, &s->wr, &s->wr_plan), 4, "%s", p);
}

static void run_nvme(const char *extra, struct summary *s, char *out, size_t size)
{
	char dir[ZN_PATH_MAX], args[1536];

	nvme_test_dir(dir, sizeof(dir));
	/* prefetch depth 1: layers 0-2 hot (plan.h), 3-5 fetched from nvme */
	snprintf(args, sizeof(args), "train --device host --model tiny --layers 4 --vocab 256 "
		 "--prefetch-depth 1 --seq 16 --micro-batch 2 --grad-accum 2 --steps 3 "
		 "--steps-per-print 1 --zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path %s "
		 "--data %s/data/demo.txt %s", dir, ZN_TEST_SRC_DIR, extra);
	cr_assert_eq(zinc(out, size, args), 0, "%s\n%s", args, out);
	nvme_test_rmdir(dir);
	parse_summary(out, s);
}

Test(nvme_train_summary, fp32_measured_nvme_bytes_equal_the_plan)
{
	static char out[65536];
	struct summary s;

	run_nvme("", &s, out, sizeof(out));
	cr_assert_eq(s.steps, 3);
	cr_assert_eq(s.tokens, 3ull * 2 * 2 * 16, "3 steps x micro-batch 2 x accumulation 2 x seq 16");
	cr_assert_gt(s.rd_plan, 0);
	cr_assert_eq(s.rd, s.rd_plan, "%s", out);
	cr_assert_eq(s.wr, s.wr_plan, "%s", out);
	/* fp32, both on nvme: writes are master, m, v (12 B per element); reads add the
	 * fetches of the layers that are not hot: 4 B per element, 2 x 2 micro-batches */
	cr_assert_eq(s.wr_plan % 12, 0);
	cr_assert_gt(s.rd_plan, s.wr_plan);
	cr_assert_gt(s.rss, 0);
	cr_assert_gt(s.pin_peak, 0);
	cr_assert_leq(s.pin_peak, s.pin_size);
	/* every step line shows the nvme rates */
	cr_assert(strstr(out, "step 3/3 | loss ") && strstr(out, "| nvme read ") &&
		  strstr(out, "B/s, write "), "%s", out);
	cr_assert_null(strstr(out, "0.0k tok/s"), "%s", out);
}

Test(nvme_train_summary, bf16_writes_the_new_parameter_shards_too)
{
	static char out[65536];
	struct summary s;

	run_nvme("--bf16", &s, out, sizeof(out));
	cr_assert_eq(s.rd, s.rd_plan, "%s", out);
	cr_assert_eq(s.wr, s.wr_plan, "%s", out);
	/* 12 B per element of master, m, v + 2 B of the bf16 shard */
	cr_assert_eq(s.wr_plan % 14, 0);
}

Test(nvme_train_summary, cpu_offload_has_no_nvme_figures)
{
	static char out[65536];
	char args[1024];

	snprintf(args, sizeof(args), "train --device host --model tiny --vocab 256 --seq 16 "
		 "--micro-batch 2 --steps 2 --zero-stage 3 --offload-optimizer cpu "
		 "--offload-param cpu --data %s/data/demo.txt", ZN_TEST_SRC_DIR);
	cr_assert_eq(zinc(out, sizeof(out), args), 0, "%s", out);
	cr_assert(strstr(out, "\nsummary: 2 steps | 64 tokens | mean step "), "%s", out);
	cr_assert_null(strstr(out, "nvme"), "%s", out);
}

/* LoRA with the base on nvme: layer 0's base is read once, by the first step, and kept; the
 * summary says so, and the measured reads are the plan's per step plus that once. */
Test(nvme_train_summary, lora_first_step_also_reads_layer_0)
{
	static char out[65536];
	char dir[ZN_PATH_MAX], args[1536];
	unsigned long long plan, first;
	double mean;
	const char *p;

	nvme_test_dir(dir, sizeof(dir));
	snprintf(args, sizeof(args), "train --device host --model tiny --vocab 256 --seq 16 "
		 "--micro-batch 2 --steps 3 --lora-r 4 --lora-targets c_attn,c_fc --zero-stage 3 "
		 "--offload-optimizer cpu --offload-param nvme --nvme-path %s --data "
		 "%s/data/demo.txt", dir, ZN_TEST_SRC_DIR);
	cr_assert_eq(zinc(out, sizeof(out), args), 0, "%s\n%s", args, out);
	nvme_test_rmdir(dir);
	p = strstr(out, "nvme per step read ");
	cr_assert_not_null(p, "%s", out);
	cr_assert_eq(sscanf(p, "nvme per step read %lf B (plan %llu; the first step also reads "
			    "layer 0's base, %llu B, kept for the run), write", &mean, &plan,
			    &first), 3, "%s", p);
	cr_assert_gt(first, 0);
	/* 3 steps: 3 x plan + layer 0's once */
	cr_assert_float_eq(mean * 3, (double)(3 * plan + first), 1.5, "%s", p);
}
