/* src/model/hf_config: the published config.json files in tests/hf/ parse to the values on
 * their hub pages, their layouts hold the parameter counts Hugging Face reports, config.json
 * written back reads back the same, the JSON printer writes Python's json.dumps(indent=2,
 * sort_keys=True), and every malformed config is refused naming the file and the key.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "model/hf_config.h"
#include "model/hf_json.h"

static char *read_text(const char *path)
{
	FILE *fp = fopen(path, "rb");
	char *text;
	long n;

	cr_assert_not_null(fp, "%s", path);
	fseek(fp, 0, SEEK_END);
	n = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	text = calloc((size_t)n + 1, 1);
	cr_assert_eq(fread(text, 1, (size_t)n, fp), (size_t)n);
	fclose(fp);
	return text;
}

static const char *fixture(const char *name)
{
	static char p[512];

	snprintf(p, sizeof(p), "%s/tests/hf/%s", ZN_TEST_SRC_DIR, name);
	return p;
}

static struct zn_hf_config load(const char *name)
{
	struct zn_hf_config c;

	cr_assert_eq(zn_hf_config_load(fixture(name), &c), 0, "%s", name);
	return c;
}

/* ---- published configs ------------------------------------------------------------------- */

Test(hf_config, param_counts_are_hugging_faces)
{
	static const struct {
		const char *file;
		uint64_t params;
	} want[] = {
		{ "gpt2.json", 124439808ull },		{ "tinyllama-1.1b.json", 1100048384ull },
		{ "llama-3.2-1b.json", 1235814400ull }, { "llama-3.2-3b.json", 3212749824ull },
		{ "llama-3-8b.json", 8030261248ull },	{ "llama-3-70b.json", 70553706496ull },
		{ "llama-2-7b.json", 6738415616ull },	{ "llama-2-13b.json", 13015864320ull },
		{ "qwen2-0.5b.json", 494032768ull },	{ "mistral-7b-v0.1.json", 7241732096ull },
	};

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		struct zn_hf_config c = load(want[i].file);
		int n = zn_hf_layout_count(&c);
		struct zn_hf_tensor_spec *s = calloc((size_t)n, sizeof(*s));
		uint64_t sum = 0;

		cr_expect_eq(zn_hf_param_count(&c), want[i].params, "%s: %llu, HF %llu",
			     want[i].file, (unsigned long long)zn_hf_param_count(&c),
			     (unsigned long long)want[i].params);
		/* the layout holds exactly those parameters */
		zn_hf_layout(&c, s);
		for (int t = 0; t < n; t++)
			sum += (uint64_t)s[t].shape[0] * (uint64_t)(s[t].ndim == 2 ? s[t].shape[1] : 1);
		cr_expect_eq(sum, want[i].params, "%s layout: %llu", want[i].file,
			     (unsigned long long)sum);
		free(s);
	}
}

Test(hf_config, llama_3_2_1b_fields)
{
	struct zn_hf_config c = load("llama-3.2-1b.json");

	cr_expect_str_eq(zn_hf_model_type(&c), "llama");
	cr_expect(c.hidden_size == 2048 && c.intermediate_size == 8192 &&
		  c.num_hidden_layers == 16 && c.num_attention_heads == 32 &&
		  c.num_key_value_heads == 8 && c.head_dim == 64 && c.vocab_size == 128256 &&
		  c.max_position_embeddings == 131072);
	cr_expect(c.norm_eps == 1e-5 && c.rope_theta == 500000.0);
	cr_expect_eq(c.rope_scaling.type, ZN_HF_ROPE_LLAMA3);
	cr_expect(c.rope_scaling.factor == 32.0 && c.rope_scaling.low_freq_factor == 1.0 &&
		  c.rope_scaling.high_freq_factor == 4.0 &&
		  c.rope_scaling.original_max_position_embeddings == 8192);
	cr_expect(!c.attention_bias && c.tie_word_embeddings && c.sliding_window == 0);
	cr_expect_str_eq(c.torch_dtype, "bfloat16");
}

