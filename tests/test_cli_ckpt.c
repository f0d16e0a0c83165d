/* zinc train --save-dir / --resume end to end (host device, tiny GPT-2 on data/demo.txt):
 * a stopped and resumed run saves the same bytes as a straight one; bad checkpoints are
 * refused naming the file and nothing is overwritten; a kill -9 at every write, fsync,
 * mkdir and rename of a save (ZINC_CKPT_FAIL_AT) leaves a checkpoint that resumes; SIGTERM
 * finishes the step, saves and exits 0, and the resume matches a straight run. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define FLAGS "--device host --model tiny --vocab 256 --seq 16 --micro-batch 2 " \
	      "--grad-accum 2 --deterministic --zero-stage 3 --offload-optimizer cpu " \
	      "--offload-param cpu --no-pin-memory --lr-schedule WarmupDecayLR " \
	      "--warmup-steps 3 --total-steps 1000 --warmup-max-lr 1e-3 --steps-per-print 1"

static char out[1 << 17];

/* Runs "zinc train FLAGS --data demo.txt <args>" (env: "VAR=value " prefix or ""); the
 * output in out; returns the wait status. */
static int zinc(const char *env, const char *fmt, ...)
{
	char args[2048], cmd[4096];
	va_list ap;
	size_t n;
	FILE *p;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%sexec %s train " FLAGS " --data %s/data/demo.txt %s 2>&1", env,
		 ZN_ZINC_EXE, ZN_TEST_SRC_DIR, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	return pclose(p);
}

static bool ok(int status)
{
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *b;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)n + 1);
	cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	b[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return b;
}

static void same_file(const char *a, const char *b)
{
	size_t na = 0, nb = 0;
	char *x = slurp(a, &na), *y = slurp(b, &nb);

	cr_assert(x && y, "%s or %s missing", a, b);
	cr_assert(na == nb && !memcmp(x, y, na), "%s and %s differ", a, b);
	free(x);
	free(y);
}

static void rmtree(const char *dir)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

static void tmpdir(char *d, size_t n)
{
	snprintf(d, n, "/tmp/zn-cli-ckpt-XXXXXX");
	cr_assert_not_null(mkdtemp(d));
}

Test(cli_ckpt, resume_saves_the_straight_runs_bytes)
{
	char d[64], a[128], b[128], c[128];

	tmpdir(d, sizeof(d));
	snprintf(a, sizeof(a), "%s/a.safetensors", d);
	snprintf(b, sizeof(b), "%s/b.safetensors", d);
	snprintf(c, sizeof(c), "%s/c.safetensors", d);
	cr_assert(ok(zinc("", "--steps 6 --save-final %s", a)), "%s", out);
	cr_assert(ok(zinc("", "--steps 3 --save-dir %s/ck --save-steps 2", d)), "%s", out);
	cr_assert(strstr(out, "checkpoint-2 saved") && strstr(out, "checkpoint-3 saved"), "%s",
		  out);
	/* the save directory (its latest: step 3) and a named checkpoint (step 2) */
	cr_assert(ok(zinc("", "--steps 6 --resume %s/ck --save-final %s", d, b)), "%s", out);
	cr_assert(strstr(out, "resumed from") && strstr(out, "at step 3") &&
		  !strstr(out, "step 3/6") && strstr(out, "step 4/6"), "%s", out);
	cr_assert(ok(zinc("", "--steps 6 --resume-from-checkpoint %s/ck/checkpoint-2 "
			  "--save-final %s", d, c)), "%s", out);
	same_file(a, b);
	same_file(a, c);
	rmtree(d);
}

/* int8 optimizer state: the resume saves the straight run's bytes; a resume with another
 * --optimizer-states is refused (exit 1, as every refused resume) naming both, and writes
 * nothing */
Test(cli_ckpt, int8_states_resume_exactly_and_refuse_another_setting)
{
	char d[64], a[128], b[128];

	tmpdir(d, sizeof(d));
	snprintf(a, sizeof(a), "%s/a.safetensors", d);
	snprintf(b, sizeof(b), "%s/b.safetensors", d);
	cr_assert(ok(zinc("", "--optimizer-states int8 --steps 5 --save-final %s", a)), "%s", out);
	cr_assert(strstr(out, "int8 optimizer states"), "%s", out);
	cr_assert(ok(zinc("", "--optimizer-states int8 --steps 2 --save-dir %s/ck", d)), "%s",
		  out);
	cr_assert(ok(zinc("", "--optimizer-states int8 --steps 5 --resume %s/ck --save-final %s",
			  d, b)), "%s", out);
	same_file(a, b);
	unlink(b);
	cr_assert_eq(WEXITSTATUS(zinc("", "--steps 5 --resume %s/ck --save-final %s", d, b)), 1,
		     "%s", out);
	cr_assert(strstr(out, "optimizer states int8 in the checkpoint, fp32 in this run"), "%s",
		  out);
	cr_assert_eq(access(b, F_OK), -1, "a refused resume wrote %s", b);
	rmtree(d);
}

/* --save-hf-steps: the gathered weights in DIR/hf-<step>, as --save-final writes them */
Test(cli_ckpt, save_hf_steps_writes_the_weights)
{
	char d[64], p[256], q[256];

	tmpdir(d, sizeof(d));
	cr_assert(ok(zinc("", "--steps 4 --save-dir %s/ck --save-hf-steps 2 --save-final %s/fin",
			  d, d)), "%s", out);
	snprintf(p, sizeof(p), "%s/ck/hf-2/model.safetensors", d);
	cr_assert_eq(access(p, F_OK), 0, "%s", out);
	snprintf(p, sizeof(p), "%s/ck/hf-4/model.safetensors", d);
	snprintf(q, sizeof(q), "%s/fin/model.safetensors", d);
	same_file(p, q);
	cr_assert(!ok(zinc("", "--steps 4 --save-hf-steps 2")));
	cr_assert(strstr(out, "--save-hf-steps needs --save-dir"), "%s", out);
	rmtree(d);
}

/* --save-final is atomic: the new file is a new inode renamed over the old one (a second
 * hard link to the old file keeps its bytes whole) and no temporary is left. */
Test(cli_ckpt, save_final_replaces_an_existing_file_whole)
{
	char d[64], f[128], old[128], cmd[512];
	size_t n = 0;
	char *before, *after;
	struct stat st;

	tmpdir(d, sizeof(d));
	snprintf(f, sizeof(f), "%s/w.safetensors", d);
	snprintf(old, sizeof(old), "%s/old.safetensors", d);
	cr_assert(ok(zinc("", "--steps 1 --save-final %s", f)), "%s", out);
	cr_assert_eq(link(f, old), 0);
	before = slurp(old, &n);
	cr_assert(ok(zinc("", "--steps 2 --save-final %s", f)), "%s", out);
	after = slurp(old, &n);
	cr_assert(before && after && !memcmp(before, after, n), "the old file was overwritten");
	cr_assert_eq(stat(old, &st), 0);
	cr_assert_eq(st.st_nlink, 1, "the destination still shares the old inode");
	snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) -eq 2", d);
	cr_assert_eq(system(cmd), 0, "a temporary was left in %s", d);
	free(before);
	free(after);
	rmtree(d);
}

/* A bad --resume changes nothing: the save dir, its latest and --save-final stay as they
 * were; the error names the file and what is wrong. */
Test(cli_ckpt, bad_checkpoints_are_refused_and_nothing_is_overwritten)
{
	char d[64], p[256], *before, *after;
	size_t n1, n2;
	FILE *f;

	tmpdir(d, sizeof(d));
	cr_assert(ok(zinc("", "--steps 2 --save-dir %s/ck", d)), "%s", out);
	snprintf(p, sizeof(p), "%s/ck/latest", d);
	before = slurp(p, &n1);
	/* another model shape */
	cr_assert(!ok(zinc("", "--steps 4 --d-model 32 --heads 2 --resume %s/ck --save-dir %s/ck "
			   "--save-final %s/x.safetensors", d, d, d)));
	cr_assert(strstr(out, "zinc-checkpoint.txt") && strstr(out, "in the checkpoint"), "%s",
		  out);
	/* a flipped byte in the rank file */
	snprintf(p, sizeof(p), "%s/ck/checkpoint-2/rank-00000-of-00001.bin", d);
	f = fopen(p, "r+b");
	cr_assert_not_null(f);
	fseek(f, 4096, SEEK_SET);
	fputc(0x5a ^ fgetc(f), f);
	fclose(f);
	cr_assert(!ok(zinc("", "--steps 4 --resume %s/ck --save-dir %s/ck --save-final "
			   "%s/x.safetensors", d, d, d)));
	cr_assert(strstr(out, "rank-00000-of-00001.bin") && strstr(out, "CRC-32"), "%s", out);
	/* nothing written */
	snprintf(p, sizeof(p), "%s/ck/latest", d);
	after = slurp(p, &n2);
	cr_assert(n1 == n2 && !memcmp(before, after, n1));
	snprintf(p, sizeof(p), "%s/x.safetensors", d);
	cr_assert_neq(access(p, F_OK), 0, "--save-final was written");
	snprintf(p, sizeof(p), "%s/ck/checkpoint-4", d);
	cr_assert_neq(access(p, F_OK), 0);
	/* neither a checkpoint nor a save dir */
	cr_assert(!ok(zinc("", "--steps 4 --resume %s", d)));
	cr_assert(strstr(out, "neither a checkpoint"), "%s", out);
	free(before);
	free(after);
	rmtree(d);
}

