/* scripts/device/gpu-check.sh (issues 16 and 26), without a GPU.
 *
 * The stops: each missing prerequisite stops the script with exit 1 and ONE line
 * "gpu-check: STOP: ..." naming it (a missing or incomplete .debs, a bad mode value, no
 * nvidia-smi, a failing driver, a driver older than nvcc, CUDA OFF in the configure, no CUDA
 * device in `zinc info`). The scripts are copied into a temporary tree (they work from their
 * own repository root) and run there under `timeout`, so a check that hangs fails instead of
 * blocking; fake nvidia-smi, nvcc, zinc and GPU test binaries (tests/devcheck/) stand in for
 * the device. Sourcing the script defines its functions and runs nothing, so single steps
 * are run that way.
 *
 * The measuring steps: a skipped GPU test fails in GPU mode; every figure is in
 * summary.txt before the next step starts; one budget cuts the steps in the documented
 * order (a fake clock, no timing).
 *
 * The packages: sysroot_configure_from_debs_alone unpacks the .debs of debs.list (fetched
 * into the build dir with apt-get download when they are missing) and configures from them
 * alone, so a pkg-config module CMakeLists.txt gains without its package fails here, not on
 * the device. Where apt cannot download it skips with the reason; with ZN_REQUIRE_DEBS set
 * (CI: .ci/run) it fails instead. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_child.h"

struct run {
	int rc;
	int lines;
	char out[16384];
	char last[1024];
};

static char tree[64];

/* cmd's exit status, output lines, all output and last line; fails on a hang (timeout) */
static void run_cmd(struct run *r, const char *cmd)
{
	char line[1024];
	FILE *p;
	int st;

	p = popen(cmd, "r");
	cr_assert(p);
	r->out[0] = 0;
	r->last[0] = 0;
	r->lines = 0;
	while (fgets(line, sizeof(line), p)) {
		strncat(r->out, line, sizeof(r->out) - strlen(r->out) - 1);
		snprintf(r->last, sizeof(r->last), "%s", line);
		r->lines++;
	}
	st = pclose(p);
	r->rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	cr_assert_neq(r->rc, 124, "hung (killed by timeout): %s\n%s", cmd, r->out);
}

