/* src/model safetensors: writer/reader round trips (F32 exact, BF16 and F16 as the dtype
 * casts round), the GPT-2 save/load (Hugging Face names and Conv1D layout, names without
 * "transformer.", tied lm_head, config from a checkpoint) and each malformed-file error,
 * whose message is checked for the words that tell the user what is wrong.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "model/gpt2/gpt2.h"
#include "model/safetensors.h"

static const struct zn_gpt2_config tiny = { 2, 4, 32, 8, 60, 64 };

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_st_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(safetensors, .init = make_dir, .fini = remove_dir);

static const char *path_of(const char *name)
{
	static char p[4][128];
	static int next;
	char *out = p[next++ % 4];

	snprintf(out, 128, "%s/%s", dir, name);
	return out;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill_random(float *x, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((double)(rng_next(&seed) >> 11) * 0x1.0p-53 * 4.0 - 2.0);
}

/* stderr into a file between capture_begin and capture_end, which returns what was
 * written (static buffer). */
static int saved_fd = -1;

static void capture_begin(void)
{
	int fd = open(path_of("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);

	cr_assert_geq(fd, 0);
	fflush(stderr);
	saved_fd = dup(2);
	dup2(fd, 2);
	close(fd);
}

static const char *capture_end(void)
{
	static char buf[8192];
	FILE *fp;
	size_t n;

	fflush(stderr);
	dup2(saved_fd, 2);
	close(saved_fd);
	fp = fopen(path_of("stderr.txt"), "r");
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	buf[n] = 0;
	fclose(fp);
	fputs(buf, stderr);
	return buf;
}

/* ---- raw format ---------------------------------------------------------------------------- */

Test(safetensors, round_trip_each_dtype_with_metadata)
{
	enum zn_dtype dts[] = { ZN_DTYPE_F32, ZN_DTYPE_BF16, ZN_DTYPE_F16 };
	float a[6], b[7];
	const char *keys[] = { "n_head", "note" }, *vals[] = { "4", "hello" };

	fill_random(a, 6, 1);
	fill_random(b, 7, 2);
	for (int d = 0; d < 3; d++) {
		struct zn_st_entry e[3] = {
			{ .name = "a", .ndim = 2, .shape = { 2, 3 }, .data_h = a },
			{ .name = "scalar", .ndim = 0, .data_h = a },
			{ .name = "b", .ndim = 1, .shape = { 7 }, .data_h = b },
		};
		const char *p = path_of("rt.safetensors");
		struct zn_st_file *f;
		const struct zn_st_tensor *t;
		float got[7];

		cr_assert_eq(zn_st_write(p, dts[d], e, 3, keys, vals, 2), 0);
		cr_assert_eq(zn_st_open(&f, p), 0);
		cr_expect_eq(zn_st_tensor_count(f), 3);
		cr_expect_str_eq(zn_st_metadata(f, "note"), "hello");
		cr_expect_null(zn_st_metadata(f, "absent"));
		t = zn_st_find(f, "a");
		cr_assert_not_null(t);
		cr_expect(t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->numel == 6);
		cr_expect_eq(t->dtype, (int)dts[d]);
		cr_assert_eq(zn_st_read_f32(f, t, got), 0);
		for (int i = 0; i < 6; i++) {
			float want = dts[d] == ZN_DTYPE_F32 ? a[i] :
				     dts[d] == ZN_DTYPE_BF16 ? zn_bf16_to_f32(zn_f32_to_bf16(a[i])) :
							       zn_f16_to_f32(zn_f32_to_f16(a[i]));

			cr_expect_eq(got[i], want, "%s a[%d]: got %.9g want %.9g",
				     zn_dtype_name(dts[d]), i, got[i], want);
		}
		t = zn_st_find(f, "scalar");
		cr_expect(t && t->ndim == 0 && t->numel == 1);
		cr_assert_eq(zn_st_read_f32(f, zn_st_find(f, "b"), got), 0);
		cr_expect(fabsf(got[6] - b[6]) <= 1e-2f * fabsf(b[6]));
		zn_st_close(f);
		/* the header is padded so the data section is 8-byte aligned */
		FILE *fp = fopen(p, "rb");
		uint64_t n = 0;
		cr_assert_eq(fread(&n, 8, 1, fp), 1);
		fclose(fp);
		cr_expect_eq(n % 8, 0);
	}
}

static int fill_fails(void *ctx, float *out)
{
	return -5;
}

Test(safetensors, failed_write_leaves_old_file_and_no_temporary)
{
	float a[4] = { 1, 2, 3, 4 };
	struct zn_st_entry ok = { .name = "a", .ndim = 1, .shape = { 4 }, .data_h = a };
	struct zn_st_entry bad = { .name = "b", .ndim = 1, .shape = { 4 }, .fill = fill_fails };
	struct zn_st_entry both[2] = { ok, bad };
	const char *p = path_of("keep.safetensors");
	struct zn_st_file *f;
	char cmd[256];

	cr_assert_eq(zn_st_write(p, ZN_DTYPE_F32, &ok, 1, NULL, NULL, 0), 0);
	cr_expect_eq(zn_st_write(p, ZN_DTYPE_F32, both, 2, NULL, NULL, 0), -5);
	cr_assert_eq(zn_st_open(&f, p), 0, "the old file is still whole");
	cr_expect_eq(zn_st_tensor_count(f), 1);
	zn_st_close(f);
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls %s | grep tmp)\"", dir);
	cr_expect_eq(system(cmd), 0, "temporary file removed");
	cr_expect_neq(zn_st_write(p, (enum zn_dtype)7, &ok, 1, NULL, NULL, 0), 0);
	cr_expect_neq(zn_st_write("/nonexistent-dir/x.safetensors", ZN_DTYPE_F32, &ok, 1, NULL,
				  NULL, 0), 0);
}