Test(hf_config, family_specifics)
{
	struct zn_hf_config g = load("gpt2.json"), q = load("qwen2-0.5b.json");
	struct zn_hf_config m = load("mistral-7b-v0.1.json"), t = load("tinyllama-1.1b.json");

	cr_expect(!strcmp(zn_hf_model_type(&g), "gpt2") && g.hidden_size == 768 && g.num_hidden_layers == 12 &&
		  g.num_attention_heads == 12 && g.head_dim == 64 && g.intermediate_size == 3072 &&
		  g.max_position_embeddings == 1024 && g.vocab_size == 50257 &&
		  g.norm_eps == 1e-5 && g.tie_word_embeddings);
	/* Qwen2: q/k/v biases; sliding_window present but off (use_sliding_window false) */
	cr_expect(!strcmp(zn_hf_model_type(&q), "qwen2") && q.attention_bias && q.sliding_window == 0 &&
		  q.num_key_value_heads == 2 && q.head_dim == 64 && q.norm_eps == 1e-6);
	cr_expect(!strcmp(zn_hf_model_type(&m), "mistral") && m.sliding_window == 4096 && !m.attention_bias);
	cr_expect(t.rope_scaling.type == ZN_HF_ROPE_DEFAULT && t.rope_theta == 10000.0 &&
		  !t.tie_word_embeddings && t.num_key_value_heads == 4);
}

Test(hf_config, layout_names_and_shapes)
{
	struct zn_hf_config q = load("qwen2-0.5b.json"), g = load("gpt2.json");
	struct zn_hf_config t = load("tinyllama-1.1b.json");
	struct zn_hf_tensor_spec s[512];
	int n;

	/* Qwen2: embed, 24 x (2 norms, 4 + 3 bias attention, 3 mlp), norm; tied: no lm_head */
	n = zn_hf_layout_count(&q);
	cr_assert_eq(n, 1 + 24 * 12 + 1);
	zn_hf_layout(&q, s);
	cr_expect_str_eq(s[0].name, "model.embed_tokens.weight");
	cr_expect(s[0].shape[0] == 151936 && s[0].shape[1] == 896);
	cr_expect_str_eq(s[3].name, "model.layers.0.self_attn.q_proj.bias");
	cr_expect_str_eq(s[4].name, "model.layers.0.self_attn.k_proj.weight");
	cr_expect(s[4].shape[0] == 128 && s[4].shape[1] == 896 && s[4].layer == 1);
	cr_expect_str_eq(s[8].name, "model.layers.0.self_attn.o_proj.weight");
	cr_expect_str_eq(s[n - 1].name, "model.norm.weight");
	cr_expect_eq(s[n - 1].layer, 25);
	/* TinyLlama: untied lm_head last, down_proj [H, I] */
	n = zn_hf_layout_count(&t);
	zn_hf_layout(&t, s);
	cr_expect_str_eq(s[n - 1].name, "lm_head.weight");
	cr_expect_str_eq(s[9].name, "model.layers.0.mlp.down_proj.weight");
	cr_expect(s[9].shape[0] == 2048 && s[9].shape[1] == 5632);
	/* GPT-2: Conv1D [in, out] as the hub's files and zinc's gpt2_io hold them */
	n = zn_hf_layout_count(&g);
	cr_assert_eq(n, 2 + 12 * 12 + 2);
	zn_hf_layout(&g, s);
	cr_expect_str_eq(s[4].name, "transformer.h.0.attn.c_attn.weight");
	cr_expect(s[4].shape[0] == 768 && s[4].shape[1] == 2304);
	cr_expect_str_eq(s[12].name, "transformer.h.0.mlp.c_proj.weight");
	cr_expect(s[12].shape[0] == 3072 && s[12].shape[1] == 768);
	cr_expect_str_eq(s[n - 1].name, "transformer.ln_f.bias");
}

static void expect_same(const struct zn_hf_config *a, const struct zn_hf_config *b,
			const char *what)
{
	cr_expect(a->family == b->family && a->hidden_size == b->hidden_size &&
		  a->intermediate_size == b->intermediate_size &&
		  a->num_hidden_layers == b->num_hidden_layers &&
		  a->num_attention_heads == b->num_attention_heads &&
		  a->num_key_value_heads == b->num_key_value_heads && a->head_dim == b->head_dim &&
		  a->vocab_size == b->vocab_size &&
		  a->max_position_embeddings == b->max_position_embeddings &&
		  a->norm_eps == b->norm_eps && a->rope_theta == b->rope_theta &&
		  !memcmp(&a->rope_scaling, &b->rope_scaling, sizeof(a->rope_scaling)) &&
		  a->attention_bias == b->attention_bias &&
		  a->tie_word_embeddings == b->tie_word_embeddings &&
		  a->sliding_window == b->sliding_window &&
		  !strcmp(a->torch_dtype, b->torch_dtype), "%s", what);
}

