/* The JSON reader's internals, shared by json.c (values, objects, arrays) and json_str.c
 * (strings). Everyone else uses core/json.h. */
#ifndef ZN_CORE_JSON_IMPL_H
#define ZN_CORE_JSON_IMPL_H

#include <stdbool.h>

#include "core/json.h"

typedef const unsigned char *zn_json_pos;

struct zn_json_parser {
	zn_json_pos text, p, end;
	const struct zn_json_opts *o;
	int depth;
	int rc;           /* the first error; later ones are not logged */
	unsigned dups;    /* repeated keys taken as Python does */
	char dup_key[80]; /* the first one, for the warning */
	zn_json_pos dup_at;
};

/* Logs "origin:line:col: message" for at (only the first error) and sets P->rc = -EINVAL;
 * returns NULL. */
cJSON *zn_json_fail(struct zn_json_parser *P, zn_json_pos at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Logs out of memory once and sets P->rc = -ENOMEM; returns NULL. */
cJSON *zn_json_oom(struct zn_json_parser *P);
/* "'x'", "a NUL byte", "byte 0x80" or "the end of the text", for messages */
const char *zn_json_describe(const struct zn_json_parser *P, zn_json_pos at, char *buf,
			     size_t n);
/* Decodes the string at P->p (its opening quote) into a cJSON_malloc'd buffer, P->p moved
 * past it; *len its bytes (\u0000 included). NULL when refused (logged). */
char *zn_json_parse_string(struct zn_json_parser *P, bool key, size_t *len);

#endif