/* ---- malformed files ----------------------------------------------------------------------- */

/* Writes 8-byte length (header_len, or strlen(json) when 0), json, then data_bytes bytes. */
static const char *write_raw(const char *json, uint64_t header_len, size_t data_bytes)
{
	const char *p = path_of("bad.safetensors");
	FILE *fp = fopen(p, "wb");
	uint64_t n = header_len ? header_len : strlen(json);
	uint64_t s = 3;

	cr_assert(fp);
	fwrite(&n, 8, 1, fp);
	fwrite(json, 1, strlen(json), fp);
	for (size_t i = 0; i < data_bytes; i++)
		fputc((int)(rng_next(&s) & 0xff), fp);
	fclose(fp);
	return p;
}

/* Opening must fail and the logged line must contain `words`. */
static void expect_rejected(const char *p, const char *words)
{
	struct zn_st_file *f = NULL;
	const char *buf;
	int rc;

	capture_begin();
	rc = zn_st_open(&f, p);
	buf = capture_end();
	cr_expect_neq(rc, 0, "must reject (%s)", words);
	cr_expect_null(f);
	cr_expect(strstr(buf, words), "error should say '%s'; it said: %s", words, buf);
	cr_expect(strstr(buf, p), "error should name the file; it said: %s", buf);
}

#define T1 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

Test(safetensors, rejects_truncated_data)
{
	expect_rejected(write_raw("{" T1 "}", 0, 5), "truncated");
}

Test(safetensors, rejects_header_length_beyond_file)
{
	expect_rejected(write_raw("{" T1 "}", 1000, 8), "beyond the file");
	expect_rejected(write_raw("", 0, 0), "the text ends where a value should be");
	const char *p = path_of("short.safetensors");
	FILE *fp = fopen(p, "wb");
	fputs("abc", fp);
	fclose(fp);
	expect_rejected(p, "too short");
}

Test(safetensors, rejects_out_of_range_offsets)
{
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
				  "[800,808]}}", 0, 8), "out of range");
}

Test(safetensors, rejects_overlapping_offsets)
{
	expect_rejected(write_raw("{" T1 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
				  "[4,12]}}", 0, 12), "overlaps");
}

