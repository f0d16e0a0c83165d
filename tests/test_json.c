/* The JSON reader (src/core/json.h) against Python's json module: repeated keys take the
 * last value in the first place, strings carry their length through \u0000, and what
 * Python refuses (raw control characters, NUL bytes, text after the value, a BOM, leading
 * zeros, trailing commas) is refused with the line and column. The expected values are
 * Python 3's json.loads results for the same text. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"

static cJSON *parse(const char *text, size_t len, unsigned flags)
{
	struct zn_json_opts o = { .origin = "t.json", .flags = flags };
	cJSON *root = NULL;
	int rc = zn_json_parse(text, len, &o, &root);

	cr_assert((rc == 0) == (root != NULL), "rc %d with tree %p", rc, (void *)root);
	return root;
}

static char *stderr_text(void)
{
	static char buf[8192];
	FILE *f = cr_get_redirected_stderr();
	size_t n;

	fflush(stderr);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	return buf;
}

static const char *key_order(const cJSON *obj, char *buf, size_t n)
{
	const cJSON *c;
	size_t at = 0;

	buf[0] = 0;
	cJSON_ArrayForEach(c, obj)
		at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? "," : "", c->string);
	return buf;
}

/* json.loads('{"a":1,"b":2,"a":3}') == {'a': 3, 'b': 2}: the last value, the first place */
Test(json, repeated_key_takes_the_last_value_in_the_first_place, .init = cr_redirect_stderr)
{
	const char *t = "{\"a\": 1, \"b\": 2, \"a\": 3}";
	cJSON *r = parse(t, strlen(t), 0);
	char order[64];

	cr_assert_not_null(r);
	cr_assert_str_eq(key_order(r, order, sizeof(order)), "a,b");
	cr_assert_eq(cJSON_GetObjectItemCaseSensitive(r, "a")->valuedouble, 3);
	cr_assert_eq(cJSON_GetArraySize(r), 2);
	cJSON_Delete(r);
	cr_assert(strstr(stderr_text(), "t.json:1:18: key \"a\" repeats"), "no warning");
}

/* {'o': {'y': 2}, 'p': 0}: a repeated object replaces the first, never merges into it */
Test(json, repeated_object_replaces_the_first_whole, .init = cr_redirect_stderr)
{
	const char *t = "{\"o\": {\"x\": 1}, \"p\": 0, \"o\": {\"y\": 2}}";
	cJSON *r = parse(t, strlen(t), 0), *o;
	char order[64];

	cr_assert_not_null(r);
	cr_assert_str_eq(key_order(r, order, sizeof(order)), "o,p");
	o = cJSON_GetObjectItemCaseSensitive(r, "o");
	cr_assert_str_eq(key_order(o, order, sizeof(order)), "y");
	cr_assert_eq(cJSON_GetObjectItemCaseSensitive(o, "y")->valuedouble, 2);
	cJSON_Delete(r);
}

/* past SMALL_OBJECT members the keys are found through a hash table: same rule */
Test(json, repeated_key_in_a_large_object, .init = cr_redirect_stderr)
{
	char t[4096];
	size_t at = 0;
	cJSON *r;

	at += (size_t)snprintf(t + at, sizeof(t) - at, "{");
	for (int i = 0; i < 200; i++)
		at += (size_t)snprintf(t + at, sizeof(t) - at, "\"k%d\": %d, ", i, i);
	at += (size_t)snprintf(t + at, sizeof(t) - at, "\"k7\": \"seven\", \"k150\": [150]}");
	r = parse(t, at, ZN_JSON_QUIET_DUP);
	cr_assert_not_null(r);
	cr_assert_eq(cJSON_GetArraySize(r), 200);
	cr_assert_str_eq(cJSON_GetArrayItem(r, 7)->valuestring, "seven");
	cr_assert(cJSON_IsArray(cJSON_GetArrayItem(r, 150)));
	cr_assert_eq(cJSON_GetArrayItem(r, 199)->valuedouble, 199);
	cJSON_Delete(r);
	cr_assert_str_eq(stderr_text(), "", "ZN_JSON_QUIET_DUP still warned");
}

static const char *refuse_inner(void *arg, int depth, const char *parent, const char *key)
{
	(void)arg;
	(void)key;
	return depth == 2 && strcmp(parent, "keep") ? "not here" : NULL;
}

Test(json, dup_callback_refuses_by_depth_and_parent, .init = cr_redirect_stderr)
{
	struct zn_json_opts o = { .origin = "h", .dup = refuse_inner };
	const char *ok = "{\"t\": 1, \"t\": 2, \"keep\": {\"m\": 1, \"m\": 2}}";
	const char *bad = "{\"x\": {\"dtype\": 1,\n \"dtype\": 2}}";
	cJSON *r = NULL;

	cr_assert_eq(zn_json_parse(ok, strlen(ok), &o, &r), 0);
	cr_assert_eq(cJSON_GetObjectItemCaseSensitive(
			     cJSON_GetObjectItemCaseSensitive(r, "keep"), "m")->valuedouble, 2);
	cJSON_Delete(r);
	cr_assert_eq(zn_json_parse(bad, strlen(bad), &o, &r), -EINVAL);
	cr_assert_null(r);
	cr_assert(strstr(stderr_text(), "h:2:2: key \"dtype\" repeats in one object: not here"));
}

