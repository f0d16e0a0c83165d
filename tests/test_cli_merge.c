/* zinc merge end to end (docs/lora.md, "zinc merge"): a PEFT adapter (written here, random
 * A and B) merged into a Llama base saved by zinc train --steps 0. Every merged weight is
 * the float64 W + scale B A of the files, computed here independently and rounded once to
 * the base's dtype (bf16: the nearest bf16, checked against both neighbours; fp32: the
 * double's one rounding); every other tensor is the base's, bit for bit; config.json,
 * the tokenizer and generation_config.json are there; a small --max-shard-size gives the
 * shards and index that huggingface_hub's split gives; the directory loads back in zinc,
 * which generates from it the ids that zinc generate --adapter gives; zinc train --steps 0
 * --merge-adapter writes the same bits; the output directory's refusals. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_child.h"
#include "model/safetensors.h"

#define R 3
#define ALPHA 8.0

static char dir[64];
static const char *const targets[] = { "q_proj", "v_proj", "down_proj", "gate_proj" };

static const char *path(const char *name)
{
	static char p[8][512];
	static int k;

	k = (k + 1) % 8;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

static void sh(const char *fmt, const char *a, const char *b)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), fmt, a, b);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static bool has(const char *file, const char *text)
{
	char *s = zt_read_all(file, NULL);
	bool r = strstr(s, text) != NULL;

	free(s);
	return r;
}

/* a zinc-saved Llama base (bf16 or fp32, vocab 320 for the qwen2 tokenizer fixture) with
 * the tokenizer and a generation_config.json beside it */
static void make_base(const char *name, const char *dtype)
{
	FILE *f;
	char p[256];

	cr_assert_eq(zt_zinc(path("out"), path("err"), "train", "--model", "llama-tiny",
			     "--tied-embeddings", "false", "--vocab", "320", "--steps", "0",
			     "--save-final", path(name), "--save-dtype", dtype, NULL), 0,
		     "zinc train --steps 0 without --data");
	sh("cp %s/tests/ref/tok/qwen2/tokenizer*.json %s/", ZN_TEST_SRC_DIR, path(name));
	snprintf(p, sizeof(p), "%s/%s/generation_config.json", dir, name);
	f = fopen(p, "w");
	cr_assert_not_null(f);
	fputs("{\"bos_token_id\": 311, \"eos_token_id\": [311, 313]}\n", f);
	fclose(f);
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
	return *s;
}

/* PEFT's files for the targets of base's model.safetensors: A [R, in], B [out, R] uniform in
 * [-0.4, 0.4), fp32; use_rslora as asked; a dropout that inference ignores */
static void make_adapter(const char *name, const char *base, bool rslora)
{
	char p[256], bp[256];
	struct zn_st_file *f;
	struct zn_st_entry e[64];
	static char names[64][256];
	float *data[64];
	int n = 0;
	uint64_t s = 0x5eed;
	FILE *cf;

	snprintf(bp, sizeof(bp), "%s/%s/model.safetensors", dir, base);
	cr_assert_eq(zn_st_open(&f, bp), 0);
	for (int i = 0; i < zn_st_tensor_count(f); i++) {
		const struct zn_st_tensor *t = zn_st_tensor_at(f, i);
		char module[200];
		size_t len = strlen(t->name);

		for (size_t k = 0; k < sizeof(targets) / sizeof(targets[0]); k++) {
			size_t tl = strlen(targets[k]);

			if (len < tl + 8 || strcmp(t->name + len - 7, ".weight") ||
			    strncmp(t->name + len - 7 - tl, targets[k], tl))
				continue;
			snprintf(module, sizeof(module), "%.*s", (int)(len - 7), t->name);
			for (int ab = 0; ab < 2; ab++) {
				int64_t rows = ab ? t->shape[0] : R, cols = ab ? R : t->shape[1];

				snprintf(names[n], sizeof(names[n]), "base_model.model.%s.lora_%c.weight",
					 module, ab ? 'B' : 'A');
				data[n] = malloc((size_t)(rows * cols) * sizeof(float));
				for (int64_t j = 0; j < rows * cols; j++)
					data[n][j] = 0.8f * ((float)(rng(&s) >> 40) / 16777216.0f - 0.5f);
				e[n] = (struct zn_st_entry){ .name = names[n], .ndim = 2,
							     .shape = { rows, cols }, .data_h = data[n] };
				n++;
			}
		}
	}
	zn_st_close(f);
	cr_assert_gt(n, 0);
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/%s/adapter_model.safetensors", dir, name);
	cr_assert_eq(zn_st_write(p, ZN_DTYPE_F32, e, n, NULL, NULL, 0), 0);
	for (int i = 0; i < n; i++)
		free(data[i]);
	snprintf(p, sizeof(p), "%s/%s/adapter_config.json", dir, name);
	cf = fopen(p, "w");
	cr_assert_not_null(cf);
	fprintf(cf, "{\"peft_type\": \"LORA\", \"task_type\": \"CAUSAL_LM\", \"r\": %d, "
		"\"lora_alpha\": %g, \"lora_dropout\": 0.05, \"use_rslora\": %s, "
		"\"target_modules\": [\"q_proj\", \"v_proj\", \"down_proj\", \"gate_proj\"], "
		"\"bias\": \"none\", \"fan_in_fan_out\": false, \"modules_to_save\": null, "
		"\"rank_pattern\": {}, \"alpha_pattern\": {}, \"use_dora\": false}\n", R, ALPHA,
		rslora ? "true" : "false");
	fclose(cf);
}

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_cli_merge_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void rm_dir(void)
{
	sh("rm -rf %s%s", dir, "");
}