Test(safetensors, rejects_shape_dtype_mismatch)
{
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
				  0, 8), "span 8 bytes");
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":"
				  "[0,8]}}", 0, 8), "span 8 bytes");
}

Test(safetensors, rejects_holes_trailing_bytes_and_duplicates)
{
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
				  "[4,12]}}", 0, 12), "belong to no tensor");
	expect_rejected(write_raw("{" T1 "}", 0, 12), "after the last tensor");
	/* a name given twice is its last entry (below): the first one's bytes are then
	 * nobody's, as the Rust reader's validate() finds too */
	expect_rejected(write_raw("{" T1 ",\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
				  "\"data_offsets\":[0,4]}}", 0, 8), "after the last tensor");
}

/* Repeated keys as huggingface/safetensors' Rust reader (serde) takes them: a tensor name
 * or a __metadata__ key given twice is its last value (HashMap); a second __metadata__ or
 * a field of one tensor given twice is a "duplicate field" error. */
Test(safetensors, repeated_keys_as_the_rust_reader)
{
	struct zn_st_file *f;
	const char *p = write_raw("{\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},"
				  "\"__metadata__\":{\"format\":\"tf\",\"format\":\"pt\"}," T1 "}",
				  0, 8);

	capture_begin();
	cr_assert_eq(zn_st_open(&f, p), 0);
	capture_end();
	cr_expect_eq(zn_st_tensor_count(f), 1);
	cr_expect_str_eq(zn_st_find(f, "a")->dtype_name, "F32");
	cr_expect_eq(zn_st_find(f, "a")->shape[0], 2);
	cr_expect_str_eq(zn_st_metadata(f, "format"), "pt");
	zn_st_close(f);
	expect_rejected(write_raw("{\"__metadata__\":{},\"__metadata__\":{}," T1 "}", 0, 8),
			"key \"__metadata__\" repeats in one object");
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"dtype\":\"F32\","
				  "\"data_offsets\":[0,8]}}", 0, 8), "key \"dtype\" repeats");
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
				  "[0,8],\"data_offsets\":[0,8]}}", 0, 8), "key \"data_offsets\"");
}

/* The format pads the header with spaces; a NUL byte is not JSON white space (serde_json
 * refuses it as trailing characters), so a NUL-padded header is refused, not cut short. */
Test(safetensors, header_padded_with_nul_is_refused)
{
	const char *json = "{" T1 "}";
	char header[128];
	size_t n = strlen(json), pad = 8 - n % 8;
	struct zn_st_file *f;
	const char *p;

	memcpy(header, json, n);
	memset(header + n, ' ', pad);
	header[n + pad] = 0;
	p = write_raw(header, 0, 8);
	cr_assert_eq(zn_st_open(&f, p), 0, "a header padded with spaces is the format's own");
	zn_st_close(f);
	/* the same header, its padding NUL bytes: write_raw takes the length and the NULs
	 * become the header's last bytes, the data still 8 bytes after them */
	{
		FILE *fp = fopen(path_of("nul.safetensors"), "wb");
		uint64_t len = n + pad;
		float data[2] = { 1, 2 };

		cr_assert(fp);
		fwrite(&len, 8, 1, fp);
		fwrite(json, 1, n, fp);
		for (size_t i = 0; i < pad; i++)
			fputc(0, fp);
		fwrite(data, 4, 2, fp);
		fclose(fp);
	}
	expect_rejected(path_of("nul.safetensors"), "a NUL byte after the JSON value");
}

Test(safetensors, rejects_bad_json_and_fields)
{
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"F32\"", 0, 0),
			"the end of the text inside an object");
	expect_rejected(write_raw("[1,2]", 0, 0), "not a JSON object");
	expect_rejected(write_raw("{" T1 "} junk", 0, 8), "'j' after the JSON value");
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":"
				  "[0,8]}}", 0, 8), "shape entry");
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
				  "[0,8e0]}}", 0, 8), "data_offsets");
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}",
				  0, 8), "unknown dtype");
	expect_rejected(write_raw("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8),
			"dtype");
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":"
				  "[0,8]}}", 0, 8), "shape entry");
	expect_rejected(write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
				  0, 8), "data_offsets");
	expect_rejected(write_raw("{" T1 ",\"__metadata__\":{\"k\":3}}", 0, 8), "not a string");
}

