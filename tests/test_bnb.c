/* bitsandbytes 4-bit checkpoints (src/model/quant/bnb_*.c, docs/qlora.md): a checkpoint
 * zn_bnb_save writes loads back bit for bit (layout and extent), its quant_state entry is
 * json.dumps' text, and a checkpoint whose packed size, quant_map or quant_state JSON is
 * wrong, or whose config asks for what zinc does not implement, is refused naming the
 * tensor or key. The files are written here, tensor by tensor. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dtype.h"
#include "model/quant/bnb.h"

#define W "model.layers.0.mlp.down_proj.weight"
#define NORM "model.layers.0.post_attention_layernorm.weight"
#define OUT 64
#define IN 128

static const char config[] =
	"{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
	"\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 2, "
	"\"num_key_value_heads\": 2, \"num_hidden_layers\": 1, \"vocab_size\": 32, "
	"\"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-05, "
	"\"tie_word_embeddings\": false}";

/* one layer: a norm (plain) and a linear weight [64, 128]; its tensors in the test's
 * static storage (one layer described at a time) */
static void desc(struct zn_layer_desc *d)
{
	static struct zn_tensor_desc t[2];

	memset(d, 0, sizeof(*d));
	memset(t, 0, sizeof(t));
	d->tensors = t;
	d->tensor_count = 2;
	d->tied_layer = -1;
	snprintf(d->tensors[0].name, sizeof(d->tensors[0].name), "%s", NORM);
	d->tensors[0].ndim = 1;
	d->tensors[0].shape[0] = d->tensors[0].file_shape[0] = OUT;
	d->tensors[0].numel = OUT;
	snprintf(d->tensors[1].name, sizeof(d->tensors[1].name), "%s", W);
	d->tensors[1].ndim = 2;
	d->tensors[1].shape[0] = d->tensors[1].file_shape[0] = OUT;
	d->tensors[1].shape[1] = d->tensors[1].file_shape[1] = IN;
	d->tensors[1].offset = OUT;
	d->tensors[1].numel = OUT * IN;
	d->numel = OUT + OUT * IN;
	d->frozen_numel = d->numel;
}

static void weights(float *x, uint64_t n)
{
	uint64_t s = 3;

	for (uint64_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = (float)((double)(s >> 11) * 0x1.0p-53 - 0.5) * 0.1f;
	}
}

struct src {
	const struct zn_q4_layer *q;
	const void *x;
};

static int extent(void *ctx, int l, void *buf)
{
	const struct src *s = ctx;

	(void)l;
	memcpy(buf, s->x, s->q->bytes);
	return 0;
}

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn-bnb-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void rm_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

/* a 1-layer checkpoint of the layout (bf16 plain part, NF4, nested or not) written by
 * zn_bnb_save; *q and *x (malloc'd) what was written */
static void save(bool nested, struct zn_q4_layer *q, uint8_t **x)
{
	struct zn_layer_desc d;
	float f[OUT + OUT * IN];
	struct src s;

	desc(&d);
	weights(f, d.numel);
	cr_assert_eq(zn_q4_layout(q, &d, d.numel, ZN_DTYPE_BF16, nested, NULL), 0);
	cr_assert_eq(q->count, 1, "the norm is not linear, the weight is");
	*x = calloc(1, q->bytes);
	cr_assert_eq(zn_q4_pack(q, *x, f, ZN_DTYPE_BF16), 0);
	s = (struct src){ q, *x };
	cr_assert_eq(zn_bnb_save(dir, config, ZN_DTYPE_BF16, &d, q, 1, extent, &s), 0);
}

static int load(struct zn_q4_layer *q, uint8_t **x)
{
	struct zn_layer_desc d;
	struct zn_hf_src *s;
	int rc;

	desc(&d);
	*x = NULL;
	rc = zn_hf_open(&s, dir);
	if (rc)
		return rc;
	rc = zn_bnb_layout(s, &d, d.numel, ZN_DTYPE_BF16, q);
	if (!rc) {
		*x = calloc(1, q->bytes);
		rc = zn_bnb_read_layer(s, &d, q, ZN_DTYPE_BF16, *x);
	}
	zn_hf_close(s);
	return rc;
}

static void round_trip(bool nested)
{
	struct zn_q4_layer q, back;
	struct zn_bnb_config c;
	uint8_t *x, *y;
	char *text = NULL, path[128];
	size_t len;
	FILE *f;

	make_dir();
	save(nested, &q, &x);
	cr_assert_eq(load(&back, &y), 0);
	cr_assert_eq(memcmp(&q, &back, sizeof(q)), 0, "the layout read back differs");
	cr_assert_eq(memcmp(x, y, q.bytes), 0, "the extent read back differs");
	snprintf(path, sizeof(path), "%s/config.json", dir);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	text = calloc(1, 8192);
	len = fread(text, 1, 8191, f);
	fclose(f);
	cr_assert_gt(len, 0);
	cr_assert_eq(zn_bnb_config_parse(text, path, &c), 0);
	cr_assert(c.present && c.type == ZN_Q4_NF4 && c.double_quant == nested);
	free(text);
	free(x);
	free(y);
	rm_dir();
}