static void sh(const char *fmt, const char *a)
{
	char cmd[4096];

	snprintf(cmd, sizeof(cmd), fmt, a, a, a, a, a, a);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* A temporary repository tree with scripts/device/, CMakeLists.txt, the fakes in fake/ and
 * fakeb/ (a build dir of stand-ins) and, with debs, a .debs/ holding an empty (broken)
 * .deb for every package of debs.list. */
static void make_tree(bool debs)
{
	char cmd[4096];

	snprintf(tree, sizeof(tree), "/tmp/zn-test-devcheck-XXXXXX");
	cr_assert(mkdtemp(tree));
	snprintf(cmd, sizeof(cmd),
		 "cd %s && mkdir -p scripts fake empty fakeb && cp -r %s/scripts/device scripts/ && "
		 "cp %s/CMakeLists.txt . && cp %s/tests/devcheck/fake-zinc fakeb/zinc && "
		 "for t in test_gpu_optim test_gpu_kernels test_gpu_device; do "
		 "cp %s/tests/devcheck/fake-gpu-test fakeb/$t; done",
		 tree, ZN_TEST_SRC_DIR, ZN_TEST_SRC_DIR, ZN_TEST_SRC_DIR, ZN_TEST_SRC_DIR);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	if (debs)
		sh("cd %s && mkdir .debs && for p in $(grep -v '^#' scripts/device/debs.list | "
		   "awk '{ for (i = 2; i <= NF; i++) print $i }'); do : > .debs/${p}_1_all.deb; done",
		   tree);
}

/* fake/nvidia-smi: `ok` lists a GPU and prints a header whose driver supports CUDA
 * cuda_version; else it fails as a missing driver does. fake/nvcc: release nvcc_version. */
static void fake_tools(bool ok, const char *cuda_version, const char *nvcc_version)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/fake/nvidia-smi", tree);
	f = fopen(path, "w");
	cr_assert(f);
	if (ok)
		fprintf(f, "#!/bin/sh\necho 'GPU 0: Fake H200 (UUID: GPU-0)'\n"
			   "echo '| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   "
			   "CUDA Version: %s     |'\n", cuda_version);
	else
		fprintf(f, "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not "
			   "communicate with the NVIDIA driver.'\nexit 9\n");
	fclose(f);
	cr_assert_eq(chmod(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/fake/nvcc", tree);
	f = fopen(path, "w");
	cr_assert(f);
	fprintf(f, "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
		   "echo 'Cuda compilation tools, release %s, V%s.88'\n", nvcc_version, nvcc_version);
	fclose(f);
	cr_assert_eq(chmod(path, 0755), 0);
}

static void run_script(struct run *r, const char *env)
{
	char cmd[4096];

	snprintf(cmd, sizeof(cmd),
		 "cd %s && env -u ZN_GPU_CHECK_DRY -u ZN_GPU_CHECK_SMI_DIRS OUT=%s/out %s "
		 "timeout 30 bash scripts/device/gpu-check.sh 2>&1", tree, tree, env);
	run_cmd(r, cmd);
}

/* the script sourced in the tree (functions only, OUT=tree/out, B=fakeb), then snippet */
static void run_sourced(struct run *r, const char *env, const char *snippet)
{
	char cmd[8192];

	snprintf(cmd, sizeof(cmd),
		 "cd %s && mkdir -p out && : > out/summary.txt && env OUT=%s/out ZN_BUILD=fakeb "
		 "%s timeout 60 bash -c '. scripts/device/gpu-check.sh && %s' 2>&1", tree, tree,
		 env, snippet);
	run_cmd(r, cmd);
}

static char *tree_file(const char *name)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", tree, name);
	return zt_read_all(path, NULL);
}

static void cleanup(void)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", tree);
	system(cmd);
}

static void assert_stop(const struct run *r, int lines, const char *what)
{
	cr_assert_eq(r->rc, 1, "exit %d, want 1: %s", r->rc, r->out);
	cr_assert_eq(r->lines, lines, "%d lines, want %d: %s", r->lines, lines, r->out);
	cr_assert(!strncmp(r->last, "gpu-check: STOP: ", 17), "last line: %s", r->last);
	cr_assert(strstr(r->last, what), "the stop line does not say '%s': %s", what, r->last);
}

Test(devcheck, missing_debs_stops_with_one_line, .fini = cleanup)
{
	struct run r;

	make_tree(false);
	run_script(&r, "ZN_GPU_CHECK_DRY=1");
	assert_stop(&r, 1, "no .debs/*.deb");
	cr_assert(strstr(r.last, "fetch-debs.sh"), "does not say what to run: %s", r.last);
}

Test(devcheck, incomplete_debs_stop_naming_the_missing_packages, .fini = cleanup)
{
	struct run r;

	make_tree(true);
	sh("rm %s/.debs/zlib1g-dev_1_all.deb %s/.debs/libpcre2-dev_1_all.deb", tree);
	run_script(&r, "ZN_GPU_CHECK_DRY=1");
	assert_stop(&r, 1, ".debs lacks zlib1g-dev libpcre2-dev of scripts/device/debs.list");
	cr_assert(strstr(r.last, "fetch-debs.sh again"), "%s", r.last);
}

Test(devcheck, forced_gpu_mode_without_nvidia_smi_stops, .fini = cleanup)
{
	char env[512];
	struct run r;

	if (system("command -v nvidia-smi > /dev/null 2>&1") == 0)
		cr_skip_test("nvidia-smi is on PATH here: the missing case cannot be staged");
	make_tree(true);
	snprintf(env, sizeof(env), "ZN_GPU_CHECK_DRY=0 ZN_GPU_CHECK_SMI_DIRS=%s/empty", tree);
	run_script(&r, env);
	assert_stop(&r, 1, "no nvidia-smi");
	cr_assert(strstr(r.last, "ZN_GPU_CHECK_DRY=0"), "%s", r.last);
}