Test(safetensors, other_dtypes_parse_but_do_not_read_as_floats)
{
	const char *p = write_raw("{\"__metadata__\":{\"format\":\"pt\"},\"i\":{\"dtype\":\"I64\","
				  "\"shape\":[1],\"data_offsets\":[0,8]}}", 0, 8);
	struct zn_st_file *f;
	float x[2];

	cr_assert_eq(zn_st_open(&f, p), 0);
	cr_expect_str_eq(zn_st_metadata(f, "format"), "pt");
	cr_expect_neq(zn_st_read_f32(f, zn_st_find(f, "i"), x), 0);
	zn_st_close(f);
	cr_expect_neq(zn_st_open(&f, path_of("missing.safetensors")), 0);
}

/* ---- GPT-2 checkpoints ------------------------------------------------------------------- */

static struct zn_gpt2_host *model(uint64_t seed)
{
	struct zn_gpt2_host *m;

	cr_assert_eq(zn_gpt2_host_create(&m, &tiny, false), 0);
	zn_gpt2_host_init(m, seed);
	/* biases and layernorms random too, so a mix-up between tensors shows */
	for (int l = 0; l < m->layer_count; l++)
		for (int i = 0; i < m->layers[l].tensor_count; i++)
			if (m->layers[l].tensors[i].ndim == 1)
				fill_random(m->params[l] + m->layers[l].tensors[i].offset,
					    m->layers[l].tensors[i].numel, seed + 100 * l + i);
	return m;
}

static void save(struct zn_gpt2_host *m, const char *p, enum zn_dtype dt)
{
	cr_assert_eq(zn_gpt2_save_safetensors(&m->cfg, m->layers, (const float *const *)m->params,
					      p, dt), 0);
}

static int load(struct zn_gpt2_host *m, const char *p)
{
	return zn_gpt2_load_safetensors(&m->cfg, m->layers, m->params, p);
}

Test(safetensors, gpt2_round_trip_f32_exact_and_bf16_rounded)
{
	struct zn_gpt2_host *a = model(1), *b = model(2);
	const char *p = path_of("gpt2.safetensors");

	save(a, p, ZN_DTYPE_F32);
	cr_assert_eq(load(b, p), 0);
	for (int l = 0; l < a->layer_count; l++)
		cr_expect_eq(memcmp(a->params[l], b->params[l], a->layers[l].numel * 4), 0,
			     "layer %d", l);
	save(a, p, ZN_DTYPE_BF16);
	cr_assert_eq(load(b, p), 0);
	for (int l = 0; l < a->layer_count; l++)
		for (uint64_t i = 0; i < a->layers[l].numel; i++)
			cr_assert_eq(b->params[l][i],
				     zn_bf16_to_f32(zn_f32_to_bf16(a->params[l][i])),
				     "layer %d [%llu]", l, (unsigned long long)i);
	zn_gpt2_host_destroy(a);
	zn_gpt2_host_destroy(b);
}

Test(safetensors, gpt2_file_has_hf_names_and_conv1d_layout)
{
	struct zn_gpt2_host *a = model(3);
	const char *p = path_of("hf.safetensors");
	const struct zn_tensor_desc *d = &a->layers[1].tensors[ZN_GPT2_QKV_W];
	const struct zn_st_tensor *t;
	struct zn_st_file *f;
	float *w = malloc(d->numel * sizeof(float));
	const float *mem = a->params[1] + d->offset;

	save(a, p, ZN_DTYPE_F32);
	cr_assert_eq(zn_st_open(&f, p), 0);
	cr_expect_null(zn_st_find(f, "lm_head.weight"), "tied: not stored");
	cr_expect_str_eq(zn_st_metadata(f, "n_head"), "4");
	t = zn_st_find(f, "transformer.wte.weight");
	cr_expect(t && t->shape[0] == 60 && t->shape[1] == 32, "wte [V, C] without padding");
	t = zn_st_find(f, "transformer.h.0.attn.c_attn.weight");
	cr_assert(t && t->shape[0] == 32 && t->shape[1] == 96, "Conv1D [in, out]");
	cr_assert_eq(zn_st_read_f32(f, t, w), 0);
	for (int o = 0; o < 96; o++)
		for (int i = 0; i < 32; i++)
			cr_assert_eq(w[i * 96 + o], mem[o * 32 + i], "file[%d][%d]", i, o);
	cr_expect_not_null(zn_st_find(f, "transformer.h.1.mlp.c_proj.bias"));
	cr_expect_not_null(zn_st_find(f, "transformer.ln_f.weight"));
	cr_expect_eq(zn_st_tensor_count(f), 2 + 2 * 12 + 2);
	zn_st_close(f);
	free(w);
	zn_gpt2_host_destroy(a);
}

