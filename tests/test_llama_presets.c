/* The Llama presets (src/model/llama/llama_presets.c): each one's parameter count is the one
 * Hugging Face reports for the published checkpoint (computed from the layer shapes, and
 * equal to the count of the config.json in tests/hf/), its fields equal that config's; the
 * model flags; the way back to config.json fields; the model ops' load_layer and save
 * (F32 bit for bit, BF16 and F16 within their rounding). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/hf_config.h"
#include "model/llama/llama.h"

static const struct {
	const char *preset, *file;
	uint64_t params;
} published[] = {
	{ "tinyllama-1.1b", "tinyllama-1.1b.json", 1100048384ull },
	{ "llama-3.2-1b", "llama-3.2-1b.json", 1235814400ull },
	{ "llama-3.2-3b", "llama-3.2-3b.json", 3212749824ull },
	{ "llama-3-8b", "llama-3-8b.json", 8030261248ull },
	{ "llama-3-70b", "llama-3-70b.json", 70553706496ull },
	{ "llama-2-7b", "llama-2-7b.json", 6738415616ull },
	{ "llama-2-13b", "llama-2-13b.json", 13015864320ull },
};

Test(llama_presets, param_counts_are_hugging_faces)
{
	for (size_t i = 0; i < sizeof(published) / sizeof(published[0]); i++) {
		struct zn_llama_config p, f;
		struct zn_hf_config hf;
		char path[512];
		uint64_t sum = 0;

		cr_assert_eq(zn_llama_config_from_preset(published[i].preset, &p), 0);
		cr_expect_eq(zn_llama_param_count(&p), published[i].params, "%s: %llu, HF %llu",
			     published[i].preset, (unsigned long long)zn_llama_param_count(&p),
			     (unsigned long long)published[i].params);
		/* from the shapes themselves: the layers' tensors */
		for (int l = 0; l < zn_llama_layer_count(&p); l++) {
			struct zn_layer_desc L;

			cr_assert_eq(zn_llama_layer(&p, l, &L), 0);
			for (int t = 0; t < L.tensor_count; t++)
				sum += (uint64_t)L.tensors[t].shape[0] * (uint64_t)L.tensors[t].shape[1];
			zn_layer_desc_release(&L);
		}
		cr_expect_eq(sum, published[i].params, "%s layers", published[i].preset);
		/* the same model as the published config.json */
		snprintf(path, sizeof(path), "%s/tests/hf/%s", ZN_TEST_SRC_DIR, published[i].file);
		cr_assert_eq(zn_hf_config_load(path, &hf), 0);
		cr_assert_eq(zn_llama_config_from_hf(&hf, &f), 0);
		cr_expect_eq(memcmp(&f, &p, sizeof(f)), 0, "%s differs from %s",
			     published[i].preset, published[i].file);
		cr_expect_eq(zn_hf_param_count(&hf), published[i].params);
	}
}

Test(llama_presets, names_and_tiny)
{
	const char *const *names = zn_llama_preset_names();
	struct zn_llama_config c;
	int n = 0;

	for (; names[n]; n++)
		cr_expect(zn_llama_is_preset(names[n]), "%s", names[n]);
	cr_expect_eq(n, 17); /* 8 Llama, 6 Qwen3, 3 mixtures of experts */
	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
	cr_expect(c.layers == 2 && c.hidden == 64 && c.intermediate == 128 && c.heads == 4 &&
		  c.kv_heads == 2 && c.head_dim == 16 && c.vocab == 256 && c.seq == 64 &&
		  !c.tied && !c.qkv_bias);
	/* 256x64 embed, 2 x (64 + (4+2+2)x16x64 + 64x64 + 64 + 2x128x64 + 64x128), 64 + 256x64 */
	cr_expect_eq(zn_llama_param_count(&c), 16384ull + 2 * (64 + 8192 + 4096 + 64 + 16384 +
							      8192) + 64 + 16384);
	/* the default training length of a 128k-position model is 2048 */
	cr_assert_eq(zn_llama_config_from_preset("llama-3.2-1b", &c), 0);
	cr_expect_eq(c.seq, 2048);
	cr_expect_eq(c.max_positions, 131072);
	cr_expect(c.tied && c.rope.type == ZN_ROPE_LLAMA3);
}

