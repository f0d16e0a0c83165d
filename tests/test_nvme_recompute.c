/* Activation checkpoints on nvme (src/sched/recompute.c): bit-identical losses and weights
 * for GPT-2 and Llama at stages 0-3 (with the model states on cpu or nvme too), the device
 * peak within the plan and lower than without by the planned amount, each checkpoint
 * written once and read once per micro-batch, and an injected read or write error on a
 * checkpoint stops the step naming the checkpoint and the swap file. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <errno.h>

#include "engine_recompute.h"
#include "nvme_test_util.h"
#include "sched/engine_impl.h"

static const int everies[] = { 1, 2, 3 };

static void nvme_case(bool llama, int stage, enum zn_offload_device off, int gas)
{
	char dir[ZN_PATH_MAX];
	struct rc_case k = { .llama = llama, .stage = stage, .off = off, .gas = gas,
			     .home = ZN_OFFLOAD_NVME, .nvme_dir = dir };

	nvme_test_dir(dir, sizeof(dir));
	rc_check(k, everies, 3);
	nvme_test_rmdir(dir);
}

Test(nvme_recompute, gpt2_stage0) { nvme_case(false, 0, ZN_OFFLOAD_NONE, 1); }
Test(nvme_recompute, gpt2_stage1_cpu_states) { nvme_case(false, 1, ZN_OFFLOAD_CPU, 1); }
Test(nvme_recompute, gpt2_stage2_accum) { nvme_case(false, 2, ZN_OFFLOAD_NONE, 2); }
Test(nvme_recompute, gpt2_stage3_nvme_states) { nvme_case(false, 3, ZN_OFFLOAD_NVME, 1); }
Test(nvme_recompute, llama_stage0) { nvme_case(true, 0, ZN_OFFLOAD_NONE, 1); }
Test(nvme_recompute, llama_stage1) { nvme_case(true, 1, ZN_OFFLOAD_NONE, 1); }
Test(nvme_recompute, llama_stage2_nvme_states) { nvme_case(true, 2, ZN_OFFLOAD_NVME, 2); }
Test(nvme_recompute, llama_stage3_cpu_states) { nvme_case(true, 3, ZN_OFFLOAD_CPU, 2); }

Test(nvme_recompute, peak_within_plan_on_nvme)
{
	char dir[ZN_PATH_MAX];

	nvme_test_dir(dir, sizeof(dir));
	rc_check_peak(false, ZN_OFFLOAD_NVME, 1, 3, dir);
	rc_check_peak(true, ZN_OFFLOAD_NVME, 2, 0, dir);
	nvme_test_rmdir(dir);
}

/* GPT-2 of 6 layers, every layer: checkpoints 0 .. 3 on nvme (4 KiB each). A step writes
 * 0, 1, 2, 3 (pieces 1-4), then reads 3, 2, 1, 0 (pieces 5-8). */
static void check_fault(uint64_t nth, const char *op, const char *which)
{
	char dir[ZN_PATH_MAX];
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc = rc_gpt2();
	struct rc_case k = { .every = 1, .home = ZN_OFFLOAD_NVME, .nvme_dir = dir };
	struct zn_aio_stats io;
	struct zn_step_stats st;
	struct zn_config c;
	struct zn_engine *e;
	int *tok = et_tokens(3 * ET_B * ET_T, 96, 5), rc;

	nvme_test_dir(dir, sizeof(dir));
	rc_config(&c, &k);
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	cr_assert_eq(zn_engine_step(e, tok, tok + 1, &st), 0, "the unfaulted step trains");
	zn_aio_get_stats(zn_engine_ckpt_aio(e), &io);
	cr_assert_eq(io.bytes_written, 4 * 4096, "4 checkpoints written (%llu bytes)",
		     (unsigned long long)io.bytes_written);
	cr_assert_eq(io.bytes_read, 4 * 4096, "4 checkpoints read back");
	zn_aio_set_fault(zn_engine_ckpt_aio(e), &(struct zn_aio_fault){ .nth = nth, .err = EIO });
	rc = zn_engine_step(e, tok + ET_B * ET_T, tok + ET_B * ET_T + 1, &st);
	cr_assert_eq(rc, -EIO, "the faulted step returns -EIO (got %d)", rc);
	cr_assert(nvme_test_stderr_has(which, op), "the error names the checkpoint and the %s", op);
	cr_assert(nvme_test_stderr_has(which, "zinc-swap-"), "the error names the swap file");
	zn_engine_destroy(e);
	free(tok);
	nvme_test_rmdir(dir);
}

Test(nvme_recompute, read_fault_names_the_file, .init = cr_redirect_stderr)
{
	check_fault(5, "nvme read of", "activation checkpoint 3 (input of layer 4)");
}

Test(nvme_recompute, write_fault_names_the_file, .init = cr_redirect_stderr)
{
	check_fault(2, "nvme write of", "activation checkpoint 1 (input of layer 2)");
}