Test(hf_config, written_config_reads_back)
{
	static const char *const files[] = { "gpt2.json",	  "tinyllama-1.1b.json",
					     "llama-3.2-1b.json", "qwen2-0.5b.json",
					     "mistral-7b-v0.1.json" };

	for (int i = 0; i < 5; i++) {
		char *base = read_text(fixture(files[i]));
		struct zn_hf_config c = load(files[i]), back;

		for (int with_base = 0; with_base < 2; with_base++) {
			char *text = zn_hf_config_to_json(&c, with_base ? base : NULL);

			cr_assert_not_null(text);
			cr_assert_eq(zn_hf_config_parse(text, "written", &back), 0, "%s", text);
			expect_same(&c, &back, files[i]);
			/* other keys of the original are kept */
			if (with_base)
				cr_expect(strstr(text, "\"bos_token_id\": "), "%s", text);
			free(text);
		}
		free(base);
	}
}

Test(hf_config, written_text_is_pythons)
{
	struct zn_hf_config c = load("llama-3.2-1b.json");
	char *text = zn_hf_config_to_json(&c, NULL);

	cr_assert_not_null(text);
	cr_expect(strstr(text, "{\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n"));
	cr_expect(strstr(text, "\n  \"rms_norm_eps\": 1e-05,\n"));
	cr_expect(strstr(text, "\n  \"rope_scaling\": {\n    \"factor\": 32.0,\n    "
			       "\"high_freq_factor\": 4.0,\n    \"low_freq_factor\": 1.0,\n    "
			       "\"original_max_position_embeddings\": 8192,\n    "
			       "\"rope_type\": \"llama3\"\n  },\n  \"rope_theta\": 500000.0,\n"),
		  "%s", text);
	cr_expect(strstr(text, "\n  \"vocab_size\": 128256\n}\n"));
	free(text);
}

Test(hf_config, printer_matches_json_dumps)
{
	/* gpt2.json as the hub serves it is json.dumps(indent=2, sort_keys=True) output */
	char *want = read_text(fixture("gpt2.json"));
	cJSON *v = cJSON_Parse(want);
	char *got = zn_hf_json_dumps(v);

	cr_expect_str_eq(got, want);
	free(got);
	cJSON_Delete(v);
	v = cJSON_Parse("{\"b\": [], \"a\": {}, \"c\": \"q\\\"\\\\\\n\", \"d\": -3, \"e\": 0.1}");
	got = zn_hf_json_dumps(v);
	cr_expect_str_eq(got, "{\n  \"a\": {},\n  \"b\": [],\n  \"c\": \"q\\\"\\\\\\n\",\n  "
			      "\"d\": -3,\n  \"e\": 0.1\n}\n");
	free(got);
	cJSON_Delete(v);
	free(want);
}

/* ---- refusals ----------------------------------------------------------------------------- */

static char errpath[64];

/* Parses text with stderr captured; returns what was logged (static buffer). */
static const char *refused(const char *text)
{
	static char buf[4096];
	struct zn_hf_config c;
	int fd, saved, rc;
	FILE *fp;
	size_t n;

	snprintf(errpath, sizeof(errpath), "/tmp/zn_test_hfc_%ld.txt", (long)getpid());
	fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	fflush(stderr);
	saved = dup(2);
	dup2(fd, 2);
	close(fd);
	rc = zn_hf_config_parse(text, "dir/config.json", &c);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	fp = fopen(errpath, "r");
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	buf[n] = 0;
	fclose(fp);
	unlink(errpath);
	cr_expect_neq(rc, 0, "accepted: %s", text);
	return buf;
}

#define LLAMA "\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, " \
	      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100, "  \
	      "\"max_position_embeddings\": 32"

static void expect_refusal(const char *text, const char *key, const char *what)
{
	const char *err = refused(text);

	cr_expect(strstr(err, "dir/config.json"), "no file named for %s: %s", text, err);
	cr_expect(strstr(err, key), "key %s not named: %s", key, err);
	if (what)
		cr_expect(strstr(err, what), "'%s' not said: %s", what, err);
}

