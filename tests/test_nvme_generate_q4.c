/* zinc generate with a 4-bit base (docs/qlora.md): layers 1.. quantized to NF4 at load
 * (with and without double quant) and streamed as their packed extents from the device,
 * pinned host memory and nvme give every position's logits bit for bit as generation on
 * the dequantized layers (the host's dequantization of the same quantization), and read
 * fewer nvme bytes than the fp32 layers. */
#include <criterion/criterion.h>

#include "generate_check.h"
#include "model/quant/q4.h"
#include "nvme_test_util.h"

static bool nested_ref;

/* init_layer's values, the linear weights of layers 1.. quantized and dequantized */
static int dequantized(void *ctx, int layer, const struct zn_layer_desc *L, float *p)
{
	struct zn_q4_layer q;
	void *x;
	int rc = init_layer(ctx, layer, L, p);

	if (rc || layer == 0)
		return rc;
	rc = zn_q4_layout(&q, L, L->numel, ZN_DTYPE_F32, nested_ref, NULL);
	x = rc ? NULL : malloc(q.bytes);
	if (!rc)
		rc = zn_q4_pack(&q, x, p, ZN_DTYPE_F32);
	if (!rc)
		rc = zn_q4_unpack(&q, p, x, ZN_DTYPE_F32);
	free(x);
	return rc;
}

static void check(bool nested)
{
	struct zn_llama_config c = llama_cfg(false, false, 0);
	struct zn_model m = zn_llama_model(&c);
	static const enum zn_gen_home homes[] = { ZN_GEN_DEVICE, ZN_GEN_CPU, ZN_GEN_NVME };
	size_t n = (size_t)T_ALL * c.vocab;
	float *want = calloc(n, sizeof(float)), *got = calloc(n, sizeof(float));
	char dir[ZN_PATH_MAX];
	struct zn_gen_stats st;
	struct zn_gen *g;
	uint64_t fp32_read;

	nvme_test_dir(dir, sizeof(dir));
	nested_ref = nested;
	{
		struct zn_gen_opts o = { .max_t = T_ALL, .max_chunk = 5, .home = ZN_GEN_DEVICE,
					 .device = ZN_DEVICE_HOST, .init_layer = dequantized };

		cr_assert_eq(zn_gen_create(&g, &m, &o), 0);
		decode_all(g, c.vocab, want);
		zn_gen_destroy(g);
	}
	g = make(&m, ZN_GEN_NVME, dir);
	decode_all(g, c.vocab, got);
	zn_gen_stats(g, &st);
	fp32_read = st.nvme_read_bytes;
	zn_gen_destroy(g);
	for (size_t h = 0; h < sizeof(homes) / sizeof(homes[0]); h++) {
		struct zn_gen_opts o = { .max_t = T_ALL, .max_chunk = 5, .home = homes[h],
					 .nvme_path = dir, .device = ZN_DEVICE_HOST,
					 .init_layer = init_layer,
					 .quantize_base = ZN_QUANTIZE_NF4, .double_quant = nested };

		cr_assert_eq(zn_gen_create(&g, &m, &o), 0);
		memset(got, 0, n * sizeof(float));
		decode_all(g, c.vocab, got);
		for (size_t i = 0; i < n; i++)
			cr_assert_eq(memcmp(&got[i], &want[i], 4), 0,
				     "home %zu: logit %zu: %.9g vs %.9g", h, i, (double)got[i],
				     (double)want[i]);
		zn_gen_stats(g, &st);
		if (homes[h] == ZN_GEN_NVME)
			cr_assert(st.nvme_read_bytes > 0 && st.nvme_read_bytes < fp32_read,
				  "read %llu, fp32 %llu", (unsigned long long)st.nvme_read_bytes,
				  (unsigned long long)fp32_read);
		zn_gen_destroy(g);
	}
	free(want);
	free(got);
	nvme_test_rmdir(dir);
}

Test(nvme_generate_q4, nf4_streamed_matches_the_dequantized_layers) { check(false); }
Test(nvme_generate_q4, nf4_double_quant_streamed_matches) { check(true); }
