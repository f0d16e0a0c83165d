/* Fuzz target: a Hugging Face model.safetensors.index.json (zn_hf_open on a directory,
 * src/model/hf_dir.c). The directory (made once per process) holds a small llama
 * config.json and the shards model-00001-of-00002.safetensors (embeddings and layer 0) and
 * model-00002-of-00002.safetensors (final norm and lm_head); the input is the index. An
 * accepted directory whose layout checks (zn_hf_check_layout) must find and read every
 * tensor of the layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/hf_dir.h"
#include "fuzz.h"

static const char config_json[] =
	"{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, "
	"\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, "
	"\"vocab_size\": 16, \"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-5, "
	"\"tie_word_embeddings\": false}";
static const char *const shard_names[2] = { "model-00001-of-00002.safetensors",
					    "model-00002-of-00002.safetensors" };

static char dir[4096];
static struct zn_hf_config cfg;
static struct zn_hf_tensor_spec *specs;
static int spec_count;

static void remove_dir(void)
{
	const char *names[] = { "config.json", shard_names[0], shard_names[1],
				"model.safetensors.index.json" };
	char p[4200];

	for (int i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
}

static void write_text(const char *name, const uint8_t *data, size_t n)
{
	char p[4200];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "wb");
	ZN_FUZZ_CHECK(f != NULL);
	ZN_FUZZ_CHECK(fwrite(data, 1, n, f) == n);
	ZN_FUZZ_CHECK(fclose(f) == 0);
}

static int fill_ramp(void *ctx, float *out_h)
{
	const struct zn_hf_tensor_spec *s = ctx;
	int64_t n = s->ndim == 1 ? s->shape[0] : s->shape[0] * s->shape[1];

	for (int64_t i = 0; i < n; i++)
		out_h[i] = 0.5f * (float)(i % 7);
	return 0;
}

/* The directory: config.json and two shards (layer 0 and before in the first). */
static void make_dir(void)
{
	const char *tmp = getenv("TMPDIR");
	struct zn_st_entry *e;
	char p[4200];

	snprintf(dir, sizeof(dir), "%s/zinc-fuzz-hf-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	ZN_FUZZ_CHECK(mkdtemp(dir) != NULL);
	atexit(remove_dir);
	write_text("config.json", (const uint8_t *)config_json, strlen(config_json));
	ZN_FUZZ_CHECK(zn_hf_config_parse(config_json, "fuzz config.json", &cfg) == 0);
	spec_count = zn_hf_layout_count(&cfg);
	specs = calloc((size_t)spec_count, sizeof(*specs));
	e = calloc((size_t)spec_count, sizeof(*e));
	ZN_FUZZ_CHECK(specs && e);
	zn_hf_layout(&cfg, specs);
	for (int i = 0; i < spec_count; i++) {
		e[i].name = specs[i].name;
		e[i].ndim = specs[i].ndim;
		e[i].shape[0] = specs[i].shape[0];
		e[i].shape[1] = specs[i].shape[1];
		e[i].fill = fill_ramp;
		e[i].ctx = &specs[i];
	}
	for (int s = 0, first = 0; s < 2; s++) {
		int end = first;

		while (end < spec_count && (specs[end].layer <= 1) == (s == 0))
			end++;
		snprintf(p, sizeof(p), "%s/%s", dir, shard_names[s]);
		ZN_FUZZ_CHECK(zn_st_write(p, ZN_DTYPE_BF16, e + first, end - first, NULL, NULL,
					  0) == 0);
		first = end;
	}
	free(e);
}

int zn_fuzz_one(const uint8_t *data, size_t n)
{
	struct zn_hf_src *s;
	float *row;
	int rc;

	if (!dir[0])
		make_dir();
	write_text("model.safetensors.index.json", data, n);
	if (zn_hf_open(&s, dir))
		return 0;
	ZN_FUZZ_CHECK(zn_hf_src_config(s) != NULL);
	rc = zn_hf_check_layout(s);
	row = malloc(64 * sizeof(float));
	ZN_FUZZ_CHECK(row != NULL);
	for (int i = 0; i < spec_count; i++) {
		const struct zn_st_tensor *t = NULL;
		int found = zn_hf_find(s, specs[i].name, &t, NULL);

		if (!rc) { /* the layout checked: every tensor is there with its shape */
			ZN_FUZZ_CHECK(found == 0 && t != NULL && t->ndim == specs[i].ndim);
			ZN_FUZZ_CHECK(zn_hf_read_rows(s, specs[i].name, 0, 1, ZN_DTYPE_F32,
						      row) == 0);
			ZN_FUZZ_CHECK(row[0] == 0.0f);
		}
	}
	free(row);
	zn_hf_close(s);
	return rc ? 0 : 1;
}