Test(safetensors, config_from_checkpoint)
{
	struct zn_gpt2_host *a = model(4);
	const char *p = path_of("cfg.safetensors");
	struct zn_gpt2_config c = { 0 };

	save(a, p, ZN_DTYPE_BF16);
	cr_assert_eq(zn_gpt2_config_from_safetensors(p, &c), 0);
	cr_expect(c.layers == 2 && c.heads == 4 && c.d_model == 32 && c.seq == 8 &&
		  c.vocab == 60 && c.padded_vocab == 128, "got %d %d %d %d %d %d", c.layers,
		  c.heads, c.d_model, c.seq, c.vocab, c.padded_vocab);
	c = (struct zn_gpt2_config){ .heads = 8 };
	cr_expect_neq(zn_gpt2_config_from_safetensors(p, &c), 0, "--heads contradicting n_head");
	zn_gpt2_host_destroy(a);
}

/* A checkpoint as the hub's gpt2 file: names without "transformer.", the attention mask
 * buffers, an lm_head equal to wte, no metadata. */
static void write_hub_style(struct zn_gpt2_host *m, const char *p, bool untied)
{
	struct zn_st_entry e[64];
	float *tr[64] = { 0 }, *head, mask[64];
	int n = 0;

	for (int l = 0; l < m->layer_count; l++) {
		for (int i = 0; i < m->layers[l].tensor_count; i++, n++) {
			const struct zn_tensor_desc *d = &m->layers[l].tensors[i];
			const float *src = m->params[l] + d->offset;

			e[n] = (struct zn_st_entry){ .name = d->name + strlen("transformer."),
						     .ndim = d->ndim,
						     .shape = { d->file_shape[0], d->file_shape[1] },
						     .data_h = src };
			if (d->transpose) {
				tr[n] = malloc(d->numel * sizeof(float));
				for (int64_t r = 0; r < d->shape[0]; r++)
					for (int64_t c = 0; c < d->shape[1]; c++)
						tr[n][c * d->shape[0] + r] = src[r * d->shape[1] + c];
				e[n].data_h = tr[n];
			}
		}
	}
	head = malloc(60 * 32 * sizeof(float));
	memcpy(head, m->params[0], 60 * 32 * sizeof(float));
	if (untied)
		head[77] += 1.0f;
	e[n++] = (struct zn_st_entry){ .name = "lm_head.weight", .ndim = 2, .shape = { 60, 32 },
				       .data_h = head };
	fill_random(mask, 64, 9);
	e[n++] = (struct zn_st_entry){ .name = "h.0.attn.bias", .ndim = 4, .shape = { 1, 1, 8, 8 },
				       .data_h = mask };
	cr_assert_eq(zn_st_write(p, ZN_DTYPE_F32, e, n, NULL, NULL, 0), 0);
	for (int i = 0; i < 64; i++)
		free(tr[i]);
	free(head);
}

