/* A checkpoint of NVMe-resident state does not go through host memory: a 24-layer model
 * whose optimizer state and parameters live on NVMe, with a pinned budget of 96 MiB, saves
 * checkpoints of ~228 MB (more than twice the budget), and the run's peak RSS (getrusage of
 * the child, ASan's quarantine off) exceeds that of the same run without checkpoints by far
 * less than one checkpoint, both through copy_file_range and through the staging buffer
 * (ZINC_CKPT_NO_COPY=1). Issue 12: "host memory during a save of a model larger than the
 * pinned budget stays within the plan".
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_child.h"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/var/tmp/zn_test_ckptrss_XXXXXX");
	char nv[128];

	cr_assert(mkdtemp(dir), "mkdtemp");
	snprintf(nv, sizeof(nv), "%s/nv", dir);
	cr_assert_eq(mkdir(nv, 0700), 0, "%s", nv);
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(nvme_ckpt_rss, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* zinc train on NVMe with extra (space-separated words) and env (NAME=VALUE or NULL); its
 * peak RSS in bytes. Asserts it exits 0. */
static long long run_rss(const char *extra, const char *env)
{
	char words[1024];

	snprintf(words, sizeof(words),
		 "train --device host --layers 24 --heads 4 --d-model 256 --vocab 256 --seq 16 "
		 "--micro-batch 1 --steps 2 --lr 1e-3 --dtype fp32 --data %s/data/demo.txt "
		 "--zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path %s/nv "
		 "--pinned-mem 96M %s", ZN_TEST_SRC_DIR, dir, extra);
	return zt_zinc_rss(words, NULL, env);
}

/* the bytes of the regular files in path (one level) */
static long long dir_bytes(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	long long n = 0;

	cr_assert_not_null(d, "%s", path);
	while ((e = readdir(d))) {
		char p[512];
		struct stat st;

		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		if (!stat(p, &st) && S_ISREG(st.st_mode))
			n += st.st_size;
	}
	closedir(d);
	return n;
}

Test(nvme_ckpt_rss, saving_nvme_state_holds_no_checkpoint_in_memory)
{
	const long long budget = 96ll << 20;
	char extra[256], ck[128];
	long long base, copied, staged, bytes;

	base = run_rss("", NULL);
	snprintf(extra, sizeof(extra), "--save-dir %s/a --save-steps 1", dir);
	copied = run_rss(extra, NULL);
	snprintf(extra, sizeof(extra), "--save-dir %s/b --save-steps 1", dir);
	staged = run_rss(extra, "ZINC_CKPT_NO_COPY=1");
	snprintf(ck, sizeof(ck), "%s/a/checkpoint-2", dir);
	bytes = dir_bytes(ck);
	snprintf(ck, sizeof(ck), "%s/b/checkpoint-2", dir);
	cr_assert_eq(dir_bytes(ck), bytes, "both ways save the same bytes");
	cr_assert_gt(bytes, 2 * budget, "the checkpoint (%lld bytes) is over twice the pinned "
		     "budget", bytes);
	cr_expect_lt(copied - base, bytes / 8, "copy_file_range: peak RSS %lld -> %lld bytes, "
		     "checkpoint %lld", base, copied, bytes);
	cr_expect_lt(staged - base, bytes / 8, "staged: peak RSS %lld -> %lld bytes, "
		     "checkpoint %lld", base, staged, bytes);
	printf("peak RSS: no checkpoints %lld, copy_file_range %lld, staged %lld bytes; "
	       "checkpoint %lld bytes, pinned budget %lld\n", base, copied, staged, bytes, budget);
}
