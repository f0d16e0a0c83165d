/* Checkpoints (src/sched/ckpt*.c), one rank, host device: exact resume at every stage and
 * host offload with accumulation and an LR schedule; re-sharding to another stage;
 * refusals of corrupt, truncated and mismatched checkpoints; rotation. (Kills during a
 * save and signals run the zinc command: tests/test_cli_ckpt.c.) */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <fcntl.h>

#include "ckpt_common.h"
#include "cli_child.h"
#include "sched/ckpt_impl.h"

static void tmpdir(char *out, size_t n)
{
	snprintf(out, n, "/tmp/zn-ckpt-XXXXXX");
	cr_assert_not_null(mkdtemp(out));
}

static void exact_states(int stage, enum zn_offload_device off, int k,
			 enum zn_optim_states states)
{
	struct zn_config c;
	char dir[64], sd[128];

	ck_config(&c, stage, off);
	c.optimizer.states = states;
	tmpdir(dir, sizeof(dir));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	ck_exact(&c, sd, k);
	ck_rmtree(dir);
}

static void exact(int stage, enum zn_offload_device off, int k)
{
	exact_states(stage, off, k, ZN_STATES_FP32);
}

Test(ckpt, exact_resume_stage0) { exact(0, ZN_OFFLOAD_NONE, 2); }
Test(ckpt, exact_resume_stage1) { exact(1, ZN_OFFLOAD_NONE, 3); }
Test(ckpt, exact_resume_stage1_cpu) { exact(1, ZN_OFFLOAD_CPU, 3); }
Test(ckpt, exact_resume_stage2) { exact(2, ZN_OFFLOAD_NONE, 1); }
Test(ckpt, exact_resume_stage2_cpu) { exact(2, ZN_OFFLOAD_CPU, 4); }
Test(ckpt, exact_resume_stage3) { exact(3, ZN_OFFLOAD_NONE, 3); }
Test(ckpt, exact_resume_stage3_cpu) { exact(3, ZN_OFFLOAD_CPU, 3); }

/* m and v as stored (codes and block scales, never widened): the resume is exact */
Test(ckpt, exact_resume_int8_states_device_and_cpu)
{
	exact_states(0, ZN_OFFLOAD_NONE, 2, ZN_STATES_INT8);
	exact_states(2, ZN_OFFLOAD_NONE, 3, ZN_STATES_INT8);
	exact_states(3, ZN_OFFLOAD_CPU, 3, ZN_STATES_INT8);
}

Test(ckpt, exact_resume_bf16_states_device_and_cpu)
{
	exact_states(1, ZN_OFFLOAD_NONE, 2, ZN_STATES_BF16);
	exact_states(2, ZN_OFFLOAD_CPU, 4, ZN_STATES_BF16);
}

/* optimizer on the host, parameter shards on the device (not aliased) */
Test(ckpt, exact_resume_stage3_optimizer_cpu_params_device)
{
	struct zn_config c;
	char dir[64], sd[128];

	ck_config(&c, 3, ZN_OFFLOAD_CPU);
	c.zero.offload_param.device = ZN_OFFLOAD_NONE;
	tmpdir(dir, sizeof(dir));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	ck_exact(&c, sd, 2);
	ck_rmtree(dir);
}

Test(ckpt, exact_resume_bf16_stage3_cpu)
{
	struct zn_config c;
	char dir[64], sd[128];

	ck_config(&c, 3, ZN_OFFLOAD_CPU);
	c.precision.bf16 = true;
	tmpdir(dir, sizeof(dir));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	ck_exact(&c, sd, 3);
	ck_rmtree(dir);
}

/* fp16 with loss scaling: the scaler's position comes back too */
Test(ckpt, exact_resume_fp16_stage2_dynamic_scale)
{
	struct zn_config c;
	char dir[64], sd[128];

	ck_config(&c, 2, ZN_OFFLOAD_NONE);
	c.precision.fp16 = true;
	c.precision.initial_scale_power = 8;
	c.precision.loss_scale_window = 2;
	tmpdir(dir, sizeof(dir));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	ck_exact(&c, sd, 3);
	ck_rmtree(dir);
}

