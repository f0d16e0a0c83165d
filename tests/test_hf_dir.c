/* src/model/hf_dir: a tiny Llama (GQA, explicit head_dim, q/k/v/o biases, untied lm_head)
 * saved as a sharded Hugging Face directory and read back (values, dtype conversions,
 * rows), saved again from what was read (files byte for byte equal), the index and shard
 * split as transformers/huggingface_hub write them, a single file with its config in the
 * metadata or beside it, GPT-2 names without "transformer.", --save-shard-size parsing,
 * and every malformed directory refused with a message naming the file and the key.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "model/hf_dir.h"
#include "model/hf_json.h"
#include "cli_child.h"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_hf_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(hf_dir, .init = make_dir, .fini = remove_dir);

static const char *path_of(const char *name)
{
	static char p[8][256];
	static int next;
	char *out = p[next++ % 8];

	snprintf(out, 256, "%s/%s", dir, name);
	return out;
}

static void write_all(const char *path, const char *text, size_t n)
{
	FILE *fp = fopen(path, "wb");

	cr_assert_not_null(fp, "%s", path);
	cr_assert_eq(fwrite(text, 1, n, fp), n);
	fclose(fp);
}

/* ---- the tiny model -------------------------------------------------------------------- */

static const char *tiny_json =
	"{\"model_type\": \"llama\", \"hidden_size\": 16, \"intermediate_size\": 24, "
	"\"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
	"\"head_dim\": 8, \"vocab_size\": 50, \"max_position_embeddings\": 64, "
	"\"attention_bias\": true, \"tie_word_embeddings\": false, \"bos_token_id\": 7}";

struct model {
	struct zn_hf_config cfg;
	int n;
	struct zn_hf_tensor_spec *specs;
	struct zn_st_entry *e;
	float **data;
};

static uint64_t numel(const struct zn_hf_tensor_spec *s)
{
	return (uint64_t)s->shape[0] * (uint64_t)(s->ndim == 2 ? s->shape[1] : 1);
}

static void make_model(struct model *m, const char *json)
{
	uint64_t seed = 12345;

	cr_assert_eq(zn_hf_config_parse(json, "tiny", &m->cfg), 0);
	m->n = zn_hf_layout_count(&m->cfg);
	m->specs = calloc((size_t)m->n, sizeof(*m->specs));
	m->e = calloc((size_t)m->n, sizeof(*m->e));
	m->data = calloc((size_t)m->n, sizeof(*m->data));
	zn_hf_layout(&m->cfg, m->specs);
	for (int i = 0; i < m->n; i++) {
		uint64_t k = numel(&m->specs[i]);

		m->data[i] = malloc(k * sizeof(float));
		for (uint64_t j = 0; j < k; j++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			m->data[i][j] = (float)((double)(seed >> 11) * 0x1.0p-53 * 2.0 - 1.0);
		}
		m->e[i].name = m->specs[i].name;
		m->e[i].ndim = m->specs[i].ndim;
		m->e[i].shape[0] = m->specs[i].shape[0];
		m->e[i].shape[1] = m->specs[i].shape[1];
		m->e[i].data_h = m->data[i];
	}
}

static void free_model(struct model *m)
{
	for (int i = 0; i < m->n; i++)
		free(m->data[i]);
	free(m->data);
	free(m->e);
	free(m->specs);
}

static void save(const struct model *m, const char *path, enum zn_dtype dt, uint64_t shard)
{
	struct zn_hf_save_opts o = { dt, shard, tiny_json, NULL };

	cr_assert_eq(zn_hf_save(path, &m->cfg, &o, m->e, m->n), 0, "save %s", path);
}

static bool exists(const char *p)
{
	struct stat st;

	return !stat(p, &st);
}

/* ---- round trips ----------------------------------------------------------------------- */