Test(llama_presets, flags, .init = cr_redirect_stderr)
{
	struct zn_llama_config c;
	char *argv[] = { "--layers", "3", "--model", "llama-tiny", "--kv-heads=1", "--d-model",
			 "32", "--heads", "2", "--tied-embeddings", "true", "--steps", "4" };
	char *rest[13];
	char *bad[] = { "--model", "llama-tiny", "--heads", "3" };
	char *bad2[] = { "--model", "llama-nope" };
	int k = 0;

	cr_assert_eq(zn_llama_config_apply_flags(&c, 13, argv, rest, &k), 0);
	cr_expect(c.layers == 3 && c.kv_heads == 1 && c.hidden == 32 && c.heads == 2 &&
		  c.head_dim == 16 && c.tied && c.intermediate == 128);
	cr_assert_eq(k, 2);
	cr_expect_str_eq(rest[0], "--steps");
	cr_expect_str_eq(rest[1], "4");
	/* 64 is not a multiple of 3 heads, and kv 2 does not divide 3 */
	cr_expect_eq(zn_llama_config_apply_flags(&c, 4, bad, rest, &k), -EINVAL);
	cr_expect_eq(zn_llama_config_apply_flags(&c, 2, bad2, rest, &k), -EINVAL);
}

/* config.json fields back from a configuration: the published config reads back equal */
Test(llama_presets, to_hf_round_trip)
{
	const char *files[] = { "llama-3.2-1b.json", "qwen2-0.5b.json", "mistral-7b-v0.1.json",
				"llama-2-7b.json", "qwen3-32b.json" };

	for (int i = 0; i < 5; i++) {
		struct zn_hf_config hf, back;
		struct zn_llama_config c, d;
		char path[512];

		snprintf(path, sizeof(path), "%s/tests/hf/%s", ZN_TEST_SRC_DIR, files[i]);
		cr_assert_eq(zn_hf_config_load(path, &hf), 0);
		cr_assert_eq(zn_llama_config_from_hf(&hf, &c), 0);
		zn_llama_config_to_hf(&c, &back);
		cr_expect(back.family == hf.family && back.type == hf.type, "%s", files[i]);
		cr_expect_eq(back.norm_eps, hf.norm_eps, "%s", files[i]);
		cr_expect_eq(back.max_position_embeddings, hf.max_position_embeddings);
		cr_expect_eq(zn_hf_param_count(&back), zn_hf_param_count(&hf), "%s", files[i]);
		cr_assert_eq(zn_llama_config_from_hf(&back, &d), 0);
		cr_expect_eq(memcmp(&c, &d, sizeof(c)), 0, "%s", files[i]);
	}
}

/* Qwen3's presets: Hugging Face's num_parameters() of the published models (the model
 * cards' 0.6B / 0.44B non-embedding, 1.7B / 1.4B, 4.0B / 3.6B, 8.2B / 6.95B, 14.8B /
 * 13.2B, 32.8B / 31.2B), the 32B preset the
 * published config.json, q/k norms in every block */
Test(llama_presets, qwen3)
{
	static const char *const names[] = { "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",
					     "qwen3-8b",   "qwen3-14b",  "qwen3-32b" };
	static const uint64_t params[] = { 596049920ull,  1720574976ull,  4022468096ull,
					   8190735360ull, 14768307200ull, 32762123264ull };
	struct zn_llama_config c, f;
	struct zn_hf_config hf;
	struct zn_layer_desc L;
	char path[512];

	for (int i = 0; i < 6; i++) {
		cr_assert_eq(zn_llama_config_from_preset(names[i], &c), 0, "%s", names[i]);
		cr_expect(c.qk_norm && c.head_dim == 128 && c.eps == 1e-6f &&
			  c.rope.theta == 1e6 && c.tied == (i < 3) && !c.qkv_bias && !c.o_bias,
			  "%s", names[i]);
		cr_expect_eq(zn_llama_param_count(&c), params[i], "%s: %llu", names[i],
			     (unsigned long long)zn_llama_param_count(&c));
		zn_llama_config_to_hf(&c, &hf);
		cr_expect_str_eq(zn_hf_model_type(&hf), "qwen3");
		cr_expect_eq(zn_hf_param_count(&hf), params[i], "%s", names[i]);
	}
	cr_assert_eq(zn_llama_layer(&c, 1, &L), 0);
	cr_expect_str_eq(L.tensors[4].name, "model.layers.0.self_attn.q_norm.weight");
	cr_expect_str_eq(L.tensors[5].name, "model.layers.0.self_attn.k_norm.weight");
	cr_expect(L.tensors[4].numel == 128 && !L.tensors[4].decay);
	zn_layer_desc_release(&L);
	snprintf(path, sizeof(path), "%s/tests/hf/qwen3-32b.json", ZN_TEST_SRC_DIR);
	cr_assert_eq(zn_hf_config_load(path, &hf), 0);
	cr_assert_eq(zn_llama_config_from_hf(&hf, &f), 0);
	cr_expect_eq(memcmp(&c, &f, sizeof(c)), 0, "the qwen3-32b preset is not its config.json");
}