/* tensor `name` of a directory's weights (one file or the index's shard) as float64, and
 * its raw 16-bit values when bf16 (raw16 may be NULL) */
static double *read_tensor(const char *d, const char *name, uint64_t *numel, int *dtype,
			   uint16_t **raw16)
{
	char p[512], *idx;
	struct zn_st_file *f;
	const struct zn_st_tensor *t;
	float *v;
	double *out;

	snprintf(p, sizeof(p), "%s/model.safetensors.index.json", d);
	if (!access(p, F_OK)) {
		cJSON *j = cJSON_Parse(idx = zt_read_all(p, NULL));
		const cJSON *s = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "weight_map"), name);

		cr_assert(cJSON_IsString(s), "%s not in the index", name);
		snprintf(p, sizeof(p), "%s/%s", d, s->valuestring);
		cJSON_Delete(j);
		free(idx);
	} else {
		snprintf(p, sizeof(p), "%s/model.safetensors", d);
	}
	cr_assert_eq(zn_st_open(&f, p), 0, "%s", p);
	t = zn_st_find(f, name);
	cr_assert_not_null(t, "%s: no %s", p, name);
	*numel = t->numel;
	*dtype = t->dtype;
	v = malloc(t->numel * sizeof(float));
	out = malloc(t->numel * sizeof(double));
	cr_assert_eq(zn_st_read_f32(f, t, v), 0);
	for (uint64_t i = 0; i < t->numel; i++)
		out[i] = v[i];
	if (raw16) {
		*raw16 = malloc(t->numel * 2);
		cr_assert_eq(t->dtype, ZN_DTYPE_BF16);
		cr_assert_eq(zn_st_read_range(f, t, 0, t->numel, ZN_DTYPE_BF16, *raw16), 0);
	}
	free(v);
	zn_st_close(f);
	return out;
}

static float bf16_value(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float x;

	memcpy(&x, &u, 4);
	return x;
}

/* b is the bf16 nearest to x: its neighbours are no nearer */
static bool nearest_bf16(double x, uint16_t b)
{
	double v = bf16_value(b), up = bf16_value((uint16_t)(b + 1));
	double dn = (b & 0x7fff) ? bf16_value((uint16_t)(b - 1)) : -bf16_value(1);

	return fabs(x - v) <= fabs(x - up) && fabs(x - v) <= fabs(x - dn);
}

/* every tensor of base against out: targets W + scale B A (float64, one rounding), the rest
 * bit for bit. Returns the count of merged tensors. */
