/* The JSON reader (json.h): a recursive-descent parser that builds cJSON trees by Python's
 * json rules. Strings (escapes, UTF-8) are decoded in json_str.c; loading a file and
 * reading strings and integers back are in json_read.c. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_impl.h"
#include "core/log.h"

#define SMALL_OBJECT 8 /* members found by a scan; a larger object gets a hash table */

/* the keys of one object, for repeated keys: a scan while small, then open addressing */
struct keyset {
	cJSON **slot;
	size_t cap, n;
};

static cJSON *parse_value(struct zn_json_parser *P, const char *parent);

static const char *origin(const struct zn_json_parser *P)
{
	return P->o->origin ? P->o->origin : "JSON";
}

/* 1-based line and byte column of at */
static void position(const struct zn_json_parser *P, zn_json_pos at, unsigned long long *line,
		     unsigned long long *col)
{
	zn_json_pos bol = P->text;

	*line = P->o->line ? P->o->line : 1;
	for (zn_json_pos q = P->text; q < at; q++) {
		if (*q == '\n') {
			++*line;
			bol = q + 1;
		}
	}
	*col = (unsigned long long)(at - bol) + 1;
}

cJSON *zn_json_fail(struct zn_json_parser *P, zn_json_pos at, const char *fmt, ...)
{
	unsigned long long line, col;
	char msg[320];
	va_list ap;

	if (P->rc)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	position(P, at, &line, &col);
	zn_error("%s:%llu:%llu: %s", origin(P), line, col, msg);
	P->rc = -EINVAL;
	return NULL;
}

cJSON *zn_json_oom(struct zn_json_parser *P)
{
	if (!P->rc)
		zn_error("%s: out of memory reading the JSON", origin(P));
	P->rc = -ENOMEM;
	return NULL;
}

const char *zn_json_describe(const struct zn_json_parser *P, zn_json_pos at, char *buf, size_t n)
{
	if (at >= P->end)
		return "the end of the text";
	if (!*at)
		return "a NUL byte";
	if (*at > 0x20 && *at < 0x7f)
		snprintf(buf, n, "'%c'", *at);
	else
		snprintf(buf, n, "byte 0x%02x", *at);
	return buf;
}

static void skip_ws(struct zn_json_parser *P)
{
	while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r'))
		P->p++;
}

static bool is_digit(zn_json_pos q, zn_json_pos end)
{
	return q < end && *q >= '0' && *q <= '9';
}

static cJSON *parse_string_value(struct zn_json_parser *P)
{
	size_t len;
	char *s = zn_json_parse_string(P, false, &len);
	cJSON *v;

	if (!s)
		return NULL;
	v = cJSON_CreateNull();
	if (!v) {
		cJSON_free(s);
		return zn_json_oom(P);
	}
	v->type = cJSON_String;
	v->valuestring = s;
	v->valuedouble = (double)len; /* the length, \u0000 included (zn_json_string) */
	return v;
}

static cJSON *parse_number(struct zn_json_parser *P)
{
	zn_json_pos s = P->p, q = s;
	char *lit;
	cJSON *v;

	if (*q == '-')
		q++;
	if (q < P->end && *q == 'I')
		return zn_json_fail(P, s, "Infinity is not JSON: write a number");
	if (!is_digit(q, P->end))
		return zn_json_fail(P, s, "a '-' must be followed by a digit");
	if (*q == '0' && is_digit(q + 1, P->end))
		return zn_json_fail(P, s, "a number with a leading zero: JSON does not allow it; "
				    "write it without the zero");
	while (is_digit(q, P->end))
		q++;
	if (q < P->end && *q == '.') {
		if (!is_digit(++q, P->end))
			return zn_json_fail(P, q, "a digit must follow the decimal point");
		while (is_digit(q, P->end))
			q++;
	}
	if (q < P->end && (*q == 'e' || *q == 'E')) {
		q++;
		if (q < P->end && (*q == '+' || *q == '-'))
			q++;
		if (!is_digit(q, P->end))
			return zn_json_fail(P, q, "the number's exponent has no digits");
		while (is_digit(q, P->end))
			q++;
	}
	lit = cJSON_malloc((size_t)(q - s) + 1);
	if (!lit)
		return zn_json_oom(P);
	memcpy(lit, s, (size_t)(q - s));
	lit[q - s] = 0;
	/* strtod: inf past a double's range, as Python's float() */
	v = cJSON_CreateNumber(strtod(lit, NULL));
	if (!v) {
		cJSON_free(lit);
		return zn_json_oom(P);
	}
	v->valuestring = lit; /* the literal, for zn_json_int */
	P->p = q;
	return v;
}

