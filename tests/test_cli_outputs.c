/* Hostile file systems around zinc's outputs, end to end through the zinc binary (host
 * device, tiny GPT-2 on data/demo.txt): links planted where a save removes or writes
 * (a stale .tmp-checkpoint-N, checkpoints rotated away or saved again, hf-N,
 * --save-adapter) cost the link, never its target; a second run on a locked --save-dir is
 * refused naming the first; a save that fails (ENOSPC at every operation) leaves no
 * temporary; an output that is an input or another output, however spelled (hard link,
 * symlink, "..", not yet existing), is refused before any work (tokenize, train, bench). */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_child.h"

static char dir[64], out[1 << 16];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_outs_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_outputs, .init = make_dir, .fini = remove_dir, .timeout = 300);

static const char *at(const char *name)
{
	static char p[8][200];
	static int k;

	k = (k + 1) % 8;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

#define TRAIN "train --device host --model tiny --vocab 256 --seq 16 --micro-batch 2 " \
	      "--data " ZN_TEST_SRC_DIR "/data/demo.txt "
#define TOK "tokenize --quiet --tokenizer " ZN_TEST_SRC_DIR "/tests/ref/tok/gpt2 "

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "%s", path);
	fputs(text, f);
	fclose(f);
}

static void expect_text(const char *path, const char *text)
{
	char *have = zt_read_all(path, NULL);

	cr_expect_str_eq(have, text, "%s was changed", path);
	free(have);
}

static bool is_real_dir(const char *path)
{
	struct stat st;

	return !lstat(path, &st) && S_ISDIR(st.st_mode);
}

static bool is_link(const char *path)
{
	struct stat st;

	return !lstat(path, &st) && S_ISLNK(st.st_mode);
}

/* victim/ holds keep.txt: the directory a planted link points at */
static const char *victim(void)
{
	cr_assert_eq(mkdir(at("victim"), 0755), 0);
	put(at("victim/keep.txt"), "keep");
	return at("victim");
}

/* ---- defect 1: removal follows no link ------------------------------------------------ */

Test(cli_outputs, a_stale_temporary_that_is_a_link_goes_without_its_target)
{
	cr_assert_eq(mkdir(at("ck"), 0755), 0);
	cr_assert_eq(symlink(victim(), at("ck/.tmp-checkpoint-2")), 0);
	/* and a stale one that is a directory holding a link to the victim */
	cr_assert_eq(mkdir(at("ck/.tmp-checkpoint-1"), 0755), 0);
	cr_assert_eq(symlink(at("victim"), at("ck/.tmp-checkpoint-1/rank-00000-of-00001.bin")),
		     0);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 2 --save-steps 1 "
				 "--save-dir %s", at("ck")), 0, "%s", out);
	expect_text(at("victim/keep.txt"), "keep");
	cr_expect(is_real_dir(at("ck/checkpoint-1")) && is_real_dir(at("ck/checkpoint-2")), "%s",
		  out);
	cr_expect(!is_link(at("ck/.tmp-checkpoint-2")) && access(at("ck/.tmp-checkpoint-2"), F_OK),
		  "the stale link is gone");
}

Test(cli_outputs, rotation_leaves_a_linked_checkpoint_and_its_target)
{
	cr_assert_eq(mkdir(at("ck"), 0755), 0);
	/* the oldest by its name: rotation would take it first */
	cr_assert_eq(symlink(victim(), at("ck/checkpoint-0")), 0);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 3 --save-steps 1 "
				 "--save-total-limit 1 --save-dir %s", at("ck")), 0, "%s", out);
	expect_text(at("victim/keep.txt"), "keep");
	cr_expect(is_link(at("ck/checkpoint-0")), "a link is not a checkpoint to rotate");
	cr_expect(access(at("ck/checkpoint-1"), F_OK) && access(at("ck/checkpoint-2"), F_OK),
		  "checkpoints 1 and 2 rotated away: %s", out);
	cr_expect(is_real_dir(at("ck/checkpoint-3")));
}

Test(cli_outputs, saving_over_a_linked_checkpoint_keeps_its_target)
{
	cr_assert_eq(mkdir(at("ck"), 0755), 0);
	cr_assert_eq(symlink(victim(), at("ck/checkpoint-2")), 0);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 2 --save-dir %s",
				 at("ck")), 0, "%s", out);
	expect_text(at("victim/keep.txt"), "keep");
	cr_expect(is_real_dir(at("ck/checkpoint-2")), "the checkpoint replaced the link");
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 2 --resume %s", at("ck")),
		     0, "%s", out);
	cr_expect(strstr(out, "no step to train"), "%s", out);
}

/* ---- defect 2: outputs are never written through a link -------------------------------- */