Test(safetensors, gpt2_loads_hub_style_names_and_tied_lm_head)
{
	struct zn_gpt2_host *a = model(5), *b = model(6);
	const char *p = path_of("hub.safetensors");
	struct zn_gpt2_config c = { 0 };

	write_hub_style(a, p, false);
	cr_assert_eq(load(b, p), 0);
	for (int l = 0; l < a->layer_count; l++)
		cr_expect_eq(memcmp(a->params[l], b->params[l], a->layers[l].numel * 4), 0,
			     "layer %d", l);
	/* no n_head metadata and not a preset shape: heads must come from a flag */
	cr_expect_neq(zn_gpt2_config_from_safetensors(p, &c), 0);
	c.heads = 4;
	cr_expect_eq(zn_gpt2_config_from_safetensors(p, &c), 0);
	cr_expect(c.layers == 2 && c.d_model == 32 && c.vocab == 60);
	write_hub_style(a, p, true);
	capture_begin();
	cr_expect_neq(load(b, p), 0, "an untied lm_head is rejected");
	cr_expect(strstr(capture_end(), "lm_head.weight differs from wte"));
	zn_gpt2_host_destroy(a);
	zn_gpt2_host_destroy(b);
}

Test(safetensors, gpt2_rejects_shape_mismatch_missing_and_extra_layers)
{
	struct zn_gpt2_host *a = model(7), *wide, *deep;
	struct zn_gpt2_config cw = tiny, cd = tiny;
	const char *p = path_of("m.safetensors");
	const char *buf;

	cw.d_model = 64;
	cd.layers = 3;
	cr_assert_eq(zn_gpt2_host_create(&wide, &cw, false), 0);
	cr_assert_eq(zn_gpt2_host_create(&deep, &cd, false), 0);
	save(a, p, ZN_DTYPE_F32);
	capture_begin();
	cr_expect_neq(load(wide, p), 0, "d_model 64 vs 32");
	cr_expect_neq(load(deep, p), 0, "3 layers vs 2");
	save(deep, p, ZN_DTYPE_F32);
	cr_expect_neq(load(a, p), 0, "checkpoint deeper than the model");
	buf = capture_end();
	cr_expect(strstr(buf, "transformer.wte.weight") && strstr(buf, "[60, 64]") &&
		  strstr(buf, "[60, 32]"), "names the tensor and both shapes: %s", buf);
	cr_expect(strstr(buf, "transformer.h.2.ln_1.weight"), "names the missing block: %s", buf);
	cr_expect(strstr(buf, "more than 2 blocks"), "%s", buf);
	zn_gpt2_host_destroy(a);
	zn_gpt2_host_destroy(wide);
	zn_gpt2_host_destroy(deep);
}

/* ---- files that are not what they seem ------------------------------------------------- */

/* p's header with n_head's value replaced by v (the data section unchanged). */
static void set_n_head(const char *p, const char *v)
{
	FILE *fp = fopen(p, "rb");
	uint64_t n, m;
	char *hdr, *out, *at;
	long data_at, size;
	char *data;

	cr_assert(fp && fread(&n, 8, 1, fp) == 1);
	hdr = calloc(n + 1, 1);
	cr_assert(fread(hdr, 1, n, fp) == n);
	data_at = ftell(fp);
	fseek(fp, 0, SEEK_END);
	size = ftell(fp) - data_at;
	data = malloc((size_t)size + 1);
	fseek(fp, data_at, SEEK_SET);
	cr_assert(fread(data, 1, (size_t)size, fp) == (size_t)size);
	fclose(fp);
	at = strstr(hdr, "\"n_head\":\"4\"");
	cr_assert(at, "%s", hdr);
	out = calloc(n + 64, 1);
	memcpy(out, hdr, (size_t)(at - hdr));
	sprintf(out + (at - hdr), "\"n_head\":\"%s\"%s", v, at + strlen("\"n_head\":\"4\""));
	m = strlen(out);
	fp = fopen(p, "wb");
	fwrite(&m, 8, 1, fp);
	fwrite(out, 1, m, fp);
	fwrite(data, 1, (size_t)size, fp);
	fclose(fp);
	free(hdr);
	free(out);
	free(data);
}

