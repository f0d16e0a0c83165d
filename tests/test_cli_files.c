/* zinc train and bench with hostile files: outputs checked before the first step
 * (missing directory, "", a directory, a symlink at the destination), inputs that are
 * directories or FIFOs refused by name without hanging (--data, --config, --init-from),
 * binary data without a known header, Llama 3 token files, and tokens beyond the
 * vocabulary named with their position. */
#include <criterion/criterion.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_clif_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_files, .init = make_dir, .fini = remove_dir, .timeout = 120);

/* Runs zinc with args (stdout and stderr into out); a hang is cut at 30 s (exit 124). */
static int zinc(char *out, size_t size, const char *fmt, ...)
{
	char args[1024], cmd[1400];
	va_list ap;
	FILE *p;
	size_t n;
	int status;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "timeout 30 %s %s 2>&1 </dev/null", ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const char *at(const char *name)
{
	static char p[4][160];
	static int k;

	k = (k + 1) % 4;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

#define TRAIN "train --device host --model tiny --vocab 256 --seq 16 --micro-batch 2 "

static const char *demo(void)
{
	return ZN_TEST_SRC_DIR "/data/demo.txt";
}

Test(cli_files, save_final_destinations_are_checked_before_the_first_step)
{
	char out[8192];

	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 2 --data %s --save-final %s", demo(),
			  at("missing/model.st")), 2, "%s", out);
	cr_expect(strstr(out, "does not exist") && strstr(out, "missing"), "%s", out);
	cr_expect_null(strstr(out, "step 1/"), "no step was trained: %s", out);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 2 --data %s --save-final ''", demo()),
		     2, "%s", out);
	cr_expect_null(strstr(out, "step 1/"), "%s", out);
	/* a directory is a Hugging Face directory output: its config.json must be writable */
	cr_assert_eq(mkdir(at("hf"), 0755), 0);
	cr_assert_eq(mkdir(at("hf/config.json"), 0755), 0);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 2 --data %s --save-final %s", demo(),
			  at("hf")), 2, "%s", out);
	cr_expect(strstr(out, "config.json") && strstr(out, "directory"), "%s", out);
	cr_assert_eq(symlink("/etc/hostname", at("link.st")), 0);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 2 --data %s --save-final %s", demo(),
			  at("link.st")), 2, "%s", out);
	cr_expect(strstr(out, "symbolic link"), "%s", out);
	cr_expect_null(strstr(out, "step 1/"), "%s", out);
	/* and a good one saves */
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s --save-final %s", demo(),
			  at("ok.st")), 0, "%s", out);
	cr_expect(access(at("ok.st"), R_OK) == 0);
}

Test(cli_files, directories_and_fifos_as_inputs_are_refused_by_name)
{
	char out[8192];

	cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s --config %s", demo(), dir),
		     2, "%s", out);
	cr_expect(strstr(out, dir) && strstr(out, "is a directory"), "--config DIR: %s", out);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s --config %s", demo(),
			  at("fifo")), 2, "%s", out);
	cr_expect(strstr(out, "FIFO"), "--config FIFO: %s", out);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s", at("fifo")), 1, "%s",
		     out);
	cr_expect(strstr(out, at("fifo")) && strstr(out, "FIFO"), "--data FIFO: %s", out);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s", dir), 1, "%s", out);
	cr_expect(strstr(out, dir) && strstr(out, "is a directory"), "--data DIR: %s", out);
	cr_expect_neq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s --init-from %s", demo(),
			   at("fifo")), 0, "%s", out);
	cr_expect(strstr(out, "FIFO"), "--init-from FIFO: %s", out);
	cr_expect_null(strstr(out, "Terminated"), "%s", out);
}

static void write_file(const char *path, const void *a, size_t n, const void *b, size_t m)
{
	FILE *f = fopen(path, "wb");

	cr_assert(f);
	fwrite(a, 1, n, f);
	if (b)
		fwrite(b, 1, m, f);
	fclose(f);
}

Test(cli_files, data_formats_and_tokens_beyond_the_vocabulary)
{
	char out[8192];
	uint32_t tok[400];
	int32_t h[256] = { 20240801, 7, 400 };

	/* a headerless binary file: refused unless --data-format text */
	for (int i = 0; i < 400; i++)
		tok[i] = 0x80808080u + (uint32_t)i;
	write_file(at("raw.bin"), tok, sizeof(tok), NULL, 0);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s", at("raw.bin")), 1, "%s",
		     out);
	cr_expect(strstr(out, "--data-format text"), "%s", out);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s --data-format text",
			  at("raw.bin")), 0, "%s", out);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s --data-format tokens",
			  demo()), 1, "%s", out);
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s --data-format bytes",
			  demo()), 2, "%s", out);

	/* a Llama 3 token file: its tokens are read as uint32 and checked against --vocab */
	for (int i = 0; i < 400; i++)
		tok[i] = (uint32_t)(i % 200);
	tok[123] = 128000;
	write_file(at("l3.bin"), h, sizeof(h), tok, sizeof(tok));
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s", at("l3.bin")), 1, "%s",
		     out);
	cr_expect(strstr(out, "token 128000 at position 123") && strstr(out, "--vocab 128256"),
		  "%s", out);
	tok[123] = 0xfffffff0u;
	write_file(at("l3.bin"), h, sizeof(h), tok, sizeof(tok));
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s", at("l3.bin")), 1, "%s",
		     out);
	cr_expect(strstr(out, "token 4294967280 at position 123"), "%s", out);
	cr_expect_null(strstr(out, "--vocab -"), "no negative vocabulary: %s", out);
	tok[123] = 5;
	write_file(at("l3.bin"), h, sizeof(h), tok, sizeof(tok));
	cr_expect_eq(zinc(out, sizeof(out), TRAIN "--steps 1 --data %s", at("l3.bin")), 0, "%s",
		     out);
}

Test(cli_files, bench_out_is_checked_before_the_benchmark)
{
	char out[8192];

	cr_expect_eq(zinc(out, sizeof(out), "bench nvme --path /tmp --size 4K --out %s",
			  at("no/dir/aio.json")), 2, "%s", out);
	cr_expect(strstr(out, "does not exist"), "%s", out);
	cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
	cr_expect_eq(zinc(out, sizeof(out), "bench nvme --file %s --size 4K", at("fifo")), 1,
		     "%s", out);
	cr_expect(strstr(out, "not a regular file"), "%s", out);
}