Test(devcheck, forced_gpu_mode_with_a_failing_driver_stops, .fini = cleanup)
{
	char env[512];
	struct run r;

	make_tree(true);
	fake_tools(false, "", "13.0");
	snprintf(env, sizeof(env), "ZN_GPU_CHECK_DRY=false PATH=%s/fake:$PATH", tree);
	run_script(&r, env);
	assert_stop(&r, 1, "lists no GPU (rc 9)");
	cr_assert(strstr(r.last, "NVIDIA-SMI has failed"), "%s", r.last);
}

Test(devcheck, only_1_or_true_mean_dry, .fini = cleanup)
{
	struct run r;

	make_tree(true);
	run_script(&r, "ZN_GPU_CHECK_DRY=yes");
	assert_stop(&r, 1, "ZN_GPU_CHECK_DRY='yes'");
}

Test(devcheck, nvidia_smi_found_outside_path_means_gpu_mode, .fini = cleanup)
{
	char env[512];
	struct run r;

	make_tree(true);
	fake_tools(true, "13.0", "13.0");
	/* unset ZN_GPU_CHECK_DRY (auto), nvidia-smi only in the extra folder */
	snprintf(env, sizeof(env), "ZN_GPU_CHECK_SMI_DIRS='%s/empty %s/fake'", tree, tree);
	run_script(&r, env);
	cr_assert(strstr(r.out, "gpu-check: GPU mode: GPU 0: Fake H200"), "not GPU mode: %s",
		  r.out);
	/* then it stops at the next missing piece (no nvcc, or the broken .debs) */
	cr_assert_eq(r.rc, 1, "%s", r.out);
	cr_assert(!strncmp(r.last, "gpu-check: STOP: ", 17), "%s", r.out);
}

Test(devcheck, driver_older_than_nvcc_stops_with_one_line, .fini = cleanup)
{
	char env[512];
	struct run r;

	make_tree(true);
	fake_tools(true, "12.4", "13.0");
	snprintf(env, sizeof(env), "ZN_GPU_CHECK_DRY=0 PATH=%s/fake:$PATH", tree);
	run_script(&r, env);
	/* the GPU mode line, then the stop */
	assert_stop(&r, 2, "supports CUDA 12.4, older than nvcc's release 13.0");
	cr_assert(strstr(r.last, "driver (550.54.15)"), "%s", r.last);

	/* a driver as new as nvcc passes: the run goes on to the (broken) sysroot */
	fake_tools(true, "13.0", "13.0");
	run_script(&r, env);
	cr_assert_eq(r.rc, 1, "%s", r.out);
	cr_assert(strstr(r.out, "cuda: driver 550.54.15 supports CUDA 13.0, nvcc release 13.0: ok"),
		  "%s", r.out);
	cr_assert(strstr(r.last, "sysroot step failed"), "%s", r.out);

	/* MAJOR.MINOR compared as numbers, not strings */
	run_sourced(&r, "", "version_older 12.4 13.0 && version_older 12.9 12.10 && "
			    "! version_older 12.10 12.9 && ! version_older 13.0 13.0 && echo ordered");
	cr_assert(strstr(r.out, "ordered"), "%s", r.out);
}

Test(devcheck, cuda_off_in_the_configure_summary_stops, .fini = cleanup)
{
	struct run r;

	make_tree(true);
	sh("printf -- '-- zinc 0.1.0 configuration\\n--   MPI             OFF \\n"
	   "--   CUDA            OFF  arch 90\\n--   NCCL            OFF \\n' > %s/off.log && "
	   "printf -- '--   CUDA            ON 13.0.88 arch 90\\n' > %s/on.log", tree);
	run_sourced(&r, "", "configured_cuda off.log; echo reached");
	assert_stop(&r, 1, "CUDA OFF");
	/* and a summary that says ON passes */
	run_sourced(&r, "", "configured_cuda on.log && echo passed");
	cr_assert_eq(r.rc, 0, "a CUDA ON summary was refused: %s", r.out);
	cr_assert(strstr(r.out, "passed"), "%s", r.out);
}

