/* zinc generate's forward with a KV cache (src/sched/generate.h, the models' decode ops):
 * the logits of a prefill and of one-token decode steps equal a full training forward of
 * the whole sequence (GPT-2; Llama with GQA, RoPE, biases, tied head, Mistral's window);
 * streamed layers (cpu, nvme) give the same bits as layers on the device; the sampler. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gpt2/gpt2.h"
#include "model/llama/llama.h"
#include "sched/generate.h"
#include "sched/generate_sample.h"

#include "generate_check.h"
#include "nvme_test_util.h"

/* log p_t(v) for every t, v from the training forward: the last layer's loss with every
 * target set to v is -log softmax(logits_t)[v] */
static void reference(const struct zn_model *m, double *logp)
{
	const struct zn_model_ops *ops = m->ops;
	const int n = ops->layer_count(m->config), V = ops->vocab(m->config);
	const int C = ops->width(m->config);
	struct zn_layer_desc *L = calloc((size_t)n, sizeof(*L));
	float **p = calloc((size_t)n, sizeof(float *)), *x[2], *acts, *scratch, losses[T_ALL];
	uint64_t amax = 1, smax = 1;
	int targets[T_ALL];

	for (int l = 0; l < n; l++) {
		cr_assert_eq(ops->describe(m->config, l, &L[l]), 0);
		p[l] = malloc(L[l].numel * sizeof(float));
		init_layer(NULL, l, &L[l], p[l]);
		uint64_t a = ops->act_numel(m->config, &L[l], 1, T_ALL);
		uint64_t s = ops->scratch_numel(m->config, &L[l], 1, T_ALL);

		amax = a > amax ? a : amax;
		smax = s > smax ? s : smax;
	}
	acts = calloc(amax, sizeof(float));
	scratch = calloc(smax, sizeof(float));
	x[0] = calloc((size_t)T_ALL * C, sizeof(float));
	x[1] = calloc((size_t)T_ALL * C, sizeof(float));
	for (int l = 0; l < n - 1; l++) {
		struct zn_layer_io io = { .L = &L[l], .params = p[l], .acts = acts,
					  .scratch = scratch, .x_in = l ? x[(l - 1) % 2] : NULL,
					  .x_out = x[l % 2], .tokens = tokens, .B = 1, .T = T_ALL };

		ops->forward(&zn_kernels_cpu, NULL, m->config, &io);
	}
	for (int v = 0; v < V; v++) {
		struct zn_layer_io io = { .L = &L[n - 1], .params = p[n - 1], .acts = acts,
					  .scratch = scratch, .x_in = x[(n - 2) % 2],
					  .tokens = tokens, .targets = targets, .losses = losses,
					  .B = 1, .T = T_ALL };

		io.tied_params = L[n - 1].tied_layer == 0 ? p[0] : NULL;
		for (int t = 0; t < T_ALL; t++)
			targets[t] = v;
		ops->forward(&zn_kernels_cpu, NULL, m->config, &io);
		for (int t = 0; t < T_ALL; t++)
			logp[t * V + v] = -(double)losses[t];
	}
	for (int l = 0; l < n; l++) {
		free(p[l]);
		zn_layer_desc_release(&L[l]);
	}
	free(p), free(L), free(acts), free(scratch), free(x[0]), free(x[1]);
}

static void log_softmax(const float *z, int V, double *out)
{
	double mx = z[0], s = 0;

	for (int v = 1; v < V; v++)
		mx = z[v] > mx ? z[v] : mx;
	for (int v = 0; v < V; v++)
		s += exp((double)z[v] - mx);
	for (int v = 0; v < V; v++)
		out[v] = (double)z[v] - mx - log(s);
}

