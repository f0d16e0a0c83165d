/* zinc bench step: --json on a tiny model has one row per cap with every field, the bound is
 * the largest of its terms and no larger than the step (the caps are low enough that the
 * NVMe term, which the engine's token bucket enforces, is the bound), efficiency is
 * bound / step; --csv and the CSV written when gnuplot is missing; bad --bw values and a
 * run without NVMe state are usage errors. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/fsio.h"
#include "nvme_test_util.h"

static char out[1 << 17];

static int zinc(const char *args)
{
	char cmd[4096];
	size_t n;
	FILE *p;
	int status;

	snprintf(cmd, sizeof(cmd), "%s %s", ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* prefetch depth 1: layers 0-2 hot (plan.h), 3-5 fetched from nvme (reads > writes) */
#define TINY "bench step --device host --model tiny --layers 4 --vocab 256 --seq 16 " \
	     "--prefetch-depth 1 --micro-batch 2 --grad-accum 2 --zero-stage 3 " \
	     "--offload-optimizer nvme --offload-param nvme --warmup 1 --steps 2"

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(o, key);

	cr_assert(cJSON_IsNumber(v), "no number '%s'", key);
	return v->valuedouble;
}

static double max2(double a, double b)
{
	return a > b ? a : b;
}

Test(nvme_bench_step, json_has_a_row_per_cap_and_a_bound_no_larger_than_the_step)
{
	static const char *const fields[] = { "cap_bytes_per_s", "bandwidth_bytes_per_s",
		"step_ms", "step_min_ms", "step_max_ms", "spread_ms", "fwd_ms", "bwd_ms", "opt_ms",
		"wait_ms", "nvme_read_bytes", "nvme_write_bytes", "copy_h2d_bytes",
		"copy_d2h_bytes", "nvme_ms", "copy_ms", "adamw_ms", "compute_ms", "bound_ms",
		"efficiency" };
	static const char *const caps[] = { "40M", "80M" };
	char dir[ZN_PATH_MAX], args[4096], csv[ZN_PATH_MAX + 16], *text = NULL;
	const cJSON *rows, *m;
	cJSON *root;
	int i = 0;

	nvme_test_dir(dir, sizeof(dir));
	snprintf(csv, sizeof(csv), "%s/rows.csv", dir);
	snprintf(args, sizeof(args), TINY " --nvme-path %s --bw 40M,80M --json --csv %s 2>/dev/null",
		 dir, csv);
	cr_assert_eq(zinc(args), 0, "%s\n%s", args, out);
	root = cJSON_Parse(out);
	cr_assert_not_null(root, "not JSON:\n%s", out);
	m = cJSON_GetObjectItem(root, "machine");
	cr_assert_gt(num(m, "h2d_bytes_per_s"), 0);
	cr_assert_gt(num(m, "baseline_step_ms"), 0);
	/* the baseline: a round before the first cap and one after each, the median of all
	 * their steps, so between the fastest and the slowest round's median */
	cr_assert_eq(num(m, "baseline_rounds"), 3);
	cr_assert_leq(num(m, "baseline_round_min_ms"), num(m, "baseline_step_ms"));
	cr_assert_leq(num(m, "baseline_step_ms"), num(m, "baseline_round_max_ms"));
	rows = cJSON_GetObjectItem(root, "rows");
	cr_assert_eq(cJSON_GetArraySize(rows), 2, "%s", out);
	for (const cJSON *r = rows->child; r; r = r->next, i++) {
		double step, bound, other;

		cr_assert_str_eq(cJSON_GetObjectItem(r, "cap")->valuestring, caps[i]);
		for (size_t k = 0; k < sizeof(fields) / sizeof(fields[0]); k++)
			cr_assert_geq(num(r, fields[k]), 0, "%s", fields[k]);
		cr_assert(cJSON_IsString(cJSON_GetObjectItem(r, "bound_by")));
		cr_assert_eq(num(r, "cap_bytes_per_s"), (i + 1) * 40.0 * 1048576);
		/* the plan's bytes: 6 MB read and 2.7 MB written per step (test_nvme_train_summary) */
		cr_assert_gt(num(r, "nvme_read_bytes"), num(r, "nvme_write_bytes"));
		cr_assert_gt(num(r, "nvme_write_bytes"), 0);
		cr_assert_leq(num(r, "step_min_ms"), num(r, "step_ms"));
		cr_assert_leq(num(r, "step_ms"), num(r, "step_max_ms"));
		/* NVMe at the cap: the larger direction over the cap, less the 10 ms burst */
		cr_assert_float_eq(num(r, "nvme_ms"),
				   max2(num(r, "nvme_read_bytes"), num(r, "nvme_write_bytes")) /
					   num(r, "cap_bytes_per_s") * 1e3 - 10.0, 1e-6);
		/* host device: the compute term is the baseline step of the rounds just before
		 * and after this cap (their median: within those rounds' range) */
		cr_assert_eq(num(r, "compute_ms"), num(r, "baseline_step_ms"));
		cr_assert_gt(num(r, "baseline_compute_ms"), 0);
		cr_assert_geq(num(r, "baseline_step_ms"), num(m, "baseline_round_min_ms") * 0.5);
		/* the bound is the largest term (host device: compute and AdamW are one term) */
		other = num(r, "compute_ms");
		bound = num(r, "bound_ms");
		cr_assert_float_eq(bound, max2(max2(num(r, "nvme_ms"), num(r, "copy_ms")), other),
				   1e-9);
		step = num(r, "step_ms");
		/* The NVMe term can never exceed the step, whatever else runs on the machine:
		 * the bucket passes at most cap x (t + burst) bytes in t. At these caps it is
		 * the bound on a quiet machine; on a loaded one the compute-only baseline
		 * (measured at another moment) can come out larger, and then that term is the
		 * bound (docs/bench-step.md: read those rows with the load average). */
		cr_assert_leq(num(r, "nvme_ms"), step + 0.01, "cap %s: nvme %.3f ms > step %.3f ms",
			      caps[i], num(r, "nvme_ms"), step);
		if (!strcmp(cJSON_GetObjectItem(r, "bound_by")->valuestring, "nvme"))
			cr_assert_leq(bound, step + 0.01, "cap %s: bound %.3f ms > step %.3f ms",
				      caps[i], bound, step);
		else
			cr_assert_str_eq(cJSON_GetObjectItem(r, "bound_by")->valuestring,
					 "compute+adamw", "%s", out);
		cr_assert_float_eq(num(r, "efficiency"), bound / step, 1e-9);
	}
	cJSON_Delete(root);
	/* the same rows as CSV: a header and one line per cap */
	cr_assert_eq(zn_read_input_file(csv, "csv", 1 << 20, &text, NULL), 0);
	cr_assert(!strncmp(text, "cap,bandwidth_bytes_per_s,step_ms,", 34), "%s", text);
	cr_assert_not_null(strstr(text, "\n40M,"));
	cr_assert_not_null(strstr(text, "\n80M,"));
	free(text);
	nvme_test_rmdir(dir);
}