static int check_merged(const char *base, const char *ad, const char *out, bool rslora)
{
	const double scale = rslora ? ALPHA / sqrt((double)R) : ALPHA / R;
	char bp[256], ap[256], od[256];
	struct zn_st_file *bf, *af;
	int merged = 0;

	snprintf(bp, sizeof(bp), "%s/%s/model.safetensors", dir, base);
	snprintf(ap, sizeof(ap), "%s/%s/adapter_model.safetensors", dir, ad);
	snprintf(od, sizeof(od), "%s/%s", dir, out);
	cr_assert_eq(zn_st_open(&bf, bp), 0);
	cr_assert_eq(zn_st_open(&af, ap), 0);
	for (int i = 0; i < zn_st_tensor_count(bf); i++) {
		const struct zn_st_tensor *t = zn_st_tensor_at(bf, i);
		char an[300], bn[300];
		const struct zn_st_tensor *ta, *tb;
		uint64_t n;
		int dt;
		uint16_t *raw = NULL;
		float *W = malloc(t->numel * sizeof(float)), *A, *B;
		double *got;

		got = read_tensor(od, t->name, &n, &dt, t->dtype == ZN_DTYPE_BF16 ? &raw : NULL);
		cr_assert_eq(n, t->numel, "%s", t->name);
		cr_assert_eq(dt, t->dtype, "%s: the base's dtype", t->name);
		cr_assert_eq(zn_st_read_f32(bf, t, W), 0);
		snprintf(an, sizeof(an), "base_model.model.%.*s.lora_A.weight",
			 (int)strlen(t->name) - 7, t->name);
		snprintf(bn, sizeof(bn), "base_model.model.%.*s.lora_B.weight",
			 (int)strlen(t->name) - 7, t->name);
		ta = zn_st_find(af, an);
		tb = zn_st_find(af, bn);
		if (!ta) {
			for (uint64_t k = 0; k < n; k++)
				cr_assert_eq(got[k], (double)W[k], "%s[%llu] changed", t->name,
					     (unsigned long long)k);
		} else {
			int64_t rows = t->shape[0], cols = t->shape[1];

			A = malloc(ta->numel * sizeof(float));
			B = malloc(tb->numel * sizeof(float));
			cr_assert_eq(zn_st_read_f32(af, ta, A), 0);
			cr_assert_eq(zn_st_read_f32(af, tb, B), 0);
			for (int64_t o = 0; o < rows; o++)
				for (int64_t c = 0; c < cols; c++) {
					double s = 0, want;
					uint64_t k = (uint64_t)(o * cols + c);

					for (int q = 0; q < R; q++)
						s += (double)B[o * R + q] * (double)A[q * cols + c];
					want = (double)W[k] + scale * s;
					if (raw)
						cr_assert(nearest_bf16(want, raw[k]),
							  "%s[%lld, %lld]: bf16 %.9g, float64 %.17g",
							  t->name, (long long)o, (long long)c, got[k],
							  want);
					else
						cr_assert_eq(got[k], (double)(float)want,
							     "%s[%lld, %lld]: %.9g, float64 %.17g",
							     t->name, (long long)o, (long long)c, got[k],
							     want);
				}
			free(A);
			free(B);
			merged++;
		}
		free(W);
		free(got);
		free(raw);
	}
	zn_st_close(bf);
	zn_st_close(af);
	return merged;
}

Test(cli_merge, bf16_base_merged_in_float64_with_its_tokenizer_and_config)
{
	char *s, *o;

	make_dir();
	make_base("base", "bf16");
	make_adapter("ad", "base", true);
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("m"), NULL), 0);
	cr_assert(has(path("out"), "merged 8 adapters (r 3, lora_alpha 8, rsLoRA"),
		  "2 layers x 4 targets");
	cr_assert_eq(check_merged("base", "ad", "m", true), 8);
	cr_assert(has(path("m/config.json"), "\"torch_dtype\": \"bfloat16\""));
	cr_assert(has(path("m/config.json"), "\"model_type\": \"llama\""));
	/* the base's tokenizer and generation config, byte for byte */
	for (int i = 0; i < 3; i++) {
		const char *n[] = { "tokenizer.json", "tokenizer_config.json",
				    "generation_config.json" };
		char a[256], b[256];

		snprintf(a, sizeof(a), "base/%s", n[i]);
		snprintf(b, sizeof(b), "m/%s", n[i]);
		s = zt_read_all(path(a), NULL);
		o = zt_read_all(path(b), NULL);
		cr_assert_str_eq(s, o, "%s", n[i]);
		free(s), free(o);
	}
	/* nothing else left beside it: no staging directory */
	sh("test \"$(ls %s | tr '\\n' ' ')\" = 'ad base err m out '%s", dir, "");
	rm_dir();
}

/* huggingface_hub's split (split_state_dict_into_shards_factory), as written there: a
 * tensor over max is appended to the list as a shard of its own when met; one that would
 * take the current shard past max appends the current shard and starts a new one; the
 * last shard is appended at the end. A shard's number is its place in that list. */
static int expected_shards(struct zn_st_file *f, uint64_t max, int *shard_of)
{
	int n = 0, first = 0; /* the current shard holds tensors first .. i-1 not yet placed */
	uint64_t size = 0;
	int count = zn_st_tensor_count(f);

	for (int i = 0; i < count; i++)
		shard_of[i] = -1;
	for (int i = 0; i <= count; i++) {
		uint64_t b = i < count ? zn_st_tensor_at(f, i)->numel * 4 : 0;
		bool close = i == count ? size > 0 : b <= max && size + b > max;

		if (close) {
			for (int j = first; j < i; j++)
				if (shard_of[j] < 0)
					shard_of[j] = n;
			n++;
			size = 0;
			first = i;
		}
		if (i == count)
			break;
		if (b > max) {
			shard_of[i] = n++;
			continue;
		}
		size += b;
	}
	return n;
}

