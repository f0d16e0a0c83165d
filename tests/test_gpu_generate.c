/* zinc generate on a CUDA GPU (skipped without one): the KV-cache logits of GPT-2 and of a
 * Llama with GQA, biases, a tied head and a window equal the host device's (the CPU
 * table) within fp32 tolerance, and the layers streamed from cpu memory or an nvme file
 * give the on-GPU logits bit for bit; so do a Llama's with LoRA adapters applied unmerged
 * (zinc generate --adapter: the lora_up kernel). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generate_check.h"
#include "gpu/device.h"

static void need_gpu(void)
{
	char why[256];

	if (zn_device_cuda_count_why(why, sizeof(why)) == 0)
		cr_skip_test("no usable CUDA GPU: %s", why);
}

static void compare(const struct zn_model *m, const char *what)
{
	const int V = m->ops->vocab(m->config);
	const size_t n = (size_t)T_ALL * (size_t)V;
	float *host = malloc(sizeof(float) * n), *gpu = malloc(sizeof(float) * n);
	float *str = malloc(sizeof(float) * n);
	char dir[] = "/var/tmp/zn_gpu_gen_XXXXXX";
	struct zn_gen *g;
	double worst = 0;

	cr_assert_not_null(mkdtemp(dir));
	g = make_on(m, ZN_GEN_DEVICE, NULL, ZN_DEVICE_HOST);
	decode_all(g, V, host);
	zn_gen_destroy(g);
	g = make_on(m, ZN_GEN_DEVICE, NULL, ZN_DEVICE_CUDA);
	decode_all(g, V, gpu);
	zn_gen_destroy(g);
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)host[i] - gpu[i]) / (1.0 + fabs((double)host[i]));

		worst = d > worst ? d : worst;
	}
	cr_expect_lt(worst, 1e-4, "%s: GPU logits differ from the host's by %g", what, worst);
	for (int home = ZN_GEN_CPU; home <= ZN_GEN_NVME; home++) {
		g = make_on(m, (enum zn_gen_home)home, dir, ZN_DEVICE_CUDA);
		decode_all(g, V, str);
		zn_gen_destroy(g);
		cr_expect(!memcmp(str, gpu, sizeof(float) * n), "%s: home %d differs on the GPU",
			  what, home);
	}
	cr_expect_eq(rmdir(dir), 0);
	free(host), free(gpu), free(str);
}

Test(gpu_generate, gpt2_matches_host_and_streams_exactly)
{
	need_gpu();
	struct zn_gpt2_config c = gpt2_cfg();
	struct zn_model m = zn_gpt2_model(&c);

	compare(&m, "gpt2");
}

Test(gpu_generate, llama_matches_host_and_streams_exactly)
{
	need_gpu();
	struct zn_llama_config c = llama_cfg(true, true, 4);
	struct zn_model m = zn_llama_model(&c);

	compare(&m, "llama");
}

Test(gpu_generate, llama_with_adapters_matches_host_and_streams_exactly)
{
	need_gpu();
	struct zn_llama_config c = llama_cfg(true, false, 0);
	struct zn_model m = zn_llama_model(&c);
	struct zn_lora_config lc = { .base = m, .r = 4, .alpha = 8 };
	const int V = c.vocab;
	const size_t n = (size_t)T_ALL * (size_t)V;
	float *host = malloc(sizeof(float) * n), *gpu = malloc(sizeof(float) * n);
	float *str = malloc(sizeof(float) * n);
	struct zn_gen *g;
	double worst = 0;

	cr_assert_eq(zn_lora_add_targets(&lc, "q_proj,v_proj,gate_proj,down_proj"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	g = make_lora_on(&m, &lc, ZN_GEN_DEVICE, NULL, ZN_DEVICE_HOST);
	decode_all(g, V, host);
	zn_gen_destroy(g);
	g = make_lora_on(&m, &lc, ZN_GEN_DEVICE, NULL, ZN_DEVICE_CUDA);
	decode_all(g, V, gpu);
	zn_gen_destroy(g);
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)host[i] - gpu[i]) / (1.0 + fabs((double)host[i]));

		worst = d > worst ? d : worst;
	}
	cr_expect_lt(worst, 1e-4, "GPU logits with adapters differ from the host's by %g",
		     worst);
	g = make_lora_on(&m, &lc, ZN_GEN_CPU, NULL, ZN_DEVICE_CUDA);
	decode_all(g, V, str);
	zn_gen_destroy(g);
	cr_expect(!memcmp(str, gpu, sizeof(float) * n), "streamed layers differ on the GPU");
	zn_lora_release(&lc);
	free(host), free(gpu), free(str);
}