static void check_against_forward(const struct zn_model *m, const char *what)
{
	const int V = m->ops->vocab(m->config);
	double *ref = malloc(sizeof(double) * T_ALL * V), *got = malloc(sizeof(double) * V);
	float *logits = malloc(sizeof(float) * T_ALL * V);
	struct zn_gen *g = make(m, ZN_GEN_DEVICE, NULL);
	double worst = 0, spread = 0;

	reference(m, ref);
	decode_all(g, V, logits);
	for (int t = 0; t < T_ALL; t++) {
		log_softmax(logits + (size_t)t * V, V, got);
		for (int v = 0; v < V; v++) {
			double d = fabs(got[v] - ref[t * V + v]);

			worst = d > worst ? d : worst;
			spread = fabs(ref[t * V + v] + log((double)V)) > spread ?
					 fabs(ref[t * V + v] + log((double)V)) : spread;
		}
	}
	/* the reference is far from uniform, and the decode agrees to fp32 rounding */
	cr_expect_gt(spread, 1.0, "%s: log-probabilities within %g of uniform", what, spread);
	cr_expect_lt(worst, 2e-4, "%s: KV-cache log-probabilities differ by %g", what, worst);
	zn_gen_destroy(g);
	free(ref), free(got), free(logits);
}

Test(generate, gpt2_kv_cache_equals_full_forward)
{
	struct zn_gpt2_config c = gpt2_cfg();
	struct zn_model m = zn_gpt2_model(&c);

	check_against_forward(&m, "gpt2");
}

Test(generate, llama_gqa_kv_cache_equals_full_forward)
{
	struct zn_llama_config c = llama_cfg(false, false, 0);
	struct zn_model m = zn_llama_model(&c);

	check_against_forward(&m, "llama gqa untied");
}

Test(generate, llama_biases_tied_window_kv_cache_equals_full_forward)
{
	struct zn_llama_config c = llama_cfg(true, true, 4);
	struct zn_model m = zn_llama_model(&c);

	check_against_forward(&m, "llama biases, tied, window 4");
}

/* streamed layers: the same logits bit for bit as layers held on the device */
static void check_streamed(const struct zn_model *m)
{
	const int V = m->ops->vocab(m->config);
	float *want = malloc(sizeof(float) * T_ALL * V), *got = malloc(sizeof(float) * T_ALL * V);
	char dir[ZN_PATH_MAX];
	struct zn_gen *g;
	struct zn_gen_stats s;

	nvme_test_dir(dir, sizeof(dir)); /* the nvme home needs O_DIRECT */
	g = make(m, ZN_GEN_DEVICE, NULL);
	decode_all(g, V, want);
	zn_gen_destroy(g);
	for (int home = ZN_GEN_CPU; home <= ZN_GEN_NVME; home++) {
		memset(got, 0, sizeof(float) * T_ALL * V);
		g = make(m, (enum zn_gen_home)home, dir);
		decode_all(g, V, got);
		zn_gen_stats(g, &s);
		cr_expect_gt(s.streamed_bytes, 0, "home %d streamed nothing", home);
		cr_expect(!memcmp(want, got, sizeof(float) * T_ALL * V),
			  "home %d: logits differ from the on-device ones", home);
		zn_gen_destroy(g);
	}
	cr_expect_eq(rmdir(dir), 0, "the nvme layer file was left in %s", dir);
	free(want), free(got);
}

Test(generate, streamed_cpu_and_nvme_equal_on_device_gpt2)
{
	struct zn_gpt2_config c = gpt2_cfg();
	struct zn_model m = zn_gpt2_model(&c);

	check_streamed(&m);
}

Test(generate, streamed_cpu_and_nvme_equal_on_device_llama)
{
	struct zn_llama_config c = llama_cfg(false, false, 0);
	struct zn_model m = zn_llama_model(&c);

	check_streamed(&m);
}