Test(hf_dir, sharded_round_trip_values_and_bytes)
{
	struct model m;
	struct zn_hf_src *s;
	const char *a = path_of("a"), *b = path_of("b");
	struct zn_st_entry *e2;
	float **back;
	int shards;

	make_model(&m, tiny_json);
	/* bf16, shards of at most 1 KB: the embeddings (1600 B) get shards of their own */
	save(&m, a, ZN_DTYPE_BF16, 1000);
	cr_assert(!exists(path_of("a.tmp.*")));
	cr_assert_eq(zn_hf_open(&s, a), 0);
	cr_assert_not_null(zn_hf_src_config(s));
	cr_expect_eq(zn_hf_src_config(s)->num_key_value_heads, 2);
	cr_assert_eq(zn_hf_check_layout(s), 0);
	back = calloc((size_t)m.n, sizeof(*back));
	e2 = calloc((size_t)m.n, sizeof(*e2));
	for (int i = 0; i < m.n; i++) {
		uint64_t k = numel(&m.specs[i]);
		uint16_t *h = malloc(k * 2);

		back[i] = malloc(k * sizeof(float));
		cr_assert_eq(zn_hf_read_rows(s, m.specs[i].name, 0, m.specs[i].shape[0],
					     ZN_DTYPE_F32, back[i]), 0);
		cr_assert_eq(zn_hf_read_rows(s, m.specs[i].name, 0, m.specs[i].shape[0],
					     ZN_DTYPE_BF16, h), 0);
		for (uint64_t j = 0; j < k; j++) {
			uint16_t want = zn_f32_to_bf16(m.data[i][j]);

			cr_assert_eq(h[j], want, "%s[%llu]", m.specs[i].name, (unsigned long long)j);
			cr_assert_eq(back[i][j], zn_bf16_to_f32(want));
		}
		free(h);
		e2[i] = m.e[i];
		e2[i].data_h = back[i];
	}
	/* rows 5..7 of lm_head as F16 */
	{
		uint16_t rows[3 * 16];

		cr_assert_eq(zn_hf_read_rows(s, "lm_head.weight", 5, 3, ZN_DTYPE_F16, rows), 0);
		for (int j = 0; j < 48; j++)
			cr_expect_eq(rows[j], zn_f32_to_f16(back[m.n - 1][5 * 16 + j]));
		cr_expect_neq(zn_hf_read_rows(s, "lm_head.weight", 48, 3, ZN_DTYPE_F32, rows), 0);
	}
	zn_hf_close(s);
	/* save what was read: every file byte for byte the same */
	{
		struct zn_hf_save_opts o = { ZN_DTYPE_BF16, 1000, tiny_json, NULL };
		char *ia = zt_read_all(path_of("a/model.safetensors.index.json"), NULL);

		cr_assert_eq(zn_hf_save(b, &m.cfg, &o, e2, m.n), 0);
		cr_assert_eq(sscanf(strstr(ia, "-of-") + 4, "%5d", &shards), 1);
		cr_expect_gt(shards, 3);
		for (int k = 0; k <= shards + 1; k++) {
			char name[64], pa[256], pb[256];
			size_t la, lb;
			char *fa, *fb;

			if (k < shards)
				snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1,
					 shards);
			else
				snprintf(name, sizeof(name), k == shards ? "config.json" :
							"model.safetensors.index.json");
			snprintf(pa, sizeof(pa), "%s/%s", a, name);
			snprintf(pb, sizeof(pb), "%s/%s", b, name);
			fa = zt_read_all(pa, &la);
			fb = zt_read_all(pb, &lb);
			cr_expect(la == lb && !memcmp(fa, fb, la), "%s differs", name);
			free(fa);
			free(fb);
		}
		free(ia);
	}
	for (int i = 0; i < m.n; i++)
		free(back[i]);
	free(back);
	free(e2);
	free_model(&m);
}

Test(hf_dir, index_and_shards_as_transformers_writes_them)
{
	struct model m;
	char *index, *config, want[128];
	uint64_t total = 0;

	make_model(&m, tiny_json);
	save(&m, path_of("d"), ZN_DTYPE_F32, 2000);
	for (int i = 0; i < m.n; i++)
		total += numel(&m.specs[i]) * 4;
	index = zt_read_all(path_of("d/model.safetensors.index.json"), NULL);
	snprintf(want, sizeof(want), "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  "
		 "\"weight_map\": {\n    \"lm_head.weight\": \"model-", (unsigned long long)total);
	cr_expect(!strncmp(index, want, strlen(want)), "%s", index);
	/* As huggingface_hub splits (checked against its algorithm in Python): a tensor over
	 * the limit is listed when met, an open shard when it closes. embed_tokens (3200 B)
	 * is shard 1; layer 0's q_proj (2048 B) shard 2 while the shard holding layer 0's
	 * input_layernorm is still open (listed 3rd); lm_head shard 22 and the open shard
	 * with model.norm, closed at the end, 23. */
	cr_expect(strstr(index, "\"model.embed_tokens.weight\": \"model-00001-of-00023."));
	cr_expect(strstr(index, "\"model.layers.0.self_attn.q_proj.weight\": \"model-00002-of-"));
	cr_expect(strstr(index, "\"model.layers.0.input_layernorm.weight\": \"model-00003-of-"));
	cr_expect(strstr(index, "\"lm_head.weight\": \"model-00022-of-00023.safetensors\",\n"));
	cr_expect(strstr(index, "\"model.norm.weight\": \"model-00023-of-00023.safetensors\"\n"
				"  }\n}\n"), "%s", index);
	config = zt_read_all(path_of("d/config.json"), NULL);
	cr_expect(strstr(config, "\"architectures\": [\n    \"LlamaForCausalLM\"\n  ],"));
	cr_expect(strstr(config, "\"bos_token_id\": 7,"), "the original's other keys kept");
	cr_expect(strstr(config, "\"torch_dtype\": \"float32\","), "%s", config);
	free(config);
	free(index);
	/* saving again with one shard ("d/": the same directory): model.safetensors, the old
	 * shards and index removed, a user's other files kept */
	write_all(path_of("d/model-notes.safetensors"), "x", 1);
	write_all(path_of("d/model-00001-of-00023.safetensors.bak"), "x", 1);
	save(&m, path_of("d/"), ZN_DTYPE_F32, 0);
	cr_expect(exists(path_of("d/model-notes.safetensors")) &&
		  exists(path_of("d/model-00001-of-00023.safetensors.bak")));
	cr_expect(exists(path_of("d/model.safetensors")));
	cr_expect(!exists(path_of("d/model.safetensors.index.json")));
	cr_expect(!exists(path_of("d/model-00001-of-00023.safetensors")) &&
		  !exists(path_of("d/model-00023-of-00023.safetensors")));
	{
		struct zn_hf_src *s;
		float x[16];

		cr_assert_eq(zn_hf_open(&s, path_of("d")), 0);
		cr_assert_eq(zn_hf_check_layout(s), 0);
		cr_assert_eq(zn_hf_read_rows(s, "model.norm.weight", 0, 16, ZN_DTYPE_F32, x), 0);
		cr_expect(!memcmp(x, m.data[m.n - 2], sizeof(x)));
		zn_hf_close(s);
	}
	free_model(&m);
}

Test(hf_dir, single_file_config_from_metadata_or_beside)
{
	struct model m;
	struct zn_hf_src *s;
	struct zn_hf_save_opts o = { ZN_DTYPE_F16, 0, NULL, NULL };
	const struct zn_st_tensor *t;
	char cfgpath[256];

	make_model(&m, tiny_json);
	save(&m, path_of("one.safetensors"), ZN_DTYPE_F32, 0);
	cr_assert_eq(zn_hf_open(&s, path_of("one.safetensors")), 0);
	cr_assert_not_null(zn_hf_src_config(s));
	cr_expect_eq(zn_hf_src_config(s)->head_dim, 8);
	cr_assert_eq(zn_hf_check_layout(s), 0);
	cr_expect_eq(zn_hf_find(s, "no.such.tensor", &t, NULL), -ENOENT);
	zn_hf_close(s);
	/* no metadata: config.json beside the file */
	mkdir(path_of("bare"), 0755);
	cr_assert_eq(zn_st_write(path_of("bare/w.safetensors"), ZN_DTYPE_F16, m.e, m.n, NULL,
				 NULL, 0), 0);
	cr_assert_eq(zn_hf_open(&s, path_of("bare/w.safetensors")), 0);
	cr_expect_null(zn_hf_src_config(s));
	zn_hf_close(s);
	snprintf(cfgpath, sizeof(cfgpath), "%s", path_of("bare/config.json"));
	write_all(cfgpath, tiny_json, strlen(tiny_json));
	cr_assert_eq(zn_hf_open(&s, path_of("bare/w.safetensors")), 0);
	cr_assert_not_null(zn_hf_src_config(s));
	cr_expect_eq(zn_hf_check_layout(s), 0);
	zn_hf_close(s);
	/* a config is needed for a directory */
	cr_expect_eq(zn_hf_save(path_of("nocfg"), NULL, &o, m.e, m.n), -EINVAL);
	free_model(&m);
}

Test(hf_dir, gpt2_names_without_transformer_prefix)
{
	const char *json = "{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_layer\": 1, "
			   "\"n_head\": 2, \"n_positions\": 4, \"vocab_size\": 5}";
	struct model m;
	struct zn_hf_src *s;
	const struct zn_st_tensor *t;
	float x[40];

	make_model(&m, json);
	for (int i = 0; i < m.n; i++)
		m.e[i].name += strlen("transformer."); /* as the hub's gpt2 files */
	mkdir(path_of("g"), 0755);
	write_all(path_of("g/config.json"), json, strlen(json));
	cr_assert_eq(zn_st_write(path_of("g/model.safetensors"), ZN_DTYPE_F32, m.e, m.n, NULL,
				 NULL, 0), 0);
	cr_assert_eq(zn_hf_open(&s, path_of("g")), 0);
	cr_assert_eq(zn_hf_check_layout(s), 0);
	cr_assert_eq(zn_hf_find(s, "transformer.wte.weight", &t, NULL), 0);
	cr_expect_str_eq(t->name, "wte.weight");
	cr_assert_eq(zn_hf_read_rows(s, "transformer.wte.weight", 0, 5, ZN_DTYPE_F32, x), 0);
	cr_expect(!memcmp(x, m.data[0], sizeof(x)));
	zn_hf_close(s);
	free_model(&m);
}

/* scripts/hf_check.py reads the directories with Python's json and struct: the text files
 * are json.dumps(indent=2, sort_keys=True) output, the shards and index consistent. */
Test(hf_dir, python_reads_the_directories)
{
	static const char *const cfgs[] = {
		"{\"model_type\": \"llama\", \"hidden_size\": 16, \"intermediate_size\": 24, "
		"\"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": "
		"2, \"vocab_size\": 50, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05, "
		"\"rope_theta\": 500000.0, \"initializer_range\": 0.02, \"eos_token_id\": [1, 2],"
		" \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, "
		"\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
		"\"original_max_position_embeddings\": 8192}, \"tie_word_embeddings\": true}",
		"{\"model_type\": \"qwen2\", \"hidden_size\": 16, \"intermediate_size\": 8, "
		"\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"vocab_size\": 30, "
		"\"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-06, \"rope_theta\": "
		"1000000.0, \"use_sliding_window\": false, \"sliding_window\": 32}",
		"{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_layer\": 2, \"n_head\": 2, "
		"\"n_positions\": 4, \"vocab_size\": 5, \"task_specific_params\": "
		"{\"text-generation\": {\"do_sample\": true, \"max_length\": 50}}}",
	};
	char cmd[512];

	if (system("command -v python3 > /dev/null 2>&1"))
		cr_skip_test("python3 is not installed");
	for (int i = 0; i < 3; i++) {
		struct model m;
		struct zn_hf_save_opts o = { ZN_DTYPE_BF16, 600, cfgs[i], NULL };
		const char *d = path_of(i == 0 ? "py0" : i == 1 ? "py1" : "py2");

		make_model(&m, cfgs[i]);
		cr_assert_eq(zn_hf_save(d, &m.cfg, &o, m.e, m.n), 0);
		snprintf(cmd, sizeof(cmd), "python3 %s/scripts/hf_check.py %s", ZN_TEST_SRC_DIR, d);
		cr_expect_eq(system(cmd), 0, "%s", cmd);
		/* one file, no index */
		o.shard_bytes = 0;
		cr_assert_eq(zn_hf_save(d, &m.cfg, &o, m.e, m.n), 0);
		cr_expect_eq(system(cmd), 0, "%s", cmd);
		free_model(&m);
	}
}

/* The hub's cache: snapshots/<rev>/ holds symlinks into blobs/. */
Test(hf_dir, hub_cache_symlinks)
{
	struct model m;
	struct zn_hf_src *s;
	char cmd[512];
	float x[16];

	make_model(&m, tiny_json);
	save(&m, path_of("blobs"), ZN_DTYPE_F32, 2000);
	mkdir(path_of("snap"), 0755);
	snprintf(cmd, sizeof(cmd), "cd %s/snap && for f in ../blobs/*; do ln -s \"$f\" .; done",
		 dir);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(zn_hf_open(&s, path_of("snap")), 0);
	cr_assert_eq(zn_hf_check_layout(s), 0);
	cr_assert_eq(zn_hf_read_rows(s, "model.layers.2.input_layernorm.weight", 0, 16,
				     ZN_DTYPE_F32, x), 0);
	cr_expect(!memcmp(x, m.data[1 + 2 * 13], sizeof(x)));
	zn_hf_close(s);
	free_model(&m);
}

