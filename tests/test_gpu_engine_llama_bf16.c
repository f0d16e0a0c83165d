/* The Llama family's bf16 compute and chunked lm_head + cross-entropy on CUDA
 * (src/model/llama/llama_layer_bf16.c through zn_kernels_cuda: cublasGemmEx bf16 GEMMs,
 * the fused attention, the chunked lm_head) against the host device (the CPU table):
 *
 * - the tiny Llama (GQA, biases, tied) trained 5 steps with --dtype bf16 at stages 0 and
 *   3 on cuda vs the host: losses within 1e-2 relative, weights within 1e-5 + 1e-2 |w|
 *   (bf16 tolerance: both backends round the same GEMM inputs to bf16 but sum in
 *   different orders, so a rounding can flip); reruns on cuda bit-identical;
 * - fp32 compute on cuda vs the host at 1e-3 (the fp32 path, chunked lm_head);
 * - vocab 8192, B x T = 4096 rows on cuda: the device peak under 3/4 of the unchunked
 *   [BT, V] logits + probs (with a 2 GiB budget: chunks of 2048 rows);
 * - head_dim 32, the tensor-core (FlashAttention-2) attention inside the model: losses
 *   within 2e-2 of the host's fp32 attention, reruns bit-identical. (The tiny model's
 *   head_dim 8 keeps the fp32 attention on cuda: kernels/cuda/flash_attention_tc.cu.)
 * Skips with the reason without CUDA or a GPU.
 */
#include <criterion/criterion.h>

#include "cuda_kernels.h"
#include "engine_common.h"
#include "gpu_test_util.h"
#include "model/llama/llama.h"

static void need_gpu(void)
{
	char why[256];

	if (!zn_kernels_cuda_table())
		cr_skip_test("no CUDA GPU: zinc was built without CUDA");
	if (!gt_gpu_usable(why, sizeof(why)))
		cr_skip_test("%s", why);
}

static struct zn_llama_config tiny(void)
{
	struct zn_llama_config c;

	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
	c.layers = 2, c.hidden = 32, c.intermediate = 48, c.heads = 4, c.kv_heads = 2;
	c.head_dim = 8, c.vocab = 64, c.seq = 16;
	c.qkv_bias = c.o_bias = true;
	c.tied = true;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	return c;
}

/* cuda_budget: the cuda device's budget, 0 = the GPU's free memory (the lm_head chunks
 * take 1/16 of it: kernels/lmhead_ce.h) */
static int train_budget(struct et_run *r, const struct zn_llama_config *mc, int stage,
			bool bf16, enum zn_device_kind dev, const int *tok, int micro, int steps,
			uint64_t cuda_budget)
{
	struct zn_model m = zn_llama_model(mc);
	struct zn_config c;

	et_config(&c, stage, ZN_OFFLOAD_NONE, micro, 1);
	c.precision.bf16 = bf16;
	c.runtime.device = dev;
	if (dev == ZN_DEVICE_CUDA)
		c.runtime.device_mem_bytes = cuda_budget;
	else
		c.runtime.device_mem_bytes = 2ull << 30;
	cr_assert_eq(zn_config_validate(&c, 1), 0);
	return et_train_any(r, &c, &m, ZN_COMM_SINGLE, tok, steps);
}

static int train(struct et_run *r, const struct zn_llama_config *mc, int stage, bool bf16,
		 enum zn_device_kind dev, const int *tok, int micro, int steps)
{
	return train_budget(r, mc, stage, bf16, dev, tok, micro, steps, 0);
}

static void check(int stage, bool bf16)
{
	struct zn_llama_config mc = tiny();
	int *tok = et_tokens(et_stream_len(ET_STEPS, 1, 1, ET_B), mc.vocab, 7);
	struct et_run host, gpu, again;
	char what[64];

	snprintf(what, sizeof(what), "llama %s stage %d cuda vs host", bf16 ? "bf16" : "fp32",
		 stage);
	cr_assert_eq(train(&host, &mc, stage, bf16, ZN_DEVICE_HOST, tok, ET_B, ET_STEPS), 0);
	cr_assert_eq(train(&gpu, &mc, stage, bf16, ZN_DEVICE_CUDA, tok, ET_B, ET_STEPS), 0,
		     "%s: the cuda run failed", what);
	cr_assert_eq(train(&again, &mc, stage, bf16, ZN_DEVICE_CUDA, tok, ET_B, ET_STEPS), 0);
	cr_assert(gpu.loss[ET_STEPS - 1] < gpu.loss[0], "%s: does not train", what);
	cr_assert_eq(et_compare(what, &host, &gpu, bf16 ? 1e-2 : 1e-3), 0, "%s differ", what);
	cr_assert_eq(et_compare("cuda rerun", &gpu, &again, 0), 0, "%s: rerun differs", what);
	cr_assert(gpu.peak_bytes <= gpu.plan_bytes, "%s: device peak %llu > plan %llu", what,
		  (unsigned long long)gpu.peak_bytes, (unsigned long long)gpu.plan_bytes);
	et_run_free(&host), et_run_free(&gpu), et_run_free(&again);
	free(tok);
}