/* Saved at stage 3 with cpu offload, resumed at stage 1 on the device: the slices are the
 * same at every stage, so the resume re-shards; results within the equivalence tests'
 * reduction-order tolerance of the straight stage 3 run. */
Test(ckpt, resume_at_another_stage)
{
	struct zn_config c3, c1;
	struct ck_run a = { 0 }, b = { 0 }, r = { 0 };
	struct zn_gpt2_config mc;
	char dir[64], sd[128];
	int *stream;

	ck_config(&c3, 3, ZN_OFFLOAD_CPU);
	ck_config(&c1, 1, ZN_OFFLOAD_NONE);
	et_model(&mc);
	stream = et_tokens(et_stream_len(CK_STEPS, 2, 1, ET_B), mc.vocab, 11);
	tmpdir(dir, sizeof(dir));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	cr_assert_eq(ck_train(&a, &c3, stream, 0, CK_STEPS, NULL, NULL), 0);
	cr_assert_eq(ck_train(&b, &c3, stream, 0, 3, NULL, sd), 0);
	cr_assert_eq(ck_train(&r, &c1, stream, 3, CK_STEPS, sd, NULL), 0);
	for (int s = 3; s < CK_STEPS; s++)
		cr_assert_float_eq(r.loss[s], a.loss[s], 1e-5f * fabsf(a.loss[s]), "step %d",
				   s + 1);
	for (int l = 0; l < a.layers; l++)
		for (uint64_t i = 0; i < a.numel[l]; i++)
			cr_assert(fabsf(r.w[l][i] - a.w[l][i]) <= 1e-5f + 1e-5f * fabsf(a.w[l][i]),
				  "layer %d element %llu: %g vs %g", l, (unsigned long long)i,
				  r.w[l][i], a.w[l][i]);
	ck_run_free(&a);
	ck_run_free(&b);
	ck_run_free(&r);
	free(stream);
	ck_rmtree(dir);
}

/* int8 state saved at stage 3 with cpu offload, resumed at stage 1 on the device: the
 * blocks start at the same elements in every sharding, so the codes come back as saved and
 * the run goes on as the straight one bit for bit (one micro-batch: with accumulation stage
 * 1 would add the gradients in another order, resume_at_another_stage's tolerance) */
Test(ckpt, int8_states_resume_at_another_stage_bit_for_bit)
{
	struct zn_config c3, c1;
	struct ck_run a = { 0 }, b = { 0 }, r = { 0 };
	struct zn_gpt2_config mc;
	char dir[64], sd[128];
	int *stream;

	ck_config(&c3, 3, ZN_OFFLOAD_CPU);
	ck_config(&c1, 1, ZN_OFFLOAD_NONE);
	c3.gradient_accumulation_steps = c1.gradient_accumulation_steps = 1;
	c3.optimizer.states = c1.optimizer.states = ZN_STATES_INT8;
	et_model(&mc);
	stream = et_tokens(et_stream_len(CK_STEPS, 1, 1, ET_B), mc.vocab, 11);
	tmpdir(dir, sizeof(dir));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	cr_assert_eq(ck_train(&a, &c3, stream, 0, CK_STEPS, NULL, NULL), 0);
	cr_assert_eq(ck_train(&b, &c3, stream, 0, 3, NULL, sd), 0);
	cr_assert_eq(ck_train(&r, &c1, stream, 3, CK_STEPS, sd, NULL), 0);
	for (int s = 3; s < CK_STEPS; s++)
		cr_assert_eq(memcmp(&r.loss[s], &a.loss[s], 4), 0, "step %d: %.9g vs %.9g", s + 1,
			     r.loss[s], a.loss[s]);
	for (int l = 0; l < a.layers; l++)
		cr_assert_eq(memcmp(r.w[l], a.w[l], a.numel[l] * 4), 0, "layer %d", l);
	ck_run_free(&a);
	ck_run_free(&b);
	ck_run_free(&r);
	free(stream);
	ck_rmtree(dir);
}