static cJSON *parse_literal(struct zn_json_parser *P)
{
	static const char *const words[] = { "true", "false", "null" };
	static const int types[] = { cJSON_True, cJSON_False, cJSON_NULL };
	char buf[16];

	for (int i = 0; i < 3; i++) {
		size_t n = strlen(words[i]);
		cJSON *v;

		if ((size_t)(P->end - P->p) < n || memcmp(P->p, words[i], n))
			continue;
		v = cJSON_CreateNull();
		if (!v)
			return zn_json_oom(P);
		v->type = types[i];
		P->p += n;
		return v;
	}
	if (*P->p == 'N' || *P->p == 'I')
		return zn_json_fail(P, P->p, "NaN and Infinity are not JSON: write a number");
	if (*P->p == ']' || *P->p == '}')
		return zn_json_fail(P, P->p, "'%c' where a value should be (a comma too many "
				    "before it?)", *P->p);
	return zn_json_fail(P, P->p, "%s where a value should be",
			    zn_json_describe(P, P->p, buf, sizeof(buf)));
}

static uint64_t hash_key(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

static void keyset_insert(struct keyset *ks, cJSON *item)
{
	size_t i = hash_key(item->string) & (ks->cap - 1);

	while (ks->slot[i])
		i = (i + 1) & (ks->cap - 1);
	ks->slot[i] = item;
}

static cJSON *keyset_find(const struct keyset *ks, const cJSON *obj, const char *key)
{
	if (!ks->slot) {
		for (cJSON *c = obj->child; c; c = c->next)
			if (!strcmp(c->string, key))
				return c;
		return NULL;
	}
	for (size_t i = hash_key(key) & (ks->cap - 1); ks->slot[i]; i = (i + 1) & (ks->cap - 1))
		if (!strcmp(ks->slot[i]->string, key))
			return ks->slot[i];
	return NULL;
}

/* item was appended to obj: keep the table at most half full */
static int keyset_add(struct keyset *ks, const cJSON *obj, cJSON *item)
{
	cJSON **old = ks->slot;
	size_t old_cap = ks->cap;

	if (++ks->n <= SMALL_OBJECT)
		return 0;
	if (old && ks->n * 2 <= ks->cap) {
		keyset_insert(ks, item);
		return 0;
	}
	ks->cap = old_cap ? old_cap * 2 : 4 * SMALL_OBJECT;
	ks->slot = calloc(ks->cap, sizeof(*ks->slot));
	if (!ks->slot) {
		ks->slot = old;
		ks->cap = old_cap;
		return -ENOMEM;
	}
	free(old);
	for (cJSON *c = obj->child; c; c = c->next)
		keyset_insert(ks, c);
	return 0;
}

/* Python's dict: the repeated key keeps its first place and takes the new value; the old
 * value goes with src. */
static void take_value(cJSON *dst, cJSON *src)
{
	cJSON old = *dst;

	dst->type = src->type;
	dst->valuestring = src->valuestring;
	dst->valueint = src->valueint;
	dst->valuedouble = src->valuedouble;
	dst->child = src->child;
	src->type = old.type;
	src->valuestring = old.valuestring;
	src->valueint = old.valueint;
	src->valuedouble = old.valuedouble;
	src->child = old.child;
}

/* One "key": value member into obj. */
static int parse_member(struct zn_json_parser *P, cJSON *obj, struct keyset *ks, const char *parent)
{
	zn_json_pos key_at = P->p;
	size_t klen;
	char *key = zn_json_parse_string(P, true, &klen), buf[16];
	const char *why;
	cJSON *v, *old;

	if (!key)
		return P->rc;
	skip_ws(P);
	if (P->p >= P->end || *P->p != ':') {
		zn_json_fail(P, P->p, "%s after the key \"%.60s\" where a ':' should be",
			     zn_json_describe(P, P->p, buf, sizeof(buf)), key);
		goto free_key;
	}
	P->p++;
	v = parse_value(P, key);
	if (!v)
		goto free_key;
	old = keyset_find(ks, obj, key);
	if (!old) {
		v->string = key;
		cJSON_AddItemToArray(obj, v);
		if (keyset_add(ks, obj, v))
			zn_json_oom(P);
		return P->rc;
	}
	why = P->o->dup ? P->o->dup(P->o->dup_arg, P->depth, parent, key) : NULL;
	if (why) {
		zn_json_fail(P, key_at, "key \"%.60s\" repeats in one object: %s", key, why);
		cJSON_Delete(v);
		goto free_key;
	}
	if (!P->dups++) {
		snprintf(P->dup_key, sizeof(P->dup_key), "%s", key);
		P->dup_at = key_at;
	}
	take_value(old, v);
	cJSON_Delete(v);
	cJSON_free(key);
	return 0;
free_key:
	cJSON_free(key);
	return P->rc;
}

static cJSON *parse_object(struct zn_json_parser *P, const char *parent)
{
	cJSON *obj = cJSON_CreateObject();
	struct keyset ks = { 0 };
	char buf[16];

	if (!obj)
		return zn_json_oom(P);
	P->p++;
	skip_ws(P);
	if (P->p < P->end && *P->p == '}') {
		P->p++;
		return obj;
	}
	for (;;) {
		skip_ws(P);
		if (P->p >= P->end || *P->p != '"') {
			bool brace = P->p < P->end && *P->p == '}';

			zn_json_fail(P, P->p, "%s where a key in double quotes should be%s",
				     zn_json_describe(P, P->p, buf, sizeof(buf)),
				     brace ? ": remove the comma before it" : "");
			break;
		}
		if (parse_member(P, obj, &ks, parent))
			break;
		skip_ws(P);
		if (P->p < P->end && *P->p == ',') {
			P->p++;
			continue;
		}
		if (P->p < P->end && *P->p == '}') {
			P->p++;
			free(ks.slot);
			return obj;
		}
		zn_json_fail(P, P->p, "%s inside an object where a ',' or '}' should be",
			     zn_json_describe(P, P->p, buf, sizeof(buf)));
		break;
	}
	free(ks.slot);
	cJSON_Delete(obj);
	return NULL;
}

static cJSON *parse_array(struct zn_json_parser *P, const char *parent)
{
	cJSON *arr = cJSON_CreateArray(), *v;
	char buf[16];

	if (!arr)
		return zn_json_oom(P);
	P->p++;
	skip_ws(P);
	if (P->p < P->end && *P->p == ']') {
		P->p++;
		return arr;
	}
	while ((v = parse_value(P, parent))) {
		cJSON_AddItemToArray(arr, v);
		skip_ws(P);
		if (P->p < P->end && *P->p == ',') {
			P->p++;
			continue;
		}
		if (P->p < P->end && *P->p == ']') {
			P->p++;
			return arr;
		}
		zn_json_fail(P, P->p, "%s inside an array where a ',' or ']' should be",
			     zn_json_describe(P, P->p, buf, sizeof(buf)));
		break;
	}
	cJSON_Delete(arr);
	return NULL;
}

static cJSON *parse_value(struct zn_json_parser *P, const char *parent)
{
	cJSON *v;

	skip_ws(P);
	if (P->p >= P->end)
		return zn_json_fail(P, P->p, "the text ends where a value should be");
	switch (*P->p) {
	case '"':
		return parse_string_value(P);
	case '{':
	case '[':
		if (P->depth >= ZN_JSON_MAX_DEPTH)
			return zn_json_fail(P, P->p, "nested deeper than %d levels",
					    ZN_JSON_MAX_DEPTH);
		P->depth++;
		v = *P->p == '{' ? parse_object(P, parent) : parse_array(P, parent);
		P->depth--;
		return v;
	default:
		if (*P->p == '-' || (*P->p >= '0' && *P->p <= '9'))
			return parse_number(P);
		return parse_literal(P);
	}
}

int zn_json_parse(const char *text, size_t len, const struct zn_json_opts *opts, cJSON **out)
{
	static const struct zn_json_opts none;
	struct zn_json_parser P = { .text = (zn_json_pos)text, .p = (zn_json_pos)text,
				    .end = (zn_json_pos)text + len, .o = opts ? opts : &none };
	unsigned long long line, col;
	char buf[16];
	cJSON *v = NULL;

	*out = NULL;
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
		zn_json_fail(&P, P.p, "the text starts with a UTF-8 byte-order mark: save it "
			     "without one (Python's json refuses it too)");
	else
		v = parse_value(&P, NULL);
	skip_ws(&P);
	if (v && P.p < P.end)
		zn_json_fail(&P, P.p, "%s after the JSON value: only white space may follow it%s",
			     zn_json_describe(&P, P.p, buf, sizeof(buf)),
			     *P.p ? "" : " (JSON is padded with spaces, never NUL bytes)");
	if (P.rc) {
		cJSON_Delete(v);
		return P.rc;
	}
	if (P.dups && !(P.o->flags & ZN_JSON_QUIET_DUP)) {
		position(&P, P.dup_at, &line, &col);
		zn_warn("%s:%llu:%llu: key \"%s\" repeats in one object%s: the last value is "
			"used, as Python's json does", origin(&P), line, col, P.dup_key,
			P.dups > 1 ? " (so do other keys)" : "");
	}
	*out = v;
	return 0;
}
