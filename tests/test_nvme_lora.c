/* Frozen parameters homed on nvme (docs/lora.md): a LoRA run whose base lives in the frozen
 * file (stage 3, offload_param nvme) gives the same bits as with the base in host memory,
 * reads the base back unchanged, counts its reads in the plan and leaves no file behind. */
#include <criterion/criterion.h>
#include <dirent.h>

#include "core/dtype.h"
#include "engine_common.h"
#include "model/lora/lora.h"
#include "nvme_test_util.h"

static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	if (d)
		closedir(d);
	return n;
}

struct res {
	float loss[4];
	float **w, **f;
	uint64_t numel[16];
	int n;
	uint64_t nvme_read, plan_read;
};

static void res_free(struct res *r)
{
	for (int l = 0; l < r->n; l++) {
		free(r->w[l]);
		free(r->f[l]);
	}
	free(r->w);
	free(r->f);
}

static void run(struct res *r, enum zn_offload_device opt, enum zn_offload_device prm,
		bool bf16, const char *dir)
{
	struct zn_gpt2_config mc;
	struct zn_lora_config lc = { .r = 4, .alpha = 8 };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	int *stream;
	struct zn_config cfg;
	struct zn_model m;
	struct zn_engine *e;
	uint64_t bt = 2 * ET_B * ET_T;

	et_model(&mc);
	mc.layers = 4;
	zn_gpt2_config_validate(&mc);
	stream = et_tokens(4 * bt + 1, mc.vocab, 7);
	et_config(&cfg, 3, ZN_OFFLOAD_CPU, ET_B, 2);
	cfg.zero.offload_optimizer.device = opt;
	cfg.zero.offload_param.device = prm;
	cfg.precision.bf16 = bf16;
	cfg.runtime.prefetch_depth = 2;
	cfg.zero.offload_optimizer.nvme_path_count = cfg.zero.offload_param.nvme_path_count = 1;
	snprintf(cfg.zero.offload_optimizer.nvme_path[0], ZN_PATH_MAX, "%s", dir);
	snprintf(cfg.zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", dir);
	lc.base = zn_gpt2_model(&mc);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn,c_proj"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	m = zn_lora_model(&lc);
	cr_assert_eq(zn_engine_create(&e, &cfg, &m, &o), 0);
	for (int s = 0; s < 4; s++) {
		struct zn_step_stats st;

		cr_assert_eq(zn_engine_step(e, stream + s * bt, stream + s * bt + 1, &st), 0);
		r->loss[s] = st.loss;
		r->nvme_read = st.nvme_read_bytes;
		r->plan_read = st.plan_nvme_read_bytes;
	}
	r->n = zn_engine_layer_count(e);
	r->w = calloc((size_t)r->n, sizeof(float *));
	r->f = calloc((size_t)r->n, sizeof(float *));
	for (int l = 0; l < r->n; l++) {
		r->numel[l] = zn_engine_layer_numel(e, l);
		r->w[l] = malloc((r->numel[l] + 1) * 4);
		r->f[l] = malloc((zn_engine_frozen_numel(e, l) + 1) * 4);
		cr_assert_eq(zn_engine_read_layer(e, l, r->w[l]), 0);
		cr_assert_eq(zn_engine_read_frozen(e, l, r->f[l]), 0);
		/* the base as initialized (rounded to bf16 once when stored so) */
		{
			const struct zn_layer_desc *bd = &lc.lay[l].base;
			float *want = malloc((bd->numel + 1) * 4);

			zn_gpt2_ops.init(&mc, bd, 0, bd->numel, want, cfg.runtime.seed);
			for (uint64_t i = 0; bf16 && i < bd->numel; i++) {
				uint16_t h;

				zn_cast_f32_to_bf16(&h, want + i, 1);
				zn_cast_bf16_to_f32(want + i, &h, 1);
			}
			cr_assert_eq(memcmp(want, r->f[l], bd->numel * 4), 0, "layer %d", l);
			free(want);
		}
	}
	zn_engine_destroy(e);
	zn_lora_release(&lc);
	free(stream);
}

static void same(const struct res *a, const struct res *b, const char *what)
{
	for (int s = 0; s < 4; s++)
		cr_assert_eq(memcmp(&a->loss[s], &b->loss[s], 4), 0, "%s: step %d", what, s + 1);
	for (int l = 0; l < a->n; l++)
		cr_assert_eq(memcmp(a->w[l], b->w[l], 4 * a->numel[l]), 0, "%s: layer %d", what, l);
}

static void check(bool bf16)
{
	char dir[ZN_PATH_MAX];
	struct res host = { 0 }, nv = { 0 }, both = { 0 };

	nvme_test_dir(dir, sizeof(dir));
	run(&host, ZN_OFFLOAD_CPU, ZN_OFFLOAD_CPU, bf16, dir);
	run(&nv, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NVME, bf16, dir);
	run(&both, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NVME, bf16, dir);
	same(&host, &nv, "base on nvme");
	same(&host, &both, "base and optimizer on nvme");
	/* the base is read from nvme every step, as the plan says */
	cr_assert(nv.nvme_read > 0);
	cr_assert_eq(nv.nvme_read, nv.plan_read, "read %llu, plan %llu",
		     (unsigned long long)nv.nvme_read, (unsigned long long)nv.plan_read);
	cr_assert_eq(entries(dir), 0, "files left in %s", dir);
	res_free(&host);
	res_free(&nv);
	res_free(&both);
	nvme_test_rmdir(dir);
}

Test(nvme_lora, base_on_nvme_fp32) { check(false); }
Test(nvme_lora, base_on_nvme_bf16) { check(true); }