Test(devcheck, zinc_info_without_a_cuda_device_stops, .fini = cleanup)
{
	struct run r;

	make_tree(true);
	/* the build's zinc cannot reach the GPU */
	sh("printf '#!/bin/sh\\necho \"zinc 0.1.0\"\\necho \"gpus: none (cudaGetDeviceCount: "
	   "no CUDA-capable device is detected)\"\\n' > %s/fakeb/zinc", tree);
	run_sourced(&r, "", "cuda_device_seen; echo reached");
	assert_stop(&r, 1, "reports no CUDA device: gpus: none (cudaGetDeviceCount: no CUDA");
	/* a device listed but not opened does not count either */
	sh("printf '#!/bin/sh\\necho \"gpus: 1\"\\necho \"  gpu 0: could not be opened\"\\n' "
	   "> %s/fakeb/zinc", tree);
	run_sourced(&r, "", "cuda_device_seen; echo reached");
	assert_stop(&r, 1, "reports no CUDA device");
	/* one it opened passes, and the summary names it */
	sh("cp " ZN_TEST_SRC_DIR "/tests/devcheck/fake-zinc %s/fakeb/zinc", tree);
	run_sourced(&r, "", "cuda_device_seen && echo passed");
	cr_assert_eq(r.rc, 0, "%s", r.out);
	cr_assert(strstr(r.out, "zinc info: gpu 0: Fake H200, default budget 130 GiB"), "%s", r.out);
}

Test(devcheck, a_skipped_gpu_test_fails_in_gpu_mode, .fini = cleanup)
{
	struct run r;

	make_tree(true);
	run_sourced(&r, "FAKE_GPU_TEST_SKIP=1", "dry=; gpu_tests; echo rc=$?");
	cr_assert(strstr(r.out, "rc=1"), "a skip passed in GPU mode: %s", r.out);
	cr_assert(strstr(r.out, "gpu-tests: test_gpu_optim: 1 tests SKIPPED, a failure in GPU "
				"mode: [SKIP] fake::runs: no CUDA GPU"), "%s", r.out);
	/* in a dry run the GPU tests skip, as they must */
	run_sourced(&r, "FAKE_GPU_TEST_SKIP=1", "dry=1; gpu_tests; echo rc=$?");
	cr_assert(strstr(r.out, "rc=0"), "a skip failed in a dry run: %s", r.out);
	/* and tests that ran pass in GPU mode */
	run_sourced(&r, "", "dry=; gpu_tests; echo rc=$?");
	cr_assert(strstr(r.out, "rc=0"), "%s", r.out);
}

/* The steps gpu-check.sh's measure runs in GPU mode, in the order docs/gpu-check.md gives. */
static const char *const measure_order[] = {
	"gpu-tests",	     "mfu-llama-1b",	 "train-stage0",	"train-host-stage0",
	"train-stage3-offload", "mfu-gpt2-xl",	 "nvme-step",		"mfu-llama-8b-2l",
	"mfu-gpt2-xl-offload", "mfu-gpt2-xl-fp32", "sysroot-used",	"bench-adam",
	"ctest-all",
};
#define N_STEPS (int)(sizeof(measure_order) / sizeof(*measure_order))

/* the summary line of step name ("name    ok ..."), or NULL */
static const char *step_line(const char *summary, const char *name)
{
	size_t n = strlen(name);

	for (const char *l = summary; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, name, n) && l[n] == ' ')
			return l;
	return NULL;
}

