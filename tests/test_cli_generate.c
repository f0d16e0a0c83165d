/* zinc generate end to end: a tiny model trained with zinc train to memorize a line says it
 * back greedily (from its --save-final file and from its --save-dir checkpoint, with the
 * layers on the device, streamed from cpu memory and from an nvme file); seeded sampling
 * repeats; a Hugging Face tokenizer's text is its decode of the ids; every bad input is
 * refused with exit 2 and a line naming what to change. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_child.h"
#include "data/tokenizer.h"

#define LINE "hello from zinc, the tiny model. "

static char dir[64];

/* under /var/tmp, not /tmp: the nvme run's frozen store needs O_DIRECT (tmpfs has none) */
static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/var/tmp/zn_cli_gen_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void rm_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

/* runs zinc with the NULL-terminated arguments; stdout to DIR/out, stderr to DIR/err;
 * returns the exit status */
static int zinc(const char *first, ...)
{
	char *argv[64], out[128], err[128];
	int argc = 0, status = 0;
	va_list ap;
	pid_t pid;

	argv[argc++] = (char *)ZN_ZINC_EXE;
	argv[argc++] = (char *)first;
	va_start(ap, first);
	for (char *a = va_arg(ap, char *); a && argc < 63; a = va_arg(ap, char *))
		argv[argc++] = a;
	va_end(ap);
	argv[argc] = NULL;
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(err, sizeof(err), "%s/err", dir);
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		setenv("ASAN_OPTIONS", "quarantine_size_mb=0:thread_local_quarantine_size_kb=0", 1);
		if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static char *file(const char *name)
{
	char p[128];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return zt_read_all(p, NULL);
}

static char *path(const char *name)
{
	static char p[8][128];
	static int k;

	k = (k + 1) % 8;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

static void write_data(const char *name, const char *line, int times)
{
	FILE *f = fopen(path(name), "w");

	cr_assert_not_null(f);
	for (int i = 0; i < times; i++)
		fputs(line, f);
	fclose(f);
}

static void expect_out(const char *want, const char *what)
{
	char *out = file("out");

	cr_expect_str_eq(out, want, "%s", what);
	free(out);
}

Test(cli_generate, greedy_says_back_a_memorized_line_from_file_checkpoint_and_streams)
{
	const char *want = "hello from zinc, the tiny model\n";

	make_dir();
	write_data("mem.txt", LINE, 100);
	cr_assert_eq(zinc("train", "--model", "tiny", "--seq", "32", "--micro-batch", "8",
			  "--data", path("mem.txt"), "--steps", "120", "--lr", "5e-3", "--save-final", path("m.safetensors"), "--save-dir",
			  path("ck"), "--steps-per-print", "500", NULL), 0);
	/* the prompt "hello" then 26 new tokens: the rest of the line */
	cr_assert_eq(zinc("generate", "--init-from", path("m.safetensors"), "--tokenizer", "bytes",
			  "--prompt", "hello", "--max-new-tokens", "26", NULL), 0);
	expect_out(want, "from the --save-final file");
	cr_assert_eq(zinc("generate", "--init-from", path("ck"), "--model", "tiny", "--seq", "32",
			  "--tokenizer",
			  "bytes", "--prompt", "hello", "--max-new-tokens", "26", NULL), 0);
	expect_out(want, "from the --save-dir checkpoint");
	cr_assert_eq(zinc("generate", "--init-from", path("m.safetensors"), "--tokenizer", "bytes",
			  "--prompt", "hello", "--max-new-tokens", "26", "--offload-param", "cpu",
			  "--prefill-chunk", "2", NULL), 0);
	expect_out(want, "streamed from cpu memory, prompt in chunks of 2");
	cr_assert_eq(zinc("generate", "--init-from", path("m.safetensors"), "--tokenizer", "bytes",
			  "--prompt", "hello", "--max-new-tokens", "26", "--offload-param", "nvme",
			  "--nvme-path", dir, "--prefetch-depth", "1", NULL), 0);
	expect_out(want, "streamed from an nvme file");
	char *err = file("err");

	cr_expect(strstr(err, "prefill: 5 tokens") && strstr(err, "decode: 26 tokens") &&
		  strstr(err, "tok/s"), "%s", err);
	cr_expect(strstr(err, "layers on nvme,") && strstr(err, "streamed (1 ahead),") &&
		  strstr(err, "read from nvme"), "%s", err);
	free(err);
	/* --stop: the text ends before the earliest stop string, which is not printed (each
	 * spans several byte tokens) */
	cr_assert_eq(zinc("generate", "--init-from", path("m.safetensors"), "--tokenizer", "bytes",
			  "--prompt", "hello", "--max-new-tokens", "26", "--stop", "zinc", NULL), 0);
	expect_out("hello from \n", "--stop zinc");
	cr_assert_eq(zinc("generate", "--init-from", path("m.safetensors"), "--tokenizer", "bytes",
			  "--prompt", "hello", "--max-new-tokens", "26", "--stop", "tiny", "--stop",
			  ", the", "--print-ids", NULL), 0);
	expect_out("hello from zinc\n", "--stop tiny --stop ', the'");
	err = file("err");
	cr_expect(strstr(err, "decode: 15 tokens"), "the text stops at the stop's last token: %s",
		  err);
	free(err);
	/* stdout and stderr into one file (2>&1): the text has its line, the figures theirs */
	cr_assert_eq(zt_zinc(path("both"), path("both"), "generate", "--init-from",
			     path("m.safetensors"), "--tokenizer", "bytes", "--prompt", "hello",
			     "--max-new-tokens", "26", NULL), 0);
	err = file("both");
	{
		const char *at = strstr(err, want);

		cr_expect(at && (at == err || at[-1] == '\n') &&
			  !strncmp(at + strlen(want), "prefill: ", 9),
			  "the text's line, then the figures: '%s'", err);
	}
	free(err);
	/* a checkpoint records its model: no model flags needed; one that differs is named,
	 * and so is nothing the user did not give */
	cr_assert_eq(zinc("generate", "--init-from", path("ck"), "--tokenizer", "bytes", "--prompt",
			  "hello", "--max-new-tokens", "26", NULL), 0);
	expect_out(want, "from the checkpoint, without model flags");
	cr_expect_eq(zinc("generate", "--init-from", path("ck"), "--model", "tiny", "--seq", "16",
			  "--tokenizer", "bytes", "--prompt", "hello", NULL), 2);
	err = file("err");
	cr_expect(strstr(err, "seq is 16 in this run, 32 in the checkpoint") &&
		  !strstr(err, "--resume"), "%s", err);
	free(err);
	rm_dir();
}

static void tiny_model(void)
{
	write_data("d.txt", LINE, 40);
	cr_assert_eq(zinc("train", "--model", "tiny", "--data", path("d.txt"), "--steps", "2",
			  "--save-final", path("t.safetensors"), NULL), 0);
}

Test(cli_generate, seeded_sampling_repeats)
{
	char *a, *b;

	make_dir();
	tiny_model();
	cr_assert_eq(zinc("generate", "--init-from", path("t.safetensors"), "--tokenizer", "bytes",
			  "--prompt", "he", "--max-new-tokens", "40", "--temperature", "1.5",
			  "--top-k", "100", "--top-p", "0.95", "--seed", "7", NULL), 0);
	a = file("out");
	cr_assert_eq(zinc("generate", "--init-from", path("t.safetensors"), "--tokenizer", "bytes",
			  "--prompt", "he", "--max-new-tokens", "40", "--temperature", "1.5",
			  "--top-k", "100", "--top-p", "0.95", "--seed", "7", "--offload-param",
			  "cpu", NULL), 0);
	b = file("out");
	cr_expect_str_eq(a, b, "seed 7 twice");
	free(b);
	cr_assert_eq(zinc("generate", "--init-from", path("t.safetensors"), "--tokenizer", "bytes",
			  "--prompt", "he", "--max-new-tokens", "40", "--temperature", "1.5",
			  "--top-k", "100", "--top-p", "0.95", "--seed", "8", NULL), 0);
	b = file("out");
	cr_expect_str_neq(a, b, "seeds 7 and 8 gave the same text");
	free(a), free(b);
	rm_dir();
}

/* a GPT-2 with the vocabulary of the gpt2 tokenizer fixture, the tokenizer beside it:
 * what is printed is the prompt, then the decode of the generated ids */
Test(cli_generate, huggingface_tokenizer_beside_the_model)
{
	struct zn_tok *tok;
	char *err, *out, *ids, *text;
	int32_t v[64];
	size_t n = 0, len;
	char cmd[512];

	make_dir();
	write_data("d.txt", LINE, 40);
	cr_assert_eq(mkdir(path("m"), 0755), 0);
	cr_assert_eq(zinc("train", "--model", "tiny", "--vocab", "314", "--padded-vocab", "384",
			  "--data", path("d.txt"),
			  "--steps", "1", "--save-final", path("m/model.safetensors"), NULL), 0);
	snprintf(cmd, sizeof(cmd), "cp %s/tests/ref/tok/gpt2/tokenizer.json %s/m/", ZN_TEST_SRC_DIR,
		 dir);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(zinc("generate", "--init-from", path("m/model.safetensors"), "--prompt",
			  "hello world", "--max-new-tokens", "12", "--temperature", "1",
			  "--ignore-eos", "--print-ids", NULL), 0);
	err = file("err");
	ids = strstr(err, "ids:");
	cr_assert_not_null(ids, "%s", err);
	for (char *p = ids + 4, *end; n < 64; p = end) {
		long x = strtol(p, &end, 10);

		if (end == p)
			break;
		v[n++] = (int32_t)x;
	}
	cr_expect_eq(n, 12);
	cr_assert_eq(zn_tok_load(&tok, path("m/tokenizer.json")), 0);
	cr_assert_eq(zn_tok_decode(tok, v, n, true, false, &text, &len), 0);
	out = file("out");
	cr_expect(!strncmp(out, "hello world", 11) && !strncmp(out + 11, text, len) &&
		  !strcmp(out + 11 + len, "\n"), "printed '%s', the ids decode to '%s'", out, text);
	free(text), free(out), free(err);
	zn_tok_free(tok);
	rm_dir();
}

static void refused(const char *want, const char *first, ...)
{
	char *argv[32], *err;
	int argc = 0, rc;
	va_list ap;

	argv[argc++] = (char *)first;
	va_start(ap, first);
	for (char *a = va_arg(ap, char *); a && argc < 31; a = va_arg(ap, char *))
		argv[argc++] = a;
	va_end(ap);
	while (argc < 32)
		argv[argc++] = NULL;
	rc = zinc("generate", argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6],
		  argv[7], argv[8], argv[9], argv[10], argv[11], NULL);
	err = file("err");
	cr_expect_eq(rc, 2, "%s: exit %d: %s", want, rc, err);
	cr_expect(strstr(err, want), "wanted '%s' in: %s", want, err);
	free(err);
}

Test(cli_generate, bad_inputs_are_refused_naming_what_to_change)
{
	make_dir();
	tiny_model();
	const char *m = path("t.safetensors");

	refused("--init-from PATH is required", "--prompt", "x", NULL);
	refused("--prompt TEXT is required", "--init-from", m, NULL);
	refused("--tokenizer bytes", "--init-from", m, "--prompt", "x", NULL);
	refused("position limit", "--init-from", m, "--tokenizer", "bytes", "--prompt", "x",
		"--max-new-tokens", "64", NULL);
	refused("--top-p", "--init-from", m, "--tokenizer", "bytes", "--prompt", "x", "--top-p",
		"1.5", NULL);
	refused("--temperature", "--init-from", m, "--tokenizer", "bytes", "--prompt", "x",
		"--temperature", "-1", NULL);
	refused("needs --nvme-path", "--init-from", m, "--tokenizer", "bytes", "--prompt", "x",
		"--offload-param", "nvme", NULL);
	refused("--prefetch-depth", "--init-from", m, "--tokenizer", "bytes", "--prompt", "x",
		"--prefetch-depth", "-1", NULL);
	refused("--offload-param 'disk'", "--init-from", m, "--tokenizer", "bytes", "--prompt",
		"x", "--offload-param", "disk", NULL);
	refused("unknown option '--bogus'", "--init-from", m, "--tokenizer", "bytes", "--prompt",
		"x", "--bogus", NULL);
	refused("gives no tokens", "--init-from", m, "--tokenizer", "bytes", "--prompt", "", NULL);
	refused("--max-seq 3 is below", "--init-from", m, "--tokenizer", "bytes", "--prompt",
		"abc", "--max-seq", "3", NULL);
	/* the gpt2 fixture has 314 ids: not this 256-token model's */
	char tk[512];

	snprintf(tk, sizeof(tk), "%s/tests/ref/tok/gpt2/tokenizer.json", ZN_TEST_SRC_DIR);
	refused("another model's tokenizer", "--init-from", m, "--tokenizer", tk, "--prompt", "x",
		NULL);
	rm_dir();
}
