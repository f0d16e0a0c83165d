/* SIGINT, SIGTERM and SIGHUP during `zinc train` with state on nvme (host device): SIGINT
 * and SIGHUP kill the process (the default action, after clean-up), SIGTERM finishes the
 * step and exits 0 (docs/checkpoint.md); none leaves a swap directory or file behind. Also
 * the tracking table itself (core/signals.h). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/signals.h"
#include "nvme_test_util.h"

/* Entries under dir that a swap store made (zinc-swap-* and its temporaries). */
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

struct run {
	pid_t pid;
	int fd;         /* its stdout and stderr */
	size_t used;
	char out[1 << 16];
};

/* Starts zinc train on dir with both offload blocks on nvme (run_id: --run-id, or NULL)
 * and waits for its first step line: the swap stores exist then. */
static void start_run(struct run *r, const char *dir, const char *run_id)
{
	char data[ZN_PATH_MAX];
	int fds[2];

	snprintf(data, sizeof(data), "%s/data/demo.txt", ZN_TEST_SRC_DIR);
	cr_assert_eq(pipe(fds), 0);
	r->pid = fork();
	cr_assert_geq(r->pid, 0);
	if (r->pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		close(fds[1]);
		/* the parent's test runner may ignore or block some: start from the defaults */
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		execl(ZN_ZINC_EXE, "zinc", "train", "--device", "host", "--model", "tiny", "--vocab",
		      "256", "--seq", "16", "--micro-batch", "2", "--steps", "100000000",
		      "--steps-per-print", "1", "--zero-stage", "3", "--offload-optimizer", "nvme",
		      "--offload-param", "nvme", "--nvme-path", dir, "--no-pin-memory", "--data",
		      data, run_id ? "--run-id" : (char *)NULL, run_id, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	r->fd = fds[0];
	r->used = 0;
	r->out[0] = 0;
	while (!strstr(r->out, "step 1/") && r->used + 1 < sizeof(r->out)) {
		ssize_t n = read(r->fd, r->out + r->used, sizeof(r->out) - 1 - r->used);

		if (n <= 0)
			break;
		r->used += (size_t)n;
		r->out[r->used] = 0;
	}
	cr_assert(strstr(r->out, "step 1/"), "zinc train did not reach step 1: %s", r->out);
	cr_assert_gt(swap_entries(dir), 0, "no swap directory while training: %s", r->out);
}

/* Sends sig, reads the rest of the output, returns the wait status. */
static int stop_run(struct run *r, int sig)
{
	int status = 0;

	cr_assert_eq(kill(r->pid, sig), 0);
	/* drain the rest so the child never blocks on a full pipe */
	for (;;) {
		char buf[4096];
		ssize_t n = read(r->fd, buf, sizeof(buf));

		if (n <= 0)
			break;
		if (r->used + (size_t)n + 1 < sizeof(r->out)) {
			memcpy(r->out + r->used, buf, (size_t)n);
			r->used += (size_t)n;
			r->out[r->used] = 0;
		}
	}
	close(r->fd);
	cr_assert_eq(waitpid(r->pid, &status, 0), r->pid);
	return status;
}

static struct run run_a, run_b; /* large: not on the stack */

static void signal_case(int sig, const char *name)
{
	char dir[ZN_PATH_MAX];
	int status;

	nvme_test_dir(dir, sizeof(dir));
	start_run(&run_a, dir, NULL);
	status = stop_run(&run_a, sig);
	if (sig == SIGTERM) {
		/* finishes its step, removes the stores and exits 0 */
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "zinc train should exit 0 after SIGTERM (status 0x%x): %s", status,
			  run_a.out);
		cr_assert(strstr(run_a.out, "stopped by SIGTERM after step"), "no stop line: %s",
			  run_a.out);
	} else {
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == sig,
			  "zinc train should die of %s (status 0x%x): %s", name, status,
			  run_a.out);
		cr_assert(strstr(run_a.out, "swap files removed"), "%s: no clean-up line: %s",
			  name, run_a.out);
	}
	cr_assert_eq(swap_entries(dir), 0, "%s left swap files under %s: %s", name, dir,
		     run_a.out);
	nvme_test_rmdir(dir);
}

Test(nvme_signals, sigterm_removes_the_swap_stores)
{
	signal_case(SIGTERM, "SIGTERM");
}

Test(nvme_signals, sigint_removes_the_swap_stores)
{
	signal_case(SIGINT, "SIGINT");
}

Test(nvme_signals, sighup_removes_the_swap_stores)
{
	signal_case(SIGHUP, "SIGHUP");
}

/* Two runs on one nvme path at once: each has its own run id (p<pid> by default), so the
 * second trains while the first holds its stores; the same --run-id twice is refused with
 * the option named, and the first run's stores are untouched. */