Test(devcheck, each_figure_is_in_the_summary_before_the_next_step, .fini = cleanup)
{
	struct run r;
	char *seen, *sum;

	make_tree(true);
	run_sourced(&r, "ZN_GPU_CHECK_STEPS='gpu-tests mfu-llama-1b nvme-step'",
		    "dry=; measure; echo rc=$?");
	cr_assert(strstr(r.out, "rc=0"), "%s", r.out);
	/* fake-zinc's first call is the Llama step's train: the summary as it stood then */
	seen = tree_file("out/seen-0-train");
	cr_assert(strstr(seen, "gpu-tests "), "no gpu-tests line before the next step: %s", seen);
	cr_assert(strstr(seen, "  test_gpu_kernels: rc 0, Tested: 1 | Passing: 1 | Failing: 0"),
		  "no line for test_gpu_kernels: %s", seen);
	cr_assert(strstr(seen, "  matmul_forward dinp max_abs_err 2e-06 rtol 1e-04 x_tol 0.02"),
		  "the worst CUDA-vs-CPU error is not in the summary yet: %s", seen);
	cr_assert(strstr(seen, "  H2D pinned 50.1 GB/s, pageable 20.3 GB/s (256 MiB)"),
		  "the copy bandwidth is not in the summary yet: %s", seen);
	cr_assert(!strstr(seen, "mfu: llama-1b "), "%s", seen);
	free(seen);
	/* the Llama MFU line before the NVMe step ran: 12.5k tok/s x (6 N + 12 L d T) */
	seen = tree_file("out/seen-1-bench");
	cr_assert(strstr(seen, "  mfu: llama-1b           N 1.03e+09  flops/token 7.31e+09  12500 tok/s  "
			       "MFU 9.2 % of 989 TFLOP/s  dev peak 1.5 MiB"),
		  "no MFU line before the next step: %s", seen);
	sum = tree_file("out/summary.txt");
	cr_assert(strstr(sum, "     max     100.0"), "no NVMe step row: %s", sum);
	cr_assert(strstr(sum, "  pinning (nvme-step): cudaHostRegister of 2.00 GiB in 4.00 s "
			      "(0.5 GiB/s): SLOW (under 2 GiB/s"), "slow pinning not said: %s", sum);
	free(seen);
	free(sum);
}

Test(devcheck, one_budget_cuts_the_steps_in_order_keeping_what_ran, .fini = cleanup)
{
	const char *prev = NULL, *l;
	bool cut = false;
	struct run r;
	char *sum;
	int ran = 0;

	make_tree(true);
	/* a fake clock: every reading 20 s later, so the budget runs out after a few steps */
	run_sourced(&r, "",
		    "echo 0 > clk; now() { local t; t=$(cat clk); echo $((t + 20)) > clk; echo $t; }; "
		    "t0=0; budget_s=300; dry=; measure; echo rc=$?");
	sum = tree_file("out/summary.txt");
	for (int i = 0; i < N_STEPS; i++) {
		l = step_line(sum, measure_order[i]);
		cr_assert(l, "no line for step %s: %s", measure_order[i], sum);
		cr_assert(!prev || l > prev, "%s is out of order: %s", measure_order[i], sum);
		prev = l;
		if (strncmp(l + 23, "SKIP (budget spent)", 19) == 0) {
			cut = true;
			continue;
		}
		cr_assert(!cut, "%s ran after the budget was spent: %s", measure_order[i], sum);
		ran++;
	}
	cr_assert(cut && ran >= 2, "%d steps ran, cut %d: %s", ran, cut, sum);
	/* what ran before the cut is reported */
	cr_assert(strstr(sum, "  H2D pinned 50.1 GB/s"), "%s", sum);
	cr_assert(strstr(sum, "  mfu: llama-1b  "), "%s", sum);
	free(sum);
}

/* fetch-debs.sh into dir unless it holds a .deb for every package of debs.list and no
 * other; 0 when ready */
