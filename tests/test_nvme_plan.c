/* One planner with state on nvme: zinc estimate's "memory plan:" line is zinc train's for
 * the optimizer on nvme (the pinned gradient ring), everything on nvme with accumulation,
 * and a LoRA base on nvme; and a tied embedding 16 x a block no longer sizes the
 * optimizer's pinned staging: it stages the state in chunks (plan.h), never more bytes
 * than the state, and the run pins what the plan says. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cli_child.h"
#include "nvme_test_util.h"

#define BASE "--device host --pinned-mem 64M --seq 16 --vocab 256 --model tiny"

/* The estimate's plan line and the run's, for the same flags (with --nvme-path). */
static void same_line(const char *flags)
{
	static char out[1 << 16];
	char dir[ZN_PATH_MAX], args[4096], est[512], run[512];

	nvme_test_dir(dir, sizeof(dir));
	snprintf(args, sizeof(args), "estimate %s --nvme-path %s", flags, dir);
	cr_assert_eq(zt_zinc_out(args, out, sizeof(out)), 0, "zinc %s:\n%s", args, out);
	zt_line(out, "memory plan: ", est, sizeof(est));
	snprintf(args, sizeof(args), "train %s --nvme-path %s --steps 1 --data %s/data/demo.txt",
		 flags, dir, ZN_TEST_SRC_DIR);
	cr_assert_eq(zt_zinc_out(args, out, sizeof(out)), 0, "zinc %s:\n%s", args, out);
	zt_line(out, "memory plan: ", run, sizeof(run));
	nvme_test_rmdir(dir);
	cr_assert_str_eq(est, run, "flags %s", flags);
}

Test(nvme_plan, optimizer_on_nvme_gradient_ring)
{
	same_line(BASE " --zero-stage 3 --offload-optimizer nvme");
}

Test(nvme_plan, all_on_nvme_bf16_accumulation)
{
	same_line(BASE " --zero-stage 3 --offload-optimizer nvme --offload-param nvme --bf16 "
		  "--grad-accum 2 --micro-batch 2");
}

Test(nvme_plan, lora_base_on_nvme)
{
	same_line(BASE " --lora-r 4 --lora-targets c_attn,c_fc --zero-stage 3 "
		  "--offload-optimizer cpu --offload-param nvme");
}

/* A tied embedding of 4096 x 64 (262144 elements) beside two blocks of 49920: the state
 * is master, m, v of every shard; the staging (4 buffers) holds chunks of a quarter of it
 * (the embedding's shard is several chunks), not 4 x the embedding's 12 B x 262144 =
 * 12 MiB it took when sized to the largest layer. */
Test(nvme_plan, tied_embedding_staged_in_chunks)
{
	static char out[1 << 16];
	char dir[ZN_PATH_MAX], args[2048], est[512], run[512];
	cJSON *root, *plan;
	double swap, nvme;

	nvme_test_dir(dir, sizeof(dir));
	snprintf(args, sizeof(args), "estimate --device host --pinned-mem 64M --model tiny "
		 "--vocab 4096 --d-model 64 --seq 16 --zero-stage 2 --offload-optimizer nvme "
		 "--nvme-path %s --json", dir);
	cr_assert_eq(zt_zinc_out(args, out, sizeof(out)), 0, "%s", out);
	root = cJSON_Parse(strchr(out, '{'));
	cr_assert_not_null(root, "%s", out);
	plan = cJSON_GetObjectItem(root, "memory_plan");
	swap = cJSON_GetObjectItem(plan, "pinned_swap_bytes")->valuedouble;
	nvme = cJSON_GetObjectItem(plan, "nvme_bytes")->valuedouble;
	cr_assert_gt(swap, 0);
	cr_assert_leq(swap, nvme, "staging %.0f B for a state of %.0f B", swap, nvme);
	cr_assert_lt(swap, 4.0 * 12 * 262144 / 2, "well under the largest-layer sizing");
	cJSON_Delete(root);
	/* and the run plans and pins the same */
	snprintf(args, sizeof(args), "estimate --device host --pinned-mem 64M --model tiny "
		 "--vocab 4096 --d-model 64 --seq 16 --zero-stage 2 --offload-optimizer nvme "
		 "--nvme-path %s", dir);
	cr_assert_eq(zt_zinc_out(args, out, sizeof(out)), 0, "%s", out);
	zt_line(out, "memory plan: ", est, sizeof(est));
	snprintf(args, sizeof(args), "train --device host --pinned-mem 64M --model tiny "
		 "--vocab 4096 --d-model 64 --seq 16 --zero-stage 2 --offload-optimizer nvme "
		 "--nvme-path %s --steps 2 --data %s/data/demo.txt", dir, ZN_TEST_SRC_DIR);
	cr_assert_eq(zt_zinc_out(args, out, sizeof(out)), 0, "%s", out);
	zt_line(out, "memory plan: ", run, sizeof(run));
	cr_assert_str_eq(est, run);
	nvme_test_rmdir(dir);
}