Test(bnb, written_checkpoint_loads_back_bit_for_bit) { round_trip(false); }
Test(bnb, written_checkpoint_loads_back_bit_for_bit_double_quant) { round_trip(true); }

Test(bnb, float_repr_is_pythons)
{
	char b[48];

	zn_bnb_float_repr(b, sizeof(b), 0.1f);
	cr_assert_str_eq(b, "0.10000000149011612");
	zn_bnb_float_repr(b, sizeof(b), 1.0f);
	cr_assert_str_eq(b, "1.0");
	zn_bnb_float_repr(b, sizeof(b), 6e-05f);
	cr_assert_str_eq(b, "5.999999848427251e-05");
	zn_bnb_float_repr(b, sizeof(b), 0.5f);
	cr_assert_str_eq(b, "0.5");
}

/* ---- refusals: the written file with one tensor replaced ------------------------------ */

struct ent {
	char name[ZN_ST_NAME_MAX];
	char dtype[8];
	int ndim;
	int64_t shape[2];
	void *data;
	uint64_t bytes;
};

/* every tensor of dir/model.safetensors, as stored */
static int read_all(struct ent *e)
{
	char path[128];
	struct zn_st_file *f;
	int n;

	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	cr_assert_eq(zn_st_open(&f, path), 0);
	n = zn_st_tensor_count(f);
	for (int i = 0; i < n; i++) {
		const struct zn_st_tensor *t = zn_st_tensor_at(f, i);

		snprintf(e[i].name, sizeof(e[i].name), "%s", t->name);
		snprintf(e[i].dtype, sizeof(e[i].dtype), "%s", t->dtype_name);
		e[i].ndim = t->ndim;
		e[i].shape[0] = t->shape[0];
		e[i].shape[1] = t->ndim > 1 ? t->shape[1] : 0;
		e[i].bytes = t->end - t->begin;
		e[i].data = malloc(e[i].bytes + 1);
		cr_assert_eq(zn_st_read_raw(f, t, e[i].data), 0);
	}
	zn_st_close(f);
	return n;
}

static void write_all(const struct ent *e, int n)
{
	char path[128], *h = calloc(1, 65536);
	uint64_t off = 0, len;
	size_t at = 0;
	FILE *f;

	at += (size_t)sprintf(h + at, "{");
	for (int i = 0; i < n; i++) {
		at += (size_t)sprintf(h + at, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
				      e[i].name, e[i].dtype);
		if (e[i].ndim == 2)
			at += (size_t)sprintf(h + at, "%lld,%lld", (long long)e[i].shape[0],
					      (long long)e[i].shape[1]);
		else
			at += (size_t)sprintf(h + at, "%lld", (long long)e[i].shape[0]);
		at += (size_t)sprintf(h + at, "],\"data_offsets\":[%llu,%llu]}",
				      (unsigned long long)off,
				      (unsigned long long)(off + e[i].bytes));
		off += e[i].bytes;
	}
	at += (size_t)sprintf(h + at, "}");
	while (at % 8)
		h[at++] = ' ';
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	f = fopen(path, "wb");
	len = at;
	fwrite(&len, 8, 1, f);
	fwrite(h, 1, at, f);
	for (int i = 0; i < n; i++)
		fwrite(e[i].data, 1, e[i].bytes, f);
	fclose(f);
	free(h);
}

static struct ent *find_ent(struct ent *e, int n, const char *suffix)
{
	char name[200];

	snprintf(name, sizeof(name), "%s%s", W, suffix);
	for (int i = 0; i < n; i++)
		if (!strcmp(e[i].name, name))
			return &e[i];
	cr_assert_fail("no %s", name);
	return NULL;
}

/* writes the checkpoint, applies edit to its tensors, and expects the load refused with a
 * line naming the weight and holding want */
static void refused(bool nested, void (*edit)(struct ent *e, int *n), const char *want)
{
	struct zn_q4_layer q;
	struct ent e[16];
	uint8_t *x;
	int n;
	char buf[4096] = { 0 };
	FILE *err;

	make_dir();
	save(nested, &q, &x);
	free(x);
	n = read_all(e);
	edit(e, &n);
	write_all(e, n);
	cr_assert_neq(load(&q, &x), 0);
	free(x);
	fflush(stderr);
	err = cr_get_redirected_stderr();
	cr_assert_not_null(err);
	fread(buf, 1, sizeof(buf) - 1, err);
	cr_assert(strstr(buf, W), "the error does not name the weight: %s", buf);
	cr_assert(strstr(buf, want), "the error does not say '%s': %s", want, buf);
	for (int i = 0; i < n; i++)
		free(e[i].data);
	rm_dir();
}

