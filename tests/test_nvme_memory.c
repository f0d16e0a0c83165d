/* Host memory from the plan (docs/memory.md), measured on child zinc processes (peak RSS
 * from wait4, ASan's quarantine off as in test_cli_stream):
 * - a small model with optimizer and parameters on nvme: the arena reserves the plan's
 *   pinned bytes plus the 2 MiB margin, the pinned peak is the plan's, and the peak RSS is
 *   at most the plan's device bytes (host device) + pinned bytes + the binary's own
 *   footprint (the peak RSS of a 1-layer, width-64 run of the same binary: its libraries,
 *   which a CUDA build makes ~150 MB larger without running any CUDA code) + a fixed
 *   ZN_TEST_RSS_OVERHEAD (one layer's host scratch, the data; a sanitizer build adds its
 *   shadow memory);
 * - save and init of a model larger than the pinned budget given (--pinned-mem 64M, a
 *   ~200 MB model) succeed with a peak RSS above the binary's own footprint by less than
 *   the model's size, and the reloaded model
 *   saved again (lr 0) is the same file byte for byte.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_child.h"
#include "nvme_test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define ZN_TEST_SAN_ALLOWANCE (256ll << 20)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ZN_TEST_SAN_ALLOWANCE (256ll << 20)
#endif
#endif
#ifndef ZN_TEST_SAN_ALLOWANCE
#define ZN_TEST_SAN_ALLOWANCE 0ll
#endif
#define ZN_TEST_RSS_OVERHEAD ((64ll << 20) + ZN_TEST_SAN_ALLOWANCE)

static char dir[ZN_PATH_MAX];

static void make_dir(void)
{
	nvme_test_dir(dir, sizeof(dir));
}

static void remove_dir(void)
{
	nvme_test_rmdir(dir);
}

TestSuite(nvme_memory, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* zinc train with the nvme flags and extra; its output in out, its peak RSS returned. */
static long long run_rss(const char *extra, char *out, size_t size)
{
	char args[4096], log[ZN_PATH_MAX + 16], *text;
	long long rss;
	size_t n;

	snprintf(args, sizeof(args), "train --device host --vocab 256 --seq 16 --micro-batch 1 "
		 "--zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path %s "
		 "--data %s/data/demo.txt %s", dir, ZN_TEST_SRC_DIR, extra);
	snprintf(log, sizeof(log), "%s/out.log", dir);
	rss = zt_zinc_rss(args, log, NULL);
	text = zt_read_all(log, &n);
	snprintf(out, size, "%s", text);
	free(text);
	remove(log);
	return rss;
}

/* the binary's own footprint: the peak RSS of a 1-layer, width-64 run (libraries, a
 * tiny plan) */
static long long footprint(void)
{
	static char out[1 << 16];

	return run_rss("--layers 1 --d-model 64 --heads 4 --steps 1", out, sizeof(out));
}

/* "2.42 MiB" and the like (zn_format_bytes) back to bytes */
static double bytes_at(const char *s, const char *after)
{
	static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB" };
	const char *p = strstr(s, after);
	char unit[16] = "";
	double v = -1, mul = 1;

	cr_assert_not_null(p, "no '%s' in:\n%s", after, s);
	cr_assert_eq(sscanf(p + strlen(after), "%lf %15s", &v, unit), 2, "%s", p);
	for (int i = 0; i < 5; i++, mul *= 1024)
		if (!strncmp(unit, units[i], strlen(units[i])))
			return v * mul;
	cr_assert_fail("unit '%s' in %s", unit, p);
	return -1;
}

Test(nvme_memory, rss_and_pinned_within_the_plan)
{
	static char out[1 << 16];
	double dev, pin, margin, reserved, peak_pin;
	long long rss, base = footprint();
	const char *mem, *sum;

	rss = run_rss("--layers 8 --d-model 256 --heads 4 --steps 2", out, sizeof(out));
	mem = strstr(out, "memory plan: ");
	sum = strstr(out, "\nsummary: ");
	cr_assert(mem && sum, "%s", out);
	dev = bytes_at(mem, "device ");
	pin = bytes_at(mem, "pinned ");
	margin = bytes_at(mem, "+ margin ");
	reserved = bytes_at(mem, "= ");
	peak_pin = bytes_at(sum, "pinned peak ");
	cr_assert(strstr(mem, "gradients: pinned ring (2 buffers)"), "%s", mem);
	cr_assert_eq(margin, 2.0 * 1024 * 1024);
	cr_assert_eq(reserved, pin + margin, "%s", mem);
	cr_assert_leq(peak_pin, pin, "%s", sum);
	cr_assert_gt(peak_pin, 0.9 * pin, "the plan's views are allocated: %s", sum);
	cr_assert_leq((double)rss, dev + pin + (double)(base + ZN_TEST_RSS_OVERHEAD),
		      "peak RSS %lld over device %.0f + pinned %.0f + footprint %lld + overhead "
		      "%lld\n%s", rss, dev, pin, base, (long long)ZN_TEST_RSS_OVERHEAD, out);
	printf("peak RSS %lld <= device %.0f + pinned %.0f + footprint %lld + %lld\n", rss, dev,
	       pin, base, (long long)ZN_TEST_RSS_OVERHEAD);
}

Test(nvme_memory, save_and_init_above_the_pinned_budget_hold_less_than_the_model)
{
	static char out[1 << 16];
	static const char *model = "--layers 64 --d-model 256 --heads 4 --steps 1 --lr 0 "
				   "--pinned-mem 64M";
	char extra[3 * ZN_PATH_MAX], pa[ZN_PATH_MAX + 32], pb[ZN_PATH_MAX + 32], *da, *db;
	long long saved, loaded, base = footprint();
	size_t na, nb;

	snprintf(pa, sizeof(pa), "%s/a", dir);
	snprintf(pb, sizeof(pb), "%s/b", dir);
	snprintf(extra, sizeof(extra), "%s --save-final %s", model, pa);
	saved = run_rss(extra, out, sizeof(out));
	cr_assert(strstr(out, "(budget 64.00 MiB)"), "%s", out);
	snprintf(extra, sizeof(extra), "%s --init-from %s --save-final %s", model, pa, pb);
	loaded = run_rss(extra, out, sizeof(out));
	snprintf(pa, sizeof(pa), "%s/a/model.safetensors", dir);
	snprintf(pb, sizeof(pb), "%s/b/model.safetensors", dir);
	da = zt_read_all(pa, &na);
	db = zt_read_all(pb, &nb);
	cr_assert_gt(na, 3 * (64ll << 20), "the model (%zu bytes) is over 3x the pinned budget",
		     na);
	cr_assert_eq(na, nb);
	cr_assert(!memcmp(da, db, (size_t)na), "the reloaded model saved again differs");
	free(da);
	free(db);
	cr_assert_lt(saved - base, (long long)na, "save: peak RSS %lld (footprint %lld), "
		     "model %zu bytes", saved, base, na);
	cr_assert_lt(loaded - base, (long long)na, "init and save: peak RSS %lld (footprint "
		     "%lld), model %zu bytes", loaded, base, na);
	printf("model %zu bytes, pinned budget 64 MiB, footprint %lld: peak RSS save %lld, "
	       "init+save %lld\n", na, base, saved, loaded);
}