/* a checkpoint keeps m and v as stored: a resume with another setting is refused before
 * anything is put on the tiers */
Test(ckpt, refuses_another_optimizer_states)
{
	struct zn_config c;
	struct ck_run a = { 0 }, r = { 0 };
	struct zn_gpt2_config mc;
	struct zn_ckpt_dir *ck;
	char dir[64], sd[128];
	int *stream;

	ck_config(&c, 2, ZN_OFFLOAD_CPU);
	c.optimizer.states = ZN_STATES_INT8;
	et_model(&mc);
	stream = et_tokens(et_stream_len(CK_STEPS, 2, 1, ET_B), mc.vocab, 11);
	tmpdir(dir, sizeof(dir));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	cr_assert_eq(ck_train(&a, &c, stream, 0, 2, NULL, sd), 0);
	cr_assert_eq(zn_ckpt_open(&ck, sd, "--resume"), 0);
	cr_assert_eq(zn_ckpt_check_states(ck, ZN_STATES_INT8), 0);
	cr_assert_eq(zn_ckpt_check_states(ck, ZN_STATES_FP32), ZN_EUSAGE);
	cr_assert_eq(zn_ckpt_check_states(ck, ZN_STATES_BF16), ZN_EUSAGE);
	zn_ckpt_close(ck);
	c.optimizer.states = ZN_STATES_FP32;
	cr_assert_eq(ck_train(&r, &c, stream, 2, 4, sd, NULL), ZN_EUSAGE);
	ck_run_free(&a);
	ck_run_free(&r);
	free(stream);
	ck_rmtree(dir);
}

/* ---- the fp16 loss scaler across precisions ------------------------------------------- */

/* An fp32 (or bf16) checkpoint saves no loss scale (zeros): an fp16 resume starts its scaler
 * fresh at 2^initial_scale_power and trains finite losses close to the fp32 run's (it used
 * to load scale 0 and fail at its first step). */
Test(ckpt, fp16_resume_from_fp32_starts_the_scaler_fresh)
{
	struct zn_config c32, c16;
	struct ck_run a = { 0 }, b = { 0 }, r = { 0 };
	struct zn_gpt2_config mc;
	char dir[64], sd[128];
	int *stream;

	ck_config(&c32, 2, ZN_OFFLOAD_NONE);
	c16 = c32;
	c16.precision.fp16 = true;
	c16.precision.initial_scale_power = 8;
	et_model(&mc);
	stream = et_tokens(et_stream_len(CK_STEPS, 2, 1, ET_B), mc.vocab, 11);
	tmpdir(dir, sizeof(dir));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	cr_assert_eq(ck_train(&a, &c32, stream, 0, CK_STEPS, NULL, NULL), 0);
	cr_assert_eq(ck_train(&b, &c32, stream, 0, 3, NULL, sd), 0);
	cr_assert_eq(ck_train(&r, &c16, stream, 3, CK_STEPS, sd, NULL), 0);
	for (int s = 3; s < CK_STEPS; s++) {
		cr_assert(isfinite(r.loss[s]), "step %d loss %g", s + 1, r.loss[s]);
		cr_assert_float_eq(r.loss[s], a.loss[s], 1e-2f * fabsf(a.loss[s]), "step %d",
				   s + 1);
		cr_assert_float_eq(r.scale[s], 256.0f, 0, "step %d scale %g", s + 1, r.scale[s]);
	}
	ck_run_free(&a);
	ck_run_free(&b);
	ck_run_free(&r);
	free(stream);
	ck_rmtree(dir);
}

/* A dynamic fp16 checkpoint resumed with a static loss_scale keeps the config's scale (it
 * used to take the checkpoint's position); resumed dynamic, it goes on from it. */
