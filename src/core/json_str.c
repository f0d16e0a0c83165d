/* JSON strings for the JSON reader (json.c): escapes decoded (surrogate pairs joined, a
 * lone half refused), UTF-8 checked, \u0000 refused unless the reader takes it. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/json_impl.h"
#include "core/utf8.h"

static int hex4(zn_json_pos s)
{
	int v = 0;

	for (int i = 0; i < 4; i++) {
		int c = s[i], d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		v = v << 4 | d;
	}
	return v;
}

static size_t put_utf8(char *out, unsigned cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* \uXXXX at s (s points at the 'u', q at the closing quote) -> a code point, surrogate
 * pairs joined; *used: the bytes after the backslash. -1 when refused (logged). */
static long unicode_escape(struct zn_json_parser *P, zn_json_pos s, zn_json_pos q, bool key,
			   size_t *used)
{
	int hi = q - s >= 5 ? hex4(s + 1) : -1, lo;
	const char *half = NULL;

	*used = 5;
	if (hi < 0) {
		zn_json_fail(P, s - 1, "\\u must be followed by 4 hex digits");
		return -1;
	}
	if (hi >= 0xdc00 && hi <= 0xdfff)
		half = "first";
	if (hi >= 0xd800 && hi <= 0xdbff) {
		lo = q - s >= 11 && s[5] == '\\' && s[6] == 'u' ? hex4(s + 7) : -1;
		if (lo >= 0xdc00 && lo <= 0xdfff) {
			*used = 11;
			return 0x10000 + ((long)(hi - 0xd800) << 10) + (lo - 0xdc00);
		}
		half = "second";
	}
	if (half) {
		zn_json_fail(P, s - 1, "\\u%04x is half of a UTF-16 surrogate pair without its %s "
			     "half: JSON text must be valid Unicode", hi, half);
		return -1;
	}
	if (hi == 0 && key) {
		zn_json_fail(P, s - 1, "\\u0000 (NUL) in a key: zinc takes no NUL in a key");
		return -1;
	}
	if (hi == 0 && !(P->o->flags & ZN_JSON_NUL_OK)) {
		zn_json_fail(P, s - 1, "\\u0000 (NUL) in a string: this file's reader takes no "
			     "NUL in a string (remove it)");
		return -1;
	}
	return hi;
}

/* One escape sequence at s (after the backslash) into out; returns the bytes written, or
 * 0 when refused (logged). *used: the bytes of s taken. */
static size_t escape(struct zn_json_parser *P, zn_json_pos s, zn_json_pos q, bool key,
		     char *out, size_t *used)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *e = *s ? strchr(from, *s) : NULL;
	char buf[16];
	long cp;

	*used = 1;
	if (e) {
		*out = to[e - from];
		return 1;
	}
	if (*s != 'u') {
		zn_json_fail(P, s - 1, "invalid escape: a backslash followed by %s (write \\\\ for "
			     "a backslash)", zn_json_describe(P, s, buf, sizeof(buf)));
		return 0;
	}
	cp = unicode_escape(P, s, q, key, used);
	return cp < 0 ? 0 : put_utf8(out, (unsigned)cp);
}

/* The run of non-ASCII bytes at s (before q) into out, checked as whole UTF-8 characters;
 * returns its length, or 0 when refused (logged). */
static size_t copy_utf8(struct zn_json_parser *P, zn_json_pos s, zn_json_pos q, char *out)
{
	zn_json_pos r = s;
	bool bad;
	size_t ok;

	while (r < q && *r >= 0x80)
		r++;
	/* the run ends at an ASCII byte, which cannot continue a character: a partial
	 * character at its end is as invalid as a bad byte */
	ok = zn_utf8_prefix(s, (size_t)(r - s), &bad);
	if (ok != (size_t)(r - s)) {
		zn_json_fail(P, s + ok, "invalid UTF-8 (byte 0x%02x): JSON text must be UTF-8",
			     s[ok]);
		return 0;
	}
	memcpy(out, s, ok);
	return ok;
}

char *zn_json_parse_string(struct zn_json_parser *P, bool key, size_t *len)
{
	zn_json_pos start = P->p + 1, q = start, s;
	char *out;
	size_t n = 0, w, used = 0;

	/* the closing quote first: the decoded string is never longer than its source */
	while (q < P->end && *q != '"') {
		if (*q == '\\' && q + 1 < P->end)
			q++;
		q++;
	}
	if (q >= P->end) {
		zn_json_fail(P, P->p, "a string that never ends (its closing '\"' is missing)");
		return NULL;
	}
	out = cJSON_malloc((size_t)(q - start) + 1);
	if (!out) {
		zn_json_oom(P);
		return NULL;
	}
	for (s = start; s < q; s += used) {
		if (*s == '\\') {
			w = escape(P, s + 1, q, key, out + n, &used);
			used++;
		} else if (*s < 0x20) {
			if (!*s)
				zn_json_fail(P, s, "a NUL byte inside a string: JSON text holds no "
					     "NUL byte");
			else
				zn_json_fail(P, s, "control character 0x%02x inside a string: JSON "
					     "needs it escaped (\\u%04x)", *s, *s);
			w = 0;
		} else if (*s < 0x80) {
			out[n] = (char)*s;
			w = used = 1;
		} else {
			w = used = copy_utf8(P, s, q, out + n);
		}
		if (!w) {
			cJSON_free(out);
			return NULL;
		}
		n += w;
	}
	out[n] = 0;
	*len = n;
	P->p = q + 1;
	return out;
}
