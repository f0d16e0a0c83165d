/* One planner: zinc estimate given zinc train's flags prints the "memory plan:" line that
 * zinc train prints at start-up for the same flags, to the byte, for full and LoRA
 * fine-tunes, cpu offload, accumulation, bf16, activation checkpointing, --init-from and a
 * Llama model (both call zn_engine_plan_memory's code: estimate_plan.c); its --json holds
 * the same line; HF's spellings of train flags get zinc's names suggested. A pinned
 * budget is given so the line's budget figure does not move with the machine's free
 * memory between the two runs. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cli_child.h"

#define BASE "--device host --pinned-mem 64M --seq 16"
#define TINY "--model tiny --vocab 256 " BASE

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_cliplan_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_plan, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* The estimate's plan line and the run's, for the same flags. */
static void same_line(const char *flags)
{
	static char out[1 << 16];
	char args[2048], est[512], run[512];

	snprintf(args, sizeof(args), "estimate %s", flags);
	cr_assert_eq(zt_zinc_out(args, out, sizeof(out)), 0, "zinc %s:\n%s", args, out);
	zt_line(out, "memory plan: ", est, sizeof(est));
	snprintf(args, sizeof(args), "train %s --steps 1 --data %s/data/demo.txt", flags,
		 ZN_TEST_SRC_DIR);
	cr_assert_eq(zt_zinc_out(args, out, sizeof(out)), 0, "zinc %s:\n%s", args, out);
	zt_line(out, "memory plan: ", run, sizeof(run));
	cr_assert_str_eq(est, run, "flags %s", flags);
}

Test(cli_plan, full_fine_tune_stage0) { same_line(TINY " --micro-batch 2"); }

Test(cli_plan, stage2_bf16_accumulation)
{
	same_line(TINY " --zero-stage 2 --bf16 --micro-batch 2 --grad-accum 2");
}

Test(cli_plan, stage3_cpu_offload_checkpoints_in_host_memory)
{
	same_line(TINY " --zero-stage 3 --offload-optimizer cpu --offload-param cpu "
		  "--gradient-checkpointing --checkpoint-device cpu --micro-batch 2");
}

Test(cli_plan, lora_base_in_host_memory_clipped)
{
	same_line(TINY " --lora-r 4 --lora-targets c_attn,c_fc --zero-stage 3 "
		  "--offload-optimizer cpu --offload-param cpu --grad-clip 1");
}

Test(cli_plan, llama_stage1_accumulation_3)
{
	same_line("--model llama-tiny --vocab 256 " BASE " --zero-stage 1 --offload-optimizer cpu "
		  "--grad-accum 3 --dtype bf16");
}

/* --init-from a Hugging Face directory: the model from its config.json, as the run. */
Test(cli_plan, init_from_a_hugging_face_directory)
{
	static char out[1 << 16];
	char args[1024];

	snprintf(args, sizeof(args), "train " TINY " --steps 1 --data %s/data/demo.txt "
		 "--save-final %s/hf", ZN_TEST_SRC_DIR, dir);
	cr_assert_eq(zt_zinc_out(args, out, sizeof(out)), 0, "%s", out);
	snprintf(args, sizeof(args), "--init-from %s/hf " BASE " --zero-stage 3 "
		 "--offload-optimizer cpu --bf16 --lora-r 2 --lora-targets c_attn", dir);
	same_line(args);
}

/* --json: the same line, and the plan's figures beside it. */
Test(cli_plan, json_holds_the_line)
{
	static char out[1 << 16];
	char line[512];
	cJSON *root, *plan;

	cr_assert_eq(zt_zinc_out("estimate " TINY " --zero-stage 3 --offload-optimizer cpu", out,
				 sizeof(out)), 0, "%s", out);
	zt_line(out, "memory plan: ", line, sizeof(line));
	cr_assert_eq(zt_zinc_out("estimate " TINY " --zero-stage 3 --offload-optimizer cpu "
				 "--json 2>/dev/null", out, sizeof(out)), 0, "%s", out);
	root = cJSON_Parse(strchr(out, '{'));
	cr_assert_not_null(root, "%s", out);
	cr_assert_str_eq(cJSON_GetObjectItem(root, "memory_plan_line")->valuestring,
			 strcat(line, "\n"));
	plan = cJSON_GetObjectItem(root, "memory_plan");
	cr_assert_str_eq(cJSON_GetObjectItem(plan, "grad_home")->valuestring,
			 "pinned, held for the step");
	cr_assert(cJSON_IsNull(cJSON_GetObjectItem(root, "refused")));
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "rows")), 14,
		     "stage 0, 1 x 3, 2 x 3, 3 x 5 (offload_param needs the optimizer off too)");
	cJSON_Delete(root);
}

/* A budget the plan does not fit: the line and the run's refusal, exit 0 (an estimate). */
Test(cli_plan, says_the_run_would_be_refused)
{
	static char out[1 << 16];

	cr_assert_eq(zt_zinc_out("estimate " TINY " --device-mem 256K", out, sizeof(out)), 0,
		     "%s", out);
	cr_assert(strstr(out, "\nmemory plan: device "), "%s", out);
	cr_assert(strstr(out, "# zinc train refuses this run: device budget 0.25 MiB is short "
			 "by"), "%s", out);
}

/* Hugging Face's names of train flags: zinc's suggested, in estimate as in train. */
Test(cli_plan, hugging_face_names_suggested)
{
	static char out[1 << 14];

	cr_assert_eq(zt_zinc_out("estimate " TINY " --gradient_accumulation_steps 2", out,
				 sizeof(out)), 2, "%s", out);
	cr_assert(strstr(out, "zinc estimate: unknown option '--gradient_accumulation_steps' "
			 "(did you mean --grad-accum? Hugging Face's "
			 "--gradient-accumulation-steps is zinc's --grad-accum)"), "%s", out);
	cr_assert_eq(zt_zinc_out("estimate " TINY " --nvme-mem 1G", out, sizeof(out)), 2, "%s",
		     out);
	cr_assert(strstr(out, "--nvme-mem is a budget of --fit: add --fit"), "%s", out);
}
