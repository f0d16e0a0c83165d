/* JSON text -> cJSON tree, read the way Python's json module reads it. Every JSON file zinc
 * reads goes through here: the DeepSpeed config, config.json, model.safetensors.index.json,
 * adapter_config.json, tokenizer.json, tokenizer_config.json, safetensors headers and JSONL
 * lines. cJSON's own parser is not used: it keeps the first of two equal keys where Python
 * keeps the last, ends a string at \u0000 and takes a NUL byte as the end of the text.
 *
 * The rules (docs/config.md, "The JSON reader"):
 * - RFC 8259, strictly: white space is space, tab, CR and LF; nothing but white space after
 *   the value; no leading zeros, no NaN or Infinity; a control character (U+0000..U+001F)
 *   in a string must be escaped; nesting at most ZN_JSON_MAX_DEPTH.
 * - The text is UTF-8: an invalid sequence, an overlong form, a surrogate (also a \uD800
 *   escape without its pair) and a byte-order mark are refused.
 * - A key repeated in one object: its last value, in the first one's place, as Python's
 *   dict does (opts->dup may refuse instead, naming the key).
 * - \u0000 in a string value is refused unless the reader sets ZN_JSON_NUL_OK and reads its
 *   strings with zn_json_string, which gives the length. A key never holds \u0000.
 * - A number keeps its literal text: zn_json_int reads integers exactly from it (Python's
 *   int), and tells 5 from 5.0. valuedouble is strtod's value (inf past a double's range,
 *   as Python's float).
 *
 * Errors: one line "origin:line:col: what is wrong", then -EINVAL (-ENOMEM when out of
 * memory). The tree is freed with cJSON_Delete.
 *
 *     struct zn_json_opts o = { .origin = path };
 *     cJSON *root;
 *     if (zn_json_parse(text, len, &o, &root))
 *             return -EINVAL;   // logged
 *     ...
 *     cJSON_Delete(root);
 */
#ifndef ZN_CORE_JSON_H
#define ZN_CORE_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#define ZN_JSON_MAX_DEPTH 256

enum zn_json_flag {
	ZN_JSON_NUL_OK = 1,    /* string values may hold \u0000 (read them with zn_json_string) */
	ZN_JSON_QUIET_DUP = 2, /* no warning for a repeated key (JSONL lines: Python is silent) */
};

struct zn_json_opts {
	const char *origin; /* the file, for messages */
	uint64_t line;      /* the text's first line in origin (JSONL: the line); 0 counts as 1 */
	unsigned flags;     /* enum zn_json_flag */
	/* A key repeated in one object: return NULL to keep the last value (Python's rule, and
	 * the rule when dup is NULL), or the reason to refuse it. depth 1 is the top-level
	 * object; parent is the key of the object holding key (NULL at the top level). */
	const char *(*dup)(void *arg, int depth, const char *parent, const char *key);
	void *dup_arg;
};

/* Parses text[0 .. len) (NUL bytes in it are refused, not taken as its end). */
int zn_json_parse(const char *text, size_t len, const struct zn_json_opts *opts, cJSON **out);

/* Reads path (a regular file of at most max_bytes; what names it in messages, e.g.
 * "--config") and parses it; opts->origin NULL means path. */
int zn_json_load(const char *path, const char *what, size_t max_bytes,
		 const struct zn_json_opts *opts, cJSON **out);

/* A string value's bytes (NUL-terminated, possibly holding NULs) and *len, or NULL when v
 * is not a string. */
const char *zn_json_string(const cJSON *v, size_t *len);

/* v is a number written as an integer (no fraction, no exponent: Python's int) in
 * [lo, hi]: 0 and *out. -EDOM when v is not a number or is written as a float (5.0, 1e3),
 * -ERANGE when it is outside [lo, hi]. Nothing is logged. */
int zn_json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out);

#endif
