/* Checkpoints of state homed on nvme (offload_optimizer / offload_param nvme, host device):
 * exact resume at stages 1-3 with accumulation and an LR schedule; SIGTERM during
 * `zinc train` with its stores on nvme saves, exits 0 and leaves no swap file. */
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/wait.h>

#include "ckpt_common.h"
#include "nvme_test_util.h"

static void set_paths(struct zn_config *c, const char *dir)
{
	struct zn_offload_config *o[] = { &c->zero.offload_optimizer, &c->zero.offload_param };

	for (int k = 0; k < 2; k++) {
		o[k]->nvme_path_count = 1;
		snprintf(o[k]->nvme_path[0], ZN_PATH_MAX, "%s", dir);
	}
}

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

static void exact_states(int stage, enum zn_offload_device prm, bool bf16, int k,
			 uint64_t cap, enum zn_optim_states states)
{
	char dir[ZN_PATH_MAX], sd[ZN_PATH_MAX + 16];
	struct zn_config c;

	nvme_test_dir(dir, sizeof(dir));
	ck_config(&c, stage, ZN_OFFLOAD_NVME);
	c.zero.offload_param.device = prm;
	c.precision.bf16 = bf16;
	c.optimizer.states = states;
	c.aio.bandwidth_cap_bytes_per_s = cap;
	set_paths(&c, dir);
	snprintf(sd, sizeof(sd), "%s/save", dir);
	ck_exact(&c, sd, k);
	cr_assert_eq(swap_entries(dir), 0);
	ck_rmtree(dir);
}

static void exact_capped(int stage, enum zn_offload_device prm, bool bf16, int k,
			 uint64_t cap)
{
	exact_states(stage, prm, bf16, k, cap, ZN_STATES_FP32);
}

static void exact(int stage, enum zn_offload_device prm, bool bf16, int k)
{
	exact_capped(stage, prm, bf16, k, 0);
}

/* NVMe at 2 MB/s: the save comes while the last step's write-behind is still writing (the
 * save waits for it before reading the extents or using the staging buffer) */
Test(nvme_ckpt, exact_resume_after_slow_write_behind)
{
	exact_capped(3, ZN_OFFLOAD_NVME, false, 2, 2000000);
}

Test(nvme_ckpt, exact_resume_stage1_optimizer_nvme) { exact(1, ZN_OFFLOAD_NONE, false, 2); }
Test(nvme_ckpt, exact_resume_stage2_optimizer_nvme) { exact(2, ZN_OFFLOAD_NONE, false, 3); }
Test(nvme_ckpt, exact_resume_stage3_optimizer_nvme) { exact(3, ZN_OFFLOAD_CPU, false, 3); }
Test(nvme_ckpt, exact_resume_stage3_all_nvme) { exact(3, ZN_OFFLOAD_NVME, false, 4); }
Test(nvme_ckpt, exact_resume_bf16_stage3_all_nvme) { exact(3, ZN_OFFLOAD_NVME, true, 3); }

/* 16 staging buffers: the state staged in chunks (plan.h), saved and restored chunk by
 * chunk */
Test(nvme_ckpt, exact_resume_state_in_chunks)
{
	char dir[ZN_PATH_MAX], sd[ZN_PATH_MAX + 16];
	struct zn_config c;

	nvme_test_dir(dir, sizeof(dir));
	ck_config(&c, 3, ZN_OFFLOAD_NVME);
	c.zero.offload_param.device = ZN_OFFLOAD_NVME;
	c.precision.bf16 = true;
	c.zero.offload_optimizer.buffer_count = 16;
	set_paths(&c, dir);
	snprintf(sd, sizeof(sd), "%s/save", dir);
	ck_exact(&c, sd, 2);
	cr_assert_eq(swap_entries(dir), 0);
	ck_rmtree(dir);
}

/* compact state in the extents: copied as stored (int8: codes, then block scales) */
Test(nvme_ckpt, exact_resume_int8_states_all_nvme_slow_write_behind)
{
	exact_states(3, ZN_OFFLOAD_NVME, false, 3, 2000000, ZN_STATES_INT8);
}

Test(nvme_ckpt, exact_resume_bf16_states_stage2_optimizer_nvme)
{
	exact_states(2, ZN_OFFLOAD_NONE, true, 2, 0, ZN_STATES_BF16);
}

/* The extents copied file to file (copy_file_range) give the bytes the staging-buffer path
 * (ZINC_CKPT_NO_COPY=1) gives: fp32 state, and int8 (two pieces of each moment: the codes,
 * then the block scales that sit after all of the shard's codes in the extent). */
static void copied_equals_staged(enum zn_optim_states states)
{
	char dir[ZN_PATH_MAX], s1[ZN_PATH_MAX + 16], s2[ZN_PATH_MAX + 16], cmd[3 * ZN_PATH_MAX];
	struct ck_run a = { 0 }, b = { 0 };
	struct zn_gpt2_config mc;
	struct zn_config c;
	uint64_t before;
	int *stream;

	nvme_test_dir(dir, sizeof(dir));
	ck_config(&c, 3, ZN_OFFLOAD_NVME);
	c.optimizer.states = states;
	set_paths(&c, dir);
	et_model(&mc);
	stream = et_tokens(et_stream_len(2, 2, 1, ET_B), mc.vocab, 11);
	snprintf(s1, sizeof(s1), "%s/s1", dir);
	snprintf(s2, sizeof(s2), "%s/s2", dir);
	before = zn_ckpt_nvme_copied_bytes();
	cr_assert_eq(ck_train(&a, &c, stream, 0, 2, NULL, s1), 0);
	cr_assert_gt(zn_ckpt_nvme_copied_bytes(), before, "nothing was copied file to file");
	setenv("ZINC_CKPT_NO_COPY", "1", 1);
	before = zn_ckpt_nvme_copied_bytes();
	cr_assert_eq(ck_train(&b, &c, stream, 0, 2, NULL, s2), 0);
	unsetenv("ZINC_CKPT_NO_COPY");
	cr_assert_eq(zn_ckpt_nvme_copied_bytes(), before);
	snprintf(cmd, sizeof(cmd), "cmp -s %s/checkpoint-2/rank-00000-of-00001.bin "
		 "%s/checkpoint-2/rank-00000-of-00001.bin", s1, s2);
	cr_assert_eq(system(cmd), 0, "the copied and the staged rank files differ");
	ck_run_free(&a);
	ck_run_free(&b);
	free(stream);
	ck_rmtree(dir);
}

Test(nvme_ckpt, copied_extents_equal_the_staged_copy)
{
	copied_equals_staged(ZN_STATES_FP32);
	copied_equals_staged(ZN_STATES_INT8);
}

static char out[1 << 16];

static int run(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	size_t n;

	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	return pclose(p);
}

/* SIGTERM with the stores on nvme: exit 0, a checkpoint, no swap file; resuming it for
 * one more step saves what a straight run saves. */
Test(nvme_ckpt, sigterm_saves_and_removes_the_swap_files)
{
	char dir[ZN_PATH_MAX], flags[2 * ZN_PATH_MAX], cmd[8 * ZN_PATH_MAX];
	char a[ZN_PATH_MAX + 32], b[ZN_PATH_MAX + 32], *stop;
	int fds[2], status, n;
	size_t used = 0;
	pid_t pid;

	nvme_test_dir(dir, sizeof(dir));
	snprintf(flags, sizeof(flags), "--device host --model tiny --vocab 256 --seq 16 "
		 "--micro-batch 2 --grad-accum 2 --deterministic --zero-stage 3 "
		 "--offload-optimizer nvme --offload-param nvme --nvme-path %s --no-pin-memory "
		 "--steps-per-print 1 --data %s/data/demo.txt", dir, ZN_TEST_SRC_DIR);
	snprintf(cmd, sizeof(cmd), "exec %s train %s --steps 100000000 --save-dir %s/ck",
		 ZN_ZINC_EXE, flags, dir);
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		close(fds[1]);
		signal(SIGTERM, SIG_DFL);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	out[0] = 0;
	for (bool sent = false;;) {
		ssize_t r = read(fds[0], out + used, sizeof(out) - 1 - used);

		if (r <= 0)
			break;
		used += (size_t)r;
		out[used] = 0;
		if (!sent && strstr(out, "step 1/")) {
			cr_assert_gt(swap_entries(dir), 0, "no swap store while training");
			sent = kill(pid, SIGTERM) == 0;
		}
	}
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x: %s", status, out);
	cr_assert_eq(swap_entries(dir), 0, "swap files left: %s", out);
	stop = strstr(out, "stopped by SIGTERM after step ");
	cr_assert_not_null(stop, "%s", out);
	n = atoi(stop + strlen("stopped by SIGTERM after step "));
	snprintf(a, sizeof(a), "%s/a.safetensors", dir);
	snprintf(b, sizeof(b), "%s/b.safetensors", dir);
	snprintf(cmd, sizeof(cmd), "exec %s train %s --steps %d --save-final %s 2>&1",
		 ZN_ZINC_EXE, flags, n + 1, a);
	cr_assert_eq(run(cmd), 0, "%s", out);
	snprintf(cmd, sizeof(cmd), "exec %s train %s --steps %d --resume %s/ck --save-final %s "
		 "2>&1", ZN_ZINC_EXE, flags, n + 1, dir, b);
	cr_assert_eq(run(cmd), 0, "%s", out);
	snprintf(cmd, sizeof(cmd), "cmp -s %s %s", a, b);
	cr_assert_eq(system(cmd), 0, "the resumed run saved other weights");
	cr_assert_eq(swap_entries(dir), 0);
	ck_rmtree(dir);
}