/* the model ops' save then load_layer: every layer back bit for bit, a directory and a file */
Test(llama_presets, ops_save_then_load_layer)
{
	struct zn_llama_config c;
	struct zn_model m;
	struct zn_layer_desc L[4];
	float *p[4];
	char dir[64], path[128];

	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
	m = zn_llama_model(&c);
	cr_assert_not_null(m.ops->save);
	cr_assert_not_null(m.ops->load_layer);
	snprintf(dir, sizeof(dir), "/tmp/zn_test_llama_XXXXXX");
	cr_assert(mkdtemp(dir));
	cr_assert_eq(zn_llama_layers(&c, L), 0);
	for (int l = 0; l < 4; l++) {
		p[l] = malloc(L[l].numel * sizeof(float));
		zn_llama_init_range(&c, &L[l], 0, L[l].numel, p[l], 5);
	}
	/* F32 bit for bit; BF16 and F16 within their rounding (weights of std 0.02, norms 1) */
	for (int f = 0; f < 4; f++) {
		static const enum zn_dtype dt[4] = { ZN_DTYPE_F32, ZN_DTYPE_F32, ZN_DTYPE_BF16,
						     ZN_DTYPE_F16 };
		static const float tol[4] = { 0, 0, 1.0f / 256, 1.0f / 2048 };

		snprintf(path, sizeof(path), f == 1 ? "%s/one%d.safetensors" : "%s/d%d", dir,
			 f);
		cr_assert_eq(m.ops->save(&c, L, (const float *const *)p, path, dt[f]), 0);
		for (int l = 0; l < 4; l++) {
			float *b = calloc(L[l].numel, sizeof(float));
			float worst = 0;

			cr_assert_eq(m.ops->load_layer(&c, &L[l], path, b), 0, "%s %d", path, l);
			for (uint64_t i = 0; i < L[l].numel; i++) {
				/* F16 subnormals below 6.1e-5: a step of 6e-8 */
				float e = (fabsf(b[i] - p[l][i]) - 6e-8f) / (fabsf(p[l][i]) + 1e-30f);

				worst = e > worst ? e : worst;
			}
			cr_expect(worst <= tol[f], "%s layer %d: relative error %g", path, l,
				  (double)worst);
			free(b);
		}
	}
	for (int l = 0; l < 4; l++) {
		free(p[l]);
		zn_layer_desc_release(&L[l]);
	}
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	cr_expect_eq(system(path), 0);
}

/* the mixtures of experts: every block sparse; the parameter counts of the published
 * models (Mixtral-8x7B 46.7B, Qwen3-30B-A3B 30.5B, Qwen3-235B-A22B 235.1B), the same through
 * the layer descriptors (the fused expert stacks) and through config.json's layout (every
 * expert's tensors by name) */
Test(llama_presets, mixtures_of_experts)
{
	static const struct {
		const char *name;
		int experts, per_tok, inter;
		uint64_t params;
	} moe[] = {
		{ "mixtral-8x7b", 8, 2, 14336, 46702792704ull },
		{ "qwen3-30b-a3b", 128, 8, 768, 30532122624ull },
		{ "qwen3-235b-a22b", 128, 8, 1536, 235093634560ull },
	};

	for (size_t i = 0; i < sizeof(moe) / sizeof(moe[0]); i++) {
		struct zn_llama_config c;
		struct zn_hf_config hf;

		cr_assert_eq(zn_llama_config_from_preset(moe[i].name, &c), 0, "%s", moe[i].name);
		cr_expect(c.experts == moe[i].experts && c.experts_per_tok == moe[i].per_tok &&
			  c.moe_intermediate == moe[i].inter && c.norm_topk && !c.aux,
			  "%s", moe[i].name);
		for (int l = 0; l < c.layers; l++)
			cr_expect(zn_llama_layer_is_moe(&c, l), "%s layer %d", moe[i].name, l);
		cr_expect_eq(zn_llama_param_count(&c), moe[i].params, "%s", moe[i].name);
		zn_llama_config_to_hf(&c, &hf);
		cr_expect_eq(zn_hf_param_count(&hf), moe[i].params, "%s", moe[i].name);
		cr_expect_eq(zn_hf_layout_count(&hf), 3 + c.layers * (c.qk_norm ? 9 : 7) +
			     c.layers * 3 * c.experts, "%s", moe[i].name);
	}
}