Test(hf_config, refusals_name_file_and_key)
{
	struct zn_hf_config c;

	cr_assert_eq(zn_hf_config_parse("{" LLAMA "}", "ok", &c), 0);
	cr_expect(c.num_key_value_heads == 4 && c.head_dim == 16 && c.rope_theta == 10000.0);
	expect_refusal("{\"model_type\": \"gptj\"}", "model_type", "\"gptj\"");
	expect_refusal("{\"hidden_size\": 4}", "model_type", "missing");
	expect_refusal("[1]", "", "not a JSON object");
	expect_refusal("{\"model_type\": \"llama\", \"hidden_size\": 64}", "intermediate_size",
		       "missing");
	expect_refusal("{" LLAMA ", \"mlp_bias\": true}", "mlp_bias", NULL);
	expect_refusal("{" LLAMA ", \"num_key_value_heads\": 3}", "num_key_value_heads", NULL);
	expect_refusal("{" LLAMA ", \"num_key_value_heads\": 8}", "num_key_value_heads", NULL);
	expect_refusal("{" LLAMA ", \"hidden_act\": \"gelu\"}", "hidden_act", "\"gelu\"");
	expect_refusal("{" LLAMA ", \"rms_norm_eps\": -1}", "rms_norm_eps", NULL);
	expect_refusal("{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\":"
		       " 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\":"
		       " 1.5, \"max_position_embeddings\": 8}", "vocab_size", "integer");
	expect_refusal("{" LLAMA ", \"tie_word_embeddings\": 1}", "tie_word_embeddings", NULL);
	expect_refusal("{" LLAMA ", \"torch_dtype\": \"int8\"}", "torch_dtype", NULL);
	expect_refusal("{" LLAMA ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
		       "rope_scaling.rope_type", "\"yarn\"");
	expect_refusal("{" LLAMA ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8,"
		       " \"low_freq_factor\": 1, \"high_freq_factor\": 4}}",
		       "rope_scaling.original_max_position_embeddings", "missing");
	expect_refusal("{\"model_type\": \"llama\", \"hidden_size\": 66, \"intermediate_size\": 8,"
		       " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 9,"
		       " \"max_position_embeddings\": 8}", "head_dim", NULL);
	expect_refusal("{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 2, \"n_head\": 4,"
		       " \"n_positions\": 8, \"vocab_size\": 10, \"tie_word_embeddings\": false}",
		       "tie_word_embeddings", NULL);
	expect_refusal("{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 0, \"n_head\": 4,"
		       " \"n_positions\": 8, \"vocab_size\": 10}", "n_layer", NULL);
}

/* A key given twice is its last value, as transformers' json.load reads config.json: the
 * first "gelu" no longer refuses, a last one does; a last null rope_scaling is no
 * scaling. config.json as a file: a NUL byte is refused, never the end of the text. */
Test(hf_config, repeated_key_takes_the_last_value)
{
	struct zn_hf_config c;
	char path[] = "/tmp/zn_test_hfc_nul_XXXXXX";
	static const char nul_file[] = "{" LLAMA "}\0{\"model_type\": \"gptj\"}";
	int fd;

	cr_redirect_stderr();
	cr_assert_eq(zn_hf_config_parse("{" LLAMA ", \"hidden_act\": \"gelu\", \"hidden_act\": "
					"\"silu\"}", "ok", &c), 0);
	cr_assert_eq(zn_hf_config_parse("{" LLAMA ", \"rope_scaling\": {\"rope_type\": \"llama3\","
					" \"factor\": 8}, \"rope_scaling\": null}", "ok", &c), 0);
	cr_expect_eq(c.rope_scaling.type, ZN_HF_ROPE_DEFAULT);
	cr_assert_eq(zn_hf_config_parse("{" LLAMA ", \"num_hidden_layers\": 5, "
					"\"num_hidden_layers\": 3}", "ok", &c), 0);
	cr_expect_eq(c.num_hidden_layers, 3);
	expect_refusal("{" LLAMA ", \"hidden_act\": \"silu\", \"hidden_act\": \"gelu\"}",
		       "hidden_act", "\"gelu\"");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, nul_file, sizeof(nul_file) - 1), (ssize_t)sizeof(nul_file) - 1);
	close(fd);
	cr_expect_neq(zn_hf_config_load(path, &c), 0, "a NUL byte ended the file");
	unlink(path);
}