Test(hf_dir, shard_size_parsing)
{
	static const struct {
		const char *text;
		uint64_t want;
	} ok[] = { { "5GB", 5000000000ull }, { "5G", 5000000000ull }, { "5gb", 5000000000ull },
		   { "2GiB", 2147483648ull }, { "500MB", 500000000ull }, { "1.5GB", 1500000000ull },
		   { "123", 123 },	       { "4KiB", 4096 },	  { "1T", 1000000000000ull } };
	static const char *const bad[] = { "", "GB", "5XB", "0", "-1", "5 GB", "0.5" };
	uint64_t v;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		cr_expect_eq(zn_hf_parse_size(ok[i].text, "--save-shard-size", &v), 0, "%s",
			     ok[i].text);
		cr_expect_eq(v, ok[i].want, "%s: %llu", ok[i].text, (unsigned long long)v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(zn_hf_parse_size(bad[i], "--save-shard-size", &v), -EINVAL, "%s",
			     bad[i]);
}

/* ---- malformed directories ------------------------------------------------------------- */

static const char *captured(struct zn_hf_src **s, const char *path, int *rc);

/* stderr captured around open + check_layout; returns the log (static) */
static const char *refusal(const char *path)
{
	static char buf[8192];
	struct zn_hf_src *s = NULL;
	int fd = open(path_of("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644), saved, rc;
	size_t n;
	char *text;

	fflush(stderr);
	saved = dup(2);
	dup2(fd, 2);
	close(fd);
	rc = zn_hf_open(&s, path);
	if (!rc)
		rc = zn_hf_check_layout(s);
	zn_hf_close(s);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	cr_expect_neq(rc, 0, "%s accepted", path);
	text = zt_read_all(path_of("stderr.txt"), &n);
	snprintf(buf, sizeof(buf), "%s", text);
	free(text);
	fputs(buf, stderr);
	return buf;
}

static void expect_says(const char *err, const char *a, const char *b)
{
	cr_expect(strstr(err, a), "'%s' not in: %s", a, err);
	if (b)
		cr_expect(strstr(err, b), "'%s' not in: %s", b, err);
}

/* replaces the first `from` in file with `to` (same length when binary) */
static void edit(const char *path, const char *from, const char *to)
{
	size_t n;
	char *t = zt_read_all(path, &n), *p = memmem(t, n, from, strlen(from));
	FILE *fp;

	cr_assert_not_null(p, "'%s' not in %s", from, path);
	fp = fopen(path, "wb");
	fwrite(t, 1, (size_t)(p - t), fp);
	fputs(to, fp);
	fwrite(p + strlen(from), 1, n - (size_t)(p - t) - strlen(from), fp);
	fclose(fp);
	free(t);
}

/* The shard file name the index gives tensor (static buffer). */
static const char *shard_of(const char *d, const char *tensor)
{
	static char name[64];
	char f[256], key[128], *text, *p;

	snprintf(f, sizeof(f), "%s/model.safetensors.index.json", d);
	text = zt_read_all(f, NULL);
	snprintf(key, sizeof(key), "\"%s\": \"", tensor);
	p = strstr(text, key);
	cr_assert_not_null(p, "%s not in the index", tensor);
	snprintf(name, sizeof(name), "%.32s", p + strlen(key));
	free(text);
	return name;
}

static const char *fresh(struct model *m, const char *name, uint64_t shard)
{
	const char *p = path_of(name);

	save(m, p, ZN_DTYPE_BF16, shard);
	return p;
}

Test(hf_dir, malformed_directories_refused)
{
	struct model m;
	char f[256], want[300], other[128];
	const char *d;

	make_model(&m, tiny_json);
	/* a missing shard */
	d = fresh(&m, "m1", 1000);
	snprintf(f, sizeof(f), "%s/%s", d, shard_of(d, "model.layers.0.input_layernorm.weight"));
	cr_assert_eq(unlink(f), 0, "%s", f);
	expect_says(refusal(d), "model.safetensors.index.json: key \"weight_map\".", f);
	expect_says(refusal(d), ", which does not exist", NULL);
	/* the index puts a tensor in a shard that does not hold it */
	d = fresh(&m, "m2", 1000);
	snprintf(f, sizeof(f), "%s/model.safetensors.index.json", d);
	snprintf(want, sizeof(want), "\"model.norm.weight\": \"%s\"",
		 shard_of(d, "model.norm.weight"));
	snprintf(other, sizeof(other), "\"model.norm.weight\": \"%s\"",
		 shard_of(d, "model.embed_tokens.weight"));
	edit(f, want, other);
	snprintf(want, sizeof(want), "%s/%.32s, which has no such tensor", d,
		 shard_of(d, "model.embed_tokens.weight"));
	expect_says(refusal(d), "\"weight_map\".\"model.norm.weight\" puts the tensor in", want);
	/* the index lacks a tensor of the layout */
	d = fresh(&m, "m3", 1000);
	snprintf(f, sizeof(f), "%s/model.safetensors.index.json", d);
	edit(f, "\"model.norm.weight\"", "\"model.norm.weigh_\"");
	expect_says(refusal(d), "model.safetensors.index.json: no tensor 'model.norm.weight'",
		    NULL);
	/* config and tensor shapes differ */
	d = fresh(&m, "m4", 0);
	snprintf(f, sizeof(f), "%s/config.json", d);
	edit(f, "\"intermediate_size\": 24", "\"intermediate_size\": 32");
	expect_says(refusal(d), "model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' "
				"has shape [24, 16] but the config gives [32, 16]", NULL);
	/* a dtype zinc does not read */
	d = fresh(&m, "m5", 0);
	snprintf(f, sizeof(f), "%s/model.safetensors", d);
	edit(f, "\"BF16\"", "\"I16\" ");
	expect_says(refusal(d), "is I16: zinc reads F32, BF16 and F16", NULL);
	/* unknown model_type */
	d = fresh(&m, "m6", 0);
	snprintf(f, sizeof(f), "%s/config.json", d);
	edit(f, "\"llama\"", "\"falcon\"");
	expect_says(refusal(d), "config.json: key \"model_type\" is \"falcon\"", NULL);
	/* no config.json; no weights */
	d = fresh(&m, "m7", 0);
	snprintf(f, sizeof(f), "%s/config.json", d);
	unlink(f);
	expect_says(refusal(d), "m7: no config.json", NULL);
	d = fresh(&m, "m8", 0);
	snprintf(f, sizeof(f), "%s/model.safetensors", d);
	unlink(f);
	expect_says(refusal(d), "neither model.safetensors nor model.safetensors.index.json", NULL);
	snprintf(f, sizeof(f), "%s/pytorch_model.bin", d);
	write_all(f, "x", 1);
	expect_says(refusal(d), "pytorch_model.bin is a pickle", "safe_serialization=True");
	/* an index without weight_map; a shard name that leaves the directory */
	d = fresh(&m, "m9", 1000);
	snprintf(f, sizeof(f), "%s/model.safetensors.index.json", d);
	edit(f, "\"weight_map\"", "\"weight_mop\"");
	expect_says(refusal(d), "index.json: key \"weight_map\" is missing", NULL);
	d = fresh(&m, "m10", 1000);
	snprintf(f, sizeof(f), "%s/model.safetensors.index.json", d);
	snprintf(want, sizeof(want), "\"%s\"", shard_of(d, "lm_head.weight"));
	edit(f, want, "\"../x.safetensors\"");
	expect_says(refusal(d), "\"weight_map\".\"lm_head.weight\" must be a file name", NULL);
	/* saving over a file that is not a directory */
	write_all(path_of("plain"), "x", 1);
	{
		struct zn_hf_save_opts o = { ZN_DTYPE_F32, 0, NULL, NULL };

		cr_expect_eq(zn_hf_save(path_of("plain"), &m.cfg, &o, m.e, m.n), -EINVAL);
	}
	/* a link to another model's directory (planted where --save-hf-steps writes hf-N):
	 * refused, that directory's files untouched */
	d = fresh(&m, "m11", 0);
	cr_assert_eq(symlink(d, path_of("hf-2")), 0);
	{
		struct zn_hf_save_opts o = { ZN_DTYPE_F32, 1000, NULL, "--save-hf-steps" };
		struct zn_hf_src *s = NULL;
		char *before, *after;
		size_t n1 = 0, n2 = 0;

		snprintf(f, sizeof(f), "%s/config.json", d);
		before = zt_read_all(f, &n1);
		cr_expect_eq(zn_hf_save(path_of("hf-2"), &m.cfg, &o, m.e, m.n), -EINVAL);
		cr_expect_eq(zn_hf_save(path_of("hf-2/"), &m.cfg, &o, m.e, m.n), -EINVAL);
		after = zt_read_all(f, &n2);
		cr_expect(n1 == n2 && !memcmp(before, after, n1), "config.json was rewritten");
		cr_expect_eq(zn_hf_open(&s, d), 0, "the linked model still opens");
		cr_expect_eq(zn_hf_check_layout(s), 0, "with its shard and no index");
		zn_hf_close(s);
		free(before);
		free(after);
	}
	free_model(&m);
}

/* A tensor named twice in weight_map goes to its last shard, as transformers' json.load of
 * the index has it: the right shard listed last opens; listed first, the last (wrong) one
 * is refused naming it. */
Test(hf_dir, repeated_weight_map_entry_takes_the_last_shard)
{
	struct model m;
	struct zn_hf_src *s = NULL;
	char f[256], right[128], wrong[128], both[300];
	const char *d;
	float x[16];
	int rc;

	make_model(&m, tiny_json);
	d = fresh(&m, "dup1", 1000);
	snprintf(f, sizeof(f), "%s/model.safetensors.index.json", d);
	snprintf(right, sizeof(right), "\"model.norm.weight\": \"%s\"",
		 shard_of(d, "model.norm.weight"));
	snprintf(wrong, sizeof(wrong), "\"model.norm.weight\": \"%s\"",
		 shard_of(d, "model.embed_tokens.weight"));
	snprintf(both, sizeof(both), "\"weight_map\": {\n    %s,", wrong);
	edit(f, "\"weight_map\": {", both);
	captured(&s, d, &rc);
	cr_assert_eq(rc, 0, "the last entry (the right shard) was not taken");
	cr_assert_eq(zn_hf_read_rows(s, "model.norm.weight", 0, 16, ZN_DTYPE_F32, x), 0);
	zn_hf_close(s);
	d = fresh(&m, "dup2", 1000);
	snprintf(f, sizeof(f), "%s/model.safetensors.index.json", d);
	snprintf(both, sizeof(both), "%s, %s", right, wrong);
	edit(f, right, both);
	expect_says(refusal(d), "\"weight_map\".\"model.norm.weight\" puts the tensor in", NULL);
	free_model(&m);
}

/* stderr of open + check_layout; *s left open when both succeed */
static const char *captured(struct zn_hf_src **s, const char *path, int *rc)
{
	static char buf[8192];
	int fd = open(path_of("stderr2.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644), saved;
	char *text;
	size_t n;

	fflush(stderr);
	saved = dup(2);
	dup2(fd, 2);
	close(fd);
	*rc = zn_hf_open(s, path);
	if (!*rc)
		*rc = zn_hf_check_layout(*s);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	text = zt_read_all(path_of("stderr2.txt"), &n);
	snprintf(buf, sizeof(buf), "%s", text);
	free(text);
	return buf;
}

/* A checkpoint with more than its config.json uses loads with one warning; buffers and a
 * tied lm_head pass silently. */
Test(hf_dir, tensors_beyond_the_config_are_a_warning)
{
	struct model m;
	struct zn_hf_src *s = NULL;
	const char *d, *err;
	char f[256];
	int rc;

	make_model(&m, tiny_json);
	d = fresh(&m, "w", 1000);
	snprintf(f, sizeof(f), "%s/config.json", d);
	err = captured(&s, d, &rc);
	cr_expect_eq(rc, 0, "%s", err);
	cr_expect_eq(err[0], 0, "a warning for a matching checkpoint: %s", err);
	zn_hf_close(s);
	edit(f, "\"num_hidden_layers\": 3", "\"num_hidden_layers\": 2");
	edit(f, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
	err = captured(&s, d, &rc);
	cr_expect_eq(rc, 0, "%s", err);
	cr_expect(strstr(err, "model.safetensors.index.json: 13 tensors are not part of the llama "
			      "model config.json describes and are ignored (first: "
			      "'model.layers.2."), "%s", err);
	zn_hf_close(s);
	free_model(&m);
}