Test(nvme_signals, two_runs_share_an_nvme_path)
{
	char dir[ZN_PATH_MAX];
	int status;

	nvme_test_dir(dir, sizeof(dir));
	start_run(&run_a, dir, NULL);
	start_run(&run_b, dir, NULL);
	cr_assert_eq(swap_entries(dir), 4, "two runs, two stores each");
	status = stop_run(&run_b, SIGINT);
	cr_assert(WIFSIGNALED(status), "%s", run_b.out);
	cr_assert_eq(swap_entries(dir), 2, "the first run's stores should stay: %s", run_b.out);
	status = stop_run(&run_a, SIGINT);
	cr_assert(WIFSIGNALED(status), "%s", run_a.out);
	cr_assert_eq(swap_entries(dir), 0);
	nvme_test_rmdir(dir);
}

Test(nvme_signals, the_same_run_id_twice_on_one_path_is_refused)
{
	char dir[ZN_PATH_MAX], cmd[2 * ZN_PATH_MAX + 512], out[16384];
	size_t n;
	FILE *p;
	int status;

	nvme_test_dir(dir, sizeof(dir));
	start_run(&run_a, dir, "job7");
	snprintf(cmd, sizeof(cmd), "%s train --device host --model tiny --vocab 256 --seq 16 "
		 "--micro-batch 2 --steps 2 --zero-stage 3 --offload-optimizer nvme "
		 "--offload-param nvme --nvme-path %s --no-pin-memory --run-id job7 "
		 "--data %s/data/demo.txt 2>&1", ZN_ZINC_EXE, dir, ZN_TEST_SRC_DIR);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	status = pclose(p);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "%s", out);
	cr_assert(strstr(out, "in use") && strstr(out, "--run-id"), "%s", out);
	cr_assert_eq(swap_entries(dir), 2, "the running job's stores should stay: %s", out);
	cr_assert(strstr(run_a.out, "zinc-swap-job7-"), "swap directory not named by the run "
		  "id: %s", run_a.out);
	status = stop_run(&run_a, SIGINT);
	cr_assert(WIFSIGNALED(status), "%s", run_a.out);
	cr_assert_eq(swap_entries(dir), 0);
	nvme_test_rmdir(dir);
}

/* The table: tracked files and directories go at zn_signals_cleanup(), untracked ones stay. */
Test(nvme_signals, cleanup_removes_tracked_and_keeps_untracked)
{
	char dir[ZN_PATH_MAX], a[ZN_PATH_MAX + 16], b[ZN_PATH_MAX + 16], c[ZN_PATH_MAX + 16];
	int slot, keep;
	struct stat st;
	FILE *f;

	nvme_test_dir(dir, sizeof(dir));
	snprintf(a, sizeof(a), "%s/a", dir);
	snprintf(b, sizeof(b), "%s/a/f", dir);
	snprintf(c, sizeof(c), "%s/c", dir);
	cr_assert_eq(mkdir(a, 0700), 0);
	cr_assert_eq(mkdir(c, 0700), 0);
	f = fopen(b, "w");
	cr_assert_not_null(f);
	fclose(f);
	slot = zn_signals_track(a);
	cr_assert_geq(slot, 0);
	cr_assert_eq(zn_signals_track_file(slot, b), 0);
	keep = zn_signals_track(c);
	cr_assert_geq(keep, 0);
	cr_assert_eq(zn_signals_tracked(), 2);
	zn_signals_untrack(keep);
	zn_signals_cleanup();
	cr_assert_eq(zn_signals_tracked(), 0);
	cr_assert_neq(stat(b, &st), 0, "tracked file %s still there", b);
	cr_assert_neq(stat(a, &st), 0, "tracked directory %s still there", a);
	cr_assert_eq(stat(c, &st), 0, "untracked directory %s was removed", c);
	rmdir(c);
	nvme_test_rmdir(dir);
}

/* A deferred SIGTERM is only recorded (the process lives on); a second one acts: the
 * tracked directory goes and the process dies of SIGTERM. */
Test(nvme_signals, deferred_sigterm_is_recorded_the_second_acts)
{
	char dir[ZN_PATH_MAX], sub[ZN_PATH_MAX + 8];
	struct stat st;
	pid_t pid;
	int status = 0;

	nvme_test_dir(dir, sizeof(dir));
	snprintf(sub, sizeof(sub), "%s/s", dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		signal(SIGTERM, SIG_DFL);
		if (zn_signals_install() || zn_signals_track(sub) < 0)
			_exit(3);
		zn_signals_defer(SIGTERM, true);
		kill(getpid(), SIGTERM);
		for (int i = 0; i < 10000 && !zn_signals_pending(); i++)
			usleep(1000);
		if (zn_signals_pending() != SIGTERM || stat(sub, &st))
			_exit(4); /* not recorded, or acted on at the first */
		kill(getpid(), SIGTERM);
		for (int i = 0; i < 10000; i++)
			usleep(1000);
		_exit(5); /* the second did not end it */
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "status 0x%x", status);
	cr_assert_neq(stat(sub, &st), 0, "the tracked directory should be gone");
	nvme_test_rmdir(dir);
}