Test(cli_merge, shards_index_load_back_and_generate_as_the_adapter)
{
	struct zn_st_file *f;
	int shard_of[64], n;
	uint64_t total = 0;
	char p[256], *text, *ids_adapter, *ids_merged;
	cJSON *j;

	make_dir();
	make_base("base", "fp32");
	make_adapter("ad", "base", false);
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("m"), "--max-shard-size",
			     "60KB", NULL), 0);
	cr_assert_eq(check_merged("base", "ad", "m", false), 8);
	snprintf(p, sizeof(p), "%s/base/model.safetensors", dir);
	cr_assert_eq(zn_st_open(&f, p), 0);
	n = expected_shards(f, 60000, shard_of);
	cr_assert_gt(n, 2, "the embeddings, the head and the layers' tensors");
	j = cJSON_Parse(text = zt_read_all(path("m/model.safetensors.index.json"), NULL));
	cr_assert_not_null(j);
	for (int i = 0; i < zn_st_tensor_count(f); i++) {
		const struct zn_st_tensor *t = zn_st_tensor_at(f, i);
		const cJSON *s = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "weight_map"),
						     t->name);
		char want[64];

		snprintf(want, sizeof(want), "model-%05d-of-%05d.safetensors", shard_of[i] + 1, n);
		cr_assert(cJSON_IsString(s) && !strcmp(s->valuestring, want),
			  "%s: in %s, huggingface_hub puts it in %s", t->name,
			  cJSON_IsString(s) ? s->valuestring : "nothing", want);
		total += t->numel * 4;
	}
	cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metadata"),
					 "total_size")->valuedouble, (double)total);
	cJSON_Delete(j);
	free(text);
	zn_st_close(f);
	snprintf(p, sizeof(p), "%s/m/model-%05d-of-%05d.safetensors", dir, n, n);
	cr_assert_eq(access(p, F_OK), 0, "%s", p);
	cr_assert_neq(access(path("m/model.safetensors"), F_OK), 0);
	/* back in zinc: greedy ids from the merged directory are those of the adapter applied
	 * unmerged on the base (and not the base's own) */
	cr_assert_eq(zt_zinc(path("out"), path("ids_m"), "generate", "--init-from", path("m"),
			     "--prompt", "hello world", "--max-new-tokens", "16", "--ignore-eos",
			     "--print-ids", NULL), 0);
	cr_assert_eq(zt_zinc(path("out"), path("ids_a"), "generate", "--init-from", path("base"),
			     "--adapter", path("ad"), "--prompt", "hello world",
			     "--max-new-tokens", "16", "--ignore-eos", "--print-ids", NULL), 0);
	ids_merged = zt_read_all(path("ids_m"), NULL);
	ids_adapter = zt_read_all(path("ids_a"), NULL);
	*strstr(ids_merged, "\nprefill") = 0;
	*strstr(ids_adapter, "\nprefill") = 0;
	cr_assert(strstr(ids_merged, "ids: "), "%s", ids_merged);
	cr_assert_str_eq(strstr(ids_merged, "ids: "), strstr(ids_adapter, "ids: "));
	cr_assert_eq(zt_zinc(path("out"), path("ids_b"), "generate", "--init-from", path("base"),
			     "--prompt", "hello world", "--max-new-tokens", "16", "--ignore-eos",
			     "--print-ids", NULL), 0);
	cr_assert(!has(path("ids_b"), strstr(ids_adapter, "ids: ")), "the adapter changed nothing");
	free(ids_merged), free(ids_adapter);
	rm_dir();
}

/* zinc train --steps 0 writes the initial model: the base itself, or with --init-adapter
 * --merge-adapter the bits zinc merge writes (no step trained) */