/* json.loads('"a\\u0000b"') == 'a\x00b': three characters, with ZN_JSON_NUL_OK */
Test(json, nul_escape_keeps_the_length_when_allowed, .init = cr_redirect_stderr)
{
	const char *t = "{\"text\": \"a\\u0000b\\u00e9\"}";
	cJSON *r = parse(t, strlen(t), ZN_JSON_NUL_OK);
	const char *s;
	size_t n = 0;

	cr_assert_not_null(r);
	s = zn_json_string(cJSON_GetObjectItemCaseSensitive(r, "text"), &n);
	cr_assert_eq(n, 5);
	cr_assert_eq(memcmp(s, "a\0b\xc3\xa9", 5), 0);
	cJSON_Delete(r);
	cr_assert_null(parse(t, strlen(t), 0), "\\u0000 accepted without ZN_JSON_NUL_OK");
	cr_assert(strstr(stderr_text(), "t.json:1:12: \\u0000 (NUL) in a string"));
	t = "{\"a\\u0000b\": 1}";
	cr_assert_null(parse(t, strlen(t), ZN_JSON_NUL_OK), "\\u0000 accepted in a key");
}

Test(json, string_made_in_memory_has_its_strlen)
{
	cJSON *s = cJSON_CreateString("abc");
	size_t n = 0;

	cr_assert_str_eq(zn_json_string(s, &n), "abc");
	cr_assert_eq(n, 3);
	cr_assert_null(zn_json_string(NULL, &n));
	cJSON_Delete(s);
}

struct bad {
	const char *text;
	size_t len; /* 0: strlen */
	const char *where_what;
};

/* each refused by Python's json.loads too (NaN and Infinity aside: zinc refuses them) */
static const struct bad bad_texts[] = {
	{ "{\"text\": \"a\0b\"}", 15, "t.json:1:12: a NUL byte inside a string" },
	{ "{\"a\": 1}\0\0\0", 11, "t.json:1:9: a NUL byte after the JSON value" },
	{ "{\"a\": 1}  x", 0, "t.json:1:11: 'x' after the JSON value" },
	{ "{\"a\": \"tab\there\"}", 0, "t.json:1:11: control character 0x09 inside a string" },
	{ "{\"a\":\n 01}", 0, "t.json:2:2: a number with a leading zero" },
	{ "[1, 2,]", 0, "t.json:1:7: ']' where a value should be" },
	{ "{\"a\": 1,}", 0, "t.json:1:9: '}' where a key in double quotes should be" },
	{ "{\"a\": NaN}", 0, "t.json:1:7: NaN and Infinity are not JSON" },
	{ "[-Infinity]", 0, "t.json:1:2: Infinity is not JSON" },
	{ "\xef\xbb\xbf{}", 0, "t.json:1:1: the text starts with a UTF-8 byte-order mark" },
	{ "[\"\xc3\x28\"]", 0, "t.json:1:3: invalid UTF-8 (byte 0xc3)" },
	{ "[\"\xc0\xaf\"]", 0, "t.json:1:3: invalid UTF-8 (byte 0xc0)" },
	{ "[\"\xed\xa0\x80\"]", 0, "t.json:1:3: invalid UTF-8 (byte 0xed)" },
	{ "[\"\\ud800\"]", 0, "t.json:1:3: \\ud800 is half of a UTF-16 surrogate pair" },
	{ "[\"\\udc00\\ud800\"]", 0, "t.json:1:3: \\udc00 is half of a UTF-16 surrogate" },
	{ "[\"\\x41\"]", 0, "t.json:1:3: invalid escape" },
	{ "{\"a\" 1}", 0, "t.json:1:6: '1' after the key \"a\" where a ':' should be" },
	{ "[1 2]", 0, "t.json:1:4: '2' inside an array where a ',' or ']' should be" },
	{ "{\"a\": \"open", 0, "t.json:1:7: a string that never ends" },
	{ "", 0, "t.json:1:1: the text ends where a value should be" },
	{ "[1.]", 0, "t.json:1:4: a digit must follow the decimal point" },
	{ "[1e+]", 0, "t.json:1:5: the number's exponent has no digits" },
	{ "[+1]", 0, "t.json:1:2: '+' where a value should be" },
};