Test(cli_outputs, save_hf_steps_refuses_a_linked_hf_directory)
{
	cr_assert_eq(mkdir(at("ck"), 0755), 0);
	cr_assert_eq(symlink(victim(), at("ck/hf-2")), 0);
	put(at("victim/config.json"), "{\"mine\": 1}");
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 2 --save-dir %s "
				 "--save-hf-steps 2", at("ck")), 2, "%s", out);
	cr_expect(strstr(out, "hf-2") && strstr(out, "symbolic link"), "%s", out);
	cr_expect_null(strstr(out, "step 1/"), "refused before the first step: %s", out);
	expect_text(at("victim/keep.txt"), "keep");
	expect_text(at("victim/config.json"), "{\"mine\": 1}");
	cr_expect(access(at("victim/model.safetensors"), F_OK));
}

Test(cli_outputs, save_adapter_refuses_a_link)
{
	cr_assert_eq(symlink(victim(), at("adapter")), 0);
	cr_assert_neq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 1 --lora-r 2 "
				  "--lora-targets c_attn --save-adapter %s", at("adapter")), 0,
		      "%s", out);
	cr_expect(strstr(out, "--save-adapter") && strstr(out, "symbolic link"), "%s", out);
	cr_expect(access(at("victim/adapter_config.json"), F_OK), "written through the link");
	cr_expect(access(at("victim/adapter_model.safetensors"), F_OK));
}

/* ---- defect 3: one run per save directory --------------------------------------------- */

Test(cli_outputs, a_second_run_on_a_locked_save_dir_is_refused)
{
	char holder[] = "pid 4242 on host elsewhere since 2025-01-01 00:00:00\n";
	int fd;

	cr_assert_eq(mkdir(at("ck"), 0755), 0);
	/* "another run": this process holds the lock as zinc would */
	fd = open(at("ck/.zinc-lock"), O_RDWR | O_CREAT, 0644);
	cr_assert(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
	cr_assert_eq(write(fd, holder, strlen(holder)), (ssize_t)strlen(holder));
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 2 --save-dir %s",
				 at("ck")), 2, "%s", out);
	cr_expect(strstr(out, at("ck")) && strstr(out, "in use by another zinc run") &&
		  strstr(out, "pid 4242 on host elsewhere"), "%s", out);
	cr_expect_null(strstr(out, "step 1/"), "%s", out);
	cr_expect(access(at("ck/.tmp-checkpoint-2"), F_OK) && access(at("ck/latest"), F_OK));
	close(fd); /* that run ends: the directory is free */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 2 --save-dir %s",
				 at("ck")), 0, "%s", out);
	cr_expect(strstr(out, "checkpoint-2 saved"), "%s", out);
}

/* ---- weak spot: a failed save leaves no temporary ------------------------------------- */

Test(cli_outputs, a_save_failing_with_enospc_anywhere_leaves_no_temporary)
{
	char env[128];
	int k, rc = 1;

	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 2 --save-dir %s",
				 at("ck")), 0, "%s", out);
	for (k = 1; k < 400 && rc; k++) {
		snprintf(env, sizeof(env), "ZINC_CKPT_FAIL_AT=%d ZINC_CKPT_FAIL_ERRNO=ENOSPC ", k);
		rc = zt_zinc_run(out, sizeof(out), env, TRAIN "--steps 4 --resume %s --save-dir %s",
				 at("ck"), at("ck"));
		cr_assert(rc == 0 || rc == 1, "k %d: exit %d: %s", k, rc, out);
		cr_assert(rc == 0 || (strstr(out, "No space left") && strstr(out, "not saved")),
			  "k %d: %s", k, out);
		cr_assert(access(at("ck/.tmp-checkpoint-4"), F_OK), "k %d: the partial temporary "
			  "was left: %s", k, out);
		/* what is there resumes: the previous checkpoint or the new one */
		cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 4 --resume %s",
					 at("ck")), 0, "k %d: %s", k, out);
		cr_assert(strstr(out, "at step 2") || strstr(out, "no step to train"), "k %d: %s",
			  k, out);
	}
	cr_expect(rc == 0 && k > 10, "the save took %d operations", k - 1);
}

/* ---- defect 6: outputs against inputs by identity ------------------------------------- */

Test(cli_outputs, tokenize_refuses_an_output_that_is_an_input)
{
	put(at("in.txt"), "Hello world. The source text.");
	cr_assert_eq(link(at("in.txt"), at("hard.txt")), 0);
	cr_assert_eq(symlink(at("in.txt"), at("soft.txt")), 0);
	cr_assert_eq(mkdir(at("sub"), 0755), 0);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TOK "-o %s %s", at("in.txt"),
				 at("in.txt")), 2, "%s", out);
	cr_expect(strstr(out, "same file") && strstr(out, "-o"), "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TOK "-o %s/sub/../in.txt %s", dir,
				 at("in.txt")), 2, "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TOK "-o %s %s", at("hard.txt"),
				 at("in.txt")), 2, "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TOK "-o %s %s", at("in.txt"),
				 at("soft.txt")), 2, "%s", out);
	/* the validation split's name, given or the default OUT_val.bin */
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TOK "-o %s --val-fraction 0.5 "
				 "--val-output %s %s", at("o.bin"), at("hard.txt"), at("in.txt")),
		     2, "%s", out);
	cr_assert_eq(link(at("in.txt"), at("o_val.bin")), 0);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TOK "-o %s --val-fraction 0.5 %s",
				 at("o.bin"), at("in.txt")), 2, "%s", out);
	cr_expect(strstr(out, "--val-output") && strstr(out, "o_val.bin"), "%s", out);
	expect_text(at("in.txt"), "Hello world. The source text.");
	cr_expect(access(at("o.bin"), F_OK), "nothing written");
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TOK "-o %s %s", at("o.bin"),
				 at("in.txt")), 0, "another file is fine: %s", out);
}

