/* Counts that overflow or scale memory before the plan refuses them (issue 33, defect 9),
 * through the zinc binary: each is refused with exit 2 and a line naming the count, before
 * memory grows with it (the child's address space is capped at 4 GiB, so a run that tries
 * to allocate in proportion fails instead of taking the machine's memory, and its peak RSS
 * is held to a tiny run's plus 128 MiB); a plan that fits its budget but whose allocation
 * fails is a runtime failure (exit 1) naming what was allocated; budgets beyond the
 * machine's memory get a warning with the machine's figure; --comm-timeout is
 * range-checked. No assertion depends on how long anything took. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_child.h"

#define TRAIN "train --device host --model tiny --vocab 256 --seq 16 --steps 1 --data " \
	      ZN_TEST_SRC_DIR "/data/demo.txt "
#define AS_LIMIT (4ull << 30)
#define RSS_SLACK (128ll << 20)

static char log_path[64];
static char out[1 << 16];

static void make_log(void)
{
	int fd;

	snprintf(log_path, sizeof(log_path), "/tmp/zn_test_counts_XXXXXX");
	fd = mkstemp(log_path);
	cr_assert_geq(fd, 0, "mkstemp");
	close(fd);
}

static void remove_log(void)
{
	unlink(log_path);
}

TestSuite(cli_counts, .init = make_log, .fini = remove_log, .timeout = 300);

/* Runs zinc (address space capped), its output into out; returns the exit code and sets
 * *rss to the peak RSS. */
static int run(const char *words, long long *rss)
{
	int status = 0;
	long long r = zt_zinc_capped(words, log_path, NULL, AS_LIMIT, &status);
	FILE *f = fopen(log_path, "r");
	size_t n;

	cr_assert_not_null(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = 0;
	fclose(f);
	if (rss)
		*rss = r;
	cr_assert(WIFEXITED(status), "zinc %s: killed (status %d): %s", words, status, out);
	return WEXITSTATUS(status);
}

/* The peak RSS of a tiny run of the same binary: the footprint every bound adds to. */
static long long footprint(void)
{
	long long rss = 0;

	cr_assert_eq(run(TRAIN, &rss), 0, "%s", out);
	return rss;
}

Test(cli_counts, tokens_per_step_beyond_an_int_are_refused_before_allocating)
{
	long long base = footprint(), rss = 0;
	int rc = run(TRAIN "--grad-accum 2147483647", &rss);

	cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "gradient_accumulation_steps (--grad-accum) 2147483647") &&
		  strstr(out, "tokens per rank and step"), "%s", out);
	cr_assert_lt(rss, base + RSS_SLACK, "peak RSS %lld, a tiny run's %lld", rss, base);
	rc = run(TRAIN "--micro-batch 65536 --grad-accum 4096", NULL);
	cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "tokens per rank and step"), "%s", out);
}

Test(cli_counts, host_bookkeeping_beyond_the_machine_is_refused_before_allocating)
{
	long long base = footprint(), rss = 0;
	int rc = run(TRAIN "--layers 2000000000", &rss);

	cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "host memory: ") && strstr(out, "2000000002 layers x"), "%s", out);
	cr_assert_lt(rss, base + RSS_SLACK, "peak RSS %lld, a tiny run's %lld", rss, base);
	/* a step's tokens that fit an int but not the machine: 2^31 - 1 tokens x 7 copies */
	rc = run(TRAIN "--seq 1 --grad-accum 2147483647", NULL);
	cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "host memory: ") && strstr(out, "grad-accum 2147483647"), "%s", out);
}

/* A million layers: the plan is made from two numbers per layer and refuses the device
 * budget; the layers' descriptors (a few KiB each, GiBs in all) are never allocated. */
Test(cli_counts, a_million_layers_are_planned_without_their_descriptors)
{
	long long base = footprint(), rss = 0;
	int rc = run(TRAIN "--layers 1000000", &rss);

	cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "device budget") && strstr(out, "is short by"), "%s", out);
	cr_assert_lt(rss, base + RSS_SLACK, "peak RSS %lld, a tiny run's %lld", rss, base);
}

/* zinc estimate's activation lines describe the layers one at a time too. */
Test(cli_counts, estimate_of_many_layers_holds_no_descriptors)
{
	long long base = footprint(), rss = 0;
	int rc = run("estimate --layers 300000 --hidden 64 --heads 1 --vocab 256 --seq 16 "
		     "--micro-batch 1 --json", &rss);

	cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
	cr_assert_lt(rss, base + RSS_SLACK, "peak RSS %lld, a tiny run's %lld", rss, base);
}

/* A plan inside its (too large) budget whose allocation fails: exit 1, naming the part and
 * the bytes, after a warning that the budget is beyond the machine. */
Test(cli_counts, an_allocation_that_fails_is_a_runtime_failure_naming_it)
{
	int rc = run("train --device host --device-mem 100T --vocab 65536 --padded-vocab 65536 "
		     "--d-model 262144 --heads 1024 --layers 2 --seq 16 --steps 1 --data "
		     ZN_TEST_SRC_DIR "/data/demo.txt", NULL);

	cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "--device-mem 102400.00 GiB is more than this machine's memory") &&
		  strstr(out, "GiB MemTotal"), "%s", out);
	cr_assert(strstr(out, "out of host memory allocating 64.02 GiB") &&
		  strstr(out, "out of memory allocating layer 0's parameters"), "%s", out);
}

Test(cli_counts, budgets_beyond_the_machine_are_warned_about)
{
	int rc = run(TRAIN "--pinned-mem 64T", NULL);

	cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "warning: --pinned-mem 65536.00 GiB is more than this machine's "
			      "memory (") && strstr(out, "GiB MemTotal)"), "%s", out);
	rc = run(TRAIN, NULL);
	cr_assert_null(strstr(out, "more than this machine's memory"), "%s", out);
}

Test(cli_counts, comm_timeout_must_be_positive_seconds)
{
	static const char *const bad[] = { "0", "-1", "nan", "inf" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char words[512];
		int rc;

		snprintf(words, sizeof(words), TRAIN "--comm-timeout %s", bad[i]);
		rc = run(words, NULL);
		cr_assert_eq(rc, 2, "--comm-timeout %s: exit %d: %s", bad[i], rc, out);
		cr_assert(strstr(out, "--comm-timeout"), "%s", out);
	}
	cr_assert_eq(run(TRAIN "--comm-timeout 0.5", NULL), 0, "%s", out);
}

/* --epochs over a file of many micro-batches: more steps than an int, refused by name */
Test(cli_counts, epochs_beyond_an_int_of_steps_are_refused)
{
	int rc = run("train --device host --model tiny --vocab 256 --seq 1 --epochs 1000000 "
		     "--data " ZN_TEST_SRC_DIR "/data/demo.txt", NULL);

	cr_assert_neq(rc, 0, "%s", out);
	cr_assert(strstr(out, "--epochs 1000000 x") && strstr(out, "lower --epochs"), "%s", out);
}