Test(ckpt, fp16_static_scale_is_the_configs_on_resume)
{
	struct zn_config dyn, st;
	struct ck_run b = { 0 }, r = { 0 }, d = { 0 };
	struct zn_gpt2_config mc;
	char dir[64], sd[128];
	int *stream;

	ck_config(&dyn, 2, ZN_OFFLOAD_NONE);
	dyn.precision.fp16 = true;
	dyn.precision.initial_scale_power = 8;
	dyn.precision.loss_scale_window = 2;
	st = dyn;
	st.precision.loss_scale = 1024;
	et_model(&mc);
	stream = et_tokens(et_stream_len(CK_STEPS, 2, 1, ET_B), mc.vocab, 11);
	tmpdir(dir, sizeof(dir));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	cr_assert_eq(ck_train(&b, &dyn, stream, 0, 3, NULL, sd), 0);
	cr_assert_float_eq(b.scale[2], 512.0f, 0, "the dynamic scale doubled once: %g",
			   b.scale[2]);
	cr_assert_eq(ck_train(&r, &st, stream, 3, CK_STEPS, sd, NULL), 0);
	cr_assert_eq(ck_train(&d, &dyn, stream, 3, 4, sd, NULL), 0);
	for (int s = 3; s < CK_STEPS; s++)
		cr_assert_float_eq(r.scale[s], 1024.0f, 0, "step %d scale %g", s + 1, r.scale[s]);
	cr_assert_float_eq(d.scale[3], 1024.0f, 0, "dynamic: 512 doubled at step 4, got %g",
			   d.scale[3]);
	ck_run_free(&b);
	ck_run_free(&r);
	ck_run_free(&d);
	free(stream);
	ck_rmtree(dir);
}

/* ---- integrity ---------------------------------------------------------------------- */

/* A saved checkpoint at step 2 under dir/save; path of its rank file in rank. */
static void saved(char *dir, size_t n, char *rank, size_t rn)
{
	struct zn_config c;
	struct ck_run b = { 0 };
	struct zn_gpt2_config mc;
	char sd[128];
	int *stream;

	ck_config(&c, 2, ZN_OFFLOAD_NONE);
	et_model(&mc);
	stream = et_tokens(et_stream_len(2, 2, 1, ET_B), mc.vocab, 11);
	tmpdir(dir, n);
	snprintf(sd, sizeof(sd), "%s/save", dir);
	cr_assert_eq(ck_train(&b, &c, stream, 0, 2, NULL, sd), 0);
	snprintf(rank, rn, "%s/checkpoint-2/rank-00000-of-00001.bin", sd);
	ck_run_free(&b);
	free(stream);
}

static int open_rc(const char *dir)
{
	struct zn_ckpt_dir *c = NULL;
	char sd[128];
	int rc;

	snprintf(sd, sizeof(sd), "%s/save", dir);
	rc = zn_ckpt_open(&c, sd, "--resume");
	zn_ckpt_close(c);
	return rc;
}