/* splitmix64 output i of the stream at seed, and Box-Muller's cosine branch of outputs 2i and
 * 2i + 1: the documented init (core/rand.h), written out here as the reference */
static uint64_t ref_splitmix(uint64_t seed, uint64_t i)
{
	uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* the init fills a tensor from many threads (omp, above 65536 elements): every element is
 * the serial reference's, norms 1 */
Test(llama_presets, init_is_the_serial_reference_on_every_thread)
{
	struct zn_llama_config c;
	struct zn_layer_desc L;
	float *p;
	uint64_t bad = 0, key, most = 0;

	/* a real layer's shapes: its matrices are millions of elements */
	cr_assert_eq(zn_llama_config_from_preset("qwen3-0.6b", &c), 0);
	cr_assert_eq(zn_llama_layer(&c, 1, &L), 0);
	for (int t = 0; t < L.tensor_count; t++)
		most = L.tensors[t].numel > most ? L.tensors[t].numel : most;
	cr_assert_gt(most, 65536, "a tensor must be large enough to be split");
	p = malloc(L.numel * sizeof(float));
	cr_assert_not_null(p);
	zn_llama_init_range(&c, &L, 0, L.numel, p, 11);
	for (int t = 0; t < L.tensor_count; t++) {
		const struct zn_tensor_desc *d = &L.tensors[t];

		key = ref_splitmix(ref_splitmix(ref_splitmix(11, 0), 1), (uint64_t)t);
		for (uint64_t i = 0; i < d->numel; i++) {
			double u1 = ((double)(ref_splitmix(key, 2 * i) >> 11) + 1.0) * 0x1.0p-53;
			double u2 = (double)(ref_splitmix(key, 2 * i + 1) >> 11) * 0x1.0p-53;
			float one = strstr(d->name, "norm.weight") ? 1.0f : 0.0f;
			float want = d->ndim == 2 ? 0.02f * (float)(sqrt(-2.0 * log(u1)) *
								   cos(2.0 * M_PI * u2)) :
						    one;

			bad += memcmp(&p[d->offset + i], &want, sizeof(want)) != 0;
		}
	}
	cr_expect_eq(bad, 0, "%llu elements differ from the serial reference",
		     (unsigned long long)bad);
	zn_layer_desc_release(&L);
	free(p);
}

/* Mixtral has one intermediate_size, its experts': --intermediate sets the experts' too, so
 * the config written and read back is the model trained; a configuration whose experts
 * differ is refused (it has no config.json) */
Test(llama_presets, mixtral_intermediate_is_its_experts, .init = cr_redirect_stderr)
{
	char *argv[] = { "--model", "mixtral-8x7b", "--layers", "2", "--d-model", "64",
			 "--heads", "4", "--kv-heads", "2", "--intermediate", "96", "--vocab", "128" };
	char *rest[14];
	int rest_count;
	struct zn_llama_config c, back;
	struct zn_hf_config hf;

	cr_assert_eq(zn_llama_config_apply_flags(&c, 14, argv, rest, &rest_count), 0);
	cr_expect_eq(c.intermediate, 96);
	cr_expect_eq(c.moe_intermediate, 96, "the experts kept %d", c.moe_intermediate);
	zn_llama_config_to_hf(&c, &hf);
	cr_assert_eq(zn_llama_config_from_hf(&hf, &back), 0);
	cr_expect_eq(back.moe_intermediate, 96);
	c.moe_intermediate = 48;
	cr_expect_eq(zn_llama_config_validate(&c), -EINVAL);
}