Test(json, refuses_what_python_refuses_with_line_and_column, .init = cr_redirect_stderr)
{
	for (size_t i = 0; i < sizeof(bad_texts) / sizeof(bad_texts[0]); i++) {
		const struct bad *b = &bad_texts[i];
		cJSON *r = parse(b->text, b->len ? b->len : strlen(b->text), ZN_JSON_NUL_OK);

		cr_expect_null(r, "case %zu accepted", i);
		cJSON_Delete(r);
	}
	{
		const char *err = stderr_text();

		for (size_t i = 0; i < sizeof(bad_texts) / sizeof(bad_texts[0]); i++)
			cr_expect(strstr(err, bad_texts[i].where_what),
				  "case %zu: no \"%s\" in:\n%s", i, bad_texts[i].where_what, err);
	}
}

/* json.loads('"\\ud83d\\ude00"').encode() == b'\xf0\x9f\x98\x80'; escapes as Python */
Test(json, escapes_and_surrogate_pairs_decode_as_python)
{
	const char *t = "[\"\\ud83d\\ude00\", \"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\xe2\x82\xac\"]";
	cJSON *r = parse(t, strlen(t), 0);

	cr_assert_not_null(r);
	cr_assert_str_eq(cJSON_GetArrayItem(r, 0)->valuestring, "\xf0\x9f\x98\x80");
	cr_assert_str_eq(cJSON_GetArrayItem(r, 1)->valuestring, "\"\\/\b\f\n\r\t");
	cr_assert_str_eq(cJSON_GetArrayItem(r, 2)->valuestring, "\xe2\x82\xac");
	cJSON_Delete(r);
}

/* Python's int for integer literals: exact past 2^53; 5.0 and 1e3 are floats */
Test(json, integers_read_exactly_from_the_literal)
{
	const char *t = "[5, 5.0, 1e3, 9007199254740993, -9223372036854775808, "
			"9223372036854775808, -0, 1e400]";
	cJSON *r = parse(t, strlen(t), 0);
	int64_t v = 0;

	cr_assert_not_null(r);
	cr_assert_eq(zn_json_int(cJSON_GetArrayItem(r, 0), 0, 10, &v), 0);
	cr_assert_eq(v, 5);
	cr_assert_eq(zn_json_int(cJSON_GetArrayItem(r, 0), 6, 10, &v), -ERANGE);
	cr_assert_eq(zn_json_int(cJSON_GetArrayItem(r, 1), 0, 10, &v), -EDOM);
	cr_assert_eq(zn_json_int(cJSON_GetArrayItem(r, 2), 0, 10000, &v), -EDOM);
	cr_assert_eq(zn_json_int(cJSON_GetArrayItem(r, 3), 0, INT64_MAX, &v), 0);
	cr_assert_eq(v, 9007199254740993ll);
	cr_assert_eq(zn_json_int(cJSON_GetArrayItem(r, 4), INT64_MIN, 0, &v), 0);
	cr_assert_eq(v, INT64_MIN);
	cr_assert_eq(zn_json_int(cJSON_GetArrayItem(r, 5), 0, INT64_MAX, &v), -ERANGE);
	cr_assert_eq(zn_json_int(cJSON_GetArrayItem(r, 6), -1, 1, &v), 0);
	cr_assert_eq(v, 0);
	cr_assert(cJSON_GetArrayItem(r, 7)->valuedouble > 1e308, "1e400 is inf, as float()");
	cr_assert_eq(zn_json_int(cJSON_GetArrayItem(r, 7), 0, INT64_MAX, &v), -EDOM);
	cJSON_Delete(r);
}

Test(json, nesting_limit, .init = cr_redirect_stderr)
{
	char t[2 * ZN_JSON_MAX_DEPTH + 4];
	cJSON *r;

	memset(t, '[', ZN_JSON_MAX_DEPTH);
	memset(t + ZN_JSON_MAX_DEPTH, ']', ZN_JSON_MAX_DEPTH);
	r = parse(t, 2 * ZN_JSON_MAX_DEPTH, 0);
	cr_assert_not_null(r, "%d levels refused", ZN_JSON_MAX_DEPTH);
	cJSON_Delete(r);
	memset(t, '[', ZN_JSON_MAX_DEPTH + 1);
	memset(t + ZN_JSON_MAX_DEPTH + 1, ']', ZN_JSON_MAX_DEPTH + 1);
	cr_assert_null(parse(t, 2 * ZN_JSON_MAX_DEPTH + 2, 0));
	cr_assert(strstr(stderr_text(), "nested deeper than 256 levels"));
}

/* what the tree holds prints back as cJSON prints it: the literal rides along unseen */
Test(json, tree_prints_and_duplicates_as_cjson)
{
	const char *t = "{\"n\": 1.5, \"s\": \"x\", \"b\": [true, false, null]}";
	cJSON *r = parse(t, strlen(t), 0), *d;
	char *out;

	cr_assert_not_null(r);
	out = cJSON_PrintUnformatted(r);
	cr_assert_str_eq(out, "{\"n\":1.5,\"s\":\"x\",\"b\":[true,false,null]}");
	d = cJSON_Duplicate(r, 1);
	cr_assert(cJSON_Compare(r, d, 1));
	cJSON_free(out);
	cJSON_Delete(d);
	cJSON_Delete(r);
}
