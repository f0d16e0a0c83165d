/* zinc train --init-from DIR and --save-final DIR stream one layer at a time: the peak RSS
 * (getrusage of the child) of a run that loads and saves a 24-layer model of about 76 MB
 * exceeds that of the same run seeded and not saving by far less than the model (a
 * whole-model host buffer on either side would add all of it), and the reloaded model,
 * saved again after a step at lr 0, is the same file byte for byte; the same for a save
 * to one .safetensors file.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_clistream_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_stream, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* zinc train with the common flags and extra (space-separated words); its peak RSS in
 * bytes. Asserts it exits 0. */
static long long run_rss(const char *extra)
{
	static const char *const common[] = {
		"train", "--device", "host", "--no-pin-memory", "--layers", "24", "--heads", "4",
		"--d-model", "256", "--vocab", "256", "--seq", "16", "--micro-batch", "1",
		"--steps", "1", "--lr", "0", "--data", ZN_TEST_SRC_DIR "/data/demo.txt"
	};
	char words[1024], *argv[64], *save = NULL;
	int argc = 0, status = 0;
	struct rusage ru;
	pid_t pid;

	argv[argc++] = (char *)ZN_ZINC_EXE;
	for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++)
		argv[argc++] = (char *)common[i];
	snprintf(words, sizeof(words), "%s", extra);
	for (char *w = strtok_r(words, " ", &save); w && argc < 63; w = strtok_r(NULL, " ", &save))
		argv[argc++] = w;
	argv[argc] = NULL;
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* under ASan freed blocks sit in a quarantine (256 MB by default) and count as
		 * resident: turn it off so the sanitizer build measures what the plain one does */
		setenv("ASAN_OPTIONS", "quarantine_size_mb=0:thread_local_quarantine_size_kb=0", 1);
		freopen("/dev/null", "w", stdout);
		execv(argv[0], argv);
		_exit(127);
	}
	cr_assert_eq(wait4(pid, &status, 0, &ru), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "zinc train %s: status %d",
		  extra, status);
	return (long long)ru.ru_maxrss * 1024; /* KiB on Linux */
}

static char *read_all(const char *path, long *len)
{
	FILE *f = fopen(path, "rb");
	char *data;
	long n;

	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	data = malloc((size_t)n + 1);
	cr_assert_eq(fread(data, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = n;
	return data;
}

Test(cli_stream, load_and_save_hold_one_layer)
{
	char extra[512], pa[160], pb[160], *da, *db;
	long long base, saved, loaded, one_file, model;
	long na, nb;

	base = run_rss("");
	snprintf(extra, sizeof(extra), "--save-final %s/a", dir);
	saved = run_rss(extra);
	snprintf(extra, sizeof(extra), "--init-from %s/a --save-final %s/b", dir, dir);
	loaded = run_rss(extra);
	snprintf(extra, sizeof(extra), "--init-from %s/a --save-final %s/c.safetensors", dir,
		 dir);
	one_file = run_rss(extra);

	snprintf(pa, sizeof(pa), "%s/a/model.safetensors", dir);
	snprintf(pb, sizeof(pb), "%s/b/model.safetensors", dir);
	da = read_all(pa, &na);
	db = read_all(pb, &nb);
	model = na;
	cr_assert_gt(model, 70ll << 20, "the model file is %lld bytes", model);
	cr_assert_eq(na, nb);
	cr_assert(!memcmp(da, db, (size_t)na), "a reload saved again differs");
	free(da);
	free(db);
	/* one layer is ~3 MB of the model's ~76 MB; a whole-model buffer adds all of it */
	cr_expect_lt(saved - base, model / 4, "saving: peak RSS %lld -> %lld bytes, model %lld",
		     base, saved, model);
	cr_expect_lt(loaded - base, model / 4, "loading and saving: peak RSS %lld -> %lld "
		     "bytes, model %lld", base, loaded, model);
	cr_expect_lt(one_file - base, model / 4, "loading, saving one file: peak RSS %lld -> "
		     "%lld bytes, model %lld", base, one_file, model);
	printf("peak RSS: seeded %lld, seeded+save %lld, load+save %lld, load+save file %lld "
	       "bytes; model %lld\n", base, saved, loaded, one_file, model);
}