Test(cli_outputs, tokenize_refuses_two_splits_in_one_file)
{
	put(at("in.txt"), "Hello world.");
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TOK "-o %s --val-fraction 0.5 "
				 "--val-output %s/./x.bin %s", at("x.bin"), dir, at("in.txt")), 2,
		     "%s", out);
	cr_expect(strstr(out, "overwrite each other"), "%s", out);
	cr_expect(access(at("x.bin"), F_OK), "nothing written");
}

Test(cli_outputs, train_refuses_outputs_over_its_inputs)
{
	put(at("tokens.txt"), "some training text, bytes as tokens, long enough for a batch "
	    "of sixteen-token windows, and then some more of it to be safe.");
	cr_assert_eq(link(at("tokens.txt"), at("hard.safetensors")), 0);
	/* --save-final (a file, or a hard link to the data), --trace: the data file */
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 1 --save-final %s",
				 ZN_TEST_SRC_DIR "/data/demo.txt"), 2, "%s", out);
	cr_expect(strstr(out, "--save-final") && strstr(out, "--data"), "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 1 --val-data %s "
				 "--save-final %s", at("tokens.txt"), at("hard.safetensors")), 2,
		     "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 1 --val-data %s --trace %s",
				 at("tokens.txt"), at("hard.safetensors")), 2, "%s", out);
	/* two outputs on one file */
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 1 --trace %s --save-final "
				 "%s/./t.safetensors", at("t.safetensors"), dir), 2, "%s", out);
	cr_expect(strstr(out, "overwrite each other"), "%s", out);
	expect_text(at("tokens.txt"), "some training text, bytes as tokens, long enough for a "
		    "batch of sixteen-token windows, and then some more of it to be safe.");
}

Test(cli_outputs, train_refuses_outputs_inside_what_it_reads)
{
	/* a model directory to start from */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 1 --save-final %s",
				 at("m")), 0, "%s", out);
	/* the model saved over the one it started from (as save_pretrained allows) is fine;
	 * a single file in its place, or anything else in it, is not */
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 1 --init-from %s "
				 "--save-final %s/", at("m"), at("m")), 0, "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 1 --init-from %s "
				 "--trace %s", at("m"), at("m/config.json")), 2, "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 1 --init-from %s "
				 "--save-final %s", at("m"), at("m/model.safetensors")), 2, "%s",
		     out);
	cr_expect(strstr(out, "lies inside --init-from"), "%s", out);
	/* --init-from a run's hf-2 that this run's --save-hf-steps 2 would write again */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 2 --save-dir %s "
				 "--save-hf-steps 2", at("ck")), 0, "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 2 --init-from %s "
				 "--save-dir %s --save-hf-steps 2", at("ck/hf-2"), at("ck")), 2,
		     "%s", out);
	cr_expect(strstr(out, "lies inside --save-dir"), "%s", out);
	/* the merged model over --init-adapter's weights (refused before they are read) */
	cr_assert_eq(mkdir(at("ad"), 0755), 0);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 1 --lora-r 2 --lora-targets "
				 "c_attn --init-adapter %s --merge-adapter --save-final "
				 "%s/adapter_model.safetensors", at("ad"), at("ad")), 2, "%s", out);
	cr_expect(strstr(out, "--save-final") && strstr(out, "--init-adapter"), "%s", out);
	/* a save directory resumed from and saved to is the normal case */
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", TRAIN "--steps 3 --resume %s --save-dir %s",
				 at("ck"), at("ck")), 0, "%s", out);
}

Test(cli_outputs, bench_outputs_are_not_its_inputs)
{
	put(at("aio.json"), "{\"aio\": {\"block_size\": 1048576}}");
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", "bench nvme --path %s --config %s --out %s",
				 dir, at("aio.json"), at("aio.json")), 2, "%s", out);
	cr_expect(strstr(out, "--out") && strstr(out, "--config"), "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", "bench nvme --file %s --out %s",
				 at("f.bin"), at("f.bin")), 2, "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", "bench step --device host --model tiny "
				 "--zero-stage 1 --offload-optimizer nvme --nvme-path %s --csv %s --trace %s", dir,
				 at("r.csv"), at("r.csv")), 2, "%s", out);
	cr_expect(strstr(out, "overwrite each other"), "%s", out);
	expect_text(at("aio.json"), "{\"aio\": {\"block_size\": 1048576}}");
}
