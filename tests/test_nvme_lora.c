/* Frozen parameters homed on nvme (docs/lora.md): a LoRA run whose base lives in the frozen
 * file (stage 3, offload_param nvme) gives the same bits as with the base in host memory,
 * whatever its read buffers (one: each read waits for the previous copy up; more than the
 * working slots: reads run ahead of them), reads the base back unchanged, counts its reads
 * and its pinned bytes as the plan does and leaves no file behind. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>

#include "core/dtype.h"
#include "engine_common.h"
#include "model/lora/lora.h"
#include "nvme_test_util.h"
#include "sched/engine_impl.h"

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
	uint64_t first_read, layer0_read; /* step 1's reads; layer 0's extent (nvme home) */
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

/* A LoRA engine on a 4-layer GPT-2 (*mc), its optimizer on opt, its base on prm (paths:
 * dir); rbufs: zinc.frozen_read_buffers (0 = automatic); depth: prefetch depth (ring depth
 * + 1); *stream: tokens for 4 steps */
static struct zn_engine *create(struct zn_lora_config *lc, struct zn_gpt2_config *mc,
				int **stream, enum zn_offload_device opt,
				enum zn_offload_device prm, bool bf16, const char *dir, int rbufs,
				int depth)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_config cfg;
	struct zn_model m;
	struct zn_engine *e;

	*lc = (struct zn_lora_config){ .r = 4, .alpha = 8 };
	et_model(mc);
	mc->layers = 4;
	zn_gpt2_config_validate(mc);
	*stream = et_tokens(8 * ET_B * ET_T + 1, mc->vocab, 7);
	et_config(&cfg, 3, ZN_OFFLOAD_CPU, ET_B, 2);
	cfg.zero.offload_optimizer.device = opt;
	cfg.zero.offload_param.device = prm;
	cfg.precision.bf16 = bf16;
	cfg.runtime.prefetch_depth = depth;
	cfg.runtime.frozen_read_buffers = rbufs;
	cfg.zero.offload_optimizer.nvme_path_count = cfg.zero.offload_param.nvme_path_count = 1;
	snprintf(cfg.zero.offload_optimizer.nvme_path[0], ZN_PATH_MAX, "%s", dir);
	snprintf(cfg.zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", dir);
	lc->base = zn_gpt2_model(mc);
	cr_assert_eq(zn_lora_add_targets(lc, "c_attn,c_proj"), 0);
	cr_assert_eq(zn_lora_prepare(lc), 0);
	m = zn_lora_model(lc);
	cr_assert_eq(zn_engine_create(&e, &cfg, &m, &o), 0);
	return e;
}

static void run_with(struct res *r, enum zn_offload_device opt, enum zn_offload_device prm,
		     bool bf16, const char *dir, int rbufs, int depth)
{
	struct zn_lora_config lc;
	struct zn_gpt2_config mc;
	int *stream;
	struct zn_engine *e = create(&lc, &mc, &stream, opt, prm, bf16, dir, rbufs, depth);
	uint64_t bt = 2 * ET_B * ET_T;

	/* the pinned bytes allocated are the plan's (homes, or layer 0's and the read buffers) */
	cr_assert_eq(zn_frozen_pinned_bytes(&e->fz), e->plan.host_frozen_bytes, "%llu vs plan %llu",
		     (unsigned long long)zn_frozen_pinned_bytes(&e->fz),
		     (unsigned long long)e->plan.host_frozen_bytes);
	cr_assert_eq(e->plan.frozen_slots, depth + 1);
	if (prm == ZN_OFFLOAD_NVME) {
		/* the count given or slots + 4, at most the 2 (n - 1) items of a micro-batch
		 * (the pinned budget of 64 MiB is not short here) */
		int most = 2 * (zn_engine_layer_count(e) - 1);
		int want = rbufs ? rbufs : depth + 1 + ZN_PLAN_FROZEN_READ_AHEAD;

		cr_assert_eq(e->plan.frozen_read_buffers, want < most ? want : most);
		cr_assert_eq(e->fz.rd_n, e->plan.frozen_read_buffers);
		r->layer0_read =
			zn_plan_host_alloc_bytes(e->plan.frozen_layer0_numel * (bf16 ? 2 : 4));
		cr_assert_eq(e->plan.host_frozen_bytes,
			     zn_plan_host_alloc_bytes(e->plan.frozen_layer0_numel * (bf16 ? 2 : 4)) +
			     (uint64_t)e->fz.rd_n *
			     zn_plan_host_alloc_bytes(e->plan.frozen_slot_numel * (bf16 ? 2 : 4)));
	}
	for (int s = 0; s < 4; s++) {
		struct zn_step_stats st;

		cr_assert_eq(zn_engine_step(e, stream + s * bt, stream + s * bt + 1, &st), 0);
		r->loss[s] = st.loss;
		r->nvme_read = st.nvme_read_bytes;
		r->plan_read = st.plan_nvme_read_bytes;
		if (s == 0)
			r->first_read = st.nvme_read_bytes;
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

			zn_gpt2_ops.init(&mc, bd, 0, bd->numel, want, e->cfg.runtime.seed);
			for (uint64_t i = 0; bf16 && i < bd->numel; i++) {
				uint16_t h;

				zn_cast_f32_to_bf16(&h, want + i, 1);
				zn_cast_bf16_to_f32(want + i, &h, 1);
			}
			cr_assert_eq(memcmp(want, r->f[l], bd->numel * 4), 0, "layer %d", l);
			free(want);
		}
	}
	/* the read buffers are in the pinned arena, registered with the frozen reads' engine:
	 * io_uring reads into them as fixed buffers where the kernel has them */
	if (prm == ZN_OFFLOAD_NVME && zn_aio_fixed_buffers(e->fz.aio)) {
		struct zn_aio_stats as;

		zn_aio_get_stats(e->fz.aio, &as);
		cr_assert(as.fixed_buffer_pieces > 0);
	}
	zn_engine_destroy(e);
	zn_lora_release(&lc);
	free(stream);
}

