/* docs/finetune.md's worked example, command for command (the same flags): a tiny Llama
 * pretrained by zinc with the ChatML tokenizer fixture, chat data tokenized with SFT masks,
 * LoRA with the frozen base on nvme and checkpoints, stopped by SIGTERM, resumed from the
 * printed hint, generation with the adapter as a chat, zinc merge to a Hugging Face
 * directory and generation from it. Asserted: the resumed run's losses and adapter are a
 * straight run's, bit for bit; the checkpoint is a PEFT adapter directory holding the
 * final adapter; greedy generation with the adapter gives the ids of the merged model,
 * and not the base's. The SIGTERM is zinc's test hook (ZINC_TEST_SIGTERM_AT: the process
 * raises it after that step), so the stop step does not depend on timing. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_child.h"

#define SRC ZN_TEST_SRC_DIR
#define TARGETS "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
/* docs/finetune.md's LoRA command, its outputs' names as %s/... (the run's directory) */
#define LORA "--init-from %s/base --data %s/chats.bin --packing documents " \
	     "--micro-batch 4 --steps 100 --lr 5e-3 --lora-r 16 --lora-alpha 32 " \
	     "--lora-targets " TARGETS " --zero-stage 3 --offload-optimizer cpu " \
	     "--offload-param nvme --nvme-path %s/nvme --save-dir %s/%s --save-steps 20 " \
	     "--save-total-limit 2 --save-adapter %s/%s"

static char dir[64];
static char log_a[1 << 16], log_b[1 << 16];

/* under /var/tmp, not /tmp: the base on nvme needs O_DIRECT (tmpfs has none) */
static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/var/tmp/zn_test_finetune_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_finetune, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* zinc with the words (printf format), stdout and stderr into out; asserts exit 0 */
static __attribute__((format(printf, 3, 4))) void zinc(char *out, const char *env,
							  const char *fmt, ...)
{
	char words[4096], log[128];
	char *text;
	int status = 0;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(words, sizeof(words), fmt, ap);
	va_end(ap);
	snprintf(log, sizeof(log), "%s/log", dir);
	zt_zinc_capped(words, log, env, 0, &status);
	text = zt_read_all(log, NULL);
	if (out)
		snprintf(out, sizeof(log_a), "%s", text);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "zinc %s: status %d\n%s",
		  words, status, text);
	free(text);
}

/* dir/a and dir/b hold the same bytes */
static void same_file(const char *a, const char *b)
{
	zt_same_file(dir, a, b);
}

/* docs/finetune.md's chat generation from --init-from dir/model (with --adapter dir/adapter
 * when given): the reply (stdout) into reply and the "ids: ..." line into ids */
static void chat(const char *model, const char *adapter, char *reply, char *ids, size_t size)
{
	char m[128], ad[128], out[128], err[128];
	char *text;
	int rc;

	snprintf(m, sizeof(m), "%s/%s", dir, model);
	snprintf(ad, sizeof(ad), "%s/%s", dir, adapter ? adapter : "");
	snprintf(out, sizeof(out), "%s/gen.out", dir);
	snprintf(err, sizeof(err), "%s/gen.err", dir);
	rc = adapter ?
	     zt_zinc(out, err, "generate", "--init-from", m, "--adapter", ad, "--template",
		     "chatml", "--system", "Answer briefly.", "--prompt", "What is 2 + 2?",
		     "--print-ids", NULL) :
	     zt_zinc(out, err, "generate", "--init-from", m, "--template", "chatml", "--system",
		     "Answer briefly.", "--prompt", "What is 2 + 2?", "--print-ids", NULL);
	text = zt_read_all(err, NULL);
	cr_assert_eq(rc, 0, "generate %s: %s", m, text);
	zt_line(text, "ids:", ids, size);
	/* generate has no --init-adapter or --lora-targets: no line names them */
	cr_assert(!strstr(text, "--init-adapter") && !strstr(text, "--lora-targets"), "%s",
		  text);
	free(text);
	text = zt_read_all(out, NULL);
	snprintf(reply, size, "%s", text);
	free(text);
}

