/* include/zinc.h's model and trainer (src/train/api.c), through the public header alone:
 * a run resumed from zn_trainer_save_checkpoint continues with the losses and final
 * weights of the uninterrupted run; zn_trainer_eval is the loss of the same tokens before
 * the step that would train on them; the net may go before its trainer; bad inputs return
 * a code and zn_last_error names what to change. (The losses against zinc train's: tests/install/examples.sh.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinc.h"

#define STEPS 4

static char dir[64];
static char data[128];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_api_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
	snprintf(data, sizeof(data), "%s/data/demo.txt", ZN_TEST_SRC_DIR);
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(train_api, .init = make_dir, .fini = remove_dir, .timeout = 300);

static void host_config(struct zn_config *cfg)
{
	zn_config_defaults(cfg);
	cfg->runtime.device = ZN_DEVICE_HOST;
	cfg->runtime.seed = 11;
}

/* steps first .. STEPS of a tiny GPT-2 (losses[0 .. ) filled), optionally from a
 * checkpoint and saving one after step save_at (0: none); the final weights to `out`. */
static void run(const char *resume, int save_at, float *losses, const char *out)
{
	struct zn_trainer_options o = { .data = data, .steps = STEPS, .resume = resume };
	struct zn_config cfg;
	struct zn_net *net;
	struct zn_trainer *t;
	struct zn_step_stats st;
	char ck[128];
	int rc, n = 0;

	host_config(&cfg);
	cr_assert_eq(zn_net_from_preset(&net, "tiny"), 0, "%s", zn_last_error());
	cr_assert_eq(zn_trainer_create(&t, &cfg, net, &o), 0, "%s", zn_last_error());
	zn_net_destroy(net); /* the trainer keeps what it needs */
	while ((rc = zn_trainer_step(t, &st)) == 0) {
		losses[n++] = st.loss;
		cr_assert_eq(st.step, zn_trainer_steps_done(t));
		if (st.step == save_at) {
			snprintf(ck, sizeof(ck), "%s/ck", dir);
			cr_assert_eq(zn_trainer_save_checkpoint(t, ck), 0, "%s", zn_last_error());
		}
	}
	cr_assert_eq(rc, 1, "step: %d %s", rc, zn_last_error());
	cr_assert_eq(zn_trainer_steps_done(t), STEPS);
	cr_assert_eq(zn_trainer_save_hf(t, out), 0, "%s", zn_last_error());
	zn_trainer_destroy(t);
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;

	cr_assert(f, "open %s", path);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	rewind(f);
	buf = malloc(*len);
	cr_assert(buf && fread(buf, 1, *len, f) == *len);
	fclose(f);
	return buf;
}

Test(train_api, resume_continues_the_run_bit_for_bit)
{
	float whole[STEPS], first[STEPS], rest[STEPS];
	char a[128], b[128], c[128], ck[160];
	size_t la, lb;
	char *wa, *wb;

	snprintf(a, sizeof(a), "%s/whole.safetensors", dir);
	snprintf(b, sizeof(b), "%s/resumed.safetensors", dir);
	snprintf(c, sizeof(c), "%s/first.safetensors", dir);
	run(NULL, 0, whole, a);
	run(NULL, 2, first, c);
	snprintf(ck, sizeof(ck), "%s/ck", dir);
	run(ck, 0, rest, b);
	for (int i = 0; i < STEPS; i++) {
		cr_assert(isfinite(whole[i]));
		cr_expect_eq(first[i], whole[i], "step %d: %.6f vs %.6f", i + 1, first[i], whole[i]);
	}
	/* the resumed run starts after the checkpoint's step 2 */
	for (int i = 0; i < STEPS - 2; i++)
		cr_expect_eq(rest[i], whole[i + 2], "step %d: resumed %.6f, whole %.6f", i + 3,
			     rest[i], whole[i + 2]);
	wa = read_file(a, &la);
	wb = read_file(b, &lb);
	cr_assert_eq(la, lb);
	cr_expect_eq(memcmp(wa, wb, la), 0, "the resumed run's weights differ");
	free(wa);
	free(wb);
}

Test(train_api, eval_is_the_loss_before_the_step)
{
	struct zn_trainer_options o = { .data = data, .val_data = data, .steps = 2,
					.eval_batches = 1 };
	struct zn_config cfg;
	struct zn_net *net;
	struct zn_trainer *t;
	struct zn_step_stats st;
	float before, again;

	host_config(&cfg);
	cr_assert_eq(zn_net_from_preset(&net, "tiny"), 0);
	cr_assert_eq(zn_trainer_create(&t, &cfg, net, &o), 0, "%s", zn_last_error());
	cr_assert_eq(zn_trainer_eval(t, &before), 0, "%s", zn_last_error());
	cr_assert_eq(zn_trainer_eval(t, &again), 0);
	cr_expect_eq(before, again, "eval changed the weights: %.6f then %.6f", before, again);
	/* the same file, from its start: step 1 trains on the batch eval measured */
	cr_assert_eq(zn_trainer_step(t, &st), 0);
	cr_expect(fabsf(st.loss - before) <= 1e-5f * fabsf(before), "eval %.6f, step loss %.6f",
		  before, st.loss);
	cr_assert_eq(zn_trainer_eval(t, &again), 0);
	cr_expect(again < before, "no progress: %.6f then %.6f", before, again);
	zn_trainer_destroy(t);
	zn_net_destroy(net);
}

Test(train_api, errors_are_codes_with_a_message)
{
	struct zn_trainer_options o = { .steps = 2 }; /* no data */
	const char *flags[] = { "--model", "tiny", "--layres", "3" };
	struct zn_config cfg;
	struct zn_net *net = (struct zn_net *)1;
	struct zn_trainer *t = (struct zn_trainer *)1;

	cr_assert_lt(zn_net_from_preset(&net, "gpt5"), 0);
	cr_assert_null(net);
	cr_expect(strstr(zn_last_error(), "gpt5"), "message: '%s'", zn_last_error());
	cr_assert_lt(zn_net_from_flags(&net, 4, flags), 0);
	cr_expect(strstr(zn_last_error(), "--layres"), "message: '%s'", zn_last_error());
	host_config(&cfg);
	cr_assert_eq(zn_net_from_preset(&net, "tiny"), 0);
	cr_assert_eq(zn_trainer_create(&t, &cfg, net, &o), ZN_EUSAGE);
	cr_assert_null(t);
	cr_expect(strstr(zn_last_error(), "options.data"), "message: '%s'", zn_last_error());
	zn_trainer_destroy(NULL);
	zn_net_destroy(net);
	zn_net_destroy(NULL);
}
