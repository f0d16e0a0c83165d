/* zinc train --epochs, --shuffle and --val-data / --eval-steps / --eval-batches end to
 * end on text data: the step count an epoch implies, a validation line every N steps and
 * after the last with the summary's best and last, a shuffled order that is reproducible
 * and not the file order, and the refusals. (The value of a validation loss against the
 * forward of the same tokens: tests/test_engine_eval.c.) */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char dir[64];

static void make_dir(void)
{
	char cmd[256];

	snprintf(dir, sizeof(dir), "/tmp/zn_test_tev_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
	snprintf(cmd, sizeof(cmd), "head -c 1000 %s/data/demo.txt > %s/t.txt && head -c 1200 "
		 "%s/data/demo.txt | tail -c 600 > %s/v.txt", ZN_TEST_SRC_DIR, dir,
		 ZN_TEST_SRC_DIR, dir);
	cr_assert_eq(system(cmd), 0);
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_train_eval, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* "zinc train <tiny flags> <args>" in dir with env (a "VAR=value " prefix or "") */
static int zinc_env(const char *env, char *out, size_t size, const char *fmt, va_list ap)
{
	char args[1024], cmd[1500];
	FILE *p;
	size_t n;
	int status;

	vsnprintf(args, sizeof(args), fmt, ap);
	snprintf(cmd, sizeof(cmd), "cd %s && OMP_NUM_THREADS=1 %stimeout 100 %s train --device "
		 "host --model tiny --vocab 256 --seq 16 --micro-batch 2 --data t.txt %s 2>&1 "
		 "</dev/null", dir, env, ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int zinc(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = zinc_env("", out, size, fmt, ap);
	va_end(ap);
	return rc;
}

static int zinc_stop_at(int step, char *out, size_t size, const char *fmt, ...)
{
	char env[64];
	va_list ap;
	int rc;

	snprintf(env, sizeof(env), "ZINC_TEST_SIGTERM_AT=%d ", step);
	va_start(ap, fmt);
	rc = zinc_env(env, out, size, fmt, ap);
	va_end(ap);
	return rc;
}

static int count(const char *s, const char *what)
{
	int n = 0;

	for (const char *p = s; (p = strstr(p, what)); p++)
		n++;
	return n;
}

/* the loss printed on step lines, in order, into l (up to max) */
static int losses(const char *out, float *l, int max)
{
	int n = 0;

	for (const char *p = out; n < max && (p = strstr(p, "| loss ")); p++)
		l[n++] = strtof(p + 7, NULL);
	return n;
}

Test(cli_train_eval, epochs_set_the_steps_and_validation_runs_every_n)
{
	static char out[1 << 16];

	/* 1000 bytes: (1000 - 1) / 16 = 62 windows, 31 steps of 2 per epoch */
	cr_assert_eq(zinc(out, sizeof(out), "--epochs 2 --val-data v.txt --eval-steps 20 "
			  "--eval-batches 3 --steps-per-print 1000"), 0, "%s", out);
	cr_expect(strstr(out, "; 62 steps"), "%s", out);
	cr_expect_eq(count(out, "val loss "), 4, "steps 20, 40, 60 and 62: %s", out);
	cr_expect(strstr(out, "| step 62 | 3 batches"), "%s", out);
	const char *sum = strstr(out, "val summary: last ");

	cr_assert(sum, "%s", out);
	float last = strtof(sum + strlen("val summary: last "), NULL);
	const char *b = strstr(sum, "best ");

	cr_assert(b);
	cr_expect_leq(strtof(b + 5, NULL), last);
}

Test(cli_train_eval, shuffle_is_reproducible_and_not_the_file_order)
{
	static char a[1 << 16], b[1 << 16], c[1 << 16];
	float la[8], lb[8], lc[8];

	cr_assert_eq(zinc(a, sizeof(a), "--steps 5 --shuffle --steps-per-print 1"), 0, "%s", a);
	cr_assert_eq(zinc(b, sizeof(b), "--steps 5 --shuffle --steps-per-print 1"), 0, "%s", b);
	cr_assert_eq(zinc(c, sizeof(c), "--steps 5 --steps-per-print 1"), 0, "%s", c);
	cr_assert_eq(losses(a, la, 8), 5, "%s", a);
	cr_assert_eq(losses(b, lb, 8), 5);
	cr_assert_eq(losses(c, lc, 8), 5);
	cr_expect(!memcmp(la, lb, sizeof(float) * 5), "the same seed, the same order");
	cr_expect(memcmp(la, lc, sizeof(float) * 5), "shuffled losses equal the file order's");
}

static char *slurp(const char *name, size_t *len)
{
	char path[128];
	FILE *f;
	char *b;
	long n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)n + 1);
	cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

/* the text from "step N/" on (the step lines after a resume point) */
static const char *from_step(const char *out, int n, int steps)
{
	char key[32];

	snprintf(key, sizeof(key), "step %d/%d |", n, steps);
	return strstr(out, key);
}

/* A run stopped after step 20 (SIGTERM hook, checkpoint in --save-dir) and resumed
 * trains steps 21..40 on the batches the straight run did: 62 windows are 31 data steps
 * of 2 per epoch, 2 data steps (--grad-accum 2) per optimizer step, so the resume lands in
 * the second epoch's permutation (data step 40) and the run crosses into the third. Losses
 * equal to the printed digits and the final weights byte for byte. */
Test(cli_train_eval, shuffled_resume_continues_with_the_same_batches)
{
	static char a[1 << 17], b[1 << 17], c[1 << 17];
	const char *flags = "--shuffle --steps 40 --grad-accum 2 --steps-per-print 1 "
			    "--warmup-steps 3 --total-steps 40 --warmup-max-lr 1e-3";
	size_t na = 0, nb = 0;
	char *wa, *wb;

	cr_assert_eq(zinc(a, sizeof(a), "%s --save-final a.safetensors", flags), 0, "%s", a);
	cr_assert_eq(zinc_stop_at(20, b, sizeof(b), "%s --save-dir ck", flags), 0, "%s", b);
	cr_assert(strstr(b, "stopped by SIGTERM after step 20"), "%s", b);
	cr_assert_eq(zinc(c, sizeof(c), "%s --resume ck --save-final b.safetensors", flags), 0,
		     "%s", c);
	cr_assert(strstr(c, "resumed from") && !from_step(c, 20, 40), "%s", c);
	for (int s = 21; s <= 40; s++) {
		const char *x = from_step(a, s, 40), *y = from_step(c, s, 40);
		float lx, ly;

		cr_assert(x && y, "step %d missing", s);
		lx = strtof(strstr(x, "| loss ") + 7, NULL);
		ly = strtof(strstr(y, "| loss ") + 7, NULL);
		cr_expect_eq(lx, ly, "step %d: straight %.4f, resumed %.4f", s, lx, ly);
	}
	wa = slurp("a.safetensors", &na);
	wb = slurp("b.safetensors", &nb);
	cr_assert(wa && wb);
	cr_expect(na == nb && !memcmp(wa, wb, na), "the final weights differ");
	free(wa);
	free(wb);
}

Test(cli_train_eval, refusals_name_the_flag)
{
	static char out[1 << 16];

	cr_expect_eq(zinc(out, sizeof(out), "--epochs 1 --steps 3"), 2);
	cr_expect(strstr(out, "--epochs and --steps"), "%s", out);
	cr_expect_neq(zinc(out, sizeof(out), "--steps 1 --val-data missing.bin"), 0);
	cr_expect(strstr(out, "missing.bin"), "%s", out);
	cr_expect_eq(zinc(out, sizeof(out), "--steps 1 --eval-steps 0"), 2);
	cr_expect(strstr(out, "--eval-steps"), "%s", out);
}

/* v.txt: 600 bytes, 599 / 17 -> 37 windows of 17 tokens at seq 16. One check counts the
 * whole global batch (micro-batch x accumulation x ranks): short of it by the micro-batch
 * or by the accumulation, the same message (the loader's own check, without the
 * accumulation, used to answer the first). */
Test(cli_train_eval, one_validation_size_check_counts_accumulation)
{
	static char out[1 << 16];

	cr_assert_neq(zinc(out, sizeof(out), "--steps 1 --val-data v.txt --micro-batch 38"), 0,
		      "%s", out);
	cr_assert(strstr(out, "--val-data v.txt: 37 windows of 17 tokens, fewer than one global "
			 "batch of 38 (micro-batch 38 x accumulation 1 x 1 ranks)"), "%s", out);
	cr_assert_neq(zinc(out, sizeof(out), "--steps 1 --val-data v.txt --grad-accum 19"), 0,
		      "%s", out);
	cr_assert(strstr(out, "--val-data v.txt: 37 windows of 17 tokens, fewer than one global "
			 "batch of 38 (micro-batch 2 x accumulation 19 x 1 ranks)"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), "--steps 1 --val-data v.txt --grad-accum 18"), 0,
		     "%s", out);
	cr_assert(strstr(out, "val loss "), "%s", out);
}
