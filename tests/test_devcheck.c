/* scripts/device/gpu-check.sh's prerequisite checks (issue 16): each missing prerequisite
 * stops the script with exit 1 and ONE line "gpu-check: STOP: ..." naming it, before any
 * step runs; ZN_GPU_CHECK_DRY=0 forces GPU mode; nvidia-smi is also looked for outside
 * PATH. The script is copied into a temporary tree (it works from its own repository
 * root) and run there under `timeout 30`, so a check that hangs fails instead of blocking. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct run {
	int rc;
	int lines;
	char out[8192];
	char last[1024];
};

static char tree[64];

/* a temporary repository tree with the script, its package list and optionally .debs/ */
static void make_tree(bool debs)
{
	char cmd[4096];

	snprintf(tree, sizeof(tree), "/tmp/zn-test-devcheck-XXXXXX");
	cr_assert(mkdtemp(tree));
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p %s/scripts/device %s/fake %s/empty && cp %s/scripts/device/gpu-check.sh "
		 "%s/scripts/device/debs.list %s/scripts/device/", tree, tree, tree,
		 ZN_TEST_SRC_DIR, ZN_TEST_SRC_DIR, tree);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	if (debs) {
		snprintf(cmd, sizeof(cmd), "mkdir %s/.debs && : > %s/.debs/broken_1_all.deb", tree,
			 tree);
		cr_assert_eq(system(cmd), 0);
	}
}

/* a fake nvidia-smi in tree/fake: `ok` lists a GPU, else fails as a missing driver does */
static void fake_smi(bool ok)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/fake/nvidia-smi", tree);
	f = fopen(path, "w");
	cr_assert(f);
	if (ok)
		fprintf(f, "#!/bin/sh\necho 'GPU 0: Fake H200 (UUID: GPU-0)'\n");
	else
		fprintf(f, "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not "
			   "communicate with the NVIDIA driver.'\nexit 9\n");
	fclose(f);
	cr_assert_eq(chmod(path, 0755), 0);
}

static void run_script(struct run *r, const char *env)
{
	char cmd[4096], line[1024];
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd),
		 "cd %s && env -u ZN_GPU_CHECK_DRY -u ZN_GPU_CHECK_SMI_DIRS OUT=%s/out %s "
		 "timeout 30 bash scripts/device/gpu-check.sh 2>&1", tree, tree, env);
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
	cr_assert_neq(r->rc, 124, "the script hung (killed after 30 s): %s", r->out);
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
	fake_smi(false);
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
	fake_smi(true);
	/* unset ZN_GPU_CHECK_DRY (auto), nvidia-smi only in the extra folder */
	snprintf(env, sizeof(env), "ZN_GPU_CHECK_SMI_DIRS='%s/empty %s/fake'", tree, tree);
	run_script(&r, env);
	cr_assert(strstr(r.out, "gpu-check: GPU mode: GPU 0: Fake H200"), "not GPU mode: %s",
		  r.out);
	/* then it stops at the next missing piece (no nvcc, or the broken .deb) */
	cr_assert_eq(r.rc, 1, "%s", r.out);
	cr_assert(!strncmp(r.last, "gpu-check: STOP: ", 17), "%s", r.out);
}

Test(devcheck, cuda_off_in_the_configure_summary_stops, .fini = cleanup)
{
	char cmd[4096];
	struct run r;
	FILE *f;

	make_tree(true);
	snprintf(cmd, sizeof(cmd), "%s/setup.log", tree);
	f = fopen(cmd, "w");
	cr_assert(f);
	fprintf(f, "-- zinc 0.1.0 configuration\n--   MPI             OFF \n"
		   "--   CUDA            OFF  arch 90\n--   NCCL            OFF \n");
	fclose(f);
	/* sourcing defines the functions and runs nothing */
	snprintf(cmd, sizeof(cmd),
		 "cd %s && OUT=%s/out timeout 30 bash -c '. scripts/device/gpu-check.sh && "
		 "configured_cuda %s/setup.log; echo reached' 2>&1", tree, tree, tree);
	FILE *p = popen(cmd, "r");
	char line[1024];

	cr_assert(p);
	r.lines = 0;
	r.out[0] = 0;
	while (fgets(line, sizeof(line), p)) {
		strncat(r.out, line, sizeof(r.out) - strlen(r.out) - 1);
		snprintf(r.last, sizeof(r.last), "%s", line);
		r.lines++;
	}
	int st = pclose(p);

	r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	assert_stop(&r, 1, "CUDA OFF");
	/* and a summary that says ON passes */
	snprintf(cmd, sizeof(cmd),
		 "cd %s && printf -- '--   CUDA            ON 13.0.88 arch 90\\n' > %s/on.log && "
		 "bash -c '. scripts/device/gpu-check.sh && configured_cuda %s/on.log' 2>&1",
		 tree, tree, tree);
	cr_assert_eq(system(cmd), 0, "a CUDA ON summary was refused");
}