Test(generate, refusals)
{
	struct zn_gpt2_config c = gpt2_cfg();
	struct zn_model m = zn_gpt2_model(&c);
	struct zn_gen_opts o = { .max_t = T_ALL + 1, .max_chunk = 4, .device = ZN_DEVICE_HOST,
				 .init_layer = init_layer };
	struct zn_gen *g = NULL;
	float logits[64 * 8];
	int many[8] = { 0 };

	cr_expect_neq(zn_gen_create(&g, &m, &o), 0, "a cache beyond wpe's rows");
	o.max_t = T_ALL, o.home = ZN_GEN_NVME;
	cr_expect_neq(zn_gen_create(&g, &m, &o), 0, "nvme without a path");
	o.home = ZN_GEN_DEVICE, o.device_mem = 4096;
	cr_expect_neq(zn_gen_create(&g, &m, &o), 0, "a budget too small");
	o.device_mem = 0;
	cr_assert_eq(zn_gen_create(&g, &m, &o), 0);
	cr_expect_neq(zn_gen_forward(g, many, 5, 1, logits), 0, "beyond the chunk");
	many[0] = 64;
	cr_expect_neq(zn_gen_forward(g, many, 1, 1, logits), 0, "a token beyond the vocab");
	zn_gen_destroy(g);
}

Test(generate_sample, greedy_top_k_top_p_and_seeds)
{
	float z[6] = { 0.1f, 2.0f, 1.9f, -1.0f, 2.0f, 0.0f };
	struct zn_sampler s;
	int a[200], b[200], count[6] = { 0 };
	int differ = 0;

	cr_assert_eq(zn_sampler_init(&s, 0.0f, 0, 1.0f, 1, 6), 0);
	cr_expect_eq(zn_sample(&s, z, 0), 1, "greedy: the first of the tied maxima");
	zn_sampler_free(&s);
	cr_assert_eq(zn_sampler_init(&s, 1.0f, 1, 1.0f, 5, 6), 0);
	for (int i = 0; i < 20; i++)
		cr_expect_eq(zn_sample(&s, z, (uint64_t)i), 1, "top-k 1 is greedy");
	zn_sampler_free(&s);
	cr_assert_eq(zn_sampler_init(&s, 1.0f, 0, 0.5f, 5, 6), 0);
	for (int i = 0; i < 50; i++) {
		int k = zn_sample(&s, z, (uint64_t)i);

		cr_expect(k == 1 || k == 4, "top-p 0.5 keeps the two tied maxima, got %d", k);
	}
	zn_sampler_free(&s);
	/* the same seed, the same draws; another seed, others */
	cr_assert_eq(zn_sampler_init(&s, 1.0f, 0, 1.0f, 42, 6), 0);
	for (int i = 0; i < 200; i++)
		a[i] = zn_sample(&s, z, (uint64_t)i);
	for (int i = 0; i < 200; i++)
		b[i] = zn_sample(&s, z, (uint64_t)i);
	cr_expect(!memcmp(a, b, sizeof(a)), "seed 42 twice gave different draws");
	zn_sampler_free(&s);
	cr_assert_eq(zn_sampler_init(&s, 1.0f, 0, 1.0f, 43, 6), 0);
	for (int i = 0; i < 200; i++) {
		b[i] = zn_sample(&s, z, (uint64_t)i);
		differ += a[i] != b[i];
		count[a[i]]++;
	}
	cr_expect_gt(differ, 50, "seeds 42 and 43 drew the same");
	zn_sampler_free(&s);
	/* frequencies follow softmax(z): p(1) = p(4) ~ 0.32, p(3) ~ 0.017 */
	cr_expect(count[1] > 40 && count[4] > 40 && count[3] < 15, "counts %d %d %d", count[1],
		  count[4], count[3]);
	cr_expect_neq(zn_sampler_init(&s, -1.0f, 0, 1.0f, 0, 6), 0);
	cr_expect_neq(zn_sampler_init(&s, 1.0f, -1, 1.0f, 0, 6), 0);
	cr_expect_neq(zn_sampler_init(&s, 1.0f, 0, 0.0f, 0, 6), 0);
	cr_expect_neq(zn_sampler_init(&s, 1.0f, 0, 1.5f, 0, 6), 0);
}