/* A resume under another config names each key that differs with both values, and another
 * data file gets a line naming both files' sizes; training goes on. */
Test(cli_ckpt, resume_names_config_and_data_differences)
{
	char d[64], other[128], cmd[2048];

	tmpdir(d, sizeof(d));
	cr_assert(ok(zinc("", "--steps 2 --save-dir %s/ck", d)), "%s", out);
	cr_assert(ok(zinc("", "--steps 2 --resume %s/ck", d)), "%s", out);
	cr_assert(!strstr(out, "--resume: config") && !strstr(out, "differs"), "%s", out);
	cr_assert(ok(zinc("", "--steps 3 --resume %s/ck --steps-per-print 2 --warmup-max-lr 2e-3",
			  d)), "%s", out);
	cr_assert(strstr(out, "config steps_per_print is 1 in the checkpoint"), "%s", out);
	cr_assert(strstr(out, ", 2 in this run"), "%s", out);
	cr_assert(strstr(out, "config scheduler.params.warmup_max_lr is 0.001"), "%s", out);
	cr_assert(!strstr(out, "data file differs"), "%s", out);
	/* the same text with one byte changed: the size is the same, the sampled CRC not */
	snprintf(other, sizeof(other), "%s/other.txt", d);
	snprintf(cmd, sizeof(cmd), "sed '1s/^./X/' %s/data/demo.txt > %s", ZN_TEST_SRC_DIR, other);
	cr_assert_eq(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "exec %s train " FLAGS " --data %s --steps 3 --resume %s/ck "
		 "2>&1", ZN_ZINC_EXE, other, d);
	{
		FILE *p = popen(cmd, "r");
		size_t n = fread(out, 1, sizeof(out) - 1, p);

		out[n] = 0;
		cr_assert(ok(pclose(p)), "%s", out);
	}
	cr_assert(strstr(out, "the data file differs from the one the checkpoint was saved with"),
		  "%s", out);
	cr_assert(strstr(out, "demo.txt: 39458 bytes") && strstr(out, "other.txt: 39458 bytes"),
		  "%s", out);
	rmtree(d);
}

/* A metadata field out of range with a right CRC is refused before any step (exit 1, no
 * "step" line), naming the field. */
Test(cli_ckpt, metadata_out_of_range_is_refused_before_training)
{
	char d[64], cmd[1024];

	tmpdir(d, sizeof(d));
	cr_assert(ok(zinc("", "--steps 2 --save-dir %s/ck", d)), "%s", out);
	/* skipped=3 at step 2, with the CRC line recomputed */
	snprintf(cmd, sizeof(cmd), "cd %s/ck/checkpoint-2 && sed -i -e 's/^skipped=0$/skipped=3/' "
		 "-e '/^crc32=/d' zinc-checkpoint.txt && python3 -c \"import zlib; "
		 "d = open('zinc-checkpoint.txt', 'rb').read(); open('zinc-checkpoint.txt', "
		 "'ab').write(b'crc32=%%08x\\n' %% (zlib.crc32(d) & 0xffffffff))\"", d);
	cr_assert_eq(system(cmd), 0);
	cr_assert(!ok(zinc("", "--steps 4 --resume %s/ck", d)));
	cr_assert(strstr(out, "more skipped steps than steps: skipped"), "%s", out);
	cr_assert(!strstr(out, "step 3/"), "%s", out);
	rmtree(d);
}

