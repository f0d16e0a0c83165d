/* zinc train --save-dir under mpirun, 2 ranks: SIGTERM reaching one rank only
 * (ZINC_TEST_SIGTERM_AT on rank 1) stops both after the same step with exit 0 and a
 * checkpoint holding both rank files; resuming it on 2 ranks saves the bytes a straight
 * 2-rank run saves. Each launch runs under `timeout 120`. Skipped without MPI. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BASE "train --device host --model tiny --vocab 256 --seq 16 --micro-batch 1 " \
	     "--grad-accum 2 --deterministic --zero-stage 2 --offload-optimizer cpu " \
	     "--no-pin-memory --data data/demo.txt "

static char out[1 << 17];

/* "mpirun -np 1 zinc <a> : -np 1 <b_prefix> zinc <a>"; zinc's exit code, output in out */
static int mpmd(const char *b_prefix, const char *a)
{
#ifdef ZN_MPIEXEC
	char cmd[8192];
	size_t n;
	FILE *p;
	int status;

	snprintf(cmd, sizeof(cmd), "cd %s && timeout 120 %s %s -np 1 %s %s : -np 1 %s %s %s 2>&1",
		 ZN_TEST_SRC_DIR, ZN_MPIEXEC, ZN_MPIEXEC_ARGS, ZN_ZINC_EXE, a, b_prefix,
		 ZN_ZINC_EXE, a);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	status = pclose(p);
	cr_assert(WIFEXITED(status), "mpirun did not exit: %s", out);
	cr_assert_neq(WEXITSTATUS(status), 124, "the job hung: %s\n%s", cmd, out);
	return WEXITSTATUS(status);
#else
	(void)b_prefix;
	(void)a;
	cr_skip_test("zinc was built without MPI");
	return -1;
#endif
}

Test(mpi_ckpt, sigterm_on_one_rank_stops_both_and_resumes_exactly)
{
	char d[64] = "/tmp/zn-mpi-ckpt-XXXXXX", a[512], p[256];
	int rc;

	cr_assert_not_null(mkdtemp(d));
	snprintf(a, sizeof(a), BASE "--steps 100 --save-dir %s/ck", d);
	rc = mpmd("env ZINC_TEST_SIGTERM_AT=3", a);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert(strstr(out, "stopped by SIGTERM after step 3: checkpoint"), "%s", out);
	cr_assert_null(strstr(out, "step 4/"), "a rank went on: %s", out);
	for (int r = 0; r < 2; r++) {
		snprintf(p, sizeof(p), "%s/ck/checkpoint-3/rank-%05d-of-00002.bin", d, r);
		cr_assert_eq(access(p, F_OK), 0, "%s missing: %s", p, out);
	}
	snprintf(a, sizeof(a), BASE "--steps 5 --save-final %s/a.safetensors", d);
	cr_assert_eq(mpmd("", a), 0, "%s", out);
	snprintf(a, sizeof(a), BASE "--steps 5 --resume %s/ck --save-final %s/b.safetensors", d, d);
	cr_assert_eq(mpmd("", a), 0, "%s", out);
	cr_assert(strstr(out, "at step 3") && strstr(out, "step 5/5"), "%s", out);
	snprintf(a, sizeof(a), "cmp -s %s/a.safetensors %s/b.safetensors", d, d);
	cr_assert_eq(system(a), 0, "the resumed 2-rank run saved other weights");
	snprintf(a, sizeof(a), "rm -rf '%s'", d);
	cr_assert_eq(system(a), 0);
}