static int debs_ready(const char *dir, struct run *r)
{
	char cmd[4096];

	snprintf(cmd, sizeof(cmd),
		 "cd %s && m=$(ZN_DEBS=%s bash -c '. scripts/device/gpu-check.sh && debs_missing && "
		 "debs_extra') && "
		 "{ [ -z \"$m\" ] || timeout 600 scripts/device/fetch-debs.sh %s; } 2>&1",
		 ZN_TEST_SRC_DIR, dir, dir);
	run_cmd(r, cmd);
	return r->rc;
}

/* A sysroot link out to a library the loader lists is no escape, however ldconfig -p's
 * output is timed: here the library's line comes first and 200000 more follow, so a reader
 * that stops at the match (grep -q) ends ldconfig with SIGPIPE, which under gpu-check's
 * pipefail read as "not listed" and stopped the configure at random under load. */
Test(devcheck, a_listed_library_is_no_escape_whatever_ldconfig_writes, .fini = cleanup)
{
	char env[1024], path[512];
	struct run r;
	FILE *f;

	make_tree(false);
	sh("cd %s && mkdir -p sys/lib && ln -s /lib/x86_64-linux-gnu/libzz.so.1 sys/lib/libzz.so",
	   tree);
	snprintf(path, sizeof(path), "%s/fake/ldconfig", tree);
	f = fopen(path, "w");
	cr_assert(f);
	fprintf(f, "#!/bin/sh\necho 'libzz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/"
		   "libzz.so.1'\nseq 200000\n");
	fclose(f);
	cr_assert_eq(chmod(path, 0755), 0);
	snprintf(env, sizeof(env), "PATH=%s/fake:$PATH ZN_SYSROOT=%s/sys", tree, tree);
	for (int i = 0; i < 20; i++) {
		run_sourced(&r, env, "set -o pipefail; if link_escape $S/lib/libzz.so; then "
				     "echo ESCAPE; else echo listed; fi");
		cr_assert(strstr(r.out, "listed") && !strstr(r.out, "ESCAPE"), "try %d: %s", i,
			  r.out);
	}
}

Test(devcheck, sysroot_configure_from_debs_alone, .timeout = 900, .fini = cleanup)
{
	char dir[512], env[2048];
	struct run r;

	/* the build dir: where this test binary is */
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 32);

	cr_assert_gt(n, 0);
	dir[n] = 0;
	strcpy(strrchr(dir, '/'), "/devcheck-debs");
	if (debs_ready(dir, &r)) {
		if (getenv("ZN_REQUIRE_DEBS"))
			cr_assert_fail("ZN_REQUIRE_DEBS is set but the .debs of debs.list could not "
				       "be downloaded: %s", r.out);
		cr_skip_test("the .debs of scripts/device/debs.list cannot be downloaded here "
			     "(%s): the sysroot configure is not checked (CI sets ZN_REQUIRE_DEBS=1 "
			     "and fails instead)", r.last);
	}
	snprintf(tree, sizeof(tree), "/tmp/zn-test-devcheck-XXXXXX");
	cr_assert(mkdtemp(tree));
	/* the real script in the source tree, a sysroot, build dir and OUT of its own */
	snprintf(env, sizeof(env),
		 "cd %s && env -u ZN_GPU_CHECK_STEPS -u ZN_GPU_CHECK_REUSE ZN_GPU_CHECK_DRY=1 "
		 "ZN_GPU_CHECK_UNTIL=configure ZN_DEBS=%s ZN_SYSROOT=%s/sys ZN_BUILD=%s/build "
		 "OUT=%s/out timeout 600 bash scripts/device/gpu-check.sh 2>&1",
		 ZN_TEST_SRC_DIR, dir, tree, tree, tree);
	run_cmd(&r, env);
	cr_assert_eq(r.rc, 0, "the configure from the .debs alone failed:\n%s", r.out);
	cr_assert(strstr(r.out, "configure: every pkg-config module of CMakeLists.txt from the "
				"sysroot"), "%s", r.out);
	cr_assert(strstr(r.last, "configured from"), "%s", r.out);
	cr_assert(strstr(r.out, "  Criterion       2."), "criterion not found: %s", r.out);
}
