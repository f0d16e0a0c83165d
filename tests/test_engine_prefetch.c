/* The prefetch depth never changes results: stage 3 with parameters fetched into a ring of
 * slots, any depth (1, the deepest the ring allows, and far beyond the layer count) gives
 * bit-identical losses and weights. A depth at or above the number of blocks + 1 used to
 * fetch into the slot still being computed on (issue 14, item 2: --model small
 * --zero-stage 3 --offload-param cpu --prefetch-depth 5 changed the loss). */
#include <criterion/criterion.h>

#include "engine_common.h"
#include "nvme_test_util.h"

static char nvme_dir[ZN_PATH_MAX]; /* set for the nvme case */

static void model4(struct zn_gpt2_config *mc)
{
	*mc = (struct zn_gpt2_config){ .layers = 4, .heads = 4, .d_model = 32, .seq = 16,
				       .vocab = 96, .padded_vocab = 0 };
	zn_gpt2_config_validate(mc);
}

static void run_depth(struct et_run *r, enum zn_offload_device off, bool bf16, int depth,
		      const int *stream)
{
	struct zn_gpt2_config mc;
	struct zn_config c;
	int rc;

	model4(&mc);
	et_config(&c, 3, off, 2, 1);
	c.precision.bf16 = bf16;
	c.runtime.prefetch_depth = depth;
	if (off == ZN_OFFLOAD_NVME) {
		struct zn_offload_config *o[] = { &c.zero.offload_optimizer,
						  &c.zero.offload_param };

		for (int k = 0; k < 2; k++) {
			o[k]->nvme_path_count = 1;
			snprintf(o[k]->nvme_path[0], ZN_PATH_MAX, "%s", nvme_dir);
		}
	}
	rc = et_train_model(r, &c, &mc, ZN_COMM_SINGLE, stream, ET_STEPS);
	cr_assert_eq(rc, 0, "depth %d: %d", depth, rc);
}

static void assert_same(const struct et_run *a, const struct et_run *b, int depth)
{
	for (int s = 0; s < a->steps; s++)
		cr_assert_eq(memcmp(&a->loss[s], &b->loss[s], 4), 0,
			     "depth %d: step %d loss %.9g, depth 1 gives %.9g", depth, s + 1,
			     b->loss[s], a->loss[s]);
	for (int l = 0; l < a->layer_count; l++)
		for (uint64_t i = 0; i < a->numel[l]; i++)
			cr_assert_eq(memcmp(&a->w[l][i], &b->w[l][i], 4), 0,
				     "depth %d: layer %d element %llu: %.9g, depth 1 gives %.9g",
				     depth, l, (unsigned long long)i, b->w[l][i], a->w[l][i]);
}

static void depths_agree(enum zn_offload_device off, bool bf16)
{
	static const int depths[] = { 2, 4, 5, 6, 9, 1000 };
	int *stream = et_tokens(et_stream_len(ET_STEPS, 1, 1, 2), 96, 11);
	struct et_run ref, r;

	cr_assert_not_null(stream);
	run_depth(&ref, off, bf16, 1, stream);
	for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
		run_depth(&r, off, bf16, depths[i], stream);
		assert_same(&ref, &r, depths[i]);
		et_run_free(&r);
	}
	et_run_free(&ref);
	free(stream);
}

Test(engine_prefetch, stage3_cpu_offload_any_depth_same_result)
{
	depths_agree(ZN_OFFLOAD_CPU, false);
}

Test(engine_prefetch, stage3_on_device_any_depth_same_result)
{
	depths_agree(ZN_OFFLOAD_NONE, false);
}

Test(engine_prefetch, stage3_bf16_cpu_offload_any_depth_same_result)
{
	depths_agree(ZN_OFFLOAD_CPU, true);
}

/* parameters read from nvme into the fetch ring's staging buffers */
Test(engine_prefetch, stage3_nvme_any_depth_same_result)
{
	nvme_test_dir(nvme_dir, sizeof(nvme_dir));
	depths_agree(ZN_OFFLOAD_NVME, false);
	nvme_test_rmdir(nvme_dir);
}