Test(nvme_bench_step, without_gnuplot_the_plot_becomes_a_csv)
{
	char dir[ZN_PATH_MAX], args[4096], csv[ZN_PATH_MAX + 16], *text = NULL;

	nvme_test_dir(dir, sizeof(dir));
	snprintf(args, sizeof(args), "bench step --device host --model tiny --layers 4 --vocab "
		 "256 --seq 16 --zero-stage 3 --offload-optimizer nvme --nvme-path %s --bw 80M "
		 "--warmup 0 --steps 1 --plot %s/p.png 2>&1", dir, dir);
	setenv("ZINC_NO_GNUPLOT", "1", 1);
	cr_assert_eq(zinc(args), 0, "%s", out);
	unsetenv("ZINC_NO_GNUPLOT");
	cr_assert_not_null(strstr(out, "gnuplot not found (apt-get install gnuplot-nox)"), "%s",
			   out);
	cr_assert_not_null(strstr(out, "# zinc bench step: "), "%s", out);
	snprintf(csv, sizeof(csv), "%s/p.csv", dir);
	cr_assert_eq(zn_read_input_file(csv, "csv", 1 << 20, &text, NULL), 0);
	cr_assert_not_null(strstr(text, "\n80M,"), "%s", text);
	free(text);
	nvme_test_rmdir(dir);
}

Test(nvme_bench_step, bad_bw_values_are_usage_errors)
{
	static const char *const bad[] = { "", "0", "abc", "100M,,max", "1x", "max,max",
					   "-5M", "100", "250M,", "1G,1024M" };
	char args[1024];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(args, sizeof(args), TINY " --nvme-path /tmp --bw '%s' 2>&1", bad[i]);
		cr_assert_eq(zinc(args), 2, "--bw '%s': %s", bad[i], out);
		cr_assert_not_null(strstr(out, "--bw"), "'%s': %s", bad[i], out);
	}
	/* nothing on nvme: nothing to cap */
	cr_assert_eq(zinc("bench step --device host --model tiny --zero-stage 3 "
			  "--offload-optimizer cpu --bw 1G 2>&1"), 2, "%s", out);
	cr_assert_not_null(strstr(out, "nothing is on NVMe"), "%s", out);
}