static void run(struct res *r, enum zn_offload_device opt, enum zn_offload_device prm,
		bool bf16, const char *dir)
{
	run_with(r, opt, prm, bf16, dir, 0, 2);
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
	/* the base is read from nvme every step, as the plan says: layers 1 .. n-1 at every
	 * use; layer 0 at the first step only (its working copy is kept) */
	cr_assert(nv.nvme_read > 0);
	cr_assert_eq(nv.nvme_read, nv.plan_read, "read %llu, plan %llu",
		     (unsigned long long)nv.nvme_read, (unsigned long long)nv.plan_read);
	cr_assert(nv.layer0_read > 0);
	cr_assert_eq(nv.first_read, nv.plan_read + nv.layer0_read);
	cr_assert_eq(entries(dir), 0, "files left in %s", dir);
	res_free(&host);
	res_free(&nv);
	res_free(&both);
	nvme_test_rmdir(dir);
}

Test(nvme_lora, base_on_nvme_fp32) { check(false); }
Test(nvme_lora, base_on_nvme_bf16) { check(true); }

/* Read buffers beyond the working slots: two slots (prefetch depth 1) with one read buffer
 * (each read waits for the previous copy up: the reads are synchronous with the
 * sequence) and with one per item of a micro-batch's sequence (64 asked: the whole
 * sequence read ahead of the two slots), and three slots with the automatic count: the same losses and adapters bit for
 * bit, as with the base in host memory; every byte read once per use, as planned. */
Test(nvme_lora, read_ahead_beyond_the_slots)
{
	char dir[ZN_PATH_MAX];
	struct res host = { 0 }, sync = { 0 }, deep = { 0 }, autom = { 0 };

	nvme_test_dir(dir, sizeof(dir));
	run_with(&host, ZN_OFFLOAD_CPU, ZN_OFFLOAD_CPU, true, dir, 0, 1);
	run_with(&sync, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NVME, true, dir, 1, 1);
	run_with(&deep, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NVME, true, dir, 64, 1);
	run_with(&autom, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NVME, true, dir, 0, 2);
	same(&host, &sync, "one read buffer");
	same(&sync, &deep, "a read buffer per item, two slots");
	same(&sync, &autom, "automatic read buffers, three slots");
	cr_assert_eq(sync.nvme_read, sync.plan_read);
	cr_assert_eq(deep.nvme_read, deep.plan_read);
	cr_assert_eq(autom.nvme_read, autom.plan_read);
	cr_assert_eq(entries(dir), 0, "files left in %s", dir);
	res_free(&host);
	res_free(&sync);
	res_free(&deep);
	res_free(&autom);
	nvme_test_rmdir(dir);
}

/* A failed read or write of the base on nvme fails the call with a line naming the layer,
 * the operation and the store's file (under offload_param.nvme_path): a step (layer 0's
 * read, the first request), a layer's read back, a layer's load. */
Test(nvme_lora, a_failed_read_or_write_names_the_layer_and_the_file)
{
	char dir[ZN_PATH_MAX], want[3][ZN_PATH_MAX + 80];
	struct zn_lora_config lc;
	struct zn_gpt2_config mc;
	struct zn_step_stats st;
	struct zn_engine *e;
	float *f;
	int *stream;

	nvme_test_dir(dir, sizeof(dir));
	e = create(&lc, &mc, &stream, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NVME, true, dir, 0, 1);
	f = calloc(zn_engine_frozen_numel(e, 2) + 1, 4);
	cr_assert_not_null(zn_frozen_aio(&e->fz));
	snprintf(want[0], sizeof(want[0]), "frozen parameters of layer 0: nvme read of %s/zinc-swap-",
		 dir);
	snprintf(want[1], sizeof(want[1]), "frozen parameters of layer 2: nvme read of %s/zinc-swap-",
		 dir);
	snprintf(want[2], sizeof(want[2]), "frozen parameters of layer 2: nvme write of %s/zinc-swap-",
		 dir);
	cr_redirect_stderr();
	zn_aio_set_fault(zn_frozen_aio(&e->fz), &(struct zn_aio_fault){ .nth = 1, .err = EIO });
	cr_expect_eq(zn_engine_step(e, stream, stream + 1, &st), -EIO);
	zn_aio_set_fault(zn_frozen_aio(&e->fz), &(struct zn_aio_fault){ .nth = 1, .err = EIO });
	cr_expect_eq(zn_engine_read_frozen(e, 2, f), -EIO);
	zn_aio_set_fault(zn_frozen_aio(&e->fz), &(struct zn_aio_fault){ .nth = 1, .err = EIO });
	cr_expect_eq(zn_frozen_init_layer(&e->fz, 2, f), -EIO);
	zn_aio_set_fault(zn_frozen_aio(&e->fz), NULL);
	for (int i = 0; i < 3; i++)
		cr_expect(nvme_test_stderr_has(want[i], "Input/output error"), "no line '%s'",
			  want[i]);
	zn_engine_destroy(e);
	zn_lora_release(&lc);
	free(stream);
	free(f);
	cr_expect_eq(entries(dir), 0, "files left in %s", dir);
	nvme_test_rmdir(dir);
}