Test(gpu_llama_bf16, stage0_bf16_matches_host) { need_gpu(); check(0, true); }
Test(gpu_llama_bf16, stage3_bf16_matches_host) { need_gpu(); check(3, true); }
Test(gpu_llama_bf16, stage0_fp32_matches_host) { need_gpu(); check(0, false); }

/* head_dim 32: the FlashAttention-2 kernels inside the model (bf16 products on cuda, the
 * fp32 attention on the host). Losses within 2e-2 relative over the 5 steps, training on
 * cuda, reruns bit-identical. Weights are not compared: Adam turns a rounding-sized
 * gradient difference of a near-zero element into a step of the other sign. */
Test(gpu_llama_bf16, stage0_bf16_tensor_core_attention_matches_host)
{
	struct zn_llama_config mc = tiny();
	int *tok;
	struct et_run host, gpu, again;

	need_gpu();
	mc.hidden = 64, mc.heads = 2, mc.kv_heads = 1, mc.head_dim = 32;
	cr_assert_eq(zn_llama_config_validate(&mc), 0);
	tok = et_tokens(et_stream_len(ET_STEPS, 1, 1, ET_B), mc.vocab, 11);
	cr_assert_eq(train(&host, &mc, 0, true, ZN_DEVICE_HOST, tok, ET_B, ET_STEPS), 0);
	cr_assert_eq(train(&gpu, &mc, 0, true, ZN_DEVICE_CUDA, tok, ET_B, ET_STEPS), 0);
	cr_assert_eq(train(&again, &mc, 0, true, ZN_DEVICE_CUDA, tok, ET_B, ET_STEPS), 0);
	for (int s = 0; s < ET_STEPS; s++)
		cr_assert(fabs((double)gpu.loss[s] - host.loss[s]) <= 2e-2 * fabs(host.loss[s]),
			  "step %d: cuda loss %.9g, host %.9g", s + 1, gpu.loss[s], host.loss[s]);
	cr_assert(gpu.loss[ET_STEPS - 1] < gpu.loss[0], "does not train on cuda");
	cr_assert_eq(et_compare("cuda rerun (tensor-core attention)", &gpu, &again, 0), 0);
	et_run_free(&host), et_run_free(&gpu), et_run_free(&again);
	free(tok);
}

Test(gpu_llama_bf16, device_peak_without_the_logits)
{
	struct zn_llama_config mc = tiny();
	const int B = 512; /* BT 4096 rows, chunks of 2048: logits + probs 256 MiB unchunked */
	uint64_t logits_bytes = 2 * (uint64_t)B * ET_T * 8192 * sizeof(float);
	int *tok;

	need_gpu();
	mc.layers = 1, mc.vocab = 8192;
	cr_assert_eq(zn_llama_config_validate(&mc), 0);
	tok = et_tokens((uint64_t)B * ET_T + 1, mc.vocab, 5);
	for (int bf = 0; bf < 2; bf++) {
		struct et_run r;

		/* a 2 GiB budget: 128 MiB of chunk work, chunks of 2048 rows (with the GPU's
		 * free memory as the budget the 4096 rows are one chunk, by design) */
		cr_assert_eq(train_budget(&r, &mc, 0, bf, ZN_DEVICE_CUDA, tok, B, 1, 2ull << 30),
			     0);
		cr_assert(isfinite(r.loss[0]));
		cr_assert_lt(r.peak_bytes, logits_bytes * 3 / 4,
			     "%s: device peak %llu is not under the logits and probs' %llu bytes",
			     bf ? "bf16" : "fp32", (unsigned long long)r.peak_bytes,
			     (unsigned long long)logits_bytes);
		et_run_free(&r);
	}
	free(tok);
}