/* kill -9 at the k-th file operation of a save, for every k until the save completes */
Test(cli_ckpt, kill_at_every_save_operation_leaves_a_checkpoint)
{
	char d[64], env[64], p[256], a[128], b[128];
	int k, done = 0;

	tmpdir(d, sizeof(d));
	snprintf(a, sizeof(a), "%s/a.safetensors", d);
	snprintf(b, sizeof(b), "%s/b.safetensors", d);
	cr_assert(ok(zinc("", "--steps 6 --save-final %s", a)), "%s", out);
	cr_assert(ok(zinc("", "--steps 2 --save-dir %s/ck", d)), "%s", out);
	for (k = 1; k < 200 && !done; k++) {
		int status;
		bool at4;

		snprintf(env, sizeof(env), "ZINC_CKPT_FAIL_AT=%d ", k);
		status = zinc(env, "--steps 4 --resume %s/ck --save-dir %s/ck", d, d);
		cr_assert((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) || ok(status),
			  "k %d: status 0x%x: %s", k, status, out);
		done = ok(status);
		cr_assert(done || strstr(out, "ZINC_CKPT_FAIL_AT"), "k %d: %s", k, out);
		/* what is there resumes: step 2 (trains 2 more) or step 4 (nothing to train) */
		cr_assert(ok(zinc("", "--steps 4 --resume %s/ck", d)), "k %d: %s", k, out);
		at4 = strstr(out, "no step to train") != NULL;
		cr_assert(at4 || strstr(out, "at step 2"), "k %d: %s", k, out);
		cr_assert(!done || at4, "the completed save is not the latest: %s", out);
		if (at4 && !done) {
			/* a kill after `latest` was written: start the next k from step 2 */
			snprintf(p, sizeof(p), "%s/ck/checkpoint-4", d);
			rmtree(p);
			snprintf(p, sizeof(p), "%s/ck/latest", d);
			FILE *f = fopen(p, "w");

			fputs("checkpoint-2\n", f);
			fclose(f);
		}
	}
	cr_assert(done && k > 10, "the save took %d operations", k - 1);
	cr_assert(ok(zinc("", "--steps 6 --resume %s/ck --save-final %s", d, b)), "%s", out);
	same_file(a, b);
	rmtree(d);
}

/* SIGTERM: the step finishes, a checkpoint is written, exit 0 with the line; the resume
 * to two more steps saves what a straight run of as many steps saves. */
Test(cli_ckpt, sigterm_saves_a_checkpoint_that_resumes_exactly)
{
	char d[64], cmd[1024], a[128], b[128], *stop;
	int fds[2], status, n;
	size_t used = 0;
	pid_t pid;

	tmpdir(d, sizeof(d));
	snprintf(cmd, sizeof(cmd), "exec %s train " FLAGS " --data %s/data/demo.txt --steps "
		 "100000000 --save-dir %s/ck", ZN_ZINC_EXE, ZN_TEST_SRC_DIR, d);
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		close(fds[1]);
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	out[0] = 0;
	for (;;) {
		ssize_t r = read(fds[0], out + used, sizeof(out) - 1 - used);

		if (r <= 0)
			break;
		used += (size_t)r;
		out[used] = 0;
		if (strstr(out, "step 2/") && kill(pid, SIGTERM) == 0)
			break;
	}
	for (;;) {
		ssize_t r = read(fds[0], out + used, sizeof(out) - 1 - used);

		if (r <= 0)
			break;
		used += (size_t)r;
		out[used] = 0;
	}
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(ok(status), "status 0x%x: %s", status, out);
	stop = strstr(out, "stopped by SIGTERM after step ");
	cr_assert_not_null(stop, "%s", out);
	n = atoi(stop + strlen("stopped by SIGTERM after step "));
	cr_assert(n >= 2 && strstr(stop, "--resume"), "%s", out);
	snprintf(a, sizeof(a), "%s/a.safetensors", d);
	snprintf(b, sizeof(b), "%s/b.safetensors", d);
	cr_assert(ok(zinc("", "--steps %d --save-final %s", n + 2, a)), "%s", out);
	cr_assert(ok(zinc("", "--steps %d --resume %s/ck --save-final %s", n + 2, d, b)), "%s",
		  out);
	same_file(a, b);
	rmtree(d);
}
