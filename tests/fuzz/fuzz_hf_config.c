/* Fuzz target: a Hugging Face config.json (zn_hf_config_load, src/model/hf_config.c). An
 * accepted config must have positive sizes, a layout whose shapes are positive and whose
 * sizes add up to zn_hf_param_count, and print (zn_hf_config_to_json) as a config.json
 * that parses back to the same model. */
#include <stdlib.h>
#include <string.h>

#include "model/family.h"
#include "model/hf_config.h"
#include "fuzz.h"

#define MAX_LAYOUT 4096

static void check_layout(const struct zn_hf_config *c)
{
	int count = zn_hf_layout_count(c);
	struct zn_hf_tensor_spec *specs;
	uint64_t total = 0;

	ZN_FUZZ_CHECK(count > 0);
	if (count > MAX_LAYOUT)
		return;
	specs = calloc((size_t)count, sizeof(*specs));
	ZN_FUZZ_CHECK(specs != NULL);
	zn_hf_layout(c, specs);
	for (int i = 0; i < count; i++) {
		const struct zn_hf_tensor_spec *s = &specs[i];
		uint64_t numel = 1;

		ZN_FUZZ_CHECK(s->name[0] && memchr(s->name, 0, sizeof(s->name)) != NULL);
		ZN_FUZZ_CHECK(s->ndim == 1 || s->ndim == 2);
		for (int d = 0; d < s->ndim; d++) {
			ZN_FUZZ_CHECK(s->shape[d] > 0);
			numel *= (uint64_t)s->shape[d];
		}
		ZN_FUZZ_CHECK(s->layer >= 0 && s->layer <= c->num_hidden_layers + 1);
		total += numel;
	}
	ZN_FUZZ_CHECK(total == zn_hf_param_count(c));
	free(specs);
}

int zn_fuzz_one(const uint8_t *data, size_t n)
{
	const char *path = zn_fuzz_file(data, n);
	struct zn_hf_config c, again;
	char *json;

	memset(&c, 0, sizeof(c));
	if (zn_hf_config_load(path, &c))
		return 0;
	ZN_FUZZ_CHECK(c.family != NULL && c.type >= 0 && c.type < c.family->type_count);
	ZN_FUZZ_CHECK(c.hidden_size > 0 && c.intermediate_size > 0 && c.num_hidden_layers > 0);
	ZN_FUZZ_CHECK(c.num_attention_heads > 0 && c.num_key_value_heads > 0 && c.head_dim > 0);
	ZN_FUZZ_CHECK(c.num_attention_heads % c.num_key_value_heads == 0);
	ZN_FUZZ_CHECK(c.vocab_size > 0 && c.max_position_embeddings > 0);
	ZN_FUZZ_CHECK(memchr(c.torch_dtype, 0, sizeof(c.torch_dtype)) != NULL);
	check_layout(&c);
	json = zn_hf_config_to_json(&c, NULL);
	ZN_FUZZ_CHECK(json != NULL);
	memset(&again, 0, sizeof(again));
	ZN_FUZZ_CHECK(zn_hf_config_parse(json, "printed config.json", &again) == 0);
	ZN_FUZZ_CHECK(again.family == c.family && again.type == c.type && again.hidden_size == c.hidden_size &&
		      again.intermediate_size == c.intermediate_size &&
		      again.num_hidden_layers == c.num_hidden_layers &&
		      again.num_attention_heads == c.num_attention_heads &&
		      again.num_key_value_heads == c.num_key_value_heads &&
		      again.head_dim == c.head_dim && again.vocab_size == c.vocab_size &&
		      again.max_position_embeddings == c.max_position_embeddings &&
		      again.tie_word_embeddings == c.tie_word_embeddings &&
		      again.attention_bias == c.attention_bias);
	free(json);
	return 1;
}
