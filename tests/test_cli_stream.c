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

#include "cli_child.h"

static char dir[64];

#define COMMON "train --device host --no-pin-memory --layers 24 --heads 4 --d-model 256 " \
	       "--vocab 256 --seq 16 --micro-batch 1 --steps 1 --lr 0 --data " \
	       ZN_TEST_SRC_DIR "/data/demo.txt"

/* zinc train with the common flags and extra; its peak RSS in bytes */
static long long run_rss(const char *extra)
{
	char words[1024];

	snprintf(words, sizeof(words), "%s %s", COMMON, extra);
	return zt_zinc_rss(words, NULL, NULL);
}

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

Test(cli_stream, load_and_save_hold_one_layer)
{
	char extra[512], pa[160], pb[160], *da, *db;
	long long base, saved, loaded, one_file, model;
	size_t na, nb;

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
	da = zt_read_all(pa, &na);
	db = zt_read_all(pb, &nb);
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
