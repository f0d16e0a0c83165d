/* zinc train under mpirun with ranks given different flags (MPMD: "-np 1 zinc A : -np 1
 * zinc A B"): every rank exits 2 naming the first differing key before any work; a rank
 * that cannot start stops all with 2; a rank that fails after start-up (ENOSPC on its nvme
 * path, a missing data file, a failed collective) takes the job down, non-zero, with no
 * swap file left on any rank. Each launch runs under `timeout 120`, so a hang fails the
 * test (status 124) instead of stalling it. Skipped without MPI. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "nvme_test_util.h"

#define BASE "train --device host --model tiny --vocab 256 --seq 16 --steps 2 "

static char out[1 << 17];

static int swap_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += !strncmp(e->d_name, "zinc-swap-", 10) || !strncmp(e->d_name, ".zinc", 5);
	if (d)
		closedir(d);
	return n;
}

/* Runs "mpirun -np 1 zinc <a> : -np 1 <b0> zinc <b>" and returns zinc's exit code (the
 * launcher's), with the output of both ranks in out. */
static int mpmd(const char *a, const char *b_prefix, const char *b)
{
#ifdef ZN_MPIEXEC
	char cmd[8192];
	size_t n;
	FILE *p;
	int status;

	snprintf(cmd, sizeof(cmd), "cd %s && timeout 120 %s %s -np 1 %s %s : -np 1 %s %s %s 2>&1",
		 ZN_TEST_SRC_DIR, ZN_MPIEXEC, ZN_MPIEXEC_ARGS, ZN_ZINC_EXE, a, b_prefix,
		 ZN_ZINC_EXE, b);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	status = pclose(p);
	cr_assert(WIFEXITED(status), "mpirun did not exit: %s", out);
	cr_assert_neq(WEXITSTATUS(status), 124, "the job hung: %s\n%s", cmd, out);
	return WEXITSTATUS(status);
#else
	(void)a;
	(void)b_prefix;
	(void)b;
	cr_skip_test("zinc was built without MPI");
	return -1;
#endif
}

static void disagree(const char *extra, const char *key, const char *values)
{
	int rc = mpmd(BASE "--data data/demo.txt", "", extra);

	cr_assert_eq(rc, 2, "%s: exit %d: %s", extra, rc, out);
	cr_assert(strstr(out, "ranks disagree on ") && strstr(out, key) && strstr(out, values),
		  "%s should be named (%s): %s", key, values, out);
	cr_assert_null(strstr(out, "step 1/"), "no step may run: %s", out);
}

Test(mpi_ranks, the_same_flags_train)
{
	int rc = mpmd(BASE "--data data/demo.txt", "", BASE "--data data/demo.txt");

	cr_assert_eq(rc, 0, "%s", out);
	cr_assert(strstr(out, "step 2/2 | loss "), "%s", out);
}

Test(mpi_ranks, a_different_zero_stage_is_named)
{
	disagree(BASE "--data data/demo.txt --zero-stage 2",
		 "ranks disagree on zero_optimization.stage:", "2 here on rank 1, 0 on rank 0");
}

Test(mpi_ranks, a_different_micro_batch_is_named)
{
	disagree(BASE "--data data/demo.txt --micro-batch 2",
		 "ranks disagree on train_micro_batch_size_per_gpu:", "2 here on rank 1, 1 on rank 0");
}

Test(mpi_ranks, bf16_on_one_rank_is_named)
{
	disagree(BASE "--data data/demo.txt --bf16", "ranks disagree on bf16.enabled:",
		 "true here on rank 1, false on rank 0");
}

Test(mpi_ranks, different_steps_seq_and_model_are_named)
{
	disagree(BASE "--data data/demo.txt --steps 3", "ranks disagree on train.steps:",
		 "3 here on rank 1, 2 on rank 0");
	disagree(BASE "--data data/demo.txt --seq 8", "ranks disagree on model.seq:",
		 "8 here on rank 1, 16 on rank 0");
	disagree(BASE "--data data/demo.txt --d-model 32", "ranks disagree on model.d_model:",
		 "32 here on rank 1, 64 on rank 0");
	disagree(BASE "--data data/demo.txt --grad-clip 1", "ranks disagree on gradient_clipping:",
		 "1 here on rank 1, 0 on rank 0");
}

Test(mpi_ranks, a_rank_without_data_stops_all_with_2)
{
	int rc = mpmd(BASE "--data data/demo.txt", "", BASE);

	cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "--data FILE") && strstr(out, "rank 1 could not start"), "%s", out);
}

/* rank 1 fails after start-up; every rank's swap directory must be gone */
static void fails_after_start(const char *b_prefix, const char *b_data, const char *why)
{
	char dir[ZN_PATH_MAX], a[ZN_PATH_MAX + 512], b[ZN_PATH_MAX + 512];
	const char *nv = "--zero-stage 3 --offload-optimizer nvme --offload-param nvme "
			 "--no-pin-memory --steps 1000000 --nvme-path";
	int rc;

	nvme_test_dir(dir, sizeof(dir));
	snprintf(a, sizeof(a), BASE "%s %s --data data/demo.txt", nv, dir);
	snprintf(b, sizeof(b), BASE "%s %s --data %s", nv, dir, b_data);
	rc = mpmd(a, b_prefix, b);
	cr_assert(rc != 0, "%s: the job should fail: %s", why, out);
	cr_assert(strstr(out, "this rank failed"), "%s: %s", why, out);
	cr_assert_eq(swap_entries(dir), 0, "%s: swap files left under %s: %s", why, dir, out);
	nvme_test_rmdir(dir);
}

Test(mpi_ranks, enospc_on_one_rank_takes_the_job_down)
{
	fails_after_start("env ZINC_SWAP_FAIL_FALLOCATE=ENOSPC", "data/demo.txt", "ENOSPC");
	cr_assert(strstr(out, "need ") && strstr(out, "No space left"), "%s", out);
}

Test(mpi_ranks, a_missing_data_file_on_one_rank_takes_the_job_down)
{
	fails_after_start("", "data/no-such-file.bin", "missing data");
	cr_assert(strstr(out, "no-such-file.bin"), "%s", out);
}

Test(mpi_ranks, a_failed_collective_on_one_rank_takes_the_job_down)
{
	fails_after_start("env ZINC_COMM_FAIL_OP=30", "data/demo.txt", "collective");
	cr_assert(strstr(out, "injected fault"), "%s", out);
}