Test(cli_merge, train_steps_0_writes_the_initial_model)
{
	char *a, *b;
	size_t na, nb;

	make_dir();
	make_base("base", "fp32");
	make_adapter("ad", "base", true);
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("m"), NULL), 0);
	cr_assert_eq(zt_zinc(path("out"), path("err"), "train", "--init-from", path("base"),
			     "--steps", "0", "--lora-r", "3", "--lora-alpha", "8", "--use-rslora",
			     "--lora-targets", "q_proj,v_proj,down_proj,gate_proj",
			     "--init-adapter", path("ad"), "--merge-adapter", "--save-final",
			     path("t"), NULL), 0);
	cr_assert(has(path("out"), "--steps 0: no step to train"));
	a = zt_read_all(path("m/model.safetensors"), &na);
	b = zt_read_all(path("t/model.safetensors"), &nb);
	cr_assert(na == nb && !memcmp(a, b, na), "zinc train --steps 0 --merge-adapter and "
		  "zinc merge wrote different weights");
	free(a), free(b);
	/* no output asked: refused, nothing to do */
	cr_assert_eq(zt_zinc(path("out"), path("err"), "train", "--init-from", path("base"),
			     "--steps", "0", NULL), 2);
	cr_assert(has(path("err"), "--steps 0 trains nothing"));
	/* merging a saved adapter in zinc train without --steps trains first: said */
	cr_assert_eq(zt_zinc(path("out"), path("err"), "train", "--init-from", path("base"),
			     "--lora-r", "3", "--lora-alpha", "8", "--use-rslora", "--lora-targets",
			     "q_proj", "--init-adapter", path("ad"), "--merge-adapter",
			     "--save-final", path("t2"), "--print-config", NULL), 0);
	cr_assert(has(path("err"), "zinc merge --init-from BASE --adapter DIR"));
	rm_dir();
}

Test(cli_merge, the_output_directory_is_never_clobbered)
{
	char *first, *again;
	size_t n1, n2;

	make_dir();
	make_base("base", "fp32");
	make_adapter("ad", "base", false);
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("m"), NULL), 0);
	first = zt_read_all(path("m/model.safetensors"), &n1);
	/* an earlier merge: refused, then replaced with --overwrite */
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("m"), NULL), 2);
	cr_assert(has(path("err"), "is not empty") && has(path("err"), "--overwrite"));
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("m/"), "--overwrite", NULL),
		     0);
	again = zt_read_all(path("m/model.safetensors"), &n2);
	cr_assert(n1 == n2 && !memcmp(first, again, n1));
	free(first), free(again);
	/* a file a merge does not write: --overwrite refuses too */
	sh("touch %s/m/notes.txt%s", dir, "");
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("m"), "--overwrite", NULL),
		     2);
	cr_assert(has(path("err"), "holds notes.txt"));
	cr_assert_eq(access(path("m/notes.txt"), F_OK), 0, "the user's file is still there");
	/* the base's own directory, with --overwrite as well */
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("base"), "--overwrite",
			     NULL), 2);
	cr_assert(has(path("err"), "base's directory"));
	/* a symlink at OUT (to an empty directory): never written through */
	cr_assert_eq(mkdir(path("empty"), 0755), 0);
	cr_assert_eq(symlink(path("empty"), path("link")), 0);
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("link"), NULL), 2);
	cr_assert(has(path("err"), "symbolic link") || has(path("err"), "symlink"), "%s",
		  zt_read_all(path("err"), NULL));
	/* an empty directory is taken */
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("empty"), NULL), 0);
	cr_assert_eq(access(path("empty/config.json"), F_OK), 0);
	/* one file, a missing flag, an adapter zinc does not implement */
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("x.safetensors"), NULL), 2);
	cr_assert(has(path("err"), "writes a Hugging Face directory"));
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--output", path("y"), NULL), 2);
	/* the file holds adapters its config does not name: another model's */
	sh("sed -i 's/, \"v_proj\", \"down_proj\", \"gate_proj\"//' %s/ad/adapter_config.json%s",
	   dir, "");
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("z"), NULL), 2);
	cr_assert(has(path("err"), "tensors are adapters of modules outside") &&
		  has(path("err"), "v_proj"), "%s", zt_read_all(path("err"), NULL));
	cr_assert_eq(zt_zinc(path("out"), path("err"), "generate", "--init-from", path("base"),
			     "--adapter", path("ad"), "--prompt", "hi", NULL), 2);
	cr_assert(has(path("err"), "tensors are adapters of modules outside"));
	sh("sed -i 's/\"use_dora\": false/\"use_dora\": true/' %s/ad/adapter_config.json%s",
	   dir, "");
	cr_assert_eq(zt_zinc(path("out"), path("err"), "merge", "--init-from", path("base"),
			     "--adapter", path("ad"), "--output", path("z"), NULL), 2);
	cr_assert(has(path("err"), "use_dora is true, which adds DoRA"), "%s",
		  zt_read_all(path("err"), NULL));
	cr_assert_neq(access(path("z"), F_OK), 0, "nothing written");
	rm_dir();
}