/* transformers 5 writes rope_theta and the scaling inside rope_parameters */
Test(hf_config, transformers_5_rope_parameters)
{
	const char *v5 = "{" LLAMA ", \"dtype\": \"float16\", \"rope_parameters\": {\"rope_type\":"
			 " \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0, "
			 "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
			 "\"original_max_position_embeddings\": 8192}}";
	struct zn_hf_config c, back;
	char *text;

	cr_assert_eq(zn_hf_config_parse(v5, "v5", &c), 0);
	cr_expect(c.rope_theta == 500000.0 && c.rope_scaling.type == ZN_HF_ROPE_LLAMA3 &&
		  c.rope_scaling.factor == 8.0 &&
		  c.rope_scaling.original_max_position_embeddings == 8192);
	cr_expect_str_eq(c.torch_dtype, "float16");
	/* written back in the same style */
	text = zn_hf_config_to_json(&c, v5);
	cr_assert_not_null(text);
	cr_expect(strstr(text, "\"rope_parameters\": {\n    \"factor\": 8.0,\n"), "%s", text);
	cr_expect(strstr(text, "\"rope_theta\": 500000.0,\n    \"rope_type\": \"llama3\"\n  }"),
		  "%s", text);
	cr_expect(!strstr(text, "rope_scaling") && !strstr(text, "torch_dtype"), "%s", text);
	cr_expect(strstr(text, "\"dtype\": \"float16\""), "%s", text);
	cr_assert_eq(zn_hf_config_parse(text, "back", &back), 0);
	expect_same(&c, &back, "v5");
	free(text);
	cr_assert_eq(zn_hf_config_parse("{" LLAMA ", \"rope_parameters\": {\"rope_type\": "
					 "\"default\", \"rope_theta\": 1000.0}}", "v5", &c), 0);
	cr_expect(c.rope_theta == 1000.0 && c.rope_scaling.type == ZN_HF_ROPE_DEFAULT);
	expect_refusal("{" LLAMA ", \"rope_parameters\": {\"rope_type\": \"yarn\", "
		       "\"rope_theta\": 1000.0}}", "rope_parameters.rope_type", "\"yarn\"");
}

Test(hf_config, explicit_head_dim_and_llama_biases)
{
	struct zn_hf_config c;

	/* hidden 66 with head_dim 16: q is [4 * 16, 66] */
	cr_assert_eq(zn_hf_config_parse("{\"model_type\": \"llama\", \"hidden_size\": 66, "
					 "\"intermediate_size\": 8, \"num_hidden_layers\": 1, "
					 "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
					 "\"head_dim\": 16, \"vocab_size\": 9, "
					 "\"max_position_embeddings\": 8, \"attention_bias\": true}",
					 "t", &c), 0);
	cr_expect_eq(c.head_dim, 16);
	/* embed 9*66 + norm 66 + untied lm_head 9*66 + block: norms 132, q 64*66 + 64,
	 * k, v 32*66 + 32 each, o 66*64 + 66, mlp 3*8*66 */
	cr_expect_eq(zn_hf_param_count(&c), 9 * 66 * 2 + 66 + 132 + 64 * 66 + 64 +
						    2 * (32 * 66 + 32) + 66 * 64 + 66 + 3 * 8 * 66);
}

Test(hf_config, floats_as_python_writes_them)
{
	static const struct {
		double x;
		const char *repr;
	} want[] = { { 500000.0, "500000.0" }, { 10000.0, "10000.0" }, { 1e-5, "1e-05" },
		     { 1e-6, "1e-06" },	       { 0.02, "0.02" },	 { 0.0001, "0.0001" },
		     { 32.0, "32.0" },	       { -0.5, "-0.5" },	 { 1e16, "1e+16" },
		     { 123456.789, "123456.789" }, { 1.5e-7, "1.5e-07" }, { 0.0, "0.0" } };

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		cJSON *v = zn_hf_json_float(want[i].x);

		cr_assert_not_null(v);
		cr_expect_str_eq(v->valuestring, want[i].repr);
		cJSON_Delete(v);
	}
}
