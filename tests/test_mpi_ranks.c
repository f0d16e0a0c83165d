/* zinc train under mpirun with ranks given different flags (MPMD: "-np 1 zinc A : -np 1
 * zinc A B"): every rank exits 2 naming the first differing key before any work, data files
 * included (compared by size and content, not path); a rank that cannot start (no --data,
 * a data file it cannot read) stops all with 2; a rank that fails after start-up (ENOSPC
 * on its nvme path, a failed collective) or stops responding (SIGSTOP: the others' next
 * collective times out after --comm-timeout, naming it) takes the job down, non-zero, with
 * no swap file left on any rank. Each launch runs under `timeout 120`, so a hang fails the
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

/* rank 1 fails after start-up; every rank's swap directory must be gone. flags: both
 * ranks'. */
static void fails_after_start(const char *b_prefix, const char *b_data, const char *flags,
			      const char *why)
{
	char dir[ZN_PATH_MAX], a[ZN_PATH_MAX + 512], b[ZN_PATH_MAX + 512];
	const char *nv = "--zero-stage 3 --offload-optimizer nvme --offload-param nvme "
			 "--no-pin-memory --steps 1000000 --nvme-path";
	int rc;

	nvme_test_dir(dir, sizeof(dir));
	snprintf(a, sizeof(a), BASE "%s %s %s --data data/demo.txt", nv, dir, flags);
	snprintf(b, sizeof(b), BASE "%s %s %s --data %s", nv, dir, flags, b_data);
	rc = mpmd(a, b_prefix, b);
	cr_assert(rc != 0, "%s: the job should fail: %s", why, out);
	cr_assert(strstr(out, "this rank failed"), "%s: %s", why, out);
	cr_assert_eq(swap_entries(dir), 0, "%s: swap files left under %s: %s", why, dir, out);
	nvme_test_rmdir(dir);
}

Test(mpi_ranks, enospc_on_one_rank_takes_the_job_down)
{
	fails_after_start("env ZINC_SWAP_FAIL_FALLOCATE=ENOSPC", "data/demo.txt", "", "ENOSPC");
	cr_assert(strstr(out, "need ") && strstr(out, "No space left"), "%s", out);
}

/* every rank reads its data files' identity before the agreement: a missing one stops all
 * before any step */
Test(mpi_ranks, a_missing_data_file_on_one_rank_stops_all_with_2)
{
	int rc = mpmd(BASE "--data data/demo.txt", "", BASE "--data data/no-such-file.bin");

	cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "no-such-file.bin") && strstr(out, "rank 1 could not start"), "%s",
		  out);
	cr_assert_null(strstr(out, "step 1/"), "no step may run: %s", out);
}

/* demo.txt with one byte changed at `at` (same size), or an exact copy (at < 0), in a
 * fresh directory under /tmp: path into p */
static void demo_copy(char *p, size_t size, long at)
{
	char dir[] = "/tmp/zn_test_ranks_XXXXXX", *data;
	FILE *f = fopen(ZN_TEST_SRC_DIR "/data/demo.txt", "rb");
	long n;

	cr_assert_not_null(f);
	cr_assert_not_null(mkdtemp(dir));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	data = malloc((size_t)n);
	cr_assert_eq(fread(data, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	if (at >= 0)
		data[at % n] = data[at % n] == 'x' ? 'y' : 'x';
	snprintf(p, size, "%s/demo.txt", dir);
	f = fopen(p, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(data, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	free(data);
}

static void remove_copy(const char *p)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf %.*s", (int)(strrchr(p, '/') - p), p);
	cr_expect_eq(system(cmd), 0);
}

/* Same size, one byte apart (in the middle of the file): every rank stops with 2 before
 * any step, naming the key, both files and their sizes and checksums. */
Test(mpi_ranks, different_data_files_are_named)
{
	char other[128], a[512], b[512];
	int rc;

	demo_copy(other, sizeof(other), 3001);
	snprintf(a, sizeof(a), BASE "--data data/demo.txt");
	snprintf(b, sizeof(b), BASE "--data %s", other);
	rc = mpmd(a, "", b);
	remove_copy(other);
	cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "ranks disagree on train.data: ") && strstr(out, " bytes, crc32c ") &&
		  strstr(out, other) && strstr(out, "(data/demo.txt) on rank 0"), "%s", out);
	cr_assert_null(strstr(out, "step 1/"), "no step may run: %s", out);
}

/* The same bytes at another path: the path is not part of the identity. A different
 * --val-data is named as train.val_data. */
Test(mpi_ranks, the_same_data_at_another_path_trains)
{
	char copy[128], b[512];
	int rc;

	demo_copy(copy, sizeof(copy), -1);
	snprintf(b, sizeof(b), BASE "--data %s", copy);
	rc = mpmd(BASE "--data data/demo.txt", "", b);
	cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "step 2/2 | loss "), "%s", out);
	snprintf(b, sizeof(b), BASE "--data data/demo.txt --val-data %s --eval-steps 1", copy);
	rc = mpmd(BASE "--data data/demo.txt --val-data data/demo.txt --eval-steps 1", "", b);
	cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
	remove_copy(copy);
	demo_copy(copy, sizeof(copy), 10);
	snprintf(b, sizeof(b), BASE "--data data/demo.txt --val-data %s --eval-steps 1", copy);
	rc = mpmd(BASE "--data data/demo.txt --val-data data/demo.txt --eval-steps 1", "", b);
	remove_copy(copy);
	cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "ranks disagree on train.val_data: "), "%s", out);
}

/* Rank 1 stops itself (SIGSTOP) at its 40th collective, a reduce-scatter on the comm
 * stream, or its 1st, the loss all-reduce of step 1 on the calling thread: rank 0's
 * collective times out after --comm-timeout, names rank 1 and the op, and MPI_Abort ends
 * the job (the stopped rank too: the launcher sends SIGCONT and SIGTERM) with no swap file
 * left. Without the timeout the job would wait forever (the test's `timeout 120`). */
Test(mpi_ranks, a_stopped_rank_ends_the_job_naming_it)
{
	/* Open MPI sends SIGKILL 1 s after SIGCONT + SIGTERM; a loaded machine (the suite in
	 * parallel, a sanitizer build) may not schedule the woken rank's clean-up in time */
	setenv("OMPI_MCA_odls_base_sigkill_timeout", "10", 1);
	fails_after_start("env ZINC_COMM_STOP_OP=40", "data/demo.txt", "--comm-timeout 2",
			  "stopped rank, stream op");
	cr_assert(strstr(out, "injected stop in collective #40"), "%s", out);
	cr_assert(strstr(out, "reduce_scatter (MPI_Ireduce_scatter_block) (stream op ") &&
		  strstr(out, "on rank 0 timed out after ") && strstr(out, "(--comm-timeout 2)") &&
		  strstr(out, "rank 1 did not arrive (no answer: stopped"), "%s", out);
	fails_after_start("env ZINC_COMM_STOP_OP=1", "data/demo.txt", "--comm-timeout 2",
			  "stopped rank, host op");
	cr_assert(strstr(out, "all_reduce (MPI_Iallreduce) (host op 1) on rank 0 timed out") &&
		  strstr(out, "rank 1 did not arrive"), "%s", out);
	unsetenv("OMPI_MCA_odls_base_sigkill_timeout");
}

Test(mpi_ranks, a_failed_collective_on_one_rank_takes_the_job_down)
{
	fails_after_start("env ZINC_COMM_FAIL_OP=30", "data/demo.txt", "", "collective");
	cr_assert(strstr(out, "injected fault"), "%s", out);
}