Test(safetensors, n_head_metadata_is_range_checked_into_int)
{
	static const char *const bad[] = { "4294967297", "-4", "0", "4x", "", " 4", "+4",
					   "99999999999999999999" };
	struct zn_gpt2_host *a = model(5);
	const char *p = path_of("nh.safetensors");
	struct zn_gpt2_config c;
	struct zn_st_file *f;
	int64_t v = 0;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		save(a, p, ZN_DTYPE_F32);
		set_n_head(p, bad[i]);
		c = (struct zn_gpt2_config){ 0 };
		/* the old reader took "4294967297" as 1 head (atoi) */
		cr_expect_neq(zn_gpt2_config_from_safetensors(p, &c), 0, "n_head '%s'", bad[i]);
		cr_assert_eq(zn_st_open(&f, p), 0);
		cr_expect_eq(zn_st_metadata_int(f, "n_head", 1, 2147483647, &v), -EINVAL, "'%s'",
			     bad[i]);
		zn_st_close(f);
	}
	save(a, p, ZN_DTYPE_F32);
	cr_assert_eq(zn_st_open(&f, p), 0);
	cr_expect_eq(zn_st_metadata_int(f, "n_head", 1, 2147483647, &v), 0);
	cr_expect_eq(v, 4);
	cr_expect_eq(zn_st_metadata_int(f, "n_kv_head", 1, 100, &v), -ENOENT);
	zn_st_close(f);
	zn_gpt2_host_destroy(a);
}

Test(safetensors, save_never_writes_through_a_planted_symlink, .timeout = 60)
{
	float a[4] = { 1, 2, 3, 4 };
	struct zn_st_entry e = { .name = "a", .ndim = 1, .shape = { 4 }, .data_h = a };
	const char *p = path_of("model.st");
	char victim[128], tmp[160], buf[16] = { 0 };
	struct zn_st_file *f;
	struct stat st;
	int fd;

	/* the temporary name the old writer used, as a link to a file zinc must not touch */
	snprintf(victim, sizeof(victim), "%s", path_of("victim"));
	fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert(fd >= 0 && write(fd, "secret", 6) == 6);
	close(fd);
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", p, (long)getpid());
	cr_assert_eq(symlink(victim, tmp), 0);
	cr_assert_eq(zn_st_write(p, ZN_DTYPE_F32, &e, 1, NULL, NULL, 0), 0);
	fd = open(victim, O_RDONLY);
	cr_assert(fd >= 0 && read(fd, buf, sizeof(buf) - 1) == 6);
	close(fd);
	cr_expect_str_eq(buf, "secret", "the link's target is untouched");
	cr_assert_eq(lstat(p, &st), 0);
	cr_expect(S_ISREG(st.st_mode), "the checkpoint is a regular file, not the link");
	cr_assert_eq(zn_st_open(&f, p), 0);
	zn_st_close(f);

	/* a symlink, FIFO or directory at the destination is refused and left alone */
	unlink(p);
	cr_assert_eq(symlink(victim, p), 0);
	cr_expect_neq(zn_st_write(p, ZN_DTYPE_F32, &e, 1, NULL, NULL, 0), 0);
	cr_assert_eq(lstat(p, &st), 0);
	cr_expect(S_ISLNK(st.st_mode));
	unlink(p);
	cr_assert_eq(mkfifo(p, 0600), 0);
	cr_expect_neq(zn_st_write(p, ZN_DTYPE_F32, &e, 1, NULL, NULL, 0), 0);
	/* and as an input: refused at once, not waited on */
	cr_expect_eq(zn_st_open(&f, p), -EINVAL);
	cr_expect_eq(zn_st_open(&f, dir), -EISDIR);
	unlink(p);

	/* an existing checkpoint keeps its mode */
	cr_assert_eq(zn_st_write(p, ZN_DTYPE_F32, &e, 1, NULL, NULL, 0), 0);
	cr_assert_eq(chmod(p, 0600), 0);
	cr_assert_eq(zn_st_write(p, ZN_DTYPE_BF16, &e, 1, NULL, NULL, 0), 0);
	cr_assert_eq(stat(p, &st), 0);
	cr_expect_eq(st.st_mode & 07777, 0600);
}