static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	unsigned char b;

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &b, 1, off), 1);
	b ^= 0x40;
	cr_assert_eq(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

Test(ckpt, opens_a_good_checkpoint)
{
	char dir[64], rank[256];

	saved(dir, sizeof(dir), rank, sizeof(rank));
	cr_assert_eq(open_rc(dir), 0);
	ck_rmtree(dir);
}

Test(ckpt, refuses_a_flipped_byte)
{
	char dir[64], rank[256];

	saved(dir, sizeof(dir), rank, sizeof(rank));
	flip_byte(rank, 5000);
	cr_assert_eq(open_rc(dir), -EBADMSG);
	ck_rmtree(dir);
}

Test(ckpt, refuses_a_truncated_rank_file)
{
	char dir[64], rank[256];
	struct stat st;

	saved(dir, sizeof(dir), rank, sizeof(rank));
	cr_assert_eq(stat(rank, &st), 0);
	cr_assert_eq(truncate(rank, st.st_size - 100), 0);
	cr_assert_eq(open_rc(dir), -EBADMSG);
	ck_rmtree(dir);
}

Test(ckpt, refuses_a_missing_rank_file)
{
	char dir[64], rank[256];

	saved(dir, sizeof(dir), rank, sizeof(rank));
	cr_assert_eq(unlink(rank), 0);
	cr_assert_eq(open_rc(dir), -ENOENT);
	ck_rmtree(dir);
}

/* The metadata with a second "step" line and a CRC made for it: zinc writes each key once,
 * so a repeated one is refused naming it (before, the first was read silently). */
Test(ckpt, refuses_a_repeated_metadata_key, .init = cr_redirect_stderr)
{
	char dir[64], rank[256], meta[256], line[32], *text, *at, *out, err[4096];
	size_t n, len, k;
	FILE *f;

	saved(dir, sizeof(dir), rank, sizeof(rank));
	snprintf(meta, sizeof(meta), "%s/save/checkpoint-2/%s", dir, ZN_CKPT_META);
	f = fopen(meta, "rb");
	cr_assert_not_null(f);
	text = calloc(1, 1 << 20);
	n = fread(text, 1, (1 << 20) - 1, f);
	fclose(f);
	at = strstr(text, "crc32=");
	cr_assert_not_null(at);
	len = (size_t)(at - text);
	out = calloc(1, len + 64);
	k = (size_t)(strstr(text, "\nstep=") + 1 - text);
	memcpy(out, text, k);
	memcpy(out + k, "step=1\n", 7);
	memcpy(out + k + 7, text + k, len - k);
	snprintf(line, sizeof(line), "crc32=%08x\n",
		 zn_ckpt_crc(zn_ckpt_crc(0, NULL, 0), out, len + 7));
	f = fopen(meta, "wb");
	cr_assert_not_null(f);
	fwrite(out, 1, len + 7, f);
	fputs(line, f);
	fclose(f);
	cr_assert_eq(open_rc(dir), -EBADMSG);
	fflush(stderr);
	n = fread(err, 1, sizeof(err) - 1, cr_get_redirected_stderr());
	err[n] = 0;
	cr_expect(strstr(err, "a key given twice: step"), "%s", err);
	free(out);
	free(text);
	ck_rmtree(dir);
}

Test(ckpt, refuses_a_changed_metadata)
{
	char dir[64], rank[256], meta[256];

	saved(dir, sizeof(dir), rank, sizeof(rank));
	snprintf(meta, sizeof(meta), "%s/save/checkpoint-2/%s", dir, ZN_CKPT_META);
	flip_byte(meta, 20); /* inside "step=2" .. */
	cr_assert_eq(open_rc(dir), -EBADMSG);
	ck_rmtree(dir);
}

Test(ckpt, refuses_another_model_shape_and_batch)
{
	struct zn_gpt2_config mc;
	struct zn_model model;
	struct zn_ckpt_dir *c = NULL;
	char dir[64], rank[256], sd[128];

	saved(dir, sizeof(dir), rank, sizeof(rank));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	cr_assert_eq(zn_ckpt_open(&c, sd, "--resume"), 0);
	et_model(&mc);
	model = (struct zn_model){ &zn_gpt2_ops, &mc };
	cr_assert_eq(zn_ckpt_check(c, &model, ET_B, ET_T, NULL), 0);
	cr_assert_eq(zn_ckpt_check(c, &model, ET_B * 2, ET_T, NULL), ZN_EUSAGE);
	cr_assert_eq(zn_ckpt_check(c, &model, ET_B, ET_T / 2, NULL), ZN_EUSAGE);
	mc.d_model = 64;
	cr_assert_eq(zn_gpt2_config_validate(&mc), 0);
	cr_assert_eq(zn_ckpt_check(c, &model, ET_B, ET_T, NULL), ZN_EUSAGE);
	et_model(&mc);
	mc.layers = 3;
	cr_assert_eq(zn_ckpt_check(c, &model, ET_B, ET_T, NULL), ZN_EUSAGE);
	zn_ckpt_close(c);
	ck_rmtree(dir);
}

/* The metadata of dir's checkpoint-2 with the line of key set to value (appended when the
 * key is new; value NULL: the line dropped) and its CRC line made right again: what a bug
 * or a hand edit could leave. */
static void rewrite_meta(const char *dir, const char *key, const char *value)
{
	char path[256], line[512], *out = malloc(1 << 20);
	size_t used = 0, klen = strlen(key);
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/save/checkpoint-2/%s", dir, ZN_CKPT_META);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "crc32=", 6))
			continue;
		if (!found && !strncmp(line, key, klen) && line[klen] == '=') {
			found = true;
			if (!value)
				continue;
			snprintf(line, sizeof(line), "%s=%s\n", key, value);
		}
		used += (size_t)snprintf(out + used, (1 << 20) - used, "%s", line);
	}
	fclose(f);
	if (!found && value)
		used += (size_t)snprintf(out + used, (1 << 20) - used, "%s=%s\n", key, value);
	used += (size_t)snprintf(out + used, (1 << 20) - used, "crc32=%08x\n",
				 (unsigned)zn_ckpt_crc(zn_ckpt_crc(0, NULL, 0), out, used));
	f = fopen(path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(out, 1, used, f), used);
	fclose(f);
	free(out);
}

