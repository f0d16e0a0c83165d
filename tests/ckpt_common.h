/* Shared by tests/test_ckpt.c and tests/test_nvme_ckpt.c: train steps [from, to) of the
 * engine_common.h stream, optionally resuming from a checkpoint first and saving one after,
 * and compare a straight run with a stopped-and-resumed one bit for bit. */
#ifndef ZN_TESTS_CKPT_COMMON_H
#define ZN_TESTS_CKPT_COMMON_H

#ifndef CK_NO_CRITERION /* tests/mpi/: plain programs */
#include <criterion/criterion.h>
#endif
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_common.h"
#include "sched/ckpt.h"

#define CK_STEPS 6

/* for tests/mpi/ckpt_resume.c: the engines' comm kind, the host comm saves agree over
 * (NULL: one rank) and the ranks a loader step spans */
static int ck_comm_kind;
static struct zn_comm *ck_comm;
static int ck_world = 1;

struct ck_run {
	float loss[16];
	float scale[16];          /* fp16: the loss scale after each step */
	int layers;
	float *w[16];
	uint64_t numel[16];
};

static inline void ck_run_free(struct ck_run *r)
{
	for (int l = 0; l < r->layers; l++)
		free(r->w[l]);
	memset(r, 0, sizeof(*r));
}

/* Steps [from, to) with cfg; resume: a checkpoint to start from (its step must be from);
 * save_dir: a checkpoint after the last step. Returns 0 or the first error. */
static inline int ck_train(struct ck_run *r, const struct zn_config *cfg, const int *stream,
			   int from, int to, const char *resume, const char *save_dir)
{
	struct zn_gpt2_config mc;
	struct zn_model model;
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ck_comm_kind };
	struct zn_engine *e = NULL;
	struct zn_ckpt_dir *c = NULL;
	int rc = 0, B, gas, N, rank;
	int *in = NULL, *tg = NULL;
	uint64_t bt;

	et_model(&mc);
	model = (struct zn_model){ &zn_gpt2_ops, &mc };
	if (resume) {
		rc = zn_ckpt_open(&c, resume, "--resume");
		if (!rc)
			rc = zn_ckpt_check(c, &model, (int64_t)ck_world *
					   cfg->train_micro_batch_size_per_gpu, ET_T, NULL);
		if (!rc && zn_ckpt_info(c)->step != from)
			rc = -EINVAL;
		o.init_layer = zn_ckpt_init_layer;
		o.init_ctx = c;
	}
	if (!rc)
		rc = zn_engine_create(&e, cfg, &model, &o);
	if (!rc && c)
		rc = zn_ckpt_restore(e, c);
	zn_ckpt_close(c);
	if (rc)
		goto out;
	B = zn_engine_micro_batch(e);
	gas = zn_engine_grad_accum(e);
	N = zn_engine_world(e);
	rank = zn_engine_rank(e);
	bt = (uint64_t)B * ET_T;
	in = malloc(gas * bt * sizeof(int));
	tg = malloc(gas * bt * sizeof(int));
	for (int s = from; !rc && s < to; s++) {
		struct zn_step_stats st;

		for (int k = 0; k < gas; k++) {
			uint64_t base = ((uint64_t)s * gas + k) * N * bt + (uint64_t)rank * bt;

			memcpy(in + k * bt, stream + base, bt * sizeof(int));
			memcpy(tg + k * bt, stream + base + 1, bt * sizeof(int));
		}
		rc = zn_engine_step(e, in, tg, &st);
		r->loss[s] = st.loss;
		r->scale[s] = st.next_loss_scale;
	}
	if (!rc && save_dir) {
		struct zn_ckpt_save_args a = { .dir = save_dir, .data_step = (int64_t)to * gas,
					       .global_micro = (int64_t)N * B, .seq = ET_T };
		char where[ZN_PATH_MAX + 100];

		rc = zn_ckpt_save(e, ck_comm, &a, where, sizeof(where));
	}
	r->layers = zn_engine_layer_count(e);
	for (int l = 0; !rc && l < r->layers; l++) {
		r->numel[l] = zn_engine_layer_numel(e, l);
		r->w[l] = malloc(r->numel[l] * sizeof(float));
		rc = zn_engine_read_layer(e, l, r->w[l]);
	}
out:
	free(in);
	free(tg);
	zn_engine_destroy(e);
	return rc;
}

/* Removes dir and everything in it (two levels: checkpoint-N directories). */
static inline void ck_rmtree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		char p[4096];
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%.3000s/%.255s", dir, de->d_name);
		if (!lstat(p, &st) && S_ISDIR(st.st_mode))
			ck_rmtree(p);
		else
			unlink(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

#ifndef CK_NO_CRITERION
/* N steps straight vs k steps, save, resume, N - k steps: identical bits. */
static inline void ck_exact(const struct zn_config *cfg, const char *dir, int k)
{
	struct ck_run a = { 0 }, b = { 0 }, c = { 0 };
	struct zn_gpt2_config mc;
	int gas = (int)cfg->gradient_accumulation_steps;
	int *stream;

	et_model(&mc);
	stream = et_tokens(et_stream_len(CK_STEPS, gas, 1, ET_B), mc.vocab, 11);
	cr_assert_eq(ck_train(&a, cfg, stream, 0, CK_STEPS, NULL, NULL), 0);
	cr_assert_eq(ck_train(&b, cfg, stream, 0, k, NULL, dir), 0);
	cr_assert_eq(ck_train(&c, cfg, stream, k, CK_STEPS, dir, NULL), 0);
	for (int s = 0; s < CK_STEPS; s++) {
		float x = s < k ? b.loss[s] : c.loss[s];

		cr_assert_eq(memcmp(&a.loss[s], &x, 4), 0, "step %d loss %.9g, straight %.9g",
			     s + 1, x, a.loss[s]);
	}
	for (int l = 0; l < a.layers; l++)
		cr_assert_eq(memcmp(a.w[l], c.w[l], a.numel[l] * 4), 0,
			     "layer %d weights differ after the resume", l);
	/* the checkpoint's own weights are step k's */
	for (int l = 0; l < a.layers; l++)
		cr_assert_neq(memcmp(a.w[l], b.w[l], a.numel[l] * 4), 0);
	ck_run_free(&a);
	ck_run_free(&b);
	ck_run_free(&c);
	free(stream);
}
#endif

/* The config of the matrix: deterministic, accumulation 2, WarmupDecayLR. */
static inline void ck_config(struct zn_config *c, int stage, enum zn_offload_device off)
{
	et_config(c, stage, off, ET_B, 2);
	c->scheduler.type = ZN_LR_WARMUP_DECAY;
	c->scheduler.warmup_min_lr = 0.0f;
	c->scheduler.warmup_max_lr = 3e-3f;
	c->scheduler.warmup_num_steps = 3;
	c->scheduler.total_num_steps = 8;
	c->scheduler.warmup_log = false;
}

#endif