Test(cli_finetune, the_worked_example_runs_as_documented)
{
	char hint[4096], a[256], b[256], base_ids[1024], ad_ids[1024], merged_ids[1024];
	char base_reply[1024], ad_reply[1024], merged_reply[1024], reply[1024], ids[1024];
	char *text;
	const char *h;
	struct stat st;

	/* 1. the base: a tiny Llama pretrained on data/demo.txt, the tokenizer beside it */
	zinc(NULL, NULL, "tokenize --tokenizer " SRC "/tests/ref/tok/qwen2 -o %s/demo.bin "
	     SRC "/data/demo.txt", dir);
	zinc(NULL, NULL, "train --model llama-tiny --vocab 320 --seq 128 --data %s/demo.bin "
	     "--micro-batch 2 --steps 60 --lr 1e-2 --save-final %s/base", dir, dir);
	snprintf(a, sizeof(a), "cp " SRC "/tests/ref/tok/qwen2/tokenizer.json " SRC
		 "/tests/ref/tok/qwen2/tokenizer_config.json %s/base/", dir);
	cr_assert_eq(system(a), 0);
	/* 2. the chats, masked */
	zinc(log_a, NULL, "tokenize --tokenizer %s/base --template chatml -o %s/chats.bin "
	     SRC "/data/chats.jsonl", dir, dir);
	cr_assert(strstr(log_a, "26 of the tokens are labels"), "%s", log_a);
	snprintf(a, sizeof(a), "%s/nvme", dir);
	cr_assert_eq(mkdir(a, 0755), 0);
	/* zinc estimate with the run's command line: the run's memory plan (the budget, the
	 * machine's free memory, aside) */
	zinc(log_a, NULL, "estimate " LORA, dir, dir, dir, dir, "ck0", dir, "A0");
	zt_line(log_a, "memory plan:", a, sizeof(a));
	a[strcspn(a, "(")] = 0;
	/* 3. straight, and stopped by SIGTERM after step 30 */
	zinc(log_a, NULL, "train " LORA, dir, dir, dir, dir, "ck0", dir, "A0");
	zt_line(log_a, "memory plan:", b, sizeof(b));
	cr_assert(!strncmp(a, b, strlen(a)), "estimate: %s\nrun: %s", a, b);
	zinc(log_b, "ZINC_TEST_SIGTERM_AT=30", "train " LORA, dir, dir, dir, dir, "ck", dir,
	     "adapter");
	cr_assert(strstr(log_b, "stopped by SIGTERM after step 30: checkpoint"), "%s", log_b);
	cr_assert(!strstr(log_b, "step 40/100"), "%s", log_b);
	/* 4. the printed hint, as printed */
	h = strstr(log_b, "go on with:\n  zinc ");
	cr_assert_not_null(h, "%s", log_b);
	h += strlen("go on with:\n  zinc ");
	snprintf(hint, sizeof(hint), "%.*s", (int)strcspn(h, "\n"), h);
	zinc(log_b, NULL, "%s", hint);
	cr_assert(strstr(log_b, "resumed from") && strstr(log_b, "at step 30"), "%s", log_b);
	for (int s = 40; s <= 100; s += 10) {
		snprintf(a, sizeof(a), "step %d/100 | loss ", s);
		h = strstr(log_a, a);
		cr_assert_not_null(h, "%s", log_a);
		snprintf(b, sizeof(b), "%.*s", (int)strcspn(h, "|") + 14, h);
		cr_assert(strstr(log_b, b), "resumed run: no '%s' in\n%s", b, log_b);
	}
	same_file("A0/adapter_model.safetensors", "adapter/adapter_model.safetensors");
	/* the newest checkpoint is a PEFT adapter directory with that adapter; the limit of 2
	 * removed the older ones */
	same_file("adapter/adapter_model.safetensors",
		  "ck/checkpoint-100/adapter_model.safetensors");
	same_file("adapter/adapter_config.json", "ck/checkpoint-100/adapter_config.json");
	snprintf(a, sizeof(a), "%s/ck/checkpoint-40", dir);
	cr_assert_neq(stat(a, &st), 0, "--save-total-limit 2 kept checkpoint-40");
	/* 5. generation: the base, the adapter unmerged; zinc merge, the merged directory */
	chat("base", NULL, base_reply, base_ids, sizeof(base_ids));
	chat("base", "adapter", ad_reply, ad_ids, sizeof(ad_ids));
	zinc(log_b, NULL, "merge --init-from %s/base --adapter %s/adapter --output %s/merged",
	     dir, dir, dir);
	cr_assert(strstr(log_b, "merged 14 adapters (r 16, lora_alpha 32: scale 2)"), "%s",
		  log_b);
	snprintf(a, sizeof(a), "%s/merged/tokenizer.json", dir);
	cr_assert_eq(stat(a, &st), 0, "no tokenizer.json in the merged directory");
	chat("merged", NULL, merged_reply, merged_ids, sizeof(merged_ids));
	cr_assert_str_eq(ad_ids, merged_ids, "adapter: %s, merged: %s", ad_ids, merged_ids);
	cr_assert_str_eq(ad_reply, merged_reply);
	cr_assert_str_neq(ad_ids, base_ids, "the adapter changed nothing: %s", ad_ids);
	/* generate refuses the LoRA checkpoint as a model, printing the command that works */
	snprintf(a, sizeof(a), "%s/ck", dir);
	snprintf(b, sizeof(b), "%s/gen.err", dir);
	cr_assert_eq(zt_zinc(NULL, b, "generate", "--init-from", a, "--prompt", "x", NULL), 2);
	text = zt_read_all(b, NULL);
	h = strstr(text, "zinc generate --init-from ");
	cr_assert_not_null(h, "%s", text);
	snprintf(a, sizeof(a), "zinc generate --init-from %s/base --adapter %s/ck/checkpoint-100",
		 dir, dir);
	cr_assert(strstr(h, a) == h, "hint: %s", text);
	free(text);
	chat("base", "ck/checkpoint-100", reply, ids, sizeof(ids));
	cr_assert_str_eq(ids, ad_ids);
	/* the documented reply: "4", then the end of turn, which is not printed */
	cr_assert_str_eq(ad_reply, "4\n", "reply '%s' (ids %s)", ad_reply, ad_ids);
}