/* A metadata whose CRC is right but whose fields no run could have written is refused when
 * the checkpoint is opened, before any engine exists (it used to fail at step 1, or run
 * with a step near INT64_MAX). */
Test(ckpt, metadata_out_of_range_is_refused_at_open)
{
	static const char *const bad[][2] = {
		{ "skipped", "3" }, { "step", "9223372036854775806" }, { "step", "-1" },
		{ "step", "2147483648" }, { "data_step", "1" }, { "global_micro", "0" },
		{ "seq", "0" }, { "world", "0" }, { "stage", "4" }, { "dtype", "fp8" },
		{ "seed", "18446744073709551616" }, { "ls.scale", "nan" }, { "ls.scale", "inf" },
		{ "ls.cur_hysteresis", "4294967297" }, { "ls.iter", "3" },
		{ "ls.last_overflow_iter", "-2" }, { "layer.0", "9223372036854775807" },
		{ "rank.0", "10 00000000" }, { "config", "1099511627776 00000000" },
		{ "tensor.1.99", "x 1x1" }, { "layer.9", "10" }, { "resume_anyway", "1" },
		{ "data.size", "12" }, { "step", "02" }, { "optimizer_states", "fp8" },
		{ "optimizer_states", "INT8" }, { "optimizer_states", "int8" },
	};
	char dir[64], rank[256], meta[256], *orig;
	size_t n = 0;
	FILE *f;

	saved(dir, sizeof(dir), rank, sizeof(rank));
	snprintf(meta, sizeof(meta), "%s/save/checkpoint-2/%s", dir, ZN_CKPT_META);
	orig = zt_read_all(meta, &n);
	/* the rewrite itself keeps a good checkpoint good */
	rewrite_meta(dir, "skipped", "0");
	cr_assert_eq(open_rc(dir), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rewrite_meta(dir, bad[i][0], bad[i][1]);
		cr_assert_eq(open_rc(dir), -EBADMSG, "%s=%s was accepted", bad[i][0], bad[i][1]);
		f = fopen(meta, "w");
		cr_assert_eq(fwrite(orig, 1, n, f), n);
		fclose(f);
	}
	/* a seed above INT64_MAX (zinc.seed is a uint64) reads back */
	rewrite_meta(dir, "seed", "18446744073709551615");
	cr_assert_eq(open_rc(dir), 0);
	/* a checkpoint from before the optimizer states setting has no key: fp32 */
	rewrite_meta(dir, "optimizer_states", NULL);
	cr_assert_eq(open_rc(dir), 0);
	free(orig);
	ck_rmtree(dir);
}

