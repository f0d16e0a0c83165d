/* Fuzz target: a safetensors file (zn_st_open, src/model/safetensors_read.c). An accepted
 * file's tensors must lie inside the data, be found by name and read as floats when their
 * dtype converts; then the GPT-2 shape is derived from it (zn_gpt2_config_from_safetensors)
 * and, when small, the weights loaded (zn_gpt2_load_safetensors); heads must be the
 * n_head metadata exactly. */
#include <stdlib.h>
#include <string.h>

#include "model/gpt2/gpt2.h"
#include "model/safetensors.h"
#include "fuzz.h"

#define MAX_LOAD_FLOATS (1u << 20)

static void load_gpt2(const char *path, const char *n_head)
{
	struct zn_gpt2_config g = { 0 };
	struct zn_layer_desc *layers = NULL;
	float **bufs = NULL;
	uint64_t total = 0;
	int count;

	if (zn_gpt2_config_from_safetensors(path, &g) || zn_gpt2_config_validate(&g))
		return;
	if (n_head) { /* the metadata's decimal number exactly: no truncation, no prefix */
		ZN_FUZZ_CHECK(n_head[0] && strspn(n_head, "0123456789") == strlen(n_head));
		ZN_FUZZ_CHECK(strtoull(n_head, NULL, 10) == (unsigned long long)g.heads);
	}
	ZN_FUZZ_CHECK(g.layers > 0 && g.heads > 0 && g.d_model % g.heads == 0);
	ZN_FUZZ_CHECK(g.vocab > 0 && g.padded_vocab >= g.vocab && g.seq > 0);
	count = zn_gpt2_layer_count(&g);
	ZN_FUZZ_CHECK(count == g.layers + 2);
	layers = calloc((size_t)count, sizeof(*layers));
	bufs = calloc((size_t)count, sizeof(*bufs));
	ZN_FUZZ_CHECK(layers && bufs);
	if (zn_gpt2_layers(&g, layers))
		goto out;
	for (int l = 0; l < count; l++)
		total += layers[l].numel;
	if (total > MAX_LOAD_FLOATS)
		goto out;
	for (int l = 0; l < count; l++) {
		bufs[l] = malloc(layers[l].numel * sizeof(float) + 1);
		ZN_FUZZ_CHECK(bufs[l] != NULL);
	}
	zn_gpt2_load_safetensors(&g, layers, bufs, path);
out:
	for (int l = 0; l < count; l++)
		free(bufs[l]);
	free(bufs);
	zn_layer_descs_free(layers, count);
}

int zn_fuzz_one(const uint8_t *data, size_t n)
{
	const char *path = zn_fuzz_file(data, n);
	struct zn_st_file *f;
	const char *meta;
	char *n_head;
	int count;

	if (zn_st_open(&f, path))
		return 0;
	ZN_FUZZ_CHECK(n >= 8);
	count = zn_st_tensor_count(f);
	ZN_FUZZ_CHECK(count >= 0 && zn_st_tensor_at(f, count) == NULL);
	for (int i = 0; i < count; i++) {
		const struct zn_st_tensor *t = zn_st_tensor_at(f, i);
		uint64_t numel = 1;

		ZN_FUZZ_CHECK(t != NULL && zn_st_find(f, t->name) == t);
		ZN_FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ZN_ST_MAX_DIMS);
		for (int d = 0; d < t->ndim; d++)
			numel *= (uint64_t)t->shape[d];
		ZN_FUZZ_CHECK(numel == t->numel);
		ZN_FUZZ_CHECK(t->begin <= t->end && t->end <= n - 8);
		ZN_FUZZ_CHECK(t->numel * (uint64_t)t->elem_bytes == t->end - t->begin);
		if (t->dtype >= 0) {
			float *out = malloc(t->numel * sizeof(float) + 1);

			ZN_FUZZ_CHECK(out != NULL);
			ZN_FUZZ_CHECK(zn_st_read_f32(f, t, out) == 0);
			free(out);
		}
	}
	meta = zn_st_metadata(f, "n_head");
	n_head = meta ? strdup(meta) : NULL;
	zn_st_close(f);
	load_gpt2(path, n_head);
	free(n_head);
	return 1;
}