static void short_packed(struct ent *e, int *n)
{
	struct ent *w = find_ent(e, *n, "");

	w->shape[0] -= 32;
	w->bytes -= 32;
}

static void bad_map(struct ent *e, int *n)
{
	float *m = find_ent(e, *n, ".quant_map")->data;

	m[3] += 1e-3f;
}

static void set_state(struct ent *e, int n, const char *json)
{
	struct ent *s = find_ent(e, n, ".quant_state.bitsandbytes__nf4");

	free(s->data);
	s->data = strdup(json);
	s->bytes = strlen(json);
	s->shape[0] = (int64_t)s->bytes;
}

static void unknown_key(struct ent *e, int *n)
{
	set_state(e, *n, "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", "
		  "\"shape\": [64, 128], \"packing\": 2}");
}

static void wrong_shape(struct ent *e, int *n)
{
	set_state(e, *n, "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", "
		  "\"shape\": [128, 64]}");
}

static void not_json(struct ent *e, int *n)
{
	set_state(e, *n, "{\"quant_type\": \"nf4\", ");
}

static void type_mismatch(struct ent *e, int *n)
{
	set_state(e, *n, "{\"quant_type\": \"fp4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", "
		  "\"shape\": [64, 128]}");
}

static void odd_block(struct ent *e, int *n)
{
	set_state(e, *n, "{\"quant_type\": \"nf4\", \"blocksize\": 48, \"dtype\": \"bfloat16\", "
		  "\"shape\": [64, 128]}");
}

static void no_nested_offset(struct ent *e, int *n)
{
	set_state(e, *n, "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", "
		  "\"shape\": [64, 128], \"nested_blocksize\": 256, \"nested_dtype\": "
		  "\"float32\"}");
}

static void no_absmax(struct ent *e, int *n)
{
	struct ent *a = find_ent(e, *n, ".absmax");

	free(a->data);
	*a = e[--*n];
}

Test(bnb, packed_size_refused, .init = cr_redirect_stderr)
{
	refused(false, short_packed, "packed weight");
}

Test(bnb, quant_map_refused, .init = cr_redirect_stderr)
{
	refused(false, bad_map, "quant_map");
}

Test(bnb, quant_state_unknown_key_refused, .init = cr_redirect_stderr)
{
	refused(false, unknown_key, "'packing'");
}

Test(bnb, quant_state_shape_refused, .init = cr_redirect_stderr)
{
	refused(false, wrong_shape, "shape");
}

Test(bnb, quant_state_not_json_refused, .init = cr_redirect_stderr)
{
	refused(false, not_json, "not JSON");
}

Test(bnb, quant_state_type_refused, .init = cr_redirect_stderr)
{
	refused(false, type_mismatch, "quant_type");
}

Test(bnb, quant_state_block_refused, .init = cr_redirect_stderr)
{
	refused(false, odd_block, "power of 2");
}

Test(bnb, nested_without_offset_refused, .init = cr_redirect_stderr)
{
	refused(true, no_nested_offset, "nested_offset");
}

Test(bnb, missing_absmax_refused, .init = cr_redirect_stderr)
{
	refused(false, no_absmax, "missing");
}

Test(bnb, config_refusals, .init = cr_redirect_stderr)
{
	struct zn_bnb_config c;

	cr_assert_eq(zn_bnb_config_parse(config, "c.json", &c), 0);
	cr_assert(!c.present);
	cr_assert_eq(zn_bnb_config_parse("{\"quantization_config\": {\"quant_method\": "
					 "\"bitsandbytes\", \"load_in_8bit\": true, "
					 "\"load_in_4bit\": false}}", "c.json", &c), -EINVAL);
	cr_assert_eq(zn_bnb_config_parse("{\"quantization_config\": {\"quant_method\": "
					 "\"gptq\", \"load_in_4bit\": true}}", "c.json", &c),
		     -EINVAL);
	cr_assert_eq(zn_bnb_config_parse("{\"quantization_config\": {\"quant_method\": "
					 "\"bitsandbytes\", \"load_in_4bit\": true, "
					 "\"bnb_4bit_quant_storage\": \"bfloat16\"}}", "c.json", &c),
		     -EINVAL);
	cr_assert_eq(zn_bnb_config_parse("{\"quantization_config\": {\"quant_method\": "
					 "\"bitsandbytes\", \"load_in_4bit\": true, "
					 "\"bnb_4bit_quant_type\": \"fp4\", \"sparsity\": 0.5}}",
					 "c.json", &c), -EINVAL);
	cr_assert_eq(zn_bnb_config_parse("{\"quantization_config\": {\"quant_method\": "
					 "\"bitsandbytes\", \"load_in_4bit\": true, "
					 "\"bnb_4bit_quant_type\": \"fp4\", "
					 "\"bnb_4bit_use_double_quant\": true}}", "c.json", &c), 0);
	cr_assert(c.present && c.type == ZN_Q4_FP4 && c.double_quant);
}