/* Every byte of a rank file's header is checked, even with both CRCs made right again:
 * its version, its stage and optimizer states against the metadata's, its reserved bytes. */
Test(ckpt, rank_header_fields_are_all_checked)
{
	static const long at[] = { 8, 20, 28, 40 }; /* version, stage, states, a reserved byte */
	char dir[64], rank[256], meta[256], *orig, *meta0, entry[64];
	size_t n = 0, mn = 0;
	FILE *f;

	saved(dir, sizeof(dir), rank, sizeof(rank));
	snprintf(meta, sizeof(meta), "%s/save/checkpoint-2/%s", dir, ZN_CKPT_META);
	orig = zt_read_all(rank, &n);
	meta0 = zt_read_all(meta, &mn);
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		char *b = malloc(n);
		uint32_t c;

		memcpy(b, orig, n);
		b[at[i]] ^= 1;
		c = zn_ckpt_crc(zn_ckpt_crc(0, NULL, 0), b, n - 8);
		memcpy(b + n - 8, &c, 4);
		f = fopen(rank, "wb");
		cr_assert_eq(fwrite(b, 1, n, f), n);
		fclose(f);
		snprintf(entry, sizeof(entry), "%zu %08x", n, (unsigned)c);
		rewrite_meta(dir, "rank.0", entry);
		cr_assert_eq(open_rc(dir), -EBADMSG, "byte %ld of the header was accepted", at[i]);
		f = fopen(meta, "wb");
		cr_assert_eq(fwrite(meta0, 1, mn, f), mn);
		fclose(f);
		free(b);
	}
	f = fopen(rank, "wb");
	cr_assert_eq(fwrite(orig, 1, n, f), n);
	fclose(f);
	cr_assert_eq(open_rc(dir), 0);
	free(orig);
	free(meta0);
	ck_rmtree(dir);
}

/* --save-total-limit 2 keeps the newest two; latest names the last */
Test(ckpt, keep_limit_and_latest)
{
	struct zn_config c;
	struct ck_run r = { 0 };
	struct zn_gpt2_config mc;
	char dir[64], sd[128], p[256], latest[64] = "";
	struct zn_ckpt_save_args a;
	struct zn_engine *e;
	struct zn_engine_options o = { .seq_len = ET_T };
	int *stream;
	FILE *f;

	ck_config(&c, 1, ZN_OFFLOAD_CPU);
	et_model(&mc);
	stream = et_tokens(et_stream_len(4, 2, 1, ET_B), mc.vocab, 11);
	tmpdir(dir, sizeof(dir));
	snprintf(sd, sizeof(sd), "%s/save", dir);
	a = (struct zn_ckpt_save_args){ .dir = sd, .keep = 2, .global_micro = ET_B, .seq = ET_T };
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	for (int s = 0; s < 4; s++) {
		struct zn_step_stats st;
		int in[2 * ET_B * ET_T], tg[2 * ET_B * ET_T];

		memcpy(in, stream + s * 2 * ET_B * ET_T, sizeof(in));
		memcpy(tg, stream + s * 2 * ET_B * ET_T + 1, sizeof(tg));
		cr_assert_eq(zn_engine_step(e, in, tg, &st), 0);
		a.data_step = (s + 1) * 2;
		cr_assert_eq(zn_ckpt_save(e, NULL, &a, p, sizeof(p)), 0);
	}
	zn_engine_destroy(e);
	for (int s = 1; s <= 4; s++) {
		struct stat st;

		snprintf(p, sizeof(p), "%s/checkpoint-%d", sd, s);
		cr_assert_eq(stat(p, &st) == 0, s >= 3, "checkpoint-%d", s);
	}
	snprintf(p, sizeof(p), "%s/latest", sd);
	f = fopen(p, "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(latest, sizeof(latest), f));
	fclose(f);
	cr_assert_str_eq(latest, "checkpoint-4\n");
	ck_run_free(&r);
	free(stream);
	ck_rmtree(dir);
}
