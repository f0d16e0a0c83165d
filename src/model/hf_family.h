/* Helpers a family's config.json and layout hooks (model/family.h) are written with:
 * reading keys with their checks (the error names the file and the key), writing keys as
 * transformers writes them, and emitting the tensors of the checkpoint layout.
 *
 *     int64_t n;
 *     int rc = zn_hf_key_int(c, "num_hidden_layers", NULL, true, 0, 1, 100000, &n);
 *     zn_hf_emit(e, 1, 2, V, H, "model.embed_tokens.weight");
 */
#ifndef ZN_MODEL_HF_FAMILY_H
#define ZN_MODEL_HF_FAMILY_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "model/hf_config.h"
#include "model/hf_json.h"

#define ZN_HF_MAX_DIM (1ll << 24)
#define ZN_HF_MAX_INT 0x7fffffffll

/* The object being read: path names the file in errors, prefix ("" or "rope_scaling.")
 * the enclosing key. */
struct zn_hf_keys {
	const char *path;
	const cJSON *obj;
	const char *prefix;
};

/* key, else alias; JSON null counts as absent. NULL when absent. */
const cJSON *zn_hf_key(const struct zn_hf_keys *c, const char *key, const char *alias);
/* "key is missing" (logged); returns -EINVAL */
int zn_hf_key_missing(const struct zn_hf_keys *c, const char *key);
/* An integer in [lo, hi]; absent: def, or an error when required. 0 or -EINVAL. */
int zn_hf_key_int(const struct zn_hf_keys *c, const char *key, const char *alias,
		  bool required, int64_t def, int64_t lo, int64_t hi, int64_t *out);
/* A number in (lo, hi]. */
int zn_hf_key_num(const struct zn_hf_keys *c, const char *key, const char *alias,
		  bool required, double def, double lo, double hi, double *out);
int zn_hf_key_bool(const struct zn_hf_keys *c, const char *key, bool def, bool *out);
/* A string that must be one of allowed[0 .. n) when present (*out: it, or NULL). */
int zn_hf_key_str(const struct zn_hf_keys *c, const char *key, const char *const *allowed,
		  int n, const char **out);
/* rope_theta and rope_scaling (null, "default" or "llama3"), or transformers 5's
 * rope_parameters */
int zn_hf_key_rope(const struct zn_hf_keys *c, struct zn_hf_config *cfg);
/* num_attention_heads, num_key_value_heads (default: the heads; a divisor of them) and
 * head_dim (absent: head_dim when not 0, else hidden_size / heads, which must then
 * divide); needs hidden_size */
int zn_hf_key_heads(const struct zn_hf_keys *c, struct zn_hf_config *cfg, int64_t head_dim);

/* Writing: key set to v, replacing any value; v NULL (out of memory) fails (-1). */
int zn_hf_set(cJSON *o, const char *key, cJSON *v);
int zn_hf_set_int(cJSON *o, const char *key, int64_t v);
/* rope_theta and rope_scaling, or rope_parameters when o (the base) has it */
int zn_hf_set_rope(cJSON *o, const struct zn_hf_config *c);

/* The layout being emitted (hf_layout.c counts or fills it). */
struct zn_hf_emit;
/* Appends one tensor: layer (0 embeddings, 1..L blocks, L + 1 the final layer), ndim 1 or
 * 2, its shape, its name from fmt. */
void zn_hf_emit(struct zn_hf_emit *e, int layer, int ndim, int64_t d0, int64_t d1,
		const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif
