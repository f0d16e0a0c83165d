/* zinc generate on a Qwen3-30B-A3B-shaped mixture of experts (128 experts, 8 per token;
 * tiny dims) with its layers streamed from host memory or nvme (docs/generate.md): only the
 * routed experts come up. A decoded token routes to 8 distinct experts in each sparse
 * layer, so each one-token forward fetches exactly 8 x the sparse layers experts, their
 * stored bytes, and reads from nvme the layers' rest plus one aligned extent an expert;
 * the logits of every position and the greedy ids are bit for bit those of the layers on
 * the device (every expert in place). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generate_check.h"
#include "nvme_test_util.h"

#define G_E 128
#define G_K 8
#define G_C 32
#define G_I 8

static struct zn_llama_config moe_cfg(void)
{
	struct zn_llama_config c;

	cr_assert_eq(zn_llama_config_from_preset("qwen3-30b-a3b", &c), 0);
	c.layers = 2;
	c.hidden = G_C;
	c.intermediate = 64;
	c.heads = 4;
	c.kv_heads = 2;
	c.head_dim = 8;
	c.vocab = 64;
	c.seq = T_ALL;
	c.max_positions = T_ALL;
	c.experts = G_E;
	c.experts_per_tok = G_K;
	c.moe_intermediate = G_I;
	c.aux = false;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	return c;
}

/* one use sequence per forward: every read of a forward is complete at its end */
static struct zn_gen *make_home(const struct zn_model *m, enum zn_gen_home home,
				const char *dir)
{
	struct zn_gen_opts o = { .max_t = T_ALL, .max_chunk = 5, .home = home,
				 .nvme_path = home == ZN_GEN_NVME ? dir : NULL,
				 .device = ZN_DEVICE_HOST, .prefetch_depth = 2, .fz_forwards = 1,
				 .init_layer = init_layer };
	struct zn_gen *g = NULL;

	cr_assert_eq(zn_gen_create(&g, m, &o), 0);
	return g;
}

static uint64_t align4k(uint64_t b)
{
	return (b + 4095) / 4096 * 4096;
}

/* the streamed layers' reads per forward without their experts, and the sparse layers */
static uint64_t rest_extents(const struct zn_model *m, int *sparse)
{
	const int n = m->ops->layer_count(m->config);
	uint64_t sum = 0;

	*sparse = 0;
	for (int l = 1; l < n; l++) {
		struct zn_layer_desc L;
		uint64_t xn = 0;

		cr_assert_eq(m->ops->describe(m->config, l, &L), 0);
		for (int t = 0; t < L.tensor_count; t++)
			xn += L.tensors[t].parts > 0 ? L.tensors[t].numel : 0;
		*sparse += xn > 0;
		sum += align4k((L.numel - xn) * 4);
		zn_layer_desc_release(&L);
	}
	return sum;
}

static void check_home(enum zn_gen_home home)
{
	struct zn_llama_config c = moe_cfg();
	struct zn_model m = zn_llama_model(&c);
	const int V = m.ops->vocab(m.config);
	const size_t bytes = sizeof(float) * T_ALL * (size_t)V;
	const uint64_t xb = (uint64_t)3 * G_I * G_C * 4; /* an expert's gate_up and down */
	float *want = malloc(bytes), *got = malloc(bytes);
	char dir[ZN_PATH_MAX];
	struct zn_gen_stats s0, s1;
	struct zn_gen *g;
	int sparse, want_ids[T_ALL], got_ids[T_ALL];
	uint64_t rest = rest_extents(&m, &sparse);

	cr_assert_eq(sparse, 2);
	nvme_test_dir(dir, sizeof(dir));
	g = make(&m, ZN_GEN_DEVICE, NULL);
	decode_all(g, V, want);
	zn_gen_stats(g, &s0);
	cr_assert_eq(s0.expert_all_fetches, 0, "layers on the device fetch no expert");
	greedy(g, V, want_ids);
	zn_gen_destroy(g);
	g = make_home(&m, home, dir);
	memset(got, 0, bytes);
	/* the prefill: 5 tokens, 8 experts each: at least 8 and at most 40 a layer */
	cr_assert_eq(zn_gen_forward(g, tokens, 5, 5, got), 0);
	zn_gen_stats(g, &s1);
	cr_assert_geq(s1.expert_fetches, (uint64_t)sparse * G_K);
	cr_assert_leq(s1.expert_fetches, (uint64_t)sparse * 5 * G_K);
	cr_assert_eq(s1.expert_bytes, s1.expert_fetches * xb);
	cr_assert_eq(s1.expert_all_fetches, (uint64_t)sparse * G_E);
	cr_assert_eq(s1.expert_all_bytes, (uint64_t)sparse * G_E * xb);
	for (int t = 5; t < T_ALL; t++) {
		s0 = s1;
		cr_assert_eq(zn_gen_forward(g, tokens + t, 1, 1, got + (size_t)t * V), 0);
		zn_gen_stats(g, &s1);
		/* K of E experts in each sparse layer: K/E of the experts' bytes */
		cr_assert_eq(s1.expert_fetches - s0.expert_fetches, (uint64_t)sparse * G_K,
			     "token %d: %llu fetches", t,
			     (unsigned long long)(s1.expert_fetches - s0.expert_fetches));
		cr_assert_eq(s1.expert_bytes - s0.expert_bytes, (uint64_t)sparse * G_K * xb);
		cr_assert_eq(s1.expert_all_bytes - s0.expert_all_bytes,
			     (uint64_t)sparse * G_E * xb);
		if (home == ZN_GEN_NVME)
			cr_assert_eq(s1.nvme_read_bytes - s0.nvme_read_bytes,
				     rest + (uint64_t)sparse * G_K * align4k(xb),
				     "token %d read %llu", t,
				     (unsigned long long)(s1.nvme_read_bytes - s0.nvme_read_bytes));
	}
	cr_assert(!memcmp(want, got, bytes), "the logits differ from the layers on the device");
	greedy(g, V, got_ids);
	cr_assert(!memcmp(want_ids, got_ids, sizeof(int) * (T_ALL - 5)), "greedy ids differ");
	zn_gen_destroy(g);
	cr_expect_eq(rmdir(dir), 0, "the layers' file was left in %s", dir);
	free(want);
	free(got);
}

Test(nvme_generate_experts, routed_experts_from_cpu) { check_home(ZN_GEN_CPU); }
Test(nvme_generate_experts, routed_experts_from_nvme) { check_home(ZN_GEN_NVME); }
